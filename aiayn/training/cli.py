"""The ``aiayn train`` command line: flags over the run's stored configuration (``--resume``) over
:class:`~aiayn.training.recipe.TrainConfig`'s defaults (the paper's recipe, Section 5), ``--set key=value``
model overrides, then :func:`~aiayn.training.loop.train` and an optional export of the averaged last states
(Section 6.1). Under ``torchrun`` every process runs it; only rank 0 exports. ``--processes N`` starts the N ranks
of one DistributedDataParallel run on this machine itself, as ``torchrun --standalone`` would (:func:`launch_ranks`);
by default a CPU machine with 2 or more cores trains as 2 such processes (:func:`auto_processes`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ..model.dropout import DROPOUT_IMPLS
from .export import export
from .loader import DataMixError, parse_domain_tags, parse_kind_weights
from .loop import WorldChangeError, train
from .pipeline import rank_and_world
from .recipe import ADAM_IMPLS, LR_DECAYS, TrainConfig
from .state import WarmStartError, list_states


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["d_model=256", "dropout=0.3", "name=x"]`` -> ``{"d_model": 256, "dropout": 0.3, "name": "x"}``: each
    value is read as JSON, else kept as a string.

    Raises:
        SystemExit: an item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--set takes key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


#: (TrainConfig field, type) of every ``--flag VALUE`` of ``aiayn train`` that sets one field.
VALUE_FLAGS = [("max_tokens", int), ("tokens_per_step", int), ("accumulation", int), ("warmup_steps", int), ("lr_scale", float),
               ("epsilon_ls", float), ("max_steps", int), ("max_epochs", int), ("max_minutes", float), ("seed", int),
               ("valid_every", int), ("valid_bleu_sentences", int), ("valid_beam_size", int), ("save_every", int), ("keep", int),
               ("max_len", int), ("threads", int), ("upsample_sentences", int), ("pad_multiple", int), ("prefetch", int),
               ("token_cache", str), ("residual_init_scale", float), ("adam_impl", str), ("dropout_impl", str), ("kind_weights", str),
               ("lr_decay", str), ("domain_tags", str), ("tag_lr_scale", float)]

#: Help text of the flags whose name alone does not say enough.
FLAG_HELP = {
    "pad_multiple": "round batch widths up to a multiple of this, so shapes repeat (torch.compile, GPU kernels; "
                    "unset: 8 on CUDA or with --compile, 1 on CPU eager, where padding is only lost work); ",
    "residual_init_scale": "at a fresh start, multiply the initial W_V, W_O and W_2 by this (e.g. 0.38 = (8N)^-1/4 for "
                           "N = 6: post-LN at depth 6 then trains; docs/training.md); ",
    "max_minutes": "stop when the run's training wall time reaches this; counted over the whole run, across "
                   "resumes (a run resumed after 6.5 minutes with --max-minutes 2 stops after one step); 0 = no limit; ",
    "prefetch": "steps collated ahead by a loader thread (0: in the training thread); ",
    "threads": "intra-op threads (0: on a CPU, all cores less the load already running that niced background work "
               "does not account for, decided at the start and stored with the run); ",
    "adam_impl": "Adam's implementation: fused (one kernel per parameter), foreach or loop (same update rule); ",
    "dropout_impl": "how dropout draws its mask on a CPU: words (four 16-bit thresholds per 64-bit random word, about "
                    "a seventh of the random-number time) or bernoulli (torch's F.dropout, one draw per element; the same "
                    "distribution); ",
    "kind_weights": "data mix by the kind of each pair (train_kinds.txt of `aiayn data debian`): none (every pair "
                    "once), default (the datasheet's weights) or kind=weight,... e.g. ding=1,ui=1,documentation=1,"
                    "narrative=2,everyday=3; a pair is repeated upsample x weight times per epoch, a fractional part "
                    "kept for a subset seeded by --seed (docs/training.md); ",
    "lr_decay": "on top of Equation 3: none (the paper's schedule) or linear (times (max_steps - step + 1) / "
                "max_steps: a cooldown to zero at --max-steps, for going on from a trained model); ",
    "domain_tags": "start each pair's decoder input with a tag of its kind's domain instead of the start piece "
                   "(domain control, Kobus et al. 2017): none, or tag=kind+kind,... e.g. general=ding+everyday+"
                   "narrative,software=ui+documentation; the first tag is what the model decodes with by default "
                   "(needs train_kinds.txt; docs/training.md); ",
    "tag_lr_scale": "multiply each optimizer step's update of the embedding rows of the tags (--domain-tags, "
                    "--bidirectional) by this: rows added to a trained model learn at a cooldown's small rate "
                    "otherwise; 1 = the same update as every other weight; ",
    "token_cache": "folder of the token id cache (keyed by the sha256 of spm.model and the split file); '' = "
                   "DATA/cache, 'off' = tokenise in memory at every start; ",
}


def resolve_config(given: dict[str, Any], stored: dict[str, Any] | None) -> TrainConfig:
    """The configuration of a command line: the flags it gives, over the run's stored ``train_config.json``
    when it resumes one (``stored``), over :class:`TrainConfig`'s defaults otherwise.

    So ``--resume`` continues the run's own recipe (warmup, rate scale, data mix...) and only the flags given
    change it (each change is then recorded by :func:`aiayn.training.state.record_config_change`).
    ``model_overrides`` given with ``--set`` are merged key by key into the stored ones.

    Raises:
        ValueError: no data directory (neither given nor stored), a resume that gives another
            ``direction`` or ``preset`` than the run was trained with (the weights belong to them), or a
            malformed ``kind_weights``.
    """
    base = asdict(TrainConfig("", ""))
    if stored:
        for key in ("direction", "preset"):
            if given.get(key) is not None and stored.get(key) is not None and given[key] != stored[key]:
                raise ValueError(f"this run was trained with {key} {stored[key]!r}; it cannot be resumed with "
                                 f"{key} {given[key]!r} (start a new run directory instead)")
        base.update({k: v for k, v in stored.items() if k in base})
    merged_overrides = dict(base.get("model_overrides") or {})
    merged_overrides.update(given.get("model_overrides") or {})
    base.update({k: v for k, v in given.items() if v is not None and k in base})
    base["model_overrides"] = merged_overrides
    base["adam_betas"] = tuple(base["adam_betas"])
    if not base.get("data_dir"):
        raise ValueError("no data directory: give --data DIR (a resumed run uses the one it was trained on)")
    if not 0 < float(base["residual_init_scale"]) < float("inf"):
        raise ValueError(f"--residual-init-scale must be a positive number, got {base['residual_init_scale']}")
    if (base["pad_multiple"] is not None and int(base["pad_multiple"]) < 1) or int(base["prefetch"]) < 0:
        raise ValueError(f"--pad-multiple must be >= 1 and --prefetch >= 0, got {base['pad_multiple']} and {base['prefetch']}")
    if base["lr_decay"] not in LR_DECAYS:
        raise ValueError(f"--lr-decay must be one of {', '.join(LR_DECAYS)}, got {base['lr_decay']!r}")
    if base["adam_impl"] not in ADAM_IMPLS:
        raise ValueError(f"--adam-impl must be one of {', '.join(ADAM_IMPLS)}, got {base['adam_impl']!r}")
    if base["dropout_impl"] not in DROPOUT_IMPLS:
        raise ValueError(f"--dropout-impl must be one of {', '.join(DROPOUT_IMPLS)}, got {base['dropout_impl']!r}")
    parse_kind_weights(base["kind_weights"])  # a malformed spec is refused here (DataMixError is a ValueError)
    if not 0 < float(base["tag_lr_scale"]) < float("inf"):
        raise ValueError(f"--tag-lr-scale must be a positive number, got {base['tag_lr_scale']}")
    if parse_domain_tags(base["domain_tags"]) is not None and base["bidirectional"]:
        raise ValueError("--domain-tags and --bidirectional both start the decoder with a tag: choose one")
    return TrainConfig(**base)


def launch_ranks(argv: list[str], processes: int, threads: int | None) -> int:
    """Run ``aiayn train argv`` as ``processes`` ranks of one DistributedDataParallel run on this machine (gloo on
    the CPU, one CUDA device each), as ``torchrun --standalone --nproc_per_node=N -m aiayn train`` would: each rank
    with the ``torch.distributed`` environment of :func:`~aiayn.training.continuous.rank_envs`, tcmalloc preloaded
    where installed (:mod:`aiayn.training.allocator`) and ``threads`` (all cores when 0 or None) shared among the
    ranks. A step is then ``--accumulation`` micro-batches on each rank, or with the default accumulation 0 the same
    ``--tokens-per-step`` as one process, so the run trains the steps of one process with N times the accumulation
    (:func:`aiayn.training.pipeline.step_batches`). On a 2-core CPU two one-thread ranks train about 3x the target
    tokens a second of the loop before the speed work (docs/benchmarks.md, "Trainer on a Zen 4 VM"). A rank that
    fails stops the others; Ctrl-C stops all of them (their states are written atomically).

    Returns:
        the exit code: 0, the first failed rank's, or 130 when interrupted.

    Raises:
        ValueError: ``processes`` below 2, or more ranks than CUDA devices on a CUDA machine.
    """
    import torch

    from .allocator import allocator_env, describe
    from .continuous import EXIT_INTERRUPTED, _run_child, share_threads

    if processes < 2:
        raise ValueError(f"launch_ranks needs at least 2 processes, got {processes}")
    if torch.cuda.is_available() and processes > torch.cuda.device_count():
        raise ValueError(f"--processes {processes}: this machine has {torch.cuda.device_count()} CUDA device(s), one per rank")
    per_process = share_threads(threads, processes)
    env = allocator_env(os.environ, "auto")
    print(f"aiayn train: {processes} processes of {per_process} thread(s) each, on {describe(env)}", flush=True)
    cmd = [sys.executable, "-m", "aiayn", "train", *argv, "--threads", str(per_process)]
    try:
        return _run_child(cmd, float("inf"), env, processes=processes, who="aiayn train")
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _parse_processes(text: str) -> int | str:
    """``--processes``: ``auto`` or a whole number (checked by :func:`_ranks_if_asked`)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a number of processes or auto, not {text!r}") from None


