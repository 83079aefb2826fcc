"""aiayn.figures.labs: the figures carry the numbers of aiayn.lessons (and nothing else)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from aiayn import TransformerConfig, lessons
from aiayn.figures import labs


def test_pe_heatmap_holds_the_table_and_strides_big_ones():
    pe = lessons.pe_matrix(50, 16)
    fig = labs.pe_heatmap(pe, colorscale="Cividis")
    z = np.asarray(fig.data[0].z)
    assert np.array_equal(z, pe) and fig.data[0].zmin == -1 and fig.data[0].zmax == 1
    big = lessons.pe_matrix(2048, 512)
    fig = labs.pe_heatmap(big)
    z = np.asarray(fig.data[0].z)
    assert z.size <= labs.MAX_CELLS
    s = int(fig.data[0].y[1] - fig.data[0].y[0])
    assert np.array_equal(z, big[::s]) and f"one position in {s} shown" in fig.layout.title.text
    assert fig.layout.xaxis.title.text == "dimension (even: sin, odd: cos)"


def test_pe_heatmap_names_the_dimensions_of_each_layout():
    """Marian's (an imported Opus-MT model's) concatenated table holds all sines first: its axis says so, not the
    paper's even/odd split; the stride reads without a made-up ordinal ("2th")."""
    pe = lessons.pe_matrix(512, 512, "concatenated")
    fig = labs.pe_heatmap(pe, layout="concatenated")
    assert fig.layout.xaxis.title.text == "dimension (first half: sin, second half: cos)"
    assert "one position in 2 shown" in fig.layout.title.text and "2th" not in fig.layout.title.text


def test_pe_curves_and_wavelength_figures():
    df = lessons.pe_curves(30, 16, [0, 5])
    fig = labs.pe_curves_figure(df)
    assert len(fig.data) == 2
    assert np.allclose(fig.data[1].y, lessons.pe_matrix(30, 16)[:, 5]) and "cos" in fig.data[1].name
    wl = lessons.wavelengths(16)
    fig = labs.wavelength_figure(wl)
    assert np.allclose(fig.data[0].y, wl) and fig.layout.yaxis.type == "log"
    lines = sorted(s.y0 for s in fig.layout.shapes)
    assert lines == pytest.approx([2 * math.pi, 10000 * 2 * math.pi])


def test_similarity_and_offset_figures():
    sim = lessons.pe_similarity(40, 16)
    fig = labs.similarity_figure(sim)
    assert np.allclose(np.asarray(fig.data[0].z), sim.matrix)
    assert np.allclose(fig.data[1].y, sim.profile) and list(fig.data[1].x) == list(range(-39, 40))
    off = lessons.pe_offset_map(3, 40, 64)
    fig = labs.offset_map_figure(off, max_dims=32)
    assert np.allclose(np.asarray(fig.data[0].z), off.matrix[:32, :32])
    assert np.allclose(fig.data[1].y, np.abs(off.predicted - off.actual).max(1))
    assert f"{off.max_error:.2e}" in fig.layout.title.text


def test_stage_heatmap_marks_minus_infinity():
    mask = lessons.causal_mask_np(4)
    z = np.where(mask, np.arange(16.0).reshape(4, 4), -np.inf)
    labels = labs.token_labels(["<s>", "a", "a", "b"])
    assert labels == ["0:&lt;s&gt;", "1:a", "2:a", "3:b"]  # unique although pieces repeat; HTML-escaped for plotly
    fig = labs.stage_heatmap(z, labels, title="masked")
    hz = np.asarray(fig.data[0].z, dtype=float)
    assert np.all(np.isnan(hz[~mask])) and np.array_equal(hz[mask], z[mask])
    grey = np.asarray(fig.data[1].z, dtype=float)  # masked cells drawn grey, the rest transparent
    assert np.array_equal(~np.isnan(grey), ~mask)
    marks = fig.data[2]
    assert marks.name == labs.MASKED_LABEL and marks.showlegend
    assert sorted(zip(marks.y, marks.x)) == sorted((labels[i], labels[j]) for i, j in zip(*np.nonzero(~mask)))
    # without -inf there is no legend entry
    assert len(labs.stage_heatmap(np.ones((2, 2)), ["a", "b"], title="x").data) == 1
    # many masked cells: grey cells and one legend entry, not thousands of markers
    big = lessons.causal_mask_np(60)
    fig = labs.stage_heatmap(np.where(big, 0.0, -np.inf), [str(i) for i in range(60)], title="big")
    assert len(fig.data[2].x) == 1 and fig.data[2].name.startswith(labs.MASKED_LABEL)
    assert np.array_equal(~np.isnan(np.asarray(fig.data[1].z, dtype=float)), ~big)


