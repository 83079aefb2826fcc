"""Attribution beside attention over a sentence set: for each pair, integrated gradients (or gradient x input) of
every target piece's log-probability (:func:`aiayn.calls.attribute`), the source's share of each prediction, and
the rank agreement of ``|attribution to the source|`` with each cross-attention head, the layer's head mean, the
cross-attention rollout (:func:`aiayn.analysis.flow.rollout`) and norm-based cross attention (Kobayashi et al.
2020) (:mod:`aiayn.analysis.attribution`). Rows are compared at the same target position t: the attention of the
decoder query that predicts ``target[t]``.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .analysis import alignment as al
from .analysis import attribution as at
from .alignment_eval import GOLD_PATH, _sides, cross_value_norms, detokenize

if TYPE_CHECKING:  # annotations only
    from .translation import Translator


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