def auto_processes(threads: int | None = None, compiled: bool | None = None, cores: int | None = None,
                   cuda: bool | None = None) -> int:
    """The processes ``aiayn train`` trains as when ``--processes`` is not given: 2 on a CPU machine with at least
    2 usable ``cores`` (the process's CPU affinity) and at least 2 ``threads`` asked for (None or 0: all cores),
    else 1: on CUDA (one device; several GPUs are torchrun's), with ``--compile`` (not measured under
    DistributedDataParallel on a CPU) or on one core. Two one-thread processes train about 3x the old float32 loop
    on a 2-core CPU and 1.4x one process of two threads (docs/benchmarks.md, "Trainer on a Zen 4 VM"); more than
    two was never measured, so more cores are shared as threads of the two."""
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cuda or compiled or cores < 2 or (threads is not None and 0 < threads < 2):
        return 1
    return 2


def auto_plan(args: argparse.Namespace, processes: int) -> tuple[int, int | None, str]:
    """``(processes, accumulation, why)`` for ``--processes auto``: ``processes`` (from :func:`auto_processes`) or 1
    where they cannot share the run's step, and the ``--accumulation`` each process then takes (None: leave it as
    given or stored). With ``auto``, ``--accumulation`` counts a whole step's micro-batches, as for one process and
    for ``train-on``, and a resumed run keeps the steps of its last state, saved by however many processes: train-on's
    :func:`~aiayn.training.continuous.resume_accumulation`. ``why`` says in words why one process was chosen."""
    from .continuous import StepNotShared, _json_or_empty, _last_state, resume_accumulation

    run = Path(args.run).expanduser()
    last = (_last_state(run) if args.resume else None) or {}
    stored = int(last.get("accumulation", _json_or_empty(run / "train_config.json").get("accumulation")) or 0) if last else 0
    world = int(last.get("world", 1))
    try:
        return processes, resume_accumulation(stored, world, args.accumulation, processes), ""
    except StepNotShared:
        given = args.accumulation is not None
        total, source = (args.accumulation, "--accumulation") if given else (stored * world, "the run's steps")
        return (1, resume_accumulation(stored, world, args.accumulation, 1),
                f"{source} of {total} micro-batches a step cannot be shared by {processes} processes")


