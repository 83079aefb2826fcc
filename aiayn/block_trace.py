"""Every block's tensors of one teacher-forced pass, Figure 1 read bottom to top: the input embedding, its scaling
by sqrt(d_model) (Section 3.4), the positional encoding (Section 3.5), and in each encoder / decoder layer each
sub-layer (multi-head self-attention, encoder-decoder attention, the feed-forward network of Eq. 2 with its hidden
activations) with the residual stream around it and its LayerNorm (Section 3.1, ``LayerNorm(x + Sublayer(x))``;
pre-LN models normalise before the sub-layer and once more after the stack).

The values are taken by forward hooks that :func:`capture` registers for one call and removes after it (also on
an error), never stored on a module; a hook fires only in the thread that registered it, so a model shared by
many sessions (the app's cached one) keeps serving the others unchanged while one is traced. Take a trace
through :func:`aiayn.calls.traced`, the one owner of model calls.

Shapes: B batch, S source length, T target length, D d_model, F d_ff; all float32, detached, on the model's device.
"""
from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass, field
from typing import Iterator

from torch import Tensor, nn


@dataclass
class SublayerTrace:
    """One sub-layer of a layer with its residual connection and LayerNorm (Section 3.1).

    Attributes:
        name: ``"self_attn"``, ``"cross_attn"`` (decoder only) or ``"ffn"``.
        stream_in: ``(B, N, D)`` the residual stream x before it.
        sublayer_in: ``(B, N, D)`` what the sub-layer reads (post-LN: x itself; pre-LN: LayerNorm(x)).
        sublayer_out: ``(B, N, D)`` Sublayer(.) (before dropout, none at inference).
        norm_in / norm_out: ``(B, N, D)`` its LayerNorm's input and output (post-LN: x + Sublayer(x) and the
            new stream; pre-LN: x and sublayer_in).
        stream_out: ``(B, N, D)`` the residual stream after it.
        hidden: ``(B, N, F)`` the FFN's hidden activations ``max(0, x W_1 + b_1)`` (Eq. 2), ``"ffn"`` only.
    """

    name: str
    stream_in: Tensor
    sublayer_in: Tensor
    sublayer_out: Tensor
    norm_in: Tensor
    norm_out: Tensor
    stream_out: Tensor
    hidden: Tensor | None = None


@dataclass
class LayerTrace:
    """One encoder or decoder layer: ``input`` and ``output`` ``(B, N, D)`` and its sub-layers in order."""

    input: Tensor
    output: Tensor
    sublayers: list[SublayerTrace]

    def sublayer(self, name: str) -> SublayerTrace:
        """The sub-layer called ``name``. Raises ValueError for another name."""
        for s in self.sublayers:
            if s.name == name:
                return s
        raise ValueError(f"no sub-layer {name!r}; this layer has {[s.name for s in self.sublayers]}")


@dataclass
class StackTrace:
    """The encoder's or the decoder's side of Figure 1.

    Attributes:
        tokens: ``(B, N)`` int64 ids fed (the source; the decoder input, shifted right).
        embedding: ``(B, N, D)`` ``E[tokens]``, the embedding rows.
        scaled: ``(B, N, D)`` ``E[tokens] * sqrt(d_model)`` (Section 3.4).
        positional: ``(N, D)`` the positional encoding added (Section 3.5).
        input: ``(B, N, D)`` ``scaled + positional``, the first layer's input.
        layers: one :class:`LayerTrace` per layer.
        final_norm: ``(B, N, D)`` pre-LN's final LayerNorm of the stack, None for post-LN (the paper).
        output: ``(B, N, D)`` the stack's output (the encoder's memory; what the decoder feeds the final linear).
    """

    tokens: Tensor
    embedding: Tensor
    scaled: Tensor
    positional: Tensor
    input: Tensor
    layers: list[LayerTrace]
    final_norm: Tensor | None
    output: Tensor


@dataclass
class BlockTrace:
    """One teacher-forced pass, block by block (:func:`aiayn.calls.traced`).

    Attributes:
        encoder / decoder: :class:`StackTrace` of each side.
        log_probs: ``(B, T, V)`` the log-softmax of the final linear's output (Section 3.4).
        target: ``(B, T)`` int64 ids predicted.
        norm_first: pre-LN model (else the paper's post-LN).
    """

    encoder: StackTrace
    decoder: StackTrace
    log_probs: Tensor
    target: Tensor
    norm_first: bool
    meta: dict = field(default_factory=dict)


