"""Plotly figure of attention rollout across layers (Abnar and Zuidema 2020, Section 3): a pure function,
arrays in, ``go.Figure`` out.

The single maps (raw head mean beside the rollout) use :func:`aiayn.figures.attention.attention_heatmap`;
this module adds the small multiples: the rollout up to each layer, left to right, on one colour scale, so
the flow can be followed as it spreads (or stays on the diagonal) through the stack. Layers are labelled
from 1, as in the app.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import unique_labels
from .attention import plotly_safe


def rollout_layers(
    stack: np.ndarray,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    *,
    title: str = "",
    colorscale: str = "Viridis",
    highlight: int | None = None,
    template: str | None = None,
) -> go.Figure:
    """The rollout up to each layer as one row of small heatmaps with a shared colour scale.

    Args:
        stack: ``(L, Q, K)`` rollout of one sentence (:func:`aiayn.analysis.rollout` at batch item 0),
            weights in [0, 1].
        q_labels, k_labels: ``Q`` / ``K`` labels (made unique, ``"i:label"``), shown on hover.
        highlight: layer (from 1) whose title is marked as the one picked in the app, or None.

    Raises:
        ValueError: ``stack`` is not 3-dimensional or the labels do not match it.
    """
    w = np.asarray(stack, dtype=float)
    if w.ndim != 3:
        raise ValueError(f"expected an (L, Q, K) rollout, got shape {w.shape}")
    L, Q, K = w.shape
    if (Q, K) != (len(q_labels), len(k_labels)):
        raise ValueError(f"rollout of shape {w.shape} but {len(q_labels)} query and {len(k_labels)} key labels")
    y = [plotly_safe(x) for x in unique_labels(q_labels)]
    x = [plotly_safe(v) for v in unique_labels(k_labels)]
    titles = [f"<b>layer {l + 1}</b>" if highlight == l + 1 else f"layer {l + 1}" for l in range(L)]
    fig = make_subplots(rows=1, cols=max(L, 1), horizontal_spacing=0.015, subplot_titles=titles)
    for layer in range(L):
        fig.add_trace(go.Heatmap(
            z=w[layer], x=x, y=y, coloraxis="coloraxis",
            hovertemplate=f"up to layer {layer + 1}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.3f}}<extra></extra>",
        ), row=1, col=layer + 1)
    vmax = float(w.max()) if w.size and w.max() > 0 else 1.0
    fig.update_xaxes(showticklabels=False, type="category")
    fig.update_yaxes(showticklabels=False, type="category", autorange="reversed")
    fig.update_layout(
        coloraxis=dict(colorscale=colorscale, cmin=0.0, cmax=vmax,
                       colorbar=dict(title=dict(text="weight"), thickness=14)),
        title=dict(text=title) if title else None,
        height=int(min(520, max(220, 80 + 1100 / max(L, 1) * Q / max(K, 1)))),
        margin=dict(l=10, r=40, t=80 if title else 40, b=10),
    )
    if template:
        fig.update_layout(template=template)
    return fig
