"""Decoding latency and throughput (Section 6.1 beam search; greedy = beam 1), with and without the
key/value cache, on the shipped checkpoint (``checkpoints/en-de``) or, when it is absent, a randomly
initialised model of the same shape.

Sentences are English (the en-de source side): short (5 words), medium (15), long (40). With the shipped
checkpoint the whole :meth:`aiayn.Translator.translate_batch` path is timed (tokenise, encode, search,
detokenise). With the random stand-in there is no tokenizer: each word becomes 1.3 random pieces and, since
a random model seldom emits EOS, the output is cut at 1.2 x the source pieces, a realistic length.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from aiayn.model.config import TransformerConfig
from aiayn.decoding import beam_search
from aiayn.model.transformer import Transformer

from .timing import Stats, repeat

SENTENCES: dict[str, str] = {
    "short": "My brother lives in Hamburg.",
    "medium": "Yesterday my sister bought a small red car because the old one had broken down.",
    "long": (
        "When the committee finally met on Tuesday morning, nobody expected that the long discussion about the "
        "new library would end with a unanimous decision to open it on Sundays, although the budget for the "
        "coming year is still very uncertain."
    ),
}
#: a batch for throughput: every sentence above plus shorter variants, 32 in all (8 in quick mode)
BATCH_SENTENCES: list[str] = [
    "Good morning.",
    "Where is the station?",
    "I would like a cup of coffee, please.",
    "The children are playing in the garden.",
    "We are going to Berlin next week by train.",
    "He reads the newspaper every morning before work.",
    "This book was written by a famous German author.",
    "Can you tell me how late the museum is open today?",
] * 3 + list(SENTENCES.values()) + ["Thank you very much.", "The weather is nice today.", "She has two brothers.",
                                    "The shop closes at six o'clock.", "My phone is broken."]


def word_count(text: str) -> int:
    return len(text.split())


@dataclass
class Subject:
    """What is decoded: a Translator (shipped checkpoint) or a random model of the shipped shape."""

    model: Transformer
    translator: Any | None
    checkpoint: Path | None

    def describe(self) -> dict[str, Any]:
        if self.translator is not None:
            from .common import checkpoint_info

            return {"kind": "checkpoint", **checkpoint_info(self.checkpoint)}
        return {"kind": "random", "config": self.model.cfg.to_dict(),
                "note": "randomly initialised model of the shipped shape (no checkpoint found); output cut at 1.2 x source pieces"}

    def _ids(self, text: str) -> list[int]:
        n = max(1, math.ceil(1.3 * word_count(text)))
        rng = random.Random(text)
        cfg = self.model.cfg
        return [rng.randrange(4, cfg.vocab_size) for _ in range(n)] + [cfg.eos_id]

    def run(self, texts: list[str], *, beam_size: int, use_cache: bool, return_attention: bool) -> list[int]:
        """Translate ``texts`` in one batch; returns the number of output pieces of each."""
        if self.translator is not None:
            res = self.translator.translate_batch(texts, beam_size=beam_size, use_cache=use_cache, return_attention=return_attention)
            return [len(r.output_ids) for r in res]
        seqs = [self._ids(t) for t in texts]
        width = max(len(s) for s in seqs)
        src = torch.full((len(seqs), width), self.model.cfg.pad_id, dtype=torch.long)
        for i, s in enumerate(seqs):
            src[i, : len(s)] = torch.tensor(s)
        max_len = math.ceil(1.2 * width)
        with torch.inference_mode():
            res = beam_search(self.model, src.to(self.model.device), beam_size=beam_size, use_cache=use_cache,
                              return_attention=return_attention, max_len=max_len)
        return [len(h[0].tokens) for h in res]


#: pass as ``checkpoint`` to :func:`load_subject` to get the random stand-in even when a checkpoint exists
_NO_CHECKPOINT = "<random>"


def load_subject(checkpoint: str | Path | None, device: str) -> Subject:
    """The shipped checkpoint (``checkpoint`` or ``checkpoints/en-de``) if complete, else a random model of
    :data:`benchmarks.common.SHIPPED_SHAPE` (seed 0), in eval mode on ``device``."""
    from .common import SHIPPED_SHAPE, shipped_checkpoint

    path = None if checkpoint == _NO_CHECKPOINT else shipped_checkpoint(checkpoint)
    if path is not None:
        from aiayn.translator import Translator

        tr = Translator.load(path, device=device)
        return Subject(tr.model, tr, path)
    torch.manual_seed(0)
    cfg = TransformerConfig.preset("base", dropout=0.0, **SHIPPED_SHAPE)
    return Subject(Transformer(cfg).to(device).eval(), None, None)


def run(ctx) -> list:
    """The ``decode`` group: latency (median, p95) per sentence length x {greedy, beam 4} x {cache, no
    cache}; the cache speed-up (plus, with a checkpoint, on the random stand-in at a fixed output length);
    live translation (beam 4, cache, maps returned, as the app asks); batch
    throughput (sentences/s, beam 4, cache); with a checkpoint, the cost of reverse-model reranking
    (:func:`rerank_cost_row`)."""
    from .report import Row, na

    rows: list = []
    for device in ctx.devices:
        try:
            subject = load_subject(ctx.checkpoint, device)
        except (FileNotFoundError, ValueError) as exc:
            rows.append(na(f"decode.{device}.live.medium", "decode", device, "live translation, 15 words, beam 4, cache, with maps", "ms",
                           f"cannot load checkpoint: {exc}"))
            continue
        desc = subject.describe()
        src_note = "shipped checkpoint" if subject.translator is not None else "RANDOM model (no checkpoint)"
        ctx.log(f"[decode] {device}: {src_note}")
        ctx.info.setdefault("decode_model", {})[device] = desc
        lengths = ["short", "medium"] if ctx.quick else ["short", "medium", "long"]
        reps = ctx.latency_repeats
        medians: dict[tuple, float] = {}
        for length in lengths:
            text = SENTENCES[length]
            for beam, mode in ((1, "greedy"), (4, "beam4")):
                for cache in (True, False):
                    out_len: list[int] = []
                    fn = lambda: out_len.append(subject.run([text], beam_size=beam, use_cache=cache, return_attention=False)[0])  # noqa: E731
                    n = max(2, reps // 3) if (length == "long" and not cache) else reps
                    st = Stats.of(repeat(fn, warmup=min(ctx.warmup, 2), repeats=n, device=device))
                    medians[(length, mode, cache)] = st.median
                    label = "cache" if cache else "no cache"
                    rows.append(Row(f"decode.{device}.latency.{mode}.{'cache' if cache else 'nocache'}.{length}", "decode", device,
                                    f"translate {length} ({word_count(text)} words), {mode}, {label}", 1000 * st.median, "ms",
                                    f"p95 {1000 * st.p95:.1f} ms, {out_len[-1]} output pieces",
                                    {"stats_s": st.to_dict(), "words": word_count(text), "output_pieces": out_len[-1]}))
            for mode in ("greedy", "beam4"):
                ratio = medians[(length, mode, False)] / medians[(length, mode, True)]
                rows.append(Row(f"decode.{device}.cache_speedup.{mode}.{length}", "decode", device,
                                f"cache speed-up, {mode}, {length}", ratio, "x", "median no-cache / median cache"))
        if subject.translator is not None:
            # A checkpoint decides its own output length (an early one stops at once); the random stand-in
            # always produces 1.2 x the source pieces, so this row gives the cache a fixed amount of work.
            stand_in = load_subject(_NO_CHECKPOINT, device)
            text = SENTENCES["medium"]
            t_med = {}
            for cache in (True, False):
                out_len = []
                t_med[cache] = Stats.of(repeat(lambda: out_len.append(stand_in.run([text], beam_size=4, use_cache=cache, return_attention=False)[0]),
                                               warmup=1, repeats=max(3, reps // 3), device=device)).median
            rows.append(Row(f"decode.{device}.cache_speedup.beam4.medium.fixed_length", "decode", device,
                            f"cache speed-up, beam4, medium, random stand-in ({out_len[-1]} output pieces)", t_med[False] / t_med[True], "x",
                            "same shape as the checkpoint, output length fixed", {"cache_s": t_med[True], "no_cache_s": t_med[False], "output_pieces": out_len[-1]}))
        # live translation as the app asks for it: beam 4, cache, every attention map returned
        text = SENTENCES["medium"]
        out_len = []
        st = Stats.of(repeat(lambda: out_len.append(subject.run([text], beam_size=4, use_cache=True, return_attention=True)[0]),
                             warmup=min(ctx.warmup, 2), repeats=reps, device=device))
        detail = {"stats_s": st.to_dict(), "output_pieces": out_len[-1]}
        if subject.translator is None:
            detail["target_caveat"] = "random stand-in, not the shipped model"
        rows.append(Row(f"decode.{device}.live.medium", "decode", device, "live translation, 15 words, beam 4, cache, with maps",
                        1000 * st.median, "ms", f"p95 {1000 * st.p95:.1f} ms" + ("" if subject.translator else "; random model"), detail))
        batch = BATCH_SENTENCES[:8] if ctx.quick else BATCH_SENTENCES
        st = Stats.of(repeat(lambda: subject.run(batch, beam_size=4, use_cache=True, return_attention=False),
                             warmup=1, repeats=max(2, ctx.repeats // 3), device=device))
        rows.append(Row(f"decode.{device}.batch_throughput", "decode", device, f"batch translation, {len(batch)} sentences, beam 4, cache",
                        len(batch) / st.median, "sent/s", f"median batch {st.median:.2f} s", {"stats_s": st.to_dict(), "sentences": len(batch)}))
        if subject.translator is not None:
            rows.append(rerank_cost_row(subject.translator, device, ctx))
    return rows


def rerank_cost_row(translator: Any, device: str, ctx) -> Any:
    """One row: a 15-word sentence translated (beam 4, its 4-best list, no maps) and reranked by the reverse model
    (:mod:`aiayn.reranking`), over the same translation alone: median over median, in one run."""
    from aiayn.reranking import rerank, reverse_for

    from .report import Row, na

    key, label = f"decode.{device}.rerank_cost.medium", "reverse-model reranking, 15 words, beam 4: time over beam search alone"
    try:
        reverse = reverse_for(translator, translator.meta.get("direction") or "en-de", device=device)
    except ValueError as exc:
        return na(key, "decode", device, label, "x", f"no reverse model: {exc}")
    text = SENTENCES["medium"]

    def beam() -> Any:
        return translator.translate(text, beam_size=4, n_best=4, return_attention=False)

    times = {}
    for name, fn in (("beam", beam), ("reranked", lambda: rerank(text, beam().nbest, reverse))):
        times[name] = Stats.of(repeat(fn, warmup=min(ctx.warmup, 2), repeats=ctx.latency_repeats, device=device)).median
    return Row(key, "decode", device, label, times["reranked"] / times["beam"], "x",
               f"median {1000 * times['reranked']:.1f} ms reranked, {1000 * times['beam']:.1f} ms beam search alone",
               {"median_s": times})
