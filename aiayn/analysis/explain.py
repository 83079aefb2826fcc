"""One sentence explained: its translation, every attention map and the next-piece probabilities.

The job of this module is to run the model once for a page: free-running (beam search, Section 6.1, whose own
log-softmax at each step gives the next-piece probabilities, carried along the beam's back-pointers) or
teacher-forced (a reference fed to the decoder, as in training), and to return one
:class:`~aiayn.translator.Translation` holding everything the app shows: pieces (``src_tokens``, ``decoder_input_tokens``, ``output_tokens``), the
B=1 :class:`~aiayn.model.maps.AttentionMaps` on the CPU, and the top-k next pieces at every step
(:class:`~aiayn.translation.NextPieces`). Torch is imported inside the functions, so that
``import aiayn.analysis`` stays light.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..translation import NextPieces
from .stats import top_k

if TYPE_CHECKING:  # annotations only: aiayn.translator imports torch
    from ..translation import Translation
    from ..translator import Translator


def forced_probs_batch(tr: "Translator", src_ids: Sequence[Sequence[int]], output_ids: Sequence[Sequence[int]], *,
                       head_mask: Any = None) -> list[np.ndarray]:
    """Next-piece probabilities of several sentences when the decoder is fed the start piece + ``output_ids[i][:-1]``,
    in one padded teacher-forced pass (:func:`aiayn.calls.teacher_forced_ids`, with the Translator's precision): a
    list of ``(T_i, V)`` float32.

    Row t of item i is the model's distribution (softmax of the output layer, Section 3.4) for the piece at position
    t. Because the decoder is causally masked (Section 3.2.3), feeding the model's own output reproduces the
    distribution of every decoding step; ids are fed directly, so no re-tokenisation can change the pieces.
    ``src_ids`` end with ``</s>``; ``head_mask``: the ``(3, L, H)`` head ablation mask, or None. In a batch the
    probabilities differ from a lone pass by float32 rounding only (other matrix shapes, padded keys).

    Raises:
        ValueError: ``src_ids`` and ``output_ids`` differ in length, or an output is empty.
    """
    from .. import calls  # function-level: keeps ``import aiayn.analysis`` free of torch

    if any(len(o) == 0 for o in output_ids):
        raise ValueError("an output is empty: there is no position to predict")
    forced = calls.teacher_forced_ids(tr.model, src_ids, output_ids, head_mask=head_mask, amp=True)
    return calls.probabilities(forced, [len(o) for o in output_ids])


def explain(
    tr: "Translator",
    text: str,
    *,
    reference: str | None = None,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_len: int | None = None,
    n_best: int = 4,
    k: int = 10,
    head_mask: Any = None,
    prefix: str | Sequence[int] | None = None,
) -> "Translation":
    """Translate (or teacher-force) one sentence and return everything the app shows about it.

    Free-running (``reference`` None): beam search (Section 6.1; beam size ``beam_size``, length penalty
    alpha ``length_penalty``); the next-piece probabilities at every step are the search's own (each step's
    log-softmax, followed along the back-pointers: ``next_k`` of :meth:`~aiayn.translator.Translator.translate_batch`),
    what a teacher-forced pass over the output ids (:func:`forced_probs_batch`) gives up to float32 rounding.
    Teacher-forced (``reference`` given): :meth:`~aiayn.translator.Translator.force` feeds the reference to the
    decoder. ``head_mask``
    (``(3, L, H)``: encoder, decoder self, cross; 1 keeps a head, 0 removes its output, a float scales it;
    tensor, list, tuple or numpy array) ablates heads in every pass; the maps of a removed head are still
    computed (what it would attend to). ``prefix`` (free-running only): prefix-constrained decoding, the output
    starts with the prefix's pieces and beam search decodes the rest (:meth:`~aiayn.translator.Translator.translate`);
    the maps and next-piece probabilities are those of that forced output.

    Returns:
        a :class:`~aiayn.translator.Translation` with ``attention`` (B=1, float32, on the CPU), ``mode``
        (``"free-running"`` / ``"teacher-forced"``), ``reference``, and ``next_pieces``: the ``k`` most
        probable pieces ``(T, k)``, their probabilities ``(T, k)`` and the probability of the piece that
        came next ``(T,)``; when there are none (an empty output), ``next_pieces`` is None and
        ``next_pieces_note`` says why.

    Raises:
        ValueError: empty text or reference, bad beam settings, a bad ``head_mask``, a bad ``prefix`` (as
            :meth:`~aiayn.translator.Translator.translate`), a ``prefix`` together with a ``reference``.
    """
    if reference is None:
        return explain_batch(tr, [text], beam_size=beam_size, length_penalty=length_penalty, max_len=max_len,
                             n_best=n_best, k=k, head_mask=head_mask,
                             prefixes=None if prefix is None else [prefix])[0]
    if prefix is not None:
        raise ValueError("a forced prefix applies to the model's own output, not to a teacher-forced reference")
    t, p = tr.force(text, reference, head_mask=head_mask)
    return _explained(tr, t, p.numpy(), k)


def explain_batch(
    tr: "Translator",
    texts: Sequence[str],
    *,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_len: int | None = None,
    n_best: int = 4,
    k: int = 10,
    head_mask: Any = None,
    prefixes: Sequence[str | Sequence[int] | None] | None = None,
    encoded: Sequence[Any] | None = None,
) -> list["Translation"]:
    """:func:`explain` (free-running) of several sentences at once: one beam search over the batch
    (:meth:`~aiayn.translator.Translator.translate_batch`), which also gives each step's top-``k`` next pieces (no
    second, teacher-forced pass). Used to decode the sentences of several app sessions together
    (:class:`aiayn.serving.DecodeQueue`).

    ``prefixes``: one forced prefix per text, or None (:meth:`~aiayn.translator.Translator.translate_batch`).
    ``encoded``: one encoder output (or None) per text from :meth:`~aiayn.translator.Translator.encode_ahead`, or
    None (:meth:`~aiayn.translator.Translator.translate_batch`): a sentence encoded alone reads exactly a lone call's
    encoder maps, one encoded with others agrees with it to float32 rounding.
    A list of one sentence gives exactly :func:`explain`. In a batch, sources are padded, so maps, scores and
    probabilities differ from a lone call by float32 rounding (measured: at most 2e-6 on the maps, 5e-7 on the
    scores; ``tests/test_serving.py`` holds them to 1e-5 and the texts and n-best lists to equality);
    ``elapsed_ms`` is the whole batch's wall time.

    Returns:
        one :class:`~aiayn.translator.Translation` per text, in order, as :func:`explain` returns it.

    Raises:
        ValueError: an empty text (names its index), bad beam settings, a bad ``head_mask``.
    """
    ts = tr.translate_batch(list(texts), beam_size=beam_size, length_penalty=length_penalty, max_len=max_len,
                            n_best=n_best, return_attention=True, head_mask=head_mask, prefixes=prefixes,
                            next_k=max(1, int(k)), encoded=encoded)
    return [replace(t, attention=t.attention.cpu() if t.attention is not None else None,
                    next_pieces=t.next_pieces if t.output_ids else None,
                    next_pieces_note=None if t.output_ids else "the output is empty") for t in ts]


def _explained(tr: "Translator", t: "Translation", probs: np.ndarray | None, k: int) -> "Translation":
    """``t`` with its attention on the CPU and its top-``k`` next pieces from ``probs`` ``(T, V)`` (None: an empty
    output, said in ``next_pieces_note``)."""

    next_pieces, note = None, None
    if probs is None:
        note = "the output is empty"
    else:
        T = len(t.output_ids)
        ids, vals = top_k(probs, k)
        next_pieces = NextPieces(
            pieces=[tr.pieces(row) for row in ids],
            probs=vals.astype(np.float32),
            chosen_prob=probs[np.arange(T), np.asarray(t.output_ids)].astype(np.float32),
        )
    attention = t.attention.cpu() if t.attention is not None else None
    return replace(t, attention=attention, next_pieces=next_pieces, next_pieces_note=note)
