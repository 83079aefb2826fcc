"""Gradient attribution (aiayn.analysis.attribution, aiayn.calls.attribute): hand computations on tiny functions,
integrated gradients' completeness on a tiny Transformer, rank agreement against scipy."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from tiny_models import perturbed_tiny_model

from aiayn import calls
from aiayn.analysis import attribution as at


def _linear(weights):
    """f_k(x) = sum_{i,d} W_k[i, d] x[i, d] + 3 for one input; weights (K, n, D)."""
    return lambda xs: torch.einsum("mnd,knd->mk", xs[0], weights) + 3.0


def test_grad_x_input_is_the_hand_computation_on_a_linear_function():
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(2, 3, 4, generator=g, dtype=torch.float64), torch.randn(3, 4, generator=g, dtype=torch.float64)
    res = at.grad_times_input(_linear(w), [x])
    want = np.array([[sum(float(w[k, i, d] * x[i, d]) for d in range(4)) for i in range(3)] for k in range(2)])
    np.testing.assert_allclose(res.scores[0], want, rtol=1e-12)
    np.testing.assert_allclose(res.value, want.sum(1) + 3.0, rtol=1e-12)
    assert np.isnan(res.baseline_value).all()


def test_integrated_gradients_of_a_quadratic_are_exact_with_the_trapezoidal_rule():
    # f(x) = sum x^2 + sum y^3, zero baseline: IG_x = x^2 (the gradient is linear along the path), IG_y = y^3
    # only in the limit; two inputs, one output.
    x, y = torch.tensor([[1.0, -2.0]], dtype=torch.float64), torch.tensor([[0.5], [2.0]], dtype=torch.float64)
    f = lambda xs: ((xs[0] ** 2).sum((1, 2)) + (xs[1] ** 3).sum((1, 2)))[:, None]  # noqa: E731
    res = at.integrated_gradients(f, [x, y], [torch.zeros_like(x), torch.zeros_like(y)], steps=400, chunk=64)
    np.testing.assert_allclose(res.scores[0], [[5.0]], rtol=1e-12)
    np.testing.assert_allclose(res.scores[1], [[0.125, 8.0]], rtol=1e-4)
    assert res.baseline_value[0] == 0.0 and res.value[0] == pytest.approx(13.125)
    assert at.completeness_gap(res)[0] < 1e-4


def test_gauss_legendre_rule_integrates_a_cubic_exactly_with_two_nodes():
    alphas, w = at.path_rule(2, "gauss_legendre")
    assert w.sum() == pytest.approx(1.0) and float((w * alphas ** 3).sum()) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="rule"):
        at.path_rule(4, "simpson")


def test_trapezoid_weights_and_bad_steps():
    np.testing.assert_allclose(at.trapezoid_weights(4), [0.125, 0.25, 0.25, 0.25, 0.125])
    for bad in (0, 2.5, True, -1):
        with pytest.raises(ValueError, match="steps"):
            at.trapezoid_weights(bad)


@pytest.fixture(scope="module")
def model():
    return perturbed_tiny_model(3, vocab_size=40, max_len=16)


@pytest.mark.parametrize("baseline", ["zero", "pad"])
def test_integrated_gradients_completeness_on_a_tiny_transformer(model, baseline):
    src, tgt = [5, 9, 11, 7, 2], [6, 13, 21, 2]
    res = calls.attribute(model, src, tgt, steps=1024, baseline=baseline)
    assert res.source.shape == (4, 5) and res.prefix.shape == (4, 4)
    total = res.source.sum(1) + res.prefix.sum(1)
    diff = res.log_prob - res.baseline_log_prob
    assert np.all(np.abs(diff) > 1e-3)  # a real path, not a trivial one
    np.testing.assert_array_less(np.abs(total - diff), 0.01 * np.abs(diff))
    # the decoder is causal: output t never depends on decoder inputs after t
    assert np.all(res.prefix[np.triu_indices(4, 1)] == 0.0)


def test_attribute_is_the_teacher_forced_pass_at_the_input(model):
    src, tgt = [5, 9, 11, 7, 2], [6, 13, 21, 2]
    res = calls.attribute(model, src, tgt, method="grad_x_input")
    forced = calls.teacher_forced_ids(model, [src], [tgt])
    np.testing.assert_allclose(res.log_prob, forced.target_log_probs(model.cfg.pad_id)[0].numpy(), rtol=1e-5)
    assert res.decoder_input == calls.decoder_input_ids(model.cfg, tgt)
    # grad x input by hand: autograd through the embedding output of source piece 2 for output 1
    table = model.embedding
    emb = table(torch.tensor([src])).detach().requires_grad_(True)
    f = calls._embedding_function(model, calls.batch(model.cfg, [src]), calls.batch(model.cfg, [res.decoder_input]),
                                  calls.batch(model.cfg, [tgt]))
    out = f([emb, table(torch.tensor([res.decoder_input])).detach()])
    (grad,) = torch.autograd.grad(out[0, 1], emb)
    assert res.source[1, 2] == pytest.approx(float((grad[0, 2] * emb[0, 2]).sum().detach()), rel=1e-5)
    assert all(p.grad is None for p in model.parameters())


def test_attribute_rejects_bad_arguments(model):
    with pytest.raises(ValueError, match="method"):
        calls.attribute(model, [5, 2], [6, 2], method="saliency")
    with pytest.raises(ValueError, match="baseline"):
        calls.attribute(model, [5, 2], [6, 2], baseline="mean")
    with pytest.raises(ValueError, match="vocabulary"):
        calls.attribute(model, [500, 2], [6, 2])
    with pytest.raises(ValueError, match="non-empty"):
        calls.attribute(model, [], [6, 2])


def test_source_share_by_hand():
    share = at.source_share(np.array([[1.0, -1.0], [0.0, 0.0], [0.0, 0.0]]), np.array([[2.0], [-3.0], [0.0]]))
    np.testing.assert_allclose(share[:2], [0.5, 0.0])
    assert np.isnan(share[2])
    with pytest.raises(ValueError):
        at.source_share(np.zeros((2, 3)), np.zeros((3, 3)))


def test_rank_agreement_equals_scipy_on_fixed_arrays_with_ties():
    a = np.array([0.3, 0.1, 0.1, 0.9, 0.5, 0.2])
    b = np.array([0.2, 0.05, 0.4, 0.7, 0.7, 0.1])
    rho, tau = at.rank_agreement(a, b)
    assert rho == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert tau == pytest.approx(stats.kendalltau(a, b).statistic, abs=1e-12)
    assert at.rank_agreement(a, a) == pytest.approx((1.0, 1.0))
    assert at.rank_agreement(a, -a) == pytest.approx((-1.0, -1.0))


def test_rank_agreements_of_many_rows_equal_scipy_row_by_row(monkeypatch):
    """The vectorized statistics against scipy's one-row functions: rows with ties (values on a coarse grid),
    constant rows on either side (NaN), lengths 2 to 40, and more rows than one block of pair signs holds."""
    rng = np.random.default_rng(7)
    for n in (2, 3, 7, 40):
        a = rng.integers(0, 4, size=(60, n)).astype(float)  # many ties
        b = rng.normal(size=(60, n)).round(1)
        a[5], b[9] = 2.0, -1.0  # constant rows
        got = at.rank_agreements(a, b)
        monkeypatch.setattr(at, "_PAIR_BLOCK", 3 * n * n)  # blocks of 3 rows, the last one short
        np.testing.assert_array_equal(at.rank_agreements(a, b), got)
        monkeypatch.undo()
        for r in range(60):
            if np.ptp(a[r]) == 0 or np.ptp(b[r]) == 0:
                assert np.isnan(got[r]).all()
                continue
            assert got[r, 0] == pytest.approx(stats.spearmanr(a[r], b[r]).statistic, abs=1e-12), (n, r)
            assert got[r, 1] == pytest.approx(stats.kendalltau(a[r], b[r]).statistic, abs=1e-12), (n, r)
    assert np.isnan(at.rank_agreements(np.zeros((3, 1)), np.ones((3, 1)))).all()
    with pytest.raises(ValueError):
        at.rank_agreements(np.zeros((2, 3)), np.zeros((3, 3)))
    with pytest.raises(ValueError):
        at.rank_agreements(np.array([[0.0, np.inf]]), np.zeros((1, 2)))


def test_rank_agreement_is_nan_where_undefined():
    for a, b in [([1.0, 1.0, 1.0], [0.1, 0.2, 0.3]), ([0.1, 0.2, 0.3], [2.0, 2.0, 2.0]), ([1.0], [2.0])]:
        assert all(np.isnan(at.rank_agreement(np.array(a), np.array(b))))
    with pytest.raises(ValueError):
        at.rank_agreement(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError):
        at.rank_agreement(np.array([0.0, np.nan]), np.zeros(2))


def test_row_agreement_shapes_and_values():
    rng = np.random.default_rng(0)
    attr, maps = rng.random((3, 5)), rng.random((2, 4, 3, 5))
    maps[1, 2, 0] = 0.2  # a constant row
    out = at.row_agreement(attr, maps)
    assert out.shape == (2, 4, 3, 2)
    assert out[0, 1, 2, 0] == pytest.approx(stats.spearmanr(attr[2], maps[0, 1, 2]).statistic)
    assert out[1, 3, 1, 1] == pytest.approx(stats.kendalltau(attr[1], maps[1, 3, 1]).statistic)
    assert np.isnan(out[1, 2, 0]).all() and not np.isnan(out[1, 2, 1]).any()
    with pytest.raises(ValueError):
        at.row_agreement(attr, maps[..., :4])


def test_agreement_readings_and_their_mean():
    rng = np.random.default_rng(1)
    L, H, T, S = 2, 3, 4, 5
    sentences = []
    for _ in range(2):
        attr, cross, normed, rolled = rng.random((T, S)), rng.random((L, H, T, S)), rng.random((L, H, T, S)), rng.random((T, S))
        sentences.append((attr, cross, rolled, normed))
    per = [at.agreement_readings(*s) for s in sentences]
    assert per[0]["heads"].shape == (L, H, T, 2) and per[0]["head_mean"].shape == (L, T, 2)
    assert per[0]["rollout"].shape == (T, 2)
    attr, cross = sentences[1][0], sentences[1][1]
    assert per[1]["head_mean"][1, 2, 1] == pytest.approx(stats.kendalltau(attr[2], cross[1].mean(0)[2]).statistic)
    per[0]["rollout"][0] = np.nan  # an undefined row is left out of the mean
    mean = at.mean_agreement(per)
    want = np.mean([per[0]["rollout"][t, 0] for t in range(1, T)] + [per[1]["rollout"][t, 0] for t in range(T)])
    assert mean["rollout"]["spearman"] == pytest.approx(want) and mean["rollout"]["rows"] == 2 * T - 1
    assert mean["heads"]["kendall"].shape == (L, H)
    assert mean["heads"]["kendall"][1, 0] == pytest.approx(np.mean([p["heads"][1, 0, :, 1] for p in per]))
    with pytest.raises(ValueError):
        at.mean_agreement([])


def test_sentence_agreement_on_a_tiny_model(model):
    from aiayn.analysis.flow import rollout
    from aiayn.attribution_eval import sentence_agreement

    src, tgt = [5, 9, 11, 7, 2], [6, 13, 21, 2]
    one = sentence_agreement(model, src, tgt, method="grad_x_input")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    assert one["cross"].shape == (L, H, 4, 5) and one["agreement"]["heads"].shape == (L, H, 4, 2)
    imp = np.abs(one["attribution"].source)
    l, h, t = L - 1, H - 1, 2
    assert one["agreement"]["heads"][l, h, t, 0] == pytest.approx(stats.spearmanr(imp[t], one["cross"][l, h, t]).statistic)
    forced = calls.teacher_forced_ids(model, [src], [tgt], return_attention=True)
    np.testing.assert_allclose(one["rollout"], rollout(forced.maps, "cross")[-1, 0].numpy())
    assert np.all((one["share"] >= 0) & (one["share"] <= 1))


def test_attribute_with_separate_source_and_target_tables():
    model = perturbed_tiny_model(5, vocab_size=40, max_len=16, share_embeddings=False)
    src, tgt = [5, 9, 11, 2], [6, 13, 2]
    res = calls.attribute(model, src, tgt, method="grad_x_input")
    forced = calls.teacher_forced_ids(model, [src], [tgt])
    np.testing.assert_allclose(res.log_prob, forced.target_log_probs(model.cfg.pad_id)[0].numpy(), rtol=1e-5)
    emb = model.src_embedding(torch.tensor([src])).detach().requires_grad_(True)
    f = calls._embedding_function(model, calls.batch(model.cfg, [src]), calls.batch(model.cfg, [res.decoder_input]),
                                  calls.batch(model.cfg, [tgt]))
    out = f([emb, model.tgt_embedding(torch.tensor([res.decoder_input])).detach()])
    (grad,) = torch.autograd.grad(out[0, 2], emb)
    np.testing.assert_allclose(res.source[2], (grad[0] * emb[0]).sum(-1).detach().numpy(), rtol=1e-5, atol=1e-8)
