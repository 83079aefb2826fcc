"""Generic parallel corpora on disk: the :class:`Pair` record, the one UTF-8 line reader, tab-separated files
(:func:`read_tsv`, :func:`write_tsv`, pandas without quoting) and line-aligned Moses-style file pairs
(:func:`read_moses`). These are the input formats of ``aiayn data tsv|moses`` and the format of the prepared
splits (``train/valid/test/dictionary.tsv``); nothing here is specific to the Ding dictionary.
"""
from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import NamedTuple, Sequence

import pandas as pd

from ..files import atomic_path

__all__ = ["Pair", "collapse_whitespace", "read_lines", "read_tsv", "write_tsv", "read_moses"]

_WS = re.compile(r"\s+")


class Pair(NamedTuple):
    """One translation pair. For Ding ``de`` is German and ``en`` English; for generic corpora read by
    :func:`read_tsv` / :func:`read_moses`, ``de`` is the source column/file and ``en`` the target."""

    de: str
    en: str


def collapse_whitespace(text: str) -> str:
    """``text`` with every run of whitespace (``\\s+``, Unicode) replaced by one space, and stripped."""
    return _WS.sub(" ", text).strip()


def read_lines(path: str | os.PathLike, what: str = "file") -> list[str]:
    """Lines of a UTF-8 text file without their newlines (no empty last line for a final newline).

    Args:
        path: the file.
        what: what the file is, for the error message ("Ding corpus", "corpus file").

    Raises:
        FileNotFoundError: ``path`` is missing (``what`` and the path named).
        ValueError: the file is not UTF-8 (file and byte offset named).
    """
    path = Path(path)
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
        :func:`aiayn.data.prepare.prepare_pairs` drops and counts them).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a column is missing, a row has the wrong number of fields, or the file is not UTF-8
            (the message names the file).
    """
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
    """Write pairs as a UTF-8 TSV with a header (pandas, no quoting), atomically (:func:`aiayn.files.atomic_path`).

    Returns:
        ``path`` as a ``Path``.

    Raises:
        ValueError: a cell contains a tab or a line break (it could not be read back unchanged).
    """
    path = Path(path)
    for i, (a, b) in enumerate(pairs):
        for cell in (a, b):
            if "\t" in cell or "\n" in cell or "\r" in cell:
                raise ValueError(f"{path}: pair {i} has a tab or line break in {cell[:60]!r}")
    df = pd.DataFrame(list(pairs), columns=list(columns))
    with atomic_path(path) as tmp:
        df.to_csv(tmp, sep="\t", index=False, quoting=csv.QUOTE_NONE, encoding="utf-8", lineterminator="\n")
    return path


def read_moses(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> list[Pair]:
    """Read a line-aligned (Moses-style) parallel corpus: line i of ``src_path`` translates line i of
    ``tgt_path``. Lines are stripped of surrounding whitespace; empty lines are kept (dropped and counted
    by :func:`aiayn.data.prepare.prepare_pairs`).

    Raises:
        FileNotFoundError: either file is missing (named).
        ValueError: the files have different line counts (both files and counts named), or one is not UTF-8.
    """
    texts = []
    for p in (src_path, tgt_path):
        texts.append([ln.strip() for ln in read_lines(Path(p).expanduser(), "corpus file")])
    if len(texts[0]) != len(texts[1]):
        raise ValueError(
            f"line counts differ: {src_path} has {len(texts[0])} lines, {tgt_path} has {len(texts[1])}")
    return [Pair(s, t) for s, t in zip(*texts)]
