"""Norm-based attention (Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing Transformers with Vector
Norms", EMNLP, Section 3): weight each attention weight by the norm of what it moves.

A head's output at query i is ``sum_j alpha_ij f(x_j)`` with ``f(x) = (x W_V^h + b_V^h) W_O^h`` (``W_O^h`` the rows of
``W^O`` that head h's ``d_v`` outputs meet, Section 3.2.2 of the paper; ``W^O``'s bias is added once after the heads
and belongs to no key). ``||alpha_ij f(x_j)|| = alpha_ij ||f(x_j)||`` says how much key j actually contributes: a
key with a large weight but a small transformed vector (special tokens, punctuation) contributes little.

NumPy only: weights come in as arrays in ``torch.nn.Linear``'s layout (``weight`` ``(out, in)``, ``bias``
``(out,)``), so ``x W`` here is ``x @ weight.T``.
"""
from __future__ import annotations

import numpy as np


def transformed_values(x: np.ndarray, w_v: np.ndarray, b_v: np.ndarray, w_o: np.ndarray, n_heads: int) -> np.ndarray:
    """``f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h`` for every head and key.

    Args:
        x: ``(S, d_model)`` the attention's key/value input (for cross-attention the encoder output).
        w_v, b_v: the value projection, ``(d_model, d_model)`` (out, in) and ``(d_model,)``.
        w_o: the output projection ``W^O`` weight ``(d_model, d_model)`` (out, in).
        n_heads: H; ``d_v = d_model / H``.

    Returns:
        ``(H, S, d_model)`` float64.

    Raises:
        ValueError: shapes that do not fit, ``d_model`` not divisible by ``n_heads``.
    """
    x, w_v, b_v, w_o = (np.asarray(a, dtype=np.float64) for a in (x, w_v, b_v, w_o))
    d = x.shape[-1]
    if x.ndim != 2 or w_v.shape != (d, d) or b_v.shape != (d,) or w_o.shape != (d, d) or d % n_heads:
        raise ValueError(f"want x (S, d), W_V and W_O (d, d), b_V (d,) with d divisible by {n_heads} heads; got "
                         f"{x.shape}, {w_v.shape}, {b_v.shape}, {w_o.shape}")
    d_v = d // n_heads
    v = (x @ w_v.T + b_v).reshape(x.shape[0], n_heads, d_v)  # (S, H, d_v)
    w_o_h = w_o.T.reshape(n_heads, d_v, d)  # rows of W^O (in x out) per head
    return np.einsum("shv,hvd->hsd", v, w_o_h)


def value_norms(x: np.ndarray, w_v: np.ndarray, b_v: np.ndarray, w_o: np.ndarray, n_heads: int) -> np.ndarray:
    """``||f_h(x_j)||`` (Euclidean): ``(H, S)`` float64; arguments as :func:`transformed_values`."""
    return np.linalg.norm(transformed_values(x, w_v, b_v, w_o, n_heads), axis=-1)


def norm_weighted(weights: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """Norm-based attention ``alpha_ij ||f(x_j)||``.

    Args:
        weights: ``(..., H, T, S)`` attention weights alpha (e.g. ``(L, H, T, S)``).
        norms: ``(..., H, S)`` :func:`value_norms` with the same leading dims.

    Returns:
        ``(..., H, T, S)`` float64 (not renormalised: the size is the point).

    Raises:
        ValueError: shapes that do not match.
    """
    w, n = np.asarray(weights, dtype=np.float64), np.asarray(norms, dtype=np.float64)
    if w.shape[:-2] != n.shape[:-1] or w.shape[-1] != n.shape[-1]:
        raise ValueError(f"weights {w.shape} and norms {n.shape} do not match (want (..., H, T, S) and (..., H, S))")
    return w * n[..., None, :]


def norm_based(weights: np.ndarray, kv_inputs: np.ndarray, params: list, n_heads: int) -> np.ndarray:
    """Norm-based attention of a stack of layers of one kind: ``alpha_ij ||f_h(x_j)||`` for every layer, sentence
    and head.

    Args:
        weights: ``(L, B, H, Q, K)`` attention weights.
        kv_inputs: ``(L, B, K, D)`` each layer's key/value input x (self-attention: what the sub-layer reads,
            post-LN the residual stream, pre-LN its LayerNorm; cross-attention: the encoder output).
        params: one ``(w_v, b_v, w_o)`` per layer, as :func:`transformed_values`.
        n_heads: H.

    Returns:
        ``(L, B, H, Q, K)`` float64.

    Raises:
        ValueError: shapes that do not fit.
    """
    w, x = np.asarray(weights), np.asarray(kv_inputs)
    if w.ndim != 5 or x.ndim != 4 or w.shape[:2] != x.shape[:2] or w.shape[-1] != x.shape[2] or len(params) != w.shape[0]:
        raise ValueError(f"want weights (L, B, H, Q, K), inputs (L, B, K, D) and L params; got {w.shape}, {x.shape}, "
                         f"{len(params)}")
    return np.stack([norm_weighted(w[l], np.stack([value_norms(xb, *params[l], n_heads) for xb in x[l]]))
                     for l in range(w.shape[0])])
