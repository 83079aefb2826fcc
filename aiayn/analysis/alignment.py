"""Word alignment from cross-attention, scored against hand-made gold links by the alignment error rate.

* **AER** (Och and Ney 2003, "A Systematic Comparison of Various Statistical Alignment Models", Section 5):
  gold links are Sure (S) or Possible (P) with S a subset of P; for predicted links A,
  ``AER = 1 - (|A & S| + |A & P|) / (|A| + |S|)``. Over a corpus the four counts are summed first (:func:`counts`,
  :func:`aer_from_counts`), as Och and Ney do, not averaged per sentence.
* **Gold file** (``assets/alignment/gold.de-en.tsv``, described in its README): ``German <TAB> English <TAB> links``,
  whitespace-separated tokens, links ``i-j`` (sure) and ``ipj`` (possible), 0-based, German index first
  (:func:`read_gold`).
* **Attention to alignment.** Piece-level cross-attention ``(..., T, S)`` becomes word-level by the rule of Clark et
  al. (2019) that :func:`aiayn.analysis.pieces.merge_words` uses (sum over a word's key pieces, mean over its query
  pieces), but with words given by the gold tokens (:func:`piece_words` matches characters), so that
  ``o'clock`` or a detached ``.`` are the gold's words whatever SentencePiece did. Links are read by argmax per
  target word, per source word, their intersection or their union (Garg et al. 2019, Section 4;
  :func:`extract`). **Shift by one** (Chen et al. 2020, "Accurate Word Alignment Induction from Neural Machine
  Translation", Section 3): a target word's row is read at the step where it is the decoder's *input*, one row
  later than the step that predicts it (:func:`query_words`).

NumPy only; nothing here imports torch. Every function is pure: maps in, arrays out.
"""
from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from .pieces import WORD_START, is_special

#: the readings of :func:`extract`.
METHODS = ("target", "source", "intersection", "union")

Link = tuple[int, int]


# -- AER ----------------------------------------------------------------------------------------------------------
def aer(predicted: Iterable[Link], sure: Iterable[Link], possible: Iterable[Link]) -> float:
    """Alignment error rate of ``predicted`` links against gold ``sure`` and ``possible`` links (Och and Ney 2003):
    ``1 - (|A & S| + |A & P|) / (|A| + |S|)``; 0.0 is perfect, 1.0 is all wrong.

    Args:
        predicted, sure, possible: (German index, English index) pairs; ``possible`` includes the sure links.

    Returns:
        AER in [0, 1]; ``nan`` when there is neither a prediction nor a sure link (0 / 0).

    Raises:
        ValueError: a sure link is missing from ``possible`` (Och and Ney: S is a subset of P).
    """
    a, s, p = set(predicted), set(sure), set(possible)
    if not s <= p:
        raise ValueError(f"sure links {sorted(s - p)} are not in possible: possible must include every sure link")
    return float(aer_from_counts(np.array([len(a & s), len(a & p), len(a), len(s)])))


def counts(predicted: np.ndarray, sure: np.ndarray, possible: np.ndarray) -> np.ndarray:
    """The four AER counts of boolean link matrices: ``(..., 4)`` int64 ``[|A & S|, |A & P|, |A|, |S|]``.

    Args:
        predicted: ``(..., n, m)`` bool (any leading dims, e.g. ``(L, H, n, m)``).
        sure, possible: ``(n, m)`` bool, broadcast against ``predicted``; ``possible`` includes ``sure``.
    """
    a = np.asarray(predicted, dtype=bool)
    s, p = np.asarray(sure, dtype=bool), np.asarray(possible, dtype=bool)
    def total(x: np.ndarray) -> np.ndarray:
        return x.sum(axis=(-2, -1), dtype=np.int64)
    n_s = np.broadcast_to(total(s), a.shape[:-2])
    return np.stack([total(a & s), total(a & p), total(a), n_s], axis=-1)


def aer_from_counts(c: np.ndarray) -> np.ndarray:
    """AER of summed :func:`counts` ``(..., 4)`` -> ``(...)`` float64; ``nan`` where ``|A| + |S| == 0``."""
    c = np.asarray(c, dtype=np.float64)
    den = c[..., 2] + c[..., 3]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 1.0 - (c[..., 0] + c[..., 1]) / den, np.nan)


def f1(predicted: Iterable[Link], gold: Iterable[Link]) -> tuple[float, float, float]:
    """``(precision, recall, F1)`` of ``predicted`` links against ``gold`` links (1.0 for an empty side matched by
    an empty side)."""
    a, g = set(predicted), set(gold)
    prec = len(a & g) / len(a) if a else float(not g)
    rec = len(a & g) / len(g) if g else float(not a)
    return prec, rec, (2 * prec * rec / (prec + rec) if prec + rec else 0.0)


