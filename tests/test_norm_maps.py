"""Norm-based attention of every kind (aiayn.calls.norm_based_maps, Kobayashi et al. 2020) against a hand
computation from the tiny model's own weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import perturbed_tiny_model

from aiayn import calls
from aiayn.analysis.norms import norm_based


def _by_hand(att, x, alpha, h):
    """alpha (Q, K) * ||(x W_V + b_V)[:, head h] W_O^h|| (K,) computed with torch from the module."""
    d_k = att.d_k
    v = x @ att.w_v.weight.T + att.w_v.bias
    f = v[:, h * d_k:(h + 1) * d_k] @ att.w_o.weight.T[h * d_k:(h + 1) * d_k, :]
    return (alpha * f.norm(dim=-1)[None, :]).double().numpy()


@pytest.mark.parametrize("norm_first", [False, True])
def test_norm_based_maps_equal_a_hand_computation(norm_first):
    model = perturbed_tiny_model(4, vocab_size=40, max_len=16, norm_first=norm_first)
    cfg = model.cfg
    src = calls.batch(cfg, [[5, 9, 11, 7, 2], [8, 3, 2]])
    tgt = calls.batch(cfg, [[6, 13, 21, 2], [17, 2]])
    got = calls.norm_based_maps(model, src, tgt)
    maps = calls.teacher_forced(model, src, tgt, return_attention=True).maps
    dec = calls.shift_right(cfg, tgt)
    L, H = cfg.n_layers, cfg.n_heads
    assert got["encoder"].shape == (L, 2, H, 5, 5) and got["cross"].shape == (L, 2, H, 4, 5)
    with torch.no_grad():
        x_src, x_dec = model.embed(src, "src"), model.embed(dec, "tgt")
        enc0, dec0 = model.encoder_layers[0], model.decoder_layers[0]
        if norm_first:  # pre-LN: the sub-layer reads LayerNorm(x)
            x_src, x_dec = enc0.norm1(x_src), dec0.norm1(x_dec)
        memory = model.encode(src).memory
        for b, h in [(0, 0), (1, H - 1)]:
            np.testing.assert_allclose(got["encoder"][0, b, h], _by_hand(enc0.self_attn, x_src[b], maps.encoder[0, b, h], h),
                                       rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(got["decoder"][0, b, h], _by_hand(dec0.self_attn, x_dec[b], maps.decoder[0, b, h], h),
                                       rtol=1e-4, atol=1e-6)
            for layer in range(L):
                att = model.decoder_layers[layer].cross_attn
                np.testing.assert_allclose(got["cross"][layer, b, h], _by_hand(att, memory[b], maps.cross[layer, b, h], h),
                                           rtol=1e-4, atol=1e-6)
    # padded keys carry no weight, so no norm-weighted attention either
    assert np.all(got["encoder"][:, 1, :, :, 3:] == 0) and np.all(got["cross"][:, 1, :, :, 3:] == 0)


def test_norm_based_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="want weights"):
        norm_based(np.zeros((2, 1, 2, 3, 4)), np.zeros((2, 1, 5, 8)), [None, None], 2)
