"""Parallel data: the Ding German-English corpus, generic TSV/Moses corpora, leak-free splits, batching.

The corpus we can reach is the Ding dictionary (Frank Richter, TU Chemnitz; GPL-2.0-or-later),
packaged by Debian as ``trans-de-en`` (see ``shared/notes/data.md``). One line is one dictionary entry::

    German side :: English side

Each side is a list of sub-entries separated by `` | ``; the n-th German sub-entry translates the n-th
English one. Within a sub-entry ``;`` separates synonyms. Annotations are stripped: ``{f}`` ``{pl}``
``{vt}`` (grammar), ``[techn.]`` ``[Br.]`` (labels), ``<...>`` (inflections / search helpers),
``(...)`` (glosses, which usually exist on one side only) and ``/ABBR/`` (abbreviations).

Pipeline (``aiayn data ding``): :func:`obtain_ding` -> :func:`parse_ding` -> :func:`make_splits`
(dedup, held-out full sentences, no leakage) -> TSV files -> joint SentencePiece model
(:func:`aiayn.tokenizer.train_sentencepiece`, Section 5.1) -> datasheet.

Training batches: :func:`token_batches` groups examples of similar length into batches of at most
``max_tokens`` padded tokens (Section 5.1: "Sentence pairs were batched together by approximate
sequence length"); :func:`shard_batches` gives each DDP rank its share.
"""
from __future__ import annotations

import argparse
import bisect
import csv
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
import warnings
from collections import Counter
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

__all__ = [
    "Pair", "DING_SHA256", "DING_DEBIAN_PACKAGE", "DING_VERSION", "DING_LICENSE",
    "sha256_file", "obtain_ding", "clean_text", "first_synonym", "parse_ding_line", "parse_ding", "ParseReport",
    "is_sentence", "normalize", "read_tsv", "write_tsv", "read_moses", "make_splits", "SplitReport",
    "build_dictionary", "load_lexicon", "dictionary_baseline", "token_batches", "shard_batches",
    "prepare_ding", "prepare_pairs", "cli_main",
]

#: sha256 of ``/usr/share/trans/de-en`` in Debian's trans-de-en 1.9-6 (= upstream de-en.txt 2023-01-30).
DING_SHA256 = "34052c6021d09eadfee7a893a789204265954df70fe9c36d38fa00058d79d326"
DING_DEBIAN_PACKAGE = "trans-de-en"
DING_VERSION = "1.9-6"
DING_LICENSE = "GPL-2.0-or-later"
DING_ATTRIBUTION = (
    "Ding German-English dictionary, Copyright (c) 1995-2023 Frank Richter, TU Chemnitz "
    "(https://dict.tu-chemnitz.de/), GPL-2.0-or-later"
)
#: Path of the corpus inside the Debian package.
_DING_PATH_IN_DEB = Path("usr/share/trans/de-en")
DEFAULT_DING_DIR = Path("~/.cache/aiayn/data/ding")


class Pair(NamedTuple):
    """One translation pair. For Ding ``de`` is German and ``en`` English; for generic corpora read by
    :func:`read_tsv` / :func:`read_moses`, ``de`` is the source column/file and ``en`` the target."""

    de: str
    en: str


# =====================================================================================================
# obtaining the corpus
# =====================================================================================================
def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes. Raises FileNotFoundError (naming the file) if it is missing."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verify(path: Path, expected: str, verify: bool) -> str:
    actual = sha256_file(path)
    if actual != expected:
        msg = f"sha256 mismatch for {path}: expected {expected}, got {actual}"
        if verify:
            raise ValueError(msg + " (pass verify=False / --no-verify to accept a newer upstream file)")
        warnings.warn(msg + "; continuing because verify=False", stacklevel=3)
    return actual


def obtain_ding(
    dest_dir: str | os.PathLike,
    from_file: str | os.PathLike | None = None,
    verify: bool = True,
    expected_sha256: str = DING_SHA256,
) -> Path:
    """Put the Ding corpus at ``dest_dir/de-en.txt`` and return that path.

    Source: Debian package ``trans-de-en`` 1.9-6 (``/usr/share/trans/de-en``), identical to upstream
    ``de-en.txt`` from https://ftp.tu-chemnitz.de/pub/Local/urz/ding/.

    * ``from_file`` given: that file (an upstream ``de-en.txt`` or the Debian file) is verified and copied.
    * otherwise, if ``dest_dir/de-en.txt`` exists and its sha256 matches (or ``verify`` is False), it is
      reused; else ``apt-get download trans-de-en`` runs in a temporary folder (no root needed) and
      ``dpkg-deb -x`` extracts it.

    Raises:
        FileNotFoundError: ``from_file`` does not exist, or the package lacks the corpus file.
        ValueError: the sha256 differs from ``expected_sha256`` (message names the file, the expected and
            the actual hash) and ``verify`` is True. With ``verify=False`` a warning is issued instead.
        RuntimeError: ``apt-get``/``dpkg-deb`` are missing or fail (their stderr is included).
    """
    dest_dir = Path(dest_dir).expanduser()
    dest = dest_dir / "de-en.txt"
    if from_file is not None:
        src = Path(from_file).expanduser()
        if not src.is_file():
            raise FileNotFoundError(f"Ding corpus file not found: {src}")
        _verify(src, expected_sha256, verify)
        if dest.exists() and dest.resolve() == src.resolve():
            return dest
        _atomic_copy(src, dest)
        return dest
    if dest.is_file():
        if not verify or sha256_file(dest) == expected_sha256:
            return dest
    with tempfile.TemporaryDirectory(prefix="aiayn-ding-") as tmp:
        tmp = Path(tmp)
        _run_tool(["apt-get", "download", DING_DEBIAN_PACKAGE], cwd=tmp)
        debs = sorted(tmp.glob(f"{DING_DEBIAN_PACKAGE}_*.deb"))
        if not debs:
            raise RuntimeError(f"apt-get download {DING_DEBIAN_PACKAGE} produced no .deb in {tmp}")
        _run_tool(["dpkg-deb", "-x", str(debs[0]), str(tmp / "x")], cwd=tmp)
        src = tmp / "x" / _DING_PATH_IN_DEB
        if not src.is_file():
            raise FileNotFoundError(f"{debs[0].name} does not contain {_DING_PATH_IN_DEB}")
        _verify(src, expected_sha256, verify)
        _atomic_copy(src, dest)
    return dest


