"""Tests for back-translation (``aiayn backtranslate``, issue 21): the reader of German and English fortunes
(:mod:`aiayn.data.monolingual`), the held-out checks, the folder writer, the translation loop and the command, in
both directions (``--language de``: German text, a de-en model; ``--language en``: English text, an en-de model).

Fixtures: ``fixtures/fortunes/`` holds two excerpts of Debian's fortunes-de 0.35-1 (``zitate``, ``sprichworte``) and
``fixtures/fortunes/en/`` two of fortunes and fortunes-min 1:1.99.1-7.3 (``people``, ``fortunes``; licences and line
numbers in the README there), copied unchanged; the expected sentences below were read off them by hand. The package
tests pack them into small ``.deb`` files with ``dpkg-deb`` (nothing is downloaded). The models are the tiny random
checkpoints of ``conftest.py``: they test the plumbing, not translation quality.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from aiayn.data import backtranslate as bt
from aiayn.data import monolingual as mono
from aiayn.data.corpora import read_tsv
from aiayn.data.splits import normalize
from aiayn.evaluation.devsets import DEVSETS_DIR, read_devset

FIX = Path(__file__).parent / "fixtures" / "fortunes"
FILES = {name: (FIX / name).read_text(encoding="utf-8") for name in ("zitate", "sprichworte")}
#: the sentences of the fixture, in file order, as read by hand: the attribution and the note with a URL below it
#: gone, the dialogue script (C: / H:) skipped, two-sentence fortunes split, "daß" and "Fluß" respelled, the
#: proverb without a final full stop dropped, and the Rousseau sentence kept once (it is in both files)
EXPECTED = [
    "Man braucht nicht geistreich zu sein, um zu beweisen, dass man begabt ist.",
    "Aber man braucht viel Geist, um zu verbergen, dass man keine Begabung hat.",
    "Das beste an der Zukunft ist vielleicht der Umstand, dass immer nur ein Tag auf einmal kommt.",
    "Die Verhandlungen dürfen ferner nicht zu früh von wirtschaftsfremden Themen sowie von Verbraucherschutz "
    "überlagert werden.",
    "Willst du dich in Abhängigkeit von Menschen begeben, die du verachtest?",
    "Die Zeit ist der beste Lehrer.",
    "Leider tötet sie ihre Schüler.",
    "Du sollst das Krokodil erst reizen, wenn der Fluss hinter dir liegt.",
]
COPYRIGHT = (b"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
             b"Upstream-Name: fortunes-de\n\nFiles: *\nCopyright: 1999-2012 Andreas Tille <tille@debian.org>\n"
             b"License: GPL-2+\n")

EN_FIX = FIX / "en"
EN_FILES = {name: (EN_FIX / name).read_text(encoding="utf-8") for name in ("people", "fortunes")}
#: the English sentences of the fixture, file order (people, then fortunes), as read by hand: attributions gone,
#: "Dr." and "Mrs." not cut, the heading "Largest Number of Driving Test Failures" (no full stop) rejected and kept
#: out of the tab-indented paragraph below it, the 35-word sentence about the fortieth attempt and "Or is it?"
#: rejected, the two paragraphs of "A long-forgotten loved one ..." cut, the quotes around "Life, ..." removed
EXPECTED_EN = [
    "Do you know, I think that Dr. Swift was silly to laugh about Laputa.",
    "I believe it is a mistake to make a mock of people, just because they think.",
    "There are ninety thousand people in this world who do not think, for every one who does, and these people hate "
    "the thinkers like poison.",
    "Even if some thinkers are fanciful, it is wrong to make fun of them for it.",
    "Better to think about cucumbers even, than not to think at all.",
    "Lack of money is the root of all evil.",
    "By April 1970 Mrs. Miriam Hargrave had failed her test thirty-nine times.",
    "In the eight preceding years she had received two hundred and twelve driving lessons at a cost of L300.",
    "She set the new record while driving triumphantly through a set of red traffic lights in Wakefield, Yorkshire.",
    "Last guys don't finish nice.",
    "A day for firm decisions!!!!!",
    "A few hours grace before the madness begins again.",
    "A gift of a flower will soon be made to you.",
    "A long-forgotten loved one will appear soon.",
    "Buy the negatives at any price.",
    "Life, loathe it or ignore it, you can't like it.",
]
#: the copyright file of fortunes and fortunes-min 1:1.99.1-7.3, shortened: the BSD licence without its name
BSD_COPYRIGHT = (b"This program falls under the BSD copyright:\n\nCopyright (c) 1991 The Regents of the University of "
                 b"California.\nAll rights reserved.\n\nRedistribution and use in source and binary forms, with or "
                 b"without\nmodification, are permitted provided that the following conditions\nare met:\n\n1. "
                 b"Redistributions of source code must retain the above copyright\n   notice, this list of conditions "
                 b"and the following disclaimer.\n3. [ Deleted.  see :-\n   ]\n4. Neither the name of the University "
                 b"nor the names of its contributors\n   may be used to endorse or promote products derived from this "
                 b"software\n   without specific prior written permission.\n")


# ---------------------------------------------------------------------------------------------------------
# Reading German fortunes
# ---------------------------------------------------------------------------------------------------------
def test_fortunes_drop_attributions_notes_and_dialogue_scripts():
    counts: dict = {}
    paragraphs = mono.fortunes(FILES["zitate"], counts)
    assert counts == {"fortunes": 4, "dialogue_skipped": 1}
    assert not any("--" in p or "http" in p or "Achard" in p or "Genetisch" in p for p in paragraphs)
    assert paragraphs[0] == ("Man braucht nicht geistreich zu sein, um zu beweisen, daß man begabt ist. Aber man "
                             "braucht viel Geist, um zu verbergen, daß man keine Begabung hat.")
    assert paragraphs[2].endswith("von Verbraucherschutz überlagert werden.")  # the URL below the attribution is gone


def test_fortune_sentences_of_the_fixture():
    files = {**FILES, "zitate.u8": FILES["zitate"], "quiz": "Wer hat das Rad erfunden und warum nur?\n%\n"}
    sentences, counts = mono.fortune_sentences(files)
    assert sentences == EXPECTED
    assert counts["skipped_files"] == ["zitate.u8", "quiz"]
    assert counts["duplicates"] == 1 and counts["kept"] == 8
    assert counts["files"]["zitate"] == {"fortunes": 4, "dialogue_skipped": 1, "sentences": 5, "rejected": 0,
                                         "respelled": 3, "kept": 5}
    assert counts["files"]["sprichworte"]["rejected"] == 1 and counts["files"]["sprichworte"]["kept"] == 3


@pytest.mark.parametrize("paragraph, want", [
    ("Die Zeit ist der beste Lehrer. Leider tötet sie ihre Schüler.",
     ["Die Zeit ist der beste Lehrer.", "Leider tötet sie ihre Schüler."]),
    ('Er rief: „Hilfe!“ Dann war es still. Wirklich? "Ja."', ['Er rief: „Hilfe!“', "Dann war es still.",
                                                              "Wirklich?", '"Ja."']),
    ("Am 30. Mai kam Dr. Müller mit Hermann J. Abs. Das war z. B. nicht seine Art. Er ging.",
     ["Am 30. Mai kam Dr. Müller mit Hermann J. Abs.", "Das war z. B. nicht seine Art.", "Er ging."]),
    ("Ist das so? ja, das ist so.", ["Ist das so? ja, das ist so."]),  # lower case after "?": no cut
])
def test_split_sentences(paragraph, want):
    assert mono.split_sentences(paragraph) == want


@pytest.mark.parametrize("sentence, keep", [
    ("Die Zeit ist der beste Lehrer.", True),
    ("Jedem Narren gefällt seine Kappe.", True),
    ('Er sagte: "Das ist ganz einfach."', True),
    ("Er sagte: „Das ist ganz einfach.“", False),                        # is_sentence: “ does not close one
    ("Am 30. Mai kam er nach Hause.", True),
    ("Am 30. Mai 1998 kam er nach Hause.", False),                       # 6 digits
    # fortunes-de 0.35-1, file `debian` (Debian Tipp #10): a URL inside a sentence
    ("Schauen sie doch mal die Auflistung unter http://www.debian.org/MailingLists/ an, und abonieren Sie die "
     "Listen, die sie interessieren.", False),
    ("Schreiben Sie an tille@debian.org und fragen Sie.", False),      # e-mail
    ("Das ist <b>ganz</b> wichtig für uns.", False),                    # markup
    ("Der Rest ist Schweigen... und dann nichts.", False),               # ellipsis
    ("Das ist -- wie immer -- ganz einfach.", False),
    ("Ein Wort " * 13 + "Ende.", False),                                # 27 words
    ("Die Nummer 12345 ist vergeben.", False),                           # 5 digits
    ("DAS IST EIN SEHR LAUTER SATZ.", False),                            # upper case
    ("Ich kam nach Hause.\" Dann ging er.", False),                      # a quotation cut in two
    ("Folgerungen: 1. Es gibt keine Gewinner. 2. Der Computer gewinnt.", False),  # an enumeration
    ("Das kostet 5 € im Monat.", False),                                 # not in the character set
    ("Die Zeit ist der beste Lehrer", False),                             # no final punctuation
])
def test_keep_sentence(sentence, keep):
    assert mono.keep_sentence(sentence) is keep


def test_modern_spelling_is_word_bounded_and_case_sensitive():
    assert mono.modern_spelling("Daß er muß, weiß ich, daß er's läßt.") == "Dass er muss, weiß ich, dass er's lässt."
    assert mono.modern_spelling("Das Flußpferd zieht den Schlußstrich.") == "Das Flußpferd zieht den Schlußstrich."
    assert mono.modern_spelling("DASS DAß") == "DASS DAß"
    assert all(old != new and "ß" in old for old, new in mono.RESPELLINGS.items())  # no no-op entries


def test_clean_sentences_filters_strips_quotes_and_deduplicates():
    counts: dict = {}
    got = mono.clean_sentences(['"Die Zeit ist der beste Lehrer."', "die zeit ist der beste  lehrer.",
                                "Zu kurz.", "Die  Zeit ist der  beste Lehrer."], counts)
    assert got == ["Die Zeit ist der beste Lehrer."]
    assert counts == {"sentences": 4, "rejected": 2, "duplicates": 1, "kept": 1}


def _pack_deb(root: Path, deb_dir: Path, package: str, version: str, folder: str, files: dict[str, Path | str],
              copyright_text: bytes) -> Path:
    """A ``.deb`` of ``package`` with ``files`` (name -> fixture path, or text) in ``folder``, a ``NAME.u8`` link
    beside each fixture file (as in the packages) and a copyright file."""
    if not shutil.which("dpkg-deb"):
        pytest.skip("dpkg-deb is not installed (Debian/Ubuntu only)")
    d = root / package
    (d / "DEBIAN").mkdir(parents=True)
    (d / "DEBIAN" / "control").write_text(f"Package: {package}\nVersion: {version}\nArchitecture: all\n"
                                          "Maintainer: test <t@example.org>\nDescription: aiayn test fixture\n")
    games = d / folder
    games.mkdir(parents=True)
    for name, src in files.items():
        if isinstance(src, Path):
            shutil.copyfile(src, games / name)
            (games / f"{name}.u8").symlink_to(name)
        else:
            (games / name).write_text(src, encoding="utf-8")
    (d / f"usr/share/doc/{package}").mkdir(parents=True)
    (d / f"usr/share/doc/{package}/copyright").write_bytes(copyright_text)
    deb_dir.mkdir(parents=True, exist_ok=True)
    deb = deb_dir / f"{package}_{version.replace(':', '%3a')}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(d), str(deb)], check=True,
                   capture_output=True)
    return deb


def _build_deb(root: Path, deb_dir: Path) -> Path:
    """fortunes-de 0.35-1 with the fixture's two files (and ``.u8`` links as in the package)."""
    return _pack_deb(root, deb_dir, "fortunes-de", "0.35-1", mono.FORTUNES_DIR, {name: FIX / name for name in FILES},
                     COPYRIGHT)


