"""IBM Model 1 by EM: Koehn's textbook example by hand, NLTK's IBMModel1 where installed, errors."""
from __future__ import annotations

import numpy as np
import pytest

from aiayn.analysis import ibm1

# Koehn (2010), "Statistical Machine Translation", Section 4.2.3: German source, English target
SOURCES = [["das", "haus"], ["das", "buch"], ["ein", "buch"]]
TARGETS = [["the", "house"], ["the", "book"], ["a", "book"]]


def test_tokenize():
    assert ibm1.tokenize("Der Zug fährt um acht Uhr ab.") == ["der", "zug", "fährt", "um", "acht", "uhr", "ab", "."]
    assert ibm1.tokenize("at eight o'clock, please") == ["at", "eight", "o'clock", ",", "please"]


def test_first_iteration_by_hand():
    """One EM step from a uniform t, with NULL: in "das haus" / "the house" each English word spreads 1/3 over
    NULL, das, haus. count(the, das) = 1/3 + 1/3 (two sentences), total(das) = 4 * 1/3, so t(the | das) = 1/2;
    count(book, buch) = 2/3, total(buch) = 4/3: t(book | buch) = 1/2; t(house | haus) = (1/3) / (2/3) = 1/2."""
    t = ibm1.train_ibm1(TARGETS, SOURCES, iterations=1).table()
    assert t[("the", "das")] == pytest.approx(0.5)
    assert t[("book", "buch")] == pytest.approx(0.5)
    assert t[("house", "haus")] == pytest.approx(0.5)
    assert t[("a", "ein")] == pytest.approx(0.5)
    # NULL meets all six English tokens, 1/3 each: count(the, NULL) = 2 * 1/3, total(NULL) = 6 * 1/3 = 2
    assert t[("the", ibm1.NULL)] == pytest.approx((2 / 3) / 2)


def test_converges_to_the_right_links():
    model = ibm1.train_ibm1(TARGETS, SOURCES, iterations=20)
    t = model.table()
    assert t[("the", "das")] > 0.9 and t[("book", "buch")] > 0.9 and t[("house", "haus")] > 0.9
    got = model.viterbi(["the", "book"], ["das", "buch"])
    assert got.tolist() == [[True, False], [False, True]]
    # an unknown word links nowhere; NULL wins nowhere here
    assert model.viterbi(["the", "zebra"], ["das", "buch"]).tolist() == [[True, False], [False, False]]


def test_matches_nltk():
    nltk_ibm = pytest.importorskip("nltk.translate")
    from nltk.translate import AlignedSent

    sources = SOURCES + [["das", "buch", "ist", "klein"], ["ein", "haus", "ist", "klein"], ["klein", "ist", "gut"]]
    targets = TARGETS + [["the", "book", "is", "small"], ["a", "house", "is", "small"], ["small", "is", "good"]]
    ours = ibm1.train_ibm1(targets, sources, iterations=5).table()
    theirs = nltk_ibm.IBMModel1([AlignedSent(t, s) for t, s in zip(targets, sources)], 5).translation_table
    for (e, f), p in ours.items():
        assert theirs[e][None if f == ibm1.NULL else f] == pytest.approx(p, rel=1e-6), (e, f)


def test_errors():
    with pytest.raises(ValueError, match="2 targets but 1 sources"):
        ibm1.train_ibm1([["a"], ["b"]], [["x"]])
    with pytest.raises(ValueError, match="iterations"):
        ibm1.train_ibm1([["a"]], [["x"]], iterations=0)
    with pytest.raises(ValueError, match="no target words"):
        ibm1.train_ibm1([[]], [["x"]])