# -- the gold file ------------------------------------------------------------------------------------------------
class GoldPair(NamedTuple):
    """One line of the gold file.

    Attributes:
        german, english: the whitespace-separated tokens.
        sure: (German index, English index) sure links.
        possible: possible links, the sure ones included (S subset of P).
        line: 1-based line number in the file.
    """

    german: list[str]
    english: list[str]
    sure: frozenset
    possible: frozenset
    line: int


def parse_links(text: str, n_de: int, n_en: int, where: str = "links") -> tuple[frozenset, frozenset]:
    """``(sure, possible)`` of a link field (``"0-0 1p2"``); possible includes sure.

    Raises:
        ValueError: naming ``where``: a malformed link, an index out of range (German ``< n_de``, English
            ``< n_en``), a link given twice.
    """
    sure, possible = set(), set()
    for item in text.split():
        sep = "-" if "-" in item else "p"
        i, _, j = item.partition(sep)
        if not (i.isdigit() and j.isdigit()):
            raise ValueError(f"{where}: malformed link {item!r} (want i-j for sure or ipj for possible, 0-based)")
        link = (int(i), int(j))
        if not (link[0] < n_de and link[1] < n_en):
            raise ValueError(f"{where}: link {item!r} out of range ({n_de} German and {n_en} English tokens)")
        if link in possible:
            raise ValueError(f"{where}: link {link[0]}-{link[1]} given twice")
        possible.add(link)
        if sep == "-":
            sure.add(link)
    return frozenset(sure), frozenset(possible)


def read_gold(path: str | Path) -> list[GoldPair]:
    """Read a gold alignment file (``German <TAB> English <TAB> links`` per line; blank lines and lines starting
    with ``#`` are skipped).

    Raises:
        ValueError: naming the file and line: not three tab-separated fields, an empty sentence, a bad link
            (:func:`parse_links`).
        OSError: the file cannot be read.
    """
    path = Path(path)
    pairs = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip() or raw.startswith("#"):
            continue
        where = f"{path.name}:{n}"
        fields = raw.split("\t")
        if len(fields) != 3:
            raise ValueError(f"{where}: {len(fields)} tab-separated fields, want German, English, links")
        de, en = fields[0].split(), fields[1].split()
        if not de or not en:
            raise ValueError(f"{where}: an empty sentence")
        sure, possible = parse_links(fields[2], len(de), len(en), where)
        pairs.append(GoldPair(de, en, sure, possible, n))
    return pairs


def link_matrix(links: Iterable[Link], shape: tuple[int, int], *, transpose: bool = False) -> np.ndarray:
    """``(n, m)`` bool matrix with True at each link; ``transpose`` swaps each link's indices (and ``shape`` is
    then given in the swapped order)."""
    out = np.zeros(shape, dtype=bool)
    for i, j in links:
        out[(j, i) if transpose else (i, j)] = True
    return out


def matrix_links(matrix: np.ndarray, *, transpose: bool = False) -> set[Link]:
    """The links of an ``(n, m)`` bool matrix as index pairs (``transpose``: ``(column, row)``)."""
    return {(int(b), int(a)) if transpose else (int(a), int(b)) for a, b in zip(*np.nonzero(matrix))}


