"""Timing helpers: warm-up then repeat, medians and percentiles, device synchronisation.

Times are wall-clock seconds from :func:`time.perf_counter`. On CUDA every timed call is bracketed by
``torch.cuda.synchronize`` so that queued kernels are counted.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between order statistics (numpy's
    default, "type 7" of Hyndman & Fan).

    Raises:
        ValueError: ``values`` is empty or ``q`` is outside [0, 100].
    """
    if len(values) == 0:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= float(q) <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q!r}")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def median(values: Sequence[float]) -> float:
    """Median (the 50th percentile; the mean of the two middle values for an even count).

    Raises:
        ValueError: ``values`` is empty.
    """
    return percentile(values, 50.0)


@dataclass
class Stats:
    """Summary of repeated timings, seconds: ``median``, ``p95``, ``min``, ``max``, ``n`` samples."""

    median: float
    p95: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Stats":
        """Summarise ``samples`` (seconds). Raises ValueError when empty."""
        return cls(median(samples), percentile(samples, 95.0), float(min(samples)), float(max(samples)), len(samples))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def synchronize(device: torch.device | str | None) -> None:
    """Wait for queued work on ``device`` (a no-op on CPU or when CUDA is absent)."""
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], Any], device: torch.device | str | None = None) -> float:
    """Seconds taken by one call of ``fn`` (synchronised on CUDA)."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def repeat(fn: Callable[[], Any], *, warmup: int, repeats: int, device: torch.device | str | None = None) -> list[float]:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times timed; returns the timings (seconds).

    Raises:
        ValueError: ``warmup < 0`` or ``repeats < 1``.
    """
    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}")
    for _ in range(warmup):
        fn()
    return [time_call(fn, device) for _ in range(repeats)]


def interleaved(fns: dict[str, Callable[[], Any]], *, warmup: int, repeats: int, device: torch.device | str | None = None) -> dict[str, list[float]]:
    """Time several callables in alternation (a b a b ...), so that slow drifts of a shared machine hit
    them alike; returns ``{name: timings}``. Each gets ``warmup`` untimed calls first."""
    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            out[k].append(time_call(fn, device))
    return out
