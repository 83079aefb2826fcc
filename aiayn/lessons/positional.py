"""Section 3.5 lab: the sinusoidal positional encoding. Its table, the wavelengths of its sin/cos pairs
(a geometric progression from 2 pi to 10000 * 2 pi), the dot product ``PE(p) . PE(q)`` that depends on ``q - p``
only, the linear map ``M_k`` with ``PE(pos + k) = M_k PE(pos)``, and, on a loaded model, the norms of what
Section 3.5 adds together (scaled token embeddings and positions) and a learned position table (Table 3 (E)).

Every function returns numpy arrays, pandas frames or small dataclasses and reads models without changing them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ..model.positional import frequencies, offset_matrix, similarity_matrix, sinusoidal_encoding
from ..model.transformer import Transformer
from .inputs import MAX_PE_D_MODEL, MAX_PE_LENGTH, LessonInputError, as_int


def check_pe_size(length: Any, d_model: Any) -> tuple[int, int]:
    """Validate a PE table request: ``1 <= length <= MAX_PE_LENGTH``, ``d_model`` even in ``[2, MAX_PE_D_MODEL]``.

    Returns:
        ``(length, d_model)`` as ints.
    Raises:
        LessonInputError: with a message naming the bad value.
    """
    length, d_model = as_int(length, "length"), as_int(d_model, "d_model")
    if not 1 <= length <= MAX_PE_LENGTH:
        raise LessonInputError(f"length must be between 1 and {MAX_PE_LENGTH} positions, got {length}")
    if d_model < 2 or d_model > MAX_PE_D_MODEL:
        raise LessonInputError(f"d_model must be between 2 and {MAX_PE_D_MODEL}, got {d_model}")
    if d_model % 2:
        raise LessonInputError(
            f"d_model must be even (dimensions come in sin/cos pairs, Section 3.5), got {d_model}"
        )
    return length, d_model


def pe_matrix(length: int, d_model: int, layout: str = "interleaved") -> np.ndarray:
    """The sinusoidal table ``(length, d_model)`` float64 (Section 3.5), after :func:`check_pe_size`.

    Raises:
        LessonInputError: bad size or layout.
    """
    length, d_model = check_pe_size(length, d_model)
    try:
        return sinusoidal_encoding(length, d_model, layout=layout, dtype=torch.float64).numpy()
    except ValueError as exc:
        raise LessonInputError(str(exc)) from None


def wavelengths(d_model: int) -> np.ndarray:
    """Wavelength ``2 pi * 10000^(2i / d_model)`` of each sin/cos pair i, ``(d_model / 2,)`` in positions.

    A geometric progression from ``2 pi`` (i = 0) towards ``10000 * 2 pi`` (Section 3.5).
    """
    _, d_model = check_pe_size(1, d_model)
    return (2.0 * math.pi / frequencies(d_model)).numpy()


def pe_curves(length: int, d_model: int, dims: Sequence[int]) -> pd.DataFrame:
    """Long frame (position, dimension, kind "sin"/"cos", pair i, wavelength, value) for chosen dimensions.

    Raises:
        LessonInputError: a dimension outside ``[0, d_model)`` or no dimension chosen.
    """
    length, d_model = check_pe_size(length, d_model)
    dims = [as_int(d, "dimension") for d in dims]
    if not dims:
        raise LessonInputError("choose at least one dimension to plot")
    bad = [d for d in dims if not 0 <= d < d_model]
    if bad:
        raise LessonInputError(f"dimensions must be in 0..{d_model - 1}, got {bad}")
    pe = pe_matrix(length, d_model)
    wl = wavelengths(d_model)
    frames = []
    for d in dict.fromkeys(dims):
        frames.append(pd.DataFrame({
            "position": np.arange(length),
            "dimension": d,
            "kind": "sin" if d % 2 == 0 else "cos",
            "pair_i": d // 2,
            "wavelength": wl[d // 2],
            "value": pe[:, d],
        }))
    return pd.concat(frames, ignore_index=True)


@dataclass
class SimilarityLesson:
    """``PE(p) . PE(q)`` for all position pairs and its offset profile.

    Attributes:
        matrix: ``(P, P)`` float64 dot products.
        offsets: ``(2P-1,)`` int offsets ``k = q - p`` from ``-(P-1)`` to ``P-1``.
        profile: ``(2P-1,)`` ``sum_i cos(omega_i k)``, the value the formula predicts for each offset.
        max_deviation: ``max |matrix[p, q] - profile(q - p)|``: ~1e-12 shows it depends on the offset only.
    """

    matrix: np.ndarray
    offsets: np.ndarray
    profile: np.ndarray
    max_deviation: float


def pe_similarity(length: int, d_model: int) -> SimilarityLesson:
    """Similarity of positions under the sinusoidal encoding (Section 3.5): it depends on ``q - p`` only,
    since ``sin a sin b + cos a cos b = cos(a - b)``."""
    pe = torch.from_numpy(pe_matrix(length, d_model))
    sim = similarity_matrix(pe).numpy()
    offsets = np.arange(-(length - 1), length)
    omega = frequencies(d_model).numpy()
    profile = np.cos(np.outer(offsets, omega)).sum(axis=1)
    p, q = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    dev = float(np.abs(sim - profile[(q - p) + length - 1]).max())
    return SimilarityLesson(sim, offsets, profile, dev)


@dataclass
class OffsetLesson:
    """The linear map ``M_k`` with ``PE(pos + k) = M_k PE(pos)`` checked on a table.

    Attributes:
        k: the offset (positions).
        matrix: ``(D, D)`` float64 ``M_k`` (block diagonal 2x2 rotations).
        predicted: ``(P - |k|, D)`` rows ``M_k PE(pos)``; actual: ``PE(pos + k)`` for the same pos.
        positions: the ``pos`` of each row.
        max_error: ``max |predicted - actual|``.
    """

    k: int
    matrix: np.ndarray
    predicted: np.ndarray
    actual: np.ndarray
    positions: np.ndarray
    max_error: float


def pe_offset_map(k: Any, length: int, d_model: int) -> OffsetLesson:
    """Compute ``M_k`` (:func:`aiayn.model.positional.offset_matrix`) and verify it on every ``pos`` with
    ``0 <= pos, pos + k < length``.

    Raises:
        LessonInputError: ``|k| >= length`` (no position pair to check) or bad sizes.
    """
    length, d_model = check_pe_size(length, d_model)
    k = as_int(k, "offset k")
    if abs(k) >= length:
        raise LessonInputError(f"offset k must satisfy |k| < length = {length}, got {k}")
    pe = pe_matrix(length, d_model)
    m = offset_matrix(k, d_model).numpy()
    pos = np.arange(max(0, -k), min(length, length - k))
    predicted = pe[pos] @ m.T
    actual = pe[pos + k]
    return OffsetLesson(k, m, predicted, actual, pos, float(np.abs(predicted - actual).max()))


def embedding_norms(model: Transformer, length: int | None = None) -> pd.DataFrame:
    """Norms of what Section 3.5 adds together: ``||sqrt(d_model) * E[token]||`` for every vocabulary row
    of the (target) embedding, and ``||PE(pos)||`` for the first ``length`` positions (default max_len).

    Returns:
        long frame with columns ``what`` ("scaled token embedding" / "positional encoding"), ``index``
        (token id or position) and ``norm`` (L2). For the sinusoids ``||PE(pos)|| = sqrt(d_model / 2)``.
    """
    cfg = model.cfg
    table = model.embedding if cfg.share_embeddings else model.tgt_embedding
    with torch.no_grad():
        emb = table.weight.detach().double() * math.sqrt(cfg.d_model)
        e_norm = emb.norm(dim=1).cpu().numpy()
        n = min(length or cfg.max_len, cfg.max_len)
        if cfg.positional == "sinusoidal":
            pe = sinusoidal_encoding(n, cfg.d_model, dtype=torch.float64)
        else:
            pe = model.tgt_positions.weight.detach().double()[:n].cpu()
        p_norm = pe.norm(dim=1).numpy()
    return pd.concat([
        pd.DataFrame({"what": "scaled token embedding", "index": np.arange(len(e_norm)), "norm": e_norm}),
        pd.DataFrame({"what": f"positional encoding ({cfg.positional})", "index": np.arange(n), "norm": p_norm}),
    ], ignore_index=True)


def learned_positions(model: Transformer, side: str = "tgt", length: int | None = None) -> np.ndarray | None:
    """The learned position table ``(length, D)`` float64 of a model trained with ``positional="learned"``
    (Table 3 row (E)), or None for a sinusoidal model."""
    if model.cfg.positional != "learned":
        return None
    if side not in ("src", "tgt"):
        raise LessonInputError(f"side must be 'src' or 'tgt', got {side!r}")
    w = (model.src_positions if side == "src" else model.tgt_positions).weight.detach()
    n = min(length or w.size(0), w.size(0))
    return w[:n].double().cpu().numpy()

