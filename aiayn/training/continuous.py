"""``aiayn train-on``: training that goes on. One command, run in the background whenever the machine is otherwise
idle, that makes the shipped model of one direction better a deadline at a time:

1. **Train.** Resume the run the shipped checkpoint came from (its meta names the run folder), or this command's own
   run (``~/.cache/aiayn/runs/<direction>-on``), exactly where it stopped (``aiayn train --run DIR --resume``). When
   neither folder holds a state (a fresh machine), start a warm start from the shipped weights instead (``aiayn
   train --init-from checkpoints/<direction>``; Zoph et al. 2016) with the recipe the shipped model was trained
   with, on a data folder whose ``spm.model`` is the shipped one (a ``<data>-shipspm`` folder beside the data,
   with links to its splits, when the data's own SentencePiece model differs). Training stops at the deadline
   (``--until HH:MM`` or ``--minutes N``) less a reserve for what follows.
2. **Export a candidate.** Average the last states (Section 6.1: "averaging the last 5 checkpoints") into a float16
   checkpoint, evaluate it on the data's test split (the Ding test split) and write its model card
   (:mod:`.finish`, as ``aiayn train-both`` does), then score it on the development sets (``aiayn evaluate-dev``).
3. **Judge.** The candidate beats the shipped checkpoint only when its chrF is higher on the test split *and* on
   every development set (:func:`verdict`); the verdict, both sides' scores and the steps and tokens this call
   added go to ``CANDIDATE/verdict.json``. The command never replaces ``checkpoints/`` by itself: ``--ship`` copies
   a candidate that beats the shipped one over it, with its card.
4. **Interpolate** (``--interpolate 0.25,0.5,0.75``, optional). A fine-tuned model can be better in one place and
   worse in another; a weight interpolation ``(1 - w) shipped + w candidate`` (WiSE-FT, Wortsman et al. 2022) can
   keep the best of both. Each ``w`` is scored on the data's *valid* split, which neither side of the verdict uses,
   and the best one is judged like the candidate (same sets, same rule) and, with ``--ship``, shipped when the plain
   candidate does not beat and it does. Choosing ``w`` on the sets it is judged on would flatter it.
5. **Go on with other seeds** (``--then-seeds 46,47``, optional). A fine-tune ends at its ``max_steps``, usually
   well before the deadline; the time left would be idle. With seeds given, a run that ends with at least
   ``--min-round-minutes`` left warm-starts the next run from the shipped checkpoint (as ``--ship`` left it) with the
   finished run's recipe and the next seed, in ``<run>-seed<S>``, judged into ``<out>-seed<S>``: each round
   is another fine-tune of the same parent (the ingredients of a soup, :mod:`.soup`), or, with ``--ship``, a
   greedy climb in which each round starts from the last winner; ``--climb`` climbs the same way without writing
   the shipped folder, and ``aiayn ship`` (:mod:`.shipping`) ships the last winner on its verdicts.

By default the process lowers its priority to ``nice`` 19 first (its children inherit it), and each training process
leads a session whose scheduling autogroup gets the same (:func:`yield_autogroup`), so tests and the app keep their
speed while it trains. Not a part of the paper.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from ..checkpoint_format import weights_sha256
from .allocator import ALLOCATORS, allocator_env, describe

REPO = Path(__file__).resolve().parents[2]
#: where the candidates and this command's own runs go
CACHE = Path("~/.cache/aiayn").expanduser()
#: the training recipes ``--recipe`` picks when the run is started afresh; "shipped" (the default) is the recipe
#: stored in the shipped checkpoint's meta, and falls back to "cpu" when the meta has none
RECIPES: dict[str, dict[str, Any]] = {
    # The recipe of the shipped checkpoints' last CPU sessions (docs/training.md, sessions 6 and 7): 4,096-token
    # steps, Equation 3 with warmup 400 at 0.2 of its rate, sentence pairs twice. Precision and threads are left
    # to `aiayn train`, which times bf16 against float32 on the CPU it runs on (bf16 is slower on some CPUs with
    # native bf16) and picks the threads from the load.
    "cpu": {"max_tokens": 4096, "accumulation": 1, "warmup_steps": 400, "lr_scale": 0.2, "upsample_sentences": 2,
            "valid_every": 250, "valid_bleu_sentences": 100, "save_every": 250, "keep": 5},
    # For the tests: a few dozen steps of whatever (tiny) model the shipped checkpoint is.
    "tiny": {"max_tokens": 512, "accumulation": 1, "warmup_steps": 10, "max_steps": 24, "valid_every": 12,
             "valid_bleu_sentences": 2, "save_every": 6, "keep": 3, "max_len": 48},
}
#: training fields a warm start leaves to `aiayn train`'s own choice on this machine (see :func:`recipe_flags`)
MACHINE_FIELDS = frozenset({"amp_cpu", "threads", "pad_multiple", "adam_impl", "dropout_impl", "amp", "compile"})
#: model fields not passed to ``aiayn train --set`` (the vocabulary size comes from spm.model, the preset by name)
NOT_SET = ("vocab_size", "preset_name")
#: exit codes
EXIT_BAD_INPUT, EXIT_TRAIN_FAILED, EXIT_CANDIDATE_FAILED, EXIT_INTERRUPTED = 2, 3, 4, 130


class BadInput(ValueError):
    """A command line or a machine state this command refuses before training (the message says why)."""


# -- the deadline ---------------------------------------------------------------------------------------------------
def parse_deadline(until: str | None, minutes: float | None, now: _dt.datetime) -> _dt.datetime:
    """The deadline of ``--until HH:MM`` (the next such time of the local clock after ``now``; tomorrow when it has
    passed today) or ``--minutes N`` (``now`` + N minutes); ``now`` is an aware datetime.

    Raises:
        BadInput: neither or both given, a malformed time, or a non-positive number of minutes.
    """
    if (until is None) == (minutes is None):
        raise BadInput("give exactly one of --until HH:MM and --minutes N")
    if minutes is not None:
        if not minutes > 0:
            raise BadInput(f"--minutes must be positive, got {minutes}")
        return now + _dt.timedelta(minutes=minutes)
    try:
        hh, mm = (int(x) for x in until.split(":"))
        if not (0 <= hh < 24 and 0 <= mm < 60):
            raise ValueError
    except ValueError:
        raise BadInput(f"--until takes a time HH:MM (24-hour clock), got {until!r}") from None
    at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    return at if at > now else at + _dt.timedelta(days=1)


# -- the plan: which run, which data, which flags -------------------------------------------------------------------
def _read_json(path: Path) -> dict[str, Any]:
    try:
        out = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read {path}: {exc}") from None
    if not isinstance(out, dict):
        raise BadInput(f"{path} does not hold a JSON object")
    return out


def _json_or_empty(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or ``{}`` when it is missing, unreadable or not an object."""
    try:
        return _read_json(path)
    except BadInput:
        return {}


def _last_state(run: Path) -> dict[str, Any] | None:
    """The ``trainer_state.json`` of the run's last state (step, tokens, wall_time...), or None without states."""
    from .state import list_states

    states = list_states(run) if run.is_dir() else []
    return _read_json(states[-1] / "trainer_state.json") if states else None


def choose_run(given: str | None, shipped_meta: dict[str, Any], direction: str) -> tuple[Path, bool]:
    """``(run folder, resume?)``: ``--run`` when given; else the run the shipped checkpoint was trained in when it
    still holds a state, else this command's own ``~/.cache/aiayn/runs/<direction>-on``. ``resume`` is whether
    that folder holds a state (otherwise a warm start begins there)."""
    own = CACHE / "runs" / f"{direction}-on"
    if given:
        candidates = [Path(given).expanduser()]
    else:
        parent = (shipped_meta.get("train_config") or {}).get("run_dir")
        candidates = [Path(parent).expanduser()] if parent else []
        candidates.append(own)
    for run in candidates:
        if _last_state(run) is not None:
            return run, True
    return candidates[-1], False


