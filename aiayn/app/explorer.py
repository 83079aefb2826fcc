"""The attention explorer's tabs: one head, all heads, step by step, head statistics (Streamlit).

The job of this module is drawing, for one sentence, the four views of ``pages/2_Attention_Explorer.py``
once the page has read its controls (kind, layer, head, words, specials, values): the kinds are those of
Section 3.2.3 (encoder self-attention, masked decoder self-attention, encoder-decoder attention). Every
renderer takes an :class:`ExplorerView` (the sentence's :class:`~aiayn.translator.Translation` and the
controls) and draws into the current Streamlit container; the page keeps the controls, the URL and the
tabs. It imports torch (through :mod:`aiayn.model.maps`): only the explorer page, which needs the model, uses it.
The fifth tab, attention across training (the checkpoint's recorded history), lives in :mod:`aiayn.app.history`.
Presenter mode makes every chart of the explorer larger than in normal mode (taller by
:data:`PRESENTER_SCALE`, and wider: the page's side margins shrink and the step tab's charts get the full
width), never smaller.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import streamlit as st

from ..analysis import head_stats, kind_labels, kind_stack, query_labels, unique_labels, view_stack
from ..figures.attention import (
    AXIS_TITLES,
    attention_heatmap,
    head_stats_figure,
    model_view,
    picked_head,
    topk_bar,
)
from ..model.maps import KIND_TITLES
from .charts import PRESENTER_MIN_HEIGHT, plotly_config, prepare_figure, show_figure
from .params import query_param, warn_bad_param
from .state import seed_form, write_view

if TYPE_CHECKING:  # annotations only: aiayn.translator imports torch
    from ..translator import Translation

#: the explorer's tabs (key -> label; Material icons, not emoji, which render as empty boxes without an emoji font)
TAB_LABELS = {
    "head": ":material/zoom_in: One head",
    "all": ":material/grid_view: All heads",
    "step": ":material/play_arrow: Step by step",
    "stats": ":material/table_chart: Head statistics",
    "history": ":material/timeline: Across training",
}
def seed_tab(page: str, direction: str) -> None:
    """Open the tab the URL names (``?tab=step``; keys of :data:`TAB_LABELS`, absent: ``head``) when the URL holds
    another view than the page last wrote (a shared link, Back / Forward): the tab is part of the view's URL.
    Call before ``st.tabs(..., key="tab")``; an unknown value is reported and opens the first tab."""
    warn_bad_param("tab", list(TAB_LABELS), f"the tab must be one of {', '.join(TAB_LABELS)}")
    seed_form(page, ("tab",), direction, keys=("tab",),
              from_url=lambda: {"tab": TAB_LABELS.get(query_param("tab") or "head", TAB_LABELS["head"])})


def write_tab(page: str) -> None:
    """Write the open tab (``st.session_state["tab"]``) to the URL, the first tab left out (see :func:`seed_tab`)."""
    key = next((k for k, label in TAB_LABELS.items() if label == st.session_state.get("tab")), "head")
    write_view(page, {"tab": None if key == "head" else key})


#: how much taller the explorer's charts are in presenter mode (and at least PRESENTER_MIN_HEIGHT px)
PRESENTER_SCALE = 1.5
#: presenter mode: narrower side margins (Streamlit's are 5rem, which the presenter's 20 px root font makes
#: 100 px), so the charts get wider, not narrower, on a projector
_PRESENTER_LAYOUT_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-left: 1.5rem; padding-right: 1.5rem; }
</style>"""

#: per-head statistics shown in the head-statistics tab, with their column help (see aiayn.analysis.head_stats)
STAT_HELP = {
    "entropy": "mean entropy of a query's attention, bits (0 = all on one key; log2(n) = uniform)",
    "confidence": "mean over queries of the largest weight (Voita et al. 2019)",
    "self": "mean weight on the query's own position",
    "previous": "mean weight on the previous position (positional head when high)",
    "next": "mean weight on the next position (n/a in the masked decoder: the mask hides it)",
    "bos": "mean total weight on <s> (a 'sink' when high; n/a when the keys hold no <s>: the source)",
    "eos": "mean total weight on </s> (a 'sink' when high; n/a when the keys hold no </s>: the decoder input)",
}
#: how the head-statistics table shows an undefined statistic (NaN; st.dataframe's placeholder, not "None")
NOT_DEFINED = "–"


