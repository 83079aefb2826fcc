"""``aiayn train-both``: one command for a GPU session. Trains en-de and de-en side by side (two ``aiayn train``
child processes on one GPU, or on the CPU with half the cores each) within a time budget, then per direction
averages the last states into a float16 checkpoint (Section 6.1), evaluates it on the test split(s) and the
development sets, writes its model card and head sweep, and summarises everything in ``OUT/summary.json`` and a
printed table.

Layout of ``OUT``::

    runs/{en-de,de-en}/          the run states (``aiayn train --run``), resumable by hand with ``aiayn train --resume``
    checkpoints/{en-de,de-en}/   the layout of the shipped ``checkpoints/*/``: config.json, model.safetensors (fp16),
                                 spm.model, metrics.jsonl, eval_test.json (+ eval_test_general.json), eval_dev.json
                                 (the development sets of assets/devsets), MODEL_CARD.md, alignment.json (aiayn align),
                                 head_sweep.json (and attention_history.safetensors when the run recorded one)
    logs/{en-de,de-en}.log       both children's output, each line stamped with the time and the stage
    logs/{en-de,de-en}.post.json what each post-training stage returned
    summary.json                 recipe, budget, and per direction: steps, tokens, minutes, tok/s, BLEU/chrF per split

A checkpoint directory appears only once it is complete (it is assembled in a temporary folder beside it and
renamed), so an interrupted or failed run never leaves a half-written checkpoint. ``--pack DATA [DATA ...] OUT.tar.gz`` packs
prepared data folders for the device machine instead, and ``--unpack`` unpacks them there (:mod:`.pack`;
docs/training.md, "One command for a GPU session"); ``--data-for DIRECTION=DIR`` gives one direction its own data.

The recipes are plain data (:data:`RECIPES`); ``--set`` overrides model fields (as ``aiayn train --set``) and
``--train-set`` training fields (any ``aiayn train --flag``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .allocator import ALLOCATORS, allocator_env, describe
from .finish import EXIT_INTERRUPTED, direction_summary, summary_table
from .pack import REQUIRED_DATA, BadPack, pack_data, unpack_data

DIRECTIONS = ("en-de", "de-en")

#: The recipes ``--recipe`` picks. ``preset`` and ``model`` make the TransformerConfig (``--preset``, ``--set``),
#: ``train`` holds TrainConfig fields given to ``aiayn train`` as flags, ``average_last`` is k of Section 6.1, and
#: ``reserve_minutes`` is the part of ``--max-minutes`` kept for start-up, the final validation, averaging,
#: evaluation, the card and the head sweep (the training children get the rest as their ``--max-minutes``).
RECIPES: dict[str, dict[str, Any]] = {
    # The best measured GPU run (H100; docs/training.md, "The paper's depth"): at these rates post-LN at N = 6 sat on
    # the unigram plateau where pre-LN trained. One 25k-token micro-batch per step (Section 5.1: ~25k target tokens),
    # bf16 autocast, Equation 3 with warmup 1,000 x 0.7.
    "gpu-n6": {
        "preset": "base",
        "model": {"d_model": 256, "d_ff": 1024, "n_heads": 8, "n_layers": 6, "max_len": 256, "norm_first": True},
        "train": {"max_tokens": 25000, "accumulation": 1, "warmup_steps": 1000, "lr_scale": 0.7, "upsample_sentences": 4,
                  "amp": True, "valid_every": 250, "valid_bleu_sentences": 100, "save_every": 250, "keep": 5},
        "average_last": 5,
        "reserve_minutes": 4.0,
    },
    # The paper's layer order (post-LN) at N = 6, with the residual branches (W_V, W_O, W_2) starting at (8N)^-1/4 =
    # 0.38 of their Xavier values (DeepNet's beta, init only): on the CPU (d_model 128, N 6, 500 steps) plain post-LN
    # sat on the unigram plateau while this one trained as fast as pre-LN (docs/training.md, "The paper's depth").
    # Not yet run on a GPU: run it there beside gpu-n6 before shipping either.
    "gpu-n6-post": {
        "preset": "base",
        "model": {"d_model": 256, "d_ff": 1024, "n_heads": 8, "n_layers": 6, "max_len": 256, "norm_first": False},
        "train": {"max_tokens": 25000, "accumulation": 1, "warmup_steps": 1000, "lr_scale": 0.7, "upsample_sentences": 4,
                  "amp": True, "valid_every": 250, "valid_bleu_sentences": 100, "save_every": 250, "keep": 5,
                  "residual_init_scale": 0.38},
        "average_last": 5,
        "reserve_minutes": 4.0,
    },
    # Session 11's GPU run (docs/training.md, "Session 11"): the shipped N = 3 models trained on from their own weights
    # (`--init-from checkpoints`) on the story build, 25k-token steps at a lower rate than from scratch (warmup 300 x
    # 0.25: peak 9.0e-4 at d_model 256), sentences x2; the model fields must be the shipped shape.
    "gpu-warm": {
        "preset": "base",
        "model": {"d_model": 256, "d_ff": 1024, "n_heads": 8, "n_layers": 3, "max_len": 256},
        "train": {"max_tokens": 25000, "accumulation": 1, "warmup_steps": 300, "lr_scale": 0.25, "upsample_sentences": 2,
                  "amp": True, "valid_every": 250, "valid_bleu_sentences": 0, "save_every": 250, "keep": 4},
        "average_last": 4,
        "reserve_minutes": 4.0,
    },
    # Session 12's measurement (docs/training.md, "Session 12"): the shipped N = 3 grown to N = 6 by progressive
    # stacking (`--init-from checkpoints`, layers 1-3 copied onto 4-6) passed the N = 3 run going on in validation loss
    # after 1,750 steps at equal device time; this is that run for both directions, meant to go on longer than 6.5 min.
    "gpu-stack6": {
        "preset": "base",
        "model": {"d_model": 256, "d_ff": 1024, "n_heads": 8, "n_layers": 6, "max_len": 256},
        "train": {"max_tokens": 25000, "accumulation": 1, "warmup_steps": 300, "lr_scale": 0.25, "upsample_sentences": 2,
                  "amp": True, "valid_every": 250, "valid_bleu_sentences": 0, "save_every": 250, "keep": 4,
                  "init_stack": True},
        "average_last": 4,
        "reserve_minutes": 4.0,
    },
    # For tests and a first try on a laptop: a few dozen steps of a one-layer model, well under a minute on a CPU.
    "tiny": {
        "preset": "tiny",
        "model": {"d_model": 32, "d_ff": 64, "n_heads": 2, "n_layers": 1, "dropout": 0.1},
        "train": {"max_tokens": 512, "accumulation": 1, "warmup_steps": 10, "max_steps": 24, "valid_every": 12,
                  "valid_bleu_sentences": 2, "save_every": 6, "keep": 3},
        "average_last": 3,
        "reserve_minutes": 0.5,
    },
}

#: boolean ``aiayn train`` flags (``--amp`` / ``--no-amp``); every other training field is ``--field-name VALUE``
BOOL_FLAGS = ("compile", "amp", "amp_cpu", "record_attention")
#: ``aiayn train`` switches that only turn something on (``--init-stack``; it needs ``--init-from``)
SWITCH_FLAGS = ("init_stack",)
#: training fields this command sets itself (not through a recipe or ``--train-set``)
OWN_FIELDS = ("data_dir", "run_dir", "direction", "preset", "model_overrides", "threads", "max_minutes", "init_from")
#: exit codes
EXIT_BAD_INPUT = 2
EXIT_FAILED = {("en-de",): 3, ("de-en",): 4, ("en-de", "de-en"): 5}
#: seconds a child gets to stop after SIGINT before it is killed
GRACE_S = 20.0


class BadInput(ValueError):
    """A command line this command refuses before starting anything (the message says why)."""


# -- the plan: recipes and flags --------------------------------------------------------------------------------
def _train_flag_names() -> set[str]:
    """The TrainConfig fields ``aiayn train`` takes as ``--flag VALUE`` (its ``VALUE_FLAGS``) or on/off flags."""
    from .cli import VALUE_FLAGS

    return {name for name, _ in VALUE_FLAGS} | set(BOOL_FLAGS) | set(SWITCH_FLAGS)


def train_flags(train: dict[str, Any]) -> list[str]:
    """``{"warmup_steps": 1000, "amp": True}`` -> ``["--warmup-steps", "1000", "--amp"]`` (``aiayn train`` flags).

    Raises:
        BadInput: a field that ``aiayn train`` has no flag for, or one this command sets itself.
    """
    known = _train_flag_names()
    out: list[str] = []
    for key, value in train.items():
        if key in OWN_FIELDS:
            raise BadInput(f"{key} is set by train-both itself (use its own option), not by a recipe or --train-set")
        if key not in known:
            raise BadInput(f"`aiayn train` has no flag for {key!r}; training fields with a flag: {sorted(known)}")
        flag = "--" + key.replace("_", "-")
        if key in BOOL_FLAGS or key in SWITCH_FLAGS:
            if not isinstance(value, bool):
                raise BadInput(f"{key} is on or off: give true or false, not {value!r}")
            if value or key in BOOL_FLAGS:  # a switch that is off is simply not given
                out.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            out += [flag, str(value)]
    return out


def check_recipe(recipe: dict[str, Any], vocab_size: int = 8000) -> None:
    """Check that a recipe (or one with overrides) makes a valid TransformerConfig and TrainConfig, and that every
    training field has an ``aiayn train`` flag.

    Raises:
        BadInput: with the reason (an unknown field, a shape the model refuses, a bad value).
    """
    from ..model.config import TransformerConfig
    from .recipe import TrainConfig

    try:
        TransformerConfig.preset(recipe["preset"], **{"vocab_size": vocab_size, **recipe["model"]})
    except (TypeError, ValueError) as exc:
        raise BadInput(f"the model settings are invalid: {exc}") from None
    names = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(recipe["train"]) - names)
    if unknown:
        raise BadInput(f"unknown training field(s) {unknown}; TrainConfig has {sorted(names - set(OWN_FIELDS))}")
    try:
        tc = TrainConfig("", "", preset=recipe["preset"], model_overrides=dict(recipe["model"]), **recipe["train"])
    except TypeError as exc:
        raise BadInput(f"the training settings are invalid: {exc}") from None
    for f in fields(TrainConfig):
        value = getattr(tc, f.name)
        if f.type in ("int", "float") and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise BadInput(f"training field {f.name} must be a number, got {value!r}")
    train_flags(recipe["train"])


def cpu_threads(children: int = 2) -> int:
    """Threads for each of ``children`` side-by-side children: the cores this process may use, shared (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, children))


