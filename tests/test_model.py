"""Tests for aiayn.model: masking (padding and look-ahead, Section 3.2.3), fast vs capture path, variants.

Every check compares the model with itself under a change that must not matter (padding, future tokens,
the attention path), or with a hand computation.
"""
from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from aiayn import Transformer
from aiayn.decoding import beam_search, greedy_decode
from aiayn.model.positional import sinusoidal_encoding
from aiayn.model.transformer import causal_mask
from tiny_models import perturbed_tiny_model

V = 40

#: the tiny preset, seeded and perturbed (tests/tiny_models.py), with this file's vocabulary and length
tiny = partial(perturbed_tiny_model, vocab_size=V, max_len=96)


def _pad(seqs, pad=0):
    width = max(len(s) for s in seqs)
    return torch.tensor([s + [pad] * (width - len(s)) for s in seqs])


SRC = [[5, 9, 12, 7, 3], [11, 3], [20, 21, 22, 23, 24, 25, 26, 3]]
TGT = [[2, 8, 6, 30], [2, 13], [2, 17, 17, 17, 5, 4]]
VARIANTS = [dict(), dict(norm_first=True), dict(positional="learned"), dict(share_embeddings=False)]


@pytest.mark.parametrize("overrides", VARIANTS, ids=["post-LN", "pre-LN", "learned-PE", "untied"])
def test_padded_batch_equals_each_sentence_alone(overrides):
    model = tiny(**overrides)
    with torch.no_grad():
        batch_logits, maps = model(_pad(SRC), _pad(TGT), return_attention=True)
        for b, (s, t) in enumerate(zip(SRC, TGT)):
            alone, alone_maps = model(torch.tensor([s]), torch.tensor([t]), return_attention=True)
            torch.testing.assert_close(batch_logits[b, : len(t)], alone[0], atol=1e-5, rtol=1e-5)
            sel = maps.select(b)
            for kind in ("encoder", "decoder", "cross"):
                torch.testing.assert_close(sel.get(kind), alone_maps.get(kind), atol=1e-6, rtol=1e-5)
    assert maps.src_lengths == [len(s) for s in SRC] and maps.tgt_lengths == [len(t) for t in TGT]


@pytest.mark.parametrize("overrides", VARIANTS[:3], ids=["post-LN", "pre-LN", "learned-PE"])
def test_later_target_tokens_never_change_earlier_logits(overrides):
    model = tiny(seed=1, **overrides)
    src = torch.tensor([SRC[0]])
    tgt = torch.tensor([[2, 8, 6, 30, 11, 12]])
    with torch.no_grad():
        base = model(src, tgt)
        for t in range(1, 6):
            changed = tgt.clone()
            changed[0, t:] = torch.tensor([33, 34, 35, 36, 37][: 6 - t])
            out = model(src, changed)
            torch.testing.assert_close(out[0, :t], base[0, :t], atol=1e-6, rtol=1e-5)
            assert (out[0, t:] - base[0, t:]).abs().max() > 1e-4  # the change is visible where it may be


def test_fast_path_equals_capture_path_and_maps_are_distributions():
    model = tiny(seed=2)
    src, tgt = _pad(SRC), _pad(TGT)
    with torch.no_grad():
        fast = model(src, tgt)
        cap, maps = model(src, tgt, return_scores=True)
    torch.testing.assert_close(fast, cap, atol=1e-5, rtol=1e-5)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    assert maps.encoder.shape == (L, 3, H, 8, 8)
    assert maps.decoder.shape == (L, 3, H, 6, 6)
    assert maps.cross.shape == (L, 3, H, 6, 8)
    assert maps.encoder_scores.shape == maps.encoder.shape
    for b, (s, t) in enumerate(zip(SRC, TGT)):
        S, T = len(s), len(t)
        torch.testing.assert_close(maps.encoder[:, b, :, :S, :S].sum(-1), torch.ones(L, H, S), atol=1e-5, rtol=0)
        torch.testing.assert_close(maps.cross[:, b, :, :T, :S].sum(-1), torch.ones(L, H, T), atol=1e-5, rtol=0)
        torch.testing.assert_close(maps.decoder[:, b, :, :T, :T].sum(-1), torch.ones(L, H, T), atol=1e-5, rtol=0)
        assert torch.all(maps.encoder[:, b, :, :, S:] == 0) and torch.all(maps.cross[:, b, :, :, S:] == 0)
        assert torch.all(maps.decoder[:, b, :, :T, :T].triu(1) == 0)
        # weights are the softmax of the returned scores over the allowed keys
        torch.testing.assert_close(
            maps.cross[:, b, :, :T, :S], torch.softmax(maps.cross_scores[:, b, :, :T, :S], -1), atol=1e-5, rtol=1e-5
        )


