"""Figures of attention across training (data from :mod:`aiayn.training.history`): a strip of
small heatmaps of one head at several training steps, and one per-step number (e.g. the mean row entropy)
as a line with the current step marked. Pure functions: arrays in, ``plotly.graph_objects.Figure`` out.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .attention import small_multiples
from .theme import use_template


def history_strip(
    weights: np.ndarray,
    steps: Sequence[int],
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    *,
    current: int | None = None,
    title: str = "",
    colorscale: str = "Viridis",
    zmax: float | None = None,
    template: str | None = None,
) -> go.Figure:
    """One map at several training steps, side by side (small multiples with one shared colour scale).

    Args:
        weights: ``(N, Q, K)`` weights, one map per step.
        steps: the N training steps (column titles ``"step s"``).
        q_labels, k_labels: Q / K unique labels (hover only; the small maps carry no tick labels).
        current: a step of ``steps`` whose title is marked (``"▶ step s"``).
        zmax: top of the shared colour scale (default: the largest weight shown).

    Raises:
        ValueError: ``weights`` is not 3-d, or steps / labels do not match its shape.
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim != 3:
        raise ValueError(f"expected (N, Q, K) weights, got shape {w.shape}")
    n, q, k = w.shape
    if len(steps) != n or len(q_labels) != q or len(k_labels) != k:
        raise ValueError(f"weights of shape {w.shape} but {len(steps)} steps, {len(q_labels)} query and "
                         f"{len(k_labels)} key labels")
    titles = [("▶ " if current is not None and int(s) == int(current) else "") + f"step {int(s)}" for s in steps]
    return small_multiples(w, titles, q_labels, k_labels, hover_prefixes=[f"step {int(s)}" for s in steps],
                           title=title, colorscale=colorscale, zmax=zmax, max_height=420, template=template)


def history_curve(
    values: Sequence[float],
    steps: Sequence[int],
    *,
    current: int | None = None,
    y_title: str = "",
    title: str = "",
    template: str | None = None,
) -> go.Figure:
    """One number per training step as a line with markers; ``current`` (a step of ``steps``) is marked.

    Args:
        values: N numbers (e.g. the mean row entropy of a map, bits).
        steps: the N training steps (x axis).

    Raises:
        ValueError: ``values`` and ``steps`` differ in length.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or len(v) != len(steps):
        raise ValueError(f"{v.shape} values for {len(steps)} steps")
    s = [int(t) for t in steps]
    fig = go.Figure(go.Scatter(x=s, y=v, mode="lines+markers", name=y_title or "value",
                               hovertemplate="step %{x}<br>%{y:.3f}<extra></extra>"))
    if current is not None and int(current) in s:
        i = s.index(int(current))
        fig.add_trace(go.Scatter(x=[s[i]], y=[v[i]], mode="markers", name=f"step {s[i]}",
                                 marker=dict(size=14, symbol="circle-open", line=dict(width=3)),
                                 hovertemplate="step %{x}<br>%{y:.3f}<extra></extra>"))
    fig.update_layout(title=dict(text=title) if title else None, xaxis_title="training step", yaxis_title=y_title,
                      height=300, showlegend=False, margin=dict(l=10, r=10, t=50 if title else 20, b=10))
    use_template(fig, template)
    return fig
