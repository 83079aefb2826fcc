"""Ding's example sentences as a kind of their own (``aiayn data sentence-kind``), so a training mix can weight them.

``aiayn data debian`` gives every Ding pair of the train split the kind ``ding`` (``train_kinds.txt``, one kind per
row): 386,599 rows of the story build, most of them dictionary entries ("Aal blau | Eel au bleu", "to have your
employment permit renewed"), and about 18,500 example sentences ("Ich verstehe nicht, was Du meinst. | I can't see
what you mean."). The sentences are the everyday language the app's users type, which the build has little of
(3,311 pairs of the kind ``everyday``), and they are the text the Ding valid and test splits are drawn from (held-out
sentences, :func:`aiayn.data.splits.is_sentence`); at weight 1 among the entries they are 2.7% of an epoch. This
module relabels them ``ding_sentence`` in a copy of a prepared folder, so that ``--kind-weights ...,ding_sentence=4``
can repeat them (docs/data.md, docs/training.md "Session 23"). No pair is added, removed or changed: ``train.tsv``
and every other file are the original's.

The rule (:func:`is_example_sentence`), on the two sides as ``train.tsv`` holds them: both begin with an upper-case
letter (A-Z, Ä, Ö, Ü) and end with ``.``, ``!`` or ``?``, and the German side has at least 3 words. It is looser than
``is_sentence`` (4 words, quotes and digits at the start, "etw."-style endings excluded), which decides what the
held-out splits may hold; for training data a 3-word sentence such as "Er ging heim." is everyday language too.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["KIND", "FROM_KIND", "RULE", "is_example_sentence", "sentence_kinds", "write_sentence_kind_folder"]

#: the kind the example sentences get
KIND = "ding_sentence"
#: the kind they are taken from
FROM_KIND = "ding"
#: the rule in words, for the datasheet
RULE = ("both sides begin with an upper-case letter (A-Z, Ä, Ö, Ü) and end with '.', '!' or '?', and the German side "
        "has at least 3 words")

_SENTENCE = re.compile(r"^[A-ZÄÖÜ].*[.!?]$")


def is_example_sentence(de: str, en: str) -> bool:
    """True when a Ding pair is an example sentence by :data:`RULE` (module docstring)."""
    return bool(_SENTENCE.match(de) and _SENTENCE.match(en) and len(de.split()) >= 3)


def sentence_kinds(rows: list[str], kinds: list[str]) -> list[str]:
    """``kinds`` with every ``ding`` row whose ``train.tsv`` line (``"German<TAB>English"``) passes
    :func:`is_example_sentence` relabelled :data:`KIND`.

    Raises:
        ValueError: ``rows`` and ``kinds`` differ in length, or the kinds hold :data:`KIND` already.
    """
    if len(rows) != len(kinds):
        raise ValueError(f"{len(kinds):,} kinds for {len(rows):,} train.tsv rows")
    if KIND in kinds:
        raise ValueError(f"the folder has pairs of kind {KIND!r} already")
    out = []
    for row, kind in zip(rows, kinds):
        if kind == FROM_KIND:
            de, _, en = row.partition("\t")
            if is_example_sentence(de, en.split("\t")[0]):
                kind = KIND
        out.append(kind)
    return out


def write_sentence_kind_folder(data_dir: str | Path, out_dir: str | Path) -> dict[str, int]:
    """Write ``out_dir``: a copy of the prepared folder ``data_dir`` (its token cache left out) whose
    ``train_kinds.txt`` names Ding's example sentences :data:`KIND`, with a ``sentence_kind`` record (rule and counts)
    in ``datasheet.json``, the new kind's pair count and default weight 1 there, and a section in ``DATASHEET.md``.
    Written to a temporary folder and renamed. Returns ``{kind: rows}`` of the new ``train_kinds.txt``.

    Raises:
        FileNotFoundError: ``data_dir`` lacks ``train.tsv`` or ``train_kinds.txt``.
        FileExistsError: ``out_dir`` exists.
        ValueError: ``out_dir`` is ``data_dir``, inside it or holds it; the kinds do not match the rows, or the folder
            has the kind already.
    """
    from ..files import check_outside, derived_data_folder, sha256_file

    data_dir, out_dir = Path(data_dir).expanduser(), Path(out_dir).expanduser()
    for name in ("train.tsv", "train_kinds.txt"):
        if not (data_dir / name).is_file():
            raise FileNotFoundError(f"{data_dir / name} does not exist (a folder of `aiayn data debian` has it)")
    check_outside(data_dir, out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; give a new folder")
    lines = (data_dir / "train.tsv").read_text(encoding="utf-8").split("\n")
    rows = lines[1:-1] if lines[-1] == "" else lines[1:]  # the header first; the file ends with a newline
    kinds = sentence_kinds(rows, (data_dir / "train_kinds.txt").read_text(encoding="utf-8").split())
    counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
    with derived_data_folder(data_dir, out_dir) as tmp:
        (tmp / "train_kinds.txt").write_text("".join(f"{k}\n" for k in kinds), encoding="utf-8")
        sheet_path = tmp / "datasheet.json"
        sheet = json.loads(sheet_path.read_text(encoding="utf-8")) if sheet_path.is_file() else {}
        record = {"kind": KIND, "from_kind": FROM_KIND, "rule": RULE, "rows": counts[KIND] if KIND in counts else 0,
                  "made_by": "aiayn data sentence-kind"}
        sheet["sentence_kind"] = record
        if isinstance(sheet.get("kinds"), dict):
            sheet["kinds"]["train_pairs"] = counts
            sheet["kinds"].setdefault("default_weights", {}).setdefault(KIND, 1)
        if isinstance(sheet.get("files_sha256"), dict):
            sheet["files_sha256"]["train_kinds.txt"] = sha256_file(tmp / "train_kinds.txt")
        sheet_path.write_text(json.dumps(sheet, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        if (tmp / "DATASHEET.md").is_file():
            with open(tmp / "DATASHEET.md", "a", encoding="utf-8", newline="\n") as fh:
                fh.write(f"\n## Ding's example sentences as a kind of their own\n\n{record['rows']:,} rows of kind "
                         f"`{FROM_KIND}` relabelled `{KIND}` in `train_kinds.txt` ({RULE}); no pair added or changed "
                         f"(`aiayn data sentence-kind`).\n")
    return counts
