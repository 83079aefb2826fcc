"""The sidebar's model picker: every checkpoint directory of the current direction under the checkpoints folder
(:mod:`aiayn.catalog`: name, size, origin "trained here" / "imported: Opus-MT"), the choice bound to the URL
(``?model=opus-mt-en-de``), the shipped model the default (left out of the URL). :func:`chosen_checkpoint` is what
the app serves for a direction. Not a paper section: the serving job. No torch.
"""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from ..catalog import CatalogEntry, count_parameters, list_checkpoints, models_for, resolve_checkpoint
from ..checkpoint_format import DEFAULT_CHECKPOINTS_DIR
from .params import warn_bad_param

#: the URL parameter and session key of the chosen model
MODEL_KEY = "model"


def _root() -> Path:
    env = os.environ.get("AIAYN_CHECKPOINTS")
    return Path(env) if env else DEFAULT_CHECKPOINTS_DIR


def chosen_checkpoint(direction: str) -> Path:
    """The checkpoint directory this session is served for ``direction``: the picker's choice when it names a
    checkpoint of that direction (:func:`aiayn.catalog.resolve_checkpoint`), else the shipped one. The choice is the
    session's state, or the URL's ``?model=`` before the picker has bound it (the frame announces a page's sentence
    to its model's queue before the sidebar is drawn)."""
    model = st.session_state.get(MODEL_KEY) or st.query_params.get(MODEL_KEY)
    return resolve_checkpoint(_root(), direction, model if isinstance(model, str) else None)


def model_picker(direction: str) -> str:
    """Draw the picker (a radio bound to ``?model=``, each model's size and origin as its caption) when ``direction`` has more than one checkpoint;
    an unknown ``?model=`` value is reported (:func:`aiayn.app.params.warn_bad_param`) and the default shown.

    Returns:
        the chosen checkpoint's directory name (``direction`` itself for the shipped model).
    """
    catalog = list_checkpoints(_root())
    entries = models_for(catalog, direction)
    names = [e.name for e in entries]
    other = _other_direction(catalog, direction, names)
    if other is not None:
        # a model chosen for the other direction (the direction was switched after it): say which model serves
        # now rather than "ignored", since switching back brings it back
        st.caption(f"`{other.name}` translates {other.direction}; {direction} is served by "
                   f"{'the model chosen below' if len(names) > 1 else 'its shipped model'}. Switch the direction "
                   f"back to {other.direction} to see `{other.name}` again.")
    if len(names) <= 1:
        return direction
    if other is None:
        warn_bad_param(MODEL_KEY, names, f"the {direction} models here are {', '.join(names)}")
    # options are the bare names (a bound widget writes its option's text into the URL); the details are captions
    choice = st.radio("Model", names, index=0, captions=[caption(e) for e in entries], key=MODEL_KEY,
                      bind="query-params",
                      help="Every checkpoint of this direction in the checkpoints folder: its size and whether it "
                           "was trained here or imported (`aiayn import-marian`). Kept in the URL.")
    return choice if choice in names else direction


def _other_direction(catalog: list[CatalogEntry], direction: str, names: list[str]) -> CatalogEntry | None:
    """The catalog entry the session's or the URL's ``?model=`` names when it is a model of another direction than
    ``direction`` (so not one of ``names``), else None."""
    model = st.session_state.get(MODEL_KEY) or st.query_params.get(MODEL_KEY)
    if not isinstance(model, str) or model in names:
        return None
    return next((e for e in catalog if e.name == model and e.direction and e.direction != direction), None)


def caption(entry: CatalogEntry) -> str:
    """``"74.4M parameters · 148 MB · imported: Opus-MT"``: what the picker says under a model's name."""
    parts = [count_parameters(entry.num_parameters)] if entry.num_parameters else []
    parts.append(f"{entry.weights_bytes / 1e6:,.0f} MB" if entry.weights_bytes >= 1e6 else
                 f"{entry.weights_bytes / 1e3:,.0f} kB")
    parts.append(entry.origin)
    return " · ".join(parts)
