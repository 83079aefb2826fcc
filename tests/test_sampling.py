"""Ancestral sampling (aiayn.sampling, Translator.sample): the filtered distribution against a brute-force
computation, draws against their probabilities, reproducibility by seed, top_k=1 as greedy, the sample's
log-probability and maps against a teacher-forced pass, and the errors for bad options."""
from __future__ import annotations

import math

import pytest
import torch
from tiny_models import perturbed_tiny_model

from aiayn import Translator, calls
from aiayn.sampling import filtered_log_probs, sampler
from aiayn.tokenizer import Tokenizer

TEXTS = ["I have no time.", "The house is small.", "Where is the station?"]


@pytest.fixture(scope="module")
def tr(tiny_spm):
    tok = Tokenizer.load(tiny_spm)
    model = perturbed_tiny_model(4, vocab_size=tok.vocab_size, max_len=24, final_logits_bias=True)
    with torch.no_grad():
        model.final_logits_bias[tok.eos_id] = 1.6  # samples end at varied lengths
    return Translator(model, tok)


def _brute_force(logp, temperature, top_k, top_p):
    """The kept set and distribution of one row, by sorting by hand."""
    p = [math.exp(x / temperature) for x in logp]
    z = sum(p)
    p = [x / z for x in p]
    order = sorted(range(len(p)), key=lambda i: -p[i])
    if top_k:
        order = order[:top_k]
    kept, mass = [], 0.0
    for i in order:
        kept.append(i)
        mass += p[i]
        if mass >= top_p:
            break
    z = sum(p[i] for i in kept)
    return {i: p[i] / z for i in kept}


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.5, 0, 1.0), (2.0, 5, 1.0), (1.0, 0, 0.6),
                                                       (0.7, 6, 0.8), (1.0, 1, 1.0), (1.3, 0, 0.05)])
def test_filtered_distribution_equals_brute_force(temperature, top_k, top_p):
    g = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(3, 12, generator=g, dtype=torch.float64) * 2, -1)
    out = filtered_log_probs(logp, temperature=temperature, top_k=top_k, top_p=top_p).exp()
    for row, got in zip(logp.tolist(), out):
        want = _brute_force(row, temperature, top_k, top_p)
        assert {i for i in range(12) if got[i] > 0} == set(want)
        for i, p in want.items():
            assert float(got[i]) == pytest.approx(p, abs=1e-6)


def test_draws_follow_the_filtered_distribution():
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    pick = sampler(temperature=1.0, top_p=0.9, generator=torch.Generator().manual_seed(1))
    draws = torch.stack([pick(logp) for _ in range(4000)]).flatten()
    freq = torch.bincount(draws, minlength=4).double() / len(draws)
    want = torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95  # the 0.05 piece is outside the 0.9 nucleus
    assert torch.allclose(freq, want.double(), atol=0.03)
    assert freq[3] == 0


def test_same_seed_same_output_other_seeds_differ(tr):
    for text in TEXTS:
        a = tr.sample(text, seed=7)
        assert (a.output_ids, a.log_prob) == (tr.sample(text, seed=7).output_ids, tr.sample(text, seed=7).log_prob)
    outputs = {tuple(tr.sample(TEXTS[0], seed=s).output_ids) for s in range(6)}
    assert len(outputs) > 1


@pytest.mark.parametrize("temperature", [1.0, 0.3, 3.0])
def test_top_k_one_is_greedy(tr, temperature):
    for text in TEXTS:
        greedy = tr.translate(text, beam_size=1)
        sampled = tr.sample(text, temperature=temperature, top_k=1, seed=3)
        assert sampled.output_ids == greedy.output_ids
        assert sampled.score == pytest.approx(greedy.score, abs=1e-4)  # beam search sums in float32


def test_tiny_nucleus_is_greedy(tr):
    assert tr.sample(TEXTS[1], top_p=1e-6, seed=5).output_ids == tr.translate(TEXTS[1], beam_size=1).output_ids


def test_sample_log_prob_and_maps_are_teacher_forced(tr):
    out = tr.sample(TEXTS[2], temperature=1.5, seed=2)
    forced = calls.teacher_forced_ids(tr.model, [out.src_ids], [out.output_ids], return_attention=True)
    assert out.log_prob == pytest.approx(float(forced.target_log_probs(tr.cfg.pad_id).double().sum()), abs=1e-4)
    for kind in ("encoder", "decoder", "cross"):
        torch.testing.assert_close(out.attention.get(kind), forced.maps.get(kind), atol=1e-5, rtol=0)
    assert out.attention.meta["sampling"] == {"temperature": 1.5, "top_k": 0, "top_p": 1.0, "seed": 2}
    assert out.nbest == [(out.text, out.score)]


@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=0), "temperature"), (dict(temperature=-1.0), "temperature"),
    (dict(temperature=float("nan")), "temperature"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(top_p=-0.2), "top_p"), (dict(top_k=-1), "top_k"), (dict(top_k=2.5), "top_k"), (dict(top_k=True), "top_k"),
    (dict(seed=-3), "seed"), (dict(max_len=0), "max_len"),
])
def test_bad_options_are_clear_errors(tr, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tr.sample(TEXTS[0], **kwargs)
