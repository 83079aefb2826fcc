"""From a run to a shippable checkpoint (Section 6.1: "for the base models, we used a single model obtained by
averaging the last 5 checkpoints"): average the last k run states, store the weights in float16 / bfloat16 /
float32 with the run's SentencePiece model, metrics, configuration history and attention history
(:mod:`.history`), and the ``aiayn average`` CLI; and a weight interpolation of two checkpoints of one model
(WiSE-FT, Wortsman et al. 2022: :func:`interpolate`, ``aiayn interpolate``), as session 14 shipped.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from .._commit import source_commit
from ..checkpoint import SPM_FILE, average_checkpoints, load_checkpoint, read_config, save_checkpoint
from ..files import atomic_copy
from ..lineage import Lifetime, lifetime, read_run_lineage, run_entry, short_path, with_last_note
from ..model.transformer import Transformer
from .history import HISTORY_FILE, load_history
from .state import list_states, read_config_changes


def export(run_dir: str | Path, out_dir: str | Path, *, last: int = 1, dtype: str = "float16", meta: dict[str, Any] | None = None) -> Path:
    """Write a shippable checkpoint directory ``out_dir`` from a run: the element-wise average of the last
    ``last`` states' weights (Section 6.1 averages the last 5), stored in ``dtype``, with ``spm.model``,
    ``metrics.jsonl`` and ``attention_history.safetensors`` when the run has them (a damaged history is left
    out with a warning; the checkpoint loader ignores the file). The checkpoint's meta holds the direction, the averaged states, step, epoch, training
    wall time (seconds) and tokens, the training configuration, its changes before the exported step and the
    git commit, the data mix by kind (``meta["data_mix"]``, from ``data_mix.json`` when the run has one), and its lineage (``meta["lineage"]``, :mod:`aiayn.lineage`: the runs of the parent it was
    warm-started from, recorded when the run started, then this run); ``meta`` adds or overrides keys. Returns ``out_dir`` as a ``Path``.

    Raises:
        FileNotFoundError: the run has no saved state (or no ``train_config.json``).
        ValueError: the states do not have the same tensors (from :func:`aiayn.checkpoint.average_checkpoints`).
    """
    run_dir = Path(run_dir).expanduser()
    states = list_states(run_dir)
    if not states:
        raise FileNotFoundError(f"no saved training state in {run_dir}")
    chosen = states[-last:]
    avg = average_checkpoints([p / "model.safetensors" for p in chosen])
    cfg = read_config(chosen[-1])["model_config"]
    model = Transformer(cfg)
    model.load_state_dict(avg)
    tc = json.loads((run_dir / "train_config.json").read_text())
    st = json.loads((chosen[-1] / "trainer_state.json").read_text())
    info = {"direction": tc["direction"], "src_lang": tc["direction"].split("-")[0], "tgt_lang": tc["direction"].split("-")[1],
            "averaged_states": [p.name for p in chosen], "step": st["step"], "epoch": st["epoch"],
            "train_wall_time_s": st["wall_time"], "train_tokens": st["tokens"], "train_config": tc,
            "config_changes": [c for c in read_config_changes(run_dir) if c["step"] < st["step"]]}
    info["git_commit"] = source_commit()  # also in a `git archive` copy of the code (aiayn/_commit.py)
    if (run_dir / "data_mix.json").is_file():  # the per-kind mix (--kind-weights), so a card can say what it saw
        info["data_mix"] = json.loads((run_dir / "data_mix.json").read_text())
    own = read_run_lineage(run_dir)  # the parents recorded when the run started, and where it ran
    info["lineage"] = own["parents"] + [run_entry(tc, st, own["hardware"], info["git_commit"])]
    info.update(meta or {})
    out = save_checkpoint(out_dir, model, spm_model=run_dir / "spm.model", dtype=dtype, meta=info)
    if (run_dir / "metrics.jsonl").is_file():
        atomic_copy(run_dir / "metrics.jsonl", Path(out) / "metrics.jsonl")
    try:
        history = load_history(run_dir)
    except ValueError as exc:
        history = None
        warnings.warn(f"the attention history was not exported: {exc}", stacklevel=2)
    if history is not None:
        atomic_copy(run_dir / HISTORY_FILE, Path(out) / HISTORY_FILE)
    else:  # never leave another run's history beside these weights
        (Path(out) / HISTORY_FILE).unlink(missing_ok=True)
    return Path(out)


def average_cli_main(argv: list[str]) -> int:
    """``aiayn average RUN_DIR OUT_DIR [--last 5] [--dtype float16]``: average the last k states of a run into a
    checkpoint (:func:`export`). Returns the exit code: 0, or 2 (message on stderr) when the run has no state or
    its states do not match."""
    ap = argparse.ArgumentParser(prog="aiayn average", description="Average the last k checkpoints of a run (Section 6.1).")
    ap.add_argument("run")
    ap.add_argument("out")
    ap.add_argument("--last", type=int, default=5)
    ap.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    args = ap.parse_args(argv)
    try:
        out = export(args.run, args.out, last=args.last, dtype=args.dtype)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aiayn average: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


def differing_fields(conf_a: Any, conf_b: Any) -> list[str]:
    """Names of the compared fields in which two :class:`~aiayn.model.config.TransformerConfig` differ, in field
    order: parsed configurations, so that a ``config.json`` written before a field existed counts with the field's
    default, as loading it does (session 14's de-en has no ``domain_tags``; its fine-tunes write ``[]``)."""
    return [f.name for f in dataclasses.fields(conf_a) if f.compare and getattr(conf_a, f.name) != getattr(conf_b, f.name)]


def require_one_model(a_dir: Path, b_dir: Path, differing: list[str]) -> None:
    """Raise ValueError when two checkpoints cannot be combined weight by weight (an interpolation, a soup): their
    model configurations differ in the fields ``differing`` (the caller's comparison), or their SentencePiece models
    differ (one piece id would mean two pieces)."""
    if differing:
        raise ValueError(f"{a_dir} and {b_dir} are not checkpoints of one model shape (they differ in {differing})")
    if (a_dir / SPM_FILE).read_bytes() != (b_dir / SPM_FILE).read_bytes():
        raise ValueError(f"{a_dir} and {b_dir} do not share one SentencePiece model ({SPM_FILE} differs)")


def interpolate(a_dir: str | Path, b_dir: str | Path, out_dir: str | Path, *, weight: float) -> Path:
    """Write ``(1 - weight) A + weight B``, tensor by tensor, of two checkpoints of one model (same shape, same
    SentencePiece model), as ``out_dir``: a weight-space ensemble of a model and its fine-tuned descendant (WiSE-FT,
    Wortsman et al. 2022), which can keep what each side does best where neither beats the other everywhere. Every
    other file is B's (its metrics, attention history and meta, so the lineage and the history end with B's run),
    stored in B's dtype; ``meta["interpolation"]`` records the weight and A (path, step, averaged states), which the
    model card states. Computed in float32. Returns ``out_dir`` as a ``Path``.

    B may have tags that A lacks (language or domain tags added when B was warm-started from A): A then counts
    with each tag row equal to its start piece's row, the row B's tags started from.

    Raises:
        ValueError: ``weight`` outside [0, 1]; the two are not checkpoints of one model shape (names the fields that
            differ) or do not share one SentencePiece model; a file is damaged (from :func:`aiayn.checkpoint.load_checkpoint`).
        FileNotFoundError: a directory or one of its files is missing.
    """
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be a number in [0, 1] (the share of B), got {weight!r}")
    a_dir, b_dir = Path(a_dir).expanduser(), Path(b_dir).expanduser()
    model_a, cfg_a = load_checkpoint(a_dir)
    model_b, cfg_b = load_checkpoint(b_dir)
    conf_a, conf_b = cfg_a["model_config"], cfg_b["model_config"]
    tags = dict(language_tags=conf_b.language_tags, target_language=conf_b.target_language,
                domain_tags=conf_b.domain_tags, domain=conf_b.domain)
    # B warm-started from A with tags added (--domain-tags, --bidirectional): A's tag rows are the start piece's, as
    # the warm start made them (training.state.add_tag_rows), so w = 0 is A and w = 1 is B
    tags_added = conf_a.n_embeddings == conf_a.vocab_size and conf_a.replace(**tags) == conf_b
    same = conf_a == conf_b or tags_added
    require_one_model(a_dir, b_dir, [] if same else differing_fields(conf_a, conf_b))
    a_state = model_a.state_dict()
    if tags_added:
        from .state import add_tag_rows

        a_state = add_tag_rows(a_state, model_b)
    model_b.load_state_dict({k: (1.0 - weight) * a_state[k] + weight * v for k, v in model_b.state_dict().items()})
    meta_a = cfg_a.get("meta", {})
    meta = dict(cfg_b.get("meta", {}))
    meta["interpolation"] = {"weight": float(weight),  # of B, these weights; A is the other side
                             "a": {"path": str(a_dir), "step": meta_a.get("step"),
                                   "averaged_states": meta_a.get("averaged_states")}}
    meta["lineage"] = _lineage_with_interpolation(meta.get("lineage"), a_dir, lifetime(meta_a), weight)
    out = save_checkpoint(out_dir, model_b, spm_model=(b_dir / SPM_FILE).read_bytes(), dtype=cfg_b.get("dtype", "float32"), meta=meta)
    for name in ("metrics.jsonl", HISTORY_FILE):
        if (b_dir / name).is_file():
            atomic_copy(b_dir / name, Path(out) / name)
    return Path(out)


def _lineage_with_interpolation(lineage: Any, a_dir: Path, a_life: Lifetime | None, weight: float) -> Any:
    """B's lineage with its last run's ``note`` saying that these weights mix it with A (appended to a note it has):
    the lineage table shows the runs, and only the note tells that the last one was not used as it ended. A is named
    by its folder and lifetime step (the folder may hold other weights later)."""
    at = f" (lifetime step {a_life.steps:,})" if a_life is not None else ""
    return with_last_note(lineage, f"the weights are the interpolation {1.0 - weight:g} x {short_path(a_dir)}{at} + "
                                   f"{weight:g} x this run's (aiayn interpolate, WiSE-FT)")


def choose_interpolation(a: str, b: str, out: str, weights: list[float], data: str, direction: str | None,
                         device: str = "cpu") -> dict[str, Any]:
    """Write ``(1 - w) A + w B`` for each of ``weights``, score each by chrF (beam 4, alpha 0.6) on ``data/valid.tsv``
    (:func:`aiayn.training.continuous.interpolation_search`, the choice ``aiayn train-on --interpolate`` makes), and
    keep the best as ``out`` (ties: the weight nearer 0.5), with ``interpolation_search.json`` beside its weights:
    the split, every weight's valid chrF, the chosen weight. The other weights' folders are removed. For a candidate
    made elsewhere (a GPU run brought back): judge ``out`` afterwards with ``aiayn soup out --judge``.

    Returns:
        ``{"split": "valid", "valid_chrf": {"<w>": chrF, ...}, "weight": w, "checkpoint": "<out>", "data": "<data>"}``.

    Raises:
        ValueError: fewer than two weights, a weight outside [0, 1], no ``valid.tsv`` in ``data``, no direction
            given or in B's meta, ``out`` already exists, a weight's evaluation failed; from :func:`interpolate`:
            checkpoints of different models.
        FileNotFoundError: a checkpoint directory or one of its files is missing.
    """
    import shutil
    import tempfile

    from ..files import atomic_write_text
    from .continuous import interpolation_search

    if len(set(weights)) < 2:
        raise ValueError(f"a search needs at least two different weights, got {weights}")
    if any(not 0.0 <= w <= 1.0 for w in weights):
        raise ValueError(f"weights must be in [0, 1] (the share of B), got {weights}")
    data_dir, out_dir, b_dir = Path(data).expanduser(), Path(out).expanduser(), Path(b).expanduser()
    if not (data_dir / "valid.tsv").is_file():
        raise ValueError(f"{data_dir} has no valid.tsv: the weights are chosen on the data's valid split")
    if out_dir.exists():
        raise ValueError(f"{out_dir} already exists: choose a new folder (nothing is overwritten)")
    direction = direction or read_config(b_dir).get("meta", {}).get("direction")
    if not direction:
        raise ValueError(f"{b_dir}'s meta names no direction: give --direction")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.search-", dir=out_dir.parent))
    try:
        found = interpolation_search(Path(a).expanduser(), b_dir, data_dir, sorted(set(weights)), work, direction, device)
        Path(found["checkpoint"]).rename(out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    found.update(checkpoint=str(out_dir), data=str(data_dir), direction=direction)
    atomic_write_text(out_dir / "interpolation_search.json", json.dumps(found, indent=2) + "\n")
    return found


def interpolate_cli_main(argv: list[str]) -> int:
    """``aiayn interpolate A B OUT --weight W``: :func:`interpolate`; ``--weight W1,W2,... --data DIR``: the search
    of :func:`choose_interpolation`. Returns the exit code: 0, or 2 (one line on stderr) for a bad weight, a
    missing or damaged checkpoint, two checkpoints of different models, a search without ``--data`` or a failed
    evaluation."""
    ap = argparse.ArgumentParser(prog="aiayn interpolate", description="Weight interpolation (1 - W) A + W B of two "
                                 "checkpoints of one model (WiSE-FT, Wortsman et al. 2022); with several weights, the "
                                 "one best on a data folder's valid split.")
    ap.add_argument("a", help="checkpoint A (e.g. the shipped model)")
    ap.add_argument("b", help="checkpoint B (e.g. its fine-tuned descendant); its other files are kept")
    ap.add_argument("out", help="output checkpoint directory")
    ap.add_argument("--weight", required=True, help="W, the share of B, in [0, 1]; several, separated by commas "
                    "(e.g. 0.25,0.5,0.75), keep the one with the best chrF on --data's valid split")
    ap.add_argument("--data", default=None, help="with several weights: the data folder whose valid.tsv chooses")
    ap.add_argument("--direction", default=None, choices=["en-de", "de-en"], help="default: B's meta's")
    ap.add_argument("--device", default="cpu", help="where the valid split is translated (default cpu)")
    args = ap.parse_args(argv)
    try:
        try:
            weights = [float(part) for part in args.weight.split(",") if part.strip()]
        except ValueError:
            raise ValueError(f"--weight takes numbers in [0, 1] separated by commas, got {args.weight!r}") from None
        if len(weights) == 1:
            out = interpolate(args.a, args.b, args.out, weight=weights[0])
            print(f"wrote {out}: {1 - weights[0]:g} x {args.a} + {weights[0]:g} x {args.b}")
            return 0
        if not args.data:
            raise ValueError(f"{len(weights)} weights need --data DIR: its valid split chooses among them")
        found = choose_interpolation(args.a, args.b, args.out, weights, args.data, args.direction, args.device)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aiayn interpolate: {exc}", file=sys.stderr)
        return 2
    scores = ", ".join(f"w = {w}: {c:.2f}" for w, c in found["valid_chrf"].items())
    print(f"valid chrF {scores}; wrote {found['checkpoint']}: w = {found['weight']:g} "
          f"({1 - found['weight']:g} x {args.a} + {found['weight']:g} x {args.b})")
    return 0