def chart_height(height: float | None, presenter: bool) -> int | None:
    """A chart's height (pixels) in the explorer: ``height`` in normal mode; in presenter mode
    :data:`PRESENTER_SCALE` times taller, at least :data:`~aiayn.app.charts.PRESENTER_MIN_HEIGHT`."""
    if not presenter:
        return None if height is None else int(height)
    return int(max(PRESENTER_MIN_HEIGHT, (height or 0) * PRESENTER_SCALE))


def presenter_layout(presenter: bool) -> None:
    """In presenter mode, narrow the page's side margins (CSS) so the explorer's charts get wider."""
    if presenter:
        st.html(_PRESENTER_LAYOUT_CSS)



#: the help of the explorer's "Forced start of the output" box (the URL's ``prefix``)
PREFIX_HELP = ("Prefix-constrained decoding: the model's output must start with these words (their pieces are "
               "forced, each scored with the model's own probability); beam search decodes the rest, and every map "
               "shows that forced output. Empty: the model's own output. Applies to the decoder input 'free'.")


def forced_prefix(tr: Any, raw: str | None) -> tuple[str | None, str | None]:
    """The explorer's forced start of the output (``?prefix=``) checked against the translator ``tr``'s vocabulary
    (:func:`aiayn.calls.encode_prefix`): ``(cleaned prefix, None)``, ``(None, None)`` when empty or absent, or
    ``(None, why)`` when the model cannot be forced to write it (the page shows ``why`` as an error)."""
    from .. import calls

    if raw is None or not raw.strip():
        return None, None
    try:
        return calls.encode_prefix(tr.tokenizer, tr.cfg, raw).text, None
    except ValueError as exc:
        return None, f"Cannot force the output to start with “{raw.strip()[:80]}”: {exc}."


def explain_forced(direction: str, text: str, prefix: str | None, reference: str | None) -> tuple["Translation", str | None]:
    """:func:`aiayn.app.results.explain_sentence` of ``text``: with ``prefix`` (free-running, ``reference`` None)
    the output forced to start with it and the rest decoded by beam search (through the decode queue), else the
    model's own output or the teacher-forced ``reference``. Returns ``(translation, error)``: when the prefix
    cannot be forced for this sentence (e.g. longer than its longest output), ``error`` says why and the
    translation is the unforced one.

    Raises:
        ValueError: as :func:`~aiayn.app.results.explain_sentence` for the unforced call (empty text...).
    """
    from .results import explain_sentence

    if prefix is not None and reference is None:
        try:
            return explain_sentence(direction, text, prefix=prefix), None
        except ValueError as exc:
            error = f"Cannot force the output to start with “{prefix[:80]}” for this sentence: {exc}."
            return explain_sentence(direction, text), error
    return explain_sentence(direction, text, reference=reference), None


def forced_pieces(t: "Translation") -> list[str]:
    """The pieces a translation was forced to start with (prefix-constrained decoding), ``[]`` when none."""
    return list(t.attention.meta.get("prefix") or []) if t.attention is not None else []


def output_label(t: "Translation") -> str:
    """The markdown label of the explorer's output line: the model's own output, a forced prefix (its pieces,
    the rest decoded by beam search) or the teacher-forced reference."""
    if t.mode != "free-running":
        return "**Teacher-forced reference:**"
    pieces = forced_pieces(t)
    if not pieces:
        return "**Model output:**"
    return ("**Model output** (forced prefix: " + " ".join(f"`{p}`" for p in pieces)
            + ", the rest decoded by beam search)**:**")


#: the explorer's page script (the target of :func:`explorer_prefix_link`)
EXPLORER_PAGE = "pages/2_Attention_Explorer.py"


