"""Tests for aiayn.decoding: greedy and beam search (Section 6.1), key/value cache, stitched attention.

A tiny model is trained for a few dozen steps on a reversal task (module fixture, a few seconds) so that
its outputs end with EOS at varied lengths, some run to the maximum length, and beam search disagrees
with greedy decoding on some sentences: the regime where decoding bugs show. Scores and attention are
checked against teacher-forced forward passes, which share no code with the decoding loop.
"""
from __future__ import annotations


import pytest
import torch

from aiayn import Transformer, TransformerConfig
from aiayn.decoding import beam_search, greedy_decode, length_penalty

V = 24
PAD, BOS, EOS = 0, 2, 3


def _pad(seqs):
    width = max(len(s) for s in seqs)
    return torch.tensor([s + [PAD] * (width - len(s)) for s in seqs])


def _reversal_batch(g, n):
    src, tgt = [], []
    for _ in range(n):
        length = int(torch.randint(3, 9, (1,), generator=g))
        s = torch.randint(4, V, (length,), generator=g).tolist()
        src.append(s + [EOS])
        tgt.append([BOS] + s[::-1] + [EOS])
    return _pad(src), _pad(tgt)


@pytest.fixture(scope="module")
def model():
    cfg = TransformerConfig.preset("tiny", vocab_size=V, max_len=128, share_embeddings=False)
    torch.manual_seed(0)
    m = Transformer(cfg)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(60):  # deliberately under-trained: varied, imperfect outputs
        src, tgt = _reversal_batch(g, 32)
        logits = m(src, tgt[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt[:, 1:].reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval()


@pytest.fixture(scope="module")
def src():
    return _reversal_batch(torch.Generator().manual_seed(99), 8)[0]


def _unpadded(src, b):
    row = src[b]
    return row[row != PAD][None]


def _teacher_forced(model, src_b, tokens, **kw):
    with torch.no_grad():
        return model(src_b, torch.tensor([[BOS] + tokens[:-1]]), **kw)


def _log_prob(model, src_b, tokens):
    logits = _teacher_forced(model, src_b, tokens)
    return float(torch.log_softmax(logits[0].double(), -1).gather(1, torch.tensor(tokens)[:, None]).sum())


def test_length_penalty_formula():
    # Wu et al. (2016): lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert length_penalty(19, 0.5) == pytest.approx(2.0)
    assert length_penalty(13, 1.0) == pytest.approx(3.0)
    assert length_penalty(40, 0.0) == 1.0
    torch.testing.assert_close(length_penalty(torch.tensor([1.0, 7.0]), 0.6), torch.tensor([1.0, 2.0**0.6]))


def test_fixture_model_gives_varied_outputs(model, src):
    """Guard: the other tests are only meaningful if outputs vary in length and beam differs from greedy."""
    greedy = greedy_decode(model, src)
    beam = beam_search(model, src, beam_size=4)
    assert len({len(h.tokens) for h in greedy}) >= 3
    assert any(h.finished for h in greedy)
    assert any(g.tokens != b[0].tokens for g, b in zip(greedy, beam))


def test_beam_size_one_equals_greedy(model, src):
    greedy = greedy_decode(model, src)
    beam = beam_search(model, src, beam_size=1)
    for g, b in zip(greedy, beam):
        assert len(b) == 1
        assert g.tokens == b[0].tokens
        assert g.finished == b[0].finished
        assert g.log_prob == pytest.approx(b[0].log_prob, abs=1e-4)


def test_cache_equals_no_cache(model, src):
    g_cached = greedy_decode(model, src, use_cache=True)
    g_plain = greedy_decode(model, src, use_cache=False)
    assert [h.tokens for h in g_cached] == [h.tokens for h in g_plain]
    b_cached = beam_search(model, src, beam_size=4, n_best=4, use_cache=True)
    b_plain = beam_search(model, src, beam_size=4, n_best=4, use_cache=False)
    for hc, hp in zip(b_cached, b_plain):
        assert [h.tokens for h in hc] == [h.tokens for h in hp]
        for a, b in zip(hc, hp):
            assert a.score == pytest.approx(b.score, abs=1e-4)


def test_scores_are_teacher_forced_log_probs_over_length_penalty(model, src):
    alpha = 0.6
    results = beam_search(model, src, beam_size=4, n_best=4, length_penalty_alpha=alpha)
    for b, hyps in enumerate(results):
        assert len(hyps) == 4
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 4  # four different hypotheses
        for h in hyps:
            assert PAD not in h.tokens and BOS not in h.tokens
            assert (h.tokens[-1] == EOS) == h.finished and EOS not in h.tokens[:-1]
            lp = _log_prob(model, _unpadded(src, b), h.tokens)
            assert h.log_prob == pytest.approx(lp, abs=1e-3)
            assert h.score == pytest.approx(lp / ((5 + len(h.tokens)) / 6) ** alpha, abs=1e-3)
    greedy = greedy_decode(model, src, length_penalty_alpha=alpha)
    for b, h in enumerate(greedy):
        assert h.log_prob == pytest.approx(_log_prob(model, _unpadded(src, b), h.tokens), abs=1e-3)


def test_batch_decode_equals_one_by_one(model, src):
    batch_beam = beam_search(model, src, beam_size=4, n_best=2)
    batch_greedy = greedy_decode(model, src)
    for b in range(src.size(0)):
        alone = _unpadded(src, b)
        one_beam = beam_search(model, alone, beam_size=4, n_best=2)[0]
        assert [h.tokens for h in one_beam] == [h.tokens for h in batch_beam[b]]
        assert [h.score for h in one_beam] == pytest.approx([h.score for h in batch_beam[b]], abs=1e-4)
        assert greedy_decode(model, alone)[0].tokens == batch_greedy[b].tokens


@pytest.mark.parametrize("use_cache", [True, False])
def test_stitched_attention_equals_teacher_forced_maps(model, src, use_cache):
    sub = src[:4]
    beam = beam_search(model, sub, beam_size=4, n_best=2, use_cache=use_cache, return_attention=True)
    greedy = greedy_decode(model, sub, use_cache=use_cache, return_attention=True)
    hyps = [(b, h) for b, hs in enumerate(beam) for h in hs] + list(enumerate(greedy))
    L, H = model.cfg.n_layers, model.cfg.n_heads
    for b, h in hyps:
        src_b = _unpadded(sub, b)
        S, T = src_b.size(1), len(h.tokens)
        _, ref = _teacher_forced(model, src_b, h.tokens, return_attention=True)
        att = h.attention
        assert att.encoder.shape == (L, 1, H, S, S)
        assert att.decoder.shape == (L, 1, H, T, T)
        assert att.cross.shape == (L, 1, H, T, S)
        assert att.src_lengths == [S] and att.tgt_lengths == [T]
        for kind in ("encoder", "decoder", "cross"):
            torch.testing.assert_close(att.get(kind), ref.get(kind), atol=1e-5, rtol=1e-5)


def _constant_output_model(token: int, *, max_len: int = 128) -> Transformer:
    """Post-LN model whose last LayerNorm has zero gain: every position's hidden state is the same
    vector ``beta``, so the same ``token`` is predicted at every step (EOS only if ``token == EOS``)."""
    cfg = TransformerConfig.preset("tiny", vocab_size=V, max_len=max_len, share_embeddings=False)
    torch.manual_seed(3)
    m = Transformer(cfg)
    with torch.no_grad():
        beta = torch.randn(cfg.d_model)
        norm = m.decoder_layers[-1].norm3
        norm.weight.zero_()
        norm.bias.copy_(beta)
        m.generator.weight.copy_(0.01 * torch.randn(V, cfg.d_model))
        m.generator.weight[token] = beta / beta.norm()
    return m.eval()


def test_max_length_is_source_length_plus_50():
    model = _constant_output_model(token=7)
    src = _pad([[5, 6, EOS], [9, 10, 11, 12, 13, 14, 15, EOS], [4, EOS]])
    lengths = [3, 8, 2]
    for hyps in (greedy_decode(model, src), [hs[0] for hs in beam_search(model, src, beam_size=4)]):
        for h, n in zip(hyps, lengths):
            assert len(h.tokens) == n + 50
            assert not h.finished and EOS not in h.tokens
            assert set(h.tokens[:5]) == {7}
    assert len(greedy_decode(model, src, max_len_extra=10)[1].tokens) == 18
    assert [len(h.tokens) for h in greedy_decode(model, src, max_len=5)] == [5, 5, 5]
    assert [len(hs[0].tokens) for hs in beam_search(model, src, beam_size=2, max_len=6)] == [6, 6, 6]
    # never past the model's positions: BOS + outputs <= max_len
    short = _constant_output_model(token=7, max_len=20)
    assert [len(h.tokens) for h in greedy_decode(short, src)] == [19, 19, 19]
    assert [len(hs[0].tokens) for hs in beam_search(short, src, beam_size=3)] == [19, 19, 19]


def test_eos_ends_decoding():
    model = _constant_output_model(token=EOS)
    src = _pad([[5, 6, EOS], [9, 10, 11, EOS]])
    for h in greedy_decode(model, src):
        assert h.tokens == [EOS] and h.finished
    for hs in beam_search(model, src, beam_size=4, n_best=4):
        assert hs[0].tokens == [EOS] and hs[0].finished
        assert [h.score for h in hs] == sorted((h.score for h in hs), reverse=True)


def test_bad_beam_settings_raise(model, src):
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, beam_size=0)
    with pytest.raises(ValueError, match="n_best"):
        beam_search(model, src, beam_size=2, n_best=3)


@pytest.mark.parametrize("V, k", [(58_101, 10), (8_000, 10), (4_096, 3), (300, 5)])
def test_row_topk_equals_torch_topk(V, k):
    """The blocked top-k of the beam step gives torch.topk's values and indices (distinct values: no ties), on rows
    whose best entries sit in one block, across blocks, in the short tail, and next to -inf entries; small
    vocabularies take torch.topk's own path."""
    from aiayn.decoding import row_topk

    g = torch.Generator().manual_seed(V + k)
    x = torch.log_softmax(torch.randn(6, V, generator=g) * 3, dim=-1)
    x[1, 64:64 + k] += 40.0                                  # all k best in one block
    x[2, V - k:] += 40.0                                     # all k best in the tail (or the last block)
    x[3, ::2] = float("-inf")                                # half the row banned
    x[4, torch.randperm(V, generator=g)[:k]] += 40.0         # k best scattered over blocks
    got, want = row_topk(x, k), x.topk(k, dim=-1)
    assert torch.equal(got.values, want.values)
    assert torch.equal(got.indices, want.indices)


def test_row_topk_rows_do_not_depend_on_each_other():
    """A row ranked alone gives what it gives inside a batch (a class's batch equals a lone run)."""
    from aiayn.decoding import row_topk

    x = torch.randn(5, 20_000, generator=torch.Generator().manual_seed(7))
    batch = row_topk(x, 8)
    for i in range(5):
        lone = row_topk(x[i : i + 1], 8)
        assert torch.equal(lone.values[0], batch.values[i]) and torch.equal(lone.indices[0], batch.indices[i])


def test_beam_search_over_sentences_encoded_apart_equals_the_padded_batch(model, src):
    """EncoderOutput.stack of each sentence encoded alone, given to beam_search as ``encoded``, gives the padded
    batch's hypotheses (pads are masked wherever the memory is read), each sentence's stitched encoder maps exactly
    its lone encoding's; a mask that does not match ``src`` or missing maps are refused."""
    from aiayn.model.transformer import EncoderOutput

    with torch.inference_mode():
        alone = [model.encode(_unpadded(src, b), need_weights=True) for b in range(src.size(0))]
        stacked = EncoderOutput.stack(alone)
        assert torch.equal(stacked.src_mask, src != PAD)
        got = beam_search(model, src, beam_size=3, n_best=3, return_attention=True, encoded=stacked)
        want = beam_search(model, src, beam_size=3, n_best=3, return_attention=True)
        for b, (g, w) in enumerate(zip(got, want)):
            assert [h.tokens for h in g] == [h.tokens for h in w]
            assert torch.allclose(torch.tensor([h.score for h in g]), torch.tensor([h.score for h in w]), atol=1e-5)
            assert torch.equal(g[0].attention.encoder[:, 0], alone[b].weights[:, 0])
        with pytest.raises(ValueError, match="not the encoder output of src"):
            beam_search(model, src[:-1], encoded=stacked)
        with pytest.raises(ValueError, match="no encoder maps"):
            beam_search(model, src, return_attention=True, encoded=EncoderOutput(stacked.memory, stacked.src_mask))
    with pytest.raises(ValueError, match="at least one"):
        EncoderOutput.stack([])
