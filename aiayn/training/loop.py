"""The training loop of Section 5: Adam with the learning rate of Equation 3, label-smoothed loss, steps of
about ``tokens_per_step`` target tokens gathered by gradient accumulation (Section 5.1), bf16 autocast on CUDA
(optionally on CPU), optional ``torch.compile``, several processes with ``torchrun`` and
``DistributedDataParallel`` (each rank trains on its own share of every step); periodic validation (teacher-
forced loss and BLEU of real beam decodes, Section 6.1), ``metrics.jsonl`` and run states (:mod:`.state`) for an
exact ``--resume``.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import sacrebleu
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from .. import calls
from ..decoding import beam_search
from ..files import atomic_copy, atomic_write_text
from ..model.config import TransformerConfig
from ..model.dropout import set_dropout_impl
from ..model.transformer import Transformer
from ..tokenizer import Tokenizer
from .history import AttentionRecorder
from .loader import (KINDS_FILE, LANGS, BatchLoader, DataMixError, KindMix, PairIds, domain_index, kind_mix, load_pairs,
                     load_pairs_both, parse_domain_tags)
from .pipeline import load_split, rank_and_world, step_groups
from .recipe import ADAM_IMPLS, TrainConfig, label_smoothed_loss, noam_lr, scale_residual_init
from .state import (describe_hardware, init_weights_from, list_states, load_state_into, record_config_change,
                    record_run_start, save_state, truncate_metrics)


def _loss_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Indices sorted by length, grouped so that a batch's padded size ``(B + 1) * longest`` stays within
    ``max_tokens`` (a batch holds at least one example)."""
    batches: list[list[int]] = [[]]
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if batches[-1] and (len(batches[-1]) + 2) * max(lengths[j] for j in batches[-1] + [i]) > max_tokens:
            batches.append([])
        batches[-1].append(i)
    return [b for b in batches if b]


@torch.no_grad()
def validate(model: Transformer, tokenizer, src: list[str], tgt: list[str], cfg: TransformerConfig, *, beam_size: int,
             n_bleu: int, max_tokens: int, device) -> dict[str, Any]:
    """Validation of a model on parallel texts ``src`` / ``tgt``, in float32 (no autocast).

    Sources and references are encoded with the one truncation rule of :func:`aiayn.calls.cut` (``max_len - 1``
    pieces + ``</s>``); the loss is a teacher-forced pass of :func:`aiayn.calls.teacher_forced_ids` (the decoder
    fed ``cfg.decoder_start_id`` + the reference shifted right); the BLEU sources are those same ids.

    Returns:
        ``valid_loss``: teacher-forced negative log-likelihood per target token (nats, no smoothing), over
        batches of at most about ``max_tokens`` padded source tokens, pairs with an empty side left out;
        ``valid_bleu``: sacreBLEU of real beam decodes (``beam_size``, length penalty alpha 0.6, Section 6.1; never
        teacher-forced argmax) of the first ``n_bleu`` sentences, None when none was decoded (``n_bleu`` 0: a
        BLEU of 0.0 would read as a measurement); ``valid_samples``: up to 3
        ``(source, hypothesis)`` pairs. The model's train/eval mode is restored.
    """
    was_training = model.training
    model.eval()
    s_all, t_all = calls.encode_many(tokenizer, cfg, src), calls.encode_many(tokenizer, cfg, tgt)
    keep = [i for i in range(len(s_all)) if len(s_all[i]) > 1 and len(t_all[i]) > 1]  # [eos] alone: an empty side
    s_ids, t_ids = [s_all[i] for i in keep], [t_all[i] for i in keep]
    nll_sum, n_tok = torch.zeros((), dtype=torch.float64, device=device), 0
    for idx in _loss_batches([len(s) for s in s_ids], max_tokens):
        forced = calls.teacher_forced_ids(model, [s_ids[i] for i in idx], [t_ids[i] for i in idx], amp=False)
        nll_sum -= forced.target_log_probs(cfg.pad_id).double().sum()
        n_tok += sum(len(t_ids[i]) for i in idx)
    hyps, refs = [], []
    n = min(n_bleu, len(src))
    for start in range(0, n, 32):
        batch = calls.batch(cfg, s_all[start : min(n, start + 32)], device)
        with calls.autocast_for(device, False):
            results = beam_search(model, batch, beam_size=beam_size, length_penalty_alpha=0.6)
        hyps.extend(tokenizer.decode(res[0].tokens) for res in results)
        refs.extend(tgt[start : min(n, start + 32)])
    bleu = sacrebleu.corpus_bleu(hyps, [refs]).score if hyps else None
    model.train(was_training)
    return {"valid_loss": float(nll_sum) / max(n_tok, 1), "valid_bleu": bleu,
            "valid_samples": list(zip(src[:3], hyps[:3]))}


