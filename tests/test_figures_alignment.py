"""Pure figures of the alignment page (aiayn.figures.alignment)."""
from __future__ import annotations

import numpy as np
import pytest

from aiayn.figures.alignment import attribution_beside, gold_alignment, head_grid


def test_head_grid_counts_from_one_and_frames_the_best_head():
    v = np.array([[0.5, np.nan, 0.2], [0.9, 0.1, 0.3]])
    fig = head_grid(v, best=(1, 1), value_name="AER")
    z = np.array(fig.data[0].z, dtype=float)
    np.testing.assert_array_equal(np.isnan(z), np.isnan(v))
    assert list(fig.data[0].x) == ["head 1", "head 2", "head 3"] and list(fig.data[0].y) == ["layer 1", "layer 2"]
    (rect,) = fig.layout.shapes
    assert (rect.x0, rect.x1, rect.y0, rect.y1) == (0.5, 1.5, 0.5, 1.5)
    with pytest.raises(ValueError):
        head_grid(np.zeros(3))


def test_gold_alignment_draws_sure_and_possible_only_links():
    sure = np.array([[1, 0, 0], [0, 0, 1]], dtype=bool)
    possible = sure | np.array([[0, 1, 0], [0, 0, 0]], dtype=bool)
    fig = gold_alignment(np.full((2, 3), 0.3), ["a", "b"], ["x", "y", "z"], sure, possible)
    marks = {t.name: t for t in fig.data if t.type == "scatter"}
    assert list(marks["sure link"].x) == ["x", "z"] and list(marks["sure link"].y) == ["a", "b"]
    assert list(marks["possible link"].x) == ["y"] and list(marks["possible link"].y) == ["a"]
    with pytest.raises(ValueError):
        gold_alignment(np.zeros((2, 3)), ["a"], ["x", "y", "z"], sure, possible)


def test_attribution_beside_scales_rows_by_their_maximum():
    attr = np.array([[2.0, -4.0], [0.0, 0.0]])
    fig = attribution_beside(attr, np.array([[0.3, 0.7], [0.5, 0.5]]), ["p", "q"], ["s", "t"],
                             attribution_title="|IG|")
    np.testing.assert_allclose(np.array(fig.data[0].z, dtype=float), [[0.5, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(np.array(fig.data[1].z, dtype=float), [[0.3, 0.7], [0.5, 0.5]])
    assert fig.layout.annotations[0].text == "|IG|"
    with pytest.raises(ValueError):
        attribution_beside(attr, np.zeros((2, 3)), ["p", "q"], ["s", "t"])
