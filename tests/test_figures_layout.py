"""Figure layouts that keep heatmaps readable in presenter mode (the browser test tests/e2e/test_presenter.py
measures them at 1366 x 768): stacked sweep panels, small multiples in rows, cell numbers that grow with the type."""
from __future__ import annotations

import html

import numpy as np
import pandas as pd
import pytest

from aiayn.figures.ablation import TITLE_LINE_CHARS, difference_heatmap, head_comparison, sweep_figure
from aiayn.figures.attention import attention_heatmap, small_multiples
from aiayn.figures.history import history_strip
from aiayn.figures.theme import PRESENTER_FONT_SIZE, apply_presenter_theme


def _sweep(L: int = 2, H: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame([{"kind": k, "layer": lay, "head": h, "chrf_drop": float(rng.normal()), "logprob_drop": 0.0}
                         for k in ("encoder", "decoder", "cross") for lay in range(L) for h in range(H)])


def _domains(fig, axis: str) -> list[tuple[float, float]]:
    return [tuple(fig.layout[name].domain) for name in sorted(fig.layout) if name.startswith(axis)]


def test_sweep_side_by_side_labels_layers_on_the_first_panel_only():
    fig = sweep_figure(_sweep())
    xs = _domains(fig, "xaxis")
    assert len(xs) == 3 and xs[0][1] < xs[1][0] < xs[1][1] < xs[2][0]  # one row, left to right
    shown = [fig.layout[f"yaxis{s}"].showticklabels for s in ("", "2", "3")]
    assert shown[0] is not False and shown[1:] == [False, False]  # no layer labels between two panels' cells
    assert list(fig.data[0].x) == ["1", "2", "3"] and list(fig.data[0].y) == ["1", "2"]
    assert fig.layout.xaxis.title.text == "head" and fig.layout.yaxis.title.text == "layer"


def test_sweep_stacked_gives_every_panel_the_full_width():
    side, stacked = sweep_figure(_sweep()), sweep_figure(_sweep(), stacked=True)
    assert [d for d in _domains(stacked, "xaxis")] == [(0.0, 1.0)] * 3
    ys = _domains(stacked, "yaxis")
    assert ys[0][0] > ys[1][1] and ys[1][0] > ys[2][1]  # top to bottom, not overlapping
    assert stacked.layout.height > side.layout.height
    for a, b in zip(side.data, stacked.data):  # same numbers either way
        assert np.array_equal(np.asarray(a.z, float), np.asarray(b.z, float), equal_nan=True)


def test_small_multiples_in_rows_of_columns():
    maps = np.random.default_rng(0).random((8, 4, 5))
    one_row = small_multiples(maps, [f"p{i}" for i in range(8)], list("abcd"), list("vwxyz"), hover_prefixes=["h"] * 8)
    rows = small_multiples(maps, [f"p{i}" for i in range(8)], list("abcd"), list("vwxyz"), hover_prefixes=["h"] * 8,
                           columns=3)
    assert len({d for d in _domains(one_row, "yaxis")}) == 1
    assert len({d for d in _domains(rows, "yaxis")}) == 3  # 3 + 3 + 2 panels
    widths = [b - a for a, b in _domains(rows, "xaxis")]
    assert min(widths) > 2.5 * max(b - a for a, b in _domains(one_row, "xaxis"))
    assert [a.text for a in rows.layout.annotations] == [f"p{i}" for i in range(8)]  # every panel keeps its title
    assert rows.layout.height > one_row.layout.height


def test_history_strip_titles_survive_rows():
    fig = history_strip(np.full((3, 2, 2), 0.5), [0, 250, 500], ["a", "b"], ["c", "d"], current=250, offset=8000,
                        columns=2)
    assert [a.text for a in fig.layout.annotations] == ["step 8,000 (parent)", "▶ step 8,250", "step 8,500"]


def test_presenter_theme_enlarges_cell_numbers_only_where_written():
    w = np.full((3, 3), 1 / 3)
    with_values = apply_presenter_theme(attention_heatmap(w, list("abc"), list("xyz"), show_values=True))
    assert with_values.data[0].textfont.size == PRESENTER_FONT_SIZE - 6
    plain = apply_presenter_theme(attention_heatmap(w, list("abc"), list("xyz")))
    assert plain.data[0].textfont.size is None
    again = apply_presenter_theme(with_values)
    assert again.data[0].textfont.size == PRESENTER_FONT_SIZE - 6


@pytest.mark.parametrize("labels", [["0:a", "1:b"], ["a", "a"]])
def test_ablation_difference_keeps_unique_labels(labels):
    fig = difference_heatmap(np.zeros((2, 2)), labels, labels)
    expect = labels if len(set(labels)) == 2 else ["0:a", "1:a"]
    assert list(fig.data[0].y) == expect and list(fig.data[0].x) == expect


def _title_lines(fig) -> list[str]:
    return html.unescape(fig.layout.title.text).split("<br>")


@pytest.mark.parametrize("switched_off", [False, True])
@pytest.mark.parametrize("layer, head", [(1, 1), (3, 8), (12, 16)])
def test_one_head_comparison_titles_fit_a_third_of_the_page(layer, head, switched_off):
    rng = np.random.default_rng(layer * head)
    intact, ablated = rng.dirichlet(np.ones(4), size=3), rng.dirichlet(np.ones(4), size=3)
    figs = head_comparison(intact, ablated, list("abc"), list("wxyz"), layer=layer, head=head,
                           switched_off=switched_off)
    for fig in figs:
        lines = _title_lines(fig)
        assert all(0 < len(line) <= TITLE_LINE_CHARS for line in lines), lines
        assert str(layer) in lines[0] and str(head) in lines[0]
    assert np.allclose(figs[2].data[0].z, ablated - intact)
    # the plot areas line up: one top margin, one height left for the map
    assert len({f.layout.margin.t for f in figs}) == 1
    assert len({f.layout.height - f.layout.margin.t for f in figs}) == 1


def test_a_switched_off_head_says_so_without_shrinking_its_map():
    w = np.full((3, 4), 0.25)
    on = head_comparison(w, w, list("abc"), list("wxyz"), layer=2, head=5)
    off = head_comparison(w, w, list("abc"), list("wxyz"), layer=2, head=5, switched_off=True)
    assert len(_title_lines(off[1])) > len(_title_lines(on[1]))  # the extra line says what its map shows
    assert [_title_lines(f) for f in (off[0], off[2])] == [_title_lines(f) for f in (on[0], on[2])]
    assert off[1].layout.height - off[1].layout.margin.t == on[1].layout.height - on[1].layout.margin.t