def test_decode_self_attn_mask_causal_is_the_default_and_all_true_sees_the_future():
    """``Transformer.decode(self_attn_mask=...)``: the explicit causal mask (2-d or per sentence) is the default
    bit for bit, on both paths; an all-True mask lets earlier positions see a later token (Section 3.2.3)."""
    model = tiny(seed=5, norm_first=True, positional="learned")
    src, tgt = _pad(SRC), _pad(TGT)
    T = tgt.size(1)
    causal = causal_mask(T)
    with torch.no_grad():
        enc = model.encode(src, need_weights=True, need_scores=True)
        for need_weights, need_scores in ((False, False), (True, False), (True, True)):
            ref = model.decode(tgt, enc, need_weights=need_weights, need_scores=need_scores)
            for mask in (causal, causal.expand(len(TGT), T, T)):
                got = model.decode(tgt, enc, need_weights=need_weights, need_scores=need_scores, self_attn_mask=mask)
                assert torch.equal(got.logits, ref.logits)
                for name in ("self_weights", "cross_weights", "self_scores", "cross_scores"):
                    a, b = getattr(got, name), getattr(ref, name)
                    assert (a is None and b is None) or torch.equal(a, b), name
        # all-True: a change of the last token reaches every earlier position (it stays blind to pads)
        everything = torch.ones(T, T, dtype=torch.bool)
        changed = tgt.clone()
        changed[0, 3] = 33  # last real token of sentence 0 (length 4)
        a = model.decode(tgt, enc, self_attn_mask=everything, need_weights=True)
        b = model.decode(changed, enc, self_attn_mask=everything).logits
        c = model.decode(tgt, enc).logits
        d = model.decode(changed, enc).logits
    torch.testing.assert_close(c[0, :3], d[0, :3], atol=0, rtol=0)  # causal: blind to the future
    assert (a.logits[0, :3] - b[0, :3]).abs().amax(-1).min() > 1e-4  # all-True: every earlier row sees it
    assert float(a.self_weights[:, 0].triu(1).sum()) > 0
    assert torch.all(a.self_weights[:, 1, :, :, 2:] == 0)  # sentence 1 has 2 tokens: its pads stay masked
    with pytest.raises(ValueError, match="bool"):
        model.decode(tgt, enc, self_attn_mask=everything.float())
    with pytest.raises(ValueError, match="shape"):
        model.decode(tgt, enc, self_attn_mask=everything[:, :-1])
    with pytest.raises(ValueError, match="shape"):
        model.decode(tgt, enc, self_attn_mask=everything.expand(2, T, T))


def test_decode_self_attn_mask_with_cache():
    """With a cache the mask covers every key so far, ``(T, cache.length + T)``: the causal one is the default."""
    model = tiny(seed=6)
    src, tgt = torch.tensor([SRC[0]]), torch.tensor([TGT[0]])
    with torch.no_grad():
        enc = model.encode(src)
        ref = model.decode(tgt[:, 2:], enc, cache=model.decode(tgt[:, :2], enc, cache=model.init_cache(enc)).cache)
        first = model.decode(tgt[:, :2], enc, cache=model.init_cache(enc), self_attn_mask=causal_mask(2))
        got = model.decode(tgt[:, 2:], enc, cache=first.cache, self_attn_mask=causal_mask(2, offset=2))
    assert torch.equal(got.logits, ref.logits) and got.cache.length == 4
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        model.decode(tgt[:, 2:], enc, cache=first.cache, self_attn_mask=causal_mask(2))


