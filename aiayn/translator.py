"""`Translator`: text in, translation and every attention map out. The one object the app and CLI use.

A Translator holds a model in eval mode and a SentencePiece tokenizer; it keeps no per-call state, so
one instance serves many threads at once (each call runs under ``torch.inference_mode``).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from .checkpoint import SPM_FILE, load_checkpoint
from .checkpoint_format import DEFAULT_CHECKPOINTS_DIR
from .data.batching import pad_ids
from .decoding import Hypothesis, beam_search
from .model.maps import AttentionMaps, renamed_attribute
from .model.transformer import Transformer
from .tokenizer import Tokenizer

#: where the shipped checkpoints live (a checkout or an editable install); AIAYN_CHECKPOINTS overrides.
CHECKPOINTS_DIR = Path(os.environ.get("AIAYN_CHECKPOINTS", DEFAULT_CHECKPOINTS_DIR))
DEFAULT_DIRECTION = "en-de"


def default_checkpoint(direction: str = DEFAULT_DIRECTION) -> Path:
    """Path of the shipped checkpoint for ``direction`` (``"en-de"`` or ``"de-en"``)."""
    return CHECKPOINTS_DIR / direction


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
        decoder_input_tokens: pieces each decoder position was fed (``<s>`` then ``output_tokens[:-1]``),
            length T: labels of decoder self-attention queries/keys and cross-attention queries.
        attention: :class:`AttentionMaps` of this hypothesis (B=1): encoder ``(L, 1, H, S, S)``, decoder
            ``(L, 1, H, T, T)``, cross ``(L, 1, H, T, S)``; None when not requested.
        truncated: the source was longer than the model accepts and was cut.
        finished: the output ended with EOS (False: cut at the maximum output length).
        score: length-normalised log-probability (natural log) the beam ranked by (teacher-forced: the
            reference's total log-probability).
        log_prob: total log-probability of the output.
        src_ids: ids of ``src_tokens`` (S,).
        output_ids: ids of ``output_tokens`` (T,).
        nbest: ``(text, score)`` of the n best hypotheses, best first (empty when teacher-forced).
        elapsed_ms: wall time of the call, milliseconds (for a batch: the whole batch).
        batch_size: how many sentences shared the beam search that made this one (1: decoded alone; more: a
            :meth:`Translator.translate_batch`, e.g. sentences of several app sessions decoded together by
            :class:`aiayn.serving.DecodeQueue`).
        mode: ``"free-running"`` (beam search, Section 6.1) or ``"teacher-forced"`` (:meth:`Translator.force`).
        reference: the cleaned reference fed to the decoder when teacher-forced, else None.
        next_pieces: top-k next pieces at every position (:class:`NextPieces`), filled by
            :func:`aiayn.analysis.explain`; None otherwise.
        next_pieces_note: why ``next_pieces`` is None after :func:`aiayn.analysis.explain` (e.g. an empty
            output), else None.

    ``tgt_tokens`` and ``tgt_ids`` are deprecated aliases of ``output_tokens`` / ``output_ids`` (they warn);
    the constructor takes only the new keywords.
    """

    text: str
    source: str
    src_tokens: list[str]
    output_tokens: list[str]
    decoder_input_tokens: list[str]
    attention: AttentionMaps | None
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

    tgt_tokens = renamed_attribute("Translation", "tgt_tokens", "output_tokens")
    tgt_ids = renamed_attribute("Translation", "tgt_ids", "output_ids")


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` if given (checked: it must exist on this machine), else CUDA when available, else CPU.

    Raises:
        ValueError: an unknown device name (``"banana"``), a device torch does not run the model on here
            (``"cuda"`` without CUDA, ``"cuda:3"`` on a machine with fewer GPUs, ``"mps"`` without MPS).
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"unknown device {str(device)!r}; use cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(device)!r} asked for but CUDA is not available on this machine "
                             f"(torch {torch.__version__}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {str(device)!r} asked for but this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {str(device)!r} asked for but MPS is not available on this machine; use --device cpu")
    elif dev.type != "cpu":
        raise ValueError(f"device {str(device)!r} is not supported; use cpu, cuda, cuda:N or mps")
    return dev


class Translator:
    """Translate with a trained :class:`~aiayn.model.transformer.Transformer` and its SentencePiece model.

    Build with :meth:`load` (a checkpoint directory) or directly from a model and tokenizer.
    """

    def __init__(self, model: Transformer, tokenizer: Tokenizer, *, meta: dict[str, Any] | None = None, path: str | Path | None = None) -> None:
        cfg = model.cfg
        if tokenizer.vocab_size != cfg.vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} pieces but the model's vocabulary is {cfg.vocab_size}")
        for name in ("pad_id", "bos_id", "eos_id"):
            if getattr(tokenizer, name) != getattr(cfg, name):
                raise ValueError(f"tokenizer {name}={getattr(tokenizer, name)} differs from the model's {getattr(cfg, name)}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.meta = dict(meta or {})
        self.path = Path(path) if path is not None else None

    @classmethod
    def load(cls, path: str | Path | None = None, *, device: str | torch.device | None = None) -> "Translator":
        """Load a checkpoint directory (default: the shipped ``checkpoints/en-de``).

        Raises:
            FileNotFoundError: the directory or one of its files is missing (named in the message).
            ValueError: a file is truncated, corrupt or foreign (named in the message); an unknown or
                unavailable ``device`` (:func:`pick_device`).
        """
        d = Path(path) if path is not None else default_checkpoint()
        model, config = load_checkpoint(d, device=pick_device(device))
        spm = d / SPM_FILE
        if not spm.is_file():
            raise FileNotFoundError(f"checkpoint file missing: {spm}")
        tokenizer = Tokenizer.load(spm)
        meta = dict(config.get("meta", {}))
        meta.setdefault("num_parameters", config.get("num_parameters"))
        meta.setdefault("dtype", config.get("dtype"))
        return cls(model, tokenizer, meta=meta, path=d)

    @property
    def cfg(self):
        return self.model.cfg

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def max_source_pieces(self) -> int:
        """Longest source accepted, in pieces including the final ``</s>``."""
        return self.cfg.max_len

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.tokenizer.id_to_piece(int(i)) for i in ids]

    def encode_source(self, text: str) -> tuple[list[int], bool, str]:
        """``(ids ending with EOS, truncated?, cleaned text)``. Raises ValueError on empty text."""
        cleaned = clean_text(text)
        ids = self.tokenizer.encode(cleaned)
        limit = self.max_source_pieces - 1
        truncated = len(ids) > limit
        return ids[:limit] + [self.cfg.eos_id], truncated, cleaned

    def _batch(self, seqs: list[list[int]]) -> torch.Tensor:
        return torch.from_numpy(pad_ids(seqs, self.cfg.pad_id)).to(self.device)

    def _autocast(self):
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)

    def translate_batch(
        self,
        texts: Sequence[str],
        *,
        beam_size: int = 4,
        length_penalty: float = 0.6,
        max_len: int | None = None,
        n_best: int = 1,
        use_cache: bool = True,
        return_attention: bool = True,
        head_mask: Any = None,
    ) -> list[Translation]:
        """Translate several texts in one batch (beam search, Section 6.1; ``beam_size=1`` is greedy).

        Args:
            texts: source sentences.
            beam_size: beam width (paper: 4).
            length_penalty: GNMT alpha (paper: 0.6), a finite number >= 0 (0 disables the penalty).
            max_len: maximum output pieces; default source length + 50 (Section 6.1).
            n_best: hypotheses listed in ``Translation.nbest``.
            use_cache: key/value cache (identical output, faster).
            return_attention: stitch the attention maps of each output (``Translation.attention``).
            head_mask: head ablation (Michel et al. 2019): ``(3, n_layers, n_heads)``, index 0 encoder
                self-attention, 1 decoder self-attention, 2 cross-attention; bool or float tensor, list, tuple
                or numpy array; 1/True keeps a head, 0/False removes its output (before ``W^O``), a float scales
                it. The maps of a removed head are still computed. None (default) and all ones give the same.

        Raises:
            ValueError: an empty / whitespace-only / non-string text (names its index), bad beam settings
                (``beam_size``, ``n_best`` or ``max_len`` not a positive integer, ``length_penalty`` negative or
                not finite), a
                ``head_mask`` of the wrong shape or dtype.
        """
        if isinstance(texts, str):
            raise ValueError("translate_batch takes a list of texts; use translate() for one text")
        if not texts:
            return []
        if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
        if max_len is not None and (not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1):
            raise ValueError(f"max_len must be a positive integer, got {max_len!r}")
        if (not isinstance(length_penalty, (int, float)) or isinstance(length_penalty, bool)
                or not math.isfinite(length_penalty) or length_penalty < 0):
            raise ValueError(f"length_penalty (alpha) must be a finite number >= 0 (paper: 0.6), got {length_penalty!r}")
        if not isinstance(n_best, int) or isinstance(n_best, bool) or n_best < 1:
            raise ValueError(f"n_best must be a positive integer, got {n_best!r}")
        head_mask = self.model.check_head_mask(head_mask)
        t0 = time.perf_counter()
        encoded = []
        for i, text in enumerate(texts):
            try:
                encoded.append(self.encode_source(text))
            except ValueError as exc:
                raise ValueError(f"text {i}: {exc}" if len(texts) > 1 else str(exc)) from None
        src = self._batch([e[0] for e in encoded])
        n_best = max(1, min(n_best, beam_size))
        with torch.inference_mode(), self._autocast():
            results = beam_search(
                self.model,
                src,
                beam_size=beam_size,
                length_penalty_alpha=length_penalty,
                max_len=max_len,
                n_best=n_best,
                use_cache=use_cache,
                return_attention=return_attention,
                head_mask=head_mask,
            )
        elapsed = (time.perf_counter() - t0) * 1000.0
        return [self._make(e, hyps, elapsed, len(texts)) for e, hyps in zip(encoded, results)]

    def translate(self, text: str, **kwargs: Any) -> Translation:
        """Translate one text; keyword arguments as :meth:`translate_batch`."""
        return self.translate_batch([text], **kwargs)[0]

    def _make(self, encoded: tuple[list[int], bool, str], hyps: list[Hypothesis], elapsed: float,
              batch_size: int) -> Translation:
        src_ids, truncated, cleaned = encoded
        best = hyps[0]
        src_tokens = self.pieces(src_ids)
        output_tokens = self.pieces(best.tokens)
        decoder_input_tokens = [self.tokenizer.id_to_piece(self.cfg.decoder_start_id)] + output_tokens[:-1]
        text = self.tokenizer.decode(best.tokens)
        att = best.attention
        if att is not None:
            att.src_tokens, att.decoder_input_tokens = [src_tokens], [decoder_input_tokens]
            att.output_tokens = [output_tokens]
            att.meta = {"source": cleaned, "mode": "free-running", "output": text}
        return Translation(
            text=text,
            source=cleaned,
            src_tokens=src_tokens,
            output_tokens=output_tokens,
            decoder_input_tokens=decoder_input_tokens,
            attention=att,
            truncated=truncated,
            finished=best.finished,
            score=best.score,
            log_prob=best.log_prob,
            src_ids=src_ids,
            output_ids=list(best.tokens),
            nbest=[(self.tokenizer.decode(h.tokens), h.score) for h in hyps],
            elapsed_ms=elapsed,
            batch_size=batch_size,
        )

    def force(self, text: str, reference: str, *, return_scores: bool = False,
              head_mask: Any = None) -> tuple[Translation, torch.Tensor]:
        """Teacher-forced pass: feed ``reference`` (a translation the user typed) to the decoder.

        ``head_mask``: ``(3, n_layers, n_heads)`` head ablation mask, as in :meth:`translate_batch`.

        Returns:
            ``(Translation, probs)``: the translation's ``output_tokens`` are the reference's pieces (+ ``</s>``),
            its attention the maps of this forced pass (on the CPU), ``mode`` is ``"teacher-forced"`` and
            ``reference`` the cleaned reference; ``probs`` ``(T, V)`` float32 (CPU) are the model's
            next-token probabilities at each position.

        Raises:
            ValueError: empty source or reference, a bad ``head_mask``.
        """
        head_mask = self.model.check_head_mask(head_mask)
        t0 = time.perf_counter()
        src_ids, truncated, cleaned = self.encode_source(text)
        ref_clean = clean_text(reference)
        ref_ids = self.tokenizer.encode(ref_clean)[: self.cfg.max_len - 2] + [self.cfg.eos_id]
        decoder_input_ids = [self.cfg.decoder_start_id] + ref_ids[:-1]
        with torch.inference_mode(), self._autocast():
            logits, maps = self.model(self._batch([src_ids]), self._batch([decoder_input_ids]), return_attention=True, return_scores=return_scores,
                                     head_mask=head_mask)
        maps = maps.cpu()
        probs = torch.softmax(logits[0].float(), dim=-1).cpu()
        logp = torch.log(probs.gather(1, torch.tensor(ref_ids)[:, None]).clamp_min(1e-30)).sum().item()
        src_tokens, output_tokens = self.pieces(src_ids), self.pieces(ref_ids)
        decoder_input_tokens = self.pieces(decoder_input_ids)
        maps.src_tokens, maps.decoder_input_tokens = [src_tokens], [decoder_input_tokens]
        maps.output_tokens = [output_tokens]
        text = self.tokenizer.decode(ref_ids)
        maps.meta = {"source": cleaned, "reference": ref_clean, "mode": "teacher-forced", "output": text}
        tr = Translation(
            text=text, source=cleaned, src_tokens=src_tokens, output_tokens=output_tokens,
            decoder_input_tokens=decoder_input_tokens, attention=maps, truncated=truncated, finished=True,
            score=logp, log_prob=logp, src_ids=src_ids, output_ids=ref_ids,
            elapsed_ms=(time.perf_counter() - t0) * 1000.0, mode="teacher-forced", reference=ref_clean,
        )
        return tr, probs


def cli_option_error(*, beam_size: int | None = None, alpha: float | None = None, max_len: int | None = None) -> str | None:
    """The message for a bad ``--beam-size`` (< 1), ``--alpha`` (negative or not finite) or ``--max-len``
    (< 1) of a command line, or None when all given values are valid (a None argument is not checked)."""
    if beam_size is not None and beam_size < 1:
        return f"--beam-size must be >= 1 (paper: 4), got {beam_size}"
    if alpha is not None and not (math.isfinite(alpha) and alpha >= 0):
        return f"--alpha must be a finite number >= 0 (paper: 0.6; 0 disables the length penalty), got {alpha}"
    if max_len is not None and max_len < 1:
        return f"--max-len must be >= 1, got {max_len}"
    return None


def cli_main(argv: list[str]) -> int:
    """``aiayn translate [--checkpoint DIR] [--beam-size 4] [--alpha 0.6] TEXT...`` (stdin when no TEXT)."""
    ap = argparse.ArgumentParser(prog="aiayn translate", description="Translate text with a checkpoint (beam search, Section 6.1).")
    ap.add_argument("text", nargs="*", help="sentences to translate; read from standard input, one per line, when none")
    ap.add_argument("--checkpoint", "-c", default=None, help="checkpoint directory (default: checkpoints/en-de)")
    ap.add_argument("--direction", choices=["en-de", "de-en"], default=None, help="use the shipped checkpoint of this direction")
    ap.add_argument("--beam-size", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=0.6, help="length penalty alpha")
    ap.add_argument("--max-len", type=int, default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--pieces", action="store_true", help="also print the source and output pieces")
    args = ap.parse_args(argv)
    bad = cli_option_error(beam_size=args.beam_size, alpha=args.alpha, max_len=args.max_len)
    if bad:
        print(f"aiayn translate: {bad}", file=sys.stderr)
        return 2
    path = args.checkpoint or default_checkpoint(args.direction or DEFAULT_DIRECTION)
    try:
        tr = Translator.load(path, device=args.device)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aiayn translate: {exc}", file=sys.stderr)
        return 2
    texts = args.text or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    code = 0
    for text in texts:
        try:
            t = tr.translate(text, beam_size=args.beam_size, length_penalty=args.alpha, max_len=args.max_len, return_attention=False)
        except ValueError as exc:
            print(f"aiayn translate: {exc}", file=sys.stderr)
            code = 2
            continue
        print(t.text)
        if args.pieces:
            print("  src:", " ".join(t.src_tokens))
            print("  out:", " ".join(t.output_tokens))
        if t.truncated:
            print("  (source truncated to the model's limit)", file=sys.stderr)
    return code