# -- pieces to words ----------------------------------------------------------------------------------------------
def _byte(piece: str) -> int | None:
    """The byte of a SentencePiece byte-fallback piece (``<0xC3>`` -> 0xC3), else None."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return int(piece[3:5], 16)
    return None


def _chunk(pieces: Sequence[str], k: int) -> tuple[str, int]:
    """``(characters, end)`` of the piece at ``k``: a run of byte pieces is decoded as one chunk."""
    if _byte(pieces[k]) is None:
        return unicodedata.normalize("NFKC", pieces[k].replace(WORD_START, "")), k + 1
    end = k
    while end < len(pieces) and _byte(pieces[end]) is not None:
        end += 1
    return bytes(_byte(p) for p in pieces[k:end]).decode("utf-8", errors="replace"), end


def piece_words(pieces: Sequence[str], words: Sequence[str]) -> np.ndarray:
    """The word each piece belongs to, by matching characters: ``(len(pieces),)`` int64, -1 for special pieces
    (``<s>``, ``</s>``, ``<pad>``) and for a bare ``▁``. A piece belongs to the word holding its first character;
    a run of UTF-8 byte pieces (``<0xC3>`` ``<0xA4>``) is decoded and matched as one.

    >>> piece_words(["▁Zeit", ".", "</s>"], ["Zeit", "."]).tolist()
    [0, 1, -1]

    Raises:
        ValueError: the pieces do not spell the words (an ``<unk>`` piece, a tokenizer that changed characters).
    """
    norm = [unicodedata.normalize("NFKC", w) for w in words]
    owner = [w for w, word in enumerate(norm) for _ in word]
    text = "".join(norm)
    out, pos, k = np.full(len(pieces), -1, dtype=np.int64), 0, 0
    while k < len(pieces):
        if pieces[k] == "<unk>":
            raise ValueError(f"the pieces hold <unk>: cannot match them to the words {' '.join(words)!r}")
        chunk, end = ("", k + 1) if is_special(pieces[k]) else _chunk(pieces, k)
        if chunk:
            if text[pos:pos + len(chunk)] != chunk:
                raise ValueError(f"piece {pieces[k]!r} does not continue {text[pos:]!r} (words {' '.join(words)!r})")
            out[k:end] = owner[pos]
            pos += len(chunk)
        k = end
    if pos != len(text):
        raise ValueError(f"the pieces spell only {text[:pos]!r} of {text!r}")
    return out


def query_words(target_words: np.ndarray, *, shift: bool) -> np.ndarray:
    """The word of each decoder row. Row t predicts ``target[t]`` and is fed ``target[t - 1]`` (Section 3.1); with
    ``shift`` (Chen et al. 2020) a row belongs to the word of the piece it is *fed*: ``[-1] + target_words[:-1]``.

    Args:
        target_words: ``(T,)`` int word of each target piece (:func:`piece_words`), -1 for none.
    """
    t = np.asarray(target_words, dtype=np.int64)
    return np.concatenate([[-1], t[:-1]]) if shift else t.copy()


def word_maps(maps: np.ndarray, rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int) -> np.ndarray:
    """Piece-level attention ``(..., T, S)`` -> word-level ``(..., n_rows, n_cols)`` float64: the sum over a
    word's key pieces, the mean over its query pieces (Clark et al. 2019); pieces of word -1 are left out (rows not
    renormalised). A word with no query piece gets a row of zeros.

    Args:
        maps: ``(..., T, S)`` float (any leading dims, e.g. ``(L, H, T, S)``).
        rows: ``(T,)`` word of each query piece (:func:`query_words`); cols: ``(S,)`` word of each key piece.

    Raises:
        ValueError: ``rows`` / ``cols`` lengths differ from the map's shape, or name a word outside
            ``n_rows`` / ``n_cols``.
    """
    m = np.asarray(maps, dtype=np.float64)
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    if m.shape[-2:] != (len(rows), len(cols)):
        raise ValueError(f"map of shape {m.shape[-2:]} but {len(rows)} row and {len(cols)} column words")
    if rows.max(initial=-1) >= n_rows or cols.max(initial=-1) >= n_cols:
        raise ValueError(f"a word index beyond {n_rows} rows / {n_cols} columns")
    col_in = (cols[:, None] == np.arange(n_cols)[None, :]).astype(np.float64)  # (S, n_cols)
    row_in = (rows[None, :] == np.arange(n_rows)[:, None]).astype(np.float64)  # (n_rows, T)
    row_in /= np.maximum(row_in.sum(axis=1, keepdims=True), 1.0)
    return row_in @ (m @ col_in)


def extract(word_map: np.ndarray, method: str = "target") -> np.ndarray:
    """Links from a word-level map ``(..., n_tgt, n_src)`` (rows target words, columns source words) -> bool of the
    same shape: ``target``: each target word to its argmax source word; ``source``: each source word to its argmax
    target word; ``intersection`` / ``union`` of the two. Ties go to the lowest index (``np.argmax``).

    Raises:
        ValueError: an unknown ``method``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    m = np.asarray(word_map, dtype=np.float64)
    n_t, n_s = m.shape[-2:]
    if n_t == 0 or n_s == 0:
        return np.zeros(m.shape, dtype=bool)
    tgt = np.argmax(m, axis=-1)[..., None] == np.arange(n_s)  # (..., n_t, n_s)
    src = np.argmax(m, axis=-2)[..., None, :] == np.arange(n_t)[:, None]  # (..., n_t, n_s)
    return {"target": tgt, "source": src, "intersection": tgt & src, "union": tgt | src}[method]


