"""Interoperability with PyTorch's own ``torch.nn.Transformer`` and with Hugging Face Marian (Opus-MT) models.

:func:`from_marian` and :class:`MarianTokenizerAdapter` live in :mod:`aiayn.interop_marian` and are
re-exported here (``aiayn.interop.from_marian``).

:func:`to_torch_transformer` builds a module on ``torch.nn.Transformer`` carrying a copy of an
:class:`aiayn.Transformer`'s weights, so the two can be compared (tests) and raced (benchmarks). Weight
mapping: ``in_proj_weight = cat([W_q, W_k, W_v])``, ``out_proj`` = W^O, ``linear1/linear2`` = the FFN,
``norm1..3`` the LayerNorms. The paper's post-LN has no final LayerNorm, so ``encoder.norm`` and
``decoder.norm`` are removed (PyTorch always adds them); with ``norm_first=True`` they carry our final norms.

In eval mode the two are the same function. In training mode they differ in one place: ``torch.nn.Transformer``
applies its single ``dropout`` rate to the attention weights too, while aiayn uses ``attention_dropout`` there
(0 by default, as in the paper's text).
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor, nn

from .interop_marian import MarianTokenizerAdapter, from_marian
from .model.attention import MultiHeadAttention
from .model.layers import ACTIVATIONS
from .model.positional import sinusoidal_encoding
from .model.transformer import Transformer

__all__ = ["MarianTokenizerAdapter", "TorchTransformerReference", "from_marian", "to_torch_transformer"]


def _copy_mha(dst: nn.MultiheadAttention, src: MultiHeadAttention) -> None:
    with torch.no_grad():
        dst.in_proj_weight.copy_(torch.cat([src.w_q.weight, src.w_k.weight, src.w_v.weight], dim=0))
        dst.in_proj_bias.copy_(torch.cat([src.w_q.bias, src.w_k.bias, src.w_v.bias], dim=0))
        dst.out_proj.weight.copy_(src.w_o.weight)
        dst.out_proj.bias.copy_(src.w_o.bias)


def _copy_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)


class TorchTransformerReference(nn.Module):
    """``torch.nn.Transformer`` plus the parts it lacks (embeddings x sqrt(d_model), positions, tied output).

    ``forward(src (B, S), tgt (B, T)) -> logits (B, T, V)`` with the same masking rules as aiayn: pads are
    never attended to and decoder self-attention is causal.
    """

    def __init__(self, model: Transformer | None = None, *, cfg=None) -> None:
        super().__init__()
        cfg = model.cfg if model is not None else cfg
        self.cfg = cfg
        with warnings.catch_warnings():  # torch warns that nested tensors are off for norm_first: irrelevant here
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            self.transformer = nn.Transformer(
                d_model=cfg.d_model,
                nhead=cfg.n_heads,
                num_encoder_layers=cfg.n_layers,
                num_decoder_layers=cfg.n_layers,
                dim_feedforward=cfg.d_ff,
                dropout=cfg.dropout,
                activation="relu" if cfg.activation == "relu" else ACTIVATIONS[cfg.activation],
                layer_norm_eps=cfg.layer_norm_eps,
                batch_first=True,
                norm_first=cfg.norm_first,
            )
        if not cfg.norm_first:  # the paper's post-LN has no final LayerNorm
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        self.src_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.tgt_embedding = self.src_embedding if cfg.share_embeddings else nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.share_embeddings:
            self.generator.weight = self.src_embedding.weight
        if cfg.positional == "sinusoidal":
            self.register_buffer("src_pe", sinusoidal_encoding(cfg.max_len, cfg.d_model, layout=cfg.positional_layout), persistent=False)
            self.tgt_pe = None
        else:
            self.src_pe_learned = nn.Parameter(torch.zeros(cfg.max_len, cfg.d_model))
            self.tgt_pe_learned = nn.Parameter(torch.zeros(cfg.max_len, cfg.d_model))
        if cfg.final_logits_bias:
            self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
        if model is not None:
            self._copy(model)

    def _copy(self, model: Transformer) -> None:
        cfg = model.cfg
        with torch.no_grad():
            if cfg.share_embeddings:
                self.src_embedding.weight.copy_(model.embedding.weight)
            else:
                self.src_embedding.weight.copy_(model.src_embedding.weight)
                self.tgt_embedding.weight.copy_(model.tgt_embedding.weight)
                self.generator.weight.copy_(model.generator.weight)
            if cfg.positional == "learned":
                self.src_pe_learned.copy_(model.src_positions.weight)
                self.tgt_pe_learned.copy_(model.tgt_positions.weight)
            if cfg.final_logits_bias:
                self.final_logits_bias.copy_(model.final_logits_bias)
        for ours, theirs in zip(model.encoder_layers, self.transformer.encoder.layers):
            _copy_mha(theirs.self_attn, ours.self_attn)
            with torch.no_grad():
                theirs.linear1.weight.copy_(ours.ffn.w_1.weight); theirs.linear1.bias.copy_(ours.ffn.w_1.bias)
                theirs.linear2.weight.copy_(ours.ffn.w_2.weight); theirs.linear2.bias.copy_(ours.ffn.w_2.bias)
            _copy_norm(theirs.norm1, ours.norm1)
            _copy_norm(theirs.norm2, ours.norm2)
        for ours, theirs in zip(model.decoder_layers, self.transformer.decoder.layers):
            _copy_mha(theirs.self_attn, ours.self_attn)
            _copy_mha(theirs.multihead_attn, ours.cross_attn)
            with torch.no_grad():
                theirs.linear1.weight.copy_(ours.ffn.w_1.weight); theirs.linear1.bias.copy_(ours.ffn.w_1.bias)
                theirs.linear2.weight.copy_(ours.ffn.w_2.weight); theirs.linear2.bias.copy_(ours.ffn.w_2.bias)
            _copy_norm(theirs.norm1, ours.norm1)
            _copy_norm(theirs.norm2, ours.norm2)
            _copy_norm(theirs.norm3, ours.norm3)
        if cfg.norm_first:
            _copy_norm(self.transformer.encoder.norm, model.encoder_norm)
            _copy_norm(self.transformer.decoder.norm, model.decoder_norm)

    def _embed(self, tokens: Tensor, side: str) -> Tensor:
        table = self.src_embedding if side == "src" else self.tgt_embedding
        n = tokens.size(1)
        if self.cfg.positional == "sinusoidal":
            pe = self.src_pe[:n]
        else:
            pe = (self.src_pe_learned if side == "src" else self.tgt_pe_learned)[:n]
        return table(tokens) * math.sqrt(self.cfg.d_model) + pe

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        pad = self.cfg.pad_id
        t = tgt.size(1)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=tgt.device), diagonal=1)  # True = masked
        tgt_pad = tgt == pad
        if self.cfg.decoder_start == "pad":  # Opus-MT starts the decoder from <pad>: that position is real
            tgt_pad[:, 0] = False
        out = self.transformer(
            self._embed(src, "src"),
            self._embed(tgt, "tgt"),
            tgt_mask=causal,
            src_key_padding_mask=src == pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src == pad,
        )
        logits = self.generator(out)
        return logits + self.final_logits_bias if self.cfg.final_logits_bias else logits


def to_torch_transformer(model: Transformer) -> TorchTransformerReference:
    """A :class:`TorchTransformerReference` on ``torch.nn.Transformer`` with ``model``'s weights copied, in
    ``model``'s train/eval mode: ``ref(src, tgt)`` equals ``model(src, tgt)`` in eval mode (disable
    PyTorch's MHA fast path, ``torch.backends.mha.set_fastpath_enabled(False)``, for exact equality)."""
    ref = TorchTransformerReference(model).to(next(model.parameters()).device)
    return ref.train(model.training)
