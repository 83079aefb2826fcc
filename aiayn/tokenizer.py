"""Joint source-target subword vocabulary (SentencePiece BPE).

Section 5.1 of "Attention Is All You Need": the WMT En-De model uses byte-pair encoding with "a shared
source-target vocabulary of about 37000 tokens". We do the same at a smaller scale: one SentencePiece
BPE model is trained on the German AND the English side of the training split, so source and target
share ids (and, in the model, the embedding matrices, Section 3.4).

Special ids are fixed for the whole project (the model config uses the same numbers)::

    pad = 0, unk = 1, bos = 2, eos = 3

``byte_fallback`` is on, so characters that did not make it into the vocabulary (emoji, CJK, ...) are
encoded as UTF-8 byte pieces instead of ``<unk>``, and decode back to the same text.

Text normalisation is SentencePiece's default ``nmt_nfkc`` (Unicode NFKC plus whitespace collapsing),
so ``decode(encode(x)) == x`` holds for text that is already NFKC-normal with single spaces and no
leading/trailing whitespace (all cleaned corpus text is); e.g. the ligature "ﬁ" comes back as "fi".
"""
from __future__ import annotations

import io
import os
import unicodedata
import warnings
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm

from .files import atomic_write_bytes

#: Special token ids shared by the tokenizer and the model config (pad_id=0, bos_id=2, eos_id=3).
SPECIAL_IDS: dict[str, int] = dict(pad=0, unk=1, bos=2, eos=3)

__all__ = ["SPECIAL_IDS", "Tokenizer", "train_sentencepiece"]


def _training_sentences(texts: Iterable[str]) -> list[str]:
    """The non-empty strings of ``texts`` in order. Raises ValueError: a non-string, a line break, nothing left."""
    sentences = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"text #{i} is {type(text).__name__}, not str")
        if "\n" in text or "\r" in text:
            raise ValueError(f"text #{i} contains a line break: {text[:60]!r}")
        if text.strip():
            sentences.append(text)
    if not sentences:
        raise ValueError("train_sentencepiece: no non-empty text to train on")
    return sentences