@pytest.fixture(scope="module")
def fortunes_deb(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("fortunes")
    return _build_deb(tmp, tmp / "debs")


def test_obtain_fortunes_reads_the_cached_deb(fortunes_deb, tmp_path):
    files, record = mono.obtain_fortunes("fortunes-de", fortunes_deb.parent, download=False)
    assert files == FILES  # the .u8 symlinks are not files
    assert record == {"package": "fortunes-de", "version": "0.35-1", "file": "fortunes-de_0.35-1_all.deb",
                      "sha256": hashlib.sha256(fortunes_deb.read_bytes()).hexdigest(), "licence": "GPL-2+",
                      "path": "usr/share/games/fortunes/de/"}
    with pytest.raises(FileNotFoundError, match="not in"):
        mono.obtain_fortunes("fortunes-de", tmp_path, download=False)


# ---------------------------------------------------------------------------------------------------------
# Reading English fortunes (fortunes, fortunes-min)
# ---------------------------------------------------------------------------------------------------------
#: files the English reader skips by name although their text passes the sentence filter: a Latin saying (the
#: package's translate-me holds Latin and French) and a programming joke (perl)
LATIN = "Aliquid melius quam pessimum optimum non est.\n%\n"
PERL = "Perl is a language that reads the same before and after encryption.\n%\n"


def test_english_fortunes_keep_indented_paragraphs_and_end_one_at_a_heading():
    counts: dict = {}
    paragraphs = mono.fortunes(EN_FILES["people"], counts, language="en")
    assert counts == {"fortunes": 4}
    assert not any("--" in p or "T. H. White" in p or "Shaw" in p or "Heroic" in p for p in paragraphs)
    i = paragraphs.index("Largest Number of Driving Test Failures")  # a heading: its own paragraph
    assert paragraphs[i + 1].startswith("By April 1970 Mrs. Miriam Hargrave had failed her test thirty-nine times.")
    # German fortunes drop tab-indented lines; here that would run the heading into a fragment of the paragraph
    assert "Largest Number of Driving Test Failures times." in mono.fortune_sentences(
        {"people": EN_FILES["people"]})[0]
    # a blank line ends a paragraph
    assert mono.fortunes(EN_FILES["fortunes"], language="en")[3:5] == ["A long-forgotten loved one will appear soon.",
                                                                     "Buy the negatives at any price."]


def test_fortune_sentences_of_the_english_fixture():
    # several packages' files, told apart by the package's name; the rules look at the base name
    files = {"fortunes/people": EN_FILES["people"], "fortunes/people.u8": EN_FILES["people"],
             "fortunes/translate-me": LATIN, "fortunes/perl": PERL, "fortunes-min/fortunes": EN_FILES["fortunes"]}
    sentences, counts = mono.fortune_sentences(files, language="en")
    assert sentences == EXPECTED_EN
    assert counts["skipped_files"] == ["fortunes/people.u8", "fortunes/translate-me", "fortunes/perl"]
    assert counts["files"]["fortunes/people"] == {"fortunes": 4, "dialogue_skipped": 0, "verse_skipped": 0,
                                                  "sentences": 12, "rejected": 2, "kept": 10}
    assert counts["files"]["fortunes-min/fortunes"] == {"fortunes": 5, "dialogue_skipped": 0, "verse_skipped": 0,
                                                        "sentences": 7, "rejected": 1, "kept": 6}
    assert counts["duplicates"] == 0 and counts["kept"] == 16
    # the German skip list is not the English one, and English is not respelled
    got, c = mono.fortune_sentences({"quiz": "Laß das, sagte er und ging nach Hause.\n%\n"}, language="en")
    assert got == ["Laß das, sagte er und ging nach Hause."] and "respelled" not in c["files"]["quiz"]
    with pytest.raises(ValueError, match="language"):
        mono.fortune_sentences(files, language="fr")


def test_english_verse_dialogue_scripts_and_table_rows_are_skipped():
    text = ("The rain falls on the hill\nAnd on the quiet town,\nThe river carries still\nThe leaves it washes down.\n"
            "%\nQ:\tWhy did the farmer cross the field?\nA:\tTo reach the other gate.\n%\n"
            "Mrs. Brown said that\nI would win the race, and\nthen I did win it.\n%\n"
            "Great days of the fair:\nMay 9\t\tThe first day was the best one.\nMay 10\t\tIt rained all day long.\n%\n")
    counts: dict = {}
    assert mono.fortunes(text, counts, language="en") == [
        "Mrs. Brown said that I would win the race, and then I did win it.",  # one capital after a line break: prose
        "Great days of the fair:"]                                            # the table rows dropped
    assert counts == {"fortunes": 2, "verse_skipped": 1, "dialogue_skipped": 1}
    assert len(mono.fortunes(text, language="de")) == 3  # German keeps verse (fortunes-de's gedichte)


@pytest.mark.parametrize("paragraph, want", [
    ("Mr. Smith went to Washington. He stayed there.", ["Mr. Smith went to Washington.", "He stayed there."]),
    ("Thomas K. Connellan met Dr. Who and Mrs. Brown at St. Paul's. They talked.",
     ["Thomas K. Connellan met Dr. Who and Mrs. Brown at St. Paul's.", "They talked."]),
    ("Big cities, e.g. New York, are loud. Small ones, i.e. Ely, are not. He worked for the U.S. Mint for years.",
     ["Big cities, e.g. New York, are loud.", "Small ones, i.e. Ely, are not.",
      "He worked for the U.S. Mint for years."]),
    ("I said, 'Mr. Jones is here.' Then I left.", ["I said, 'Mr. Jones is here.'", "Then I left."]),
    ("So did I. Then we left.", ["So did I.", "Then we left."]),                    # "I" is no initial
    ("It happened in 1969. Then we left.", ["It happened in 1969.", "Then we left."]),  # no ordinals in English
    ("“Is it late?” “Yes, it is.” He left.", ["“Is it late?”", "“Yes, it is.”", "He left."]),
    ('"Certainly," she replied. "They would not sell." `No?\' he asked.',
     ['"Certainly," she replied.', '"They would not sell."', "`No?' he asked."]),
])
def test_split_english_sentences(paragraph, want):
    assert mono.split_sentences(paragraph, language="en") == want


def test_split_sentences_keeps_the_german_rules():
    assert mono.split_sentences("Es geschah am 30. Mai. Dann ging er.") == ["Es geschah am 30. Mai.", "Dann ging er."]
    assert mono.split_sentences("Es geschah am 30. Mai. Dann ging er.", language="en") == [
        "Es geschah am 30.", "Mai.", "Dann ging er."]
    with pytest.raises(ValueError, match="language"):
        mono.split_sentences("Ja.", language="fr")


@pytest.mark.parametrize("sentence, keep", [
    ("He said “yes” and then he left.", True),                      # curly quotes
    ("He said “yes and then he left.", False),
    ('"Yes," he said, "we will do it."', True),                       # straight quotes
    ('He said "yes and then he left.', False),
    ("Don't say \"never\" to me again.", True),                        # apostrophes are no quotes
    ("He said: “It is done now.”", True),
    ("(1) Never eat on an empty stomach.", False),                     # a list item
    ("A clash of ideas is not a disaster -- it is a chance.", False),  # ASCII dashes, as in German
])
def test_keep_english_sentence(sentence, keep):
    assert mono.keep_sentence(sentence) is keep


@pytest.fixture(scope="module")
def english_debs(tmp_path_factory) -> Path:
    """fortunes and fortunes-min 1:1.99.1-7.3 with the English fixture (and two files the reader skips)."""
    tmp = tmp_path_factory.mktemp("fortunes-en")
    debs, folder = tmp / "debs", mono.FORTUNES_DIRS["en"]
    _pack_deb(tmp, debs, "fortunes", "1:1.99.1-7.3", folder,
              {"people": EN_FIX / "people", "translate-me": LATIN, "perl": PERL}, BSD_COPYRIGHT)
    _pack_deb(tmp, debs, "fortunes-min", "1:1.99.1-7.3", folder, {"fortunes": EN_FIX / "fortunes"}, BSD_COPYRIGHT)
    return debs


def test_obtain_english_fortunes(english_debs, fortunes_deb):
    files, record = mono.obtain_fortunes("fortunes", english_debs, download=False, language="en")
    assert files == {"people": EN_FILES["people"], "translate-me": LATIN, "perl": PERL}
    deb = english_debs / "fortunes_1%3a1.99.1-7.3_all.deb"
    assert record == {"package": "fortunes", "version": "1:1.99.1-7.3", "file": deb.name,
                      "sha256": hashlib.sha256(deb.read_bytes()).hexdigest(), "licence": "BSD-3-clause",
                      "path": "usr/share/games/fortunes/"}
    files, record = mono.obtain_fortunes("fortunes-min", english_debs, download=False, language="en")
    assert files == {"fortunes": EN_FILES["fortunes"]} and record["licence"] == "BSD-3-clause"
    # fortunes-de keeps its files one folder down, so it has none in the English folder
    with pytest.raises(ValueError, match="no fortune files in usr/share/games/fortunes/"):
        mono.obtain_fortunes("fortunes-de", fortunes_deb.parent, download=False, language="en")


# ---------------------------------------------------------------------------------------------------------
# Held-out checks
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tiny_data) -> Path:
    """The tiny data folder of conftest as ``aiayn data debian`` writes one: with ``train_kinds.txt``, a datasheet
    with kinds and file digests, ``DATASHEET.md`` and a token cache ``cache/``."""
    d = tmp_path_factory.mktemp("bt") / "data"
    shutil.copytree(tiny_data, d)
    n = len(read_tsv(d / "train.tsv"))
    (d / "train_kinds.txt").write_text("ding\n" * n, encoding="utf-8")
    sheet = json.loads((d / "datasheet.json").read_text(encoding="utf-8"))
    sheet["kinds"] = {"file": "train_kinds.txt", "train_pairs": {"ding": n}, "default_weights": {"ding": 1}}
    sheet["files_sha256"] = {"train.tsv": "old", "train_kinds.txt": "old", "valid.tsv": "kept"}
    (d / "datasheet.json").write_text(json.dumps(sheet), encoding="utf-8")
    (d / "DATASHEET.md").write_text("# Datasheet\n", encoding="utf-8")
    (d / "cache" / "train-abc").mkdir(parents=True)
    (d / "cache" / "train-abc" / "meta.json").write_text("{}")
    return d


