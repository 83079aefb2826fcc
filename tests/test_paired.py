"""The paired comparison of two evaluations (aiayn/evaluation/paired.py, ``aiayn compare-evals``): the changed
sentences, the paired bootstrap test, the checks that both evaluations scored the same sentences the same way."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from sacrebleu.metrics import CHRF

from aiayn.evaluation import paired
from aiayn.evaluation.paired import compare_evaluations, compare_files, compare_hypotheses, summary
from aiayn.files import sha256_file

REFS = ["Die Katze saß auf der Matte.", "Ich lese gern Bücher im Garten.", "Guten Morgen!", "Wo ist der Bahnhof?",
        "Der Hund schläft.", "Wir gehen heute ins Kino.", "Das Wetter ist schön.", "Mein Bruder hat ein Fahrrad."]
SRCS = [f"source {i}" for i in range(len(REFS))]
GARBLED = ["Die Katze setzte auf den Mathe.", "Ich möchte Kind im Garten.", "Gute Morgen!", "Wo ist Zug?",
           "Hund Schlaf.", "Wir Kino heute.", "Wetter schön ist das.", "Bruder mein Rad."]


def test_identical_outputs_change_nothing_and_are_not_tested():
    r = compare_hypotheses("short", SRCS, REFS, GARBLED, list(GARBLED))
    assert r.changed == () and r.p_value == 1.0 and r.delta == 0.0 and r.candidate_ci is None
    assert r.baseline_score == pytest.approx(CHRF().corpus_score(GARBLED, [REFS]).score)


def test_one_changed_sentence_is_named_with_its_sentence_chrf():
    cand = list(GARBLED)
    cand[2] = "Guten Morgen!"
    r = compare_hypotheses("short", SRCS, REFS, GARBLED, cand)
    (c,) = r.changed
    assert (c.index, c.source, c.baseline, c.candidate) == (2, "source 2", "Gute Morgen!", "Guten Morgen!")
    assert c.candidate_chrf == 100.0 and c.delta == pytest.approx(100.0 - CHRF().sentence_score("Gute Morgen!", [REFS[2]]).score)
    assert r.candidate_score == pytest.approx(CHRF().corpus_score(cand, [REFS]).score) and r.delta > 0
    # one sentence of eight is within the luck of the sample: the bootstrap does not call it a difference
    assert r.p_value > 0.05


def test_a_system_right_everywhere_is_told_apart_from_a_garbled_one():
    refs, srcs = REFS * 6, SRCS * 6
    r = compare_hypotheses("long", srcs, refs, GARBLED * 6, list(refs))
    assert len(r.changed) == len(refs) and r.candidate_score == pytest.approx(100.0)
    assert r.p_value < 0.01 and r.candidate_mean == pytest.approx(100.0, abs=0.5)
    again = compare_hypotheses("long", srcs, refs, GARBLED * 6, list(refs))
    assert again.p_value == r.p_value and again.candidate_ci == r.candidate_ci  # seeded: the same every time
    # the seed given is the one resampled with (not $SACREBLEU_SEED's default): another draws other resamples
    cand = list(GARBLED * 6)
    cand[::2] = refs[::2]
    a, b = (compare_hypotheses("long", srcs, refs, GARBLED * 6, cand, seed=s) for s in (12345, 7))
    assert (a.seed, b.seed) == (12345, 7) and a.candidate_ci != b.candidate_ci


def test_changed_outputs_with_equal_scores_are_no_evidence_of_a_difference():
    # both systems score chrF 0 on every sentence, so every resample ties: sacreBLEU's count alone gives 1/1001
    nothing_a, nothing_b = ["xq"] * len(REFS), ["qx"] * len(REFS)
    r = compare_hypotheses("short", SRCS, REFS, nothing_a, nothing_b)
    assert len(r.changed) == len(REFS) and r.baseline_score == r.candidate_score == 0.0
    assert r.p_value == 1.0


def test_bleu_can_be_tested_too():
    r = compare_hypotheses("short", SRCS, REFS, GARBLED, list(REFS), metric="bleu")
    assert r.metric == "bleu" and r.candidate_score == pytest.approx(100.0)


@pytest.mark.parametrize("kw, match", [
    (dict(candidate=GARBLED[:-1]), "do not cover the same sentences"),
    (dict(sources=[], references=[], baseline=[], candidate=[]), "no sentences"),
    (dict(candidate=GARBLED[:-1] + [None]), "must be a string"),
    (dict(metric="ter"), "metric must be one of"),
    (dict(resamples=1), "resamples must be an integer"),
])
def test_bad_input_is_one_clear_error(kw, match):
    args = dict(sources=SRCS, references=REFS, baseline=GARBLED, candidate=list(REFS))
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        compare_hypotheses("short", **args)


# -- stored evaluations ---------------------------------------------------------------------------------------------
def _devsets(tmp_path: Path) -> Path:
    d = tmp_path / "devsets"
    d.mkdir()
    (d / "short.tsv").write_text("en\tde\n" + "".join(f"{s}\t{r}\n" for s, r in zip(SRCS, REFS)), encoding="utf-8")
    return d


def _dev_eval(path: Path, devsets: Path, hyps: list[str], beam: int = 4) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    ev = {"decoding": {"beam_size": beam, "alpha": 0.6}, "sets": {"short": {"sha256": sha256_file(devsets / "short.tsv")}},
          "details": {"en-de": {"short": {"chrf": 0.0, "hypotheses": hyps}}}}
    (path / "eval_dev.json").write_text(json.dumps(ev), encoding="utf-8")
    return path


def _test_eval(folder: Path, data: Path, hyps: list[str] | None, batch_size: int = 32) -> None:
    # an older evaluation records no domain or reranking: the same decoding as None
    extra = {"domain": None, "rerank": None} if batch_size == 32 else {}
    ev = {"direction": "en-de", "split": "test", "decoding": {"beam_size": 4, "alpha": 0.6, "batch_size": batch_size, **extra},
          "limit": None, "data": {"data_dir": str(data), "split_file_sha256": sha256_file(data / "test.tsv")}}
    if hyps is not None:
        ev["hypotheses"] = hyps
    (folder / "eval_test.json").write_text(json.dumps(ev), encoding="utf-8")


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.tsv").write_text("de\ten\n" + "".join(f"{r}\t{s}\n" for s, r in zip(SRCS, REFS)), encoding="utf-8")
    return data


def test_two_checkpoint_folders_are_compared_on_the_dev_sets_and_the_test_split(tmp_path):
    dev, data = _devsets(tmp_path), _data(tmp_path)
    cand_hyps = list(GARBLED)
    cand_hyps[0] = REFS[0]
    a = _dev_eval(tmp_path / "a", dev, GARBLED)
    b = _dev_eval(tmp_path / "b", dev, cand_hyps)
    _test_eval(a, data, GARBLED, batch_size=8)  # another batch size decodes the same outputs: not a difference
    _test_eval(b, data, list(REFS))
    r = compare_evaluations(a, b, devsets=dev)
    assert r["direction"] == "en-de" and r["test_skipped"] is None
    assert [s.name for s in r["sets"]] == ["test", "short"]
    assert len(r["sets"][0].changed) == len(REFS) and [c.index for c in r["sets"][1].changed] == [0]
    js = summary(r, sentences_up_to=3)
    assert js["sets"]["short"]["n_changed"] == 1 and js["sets"]["short"]["changed"][0]["candidate"] == REFS[0]
    assert js["sets"]["test"]["n_changed"] == len(REFS) and "changed" not in js["sets"]["test"]  # too many to list

    _test_eval(a, data, None)  # made without --hypotheses: the test split is left out, and says why
    r = compare_evaluations(a, b, devsets=dev)
    assert [s.name for s in r["sets"]] == ["short"] and "--hypotheses" in r["test_skipped"]


def test_evaluations_that_did_not_score_the_same_thing_the_same_way_are_refused(tmp_path):
    dev, data = _devsets(tmp_path), _data(tmp_path)
    a = _dev_eval(tmp_path / "a", dev, GARBLED)
    with pytest.raises(ValueError, match="decoded differently"):
        compare_evaluations(a, _dev_eval(tmp_path / "b", dev, REFS, beam=1), devsets=dev)
    b = _dev_eval(tmp_path / "b", dev, REFS)
    with pytest.raises(FileNotFoundError, match="no evaluation"):
        compare_evaluations(a, tmp_path / "nowhere", devsets=dev)
    _test_eval(a, data, GARBLED)
    _test_eval(b, data, REFS)
    with pytest.raises(ValueError, match="not the split file"):  # --data names another test.tsv
        other = tmp_path / "other"
        other.mkdir()
        (other / "test.tsv").write_text("de\ten\nX\tY\n", encoding="utf-8")
        compare_files(a / "eval_dev.json", b / "eval_dev.json", a / "eval_test.json", b / "eval_test.json",
                      devsets=dev, data=other)
    (dev / "short.tsv").write_text((dev / "short.tsv").read_text(encoding="utf-8") + "Hello.\tHallo.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="has changed since"):
        compare_evaluations(a, b, devsets=dev)


def test_the_command_prints_the_table_and_the_changed_sentences_and_writes_json(tmp_path, capsys):
    dev = _devsets(tmp_path)
    cand = list(GARBLED)
    cand[2] = "Guten Morgen!"
    a, b = _dev_eval(tmp_path / "a", dev, GARBLED), _dev_eval(tmp_path / "b", dev, cand)
    out = tmp_path / "cmp.json"
    assert paired.cli_main([str(a), str(b / "eval_dev.json"), "--devsets", str(dev), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "short: 1 of 8 sentences changed" in text and "Gute Morgen!" in text and "Guten Morgen!" in text
    assert "test split left out" in text
    assert json.loads(out.read_text())["sets"]["short"]["changed"][0]["index"] == 2
    assert paired.cli_main([str(a), str(tmp_path / "nowhere"), "--devsets", str(dev)]) == 2
    assert capsys.readouterr().err.startswith("aiayn compare-evals: no evaluation")


def test_the_verdict_line_says_how_many_outputs_changed_where_the_candidate_lost():
    from aiayn.training.continuous import verdict, verdict_line

    v = verdict({"dev/classic": {"chrf": 71.6}, "test": {"chrf": 42.0}}, {"dev/classic": {"chrf": 72.1}, "test": {"chrf": 41.8}})
    v["paired"] = {"sets": {"classic": {"n_changed": 1, "n_sentences": 39, "p_value": 0.134}}}
    line = verdict_line(v, Path("cand"))
    assert "dev/classic (71.6 vs 72.1; 1 of 39 changed, p 0.13)" in line and "test (" not in line
