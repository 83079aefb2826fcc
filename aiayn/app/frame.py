"""The page frame: ``app.py`` runs :func:`run_app` on every page (Streamlit's multipage "picture frame"): page
config, the sidebar (links to every page and the shared settings: translation direction, presenter mode, chart
download format, bound to the URL) and then the page, which gets the :class:`PageContext` from
:func:`setup_page`. Not a paper section: the app's layout job.

Navigation is ``st.navigation`` with every page of :data:`PAGES` (position hidden; the sidebar links are drawn here
with ``st.page_link``). With a ``pages/`` folder beside the entry script a freshly started server begins in
Streamlit's legacy mode, where the first request to a sub-page runs that page without this frame (streamlit issues
#8860, #9992, #9624); such a run switches the mode off and reruns (:func:`_leave_pages_directory_mode`). ``AppTest``
does not reproduce that case; ``tests/e2e/test_frame.py`` tests it against a fresh server.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st
from streamlit.errors import StreamlitAPIException
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner_utils.exceptions import StopException

import plotly.io as pio

from ..figures.theme import PRESENTER_FONT_SIZE
from .charts import EXPORT_FORMATS
from .model_picker import model_picker
from .models import (
    DEFAULT_DIRECTION,
    DIRECTION_LABELS,
    DIRECTIONS,
    ModelUnavailable,
    announce_sentence,
    checkpoint_path,
    load_translator,
    served_precision,
    withdraw_sentence,
)
from .params import is_bool, warn_bad_param
from .state import link_params

#: (script path relative to the repository root, label, icon) of every page, in sidebar order. Icons are
#: Streamlit Material icons (shipped with Streamlit), never emoji: a classroom machine without an emoji font
#: would show an empty box.
PAGES: list[tuple[str, str, str]] = [
    ("pages/0_Overview.py", "Overview", ":material/home:"),
    ("pages/1_Translate.py", "Translate", ":material/translate:"),
    ("pages/2_Attention_Explorer.py", "Attention explorer", ":material/search:"),
    ("pages/3_Positional_Encoding.py", "Positional encoding", ":material/waves:"),
    ("pages/4_Masking.py", "Masking", ":material/visibility_off:"),
    ("pages/5_Scaled_Dot_Product.py", "Scaled dot-product", ":material/functions:"),
    ("pages/6_Model_and_Training.py", "Model and training", ":material/monitoring:"),
    ("pages/7_Head_Ablation.py", "Head ablation", ":material/block:"),
    ("pages/8_Attention_Rollout.py", "Attention rollout", ":material/account_tree:"),
    ("pages/9_Compare_Sentences.py", "Compare sentences", ":material/compare_arrows:"),
    ("pages/10_Figure_1.py", "Figure 1, walked", ":material/schema:"),
    ("pages/11_Alignment_and_Attribution.py", "Alignment and attribution", ":material/join_inner:"),
]
#: pages whose run asks the model for a free-running sentence (a class's pages): the frame announces it when the run
#: starts (:func:`aiayn.app.models.announce_sentence`), so that the decode queue gathers the class into one batch
ANNOUNCING_PAGES = frozenset({"pages/1_Translate.py", "pages/2_Attention_Explorer.py"})
#: the repository root (page paths in :data:`PAGES` are relative to it)
REPO_ROOT = Path(__file__).resolve().parents[2]

#: the favicon of pages whose icon is a Material icon (see :func:`setup_page`)
FAVICON = REPO_ROOT / "assets" / "favicon.png"

#: heatmap colour scales: perceptually uniform and colour-blind-safe in both modes.
COLORSCALE = "Viridis"
PRESENTER_COLORSCALE = "Cividis"

# Presenter mode's page CSS. The main column's side padding shrinks (5rem of 20 px each side took 200 px from the
# charts); typed text grows with the body text; labels wrap instead of being cut with an ellipsis in a narrow
# column; a metric's number (a markdown paragraph too, so the paragraph rule would shrink it to body size) stays
# twice its label's size.
_PRESENTER_CSS = f"""
<style>
html {{ font-size: {PRESENTER_FONT_SIZE}px; }}
[data-testid="stMainBlockContainer"] {{ padding-left: 1.5rem; padding-right: 1.5rem; padding-top: 4rem; }}
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li {{ font-size: 1.15rem; }}
[data-testid="stWidgetLabel"] p {{ font-size: 1.05rem; }}
[data-testid="stWidgetLabel"], [data-testid="stWidgetLabel"] *, [data-testid="stMetricLabel"],
[data-testid="stMetricLabel"] * {{ white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; overflow-wrap: anywhere; }}
[data-testid="stMetricLabel"] p {{ font-size: 1rem; }}
[data-testid="stMetricValue"] p, [data-testid="stMetricValue"] div {{ font-size: 2rem; }}
[data-testid="stTextInput"] input, [data-testid="stTextArea"] textarea {{ font-size: 1.15rem; }}
[data-testid="stSidebar"] [data-testid="stPageLink"] p {{ font-size: 0.8rem; }}
</style>
"""


#: Back after a page change must return to the view the user left. On a click on a link to another page, Streamlit's
#: frontend (1.67) first drops the departing page's bound URL parameters and pushes that stripped URL as a history
#: entry of the old page, then pushes the new page: Back landed on the old page without its view (the explorer's
#: head 4 came back as "mean over heads"). This script, installed once per browser tab, skips a push to the page
#: being left while a click on a link to another page is under way, so the old page's entry keeps its full URL.
_KEEP_VIEW_ON_PAGE_CHANGE_JS = """
<script>
(() => {
  const w = window.parent || window;
  if (w.__aiaynKeepView) return;
  w.__aiaynKeepView = true;
  let leaving = null;  // {from: pathname, until: ms}
  w.document.addEventListener("click", (e) => {
    const a = e.target.closest && e.target.closest("a[href]");
    if (a && a.origin === w.location.origin && a.pathname !== w.location.pathname) {
      leaving = {from: w.location.pathname, until: Date.now() + 10000};
    }
  }, true);
  const push = w.history.pushState.bind(w.history);
  w.history.pushState = (state, title, url) => {
    const to = url == null ? w.location.pathname : new URL(url, w.location.href).pathname;
    if (leaving && Date.now() < leaving.until && to === leaving.from && w.location.pathname === leaving.from) {
      return undefined;  // the stripped URL of the page being left
    }
    if (to !== w.location.pathname) leaving = null;
    return push(state, title, url);
  };
})();
</script>
"""

@dataclass
class PageContext:
    """What a page needs from the frame. Built by :func:`setup_page`.

    Attributes:
        direction: ``"en-de"`` or ``"de-en"``, shared by all pages and bound to the URL (``?direction=``).
        presenter: presenter mode (large type, colour-blind-safe scales), ``?presenter=true``.
        colorscale: plotly colour scale name for heatmaps (:data:`COLORSCALE` or :data:`PRESENTER_COLORSCALE`).
        template: plotly template matching Streamlit's light/dark theme (``"plotly_white"``/``"plotly_dark"``);
            charts drawn with :func:`aiayn.app.charts.show_figure` follow the live theme anyway.
    """

    direction: str
    presenter: bool
    colorscale: str
    template: str

    @property
    def src_lang(self) -> str:
        """Source language code (``"en"`` for ``"en-de"``)."""
        return self.direction.split("-")[0]

    @property
    def tgt_lang(self) -> str:
        """Target language code (``"de"`` for ``"en-de"``)."""
        return self.direction.split("-")[1]

    @property
    def checkpoint(self) -> Path:
        """Checkpoint directory of :attr:`direction` (:func:`aiayn.app.models.checkpoint_path`)."""
        return checkpoint_path(self.direction)

    def translator_or_none(self):
        """The Translator, or None when the checkpoint cannot be loaded (no message shown)."""
        try:
            return load_translator(self.direction)
        except ModelUnavailable:
            return None

    @property
    def translator(self):
        """The Translator of :attr:`direction`, loaded lazily once per process; on failure shows ``st.error``
        naming the file at fault and stops the page (``st.stop()``), so pages never see a traceback."""
        try:
            return load_translator(self.direction)
        except ModelUnavailable as exc:
            st.error(
                f"**The {DIRECTION_LABELS[self.direction]} model could not be loaded.** {exc}\n\n"
                f"Expected a checkpoint directory at `{self.checkpoint}` with `config.json`, "
                "`model.safetensors` and `spm.model` (train one with `aiayn train`, or set "
                "`AIAYN_CHECKPOINTS` to a directory holding `en-de/` and `de-en/`).",
                icon=":material/block:",
            )
            st.stop()


#: the app's light-theme plotly template, made plotly's default in the server process: a figure then gets it when
#: it is made, without the validation a template set by name costs (aiayn.figures.theme.use_template)
LIGHT_TEMPLATE, DARK_TEMPLATE = "plotly_white", "plotly_dark"
pio.templates.default = LIGHT_TEMPLATE


def _theme_type() -> str:
    try:
        t = st.context.theme.type
    except Exception:  # noqa: BLE001 - no theme information (bare mode, old browser)
        t = None
    return t if t in ("light", "dark") else "light"


#: per-thread: the PageContext the frame built for the script run now in progress (set only while the frame's
#: page runs; each session's script run has a thread of its own)
_RUN = threading.local()


def run_app() -> None:
    """The frame (``app.py``): one script that runs on every page and then runs the page. Sets the page config,
    registers every page of :data:`PAGES` with ``st.navigation`` (hidden: the sidebar links are drawn here, so
    each carries its page's last view, :func:`aiayn.app.state.link_params`), draws the sidebar (links and shared
    settings, bound to the URL) and runs the page the URL names, which gets the frame's :class:`PageContext` from
    :func:`setup_page`; the links are drawn again when the page changed its own view.

    The settings' widgets are created by this script, not by a page, so their state and their URL parameters
    (``direction``, ``presenter``, ``export``) survive every page change, Back and Forward (Streamlit's
    multipage "picture frame").
    """
    _leave_pages_directory_mode()
    _page_config("aiayn", ":material/home:")
    pages = {path: st.Page(path, title=label, icon=icon, default=i == 0)
             for i, (path, label, icon) in enumerate(PAGES) if page_exists(path)}
    page = st.navigation(list(pages.values()), position="hidden")
    if next((path for path, p in pages.items() if p is page), None) in ANNOUNCING_PAGES:
        announce_sentence(_announced_checkpoint())  # before the sidebar and the page's set-up: a gathering class
        # of the same model waits for this one
    _RUN.pages = pages
    try:
        _RUN.ctx = frame_sidebar()
        _run_page(page)
    finally:
        withdraw_sentence()
        _RUN.pages = None


def _announced_checkpoint() -> str | None:
    """The checkpoint (its path, as :func:`aiayn.app.models.checkpoint_path` names it and the decode queue is keyed)
    this run's sentence will go to, told before the sidebar binds the settings: the direction and model from the
    session's state, else the URL. None if it cannot be told (every model's queue then waits for the run)."""
    try:
        direction = st.session_state.get("direction") or st.query_params.get("direction")
        return str(checkpoint_path(direction if direction in DIRECTIONS else DEFAULT_DIRECTION))
    except Exception:  # noqa: BLE001 - an announcement is only a hint: never fail the page for it
        return None


def _run_page(page) -> None:
    """Run ``page`` (a ``st.Page``) inside the frame, then draw the sidebar's links again."""
    try:
        page.run()
    except StopException:  # the page stopped early (st.stop) after drawing what it could
        _redraw_links()
        raise
    else:
        _redraw_links()
    finally:
        _RUN.ctx = _RUN.links = _RUN.drawn = _RUN.link_handles = None


