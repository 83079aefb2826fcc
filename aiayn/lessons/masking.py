"""Section 3.2.3 lab: masking in the decoder's self-attention. The padding mask of a batch, the look-ahead
(causal) mask and their combination; one decoder head step by step (Equation 1 with the mask); and what removing
the look-ahead mask does, run on the model itself through ``Transformer.decode(self_attn_mask=...)``: the
attention mass that leaks to future positions, the teacher-forced predictions, and greedy decoding.

Every function returns numpy arrays or small dataclasses and reads the model without changing it (call it on
a model in eval mode, as :class:`aiayn.Translator` keeps it, so that no dropout is applied).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from ..data.batching import pad_ids
from ..model.transformer import DecoderOutput, EncoderOutput, Transformer, causal_mask
from .inputs import LessonInputError, as_int


@dataclass
class PaddedBatch:
    """A small batch of tokenised sentences, padded with ``pad_id`` on the right.

    Attributes:
        ids: ``(B, T)`` int64. pieces: the pieces of each row (pads as ``<pad>``).
        key_mask: ``(B, T)`` bool, True on real tokens (the padding mask: keys a query may attend to).
        sentences: the input sentences.
    """

    ids: np.ndarray
    pieces: list[list[str]]
    key_mask: np.ndarray
    sentences: list[str]


def padded_batch(tokenizer, sentences: Sequence[str], pad_id: int, *, eos_id: int | None = None, max_len: int = 64) -> PaddedBatch:
    """Tokenise ``sentences`` (each ending with ``eos_id`` when given, at most ``max_len`` ids) and pad them
    to the longest with :func:`aiayn.data.batching.pad_ids`. Blank sentences are dropped.

    Raises:
        LessonInputError: no sentence, only blank ones, or more than 8 sentences.
    """
    sentences = [s.strip() for s in sentences if isinstance(s, str)]
    sentences = [s for s in sentences if s]
    if not sentences:
        raise LessonInputError("enter at least one non-empty sentence")
    if len(sentences) > 8:
        raise LessonInputError(f"at most 8 sentences, got {len(sentences)}")
    tail = [] if eos_id is None else [eos_id]
    ids = pad_ids([list(tokenizer.encode(s))[: max_len - len(tail)] + tail for s in sentences], pad_id)
    pieces = [[tokenizer.id_to_piece(int(t)) for t in row] for row in ids]
    return PaddedBatch(ids, pieces, ids != pad_id, sentences)


def causal_mask_np(t: int) -> np.ndarray:
    """Look-ahead mask ``(t, t)`` bool, True where query i may attend key j (``j <= i``), Section 3.2.3
    (:func:`aiayn.model.transformer.causal_mask` as numpy).

    Raises:
        LessonInputError: ``t`` not a whole number >= 1.
    """
    t = as_int(t, "length")
    if t < 1:
        raise LessonInputError(f"length must be at least 1, got {t}")
    return causal_mask(t).numpy()


def combined_mask(key_mask: np.ndarray) -> np.ndarray:
    """Decoder self-attention mask ``(B, T, T)`` bool from the padding mask ``key_mask`` ``(B, T)``: causal
    AND the key is not padding (the default of :meth:`aiayn.model.transformer.Transformer.decode`)."""
    km = np.asarray(key_mask, dtype=bool)
    return causal_mask_np(km.shape[1])[None, :, :] & km[:, None, :]


def decode_with_self_mask(model: Transformer, tgt: Tensor, enc: EncoderOutput, *, causal: bool = True, need_weights: bool = False) -> DecoderOutput:
    """:meth:`Transformer.decode` (no cache) with or without the look-ahead mask: ``causal=True`` is the
    model's decoder itself; ``causal=False`` passes an all-True ``self_attn_mask``, so that every position
    attends to every non-pad target position, future ones included (what Section 3.2.3 forbids).

    Args:
        tgt: ``(B, T)`` int64 decoder input (BOS-shifted). enc: :meth:`Transformer.encode` of the source.
        need_weights: return self/cross weights ``(L, B, H, T, T)`` / ``(L, B, H, T, S)`` and their scores.

    Returns:
        :class:`aiayn.model.transformer.DecoderOutput` (no cache).

    Raises:
        ValueError: malformed ``tgt`` (from :meth:`Transformer.decode`).
    """
    everything = None  # a malformed tgt gets no mask: decode raises its own error about tgt
    if not causal and isinstance(tgt, Tensor) and tgt.dim() == 2:
        everything = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device)
    return model.decode(tgt, enc, need_weights=need_weights, need_scores=need_weights, self_attn_mask=everything)


def _check_layer_head(model: Transformer, layer: Any, head: Any) -> tuple[int, int]:
    layer, head = as_int(layer, "layer"), as_int(head, "head")
    if not 0 <= layer < model.cfg.n_layers:
        raise LessonInputError(f"layer must be in 0..{model.cfg.n_layers - 1}, got {layer}")
    if not 0 <= head < model.cfg.n_heads:
        raise LessonInputError(f"head must be in 0..{model.cfg.n_heads - 1}, got {head}")
    return layer, head


@dataclass
class MaskSteps:
    """Decoder self-attention of one layer and head, step by step (Equation 1 with the Section 3.2.3 mask).

    Attributes (all ``(T, T)`` float64, query rows, key columns):
        raw: ``Q K^T``. scaled: ``Q K^T / sqrt(d_k)``. masked: ``scaled`` with ``-inf`` where the mask forbids.
        weights: ``softmax(masked)`` per row. mask: ``(T, T)`` bool, True = may attend.
        d_k: the per-head size. tokens: decoder input pieces (labels of queries and keys).
        max_weight_error: ``max |softmax(masked) - weights the model returned|``.
    """

    raw: np.ndarray
    scaled: np.ndarray
    masked: np.ndarray
    weights: np.ndarray
    mask: np.ndarray
    d_k: int
    tokens: list[str]
    max_weight_error: float


def decoder_mask_steps(model: Transformer, src_ids: Sequence[int], tgt_in_ids: Sequence[int], layer: int, head: int, tokens: list[str] | None = None) -> MaskSteps:
    """Teacher-forced pass (``model(..., return_scores=True)``) and the four stages of one decoder
    self-attention head: raw scores, scaled scores, masked scores, softmax weights.

    Raises:
        LessonInputError: bad layer / head or empty sequences.
    """
    layer, head = _check_layer_head(model, layer, head)
    if not len(src_ids) or not len(tgt_in_ids):
        raise LessonInputError("source and target must hold at least one token")
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=model.device)
    tgt = torch.tensor([list(tgt_in_ids)], dtype=torch.long, device=model.device)
    with torch.inference_mode():
        _, maps = model(src, tgt, return_scores=True)
    scaled = maps.decoder_scores[layer, 0, head].double().cpu().numpy()
    got = maps.decoder[layer, 0, head].double().cpu().numpy()
    d_k = model.cfg.d_k
    mask = combined_mask((tgt != model.cfg.pad_id).cpu().numpy())[0]
    masked = np.where(mask, scaled, -np.inf)
    weights = torch.softmax(torch.from_numpy(masked), dim=-1).numpy()
    return MaskSteps(scaled * math.sqrt(d_k), scaled, masked, weights, mask, d_k,
                     tokens or [str(i) for i in tgt_in_ids], float(np.abs(weights - got).max()))


@dataclass
class LeakLesson:
    """What removing the causal mask does on a teacher-forced pass.

    Attributes:
        future_mass: ``(L, H, T)`` attention mass each query puts on future keys (j > i) without the mask
            (exactly 0 with it).
        weights_unmasked: ``(L, H, T, T)`` self-attention weights without the mask.
        pred_masked / pred_unmasked: ``(T,)`` argmax next-token ids with / without the mask.
        p_next_masked / p_next_unmasked: ``(T,)`` probability of the true next token (``target[t]``).
        logit_diff: ``(T,)`` max |logits difference| per position.
    """

    future_mass: np.ndarray
    weights_unmasked: np.ndarray
    pred_masked: np.ndarray
    pred_unmasked: np.ndarray
    p_next_masked: np.ndarray
    p_next_unmasked: np.ndarray
    logit_diff: np.ndarray


def causal_leak(model: Transformer, src_ids: Sequence[int], tgt_in_ids: Sequence[int], target_ids: Sequence[int]) -> LeakLesson:
    """Run the decoder with and without the look-ahead mask on the same (source, decoder input) pair.

    ``target_ids`` ``(T,)`` are the tokens each position should predict (decoder input shifted left).
    """
    if len(target_ids) != len(tgt_in_ids):
        raise LessonInputError("target_ids must have the decoder input's length")
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=model.device)
    tgt = torch.tensor([list(tgt_in_ids)], dtype=torch.long, device=model.device)
    tg = torch.tensor(list(target_ids), dtype=torch.long)
    with torch.inference_mode():
        enc = model.encode(src)
        m = decode_with_self_mask(model, tgt, enc, causal=True)
        u = decode_with_self_mask(model, tgt, enc, causal=False, need_weights=True)
    lm, lu = m.logits[0].double().cpu(), u.logits[0].double().cpu()
    pm, pu = torch.softmax(lm, -1), torch.softmax(lu, -1)
    w = u.self_weights[:, 0].double().cpu().numpy()  # (L, H, T, T)
    t = w.shape[-1]
    future = np.triu(np.ones((t, t), dtype=bool), k=1)
    return LeakLesson(
        future_mass=(w * future).sum(-1),
        weights_unmasked=w,
        pred_masked=lm.argmax(-1).numpy(),
        pred_unmasked=lu.argmax(-1).numpy(),
        p_next_masked=pm.gather(1, tg[:, None])[:, 0].numpy(),
        p_next_unmasked=pu.gather(1, tg[:, None])[:, 0].numpy(),
        logit_diff=(lm - lu).abs().max(-1).values.numpy(),
    )


def greedy_with_self_mask(model: Transformer, src_ids: Sequence[int], *, causal: bool = True, max_len: int | None = None) -> list[int]:
    """Greedy decoding that recomputes the whole prefix each step with :func:`decode_with_self_mask`.

    With ``causal=True`` it equals :func:`aiayn.decoding.greedy_decode`; with ``causal=False`` earlier
    positions are recomputed while seeing later ones, so the translation changes. Like the library's decoder it
    never predicts pad or BOS. Returns the output ids
    (ending with EOS when finished). ``max_len`` defaults to source length + 50, capped by the model.
    """
    cfg = model.cfg
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=model.device)
    limit = min(max_len or (len(src_ids) + 50), cfg.max_len - 1)
    out: list[int] = []
    with torch.inference_mode():
        enc = model.encode(src)
        tokens = [cfg.decoder_start_id]
        for _ in range(limit):
            tgt = torch.tensor([tokens], dtype=torch.long, device=model.device)
            logits = decode_with_self_mask(model, tgt, enc, causal=causal).logits[0, -1].float().clone()
            # as aiayn.decoding: never predict pad or the start piece (a language or domain tag is no output id at all)
            logits[list(cfg.never_predicted)] = float("-inf")
            nxt = int(logits.argmax())
            out.append(nxt)
            if nxt == cfg.eos_id:
                break
            tokens.append(nxt)
    return out
