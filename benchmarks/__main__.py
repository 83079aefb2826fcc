"""``python -m benchmarks`` / ``aiayn bench``: run the benchmark groups, print one table, write the JSON.

Examples::

    python -m benchmarks                         # every group, CPU (+ GPU where CUDA is present)
    python -m benchmarks --only train,capture    # some groups
    python -m benchmarks --quick --out /tmp/q.json   # tiny sizes for tests / CI (figures mean nothing)
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path

from .report import GROUPS

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _groups(text: str) -> list[str]:
    names = [g.strip() for g in text.split(",") if g.strip()]
    bad = [g for g in names if g not in GROUPS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown group(s) {bad or text!r}; choose from {','.join(GROUPS)}")
    return [g for g in GROUPS if g in names]


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="aiayn bench", description="Speed and memory of aiayn against torch.nn.Transformer, on CPU and GPU.")
    ap.add_argument("--only", type=_groups, default=list(GROUPS), metavar="GROUPS",
                    help=f"comma-separated groups to run (default all): {','.join(GROUPS)}")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and few repeats, for tests and CI (the figures say nothing about speed)")
    ap.add_argument("--out", type=Path, default=None, help="JSON file to write (default benchmarks/results/<host>-<device>-<date>.json)")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: CPU, plus the GPU where CUDA is present")
    ap.add_argument("--threads", type=_positive_int, default=None, help="torch.set_num_threads (default: all logical cores)")
    ap.add_argument("--checkpoint", type=Path, default=None, help="checkpoint directory for decode/capture/memory (default checkpoints/en-de; random model if absent)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls before each measurement (default 3, quick 1)")
    ap.add_argument("--repeats", type=_positive_int, default=None, help="timed calls per throughput measurement (default 10, quick 3)")
    ap.add_argument("--latency-repeats", type=_positive_int, default=None, help="timed calls per latency (default 20, quick 3)")
    ap.add_argument("--compile-timeout", type=_positive_float, default=None, help="seconds allowed to each torch.compile race (default 600, quick 180)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile races (reported n/a)")
    ap.add_argument("--peak-tflops", type=_positive_float, default=None, help="GPU bf16 peak for MFU when the card is not in the table")
    ap.add_argument("--chromium", default=None, help="Chromium executable for the app and classroom groups (default /usr/bin/chromium)")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    return ap


def default_out(machine: dict, devices: list[str], quick: bool) -> Path:
    from .machine import slug

    dev = slug(machine["gpu"]) if ("cuda" in devices and machine.get("gpu")) else "cpu"
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return RESULTS_DIR / f"{slug(machine['host'])}-{dev}-{date}{'-quick' if quick else ''}.json"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; returns the exit code (0 ok, 2 bad arguments or unwritable output)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    import os

    import torch

    from . import ablation, app, capture, classroom, decode, memory, trainer, training
    from .common import Context, set_threads, shipped_checkpoint
    from .machine import machine_info
    from .report import Row, build_result, na, table, targets_table, write_json

    if args.warmup is not None and args.warmup < 0:
        print("aiayn bench: --warmup must be >= 0", file=sys.stderr)
        return 2
    if args.checkpoint is not None and shipped_checkpoint(args.checkpoint) is None:
        print(f"aiayn bench: {args.checkpoint} is not a checkpoint directory (needs config.json, model.safetensors, spm.model)", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        print("aiayn bench: --device cuda but CUDA is not available", file=sys.stderr)
        return 2
    devices = {"auto": ["cpu"] + (["cuda"] if cuda else []), "cpu": ["cpu"], "cuda": ["cuda"]}[args.device]
    threads = args.threads or (os.cpu_count() or 1)
    set_threads(threads)
    q = args.quick
    ctx = Context(
        devices=devices, quick=q, threads=threads,
        warmup=args.warmup if args.warmup is not None else (1 if q else 3),
        repeats=args.repeats or (3 if q else 10),
        latency_repeats=args.latency_repeats or (3 if q else 20),
        checkpoint=shipped_checkpoint(args.checkpoint),
        compile_timeout=args.compile_timeout or (180.0 if q else 600.0),
        peak_tflops=args.peak_tflops,
    )
    ctx.chromium = args.chromium  # type: ignore[attr-defined]
    ctx.compile = not args.no_compile  # type: ignore[attr-defined]
    machine = machine_info([sys.executable, "-m", "benchmarks", *argv])
    machine["torch_threads"] = torch.get_num_threads()
    runners = {"train": training.run, "capture": capture.run, "decode": decode.run, "memory": memory.run, "app": app.run,
               "ablation": ablation.run, "classroom": classroom.run, "trainer": trainer.run}
    rows: list[Row] = []
    t_start = time.perf_counter()
    for group in args.only:
        t0 = time.perf_counter()
        try:
            rows += runners[group](ctx)
        except Exception as exc:  # report the failure as a row, keep the other groups
            rows.append(na(f"{group}.error", group, ",".join(devices), f"{group} group", "", f"{type(exc).__name__}: {exc}"))
        ctx.log(f"[{group}] done in {time.perf_counter() - t0:.1f} s")
    settings = dict(ctx.settings(), wall_s=round(time.perf_counter() - t_start, 1))
    result = build_result(rows, machine=machine, settings=settings, groups=args.only, quick=q)
    result["info"] = ctx.info
    out = args.out or default_out(machine, devices, q)
    try:
        write_json(result, out)
    except OSError as exc:
        print(f"aiayn bench: cannot write {out}: {exc}", file=sys.stderr)
        return 2
    head = (f"aiayn bench{' --quick (tiny sizes: these figures say nothing about speed)' if q else ''} | {machine['cpu_model']} "
            f"({machine['cpu_count']} logical cores, {machine['torch_threads']} torch threads)"
            f"{' | GPU ' + machine['gpu'] if machine['gpu'] else ''} | torch {machine['torch']} | {machine['date']}")
    print(head)
    print()
    print(table(rows, markdown=args.markdown))
    print()
    print(targets_table([t for t in result["targets"] if t["row"].split(".")[0] in args.only], markdown=args.markdown))
    print()
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