def _first_devset_german() -> str:
    return read_devset(DEVSETS_DIR / "short.tsv")[0][1]


def _first_devset_english() -> str:
    return read_devset(DEVSETS_DIR / "short.tsv")[0][0]


def test_held_out_keys_are_the_german_sides_of_dev_sets_and_held_out_splits(prepared, tmp_path):
    keys = bt.held_out_keys(prepared)
    assert normalize(_first_devset_german()) in keys
    devsets = {normalize(de) for f in DEVSETS_DIR.glob("*.tsv") for _, de in read_devset(f)}
    splits = {normalize(p.de) for name in ("valid.tsv", "test.tsv") for p in read_tsv(prepared / name)}
    assert len(splits) == 16 and keys == devsets | splits  # no English side, nothing of train
    (tmp_path / "only.tsv").write_text("en\tde\nMy sister lives in Berlin.\tMeine  Schwester wohnt in BERLIN.\n",
                                       encoding="utf-8")
    assert bt.held_out_keys(prepared, tmp_path) == splits | {"meine schwester wohnt in berlin."}


def test_drop_held_out_exact_substring_and_in_train():
    keys = {normalize("Meine Schwester wohnt in Berlin."), normalize("Gut gemacht.")}
    sentences = ["MEINE  Schwester wohnt in Berlin.",                     # exact, after normalising
                 "Er sagte: meine Schwester wohnt in Berlin.",            # contains a held-out sentence of 5 words
                 "Das hast du gut gemacht.",                              # contains one of 2 words only: kept
                 "Die Zeit ist der beste Lehrer.",                        # in train
                 "Leider tötet sie ihre Schüler."]
    kept, dropped = bt.drop_held_out(sentences, keys, {normalize("Die Zeit ist der beste Lehrer.")})
    assert kept == ["Das hast du gut gemacht.", "Leider tötet sie ihre Schüler."]
    assert dropped == [(sentences[0], "held_out"), (sentences[1], "held_out_substring"), (sentences[3], "in_train")]


