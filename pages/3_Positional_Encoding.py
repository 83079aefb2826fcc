"""Positional encoding lab (Section 3.5): the PE table, its wavelengths, similarity by offset, the linear
map M_k, norms beside the model's embeddings, interleaved vs concatenated, learned positions."""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import json

import numpy as np
import pandas as pd
import streamlit as st

from aiayn import lessons
from aiayn import app as ui
from aiayn.figures import labs

MAX_SIM = 256  # positions in the similarity matrix (P x P cells)
MAX_CURVES = 8  # dimensions drawn as sinusoids at once
DEFAULT_CURVE_POSITIONS = 100  # the sinusoids are drawn over positions 0..100 by default


@st.cache_data(max_entries=32, show_spinner=False)
def pe_table(length: int, d_model: int, layout: str) -> np.ndarray:
    return lessons.pe_matrix(length, d_model, layout)


@st.cache_data(max_entries=16, show_spinner=False)
def similarity(length: int, d_model: int):
    return lessons.pe_similarity(length, d_model)


@st.cache_data(max_entries=16, show_spinner=False)
def offset(k: int, length: int, d_model: int):
    return lessons.pe_offset_map(k, length, d_model)


@st.cache_data(max_entries=4, show_spinner=False)
def norms(checkpoint: str, model_id: int, _model) -> pd.DataFrame:  # noqa: ARG001 - cache keys
    return lessons.embedding_norms(_model)


ctx = ui.setup_page("Positional encoding", icon=":material/waves:", intro=(
    "The Transformer has no recurrence, so it **adds** a position signal to each token embedding "
    "(Section 3.5): $PE_{(pos,2i)} = \\sin(pos/10000^{2i/d_{model}})$, "
    "$PE_{(pos,2i+1)} = \\cos(pos/10000^{2i/d_{model}})$."))
tr = ctx.translator_or_none()
cfg = tr.cfg if tr is not None else None
if tr is None:
    st.info("No model could be loaded for this direction: the tables below use d_model = 512 and 128 positions; "
            "the comparison with the model's embeddings is skipped.")
default_d = cfg.d_model if cfg else 512
default_len = min(cfg.max_len, lessons.MAX_PE_LENGTH) if cfg else 128
LAYOUTS = ["interleaved", "concatenated"]
# an imported Opus-MT model (Marian) adds the concatenated sinusoids: the default shows what the loaded model adds
model_layout = cfg.positional_layout if cfg is not None and cfg.positional_layout in LAYOUTS else "interleaved"

for name in ("d_model", "length", "k"):
    ui.warn_bad_param(name, ui.is_int, f"{name} must be a whole number")
ui.warn_bad_param("layout", ("interleaved", "concatenated"), "layout must be interleaved or concatenated")

c1, c2, c3 = st.columns(3)
d_model = c1.number_input("d_model", value=default_d, step=2, key="d_model", bind="query-params",
                          help=f"Even, at most {lessons.MAX_PE_D_MODEL}. Default: the loaded model's.")
length = c2.number_input("Positions (length)", value=default_len, step=1, key="length", bind="query-params",
                         help=f"1 to {lessons.MAX_PE_LENGTH}. Default: the loaded model's max_len.")
layout = c3.selectbox("Layout of the heatmap", LAYOUTS, index=LAYOUTS.index(model_layout), key="layout",
                      bind="query-params", help="interleaved: the paper (sin on even, cos on odd dimensions); "
                      "concatenated: tensor2tensor and Marian (all sines, then all cosines). Default: the loaded "
                      "model's.")
try:
    length, d_model = lessons.check_pe_size(length, d_model)
except lessons.LessonInputError as exc:
    st.error(f"**Cannot draw the table:** {exc}", icon=":material/block:")
    st.stop()

# -- 1. the table -------------------------------------------------------------------------------------------
st.header("1 · The PE matrix")
pe = pe_table(length, d_model, layout)
ui.show_figure(labs.pe_heatmap(pe, colorscale="RdBu", presenter=ctx.presenter, layout=layout,
                               title=f"PE ({layout}): {length} positions × d_model = {d_model}"),
               key="pe_heatmap", filename=f"pe_{layout}_{length}x{d_model}")
ui.download_buttons(lambda: pd.DataFrame(pe, columns=[f"dim{j}" for j in range(d_model)]).rename_axis("position").reset_index(),
                    lambda: json.dumps({"layout": layout, "d_model": d_model, "length": length, "pe": pe.round(6).tolist()}),
                    f"pe_{layout}_{length}x{d_model}")