def _run_tool(cmd: list[str], cwd: Path) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise RuntimeError(f"{cmd[0]} is not available ({exc}); use --from FILE with a downloaded de-en.txt") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}: {proc.stderr.strip()[-2000:]}")


def _atomic_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=dest.name + ".", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# =====================================================================================================
# parsing Ding
# =====================================================================================================
_BRACES = re.compile(r"\{[^{}]*\}")          # {f} {pl} {vt} {prp; +Dat.} {dealt; dealt}
_SQUARE = re.compile(r"\[[^\[\]]*\]")        # [techn.] [Br.] [ugs.]
_ANGLE = re.compile(r"<[^<>]*>")             # <purer> <> (inflection / search helpers)
_PAREN = re.compile(r"\([^()]*\)")           # (in reinster Form) glosses; applied until none is left
# /ABBR/: a slash-delimited token that starts after whitespace (or the start) and ends before whitespace,
# the end, or , ; - so "and/or", "jdn./etw." and "km/h" are untouched.
_ABBR = re.compile(r"(?<!\S)/[^\s/](?:[^/]*[^\s/])?/(?=\s|$|[,;])")
_MARK = "\x00"
_SPACE_BEFORE_PUNCT = re.compile(r"\s*\x00[\s\x00]*(?=[.,!?;:])")
_WS = re.compile(r"\s+")
# Closing marks that may follow the final . ! ?  NB: the German closing quote “ (as in „Wie spät ist
# es?“) is deliberately NOT in this set: the prepared data in use was split with exactly this rule, and
# adding it changes the held-out candidates and so the whole split for a given seed.
_SENT_END = re.compile(r"[.!?][\"'»«”’)]*$")


def clean_text(text: str) -> str:
    """Strip Ding annotations from one synonym and collapse whitespace.

    Removed: ``{...}`` grammar tags, ``[...]`` labels, ``<...>`` inflection/search helpers, ``(...)``
    glosses (innermost first, so nesting works) and ``/ABBR/`` abbreviations (a slash-delimited token
    standing on its own; slashes inside words such as "and/or" or "jdn./etw." stay). A space left in
    front of punctuation by a removal is dropped ("hands (to do)." -> "hands.").

    Returns the cleaned text (possibly empty).
    """
    s = text
    s = _BRACES.sub(_MARK, s)
    s = _SQUARE.sub(_MARK, s)
    while True:  # innermost first: "<name--dropping <namedrop>>", "(a (b) c)"
        t = _PAREN.sub(_MARK, _ANGLE.sub(_MARK, s))
        if t == s:
            break
        s = t
    s = _ABBR.sub(_MARK, s)
    s = _SPACE_BEFORE_PUNCT.sub("", s)
    s = s.replace(_MARK, " ")
    return _WS.sub(" ", s).strip()


