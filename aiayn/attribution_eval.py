"""Attribution beside attention over a sentence set: for each pair, integrated gradients (or gradient x input) of
every target piece's log-probability (:func:`aiayn.calls.attribute`), the source's share of each prediction, and
the rank agreement of ``|attribution to the source|`` with each cross-attention head, the layer's head mean, the
cross-attention rollout (:func:`aiayn.analysis.flow.rollout`) and norm-based cross attention (Kobayashi et al.
2020) (:mod:`aiayn.analysis.attribution`). Rows are compared at the same target position t: the attention of the
decoder query that predicts ``target[t]``.

``aiayn attribution [CHECKPOINT ...]`` (:func:`cli_main`) writes the corpus-level agreement (mean and spread over
the gold pairs, per reading) and the source/prefix shares per step into ``<checkpoint>/attribution.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .analysis import alignment as al
from .analysis import attribution as at
from .alignment_eval import GOLD_PATH, _sides, cross_value_norms, detokenize

if TYPE_CHECKING:  # annotations only
    from .translator import Translator

ATTRIBUTION_FILE = "attribution.json"
ATTRIBUTION_FORMAT, ATTRIBUTION_VERSION = "aiayn-attribution", 1


def sentence_agreement(model: Any, src_ids: Sequence[int], tgt_ids: Sequence[int], *,
                       method: str = "integrated_gradients", steps: int = 128) -> dict[str, Any]:
    """One pair: ``{"attribution": calls.Attributed, "share": (T,) source share, "agreement":
    attribution.agreement_readings(...), "cross": (L, H, T, S), "norms": (L, H, T, S), "rollout": (T, S)}``.

    Raises:
        ValueError: as :func:`aiayn.calls.attribute`.
    """
    from . import calls
    from .analysis.flow import rollout
    from .analysis.norms import norm_weighted

    attr = calls.attribute(model, src_ids, tgt_ids, method=method, steps=steps)
    forced = calls.teacher_forced_ids(model, [src_ids], [tgt_ids], return_attention=True)
    cross = forced.maps.cross.float().cpu().numpy()[:, 0]  # (L, H, T, S)
    normed = norm_weighted(cross, cross_value_norms(model, calls.batch(model.cfg, [src_ids], model.device))[:, 0])
    rolled = rollout(forced.maps, "cross")[-1, 0].numpy()
    imp = np.abs(attr.source)
    return {"attribution": attr, "share": at.source_share(attr.source, attr.prefix),
            "agreement": at.agreement_readings(imp, cross, rolled, normed),
            "cross": cross, "norms": normed, "rollout": rolled}


def gold_agreement(tr: "Translator", gold: str | Path = GOLD_PATH, *, direction: str | None = None,
                   n_pairs: int | None = None, method: str = "integrated_gradients", steps: int = 128) -> dict[str, Any]:
    """JSON-able agreement of attribution with attention over the first ``n_pairs`` gold pairs (all by default)
    in ``direction`` (the checkpoint's by default): per reading the mean Spearman's rho and Kendall's tau
    (:func:`aiayn.analysis.attribution.mean_agreement`), the mean source share and, for integrated gradients,
    the worst completeness gap.

    Raises:
        ValueError: unknown direction or method, a malformed gold file, no pair.
    """
    from . import calls

    direction = direction or tr.meta.get("direction")
    pairs = al.read_gold(gold)[:n_pairs]
    per, shares, gaps = [], [], []
    for pair in pairs:
        src_w, tgt_w, _ = _sides(pair, direction)
        src = calls.encode_source(tr.tokenizer, tr.cfg, detokenize(src_w))
        tgt = calls.encode_reference(tr.tokenizer, tr.cfg, detokenize(tgt_w))
        one = sentence_agreement(tr.model, src.ids, tgt.ids, method=method, steps=steps)
        per.append(one["agreement"])
        shares.append(one["share"])
        a = one["attribution"]
        if method == "integrated_gradients":
            gaps.append(at.completeness_gap(at.Attribution([a.source, a.prefix], a.log_prob, a.baseline_log_prob)))
    mean = at.mean_agreement(per)
    out = {"direction": direction, "pairs": len(pairs), "method": method, "steps": steps,
           "source_share": float(np.nanmean(np.concatenate(shares))),
           "max_completeness_gap": float(np.nanmax(np.concatenate(gaps))) if gaps else None}
    out["agreement"] = {k: {s: np.asarray(v[s]).tolist() for s in ("spearman", "kendall", "rows")}
                        for k, v in mean.items()}
    return out


def gold_sentence(tr: "Translator", pair: al.GoldPair, direction: str, *, method: str = "integrated_gradients",
                  steps: int = 64) -> dict[str, Any]:
    """Everything the "Alignment and attribution" page shows for one gold pair in ``direction``: piece labels,
    words, gold links ``(T_w, S_w)`` (target words as rows), the piece-level cross-attention ``(L, H, T, S)`` and
    its norm-based version, the word maps of both with and without the shift by one (``{"weights" | "norms":
    {False | True: (L, H, T_w, S_w)}}``), and :func:`sentence_agreement` (``method``, ``steps``).

    Raises:
        ValueError: the pair's pieces cannot be matched to its words, or it is longer than ``max_len``.
    """
    from . import calls
    from .alignment_eval import _gold

    src_w, tgt_w, transpose = _sides(pair, direction)
    src = calls.encode_source(tr.tokenizer, tr.cfg, detokenize(src_w))
    tgt = calls.encode_reference(tr.tokenizer, tr.cfg, detokenize(tgt_w))
    if src.truncated or tgt.truncated:
        raise ValueError(f"longer than max_len={tr.cfg.max_len} pieces")
    src_pw, tgt_pw = al.piece_words(tr.pieces(src.ids), src_w), al.piece_words(tr.pieces(tgt.ids), tgt_w)
    sure, possible = _gold(pair, len(tgt_w), len(src_w), transpose)
    one = sentence_agreement(tr.model, src.ids, tgt.ids, method=method, steps=steps)
    words = {kind: {shift: al.word_maps(one[m], al.query_words(tgt_pw, shift=shift), src_pw, len(tgt_w), len(src_w))
                    for shift in (False, True)} for kind, m in (("weights", "cross"), ("norms", "norms"))}
    return {**one, "src_words": list(src_w), "tgt_words": list(tgt_w), "sure": sure, "possible": possible,
            "src_pieces": tr.pieces(src.ids), "tgt_pieces": tr.pieces(tgt.ids), "words": words}


# -- corpus level: aiayn attribution ----------------------------------------------------------------------------
def parse_sentences(spec: str, n_gold: int) -> int:
    """How many gold pairs ``--sentences`` asks for: ``"gold"`` (all ``n_gold``) or a whole number N in
    ``1..n_gold`` (the first N pairs of the file, in order).

    Raises:
        ValueError: anything else, naming the allowed range.
    """
    spec = str(spec).strip()
    if spec == "gold":
        return n_gold
    if not spec.isdigit() or not 1 <= int(spec) <= n_gold:
        raise ValueError(f"--sentences must be 'gold' or a whole number from 1 to {n_gold}, got {spec!r}")
    return int(spec)


def _row_means(agreement: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One sentence's agreement ``{reading: (..., T, 2)}`` -> the mean over its defined rows ``(..., 2)`` (NaN where
    no row is defined: a one-piece source, constant rows)."""
    out = {}
    for name, v in agreement.items():
        n = (~np.isnan(v)).sum(-2)
        out[name] = np.where(n > 0, np.nansum(v, axis=-2) / np.maximum(n, 1), np.nan)
    return out


def _spread(per_sentence: Sequence[np.ndarray]) -> dict[str, Any]:
    """Mean, standard deviation (ddof 0) and count over sentences of per-sentence values ``(n, ...)``, NaN left
    out; JSON-able nested lists rounded to 4 decimals (NaN written as None)."""
    a = np.asarray(per_sentence, dtype=np.float64)
    n = (~np.isnan(a)).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.nansum(a, axis=0) / np.maximum(n, 1), np.nan)
        var = np.where(n > 0, np.nansum((a - mean) ** 2, axis=0) / np.maximum(n, 1), np.nan)
    return {"mean": _jsonable(mean), "std": _jsonable(np.sqrt(var)), "sentences": np.asarray(n).tolist()}


