"""Plotly figures of head ablation (pure functions: arrays and tables in, ``go.Figure`` out, no Streamlit).

The sweep of :func:`aiayn.analysis.ablation.head_sweep` as one layer x head heatmap per kind of attention
(Michel et al. 2019; Voita et al. 2019), and the change of attention maps when heads are removed (ablated -
intact) on a diverging colour scale centred on 0. Layers and heads are labelled from 1, as everywhere in the app.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import unique_labels
from .attention import attention_heatmap, plotly_safe
from .compare import difference_heatmap as compare_difference
from .theme import use_template

#: the sweep's metrics and how the figures title them
SWEEP_METRICS = {
    "chrf_drop": "chrF drop (points)",
    "logprob_drop": "log-prob drop (nats / piece)",
    "chrf": "chrF without the head",
    "logprob": "log-prob / piece without the head",
}
KIND_LABELS = {"encoder": "Encoder self-attention", "decoder": "Decoder self-attention", "cross": "Cross-attention"}
DIVERGING = "RdBu_r"
#: the longest title line (characters) of a figure drawn in a third of the page: three columns beside the sidebar
#: at 1366 x 768 leave each chart about 290 px, and the chart theme's bold title averages about 7 px a character
TITLE_LINE_CHARS = 40


def sweep_grid(df, kind: str, metric: str) -> np.ndarray:
    """The ``(L, H)`` grid of ``metric`` for ``kind`` from a sweep table (layer and head columns from 0);
    NaN where a head has no row.

    Raises:
        ValueError: ``metric`` is not a column of the table.
    """
    if metric not in df.columns:
        raise ValueError(f"unknown metric {metric!r}; the sweep has {list(df.columns)}")
    L, H = int(df["layer"].max()) + 1, int(df["head"].max()) + 1
    z = np.full((L, H), np.nan)
    rows = df[df["kind"] == kind]
    z[rows["layer"].to_numpy(int), rows["head"].to_numpy(int)] = rows[metric].to_numpy(float)
    return z


def sweep_figure(df, metric: str = "chrf_drop", *, colorscale: str = DIVERGING, template: str | None = None,
                 title: str = "", stacked: bool = False) -> go.Figure:
    """One layer x head heatmap per kind present in the sweep table, one shared colour scale: side by side
    (one row; the layer labels on the first panel only, so no panel's cell text runs into the next one's
    labels), or one under the other with ``stacked=True`` (each panel the figure's full width: presenter mode).

    Drops (``*_drop``) use a diverging scale centred on 0 (red: removing the head hurts; blue: it helps);
    cell text shows the value. Axes read "head" 1..H and "layer" 1..L.

    Args:
        df: :func:`aiayn.analysis.ablation.head_sweep`'s table.
        metric: a key of :data:`SWEEP_METRICS` (or any numeric column).

    Raises:
        ValueError: an empty table or an unknown metric.
    """
    if df is None or len(df) == 0:
        raise ValueError("the sweep table is empty")
    kinds = [k for k in KIND_LABELS if (df["kind"] == k).any()]
    grids = [sweep_grid(df, k, metric) for k in kinds]
    L, H = grids[0].shape
    finite = np.concatenate([g[np.isfinite(g)] for g in grids]) if grids else np.zeros(1)
    centred = metric.endswith("_drop")
    n = len(kinds)
    panel = 60 * L + 100  # pixels of one panel: 60 per layer row, the subplot title and the head labels
    height = int(panel * n + 60) if stacked else int(160 + 60 * L)
    grid = dict(rows=n, cols=1, vertical_spacing=min(0.3, 120 / height)) if stacked else \
        dict(rows=1, cols=n, horizontal_spacing=0.04, shared_yaxes=True)
    fig = make_subplots(subplot_titles=[KIND_LABELS[k] for k in kinds], **grid)
    heads, layers = [str(h + 1) for h in range(H)], [str(lay + 1) for lay in range(L)]
    for i, (kind, z) in enumerate(zip(kinds, grids), start=1):
        fig.add_trace(go.Heatmap(
            z=z, x=heads, y=layers, coloraxis="coloraxis", texttemplate="%{z:.2f}", textfont=dict(size=10),
            hovertemplate=f"{KIND_LABELS[kind]}<br>layer %{{y}}, head %{{x}}<br>{SWEEP_METRICS.get(metric, metric)}: "
                          "%{z:.3f}<extra></extra>",
        ), row=i if stacked else 1, col=1 if stacked else i)
    if centred:
        vmax = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
        axis = dict(colorscale=colorscale, cmin=-vmax, cmax=vmax, cmid=0.0)
    else:
        axis = dict(colorscale="Viridis", cmin=float(finite.min()) if finite.size else 0.0,
                    cmax=float(finite.max()) if finite.size else 1.0)
    axis["colorbar"] = dict(title=dict(text=SWEEP_METRICS.get(metric, metric)), thickness=14)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", title="head")
    if stacked:
        fig.update_yaxes(title="layer")
    else:
        fig.update_yaxes(title="layer", row=1, col=1)
    fig.update_layout(coloraxis=axis, title=dict(text=title) if title else None, height=height,
                      margin=dict(l=10, r=10, t=70 if title else 40, b=10))
    use_template(fig, template)
    return fig


def difference_heatmap(diff: np.ndarray, q_labels: Sequence[str], k_labels: Sequence[str], *, title: str = "",
                       x_title: str = "key", y_title: str = "query", template: str | None = None,
                       zmax: float | None = None) -> go.Figure:
    """One map of ablated - intact attention weights ``(Q, K)`` on a diverging scale centred on 0 (red: the
    ablated model attends more; blue: less): :func:`aiayn.figures.compare.difference_heatmap` with that scale and
    name; repeated labels are made unique (``"i:piece"``), labels that already are unique are kept as they are.

    Raises:
        ValueError: labels do not match the map's shape; ``zmax`` not positive.
    """
    q = q_labels if len(set(q_labels)) == len(q_labels) else unique_labels(q_labels)
    k = k_labels if len(set(k_labels)) == len(k_labels) else unique_labels(k_labels)
    return compare_difference(diff, q, k, title=title, colorscale=DIVERGING, x_title=x_title, y_title=y_title,
                              zmax=zmax, template=template, value_name="ablated − intact")


def head_comparison(intact: np.ndarray, ablated: np.ndarray, q_labels: Sequence[str], k_labels: Sequence[str], *,
                    layer: int, head: int, switched_off: bool = False, diff: np.ndarray | None = None,
                    colorscale: str = "Viridis", x_title: str = "key", y_title: str = "query",
                    template: str | None = None) -> tuple[go.Figure, go.Figure, go.Figure]:
    """One head's map intact, ablated and their difference (ablated - intact), as three figures meant to sit
    side by side in thirds of the page: no title line longer than :data:`TITLE_LINE_CHARS` (a longer title is
    broken into lines) and the same top margin on all three, so that their plot areas line up.

    Args:
        intact, ablated: ``(Q, K)`` attention weights of the head, without and with the heads removed.
        layer, head: the head, counted from 1 (as the app shows them).
        switched_off: the head itself is removed: its ablated map is what it would attend to, and says so.
        diff: ``ablated - intact`` when the caller has it already; computed here otherwise.

    Returns:
        the intact map, the ablated map (weights on one 0-1 scale) and the difference (diverging, centred on 0).

    Raises:
        ValueError: labels do not match a map's shape.
    """
    d = np.asarray(ablated, dtype=float) - np.asarray(intact, dtype=float) if diff is None else diff
    name = f"Layer {layer}, head {head}"
    titles = ([f"{name}: intact"], [f"{name}: ablated"] + (["switched off: what it would attend to"] if switched_off
                                                            else []), [f"{name}: ablated − intact"])
    axes = dict(x_title=x_title, y_title=y_title, template=template)
    figs = (attention_heatmap(intact, q_labels, k_labels, title=titles[0][0], colorscale=colorscale, zmax=1.0, **axes),
            attention_heatmap(ablated, q_labels, k_labels, title=titles[1][0], colorscale=colorscale, zmax=1.0, **axes),
            difference_heatmap(d, q_labels, k_labels, title=titles[2][0], **axes))
    # plotly sets a title's first line on the middle of the top margin and the next lines below it: the margin
    # holds every line at presenter mode's title size (aiayn.figures.theme), the same on all three figures, and
    # the figures grow by what the margin grows, so the maps keep their size
    top = 36 + 30 * max(len(t) for t in titles)
    for fig, title in zip(figs, titles):
        fig.update_layout(height=fig.layout.height + top - fig.layout.margin.t, margin_t=top,
                          title_text="<br>".join(plotly_safe(t) for t in title))
    return figs


def difference_grid(diff: np.ndarray, *, removed: Iterable[tuple[int, int]] = (), title: str = "",
                    template: str | None = None) -> go.Figure:
    """All ``L x H`` heads of one kind, ablated - intact ``(L, H, Q, K)``, one shared diverging scale; the
    removed heads (``(layer, head)`` from 0) are marked "off" (their maps are still computed: what they would
    attend to).

    Raises:
        ValueError: ``diff`` is not 4-dimensional.
    """
    d = np.asarray(diff, dtype=float)
    if d.ndim != 4:
        raise ValueError(f"expected (L, H, Q, K) differences, got shape {d.shape}")
    L, H, Q, K = d.shape
    fig = make_subplots(rows=L, cols=H, horizontal_spacing=0.012, vertical_spacing=0.03 if L > 1 else 0.0,
                        column_titles=[f"head {h + 1}" for h in range(H)], row_titles=[f"layer {l + 1}" for l in range(L)])
    for layer in range(L):
        for head in range(H):
            fig.add_trace(go.Heatmap(
                z=d[layer, head], coloraxis="coloraxis",
                hovertemplate=f"layer {layer + 1}, head {head + 1}<br>query %{{y}}<br>key %{{x}}<br>"
                              "change %{z:+.3f}<extra></extra>"), row=layer + 1, col=head + 1)
    mark_heads(fig, removed)
    vmax = float(np.abs(d).max()) if d.size and np.abs(d).max() > 0 else 1.0
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    fig.update_layout(
        coloraxis=dict(colorscale=DIVERGING, cmin=-vmax, cmax=vmax, cmid=0.0,
                       colorbar=dict(title=dict(text="ablated − intact"), thickness=14)),
        title=dict(text=title) if title else None,
        height=int(min(1400, max(300, 40 + L * max(110, 900 / max(H, 1) * Q / max(K, 1))))),
        margin=dict(l=10, r=40, t=70 if title else 40, b=10),
    )
    use_template(fig, template)
    return fig


def mark_heads(fig: go.Figure, cells: Iterable[tuple[int, int]], text: str = "off") -> go.Figure:
    """Write ``text`` over the subplots of a layer x head grid (:func:`difference_grid`,
    :func:`aiayn.figures.attention.model_view`) at ``cells`` (``(layer, head)`` from 0); returns ``fig``."""
    for layer, head in cells:
        fig.add_annotation(row=layer + 1, col=head + 1, xref="x domain", yref="y domain", x=0.5, y=0.5,
                           text=f"<b>{text}</b>", showarrow=False, font=dict(color="#d62728", size=14),
                           bgcolor="rgba(255,255,255,0.7)")
    return fig
