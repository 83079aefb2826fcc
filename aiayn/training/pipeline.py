"""The training data pipeline (Section 5.1): read a prepared split, optionally repeat full-sentence pairs,
encode to SentencePiece ids, group the token-count batches of an epoch into optimizer steps (gradient
accumulation, one disjoint share per DDP rank) and collate a batch into padded ``(B, S)`` / ``(B, T)`` id
tensors with the decoder input shifted right (``cfg.decoder_start_id`` + y[:-1]).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..data.batching import token_batches_by_length
from ..data.corpora import read_tsv
from ..data.splits import is_sentence
from ..model.config import TransformerConfig
from .recipe import TrainConfig


def rank_and_world() -> tuple[int, int]:
    """``(rank, world size)`` of this process under ``torch.distributed`` (``(0, 1)`` when not initialised):
    which share of every step's batches this process trains on."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def load_split(data_dir: str | Path, split: str, direction: str) -> tuple[list[str], list[str]]:
    """Source and target texts of ``{data_dir}/{split}.tsv`` (columns ``de``, ``en``) for ``direction``
    (``"en-de"`` or ``"de-en"``), in file order.

    Raises:
        FileNotFoundError: no such split file; ValueError: a malformed file (from :func:`aiayn.data.corpora.read_tsv`).
    """
    pairs = read_tsv(Path(data_dir) / f"{split}.tsv")
    src_lang, tgt_lang = direction.split("-")
    return [getattr(p, src_lang) for p in pairs], [getattr(p, tgt_lang) for p in pairs]


def upsample_sentences(src: list[str], tgt: list[str], times: int) -> tuple[list[str], list[str]]:
    """Repeat every pair whose two sides are full sentences (:func:`aiayn.data.splits.is_sentence`) ``times`` times in
    total, keeping the order otherwise. A data-mix choice for phrase-heavy corpora such as Ding (95% of its
    pairs are 1-3 word phrases), not part of the paper's recipe; ``times=1`` leaves the data unchanged.

    Raises:
        ValueError: ``times < 1``.
    """
    if times < 1:
        raise ValueError(f"upsample_sentences must be >= 1, got {times}")
    if times == 1:
        return src, tgt
    out_s, out_t = [], []
    for a, b in zip(src, tgt):
        n = times if (is_sentence(a) and is_sentence(b)) else 1
        out_s.extend([a] * n)
        out_t.extend([b] * n)
    return out_s, out_t


def encode_pairs(tokenizer, src: list[str], tgt: list[str], max_len: int, eos_id: int) -> tuple[list[list[int]], list[list[int]]]:
    """Piece ids of each pair (source + EOS, target + EOS), dropping pairs with an empty side or a side of
    ``max_len`` pieces or more. ``tokenizer``: anything with ``encode`` (and optionally ``encode_batch``)."""
    s_ids = tokenizer.encode_batch(src) if hasattr(tokenizer, "encode_batch") else [tokenizer.encode(x) for x in src]
    t_ids = tokenizer.encode_batch(tgt) if hasattr(tokenizer, "encode_batch") else [tokenizer.encode(x) for x in tgt]
    out_s, out_t = [], []
    for a, b in zip(s_ids, t_ids):
        if a and b and len(a) < max_len and len(b) < max_len:
            out_s.append(a + [eos_id])
            out_t.append(b + [eos_id])
    return out_s, out_t


def collate(idx: Sequence[int], src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]],
            cfg: TransformerConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batch of examples ``idx`` of id lists (:func:`encode_pairs`' form) as padded int64 tensors, by the one
    training collate, :func:`aiayn.training.loader.collate_examples` (``multiple=1``).

    Returns:
        ``(src (B, S), decoder input (B, T), target (B, T))`` with B = ``len(idx)``, S and T the longest
        source and target; the decoder input is ``cfg.decoder_start_id`` + ``y[:-1]`` (the target shifted
        right, Section 3.1), the target is ``y``; both padded with ``cfg.pad_id``.

    Raises:
        ValueError: an empty ``idx``.
    """
    from .loader import PairIds, collate_examples  # the loader imports the data modules, not this one

    rows = list(idx)
    data = PairIds.from_lists([src_ids[i] for i in rows], [tgt_ids[i] for i in rows])
    return collate_examples(data, np.arange(len(rows)), pad_id=cfg.pad_id, bos_id=cfg.decoder_start_id, multiple=1)


def step_groups(tc: TrainConfig, src_lengths, tgt_lengths, epoch: int, *, world: int = 1) -> list[list[list[int]]]:
    """The batches of one epoch grouped into optimizer steps, for every rank together.

    ``groups[k]`` is the list of all micro-batches (lists of example indices) of step k over the ``world``
    ranks; rank r trains on ``groups[k][r::world]`` (:func:`step_batches`). Batches come from
    :func:`aiayn.data.batching.token_batches_by_length` (deterministic for ``(tc.seed, epoch)``); with
    ``tc.accumulation`` = a set, a step is ``a * world`` consecutive micro-batches, so W ranks with accumulation a
    see exactly the steps of one process with accumulation ``a * W`` (Section 5.1); with ``accumulation=0`` the
    micro-batches per step are derived from ``tc.tokens_per_step`` and rounded to a multiple of the world size,
    so the global batch is only approximately independent of the world size. A last incomplete group is
    dropped.

    Args:
        src_lengths, tgt_lengths: N lengths in pieces (EOS included), e.g. ``PairIds.src_lengths``.
    """
    tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64)
    batches = token_batches_by_length(src_lengths, tgt_lengths, tc.max_tokens, seed=tc.seed, epoch=epoch)
    if tc.accumulation > 0:
        per_step = tc.accumulation * world
    else:
        avg_tokens = int(tgt_lengths.sum()) / max(len(batches), 1)  # every example is in one batch
        per_step = max(world, int(round(tc.tokens_per_step / max(avg_tokens, 1) / world)) * world)
    return [batches[start : start + per_step] for start in range(0, len(batches) - per_step + 1, per_step)]


def step_batches(tc: TrainConfig, src_ids, tgt_ids, epoch: int, *, rank: int | None = None,
                 world: int | None = None) -> list[list[list[int]]]:
    """The batches of one epoch grouped into optimizer steps, for one rank (:func:`step_groups` from the id
    lists' lengths).

    ``steps[k]`` is the list of micro-batches (lists of example indices) rank ``rank`` accumulates in step k;
    every rank's share is disjoint. ``rank`` / ``world`` default to :func:`rank_and_world`.
    """
    if rank is None or world is None:
        own_rank, own_world = rank_and_world()
        rank = own_rank if rank is None else rank
        world = own_world if world is None else world
    groups = step_groups(tc, [len(s) for s in src_ids], [len(t) for t in tgt_ids], epoch, world=world)
    return [group[rank::world] for group in groups]
