"""Scaled dot-product attention (Equation 1) and multi-head attention (Section 3.2.2).

Mask convention, used everywhere in :mod:`aiayn`: a **bool tensor, True = may attend**, broadcastable to
``(B, H, T, S)`` (queries T, keys S). It is converted at one place only, the call into
``F.scaled_dot_product_attention`` (which shares the convention). A query row whose keys are all
masked gets all-zero weights and a zero output, never NaN.

Two paths give the same outputs:

* the **fast path** (:func:`torch.nn.functional.scaled_dot_product_attention`) when nobody asks for the
  weights;
* the **capture path**, an explicit ``softmax(QK^T / sqrt(d_k))`` that also returns the per-head weights
  (post-softmax, pre-dropout) and, on request, the scaled pre-softmax scores.

Head masks (head ablation, Michel et al. 2019): :meth:`MultiHeadAttention.forward` takes an optional
``head_mask`` ``(H,)`` that multiplies each head's output ``softmax(QK^T / sqrt(d_k)) V`` before the heads are
concatenated and projected by ``W^O`` (1 keeps a head, 0 removes it, a float scales it), on both paths. The
weights of a removed head are still computed and returned (what the head *would* attend to); only its output
is removed. :func:`check_head_mask` validates the ``(3, L, H)`` mask of a whole model.

Nothing is stored on a module: weights are returned as values, so one model can serve many threads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _written_out(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                 dropout_p: float) -> tuple[Tensor, Tensor, Tensor]:
    """Equation 1 as two matmuls and a softmax (in float32): ``(output (B, H, T, d_v), weights (B, H, T, S), scores
    (B, H, T, S))``, output and weights in the inputs' dtype, scores before masking. Masked scores get the lowest
    finite value, not -inf, so a row with no key is uniform instead of NaN before it is zeroed, and no NaN reaches a
    backward pass (training, attribution). The capture path and the CPU bf16 fast path both compute it here."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        masked = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(masked.float(), dim=-1).to(q.dtype)
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # a row with no key attends to nothing
    else:
        weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return torch.matmul(dropped, v), weights, scores


@dataclass
class AttentionOutput:
    """What :func:`scaled_dot_product_attention` and :class:`MultiHeadAttention` return.

    Attributes:
        output: ``(B, H, T, d_v)`` from the function, ``(B, T, d_model)`` from the module; float.
        weights: ``(B, H, T, S)`` post-softmax, pre-dropout weights, or None on the fast path.
        scores: ``(B, H, T, S)`` scaled pre-softmax scores ``QK^T / sqrt(d_k)`` before masking, or None.
    """

    output: Tensor
    weights: Tensor | None = None
    scores: Tensor | None = None


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    need_scores: bool = False,
) -> AttentionOutput:
    """``Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V`` (Equation 1, Section 3.2.1).

    Args:
        q: ``(B, H, T, d_k)`` queries.
        k: ``(B, H, S, d_k)`` keys.
        v: ``(B, H, S, d_v)`` values.
        mask: bool, True = may attend, broadcastable to ``(B, H, T, S)``; None attends everywhere.
        dropout_p: dropout on the weights (training only; the returned weights are pre-dropout).
        need_weights: take the capture path and return the weights.
        need_scores: also return the scaled pre-softmax scores (implies the capture path).

    Returns:
        :class:`AttentionOutput`; ``output`` is ``(B, H, T, d_v)``. Rows with no key to attend to are 0.

    Raises:
        ValueError: ``mask`` is not a bool tensor.
    """
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"attention masks are bool tensors (True = may attend), got {mask.dtype}")
    if not (need_weights or need_scores):
        if q.device.type == "cpu" and q.dtype == torch.bfloat16:
            # CPU bf16 autocast (training): torch's CPU flash-attention kernel is several times slower forward and backward
            # in bf16 than in float32 at our shapes (docs/training.md, "Session 18: a VM with AMX"), so the
            # attention itself runs in float32 and only its output goes back to bf16; written out (two batched
            # matmuls and a softmax), which at training's 8-40 positions is faster than the float32 flash kernel too
            # ("Session 38"). Autocast lists matmul and SDPA among its bf16 operators, so it is switched off around
            # the call or it would cast the inputs back.
            # _written_out already gives a row with no key zero weights, so its output row is 0.
            with torch.autocast("cpu", enabled=False):
                out = _written_out(q.float(), k.float(), v.float(), mask, dropout_p)[0].to(q.dtype)
            return AttentionOutput(out)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        if mask is not None:
            # SDPA gives NaN for a row whose keys are all masked: make it 0, as the capture path does.
            # Always applied (a no-op when every row has a key): testing first (`if not rows.all()`) would
            # be a host-device sync on GPU and a graph break under torch.compile.
            out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        return AttentionOutput(out)

    out, weights, scores = _written_out(q, k, v, mask, dropout_p)
    return AttentionOutput(out, weights, scores if need_scores else None)


