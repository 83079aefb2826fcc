"""Plotly figures of the teaching labs (positional encoding, masking, scaled dot-product attention, model
size and training). Pure builders: numbers in (from :mod:`aiayn.lessons`), ``plotly.graph_objects.Figure``
out; no Streamlit. ``presenter=True`` enlarges all type (the template of :mod:`aiayn.figures.theme`); colour
scales are passed in by the page.

Axis labels of token axes are unique ``f"{i}:{piece}"`` strings, since pieces repeat in a sentence.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .attention import plotly_safe
from .theme import FONT_SIZE, PRESENTER_FONT_SIZE, apply_presenter_theme

#: Okabe-Ito palette: distinguishable with the common colour-vision deficiencies.
SAFE_COLORS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
#: most cells a heatmap draws (bigger tables are shown with a stride and say so in the title).
MAX_CELLS = 160_000
MASKED_LABEL = "−∞ (masked)"


def _style(fig: go.Figure, presenter: bool, title: str | None = None, height: int | None = None) -> go.Figure:
    """Title, margins, the colour-blind-safe colorway and the type size; ``presenter=True`` writes the
    presenter template onto every text element (:func:`aiayn.figures.theme.apply_presenter_theme`)."""
    fig.update_layout(
        font=dict(size=FONT_SIZE),
        title=dict(text=title, font=dict(size=FONT_SIZE + 3)) if title else None,
        margin=dict(l=60, r=30, t=70 if title else 30, b=50),
        colorway=SAFE_COLORS,
        legend=dict(font=dict(size=FONT_SIZE)),
    )
    if presenter:
        apply_presenter_theme(fig)
    if height:
        fig.update_layout(height=height)
    return fig


def token_labels(tokens: Sequence[str]) -> list[str]:
    """Unique axis labels ``i:piece``, HTML-escaped for plotly (``</s>`` would otherwise vanish)."""
    return [plotly_safe(f"{i}:{t}") for i, t in enumerate(tokens)]


def _stride(n_rows: int, n_cols: int, max_cells: int = MAX_CELLS) -> int:
    return max(1, math.ceil(n_rows * n_cols / max_cells))


# ----------------------------------------------------------------------------------------------- PE
#: what the dimension axis holds in each layout of the sinusoids (:func:`aiayn.lessons.pe_matrix`)
PE_DIMENSIONS = {"interleaved": "dimension (even: sin, odd: cos)",
                 "concatenated": "dimension (first half: sin, second half: cos)"}


def pe_heatmap(pe: np.ndarray, *, colorscale: str = "RdBu", presenter: bool = False, title: str | None = None,
               layout: str = "interleaved") -> go.Figure:
    """The PE table as a heatmap: positions (rows, y) x dimensions (columns, x), values in [-1, 1]; ``layout``
    (``"interleaved"``, the paper's, or ``"concatenated"``, Marian's and tensor2tensor's) names the dimension axis.

    Tables of more than ``MAX_CELLS`` cells show one position in s (said in the title)."""
    n, d = pe.shape
    s = _stride(n, d)
    rows = np.arange(0, n, s)
    t = title or f"PE matrix: {n} positions × d_model = {d}"
    if s > 1:
        t += f" (one position in {s} shown)"
    fig = go.Figure(go.Heatmap(z=pe[rows], x=np.arange(d), y=rows, zmin=-1, zmax=1, colorscale=colorscale,
                               colorbar=dict(title="PE"), hovertemplate="pos %{y}<br>dim %{x}<br>PE %{z:.4f}<extra></extra>"))
    fig.update_xaxes(title=PE_DIMENSIONS[layout])
    fig.update_yaxes(title="position", autorange="reversed")
    return _style(fig, presenter, t, 480)


def pe_curves_figure(df: pd.DataFrame, *, presenter: bool = False) -> go.Figure:
    """Curves ``PE(pos, dim)`` over positions for the chosen dimensions (frame of :func:`lessons.pe_curves`)."""
    fig = go.Figure()
    for dim, g in df.groupby("dimension", sort=False):
        wl = float(g["wavelength"].iloc[0])
        fig.add_trace(go.Scatter(x=g["position"], y=g["value"], mode="lines",
                                 name=f"dim {dim} ({g['kind'].iloc[0]}, i={int(g['pair_i'].iloc[0])}, λ={wl:,.1f})"))
    fig.update_xaxes(title="position")
    fig.update_yaxes(title="PE(pos, dim)", range=[-1.1, 1.1])
    return _style(fig, presenter, "Chosen dimensions as sinusoids (λ = wavelength in positions)", 420)


def wavelength_figure(wl: np.ndarray, *, presenter: bool = False) -> go.Figure:
    """Wavelength of each sin/cos pair i (log scale) between the bounds ``2π`` and ``10000·2π`` (Section 3.5),
    both drawn as dotted reference lines with their labels.

    ``wl``: ``(d_model / 2,)`` wavelengths in positions (:func:`aiayn.lessons.wavelengths`). The y axis is
    logarithmic; its range always shows both bounds. (Plotly places annotations on a log axis at ``log10(y)``
    while shapes take ``y`` itself: the labels are placed accordingly.)"""
    i = np.arange(len(wl))
    fig = go.Figure(go.Scatter(x=i, y=wl, mode="lines+markers", name="wavelength 2π·10000^(2i/d_model)"))
    bounds = ((2 * math.pi, "2π"), (10000 * 2 * math.pi, "10000·2π"))
    for y, name in bounds:
        fig.add_hline(y=y, line_dash="dot", line_color="grey")
        fig.add_annotation(x=1, xref="paper", xanchor="right", y=math.log10(y), yref="y", yanchor="bottom",
                           text=name, showarrow=False)
    finite = np.asarray(wl, dtype=float)[np.isfinite(wl) & (np.asarray(wl, dtype=float) > 0)]
    lo = min([bounds[0][0], *finite.tolist()])
    hi = max([bounds[1][0], *finite.tolist()])
    fig.update_xaxes(title="pair i (dimensions 2i, 2i+1)")
    fig.update_yaxes(title="wavelength (positions)", type="log", range=[math.log10(lo) - 0.15, math.log10(hi) + 0.35])
    return _style(fig, presenter, "Wavelengths form a geometric progression", 380)


def similarity_figure(lesson, *, colorscale: str = "Viridis", presenter: bool = False) -> go.Figure:
    """``PE(p)·PE(q)`` heatmap beside its offset profile ``Σ_i cos(ω_i k)`` (a :class:`lessons.SimilarityLesson`)."""
    sim, n = lesson.matrix, lesson.matrix.shape[0]
    s = _stride(n, n)
    idx = np.arange(0, n, s)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.2,
                        subplot_titles=("PE(p)·PE(q)", "as a function of the offset k = q − p"))
    fig.add_trace(go.Heatmap(z=sim[np.ix_(idx, idx)], x=idx, y=idx, colorscale=colorscale,
                             colorbar=dict(title="dot", x=0.42, xanchor="left", thickness=14),
                             hovertemplate="p %{y}<br>q %{x}<br>%{z:.3f}<extra></extra>"), 1, 1)
    fig.add_trace(go.Scatter(x=lesson.offsets, y=lesson.profile, mode="lines", name="Σ_i cos(ω_i k)"), 1, 2)
    fig.update_yaxes(autorange="reversed", title="position p", row=1, col=1)
    fig.update_xaxes(title="position q", row=1, col=1)
    fig.update_xaxes(title="offset k", row=1, col=2)
    fig.update_yaxes(title="dot product", row=1, col=2)
    return _style(fig, presenter, f"Similarity depends on the offset only (max deviation {lesson.max_deviation:.1e})", 460)


def offset_map_figure(lesson, *, colorscale: str = "RdBu", presenter: bool = False, max_dims: int = 32) -> go.Figure:
    """``M_k`` (its leading ``max_dims`` dimensions) and the error ``|M_k PE(pos) − PE(pos+k)|`` per position."""
    m = lesson.matrix
    d = min(max_dims, m.shape[0])
    err = np.abs(lesson.predicted - lesson.actual).max(axis=1)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.2,
                        subplot_titles=(f"M_k, k = {lesson.k} (first {d} of {m.shape[0]} dims)",
                                        "max |M_k·PE(pos) − PE(pos+k)| per pos"))
    fig.add_trace(go.Heatmap(z=m[:d, :d], zmin=-1, zmax=1, colorscale=colorscale,
                             colorbar=dict(title="M_k", x=0.42, xanchor="left", thickness=14),
                             hovertemplate="row %{y}<br>col %{x}<br>%{z:.4f}<extra></extra>"), 1, 1)
    fig.add_trace(go.Scatter(x=lesson.positions, y=err, mode="lines", name="error"), 1, 2)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(title="pos", row=1, col=2)
    fig.update_yaxes(title="abs error", exponentformat="e", row=1, col=2)
    return _style(fig, presenter, f"PE(pos+k) = M_k PE(pos): max error {lesson.max_error:.2e}", 440)


def norms_figure(df: pd.DataFrame, *, presenter: bool = False) -> go.Figure:
    """Histogram of ``||√d_model · E[token]||`` over the vocabulary and ``||PE(pos)||`` over positions."""
    fig = go.Figure()
    for i, (what, g) in enumerate(df.groupby("what", sort=False)):
        name = f"{what} (n={len(g)}, median {g['norm'].median():.2f})"
        if float(g["norm"].std(ddof=0)) < 1e-9 * max(1.0, float(g["norm"].abs().max())):
            # one value for every row (the sinusoids: sqrt(d_model / 2)): a line, not a one-bin histogram
            v = float(g["norm"].iloc[0])
            fig.add_trace(go.Scatter(x=[v, v], y=[0, 1], yaxis="y2", mode="lines", name=name,
                                     line=dict(color=SAFE_COLORS[i], width=4, dash="dash")))
        else:
            fig.add_trace(go.Histogram(x=g["norm"], name=name, opacity=0.7, nbinsx=60, marker_color=SAFE_COLORS[i]))
    fig.update_layout(yaxis2=dict(overlaying="y", range=[0, 1], visible=False))
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(title="L2 norm")
    fig.update_yaxes(title="count")
    return _style(fig, presenter, "What gets added: scaled token embeddings vs positional encodings", 400)


def layouts_figure(interleaved: np.ndarray, concatenated: np.ndarray, *, colorscale: str = "RdBu", presenter: bool = False) -> go.Figure:
    """Interleaved (paper: sin on even, cos on odd dims) beside concatenated (tensor2tensor) tables."""
    n, d = interleaved.shape
    s = _stride(n, 2 * d)
    rows = np.arange(0, n, s)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("interleaved (paper)", "concatenated (tensor2tensor)"),
                        horizontal_spacing=0.06)
    for col, z in ((1, interleaved), (2, concatenated)):
        fig.add_trace(go.Heatmap(z=z[rows], y=rows, zmin=-1, zmax=1, coloraxis="coloraxis",
                                 hovertemplate="pos %{y}<br>dim %{x}<br>%{z:.3f}<extra></extra>"), 1, col)
        fig.update_yaxes(autorange="reversed", row=1, col=col)
        fig.update_xaxes(title="dimension", row=1, col=col)
    fig.update_layout(coloraxis=dict(colorscale=colorscale, cmin=-1, cmax=1))
    fig.update_yaxes(title="position", row=1, col=1)
    return _style(fig, presenter, "Same numbers, different order of dimensions", 440)


def learned_vs_sinusoid_figure(learned: np.ndarray, sinusoid: np.ndarray, *, colorscale: str = "RdBu", presenter: bool = False) -> go.Figure:
    """A learned position table (Table 3 row (E)) beside the sinusoids of the same size."""
    lim = float(np.abs(learned).max()) or 1.0
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16, subplot_titles=("learned positions", "sinusoidal (Section 3.5)"))
    fig.add_trace(go.Heatmap(z=learned, zmin=-lim, zmax=lim, colorscale=colorscale,
                             colorbar=dict(x=0.44, xanchor="left", thickness=14)), 1, 1)
    fig.add_trace(go.Heatmap(z=sinusoid, zmin=-1, zmax=1, colorscale=colorscale), 1, 2)
    fig.update_yaxes(autorange="reversed", title="position")
    fig.update_xaxes(title="dimension")
    return _style(fig, presenter, "The model's learned position table vs sinusoids", 440)


# ----------------------------------------------------------------------------------------------- masks
def mask_figure(mask: np.ndarray, *, x_labels: Sequence[str] | None = None, y_labels: Sequence[str] | None = None,
                title: str = "mask", presenter: bool = False, x_title: str = "key", y_title: str = "query") -> go.Figure:
    """A bool mask as a two-colour heatmap (dark = may attend, light = masked)."""
    z = np.asarray(mask, dtype=float)
    fig = go.Figure(go.Heatmap(
        z=z, x=list(x_labels) if x_labels is not None else None, y=list(y_labels) if y_labels is not None else None,
        zmin=0, zmax=1, colorscale=[[0, "#f0f0f0"], [0.5, "#f0f0f0"], [0.5, "#0072B2"], [1, "#0072B2"]],
        colorbar=dict(tickvals=[0.25, 0.75], ticktext=["masked", "may attend"]), xgap=1, ygap=1,
        hovertemplate="%{y} → %{x}: %{z}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title=y_title, type="category")
    fig.update_xaxes(title=x_title, type="category", tickangle=-45)  # slanted: level labels touched in large type
    return _style(fig, presenter, title, 420)


def padding_figure(pieces: Sequence[Sequence[str]], key_mask: np.ndarray, *, presenter: bool = False) -> go.Figure:
    """The padding mask of a batch ``(B, T)``: one row per sentence, its pieces written in the cells."""
    km = np.asarray(key_mask, dtype=float)
    b, t = km.shape
    rows = [f"sentence {i}" for i in range(b)]
    fig = go.Figure(go.Heatmap(
        z=km, x=[str(j) for j in range(t)], y=rows, text=[[plotly_safe(x) for x in p] for p in pieces], texttemplate="%{text}",
        zmin=0, zmax=1, colorscale=[[0, "#f0f0f0"], [0.5, "#f0f0f0"], [0.5, "#56B4E9"], [1, "#56B4E9"]],
        colorbar=dict(tickvals=[0.25, 0.75], ticktext=["pad (masked)", "token"]), xgap=2, ygap=2,
        hovertemplate="%{y}, position %{x}: %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", title="position (key)")
    return _style(fig, presenter, "Padding mask: keys that are real tokens (True) vs pads", 120 + 50 * b)


def stage_heatmap(z: np.ndarray, labels: Sequence[str], *, title: str, colorscale: str = "Viridis", presenter: bool = False,
                  zmin: float | None = None, zmax: float | None = None, text: bool = False) -> go.Figure:
    """One stage of attention (scores, scaled, masked, weights) as a heatmap. Cells equal to ``-inf`` are left
    blank and marked ✕ with the legend entry ``−∞ (masked)``."""
    z = np.asarray(z, dtype=float)
    labels = list(labels)
    neg = np.isneginf(z)
    shown = np.where(np.isfinite(z), z, np.nan)
    hm = go.Heatmap(z=shown, x=labels, y=labels, colorscale=colorscale, zmin=zmin, zmax=zmax,
                    hovertemplate="query %{y}<br>key %{x}<br>%{z:.3f}<extra></extra>", xgap=1, ygap=1)
    if text:
        hm.update(text=np.where(neg, "", np.vectorize(lambda v: f"{v:.2f}")(np.nan_to_num(shown))), texttemplate="%{text}")
    fig = go.Figure(hm)
    if neg.any():
        qi, ki = np.nonzero(neg)
        # light grey cells; crossed as well while they are few enough to be drawn one by one
        fig.add_trace(go.Heatmap(z=np.where(neg, 1.0, np.nan), x=labels, y=labels, colorscale=[[0, "#e4e4e4"], [1, "#e4e4e4"]],
                                 showscale=False, hovertemplate="query %{y}<br>key %{x}<br>−∞ (masked)<extra></extra>",
                                 xgap=1, ygap=1))
        many = len(qi) > 400
        fig.add_trace(go.Scatter(x=[labels[ki[0]]] if many else [labels[j] for j in ki],
                                 y=[labels[qi[0]]] if many else [labels[i] for i in qi], mode="markers",
                                 marker=dict(symbol="x-thin", size=9, line=dict(width=1.5, color="#888")),
                                 name=MASKED_LABEL + (" (grey cells)" if many else ""), hoverinfo="skip", showlegend=True))
        fig.update_layout(legend=dict(orientation="h", x=1, xanchor="right", y=1.0, yanchor="bottom"))
    fig.update_yaxes(autorange="reversed", type="category", title="query")
    fig.update_xaxes(type="category", title="key", categoryorder="array", categoryarray=labels, tickangle=-45)
    return _style(fig, presenter, title, 460)


def future_mass_figure(future_mass: np.ndarray, labels: Sequence[str], *, colorscale: str = "Viridis", presenter: bool = False) -> go.Figure:
    """Attention mass on future keys per (layer, head) row and query column, without the causal mask.

    ``future_mass``: ``(L, H, T)`` float in [0, 1]. Rows are labelled ``"layer l · head h"`` counting from 1, as
    the app's selectors do."""
    L, H, T = future_mass.shape
    rows = [f"layer {l + 1} · head {h + 1}" for l in range(L) for h in range(H)]
    fig = go.Figure(go.Heatmap(z=future_mass.reshape(L * H, T), x=list(labels), y=rows, zmin=0, zmax=1, colorscale=colorscale,
                               colorbar=dict(title="future mass"),
                               hovertemplate="%{y}<br>query %{x}<br>mass on future keys %{z:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category", title="layer · head (from 1)")
    fig.update_xaxes(type="category", title="query (decoder input)")
    row = 26 if presenter else 18  # pixels per (layer, head) row: every row label drawn in either type size
    return _style(fig, presenter, "Without the mask: attention mass on future tokens (with it: exactly 0)",
                  max(360, row * L * H + 120))


def leak_predictions_figure(p_masked: np.ndarray, p_unmasked: np.ndarray, labels: Sequence[str], *, presenter: bool = False) -> go.Figure:
    """Probability of the true next token at each position, with vs without the causal mask."""
    fig = go.Figure([
        go.Bar(x=list(labels), y=p_masked, name="causal mask (as trained)"),
        go.Bar(x=list(labels), y=p_unmasked, name="no mask (future visible)"),
    ])
    fig.update_layout(barmode="group")
    fig.update_xaxes(type="category", title="decoder input position")
    fig.update_yaxes(title="p(true next token)", range=[0, 1])
    return _style(fig, presenter, "Teacher-forced: probability of the next reference token", 400)


# ----------------------------------------------------------------------------------------------- scaled dot-product
def dot_histogram(samples: np.ndarray, d_k: int, *, scaled: bool = False, presenter: bool = False) -> go.Figure:
    """Histogram (density) of ``q·k`` (or ``q·k/√d_k``) with the theoretical normal density ``N(0, d_k)``
    (or ``N(0, 1)``)."""
    x = samples / math.sqrt(d_k) if scaled else samples
    sd = 1.0 if scaled else math.sqrt(d_k)
    grid = np.linspace(-4.5 * sd, 4.5 * sd, 300)
    pdf = np.exp(-0.5 * (grid / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
    what = "q·k/√d_k" if scaled else "q·k"
    fig = go.Figure([
        go.Histogram(x=x, histnorm="probability density", name=f"{len(x):,} samples of {what}", nbinsx=80, opacity=0.75),
        go.Scatter(x=grid, y=pdf, mode="lines", name=f"N(0, {'1' if scaled else d_k})", line=dict(width=3)),
    ])
    fig.update_xaxes(title=what)
    fig.update_yaxes(title="density")
    return _style(fig, presenter, f"d_k = {d_k}: sample variance {np.var(x):.2f} (theory {1 if scaled else d_k})", 400)


def sharpness_figure(df: pd.DataFrame, *, presenter: bool = False) -> go.Figure:
    """Mean entropy and mean largest weight of softmax over random keys vs d_k, scaled vs unscaled."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("entropy of the weights (nats)", "largest weight"))
    for i, (name, g) in enumerate(df.groupby("scaling", sort=False)):
        color = SAFE_COLORS[i]
        fig.add_trace(go.Scatter(x=g["d_k"], y=g["entropy"], mode="lines+markers", name=name, line=dict(color=color)), 1, 1)
        fig.add_trace(go.Scatter(x=g["d_k"], y=g["max_weight"], mode="lines+markers", name=name, line=dict(color=color), showlegend=False), 1, 2)
    fig.add_hline(y=float(df["max_entropy"].iloc[0]), line_dash="dot", annotation_text="uniform", row=1, col=1)
    fig.update_xaxes(type="log", title="d_k")
    return _style(fig, presenter, "Unscaled scores saturate the softmax as d_k grows", 400)


def matrix_figure(z: np.ndarray, *, title: str, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
                  colorscale: str = "Viridis", presenter: bool = False) -> go.Figure:
    """A small matrix with its numbers written in the cells (``-inf`` blank and marked ✕)."""
    z = np.asarray(z, dtype=float)
    rl = list(row_labels) if row_labels is not None else [f"r{i}" for i in range(z.shape[0])]
    cl = list(col_labels) if col_labels is not None else [f"c{j}" for j in range(z.shape[1])]
    neg = np.isneginf(z)
    shown = np.where(np.isfinite(z), z, np.nan)
    text = np.where(neg, "−∞", np.vectorize(lambda v: f"{v:.3g}")(np.nan_to_num(shown)))
    fig = go.Figure(go.Heatmap(z=shown, x=cl, y=rl, text=text, texttemplate="%{text}", colorscale=colorscale, xgap=2, ygap=2,
                               hovertemplate="%{y}, %{x}: %{text}<extra></extra>"))
    if neg.any():
        qi, ki = np.nonzero(neg)
        fig.add_trace(go.Scatter(x=[cl[j] for j in ki], y=[rl[i] for i in qi], mode="markers", name=MASKED_LABEL,
                                 marker=dict(symbol="x-thin", size=22, line=dict(width=1, color="#bbb")), hoverinfo="skip"))
        fig.update_layout(legend=dict(orientation="h", y=-0.2))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", side="top")
    fig = _style(fig, presenter, title, 60 * z.shape[0] + 160)
    # the numbers are the point of these small matrices: written in the tick labels' size
    fig.update_traces(textfont_size=(PRESENTER_FONT_SIZE if presenter else FONT_SIZE) - 2, selector=dict(type="heatmap"))
    # the column labels sit on top: the title goes to the figure's top edge and the margin holds both
    fig.update_layout(title=dict(yref="container", y=1, yanchor="top", pad=dict(t=8)),
                      margin=dict(t=105 if presenter else 80))
    return fig


# ----------------------------------------------------------------------------------------------- model / training
def parameters_figure(summaries: dict[str, pd.DataFrame], *, presenter: bool = False, log: bool = False) -> go.Figure:
    """Grouped bars: parameters per (stack, component) for each named model (frames of
    :func:`lessons.parameter_summary`)."""
    fig = go.Figure()
    for name, df in summaries.items():
        x = [f"{s} · {c}" for s, c in zip(df["stack"], df["component"])]
        fig.add_trace(go.Bar(x=x, y=df["parameters"], name=f"{name} ({int(df['parameters'].sum()):,})",
                             hovertemplate="%{x}<br>%{y:,} parameters<extra></extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="parameters", type="log" if log else "linear")
    return _style(fig, presenter, "Parameters per component", 440)


#: the valid BLEU panel's text when the log has no BLEU (a run with ``--valid-bleu-sentences 0``)
NO_VALID_BLEU = "not measured:<br>this run decoded no<br>validation sentences"


def training_curves_figure(df: pd.DataFrame, *, presenter: bool = False, marks: list[tuple[int, str]] | None = None) -> go.Figure:
    """Loss (train, valid), BLEU and learning rate over steps from a metrics log (:func:`lessons.load_metrics`).

    ``marks``: ``[(step, text)]`` drawn as dotted vertical lines in every panel, e.g. the recipe changes of a
    resumed run (:func:`aiayn.evaluation.modelcard.config_change_notes`). Each line is labelled in the first panel
    with its number, ``"(1)"``, ``"(2)"``... in order of step (the page's caption says what changed at each), one
    label per row above the panel's title so that close marks never print on top of each other; hovering a
    label shows its text. Every panel's x axis spans the logged steps and the marks (labels never widen it).
    """
    fig = make_subplots(rows=1, cols=3, subplot_titles=("loss (nats / token)", "valid BLEU", "learning rate"))
    if "train_loss" in df:
        g = df.dropna(subset=["train_loss"])
        fig.add_trace(go.Scatter(x=g["step"], y=g["train_loss"], mode="lines", name="train loss (label-smoothed)"), 1, 1)
    if "valid_loss" in df:
        g = df.dropna(subset=["valid_loss"])
        fig.add_trace(go.Scatter(x=g["step"], y=g["valid_loss"], mode="lines+markers", name="valid loss"), 1, 1)
    bleu = df.dropna(subset=["valid_bleu"]) if "valid_bleu" in df else df.iloc[:0]
    if len(bleu):
        fig.add_trace(go.Scatter(x=bleu["step"], y=bleu["valid_bleu"], mode="lines+markers", name="valid BLEU"), 1, 2)
    else:  # an empty panel would look like a failed plot: say why it is empty
        # paper coordinates: an axis without a trace is not drawn, and "x2 domain" then landed in the first panel
        (x0, x1), (y0, y1) = fig.layout.xaxis2.domain, fig.layout.yaxis2.domain
        fig.add_annotation(text=NO_VALID_BLEU, x=(x0 + x1) / 2, y=(y0 + y1) / 2, xref="paper", yref="paper",
                           showarrow=False, font=dict(size=FONT_SIZE - 1, color="grey"))
    if "lr" in df:
        g = df.dropna(subset=["lr"])
        fig.add_trace(go.Scatter(x=g["step"], y=g["lr"], mode="lines", name="lr"), 1, 3)
    marks = sorted(marks or [], key=lambda m: m[0])
    for n, (step, text) in enumerate(marks, 1):
        for col in (1, 2, 3):
            fig.add_vline(x=step, line_dash="dot", line_color="grey", row=1, col=col)
        # one row per mark, stacked upwards above the panel's title (relative to the panel: no autorange)
        fig.add_annotation(x=step, xref="x", y=1.0, yref="y domain", yanchor="bottom", yshift=26 + 16 * (n - 1),
                           text=f"({n})", hovertext=plotly_safe(f"step {step:,}: {text}"), showarrow=False,
                           font=dict(size=FONT_SIZE - 1, color="grey"))
    steps = [float(v) for v in df["step"].dropna()] if "step" in df else []
    steps += [float(m[0]) for m in marks]
    if steps:
        lo, hi = min(steps), max(steps)
        pad = 0.02 * (hi - lo) if hi > lo else 1.0
        fig.update_xaxes(range=[lo - pad, hi + pad])
    fig.update_xaxes(title="step")
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.28, yanchor="top"))
    fig = _style(fig, presenter, "Training curves", 400 + 16 * max(0, len(marks) - 1))
    fig.update_layout(margin=dict(t=70 + (24 + 16 * len(marks) if marks else 0), b=110))
    return fig


def lr_figure(schedules: dict[str, pd.DataFrame], *, presenter: bool = False, peaks: dict[str, tuple[int, float]] | None = None) -> go.Figure:
    """Equation 3 for one or more settings (frames of :func:`lessons.lr_schedule`), with the peaks marked."""
    fig = go.Figure()
    for name, df in schedules.items():
        fig.add_trace(go.Scatter(x=df["step"], y=df["lr"], mode="lines", name=name))
    for name, (s, v) in (peaks or {}).items():
        fig.add_trace(go.Scatter(x=[s], y=[v], mode="markers+text", text=[f"peak at step {s:,}"], textposition="top right",
                                 marker=dict(size=10, symbol="diamond"), name=f"peak ({name})"))
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="learning rate", exponentformat="e")
    return _style(fig, presenter, "lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)", 420)


def smoothing_target_figure(q: np.ndarray, true_index: int, *, presenter: bool = False) -> go.Figure:
    """The one-hot target beside the label-smoothed one (bars over the vocabulary)."""
    v = len(q)
    onehot = np.zeros(v)
    onehot[true_index] = 1.0
    x = np.arange(v)
    fig = go.Figure([go.Bar(x=x, y=onehot, name="one-hot"), go.Bar(x=x, y=q, name="label-smoothed q")])
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="token id (true token marked)")
    fig.update_yaxes(title="target probability", range=[0, 1.05])
    fig.add_vline(x=true_index, line_dash="dot")
    # legend below: the chart shares the row with the loss chart, a side legend would take a third of its width
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.25, yanchor="top"))
    fig = _style(fig, presenter, f"Target distribution (sums to {q.sum():.6f})", 420)
    fig.update_layout(margin=dict(b=110))
    return fig


def smoothing_loss_figure(curve: pd.DataFrame, marks: pd.DataFrame | None = None, *, presenter: bool = False) -> go.Figure:
    """Plain cross-entropy and smoothed loss as functions of p(true token) (frame of
    :func:`lessons.label_smoothing_table`), with chosen predictions marked."""
    fig = go.Figure([
        go.Scatter(x=curve["p_true"], y=curve["cross_entropy"], mode="lines", name="cross-entropy −log p(y)"),
        go.Scatter(x=curve["p_true"], y=curve["smoothed_loss"], mode="lines", name="label-smoothed loss"),
    ])
    if marks is not None:
        labels = [str(v) for v in marks.get("label", marks["p_true"])]
        fig.add_trace(go.Scatter(x=marks["p_true"], y=marks["smoothed_loss"], mode="markers",
                                 marker=dict(size=12, symbol="circle-open", line=dict(width=2)), name="chosen predictions",
                                 text=labels, hovertemplate="%{text}: p = %{x:.3f}, loss %{y:.3f}<extra></extra>"))
        # labels with leader lines, fanned out from right to left and alternately above and below, pointing
        # inwards: two close marks (p = 0.9 and 0.99) never print on top of each other or past the plot's edge
        order = np.argsort(-np.asarray(marks["p_true"], dtype=float), kind="stable")
        for rank, idx in enumerate(order):
            p = float(marks["p_true"].iloc[idx])
            fig.add_annotation(x=p, y=float(marks["smoothed_loss"].iloc[idx]), text=labels[idx], showarrow=True,
                               arrowhead=0, arrowwidth=1, ax=(-1 if p > 0.5 else 1) * (30 + 25 * rank),
                               ay=-40 if rank % 2 == 0 else 40, xanchor="right" if p > 0.5 else "left")
    fig.update_xaxes(title="p(true token)", range=[0, 1.02])
    fig.update_yaxes(title="loss (nats)")
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.25, yanchor="top"))
    fig = _style(fig, presenter, "Label smoothing penalises over-confidence", 420)
    fig.update_layout(margin=dict(b=110))
    return fig
