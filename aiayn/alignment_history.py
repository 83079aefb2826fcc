"""Alignment error rate across training: every recorded state of a checkpoint's attention history scored against
hand-made gold links.

No weights are kept per training state, only the cross-attention maps ``(N, L, H, T, S)`` of the first curated
sentences, teacher-forced on their references (:mod:`aiayn.training.history`), so the alignment error rate (Och and
Ney 2003) at each state is computed from those stored maps: the maps' pieces are matched to the gold words
(:func:`aiayn.analysis.alignment.piece_words`), turned into word links and counted by
:func:`aiayn.analysis.alignment.sentence_counts` with every reading of ``aiayn align`` (argmax per target word,
per source word, intersection, union; with and without the shift by one of Chen et al. 2020), and summed over the
sentences at each state. Norm-based attention (Kobayashi et al. 2020) needs each state's value vectors, which are
not stored, so only the attention weights are scored.

The gold links of the recorded sentences are in ``assets/alignment/history.de-en.tsv`` (German first, as the gold
set); a history sentence is matched to its gold line by its text. ``aiayn align`` writes the result beside the
checkpoint as ``alignment_history.json`` (:func:`align_history`): its own file, since it depends on the history
and its gold file, not on the final weights that ``alignment.json`` scores.

NumPy only (no torch): the history reader and the alignment functions are torch-free.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .alignment_eval import _gold, _sides, detokenize
from .analysis import alignment as al
from .training.history import AttentionHistory, HistorySentence, history_file, load_history

HISTORY_ALIGN_FILE = "alignment_history.json"
HISTORY_ALIGN_FORMAT, HISTORY_ALIGN_VERSION = "aiayn-alignment-history", 1
HISTORY_GOLD_PATH = Path(__file__).resolve().parents[1] / "assets" / "alignment" / "history.de-en.tsv"


def match_gold(sentence: HistorySentence, pairs: Sequence[al.GoldPair], direction: str) -> al.GoldPair:
    """The gold pair of a recorded sentence: the one whose source and target tokens, joined as running text
    (:func:`aiayn.alignment_eval.detokenize`), are the sentence's ``source`` and ``reference``.

    Raises:
        ValueError: no gold line holds the sentence (naming it), or an unknown direction.
    """
    for pair in pairs:
        src_w, tgt_w, _ = _sides(pair, direction)
        if detokenize(src_w) == sentence.source and detokenize(tgt_w) == sentence.reference:
            return pair
    raise ValueError(f"no gold line for the recorded {direction} sentence {sentence.source!r} -> "
                     f"{sentence.reference!r}: add its links to the history gold file")


def sentence_state_counts(cross: np.ndarray, sentence: HistorySentence, pair: al.GoldPair,
                          direction: str) -> np.ndarray:
    """AER counts of one recorded sentence at every state.

    Args:
        cross: ``(N, L, H, T, S)`` cross-attention of the sentence (rows: the decoder's T steps, each predicting
            ``sentence.output_tokens[t]``; columns: ``sentence.src_tokens``).
        pair: its gold pair (:func:`match_gold`).

    Returns:
        ``(N, len(SHIFTS), len(METHODS), L * H + L + 1, 4)`` int64 in
        :func:`aiayn.analysis.alignment.sentence_counts`' order.

    Raises:
        ValueError: the pieces do not spell the gold words (:func:`aiayn.analysis.alignment.piece_words`).
    """
    src_w, tgt_w, transpose = _sides(pair, direction)
    src_pw = al.piece_words(sentence.src_tokens, src_w)
    tgt_pw = al.piece_words(sentence.output_tokens, tgt_w)
    sure, possible = _gold(pair, len(tgt_w), len(src_w), transpose)
    return np.stack([al.sentence_counts(state, src_pw, tgt_pw, sure, possible) for state in np.asarray(cross)])


def history_counts(hist: AttentionHistory, pairs: Sequence[al.GoldPair]) -> tuple[np.ndarray, list[int]]:
    """Summed AER counts over the recorded sentences at each state.

    Returns:
        ``(counts, lines)``: counts ``(N, len(SHIFTS), len(METHODS), L * H + L + 1, 4)`` int64; lines: the gold
        file's line of each recorded sentence.

    Raises:
        ValueError: a recorded sentence with no gold line, or pieces that do not spell its words.
    """
    total, lines = None, []
    for i, sentence in enumerate(hist.sentences):
        pair = match_gold(sentence, pairs, hist.direction)
        lines.append(pair.line)
        c = sentence_state_counts(hist.stack(i, "cross"), sentence, pair, hist.direction)
        total = c if total is None else total + c
    if total is None:
        raise ValueError("the attention history records no sentence")
    return total, lines


def reading_across(aer: np.ndarray, n_layers: int, n_heads: int) -> dict[str, Any]:
    """One reading across the N states from its AER ``(N, L * H + L + 1)``: per state the ``(L, H)`` head AERs,
    the layer means and the model mean; the final state's best head and best layer mean followed back over every
    state (``nan`` AERs are skipped when picking)."""
    parts = al.split_readouts(aer, n_layers, n_heads)
    heads, layers = parts["head"], parts["layer"]
    layer, head = (int(x) for x in np.unravel_index(np.nanargmin(heads[-1]), heads[-1].shape))
    best_layer = int(np.nanargmin(layers[-1]))
    return {"head_aer": np.round(heads, 4).tolist(), "layer_mean_aer": np.round(layers, 4).tolist(),
            "model_mean_aer": np.round(parts["model"], 4).tolist(),
            "final_best_head": {"layer": layer, "head": head, "aer": np.round(heads[:, layer, head], 4).tolist()},
            "final_best_layer": {"layer": best_layer, "aer": np.round(layers[:, best_layer], 4).tolist()}}


def history_payload(hist: AttentionHistory, gold: str | Path = HISTORY_GOLD_PATH) -> dict[str, Any]:
    """The ``alignment_history.json`` payload of an attention history (layers and heads 0-based; the SHA-256 of
    the history file and of the gold file say what it was computed from).

    Raises:
        ValueError: a malformed gold file, a recorded sentence with no gold line.
    """
    from .files import sha256_file

    counts, lines = history_counts(hist, al.read_gold(gold))
    aer = al.aer_from_counts(counts)  # (N, shifts, methods, readouts)
    readings = {}
    for s, shift in enumerate(al.SHIFTS):
        for m, method in enumerate(al.METHODS):
            readings[f"{method}{'_shift' if shift else ''}"] = {
                "shift": shift, "method": method, **reading_across(aer[:, s, m], hist.n_layers, hist.n_heads)}
    best_key = min(readings, key=lambda k: readings[k]["final_best_head"]["aer"][-1])
    return {"format": HISTORY_ALIGN_FORMAT, "format_version": HISTORY_ALIGN_VERSION, "direction": hist.direction,
            "maps": "weights", "gold": Path(gold).name, "gold_sha256": sha256_file(gold),
            "history_sha256": sha256_file(hist.path) if hist.path is not None else None,
            "steps": list(hist.steps), "layers": hist.n_layers, "heads": hist.n_heads,
            "sentences": [{"source": s.source, "reference": s.reference, "gold_line": n}
                          for s, n in zip(hist.sentences, lines)],
            "sure_links": int(counts[0, 0, 0, 0, 3]), "methods": list(al.METHODS),
            "best_final": {"reading": best_key, **{k: v[-1] if isinstance(v, list) else v
                                                   for k, v in readings[best_key]["final_best_head"].items()}},
            "readings": readings}


def align_history(checkpoint: str | Path, gold: str | Path = HISTORY_GOLD_PATH) -> tuple[Path, dict] | None:
    """Score the attention history of ``checkpoint`` and write ``checkpoint/alignment_history.json``.

    Returns:
        ``(path written, payload)``, or None when the checkpoint has no attention history (an imported model, one
        trained before histories were recorded).

    Raises:
        FileNotFoundError: ``checkpoint`` does not exist; ValueError: a damaged history, a bad gold file, a
        recorded sentence with no gold line.
    """
    import json

    from .files import atomic_write_text

    hist = load_history(checkpoint)
    if hist is None:
        return None
    payload = history_payload(hist, gold)
    out = Path(history_file(checkpoint)).parent / HISTORY_ALIGN_FILE
    return atomic_write_text(out, json.dumps(payload, indent=1) + "\n"), payload


def describe(payload: dict[str, Any]) -> list[str]:
    """Lines for the terminal: per reading the model mean, the final best layer mean and the final best head at
    the first and the last state."""
    steps = payload["steps"]
    out = [f"attention history ({payload['direction']}, {len(payload['sentences'])} sentences, "
           f"{payload['sure_links']} sure links, steps {steps[0]} to {steps[-1]}): AER first -> last state"]
    for key, r in payload["readings"].items():
        b, bl = r["final_best_head"], r["final_best_layer"]
        out.append(f"  {key:<20} model mean {r['model_mean_aer'][0]:.3f} -> {r['model_mean_aer'][-1]:.3f}  "
                   f"layer {bl['layer'] + 1} mean {bl['aer'][0]:.3f} -> {bl['aer'][-1]:.3f}  "
                   f"L{b['layer'] + 1} H{b['head'] + 1} {b['aer'][0]:.3f} -> {b['aer'][-1]:.3f}")
    return out