def hardware_text(device: str, threads: int, directions: int = 2) -> str:
    """What the model card says the runs trained on, e.g. ``"one NVIDIA H100 80GB HBM3, en-de and de-en trained side
    by side (`aiayn train-both`), 8 CPU threads each"``."""
    how = "en-de and de-en trained side by side" if directions > 1 else "one direction trained"
    if device.startswith("cuda"):
        index = int(device.split(":")[1]) if ":" in device else 0
        try:  # nvidia-smi: no CUDA context held by this process for the whole session
            names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                   text=True, timeout=30, check=True).stdout.splitlines()
            name = names[index].strip()
        except (OSError, IndexError, subprocess.SubprocessError):
            import torch

            name = torch.cuda.get_device_name(index)
        return f"one {name}, {how} (`aiayn train-both`), {threads} CPU thread{'s' * (threads > 1)} each"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU ({cpu}), {how} (`aiayn train-both`), {threads} thread{'s' * (threads > 1)} each"


# -- children: streaming, stopping -----------------------------------------------------------------------------
class _Children:
    """The live child processes of all directions, the console lock and the stop flag (Ctrl-C, SIGTERM)."""

    def __init__(self, quiet: bool) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.quiet = quiet

    def echo(self, direction: str, text: str) -> None:
        if not self.quiet:
            with self.lock:
                print(f"[{direction}] {text}", flush=True)

    def run(self, direction: str, stage: str, cmd: list[str], env: dict[str, str], log: Path) -> int:
        """Run ``cmd``, appending its output (stdout and stderr, split at newlines and carriage returns) to ``log``,
        each line stamped ``HH:MM:SS stage |``; progress lines (ending in a carriage return) reach the console at
        most every 30 s. Returns its exit code, or ``EXIT_INTERRUPTED`` when stopped."""
        if self.stop.is_set():
            return EXIT_INTERRUPTED
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"{_now()} {stage} | $ {' '.join(cmd)}\n")
            fh.flush()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            with self.lock:
                self.procs[direction] = proc
            logged = echoed = 0.0  # when a progress line last reached the log / the console
            pending = ""  # the last progress line not logged yet (written before the next full line)
            buf = b""
            assert proc.stdout is not None
            while chunk := proc.stdout.read1(65536):
                buf += chunk
                while True:
                    cut = min((i for i in (buf.find(b"\n"), buf.find(b"\r")) if i >= 0), default=-1)
                    if cut < 0:
                        break
                    line, end, buf = buf[:cut].decode("utf-8", "replace"), buf[cut:cut + 1], buf[cut + 1:]
                    if not line.strip():
                        continue
                    now = time.monotonic()
                    if end == b"\r":  # a progress bar redrawn in place: every 5 s in the log, 30 s on the console
                        pending = line
                        if now - logged >= 5:
                            fh.write(f"{_now()} {stage} | {line}\n")
                            logged, pending = now, ""
                        if now - echoed >= 30:
                            self.echo(direction, f"{stage} | {line}")
                            echoed = now
                        continue
                    if pending:
                        fh.write(f"{_now()} {stage} | {pending}\n")
                        pending = ""
                    fh.write(f"{_now()} {stage} | {line}\n")
                    fh.flush()
                    self.echo(direction, f"{stage} | {line}")
            for rest in (pending, buf.decode("utf-8", "replace")):
                if rest.strip():
                    fh.write(f"{_now()} {stage} | {rest}\n")
            code = proc.wait()
            with self.lock:
                self.procs.pop(direction, None)
            fh.write(f"{_now()} {stage} | exit code {code}\n")
        return EXIT_INTERRUPTED if self.stop.is_set() and code != 0 else code

    def terminate_all(self) -> None:
        """SIGINT to every child's process group (Python children unwind: atomic writes finish or vanish), then
        SIGKILL to any still alive after :data:`GRACE_S` seconds."""
        with self.lock:
            procs = list(self.procs.values())
        for p in procs:
            _signal_group(p, signal.SIGINT)
        deadline = time.monotonic() + GRACE_S
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _now() -> str:
    return datetime.now().strftime("%H:%M:%S")


