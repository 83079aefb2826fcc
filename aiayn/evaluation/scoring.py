"""`aiayn evaluate`: sacreBLEU and chrF of a checkpoint on a held-out split, beside a dictionary baseline.

The paper reports case-sensitive BLEU on newstest2014 (Section 6.1, Table 2); we report sacreBLEU
(Post, 2018) with its signature, so that numbers are reproducible, and chrF (Popovic, 2015), which is
kinder to morphology and short outputs. Decoding follows Section 6.1: beam size 4, length penalty
alpha = 0.6, maximum output length = source length + 50 (the :class:`~aiayn.translator.Translator`
defaults).

A model is only worth something if it beats the trivial system, so the same scores are computed for a
word-by-word translation with the Ding dictionary built from the training split
(:func:`aiayn.evaluation.baseline.dictionary_baseline`).

Command line::

    aiayn evaluate --checkpoint checkpoints/en-de --data ~/.cache/aiayn/data/ding \\
        [--split test] [--beam-size 4] [--alpha 0.6] [--batch-size 32] [--limit N] [--out results.json]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from sacrebleu.metrics import BLEU, CHRF
from tqdm import tqdm

from ..data.corpora import read_tsv
from ..files import atomic_write_text, sha256_file
from .baseline import dictionary_baseline, load_lexicon

__all__ = ["score", "evaluate_translator", "read_split", "cli_main"]


def score(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """Corpus-level sacreBLEU and chrF of ``hyps`` against one reference each.

    Uses ``sacrebleu.metrics.BLEU()`` (13a tokenisation, exponential smoothing, case-sensitive) and
    ``sacrebleu.metrics.CHRF()`` (character 6-grams, beta 2) with their default settings.

    Args:
        hyps: system outputs, one string per sentence.
        refs: references, aligned with ``hyps``.

    Returns:
        ``{"bleu": float, "chrf": float`` (both in [0, 100])``, "bleu_signature": str,
        "chrf_signature": str, "n": int, "bleu_precisions": [p1..p4] (percent), "brevity_penalty":
        float, "sys_len": int, "ref_len": int}`` (lengths in 13a tokens).

    Raises:
        ValueError: different numbers of hypotheses and references, none at all, or a non-string.
    """
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("nothing to score: no hypotheses")
    for name, seq in (("hypothesis", hyps), ("reference", refs)):
        for i, s in enumerate(seq):
            if not isinstance(s, str):
                raise ValueError(f"{name} {i} is not a string ({type(s).__name__})")
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hyps, [refs])
    c = chrf.corpus_score(hyps, [refs])
    return {
        "bleu": float(b.score),
        "chrf": float(c.score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "n": len(hyps),
        "bleu_precisions": [float(p) for p in b.precisions],
        "brevity_penalty": float(b.bp),
        "sys_len": int(b.sys_len),
        "ref_len": int(b.ref_len),
    }


def evaluate_translator(
    translator,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    batch_size: int = 32,
    max_len: int | None = None,
    lexicon: dict[str, str] | None = None,
    src_lang: str | None = None,
    progress: bool = False,
    reverse: Any = None,
    rerank_weight: float = 0.0,
) -> dict[str, Any]:
    """Translate ``sources`` with beam search (Section 6.1) and score against ``references``.

    Sentences are decoded in batches of ``batch_size`` sorted by source length (less padding); the
    output order is the input order. Maximum output length: source length + 50 (Translator default).

    Args:
        translator: an :class:`aiayn.Translator` (anything with ``translate_batch``).
        sources, references: aligned lists of strings (non-empty sources).
        beam_size: beam width (paper: 4); alpha: length penalty (paper: 0.6).
        max_len: maximum output pieces; None = source length + 50 (Section 6.1).
        lexicon: if given (from :func:`aiayn.evaluation.baseline.load_lexicon`), also score the word-by-word
            dictionary baseline; ``src_lang`` ("de" or "en") is then required.
        progress: show a tqdm progress bar (sentences).
        reverse: the Translator of the opposite direction, to rerank each sentence's ``beam_size``-best list by
            :func:`aiayn.reranking.rerank_batch` with ``rerank_weight`` (the output is the reranked best); None:
            the beam's output (the paper).

    Returns:
        ``{"model": score(...), "baseline": score(...) or None, "hypotheses": [str],
        "baseline_hypotheses": [str] or None, "n_sentences": int, "unfinished": int (outputs cut at the
        maximum length, no EOS), "truncated_sources": int, "elapsed_s": float, "sentences_per_s": float}``.

    Raises:
        ValueError: misaligned or empty inputs, an empty source, bad beam settings, ``lexicon`` without
            ``src_lang``, a bad ``rerank_weight``.
    """
    from aiayn.reranking import check_weight, rerank_batch

    rerank_weight = check_weight(rerank_weight)
    sources, references = list(sources), list(references)
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    if not sources:
        raise ValueError("nothing to evaluate: no sentences")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if lexicon is not None and src_lang not in ("de", "en"):
        raise ValueError(f"src_lang must be 'de' or 'en' to run the dictionary baseline, got {src_lang!r}")
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    hyps: list[str | None] = [None] * len(sources)
    unfinished = truncated = 0
    t0 = time.perf_counter()
    with tqdm(total=len(sources), disable=not progress, desc="translating", unit="sent", dynamic_ncols=True) as bar:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            texts = [sources[i] for i in idx]
            outs = translator.translate_batch(texts, beam_size=beam_size, length_penalty=alpha, max_len=max_len,
                                              return_attention=False, n_best=1 if reverse is None else beam_size)
            best = [t.text for t in outs] if reverse is None else \
                [row[0].text for row in rerank_batch(texts, [t.nbest for t in outs], reverse, rerank_weight)]
            for i, t, text in zip(idx, outs, best):
                hyps[i] = text
                unfinished += not t.finished
                truncated += bool(t.truncated)
            bar.update(len(idx))
    elapsed = time.perf_counter() - t0
    model_hyps = [h if h is not None else "" for h in hyps]
    result: dict[str, Any] = {
        "model": score(model_hyps, references),
        "baseline": None,
        "hypotheses": model_hyps,
        "baseline_hypotheses": None,
        "n_sentences": len(sources),
        "unfinished": unfinished,
        "truncated_sources": truncated,
        "elapsed_s": elapsed,
        "sentences_per_s": len(sources) / max(elapsed, 1e-9),
    }
    if lexicon is not None:
        base = [dictionary_baseline(s, lexicon, src_lang=src_lang) for s in sources]
        result["baseline"] = score(base, references)
        result["baseline_hypotheses"] = base
    return result


def read_split(data_dir: str | Path, split: str, direction: str) -> tuple[list[str], list[str], int]:
    """Source and reference texts of ``data_dir/{split}.tsv`` (columns ``de``, ``en``) for ``direction``
    ("en-de": source column ``en``, references ``de``). Pairs with an empty side are left out.

    Returns:
        ``(sources, references, number of pairs left out)``.

    Raises:
        FileNotFoundError: the file is missing. ValueError: bad direction, missing column, malformed TSV.
    """
    if direction not in ("en-de", "de-en"):
        raise ValueError(f"direction must be 'en-de' or 'de-en', got {direction!r}")
    src_lang, tgt_lang = direction.split("-")
    pairs = read_tsv(Path(data_dir).expanduser() / f"{split}.tsv", src_lang, tgt_lang)
    kept = [(s, t) for s, t in pairs if s.strip() and t.strip()]
    return [s for s, _ in kept], [t for _, t in kept], len(pairs) - len(kept)


def _table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    df = pd.DataFrame(
        [{"system": name, "BLEU": round(s["bleu"], 2), "chrF": round(s["chrf"], 2),
          "BP": round(s["brevity_penalty"], 3), "hyp/ref len": f"{s['sys_len']}/{s['ref_len']}"} for name, s in rows]
    )
    return df.to_string(index=False)


class _Refused(Exception):
    """Bad input for ``aiayn evaluate``: the message is printed and the exit code is 2."""


def _parser() -> argparse.ArgumentParser:
    from ..reranking import add_cli_options as add_rerank_options  # no torch import

    ap = argparse.ArgumentParser(prog="aiayn evaluate",
                                 description="sacreBLEU and chrF of a checkpoint on a held-out split (beam search, Section 6.1), "
                                             "beside a word-by-word dictionary baseline.")
    ap.add_argument("--checkpoint", "-c", required=True, help="checkpoint directory (e.g. checkpoints/en-de)")
    ap.add_argument("--data", required=True, help="prepared data directory ({split}.tsv with columns de, en; dictionary.tsv)")
    ap.add_argument("--split", default="test", help="split file name without .tsv (default: test)")
    ap.add_argument("--direction", choices=["en-de", "de-en"], default=None,
                    help="override the checkpoint's direction (default: its meta 'direction')")
    ap.add_argument("--beam-size", type=int, default=4, help="beam width (paper: 4)")
    ap.add_argument("--alpha", type=float, default=0.6, help="length penalty alpha (paper: 0.6)")
    ap.add_argument("--batch-size", type=int, default=32, help="sentences decoded together")
    ap.add_argument("--max-len", type=int, default=None, help="maximum output pieces (default: source length + 50, Section 6.1)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    ap.add_argument("--samples", type=int, default=5, help="sample translations to print")
    ap.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--hypotheses", action="store_true", help="include every hypothesis in the JSON")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--domain", default=None, help="a model trained with domain tags (aiayn train --domain-tags): the "
                    "tag to start the decoder with (default: the model's own)")
    add_rerank_options(ap)
    return ap


def _check_options(args: argparse.Namespace) -> Path:
    """The numeric options' ranges and the data directory; returns the data directory. Raises _Refused."""
    from ..decoding import beam_option_error  # imports torch: only when the command runs
    from ..reranking import cli_weight

    bad = beam_option_error(beam_size=args.beam_size, length_penalty=args.alpha, max_len=args.max_len, cli=True)
    if bad:
        raise _Refused(bad)
    if args.batch_size < 1:
        raise _Refused(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.limit is not None and args.limit < 1:
        raise _Refused(f"--limit must be >= 1, got {args.limit}")
    try:
        args.weight = cli_weight(args)  # None: the paper's beam search
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    data_dir = Path(args.data).expanduser()
    if not data_dir.is_dir():
        raise _Refused(f"data directory not found: {data_dir}")
    return data_dir


def _load_translator(args: argparse.Namespace):
    """The checkpoint's Translator and the direction to score (``--direction`` or the checkpoint's). Raises _Refused."""
    from ..translator import Translator  # imports torch: only when the command runs

    try:
        tr = Translator.load(Path(args.checkpoint).expanduser(), device=args.device)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        raise _Refused(str(exc)) from None
    direction = args.direction or tr.meta.get("direction")
    if direction not in ("en-de", "de-en"):
        raise _Refused(f"{args.checkpoint}: config.json meta has no direction 'en-de' or 'de-en' ({direction!r}); "
                       "pass --direction")
    try:
        tr = tr.for_direction(direction)  # a model for both directions: the target's tag starts the decoder
        tr = tr.for_domain(args.domain)  # a model with domain tags: the tag asked for starts the decoder
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    return tr, direction


def _read_inputs(args: argparse.Namespace, data_dir: Path, direction: str):
    """``(sources, references, pairs left out, lexicon or None)`` of the split (first ``--limit``). Raises _Refused."""
    try:
        sources, refs, skipped = read_split(data_dir, args.split, direction)
    except (FileNotFoundError, ValueError) as exc:
        raise _Refused(str(exc)) from None
    if args.limit is not None:
        sources, refs = sources[: args.limit], refs[: args.limit]
    if not sources:
        raise _Refused(f"{data_dir / (args.split + '.tsv')} has no sentence pairs")
    lexicon = None
    lex_path = data_dir / "dictionary.tsv"
    if lex_path.is_file():
        try:
            lexicon = load_lexicon(lex_path, direction=direction)
        except (FileNotFoundError, ValueError) as exc:
            raise _Refused(str(exc)) from None
    else:
        print(f"aiayn evaluate: no {lex_path}; the dictionary baseline is left out", file=sys.stderr)
    return sources, refs, skipped, lexicon


def _print_report(args: argparse.Namespace, res: dict[str, Any], direction: str, split_file: Path,
                  sources: list[str], refs: list[str]) -> None:
    """The scores table, the sacreBLEU signatures and ``--samples`` sample translations, on stdout."""
    rerank = "" if args.weight is None else ", reranked by the reverse model, weight %g" % args.weight
    rows = [("model (beam %d, alpha %g%s)" % (args.beam_size, args.alpha, rerank), res["model"])]
    if res["baseline"] is not None:
        rows.append(("dictionary word-by-word", res["baseline"]))
    print(f"\n{direction} on {split_file}: {res['n_sentences']} sentences, "
          f"{res['elapsed_s']:.1f} s ({res['sentences_per_s']:.1f} sentences/s)")
    print(_table(rows))
    print(f"BLEU: {res['model']['bleu_signature']}\nchrF: {res['model']['chrf_signature']}")
    if res["unfinished"]:
        print(f"{res['unfinished']} outputs hit the maximum length without EOS")
    for i in range(min(args.samples, len(sources))):
        print(f"\n[{i}] src:  {sources[i]}\n    ref:  {refs[i]}\n    hyp:  {res['hypotheses'][i]}")
        if res["baseline_hypotheses"] is not None:
            print(f"    dict: {res['baseline_hypotheses'][i]}")


def _data_record(data_dir: Path, split: str) -> dict[str, Any]:
    """The results file's ``data`` block: the split file's sha256 and what ``datasheet.json`` says of the corpus."""
    sheet: dict[str, Any] = {}
    if (data_dir / "datasheet.json").is_file():
        try:
            sheet = json.loads((data_dir / "datasheet.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            sheet = {}
    return {
        "data_dir": str(data_dir.resolve()),
        "split_file_sha256": sha256_file(data_dir / f"{split}.tsv"),
        "corpus_sha256": sheet.get("source", {}).get("sha256"),
        "corpus": sheet.get("source", {}).get("name"),
        "license": sheet.get("source", {}).get("license"),
        "prepare_parameters": sheet.get("parameters"),
    }


def _results_record(args: argparse.Namespace, tr, res: dict[str, Any], direction: str, data_dir: Path,
                    inputs: tuple[list[str], list[str], int], started: _dt.datetime) -> dict[str, Any]:
    """What ``--out`` holds: checkpoint, split, decoding settings, scores and signatures, data, time, samples."""
    sources, refs, skipped = inputs
    out = {
        "checkpoint": str(Path(args.checkpoint).expanduser().resolve()),
        "checkpoint_meta": {k: v for k, v in tr.meta.items() if k != "train_config"},
        "direction": direction,
        "split": args.split,
        "n_sentences": res["n_sentences"],
        "pairs_left_out_empty": skipped,
        "limit": args.limit,
        "decoding": {"beam_size": args.beam_size, "alpha": args.alpha,
                     "max_len": args.max_len if args.max_len is not None else "source length + 50",
                     "batch_size": args.batch_size, "projection": tr.projection.precision, "domain": tr.cfg.domain,
                     "rerank": None if args.weight is None else {
                         "weight": args.weight, "reverse": args.reverse or "the shipped model of the opposite direction",
                         "method": "beam n-best + weight x log P(source | output) / source pieces (Yee et al. 2019)"}},
        "scores": {
            "model": {"bleu": res["model"]["bleu"], "chrf": res["model"]["chrf"]},
            "dictionary_baseline": ({"bleu": res["baseline"]["bleu"], "chrf": res["baseline"]["chrf"]}
                                    if res["baseline"] is not None else None),
        },
        "signatures": {"bleu": res["model"]["bleu_signature"], "chrf": res["model"]["chrf_signature"]},
        "details": {"model": res["model"], "dictionary_baseline": res["baseline"]},
        "unfinished": res["unfinished"],
        "truncated_sources": res["truncated_sources"],
        "data": _data_record(data_dir, args.split),
        "time": {"started_utc": started.isoformat(timespec="seconds"), "elapsed_s": round(res["elapsed_s"], 3),
                 "sentences_per_s": round(res["sentences_per_s"], 3), "device": str(tr.device)},
        "samples": [{"source": sources[i], "reference": refs[i], "hypothesis": res["hypotheses"][i],
                     "dictionary_baseline": (res["baseline_hypotheses"] or [None] * len(sources))[i]}
                    for i in range(min(args.samples, len(sources)))],
    }
    if args.hypotheses:
        out["hypotheses"] = res["hypotheses"]
        out["baseline_hypotheses"] = res["baseline_hypotheses"]
    return out


def _run(args: argparse.Namespace) -> None:
    """The command after parsing: load, translate, score, print, write ``--out``. Raises _Refused."""
    from ..reranking import reverse_for

    data_dir = _check_options(args)
    tr, direction = _load_translator(args)
    sources, refs, skipped, lexicon = _read_inputs(args, data_dir, direction)
    started = _dt.datetime.now(_dt.timezone.utc)
    try:
        reverse = None if args.weight is None else reverse_for(tr, direction, args.reverse, device=args.device)
        res = evaluate_translator(tr, sources, refs, beam_size=args.beam_size, alpha=args.alpha, batch_size=args.batch_size,
                                  max_len=args.max_len, lexicon=lexicon, src_lang=direction.split("-")[0],
                                  progress=not args.no_progress, reverse=reverse, rerank_weight=args.weight or 0.0)
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    _print_report(args, res, direction, data_dir / (args.split + ".tsv"), sources, refs)
    if args.out:
        out = _results_record(args, tr, res, direction, data_dir, (sources, refs, skipped), started)
        path = Path(args.out).expanduser()
        try:
            atomic_write_text(path, json.dumps(out, ensure_ascii=False, indent=2) + "\n")
        except OSError as exc:
            raise _Refused(f"cannot write {path}: {exc}") from None
        print(f"\nwrote {path}")


def cli_main(argv: list[str]) -> int:
    """``aiayn evaluate --checkpoint DIR --data DIR [--split test] [--beam-size 4] [--alpha 0.6]
    [--batch-size 32] [--max-len N] [--limit N] [--out results.json] [--hypotheses]``; returns the exit code
    (0 ok, 2 bad input: missing/corrupt checkpoint or data, bad options)."""
    args = _parser().parse_args(argv)
    try:
        _run(args)
    except _Refused as exc:
        print(f"aiayn evaluate: {exc}", file=sys.stderr)
        return 2
    return 0