def readouts(word_map: np.ndarray) -> dict[str, np.ndarray]:
    """The per-head maps ``(L, H, n, m)`` with their layer means ``(L, n, m)`` and model mean ``(n, m)`` (the mean
    of every layer's every head), as ``{"head", "layer", "model"}``."""
    m = np.asarray(word_map, dtype=np.float64)
    if m.ndim != 4:
        raise ValueError(f"want (L, H, n, m) maps, got shape {m.shape}")
    return {"head": m, "layer": m.mean(axis=1), "model": m.mean(axis=(0, 1))}


def agreement(first: Sequence[GoldPair], second: Sequence[GoldPair]) -> dict[str, float]:
    """Agreement of two alignment passes over the same sentence pairs (every pair of ``second`` must be in
    ``first``; pairs are matched by their text), corpus-level over the shared pairs:

    * ``aer_second_vs_first``: AER of the second pass's sure links as predictions against the first pass's
      sure and possible links; ``aer_first_vs_second`` the other way round;
    * ``sure_precision`` / ``sure_recall`` / ``sure_f1``: the second pass's sure links against the first's;
    * ``all_f1``: the same over all links (sure and possible);
    * ``pairs``: how many pairs were compared.

    Raises:
        ValueError: a pair of ``second`` is not in ``first``.
    """
    index = {(tuple(p.german), tuple(p.english)): p for p in first}
    c12, c21 = np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64)
    sure_a, sure_b, all_a, all_b = set(), set(), set(), set()
    for k, b in enumerate(second):
        a = index.get((tuple(b.german), tuple(b.english)))
        if a is None:
            raise ValueError(f"line {b.line}: {' '.join(b.german)!r} is not in the first pass")
        c12 += [len(b.sure & a.sure), len(b.sure & a.possible), len(b.sure), len(a.sure)]
        c21 += [len(a.sure & b.sure), len(a.sure & b.possible), len(a.sure), len(b.sure)]
        sure_a |= {(k, *x) for x in a.sure}
        sure_b |= {(k, *x) for x in b.sure}
        all_a |= {(k, *x) for x in a.possible}
        all_b |= {(k, *x) for x in b.possible}
    prec, rec, f = f1(sure_b, sure_a)
    return {"pairs": float(len(second)), "aer_second_vs_first": float(aer_from_counts(c12)),
            "aer_first_vs_second": float(aer_from_counts(c21)), "sure_precision": prec, "sure_recall": rec,
            "sure_f1": f, "all_f1": f1(all_b, all_a)[2]}


#: how :func:`sentence_counts` lays out its readings: no shift, then the shift by one.
SHIFTS = (False, True)


def sentence_counts(maps: np.ndarray, src_words: np.ndarray, tgt_words: np.ndarray,
                    sure: np.ndarray, possible: np.ndarray) -> np.ndarray:
    """The AER counts of one sentence for every reading of its cross-attention.

    Args:
        maps: ``(L, H, T, S)`` piece-level cross-attention (decoder rows, encoder columns) of one sentence, cut to
            its real positions.
        src_words: ``(S,)`` source word of each encoder piece; tgt_words: ``(T,)`` target word of each predicted
            piece (:func:`piece_words`; -1 for ``</s>``).
        sure, possible: ``(n_tgt, n_src)`` bool gold links, target words as rows (:func:`link_matrix`).

    Returns:
        ``(len(SHIFTS), len(METHODS), L * H + L + 1, 4)`` int64 :func:`counts`: for each shift (:data:`SHIFTS`) and
        each method (:data:`METHODS`) the heads in layer-major order, then the layer means, then the model mean.
    """
    n_t, n_s = np.shape(sure)
    out = []
    for shift in SHIFTS:
        wm = readouts(word_maps(maps, query_words(tgt_words, shift=shift), src_words, n_t, n_s))
        stack = np.concatenate([wm["head"].reshape(-1, n_t, n_s), wm["layer"], wm["model"][None]])
        out.append([counts(extract(stack, m), sure, possible) for m in METHODS])
    return np.asarray(out, dtype=np.int64)


def split_readouts(values: np.ndarray, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    """``(..., L * H + L + 1)`` values in :func:`sentence_counts`' order -> ``{"head": (..., L, H), "layer": (..., L),
    "model": (...)}``."""
    v = np.asarray(values)
    lh = n_layers * n_heads
    if v.shape[-1] != lh + n_layers + 1:
        raise ValueError(f"want {lh + n_layers + 1} readings for {n_layers} x {n_heads} heads, got {v.shape[-1]}")
    return {"head": v[..., :lh].reshape(v.shape[:-1] + (n_layers, n_heads)), "layer": v[..., lh:lh + n_layers],
            "model": v[..., -1]}