def _ranks_if_asked(ap: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str],
                    compiled: bool = False) -> int | None:
    """With ``--processes N`` > 1 (or ``auto``, :func:`auto_processes`) outside a launcher: start the N ranks
    (:func:`launch_ranks`) and return their exit code; None when this process trains (one process, or a rank a
    launcher started; with ``auto`` and one process ``args.accumulation`` is then the whole step's). ``compiled``:
    the run's ``--compile`` (given or stored). A count below 1, or one that disagrees with the launcher's
    ``WORLD_SIZE``, exits through ``ap.error``."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if args.processes == "auto":
        if world > 1:  # a rank: the launcher decided
            args.processes = world
            return None
        from .continuous import BadInput

        try:
            processes, accumulation, why = auto_plan(args, auto_processes(args.threads, compiled))
        except BadInput as exc:  # the last state's trainer_state.json unreadable
            ap.error(f"cannot resume: {exc}")
        if why:
            print(f"aiayn train: one process ({why}; --processes 1 says so)", flush=True)
        if processes == 1:
            args.processes = 1
            if accumulation is not None:
                args.accumulation = accumulation
            return None
        # argparse keeps the last of a repeated flag: the ranks take this count and each its share of the step
        ranked = argv + ["--processes", str(processes)] + ([] if accumulation is None else ["--accumulation", str(accumulation)])
        try:
            return launch_ranks(ranked, processes, args.threads)
        except ValueError as exc:
            ap.error(str(exc))
    if args.processes < 1:
        ap.error(f"--processes must be at least 1, got {args.processes}")
    if args.processes > 1 and world > 1 and world != args.processes:
        ap.error(f"--processes {args.processes} under a launcher that started {world} processes (WORLD_SIZE): give one "
                 "of them (torchrun's --nproc_per_node, or --processes alone)")
    if args.processes == 1 or world > 1:
        return None
    try:
        return launch_ranks(argv, args.processes, args.threads)
    except ValueError as exc:
        ap.error(str(exc))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``aiayn train`` (:func:`cli_main`)."""
    ap = argparse.ArgumentParser(prog="aiayn train", description="Train with the paper's recipe (Section 5). Use torchrun for several GPUs.")
    ap.add_argument("--data", default=None, help="prepared data directory (train/valid.tsv, spm.model); "
                    "a resumed run defaults to the one it was trained on")
    # "--run-dir" too: under torchrun, whose own parser takes "--run" for an ambiguous abbreviation of its
    # "--run-path" and refuses the command line ("torchrun ... -m aiayn train --run-dir DIR" works).
    ap.add_argument("--run", "--run-dir", dest="run", required=True, help="run directory (states, metrics.jsonl)")
    ap.add_argument("--direction", default=None, choices=["en-de", "de-en"], help="default en-de")
    ap.add_argument("--preset", default=None, help="default base")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="model config overrides, e.g. d_model=256 n_layers=6")
    defaults = TrainConfig("", "")
    for name, typ in VALUE_FLAGS:
        ap.add_argument("--" + name.replace("_", "-"), type=typ, default=None,
                        help=FLAG_HELP.get(name, "") + f"default {getattr(defaults, name)!r}" if name in FLAG_HELP else f"default {getattr(defaults, name)}")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model (default off)")
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None, help="bf16 autocast on CUDA (default on)")
    ap.add_argument("--amp-cpu", action=argparse.BooleanOptionalAction, default=None,
                    help="bf16 autocast on CPU too (default: on where oneDNN runs bf16 natively, AVX512-BF16/AMX, "
                         "docs/training.md; --no-amp-cpu keeps float32)")
    ap.add_argument("--record-attention", action=argparse.BooleanOptionalAction, default=None,
                    help="record the attention of a few curated sentences at every saved state into "
                         "attention_history.safetensors (the explorer's 'Across training' tab; default on)")
    ap.add_argument("--bidirectional", action=argparse.BooleanOptionalAction, default=None,
                    help="one model for both directions: every pair read both ways, the decoder fed the target "
                         "language's tag <2de> / <2en> first instead of the start piece (as mBART and NLLB); "
                         "--direction then only picks the validation direction (default off)")
    ap.add_argument("--init-from", default=None, metavar="DIR", help="warm start a new run from the weights of a run, "
                    "run state or checkpoint with the same shape and vocabulary (e.g. the other direction's run); default off")
    ap.add_argument("--init-stack", action="store_true", default=None,
                    help="with --init-from a shallower model: copy its N layers on top of themselves up to this run's "
                         "n_layers (progressive stacking, Gong et al. 2019; e.g. --set n_layers=6 from N = 3)")
    ap.add_argument("--resume", action="store_true", help="continue from the run's last state, exactly, with its stored "
                    "configuration; flags given change it and are recorded")
    ap.add_argument("--export", default=None, help="after training, write a shippable checkpoint here")
    ap.add_argument("--export-average", type=int, default=5, help="average this many last states into --export")
    ap.add_argument("--processes", type=_parse_processes, default="auto",
                    help="train as this many processes of one DistributedDataParallel run on this machine, started by "
                         "this command (as torchrun --standalone would; --threads is then shared among them); auto "
                         "(the default): 2 on a CPU with 2 or more cores, where two one-thread processes train about "
                         "3x the loop before the speed work and 1.4x one process of two threads (docs/benchmarks.md), "
                         "else 1 (CUDA, --compile, one core or --threads 1). With auto, --accumulation counts a whole "
                         "step's micro-batches, shared among the processes (one process when they cannot share it); "
                         "with a number N, each process's (torchrun's meaning)")
    return ap


