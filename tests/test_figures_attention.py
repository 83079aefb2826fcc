"""Attention figures: shapes, labels, colour axes and hover values (plotly figures, no Streamlit)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from aiayn.figures.attention import attention_heatmap, head_stats_figure, model_view, topk_bar


def test_heatmap_labels_values_and_orientation():
    w = np.array([[0.2, 0.8], [0.6, 0.4], [1.0, 0.0]])
    fig = attention_heatmap(w, ["▁a", "▁a", "b"], ["x", "y"], title="T", colorscale="Cividis")
    tr = fig.data[0]
    assert list(tr.y) == ["0:▁a", "1:▁a", "2:b"]  # repeated pieces made unique
    assert list(tr.x) == ["x", "y"]  # already unique: kept
    assert np.array_equal(np.asarray(tr.z), w)
    assert tr.zmin == 0.0 and tr.zmax == pytest.approx(1.0)
    assert "weight: %{z:.3f}" in tr.hovertemplate
    assert fig.layout.yaxis.autorange == "reversed"  # first query on top, as in the paper's figures
    assert fig.layout.title.text == "T"
    assert tr.colorscale[0][1] != attention_heatmap(w, ["a", "b", "c"], ["x", "y"]).data[0].colorscale[0][1]
    assert tr.texttemplate is None
    shown = attention_heatmap(w, ["a", "b", "c"], ["x", "y"], show_values=True, zmax=1.0)
    assert shown.data[0].texttemplate == "%{z:.2f}"
    with pytest.raises(ValueError):
        attention_heatmap(w, ["a"], ["x", "y"])


def test_labels_are_escaped_for_plotly_html():
    fig = attention_heatmap(np.eye(2), ["<s>", "▁a&b"], ["x", "</s>"])
    assert list(fig.data[0].y) == ["&lt;s&gt;", "▁a&amp;b"] and list(fig.data[0].x) == ["x", "&lt;/s&gt;"]
    assert list(topk_bar(["</s>"], [1.0]).data[0].y) == ["0:&lt;/s&gt;"]
    assert list(model_view(np.ones((1, 1, 1, 1)), q_labels=["<s>"], k_labels=["<s>"]).data[0].y) == ["0:&lt;s&gt;"]


def test_model_view_grid_shared_coloraxis_no_text():
    L, H, Q, K = 2, 3, 4, 5
    w = np.random.default_rng(0).random((L, H, Q, K))
    fig = model_view(w, q_labels=list("abcd"), k_labels=list("vwxyz"))
    assert len(fig.data) == L * H
    assert all(t.coloraxis == "coloraxis" for t in fig.data)
    assert all(t.text is None and t.texttemplate is None for t in fig.data)
    assert fig.layout.coloraxis.cmin == 0.0 and fig.layout.coloraxis.cmax == pytest.approx(w.max())
    # trace order is layer-major: trace (l, h) shows w[l, h] and says so on hover
    t = fig.data[1 * H + 2]
    assert np.array_equal(np.asarray(t.z), w[1, 2]) and "layer 2, head 3" in t.hovertemplate
    titles = {a.text for a in fig.layout.annotations}
    assert {"head 1", "head 3", "layer 1", "layer 2"} <= titles
    with pytest.raises(ValueError):
        model_view(w[0])


def test_topk_bar_highlights_the_chosen_piece():
    fig = topk_bar(["▁a", "▁b", "▁a"], [0.5, 0.3, 0.1], chosen="▁b")
    bar = fig.data[0]
    assert list(bar.y) == ["0:▁a", "1:▁b", "2:▁a"] and list(bar.x) == [0.5, 0.3, 0.1]
    colors = list(bar.marker.color)
    assert colors[1] != colors[0] and colors[0] == colors[2]


def test_head_stats_figure_places_values():
    stats = pd.DataFrame({"layer": [1, 1, 2, 2], "head": [1, 2, 1, 2], "entropy": [0.1, 0.2, 0.3, 0.4]})
    z = np.asarray(head_stats_figure(stats, "entropy").data[0].z)
    assert z.tolist() == [[0.1, 0.2], [0.3, 0.4]]
