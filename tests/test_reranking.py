"""Reverse-model reranking (aiayn.reranking) and the teacher-forced scoring it rests on
(aiayn.calls.pair_log_probs, Translator.log_likelihoods), on the tiny random checkpoints; its command-line options."""
from __future__ import annotations

import json
import math

import pytest

from aiayn import reranking
from aiayn.reranking import Reranked, check_weight, rerank, rerank_batch, reverse_direction, reverse_for

SOURCES = ["I have no time.", "The house is small.", "Good morning!"]


@pytest.fixture(scope="module")
def pair(tiny_checkpoints):
    from aiayn import Translator

    return (Translator.load(tiny_checkpoints / "en-de", device="cpu"),
            Translator.load(tiny_checkpoints / "de-en", device="cpu"))


def nbest(tr, text, k=4):
    return tr.translate(text, beam_size=k, n_best=k, return_attention=False).nbest


def test_log_likelihoods_equal_the_teacher_forced_pass(pair):
    fwd, _ = pair
    refs = ["Ich habe keine Zeit.", "Das Haus ist klein und alt.", "Guten Morgen!"]
    got = fwd.log_likelihoods(SOURCES, refs)
    for (lp, n), src, ref in zip(got, SOURCES, refs):
        tr, probs = fwd.force(src, ref)
        assert n == len(tr.output_ids) == probs.shape[0]
        assert lp == pytest.approx(tr.log_prob, abs=1e-4)
        # and the sum of the log-probabilities of the pieces, one by one
        assert lp == pytest.approx(float(sum(math.log(probs[t, i]) for t, i in enumerate(tr.output_ids))), abs=1e-3)
    # batches of one give what one batch of three gives (padding changes nothing but rounding)
    one = fwd.log_likelihoods(SOURCES, refs, batch_size=1)
    assert [n for _, n in one] == [n for _, n in got]
    assert [lp for lp, _ in one] == pytest.approx([lp for lp, _ in got], abs=1e-4)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(sources=["a"], targets=["b", "c"]), "1 sources but 2 targets"),
    (dict(sources=["a", " "], targets=["b", "c"]), "pair 1"),
    (dict(sources=["a"], targets=[""]), "pair 0"),
    (dict(sources=["a"], targets=["b"], batch_size=0), "batch_size"),
    (dict(sources=["a"], targets=["b"], batch_size=True), "batch_size"),
])
def test_log_likelihoods_refuse_bad_input(pair, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        pair[0].log_likelihoods(**kwargs)


def test_rerank_adds_the_weighted_reverse_log_probability_per_source_piece(pair):
    fwd, rev = pair
    for src in SOURCES:
        nb = nbest(fwd, src)
        rows = rerank(src, nb, rev, 0.7)
        assert sorted((r.text, r.beam_rank) for r in rows) == sorted((t, i) for i, (t, _) in enumerate(nb))
        back = dict(zip([t for t, _ in nb], rev.log_likelihoods([t for t, _ in nb], [src] * len(nb))))
        for r in rows:
            lp, n = back[r.text]
            assert r.forward_score == nb[r.beam_rank][1]
            assert (r.reverse_log_prob, r.source_pieces) == (lp, n)
            assert r.score == pytest.approx(r.forward_score + 0.7 * lp / n, abs=1e-9)
            assert len(r.source_tokens) == len(r.reverse_piece_log_probs) == n and r.source_tokens[-1] == "</s>"
            assert sum(r.reverse_piece_log_probs) == pytest.approx(lp, abs=1e-9)
        assert [r.score for r in rows] == sorted((r.score for r in rows), reverse=True)


def test_weight_zero_keeps_the_beams_order_and_a_large_weight_follows_the_reverse_model(pair):
    fwd, rev = pair
    for src in SOURCES:
        nb = nbest(fwd, src)
        kept = rerank(src, nb, rev, 0.0)
        assert [r.text for r in kept] == [t for t, _ in nb]
        assert [r.score for r in kept] == [s for _, s in nb]
    # on these random models the reverse model changes some order: otherwise this test would prove little
    assert any([r.beam_rank for r in rerank(s, nbest(fwd, s), rev, 10.0)] != list(range(4)) for s in SOURCES)


def test_a_batch_reranks_as_each_sentence_alone(pair):
    fwd, rev = pair
    nbs = [nbest(fwd, s) for s in SOURCES]
    together = rerank_batch(SOURCES, nbs, rev, 0.5)
    for src, nb, rows in zip(SOURCES, nbs, together):
        alone = rerank(src, nb, rev, 0.5)
        assert [r.text for r in rows] == [r.text for r in alone]
        assert [r.score for r in rows] == pytest.approx([r.score for r in alone], abs=1e-5)


def test_an_empty_hypothesis_goes_last_unless_the_weight_is_zero(pair):
    _, rev = pair
    nb = [("", -0.1), ("Ich habe keine Zeit.", -2.0)]
    rows = rerank("I have no time.", nb, rev, 0.5)
    assert [r.text for r in rows] == ["Ich habe keine Zeit.", ""]
    assert rows[1].reverse_log_prob == -math.inf and rows[1].score == -math.inf
    assert rows[1].source_pieces == rows[0].source_pieces > 1 and rows[1].source_tokens == rows[0].source_tokens
    assert rows[1].reverse_piece_log_probs == () and len(rows[0].reverse_piece_log_probs) == rows[0].source_pieces
    assert [r.text for r in rerank("I have no time.", nb, rev, 0.0)] == ["", "Ich habe keine Zeit."]
    # every hypothesis empty: still an answer, in the beam's order
    assert [r.beam_rank for r in rerank("I have no time.", [("", -1.0), (" ", -2.0)], rev, 0.5)] == [0, 1]


@pytest.mark.parametrize("weight", [-0.1, float("nan"), float("inf"), 10.5, True, "0.5", None])
def test_bad_weights_are_refused(pair, weight):
    with pytest.raises(ValueError, match="weight"):
        check_weight(weight)
    with pytest.raises(ValueError, match="weight"):
        rerank("I have no time.", [("Ich habe keine Zeit.", -1.0)], pair[1], weight)


def test_bad_lists_are_refused(pair):
    _, rev = pair
    with pytest.raises(ValueError, match="2 sources but 1"):
        rerank_batch(["a", "b"], [[("x", -1.0)]], rev)
    with pytest.raises(ValueError, match="empty"):
        rerank("a", [], rev)
    with pytest.raises(ValueError, match="source 0"):
        rerank("  ", [("x", -1.0)], rev)


def test_reverse_direction():
    assert reverse_direction("en-de") == "de-en"
    for bad in ("en", "en-en", "-de", "en-de-fr", None):
        with pytest.raises(ValueError):
            reverse_direction(bad)


def test_reverse_for_finds_the_opposite_model(pair, tiny_checkpoints, monkeypatch):
    import aiayn.translator as translator

    fwd, _ = pair
    monkeypatch.setattr(translator, "CHECKPOINTS_DIR", tiny_checkpoints)
    rev = reverse_for(fwd, "en-de")
    assert rev.meta["direction"] == "de-en" and rev.path.name == "de-en"
    with pytest.raises(ValueError, match="en-de only"):
        reverse_for(fwd, "en-de", tiny_checkpoints / "en-de")
    with pytest.raises(ValueError, match="no reverse model"):
        reverse_for(fwd, "en-de", tiny_checkpoints / "missing")


def test_reverse_for_a_model_of_both_directions_is_itself(tiny_spm, tmp_path):
    from tiny_models import make_tiny_checkpoint

    from aiayn import Translator

    path = make_tiny_checkpoint(tmp_path / "both", tiny_spm, "en-de", seed=3, language_tags=["de", "en"],
                                target_language="de")
    fwd = Translator.load(path)
    rev = reverse_for(fwd, "en-de")
    assert rev.cfg.target_language == "en" and rev.meta["direction"] == "de-en"
    assert all(a is b for a, b in zip(rev.model.parameters(), fwd.model.parameters()))


def test_evaluation_scores_the_reranked_output(pair):
    from aiayn.evaluation.scoring import evaluate_translator

    fwd, rev = pair
    refs = ["Ich habe keine Zeit.", "Das Haus ist klein.", "Guten Morgen!"]
    plain = evaluate_translator(fwd, SOURCES, refs, beam_size=4)
    assert plain["hypotheses"] == [fwd.translate(s, return_attention=False).text for s in SOURCES]
    same = evaluate_translator(fwd, SOURCES, refs, beam_size=4, reverse=rev, rerank_weight=0.0)
    assert same["hypotheses"] == plain["hypotheses"]
    heavy = evaluate_translator(fwd, SOURCES, refs, beam_size=4, reverse=rev, rerank_weight=10.0)
    assert heavy["hypotheses"] == [rerank(s, nbest(fwd, s), rev, 10.0)[0].text for s in SOURCES]
    with pytest.raises(ValueError, match="weight"):
        evaluate_translator(fwd, SOURCES, refs, reverse=rev, rerank_weight=-1)


def test_translate_command_reranks(tiny_checkpoints, pair, monkeypatch, capsys):
    import aiayn.translator as translator
    from aiayn.translate_cli import cli_main

    fwd, rev = pair
    monkeypatch.setattr(translator, "CHECKPOINTS_DIR", tiny_checkpoints)
    assert cli_main(["-c", str(tiny_checkpoints / "en-de"), "--rerank-weight", "10", *SOURCES]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [rerank(s, nbest(fwd, s), rev, 10.0)[0].text for s in SOURCES]
    # --rerank is a flag: the text may follow it
    assert cli_main(["-c", str(tiny_checkpoints / "en-de"), "--rerank", SOURCES[0]]) == 0
    assert capsys.readouterr().out.splitlines() == [rerank(SOURCES[0], nbest(fwd, SOURCES[0]), rev)[0].text]
    assert cli_main(["-c", str(tiny_checkpoints / "en-de"), "--reverse", str(tiny_checkpoints / "de-en"), "x"]) == 2
    assert "pass --rerank too" in capsys.readouterr().err
    assert cli_main(["-c", str(tiny_checkpoints / "en-de"), "--rerank-weight", "-1", "x"]) == 2
    assert "weight" in capsys.readouterr().err


def test_evaluate_dev_with_rerank_leaves_the_checkpoints_own_scores_alone(tiny_checkpoints, tmp_path, monkeypatch):
    import shutil

    import aiayn.translator as translator
    from aiayn.evaluation.devsets import EVAL_DEV_FILE, cli_main

    ck = tmp_path / "en-de"
    shutil.copytree(tiny_checkpoints / "en-de", ck)
    (ck / EVAL_DEV_FILE).unlink(missing_ok=True)
    monkeypatch.setattr(translator, "CHECKPOINTS_DIR", tiny_checkpoints)
    assert cli_main(["-c", str(ck), "--sets", "classic", "--rerank"]) == 0
    assert not (ck / EVAL_DEV_FILE).exists()
    out = tmp_path / "r.json"
    assert cli_main(["-c", str(ck), "--sets", "classic", "--rerank-weight", "0.5", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["decoding"]["rerank"]["weight"] == 0.5