def explorer_prefix_link(tr: Any, text: str, prefix_ids: Any) -> dict[str, str]:
    """A link to the attention explorer showing ``text`` translated with its output forced to start with
    ``prefix_ids`` (e.g. a beam-tree node's pieces): every head's maps of that forced output. The prefix travels
    as text (``?prefix=``, the ids detokenised; a trailing ``</s>`` dropped) and the explorer re-tokenises it: when
    that gives other pieces, a caption says which. The sentence travels as ``?sentence=`` (the explorer reads it as
    its ``text``): a page whose own ``text`` is a bound widget cannot hand ``text`` on, since Streamlit drops the
    parameters bound on the page being left. Direction and model are bound to the URL in the frame: Streamlit
    carries them. Returns the link's query parameters."""
    from .frame import nav_query_params, page_link

    ids = [int(i) for i in prefix_ids if int(i) != tr.cfg.eos_id]
    prefix = tr.tokenizer.decode(ids)
    params = nav_query_params(sentence=text, prefix=prefix or None)
    page_link(EXPLORER_PAGE, label="See every head's attention for this output in the Attention Explorer",
              icon=":material/search:", query_params=params)
    again = tr.prefix_ids(prefix)
    if again != ids:
        st.caption("The explorer reads the forced start as text, which splits into other pieces: "
                   + " ".join(f"`{p}`" for p in tr.pieces(again)) + "; its output may differ from this one.")
    return params


@dataclass(frozen=True)
class ExplorerView:
    """One sentence and the explorer's controls.

    Attributes:
        ctx: the page's :class:`aiayn.app.PageContext` (direction, colour scale, template, presenter mode).
        translation: :func:`aiayn.app.explain_sentence` of the sentence (B=1 maps on the CPU).
        kind: ``"encoder"``, ``"decoder"`` or ``"cross"``.
        layer: layer, from 1.
        head: head, from 1, or None for the mean over heads.
        words: merge pieces into words; hide_special: leave out ``<s>`` / ``</s>``; values: write weights
            in the cells.
        measure: ``"weights"`` (the attention weights) or ``"norm-based"`` (``alpha ||f(x)||``, Kobayashi et
            al. 2020: :func:`norm_based_attention`).
    """

    ctx: Any
    translation: "Translation"
    kind: str
    layer: int
    head: int | None
    words: bool = False
    hide_special: bool = False
    values: bool = False
    measure: str = "weights"

    @property
    def what(self) -> str:
        """``"mean over heads"`` or ``"head h"``."""
        return "mean over heads" if self.head is None else f"head {self.head}"

    @property
    def stem(self) -> str:
        """File name stem of this view's downloads: ``kind_direction_Llayer_(mean|Hhead)``."""
        return f"{self.kind}_{self.ctx.direction}_L{self.layer}_{'mean' if self.head is None else f'H{self.head}'}"

    def pick(self, layer_maps: np.ndarray) -> np.ndarray:
        """The picked head of one layer's ``(H, Q, K)`` maps (or their mean over heads): ``(Q, K)``."""
        return layer_maps.mean(axis=0) if self.head is None else layer_maps[self.head - 1]

    def stack(self) -> tuple[np.ndarray, list[str], list[str]]:
        """:func:`aiayn.analysis.view_stack` of this view: ``(L, H, Q, K)`` weights and unique labels."""
        maps = self.translation.attention
        if self.measure == "norm-based":
            t = self.translation
            maps = norm_based_maps(maps, norm_based_attention(self.ctx.direction, tuple(t.src_ids), tuple(t.output_ids)))
        return view_stack(maps, self.kind, words=self.words, hide_special=self.hide_special)


#: what a cell of the explorer shows (the URL's ``measure``).
MEASURES = ("weights", "norm-based")


@st.cache_data(max_entries=32, show_spinner="Norm-based attention…")
def norm_based_attention(direction: str, src_ids: tuple, output_ids: tuple) -> dict[str, np.ndarray]:
    """Norm-based attention (Kobayashi et al. 2020) of every kind of one sentence, teacher-forced on the output
    shown (:func:`aiayn.calls.norm_based_maps`): ``{kind: (L, 1, H, Q, K) float32}``."""
    from .. import calls
    from .models import load_translator

    tr = load_translator(direction)
    got = calls.norm_based_maps(tr.model, calls.batch(tr.cfg, [list(src_ids)], tr.device),
                                calls.batch(tr.cfg, [list(output_ids)], tr.device))
    return {k: v.astype(np.float32) for k, v in got.items()}


