"""Plotly figure of attention rollout across layers (Abnar and Zuidema 2020, Section 3): a pure function,
arrays in, ``go.Figure`` out.

The single maps (raw head mean beside the rollout) use :func:`aiayn.figures.attention.attention_heatmap`;
this module adds the small multiples: the rollout up to each layer, left to right, on one colour scale, so
the flow can be followed as it spreads (or stays on the diagonal) through the stack, with the pieces or words
on the axes. Layers are labelled from 1, as in the app.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..analysis import unique_labels
from .attention import small_multiples


def presenter_columns(n_layers: int) -> int:
    """Panels per row of :func:`rollout_layers` in presenter mode: one (large labels leave side-by-side panels too
    narrow) up to three layers, two beyond, so that the paper's N = 6 is three rows of two panels to compare, not six
    page-high rows a class scrolls through one at a time."""
    return 1 if n_layers <= 3 else 2


def rollout_layers(
    stack: np.ndarray,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    *,
    title: str = "",
    colorscale: str = "Viridis",
    highlight: int | None = None,
    template: str | None = None,
    columns: int | None = None,
) -> go.Figure:
    """The rollout up to each layer as small heatmaps with a shared colour scale, in one row (or rows of
    ``columns`` panels: one per row in presenter mode, where large labels leave side-by-side panels too narrow).

    Args:
        stack: ``(L, Q, K)`` rollout of one sentence (:func:`aiayn.analysis.rollout` at batch item 0),
            weights in [0, 1].
        q_labels, k_labels: ``Q`` / ``K`` labels (kept when already unique, else made unique as ``"i:label"``):
            the keys under every panel, the queries left of the first, and both on hover.
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
    titles = [f"<b>layer {l + 1}</b>" if highlight == l + 1 else f"layer {l + 1}" for l in range(L)]
    def distinct(labels: Sequence[str]) -> list[str]:  # already unique ("i:piece" from the page): kept as they are
        return list(labels) if len(set(labels)) == len(labels) else unique_labels(labels)

    return small_multiples(w, titles, distinct(q_labels), distinct(k_labels),
                           hover_prefixes=[f"up to layer {l + 1}" for l in range(L)], title=title,
                           colorscale=colorscale, max_height=520, colorbar_thickness=14, template=template,
                           tick_labels=True, columns=columns)
