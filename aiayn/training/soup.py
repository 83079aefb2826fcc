"""Model soups (Wortsman et al. 2022, "Model soups: averaging weights of multiple fine-tuned models improves accuracy
without increasing inference time"): several fine-tunes of one model (here: ``aiayn train-on`` runs from the shipped
weights that differ only in their seed) averaged parameter by parameter into one model of the same size, and
``aiayn soup``.

* :func:`soup`, the **uniform soup**: the mean of every ingredient (Section 2 of the paper).
* :func:`greedy_soup`, the **greedy soup** (the paper's Recipe 1): the ingredients sorted by a held-out score, best
  first; each is added to the pot only when the soup's held-out score does not fall. Here the held-out set is the
  data's *valid* split (Ding sentences that neither the test split nor the development sets hold), so the soup can
  be judged on those sets afterwards without having been chosen on them.
* ``aiayn soup ... --judge``: the soup scored and judged like a ``train-on`` candidate (higher chrF on the test split
  and every development set than the shipped model), carded, and, when it beats, given the alignment, attribution
  and head-sweep files a shipped checkpoint carries, so ``aiayn.training.continuous.ship`` can copy it.

A soup is not part of the paper; checkpoint averaging of one run (Section 6.1) is its one-run special case.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..checkpoint import SPM_FILE, WEIGHTS_FILE, average_checkpoints, load_checkpoint, load_state, read_config, save_checkpoint
from ..files import atomic_copy
from ..lineage import distinct_paths, lifetime, with_last_note
from .export import differing_fields, require_one_model
from .history import HISTORY_FILE

#: a held-out score of a checkpoint folder (chrF on the valid split in ``aiayn soup``)
Scorer = Callable[[Path], float]


def _check_one_model(ingredients: list[Path]) -> None:
    """Raise ValueError unless every ingredient is a checkpoint of one model shape with one SentencePiece model."""
    first = ingredients[0]
    model = read_config(first)["model_config"]
    for other in ingredients[1:]:
        require_one_model(first, other, differing_fields(model, read_config(other)["model_config"]))


def soup(ingredients: list[str | Path], out_dir: str | Path, *, record: dict[str, Any] | None = None) -> Path:
    """Write the uniform soup of ``ingredients`` (checkpoint folders of one model: the mean of their weights,
    parameter by parameter, computed in float64 by :func:`aiayn.checkpoint.average_checkpoints`) as ``out_dir``,
    stored in the first ingredient's dtype with its SentencePiece model, metrics and attention history.
    ``meta["soup"]`` names the ingredients (path, step, lifetime steps) plus ``record`` (e.g. how they were
    chosen), and the lineage's last run gets a note that the weights are a soup (the model card states both).
    Returns ``out_dir`` as a ``Path``.

    Raises:
        ValueError: no ingredients, a folder named twice, or checkpoints of different model shapes or
            SentencePiece models; a damaged file (from :func:`aiayn.checkpoint.average_checkpoints`).
        FileNotFoundError: a folder or one of its files is missing.
    """
    paths = [Path(p).expanduser() for p in ingredients]
    if not paths:
        raise ValueError("a soup needs at least one ingredient")
    if len({p.resolve() for p in paths}) != len(paths):
        raise ValueError("an ingredient is named twice (it would count double in the mean)")
    for p in paths:
        if not (p / WEIGHTS_FILE).is_file():
            raise FileNotFoundError(f"{p} is not a checkpoint folder (no {WEIGHTS_FILE})")
    _check_one_model(paths)
    mean = average_checkpoints([p / WEIGHTS_FILE for p in paths])
    model, cfg = load_checkpoint(paths[0])
    model.load_state_dict(mean)
    meta = dict(cfg.get("meta", {}))
    items = []
    for p in paths:
        m = read_config(p).get("meta") or {}
        life = lifetime(m)
        items.append({"path": str(p), "step": m.get("step"), "lifetime_steps": life.steps if life else None})
    meta["soup"] = {"ingredients": items, **(record or {})}
    meta["lineage"] = _lineage_with_soup(meta.get("lineage"), paths)
    out = save_checkpoint(out_dir, model, spm_model=(paths[0] / SPM_FILE).read_bytes(), dtype=cfg.get("dtype", "float32"),
                          meta=meta)
    for name in ("metrics.jsonl", HISTORY_FILE):
        if (paths[0] / name).is_file():
            atomic_copy(paths[0] / name, Path(out) / name)
    return Path(out)


def _lineage_with_soup(lineage: Any, paths: list[Path]) -> Any:
    """The first ingredient's lineage with its last run's note saying that the weights are a soup of it and the
    others (named by folder): the lineage table shows one run, and only the note tells that others were mixed in."""
    if len(paths) == 1:
        return lineage
    others = ", ".join(distinct_paths(paths)[1:])
    return with_last_note(lineage, f"the weights are the mean of this run's and {len(paths) - 1} other fine-tune(s) of "
                                   f"the same parent ({others}; a model soup, aiayn soup)")


def greedy_soup(ingredients: list[str | Path], out_dir: str | Path, score: Scorer, work: str | Path) -> dict[str, Any]:
    """The greedy soup (Wortsman et al. 2022, Recipe 1) of ``ingredients``, written as ``out_dir``: sort them by
    ``score`` (higher is better; ties keep the given order), start the pot with the best, and add each next one only
    when the soup with it scores at least as well as the pot does. Trial soups are made in ``work/trial`` (removed
    afterwards). The record (also in ``meta["soup"]``) says what was tried.

    Returns:
        ``{"method": "greedy", "scores": {ingredient: score}, "trials": [{"ingredients": [...], "score": s,
        "kept": bool}], "chosen": [...], "score": the soup's score}``.

    Raises:
        ValueError, FileNotFoundError: as :func:`soup`; whatever ``score`` raises.
    """
    paths = [Path(p).expanduser() for p in ingredients]
    if len(paths) < 2:
        raise ValueError("a greedy soup needs at least two ingredients")
    _check_one_model(paths)
    alone = {str(p): float(score(p)) for p in paths}
    order = sorted(paths, key=lambda p: -alone[str(p)])  # stable: ties keep the given order
    pot, best, trials = [order[0]], alone[str(order[0])], []
    trial = Path(work).expanduser() / "trial"
    for p in order[1:]:
        shutil.rmtree(trial, ignore_errors=True)
        soup(pot + [p], trial)
        s = float(score(trial))
        kept = s >= best
        trials.append({"ingredients": [str(q) for q in pot + [p]], "score": s, "kept": kept})
        if kept:
            pot, best = pot + [p], s
    shutil.rmtree(trial, ignore_errors=True)
    record = {"method": "greedy", "scores": alone, "trials": trials, "chosen": [str(p) for p in pot], "score": best}
    soup(pot, out_dir, record=record)
    return record


def valid_scorer(data: Path, direction: str, device: str = "cpu") -> Scorer:
    """The greedy soup's held-out score: chrF on ``data/valid.tsv`` (:func:`aiayn.training.continuous.valid_chrf`,
    which reuses a fresh ``eval_valid.json``), printed as it comes.

    Raises (from the returned function):
        ValueError: the evaluation failed.
    """
    from .continuous import valid_chrf

    def score(path: Path) -> float:
        chrf = valid_chrf(path, data, direction, device)
        print(f"  valid chrF {chrf:.2f}: {path}", flush=True)
        return chrf

    return score


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="aiayn soup", description="Average fine-tunes of one model parameter by parameter "
                                 "(a model soup, Wortsman et al. 2022): uniform, or greedy by chrF on the data's valid "
                                 "split; --judge scores it against the shipped model as aiayn train-on judges a candidate.")
    ap.add_argument("ingredients", nargs="+", help="checkpoint folders of one model (e.g. train-on candidates of several seeds)")
    ap.add_argument("--out", required=True, help="the soup's checkpoint folder")
    ap.add_argument("--greedy", action="store_true", help="the greedy soup (Recipe 1) chosen on --data's valid split")
    ap.add_argument("--data", default=None, help="data folder whose valid.tsv (greedy) and test.tsv (--judge) score it")
    ap.add_argument("--direction", choices=["en-de", "de-en"], default=None,
                    help="default: the first ingredient's (its meta's direction)")
    ap.add_argument("--judge", action="store_true", help="score the soup and the shipped model on the test split and the "
                    "development sets; card it; when it beats, add alignment, attribution and head sweep")
    ap.add_argument("--shipped", default=None, help="the shipped checkpoint to judge against (default: checkpoints/<direction>)")
    ap.add_argument("--devsets", default=None, help="development sets folder (default: assets/devsets)")
    ap.add_argument("--ship", action="store_true", help="with --judge: copy a soup that beats the shipped model on every "
                    "set, with its card and files, over it (aiayn.training.continuous.ship)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    return ap


def cli_main(argv: list[str]) -> int:
    """``aiayn soup CKPT CKPT ... --out DIR [--greedy] [--judge [--ship]] --data DATA``. Returns 0 (whatever the
    verdict), 2 bad input (one line on stderr; nothing written), 4 a scoring or card stage failed (nothing shipped)."""
    args = _parser().parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.out).expanduser()
    work = out.parent / f"{out.name}.work"
    try:
        if out.exists():  # its evaluation files would be taken for the new weights'; nothing a user made is lost
            raise ValueError(f"{out} exists: remove it or give another --out")
        if args.ship and not args.judge:
            raise ValueError("--ship ships only a judged soup: give --judge too")
        if (args.greedy or args.judge) and not args.data:
            raise ValueError("--greedy and --judge score on a data folder: give --data DIR")
        data = Path(args.data).expanduser() if args.data else None
        if data is not None and not (data / "valid.tsv").is_file():
            raise ValueError(f"{data} has no valid.tsv (give a folder made by `aiayn data`)")
        first = Path(args.ingredients[0]).expanduser()
        stored = (read_config(first).get("meta") or {}).get("direction") if (first / "config.json").is_file() else None
        direction = args.direction or stored
        if direction not in ("en-de", "de-en"):
            raise ValueError(f"{first} does not say its direction: give --direction")
        t0 = time.monotonic()
        if args.greedy:
            record = greedy_soup(args.ingredients, out, valid_scorer(data, direction), work)
            print(f"greedy soup of {len(record['chosen'])} of {len(args.ingredients)} (valid chrF {record['score']:.2f}):"
                  f" {', '.join(record['chosen'])}", flush=True)
        else:
            soup(args.ingredients, out, record={"method": "uniform"})
            print(f"uniform soup of {len(args.ingredients)}", flush=True)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aiayn soup: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}", flush=True)
    if not args.judge:
        return 0
    return _judge(out, work, data, direction, args, time.monotonic() - t0)


def same_weights(a: Path, b: Path) -> bool:
    """Whether two checkpoint folders hold the same tensors (names, dtypes and values), e.g. a greedy soup that
    kept one ingredient, the shipped model itself. False when either cannot be read."""
    try:
        ta, tb = load_state(a / WEIGHTS_FILE), load_state(b / WEIGHTS_FILE)
    except (FileNotFoundError, ValueError):
        return False
    return ta.keys() == tb.keys() and all(ta[k].dtype == tb[k].dtype and bool((ta[k] == tb[k]).all()) for k in ta)


def _judge(out: Path, work: Path, data: Path, direction: str, args: argparse.Namespace, soup_s: float) -> int:
    """Score, judge and card the soup (:func:`aiayn.training.continuous.judge_checkpoint`); the report goes to
    ``work/verdict.json``."""
    from .continuous import REPO, _hardware, eval_scores, judge_checkpoint, side_evals, verdict_line

    shipped = Path(args.shipped).expanduser() if args.shipped else REPO / "checkpoints" / direction
    devsets = Path(args.devsets).expanduser() if args.devsets else REPO / "assets" / "devsets"
    meta = read_config(out).get("meta") or {}
    if same_weights(out, shipped):  # e.g. the greedy pot kept only the shipped model: the verdict would be a tie
        work.mkdir(parents=True, exist_ok=True)
        report = {"beats": False, "same_weights_as_shipped": True, "direction": direction, "soup": str(out),
                  "shipped": str(shipped), "record": meta["soup"], "seconds": {"soup": round(soup_s, 1)}}
        (work / "verdict.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"the soup has the weights of {shipped}: nothing to judge (report: {work / 'verdict.json'})", flush=True)
        return 0
    how = meta["soup"].get("method", "uniform")
    items = meta["soup"]["ingredients"]
    hardware = _hardware(args.threads, command="aiayn soup")
    if len(items) == 1:  # a soup of one is that checkpoint as it is: its card keeps its last run's hardware
        notes = (f"The checkpoint `{distinct_paths([items[0]['path']])[0]}` as it is, judged with `aiayn soup --judge` "
                 "(one ingredient: no averaging).")
        last_run = (meta.get("lineage") or [{}])[-1]
        hardware = last_run.get("hardware") or hardware
    else:
        notes = (f"A {how} model soup (Wortsman et al. 2022) of {len(items)} checkpoints: "
                 + ", ".join(f"`{name}`" for name in distinct_paths([i["path"] for i in items]))
                 + (" (chosen by chrF on the valid split)." if how == "greedy" else "."))
    try:
        work.mkdir(parents=True, exist_ok=True)
        shipped_evals = side_evals(shipped, work / "shipped", data, devsets, direction, "cpu")
        shipped_scores = eval_scores(shipped_evals, direction)
        judged = judge_checkpoint(out, shipped_scores, data, devsets, direction,
                                  hardware, notes,
                                  shipped_evals)
    except ValueError as exc:
        print(f"aiayn soup: {exc}", file=sys.stderr)
        return 4
    report = {**judged, "direction": direction, "soup": str(out), "shipped": str(shipped), "record": meta["soup"],
              "seconds": {"soup": round(soup_s, 1)}, "scores": {"candidate": judged["scores"], "shipped": shipped_scores}}
    (work / "verdict.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(verdict_line(report, out, "the soup"), flush=True)
    print(f"report: {work / 'verdict.json'}")
    complete = all(code == 0 for code in judged["stages"].values())
    if args.ship and report["beats"] and complete:
        from .continuous import ship

        ship(out, shipped)
        print(f"shipped: copied {out} over {shipped} (with its MODEL_CARD.md, alignment, attribution and head sweep)")
    elif args.ship:
        print(f"not shipped: {shipped} stays as it is")
    return 0 if complete else 4


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_main(sys.argv[1:]))