def _split_top_level(text: str, sep: str = ";") -> list[str]:
    """Split on ``sep`` outside (), {}, [] (Ding puts ';' inside "{prp; +Dat.}" and "(Druck; Vakuum)")."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth = max(0, depth - 1)
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def first_synonym(sub_entry: str) -> str:
    """The first ``;``-separated synonym of a sub-entry, cleaned with :func:`clean_text`.

    Choice: we keep only the first synonym of each side (the dictionary's main form; the others would
    repeat the same source with different targets). ``;`` inside brackets is not a separator.

    Rule for semicolons inside sentences: Ding uses ``;`` between synonym sentences ("Es ist vorbei.;
    Es ist aus."), but real sentences also contain a semicolon ("To copy from one book is plagiarism;
    to copy from ten is research."). A ``;`` is kept as punctuation (not split) when the whole cleaned
    sub-entry looks like a sentence (starts with an upper-case letter and ends with ``.``/``!``/``?``),
    the text before it has 3+ words and does not end with ``.``/``!``/``?``, and the text after it
    starts with a lower-case letter. Everything else is a synonym boundary.
    """
    # abbreviations first: "/MwSt.; MWSt./" holds a ';' that is not a synonym boundary
    parts = _split_top_level(_ABBR.sub(_MARK, sub_entry))
    if len(parts) == 1:
        return clean_text(parts[0])
    cleaned = [clean_text(p) for p in parts]
    whole = " ".join(c for c in cleaned if c)
    first = cleaned[0]
    if whole and whole[0].isupper() and _SENT_END.search(whole):
        i = 0
        while i + 1 < len(cleaned):
            after = cleaned[i + 1]
            if len(first.split()) >= 3 and not _SENT_END.search(cleaned[i]) and after[:1].islower():
                first = f"{first}; {after}"
                i += 1
            else:
                break
    return first


@dataclasses.dataclass
class ParseReport:
    """Counts from :func:`parse_ding` (all are numbers of lines, sub-entries or pairs as named)."""

    source: str = ""
    lines_read: int = 0
    comment_lines: int = 0
    blank_lines: int = 0
    entries: int = 0                 # non-comment, non-blank lines
    sub_entries: int = 0             # aligned sub-entry pairs seen (before dropping empties)
    pairs_kept: int = 0
    misaligned_lines: int = 0        # German and English sides have different numbers of ' | ' parts
    malformed_lines: int = 0         # no ' :: ' separator, or more than one
    empty_after_cleaning: int = 0    # a side became empty once annotations were removed
    synonyms_dropped: int = 0        # ';' synonyms beyond the first (both sides)
    misaligned_examples: list = dataclasses.field(default_factory=list)   # [(line_no, reason, text)]
    malformed_examples: list = dataclasses.field(default_factory=list)
    empty_examples: list = dataclasses.field(default_factory=list)
    max_examples: int = 20

    def to_dict(self) -> dict:
        """Plain-dict form (JSON-serialisable)."""
        return dataclasses.asdict(self)


def parse_ding_line(line: str, report: ParseReport | None = None, line_no: int = 0) -> list[Pair]:
    """Parse one Ding line into aligned pairs (first synonym each side, annotations stripped).

    ``German :: English``; each side is split on `` | `` and the n-th German sub-entry is paired with
    the n-th English one. Comment (``#``) and blank lines give ``[]``. A line whose sides have different
    sub-entry counts, or without exactly one `` :: ``, gives ``[]`` and is counted in ``report`` (with
    the reason). Pairs with an empty side after cleaning are dropped (counted in ``report``).

    Example: ``Leidenschaft {f} | aus Leidenschaft :: passion | of passion`` ->
    ``[Pair("Leidenschaft", "passion"), Pair("aus Leidenschaft", "of passion")]``.
    """
    line = line.rstrip("\r\n")
    if not line.strip() or line.lstrip().startswith("#"):
        return []
    sides = line.split(" :: ")
    if len(sides) != 2:
        if report is not None:
            report.malformed_lines += 1
            if len(report.malformed_examples) < report.max_examples:
                report.malformed_examples.append((line_no, f"{len(sides) - 1} ' :: ' separators, expected 1", line[:300]))
        return []
    for side in sides:
        bare = _ABBR.sub(" ", side)  # "/:-)/" is an abbreviation, not a bracket
        if bare.count("(") != bare.count(")"):
            if report is not None:
                report.malformed_lines += 1
                if len(report.malformed_examples) < report.max_examples:
                    report.malformed_examples.append((line_no, "unbalanced parentheses on one side", line[:300]))
            return []
    de_subs, en_subs = sides[0].split(" | "), sides[1].split(" | ")
    if len(de_subs) != len(en_subs):
        if report is not None:
            report.misaligned_lines += 1
            if len(report.misaligned_examples) < report.max_examples:
                report.misaligned_examples.append(
                    (line_no, f"{len(de_subs)} German vs {len(en_subs)} English sub-entries", line[:300]))
        return []
    pairs = []
    for de_raw, en_raw in zip(de_subs, en_subs):
        if report is not None:
            report.sub_entries += 1
            report.synonyms_dropped += (len(_split_top_level(_ABBR.sub(_MARK, de_raw))) - 1
                                        + len(_split_top_level(_ABBR.sub(_MARK, en_raw))) - 1)
        de, en = first_synonym(de_raw), first_synonym(en_raw)
        if not de or not en:
            if report is not None:
                report.empty_after_cleaning += 1
                if len(report.empty_examples) < report.max_examples:
                    report.empty_examples.append((line_no, f"{de_raw.strip()} :: {en_raw.strip()}"[:300]))
            continue
        pairs.append(Pair(de, en))
    if report is not None:
        report.pairs_kept += len(pairs)
    return pairs


def _read_lines(path: Path, what: str) -> list[str]:
    """Lines of a UTF-8 text file without their newlines (no empty last line for a final newline).

    Raises:
        FileNotFoundError: ``path`` is missing (``what`` and the path named). ValueError: not UTF-8.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text: {exc}") from None
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def parse_ding(source: str | os.PathLike | Iterable[str], progress: bool = False) -> tuple[list[Pair], ParseReport]:
    """Parse a Ding file (path) or an iterable of its lines.

    Returns ``(pairs, report)``: the pairs in file order (duplicates kept; :func:`make_splits`
    deduplicates) and a :class:`ParseReport`.

    Raises:
        FileNotFoundError: the path does not exist (named in the message).
        ValueError: the file is not valid UTF-8 (file and byte offset named), or contains no entry.
    """
    if isinstance(source, (str, os.PathLike)):
        path = Path(source).expanduser()
        lines: Iterable[str] = _read_lines(path, "Ding corpus")
        name = str(path)
    else:
        lines, name = source, "<lines>"
    report = ParseReport(source=name)
    pairs: list[Pair] = []
    it = lines
    if progress:
        from tqdm import tqdm
        it = tqdm(lines, desc="parse Ding", unit=" lines", mininterval=1.0)
    for no, line in enumerate(it, 1):
        report.lines_read += 1
        stripped = line.strip()
        if not stripped:
            report.blank_lines += 1
            continue
        if stripped.startswith("#"):
            report.comment_lines += 1
            continue
        report.entries += 1
        pairs.extend(parse_ding_line(line, report, no))
    if report.entries == 0:
        raise ValueError(f"{name}: no dictionary entries found ({report.lines_read} lines read)")
    return pairs, report


# =====================================================================================================
# sentences, normalisation
# =====================================================================================================
#: Dictionary abbreviations that end a phrase with "." without making it a sentence ("to rely on sb.").
_ABBREV_END = re.compile(
    r"(?:^|\s)(?:sth|sb|etw|jdn|jdm|jds|jd|usw|etc|o\.ä|u\.ä|z\.B|e\.g|i\.e|Abk|vs|ca)\.$", re.IGNORECASE)


def is_sentence(text: str) -> bool:
    """True if ``text`` is a full sentence: ends with ``.``, ``!`` or ``?`` (optionally followed by
    ``"`` ``'`` ``»`` ``«`` ``”`` ``’`` or ``)``; German-style „...“ quoted speech does not count, so
    such dialogue lines stay in train), has 4+ whitespace-separated words, and starts with an upper-case letter (or a digit or quote).

    The last two conditions are our additions to data.md's rule ("ends in . ! ? with 4+ words"): they
    keep dictionary phrases that end in an abbreviation such as "to rely on sb." or "sich auf jdn.
    verlassen etw." out of the held-out sentence sets. Phrases ending in "sth."/"sb."/"etw."/... are
    likewise not sentences.
    """
    text = text.strip()
    if len(text.split()) < 4 or not _SENT_END.search(text):
        return False
    first = next((c for c in text if c.isalnum()), "")
    if not first or (first.isalpha() and not first.isupper()):
        return False
    return not _ABBREV_END.search(text)


def normalize(text: str) -> str:
    """Comparison key for dedup/leakage: NFKC, case-folded, whitespace collapsed and stripped."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


# =====================================================================================================
# generic corpora
# =====================================================================================================
def read_tsv(
    path: str | os.PathLike,
    src_col: str | int = "de",
    tgt_col: str | int = "en",
    header: bool = True,
) -> list[Pair]:
    """Read a tab-separated parallel corpus with pandas (no quoting: ``"`` is text; "NA"/"null" stay text).

    Args:
        path: UTF-8 TSV file.
        src_col, tgt_col: column names (``header=True``) or 0-based positions (``header=False``; a name
            that is a digit string is accepted as a position too).
        header: whether the first line holds column names.

    Returns:
        Pairs ``(src, tgt)`` in file order, cells stripped of surrounding whitespace (empty cells kept;
        :func:`prepare_pairs` drops and counts them).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a column is missing, a row has the wrong number of fields, or the file is not UTF-8
            (the message names the file).
    """
    import pandas as pd

    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"TSV file not found: {path}")
    try:
        df = pd.read_csv(
            path, sep="\t", quoting=csv.QUOTE_NONE, keep_default_na=False, na_filter=False, dtype=str,
            header=0 if header else None, encoding="utf-8", skip_blank_lines=False, engine="c",
        )
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: empty TSV file") from None
    except pd.errors.ParserError as exc:
        raise ValueError(f"{path}: malformed TSV ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text: {exc}") from None
    cols = []
    for col in (src_col, tgt_col):
        if not header:
            try:
                col = int(col)
            except (TypeError, ValueError):
                raise ValueError(f"{path}: without a header, columns are positions; got {col!r}") from None
        if col not in df.columns:
            raise ValueError(f"{path}: no column {col!r}; columns are {list(df.columns)}")
        cols.append(col)
    src = df[cols[0]].astype(str).str.strip().tolist()
    tgt = df[cols[1]].astype(str).str.strip().tolist()
    return [Pair(s, t) for s, t in zip(src, tgt)]


def write_tsv(pairs: Sequence[Pair], path: str | os.PathLike, columns: tuple[str, str] = ("de", "en")) -> Path:
    """Write pairs as a UTF-8 TSV with a header (pandas, no quoting), atomically.

    Raises:
        ValueError: a cell contains a tab or a line break (it could not be read back unchanged).
    """
    import pandas as pd

    path = Path(path)
    for i, (a, b) in enumerate(pairs):
        for cell in (a, b):
            if "\t" in cell or "\n" in cell or "\r" in cell:
                raise ValueError(f"{path}: pair {i} has a tab or line break in {cell[:60]!r}")
    df = pd.DataFrame(list(pairs), columns=list(columns))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        df.to_csv(tmp, sep="\t", index=False, quoting=csv.QUOTE_NONE, encoding="utf-8", lineterminator="\n")
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_moses(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> list[Pair]:
    """Read a line-aligned (Moses-style) parallel corpus: line i of ``src_path`` translates line i of
    ``tgt_path``. Lines are stripped of surrounding whitespace; empty lines are kept (dropped and counted
    by :func:`prepare_pairs`).

    Raises:
        FileNotFoundError: either file is missing (named).
        ValueError: the files have different line counts (both files and counts named), or one is not UTF-8.
    """
    texts = []
    for p in (src_path, tgt_path):
        texts.append([ln.strip() for ln in _read_lines(Path(p).expanduser(), "corpus file")])
    if len(texts[0]) != len(texts[1]):
        raise ValueError(
            f"line counts differ: {src_path} has {len(texts[0])} lines, {tgt_path} has {len(texts[1])}")
    return [Pair(s, t) for s, t in zip(*texts)]


# =====================================================================================================
# splitting without leakage
# =====================================================================================================
@dataclasses.dataclass
class SplitReport:
    """Counts from :func:`make_splits`."""

    input_pairs: int = 0
    duplicates_removed: int = 0          # exact duplicates and case/whitespace variants of a kept pair
    heldout_pool: str = "sentences"      # "sentences" or "all"
    heldout_candidates: int = 0
    heldout_skipped_shared_side: int = 0  # candidates not taken because a side is already held out
    train_removed_exact: int = 0          # train pairs sharing a (normalised) side with a held-out pair
    train_removed_substring: int = 0      # train pairs containing a held-out sentence as a substring
    removed_examples: list = dataclasses.field(default_factory=list)
    sizes: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        """Plain-dict form (JSON-serialisable)."""
        return dataclasses.asdict(self)


def make_splits(
    pairs: Sequence[Pair],
    n_valid: int = 500,
    n_test: int = 1000,
    seed: int = 1234,
    heldout_pool: str = "sentences",
    return_report: bool = False,
    min_substring_words: int = 4,
):
    """Deduplicate and split into ``{"train", "valid", "test"}`` without leakage.

    1. Dedup: pairs equal after :func:`normalize` on both sides are kept once (first occurrence).
    2. Held-out candidates: pairs with :func:`is_sentence` true on both sides and no "/" in either
       (Ding writes alternatives as "kontrolliert/beamtshandelt" or "vollen / halben Stunde", which
       would put two readings into one reference; such pairs stay in train) (``heldout_pool=
       "sentences"``), all pairs (``"all"``), or sentences when there are at least ``n_valid+n_test``
       of them and all pairs otherwise (``"auto"``). Candidates are shuffled with ``random.Random(seed)``
       and taken in order: first ``n_test`` for test, then ``n_valid`` for valid, skipping a candidate
       if its normalised German or English side is already held out. So every held-out sentence (either
       side) occurs once, and valid and test are disjoint.
    3. Train = every other pair, except (a) pairs whose normalised German or English side equals any
       held-out side (German or English), and (b) pairs whose German or English side contains a held-out
       sentence of ``min_substring_words``+ words as a substring (a longer entry quoting a test
       sentence). Both removals are counted in the report.

    Substring search: train texts that could contain a held-out string (at least as long as the
    shortest held-out string, with 4+ words) are joined into one newline-separated string, and each
    held-out string is located with ``str.find`` (linear C scans; under a few seconds for 390k pairs).

    Args:
        pairs: the corpus.
        n_valid, n_test: held-out sizes (>= 0).
        seed: shuffling seed; equal inputs and seed give equal splits.
        heldout_pool: "sentences", "all" or "auto" (see 2.).
        return_report: if True return ``(splits, SplitReport)``.

    Raises:
        ValueError: negative sizes, unknown pool, or not enough candidates for ``n_valid + n_test``.
    """
    if n_valid < 0 or n_test < 0:
        raise ValueError(f"n_valid and n_test must be >= 0, got {n_valid}, {n_test}")
    if heldout_pool not in ("sentences", "all", "auto"):
        raise ValueError(f"heldout_pool must be 'sentences', 'all' or 'auto', got {heldout_pool!r}")
    rep = SplitReport(input_pairs=len(pairs))
    seen: set[tuple[str, str]] = set()
    uniq: list[Pair] = []
    keys: list[tuple[str, str]] = []
    for p in pairs:
        k = (normalize(p.de), normalize(p.en))
        if k in seen:
            continue
        seen.add(k)
        uniq.append(p)
        keys.append(k)
    rep.duplicates_removed = len(pairs) - len(uniq)

    sentence_idx = [i for i, p in enumerate(uniq)
                    if is_sentence(p.de) and is_sentence(p.en) and "/" not in p.de and "/" not in p.en]
    pool = heldout_pool
    if pool == "auto":
        pool = "sentences" if len(sentence_idx) >= n_valid + n_test else "all"
    rep.heldout_pool = pool
    cand = sentence_idx if pool == "sentences" else list(range(len(uniq)))
    rep.heldout_candidates = len(cand)
    cand = list(cand)
    random.Random(seed).shuffle(cand)

    held_keys: set[str] = set()
    test_idx: list[int] = []
    valid_idx: list[int] = []
    for i in cand:
        if len(test_idx) >= n_test and len(valid_idx) >= n_valid:
            break
        kd, ke = keys[i]
        if kd in held_keys or ke in held_keys:
            rep.heldout_skipped_shared_side += 1
            continue
        (test_idx if len(test_idx) < n_test else valid_idx).append(i)
        held_keys.add(kd)
        held_keys.add(ke)
    if len(test_idx) < n_test or len(valid_idx) < n_valid:
        raise ValueError(
            f"not enough held-out candidates: wanted {n_test} test + {n_valid} valid from {len(cand)} "
            f"{'sentence pairs' if pool == 'sentences' else 'pairs'} (got {len(test_idx)} + {len(valid_idx)})")

    held = set(test_idx) | set(valid_idx)
    removed: dict[int, str] = {}
    rest = [i for i in range(len(uniq)) if i not in held]
    for i in rest:
        kd, ke = keys[i]
        if kd in held_keys or ke in held_keys:
            removed[i] = "exact"
            if len(rep.removed_examples) < 10:
                rep.removed_examples.append({"reason": "same side as a held-out pair",
                                             "train": f"{uniq[i].de} :: {uniq[i].en}"})
    # substring leakage: a train side containing a held-out string
    subs = sorted({k for k in held_keys if len(k.split()) >= min_substring_words}, key=len)
    if subs:
        min_len = len(subs[0])
        texts, owners = [], []
        for i in rest:
            if i in removed:
                continue
            for k in keys[i]:
                if len(k) > min_len and len(k.split()) >= min_substring_words:
                    texts.append(k)
                    owners.append(i)
        if texts:
            offsets, pos = [], 0
            for t in texts:
                offsets.append(pos)
                pos += len(t) + 1
            big = "\n".join(texts)
            for h in subs:
                start = big.find(h)
                while start != -1:
                    j = bisect.bisect_right(offsets, start) - 1
                    i = owners[j]
                    if i not in removed:
                        removed[i] = "substring"
                        if len(rep.removed_examples) < 20:
                            rep.removed_examples.append({"reason": f"contains held-out {h!r}",
                                                         "train": f"{uniq[i].de} :: {uniq[i].en}"})
                    start = big.find(h, start + 1)
    rep.train_removed_exact = sum(1 for v in removed.values() if v == "exact")
    rep.train_removed_substring = sum(1 for v in removed.values() if v == "substring")
    splits = {
        "train": [uniq[i] for i in rest if i not in removed],
        "valid": [uniq[i] for i in valid_idx],
        "test": [uniq[i] for i in test_idx],
    }
    rep.sizes = {k: len(v) for k, v in splits.items()}
    return (splits, rep) if return_report else splits


# =====================================================================================================
# word-by-word dictionary baseline
# =====================================================================================================
def build_dictionary(train: Sequence[Pair], max_words: int = 3) -> list[Pair]:
    """Entries for the dictionary baseline, from TRAIN pairs only: pairs where one side is a single word
    and the other has at most ``max_words`` words, neither side a sentence. Order is kept; exact
    duplicates removed."""
    out, seen = [], set()
    for p in train:
        nd, ne = len(p.de.split()), len(p.en.split())
        if min(nd, ne) == 1 and max(nd, ne) <= max_words and p not in seen:
            if _SENT_END.search(p.de) and nd > 1:
                continue
            seen.add(p)
            out.append(p)
    return out


_WORD = re.compile(r"\w+(?:['’\-]\w+)*")


def load_lexicon(path: str | os.PathLike, direction: str = "de-en") -> dict[str, str]:
    """Read ``dictionary.tsv`` (columns de, en) into a one-word lexicon ``{source word (lower-case):
    target text}`` for :func:`dictionary_baseline`.

    For each source word the target with the fewest words wins (ties: first in the file). For
    ``direction="en-de"``, English infinitives "to X" are also indexed under "x" (at lower priority than
    an entry "x" itself).

    Raises:
        FileNotFoundError: missing file. ValueError: bad direction or missing columns (file named).
    """
    if direction not in ("de-en", "en-de"):
        raise ValueError(f"direction must be 'de-en' or 'en-de', got {direction!r}")
    pairs = read_tsv(path, "de", "en")
    src_i, tgt_i = (0, 1) if direction == "de-en" else (1, 0)
    best: dict[str, tuple[int, int, str]] = {}
    for order, p in enumerate(pairs):
        src, tgt = p[src_i], p[tgt_i]
        if not src or not tgt:
            continue
        words = src.split()
        candidates = []
        if len(words) == 1:
            candidates.append((words[0], 0))
        elif direction == "en-de" and len(words) == 2 and words[0].lower() == "to":
            candidates.append((words[1], 1))
        for w, penalty in candidates:
            key = w.lower()
            rank = (penalty, len(tgt.split()), order)
            if key not in best or rank < best[key][:3]:
                best[key] = (*rank, tgt)
    return {k: v[3] for k, v in best.items()}


def dictionary_baseline(text: str, lexicon: dict[str, str], src_lang: str = "de") -> str:
    """Translate word by word: each word (``\\w+`` with inner ' or -) is looked up lower-cased in
    ``lexicon`` and replaced; unknown words are copied; punctuation and spacing are kept. If the
    source word starts with a capital at the start of the text, the translation's first letter is
    capitalised. This is the floor a trained model must beat (``aiayn evaluate``).

    Raises:
        ValueError: ``src_lang`` is not "de" or "en".
    """
    if src_lang not in ("de", "en"):
        raise ValueError(f"src_lang must be 'de' or 'en', got {src_lang!r}")

    def repl(m: re.Match) -> str:
        word = m.group(0)
        tgt = lexicon.get(word.lower())
        if tgt is None:
            return word
        if m.start() == 0 and word[:1].isupper() and tgt[:1].islower():
            tgt = tgt[:1].upper() + tgt[1:]
        return tgt

    return _WORD.sub(repl, text)


# =====================================================================================================
# token-count batching
# =====================================================================================================
def token_batches(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    max_tokens: int,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_long: bool = False,
) -> list[list[int]]:
    """Group example indices into batches of similar length (Section 5.1: "Sentence pairs were batched
    together by approximate sequence length").

    The cost of example i is ``max(len(src_ids[i]), len(tgt_ids[i]) + 1)`` (the decoder input/output
    carry one extra BOS/EOS token); a batch's padded size is ``n_examples * max cost in the batch`` and
    never exceeds ``max_tokens``. Examples are sorted by cost (ties broken randomly for ``shuffle``),
    cut greedily into batches, and the batch order is shuffled. Deterministic for ``(seed, epoch)``;
    different epochs give different batches.

    Returns:
        A list of batches, each a list of example indices; every index appears exactly once (except
        examples dropped by ``drop_long``).

    Raises:
        ValueError: different numbers of sources and targets, ``max_tokens`` < 1, or an example alone
            exceeds ``max_tokens`` (unless ``drop_long``, which leaves such examples out).
    """
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    cost = [max(len(s), len(t) + 1) for s, t in zip(src_ids, tgt_ids)]
    rng = random.Random(int(seed) * 1_000_003 + int(epoch))
    order = list(range(len(cost)))
    if shuffle:
        rng.shuffle(order)   # random tie-break: the stable sort keeps this order within equal costs
    order.sort(key=cost.__getitem__)
    batches: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for i in order:
        c = cost[i]
        if c > max_tokens:
            if drop_long:
                continue
            raise ValueError(f"example {i} alone needs {c} tokens > max_tokens={max_tokens} (use drop_long)")
        m = max(cur_max, c)
        if cur and m * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, m = [], c
        cur.append(i)
        cur_max = m
    if cur:
        batches.append(cur)
    if shuffle:
        rng.shuffle(batches)
    return batches


def shard_batches(batches: Sequence[list[int]], rank: int, world_size: int) -> list[list[int]]:
    """This DDP rank's share of an epoch's batches: batches ``rank, rank+world_size, ...`` after dropping
    the tail so that every rank gets ``len(batches) // world_size`` batches (equal step counts keep the
    all-reduce in lockstep). Shares of different ranks are disjoint.

    Raises:
        ValueError: ``world_size`` < 1 or ``rank`` not in ``[0, world_size)``.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    n = (len(batches) // world_size) * world_size
    return [list(b) for b in batches[rank:n:world_size]]


# =====================================================================================================
# preparing a data folder
# =====================================================================================================
_HIST_BINS = [(1, 1), (2, 2), (3, 3), (4, 5), (6, 10), (11, 20), (21, 40), (41, None)]


def _length_histogram(texts: Iterable[str]) -> dict[str, int]:
    counts = Counter()
    for t in texts:
        n = len(t.split())
        for lo, hi in _HIST_BINS:
            if n >= lo and (hi is None or n <= hi):
                counts[_bin_name(lo, hi)] += 1
                break
    return {_bin_name(lo, hi): counts.get(_bin_name(lo, hi), 0) for lo, hi in _HIST_BINS}


def _bin_name(lo, hi) -> str:
    return f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}")


def prepare_pairs(
    pairs: Sequence[Pair],
    out_dir: str | os.PathLike,
    vocab_size: int = 8000,
    n_valid: int = 500,
    n_test: int = 1000,
    seed: int = 1234,
    heldout_pool: str = "auto",
    source_info: dict | None = None,
    parse_report: ParseReport | None = None,
    columns: tuple[str, str] = ("de", "en"),
    progress: bool = True,
    hard_vocab_limit: bool = True,
    started_at: float | None = None,
) -> dict:
    """Split ``pairs`` (:func:`make_splits`), write ``train/valid/test.tsv``, ``dictionary.tsv`` (from
    train only), a joint SentencePiece model ``spm.model`` trained on both sides of train only
    (Section 5.1), and ``DATASHEET.md`` + ``datasheet.json``. Pairs with an empty side are dropped
    first (counted). Returns the datasheet dict (also written as JSON).

    Raises:
        ValueError: from :func:`make_splits` (e.g. too few pairs) or SentencePiece training.
    """
    from ..tokenizer import Tokenizer, train_sentencepiece

    t0 = time.time() if started_at is None else started_at
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    nonempty = [Pair(a, b) for a, b in pairs if a.strip() and b.strip()]
    empty_dropped = len(pairs) - len(nonempty)
    cleaned = [Pair(_WS.sub(" ", a).strip(), _WS.sub(" ", b).strip()) for a, b in nonempty]
    splits, srep = make_splits(cleaned, n_valid=n_valid, n_test=n_test, seed=seed,
                               heldout_pool=heldout_pool, return_report=True)
    t_split = time.time() - t0  # includes obtaining/parsing when started_at is given
    for name in ("train", "valid", "test"):
        write_tsv(splits[name], out / f"{name}.tsv", columns)
    dictionary = build_dictionary(splits["train"])
    write_tsv(dictionary, out / "dictionary.tsv", columns)

    t1 = time.time()
    texts = [p.de for p in splits["train"]] + [p.en for p in splits["train"]]
    if progress:
        print(f"training SentencePiece ({vocab_size} pieces) on {len(texts):,} train sides ...", file=sys.stderr)
    train_sentencepiece(texts, out / "spm.model", vocab_size=vocab_size, hard_vocab_limit=hard_vocab_limit)
    t_spm = time.time() - t1
    tok = Tokenizer.load(out / "spm.model")
    token_stats = {}
    for name in ("train", "valid", "test"):
        sp = splits[name]
        if not sp:
            continue
        de_ids = tok.encode_batch([p.de for p in sp])
        en_ids = tok.encode_batch([p.en for p in sp])
        unk = sum(i.count(tok.unk_id) for i in de_ids + en_ids)
        token_stats[name] = {
            "mean_tokens_src": round(sum(map(len, de_ids)) / len(sp), 2),
            "mean_tokens_tgt": round(sum(map(len, en_ids)) / len(sp), 2),
            "max_tokens_src": max(map(len, de_ids)),
            "max_tokens_tgt": max(map(len, en_ids)),
            "unk_tokens": unk,
        }
    sheet = {
        "source": source_info or {},
        "columns": list(columns),
        "created_unix": int(time.time()),
        "parameters": {"vocab_size": vocab_size, "n_valid": n_valid, "n_test": n_test, "seed": seed,
                       "heldout_pool": srep.heldout_pool},
        "parse": parse_report.to_dict() if parse_report is not None else None,
        "empty_pairs_dropped": empty_dropped,
        "split": srep.to_dict(),
        "counts": {},
        "dictionary_entries": len(dictionary),
        "tokenizer": {"file": "spm.model", "type": "bpe", "vocab_size": tok.vocab_size,
                      "special_ids": {"pad": tok.pad_id, "unk": tok.unk_id, "bos": tok.bos_id, "eos": tok.eos_id},
                      "trained_on": "train split, both sides (joint vocabulary, Section 5.1)",
                      "stats": token_stats},
        "timing_s": {"until_split_done": round(t_split, 1), "sentencepiece": round(t_spm, 1)},
    }
    for name in ("train", "valid", "test"):
        sp = splits[name]
        n_sent = sum(1 for p in sp if is_sentence(p.de) and is_sentence(p.en))
        sheet["counts"][name] = {
            "pairs": len(sp), "sentences": n_sent, "phrases": len(sp) - n_sent,
            f"words_hist_{columns[0]}": _length_histogram(p.de for p in sp),
            f"words_hist_{columns[1]}": _length_histogram(p.en for p in sp),
        }
    sheet["files_sha256"] = {name: sha256_file(out / name) for name in
                             ("train.tsv", "valid.tsv", "test.tsv", "dictionary.tsv", "spm.model")}
    sheet["timing_s"]["total"] = round(time.time() - t0, 1)
    _atomic_write_text(out / "datasheet.json", json.dumps(sheet, ensure_ascii=False, indent=2) + "\n")
    _atomic_write_text(out / "DATASHEET.md", _datasheet_markdown(sheet, splits))
    return sheet


def _datasheet_markdown(sheet: dict, splits: dict[str, list[Pair]]) -> str:
    src = sheet["source"]
    cols = sheet["columns"]
    L = []
    L.append(f"# Datasheet: {src.get('name', 'parallel corpus')}\n")
    L.append("## Source\n")
    for k in ("name", "description", "origin", "debian_package", "version", "file", "sha256", "license", "attribution"):
        if src.get(k):
            L.append(f"- **{k}**: {src[k]}")
    if src.get("license"):
        L.append("\nThe corpus and everything derived from it (these files, models trained on them) stay under "
                 f"the corpus license ({src['license']}); credit the authors as above.")
    L.append("\n## Splits\n")
    L.append("| split | pairs | full sentences (both sides) | phrases |")
    L.append("|---|---:|---:|---:|")
    for name, c in sheet["counts"].items():
        L.append(f"| {name} | {c['pairs']:,} | {c['sentences']:,} | {c['phrases']:,} |")
    sp = sheet["split"]
    L.append(f"\nValid and test are drawn from {'full sentences only (both sides: ends in . ! ?, 4+ words, starts upper-case, does not end in an abbreviation such as sth./etw., and has no Ding /-alternatives)' if sp['heldout_pool'] == 'sentences' else 'all pairs'}, "
             f"with seed {sheet['parameters']['seed']}; each held-out German or English sentence occurs once "
             "in valid+test and nowhere in train (compared case- and whitespace-normalised).")
    L.append("\n## Length in words (histogram)\n")
    bins = list(next(iter(sheet["counts"].values()))[f"words_hist_{cols[0]}"].keys())
    L.append("| split | side | " + " | ".join(bins) + " |")
    L.append("|---|---|" + "---:|" * len(bins))
    for name, c in sheet["counts"].items():
        for side in cols:
            h = c[f"words_hist_{side}"]
            L.append(f"| {name} | {side} | " + " | ".join(f"{h[b]:,}" for b in bins) + " |")
    L.append("\n## What was dropped, and why\n")
    pr = sheet.get("parse")
    if pr:
        L.append(f"- lines read: {pr['lines_read']:,} ({pr['comment_lines']:,} comment, {pr['blank_lines']:,} blank, "
                 f"{pr['entries']:,} entries)")
        L.append(f"- aligned sub-entries: {pr['sub_entries']:,}; pairs kept after cleaning: {pr['pairs_kept']:,}")
        L.append(f"- synonyms after the first (`;`) not used: {pr['synonyms_dropped']:,}")
        L.append(f"- lines skipped because German and English sub-entry counts differ: {pr['misaligned_lines']:,}")
        for ex in pr["misaligned_examples"][:5]:
            L.append(f"  - line {ex[0]} ({ex[1]}): `{ex[2][:150]}`")
        L.append(f"- malformed lines skipped (not exactly one ` :: `, or unbalanced parentheses): {pr['malformed_lines']:,}")
        for ex in pr["malformed_examples"][:5]:
            L.append(f"  - line {ex[0]} ({ex[1]}): `{ex[2][:150]}`")
        L.append(f"- sub-entries with a side empty after removing annotations: {pr['empty_after_cleaning']:,}")
        for ex in pr["empty_examples"][:5]:
            L.append(f"  - line {ex[0]}: `{ex[1][:150]}`")
    L.append(f"- pairs with an empty side: {sheet['empty_pairs_dropped']:,}")
    L.append(f"- duplicates (same pair after case/whitespace normalisation): {sp['duplicates_removed']:,}")
    L.append(f"- held-out candidates skipped because a side was already held out: {sp['heldout_skipped_shared_side']:,}")
    L.append(f"- train pairs removed because a side equals a held-out sentence: {sp['train_removed_exact']:,}")
    L.append(f"- train pairs removed because a side contains a held-out sentence: {sp['train_removed_substring']:,}")
    for ex in sp["removed_examples"][:8]:
        L.append(f"  - `{ex['train'][:150]}` ({ex['reason'][:120]})")
    L.append("\n## Files\n")
    L.append(f"- `train.tsv`, `valid.tsv`, `test.tsv`: UTF-8, tab-separated, header `{cols[0]}\\t{cols[1]}`, no quoting")
    L.append(f"- `dictionary.tsv`: {sheet['dictionary_entries']:,} one-word / short-phrase entries from train only "
             "(word-by-word dictionary baseline)")
    tk = sheet["tokenizer"]
    L.append(f"- `spm.model`: SentencePiece BPE, {tk['vocab_size']:,} pieces, joint German+English vocabulary "
             f"(Section 5.1) trained on the train split only; special ids {tk['special_ids']}; byte fallback on")
    L.append("\nsha256 of the files (to tell which data a model was trained on):\n")
    for name, digest in sheet.get("files_sha256", {}).items():
        L.append(f"- `{name}`: `{digest}`")
    L.append("\n## Tokens per side (SentencePiece)\n")
    L.append("| split | mean src | mean tgt | max src | max tgt | unk |")
    L.append("|---|---:|---:|---:|---:|---:|")
    for name, s in tk["stats"].items():
        L.append(f"| {name} | {s['mean_tokens_src']} | {s['mean_tokens_tgt']} | {s['max_tokens_src']} | "
                 f"{s['max_tokens_tgt']} | {s['unk_tokens']} |")
    L.append("\n## Examples\n")
    rng = random.Random(0)
    for name in ("train", "test"):
        sp_ = splits[name]
        if sp_:
            L.append(f"{name}:")
            for p in rng.sample(sp_, min(5, len(sp_))):
                L.append(f"- `{p[0]}` → `{p[1]}`")
            L.append("")
    L.append(f"Prepared in {sheet['timing_s']['total']} s.")
    return "\n".join(L) + "\n"


def prepare_ding(
    out_dir: str | os.PathLike = DEFAULT_DING_DIR,
    from_file: str | os.PathLike | None = None,
    vocab_size: int = 8000,
    n_valid: int = 500,
    n_test: int = 1000,
    seed: int = 1234,
    verify: bool = True,
    progress: bool = True,
) -> dict:
    """Obtain (:func:`obtain_ding`), parse (:func:`parse_ding`), split and write the Ding corpus to
    ``out_dir`` (train/valid/test/dictionary TSV, ``spm.model``, ``DATASHEET.md``, ``datasheet.json``).
    Valid and test are full sentences only. Returns the datasheet dict.

    Raises:
        FileNotFoundError / ValueError / RuntimeError: see :func:`obtain_ding`, :func:`parse_ding`,
        :func:`make_splits`.
    """
    out = Path(out_dir).expanduser()
    t0 = time.time()
    corpus = obtain_ding(out, from_file=from_file, verify=verify)
    sha = sha256_file(corpus)
    pairs, report = parse_ding(corpus, progress=progress)
    info = {
        "name": "Ding German-English dictionary (trans-de-en)",
        "description": "dictionary entries and example sentences; one sub-entry pair per row, first synonym each side",
        "origin": "https://dict.tu-chemnitz.de/ (upstream de-en.txt), Debian package trans-de-en",
        "debian_package": DING_DEBIAN_PACKAGE,
        "version": DING_VERSION if sha == DING_SHA256 else "unknown (sha256 differs from 1.9-6)",
        "file": str(corpus),
        "sha256": sha,
        "license": DING_LICENSE,
        "attribution": DING_ATTRIBUTION,
    }
    sheet = prepare_pairs(pairs, out, vocab_size=vocab_size, n_valid=n_valid, n_test=n_test, seed=seed,
                          heldout_pool="sentences", source_info=info, parse_report=report, progress=progress,
                          started_at=t0)
    return sheet


# =====================================================================================================
# command line
# =====================================================================================================
def _summary(sheet: dict, out: Path) -> str:
    c = sheet["counts"]
    lines = [f"wrote {out}"]
    for name in ("train", "valid", "test"):
        lines.append(f"  {name:<5} {c[name]['pairs']:>8,} pairs ({c[name]['sentences']:,} full sentences)")
    sp = sheet["split"]
    lines.append(f"  removed: {sp['duplicates_removed']:,} duplicates, {sp['train_removed_exact']:,} + "
                 f"{sp['train_removed_substring']:,} train pairs overlapping held-out sentences")
    lines.append(f"  spm.model: {sheet['tokenizer']['vocab_size']:,} pieces; datasheet: {out / 'DATASHEET.md'}")
    lines.append(f"  took {sheet['timing_s']['total']} s")
    return "\n".join(lines)


def cli_main(argv: list[str]) -> int:
    """``aiayn data {ding,tsv,moses} ...``: prepare a data folder; returns the exit code (0 ok, 1 error)."""
    ap = argparse.ArgumentParser(prog="aiayn data", description="Obtain and prepare parallel data.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, default_out=None):
        p.add_argument("--out", default=default_out, required=default_out is None, help="output folder")
        p.add_argument("--vocab-size", type=int, default=8000, help="SentencePiece pieces (default 8000)")
        p.add_argument("--n-valid", type=int, default=500)
        p.add_argument("--n-test", type=int, default=1000)
        p.add_argument("--seed", type=int, default=1234)

    p = sub.add_parser("ding", help="the Ding German-English dictionary (Debian trans-de-en)")
    p.add_argument("--from", dest="from_file", default=None, help="use this de-en.txt instead of apt-get download")
    p.add_argument("--no-verify", action="store_true", help="accept a file whose sha256 differs (newer upstream)")
    common(p, str(DEFAULT_DING_DIR))
    p = sub.add_parser("tsv", help="a tab-separated parallel corpus")
    p.add_argument("file")
    p.add_argument("--src-col", default="de")
    p.add_argument("--tgt-col", default="en")
    p.add_argument("--no-header", action="store_true", help="no header line; columns are 0-based positions")
    common(p)
    p = sub.add_parser("moses", help="two line-aligned text files")
    p.add_argument("src")
    p.add_argument("tgt")
    common(p)
    args = ap.parse_args(argv)
    out = Path(args.out).expanduser()
    try:
        if args.cmd == "ding":
            sheet = prepare_ding(out, from_file=args.from_file, vocab_size=args.vocab_size, n_valid=args.n_valid,
                                 n_test=args.n_test, seed=args.seed, verify=not args.no_verify)
        else:
            if args.cmd == "tsv":
                src_col, tgt_col = args.src_col, args.tgt_col
                if args.no_header and src_col == "de" and tgt_col == "en":
                    src_col, tgt_col = 0, 1
                pairs = read_tsv(args.file, src_col, tgt_col, header=not args.no_header)
                files = [args.file]
            else:
                pairs = read_moses(args.src, args.tgt)
                files = [args.src, args.tgt]
            info = {"name": ", ".join(str(Path(f).name) for f in files),
                    "file": ", ".join(str(Path(f).expanduser().resolve()) for f in files),
                    "sha256": ", ".join(sha256_file(Path(f).expanduser()) for f in files),
                    "license": "(not recorded: fill in)"}
            sheet = prepare_pairs(pairs, out, vocab_size=args.vocab_size, n_valid=args.n_valid,
                                  n_test=args.n_test, seed=args.seed, heldout_pool="auto", source_info=info)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"aiayn data {args.cmd}: error: {exc}", file=sys.stderr)
        return 1
    print(_summary(sheet, out))
    return 0