def test_norms_figure_draws_constant_norms_as_a_line():
    df = pd.DataFrame({"what": ["emb"] * 3 + ["pe"] * 4, "index": [0, 1, 2, 0, 1, 2, 3], "norm": [1.0, 2.0, 3.0] + [5.66] * 4})
    fig = labs.norms_figure(df)
    assert fig.data[0].type == "histogram" and list(fig.data[0].x) == [1.0, 2.0, 3.0]
    assert fig.data[1].type == "scatter" and list(fig.data[1].x) == [5.66, 5.66]


def test_mask_and_padding_figures():
    mask = lessons.causal_mask_np(3)
    fig = labs.mask_figure(mask, x_labels=["a", "b", "c"], y_labels=["a", "b", "c"])
    assert np.array_equal(np.asarray(fig.data[0].z), mask.astype(float))
    km = np.array([[True, True, False], [True, True, True]])
    fig = labs.padding_figure([["x", "y", "<pad>"], ["x", "y", "z"]], km)
    assert np.array_equal(np.asarray(fig.data[0].z), km.astype(float))
    assert list(fig.data[0].text[0]) == ["x", "y", "&lt;pad&gt;"]  # escaped: plotly reads text as HTML


def test_dot_histogram_overlays_the_theoretical_normal():
    d_k = 64
    x = lessons.random_dot_products(d_k, 5000, seed=1)
    fig = labs.dot_histogram(x, d_k)
    assert np.array_equal(fig.data[0].x, x) and fig.data[0].histnorm == "probability density"
    grid, pdf = np.asarray(fig.data[1].x), np.asarray(fig.data[1].y)
    assert pdf.max() == pytest.approx(1 / math.sqrt(2 * math.pi * d_k), rel=1e-3)
    assert np.trapezoid(pdf, grid) == pytest.approx(1.0, abs=1e-3)
    fig = labs.dot_histogram(x, d_k, scaled=True)
    assert np.allclose(fig.data[0].x, x / 8) and np.asarray(fig.data[1].y).max() == pytest.approx(1 / math.sqrt(2 * math.pi), rel=1e-3)


def test_matrix_figure_writes_numbers_and_minus_infinity():
    fig = labs.matrix_figure(np.array([[1.5, -np.inf], [0.25, 2.0]]), title="m")
    text = np.asarray(fig.data[0].text)
    assert text[0, 1] == "−∞" and text[0, 0] == "1.5" and text[1, 0] == "0.25"
    assert fig.data[1].name == labs.MASKED_LABEL


def test_model_and_training_figures():
    cfg = TransformerConfig.preset("tiny", vocab_size=50)
    summ = lessons.parameter_summary(cfg)
    fig = labs.parameters_figure({"tiny": summ}, log=True)
    assert list(fig.data[0].y) == summ["parameters"].tolist() and fig.layout.yaxis.type == "log"
    assert f"{int(summ['parameters'].sum()):,}" in fig.data[0].name
    df = pd.DataFrame({"step": [1, 2, 3], "train_loss": [3.0, 2.0, 1.0], "valid_loss": [np.nan, 2.5, np.nan],
                       "valid_bleu": [np.nan, 4.0, np.nan], "lr": [1e-4, 2e-4, 3e-4]})
    fig = labs.training_curves_figure(df)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["valid BLEU"].x) == [2] and list(by_name["valid BLEU"].y) == [4.0]
    assert list(by_name["train loss (label-smoothed)"].y) == [3.0, 2.0, 1.0]
    assert labs.NO_VALID_BLEU not in [a.text for a in fig.layout.annotations]
    no_bleu = labs.training_curves_figure(df.drop(columns="valid_bleu"))  # a run that decoded no valid sentences
    assert "valid BLEU" not in {t.name for t in no_bleu.data}
    note = next(a for a in no_bleu.layout.annotations if a.text == labs.NO_VALID_BLEU)
    (x0, x1), (y0, y1) = no_bleu.layout.xaxis2.domain, no_bleu.layout.yaxis2.domain  # in the BLEU panel
    assert note.xref == "paper" and x0 < note.x < x1 and y0 < note.y < y1
    sched = lessons.lr_schedule(512, 4000, 10000)
    fig = labs.lr_figure({"x": sched}, peaks={"x": (4000, 512**-0.5 * 4000**-0.5)})
    assert np.allclose(fig.data[0].y, sched["lr"]) and fig.data[1].x[0] == 4000
    q = lessons.smoothed_target(10, 3, 0.1)
    fig = labs.smoothing_target_figure(q, 3)
    assert fig.data[0].y[3] == 1.0 and np.allclose(fig.data[1].y, q)


def test_presenter_mode_enlarges_type():
    df = lessons.pe_curves(10, 8, [0])
    small = labs.pe_curves_figure(df, presenter=False).layout.font.size
    big = labs.pe_curves_figure(df, presenter=True).layout.font.size
    assert big > small


