"""The lineage of a checkpoint: every training run its weights descend from, oldest first, with the steps,
target tokens, wall time, hardware and data of each. Without torch (the Overview reads it before torch is
imported). Not a paper section: the paper trains each model in one run; ours were trained on over several
sessions and warm-started from other models (``aiayn train --init-from``; transfer learning, Zoph et al. 2016),
and a checkpoint's own ``step`` / ``train_tokens`` / ``train_wall_time_s`` count only its last run.

A lineage is ``meta["lineage"]`` of ``config.json``: a list of runs, oldest first, each a dict

``run``          the run's name (the last two parts of its directory, e.g. ``"runs/en-de"``)
``direction``    ``"en-de"`` or ``"de-en"`` (a parent may have been trained in the other direction)
``init_from``    where the run's weights started (``--init-from``, last two path parts); None = random init.
                 A run that is not the first started from the end of the run before it
``steps``        optimizer steps of this run (its own count: 1..steps); ``epoch``: its last epoch
``train_tokens`` target tokens this run trained on; ``wall_time_s``: its training wall time in seconds
``hardware``     where it ran (text); ``data``: what it trained on (text); ``git_commit``; ``note`` (optional text)

A run writes its parents' lineage into ``lineage.json`` of its directory when it starts
(:func:`aiayn.training.state.record_run_start`), and ``aiayn average`` appends the run itself
(:func:`aiayn.training.export.export`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the file of a run directory holding ``{"parents": [runs...], "hardware": [texts...]}``
LINEAGE_FILE = "lineage.json"


def short_path(path: str | Path | None) -> str | None:
    """The last two components of a path (``runs/en-de``): enough to name a run without the user's home."""
    if not path:
        return None
    parts = Path(str(path)).parts
    return "/".join(parts[-2:]) if parts else str(path)


def distinct_paths(paths: list[str | Path]) -> list[str]:
    """Names for several folders that tell them apart: for each, the shortest tail of its path (at least the last
    two parts, as :func:`short_path`) that no other path of the list ends with. ``[".../on27-43/de-en/candidate",
    ".../on28-46/de-en/candidate"]`` -> ``["on27-43/de-en/candidate", "on28-46/de-en/candidate"]``, where
    :func:`short_path` would name both ``de-en/candidate``. A path given twice gets its whole path both times."""
    split = [Path(str(p)).parts for p in paths]
    names = []
    for i, parts in enumerate(split):
        others = [q for j, q in enumerate(split) if j != i]
        k = min(2, len(parts))
        while k < len(parts) and any(q[-k:] == parts[-k:] for q in others):
            k += 1
        names.append("/".join(parts[-k:]) if parts else str(paths[i]))
    return names


