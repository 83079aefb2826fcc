"""Turning token ids into batches (Section 5.1: "Sentence pairs were batched together by approximate sequence
length").

:func:`token_batches` groups training examples of similar length into batches of at most ``max_tokens`` padded
tokens (the paper's batches held about 25000 source and 25000 target tokens); :func:`pad_ids` is the one padding
routine of the package (training, validation, translation, the masking lab): one vectorised numpy pass, no
Python loop over positions. The training loader keeps a corpus as one flat id array with row offsets
(:func:`pad_flat` pads rows of it without building Python lists) and batches by lengths alone
(:func:`token_batches_by_length`, the same batches as :func:`token_batches`).
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
    return token_batches_by_length([len(s) for s in src_ids], [len(t) for t in tgt_ids], max_tokens, seed=seed,
                                   epoch=epoch, shuffle=shuffle, drop_long=drop_long)


def token_batches_by_length(
    src_lengths: Sequence[int] | np.ndarray,
    tgt_lengths: Sequence[int] | np.ndarray,
    max_tokens: int,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_long: bool = False,
) -> list[list[int]]:
    """:func:`token_batches` from the N source and N target lengths alone (no id lists needed): exactly the
    same batches, in the same order, for the same ``(seed, epoch)``.

    The Python ``random.Random(seed * 1_000_003 + epoch)`` draws are kept (so a run started before this
    function existed resumes with the same data order); the stable sort by cost runs in numpy and the greedy
    cut works a batch at a time: the examples are in increasing cost, so a batch that starts at sorted
    position p ends before the first q with ``cost[q] * (q - p + 1) > max_tokens``.

    Raises:
        ValueError: different numbers of lengths, ``max_tokens`` < 1, or an example alone exceeds
            ``max_tokens`` (unless ``drop_long``).
    """
    src_len = np.asarray(src_lengths, dtype=np.int64).reshape(-1)
    tgt_len = np.asarray(tgt_lengths, dtype=np.int64).reshape(-1)
    if len(src_len) != len(tgt_len):
        raise ValueError(f"{len(src_len)} sources but {len(tgt_len)} targets")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    cost = np.maximum(src_len, tgt_len + 1)
    rng = random.Random(int(seed) * 1_000_003 + int(epoch))
    order_list = list(range(len(cost)))
    if shuffle:
        rng.shuffle(order_list)   # random tie-break: the stable sort keeps this order within equal costs
    order = np.asarray(order_list, dtype=np.int64)
    order = order[np.argsort(cost[order], kind="stable")]
    sorted_cost = cost[order]
    n_fit = int(np.searchsorted(sorted_cost, max_tokens, side="right"))  # examples that fit alone
    if n_fit < len(order) and not drop_long:
        i = int(order[n_fit])
        raise ValueError(f"example {i} alone needs {int(cost[i])} tokens > max_tokens={max_tokens} (use drop_long)")
    batches: list[list[int]] = []
    p = 0
    while p < n_fit:
        # in increasing cost the batch's largest cost is its last one: [p, q) fits while cost[q-1] * (q-p) <= budget
        span = min(n_fit - p, max_tokens // int(sorted_cost[p]))
        sizes = np.arange(1, span + 1)
        over = np.flatnonzero(sorted_cost[p : p + span] * sizes > max_tokens)
        size = int(over[0]) if len(over) else span
        batches.append(order[p : p + size].tolist())
        p += size
    if shuffle:
        rng.shuffle(batches)
    return batches


def pad_flat(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, pad_id: int, *, width: int | None = None,
             multiple: int = 1, max_width: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """Right-pad B rows of a flat id array into ``(B, W)`` int64, in one vectorised pass (no Python list).

    Args:
        flat: 1-d integer array holding every sequence back to back (e.g. a memory-mapped corpus).
        starts, lengths: ``(B,)`` integer arrays: row b is ``flat[starts[b] : starts[b] + lengths[b]]``.
        pad_id: the id written after each row.
        width: W; default the longest row rounded up to a multiple of ``multiple``, capped at ``max_width``
            (never below the longest row).
        out: optional ``(B, W)`` int64 array to write into (e.g. a view of pinned memory); returned.

    Returns:
        ``(B, W)`` int64 array, row b = the row's ids then ``pad_id`` (as :func:`pad_ids` of the same rows).

    Raises:
        ValueError: no rows, ``multiple`` < 1, or a row longer than ``width``.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) == 0:
        raise ValueError("pad_flat needs at least one row")
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    longest = int(lengths.max())
    if width is None:
        width = -(-longest // multiple) * multiple
        if max_width is not None:
            width = max(longest, min(width, int(max_width)))
    elif longest > width:
        raise ValueError(f"a sequence of {longest} ids does not fit width {width}")
    pos = np.arange(width, dtype=np.int64)
    idx = starts[:, None] + pos
    if out is None:
        out = np.empty((len(lengths), width), dtype=np.int64)
    np.copyto(out, np.where(pos < lengths[:, None], flat.take(idx, mode="clip"), pad_id), casting="unsafe")
    return out