def _child_env(device: str, threads: int, allocator: str) -> dict[str, str]:
    """The children's environment: the package importable, ``threads`` CPU threads, the chosen device only, tqdm
    progress every 30 s, unbuffered output, the memory allocator :func:`~aiayn.training.allocator.allocator_env`
    gives for ``allocator`` (ValueError: ``tcmalloc`` asked for and not installed)."""
    env = allocator_env(os.environ, allocator)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1", TQDM_MININTERVAL="30")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif ":" in device:
        env["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
    return env


def _resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cuda`` / ``cuda:N`` are checked.

    Raises:
        BadInput: a CUDA device that this torch cannot see, or an unknown name.
    """
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return "cpu"
    if requested == "cuda" or (requested.startswith("cuda:") and requested[5:].isdigit()):
        if not torch.cuda.is_available():
            raise BadInput(f"--device {requested}: this torch sees no CUDA GPU (use --device cpu)")
        if ":" in requested and int(requested[5:]) >= torch.cuda.device_count():
            raise BadInput(f"--device {requested}: only {torch.cuda.device_count()} GPU(s) visible")
        return requested
    raise BadInput(f"--device must be auto, cpu, cuda or cuda:N, got {requested!r}")


# -- the command ------------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="aiayn train-both",
        description="Train en-de and de-en side by side within a time budget, then average (fp16), evaluate, write the "
                    "model cards and head sweeps, and summarise. Exit codes: 0 ok, 2 bad input, 3 en-de failed, "
                    "4 de-en failed, 5 both failed, 130 interrupted.")
    ap.add_argument("--data", help="prepared data folder (aiayn data): train/valid/test.tsv, spm.model; test_general.tsv "
                    "and dictionary.tsv are used when present")
    ap.add_argument("--out", help="output folder (runs/, checkpoints/, logs/, summary.json)")
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="the whole command's time budget; training gets it less the recipe's reserve")
    ap.add_argument("--recipe", default="gpu-n6", choices=sorted(RECIPES), help="default gpu-n6")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="model overrides, e.g. n_layers=3 norm_first=false")
    ap.add_argument("--train-set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="training overrides (any `aiayn train` flag), e.g. lr_scale=0.5 warmup_steps=2000 max_steps=3000")
    ap.add_argument("--kind-weights", default=None, metavar="SPEC",
                    help="data mix by kind (aiayn train --kind-weights: none, default or kind=weight,...; needs the "
                         "folder's train_kinds.txt); default: the recipe's, which is none")
    ap.add_argument("--reserve-minutes", type=float, default=None,
                    help="minutes of --max-minutes kept for start-up, evaluation, cards and sweeps (default: the recipe's)")
    ap.add_argument("--device", default="auto", help="auto (default: cuda when visible), cpu, cuda or cuda:N")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads per child (default: the cores shared between the children)")
    ap.add_argument("--allocator", default="auto", choices=ALLOCATORS,
                    help="memory allocator of the children: auto (tcmalloc when installed, else glibc; about 1.1x the "
                         "tokens a second on a CPU), tcmalloc, glibc (aiayn.training.allocator)")
    ap.add_argument("--hardware", default=None, help="the model cards' hardware line (default: detected)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the head-ablation sweep (aiayn sweep)")
    ap.add_argument("--directions", nargs="+", default=list(DIRECTIONS), choices=DIRECTIONS, help="default both")
    ap.add_argument("--init-from", default=None, metavar="DIR",
                    help="warm start each direction from DIR/<direction> (a checkpoints folder such as checkpoints/, "
                         "with the data's spm.model and the recipe's shape); default: from scratch")
    ap.add_argument("--quiet", action="store_true", help="only the logs and the final table, no live output")
    ap.add_argument("--data-for", nargs="+", default=[], metavar="DIRECTION=DIR",
                    help="the data folder of one direction instead of --data (back-translated data is made for one "
                         "direction), e.g. en-de=DIR_A de-en=DIR_B")
    ap.add_argument("--pack", nargs="+", metavar="DATA... OUT",
                    help="instead of training: pack prepared data folders into OUT (.tar.gz, or .tar.xz: smaller) for "
                         "the device machine and exit; a later folder's file that begins like the first folder's is stored as what it "
                         "adds")
    ap.add_argument("--unpack", nargs=2, metavar=("PACK", "DEST"),
                    help="instead of training: unpack a --pack archive into DEST (rebuilding and checking the later "
                         "folders) and exit")
    return ap


def _plan(args) -> dict[str, Any]:
    """Everything decided before a child starts (no side effects). Raises BadInput."""
    from .cli import parse_overrides

    directions = list(dict.fromkeys(args.directions))
    data_for = _data_folders(args, directions)
    recipe = json.loads(json.dumps(RECIPES[args.recipe]))  # a copy
    try:
        recipe["model"].update(parse_overrides(args.set))
        recipe["train"].update(parse_overrides(args.train_set))
    except SystemExit as exc:  # parse_overrides' message for an item without "="
        raise BadInput(str(exc)) from None
    from ..tokenizer import Tokenizer
    from .loader import DataMixError, kind_mix

    if args.kind_weights is not None:
        recipe["train"]["kind_weights"] = args.kind_weights
    for data in dict.fromkeys(data_for.values()):
        try:
            vocab = Tokenizer.load(data / "spm.model").vocab_size
        except (OSError, RuntimeError, ValueError) as exc:
            raise BadInput(f"cannot read {data / 'spm.model'}: {exc}") from None
        check_recipe(recipe, vocab)
        try:  # a mix the folder cannot give is refused before any child starts
            kind_mix(data, recipe["train"].get("kind_weights"))
        except DataMixError as exc:
            raise BadInput(str(exc)) from None
    reserve = recipe["reserve_minutes"] if args.reserve_minutes is None else args.reserve_minutes
    if reserve < 0:
        raise BadInput(f"--reserve-minutes must be >= 0, got {reserve}")
    train_minutes = 0.0
    if args.max_minutes is not None:
        if not args.max_minutes > 0:
            raise BadInput(f"--max-minutes must be > 0, got {args.max_minutes}")
        train_minutes = args.max_minutes - reserve
        if train_minutes <= 0:
            raise BadInput(f"--max-minutes {args.max_minutes:g} leaves no time to train: the recipe {args.recipe!r} keeps "
                           f"{reserve:g} min for start-up, evaluation, cards and sweeps (--reserve-minutes)")
    elif "max_steps" not in recipe["train"]:
        raise BadInput(f"the recipe {args.recipe!r} stops on time: give --max-minutes (or --train-set max_steps=N)")
    device = _resolve_device(args.device)
    threads = args.threads or cpu_threads(len(directions))
    if threads < 1:
        raise BadInput(f"--threads must be >= 1, got {threads}")
    out = Path(args.out).expanduser()
    init_from = _warm_starts(args.init_from, data_for, directions)
    try:
        allocator_env({}, args.allocator)  # `tcmalloc` without the library is refused before any child starts
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if recipe["train"].get("init_stack") and not init_from:
        raise BadInput(f"the recipe {args.recipe!r} grows a trained model by stacking its layers: give --init-from DIR "
                       "(e.g. checkpoints)")
    return {"init_from": init_from, "recipe_name": args.recipe, "recipe": recipe, "out": out.resolve(), "device": device,
            "data_for": {d: data_for[d].resolve() for d in directions},
            "threads": threads, "allocator": args.allocator, "reserve": reserve, "train_minutes": train_minutes, "max_minutes": args.max_minutes,
            "hardware": args.hardware or hardware_text(device, threads, len(directions)), "sweep": not args.no_sweep,
            "directions": directions}


def _data_folders(args, directions: list[str]) -> dict[str, Path]:
    """``{direction: prepared data folder}``: ``--data`` for every direction, ``--data-for DIRECTION=DIR`` for the
    ones it names (back-translated data is made for one direction: docs/data.md).

    Raises:
        BadInput: no ``--out``; a direction without a folder; a ``--data-for`` item that is not ``en-de=DIR`` or
            ``de-en=DIR``; a folder that is not a prepared data folder.
    """
    folders = {d: Path(args.data).expanduser() for d in directions} if args.data else {}
    for item in args.data_for or []:
        d, sep, path = item.partition("=")
        if not sep or d not in DIRECTIONS or not path:
            raise BadInput(f"--data-for takes DIRECTION=DIR with DIRECTION one of {', '.join(DIRECTIONS)}, got {item!r}")
        if d in directions:
            folders[d] = Path(path).expanduser()
    if not args.out or any(d not in folders for d in directions):
        raise BadInput("give --data DIR (or --data-for DIRECTION=DIR for each direction) and --out DIR "
                       "(or --pack DATA OUT.tar.gz)")
    for data in dict.fromkeys(folders.values()):
        missing = [n for n in REQUIRED_DATA if not (data / n).is_file()]
        if missing:
            raise BadInput(f"{data} is not a prepared data folder: {', '.join(missing)} missing (make one with `aiayn data`)")
    return folders


def _warm_starts(root: str | None, data_for: dict[str, Path], directions: list[str]) -> dict[str, str]:
    """``{direction: checkpoint folder}`` for ``--init-from ROOT`` (``{}`` without it).

    Raises:
        BadInput: ``ROOT/<direction>`` is not a checkpoint, or its ``spm.model`` is not the data's (the weights' rows
            would mean other pieces; make a folder with the checkpoint's vocabulary, as ``aiayn train-on`` does).
    """
    if root is None:
        return {}
    out = {}
    for d in directions:
        src = Path(root).expanduser() / d
        if not (src / "config.json").is_file() or not (src / "spm.model").is_file():
            raise BadInput(f"--init-from {root}: {src} is not a checkpoint folder (config.json and spm.model needed)")
        data = data_for[d]
        if (src / "spm.model").read_bytes() != (data / "spm.model").read_bytes():
            raise BadInput(f"--init-from {root}: {src / 'spm.model'} is not {data / 'spm.model'}; warm starts need the "
                           "checkpoint's vocabulary (a `-shipspm` data folder, docs/training.md)")
        out[d] = str(src.resolve())
    return out


def _card_notes(plan: dict[str, Any]) -> str:
    """The model card's notes: how the command trained (side by side, device, budget)."""
    r = plan["recipe"]
    budget = (f"within a {plan['max_minutes']:g}-minute budget ({plan['train_minutes']:g} min of training)"
              if plan["max_minutes"] else f"for {r['train'].get('max_steps')} steps")
    together = "both directions side by side" if len(plan["directions"]) > 1 else "this direction alone"
    notes = [f"Trained with `aiayn train-both --recipe {plan['recipe_name']}`: {together} on one "
             f"{'GPU' if plan['device'].startswith('cuda') else 'CPU'}, {budget}."]
    if plan.get("init_from"):
        notes.append("Each direction was warm-started from the weights of the checkpoint it replaces (`--init-from`).")
    return " ".join(notes)  # the layer order (pre-LN in gpu-n6) is the card's own Model section


def train_command(d: str, plan: dict[str, Any]) -> list[str]:
    """The ``aiayn train`` command line of direction ``d``'s child (``plan`` from :func:`_plan`)."""
    r = plan["recipe"]
    cmd = [sys.executable, "-m", "aiayn", "train", "--data", str(plan["data_for"][d]), "--run", str(plan["out"] / "runs" / d),
           "--direction", d, "--preset", r["preset"], "--threads", str(plan["threads"]),
           "--processes", "1"]  # one process per direction, side by side (not aiayn train's auto)
    cmd += ["--set", *(f"{k}={json.dumps(v)}" for k, v in r["model"].items())] if r["model"] else []
    cmd += train_flags(r["train"])
    if plan["train_minutes"]:
        cmd += ["--max-minutes", f"{plan['train_minutes']:g}"]
    if plan.get("init_from"):
        cmd += ["--init-from", plan["init_from"][d]]
    return cmd


def _direction_job(d: str, plan: dict[str, Any], kids: _Children, results: dict[str, dict[str, Any]], deadline: float) -> None:
    out, r = plan["out"], plan["recipe"]
    log = out / "logs" / f"{d}.log"
    env = _child_env(plan["device"], plan["threads"], plan["allocator"])
    run = out / "runs" / d
    cmd = train_command(d, plan)
    stages = results[d]["stages"]
    stages["train"] = kids.run(d, "train", cmd, env, log)
    if stages["train"] != 0:
        results[d]["failed" if stages["train"] != EXIT_INTERRUPTED else "interrupted"] = "train"
        return
    status = out / "logs" / f"{d}.post.json"
    status.unlink(missing_ok=True)
    post = [sys.executable, "-m", "aiayn.training.finish", "--run", str(run), "--checkpoint", str(out / "checkpoints" / d),
            "--data", str(plan["data_for"][d]), "--last", str(r["average_last"]), "--device", plan["device"],
            "--hardware", plan["hardware"], "--notes", _card_notes(plan), "--deadline", str(deadline),
            "--threads", str(plan["threads"]), "--status", str(status)] + ([] if plan["sweep"] else ["--no-sweep"])
    code = kids.run(d, "post", post, env, log)
    try:
        stages.update(json.loads(status.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    if code == EXIT_INTERRUPTED:
        results[d]["interrupted"] = "post"
    elif code != 0:
        results[d]["failed"] = next((k for k, v in stages.items() if isinstance(v, int) and v != 0), "post")


def _log_tail(path: Path, n: int = 6) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in lines[-n:])


def _run_directions(plan: dict[str, Any], kids: _Children, results: dict[str, dict[str, Any]], deadline: float) -> None:
    """Run every direction's job in a thread of its own until all end; Ctrl-C or SIGTERM stops the children."""
    def on_signal(signum, frame):  # noqa: ARG001
        kids.stop.set()

    in_main = threading.current_thread() is threading.main_thread()  # signal handlers can only be set there
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    try:
        jobs = [threading.Thread(target=_direction_job, args=(d, plan, kids, results, deadline), daemon=True, name=d)
                for d in plan["directions"]]
        for j in jobs:
            j.start()
        stopping = False
        while any(j.is_alive() for j in jobs):
            for j in jobs:
                j.join(timeout=0.2)
            if kids.stop.is_set() and not stopping:
                stopping = True
                print("aiayn train-both: stopping the children (the run states saved so far are kept)...", file=sys.stderr,
                      flush=True)
                kids.terminate_all()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _summary(plan: dict[str, Any], results: dict[str, dict[str, Any]], started: float, code: int,
             interrupted: bool, failed: tuple[str, ...]) -> dict[str, Any]:
    """What ``summary.json`` holds: the recipe, the budget, and per direction its stages, status and scores."""
    return {"format": "aiayn-train-both", "format_version": 1,
            "status": "interrupted" if interrupted else ("failed" if failed else "ok"), "exit_code": code,
            "recipe": plan["recipe_name"], "preset": plan["recipe"]["preset"],
            "model_overrides": plan["recipe"]["model"], "train_settings": plan["recipe"]["train"],
            "average_last": plan["recipe"]["average_last"], "data_dir": _common_data_dir(plan),
            "data_dirs": {d: str(p) for d, p in plan["data_for"].items()}, "device": plan["device"],
            "hardware": plan["hardware"], "threads_per_child": plan["threads"],
            "budget": {"max_minutes": plan["max_minutes"], "reserve_minutes": plan["reserve"],
                       "train_max_minutes": plan["train_minutes"] or None},
            "started_utc": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
            "elapsed_minutes": (time.time() - started) / 60, "directions": results}


def _common_data_dir(plan: dict[str, Any]) -> str | None:
    """The one data folder every direction trained on (None when ``--data-for`` gave them different ones)."""
    folders = set(plan["data_for"].values())
    return str(folders.pop()) if len(folders) == 1 else None


def _finish(plan: dict[str, Any], results: dict[str, dict[str, Any]], started: float, interrupted: bool) -> int:
    """Read back each direction's files, write and print the summary, say what failed; returns the exit code."""
    from ..files import atomic_write_text

    out = plan["out"]
    failed = tuple(d for d in DIRECTIONS if d in results and results[d].get("failed"))
    for d in plan["directions"]:
        results[d].update(direction_summary(out, d, results[d]["stages"]))
        results[d]["status"] = (f"failed: {results[d]['failed']}" if results[d].get("failed")
                                else f"interrupted: {results[d]['interrupted']}" if results[d].get("interrupted") else "ok")
    code = EXIT_INTERRUPTED if interrupted else EXIT_FAILED.get(failed, 0)
    summary = _summary(plan, results, started, code, interrupted, failed)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    print("\n" + summary_table(summary))
    print(f"\nwrote {out / 'summary.json'}; checkpoints in {out / 'checkpoints'}")
    for d in failed:
        stage, log = results[d]["failed"], out / "logs" / f"{d}.log"
        print(f"aiayn train-both: {d} failed at {stage} (exit code {results[d]['stages'].get(stage, '?')}); "
              f"the end of {log}:\n{_log_tail(log)}", file=sys.stderr)
    if interrupted:
        print("aiayn train-both: interrupted; to continue a run: "
              + "; ".join(f"aiayn train --run {out / 'runs' / d} --resume" for d in plan["directions"]), file=sys.stderr)
    return code


def cli_main(argv: list[str]) -> int:
    """``aiayn train-both --data DIR --out OUT [--max-minutes 20] [--recipe gpu-n6|tiny] [--set k=v ...]
    [--train-set k=v ...] [--device auto|cpu|cuda[:N]] [--no-sweep] [--data-for D=DIR ...]``, or ``aiayn train-both
    --pack DATA [DATA ...] OUT.tar.gz``, or ``aiayn train-both --unpack PACK DEST``.

    Returns the exit code: 0 when every direction produced its checkpoint, 2 for bad input (nothing started),
    3 when en-de failed, 4 when de-en failed, 5 when both failed (the other direction still finishes; the message
    names the failed stage and shows the end of its log), 130 when interrupted (Ctrl-C or SIGTERM stop both
    children; run states and checkpoints are written atomically, so nothing is left half-written).
    """
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        if args.pack:
            if len(args.pack) < 2:
                raise BadInput("--pack takes one or more data folders and then the archive to write")
            path = pack_data(args.pack[:-1], args.pack[-1])
            print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")
            return 0
        if args.unpack:
            folders = unpack_data(*args.unpack)
            print("unpacked " + ", ".join(str(f) for f in folders))
            return 0
        plan = _plan(args)
    except (BadInput, BadPack) as exc:
        print(f"aiayn train-both: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = plan["out"]
    (out / "logs").mkdir(parents=True, exist_ok=True)
    started = time.time()
    deadline = started + 60 * plan["max_minutes"] if plan["max_minutes"] else 0.0
    kids = _Children(args.quiet)
    results: dict[str, dict[str, Any]] = {d: {"stages": {}} for d in plan["directions"]}
    print(f"aiayn train-both: recipe {plan['recipe_name']}, device {plan['device']}, {plan['threads']} CPU thread(s) per child, "
          + (f"budget {plan['max_minutes']:g} min (training {plan['train_minutes']:g} min)" if plan["max_minutes"] else "no time budget")
          + f"; children on {describe(_child_env(plan['device'], plan['threads'], plan['allocator']))}; logs in {out / 'logs'}",
          flush=True)
    _run_directions(plan, kids, results, deadline)
    return _finish(plan, results, started, kids.stop.is_set())


if __name__ == "__main__":
    sys.exit(cli_main(sys.argv[1:]))
