"""Capture cost: a teacher-forced forward returning every attention map (``return_attention=True``, the
explicit ``softmax(QK^T / sqrt(d_k))`` path of :mod:`aiayn.model.attention`) vs one returning none (the fused
``F.scaled_dot_product_attention`` path). Eval mode, ``torch.inference_mode``; bf16 autocast on GPU.

Cases: ``single``, one sentence pair of 24 x 24 positions (what the app does for each sentence);
``batch``, 32 pairs of 32 x 32 (CPU) or 64 pairs of 64 x 64 (GPU).
"""
from __future__ import annotations

import contextlib

import torch

from .timing import Stats, interleaved


def measure_capture(model, batch: int, src_len: int, tgt_len: int, *, warmup: int, repeats: int, device: str) -> dict:
    """Median seconds of a plain and a capturing forward (timed in alternation) and their ratio."""
    from .training import make_batches

    src, dec_in, _ = make_batches(model.cfg, batch, src_len, tgt_len, 1, device)[0]
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()

    def plain():
        with torch.inference_mode(), amp:
            model(src, dec_in)

    def capture():
        with torch.inference_mode(), amp:
            model(src, dec_in, return_attention=True)

    t = interleaved({"plain": plain, "capture": capture}, warmup=warmup, repeats=repeats, device=device)
    p, c = Stats.of(t["plain"]), Stats.of(t["capture"])
    return {"plain_s": p.to_dict(), "capture_s": c.to_dict(), "ratio": c.median / p.median}


def run(ctx) -> list:
    from .decode import load_subject
    from .report import Row

    rows: list = []
    for device in ctx.devices:
        subject = load_subject(ctx.checkpoint, device)
        model = subject.model.eval()
        which = "checkpoint" if subject.translator is not None else "random model of the shipped shape"
        cases = {"single": (1, 24, 24), "batch": (32, 32, 32) if device == "cpu" else (64, 64, 64)}
        if ctx.quick:
            cases = {"single": (1, 8, 8), "batch": (4, 8, 8)}
        for case, (b, s, t) in cases.items():
            ctx.log(f"[capture] {device} {case} {b}x{s}x{t}")
            res = measure_capture(model, b, s, t, warmup=ctx.warmup, repeats=ctx.repeats, device=device)
            detail = dict(res, batch=b, src_len=s, tgt_len=t, model=which)
            rows.append(Row(f"capture.{device}.{case}.plain", "capture", device, f"forward, no maps ({case} {b}x{s}x{t})",
                            1000 * res["plain_s"]["median"], "ms", which, detail))
            rows.append(Row(f"capture.{device}.{case}.capture", "capture", device, f"forward, all maps ({case} {b}x{s}x{t})",
                            1000 * res["capture_s"]["median"], "ms", which, detail))
            rows.append(Row(f"capture.{device}.{case}.ratio", "capture", device, f"capture cost ({case})",
                            res["ratio"], "x", "median all maps / median no maps"))
    return rows
