"""Compare sentences: two sentences (one word changed, active vs passive), both translations, their attention maps
aligned by position or by matching pieces, and the difference b − a for any kind (Section 3.2.3), layer and head.

Free-running (beam search, Section 6.1) or teacher-forced (each sentence with its own reference). Everything is in
the URL: ``a``, ``b`` (the sentences), ``ra``, ``rb`` (references, teacher-forced mode), ``mode``, ``by``, ``kind``,
``layer``, ``head``.
"""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import numpy as np
import streamlit as st

from aiayn import app as ui
from aiayn.app.pickers import head_picker, kind_picker, layer_picker
from aiayn.app.state import seed_form, write_view
from aiayn.analysis import align_maps
from aiayn.examples import COMPARE_DEFAULTS
from aiayn.figures.attention import AXIS_TITLES, attention_heatmap
from aiayn.figures.compare import difference_heatmap

KIND_NAMES = {"encoder": "encoder self-attention", "decoder": "masked decoder self-attention",
              "cross": "encoder-decoder (cross) attention"}
MODES = ["free", "forced"]
BY = ["pieces", "position"]
DEFAULTS = COMPARE_DEFAULTS  # (sentence, reference) of A and B per direction: one word changed

ctx = ui.setup_page("Compare sentences", icon=":material/compare_arrows:")
tr = ctx.translator
L, H = tr.cfg.n_layers, tr.cfg.n_heads
defaults = DEFAULTS[ctx.direction]

# -- the two sentences: kept in the session across pages (persist_state="session"), seeded from the URL on the first
# visit and when the URL holds another view (a link, Back / Forward; see aiayn.app.state) --------------------------
PAGE = "pages/9_Compare_Sentences.py"
FORM = (("cmp_a", "cmp_ra", "a", "ra"), ("cmp_b", "cmp_rb", "b", "rb"))


def _from_url() -> dict:
    values = {}
    for (text_key, ref_key, text_param, ref_param), (d_text, d_ref) in zip(FORM, defaults):
        values[text_key] = st.query_params.get(text_param, d_text)
        values[ref_key] = st.query_params.get(ref_param, d_ref if values[text_key] == d_text else "")
    return values


def _for_direction(old: str) -> dict:  # a default sentence becomes the other language's default
    return {k: v for (text_key, ref_key, _, _), (d_text, d_ref), (o_text, _) in zip(FORM, defaults, DEFAULTS[old])
            if st.session_state.get(text_key) == o_text for k, v in ((text_key, d_text), (ref_key, d_ref))}


seed_form(PAGE, ("a", "b", "ra", "rb"), ctx.direction, from_url=_from_url, for_direction=_for_direction)

ui.warn_bad_param("mode", MODES, "the mode must be free or forced")
mode = st.radio("Decoder input", MODES, key="mode", bind="query-params", horizontal=True,
                captions=["each sentence's own output (beam 4)", "each sentence's reference"],
                help="Free-running: the model decodes each sentence with beam search. Teacher-forced: each "
                     "sentence's reference is fed to the decoder (as in training), so the decoder sides compare.")
mode = mode if mode in MODES else "free"
with st.form("compare", enter_to_submit=True, border=True):
    col_a, col_b = st.columns(2, gap="large")
    src, tgt = ctx.src_lang.upper(), ctx.tgt_lang.upper()
    text_a = col_a.text_input(f"Sentence A ({src})", key="cmp_a", persist_state="session",
                              placeholder="Type a sentence")
    ref_a = col_a.text_input(f"Reference A ({tgt}, teacher-forced mode)", key="cmp_ra", persist_state="session",
                             placeholder="Used only when the decoder input is 'forced'")
    text_b = col_b.text_input(f"Sentence B ({src})", key="cmp_b", persist_state="session",
                              placeholder="Type a sentence")
    ref_b = col_b.text_input(f"Reference B ({tgt}, teacher-forced mode)", key="cmp_rb", persist_state="session",
                             placeholder="Used only when the decoder input is 'forced'")
    st.form_submit_button("Compare", type="primary")

# keep both sentences (and the references, in teacher-forced mode) in the URL, defaults left out: a link restores
# the comparison
view = {}
for (_, _, text_param, ref_param), text, ref, (d_text, d_ref) in zip(FORM, (text_a, text_b), (ref_a, ref_b), defaults):
    view[text_param] = None if text == d_text else text
    view[ref_param] = ref if mode == "forced" and ref != (d_ref if text == d_text else "") else None
write_view(PAGE, view)