def _leave_pages_directory_mode() -> None:
    """Streamlit decides once per server process whether the app uses the legacy ``pages/`` folder (a folder of
    that name beside the entry script) and keeps doing so until the first ``st.navigation`` call: on a freshly
    started server the first request to a sub-page runs that page alone, without this frame (its settings and
    their URL parameters lost). A run in that mode switches it off for the process and reruns, so the frame
    runs and picks the same page (the page's URL path is the same in both modes); nothing has been drawn yet."""
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def _page_config(title: str, icon: str) -> None:
    try:
        # A Material icon as page_icon makes the browser fetch its favicon from Google's font CDN; the app is
        # offline, so those pages use the shipped favicon instead (the icon still shows in the title).
        page_icon = str(FAVICON) if icon.startswith(":material/") and FAVICON.is_file() else icon
        st.set_page_config(page_title=title, page_icon=page_icon, layout="wide", initial_sidebar_state="expanded")
    except StreamlitAPIException:  # an older Streamlit allows one call per run
        pass


def frame_sidebar() -> PageContext:
    """Draw the sidebar: links to every page of :data:`PAGES` (``st.page_link`` carrying the page's last view;
    Streamlit carries the settings, bound to the URL), then the shared settings (after warning about invalid URL
    values), and the presenter CSS.

    Returns:
        the :class:`PageContext` of the settings.
    """
    nav = st.sidebar.container()
    settings = st.sidebar.container()
    with settings:
        st.divider()
        # Validate raw URL values first: bound widgets drop invalid values silently.
        with st.container():
            warn_bad_param("direction", DIRECTIONS, f"the direction must be one of {', '.join(DIRECTIONS)}")
            warn_bad_param("presenter", is_bool, "presenter must be true or false")
            warn_bad_param("export", EXPORT_FORMATS, "the chart download format must be png or svg")
        direction = st.radio(
            "Translation direction",
            DIRECTIONS,
            index=DIRECTIONS.index(DEFAULT_DIRECTION),
            captions=[DIRECTION_LABELS[d] for d in DIRECTIONS],
            key="direction",
            bind="query-params",
            help="Shared by all pages and kept in the URL, so a link reproduces the view.",
        )
        model_picker(direction if direction in DIRECTIONS else DEFAULT_DIRECTION)
        _precision_note(direction if direction in DIRECTIONS else DEFAULT_DIRECTION)
        presenter = st.toggle(
            "Presenter mode",
            key="presenter",
            bind="query-params",
            help="Large type and the colour-blind-safe cividis scale, for a projector.",
        )
        export_format = st.radio(
            "Download charts as",
            EXPORT_FORMATS,
            horizontal=True,
            key="export",
            bind="query-params",
            help="The chart download format: what the camera button in each chart's toolbar downloads (rendered "
                 "in your browser).",
        )
    direction = direction if direction in DIRECTIONS else DEFAULT_DIRECTION
    presenter = bool(presenter)
    export_format = export_format if export_format in EXPORT_FORMATS else "png"

    _RUN.links = nav.empty()
    _RUN.drawn = _draw_links(_RUN.links)
    with nav:
        st.html(_KEEP_VIEW_ON_PAGE_CHANGE_JS, unsafe_allow_javascript=True, width="content")
    if presenter:
        st.html(_PRESENTER_CSS)
    return PageContext(
        direction=direction,
        presenter=presenter,
        colorscale=PRESENTER_COLORSCALE if presenter else COLORSCALE,
        template=DARK_TEMPLATE if _theme_type() == "dark" else LIGHT_TEMPLATE,
    )


