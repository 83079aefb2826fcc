"""Attention explorer: every head of every layer, for a typed or curated sentence.

Kinds (Section 3.2.3): encoder self-attention, masked decoder self-attention, encoder-decoder attention.
Free-running (the model's own beam-search output) or teacher-forced (a reference fed to the decoder).
"""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import streamlit as st

from aiayn import app as ui
from aiayn.app.pickers import head_picker, kind_picker, layer_picker
from aiayn.app.state import reference_follows, remember_form, seed_form, write_view
from aiayn.app.explorer import (
    TAB_LABELS,
    MEASURES,
    PREFIX_HELP,
    ExplorerView,
    all_heads_tab,
    explain_forced,
    forced_pieces,
    forced_prefix,
    head_stats_tab,
    one_head_tab,
    output_label,
    presenter_layout,
    seed_tab,
    step_tab,
    write_tab,
)
from aiayn.app.history import history_tab
from aiayn.examples import EXAMPLES
from aiayn.model.maps import KIND_TITLES

#: what the rows and columns of a map of each kind are (the caption under the tabs)
KIND_READS = {"encoder": "each source piece (row, query) attends to every source piece (column, key).",
              "decoder": "each decoder position (row, query) attends to itself and the positions before it (columns, "
                         "keys); the look-ahead mask hides the later ones.",
              "cross": "each decoder position (row, query) attends to every source piece as the encoder's last "
                       "layer left it (columns, keys)."}
MODES = ["free", "forced"]
ctx = ui.setup_page("Attention explorer", icon=":material/search:")
tr = ctx.translator
cfg = tr.cfg
L, H = cfg.n_layers, cfg.n_heads
examples = EXAMPLES[ctx.direction]
by_sentence = {s: (ref, hint) for s, ref, hint in examples}

# -- sentence and reference: kept in the session across pages (persist_state="session"), seeded from the URL on the
# first visit and when the URL holds another view (a shared link, Translate's "open in the explorer", Back / Forward;
# see aiayn.app.state). A newly typed sentence gets its curated reference, or an empty box.
PAGE = "pages/2_Attention_Explorer.py"
DEFAULT_TEXT, DEFAULT_REF = examples[0][0], examples[0][1]


def _from_url() -> dict:
    # ?sentence= is ?text= for links from a page whose own `text` is a bound widget (Figure 1): on a page change
    # Streamlit drops the parameters bound on the page left, so such a link cannot name `text`
    text = st.query_params.get("text", st.query_params.get("sentence", DEFAULT_TEXT))
    return {"ex_text": text, "ex_ref": st.query_params.get("ref", by_sentence.get(text, ("", ""))[0]),
            "ex_prefix": st.query_params.get("prefix", "")}


def _for_direction(old: str) -> dict | None:  # the other language's example; a forced start in the old target
    values = ({"ex_text": DEFAULT_TEXT, "ex_ref": DEFAULT_REF}  # language means nothing in the new one
              if st.session_state.get("ex_text") in {e[0] for e in EXAMPLES.get(old, ())} else {})
    return values | ({"ex_prefix": ""} if st.session_state.get("ex_prefix") else {}) or None


if seed_form(PAGE, ("text", "ref", "prefix", "sentence"), ctx.direction, from_url=_from_url, for_direction=_for_direction) is None:
    reference_follows("ex_text", "ex_ref", lambda t: by_sentence.get(t, ("", ""))[0])


def _pick_example() -> None:
    choice = st.session_state.get("ex_pick")
    if choice in by_sentence:
        st.session_state.ex_text = choice
        st.session_state.ex_ref = by_sentence[choice][0]
        st.session_state.ex_prefix = ""  # a new sentence starts unforced


def _remove_prefix() -> None:
    st.session_state.ex_prefix = ""


