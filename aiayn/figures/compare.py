"""Plotly figure of the difference between two sentences' attention maps (pure function: arrays in, ``go.Figure``
out).

The job of this module is the difference heatmap of the comparison view ("compare two
sentences"): ``b - a`` of two aligned maps (:func:`aiayn.analysis.align_maps`) on a diverging,
colour-blind-safe scale centred at 0 (ColorBrewer's ``RdBu``: red where sentence a attends more, blue where
b attends more, white for no change), symmetric about 0 so equal changes look equally strong. Cells absent
in either sentence (NaN) are left blank. Rows are queries, columns keys, as in
:mod:`aiayn.figures.attention`; weights are post-softmax (Eq. 1 of the paper).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .attention import heatmap_figure, plotly_safe

#: diverging, colour-blind-safe colour scale (ColorBrewer RdBu: negative red, positive blue)
DIFF_COLORSCALE = "RdBu"


def difference_heatmap(
    diff: np.ndarray,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    *,
    title: str = "",
    colorscale: str = DIFF_COLORSCALE,
    x_title: str = "key",
    y_title: str = "query",
    zmax: float | None = None,
    show_values: bool = False,
    template: str | None = None,
    height: int | None = None,
    value_name: str = "b − a",
) -> go.Figure:
    """The difference ``b - a`` of two aligned attention maps as a heatmap centred at 0.

    Args:
        diff: ``(Q, K)`` float differences of weights, in [-1, 1]; NaN where a row or column is absent in
            one sentence (drawn blank, no hover).
        q_labels, k_labels: ``Q`` / ``K`` unique labels (e.g. :attr:`aiayn.analysis.AlignedMaps.q_labels`).
        zmax: half-width of the colour range ``[-zmax, zmax]`` (default: the largest ``|diff|``, or 1 when
            every difference is 0 or absent); ``zmid`` is 0.
        show_values: write each difference in its cell (readable up to ~30 x 30).
        value_name: what a value is, on the colour bar and in the hover text (plain text; e.g. "ablated − intact").

    Raises:
        ValueError: labels do not match the map's shape, labels repeat, or ``zmax`` is not positive.
    """
    d = np.asarray(diff, dtype=float)
    if d.ndim != 2 or d.shape != (len(q_labels), len(k_labels)):
        raise ValueError(f"map of shape {d.shape} but {len(q_labels)} query and {len(k_labels)} key labels")
    if len(set(q_labels)) != len(q_labels) or len(set(k_labels)) != len(k_labels):
        raise ValueError("query and key labels must be unique (plotly categories)")
    if zmax is None:
        finite = np.abs(d[np.isfinite(d)])
        zmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    elif not zmax > 0:
        raise ValueError(f"zmax must be positive, got {zmax}")
    y, x = [plotly_safe(s) for s in q_labels], [plotly_safe(s) for s in k_labels]
    trace = go.Heatmap(
        z=d, x=x, y=y, zmin=-zmax, zmax=zmax, zmid=0.0, colorscale=colorscale, hoverongaps=False,
        colorbar=dict(title=dict(text=plotly_safe(value_name)), thickness=14),
        hovertemplate=(f"{plotly_safe(y_title)}: %{{y}}<br>{plotly_safe(x_title)}: %{{x}}<br>{plotly_safe(value_name)}: "
                       "%{z:+.3f}<extra></extra>"),
        xgap=1 if max(d.shape, default=0) <= 40 else 0, ygap=1 if max(d.shape, default=0) <= 40 else 0,
    )
    if show_values:
        trace.update(texttemplate="%{z:+.2f}", textfont=dict(size=10))
    return heatmap_figure(trace, d.shape, title=title, x_title=x_title, y_title=y_title, height=height,
                          template=template)
