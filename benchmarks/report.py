"""Result rows, targets, the printed table and the JSON file.

JSON schema (``"schema": "aiayn-bench/1"``)::

    {"schema": "aiayn-bench/1", "quick": bool, "groups": [...], "machine": {machine_info()},
     "settings": {...}, "rows": [Row.to_dict()...], "targets": [target dicts...]}

A row: ``id`` (unique, dotted: ``group.device.what``), ``group``, ``device``, ``name``, ``value`` (float or
null), ``unit``, ``note`` (``"n/a: reason"`` when ``value`` is null) and ``detail`` (samples, sizes...).
A target: ``id``, ``description``, ``row`` (the row id it reads), ``op`` (``">="``/``"<="``), ``threshold``,
``measured``, ``status`` (``"met"``, ``"missed"`` or ``"n/a: reason"``).
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "aiayn-bench/1"
GROUPS = ("train", "capture", "decode", "memory", "app", "ablation", "classroom", "trainer")


@dataclass
class Row:
    """One measured figure (see the module docstring)."""

    id: str
    group: str
    device: str
    name: str
    value: float | None
    unit: str
    note: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"unknown group {self.group!r}; groups are {GROUPS}")
        if self.value is not None:
            self.value = float(self.value)
            if math.isnan(self.value):
                self.value, self.note = None, self.note or "n/a: not a number"
        if self.value is None and not self.note.startswith("n/a"):
            self.note = "n/a: " + (self.note or "not measured")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def na(id: str, group: str, device: str, name: str, unit: str, reason: str, **detail: Any) -> Row:
    """A row that could not be measured, with its reason."""
    return Row(id, group, device, name, None, unit, f"n/a: {reason}", dict(detail))


@dataclass(frozen=True)
class Target:
    """A goal read from one row: met when ``value op threshold``."""

    id: str
    description: str
    row: str
    op: str
    threshold: float
    unit: str

    def evaluate(self, rows: dict[str, Row]) -> dict[str, Any]:
        row = rows.get(self.row)
        out = {"id": self.id, "description": self.description, "row": self.row, "op": self.op,
               "threshold": self.threshold, "unit": self.unit, "measured": None}
        if row is None:
            out["status"] = "n/a: not measured in this run"
        elif row.value is None:
            out["status"] = row.note
        else:
            out["measured"] = row.value
            ok = row.value >= self.threshold if self.op == ">=" else row.value <= self.threshold
            out["status"] = "met" if ok else "missed"
            caveat = row.detail.get("target_caveat")
            if caveat:
                out["status"] += f" ({caveat})"
        return out


#: The targets (docs/benchmarks.md, "Targets"). They are goals to report, never timed unit tests.
TARGETS: tuple[Target, ...] = (
    Target("train_cpu", "CPU training step no slower than torch.nn.Transformer (eager, fp32)", "train.cpu.eager.speedup", ">=", 1.0, "x"),
    Target("train_cpu_compiled", "CPU training step no slower than torch.nn.Transformer (torch.compile)", "train.cpu.compiled.speedup", ">=", 1.0, "x"),
    Target("train_gpu", "GPU training step >= 1.3x torch.nn.Transformer (eager, bf16; H100)", "train.cuda.eager.speedup", ">=", 1.3, "x"),
    Target("train_gpu_compiled", "GPU training step >= 1.3x torch.nn.Transformer (torch.compile, bf16; H100)", "train.cuda.compiled.speedup", ">=", 1.3, "x"),
    Target("mfu_gpu", "GPU model FLOPs utilisation >= 45% of the bf16 peak (best aiayn variant)", "train.cuda.best.mfu", ">=", 0.45, "fraction"),
    Target("capture_cpu", "capturing every map costs at most 1.3x a plain forward (CPU, one sentence)", "capture.cpu.single.ratio", "<=", 1.3, "x"),
    Target("capture_cpu_batch", "capturing every map costs at most 1.3x a plain forward (CPU, batch)", "capture.cpu.batch.ratio", "<=", 1.3, "x"),
    Target("capture_gpu", "capturing every map costs at most 1.3x a plain forward (GPU, batch)", "capture.cuda.batch.ratio", "<=", 1.3, "x"),
    Target("cache_speedup", "key/value cache makes beam-4 decoding of a 15-word sentence >= 3x faster (CPU)", "decode.cpu.cache_speedup.beam4.medium", ">=", 3.0, "x"),
    Target("live_translation", "live translation, 15 words, beam 4, shipped model, CPU: <= 100 ms (median)", "decode.cpu.live.medium", "<=", 100.0, "ms"),
    Target("app_first_page", "app shows its first page within 5 s of `streamlit run`", "app.cpu.first_page", "<=", 5.0, "s"),
    Target("app_head_switch", "explorer re-renders a head switch within 250 ms", "app.cpu.head_switch", "<=", 250.0, "ms"),
    Target("app_figure1_first_draw", "Figure 1 page's first draw of a 15-word sentence <= 1.5 s (CPU)", "app.cpu.figure1_first_draw", "<=", 1.5, "s"),
    Target("ablation_one_head", "ablation of one head on one sentence (beam 4, maps, shipped model, CPU) <= 1 s", "ablation.cpu.one_head", "<=", 1000.0, "ms"),
    Target("trainer_loop_cpu", "issue 21: the training loop in one process (--processes 1) >= 3x the old fp32 loop, same data, same run (CPU)", "trainer.cpu.loop_speedup", ">=", 3.0, "x"),
    Target("trainer_loop_peak_cpu", "issue 21: that one process's FLOP/s >= 50% of the CPU's bf16 matmul peak", "trainer.cpu.loop_peak_share", ">=", 0.5, "fraction"),
    Target("trainer_command_cpu", "issue 21: the loop as `aiayn train` runs it by default (2 processes on 2+ cores) >= 3x the old fp32 loop (CPU, all cores)", "trainer.cpu.command_speedup", ">=", 3.0, "x"),
    Target("trainer_command_peak_cpu", "issue 21: that loop's FLOP/s >= 50% of the CPU's bf16 matmul peak (all cores)", "trainer.cpu.command_peak_share", ">=", 0.5, "fraction"),
    Target("trainer_command_recipe_cpu", "issue 21: the same at the CPU recipe's steps (3 x 4,096 tokens per process) >= 3x the old loop", "trainer.cpu.command_speedup_recipe", ">=", 3.0, "x"),
    Target("trainer_pipeline_cpu", "training input pipeline alone (batching + collation), CPU: >= 2,000,000 target tok/s", "trainer.cpu.pipeline", ">=", 2_000_000.0, "tok/s"),
    Target("classroom_30", "30 students, p95 to translation and heatmap <= 3 s (one `streamlit run` server, CPU)", "classroom.cpu.n30.all.p95", "<=", 3.0, "s"),
    Target("classroom_30_opus_shape", "30 students on an Opus-MT-shape model (N 6, d_model 512, 58,101 pieces), p95 <= 3 s (CPU)", "classroom.cpu.opus_shape.n30.all.p95", "<=", 3.0, "s"),
)


def evaluate_targets(rows: list[Row], targets: tuple[Target, ...] = TARGETS, *, devices: list[str] | None = None) -> list[dict[str, Any]]:
    """Each target's status against ``rows``; a target on a device not in ``devices`` is
    ``"n/a: no <device> in this run"``."""
    by_id = {r.id: r for r in rows}
    out = []
    for t in targets:
        res = t.evaluate(by_id)
        dev = t.row.split(".")[1]
        if devices is not None and dev not in devices and res["measured"] is None:
            res["status"] = f"n/a: no {'GPU' if dev == 'cuda' else dev} in this run"
        out.append(res)
    return out


def format_value(value: float | None, unit: str) -> str:
    """Human form of a value: 3 significant figures, thousands separators for large numbers."""
    if value is None:
        return "n/a"
    if unit == "fraction":
        return f"{100 * value:.1f}%"
    a = abs(value)
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:.0f}"
    if a >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if a >= 0.01 or a == 0 else f"{value:.2e}"


def table(rows: list[Row], *, markdown: bool = False) -> str:
    """One table of every row: group, device, measurement, value, unit, note."""
    import pandas as pd

    df = pd.DataFrame(
        [{"group": r.group, "device": r.device, "measurement": r.name, "value": format_value(r.value, r.unit),
          "unit": "%" if r.unit == "fraction" else r.unit, "note": r.note} for r in rows],
        columns=["group", "device", "measurement", "value", "unit", "note"],
    )
    # disable_numparse: tabulate would re-read "6,465,613" as a number and print 6.46561e+06 when every value
    # of the column parses as one
    return df.to_markdown(index=False, tablefmt="pipe" if markdown else "simple", disable_numparse=True,
                          colalign=("left", "left", "left", "right", "left", "left"))


def targets_table(results: list[dict[str, Any]], *, markdown: bool = False) -> str:
    """The targets with their measured values and status."""
    import pandas as pd

    df = pd.DataFrame(
        [{"target": t["description"], "goal": f"{t['op']} {format_value(t['threshold'], t['unit'])} {'' if t['unit'] == 'fraction' else t['unit']}".strip(),
          "measured": format_value(t["measured"], t["unit"]), "status": t["status"]} for t in results],
        columns=["target", "goal", "measured", "status"],
    )
    return df.to_markdown(index=False, tablefmt="pipe" if markdown else "simple", disable_numparse=True,
                          colalign=("left", "left", "right", "left"))


def build_result(rows: list[Row], *, machine: dict[str, Any], settings: dict[str, Any], groups: list[str], quick: bool) -> dict[str, Any]:
    """The JSON document of a run (schema in the module docstring)."""
    return {
        "schema": SCHEMA,
        "quick": bool(quick),
        "groups": list(groups),
        "machine": machine,
        "settings": settings,
        "rows": [r.to_dict() for r in rows],
        "targets": evaluate_targets(rows, devices=settings.get("devices")),
    }


def write_json(result: dict[str, Any], path: str | Path) -> Path:
    """Write ``result`` to ``path`` atomically (temporary file then rename); creates the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(result, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
