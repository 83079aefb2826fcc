"""From a run to a shippable checkpoint (Section 6.1: "for the base models, we used a single model obtained by
averaging the last 5 checkpoints"): average the last k run states, store the weights in float16 / bfloat16 /
float32 with the run's SentencePiece model, metrics, configuration history and attention history
(:mod:`.history`), and the ``aiayn average`` CLI.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from ..checkpoint import average_checkpoints, read_config, save_checkpoint
from ..files import atomic_copy
from ..lineage import read_run_lineage, run_entry
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
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                            cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["git_commit"] = None
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
