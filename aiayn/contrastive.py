"""Why this piece and not that one: contrastive attribution on a sentence's own translation (Yin and Neubig 2022,
"Interpreting Language Models with Contrastive Explanations", EMNLP). At output step t the model chose ``y_t``; a
foil ``y'_t`` is another piece it could have written there. Gradient x input (or integrated gradients) of
``log p(y_t) - log p(y'_t)`` says which source and prefix pieces push the model toward its choice (positive) and
which toward the foil (negative): "Mathe" rather than "Matte" because of "mat"?

The model calls go through :func:`aiayn.calls.teacher_forced_ids` (the alternatives at each step) and
:func:`aiayn.calls.attribute` (``foil_ids``); this module only picks the step and the foil and shapes the result.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:  # annotations only
    from .translator import Translator


@dataclass
class Alternatives:
    """The k most probable pieces at each output step of a teacher-forced pass over an output.

    Attributes:
        output_tokens: ``T`` pieces of the output (``</s>`` last).
        ids: ``(T, k)`` int64 the most probable pieces at each step, most probable first.
        pieces: ``T`` lists of k piece strings.
        probs: ``(T, k)`` float32 their probabilities.
        chosen_probs: ``(T,)`` float32 the probability of the piece the output has at each step.
    """

    output_tokens: list[str]
    ids: np.ndarray
    pieces: list[list[str]]
    probs: np.ndarray
    chosen_probs: np.ndarray


@dataclass
class Contrast:
    """Attribution of ``log p(chosen) - log p(foil)`` at one step (:func:`contrast`).

    Attributes:
        step: the output step t (0-based).
        chosen / foil: the two pieces; chosen_prob / foil_prob: their probabilities at t.
        source: ``(S,)`` float64 signed attribution to each source piece (positive: toward ``chosen``).
        prefix: ``(t + 1,)`` float64 to each decoder-input piece up to t (the later ones cannot matter: masked).
        src_tokens: ``S`` source pieces; prefix_tokens: the ``t + 1`` decoder-input pieces.
        difference: ``log p(chosen) - log p(foil)`` (nats) at t.
        method: ``"grad_x_input"`` or ``"integrated_gradients"``.
    """

    step: int
    chosen: str
    foil: str
    chosen_prob: float
    foil_prob: float
    source: np.ndarray
    prefix: np.ndarray
    src_tokens: list[str]
    prefix_tokens: list[str]
    difference: float
    method: str


def alternatives(tr: "Translator", src_ids: Sequence[int], output_ids: Sequence[int], k: int = 5) -> Alternatives:
    """The ``k`` most probable pieces at each step of ``output_ids`` (teacher-forced).

    Raises:
        ValueError: ``k`` not in ``[1, vocab_size]``, ids malformed (as :func:`aiayn.calls.teacher_forced_ids`).
    """
    import torch

    from . import calls

    if not 1 <= k <= tr.cfg.vocab_size:
        raise ValueError(f"k must be between 1 and {tr.cfg.vocab_size}, got {k}")
    forced = calls.teacher_forced_ids(tr.model, [list(src_ids)], [list(output_ids)])
    probs = forced.log_probs[0, :len(output_ids)].exp().float().cpu()
    top = torch.topk(probs, k, dim=-1)
    ids = top.indices.numpy()
    chosen = probs.gather(-1, torch.tensor([[int(i)] for i in output_ids])).squeeze(-1).numpy()
    return Alternatives(tr.pieces(list(output_ids)), ids, [tr.pieces(row) for row in ids.tolist()],
                        top.values.numpy(), chosen)


def contrast(tr: "Translator", src_ids: Sequence[int], output_ids: Sequence[int], step: int, foil_id: int, *,
             method: str = "grad_x_input", steps: int = 64) -> Contrast:
    """Contrastive attribution of the output's piece at ``step`` against ``foil_id`` (module docstring).

    Args:
        tr: the Translator.
        src_ids: the source ids (ending with ``</s>``); output_ids: the output's ids (ending with ``</s>``).
        step: 0-based output step; foil_id: the piece to contrast with (not the chosen one).
        method, steps: as :func:`aiayn.calls.attribute`.

    Raises:
        ValueError: ``step`` outside the output, ``foil_id`` equal to the chosen piece or outside the vocabulary,
            and as :func:`aiayn.calls.attribute`.
    """
    from . import calls

    out = [int(i) for i in output_ids]
    if not 0 <= step < len(out):
        raise ValueError(f"step must be between 0 and {len(out) - 1}, got {step}")
    if int(foil_id) == out[step]:
        raise ValueError(f"the foil must differ from the chosen piece {tr.pieces([out[step]])[0]!r}")
    # the decoder is causal: step t depends on the output up to t only, so the pass stops there, and only step t is
    # attributed (one backward pass per path point, not one per output piece)
    head = out[:step + 1]
    foils = head[:-1] + [int(foil_id)]
    attr = calls.attribute(tr.model, src_ids, head, method=method, steps=steps, foil_ids=foils, positions=[step])
    alt = calls.teacher_forced_ids(tr.model, [list(src_ids)], [head]).log_probs[0, step].exp().float().cpu()
    return Contrast(step, tr.pieces([out[step]])[0], tr.pieces([int(foil_id)])[0], float(alt[out[step]]),
                    float(alt[int(foil_id)]), np.asarray(attr.source[step], dtype=np.float64),
                    np.asarray(attr.prefix[step, :step + 1], dtype=np.float64), tr.pieces(list(src_ids)),
                    tr.pieces(attr.decoder_input[:step + 1]), float(attr.log_prob[step]), method)


def foil_from_text(tokenizer, text: str) -> int | None:
    """The piece a user means by ``text`` in the "instead of it" box: a word-initial piece ``▁text`` when the
    vocabulary has it (``der`` -> ``▁der``), else the piece ``text`` itself (``atte``, the rest of a word; ``_`` may
    stand for ``▁``), else the first piece of ``text`` as target-language text (``Matte`` -> ``▁M``); None for
    empty text. Unknown pieces are never returned as such (``piece_to_id`` gives ``unk_id`` for them)."""
    from . import calls

    text = text.strip().replace("_", "▁")
    if not text:
        return None
    unk = getattr(tokenizer, "unk_id", None)
    for piece in ([text] if text.startswith("▁") else ["▁" + text, text]):
        i = int(tokenizer.piece_to_id(piece))
        if i != unk:
            return i
    ids = calls.encode_target(tokenizer, text)
    return int(ids[0]) if ids else None
