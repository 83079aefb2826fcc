"""The training loop of Section 5: Adam with the learning rate of Equation 3, label-smoothed loss, steps of
about ``tokens_per_step`` target tokens gathered by gradient accumulation (Section 5.1), bf16 autocast on CUDA
(optionally on CPU), optional ``torch.compile``, several processes with ``torchrun`` and
``DistributedDataParallel`` (each rank trains on its own share of every step); periodic validation (teacher-
forced loss and BLEU of real beam decodes, Section 6.1), ``metrics.jsonl`` and run states (:mod:`.state`) for an
exact ``--resume``.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import sacrebleu
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from .. import calls
from ..decoding import beam_search
from ..files import atomic_copy, atomic_write_text
from ..model.config import TransformerConfig
from ..model.transformer import Transformer
from ..tokenizer import Tokenizer
from .history import AttentionRecorder
from .loader import BatchLoader, load_pairs
from .pipeline import load_split, rank_and_world, step_groups
from .recipe import TrainConfig, label_smoothed_loss, noam_lr, scale_residual_init
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
        teacher-forced argmax) of the first ``n_bleu`` sentences, 0.0 when none; ``valid_samples``: up to 3
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
    bleu = sacrebleu.corpus_bleu(hyps, [refs]).score if hyps else 0.0
    model.train(was_training)
    return {"valid_loss": float(nll_sum) / max(n_tok, 1), "valid_bleu": bleu,
            "valid_samples": list(zip(src[:3], hyps[:3]))}


def autocast_for(tc: TrainConfig, device: torch.device):
    """The mixed-precision context of the training forward pass (weights, optimizer and loss stay float32).

    bf16 autocast on CUDA when ``tc.amp``; on CPU only when ``tc.amp_cpu`` as well (oneDNN runs the matmuls in
    bf16 on CPUs with AVX512-BF16 or AMX: faster steps on the project's 2-core AMD EPYC, measured in
    docs/benchmarks.md). Otherwise a disabled autocast, i.e. float32 throughout.
    """
    if tc.amp and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if tc.amp and tc.amp_cpu and device.type == "cpu":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.autocast(device.type if device.type in ("cpu", "cuda") else "cpu", enabled=False)


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


def train(tc: TrainConfig, *, resume: bool = False, log=print) -> Path:
    """Run (or resume) training as configured; returns the run directory.

    Raises:
        FileExistsError: ``resume`` is False and ``run_dir`` already holds saved states (a fresh start would
            overwrite the run's metrics and mix its states with the new ones).
        WarmStartError: ``tc.init_from`` cannot start this run (see :func:`.state.init_weights_from`).
        ValueError: ``tc.pad_multiple`` < 1 or ``tc.prefetch`` < 0 (before anything is written).

    The training pairs come from the token cache (:func:`.loader.load_pairs`, ``tc.token_cache``), the batches
    from a loader thread (:class:`.loader.BatchLoader`, ``tc.prefetch`` steps ahead, widths rounded up to
    ``tc.pad_multiple``); a step reads nothing back from the device (the loss is read once per metrics record;
    under DDP the ``max_minutes`` stop is agreed on at those records only). Adam is fused on CUDA.

    The run directory holds ``train_config.json``, ``metrics.jsonl`` (one JSON object per log line: step,
    epoch, train_loss, valid_loss, valid_bleu, lr, tokens_per_s, wall_time), ``step_*/`` states and, with
    ``tc.record_attention``, ``attention_history.safetensors`` (:mod:`.history`: the curated sentences' attention
    at step 0 of a fresh run and at every saved state).
    """
    if tc.pad_multiple < 1 or tc.prefetch < 0:
        raise ValueError(f"pad_multiple must be >= 1 and prefetch >= 0, got {tc.pad_multiple} and {tc.prefetch}")
    device = setup_distributed()
    if tc.threads > 0:
        torch.set_num_threads(tc.threads)
    rank, world = rank_and_world()
    run_dir = Path(tc.run_dir).expanduser()
    data_dir = Path(tc.data_dir).expanduser()
    tokenizer = Tokenizer.load(data_dir / "spm.model")
    overrides = dict(tc.model_overrides)
    overrides.setdefault("vocab_size", tokenizer.vocab_size)
    overrides.setdefault("max_len", max(256, tc.max_len + 2))
    cfg = TransformerConfig.preset(tc.preset, **overrides)
    torch.manual_seed(tc.seed)
    model = Transformer(cfg).to(device)
    # fused Adam on CUDA: one kernel for every parameter instead of a few per tensor (same update rule)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=tuple(tc.adam_betas), eps=tc.adam_eps,
                           fused=device.type == "cuda")
    state: dict[str, Any] = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "wall_time": 0.0, "tokens": 0}
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
    states = list_states(run_dir)
    if states and not resume:
        raise FileExistsError(f"{run_dir} already holds a training run (last state {states[-1].name}); pass --resume to "
                              "continue it, or choose another run directory (nothing was changed)")
    if resume and states:
        state = load_state_into(states[-1], model, opt)
        if device.type == "cuda":  # fused Adam wants its step counts on the parameters' device
            for p, st in opt.state.items():
                st["step"] = st["step"].to(p.device, torch.float32)
        log(f"resumed from {states[-1]} (step {state['step']}, epoch {state['epoch']})")
        if rank == 0:
            changed = record_config_change(run_dir, state["step"], tc)
            if changed:
                log("resumed with a changed configuration: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()))
            dropped = truncate_metrics(run_dir / "metrics.jsonl", state["step"])
            if dropped:
                log(f"dropped {dropped} metrics records logged after step {state['step']} (they will be logged again)")
    else:
        if tc.init_from:
            used = init_weights_from(tc.init_from, model, data_dir / "spm.model")
            log(f"initialised the weights from {used} (warm start; optimizer and schedule start at step 0)")
        elif tc.residual_init_scale != 1.0:
            n = scale_residual_init(model, tc.residual_init_scale)
            log(f"residual branches start small: {n} matrices (W_V, W_O, W_2) x {tc.residual_init_scale:g}")
    if rank == 0 and not (resume and states):
        atomic_write_text(run_dir / "train_config.json", json.dumps(asdict(tc), indent=2))
        atomic_write_text(run_dir / "metrics.jsonl", "")
        atomic_copy(data_dir / "spm.model", run_dir / "spm.model")
    if rank == 0:  # lineage: the parent's runs (read now, before anything overwrites the parent) and this machine
        record_run_start(run_dir, tc, describe_hardware(device, tc.threads, world), fresh=not (resume and states))
    # attention of a few curated sentences at every saved state (no RNG drawn, train mode restored: .history)
    recorder = None
    if rank == 0 and tc.record_attention:
        recorder = AttentionRecorder(tokenizer, tc.direction, max_len=cfg.max_len, log=log)
    if recorder is not None and not (resume and states):
        recorder.record(run_dir, model, 0)  # step 0: the initial (or warm-started) weights
    cache_dir = "" if tc.token_cache == "off" else (tc.token_cache or None)
    data = load_pairs(data_dir, "train", tc.direction, tokenizer, data_dir / "spm.model", max_len=tc.max_len,
                      upsample=tc.upsample_sentences, cache_dir=cache_dir, log=log)
    valid_src, valid_tgt = load_split(data_dir, "valid", tc.direction)
    log(f"{len(data)} training pairs, {model.num_parameters() / 1e6:.2f}M parameters, device {device}, world {world}"
        + (f", token cache {data.cache_path}" if data.cache_path else ""))
    # automatic dynamic shapes: the first new batch shape recompiles once with symbolic sizes (widths are
    # multiples of tc.pad_multiple, so few distinct shapes reach the compiled graph)
    fwd = torch.compile(model) if tc.compile else model
    if world > 1:
        fwd = DistributedDataParallel(fwd, device_ids=[device.index] if device.type == "cuda" else None)
    amp = autocast_for(tc, device)
    model.train()
    t_start = time.perf_counter() - state["wall_time"]
    metrics_path = run_dir / "metrics.jsonl"
    bar = tqdm(total=tc.max_steps, initial=state["step"], disable=rank != 0, dynamic_ncols=True, desc=tc.direction)
    stop = state["step"] >= tc.max_steps  # resuming a finished run trains nothing more
    if stop:
        log(f"the run is already at step {state['step']} >= max_steps {tc.max_steps}: nothing to train")
    # No device-to-host read inside a step: token counts come from the lengths on the host, the loss sum stays
    # on the device and is read (and all-reduced across ranks) only when a metrics record is written.
    acc_dtype = torch.float64 if device.type in ("cpu", "cuda") else torch.float32
    window_loss = torch.zeros((), dtype=acc_dtype, device=device)
    window_tok, window_t0 = 0, time.perf_counter()
    log_every = max(1, tc.valid_every // 10)
    while not stop and state["epoch"] < tc.max_epochs:
        groups = step_groups(tc, data.src_lengths, data.tgt_lengths, state["epoch"], world=world)
        if not groups:  # every epoch would be empty: say so instead of looping through max_epochs of nothing
            log(f"no training step: an epoch of {len(data)} pairs holds fewer micro-batches of --max-tokens "
                f"{tc.max_tokens} than one step needs (--tokens-per-step {tc.tokens_per_step}, --accumulation "
                f"{tc.accumulation}, world {world}); lower --tokens-per-step or set --accumulation")
            break
        loader = BatchLoader(data, groups, pad_id=cfg.pad_id, bos_id=cfg.decoder_start_id, device=device,
                             start=state["batch_in_epoch"], rank=rank, world=world, multiple=tc.pad_multiple,
                             max_width=cfg.max_len, prefetch=tc.prefetch)
        with loader:
            for k, micro, n_tok_global in loader:
                step = state["step"] + 1
                lr = noam_lr(step, cfg.d_model, tc.warmup_steps, tc.lr_scale)
                for g in opt.param_groups:
                    g["lr"] = lr
                opt.zero_grad(set_to_none=True)
                # DDP averages gradients over ranks: scale so the step's gradient is the mean per target token
                # of the global batch, the same as one process accumulating all micro-batches.
                scale = world / max(n_tok_global, 1)
                for j, (s, d, t) in enumerate(micro):
                    sync = world == 1 or j == len(micro) - 1
                    ctx = fwd.no_sync() if (world > 1 and not sync) else contextlib.nullcontext()
                    with ctx, amp:
                        logits = fwd(s, d)
                        loss, _ = label_smoothed_loss(logits, t, tc.epsilon_ls, cfg.pad_id)
                        (loss * scale).backward()
                    window_loss += loss.detach()
                opt.step()
                state["step"] = step
                state["batch_in_epoch"] = k + 1
                state["tokens"] += n_tok_global
                window_tok += n_tok_global
                bar.update(1)
                log_now = step % log_every == 0
                valid_now = tc.valid_every > 0 and step % tc.valid_every == 0
                out_of_time = tc.max_minutes > 0 and (time.perf_counter() - t_start) / 60 >= tc.max_minutes
                if world > 1:  # ranks must agree on stopping, or the others hang in all_reduce; agreed at log steps only
                    out_of_time = out_of_time and log_now
                    if tc.max_minutes > 0 and log_now:
                        flag = torch.tensor(float(out_of_time), device=device)
                        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                        out_of_time = bool(flag.item())
                last = step >= tc.max_steps or out_of_time
                if log_now or valid_now or last:  # every rank: the loss all-reduce needs them all
                    if world > 1:  # log the loss of the global batch, not only rank 0's share
                        dist.all_reduce(window_loss)
                    loss_window = float(window_loss.item())  # the one device read-back, once per record
                    tps = window_tok / max(time.perf_counter() - window_t0, 1e-9)
                    if rank == 0:
                        rec = {"step": step, "epoch": state["epoch"], "train_loss": loss_window / max(window_tok, 1),
                               "lr": lr, "tokens_per_s": tps, "wall_time": time.perf_counter() - t_start}
                        bar.set_postfix(loss=f"{rec['train_loss']:.3f}", tok_s=f"{tps:,.0f}", lr=f"{lr:.2e}")
                        if valid_now or last:
                            v = validate(model, tokenizer, valid_src, valid_tgt, cfg, beam_size=tc.valid_beam_size,
                                         n_bleu=tc.valid_bleu_sentences, max_tokens=tc.max_tokens, device=device)
                            samples = v.pop("valid_samples")
                            rec.update(v)
                            bar.write(f"step {step}: valid loss {v['valid_loss']:.3f}, BLEU {v['valid_bleu']:.2f} | " + " || ".join(f"{a} => {b}" for a, b in samples[:2]))
                        with open(metrics_path, "a") as fh:
                            fh.write(json.dumps(rec) + "\n")
                    window_loss.zero_()
                    window_tok, window_t0 = 0, time.perf_counter()
                if rank == 0 and (step % tc.save_every == 0 or last):
                    state["wall_time"] = time.perf_counter() - t_start
                    save_state(run_dir, model, opt, state, tc.keep, history=recorder)
                if last:
                    stop = True
                    break
        if not stop:
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    bar.close()
    if world > 1:
        dist.barrier()
    return run_dir
