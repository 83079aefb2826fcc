"""Beam search as a tree (Translator.beam_tree, the ``recorder`` of decoding.beam_search) and prefix-constrained
decoding (Translator.translate(prefix=...)), on a perturbed tiny model whose ``</s>`` logit is raised so that
hypotheses end at varied steps (finished, cut and pruned nodes all occur). The tree is checked against translate()
and against a brute-force expansion written out here with full teacher-forced passes (no cache, no beam code)."""
from __future__ import annotations

import pytest
import torch
from tiny_models import perturbed_tiny_model

from aiayn import Translator, calls
from aiayn.decoding import beam_search
from aiayn.tokenizer import Tokenizer

TEXTS = ["I have no time.", "The house is small.", "Where is the station?"]


@pytest.fixture(scope="module")
def tr(tiny_spm):
    tok = Tokenizer.load(tiny_spm)
    model = perturbed_tiny_model(3, vocab_size=tok.vocab_size, max_len=24, final_logits_bias=True)
    with torch.no_grad():
        model.final_logits_bias[tok.eos_id] = 1.6  # hypotheses end at varied lengths
    return Translator(model, tok)


def test_best_path_is_translates_output(tr):
    for text, alpha in zip(TEXTS, (0.6, 0.0, 1.0)):
        tree = tr.beam_tree(text, beam_size=4, length_penalty=alpha)
        out = tr.translate(text, beam_size=4, length_penalty=alpha)
        assert tree.tokens(tree.best) == out.output_ids
        assert tree.nodes[tree.best].score == pytest.approx(out.score, abs=1e-9)
        assert tree.nodes[tree.best].finished == out.finished


def test_finished_nodes_give_the_n_best_list(tr):
    statuses = set()
    for text in TEXTS:
        tree = tr.beam_tree(text, beam_size=3)
        nbest = tr.translate(text, beam_size=3, n_best=3).nbest
        ranked = tree.n_best(3)
        assert [(tr.tokenizer.decode(tree.tokens(n.id)), n.score) for n in ranked] == nbest
        statuses |= {n.status for n in tree.nodes}
        for n in tree.n_best():
            assert n.score == pytest.approx(n.log_prob / ((5 + n.step) / 6) ** 0.6, abs=1e-9)
            assert (tree.tokens(n.id)[-1] == tr.cfg.eos_id) == n.finished
    assert {"root", "kept", "finished", "pruned"} <= statuses  # the fixture exercises every kind of node


def test_nodes_link_to_kept_parents_and_sum_their_step_log_probs(tr):
    tree = tr.beam_tree(TEXTS[0], beam_size=4)
    root = tree.nodes[0]
    assert root.parent is None and root.step == 0 and root.token == tr.cfg.decoder_start_id
    for n in tree.nodes[1:]:
        parent = tree.nodes[n.parent]
        assert parent.kept and parent.step == n.step - 1
        assert n.log_prob == pytest.approx(parent.log_prob + n.step_log_prob, abs=1e-4)
        assert n.piece == tr.tokenizer.id_to_piece(n.token)
        assert (n.score is not None) == n.ended and not (n.kept and n.ended)
    kept_per_step = {}
    for n in tree.nodes[1:]:
        kept_per_step[n.step] = kept_per_step.get(n.step, 0) + n.kept
    assert max(kept_per_step.values()) <= 4


def _brute_force_steps(model, src_ids, K, n_steps):
    """Per step, ``{tokens: (status, cumulative log-prob)}`` of the 2K best continuations of the kept hypotheses,
    each distribution from a full teacher-forced pass over ``[start] + tokens``."""
    cfg = model.cfg
    live, steps = {(): 0.0}, []
    for _ in range(n_steps):
        cands = []
        for toks, s in live.items():
            with torch.inference_mode():
                logits = model(torch.tensor([src_ids]), torch.tensor([[cfg.decoder_start_id, *toks]]))
            logp = torch.log_softmax(logits[0, -1].double(), -1)
            logp[cfg.pad_id] = logp[cfg.decoder_start_id] = float("-inf")
            cands += [(s + float(logp[w]), toks + (w,)) for w in range(cfg.vocab_size)]
        cands = [c for c in sorted(cands, key=lambda c: -c[0]) if c[0] > float("-inf")][: 2 * K]
        step, kept = {}, 0
        for rank, (s, toks) in enumerate(cands):
            if toks[-1] == cfg.eos_id:
                step[toks] = ("finished" if rank < K else "pruned", s)
            elif kept < K:
                step[toks], kept = ("kept", s), kept + 1
            else:
                step[toks] = ("pruned", s)
        steps.append(step)
        live = {t: s for t, (st, s) in step.items() if st == "kept"}
        if not live:
            break
    return steps


