"""Word alignment: AER against hand-computed cases, the gold file, pieces to words, reading links from maps."""
from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest

from aiayn.analysis import alignment as al

ROOT = Path(__file__).resolve().parents[1]
GOLD_DIR = ROOT / "assets" / "alignment"
GOLD = GOLD_DIR / "gold.de-en.tsv"
SECOND = GOLD_DIR / "second_pass.de-en.tsv"


# -- AER: hand-computed cases -------------------------------------------------------------------------------------
S = {(0, 0), (1, 2), (2, 1)}
P = S | {(3, 3), (3, 2)}


def test_aer_perfect():
    assert al.aer(S, S, P) == 0.0


def test_aer_all_wrong():
    assert al.aer({(0, 1), (1, 0)}, S, P) == 1.0


def test_aer_sure_only():
    # A = two of three sure links: 1 - (2 + 2) / (2 + 3) = 0.2
    assert al.aer({(0, 0), (1, 2)}, S, P) == pytest.approx(0.2)


def test_aer_possible_only():
    # A = one possible (not sure) link: 1 - (0 + 1) / (1 + 3) = 0.75
    assert al.aer({(3, 3)}, S, P) == pytest.approx(0.75)
    # no sure links at all: predicting only possible links costs nothing
    assert al.aer({(3, 3)}, set(), {(3, 3)}) == 0.0


def test_aer_mixed():
    # A = {sure, possible, wrong}: |A&S| = 1, |A&P| = 2, |A| = 3, |S| = 3 -> 1 - 3/6 = 0.5
    assert al.aer({(0, 0), (3, 2), (4, 4)}, S, P) == pytest.approx(0.5)


def test_aer_empty():
    assert al.aer(set(), S, P) == 1.0
    assert math.isnan(al.aer(set(), set(), set()))


def test_aer_sure_must_be_possible():
    with pytest.raises(ValueError, match="not in possible"):
        al.aer(S, S, {(0, 0)})


def test_counts_match_set_aer():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, s = rng.random((4, 5)) < 0.3, rng.random((4, 5)) < 0.3
        p = s | (rng.random((4, 5)) < 0.3)
        expect = al.aer(al.matrix_links(a), al.matrix_links(s), al.matrix_links(p))
        got = al.aer_from_counts(al.counts(a, s, p))
        assert (math.isnan(expect) and np.isnan(got)) or got == pytest.approx(expect)


def test_counts_broadcast_over_heads():
    s = np.eye(2, dtype=bool)
    a = np.stack([s, ~s])  # a perfect head and an all-wrong head
    assert al.aer_from_counts(al.counts(a, s, s)).tolist() == [0.0, 1.0]


def test_f1_hand():
    assert al.f1({(0, 0), (1, 1)}, {(0, 0), (2, 2), (3, 3)}) == pytest.approx((0.5, 1 / 3, 0.4))


# -- the gold file ------------------------------------------------------------------------------------------------
def _write(tmp_path, text):
    path = tmp_path / "g.tsv"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("line, message", [
    ("Ich bin .\tI am .", "2 tab-separated fields"),
    ("Ich bin .\tI am .\t0-0 3-1", "out of range"),
    ("Ich bin .\tI am .\t0-0 0-3", "out of range"),
    ("Ich bin .\tI am .\t0-0 1x1", "malformed"),
    ("Ich bin .\tI am .\t0-0 0p0", "given twice"),
    (" \tI am .\t", "empty sentence"),
])
def test_read_gold_names_the_bad_line(tmp_path, line, message):
    path = _write(tmp_path, "Wir sind da .\tWe are here .\t0-0 1-1 2-2 3-3\n" + line + "\n")
    with pytest.raises(ValueError, match=rf"g\.tsv:2: .*{message}"):
        al.read_gold(path)


def test_read_gold_sure_in_possible(tmp_path):
    (pair,) = al.read_gold(_write(tmp_path, "# comment\n\nIch bin da\tI am there\t0-0 1p1 2-2\n"))
    assert pair.sure == {(0, 0), (2, 2)} and pair.possible == {(0, 0), (1, 1), (2, 2)} and pair.line == 3


