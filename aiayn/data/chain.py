"""Every data folder the training recipes read, built in order on a fresh machine (``aiayn data all``, issue 21).

The recipes of docs/training.md ("Training that goes on", sessions 21-24) train on folders that four commands make,
each from the one before: ``aiayn data debian`` (Ding + Debian, the story text of games included), a copy with the
shipped checkpoints' SentencePiece model (``-shipspm``: the warm start's token ids must mean the same pieces;
:func:`aiayn.training.continuous.data_with_shipped_spm`), ``aiayn backtranslate`` both ways (German fortunes by the
shipped de-en for en-de, English fortunes by the shipped en-de for de-en; Sennrich et al. 2016) and ``aiayn data
sentence-kind`` (Ding's example sentences as a kind of their own). A new machine has none of them, and ``aiayn
train-on`` cannot warm-start without one; this module runs the chain, keeping every folder that is already complete,
so the same command also finishes a chain that was interrupted.

Folders under ``root`` (default ``~/.cache/aiayn/data``):

============================== ============================================================ =========================
folder                          made by                                                      trains
============================== ============================================================ =========================
``debian-story``                ``aiayn data debian``                                        (base of the rest)
``debian-story-shipspm``        links to the above + the shipped ``spm.model``               both, no back-translation
``debian-story-bt``             ``aiayn backtranslate`` (German fortunes, shipped de-en)     en-de
``debian-story-bt-en``          ``aiayn backtranslate --language en`` (shipped en-de)        de-en
``debian-story-bt-dingsent``    ``aiayn data sentence-kind``                                 en-de (sessions 23-24)
``debian-story-bt-en-dingsent`` ``aiayn data sentence-kind``                                 de-en (sessions 23-24)
============================== ============================================================ =========================

The English back-translations are named kind ``backtranslated`` (not the command's default ``backtranslated-en``),
as the de-en runs of sessions 21-24 were, so one ``--kind-weights`` spelling trains either direction.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["BASE", "REQUIRED_FILES", "Step", "ChainError", "chain_steps", "is_complete", "run_chain", "cli_main"]

#: the first folder's name; the others are named after it
BASE = "debian-story"
#: what a finished folder of every step holds (a back-translated or relabelled folder is written under another name
#: and moved into place, so it is there whole or not at all; ``aiayn data debian`` writes in place, datasheet last)
REQUIRED_FILES = ("train.tsv", "valid.tsv", "test.tsv", "spm.model", "train_kinds.txt", "datasheet.json")


class ChainError(ValueError):
    """Bad input to the chain: a checkpoint folder without a model or vocabulary, two checkpoints whose vocabularies
    differ, or a folder in the way that the chain did not finish and will not overwrite."""


@dataclass(frozen=True)
class Step:
    """One folder of the chain.

    Attributes:
        out: the folder the step makes.
        inputs: the folders it reads (earlier steps' ``out``).
        command: what it runs, as the ``aiayn`` command line a user would type (``["aiayn", "data", ...]``), or a
            one-line description when it is a function with no command of its own (the ``-shipspm`` copy).
        overwrites: True when the step writes into an existing, unfinished ``out`` (``aiayn data debian``, the
            ``-shipspm`` links); False when it refuses one (back-translation, sentence-kind).
    """

    out: Path
    inputs: tuple[Path, ...]
    command: tuple[str, ...]
    overwrites: bool = False

    def shell(self) -> str:
        """The command as one line (a description in parentheses when the step has no command)."""
        return " ".join(self.command) if self.command[0] == "aiayn" else f"({self.command[0]})"


def is_complete(folder: Path) -> bool:
    """True when ``folder`` holds every file of :data:`REQUIRED_FILES` (a link counts when it resolves)."""
    return all((folder / f).is_file() for f in REQUIRED_FILES)


def chain_steps(root: Path, checkpoints: Path, *, deb_dir: str | None = None, download: bool = True,
                threads: int | None = None) -> list[Step]:
    """The six steps, in the order they must run (each reads only earlier steps' folders).

    Args:
        root: where the folders go.
        checkpoints: a folder holding ``en-de`` and ``de-en`` checkpoints (the shipped ones by default): the
            vocabulary of the ``-shipspm`` copy and the models that back-translate.
        deb_dir: the .deb cache for ``aiayn data debian`` and ``aiayn backtranslate`` (None: their default,
            ``~/.cache/aiayn/debs``).
        download: False adds ``--no-download`` (only cached .debs are read).
        threads: torch threads for the back-translations (None: torch's default).
    """
    root, checkpoints = Path(root), Path(checkpoints)
    base = root / BASE
    ship = root / f"{BASE}-shipspm"
    bt_de, bt_en = root / f"{BASE}-bt", root / f"{BASE}-bt-en"
    debs = ["--debs", str(deb_dir)] if deb_dir else []
    deb_dir_flag = ["--deb-dir", str(deb_dir)] if deb_dir else []
    offline = [] if download else ["--no-download"]
    threads_flag = ["--threads", str(threads)] if threads is not None else []
    bt_common = [*deb_dir_flag, *offline, *threads_flag]
    return [
        Step(base, (), ("aiayn", "data", "debian", "--out", str(base), *debs, *offline), overwrites=True),
        Step(ship, (base,), (f"links to {base.name}'s files and a copy of {checkpoints / 'en-de' / 'spm.model'}",),
             overwrites=True),
        Step(bt_de, (ship,), ("aiayn", "backtranslate", "--data", str(ship), "--out", str(bt_de),
                              "--checkpoint", str(checkpoints / "de-en"), *bt_common)),
        Step(bt_en, (ship,), ("aiayn", "backtranslate", "--language", "en", "--kind", "backtranslated",
                              "--data", str(ship), "--out", str(bt_en), "--checkpoint", str(checkpoints / "en-de"),
                              *bt_common)),
        Step(root / f"{bt_de.name}-dingsent", (bt_de,),
             ("aiayn", "data", "sentence-kind", "--data", str(bt_de), "--out", str(root / f"{bt_de.name}-dingsent"))),
        Step(root / f"{bt_en.name}-dingsent", (bt_en,),
             ("aiayn", "data", "sentence-kind", "--data", str(bt_en), "--out", str(root / f"{bt_en.name}-dingsent"))),
    ]


def _check_checkpoints(checkpoints: Path) -> None:
    for d in ("en-de", "de-en"):
        for f in ("model.safetensors", "spm.model"):
            if not (checkpoints / d / f).is_file():
                raise ChainError(f"{checkpoints / d} has no {f}: the chain needs an en-de and a de-en checkpoint")
    if (checkpoints / "en-de" / "spm.model").read_bytes() != (checkpoints / "de-en" / "spm.model").read_bytes():
        raise ChainError(f"{checkpoints}/en-de and {checkpoints}/de-en have different spm.model files: the "
                         "-shipspm folder can hold only one vocabulary")


def _default_runner(step: Step, checkpoints: Path) -> int:
    """Runs a step in this process: the ``aiayn`` command through :func:`aiayn.cli.main`, the ``-shipspm`` copy
    through :func:`aiayn.training.continuous.link_with_spm`."""
    if step.command[0] == "aiayn":
        from ..cli import main

        return main(list(step.command[1:]))
    from ..training.continuous import link_with_spm

    # always a folder of its own, even where the base's vocabulary is already the checkpoints' (train-on would then
    # train on the base itself): the later steps name this folder
    link_with_spm(step.inputs[0], step.out, (checkpoints / "en-de" / "spm.model").read_bytes())
    return 0


def run_chain(steps: Sequence[Step], checkpoints: Path, *, runner: Callable[[Step, Path], int] | None = None,
              dry_run: bool = False, log: Callable[[str], None] = print) -> list[tuple[Step, str]]:
    """Build every step whose folder is not complete, in order; keep the others.

    Args:
        steps: from :func:`chain_steps`.
        checkpoints: as there.
        runner: ``runner(step, checkpoints) -> exit code`` (default: in this process); tests pass their own.
        dry_run: print what would run and run nothing.
        log: where the progress lines go.

    Returns:
        ``[(step, outcome)]``, outcome ``"kept"``, ``"built"`` or ``"would build"``; the list stops at a failed step
        (outcome ``"failed (exit N)"``), whose later steps do not run.

    Raises:
        ChainError: before anything runs, when a checkpoint lacks its model or vocabulary, or when a folder that a
            step refuses to overwrite exists but is not complete (it is not the chain's to delete).
    """
    _check_checkpoints(Path(checkpoints))
    for s in steps:
        if s.out.exists() and not is_complete(s.out) and not s.overwrites:
            missing = [f for f in REQUIRED_FILES if not (s.out / f).is_file()]
            raise ChainError(f"{s.out} exists but lacks {', '.join(missing)}: move it away or remove it, then run "
                             "this again (it is not this command's to overwrite)")
    run = runner or _default_runner
    done: list[tuple[Step, str]] = []
    for i, s in enumerate(steps, 1):
        head = f"[{i}/{len(steps)}] {s.out.name}"
        if is_complete(s.out):
            log(f"{head}: kept (complete)")
            done.append((s, "kept"))
            continue
        if dry_run:
            log(f"{head}: would run {s.shell()}")
            done.append((s, "would build"))
            continue
        log(f"{head}: {s.shell()}")
        t0 = time.perf_counter()
        code = run(s, Path(checkpoints))
        if code != 0 or not is_complete(s.out):
            why = f"exit {code}" if code != 0 else "its folder is not complete"
            log(f"{head}: failed ({why}); the steps after it did not run")
            done.append((s, f"failed ({why})"))
            return done
        log(f"{head}: built in {time.perf_counter() - t0:.0f} s")
        done.append((s, "built"))
    return done


def cli_main(argv: list[str]) -> int:
    """``aiayn data all``: 0 when every folder is complete (or, with ``--dry-run``, the plan was printed), 1 when a
    step failed, 2 for bad input (one line on stderr, nothing run)."""
    from ..translator import CHECKPOINTS_DIR

    ap = argparse.ArgumentParser(prog="aiayn data all",
                                 description="Build every data folder the training recipes read (docs/data.md, "
                                             "'Every folder at once'), keeping those already complete.")
    ap.add_argument("--root", default="~/.cache/aiayn/data", help="where the folders go (default ~/.cache/aiayn/data)")
    ap.add_argument("--checkpoints", default=str(CHECKPOINTS_DIR),
                    help="a folder with en-de and de-en checkpoints (default: the shipped ones)")
    ap.add_argument("--debs", default=None, help="cache folder of .deb files (default ~/.cache/aiayn/debs)")
    ap.add_argument("--no-download", action="store_true", help="use only .deb files already in --debs")
    ap.add_argument("--threads", type=int, default=None, help="torch threads of the back-translations")
    ap.add_argument("--dry-run", action="store_true", help="print what would run; run nothing")
    args = ap.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        print("aiayn data all: --threads must be at least 1", file=sys.stderr)
        return 2
    root, checkpoints = Path(args.root).expanduser(), Path(args.checkpoints).expanduser()
    steps = chain_steps(root, checkpoints, deb_dir=args.debs, download=not args.no_download, threads=args.threads)
    t0 = time.perf_counter()
    try:
        done = run_chain(steps, checkpoints, dry_run=args.dry_run)
    except ChainError as exc:
        print(f"aiayn data all: {exc}", file=sys.stderr)
        return 2
    if done and done[-1][1].startswith("failed"):
        return 1
    if not args.dry_run:
        print(f"every folder is complete under {root} ({time.perf_counter() - t0:.0f} s); e.g. "
              f"aiayn train-on --direction en-de --data {steps[4].out} (docs/training.md)")
    return 0