@pytest.mark.parametrize("text, K", [(TEXTS[0], 3), (TEXTS[2], 4)])
def test_pruned_nodes_are_those_that_fell_out_of_the_beam(tr, text, K):
    tree = tr.beam_tree(text, beam_size=K)
    expected = _brute_force_steps(tr.model, tr.encode_source(text).ids, K, 4)
    compared = 0
    for step, want in enumerate(expected, start=1):
        got = {tuple(tree.tokens(n.id)): (n.status, n.log_prob) for n in tree.nodes if n.step == step}
        if not got:  # the search was done (K finished hypotheses) before this step
            break
        compared += 1
        assert {t: st for t, (st, _) in got.items()} == {t: st for t, (st, _) in want.items()}, f"step {step}"
        for t, (_, lp) in got.items():
            assert lp == pytest.approx(want[t][1], abs=1e-4)
    assert compared >= 3


def test_recording_changes_no_hypothesis(tr):
    src = calls.batch(tr.cfg, [tr.encode_source(t).ids for t in TEXTS], tr.device)
    plain = beam_search(tr.model, src, beam_size=4, n_best=4)
    records: list = []
    recorded = beam_search(tr.model, src, beam_size=4, n_best=4, recorder=records)
    assert [[(h.tokens, h.score) for h in hs] for hs in plain] == [[(h.tokens, h.score) for h in hs] for hs in recorded]
    assert {r.sentence for r in records} == {0, 1, 2}


# -- prefix-constrained decoding ----------------------------------------------------------------------------------
def test_prefix_is_kept(tr):
    free = tr.translate(TEXTS[1], beam_size=4)
    forced_ids = [i for i in tr.tokenizer.encode("Das Haus") if i != free.output_ids[0]][:2]
    for prefix in ("Das Haus", forced_ids):
        ids = tr.prefix_ids(prefix)
        assert ids and tr.translate(TEXTS[1], beam_size=4, prefix=prefix).output_ids[: len(ids)] == ids
    assert tr.translate(TEXTS[1], beam_size=4, prefix=forced_ids).output_ids != free.output_ids


def test_prefix_of_the_free_output_gives_the_free_output(tr):
    for text in TEXTS:
        greedy = tr.translate(text, beam_size=1)
        for n in range(len(greedy.output_ids)):  # beam 1: any prefix of the greedy output
            assert tr.translate(text, beam_size=1, prefix=greedy.output_ids[:n]).output_ids == greedy.output_ids
        free = tr.translate(text, beam_size=4)
        assert free.finished
        whole = tr.translate(text, beam_size=4, prefix=free.output_ids)  # beam 4: the whole hypothesis, </s> included
        assert (whole.output_ids, whole.score) == (free.output_ids, pytest.approx(free.score, abs=1e-6))


def test_forced_output_maps_and_log_prob_are_the_teacher_forced_ones(tr):
    text = TEXTS[0]
    out = tr.translate(text, beam_size=4, prefix="Ich habe keine")
    forced = calls.teacher_forced_ids(tr.model, [out.src_ids], [out.output_ids], return_attention=True)
    assert out.log_prob == pytest.approx(float(forced.target_log_probs(tr.cfg.pad_id).double().sum()), abs=1e-4)
    for kind in ("encoder", "decoder", "cross"):
        torch.testing.assert_close(out.attention.get(kind), forced.maps.get(kind), atol=1e-5, rtol=0)
    assert out.attention.meta["prefix"] == tr.pieces(tr.tokenizer.encode("Ich habe keine"))


def test_tree_with_a_prefix_forces_its_first_steps(tr):
    ids = tr.prefix_ids("Das Haus")
    tree = tr.beam_tree(TEXTS[1], beam_size=4, prefix=ids)
    for step, w in enumerate(ids, start=1):
        assert [(n.token, n.status) for n in tree.nodes if n.step == step] == [(w, "kept")]
    assert tree.tokens(tree.best)[: len(ids)] == ids


@pytest.mark.parametrize("prefix, match", [([0], "padding"), ([2], "start piece"), ([3, 40], "</s>"),
                                           ([99999], "outside the vocabulary"), ([7] * 30, "at most"),
                                           ([1.5], "list of piece ids"), (object(), "list of piece ids")])
def test_bad_prefix_is_a_clear_error(tr, prefix, match):
    with pytest.raises(ValueError, match=match):
        tr.translate(TEXTS[0], prefix=prefix)