# Layout: the sentence form in one row, examples and decoder input beside it, the model output and the
# hint in one row below, then the view: at 1366 x 768 the heatmap starts above the fold.
top_left, top_right = st.columns([3, 1], gap="medium", vertical_alignment="bottom")
with top_right:
    st.selectbox("Curated examples", [e[0] for e in examples], index=None, key="ex_pick", on_change=_pick_example,
                 placeholder="Pick a sentence…")
    ui.warn_bad_param("mode", MODES, "the mode must be free or forced")
    mode = st.radio("Decoder input", MODES, key="mode", bind="query-params", horizontal=True,
                    help="free: the model's own output (beam search, beam 4): the model decodes and we show the "
                         "maps of its output. forced: a reference you give is fed to the decoder (as in training).")
    mode = mode if mode in MODES else "free"
with top_left:
    with st.form("explore", enter_to_submit=True, border=True):
        f_text, f_ref, f_go = st.columns([4, 4, 3.4] if ctx.presenter else [5, 4, 2.6], vertical_alignment="bottom")
        with f_text:
            text = st.text_input(f"Sentence ({ctx.src_lang.upper()})", key="ex_text", persist_state="session",
                                 placeholder="Type a sentence")
        with f_ref:
            ref = st.text_input(f"Reference translation ({ctx.tgt_lang.upper()}, teacher-forced mode)", key="ex_ref",
                                persist_state="session", placeholder="Used only when the decoder input is 'forced'")
        with f_go:
            st.form_submit_button("Show attention", type="primary", width="stretch")
        # under the sentence: the forced start of the output (prefix-constrained decoding; ?prefix= in the URL)
        p_box, p_go = st.columns([8, 3.4] if ctx.presenter else [9, 2.6], vertical_alignment="bottom")
        prefix_raw = p_box.text_input(f"Forced start of the output ({ctx.tgt_lang.upper()}, optional)", key="ex_prefix",
                                      persist_state="session", help=PREFIX_HELP,
                                      placeholder="Empty: the model's own output")
        if (prefix_raw or "").strip():
            p_go.form_submit_button("Remove", icon=":material/close:", width="stretch", on_click=_remove_prefix,
                                    help="Remove the forced start: show the model's own output")

write_view(PAGE, {"text": None if text == DEFAULT_TEXT else text or "",
                     "ref": ref if mode == "forced" and ref != by_sentence.get(text, ("", ""))[0] else None,
                     "prefix": (prefix_raw or "").strip() or None, "sentence": None})
remember_form("ex_text", text, ref)

cleaned = ui.sentence_or_stop(text)
ui.language_hint(cleaned, ctx.src_lang, ctx.tgt_lang)
reference = None
if mode == "forced":
    reference = ui.optional_reference(ref)
    if reference is None:
        st.warning("Teacher-forced mode needs a reference translation; showing the model's own output instead.")
        mode = "free"
prefix, prefix_error = forced_prefix(tr, prefix_raw)
if (prefix_raw or "").strip() and reference is not None:
    st.info("The forced start of the output applies to the model's own output (decoder input: free); it is "
            "ignored while a reference is fed.", icon=":material/info:")
try:
    result, forced_error = explain_forced(ctx.direction, cleaned, prefix, reference)
except ValueError as exc:
    st.error(f"Could not run the model: {exc}")
    st.stop()
if reference is None and (prefix_error or forced_error):
    st.error(f"{prefix_error or forced_error} Showing the model's own output instead.", icon=":material/error:")
if result.truncated:
    st.warning(f"The sentence is longer than the model accepts ({cfg.max_len} pieces); it was cut.")

out_col, hint_col = st.columns([2, 3], vertical_alignment="center") if cleaned in by_sentence else (st.container(), None)
out_col.markdown(f"{output_label(result)} {result.text or '∅'}  \n<small>source pieces: {len(result.src_tokens)} · "
                 f"decoder positions: {len(result.output_tokens)} · {result.elapsed_ms:.0f} ms"
                 + (f" (a batch of {result.batch_size} sentences from several visitors)" if result.batch_size > 1 else "")
                 + "</small>",
                 unsafe_allow_html=True)
if hint_col is not None:
    hint_col.info(f"**What to look for.** {by_sentence[cleaned][1]}", icon=":material/lightbulb:")

# -- the view: a fragment, so a change of kind / layer / head / tab options reruns only this part ----------------
TABS = tuple(TAB_LABELS.values())  # Material icons


