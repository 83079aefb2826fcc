"""``aiayn align``: the alignment error rate of every cross-attention head of a checkpoint on the gold set.

The gold pairs (``assets/alignment/gold.de-en.tsv``, :func:`aiayn.analysis.alignment.read_gold`) are run
teacher-forced through :func:`aiayn.calls.teacher_forced_ids` (the one owner of model calls: sources and
references encoded by :func:`aiayn.calls.encode_source` / :func:`~aiayn.calls.encode_reference`, the decoder fed
the model's start piece); each sentence's cross-attention ``(L, H, T, S)`` is turned into word links and counted
against the gold by :func:`aiayn.analysis.alignment.sentence_counts`; the counts are summed over the corpus (Och and
Ney 2003) and written to ``<checkpoint>/alignment.json``.

The gold file puts the German index first whatever the direction: for en-de the source is English, so the gold
matrix is read with German words as rows (target), for de-en it is transposed (English rows).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .analysis import alignment as al

if TYPE_CHECKING:  # annotations only
    from .translator import Translator

ALIGN_FILE = "alignment.json"
ALIGN_FORMAT, ALIGN_VERSION = "aiayn-alignment", 1
GOLD_PATH = Path(__file__).resolve().parents[1] / "assets" / "alignment" / "gold.de-en.tsv"
_PUNCT_GLUE = re.compile(r" ([.,?!;:])")


def detokenize(tokens: Sequence[str]) -> str:
    """The gold tokens as running text for the model: punctuation glued to the word before
    (``["Zeit", "."]`` -> ``"Zeit."``); :func:`aiayn.analysis.alignment.piece_words` matches characters, so the
    pieces still map back to the tokens."""
    return _PUNCT_GLUE.sub(r"\1", " ".join(tokens))


def _sides(pair: al.GoldPair, direction: str) -> tuple[list[str], list[str], bool]:
    """(source words, target words, transpose?) of a gold pair for ``direction`` ("en-de" or "de-en")."""
    if direction == "en-de":
        return pair.english, pair.german, False
    if direction == "de-en":
        return pair.german, pair.english, True
    raise ValueError(f"direction must be 'en-de' or 'de-en', got {direction!r}")


def _gold(pair: al.GoldPair, n_tgt: int, n_src: int, transpose: bool) -> tuple[np.ndarray, np.ndarray]:
    """(sure, possible) bool ``(n_tgt, n_src)`` with target words as rows."""
    return (al.link_matrix(pair.sure, (n_tgt, n_src), transpose=transpose),
            al.link_matrix(pair.possible, (n_tgt, n_src), transpose=transpose))


def corpus_counts(tr: "Translator", pairs: Sequence[al.GoldPair], direction: str, *,
                  batch_size: int = 16) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Summed AER counts over the gold pairs for every head and reading.

    Returns:
        ``(counts, skipped)``: counts ``(len(SHIFTS), len(METHODS), L * H + L + 1, 4)`` int64 in
        :func:`aiayn.analysis.alignment.sentence_counts`' order; skipped: ``{"line", "reason"}`` for pairs whose
        pieces could not be matched to the gold words (an ``<unk>``) or that were cut at ``max_len``.
    """
    from . import calls  # function-level: the module imports without torch

    cfg, total, skipped = tr.cfg, None, []
    for start in range(0, len(pairs), batch_size):
        chunk, rows = pairs[start:start + batch_size], []
        for pair in chunk:
            src_w, tgt_w, transpose = _sides(pair, direction)
            src, tgt = calls.encode_source(tr.tokenizer, cfg, detokenize(src_w)), calls.encode_reference(
                tr.tokenizer, cfg, detokenize(tgt_w))
            try:
                if src.truncated or tgt.truncated:
                    raise ValueError(f"longer than max_len={cfg.max_len} pieces")
                rows.append((pair, src.ids, tgt.ids, al.piece_words(tr.pieces(src.ids), src_w),
                             al.piece_words(tr.pieces(tgt.ids), tgt_w), *_gold(pair, len(tgt_w), len(src_w), transpose)))
            except ValueError as exc:
                skipped.append({"line": pair.line, "reason": str(exc)})
        if not rows:
            continue
        forced = calls.teacher_forced_ids(tr.model, [r[1] for r in rows], [r[2] for r in rows], return_attention=True)
        cross = forced.maps.cross.float().cpu().numpy()  # (L, B, H, T, S)
        for b, (_, src_ids, tgt_ids, src_pw, tgt_pw, sure, possible) in enumerate(rows):
            c = al.sentence_counts(cross[:, b, :, :len(tgt_ids), :len(src_ids)], src_pw, tgt_pw, sure, possible)
            total = c if total is None else total + c
    if total is None:
        raise ValueError("no gold pair could be matched to the model's pieces")
    return total, skipped