def test_held_out_and_train_keys_in_english(prepared, tmp_path):
    keys = bt.held_out_keys(prepared, language="en")
    devsets = {normalize(en) for f in DEVSETS_DIR.glob("*.tsv") for en, _ in read_devset(f)}
    splits = {normalize(p.en) for name in ("valid.tsv", "test.tsv") for p in read_tsv(prepared / name)}
    assert len(splits) == 16 and keys == devsets | splits  # no German side, nothing of train
    (tmp_path / "only.tsv").write_text("en\tde\nMy  sister lives in BERLIN.\tMeine Schwester wohnt in Berlin.\n",
                                       encoding="utf-8")
    assert bt.held_out_keys(prepared, tmp_path, language="en") == splits | {"my sister lives in berlin."}
    train = read_tsv(prepared / "train.tsv")
    assert bt.train_keys(prepared, language="en") == {normalize(p.en) for p in train} != bt.train_keys(prepared)
    with pytest.raises(ValueError, match="language"):
        bt.held_out_keys(prepared, language="fr")


def test_drop_held_out_english_sentences(prepared):
    dev_en = _first_devset_english()
    assert len(dev_en.split()) >= 4
    train_en = read_tsv(prepared / "train.tsv")[0].en
    sentences = [EXPECTED_EN[0], dev_en.upper(), f"He told me: {dev_en}", train_en, EXPECTED_EN[5]]
    keys, in_train = bt.held_out_keys(prepared, language="en"), bt.train_keys(prepared, language="en")
    kept, dropped = bt.drop_held_out(sentences, keys, in_train)
    assert kept == [EXPECTED_EN[0], EXPECTED_EN[5]]
    assert dropped == [(sentences[1], "held_out"), (sentences[2], "held_out_substring"), (sentences[3], "in_train")]
    # the German sides do not catch English sentences
    assert bt.drop_held_out(sentences, bt.held_out_keys(prepared), bt.train_keys(prepared))[0] == sentences


