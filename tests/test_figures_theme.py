"""Presenter mode as one plotly template (aiayn.figures.theme), written onto every text element."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from aiayn import lessons
from aiayn.figures import labs
from aiayn.figures.theme import FONT_SIZE, PRESENTER_FONT_SIZE, TEMPLATE_NAME, apply_presenter_theme, presenter_template


def _figure() -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("left", "right"))
    fig.add_trace(go.Heatmap(z=np.eye(3), colorbar=dict(title="w")), 1, 1)
    fig.add_trace(go.Scatter(x=[1, 2], y=[3, 4], name="line"), 1, 2)
    fig.update_layout(title="t", font=dict(family="Arial", color="red"), template="plotly_dark")
    return fig


def test_template_is_registered_and_sized_from_the_base_size():
    tpl = pio.templates[TEMPLATE_NAME]
    assert tpl.layout.font.size == PRESENTER_FONT_SIZE > FONT_SIZE
    assert tpl.layout.title.font.size == PRESENTER_FONT_SIZE + 4
    assert tpl.layout.xaxis.tickfont.size == PRESENTER_FONT_SIZE - 2
    assert presenter_template(30).layout.yaxis.title.font.size == 30
    # combinable with the light/dark templates
    fig = go.Figure(layout=dict(template=f"plotly_white+{TEMPLATE_NAME}"))
    assert fig.layout.template.layout.font.size == PRESENTER_FONT_SIZE


def test_apply_writes_every_element_and_keeps_other_values():
    fig = apply_presenter_theme(_figure())
    size = PRESENTER_FONT_SIZE
    lay = fig.layout
    assert (lay.font.size, lay.font.family, lay.font.color) == (size, "Arial", "red")
    assert lay.title.font.size == size + 4 and lay.title.text == "t"
    assert lay.legend.font.size == size and lay.hoverlabel.font.size == size
    for axis in (lay.xaxis, lay.xaxis2, lay.yaxis, lay.yaxis2):
        assert axis.tickfont.size == size - 2 and axis.title.font.size == size
    assert [a.font.size for a in lay.annotations] == [size, size]  # subplot titles
    assert fig.data[0].colorbar.tickfont.size == size - 2 and fig.data[0].colorbar.title.font.size == size
    assert fig.data[0].colorbar.title.text == "w"
    assert lay.coloraxis.colorbar.tickfont.size == size - 2
    assert lay.template.layout.paper_bgcolor == pio.templates["plotly_dark"].layout.paper_bgcolor
    before = fig.to_plotly_json()
    apply_presenter_theme(fig)
    assert fig.to_plotly_json() == before  # idempotent


def test_labs_presenter_figures_use_the_template():
    df = lessons.pe_curves(10, 8, [0])
    small = labs.pe_curves_figure(df, presenter=False)
    assert small.layout.font.size == FONT_SIZE and small.layout.title.font.size == FONT_SIZE + 3
    assert small.layout.xaxis.tickfont.size is None
    big = labs.pe_curves_figure(df, presenter=True)
    expected = apply_presenter_theme(labs.pe_curves_figure(df, presenter=False))
    assert big.to_plotly_json() == expected.to_plotly_json()
    assert big.layout.xaxis.tickfont.size == PRESENTER_FONT_SIZE - 2


def test_use_template_gives_the_same_figure_as_setting_it_by_name(monkeypatch):
    """use_template skips plotly's slow by-name validation for the default template (issue 14: a class's charts
    on one server) without changing the figure: same JSON as update_layout(template=name); other templates are set."""
    import plotly.graph_objects as go
    import plotly.io as pio

    from aiayn.figures.theme import use_template

    def made():
        return go.Figure(go.Heatmap(z=[[0.1, 0.9], [0.5, 0.5]]))

    monkeypatch.setattr(pio.templates, "default", "plotly_white")
    explicit = made().update_layout(template="plotly_white")
    assert use_template(made(), "plotly_white").to_json() == explicit.to_json()
    dark = use_template(made(), "plotly_dark")
    assert dark.to_json() == made().update_layout(template="plotly_dark").to_json() != explicit.to_json()
    assert use_template(made(), None).to_json() == made().to_json()
