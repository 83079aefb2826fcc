"""Plotly figures of attention maps (pure functions: arrays and labels in, ``go.Figure`` out).

Rows are queries (top to bottom), columns are keys (left to right), as in the paper's Figures 3-5. Axis
categories are unique labels ``"i:piece"`` because pieces repeat, with ``<``, ``>``, ``&`` escaped as HTML
entities (plotly renders text as HTML; ``&lt;s&gt;`` displays as ``<s>``). Every builder here escapes the
same way whatever text it puts on a figure (titles, axis titles, hover text), so a title holding a piece
(``"next: </s>"``) shows it instead of losing it. Weights are post-softmax (Eq. 1).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import unique_labels
from .theme import use_template

#: axis titles per kind: (query axis, key axis). Decoder queries are labelled ``"i:decoder input→output"``
#: (:func:`aiayn.analysis.query_labels`): the piece fed at position i (the output shifted right, Section 3.1, behind the
#: model's start piece: <s>, or <pad> for an imported Opus-MT model) and the piece predicted.
AXIS_TITLES = {
    "encoder": ("query (source)", "key (source)"),
    "decoder": ("query (decoder input → output)", "key (decoder input, shifted right)"),
    "cross": ("query (decoder input → output)", "key (source)"),
}


def plotly_safe(label: str) -> str:
    """Escape ``&``, ``<``, ``>`` for plotly, which reads text as HTML (``<s>`` would strike through the
    rest of the label and ``</s>`` vanish)."""
    return str(label).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _safe(labels) -> list[str]:
    return [plotly_safe(x) for x in labels]


def attention_heatmap(
    weights: np.ndarray,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    *,
    title: str = "",
    colorscale: str = "Viridis",
    x_title: str = "key",
    y_title: str = "query",
    zmax: float | None = None,
    show_values: bool = False,
    template: str | None = None,
    height: int | None = None,
    colorbar_title: str = "weight",
) -> go.Figure:
    """One attention map as a heatmap with hover values.

    Args:
        weights: ``(Q, K)`` weights in [0, 1].
        q_labels, k_labels: ``Q`` / ``K`` labels; made unique (``"i:label"``) unless already unique.
        zmax: top of the colour scale (default: 1 when ``show_values``, else the map's maximum).
        show_values: write each weight in its cell (readable up to ~30 x 30).
        title, x_title, y_title, colorbar_title: plain text (escaped here, :func:`plotly_safe`).

    Raises:
        ValueError: labels do not match the map's shape.
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim != 2 or w.shape != (len(q_labels), len(k_labels)):
        raise ValueError(f"map of shape {w.shape} but {len(q_labels)} query and {len(k_labels)} key labels")
    y = _safe(q_labels if len(set(q_labels)) == len(q_labels) else unique_labels(q_labels))
    x = _safe(k_labels if len(set(k_labels)) == len(k_labels) else unique_labels(k_labels))
    vmax = zmax if zmax is not None else (float(w.max()) if w.size and w.max() > 0 else 1.0)
    trace = go.Heatmap(
        z=w, x=x, y=y, zmin=0.0, zmax=vmax, colorscale=colorscale,
        colorbar=dict(title=dict(text=plotly_safe(colorbar_title)), thickness=14),
        hovertemplate=f"{plotly_safe(y_title)}: %{{y}}<br>{plotly_safe(x_title)}: %{{x}}<br>weight: %{{z:.3f}}"
                      "<extra></extra>",
        xgap=1 if max(w.shape, default=0) <= 40 else 0, ygap=1 if max(w.shape, default=0) <= 40 else 0,
    )
    if show_values:
        trace.update(text=np.round(w, 2), texttemplate="%{z:.2f}", textfont=dict(size=10))
    return heatmap_figure(trace, w.shape, title=title, x_title=x_title, y_title=y_title, height=height,
                          template=template)


def heatmap_figure(trace: go.Heatmap, shape: tuple[int, ...], *, title: str = "", x_title: str = "",
                   y_title: str = "", height: int | None = None, template: str | None = None) -> go.Figure:
    """One query x key heatmap trace in the house layout: category axes (queries top to bottom, keys slanted),
    28 px rows up to 25 rows (18 px beyond), 380 to 1,100 px tall unless ``height`` is given.

    Args:
        trace: the ``go.Heatmap`` of a ``(Q, K)`` array.
        shape: ``(Q, K)`` of that array.
        title, x_title, y_title: plain text (escaped here, :func:`plotly_safe`).
    """
    cell = 28 if max(shape, default=0) <= 25 else 18
    layout = dict(
        xaxis=dict(title=plotly_safe(x_title), type="category", tickangle=-60, side="bottom"),
        yaxis=dict(title=plotly_safe(y_title), type="category", autorange="reversed"),
        height=height or int(min(1100, max(380, 160 + cell * shape[0]))),
        margin=dict(l=10, r=10, t=60 if title else 20, b=10),
    )
    if title:
        layout["title"] = dict(text=plotly_safe(title))
    # the layout goes into the constructor: update_layout() of the same nested dicts costs several times more (plotly
    # dispatches every property path as a relayout; docs/benchmarks.md)
    fig = go.Figure(data=[trace], layout=layout)
    use_template(fig, template)
    return fig


def model_view(
    weights: np.ndarray,
    *,
    title: str = "",
    colorscale: str = "Viridis",
    q_labels: Sequence[str] | None = None,
    k_labels: Sequence[str] | None = None,
    zmax: float | None = None,
    template: str | None = None,
    x_title: str = "key",
    y_title: str = "query",
    selected: tuple[int, int | None] | None = None,
    clickable: bool = False,
) -> go.Figure:
    """All ``L x H`` heads of one kind at once: a grid of small heatmaps (rows = layers, cols = heads).

    One shared ``coloraxis`` (so colours compare across heads), no per-cell text (fast). Layers and heads are
    labelled from 1. The query labels are written left of the first column and the key labels under the last
    row (plotly thins them out when crowded). Hover reads ``"layer l, head h / <y_title>: i:piece / <x_title>:
    j:piece / weight"``, each label once.

    Args:
        weights: ``(L, H, Q, K)``.
        q_labels, k_labels: optional labels (made unique ``"i:label"`` unless already unique).
        zmax: top of the shared colour scale (default: the largest weight shown).
        x_title, y_title: what the keys and queries are (hover text; plain text, escaped here).
        selected: ``(layer, head)`` from 1 to frame (:func:`highlight_head`; head None frames the layer's row).
        clickable: add one invisible marker at the centre of each thumbnail (a ``go.Scatter`` per subplot,
            after the ``L * H`` heatmaps, with ``customdata`` ``[[layer, head]]`` from 1): plotly selection
            events fire for scatter points, not for heatmaps, so a click on it can open that head
            (:func:`picked_head`).

    Raises:
        ValueError: weights not 4-D, label counts differ from the map's shape, ``selected`` out of range.
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim != 4:
        raise ValueError(f"expected (L, H, Q, K) weights, got shape {w.shape}")
    L, H, Q, K = w.shape
    if (q_labels is not None and len(q_labels) != Q) or (k_labels is not None and len(k_labels) != K):
        raise ValueError(f"maps of shape {(Q, K)} but {len(q_labels or [])} query and {len(k_labels or [])} key labels")

    def labels(lab, n):
        if lab is None:
            return [str(i) for i in range(n)]
        return _safe(lab if len(set(lab)) == len(lab) else unique_labels(lab))

    y, x = labels(q_labels, Q), labels(k_labels, K)
    fig = make_subplots(
        rows=L, cols=H, horizontal_spacing=0.012, vertical_spacing=0.03 if L > 1 else 0.0,
        column_titles=[f"head {h + 1}" for h in range(H)], row_titles=[f"layer {l + 1}" for l in range(L)],
    )
    yt, xt = plotly_safe(y_title), plotly_safe(x_title)
    for layer in range(L):
        for head in range(H):
            fig.add_trace(
                go.Heatmap(
                    z=w[layer, head], x=x, y=y, coloraxis="coloraxis",
                    hovertemplate=f"layer {layer + 1}, head {head + 1}<br>{yt}: %{{y}}<br>{xt}: %{{x}}<br>"
                                  "weight: %{z:.3f}<extra></extra>",
                ),
                row=layer + 1, col=head + 1,
            )
    height = int(min(1400, max(300, 40 + L * max(110, 900 / max(H, 1) * Q / max(K, 1)))))
    if clickable:
        thumb = (height - 110) / max(L, 1)  # pixels of one thumbnail's height, roughly
        for layer in range(L):
            for head in range(H):
                fig.add_trace(
                    go.Scatter(
                        x=[x[K // 2]], y=[y[Q // 2]], mode="markers", showlegend=False, customdata=[[layer + 1, head + 1]],
                        marker=dict(size=int(max(12, min(48, 0.5 * thumb))), symbol="square", opacity=0),
                        hovertemplate=f"layer {layer + 1}, head {head + 1}: click to open<extra></extra>",
                    ),
                    row=layer + 1, col=head + 1,
                )
    vmax = zmax if zmax is not None else (float(w.max()) if w.size and w.max() > 0 else 1.0)
    fig.update_xaxes(showticklabels=False, type="category", tickangle=-60, tickfont=dict(size=9))
    fig.update_yaxes(showticklabels=False, type="category", autorange="reversed", tickfont=dict(size=9))
    for head in range(H):
        fig.update_xaxes(showticklabels=True, row=L, col=head + 1)
    for layer in range(L):
        fig.update_yaxes(showticklabels=True, row=layer + 1, col=1)
    fig.update_layout(
        coloraxis=dict(colorscale=colorscale, cmin=0.0, cmax=vmax, colorbar=dict(title=dict(text="weight"), thickness=14)),
        title=dict(text=plotly_safe(title)) if title else None,
        height=height, hoverdistance=1 if clickable else 20,
        margin=dict(l=10, r=40, t=70 if title else 40, b=10),
    )
    use_template(fig, template)
    if selected is not None:
        highlight_head(fig, *selected, n_layers=L, n_heads=H)
    return fig


def highlight_head(fig: go.Figure, layer: int, head: int | None, *, n_layers: int, n_heads: int,
                   color: str = "#d62728") -> go.Figure:
    """Frame one thumbnail of a :func:`model_view` grid (``layer``, ``head`` from 1), or the whole row of
    ``layer`` when ``head`` is None (the mean over heads), with a ``color`` rectangle; in place, returns ``fig``.

    Raises:
        ValueError: layer or head outside the ``n_layers x n_heads`` grid.
    """
    if not 1 <= layer <= n_layers or (head is not None and not 1 <= head <= n_heads):
        raise ValueError(f"layer {layer} / head {head} outside the {n_layers} x {n_heads} grid")
    first = (layer - 1) * n_heads + (1 if head is None else head)
    last = (layer - 1) * n_heads + (n_heads if head is None else head)
    suffix = lambda n: "" if n == 1 else str(n)  # noqa: E731 - plotly names the first axes "x", "y"
    x0 = fig.layout[f"xaxis{suffix(first)}"].domain[0]
    x1 = fig.layout[f"xaxis{suffix(last)}"].domain[1]
    y0, y1 = fig.layout[f"yaxis{suffix(first)}"].domain
    pad_x, pad_y = 0.004, 0.01
    fig.add_shape(type="rect", xref="paper", yref="paper", x0=x0 - pad_x, x1=x1 + pad_x, y0=y0 - pad_y,
                  y1=y1 + pad_y, line=dict(color=color, width=3), fillcolor="rgba(0,0,0,0)", layer="above",
                  name="selected head")
    return fig


def picked_head(points: Sequence[dict]) -> tuple[int, int] | None:
    """``(layer, head)`` (from 1) of the first clicked marker of a ``model_view(..., clickable=True)`` grid in
    a plotly selection's ``points`` (Streamlit's ``event.selection.points``: dicts holding ``customdata``);
    None when no point carries one."""
    for p in points or ():
        cd = p.get("customdata") if isinstance(p, dict) else None
        if isinstance(cd, (list, tuple)) and len(cd) == 2:
            try:
                return int(cd[0]), int(cd[1])
            except (TypeError, ValueError):
                continue
    return None


def topk_bar(pieces: Sequence[str], probs: Sequence[float], *, chosen: str | None = None, title: str = "",
             colorscale_color: str = "#2a788e", highlight: str = "#fde725", template: str | None = None) -> go.Figure:
    """Horizontal bars of the top-k next-piece probabilities, best at the top; ``chosen`` highlighted.
    ``title`` is plain text (escaped here: a title naming ``</s>`` shows it)."""
    p = [float(v) for v in probs]
    labels = _safe(unique_labels(pieces))
    colors = [highlight if chosen is not None and pc == chosen else colorscale_color for pc in pieces]
    fig = go.Figure(go.Bar(
        x=p, y=labels, orientation="h", marker_color=colors, text=[f"{v:.1%}" for v in p], textposition="auto",
        hovertemplate="%{y}<br>p = %{x:.4f}<extra></extra>",
    ))
    fig.update_layout(
        title=dict(text=plotly_safe(title)) if title else None,
        xaxis=dict(title="probability", range=[0, max(1e-9, max(p, default=1.0)) * 1.05]),
        yaxis=dict(type="category", autorange="reversed"),
        height=max(260, 60 + 26 * len(p)), margin=dict(l=10, r=10, t=50 if title else 20, b=10),
    )
    use_template(fig, template)
    return fig


def head_stats_figure(stats, metric: str, *, colorscale: str = "Viridis", template: str | None = None) -> go.Figure:
    """An ``L x H`` grid of one per-head statistic (a column of :func:`aiayn.analysis.head_stats`)."""
    L, H = int(stats["layer"].max()), int(stats["head"].max())
    z = np.full((L, H), np.nan)
    for _, r in stats.iterrows():
        z[int(r["layer"]) - 1, int(r["head"]) - 1] = r[metric]
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"head {h + 1}" for h in range(H)], y=[f"layer {l + 1}" for l in range(L)], colorscale=colorscale,
        texttemplate="%{z:.2f}", colorbar=dict(title=dict(text=metric), thickness=14),
        hovertemplate="%{y}, %{x}<br>" + plotly_safe(metric) + " = %{z:.3f}<extra></extra>",
    ))
    fig.update_layout(yaxis=dict(autorange="reversed"), height=120 + 50 * L, margin=dict(l=10, r=10, t=20, b=10))
    use_template(fig, template)
    return fig


def small_multiples(maps: np.ndarray, panel_titles: Sequence[str], q_labels: Sequence[str], k_labels: Sequence[str],
                    *, hover_prefixes: Sequence[str], title: str = "", colorscale: str = "Viridis",
                    zmax: float | None = None, max_height: int = 420, colorbar_thickness: int = 12,
                    template: str | None = None, tick_labels: bool = False, columns: int | None = None) -> go.Figure:
    """N small ``(Q, K)`` heatmaps in rows of ``columns`` panels (default: all N in one row) with one shared colour
    scale, labels on hover: one map over training steps, or the rollout up to each layer. With ``tick_labels`` the
    panels also name their keys (every panel, below it) and queries (the first panel of each row, on its left),
    for grids of a few panels that have the room; otherwise they carry no tick labels.

    Args:
        maps: ``(N, Q, K)`` weights.
        panel_titles: N panel titles.
        q_labels, k_labels: Q / K labels (escaped for plotly here).
        hover_prefixes: N first hover lines (e.g. ``"step 500"``).
        zmax: top of the shared scale (default: the largest weight shown, 1 when all are 0).
        max_height: the height cap in pixels of one row of panels (the height follows the panels' aspect ratio).
        columns: panels per row: fewer, wider panels (large type, long panel titles) in more rows.
    """
    w = np.asarray(maps, dtype=float)
    n, q, k = w.shape
    cols = max(1, min(n, columns or n))
    rows = -(-max(n, 1) // cols)
    # with tick labels the panels keep their height and each row grows by the labels' room (~6 px a character)
    room = 6 * max((len(str(t)) for t in [*q_labels, *k_labels]), default=0) + 20 if tick_labels else 0
    panel = int(min(max_height, max(max_height // 2, 80 + 2.2 * max_height / cols * q / max(k, 1)))) - 80
    gap = 50 + room  # between rows: the row's key labels and the next row's panel titles
    height = 80 + rows * panel + (rows - 1) * gap + room
    fig = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.015,
                        vertical_spacing=gap / height if rows > 1 else 0.0, subplot_titles=list(panel_titles) or None)
    y, x = [plotly_safe(t) for t in q_labels], [plotly_safe(t) for t in k_labels]
    for i in range(n):
        fig.add_trace(go.Heatmap(z=w[i], x=x, y=y, coloraxis="coloraxis",
                                 hovertemplate=f"{plotly_safe(hover_prefixes[i])}<br>query %{{y}}<br>key %{{x}}<br>"
                                               "weight %{z:.3f}<extra></extra>"), row=i // cols + 1, col=i % cols + 1)
    vmax = zmax if zmax is not None else (float(w.max()) if w.size and w.max() > 0 else 1.0)
    fig.update_xaxes(showticklabels=tick_labels, type="category", tickangle=-60 if tick_labels else None,
                     automargin=True)
    fig.update_yaxes(showticklabels=False, type="category", autorange="reversed", automargin=True)
    if tick_labels:
        fig.update_yaxes(showticklabels=True, col=1)
    fig.update_layout(
        coloraxis=dict(colorscale=colorscale, cmin=0.0, cmax=vmax,
                       colorbar=dict(title=dict(text="weight"), thickness=colorbar_thickness)),
        title=dict(text=title) if title else None,
        height=height, margin=dict(l=10, r=40, t=80 if title else 40, b=10),
    )
    use_template(fig, template)
    return fig
