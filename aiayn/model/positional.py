"""Positional encodings (Section 3.5) and the maths the app shows about them.

``PE(pos, 2i) = sin(pos / 10000^(2i / d_model))``, ``PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))``:
sines on even dimensions, cosines on odd ones ("interleaved", the paper). tensor2tensor concatenates
all sines then all cosines ("concatenated"); both are offered for comparison.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

LAYOUTS = ("interleaved", "concatenated")


def _check(max_len: int, d_model: int) -> None:
    if not isinstance(max_len, int) or max_len <= 0:
        raise ValueError(f"max_len must be a positive integer, got {max_len!r}")
    if not isinstance(d_model, int) or d_model <= 0 or d_model % 2:
        raise ValueError(f"d_model must be a positive even integer, got {d_model!r}")


def frequencies(d_model: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Angular frequencies ``omega_i = 1 / 10000^(2i / d_model)``, ``(d_model / 2,)``, radians per position.

    Wavelengths ``2 pi / omega_i`` form a geometric progression from ``2 pi`` to ``10000 * 2 pi``
    (Section 3.5).
    """
    _check(1, d_model)
    two_i = torch.arange(0, d_model, 2, dtype=dtype)
    return torch.exp(-math.log(10000.0) * two_i / d_model)


def sinusoidal_encoding(
    max_len: int, d_model: int, *, layout: str = "interleaved", dtype: torch.dtype = torch.float32
) -> Tensor:
    """The sinusoidal table of Section 3.5, ``(max_len, d_model)``.

    Args:
        max_len: number of positions (0 .. max_len-1).
        d_model: model width, even.
        layout: ``"interleaved"`` (sin on even, cos on odd dimensions: the paper) or ``"concatenated"``
            (all sines, then all cosines: tensor2tensor).
    Raises:
        ValueError: non-positive sizes, odd ``d_model`` or unknown layout.
    """
    _check(max_len, d_model)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    angles = pos * frequencies(d_model).unsqueeze(0)  # (max_len, d_model/2)
    if layout == "interleaved":
        pe = torch.empty(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angles)
        pe[:, 1::2] = torch.cos(angles)
    else:
        pe = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    return pe.to(dtype)


def offset_matrix(k: int, d_model: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """The fixed linear map ``M_k`` with ``PE(pos + k) = M_k PE(pos)`` for every pos (Section 3.5:
    "PE_{pos+k} can be represented as a linear function of PE_pos"), interleaved layout.

    ``M_k`` is block diagonal with one 2x2 rotation per frequency omega_i:
    ``[[cos(omega_i k), sin(omega_i k)], [-sin(omega_i k), cos(omega_i k)]]`` acting on (sin, cos).

    Returns:
        ``(d_model, d_model)`` float64 (apply as ``PE @ M_k.T`` to row vectors).
    """
    _check(1, d_model)
    w = frequencies(d_model) * k
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    m[idx, idx] = torch.cos(w)
    m[idx, idx + 1] = torch.sin(w)
    m[idx + 1, idx] = -torch.sin(w)
    m[idx + 1, idx + 1] = torch.cos(w)
    return m.to(dtype)


def similarity_matrix(pe: Tensor) -> Tensor:
    """Dot products ``PE(p) . PE(q)`` for all position pairs, ``(P, P)`` from ``pe`` ``(P, d_model)``.

    For the sinusoidal table it equals ``sum_i cos(omega_i (p - q))``: it depends on the offset only.
    """
    return pe @ pe.transpose(0, 1)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds nothing learnable: returns ``PE[start : start + T]`` as ``(T, d_model)`` (Section 3.5).

    The table is a non-persistent buffer (never saved in a checkpoint; recomputed from the config).
    ``layout`` as :func:`sinusoidal_encoding` (``"concatenated"`` is Marian's table, position 0 first, no offset).
    """

    def __init__(self, d_model: int, max_len: int, layout: str = "interleaved") -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model, layout=layout), persistent=False)

    def forward(self, length: int, start: int = 0) -> Tensor:
        if start + length > self.table.size(0):
            raise ValueError(f"sequence of {start + length} positions exceeds max_len={self.table.size(0)}")
        return self.table[start : start + length]


class LearnedPositionalEmbedding(nn.Module):
    """Learned positional embeddings (Table 3, row (E)): one trained vector per position, ``(T, d_model)``."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * d_model**-0.5)

    def forward(self, length: int, start: int = 0) -> Tensor:
        if start + length > self.weight.size(0):
            raise ValueError(f"sequence of {start + length} positions exceeds max_len={self.weight.size(0)}")
        return self.weight[start : start + length]