def training_pid(run: Path) -> int | None:
    """The process id of another ``aiayn train`` that trains ``run`` now (read from ``/proc``), or None: two trainers
    on one run would overwrite each other's states."""
    target = run.expanduser().resolve()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if int(proc.name) == os.getpid() or "train" not in argv or not any("aiayn" in a for a in argv):
            continue
        for flag, value in zip(argv, argv[1:]):
            if flag in ("--run", "--run-dir") and Path(value).expanduser().resolve() == target:
                return int(proc.name)
    return None


def data_with_shipped_spm(data: Path, shipped: Path) -> Path:
    """A data folder whose ``spm.model`` is byte-identical to the shipped checkpoint's (the warm start's token ids
    must mean the same pieces): ``data`` itself when it is, else ``<data>-shipspm`` beside it, holding links to
    ``data``'s split, datasheet, dictionary and ``train_kinds.txt`` files and a copy of the shipped ``spm.model`` (docs/training.md,
    session 6).

    Raises:
        BadInput: ``data`` lacks train.tsv, valid.tsv or test.tsv, or ``shipped`` has no spm.model.
    """
    missing = [f for f in ("train.tsv", "valid.tsv", "test.tsv") if not (data / f).is_file()]
    if missing or not (shipped / "spm.model").is_file():
        raise BadInput(f"cannot warm-start: {data} lacks {missing}" if missing else f"{shipped} has no spm.model")
    ship_spm = (shipped / "spm.model").read_bytes()
    if (data / "spm.model").is_file() and (data / "spm.model").read_bytes() == ship_spm:
        return data
    return link_with_spm(data, data.parent / f"{data.name}-shipspm", ship_spm)


def link_with_spm(data: Path, out: Path, spm: bytes) -> Path:
    """``out`` (made if missing) with links to ``data``'s split, datasheet, dictionary and ``train_kinds.txt`` files
    and ``spm`` as its ``spm.model``; returns ``out``. Each file is replaced atomically, so two processes may write
    the same folder at once (:func:`data_with_shipped_spm`, ``aiayn data all``)."""
    out.mkdir(parents=True, exist_ok=True)
    # each file is made under a name of this call's own and moved into place (os.replace is atomic): both
    # directions started at once write the same folder (session 17: the second start's unlink-then-link failed)
    for f in data.iterdir():
        if f.is_file() and (f.suffix == ".tsv" or f.name in ("datasheet.json", "DATASHEET.md", "train_kinds.txt")):
            tmp = out / f".{f.name}.{uuid.uuid4().hex}"
            tmp.symlink_to(f.resolve())
            os.replace(tmp, out / f.name)
    tmp = out / f".spm.model.{uuid.uuid4().hex}"
    tmp.write_bytes(spm)
    os.replace(tmp, out / "spm.model")
    return out


def shipped_mix(shipped_meta: dict[str, Any]) -> str | None:
    """The data mix (``kind_weights``, :func:`aiayn.training.loader.parse_kind_weights`) the shipped checkpoint was
    last trained on, from its meta's ``train_config``; None when it has none or trained on every pair once."""
    spec = (shipped_meta.get("train_config") or {}).get("kind_weights")
    return None if spec in (None, "", "none") else str(spec)


def recipe_flags(name: str, shipped_meta: dict[str, Any], overrides: dict[str, Any],
                 processes: int = 1) -> tuple[str, list[str]]:
    """``(recipe name used, aiayn train flags)`` of a warm start: the ``"shipped"`` recipe is the training
    configuration stored in the shipped checkpoint's meta (its fields that ``aiayn train`` has a flag for, less
    those this command sets), ``"cpu"`` when the meta has none; ``overrides`` (``--train-set``) go on top. A
    recipe's ``accumulation`` counts the micro-batches of a whole step: trained by ``processes`` processes, each
    takes its share (:func:`share_accumulation`), so the steps are the same for any number of processes.

    Raises:
        BadInput: an unknown recipe, a field without an ``aiayn train`` flag (from :func:`.both.train_flags`), or
            an accumulation that ``processes`` does not divide.
    """
    from .both import OWN_FIELDS, BadInput as BothBadInput, _train_flag_names, train_flags

    if name == "shipped":
        stored = shipped_meta.get("train_config") or {}
        # what depends on the machine (precision, threads, padding, the Adam kernel) is decided anew by
        # `aiayn train` on the machine that trains now, not copied from the one that trained the shipped model
        keep = _train_flag_names() - set(OWN_FIELDS) - {"token_cache", "max_minutes"} - MACHINE_FIELDS
        train = {k: v for k, v in stored.items() if k in keep}
        if not train:
            name, train = "cpu", dict(RECIPES["cpu"])
    elif name in RECIPES:
        train = dict(RECIPES[name])
    else:
        raise BadInput(f"unknown recipe {name!r}; choose shipped, {', '.join(RECIPES)}")
    # The data mix is part of what the shipped weights learnt, not of the machine: a named recipe that does not
    # set one goes on with the shipped model's mix (a recipe's own default, every pair once, moved session 16's
    # cooldown toward Ding's phrases and away from the everyday sentences the shipped mix weighted x6).
    inherited = shipped_mix(shipped_meta)
    if "kind_weights" not in train and inherited is not None:
        train["kind_weights"] = inherited
    train.update(overrides)
    if int(train.get("accumulation") or 0) > 0:
        train["accumulation"] = share_accumulation(int(train["accumulation"]), processes)
    try:
        return name, train_flags(train)
    except BothBadInput as exc:
        raise BadInput(str(exc)) from None


class StepNotShared(BadInput):
    """A step's micro-batches that the processes cannot share equally (:func:`share_accumulation`)."""


def share_accumulation(micro_batches: int, processes: int) -> int:
    """Micro-batches each of ``processes`` processes accumulates in a step of ``micro_batches`` (the ``--accumulation``
    of ``aiayn train`` under DistributedDataParallel is per process: a step is accumulation x world micro-batches,
    :func:`aiayn.training.pipeline.step_groups`).

    Raises:
        StepNotShared: ``processes`` does not divide ``micro_batches`` (the steps would change).
    """
    if micro_batches % processes:
        divisors = [n for n in range(1, micro_batches + 1) if micro_batches % n == 0]
        raise StepNotShared(f"a step of {micro_batches} micro-batches cannot be shared by {processes} processes: "
                            f"give --processes {' or '.join(map(str, divisors))}, or another accumulation (--train-set "
                            "accumulation=N counts a whole step's micro-batches)")
    return micro_batches // processes


