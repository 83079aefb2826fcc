"""Tests for aiayn.data: Ding parsing, leak-free splits, TSV/Moses readers, token batching, the dictionary
entries, obtaining the corpus and the ``aiayn data`` command (the word-by-word baseline: tests/test_baseline.py).

Fixtures: ``fixtures/ding_sample.txt`` holds real, unchanged lines of the Ding corpus (GPL-2.0-or-later,
Copyright Frank Richter, TU Chemnitz; header kept). ``fixtures/ding_constructed.txt`` holds a few
hand-written lines (marked as such) for error cases the real corpus does not contain.
Expected values below were worked out by hand from the raw lines, not by running the code.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from aiayn import data
from aiayn.data import (
    Pair, clean_text, first_synonym, is_sentence, make_splits, normalize, obtain_ding, parse_ding, parse_ding_line,
    read_moses, read_tsv, token_batches, write_tsv,
)

FIX = Path(__file__).parent / "fixtures"
SAMPLE = FIX / "ding_sample.txt"
CONSTRUCTED = FIX / "ding_constructed.txt"


def sample_line(prefix: str) -> str:
    """The fixture line starting with ``prefix`` (exactly one must exist)."""
    hits = [ln for ln in SAMPLE.read_text(encoding="utf-8").splitlines() if ln.startswith(prefix)]
    assert len(hits) == 1, (prefix, len(hits))
    return hits[0]


@pytest.fixture(scope="module")
def sample_pairs():
    pairs, report = parse_ding(SAMPLE)
    return pairs, report


# ---------------------------------------------------------------------------------------------- parsing
def test_fixture_keeps_license_header():
    head = SAMPLE.read_text(encoding="utf-8").splitlines()[:5]
    assert head[1].startswith("# Copyright (c) :: Frank Richter")
    assert "GPL Version 2 or later" in head[3]


def test_parse_sample_counts(sample_pairs):
    pairs, rep = sample_pairs
    text_lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    n_comment = sum(1 for ln in text_lines if ln.startswith("#"))
    assert rep.lines_read == len(text_lines)
    assert rep.comment_lines == n_comment == 6
    assert rep.entries == len(text_lines) - n_comment
    # the two real malformed lines of the corpus are in the sample (unbalanced parentheses)
    assert rep.malformed_lines == 2
    assert {ex[2][:20] for ex in rep.malformed_examples} == {"runde Klammer {f} [p", "geburtenstarke Jahrg"}
    assert rep.misaligned_lines == 0
    assert rep.pairs_kept == len(pairs)
    assert rep.sub_entries == rep.pairs_kept + rep.empty_after_cleaning
    # no annotation survives cleaning
    for p in pairs:
        for side in p:
            assert not any(c in side for c in "{}[]<>"), side
            assert side == side.strip() and "  " not in side


@pytest.mark.parametrize("prefix, expected", [
    ("das A und O [ugs.]", [("das A und O", "the nuts and bolts")]),
    ("Aal {m} (auf der Speisekarte)", [
        ("Aal", "Eel"), ("Aal blau", "Eel au bleu"),
        ("Aal grün", "Boiled Eel served with Parsley Sauce"), ("Aal in Aspik", "Jellied Eel")]),
    # '/MwSt.; MWSt./' is one abbreviation, its ';' no synonym boundary; "und/oder" stays
    ("Mehrwertsteuer {f} /MwSt.; MWSt./", [
        ("Mehrwertsteuer", "value-added tax"), ("ausschließlich Mehrwertsteuer", "exclusive of VAT"),
        ("ausschließlich Mehrwertsteuer und/oder Steuern", "exclusive of VAT and/or taxes")]),
    # ';' inside a sentence is kept; the gloss "(Handlung und Resultat)" goes
    ("Plagiat {n}", [
        ("Plagiat", "plagiarism"),
        ("Aus einem Buch abzuschreiben, ist Plagiat, aus zehn abzuschreiben, ist Forschung.",
         "To copy from one book is plagiarism; to copy from ten is research."),
        ("Dieser Artikel ist das Plagiat eines Vortrags, den ein Doktorand der Universität Lancaster gehalten hat.",
         "This article is a plagiarism of a lecture delivered by a PhD student from Lancaster University.")]),
    # ';' between synonym sentences splits; "(to do)" before the period leaves no space behind
    ("Nichtstun {n}; Müßiggang {m}", [
        ("Nichtstun", "idleness"), ("angenehmes Nichtstun", "pleasant idleness, dolce far niente"),
        ("Müßiggang ist aller Laster Anfang.", "The devil finds work for idle hands.")]),
    ("Grinsemännchen {n}", [("Grinsemännchen", "smiley"), ("Grinsemännchen", "smileys")]),
    ("Ich hab's geschafft!", [("Ich hab's geschafft!", "I've done it!")]),
    ("Dienst ist Dienst", [("Dienst ist Dienst und Schnaps ist Schnaps.",
                            "You shouldn't mix business with pleasure; there is a time and place for everything.")]),
    ("Konferenz für Sicherheit", [("Konferenz für Sicherheit und Zusammenarbeit in Europa",
                                   "Conference on Security and Cooperation in Europe")]),
    # ';' inside {overrode; overridden} and {vt} tags
    ("eine Automatik umgehen", [("eine Automatik umgehen", "to override an automatic device")]),
    ("Abbau {m} (Druck; Vakuum)", [("Abbau", "decay")]),
    # nested <...> helpers
    ("Namedropping {n}", [("Namedropping", "name-dropping"),
                          ("Er gibt ständig damit an, wen er alles kennt.", "He’s always name-dropping.")]),
])
def test_hand_checked_lines(prefix, expected):
    assert parse_ding_line(sample_line(prefix)) == [Pair(*e) for e in expected]


def test_long_line_sentence_semicolon_and_label_before_period():
    pairs = parse_ding_line(sample_line("Pracht {f}; Glanz {m}"))
    assert len(pairs) == 9
    assert pairs[0] == Pair("Pracht", "glory")
    # "[geh.]." -> label removed and no space left before the period
    assert pairs[7] == Pair("Da stand er in seiner ganzen Pracht / in all seiner Pracht.", "He was there in all his glory.")
    assert pairs[8] == Pair(
        "Der Mann darf sein Haupt nicht verhüllen, weil er Abbild und Abglanz Gottes ist; die Frau aber ist der Abglanz des Mannes.",
        "For a man indeed ought not to cover his head, forasmuch as he is the image and glory of God; "
        "but the woman is the glory of the man.")


def test_empty_side_is_dropped_and_reported():
    rep = data.ParseReport()
    pairs = parse_ding_line(sample_line("Brautschau {f}"), rep, line_no=7)
    assert pairs == [Pair("auf Brautschau gehen", "to go/be looking for a wife")]
    assert rep.empty_after_cleaning == 1 and rep.empty_examples[0][0] == 7


def test_constructed_misaligned_and_malformed_lines_are_reported():
    pairs, rep = parse_ding(CONSTRUCTED)
    assert pairs == [Pair("Katze", "cat"), Pair("Katzen", "cats"), Pair("Garten", "garden")]
    assert rep.misaligned_lines == 2
    assert [ex[0] for ex in rep.misaligned_examples] == [4, 5]
    assert rep.misaligned_examples[0][1] == "2 German vs 1 English sub-entries"
    assert rep.malformed_lines == 2
    assert [ex[0] for ex in rep.malformed_examples] == [7, 8]
    assert rep.blank_lines == 1 and rep.comment_lines == 3


def test_clean_text_rules():
    assert clean_text("Aal {m} (auf der Speisekarte) [cook.]") == "Aal"
    assert clean_text("calling and/or answering") == "calling and/or answering"   # not an /ABBR/
    assert clean_text("jdn./etw. ansehen") == "jdn./etw. ansehen"
    assert clean_text("Stunde /Std./") == "Stunde"
    assert clean_text("hour /h/ /hr/") == "hour"
    assert clean_text("to break in <> sth.") == "to break in sth."
    assert clean_text("a (b (c) d) e") == "a e"
    assert clean_text("idle hands (to do).") == "idle hands."
    assert clean_text("80 km/h fahren") == "80 km/h fahren"
    assert clean_text("{f} [Br.]") == ""


def test_first_synonym_rule():
    assert first_synonym("Es ist vorbei.; Es ist aus.; Es ist zu Ende.") == "Es ist vorbei."
    assert first_synonym("to be based; to be founded; to be premised [formal] on/upon sth..") == "to be based"
    assert first_synonym("Reiche {pl}; die Reichen {pl} soc.") == "Reiche"
    # "Sie kam" has < 3 words, so its ';' is a synonym boundary
    assert first_synonym("Sie kam; er ging; alle lachten.") == "Sie kam"
    assert first_synonym("Ich kam spät; der Zug war weg.") == "Ich kam spät; der Zug war weg."
    assert first_synonym("Abbau {m} (Druck; Vakuum)") == "Abbau"


def test_is_sentence():
    assert is_sentence("Er wird an der Konferenz nicht teilnehmen.")
    assert is_sentence("Schaffst du das alleine?")
    assert is_sentence("He asked: “What time is it?”")
    assert not is_sentence("„Wie spät ist es?“")             # German closing quote: see splits.SENTENCE_END
    assert not is_sentence("Es ist vorbei.")                  # 3 words
    assert not is_sentence("to be based on sth.")             # starts lower-case, ends in an abbreviation
    assert not is_sentence("Er wird an der Konferenz")        # no final punctuation
    assert not is_sentence("Er wollte gerade etw.")           # ends in an abbreviation


def test_parse_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        parse_ding(tmp_path / "nope.txt")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Größe {f} :: size\n".encode("latin-1"))
    with pytest.raises(ValueError, match="latin1.txt"):
        parse_ding(bad)
    only_comments = tmp_path / "c.txt"
    only_comments.write_text("# nothing\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no dictionary entries"):
        parse_ding(only_comments)


# ---------------------------------------------------------------------------------------------- splits
def _contained(held: list[Pair], train: list[Pair]) -> list[tuple[str, str]]:
    """Brute force: held-out normalised sides found inside any normalised train side."""
    train_sides = [normalize(s) for p in train for s in p]
    return [(h, t) for p in held for h in map(normalize, p) for t in train_sides if h in t]


@pytest.fixture(scope="module")
def leaky_corpus(sample_pairs):
    """Real sample pairs plus deliberate traps: each candidate sentence also appears (a) quoted inside a
    longer, non-sentence train entry and (b) as a case/whitespace variant with another translation, and
    (c) every pair is duplicated exactly."""
    pairs, _ = sample_pairs
    cands = [p for p in pairs if is_sentence(p.de) and is_sentence(p.en) and "/" not in p.de + p.en]
    traps = []
    for p in cands:
        traps.append(Pair(f"„{p.de}“ sagte sie leise", f"“{p.en}” she said quietly"))
        traps.append(Pair("  " + p.de.upper() + " ", "eine ganz andere Übersetzung"))
    return list(pairs) + traps + list(pairs), cands


def test_splits_have_no_leakage(leaky_corpus):
    corpus, cands = leaky_corpus
    splits, rep = make_splits(corpus, n_valid=15, n_test=30, seed=7, return_report=True)
    held = splits["valid"] + splits["test"]
    assert len(splits["valid"]) == 15 and len(splits["test"]) == 30
    assert _contained(held, splits["train"]) == []
    # every quoted trap of a held-out sentence was removed from train, and counted
    held_de = {p.de for p in held}
    n_quoted = sum(1 for p in cands if p.de in held_de)
    assert n_quoted == 45
    assert rep.train_removed_substring >= n_quoted
    assert rep.train_removed_exact >= n_quoted          # the upper-cased variants
    # the exact duplicates were removed
    assert rep.duplicates_removed >= (len(corpus) - 2 * len(cands)) // 2
    assert len({(normalize(a), normalize(b)) for a, b in splits["train"]}) == len(splits["train"])


def test_splits_disjoint_sentences_and_deterministic(leaky_corpus):
    corpus, _ = leaky_corpus
    a = make_splits(corpus, n_valid=15, n_test=30, seed=7)
    b = make_splits(corpus, n_valid=15, n_test=30, seed=7)
    c = make_splits(corpus, n_valid=15, n_test=30, seed=8)
    assert a == b
    assert a["test"] != c["test"]
    for side in (0, 1):
        assert not {normalize(p[side]) for p in a["valid"]} & {normalize(p[side]) for p in a["test"]}
    assert not {normalize(s) for p in a["valid"] for s in p} & {normalize(s) for p in a["test"] for s in p}
    for p in a["valid"] + a["test"]:
        assert is_sentence(p.de) and is_sentence(p.en) and "/" not in p.de + p.en


def test_split_sizes_add_up_and_too_few_candidates(sample_pairs):
    pairs, _ = sample_pairs
    splits, rep = make_splits(pairs, n_valid=5, n_test=10, seed=1, return_report=True)
    total = sum(len(v) for v in splits.values())
    assert total == len(pairs) - rep.duplicates_removed - rep.train_removed_exact - rep.train_removed_substring
    with pytest.raises(ValueError, match="not enough held-out candidates"):
        make_splits(pairs, n_valid=500, n_test=1000)
    # "all" pool: held-out may be phrases
    s_all = make_splits(pairs, n_valid=5, n_test=10, seed=1, heldout_pool="all")
    assert len(s_all["test"]) == 10


# ---------------------------------------------------------------------------------------------- TSV / Moses
def test_tsv_round_trip_keeps_special_strings(tmp_path):
    pairs = [Pair("NA", "null"), Pair('Er sagte "ja".', "He said 'yes'."), Pair("#", "nan"), Pair("a;b", "c,d")]
    f = write_tsv(pairs, tmp_path / "x.tsv")
    assert f.read_text(encoding="utf-8").splitlines()[0] == "de\ten"
    assert read_tsv(f) == pairs


def test_read_tsv_columns_and_errors(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_text("id\tsrc\ttgt\n1\tHallo Welt\tHello world\n2\tNA\tNone\n", encoding="utf-8")
    assert read_tsv(f, "src", "tgt") == [Pair("Hallo Welt", "Hello world"), Pair("NA", "None")]
    assert read_tsv(f, 1, 2, header=False)[1] == Pair("Hallo Welt", "Hello world")
    with pytest.raises(ValueError, match=r"c\.tsv.*no column 'de'"):
        read_tsv(f)
    with pytest.raises(FileNotFoundError, match="missing.tsv"):
        read_tsv(tmp_path / "missing.tsv")
    ragged = tmp_path / "ragged.tsv"
    ragged.write_text("de\ten\nA\tB\nC\tD\tE\n", encoding="utf-8")
    with pytest.raises(ValueError, match="ragged.tsv"):
        read_tsv(ragged)
    with pytest.raises(ValueError, match="tab or line break"):
        write_tsv([Pair("a\tb", "c")], tmp_path / "bad.tsv")


def test_read_moses(tmp_path):
    s, t = tmp_path / "c.de", tmp_path / "c.en"
    s.write_text("Guten Morgen.\nDanke!\n", encoding="utf-8")
    t.write_text("Good morning.\nThanks!\n", encoding="utf-8")
    assert read_moses(s, t) == [Pair("Guten Morgen.", "Good morning."), Pair("Danke!", "Thanks!")]
    t.write_text("Good morning.\nThanks!\nExtra line\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"c\.de has 2 lines, .*c\.en has 3"):
        read_moses(s, t)
    with pytest.raises(FileNotFoundError, match="none.en"):
        read_moses(s, tmp_path / "none.en")


# ---------------------------------------------------------------------------------------------- batching
def _random_lengths(n, seed=0):
    rng = random.Random(seed)
    src = [[5] * rng.randint(1, 120) for _ in range(n)]
    tgt = [[5] * rng.randint(1, 120) for _ in range(n)]
    return src, tgt


def test_token_batches_budget_and_coverage():
    src, tgt = _random_lengths(3000)
    batches = token_batches(src, tgt, max_tokens=2000, seed=3, epoch=0)
    seen = sorted(i for b in batches for i in b)
    assert seen == list(range(3000))
    padded = 0
    for b in batches:
        size = len(b) * max(max(len(src[i]), len(tgt[i]) + 1) for i in b)
        assert size <= 2000
        padded += size
    # length bucketing: padding overhead is small (random order would waste ~40 %)
    real = sum(max(len(s), len(t) + 1) for s, t in zip(src, tgt))
    assert real / padded > 0.9


def test_token_batches_deterministic_per_seed_and_epoch():
    src, tgt = _random_lengths(500, seed=1)
    a = token_batches(src, tgt, 1000, seed=3, epoch=0)
    assert a == token_batches(src, tgt, 1000, seed=3, epoch=0)
    assert a != token_batches(src, tgt, 1000, seed=3, epoch=1)
    assert a != token_batches(src, tgt, 1000, seed=4, epoch=0)
    unshuffled = token_batches(src, tgt, 1000, seed=3, epoch=0, shuffle=False)
    costs = [max(len(src[b[0]]), len(tgt[b[0]]) + 1) for b in unshuffled]
    assert costs == sorted(costs)


def test_token_batches_too_long_example():
    src = [[1] * 10, [1] * 50]
    tgt = [[1] * 10, [1] * 10]
    with pytest.raises(ValueError, match="example 1"):
        token_batches(src, tgt, max_tokens=40, seed=0, epoch=0)
    assert token_batches(src, tgt, max_tokens=40, seed=0, epoch=0, drop_long=True) == [[0]]
    with pytest.raises(ValueError):
        token_batches(src, tgt[:1], max_tokens=40)


# ---------------------------------------------------------------------------------------------- dictionary.tsv
def test_build_dictionary_uses_only_short_entries():
    train = [Pair("Hund", "dog"), Pair("Er schläft tief und fest.", "He is sound asleep."),
             Pair("der große Hund", "the big dog"), Pair("Hund", "dog")]
    assert data.build_dictionary(train) == [Pair("Hund", "dog")]


# ---------------------------------------------------------------------------------------------- obtaining
def test_obtain_ding_checksum(tmp_path):
    expected = hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    with pytest.raises(ValueError) as err:
        obtain_ding(tmp_path / "out", from_file=SAMPLE)       # checked against the real corpus hash
    msg = str(err.value)
    assert str(SAMPLE) in msg and data.DING_SHA256 in msg and expected in msg
    assert not (tmp_path / "out" / "de-en.txt").exists()
    with pytest.warns(UserWarning, match="sha256 mismatch"):
        got = obtain_ding(tmp_path / "out", from_file=SAMPLE, verify=False)
    assert got.read_bytes() == SAMPLE.read_bytes()
    # a present, verified copy is reused without downloading
    assert obtain_ding(tmp_path / "out", expected_sha256=expected) == got
    with pytest.raises(FileNotFoundError, match="absent.txt"):
        obtain_ding(tmp_path / "out", from_file=tmp_path / "absent.txt")


def test_cli_ding_end_to_end(tmp_path, capsys):
    out = tmp_path / "ding"
    assert data.cli_main(["ding", "--from", str(SAMPLE), "--out", str(out)]) == 1
    assert "sha256 mismatch" in capsys.readouterr().err
    with pytest.warns(UserWarning):
        code = data.cli_main(["ding", "--from", str(SAMPLE), "--no-verify", "--out", str(out),
                              "--vocab-size", "600", "--n-valid", "10", "--n-test", "20", "--seed", "3"])
    assert code == 0
    sheet = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))
    for name, n in (("train", None), ("valid", 10), ("test", 20)):
        rows = read_tsv(out / f"{name}.tsv")
        assert sheet["counts"][name]["pairs"] == len(rows)
        if n is not None:
            assert len(rows) == n
    assert sheet["source"]["license"] == "GPL-2.0-or-later"
    assert "Frank Richter" in (out / "DATASHEET.md").read_text(encoding="utf-8")
    held = read_tsv(out / "valid.tsv") + read_tsv(out / "test.tsv")
    assert _contained(held, read_tsv(out / "train.tsv")) == []
    # dictionary entries come from train only
    train_set = set(read_tsv(out / "train.tsv"))
    assert set(read_tsv(out / "dictionary.tsv")) <= train_set
    from aiayn.tokenizer import Tokenizer
    tok = Tokenizer.load(out / "spm.model")
    assert tok.vocab_size == 600 and tok.pad_id == 0 and tok.eos_id == 3


def test_cli_moses_and_tsv(tmp_path, sample_pairs, capsys):
    pairs, _ = sample_pairs
    src, tgt = tmp_path / "corpus.de", tmp_path / "corpus.en"
    src.write_text("".join(p.de + "\n" for p in pairs), encoding="utf-8")
    tgt.write_text("".join(p.en + "\n" for p in pairs), encoding="utf-8")
    out = tmp_path / "moses"
    assert data.cli_main(["moses", str(src), str(tgt), "--out", str(out), "--vocab-size", "600",
                          "--n-valid", "5", "--n-test", "10"]) == 0
    assert "wrote" in capsys.readouterr().out
    sheet = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))
    assert sheet["parameters"]["heldout_pool"] == "sentences"     # enough sentence pairs for "auto"
    assert [len(read_tsv(out / f"{n}.tsv")) for n in ("valid", "test")] == [5, 10]
    # a TSV without header, too few sentences for 40 held-out pairs -> "auto" falls back to all pairs
    nohead = tmp_path / "c.tsv"
    nohead.write_text("".join(f"{p.de}\t{p.en}\n" for p in pairs[:200]), encoding="utf-8")
    out2 = tmp_path / "tsv"
    assert data.cli_main(["tsv", str(nohead), "--no-header", "--out", str(out2), "--vocab-size", "600",
                          "--n-valid", "20", "--n-test", "20"]) == 0
    sheet2 = json.loads((out2 / "datasheet.json").read_text(encoding="utf-8"))
    assert sheet2["parameters"]["heldout_pool"] == "all"
    held = {normalize(s) for n in ("valid", "test") for p in read_tsv(out2 / f"{n}.tsv") for s in p}
    assert not held & {normalize(s) for p in read_tsv(out2 / "train.tsv") for s in p}
    # mismatched Moses files: clear error, exit code 1
    tgt.write_text("only one line\n", encoding="utf-8")
    assert data.cli_main(["moses", str(src), str(tgt), "--out", str(tmp_path / "bad")]) == 1
    assert "line counts differ" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- the package
def test_aiayn_data_does_not_import_torch():
    """``aiayn.data`` (and so ``aiayn data`` and the training data path) loads without torch."""
    import subprocess
    import sys

    code = "import sys, aiayn.data, aiayn.evaluation.baseline; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "False"


def test_aiayn_data_command_routes_to_prepare(capsys):
    from aiayn.cli import main
    from aiayn.data import prepare

    assert data.cli_main is prepare.cli_main
    with pytest.raises(SystemExit) as exc:
        main(["data", "--help"])
    assert exc.value.code == 0 and "{ding,debian,tsv,moses,sentence-kind,filter,all}" in capsys.readouterr().out


def test_substring_hits_finds_every_occurrence_with_its_owner():
    from aiayn.data.splits import substring_hits

    texts = ["the cat sat on the mat", "a dog", "the cat again and the cat"]
    hits = list(substring_hits(texts, [10, 11, 12], ["the cat", "dog", "bird"]))
    assert hits == [(10, "the cat"), (12, "the cat"), (12, "the cat"), (11, "dog")]
    # a needle never spans two texts (they are joined with newlines)
    assert list(substring_hits(["ab", "cd"], [0, 1], ["bc"])) == []
