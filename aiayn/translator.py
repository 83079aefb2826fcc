"""`Translator`: text in, translation and every attention map out. The one object the app and CLI use.

A Translator holds a model in eval mode and a SentencePiece tokenizer; it keeps no per-call state, so
one instance serves many threads at once. Its model calls go through :mod:`aiayn.calls` (encoding, the decoder
input, precision, the teacher-forced pass); the records it returns live in :mod:`aiayn.translation`, device
choice in :mod:`aiayn.devices`, the command line in :mod:`aiayn.translate_cli`. Those names are re-exported here.
"""
from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from . import calls
from .checkpoint import SPM_FILE, load_checkpoint
from .checkpoint_format import DEFAULT_CHECKPOINTS_DIR
from .beam_tree import BeamTree, build_tree
from .block_trace import BlockTrace, LensTable
from .decoding import Hypothesis, StepTopK, beam_search, check_beam_options, greedy_decode
from .devices import pick_device
from .marian_tokenizer import MarianSentencePiece, is_marian_checkpoint
from .model.projection import OutputProjection, serving_precision
from .model.transformer import EncoderOutput, Transformer
from .sampling import check_sampling_options, sampler
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

    def __init__(self, model: Transformer, tokenizer: Tokenizer, *, meta: dict[str, Any] | None = None,
                 path: str | Path | None = None, projection: str | OutputProjection = "float32") -> None:
        """``projection``: the output projection's precision for this Translator's searches (beam, greedy,
        sampling): a name of :data:`aiayn.model.projection.PRECISIONS` (its weights converted here, once) or an
        :class:`~aiayn.model.projection.OutputProjection` of the same weights to share; the precision in use is
        ``self.projection.precision``.

        Raises:
            ValueError: the tokenizer does not match the model; a bad ``projection`` (one line).
        """
        cfg = model.cfg
        if tokenizer.vocab_size != cfg.vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} pieces but the model's vocabulary is {cfg.vocab_size}")
        for name in ("pad_id", "bos_id", "eos_id"):
            if getattr(tokenizer, name) != getattr(cfg, name):
                raise ValueError(f"tokenizer {name}={getattr(tokenizer, name)} differs from the model's {getattr(cfg, name)}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.projection = projection if isinstance(projection, OutputProjection) else OutputProjection(model, projection)
        self.meta = dict(meta or {})
        self.path = Path(path) if path is not None else None

    @classmethod
    def load(cls, path: str | Path | None = None, *, device: str | torch.device | None = None,
             direction: str | None = None, projection: str | None = None) -> "Translator":
        """Load a checkpoint directory (default: the shipped ``checkpoints/en-de``).

        ``direction`` (``"en-de"`` / ``"de-en"``): translate that way (:meth:`for_direction`; a model with language
        tags serves both, a directional model only its own); None: the checkpoint's own direction.
        ``projection``: the output projection's precision for decoding (:mod:`aiayn.model.projection`:
        ``"float32"``, ``"int8"``, ``"bfloat16"``); None: ``$AIAYN_SERVE_PROJECTION`` when set, else the
        checkpoint's ``meta["serve_projection"]``, else float32 (:func:`~aiayn.model.projection.serving_precision`).

        Raises:
            FileNotFoundError: the directory or one of its files is missing (named in the message).
            ValueError: a file is truncated, corrupt or foreign (named in the message); an unknown or
                unavailable ``device`` (:func:`pick_device`); a ``direction`` the model does not translate; a bad
                ``projection`` or ``$AIAYN_SERVE_PROJECTION`` (one line).
        """
        d = Path(path) if path is not None else default_checkpoint()
        model, config = load_checkpoint(d, device=pick_device(device))
        precision = serving_precision(projection, config.get("meta"))
        if is_marian_checkpoint(d):  # imported by `aiayn import-marian`: Marian's own tokenizer files
            tokenizer = MarianSentencePiece.load(d, bos_id=model.cfg.bos_id)
        else:
            spm = d / SPM_FILE
            if not spm.is_file():
                raise FileNotFoundError(f"checkpoint file missing: {spm}")
            tokenizer = Tokenizer.load(spm)
        meta = dict(config.get("meta", {}))
        meta.setdefault("num_parameters", config.get("num_parameters"))
        meta.setdefault("dtype", config.get("dtype"))
        if len(model.cfg.language_tags) > 1:  # one model for both directions: the target's tag starts the decoder
            meta["directions"] = [f"{s}-{t}" for t in model.cfg.language_tags for s in model.cfg.language_tags if s != t]
            if model.cfg.target_language is not None:
                src = [s for s in model.cfg.language_tags if s != model.cfg.target_language][0]
                meta.update(direction=f"{src}-{model.cfg.target_language}", src_lang=src, tgt_lang=model.cfg.target_language)
        tr = cls(model, tokenizer, meta=meta, path=d, projection=precision)
        return tr if direction is None else tr.for_direction(direction)

    def for_direction(self, direction: str) -> "Translator":
        """This Translator translating ``direction`` (``"en-de"``: English in, German out). A model with language
        tags (``TransformerConfig.language_tags``: one model for both directions, as mBART and NLLB) gets a view
        that shares its weights and starts the decoder with the target's tag ``<2de>`` / ``<2en>``; a directional
        model returns itself for its own direction (or when its meta names none).

        Raises:
            ValueError (one line): a malformed direction, or one the model does not translate.
        """
        src, _, tgt = str(direction).partition("-")
        if not src or not tgt or src == tgt:
            raise ValueError(f"direction must look like 'en-de', got {direction!r}")
        cfg, own = self.cfg, self.meta.get("direction")
        if not cfg.language_tags:
            if own in (None, direction):
                return self
            raise ValueError(f"{self.path or 'this model'} translates {own} only (it has no language tags); "
                             f"load a {direction} checkpoint")
        if tgt not in cfg.language_tags or src not in cfg.language_tags:
            raise ValueError(f"{self.path or 'this model'} has no {direction} direction (its languages: "
                             f"{', '.join(cfg.language_tags)})")
        if cfg.target_language == tgt and own == direction:
            return self
        return self._view({"target_language": tgt}, direction=direction, src_lang=src, tgt_lang=tgt)

    def for_domain(self, domain: str | None) -> "Translator":
        """This Translator writing in ``domain``: a model trained with domain tags (``TransformerConfig.domain_tags``,
        ``aiayn train --domain-tags``; Kobus et al. 2017) gets a view that shares its weights and starts the decoder
        with the tag ``<domain>``; None or the model's own domain returns itself.

        Raises:
            ValueError (one line): the model has no tag for ``domain`` (names the ones it has).
        """
        cfg = self.cfg
        if domain is None or domain == cfg.domain:
            return self
        if domain not in cfg.domain_tags:
            raise ValueError(f"{self.path or 'this model'} has no domain {domain!r} (its domains: "
                             f"{', '.join(cfg.domain_tags) if cfg.domain_tags else 'none, it was trained without domain tags'})")
        return self._view({"domain": domain})

    def _view(self, start: dict[str, Any], **meta: Any) -> "Translator":
        """A Translator sharing this one's modules and weights whose config differs in ``start`` only (the tag the
        decoder starts with: ``target_language`` or ``domain``), its meta updated with ``meta``."""
        view = copy.copy(self.model)
        view.cfg = self.cfg.replace(**start)
        return Translator(view, self.tokenizer, meta={**self.meta, **meta}, path=self.path, projection=self.projection)

    @property
    def cfg(self):
        return self.model.cfg

    @property
    def device(self) -> torch.device:
        return self.model.device

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The pieces of ``ids``; a language tag (the decoder's first input in a model for both directions) is
        named ``<2de>`` / ``<2en>``, a domain tag ``<general>``."""
        return [self.cfg.tag_piece(i) or self.tokenizer.id_to_piece(int(i)) for i in ids]

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
        prefixes: Sequence[str | Sequence[int] | None] | None = None,
        next_k: int = 0,
        encoded: Sequence[EncoderOutput | None] | None = None,
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
            prefixes: prefix-constrained decoding: one prefix per text (see :meth:`translate`'s ``prefix``), or None.
            next_k: for ``next_k`` > 0, ``Translation.next_pieces``: the ``next_k`` most probable next pieces at each
                output position and the probability of the piece taken, from the search's own log-probabilities
                (:class:`~aiayn.decoding.StepTopK`; equal to a teacher-forced pass over the output up to float32
                rounding); 0 (default): None.
            encoded: one encoder output per text made beforehand by :meth:`encode_ahead` (None entries are
                encoded here, together), or None: the batch is encoded here, padded (:meth:`EncoderOutput.stack`).
                Only without ``head_mask``.

        Raises:
            ValueError: an empty / whitespace-only / non-string text (names its index), bad beam settings
                (``beam_size``, ``n_best`` or ``max_len`` not a positive integer, ``length_penalty`` negative or
                not finite), a
                ``head_mask`` of the wrong shape or dtype, a bad prefix (:meth:`translate`), ``next_k`` not a whole
                number >= 0, ``encoded`` not one per text or given with a ``head_mask``.
        """
        if isinstance(texts, str):
            raise ValueError("translate_batch takes a list of texts; use translate() for one text")
        if not texts:
            return []
        return self._beam(texts, beam_size=beam_size, length_penalty=length_penalty, max_len=max_len, n_best=n_best,
                          use_cache=use_cache, return_attention=return_attention, head_mask=head_mask,
                          prefixes=prefixes, next_k=next_k, encoded=encoded)

    def encode_ahead(self, texts: Sequence[str]) -> list[EncoderOutput]:
        """The encoder outputs of ``texts``, encoded together (one padded batch), each cut to its own source: memory
        ``(1, S_i, D)``, ``weights`` ``(L, 1, H, S_i, S_i)``, on the model's device; for a later
        :meth:`translate_batch` (``encoded``). A server encodes the sentences of a class as they arrive, while the
        others are still on their way (:class:`aiayn.serving.DecodeQueue`). One text gives bit for bit what a lone
        :meth:`translate` computes in its encoder (the same ops on the same shapes; on CPUs where MKL picks its code
        path by memory alignment only with ``MKL_CBWR=AUTO,STRICT``, which the tests set, else to the last bit of
        float32); several agree with it to float32 rounding, as any padded batch.

        Raises:
            ValueError: as :meth:`encode_source` (an empty or non-string text; names its index).
        """
        return self._encode_rows([e.ids for e in self._encode_all(texts)])

    def _encode_rows(self, ids: list[list[int]]) -> list[EncoderOutput]:
        """:meth:`encode_ahead` of source ids."""
        with torch.inference_mode(), calls.autocast_for(self.device):
            enc = self.model.encode(calls.batch(self.cfg, ids, self.device), need_weights=True)
        return [EncoderOutput(enc.memory[i : i + 1, : len(r)], enc.src_mask[i : i + 1, : len(r)],
                              enc.weights[:, i : i + 1, :, : len(r), : len(r)]) for i, r in enumerate(ids)]

    def _encoded_batch(self, encoded: Sequence[EncoderOutput | None], ids: list[list[int]],
                       head_mask: Any) -> EncoderOutput:
        """The batch's encoder output from sentences encoded apart (:meth:`encode_ahead`; None: encoded here)."""
        if head_mask is not None:
            raise ValueError("encoded sentences cannot be decoded with a head_mask (the encoder would differ)")
        if isinstance(encoded, (str, EncoderOutput)) or len(encoded) != len(ids):
            raise ValueError(f"encoded must hold one encoder output (or None) per text ({len(ids)})")
        missing = [i for i, e in enumerate(encoded) if e is None]
        rest = iter(self._encode_rows([ids[i] for i in missing]) if missing else [])
        return EncoderOutput.stack([e if e is not None else next(rest) for e in encoded])

    def _encode_all(self, texts: Sequence[str]) -> list[calls.Encoded]:
        encoded = []
        for i, text in enumerate(texts):
            try:
                encoded.append(self.encode_source(text))
            except ValueError as exc:
                raise ValueError(f"text {i}: {exc}" if len(texts) > 1 else str(exc)) from None
        return encoded

    def prefix_ids(self, prefix: str | Sequence[int] | None) -> list[int]:
        """The forced output ids of a prefix: a string's SentencePiece ids (no ``</s>``; empty text: none), or a
        sequence of ids taken as is (a tree node's :meth:`~aiayn.beam_tree.BeamTree.tokens`); None: none.

        Raises:
            ValueError: neither a string nor a sequence of whole numbers.
        """
        if prefix is None:
            return []
        if isinstance(prefix, str):
            return calls.encode_target(self.tokenizer, prefix.strip()) if prefix.strip() else []
        try:
            ids = list(prefix)
        except TypeError:
            ids = None
        if ids is None or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ValueError(f"prefix must be a text or a list of piece ids, got {prefix!r:.80}")
        return ids

    def _beam(self, texts: Sequence[str], *, beam_size: int, length_penalty: float, max_len: int | None, n_best: int,
              use_cache: bool, return_attention: bool, head_mask: Any, prefixes: Any = None,
              recorder: list | None = None, next_k: int = 0,
              encoded: Sequence[EncoderOutput | None] | None = None) -> list[Translation]:
        """Beam search over ``texts`` (checked, encoded, autocast) through :func:`aiayn.decoding.beam_search`."""
        check_beam_options(beam_size=beam_size, length_penalty=length_penalty, max_len=max_len, n_best=n_best)
        head_mask = self.model.check_head_mask(head_mask)
        if prefixes is not None and (isinstance(prefixes, str) or len(prefixes) != len(texts)):
            raise ValueError(f"prefixes must hold one prefix per text ({len(texts)}), got {prefixes!r:.80}")
        forced = None if prefixes is None else [self.prefix_ids(p) for p in prefixes]
        t0 = time.perf_counter()
        sources = self._encode_all(texts)
        src = calls.batch(self.cfg, [e.ids for e in sources], self.device)
        memory = None if encoded is None else self._encoded_batch(encoded, [e.ids for e in sources], head_mask)
        with torch.inference_mode(), calls.autocast_for(self.device):
            results = beam_search(self.model, src, beam_size=beam_size, length_penalty_alpha=length_penalty,
                                  max_len=max_len, n_best=min(n_best, beam_size), use_cache=use_cache,
                                  return_attention=return_attention, head_mask=head_mask, prefix=forced,
                                  recorder=recorder, next_k=next_k, project=self.projection.function,
                                  encoded=memory)
        elapsed = (time.perf_counter() - t0) * 1000.0
        out = [self._make(e, hyps, elapsed, len(texts)) for e, hyps in zip(sources, results)]
        for tr, ids in zip(out, forced or []):
            if tr.attention is not None:
                tr.attention.meta["prefix"] = self.pieces(ids)
        return out

    def translate(self, text: str, *, prefix: str | Sequence[int] | None = None, **kwargs: Any) -> Translation:
        """Translate one text; keyword arguments as :meth:`translate_batch`.

        ``prefix``: prefix-constrained decoding. The output starts with the prefix's pieces: a text (its
        SentencePiece pieces, no ``</s>``) or a list of piece ids (e.g. a beam-tree node's
        :meth:`~aiayn.beam_tree.BeamTree.tokens`). Those steps are forced (each scored with the model's own
        log-probability), the rest is free beam search; the attention maps cover the forced pieces too. With
        ``beam_size=1`` and a prefix of the greedy output the result is the greedy output; with a wider beam the
        search behind a forced prefix keeps K continuations of it, so it can find a better-scoring ending than the
        free search did.

        Raises:
            ValueError: as :meth:`translate_batch`; a prefix holding ``</s>``, padding or the start piece, or longer
                than the maximum output length.
        """
        prefixes = None if prefix is None else [prefix]
        return self.translate_batch([text], prefixes=prefixes, **kwargs)[0]

    def beam_tree(self, text: str, beam_size: int = 4, length_penalty: float = 0.6, *, max_len: int | None = None,
                  prefix: str | Sequence[int] | None = None) -> BeamTree:
        """The beam search of ``text`` as a tree (:class:`~aiayn.beam_tree.BeamTree`): every candidate weighed at
        each step with its log-probabilities, kept or pruned, the ended ones with their length-penalised scores,
        ``.best`` the winner. The search is :meth:`translate`'s (same options), recorded as it runs; the tree's
        ``translation`` is its result (maps included).

        Raises:
            ValueError: as :meth:`translate`.
        """
        records: list = []
        tr = self._beam([text], beam_size=beam_size, length_penalty=length_penalty, max_len=max_len, n_best=beam_size,
                        use_cache=True, return_attention=True, head_mask=None,
                        prefixes=None if prefix is None else [prefix], recorder=records)[0]
        tree = build_tree(records, lambda i: self.pieces([i])[0], self.cfg.decoder_start_id,
                          beam_size=beam_size, length_penalty=length_penalty)
        tree.translation = tr
        return tree

    def sample(self, text: str, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0, *,
               max_len: int | None = None, return_attention: bool = True) -> Translation:
        """Ancestral sampling (:mod:`aiayn.sampling`): each next piece drawn from the model's distribution at
        ``temperature``, cut to the ``top_k`` most probable (0: no cut) and to the nucleus of mass ``top_p``
        (1: no cut), from a :class:`torch.Generator` seeded with ``seed`` (same seed, same output; ``top_k=1`` is
        greedy decoding). ``score`` / ``log_prob`` are the model's own (untempered) log-probabilities; ``nbest``
        holds the one sample.

        Raises:
            ValueError: ``temperature`` <= 0 or not finite, ``top_k`` < 0 or not whole, ``top_p`` outside (0, 1],
                ``seed`` not a whole number >= 0, a bad ``max_len``, an empty text.
        """
        check_sampling_options(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        check_beam_options(max_len=max_len)
        t0 = time.perf_counter()
        encoded = self._encode_all([text])
        src = calls.batch(self.cfg, [encoded[0].ids], self.device)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        pick = sampler(temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
        with torch.inference_mode(), calls.autocast_for(self.device):
            hyps = greedy_decode(self.model, src, max_len=max_len, return_attention=return_attention, pick=pick,
                                 project=self.projection.function)
        tr = self._make(encoded[0], hyps, (time.perf_counter() - t0) * 1000.0, 1)
        if tr.attention is not None:
            tr.attention.meta["sampling"] = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
        return tr

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
            next_pieces=None if best.next_pieces is None else self._next_pieces(best.next_pieces),
        )

    def _next_pieces(self, top: StepTopK) -> NextPieces:
        """:class:`~aiayn.translation.NextPieces` (pieces, probabilities) of a hypothesis' :class:`StepTopK`."""
        return NextPieces(pieces=[self.pieces(row) for row in top.ids.tolist()],
                          probs=top.log_probs.exp().numpy().astype(np.float32),
                          chosen_prob=top.chosen_log_prob.exp().numpy().astype(np.float32))

    def trace(self, text: str, reference: str | None = None, *, beam_size: int = 4, length_penalty: float = 0.6,
              output_ids: Sequence[int] | None = None) -> BlockTrace:
        """Every block's tensors (:class:`~aiayn.block_trace.BlockTrace`, batch of one) of one teacher-forced pass
        (:func:`aiayn.calls.traced`) over ``text`` and an output: ``reference``'s pieces (+ ``</s>``) when given,
        else this text's beam-search output (:meth:`translate` with ``beam_size`` / ``length_penalty``; teacher
        forcing it gives every step's numbers of that search), or ``output_ids`` when given (an output decoded
        already, e.g. a beam tree's ``translation.output_ids``). ``meta`` holds ``src_tokens``, ``output_tokens``,
        ``decoder_input_tokens`` and ``mode`` (``"teacher-forced"`` or ``"free-running"``).

        Raises:
            ValueError: an empty text or reference, bad beam options.
        """
        src_ids = self.encode_source(text).ids
        if reference is not None:
            out_ids, mode = calls.encode_reference(self.tokenizer, self.cfg, reference).ids, "teacher-forced"
        elif output_ids is not None:
            out_ids, mode = [int(i) for i in output_ids], "free-running"
        else:
            out_ids = self.translate(text, beam_size=beam_size, length_penalty=length_penalty,
                                     return_attention=False).output_ids
            mode = "free-running"
        src, tgt = calls.batch(self.cfg, [src_ids], self.device), calls.batch(self.cfg, [out_ids], self.device)
        trace = calls.traced(self.model, src, tgt, amp=True)
        trace.meta = {"src_tokens": self.pieces(src_ids), "output_tokens": self.pieces(out_ids), "mode": mode,
                      "decoder_input_tokens": self.pieces(trace.decoder.tokens[0].tolist())}
        return trace

    def logit_lens(self, text: str, reference: str | None = None, *, k: int = 5, beam_size: int = 4,
                   length_penalty: float = 0.6, output_ids: Sequence[int] | None = None) -> LensTable:
        """What each decoder layer would predict at each step (the logit lens; :func:`aiayn.calls.logit_lens`)
        over the output of :meth:`trace` (the reference, else ``output_ids``, else the beam-search output); its
        ``trace`` is that pass's :class:`~aiayn.block_trace.BlockTrace`.

        Returns:
            :class:`~aiayn.block_trace.LensTable`: ``ids`` / ``probs`` ``(L, T, k)``, ``target_probs`` ``(L, T)``.

        Raises:
            ValueError: as :meth:`trace`; ``k`` not in ``[1, vocab_size]``.
        """
        trace = self.trace(text, reference, beam_size=beam_size, length_penalty=length_penalty, output_ids=output_ids)
        lens = calls.logit_lens(self.model, trace, k)
        ids = lens.ids[:, 0].cpu().numpy()
        pieces = [[self.pieces(row) for row in layer] for layer in ids.tolist()]
        return LensTable(ids, lens.probs[:, 0].cpu().numpy(), pieces, lens.target_probs[:, 0].cpu().numpy(),
                         trace.meta["output_tokens"], trace.meta["decoder_input_tokens"], trace)

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

    def log_likelihoods(self, sources: Sequence[str], targets: Sequence[str], *,
                        batch_size: int = 64) -> list[tuple[float, int]]:
        """``log P(target | source)`` under this model for each pair, by one teacher-forced pass per batch (no maps;
        :func:`aiayn.calls.pair_log_probs`): the natural-log probability of the target's pieces and its ``</s>``,
        summed, and that piece count: e.g. how probable this model finds another model's translations read backwards
        (what :mod:`aiayn.reranking` weighs, from the same pass with its per-piece values kept).

        Args:
            sources: texts in this model's source language.
            targets: texts in its target language, one per source (cut to ``max_len`` pieces, as references are).
            batch_size: pairs per forward pass.

        Returns:
            ``[(log-probability, pieces)]`` in input order (pieces: target pieces + ``</s>``).

        Raises:
            ValueError: unequal lengths, an empty or non-string source or target (names its index), a batch size
                that is not a positive integer.
        """
        rows = calls.pair_log_probs(self.model, self.tokenizer, sources, targets, batch_size=batch_size)
        return [(float(sum(row)), len(row)) for row in rows]
