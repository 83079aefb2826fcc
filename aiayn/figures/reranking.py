"""The reverse model's view of a translation (:mod:`aiayn.reranking`): how probable each source piece is when the
model of the opposite direction reads the translation, i.e. what the translation still says of the source. Pure
plotly, no Streamlit."""
from __future__ import annotations

import math
from typing import Sequence

import plotly.graph_objects as go

from ..analysis import unique_labels
from .attention import plotly_safe
from .theme import use_template

#: below this probability a source piece counts as hard to get back (drawn in the warning colour)
LOW_PROBABILITY = 0.1


def recovery_bars(pieces: Sequence[str], log_probs: Sequence[float], *, title: str = "", color: str = "#2a788e",
                  low_color: str = "#d95f02", low: float = LOW_PROBABILITY, template: str | None = None) -> go.Figure:
    """One bar per source piece: ``P(x_i | y, x_<i)`` under the reverse model (0-1, natural-log inputs
    exponentiated), pieces below ``low`` in ``low_color`` with a marker above the axis (second trace, only when there
    is such a piece); the pieces in source order along x.

    Args:
        pieces: the source's pieces, ``</s>`` last (:attr:`aiayn.reranking.Reranked.source_tokens`).
        log_probs: one natural-log probability per piece (``Reranked.reverse_piece_log_probs``; ``-inf`` allowed: drawn
            as 0).
        title: plain text (escaped here).

    Raises:
        ValueError: ``pieces`` and ``log_probs`` of different lengths, or empty; a log-probability above 0 or NaN.
    """
    if len(pieces) != len(log_probs) or not pieces:
        raise ValueError(f"need one log-probability per piece, got {len(pieces)} pieces and {len(log_probs)} values")
    lp = [float(v) for v in log_probs]
    if any(math.isnan(v) or v > 1e-6 for v in lp):
        raise ValueError("log-probabilities must be <= 0 and not NaN")
    p = [math.exp(min(v, 0.0)) for v in lp]
    labels = [plotly_safe(x) for x in unique_labels(pieces)]
    fig = go.Figure(go.Bar(
        x=labels, y=p, marker_color=[low_color if v < low else color for v in p],
        text=[f"{v:.0%}" if v >= 0.01 else f"{v:.1e}" for v in p], textposition="outside", cliponaxis=False,
        customdata=lp, hovertemplate="%{x}<br>P = %{y:.4f}<br>log P = %{customdata:.2f}<extra></extra>",
        showlegend=False,
    ))
    hard = [i for i, v in enumerate(p) if v < low]
    if hard:  # a bar near 0 cannot be seen: a marker on the axis says which pieces the translation lost
        fig.add_trace(go.Scatter(
            x=[labels[i] for i in hard], y=[0.17] * len(hard), mode="markers", showlegend=False,
            marker=dict(symbol="triangle-up", size=14, color=low_color), customdata=[lp[i] for i in hard],
            hovertemplate="%{x}: hard to get back<br>log P = %{customdata:.2f}<extra></extra>",
        ))
    fig.update_layout(
        title=dict(text=plotly_safe(title)) if title else None,
        xaxis=dict(type="category", title="source piece"), yaxis=dict(title="P(piece | translation)", range=[0, 1.15]),
        height=320, margin=dict(l=10, r=10, t=50 if title else 20, b=10),
    )
    use_template(fig, template)
    return fig