def check_head_mask(head_mask: Any, n_layers: int, n_heads: int, *, device: torch.device | str | None = None) -> Tensor:
    """Validate a whole model's head mask and return it as a tensor.

    Args:
        head_mask: ``(3, n_layers, n_heads)``: index 0 encoder self-attention, 1 decoder self-attention,
            2 encoder-decoder (cross) attention (:data:`aiayn.model.config.KINDS`); a bool or floating tensor, or a
            list / tuple / numpy array (converted: bool stays bool, numbers become float32). 1/True keeps a
            head, 0/False removes its output, a float scales it.
        n_layers, n_heads: the model's ``N`` and ``h``.
        device: move the mask there (default: leave it where it is).

    Returns:
        the mask, ``(3, n_layers, n_heads)``, bool or floating, on ``device``.

    Raises:
        ValueError: wrong shape, a dtype other than bool / floating (integer tensors included), values that
            do not convert, or non-finite values (checked on the CPU only, to avoid a device sync).
    """
    if not isinstance(head_mask, Tensor):
        try:
            arr = np.asarray(head_mask)
            head_mask = torch.from_numpy(arr.copy()) if arr.dtype == np.bool_ else torch.as_tensor(arr.astype(np.float32))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"head_mask must be numbers or booleans of shape (3, {n_layers}, {n_heads}): {exc}") from None
    want = (3, n_layers, n_heads)
    if tuple(head_mask.shape) != want:
        raise ValueError(f"head_mask must have shape (3, n_layers, n_heads) = {want} (encoder, decoder, cross), "
                         f"got {tuple(head_mask.shape)}")
    if head_mask.dtype != torch.bool and not head_mask.is_floating_point():
        raise ValueError(f"head_mask must be a bool or floating tensor (1/True keeps a head), got {head_mask.dtype}")
    if head_mask.device.type == "cpu" and head_mask.is_floating_point() and not bool(torch.isfinite(head_mask).all()):
        raise ValueError("head_mask holds NaN or infinite values")
    return head_mask if device is None else head_mask.to(device)


@dataclass
class KVCache:
    """Keys and values of one attention sub-layer, kept between decoding steps (incremental decoding).

    ``k``: ``(B, H, t, d_k)``; ``v``: ``(B, H, t, d_v)``. For decoder self-attention ``t`` grows by one each
    step; for encoder-decoder attention they are the projected encoder output, computed once.
    A plain value: the decoder returns a new list of caches; no module keeps one.
    """

    k: Tensor
    v: Tensor

    def index_select(self, index: Tensor) -> "KVCache":
        """Reorder the batch dimension (beam search), ``index``: ``(B',)`` int64."""
        return KVCache(self.k.index_select(0, index), self.v.index_select(0, index))


