"""Beam search as the tree it explores (Section 6.1; the view of Seq2Seq-Vis, Strobelt et al. 2018): every
candidate the search weighed at each step, kept or pruned, the ended ones with their length-penalised scores, the
winner marked. Built from the :class:`~aiayn.decoding.BeamRecord` list :func:`aiayn.decoding.beam_search` fills
when given a ``recorder``; :meth:`aiayn.Translator.beam_tree` is the entry point.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from .decoding import BeamRecord


@dataclass(frozen=True)
class BeamNode:
    """One hypothesis of the tree.

    Attributes:
        id: index in :attr:`BeamTree.nodes` (0 is the root).
        parent: the id of the hypothesis it continues; None at the root (the decoder start piece).
        step: its output length (0 at the root).
        token: the id it adds; piece: that id's SentencePiece piece.
        log_prob: cumulative ``log P(y_1..y_step | X)``, natural log (0 at the root).
        step_log_prob: ``log p(y_step | y_<step, X)``, this step's own (0 at the root).
        kept: it was among the K hypotheses carried to the next step (the root is kept).
        finished: it ended with ``</s>``.
        ended: it left the beam as a whole hypothesis: ``finished``, or cut at the maximum output length.
        score: ``log_prob / lp(step)`` (GNMT length penalty, alpha) for ended nodes, else None.
        status: ``"root"``, ``"kept"``, ``"finished"``, ``"cut"`` or ``"pruned"`` (fell out of the beam).
    """

    id: int
    parent: int | None
    step: int
    token: int
    piece: str
    log_prob: float
    step_log_prob: float
    kept: bool
    finished: bool
    ended: bool
    score: float | None
    status: str


@dataclass
class BeamTree:
    """The tree of one sentence's beam search.

    Attributes:
        nodes: every :class:`BeamNode`, parents before children, in the order the search weighed them.
        best: the id of the winning ended node (the highest ``score``; the first of equals).
        beam_size: K; length_penalty: alpha.
        translation: the :class:`~aiayn.translation.Translation` of the same search (maps included), or None.
    """

    nodes: list[BeamNode]
    best: int
    beam_size: int
    length_penalty: float
    translation: object = field(default=None, repr=False)

    def path(self, node_id: int) -> list[int]:
        """Ids from the root's child down to ``node_id`` (its tokens in order; empty for the root).

        Raises:
            ValueError: an unknown id.
        """
        if not isinstance(node_id, int) or not 0 <= node_id < len(self.nodes):
            raise ValueError(f"no node {node_id!r} in a tree of {len(self.nodes)} nodes")
        out = []
        while node_id:
            out.append(node_id)
            node_id = self.nodes[node_id].parent
        return out[::-1]

    def tokens(self, node_id: int) -> list[int]:
        """The ids of ``node_id``'s hypothesis (what forcing it as a prefix means)."""
        return [self.nodes[i].token for i in self.path(node_id)]

    def n_best(self, n: int | None = None) -> list[BeamNode]:
        """The ended nodes ranked as the search's n-best list (score descending, the first weighed of equals)."""
        ranked = sorted((x for x in self.nodes if x.ended), key=lambda x: -x.score)
        return ranked if n is None else ranked[:n]


def build_tree(records: Sequence[BeamRecord], piece: Callable[[int], str], start_id: int, *, beam_size: int,
               length_penalty: float, sentence: int = 0) -> BeamTree:
    """A :class:`BeamTree` of ``sentence``'s records (a ``recorder`` list of :func:`aiayn.decoding.beam_search`).

    Args:
        records: the :class:`BeamRecord` list, in the order the search appended them.
        piece: id -> SentencePiece piece.
        start_id: the decoder start piece's id (the root).

    Raises:
        ValueError: no record of an ended hypothesis for ``sentence``, or a record whose parent was not kept.
    """
    nodes = [BeamNode(0, None, 0, start_id, piece(start_id), 0.0, 0.0, True, False, False, None, "root")]
    kept_ids: dict[tuple[int, ...], int] = {(): 0}
    for r in records:
        if r.sentence != sentence:
            continue
        parent = kept_ids.get(r.tokens[:-1])
        if parent is None or not nodes[parent].kept:
            raise ValueError(f"record {r.tokens} has no kept parent in the tree")
        node = BeamNode(len(nodes), parent, r.step, r.tokens[-1], piece(r.tokens[-1]), r.log_prob, r.step_log_prob,
                        r.status == "kept", r.status == "finished", r.status in ("finished", "cut"), r.score, r.status)
        nodes.append(node)
        if node.kept:
            kept_ids[r.tokens] = node.id
    ended = [x for x in nodes if x.ended]
    if not ended:
        raise ValueError(f"sentence {sentence} has no ended hypothesis among the records")
    best = sorted(ended, key=lambda x: -x.score)[0].id
    return BeamTree(nodes, best, beam_size, length_penalty)
