"""Norm-based attention (Kobayashi et al. 2020) against hand computation and the model's own attention output."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from aiayn.analysis import norms
from aiayn.model.attention import MultiHeadAttention


def test_value_norms_hand():
    # d_model 2, 2 heads of d_v 1: head 0 reads v[0], head 1 reads v[1]
    x = np.array([[1.0, 0.0], [0.0, 2.0]])
    w_v = np.array([[2.0, 0.0], [0.0, 1.0]])  # (out, in): v = (2 x0, x1)
    b_v = np.array([0.0, 1.0])
    w_o = np.array([[1.0, 0.0], [3.0, 4.0]])  # (out, in): out = (v0, 3 v0 + 4 v1)
    # key 0: v = (2, 1): head 0 -> 2 * (1, 3), norm 2 sqrt(10); head 1 -> 1 * (0, 4), norm 4
    # key 1: v = (0, 3): head 0 -> 0, norm 0; head 1 -> 3 * (0, 4), norm 12
    got = norms.value_norms(x, w_v, b_v, w_o, 2)
    assert got == pytest.approx(np.array([[2 * np.sqrt(10), 0.0], [4.0, 12.0]]))
    alpha = np.array([[[[0.25, 0.75]], [[0.5, 0.5]]]])  # (L=1, H=2, T=1, S=2)
    weighted = norms.norm_weighted(alpha, got[None])
    assert weighted[0, :, 0] == pytest.approx(np.array([[0.5 * np.sqrt(10), 0.0], [2.0, 6.0]]))


def test_decomposition_gives_the_attention_output():
    """sum_h sum_j alpha_hij f_h(x_j) + b_O is exactly the multi-head attention's output (Kobayashi et al. 2020,
    Eq. 6), so the transformed vectors are the ones the model adds up."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    q, kv = torch.randn(1, 3, 8), torch.randn(1, 5, 8)
    with torch.no_grad():
        out, _ = mha(q, kv, need_weights=True)
    alpha = out.weights[0].numpy()  # (H, T, S)
    f = norms.transformed_values(kv[0].numpy(), mha.w_v.weight.detach().numpy(), mha.w_v.bias.detach().numpy(),
                                 mha.w_o.weight.detach().numpy(), 2)  # (H, S, D)
    rebuilt = np.einsum("hts,hsd->td", alpha, f) + mha.w_o.bias.detach().numpy()
    assert rebuilt == pytest.approx(out.output[0].numpy(), abs=1e-5)


def test_shape_errors():
    with pytest.raises(ValueError, match="divisible"):
        norms.value_norms(np.zeros((2, 3)), np.zeros((3, 3)), np.zeros(3), np.zeros((3, 3)), 2)
    with pytest.raises(ValueError, match="do not match"):
        norms.norm_weighted(np.zeros((2, 3, 4)), np.zeros((2, 5)))
