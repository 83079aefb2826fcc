"""Pure computations behind the teaching labs: positional encoding (Section 3.5), masking (Section 3.2.3),
scaled dot-product attention (Section 3.2.1, Equation 1), parameter counts (Table 3), the learning-rate
schedule (Section 5.3, Equation 3) and label smoothing (Section 5.4).

Nothing here imports Streamlit; every function returns numpy arrays, pandas frames or small dataclasses,
and validates its input with a :class:`LessonInputError` (a ``ValueError``) whose message a page can show
as is. Models are only read: no function changes a module, its parameters or its buffers.

Shapes: B batch, S source length, T target length, L layers, H heads, D d_model, V vocabulary.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..model.attention import scaled_dot_product_attention
from ..model.config import TransformerConfig
from ..model.transformer import DecoderOutput, EncoderOutput, Transformer, causal_mask
from ..model.positional import frequencies, offset_matrix, sinusoidal_encoding, similarity_matrix
from ..training import noam_lr

#: bounds that keep every lab fast (a page never builds more than these).
MAX_PE_LENGTH = 2048
MAX_PE_D_MODEL = 2048
MAX_D_K = 4096
MAX_SAMPLES = 200_000


class LessonInputError(ValueError):
    """Bad input to a lab (the message is written for the page user)."""


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)) or (
        isinstance(value, float) and not value.is_integer()
    ):
        raise LessonInputError(f"{name} must be a whole number, got {value!r}")
    return int(value)


# ================================================================================================
# Positional encoding (Section 3.5)
# ================================================================================================
def check_pe_size(length: Any, d_model: Any) -> tuple[int, int]:
    """Validate a PE table request: ``1 <= length <= MAX_PE_LENGTH``, ``d_model`` even in ``[2, MAX_PE_D_MODEL]``.

    Returns:
        ``(length, d_model)`` as ints.
    Raises:
        LessonInputError: with a message naming the bad value.
    """
    length, d_model = _int(length, "length"), _int(d_model, "d_model")
    if not 1 <= length <= MAX_PE_LENGTH:
        raise LessonInputError(f"length must be between 1 and {MAX_PE_LENGTH} positions, got {length}")
    if d_model < 2 or d_model > MAX_PE_D_MODEL:
        raise LessonInputError(f"d_model must be between 2 and {MAX_PE_D_MODEL}, got {d_model}")
    if d_model % 2:
        raise LessonInputError(
            f"d_model must be even (dimensions come in sin/cos pairs, Section 3.5), got {d_model}"
        )
    return length, d_model


def pe_matrix(length: int, d_model: int, layout: str = "interleaved") -> np.ndarray:
    """The sinusoidal table ``(length, d_model)`` float64 (Section 3.5), after :func:`check_pe_size`.

    Raises:
        LessonInputError: bad size or layout.
    """
    length, d_model = check_pe_size(length, d_model)
    try:
        return sinusoidal_encoding(length, d_model, layout=layout, dtype=torch.float64).numpy()
    except ValueError as exc:
        raise LessonInputError(str(exc)) from None


def wavelengths(d_model: int) -> np.ndarray:
    """Wavelength ``2 pi * 10000^(2i / d_model)`` of each sin/cos pair i, ``(d_model / 2,)`` in positions.

    A geometric progression from ``2 pi`` (i = 0) towards ``10000 * 2 pi`` (Section 3.5).
    """
    _, d_model = check_pe_size(1, d_model)
    return (2.0 * math.pi / frequencies(d_model)).numpy()


def pe_curves(length: int, d_model: int, dims: Sequence[int]) -> pd.DataFrame:
    """Long frame (position, dimension, kind "sin"/"cos", pair i, wavelength, value) for chosen dimensions.

    Raises:
        LessonInputError: a dimension outside ``[0, d_model)`` or no dimension chosen.
    """
    length, d_model = check_pe_size(length, d_model)
    dims = [_int(d, "dimension") for d in dims]
    if not dims:
        raise LessonInputError("choose at least one dimension to plot")
    bad = [d for d in dims if not 0 <= d < d_model]
    if bad:
        raise LessonInputError(f"dimensions must be in 0..{d_model - 1}, got {bad}")
    pe = pe_matrix(length, d_model)
    wl = wavelengths(d_model)
    frames = []
    for d in dict.fromkeys(dims):
        frames.append(pd.DataFrame({
            "position": np.arange(length),
            "dimension": d,
            "kind": "sin" if d % 2 == 0 else "cos",
            "pair_i": d // 2,
            "wavelength": wl[d // 2],
            "value": pe[:, d],
        }))
    return pd.concat(frames, ignore_index=True)


@dataclass
class SimilarityLesson:
    """``PE(p) . PE(q)`` for all position pairs and its offset profile.

    Attributes:
        matrix: ``(P, P)`` float64 dot products.
        offsets: ``(2P-1,)`` int offsets ``k = q - p`` from ``-(P-1)`` to ``P-1``.
        profile: ``(2P-1,)`` ``sum_i cos(omega_i k)``, the value the formula predicts for each offset.
        max_deviation: ``max |matrix[p, q] - profile(q - p)|``: ~1e-12 shows it depends on the offset only.
    """

    matrix: np.ndarray
    offsets: np.ndarray
    profile: np.ndarray
    max_deviation: float


def pe_similarity(length: int, d_model: int) -> SimilarityLesson:
    """Similarity of positions under the sinusoidal encoding (Section 3.5): it depends on ``q - p`` only,
    since ``sin a sin b + cos a cos b = cos(a - b)``."""
    pe = torch.from_numpy(pe_matrix(length, d_model))
    sim = similarity_matrix(pe).numpy()
    offsets = np.arange(-(length - 1), length)
    omega = frequencies(d_model).numpy()
    profile = np.cos(np.outer(offsets, omega)).sum(axis=1)
    p, q = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    dev = float(np.abs(sim - profile[(q - p) + length - 1]).max())
    return SimilarityLesson(sim, offsets, profile, dev)


@dataclass
class OffsetLesson:
    """The linear map ``M_k`` with ``PE(pos + k) = M_k PE(pos)`` checked on a table.

    Attributes:
        k: the offset (positions).
        matrix: ``(D, D)`` float64 ``M_k`` (block diagonal 2x2 rotations).
        predicted: ``(P - |k|, D)`` rows ``M_k PE(pos)``; actual: ``PE(pos + k)`` for the same pos.
        positions: the ``pos`` of each row.
        max_error: ``max |predicted - actual|``.
    """

    k: int
    matrix: np.ndarray
    predicted: np.ndarray
    actual: np.ndarray
    positions: np.ndarray
    max_error: float


def pe_offset_map(k: Any, length: int, d_model: int) -> OffsetLesson:
    """Compute ``M_k`` (:func:`aiayn.model.positional.offset_matrix`) and verify it on every ``pos`` with
    ``0 <= pos, pos + k < length``.

    Raises:
        LessonInputError: ``|k| >= length`` (no position pair to check) or bad sizes.
    """
    length, d_model = check_pe_size(length, d_model)
    k = _int(k, "offset k")
    if abs(k) >= length:
        raise LessonInputError(f"offset k must satisfy |k| < length = {length}, got {k}")
    pe = pe_matrix(length, d_model)
    m = offset_matrix(k, d_model).numpy()
    pos = np.arange(max(0, -k), min(length, length - k))
    predicted = pe[pos] @ m.T
    actual = pe[pos + k]
    return OffsetLesson(k, m, predicted, actual, pos, float(np.abs(predicted - actual).max()))


def embedding_norms(model: Transformer, length: int | None = None) -> pd.DataFrame:
    """Norms of what Section 3.5 adds together: ``||sqrt(d_model) * E[token]||`` for every vocabulary row
    of the (target) embedding, and ``||PE(pos)||`` for the first ``length`` positions (default max_len).

    Returns:
        long frame with columns ``what`` ("scaled token embedding" / "positional encoding"), ``index``
        (token id or position) and ``norm`` (L2). For the sinusoids ``||PE(pos)|| = sqrt(d_model / 2)``.
    """
    cfg = model.cfg
    table = model.embedding if cfg.share_embeddings else model.tgt_embedding
    with torch.no_grad():
        emb = table.weight.detach().double() * math.sqrt(cfg.d_model)
        e_norm = emb.norm(dim=1).cpu().numpy()
        n = min(length or cfg.max_len, cfg.max_len)
        if cfg.positional == "sinusoidal":
            pe = sinusoidal_encoding(n, cfg.d_model, dtype=torch.float64)
        else:
            pe = model.tgt_positions.weight.detach().double()[:n].cpu()
        p_norm = pe.norm(dim=1).numpy()
    return pd.concat([
        pd.DataFrame({"what": "scaled token embedding", "index": np.arange(len(e_norm)), "norm": e_norm}),
        pd.DataFrame({"what": f"positional encoding ({cfg.positional})", "index": np.arange(n), "norm": p_norm}),
    ], ignore_index=True)


def learned_positions(model: Transformer, side: str = "tgt", length: int | None = None) -> np.ndarray | None:
    """The learned position table ``(length, D)`` float64 of a model trained with ``positional="learned"``
    (Table 3 row (E)), or None for a sinusoidal model."""
    if model.cfg.positional != "learned":
        return None
    if side not in ("src", "tgt"):
        raise LessonInputError(f"side must be 'src' or 'tgt', got {side!r}")
    w = (model.src_positions if side == "src" else model.tgt_positions).weight.detach()
    n = min(length or w.size(0), w.size(0))
    return w[:n].double().cpu().numpy()


# ================================================================================================
# Masking (Section 3.2.3)
# ================================================================================================
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
    """Tokenise ``sentences`` (each ending with ``eos_id`` when given) and pad them to the longest.

    Raises:
        LessonInputError: no sentence, an empty sentence, or more than 8 sentences.
    """
    sentences = [s.strip() for s in sentences if isinstance(s, str)]
    sentences = [s for s in sentences if s]
    if not sentences:
        raise LessonInputError("enter at least one non-empty sentence")
    if len(sentences) > 8:
        raise LessonInputError(f"at most 8 sentences, got {len(sentences)}")
    seqs = []
    for s in sentences:
        ids = list(tokenizer.encode(s))[: max_len - (1 if eos_id is not None else 0)]
        if eos_id is not None:
            ids.append(eos_id)
        seqs.append(ids)
    width = max(len(s) for s in seqs)
    ids = np.full((len(seqs), width), pad_id, dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
    pieces = [[tokenizer.id_to_piece(int(t)) for t in row] for row in ids]
    return PaddedBatch(ids, pieces, ids != pad_id, sentences)


def causal_mask_np(t: int) -> np.ndarray:
    """Look-ahead mask ``(t, t)`` bool, True where query i may attend key j (``j <= i``), Section 3.2.3."""
    t = _int(t, "length")
    if t < 1:
        raise LessonInputError(f"length must be at least 1, got {t}")
    return causal_mask(t).numpy()


def combined_mask(key_mask: np.ndarray) -> np.ndarray:
    """Decoder self-attention mask ``(B, T, T)``: causal AND the key is not padding (as in
    :meth:`aiayn.model.transformer.Transformer.decode`)."""
    km = np.asarray(key_mask, dtype=bool)
    return causal_mask_np(km.shape[1])[None, :, :] & km[:, None, :]


def decode_with_self_mask(model: Transformer, tgt: Tensor, enc: EncoderOutput, *, causal: bool = True, need_weights: bool = False) -> DecoderOutput:
    """:meth:`Transformer.decode` (no cache) with a choice of self-attention mask, using the model's modules
    read-only: ``causal=True`` reproduces the model's decoder; ``causal=False`` lets every position attend
    to every non-pad target position, including future ones (what Section 3.2.3 forbids).

    Args:
        tgt: ``(B, T)`` int64 decoder input (BOS-shifted). enc: :meth:`Transformer.encode` of the source.
        need_weights: return self/cross weights ``(L, B, H, T, T)`` / ``(L, B, H, T, S)`` and scores.

    Returns:
        :class:`aiayn.model.transformer.DecoderOutput` (no cache). Call it on a model in eval mode (as
        :class:`aiayn.Translator` keeps it) so that no dropout is applied.
    """
    cfg = model.cfg
    model._check_tokens(tgt, "tgt")
    t = tgt.size(1)
    keys = (tgt != cfg.pad_id)[:, None, None, :]
    if causal:
        self_mask = causal_mask(t, tgt.device)[None, None] & keys
    else:
        self_mask = keys.expand(-1, 1, t, -1)
    cross_mask = enc.src_mask[:, None, None, :]
    y = model._embed(tgt, "tgt", 0)
    sw, cw, ss, cs = [], [], [], []
    for layer in model.decoder_layers:
        y, sa, ca, _, _ = layer(y, enc.memory, self_mask, cross_mask, need_weights, need_weights)
        sw.append(sa.weights)
        cw.append(ca.weights)
        ss.append(sa.scores)
        cs.append(ca.scores)
    if cfg.norm_first:
        y = model.decoder_norm(y)
    stack = (lambda xs: torch.stack(xs) if need_weights else None)
    return DecoderOutput(model.project(y), stack(sw), stack(cw), stack(ss), stack(cs), None, y)


def _check_layer_head(model: Transformer, layer: Any, head: Any) -> tuple[int, int]:
    layer, head = _int(layer, "layer"), _int(head, "head")
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
        tokens = [cfg.bos_id]
        for _ in range(limit):
            tgt = torch.tensor([tokens], dtype=torch.long, device=model.device)
            logits = decode_with_self_mask(model, tgt, enc, causal=causal).logits[0, -1].float().clone()
            logits[[cfg.pad_id, cfg.bos_id]] = float("-inf")  # as aiayn.decoding: never predict pad or BOS
            nxt = int(logits.argmax())
            out.append(nxt)
            if nxt == cfg.eos_id:
                break
            tokens.append(nxt)
    return out


# ================================================================================================
# Scaled dot-product attention (Section 3.2.1)
# ================================================================================================
def check_d_k(d_k: Any) -> int:
    """Validate ``1 <= d_k <= MAX_D_K``; raises :class:`LessonInputError`."""
    d_k = _int(d_k, "d_k")
    if not 1 <= d_k <= MAX_D_K:
        raise LessonInputError(f"d_k must be between 1 and {MAX_D_K}, got {d_k}")
    return d_k


def random_dot_products(d_k: int, n: int = 20000, seed: int = 0) -> np.ndarray:
    """``n`` dot products ``q . k`` of independent q, k with N(0, 1) components, ``(n,)`` float64.

    Their mean is 0 and their variance is ``d_k`` (footnote 4 of the paper), which is why Equation 1
    divides by ``sqrt(d_k)``.
    """
    d_k = check_d_k(d_k)
    n = _int(n, "number of samples")
    if not 1 <= n or n * d_k > 50_000_000 or n > MAX_SAMPLES:
        raise LessonInputError(f"number of samples must be between 1 and {MAX_SAMPLES} (and n*d_k <= 5e7), got {n}")
    g = np.random.default_rng(seed)
    q = g.standard_normal((n, d_k))
    k = g.standard_normal((n, d_k))
    return np.einsum("nd,nd->n", q, k)


def softmax_sharpness(d_ks: Sequence[int], n_keys: int = 16, n_queries: int = 500, seed: int = 0) -> pd.DataFrame:
    """Entropy (nats) and largest weight of ``softmax(q . k_j)`` over ``n_keys`` random keys, unscaled vs
    divided by ``sqrt(d_k)``, averaged over ``n_queries`` random queries, for each ``d_k``.

    Returns:
        frame with columns d_k, scaling ("unscaled" / "scaled by 1/sqrt(d_k)"), entropy, max_weight,
        max_entropy (``log n_keys``, the uniform distribution's).
    """
    rows = []
    n_keys = _int(n_keys, "number of keys")
    if not 2 <= n_keys <= 1024:
        raise LessonInputError(f"number of keys must be between 2 and 1024, got {n_keys}")
    for d_k in d_ks:
        d_k = check_d_k(d_k)
        g = np.random.default_rng([seed, d_k])
        q = g.standard_normal((n_queries, 1, d_k))
        k = g.standard_normal((n_queries, n_keys, d_k))
        s = (q * k).sum(-1)
        for name, x in (("unscaled", s), ("scaled by 1/sqrt(d_k)", s / math.sqrt(d_k))):
            w = torch.softmax(torch.from_numpy(x), dim=-1).numpy()
            ent = -(w * np.log(np.clip(w, 1e-300, None))).sum(-1)
            rows.append({"d_k": d_k, "scaling": name, "entropy": float(ent.mean()),
                         "max_weight": float(w.max(-1).mean()), "max_entropy": math.log(n_keys)})
    return pd.DataFrame(rows)


@dataclass
class AttentionSteps:
    """Equation 1 on small matrices, one stage at a time (float64).

    Attributes:
        scores: ``Q K^T`` ``(T, S)``. scaled: ``/ sqrt(d_k)``. masked: ``-inf`` where ``mask`` is False.
        weights: row softmax ``(T, S)`` (rows with every key masked are 0). output: ``weights V`` ``(T, d_v)``.
        reference_output / reference_weights: :func:`aiayn.model.attention.scaled_dot_product_attention` on the
        same input; max_abs_diff: the largest difference between the two (output and weights).
    """

    scores: np.ndarray
    scaled: np.ndarray
    masked: np.ndarray
    weights: np.ndarray
    output: np.ndarray
    reference_output: np.ndarray
    reference_weights: np.ndarray
    max_abs_diff: float


def attention_steps(q: Any, k: Any, v: Any, mask: Any | None = None) -> AttentionSteps:
    """``softmax(Q K^T / sqrt(d_k)) V`` step by step, checked against the library function.

    Args:
        q: ``(T, d_k)``; k: ``(S, d_k)``; v: ``(S, d_v)``; mask: ``(T, S)`` bool, True = may attend, or None.
    Raises:
        LessonInputError: non-numeric / non-finite entries or mismatched shapes.
    """
    def arr(x, name):
        try:
            a = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise LessonInputError(f"{name} must hold numbers only") from None
        if a.ndim != 2 or 0 in a.shape:
            raise LessonInputError(f"{name} must be a non-empty matrix, got shape {a.shape}")
        if not np.isfinite(a).all():
            raise LessonInputError(f"{name} has empty or non-finite cells; fill every cell with a number")
        return a

    q, k, v = arr(q, "Q"), arr(k, "K"), arr(v, "V")
    if q.shape[1] != k.shape[1]:
        raise LessonInputError(f"Q and K need the same number of columns d_k, got {q.shape[1]} and {k.shape[1]}")
    if k.shape[0] != v.shape[0]:
        raise LessonInputError(f"K and V need the same number of rows (keys), got {k.shape[0]} and {v.shape[0]}")
    m = None
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != (q.shape[0], k.shape[0]):
            raise LessonInputError(f"mask must have shape {(q.shape[0], k.shape[0])}, got {m.shape}")
    d_k = q.shape[1]
    scores = q @ k.T
    scaled = scores / math.sqrt(d_k)
    masked = scaled if m is None else np.where(m, scaled, -np.inf)
    mx = np.max(masked, axis=-1, keepdims=True)
    ok = np.isfinite(mx)
    e = np.where(np.isfinite(masked), np.exp(masked - np.where(ok, mx, 0.0)), 0.0)
    den = e.sum(-1, keepdims=True)
    weights = np.where(ok, e / np.where(den > 0, den, 1.0), 0.0)
    output = weights @ v
    tq, tk, tv = (torch.tensor(x)[None, None] for x in (q, k, v))
    tm = None if m is None else torch.tensor(m)[None, None]
    ref = scaled_dot_product_attention(tq, tk, tv, tm, need_weights=True)
    ref_out, ref_w = ref.output[0, 0].numpy(), ref.weights[0, 0].numpy()
    diff = float(max(np.abs(ref_out - output).max(), np.abs(ref_w - weights).max()))
    return AttentionSteps(scores, scaled, masked, weights, output, ref_out, ref_w, diff)


# ================================================================================================
# Model size (Table 3) and training (Section 5)
# ================================================================================================
def _component(name: str) -> tuple[str, str, int | None, str]:
    """Map a parameter name to (stack, component, layer index, sub-layer)."""
    parts = name.split(".")
    if parts[0] in ("encoder_layers", "decoder_layers"):
        stack = "encoder" if parts[0] == "encoder_layers" else "decoder"
        layer = int(parts[1])
        sub = parts[2]
        comp = {"self_attn": "self-attention", "cross_attn": "cross-attention", "ffn": "feed-forward"}.get(sub)
        if comp is None and sub.startswith("norm"):
            comp = "layer norm"
        return stack, comp or sub, layer, sub
    if parts[0] in ("encoder_norm", "decoder_norm"):
        return parts[0].split("_")[0], "final layer norm", None, parts[0]
    if "positions" in parts[0]:
        return "embeddings", "learned positions", None, parts[0]
    if parts[0] == "generator":
        return "embeddings", "output projection", None, parts[0]
    return "embeddings", "token embeddings", None, parts[0]


#: display order of stacks and components (Figure 1, bottom to top).
COMPONENT_ORDER = ("embeddings", "encoder", "decoder", "token embeddings", "learned positions", "output projection",
                   "self-attention", "cross-attention", "feed-forward", "layer norm", "final layer norm")


def parameter_breakdown(cfg: TransformerConfig) -> pd.DataFrame:
    """Parameters per component, from the model's own ``named_parameters`` (built on the ``meta`` device,
    so even the big preset costs no memory). Tied matrices are counted once (Section 3.4).

    Returns:
        frame with columns stack ("embeddings" / "encoder" / "decoder"), component, layer (or -1),
        sublayer (module name), parameters; its ``parameters`` column sums to ``num_parameters()``.
    """
    with torch.device("meta"):
        model = Transformer(cfg)
    rows: dict[tuple, int] = {}
    for name, p in model.named_parameters():
        stack, comp, layer, sub = _component(name)
        key = (stack, comp, -1 if layer is None else layer, sub)
        rows[key] = rows.get(key, 0) + p.numel()
    return pd.DataFrame([(*k, v) for k, v in rows.items()], columns=["stack", "component", "layer", "sublayer", "parameters"])


def parameter_summary(cfg: TransformerConfig) -> pd.DataFrame:
    """:func:`parameter_breakdown` summed per (stack, component), with the share of the total (%)."""
    df = parameter_breakdown(cfg).groupby(["stack", "component"], sort=False, as_index=False)["parameters"].sum()
    rank = {c: i for i, c in enumerate(COMPONENT_ORDER)}
    df = df.sort_values(["stack", "component"], key=lambda col: col.map(rank), kind="stable").reset_index(drop=True)
    df["share_%"] = 100.0 * df["parameters"] / df["parameters"].sum()
    return df


class MetricsLogError(ValueError):
    """The training log is missing, empty or unreadable (message for the page user)."""


METRIC_COLUMNS = ("step", "epoch", "train_loss", "valid_loss", "valid_bleu", "lr", "tokens_per_s", "wall_time")


def load_metrics(path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """Read a ``metrics.jsonl`` training log (one JSON object per line; ``valid_*`` only on some lines).

    Returns:
        ``(frame sorted by step with the METRIC_COLUMNS present, warnings)``; warnings name skipped
        lines (not JSON, not an object, no numeric ``step``).
    Raises:
        MetricsLogError: missing file, empty file, or no usable line.
    """
    p = Path(path)
    if not p.is_file():
        raise MetricsLogError(f"no training log: {p.name} is missing in {p.parent}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MetricsLogError(f"the training log {p.name} cannot be read ({exc})") from None
    rows, bad = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad.append(n)
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), (int, float)) or isinstance(rec.get("step"), bool):
            bad.append(n)
            continue
        row = {}
        for c in METRIC_COLUMNS:
            v = rec.get(c)
            row[c] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
        rows.append(row)
    if not rows:
        if bad:
            raise MetricsLogError(f"the training log {p.name} is corrupt: none of its {len(bad)} line(s) is a JSON record with a step")
        raise MetricsLogError(f"the training log {p.name} is empty (training has not logged yet)")
    df = pd.DataFrame(rows).sort_values("step", kind="stable").reset_index(drop=True)
    df = df.dropna(axis=1, how="all")
    warnings = []
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        warnings.append(f"skipped {len(bad)} unreadable line(s) of {p.name} (line {shown})")
    return df, warnings


def lr_schedule(d_model: Any, warmup_steps: Any, max_step: Any, lr_scale: float = 1.0, points: int = 400) -> pd.DataFrame:
    """Equation 3 (:func:`aiayn.training.noam_lr`) sampled at up to ``points`` steps in ``[1, max_step]``,
    always including ``warmup_steps`` (the peak, ``d_model^-0.5 * warmup_steps^-0.5``).

    Raises:
        LessonInputError: non-positive or absurd values.
    """
    d_model, warmup_steps, max_step = _int(d_model, "d_model"), _int(warmup_steps, "warmup_steps"), _int(max_step, "steps")
    if not 1 <= d_model <= 65536:
        raise LessonInputError(f"d_model must be between 1 and 65536, got {d_model}")
    if not 1 <= warmup_steps <= 10_000_000:
        raise LessonInputError(f"warmup_steps must be between 1 and 10,000,000, got {warmup_steps}")
    if not 2 <= max_step <= 100_000_000:
        raise LessonInputError(f"steps must be between 2 and 100,000,000, got {max_step}")
    steps = np.unique(np.concatenate([np.linspace(1, max_step, points).round().astype(np.int64),
                                      [warmup_steps] if warmup_steps <= max_step else []]).astype(np.int64))
    return pd.DataFrame({"step": steps, "lr": [noam_lr(int(s), d_model, warmup_steps, lr_scale) for s in steps]})


def smoothed_target(vocab_size: Any, true_index: Any, epsilon_ls: Any) -> np.ndarray:
    """Label-smoothed target ``q = (1 - eps_ls) onehot(y) + eps_ls / V`` (Section 5.4), ``(V,)`` float64,
    the distribution :func:`aiayn.training.label_smoothed_loss` trains against.

    Raises:
        LessonInputError: ``V < 2``, index out of range, ``eps_ls`` outside ``[0, 1)``.
    """
    v, y = _int(vocab_size, "vocabulary size"), _int(true_index, "true token")
    if not 2 <= v <= 100_000:
        raise LessonInputError(f"vocabulary size must be between 2 and 100000, got {v}")
    if not 0 <= y < v:
        raise LessonInputError(f"true token must be in 0..{v - 1}, got {y}")
    try:
        eps = float(epsilon_ls)
    except (TypeError, ValueError):
        raise LessonInputError(f"epsilon_ls must be a number, got {epsilon_ls!r}") from None
    if not 0.0 <= eps < 1.0:
        raise LessonInputError(f"epsilon_ls must be in [0, 1), got {eps}")
    q = np.full(v, eps / v)
    q[y] += 1.0 - eps
    return q


def smoothed_cross_entropy(probs: Any, true_index: int, epsilon_ls: float) -> float:
    """``-sum_v q_v log p_v`` with q from :func:`smoothed_target`, in nats; ``probs`` ``(V,)`` positive,
    summing to 1.

    Raises:
        LessonInputError: probabilities not positive or not summing to 1.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or (p <= 0).any() or abs(p.sum() - 1.0) > 1e-6:
        raise LessonInputError("probabilities must be positive and sum to 1")
    q = smoothed_target(len(p), true_index, epsilon_ls)
    return float(-(q * np.log(p)).sum())


