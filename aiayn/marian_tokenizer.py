"""Opus-MT's tokenization on ``sentencepiece`` alone: an imported Marian checkpoint loads without ``transformers``.

A Marian model (Tiedemann and Thottingal 2020) segments text with two SentencePiece models, one per language
(``source.spm``, ``target.spm``), and maps pieces to ids through its own joint vocabulary (``vocab.json``; the
SentencePiece ids are not the model's). :class:`MarianSentencePiece` does what Hugging Face's ``MarianTokenizer``
does, with the interface of :class:`aiayn.tokenizer.Tokenizer` that :class:`aiayn.Translator` and the analysis use:

* encode: a leading language code ``>>xx<<`` (multilingual targets) is kept as one piece; the rest is cut by the
  source model into pieces, each looked up in ``vocab.json`` (a piece missing there is ``<unk>``); the caller
  appends ``</s>`` (:func:`aiayn.calls.encode_source`), as ``MarianTokenizer`` does.
* decode: ids back to pieces through the inverse vocabulary; ``</s>``, ``<pad>`` and ``<unk>`` dropped
  (``skip_special_tokens=True``); the target model's detokenisation (``decode_pieces``), "▁" read as a space,
  the ends stripped.

``transformers`` 5 decodes a joint vocabulary through the *source* model; the text is the same unless a piece is a
byte or control piece in one model and not in the other (both models detokenise any other piece to itself).

No torch, no ``transformers``. The file names live in :mod:`aiayn.checkpoint_format`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

import sentencepiece as spm

from .checkpoint_format import MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB

__all__ = ["MarianSentencePiece", "is_marian_checkpoint"]

SPIECE_UNDERLINE = "\u2581"
_SPECIALS = re.compile(r"(</s>|<unk>|<pad>)")


def is_marian_checkpoint(directory: str | Path) -> bool:
    """True when ``directory`` holds Marian's tokenizer files (``vocab.json`` and ``source.spm``)."""
    d = Path(directory)
    return (d / MARIAN_VOCAB).is_file() and (d / MARIAN_SOURCE_SPM).is_file()


def _processor(path: Path) -> spm.SentencePieceProcessor:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file missing: {path}")
    data = path.read_bytes()
    try:
        sp = spm.SentencePieceProcessor(model_proto=data)
    except (RuntimeError, OSError) as exc:
        raise ValueError(f"{path} is not a valid SentencePiece model ({exc})") from None
    if sp.get_piece_size() <= 0:
        raise ValueError(f"{path} is not a valid SentencePiece model (no pieces)")
    return sp


def _read_vocab(path: Path) -> dict[str, int]:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file missing: {path}")
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(vocab, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                              for k, v in vocab.items()):
        raise ValueError(f"{path} is not a Marian vocabulary (a JSON object piece -> id)")
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))):
        raise ValueError(f"{path}: the ids are not 0 .. {len(ids) - 1}, each once")
    for piece in ("</s>", "<unk>", "<pad>"):
        if piece not in vocab:
            raise ValueError(f"{path} has no {piece} piece")
    return vocab


class MarianSentencePiece:
    """Marian's tokenizer (source and target SentencePiece models + ``vocab.json``), without ``transformers``.

    Build with :meth:`load` (a checkpoint directory written by ``aiayn import-marian``). Holds no per-call state,
    so one instance serves many threads. ``bos_id`` is the model config's nominal one (Marian has no ``<s>``; the
    decoder starts from ``<pad>``, see :func:`aiayn.interop_marian.from_marian`).
    """

    def __init__(self, source: spm.SentencePieceProcessor, target: spm.SentencePieceProcessor,
                 vocab: dict[str, int], *, bos_id: int, name: str = "<memory>") -> None:
        self._src, self._tgt = source, target
        self._vocab = dict(vocab)
        self._pieces = {i: p for p, i in self._vocab.items()}
        self.pad_id, self.eos_id, self.unk_id = vocab["<pad>"], vocab["</s>"], vocab["<unk>"]
        self.bos_id = int(bos_id)
        self._skip = frozenset((self.pad_id, self.eos_id, self.unk_id))
        self._specials = frozenset(("</s>", "<unk>", "<pad>"))
        self.source = name

    @classmethod
    def load(cls, directory: str | Path, *, bos_id: int) -> "MarianSentencePiece":
        """Read ``source.spm``, ``target.spm`` and ``vocab.json`` of a checkpoint directory.

        Raises:
            FileNotFoundError: a file is missing (named). ValueError: a file is not what it should be (named).
        """
        d = Path(directory)
        vocab = _read_vocab(d / MARIAN_VOCAB)
        return cls(_processor(d / MARIAN_SOURCE_SPM), _processor(d / MARIAN_TARGET_SPM), vocab, bos_id=bos_id,
                   name=str(d))

    def __repr__(self) -> str:
        return f"MarianSentencePiece({self.source!r}, vocab_size={self.vocab_size})"

    @property
    def vocab_size(self) -> int:
        """Number of ids (0 .. vocab_size-1), specials included."""
        return len(self._vocab)

    def _check_id(self, i: Any) -> int:
        if not 0 <= int(i) < len(self._vocab):
            raise ValueError(f"token id {i} out of range [0, {len(self._vocab)})")
        return int(i)

    def id_to_piece(self, i: int) -> str:
        """The piece string of id ``i``. Raises ValueError if ``i`` is out of range."""
        return self._pieces[self._check_id(i)]

    def piece_to_id(self, piece: str) -> int:
        """The id of a piece string (``unk_id`` when unknown)."""
        return self._vocab.get(piece, self.unk_id)

    def encode_pieces(self, text: str, *, target: bool = False) -> list[str]:
        """The pieces of ``text`` as Marian segments it, no ``</s>`` added: a leading ``>>xx<<`` code kept whole,
        ``</s>``, ``<unk>`` and ``<pad>`` typed in the text kept as those pieces (``MarianTokenizer`` splits on its
        special tokens first), every other stretch cut by the source model (``target=True``: by the target model,
        as ``MarianTokenizer(text_target=...)`` cuts a reference)."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        pieces: list[str] = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            pieces, text = [text[: end + 2]], text[end + 2:]
        for chunk in _SPECIALS.split(text):
            if chunk in self._specials:
                pieces.append(chunk)
            elif chunk:
                pieces += (self._tgt if target else self._src).encode(chunk, out_type=str)
        return pieces

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without ``</s>`` (the caller adds it). Raises TypeError for a non-string."""
        return [self._vocab.get(p, self.unk_id) for p in self.encode_pieces(text)]

    def encode_target(self, text: str) -> list[int]:
        """Ids of a target-language ``text`` (a reference, a forced prefix) cut by the target model, without
        ``</s>``: ``MarianTokenizer(text_target=text)["input_ids"]`` minus its ``</s>``. Raises TypeError for a
        non-string."""
        return [self._vocab.get(p, self.unk_id) for p in self.encode_pieces(text, target=True)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for each text."""
        return [self.encode(t) for t in texts]

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Piece strings of ``ids``. Raises ValueError for an id outside the vocabulary."""
        return [self.id_to_piece(i) for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` through the target model; ``</s>``, ``<pad>`` and ``<unk>`` are dropped.

        Raises:
            ValueError: an id is outside ``[0, vocab_size)``.
        """
        kept = [self._pieces[i] for i in (self._check_id(i) for i in ids) if i not in self._skip]
        return self._tgt.decode_pieces(kept).replace(SPIECE_UNDERLINE, " ").strip()
