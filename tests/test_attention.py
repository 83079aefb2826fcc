"""Tests for aiayn.model.attention: Equation 1 and multi-head attention (Section 3.2), fast path vs capture path.

References are computed by hand here (explicit loops / softmax) or by ``torch.nn.MultiheadAttention``.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from aiayn.model.attention import MultiHeadAttention, scaled_dot_product_attention


def _qkv(B=2, H=3, T=5, S=7, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, d, generator=g), torch.randn(B, H, S, d, generator=g), torch.randn(B, H, S, d, generator=g))


def _padding_mask(lengths, S):
    """(B, 1, 1, S) bool, True on the first ``lengths[b]`` keys."""
    return (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def test_need_scores_is_qk_over_sqrt_dk_by_hand():
    q, k, v = _qkv()
    res = scaled_dot_product_attention(q, k, v, _padding_mask([7, 4], 7), need_scores=True)
    d_k = q.size(-1)
    by_hand = torch.empty(2, 3, 5, 7)
    for b in range(2):
        for h in range(3):
            for i in range(5):
                for j in range(7):
                    by_hand[b, h, i, j] = sum(float(q[b, h, i, c]) * float(k[b, h, j, c]) for c in range(d_k)) / math.sqrt(d_k)
    torch.testing.assert_close(res.scores, by_hand, atol=1e-5, rtol=1e-5)
    # weights are the softmax of those scores over the unmasked keys only (pre-dropout)
    torch.testing.assert_close(res.weights[0], torch.softmax(by_hand[0], -1), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(res.weights[1, :, :, :4], torch.softmax(by_hand[1, :, :, :4], -1), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(res.output, res.weights @ v, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("masked", ["none", "padding", "causal"])
def test_fast_path_equals_capture_path(masked):
    q, k, v = _qkv(T=6, S=6)
    mask = {"none": None, "padding": _padding_mask([6, 3], 6), "causal": torch.ones(6, 6, dtype=torch.bool).tril()}[masked]
    fast = scaled_dot_product_attention(q, k, v, mask)
    cap = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    assert fast.weights is None and fast.scores is None
    assert cap.weights is not None and cap.scores is None
    torch.testing.assert_close(fast.output, cap.output, atol=1e-6, rtol=1e-5)


def test_rows_sum_to_one_and_padding_keys_get_exactly_zero():
    q, k, v = _qkv()
    lengths = [5, 2]
    w = scaled_dot_product_attention(q, k, v, _padding_mask(lengths, 7), need_weights=True).weights
    for b, n in enumerate(lengths):
        torch.testing.assert_close(w[b, ..., :n].sum(-1), torch.ones(3, 5), atol=1e-6, rtol=0)
        assert torch.all(w[b, ..., n:] == 0.0)
        assert torch.all(w[b, ..., :n] > 0.0)


def test_causal_mask_gives_zeros_above_diagonal():
    q, k, v = _qkv(T=6, S=6)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    w = scaled_dot_product_attention(q, k, v, causal, need_weights=True).weights
    above = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert torch.all(w[..., above] == 0.0)
    assert torch.all(w[..., ~above] > 0.0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 6), atol=1e-6, rtol=0)
    assert torch.all(w[..., 0, 0] == 1.0)  # the first query sees only itself


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_row_is_zero_not_nan(need_weights):
    q, k, v = _qkv(T=4, S=5)
    mask = torch.ones(2, 1, 4, 5, dtype=torch.bool)
    mask[0, :, 2, :] = False  # query 2 of sentence 0 may attend nothing
    mask[1] = False  # sentence 1 attends nothing at all
    res = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    assert not torch.isnan(res.output).any()
    assert torch.all(res.output[0, :, 2] == 0.0)
    assert torch.all(res.output[1] == 0.0)
    full = scaled_dot_product_attention(q, k, v, None, need_weights=True).output
    torch.testing.assert_close(res.output[0, :, [0, 1, 3]], full[0, :, [0, 1, 3]], atol=1e-6, rtol=1e-5)
    if need_weights:
        assert not torch.isnan(res.weights).any()
        assert torch.all(res.weights[0, :, 2] == 0.0) and torch.all(res.weights[1] == 0.0)


def test_mask_must_be_bool():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="bool"):
        scaled_dot_product_attention(q, k, v, torch.zeros(2, 1, 1, 7))


def _copied_torch_mha(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        ref.out_proj.weight.copy_(ours.w_o.weight)
        ref.out_proj.bias.copy_(ours.w_o.bias)
    return ref.eval()


def test_multi_head_attention_matches_torch_per_head():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    with torch.no_grad():
        for p in mha.parameters():
            p.add_(0.1 * torch.randn_like(p))  # non-zero biases so a wrong copy or split shows
    ref = _copied_torch_mha(mha)
    query, memory = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    lengths = torch.tensor([6, 3])
    keep = torch.arange(6)[None] < lengths[:, None]  # (B, S) True = real key
    res, _ = mha(query, memory, keep[:, None, None, :], need_weights=True)
    out, w = ref(query, memory, memory, key_padding_mask=~keep, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(res.weights, w, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(res.output, out, atol=1e-5, rtol=1e-5)
    fast, _ = mha(query, memory, keep[:, None, None, :])
    torch.testing.assert_close(fast.output, out, atol=1e-5, rtol=1e-5)


def test_kv_cache_appends_keys_step_by_step():
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(1, 4, 16)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    full, _ = mha(x, None, causal, need_weights=True)
    cache = mha.project_kv(x[:, :0])
    for t in range(4):
        step, cache = mha(x[:, t : t + 1], None, None, need_weights=True, cache=cache)
        assert cache.k.shape == (1, 2, t + 1, 8)
        torch.testing.assert_close(step.output[:, 0], full.output[:, t], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(step.weights[..., 0, :], full.weights[..., t, : t + 1], atol=1e-6, rtol=1e-5)


def test_fast_path_under_cpu_bf16_autocast_computes_in_float32():
    """Training's CPU autocast hands bf16 q, k, v to the fast path; it computes the attention in float32 (torch's
    bf16 CPU kernel is several times slower, docs/training.md, "Session 18"), written out ("Session 38"), and returns
    bf16: the output is the float32 attention of those bf16 inputs rounded once to bf16 (up to a float32 rounding that
    may tip an element to the neighbouring bf16 value), which attention computed in bf16 is not; the gradients are
    those of the float32 attention."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 8, 30, 32) * 2 for _ in range(3))
    mask = torch.ones(4, 1, 30, 30, dtype=torch.bool).tril()
    qb, kb, vb = (t.bfloat16().requires_grad_() for t in (q, k, v))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = scaled_dot_product_attention(qb, kb, vb, mask).output
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (qb, kb, vb))
    ref = torch.nn.functional.scaled_dot_product_attention(q32, k32, v32, attn_mask=mask)
    assert out.dtype == torch.bfloat16
    rounded = ref.detach().bfloat16()
    ulp = (rounded.float().abs() * 2.0**-7).clamp_min(2.0**-133)
    assert ((out.float() - rounded.float()).abs() <= ulp).all()
    assert (out == rounded).float().mean() > 0.99
    in_bf16 = torch.nn.functional.scaled_dot_product_attention(qb.detach(), kb.detach(), vb.detach(), attn_mask=mask)
    assert (out != in_bf16).float().mean() > 0.05  # the float32 computation is not the bf16 one
    grad = torch.randn(out.shape).bfloat16().float()  # the gradient reaches the bf16 output as bf16
    out.float().backward(grad)
    ref.backward(grad)
    for t, r in ((qb, q32), (kb, k32), (vb, v32)):
        assert t.grad is not None and t.grad.dtype == torch.bfloat16
        torch.testing.assert_close(t.grad.float(), r.grad, rtol=2**-7, atol=1e-3)


def test_fast_path_under_cpu_bf16_autocast_zeroes_a_row_with_no_key_and_its_gradient():
    """A query with every key masked attends to nothing (0), as on the other paths, and sends no NaN backward."""
    q, k, v = (torch.randn(2, 2, 5, 8).bfloat16().requires_grad_() for _ in range(3))
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[1, :, 2] = False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = scaled_dot_product_attention(q, k, v, mask).output
    assert torch.equal(out[1, :, 2], torch.zeros_like(out[1, :, 2])) and out[0].abs().sum() > 0
    out.float().sum().backward()
    assert all(torch.isfinite(t.grad.float()).all() for t in (q, k, v))