def test_first_encoder_layer_scores_by_hand():
    """Layer-0 encoder scores from the embedding formula of Sections 3.4/3.5 and Equation 1, by hand."""
    model = tiny(seed=3)
    src = torch.tensor([SRC[0]])
    with torch.no_grad():
        _, maps = model(src, torch.tensor([TGT[0]]), return_scores=True)
        d, h, dk = model.cfg.d_model, model.cfg.n_heads, model.cfg.d_k
        x = model.embedding.weight[src[0]] * math.sqrt(d) + sinusoidal_encoding(len(SRC[0]), d)
        att = model.encoder_layers[0].self_attn
        q = (x @ att.w_q.weight.T + att.w_q.bias).view(-1, h, dk).transpose(0, 1)
        k = (x @ att.w_k.weight.T + att.w_k.bias).view(-1, h, dk).transpose(0, 1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dk)
    torch.testing.assert_close(maps.encoder_scores[0, 0], scores, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("overrides", [dict(norm_first=True), dict(positional="learned"), dict(norm_first=True, positional="learned", share_embeddings=False)],
                         ids=["pre-LN", "learned-PE", "all"])
def test_variants_run_end_to_end(overrides):
    model = tiny(seed=4, **overrides)
    if model.cfg.norm_first:
        assert hasattr(model, "encoder_norm") and hasattr(model, "decoder_norm")
    if model.cfg.positional == "learned":
        assert model.src_positions.weight.requires_grad
    src = _pad(SRC)
    # trainable: one gradient step on a teacher-forced loss changes the loss
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tgt = _pad(TGT)
    loss0 = torch.nn.functional.cross_entropy(model(src, tgt).reshape(-1, V), tgt.roll(-1, 1).reshape(-1), ignore_index=0)
    loss0.backward()
    assert all(p.grad is not None for p in model.parameters())
    opt.step()
    model.eval()
    with torch.no_grad():
        loss1 = torch.nn.functional.cross_entropy(model(src, tgt).reshape(-1, V), tgt.roll(-1, 1).reshape(-1), ignore_index=0)
    assert loss1 < loss0
    # decodes with and without the cache to the same outputs
    g = greedy_decode(model, src, max_len=10)
    g_nc = greedy_decode(model, src, max_len=10, use_cache=False)
    b = beam_search(model, src, beam_size=3, max_len=10)
    assert [h.tokens for h in g] == [h.tokens for h in g_nc]
    assert all(1 <= len(h.tokens) <= 10 for h in g) and len(b) == 3
    # each beam hypothesis' log-probability is the teacher-forced one of its tokens
    with torch.no_grad():
        for i, hyps in enumerate(b):
            toks = hyps[0].tokens
            logits = model(src[i : i + 1, : len(SRC[i])], torch.tensor([[model.cfg.bos_id] + toks[:-1]]))
            lp = torch.log_softmax(logits[0], -1).gather(1, torch.tensor(toks)[:, None]).sum()
            assert abs(float(lp) - hyps[0].log_prob) < 1e-3


def test_bad_inputs_raise_clear_errors():
    model = tiny()
    src, tgt = torch.tensor([[5, 3]]), torch.tensor([[2, 5]])
    with pytest.raises(ValueError, match="shape"):
        model(src[0], tgt)
    with pytest.raises(ValueError, match="integer"):
        model(src.float(), tgt)
    with pytest.raises(ValueError, match="vocabulary"):
        model(torch.tensor([[5, V]]), tgt)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.full((1, 97), 5), tgt)
    with pytest.raises(TypeError):
        Transformer({"d_model": 64})


def test_no_attention_state_is_kept_on_modules():
    model = tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    names_before = {n for n, _ in model.named_buffers()} | set(vars(model))
    with torch.no_grad():
        model(_pad(SRC), _pad(TGT), return_attention=True)
    assert {n for n, _ in model.named_buffers()} | set(vars(model)) == names_before
    for module in model.modules():
        for value in vars(module).values():
            assert not (isinstance(value, torch.Tensor) and value.dim() == 5)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
