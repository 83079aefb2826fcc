"""Reverse-model reranking of the beam's n-best list: a noisy channel without its language model.

Beam search (Section 6.1) ranks hypotheses ``y`` of a source ``x`` by the forward model alone: the length-normalised
``log P(y | x)`` (GNMT penalty, alpha). A translation that drops or invents content can score well there, since
nothing asks whether ``y`` still says all of ``x``. The model of the other direction can: ``log P(x | y)`` is low
when ``x`` cannot be recovered from ``y``. This module rescores the n-best list of one beam search by

    score(y) = forward score(y) + weight * log P(x | y) / |x|

where ``|x|`` counts the source's pieces and ``</s>`` as the reverse model reads them, and returns the list in the
new order. It is the direct + channel part of Yee et al. (2019), "Simple and Effective Noisy Channel Modeling for
Neural Machine Translation" (their language-model term left out: we ship no language model), applied to an n-best
list as the MMI-bidi reranking of Li et al. (2016), "A Diversity-Promoting Objective Function for Neural Conversation
Models" (log P(T | S) + lambda log P(S | T)). ``weight`` 0 keeps the beam's order.

The default weight (:data:`DEFAULT_WEIGHT`) was chosen on the Ding valid split, apart from the test split and the
development sets that judge it (docs/decoding.md, "Reverse-model reranking").
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

__all__ = ["DEFAULT_WEIGHT", "Reranked", "add_cli_options", "check_weight", "cli_weight", "rerank", "rerank_batch",
           "reverse_direction", "reverse_for"]

#: the reverse model's weight the app and ``--rerank`` use by default (chosen on the Ding valid split)
DEFAULT_WEIGHT = 0.5
#: the largest weight accepted: beyond it the reverse model alone decides, which is not what this is for
MAX_WEIGHT = 10.0


@dataclass(frozen=True)
class Reranked:
    """One hypothesis of the n-best list, rescored.

    Attributes:
        text: the hypothesis.
        beam_rank: its place in the beam's own n-best list (0 = the beam's output).
        forward_score: the beam's score, length-normalised ``log P(y | x)`` (natural log; the GNMT penalty).
        reverse_log_prob: ``log P(x | y)`` under the reverse model, natural log, summed over the source's pieces
            and ``</s>``; ``-inf`` for an empty hypothesis (nothing to translate back from).
        source_pieces: ``|x|``, the pieces the reverse model predicts (source pieces + ``</s>``).
        score: ``forward_score + weight * reverse_log_prob / source_pieces`` (``-inf`` for an empty hypothesis,
            unless ``weight`` is 0: then the forward score).
        source_tokens: the source's pieces as the reverse model reads them, ``</s>`` last.
        reverse_piece_log_probs: ``log P(x_i | y, x_<i)`` of each of them (their sum is ``reverse_log_prob``; empty
            for an empty hypothesis). A piece the reverse model cannot get back is one ``y`` may have left out or
            changed: what the Translate page draws (:func:`aiayn.figures.reranking.recovery_bars`).
    """

    text: str
    beam_rank: int
    forward_score: float
    reverse_log_prob: float
    source_pieces: int
    score: float
    source_tokens: tuple[str, ...] = ()
    reverse_piece_log_probs: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reverse_direction(direction: str) -> str:
    """``"en-de"`` -> ``"de-en"``. Raises ValueError for a string that is not ``"xx-yy"`` with two languages."""
    src, sep, tgt = str(direction).partition("-")
    if not sep or not src or not tgt or src == tgt or "-" in tgt:
        raise ValueError(f"direction must look like 'en-de', got {direction!r}")
    return f"{tgt}-{src}"


def check_weight(weight: Any) -> float:
    """``weight`` as a float in ``[0, MAX_WEIGHT]``. Raises ValueError (one line) otherwise (bools, NaN, inf)."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
            or not 0.0 <= weight <= MAX_WEIGHT:
        raise ValueError(f"the reverse model's weight must be a number from 0 to {MAX_WEIGHT:g}, got {weight!r}")
    return float(weight)


