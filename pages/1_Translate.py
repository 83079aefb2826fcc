"""Translate: beam search (Section 6.1) on a typed sentence, n-best list, pieces, cross-attention alignment."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from aiayn import app as ui
from aiayn.analysis import kind_stack, query_labels, unique_labels
from aiayn.figures.attention import AXIS_TITLES, attention_heatmap
from aiayn.evaluation.modelcard import quality_verdict

DEFAULTS = {"en-de": "I have no time.", "de-en": "Ich habe keine Zeit."}
BEAM_MAX = 16


def chips(pieces: list[str]) -> str:
    return " ".join(f"`{p.replace('`', 'ˋ')}`" for p in pieces)


ctx = ui.setup_page("Translate", icon="🌐")
tr = ctx.translator
cfg = tr.cfg

# -- seed the form from the URL once per session (st.form widgets cannot be bound to the URL) -------------------
if "tr_seeded" not in st.session_state or st.session_state.get("tr_dir") != ctx.direction:
    first = "tr_seeded" not in st.session_state
    url_text = st.query_params.get("text") if first else None
    prev = st.session_state.get("tr_text")
    if url_text is not None:
        st.session_state.tr_text = url_text
    elif prev is None or prev == DEFAULTS.get(st.session_state.get("tr_dir", ""), None):
        st.session_state.tr_text = DEFAULTS[ctx.direction]
    if first:
        st.session_state.tr_beam = ui.number_param("beam", 1, BEAM_MAX) or 4
        a = ui.number_param("alpha", 0.0, 2.0, kind=float)
        st.session_state.tr_alpha = 0.6 if a is None else a
        st.session_state.tr_maxlen = ui.number_param("maxlen", 1, cfg.max_len)
    st.session_state.tr_seeded = True
    st.session_state.tr_dir = ctx.direction

with st.form("translate", enter_to_submit=True, border=True):
    text = st.text_input(f"Sentence in {'English' if ctx.src_lang == 'en' else 'German'}", key="tr_text",
                         max_chars=None, placeholder="Type a sentence and press Enter")
    c1, c2, c3, c4 = st.columns([1, 1, 1, 1], vertical_alignment="bottom")
    beam = c1.number_input("Beam size", 1, BEAM_MAX, step=1, key="tr_beam", help="1 = greedy decoding; paper: 4")
    alpha = c2.slider("Length penalty α", 0.0, 2.0, step=0.1, key="tr_alpha",
                      help="GNMT length penalty ((5+|Y|)/6)^α; paper: 0.6. 0 = raw log-probability.")
    max_len = c3.number_input("Max output pieces", 1, cfg.max_len, step=1, key="tr_maxlen",
                              placeholder="source + 50", help="Empty: source length + 50 (Section 6.1)")
    c4.form_submit_button("Translate", type="primary", width="stretch")

# keep the view in the URL
for name, value, default in (("text", text, None), ("beam", int(beam), 4), ("alpha", round(float(alpha), 2), 0.6),
                             ("maxlen", max_len, None)):
    if value is None or value == default:
        st.query_params.pop(name, None)
    else:
        st.query_params[name] = str(value)

cleaned = ui.sentence_or_stop(text)

try:
    result = ui.explain_sentence(ctx.direction, cleaned, beam_size=int(beam), length_penalty=float(alpha),
                                 max_len=None if max_len is None else int(max_len), n_best=int(beam))
except ValueError as exc:
    st.error(f"Could not translate: {exc}")
    st.stop()
except ui.ModelUnavailable as exc:
    st.error(f"The model could not be loaded: {exc}")
    st.stop()

if result.truncated:
    st.warning(f"The sentence is longer than the model accepts ({cfg.max_len} pieces); it was cut.", icon="✂️")
if not result.finished:
    st.warning("The translation stopped at the maximum output length before the end-of-sentence token.", icon="⏱️")

st.markdown("#### Translation")
st.subheader(result.text or "∅ (empty output)", anchor=False)
verdict = quality_verdict(tr.meta)
if verdict is not None:
    level, message = verdict
    (st.caption if level == "beats" else st.info)(message, **({} if level == "beats" else {"icon": "📏"}))
m1, m2, m3, m4 = st.columns(4)
m1.metric("Time", f"{result.elapsed_ms:.0f} ms", help="Wall time of the beam search, this server")
m2.metric("Score", f"{result.score:.3f}", help="Length-normalised log-probability (natural log) the beam ranked by")
m3.metric("Source pieces", len(result.src_tokens))
m4.metric("Output pieces", len(result.output_tokens))

left, right = st.columns([2, 3], gap="large")
with left:
    st.markdown(f"**n-best list** (beam size {int(beam)}, α = {float(alpha):.1f})")
    st.dataframe(pd.DataFrame({"rank": range(1, len(result.nbest) + 1), "translation": [t for t, _ in result.nbest],
                               "score": [s for _, s in result.nbest]}),
                 hide_index=True, width="stretch", column_config={"score": st.column_config.NumberColumn(format="%.3f")})
with right:
    st.markdown("**SentencePiece pieces** (`▁` marks the start of a word)")
    st.markdown("Source: " + chips(result.src_tokens))
    st.markdown("Output: " + chips(result.output_tokens))

# -- cross-attention alignment --------------------------------------------------------------------------------
st.markdown("#### Alignment: encoder-decoder attention")
st.caption("Each row is an output piece (what the decoder was fed → what it predicted); each column a source "
           "piece. A bright cell means that output position looked at that source piece.")
L, H = cfg.n_layers, cfg.n_heads
layer_opts = [str(i) for i in range(1, L + 1)]
head_opts = ["mean"] + [str(i) for i in range(1, H + 1)]
ui.warn_bad_param("layer", layer_opts, f"the layer must be 1 to {L}")
ui.warn_bad_param("head", head_opts, f"the head must be 1 to {H} or mean")
a1, a2 = st.columns([1, 4])
layer = a1.selectbox("Layer", layer_opts, index=L - 1, key="layer", bind="query-params")
head = a2.segmented_control("Head", head_opts, default="mean", key="head", bind="query-params", required=True)
layer = layer if layer in layer_opts else layer_opts[-1]
head = head if head in head_opts else "mean"
cross = kind_stack(result.attention, "cross")[int(layer) - 1]
w = cross.mean(axis=0) if head == "mean" else cross[int(head) - 1]
what = "mean over heads" if head == "mean" else f"head {head}"
fig = attention_heatmap(
    w, query_labels(result.decoder_input_tokens, result.output_tokens), unique_labels(result.src_tokens),
    title=f"Cross-attention, layer {layer}, {what}", colorscale=ctx.colorscale,
    x_title=AXIS_TITLES["cross"][1], y_title=AXIS_TITLES["cross"][0], template=ctx.template,
)
ui.show_figure(fig, key="alignment", filename=f"alignment_{ctx.direction}_L{layer}_{what.replace(' ', '_')}")
ui.download_buttons(lambda: result.attention.to_dataframe(kinds=["cross"]), lambda: result.attention.to_json(),
                    f"attention_{ctx.direction}", key="tr-dl")

explorer_params = ui.nav_query_params(text=result.source, kind="cross", layer=layer, head=head)
ui.page_link("pages/2_Attention_Explorer.py", label="Open this sentence in the attention explorer", icon="🔍",
             query_params=explorer_params)
