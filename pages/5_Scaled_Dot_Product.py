"""Scaled dot-product lab (Section 3.2.1, Equation 1, footnote 4): why divide by sqrt(d_k), and Eq. 1 step by
step on small matrices you can edit."""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import json

import numpy as np
import pandas as pd
import streamlit as st

from aiayn import lessons
from aiayn import app as ui
from aiayn.figures import labs

SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
N_SAMPLES = 20000
MASKS = ("none", "causal", "hide last key")


@st.cache_data(max_entries=32, show_spinner=False)
def samples(d_k: int, seed: int) -> np.ndarray:
    return lessons.random_dot_products(d_k, N_SAMPLES, seed)


@st.cache_data(max_entries=8, show_spinner=False)
def sharpness(n_keys: int) -> pd.DataFrame:
    return lessons.softmax_sharpness(SWEEP, n_keys=n_keys)


ctx = ui.setup_page("Scaled dot-product attention", icon=":material/functions:", intro=(
    "$\\mathrm{Attention}(Q,K,V) = \\mathrm{softmax}(QK^T/\\sqrt{d_k})\\,V$ (Equation 1). \"We suspect that for large "
    "values of d_k, the dot products grow large in magnitude, pushing the softmax function into regions where it "
    "has extremely small gradients. To counteract this effect, we scale the dot products by $1/\\sqrt{d_k}$.\""))
tr = ctx.translator_or_none()
default_dk = tr.cfg.d_k if tr is not None else 64

# -- 1. variance ----------------------------------------------------------------------------------------------
st.header("1 · Dot products grow with d_k")
st.markdown("If the components of q and k are independent with mean 0 and variance 1, then "
            "$q\\cdot k = \\sum_{i=1}^{d_k} q_i k_i$ has mean 0 and **variance d_k** (footnote 4).")
ui.warn_bad_param("d_k", ui.is_int, "d_k must be a whole number")
ui.warn_bad_param("scaled", lambda r: r.lower() in ("true", "false"), "scaled must be true or false")
c1, c2, c3 = st.columns(3)
d_k = c1.number_input("d_k", value=default_dk, step=1, key="d_k", bind="query-params",
                      help=f"1 to {lessons.MAX_D_K}. Default: the loaded model's d_model / h.")
seed = c2.number_input("Random seed", value=0, min_value=0, max_value=2**31 - 1, step=1, key="seed")
scaled = c3.toggle("Divide by √d_k", key="scaled", bind="query-params")
try:
    d_k = lessons.check_d_k(d_k)
except lessons.LessonInputError as exc:
    st.error(str(exc), icon=":material/block:")
    st.stop()
x = samples(d_k, int(seed))
m1, m2, m3 = st.columns(3)
m1.metric("sample variance of q·k", f"{np.var(x):.2f}", help=f"theory: d_k = {d_k}")
m2.metric("sample variance of q·k/√d_k", f"{np.var(x / np.sqrt(d_k)):.3f}", help="theory: 1")
m3.metric("samples", f"{len(x):,}")
ui.show_figure(labs.dot_histogram(x, d_k, scaled=scaled, presenter=ctx.presenter), key="hist", filename=f"dot_products_dk{d_k}")
ui.download_buttons(lambda: pd.DataFrame({"q_dot_k": x, "scaled": x / np.sqrt(d_k)}),
                    lambda: json.dumps({"d_k": d_k, "seed": int(seed), "variance": float(np.var(x)), "samples": x[:2000].tolist()}),
                    f"dot_products_dk{d_k}")

# -- 2. softmax saturation -----------------------------------------------------------------------------------------
st.header("2 · Large scores saturate the softmax")
st.markdown("Softmax over random keys: without scaling, the weights collapse onto one key as d_k grows (entropy → 0, "
            "largest weight → 1, tiny gradients); with scaling they keep the same spread for every d_k.")
n_keys = st.slider("Number of keys", 2, 128, 16, key="n_keys", bind="query-params")
df = sharpness(int(n_keys))
ui.show_figure(labs.sharpness_figure(df, presenter=ctx.presenter), key="sharpness", filename="softmax_sharpness")
ui.download_buttons(df, df.to_json(orient="records"), "softmax_sharpness")

