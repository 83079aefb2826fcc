"""Two sentences compared: the attention maps of one kind aligned row by row and column by column, and their
difference.

The job of this module is the comparison view ("compare two sentences": one word changed,
active vs passive): given the B=1 :class:`~aiayn.model.maps.AttentionMaps` of two sentences (free-running
or teacher-forced, :func:`aiayn.analysis.explain`), put their maps of one kind of Section 3.2.3 (encoder
self-attention, masked decoder self-attention, encoder-decoder attention) on common rows and columns, so
that ``b - a`` is defined cell by cell. Two alignments:

* **by position**: row/column i of one sentence faces row/column i of the other. The shorter sentence is
  **padded** to the longer length with NaN (absent) rows and columns; nothing is truncated.
* **by pieces**: the query pieces and the key pieces of the two sentences are aligned with a
  longest-common-subsequence (LCS) alignment of the piece sequences, so that ``▁The ▁cat ▁sat`` and
  ``▁The ▁dog ▁sat`` align ``▁The`` with ``▁The`` and ``▁sat`` with ``▁sat``. A piece without a partner
  gets its own row/column, absent (NaN) in the other sentence: never dropped.

Pieces matched on: encoder queries and keys ``src_tokens``; decoder queries and keys
``decoder_input_tokens`` (the pieces fed to the decoder: ``<s>`` then the output shifted right); cross
queries ``decoder_input_tokens``, keys ``src_tokens``. Decoder query labels read ``"i:fed→predicted"`` as in
the explorer (:func:`aiayn.analysis.query_labels`). NumPy only (pandas for the table); nothing here imports
torch or Streamlit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .views import kind_labels, kind_stack

if TYPE_CHECKING:  # annotations only: aiayn.model.maps imports torch
    from ..model.maps import AttentionMaps

#: the kinds of Section 3.2.3 and the two alignments
from ..model.config import KINDS as COMPARE_KINDS  # noqa: E402 - the one tuple, torch-free
ALIGN_BY = ("position", "pieces")

#: one aligned row or column: its position in sentence a and in sentence b (None: absent there)
Pair = tuple[int | None, int | None]


def lcs_pairs(a: Sequence[str], b: Sequence[str]) -> list[Pair]:
    """Align two piece sequences along a longest common subsequence (dynamic programming, O(len(a) len(b))).

    Every index of ``a`` and of ``b`` appears exactly once, in order: matched pieces as ``(i, j)`` (with
    ``a[i] == b[j]``), pieces of ``a`` alone as ``(i, None)``, of ``b`` alone as ``(None, j)``. Between two
    matches, the unmatched pieces of ``a`` come before those of ``b``. Among several longest common
    subsequences the choice is deterministic: on a tie a piece of ``a`` is skipped before a piece of ``b``.

    >>> lcs_pairs(["▁The", "▁cat", "▁sat"], ["▁The", "▁dog", "▁sat"])
    [(0, 0), (1, None), (None, 1), (2, 2)]
    """
    n, m = len(a), len(b)
    # suffix table: best[i][j] = length of an LCS of a[i:] and b[j:]
    best = np.zeros((n + 1, m + 1), dtype=np.int64)
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i, j] = best[i + 1, j + 1] + 1 if a[i] == b[j] else max(best[i + 1, j], best[i, j + 1])
    matches: list[tuple[int, int]] = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j] and best[i, j] == best[i + 1, j + 1] + 1:
            matches.append((i, j))
            i, j = i + 1, j + 1
        elif best[i + 1, j] >= best[i, j + 1]:
            i += 1
        else:
            j += 1
    out: list[Pair] = []
    pi = pj = 0
    for mi, mj in matches + [(n, m)]:
        out.extend((x, None) for x in range(pi, mi))
        out.extend((None, y) for y in range(pj, mj))
        if mi < n:
            out.append((mi, mj))
        pi, pj = mi + 1, mj + 1
    return out


def position_pairs(n_a: int, n_b: int) -> list[Pair]:
    """Align by position, padding the shorter side: ``(i, i)`` for ``i < min``, then the longer side alone.

    >>> position_pairs(3, 2)
    [(0, 0), (1, 1), (2, None)]
    """
    return [(i if i < n_a else None, i if i < n_b else None) for i in range(max(n_a, n_b))]


def pair_labels(pairs: Sequence[Pair], texts_a: Sequence[str], texts_b: Sequence[str]) -> list[str]:
    """Unique axis labels of aligned rows/columns.

    ``"i:text"`` when both sentences have the same text at the same position, ``"i/j:text"`` when they
    share the text at different positions, ``"i:text_a | text_b"`` when the texts differ, and
    ``"i:text (a only)"`` / ``"j:text (b only)"`` for a row or column present in one sentence only.
    """
    out = []
    for i, j in pairs:
        if j is None:
            out.append(f"{i}:{texts_a[i]} (a only)")
        elif i is None:
            out.append(f"{j}:{texts_b[j]} (b only)")
        else:
            pos = f"{i}" if i == j else f"{i}/{j}"
            ta, tb = texts_a[i], texts_b[j]
            out.append(f"{pos}:{ta}" if ta == tb else f"{pos}:{ta} | {tb}")
    if len(set(out)) != len(out):  # cannot happen with SentencePiece pieces (no spaces); keep plotly safe anyway
        out = [f"{n}#{lab}" for n, lab in enumerate(out)]
    return out


@dataclass(frozen=True)
class AlignedMaps:
    """The maps of one kind of two sentences on common rows (queries) and columns (keys).

    Attributes:
        kind: ``"encoder"``, ``"decoder"`` or ``"cross"``.
        by: ``"position"`` or ``"pieces"``.
        a, b: ``(L, H, Q, K)`` float32 weights of sentence a and b on the aligned grid; NaN in the rows and
            columns that sentence does not have.
        diff: ``b - a``, ``(L, H, Q, K)`` float32; NaN wherever either is absent.
        q_labels, k_labels: ``Q`` / ``K`` unique labels (:func:`pair_labels`).
        q_pairs, k_pairs: per aligned row / column, its position in a and in b (None: absent there);
            positions count from 0.
    """

    kind: str
    by: str
    a: np.ndarray
    b: np.ndarray
    diff: np.ndarray
    q_labels: list[str]
    k_labels: list[str]
    q_pairs: list[Pair]
    k_pairs: list[Pair]

    @property
    def q_matched(self) -> np.ndarray:
        """``(Q,)`` bool: the row exists in both sentences."""
        return np.array([i is not None and j is not None for i, j in self.q_pairs], dtype=bool)

    @property
    def k_matched(self) -> np.ndarray:
        """``(K,)`` bool: the column exists in both sentences."""
        return np.array([i is not None and j is not None for i, j in self.k_pairs], dtype=bool)

    def pick(self, layer: int, head: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(a, b, diff)`` of one layer (from 0) and one head (from 0; None: mean over heads), each ``(Q, K)``.

        The difference is taken after the mean (mean of b minus mean of a: the same, both are linear).

        Raises:
            ValueError: layer or head out of range.
        """
        L, H = self.a.shape[:2]
        if not 0 <= layer < L:
            raise ValueError(f"layer {layer} outside [0, {L})")
        if head is not None and not 0 <= head < H:
            raise ValueError(f"head {head} outside [0, {H})")
        if head is None:
            a, b = self.a[layer].mean(axis=0), self.b[layer].mean(axis=0)
        else:
            a, b = self.a[layer, head], self.b[layer, head]
        return a, b, (b - a).astype(np.float32)

    def to_dataframe(self):
        """Long-format ``pandas.DataFrame``, one row per (layer, head, aligned query, aligned key).

        Columns: ``kind, by, layer, head`` (from 0), ``query, key`` (aligned labels), ``query_pos_a,
        query_pos_b, key_pos_a, key_pos_b`` (positions in each sentence from 0, empty where absent),
        ``weight_a, weight_b, diff`` (``weight_b - weight_a``; empty where absent).
        """
        import pandas as pd  # function-level: pandas is slow to import and only the export needs it

        L, H, Q, K = self.a.shape
        layer, head, q, k = np.meshgrid(np.arange(L), np.arange(H), np.arange(Q), np.arange(K), indexing="ij")
        q, k = q.ravel(), k.ravel()

        def pos(pairs: Sequence[Pair], side: int, idx: np.ndarray) -> pd.Series:
            col = pd.array([p[side] for p in pairs], dtype="Int64")
            return pd.Series(col[idx] if len(idx) else col[:0])

        return pd.DataFrame({
            "kind": self.kind, "by": self.by, "layer": layer.ravel(), "head": head.ravel(),
            "query": np.asarray(self.q_labels, dtype=object)[q] if Q else [],
            "key": np.asarray(self.k_labels, dtype=object)[k] if K else [],
            "query_pos_a": pos(self.q_pairs, 0, q), "query_pos_b": pos(self.q_pairs, 1, q),
            "key_pos_a": pos(self.k_pairs, 0, k), "key_pos_b": pos(self.k_pairs, 1, k),
            "weight_a": self.a.ravel(), "weight_b": self.b.ravel(), "diff": self.diff.ravel(),
        })

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict: ``kind``, ``by``, labels, ``q_pairs`` / ``k_pairs`` (``[pos_a, pos_b]``, null
        where absent) and ``a``, ``b``, ``diff`` as nested ``[layer][head][query][key]`` lists (layers and
        heads from 0) with null for absent cells."""
        def nested(x: np.ndarray) -> list:
            return np.where(np.isnan(x), None, x.astype(object)).tolist()

        return {"kind": self.kind, "by": self.by, "q_labels": list(self.q_labels), "k_labels": list(self.k_labels),
                "q_pairs": [list(p) for p in self.q_pairs], "k_pairs": [list(p) for p in self.k_pairs],
                "a": nested(self.a), "b": nested(self.b), "diff": nested(self.diff)}


def _place(w: np.ndarray, q_pairs: Sequence[Pair], k_pairs: Sequence[Pair], side: int) -> np.ndarray:
    """``w (L, H, Q_side, K_side)`` placed on the aligned grid ``(L, H, len(q_pairs), len(k_pairs))``, NaN elsewhere."""
    out = np.full(w.shape[:2] + (len(q_pairs), len(k_pairs)), np.nan, dtype=np.float32)
    rows = [(r, p[side]) for r, p in enumerate(q_pairs) if p[side] is not None]
    cols = [(c, p[side]) for c, p in enumerate(k_pairs) if p[side] is not None]
    if rows and cols:
        dst_r, src_r = (np.array(x) for x in zip(*rows))
        dst_c, src_c = (np.array(x) for x in zip(*cols))
        out[:, :, dst_r[:, None], dst_c[None, :]] = w[:, :, src_r[:, None], src_c[None, :]]
    return out


def _sentence(maps: "AttentionMaps", kind: str, name: str) -> tuple[np.ndarray, list[str], list[str], list[str]]:
    """``(weights (L, H, Q, K), query pieces, key pieces, query texts)`` of one B=1 sentence."""
    if maps is None:
        raise ValueError(f"sentence {name} has no attention maps (translate with return_attention=True)")
    if maps.batch_size != 1:
        raise ValueError(f"sentence {name}: expected maps of one sentence (B=1), got B={maps.batch_size}; "
                         "use maps.select(b)")
    q, k = kind_labels(maps, kind)
    w = kind_stack(maps, kind)
    if w.shape[-2:] != (len(q), len(k)):
        raise ValueError(f"sentence {name}: {kind} maps of shape {w.shape[-2:]} but {len(q)} query and "
                         f"{len(k)} key labels")
    predicted = maps.output_tokens[0] if kind != "encoder" and maps.output_tokens else None
    texts = [f"{p}→{predicted[i]}" for i, p in enumerate(q)] if predicted is not None and len(predicted) == len(q) \
        else list(q)
    return w, q, k, texts


def align_maps(a: "AttentionMaps", b: "AttentionMaps", kind: str, *, by: str = "position") -> AlignedMaps:
    """Align the ``kind`` maps of two sentences and take their difference ``b - a``.

    Args:
        a, b: :class:`~aiayn.model.maps.AttentionMaps` of one sentence each (B=1, with piece labels), e.g.
            ``Translation.attention`` from :func:`aiayn.analysis.explain`, free-running or teacher-forced;
            the two may differ in length and pieces but must come from models of the same shape (L, H).
        kind: ``"encoder"`` ``(L, 1, H, S, S)``, ``"decoder"`` ``(L, 1, H, T, T)`` or ``"cross"``
            ``(L, 1, H, T, S)`` (Section 3.2.3).
        by: ``"position"``: row/column i against row/column i, the shorter sentence padded with NaN to the
            longer length (never truncated); ``"pieces"``: queries and keys aligned along a longest common
            subsequence of their pieces (:func:`lcs_pairs`), unmatched rows/columns kept and NaN in the
            sentence that lacks them.

    Returns:
        an :class:`AlignedMaps`: ``a``, ``b``, ``diff`` ``(L, H, Q, K)`` float32 (``Q``, ``K`` the aligned
        lengths), labels and the positions each row/column comes from.

    Raises:
        ValueError: unknown ``kind`` or ``by``; maps missing, not B=1, without labels, or of different
        numbers of layers or heads.
    """
    if kind not in COMPARE_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose one of {COMPARE_KINDS}")
    if by not in ALIGN_BY:
        raise ValueError(f"unknown alignment {by!r}; choose one of {ALIGN_BY}")
    wa, qa, ka, ta = _sentence(a, kind, "a")
    wb, qb, kb, tb = _sentence(b, kind, "b")
    if wa.shape[:2] != wb.shape[:2]:
        raise ValueError(f"the two sentences come from different model shapes: (L, H) = {wa.shape[:2]} vs "
                         f"{wb.shape[:2]}")
    if by == "position":
        q_pairs, k_pairs = position_pairs(len(qa), len(qb)), position_pairs(len(ka), len(kb))
    else:
        q_pairs, k_pairs = lcs_pairs(qa, qb), lcs_pairs(ka, kb)
    grid_a, grid_b = _place(wa, q_pairs, k_pairs, 0), _place(wb, q_pairs, k_pairs, 1)
    return AlignedMaps(kind=kind, by=by, a=grid_a, b=grid_b, diff=(grid_b - grid_a).astype(np.float32),
                       q_labels=pair_labels(q_pairs, ta, tb), k_labels=pair_labels(k_pairs, ka, kb),
                       q_pairs=q_pairs, k_pairs=k_pairs)
