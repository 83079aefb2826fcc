"""Training-step race: :class:`aiayn.Transformer` vs ``torch.nn.Transformer`` with identical weights.

One step = forward + label-smoothed loss (Section 5.4, eps_ls = 0.1) + backward + Adam step (Section 5.3),
on the same batches for both models, timed in alternation. Throughput is in target tokens per second
(the unit of ``aiayn train``'s ``tokens_per_s``). CPU: fp32; GPU: bf16 autocast. On a CPU with bf16 support
(AVX512-BF16 / AMX) a third variant, ``aiayn_bf16``, runs our model under the autocast of ``aiayn train --amp-cpu``
(:func:`aiayn.training.loop.autocast_for`), timed in the same alternation, for the bf16 / fp32 ratio.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from aiayn.model.config import TransformerConfig
from aiayn.interop import to_torch_transformer
from aiayn.model.transformer import Transformer
from aiayn.training.loop import autocast_for
from aiayn.training.recipe import TrainConfig, label_smoothed_loss

from .flops import gpu_bf16_peak_tflops, mfu, training_flops
from .timing import Stats, interleaved, synchronize


def make_batches(cfg: TransformerConfig, batch: int, src_len: int, tgt_len: int, n: int, device: str, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``n`` random batches ``(src (B, S), decoder input (B, T), target (B, T))`` of int64 ids without pads:
    the decoder input is the start piece then the target shifted right (:func:`aiayn.calls.shift_right`), as in
    training."""
    from aiayn.calls import shift_right

    g = torch.Generator().manual_seed(seed)
    out = []
    low = max(cfg.pad_id, cfg.bos_id, cfg.eos_id) + 1
    for _ in range(n):
        src = torch.randint(low, cfg.vocab_size, (batch, src_len), generator=g)
        tgt = torch.randint(low, cfg.vocab_size, (batch, tgt_len), generator=g)
        dec_in = shift_right(cfg, tgt)
        out.append((src.to(device), dec_in.to(device), tgt.to(device)))
    return out