def test_gold_file_parses_in_range():
    pairs = al.read_gold(GOLD)  # raises on any index out of range
    assert len(pairs) >= 150
    assert len({(tuple(p.german), tuple(p.english)) for p in pairs}) == len(pairs)
    for p in pairs:
        assert 5 <= len(p.german) <= 25 and 5 <= len(p.english) <= 25, p.line
        assert p.sure <= p.possible and p.sure, p.line
        assert all(i < len(p.german) and j < len(p.english) for i, j in p.possible), p.line


def _build_module():
    spec = importlib.util.spec_from_file_location("build_gold", GOLD_DIR / "build_gold.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("hand, tsv", [("gold.hand.txt", GOLD), ("second_pass.hand.txt", SECOND)])
def test_tsv_built_from_hand_source(hand, tsv):
    rows = _build_module().convert(GOLD_DIR / hand)
    assert rows == tsv.read_text(encoding="utf-8").splitlines()


def test_build_gold_rejects_unknown_and_ambiguous_words(tmp_path):
    build = _build_module()
    for links, message in [("Ich-We", "not a token"), ("das-the", "occurs 2 times")]:
        src = tmp_path / "h.txt"
        src.write_text(f"Ich sehe das Haus\nI see the house and the tree\n{links}\n", encoding="utf-8")
        with pytest.raises(SystemExit, match=message):
            build.convert(src)


def test_second_pass_agreement_matches_readme():
    first, second = al.read_gold(GOLD), al.read_gold(SECOND)
    assert len(second) >= 30
    got = al.agreement(first, second)
    readme = (GOLD_DIR / "README.md").read_text(encoding="utf-8")
    for key in ("aer_second_vs_first", "aer_first_vs_second", "sure_f1", "all_f1"):
        m = re.search(rf"`{key}`[^|\n]*\| *([0-9.]+)", readme)
        assert m, key
        assert float(m.group(1)) == pytest.approx(got[key], abs=5e-4), key


def test_agreement_hand():
    a = [al.GoldPair(["a", "b"], ["x", "y"], frozenset({(0, 0), (1, 1)}), frozenset({(0, 0), (1, 1)}), 1)]
    b = [al.GoldPair(["a", "b"], ["x", "y"], frozenset({(0, 0)}), frozenset({(0, 0), (1, 0)}), 1)]
    got = al.agreement(a, b)
    # second's sure {(0,0)} vs first: 1 - (1 + 1) / (1 + 2) = 1/3; first vs second: 1 - (1 + 1) / (2 + 1) = 1/3
    assert got["aer_second_vs_first"] == pytest.approx(1 / 3) and got["aer_first_vs_second"] == pytest.approx(1 / 3)
    assert got["sure_f1"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="not in the first pass"):
        al.agreement(a, [b[0]._replace(german=["c", "d"])])


# -- pieces to words ----------------------------------------------------------------------------------------------
def test_piece_words():
    pieces = ["▁Der", "▁Kühl", "schrank", "▁ist", "▁leer", ".", "</s>"]
    assert al.piece_words(pieces, ["Der", "Kühlschrank", "ist", "leer", "."]).tolist() == [0, 1, 1, 2, 3, 4, -1]


def test_piece_words_byte_pieces_and_a_word_split_by_the_tokenizer():
    pieces = ["<s>", "▁K", "<0xC3>", "<0xBC>", "hl", "▁o", "'", "clock", "▁", ".", "</s>"]
    assert al.piece_words(pieces, ["Kühl", "o'clock", "."]).tolist() == [-1, 0, 0, 0, 0, 1, 1, 1, -1, 2, -1]


@pytest.mark.parametrize("pieces, message", [
    (["▁Der", "<unk>", "</s>"], "<unk>"),
    (["▁Der", "▁Hund", "</s>"], "does not continue"),
    (["▁Der", "</s>"], "spell only"),
])
def test_piece_words_errors(pieces, message):
    with pytest.raises(ValueError, match=message):
        al.piece_words(pieces, ["Der", "Zug"])


def test_query_words_shift():
    t = np.array([0, 0, 1, 2, -1])  # word 0 has two pieces, then words 1 and 2, then </s>
    assert al.query_words(t, shift=False).tolist() == [0, 0, 1, 2, -1]
    assert al.query_words(t, shift=True).tolist() == [-1, 0, 0, 1, 2]


def test_word_maps_hand():
    m = np.array([[0.1, 0.2, 0.7],
                  [0.3, 0.3, 0.4],
                  [0.5, 0.5, 0.0]])
    # rows: pieces 0 and 1 are word 0, piece 2 is nothing; columns: pieces 0, 1 are word 1, piece 2 is word 0
    got = al.word_maps(m, np.array([0, 0, -1]), np.array([1, 1, 0]), 1, 2)
    assert got == pytest.approx(np.array([[(0.7 + 0.4) / 2, (0.3 + 0.6) / 2]]))
    stacked = al.word_maps(np.stack([m, m]), np.array([0, 0, -1]), np.array([1, 1, 0]), 2, 2)
    assert stacked.shape == (2, 2, 2) and stacked[:, 1].tolist() == [[0.0, 0.0]] * 2  # word 1 has no piece
    with pytest.raises(ValueError, match="shape"):
        al.word_maps(m, np.array([0, 0]), np.array([1, 1, 0]), 1, 2)


def test_extract_hand():
    m = np.array([[0.6, 0.3, 0.1],
                  [0.5, 0.1, 0.4]])  # target words x source words
    tgt = {(0, 0), (1, 0)}
    src = {(0, 0), (0, 1), (1, 2)}
    assert al.matrix_links(al.extract(m, "target")) == tgt
    assert al.matrix_links(al.extract(m, "source")) == src
    assert al.matrix_links(al.extract(m, "intersection")) == tgt & src
    assert al.matrix_links(al.extract(m, "union")) == tgt | src
    assert al.extract(np.stack([m, m[:, ::-1]]), "target").shape == (2, 2, 3)
    with pytest.raises(ValueError, match="method"):
        al.extract(m, "max")


def test_link_matrix_roundtrip_transposed():
    links = {(0, 2), (1, 0)}
    mat = al.link_matrix(links, (3, 2), transpose=True)
    assert mat.shape == (3, 2) and mat[2, 0] and mat[0, 1]
    assert al.matrix_links(mat, transpose=True) == links


def test_readouts():
    m = np.arange(2 * 3 * 2 * 2, dtype=float).reshape(2, 3, 2, 2)
    r = al.readouts(m)
    assert r["layer"].shape == (2, 2, 2) and r["layer"][1] == pytest.approx(m[1].mean(axis=0))
    assert r["model"] == pytest.approx(m.reshape(6, 2, 2).mean(axis=0))


def test_sentence_counts_hand():
    # 1 layer, 2 heads; 2 source words of one piece each + </s>; 2 target words + </s>
    good = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.3, 0.7, 0.0]])  # rows 0, 1 attend to words 0, 1
    bad = np.array([[0.4, 0.6, 0.0], [0.6, 0.4, 0.0], [0.5, 0.5, 0.0]])  # rows 0, 1 attend to words 1, 0
    maps = np.stack([good, bad])[None]  # (1, 2, 3, 3)
    src, tgt = np.array([0, 1, -1]), np.array([0, 1, -1])
    sure = np.eye(2, dtype=bool)
    c = al.sentence_counts(maps, src, tgt, sure, sure)
    assert c.shape == (2, len(al.METHODS), 1 * 2 + 1 + 1, 4)
    aer = al.aer_from_counts(c)
    # no shift: good head right, bad head wrong twice, the mean of both (rows [0.65, 0.35], [0.4, 0.6]) right
    assert aer[0, al.METHODS.index("target")].tolist() == [0.0, 1.0, 0.0, 0.0]
    # shift: word 0 is read at row 1, word 1 at row 2. good: 0 -> 1 wrong, 1 -> 1 right: 1 - (1 + 1) / (2 + 2);
    # bad: 0 -> 0 right, 1 -> 0 (a tie goes to the lowest index) wrong: the same
    assert aer[1, al.METHODS.index("target"), :2].tolist() == [0.5, 0.5]
    parts = al.split_readouts(aer, 1, 2)
    assert parts["head"].shape == (2, len(al.METHODS), 1, 2) and parts["model"].shape == (2, len(al.METHODS))
    assert parts["layer"][0, 0].tolist() == [0.0]
