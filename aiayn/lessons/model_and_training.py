"""Model-size and training lab: parameter counts per component (Table 3), the training log (Section 5),
the learning-rate schedule (Section 5.3, Equation 3) and label smoothing (Section 5.4, epsilon_ls).

Every function returns pandas frames or numpy arrays; models are built on the ``meta`` device only (no memory).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ..lineage import lifetime
from ..model.config import TransformerConfig
from ..model.transformer import Transformer
from ..training.recipe import noam_lr
from .inputs import LessonInputError, as_int


def _component(name: str) -> tuple[str, str, int | None, str]:
    """Map a parameter name to (stack, component, layer index, sub-layer)."""
    parts = name.split(".")
    if parts[0] in ("encoder_layers", "decoder_layers"):
        stack = "encoder" if parts[0] == "encoder_layers" else "decoder"
        layer = int(parts[1])
        sub = parts[2]
        comp = {"self_attn": "self-attention", "cross_attn": "cross-attention", "ffn": "feed-forward"}.get(sub)
        if comp is None and sub.startswith("norm"):
            comp = "layer norm"
        return stack, comp or sub, layer, sub
    if parts[0] in ("encoder_norm", "decoder_norm"):
        return parts[0].split("_")[0], "final layer norm", None, parts[0]
    if "positions" in parts[0]:
        return "embeddings", "learned positions", None, parts[0]
    if parts[0] == "generator":
        return "embeddings", "output projection", None, parts[0]
    return "embeddings", "token embeddings", None, parts[0]


#: display order of stacks and components (Figure 1, bottom to top).
COMPONENT_ORDER = ("embeddings", "encoder", "decoder", "token embeddings", "learned positions", "output projection",
                   "self-attention", "cross-attention", "feed-forward", "layer norm", "final layer norm")


def parameter_breakdown(cfg: TransformerConfig) -> pd.DataFrame:
    """Parameters per component, from the model's own ``named_parameters`` (built on the ``meta`` device,
    so even the big preset costs no memory). Tied matrices are counted once (Section 3.4).

    Returns:
        frame with columns stack ("embeddings" / "encoder" / "decoder"), component, layer (or -1),
        sublayer (module name), parameters; its ``parameters`` column sums to ``num_parameters()``.
    """
    with torch.device("meta"):
        model = Transformer(cfg)
    rows: dict[tuple, int] = {}
    for name, p in model.named_parameters():
        stack, comp, layer, sub = _component(name)
        key = (stack, comp, -1 if layer is None else layer, sub)
        rows[key] = rows.get(key, 0) + p.numel()
    return pd.DataFrame([(*k, v) for k, v in rows.items()], columns=["stack", "component", "layer", "sublayer", "parameters"])


def parameter_summary(cfg: TransformerConfig) -> pd.DataFrame:
    """:func:`parameter_breakdown` summed per (stack, component), with the share of the total (%)."""
    df = parameter_breakdown(cfg).groupby(["stack", "component"], sort=False, as_index=False)["parameters"].sum()
    rank = {c: i for i, c in enumerate(COMPONENT_ORDER)}
    df = df.sort_values(["stack", "component"], key=lambda col: col.map(rank), kind="stable").reset_index(drop=True)
    df["share_%"] = 100.0 * df["parameters"] / df["parameters"].sum()
    return df


class MetricsLogError(ValueError):
    """The training log is missing, empty or unreadable (message for the page user)."""


METRIC_COLUMNS = ("step", "epoch", "train_loss", "valid_loss", "valid_bleu", "lr", "tokens_per_s", "wall_time")


def load_metrics(path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """Read a ``metrics.jsonl`` training log (one JSON object per line; ``valid_*`` only on some lines).

    Returns:
        ``(frame sorted by step with the METRIC_COLUMNS present, warnings)``; warnings name skipped
        lines (not JSON, not an object, no numeric ``step``).
    Raises:
        MetricsLogError: missing file, empty file, or no usable line.
    """
    p = Path(path)
    if not p.is_file():
        raise MetricsLogError(f"no training log: {p.name} is missing in {p.parent}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MetricsLogError(f"the training log {p.name} cannot be read ({exc})") from None
    rows, bad = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad.append(n)
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), (int, float)) or isinstance(rec.get("step"), bool):
            bad.append(n)
            continue
        row = {}
        for c in METRIC_COLUMNS:
            v = rec.get(c)
            row[c] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
        rows.append(row)
    if not rows:
        if bad:
            raise MetricsLogError(f"the training log {p.name} is corrupt: none of its {len(bad)} line(s) is a JSON record with a step")
        raise MetricsLogError(f"the training log {p.name} is empty (training has not logged yet)")
    df = pd.DataFrame(rows).sort_values("step", kind="stable").reset_index(drop=True)
    df = df.dropna(axis=1, how="all")
    warnings = []
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        warnings.append(f"skipped {len(bad)} unreadable line(s) of {p.name} (line {shown})")
    return df, warnings


#: columns of :func:`lineage_table`
LINEAGE_COLUMNS = ("run", "direction", "lifetime steps", "steps", "started from", "target tokens (M)", "hours",
                   "data", "hardware")


def lineage_table(meta: dict[str, Any] | None) -> pd.DataFrame:
    """Every training run a checkpoint descends from (:mod:`aiayn.lineage`), oldest first, one row each:
    run name, direction, the lifetime steps it trained (``"8,001–10,000"``), its own steps, where it started
    (``"scratch"``, ``"trained parent at step 8,000"``, or an unrecorded parent), target tokens in millions,
    hours, data and hardware; the last row is the run whose ``metrics.jsonl`` the page draws. An empty frame
    with :data:`LINEAGE_COLUMNS` when the checkpoint has no training record."""
    life = lifetime(meta)
    rows = []
    for s in life.stages if life is not None else ():
        e = s.entry
        start = (f"trained parent at step {s.start:,}" if s.start else
                 f"`{e['init_from']}` (not recorded)" if e.get("init_from") else "scratch")
        tokens, secs = e.get("train_tokens"), e.get("wall_time_s")
        rows.append({"run": e.get("run"), "direction": e.get("direction"), "lifetime steps": f"{s.start + 1:,}–{s.last:,}",
                     "steps": s.last - s.start, "started from": start,
                     "target tokens (M)": round(tokens / 1e6, 2) if isinstance(tokens, (int, float)) else None,
                     "hours": round(secs / 3600, 2) if isinstance(secs, (int, float)) else None,
                     "data": e.get("data"), "hardware": e.get("hardware")})
    return pd.DataFrame(rows, columns=list(LINEAGE_COLUMNS))


def lr_schedule(d_model: Any, warmup_steps: Any, max_step: Any, lr_scale: float = 1.0, points: int = 400) -> pd.DataFrame:
    """Equation 3 (:func:`aiayn.training.recipe.noam_lr`) sampled at up to ``points`` steps in ``[1, max_step]``,
    always including ``warmup_steps`` (the peak, ``d_model^-0.5 * warmup_steps^-0.5``).

    Raises:
        LessonInputError: non-positive or absurd values.
    """
    d_model, warmup_steps, max_step = as_int(d_model, "d_model"), as_int(warmup_steps, "warmup_steps"), as_int(max_step, "steps")
    if not 1 <= d_model <= 65536:
        raise LessonInputError(f"d_model must be between 1 and 65536, got {d_model}")
    if not 1 <= warmup_steps <= 10_000_000:
        raise LessonInputError(f"warmup_steps must be between 1 and 10,000,000, got {warmup_steps}")
    if not 2 <= max_step <= 100_000_000:
        raise LessonInputError(f"steps must be between 2 and 100,000,000, got {max_step}")
    steps = np.unique(np.concatenate([np.linspace(1, max_step, points).round().astype(np.int64),
                                      [warmup_steps] if warmup_steps <= max_step else []]).astype(np.int64))
    return pd.DataFrame({"step": steps, "lr": [noam_lr(int(s), d_model, warmup_steps, lr_scale) for s in steps]})


def smoothed_target(vocab_size: Any, true_index: Any, epsilon_ls: Any) -> np.ndarray:
    """Label-smoothed target ``q = (1 - eps_ls) onehot(y) + eps_ls / V`` (Section 5.4), ``(V,)`` float64,
    the distribution :func:`aiayn.training.recipe.label_smoothed_loss` trains against.

    Raises:
        LessonInputError: ``V < 2``, index out of range, ``eps_ls`` outside ``[0, 1)``.
    """
    v, y = as_int(vocab_size, "vocabulary size"), as_int(true_index, "true token")
    if not 2 <= v <= 100_000:
        raise LessonInputError(f"vocabulary size must be between 2 and 100000, got {v}")
    if not 0 <= y < v:
        raise LessonInputError(f"true token must be in 0..{v - 1}, got {y}")
    try:
        eps = float(epsilon_ls)
    except (TypeError, ValueError):
        raise LessonInputError(f"epsilon_ls must be a number, got {epsilon_ls!r}") from None
    if not 0.0 <= eps < 1.0:
        raise LessonInputError(f"epsilon_ls must be in [0, 1), got {eps}")
    q = np.full(v, eps / v)
    q[y] += 1.0 - eps
    return q


def smoothed_cross_entropy(probs: Any, true_index: int, epsilon_ls: float) -> float:
    """``-sum_v q_v log p_v`` with q from :func:`smoothed_target`, in nats; ``probs`` ``(V,)`` positive,
    summing to 1.

    Raises:
        LessonInputError: probabilities not positive or not summing to 1.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or (p <= 0).any() or abs(p.sum() - 1.0) > 1e-6:
        raise LessonInputError("probabilities must be positive and sum to 1")
    q = smoothed_target(len(p), true_index, epsilon_ls)
    return float(-(q * np.log(p)).sum())


