"""Ancestral sampling: each next piece drawn from the model's distribution instead of the argmax (greedy) or the
beam (Section 6.1), with the usual knobs of text generation: temperature (Ackley, Hinton and Sejnowski 1985;
``softmax(logits / T)``), top-k (Fan, Lewis and Dauphin 2018) and nucleus / top-p (Holtzman et al. 2020,
"The Curious Case of Neural Text Degeneration": the smallest set of most probable pieces whose probability mass
reaches p). Draws come from a seeded :class:`torch.Generator`, so the same seed gives the same output.

The loop is :func:`aiayn.decoding.greedy_decode` with a ``pick`` rule: the key/value cache, the maximum length
(source length + 50), the ban on padding and the start piece and the stitched attention maps are the same.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import Tensor


def sampling_option_error(temperature: Any = 1.0, top_k: Any = 0, top_p: Any = 1.0, seed: Any = 0) -> str | None:
    """The message for the first bad sampling option, or None when all are valid: ``temperature`` a finite number
    > 0, ``top_k`` a whole number >= 0 (0: no top-k cut), ``top_p`` a number in (0, 1] (1: no nucleus cut),
    ``seed`` a whole number >= 0."""
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    if not number(temperature) or temperature <= 0:
        return f"temperature must be a finite number > 0 (1 samples the model's own distribution), got {temperature!r}"
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
        return f"top_k must be a whole number >= 0 (0 keeps every piece), got {top_k!r}"
    if not number(top_p) or not 0 < top_p <= 1:
        return f"top_p must be a number in (0, 1] (1 keeps every piece), got {top_p!r}"
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        return f"seed must be a whole number >= 0, got {seed!r}"
    return None


def check_sampling_options(**options: Any) -> None:
    """:func:`sampling_option_error` as an exception.

    Raises:
        ValueError: a bad option (the message names it).
    """
    message = sampling_option_error(**options)
    if message:
        raise ValueError(message)


def filtered_log_probs(logp: Tensor, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """The distribution sampling draws from: ``log_softmax(logp / temperature)`` restricted to the ``top_k`` most
    probable pieces (0: all) and then to the nucleus, the fewest most probable pieces whose tempered probability
    reaches ``top_p`` (the most probable piece always stays), renormalised.

    Args:
        logp: ``(N, V)`` float log-probabilities (``-inf`` allowed: never drawn).

    Returns:
        ``(N, V)`` float32 log-probabilities, ``-inf`` outside the kept pieces.
    """
    scaled = torch.log_softmax(logp.float() / temperature, dim=-1)
    if top_k and top_k < scaled.size(-1):
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_lp, order = scaled.sort(dim=-1, descending=True)
        mass_before = sorted_lp.exp().cumsum(-1) - sorted_lp.exp()  # mass of the more probable pieces
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def sampler(*, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
            generator: torch.Generator) -> Callable[[Tensor], Tensor]:
    """A ``pick`` rule for :func:`aiayn.decoding.greedy_decode`: ``(N, V)`` log-probabilities -> ``(N,)`` int64 ids
    drawn from :func:`filtered_log_probs` with ``generator`` (on the log-probabilities' device).

    Raises:
        ValueError: a bad option (:func:`check_sampling_options`).
    """
    check_sampling_options(temperature=temperature, top_k=top_k, top_p=top_p)

    def pick(logp: Tensor) -> Tensor:
        probs = filtered_log_probs(logp, temperature=temperature, top_k=top_k, top_p=top_p).exp()
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return pick
