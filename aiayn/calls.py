"""The one owner of model calls: how text becomes ids, how the decoder input is built, which precision a pass
runs in, and the teacher-forced pass itself.

Every caller that runs the model on given ids goes through here: :meth:`aiayn.Translator.force` and
:meth:`~aiayn.Translator.translate_batch`, :mod:`aiayn.analysis.explain`, head ablation and the sweep
(:mod:`aiayn.sweep`), the attention-history recorder (:mod:`aiayn.training.history`), validation
(:func:`aiayn.training.loop.validate`) and, through explain, the decode queue (:mod:`aiayn.serving`). One place
means one answer to three questions that five copies once answered differently:

* **Truncation.** A source or a reference becomes its SentencePiece ids cut to ``cfg.max_len - 1`` pieces,
  then ``</s>``: at most ``max_len`` ids, the longest sequence the model accepts (:func:`cut`).
* **The decoder input** is the target shifted right behind ``cfg.decoder_start_id`` (Section 3.1: "the output
  embeddings are offset by one position"): ``<s>`` for our models, ``<pad>`` for an imported Opus-MT model
  (``decoder_start="pad"``; Hugging Face's ``shift_tokens_right`` in ``modeling_marian.py``)
  (:func:`decoder_input_ids`, :func:`shift_right`).
* **Precision.** bf16 autocast on CUDA when a caller asks for it, float32 otherwise (:func:`autocast_for`);
  results leave in float32.

:func:`traced` is the teacher-forced pass with every block's tensors (:mod:`aiayn.block_trace`) and
:func:`logit_lens` reads what each decoder layer would predict from such a trace.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

import numpy as np
import torch
from torch import Tensor

from .data.batching import pad_ids
from .translation import clean_text

if TYPE_CHECKING:  # annotations only
    from .block_trace import BlockTrace
    from .model.config import TransformerConfig
    from .model.maps import AttentionMaps
    from .model.transformer import Transformer


class Encoded(NamedTuple):
    """A text as the model is fed it.

    Attributes:
        ids: piece ids ending with ``</s>``, at most ``cfg.max_len`` of them.
        truncated: the text had more than ``cfg.max_len - 1`` pieces and was cut.
        text: the cleaned text (:func:`aiayn.translation.clean_text`) that was tokenised.
    """

    ids: list[int]
    truncated: bool
    text: str


class Forced(NamedTuple):
    """The result of :func:`teacher_forced`.

    Attributes:
        log_probs: ``(B, T, V)`` float32 natural-log next-piece probabilities (log-softmax of the output layer,
            Section 3.4); row t is the distribution of ``target[:, t]`` after the decoder was fed
            ``decoder_input[:, : t + 1]``. Rows at padded target positions are computed but meaningless.
        target: ``(B, T)`` int64 ids predicted (padded with ``pad_id``).
        decoder_input: ``(B, T)`` int64 ids fed (:func:`shift_right` of ``target``).
        maps: :class:`~aiayn.model.maps.AttentionMaps` (float32, on the model's device; encoder
            ``(L, B, H, S, S)``, decoder ``(L, B, H, T, T)``, cross ``(L, B, H, T, S)``) or None when not asked for.
    """

    log_probs: Tensor
    target: Tensor
    decoder_input: Tensor
    maps: "AttentionMaps | None"

    def target_log_probs(self, pad_id: int) -> Tensor:
        """``(B, T)`` float32 ``log p(target[b, t])``, 0.0 at padded target positions (``pad_id``)."""
        gathered = self.log_probs.gather(-1, self.target[..., None]).squeeze(-1)
        return gathered.masked_fill(self.target == pad_id, 0.0)


# -- text -> ids ------------------------------------------------------------------------------------------------
def cut(ids: Sequence[int], max_len: int, eos_id: int) -> tuple[list[int], bool]:
    """``(ids[: max_len - 1] + [eos_id], truncated?)``: the one truncation rule of every source and reference, for a
    model that accepts ``max_len`` positions (``cfg.max_len``)."""
    limit = max_len - 1
    return [int(i) for i in ids[:limit]] + [eos_id], len(ids) > limit


def encode_source(tokenizer: Any, cfg: "TransformerConfig", text: Any) -> Encoded:
    """A source text as the encoder is fed it: cleaned, tokenised, cut by :func:`cut`.

    Raises:
        ValueError: ``text`` is not a string or is empty / whitespace-only.
    """
    cleaned = clean_text(text)
    ids, truncated = cut(tokenizer.encode(cleaned), cfg.max_len, cfg.eos_id)
    return Encoded(ids, truncated, cleaned)


def encode_target(tokenizer: Any, text: str) -> list[int]:
    """Ids of target-language text without ``</s>``: ``tokenizer.encode_target`` where the tokenizer cuts each
    language with its own model (Marian's ``target.spm``), else ``tokenizer.encode`` (a joint vocabulary,
    Section 5.1, cuts both sides alike)."""
    encode = getattr(tokenizer, "encode_target", None) or tokenizer.encode
    return [int(i) for i in encode(text)]


def encode_reference(tokenizer: Any, cfg: "TransformerConfig", text: Any) -> Encoded:
    """A reference translation as the decoder predicts it (teacher forcing): cleaned, cut by the target side's
    model (:func:`encode_target`), cut to ``max_len`` with ``</s>`` as :func:`encode_source` does (the decoder is
    fed :func:`decoder_input_ids` of these ids).

    Raises:
        ValueError: ``text`` is not a string or is empty / whitespace-only.
    """
    cleaned = clean_text(text)
    ids, truncated = cut(encode_target(tokenizer, cleaned), cfg.max_len, cfg.eos_id)
    return Encoded(ids, truncated, cleaned)


def encode_prefix(tokenizer: Any, cfg: "TransformerConfig", text: Any) -> Encoded:
    """A forced start of the output (prefix-constrained decoding, the ``prefix`` of
    :meth:`aiayn.Translator.translate`) as the ids the decoder is made to emit: the cleaned text's target-side ids (:func:`encode_target`),
    no ``</s>`` (the same ids :meth:`~aiayn.Translator.prefix_ids` gives the cleaned text). ``truncated`` is False.

    Raises:
        ValueError: ``text`` not a string or empty / whitespace-only; a piece the vocabulary lacks (``<unk>``: an
            imported Opus-MT vocabulary has no byte fallback) or a special piece (``</s>``, ``<pad>``, the start
            piece typed as text), naming the words; more than ``cfg.max_len - 1`` pieces (the decoder's positions
            minus the start piece).
    """
    cleaned = clean_text(text)
    ids = encode_target(tokenizer, cleaned)
    special = {getattr(tokenizer, "unk_id", None), cfg.eos_id, *cfg.never_predicted}  # never_predicted: pad, start piece
    if special.intersection(ids):
        words = [w for w in cleaned.split() if special.intersection(encode_target(tokenizer, w))]
        raise ValueError(f"the vocabulary has no ordinary piece for {', '.join(repr(w) for w in words) or repr(cleaned)}"
                         " (an unknown character or a special piece such as </s>)")
    if len(ids) > cfg.max_len - 1:
        raise ValueError(f"it has {len(ids)} pieces; the model's output holds at most {cfg.max_len - 1}")
    return Encoded(ids, False, cleaned)


def encode_many(tokenizer: Any, cfg: "TransformerConfig", texts: Sequence[str]) -> list[list[int]]:
    """Ids of already clean corpus lines (validation), each cut by :func:`cut`, not cleaned (an empty line gives
    ``[eos_id]`` alone). ``tokenizer.encode_batch`` is used when it exists."""
    rows = tokenizer.encode_batch(list(texts)) if hasattr(tokenizer, "encode_batch") else [tokenizer.encode(t) for t in texts]
    return [cut(r, cfg.max_len, cfg.eos_id)[0] for r in rows]


# -- the decoder input ------------------------------------------------------------------------------------------
def decoder_input_ids(cfg: "TransformerConfig", target: Sequence[int]) -> list[int]:
    """``[cfg.decoder_start_id] + target[:-1]``: what the decoder is fed to predict ``target`` (T,) (Section 3.1)."""
    return [cfg.decoder_start_id] + [int(i) for i in list(target)[:-1]]


def shift_right(cfg: "TransformerConfig", target: Tensor) -> Tensor:
    """:func:`decoder_input_ids` of a padded batch: ``target`` ``(B, T)`` int64 (``pad_id`` after each row's end)
    -> ``(B, T)``: ``decoder_start_id`` then the row shifted right, ``pad_id`` wherever ``target`` is padding
    (so the maps' target lengths count the real positions only). The training collate
    (:func:`aiayn.training.loader.collate_buffer`) builds the same in numpy."""
    dec = torch.empty_like(target)
    dec[:, 0] = cfg.decoder_start_id
    dec[:, 1:] = target[:, :-1]
    return dec.masked_fill(target == cfg.pad_id, cfg.pad_id)


def batch(cfg: "TransformerConfig", rows: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> Tensor:
    """Id lists as one ``(B, max length)`` int64 tensor on ``device``, padded with ``cfg.pad_id``."""
    return torch.from_numpy(pad_ids([list(r) for r in rows], cfg.pad_id)).to(device)


# -- precision --------------------------------------------------------------------------------------------------
def autocast_for(device: torch.device | str, enabled: bool = True) -> contextlib.AbstractContextManager:
    """The precision of an inference pass: bf16 autocast on CUDA when ``enabled``, else float32 (a disabled
    autocast, also on the CPU, where bf16 is only faster on some CPUs and changes the maps).

    The Translator asks for it (``enabled=True``) so that the explorer, ablation and the sweep see the same
    numbers on the same device; training-time recorders and validation pass ``enabled=False`` (float32 maps
    comparable across runs and machines). Training's own mixed precision is :func:`aiayn.training.loop.autocast_for`.
    """
    dev = torch.device(device)
    if enabled and dev.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast(dev.type if dev.type in ("cpu", "cuda") else "cpu", enabled=False)


# -- the teacher-forced pass ------------------------------------------------------------------------------------
def teacher_forced(model: "Transformer", src: Tensor, target: Tensor, *, head_mask: Any = None,
                   return_attention: bool = False, return_scores: bool = False, amp: bool = False) -> Forced:
    """Feed ``target`` shifted right (:func:`shift_right`) to the decoder over ``src``, as in training
    (Section 3.1), under ``torch.inference_mode()``; the model's train/eval mode is not changed.

    Args:
        model: the :class:`~aiayn.model.transformer.Transformer`.
        src: ``(B, S)`` int64 source ids, each ending with ``</s>``, padded with ``pad_id``.
        target: ``(B, T)`` int64 ids to predict, each ending with ``</s>``, padded with ``pad_id``.
        head_mask: ``(3, L, H)`` head ablation mask (index 0 encoder, 1 decoder self, 2 cross attention; see
            :meth:`~aiayn.model.transformer.Transformer.check_head_mask`), or None.
        return_attention: also return the maps (the exact capture path); ``return_scores`` adds the
            pre-softmax scores.
        amp: bf16 autocast on CUDA (:func:`autocast_for`); log-probabilities and maps come back float32 anyway.

    Returns:
        :class:`Forced` on the model's device.

    Raises:
        ValueError: ``src`` / ``target`` malformed (shape, dtype, ids outside the vocabulary, longer than
            ``max_len``), a target with no position, a bad ``head_mask``.
    """
    if not isinstance(target, Tensor) or target.dim() != 2 or target.size(1) == 0:
        raise ValueError(f"target must be a (B, T) id tensor with T >= 1, got {getattr(target, 'shape', type(target))}")
    head_mask = model.check_head_mask(head_mask)
    dec = shift_right(model.cfg, target)
    capture = return_attention or return_scores
    with torch.inference_mode(), autocast_for(src.device, amp):
        out = model(src, dec, return_attention=capture, return_scores=return_scores, head_mask=head_mask)
        logits, maps = out if capture else (out, None)
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        if maps is not None:
            maps = maps.to(src.device)
    return Forced(log_probs, target, dec, maps)


def teacher_forced_ids(model: "Transformer", src_ids: Sequence[Sequence[int]], target_ids: Sequence[Sequence[int]],
                       **kwargs: Any) -> Forced:
    """:func:`teacher_forced` of id lists (sources and targets each ending with ``</s>``), padded into one batch on
    the model's device; keyword arguments as :func:`teacher_forced`.

    Raises:
        ValueError: different numbers of sources and targets, an empty target, and as :func:`teacher_forced`.
    """
    if len(src_ids) != len(target_ids):
        raise ValueError(f"{len(src_ids)} sources but {len(target_ids)} targets")
    if not len(target_ids) or any(len(t) == 0 for t in target_ids):
        raise ValueError("a target is empty: there is no position to predict")
    cfg, device = model.cfg, model.device
    return teacher_forced(model, batch(cfg, src_ids, device), batch(cfg, target_ids, device), **kwargs)


def pair_log_probs(model: "Transformer", tokenizer: Any, sources: Sequence[str], targets: Sequence[str], *,
                   head_mask: Any = None, batch_size: int | None = None) -> list[list[float]]:
    """``log p(piece)`` of every piece of each target (and its ``</s>``) given its source, teacher-forced: the texts
    encoded as :meth:`aiayn.translator.Translator.force` encodes them (:func:`encode_source`,
    :func:`encode_reference`), the decoder fed the model's start piece + the target shifted right, natural log of the
    output layer's softmax (Section 3.4). The one scorer of given (source, target) texts: the head sweep's reference
    log-probability and the reverse model's reranking sum its values.

    Args:
        sources, targets: texts, one target per source.
        head_mask: ``(3, L, H)`` head mask, or None.
        batch_size: pairs per forward pass (None: all in one).

    Returns:
        per pair, one float per target piece (float32 values), in input order.

    Raises:
        ValueError: unequal lengths, an empty or non-string text (names its pair), a bad ``batch_size`` or
            ``head_mask``.
    """
    sources, targets = list(sources), list(targets)
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    cfg = model.cfg
    src_ids, tgt_ids = [], []
    for i, (s, t) in enumerate(zip(sources, targets)):
        try:
            src_ids.append(encode_source(tokenizer, cfg, s).ids)
            tgt_ids.append(encode_reference(tokenizer, cfg, t).ids)
        except ValueError as exc:
            raise ValueError(f"pair {i}: {exc}") from None
    step = batch_size or max(1, len(src_ids))
    out: list[list[float]] = []
    for start in range(0, len(src_ids), step):
        rows = tgt_ids[start : start + step]
        with torch.inference_mode():  # floats out: no caller can use a graph, so none is built
            forced = teacher_forced_ids(model, src_ids[start : start + step], rows, head_mask=head_mask, amp=True)
            lp = forced.target_log_probs(cfg.pad_id).cpu().tolist()
        out += [[float(v) for v in row[: len(r)]] for row, r in zip(lp, rows)]
    return out


def probabilities(forced: Forced, lengths: Sequence[int]) -> list[np.ndarray]:
    """Per-sentence next-piece probabilities: ``exp(log_probs)`` of row i cut to its ``lengths[i]`` real
    positions, a list of ``(T_i, V)`` float32 numpy arrays on the CPU."""
    probs = forced.log_probs.exp().cpu().numpy()
    return [probs[i, :n] for i, n in enumerate(lengths)]


# -- one pass, every block ----------------------------------------------------------------------------------------
def traced(model: "Transformer", src: Tensor, target: Tensor, *, amp: bool = False) -> "BlockTrace":
    """:func:`teacher_forced` with every block's tensors captured (:mod:`aiayn.block_trace`: embeddings, x
    sqrt(d_model), + PE, each layer's sub-layers with their residual stream, LayerNorm and FFN activations). The
    hooks live for this call only and fire only in this thread.

    Args:
        model, src, target, amp: as :func:`teacher_forced` (``src`` ``(B, S)``, ``target`` ``(B, T)``).

    Returns:
        :class:`~aiayn.block_trace.BlockTrace` (float32, on the model's device).

    Raises:
        ValueError: as :func:`teacher_forced`.
    """
    from .block_trace import assemble, capture

    with capture(model) as rec:
        forced = teacher_forced(model, src, target, amp=amp)
    return assemble(rec, model, src, forced.decoder_input, target, forced.log_probs)


ATTENTION_SUBLAYERS = {"encoder": ("encoder", "self_attn"), "decoder": ("decoder", "self_attn"),
                       "cross": ("decoder", "cross_attn")}


def query_keys(model: "Transformer", trace: "BlockTrace", kind: str, layer: int) -> tuple[Tensor, Tensor]:
    """The queries and keys of every head of one attention sub-layer (Section 3.2.2: ``Q W_i^Q``, ``K W_i^K``), from
    what that sub-layer read in a traced pass (:func:`traced`): its own input for self-attention, the encoder's
    output (the memory) for the keys of encoder-decoder attention. ``q_i . k_j / sqrt(d_k)`` is the pre-softmax
    score of Eq. 1 (masked positions included: the mask is applied after).

    Args:
        model: the model the trace was taken of.
        trace: :class:`~aiayn.block_trace.BlockTrace`, batch ``B``.
        kind: ``"encoder"``, ``"decoder"`` (masked self-attention) or ``"cross"``.
        layer: 1-based layer index.

    Returns:
        ``(queries (B, H, N, d_k), keys (B, H, M, d_k))`` float32 on the CPU: N the attending positions (source
        for ``"encoder"``, decoder input otherwise), M the attended ones (source for ``"encoder"`` and ``"cross"``).

    Raises:
        ValueError: an unknown ``kind`` or a layer outside ``1..n_layers``.
    """
    if kind not in ATTENTION_SUBLAYERS:
        raise ValueError(f"kind must be one of {', '.join(ATTENTION_SUBLAYERS)}, got {kind!r}")
    if not 1 <= layer <= model.cfg.n_layers:
        raise ValueError(f"layer must be between 1 and {model.cfg.n_layers}, got {layer}")
    side, sub = ATTENTION_SUBLAYERS[kind]
    stack = trace.encoder if side == "encoder" else trace.decoder
    modules = model.encoder_layers if side == "encoder" else model.decoder_layers
    attention = getattr(modules[layer - 1], sub)
    x = stack.layers[layer - 1].sublayer(sub).sublayer_in
    memory = trace.encoder.output if kind == "cross" else x
    with torch.no_grad():  # the weights cast for this call only: the served model's modules are not touched
        w_q, w_k = attention.w_q, attention.w_k
        q = attention._split(torch.nn.functional.linear(x.float(), w_q.weight.float(), w_q.bias.float()))
        k = attention._split(torch.nn.functional.linear(memory.float(), w_k.weight.float(), w_k.bias.float()))
    return q.cpu(), k.cpu()


class LogitLens(NamedTuple):
    """What each decoder layer would predict (the logit lens, nostalgebraist 2020): the final linear and softmax
    (Section 3.4) applied to each layer's output, after the stack's final LayerNorm for pre-LN models (post-LN
    layer outputs are already normalised).

    Attributes:
        ids: ``(L, B, T, k)`` int64 the k most probable next pieces per layer and position, most probable first.
        probs: ``(L, B, T, k)`` float32 their probabilities.
        target_probs: ``(L, B, T)`` float32 each layer's probability of the piece that came next (``target``).
    """

    ids: Tensor
    probs: Tensor
    target_probs: Tensor


def logit_lens(model: "Transformer", trace: "BlockTrace", k: int = 5) -> LogitLens:
    """The :class:`LogitLens` of a :func:`traced` pass; the last layer's row is the model's own distribution.

    Raises:
        ValueError: ``k`` not a whole number in ``[1, vocab_size]``.
    """
    V = model.cfg.vocab_size
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= V:
        raise ValueError(f"k must be a whole number in [1, {V}], got {k!r}")
    with torch.inference_mode():
        hidden = torch.stack([layer.output for layer in trace.decoder.layers])  # (L, B, T, D)
        if model.cfg.norm_first:
            hidden = model.decoder_norm(hidden.to(model.decoder_norm.weight.dtype))
        weight_dtype = (model.embedding if model.cfg.share_embeddings else model.generator).weight.dtype
        probs = torch.softmax(model.project(hidden.to(weight_dtype)).float(), dim=-1)
        top = probs.topk(k, dim=-1)
        target = trace.target[None, ..., None].expand(probs.size(0), -1, -1, 1)
        return LogitLens(top.indices, top.values, probs.gather(-1, target).squeeze(-1))


# -- gradient attribution -----------------------------------------------------------------------------------------
class Attributed(NamedTuple):
    """The result of :func:`attribute` for one sentence pair.

    Attributes:
        source: ``(T, S)`` float64 attribution of each target piece's log-probability (row t: ``target[t]``) to
            each source piece's embedding.
        prefix: ``(T, T)`` float64 attribution to each decoder-input piece's embedding (``decoder_start`` then
            ``target[:-1]``); zero above the diagonal (the decoder is causal).
        log_prob: ``(T,)`` float64 ``log p(target[t])`` at the input (``f(x)``).
        baseline_log_prob: ``(T,)`` float64 the same at the baseline (``f(x')``; NaN for ``"grad_x_input"``).
        target: the ``T`` target ids; decoder_input: the ``T`` ids fed.
    """

    source: np.ndarray
    prefix: np.ndarray
    log_prob: np.ndarray
    baseline_log_prob: np.ndarray
    target: list
    decoder_input: list


ATTRIBUTION_METHODS = ("integrated_gradients", "grad_x_input")
ATTRIBUTION_BASELINES = ("zero", "pad")


def _embedding_function(model: "Transformer", src: Tensor, dec: Tensor, target: Tensor, foil: Tensor | None = None,
                        positions: Sequence[int] | None = None):
    """``f([src_e (m, S, D), dec_e (m, T, D)]) -> (m, T)`` ``log p(target[t])`` of the model run with its
    embedding tables' outputs ``E[ids]`` replaced by the given tensors (then x sqrt(d_model) + PE inside
    :meth:`~aiayn.model.transformer.Transformer.embed`, as always); with ``foil`` ``(1, T)``, ``log p(target[t]) -
    log p(foil[t])`` (0 where they are the same piece); with ``positions``, only those columns (one backward pass
    each in :func:`aiayn.analysis.attribution.gradients`). The replacement is a forward hook that lives
    for one call of f and fires only in its thread; encode runs before decode, so the first table call gets the
    source and the second the decoder input (one shared table or two)."""
    import threading

    tables = list({id(m): m for m in ([model.embedding] if model.cfg.share_embeddings
                                       else [model.src_embedding, model.tgt_embedding])}.values())

    def f(xs: list) -> Tensor:
        queue, thread = list(xs), threading.get_ident()

        def hook(module, args, output):
            if threading.get_ident() != thread:
                return None
            new = queue.pop(0)
            if new.shape != output.shape:
                raise RuntimeError(f"embedding replacement {tuple(new.shape)} for an output {tuple(output.shape)}")
            return new.to(output.dtype)

        handles = [t.register_forward_hook(hook) for t in tables]
        m = xs[0].size(0)
        try:
            with torch.enable_grad(), autocast_for(src.device, False):
                logits = model(src.expand(m, -1), dec.expand(m, -1))
        finally:
            for h in handles:
                h.remove()
        if queue:
            raise RuntimeError("the model did not call its embedding tables once per side")
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        value = log_probs.gather(-1, target.expand(m, -1)[..., None]).squeeze(-1)
        if foil is not None:
            value = value - log_probs.gather(-1, foil.expand(m, -1)[..., None]).squeeze(-1)
        return value if positions is None else value[:, list(positions)]

    return f


def attribute(model: "Transformer", src_ids: Sequence[int], target_ids: Sequence[int], *,
              method: str = "integrated_gradients", steps: int = 128, baseline: str = "zero",
              foil_ids: Sequence[int] | None = None, positions: Sequence[int] | None = None) -> Attributed:
    """Attribution of each target piece's log-probability (teacher-forced, as :func:`teacher_forced`) to the
    source and decoder-input embeddings (:mod:`aiayn.analysis.attribution`); with ``foil_ids``, of the
    contrast ``log p(target[t]) - log p(foil[t])``: why the model prefers this piece to that one at the same step
    (contrastive explanations, Yin and Neubig 2022, "Interpreting Language Models with Contrastive Explanations").

    The attributed inputs are the embedding outputs ``E[ids] sqrt(d_model)`` *before* the positional encoding
    is added (Section 3.4, 3.5): PE stays fixed along the path, so a zero baseline is "positions only". Gradient
    x input is invariant to the sqrt(d_model) factor; integrated gradients scale the same straight line.
    float32 throughout, gradients enabled; the model's parameters get no ``.grad``.

    Args:
        model: the Transformer (its train/eval mode is not changed: call it in eval mode).
        src_ids, target_ids: one source and one target, each ending with ``</s>``, at most ``max_len`` ids.
        method: ``"integrated_gradients"`` (Sundararajan et al. 2017) or ``"grad_x_input"``.
        steps: integrated gradients' trapezoidal intervals (``steps + 1`` forward-backward points, each one
            backward pass per target piece).
        baseline: ``"zero"`` (x' = 0) or ``"pad"`` (every piece's embedding replaced by ``<pad>``'s).
        foil_ids: one piece per target position, the alternative each is contrasted with (the target's own
            piece where no contrast is wanted: that step's value and attribution are 0); None: no contrast.
        positions: attribute only these target positions (one backward pass each instead of one per target
            piece); the other rows of ``source`` and ``prefix`` are 0 and their ``log_prob`` NaN. None: all.

    Returns:
        :class:`Attributed` (NumPy, CPU); with ``foil_ids`` its ``log_prob`` (and ``baseline_log_prob``) hold the
        log-probability differences.

    Raises:
        ValueError: unknown method or baseline, bad ``steps``, ids malformed (as :func:`teacher_forced`),
            ``foil_ids`` not one valid piece per target position, ``positions`` empty or outside the target.
    """
    from .analysis import attribution as at

    if method not in ATTRIBUTION_METHODS:
        raise ValueError(f"unknown attribution method {method!r}; choose one of {ATTRIBUTION_METHODS}")
    if baseline not in ATTRIBUTION_BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose one of {ATTRIBUTION_BASELINES}")
    if not len(src_ids) or not len(target_ids):
        raise ValueError("attribution needs a non-empty source and target")
    cfg, device = model.cfg, model.device
    src, target = batch(cfg, [src_ids], device), batch(cfg, [target_ids], device)
    model._check_tokens(src, "src")
    model._check_tokens(target, "tgt")
    foil = None
    if foil_ids is not None:
        if len(foil_ids) != len(target_ids) or not all(0 <= int(i) < cfg.vocab_size for i in foil_ids):
            raise ValueError(f"foil_ids must hold one piece id in [0, {cfg.vocab_size}) per target position "
                             f"({len(target_ids)}), got {len(foil_ids)}")
        foil = torch.tensor([[int(i) for i in foil_ids]], dtype=torch.long, device=device)
    if positions is not None:
        positions = [int(t) for t in positions]
        if not positions or not all(0 <= t < len(target_ids) for t in positions):
            raise ValueError(f"positions must be target positions 0..{len(target_ids) - 1}, got {positions}")
    dec = shift_right(cfg, target)
    src_table = model.embedding if cfg.share_embeddings else model.src_embedding
    tgt_table = model.embedding if cfg.share_embeddings else model.tgt_embedding
    with torch.no_grad():
        inputs = [src_table(src[0]).float(), tgt_table(dec[0]).float()]
        pads = [src_table.weight[cfg.pad_id].float(), tgt_table.weight[cfg.pad_id].float()]
    f = _embedding_function(model, src, dec, target, foil, positions)
    if method == "grad_x_input":
        res = at.grad_times_input(f, inputs)
    else:
        bases = [torch.zeros_like(x) if baseline == "zero" else p.expand_as(x) for x, p in zip(inputs, pads)]
        res = at.integrated_gradients(f, inputs, bases, steps)
    scores, value, base = res.scores, res.value, res.baseline_value
    if positions is not None:  # back to one row per target position
        T = len(target_ids)
        scores = [np.zeros((T,) + a.shape[1:]) for a in scores]
        value, base = np.full(T, np.nan), np.full(T, np.nan)
        for a, b in zip(scores, res.scores):
            a[positions] = b
        value[positions], base[positions] = res.value, res.baseline_value
    return Attributed(scores[0], scores[1], value, base, [int(i) for i in target_ids], dec[0].tolist())


def norm_based_maps(model: "Transformer", src: Tensor, target: Tensor) -> dict[str, np.ndarray]:
    """Norm-based attention (Kobayashi et al. 2020; :func:`aiayn.analysis.norms.norm_based`) of every kind, layer
    and head of a teacher-forced pass: the weights of :func:`teacher_forced` and each layer's key/value input
    from :func:`traced` (float32 passes, results float64 on the CPU).

    Args:
        model, src, target: as :func:`teacher_forced`.

    Returns:
        ``{"encoder": (L, B, H, S, S), "decoder": (L, B, H, T, T), "cross": (L, B, H, T, S)}`` float64; rows of
        padded positions are computed but meaningless, padded keys have zero weight.

    Raises:
        ValueError: as :func:`teacher_forced`.
    """
    from .analysis.norms import norm_based

    maps = teacher_forced(model, src, target, return_attention=True).maps
    trace = traced(model, src, target)

    def params(att) -> tuple:
        return tuple(t.detach().float().cpu().numpy() for t in (att.w_v.weight, att.w_v.bias, att.w_o.weight))

    def inputs(stack) -> np.ndarray:
        return torch.stack([layer.sublayer("self_attn").sublayer_in for layer in stack.layers]).cpu().numpy()

    memory = trace.encoder.output.cpu().numpy()
    H = model.cfg.n_heads
    return {
        "encoder": norm_based(maps.encoder.float().cpu().numpy(), inputs(trace.encoder),
                              [params(layer.self_attn) for layer in model.encoder_layers], H),
        "decoder": norm_based(maps.decoder.float().cpu().numpy(), inputs(trace.decoder),
                              [params(layer.self_attn) for layer in model.decoder_layers], H),
        "cross": norm_based(maps.cross.float().cpu().numpy(), np.stack([memory] * len(model.decoder_layers)),
                            [params(layer.cross_attn) for layer in model.decoder_layers], H),
    }
