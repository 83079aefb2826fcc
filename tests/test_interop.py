"""Parity with PyTorch's own ``torch.nn.Transformer`` given copied weights (aiayn.interop).

Outputs must agree to 1e-5 on unpadded positions for post-LN (the paper), pre-LN, learned positions and
untied embeddings; every per-head attention map must equal what ``nn.MultiheadAttention`` returns
(``need_weights=True, average_attn_weights=False``) when called on the very inputs PyTorch's layers fed it
(captured with forward pre-hooks), for encoder self-attention, causal decoder self-attention and cross
attention. PyTorch's MHA fast path is disabled for exactness and restored afterwards.
"""
from __future__ import annotations

from functools import partial

import pytest
import torch

from aiayn.interop import to_torch_transformer
from tiny_models import perturbed_tiny_model

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")

#: the tiny preset, seeded and perturbed harder (0.1: LayerNorm gains and biases far from 1 and 0), eps 1e-6
tiny = partial(perturbed_tiny_model, noise=0.1, layer_norm_eps=1e-6)

VARIANTS = {
    "post-LN": dict(),
    "pre-LN": dict(norm_first=True),
    "learned-PE": dict(positional="learned"),
    "untied": dict(share_embeddings=False),
}


@pytest.fixture(autouse=True)
def no_mha_fastpath():
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(before)
    assert torch.backends.mha.get_fastpath_enabled() == before


def _batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (3, 9), generator=g)
    tgt = torch.randint(4, 40, (3, 7), generator=g)
    src_len, tgt_len = [9, 5, 2], [7, 3, 6]
    for b in range(3):
        src[b, src_len[b]:] = 0
        tgt[b, tgt_len[b]:] = 0
    tgt[:, 0] = 2
    return src, tgt, src_len, tgt_len


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_match_torch_nn_transformer(variant):
    model = tiny(**VARIANTS[variant])
    ref = to_torch_transformer(model).eval()
    if model.cfg.norm_first:
        assert ref.transformer.encoder.norm is not None and ref.transformer.decoder.norm is not None
    else:  # the paper's post-LN has no final LayerNorm
        assert ref.transformer.encoder.norm is None and ref.transformer.decoder.norm is None
    assert ref.transformer.encoder.layers[0].norm1.eps == model.cfg.layer_norm_eps == 1e-6
    src, tgt, _, tgt_len = _batch()
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = ref(src, tgt)
    assert ours.shape == theirs.shape == (3, 7, 40)
    for b in range(3):
        torch.testing.assert_close(ours[b, : tgt_len[b]], theirs[b, : tgt_len[b]], atol=1e-5, rtol=1e-5)
    # and the comparison is sharp: another model's weights do not pass
    other = to_torch_transformer(tiny(seed=5, **VARIANTS[variant])).eval()
    with torch.no_grad():
        assert (other(src, tgt)[0, :7] - ours[0, :7]).abs().max() > 1e-2


def _capture_mha_inputs(ref):
    """Forward pre-hooks on every nn.MultiheadAttention of ``ref``: records (args, kwargs) of each call."""
    calls: dict[str, list] = {"encoder": [], "decoder": [], "cross": []}
    handles = []
    for layer in ref.transformer.encoder.layers:
        handles.append(layer.self_attn.register_forward_pre_hook(lambda m, a, kw: calls["encoder"].append((m, a, kw)), with_kwargs=True))
    for layer in ref.transformer.decoder.layers:
        handles.append(layer.self_attn.register_forward_pre_hook(lambda m, a, kw: calls["decoder"].append((m, a, kw)), with_kwargs=True))
        handles.append(layer.multihead_attn.register_forward_pre_hook(lambda m, a, kw: calls["cross"].append((m, a, kw)), with_kwargs=True))
    return calls, handles


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_per_head_maps_match_torch_multihead_attention(variant):
    model = tiny(seed=3, **VARIANTS[variant])
    ref = to_torch_transformer(model).eval()
    src, tgt, src_len, tgt_len = _batch(seed=4)
    calls, handles = _capture_mha_inputs(ref)
    try:
        with torch.no_grad():
            ref(src, tgt)
    finally:
        for h in handles:
            h.remove()
    with torch.no_grad():
        _, maps = model(src, tgt, return_attention=True)
        L = model.cfg.n_layers
        assert all(len(calls[k]) == L for k in calls)
        for kind in ("encoder", "decoder", "cross"):
            ours = maps.get(kind)
            for layer, (mha, args, kwargs) in enumerate(calls[kind]):
                kw = dict(kwargs)
                kw.update(need_weights=True, average_attn_weights=False)
                _, theirs = mha(*args, **kw)  # (B, H, Tq, Tk)
                assert theirs.shape == ours[layer].shape
                for b in range(3):
                    q_len = src_len[b] if kind == "encoder" else tgt_len[b]
                    k_len = tgt_len[b] if kind == "decoder" else src_len[b]
                    torch.testing.assert_close(ours[layer, b, :, :q_len], theirs[b, :, :q_len], atol=1e-5, rtol=1e-5)
                    # padded keys get no weight in either
                    assert torch.all(ours[layer, b, :, :q_len, k_len:] == 0)
                    if kind == "decoder":
                        assert torch.all(ours[layer, b, :, :q_len].triu(1) == 0)
