"""Head ablation on a model (Michel et al. 2019, "Are Sixteen Heads Really Better than One?"; Voita et al. 2019):
the model runs behind the head-ablation page and ``aiayn sweep``. The masks, their URL spelling and the pure
scores live in :mod:`aiayn.analysis.ablation`; every pass here goes through :mod:`aiayn.calls`.

* :func:`forced_maps`: the maps of a teacher-forced pass over given ids with heads removed;
* :func:`reference_logprob`: the teacher-forced log-probability of references;
* :func:`head_sweep`: for each head alone, the drop in corpus chrF of the beam output (Section 6.1) and in the
  mean log-probability of the reference when that head is removed;
* the per-checkpoint cache ``<checkpoint>/head_sweep.json`` (:func:`cached_head_sweep`, fresh while the weights,
  sentences and beam size are the same; a sweep decoded with the output layer at another precision,
  :mod:`aiayn.model.projection`, is kept apart in ``head_sweep.<precision>.json``) and its command line,
  ``aiayn sweep --checkpoint checkpoints/en-de``.

A removed head's attention weights are still computed (what it would attend to); only its *output* is removed
before ``W^O``. Torch is imported inside the functions, so that importing this module (the app does) stays light.

The sweep runs the model ``2 (3 L H + 1)`` times; a server runs it as a background job (:mod:`aiayn.jobs`): each
model run goes through a ``run`` hook (the app passes :meth:`aiayn.serving.DecodeQueue.run_background`, so a
class's requests go first) and a ``should_stop`` hook is checked before each one (:class:`aiayn.jobs.Cancelled`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .analysis.ablation import KINDS, corpus_chrf, head_mask_array
from .checkpoint_format import weights_sha256  # what makes a cached sweep stale
from .jobs import Cancelled

if TYPE_CHECKING:  # annotations only: these import torch / pandas
    import pandas as pd

    from .model.maps import AttentionMaps
    from .translator import Translator

#: file beside each checkpoint holding its sweep
SWEEP_FILE = "head_sweep.json"
SWEEP_FORMAT = "aiayn-head-sweep"
SWEEP_VERSION = 1
#: the columns of :func:`head_sweep`'s table
SWEEP_COLUMNS = ["kind", "layer", "head", "chrf", "chrf_drop", "logprob", "logprob_drop", "chrf_intact",
                 "logprob_intact"]


# -- model runs ----------------------------------------------------------------------------------------------
def reference_logprob(tr: "Translator", pairs: Sequence[tuple[str, str]], *, head_mask: Any = None) -> tuple[float, int]:
    """Teacher-forced log-probability of the references (one batched pass, :func:`aiayn.calls.pair_log_probs`).

    Sources and references are encoded as :meth:`~aiayn.translator.Translator.force` encodes them
    (:func:`aiayn.calls.encode_source`, :func:`aiayn.calls.encode_reference`: pieces + ``</s>``), the decoder is fed
    the model's start piece + the reference shifted right, and ``log p(piece)`` (natural log, softmax of the output
    layer, Section 3.4) is summed over every reference piece.

    Args:
        pairs: ``(source, reference)`` texts.
        head_mask: ``(3, L, H)`` head mask, or None.

    Returns:
        ``(total log-probability, number of pieces)``; the mean per piece is their ratio.

    Raises:
        ValueError: an empty source or reference, a bad ``head_mask``.
    """
    from . import calls  # function-level: importing this module stays free of torch

    per_pair = calls.pair_log_probs(tr.model, tr.tokenizer, [s for s, _ in pairs], [r for _, r in pairs],
                                    head_mask=head_mask)
    return float(sum(v for row in per_pair for v in row)), sum(len(row) for row in per_pair)


def forced_maps(tr: "Translator", src_ids: Sequence[int], output_ids: Sequence[int], *,
                head_mask: Any = None) -> "AttentionMaps":
    """Attention maps of a teacher-forced pass over given ids (no re-tokenisation), with heads removed.

    The decoder is fed the model's start piece + ``output_ids[:-1]`` (:func:`aiayn.calls.teacher_forced_ids`), so the
    maps of two masks over the same ids line up position by position (how every remaining map changes when heads
    are removed). The maps of a removed head are still computed: they show what it would attend to; its output
    does not reach ``W^O``.

    Args:
        src_ids: ``(S,)`` source ids ending with ``</s>``; output_ids: ``(T,)`` predicted ids.
        head_mask: ``(3, L, H)`` head mask, or None (the intact model).

    Returns:
        :class:`~aiayn.model.maps.AttentionMaps`, B=1, float32 on the CPU, with the token labels set:
        encoder ``(L, 1, H, S, S)``, decoder ``(L, 1, H, T, T)``, cross ``(L, 1, H, T, S)``.

    Raises:
        ValueError: empty ``output_ids``, ids outside the vocabulary, a bad ``head_mask``.
    """
    from . import calls  # function-level: importing this module stays free of torch

    if not len(output_ids):
        raise ValueError("forced_maps needs at least one output id")
    forced = calls.teacher_forced_ids(tr.model, [src_ids], [output_ids], head_mask=head_mask, return_attention=True,
                                      amp=True)
    maps = forced.maps.cpu()
    maps.src_tokens, maps.decoder_input_tokens = [tr.pieces(src_ids)], [tr.pieces(forced.decoder_input[0].tolist())]
    maps.output_tokens = [tr.pieces(output_ids)]
    return maps


# -- the sweep ------------------------------------------------------------------------------------------------
#: what runs one model run of the sweep: ``run(fn, *args, **kwargs)`` returns ``fn(*args, **kwargs)``
RunHook = Callable[..., Any]


def _direct(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def _pieces(run: RunHook | None, should_stop: Callable[[], bool] | None) -> RunHook:
    """``run`` (default: a direct call) with ``should_stop`` checked before each model run."""
    run = run or _direct

    def piece(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if should_stop is not None and should_stop():
            raise Cancelled("the head sweep was cancelled")
        return run(fn, *args, **kwargs)

    return piece


def _score(tr: "Translator", pairs: Sequence[tuple[str, str]], head_mask: Any, beam_size: int,
           run: RunHook = _direct) -> tuple[float, float]:
    """(corpus chrF of the beam output, mean log-probability per reference piece) under ``head_mask``: two model
    runs, each through ``run``."""
    outs = run(tr.translate_batch, [s for s, _ in pairs], beam_size=beam_size, return_attention=False,
               head_mask=head_mask)
    chrf = corpus_chrf([o.text for o in outs], [r for _, r in pairs])
    total, n = run(reference_logprob, tr, pairs, head_mask=head_mask)
    return chrf, total / max(n, 1)


def head_sweep(tr: "Translator", pairs: Sequence[tuple[str, str]], *, kinds: Sequence[str] = KINDS,
               beam_size: int = 4, progress: Callable[[float, str], Any] | None = None,
               should_stop: Callable[[], bool] | None = None, run: RunHook | None = None) -> "pd.DataFrame":
    """Remove each head alone and measure what the translation loses (Michel et al. 2019; Voita et al. 2019).

    For the intact model and then for every ``(kind, layer, head)``: the beam output of all sources (beam
    ``beam_size``, length penalty 0.6, Section 6.1) scored with corpus chrF against the references, and the
    teacher-forced mean log-probability of the references per piece (:func:`reference_logprob`).

    Args:
        tr: the translator.
        pairs: ``(source, reference)`` texts (the app uses the curated examples,
            :func:`aiayn.examples.sentence_pairs`).
        kinds: which of :data:`KINDS` to sweep.
        beam_size: beam width (paper: 4).
        progress: called as ``progress(fraction done in [0, 1], label)`` after each head (two model runs).
        should_stop: called before each model run; when it returns True the sweep stops with
            :class:`aiayn.jobs.Cancelled` (nothing is returned).
        run: runs each model run, ``run(fn, *args, **kwargs)`` (default: at once; the app passes
            :meth:`aiayn.serving.DecodeQueue.run_background`).

    Returns:
        ``pandas.DataFrame`` with :data:`SWEEP_COLUMNS`, one row per (kind, layer, head), layer and head
        counting from 0: ``chrf`` / ``logprob`` with that head removed, ``chrf_drop = chrf_intact - chrf``
        (chrF points) and ``logprob_drop = logprob_intact - logprob`` (nats per piece; positive = the head
        helped), and the intact numbers ``chrf_intact`` / ``logprob_intact`` (also in ``df.attrs``).

    Raises:
        ValueError: no pairs, an unknown kind, ``beam_size < 1``.
        aiayn.jobs.Cancelled: ``should_stop()`` returned True.
    """
    import pandas as pd  # function-level: pandas is slow to import; only the sweep needs it

    from .decoding import check_beam_options  # function-level: imports torch

    pairs = [(str(s), str(r)) for s, r in pairs]
    if not pairs:
        raise ValueError("the sweep needs at least one (source, reference) pair")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {list(kinds)}")
    check_beam_options(beam_size=beam_size)
    L, H = tr.cfg.n_layers, tr.cfg.n_heads
    heads = [(k, layer, h) for k in KINDS if k in kinds for layer in range(L) for h in range(H)]
    total = len(heads) + 1
    run = _pieces(run, should_stop)
    chrf0, lp0 = _score(tr, pairs, None, beam_size, run)
    if progress is not None:
        progress(1 / total, "intact model")
    rows = []
    for i, (kind, layer, head) in enumerate(heads, start=2):
        chrf, lp = _score(tr, pairs, head_mask_array([(kind, layer, head)], L, H), beam_size, run)
        rows.append({"kind": kind, "layer": layer, "head": head, "chrf": chrf, "chrf_drop": chrf0 - chrf,
                     "logprob": lp, "logprob_drop": lp0 - lp, "chrf_intact": chrf0, "logprob_intact": lp0})
        if progress is not None:
            progress(i / total, f"{kind} layer {layer + 1} head {head + 1}")
    df = pd.DataFrame(rows, columns=SWEEP_COLUMNS)
    df.attrs.update(chrf_intact=chrf0, logprob_intact=lp0, beam_size=beam_size, n_pairs=len(pairs))
    return df


# -- the per-checkpoint cache ---------------------------------------------------------------------------------
def sweep_path(checkpoint: str | Path, projection: str = "float32") -> Path:
    """``<checkpoint>/head_sweep.json``, or ``head_sweep.<projection>.json`` for a sweep whose translations ran the
    output layer at another precision than float32 (:mod:`aiayn.model.projection`; its chrF drops differ a little),
    so that a server in int8 neither reads nor overwrites the float32 sweep a checkpoint ships with."""
    if projection == "float32":
        return Path(checkpoint) / SWEEP_FILE
    return Path(checkpoint) / SWEEP_FILE.replace(".json", f".{projection}.json")


def sweep_payload(df: "pd.DataFrame", *, weights: str, pairs: Sequence[tuple[str, str]], beam_size: int,
                  direction: str | None = None, elapsed_s: float | None = None,
                  projection: str = "float32") -> dict[str, Any]:
    """The JSON-able content of ``head_sweep.json``: format, weights sha256, sentences, settings, intact
    numbers and the rows of :func:`head_sweep` (layer and head from 0)."""
    return {
        "format": SWEEP_FORMAT, "format_version": SWEEP_VERSION, "weights_sha256": weights, "direction": direction,
        "beam_size": beam_size, "projection": projection, "pairs": [list(p) for p in pairs], "elapsed_s": elapsed_s,
        "chrf_intact": df.attrs.get("chrf_intact"), "logprob_intact": df.attrs.get("logprob_intact"),
        "note": "drop = intact - ablated (one head removed); chrF points; log-probability in nats per reference "
                "piece; layers and heads count from 0; sentences: the curated examples",
        "rows": df.to_dict(orient="records"),
    }


def sweep_frame(payload: dict[str, Any]) -> "pd.DataFrame":
    """:func:`head_sweep`'s table back from a :func:`sweep_payload` dict."""
    import pandas as pd  # function-level: see head_sweep

    df = pd.DataFrame(payload["rows"], columns=SWEEP_COLUMNS)
    df.attrs.update(chrf_intact=payload.get("chrf_intact"), logprob_intact=payload.get("logprob_intact"),
                    beam_size=payload.get("beam_size"), n_pairs=len(payload.get("pairs", [])))
    return df


