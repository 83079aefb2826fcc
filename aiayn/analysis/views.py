"""What an attention view shows: the ``(L, H, Q, K)`` maps of one kind of one sentence, with axis labels.

The job of this module is to turn an :class:`~aiayn.model.maps.AttentionMaps` of one sentence (B=1) into
arrays and labels a figure can draw, for the three kinds of Section 3.2.3: encoder self-attention
(queries and keys: source pieces), masked decoder self-attention (queries and keys: the pieces fed to the
decoder, ``<s>`` then the output shifted right) and encoder-decoder attention (queries: pieces fed to the
decoder; keys: source pieces). Decoder query labels read ``"i:fed→predicted"``: the piece fed at position
i and the piece the model predicted there. NumPy only; the maps' tensors are converted with their own
methods, so nothing here imports torch or Streamlit.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from .pieces import is_special, merge_words, unique_labels, word_groups, words_text

if TYPE_CHECKING:  # annotations only: aiayn.model.maps imports torch
    from ..model.maps import AttentionMaps


def query_labels(fed: Sequence[str], predicted: Sequence[str] | None = None, *,
                 positions: Sequence[int] | None = None) -> list[str]:
    """Unique decoder query labels ``"i:fed→predicted"`` (``"i:fed"`` when ``predicted`` is None).

    Args:
        fed: pieces fed to the decoder (``decoder_input_tokens``), length T.
        predicted: pieces predicted at each position (``output_tokens``), length T, or None.
        positions: the positions i to label (default: all T), e.g. the rows left after hiding ``<s>``.
    """
    idx = range(len(fed)) if positions is None else positions
    if predicted is None:
        return [f"{i}:{fed[i]}" for i in idx]
    return [f"{i}:{fed[i]}→{predicted[i]}" for i in idx]


def kind_labels(maps: "AttentionMaps", kind: str, batch: int = 0) -> tuple[list[str], list[str]]:
    """Piece labels ``(queries, keys)`` of ``kind`` for batch item ``batch`` (:meth:`AttentionMaps.labels`):
    encoder (src, src), decoder (fed, fed), cross (fed, src), where fed = ``decoder_input_tokens``.

    Raises:
        ValueError: unknown kind, or the maps carry no labels for it.
    """
    q, k = maps.labels(kind, batch)
    if q is None or k is None:
        raise ValueError(f"the maps carry no piece labels for {kind!r} attention")
    return list(q), list(k)


def kind_stack(maps: "AttentionMaps", kind: str, batch: int = 0) -> np.ndarray:
    """The weights of ``kind`` for batch item ``batch`` as a float32 array ``(L, H, Q, K)`` (on the CPU).

    Raises:
        ValueError: unknown kind, or that kind was not captured.
    """
    return maps.get(kind)[:, batch].detach().float().cpu().numpy()


def pieces_view(weights: np.ndarray, query_pieces: Sequence[str], key_pieces: Sequence[str],
                predicted: Sequence[str] | None = None, *, words: bool = False,
                hide_special: bool = False) -> tuple[np.ndarray, list[str], list[str]]:
    """Maps of any leading shape ``(..., Q, K)`` as a view shows them, with unique labels.

    Pieces: query labels are ``"i:piece"``, or ``"i:fed→predicted"`` when ``predicted`` (the ``Q`` pieces
    predicted at the query positions, for the decoder kinds) is given; i is the position in the full
    sequence, also when rows are hidden. With ``words`` the pieces are merged into words
    (:func:`~aiayn.analysis.pieces.merge_words`: sum over keys, mean over queries; words as in
    :func:`~aiayn.analysis.pieces.word_groups`) and labelled ``"n:word"``, n counting words; a decoder row
    then reads ``"n:fed word→predicted"``, where *predicted* is the pieces the model predicted at that word's
    positions, joined into words (the rest of the fed word and the start of the next one: ``"kau fen"`` fed
    predicts ``"fen ."``). With ``hide_special`` the ``<s>`` / ``</s>`` rows and columns are left out (no
    renormalisation).

    Returns:
        ``(weights (..., Q', K') float, query labels (Q'), key labels (K'))``.

    Raises:
        ValueError: label counts differ from the map's shape.
    """
    w = np.asarray(weights)
    if w.shape[-2] != len(query_pieces) or w.shape[-1] != len(key_pieces) or (
            predicted is not None and len(predicted) != len(query_pieces)):
        raise ValueError(f"map of shape {w.shape[-2:]} but {len(query_pieces)} query and {len(key_pieces)} key "
                         "labels" + ("" if predicted is None else f" and {len(predicted)} predicted pieces"))
    q, k = list(query_pieces), list(key_pieces)
    if words:
        m, qw, kw = merge_words(w, q, k, drop_special=hide_special)
        if predicted is not None:
            groups = [g for g in word_groups(q) if not (hide_special and len(g) == 1 and is_special(q[g[0]]))]
            qw = [f"{word}→{words_text([predicted[i] for i in g])}" for word, g in zip(qw, groups)]
        return m, unique_labels(qw), unique_labels(kw)
    qi = [i for i, p in enumerate(q) if not (hide_special and is_special(p))]
    ki = [j for j, p in enumerate(k) if not (hide_special and is_special(p))]
    w = w[..., qi, :][..., :, ki]
    return w, query_labels(q, predicted, positions=qi), query_labels(k, positions=ki)


def view_stack(maps: "AttentionMaps", kind: str, *, words: bool = False,
               hide_special: bool = False) -> tuple[np.ndarray, list[str], list[str]]:
    """The ``(L, H, Q, K)`` maps of ``kind`` (sentence 0 of ``maps``) as a view shows them, with unique labels
    (:func:`pieces_view`: decoder query labels ``"i:fed→predicted"``, in word mode ``"n:fed word→predicted"``).

    Returns:
        ``(weights (L, H, Q', K'), query labels (Q'), key labels (K'))``.

    Raises:
        ValueError: unknown kind, kind not captured, or no labels.
    """
    q, k = kind_labels(maps, kind)
    predicted = maps.output_tokens[0] if kind != "encoder" and maps.output_tokens else None
    return pieces_view(kind_stack(maps, kind), q, k, predicted, words=words, hide_special=hide_special)