# ---------------------------------------------------------------------------------------------------------
# The folder writer
# ---------------------------------------------------------------------------------------------------------
PAIRS = [("Die Zeit ist der beste Lehrer.", "Time is the best teacher."),
         ("Leider tötet sie ihre Schüler.", "Unfortunately it kills its pupils.")]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_write_folder_appends_the_pairs_and_records_them(prepared, tmp_path):
    out = bt.write_backtranslated_folder(prepared, tmp_path / "out", PAIRS, kind="backtranslated",
                                         record={"checkpoint": "ckpt", "sentences_read": 9})
    before, after = _lines(prepared / "train.tsv"), _lines(out / "train.tsv")
    assert after[0] == "de\ten" and after[:len(before)] == before and len(after) == len(before) + 2
    assert after[len(before):] == [f"{de}\t{en}" for de, en in PAIRS]
    kinds = _lines(out / "train_kinds.txt")
    assert kinds == _lines(prepared / "train_kinds.txt") + ["backtranslated"] * 2
    assert len(kinds) == len(after) - 1
    assert not (out / "cache").exists() and (prepared / "cache" / "train-abc" / "meta.json").is_file()
    assert (out / "valid.tsv").read_bytes() == (prepared / "valid.tsv").read_bytes()
    sheet = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))
    rec = sheet["backtranslation"]
    assert rec["checkpoint"] == "ckpt" and rec["sentences_read"] == 9 and rec["kind"] == "backtranslated"
    assert rec["pairs_added"] == 2 and rec["train_rows_after"] == rec["train_rows_before"] + 2 == len(after) - 1
    assert sheet["kinds"]["train_pairs"]["backtranslated"] == 2
    assert sheet["kinds"]["default_weights"] == {"ding": 1, "backtranslated": 1}
    assert sheet["files_sha256"]["train.tsv"] == hashlib.sha256((out / "train.tsv").read_bytes()).hexdigest()
    assert sheet["files_sha256"]["valid.tsv"] == "kept"
    assert "## Back-translation" in (out / "DATASHEET.md").read_text(encoding="utf-8")
    assert "backtranslation" not in json.loads((prepared / "datasheet.json").read_text(encoding="utf-8"))


def test_write_folder_refuses_an_existing_folder_unless_forced(prepared, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="--force"):
        bt.write_backtranslated_folder(prepared, out, PAIRS, record={})
    assert (out / "mine.txt").read_text() == "keep me"
    bt.write_backtranslated_folder(prepared, out, PAIRS, record={}, force=True)
    assert not (out / "mine.txt").exists()
    assert len(_lines(out / "train_kinds.txt")) == len(_lines(out / "train.tsv")) - 1
    with pytest.raises(ValueError, match="outside"):
        bt.write_backtranslated_folder(prepared, prepared / "sub", PAIRS, record={})