def norm_based_maps(maps: Any, normed: dict[str, np.ndarray]) -> Any:
    """A copy of ``maps`` (:class:`~aiayn.model.maps.AttentionMaps`, B=1) whose weights are ``normed``'s.

    Raises:
        ValueError: the shapes differ (the output was not the one the maps were read from).
    """
    import dataclasses

    import torch

    new = {}
    for kind, arr in normed.items():
        old = getattr(maps, kind)
        if old is not None and tuple(old.shape) != arr.shape:
            raise ValueError(f"norm-based {kind} maps {arr.shape} do not match the weights {tuple(old.shape)}")
        new[kind] = torch.from_numpy(arr)
    return dataclasses.replace(maps, **new)


@st.cache_resource(max_entries=16, show_spinner=False)
def _model_view_figure(stack: np.ndarray, q_lab: list[str], k_lab: list[str], colorscale: str, template: str,
                       title: str, presenter: bool, kind: str):
    """The L x H grid (it does not depend on the head picked; :func:`frame_css` frames the picked one): built
    once per (maps, labels, look), shared read-only."""
    yt, xt = AXIS_TITLES[kind]
    fig = model_view(stack, q_labels=q_lab, k_labels=k_lab, colorscale=colorscale, template=template,
                     title=title, x_title=xt, y_title=yt, clickable=True)
    return prepare_figure(fig, presenter=presenter, height=chart_height(fig.layout.height, presenter))


def frame_css(layer: int, head: int | None, n_heads: int, *, key: str = "model_view", color: str = "#d62728") -> str:
    """A ``<style>`` that frames one thumbnail of the all-heads grid shown under ``key`` (``layer``, ``head``
    from 1; head None frames every head of the layer) in the browser: plotly's drag rectangle of that
    subplot (``rect.nsewdrag[data-subplot="x7y7"]``, exactly the thumbnail) gets a ``color`` outline.

    CSS rather than a shape in the figure (:func:`~aiayn.figures.attention.highlight_head`): the grid's
    figure stays the same for every head, so a head switch does not make the browser redraw all
    ``L x H`` heatmaps (a few hundred ms on a classroom laptop); only this small style changes.
    """
    first = (layer - 1) * n_heads
    heads = range(1, n_heads + 1) if head is None else [head]
    names = ["" if first + h == 1 else str(first + h) for h in heads]
    sel = ", ".join(f'.st-key-{key} rect.nsewdrag[data-subplot="x{n}y{n}"]' for n in names)
    return f"<style>{sel} {{ stroke: {color} !important; stroke-width: 4px !important; }}</style>"


@st.cache_resource(max_entries=16, show_spinner=False)
def _stats_figure(stats, metric: str, colorscale: str, template: str, presenter: bool):
    """The head-statistics map (does not depend on the head picked), cached like :func:`_model_view_figure`."""
    fig = head_stats_figure(stats, metric, colorscale=colorscale, template=template)
    return prepare_figure(fig, presenter=presenter, height=chart_height(fig.layout.height, presenter))


def one_head_tab(v: ExplorerView, stack: np.ndarray, q_lab: list[str], k_lab: list[str]) -> None:
    """The picked layer and head (or mean over heads) as one heatmap; ``stack`` ``(L, H, Q, K)`` from
    :meth:`ExplorerView.stack`."""
    yt, xt = AXIS_TITLES[v.kind]
    fig = attention_heatmap(v.pick(stack[v.layer - 1]), q_lab, k_lab,
                            title=f"{KIND_TITLES[v.kind].capitalize()}, layer {v.layer}, {v.what}"
                                  + (" (norm-based)" if v.measure == "norm-based" else ""),
                            colorscale=v.ctx.colorscale, x_title=xt, y_title=yt, show_values=v.values,
                            zmax=1.0 if v.values and v.measure == "weights" else None, template=v.ctx.template,
                            colorbar_title="||αf(x)||" if v.measure == "norm-based" else "weight")
    show_figure(fig, key="head_view", filename=v.stem, height=chart_height(fig.layout.height, v.ctx.presenter))
    qk_link(v)


#: the Figure 1 page, which draws one head's queries and keys (:func:`qk_link`)
FIGURE1_PAGE = "pages/10_Figure_1.py"
#: Figure 1's block of each attention kind, ``{layer}`` filled in
QK_BLOCKS = {"encoder": "enc.{layer}.self_attn", "decoder": "dec.{layer}.self_attn", "cross": "dec.{layer}.cross_attn"}