def data_description(data_dir: str | Path | None) -> str:
    """What a data directory holds, in words, from its ``datasheet.json`` (``aiayn data ding`` / ``debian``):
    ``"Ding German-English dictionary"``, ``"Ding + 167,327 sentence pairs from 308 Debian packages"``; the
    directory's short name when it has no readable datasheet; ``"unknown"`` without a directory."""
    if not data_dir:
        return "unknown"
    sheet_path = Path(data_dir).expanduser() / "datasheet.json"
    try:
        sheet = json.loads(sheet_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return short_path(data_dir) or "unknown"
    sheet = sheet if isinstance(sheet, dict) else {}
    sources = sheet.get("debian_sources")
    if sources:
        pairs = sum(int(s.get("pairs_in_train", s.get("pairs_kept", 0)) or 0) for s in sources)
        what = f"Ding + {pairs:,} sentence pairs from {len(sources)} Debian packages"
    else:
        what = "Ding German-English dictionary"
    what += "".join(_backtranslated(r) for r in backtranslation_records(sheet))
    relabel = sheet.get("sentence_kind")  # aiayn data sentence-kind: a kind of its own for a training mix to weight
    if isinstance(relabel, dict) and isinstance(relabel.get("rows"), int):
        what += f" ({relabel['rows']:,} Ding example sentences as kind {relabel.get('kind', 'ding_sentence')})"
    dropped, record = 0, sheet.get("pair_filter")  # aiayn data filter: pairs removed, earlier filters under previous
    while isinstance(record, dict):
        n = record.get("pairs_dropped")
        dropped += n if isinstance(n, int) and not isinstance(n, bool) else 0
        record = record.get("previous")
    if dropped:
        what += f", less {dropped:,} pairs dropped by dual cross-entropy"
    return what


def backtranslation_records(sheet: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``backtranslation`` records of a datasheet (``aiayn backtranslate`` keeps the earlier one under
    ``previous``), oldest first; ``[]`` without one."""
    record, records = sheet.get("backtranslation"), []
    while isinstance(record, dict):
        records.append(record)
        record = record.get("previous")
    return records[::-1]


def _backtranslated(record: dict[str, Any]) -> str:
    """`` + 18,875 back-translated German sentences of fortunes-de`` (``tagged`` when the synthetic sources carry a
    tag) for one ``backtranslation`` record of a datasheet."""
    src = record.get("source")
    packages = [x.get("package") or x.get("file") for x in (src if isinstance(src, list) else [src]) if isinstance(x, dict)]
    language = {"de": "German ", "en": "English "}.get(record.get("language"), "")
    n = record.get("pairs_added")
    count = f"{n:,} " if isinstance(n, int) and not isinstance(n, bool) else ""
    return (f" + {count}{'tagged ' if record.get('tag') else ''}back-translated {language}sentences"
            + (f" of {', '.join(str(p) for p in packages if p)}" if any(packages) else ""))


def run_entry(train_config: dict[str, Any], trainer_state: dict[str, Any], hardware: list[str] | None = None,
              git_commit: str | None = None) -> dict[str, Any]:
    """One lineage entry for a run: its ``train_config.json`` (as a dict) and the ``trainer_state.json`` of the
    state it ends at (step, epoch, tokens, wall_time); ``hardware`` the descriptions recorded at its starts."""
    return {"run": short_path(train_config.get("run_dir")) or "unknown", "direction": train_config.get("direction"),
            "init_from": short_path(train_config.get("init_from")), "steps": int(trainer_state.get("step", 0)),
            "epoch": trainer_state.get("epoch"), "train_tokens": int(trainer_state.get("tokens", 0)),
            "wall_time_s": float(trainer_state.get("wall_time", 0.0)),
            "hardware": "; ".join(hardware) if hardware else "unknown",
            "data": data_description(train_config.get("data_dir")), "git_commit": git_commit}


def read_run_lineage(run_dir: str | Path) -> dict[str, Any]:
    """``lineage.json`` of a run directory: ``{"parents": [...], "hardware": [...]}``; both empty when the run has
    none (trained before lineage was recorded) or it cannot be read."""
    try:
        data = json.loads((Path(run_dir) / LINEAGE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    return {"parents": list(data.get("parents") or []), "hardware": list(data.get("hardware") or [])}


def lineage_of(meta: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The lineage of a checkpoint from its ``config.json`` meta, oldest run first: ``meta["lineage"]`` when
    recorded, otherwise one entry built from the meta's own step / tokens / wall time (a checkpoint exported
    before lineage was recorded; its ``init_from``, if any, names a parent whose runs are unknown). ``[]`` for a
    checkpoint with no training record (e.g. an imported Opus-MT model). Never raises on malformed meta."""
    meta = meta if isinstance(meta, dict) else {}
    recorded = meta.get("lineage")
    if isinstance(recorded, list) and recorded and all(isinstance(e, dict) for e in recorded):
        return recorded
    if not isinstance(meta.get("step"), int) or isinstance(meta.get("step"), bool):
        return []
    tc = meta.get("train_config") if isinstance(meta.get("train_config"), dict) else {}
    return [{"run": short_path(tc.get("run_dir")) or "unknown", "direction": meta.get("direction"),
             "init_from": short_path(tc.get("init_from")), "steps": meta["step"], "epoch": meta.get("epoch"),
             "train_tokens": meta.get("train_tokens"), "wall_time_s": meta.get("train_wall_time_s"),
             "hardware": "unknown", "data": data_description(tc.get("data_dir")) if tc.get("data_dir") else "unknown",
             "git_commit": meta.get("git_commit")}]


def with_last_note(lineage: Any, said: str) -> Any:
    """``lineage`` with ``said`` appended to its last run's ``note`` (after a note it has, "; "-separated), for
    weights that are not simply that run's end (an interpolation, a soup): the lineage table lists runs, and only the
    note tells how they were mixed. The list and its entries are copied; anything that is not a list of run entries
    is returned unchanged."""
    if not (isinstance(lineage, list) and lineage and isinstance(lineage[-1], dict)):
        return lineage
    last = dict(lineage[-1])
    last["note"] = f"{last['note']}; {said}" if last.get("note") else said
    return lineage[:-1] + [last]


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


@dataclass(frozen=True)
class Stage:
    """One run of a lineage placed on the model's lifetime: it trained lifetime steps ``first..last``
    (``first = start + 1``); ``start`` is the lifetime step of the weights it began from (0 = random init);
    ``warm`` says it began from a trained parent (``start > 0``, or an ``init_from`` whose runs are unknown)."""

    entry: dict[str, Any]
    start: int
    last: int
    warm: bool


@dataclass(frozen=True)
class Lifetime:
    """Totals over a lineage: steps, target tokens, wall time (seconds; None where a run did not record it),
    the runs placed on the lifetime (:class:`Stage`), and ``complete`` = False when the first run started from
    a parent whose runs are not recorded (the totals are then lower bounds)."""

    steps: int
    train_tokens: int | None
    wall_time_s: float | None
    stages: tuple[Stage, ...]
    complete: bool

    @property
    def warm_starts(self) -> list[Stage]:
        """The runs that began from a trained parent."""
        return [s for s in self.stages if s.warm]


def lifetime(meta: dict[str, Any] | None) -> Lifetime | None:
    """Lifetime totals of a checkpoint (:func:`lineage_of` summed); None without a training record."""
    runs = lineage_of(meta)
    if not runs:
        return None
    stages, step = [], 0
    tokens: float | None = 0.0
    hours: float | None = 0.0
    for e in runs:
        n = int(_num(e.get("steps")) or 0)
        warm = step > 0 or bool(e.get("init_from"))
        stages.append(Stage(entry=e, start=step, last=step + n, warm=warm))
        step += n
        t, w = _num(e.get("train_tokens")), _num(e.get("wall_time_s"))
        tokens = None if tokens is None or t is None else tokens + t
        hours = None if hours is None or w is None else hours + w
    complete = not (runs[0].get("init_from"))
    return Lifetime(steps=step, train_tokens=None if tokens is None else int(tokens), wall_time_s=hours,
                    stages=tuple(stages), complete=complete)


def stage_sentence(stage: Stage, previous: Stage | None = None) -> str:
    """One run in words: ``"steps 8,001–10,000 (2,000 steps, en-de, Ding + ..., 0.8 h): warm start from the
    trained parent at lifetime step 8,000"`` (``"the en-de parent"`` when ``previous`` was trained in the other
    direction); a first run says from scratch, or names its unrecorded parent."""
    e = stage.entry
    hours = _num(e.get("wall_time_s"))
    bits = [f"{stage.last - stage.start:,} steps", str(e.get("direction") or "?"), str(e.get("data") or "unknown data")]
    if hours:
        bits.append(f"{hours / 3600:.1f} h")
    text = f"steps {stage.start + 1:,}–{stage.last:,} ({', '.join(bits)})"
    if previous is not None:
        other = previous.entry.get("direction")
        parent = f"the {other} parent" if other and other != e.get("direction") else "the trained parent"
        return text + f": warm start from {parent} at lifetime step {stage.start:,}"
    if e.get("init_from"):
        return text + f": warm start from `{e['init_from']}`, a parent whose training is not recorded"
    return text + ": from scratch"


def lineage_markdown(meta: dict[str, Any] | None) -> str | None:
    """The lifetime facts of a checkpoint in one Markdown line for the app (Overview, Model and training):
    total steps, tokens and hours over all runs, and each run with where it started. None without a record."""
    life = lifetime(meta)
    if life is None:
        return None
    bound = "" if life.complete else "at least "
    facts = [f"**Training steps:** {bound}{life.steps:,}"
             + (f" over {len(life.stages)} runs" if len(life.stages) > 1 else "")]
    if life.train_tokens:
        facts.append(f"**Tokens seen:** {bound}{life.train_tokens / 1e6:.1f} M")
    if life.wall_time_s:
        facts.append(f"**Training time:** {bound}{life.wall_time_s / 3600:.1f} h")
    line = " · ".join(facts)
    if len(life.stages) > 1 or life.warm_starts:
        runs = [stage_sentence(s, life.stages[i - 1] if i else None) for i, s in enumerate(life.stages)]
        line += "  \n**Lineage:** " + "; then ".join(runs) + "."
    return line
