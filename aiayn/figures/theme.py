"""Presenter mode for plotly figures: the one definition of the large type used on a projector, as a plotly
template (pure plotly, no Streamlit). Not a paper section: this is the figures' styling job.

The template is registered as ``plotly.io.templates["aiayn_presenter"]`` and can be combined with another
one (``template="plotly_white+aiayn_presenter"``). In the app, though, Streamlit's chart theme replaces a
figure's template and sets its own fonts on titles, axes and colour bars, so a template alone would not
show: :func:`apply_presenter_theme` writes the template's values onto every text element of a figure
explicitly, where the chart theme keeps them. Both :mod:`aiayn.figures.labs` (``presenter=True``) and the
app's :func:`aiayn.app.charts.prepare_figure` use it.
"""
from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

#: base font size (points) of the figures; in presenter mode
FONT_SIZE = 13
PRESENTER_FONT_SIZE = 20
#: name of the registered presenter template
TEMPLATE_NAME = "aiayn_presenter"


def presenter_template(size: int = PRESENTER_FONT_SIZE) -> go.layout.Template:
    """The presenter-mode template for base font size ``size`` (points).

    Sizes: text ``size``; figure title ``size + 4``; axis titles, legend, hover labels and annotations
    ``size``; tick labels ``size - 2``; colour bars (heatmap traces and the shared ``coloraxis``) tick
    labels ``size - 2``, titles ``size`` (heatmap only: the shared colour axis keeps its title size).
    Only fonts: colours, margins and the light/dark background come from the figure's own template.
    """
    axis = dict(tickfont=dict(size=size - 2), title=dict(font=dict(size=size)))
    return go.layout.Template(
        layout=dict(
            font=dict(size=size),
            title=dict(font=dict(size=size + 4)),
            hoverlabel=dict(font=dict(size=size)),
            legend=dict(font=dict(size=size)),
            xaxis=axis,
            yaxis=axis,
            annotationdefaults=dict(font=dict(size=size)),
            coloraxis=dict(colorbar=dict(tickfont=dict(size=size - 2))),
        ),
        data=dict(heatmap=[go.Heatmap(colorbar=dict(tickfont=dict(size=size - 2), title=dict(font=dict(size=size))))]),
    )


pio.templates[TEMPLATE_NAME] = presenter_template()


def use_template(fig: go.Figure, template: str | None) -> go.Figure:
    """Apply the plotly template ``template`` (a registered name such as ``"plotly_white"``, names joined by
    ``+``, or None for none) to ``fig``'s layout, in place; returns ``fig``.

    A template that is already plotly's default (``plotly.io.templates.default``) is not set again: plotly put
    it on the figure when the figure was made, without validating it. Set by name, plotly validates a copy of
    the whole template, several times the cost of the default path (docs/benchmarks.md); the JSON is the
    same. The app makes its light theme's template the default (:mod:`aiayn.app.frame`), so a server drawing a
    class's charts skips that cost.
    """
    if template and template != pio.templates.default:
        fig.update_layout(template=template)
    return fig


def apply_presenter_theme(fig: go.Figure, size: int = PRESENTER_FONT_SIZE) -> go.Figure:
    """Write the presenter template (:func:`presenter_template`) onto every text element of ``fig``, in place.

    Set explicitly on the layout font, the title, hover labels, legend, every x and y axis (subplots
    included), every annotation, the shared colour axis and the colour bar of every trace that has one, so
    that a chart theme replacing ``layout.template`` (Streamlit's) keeps the large type. Numbers written in
    heatmap cells (``texttemplate``) grow to at least ``size - 6``. Idempotent.

    Returns:
        ``fig``.
    """
    template = pio.templates[TEMPLATE_NAME] if size == PRESENTER_FONT_SIZE else presenter_template(size)
    # plain dicts: update() merges a dict into the figure's values, whereas an object would replace them
    layout = template.layout.to_plotly_json()
    fig.update_layout(font=layout["font"], title_font=layout["title"]["font"], hoverlabel_font=layout["hoverlabel"]["font"],
                      legend_font=layout["legend"]["font"], coloraxis_colorbar=layout["coloraxis"]["colorbar"])
    fig.update_xaxes(layout["xaxis"])
    fig.update_yaxes(layout["yaxis"])
    fig.update_annotations(layout["annotationdefaults"])
    colorbar = template.data.heatmap[0].colorbar.to_plotly_json()
    cell = size - 6  # numbers written in heatmap cells: larger, but still inside a cell
    for trace in fig.data:
        if "colorbar" in trace:
            trace.colorbar.update(colorbar)
        if trace.type == "heatmap" and trace.texttemplate and (trace.textfont.size or 0) < cell:
            trace.textfont.size = cell
    return fig
