"""Plotly charts in the app: the modebar export (PNG or SVG, rendered by plotly.js in the browser: offline,
no kaleido), presenter mode (the template of :mod:`aiayn.figures.theme`, charts 1.3 times taller, at least
480 px) and ``st.plotly_chart`` full width with Streamlit's chart theme. Not a paper section: the app's figure job.
"""
from __future__ import annotations

from typing import Any

import streamlit as st

from ..figures.theme import apply_presenter_theme

EXPORT_FORMATS = ("png", "svg")
#: the smallest height (pixels) of a chart in presenter mode
PRESENTER_MIN_HEIGHT = 480
#: presenter mode draws every chart this much taller than its own height (larger type needs the room)
PRESENTER_HEIGHT_SCALE = 1.3


def safe_filename(stem: str, default: str) -> str:
    """``stem`` with every character other than letters, digits, ``-``, ``_`` and ``.`` replaced by ``_``,
    at most 120 characters; ``default`` when nothing is left."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)[:120] or default


def plotly_config(filename: str = "figure", export_format: str | None = None) -> dict[str, Any]:
    """Plotly modebar config: the camera button downloads ``filename`` as PNG (2x) or SVG.

    ``export_format`` defaults to the session's chart download format (the sidebar's "Download charts as",
    ``?export=svg``); an unknown format falls back to PNG.
    """
    fmt = export_format or st.session_state.get("export", "png")
    fmt = fmt if fmt in EXPORT_FORMATS else "png"
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": fmt, "filename": safe_filename(filename, "figure"),
                                 "scale": 2 if fmt == "png" else 1},
        "modeBarButtonsToRemove": ["lasso2d", "select2d"],
    }


def presenter_height(height: int | float | None) -> int:
    """The height (pixels) of a chart of ``height`` pixels (None or 0: plotly's default) in presenter mode:
    :data:`PRESENTER_HEIGHT_SCALE` times taller, at least :data:`PRESENTER_MIN_HEIGHT`."""
    return max(PRESENTER_MIN_HEIGHT, round((height or 0) * PRESENTER_HEIGHT_SCALE))


def prepare_figure(fig, *, presenter: bool | None = None, height: int | None = None):
    """Apply presenter mode (large type; the chart :func:`presenter_height` tall: 1.3 times its own height, at
    least :data:`PRESENTER_MIN_HEIGHT` px) and ``height`` (pixels; an explicit height wins) to ``fig`` in place;
    returns it.

    ``presenter`` defaults to the session's presenter mode. :func:`show_figure` calls it unless told the
    figure is already prepared (a figure cached across reruns, prepared once before caching).
    """
    presenter = bool(st.session_state.get("presenter")) if presenter is None else presenter
    if presenter:
        apply_presenter_theme(fig)
        if height is None:
            height = presenter_height(fig.layout.height)
    if height is not None:
        fig.update_layout(height=height)
    return fig


def chart_columns(spec: int | list[float], *, presenter: bool | None = None, **kwargs: Any) -> list:
    """Containers for charts meant to sit side by side: ``st.columns(spec, **kwargs)``, or in presenter mode one
    full-width container per column, one under the other (side by side, large type leaves a heatmap too narrow
    to show its labels; a presenter scrolls instead). ``presenter`` defaults to the session's presenter mode."""
    presenter = bool(st.session_state.get("presenter")) if presenter is None else presenter
    n = spec if isinstance(spec, int) else len(spec)
    return [st.container() for _ in range(n)] if presenter else list(st.columns(spec, **kwargs))


def show_figure(fig, *, key: str, filename: str = "figure", height: int | None = None, prepared: bool = False) -> None:
    """Show a plotly figure full width with the export config; in presenter mode with large type.

    Args:
        fig: a ``plotly.graph_objects.Figure`` (its fonts are enlarged in presenter mode).
        key: unique Streamlit element key.
        filename: stem of the downloaded image (no extension).
        height: optional height in pixels.
        prepared: ``fig`` went through :func:`prepare_figure` already and must not be changed (e.g. a
            figure shared through ``st.cache_resource``); ``height`` is then ignored.
    """
    if not prepared:
        prepare_figure(fig, height=height)
    st.plotly_chart(fig, width="stretch", config=plotly_config(filename), key=key, theme="streamlit")
