"""`Translator`: text in, translation and every attention map out. The one object the app and CLI use.

A Translator holds a model in eval mode and a SentencePiece tokenizer; it keeps no per-call state, so
one instance serves many threads at once. Its model calls go through :mod:`aiayn.calls` (encoding, the decoder
input, precision, the teacher-forced pass); the records it returns live in :mod:`aiayn.translation`, device
choice in :mod:`aiayn.devices`, the command line in :mod:`aiayn.translate_cli`. Those names are re-exported here.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from . import calls
from .checkpoint import SPM_FILE, load_checkpoint
from .checkpoint_format import DEFAULT_CHECKPOINTS_DIR
from .decoding import Hypothesis, beam_search, check_beam_options
from .devices import pick_device
from .model.transformer import Transformer
from .tokenizer import Tokenizer
from .translation import NextPieces, Translation, clean_text

__all__ = ["CHECKPOINTS_DIR", "DEFAULT_DIRECTION", "NextPieces", "Translation", "Translator", "clean_text",
           "default_checkpoint", "pick_device"]

#: where the shipped checkpoints live (a checkout or an editable install); AIAYN_CHECKPOINTS overrides.
CHECKPOINTS_DIR = Path(os.environ.get("AIAYN_CHECKPOINTS", DEFAULT_CHECKPOINTS_DIR))
DEFAULT_DIRECTION = "en-de"


def default_checkpoint(direction: str = DEFAULT_DIRECTION) -> Path:
    """Path of the shipped checkpoint for ``direction`` (``"en-de"`` or ``"de-en"``)."""
    return CHECKPOINTS_DIR / direction


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

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.tokenizer.id_to_piece(int(i)) for i in ids]

    def encode_source(self, text: str) -> calls.Encoded:
        """``(ids ending with EOS, truncated?, cleaned text)`` (:func:`aiayn.calls.encode_source`: at most
        ``max_len`` ids). Raises ValueError on empty text."""
        return calls.encode_source(self.tokenizer, self.cfg, text)

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
        check_beam_options(beam_size=beam_size, length_penalty=length_penalty, max_len=max_len, n_best=n_best)
        head_mask = self.model.check_head_mask(head_mask)
        t0 = time.perf_counter()
        encoded = []
        for i, text in enumerate(texts):
            try:
                encoded.append(self.encode_source(text))
            except ValueError as exc:
                raise ValueError(f"text {i}: {exc}" if len(texts) > 1 else str(exc)) from None
        src = calls.batch(self.cfg, [e.ids for e in encoded], self.device)
        n_best = min(n_best, beam_size)
        with torch.inference_mode(), calls.autocast_for(self.device):
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

    def _make(self, encoded: calls.Encoded, hyps: list[Hypothesis], elapsed: float,
              batch_size: int) -> Translation:
        src_ids, truncated, cleaned = encoded
        best = hyps[0]
        src_tokens = self.pieces(src_ids)
        output_tokens = self.pieces(best.tokens)
        decoder_input_tokens = self.pieces(calls.decoder_input_ids(self.cfg, best.tokens))
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
        t0 = time.perf_counter()
        src_ids, truncated, cleaned = self.encode_source(text)
        ref_ids, _, ref_clean = calls.encode_reference(self.tokenizer, self.cfg, reference)
        forced = calls.teacher_forced_ids(self.model, [src_ids], [ref_ids], head_mask=head_mask, return_attention=True,
                                          return_scores=return_scores, amp=True)
        maps = forced.maps.cpu()
        probs = forced.log_probs[0].exp().cpu()
        logp = float(forced.target_log_probs(self.cfg.pad_id)[0].double().sum())
        src_tokens, output_tokens = self.pieces(src_ids), self.pieces(ref_ids)
        decoder_input_tokens = self.pieces(forced.decoder_input[0].tolist())
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
