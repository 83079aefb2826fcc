"""Shared Streamlit page setup (the only module besides ``app.py`` / ``pages/`` that imports streamlit).

CONTRACT used by every page (owned by the app-frame work; pages must only call these):

    from aiayn import app as ui
    ctx = ui.setup_page("Attention explorer", icon="🔍")   # page config, sidebar nav, direction, presenter mode, theme
    ctx.direction            # "en-de" | "de-en", shared by all pages, bound to the URL (?direction=...)
    ctx.presenter            # bool: large type, colour-blind-safe scales
    ctx.translator           # aiayn.Translator loaded once per process (st.cache_resource) for ctx.direction
    ctx.colorscale           # plotly colour scale name to use for heatmaps
    ui.show_figure(fig, key=..., filename=...)   # st.plotly_chart with PNG/SVG export config
    ui.download_buttons(df, payload_json, stem)  # CSV + JSON download buttons
    ui.checkpoint_info(direction)                # config + metadata from config.json, no model, no torch
    ui.warm_imports()                            # import torch in the background (a page not needing it)

Page files (fixed names; the sidebar lists them in this order): see PAGES.

Details of the contract:

* ``setup_page`` must be the first Streamlit call of a page. It sets the page config (wide layout), draws
  the page title (``st.title``; pages must not repeat it), the sidebar navigation (``st.page_link`` to every
  page in :data:`PAGES`, carrying the direction and presenter mode in the URL) and the sidebar settings.
* ``ctx.translator`` is loaded lazily, on first access. When the checkpoint is missing or corrupt it shows
  an ``st.error`` naming the file at fault and stops the page (``st.stop()``), so pages never see a
  traceback. Pages that can work without a model use ``ctx.translator_or_none()``.
* The checkpoint directory is resolved at call time: ``$AIAYN_CHECKPOINTS/<direction>`` when the
  variable is set, else :func:`aiayn.translator.default_checkpoint`.
* ``ctx.template`` is the plotly template matching Streamlit's current light/dark theme; charts drawn
  with :func:`show_figure` follow the live theme anyway (``theme="streamlit"``).
* The chart toolbar's camera button downloads PNG or SVG, as picked in the sidebar ("Chart download
  format", ``?export=svg`` in the URL). Both are rendered by plotly.js in the browser: offline, no kaleido.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import streamlit as st

PAGES: list[tuple[str, str, str]] = [
    ("app.py", "Overview", "🏠"),
    ("pages/1_Translate.py", "Translate", "🌐"),
    ("pages/2_Attention_Explorer.py", "Attention explorer", "🔍"),
    ("pages/3_Positional_Encoding.py", "Positional encoding", "〰️"),
    ("pages/4_Masking.py", "Masking", "🎭"),
    ("pages/5_Scaled_Dot_Product.py", "Scaled dot-product", "✖️"),
    ("pages/6_Model_and_Training.py", "Model and training", "📈"),
]

DIRECTIONS: tuple[str, ...] = ("en-de", "de-en")
DIRECTION_LABELS = {"en-de": "English → German", "de-en": "German → English"}
DEFAULT_DIRECTION = "en-de"
EXPORT_FORMATS = ("png", "svg")
#: heatmap colour scales: perceptually uniform and colour-blind-safe in both modes.
COLORSCALE = "Viridis"
PRESENTER_COLORSCALE = "Cividis"
PRESENTER_FONT_SIZE = 20
FONT_SIZE = 13

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class ModelUnavailable(RuntimeError):
    """The checkpoint of a direction could not be loaded (message names the file at fault)."""


# -- checkpoints ----------------------------------------------------------------------------------------------
def checkpoints_dir() -> Path:
    """Directory holding ``en-de/`` and ``de-en/``: ``$AIAYN_CHECKPOINTS`` (read now) or the shipped one."""
    env = os.environ.get("AIAYN_CHECKPOINTS")
    if env:
        return Path(env)
    # Same default as aiayn.translator.CHECKPOINTS_DIR, without importing torch (the first page must not).
    return Path(__file__).resolve().parent.parent / "checkpoints"


def checkpoint_path(direction: str) -> Path:
    """Checkpoint directory of ``direction`` (``"en-de"`` or ``"de-en"``)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; choose one of {DIRECTIONS}")
    return checkpoints_dir() / direction


def _stamp(path: Path) -> str:
    """Modification stamp of a checkpoint's files, so a re-exported checkpoint is reloaded."""
    parts = []
    for name in ("config.json", "model.safetensors", "spm.model"):
        p = path / name
        try:
            st_ = p.stat()
            parts.append(f"{name}:{st_.st_mtime_ns}:{st_.st_size}")
        except OSError:
            parts.append(f"{name}:missing")
    return "|".join(parts)


