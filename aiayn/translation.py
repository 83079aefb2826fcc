"""What a translation call returns (:class:`Translation`, :class:`NextPieces`) and the input hygiene every text
goes through before it is tokenised (:func:`clean_text`). Plain data: no torch, so pages and
:mod:`aiayn.analysis` can import it for nothing.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: aiayn.model.maps imports torch
    from .model.maps import AttentionMaps


#: the languages of the shipped models, by code (for messages and cards: "German", not "de")
LANGUAGE_NAMES = {"en": "English", "de": "German"}


def clean_text(text: Any) -> str:
    """Input hygiene: control and format characters become spaces, whitespace is collapsed.

    Raises:
        ValueError: ``text`` is not a string, or is empty / whitespace-only after cleaning.
    """
    if not isinstance(text, str):
        raise ValueError(f"text to translate must be a string, got {type(text).__name__}")
    chars = [" " if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") else c for c in text]
    cleaned = " ".join("".join(chars).split())
    if not cleaned:
        raise ValueError("nothing to translate: the text is empty or only whitespace")
    return cleaned


@dataclass
class NextPieces:
    """The model's most probable next pieces at every decoder position (filled by
    :func:`aiayn.analysis.explain`).

    Attributes:
        pieces: ``T`` lists of ``k`` pieces, most probable first: ``pieces[i]`` are the candidates for
            ``output_tokens[i]`` after the decoder was fed ``decoder_input_tokens[: i + 1]``.
        probs: ``(T, k)`` float32 probabilities (softmax of the output layer) of ``pieces``, descending.
        chosen_prob: ``(T,)`` float32 probability of the piece that came next (``output_tokens[i]``).
    """

    pieces: list[list[str]]
    probs: np.ndarray
    chosen_prob: np.ndarray


@dataclass
class Translation:
    """One translated (or teacher-forced) sentence.

    Attributes:
        text: the translation (detokenised); with teacher forcing, the reference's pieces detokenised.
        source: the cleaned source text that was translated.
        src_tokens: SentencePiece pieces fed to the encoder (ending with ``</s>``): labels of encoder
            queries/keys and cross-attention keys, length S.
        output_tokens: pieces each decoder position predicted (ending with ``</s>`` unless cut at the max
            length), length T; with teacher forcing, the reference's pieces.
        decoder_input_tokens: pieces each decoder position was fed (the decoder start piece, ``<s>`` for our
            models and ``<pad>`` for Opus-MT, then ``output_tokens[:-1]``), length T: labels of decoder
            self-attention queries/keys and cross-attention queries.
        attention: :class:`~aiayn.model.maps.AttentionMaps` of this hypothesis (B=1): encoder
            ``(L, 1, H, S, S)``, decoder ``(L, 1, H, T, T)``, cross ``(L, 1, H, T, S)``; None when not requested.
        truncated: the source was longer than the model accepts and was cut.
        finished: the output ended with EOS (False: cut at the maximum output length).
        score: length-normalised log-probability (natural log) the beam ranked by (teacher-forced: the
            reference's total log-probability).
        log_prob: total log-probability of the output.
        src_ids: ids of ``src_tokens`` (S,).
        output_ids: ids of ``output_tokens`` (T,).
        nbest: ``(text, score)`` of the n best hypotheses, best first (empty when teacher-forced).
        elapsed_ms: wall time of the call, milliseconds (for a batch: the whole batch, with the encoder runs a
            :class:`aiayn.serving.DecodeQueue` made while it gathered).
        batch_size: how many sentences shared the beam search that made this one (1: decoded alone; more: a
            :meth:`~aiayn.translator.Translator.translate_batch`, e.g. sentences of several app sessions decoded
            together by :class:`aiayn.serving.DecodeQueue`).
        mode: ``"free-running"`` (beam search, Section 6.1) or ``"teacher-forced"``
            (:meth:`~aiayn.translator.Translator.force`).
        reference: the cleaned reference fed to the decoder when teacher-forced, else None.
        next_pieces: top-k next pieces at every position (:class:`NextPieces`), filled by
            :func:`aiayn.analysis.explain`; None otherwise.
        next_pieces_note: why ``next_pieces`` is None after :func:`aiayn.analysis.explain` (e.g. an empty
            output), else None.
    """

    text: str
    source: str
    src_tokens: list[str]
    output_tokens: list[str]
    decoder_input_tokens: list[str]
    attention: "AttentionMaps | None"
    truncated: bool
    finished: bool
    score: float
    log_prob: float
    src_ids: list[int] = field(default_factory=list, repr=False)
    output_ids: list[int] = field(default_factory=list, repr=False)
    nbest: list[tuple[str, float]] = field(default_factory=list)
    elapsed_ms: float = 0.0
    mode: str = "free-running"
    reference: str | None = None
    next_pieces: NextPieces | None = field(default=None, repr=False)
    next_pieces_note: str | None = None
    batch_size: int = 1
