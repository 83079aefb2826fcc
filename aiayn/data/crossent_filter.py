"""Dual conditional cross-entropy filtering of a prepared folder's train pairs: ``aiayn data filter`` (not in the paper).

Junczys-Dowmunt (2018), "Dual Conditional Cross-Entropy Filtering of Noisy Parallel Corpora" (WMT, the best system
of the shared task on parallel corpus filtering): two translation models of opposite directions score each pair
(x, y) by their cross-entropies per target piece,

    h_A = -log P_A(y | x) / |y|,    h_B = -log P_B(x | y) / |x|    (nats per piece, each with its ``</s>``),

and the pair's score is ``|h_A - h_B| + (h_A + h_B) / 2`` (lower is better): high when either model finds the pair
improbable (a misaligned catalogue message, a garbled synthetic source), and high when the two disagree, which a
translation and its source seldom make them do. Both are teacher-forced passes of the one scorer
(:meth:`aiayn.translator.Translator.log_likelihoods`); nothing is decoded.

What it is for here: the back-translated fortunes (kind ``backtranslated``, ``aiayn backtranslate``) pair real
German, often 18th-19th-century verse, with a de-en model's English, some of it nonsense ("Use Build magic to bitter
bitterly bloody both." for an alliterative tongue-twister), and session 34 found one such pair teaching "kömmt" for
"cooks"; the game catalogues hold some messages whose German belongs to another English message. Rather than weight
a whole kind down, ``--drop KIND=FRACTION`` removes the worst-scored fraction of the pairs of each named kind from a
copy of the folder; every other file and pair is the original's.

Files written (besides the copy): ``pair_scores.tsv``, one row per scored pair, worst first, with its row in the
original ``train.tsv`` (0-based, after the header), kind, the two cross-entropies, the score, whether it was dropped
and both texts, to read what was removed; a ``pair_filter`` record in ``datasheet.json`` (method, models, per-kind
counts and the score threshold; an earlier record is kept under ``previous``) and a section in ``DATASHEET.md``.

Command line::

    aiayn data filter --data DIR --out DIR --models CKPT [CKPT] --drop KIND=FRACTION[,KIND=FRACTION...]
        [--batch-size 64] [--threads N] [--device cpu]
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:  # torch only when something is scored
    from ..translator import Translator

__all__ = ["METHOD", "SCORES_FILE", "PairScore", "dual_score", "parse_drop", "models_into", "score_pairs",
           "choose_drops", "write_filtered_folder", "read_columns"]

METHOD = ("dual conditional cross-entropy (Junczys-Dowmunt 2018): |h_A - h_B| + (h_A + h_B) / 2, h = nats per "
          "target piece under each direction's model")
#: the per-pair scores written beside the filtered train split
SCORES_FILE = "pair_scores.tsv"
#: pairs scored per call of the scorer (one progress tick); the scorer batches them further
CHUNK = 512


@dataclass(frozen=True)
class PairScore:
    """One scored train pair.

    Attributes:
        row: 0-based row of ``train.tsv`` after its header.
        kind: its kind in ``train_kinds.txt``.
        h: ``{language: nats per piece}``: the cross-entropy of that language's side given the other side, under the
            model translating into that language (float, pieces counted with ``</s>``).
        score: :func:`dual_score` of the two (nats per piece; lower is better).
    """
    row: int
    kind: str
    h: dict[str, float]
    score: float


def dual_score(h_a: float, h_b: float) -> float:
    """``|h_a - h_b| + (h_a + h_b) / 2``: the dual conditional cross-entropy of a pair (Junczys-Dowmunt 2018, Eq. 4
    before its exponential, which keeps the order), from the cross-entropies per piece of its two sides (nats).

    Raises:
        ValueError: a value that is not a finite number >= 0 (a log-probability is <= 0).
    """
    for h in (h_a, h_b):
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not math.isfinite(h) or h < 0:
            raise ValueError(f"a cross-entropy must be a finite number >= 0, got {h!r}")
    return abs(h_a - h_b) + 0.5 * (h_a + h_b)


def parse_drop(text: str, kinds: Sequence[str] | None = None) -> dict[str, float]:
    """``"backtranslated=0.25,narrative=0.1"`` -> ``{"backtranslated": 0.25, "narrative": 0.1}``.

    Args:
        text: comma-separated ``KIND=FRACTION``, each fraction in [0, 1).
        kinds: the kinds the folder has (``train_kinds.txt``), to refuse others; None: not checked.

    Raises:
        ValueError (one line): an empty or malformed item, a repeated kind, a fraction outside [0, 1), a kind the
            folder lacks (the message lists those it has).
    """
    out: dict[str, float] = {}
    for item in str(text).split(","):
        kind, eq, value = item.strip().partition("=")
        kind = kind.strip()
        if not kind or not eq:
            raise ValueError(f"--drop takes KIND=FRACTION items separated by commas, got {item.strip()!r}")
        if kind in out:
            raise ValueError(f"--drop names {kind!r} twice")
        try:
            fraction = float(value)
        except ValueError:
            raise ValueError(f"--drop {kind}: {value.strip()!r} is not a number") from None
        if not 0 <= fraction < 1:
            raise ValueError(f"--drop {kind}: the fraction must be in [0, 1), got {value.strip()}")
        if kinds is not None and kind not in kinds:
            have = ", ".join(dict.fromkeys(kinds))
            raise ValueError(f"--drop {kind}: the folder has no pairs of that kind (it has: {have})")
        out[kind] = fraction
    return out


def score_pairs(models: dict[str, "Translator"], columns: tuple[str, str], rows: Sequence[tuple[str, str]],
                *, batch_size: int = 64, progress: Callable[[int], None] | None = None) -> list[dict[str, float]]:
    """The cross-entropy per piece of each side of each pair given the other side.

    Args:
        models: ``{language: Translator into that language}`` for both ``columns`` (e.g. ``{"de": en-de,
            "en": de-en}``).
        columns: the two languages of ``rows``, in order (``train.tsv``'s header, e.g. ``("de", "en")``).
        rows: ``(text in columns[0], text in columns[1])`` pairs.
        batch_size: pairs per forward pass of the scorer.
        progress: called with the number of pairs done after each chunk of both directions; None: silent.

    Returns:
        per row, ``{language: nats per piece of that side}`` (pieces with ``</s>``), in input order. The rows are
        scored longest first in chunks, so that a batch pads little; the order does not change a value.

    Raises:
        KeyError: ``models`` lacks a language of ``columns``.
        ValueError: an empty text (names its pair), a bad ``batch_size`` (from the scorer).
    """
    a, b = columns
    missing = [lang for lang in columns if lang not in models]
    if missing:
        raise KeyError(f"no model translating into {', '.join(missing)}")
    order = sorted(range(len(rows)), key=lambda i: (-len(rows[i][0]) - len(rows[i][1]), i))
    out: list[dict[str, float]] = [{} for _ in rows]
    for start in range(0, len(order), CHUNK):
        idx = order[start:start + CHUNK]
        side_a, side_b = [rows[i][0] for i in idx], [rows[i][1] for i in idx]
        into_a = models[a].log_likelihoods(side_b, side_a, batch_size=batch_size)
        into_b = models[b].log_likelihoods(side_a, side_b, batch_size=batch_size)
        for i, (lp_a, n_a), (lp_b, n_b) in zip(idx, into_a, into_b):
            out[i] = {a: -lp_a / n_a, b: -lp_b / n_b}
        if progress is not None:
            progress(len(idx))
    return out


def choose_drops(scores: Sequence[PairScore], drop: dict[str, float]) -> dict[str, list[int]]:
    """The rows to drop: per kind of ``drop``, the ``round(fraction * scored)`` worst-scored of its pairs in
    ``scores`` (highest score first; ties: the later row first, so that the choice does not depend on the order of
    ``scores``).

    Returns:
        ``{kind: [row, ...]}``, worst first, one entry per kind of ``drop`` (an empty list where none is dropped).
    """
    chosen = {}
    for kind, fraction in drop.items():
        of_kind = sorted((s for s in scores if s.kind == kind), key=lambda s: (-s.score, -s.row))
        chosen[kind] = [s.row for s in of_kind[:round(fraction * len(of_kind))]]
    return chosen


def models_into(translators: Sequence["Translator"], columns: tuple[str, str]) -> dict[str, "Translator"]:
    """``{language: Translator into it}`` for both ``columns`` from the given models: a directional model serves
    its own direction (``meta["direction"]``), one with both language tags serves both
    (:meth:`~aiayn.translator.Translator.for_direction`); the first that serves a direction is used.

    Raises:
        ValueError (one line): no model translates into one of the languages (the message names each model's
            direction).
    """
    out: dict[str, "Translator"] = {}
    for lang, other in ((columns[0], columns[1]), (columns[1], columns[0])):
        want = f"{other}-{lang}"
        for tr in translators:
            tags = tuple(getattr(tr.cfg, "language_tags", ()) or ())
            if tr.meta.get("direction") == want:
                out[lang] = tr
                break
            if lang in tags and other in tags:
                out[lang] = tr.for_direction(want)
                break
        else:
            have = ", ".join(f"{tr.path or 'a model'}: {tr.meta.get('direction') or 'no direction named'}"
                             for tr in translators)
            raise ValueError(f"dual cross-entropy needs a {want} model and its reverse; none of the models given "
                             f"translates {want} ({have})")
    return out


def _read_train(data_dir: Path) -> tuple[tuple[str, str], list[str], list[str]]:
    """``(columns, rows, kinds)`` of a prepared folder: the header's two names, the ``train.tsv`` lines after it and
    ``train_kinds.txt``'s kinds (the format :mod:`aiayn.data.kinds` reads)."""
    for name in ("train.tsv", "train_kinds.txt"):
        if not (data_dir / name).is_file():
            raise FileNotFoundError(f"{data_dir / name} does not exist (a folder of `aiayn data debian` has it)")
    columns = read_columns(data_dir)
    lines = (data_dir / "train.tsv").read_text(encoding="utf-8").split("\n")
    rows = lines[1:-1] if lines[-1] == "" else lines[1:]
    kinds = (data_dir / "train_kinds.txt").read_text(encoding="utf-8").split()
    if len(kinds) != len(rows):
        raise ValueError(f"{len(kinds):,} kinds for {len(rows):,} train.tsv rows")
    return columns, rows, kinds


def read_columns(data_dir: str | Path) -> tuple[str, str]:
    """The two languages of a prepared folder's ``train.tsv`` header (``("de", "en")``).

    Raises:
        FileNotFoundError: no ``train.tsv``; ValueError: a header without two different names.
    """
    path = Path(data_dir).expanduser() / "train.tsv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (a folder of `aiayn data debian` has it)")
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().rstrip("\n").split("\t")
    if len(header) < 2 or not header[0] or not header[1] or header[0] == header[1]:
        raise ValueError(f"{path}: the header must name two languages, got {chr(9).join(header)!r}")
    return header[0], header[1]