# -- 2. sinusoids and wavelengths ----------------------------------------------------------------------------
st.header("2 · Each dimension is a sinusoid")
st.markdown("Each pair of dimensions (2i, 2i+1) is a sine and a cosine of one frequency; the wavelengths grow "
            "geometrically **from 2π to 10000·2π** positions, so low dimensions tell neighbours apart and high "
            "dimensions change slowly across the whole sentence.")
default_dims = ", ".join(str(d) for d in dict.fromkeys(2 * (d_model * f // 16) for f in (0, 1, 2, 4)))  # λ ≈ 6, 20, 63, 628
c1, c2 = st.columns(2)
dims_text = c1.text_input(f"Dimensions to plot (comma-separated, at most {MAX_CURVES})", value=default_dims, key="dims",
                          bind="query-params", help="Even dimensions are sines, odd ones cosines. Default: four "
                          "wavelengths a factor of about 3 to 10 apart.")
last = length - 1
default_range = (0, min(DEFAULT_CURVE_POSITIONS, last))
raw_range = st.query_params.get_all("positions")
bad_range = bool(raw_range) and not (len(raw_range) == 2 and all(ui.is_int(r) and 0 <= int(r) <= last for r in raw_range)
                                     and int(raw_range[0]) <= int(raw_range[1]))
if bad_range:
    st.warning(f"Ignored the URL parameter `positions={'&'.join(r[:10] for r in raw_range[:3])}`: expected two whole "
               f"numbers from 0 to {last}, the first not larger. Showing the default instead.", icon=":material/warning:")
held = st.session_state.get("positions")
if isinstance(held, (tuple, list)) and len(held) == 2 and not all(0 <= int(v) <= max(last, 1) for v in held):
    # the length shrank below the chosen range: clamp it before the slider is drawn (it would raise otherwise)
    st.session_state["positions"] = tuple(sorted(min(max(int(v), 0), last) for v in held))
pos_range = c2.slider("Positions shown", 0, max(last, 1), default_range, key="positions",
                      bind="query-params", disabled=last < 1, help="A short range keeps the waves apart.")
try:
    dims = lessons.parse_int_list(dims_text, "dimensions")
    if len(dict.fromkeys(dims)) > MAX_CURVES:
        raise lessons.LessonInputError(f"choose at most {MAX_CURVES} dimensions (got {len(dict.fromkeys(dims))}): "
                                       "more curves are a tangle")
    curves = lessons.pe_curves(length, d_model, dims)
except lessons.LessonInputError as exc:
    st.error(str(exc), icon=":material/block:")
    curves = None
if curves is not None:
    # the bound slider may still hold a bad URL value (e.g. a reversed range): draw the default then
    lo, hi = default_range if bad_range else sorted(min(max(int(v), 0), last) for v in pos_range)
    curves = curves[curves["position"].between(lo, hi)].reset_index(drop=True)
    ui.show_figure(labs.pe_curves_figure(curves, presenter=ctx.presenter), key="pe_curves", filename=f"pe_curves_{lo}-{hi}")
    ui.download_buttons(curves, curves.to_json(orient="records"), f"pe_curves_{lo}-{hi}", key="pe_curves")
wl = lessons.wavelengths(d_model)
ui.show_figure(labs.wavelength_figure(wl, presenter=ctx.presenter), key="wavelengths", filename="pe_wavelengths")
st.caption(f"Shortest wavelength {wl[0]:.4f} (= 2π), longest {wl[-1]:,.1f} (→ 10000·2π = {10000 * 2 * np.pi:,.1f} "
           "as d_model grows).")

# -- 3. similarity ---------------------------------------------------------------------------------------------
st.header("3 · Similarity depends on the offset only")
n_sim = min(length, MAX_SIM)
sim = similarity(n_sim, d_model)
st.markdown(f"$PE(p)\\cdot PE(q) = \\sum_i \\cos(\\omega_i (q-p))$: every diagonal of the matrix is constant. "
            f"Largest deviation from that formula over all {n_sim}² pairs: **{sim.max_deviation:.2e}**."
            + (f" (First {MAX_SIM} positions.)" if length > MAX_SIM else ""))
ui.show_figure(labs.similarity_figure(sim, colorscale=ctx.colorscale, presenter=ctx.presenter), key="similarity",
               filename="pe_similarity")
ui.download_buttons(pd.DataFrame({"offset_k": sim.offsets, "dot_product": sim.profile}),
                    lambda: json.dumps({"matrix": sim.matrix.round(6).tolist(), "offsets": sim.offsets.tolist(),
                                        "profile": sim.profile.tolist(), "max_deviation": sim.max_deviation}),
                    "pe_similarity")

# -- 4. M_k ------------------------------------------------------------------------------------------------
st.header("4 · Relative positions are linear maps")
st.markdown("For any fixed offset k there is one matrix $M_k$ (a 2×2 rotation per frequency) with "
            "$PE(pos+k) = M_k\\,PE(pos)$ for **every** pos: the paper's reason to expect that the model "
            "\"can easily learn to attend by relative positions\".")
k = st.number_input("Offset k", value=min(5, length - 1), step=1, key="k", bind="query-params",
                    help=f"|k| < length ({length}).")
try:
    off = offset(int(k), length, d_model)
except lessons.LessonInputError as exc:
    st.error(str(exc), icon=":material/block:")
    off = None
if off is not None:
    m1, m2 = st.columns(2)
    m1.metric("max |M_k·PE(pos) − PE(pos+k)|", f"{off.max_error:.2e}")
    m2.metric("positions checked", f"{len(off.positions):,}")
    ui.show_figure(labs.offset_map_figure(off, colorscale="RdBu", presenter=ctx.presenter), key="offset_map",
                   filename=f"pe_offset_k{off.k}")
    ui.download_buttons(pd.DataFrame({"pos": off.positions, "abs_error": np.abs(off.predicted - off.actual).max(axis=1)}),
                        lambda: json.dumps({"k": off.k, "M_k": off.matrix.tolist(), "max_error": off.max_error}),
                        f"pe_offset_k{off.k}")

# -- 5. norms -------------------------------------------------------------------------------------------------
st.header("5 · How loud is the position signal?")
if tr is None:
    st.info("Needs a loaded model.")
else:
    df = norms(str(ctx.checkpoint), id(tr.model), tr.model)
    st.markdown(f"The model adds $\\sqrt{{d_{{model}}}}\\cdot E[token]$ (Section 3.4) and $PE(pos)$. For the "
                f"sinusoids $\\|PE(pos)\\| = \\sqrt{{d_{{model}}/2}}$ = {np.sqrt(cfg.d_model / 2):.2f} at every position "
                f"(d_model = {cfg.d_model} of the loaded model).")
    ui.show_figure(labs.norms_figure(df, presenter=ctx.presenter), key="norms", filename="embedding_vs_pe_norms")
    ui.download_buttons(df, df.to_json(orient="records"), "embedding_vs_pe_norms")

# -- 6. layouts ---------------------------------------------------------------------------------------------
st.header("6 · Interleaved (paper) vs concatenated (tensor2tensor)")
st.markdown("Both hold the same sines and cosines; only the order of dimensions differs. A model must be used with "
            "the layout it was trained with: " + (f"the loaded model uses the {model_layout} one"
                                                 + (" (the paper's)." if model_layout == "interleaved" else
                                                    ", as it was trained (not the paper's).")
                                                 if cfg is not None else "aiayn's own models use the paper's."))
n_lay = min(length, 256)
inter, concat = pe_table(n_lay, d_model, "interleaved"), pe_table(n_lay, d_model, "concatenated")
ui.show_figure(labs.layouts_figure(inter, concat, colorscale="RdBu", presenter=ctx.presenter), key="layouts",
               filename="pe_layouts")

# -- 7. learned positions ------------------------------------------------------------------------------------
st.header("7 · Learned positions")
learned = lessons.learned_positions(tr.model, "tgt", min(length, 256)) if tr is not None else None
if learned is None:
    st.info("The loaded model uses sinusoids, so there is no learned position table to show: no checkpoint trained "
            "with `positional = \"learned\"` (Table 3, row (E)) is shipped. The paper found the two "
            "\"produced nearly identical results\".")
else:
    sinus = pe_table(learned.shape[0], learned.shape[1], "interleaved")
    ui.show_figure(labs.learned_vs_sinusoid_figure(learned, sinus, colorscale="RdBu", presenter=ctx.presenter),
                   key="learned", filename="learned_positions")
    ui.download_buttons(pd.DataFrame(learned).rename_axis("position").reset_index(),
                        lambda: json.dumps({"learned": learned.round(6).tolist()}), "learned_positions")