def cpu_bf16_supported() -> bool:
    """Whether oneDNN runs bf16 natively on this CPU (AVX512-BF16 or AMX; ``torch.ops.mkldnn``'s own check)."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN
        return False


@functools.lru_cache(maxsize=None)
def cpu_bf16_pays_off(d_model: int = 256, d_ff: int = 1024, rows: int = 2048, repeats: int = 6) -> bool:
    """Whether bf16 autocast is worth it on this CPU: native bf16 (:func:`cpu_bf16_supported`) AND a bf16 matmul of
    an FFN's shape ``(rows x d_model) @ (d_model x d_ff)`` at least 1.25x faster than float32, timed here with
    torch's current threads (best of ``repeats``, the two alternated so that load hits both). Native support is
    not enough: on one AVX512-BF16 VM of this project oneDNN's bf16 kernel ran at half MKL's float32 speed
    (docs/training.md). Measured once per process and shape (a fraction of a second)."""
    if not cpu_bf16_supported():
        return False
    gen = torch.Generator().manual_seed(0)  # its own generator: the run's random stream must not depend on this
    a, b = torch.randn(rows, d_model, generator=gen), torch.randn(d_model, d_ff, generator=gen)
    pairs = {torch.float32: (a, b), torch.bfloat16: (a.bfloat16(), b.bfloat16())}
    best = dict.fromkeys(pairs, float("inf"))
    for i in range(repeats + 1):
        for dtype, (x, w) in pairs.items():
            t0 = time.perf_counter()
            x @ w
            if i:  # the first round only warms the kernels up
                best[dtype] = min(best[dtype], time.perf_counter() - t0)
    return best[torch.bfloat16] * 1.25 <= best[torch.float32]


def resolve_amp_cpu(tc: TrainConfig, device: torch.device, d_model: int = 256, d_ff: int = 1024) -> TrainConfig:
    """``tc`` with ``amp_cpu`` decided when it is None (the default): :func:`cpu_bf16_pays_off` for the model's
    widths on a CPU, False elsewhere. The run stores the decision in ``train_config.json``, so a resumed run keeps
    the precision it started with."""
    if tc.amp_cpu is not None:
        return tc
    return replace(tc, amp_cpu=device.type == "cpu" and tc.amp and cpu_bf16_pays_off(d_model, d_ff))


def autocast_enabled(tc: TrainConfig, device: torch.device) -> bool:
    """Whether the training forward pass runs under bf16 autocast: on CUDA when ``tc.amp``; on CPU when ``tc.amp``
    and ``tc.amp_cpu`` (None, undecided: when :func:`cpu_bf16_pays_off`)."""
    if not tc.amp:
        return False
    if device.type == "cuda":
        return True
    if device.type == "cpu":
        return cpu_bf16_pays_off() if tc.amp_cpu is None else bool(tc.amp_cpu)
    return False


def autocast_for(tc: TrainConfig, device: torch.device):
    """The mixed-precision context of the training forward pass (weights, optimizer and loss stay float32):
    bf16 autocast where :func:`autocast_enabled`, else a disabled autocast, i.e. float32 throughout. On CPUs
    with native bf16 the matmuls then run in oneDNN's bf16 kernels (docs/training.md, "A training loop near the
    CPU's peak", has the measured speed-up).
    """
    if autocast_enabled(tc, device):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return torch.autocast(device.type if device.type in ("cpu", "cuda") else "cpu", enabled=False)


def pad_multiple_for(tc: TrainConfig, device: torch.device) -> int:
    """The multiple batch widths are rounded up to: ``tc.pad_multiple`` when set, else 8 on CUDA or under
    ``torch.compile`` (shapes repeat: fewer recompilations, aligned kernels) and 1 on CPU in eager mode, where a
    padded position is only lost work (on short-sentence data a third of the target positions at 8)."""
    if tc.pad_multiple is not None:
        return tc.pad_multiple
    return 8 if (device.type != "cpu" or tc.compile) else 1


def setup_distributed() -> torch.device:
    """Join the process group when started by ``torchrun`` (``WORLD_SIZE`` > 1; NCCL on CUDA, gloo on CPU) and
    return this process's device: ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not (dist.is_available() and dist.is_initialized()):
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def make_optimizer(model: Transformer, tc: TrainConfig) -> torch.optim.Adam:
    """Adam with the paper's betas and eps (Section 5.3; the learning rate is set every step, Equation 3), in the
    implementation ``tc.adam_impl`` names: ``"fused"`` (one kernel per parameter for the whole update, on CPU and
    CUDA), ``"foreach"`` (a few multi-tensor ops) or ``"loop"`` (PyTorch's per-tensor reference loop). The same
    update rule either way; the state (step, exp_avg, exp_avg_sq) is the same, so a run may resume with another.

    Raises:
        ValueError: an unknown ``tc.adam_impl``.
    """
    if tc.adam_impl not in ADAM_IMPLS:
        raise ValueError(f"adam_impl must be one of {ADAM_IMPLS}, got {tc.adam_impl!r}")
    kind = {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}[tc.adam_impl]
    return torch.optim.Adam(model.parameters(), lr=1.0, betas=tuple(tc.adam_betas), eps=tc.adam_eps, **kind)


