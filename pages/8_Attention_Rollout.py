"""Attention rollout (Abnar and Zuidema 2020, Section 3): raw head-averaged attention beside the rollout that
multiplies it through the layers, for the encoder, the masked decoder and the encoder-decoder attention.
"""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import streamlit as st

from aiayn import app as ui
from aiayn.analysis import rollout, rollout_dict, rollout_frame, view_stack
from aiayn.examples import EXAMPLES
from aiayn.figures.attention import AXIS_TITLES, attention_heatmap
from aiayn.figures.rollout import presenter_columns, rollout_layers
from aiayn.model.maps import KIND_TITLES

from aiayn.app.pickers import kind_picker, layer_picker
MODES = ["free", "forced"]
BOOL = ("true", "false", "True", "False", "1", "0")

ctx = ui.setup_page("Attention rollout", icon=":material/account_tree:", intro=(
    "**Attention rollout** (Abnar and Zuidema 2020, *Quantifying Attention Flow in Transformers*, Section 3) "
    "follows information up the stack: each layer's heads are averaged, the residual connection is added as an "
    "identity, $A' = r\\,I + (1-r)\\,A$ (Abnar and Zuidema use $r = 0.5$), rows are renormalised and the layers' "
    "matrices are multiplied, so a row of the rollout up to layer $l$ says how much each input piece feeds that "
    "position. It is a rough picture, not an explanation: it assumes that attention mixes information linearly "
    "and that every head counts equally, and it ignores the values, the feed-forward layers and LayerNorm."))
tr = ctx.translator
L = tr.cfg.n_layers
examples = EXAMPLES[ctx.direction]
by_sentence = {s: ref for s, ref, _ in examples}

# -- inputs, all in the URL ------------------------------------------------------------------------------------
ui.warn_bad_param("mode", MODES, "the mode must be free or forced")
ui.warn_bad_param("residual", lambda r: ui.is_float(r) and 0.0 <= float(r) <= 1.0, "the residual must be 0 to 1")
ui.warn_bad_param("via_encoder", BOOL, "via_encoder must be true or false")

c1, c2 = st.columns([3, 2], gap="large")
text = c1.text_input(f"Sentence ({ctx.src_lang.upper()})", value=examples[0][0], key="text", bind="query-params",
                     max_chars=400, help="Default: the first curated example of the explorer.")
ref = c1.text_input(f"Reference translation ({ctx.tgt_lang.upper()}, teacher-forced mode)", value="", key="ref",
                    bind="query-params", max_chars=400,
                    placeholder="Empty: the curated reference of an example sentence")
mode = c2.radio("Decoder input", MODES, key="mode", bind="query-params", horizontal=True,
                captions=["model's own output (beam 4)", "a reference you give"],
                help="Free-running: beam search, the maps of the model's output. Teacher-forced: the reference is "
                     "fed to the decoder (as in training).")
mode = mode if mode in MODES else "free"
kind = kind_picker(c2)
c3, c4, c5 = st.columns([1, 2, 2], vertical_alignment="bottom")
layer = layer_picker(c3, L)
residual = c4.slider("Residual weight r", 0.0, 1.0, 0.5, step=0.05, key="residual", bind="query-params",
                     help="Weight of the identity (the residual connection): A' = r·I + (1 − r)·A. The paper: 0.5. "
                          "r = 1 gives the identity, r = 0 the plain product of the head means.")
residual = min(1.0, max(0.0, float(residual)))
via_encoder = c5.toggle("Cross: through the encoder rollout", value=True, key="via_encoder", bind="query-params",
                        disabled=kind != "cross",
                        help="Multiply the cross rollout by the encoder's full rollout, so that it lands on the input "
                             "pieces rather than on the encoder's output positions.")

cleaned = ui.sentence_or_stop(text)
ui.language_hint(cleaned, ctx.src_lang, ctx.tgt_lang)
reference = None
if mode == "forced":
    reference = ui.optional_reference(ref or by_sentence.get(cleaned, ""))
    if reference is None:
        st.warning("Teacher-forced mode needs a reference translation; showing the model's own output instead.")
    elif not ref:
        st.caption("Teacher-forced on the curated reference of this example.")
try:
    result = ui.explain_sentence(ctx.direction, cleaned, reference=reference)
    maps = result.attention
    rolled = rollout(maps, kind=kind, residual=residual, through_encoder=via_encoder)
    raw_stack, q_lab, k_lab = view_stack(maps, kind)
except ValueError as exc:
    st.error(f"Could not compute the rollout: {exc}")
    st.stop()
label = "Model output" if result.mode == "free-running" else "Teacher-forced reference"
st.markdown(f"**{label}:** {result.text or '∅'}")
if rolled.shape[2] == 0:
    st.info("The output is empty: there are no decoder positions to show.")
    st.stop()

# -- raw vs rolled out -------------------------------------------------------------------------------------------
roll = rolled[:, 0].numpy()  # (L, Q, K) of the one sentence
through = kind == "cross" and via_encoder
yt, xt = AXIS_TITLES[kind]
xt_roll = "key (source pieces, through the encoder rollout)" if through else xt
if kind == "cross":
    st.caption("Cross rollout: each decoder layer's cross-attention is carried forward by the later decoder "
               "self-attention layers (damped by r at each layer) and renormalised into a distribution over the "
               "source" + (", then multiplied by the encoder's rollout up to its last layer, whose output every "
               "cross-attention reads." if through else " (keys: the encoder's output positions)."))
left, right = ui.chart_columns(2, gap="medium")
with left:
    ui.show_figure(attention_heatmap(raw_stack[layer - 1].mean(0), q_lab, k_lab, zmax=1.0,
                                     title=f"Raw: layer {layer}, mean over heads", colorscale=ctx.colorscale,
                                     x_title=xt, y_title=yt, template=ctx.template),
                   key="raw", filename=f"raw_{kind}_{ctx.direction}_L{layer}")
with right:
    ui.show_figure(attention_heatmap(roll[layer - 1], q_lab, k_lab, zmax=1.0,
                                     title=f"Rollout: layers 1 to {layer}, r = {residual:.2f}",
                                     colorscale=ctx.colorscale, x_title=xt_roll, y_title=yt, template=ctx.template),
                   key="rolled", filename=f"rollout_{kind}_{ctx.direction}_L{layer}_r{residual:.2f}")
st.caption(f"{KIND_TITLES[kind].capitalize()}. Rows are queries, columns keys; every row sums to 1 in both maps. "
           "Same colour scale (0 to 1) on both sides.")

st.markdown("##### The rollout layer by layer")
ui.show_figure(rollout_layers(roll, q_lab, k_lab, highlight=layer, colorscale=ctx.colorscale, template=ctx.template,
                              title=f"Rollout of the {KIND_TITLES[kind]} up to each layer (r = {residual:.2f})",
                              columns=presenter_columns(roll.shape[0]) if ctx.presenter else None),
               key="layers", filename=f"rollout_{kind}_{ctx.direction}_layers_r{residual:.2f}")

st.markdown("##### Download the rollout")
st.caption(f"Every layer of the rollout of the {KIND_TITLES[kind]} (r = {residual:.2f}); layers count from 0 "
           "in the files (layer 0 = the rollout of the first layer alone).")
ui.download_buttons(lambda: rollout_frame(rolled, maps, kind),
                    lambda: rollout_dict(rolled, maps, kind, residual, through_encoder=via_encoder),
                    f"rollout_{kind}_{ctx.direction}_r{residual:.2f}", key="ro-dl")
