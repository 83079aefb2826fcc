"""Tests for aiayn.model.config: the paper's presets (Table 3), parameter counts, validation, JSON round trip.

Parameter counts are computed here independently from the architecture (Sections 3.1-3.4) and checked
against the paper's Table 3 ("base" 65M, "big" 213M with a 37000-piece shared vocabulary).
"""
from __future__ import annotations

import json

import pytest
import torch

from aiayn import Transformer, TransformerConfig


def expected_parameters(V: int, d: int, d_ff: int, N: int, *, shared: bool = True, learned: bool = False,
                        max_len: int = 0, norm_first: bool = False) -> int:
    """Parameter count from the architecture formula (all linear maps with bias, as nn.MultiheadAttention)."""
    mha = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O (Section 3.2.2)
    ffn = (d * d_ff + d_ff) + (d_ff * d + d)  # Equation 2
    ln = 2 * d  # gain and bias
    encoder = N * (mha + ffn + 2 * ln)
    decoder = N * (2 * mha + ffn + 3 * ln)
    embeddings = V * d if shared else 3 * V * d  # Section 3.4: one matrix shared three ways
    positions = 2 * max_len * d if learned else 0
    final_norms = 2 * ln if norm_first else 0
    return encoder + decoder + embeddings + positions + final_norms


def count_on_meta(cfg: TransformerConfig) -> int:
    """Build the model without allocating memory (meta device) and count its parameters."""
    with torch.device("meta"):
        model = Transformer(cfg)
    return model.num_parameters()


def test_base_preset_matches_table3():
    cfg = TransformerConfig.preset("base", vocab_size=37000)
    assert (cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.d_k, cfg.d_v, cfg.dropout) == (6, 512, 2048, 8, 64, 64, 0.1)
    n = count_on_meta(cfg)
    assert n == expected_parameters(37000, 512, 2048, 6)
    assert 63e6 <= n <= 65e6  # Table 3: 65M


def test_big_preset_matches_table3():
    cfg = TransformerConfig.preset("big", vocab_size=37000)
    assert (cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.d_k, cfg.dropout) == (6, 1024, 4096, 16, 64, 0.3)
    n = count_on_meta(cfg)
    assert n == expected_parameters(37000, 1024, 4096, 6)
    assert 205e6 <= n <= 220e6  # Table 3: 213M


@pytest.mark.parametrize(
    "overrides",
    [
        dict(share_embeddings=False),
        dict(positional="learned", max_len=100),
        dict(norm_first=True),
        dict(share_embeddings=False, positional="learned", norm_first=True, max_len=40),
    ],
)
def test_variant_parameter_counts(overrides):
    cfg = TransformerConfig.preset("tiny", vocab_size=101, **overrides)
    model = Transformer(cfg)
    assert model.num_parameters() == expected_parameters(
        101, cfg.d_model, cfg.d_ff, cfg.n_layers,
        shared=cfg.share_embeddings, learned=cfg.positional == "learned", max_len=cfg.max_len,
        norm_first=cfg.norm_first,
    )


def test_shared_embeddings_are_one_matrix():
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=50))
    hidden = torch.randn(1, 3, model.cfg.d_model)
    torch.testing.assert_close(model.project(hidden), hidden @ model.embedding.weight.T)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(d_model=100, n_heads=8), "divisible"),
        (dict(pad_id=-1), "pad_id"),
        (dict(eos_id=50, vocab_size=50), "eos_id"),
        (dict(bos_id=0, pad_id=0), "different"),
        (dict(positional="rotary"), "positional"),
        (dict(dropout=1.0), "dropout"),
        (dict(d_model=0), "d_model"),
        (dict(vocab_size=2.5), "vocab_size"),
        (dict(layer_norm_eps=0.0), "layer_norm_eps"),
    ],
)
def test_invalid_configs_raise(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        TransformerConfig(**{**dict(vocab_size=64, d_model=64, n_heads=4, d_ff=128, n_layers=1), **kwargs})


def test_unknown_preset_and_field():
    with pytest.raises(ValueError, match="unknown preset"):
        TransformerConfig.preset("huge")
    with pytest.raises(ValueError, match="d_modle"):
        TransformerConfig.preset("tiny", d_modle=32)
    with pytest.raises(ValueError, match="unknown TransformerConfig field"):
        TransformerConfig.from_dict({**TransformerConfig().to_dict(), "heads": 3})
    with pytest.raises(ValueError, match="JSON object"):
        TransformerConfig.from_dict([1, 2])


def test_presets_are_not_mutated_by_overrides():
    TransformerConfig.preset("base", d_model=256, n_heads=4)
    assert TransformerConfig.preset("base").d_model == 512


@pytest.mark.parametrize("name", ["base", "big", "tiny"])
def test_dict_and_json_round_trip(name):
    cfg = TransformerConfig.preset(name, vocab_size=1234, norm_first=True, positional="learned", share_embeddings=False)
    again = TransformerConfig.from_dict(json.loads(cfg.to_json()))
    assert again == cfg
    assert again.to_dict() == cfg.to_dict()
    assert again.preset_name == name
    assert again.replace(d_model=cfg.d_model * 2) != cfg
