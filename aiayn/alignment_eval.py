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


#: the maps scored: the raw attention weights and norm-based attention (Kobayashi et al. 2020).
MAP_KINDS = ("weights", "norms")


def _prepare(tr: "Translator", chunk: Sequence[al.GoldPair], direction: str) -> tuple[list[tuple], list[dict]]:
    """Encode a chunk of gold pairs (:mod:`aiayn.calls`) and match pieces to gold words; pairs that cannot be
    matched or were cut are returned as ``{"line", "reason"}``."""
    from . import calls  # function-level: the module imports without torch

    rows, skipped = [], []
    for pair in chunk:
        src_w, tgt_w, transpose = _sides(pair, direction)
        src = calls.encode_source(tr.tokenizer, tr.cfg, detokenize(src_w))
        tgt = calls.encode_reference(tr.tokenizer, tr.cfg, detokenize(tgt_w))
        try:
            if src.truncated or tgt.truncated:
                raise ValueError(f"longer than max_len={tr.cfg.max_len} pieces")
            rows.append((src.ids, tgt.ids, al.piece_words(tr.pieces(src.ids), src_w),
                         al.piece_words(tr.pieces(tgt.ids), tgt_w), *_gold(pair, len(tgt_w), len(src_w), transpose)))
        except ValueError as exc:
            skipped.append({"line": pair.line, "reason": str(exc)})
    return rows, skipped


def cross_value_norms(model: Any, src: Any) -> np.ndarray:
    """``||f_h(z_j)||`` of every decoder layer's cross-attention over the encoder output z of ``src`` ``(B, S)``
    (:func:`aiayn.analysis.norms.value_norms`; the encoder run in float32 by the model's own
    :meth:`~aiayn.model.transformer.Transformer.encode`, as in :func:`aiayn.calls.teacher_forced` on the CPU):
    ``(L, B, H, S)`` float64."""
    import torch

    from . import calls
    from .analysis import norms

    with torch.inference_mode(), calls.autocast_for(src.device, False):
        memory = model.encode(src).memory.float().cpu().numpy()
    out = []
    for layer in model.decoder_layers:
        att = layer.cross_attn
        w_v, b_v, w_o = (t.detach().float().cpu().numpy() for t in (att.w_v.weight, att.w_v.bias, att.w_o.weight))
        out.append([norms.value_norms(m, w_v, b_v, w_o, att.n_heads) for m in memory])
    return np.asarray(out)


def corpus_counts(tr: "Translator", pairs: Sequence[al.GoldPair], direction: str, *,
                  batch_size: int = 16) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    """Summed AER counts over the gold pairs for every head and reading, of the raw cross-attention weights and of
    norm-based attention (:data:`MAP_KINDS`).

    Returns:
        ``(counts, skipped)``: counts ``{kind: (len(SHIFTS), len(METHODS), L * H + L + 1, 4) int64}`` in
        :func:`aiayn.analysis.alignment.sentence_counts`' order; skipped: ``{"line", "reason"}`` for pairs whose
        pieces could not be matched to the gold words (an ``<unk>``) or that were cut at ``max_len``.

    Raises:
        ValueError: no pair could be matched.
    """
    from . import calls
    from .analysis.norms import norm_weighted

    total: dict[str, np.ndarray] = {}
    skipped: list[dict[str, Any]] = []
    for start in range(0, len(pairs), batch_size):
        rows, bad = _prepare(tr, pairs[start:start + batch_size], direction)
        skipped += bad
        if not rows:
            continue
        forced = calls.teacher_forced_ids(tr.model, [r[0] for r in rows], [r[1] for r in rows], return_attention=True)
        cross = forced.maps.cross.float().cpu().numpy()  # (L, B, H, T, S)
        value_norms = cross_value_norms(tr.model, calls.batch(tr.cfg, [r[0] for r in rows], tr.device))
        for b, (src_ids, tgt_ids, src_pw, tgt_pw, sure, possible) in enumerate(rows):
            w = cross[:, b, :, :len(tgt_ids), :len(src_ids)]
            maps = {"weights": w, "norms": norm_weighted(w, value_norms[:, b, :, :len(src_ids)])}
            for kind, m in maps.items():
                c = al.sentence_counts(m, src_pw, tgt_pw, sure, possible)
                total[kind] = total[kind] + c if kind in total else c
    if not total:
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
    """The ``alignment.json`` payload of a loaded checkpoint (layers and heads 0-based; the SHA-256 of the weights
    and of the gold file say what it was computed from).

    Raises:
        ValueError: an unknown direction, a malformed gold file, no pair matched.
    """
    from .files import sha256_file
    from .checkpoint_format import weights_sha256

    direction = direction or tr.meta.get("direction")
    weights = weights_sha256(tr.path) if tr.path is not None else None
    pairs = al.read_gold(gold)
    counts, skipped = corpus_counts(tr, pairs, direction)
    cfg = tr.cfg
    payload = {"format": ALIGN_FORMAT, "format_version": ALIGN_VERSION, "direction": direction,
               "gold": Path(gold).name, "gold_sha256": sha256_file(gold), "weights_sha256": weights,
               "pairs": len(pairs) - len(skipped), "skipped": skipped,
               "layers": cfg.n_layers, "heads": cfg.n_heads, "methods": list(al.METHODS)}
    for kind in MAP_KINDS:
        payload[kind] = {"counts": counts[kind].tolist(),
                         **summarize(al.aer_from_counts(counts[kind]), cfg.n_layers, cfg.n_heads)}
    return payload