def test_write_folder_leaves_nothing_after_a_failure(prepared, tmp_path, monkeypatch):
    broken = tmp_path / "broken"
    shutil.copytree(prepared, broken)
    (broken / "datasheet.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        bt.write_backtranslated_folder(broken, tmp_path / "out", PAIRS, record={})
    with pytest.raises(ValueError, match="tab"):
        bt.write_backtranslated_folder(prepared, tmp_path / "out", [("Ein\tSatz ist das.", "A sentence.")], record={})
    (broken / "datasheet.json").write_text("{}", encoding="utf-8")
    (broken / "train_kinds.txt").write_text("ding\n", encoding="utf-8")  # not one kind per row
    with pytest.raises(ValueError, match="kinds but"):
        bt.write_backtranslated_folder(broken, tmp_path / "out", PAIRS, record={})
    # a failure after the copy and the appending (a full disk, say): nothing is left either
    (broken / "train_kinds.txt").write_text((prepared / "train_kinds.txt").read_text())

    def disk_full(path):
        assert (Path(path).parent / "train.tsv").stat().st_size > (broken / "train.tsv").stat().st_size
        raise OSError("No space left on device")
    monkeypatch.setattr(bt, "sha256_file", disk_full)
    with pytest.raises(OSError, match="No space"):
        bt.write_backtranslated_folder(broken, tmp_path / "out", PAIRS, record={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken"]
    (broken / "train_kinds.txt").unlink()
    with pytest.raises(FileNotFoundError, match="train_kinds.txt"):
        bt.write_backtranslated_folder(broken, tmp_path / "out", PAIRS, record={})


# ---------------------------------------------------------------------------------------------------------
# Translating
# ---------------------------------------------------------------------------------------------------------
class _Recorder:
    """A de-en stand-in for a Translator that records its batches and "translates" by reversing the text."""

    def __init__(self, direction: str = "de-en"):
        self.meta, self.path, self.batches = {"direction": direction}, None, []
        self.cfg = SimpleNamespace(language_tags=())

    def translate_batch(self, texts, *, beam_size, return_attention):
        self.batches.append((list(texts), beam_size, return_attention))
        return [SimpleNamespace(text=f" {t[::-1]}\n ") for t in texts]


def test_backtranslate_sorts_batches_by_length_and_returns_input_order():
    sentences = ["Ein sehr viel längerer Satz als die anderen.", "Kurz ist er.", "Mittellang ist dieser Satz.",
                 "Ja so ist es.", "Noch ein langer Satz steht hier ganz am Ende."]
    rec, logs = _Recorder(), []
    out = bt.backtranslate(rec, sentences, beam_size=3, batch_size=2, log=logs.append, log_every=2)
    assert out == [s[::-1] for s in sentences]
    flat = [t for texts, _, _ in rec.batches for t in texts]
    assert flat == sorted(sentences, key=len) and [len(b[0]) for b in rec.batches] == [2, 2, 1]
    assert all(beam == 3 and attention is False for _, beam, attention in rec.batches)
    assert len(logs) == 2 and logs[-1].startswith("5/5 sentences")


def test_backtranslate_refuses_another_direction(tiny_checkpoints):
    from aiayn.translator import Translator

    with pytest.raises(ValueError, match="translates en-de"):
        bt.backtranslate(Translator.load(tiny_checkpoints / "en-de", device="cpu"), ["Ja so ist es."])
    with pytest.raises(ValueError, match="an unnamed direction"):
        bt.backtranslate(_Recorder(direction=None), ["Ja so ist es."])


def test_backtranslate_english_needs_an_en_de_model(tiny_checkpoints, tmp_path, tiny_spm):
    from tiny_models import make_tiny_checkpoint

    from aiayn.translator import Translator

    de_en = Translator.load(tiny_checkpoints / "de-en", device="cpu")
    with pytest.raises(ValueError, match=r"English text needs an English-to-German \(en-de\) model; .* translates "
                                         r"de-en"):
        bt.backtranslate(de_en, ["So it is."], direction="en-de")
    rec = _Recorder(direction="en-de")
    assert bt.backtranslate(rec, ["So it is here."], direction="en-de", beam_size=1) == [".ereh si ti oS"]
    en_de = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    assert bt.translator_for(en_de, "en-de") is en_de
    with pytest.raises(ValueError, match="direction must be"):
        bt.translator_for(en_de, "fr-de")
    # a model for both directions trained towards English gets its en-de view
    both = Translator.load(make_tiny_checkpoint(tmp_path / "both", tiny_spm, "de-en", seed=3,
                                                language_tags=["de", "en"], target_language="en"), device="cpu")
    view = bt.translator_for(both, "en-de")
    assert view.meta["direction"] == "en-de" and view.cfg.target_language == "de"
    assert len(bt.backtranslate(both, EXPECTED_EN[:2], direction="en-de", beam_size=1)) == 2


def test_backtranslate_with_a_tiny_model_keeps_the_order(tiny_checkpoints, tmp_path, tiny_spm):
    from tiny_models import make_tiny_checkpoint

    from aiayn.translator import Translator

    tr = Translator.load(tiny_checkpoints / "de-en", device="cpu")
    sentences = EXPECTED[:4]
    one_by_one = [" ".join(tr.translate(s, beam_size=2, return_attention=False).text.split()) for s in sentences]
    assert len(set(one_by_one)) > 1  # the sentences give different outputs, so an order mix-up would show
    assert bt.backtranslate(tr, sentences, beam_size=2, batch_size=1) == one_by_one
    both = Translator.load(make_tiny_checkpoint(tmp_path / "both", tiny_spm, "en-de", seed=3,
                                                language_tags=["de", "en"], target_language="de"), device="cpu")
    view = bt.translator_for(both, "de-en")
    assert view.meta["direction"] == "de-en" and view.cfg.target_language == "en"
    assert len(bt.backtranslate(both, sentences[:2], beam_size=1)) == 2


# ---------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------
def test_cli_with_a_sentence_file(prepared, tiny_checkpoints, tmp_path, capsys):
    valid_de = read_tsv(prepared / "valid.tsv")[0].de
    train_de = next(p.de for p in read_tsv(prepared / "train.tsv") if mono.keep_sentence(p.de))
    mono_file = tmp_path / "mono.de"
    lines = [EXPECTED[0], _first_devset_german(), "", valid_de, EXPECTED[5], train_de, "zu kurz", EXPECTED[0],
             EXPECTED[7]]
    mono_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = bt.cli_main(["--data", str(prepared), "--out", str(out), "--checkpoint", str(tiny_checkpoints / "de-en"),
                        "--mono", str(mono_file), "--beam", "1", "--batch-size", "2", "--threads", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rec = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))["backtranslation"]
    assert rec["source"] == {"file": "mono.de", "sha256": hashlib.sha256(mono_file.read_bytes()).hexdigest()}
    assert rec["sentences_read"] == 6 and rec["kept"] == 3
    assert rec["held_out_dropped"] == {"total": 3, "held_out": 2, "held_out_substring": 0, "in_train": 1}
    before, after = read_tsv(prepared / "train.tsv"), read_tsv(out / "train.tsv")
    added = after[len(before):]
    assert [p.de for p in added] == [EXPECTED[0], EXPECTED[5], EXPECTED[7]] and rec["pairs_added"] == 3
    assert all(p.en and "\t" not in p.en for p in added)
    assert len(_lines(out / "train_kinds.txt")) == len(after)
    assert "3 kept" in captured.out and f"--data {out} --kind-weights" in captured.out
    assert "backtranslated=3 --direction en-de" in captured.out
    assert rec["language"] == "de" and rec["direction"] == "de-en" and rec["training_direction"] == "en-de"
    assert _lines(out / "train_kinds.txt")[-3:] == ["backtranslated"] * 3


def test_cli_drops_empty_translations(prepared, tiny_checkpoints, tmp_path, monkeypatch, capsys):
    mono_file = tmp_path / "mono.de"
    mono_file.write_text("\n".join(EXPECTED[:3]) + "\n", encoding="utf-8")
    monkeypatch.setattr(bt, "backtranslate", lambda tr, sentences, **kw: ["", "Two.", "Three."])
    out = tmp_path / "out"
    assert bt.cli_main(["--data", str(prepared), "--out", str(out), "--checkpoint", str(tiny_checkpoints / "de-en"),
                        "--mono", str(mono_file)]) == 0, capsys.readouterr().err
    assert [tuple(p) for p in read_tsv(out / "train.tsv")[-2:]] == [(EXPECTED[1], "Two."), (EXPECTED[2], "Three.")]
    rec = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))["backtranslation"]
    assert rec["translated"] == 3 and rec["empty_translations_dropped"] == 1 and rec["pairs_added"] == 2


def test_cli_reads_the_package(prepared, tiny_checkpoints, fortunes_deb, tmp_path, capsys):
    out = tmp_path / "out"
    code = bt.cli_main(["--data", str(prepared), "--out", str(out), "--checkpoint", str(tiny_checkpoints / "de-en"),
                        "--deb-dir", str(fortunes_deb.parent), "--no-download", "--beam", "1", "--limit", "3",
                        "--kind", "fortunes"])
    assert code == 0, capsys.readouterr().err
    sheet = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))
    rec = sheet["backtranslation"]
    assert rec["source"]["version"] == "0.35-1" and rec["source"]["licence"] == "GPL-2+"
    assert rec["sentences_read"] == 8 and rec["kept"] == 8 and rec["translated"] == 3 and rec["kind"] == "fortunes"
    assert rec["extraction"]["dialogue_skipped"] == 1 and rec["extraction"]["files_read"] == 2
    assert _lines(out / "train_kinds.txt")[-rec["pairs_added"]:] == ["fortunes"] * rec["pairs_added"]