def _autocast(device: str):
    if device == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def cpu_bf16_supported() -> bool:
    """Whether oneDNN runs bf16 matmuls natively on this CPU (AVX512-BF16 or AMX); elsewhere bf16 autocast is
    emulated and slow, so the bf16 variant is not raced."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def make_step(model: torch.nn.Module, fwd, opt: torch.optim.Optimizer, batches, cfg: TransformerConfig, device: str, autocast=None):
    """A closure running one training step on the next batch (cycling). ``autocast``: a zero-argument factory of
    the autocast context (default: bf16 on CUDA, none on CPU)."""
    state = {"i": 0}
    autocast = autocast or (lambda: _autocast(device))

    def step() -> None:
        src, dec_in, tgt = batches[state["i"] % len(batches)]
        state["i"] += 1
        opt.zero_grad(set_to_none=True)
        with autocast():
            logits = fwd(src, dec_in)
            loss, n_tok = label_smoothed_loss(logits, tgt, 0.1, cfg.pad_id)
        (loss / n_tok).backward()
        opt.step()

    return step


def measure_train(spec: dict[str, Any]) -> dict[str, Any]:
    """Race both models; ``spec``: ``device``, ``cfg`` (a TransformerConfig dict), ``batch``, ``src_len``,
    ``tgt_len``, ``compile`` (bool), ``warmup``, ``repeats``, optional ``peak_tflops``, ``seed``.

    Returns a JSON-able dict: per model (``aiayn``, ``torch``) the step-time stats (s), tokens/s, the
    first-call (compile) time and MFU (GPU), plus the FLOP count.
    """
    device = spec["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CUDA requested but not available")
    cfg = TransformerConfig.from_dict(spec["cfg"])
    b, s, t = int(spec["batch"]), int(spec["src_len"]), int(spec["tgt_len"])
    torch.manual_seed(int(spec.get("seed", 0)))
    ours = Transformer(cfg).to(device).train()
    theirs = to_torch_transformer(ours).train()
    batches = make_batches(cfg, b, s, t, 4, device, seed=int(spec.get("seed", 0)))
    models = {"aiayn": ours, "torch": theirs}
    autocasts = {}
    if device == "cpu" and spec.get("cpu_bf16", True) and cpu_bf16_supported():
        import copy

        models["aiayn_bf16"] = copy.deepcopy(ours)
        tc = TrainConfig("", "", amp_cpu=True)
        autocasts["aiayn_bf16"] = lambda: autocast_for(tc, torch.device("cpu"))
    steps, first_call = {}, {}
    for name, m in models.items():
        fwd = torch.compile(m) if spec.get("compile") else m
        opt = torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        steps[name] = make_step(m, fwd, opt, batches, cfg, device, autocast=autocasts.get(name))
        synchronize(device)
        t0 = time.perf_counter()
        steps[name]()  # first call: includes compilation when compiling
        synchronize(device)
        first_call[name] = time.perf_counter() - t0
    timings = interleaved(steps, warmup=int(spec["warmup"]), repeats=int(spec["repeats"]), device=device)
    flops = training_flops(cfg, b, s, t)
    peak = spec.get("peak_tflops")
    gpu = None
    if device == "cuda":
        gpu = torch.cuda.get_device_name(0)
        peak = peak or gpu_bf16_peak_tflops(gpu)
    out: dict[str, Any] = {"device": device, "gpu": gpu, "compile": bool(spec.get("compile")), "batch": b, "src_len": s,
                           "tgt_len": t, "target_tokens_per_step": b * t, "source_tokens_per_step": b * s,
                           "flops_per_step": flops.to_dict(), "peak_tflops": peak, "models": {}}
    for name, samples in timings.items():
        st = Stats.of(samples)
        rec = {"step_s": st.to_dict(), "tokens_per_s": b * t / st.median, "first_call_s": first_call[name],
               "achieved_tflops": flops.total / st.median / 1e12, "mfu": None}
        if peak:
            rec["mfu"] = mfu(flops.total, st.median, peak)
        out["models"][name] = rec
    out["num_parameters"] = ours.num_parameters()
    return out


def measure_train_memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Peak GPU memory of training one model alone (run it in a fresh process): ``spec`` as
    :func:`measure_train` plus ``model`` (``"aiayn"`` or ``"torch"``). Returns ``peak_bytes``
    (``torch.cuda.max_memory_allocated`` over 3 steps) and ``resident_bytes`` (what stays allocated between
    steps: weights, Adam state, the batches)."""
    if not torch.cuda.is_available():
        raise RuntimeError("peak GPU memory needs CUDA")
    cfg = TransformerConfig.from_dict(spec["cfg"])
    b, s, t = int(spec["batch"]), int(spec["src_len"]), int(spec["tgt_len"])
    torch.manual_seed(int(spec.get("seed", 0)))
    model = Transformer(cfg).to("cuda").train()
    if spec["model"] == "torch":
        model = to_torch_transformer(model).train()
    batches = make_batches(cfg, b, s, t, 2, "cuda")
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    step = make_step(model, model, opt, batches, cfg, "cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    opt.zero_grad(set_to_none=True)
    return {"model": spec["model"], "peak_bytes": peak, "resident_bytes": torch.cuda.memory_allocated()}


def _rows_from(res: dict[str, Any], device: str, mode: str) -> list:
    from .report import Row

    a, r = res["models"]["aiayn"], res["models"]["torch"]
    detail = {k: res[k] for k in ("batch", "src_len", "tgt_len", "target_tokens_per_step", "flops_per_step", "peak_tflops", "gpu", "num_parameters")}
    prefix = f"train.{device}.{mode}"
    rows = [
        Row(f"{prefix}.aiayn", "train", device, f"train step, aiayn.Transformer ({mode})", a["tokens_per_s"], "tok/s",
            f"first call {a['first_call_s']:.1f} s", dict(detail, step_s=a["step_s"])),
        Row(f"{prefix}.torch", "train", device, f"train step, torch.nn.Transformer ({mode})", r["tokens_per_s"], "tok/s",
            f"first call {r['first_call_s']:.1f} s", dict(detail, step_s=r["step_s"])),
        Row(f"{prefix}.speedup", "train", device, f"train speed-up aiayn / torch ({mode})", a["tokens_per_s"] / r["tokens_per_s"], "x",
            "ratio of median step times"),
    ]
    if "aiayn_bf16" in res["models"]:
        b16 = res["models"]["aiayn_bf16"]
        rows += [
            Row(f"{prefix}.aiayn_bf16", "train", device, f"train step, aiayn.Transformer, bf16 autocast (--amp-cpu, {mode})",
                b16["tokens_per_s"], "tok/s", f"first call {b16['first_call_s']:.1f} s", dict(detail, step_s=b16["step_s"])),
            Row(f"{prefix}.amp_cpu_speedup", "train", device, f"train speed-up bf16 autocast / fp32, aiayn ({mode})",
                b16["tokens_per_s"] / a["tokens_per_s"], "x", "ratio of median step times, same batches"),
        ]
    if device == "cuda":
        for name, rec in (("aiayn", a), ("torch", r)):
            if rec["mfu"] is None:
                rows.append(Row(f"{prefix}.mfu.{name}", "train", device, f"MFU {name} ({mode})", None, "fraction",
                                f"n/a: unknown bf16 peak for GPU {res['gpu']!r} (pass --peak-tflops)"))
            else:
                rows.append(Row(f"{prefix}.mfu.{name}", "train", device, f"MFU {name} ({mode})", rec["mfu"], "fraction",
                                f"{rec['achieved_tflops']:.0f} of {res['peak_tflops']:.0f} TFLOP/s bf16",
                                {"achieved_tflops": rec["achieved_tflops"], "peak_tflops": res["peak_tflops"]}))
    return rows


def run(ctx) -> list:
    """The ``train`` group on every device of ``ctx``: eager in this process, compiled in a worker process
    limited to ``ctx.compile_timeout`` seconds (n/a with the reason when it fails or runs out of time)."""
    from .common import run_worker, train_config
    from .report import Row, na

    rows: list = []
    for device in ctx.devices:
        cfg, sizes = train_config(device, ctx.quick)
        spec = dict(device=device, cfg=cfg.to_dict(), warmup=ctx.warmup, repeats=ctx.repeats, peak_tflops=ctx.peak_tflops, **sizes)
        ctx.log(f"[train] {device} eager: {cfg.d_model=} {cfg.n_layers=} batch {sizes}")
        try:
            eager = measure_train(dict(spec, compile=False))
            rows += _rows_from(eager, device, "eager")
        except Exception as exc:  # a failure in one group must not lose the others
            eager = None
            rows.append(na(f"train.{device}.eager.speedup", "train", device, "train speed-up aiayn / torch (eager)", "x", f"{type(exc).__name__}: {exc}"))
        if device == "cuda":
            torch.cuda.empty_cache()  # give the cached blocks back before the compile worker needs them
        if getattr(ctx, "compile", True):
            ctx.log(f"[train] {device} torch.compile (worker, time limit {ctx.compile_timeout:.0f} s)")
            res, why = run_worker("train", dict(spec, compile=True), threads=ctx.threads, timeout=ctx.compile_timeout)
        else:
            res, why = None, "skipped (--no-compile)"
        if res is None:
            for what, name in (("aiayn", "train step, aiayn.Transformer (compiled)"), ("torch", "train step, torch.nn.Transformer (compiled)"),
                               ("speedup", "train speed-up aiayn / torch (compiled)")):
                rows.append(na(f"train.{device}.compiled.{what}", "train", device, name, "x" if what == "speedup" else "tok/s", f"torch.compile: {why}"))
        else:
            rows += _rows_from(res, device, "compiled")
        if device == "cuda":
            best = [r for r in rows if r.id in (f"train.cuda.eager.mfu.aiayn", f"train.cuda.compiled.mfu.aiayn") and r.value is not None]
            if best:
                top = max(best, key=lambda r: r.value)
                rows.append(Row("train.cuda.best.mfu", "train", device, "MFU aiayn, best variant", top.value, "fraction", f"from {top.id}"))
            else:
                rows.append(na("train.cuda.best.mfu", "train", device, "MFU aiayn, best variant", "fraction", "no MFU measured"))
    return rows