def _precision_note(direction: str) -> None:
    """Say in the sidebar when the served model's output layer does not run in float32
    (:mod:`aiayn.model.projection`: ``$AIAYN_SERVE_PROJECTION`` or the checkpoint's setting), since its translations
    can then differ from the same model's float32 ones. Read from the checkpoint's config (:func:`served_precision`):
    a page that never loads the model (the Overview) does not load it for this note."""
    precision = served_precision(direction)
    if precision not in (None, "float32"):
        st.caption(f":material/memory: The output layer runs in **{precision}** on this server (faster for a "
                   "class); a translation can differ from float32's by a word. Teacher-forced views stay float32.")


def _draw_links(where: Any) -> dict[str, dict[str, str]]:
    """The sidebar's title and a link to every page of :data:`PAGES`, each carrying the page's last view, drawn into
    the placeholder ``where`` (replacing what it held). Returns the query parameters of each link; each link's
    element is kept (``_RUN.link_handles``) so that :func:`_redraw_links` can replace it alone."""
    registered = getattr(_RUN, "pages", None)  # this run's st.Page of each existing page, under the frame
    views = {path: link_params(path) for path, _, _ in PAGES if (path in registered if registered else page_exists(path))}
    handles: dict[str, Any] = {}
    with where.container():
        st.markdown("### aiayn")
        st.caption("Attention Is All You Need, instrumented")
        for path, label, page_icon in PAGES:
            if path in views:
                handles[path] = page_link(path, label=label, icon=page_icon, query_params=views[path] or None)
    _RUN.link_handles = handles
    return views


