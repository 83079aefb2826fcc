"""Figure of the alignment error rate across training (pure: numbers in, a Plotly figure out, no Streamlit).

:func:`aer_across_training`: one line per readout (the model mean, the best layer mean, the best head) of the AER
(Och and Ney 2003) at each recorded training state (:mod:`aiayn.alignment_history`); the per-head grid of one
state is :func:`aiayn.figures.alignment.head_grid`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .attention import plotly_safe
from .theme import use_template

#: line styles in the order the series are given, so that print and colour-blind readers can tell them apart
DASHES = ("solid", "dash", "dot", "dashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up")


def aer_across_training(steps: Sequence[int], series: Mapping[str, Sequence[float]], *, current: int | None = None,
                        title: str = "", template: str | None = None, offset: int = 0) -> go.Figure:
    """AER (0 = perfect, 1 = all wrong) against the training step, one line per named series.

    Args:
        steps: the N recorded training steps of the run (x axis: ``offset + step``).
        series: name -> N AERs (NaN: no point).
        current: a step of ``steps`` to mark with a vertical line, or None.
        offset: the lifetime step of the run's step 0 when it started from a trained parent (the x axis is then
            titled "lifetime training step").

    Raises:
        ValueError: no series, or a series whose length differs from ``steps``.
    """
    if not series:
        raise ValueError("no series to draw")
    x = [int(s) + offset for s in steps]
    fig = go.Figure()
    for k, (name, values) in enumerate(series.items()):
        v = np.asarray(values, dtype=float)
        if v.shape != (len(x),):
            raise ValueError(f"series {name!r} has shape {v.shape}, want ({len(x)},) for {len(x)} steps")
        fig.add_trace(go.Scatter(x=x, y=v, mode="lines+markers", name=plotly_safe(name),
                                 line=dict(dash=DASHES[k % len(DASHES)], width=2.5),
                                 marker=dict(symbol=SYMBOLS[k % len(SYMBOLS)], size=8),
                                 hovertemplate=f"{plotly_safe(name)}<br>step %{{x}}<br>AER %{{y:.3f}}<extra></extra>"))
    if current is not None and int(current) in [int(s) for s in steps]:
        fig.add_vline(x=int(current) + offset, line=dict(color="#888888", width=1.5, dash="dot"))
    fig.update_layout(title=dict(text=plotly_safe(title)) if title else None, height=360,
                      xaxis_title="lifetime training step" if offset else "training step",
                      yaxis=dict(title="AER (lower is better)", range=[0, 1.02]),
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0),
                      margin=dict(l=10, r=10, t=50 if title else 20, b=10))
    use_template(fig, template)
    return fig
