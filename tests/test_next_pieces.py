"""The next-piece probabilities beam search carries along its back-pointers (``next_k``: aiayn.decoding.StepTopK,
Translation.next_pieces) against a teacher-forced pass over the same output, which shares no code with the search.

The tiny model is test_decoding's under-trained reversal model (its outputs end at varied steps, so finished
sentences leave the batch while others go on; some hypotheses are cut at the maximum length). The explain path is
checked on the shipped en-de against :func:`aiayn.analysis.forced_probs_batch`, what explain used before.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from aiayn.decoding import beam_search
from test_decoding import BOS, PAD, V, _unpadded, model, src  # noqa: F401 - model, src: module fixtures

ATOL = 1e-5  # float32 rounding: a cached step against a full teacher-forced pass, padded batches


def _forced_log_probs(model, src_b, tokens):
    """``(T, V)`` log-softmax of a lone, unpadded teacher-forced pass over ``tokens`` (decoder fed BOS + tokens[:-1])."""
    with torch.no_grad():
        logits = model(src_b, torch.tensor([[BOS] + tokens[:-1]]))
    return torch.log_softmax(logits[0].float(), dim=-1)


def _assert_matches_forced(model, src_b, hyp, k):
    want = _forced_log_probs(model, src_b, hyp.tokens)
    top = hyp.next_pieces
    T = len(hyp.tokens)
    assert top.ids.shape == (T, k) and top.log_probs.shape == (T, k) and top.chosen_log_prob.shape == (T,)
    values, ids = want.topk(k, dim=-1)
    assert torch.equal(top.ids, ids), (top.ids, ids)
    np.testing.assert_allclose(top.log_probs.exp().numpy(), values.exp().numpy(), atol=ATOL, rtol=0)
    chosen = want[torch.arange(T), torch.tensor(hyp.tokens)]
    np.testing.assert_allclose(top.chosen_log_prob.exp().numpy(), chosen.exp().numpy(), atol=ATOL, rtol=0)


@pytest.mark.parametrize("use_cache", [True, False])
def test_every_hypothesis_carries_the_teacher_forced_distribution(model, src, use_cache):
    out = beam_search(model, src, beam_size=4, n_best=4, use_cache=use_cache, next_k=5)
    lengths = {len(h.tokens) for hyps in out for h in hyps}
    assert len({len(hyps[0].tokens) for hyps in out}) > 1, "the sentences should end at different steps"
    assert len(lengths) > 2
    for b, hyps in enumerate(out):
        for h in hyps:  # every n-best hypothesis, not only the best: its own path through the back-pointers
            _assert_matches_forced(model, _unpadded(src, b), h, 5)


def test_the_whole_distribution_is_the_models_own_padding_and_start_included(model, src):
    """next_k = V: every piece, sorted; the search bans padding and the start piece from its choices, but the
    distribution it reports is the model's, as the teacher-forced pass gives it."""
    out = beam_search(model, src[:3], beam_size=2, n_best=2, next_k=V)
    for b, hyps in enumerate(out):
        for h in hyps:
            _assert_matches_forced(model, _unpadded(src, b), h, V)
            assert {PAD, BOS} <= set(h.next_pieces.ids[0].tolist())


def test_a_forced_prefix_reports_the_distribution_before_forcing(model, src):
    """The prefix's pieces are forced, but next_pieces says what the model itself preferred there."""
    b = 1
    src_b = _unpadded(src, b)
    free = beam_search(model, src_b, beam_size=4, n_best=1)[0][0].tokens
    step0 = _forced_log_probs(model, src_b, free)[0]
    unlikely = int(torch.argsort(step0)[2])  # a piece the model did not want first (not PAD / BOS: banned)
    if unlikely in (PAD, BOS):
        unlikely = int(torch.argsort(step0)[3])
    prefix = [[unlikely]] + [[] for _ in range(src.size(0) - 1)]
    out = beam_search(model, src, beam_size=4, n_best=3, prefix=prefix, next_k=4)
    for h in out[0]:
        assert h.tokens[0] == unlikely and h.next_pieces.ids[0, 0] != unlikely
        _assert_matches_forced(model, _unpadded(src, 0), h, 4)
    for i in range(1, src.size(0)):
        for h in out[i]:
            _assert_matches_forced(model, _unpadded(src, i), h, 4)


def test_without_next_k_nothing_is_carried_and_results_are_unchanged(model, src):
    plain = beam_search(model, src, beam_size=4, n_best=4, return_attention=True)
    carried = beam_search(model, src, beam_size=4, n_best=4, return_attention=True, next_k=3)
    for a, b in zip(plain, carried):
        assert [h.tokens for h in a] == [h.tokens for h in b] and [h.score for h in a] == [h.score for h in b]
        assert all(h.next_pieces is None for h in a) and all(h.next_pieces is not None for h in b)
        assert all(torch.equal(x.attention.cross, y.attention.cross) for x, y in zip(a, b))


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_next_k_must_be_a_whole_number(model, src, bad):
    with pytest.raises(ValueError, match="next_k"):
        beam_search(model, src, next_k=bad)


# -- the explain path on the shipped model --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped(shipped_en_de):
    return shipped_en_de


def _assert_explained_like_forced(tr, t, k):
    from aiayn.analysis import forced_probs_batch
    from aiayn.analysis.stats import top_k

    [probs] = forced_probs_batch(tr, [t.src_ids], [t.output_ids])
    ids, vals = top_k(probs, k)
    assert t.next_pieces.pieces == [tr.pieces(row) for row in ids]
    np.testing.assert_allclose(t.next_pieces.probs, vals, atol=ATOL, rtol=0)
    chosen = probs[np.arange(len(t.output_ids)), t.output_ids]
    np.testing.assert_allclose(t.next_pieces.chosen_prob, chosen, atol=ATOL, rtol=0)
    assert t.next_pieces.probs.dtype == np.float32 and t.next_pieces.chosen_prob.dtype == np.float32


def test_explain_batch_needs_no_second_pass(shipped, monkeypatch):
    from aiayn import calls
    from aiayn.analysis import explain_batch

    texts = ["The cat sleeps on the sofa.", "Good morning.", "My brother plays football every Sunday.",
             "Where is the nearest station?"]
    monkeypatch.setattr(calls, "teacher_forced_ids", lambda *a, **kw: pytest.fail("a teacher-forced pass ran"))
    out = explain_batch(shipped, texts, k=7)
    monkeypatch.undo()
    assert len({len(t.output_ids) for t in out}) > 1  # sentences left the batch at different steps
    for t in out:
        _assert_explained_like_forced(shipped, t, 7)


def test_explain_with_a_prefix_matches_the_forced_pass(shipped):
    from aiayn.analysis import explain

    t = explain(shipped, "The weather is very nice today.", prefix="Heute")
    assert t.output_tokens[: len(shipped.prefix_ids("Heute"))] == shipped.pieces(shipped.prefix_ids("Heute"))
    _assert_explained_like_forced(shipped, t, 10)
