"""SentencePiece pieces as the app shows them: special pieces, words, unique axis labels.

The job of this module is labelling, not attention: which pieces are special (``<s>``, ``</s>``, ``<pad>``,
``<unk>``), how pieces group into words (SentencePiece's ``▁`` word-boundary marker), the surface text of a
run of pieces (byte pieces decoded), piece-level attention merged into word-level attention (Clark et al.
2019: sum over key pieces, mean over query pieces), and the unique ``"i:piece"`` labels a plot needs
because pieces repeat. NumPy only; nothing imports torch or Streamlit.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Sequence

import numpy as np

#: pieces that are not words: begin/end of sentence, padding, unknown.
SPECIAL_PIECES = frozenset({"<s>", "</s>", "<pad>", "<unk>"})
BOS_PIECES = frozenset({"<s>"})
EOS_PIECES = frozenset({"</s>"})
WORD_START = "▁"  # SentencePiece's word-boundary marker (U+2581)
_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def is_special(piece: str) -> bool:
    """True for the pieces of :data:`SPECIAL_PIECES` (``<s>``, ``</s>``, ``<pad>``, ``<unk>``)."""
    return piece in SPECIAL_PIECES


def is_punctuation(piece: str) -> bool:
    """True for a piece made only of punctuation or symbols (Unicode categories P* and S*) once the ``▁``
    word-boundary marker is removed: ``"."``, ``"▁,"``, ``"?!"``, ``"%"``; False for ``"▁"`` alone, words
    and special pieces."""
    text = piece.replace(WORD_START, "")
    return bool(text) and not is_special(piece) and all(unicodedata.category(c)[0] in "PS" for c in text)


def word_groups(pieces: Sequence[str]) -> list[list[int]]:
    """Group piece indices into words.

    Rules, in order:

    1. Special pieces (``<s>``, ``</s>``...) are words of their own.
    2. Punctuation-only pieces (:func:`is_punctuation`: ``"."``, ``"▁,"``, ``"?"``) are words of their
       own, so ``"car."`` (``▁car`` ``.``) is two words, ``car`` and ``.``; except word-internal
       punctuation: an attached piece (no ``▁``) between two attached word pieces stays inside the word
       (``▁don`` ``'`` ``t`` is one word, ``don't``; so is ``▁e`` ``-`` ``mail``).
    3. A piece starting with ``▁`` opens a new word, and so does the first piece after a special or a
       punctuation word; other pieces continue the current word (subwords, byte pieces).

    >>> word_groups(["▁The", "▁cat", "s", ".", "</s>"])
    [[0], [1, 2], [3], [4]]
    """
    groups: list[list[int]] = []
    closed = True  # the last group is a special or punctuation word: the next piece opens a new one

    def attached_word(j: int) -> bool:
        return (0 <= j < len(pieces) and not is_special(pieces[j]) and not is_punctuation(pieces[j])
                and not pieces[j].startswith(WORD_START))

    for i, p in enumerate(pieces):
        if is_special(p):
            groups.append([i])
            closed = True
        elif is_punctuation(p):
            if not p.startswith(WORD_START) and not closed and attached_word(i + 1):  # word-internal
                groups[-1].append(i)
            else:
                groups.append([i])
                closed = True
        elif p.startswith(WORD_START) or closed or not groups:
            groups.append([i])
            closed = False
        else:
            groups[-1].append(i)
    return groups


def join_pieces(pieces: Sequence[str]) -> str:
    """Surface text of a run of pieces: ``▁`` becomes a space, UTF-8 byte pieces ``<0xC3>`` are decoded."""
    out: list[str] = []
    buf = bytearray()
    for p in pieces:
        m = _BYTE.match(p)
        if m:
            buf.append(int(m.group(1), 16))
            continue
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
        out.append(p.replace(WORD_START, " "))
    if buf:
        out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out).strip() or "".join(pieces)


def words_text(pieces: Sequence[str]) -> str:
    """The pieces joined word by word (:func:`word_groups`, each word by :func:`join_pieces`), words separated
    by a space, so specials and punctuation stand apart: ``["fen", ".", "</s>"]`` gives ``"fen . </s>"``."""
    return " ".join(join_pieces([pieces[i] for i in g]) for g in word_groups(pieces))


def merge_words(
    weights: np.ndarray,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    drop_special: bool = False,
) -> tuple[np.ndarray, list[str], list[str]]:
    """Merge piece-level attention into word-level attention.

    Rules (as in Clark et al. 2019): attention **to** a word is the **sum** over its pieces (keys), so
    rows still sum to 1; attention **from** a word is the **mean** over its pieces (queries).

    Args:
        weights: ``(..., Q, K)`` float attention weights (any leading dims, e.g. ``(L, H, Q, K)``).
        query_pieces: ``Q`` pieces labelling the rows.
        key_pieces: ``K`` pieces labelling the columns.
        drop_special: leave out rows and columns of special pieces (``<s>``, ``</s>``); rows are NOT
            renormalised, so a row then sums to 1 minus the weight the special tokens took.

    Returns:
        ``(merged (..., Q_words, K_words) float64, query_words, key_words)``; words are the joined pieces.

    Raises:
        ValueError: label counts differ from the map's shape.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.shape[-2] != len(query_pieces) or w.shape[-1] != len(key_pieces):
        raise ValueError(f"map of shape {w.shape[-2:]} but {len(query_pieces)} query and {len(key_pieces)} key labels")
    qg, kg = word_groups(query_pieces), word_groups(key_pieces)
    if drop_special:
        qg = [g for g in qg if not (len(g) == 1 and is_special(query_pieces[g[0]]))]
        kg = [g for g in kg if not (len(g) == 1 and is_special(key_pieces[g[0]]))]
    cols = np.stack([w[..., g].sum(axis=-1) for g in kg], axis=-1) if kg else np.zeros(w.shape[:-1] + (0,))
    rows = np.stack([cols[..., g, :].mean(axis=-2) for g in qg], axis=-2) if qg else np.zeros(cols.shape[:-2] + (0, cols.shape[-1]))
    qw = [join_pieces([query_pieces[i] for i in g]) for g in qg]
    kw = [join_pieces([key_pieces[i] for i in g]) for g in kg]
    return rows, qw, kw


def unique_labels(labels: Sequence[str], *, offset: int = 0) -> list[str]:
    """Unique category labels ``"i:token"`` (tokens repeat, plotly categories must not)."""
    return [f"{i + offset}:{t}" for i, t in enumerate(labels)]
