"""Section 3.2.1 lab: scaled dot-product attention, Equation 1, ``softmax(Q K^T / sqrt(d_k)) V``. Why the
``1 / sqrt(d_k)``: dot products of random vectors have variance d_k (footnote 4), and unscaled they saturate
the softmax; and Equation 1 one stage at a time on small matrices, checked against
:func:`aiayn.model.attention.scaled_dot_product_attention`.

Every function returns numpy arrays, pandas frames or small dataclasses (float64).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ..model.attention import scaled_dot_product_attention
from .inputs import MAX_D_K, MAX_SAMPLES, LessonInputError, as_int


def check_d_k(d_k: Any) -> int:
    """Validate ``1 <= d_k <= MAX_D_K``; raises :class:`LessonInputError`."""
    d_k = as_int(d_k, "d_k")
    if not 1 <= d_k <= MAX_D_K:
        raise LessonInputError(f"d_k must be between 1 and {MAX_D_K}, got {d_k}")
    return d_k


def random_dot_products(d_k: int, n: int = 20000, seed: int = 0) -> np.ndarray:
    """``n`` dot products ``q . k`` of independent q, k with N(0, 1) components, ``(n,)`` float64.

    Their mean is 0 and their variance is ``d_k`` (footnote 4 of the paper), which is why Equation 1
    divides by ``sqrt(d_k)``.
    """
    d_k = check_d_k(d_k)
    n = as_int(n, "number of samples")
    if not 1 <= n or n * d_k > 50_000_000 or n > MAX_SAMPLES:
        raise LessonInputError(f"number of samples must be between 1 and {MAX_SAMPLES} (and n*d_k <= 5e7), got {n}")
    g = np.random.default_rng(seed)
    q = g.standard_normal((n, d_k))
    k = g.standard_normal((n, d_k))
    return np.einsum("nd,nd->n", q, k)


def softmax_sharpness(d_ks: Sequence[int], n_keys: int = 16, n_queries: int = 500, seed: int = 0) -> pd.DataFrame:
    """Entropy (nats) and largest weight of ``softmax(q . k_j)`` over ``n_keys`` random keys, unscaled vs
    divided by ``sqrt(d_k)``, averaged over ``n_queries`` random queries, for each ``d_k``.

    Returns:
        frame with columns d_k, scaling ("unscaled" / "scaled by 1/sqrt(d_k)"), entropy, max_weight,
        max_entropy (``log n_keys``, the uniform distribution's).
    """
    rows = []
    n_keys = as_int(n_keys, "number of keys")
    if not 2 <= n_keys <= 1024:
        raise LessonInputError(f"number of keys must be between 2 and 1024, got {n_keys}")
    for d_k in d_ks:
        d_k = check_d_k(d_k)
        g = np.random.default_rng([seed, d_k])
        q = g.standard_normal((n_queries, 1, d_k))
        k = g.standard_normal((n_queries, n_keys, d_k))
        s = (q * k).sum(-1)
        for name, x in (("unscaled", s), ("scaled by 1/sqrt(d_k)", s / math.sqrt(d_k))):
            w = torch.softmax(torch.from_numpy(x), dim=-1).numpy()
            ent = -(w * np.log(np.clip(w, 1e-300, None))).sum(-1)
            rows.append({"d_k": d_k, "scaling": name, "entropy": float(ent.mean()),
                         "max_weight": float(w.max(-1).mean()), "max_entropy": math.log(n_keys)})
    return pd.DataFrame(rows)


@dataclass
class AttentionSteps:
    """Equation 1 on small matrices, one stage at a time (float64).

    Attributes:
        scores: ``Q K^T`` ``(T, S)``. scaled: ``/ sqrt(d_k)``. masked: ``-inf`` where ``mask`` is False.
        weights: row softmax ``(T, S)`` (rows with every key masked are 0). output: ``weights V`` ``(T, d_v)``.
        reference_output / reference_weights: :func:`aiayn.model.attention.scaled_dot_product_attention` on the
        same input; max_abs_diff: the largest difference between the two (output and weights).
    """

    scores: np.ndarray
    scaled: np.ndarray
    masked: np.ndarray
    weights: np.ndarray
    output: np.ndarray
    reference_output: np.ndarray
    reference_weights: np.ndarray
    max_abs_diff: float


def attention_steps(q: Any, k: Any, v: Any, mask: Any | None = None) -> AttentionSteps:
    """``softmax(Q K^T / sqrt(d_k)) V`` step by step, checked against the library function.

    Args:
        q: ``(T, d_k)``; k: ``(S, d_k)``; v: ``(S, d_v)``; mask: ``(T, S)`` bool, True = may attend, or None.
    Raises:
        LessonInputError: non-numeric / non-finite entries or mismatched shapes.
    """
    def arr(x, name):
        try:
            a = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise LessonInputError(f"{name} must hold numbers only") from None
        if a.ndim != 2 or 0 in a.shape:
            raise LessonInputError(f"{name} must be a non-empty matrix, got shape {a.shape}")
        if not np.isfinite(a).all():
            raise LessonInputError(f"{name} has empty or non-finite cells; fill every cell with a number")
        return a

    q, k, v = arr(q, "Q"), arr(k, "K"), arr(v, "V")
    if q.shape[1] != k.shape[1]:
        raise LessonInputError(f"Q and K need the same number of columns d_k, got {q.shape[1]} and {k.shape[1]}")
    if k.shape[0] != v.shape[0]:
        raise LessonInputError(f"K and V need the same number of rows (keys), got {k.shape[0]} and {v.shape[0]}")
    m = None
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != (q.shape[0], k.shape[0]):
            raise LessonInputError(f"mask must have shape {(q.shape[0], k.shape[0])}, got {m.shape}")
    d_k = q.shape[1]
    scores = q @ k.T
    scaled = scores / math.sqrt(d_k)
    masked = scaled if m is None else np.where(m, scaled, -np.inf)
    mx = np.max(masked, axis=-1, keepdims=True)
    ok = np.isfinite(mx)
    e = np.where(np.isfinite(masked), np.exp(masked - np.where(ok, mx, 0.0)), 0.0)
    den = e.sum(-1, keepdims=True)
    weights = np.where(ok, e / np.where(den > 0, den, 1.0), 0.0)
    output = weights @ v
    tq, tk, tv = (torch.tensor(x)[None, None] for x in (q, k, v))
    tm = None if m is None else torch.tensor(m)[None, None]
    ref = scaled_dot_product_attention(tq, tk, tv, tm, need_weights=True)
    ref_out, ref_w = ref.output[0, 0].numpy(), ref.weights[0, 0].numpy()
    diff = float(max(np.abs(ref_out - output).max(), np.abs(ref_w - weights).max()))
    return AttentionSteps(scores, scaled, masked, weights, output, ref_out, ref_w, diff)


def names(prefix: str, n: int) -> list[str]:
    """``[prefix0, prefix1, ...]``: the labels of the lab's tables and maps, counted from 0 everywhere (row i of
    the Q table is the map's query ``q{i}``, column ``v{j}`` of the V table the output's column ``v{j}``)."""
    return [f"{prefix}{i}" for i in range(n)]


def example_qkv() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The lab's starting matrices: Q (3 queries x d_k = 3), K (4 keys x 3), V (4 keys x d_v = 2), float64, with
    0-based row indexes and columns ``d0..`` / ``v0..`` (:func:`names`), as the maps label them."""
    q = pd.DataFrame([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0]], columns=names("d", 3))
    k = pd.DataFrame([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 2.0]], columns=names("d", 3))
    v = pd.DataFrame([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]], columns=names("v", 2))
    return q, k, v
