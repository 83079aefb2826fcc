"""Contrastive attribution (aiayn/contrastive.py, aiayn.calls.attribute(foil_ids=...); Yin and Neubig 2022): the
contrast is log p(chosen) - log p(foil), gradient x input of it is the difference of the two pieces' own
attributions (the gradient is linear), integrated gradients keep completeness, and bad steps or foils are refused."""
from __future__ import annotations

import numpy as np
import pytest

from aiayn import calls
from aiayn.contrastive import alternatives, contrast

TEXT = "I have no time."


@pytest.fixture(scope="module")
def case(tiny_checkpoints):
    from aiayn import Translator

    tr = Translator.load(tiny_checkpoints / "en-de")
    out = tr.translate(TEXT, beam_size=1, return_attention=False)
    return tr, list(out.src_ids), list(out.output_ids)


def test_alternatives_are_the_top_pieces_of_each_step(case):
    tr, src, out = case
    alt = alternatives(tr, src, out, k=4)
    assert alt.ids.shape == alt.probs.shape == (len(out), 4) and alt.output_tokens == tr.pieces(out)
    assert (np.diff(alt.probs, axis=1) <= 0).all()
    assert (alt.ids[:, 0] == out).all()  # greedy output: the chosen piece is each step's most probable
    np.testing.assert_allclose(alt.chosen_probs, alt.probs[:, 0], rtol=1e-6)
    with pytest.raises(ValueError, match="k must be"):
        alternatives(tr, src, out, k=0)


def test_gradient_x_input_of_the_contrast_is_the_difference_of_two_attributions(case):
    tr, src, out = case
    step = min(2, len(out) - 1)
    alt = alternatives(tr, src, out, k=3)
    foil = int(alt.ids[step, 1])
    c = contrast(tr, src, out, step, foil)
    assert c.chosen == tr.pieces([out[step]])[0] and c.foil == tr.pieces([foil])[0]
    assert c.difference == pytest.approx(np.log(c.chosen_prob) - np.log(c.foil_prob), abs=1e-4)
    assert c.foil_prob == pytest.approx(float(alt.probs[step, 1]), rel=1e-5)
    own = calls.attribute(tr.model, src, out, method="grad_x_input")
    other = list(out)
    other[step] = foil
    theirs = calls.attribute(tr.model, src, other, method="grad_x_input")
    np.testing.assert_allclose(c.source, own.source[step] - theirs.source[step], atol=1e-5)
    np.testing.assert_allclose(c.prefix, (own.prefix[step] - theirs.prefix[step])[:step + 1], atol=1e-5)
    assert len(c.prefix_tokens) == step + 1 and c.src_tokens == tr.pieces(src)
    assert np.abs(c.source).sum() > 0


def test_a_piece_contrasted_with_itself_gives_zero_and_integrated_gradients_stay_complete(case):
    tr, src, out = case
    same = calls.attribute(tr.model, src, out, method="grad_x_input", foil_ids=out)
    assert not same.source.any() and not same.prefix.any() and not same.log_prob.any()
    step = len(out) - 1
    foil = int(alternatives(tr, src, out, k=2).ids[step, 1])
    ig = contrast(tr, src, out, step, foil, method="integrated_gradients", steps=64)
    full = calls.attribute(tr.model, src, out[:step + 1], method="integrated_gradients", steps=64,
                           foil_ids=out[:step] + [foil])
    gap = abs(ig.source.sum() + ig.prefix.sum() - (full.log_prob[step] - full.baseline_log_prob[step]))
    assert gap <= 0.05 * abs(full.log_prob[step] - full.baseline_log_prob[step]) + 1e-3


def test_bad_steps_and_foils_are_refused(case):
    tr, src, out = case
    with pytest.raises(ValueError, match="step must be between"):
        contrast(tr, src, out, len(out), 5)
    with pytest.raises(ValueError, match="foil must differ"):
        contrast(tr, src, out, 0, out[0])
    with pytest.raises(ValueError, match="foil_ids must hold"):
        calls.attribute(tr.model, src, out, method="grad_x_input", foil_ids=out[:-1])
    with pytest.raises(ValueError, match="foil_ids must hold"):
        calls.attribute(tr.model, src, out, method="grad_x_input", foil_ids=[tr.cfg.vocab_size] * len(out))


def test_a_typed_foil_is_a_word_initial_piece_then_a_piece_then_a_words_first_piece():
    """On the shipped vocabulary (8,000 pieces): "der" means "▁der", "atte" (the rest of "Matte") the piece itself,
    a word the vocabulary does not hold whole its first piece."""
    from aiayn.contrastive import foil_from_text
    from aiayn.tokenizer import Tokenizer
    from aiayn.translator import CHECKPOINTS_DIR

    tok = Tokenizer.load(CHECKPOINTS_DIR / "en-de" / "spm.model")
    assert tok.piece_to_id("▁der") != tok.unk_id and tok.piece_to_id("atte") != tok.unk_id
    assert foil_from_text(tok, "der") == tok.piece_to_id("▁der")
    assert foil_from_text(tok, "_der") == foil_from_text(tok, "▁der") == tok.piece_to_id("▁der")
    assert tok.piece_to_id("▁atte") == tok.unk_id and foil_from_text(tok, "atte") == tok.piece_to_id("atte")
    assert tok.piece_to_id("▁Matte") == tok.piece_to_id("Matte") == tok.unk_id
    assert foil_from_text(tok, "Matte") == calls.encode_target(tok, "Matte")[0] == tok.piece_to_id("▁M")
    assert foil_from_text(tok, "   ") is None


def test_attributing_chosen_positions_gives_the_full_rows_and_leaves_the_rest_empty(case):
    """positions=[t] computes row t alone (what contrast asks for): equal to that row of the full attribution,
    the other rows 0 with a NaN value; positions outside the target are refused."""
    tr, src, out = case
    t = len(out) // 2
    full = calls.attribute(tr.model, src, out, method="integrated_gradients", steps=16)
    one = calls.attribute(tr.model, src, out, method="integrated_gradients", steps=16, positions=[t])
    np.testing.assert_allclose(one.source[t], full.source[t], atol=1e-6)
    np.testing.assert_allclose(one.prefix[t], full.prefix[t], atol=1e-6)
    assert one.log_prob[t] == pytest.approx(full.log_prob[t], abs=1e-6)
    others = [i for i in range(len(out)) if i != t]
    assert not one.source[others].any() and not one.prefix[others].any() and np.isnan(one.log_prob[others]).all()
    with pytest.raises(ValueError, match="positions must be"):
        calls.attribute(tr.model, src, out, method="grad_x_input", positions=[len(out)])
    with pytest.raises(ValueError, match="positions must be"):
        calls.attribute(tr.model, src, out, method="grad_x_input", positions=[])
