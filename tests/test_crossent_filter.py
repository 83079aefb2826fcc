"""``aiayn data filter`` (aiayn/data/crossent_filter.py): dual conditional cross-entropy scores of train pairs from
two models of opposite directions (Junczys-Dowmunt 2018), and a copy of a prepared folder without the worst-scored
fraction of some kinds; on the tiny random checkpoints."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from aiayn.data import crossent_filter as cf
from aiayn.data.crossent_filter import (SCORES_FILE, PairScore, choose_drops, dual_score, models_into, parse_drop,
                                        score_pairs, write_filtered_folder)
from aiayn.data.prepare import cli_main as data_main
from aiayn.files import sha256_file
from aiayn.training.loader import kind_mix

ROWS = [("Ich habe keine Zeit.", "I have no time."),
        ("Das Haus ist klein.", "The house is small."),
        ("Guten Morgen!", "Good morning!"),
        ("Aal blau", "Eel au bleu"),
        ("Die Datei wurde gespeichert.", "The file was saved."),
        ("Er ging heim.", "He went home."),
        ("Das Wetter ist heute schön und warm.", "The weather is nice and warm today."),
        ("Wo ist der Bahnhof?", "Where is the station?"),
        ("Öffnen", "Open"),
        ("Ich lese gern Bücher im Garten.", "I like to read books in the garden.")]
KINDS = ["backtranslated", "narrative", "backtranslated", "ding", "ui", "backtranslated", "narrative",
         "backtranslated", "ui", "backtranslated"]


@pytest.fixture(scope="module")
def models(tiny_checkpoints):
    from aiayn import Translator

    return models_into([Translator.load(tiny_checkpoints / "en-de", device="cpu"),
                        Translator.load(tiny_checkpoints / "de-en", device="cpu")], ("de", "en"))


@pytest.fixture()
def folder(tmp_path) -> Path:
    d = tmp_path / "story"
    d.mkdir()
    (d / "train.tsv").write_text("de\ten\n" + "".join(f"{a}\t{b}\n" for a, b in ROWS), encoding="utf-8")
    (d / "train_kinds.txt").write_text("".join(k + "\n" for k in KINDS), encoding="utf-8")
    (d / "valid.tsv").write_text("de\ten\nJa.\tYes.\n", encoding="utf-8")
    counts = {k: KINDS.count(k) for k in dict.fromkeys(KINDS)}
    (d / "datasheet.json").write_text(json.dumps({"kinds": {"train_pairs": counts},
                                                  "files_sha256": {"train.tsv": "x", "train_kinds.txt": "y"}}))
    (d / "DATASHEET.md").write_text("# Datasheet\n")
    (d / "cache").mkdir()
    (d / "cache" / "tokens.bin").write_bytes(b"not copied")
    return d


def test_the_dual_score_is_the_disagreement_plus_the_mean():
    rng = random.Random(3)
    for _ in range(50):
        a, b = rng.uniform(0, 6), rng.uniform(0, 6)
        assert dual_score(a, b) == pytest.approx(max(a, b) - min(a, b) + (a + b) / 2)
        assert dual_score(a, b) == dual_score(b, a) and dual_score(a, b) >= max(a, b)
    assert dual_score(1.0, 1.0) < dual_score(0.5, 1.5)  # the same mean, but the two models disagree
    for bad in (-0.1, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError, match="finite number >= 0"):
            dual_score(bad, 1.0)


def test_drop_fractions_are_parsed_and_checked():
    assert parse_drop("backtranslated=0.25, narrative=0") == {"backtranslated": 0.25, "narrative": 0.0}
    cases = [("backtranslated", "KIND=FRACTION"), ("=0.2", "KIND=FRACTION"), ("a=0.1,a=0.2", "twice"),
             ("a=x", "not a number"), ("a=1", "[0, 1)"), ("a=-0.1", "[0, 1)"), ("ui=0.1,", "KIND=FRACTION")]
    for text, needle in cases:
        with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace(")", r"\)")):
            parse_drop(text)
    with pytest.raises(ValueError, match="no pairs of that kind .*has: ding, ui"):
        parse_drop("narrative=0.1", ["ding", "ui", "ding"])


def test_the_worst_of_each_kind_are_chosen_whatever_the_order():
    scores = [PairScore(row=i, kind=k, h={}, score=s) for i, (k, s) in
              enumerate([("a", 1.0), ("a", 3.0), ("b", 9.0), ("a", 2.0), ("a", 3.0), ("b", 1.0), ("a", 0.5)])]
    want = {"a": [4, 1], "b": []}  # round(0.4 * 5) = 2 of kind a, the tie at 3.0 takes the later row first
    assert choose_drops(scores, {"a": 0.4, "b": 0.2}) == want  # round(0.2 * 2) = 0 of kind b
    shuffled = scores[:]
    random.Random(1).shuffle(shuffled)
    assert choose_drops(shuffled, {"a": 0.4, "b": 0.2}) == want
    assert choose_drops(scores, {"a": 0.99}) == {"a": [4, 1, 3, 0, 6]}


def test_scores_are_the_scorers_cross_entropies_in_any_chunking(models, monkeypatch):
    got = score_pairs(models, ("de", "en"), ROWS, batch_size=3)
    de, en = [r[0] for r in ROWS], [r[1] for r in ROWS]
    into_de, into_en = models["de"].log_likelihoods(en, de), models["en"].log_likelihoods(de, en)
    for g, (lp_de, n_de), (lp_en, n_en) in zip(got, into_de, into_en):
        assert g["de"] == pytest.approx(-lp_de / n_de, rel=1e-5) and g["en"] == pytest.approx(-lp_en / n_en, rel=1e-5)
        assert g["de"] > 0 and g["en"] > 0
    monkeypatch.setattr(cf, "CHUNK", 4)  # longest first in chunks of 4: the same values, in input order
    done = []
    again = score_pairs(models, ("de", "en"), ROWS, batch_size=2, progress=done.append)
    assert done == [4, 4, 2]
    for g, a in zip(got, again):
        assert a == pytest.approx(g, rel=1e-5)
    with pytest.raises(KeyError, match="into fr"):
        score_pairs(models, ("de", "fr"), ROWS)


def test_models_must_cover_both_directions(tiny_checkpoints):
    from aiayn import Translator

    fwd = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    bwd = Translator.load(tiny_checkpoints / "de-en", device="cpu")
    assert models_into([bwd, fwd], ("de", "en")) == {"de": fwd, "en": bwd}  # matched by direction, not by order
    assert models_into([bwd, fwd], ("en", "de")) == {"de": fwd, "en": bwd}
    with pytest.raises(ValueError, match="needs a de-en model and its reverse.*en-de: en-de"):
        models_into([fwd, fwd], ("de", "en"))


def test_the_copy_lacks_exactly_the_worst_pairs_of_the_named_kinds(folder, tmp_path, models):
    out = tmp_path / "filtered"
    summary = write_filtered_folder(folder, out, models, "backtranslated=0.4,narrative=0.5", batch_size=4)
    h = score_pairs(models, ("de", "en"), ROWS)
    score = [dual_score(x["de"], x["en"]) for x in h]
    bt = sorted((i for i, k in enumerate(KINDS) if k == "backtranslated"), key=lambda i: -score[i])
    nar = sorted((i for i, k in enumerate(KINDS) if k == "narrative"), key=lambda i: -score[i])
    gone = set(bt[:2]) | set(nar[:1])
    assert summary["backtranslated"]["dropped"] == 2 and summary["backtranslated"]["kept"] == 3
    assert summary["narrative"]["dropped"] == 1
    assert summary["backtranslated"]["threshold"] == pytest.approx(score[bt[1]], abs=1e-4)
    lines = (out / "train.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "de\ten" and lines[1:] == [f"{a}\t{b}" for i, (a, b) in enumerate(ROWS) if i not in gone]
    assert (out / "train_kinds.txt").read_text().split() == [k for i, k in enumerate(KINDS) if i not in gone]
    assert (out / "valid.tsv").read_bytes() == (folder / "valid.tsv").read_bytes() and not (out / "cache").exists()
    assert (folder / "train.tsv").read_text(encoding="utf-8").count("\n") == len(ROWS) + 1  # the original is untouched
    table = [r.split("\t") for r in (out / SCORES_FILE).read_text(encoding="utf-8").splitlines()]
    assert table[0][:6] == ["row", "kind", "h_de", "h_en", "score", "dropped"] and len(table) == 1 + 7
    assert [float(r[4]) for r in table[1:]] == sorted((float(r[4]) for r in table[1:]), reverse=True)
    for r in table[1:]:
        i = int(r[0])
        assert (r[1], r[6], r[7]) == (KINDS[i], *ROWS[i]) and float(r[4]) == pytest.approx(score[i], abs=1e-4)
        assert r[5] == str(int(i in gone))
    sheet = json.loads((out / "datasheet.json").read_text())
    record = sheet["pair_filter"]
    assert record["pairs_dropped"] == 3 and record["kinds"]["narrative"]["scored"] == 2 and "previous" not in record
    assert sheet["kinds"]["train_pairs"] == {"backtranslated": 3, "narrative": 1, "ding": 1, "ui": 2}
    for name in ("train.tsv", "train_kinds.txt", SCORES_FILE):
        assert sheet["files_sha256"][name] == sha256_file(out / name)
    assert "3 train pairs removed by `aiayn data filter`" in (out / "DATASHEET.md").read_text()
    assert list(kind_mix(out, "backtranslated=3,narrative=2,ding=1,ui=1").row_weights) == \
        [{"backtranslated": 3, "narrative": 2}.get(k, 1) for i, k in enumerate(KINDS) if i not in gone]
    twice = tmp_path / "twice"  # filtering the copy again keeps the first record
    write_filtered_folder(out, twice, models, {"ui": 0.5})
    record2 = json.loads((twice / "datasheet.json").read_text())["pair_filter"]
    assert record2["previous"]["pairs_dropped"] == 3 and record2["pairs_dropped"] == 1


def test_bad_input_leaves_nothing(folder, tmp_path, models):
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError):
        write_filtered_folder(folder, tmp_path / "taken", models, "ui=0.5")
    with pytest.raises(ValueError, match="outside"):
        write_filtered_folder(folder, folder.parent, models, "ui=0.5")
    with pytest.raises(ValueError, match="outside"):
        write_filtered_folder(folder, folder / "in", models, "ui=0.5")
    with pytest.raises(KeyError, match="into en"):
        write_filtered_folder(folder, tmp_path / "one", {"de": models["de"]}, "ui=0.5")
    (folder / "train_kinds.txt").write_text("ui\n")
    with pytest.raises(ValueError, match="1 kinds for 10"):
        write_filtered_folder(folder, tmp_path / "short", models, "ui=0.5")
    assert not (tmp_path / "one").exists() and not (tmp_path / "short").exists()


def test_the_command_writes_the_folder_and_refuses_in_one_line(folder, tmp_path, tiny_checkpoints, capsys):
    out = tmp_path / "cli"
    models_args = ["--models", str(tiny_checkpoints / "en-de"), str(tiny_checkpoints / "de-en")]
    assert data_main(["filter", "--data", str(folder), "--out", str(out), *models_args,
                      "--drop", "backtranslated=0.2", "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "backtranslated: dropped 1 of 5" in printed
    assert len((out / "train.tsv").read_text(encoding="utf-8").splitlines()) == len(ROWS)
    cases = [(["--drop", "poetry=0.2", *models_args], "no pairs of that kind"),
             (["--drop", "ui=1.5", *models_args], "[0, 1)"),
             (["--drop", "ui=0.2", "--models", str(tiny_checkpoints / "en-de")], "needs a de-en model"),
             (["--drop", "ui=0.2", "--threads", "0", *models_args], "--threads must be at least 1"),
             (["--drop", "ui=0.2", "--device", "banana", *models_args], "unknown device 'banana'"),
             (["--drop", "ui=0.2", "--models", str(tmp_path / "nowhere"), *models_args[1:]], "nowhere")]
    for i, (argv, needle) in enumerate(cases):
        assert data_main(["filter", "--data", str(folder), "--out", str(tmp_path / f"bad{i}"), *argv]) == 1
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert not (tmp_path / f"bad{i}").exists()
    assert data_main(["filter", "--data", str(folder), "--out", str(out), *models_args, "--drop", "ui=0.2"]) == 1
    assert "exists" in capsys.readouterr().err
