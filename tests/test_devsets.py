"""The project's development sets (assets/devsets) and ``aiayn evaluate-dev`` (aiayn/evaluation/devsets.py).

* The committed sets parse: their sizes and sentence lengths are the ones the README promises, no field is empty,
  no sentence repeats within or across sets, and none is a pair of the committed Ding test sample.
* The classic set holds the app's curated examples and the labs' default sentences.
* The reader refuses malformed files with the file and line in the message.
* ``aiayn evaluate-dev`` on a tiny checkpoint writes scores that match an independent scoring of its hypotheses,
  in the checkpoint's own direction (sources and references the right way round).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiayn.evaluation.devsets import DEVSETS_DIR, SET_NAMES, checkpoint_directions, cli_main, load_devsets, read_devset
from aiayn.evaluation.scoring import score

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def sets():
    return load_devsets()


def test_sizes_and_lengths(sets):
    assert [len(sets[n]) for n in SET_NAMES] == [160, 100, len(sets["classic"])]
    assert len(sets["classic"]) >= 30
    assert all(4 <= len(en.split()) <= 8 for en, _ in sets["short"])
    assert all(12 <= len(en.split()) <= 25 for en, _ in sets["long"])


def test_no_sentence_repeats_across_sets(sets):
    texts = [t for pairs in sets.values() for pair in pairs for t in pair]
    assert all(t.strip() == t and t for t in texts)
    assert len(texts) == len(set(texts))


def test_no_pair_of_the_ding_test_sample(sets):
    sample = json.loads((FIXTURES / "ding_test_sample.json").read_text(encoding="utf-8"))["pairs"]
    held_out = {t for de, en in sample for t in (de, en)}
    assert len(held_out) > 100
    assert not held_out & {t for pairs in sets.values() for pair in pairs for t in pair}


def test_classic_holds_the_app_examples_and_lab_defaults(sets):
    from aiayn.examples import EXAMPLES

    classic = set(sets["classic"])
    for src, ref, _ in EXAMPLES["en-de"]:
        assert (src, ref) in classic
    for src, ref, _ in EXAMPLES["de-en"]:
        assert (ref, src) in classic
    # the Masking lab's default sentence and the Compare page's second pair
    assert ("I like to read books in the garden.", "Ich lese gern Bücher im Garten.") in classic
    assert ("I have no money.", "Ich habe kein Geld.") in classic


@pytest.mark.parametrize("text, message", [
    ("de\ten\nHaus\thouse\n", "header"),
    ("en\tde\nhouse\n", "2 tab-separated"),
    ("en\tde\nhouse\t\n", "empty"),
    ("en\tde\nhouse \tHaus\n", "spaces"),
    ("en\tde\nhouse\tHaus\nhome\tHaus\n", "repeats line 2"),
    ("en\tde\n", "no sentence pairs"),
])
def test_reader_refuses_malformed_files(tmp_path, text, message):
    path = tmp_path / "bad.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_devset(path)


def test_checkpoint_directions():
    assert checkpoint_directions({"direction": "de-en"}) == ["de-en"]
    assert checkpoint_directions({"directions": ["de-en", "en-de"]}) == ["en-de", "de-en"]
    assert checkpoint_directions({}) == []


def test_cli_scores_match_its_hypotheses(tiny_checkpoints, tmp_path):
    sets_dir = tmp_path / "sets"
    sets_dir.mkdir()
    pairs = read_devset(DEVSETS_DIR / "short.tsv")[:3]
    (sets_dir / "short.tsv").write_text("en\tde\n" + "".join(f"{en}\t{de}\n" for en, de in pairs), encoding="utf-8")
    out = tmp_path / "dev.json"
    code = cli_main(["--checkpoint", str(tiny_checkpoints / "de-en"), "--devsets", str(sets_dir), "--sets", "short",
                     "--beam-size", "2", "--device", "cpu", "--out", str(out)])
    assert code == 0
    res = json.loads(out.read_text(encoding="utf-8"))
    assert list(res["scores"]) == ["de-en"] and res["decoding"]["beam_size"] == 2
    hyps = res["details"]["de-en"]["short"]["hypotheses"]
    expected = score(hyps, [en for en, _ in pairs])  # de-en: the English side is the reference
    assert res["scores"]["de-en"]["short"] == {"bleu": expected["bleu"], "chrf": expected["chrf"]}
    assert res["sets"]["short"]["n_pairs"] == 3


def test_cli_refuses_a_missing_set(tiny_checkpoints, tmp_path, capsys):
    code = cli_main(["--checkpoint", str(tiny_checkpoints / "en-de"), "--devsets", str(tmp_path), "--out", "-"])
    assert code == 2
    assert "no development set" in capsys.readouterr().err


@pytest.mark.parametrize("direction", ["en-de", "de-en"])
def test_shipped_dev_scores_are_of_the_shipped_weights_and_the_current_sets(direction):
    """A shipped ``eval_dev.json`` must describe what ships: rerun ``aiayn evaluate-dev --checkpoint checkpoints/D``
    after replacing the weights or editing a set."""
    from aiayn.files import sha256_file

    ckpt = Path(__file__).resolve().parent.parent / "checkpoints" / direction
    path = ckpt / "eval_dev.json"
    if not path.is_file():
        pytest.skip(f"{path} not written")
    res = json.loads(path.read_text(encoding="utf-8"))
    assert res["model_sha256"] == sha256_file(ckpt / "model.safetensors")
    assert {n: s["sha256"] for n, s in res["sets"].items()} == {n: sha256_file(DEVSETS_DIR / f"{n}.tsv") for n in SET_NAMES}
    assert set(res["scores"][direction]) == set(SET_NAMES)
    assert res["decoding"]["beam_size"] == 4 and res["decoding"]["alpha"] == 0.6