def read_parallel(path: str | Path, n_pairs: int, *, seed: int = 0, max_words: int = 40) -> list[tuple[str, str]]:
    """A reproducible random sample of ``n_pairs`` (German, English) lines of a prepared ``de<TAB>en`` TSV (as
    ``aiayn data`` writes ``train.tsv``; a ``de	en`` header is skipped), each side 1 to ``max_words`` tokens.

    Raises:
        ValueError: a line without exactly two tab-separated fields; OSError: the file cannot be read.
    """
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(f"{Path(path).name}:{n}: {len(fields)} tab-separated fields, want German and English")
        if n == 1 and fields == ["de", "en"]:
            continue
        if all(1 <= len(f.split()) <= max_words for f in fields):
            rows.append((fields[0], fields[1]))
    rng = np.random.default_rng(seed)
    keep = rng.choice(len(rows), size=min(n_pairs, len(rows)), replace=False)
    return [rows[i] for i in sorted(keep)]


def ibm1_baseline(parallel: Sequence[tuple[str, str]], pairs: Sequence[al.GoldPair], *, iterations: int = 5,
                  with_gold: bool = False) -> dict[str, Any]:
    """AER of IBM Model 1 (:mod:`aiayn.analysis.ibm1`) on the gold pairs, trained on ``parallel`` (German, English)
    texts; with ``with_gold`` the gold sentences (never their links) join the training text, as is usual for
    unsupervised aligners; off by default, as the attention models never saw the gold sentences either.

    Returns:
        ``{"en-de", "de-en", "intersection", "union"}`` -> AER: the Viterbi links of t(German | English) (German
        generated, as by an en-de model), of t(English | German), their intersection and union; plus the settings.
    """
    from .analysis import ibm1

    de = [ibm1.tokenize(d) for d, _ in parallel] + ([[w.lower() for w in p.german] for p in pairs] if with_gold else [])
    en = [ibm1.tokenize(e) for _, e in parallel] + ([[w.lower() for w in p.english] for p in pairs] if with_gold else [])
    de_given_en, en_given_de = ibm1.train_ibm1(de, en, iterations=iterations), ibm1.train_ibm1(en, de, iterations=iterations)
    totals = {k: np.zeros(4, dtype=np.int64) for k in ("en-de", "de-en", "intersection", "union")}
    for p in pairs:
        g, e = [w.lower() for w in p.german], [w.lower() for w in p.english]
        a = de_given_en.viterbi(g, e)  # (n_de, n_en)
        b = en_given_de.viterbi(e, g).T
        sure, possible = (al.link_matrix(x, (len(g), len(e))) for x in (p.sure, p.possible))
        for key, links in (("en-de", a), ("de-en", b), ("intersection", a & b), ("union", a | b)):
            totals[key] += al.counts(links, sure, possible)
    out: dict[str, Any] = {k: round(float(al.aer_from_counts(c)), 4) for k, c in totals.items()}
    out.update(training_pairs=len(parallel), with_gold=with_gold, iterations=iterations)
    return out