def example_prediction(vocab_size: int, true_index: int, p_true: float) -> np.ndarray:
    """A prediction ``(V,)`` with ``p_true`` on the true token and the rest spread evenly."""
    v = _int(vocab_size, "vocabulary size")
    if not 0.0 < p_true < 1.0:
        raise LessonInputError(f"p(true) must be strictly between 0 and 1, got {p_true}")
    p = np.full(v, (1.0 - p_true) / (v - 1))
    p[true_index] = p_true
    return p


def label_smoothing_table(vocab_size: int, true_index: int, epsilon_ls: float, p_trues: Sequence[float] = (0.999, 0.9, 0.6)) -> pd.DataFrame:
    """Plain cross-entropy (``-log p_y``) vs the smoothed loss for predictions of growing confidence.

    The smoothed loss is smallest when ``p_y = 1 - eps_ls + eps_ls / V`` (the target itself), so it
    penalises over-confident predictions; the plain loss keeps rewarding ``p_y -> 1``.
    """
    rows = []
    for pt in p_trues:
        p = example_prediction(vocab_size, true_index, pt)
        rows.append({"p_true": pt, "cross_entropy": float(-math.log(pt)),
                     "smoothed_loss": smoothed_cross_entropy(p, true_index, epsilon_ls)})
    return pd.DataFrame(rows)


def parse_int_list(text: Any, name: str = "values", *, max_items: int = 12) -> list[int]:
    """Parse ``"0, 1, 64"`` into ``[0, 1, 64]`` (commas or spaces).

    Raises:
        LessonInputError: a non-integer item, no item, or more than ``max_items``.
    """
    if not isinstance(text, str):
        raise LessonInputError(f"{name}: expected a comma-separated list of whole numbers")
    items = [t for t in text.replace(",", " ").split() if t]
    if not items:
        raise LessonInputError(f"{name}: enter at least one whole number")
    if len(items) > max_items:
        raise LessonInputError(f"{name}: at most {max_items} values, got {len(items)}")
    out = []
    for t in items:
        try:
            out.append(int(t))
        except ValueError:
            raise LessonInputError(f"{name}: {t[:20]!r} is not a whole number") from None
    return out
