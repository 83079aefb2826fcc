"""Per-sentence results for the pages, computed once per checkpoint, sentence and options.

The job of this module is caching the model's work for the app: :func:`explain_sentence` runs
:func:`aiayn.analysis.explain` (beam search, Section 6.1, or a teacher-forced pass) for the translator of a
direction, through its :class:`~aiayn.serving.DecodeQueue` (one job at a time; sentences of several sessions
waiting at the same moment are decoded together), and keeps the :class:`~aiayn.translator.Translation` in ``st.cache_data``, keyed by (direction,
checkpoint path, checkpoint stamp, text, options, head mask), so a rerun, another page or another session
showing the same sentence does not run the model again, and a re-exported checkpoint is not served stale results.
A head mask (head ablation) enters the key as a tuple of tuples of floats; an all-ones mask is keyed as None
(the results are bit-identical).
Importing this module does not import torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import streamlit as st

from .models import checkpoint_path, checkpoint_stamp, decode_queue, withdraw_sentence

if TYPE_CHECKING:  # annotations only: aiayn.translator imports torch
    from ..translator import Translation


@st.cache_data(max_entries=128, show_spinner="Running the model…")
def _explained(direction: str, ckpt: str, stamp: str, text: str, reference: str | None,  # noqa: ARG001
               beam_size: int, length_penalty: float, max_len: int | None, n_best: int,
               head_mask: tuple | None = None, prefix: str | None = None) -> "Translation":
    """:func:`aiayn.analysis.explain` for the translator of ``direction``, in the turn of its
    :func:`~aiayn.app.models.decode_queue` (sessions' sentences waiting at the same moment are decoded together);
    ``ckpt`` and ``stamp`` are part of the cache key only; ``head_mask`` is the hashable :func:`head_mask_key`;
    ``prefix``: the cleaned forced start of the output (:func:`aiayn.calls.encode_prefix`), or None."""
    return decode_queue(direction).explain(
        text, reference=reference, beam_size=beam_size, length_penalty=length_penalty, max_len=max_len,
        n_best=n_best, head_mask=None if head_mask is None else np.asarray(head_mask, dtype=np.float32),
        prefix=prefix)


def head_mask_key(head_mask: Any) -> tuple | None:
    """A head mask ``(3, L, H)`` (tensor, numpy array, nested lists / tuples) as a hashable tuple of tuples of
    tuples of floats for the cache key; None, or a mask of all ones (bit-identical results), gives None.

    Raises:
        ValueError: the mask is not a 3-dimensional array of finite numbers / booleans.
    """
    if head_mask is None:
        return None
    if hasattr(head_mask, "detach"):  # a torch tensor (not imported here: this module stays torch-free)
        head_mask = head_mask.detach().cpu().float().numpy()
    try:
        arr = np.asarray(head_mask, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"head_mask must be numbers or booleans of shape (3, n_layers, n_heads): {exc}") from None
    if arr.ndim != 3 or arr.shape[0] != 3:
        raise ValueError(f"head_mask must have shape (3, n_layers, n_heads), got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("head_mask holds NaN or infinite values")
    if (arr == 1.0).all():
        return None
    return tuple(tuple(tuple(float(v) for v in row) for row in kind) for kind in arr)


def explain_sentence(direction: str, text: str, *, reference: str | None = None, beam_size: int = 4,
                     length_penalty: float = 0.6, max_len: int | None = None, n_best: int = 4,
                     head_mask: Any = None, prefix: str | None = None) -> "Translation":
    """:func:`aiayn.analysis.explain` of ``text`` with the model of ``direction``, cached per (checkpoint,
    stamp, sentence, options, forced prefix).

    Args:
        direction: ``"en-de"`` or ``"de-en"``.
        text: the cleaned source sentence (:func:`aiayn.analysis.check_text`).
        reference: a cleaned reference to teacher-force, or None for the model's own output.
        beam_size, length_penalty, max_len, n_best: beam search settings (Section 6.1: beam size 4,
            length penalty alpha 0.6, source length + 50).
        head_mask: head ablation mask ``(3, n_layers, n_heads)`` (encoder, decoder self, cross; 1 keeps a
            head, 0 removes its output, a float scales it), tensor / numpy array / nested lists, or None.
        prefix: prefix-constrained decoding (free-running only): the output starts with this text's pieces and
            beam search decodes the rest; the maps are those of that forced output. None: the model's own output.

    Returns:
        the :class:`~aiayn.translator.Translation` with ``attention`` (B=1, on the CPU), ``mode``,
        ``reference``, ``next_pieces`` and ``batch_size`` (> 1: decoded together with other sessions' sentences;
        equal to a lone translation up to float32 rounding, see :mod:`aiayn.serving`). Each call gets its own
        copy (``st.cache_data`` unpickles it).

    Raises:
        ModelUnavailable: the checkpoint cannot be loaded.
        ValueError: empty text or reference, bad decoding options, unknown direction, a bad ``head_mask``, a
            prefix the model cannot be forced to write (too long, or with a reference).
    """
    path = checkpoint_path(direction)
    try:
        return _explained(direction, str(path), checkpoint_stamp(path), text, reference, int(beam_size),
                          float(length_penalty), None if max_len is None else int(max_len), int(n_best),
                          head_mask_key(head_mask), prefix)
    finally:  # a cached sentence never reached the queue: the run's announcement (if any) is no longer on its way
        withdraw_sentence()


@st.cache_data(max_entries=128, show_spinner="Weighing the n-best list with the reverse model…")
def _reranked(reverse_dir: str, ckpt: str, stamp: str, source: str, nbest: tuple,  # noqa: ARG001
              weight: float) -> list[dict[str, Any]]:
    from ..reranking import rerank

    queue = decode_queue(reverse_dir)
    return [r.to_dict() for r in queue.run(rerank, source, list(nbest), queue.translator.for_direction(reverse_dir), weight)]


def reranked_nbest(direction: str, source: str, nbest: list[tuple[str, float]], weight: float) -> list[dict[str, Any]]:
    """The n-best list of ``source`` (translated in ``direction``) reranked by the model this session is served for
    the opposite direction (:func:`aiayn.reranking.rerank`: forward score + ``weight`` x log P(source | output) per
    source piece), run in that model's :func:`~aiayn.app.models.decode_queue` turn and cached per (reverse checkpoint,
    stamp, source, n-best list, weight).

    Returns:
        :meth:`aiayn.reranking.Reranked.to_dict` of each hypothesis, best first.

    Raises:
        ModelUnavailable: the reverse checkpoint cannot be loaded.
        ValueError: a bad weight, an empty n-best list or source.
    """
    from ..reranking import reverse_direction

    back = reverse_direction(direction)
    path = checkpoint_path(back)
    return _reranked(back, str(path), checkpoint_stamp(path), source, tuple((str(t), float(s)) for t, s in nbest),
                     float(weight))

