"""Statistics of probability distributions: row entropy, per-head statistics, top-k next pieces.

The job of this module is summarising distributions, each row summing to 1: attention rows (post-softmax
weights, Eq. 1 of the paper) summarised per head to reveal head roles (Voita et al. 2019; Clark et al.
2019), and next-piece distributions (softmax of the output layer, Section 3.4) cut to their k most probable
pieces. Entropies are in **bits** (log base 2). NumPy (and pandas for tables); no torch, no Streamlit.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .pieces import BOS_PIECES, EOS_PIECES


def entropy(weights: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy in bits of distributions along ``axis`` (0 log 0 = 0), float64.

    A row putting all weight on one key has entropy 0; a uniform row over n keys has log2(n).
    ``weights`` of shape ``(..., K)`` give ``(...)``.
    """
    p = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return terms.sum(axis=axis)


def _offset_share(w: np.ndarray, offset: int) -> np.ndarray:
    """Mean over queries i of ``w[..., i, i+offset]`` for the queries where that key exists. ``(L, H)``."""
    Q, K = w.shape[-2:]
    qs = [i for i in range(Q) if 0 <= i + offset < K]
    if not qs:
        return np.full(w.shape[:-2], np.nan)
    return np.mean([w[..., i, i + offset] for i in qs], axis=0)


def head_stats(
    weights: np.ndarray,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    kind: str,
) -> "pandas.DataFrame":  # noqa: F821
    """One row per head with statistics that reveal head roles (Voita et al. 2019; Clark et al. 2019).

    Args:
        weights: ``(L, H, Q, K)`` attention weights of one kind for one sentence.
        query_pieces, key_pieces: labels of the rows / columns.
        kind: ``"encoder"``, ``"decoder"`` or ``"cross"``.

    Returns:
        ``pandas.DataFrame`` with columns ``layer, head`` (from 1), ``entropy`` (mean row entropy, bits),
        ``confidence`` (mean over queries of the largest weight), ``self``, ``previous``, ``next`` (mean
        weight on key i, i-1, i+1 for query i, over the queries where that key exists), ``bos``, ``eos``
        (mean total weight on ``<s>`` / ``</s>`` keys), ``max_key`` (the key piece receiving the most weight
        on average). A statistic that is undefined for the kind or the sentence is NaN, never 0:

        * ``self``, ``previous``, ``next``: NaN for cross-attention (queries and keys are different
          sequences); ``next`` is also NaN for the masked decoder self-attention (key i+1 is hidden from
          query i by the mask of Section 3.2.3, so its weight is 0 by construction, not a finding);
          ``previous`` / ``next`` are NaN when no query has that neighbour (one piece).
        * ``bos`` / ``eos``: NaN when the keys hold no ``<s>`` / ``</s>``: ``bos`` for the encoder and cross
          kinds (the source has no ``<s>``), ``eos`` for the decoder self-attention (``</s>`` is predicted,
          never fed).

    Raises:
        ValueError: weights not 4-D, label counts differ from the map's shape, unknown kind.
    """
    import pandas as pd  # function-level: pandas is slow to import, and aiayn.analysis is imported by the first page

    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 4:
        raise ValueError(f"expected (L, H, Q, K) weights, got shape {w.shape}")
    L, H, Q, K = w.shape
    if len(query_pieces) != Q or len(key_pieces) != K:
        raise ValueError(f"map of shape {(Q, K)} but {len(query_pieces)} query and {len(key_pieces)} key labels")
    ent = entropy(w).mean(axis=-1)
    conf = w.max(axis=-1).mean(axis=-1)
    bos_idx = [j for j, p in enumerate(key_pieces) if p in BOS_PIECES]
    eos_idx = [j for j, p in enumerate(key_pieces) if p in EOS_PIECES]
    bos = w[..., bos_idx].sum(axis=-1).mean(axis=-1) if bos_idx else np.full((L, H), np.nan)
    eos = w[..., eos_idx].sum(axis=-1).mean(axis=-1) if eos_idx else np.full((L, H), np.nan)
    if kind in ("encoder", "decoder"):
        self_, prev, nxt = _offset_share(w, 0), _offset_share(w, -1), _offset_share(w, 1)
        if kind == "decoder":
            nxt = np.full((L, H), np.nan)  # masked: query i never sees key i + 1
    elif kind == "cross":
        self_ = prev = nxt = np.full((L, H), np.nan)
    else:
        raise ValueError(f"unknown attention kind {kind!r}")
    top = w.mean(axis=-2).argmax(axis=-1)
    rows = []
    for layer in range(L):
        for head in range(H):
            rows.append({
                "layer": layer + 1, "head": head + 1,
                "entropy": ent[layer, head], "confidence": conf[layer, head],
                "self": self_[layer, head], "previous": prev[layer, head], "next": nxt[layer, head],
                "bos": bos[layer, head], "eos": eos[layer, head],
                "max_key": key_pieces[int(top[layer, head])],
            })
    return pd.DataFrame(rows)


def top_k(probs: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``(ids (T, k) int, probs (T, k))`` of the k most probable next pieces at each of the ``T`` positions
    of ``probs (T, V)``, best first (k is clipped to ``[1, V]``)."""
    p = np.asarray(probs)
    k = max(1, min(int(k), p.shape[-1]))
    idx = np.argpartition(-p, k - 1, axis=-1)[..., :k]
    vals = np.take_along_axis(p, idx, axis=-1)
    order = np.argsort(-vals, axis=-1)
    return np.take_along_axis(idx, order, axis=-1), np.take_along_axis(vals, order, axis=-1)