def _jsonable(a: Any) -> Any:
    """A float array as nested lists rounded to 4 decimals, NaN as None (strict JSON has no NaN)."""
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 0:
        return None if np.isnan(a) else round(float(a), 4)
    return [_jsonable(x) for x in a]


def share_summary(shares: Sequence[np.ndarray], max_position: int = 30) -> dict[str, Any]:
    """The source's share of each prediction (Voita et al. 2021 style, :func:`aiayn.analysis.attribution.
    source_share`) over every step of every sentence, and the prefix's share (its complement).

    Args:
        shares: one ``(T,)`` array per sentence (NaN steps left out).
        max_position: target positions 0..max_position - 1 get their own mean (``by_position``).

    Returns:
        ``{"steps", "source_mean", "source_std", "prefix_mean", "source_quantiles": {"10", "50", "90"},
        "sentence_mean": {mean, std, sentences}, "by_position": {"source_mean": [...], "steps": [...]}}``.
    """
    flat = np.concatenate([np.asarray(s, dtype=np.float64) for s in shares]) if shares else np.zeros(0)
    flat = flat[~np.isnan(flat)]
    if flat.size == 0:
        raise ValueError("no defined source share (every attribution is zero)")
    width = min(max_position, max(len(s) for s in shares))
    by_pos = [[s[t] for s in shares if t < len(s) and not np.isnan(s[t])] for t in range(width)]
    return {"steps": int(flat.size), "source_mean": round(float(flat.mean()), 4),
            "source_std": round(float(flat.std()), 4), "prefix_mean": round(float(1 - flat.mean()), 4),
            "source_quantiles": {q: round(float(np.quantile(flat, int(q) / 100)), 4) for q in ("10", "50", "90")},
            "sentence_mean": _spread([np.nanmean(s) if np.isfinite(s).any() else np.nan for s in shares]),
            "by_position": {"source_mean": _jsonable([np.mean(v) if v else np.nan for v in by_pos]),
                            "steps": [len(v) for v in by_pos]}}