def share_threads(threads: int | None, processes: int) -> int:
    """Intra-op threads of each of ``processes`` (>= 2) training processes on this machine: ``threads`` (all cores
    when 0 or None) divided among them, at least 1 each."""
    return max(1, (threads or os.cpu_count() or 1) // processes)


def resume_accumulation(stored: int, saved_world: int, given: int | None, processes: int) -> int | None:
    """The ``--accumulation`` for resuming on ``processes`` processes a run whose last state was saved by
    ``saved_world`` processes of ``stored`` micro-batches each (the state's ``world`` and ``accumulation``; the
    run's stored configuration for states written before a state recorded its accumulation): the same
    steps (``stored x saved_world`` micro-batches) shared anew, or ``given`` (a whole step's micro-batches, from
    ``--train-set``) shared; None when nothing need be given (same world and nothing asked, or a derived
    accumulation, 0, which ``aiayn train`` rounds to the world itself).

    Raises:
        BadInput: ``processes`` does not divide the step (:func:`share_accumulation`).
    """
    if given is not None:
        return share_accumulation(int(given), processes) if int(given) > 0 else int(given)
    if stored <= 0 or saved_world == processes:
        return None
    return share_accumulation(stored * saved_world, processes)


def rank_envs(env: dict[str, str], processes: int, port: int | None = None) -> list[dict[str, str]]:
    """The environment of each of ``processes`` training processes on this machine: ``env`` itself for one; for
    more, ``env`` plus what ``torch.distributed``'s ``env://`` rendezvous reads (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` 127.0.0.1, ``MASTER_PORT`` ``port`` or a free one), as
    ``torchrun --standalone`` would set them (:func:`aiayn.training.loop.setup_distributed` joins with gloo)."""
    if processes == 1:
        return [dict(env)]
    if port is None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    common = {"WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(processes), "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": str(port)}
    return [{**env, **common, "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(processes)]


def model_set_flags(shipped: Path) -> tuple[str, list[str]]:
    """``(preset, ["d_model=256", ...])``: the shipped checkpoint's model configuration as ``aiayn train --preset
    P --set ...`` (every field but the vocabulary size), so that the warm start's tensors fit its weights."""
    model = _read_json(shipped / "config.json").get("model") or {}
    if not model:
        raise BadInput(f"{shipped}/config.json has no model configuration")
    sets = [f"{k}={json.dumps(v)}" for k, v in sorted(model.items()) if k not in NOT_SET]
    return str(model.get("preset_name") or "base"), sets


def _check_mix(data: Path, train: dict[str, Any]) -> None:
    """Refuse (BadInput) a ``kind_weights`` the data folder cannot give, before the training child starts."""
    if "kind_weights" not in train:
        return
    from .loader import DataMixError, kind_mix

    try:
        kind_mix(data, str(train["kind_weights"]))
    except DataMixError as exc:
        raise BadInput(str(exc)) from None


def train_command(args: argparse.Namespace, shipped: Path, shipped_meta: dict[str, Any], budget_min: float,
                  recipe_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The plan of the training child: ``{"run", "resume", "data", "recipe", "cmd", "before": {step, tokens},
    "processes"}``. ``--processes auto`` (the default): 2 on a CPU with 2 or more cores
    (:func:`aiayn.training.cli.auto_processes`), 1 where they cannot share the recipe's step (an odd accumulation).
    ``--max-minutes`` counts the run's whole wall time (:func:`aiayn.training.loop.train`), so a resumed run gets its
    stored wall time plus ``budget_min``. A warm start takes its recipe (and, without ``--data``, its data folder)
    from ``recipe_config`` when given (:func:`recipe_of_run`: a finished run's), else from ``--recipe``."""
    given = getattr(args, "processes", 1)
    if given != "auto":
        return _train_command(args, int(given or 1), shipped, shipped_meta, budget_min, recipe_config)
    from .cli import auto_processes

    processes = auto_processes(args.threads, False)
    if processes > 1:
        try:
            return _train_command(args, processes, shipped, shipped_meta, budget_min, recipe_config)
        except StepNotShared:
            pass  # e.g. accumulation=3: one process trains the recipe's steps
    return _train_command(args, 1, shipped, shipped_meta, budget_min, recipe_config)


def _train_command(args: argparse.Namespace, processes: int, shipped: Path, shipped_meta: dict[str, Any],
                   budget_min: float, recipe_config: dict[str, Any] | None) -> dict[str, Any]:
    """:func:`train_command` for a number of ``processes``.

    Raises:
        StepNotShared: ``processes`` cannot share the step's micro-batches; BadInput: the other refusals.
    """
    from .cli import parse_overrides

    run, resume = choose_run(args.run, shipped_meta, args.direction)
    pid = training_pid(run)
    if pid is not None:
        raise BadInput(f"process {pid} is training {run} now; wait for it to stop (or stop it) and run this again")
    if processes < 1:
        raise BadInput(f"--processes must be at least 1, not {processes}")
    # the count given explicitly: train-on starts the ranks itself, and one process must not become aiayn train's auto
    base = [sys.executable, "-m", "aiayn", "train", "--run", str(run), "--processes", str(processes)]
    per_process = args.threads if processes == 1 else share_threads(args.threads, processes)
    threads = ["--threads", str(per_process)] if per_process else []
    extra = parse_overrides(args.train_set)
    if getattr(args, "kind_weights", None) is not None:
        extra["kind_weights"] = args.kind_weights
    if resume:
        last = _last_state(run) or {}
        stored = _read_json(run / "train_config.json")
        if stored.get("direction") != args.direction:
            raise BadInput(f"{run} was trained {stored.get('direction')}, not {args.direction}")
        from .both import train_flags

        minutes = float(last.get("wall_time", 0.0)) / 60 + budget_min
        _check_mix(Path(stored["data_dir"]).expanduser(), extra)
        accumulation = resume_accumulation(int(last.get("accumulation", stored.get("accumulation")) or 0), int(last.get("world", 1)),
                                           extra.pop("accumulation", None), processes)
        if accumulation is not None:
            extra["accumulation"] = accumulation
        cmd = base + ["--resume", "--max-minutes", f"{minutes:.3f}"] + threads + train_flags(extra)
        return {"run": run, "resume": True, "data": Path(stored["data_dir"]).expanduser(), "recipe": "stored in the run",
                "cmd": cmd, "before": {"step": last.get("step", 0), "tokens": last.get("tokens", 0)},
                "processes": processes}
    given = args.data or (recipe_config or shipped_meta.get("train_config") or {}).get("data_dir")
    if not given or not Path(given).expanduser().is_dir():
        raise BadInput(f"no run to resume ({run} holds no state) and no data folder for a warm start "
                       f"({given or 'none named'}): give --data DIR (e.g. `aiayn data debian`'s "
                       "output), or build the folders the recipes read with `aiayn data all` (docs/data.md)")
    data = data_with_shipped_spm(Path(given).expanduser(), shipped)
    _check_mix(data, extra)
    inherited = shipped_mix(shipped_meta)
    if "kind_weights" not in extra and inherited is not None and not (data / "train_kinds.txt").is_file():
        raise BadInput(f"the shipped model was trained on the data mix {inherited}, which {data} cannot give (it has "
                       f"no train_kinds.txt, from `aiayn data debian`): give such a folder, or --kind-weights none "
                       f"to train on every pair once")
    if recipe_config is not None:
        recipe = f"that of {recipe_config.get('run_dir')}"
        _, flags = recipe_flags("shipped", {"train_config": recipe_config}, extra, processes)
    else:
        recipe, flags = recipe_flags(args.recipe, shipped_meta, extra, processes)
    preset, sets = model_set_flags(shipped)
    cmd = base + ["--data", str(data), "--direction", args.direction, "--init-from", str(shipped), "--preset", preset,
                  "--set", *sets, *flags, "--max-minutes", f"{budget_min:.3f}"] + threads
    return {"run": run, "resume": False, "data": data, "recipe": recipe, "cmd": cmd, "before": {"step": 0, "tokens": 0},
            "processes": processes}


def parse_seeds(spec: str | None) -> list[int]:
    """``"46,47"`` -> ``[46, 47]`` (in the order given); None or ``""`` -> ``[]``.

    Raises:
        BadInput: a part that is not a whole number of 0 or more, or a seed given twice (two rounds would train the
            same run).
    """
    seeds: list[int] = []
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        if not part.strip().isdigit():
            raise BadInput(f"--then-seeds takes whole numbers separated by commas, got {part.strip()!r}")
        if int(part) in seeds:
            raise BadInput(f"--then-seeds names the seed {int(part)} twice")
        seeds.append(int(part))
    return seeds


def round_folders(run: Path, out: Path, seed: int) -> tuple[Path, Path]:
    """``(run folder, output folder)`` of the round with ``seed`` after the first round's ``run`` and ``out``:
    ``<run>-seed<S>`` and ``<out>-seed<S>`` beside them. A round whose run folder already holds a state (an earlier
    call stopped in it) resumes it."""
    return run.parent / f"{run.name}-seed{seed}", out.parent / f"{out.name}-seed{seed}"


def recipe_of_run(run: Path) -> dict[str, Any]:
    """The training configuration of ``run`` (its ``train_config.json``, changes of its resumes included) as the
    recipe of a new warm start: its ``accumulation`` counted over a whole step (the stored one is per process; times
    the ``world`` of its last state), as ``--train-set accumulation=N`` counts it.

    Raises:
        BadInput: ``run`` has no readable ``train_config.json``.
    """
    try:
        config = _read_json(run / "train_config.json")
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if not config:
        raise BadInput(f"{run} has no train_config.json to take a recipe from")
    last = _last_state(run) or {}
    if int(config.get("accumulation") or 0) > 0:
        config["accumulation"] = int(last.get("accumulation", config["accumulation"])) * int(last.get("world", 1))
    return config


# -- the verdict ----------------------------------------------------------------------------------------------------
def verdict(candidate: dict[str, dict[str, float]], shipped: dict[str, dict[str, float]], metric: str = "chrf") -> dict[str, Any]:
    """Whether the candidate beats the shipped checkpoint: a strictly higher ``metric`` on every set that both were
    scored on (``{"test": {"bleu": .., "chrf": ..}, "dev/short": {...}, ...}``); a set only one side has counts as a
    loss (nothing is shipped on a comparison that was not made).

    Returns:
        ``{"beats": bool, "metric": str, "sets": {name: {"candidate": float | None, "shipped": float | None,
        "better": bool}}}``.

    Raises:
        ValueError: no set at all.
    """
    names = list(dict.fromkeys([*shipped, *candidate]))
    if not names:
        raise ValueError("nothing to compare: no scores")
    sets: dict[str, Any] = {}
    for name in names:
        c = (candidate.get(name) or {}).get(metric)
        s = (shipped.get(name) or {}).get(metric)
        sets[name] = {"candidate": c, "shipped": s, "better": c is not None and s is not None and c > s}
    return {"beats": all(v["better"] for v in sets.values()), "metric": metric, "sets": sets}


def verdict_line(v: dict[str, Any], candidate: Path, what: str = "candidate") -> str:
    """The sentence printed at the end: ``candidate beats shipped: DIR`` or why it does not (``what`` names the
    side judged: "candidate", "the interpolation")."""
    if v["beats"]:
        return f"{what} beats shipped: {candidate}"
    paired = (v.get("paired") or {}).get("sets") or {}

    def why(name: str) -> str:  # how many outputs changed, and the paired bootstrap's p (aiayn compare-evals)
        p = paired.get(name.removeprefix("dev/"))
        return "" if p is None else f"; {p['n_changed']} of {p['n_sentences']} changed, p {p['p_value']:.2f}"

    lost = [f"{n} ({s['candidate'] if s['candidate'] is None else round(s['candidate'], 2)} vs "
            f"{s['shipped'] if s['shipped'] is None else round(s['shipped'], 2)}{why(n)})"
            for n, s in v["sets"].items() if not s["better"]]
    return f"{what} does not beat shipped on {v['metric']}: " + ", ".join(lost) + f" ({what} kept in {candidate})"


# -- the scores of both sides ---------------------------------------------------------------------------------------
def _test_scores(path: Path) -> dict[str, float] | None:
    """``{"bleu", "chrf"}`` of an ``aiayn evaluate`` JSON, or None when it cannot be read."""
    try:
        sc = _read_json(path)["scores"]["model"]
        return {"bleu": float(sc["bleu"]), "chrf": float(sc["chrf"])}
    except (BadInput, KeyError, TypeError, ValueError):
        return None


def _dev_scores(path: Path, direction: str) -> dict[str, dict[str, float]]:
    """``{"dev/short": {"bleu", "chrf"}, ...}`` of an ``aiayn evaluate-dev`` JSON for ``direction`` ({} if none)."""
    try:
        per_set = _read_json(path)["scores"][direction]
    except (BadInput, KeyError, TypeError):
        return {}
    return {f"dev/{name}": {"bleu": float(s["bleu"]), "chrf": float(s["chrf"])} for name, s in per_set.items()}


#: meta fields that tell one exported checkpoint from another (an evaluation of other weights is stale)
IDENTITY = ("step", "train_tokens", "averaged_states", "interpolation", "soup")


def _fresh_test_eval(path: Path, ckpt: Path, test_file: Path) -> bool:
    """Whether an ``aiayn evaluate`` JSON scored these weights (same step, tokens and averaged states as the
    checkpoint's meta) on ``test_file`` (same bytes) in full with beam 4 and alpha 0.6, the paper's beam search (no
    reranking) and the model's own domain tag (if it has domain tags)."""
    from ..files import sha256_file

    try:
        config = _read_json(ckpt / "config.json")
        ev, meta = _read_json(path), config.get("meta") or {}
    except BadInput:
        return False
    dec, ev_meta = ev.get("decoding") or {}, ev.get("checkpoint_meta") or {}
    return (ev.get("data") or {}).get("split_file_sha256") == sha256_file(test_file) and ev.get("limit") is None \
        and dec.get("beam_size") == 4 and dec.get("alpha") == 0.6 and dec.get("rerank") is None \
        and dec.get("domain") == (config.get("model") or {}).get("domain") \
        and all(ev_meta.get(k) == meta.get(k) for k in IDENTITY)


def devset_digests(devsets: Path) -> dict[str, str]:
    """``{set name: SHA-256 of its file}`` for every development set in ``devsets`` (:data:`SET_NAMES`): what a
    verdict records as the sets it was judged on, and what ``aiayn ship`` compares with the sets of today.

    Raises:
        FileNotFoundError: a set's file is missing.
    """
    from ..evaluation.devsets import SET_NAMES
    from ..files import sha256_file

    return {n: sha256_file(devsets / f"{n}.tsv") for n in SET_NAMES}


def _fresh_dev_eval(path: Path, ckpt: Path, devsets: Path, direction: str) -> bool:
    """Whether an ``aiayn evaluate-dev`` JSON scored these weights (``model.safetensors``' SHA-256) on the current
    files of every set in ``devsets`` in ``direction``."""
    try:
        ev = _read_json(path)
    except BadInput:
        return False
    sets = ev.get("sets") or {}
    return direction in (ev.get("scores") or {}) and ev.get("model_sha256") == weights_sha256(ckpt) \
        and all((sets.get(n) or {}).get("sha256") == sha for n, sha in devset_digests(devsets).items())


def side_evals(ckpt: Path, work: Path, data: Path, devsets: Path, direction: str, device: str) -> dict[str, Path]:
    """``{"test": eval_test.json, "dev": eval_dev.json}`` of a checkpoint: its own files when they scored the same
    files with the paper's decoding (and the test file kept its outputs, which the paired comparison reads), else
    measured now into ``work/`` (``ckpt`` itself is never written to)."""
    from ..evaluation.devsets import EVAL_DEV_FILE, cli_main as dev_main
    from ..evaluation.scoring import cli_main as evaluate_main
    from .finish import evaluate_argv

    work.mkdir(parents=True, exist_ok=True)
    test_json = ckpt / "eval_test.json"
    if not (_fresh_test_eval(test_json, ckpt, data / "test.tsv") and "hypotheses" in _read_json(test_json)):
        test_json = work / "eval_test.json"
        evaluate_main(evaluate_argv(ckpt, data, "test", device, test_json, direction=direction, samples=False,
                                    hypotheses=True))
    dev_json = ckpt / EVAL_DEV_FILE
    if not _fresh_dev_eval(dev_json, ckpt, devsets, direction):
        dev_json = work / EVAL_DEV_FILE
        dev_main(["--checkpoint", str(ckpt), "--devsets", str(devsets), "--direction", direction, "--device", device,
                  "--out", str(dev_json)])
    return {"test": test_json, "dev": dev_json}


def eval_scores(evals: dict[str, Path], direction: str) -> dict[str, dict[str, float]]:
    """The scores :func:`verdict` compares (``{"test": {"bleu", "chrf"}, "dev/short": ...}``) from the files of
    :func:`side_evals`; a file that cannot be read gives no entry (a loss for its side)."""
    test = _test_scores(evals["test"])
    out = {"test": test} if test else {}
    out.update(_dev_scores(evals["dev"], direction))
    return out


def paired_comparison(shipped: dict[str, Path], candidate: dict[str, Path], data: Path, devsets: Path,
                      direction: str) -> dict[str, Any]:
    """Which outputs changed between the two sides' evaluations (:func:`side_evals`) and each set's paired
    bootstrap p-value (:mod:`aiayn.evaluation.paired`), as JSON for the verdict; ``{"error": message}`` when the
    comparison cannot be made (it informs the verdict, never decides it)."""
    from ..evaluation.paired import compare_files, summary

    try:
        return summary(compare_files(shipped["dev"], candidate["dev"], shipped["test"], candidate["test"],
                                     devsets=devsets, data=data, direction=direction))
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}


def valid_chrf(ckpt: Path, data: Path, direction: str, device: str = "cpu") -> float:
    """chrF (beam 4, alpha 0.6) of the checkpoint folder ``ckpt`` on ``data/valid.tsv``, the split that chooses
    (interpolation weights, soup ingredients) and never judges: ``aiayn evaluate --split valid`` into
    ``ckpt/eval_valid.json``, or that file when it scored these weights on this file already.

    Raises:
        ValueError: the evaluation failed or its file holds no chrF.
    """
    from ..evaluation.scoring import cli_main as evaluate_main
    from .finish import evaluate_argv

    out = ckpt / "eval_valid.json"
    if not _fresh_test_eval(out, ckpt, data / "valid.tsv"):
        rc = evaluate_main(evaluate_argv(ckpt, data, "valid", device, out, direction=direction, samples=False))
        if rc != 0:
            raise ValueError(f"{ckpt} could not be scored on {data / 'valid.tsv'} (exit {rc})")
    scores = _test_scores(out)
    if scores is None:
        raise ValueError(f"{out} holds no chrF")
    return scores["chrf"]


def parse_weights(spec: str | None) -> list[float]:
    """``"0.25,0.5,0.75"`` -> ``[0.25, 0.5, 0.75]`` (sorted, without repeats); None or ``""`` -> ``[]``.

    Raises:
        BadInput: a part that is not a number strictly between 0 and 1 (0 is the shipped model, 1 the candidate).
    """
    weights: set[float] = set()
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        try:
            w = float(part)
        except ValueError:
            w = float("nan")
        if not 0.0 < w < 1.0:
            raise BadInput(f"--interpolate takes weights strictly between 0 and 1, separated by commas, got {part.strip()!r}")
        weights.add(w)
    return sorted(weights)


def interpolation_search(shipped: Path, candidate: Path, data: Path, weights: list[float], work: Path, direction: str,
                         device: str = "cpu") -> dict[str, Any]:
    """Write ``(1 - w) shipped + w candidate`` (:func:`aiayn.training.export.interpolate`) for each ``w`` of
    ``weights`` into ``work/interp-<w>``, score each on ``data/valid.tsv`` (chrF, beam 4, alpha 0.6, ``aiayn
    evaluate --split valid``, into its ``eval_valid.json``) and keep only the best (ties: the weight nearer 0.5).

    Returns:
        ``{"split": "valid", "valid_chrf": {"<w>": chrF, ...}, "weight": best w, "checkpoint": "<its folder>"}``.

    Raises:
        ValueError: no weights, or a weight's evaluation failed (names it); from ``interpolate``: checkpoints of
            different models.
    """
    from .export import interpolate

    if not weights:
        raise ValueError("no interpolation weights to try")
    chrf: dict[float, float] = {}
    for w in weights:
        path = work / f"interp-{w:g}"
        shutil.rmtree(path, ignore_errors=True)
        interpolate(shipped, candidate, path, weight=w)
        try:
            chrf[w] = valid_chrf(path, data, direction, device)
        except ValueError as exc:
            raise ValueError(f"the interpolation w = {w:g}: {exc}") from None
    best = max(weights, key=lambda w: (chrf[w], -abs(w - 0.5)))
    for w in weights:
        if w != best:
            shutil.rmtree(work / f"interp-{w:g}", ignore_errors=True)
    return {"split": "valid", "valid_chrf": {f"{w:g}": chrf[w] for w in weights}, "weight": best,
            "checkpoint": str(work / f"interp-{best:g}")}


def judge_checkpoint(path: Path, shipped_scores: dict[str, dict[str, float]], data: Path, devsets: Path,
                     direction: str, hardware: str, notes: str, shipped_evals: dict[str, Path] | None = None
                     ) -> dict[str, Any]:
    """Score the checkpoint folder ``path`` on the test split and the development sets (into its own evaluation
    JSONs, :func:`side_evals`), judge it against ``shipped_scores`` (:func:`verdict`), evaluate it on the data's
    ``test_general.tsv`` when there is one (its scores go into the card's notes, as a candidate's do), card it
    (``aiayn card`` with ``hardware`` and ``notes``) and, when it beats, give it the files a shipped checkpoint carries (alignment,
    attribution, head sweep; as a candidate gets them from :mod:`.finish`).

    With ``shipped_evals`` (the shipped side's files, :func:`side_evals`), the verdict also says which outputs
    changed and how likely each difference is by chance (``"paired"``, :func:`paired_comparison`).

    Returns:
        the verdict plus ``"scores"`` (this checkpoint's), ``"devsets"`` (:func:`devset_digests`: the sets it was
        judged on) and ``"stages"`` (exit code of each stage run).
    """
    from ..alignment_eval import cli_main as align_main
    from ..attribution_eval import cli_main as attribution_main
    from ..evaluation.modelcard import cli_main as card_main
    from ..sweep import cli_main as sweep_main
    from ..evaluation.scoring import cli_main as evaluate_main
    from .finish import _general_notes, _scores, align_argv, attribution_argv, card_argv, evaluate_argv, run_stage

    evals = side_evals(path, path, data, devsets, direction, "cpu")
    scores = eval_scores(evals, direction)
    v = verdict(scores, shipped_scores)
    if shipped_evals:
        v["paired"] = paired_comparison(shipped_evals, evals, data, devsets, direction)
    stages = {}
    if (data / "test_general.tsv").is_file():  # the card's general-sentence line, as a candidate's (.finish)
        stages["general"] = run_stage("general", evaluate_main, evaluate_argv(
            path, data, "test_general", "cpu", path / "eval_test_general.json", direction=direction))
        notes = _general_notes(notes, _scores(path / "eval_test_general.json") if stages["general"] == 0 else None)
    stages["card"] = run_stage("card", card_main, card_argv(path, data, hardware, notes))
    if v["beats"]:
        stages["align"] = run_stage("align", align_main, align_argv(path, data, "cpu"))
        stages["attribution"] = run_stage("attribution", attribution_main, attribution_argv(path, "cpu"))
        stages["sweep"] = run_stage("sweep", sweep_main, ["--checkpoint", str(path), "--device", "cpu"])
    return {**v, "scores": scores, "devsets": devset_digests(devsets), "stages": stages}


def _judge_interpolation(plan: dict[str, Any], args: argparse.Namespace, out: Path, report: dict[str, Any],
                         weights: list[float]) -> dict[str, Any]:
    """:func:`interpolation_search` between the shipped checkpoint and ``out/candidate``, then the chosen one
    judged like the candidate (:func:`judge_checkpoint`); the result goes into ``report["interpolation"]`` and
    ``verdict.json`` is written again. Returns ``report``."""
    devsets = Path(args.devsets).expanduser() if args.devsets else REPO / "assets" / "devsets"
    shipped = Path(report["shipped"])
    t0 = time.monotonic()
    search = interpolation_search(shipped, out / "candidate", plan["data"], weights, out, args.direction)
    w = search["weight"]
    notes = (f"A weight interpolation (1 - w) x {shipped} + w x the candidate of `aiayn train-on` (WiSE-FT), w = {w:g}, "
             f"chosen by chrF on the valid split among {', '.join(search['valid_chrf'])}.")
    judged = judge_checkpoint(Path(search["checkpoint"]), report["scores"]["shipped"], Path(plan["data"]), devsets,
                              args.direction, _hardware(args.threads, plan.get("processes", 1)), notes,
                              {k: Path(v) for k, v in (report.get("shipped_evals") or {}).items()} or None)
    report["interpolation"] = {**search, **judged}
    report["seconds"]["interpolation"] = round(time.monotonic() - t0, 1)
    (out / "verdict.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


# -- shipping -------------------------------------------------------------------------------------------------------
def ship(candidate: Path, shipped: Path) -> Path:
    """Replace the checkpoint folder ``shipped`` by a copy of ``candidate`` (atomically: a half-copied checkpoint
    never appears), with the ``checkpoint`` field of its evaluation JSONs pointing at the new place, and the IBM
    Model 1 baseline of the shipped ``alignment.json`` kept (:func:`_keep_ibm1`). Returns ``shipped``."""
    from ..files import atomic_dir

    old_alignment = _json_or_empty(shipped / "alignment.json")
    with atomic_dir(shipped) as tmp:
        shutil.copytree(candidate, tmp, dirs_exist_ok=True)
        for ev in tmp.glob("eval_*.json"):
            data = json.loads(ev.read_text(encoding="utf-8"))
            data["checkpoint"] = str(shipped.resolve())
            ev.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        _keep_ibm1(old_alignment, tmp / "alignment.json")
    return shipped


def _keep_ibm1(old: dict[str, Any], path: Path) -> None:
    """Put the shipped ``ibm1`` block (the AER of IBM Model 1 trained on a sample of the training split: a baseline of
    the data, not of the weights) into the new ``alignment.json`` at ``path`` when both score the same gold set, so
    that the Alignment page compares every shipped model's heads with one baseline; the new file is otherwise
    unchanged. Nothing happens without both files or with another gold set."""
    new = _json_or_empty(path)
    if not (old.get("ibm1") and new and old.get("gold_sha256") == new.get("gold_sha256")):
        return
    new["ibm1"] = old["ibm1"]
    path.write_text(json.dumps(new, indent=1) + "\n", encoding="utf-8")


# -- the command ----------------------------------------------------------------------------------------------------
def _processes_arg(text: str) -> int | str:
    """``--processes``: ``auto`` or a whole number (:func:`aiayn.training.cli._parse_processes`)."""
    from .cli import _parse_processes

    return _parse_processes(text)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="aiayn train-on", description="Go on training the shipped model of one direction "
                                 "until a deadline (resume its run, or warm-start from its weights), then average the last "
                                 "states into a candidate, evaluate it on the test split and the development sets, and say "
                                 "whether it beats the shipped checkpoint. Never replaces checkpoints/ without --ship.")
    ap.add_argument("--direction", choices=["en-de", "de-en"], required=True)
    when = ap.add_mutually_exclusive_group(required=True)
    when.add_argument("--until", default=None, metavar="HH:MM", help="stop at this time of the local clock (tomorrow if past)")
    when.add_argument("--minutes", type=float, default=None, help="stop this many minutes from now")
    ap.add_argument("--reserve-minutes", type=float, default=10.0,
                    help="minutes before the deadline kept for averaging, evaluation and the card (default 10)")
    ap.add_argument("--run", default=None, help="run folder (default: the shipped model's run if it is still there, else "
                    "~/.cache/aiayn/runs/<direction>-on)")
    ap.add_argument("--data", default=None, help="data folder for a warm start (default: the one the shipped model was "
                    "trained on); a resumed run keeps its own")
    ap.add_argument("--shipped", default=None, help="the shipped checkpoint (default: checkpoints/<direction>)")
    ap.add_argument("--out", default=None, help="where the candidate and the verdict go (default: "
                    "~/.cache/aiayn/train-on/<direction>)")
    ap.add_argument("--recipe", default="shipped", help="recipe of a warm start: shipped (the shipped model's own), "
                    + ", ".join(RECIPES))
    ap.add_argument("--train-set", nargs="*", default=[], metavar="KEY=VALUE", help="training fields to change "
                    "(aiayn train flags, e.g. lr_scale=0.1 max_steps=5000)")
    ap.add_argument("--kind-weights", default=None, metavar="SPEC",
                    help="data mix by kind (aiayn train --kind-weights: none, default or kind=weight,...; needs the data "
                         "folder's train_kinds.txt); default: a resumed run keeps its own, a warm start the shipped model's "
                         "(its meta's train_config.kind_weights; none when it has none)")
    ap.add_argument("--last", type=int, default=5, help="states averaged into the candidate (Section 6.1: 5)")
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads for training and evaluation (0, the default: aiayn train decides from the load)")
    ap.add_argument("--devsets", default=None, help="development sets folder (default: assets/devsets)")
    ap.add_argument("--interpolate", default=None, metavar="W,...",
                    help="also try (1 - W) shipped + W candidate for each weight W in (0, 1), chosen by chrF on the "
                         "data's valid split, judged like the candidate (e.g. 0.25,0.5,0.75)")
    ap.add_argument("--ship", action="store_true", help="copy a candidate that beats the shipped checkpoint over it "
                    "(with --interpolate: else the chosen interpolation, when it beats)")
    ap.add_argument("--climb", action="store_true", help="with --then-seeds: after a round whose candidate (or its "
                    "interpolation) beats, the next rounds start from that winner and are judged against it, and "
                    "--shipped is never written; the last winner is printed for `aiayn ship` (--ship climbs through "
                    "the shipped folder instead)")
    ap.add_argument("--no-nice", action="store_true", help="keep this process's priority (default: nice 19, and the same for the scheduling "
                    "autogroup of each training process, which nice alone does not lower)")
    ap.add_argument("--allocator", default="auto", choices=ALLOCATORS,
                    help="memory allocator of the training child: auto (tcmalloc when installed, else glibc; about "
                         "1.1x the tokens a second on a CPU), tcmalloc, glibc (aiayn.training.allocator)")
    ap.add_argument("--processes", type=_processes_arg, default="auto",
                    help="train as this many processes (DistributedDataParallel, gloo), each with its share of every "
                         "step's micro-batches and of --threads; auto (the default): 2 on a CPU with 2 or more cores "
                         "(not with --threads 1), else 1, and 1 where two cannot share the step. On two cores 2 "
                         "processes of one thread train about 1.4x the tokens a second of one process of two threads "
                         "(docs/benchmarks.md); a step's micro-batches (accumulation) must be a multiple of a number "
                         "given, and a resume keeps the run's steps")
    ap.add_argument("--then-seeds", default=None, metavar="S,...",
                    help="when the run ends (its max_steps) with at least --min-round-minutes left, warm-start another "
                         "from the shipped checkpoint (as --ship left it) with the finished run's recipe and the next of "
                         "these seeds, in <run>-seed<S>, judged into <out>-seed<S>; and so on while seeds and time last")
    ap.add_argument("--min-round-minutes", type=float, default=20.0,
                    help="training minutes a round of --then-seeds needs to start (default 20)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan (run, data, the training command) and stop")
    return ap


def _run_child(cmd: list[str], timeout_s: float, env: dict[str, str] | None = None, processes: int = 1,
               who: str = "aiayn train-on") -> int:
    """Run the training child (``processes`` copies of ``cmd``, ranks of one DistributedDataParallel run, each with
    its :func:`rank_envs` environment), each in a session of its own; at ``timeout_s`` (or on Ctrl-C / SIGTERM)
    every rank's process group gets SIGINT, then SIGKILL 30 s later (its states are written atomically). A rank that
    fails stops the others (they would wait for it at the next all-reduce). When this process is niced, so is each
    rank's scheduling autogroup (:func:`yield_autogroup`). ``who`` names the command in its messages. Returns the
    exit code (the first failed rank's; rank 0's when stopped at the deadline, 130 when it had none).

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM while it trained (the ranks are stopped first).
    """
    envs = rank_envs(env if env is not None else dict(os.environ), processes)
    print("$ " + " ".join(cmd) + (f"  (x {processes} processes)" if processes > 1 else ""), flush=True)
    procs: list[subprocess.Popen] = []
    try:
        for e in envs:
            procs.append(subprocess.Popen(cmd, start_new_session=True, env=e))
            yield_autogroup(procs[-1].pid, os.nice(0))
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"{who}: training process {len(procs)} could not start ({exc}); stopping the others",
              file=sys.stderr)
        _stop_group(procs)
        return next((p.returncode for p in procs if p.returncode not in (None, 0)), 1)
    deadline, code = time.monotonic() + max(1.0, timeout_s), None
    try:
        while code is None:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                if len(procs) > 1:
                    print(f"{who}: training process {failed[0][0]} failed (exit {failed[0][1]}); stopping the "
                          "others", file=sys.stderr)
                code = failed[0][1]
            elif None not in codes:
                return 0
            elif time.monotonic() > deadline:  # stopped from outside: its last saved state is what it trained
                print(f"{who}: the training child passed the deadline; stopping it", file=sys.stderr)
                _stop_group(procs)
                return procs[0].returncode if procs[0].returncode is not None else EXIT_INTERRUPTED
            else:
                time.sleep(0.2)
    except KeyboardInterrupt:
        _stop_group(procs)
        raise
    _stop_group(procs)
    return code


def yield_autogroup(pid: int, nice: int) -> bool:
    """Give the scheduling autogroup of ``pid`` (the leader of a session of its own) the priority ``nice`` when it is
    above 0; returns whether it was set. With ``kernel.sched_autogroup_enabled=1`` (Linux's default on desktops and
    this project's VMs) every session is a scheduling group that gets a fair share of the CPU whatever the nice value
    of its processes, so a nice-19 trainer in a session of its own still took 83% of a core beside a test suite's 38%
    (session 11); its autogroup's nice is what makes it yield. Nothing happens (False) without autogroups or
    permission."""
    if nice <= 0:
        return False
    try:
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
    except OSError:
        return False
    return True


def _stop_group(procs: list[subprocess.Popen]) -> None:
    """SIGINT to each process's group (a rank and what it started), SIGKILL to what is left 30 s later; waits for
    ``procs``."""
    for sig, wait in ((signal.SIGINT, 30.0), (signal.SIGKILL, 10.0)):
        for p in procs:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + wait
        while time.monotonic() < end and any(p.poll() is None for p in procs):
            time.sleep(0.1)
        if all(p.poll() is not None for p in procs):
            break


def _hardware(threads: int, processes: int = 1, command: str = "aiayn train-on") -> str:
    """Where a checkpoint was evaluated, for its card: this CPU, the command, its nice value, and (for train-on)
    how many training processes; ``command="aiayn soup"`` names a soup, which trains nothing."""
    cpu = "CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if command != "aiayn train-on":
        who = "weights averaged, no training"
    else:
        who = f"{processes} training processes" if processes > 1 else "one training process"
    return f"CPU ({cpu}), `{command}` at nice {os.nice(0)}, {who}, {threads or 'default'} thread(s)"


def _build_candidate(plan: dict[str, Any], args: argparse.Namespace, out: Path, notes: str) -> int:
    """Average, evaluate on the test split(s) and the development sets, and card into ``out/candidate``
    (:mod:`.finish`, a child process)."""
    cmd = [sys.executable, "-m", "aiayn.training.finish", "--run", str(plan["run"]), "--checkpoint", str(out / "candidate"),
           "--data", str(plan["data"]), "--last", str(args.last), "--device", "cpu",
           "--hardware", _hardware(args.threads, plan.get("processes", 1)),
           "--notes", notes, "--threads", str(args.threads), "--status", str(out / "finish_status.json")] \
        + (["--devsets", str(Path(args.devsets).expanduser())] if args.devsets else [])
    print("$ " + " ".join(cmd[:8]) + " ...", flush=True)
    return subprocess.run(cmd).returncode


def _judge(plan: dict[str, Any], args: argparse.Namespace, out: Path, shipped: Path, added: dict[str, int],
           seconds: dict[str, float]) -> dict[str, Any]:
    """Score both sides, write ``out/verdict.json`` (with ``seconds``: how long each stage took) and return it."""
    devsets = Path(args.devsets).expanduser() if args.devsets else REPO / "assets" / "devsets"
    cand = out / "candidate"
    t0 = time.monotonic()
    cand_evals = side_evals(cand, cand, plan["data"], devsets, args.direction, "cpu")
    ship_evals = side_evals(shipped, out / "shipped", plan["data"], devsets, args.direction, "cpu")
    cand_scores, ship_scores = eval_scores(cand_evals, args.direction), eval_scores(ship_evals, args.direction)
    seconds["scoring"] = round(time.monotonic() - t0, 1)
    v = verdict(cand_scores, ship_scores)
    v["paired"] = paired_comparison(ship_evals, cand_evals, Path(plan["data"]), devsets, args.direction)
    report = {**v, "direction": args.direction, "candidate": str(cand), "shipped": str(shipped), "run": str(plan["run"]),
              "shipped_sha256": weights_sha256(shipped), "devsets": devset_digests(devsets),
              "resumed": plan["resume"], "recipe": plan["recipe"], "added": added, "nice": os.nice(0),
              "processes": plan.get("processes", 1),
              "seconds": seconds,
              "scores": {"candidate": cand_scores, "shipped": ship_scores},
              "shipped_evals": {k: str(v) for k, v in ship_evals.items()},
              "finished_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    (out / "verdict.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _what_training_added(plan: dict[str, Any], rc: int) -> dict[str, int] | None:
    """``{"steps", "tokens", "step", "training_exit_code"}`` the training child added to the run (printed), or None
    (and why, on stderr) when there is nothing to judge: no state at all, or a failed child that added no step (the
    run's last state is as it was)."""
    after = _last_state(plan["run"])
    if after is None:
        print(f"aiayn train-on: training failed (exit {rc}) and left no state in {plan['run']}", file=sys.stderr)
        return None
    added = {"steps": int(after["step"]) - int(plan["before"]["step"]), "tokens": int(after["tokens"]) - int(plan["before"]["tokens"]),
             "step": int(after["step"]), "training_exit_code": rc}
    print(f"training added {added['steps']:,} steps and {added['tokens']:,} target tokens (run at step {added['step']:,})", flush=True)
    if rc != 0 and added["steps"] <= 0:
        print(f"aiayn train-on: training failed (exit {rc}) before adding a step; {plan['run']} is unchanged at "
              f"step {added['step']:,} (see the training output above)", file=sys.stderr)
        return None
    return added


def _round(args: argparse.Namespace, plan: dict[str, Any], shipped: Path, out: Path, deadline: _dt.datetime,
           weights: list[float], child_env: dict[str, str], how: str) -> tuple[int, Path | None]:
    """One round of ``aiayn train-on``: train ``plan`` until ``deadline`` less half the reserve, build the candidate
    into ``out``, judge it (and the interpolation) against ``shipped``, ship with ``--ship``. Returns
    ``(code, winner)``: :func:`cli_main`'s exit code and the folder that beat ``shipped`` (the candidate, else the
    carded interpolation), or None.

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM while it trained or judged.
    """
    out.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.monotonic()
        rc = _run_child(plan["cmd"], (deadline - _dt.datetime.now().astimezone()).total_seconds() - 60 * args.reserve_minutes / 2,
                        child_env, processes=plan.get("processes", 1))
        added = _what_training_added(plan, rc)
        if added is None:
            return EXIT_TRAIN_FAILED, None
        notes = (f"Trained on with `aiayn train-on` ({how}); this call added {added['steps']:,} steps and "
                 f"{added['tokens']:,} target tokens.")
        seconds = {"training": round(time.monotonic() - t0, 1)}
        if _build_candidate(plan, args, out, notes) != 0:
            print(f"aiayn train-on: the candidate could not be built (see {out / 'finish_status.json'})", file=sys.stderr)
            return EXIT_CANDIDATE_FAILED, None
        seconds["candidate"] = round(time.monotonic() - t0 - seconds["training"], 1)
        report = _judge(plan, args, out, shipped, added, seconds)
        print(verdict_line(report, out / "candidate"), flush=True)
        if weights:
            report = _judge_interpolation(plan, args, out, report, weights)
            interp = report["interpolation"]
            print(f"interpolation w = {interp['weight']:g} (valid chrF " + ", ".join(
                f"{k}: {c:.2f}" for k, c in interp["valid_chrf"].items()) + "): "
                + verdict_line(interp, Path(interp["checkpoint"]), "the interpolation"), flush=True)
    except ValueError as exc:  # an interpolation that could not be made or scored; the plain verdict is written
        print(f"aiayn train-on: {exc}", file=sys.stderr)
        return EXIT_CANDIDATE_FAILED, None
    interp = report.get("interpolation") or {}
    chosen = out / "candidate" if report["beats"] else \
        Path(interp["checkpoint"]) if interp.get("beats") and interp["stages"]["card"] == 0 else None  # never uncarded
    if args.ship and chosen is not None:
        ship(chosen, shipped)
        print(f"shipped: copied {chosen} over {shipped} (with its MODEL_CARD.md"
              + (", alignment, attribution and head sweep)" if (shipped / "head_sweep.json").is_file() else
                 f"; its head sweep failed: run `aiayn sweep --checkpoint {shipped}`)"))
    elif args.ship:
        print(f"not shipped: {shipped} stays as it is")
    return 0, chosen


def _plan_and_say(args: argparse.Namespace, shipped: Path, deadline: _dt.datetime, out: Path,
                  child_env: dict[str, str], recipe_config: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """``(plan, how)``: :func:`train_command` for the time left before ``deadline`` less the reserve, and its first
    line printed (what it resumes or warm-starts, for how long, on which allocator).

    Raises:
        BadInput: no time left beyond the reserve, or what :func:`train_command` refuses.
    """
    now = _dt.datetime.now().astimezone()
    budget = (deadline - now).total_seconds() / 60 - args.reserve_minutes
    if budget < 0.1:
        raise BadInput(f"the deadline {deadline:%H:%M} leaves {budget + args.reserve_minutes:.1f} minutes, not more than "
                       f"the reserve of {args.reserve_minutes:g} for averaging and evaluation")
    meta = _read_json(shipped / "config.json").get("meta") or {}
    plan = train_command(args, shipped, meta, budget, recipe_config)
    how = f"resuming {plan['run']} at step {plan['before']['step']}" if plan["resume"] else \
        f"warm start from {shipped} into {plan['run']} (recipe {plan['recipe']}, data {plan['data']})"
    processes = plan.get("processes", 1)
    if processes > 1:
        how += f" as {processes} processes"
    print(f"aiayn train-on {args.direction}: {how}; training {budget:.1f} minutes, until {deadline:%Y-%m-%d %H:%M %Z}, "
          f"on {describe(child_env)}" + (f"; results in {out}" if recipe_config is not None else ""), flush=True)
    return plan, how


def _next_round(args: argparse.Namespace, first: tuple[Path, Path], last_run: Path, seed: int, shipped: Path,
                deadline: _dt.datetime, child_env: dict[str, str]) -> tuple[dict[str, Any], str, Path] | None:
    """``(plan, how, out)`` of the round with ``seed`` (:func:`round_folders` of the ``first`` round's run and
    output folders, the recipe of ``last_run``), or None (and why, printed) when fewer than ``--min-round-minutes``
    are left.

    Raises:
        BadInput: what :func:`recipe_of_run` or :func:`train_command` refuses.
    """
    left = (deadline - _dt.datetime.now().astimezone()).total_seconds() / 60 - args.reserve_minutes
    if left < args.min_round_minutes:
        print(f"aiayn train-on: no round for seed {seed}: {max(left, 0.0):.1f} training minutes are left before the "
              f"reserve, a round needs --min-round-minutes {args.min_round_minutes:g}", flush=True)
        return None
    run, out = round_folders(first[0], first[1], seed)
    recipe = recipe_of_run(last_run)
    round_args = argparse.Namespace(**{**vars(args), "run": str(run), "data": None, "kind_weights": None,
                                       "train_set": [f"seed={seed}"]})
    plan, how = _plan_and_say(round_args, shipped, deadline, out, child_env, recipe)
    return plan, how, out


def _interrupt(signum, frame) -> None:  # noqa: ARG001 - a signal handler's signature
    raise KeyboardInterrupt


def cli_main(argv: list[str]) -> int:
    """``aiayn train-on --direction D (--until HH:MM | --minutes N) [--ship] [--then-seeds S,...] ...``: train,
    export a candidate, judge it, and go on with the next seeds while time lasts (module docstring). Returns 0
    (whatever the verdicts), 2 bad input (nothing started), 3 training left no state, 4 a candidate could not be
    built, 130 interrupted; a later round's failure ends the rounds with its code."""
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill PID` of a background run stops it like Ctrl-C
    if not args.no_nice and os.nice(0) < 19:
        os.nice(19 - os.nice(0))
    if os.getsid(0) == os.getpid():  # started with setsid: its session is its own, so its autogroup may yield too
        yield_autogroup(os.getpid(), os.nice(0))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.out).expanduser() if args.out else CACHE / "train-on" / args.direction
    try:
        weights = parse_weights(args.interpolate)
        seeds = parse_seeds(args.then_seeds)
        if args.climb and (args.ship or not seeds):
            raise BadInput("--climb needs --then-seeds (it says where the rounds after the first start from) and "
                           "not --ship (which climbs through the shipped folder itself)")
        deadline = parse_deadline(args.until, args.minutes, _dt.datetime.now().astimezone())
        shipped = Path(args.shipped).expanduser() if args.shipped else REPO / "checkpoints" / args.direction
        child_env = allocator_env(os.environ, args.allocator)
        plan, how = _plan_and_say(args, shipped, deadline, out, child_env)
    except (BadInput, ValueError) as exc:
        print(f"aiayn train-on: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.dry_run:
        processes = plan.get("processes", 1)
        times = f"  (x {processes} processes)" if processes > 1 else ""
        then = "".join(f"; then seed {s} in {round_folders(plan['run'], out, s)[0]} while time lasts" for s in seeds)
        print("$ " + " ".join(plan["cmd"]) + times + f"\n(dry run: nothing started; the candidate would go to "
              f"{out / 'candidate'}{then})")
        return 0
    try:
        return _rounds(args, plan, how, shipped, out, deadline, weights, seeds, child_env)
    except KeyboardInterrupt:
        print("aiayn train-on: interrupted; the run's states are complete and resumable", file=sys.stderr)
        return EXIT_INTERRUPTED


def _rounds(args: argparse.Namespace, plan: dict[str, Any], how: str, shipped: Path, out: Path, deadline: _dt.datetime,
            weights: list[float], seeds: list[int], child_env: dict[str, str]) -> int:
    """The first round (``plan``), then one per seed while time lasts (:func:`_next_round`). Each round starts from
    and is judged against ``shipped`` (which ``--ship`` may have replaced), or with ``--climb`` against the last
    round's winner (printed at the end: what ``aiayn ship`` takes). Returns :func:`cli_main`'s exit code.

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM in a round.
    """
    first, parent, best = (Path(plan["run"]), out), shipped, None
    code, winner = _round(args, plan, parent, out, deadline, weights, child_env, how)
    for seed in seeds:
        if code != 0:
            break
        if args.climb and winner is not None:
            parent = best = winner
            print(f"climb: the next round starts from {winner}, and is judged against it", flush=True)
        try:
            nxt = _next_round(args, first, Path(plan["run"]), seed, parent, deadline, child_env)
        except (BadInput, ValueError) as exc:
            print(f"aiayn train-on: no round for seed {seed}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if nxt is None:
            break
        plan, how, round_out = nxt
        code, winner = _round(args, plan, parent, round_out, deadline, weights, child_env, how)
    if args.climb:
        best = winner or best
        print(f"climb: the best of the rounds is {best}; ship it with `aiayn ship {best} --to {shipped}`" if best else
              f"climb: no round beat {shipped}", flush=True)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_main(sys.argv[1:]))
