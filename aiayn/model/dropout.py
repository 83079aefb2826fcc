"""Dropout ``P_drop`` (Section 5.4; Srivastava et al. 2014) with a cheaper keep mask on the CPU.

``torch.nn.Dropout`` draws its mask with ``bernoulli_``: one call of the Mersenne Twister per element, on a 2-core
CPU about 6 ms for one ``(4080, 256)`` activation, 7 % of a training step of the shipped shape (docs/training.md,
"Session 38"). :class:`Dropout` draws one 64-bit random word per four elements instead and keeps an element when its
16-bit quarter of the word is at or above ``p`` of the 16-bit range, so ``p`` is rounded to a multiple of 1/65,536
(0.1 -> 0.100006) and the kept elements are scaled by ``1 / (1 - p)`` of that rounded ``p`` (the output's expectation
is the input's, as in inverted dropout). Same distribution of masks, about a seventh of the random-number time.

The way is a module attribute (``impl``), set once when a model is built for training (:func:`set_dropout_impl`),
never per call: ``"words"`` (the default; on a CPU outside ``torch.compile``), ``"bernoulli"`` (``F.dropout``, the
loop before session 38, which the ``trainer`` benchmark's old loop keeps). On CUDA and under ``torch.compile``
``F.dropout`` is used either way. Nothing is drawn in eval mode or at ``p = 0``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: the ways :class:`Dropout` may draw its mask (``TrainConfig.dropout_impl``)
DROPOUT_IMPLS = ("words", "bernoulli")

_LANES = 4  # 16-bit thresholds per 64-bit random word
_RANGE = 1 << 16


def _check_p(p: float) -> float:
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p!r}")
    return float(p)


def rounded_p(p: float) -> float:
    """The drop probability the ``"words"`` way realises for ``p``: ``round(p * 65536) / 65536``."""
    return round(p * _RANGE) / _RANGE


def keep_noise(shape: torch.Size | tuple[int, ...], p: float, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu", generator: torch.Generator | None = None) -> Tensor:
    """The multiplier of one dropout call, drawn from 16-bit thresholds (four per 64-bit random word).

    Args:
        shape: the activation's shape.
        p: drop probability in ``[0, 1)``.
        dtype / device: of the result.
        generator: a ``torch.Generator``; None = the default generator of ``device`` (seeded by ``torch.manual_seed``).

    Returns:
        ``shape``, ``dtype``: 0 where an element is dropped, ``1 / (1 - rounded_p(p))`` where it is kept.

    Raises:
        ValueError: ``p`` outside ``[0, 1)``.
    """
    _check_p(p)
    n = 1
    for size in shape:
        n *= int(size)
    words = torch.empty((n + _LANES - 1) // _LANES, dtype=torch.int64, device=device)
    words.random_(-(1 << 63), None, generator=generator)  # the full 64-bit range: every 16-bit lane uniform
    lanes = words.view(torch.int16)[:n].view(shape)
    threshold = round(p * _RANGE) - _RANGE // 2  # int16 lanes run from -32768: keep the top (1 - p) of them
    kept = torch.tensor(1.0 / (1.0 - rounded_p(p)), dtype=dtype, device=device)
    return torch.where(lanes >= threshold, kept, torch.zeros((), dtype=dtype, device=device))  # one pass, in dtype


class Dropout(nn.Module):
    """``nn.Dropout(p)`` with the mask drawn as :func:`keep_noise` on a CPU (``impl="words"``); ``(*) -> (*)``.

    Args:
        p: drop probability ``P_drop`` in ``[0, 1)`` (the paper: 0.1 for the base model).
        impl: ``"words"`` or ``"bernoulli"`` (:data:`DROPOUT_IMPLS`).

    Raises:
        ValueError: ``p`` outside ``[0, 1)`` or an unknown ``impl``.
    """

    def __init__(self, p: float = 0.1, impl: str = "words") -> None:
        super().__init__()
        if impl not in DROPOUT_IMPLS:
            raise ValueError(f"dropout impl must be one of {DROPOUT_IMPLS}, got {impl!r}")
        self.p = _check_p(p)
        self.impl = impl

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.impl == "bernoulli" or x.device.type != "cpu" or torch.compiler.is_compiling():
            return F.dropout(x, self.p, training=True)
        # autograd saves the multiplier (not x) for the backward pass, as F.dropout does
        return x * keep_noise(x.shape, self.p, dtype=x.dtype, device=x.device)

    def extra_repr(self) -> str:
        return f"p={self.p}, impl={self.impl!r}"


def set_dropout_impl(model: nn.Module, impl: str) -> int:
    """Set how every :class:`Dropout` of ``model`` draws its mask (once, when a model is built for training).

    Returns:
        The number of :class:`Dropout` modules set.

    Raises:
        ValueError: an unknown ``impl``.
    """
    if impl not in DROPOUT_IMPLS:
        raise ValueError(f"dropout_impl must be one of {', '.join(DROPOUT_IMPLS)}, got {impl!r}")
    modules = [m for m in model.modules() if isinstance(m, Dropout)]
    for m in modules:
        m.impl = impl
    return len(modules)
