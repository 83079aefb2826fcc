"""Turning token ids into padded batches (Section 5.1: "sentence pairs were batched together by approximate
sequence length").

:func:`pad_ids` is the one padding routine of the package (training, validation, translation, the masking lab):
one vectorised numpy pass, no Python loop over positions.
"""
from __future__ import annotations

from itertools import chain
from typing import Sequence

import numpy as np


def pad_ids(seqs: Sequence[Sequence[int]], pad_id: int, *, width: int | None = None, multiple: int = 1) -> np.ndarray:
    """Right-pad id sequences into one ``(B, W)`` int64 array.

    Args:
        seqs: B sequences of token ids (lists, tuples or 1-d arrays), at least one.
        pad_id: the id written after each sequence.
        width: W; default the longest sequence. Sequences longer than ``width`` raise.
        multiple: round W up to a multiple of this (e.g. 8, so that batch shapes repeat).

    Returns:
        ``(B, W)`` int64 array; row b holds ``seqs[b]`` followed by ``pad_id``.

    Raises:
        ValueError: no sequences, ``multiple`` < 1, or a sequence longer than ``width``.
    """
    if len(seqs) == 0:
        raise ValueError("pad_ids needs at least one sequence")
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    longest = int(lengths.max())
    if width is None:
        width = longest
    elif longest > width:
        raise ValueError(f"a sequence of {longest} ids does not fit width {width}")
    width = -(-width // multiple) * multiple
    out = np.full((len(seqs), width), pad_id, dtype=np.int64)
    out[np.arange(width) < lengths[:, None]] = np.fromiter(chain.from_iterable(seqs), dtype=np.int64,
                                                          count=int(lengths.sum()))
    return out