def qk_link(v: ExplorerView) -> dict[str, str] | None:
    """Under one head's map: a link to the Figure 1 page showing the same head's queries and keys in one space
    (AttentionViz) for the same sentence's beam-search output, the output this view shows when it is the model's
    own (no reference fed, no forced start). Returns the link's query parameters, None when no link is drawn (the
    mean over heads, or another output than the beam's)."""
    from .frame import nav_query_params, page_link

    t = v.translation
    if v.head is None or t.mode == "teacher-forced" or forced_pieces(t):
        return None
    params = nav_query_params(text=t.source, block=QK_BLOCKS[v.kind].format(layer=v.layer), open_qk="true",
                              qk_head=str(v.head))
    page_link(FIGURE1_PAGE, label="This head's queries and keys in one space (Figure 1 page)",
              icon=":material/scatter_plot:", query_params=params)
    return params


def open_picked_head() -> None:
    """Callback of the all-heads grid's selection (``st.session_state["model_view"]``): a clicked thumbnail
    (:func:`~aiayn.figures.attention.picked_head`) sets the ``layer`` and ``head`` controls and opens the
    one-head tab (``st.session_state["tab"]``)."""
    state = st.session_state.get("model_view")
    try:
        points = state["selection"]["points"]
    except (KeyError, TypeError):
        points = []
    picked = picked_head(points)
    if picked is None:
        return
    st.session_state["layer"], st.session_state["head"] = str(picked[0]), str(picked[1])
    st.session_state["tab"] = TAB_LABELS["head"]


def all_heads_tab(v: ExplorerView, stack: np.ndarray, q_lab: list[str], k_lab: list[str]) -> None:
    """Every head of every layer of the kind as a grid with one shared colour scale, the picked head (or the
    picked layer, for the mean over heads) framed; a click on a thumbnail's centre opens that head."""
    L, H = stack.shape[:2]
    st.caption(f"All {L} × {H} heads of the {KIND_TITLES[v.kind]}, one shared colour scale; the frame marks the "
               "layer and head picked above. Click the centre of a thumbnail to open that head.")
    mv = _model_view_figure(stack, q_lab, k_lab, v.ctx.colorscale, v.ctx.template,
                            f"{KIND_TITLES[v.kind].capitalize()}: all heads", v.ctx.presenter, v.kind)
    st.html(frame_css(v.layer, v.head, H))
    st.plotly_chart(mv, width="stretch", config=plotly_config(f"{v.kind}_{v.ctx.direction}_all_heads"),
                    key="model_view", theme="streamlit", on_select=open_picked_head, selection_mode="points")


