"""Gradient attribution beside attention: gradient x input, integrated gradients, the source's share of each
prediction and the rank agreement of attribution with attention.

* **Gradient x input** (Shrikumar et al. 2016; Denil et al. 2014): ``a_i = x_i . d f / d x_i`` for an input
  embedding ``x_i`` ``(D,)``, summed over the embedding dimensions.
* **Integrated gradients** (Sundararajan et al. 2017, "Axiomatic Attribution for Deep Networks", ICML, Eq. 1 and
  Section 3): ``IG_i = (x_i - x'_i) . int_0^1 d f(x' + a (x - x')) / d x_i da`` on the straight line from a
  baseline x' to the input x, approximated by the trapezoidal rule on ``steps`` intervals (or Gauss-Legendre
  quadrature, better for smooth integrands; the paper's Riemann sum, Section 3, converges more slowly). A ReLU
  network's path wiggles: f can move far more along the path than f(x) - f(x'), so completeness to 1% can take
  hundreds of steps. *Completeness* (their Proposition 1): the attributions of
  all inputs sum to ``f(x) - f(x')``; :func:`completeness_gap` measures how far the approximation is from it.
* **The source's share** of a prediction (Voita et al. 2021, "Analyzing the Source and Target Contributions to
  Predictions in Neural Machine Translation", ACL, Section 2), here from absolute attributions:
  ``sum_s |a_s| / (sum_s |a_s| + sum_t |a_t|)`` over source pieces s and target-prefix pieces t.
* **Rank agreement** of attribution with an attention row (Jain and Wallace 2019, Section 4.1: Kendall's tau
  between attention and gradient importance): Spearman's rho and Kendall's tau-b from :mod:`scipy.stats`, NaN
  where a row is constant (a rank correlation is undefined) or has fewer than two entries.

The gradients come from a function ``f(inputs) -> (m, K)`` over a list of ``(m, n_i, D)`` input tensors (m points
at once, K outputs); :func:`aiayn.calls.attribute` builds that function for a translation model (the outputs are
each target piece's log-probability, the inputs the source and decoder-input embeddings).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

#: ``f(inputs) -> (m, K)``: K scalar outputs at each of m input points; ``inputs`` a list of ``(m, n_i, D)``.
Function = Callable[[list], "object"]


class Attribution(NamedTuple):
    """Per-input-piece attributions of K outputs.

    Attributes:
        scores: one float64 array ``(K, n_i)`` per input (the attribution summed over the embedding dimensions).
        value: ``(K,)`` float64 ``f(x)``.
        baseline_value: ``(K,)`` float64 ``f(x')`` (integrated gradients; NaN for gradient x input).
    """

    scores: list
    value: np.ndarray
    baseline_value: np.ndarray


def gradients(f: Function, inputs: Sequence) -> tuple[list, "object"]:
    """``d f_k / d inputs`` for every output k.

    Args:
        f: see :data:`Function`.
        inputs: ``(m, n_i, D)`` float tensors (not modified).

    Returns:
        ``(grads, values)``: grads a list of ``(m, K, n_i, D)`` float tensors (one per input), values ``(m, K)``
        ``f(inputs)``, both detached.

    Raises:
        ValueError: ``f`` does not return an ``(m, K)`` tensor.
    """
    import torch

    with torch.enable_grad():
        xs = [x.detach().clone().requires_grad_(True) for x in inputs]
        out = f(xs)
        m = xs[0].size(0)
        if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.size(0) != m:
            raise ValueError(f"f must return an (m={m}, K) tensor, got {getattr(out, 'shape', type(out))}")
        per_k = []
        for k in range(out.size(1)):
            per_k.append(torch.autograd.grad(out[:, k].sum(), xs, retain_graph=k + 1 < out.size(1),
                                             allow_unused=True))
    grads = [torch.stack([g[i] if g[i] is not None else torch.zeros_like(xs[i]) for g in per_k], dim=1)
             for i in range(len(xs))]
    return grads, out.detach()


def grad_times_input(f: Function, inputs: Sequence) -> Attribution:
    """Gradient x input of every output at ``inputs`` (a list of ``(n_i, D)`` tensors, one point)."""
    grads, values = gradients(f, [x[None] for x in inputs])
    scores = [(g[0] * x[None].to(g.dtype)).sum(-1).double().cpu().numpy() for g, x in zip(grads, inputs)]
    v = values[0].double().cpu().numpy()
    return Attribution(scores, v, np.full_like(v, np.nan))


def trapezoid_weights(steps: int) -> np.ndarray:
    """Weights of the trapezoidal rule on ``steps`` equal intervals of [0, 1]: ``(steps + 1,)``, summing to 1.

    Raises:
        ValueError: ``steps`` not a whole number >= 1.
    """
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a whole number >= 1, got {steps!r}")
    w = np.full(steps + 1, 1.0 / steps)
    w[[0, -1]] /= 2
    return w


def path_rule(steps: int, rule: str = "trapezoid") -> tuple[np.ndarray, np.ndarray]:
    """Points alpha in [0, 1] and weights (summing to 1) of the integral over the straight-line path.

    ``"gauss_legendre"`` (``steps`` nodes, exact for polynomials of degree ``2 steps - 1``; Captum's default for
    the same integral) or ``"trapezoid"`` (``steps`` equal intervals, ``steps + 1`` points, :func:`trapezoid_weights`).

    Raises:
        ValueError: unknown rule, ``steps`` not a whole number >= 1.
    """
    if rule == "trapezoid":
        return np.linspace(0.0, 1.0, trapezoid_weights(steps).size), trapezoid_weights(steps)
    if rule != "gauss_legendre":
        raise ValueError(f"unknown rule {rule!r}; choose 'gauss_legendre' or 'trapezoid'")
    trapezoid_weights(steps)  # the same check of steps
    nodes, weights = np.polynomial.legendre.leggauss(int(steps))
    return (nodes + 1.0) / 2.0, weights / 2.0


def integrated_gradients(f: Function, inputs: Sequence, baselines: Sequence, steps: int = 32, *,
                         rule: str = "trapezoid", chunk: int = 16) -> Attribution:
    """Integrated gradients (Sundararajan et al. 2017, Eq. 1) of every output, all inputs moved together on the
    straight line from ``baselines`` to ``inputs``.

    Args:
        f: see :data:`Function`.
        inputs, baselines: lists of ``(n_i, D)`` tensors of equal shapes.
        steps: nodes of the quadrature :func:`path_rule` (``"trapezoid"``: intervals, one more point).
        rule: ``"trapezoid"`` (default: robust to the kinks ReLU puts in the path) or ``"gauss_legendre"``
            (fewer steps for a smooth integrand).
        chunk: path points per call of ``f`` (bounds memory).

    Returns:
        :class:`Attribution` with ``baseline_value`` (``f`` at both ends, one extra call of ``f``).

    Raises:
        ValueError: mismatched shapes; unknown rule; ``steps`` or ``chunk`` not a whole number >= 1.
    """
    import torch

    alphas_np, w = path_rule(steps, rule)
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError(f"chunk must be a whole number >= 1, got {chunk!r}")
    if len(inputs) != len(baselines) or any(x.shape != b.shape for x, b in zip(inputs, baselines)):
        raise ValueError("inputs and baselines must be lists of tensors of equal shapes")
    alphas = torch.as_tensor(alphas_np, dtype=inputs[0].dtype, device=inputs[0].device)
    total = [None] * len(inputs)
    for start in range(0, alphas.numel(), chunk):
        a = alphas[start:start + chunk]
        points = [b[None] + a[:, None, None] * (x - b)[None] for x, b in zip(inputs, baselines)]
        grads, _ = gradients(f, points)
        wt = torch.as_tensor(w[start:start + chunk], dtype=grads[0].dtype, device=grads[0].device)
        for i, g in enumerate(grads):
            part = (g * wt[:, None, None, None]).sum(0)  # (K, n_i, D)
            total[i] = part if total[i] is None else total[i] + part
    scores = [(t * (x - b)[None].to(t.dtype)).sum(-1).detach().double().cpu().numpy()
              for t, x, b in zip(total, inputs, baselines)]
    with torch.no_grad():
        ends = f([torch.stack([b, x]) for x, b in zip(inputs, baselines)]).double().cpu().numpy()
    return Attribution(scores, ends[1], ends[0])


def completeness_gap(attr: Attribution) -> np.ndarray:
    """``|sum_i IG_i - (f(x) - f(x'))| / |f(x) - f(x')|`` per output: ``(K,)`` float64 (Sundararajan et al.'s
    check that enough steps were taken; they suggest staying within 5%). NaN where ``f(x) = f(x')``."""
    total = sum(s.sum(-1) for s in attr.scores)
    diff = attr.value - attr.baseline_value
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(diff != 0, np.abs(total - diff) / np.abs(diff), np.nan)


def source_share(source: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """The source's share of each prediction from absolute attributions (Voita et al. 2021 style).

    Args:
        source: ``(T, S)`` attributions of each output to the source pieces.
        prefix: ``(T, T')`` attributions to the decoder-input pieces.

    Returns:
        ``(T,)`` float64 in [0, 1]; NaN where both are all zero.

    Raises:
        ValueError: different numbers of rows.
    """
    s, p = np.abs(np.asarray(source, dtype=np.float64)), np.abs(np.asarray(prefix, dtype=np.float64))
    if s.ndim != 2 or p.ndim != 2 or s.shape[0] != p.shape[0]:
        raise ValueError(f"want (T, S) and (T, T') with the same T, got {s.shape} and {p.shape}")
    num, den = s.sum(-1), s.sum(-1) + p.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / den, np.nan)


def rank_agreement(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """``(Spearman's rho, Kendall's tau-b)`` of two 1-D arrays (:func:`rank_agreements` of one row, which gives
    what :func:`scipy.stats.spearmanr` and :func:`scipy.stats.kendalltau` give); ``(nan, nan)`` when either is
    constant or has fewer than two entries (rank correlations are undefined there: no warning, no made-up number).
    Ties are handled by average ranks (Spearman) and tau-b's tie correction (Kendall).

    Raises:
        ValueError: not 1-D arrays of equal length, or non-finite values.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"want two 1-D arrays of equal length, got {a.shape} and {b.shape}")
    rho, tau = rank_agreements(a[None], b[None])[0]
    return float(rho), float(tau)


def rank_agreements(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rho and Kendall's tau-b of each row of ``a`` with the same row of ``b``, all rows at once.

    Spearman's rho is Pearson's r of the average ranks (:func:`scipy.stats.rankdata`, :func:`scipy.stats.pearsonr`
    along the last axis). Kendall's tau-b (Kendall 1945) is ``sum_{i<j} sgn(a_i - a_j) sgn(b_i - b_j) /
    sqrt(n_a n_b)``, where ``n_a`` counts the pairs not tied in ``a`` and ``n_b`` those not tied in ``b``: the
    statistic of :func:`scipy.stats.kendalltau` (variant "b"), computed over every pair of every row with NumPy,
    because scipy's takes one row a call, and a sentence has thousands of rows (every head, row and reading).

    Args:
        a, b: ``(R, n)`` float arrays of equal shape.

    Returns:
        ``(R, 2)`` float64 ``(rho, tau)`` per row; NaN where a row of either is constant or ``n < 2``.

    Raises:
        ValueError: shapes that are not ``(R, n)`` and equal; non-finite values.
    """
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"want two (R, n) arrays of equal shape, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("rank agreement of non-finite values")
    out = np.full((a.shape[0], 2), np.nan)
    if a.shape[1] < 2:
        return out
    ok = (np.ptp(a, axis=1) > 0) & (np.ptp(b, axis=1) > 0)
    if not ok.any():
        return out
    a, b = a[ok], b[ok]
    out[ok, 0] = stats.pearsonr(stats.rankdata(a, axis=1), stats.rankdata(b, axis=1), axis=1).statistic
    tau = np.empty(len(a))
    step = max(1, _PAIR_BLOCK // a.shape[1] ** 2)  # rows per block: the (rows, n, n) signs stay about 16 MB each
    for i in range(0, len(a), step):
        sa = np.sign(a[i:i + step, :, None] - a[i:i + step, None, :])  # each pair twice, the diagonal 0: the 2s cancel
        sb = np.sign(b[i:i + step, :, None] - b[i:i + step, None, :])
        tau[i:i + step] = np.einsum("rij,rij->r", sa, sb) / np.sqrt(np.einsum("rij,rij->r", sa, sa)
                                                                   * np.einsum("rij,rij->r", sb, sb))
    out[ok, 1] = tau
    return out


#: pair signs per block in :func:`rank_agreements` (float64): a sentence's rows of a paper-size model at 100 pieces
#: would otherwise need about 400 MB per side at once
_PAIR_BLOCK = 1 << 21


def row_agreement(attr: np.ndarray, maps: np.ndarray) -> np.ndarray:
    """Rank agreement of each attribution row with the same row of one or many attention maps.

    Args:
        attr: ``(T, S)`` importance of each source piece for each output (e.g. ``|IG|``).
        maps: ``(..., T, S)`` attention rows (a head ``(T, S)``, heads ``(L, H, T, S)``...).

    Returns:
        ``(..., T, 2)`` float64: Spearman's rho and Kendall's tau per row (NaN as :func:`rank_agreement`).

    Raises:
        ValueError: shapes that do not match; non-finite values.
    """
    attr, maps = np.asarray(attr, dtype=np.float64), np.asarray(maps, dtype=np.float64)
    if attr.ndim != 2 or maps.shape[-2:] != attr.shape:
        raise ValueError(f"want attr (T, S) and maps (..., T, S) with the same (T, S), got {attr.shape}, {maps.shape}")
    flat = maps.reshape(-1, *attr.shape)
    rows = rank_agreements(np.broadcast_to(attr, flat.shape).reshape(-1, attr.shape[1]), flat.reshape(-1, attr.shape[1]))
    return rows.reshape(*maps.shape[:-1], 2)


#: the attention readings :func:`agreement_readings` compares attribution with.
READINGS = ("heads", "head_mean", "rollout", "norm_heads", "norm_head_mean")


def agreement_readings(attr: np.ndarray, cross: np.ndarray, rolled: np.ndarray, normed: np.ndarray) -> dict:
    """Rank agreement (:func:`row_agreement`) of one sentence's source attribution with every attention reading.

    Args:
        attr: ``(T, S)`` importance of each source piece for each target piece (e.g. ``|IG|``).
        cross: ``(L, H, T, S)`` cross-attention weights.
        rolled: ``(T, S)`` cross-attention rollout up to the last layer (:func:`aiayn.analysis.flow.rollout`).
        normed: ``(L, H, T, S)`` norm-based cross attention (:func:`aiayn.analysis.norms.norm_weighted`).

    Returns:
        ``{reading: (..., T, 2)}`` for :data:`READINGS`: ``heads`` / ``norm_heads`` ``(L, H, T, 2)``,
        ``head_mean`` / ``norm_head_mean`` (layer-wise head mean) ``(L, T, 2)``, ``rollout`` ``(T, 2)``.
    """
    return {"heads": row_agreement(attr, cross), "head_mean": row_agreement(attr, np.mean(cross, axis=1)),
            "rollout": row_agreement(attr, rolled), "norm_heads": row_agreement(attr, normed),
            "norm_head_mean": row_agreement(attr, np.mean(normed, axis=1))}


def mean_agreement(per_sentence: Sequence[dict]) -> dict:
    """The mean over every row of every sentence (NaN rows left out) of :func:`agreement_readings`' results:
    ``{reading: {"spearman": array, "kendall": array, "rows": array}}`` with the leading dims of each reading
    (``(L, H)``, ``(L,)`` or ``()``); ``rows`` counts the defined rows.

    Raises:
        ValueError: no sentence.
    """
    if not per_sentence:
        raise ValueError("no sentence to average over")
    out = {}
    for name in per_sentence[0]:
        rows = np.concatenate([np.moveaxis(s[name], -2, 0) for s in per_sentence])  # (rows, ..., 2)
        ok = ~np.isnan(rows)
        n = ok.sum(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, np.nansum(rows, axis=0) / np.maximum(n, 1), np.nan)
        out[name] = {"spearman": mean[..., 0], "kendall": mean[..., 1], "rows": n[..., 0]}
    return out
