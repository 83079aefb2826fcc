"""What ``aiayn train-both`` (:mod:`.both`) does after training, per direction, in a child process of its own
(``python -m aiayn.training.finish``): average the last states into a float16 checkpoint (Section 6.1), evaluate it
on the test split(s) and the project's development sets (sacreBLEU, chrF), write its model card and head sweep;
and the summary (``summary.json`` and the printed table) read back from the files those stages wrote.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

#: exit code of an interrupted stage (SIGINT), as a shell reports it
EXIT_INTERRUPTED = 130
#: the development sets' scores beside a checkpoint (aiayn.evaluation.devsets.EVAL_DEV_FILE, named here so that the
#: summary does not import the evaluation code)
EVAL_DEV_FILE = "eval_dev.json"
#: gold pairs the post-training attribution scores (the shipped attribution.json's gradient x input subset)
ATTRIBUTION_SENTENCES = 40


# -- after training: average, evaluate, card, sweep (one child per direction) ------------------------------------
def run_stage(stage: str, fn, argv: list[str]) -> int:
    """Run the CLI function ``fn(argv)`` of one post-training stage, its command line printed first; returns its
    exit code (an argparse error's SystemExit becomes its code, not an exception)."""
    print(f"== {stage}: {' '.join(argv)}", flush=True)
    try:
        code = fn(argv)
    except SystemExit as exc:  # argparse errors
        code = exc.code if isinstance(exc.code, int) else 2
    return int(code or 0)


def evaluate_argv(ckpt: Path, data: Path, split: str, dev: str, out: Path, *, direction: str | None = None,
                  samples: bool = True, hypotheses: bool = False) -> list[str]:
    """``aiayn evaluate``'s arguments: ``ckpt`` on ``data/<split>.tsv`` with the paper's beam search, into ``out``
    (``direction`` when given, else the checkpoint's own; ``samples=False``: no sample translations in the JSON;
    ``hypotheses``: every output in it, which ``aiayn compare-evals`` and the verdict's paired comparison read)."""
    return (["--checkpoint", str(ckpt), "--data", str(data), "--split", split, "--device", dev, "--no-progress",
             "--out", str(out)] + (["--direction", direction] if direction else []) + ([] if samples else ["--samples", "0"])
            + (["--hypotheses"] if hypotheses else []))


def card_argv(ckpt: Path, data: Path, hardware: str, notes: str) -> list[str]:
    """``aiayn card``'s arguments for ``ckpt``, whose test-split evaluation is ``ckpt/eval_test.json``."""
    return [str(ckpt), "--eval", str(ckpt / "eval_test.json"), "--data", str(data), "--hardware", hardware,
            "--notes", notes.strip()]


def align_argv(ckpt: Path, data: Path, dev: str) -> list[str]:
    """``aiayn align``'s arguments: every head's AER, with the IBM Model 1 baseline from ``data/train.tsv``."""
    return ["--checkpoint", str(ckpt), "--device", dev, "--ibm1", str(data / "train.tsv")]


def attribution_argv(ckpt: Path, dev: str) -> list[str]:
    """``aiayn attribution``'s arguments: gradient x input on the first :data:`ATTRIBUTION_SENTENCES` gold pairs
    (what the Alignment page's gold-set agreement reads)."""
    return [str(ckpt), "--method", "grad_x_input", "--sentences", str(ATTRIBUTION_SENTENCES), "--device", dev,
            "--no-progress"]


def _scores(eval_path: Path) -> dict[str, Any] | None:
    try:
        ev = json.loads(eval_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sc = ev.get("scores", {})
    base = sc.get("dictionary_baseline") or {}
    return {"bleu": sc.get("model", {}).get("bleu"), "chrf": sc.get("model", {}).get("chrf"),
            "dictionary_bleu": base.get("bleu"), "dictionary_chrf": base.get("chrf"), "n_sentences": ev.get("n_sentences")}


class _StageFailed(Exception):
    """A required post-training stage (average, evaluation, card) exited non-zero; the message is its name."""


def _stage(status: dict[str, Any], name: str, fn, stage_argv: list[str]) -> None:
    """Run one required stage, record its exit code in ``status``; raises _StageFailed unless it is 0."""
    status[name] = run_stage(name, fn, stage_argv)
    if status[name] != 0:
        raise _StageFailed(name)


def _post_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m aiayn.training.finish")
    ap.add_argument("--run", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--last", type=int, required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--hardware", required=True)
    ap.add_argument("--notes", default="")
    ap.add_argument("--deadline", type=float, default=0.0, help="Unix time after which the sweep is skipped (0: never)")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--devsets", default=None, help="development sets folder (default: assets/devsets)")
    ap.add_argument("--status", required=True)
    return ap


def _general_notes(notes: str, general: dict[str, Any] | None) -> str:
    """The card's notes, with the general-sentence test split's scores appended when it was evaluated."""
    if not general:
        return notes
    return notes + (
        f"\n\nGeneral-sentence test split (`test_general.tsv`, {general['n_sentences']} sentences, same decoding): "
        f"BLEU {general['bleu']:.2f} / chrF {general['chrf']:.2f}"
        + (f" (dictionary baseline {general['dictionary_bleu']:.2f} / {general['dictionary_chrf']:.2f})"
           if general.get("dictionary_bleu") is not None else "") + "; see `eval_test_general.json`.")


def _build_checkpoint(args: argparse.Namespace, tmp: Path, splits: list[str], dev: str, status: dict[str, Any]) -> None:
    """Average, evaluate on the test split(s) and the development sets, card (each required: raises _StageFailed), the
    heads' alignment error rate (``aiayn align``, IBM Model 1 from the training split beside it), the attribution
    agreement (``aiayn attribution``, gradient x input on the first :data:`ATTRIBUTION_SENTENCES` gold pairs, as
    shipped) and the sweep (all three optional: a failure is recorded, the checkpoint kept), all into ``tmp``."""
    from ..alignment_eval import cli_main as align_main
    from ..attribution_eval import cli_main as attribution_main
    from ..evaluation.devsets import cli_main as dev_main
    from ..evaluation.modelcard import cli_main as card_main
    from ..evaluation.scoring import cli_main as evaluate_main
    from ..sweep import cli_main as sweep_main
    from .export import average_cli_main

    data = Path(args.data)
    _stage(status, "average", average_cli_main, [args.run, str(tmp), "--last", str(args.last), "--dtype", "float16"])
    for split in splits:
        _stage(status, f"evaluate_{split}", evaluate_main, evaluate_argv(tmp, data, split, dev, tmp / f"eval_{split}.json",
                                                                          hypotheses=split == "test"))
    _stage(status, "evaluate_dev", dev_main, ["--checkpoint", str(tmp), "--device", dev, "--out", str(tmp / EVAL_DEV_FILE)]
           + (["--devsets", args.devsets] if args.devsets else []))
    general = _scores(tmp / "eval_test_general.json") if "test_general" in splits else None
    notes = _general_notes(args.notes, general)
    _stage(status, "card", card_main, card_argv(tmp, data, args.hardware, notes))
    status["align"] = run_stage("align", align_main, align_argv(tmp, data, dev))
    if args.deadline and time.time() > args.deadline:
        status["attribution"] = "skipped: the time budget is spent (run `aiayn attribution DIR` later)"
    else:  # what the Alignment page's gold-set agreement reads; optional: kept on failure
        status["attribution"] = run_stage("attribution", attribution_main, attribution_argv(tmp, dev))
    if args.no_sweep:
        status["sweep"] = "skipped (--no-sweep)"
    elif args.deadline and time.time() > args.deadline:
        status["sweep"] = "skipped: the time budget is spent (run `aiayn sweep --checkpoint DIR` later)"
    else:
        status["sweep"] = run_stage("sweep", sweep_main, ["--checkpoint", str(tmp), "--device", dev])  # optional: kept on failure


def post_main(argv: list[str]) -> int:
    """The post-training child of one direction (``python -m aiayn.training.finish ...``): ``aiayn average``
    (fp16), ``aiayn evaluate`` on ``test`` (and ``test_general`` when the data has it), ``aiayn card``, and
    ``aiayn sweep`` unless ``--no-sweep`` or the deadline has passed, all in a temporary folder that replaces
    ``--checkpoint`` only when average, evaluation and card succeeded. Writes ``--status`` (JSON: each stage's
    exit code or why it was skipped). Returns 0, or the first failing stage's exit code."""
    from ..files import atomic_dir, atomic_write_text

    args = _post_parser().parse_args(argv)
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)
    final = Path(args.checkpoint)
    dev = "cuda" if args.device.startswith("cuda") else "cpu"  # CUDA_VISIBLE_DEVICES already picked the GPU
    status: dict[str, Any] = {}
    splits = ["test"] + (["test_general"] if (Path(args.data) / "test_general.tsv").is_file() else [])
    try:
        with atomic_dir(final) as tmp:
            _build_checkpoint(args, tmp, splits, dev, status)
        for name in [f"eval_{split}.json" for split in splits] + [EVAL_DEV_FILE]:  # each evaluation names the folder
            path = final / name                                                  # it read, the final one now
            ev = json.loads(path.read_text(encoding="utf-8"))
            ev["checkpoint"] = str(final.resolve())
            atomic_write_text(path, json.dumps(ev, ensure_ascii=False, indent=2) + "\n")
        code = 0
    except _StageFailed as exc:
        code = status[str(exc)]
        print(f"{exc} failed (exit code {code}); no checkpoint was written to {final}", file=sys.stderr)
    except KeyboardInterrupt:
        status["interrupted"] = True
        code = EXIT_INTERRUPTED
    atomic_write_text(Path(args.status), json.dumps(status, indent=2) + "\n")
    return code


# -- the summary ------------------------------------------------------------------------------------------------
def _last_valid(run: Path) -> dict[str, Any]:
    try:
        lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "valid_loss" in rec:
            return {"valid_loss": rec["valid_loss"], "valid_bleu": rec.get("valid_bleu"), "valid_step": rec.get("step")}
    return {}


def _dev_scores(path: Path, direction: str) -> dict[str, dict[str, Any]]:
    """``{"dev_<set>": {"bleu", "chrf", "dictionary_bleu": None, "dictionary_chrf": None, "n_sentences"}}`` of an
    ``eval_dev.json`` in ``direction``; empty when the file is missing or unreadable."""
    try:
        per_set = json.loads(path.read_text(encoding="utf-8"))["details"][direction]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {f"dev_{name}": {"bleu": s.get("bleu"), "chrf": s.get("chrf"), "dictionary_bleu": None, "dictionary_chrf": None,
                            "n_sentences": s.get("n_sentences")} for name, s in per_set.items()}


def direction_summary(out: Path, direction: str, stages: dict[str, Any]) -> dict[str, Any]:
    """What ``summary.json`` holds for one direction, read from the files the children wrote: the exported
    checkpoint's meta (steps, epoch, target tokens, training minutes, tokens/s = tokens / training seconds), the
    last validation of the run, and BLEU/chrF (model and dictionary baseline) of every ``eval_*.json``: the test
    split(s) first, then each development set as ``dev_<set>`` (no dictionary baseline)."""
    ckpt = out / "checkpoints" / direction
    row: dict[str, Any] = {"stages": stages, "log": str(out / "logs" / f"{direction}.log"),
                           "run": str(out / "runs" / direction), "checkpoint": None, "scores": {}}
    row.update(_last_valid(out / "runs" / direction))
    try:
        config = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return row
    meta = config.get("meta", {})
    secs = meta.get("train_wall_time_s") or 0.0
    row.update(checkpoint=str(ckpt), dtype=config.get("dtype"), num_parameters=config.get("num_parameters"),
               steps=meta.get("step"), epoch=meta.get("epoch"), train_tokens=meta.get("train_tokens"),
               train_minutes=secs / 60, tokens_per_s=(meta.get("train_tokens") or 0) / secs if secs else None,
               averaged_states=meta.get("averaged_states"),
               weights_mb=(ckpt / "model.safetensors").stat().st_size / 1e6 if (ckpt / "model.safetensors").is_file() else None)
    for path in sorted(ckpt.glob("eval_*.json")):
        sc = _scores(path) if path.name != EVAL_DEV_FILE else None
        if sc:
            row["scores"][path.stem[len("eval_"):]] = sc
    row["scores"].update(_dev_scores(ckpt / EVAL_DEV_FILE, direction))
    return row


def summary_table(summary: dict[str, Any]) -> str:
    """The printed table: one row per direction and split (BLEU, chrF, the dictionary's, steps, tokens, minutes,
    tok/s), or the status of a direction without scores."""
    import pandas as pd

    def num(x, fmt):
        return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"

    rows = []
    for d, row in summary["directions"].items():
        common = {"steps": num(row.get("steps"), ","), "tokens": num(row.get("train_tokens"), ","),
                  "minutes": num(row.get("train_minutes"), ".1f"), "tok/s": num(row.get("tokens_per_s"), ",.0f"),
                  "status": row.get("status")}
        for split, sc in (row.get("scores") or {"-": {}}).items():
            rows.append({"direction": d, "split": split, "BLEU": num(sc.get("bleu"), ".2f"), "chrF": num(sc.get("chrf"), ".2f"),
                         "dict BLEU": num(sc.get("dictionary_bleu"), ".2f"), "dict chrF": num(sc.get("dictionary_chrf"), ".2f"),
                         **common})
    return pd.DataFrame(rows).to_string(index=False)


if __name__ == "__main__":  # the post-training child of aiayn train-both
    sys.exit(post_main(sys.argv[1:]))
