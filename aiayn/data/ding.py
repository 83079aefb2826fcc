"""The Ding German-English dictionary: obtaining it and parsing it into sentence pairs.

The corpus we can reach is the Ding dictionary (Frank Richter, TU Chemnitz; GPL-2.0-or-later), packaged by
Debian as ``trans-de-en`` (see ``shared/notes/data.md``); :func:`obtain_ding` fetches it with ``apt-get
download`` (or copies a given ``de-en.txt``) and checks its sha256. One line is one dictionary entry::

    German side :: English side

Each side is a list of sub-entries separated by `` | ``; the n-th German sub-entry translates the n-th
English one. Within a sub-entry ``;`` separates synonyms. Annotations are stripped (:func:`clean_text`):
``{f}`` ``{pl}`` ``{vt}`` (grammar), ``[techn.]`` ``[Br.]`` (labels), ``<...>`` (inflections / search
helpers), ``(...)`` (glosses, which usually exist on one side only) and ``/ABBR/`` (abbreviations).
:func:`parse_ding` turns the file into :class:`~aiayn.data.corpora.Pair` s and a :class:`ParseReport` of
what was dropped and why.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Iterable

from tqdm import tqdm

from ..files import atomic_copy, sha256_file
from .corpora import Pair, collapse_whitespace, read_lines
from .splits import SENTENCE_END

__all__ = [
    "DING_SHA256", "DING_DEBIAN_PACKAGE", "DING_VERSION", "DING_LICENSE", "DING_ATTRIBUTION", "DEFAULT_DING_DIR",
    "obtain_ding", "clean_text", "first_synonym", "ParseReport", "parse_ding_line", "parse_ding",
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
#: Where ``aiayn data ding`` writes the corpus and the prepared folder by default.
DEFAULT_DING_DIR = Path("~/.cache/aiayn/data/ding")


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
        atomic_copy(src, dest)
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
        atomic_copy(src, dest)
    return dest


def _run_tool(cmd: list[str], cwd: Path) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise RuntimeError(f"{cmd[0]} is not available ({exc}); use --from FILE with a downloaded de-en.txt") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}: {proc.stderr.strip()[-2000:]}")


_BRACES = re.compile(r"\{[^{}]*\}")          # {f} {pl} {vt} {prp; +Dat.} {dealt; dealt}
_SQUARE = re.compile(r"\[[^\[\]]*\]")        # [techn.] [Br.] [ugs.]
_ANGLE = re.compile(r"<[^<>]*>")             # <purer> <> (inflection / search helpers)
_PAREN = re.compile(r"\([^()]*\)")           # (in reinster Form) glosses; applied until none is left
# /ABBR/: a slash-delimited token that starts after whitespace (or the start) and ends before whitespace,
# the end, or , ; - so "and/or", "jdn./etw." and "km/h" are untouched.
_ABBR = re.compile(r"(?<!\S)/[^\s/](?:[^/]*[^\s/])?/(?=\s|$|[,;])")
_MARK = "\x00"
_SPACE_BEFORE_PUNCT = re.compile(r"\s*\x00[\s\x00]*(?=[.,!?;:])")


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
    return collapse_whitespace(s)


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
    if whole and whole[0].isupper() and SENTENCE_END.search(whole):
        i = 0
        while i + 1 < len(cleaned):
            after = cleaned[i + 1]
            if len(first.split()) >= 3 and not SENTENCE_END.search(cleaned[i]) and after[:1].islower():
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
        lines: Iterable[str] = read_lines(path, "Ding corpus")
        name = str(path)
    else:
        lines, name = source, "<lines>"
    report = ParseReport(source=name)
    pairs: list[Pair] = []
    it = lines
    if progress:
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
