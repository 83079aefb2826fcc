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
    offset: int = 0,
    columns: int | None = None,
) -> go.Figure:
    """One map at several training steps, side by side (small multiples with one shared colour scale; rows of
    ``columns`` panels when given, so that the step titles have room).

    Args:
        weights: ``(N, Q, K)`` weights, one map per step.
        steps: the N training steps of the run (column titles ``"step s"``).
        q_labels, k_labels: Q / K unique labels (hover only; the small maps carry no tick labels).
        current: a step of ``steps`` whose title is marked (``"▶ step s"``).
        zmax: top of the shared colour scale (default: the largest weight shown).
        offset: the lifetime step of the run's step 0 when the run started from a trained parent
            (:mod:`aiayn.lineage`): titles then say ``"step offset + s"``, and step 0 ``"(parent)"``.

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
    names = [f"step {int(s) + offset:,}" + (" (parent)" if offset and int(s) == 0 else "") for s in steps]
    titles = [("▶ " if current is not None and int(s) == int(current) else "") + n for s, n in zip(steps, names)]
    return small_multiples(w, titles, q_labels, k_labels, hover_prefixes=names,
                           title=title, colorscale=colorscale, zmax=zmax, max_height=420, template=template,
                           columns=columns)


def history_curve(
    values: Sequence[float],
    steps: Sequence[int],
    *,
    current: int | None = None,
    y_title: str = "",
    title: str = "",
    template: str | None = None,
    offset: int = 0,
) -> go.Figure:
    """One number per training step as a line with markers; ``current`` (a step of ``steps``) is marked.

    Args:
        values: N numbers (e.g. the mean row entropy of a map, bits).
        steps: the N training steps of the run (x axis: ``offset + step``).
        offset: the lifetime step of the run's step 0 when it started from a trained parent (the x axis is
            then titled "lifetime training step" and the first point is labelled as the parent's weights).

    Raises:
        ValueError: ``values`` and ``steps`` differ in length.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or len(v) != len(steps):
        raise ValueError(f"{v.shape} values for {len(steps)} steps")
    s = [int(t) + offset for t in steps]
    current = None if current is None else int(current) + offset
    fig = go.Figure(go.Scatter(x=s, y=v, mode="lines+markers", name=y_title or "value",
                               hovertemplate="step %{x}<br>%{y:.3f}<extra></extra>"))
    if current is not None and int(current) in s:
        i = s.index(int(current))
        fig.add_trace(go.Scatter(x=[s[i]], y=[v[i]], mode="markers", name=f"step {s[i]}",
                                 marker=dict(size=14, symbol="circle-open", line=dict(width=3)),
                                 hovertemplate="step %{x}<br>%{y:.3f}<extra></extra>"))
    if offset and s:
        fig.add_annotation(x=s[0], y=v[0], text="trained parent", showarrow=True, arrowhead=0, ax=40, ay=-25)
    fig.update_layout(title=dict(text=title) if title else None, yaxis_title=y_title,
                      xaxis_title="lifetime training step" if offset else "training step",
                      height=300, showlegend=False, margin=dict(l=10, r=10, t=50 if title else 20, b=10))
    use_template(fig, template)
    return fig


def trend_words(values: Sequence[float], unit: str = "", *, tolerance: float = 0.02) -> str:
    """How a per-step number moved from the first to the last step, in words for a chart title, so that the
    title is true for the data drawn: ``"rose from 1.27 to 1.41 bits"``, ``"fell from ..."``, or ``"stayed at
    about 1.27 bits"`` when the change is within ``tolerance`` (relative to the first value's size, at least
    0.01 absolute). ``""`` for fewer than two finite values."""
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return ""
    a, b = float(v[0]), float(v[-1])
    u = f" {unit}" if unit else ""
    if abs(b - a) <= max(0.01, tolerance * abs(a)):
        return f"stayed at about {a:.2f}{u}"
    return f"{'rose' if b > a else 'fell'} from {a:.2f} to {b:.2f}{u}"