def _gap_summary(gaps: np.ndarray) -> dict[str, Any]:
    """Integrated gradients' relative completeness gaps of every target piece (:func:`aiayn.analysis.attribution.
    completeness_gap`) summarized: the worst alone misleads where ``f(x) - f(x')`` is near zero (a piece the model
    predicts about as well from the baseline), so also the median, the 90th percentile and the share within 5%."""
    g = gaps[~np.isnan(gaps)]
    if g.size == 0:
        return {"pieces": 0}
    return {"pieces": int(g.size), "median": _jsonable(np.median(g)), "p90": _jsonable(np.quantile(g, 0.9)),
            "max": _jsonable(g.max()), "within_5pct": _jsonable(np.mean(g <= 0.05))}


def _best_head(spearman_mean: Any) -> dict[str, Any] | None:
    """The head whose rows agree best (highest mean Spearman over sentences) in an ``(L, H)`` nested list."""
    a = np.array([[np.nan if x is None else x for x in row] for row in spearman_mean], dtype=np.float64)
    if np.isnan(a).all():
        return None
    layer, head = np.unravel_index(np.nanargmax(a), a.shape)
    return {"layer": int(layer), "head": int(head), "spearman": round(float(a[layer, head]), 4)}


#: the readings kept per sentence in ``per_sentence`` (the per-head ones only as corpus means: the file stays small)
_PER_SENTENCE = ("head_mean", "norm_head_mean", "rollout")


