"""`aiayn evaluate-dev`: sacreBLEU and chrF of a checkpoint on the project's own development sets.

The sets live in ``assets/devsets/`` (``short.tsv``: 160 everyday sentences of 4-8 words, ``long.tsv``: 100 everyday
and narrative sentences of 12-25 words, ``classic.tsv``: the sentences of Transformer lessons and tutorials and the
app's own examples), written for this project with reference translations (``assets/devsets/README.md``). Each
file is a TSV with the header ``en<TAB>de``; the same pairs serve both directions. They measure what a student
types, where the Ding test split measures dictionary example sentences.

Decoding is the paper's (Section 6.1): beam size 4, length penalty alpha = 0.6, maximum output length = source length
+ 50; scores are corpus-level sacreBLEU and chrF (:func:`aiayn.evaluation.scoring.score`).

Command line::

    aiayn evaluate-dev --checkpoint checkpoints/en-de [--sets short long classic] [--out DIR/eval_dev.json]
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from ..checkpoint_format import weights_sha256
from ..files import atomic_write_text, sha256_file
from .scoring import evaluate_translator

__all__ = ["DEVSETS_DIR", "SET_NAMES", "read_devset", "load_devsets", "evaluate_devsets", "checkpoint_directions", "cli_main"]

#: the folder of the committed development sets
DEVSETS_DIR = Path(__file__).resolve().parents[2] / "assets" / "devsets"
#: the sets, in the order they are reported
SET_NAMES = ("short", "long", "classic")
#: file name of the results beside a checkpoint
EVAL_DEV_FILE = "eval_dev.json"


def read_devset(path: str | Path) -> list[tuple[str, str]]:
    """The ``(en, de)`` pairs of a development set file (TSV, header ``en<TAB>de``, one pair a line).

    Raises:
        FileNotFoundError: no such file.
        ValueError: another header, a line without exactly two fields, an empty or padded side, or a repeated
            English or German sentence (each names the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no development set at {path}")
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or rows[0] != ["en", "de"]:
        raise ValueError(f"{path}: the first line must be the header 'en<TAB>de', got {rows[0] if rows else 'nothing'!r}")
    pairs: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != 2:
            raise ValueError(f"{path}:{line}: expected 2 tab-separated fields (en, de), got {len(row)}")
        for text in row:
            if not text.strip() or text != text.strip():
                raise ValueError(f"{path}:{line}: empty sentence or one with leading/trailing spaces: {text!r}")
            if text in seen:
                raise ValueError(f"{path}:{line}: {text!r} repeats line {seen[text]}")
            seen[text] = line
        pairs.append((row[0], row[1]))
    if not pairs:
        raise ValueError(f"{path}: no sentence pairs")
    return pairs


def load_devsets(directory: str | Path = DEVSETS_DIR, names: Sequence[str] = SET_NAMES) -> dict[str, list[tuple[str, str]]]:
    """``{name: [(en, de), ...]}`` of ``directory/{name}.tsv`` for each of ``names`` (see :func:`read_devset`)."""
    return {name: read_devset(Path(directory) / f"{name}.tsv") for name in names}


def checkpoint_directions(meta: dict[str, Any]) -> list[str]:
    """The directions a checkpoint translates, from its meta: ``meta["directions"]`` (a model serving both) or
    ``[meta["direction"]]``; only "en-de" and "de-en" count. Empty when the meta names neither."""
    given = meta.get("directions") or [meta.get("direction")]
    return [d for d in ("en-de", "de-en") if d in given]


def evaluate_devsets(translator, sets: dict[str, list[tuple[str, str]]], direction: str, *, beam_size: int = 4,
                     alpha: float = 0.6, batch_size: int = 32, reverse: Any = None,
                     rerank_weight: float = 0.0) -> dict[str, dict[str, Any]]:
    """Translate every set in ``direction`` ("en-de": English sources, German references) and score it (a
    model for both directions decodes in ``direction``: :meth:`aiayn.translator.Translator.for_direction`).
    ``reverse`` / ``rerank_weight``: rerank each n-best list with the reverse model
    (:func:`aiayn.evaluation.scoring.evaluate_translator`); None: the beam's output.

    Returns:
        ``{set name: {"bleu", "chrf" (0-100), "n_sentences", "unfinished", "elapsed_s", "hypotheses": [str]}}``.

    Raises:
        ValueError: an unknown direction or bad decoding settings (from
            :func:`aiayn.evaluation.scoring.evaluate_translator`).
    """
    if direction not in ("en-de", "de-en"):
        raise ValueError(f"direction must be 'en-de' or 'de-en', got {direction!r}")
    translator = translator.for_direction(direction)  # a model for both directions starts with the target's tag
    out: dict[str, dict[str, Any]] = {}
    for name, pairs in sets.items():
        src, ref = ([en for en, _ in pairs], [de for _, de in pairs]) if direction == "en-de" else \
            ([de for _, de in pairs], [en for en, _ in pairs])
        res = evaluate_translator(translator, src, ref, beam_size=beam_size, alpha=alpha, batch_size=batch_size,
                                  reverse=reverse, rerank_weight=rerank_weight)
        out[name] = {"bleu": res["model"]["bleu"], "chrf": res["model"]["chrf"], "n_sentences": res["n_sentences"],
                     "unfinished": res["unfinished"], "elapsed_s": round(res["elapsed_s"], 3),
                     "hypotheses": res["hypotheses"]}
    return out


def _parser() -> argparse.ArgumentParser:
    from ..reranking import add_cli_options as add_rerank_options  # no torch import

    ap = argparse.ArgumentParser(prog="aiayn evaluate-dev",
                                 description="sacreBLEU and chrF of a checkpoint on the project's development sets "
                                             "(assets/devsets: short, long, classic), beam search as in Section 6.1.")
    ap.add_argument("--checkpoint", "-c", required=True, help="checkpoint directory (e.g. checkpoints/en-de)")
    ap.add_argument("--devsets", default=str(DEVSETS_DIR), help="folder of the sets (default: assets/devsets)")
    ap.add_argument("--sets", nargs="+", default=list(SET_NAMES), help="which sets (default: short long classic)")
    ap.add_argument("--direction", choices=["en-de", "de-en"], action="append", default=None,
                    help="direction(s) to evaluate (default: the checkpoint's own)")
    ap.add_argument("--beam-size", type=int, default=4, help="beam width (paper: 4)")
    ap.add_argument("--alpha", type=float, default=0.6, help="length penalty alpha (paper: 0.6)")
    ap.add_argument("--batch-size", type=int, default=32, help="sentences decoded together")
    ap.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    ap.add_argument("--out", default=None, help=f"JSON file (default: CHECKPOINT/{EVAL_DEV_FILE}, or with --rerank "
                    "or --domain none; '-' = do not write)")
    ap.add_argument("--domain", default=None, help="a model trained with domain tags (aiayn train --domain-tags): the "
                    "tag to start the decoder with (default: the model's own)")
    add_rerank_options(ap)
    return ap


def cli_main(argv: list[str]) -> int:
    """``aiayn evaluate-dev --checkpoint DIR [--sets ...] [--direction D] [--out FILE]``: prints a table and writes
    the scores and hypotheses as JSON. Returns 0, or 2 with a message (a missing or bad checkpoint or set, a
    checkpoint without a direction, bad decoding settings)."""
    from ..reranking import cli_weight, reverse_for
    from ..translator import Translator  # imports torch: only when the command runs

    args = _parser().parse_args(argv)

    def fail(msg: str) -> int:
        print(f"aiayn evaluate-dev: {msg}", file=sys.stderr)
        return 2

    if args.beam_size < 1 or args.batch_size < 1:
        return fail(f"--beam-size and --batch-size must be >= 1, got {args.beam_size} and {args.batch_size}")
    try:
        weight = cli_weight(args)  # None: the paper's beam search
    except ValueError as exc:
        return fail(str(exc))
    try:
        sets = load_devsets(args.devsets, args.sets)
        tr = Translator.load(Path(args.checkpoint).expanduser(), device=args.device).for_domain(args.domain)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        return fail(str(exc))
    directions = args.direction or checkpoint_directions(tr.meta)
    if not directions:
        return fail(f"{args.checkpoint}: its meta names no direction 'en-de' or 'de-en'; pass --direction")
    started = _dt.datetime.now(_dt.timezone.utc)
    scores: dict[str, dict[str, Any]] = {}
    try:
        for d in directions:
            reverse = None if weight is None else reverse_for(tr, d, args.reverse, device=args.device)
            scores[d] = evaluate_devsets(tr, sets, d, beam_size=args.beam_size, alpha=args.alpha, batch_size=args.batch_size,
                                         reverse=reverse, rerank_weight=weight or 0.0)
    except ValueError as exc:
        return fail(str(exc))
    print(f"{'set':<8} {'direction':<9} {'n':>4} {'BLEU':>6} {'chrF':>6}")
    for d, per_set in scores.items():
        for name, s in per_set.items():
            print(f"{name:<8} {d:<9} {s['n_sentences']:>4} {s['bleu']:>6.2f} {s['chrf']:>6.2f}")
    if args.out == "-" or ((weight is not None or args.domain is not None) and args.out is None):
        return 0  # the checkpoint's own file holds its default decoding
    from .scoring import score

    sig = score(["a"], ["a"])
    out = {
        "checkpoint": str(Path(args.checkpoint).expanduser().resolve()),
        "checkpoint_step": tr.meta.get("step"),
        "model_sha256": weights_sha256(args.checkpoint),
        "decoding": {"beam_size": args.beam_size, "alpha": args.alpha, "max_len": "source length + 50",
                     "projection": tr.projection.precision, "domain": tr.cfg.domain,
                     "rerank": None if weight is None else {"weight": weight,
                                                                 "reverse": args.reverse or "default (reverse_for)"}},
        "signatures": {"bleu": sig["bleu_signature"], "chrf": sig["chrf_signature"]},
        "sets": {name: {"file": f"{name}.tsv", "sha256": sha256_file(Path(args.devsets) / f"{name}.tsv"),
                        "n_pairs": len(pairs)} for name, pairs in sets.items()},
        "scores": {d: {name: {"bleu": s["bleu"], "chrf": s["chrf"]} for name, s in per_set.items()}
                   for d, per_set in scores.items()},
        "details": scores,
        "started_utc": started.isoformat(timespec="seconds"),
        "device": str(tr.device),
    }
    path = Path(args.out).expanduser() if args.out else Path(args.checkpoint).expanduser() / EVAL_DEV_FILE
    try:
        atomic_write_text(path, json.dumps(out, ensure_ascii=False, indent=2) + "\n")
    except OSError as exc:
        return fail(f"cannot write {path}: {exc}")
    print(f"wrote {path}")
    return 0