def cli_main(argv: list[str]) -> int:
    """``aiayn train --data DIR --run DIR [--direction en-de] [--preset base] [--set d_model=256 ...]``.

    ``aiayn train --run DIR --resume [--flag value ...]`` continues a run with its stored configuration; only the
    flags given change it (recorded in ``config_changes.jsonl``). Several processes: ``torchrun
    --nproc_per_node=N -m aiayn train --data DIR --run-dir DIR ...`` (``--run-dir``, not ``--run``, which
    torchrun's own parser rejects as ambiguous). Returns the exit code: 0, or 2 with a message on stderr when
    the run directory already holds a run (without ``--resume``) or the warm start cannot start it.
    ``--processes N`` starts the N processes itself (:func:`launch_ranks`; ``--threads`` then counts all of them);
    without it a CPU machine with 2 or more cores trains as 2 (:func:`auto_processes`, :func:`auto_plan`).
    """
    ap = build_parser()
    args = ap.parse_args(argv)
    stored = None
    cfg_file = Path(args.run).expanduser() / "train_config.json"
    if args.resume and cfg_file.is_file():
        try:
            stored = json.loads(cfg_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            ap.error(f"cannot resume: {cfg_file} is unreadable ({exc}); the run's recipe is stored there")
        if not isinstance(stored, dict):
            ap.error(f"cannot resume: {cfg_file} does not hold a training configuration")
    if args.init_stack and not args.init_from:
        ap.error("--init-stack stacks the layers of the --init-from model: give --init-from DIR too")
    if args.init_from and args.resume and list_states(Path(args.run).expanduser()):
        ap.error("--init-from starts a new run from another run's weights; this run already has states, so --resume "
                 "continues from its own (drop --init-from, or choose a new run directory)")
    given = {"data_dir": args.data, "run_dir": args.run, "direction": args.direction, "preset": args.preset,
             "model_overrides": parse_overrides(args.set), "compile": args.compile, "amp": args.amp, "amp_cpu": args.amp_cpu,
             "init_from": args.init_from, "init_stack": args.init_stack, "bidirectional": args.bidirectional, "record_attention": args.record_attention,
             **{name: getattr(args, name) for name, _ in VALUE_FLAGS}}
    try:
        compiled = resolve_config(given, stored).compile  # refused here, once, before any rank starts
    except ValueError as exc:
        ap.error(str(exc))
    launched = _ranks_if_asked(ap, args, argv, compiled)
    if launched is not None:
        return launched
    given["accumulation"] = args.accumulation  # auto on one process: the whole step's
    tc = resolve_config(given, stored)
    try:
        run = train(tc, resume=args.resume)
    except (FileExistsError, WarmStartError, DataMixError, WorldChangeError) as exc:
        if int(os.environ.get("RANK", "0") or 0) == 0:  # every rank refuses alike; one says why
            print(f"aiayn train: {exc}", file=sys.stderr)
        return 2
    if args.export and rank_and_world()[0] == 0:
        out = export(run, args.export, last=args.export_average)
        print(f"exported {out}")
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return 0
