"""Head ablation: what happens to a translation when attention heads are switched off (Michel et al. 2019,
"Are Sixteen Heads Really Better than One?"; Voita et al. 2019, "Analyzing Multi-Head Self-Attention").

The pure part (masks and maps in, arrays and tables out): the head masks of the app (``(3, L, H)``: index 0
encoder self-attention, 1 decoder self-attention, 2 cross-attention; Section 3.2.3), their URL spelling
(``cross.3.2``, layers and heads from 1), chrF (sacreBLEU) and the difference of two maps over the same tokens.
The model runs (maps with heads removed, the per-head sweep, its ``head_sweep.json`` cache and ``aiayn sweep``)
live in :mod:`aiayn.sweep`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from ..model.config import KINDS  # the three uses of attention, in head-mask index order (Section 3.2.3)

if TYPE_CHECKING:  # annotations only: these import torch / pandas
    import pandas as pd

    from ..model.maps import AttentionMaps

Head = tuple[str, int, int]  # (kind, layer from 0, head from 0)


# -- head masks and their URL spelling ------------------------------------------------------------------------
def head_mask_array(off: Iterable[Head], n_layers: int, n_heads: int) -> np.ndarray:
    """A head mask ``(3, n_layers, n_heads)`` float32 of ones with 0 at each removed head.

    Args:
        off: ``(kind, layer, head)`` with ``kind`` in :data:`KINDS`, layer and head counting from 0.

    Raises:
        ValueError: an unknown kind or a layer / head out of range.
    """
    mask = np.ones((3, n_layers, n_heads), dtype=np.float32)
    for kind, layer, head in off:
        if kind not in KINDS or not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ValueError(f"no head {(kind, layer, head)} in a model with {n_layers} layers and {n_heads} heads "
                             f"(kinds {KINDS}, layers and heads from 0)")
        mask[KINDS.index(kind), layer, head] = 0.0
    return mask


def parse_heads(spec: str | None, n_layers: int, n_heads: int) -> tuple[list[Head], list[str]]:
    """Read the URL spelling of removed heads, ``"cross.3.2,encoder.1.5"`` (kind.layer.head, **from 1**).

    Returns:
        ``(heads, bad)``: the valid heads as ``(kind, layer, head)`` counting **from 0**, sorted and without
        duplicates, and the items that could not be read (to warn about).
    """
    heads: set[Head] = set()
    bad: list[str] = []
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        parts = item.split(".")
        try:
            kind, layer, head = parts[0].lower(), int(parts[1]), int(parts[2])
            ok = len(parts) == 3 and kind in KINDS and 1 <= layer <= n_layers and 1 <= head <= n_heads
        except (IndexError, ValueError):
            ok = False
        if ok:
            heads.add((kind, layer - 1, head - 1))
        else:
            bad.append(item)
    return sorted(heads, key=lambda h: (KINDS.index(h[0]), h[1], h[2])), bad


def format_heads(heads: Iterable[Head]) -> str:
    """The URL spelling of ``heads`` (``(kind, layer, head)`` from 0): ``"encoder.1.5,cross.3.2"``, from 1."""
    ordered = sorted(set(heads), key=lambda h: (KINDS.index(h[0]), h[1], h[2]))
    return ",".join(f"{k}.{layer + 1}.{head + 1}" for k, layer, head in ordered)


# -- scores --------------------------------------------------------------------------------------------------
def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus chrF (sacreBLEU ``CHRF()`` defaults: character 6-grams, beta 2), 0-100."""
    from sacrebleu.metrics import CHRF  # function-level: sacrebleu is only needed when scoring

    return float(CHRF().corpus_score(list(hypotheses), [list(references)]).score)


def sentence_chrf(hypothesis: str, reference: str) -> float:
    """Sentence chrF (sacreBLEU ``CHRF()`` defaults), 0-100."""
    from sacrebleu.metrics import CHRF  # function-level: sacrebleu is only needed when scoring

    return float(CHRF().sentence_score(hypothesis, [reference]).score)


def maps_difference_frame(intact: "AttentionMaps", ablated: "AttentionMaps",
                          kinds: Sequence[str] | None = None) -> "pd.DataFrame":
    """Long-format comparison of two maps over the same tokens: the columns of
    :meth:`~aiayn.model.maps.AttentionMaps.to_dataframe` (layer and head from 0) with ``weight_intact``,
    ``weight_ablated`` and ``difference`` (ablated - intact).

    Raises:
        ValueError: the two maps do not have the same shapes.
    """
    for kind in kinds or KINDS:
        a, b = getattr(intact, kind), getattr(ablated, kind)
        if (a is None) != (b is None) or (a is not None and a.shape != b.shape):
            raise ValueError(f"the {kind} maps differ in shape; compare maps over the same tokens (forced_maps)")
    left = intact.to_dataframe(kinds=list(kinds) if kinds else None).rename(columns={"weight": "weight_intact"})
    right = ablated.to_dataframe(kinds=list(kinds) if kinds else None)
    left["weight_ablated"] = right["weight"].to_numpy()
    left["difference"] = left["weight_ablated"] - left["weight_intact"]
    return left


#: largest |ablated - intact| still read as "unchanged": the intact and ablated passes may take different (equally
#: exact) code paths, which can differ in the last float32 bit
UNCHANGED_ATOL = 1e-6


def unchanged_maps_note(diff: np.ndarray, kind_name: str) -> str | None:
    """A sentence for the reader when no map of one kind changed: ``diff`` ``(L, H, Q, K)`` float, ablated - intact,
    all within :data:`UNCHANGED_ATOL` of 0 (or empty). None when some map changed.

    Why it happens: a removed head changes its layer's output from that head on, so only what is computed after
    it can change (the layers above it and the next-piece probabilities; Michel et al. 2019). Removing a
    cross-attention head of the last layer changes no map at all, only the scores: a blank difference grid is then
    the right answer, and says so.
    """
    if diff.size and float(np.abs(diff).max()) > UNCHANGED_ATOL:
        return None
    return (f"No {kind_name[0].lower() + kind_name[1:]} map changed: a removed head's output only reaches what is "
            "computed after it (the layers above it and the next-piece probabilities, hence the scores above), and "
            "every map of this kind is computed before that. Remove a head in a lower layer to see maps change.")