def _tsv_field(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ")


def _summary(scores: Sequence[PairScore], drop: dict[str, float], gone: set[int]) -> dict[str, dict]:
    """Per kind of ``drop``: its fraction, pairs scored, dropped and kept, the lowest score dropped (None: none) and
    the median score (the upper one of an even count; None without pairs), scores rounded to 4 places."""
    summary: dict[str, dict] = {}
    for kind in drop:
        values = sorted(s.score for s in scores if s.kind == kind)
        dropped = [s.score for s in scores if s.row in gone and s.kind == kind]
        summary[kind] = {"fraction": drop[kind], "scored": len(values), "dropped": len(dropped),
                         "kept": len(values) - len(dropped), "threshold": round(min(dropped), 4) if dropped else None,
                         "median": round(values[len(values) // 2], 4) if values else None}
    return summary


def _record_in_datasheet(folder: Path, record: dict, counts: dict[str, int]) -> None:
    """Put ``record`` into ``folder/datasheet.json`` as ``pair_filter`` (an earlier one kept under ``previous``), with
    the kinds' new pair ``counts`` and the sha256 of the rewritten files; nothing without a datasheet."""
    from ..files import sha256_file

    path = folder / "datasheet.json"
    if not path.is_file():
        return
    sheet = json.loads(path.read_text(encoding="utf-8"))
    sheet = sheet if isinstance(sheet, dict) else {}
    if isinstance(sheet.get("pair_filter"), dict):
        record["previous"] = sheet["pair_filter"]
    sheet["pair_filter"] = record
    if isinstance(sheet.get("kinds"), dict):
        sheet["kinds"]["train_pairs"] = counts
    if isinstance(sheet.get("files_sha256"), dict):
        for name in ("train.tsv", "train_kinds.txt", SCORES_FILE):
            sheet["files_sha256"][name] = sha256_file(folder / name)
    path.write_text(json.dumps(sheet, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def write_filtered_folder(data_dir: str | Path, out_dir: str | Path, models: dict[str, "Translator"],
                          drop: dict[str, float] | str, *, batch_size: int = 64,
                          progress: Callable[[int], None] | None = None,
                          model_names: dict[str, str] | None = None) -> dict[str, dict[str, float | int]]:
    """Write ``out_dir``: a copy of the prepared folder ``data_dir`` (its token cache left out) whose train split
    lacks the worst-scored ``drop[kind]`` of each kind's pairs by :func:`dual_score` (module docstring), with
    ``pair_scores.tsv``, a ``pair_filter`` record in ``datasheet.json`` (its ``kinds.train_pairs`` and
    ``files_sha256`` brought up to date) and a section in ``DATASHEET.md``. Written to a temporary folder and renamed
    (:func:`aiayn.files.derived_data_folder`); on an error nothing is left.

    Args:
        models: ``{language: Translator into that language}`` for both languages of ``train.tsv``'s header.
        drop: ``{kind: fraction in [0, 1)}`` or its ``KIND=FRACTION,...`` text (:func:`parse_drop`).
        batch_size: pairs per forward pass.
        progress: called with pairs done (:func:`score_pairs`).
        model_names: ``{language: how to name its model in the record}`` (a path); None: the translators' paths.

    Returns:
        ``{kind: {"scored", "dropped", "kept", "threshold", "median"}}``: pair counts, the lowest score dropped (None
        when none is) and the median score of the kind's pairs.

    Raises:
        FileNotFoundError: ``data_dir`` lacks ``train.tsv`` or ``train_kinds.txt``.
        FileExistsError: ``out_dir`` exists.
        KeyError: ``models`` lacks a language of the header.
        ValueError: ``out_dir`` is ``data_dir``, inside it or holds it; a bad ``drop``; kinds that do not match the
            rows; a row without two tab-separated sides.
    """
    from ..files import check_outside, derived_data_folder

    data_dir, out_dir = Path(data_dir).expanduser(), Path(out_dir).expanduser()
    columns, rows, kinds = _read_train(data_dir)
    drop = parse_drop(drop, kinds) if isinstance(drop, str) else parse_drop(
        ",".join(f"{k}={v}" for k, v in drop.items()), kinds)
    check_outside(data_dir, out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; give a new folder")
    missing = [lang for lang in columns if lang not in models]
    if missing:
        raise KeyError(f"no model translating into {', '.join(missing)} (the folder's languages: {', '.join(columns)})")
    picked = [i for i, k in enumerate(kinds) if k in drop]
    pairs = []
    for i in picked:
        a, tab, b = rows[i].partition("\t")
        if not tab:
            raise ValueError(f"train.tsv row {i}: no tab between the two sides")
        pairs.append((a, b.split("\t")[0]))
    h = score_pairs(models, columns, pairs, batch_size=batch_size, progress=progress)
    scores = [PairScore(row=i, kind=kinds[i], h=hi, score=dual_score(hi[columns[0]], hi[columns[1]]))
              for i, hi in zip(picked, h)]
    chosen = choose_drops(scores, drop)
    gone = {row for rows_of in chosen.values() for row in rows_of}
    summary = _summary(scores, drop, gone)
    kept_rows = [r for i, r in enumerate(rows) if i not in gone]
    kept_kinds = [k for i, k in enumerate(kinds) if i not in gone]
    counts = {k: kept_kinds.count(k) for k in dict.fromkeys(kinds)}
    names = model_names or {lang: str(getattr(models[lang], "path", None) or "a model") for lang in columns}
    worst = sorted(scores, key=lambda s: (-s.score, -s.row))
    with derived_data_folder(data_dir, out_dir) as tmp:
        with open(tmp / "train.tsv", "w", encoding="utf-8", newline="\n") as fh:
            fh.write("\t".join(columns) + "\n")
            fh.writelines(r + "\n" for r in kept_rows)
        (tmp / "train_kinds.txt").write_text("".join(f"{k}\n" for k in kept_kinds), encoding="utf-8")
        with open(tmp / SCORES_FILE, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(f"row\tkind\th_{columns[0]}\th_{columns[1]}\tscore\tdropped\t{columns[0]}\t{columns[1]}\n")
            for s, (a, b) in sorted(zip(scores, pairs), key=lambda x: (-x[0].score, -x[0].row)):
                fh.write(f"{s.row}\t{s.kind}\t{s.h[columns[0]]:.4f}\t{s.h[columns[1]]:.4f}\t{s.score:.4f}\t"
                         f"{int(s.row in gone)}\t{_tsv_field(a)}\t{_tsv_field(b)}\n")
        record = {"method": METHOD, "reference": "Junczys-Dowmunt (2018), WMT shared task on parallel corpus filtering",
                  "models": {f"into {lang}": names[lang] for lang in columns}, "kinds": summary,
                  "pairs_dropped": len(gone), "scores_file": SCORES_FILE, "made_by": "aiayn data filter"}
        _record_in_datasheet(tmp, record, counts)
        if (tmp / "DATASHEET.md").is_file():
            lines = ["", "## Pairs dropped by dual conditional cross-entropy", "",
                     f"{len(gone):,} train pairs removed by `aiayn data filter` ({METHOD}; models: "
                     + "; ".join(f"into {lang}: `{names[lang]}`" for lang in columns) + f"). Every scored pair, "
                     f"worst first: `{SCORES_FILE}`.", "",
                     "| kind | scored | dropped | lowest score dropped | median score |", "|---|---:|---:|---:|---:|"]
            lines += [f"| {k} | {v['scored']:,} | {v['dropped']:,} | {v['threshold'] if v['threshold'] is not None else '-'}"
                      f" | {v['median'] if v['median'] is not None else '-'} |" for k, v in summary.items()]
            shown = [(s, pairs[picked.index(s.row)]) for s in worst[:5] if s.row in gone]
            if shown:
                lines += ["", "The worst-scored pairs:", ""]
                lines += [f"- {s.score:.2f} ({s.kind}): {_tsv_field(a)[:100]} | {_tsv_field(b)[:100]}"
                          for s, (a, b) in shown]
            with open(tmp / "DATASHEET.md", "a", encoding="utf-8", newline="\n") as fh:
                fh.write("\n".join(lines) + "\n")
    return summary
