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
    entries = models_for(list_checkpoints(_root()), direction)
    names = [e.name for e in entries]
    if len(names) <= 1:
        return direction
    warn_bad_param(MODEL_KEY, names, f"the {direction} models here are {', '.join(names)}")
    # options are the bare names (a bound widget writes its option's text into the URL); the details are captions
    choice = st.radio("Model", names, index=0, captions=[caption(e) for e in entries], key=MODEL_KEY,
                      bind="query-params",
                      help="Every checkpoint of this direction in the checkpoints folder: its size and whether it "
                           "was trained here or imported (`aiayn import-marian`). Kept in the URL.")
    return choice if choice in names else direction


def caption(entry: CatalogEntry) -> str:
    """``"74.4M parameters · 148 MB · imported: Opus-MT"``: what the picker says under a model's name."""
    parts = [count_parameters(entry.num_parameters)] if entry.num_parameters else []
    parts.append(f"{entry.weights_bytes / 1e6:,.0f} MB" if entry.weights_bytes >= 1e6 else
                 f"{entry.weights_bytes / 1e3:,.0f} kB")
    parts.append(entry.origin)
    return " · ".join(parts)
