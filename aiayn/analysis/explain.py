"""One sentence explained: its translation, every attention map and the next-piece probabilities.

The job of this module is to run the model once for a page: free-running (beam search, Section 6.1, then
a teacher-forced pass over the model's own output for the next-piece probabilities) or teacher-forced (a
reference fed to the decoder, as in training), and to return one :class:`~aiayn.translator.Translation`
holding everything the app shows: pieces (``src_tokens``, ``decoder_input_tokens``, ``output_tokens``), the
B=1 :class:`~aiayn.model.maps.AttentionMaps` on the CPU, and the top-k next pieces at every step
(:class:`~aiayn.translator.NextPieces`). Torch is imported inside the functions, so that
``import aiayn.analysis`` stays light.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .stats import top_k

if TYPE_CHECKING:  # annotations only: aiayn.translator imports torch
    from ..translator import Translation, Translator


def forced_probs(tr: "Translator", src_ids: Sequence[int], output_ids: Sequence[int], *,
                 head_mask: Any = None) -> np.ndarray:
    """Next-piece probabilities ``(T, V)`` float32 when the decoder is fed ``<s>`` + ``output_ids[:-1]``.

    Row i is the model's distribution (softmax of the output layer, Section 3.4) for the piece at position
    i. Because the decoder is causally masked (Section 3.2.3), feeding the model's own output reproduces the
    distribution of every decoding step; ids are fed directly, so no re-tokenisation can change the pieces.
    ``src_ids`` (S,) end with ``</s>``; ``output_ids`` (T,) are the predicted ids. ``head_mask``: the
    ``(3, L, H)`` head ablation mask of :meth:`~aiayn.translator.Translator.translate`, or None.
    """
    import torch  # function-level: keeps ``import aiayn.analysis`` free of torch

    src = torch.tensor([list(src_ids)], dtype=torch.long, device=tr.device)
    decoder_input_ids = torch.tensor([[tr.cfg.decoder_start_id] + list(output_ids)[:-1]], dtype=torch.long, device=tr.device)
    with torch.inference_mode():
        logits = tr.model(src, decoder_input_ids, head_mask=head_mask)
    return torch.softmax(logits[0].float(), dim=-1).cpu().numpy()


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
) -> "Translation":
    """Translate (or teacher-force) one sentence and return everything the app shows about it.

    Free-running (``reference`` None): beam search (Section 6.1; beam size ``beam_size``, length penalty
    alpha ``length_penalty``), then a teacher-forced pass over the model's own output ids
    (:func:`forced_probs`) for the next-piece probabilities at every step. Teacher-forced (``reference``
    given): :meth:`~aiayn.translator.Translator.force` feeds the reference to the decoder. ``head_mask``
    (``(3, L, H)``: encoder, decoder self, cross; 1 keeps a head, 0 removes its output, a float scales it;
    tensor, list, tuple or numpy array) ablates heads in every pass; the maps of a removed head are still
    computed (what it would attend to).

    Returns:
        a :class:`~aiayn.translator.Translation` with ``attention`` (B=1, float32, on the CPU), ``mode``
        (``"free-running"`` / ``"teacher-forced"``), ``reference``, and ``next_pieces``: the ``k`` most
        probable pieces ``(T, k)``, their probabilities ``(T, k)`` and the probability of the piece that
        came next ``(T,)``; when there are none (an empty output), ``next_pieces`` is None and
        ``next_pieces_note`` says why.

    Raises:
        ValueError: empty text or reference, bad beam settings, a bad ``head_mask``.
    """
    from ..translator import NextPieces  # function-level: aiayn.translator imports torch

    note = None
    if reference is None:
        t = tr.translate(text, beam_size=beam_size, length_penalty=length_penalty, max_len=max_len,
                         n_best=n_best, return_attention=True, head_mask=head_mask)
        probs = forced_probs(tr, t.src_ids, t.output_ids, head_mask=head_mask) if t.output_ids else None
        if probs is None:
            note = "the output is empty"
    else:
        t, p = tr.force(text, reference, head_mask=head_mask)
        probs = p.numpy()
    next_pieces = None
    if probs is not None:
        T = len(t.output_ids)
        ids, vals = top_k(probs, k)
        next_pieces = NextPieces(
            pieces=[tr.pieces(row) for row in ids],
            probs=vals.astype(np.float32),
            chosen_prob=probs[np.arange(T), np.asarray(t.output_ids)].astype(np.float32),
        )
    attention = t.attention.cpu() if t.attention is not None else None
    return replace(t, attention=attention, next_pieces=next_pieces, next_pieces_note=note)