class _Recorder:
    """What the hooks of :func:`capture` saw, per module, in call order (encoder before decoder)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.inputs: dict[int, list[Tensor]] = {}
        self.outputs: dict[int, list[Tensor]] = {}

    def pre(self, module: nn.Module, args: tuple) -> None:
        if threading.get_ident() == self.thread:
            self.inputs.setdefault(id(module), []).append(args[0].detach().float())

    def post(self, module: nn.Module, args: tuple, output) -> None:
        if threading.get_ident() == self.thread:
            out = output[0] if isinstance(output, tuple) else output
            out = getattr(out, "output", out)  # attention modules return (AttentionOutput, cache)
            self.outputs.setdefault(id(module), []).append(out.detach().float())

    def input(self, module: nn.Module, i: int = 0) -> Tensor:
        return self.inputs[id(module)][i]

    def output(self, module: nn.Module, i: int = 0) -> Tensor:
        return self.outputs[id(module)][i]


def _watched(model: nn.Module) -> tuple[list[nn.Module], list[nn.Module]]:
    """``(modules whose input is kept, modules whose output is kept)``."""
    names = ["embedding", "src_embedding", "tgt_embedding", "positions", "src_positions", "tgt_positions", "dropout",
             "encoder_norm", "decoder_norm"]
    outputs = [getattr(model, n) for n in names if hasattr(model, n)]
    inputs = []
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        blocks = [layer, layer.ffn, layer.norm1, layer.norm2, layer.self_attn]
        if hasattr(layer, "cross_attn"):
            blocks += [layer.cross_attn, layer.norm3]
        inputs += blocks + [layer.ffn.w_2]
        outputs += blocks
    return inputs, outputs


@contextlib.contextmanager
def capture(model: nn.Module) -> Iterator[_Recorder]:
    """Hooks on ``model``'s blocks for the ``with`` body (one forward pass), removed on leaving it."""
    rec = _Recorder()
    handles = []
    inputs, outputs = _watched(model)
    try:
        for m in inputs:
            handles.append(m.register_forward_pre_hook(rec.pre))
        for m in outputs:
            handles.append(m.register_forward_hook(rec.post))
        yield rec
    finally:
        for h in handles:
            h.remove()


def _layer(rec: _Recorder, layer: nn.Module, norm_first: bool) -> LayerTrace:
    names = ["self_attn", "cross_attn", "ffn"] if hasattr(layer, "cross_attn") else ["self_attn", "ffn"]
    norms = [getattr(layer, f"norm{j + 1}") for j in range(len(names))]
    x_in, x_out = rec.input(layer), rec.output(layer)
    subs = []
    for j, (name, norm) in enumerate(zip(names, norms)):
        module = getattr(layer, name)
        if norm_first:
            stream_in = rec.input(norm)
            stream_out = rec.input(norms[j + 1]) if j + 1 < len(names) else x_out
        else:
            stream_in = x_in if j == 0 else rec.output(norms[j - 1])
            stream_out = rec.output(norm)
        hidden = rec.input(layer.ffn.w_2) if name == "ffn" else None
        subs.append(SublayerTrace(name, stream_in, rec.input(module), rec.output(module), rec.input(norm),
                                  rec.output(norm), stream_out, hidden))
    return LayerTrace(x_in, x_out, subs)


def _stack(rec: _Recorder, model: nn.Module, side: int, tokens: Tensor) -> StackTrace:
    """``side`` 0: encoder, 1: decoder."""
    cfg = model.cfg
    if cfg.share_embeddings:
        emb = rec.output(model.embedding, side)
    else:
        emb = rec.output(model.src_embedding if side == 0 else model.tgt_embedding)
    if cfg.positional == "sinusoidal":
        pe = rec.output(model.positions, side)
    else:
        pe = rec.output(model.src_positions if side == 0 else model.tgt_positions)
    layers = model.encoder_layers if side == 0 else model.decoder_layers
    traced = [_layer(rec, layer, cfg.norm_first) for layer in layers]
    final = None
    if cfg.norm_first:
        final = rec.output(model.encoder_norm if side == 0 else model.decoder_norm)
    output = final if final is not None else traced[-1].output
    return StackTrace(tokens, emb, emb * math.sqrt(cfg.d_model), pe, rec.output(model.dropout, side), traced, final,
                      output)


def assemble(rec: _Recorder, model: nn.Module, src: Tensor, decoder_input: Tensor, target: Tensor,
             log_probs: Tensor) -> BlockTrace:
    """The :class:`BlockTrace` of what ``rec`` saw during one forward pass of ``model`` over ``src`` /
    ``decoder_input``."""
    return BlockTrace(_stack(rec, model, 0, src), _stack(rec, model, 1, decoder_input), log_probs, target,
                      bool(model.cfg.norm_first))


@dataclass
class LensTable:
    """The logit lens of one sentence (:meth:`aiayn.Translator.logit_lens`), as the page shows it.

    Attributes:
        ids: ``(L, T, k)`` int64 numpy, the k most probable next pieces each decoder layer's output gives at each
            step, most probable first; probs: ``(L, T, k)`` float32 numpy, their probabilities.
        pieces: ``L`` lists of ``T`` lists of ``k`` pieces (``ids`` as text).
        target_probs: ``(L, T)`` float32 numpy, each layer's probability of the piece that came next.
        output_tokens: the ``T`` pieces predicted; decoder_input_tokens: the ``T`` pieces fed.
        trace: the :class:`BlockTrace` it was read from.
    """

    ids: "object"
    probs: "object"
    pieces: list[list[list[str]]]
    target_probs: "object"
    output_tokens: list[str]
    decoder_input_tokens: list[str]
    trace: BlockTrace = field(repr=False)