def test_cli_english_with_a_sentence_file(prepared, tiny_checkpoints, tmp_path, capsys):
    from aiayn.translator import Translator

    valid_en = read_tsv(prepared / "valid.tsv")[0].en
    train_en = next(p.en for p in read_tsv(prepared / "train.tsv") if mono.keep_sentence(p.en))
    mono_file = tmp_path / "mono.en"
    lines = [EXPECTED_EN[0], _first_devset_english(), "", valid_en, EXPECTED_EN[6], train_en, "too short",
             EXPECTED_EN[0], EXPECTED_EN[9]]
    mono_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = bt.cli_main(["--data", str(prepared), "--out", str(out), "--checkpoint", str(tiny_checkpoints / "en-de"),
                        "--language", "en", "--mono", str(mono_file), "--beam", "1", "--batch-size", "2",
                        "--threads", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    sheet = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))
    rec = sheet["backtranslation"]
    assert rec["source"] == {"file": "mono.en", "sha256": hashlib.sha256(mono_file.read_bytes()).hexdigest()}
    assert rec["language"] == "en" and rec["direction"] == "en-de" and rec["training_direction"] == "de-en"
    assert rec["kind"] == "backtranslated-en" and rec["method"].startswith(
        "back-translation (Sennrich, Haddow and Birch 2016): real English sentences as targets, their German")
    assert rec["sentences_read"] == 6 and rec["kept"] == 3
    assert rec["held_out_dropped"] == {"total": 3, "held_out": 2, "held_out_substring": 0, "in_train": 1}
    before, after = read_tsv(prepared / "train.tsv"), read_tsv(out / "train.tsv")
    added = after[len(before):]
    real = [EXPECTED_EN[0], EXPECTED_EN[6], EXPECTED_EN[9]]
    assert [p.en for p in added] == real                       # the real English in the en column
    en_de = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    assert [p.de for p in added] == bt.backtranslate(en_de, real, direction="en-de", beam_size=1)  # synthetic German
    assert _lines(out / "train_kinds.txt")[-3:] == ["backtranslated-en"] * 3
    assert sheet["kinds"]["train_pairs"]["backtranslated-en"] == 3
    assert "backtranslated-en=3 --direction de-en" in captured.out
    section = (out / "DATASHEET.md").read_text(encoding="utf-8")
    assert "## Back-translation (English)" in section and "translated into German" in section
    assert "for training de-en" in section


def test_cli_english_reads_both_packages(prepared, tiny_checkpoints, english_debs, tmp_path, capsys):
    out = tmp_path / "out"
    common = ["--data", str(prepared), "--checkpoint", str(tiny_checkpoints / "en-de"), "--language", "en",
              "--deb-dir", str(english_debs), "--no-download", "--beam", "1", "--limit", "2"]
    assert bt.cli_main([*common, "--out", str(out)]) == 0, capsys.readouterr().err
    rec = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))["backtranslation"]
    assert [s["package"] for s in rec["source"]] == ["fortunes", "fortunes-min"]
    assert all(s["licence"] == "BSD-3-clause" and s["version"] == "1:1.99.1-7.3" for s in rec["source"])
    assert rec["sentences_read"] == 16 and rec["kept"] == 16 and rec["translated"] == 2
    assert rec["extraction"]["files_read"] == 2  # the .u8 links are no files; perl and translate-me are skipped
    assert sorted(rec["extraction"]["files_skipped"]) == ["fortunes/perl", "fortunes/translate-me"]
    assert [p.en for p in read_tsv(out / "train.tsv")[-2:]] == EXPECTED_EN[:2]
    section = (out / "DATASHEET.md").read_text(encoding="utf-8")
    assert "Debian `fortunes` 1:1.99.1-7.3 (BSD-3-clause)" in section and "`fortunes-min`" in section
    # --package given once reads that package only; given twice, both
    out2 = tmp_path / "out2"
    assert bt.cli_main([*common, "--out", str(out2), "--package", "fortunes-min"]) == 0, capsys.readouterr().err
    rec = json.loads((out2 / "datasheet.json").read_text(encoding="utf-8"))["backtranslation"]
    assert rec["source"]["package"] == "fortunes-min" and rec["sentences_read"] == 6
    out3 = tmp_path / "out3"
    assert bt.cli_main([*common, "--out", str(out3), "--package", "fortunes-min", "--package", "fortunes"]) == 0
    rec = json.loads((out3 / "datasheet.json").read_text(encoding="utf-8"))["backtranslation"]
    assert [s["package"] for s in rec["source"]] == ["fortunes-min", "fortunes"] and rec["sentences_read"] == 16