def load_sweep(checkpoint: str | Path, pairs: Sequence[tuple[str, str]], *, beam_size: int = 4,
               projection: str = "float32") -> "pd.DataFrame | None":
    """The cached sweep of ``checkpoint`` when it is fresh, else None.

    Fresh means: :func:`sweep_path` (``head_sweep.json`` for ``projection`` float32) exists, is readable, has this
    module's format and version, the sha256 of the weights it was computed on equals the current weights', and it
    used these ``pairs``, ``beam_size`` and output-layer ``projection`` (a file without the field was written
    before the option existed: float32). A stale or broken file gives None (recompute it), never an error.
    """
    path = sweep_path(checkpoint, projection)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        fresh = (payload.get("format") == SWEEP_FORMAT and payload.get("format_version") == SWEEP_VERSION
                 and payload.get("weights_sha256") == weights_sha256(checkpoint)
                 and payload.get("pairs") == [list(p) for p in pairs] and payload.get("beam_size") == beam_size
                 and payload.get("projection", "float32") == projection)
        return sweep_frame(payload) if fresh else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def cached_head_sweep(tr: "Translator", pairs: Sequence[tuple[str, str]], *, checkpoint: str | Path | None = None,
                      beam_size: int = 4, progress: Callable[[float, str], Any] | None = None,
                      write: bool = True, should_stop: Callable[[], bool] | None = None,
                      run: RunHook | None = None) -> "pd.DataFrame":
    """:func:`head_sweep` over all kinds, read from ``<checkpoint>/head_sweep.json`` when fresh
    (:func:`load_sweep`), else computed and (with ``write``) saved there atomically; a read-only checkpoint
    directory is not an error (the result is returned unsaved, with why in ``df.attrs["not_stored"]``). ``checkpoint``
    defaults to ``tr.path``;
    ``progress``, ``should_stop`` and ``run`` as :func:`head_sweep` (a cancelled sweep writes nothing).

    Raises:
        ValueError: no checkpoint directory known, no pairs.
        aiayn.jobs.Cancelled: ``should_stop()`` returned True.
    """
    from .files import atomic_write_text

    ckpt = Path(checkpoint) if checkpoint is not None else tr.path
    if ckpt is None:
        raise ValueError("cached_head_sweep needs the checkpoint directory (the translator was not loaded from one)")
    projection = tr.projection.precision
    df = load_sweep(ckpt, pairs, beam_size=beam_size, projection=projection)
    if df is not None:
        if progress is not None:
            progress(1.0, "read from " + SWEEP_FILE)
        return df
    t0 = time.perf_counter()
    df = head_sweep(tr, pairs, beam_size=beam_size, progress=progress, should_stop=should_stop, run=run)
    if write:
        payload = sweep_payload(df, weights=weights_sha256(ckpt), pairs=pairs, beam_size=beam_size,
                                direction=tr.meta.get("direction"), elapsed_s=round(time.perf_counter() - t0, 2),
                                projection=projection)
        try:
            atomic_write_text(sweep_path(ckpt, projection), json.dumps(payload, indent=1) + "\n")
        except OSError as exc:  # a read-only checkpoint: the caller still gets the result, and is told
            df.attrs["not_stored"] = f"{type(exc).__name__}: {exc.strerror or exc}"
    return df