def summarize(aer: np.ndarray, n_layers: int, n_heads: int) -> dict[str, Any]:
    """JSON-able results from an AER array ``(len(SHIFTS), len(METHODS), L * H + L + 1)``: per shift and method the
    ``(L, H)`` head AERs, the layer means, the model mean and the best head; and the best reading overall."""
    parts = al.split_readouts(aer, n_layers, n_heads)
    readings, best = {}, None
    for s, shift in enumerate(al.SHIFTS):
        for m, method in enumerate(al.METHODS):
            heads = parts["head"][s, m]
            layer, head = np.unravel_index(np.nanargmin(heads), heads.shape)
            entry = {"shift": shift, "method": method, "head_aer": np.round(heads, 4).tolist(),
                     "layer_mean_aer": np.round(parts["layer"][s, m], 4).tolist(),
                     "model_mean_aer": round(float(parts["model"][s, m]), 4),
                     "best_head": {"layer": int(layer), "head": int(head), "aer": round(float(heads[layer, head]), 4)}}
            readings[f"{method}{'_shift' if shift else ''}"] = entry
            if best is None or entry["best_head"]["aer"] < best["aer"]:
                best = {**entry["best_head"], "method": method, "shift": shift}
    return {"readings": readings, "best": best}


def align_checkpoint(tr: "Translator", gold: str | Path = GOLD_PATH, *, direction: str | None = None) -> dict[str, Any]:
    """The ``alignment.json`` payload of a loaded checkpoint (layers and heads 0-based).

    Raises:
        ValueError: an unknown direction, a malformed gold file, no pair matched.
    """
    direction = direction or tr.meta.get("direction")
    pairs = al.read_gold(gold)
    counts, skipped = corpus_counts(tr, pairs, direction)
    cfg = tr.cfg
    payload = {"format": ALIGN_FORMAT, "format_version": ALIGN_VERSION, "direction": direction,
               "gold": Path(gold).name, "pairs": len(pairs) - len(skipped), "skipped": skipped,
               "layers": cfg.n_layers, "heads": cfg.n_heads, "methods": list(al.METHODS),
               "counts": counts.tolist()}
    payload.update(summarize(al.aer_from_counts(counts), cfg.n_layers, cfg.n_heads))
    return payload


def cli_main(argv: list[str] | None = None) -> int:
    """``aiayn align --checkpoint DIR [--gold FILE] [--direction en-de|de-en] [--device cpu]``: write
    ``DIR/alignment.json`` and print the best head."""
    from .files import atomic_write_text
    from .translator import Translator

    ap = argparse.ArgumentParser(prog="aiayn align", description="Alignment error rate (Och and Ney 2003) of every "
                                 f"cross-attention head on the gold set, written to <checkpoint>/{ALIGN_FILE}.")
    ap.add_argument("--checkpoint", "-c", required=True, help="checkpoint directory")
    ap.add_argument("--gold", default=str(GOLD_PATH), help="gold alignment file (German index first)")
    ap.add_argument("--direction", choices=["en-de", "de-en"], default=None,
                    help="default: the checkpoint's own direction")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        tr = Translator.load(args.checkpoint, device=args.device)
        payload = align_checkpoint(tr, args.gold, direction=args.direction)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aiayn align: {exc}", file=sys.stderr)
        return 2
    out = atomic_write_text(Path(args.checkpoint) / ALIGN_FILE, json.dumps(payload, indent=1) + "\n")
    b = payload["best"]
    print(f"{out}: {payload['pairs']} pairs ({len(payload['skipped'])} skipped), {payload['direction']}; best head "
          f"layer {b['layer'] + 1} head {b['head'] + 1} ({b['method']}{', shift by one' if b['shift'] else ''}): "
          f"AER {b['aer']:.3f} ({time.perf_counter() - t0:.1f} s)")
    for key, r in payload["readings"].items():
        print(f"  {key:<20} model mean {r['model_mean_aer']:.3f}  best layer mean "
              f"{min(r['layer_mean_aer']):.3f}  best head {r['best_head']['aer']:.3f} "
              f"(L{r['best_head']['layer'] + 1} H{r['best_head']['head'] + 1})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_main())