# -- 3. by hand ------------------------------------------------------------------------------------------------
st.header("3 · Equation 1 step by step")
st.markdown("Edit the queries, keys and values (add or delete rows: each row is one token). Every step is computed "
            "here with numpy and compared with `aiayn.model.attention.scaled_dot_product_attention`, the function the model uses. "
            "Rows and columns count from 0 in the tables and in the maps: row 0 of the Q table is the query q0, "
            "column d0 its first component.")
q0, k0, v0 = lessons.example_qkv()  # rows and columns count from 0, as the maps below do
e1, e2, e3 = st.columns(3)
with e1:
    st.markdown("**Q** (queries × d_k)")
    q = st.data_editor(q0, num_rows="dynamic", key="Q", hide_index=False)  # row i = qi in the maps
with e2:
    st.markdown("**K** (keys × d_k)")
    k = st.data_editor(k0, num_rows="dynamic", key="K", hide_index=False)  # row i = ki in the maps
with e3:
    st.markdown("**V** (keys × d_v)")
    v = st.data_editor(v0, num_rows="dynamic", key="V", hide_index=False)  # row i = vi in the maps
ui.warn_bad_param("mask", MASKS, "mask must be one of " + ", ".join(MASKS))
mask_kind = st.radio("Mask", MASKS, horizontal=True, key="mask", bind="query-params",
                     help="causal: query i sees keys 0..i (as in the decoder); hide last key: like a pad at the end.")
mask = None
if mask_kind == "causal":
    mask = np.tril(np.ones((len(q), len(k)), dtype=bool))
elif mask_kind == "hide last key":
    mask = np.ones((len(q), len(k)), dtype=bool)
    if len(k):
        mask[:, -1] = False
try:
    res = lessons.attention_steps(q.to_numpy(), k.to_numpy(), v.to_numpy(), mask)
except lessons.LessonInputError as exc:
    st.error(f"**Cannot compute attention:** {exc}", icon=":material/block:")
    st.stop()
qi, ki = lessons.names("q", len(q)), lessons.names("k", len(k))
d = q.shape[1]
a1, a2 = st.columns(2)
with a1:
    ui.show_figure(labs.matrix_figure(res.scores, title="① QKᵀ", row_labels=qi, col_labels=ki, colorscale=ctx.colorscale,
                                      presenter=ctx.presenter), key="m_scores", filename="eq1_scores")
with a2:
    ui.show_figure(labs.matrix_figure(res.scaled, title=f"② ÷ √d_k = √{d} = {np.sqrt(d):.3f}", row_labels=qi, col_labels=ki,
                                      colorscale=ctx.colorscale, presenter=ctx.presenter), key="m_scaled", filename="eq1_scaled")
a3, a4 = st.columns(2)
with a3:
    ui.show_figure(labs.matrix_figure(res.masked, title=f"③ mask ({mask_kind})", row_labels=qi, col_labels=ki,
                                      colorscale=ctx.colorscale, presenter=ctx.presenter), key="m_masked", filename="eq1_masked")
with a4:
    ui.show_figure(labs.matrix_figure(res.weights, title="④ softmax per row", row_labels=qi, col_labels=ki,
                                      colorscale=ctx.colorscale, presenter=ctx.presenter), key="m_weights", filename="eq1_weights")
ui.show_figure(labs.matrix_figure(res.output, title="⑤ weights × V = output", row_labels=qi,
                                  col_labels=lessons.names("v", res.output.shape[1]), colorscale=ctx.colorscale,
                                  presenter=ctx.presenter), key="m_output", filename="eq1_output")
if res.max_abs_diff < 1e-5:
    st.success(f"Equal to `aiayn.model.attention.scaled_dot_product_attention`: largest difference {res.max_abs_diff:.1e} "
               "(the library computes the softmax in float32).", icon=":material/check_circle:")
else:
    st.error(f"Differs from `aiayn.model.attention.scaled_dot_product_attention` by {res.max_abs_diff:.3g}.", icon=":material/error:")
ui.download_buttons(
    lambda: pd.DataFrame([{"query": qi[i], "key": ki[j], "QK^T": res.scores[i, j], "scaled": res.scaled[i, j],
                           "masked": res.masked[i, j], "weight": res.weights[i, j]} for i in range(len(qi)) for j in range(len(ki))]),
    lambda: json.dumps({"Q": q.to_numpy().tolist(), "K": k.to_numpy().tolist(), "V": v.to_numpy().tolist(), "mask": mask_kind,
                        "weights": res.weights.tolist(), "output": res.output.tolist(), "max_abs_diff": res.max_abs_diff}),
    "eq1_steps")
