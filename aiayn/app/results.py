"""Per-sentence results for the pages, computed once per checkpoint, sentence and options.

The job of this module is caching the model's work for the app: :func:`explain_sentence` runs
:func:`aiayn.analysis.explain` (beam search, Section 6.1, or a teacher-forced pass) for the translator of a
direction and keeps the :class:`~aiayn.translator.Translation` in ``st.cache_data``, keyed by (direction,
checkpoint path, checkpoint stamp, text, options), so a rerun, another page or another session showing the
same sentence does not run the model again, and a re-exported checkpoint is not served stale results.
Importing this module does not import torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from ..analysis import explain
from .models import checkpoint_path, checkpoint_stamp, load_translator

if TYPE_CHECKING:  # annotations only: aiayn.translator imports torch
    from ..translator import Translation


@st.cache_data(max_entries=128, show_spinner="Running the model…")
def _explained(direction: str, ckpt: str, stamp: str, text: str, reference: str | None,  # noqa: ARG001
               beam_size: int, length_penalty: float, max_len: int | None, n_best: int) -> "Translation":
    """:func:`aiayn.analysis.explain` for the translator of ``direction``; ``ckpt`` and ``stamp`` are part of
    the cache key only."""
    return explain(load_translator(direction), text, reference=reference, beam_size=beam_size,
                   length_penalty=length_penalty, max_len=max_len, n_best=n_best)


def explain_sentence(direction: str, text: str, *, reference: str | None = None, beam_size: int = 4,
                     length_penalty: float = 0.6, max_len: int | None = None, n_best: int = 4) -> "Translation":
    """:func:`aiayn.analysis.explain` of ``text`` with the model of ``direction``, cached per (checkpoint,
    stamp, sentence, options).

    Args:
        direction: ``"en-de"`` or ``"de-en"``.
        text: the cleaned source sentence (:func:`aiayn.analysis.check_text`).
        reference: a cleaned reference to teacher-force, or None for the model's own output.
        beam_size, length_penalty, max_len, n_best: beam search settings (Section 6.1: beam size 4,
            length penalty alpha 0.6, source length + 50).

    Returns:
        the :class:`~aiayn.translator.Translation` with ``attention`` (B=1, on the CPU), ``mode``,
        ``reference`` and ``next_pieces``. Each call gets its own copy (``st.cache_data`` unpickles it).

    Raises:
        ModelUnavailable: the checkpoint cannot be loaded.
        ValueError: empty text or reference, bad decoding options, unknown direction.
    """
    path = checkpoint_path(direction)
    return _explained(direction, str(path), checkpoint_stamp(path), text, reference, int(beam_size),
                      float(length_penalty), None if max_len is None else int(max_len), int(n_best))