def example_prediction(vocab_size: int, true_index: int, p_true: float) -> np.ndarray:
    """A prediction ``(V,)`` with ``p_true`` on the true token and the rest spread evenly."""
    v = as_int(vocab_size, "vocabulary size")
    if not 0.0 < p_true < 1.0:
        raise LessonInputError(f"p(true) must be strictly between 0 and 1, got {p_true}")
    p = np.full(v, (1.0 - p_true) / (v - 1))
    p[true_index] = p_true
    return p


def label_smoothing_table(vocab_size: int, true_index: int, epsilon_ls: float, p_trues: Sequence[float] = (0.999, 0.9, 0.6)) -> pd.DataFrame:
    """Plain cross-entropy (``-log p_y``) vs the smoothed loss for predictions of growing confidence.

    The smoothed loss is smallest when ``p_y = 1 - eps_ls + eps_ls / V`` (the target itself), so it
    penalises over-confident predictions; the plain loss keeps rewarding ``p_y -> 1``.
    """
    rows = []
    for pt in p_trues:
        p = example_prediction(vocab_size, true_index, pt)
        rows.append({"p_true": pt, "cross_entropy": float(-math.log(pt)),
                     "smoothed_loss": smoothed_cross_entropy(p, true_index, epsilon_ls)})
    return pd.DataFrame(rows)

