"""The output projection of Opus-MT en-de's shape at each serving precision, in isolation, then one whole beam step.

``python -m benchmarks.projection [--threads 2] [--rounds 3]`` prints two markdown tables (docs/benchmarks.md,
"Classroom on the paper-size model, fourth round"):

* the ``(rows, 512) x (512, 58,101)`` projection (a randomly initialised model of :data:`OPUS_SHAPE`, tied embedding
  plus ``final_logits_bias``) at float32 (:meth:`Transformer.project`), bfloat16 and int8
  (:class:`aiayn.model.projection.OutputProjection`, weights converted once, before timing), alone and followed by
  the float32 log-softmax; rows 4 (one sentence, beam 4), 28 and 112 (a class of 28 at beam 4);
* one whole cached beam step at 112 rows: the decoder's six layers over a source of 25 pieces and a prefix of 7,
  the projection, the log-softmax and the step's ``topk`` (k = 10), as :func:`aiayn.decoding.beam_search` runs it.

Precisions alternate within each round (order reversed every other round); each cell is the median of the rounds'
medians, in ms. OpenMP threads sleep while they wait (``OMP_WAIT_POLICY=PASSIVE``, as the app's server).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from aiayn.model.config import TransformerConfig  # noqa: E402
from aiayn.model.projection import PRECISIONS, OutputProjection  # noqa: E402
from aiayn.model.transformer import Transformer  # noqa: E402

#: Helsinki-NLP/opus-mt-en-de's shape as :func:`aiayn.interop_marian.from_marian` converts it
OPUS_SHAPE = dict(vocab_size=58101, d_model=512, n_heads=8, d_ff=2048, n_layers=6, pad_id=58100, eos_id=0, bos_id=1,
                  activation="swish", share_embeddings=True, final_logits_bias=True, decoder_start="pad",
                  positional_layout="concatenated", layer_norm_eps=1e-5, max_len=512)


def _median_ms(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _rounds(cases: dict, rounds: int, calls: int) -> dict:
    out = {k: [] for k in cases}
    for r in range(rounds):
        for k in (list(cases) if r % 2 == 0 else list(cases)[::-1]):
            out[k].append(_median_ms(cases[k], calls))
    return {k: statistics.median(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.projection", description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=7)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**OPUS_SHAPE)).eval()
    projections = {p: OutputProjection(model, p) for p in PRECISIONS}
    fns = {p: (proj.function or model.project) for p, proj in projections.items()}
    print(f"load average {os.getloadavg()[0]:.1f}, {args.threads} threads, torch {torch.__version__}")
    print("| rows | " + " | ".join(f"{p} | {p} + log_softmax" for p in PRECISIONS) + " |")
    print("|---:|" + "---:|" * 2 * len(PRECISIONS))
    with torch.inference_mode():
        for rows in (4, 28, 112):
            h = torch.randn(rows, 1, 512)
            cases = {}
            for p, f in fns.items():
                cases[p] = (lambda f=f: f(h))
                cases[p + "+lsm"] = (lambda f=f: torch.log_softmax(f(h).float(), dim=-1))
            ms = _rounds(cases, args.rounds, args.calls)
            print(f"| {rows} | " + " | ".join(f"{ms[p]:.1f} | {ms[p + '+lsm']:.1f}" for p in PRECISIONS) + " |")
        step = _beam_step_cases(model, fns)
        ms = _rounds(step, args.rounds, args.calls)
    print(f"\nwhole beam step, 112 rows (load average {os.getloadavg()[0]:.1f}): " +
          ", ".join(f"{p} {ms[p]:.1f} ms" for p in PRECISIONS))


def _beam_step_cases(model: Transformer, fns: dict) -> dict:
    """One cached decoder step of 112 rows (source 25 pieces, 7 pieces decoded) + log-softmax + topk, per precision."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(2, 58000, (112, 25), generator=g)
    enc = model.encode(src)
    cache = model.init_cache(enc)
    for t in range(7):
        cache = model.decode(torch.randint(2, 58000, (112, 1), generator=g), enc, cache=cache).cache
    tok = torch.randint(2, 58000, (112, 1), generator=g)

    def step(f):
        out = model.decode(tok, enc, cache=cache, project=f)
        return torch.log_softmax(out.logits[:, -1].float(), dim=-1).topk(10, dim=-1)

    return {p: (lambda f=f: step(f)) for p, f in fns.items()}


if __name__ == "__main__":
    main()