def cli_main(argv: list[str] | None = None) -> int:
    """``aiayn align --checkpoint DIR [--gold FILE] [--direction en-de|de-en] [--device cpu] [--history-only]``:
    write ``DIR/alignment.json`` and print the best head; where the checkpoint has an attention history, also
    ``DIR/alignment_history.json`` (:mod:`aiayn.alignment_history`: the AER at every recorded training state)."""
    from .alignment_history import HISTORY_GOLD_PATH
    from .files import atomic_write_text
    from .translator import Translator

    ap = argparse.ArgumentParser(prog="aiayn align", description="Alignment error rate (Och and Ney 2003) of every "
                                 f"cross-attention head on the gold set, written to <checkpoint>/{ALIGN_FILE}.")
    ap.add_argument("--checkpoint", "-c", required=True, help="checkpoint directory")
    ap.add_argument("--gold", default=str(GOLD_PATH), help="gold alignment file (German index first)")
    ap.add_argument("--direction", choices=["en-de", "de-en"], default=None,
                    help="default: the checkpoint's own direction")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ibm1", metavar="TSV", default=None,
                    help="also score IBM Model 1 trained on a sample of this de<TAB>en file (e.g. the data's train.tsv)")
    ap.add_argument("--ibm1-pairs", type=int, default=50000, help="how many lines of --ibm1 to sample")
    ap.add_argument("--history-gold", default=str(HISTORY_GOLD_PATH),
                    help="gold links of the sentences the attention history records (German index first)")
    ap.add_argument("--history-only", action="store_true",
                    help="only score the attention history's training states (no model is loaded)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.history_only:
        return _history_part(args.checkpoint, args.history_gold)
    try:
        tr = Translator.load(args.checkpoint, device=args.device)
        payload = align_checkpoint(tr, args.gold, direction=args.direction)
        if args.ibm1:
            payload["ibm1"] = ibm1_baseline(read_parallel(args.ibm1, args.ibm1_pairs), al.read_gold(args.gold))
    except (OSError, ValueError) as exc:
        print(f"aiayn align: {exc}", file=sys.stderr)
        return 2
    out = atomic_write_text(Path(args.checkpoint) / ALIGN_FILE, json.dumps(payload, indent=1) + "\n")
    print(f"{out}: {payload['pairs']} pairs ({len(payload['skipped'])} skipped), {payload['direction']} "
          f"({time.perf_counter() - t0:.1f} s)")
    if "ibm1" in payload:
        print(f"IBM Model 1 ({payload['ibm1']['training_pairs']} pairs): " +
              ", ".join(f"{k} {payload['ibm1'][k]:.3f}" for k in ("en-de", "de-en", "intersection", "union")))
    for kind in MAP_KINDS:
        b = payload[kind]["best"]
        print(f"{kind}: best head layer {b['layer'] + 1} head {b['head'] + 1} "
              f"({b['method']}{', shift by one' if b['shift'] else ''}): AER {b['aer']:.3f}")
        for key, r in payload[kind]["readings"].items():
            print(f"  {key:<20} model mean {r['model_mean_aer']:.3f}  best layer mean "
                  f"{min(r['layer_mean_aer']):.3f}  best head {r['best_head']['aer']:.3f} "
                  f"(L{r['best_head']['layer'] + 1} H{r['best_head']['head'] + 1})")
    return _history_part(args.checkpoint, args.history_gold)


def _history_part(checkpoint: str, gold: str) -> int:
    """Write ``alignment_history.json`` beside ``checkpoint`` and print its summary: the exit status (2 with the
    reason on stderr for a damaged history or a recorded sentence without gold links; 0, saying so, for a
    checkpoint without a history)."""
    from .alignment_history import align_history, describe

    try:
        done = align_history(checkpoint, gold)
    except (OSError, ValueError) as exc:
        print(f"aiayn align: {exc}", file=sys.stderr)
        return 2
    if done is None:
        print(f"{checkpoint}: no attention history (an imported model, or one trained before histories were "
              "recorded): no AER across training")
        return 0
    print(f"{done[0]}: AER at {len(done[1]['steps'])} recorded training states")
    print("\n".join(describe(done[1])))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_main())