def corpus_agreement(tr: "Translator", pairs: Sequence[al.GoldPair], direction: str, *,
                     method: str = "grad_x_input", steps: int = 32, progress: bool = False) -> dict[str, Any]:
    """Rank agreement of attribution with attention over gold pairs (:func:`sentence_agreement` per pair).

    Per reading of :data:`aiayn.analysis.attribution.READINGS` (``heads`` / ``norm_heads`` ``(L, H)``,
    ``head_mean`` / ``norm_head_mean`` ``(L,)``, ``rollout`` ``()``): each sentence's mean over its target pieces,
    then the ``mean``, ``std`` and count over sentences (:func:`_spread`), for Spearman's rho and Kendall's tau;
    ``pooled``: the mean over every row of every sentence (:func:`aiayn.analysis.attribution.mean_agreement`, as
    :func:`gold_agreement`). Also the source/prefix shares (:func:`share_summary`), the worst completeness gap
    (integrated gradients), each sentence's row means of the layer means and the rollout (``per_sentence``) and the
    pairs left out (cut at max_len).

    Raises:
        ValueError: unknown method or direction, bad ``steps``, no pair fits ``max_len``.
    """
    from tqdm import tqdm

    from . import calls

    per, means, shares, gaps, skipped, records = [], [], [], [], [], []
    for pair in tqdm(pairs, desc=f"attribution {direction}", unit="pair", disable=not progress, file=sys.stderr,
                     dynamic_ncols=True):
        src_w, tgt_w, _ = _sides(pair, direction)
        src = calls.encode_source(tr.tokenizer, tr.cfg, detokenize(src_w))
        tgt = calls.encode_reference(tr.tokenizer, tr.cfg, detokenize(tgt_w))
        if src.truncated or tgt.truncated:
            skipped.append({"line": pair.line, "reason": f"longer than max_len={tr.cfg.max_len} pieces"})
            continue
        one = sentence_agreement(tr.model, src.ids, tgt.ids, method=method, steps=steps)
        per.append(one["agreement"])
        means.append(_row_means(one["agreement"]))
        shares.append(one["share"])
        a = one["attribution"]
        if method == "integrated_gradients":
            gaps.append(at.completeness_gap(at.Attribution([a.source, a.prefix], a.log_prob, a.baseline_log_prob)))
        records.append({"line": pair.line, "source_pieces": len(src.ids), "target_pieces": len(tgt.ids),
                        "source_share": _jsonable(np.nanmean(one["share"])),
                        **{stat: {k: _jsonable(v[..., i]) for k, v in means[-1].items() if k in _PER_SENTENCE}
                           for i, stat in enumerate(("spearman", "kendall"))}})
    if not per:
        raise ValueError(f"no gold pair fits max_len={tr.cfg.max_len}")
    pooled = at.mean_agreement(per)
    readings = {}
    for name in at.READINGS:
        readings[name] = {stat: _spread([m[name][..., i] for m in means])
                          for i, stat in enumerate(("spearman", "kendall"))}
        readings[name]["pooled"] = {"spearman": _jsonable(pooled[name]["spearman"]),
                                    "kendall": _jsonable(pooled[name]["kendall"]),
                                    "rows": pooled[name]["rows"].tolist()}
    for name in ("heads", "norm_heads"):
        readings[name]["best_head"] = _best_head(readings[name]["spearman"]["mean"])
    ig = method == "integrated_gradients"
    return {"method": method, "steps": steps if ig else None, "baseline": "zero" if ig else None,
            "pairs": len(per), "skipped": skipped, "share": share_summary(shares),
            "max_completeness_gap": _jsonable(np.nanmax(np.concatenate(gaps))) if gaps else None,
            "completeness_gap": _gap_summary(np.concatenate(gaps)) if gaps else None,
            "readings": readings, "per_sentence": records}


def attribution_payload(tr: "Translator", gold: str | Path = GOLD_PATH, *, direction: str | None = None,
                        n_pairs: int | None = None, method: str = "grad_x_input", steps: int = 32,
                        progress: bool = False) -> dict[str, Any]:
    """The ``attribution.json`` payload of a loaded checkpoint for one method: :func:`corpus_agreement` over the
    first ``n_pairs`` gold pairs (all by default) under ``methods.<method>``, with the SHA-256 of the weights and
    of the gold file (what it was computed from). Layers and heads count from 0.

    Raises:
        ValueError: as :func:`corpus_agreement`; a malformed gold file; ``n_pairs`` out of range.
    """
    from .files import sha256_file
    from .checkpoint_format import weights_sha256

    direction = direction or tr.meta.get("direction")
    _sides(al.GoldPair([], [], frozenset(), frozenset(), 0), direction)  # an unknown direction fails before work
    pairs = al.read_gold(gold)
    n = parse_sentences("gold" if n_pairs is None else str(n_pairs), len(pairs))
    result = corpus_agreement(tr, pairs[:n], direction, method=method, steps=steps, progress=progress)
    result["sentences"] = {"first": n, "of": len(pairs), "subset": n < len(pairs)}
    return {"format": ATTRIBUTION_FORMAT, "format_version": ATTRIBUTION_VERSION, "direction": direction,
            "gold": Path(gold).name, "gold_sha256": sha256_file(gold),
            "weights_sha256": weights_sha256(tr.path) if tr.path is not None else None,
            "layers": tr.cfg.n_layers, "heads": tr.cfg.n_heads, "readings": list(at.READINGS),
            "methods": {method: result}}


