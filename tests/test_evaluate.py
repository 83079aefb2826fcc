"""`aiayn evaluate`: scores against sacreBLEU called directly, the dictionary baseline, the CLI on a tiny
checkpoint and a tiny data directory built from the real Ding fixture, and clean errors on bad paths."""
from __future__ import annotations

import json
import shutil

import pytest
import sacrebleu

from aiayn.data import read_tsv
from aiayn.evaluation.baseline import dictionary_baseline, load_lexicon
from aiayn.evaluation.scoring import cli_main, evaluate_translator, read_split, score


# ---------------------------------------------------------------------------------------------------------
# score
# ---------------------------------------------------------------------------------------------------------
def test_perfect_hypotheses_score_100():
    refs = ["The cat sat on the mat.", "Good morning, how are you today?"]
    s = score(refs, refs)
    assert s["bleu"] == pytest.approx(100.0) and s["chrf"] == pytest.approx(100.0)
    assert s["n"] == 2 and s["brevity_penalty"] == pytest.approx(1.0)
    assert s["bleu_precisions"] == pytest.approx([100.0] * 4)


def test_score_matches_sacrebleu_directly():
    hyps = ["the cat is on the mat", "there is a dog in the garden", "hello world"]
    refs = ["the cat sat on the mat", "a dog is in the garden", "hello , world !"]
    s = score(hyps, refs)
    assert s["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-9)
    assert s["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=1e-9)
    assert 0.0 < s["bleu"] < 100.0 and 0.0 < s["chrf"] < 100.0
    # hand check of one n-gram precision: unigrams of the hypotheses found in the references (clipped)
    # h1: the cat is on the mat -> the, cat, on, the, mat = 5/6; h2: there is a dog in the garden -> is a dog in
    # the garden = 6/7; h3: hello world -> 2/2.  (5 + 6 + 2) / (6 + 7 + 2) = 13/15
    assert s["bleu_precisions"][0] == pytest.approx(100 * 13 / 15)
    assert s["sys_len"] == 15 and s["ref_len"] == 6 + 6 + 4
    assert s["bleu_signature"].startswith("nrefs:1|") and "tok:13a" in s["bleu_signature"]
    assert "version:" in s["bleu_signature"] and s["chrf_signature"].startswith("nrefs:1|") and "nc:6" in s["chrf_signature"]


def test_score_bad_input():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        score(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="nothing to score"):
        score([], [])
    with pytest.raises(ValueError, match="not a string"):
        score([None], ["a"])


# ---------------------------------------------------------------------------------------------------------
# on the tiny data directory (conftest.tiny_data: real fixture pairs, leak-free splits by aiayn.data)
# ---------------------------------------------------------------------------------------------------------
def test_read_split_directions(tiny_data):
    pairs = read_tsv(tiny_data / "test.tsv")  # columns de, en
    src, ref, skipped = read_split(tiny_data, "test", "en-de")
    assert src == [p.en for p in pairs] and ref == [p.de for p in pairs] and skipped == 0
    src2, ref2, _ = read_split(tiny_data, "test", "de-en")
    assert src2 == ref and ref2 == src
    with pytest.raises(FileNotFoundError):
        read_split(tiny_data, "nope", "en-de")
    with pytest.raises(ValueError, match="direction"):
        read_split(tiny_data, "test", "en-fr")


class _FakeTranslator:
    """Stands in for a Translator: 'translates' by looking the source up in a table (records batches)."""

    def __init__(self, table):
        self.table, self.batches = table, []

    def translate_batch(self, texts, *, beam_size, length_penalty, max_len, return_attention, n_best=1):
        from types import SimpleNamespace

        self.batches.append((list(texts), beam_size, length_penalty))
        return [SimpleNamespace(text=self.table[t], finished=True, truncated=False) for t in texts]


def test_evaluate_translator_keeps_order_and_scores_baseline(tiny_data):
    src, ref, _ = read_split(tiny_data, "test", "de-en")
    fake = _FakeTranslator(dict(zip(src, ref)))  # a perfect system
    lex = load_lexicon(tiny_data / "dictionary.tsv", direction="de-en")
    res = evaluate_translator(fake, src, ref, beam_size=3, alpha=0.5, batch_size=3, lexicon=lex, src_lang="de")
    assert res["hypotheses"] == ref  # input order restored after length-sorted batching
    assert res["model"]["bleu"] == pytest.approx(100.0)
    assert len(src) == 8 and [len(b[0]) for b in fake.batches] == [3, 3, 2] and all(b[1:] == (3, 0.5) for b in fake.batches)
    base = [dictionary_baseline(s, lex, src_lang="de") for s in src]
    assert res["baseline_hypotheses"] == base
    assert res["baseline"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(base, [ref]).score)
    assert res["baseline"]["chrf"] == pytest.approx(sacrebleu.corpus_chrf(base, [ref]).score)
    assert res["baseline"]["bleu"] < 100.0
    assert res["n_sentences"] == len(src) and res["unfinished"] == 0
    with pytest.raises(ValueError, match="src_lang"):
        evaluate_translator(fake, src, ref, lexicon=lex)
    with pytest.raises(ValueError, match="references"):
        evaluate_translator(fake, src, ref[:-1])


# ---------------------------------------------------------------------------------------------------------
# the CLI
# ---------------------------------------------------------------------------------------------------------
def test_cli_writes_json(tiny_checkpoints, tiny_data, tmp_path, capsys):
    from aiayn.cli import main

    out = tmp_path / "res" / "results.json"
    code = main(["evaluate", "--checkpoint", str(tiny_checkpoints / "en-de"), "--data", str(tiny_data), "--beam-size", "2", "--max-len", "6",
                 "--limit", "3", "--batch-size", "2", "--out", str(out), "--hypotheses", "--no-progress", "--device", "cpu"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "BLEU" in printed and "chrF" in printed and "dictionary" in printed and "nrefs:1" in printed
    res = json.loads(out.read_text())
    for key in ("checkpoint", "direction", "split", "n_sentences", "scores", "signatures", "data", "time", "decoding",
                "samples", "hypotheses", "baseline_hypotheses"):
        assert key in res, key
    assert res["direction"] == "en-de" and res["split"] == "test" and res["n_sentences"] == 3
    assert set(res["scores"]) == {"model", "dictionary_baseline"}
    assert set(res["scores"]["model"]) == {"bleu", "chrf"} and set(res["scores"]["dictionary_baseline"]) == {"bleu", "chrf"}
    assert res["signatures"]["bleu"].startswith("nrefs:1|") and res["signatures"]["chrf"].startswith("nrefs:1|")
    assert res["decoding"]["beam_size"] == 2 and res["decoding"]["alpha"] == 0.6 and res["decoding"]["max_len"] == 6
    assert res["data"]["corpus_sha256"] == "abc123" and len(res["data"]["split_file_sha256"]) == 64
    assert res["checkpoint_meta"]["direction"] == "en-de"
    # the scores in the file are those of the hypotheses in the file, against the first 3 references (en -> de)
    src, ref, _ = read_split(tiny_data, "test", "en-de")
    assert len(res["hypotheses"]) == 3
    assert res["scores"]["model"]["chrf"] == pytest.approx(sacrebleu.corpus_chrf(res["hypotheses"], [ref[:3]]).score)
    assert res["scores"]["dictionary_baseline"]["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(res["baseline_hypotheses"], [ref[:3]]).score)
    assert [s["source"] for s in res["samples"]] == src[:3]


def test_cli_direction_from_checkpoint(tiny_checkpoints, tiny_data, tmp_path):
    out = tmp_path / "r.json"
    assert cli_main(["-c", str(tiny_checkpoints / "de-en"), "--data", str(tiny_data), "--beam-size", "1", "--limit", "2", "--max-len", "5",
                     "--out", str(out), "--no-progress", "--device", "cpu"]) == 0
    res = json.loads(out.read_text())
    src, _, _ = read_split(tiny_data, "test", "de-en")
    assert res["direction"] == "de-en" and [s["source"] for s in res["samples"]] == src[:2]
    assert "hypotheses" not in res  # only with --hypotheses


@pytest.mark.parametrize("case", ["missing_checkpoint", "missing_data", "missing_split", "corrupt_weights", "bad_beam"])
def test_cli_bad_paths_exit_2(case, tiny_checkpoints, tiny_data, tmp_path, capsys):
    ckpt, data, extra = tiny_checkpoints / "en-de", tiny_data, []
    if case == "missing_checkpoint":
        ckpt = tmp_path / "no-such-checkpoint"
    elif case == "missing_data":
        data = tmp_path / "no-such-data"
    elif case == "missing_split":
        extra = ["--split", "nosuchsplit"]
    elif case == "corrupt_weights":
        bad = tmp_path / "bad"
        shutil.copytree(ckpt, bad)
        (bad / "model.safetensors").write_bytes(b"not a safetensors file at all")
        ckpt = bad
    elif case == "bad_beam":
        extra = ["--beam-size", "0"]
    code = cli_main(["--checkpoint", str(ckpt), "--data", str(data), "--no-progress", "--device", "cpu", *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("aiayn evaluate: ") and "Traceback" not in err
    expected = {"missing_checkpoint": "no-such-checkpoint", "missing_data": "no-such-data", "missing_split": "nosuchsplit.tsv",
                "corrupt_weights": "model.safetensors", "bad_beam": "--beam-size"}[case]
    assert expected in err