def _train_model_bytes(sentences: list[str], coverage: float, settings: dict) -> bytes:
    """One SentencePiece training run in memory: the serialized model (the specials of :data:`SPECIAL_IDS`, byte
    fallback, no sampling or shuffling). ``settings``: vocab_size, model_type, seed_sentencepiece_size, num_threads,
    max_sentence_length, hard_vocab_limit. Raises SentencePiece's RuntimeError."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=buffer,
        character_coverage=coverage,
        pad_id=SPECIAL_IDS["pad"],
        unk_id=SPECIAL_IDS["unk"],
        bos_id=SPECIAL_IDS["bos"],
        eos_id=SPECIAL_IDS["eos"],
        pad_piece="<pad>",
        unk_piece="<unk>",
        bos_piece="<s>",
        eos_piece="</s>",
        byte_fallback=True,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        minloglevel=2,
        **settings,
    )
    return buffer.getvalue()


def _train_with_lower_coverage(sentences: list[str], character_coverage: float, settings: dict,
                               model_path: Path) -> bytes:
    """Train again when the vocabulary cannot hold one piece per character (plus 4 specials and 256 bytes).

    With byte fallback, rarer characters are still encodable, so lower the coverage until the most frequent
    characters fill at most 3/4 of the free slots (halving that count while SentencePiece still refuses), and
    warn. Raises ValueError when even one character does not fit."""
    vocab_size = settings["vocab_size"]
    counts: Counter = Counter()
    for t in sentences:
        counts.update(unicodedata.normalize("NFKC", t).replace(" ", "\u2581"))
    freqs = sorted(counts.values(), reverse=True)
    total = sum(freqs)
    k = max(1, (vocab_size - len(SPECIAL_IDS) - 256) * 3 // 4)
    data = b""
    while k >= 1 and not data:
        coverage = min(character_coverage, sum(freqs[:k]) / total - 1e-9)
        try:
            data = _train_model_bytes(sentences, coverage, settings)
        except RuntimeError as exc2:
            if "required_chars" not in str(exc2) or k == 1:
                raise ValueError(f"SentencePiece training failed for {model_path}: {exc2}") from exc2
            k //= 2
    warnings.warn(
        f"vocab_size={vocab_size} cannot hold all {len(freqs)} characters at character_coverage="
        f"{character_coverage}; trained with coverage {coverage:.6f} (rarer characters use byte pieces)",
        stacklevel=3)
    return data


def train_sentencepiece(
    texts: Iterable[str],
    model_path: str | os.PathLike,
    vocab_size: int = 8000,
    model_type: str = "bpe",
    character_coverage: float = 0.9999,
    seed_sentencepiece_size: int = 1_000_000,
    num_threads: int = 2,
    max_sentence_length: int = 4192,
    hard_vocab_limit: bool = True,
) -> Path:
    """Train a joint SentencePiece model and write it atomically to ``model_path``.

    Section 5.1: one vocabulary shared by source and target, so ``texts`` should hold the sentences of
    BOTH languages (e.g. every German and every English side of the training pairs).

    Args:
        texts: training sentences (str), read once into a list, in the given order. Empty strings are skipped;
            strings with a newline raise, because SentencePiece treats a sentence as one line.
        model_path: where the binary ``.model`` file is written (parent directories are created). The
            file is written to a temporary file in the same folder first and then ``os.replace``-d, so a
            reader never sees a half-written model.
        vocab_size: number of pieces including the 4 specials and, with byte fallback, the 256 byte
            pieces. Must be > 260 (and in practice larger than specials + bytes + distinct characters,
            or SentencePiece raises unless ``hard_vocab_limit`` is False).
        model_type: "bpe" (the paper's byte-pair encoding) or "unigram".
        character_coverage: fraction of characters covered by the vocabulary; rarer characters fall
            back to bytes. If ``vocab_size`` is too small to hold a piece for every such character
            (tiny test models), the coverage is lowered so the most frequent characters fill at most
            3/4 of the free slots, and a ``UserWarning`` says so.
        seed_sentencepiece_size: SentencePiece's seed piece count (only used by "unigram").
        num_threads: trainer threads (kept small: the trainer is deterministic for a fixed input order,
            and our machines have 2 cores).
        max_sentence_length: longest sentence in bytes the trainer keeps.
        hard_vocab_limit: if False, ``vocab_size`` is a soft limit (useful for tiny test corpora).

    Returns:
        The path written, as a :class:`~pathlib.Path`.

    Raises:
        ValueError: if ``vocab_size`` <= 260, ``model_type`` is unknown, a text contains a newline, no
            non-empty text was given, or SentencePiece rejects the settings (its message is included).

    The input is not sampled or shuffled (``input_sentence_size=0``, ``shuffle_input_sentence=False``),
    so the model depends only on ``texts`` and the arguments.
    """
    n_special = len(SPECIAL_IDS)
    if vocab_size <= n_special + 256:
        raise ValueError(f"vocab_size must be > {n_special + 256} (4 specials + 256 byte pieces), got {vocab_size}")
    if model_type not in ("bpe", "unigram"):
        raise ValueError(f"model_type must be 'bpe' or 'unigram', got {model_type!r}")
    model_path = Path(model_path)
    sentences = _training_sentences(texts)
    settings = dict(vocab_size=vocab_size, model_type=model_type, seed_sentencepiece_size=seed_sentencepiece_size,
                    num_threads=num_threads, max_sentence_length=max_sentence_length, hard_vocab_limit=hard_vocab_limit)
    try:
        data = _train_model_bytes(sentences, character_coverage, settings)
    except RuntimeError as exc:
        if "required_chars" not in str(exc):
            raise ValueError(f"SentencePiece training failed for {model_path}: {exc}") from exc
        data = _train_with_lower_coverage(sentences, character_coverage, settings, model_path)
    if not data:
        raise ValueError(f"SentencePiece produced no model for {model_path} ({len(sentences)} sentences)")
    atomic_write_bytes(model_path, data)
    return model_path


class Tokenizer:
    """A loaded SentencePiece model: text <-> subword ids (Section 5.1: shared source-target vocabulary).

    Construct with :meth:`load` (a ``.model`` file). The object holds no per-call state, so one instance may
    encode/decode from several threads at once (SentencePieceProcessor's encode/decode are const and
    thread-safe). It pickles as its model bytes, so it can be sent to DataLoader workers.
    """

    def __init__(self, processor: spm.SentencePieceProcessor, serialized: bytes, source: str = "<bytes>"):
        """Wrap an already-loaded processor; prefer :meth:`load`."""
        self._sp = processor
        self._bytes = serialized
        self.source = source
        self._vocab_size = int(processor.get_piece_size())
        self._skip = frozenset(i for i in (processor.pad_id(), processor.bos_id(), processor.eos_id()) if i >= 0)

    # ------------------------------------------------------------------ construction
    @classmethod
    def load(cls, path: str | os.PathLike) -> "Tokenizer":
        """Load a SentencePiece ``.model`` file.

        Raises:
            FileNotFoundError: the file does not exist (the message names it).
            ValueError: the file exists but is not a valid SentencePiece model (e.g. truncated or some
                other file); the message names the file.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"SentencePiece model not found: {path}")
        data = path.read_bytes()
        try:
            return cls._from_bytes(data, str(path))
        except ValueError as exc:
            raise ValueError(f"{path} is not a valid SentencePiece model: {exc}") from None

    @classmethod
    def _from_bytes(cls, data: bytes, source: str) -> "Tokenizer":
        if not data:
            raise ValueError("empty model data")
        try:
            sp = spm.SentencePieceProcessor(model_proto=data)
        except (RuntimeError, OSError) as exc:
            raise ValueError(f"cannot parse SentencePiece model ({exc})".strip()) from None
        if sp.get_piece_size() <= 0:
            raise ValueError("SentencePiece model has no pieces")
        return cls(sp, data, source)

    def __getstate__(self):
        return {"bytes": self._bytes, "source": self.source}

    def __setstate__(self, state):
        other = Tokenizer._from_bytes(state["bytes"], state["source"])
        self.__dict__.update(other.__dict__)

    def __repr__(self) -> str:
        return f"Tokenizer(source={self.source!r}, vocab_size={self.vocab_size})"

    # ------------------------------------------------------------------ ids
    @property
    def vocab_size(self) -> int:
        """Number of pieces (ids are 0 .. vocab_size-1), specials and byte pieces included."""
        return self._vocab_size

    @property
    def pad_id(self) -> int:
        """Id of ``<pad>`` (0 for models made by :func:`train_sentencepiece`)."""
        return int(self._sp.pad_id())

    @property
    def unk_id(self) -> int:
        """Id of ``<unk>`` (1 for models made by :func:`train_sentencepiece`)."""
        return int(self._sp.unk_id())

    @property
    def bos_id(self) -> int:
        """Id of ``<s>`` (2 for models made by :func:`train_sentencepiece`)."""
        return int(self._sp.bos_id())

    @property
    def eos_id(self) -> int:
        """Id of ``</s>`` (3 for models made by :func:`train_sentencepiece`)."""
        return int(self._sp.eos_id())

    def id_to_piece(self, i: int) -> str:
        """The piece string of id ``i`` (e.g. "▁Haus"). Raises ValueError if ``i`` is out of range."""
        self._check_id(i)
        return self._sp.id_to_piece(int(i))

    def piece_to_id(self, piece: str) -> int:
        """The id of a piece string; unknown pieces give :attr:`unk_id` (SentencePiece semantics)."""
        return int(self._sp.piece_to_id(piece))

    def _check_id(self, i) -> None:
        if not (0 <= int(i) < self._vocab_size):
            raise ValueError(f"token id {i} out of range [0, {self._vocab_size})")

    # ------------------------------------------------------------------ text
    def encode(self, text: str) -> list[int]:
        """Subword ids of ``text``; no BOS/EOS are added (the caller adds them where the model needs them)."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        return list(self._sp.encode(text, out_type=int))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for many texts at once (SentencePiece's C++ batch path; faster)."""
        texts = list(texts)
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"encode_batch expects str items, got {type(t).__name__}")
        return [list(ids) for ids in self._sp.encode(texts, out_type=int)]

    def encode_pieces(self, text: str) -> list[str]:
        """Subword piece strings of ``text`` (word starts are marked with "▁")."""
        if not isinstance(text, str):
            raise TypeError(f"encode_pieces expects str, got {type(text).__name__}")
        return list(self._sp.encode(text, out_type=str))

    def decode(self, ids: Iterable[int]) -> str:
        """Text of a sequence of ids; pad, bos and eos ids are ignored (so model output decodes as is).

        Raises:
            ValueError: an id is outside ``[0, vocab_size)``.
        """
        kept = []
        for i in ids:
            i = int(i)
            self._check_id(i)
            if i not in self._skip:
                kept.append(i)
        return self._sp.decode(kept)