@st.cache_resource(show_spinner="Loading the model (once per server process)…", max_entries=6)
def _load_translator(path: str, stamp: str):  # noqa: ARG001 - stamp is part of the cache key
    from ..translator import Translator

    return Translator.load(path)


def load_translator(direction: str):
    """The :class:`~aiayn.translator.Translator` of ``direction``, loaded once per process.

    Raises:
        ModelUnavailable: the checkpoint is missing, truncated or corrupt (message names the file).
    """
    path = checkpoint_path(direction)
    if not path.is_dir():
        raise ModelUnavailable(f"no checkpoint directory at {path}")
    try:
        return _load_translator(str(path), _stamp(path))
    except (FileNotFoundError, ValueError, OSError, RuntimeError, KeyError) as exc:
        raise ModelUnavailable(str(exc)) from None


#: files a checkpoint directory must hold (see aiayn.checkpoint); the format tag of its config.json
CHECKPOINT_FILES = ("config.json", "model.safetensors", "spm.model")
_CHECKPOINT_FORMAT = "aiayn-checkpoint"  # aiayn.checkpoint.FORMAT (that module imports torch)


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint directory says about itself, read from ``config.json`` without loading the model
    (and without importing torch): for the Overview's model card.

    Attributes:
        path: the checkpoint directory.
        cfg: the :class:`~aiayn.model.config.TransformerConfig` of ``config.json["model"]``.
        meta: ``config.json["meta"]`` plus ``num_parameters`` and ``dtype`` from the top level (as
            :meth:`aiayn.translator.Translator.load` fills ``Translator.meta``).
    """

    path: Path
    cfg: Any
    meta: dict[str, Any]


def checkpoint_info(direction: str) -> CheckpointInfo:
    """Read the checkpoint of ``direction`` from its ``config.json`` only (milliseconds; no torch).

    Checks what can be checked without loading the weights: the directory and its three files exist,
    ``config.json`` is an aiayn checkpoint config with a valid model config. A truncated weights file is
    only found when a page loads the model (:func:`load_translator`).

    Raises:
        ModelUnavailable: missing directory or file, invalid ``config.json`` (the message names the file).
    """
    from ..model.config import TransformerConfig  # plain dataclass, no torch

    path = checkpoint_path(direction)
    if not path.is_dir():
        raise ModelUnavailable(f"no checkpoint directory at {path}")
    cfg_file = path / "config.json"
    try:
        config = json.loads(cfg_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelUnavailable(f"checkpoint file missing: {cfg_file}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelUnavailable(f"{cfg_file} is not valid JSON ({exc}); the checkpoint is truncated or corrupt") from None
    if not isinstance(config, dict) or config.get("format") != _CHECKPOINT_FORMAT:
        raise ModelUnavailable(f"{cfg_file} is not an aiayn checkpoint config (expected \"format\": \"{_CHECKPOINT_FORMAT}\")")
    try:
        cfg = TransformerConfig.from_dict(config["model"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelUnavailable(f"{cfg_file}: invalid model config: {exc}") from None
    for name in CHECKPOINT_FILES[1:]:
        if not (path / name).is_file():
            raise ModelUnavailable(f"checkpoint file missing: {path / name}")
    meta = dict(config.get("meta") or {})
    meta.setdefault("num_parameters", config.get("num_parameters"))
    meta.setdefault("dtype", config.get("dtype"))
    return CheckpointInfo(path=path, cfg=cfg, meta=meta)


_WARM_LOCK = threading.Lock()
_WARM_STARTED = False


def warm_imports(delay_s: float = 0.5) -> bool:
    """Import torch and the model code in a background thread, once per process, so that the first page
    needing the model does not wait for ``import torch`` (seconds). Only imports: no Streamlit call, no
    file read, no model load. Call it at the end of a page that does not need the model.

    Returns:
        True when this call started the thread (False: already started).
    """
    global _WARM_STARTED
    with _WARM_LOCK:
        if _WARM_STARTED:
            return False
        _WARM_STARTED = True

    def _import() -> None:
        try:
            import importlib

            importlib.import_module("aiayn.translator")
        except Exception:  # noqa: BLE001 - a broken install shows up (with a message) on the model pages
            pass

    timer = threading.Timer(delay_s, _import)
    timer.name, timer.daemon = "aiayn-warm-imports", True
    timer.start()
    return True


def model_card(path: str | Path) -> str | None:
    """Text of ``MODEL_CARD.md`` in a checkpoint directory, or None."""
    p = Path(path) / "MODEL_CARD.md"
    try:
        return p.read_text(encoding="utf-8")
    except OSError:
        return None


# -- page context ---------------------------------------------------------------------------------------------
@dataclass
class PageContext:
    """What a page needs from the frame (see the module docstring). Built by :func:`setup_page`."""

    title: str
    direction: str
    presenter: bool
    colorscale: str
    template: str
    theme: str
    export_format: str
    font_size: int
    warnings: list[str] = field(default_factory=list)

    @property
    def src_lang(self) -> str:
        return self.direction.split("-")[0]

    @property
    def tgt_lang(self) -> str:
        return self.direction.split("-")[1]

    @property
    def checkpoint(self) -> Path:
        return checkpoint_path(self.direction)

    def translator_or_none(self):
        """The Translator, or None when the checkpoint cannot be loaded (no message shown)."""
        try:
            return load_translator(self.direction)
        except ModelUnavailable:
            return None

    @property
    def translator(self):
        """The Translator of :attr:`direction`; on failure shows ``st.error`` and stops the page."""
        try:
            return load_translator(self.direction)
        except ModelUnavailable as exc:
            st.error(
                f"**The {DIRECTION_LABELS[self.direction]} model could not be loaded.** {exc}\n\n"
                f"Expected a checkpoint directory at `{self.checkpoint}` with `config.json`, "
                "`model.safetensors` and `spm.model` (train one with `aiayn train`, or set "
                "`AIAYN_CHECKPOINTS` to a directory holding `en-de/` and `de-en/`).",
                icon="🚫",
            )
            st.stop()

    def layout(self, **extra: Any) -> dict[str, Any]:
        """Plotly layout defaults for this context (template, font size); ``extra`` overrides."""
        out: dict[str, Any] = {"template": self.template, "font": {"size": self.font_size}}
        out.update(extra)
        return out


def _raw_param(name: str) -> str | None:
    try:
        value = st.query_params.get(name)
    except Exception:  # noqa: BLE001 - query params unavailable (bare mode)
        return None
    return value


#: Bound widgets write ``format_func(option)`` into the URL: give them options that read well in a URL
#: (``"en-de"``, ``"3"``, ``"mean"``) and no ``format_func``.


def is_int(raw: str) -> bool:
    """True if a URL parameter parses as a whole number (a validator for :func:`warn_bad_param`)."""
    try:
        int(raw)
        return True
    except ValueError:
        return False


def is_float(raw: str) -> bool:
    """True if a URL parameter parses as a number (a validator for :func:`warn_bad_param`)."""
    try:
        float(raw)
        return True
    except ValueError:
        return False


def warn_bad_param(name: str, valid: Callable[[str], bool] | Sequence[str], explain: str) -> bool:
    """Show an ``st.warning`` when the URL parameter ``name`` is present but not valid.

    Call it *before* creating the widget bound to ``name`` (bound widgets drop invalid values from the
    URL silently). Returns True when a warning was shown.
    """
    raw = _raw_param(name)
    if raw is None:
        return False
    ok = valid(raw) if callable(valid) else raw in valid
    if not ok:
        st.warning(f"Ignored the URL parameter `{name}={raw[:40]}`: {explain}. Showing the default instead.", icon="⚠️")
        return True
    return False


def _bool_valid(raw: str) -> bool:
    return raw.lower() in _TRUE + _FALSE


def _theme_type() -> str:
    try:
        t = st.context.theme.type
    except Exception:  # noqa: BLE001
        t = None
    return t if t in ("light", "dark") else "light"


_PRESENTER_CSS = f"""
<style>
html {{ font-size: {PRESENTER_FONT_SIZE}px; }}
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li {{ font-size: 1.15rem; }}
[data-testid="stWidgetLabel"] p {{ font-size: 1.05rem; }}
[data-testid="stSidebar"] [data-testid="stPageLink"] p {{ font-size: 0.8rem; }}
</style>
"""


def setup_page(title: str, icon: str = "🤖", *, intro: str | None = None) -> PageContext:
    """Set up a page: config, title, sidebar navigation and settings (see module docstring).

    Args:
        title: page title (browser tab and ``st.title``).
        icon: emoji shown in the tab and before the title.
        intro: optional one-paragraph introduction shown under the title.

    Returns:
        the :class:`PageContext`.
    """
    try:
        st.set_page_config(page_title=f"{title} · aiayn", page_icon=icon, layout="wide", initial_sidebar_state="expanded")
    except Exception:  # noqa: BLE001 - set_page_config called twice (a page that also sets it)
        pass

    nav = st.sidebar.container()
    settings = st.sidebar.container()
    with settings:
        st.divider()
        # Validate raw URL values first: bound widgets drop invalid values silently.
        with st.container():
            warn_bad_param("direction", DIRECTIONS, f"the direction must be one of {', '.join(DIRECTIONS)}")
            warn_bad_param("presenter", _bool_valid, "presenter must be true or false")
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
        presenter = st.toggle(
            "Presenter mode",
            key="presenter",
            bind="query-params",
            help="Large type and the colour-blind-safe cividis scale, for a projector.",
        )
        export_format = st.radio(
            "Chart download format",
            EXPORT_FORMATS,
            horizontal=True,
            key="export",
            bind="query-params",
            help="What the camera button in each chart's toolbar downloads (rendered in your browser).",
        )
        st.caption(f"Checkpoints: `{checkpoints_dir()}`")
    direction = direction if direction in DIRECTIONS else DEFAULT_DIRECTION
    presenter = bool(presenter)
    export_format = export_format if export_format in EXPORT_FORMATS else "png"

    carry = nav_query_params(direction=direction, presenter=presenter, export=export_format)
    with nav:
        st.markdown("### aiayn")
        st.caption("Attention Is All You Need, instrumented")
        for path, label, page_icon in PAGES:
            if path == "app.py" or _page_exists(path):
                page_link(path, label=label, icon=page_icon, query_params=carry or None)

    theme = _theme_type()
    ctx = PageContext(
        title=title,
        direction=direction,
        presenter=presenter,
        colorscale=PRESENTER_COLORSCALE if presenter else COLORSCALE,
        template="plotly_dark" if theme == "dark" else "plotly_white",
        theme=theme,
        export_format=export_format,
        font_size=PRESENTER_FONT_SIZE if presenter else FONT_SIZE,
    )
    if presenter:
        st.html(_PRESENTER_CSS)
    st.title(f"{icon} {title}")
    if intro:
        st.markdown(intro)
    return ctx


def _page_exists(path: str) -> bool:
    """Whether a page script exists (relative to the working directory or the repository root)."""
    root = Path(__file__).resolve().parent.parent
    return Path(path).is_file() or (root / path).is_file()


def page_link(path: str, **kwargs: Any) -> None:
    """``st.page_link`` that shows nothing (instead of raising) when the page is unknown to this run
    (e.g. a page script run on its own as the entry point)."""
    from streamlit.errors import StreamlitAPIException

    try:
        st.page_link(path, **kwargs)
    except StreamlitAPIException:
        pass


def nav_query_params(*, direction: str | None = None, presenter: bool | None = None, export: str | None = None, **extra: Any) -> dict[str, str]:
    """Query parameters that carry the shared state to another page (defaults left out)."""
    direction = st.session_state.get("direction", DEFAULT_DIRECTION) if direction is None else direction
    presenter = bool(st.session_state.get("presenter", False)) if presenter is None else presenter
    export = st.session_state.get("export", "png") if export is None else export
    out: dict[str, str] = {}
    if direction in DIRECTIONS and direction != DEFAULT_DIRECTION:
        out["direction"] = direction
    if presenter:
        out["presenter"] = "true"
    if export in EXPORT_FORMATS and export != "png":
        out["export"] = export
    out.update({k: str(v) for k, v in extra.items() if v is not None})
    return out


# -- figures and downloads ------------------------------------------------------------------------------------
def plotly_config(filename: str = "figure", export_format: str | None = None) -> dict[str, Any]:
    """Plotly modebar config: the camera button downloads ``filename`` as PNG (2x) or SVG."""
    fmt = export_format or st.session_state.get("export", "png")
    fmt = fmt if fmt in EXPORT_FORMATS else "png"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)[:120] or "figure"
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": fmt, "filename": safe, "scale": 2 if fmt == "png" else 1},
        "modeBarButtonsToRemove": ["lasso2d", "select2d"],
    }


def apply_presenter_fonts(fig, size: int = PRESENTER_FONT_SIZE) -> None:
    """Large type on a plotly figure, set explicitly on every text element (Streamlit's chart theme
    would otherwise override a layout-level font size): titles, axis titles, tick labels, colour bars."""
    fig.update_layout(font=dict(size=size), title_font_size=size + 4, hoverlabel_font_size=size,
                      legend_font_size=size)
    fig.update_xaxes(tickfont_size=size - 2, title_font_size=size)
    fig.update_yaxes(tickfont_size=size - 2, title_font_size=size)
    fig.update_annotations(font_size=size)
    for trace in fig.data:
        if hasattr(trace, "colorbar"):
            try:
                trace.colorbar.tickfont.size = size - 2
                trace.colorbar.title.font.size = size
            except (AttributeError, ValueError):
                pass
    if "coloraxis" in fig.layout and fig.layout.coloraxis.colorbar is not None:
        fig.layout.coloraxis.colorbar.tickfont.size = size - 2


def prepare_figure(fig, *, presenter: bool | None = None, height: int | None = None):
    """Apply presenter mode (large type, at least 480 px tall) and ``height`` to ``fig`` in place; returns it.

    ``presenter`` defaults to the session's presenter mode. :func:`show_figure` calls it unless told the
    figure is already prepared (a figure cached across reruns, prepared once before caching).
    """
    presenter = bool(st.session_state.get("presenter")) if presenter is None else presenter
    if presenter:
        apply_presenter_fonts(fig)
        if height is None and (fig.layout.height or 0) < 480:
            height = 480
    if height is not None:
        fig.update_layout(height=height)
    return fig


def show_figure(fig, *, key: str, filename: str = "figure", height: int | None = None, prepared: bool = False) -> None:
    """Show a plotly figure full width with the export config; in presenter mode with large type.

    Args:
        fig: a ``plotly.graph_objects.Figure`` (its layout font is enlarged in presenter mode).
        key: unique Streamlit element key.
        filename: stem of the downloaded image (no extension).
        height: optional height in pixels.
        prepared: ``fig`` went through :func:`prepare_figure` already and must not be changed (e.g. a
            figure shared through ``st.cache_resource``); ``height`` is then ignored.
    """
    if not prepared:
        prepare_figure(fig, height=height)
    st.plotly_chart(fig, width="stretch", config=plotly_config(filename), key=key, theme="streamlit")


def download_buttons(df, payload_json, stem: str, *, key: str | None = None) -> None:
    """CSV (long format) and JSON download buttons, side by side.

    Args:
        df: a ``pandas.DataFrame``, or a callable returning one (generated only when clicked).
        payload_json: a JSON string, a JSON-able object, or a callable returning either.
        stem: file name stem (``stem.csv``, ``stem.json``).
        key: key prefix (default: ``stem``); must be unique on the page.
    """
    key = key or stem
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)[:120] or "data"

    def csv_data() -> str:
        frame = df() if callable(df) else df
        return frame.to_csv(index=False)

    def json_data() -> str:
        payload = payload_json() if callable(payload_json) else payload_json
        return payload if isinstance(payload, str) else json.dumps(payload)

    row = st.container(horizontal=True)
    with row:
        st.download_button("⬇ CSV", csv_data, file_name=f"{safe}.csv", mime="text/csv", key=f"{key}-csv",
                           on_click="ignore", help="Long format: one row per (kind, layer, head, query, key).")
        st.download_button("⬇ JSON", json_data, file_name=f"{safe}.json", mime="application/json",
                           key=f"{key}-json", on_click="ignore", help="Nested arrays with token labels.")


# -- per-sentence results, computed once ----------------------------------------------------------------------
@st.cache_data(max_entries=128, show_spinner="Running the model…")
def _bundle(direction: str, ckpt: str, stamp: str, text: str, reference: str | None, beam_size: int,  # noqa: ARG001
            length_penalty: float, max_len: int | None, n_best: int) -> dict[str, Any]:
    from ..analysis import sentence_bundle

    tr = load_translator(direction)
    return sentence_bundle(tr, text, reference=reference, beam_size=beam_size, length_penalty=length_penalty,
                           max_len=max_len, n_best=n_best)


def sentence_bundle(direction: str, text: str, *, reference: str | None = None, beam_size: int = 4,
                    length_penalty: float = 0.6, max_len: int | None = None, n_best: int = 4) -> dict[str, Any]:
    """:func:`aiayn.analysis.sentence_bundle` for ``direction``, cached per (checkpoint, sentence, options).

    Raises:
        ModelUnavailable: the checkpoint cannot be loaded.
        ValueError: empty text or reference, bad decoding options.
    """
    path = checkpoint_path(direction)
    return _bundle(direction, str(path), _stamp(path), text, reference, int(beam_size), float(length_penalty),
                   None if max_len is None else int(max_len), int(n_best))
