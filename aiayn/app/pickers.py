"""The attention pickers every page with maps shares: kind (Section 3.2.3), layer and head, each bound to the URL
(``?kind=cross&layer=3&head=5``), a URL value the widget cannot take reported in the page, never dropped silently.
Layers and heads count from 1 on screen and in the URL. Not a paper section: the app's controls.
"""
from __future__ import annotations

from typing import Any, Sequence

import streamlit as st

from ..model.config import KINDS  # the three attention kinds (Section 3.2.3), as they read in the URL
from .params import warn_bad_param

KIND_HELP = ("encoder = encoder self-attention; decoder = masked decoder self-attention; cross = encoder-decoder "
             "attention (Section 3.2.3)")


def kind_picker(where: Any = st, *, kinds: Sequence[str] = KINDS, default: str = "cross", key: str = "kind") -> str:
    """A segmented control of the attention kinds in ``where`` (a column, a container, or ``st``), bound to the URL
    parameter ``key``. Returns the picked kind (``default`` when the widget holds none)."""
    warn_bad_param(key, list(kinds), f"the kind must be {', '.join(kinds[:-1])} or {kinds[-1]}")
    kind = where.segmented_control("Attention", list(kinds), default=default, key=key, bind="query-params",
                                   required=True, help=KIND_HELP)
    return kind if kind in kinds else default


def layer_picker(where: Any, n_layers: int, *, key: str = "layer", label: str = "Layer") -> int:
    """A select box of the layers 1..``n_layers`` in ``where``, bound to the URL parameter ``key`` (default: the
    last layer). Returns the layer, counted from 1."""
    options = [str(i) for i in range(1, n_layers + 1)]
    warn_bad_param(key, options, f"the layer must be 1 to {n_layers}")
    layer = where.selectbox(label, options, index=n_layers - 1, key=key, bind="query-params")
    return int(layer) if layer in options else n_layers


def head_picker(where: Any, n_heads: int, *, first: str | None = "mean", key: str = "head",
                label: str = "Head") -> int | None:
    """A segmented control of the heads 1..``n_heads`` in ``where``, bound to the URL parameter ``key``; ``first``
    (``"mean"``, ``"all"``) is an extra first option and the default, read as None. Returns the head counted from 1,
    or None for ``first``."""
    options = ([first] if first else []) + [str(i) for i in range(1, n_heads + 1)]
    warn_bad_param(key, options, f"the head must be 1 to {n_heads}" + (f" or {first}" if first else ""))
    head = where.segmented_control(label, options, default=options[0], key=key, bind="query-params", required=True)
    head = head if head in options else options[0]
    return None if head == first else int(head)
