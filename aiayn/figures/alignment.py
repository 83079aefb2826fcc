"""Figures of the "Alignment and attribution" page (pure: arrays in, Plotly figures out, no Streamlit).

* :func:`head_grid`: a per-head value (alignment error rate, rank agreement) as an ``L x H`` heatmap, layers and
  heads counted from 1.
* :func:`gold_alignment`: one head's word-level map with the gold links drawn on it (Och and Ney 2003: sure links
  as filled squares, possible-only links as open circles).
* :func:`attribution_beside`: attribution and an attention map of the same sentence side by side.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import unique_labels
from .attention import attention_heatmap, plotly_safe
from .theme import use_template


def head_grid(values: np.ndarray, *, title: str = "", colorscale: str = "Viridis", zmin: float | None = None,
              zmax: float | None = None, value_name: str = "value", template: str | None = None,
              best: tuple[int, int] | None = None) -> go.Figure:
    """``(L, H)`` values (NaN allowed: an empty cell) as a heatmap with the values written in the cells.

    Args:
        values: ``(L, H)``.
        best: 0-based ``(layer, head)`` to frame, or None.

    Raises:
        ValueError: not a 2-D array.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise ValueError(f"want an (L, H) array, got shape {v.shape}")
    L, H = v.shape
    trace = go.Heatmap(z=v, x=[f"head {h + 1}" for h in range(H)], y=[f"layer {l + 1}" for l in range(L)],
                       zmin=zmin, zmax=zmax, colorscale=colorscale, texttemplate="%{z:.2f}", xgap=2, ygap=2,
                       colorbar=dict(title=dict(text=plotly_safe(value_name)), thickness=14),
                       hovertemplate=f"%{{y}}, %{{x}}<br>{plotly_safe(value_name)}: %{{z:.3f}}<extra></extra>")
    fig = go.Figure(data=[trace], layout=dict(
        title=dict(text=plotly_safe(title)) if title else None, height=int(140 + 46 * L),
        xaxis=dict(type="category"), yaxis=dict(type="category", autorange="reversed"),
        margin=dict(l=10, r=10, t=60 if title else 20, b=10)))
    if best is not None:
        l, h = best
        fig.add_shape(type="rect", x0=h - 0.5, x1=h + 0.5, y0=l - 0.5, y1=l + 0.5, line=dict(color="#d62728", width=3))
    use_template(fig, template)
    return fig


def _links(links: Iterable[tuple[int, int]], x: Sequence[str], y: Sequence[str]) -> tuple[list[str], list[str]]:
    pairs = sorted(links)
    return [x[j] for _, j in pairs], [y[i] for i, _ in pairs]


def gold_alignment(word_map: np.ndarray, target_words: Sequence[str], source_words: Sequence[str],
                   sure: np.ndarray, possible: np.ndarray, *, title: str = "", colorscale: str = "Viridis",
                   template: str | None = None) -> go.Figure:
    """A head's ``(T_w, S_w)`` word map (target words as rows) with the gold links as markers: sure links filled
    squares, possible-only links open circles.

    Args:
        word_map: ``(T_w, S_w)`` attention between words.
        sure, possible: ``(T_w, S_w)`` bool (possible includes sure).

    Raises:
        ValueError: shapes or label counts that differ.
    """
    w, s, p = np.asarray(word_map, dtype=float), np.asarray(sure, dtype=bool), np.asarray(possible, dtype=bool)
    if not (w.shape == s.shape == p.shape == (len(target_words), len(source_words))):
        raise ValueError(f"map {w.shape}, sure {s.shape}, possible {p.shape} and {len(target_words)} x "
                         f"{len(source_words)} words differ")
    fig = attention_heatmap(w, target_words, source_words, title=title, colorscale=colorscale, x_title="source word",
                            y_title="target word", template=template, colorbar_title="attention")
    y = list(fig.data[0].y)
    x = list(fig.data[0].x)
    for name, links, symbol in (("sure link", zip(*np.nonzero(s)), "square"),
                                ("possible link", zip(*np.nonzero(p & ~s)), "circle-open")):
        xs, ys = _links(links, x, y)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=name, hoverinfo="name",
                                 marker=dict(symbol=symbol, size=11, color="#d62728",
                                             line=dict(width=2, color="#d62728"))))
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0))
    return fig


def attribution_beside(attr: np.ndarray, attention: np.ndarray, q_labels: Sequence[str], k_labels: Sequence[str], *,
                       attention_title: str = "attention", attribution_title: str = "|attribution| (row max = 1)",
                       colorscale: str = "Viridis",
                       template: str | None = None) -> go.Figure:
    """``|attribution|`` ``(T, S)`` (each row scaled to its maximum, so rows compare by rank) beside an attention
    map ``(T, S)`` of the same sentence.

    Raises:
        ValueError: shapes that differ from each other or from the labels.
    """
    a, m = np.abs(np.asarray(attr, dtype=float)), np.asarray(attention, dtype=float)
    if a.shape != m.shape or a.shape != (len(q_labels), len(k_labels)):
        raise ValueError(f"attribution {a.shape}, attention {m.shape}, {len(q_labels)} x {len(k_labels)} labels")
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.where(a.max(1, keepdims=True) > 0, a / a.max(1, keepdims=True), 0.0)
    y = [plotly_safe(t) for t in unique_labels(q_labels)]
    x = [plotly_safe(t) for t in unique_labels(k_labels)]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, shared_yaxes=True,
                        subplot_titles=(plotly_safe(attribution_title), plotly_safe(attention_title)))
    for col, z in ((1, a), (2, m)):
        fig.add_trace(go.Heatmap(z=z, x=x, y=y, colorscale=colorscale, zmin=0.0, coloraxis=None, showscale=col == 2,
                                 xgap=1, ygap=1, hovertemplate="%{y} ← %{x}: %{z:.3f}<extra></extra>"), 1, col)
    fig.update_xaxes(type="category", tickangle=-60)
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_layout(height=int(min(1000, max(380, 180 + 26 * len(y)))), margin=dict(l=10, r=10, t=50, b=10))
    use_template(fig, template)
    return fig


def contrast_figure(c, *, template: str | None = None) -> go.Figure:
    """Contrastive attribution (:class:`aiayn.contrastive.Contrast`) as signed bars: each source piece (left) and
    each decoder-input piece up to the step (right); blue pushes toward the chosen piece, red toward the foil.
    The title gives both pieces' probabilities and the log-probability difference explained."""
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06,
                        column_widths=[max(len(c.src_tokens), 1), max(len(c.prefix_tokens), 1)],
                        subplot_titles=("source pieces", "output so far (decoder input)"))
    for col, values, tokens in ((1, c.source, c.src_tokens), (2, c.prefix, c.prefix_tokens)):
        x = [plotly_safe(t) for t in unique_labels(tokens)]
        fig.add_bar(x=x, y=values, row=1, col=col, showlegend=False,
                    marker_color=["#1f77b4" if v >= 0 else "#d62728" for v in values],
                    hovertemplate="%{x}: %{y:+.3f}<extra></extra>")
    fig.update_xaxes(type="category", tickangle=-60)
    fig.update_yaxes(title_text=f"{c.method.replace('_', ' ')} (nats)", row=1, col=1, zeroline=True)
    title = (f"Why {plotly_safe(c.chosen)} (p = {c.chosen_prob:.3f}) and not {plotly_safe(c.foil)} "
             f"(p = {c.foil_prob:.3f}) at step {c.step}: log-odds {c.difference:+.2f}")
    fig.update_layout(title=title, height=380, margin=dict(l=10, r=10, t=70, b=10), bargap=0.25)
    return use_template(fig, template)
