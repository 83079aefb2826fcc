"""Turning token ids into batches (Section 5.1: "Sentence pairs were batched together by approximate sequence
length").

:func:`token_batches` groups training examples of similar length into batches of at most ``max_tokens`` padded
tokens (the paper's batches held about 25000 source and 25000 target tokens); :func:`pad_ids` is the one padding
routine of the package (training, validation, translation, the masking lab): one vectorised numpy pass, no
Python loop over positions.
"""
from __future__ import annotations

import random
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

    Args:
        src_ids, tgt_ids: N source and N target id sequences (lengths in SentencePiece pieces).
        max_tokens: the padded-token budget of one batch (``B * max cost``).
        seed, epoch: the shuffle is ``random.Random(seed * 1_000_003 + epoch)``.
        shuffle: random tie-break within equal costs and random batch order; False gives batches in
            increasing cost.
        drop_long: leave out examples whose cost alone exceeds ``max_tokens`` instead of raising.

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
