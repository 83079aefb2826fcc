"""The layers of Section 3.1: the position-wise feed-forward network (Section 3.3, Eq. 2) and the encoder and
decoder layers (two and three sub-layers, each wrapped in a residual connection and LayerNorm, Section 3.1;
post-LN as in the paper, pre-LN with ``norm_first``). Dropout ``P_drop`` on each sub-layer output (Section 5.4).

Shapes: B batch, S source length, T target length, D d_model. Masks are bool, True = may attend.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .attention import AttentionOutput, KVCache, MultiHeadAttention
from .config import TransformerConfig
from .dropout import Dropout


#: FFN activations by ``TransformerConfig.activation`` ("relu" is Eq. 2; the others serve converted models)
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class PositionwiseFeedForward(nn.Module):
    """``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2`` (Equation 2, Section 3.3); ``(B, T, D) -> (B, T, D)``.

    ``activation`` replaces ``max(0, .)``: ``"relu"`` (the paper, default), ``"gelu"`` (exact, erf form) or
    ``"swish"`` (``x * sigmoid(x)``, Opus-MT's). Raises ValueError for any other name.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        self.activation = ACTIVATIONS[activation]
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.activation(self.w_1(x)))


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each wrapped in a residual connection and LayerNorm (Section 3.1).

    Post-LN (paper): ``x = LayerNorm(x + Dropout(Sublayer(x)))``; pre-LN: ``x = x + Dropout(Sublayer(LayerNorm(x)))``.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = cfg.norm_first
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)

    def forward(
        self, x: Tensor, mask: Tensor | None, need_weights: bool = False, need_scores: bool = False,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, AttentionOutput]:
        """``x`` ``(B, S, D)``, ``mask`` ``(B, 1, 1, S)`` -> ``(x', attention of this layer)``; ``head_mask``
        ``(H,)`` scales each self-attention head's output (see :class:`MultiHeadAttention`)."""
        h = self.norm1(x) if self.norm_first else x
        att, _ = self.self_attn(h, None, mask, need_weights=need_weights, need_scores=need_scores, head_mask=head_mask)
        x = x + self.dropout(att.output)
        if not self.norm_first:
            x = self.norm1(x)
        h = self.norm2(x) if self.norm_first else x
        x = x + self.dropout(self.ffn(h))
        if not self.norm_first:
            x = self.norm2(x)
        return x, att


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, FFN; residual + LayerNorm around each (Section 3.1)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = cfg.norm_first
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.norm3 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)

    def forward(
        self,
        y: Tensor,
        memory: Tensor | None,
        self_mask: Tensor | None,
        cross_mask: Tensor | None,
        need_weights: bool = False,
        need_scores: bool = False,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        self_head_mask: Tensor | None = None,
        cross_head_mask: Tensor | None = None,
    ) -> tuple[Tensor, AttentionOutput, AttentionOutput, KVCache | None, KVCache | None]:
        """``y`` ``(B, T, D)``, ``memory`` ``(B, S, D)`` (may be None when ``cross_cache`` is given);
        ``self_head_mask`` / ``cross_head_mask`` ``(H,)`` scale each head's output (:class:`MultiHeadAttention`).

        Returns ``(y', self-attention, cross-attention, new self cache, cross cache)``.
        """
        h = self.norm1(y) if self.norm_first else y
        sa, self_cache = self.self_attn(
            h, None, self_mask, need_weights=need_weights, need_scores=need_scores, cache=self_cache,
            head_mask=self_head_mask,
        )
        y = y + self.dropout(sa.output)
        if not self.norm_first:
            y = self.norm1(y)
        h = self.norm2(y) if self.norm_first else y
        ca, cross_cache = self.cross_attn(
            h,
            memory,
            cross_mask,
            need_weights=need_weights,
            need_scores=need_scores,
            cache=cross_cache,
            static_kv=True,
            head_mask=cross_head_mask,
        )
        y = y + self.dropout(ca.output)
        if not self.norm_first:
            y = self.norm2(y)
        h = self.norm3(y) if self.norm_first else y
        y = y + self.dropout(self.ffn(h))
        if not self.norm_first:
            y = self.norm3(y)
        return y, sa, ca, self_cache, cross_cache
