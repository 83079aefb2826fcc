"""Dropout with the mask drawn from 16-bit thresholds (aiayn.model.dropout): its distribution, its gradient, the ways
it falls back to ``F.dropout``, and that training sets it from ``TrainConfig.dropout_impl``."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from aiayn.model import Transformer, TransformerConfig
from aiayn.model.dropout import DROPOUT_IMPLS, Dropout, keep_noise, rounded_p, set_dropout_impl


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_each_lane_of_a_word_keeps_one_minus_p(p):
    """Each of the four 16-bit lanes of a random word is a threshold of its own: every lane (and so every element)
    must be kept with probability 1 - p. A draw that missed the top bit of the words (random_() without a range
    draws from [0, 2^63)) keeps every fourth element always (measured: 0.925 instead of 0.9 at p = 0.1)."""
    torch.manual_seed(0)
    n = 4 * 250_000
    noise = keep_noise((n,), p)
    kept = (noise > 0).view(-1, 4).float()
    sigma = math.sqrt(p * (1 - p) / (n // 4))
    for lane in range(4):
        assert abs(kept[:, lane].mean().item() - (1 - p)) < 5 * sigma, lane
    # and no pattern between neighbours: a kept element is followed by a kept one with probability 1 - p
    flat = (noise > 0).float()
    both = (flat[:-1] * flat[1:]).mean().item()
    assert abs(both - (1 - p) ** 2) < 10 * math.sqrt((1 - p) ** 2 * (1 - (1 - p) ** 2) / n)  # pairs overlap: a wider bound


def test_kept_elements_are_scaled_so_the_expectation_is_the_input():
    torch.manual_seed(1)
    noise = keep_noise((1000, 1000), 0.1)
    values = torch.unique(noise)
    assert values.tolist() == [0.0, pytest.approx(1 / (1 - rounded_p(0.1)))]
    assert abs(noise.mean().item() - 1.0) < 5 * math.sqrt(0.1 / 0.9 / noise.numel())
    assert rounded_p(0.1) == 6554 / 65536


def test_forward_and_backward_use_the_same_mask_in_the_input_dtype():
    drop = Dropout(0.25).train()
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(2)
        x = (torch.rand(64, 33, dtype=torch.float32) + 0.5).to(dtype).requires_grad_()  # never 0
        y = drop(x)
        assert y.dtype == dtype
        g = torch.randn(64, 33).to(dtype)
        y.backward(g)
        multiplier = (y != 0).to(dtype) * torch.tensor(1 / (1 - 0.25), dtype=dtype)
        assert torch.equal(y, x.detach() * multiplier)
        assert torch.equal(x.grad, g * multiplier)
        assert 0.6 < (y != 0).float().mean().item() < 0.9


def test_the_same_seed_gives_the_same_mask_and_another_seed_another():
    drop = Dropout(0.1).train()
    x = torch.ones(32, 256)
    torch.manual_seed(3)
    a = drop(x)
    torch.manual_seed(3)
    b = drop(x)
    torch.manual_seed(4)
    c = drop(x)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_eval_mode_and_p_zero_return_the_input_and_draw_nothing():
    x = torch.randn(8, 16)
    torch.manual_seed(5)
    state = torch.get_rng_state()
    assert Dropout(0.1).eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    assert torch.equal(torch.get_rng_state(), state)


def test_bernoulli_is_f_dropout_draw_for_draw():
    """``impl="bernoulli"`` is torch's own dropout: the same seed gives the same output (the old loop of the trainer
    benchmark trains with it)."""
    x = torch.randn(40, 64)
    drop = Dropout(0.3, impl="bernoulli").train()
    torch.manual_seed(6)
    ours = drop(x)
    torch.manual_seed(6)
    assert torch.equal(ours, F.dropout(x, 0.3, training=True))


def test_bad_arguments_are_refused_with_what_is_allowed():
    for p in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            Dropout(p)
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            keep_noise((3,), p)
    with pytest.raises(ValueError, match="words"):
        Dropout(0.1, impl="fast")
    with pytest.raises(ValueError, match="bernoulli"):
        set_dropout_impl(torch.nn.Linear(2, 2), "mersenne")


def test_the_model_uses_it_everywhere_and_set_dropout_impl_reaches_every_one():
    """Embeddings (Section 3.4) and each sub-layer output (Section 5.4) of both stacks: 2 + 2N + 3N modules."""
    cfg = TransformerConfig.preset("tiny", vocab_size=50)
    model = Transformer(cfg)
    assert not any(type(m) is torch.nn.Dropout for m in model.modules())
    drops = [m for m in model.modules() if isinstance(m, Dropout)]
    assert drops and all(m.impl == "words" for m in drops)
    assert set_dropout_impl(model, "bernoulli") == len(drops)
    assert all(m.impl == "bernoulli" for m in drops)
    # no parameters or buffers: checkpoints written before this module load unchanged
    assert not any(True for m in drops for _ in m.state_dict())


def test_training_sets_the_models_dropout_from_the_train_config(tmp_path):
    from aiayn.training.loop import _build_model
    from aiayn.training.recipe import TrainConfig

    class _Tok:
        vocab_size = 60

    for impl in DROPOUT_IMPLS:
        tc = TrainConfig(str(tmp_path), str(tmp_path / "run"), preset="tiny", dropout_impl=impl)
        _, model = _build_model(tc, _Tok(), torch.device("cpu"))
        assert {m.impl for m in model.modules() if isinstance(m, Dropout)} == {impl}


def test_the_cli_refuses_an_unknown_dropout_impl(tmp_path, capsys):
    from aiayn.training.cli import cli_main

    with pytest.raises(SystemExit) as e:
        cli_main(["--data", str(tmp_path), "--run", str(tmp_path / "r"), "--dropout-impl", "fast"])
    assert e.value.code == 2
    assert "--dropout-impl must be one of words, bernoulli, got 'fast'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_train_refuses_an_unknown_dropout_impl_before_it_writes_anything(tiny_data, tmp_path):
    from aiayn.training.loop import train
    from aiayn.training.recipe import TrainConfig

    run = tmp_path / "run"
    tc = TrainConfig(str(tiny_data), str(run), preset="tiny", max_tokens=256, max_steps=1, dropout_impl="fast")
    with pytest.raises(ValueError, match="dropout_impl must be one of words, bernoulli, got 'fast'"):
        train(tc, log=lambda m: None)
    assert not run.exists() or not any(run.iterdir())