def step_tab(v: ExplorerView) -> None:
    """Decoding step by step (slider ``step``, bound to the URL): the decoder self-attention rows written so
    far, the cross-attention of the step over the source, and the top-k next pieces of the step."""
    t = v.translation
    fed, out = t.decoder_input_tokens, t.output_tokens
    T = len(out)
    step_opts = list(range(1, T + 1))
    warn_bad_param("step", [str(s) for s in step_opts], f"the step must be 1 to {T}")
    if T > 1:
        step = st.slider("Decoding step", 1, T, key="step", bind="query-params",
                         help="At step t the decoder has been fed t pieces and predicts the next one.")
    else:
        step = 1
    step = int(step) if step in step_opts else 1
    i = step - 1
    n_forced = len(forced_pieces(t))
    st.markdown(f"**Step {step} of {T}.** Fed so far: " + " ".join(f"`{p}`" for p in fed[: i + 1])
                + (f" → forced to write **`{out[i]}`** (step {step} of the {n_forced} forced ones: the prefix)"
                   if i < n_forced else f" → predicts **`{out[i]}`**"))
    dec_w = v.pick(kind_stack(t.attention, "decoder")[v.layer - 1])
    crs_w = v.pick(kind_stack(t.attention, "cross")[v.layer - 1])
    rows = query_labels(fed, out, positions=range(i + 1))
    st.caption(f"This tab shows the {KIND_TITLES['decoder']} and the {KIND_TITLES['cross']} of each step, whatever "
               "the Attention choice above; the layer and head choices apply.")
    presenter = v.ctx.presenter
    # presenter mode: one chart under the other, each the full width (side by side they would shrink)
    s1, s2 = (st.container(), st.container()) if presenter else st.columns([1, 1], gap="medium")
    with s1:
        fig = attention_heatmap(dec_w[: i + 1, : i + 1], rows, query_labels(fed, positions=range(i + 1)),
                                title=f"Decoder self-attention, rows 0..{i} (layer {v.layer}, {v.what})",
                                colorscale=v.ctx.colorscale, x_title=AXIS_TITLES["decoder"][1],
                                y_title=AXIS_TITLES["decoder"][0], zmax=1.0, template=v.ctx.template,
                                height=int(min(620, 260 + 28 * (i + 1))))
        show_figure(fig, key="step_decoder", filename=f"step{step}_decoder_{v.stem}",
                    height=chart_height(fig.layout.height, presenter))
    with s2:
        # one row: the colour scale runs to the row's own largest weight, so a spread-out row shows its shape
        row = crs_w[i : i + 1]
        fig = attention_heatmap(row, rows[i:], unique_labels(t.src_tokens),
                                title=f"Cross-attention of step {step} over the source", colorscale=v.ctx.colorscale,
                                x_title=AXIS_TITLES["cross"][1], y_title="query", template=v.ctx.template,
                                height=300, colorbar_title="weight (0 to row max)")
        show_figure(fig, key="step_cross", filename=f"step{step}_cross_{v.stem}",
                    height=chart_height(fig.layout.height, presenter))
        st.caption(f"Colour scale: 0 to this row's largest weight ({float(row.max()):.3f}), not 0 to 1.")
        nxt = t.next_pieces
        if nxt is not None:
            pieces = nxt.pieces[i]
            fig = topk_bar(pieces, nxt.probs[i], chosen=out[i], template=v.ctx.template,
                           title=f"Top {len(pieces)} next pieces at step {step} (next: {out[i]}, "
                                 f"p = {float(nxt.chosen_prob[i]):.3f})")
            show_figure(fig, key="step_topk", filename=f"step{step}_topk_{v.ctx.direction}",
                        height=chart_height(fig.layout.height, presenter))
        else:
            st.info(f"Next-piece probabilities are not available for this output: {t.next_pieces_note}.")


def head_stats_tab(v: ExplorerView) -> None:
    """One row per head of the kind (:func:`aiayn.analysis.head_stats`), a map of one statistic over
    layers x heads, and the table as CSV."""
    kind, ctx = v.kind, v.ctx
    qp, kp = kind_labels(v.translation.attention, kind)
    stats = head_stats(kind_stack(v.translation.attention, kind), qp, kp, kind=kind)
    st.caption("One row per head of the " + KIND_TITLES[kind] + " for this sentence. Click a column header "
               "to sort: low entropy / high confidence = focused heads; high previous/next = positional heads; "
               "high bos/eos = sink heads." + (" Self/previous/next are not defined for cross-attention."
                                               if kind == "cross" else ""))
    st.caption(f"{NOT_DEFINED} = not defined for this kind or sentence (e.g. bos when the keys hold no <s>).")
    num = {c: st.column_config.NumberColumn(c, help=STAT_HELP[c], format="%.3f") for c in STAT_HELP}
    st.dataframe(stats, hide_index=True, width="stretch", column_config=num, key="stats_table",
                 height=min(36 * (len(stats) + 1) + 4, 900), placeholder=NOT_DEFINED)
    metric = st.selectbox("Map a statistic over layers × heads", list(STAT_HELP), key="stat_metric")
    if metric in stats and stats[metric].notna().any():
        show_figure(_stats_figure(stats, metric, ctx.colorscale, ctx.template, ctx.presenter),
                    key="stats_grid", filename=f"{kind}_{ctx.direction}_{metric}", prepared=True)
    else:
        st.info(f"'{metric}' is not defined for {KIND_TITLES[kind]}.")
    st.download_button("Head statistics (CSV)", lambda: stats.to_csv(index=False), icon=":material/download:",
                       file_name=f"head_stats_{kind}_{ctx.direction}.csv", mime="text/csv", on_click="ignore",
                       key="stats_csv")