def run_sentence(name: str, text: str, ref: str):
    """The Translation of one sentence (teacher-forced on ``ref`` in forced mode), or None after a message."""
    cleaned = ui.checked_text(text, prefix=f"Sentence {name}: ")
    if cleaned is None:
        return None
    reference = None
    if mode == "forced":
        reference = ui.optional_reference(ref, prefix=f"Reference {name}: ")
        if reference is None:
            st.warning(f"Sentence {name} has no reference; showing the model's own output for it instead.")
    try:
        return ui.explain_sentence(ctx.direction, cleaned, reference=reference)
    except (ValueError, ui.ModelUnavailable) as exc:
        st.error(f"Could not run the model on sentence {name}: {exc}")
        return None


result_a, result_b = run_sentence("A", text_a, ref_a), run_sentence("B", text_b, ref_b)
if result_a is None or result_b is None:
    st.stop()

out_a, out_b = st.columns(2, gap="large")
for col, name, res in ((out_a, "A", result_a), (out_b, "B", result_b)):
    label = "model output" if res.mode == "free-running" else "teacher-forced reference"
    col.markdown(f"**{name}, {label}:** {res.text or '∅'}  \n<small>source pieces: {len(res.src_tokens)} · "
                 f"decoder positions: {len(res.output_tokens)}</small>", unsafe_allow_html=True)
    if res.truncated:
        col.warning(f"Sentence {name} is longer than the model accepts ({tr.cfg.max_len} pieces); it was cut.")


@st.fragment
def view(result_a, result_b) -> None:
    """Alignment, kind, layer, head and cell values (all in the URL); the two aligned maps, their difference and
    the downloads. ``result_a``, ``result_b``: :func:`aiayn.app.explain_sentence` of the two sentences."""
    ui.warn_bad_param("by", BY, "the alignment must be pieces or position")
    ui.warn_bad_param("values", ui.is_bool, "values must be true or false")
    c1, c2, c3 = st.columns([2, 3, 1], vertical_alignment="bottom")
    by = c1.segmented_control("Align", BY, default="pieces", key="by", bind="query-params", required=True,
                              help="pieces: match equal pieces along a longest common subsequence (a changed word "
                                   "gets a row/column of its own, blank in the other sentence); position: row i "
                                   "against row i, the shorter sentence padded with blank rows (never cut).")
    kind, layer, head = kind_picker(c2), layer_picker(c3, L), head_picker(st, H)
    values = st.toggle("Write values in cells", key="values", bind="query-params")
    by = by if by in BY else "pieces"

    aligned = align_maps(result_a.attention, result_b.attention, kind, by=by)
    wa, wb, diff = aligned.pick(layer - 1, None if head is None else head - 1)
    what = "mean over heads" if head is None else f"head {head}"
    qm, km = aligned.q_matched, aligned.k_matched
    st.caption(f"{KIND_NAMES[kind].capitalize()}, layer {layer}, {what}. Aligned by {by}: {int(qm.sum())} of "
               f"{len(qm)} rows and {int(km.sum())} of {len(km)} columns are in both sentences; a row or column "
               "only in one sentence (labelled *a only* / *b only*) is blank in the other and in the difference. "
               "Rows are queries, columns keys; each sentence's rows sum to 1.")
    yt, xt = AXIS_TITLES[kind]
    both = np.concatenate([wa[np.isfinite(wa)], wb[np.isfinite(wb)]])
    zmax = 1.0 if values or not both.size or both.max() <= 0 else float(both.max())
    stem = f"compare_{kind}_{ctx.direction}_{by}_L{layer}_{'mean' if head is None else f'H{head}'}"
    left, right = ui.chart_columns(2, gap="medium")
    for col, name, w, key in ((left, "A", wa, "map_a"), (right, "B", wb, "map_b")):
        with col:
            fig = attention_heatmap(w, aligned.q_labels, aligned.k_labels, title=f"Sentence {name}",
                                    colorscale=ctx.colorscale, x_title=xt, y_title=yt, zmax=zmax,
                                    show_values=values, template=ctx.template)
            ui.show_figure(fig, key=key, filename=f"{stem}_{name}")
    fig = difference_heatmap(diff, aligned.q_labels, aligned.k_labels, x_title=xt, y_title=yt, show_values=values,
                             title=f"Difference B − A ({KIND_NAMES[kind]}, layer {layer}, {what})",
                             template=ctx.template)
    ui.show_figure(fig, key="map_diff", filename=f"{stem}_diff")
    st.caption("Blue: B attends more than A; red: A attends more than B; white: no change (a diverging, "
               "colour-blind-safe scale centred at 0).")

    st.markdown("##### Download the aligned maps")
    st.caption(f"All layers and heads of the {KIND_NAMES[kind]}, aligned by {by}: both sentences' weights and "
               "their difference (B − A), blank where absent (long format; layer, head and positions count from 0).")
    ui.download_buttons(aligned.to_dataframe, aligned.to_json, f"compare_{kind}_{ctx.direction}_{by}", key="cmp-dl")


view(result_a, result_b)
