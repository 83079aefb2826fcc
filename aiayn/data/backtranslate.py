"""Back-translation of monolingual German or English text: ``aiayn backtranslate`` (not in the paper).

Sennrich, Haddow and Birch (2016), "Improving Neural Machine Translation Models with Monolingual Data" (ACL): a
model of the reverse direction translates real target-language text back into the source language, and the pairs
(synthetic source, real target) are added to the training data, so that the decoder learns from more real target
sentences. Both directions (``--language``):

* ``de`` (the default): the German sentences of Debian's ``fortunes-de`` (:mod:`aiayn.data.monolingual`; or a file of
  one sentence a line) are translated into English by a de-en checkpoint; the pairs (real German, synthetic English)
  are for training en-de (kind ``backtranslated``).
* ``en``: the English sentences of Debian's ``fortunes`` and ``fortunes-min`` (or a file) are translated into German
  by an en-de checkpoint; the pairs (synthetic German, real English) are for training de-en (kind
  ``backtranslated-en``).

The pairs are added as ``(de, en)`` rows to a copy of a prepared data folder (``aiayn data debian``) as a kind of
their own (``train_kinds.txt``), so that ``aiayn train --direction ... --kind-weights ...,KIND=W`` weighs them.

``--tag TEXT`` makes it tagged back-translation (Caswell, Chelba and Grangier 2019, "Tagged Back-Translation", WMT):
every synthetic source begins with ``TEXT`` and a space (e.g. ``<bt>``), so that the model can tell a machine-made
source from a real one and learns the target side without imitating the back-translating model's errors. Real
inputs never carry the tag: nothing changes at translation time.

No held-out sentence reaches train: sentences whose normalised form (:func:`~aiayn.data.splits.normalize`) is a side
in their language of the development sets (``assets/devsets/*.tsv``) or of the folder's ``valid.tsv``, ``test.tsv``,
``test_general.tsv`` or ``test_domain.tsv``, or contains one of 4+ words, are dropped (the rule of
:func:`~aiayn.data.splits.make_splits`), and so are sentences already a side in their language of the folder's
``train.tsv``.

Command line::

    aiayn backtranslate --data DIR --out DIR --checkpoint checkpoints/de-en [--language de|en]
        [--mono FILE | --package NAME [--package NAME ...]] [--deb-dir DIR] [--no-download] [--beam 4]
        [--batch-size 64] [--limit N] [--kind NAME] [--tag TEXT] [--force] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from ..checkpoint_format import weights_sha256
from ..files import check_outside, derived_data_folder, sha256_file
from ..translation import LANGUAGE_NAMES
from .corpora import collapse_whitespace, read_lines, read_tsv
from .debian import DEFAULT_DEB_DIR
from .splits import normalize, substring_hits

if TYPE_CHECKING:  # the translator (and torch) are imported only when a translation runs
    from ..translator import Translator

__all__ = ["KIND", "KINDS", "LANGUAGE_NAMES", "BACKWARD_DIRECTION", "HELD_OUT_SPLITS", "TRAINING_COMMAND",
           "held_out_keys", "train_keys", "drop_held_out", "translator_for", "backtranslate",
           "write_backtranslated_folder", "tag_synthetic", "cli_main"]

#: the kind of the added pairs in ``train_kinds.txt`` (``--kind``), per language of the monolingual text
KINDS = {"de": "backtranslated", "en": "backtranslated-en"}
#: the kind of back-translated German (``KINDS["de"]``)
KIND = KINDS["de"]
#: the direction of the model that back-translates text of a language (target -> source): German text needs a de-en
#: model, English text an en-de one. The pairs then train the opposite direction.
BACKWARD_DIRECTION = {"de": "de-en", "en": "en-de"}
#: the held-out splits of a prepared folder whose sides in the text's language may not enter train (those that exist)
HELD_OUT_SPLITS = ("valid.tsv", "test.tsv", "test_general.tsv", "test_domain.tsv")
#: the training command the summary suggests (``{out}``, ``{kind}``, ``{direction}``: the direction the pairs train)
TRAINING_COMMAND = ("aiayn train --data {out} --kind-weights "
                    "ding=1,ui=0.5,documentation=1,narrative=2,everyday=6,{kind}=3 --direction {direction} ...")
_KIND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _check_language(language: str) -> str:
    if language not in LANGUAGE_NAMES:
        raise ValueError(f"language must be one of {', '.join(LANGUAGE_NAMES)}, got {language!r}")
    return language


def check_tag(tag: str) -> str:
    """``tag`` if it can mark synthetic sources (``--tag``): one word of printable characters without whitespace,
    at most 16 characters.

    Raises:
        ValueError: an empty tag, whitespace or a control character in it, or more than 16 characters.
    """
    if not tag or len(tag) > 16 or any(c.isspace() or not c.isprintable() for c in tag):
        raise ValueError(f"--tag must be one word of 1-16 printable characters without spaces (e.g. <bt>), got {tag!r}")
    return tag


def tag_synthetic(pairs: Sequence[tuple[str, str]], tag: str, *, language: str) -> list[tuple[str, str]]:
    """Tagged back-translation (Caswell, Chelba and Grangier 2019): ``pairs`` (``(de, en)`` rows) with their
    synthetic side prefixed by ``tag`` and a space: the English side for pairs made from German text (``language``
    ``"de"``, for en-de), the German side for pairs made from English text (``"en"``, for de-en). The real side is
    unchanged.

    Raises:
        ValueError: a bad tag (:func:`check_tag`) or language.
    """
    _check_language(language)
    check_tag(tag)
    if language == "de":
        return [(de, f"{tag} {en}") for de, en in pairs]
    return [(f"{tag} {de}", en) for de, en in pairs]


def held_out_keys(data_dir: str | Path, devsets_dir: str | Path | None = None, *, language: str = "de") -> set[str]:
    """The normalised (:func:`~aiayn.data.splits.normalize`) sides in ``language`` (``"de"`` or ``"en"``) of every
    development set (``devsets_dir/*.tsv``, columns ``en``, ``de``; default
    :data:`aiayn.evaluation.devsets.DEVSETS_DIR`, read by :func:`~aiayn.evaluation.devsets.read_devset`) and of the
    splits :data:`HELD_OUT_SPLITS` of ``data_dir`` that exist (column ``de`` or ``en``).

    Raises:
        FileNotFoundError: ``devsets_dir`` does not exist.
        ValueError: a malformed set or split (named in the message); another language.
    """
    from ..evaluation.devsets import DEVSETS_DIR, read_devset

    _check_language(language)
    devsets = Path(devsets_dir) if devsets_dir is not None else DEVSETS_DIR
    if not devsets.is_dir():
        raise FileNotFoundError(f"no development sets folder at {devsets}")
    keys = {normalize(de if language == "de" else en)
            for path in sorted(devsets.glob("*.tsv")) for en, de in read_devset(path)}
    for name in HELD_OUT_SPLITS:
        path = Path(data_dir) / name
        if path.is_file():
            keys.update(normalize(getattr(p, language)) for p in read_tsv(path, "de", "en"))
    keys.discard("")
    return keys


def train_keys(data_dir: str | Path, *, language: str = "de") -> set[str]:
    """The normalised sides in ``language`` (``"de"`` or ``"en"``) of ``data_dir/train.tsv``.

    Raises:
        FileNotFoundError: no ``train.tsv``.
        ValueError: a malformed ``train.tsv``; another language.
    """
    _check_language(language)
    return {normalize(getattr(p, language)) for p in read_tsv(Path(data_dir) / "train.tsv", "de", "en")}


def drop_held_out(sentences: Sequence[str], keys: Iterable[str], in_train: Iterable[str] = frozenset(), *,
                  min_substring_words: int = 4) -> tuple[list[str], list[tuple[str, str]]]:
    """``sentences`` without those that could leak a held-out sentence into train or repeat a train pair.

    A sentence is dropped (compared by :func:`~aiayn.data.splits.normalize`) when it equals a held-out sentence of
    ``keys`` (``"held_out"``), is a side of train already (``in_train``: ``"in_train"``), or contains a
    held-out sentence of ``min_substring_words``+ words as a substring (``"held_out_substring"``, the rule of
    :func:`~aiayn.data.splits.make_splits`; found with :func:`~aiayn.data.splits.substring_hits`).

    Args:
        sentences: sentences of one language.
        keys: normalised held-out sentences of that language (:func:`held_out_keys`).
        in_train: normalised sides of train in that language (:func:`train_keys`).

    Returns:
        ``(kept in input order, [(sentence, reason), ...] in input order)``.
    """
    keys = set(keys)
    in_train = set(in_train)
    norm = [normalize(s) for s in sentences]
    reason: dict[int, str] = {}
    for i, k in enumerate(norm):
        if k in keys:
            reason[i] = "held_out"
        elif k in in_train:
            reason[i] = "in_train"
    needles = sorted({k for k in keys if len(k.split()) >= min_substring_words}, key=len)
    if needles:
        idx = [i for i, k in enumerate(norm) if i not in reason and len(k) > len(needles[0])]
        for i, _ in substring_hits([norm[i] for i in idx], idx, needles):
            reason.setdefault(i, "held_out_substring")
    kept = [s for i, s in enumerate(sentences) if i not in reason]
    return kept, [(sentences[i], reason[i]) for i in sorted(reason)]


def translator_for(translator: "Translator", direction: str) -> "Translator":
    """``translator`` translating ``direction`` (``"de-en"`` back-translates German, ``"en-de"`` English): itself
    when its direction is ``direction``, its view (:meth:`~aiayn.translator.Translator.for_direction`) for a model
    with both language tags.

    Raises:
        ValueError: the model translates another direction, or its meta names none (the message names it); a
            ``direction`` other than ``de-en`` and ``en-de``.
    """
    if direction not in BACKWARD_DIRECTION.values():
        raise ValueError(f"direction must be one of {', '.join(BACKWARD_DIRECTION.values())}, got {direction!r}")
    src, tgt = direction.split("-")
    own = translator.meta.get("direction")
    if own == direction:
        return translator
    tags = tuple(getattr(translator.cfg, "language_tags", ()) or ())
    if src in tags and tgt in tags:
        return translator.for_direction(direction)
    where = translator.path or "this model"
    a = "an" if LANGUAGE_NAMES[src][0] in "AEIOU" else "a"
    raise ValueError(f"back-translation of {LANGUAGE_NAMES[src]} text needs {a} {LANGUAGE_NAMES[src]}-to-"
                     f"{LANGUAGE_NAMES[tgt]} ({direction}) model; {where} translates "
                     f"{own if own else 'an unnamed direction (its meta names none)'}")


def backtranslate(translator: "Translator", sentences: Sequence[str], *, direction: str = "de-en", beam_size: int = 4,
                  batch_size: int = 64, log: Callable[[str], None] | None = None,
                  log_every: int = 20) -> list[str]:
    """Translations of ``sentences`` in ``direction`` (``"de-en"``: German sentences into English, ``"en-de"``:
    English into German), in input order, whitespace collapsed (an output may be empty when the model ends at once).
    The sentences are sorted by length (characters; ties in input order) and translated ``batch_size`` at a time
    with :meth:`~aiayn.translator.Translator.translate_batch` (beam search, ``beam_size``, the paper's length
    penalty 0.6 and maximum length, no attention maps) under ``torch.inference_mode``.

    Args:
        translator: a model of ``direction``, or a model with both language tags (:func:`translator_for`).
        log: called with a progress line every ``log_every`` batches and after the last one; None: silent.

    Raises:
        ValueError: the translator does not translate ``direction`` (:func:`translator_for`); ``batch_size`` or
            ``log_every`` below 1; bad beam settings or an empty sentence (from the translator).
    """
    import torch

    tr = translator_for(translator, direction)
    if batch_size < 1 or log_every < 1:
        raise ValueError(f"batch_size and log_every must be >= 1, got {batch_size} and {log_every}")
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    out: list[str] = [""] * len(sentences)
    t0 = time.perf_counter()
    n_batches = (len(order) + batch_size - 1) // batch_size
    with torch.inference_mode():
        for b in range(n_batches):
            idx = order[b * batch_size:(b + 1) * batch_size]
            results = tr.translate_batch([sentences[i] for i in idx], beam_size=beam_size, return_attention=False)
            for i, t in zip(idx, results):
                out[i] = collapse_whitespace(t.text)
            if log is not None and ((b + 1) % log_every == 0 or b + 1 == n_batches):
                done = min((b + 1) * batch_size, len(order))
                log(f"{done:,}/{len(order):,} sentences translated ({b + 1}/{n_batches} batches), "
                    f"{time.perf_counter() - t0:.0f} s")
    return out


def _count_rows(path: Path) -> tuple[int, bool]:
    """``(lines, ends with a newline)`` of a text file (a last line without a newline counts)."""
    data = path.read_bytes()
    n = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return n, (not data or data.endswith(b"\n"))


def write_backtranslated_folder(data_dir: str | Path, out_dir: str | Path, pairs: Sequence[tuple[str, str]], *,
                                kind: str = KIND, record: dict, force: bool = False) -> Path:
    """A copy of the prepared folder ``data_dir`` at ``out_dir`` with ``pairs`` (``(de, en)``: real German and
    synthetic English, or synthetic German and real English) added to train.

    ``out_dir`` gets every file of ``data_dir`` except the token cache ``cache/`` (training rebuilds it), then:
    the pairs appended to ``train.tsv`` (its header kept), ``kind`` once per pair appended to ``train_kinds.txt``,
    and ``datasheet.json`` with ``record`` (plus ``kind``, ``pairs_added``, ``train_rows_before`` and
    ``train_rows_after``) under ``"backtranslation"`` (an earlier record moves to its ``"previous"``), the kind
    counted in ``kinds.train_pairs`` with default weight 1 in ``kinds.default_weights`` (for ``--kind-weights
    default``) and the new sha256 of both files in ``files_sha256``; ``DATASHEET.md`` (if there) gains a section.
    Everything is written into a temporary folder beside ``out_dir`` that is renamed at the end, so an error
    leaves nothing behind (and an existing ``out_dir`` untouched).

    Raises:
        FileNotFoundError: ``data_dir`` lacks ``train.tsv`` or ``train_kinds.txt`` (folders of
            ``aiayn data debian`` have both).
        FileExistsError: ``out_dir`` exists and ``force`` is False.
        ValueError: ``out_dir`` is ``data_dir`` or inside it (or holds it); ``kind`` is not a simple name or is a
            kind of the folder already; ``train_kinds.txt`` does not have one line per ``train.tsv`` row; a pair
            with an empty side, a tab or a line break; a ``datasheet.json`` that is not a JSON object.
    """
    data_dir, out_dir = Path(data_dir).expanduser(), Path(out_dir).expanduser()
    train, kinds_file = data_dir / "train.tsv", data_dir / "train_kinds.txt"
    for f in (train, kinds_file):
        if not f.is_file():
            raise FileNotFoundError(f"{f} does not exist: back-translation needs a folder prepared by "
                                    "`aiayn data debian` (train.tsv with one kind per row in train_kinds.txt)")
    check_outside(data_dir, out_dir)
    if out_dir.exists() and not force:
        raise FileExistsError(f"{out_dir} exists (pass --force to replace it)")
    if not _KIND_NAME.fullmatch(kind) or kind in ("none", "default"):
        raise ValueError(f"kind must be a simple name (letters, digits, _ or -, not none/default), got {kind!r}")
    for i, (de, en) in enumerate(pairs):
        for side in (de, en):
            if not isinstance(side, str) or not side.strip() or any(c in side for c in "\t\n\r"):
                raise ValueError(f"pair {i} has an empty side, a tab or a line break: {(de, en)!r:.120}")
    kinds = kinds_file.read_text(encoding="utf-8").split()
    if kind in kinds:
        raise ValueError(f"{kinds_file} has pairs of kind {kind!r} already; choose another kind")
    rows, newline_end = _count_rows(train)
    if len(kinds) != rows - 1:
        raise ValueError(f"{kinds_file} has {len(kinds):,} kinds but {train} has {rows - 1:,} rows")
    sheet_path = data_dir / "datasheet.json"
    sheet: dict = {}
    if sheet_path.is_file():
        try:
            sheet = json.loads(sheet_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{sheet_path} is not valid JSON: {exc}") from None
        if not isinstance(sheet, dict):
            raise ValueError(f"{sheet_path} does not hold a JSON object")

    with derived_data_folder(data_dir, out_dir) as tmp:  # refuses an out_dir inside data_dir (or holding it)
        with open(tmp / "train.tsv", "a", encoding="utf-8", newline="\n") as fh:
            if not newline_end:
                fh.write("\n")
            fh.writelines(f"{de}\t{en}\n" for de, en in pairs)
        with open(tmp / "train_kinds.txt", "a", encoding="utf-8", newline="\n") as fh:
            fh.writelines(f"{kind}\n" for _ in pairs)
        full = {**record, "kind": kind, "pairs_added": len(pairs), "train_rows_before": rows - 1,
                "train_rows_after": rows - 1 + len(pairs)}
        if "backtranslation" in sheet:
            full["previous"] = sheet["backtranslation"]
        sheet["backtranslation"] = full
        if isinstance(sheet.get("kinds"), dict):
            sheet["kinds"].setdefault("train_pairs", {})[kind] = len(pairs)
            sheet["kinds"].setdefault("default_weights", {}).setdefault(kind, 1)
        digests = {f: sha256_file(tmp / f) for f in ("train.tsv", "train_kinds.txt")}
        if isinstance(sheet.get("files_sha256"), dict):
            sheet["files_sha256"].update(digests)
        (tmp / "datasheet.json").write_text(json.dumps(sheet, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        if (tmp / "DATASHEET.md").is_file():
            with open(tmp / "DATASHEET.md", "a", encoding="utf-8", newline="\n") as fh:
                fh.write(_datasheet_section(full, digests))
    return out_dir


def _source_text(source: dict | list, markdown: bool = False) -> str:
    """The source of the sentences in words: each package's name, version (and in ``markdown`` its licence, .deb and
    sha256), or the file's name (and sha256)."""
    code = (lambda x: f"`{x}`") if markdown else str
    out = []
    for src in (source if isinstance(source, list) else [source]):
        if "package" in src:
            out.append(f"Debian {code(src['package'])} {src['version']} ({src.get('licence', '?')}), "
                       f"{code(src['file'])} sha256 {code(src['sha256'])}" if markdown else
                       f"{src['package']} {src['version']}")
        else:
            out.append(code(src.get("file", "?")) + (f" sha256 {code(src.get('sha256', '?'))}" if markdown else ""))
    return " and ".join(out)


def _datasheet_section(record: dict, digests: dict[str, str]) -> str:
    """The section ``DATASHEET.md`` gains: what was added, from where, by which model, for which direction."""
    language = record.get("language", "de")
    other = "en" if language == "de" else "de"
    direction = record.get("direction", BACKWARD_DIRECTION[language])
    dropped = record.get("held_out_dropped", {})
    lines = ["", f"## Back-translation ({LANGUAGE_NAMES[language]})", "",
             f"{record['pairs_added']:,} pairs of kind `{record['kind']}` appended to `train.tsv` (rows "
             f"{record['train_rows_before']:,} -> {record['train_rows_after']:,}): real {LANGUAGE_NAMES[language]} "
             f"sentences from {_source_text(record.get('source', {}), markdown=True)}, translated into "
             f"{LANGUAGE_NAMES[other]} by `{record.get('checkpoint', '?')}` ({direction}, model.safetensors sha256 "
             f"`{record.get('model_sha256', '?')}`, beam {record.get('beam_size', '?')}), for training "
             f"{record.get('training_direction', direction[3:] + '-' + direction[:2])}; Sennrich, Haddow and Birch "
             "2016." + (f" Each synthetic source begins with the tag `{record['tag']}` (tagged back-translation, "
                        "Caswell et al. 2019)." if record.get("tag") else ""),
             "",
             f"- sentences read: {record.get('sentences_read', 0):,}; dropped as held out or in train: "
             f"{dropped.get('total', 0):,} ({', '.join(f'{k} {v:,}' for k, v in dropped.items() if k != 'total')}); "
             f"kept: {record.get('kept', 0):,}; translated: {record.get('translated', 0):,}",
             "- the counts above this section describe the folder before back-translation; new sha256: "
             + ", ".join(f"`{k}` `{v}`" for k, v in digests.items()), ""]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="aiayn backtranslate",
        description="Back-translation (Sennrich et al. 2016): translate monolingual sentences with a checkpoint of "
                    "the reverse direction (German with de-en, English with en-de) and add the pairs (real German, "
                    "synthetic English: for training en-de; or synthetic German, real English: for training de-en) "
                    "to a copy of a prepared data folder as a kind of their own (train_kinds.txt), for aiayn train "
                    "--kind-weights.")
    ap.add_argument("--data", required=True, help="a folder prepared by `aiayn data debian` (read only)")
    ap.add_argument("--out", required=True, help="the new folder (the data folder's files plus the added pairs)")
    ap.add_argument("--language", choices=sorted(LANGUAGE_NAMES), default="de",
                    help="the language of the monolingual text: de (default; German translated into English, pairs "
                         "for en-de) or en (English translated into German, pairs for de-en)")
    ap.add_argument("--checkpoint", required=True,
                    help="a checkpoint of the reverse direction: de-en for --language de, en-de for --language en "
                         "(or one translating both ways)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--mono", default=None, metavar="FILE",
                     help="sentences in --language, one a line (UTF-8); the same sentence filter as for the packages")
    src.add_argument("--package", action="append", default=None, metavar="NAME",
                     help="a Debian package of fortunes in --language to read; may be given more than once "
                          "(default: fortunes-de for de; fortunes and fortunes-min for en)")
    ap.add_argument("--deb-dir", default=str(DEFAULT_DEB_DIR), help="cache folder of .deb files")
    ap.add_argument("--no-download", action="store_true", help="use only a .deb already in --deb-dir")
    ap.add_argument("--beam", type=int, default=4, help="beam size (paper: 4)")
    ap.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    ap.add_argument("--limit", type=int, default=None, help="translate only the first N kept sentences")
    ap.add_argument("--kind", default=None,
                    help=f"the kind of the added pairs in train_kinds.txt (default {KINDS['de']} for de, "
                         f"{KINDS['en']} for en)")
    ap.add_argument("--tag", default=None, metavar="TEXT",
                    help="tagged back-translation (Caswell et al. 2019): begin every synthetic source with TEXT and a "
                         "space, e.g. '<bt>', so the model can tell machine-made sources from real ones (real inputs "
                         "never carry it)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out folder")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    return ap


def _read_sentences(args) -> tuple[list[str], dict | list, dict]:
    """``(cleaned sentences in --language, source record, extraction counts)`` of ``--mono`` or the ``--package``
    packages (the record of each package; a list of them when there are several).

    Raises:
        FileNotFoundError, ValueError, RuntimeError: a missing, non-UTF-8 or empty file, a missing .deb, a failed
            download or read.
    """
    from . import monolingual as mono

    name = LANGUAGE_NAMES[args.language]
    if args.mono is not None:
        path = Path(args.mono).expanduser()
        lines = read_lines(path, "monolingual file")
        if not any(ln.strip() for ln in lines):
            raise ValueError(f"{path} is empty (one {name} sentence a line expected)")
        counts: dict = {}
        sentences = mono.clean_sentences((ln for ln in lines if ln.strip()), counts)
        if not sentences:
            raise ValueError(f"no line of {path} is a sentence the filter keeps (4-25 words, capitalised, ending "
                             "with . ! or ?, plain text)")
        return sentences, {"file": path.name, "sha256": sha256_file(path)}, counts
    packages = list(dict.fromkeys(args.package or mono.FORTUNES_PACKAGES[args.language]))
    files: dict[str, str] = {}
    records = []
    for package in packages:
        pkg_files, record = mono.obtain_fortunes(package, args.deb_dir, download=not args.no_download,
                                                 language=args.language)
        records.append(record)
        # several packages: their files told apart by the package's name (fortunes-min/fortunes)
        files.update(pkg_files if len(packages) == 1 else {f"{package}/{k}": v for k, v in pkg_files.items()})
    sentences, counts = mono.fortune_sentences(files, language=args.language)
    totals: dict = {}
    for c in counts["files"].values():
        for k, v in c.items():
            totals[k] = totals.get(k, 0) + v
    summary = {"files_read": len(counts["files"]), "files_skipped": counts["skipped_files"], **totals,
               "duplicates": counts["duplicates"], "kept": counts["kept"]}
    if not sentences:
        raise ValueError(f"{', '.join(r['file'] for r in records)}: no {name} sentence kept")
    return sentences, (records[0] if len(records) == 1 else records), summary


def _refusal(args) -> str | None:
    """Why the command's arguments cannot be used (checked before anything is loaded), or None."""
    if args.beam < 1 or args.batch_size < 1 or (args.limit is not None and args.limit < 1) or \
            (args.threads is not None and args.threads < 1):
        return "--beam, --batch-size, --limit and --threads must be >= 1"
    if not _KIND_NAME.fullmatch(args.kind) or args.kind in ("none", "default"):
        return f"--kind must be a simple name (letters, digits, _ or -), got {args.kind!r}"
    if args.tag is not None:
        try:
            check_tag(args.tag)
        except ValueError as exc:
            return str(exc)
    data, out = Path(args.data).expanduser(), Path(args.out).expanduser()
    if not data.is_dir():
        return f"no data folder at {data}"
    for name in ("train.tsv", "train_kinds.txt"):
        if not (data / name).is_file():
            return f"{data} has no {name} (prepare it with `aiayn data debian`)"
    if out.exists() and not args.force:
        return f"{out} exists (pass --force to replace it)"
    src, dst = data.resolve(), out.resolve()
    if src == dst or src in dst.parents or dst in src.parents:
        return f"the output folder {out} must lie outside the data folder {data} (and not hold it)"
    try:
        kinds = (data / "train_kinds.txt").read_text(encoding="utf-8").split()
    except (OSError, ValueError) as exc:
        return f"cannot read {data / 'train_kinds.txt'}: {exc}"
    if args.kind in kinds:
        return f"{data / 'train_kinds.txt'} has pairs of kind {args.kind!r} already; choose another --kind"
    return None


def cli_main(argv: list[str]) -> int:
    """``aiayn backtranslate``: returns 0, or 2 with one line on stderr for bad input (a missing or unprepared data
    folder, an existing output folder, a checkpoint that does not translate the text's language into the other one
    (German: de-en, English: en-de), an empty or non-UTF-8 sentence file, a package that cannot be had or has no
    fortunes in the language)."""
    args = _parser().parse_args(argv)
    if args.kind is None:
        args.kind = KINDS[args.language]

    def fail(msg: str) -> int:
        print(f"aiayn backtranslate: {msg}", file=sys.stderr)
        return 2

    refusal = _refusal(args)
    if refusal:
        return fail(refusal)
    data, out = Path(args.data).expanduser(), Path(args.out).expanduser()
    language = args.language
    other = "en" if language == "de" else "de"
    direction = BACKWARD_DIRECTION[language]        # the model's: text of `language` in, the other language out
    training_direction = f"{other}-{language}"       # the pairs' (synthetic source, real target)
    t0 = time.perf_counter()
    try:
        import torch

        from ..translator import Translator

        if args.threads is not None:
            torch.set_num_threads(args.threads)
        checkpoint = Path(args.checkpoint).expanduser()
        tr = translator_for(Translator.load(checkpoint), direction)
        model_sha256 = weights_sha256(checkpoint)
    except (FileNotFoundError, ValueError, RuntimeError, OSError) as exc:
        return fail(str(exc))
    try:
        sentences, source, extraction = _read_sentences(args)
        keys, in_train = held_out_keys(data, language=language), train_keys(data, language=language)
    except (FileNotFoundError, ValueError, RuntimeError, OSError) as exc:
        return fail(str(exc))
    kept, dropped = drop_held_out(sentences, keys, in_train)
    reasons = [r for _, r in dropped]
    chosen = kept if args.limit is None else kept[:args.limit]
    print(f"{len(sentences):,} {LANGUAGE_NAMES[language]} sentences read, {len(dropped):,} dropped (held out or in "
          f"train), {len(kept):,} kept; translating {len(chosen):,} with {args.checkpoint} ({direction}, beam "
          f"{args.beam})", file=sys.stderr)
    try:
        translations = backtranslate(tr, chosen, direction=direction, beam_size=args.beam,
                                     batch_size=args.batch_size,
                                     log=lambda line: print(line, file=sys.stderr, flush=True))
    except ValueError as exc:
        return fail(str(exc))
    # rows are (de, en): real German and synthetic English, or synthetic German and real English
    pairs = [(real, synthetic) if language == "de" else (synthetic, real)
             for real, synthetic in zip(chosen, translations) if synthetic]
    if args.tag is not None:
        pairs = tag_synthetic(pairs, args.tag, language=language)
    a_model = "an en-de" if direction == "en-de" else "a de-en"
    record = {
        "method": f"back-translation (Sennrich, Haddow and Birch 2016): real {LANGUAGE_NAMES[language]} sentences as "
                  f"targets, their {LANGUAGE_NAMES[other]} translations by {a_model} model as sources",
        "language": language, "training_direction": training_direction,
        "source": source, "extraction": extraction,
        "checkpoint": args.checkpoint, "model_sha256": model_sha256, "direction": direction,
        "beam_size": args.beam, "length_penalty": 0.6,
        "sentences_read": len(sentences),
        "held_out_dropped": {"total": len(dropped), **{r: reasons.count(r) for r in
                                                       ("held_out", "held_out_substring", "in_train")}},
        "kept": len(kept), "limit": args.limit, "translated": len(chosen),
        "empty_translations_dropped": len(chosen) - len(pairs),
        "tag": args.tag,
    }
    try:
        write_backtranslated_folder(data, out, pairs, kind=args.kind, record=record, force=args.force)
    except (FileNotFoundError, FileExistsError, ValueError, OSError) as exc:
        return fail(str(exc))
    secs = time.perf_counter() - t0
    print(f"backtranslated {_source_text(source)} ({LANGUAGE_NAMES[language]} into {LANGUAGE_NAMES[other]} by "
          f"{direction}, pairs for {training_direction}): {len(sentences):,} sentences read, {len(dropped):,} "
          "dropped as held out or in train "
          f"(held out {reasons.count('held_out'):,}, containing a held-out sentence "
          f"{reasons.count('held_out_substring'):,}, in train {reasons.count('in_train'):,}), {len(kept):,} kept, "
          f"{len(chosen):,} translated, {len(pairs):,} pairs added as kind {args.kind!r} in {secs:.0f} s -> {out}")
    print("train with: " + TRAINING_COMMAND.format(out=out, kind=args.kind, direction=training_direction))
    return 0