def test_training_curves_marks_recipe_changes():
    df = pd.DataFrame({"step": [10, 20, 30], "train_loss": [3.0, 2.0, 1.0], "valid_bleu": [1.0, 2.0, 3.0], "lr": [1e-4, 2e-4, 1e-4]})
    fig = labs.training_curves_figure(df, marks=[(20, "upsample_sentences 4 -> 8")])
    assert [sh.x0 for sh in fig.layout.shapes] == [20, 20, 20]
    labels = [a for a in fig.layout.annotations if a.text == "(1)"]
    assert len(labels) == 1 and labels[0].x == 20
    assert "upsample_sentences 4 -&gt; 8" in labels[0].hovertext  # escaped: plotly reads text as HTML
    assert not labs.training_curves_figure(df).layout.shapes


def test_training_curves_axes_span_the_logged_steps_and_close_marks_do_not_overlap():
    """Issue 14: the long mark labels widened the loss panel's x axis to -10k (left half empty) and two
    close marks printed their labels on top of each other."""
    steps = np.arange(25, 8001, 25)
    df = pd.DataFrame({"step": steps, "train_loss": 9.0 / np.sqrt(steps), "lr": 1e-3 / np.sqrt(steps)})
    marks = [(1600, "keep 8 -> 10, upsample_sentences 4 -> 8"), (1000, "amp_cpu False -> True")]
    fig = labs.training_curves_figure(df, marks=marks)
    for axis in ("xaxis", "xaxis2", "xaxis3"):
        lo, hi = fig.layout[axis].range
        pad = 0.05 * (8000 - 25)  # a small margin at most: no empty half
        assert 25 - pad <= lo <= 25 and 8000 <= hi <= 8000 + pad, (axis, lo, hi)
    labels = {a.text: a for a in fig.layout.annotations if a.text in ("(1)", "(2)")}
    assert labels["(1)"].x == 1000 and labels["(2)"].x == 1600  # numbered in step order
    # labels are placed relative to the panel (not in data units, which would widen the axis) and each on its
    # own row: their vertical offsets differ by at least one line of type
    for a in labels.values():
        assert a.yref == "y domain" and a.xref == "x"
    assert abs(labels["(2)"].yshift - labels["(1)"].yshift) >= labs.FONT_SIZE


def test_label_smoothing_marks_are_labelled_apart_and_inside_the_plot():
    """Issue 14: "confident" (p = 0.99) and "hedged" (p = 0.9) overlapped and "confident" was clipped."""
    curve = lessons.label_smoothing_table(10, 0, 0.1, np.linspace(0.02, 0.999, 50))
    marks = lessons.label_smoothing_table(10, 0, 0.1, (0.99, 0.9)).assign(label=["confident", "hedged"])
    fig = labs.smoothing_loss_figure(curve, marks)
    notes = {a.text: a for a in fig.layout.annotations}
    conf, hedge = notes["confident"], notes["hedged"]
    assert conf.x == pytest.approx(0.99) and hedge.x == pytest.approx(0.9)
    # both labels point inwards from the right edge (text to the left of the point, never past the plot's
    # edge) and sit on opposite sides of the curve, so they cannot overlap
    assert conf.ax < 0 and hedge.ax < 0 and conf.xanchor == hedge.xanchor == "right"
    assert conf.ay * hedge.ay < 0
    assert fig.layout.xaxis.range[1] >= 1.0


def test_wavelength_reference_lines_are_labelled_at_their_height_on_the_log_axis():
    """Issue 14: the "2π" label sat near the 1M gridline (plotly reads annotation y on a log axis as log10)
    and "10000·2π" was missing."""
    wl = lessons.wavelengths(64)
    fig = labs.wavelength_figure(wl)
    labels = {a.text: a for a in fig.layout.annotations}
    assert set(labels) >= {"2π", "10000·2π"}
    assert labels["2π"].y == pytest.approx(math.log10(2 * math.pi))
    assert labels["10000·2π"].y == pytest.approx(math.log10(10000 * 2 * math.pi))
    lo, hi = fig.layout.yaxis.range  # log10 units: both lines and every wavelength are in view
    assert lo < math.log10(2 * math.pi) and hi > math.log10(10000 * 2 * math.pi)
    assert lo <= math.log10(wl.min()) and hi >= math.log10(wl.max())


def test_future_mass_rows_count_layers_and_heads_from_one():
    """Issue 14: the rows read "L0 H0" beside selectors that count from 1."""
    fm = np.zeros((2, 3, 4))
    fig = labs.future_mass_figure(fm, labs.token_labels(list("abcd")))
    rows = list(fig.data[0].y)
    assert rows[0] == "layer 1 · head 1" and rows[-1] == "layer 2 · head 3" and len(rows) == 6
    assert not any(r.startswith("L0") or "head 0" in r for r in rows)