@st.fragment
def view(result) -> None:
    """Controls (kind, layer, head, words, specials, values; all in the URL), the five tabs
    (:mod:`aiayn.app.explorer`) and the downloads for one sentence: ``result`` is the
    :class:`~aiayn.translator.Translation` of :func:`aiayn.app.explain_sentence`."""
    # Widgets of a tab that is not drawn in a run would lose their value (Streamlit drops the state of
    # widgets not seen in a run): re-store it, so the step and the mapped statistic survive a tab change.
    for key in ("step", "stat_metric", "tsent", "tstep"):
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]
    for flag in ("words", "nospecial", "values"):
        ui.warn_bad_param(flag, ("true", "false", "True", "False", "1", "0"), f"{flag} must be true or false")
    presenter_layout(ctx.presenter)
    if ctx.presenter:  # large type: the head buttons get a row of their own
        (c1, c2, c4), c3 = st.columns([4, 1.5, 2], vertical_alignment="bottom"), st.container()
    else:
        c1, c2, c3, c4 = st.columns([3, 1.3, 5, 1.7], vertical_alignment="bottom")
    kind, layer, head = kind_picker(c1), layer_picker(c2, L), head_picker(c3, H)
    with c4.popover("Options", icon=":material/tune:", width="stretch"):  # the less used toggles
        words = st.toggle("Merge into words", key="words", bind="query-params",
                          help="Attention to a word = sum over its pieces; from a word = mean over its pieces. "
                               "Punctuation is a word of its own.")
        hide = st.toggle("Hide <s> and </s>", key="nospecial", bind="query-params",
                         help="Leave out the special tokens (rows are not renormalised).")
        values = st.toggle("Write weights in cells", key="values", bind="query-params")
        measure = st.segmented_control("Cells show", MEASURES, key="measure", bind="query-params", default="weights",
                                       help="weights: attention weights alpha; norm-based: alpha times the norm of "
                                            "the transformed value vector, ||alpha f(x)|| (Kobayashi et al. 2020)")

    v = ExplorerView(ctx, result, kind, layer, head, words=words,
                     hide_special=hide, values=values, measure=measure or "weights")
    stack, q_lab, k_lab = v.stack()

    # Only the open tab is drawn (for a class of 30: drawing all five on a first visit was most of the
    # server's time per student). Opening another tab reruns this fragment (on_change) and draws that one.
    seed_tab(PAGE, ctx.direction)  # the open tab is in the URL (?tab=step)
    tab_head, tab_all, tab_step, tab_stats, tab_hist = st.tabs(list(TABS), key="tab", on_change="rerun")
    write_tab(PAGE)

    def _render(tab) -> bool:
        return tab.open is not False

    with tab_head:
        if _render(tab_head):
            one_head_tab(v, stack, q_lab, k_lab)
    with tab_all:
        if _render(tab_all):
            all_heads_tab(v, stack, q_lab, k_lab)
    with tab_step:
        if _render(tab_step):
            step_tab(v)
    with tab_stats:
        if _render(tab_stats):
            head_stats_tab(v)
    with tab_hist:  # the curated sentences' maps at each saved training state (the checkpoint's own history)
        if _render(tab_hist):
            history_tab(v)

    if tab_step.open is not True:  # the step tab shows decoder and cross maps whatever the kind: it says so itself
        st.caption(f"{KIND_TITLES[kind].capitalize()}: {KIND_READS[kind]} Each row sums to 1. "
                   + ("Decoder rows are labelled *decoder input → output*: the piece fed to the decoder at that "
                      "position (the output shifted right behind the start piece) and the piece the model predicted "
                      "there (with *Merge into words*: the word fed and the pieces predicted at its positions)."
                      if kind != "encoder" else ""))
    st.markdown("##### Download the maps")
    st.caption(f"All layers and heads of the {KIND_TITLES[kind]} for this sentence (long format; layer and head "
               "columns count from 0).")
    ui.download_buttons(lambda: result.attention.to_dataframe(kinds=[kind]), lambda: result.attention.to_json(),
                        f"attention_{kind}_{ctx.direction}" + ("_forced_prefix" if forced_pieces(result) else ""),
                        key="ex-dl")


view(result)
