"""``aiayn data sentence-kind`` (aiayn/data/kinds.py): Ding's example sentences relabelled ``ding_sentence`` in a copy
of a prepared folder, so that ``--kind-weights`` can weight them; nothing else changes."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from aiayn.data.kinds import KIND, RULE, is_example_sentence, sentence_kinds, write_sentence_kind_folder
from aiayn.data.prepare import cli_main as data_main
from aiayn.training.loader import kind_mix

ROWS = ["Ich verstehe nicht, was Du meinst.\tI can't see what you mean.",   # an example sentence
        "Aal blau\tEel au bleu",                                              # an entry
        "Er ging heim.\tHe went home.",                                       # 3 German words: a sentence
        "Geh!\tGo!",                                                          # 1 word: not
        "sich auf jdn. verlassen\tto rely on sb.",                            # lower case, "sb." ending: not
        "Das ist gut.\tthat is good.",                                        # the English is not capitalised
        "Öl ist teuer!\tOil is dear!",                                        # an umlaut first: a sentence
        "Die Datei wurde gespeichert.\tThe file was saved."]                  # a sentence, but kind ui
KINDS = ["ding"] * 7 + ["ui"]


def test_the_rule_marks_ding_example_sentences_only():
    assert [is_example_sentence(*r.split("\t")) for r in ROWS] == [True, False, True, False, False, False, True, True]
    assert sentence_kinds(ROWS, KINDS) == [KIND, "ding", KIND, "ding", "ding", "ding", KIND, "ui"]
    with pytest.raises(ValueError, match="7 kinds for 8"):
        sentence_kinds(ROWS, KINDS[:-1])
    with pytest.raises(ValueError, match="already"):
        sentence_kinds(ROWS, [KIND] + KINDS[1:])
    assert "at least 3 words" in RULE


@pytest.fixture()
def folder(tmp_path) -> Path:
    d = tmp_path / "story"
    d.mkdir()
    (d / "train.tsv").write_text("de\ten\n" + "".join(r + "\n" for r in ROWS), encoding="utf-8")
    (d / "train_kinds.txt").write_text("".join(k + "\n" for k in KINDS), encoding="utf-8")
    (d / "valid.tsv").write_text("de\ten\nJa.\tYes.\n", encoding="utf-8")
    (d / "datasheet.json").write_text(json.dumps({"kinds": {"train_pairs": {"ding": 7, "ui": 1},
                                                            "default_weights": {"ding": 1, "ui": 1}},
                                                  "files_sha256": {"train.tsv": "x", "train_kinds.txt": "y"}}))
    (d / "DATASHEET.md").write_text("# Datasheet\n")
    (d / "cache").mkdir()
    (d / "cache" / "tokens.bin").write_bytes(b"not copied")
    return d


def test_a_copy_relabels_the_kinds_and_changes_nothing_else(folder, tmp_path, capsys):
    out = tmp_path / "story-sentences"
    assert data_main(["sentence-kind", "--data", str(folder), "--out", str(out)]) == 0
    assert "3 Ding example sentences are now kind ding_sentence" in capsys.readouterr().out
    assert (out / "train_kinds.txt").read_text().split() == sentence_kinds(ROWS, KINDS)
    for name in ("train.tsv", "valid.tsv"):
        assert (out / name).read_bytes() == (folder / name).read_bytes()
    assert not (out / "cache").exists() and (folder / "train_kinds.txt").read_text().split() == KINDS
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~mask  # a shared data folder, not mkdtemp's private one
    sheet = json.loads((out / "datasheet.json").read_text())
    assert sheet["sentence_kind"]["rows"] == 3 and sheet["sentence_kind"]["rule"] == RULE
    assert sheet["kinds"]["train_pairs"] == {"ding": 4, KIND: 3, "ui": 1}
    assert sheet["kinds"]["default_weights"][KIND] == 1 and sheet["files_sha256"]["train_kinds.txt"] != "y"
    assert "relabelled `ding_sentence`" in (out / "DATASHEET.md").read_text()
    mix = kind_mix(out, f"ding=1,{KIND}=4,ui=0.5")  # what the training mix reads
    assert mix.weights[KIND] == 4.0 and list(mix.row_weights) == [4.0, 1, 4.0, 1, 1, 1, 4.0, 0.5]


def test_bad_folders_are_one_line_errors(folder, tmp_path, capsys):
    cases = [(["--data", str(folder), "--out", str(folder)], "must lie outside the data folder"),
             (["--data", str(folder), "--out", str(folder / "inside")], "must lie outside the data folder"),
             (["--data", str(tmp_path / "none"), "--out", str(tmp_path / "n2")], "does not exist")]
    once = tmp_path / "once"
    write_sentence_kind_folder(folder, once)
    cases.append((["--data", str(once), "--out", str(tmp_path / "twice")], "already"))
    shutil.copy(folder / "train_kinds.txt", tmp_path / "k")
    (folder / "train_kinds.txt").write_text("ding\n")
    cases.append((["--data", str(folder), "--out", str(tmp_path / "short")], "1 kinds for 8"))
    for argv, message in cases:
        assert data_main(["sentence-kind", *argv]) == 1
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "twice").exists() and not (tmp_path / "short").exists()