def cli_main(argv: list[str] | None = None) -> int:
    """``aiayn sweep --checkpoint DIR [--direction en-de] [--beam-size 4] [--force]``:
    compute (or confirm fresh) the head sweep of a checkpoint on the curated examples of its direction."""
    from .examples import sentence_pairs
    from .translator import Translator

    ap = argparse.ArgumentParser(prog="aiayn sweep",
                                 description="Head-ablation sweep of a checkpoint (Michel et al. 2019), cached in "
                                             f"<checkpoint>/{SWEEP_FILE}.")
    ap.add_argument("--checkpoint", "-c", required=True, help="checkpoint directory")
    ap.add_argument("--direction", choices=["en-de", "de-en"], default=None,
                    help="which curated examples (default: the checkpoint's own direction)")
    ap.add_argument("--beam-size", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--force", action="store_true", help="recompute even when the cached file is fresh")
    args = ap.parse_args(argv)
    try:
        tr = Translator.load(args.checkpoint, device=args.device)
        direction = args.direction or tr.meta.get("direction")
        pairs = sentence_pairs(direction)
    except (FileNotFoundError, ValueError) as exc:
        print(f"head sweep: {exc}", file=sys.stderr)
        return 2
    if args.force:
        sweep_path(args.checkpoint, tr.projection.precision).unlink(missing_ok=True)

    def report(frac: float, label: str) -> None:
        print(f"\r[{frac:6.1%}] {label:<40}", end="", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    df = cached_head_sweep(tr, pairs, checkpoint=args.checkpoint, beam_size=args.beam_size, progress=report)
    print(file=sys.stderr)
    print(f"{sweep_path(args.checkpoint, tr.projection.precision)}: {len(df)} heads, intact chrF {df.attrs['chrf_intact']:.2f}, "
          f"log-prob/piece {df.attrs['logprob_intact']:.3f} ({time.perf_counter() - t0:.1f} s)")
    worst = df.sort_values("chrf_drop", ascending=False).head(5)
    print(worst[["kind", "layer", "head", "chrf_drop", "logprob_drop"]].to_string(index=False))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_main())
