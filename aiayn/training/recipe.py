"""The paper's training recipe as numbers (Section 5): the learning rate of Equation 3 (Section 5.3), the
label-smoothed loss (Section 5.4) and :class:`TrainConfig`, every setting that defines a run (batch size in
tokens, Section 5.1; Adam beta1 = 0.9, beta2 = 0.98, eps = 1e-9 and warmup_steps, Section 5.3; epsilon_ls,
Section 5.4). Imports only torch, never the training loop, so the app's lessons can draw the schedule and the
smoothed target cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


#: the learning-rate decays a run may put on top of Equation 3 (``TrainConfig.lr_decay``): none (the paper's
#: schedule), or linear to zero at ``max_steps`` (a cooldown)
LR_DECAYS = ("none", "linear")


def noam_lr(step: int, d_model: int, warmup_steps: int, lr_scale: float = 1.0, *, decay: str = "none",
            max_steps: int = 0) -> float:
    """Equation 3 (Section 5.3): ``lrate = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``;
    with ``decay="linear"`` times ``(max_steps - step + 1) / max_steps``, which falls linearly to ``1 / max_steps``
    at the last step (not in the paper: a cooldown to zero, the decay phase of warmup-stable-decay schedules; a
    linear cooldown matches a cosine schedule, Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond
    Fixed Training Durations"). It is meant for a warm start that goes on from a trained model, whose Equation-3
    rate has stopped falling usefully.

    Args:
        step: optimizer step, counted from 1.
        d_model: model width (the paper: 512).
        warmup_steps: steps of linear increase (the paper: 4000).
        lr_scale: factor on the whole schedule (1.0 = the paper's).
        decay: one of :data:`LR_DECAYS`.
        max_steps: the run's last step (``TrainConfig.max_steps``); used by ``decay="linear"`` only.

    Returns:
        The learning rate (a Python float) for Adam at ``step``.

    Raises:
        ValueError: ``step < 1`` or ``warmup_steps < 1``; an unknown ``decay``; ``decay="linear"`` with
            ``max_steps < 1`` or ``step > max_steps``.
    """
    if step < 1 or warmup_steps < 1:
        raise ValueError(f"step and warmup_steps must be >= 1, got step={step}, warmup_steps={warmup_steps}")
    if decay not in LR_DECAYS:
        raise ValueError(f"the learning-rate decay must be one of {', '.join(LR_DECAYS)}, got {decay!r}")
    lr = lr_scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
    if decay == "linear":
        if not 1 <= step <= max_steps:
            raise ValueError(f"a linear decay needs 1 <= step <= max_steps, got step={step}, max_steps={max_steps}")
        lr *= (max_steps - step + 1) / max_steps
    return lr


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon_ls: float,
                        pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy against the smoothed target ``q = (1 - epsilon_ls) * onehot(y) + epsilon_ls / V``
    (Section 5.4, Szegedy et al. 2016), summed over non-pad positions, in float32 whatever the dtype of ``logits``:
    ``F.cross_entropy`` with ``label_smoothing`` (the same eps / V convention) on a GPU, the same loss 256 rows at a
    time on a CPU (:class:`_ChunkedSmoothedCE`; its gradient comes back in the dtype of ``logits``). With
    ``epsilon_ls = 0`` it is the plain negative log-likelihood (what validation reports).

    Args:
        logits: ``(B, T, V)`` float (any float dtype).
        target: ``(B, T)`` int64; ``pad_id`` positions are ignored.
        epsilon_ls: smoothing mass in [0, 1) (the paper: 0.1).
        pad_id: the padding id.

    Returns:
        ``(loss, n_tokens)``: the smoothed loss sum (float32 scalar in nats, differentiable) and the number of
        non-pad target tokens (int64 scalar tensor on the device of ``target``, so that no GPU sync is forced;
        call ``int()`` on it when a Python number is needed).
    """
    flat, tgt = logits.reshape(-1, logits.shape[-1]), target.reshape(-1)
    if flat.device.type == "cpu":
        loss = _ChunkedSmoothedCE.apply(flat, tgt, float(epsilon_ls), int(pad_id))
    else:  # on a GPU the fused kernel of F.cross_entropy is already one pass
        loss = F.cross_entropy(flat.float(), tgt, ignore_index=pad_id, label_smoothing=epsilon_ls, reduction="sum")
    return loss, (target != pad_id).sum()


#: rows of logits :class:`_ChunkedSmoothedCE` converts and reduces at a time, in one float32 block it reuses
#: (256 x 8,000 is 8 MB; a fresh block for every chunk, or one of 131 MB for all rows, costs its page faults)
_CE_CHUNK_ROWS = 256


class _ChunkedSmoothedCE(torch.autograd.Function):
    """``F.cross_entropy(x.float(), y, ignore_index=pad, label_smoothing=eps, reduction="sum")`` for ``x`` ``(N, V)``
    on a CPU, a block of rows at a time: per row ``logsumexp(x) - (1 - eps) x_y - (eps / V) sum_v x_v`` (the same
    smoothed target ``q``), and the gradient ``softmax(x) - q`` written straight into ``x``'s dtype. It never holds a
    float32 copy, a log-softmax or its gradient of the whole ``(N, V)`` block (each 131 MB at 4,096 x 8,000), which
    F.cross_entropy writes and reads on bf16 logits: docs/training.md, "Session 18: a VM with AMX"."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor, eps: float, pad: int) -> torch.Tensor:
        n, v = x.shape
        keep = y != pad
        y_safe = torch.where(keep, y, 0).unsqueeze(1)  # the pad id may lie outside [0, V)
        lse = torch.empty(n, dtype=torch.float32)
        rows = torch.empty(n, dtype=torch.float32)
        work = torch.empty(min(n, _CE_CHUNK_ROWS), v, dtype=torch.float32)  # one block for every chunk
        for i in range(0, n, _CE_CHUNK_ROWS):
            sl = slice(i, i + _CE_CHUNK_ROWS)
            xf = work[: x[sl].shape[0]].copy_(x[sl])  # a copy, never a view of x: it is overwritten below
            x_y = xf.gather(1, y_safe[sl]).squeeze(1)
            x_sum = xf.sum(dim=-1)
            m = xf.amax(dim=-1, keepdim=True).clamp_(min=torch.finfo(torch.float32).min)
            lse_i = xf.sub_(m).exp_().sum(dim=-1).log_().add_(m.squeeze(1))
            lse[sl] = lse_i
            rows[sl] = lse_i - (1.0 - eps) * x_y - (eps / v) * x_sum
        ctx.save_for_backward(x, y_safe, keep, lse)
        ctx.eps = eps
        return torch.where(keep, rows, 0.0).sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, y_safe, keep, lse = ctx.saved_tensors
        n, v = x.shape
        eps = ctx.eps
        scale = torch.where(keep, grad.float(), 0.0).unsqueeze(1)
        out = torch.empty_like(x)
        work = torch.empty(min(n, _CE_CHUNK_ROWS), v, dtype=torch.float32)
        for i in range(0, n, _CE_CHUNK_ROWS):
            sl = slice(i, i + _CE_CHUNK_ROWS)
            g = work[: x[sl].shape[0]].copy_(x[sl]).sub_(lse[sl].unsqueeze(1)).exp_().sub_(eps / v)
            g.scatter_add_(1, y_safe[sl], torch.full((g.shape[0], 1), eps - 1.0))
            out[sl] = g.mul_(scale[sl])
        return out, None, None, None


#: the implementations of Adam a run may use (``TrainConfig.adam_impl``): PyTorch's fused kernel (one per parameter
#: for the whole update), its multi-tensor ``foreach`` ops, or its per-tensor reference loop; the same update rule
ADAM_IMPLS = ("fused", "foreach", "loop")


#: the parameters whose initial values :func:`scale_residual_init` scales: the value and output projections of every
#: attention (W^V, W^O, Section 3.2.2) and the second FFN matrix (W_2, Eq. 2), the weights a residual branch ends in
RESIDUAL_BRANCH_WEIGHTS = ("w_v.weight", "w_o.weight", "w_2.weight")


def deepnet_beta(n_layers: int) -> float:
    """``(8 N)^-1/4``: the initial down-scaling DeepNet gives the residual branches of an N-layer encoder-decoder
    (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", the decoder's beta); 0.380 for N = 6.

    Raises:
        ValueError: ``n_layers`` < 1.
    """
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    return (8 * n_layers) ** -0.25


@torch.no_grad()
def scale_residual_init(model: torch.nn.Module, scale: float) -> int:
    """Multiply the initial ``W^V``, ``W^O`` (every attention) and ``W_2`` (every FFN) of ``model`` by ``scale``, in
    place; returns how many matrices were scaled.

    The forward function stays the paper's (post-LN ``LayerNorm(x + Sublayer(x))``, Section 3.1): only the starting
    point changes, so that each residual branch adds little to x at first. The paper does not say how it
    initialised; Xavier (tensor2tensor's) with N = 6 post-LN sat on the unigram plateau in our short runs, while
    this scaling (DeepNet's beta, :func:`deepnet_beta`, without its up-weighting of x) trained: docs/training.md.

    Raises:
        ValueError: ``scale`` not a positive finite number.
    """
    if not (scale > 0 and scale < float("inf")):
        raise ValueError(f"residual_init_scale must be a positive number, got {scale!r}")
    n = 0
    for name, p in model.named_parameters():
        if name.endswith(RESIDUAL_BRANCH_WEIGHTS):
            p.mul_(scale)
            n += 1
    return n


@dataclass
class TrainConfig:
    """Everything that defines a training run (stored as ``train_config.json`` in the run directory).

    Paper values where the paper gives one: Adam betas (0.9, 0.98) and eps 1e-9, warmup_steps 4000
    (Section 5.3), epsilon_ls 0.1 (Section 5.4), about 25,000 target tokens a step (Section 5.1).
    """

    data_dir: str
    run_dir: str
    direction: str = "en-de"
    preset: str = "base"
    model_overrides: dict[str, Any] = field(default_factory=dict)
    max_tokens: int = 4096  # per micro-batch (padded source or target tokens)
    tokens_per_step: int = 25000  # target tokens a step gathers via accumulation (paper ~25k)
    accumulation: int = 0  # micro-batches per step and rank; 0 = derive from tokens_per_step
    warmup_steps: int = 4000
    lr_scale: float = 1.0
    epsilon_ls: float = 0.1
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    max_steps: int = 100000
    max_epochs: int = 1000
    max_minutes: float = 0.0  # 0 = no time limit
    seed: int = 1234
    valid_every: int = 1000
    valid_bleu_sentences: int = 200
    valid_beam_size: int = 4
    save_every: int = 1000
    keep: int = 5
    compile: bool = False
    amp: bool = True  # bf16 autocast on CUDA
    max_len: int = 128  # drop training pairs longer than this (pieces)
    threads: int = 0  # intra-op threads; 0 = on a CPU, decided at the start from the load (loop.auto_threads)
    upsample_sentences: int = 1  # repeat full-sentence pairs (both sides, aiayn.data.is_sentence) this many times
    amp_cpu: bool | None = None  # bf16 autocast on CPU; None = where oneDNN runs bf16 natively (AVX512-BF16, AMX)
    init_from: str = ""  # warm start: weights (only) of a run, run state or checkpoint directory; "" = random init
    init_stack: bool = False  # warm start of a deeper model: init_from's layers copied on top of themselves (stacking)
    record_attention: bool = True  # attention of a few curated sentences at every saved state (.history)
    pad_multiple: int | None = None  # round batch widths up to this (None: 8 on CUDA or compiled, 1 on CPU eager)
    prefetch: int = 2  # steps collated ahead by the loader thread (0 = in the training thread)
    residual_init_scale: float = 1.0  # x on W_V, W_O, W_2 at a fresh start (1 = plain Xavier; scale_residual_init)
    token_cache: str = ""  # token id cache folder; "" = {data_dir}/cache, "off" = tokenise in memory every start
    adam_impl: str = "fused"  # Adam's implementation: "fused", "foreach" or "loop" (ADAM_IMPLS; the same update rule)
    dropout_impl: str = "words"  # dropout's mask on a CPU: "words" (16-bit thresholds) or "bernoulli" (model.dropout)
    kind_weights: str = "none"  # data mix by train_kinds.txt: "none", "default" (datasheet) or "ding=1,narrative=2,..."
    lr_decay: str = "none"  # on top of Equation 3: "none", or "linear" to zero at max_steps (noam_lr; a cooldown)
    bidirectional: bool = False  # every pair both ways, the decoder started by the target's language tag (mBART, NLLB)
    domain_tags: str = "none"  # the decoder started by a domain tag per group of kinds: "general=ding+everyday,..."
    tag_lr_scale: float = 1.0  # x on each step's update of the tag rows (language or domain tags: new rows at a cooldown)