def _redraw_links() -> None:
    """Draw again, after the page ran, the links whose page changed its own view (the link would otherwise carry
    the view of the page's previous run): each in place of its old element, the others untouched (a class's
    sessions each send a dozen fewer elements than when the whole list was drawn again)."""
    drawn, handles = getattr(_RUN, "drawn", None), getattr(_RUN, "link_handles", None) or {}
    if drawn is None:
        return
    for path, label, page_icon in PAGES:
        if path in drawn and handles.get(path) is not None and (now := link_params(path)) != drawn[path]:
            page_link(path, into=handles[path], label=label, icon=page_icon, query_params=now or None)
            drawn[path] = now


def setup_page(title: str, icon: str = ":material/smart_toy:", *, intro: str | None = None) -> PageContext:
    """A page's first Streamlit call: the page's title (browser tab and ``st.title``; pages must not repeat it)
    and the :class:`PageContext` of the frame (:func:`run_app`) that runs the page. A page run without the
    frame (a page script given to ``streamlit run`` or ``AppTest`` on its own) draws the sidebar itself; a page
    run by Streamlit's legacy ``pages/`` mode on a fresh server reruns through the frame first.

    Args:
        title: page title (browser tab and ``st.title``).
        icon: a Material icon (``":material/name:"``) shown before the title (the tab shows
            :data:`FAVICON`); an emoji still works but renders as an empty box without an emoji font.
        intro: optional one-paragraph introduction shown under the title.

    Returns:
        the :class:`PageContext`.
    """
    ctx = getattr(_RUN, "ctx", None)
    if ctx is None:
        _leave_pages_directory_mode()
    _page_config(f"{title} · aiayn", icon)
    if ctx is None:
        ctx = frame_sidebar()
    st.title(f"{icon} {title}")
    if intro:
        st.markdown(intro)
    return ctx