def _build_model(tc: TrainConfig, tokenizer, device: torch.device) -> tuple[TransformerConfig, Transformer]:
    """The model of ``tc`` (preset + overrides, vocabulary size from the tokenizer), seeded by ``tc.seed``. With
    ``tc.bidirectional`` it has a language tag per language (``<2de>``, ``<2en>``), and its ``target_language`` is
    ``tc.direction``'s target (what validation and an exported checkpoint decode by default)."""
    overrides = dict(tc.model_overrides)
    overrides.setdefault("vocab_size", tokenizer.vocab_size)
    overrides.setdefault("max_len", max(256, tc.max_len + 2))
    if tc.bidirectional:
        overrides.update(language_tags=LANGS, target_language=tc.direction.partition("-")[2])
    domains = parse_domain_tags(tc.domain_tags)
    if domains is not None:  # the first tag is the default: validation and the exported checkpoint decode with it
        overrides.update(domain_tags=tuple(domains), domain=next(iter(domains)))
    cfg = TransformerConfig.preset(tc.preset, **overrides)
    torch.manual_seed(tc.seed)
    model = Transformer(cfg).to(device)
    set_dropout_impl(model, tc.dropout_impl)  # how its dropout draws masks on a CPU (aiayn.model.dropout)
    return cfg, model


