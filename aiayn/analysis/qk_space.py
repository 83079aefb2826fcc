"""Queries and keys of one head in one space (AttentionViz: Yeh et al. 2023, "AttentionViz: A Global View of
Transformer Attention", IEEE VIS, Section 4): a head's attention ``softmax(q_i . k_j / sqrt(d_k))`` (Eq. 1 of the
paper) is a dot product between two sets of ``d_k``-vectors, so both sets are drawn in one 2-D projection, where a
query near a key tends to attend to it.

Two changes of the vectors leave every attention weight as it was (AttentionViz's normalisation), and make
distance in the picture closer to the score:

* **Translation of the keys.** ``q_i . (k_j + c) = q_i . k_j + q_i . c``: the added term is the same for every key
  of query i, and softmax is unchanged by a constant added to a row. The keys are moved so their mean is the
  queries' mean (otherwise the two sets can sit far apart and every query looks far from every key).
* **Scaling.** ``(a q_i) . (k_j / a) = q_i . k_j``: queries and keys are scaled so their mean norms are equal.

The projection is PCA of the joint set (NumPy SVD, deterministic signs); AttentionViz also offers t-SNE and UMAP,
which fit many sentences better but are not deterministic and are not used here. How faithful the 2-D picture is
for a sentence is measured, not assumed: :attr:`QKSpace.rank_agreement`.

NumPy only (Spearman's rho from :func:`aiayn.analysis.attribution.rank_agreement`); the vectors come from
:func:`aiayn.calls.query_keys`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .attribution import rank_agreement


@dataclass
class QKSpace:
    """One head's queries and keys, normalised and projected (:func:`qk_space`).

    Attributes:
        query_xy: ``(N, 2)`` float64 the queries' coordinates (first two principal components).
        key_xy: ``(M, 2)`` float64 the keys' coordinates.
        explained: ``(2,)`` the share of the joint set's variance each component holds (0..1).
        weights: ``(N, M)`` the head's attention weights ``softmax(q . k / sqrt(d_k))`` over the allowed keys (0
            elsewhere): Eq. 1 recomputed from the vectors, equal to the captured map.
        allowed: ``(N, M)`` bool, the keys each query may attend to (the decoder's causal mask, Section 3.2.3).
        top_key: ``(N,)`` int64 the key each query gives the most weight.
        rank_agreement: the mean over queries (with 3 or more allowed keys) of the Spearman correlation between
            the scores and the negated 2-D distances: 1 when the picture orders every query's keys as the head
            does, about 0 when it says nothing; NaN when no query has 3 keys.
        scale: the factor the queries were multiplied by (the keys divided by it).
    """

    query_xy: np.ndarray
    key_xy: np.ndarray
    explained: np.ndarray
    weights: np.ndarray
    allowed: np.ndarray
    top_key: np.ndarray
    rank_agreement: float
    scale: float


def normalise(queries: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """AttentionViz's normalisation: keys moved so their mean is the queries' mean, then queries scaled by ``a``
    and keys by ``1 / a`` so both sets have the same mean norm. Every query's attention weights are unchanged.

    Args:
        queries: ``(N, d_k)``; keys: ``(M, d_k)``.

    Returns:
        ``(queries (N, d_k), keys (M, d_k), a)`` float64.

    Raises:
        ValueError: not two 2-D arrays of the same width, or an empty set.
    """
    q, k = np.asarray(queries, dtype=np.float64), np.asarray(keys, dtype=np.float64)
    if q.ndim != 2 or k.ndim != 2 or q.shape[1] != k.shape[1] or not len(q) or not len(k):
        raise ValueError(f"need queries (N, d_k) and keys (M, d_k) of one width, got {q.shape} and {k.shape}")
    k = k - k.mean(0) + q.mean(0)
    nq, nk = np.linalg.norm(q, axis=1).mean(), np.linalg.norm(k, axis=1).mean()
    a = float(np.sqrt(nk / nq)) if nq > 0 and nk > 0 else 1.0
    return q * a, k / a, a


def _pca2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(coordinates (n, 2), explained (2,))`` of the rows of ``x`` on their first two principal components; each
    component's sign makes its largest loading positive (so the picture does not flip between runs)."""
    centred = x - x.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    vt = vt[:2]
    vt = vt * np.sign(vt[np.arange(len(vt)), np.abs(vt).argmax(1)])[:, None]
    coords = centred @ vt.T
    if coords.shape[1] < 2:  # d_k = 1, or a single point: the second axis is 0
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    total = float((s ** 2).sum())
    explained = np.zeros(2)
    explained[:min(2, len(s))] = (s[:2] ** 2) / total if total > 0 else 0.0
    return coords, explained


def position_in_group(groups: np.ndarray) -> np.ndarray:
    """``(n,)`` int64: each element's index within its run of equal group ids (sentences given one after another)."""
    pos = np.zeros(len(groups), dtype=np.int64)
    for i in range(1, len(groups)):
        pos[i] = pos[i - 1] + 1 if groups[i] == groups[i - 1] else 0
    return pos


def qk_space(queries: np.ndarray, keys: np.ndarray, *, causal: bool = False,
             groups: tuple[np.ndarray, np.ndarray] | None = None) -> QKSpace:
    """One head's queries and keys in one 2-D space (module docstring).

    Args:
        queries: ``(N, d_k)`` the head's queries ``x W^Q`` (no padding).
        keys: ``(M, d_k)`` its keys.
        causal: the decoder's masked self-attention (query i may attend to keys 0..i of its sentence).
        groups: ``((N,), (M,))`` int sentence ids, each sentence's rows one after another, for many sentences in
            one picture (AttentionViz's global view): a query attends to its own sentence's keys only, and the
            normalisation and the projection are over all of them. None: one sentence.

    Returns:
        :class:`QKSpace`.

    Raises:
        ValueError: as :func:`normalise`; ``causal`` with a sentence whose query and key counts differ; groups of
            the wrong lengths.
    """
    q, k, a = normalise(queries, keys)
    n, m = len(q), len(k)
    gq, gk = (np.zeros(n, np.int64), np.zeros(m, np.int64)) if groups is None else (np.asarray(g) for g in groups)
    if len(gq) != n or len(gk) != m:
        raise ValueError(f"groups of {len(gq)} and {len(gk)} for {n} queries and {m} keys")
    allowed = gq[:, None] == gk[None, :]
    if causal:
        if any((gq == g).sum() != (gk == g).sum() for g in np.unique(np.concatenate([gq, gk]))):
            raise ValueError(f"a causal head attends over its own positions: {n} queries but {m} keys")
        allowed &= position_in_group(gq)[:, None] >= position_in_group(gk)[None, :]
    scores = np.asarray(queries, np.float64) @ np.asarray(keys, np.float64).T / np.sqrt(q.shape[1])
    masked = np.where(allowed, scores, -np.inf)
    weights = np.exp(masked - masked.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    coords, explained = _pca2(np.concatenate([q, k]))
    qxy, kxy = coords[:n], coords[n:]
    distance = np.linalg.norm(qxy[:, None, :] - kxy[None, :, :], axis=-1)
    rhos = [rank_agreement(scores[i, cols], -distance[i, cols])[0]
            for i, cols in ((i, np.flatnonzero(allowed[i])) for i in range(n)) if len(cols) >= 3]
    rho = float(np.nanmean(rhos)) if not np.isnan(rhos).all() else float("nan")  # NaN rows: constant scores
    return QKSpace(qxy, kxy, explained, weights, allowed, weights.argmax(1), rho, a)