class MultiHeadAttention(nn.Module):
    """``MultiHead(Q, K, V) = Concat(head_1..head_h) W^O``, ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``
    (Section 3.2.2), with ``d_k = d_v = d_model / h``.

    The projections are ``nn.Linear`` with bias (as ``torch.nn.MultiheadAttention``), so weights copy one
    to one into PyTorch's module (see :mod:`aiayn.interop`).
    """

    def __init__(self, d_model: int, n_heads: int, attention_dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.attention_dropout = attention_dropout
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def _split(self, x: Tensor) -> Tensor:
        """``(B, T, d_model)`` -> ``(B, H, T, d_k)``."""
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_k).transpose(1, 2)

    def project_kv(self, x: Tensor) -> KVCache:
        """Keys and values of ``x`` ``(B, S, d_model)`` as a :class:`KVCache` ``(B, H, S, d_k)``."""
        return KVCache(self._split(self.w_k(x)), self._split(self.w_v(x)))

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        need_weights: bool = False,
        need_scores: bool = False,
        cache: KVCache | None = None,
        static_kv: bool = False,
        head_mask: Tensor | None = None,
    ) -> tuple[AttentionOutput, KVCache | None]:
        """Multi-head attention of ``query`` over ``key_value``.

        Args:
            query: ``(B, T, d_model)``.
            key_value: ``(B, S, d_model)``; None means self-attention (``key_value = query``).
            mask: bool, True = may attend, broadcastable to ``(B, H, T, S_total)``.
            need_weights / need_scores: see :func:`scaled_dot_product_attention`.
            cache: keys/values from earlier steps. With ``static_kv=False`` (decoder self-attention) the
                new keys/values of ``query`` are appended; with ``static_kv=True`` (cross-attention) the
                cache *is* the keys/values and ``key_value`` is ignored.
            static_kv: see ``cache``.
            head_mask: ``(H,)`` bool or float: each head's output ``softmax(QK^T / sqrt(d_k)) V``
                ``(B, H, T, d_v)`` is multiplied by its entry before the concatenation and ``W^O`` (1/True
                keeps the head, 0/False removes it, a float scales it; Michel et al. 2019). The returned
                weights are unchanged (a removed head's weights are still computed). None: no extra op.

        Returns:
            ``(AttentionOutput with output (B, T, d_model) and weights (B, H, T, S_total), new cache)``;
            the new cache is None when no cache was given and ``static_kv`` is False.

        Raises:
            ValueError: ``head_mask`` is not a bool / floating tensor of shape ``(H,)``.
        """
        if head_mask is not None and (
            not isinstance(head_mask, Tensor) or tuple(head_mask.shape) != (self.n_heads,)
            or not (head_mask.dtype == torch.bool or head_mask.is_floating_point())
        ):
            raise ValueError(f"head_mask must be a bool or float tensor of shape ({self.n_heads},), "
                             f"got {getattr(head_mask, 'shape', type(head_mask).__name__)}")
        q = self._split(self.w_q(query))
        new_cache: KVCache | None
        if static_kv:
            kv = cache if cache is not None else self.project_kv(query if key_value is None else key_value)
            new_cache = kv
        else:
            kv = self.project_kv(query if key_value is None else key_value)
            if cache is not None:
                kv = KVCache(torch.cat([cache.k, kv.k], dim=2), torch.cat([cache.v, kv.v], dim=2))
                new_cache = kv
            else:
                new_cache = None
        res = scaled_dot_product_attention(
            q,
            kv.k,
            kv.v,
            mask,
            dropout_p=self.attention_dropout if self.training else 0.0,
            need_weights=need_weights,
            need_scores=need_scores,
        )
        heads = res.output
        if head_mask is not None:  # (B, H, T, d_v) * (1, H, 1, 1): same on the fast and the capture path
            heads = heads * head_mask.to(device=heads.device, dtype=heads.dtype)[None, :, None, None]
        b, h, t, d = heads.shape
        res.output = self.w_o(heads.transpose(1, 2).reshape(b, t, h * d))
        return res, new_cache