def rerank_batch(sources: Sequence[str], nbests: Sequence[Sequence[tuple[str, float]]], reverse: Any,
                 weight: float = DEFAULT_WEIGHT) -> list[list[Reranked]]:
    """Rescore the n-best lists of several sources with one reverse model, its pairs batched together.

    Args:
        sources: the texts the forward model translated.
        nbests: per source, ``[(hypothesis, forward score)]`` best first, as
            :attr:`aiayn.translation.Translation.nbest` holds them.
        reverse: the :class:`~aiayn.translator.Translator` of the opposite direction: one teacher-forced pass of it
            per 64 hypotheses (:func:`aiayn.calls.pair_log_probs`; its sources are the hypotheses, its targets the
            sources here).
        weight: the reverse model's weight (:func:`check_weight`); 0 keeps the beam's order.

    Returns:
        per source, its :class:`Reranked` hypotheses best first (ties keep the beam's order).

    Raises:
        ValueError: unequal lengths, an empty n-best list, a bad weight, a source the reverse model cannot read
            (empty, not a string).
    """
    from . import calls  # torch: only when something is reranked

    weight = check_weight(weight)
    sources = list(sources)
    if len(sources) != len(nbests):
        raise ValueError(f"{len(sources)} sources but {len(nbests)} n-best lists")
    if any(not nb for nb in nbests):
        raise ValueError("an n-best list is empty: nothing to rerank")
    tokens = []  # x: the pieces (and </s>) the reverse model predicts of each source
    for i, src in enumerate(sources):
        try:
            tokens.append(tuple(reverse.pieces(calls.encode_reference(reverse.tokenizer, reverse.cfg, src).ids)))
        except ValueError as exc:
            raise ValueError(f"source {i}: {exc}") from None
    pairs = [(i, r, str(h), float(s)) for i, nb in enumerate(nbests) for r, (h, s) in enumerate(nb)]
    scored = [p for p in pairs if p[2].strip()]  # an empty output cannot be fed to the reverse model's encoder
    found = calls.pair_log_probs(reverse.model, reverse.tokenizer, [h for _, _, h, _ in scored],
                                 [sources[i] for i, _, _, _ in scored], batch_size=64)
    per_piece = {(i, r): tuple(row) for (i, r, _, _), row in zip(scored, found)}
    out: list[list[Reranked]] = [[] for _ in sources]
    for i, r, h, s in pairs:
        pieces = per_piece.get((i, r), ())
        lp = float(sum(pieces)) if (i, r) in per_piece else -math.inf
        n = len(tokens[i])
        score = s if weight == 0.0 else s + weight * lp / n if lp > -math.inf else -math.inf
        out[i].append(Reranked(h, r, s, lp, n, score, tokens[i], pieces))
    return [sorted(row, key=lambda x: (-x.score, x.beam_rank)) for row in out]


def rerank(source: str, nbest: Sequence[tuple[str, float]], reverse: Any,
           weight: float = DEFAULT_WEIGHT) -> list[Reranked]:
    """:func:`rerank_batch` of one source's n-best list (``Translation.nbest``); the same errors."""
    return rerank_batch([source], [nbest], reverse, weight)[0]


def reverse_for(translator: Any, direction: str, checkpoint: Any = None, *, device: Any = None) -> Any:
    """The reverse model for ``translator`` translating ``direction``: the Translator of ``checkpoint`` if given,
    else ``translator`` itself when one model serves both directions (language tags), else the shipped checkpoint
    of the opposite direction (:func:`aiayn.translator.default_checkpoint`), turned to the reverse direction.

    Raises:
        ValueError (one line): a malformed direction; a checkpoint that cannot be loaded or does not translate the
            reverse direction. (A vocabulary other than the forward model's is fine: each model reads its own
            pieces.)
    """
    from .translator import Translator, default_checkpoint

    back = reverse_direction(direction)
    if checkpoint is None and back in (translator.meta.get("directions") or []):
        return translator.for_direction(back)
    path = default_checkpoint(back) if checkpoint is None else checkpoint
    try:
        reverse = Translator.load(path, device=device if device is not None else translator.device)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        raise ValueError(f"no reverse model for {direction}: {exc}") from None
    return reverse.for_direction(back)


def add_cli_options(ap: Any) -> None:
    """``--rerank``, ``--rerank-weight W`` and ``--reverse CHECKPOINT`` on an argparse parser (the commands that
    decode); :func:`cli_weight` reads them back."""
    ap.add_argument("--rerank", action="store_true",
                    help="rerank the beam's n-best list with the reverse model: forward score + weight x log P(source | "
                         "output) per source piece (Yee et al. 2019; not in the paper); without it, the paper's beam search")
    ap.add_argument("--rerank-weight", type=float, default=None, metavar="W",
                    help=f"the reverse model's weight (implies --rerank; default {DEFAULT_WEIGHT:g}, chosen on the Ding "
                         "valid split)")
    ap.add_argument("--reverse", default=None, metavar="CHECKPOINT",
                    help="the reverse model for --rerank (default: the same model if it serves both directions, "
                         "else the shipped checkpoint of the opposite direction)")


def cli_weight(args: Any) -> float | None:
    """The reverse model's weight a command line asked for (:func:`add_cli_options`), or None: no reranking.

    Raises:
        ValueError (one line): a bad weight; ``--reverse`` without ``--rerank``.
    """
    if args.rerank_weight is not None:
        return check_weight(args.rerank_weight)
    if args.rerank:
        return DEFAULT_WEIGHT
    if args.reverse is not None:
        raise ValueError("--reverse is the reverse model of --rerank; pass --rerank too")
    return None