def page_exists(path: str) -> bool:
    """Whether a page script of :data:`PAGES` exists (relative to the working directory or the
    repository root :data:`REPO_ROOT`)."""
    return Path(path).is_file() or (REPO_ROOT / path).is_file()


def page_link(path: str, *, into: Any = None, **kwargs: Any) -> Any:
    """``st.page_link`` that shows nothing (instead of raising) when the page is unknown to this run
    (e.g. a page script run on its own as the entry point). Under the frame the link names the run's ``st.Page``
    (Streamlit then resolves no file path: a working-directory and symbolic-link look-up per link, which a class's
    sessions would queue for on one GIL). ``into``: the element of an earlier link to replace (what this function
    returned for it). Returns the link's element, or None when nothing was drawn."""
    page = (getattr(_RUN, "pages", None) or {}).get(path, path)
    try:
        return (into if into is not None else st).page_link(page, **kwargs)
    except StreamlitAPIException:
        return None


def nav_query_params(**extra: Any) -> dict[str, str]:
    """Query parameters of a link that opens a view on another page: ``extra`` as strings (None values left out).
    The shared settings (direction, presenter mode, download format) are not included: the frame's widgets are
    bound to the URL and Streamlit carries them through every navigation (a link that also named them would
    repeat them in the URL)."""
    return link_params("", extra) if extra else {}
