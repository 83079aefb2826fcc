"""Attention figures: shapes, labels, colour axes and hover values (plotly figures, no Streamlit)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from aiayn.figures.attention import (
    attention_heatmap, head_stats_figure, highlight_head, model_view, picked_head, topk_bar,
)


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
    assert list(model_view(np.ones((1, 1, 1, 1)), q_labels=["<s>"], k_labels=["<s>"]).data[0].y) == ["&lt;s&gt;"]
    assert list(model_view(np.ones((1, 1, 2, 1)), q_labels=["<s>", "<s>"], k_labels=["a"]).data[0].y) == [
        "0:&lt;s&gt;", "1:&lt;s&gt;"]  # repeated labels made unique, unique ones kept (no second index)


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


# -- issue 14 -----------------------------------------------------------------------------------------------------

def test_titles_keep_special_pieces():
    """plotly reads titles as HTML: "next: </s>" lost its piece; every builder escapes its text."""
    bar = topk_bar(["</s>", "▁a"], [0.9, 0.1], title="next: </s>, p = 0.931")
    assert bar.layout.title.text == "next: &lt;/s&gt;, p = 0.931"
    hm = attention_heatmap(np.eye(2), ["a", "b"], ["c", "d"], title="row <s>", x_title="key <k>", y_title="q & r")
    assert hm.layout.title.text == "row &lt;s&gt;" and hm.layout.xaxis.title.text == "key &lt;k&gt;"
    assert hm.layout.yaxis.title.text == "q &amp; r" and "q &amp; r: %{y}" in hm.data[0].hovertemplate
    mv = model_view(np.ones((1, 1, 2, 2)), title="<s> heads", y_title="query <q>")
    assert mv.layout.title.text == "&lt;s&gt; heads" and "query &lt;q&gt;: %{y}" in mv.data[0].hovertemplate


def test_row_scaled_colour_bar():
    row = np.array([[0.2, 0.3, 0.25, 0.25]])
    fig = attention_heatmap(row, ["q"], list("abcd"), colorbar_title="weight (0 to row max)")
    assert fig.data[0].zmax == pytest.approx(0.3) and fig.data[0].colorbar.title.text == "weight (0 to row max)"


def test_model_view_hover_labels_once_with_layer_head_and_axis_names():
    w = np.random.default_rng(0).random((2, 3, 2, 2))
    q = ["0:<s>→▁Mein", "1:▁Mein→▁V"]  # already unique (as view_stack gives them): no second index
    fig = model_view(w, q_labels=q, k_labels=["0:▁my", "1:▁x"], y_title="query (decoder input → output)",
                     x_title="key (source)")
    t = fig.data[1 * 3 + 2]
    assert list(t.y) == ["0:&lt;s&gt;→▁Mein", "1:▁Mein→▁V"] and list(t.x) == ["0:▁my", "1:▁x"]
    assert t.hovertemplate.startswith("layer 2, head 3<br>query (decoder input → output): %{y}<br>key (source): %{x}")
    # token labels: queries left of the first column, keys under the last row, none inside the grid
    shown_y = [fig.layout[f"yaxis{'' if n == 1 else n}"].showticklabels for n in range(1, 7)]
    shown_x = [fig.layout[f"xaxis{'' if n == 1 else n}"].showticklabels for n in range(1, 7)]
    assert shown_y == [True, False, False, True, False, False]
    assert shown_x == [False, False, False, True, True, True]
    with pytest.raises(ValueError):
        model_view(w, q_labels=q[:1])


def test_model_view_frames_the_selected_head():
    w = np.random.default_rng(0).random((2, 3, 2, 2))
    fig = model_view(w, selected=(2, 3))
    (frame,) = fig.layout.shapes
    # the frame encloses the subplot of layer 2, head 3 (axes x6/y6) and no other
    xd, yd = fig.layout.xaxis6.domain, fig.layout.yaxis6.domain
    assert frame.x0 < xd[0] < xd[1] < frame.x1 and frame.y0 < yd[0] < yd[1] < frame.y1
    assert frame.x0 > fig.layout.xaxis5.domain[1] and frame.y1 < fig.layout.yaxis3.domain[0]
    row = highlight_head(model_view(w), 1, None, n_layers=2, n_heads=3).layout.shapes[0]  # mean: the whole layer
    assert row.x0 < fig.layout.xaxis.domain[0] and row.x1 > fig.layout.xaxis3.domain[1]
    assert row.y0 < fig.layout.yaxis.domain[0] and row.y1 > fig.layout.yaxis.domain[1]
    assert not model_view(w).layout.shapes
    with pytest.raises(ValueError):
        model_view(w, selected=(3, 1))


def test_model_view_thumbnails_are_clickable():
    L, H = 2, 3
    w = np.random.default_rng(0).random((L, H, 2, 2))
    fig = model_view(w, clickable=True)
    heat, marks = fig.data[: L * H], fig.data[L * H:]
    assert all(t.type == "heatmap" for t in heat) and len(marks) == L * H
    for n, t in enumerate(marks):
        layer, head = divmod(n, H)
        assert t.type == "scatter" and t.marker.opacity == 0
        assert [list(c) for c in t.customdata] == [[layer + 1, head + 1]]
        assert t.xaxis == heat[n].xaxis and t.yaxis == heat[n].yaxis  # on that head's thumbnail
    assert picked_head([{"curve_number": 9, "customdata": [2, 3]}]) == (2, 3)
    assert picked_head([{"curve_number": 1}]) is None and picked_head([]) is None
    assert len(model_view(w).data) == L * H  # not clickable: heatmaps only
