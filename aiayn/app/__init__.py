"""The Streamlit app's shared code (the only package besides ``app.py`` and ``pages/`` that imports
streamlit), split by job: :mod:`~aiayn.app.frame` (the frame ``app.py`` runs every page in: sidebar navigation,
shared settings, :class:`PageContext`), :mod:`~aiayn.app.params` (URL parameter checks), :mod:`~aiayn.app.state` (a
page's view in the URL: form seeding, links, Back / Forward), :mod:`~aiayn.app.pickers` (kind / layer / head), :mod:`~aiayn.app.models` (checkpoints, the translator
loaded once per process and its decode queue, the torch-free model card), :mod:`~aiayn.app.charts` (plotly charts, presenter
mode, PNG/SVG export) and :mod:`~aiayn.app.downloads` (CSV/JSON buttons). Not a paper section.

Pages use it as::

    from aiayn import app as ui
    ctx = ui.setup_page("Attention explorer", icon=":material/search:")   # first Streamlit call: config, sidebar, title
    ctx.direction, ctx.presenter, ctx.colorscale, ctx.template, ctx.translator, ctx.translator_or_none()
    ui.show_figure(fig, key=..., filename=...)   # st.plotly_chart with PNG/SVG export, presenter type
    left, right = ui.chart_columns(2)            # side by side; stacked in presenter mode
    ui.download_buttons(df, payload_json, stem)  # CSV + JSON download buttons
    ui.warn_bad_param("layer", ui.is_int, "...") # before a widget bound to a URL parameter
    ui.seed_form(PAGE, ("text",), ctx.direction, from_url=...)  # then the form, then ui.write_view(PAGE, {...})
    ui.checkpoint_info(direction)                # config + metadata from config.json, no model, no torch
    ui.warm_imports()                            # import torch in the background (a page not needing it)

The checkpoint directory is resolved at call time: ``$AIAYN_CHECKPOINTS/<direction>`` when the variable is
set, else the shipped ``checkpoints/<direction>``. Importing this package does not import torch.
"""
from __future__ import annotations

from .charts import EXPORT_FORMATS, chart_columns, plotly_config, prepare_figure, show_figure
from .downloads import download_buttons
from .frame import (
    COLORSCALE,
    PAGES,
    PRESENTER_COLORSCALE,
    PRESENTER_FONT_SIZE,
    PageContext,
    nav_query_params,
    page_exists,
    page_link,
    setup_page,
)
from .models import (
    DEFAULT_DIRECTION,
    DIRECTION_LABELS,
    DIRECTIONS,
    CheckpointInfo,
    ModelUnavailable,
    checkpoint_info,
    checkpoint_path,
    checkpoints_dir,
    decode_queue,
    load_translator,
    model_card,
    warm_imports,
)
from .inputs import checked_text, language_hint, optional_reference, sentence_or_stop
from .params import is_bool, is_float, is_int, number_param, warn_bad_param
from .results import explain_sentence, reranked_nbest
from .state import link_params, reference_follows, remember_form, seed_form, write_view

__all__ = [
    "COLORSCALE", "DEFAULT_DIRECTION", "DIRECTIONS", "DIRECTION_LABELS", "EXPORT_FORMATS", "PAGES",
    "PRESENTER_COLORSCALE", "PRESENTER_FONT_SIZE", "CheckpointInfo", "ModelUnavailable", "PageContext",
    "chart_columns", "checked_text", "checkpoint_info", "checkpoint_path", "checkpoints_dir", "decode_queue", "download_buttons", "explain_sentence", "reranked_nbest", "is_bool", "is_float",
    "is_int", "load_translator", "model_card", "nav_query_params", "optional_reference", "number_param", "page_exists", "page_link",
    "plotly_config", "prepare_figure", "sentence_or_stop", "language_hint", "language_hint", "setup_page", "show_figure", "warm_imports",
    "warn_bad_param", "link_params", "reference_follows", "remember_form", "seed_form", "write_view",
]

