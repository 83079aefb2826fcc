"""The word-by-word dictionary baseline (aiayn.evaluation.baseline) that ``aiayn evaluate`` scores beside the
model: lexicon loading from ``dictionary.tsv`` and word-by-word substitution."""
from __future__ import annotations

import pytest

from aiayn.data import Pair, read_tsv, write_tsv
from aiayn.evaluation.baseline import WORD_PATTERN, dictionary_baseline, load_lexicon


def test_dictionary_baseline(tmp_path):
    f = write_tsv([Pair("Hund", "dog"), Pair("der", "the"), Pair("schläft", "sleeps"), Pair("Hund", "hound dog"),
                   Pair("schlafen", "to sleep"), Pair("gut", "good")], tmp_path / "dictionary.tsv")
    de_en = load_lexicon(f, "de-en")
    assert de_en["hund"] == "dog"                  # the shorter of two translations
    assert dictionary_baseline("Der Hund schläft, gut!", de_en, "de") == "The dog sleeps, good!"
    assert dictionary_baseline("Die Katze schläft.", de_en, "de") == "Die Katze sleeps."   # unknown copied
    en_de = load_lexicon(f, "en-de")
    assert en_de["sleep"] == "schlafen"            # "to sleep" indexed under "sleep"
    assert dictionary_baseline("Dogs sleep.", en_de, "en") == "Dogs schlafen."
    with pytest.raises(ValueError):
        load_lexicon(f, "fr-en")
    with pytest.raises(ValueError):
        dictionary_baseline("x", de_en, "fr")


def test_word_pattern_keeps_inner_apostrophes_and_hyphens():
    assert WORD_PATTERN.findall("Ich hab's, name-dropping: ja!") == ["Ich", "hab's", "name-dropping", "ja"]


def test_dictionary_baseline_translates_known_words(tiny_data):
    """The baseline really substitutes words from dictionary.tsv (and copies unknown ones)."""
    entries = [p for p in read_tsv(tiny_data / "dictionary.tsv") if len(p.de.split()) == 1 and len(p.en.split()) == 1]
    assert entries, "the fixture dictionary should have one-word entries"
    lex = load_lexicon(tiny_data / "dictionary.tsv", direction="de-en")
    word = entries[0].de
    out = dictionary_baseline(f"{word} xyzzy", lex, src_lang="de")
    assert out.split()[-1] == "xyzzy" and out.split()[0].lower() == lex[word.lower()].split()[0].lower()