def merge_payload(previous: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new`` with the other methods of ``previous`` kept when both describe the same weights, gold file, direction
    and format (so running ``--method integrated_gradients`` after ``grad_x_input`` keeps both); otherwise ``new``."""
    keys = ("format", "format_version", "direction", "gold_sha256", "weights_sha256", "layers", "heads")
    if not previous or any(previous.get(k) != new[k] for k in keys) or not isinstance(previous.get("methods"), dict):
        return new
    return {**new, "methods": {**previous["methods"], **new["methods"]}}


def read_attribution(checkpoint: str | Path) -> dict[str, Any] | None:
    """``<checkpoint>/attribution.json`` if present and of this format, else None (a stale or foreign file is
    not trusted; the weights' SHA-256 inside says which weights it belongs to)."""
    path = Path(checkpoint) / ATTRIBUTION_FILE
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(payload, dict) and payload.get("format") == ATTRIBUTION_FORMAT
    return payload if ok and payload.get("format_version") == ATTRIBUTION_VERSION else None


_LABELS = {"heads": "head", "norm_heads": "norm-based head", "head_mean": "head mean",
           "norm_head_mean": "norm-based head mean", "rollout": "rollout (all layers)"}


def corpus_rows(result: dict[str, Any], *, per_head: bool = True) -> list[dict[str, Any]]:
    """One method's result of ``attribution.json`` (``methods.<method>``) in long form: one row per reading and
    layer (and head), ``layer`` / ``head`` counted from 0 (None where the reading has none), Spearman's and
    Kendall's mean and standard deviation over sentences and the number of sentences. Without ``per_head`` only
    the layer means and the rollout (the table the page shows)."""
    rows = []
    for name, r in result["readings"].items():
        if name.endswith("heads") and not per_head:
            continue
        mean_s, std_s, mean_k, std_k = (np.array(r[stat][k], dtype=np.float64)
                                        for stat in ("spearman", "kendall") for k in ("mean", "std"))
        n = np.array(r["spearman"]["sentences"])
        for idx in np.ndindex(mean_s.shape):
            rows.append({"reading": name, "layer": int(idx[0]) if idx else None,
                         "head": int(idx[1]) if len(idx) > 1 else None,
                         "spearman_mean": _jsonable(mean_s[idx]), "spearman_std": _jsonable(std_s[idx]),
                         "kendall_mean": _jsonable(mean_k[idx]), "kendall_std": _jsonable(std_k[idx]),
                         "sentences": int(n[idx])})
    return rows


def corpus_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The page's table of :func:`corpus_rows` without the single heads, readings named for people (layers from 1)."""
    return [{"attention": _LABELS[r["reading"]] + ("" if r["layer"] is None else f", layer {r['layer'] + 1}"),
             "Spearman": r["spearman_mean"], "Spearman sd": r["spearman_std"], "Kendall": r["kendall_mean"],
             "Kendall sd": r["kendall_std"], "sentences": r["sentences"]} for r in corpus_rows(result, per_head=False)]


class _OneLineParser(argparse.ArgumentParser):
    """argparse with a one-line error (its default prints the whole usage first)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    from .calls import ATTRIBUTION_METHODS

    ap = _OneLineParser(prog="aiayn attribution", description="Rank agreement (Spearman, Kendall) of gradient "
                        "attribution with every cross-attention head, the head means, the rollout and norm-based "
                        f"attention over the gold pairs, written to <checkpoint>/{ATTRIBUTION_FILE}.")
    ap.add_argument("checkpoints", nargs="*", metavar="CHECKPOINT",
                    help="checkpoint directories (default: the shipped en-de and de-en)")
    ap.add_argument("--method", choices=ATTRIBUTION_METHODS, default="grad_x_input",
                    help="grad_x_input: one backward pass per target piece; integrated_gradients: steps + 1 of them")
    ap.add_argument("--sentences", default="gold", help="'gold' (every gold pair) or N (the first N pairs)")
    ap.add_argument("--steps", type=int, default=32, help="integrated gradients' trapezoidal intervals")
    ap.add_argument("--gold", default=str(GOLD_PATH), help="gold alignment file (German index first)")
    ap.add_argument("--direction", choices=["en-de", "de-en"], default=None,
                    help="default: each checkpoint's own direction")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _summary_lines(out: Path, payload: dict[str, Any], seconds: float) -> list[str]:
    """What ``aiayn attribution`` prints for one checkpoint (layers and heads counted from 1)."""
    r = next(iter(payload["methods"].values()))
    read = r["readings"]
    lines = [f"{out}: {r['method']}, {r['pairs']} of {r['sentences']['of']} gold pairs "
             f"({len(r['skipped'])} skipped), {payload['direction']} ({seconds:.1f} s)",
             f"  source share {r['share']['source_mean']:.3f} (prefix {r['share']['prefix_mean']:.3f})"]
    for name in ("head_mean", "norm_head_mean"):
        lines.append(f"  Spearman with {name}, layers 1..{payload['layers']}: " +
                     " / ".join(_num(v) for v in read[name]["spearman"]["mean"]))
    roll = read["rollout"]
    lines.append(f"  Spearman (Kendall) with the rollout: {_num(roll['spearman']['mean'])} "
                 f"({_num(roll['kendall']['mean'])})")
    best = read["heads"]["best_head"]
    if best:
        lines.append(f"  best head: layer {best['layer'] + 1} head {best['head'] + 1} "
                     f"(Spearman {best['spearman']:.2f})")
    if r["max_completeness_gap"] is not None:
        gap = r["completeness_gap"]
        lines.append(f"  completeness gap ({r['steps']} steps): median {gap['median']:.2%}, 90th percentile "
                     f"{gap['p90']:.2%}, worst {gap['max']:.2%}; {gap['within_5pct']:.0%} of pieces within 5%")
    return lines


def cli_main(argv: list[str] | None = None) -> int:
    """``aiayn attribution [CHECKPOINT ...] [--method grad_x_input|integrated_gradients] [--sentences gold|N]
    [--steps 32]``: write ``<checkpoint>/attribution.json`` for each checkpoint (other methods already in a fresh
    file are kept) and print a summary. Exit code 2 with a one-line error for bad arguments or input."""
    from .catalog import SHIPPED
    from .files import atomic_write_text
    from .translator import CHECKPOINTS_DIR, Translator

    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad argument (2, one line already printed)
        return int(exc.code or 0)
    dirs = [Path(c) for c in args.checkpoints] or [CHECKPOINTS_DIR / name for name in SHIPPED]
    try:
        if args.steps < 1:
            raise ValueError(f"--steps must be a whole number >= 1, got {args.steps}")
        n = parse_sentences(args.sentences, len(al.read_gold(args.gold)))
        for d in dirs:
            if not (d / "config.json").is_file():
                raise ValueError(f"{d}: not a checkpoint directory (no config.json)")
        for d in dirs:
            t0 = time.perf_counter()
            tr = Translator.load(d, device=args.device)
            new = attribution_payload(tr, args.gold, direction=args.direction, n_pairs=n, method=args.method,
                                      steps=args.steps, progress=not args.no_progress)
            payload = merge_payload(read_attribution(d), new)
            out = atomic_write_text(d / ATTRIBUTION_FILE, json.dumps(payload, indent=1) + "\n")
            print("\n".join(_summary_lines(out, new, time.perf_counter() - t0)), flush=True)
    except (OSError, ValueError) as exc:
        print(f"aiayn attribution: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_main())
