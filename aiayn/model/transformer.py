"""The Transformer of Vaswani et al. (2017), Sections 3.1-3.5, from PyTorch primitives.

Shapes use B batch, S source length, T target length, L layers (N in the paper), H heads, D d_model,
V vocabulary. Token ids are int64. Attention masks follow :mod:`aiayn.model.attention` (bool, True = may attend).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache, check_head_mask
from .config import TransformerConfig
from .dropout import Dropout
from .layers import DecoderLayer, EncoderLayer
from .maps import AttentionMaps
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding


@dataclass
class EncoderOutput:
    """Result of :meth:`Transformer.encode`.

    Attributes:
        memory: ``(B, S, D)`` float, the encoder output z.
        src_mask: ``(B, S)`` bool, True on real (non-pad) source positions.
        weights: ``(L, B, H, S, S)`` encoder self-attention, or None (fast path).
        scores: ``(L, B, H, S, S)`` scaled pre-softmax scores, or None.
    """

    memory: Tensor
    src_mask: Tensor
    weights: Tensor | None = None
    scores: Tensor | None = None

    def index_select(self, index: Tensor) -> "EncoderOutput":
        """Repeat/reorder sentences along B (e.g. ``index = arange(B).repeat_interleave(beam)``)."""
        sel = lambda t: None if t is None else t.index_select(1 if t.dim() == 5 else 0, index)  # noqa: E731
        return EncoderOutput(self.memory.index_select(0, index), self.src_mask.index_select(0, index), sel(self.weights), sel(self.scores))

    @staticmethod
    def stack(outputs: "list[EncoderOutput]") -> "EncoderOutput":
        """Sentences encoded apart, as one padded batch: each ``(B_i, S_i, ...)`` output padded to the longest
        ``S`` (memory with zeros, ``src_mask`` with False, maps with zeros) and concatenated along B. Padded
        positions are masked wherever the memory is read (cross-attention), so a sentence decoded over the stack
        reads exactly its own encoding. The maps are kept only when every output has them.

        Raises:
            ValueError: no outputs, or outputs of different ``d_model``, dtype or device.
        """
        if not outputs:
            raise ValueError("EncoderOutput.stack needs at least one output")
        m0 = outputs[0].memory
        if any(o.memory.shape[-1] != m0.shape[-1] or o.memory.dtype != m0.dtype or o.memory.device != m0.device
               for o in outputs):
            raise ValueError("EncoderOutput.stack: outputs differ in d_model, dtype or device")
        S = max(o.memory.size(1) for o in outputs)
        memory = torch.cat([F.pad(o.memory, (0, 0, 0, S - o.memory.size(1))) for o in outputs], dim=0)
        src_mask = torch.cat([F.pad(o.src_mask, (0, S - o.src_mask.size(1)), value=False) for o in outputs], dim=0)

        def maps(name: str) -> Tensor | None:
            if any(getattr(o, name) is None for o in outputs):
                return None
            padded = [getattr(o, name) for o in outputs]                            # (L, B_i, H, S_i, S_i) each
            return torch.cat([F.pad(t, (0, S - t.size(-1), 0, S - t.size(-2))) for t in padded], dim=1)

        return EncoderOutput(memory, src_mask, maps("weights"), maps("scores"))


@dataclass
class DecoderCache:
    """Key/value cache of incremental decoding: one :class:`KVCache` per decoder layer for self-attention
    (grows by one position a step) and one for encoder-decoder attention (the projected encoder output,
    computed once). ``length`` = number of target positions already fed. A plain value, never kept on
    a module."""

    self_kv: list[KVCache]
    cross_kv: list[KVCache]
    length: int = 0

    def index_select(self, index: Tensor, *, cross: bool = True) -> "DecoderCache":
        """Reorder the batch (beam search). ``cross=False`` keeps the cross cache as is, which is exact
        when ``index`` only moves rows between hypotheses of the same source sentence."""
        return DecoderCache(
            [c.index_select(index) for c in self.self_kv],
            [c.index_select(index) for c in self.cross_kv] if cross else self.cross_kv,
            self.length,
        )


@dataclass
class DecoderOutput:
    """Result of :meth:`Transformer.decode`.

    Attributes:
        logits: ``(B, T, V)`` float, unnormalised next-token scores.
        self_weights: ``(L, B, H, T, T_total)`` masked self-attention or None.
        cross_weights: ``(L, B, H, T, S)`` encoder-decoder attention or None.
        self_scores / cross_scores: the scaled pre-softmax scores, same shapes, or None.
        cache: the updated :class:`DecoderCache` when decoding incrementally, else None.
    """

    logits: Tensor
    self_weights: Tensor | None = None
    cross_weights: Tensor | None = None
    self_scores: Tensor | None = None
    cross_scores: Tensor | None = None
    cache: DecoderCache | None = None


def _stack(items: list[Tensor | None]) -> Tensor | None:
    return None if not items or items[0] is None else torch.stack(items, dim=0)


def causal_mask(t: int, device: torch.device | None = None, *, offset: int = 0) -> Tensor:
    """Look-ahead mask of Section 3.2.3: ``(t, offset + t)`` bool, True where query i (at absolute position
    ``offset + i``) may attend key j, i.e. ``j <= offset + i``."""
    q = torch.arange(t, device=device).unsqueeze(1) + offset
    k = torch.arange(offset + t, device=device).unsqueeze(0)
    return k <= q


class Transformer(nn.Module):
    """Encoder-decoder Transformer (Figure 1, Sections 3.1-3.5).

    ``forward(src, tgt)`` returns logits ``(B, T, V)``; with ``return_attention=True`` it returns
    ``(logits, AttentionMaps)`` with every map of every layer and head (see :class:`aiayn.AttentionMaps`).
    ``tgt`` is the decoder input (BOS-shifted); the logits at position t predict target token t+1.

    Embeddings are multiplied by sqrt(d_model) and summed with positions (Sections 3.4, 3.5); with
    ``share_embeddings`` the source embedding, target embedding and output projection are one matrix.
    With ``cfg.final_logits_bias`` a buffer ``final_logits_bias`` ``(V,)`` (zeros until loaded, saved in
    checkpoints) is added to the logits (Marian's; see :func:`aiayn.interop.from_marian`).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        if not isinstance(cfg, TransformerConfig):
            raise TypeError(f"Transformer needs a TransformerConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        d = cfg.d_model
        # language tags (cfg.language_tags) are rows after the vocabulary: embedded, never projected to (project)
        if cfg.share_embeddings:
            self.embedding = nn.Embedding(cfg.n_embeddings, d)
        else:
            self.src_embedding = nn.Embedding(cfg.n_embeddings, d)
            self.tgt_embedding = nn.Embedding(cfg.n_embeddings, d)
            self.generator = nn.Linear(d, cfg.vocab_size, bias=False)
        if cfg.positional == "sinusoidal":
            self.positions = SinusoidalPositionalEncoding(d, cfg.max_len, cfg.positional_layout)
        else:
            self.src_positions = LearnedPositionalEmbedding(d, cfg.max_len)
            self.tgt_positions = LearnedPositionalEmbedding(d, cfg.max_len)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        if cfg.norm_first:  # pre-LN needs a final LayerNorm on each stack; post-LN (the paper) has none
            self.encoder_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
            self.decoder_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)
        if cfg.final_logits_bias:  # converted Marian models only; absent (not zero) otherwise, so old state dicts load
            self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
        self.reset_parameters()

    # -- parameters -------------------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """Xavier-uniform matrices, zero biases, embeddings N(0, d_model^-1/2) so that the embedding times
        sqrt(d_model) has unit variance (tensor2tensor's initialisation)."""
        for name, p in self.named_parameters():
            if "embedding" in name or "positions" in name:
                nn.init.normal_(p, mean=0.0, std=self.cfg.d_model**-0.5)
            elif p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (tied matrices counted once)."""
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # -- embeddings ---------------------------------------------------------------------------------------
    def embed(self, tokens: Tensor, side: str, start: int = 0) -> Tensor:
        """Input of the first layer (Sections 3.4, 3.5): ``E[tokens] * sqrt(d_model) + PE(start + pos)``,
        then dropout (P_drop, Section 5.4; none in eval mode).

        Args:
            tokens: ``(B, T)`` int64 ids (not checked here; :meth:`encode` / :meth:`decode` check them).
            side: ``"src"`` or ``"tgt"``: which embedding and learned position table (they differ only
                without ``share_embeddings`` / with ``positional="learned"``).
            start: absolute position of ``tokens[:, 0]`` (the cache length in incremental decoding).

        Returns:
            ``(B, T, D)`` float, in the embedding's dtype.

        Raises:
            ValueError: ``side`` is neither ``"src"`` nor ``"tgt"``.
        """
        if side not in ("src", "tgt"):
            raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")
        cfg = self.cfg
        table = self.embedding if cfg.share_embeddings else (self.src_embedding if side == "src" else self.tgt_embedding)
        if cfg.positional == "sinusoidal":
            pe = self.positions(tokens.size(1), start)
        else:
            pe = (self.src_positions if side == "src" else self.tgt_positions)(tokens.size(1), start)
        x = table(tokens) * math.sqrt(cfg.d_model) + pe.to(table.weight.dtype)
        return self.dropout(x)

    def output_layer(self) -> tuple[Tensor, Tensor | None]:
        """The pre-softmax linear map's weight ``(V, D)`` (tied to the embedding, Section 3.4: its first
        ``cfg.vocab_size`` rows, the language tags' rows left out so that a tag is never predicted) and its bias
        ``(V,)`` (``final_logits_bias`` when ``cfg.final_logits_bias``, Marian's; else None)."""
        weight = self.embedding.weight[: self.cfg.vocab_size] if self.cfg.share_embeddings else self.generator.weight
        return weight, (self.final_logits_bias if self.cfg.final_logits_bias else None)

    def project(self, hidden: Tensor) -> Tensor:
        """Pre-softmax linear map, ``(B, T, D) -> (B, T, V)`` (:meth:`output_layer`; Section 3.4)."""
        weight, bias = self.output_layer()
        if bias is not None:
            return F.linear(hidden, weight, bias.to(weight.dtype))
        return F.linear(hidden, weight)

    def target_positions(self, tgt: Tensor, start: int = 0) -> Tensor:
        """``(B, T)`` bool, True on the real (non-pad) positions of the decoder input ``tgt`` ``(B, T)`` whose
        first column is absolute position ``start``. The decoder start token is always real, even when it
        *is* the pad id (``cfg.decoder_start="pad"``, Opus-MT): it is never masked as padding."""
        real = tgt != self.cfg.pad_id
        if self.cfg.decoder_start == "pad" and start == 0 and tgt.size(1):
            real = real.clone()
            real[:, 0] = True
        return real

    def _check_tokens(self, tokens: Tensor, name: str) -> None:
        if not isinstance(tokens, Tensor) or tokens.dim() != 2:
            raise ValueError(f"{name} must be an int64 tensor of shape (B, {name[0].upper()}), got {getattr(tokens, 'shape', type(tokens))}")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"{name} must hold integer token ids, got {tokens.dtype}")
        if tokens.size(1) > self.cfg.max_len:
            raise ValueError(f"{name} has {tokens.size(1)} positions; this model accepts at most max_len={self.cfg.max_len}")
        # The value check reads the ids back to the host: skip it under torch.compile and on accelerators
        # (an out-of-range id there triggers the device's own index assertion).
        if torch.compiler.is_compiling() or tokens.device.type != "cpu":
            return
        # the decoder input may hold language tags (ids vocab_size...n_embeddings - 1); the source never does
        top = self.cfg.vocab_size if name == "src" else self.cfg.n_embeddings
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= top):
            raise ValueError(f"{name} holds ids outside the vocabulary [0, {top})")

    @staticmethod
    def _check_self_attn_mask(mask: Tensor, b: int, t: int, k: int) -> Tensor:
        """``(T, K)`` or ``(B, T, K)`` bool -> ``(1 or B, 1, T, K)`` (broadcast over heads)."""
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise ValueError(f"self_attn_mask must be a bool tensor (True = may attend), got {getattr(mask, 'dtype', type(mask))}")
        if mask.dim() not in (2, 3) or tuple(mask.shape[-2:]) != (t, k) or (mask.dim() == 3 and mask.size(0) not in (1, b)):
            raise ValueError(f"self_attn_mask must have shape ({t}, {k}) or ({b}, {t}, {k}), got {tuple(mask.shape)}")
        return mask[None, None] if mask.dim() == 2 else mask[:, None]

    # -- encoder / decoder ----------------------------------------------------------------------------------
    def check_head_mask(self, head_mask) -> Tensor | None:
        """``head_mask`` (None, or ``(3, n_layers, n_heads)``: encoder, decoder self, cross; bool or float; a
        list / tuple / numpy array is converted) validated and moved to the model's device; None stays None.
        1/True keeps a head's output, 0/False removes it, a float scales it (Michel et al. 2019).

        Raises:
            ValueError: wrong shape or dtype, non-finite values (see :func:`aiayn.model.attention.check_head_mask`).
        """
        if head_mask is None:
            return None
        return check_head_mask(head_mask, self.cfg.n_layers, self.cfg.n_heads, device=self.device)

    def encode(self, src: Tensor, *, need_weights: bool = False, need_scores: bool = False,
               head_mask: Tensor | None = None) -> EncoderOutput:
        """Run the encoder stack on ``src`` ``(B, S)`` int64. Pads (``pad_id``) are never attended to.

        ``head_mask`` ``(3, L, H)`` (see :meth:`check_head_mask`): its row 0 scales each encoder
        self-attention head's output before ``W^O``; None changes nothing.

        Raises:
            ValueError: ``src`` is not ``(B, S)`` integer ids within the vocabulary and ``max_len``; a bad
                ``head_mask``.
        """
        self._check_tokens(src, "src")
        head_mask = self.check_head_mask(head_mask)
        src_mask = src != self.cfg.pad_id
        attn_mask = src_mask[:, None, None, :]
        x = self.embed(src, "src")
        ws, ss = [], []
        for i, layer in enumerate(self.encoder_layers):
            x, att = layer(x, attn_mask, need_weights or need_scores, need_scores,
                           None if head_mask is None else head_mask[0, i])
            ws.append(att.weights)
            ss.append(att.scores)
        if self.cfg.norm_first:
            x = self.encoder_norm(x)
        return EncoderOutput(x, src_mask, _stack(ws), _stack(ss))

    def init_cache(self, enc: EncoderOutput) -> DecoderCache:
        """An empty :class:`DecoderCache` for incremental decoding over ``enc`` (the encoder keys and values
        of every cross-attention are projected here, once)."""
        b = enc.memory.size(0)
        h, dk = self.cfg.n_heads, self.cfg.d_k
        empty = enc.memory.new_zeros(b, h, 0, dk)
        return DecoderCache(
            [KVCache(empty, empty) for _ in self.decoder_layers],
            [layer.cross_attn.project_kv(enc.memory) for layer in self.decoder_layers],
            0,
        )

    def decode(
        self,
        tgt: Tensor,
        enc: EncoderOutput,
        *,
        need_weights: bool = False,
        need_scores: bool = False,
        cache: DecoderCache | None = None,
        self_attn_mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        project: Callable[[Tensor], Tensor] | None = None,
    ) -> DecoderOutput:
        """Run the decoder stack on ``tgt`` ``(B, T)`` (BOS-shifted decoder input) over ``enc``.

        With ``cache`` (from :meth:`init_cache` or a previous call) ``tgt`` holds only the new positions,
        which start at ``cache.length``; the result carries the updated cache. Without a cache the whole
        prefix is recomputed. Self-attention is causal (Section 3.2.3) and never looks at pads.

        Args:
            tgt: ``(B, T)`` int64 decoder input ids (BOS first, pads = ``pad_id``).
            enc: :meth:`encode` of the source.
            need_weights / need_scores: fill the self/cross weights (and the pre-softmax scores) of every
                layer (the exact capture path of :mod:`aiayn.model.attention`).
            cache: incremental decoding state, or None.
            self_attn_mask: the look-ahead part of the self-attention mask, bool, True = query i may
                attend key j; ``(T, K)`` for every sentence or ``(B, T, K)`` per sentence, with
                ``K = cache.length + T`` (``K = T`` without a cache). None (default) is the causal mask
                of Section 3.2.3 (``j <= i``); the teaching lab passes all-True to show what the mask
                prevents. Without a cache, pad keys of ``tgt`` are masked on top of it, as for the default.
                A query row with no allowed key gets zero weights and a zero attention output.
            head_mask: ``(3, L, H)`` (see :meth:`check_head_mask`): rows 1 (decoder self-attention) and 2
                (cross-attention) scale each head's output before ``W^O``; None changes nothing. Pass the
                same mask to :meth:`encode` and at every step of incremental decoding.
            project: the output projection ``(B, T, D) -> (B, T, V)`` float32 logits at a serving precision
                (:attr:`aiayn.model.projection.OutputProjection.function`); None (default): :meth:`project`.

        Returns:
            :class:`DecoderOutput`; logits ``(B, T, V)``.

        Raises:
            ValueError: malformed ``tgt``, decoding past ``max_len``, or ``self_attn_mask`` not a bool
                tensor of shape ``(T, K)`` / ``(B, T, K)``; a bad ``head_mask``.
        """
        self._check_tokens(tgt, "tgt")
        head_mask = self.check_head_mask(head_mask)
        start = cache.length if cache is not None else 0
        t = tgt.size(1)
        if start + t > self.cfg.max_len:
            raise ValueError(f"decoding past max_len={self.cfg.max_len} positions")
        if self_attn_mask is None:
            look_ahead = causal_mask(t, tgt.device, offset=start)[None, None]  # (1, 1, T, start + T)
        else:
            look_ahead = self._check_self_attn_mask(self_attn_mask, tgt.size(0), t, start + t).to(tgt.device)
        if cache is None:
            self_mask = look_ahead & self.target_positions(tgt)[:, None, None, :]
        else:
            self_mask = look_ahead
        cross_mask = enc.src_mask[:, None, None, :]
        y = self.embed(tgt, "tgt", start)
        cap = need_weights or need_scores
        sw, cw, ssc, csc = [], [], [], []
        new_self, new_cross = [], []
        for i, layer in enumerate(self.decoder_layers):
            y, sa, ca, sc, cc = layer(
                y,
                enc.memory,
                self_mask,
                cross_mask,
                cap,
                need_scores,
                cache.self_kv[i] if cache is not None else None,
                cache.cross_kv[i] if cache is not None else None,
                None if head_mask is None else head_mask[1, i],
                None if head_mask is None else head_mask[2, i],
            )
            sw.append(sa.weights)
            cw.append(ca.weights)
            ssc.append(sa.scores)
            csc.append(ca.scores)
            new_self.append(sc)
            new_cross.append(cc)
        if self.cfg.norm_first:
            y = self.decoder_norm(y)
        new_cache = DecoderCache(new_self, new_cross, start + t) if cache is not None else None
        return DecoderOutput((project or self.project)(y), _stack(sw), _stack(cw), _stack(ssc), _stack(csc), new_cache)

    def forward(
        self, src: Tensor, tgt: Tensor, *, return_attention: bool = False, return_scores: bool = False,
        head_mask: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, AttentionMaps]:
        """Teacher-forced forward pass.

        Args:
            src: ``(B, S)`` int64 source ids (pads = ``pad_id``).
            tgt: ``(B, T)`` int64 decoder input ids (BOS first, pads = ``pad_id``).
            return_attention: also return an :class:`AttentionMaps` (capture path).
            return_scores: also fill the maps' pre-softmax scores (implies ``return_attention``).
            head_mask: ``(3, L, H)``, index 0 encoder, 1 decoder self, 2 cross attention (see
                :meth:`check_head_mask`); each head's output is multiplied by its entry before ``W^O``. The
                maps of a removed head are still computed (what it would attend to). None changes nothing.

        Returns:
            logits ``(B, T, V)`` float, or ``(logits, maps)``.

        Raises:
            ValueError: malformed ``src`` / ``tgt`` (shape, dtype, ids outside the vocabulary, too long); a
                ``head_mask`` of the wrong shape or dtype.
        """
        head_mask = self.check_head_mask(head_mask)
        cap = return_attention or return_scores
        enc = self.encode(src, need_weights=cap, need_scores=return_scores, head_mask=head_mask)
        dec = self.decode(tgt, enc, need_weights=cap, need_scores=return_scores, head_mask=head_mask)
        if not cap:
            return dec.logits
        maps = AttentionMaps(
            encoder=enc.weights,
            decoder=dec.self_weights,
            cross=dec.cross_weights,
            encoder_scores=enc.scores,
            decoder_scores=dec.self_scores,
            cross_scores=dec.cross_scores,
            src_lengths=enc.src_mask.sum(-1).tolist(),
            tgt_lengths=self.target_positions(tgt).sum(-1).tolist(),
        )
        return dec.logits, maps