def test_tag_synthetic_marks_only_the_synthetic_side():
    pairs = [("Das ist gut.", "That is good."), ("Wer weiß?", "Who knows?")]
    assert bt.tag_synthetic(pairs, "<bt>", language="en") == [("<bt> Das ist gut.", "That is good."),
                                                             ("<bt> Wer weiß?", "Who knows?")]
    assert bt.tag_synthetic(pairs, "@BT", language="de") == [("Das ist gut.", "@BT That is good."),
                                                            ("Wer weiß?", "@BT Who knows?")]
    for bad in ("", "<b t>", "a\tb", "x" * 17, "\x00"):
        with pytest.raises(ValueError, match="--tag must be one word"):
            bt.tag_synthetic(pairs, bad, language="en")
    with pytest.raises(ValueError):
        bt.tag_synthetic(pairs, "<bt>", language="fr")


def test_cli_tagged_backtranslation(prepared, tiny_checkpoints, tmp_path, capsys):
    """--tag: the synthetic German of English text begins with the tag, the real English does not; the datasheet,
    its section and the model card's corpus line say so."""
    from aiayn.evaluation.modelcard import backtranslation_lines
    from aiayn.translator import Translator

    mono_file = tmp_path / "mono.en"
    real = [EXPECTED_EN[0], EXPECTED_EN[6]]
    mono_file.write_text("\n".join(real) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = bt.cli_main(["--data", str(prepared), "--out", str(out), "--checkpoint", str(tiny_checkpoints / "en-de"),
                        "--language", "en", "--mono", str(mono_file), "--beam", "1", "--tag", "<bt>"])
    assert code == 0, capsys.readouterr().err
    added = read_tsv(out / "train.tsv")[len(read_tsv(prepared / "train.tsv")):]
    en_de = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    synthetic = bt.backtranslate(en_de, real, direction="en-de", beam_size=1)
    assert [(p.de, p.en) for p in added] == [(f"<bt> {s}", r) for s, r in zip(synthetic, real) if s]
    sheet = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))
    assert sheet["backtranslation"]["tag"] == "<bt>"
    assert "Each synthetic source begins with the tag `<bt>`" in (out / "DATASHEET.md").read_text(encoding="utf-8")
    assert "each tagged `<bt>` (tagged back-translation, Caswell et al. 2019)" in backtranslation_lines(sheet)[0]
    # without --tag nothing is tagged and the card says nothing of tags
    out2 = tmp_path / "out2"
    assert bt.cli_main(["--data", str(prepared), "--out", str(out2), "--checkpoint", str(tiny_checkpoints / "en-de"),
                        "--language", "en", "--mono", str(mono_file), "--beam", "1"]) == 0
    sheet2 = json.loads((out2 / "datasheet.json").read_text(encoding="utf-8"))
    assert sheet2["backtranslation"]["tag"] is None and "tagged" not in backtranslation_lines(sheet2)[0]
    assert not any(p.de.startswith("<bt>") for p in read_tsv(out2 / "train.tsv"))


@pytest.mark.parametrize("language, checkpoint, message", [
    ("en", "de-en", "back-translation of English text needs an English-to-German (en-de) model; "),
    ("de", "en-de", "back-translation of German text needs a German-to-English (de-en) model; "),
])
def test_cli_refuses_a_model_of_the_wrong_direction(language, checkpoint, message, prepared, tiny_checkpoints,
                                                     tmp_path, capsys):
    mono_file = tmp_path / "mono.txt"
    mono_file.write_text((EXPECTED_EN[0] if language == "en" else EXPECTED[0]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = bt.cli_main(["--data", str(prepared), "--out", str(out), "--checkpoint", str(tiny_checkpoints / checkpoint),
                        "--language", language, "--mono", str(mono_file)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.rstrip().endswith(f"translates {checkpoint}") and not out.exists()


@pytest.mark.parametrize("case, message", [
    ("no data", "no data folder"),
    ("out exists", "exists"),
    ("en-de checkpoint", "translates en-de"),
    ("empty file", "is empty"),
    ("not utf-8", "not UTF-8"),
    ("no sentence", "no line of"),
    ("no .deb", "not in"),
    ("kind taken", "already"),
    ("bad tag", "--tag must be one word"),
])
def test_cli_refuses_bad_input(case, message, prepared, tiny_checkpoints, tmp_path, capsys):
    data, out, ckpt = prepared, tmp_path / "out", tiny_checkpoints / "de-en"
    mono_file = tmp_path / "mono.de"
    mono_file.write_text(EXPECTED[0] + "\n", encoding="utf-8")
    extra = ["--mono", str(mono_file)]
    if case == "no data":
        data = tmp_path / "missing"
    elif case == "out exists":
        out.mkdir()
    elif case == "en-de checkpoint":
        ckpt = tiny_checkpoints / "en-de"
    elif case == "empty file":
        mono_file.write_text("\n \n", encoding="utf-8")
    elif case == "not utf-8":
        mono_file.write_bytes("Das Ende naht schon bald für uns.\n".encode("latin-1") + b"\xff\xfe\n")
    elif case == "no sentence":
        mono_file.write_text("zu kurz\nkein Satz hier\n", encoding="utf-8")
    elif case == "no .deb":
        extra = ["--deb-dir", str(tmp_path / "debs"), "--no-download"]
    elif case == "kind taken":
        extra += ["--kind", "ding"]
    elif case == "bad tag":
        extra += ["--tag", "<b t>"]
    code = bt.cli_main(["--data", str(data), "--out", str(out), "--checkpoint", str(ckpt), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert err.count("\n") == 1 and err.startswith("aiayn backtranslate: ") and "Traceback" not in err
    assert out.exists() == (case == "out exists")


def test_the_command_is_registered(tmp_path, capsys):
    from aiayn.cli import main

    code = main(["backtranslate", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "out"),
                 "--checkpoint", str(tmp_path / "ckpt")])
    assert code == 2 and "aiayn backtranslate: no data folder" in capsys.readouterr().err