def _start_or_resume(tc: TrainConfig, run: _Run, *, resume: bool, log) -> bool:
    """Restore the run's last state into ``run`` (``resume``), or start fresh (warm start, residual scaling, the
    run's files); returns whether a state was resumed. Raises FileExistsError (states but no ``resume``)."""
    run_dir, data_dir, rank = run.run_dir, Path(tc.data_dir).expanduser(), run.rank
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
    states = list_states(run_dir)
    if states and not resume:
        raise FileExistsError(f"{run_dir} already holds a training run (last state {states[-1].name}); pass --resume to "
                              "continue it, or choose another run directory (nothing was changed)")
    resumed = bool(resume and states)
    if resumed:
        run.state = load_state_into(states[-1], run.model, run.opt)
        check_world(run.state, _stored_config(tc, True).get("accumulation"), tc.accumulation, run.world)
        if run.world > 1:  # every rank has read the stored configuration before rank 0 records the resume's changes
            dist.barrier()
        run.state.update(world=run.world, accumulation=tc.accumulation)
        if tc.adam_impl == "fused":  # fused Adam wants its float32 step counts on the parameters' device
            for p, st in run.opt.state.items():
                st["step"] = st["step"].to(p.device, torch.float32)
        log(f"resumed from {states[-1]} (step {run.state['step']}, epoch {run.state['epoch']})")
        if rank == 0:
            changed = record_config_change(run_dir, run.state["step"], tc)
            if changed:
                log("resumed with a changed configuration: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()))
            dropped = truncate_metrics(run_dir / "metrics.jsonl", run.state["step"])
            if dropped:
                log(f"dropped {dropped} metrics records logged after step {run.state['step']} (they will be logged again)")
    elif tc.init_from:
        used = init_weights_from(tc.init_from, run.model, data_dir / "spm.model", stack=tc.init_stack)
        how = f", its layers stacked to N = {len(run.model.encoder_layers)}" if tc.init_stack else ""
        log(f"initialised the weights from {used}{how} (warm start; optimizer and schedule start at step 0)")
    elif tc.residual_init_scale != 1.0:
        n = scale_residual_init(run.model, tc.residual_init_scale)
        log(f"residual branches start small: {n} matrices (W_V, W_O, W_2) x {tc.residual_init_scale:g}")
    if rank == 0 and not resumed:
        atomic_write_text(run_dir / "train_config.json", json.dumps(asdict(tc), indent=2))
        atomic_write_text(run_dir / "metrics.jsonl", "")
        atomic_copy(data_dir / "spm.model", run_dir / "spm.model")
    if rank == 0:  # lineage: the parent's runs (read now, before anything overwrites the parent) and this machine
        record_run_start(run_dir, tc, describe_hardware(run.device, tc.threads, run.world), fresh=not resumed)
    return resumed


class WorldChangeError(ValueError):
    """A run resumed under another number of processes with micro-batches per rank that change its steps."""


def check_world(state: dict[str, Any], stored_accumulation: int | None, accumulation: int, world: int) -> None:
    """Refuse to resume a run whose steps would change: a step is ``accumulation`` micro-batches on each of ``world``
    ranks (:func:`aiayn.training.pipeline.step_groups`), so a run saved by W processes with accumulation a resumes
    exactly under w processes only with accumulation a x W / w. ``state["world"]`` is the number of processes that
    saved it (1 for states written before it was recorded) and ``state["accumulation"]`` each one's micro-batches
    (``stored_accumulation``, the run's ``train_config.json``, for states written before it was recorded: the state
    is what saved the steps, while rank 0 of a resume rewrites the configuration). Nothing is checked for an
    unchanged world (a changed
    ``--accumulation`` is then a recorded change of the recipe) or a derived accumulation (0: from
    ``tokens_per_step``, rounded to the world size).

    Raises:
        WorldChangeError: the global batch would change; the message names the accumulation that keeps it.
    """
    before = int(state.get("world", 1))
    stored_accumulation = state.get("accumulation", stored_accumulation)
    if before == world or not stored_accumulation or accumulation == 0:
        return
    per_step = int(stored_accumulation) * before
    if accumulation * world == per_step:
        return
    keep = (f"--accumulation {per_step // world}" if per_step % world == 0 else
            f"a number of processes that divides {per_step}")
    raise WorldChangeError(
        f"this run's steps were {per_step} micro-batches ({stored_accumulation} on each of {before} process(es)); "
        f"resumed on {world} with accumulation {accumulation} they would be {accumulation * world}: give {keep} "
        "to resume it exactly")


def auto_threads(cores: int | None = None, load: float | None = None, background: float | None = None) -> int:
    """Intra-op threads for a CPU run started now: all ``cores`` less the other work already running that does not
    yield to this run (the 1-minute load average ``load`` less ``background``, the cores' worth of work of niced
    processes that give way to it), at least 1: ``max(1, min(cores, round(cores - max(0, load - background) + 1)))``.
    On 2 cores: 2 threads up to a load of 1.5, 1 above. Two OpenMP threads on a busy machine wait at every op's
    barrier for a descheduled partner: one thread trained 3.6x faster than two at a load of 9-14 (docs/training.md).
    A nice-19 trainer is no such partner (:mod:`aiayn.training.cpuload`): beside one, two threads trained 1.5x one.
    ``load`` None reads the load average and measures ``background`` (:func:`~aiayn.training.cpuload.background_cores`,
    half a second) when that is None too; a given ``load`` counts whole unless ``background`` is given."""
    cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
        if background is None:
            from .cpuload import background_cores

            background = background_cores()
    return max(1, min(cores, round(cores - max(0.0, load - (background or 0.0)) + 1)))


def _stored_config(tc: TrainConfig, resume: bool) -> dict[str, Any]:
    """The run's stored ``train_config.json`` when resuming (``{}`` otherwise or when unreadable)."""
    path = Path(tc.run_dir).expanduser() / "train_config.json"
    if not (resume and path.is_file()):
        return {}
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def _resolved_threads(tc: TrainConfig, device: torch.device, *, resume: bool) -> TrainConfig:
    """``tc`` with ``threads`` decided when it is 0 on a CPU (:func:`auto_threads`); a resumed run keeps the count
    its stored configuration decided (another count rounds sums differently: no exact resume)."""
    if tc.threads > 0 or device.type != "cpu":
        return tc
    decided = _stored_config(tc, resume).get("threads")
    return replace(tc, threads=decided if isinstance(decided, int) and decided > 0 else auto_threads())


def _resolved(tc: TrainConfig, cfg: TransformerConfig, device: torch.device, *, resume: bool) -> TrainConfig:
    """``tc`` with the CPU precision decided (:func:`resolve_amp_cpu`); a resumed run whose stored configuration
    already decided it keeps that decision (exact resume)."""
    decided = _stored_config(tc, resume).get("amp_cpu") if tc.amp_cpu is None else None
    if isinstance(decided, bool):
        return replace(tc, amp_cpu=decided)
    return resolve_amp_cpu(tc, device, cfg.d_model, cfg.d_ff)


def agree_across_ranks(tc: TrainConfig, device: torch.device, world: int) -> TrainConfig:
    """``tc`` with rank 0's CPU precision (``amp_cpu``) and thread count on every rank of a DistributedDataParallel
    run (a broadcast; unchanged when ``world`` is 1). Each rank decides both on its own (:func:`cpu_bf16_pays_off`
    times a matmul, :func:`auto_threads` reads the load average), and two CPU processes that decided differently
    would train one model in two precisions; rank 0's decision is also the one ``train_config.json`` stores."""
    if world == 1:
        return tc
    decided = torch.tensor([float(bool(tc.amp_cpu)), float(tc.threads)], device=device)
    dist.broadcast(decided, src=0)
    return replace(tc, amp_cpu=bool(decided[0].item()), threads=int(decided[1].item()))


@dataclass
class _Run:
    """What the steps of one run share: the model and its optimizer, where they run, the trainer state (step,
    epoch, batch_in_epoch, wall_time, tokens: what a run state saves) and the current metrics window (a loss
    sum kept on the device, read once per record)."""

    tc: TrainConfig
    cfg: TransformerConfig
    device: torch.device
    rank: int
    world: int
    run_dir: Path
    model: Transformer
    opt: torch.optim.Optimizer
    fwd: Any = None
    state: dict[str, Any] = field(default_factory=lambda: {"step": 0, "epoch": 0, "batch_in_epoch": 0, "wall_time": 0.0, "tokens": 0})
    t_start: float = 0.0
    window_loss: Any = None
    window_tok: int = 0
    window_t0: float = 0.0


def _train_step(run: _Run, micro, n_tok_global: int) -> float:
    """One optimizer step over this rank's micro-batches ``micro`` (gradient accumulation, Section 5.1);
    returns the learning rate used (Equation 3). Reads nothing back from the device."""
    tc, cfg = run.tc, run.cfg
    lr = noam_lr(run.state["step"] + 1, cfg.d_model, tc.warmup_steps, tc.lr_scale, decay=tc.lr_decay,
                 max_steps=tc.max_steps)
    for g in run.opt.param_groups:
        g["lr"] = lr
    run.opt.zero_grad(set_to_none=True)
    # DDP averages gradients over ranks: scale so the step's gradient is the mean per target token of the
    # global batch, the same as one process accumulating all micro-batches.
    scale = run.world / max(n_tok_global, 1)
    amp = autocast_for(tc, run.device)
    for j, (s, d, t) in enumerate(micro):
        sync = run.world == 1 or j == len(micro) - 1
        ctx = run.fwd.no_sync() if not sync else contextlib.nullcontext()
        with ctx, amp:
            logits = run.fwd(s, d)
            loss, _ = label_smoothed_loss(logits, t, tc.epsilon_ls, cfg.pad_id)
            (loss * scale).backward()
        run.window_loss += loss.detach()
    rows = _tag_rows(run) if tc.tag_lr_scale != 1.0 else []
    before = [r.detach().clone() for r in rows]
    run.opt.step()
    if rows:  # the tags' rows move tag_lr_scale times as far as Adam's step took them
        with torch.no_grad():
            for r, b in zip(rows, before):
                r.copy_(b + tc.tag_lr_scale * (r - b))
    return lr


def _tag_rows(run: _Run) -> list[torch.Tensor]:
    """Views of the embedding rows of the model's tags (ids ``vocab_size`` and up: language or domain tags), in the
    decoder's table (the shared one, Section 3.4, or the target one); empty for a model without tags."""
    cfg, model = run.cfg, run.model
    if cfg.n_embeddings == cfg.vocab_size:
        return []
    table = model.embedding if getattr(model, "embedding", None) is not None else model.tgt_embedding
    return [table.weight[cfg.vocab_size:]]


def _out_of_time(run: _Run, log_now: bool) -> bool:
    """``tc.max_minutes`` spent? Under DDP the ranks agree (an all-reduce) at log steps only, or the others would
    hang in the next all-reduce."""
    tc = run.tc
    out = tc.max_minutes > 0 and (time.perf_counter() - run.t_start) / 60 >= tc.max_minutes
    if run.world > 1:
        out = out and log_now
        if tc.max_minutes > 0 and log_now:
            flag = torch.tensor(float(out), device=run.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            out = bool(flag.item())
    return out


def _record(run: _Run, lr: float, *, validate_now: bool, bar, valid: tuple[Any, list[str], list[str]]) -> None:
    """Close the metrics window: read the loss sum (all-reduced over ranks: every rank must call this), and on rank
    0 append a record to ``metrics.jsonl``, with validation (:func:`validate`) when ``validate_now``."""
    tc, step = run.tc, run.state["step"]
    if run.world > 1:  # log the loss of the global batch, not only rank 0's share
        dist.all_reduce(run.window_loss)
    loss_window = float(run.window_loss.item())  # the one device read-back, once per record
    tps = run.window_tok / max(time.perf_counter() - run.window_t0, 1e-9)
    if run.rank == 0:
        rec = {"step": step, "epoch": run.state["epoch"], "train_loss": loss_window / max(run.window_tok, 1),
               "lr": lr, "tokens_per_s": tps, "wall_time": time.perf_counter() - run.t_start}
        bar.set_postfix(loss=f"{rec['train_loss']:.3f}", tok_s=f"{tps:,.0f}", lr=f"{lr:.2e}")
        if validate_now:
            tokenizer, valid_src, valid_tgt = valid
            v = validate(run.model, tokenizer, valid_src, valid_tgt, run.cfg, beam_size=tc.valid_beam_size,
                         n_bleu=tc.valid_bleu_sentences, max_tokens=tc.max_tokens, device=run.device)
            samples = v.pop("valid_samples")
            rec.update({k: x for k, x in v.items() if x is not None})  # no valid_bleu when nothing was decoded
            bleu = f", BLEU {v['valid_bleu']:.2f}" if v["valid_bleu"] is not None else ""
            bar.write(f"step {step}: valid loss {v['valid_loss']:.3f}{bleu} | "
                      + " || ".join(f"{a} => {b}" for a, b in samples[:2]))
        with open(run.run_dir / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    run.window_loss.zero_()
    run.window_tok, run.window_t0 = 0, time.perf_counter()


def _train_epoch(run: _Run, data, groups, *, recorder, bar, valid) -> bool:
    """The steps of the current epoch from ``state["batch_in_epoch"]`` on, with their records and saved states;
    returns True when the run is to stop (``max_steps`` or ``max_minutes`` reached)."""
    tc, cfg, state = run.tc, run.cfg, run.state
    log_every = max(1, tc.valid_every // 10)
    loader = BatchLoader(data, groups, pad_id=cfg.pad_id, bos_id=cfg.decoder_start_id, device=run.device,
                         start=state["batch_in_epoch"], rank=run.rank, world=run.world, multiple=pad_multiple_for(tc, run.device),
                         max_width=cfg.max_len, prefetch=tc.prefetch)
    with loader:
        for k, micro, n_tok_global in loader:
            lr = _train_step(run, micro, n_tok_global)
            step = state["step"] = state["step"] + 1
            state["batch_in_epoch"] = k + 1
            state["tokens"] += n_tok_global
            run.window_tok += n_tok_global
            bar.update(1)
            log_now = step % log_every == 0
            valid_now = tc.valid_every > 0 and step % tc.valid_every == 0
            last = step >= tc.max_steps or _out_of_time(run, log_now)
            if log_now or valid_now or last:  # every rank: the loss all-reduce needs them all
                _record(run, lr, validate_now=valid_now or last, bar=bar, valid=valid)
            if run.rank == 0 and (step % tc.save_every == 0 or last):
                state["wall_time"] = time.perf_counter() - run.t_start
                save_state(run.run_dir, run.model, run.opt, state, tc.keep, history=recorder)
            if last:
                return True
    return False


def _training_pairs(tc: TrainConfig, run: _Run, tokenizer, mix: KindMix | None, log,
                    domains: tuple[dict[str, tuple[str, ...]], np.ndarray] | None = None) -> PairIds:
    """The run's training examples (:func:`.loader.load_pairs` with the token cache, ``upsample_sentences`` and the
    data mix ``mix``); with a mix, its weights and per-kind pair and example counts go to the log and (rank 0) to
    ``data_mix.json`` in the run directory (rewritten at every start: the mix a resume trains on). ``domains``
    (``--domain-tags``: the tags and :func:`.loader.domain_index`) starts each example's decoder input with its
    kind's tag.

    Raises:
        DataMixError: ``train_kinds.txt`` has another number of rows than ``train.tsv``."""
    data_dir = Path(tc.data_dir).expanduser()
    cache_dir = "" if tc.token_cache == "off" else (tc.token_cache or None)
    kwargs = dict(max_len=tc.max_len, upsample=tc.upsample_sentences, cache_dir=cache_dir, log=log,
                  row_weights=None if mix is None else mix.row_weights, seed=tc.seed)
    if tc.bidirectional:  # every pair both ways, each decoder input started by its target's tag
        starts = {lang: run.cfg.language_tag_id(lang) for lang in LANGS}
        data = load_pairs_both(data_dir, "train", tokenizer, data_dir / "spm.model", start_ids=starts, **kwargs)
        log(f"both directions: {len(data):,} examples (en-de with <2de>, de-en with <2en> first in the decoder)")
    else:
        data = load_pairs(data_dir, "train", tc.direction, tokenizer, data_dir / "spm.model", **kwargs)
    if domains is not None:  # each example's decoder input starts with its kind's domain tag
        with open(data_dir / "train.tsv", "rb") as f:
            n_rows = sum(1 for _ in f) - 1  # the header
        if len(domains[1]) != n_rows:
            raise DataMixError(f"--domain-tags: {data_dir / KINDS_FILE} does not match train.tsv (prepare the folder "
                               "again with `aiayn data debian`)")
        per_example = domains[1][data.rows]
        data.decoder_starts = run.cfg.domain_tag_id(run.cfg.domain_tags[0]) + per_example
        counts = np.bincount(per_example, minlength=len(run.cfg.domain_tags))
        log(f"domain tags (--domain-tags {tc.domain_tags}), examples per epoch: "
            + ", ".join(f"<{t}> {int(n):,}" for t, n in zip(run.cfg.domain_tags, counts)))
    if mix is not None:
        summary = mix.summary(data)
        log(f"data mix (--kind-weights {mix.spec}, upsample_sentences {tc.upsample_sentences}), pairs -> examples per "
            "epoch: " + ", ".join(f"{k} x{v['weight']:g} {v['pairs']:,} -> {v['examples']:,}" for k, v in summary["kinds"].items()))
        if run.rank == 0:
            atomic_write_text(run.run_dir / "data_mix.json", json.dumps(summary, indent=1))
    return data


def _silent(*args: Any, **kwargs: Any) -> None:
    """The ``log`` of ranks other than 0."""


def train(tc: TrainConfig, *, resume: bool = False, log=print) -> Path:
    """Run (or resume) training as configured; returns the run directory. Progress lines go to ``log`` (on rank 0
    only, under DistributedDataParallel: the ranks would print the same lines).

    Raises:
        FileExistsError: ``resume`` is False and ``run_dir`` already holds saved states (a fresh start would
            overwrite the run's metrics and mix its states with the new ones).
        WarmStartError: ``tc.init_from`` cannot start this run (see :func:`.state.init_weights_from`).
        ValueError: ``tc.pad_multiple`` < 1, ``tc.prefetch`` < 0, an unknown ``tc.adam_impl`` or ``tc.dropout_impl``
            (the model's :func:`aiayn.model.dropout.set_dropout_impl`; before anything is written).
        DataMixError (a ValueError): ``tc.kind_weights`` or ``tc.domain_tags`` this data folder cannot give (before
            anything is written; :func:`.loader.kind_mix`, :func:`.loader.domain_index`).

    The training pairs come from the token cache (:func:`.loader.load_pairs`, ``tc.token_cache``), the batches
    from a loader thread (:class:`.loader.BatchLoader`, ``tc.prefetch`` steps ahead, widths rounded up to
    ``tc.pad_multiple``); a step reads nothing back from the device (the loss is read once per metrics record;
    under DDP the ``max_minutes`` stop is agreed on at those records only). Adam as ``tc.adam_impl`` (fused by
    default, :func:`make_optimizer`); the forward pass in bf16 where :func:`autocast_for` says so; dropout's masks on a CPU
    as ``tc.dropout_impl`` (:mod:`aiayn.model.dropout`).

    The run directory holds ``train_config.json``, ``metrics.jsonl`` (one JSON object per log line: step,
    epoch, train_loss, valid_loss, valid_bleu, lr, tokens_per_s, wall_time), ``step_*/`` states and, with
    ``tc.kind_weights``, ``data_mix.json`` (:func:`_training_pairs`); with
    ``tc.record_attention``, ``attention_history.safetensors`` (:mod:`.history`: the curated sentences' attention
    at step 0 of a fresh run and at every saved state).
    """
    if (tc.pad_multiple is not None and tc.pad_multiple < 1) or tc.prefetch < 0:
        raise ValueError(f"pad_multiple must be >= 1 and prefetch >= 0, got {tc.pad_multiple} and {tc.prefetch}")
    device = setup_distributed()
    tc = _resolved_threads(tc, device, resume=resume)
    if tc.threads > 0:
        torch.set_num_threads(tc.threads)
    rank, world = rank_and_world()
    if rank != 0:  # every rank runs the same code: rank 0 speaks for them (errors still raise on the rank they hit)
        log = _silent
    data_dir = Path(tc.data_dir).expanduser()
    tokenizer = Tokenizer.load(data_dir / "spm.model")
    mix = kind_mix(data_dir, tc.kind_weights)  # refused here, before the run directory is touched
    tags = parse_domain_tags(tc.domain_tags)
    domains = None if tags is None else (tags, domain_index(data_dir, tags))  # refused here too
    cfg, model = _build_model(tc, tokenizer, device)
    tc = agree_across_ranks(_resolved(tc, cfg, device, resume=resume), device, world)
    if tc.threads > 0:
        torch.set_num_threads(tc.threads)
    run = _Run(tc, cfg, device, rank, world, Path(tc.run_dir).expanduser(), model, make_optimizer(model, tc))
    # the processes a saved state came from and their micro-batches each (check_world at a resume)
    run.state.update(world=world, accumulation=tc.accumulation)
    resumed = _start_or_resume(tc, run, resume=resume, log=log)
    # attention of a few curated sentences at every saved state (no RNG drawn, train mode restored: .history)
    recorder = AttentionRecorder(tokenizer, tc.direction, max_len=cfg.max_len, log=log) if rank == 0 and tc.record_attention else None
    if recorder is not None and not resumed:
        recorder.record(run.run_dir, model, 0)  # step 0: the initial (or warm-started) weights
    data = _training_pairs(tc, run, tokenizer, mix, log, domains)
    valid = (tokenizer, *load_split(data_dir, "valid", tc.direction))
    log(f"{len(data)} training pairs, {model.num_parameters() / 1e6:.2f}M parameters, device {device}, world {world}, "
        f"{'bf16' if autocast_enabled(tc, device) else 'float32'} forward, Adam {tc.adam_impl}"
        + (f", token cache {data.cache_path}" if data.cache_path else ""))
    # automatic dynamic shapes: the first new batch shape recompiles once with symbolic sizes (widths are
    # multiples of pad_multiple_for(), 8 when compiling, so few distinct shapes reach the compiled graph)
    run.fwd = torch.compile(model) if tc.compile else model
    if world > 1:
        run.fwd = DistributedDataParallel(run.fwd, device_ids=[device.index] if device.type == "cuda" else None)
    model.train()
    run.t_start = time.perf_counter() - run.state["wall_time"]
    # the loss sum of a metrics window stays on the device (float64 where supported) until a record reads it
    run.window_loss = torch.zeros((), dtype=torch.float64 if device.type in ("cpu", "cuda") else torch.float32, device=device)
    run.window_t0 = time.perf_counter()
    bar = tqdm(total=tc.max_steps, initial=run.state["step"], disable=rank != 0, dynamic_ncols=True, desc=tc.direction)
    stop = run.state["step"] >= tc.max_steps  # resuming a finished run trains nothing more
    if stop:
        log(f"the run is already at step {run.state['step']} >= max_steps {tc.max_steps}: nothing to train")
    while not stop and run.state["epoch"] < tc.max_epochs:
        groups = step_groups(tc, data.src_lengths, data.tgt_lengths, run.state["epoch"], world=world)
        if not groups:  # every epoch would be empty: say so instead of looping through max_epochs of nothing
            log(f"no training step: an epoch of {len(data)} pairs holds fewer micro-batches of --max-tokens "
                f"{tc.max_tokens} than one step needs (--tokens-per-step {tc.tokens_per_step}, --accumulation "
                f"{tc.accumulation}, world {world}); lower --tokens-per-step or set --accumulation")
            break
        stop = _train_epoch(run, data, groups, recorder=recorder, bar=bar, valid=valid)
        if not stop:
            run.state["epoch"] += 1
            run.state["batch_in_epoch"] = 0
    bar.close()
    if world > 1:
        dist.barrier()
    return run.run_dir
