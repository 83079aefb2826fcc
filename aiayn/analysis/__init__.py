"""Analysis of attention maps and next-piece probabilities for the app (pure functions; no Streamlit).

Modules, by job:

* :mod:`~aiayn.analysis.pieces`: special pieces, word groups, pieces joined and merged into words
  (sum over keys, mean over queries), unique ``"i:piece"`` labels;
* :mod:`~aiayn.analysis.stats`: row entropy (bits), per-head statistics (head roles), top-k of a
  next-piece distribution;
* :mod:`~aiayn.analysis.views`: what a view shows: the ``(L, H, Q, K)`` maps of one kind of an
  :class:`~aiayn.model.maps.AttentionMaps`, with ``"i:fed→predicted"`` query labels;
* :mod:`~aiayn.analysis.explain`: one sentence run through the model (free-running or teacher-forced)
  into a :class:`~aiayn.translator.Translation` with maps and top-k next pieces (several at once:
  :func:`~aiayn.analysis.explain.explain_batch`);
* :mod:`~aiayn.analysis.flow`: attention rollout across layers (Abnar and Zuidema 2020), :func:`rollout`;
* :mod:`~aiayn.analysis.compare`: two sentences' maps aligned (by position or pieces) and their difference;
* :mod:`~aiayn.analysis.ablation`: head ablation (Michel et al. 2019): head masks, maps with heads removed and
  the per-head sweep (:func:`~aiayn.analysis.ablation.head_sweep`), cached beside each checkpoint;
* :mod:`~aiayn.analysis.text`: input hygiene for typed text, sentence splitting, unseen scripts.

Conventions: a map of one head is ``(Q, K)``, rows are queries and columns keys, each row summing to 1
(Eq. 1 of the paper); a stack of heads is ``(L, H, Q, K)``. Pieces fed to the decoder are
``decoder_input_tokens`` (``<s>`` then the output shifted right), pieces it predicted ``output_tokens``.
Entropies are in **bits**. Layers and heads count from 0 in arrays and from 1 in tables and in the app
(the paper's "layer 5 of 6"). Importing this package does not import torch.
"""
from __future__ import annotations

from .compare import ALIGN_BY, COMPARE_KINDS, AlignedMaps, align_maps
from .explain import explain, explain_batch, forced_probs_batch
from .flow import ROLLOUT_KINDS, rollout, rollout_dict, rollout_frame
from .pieces import (
    BOS_PIECES, EOS_PIECES, SPECIAL_PIECES, WORD_START, is_punctuation, is_special, join_pieces, merge_words,
    unique_labels, word_groups, words_text,
)
from .stats import entropy, head_stats, top_k
from .text import (LANGUAGE_NAMES, MAX_CHARS, check_text, language_evidence, likely_language, split_sentences,
                   unseen_script_share, wrong_language_hint)
from .views import kind_labels, kind_stack, pieces_view, query_labels, view_stack

__all__ = [
    "BOS_PIECES", "EOS_PIECES", "MAX_CHARS", "SPECIAL_PIECES", "WORD_START", "check_text", "entropy", "explain",
    "explain_batch", "forced_probs_batch", "head_stats", "is_special", "join_pieces", "kind_labels", "kind_stack", "merge_words",
    "query_labels", "top_k", "unique_labels", "view_stack", "word_groups",
    "is_punctuation", "pieces_view", "words_text",
    "split_sentences", "unseen_script_share", "LANGUAGE_NAMES", "language_evidence", "likely_language",
    "wrong_language_hint",
    "ROLLOUT_KINDS", "rollout", "rollout_dict", "rollout_frame",
    "ALIGN_BY", "COMPARE_KINDS", "AlignedMaps", "align_maps",
]
