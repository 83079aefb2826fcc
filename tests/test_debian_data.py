"""Tests for ``aiayn data debian``: gettext catalogues, the cleaning rules, parallel help pages, the held-out
packages, leak-free held-out splits and the datasheet's source records.

Fixtures (``fixtures/debian/``, licences in the README there): ``sample.de.po`` holds real messages copied
unchanged from Debian 12 catalogues (the test builds the ``.mo`` with polib); the ``*.page`` and ``*.html``
files are real GNOME and LibreOffice help pages in English and German. The end-to-end test packs them into
small ``.deb`` files with ``dpkg-deb`` (no download). Expected values were read off the raw files by hand.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

polib = pytest.importorskip("polib")

from aiayn.data import Pair, make_splits, normalize, parse_ding  # noqa: E402
from aiayn.data import debian as deb  # noqa: E402
from aiayn.data.gettext_pairs import clean_message, clean_pairs, mo_pairs, pair_filter, strip_caret_context  # noqa: E402
from aiayn.data.help_pages import align_blocks, aligned_page_pairs, split_sentences, text_blocks  # noqa: E402

FIX = Path(__file__).parent / "fixtures"
DEB_FIX = FIX / "debian"


@pytest.fixture(scope="module")
def mo_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mo") / "sample.mo"
    polib.pofile(str(DEB_FIX / "sample.de.po")).save_as_mofile(str(path))
    return path


def test_mo_pairs_reads_context_plural_and_singular_only(mo_file):
    pairs, n = mo_pairs(mo_file.read_bytes())
    assert n == 15  # entries in sample.de.po (header not counted)
    d = dict((en, de) for de, en in pairs)
    # msgctxt "Password hint" is not part of the text
    assert d["A password without your user name would be stronger."] == \
        "Ein Passwort ohne Ihren Benutzernamen wäre stärker."
    # plural entry: the singular msgid with msgstr[0]
    assert d["Must have a maximum of %d character"] == "Darf höchstens %d Zeichen sein"
    assert "Must have a maximum of %d characters" not in d
    assert mo_pairs(mo_file)[0] == pairs  # a path works as well as bytes


def test_mo_pairs_rejects_a_non_catalogue(tmp_path):
    with pytest.raises(ValueError, match="not a valid .mo"):
        mo_pairs(b"this is not a catalogue at all")


@pytest.mark.parametrize("raw, expected, normalised", [
    ("Beep when a _modifier key is pressed", "Beep when a modifier key is pressed", False),        # GTK _
    ("&Ask for action after dragging messages", "Ask for action after dragging messages", False),  # KDE &
    ("Delete ~All Comments by $1", "Delete All Comments by X", True),                               # LO ~ and $1
    ("Automatic _Date &amp; Time", "Automatic Date & Time", False),                                 # entity
    ("<b>%s</b> is used to open the following types", "X is used to open the following types", True),  # markup
    ("Wrong password entered. You have %1$u try left", "Wrong password entered. You have X try left", True),
    ('Set "Heading $(ARG1)" Style', 'Set "Heading X" Style', True),
    ("Truncating recipients list to %1.", "Truncating recipients list to X.", True),               # Qt %1
    ("Use {0} and {name} now", "Use X and X now", True),                                           # brace styles
    ("Found %(count)d objects", "Found X objects", True),                                          # Python named
    ("%s: not used because `__COUNTER__' is invalid", "X: not used because `__COUNTER__' is invalid", True),
    ("%<#pragma%> ignored for %qD", "'#pragma' ignored for X", True),                             # gcc quotes
    ("RID_SW_ERRHDL\x04The structure cannot be modified.", "The structure cannot be modified.", False),  # context
    ("50%% done\nand more", "50% done and more", False),                                           # %% and newline
    ("Give @1 to the player named @2", "Give X to the player named X", True),                       # minetest @1
    ("&kgpg; can sign keys &amp; more", "X can sign keys & more", True),                            # KDE entity
    ("Write to me at anna@example.org", "Write to me at anna@example.org", False),                  # not a @1
])
def test_clean_message_rules(raw, expected, normalised):
    assert clean_message(raw) == (expected, normalised)


def test_clean_message_drops_too_many_placeholders_and_counts_rules():
    counts = {}
    assert clean_message("%s copied %d of %d files", counts) == (None, False)
    assert counts == {"too_many_placeholders": 1}
    clean_message("Save &As", counts)
    assert counts["accelerators"] == 1


@pytest.mark.parametrize("de, en, reason", [
    ("Zu kurz hier", "Far too short here", "too_short"),
    ("2.4 GHz / 5 GHz Band eins", "2.4 GHz / 5 GHz band EINS", "untranslated"),
    ("The structure of a linked table cannot be modified.",
     "The structure of a linked table cannot be modified now.", "not_german"),   # msgstr left in English
    ("Bei einer verknüpften Tabelle darf die Struktur nicht verändert werden.",
     "Bei einer verknüpften Tabelle darf die Struktur nicht geändert werden.", "not_german"),  # msgid German
    ("Ja " * 31, "Yes the one " * 5, "ratio"),
    ("Die Datei " * 45, "The file " * 45, "too_long"),
    ("Bei einer verknüpften Tabelle darf die Struktur nicht verändert werden.",
     "The structure of a linked table cannot be modified.", None),
])
def test_pair_filter(de, en, reason):
    assert pair_filter(de.strip(), en.strip()) == reason


def test_clean_pairs_on_the_real_catalogue(mo_file):
    counts = {}
    kept = clean_pairs(mo_pairs(mo_file)[0], counts)
    by_en = {e: (d, n) for d, e, n in kept}
    assert by_en["The structure of a linked table cannot be modified."] == (
        "Bei einer verknüpften Tabelle darf die Struktur nicht verändert werden.", False)
    assert by_en["Beep when a modifier key is pressed"][0] == "Signalton ausgeben, wenn eine Zusatztaste gedrückt wird"
    assert "2.4 GHz / 5 GHz" not in by_en               # untranslated and short
    assert "Must have a maximum of X character" in by_en  # 5 words after normalising %d
    assert counts["too_short"] >= 1 and counts["placeholders"] >= 1
    assert all("~" not in d and "<" not in d and "&" not in d.replace("& ", "") for d, e, n in kept)
    assert all(" _" not in " " + d.replace("__COUNTER__", "") for d, e, n in kept)


@pytest.mark.parametrize("de, en, want", [
    ("Guten Morgen, Delfador! Darf ich endlich gegen jemanden kämpfen?",
     "female^Good morning, Delfador! Is it time to attack things?",
     ("Guten Morgen, Delfador! Darf ich endlich gegen jemanden kämpfen?", "Good morning, Delfador! Is it time to attack things?")),
    ("Verhältnis von tatsächlichen zu erwartetem", "stats dialog^Ratio of actual to expected",
     ("Verhältnis von tatsächlichen zu erwartetem", "Ratio of actual to expected")),
    ("editor^Karten sehen im Editor so aus wie im Spiel.", "editor^Maps look in the editor as they do in the game.",
     ("Karten sehen im Editor so aus wie im Spiel.", "Maps look in the editor as they do in the game.")),
    # text, not a context: a one-letter base, an escape after the caret, a formula
    ("x^n für ganzzahlige n mit Fehlerabschätzung", "x^n for integer n with an error estimate", None),
    ("Fehlgebildetes Escape-Zeichen ^@epsf: kein ']' gefunden.", "malformed ^@epsf escape: no ']' found", None),
    ("Die Potenz a^2 wird berechnet.", "The power a^2 is computed.", None),
])
def test_caret_context_is_removed_from_wesnoth_messages(de, en, want):
    counts = {}
    assert strip_caret_context(de, en, counts) == (want or (de, en))
    assert counts.get("caret_context", 0) == (1 if want else 0)
    kept = clean_pairs([(de, en)], {})
    assert all("^" not in e for _, e, _ in kept) or not want


def test_lo_help_pages_align_by_order_and_by_id():
    en = (DEB_FIX / "lo-help.en-US.text_direct_cursor.html").read_text(encoding="utf-8")
    de = (DEB_FIX / "lo-help.de.text_direct_cursor.html").read_text(encoding="utf-8")
    pairs, how = aligned_page_pairs(en, de)
    assert how == "order"
    assert ("Mit dem Direkt-Cursor können Sie Text überall auf der Seite eingeben.",
            "The direct cursor allows you to enter text anywhere on a page.") in pairs
    assert not any("polyfills" in d or "function" in d for d, e in pairs)  # scripts are not text
    # with a block missing on one side the ids still pair the rest
    be, bd = text_blocks(en), text_blocks(de)
    target = next(b for b in be if b.id == "par_id3155908")
    by_id, how = align_blocks([b for b in be if b is not target], bd)
    assert how == "id"
    assert ("Klicken Sie auf einen leeren Bereich im Textdokument. Der Mauszeiger ändert seine Form und zeigt die "
            "Ausrichtung an, die für den eingegebenen Text verwendet wird.",
            "Click in a free space in the text document. The mouse pointer changes to reflect the alignment that "
            "will be applied to the text that you type:") in by_id
    assert not any(e == target.text for d, e in by_id)


def test_mallard_pages_give_sentence_pairs_when_counts_agree():
    en = (DEB_FIX / "gnome-help.C.net-wireless-wepwpa.page").read_text(encoding="utf-8")
    de = (DEB_FIX / "gnome-help.de.net-wireless-wepwpa.page").read_text(encoding="utf-8")
    pairs, how = aligned_page_pairs(en, de)
    assert how == "order"
    ens = [e for d, e in pairs]
    assert "What do WEP and WPA mean?" in ens
    # first paragraph: 4 sentences on both sides, so cut into 4 pairs
    assert ("WPA2 repräsentiert die zweite Version des WPA-Standards.",
            "WPA2 is the second version of the WPA standard.") in pairs
    # second paragraph: 4 German sentences for 3 English ones, so kept whole
    assert "WPA2 is the most secure of the three." not in ens
    assert any(e.startswith("Using some encryption") and e.endswith("wireless network.") for e in ens)
    assert not any("Knackstedt" in d for d, e in pairs)        # translator credits (<info>) are skipped


def test_split_sentences_keeps_abbreviations():
    assert split_sentences("Wählen Sie z. B. Datei. Dann klicken Sie. 3 Fenster öffnen sich.") == [
        "Wählen Sie z. B. Datei.", "Dann klicken Sie.", "3 Fenster öffnen sich."]


@pytest.mark.parametrize("package, source", [("coreutils", None), ("util-linux-locales", "util-linux"),
                                             ("gnupg-l10n", "gnupg2"), ("gpgv", "gnupg")])
def test_held_out_packages_are_refused(package, source):
    with pytest.raises(ValueError, match="held out"):
        deb.check_not_held_out(package, source)


def test_held_out_refusal_before_any_download(tmp_path):
    from aiayn.data.prepare_debian import prepare_debian
    with pytest.raises(ValueError, match="held out"):
        prepare_debian(tmp_path / "out", deb_dir=tmp_path / "debs", packages=["gimp", "grep"], download=False)
    assert not (tmp_path / "debs").exists()


def test_a_held_out_domain_inside_another_package_is_skipped(mo_file):
    data = mo_file.read_bytes()
    info = {"package": "some-l10n", "version": "1", "source": "some", "file": "x.deb", "sha256": "0" * 64,
            "copyright": "", "help": {},
            "mo": {"usr/share/locale/de/LC_MESSAGES/coreutils.mo": data,
                   "usr/share/locale/de/LC_MESSAGES/some.mo": data}}
    kept, rec = deb.package_pairs(info)
    assert rec["rules"]["held_out_domain_skipped"] == 1 and rec["mo_files"] == 1
    assert rec["messages_read"] == 15


def test_remove_leaks_exact_and_substring():
    held = {normalize("Der Hund schläft im Garten."), normalize("The dog sleeps in the garden.")}
    pairs = [Pair("Der Hund schläft im Garten.", "A dog sleeps."),                            # exact (de)
             Pair("Sie sagte: Der Hund schläft im Garten. Dann ging sie.", "She said so and left."),  # substring
             Pair("Die Katze schläft.", "The cat sleeps.")]
    kept, exact, sub = deb.remove_leaks(pairs, held)
    assert kept == [pairs[2]] and (exact, sub) == (1, 1)


def test_draw_heldout_takes_sentences_once():
    cands = [Pair("Das ist ein ganzer Satz.", "This is a whole sentence."),
             Pair("Das ist ein ganzer Satz.", "That is one whole sentence."),  # same German side
             Pair("kein Satz hier ohne Punkt", "no sentence here without a stop"),
             Pair("Hier steht noch ein Satz.", "Here is another sentence.")]
    taken = set()
    got = deb.draw_heldout(cands, 5, seed=1, taken=taken)
    assert len(got) == 2 and cands[2] not in got
    assert normalize("Hier steht noch ein Satz.") in taken


def test_licence_of_machine_readable_and_free_form():
    assert deb.licence_of("Format: https://x\n\nFiles: *\nCopyright: 2020 A\nLicense: GPL-2+\n\nFiles: b\n"
                          "License: MIT\n") == "GPL-2+"
    assert deb.licence_of("This package is under the GPL-3 and the GFDL-1.3.") == "GPL-3, GFDL-1.3"
    assert deb.licence_of("no idea") == "see copyright file"
    assert deb.licence_of("") == "see source package copyright"
    # free-form notices (as in synaptic's and darktable's copyright files)
    assert deb.licence_of(" * modify it under the terms of the GNU General Public License as\n * published by the "
                          "Free Software Foundation; either version 2 of the\n * License, or (at your option) any "
                          "later version.") == "GPL-2+"
    assert deb.licence_of("Files: *\nLicense: This program is free software: you can redistribute it and/or "
                          "modify it under the terms of the GNU General Public License\n version 3.") == "GPL-3"
    assert deb.licence_of("License: GNU GPL; some portions public domain.") == "GPL (version not stated)"


def test_licence_of_a_bsd_licence_quoted_without_its_name():
    # the fortunes and fortunes-min packages (1:1.99.1-7.3): the UC Berkeley licence, its advertising clause deleted
    bsd = ("This program falls under the BSD copyright:\n\nCopyright (c) 1991 The Regents of the University of "
           "California.\nAll rights reserved.\n\nRedistribution and use in source and binary forms, with or without\n"
           "modification, are permitted provided that the following conditions\nare met:\n\n1. Redistributions of "
           "source code must retain the above copyright\n   notice, this list of conditions and the following "
           "disclaimer.\n2. Redistributions in binary form must reproduce ...\n3. [ Deleted.  see :-\n\t"
           "ftp://ftp.cs.berkeley.edu/pub/4bsd/README.Impt.License.Change\n   ]\n4. Neither the name of the "
           "University nor the names of its contributors\n   may be used to endorse or promote products derived "
           "from this software\n   without specific prior written permission.\n")
    assert deb.licence_of(bsd) == "BSD-3-clause"
    assert deb.licence_of(bsd.replace("3. [ Deleted.", "3. All advertising materials mentioning features")) == \
        "BSD-4-clause"
    assert deb.licence_of(bsd.split("4. Neither")[0]) == "BSD-2-clause"
    assert deb.licence_of(bsd + "\nSome files are under the GPL-3\n") == "GPL-3"  # a named licence wins, as before


def _build_deb(root: Path, out_dir: Path, package: str, version: str, files: dict[str, bytes],
               source: str | None = None) -> Path:
    d = root / package
    (d / "DEBIAN").mkdir(parents=True)
    control = (f"Package: {package}\nVersion: {version}\nArchitecture: all\nMaintainer: test <t@example.org>\n"
               + (f"Source: {source}\n" if source else "") + "Description: aiayn test fixture\n")
    (d / "DEBIAN" / "control").write_text(control)
    for rel, data in files.items():
        f = d / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    deb_path = out_dir / f"{package}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(d), str(deb_path)],
                   check=True, capture_output=True)
    return deb_path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, mo_file):
    if not shutil.which("dpkg-deb"):
        pytest.skip("dpkg-deb is not installed (Debian/Ubuntu only)")
    from aiayn.data.prepare_debian import prepare_debian
    tmp = tmp_path_factory.mktemp("debian")
    debs = tmp / "debs"
    debs.mkdir()
    copyright_ = b"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\nFiles: *\n" \
                 b"Copyright: the authors\nLicense: CC-BY-SA-3.0\n"
    help_files = {
        "usr/share/help/C/gnome-help/net-wireless-wepwpa.page":
            (DEB_FIX / "gnome-help.C.net-wireless-wepwpa.page").read_bytes(),
        "usr/share/help/de/gnome-help/net-wireless-wepwpa.page":
            (DEB_FIX / "gnome-help.de.net-wireless-wepwpa.page").read_bytes(),
        "usr/share/doc/fixture-docs/copyright": copyright_,
    }
    _build_deb(tmp / "src", debs, "fixture-docs", "1.0-1", help_files)
    _build_deb(tmp / "src", debs, "fixture-l10n", "2:3.4-5", {
        "usr/share/locale/de/LC_MESSAGES/fixture.mo": mo_file.read_bytes(),
        "usr/share/doc/fixture-l10n/copyright": b"Files: *\nLicense: GPL-2+\n"})
    _build_deb(tmp / "src", debs, "fixture-game", "1.0-1", {
        **{k: v for k, v in _story_files().items() if "/crawl/" in k or "/freecol/" in k},
        "usr/share/doc/fixture-game/copyright": b"Files: *\nLicense: GPL-2+\n"})
    _build_deb(tmp / "src", debs, "fixture-help-de", "7.4", {
        "usr/share/fixture/help/de/text/cursor.html": (DEB_FIX / "lo-help.de.text_direct_cursor.html").read_bytes()})
    _build_deb(tmp / "src", debs, "fixture-help-en", "7.4", {
        "usr/share/fixture/help/en-US/text/cursor.html":
            (DEB_FIX / "lo-help.en-US.text_direct_cursor.html").read_bytes()})
    # a held-out package: its catalogue feeds test_domain only
    _build_deb(tmp / "src", debs, "coreutils", "9.1-1", {
        "usr/share/locale/de/LC_MESSAGES/coreutils.mo": mo_file.read_bytes()})
    kwargs = dict(deb_dir=debs, ding_from=FIX / "ding_sample.txt", verify=False,
                  packages=["fixture-docs", "fixture-l10n", "fixture-help-de", "fixture-game"],
                  domain_packages=["coreutils"],
                  vocab_size=400, n_valid=5, n_test=10, n_test_general=3, n_test_domain=1, download=False,
                  progress=False, hard_vocab_limit=False)

    def run(out):
        deb.HELP_COMPANIONS["fixture-help-de"] = "fixture-help-en"
        deb.STORY_SOURCES["fixture-game"] = ("crawl", "properties")
        deb.SOURCE_KINDS["fixture-game"] = "narrative"
        try:
            with pytest.warns(UserWarning, match="sha256 mismatch"):  # the fixture is not the full Ding file
                return prepare_debian(out, **kwargs)
        finally:
            del deb.HELP_COMPANIONS["fixture-help-de"], deb.STORY_SOURCES["fixture-game"]
            del deb.SOURCE_KINDS["fixture-game"]
    sheet = run(tmp / "out")
    return tmp, sheet, run


def _read(path: Path) -> list[Pair]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "de\ten"
    return [Pair(*line.split("\t")) for line in lines[1:]]


def test_ding_valid_and_test_are_exactly_the_ding_split(prepared):
    tmp, sheet, _ = prepared
    pairs, _ = parse_ding(FIX / "ding_sample.txt", progress=False)
    ref = make_splits(pairs, n_valid=5, n_test=10, seed=1234, heldout_pool="sentences")
    assert _read(tmp / "out" / "valid.tsv") == ref["valid"]
    assert _read(tmp / "out" / "test.tsv") == ref["test"]


def test_general_and_domain_tests_do_not_leak_into_train(prepared):
    tmp, sheet, _ = prepared
    out = tmp / "out"
    train = _read(out / "train.tsv")
    general, domain = _read(out / "test_general.tsv"), _read(out / "test_domain.tsv")
    assert len(general) == 3 and len(domain) == 1
    held = {normalize(s) for q in general + domain + _read(out / "valid.tsv") + _read(out / "test.tsv") for s in q}
    for q in train:
        for side in (normalize(q.de), normalize(q.en)):
            assert side not in held
            assert not any(h in side for h in held if len(h.split()) >= 4), side
    # the Debian pairs did reach train (beside Ding)
    assert sheet["counts"]["train"]["from_debian"] > 0
    assert "Bei einer verknüpften Tabelle darf die Struktur nicht verändert werden." in \
        {q.de for q in train + general}


def test_datasheet_records_each_source(prepared):
    tmp, sheet, _ = prepared
    out = tmp / "out"
    on_disk = json.loads((out / "datasheet.json").read_text(encoding="utf-8"))
    recs = {r["package"]: r for r in on_disk["debian_sources"]}
    assert set(recs) == {"fixture-docs", "fixture-l10n", "fixture-help-de", "fixture-game"}
    assert recs["fixture-game"]["story_files"] == 2 and recs["fixture-game"]["kind"] == "narrative"
    assert recs["fixture-l10n"]["kind"] == "ui"
    deb_file = tmp / "debs" / "fixture-l10n_2:3.4-5_all.deb"
    assert recs["fixture-l10n"]["version"] == "2:3.4-5"
    assert recs["fixture-l10n"]["sha256"] == hashlib.sha256(deb_file.read_bytes()).hexdigest()
    assert recs["fixture-l10n"]["licence"] == "GPL-2+"
    assert recs["fixture-docs"]["licence"] == "CC-BY-SA-3.0"
    assert recs["fixture-help-de"]["companion"]["package"] == "fixture-help-en"
    assert recs["fixture-l10n"]["messages_read"] == 15 and recs["fixture-l10n"]["mo_files"] == 1
    assert on_disk["held_out_sources"][0]["package"] == "coreutils"
    for name, digest in on_disk["files_sha256"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    md = (out / "DATASHEET.md").read_text(encoding="utf-8")
    assert "fixture-l10n" in md and "GPL-2+" in md and "test_general" in md
    assert "## Kinds of text and weights" in md and "| narrative |" in md


def test_same_debs_give_the_same_files(prepared):
    tmp, sheet, run = prepared
    again = run(tmp / "out2")
    assert again["files_sha256"] == sheet["files_sha256"]
    assert (tmp / "out2" / "datasheet.json").read_bytes() == (tmp / "out" / "datasheet.json").read_bytes()


# --- story text of games (aiayn/data/game_text.py); fixtures written for the test, see fixtures/debian/story/README.md

STORY = DEB_FIX / "story"


def _qm_field(tag: int, data: bytes) -> bytes:
    return bytes([tag]) + len(data).to_bytes(4, "big") + data


def _qm_bytes(messages) -> bytes:
    """A Qt .qm catalogue: magic, a language section (0xa7), a hash section (0x42), the messages (0x69), a
    contexts section (0x2f). Each message: translations (tag 3, UTF-16BE, one per plural form; None = the null
    length 0xFFFFFFFF), an obsolete 4-byte field (tag 5), source (6), context (7), comment (8), end (1)."""
    from aiayn.data.game_text import QM_MAGIC
    body = b""
    for ctx, src, translations in messages:
        if translations is None:
            body += bytes([3]) + b"\xff\xff\xff\xff"
        else:
            body += b"".join(_qm_field(3, t.encode("utf-16-be")) for t in translations)
        body += bytes([5]) + b"\x12\x34\x56\x78" + _qm_field(6, src.encode("utf-8")) + \
            _qm_field(7, ctx.encode("utf-8")) + _qm_field(8, b"a note for translators") + bytes([1])
    return QM_MAGIC + _qm_field(0xa7, b"de_DE") + _qm_field(0x42, b"\x00\x01\x02\x03" * 4) + \
        _qm_field(0x69, body) + _qm_field(0x2f, b"\x00\x08ActivityX")


QM_MESSAGES = [("ActivityInfo", "Click on the red apple in the tree.", ["Klicke auf den roten Apfel im Baum."]),
               ("Score", "%n apple(s) left", ["%n Apfel übrig", "%n Äpfel übrig"]),
               ("Menu", "Quit the game", None)]


def test_qm_messages_reads_source_translation_and_context():
    from aiayn.data.game_text import qm_messages
    got = qm_messages(_qm_bytes(QM_MESSAGES))
    assert got == [("ActivityInfo", "Click on the red apple in the tree.", "Klicke auf den roten Apfel im Baum."),
                   ("Score", "%n apple(s) left", "%n Apfel übrig"),   # first plural form only
                   ("Menu", "Quit the game", "")]                      # no translation


@pytest.mark.parametrize("data, match", [
    (b"not a qm file at all, just text", "magic"),
    (_qm_bytes(QM_MESSAGES)[:-3], "truncated"),
])
def test_qm_messages_rejects_broken_files(data, match):
    from aiayn.data.game_text import qm_messages
    with pytest.raises(ValueError, match=match):
        qm_messages(data)


def test_qm_messages_rejects_an_unknown_field():
    from aiayn.data.game_text import QM_MAGIC, qm_messages
    with pytest.raises(ValueError, match="unknown .qm message field tag 42"):
        qm_messages(QM_MAGIC + _qm_field(0x69, bytes([42, 1])))


def test_properties_are_paired_by_key_with_continuations_and_escapes():
    from aiayn.data.game_text import keyed_pairs, read_properties
    en = read_properties((STORY / "FreeColMessages.properties").read_text(encoding="utf-8"))
    de = read_properties((STORY / "FreeColMessages_de.properties").read_text(encoding="utf-8"))
    assert de["model.long.text"] == "Die Bauern haben im Frühling Mais gepflanzt. Sie haben ihn im Herbst geerntet."
    assert "model.only.english" in en and "model.only.english" not in de
    counts = {}
    pairs = keyed_pairs(de, en, counts)
    assert ("Das Schiff {0} ist in einem Sturm nahe der Küste verloren gegangen.",
            "The ship {0} was lost in a storm near the coast.") in pairs
    # the two-sentence value is cut into two sentence pairs; the plural template is one placeholder
    assert ("Sie haben ihn im Herbst geerntet.", "They harvested it in the autumn.") in pairs
    assert ("Ihr habt {0} Gold in den alten Ruinen gefunden.", "You found {0} of gold in the old ruins.") in pairs
    assert [e for d, e in pairs][0] == "Your scout found a small village by the river."   # English file order
    assert counts["game_placeholders"] == 3


def test_lua_table_and_key_value_files():
    from aiayn.data.game_text import keyed_pairs, lua_table_pairs, read_keyvalue
    lua = lua_table_pairs((STORY / "de.lua").read_text(encoding="utf-8"))
    assert ("Meine Schwester sagt allen von euch »auf Wiedersehen«.",
            'My sister says "goodbye" to all of you.') in lua
    assert not any("never find the way" in e for d, e in lua)                   # commented-out entry
    assert ("Finde den Schlüssel im Garten.\nDann öffne die kleine Tür.",
            "Find the key in the garden.\nThen open the small door.") in lua     # "|" is a line break
    assert len(lua) == 4
    en = read_keyvalue((STORY / "missions_en.txt").read_text(encoding="utf-8"))
    de = read_keyvalue((STORY / "missions_de.txt").read_text(encoding="utf-8"))
    assert en["Rainy_Day.desc"] == "It is raining all day, so the children stay at home and play cards."
    pairs = keyed_pairs(de, en, {})
    assert pairs[1] == ("Geh mit deinem Igel einen langen Spaziergang durch den ruhigen Park machen.",
                        "Take your hedgehog for a long walk through the quiet park.")
    assert len(pairs) == 4 and not any("Nobody" in e for d, e in pairs)


def test_freeorion_stringtable():
    from aiayn.data.game_text import keyed_pairs, read_stringtable
    en = read_stringtable((STORY / "stringtable_en.txt").read_text(encoding="utf-8-sig"))
    de = read_stringtable((STORY / "stringtable_de.txt").read_text(encoding="utf-8"))
    assert list(en) == ["OK", "PLANET_DESC", "SPECIES_STORY", "REF_TEXT"]
    assert de["SPECIES_STORY"] == ("Die Bewohner dieser Welt haben ihre Städte unter der Erde gebaut.\n"
                                   "Sie kommen nur nachts an die Oberfläche, wenn die Luft kühl ist.")
    pairs = keyed_pairs(de, en, {})
    assert ("Der Planet {0} hat eine dünne Atmosphäre und sehr kalte Nächte.",
            "The planet {0} has a thin atmosphere and very cold nights.") in pairs
    assert ("Sie kommen nur nachts an die Oberfläche, wenn die Luft kühl ist.",
            "They come to the surface only at night, when the air is cool.") in pairs   # paragraph by paragraph
    assert ("Die {0} leben in großen Familien und teilen ihr ganzes Essen.",
            "The {0} live in large families and share all their food.") in pairs        # [[KEY]] reference


def test_crawl_entries_pair_wrapped_paragraphs():
    from aiayn.data.game_text import keyed_pairs, read_crawl_entries
    en = read_crawl_entries((STORY / "crawl_species_en.txt").read_text(encoding="utf-8"))
    de = read_crawl_entries((STORY / "crawl_species_de.txt").read_text(encoding="utf-8"))
    assert list(en) == ["Hill Orc", "Mountain Dwarf", "Sea Elf"] and list(de) == ["Hill Orc", "Mountain Dwarf"]
    pairs = keyed_pairs(de, en, {}, wrapped=True)
    assert pairs[:3] == [
        ("Hügelorks sind starke und mutige Kämpfer, die gerne in großen Gruppen leben.",
         "Hill orcs are strong and brave fighters who like to live in large groups."),
        ("Sie können gut mit Äxten umgehen und haben keine Angst vor der Dunkelheit.",
         "They are good with axes and do not mind the dark."),
        ("Sie heilen nach einem Kampf schnell.", "They heal quickly after a battle.")]
    # one English sentence for two German ones: the paragraph pair is kept whole
    assert pairs[3] == ("Bergzwerge sind klein und kräftig. Sie sind sehr gut darin, Werkzeuge zu bauen.",
                        "Mountain dwarves are short, stout and very good at making tools.")
    assert len(pairs) == 4


def test_colobot_help_and_scene():
    from aiayn.data.game_text import colobot_scene, colobot_text, paragraph_pairs
    en = colobot_text((STORY / "colobot_help.E.txt").read_text(encoding="utf-8"))
    de = colobot_text((STORY / "colobot_help.D.txt").read_text(encoding="utf-8"))
    pairs = paragraph_pairs(de, en, {}, wrapped=True)
    assert pairs[:3] == [("Ziel", "Objective"),
                         ("Fahren Sie Ihren Rover zur blauen Flagge in der Nähe des Sees.",
                          "Drive your rover to the blue flag near the lake."),
                         ("Programm", "Program")]
    assert not any("move(10)" in e for d, e in pairs)                 # code lines are not text
    assert pairs[-1] == ("Dann dreht er sich nach links und wartet auf Sie.",
                         "Then it turns to the left and waits for you.")
    scene = colobot_scene((STORY / "colobot_scene.txt").read_text(encoding="utf-8"))
    assert scene["E"]["Title.resume"] == "Drive the small rover to the flag near the lake."
    assert scene["D"]["Title.text"] == "Ein Ausflug zum See" and set(scene) == {"E", "D", "F"}


def _story_files() -> dict[str, bytes]:
    r = lambda name: (STORY / name).read_bytes()  # noqa: E731
    lvl = "usr/share/games/colobot/levels/exercises/chapter001/level001/"
    return {
        "usr/share/gcompris-qt/translations/gcompris_de.qm": _qm_bytes(QM_MESSAGES),
        "usr/share/games/freecol/strings/FreeColMessages.properties": r("FreeColMessages.properties"),
        "usr/share/games/freecol/strings/FreeColMessages_de.properties": r("FreeColMessages_de.properties"),
        "usr/share/games/hedgewars/Data/Locale/de.lua": r("de.lua"),
        "usr/share/games/hedgewars/Data/Locale/missions_en.txt": r("missions_en.txt"),
        "usr/share/games/hedgewars/Data/Locale/missions_de.txt": r("missions_de.txt"),
        "usr/share/games/freeorion/default/stringtables/en.txt": r("stringtable_en.txt"),
        "usr/share/games/freeorion/default/stringtables/de.txt": r("stringtable_de.txt"),
        "usr/share/crawl/dat/descript/species.txt": r("crawl_species_en.txt"),
        "usr/share/crawl/dat/descript/de/species.txt": r("crawl_species_de.txt"),
        lvl + "help/help.E.txt": r("colobot_help.E.txt"), lvl + "help/help.D.txt": r("colobot_help.D.txt"),
        lvl + "scene.txt": r("colobot_scene.txt"),
    }


def test_story_pairs_reads_each_format_and_the_shared_rules_clean_them():
    from aiayn.data.game_text import STORY_FORMATS, story_pairs
    counts = {}
    raw, n, used = story_pairs(_story_files(), list(STORY_FORMATS), counts)
    assert len(used) == 8            # the German side of every format (lua and qm are German-only files)
    kept = {e: (d, norm) for d, e, norm in clean_pairs(raw, counts)}
    assert kept["The ship X was lost in a storm near the coast."] == \
        ("Das Schiff X ist in einem Sturm nahe der Küste verloren gegangen.", True)
    assert kept["Click on the red apple in the tree."] == ("Klicke auf den roten Apfel im Baum.", False)
    assert kept["Drive the small rover to the flag near the lake."][0] == \
        "Fahren Sie den kleinen Rover zur Flagge in der Nähe des Sees."
    assert "Hill orcs are strong and brave fighters who like to live in large groups." in kept
    assert "Take your hedgehog for a long walk through the quiet park." in kept
    assert not any(len(e.split()) < 5 for e in kept)                 # the shared length rule applied
    # only a package's own formats are read
    assert story_pairs(_story_files(), ["crawl"], {})[2] == ["usr/share/crawl/dat/descript/de/species.txt"]


def test_story_pairs_counts_an_unreadable_file():
    from aiayn.data.game_text import story_pairs
    counts = {}
    raw, n, used = story_pairs({"usr/share/x/translations/x_de.qm": b"garbage"}, ["qm"], counts)
    assert (raw, used, counts["unreadable_story"]) == ([], [], 1)


def test_train_kinds_name_each_train_pair_and_give_weights(prepared):
    from aiayn.data.prepare_debian import load_train_weights
    tmp, sheet, _ = prepared
    out = tmp / "out"
    train = _read(out / "train.tsv")
    kinds = (out / "train_kinds.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(kinds) == len(train)
    by_en = dict(zip((q.en for q in train), kinds))
    ding = {q.en for q in parse_ding(FIX / "ding_sample.txt", progress=False)[0]}
    assert all(by_en[e] == "ding" for e in by_en if e in ding)
    game = [e for e, k in by_en.items() if k == "narrative"]
    assert game and all(e not in ding for e in game)
    assert "They heal quickly after a battle." in game or "They heal quickly after a battle." in \
        {q.en for q in _read(out / "test_general.tsv")}
    assert sheet["kinds"]["train_pairs"]["narrative"] == len(game)
    w = load_train_weights(out)
    assert [w[i] for i, k in enumerate(kinds) if k == "narrative"][0] == deb.KIND_WEIGHTS["narrative"]
    assert load_train_weights(out, {k: 1.0 for k in deb.KIND_WEIGHTS}) == [1.0] * len(train)
    with pytest.raises(ValueError, match="no weight for kind"):
        load_train_weights(out, {"ding": 1})


@pytest.mark.parametrize("de, en, expected", [
    # two sentences of 5+ words on each side: cut
    ("Der Händler wartet schon im Hafen. Er hat keine Zeit mehr für uns.",
     "The trader is waiting in the port. He has no more time for us.",
     [("Der Händler wartet schon im Hafen.", "The trader is waiting in the port."),
      ("Er hat keine Zeit mehr für uns.", "He has no more time for us.")]),
    # a piece would be too short to keep ("Hallo, Dink."): kept whole
    ("Hallo, Dink. Deine Mutter sucht dich im ganzen Dorf.", "Hello, Dink. Your mother is looking for you everywhere.",
     [("Hallo, Dink. Deine Mutter sucht dich im ganzen Dorf.",
       "Hello, Dink. Your mother is looking for you everywhere.")]),
    # two lines: paired line by line
    ("Wir brauchen mehr Holz für den Winter.\nGeh bitte in den Wald und hol es.",
     "We need more wood for the winter.\nPlease go into the forest and get it.",
     [("Wir brauchen mehr Holz für den Winter.", "We need more wood for the winter."),
      ("Geh bitte in den Wald und hol es.", "Please go into the forest and get it.")]),
])
def test_paragraph_pairs_cut_only_when_every_piece_can_be_kept(de, en, expected):
    from aiayn.data.game_text import paragraph_pairs
    assert paragraph_pairs(de, en, {}) == expected


def test_a_too_long_paragraph_is_cut_even_with_a_short_sentence():
    from aiayn.data.game_text import paragraph_pairs
    de = "Ja. " + "Der alte Mann erzählt den Kindern jeden Abend eine lange Geschichte über das Meer. " * 7
    en = "Yes. " + "The old man tells the children a long story about the sea every evening. " * 7
    pairs = paragraph_pairs(de.strip(), en.strip(), {})
    assert len(pairs) == 8 and pairs[0] == ("Ja.", "Yes.")


def test_narrative_catalogues_are_cut_into_sentences(tmp_path):
    po = polib.POFile()
    po.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
    po.append(polib.POEntry(msgid="The trader is waiting in the port.\nHe has no more time for us.",
                            msgstr="Der Händler wartet schon im Hafen.\nEr hat keine Zeit mehr für uns."))
    po.save_as_mofile(str(tmp_path / "game.mo"))
    data = (tmp_path / "game.mo").read_bytes()
    info = {"package": "naev-data", "version": "1", "source": "naev", "file": "x.deb", "sha256": "0" * 64,
            "copyright": "", "help": {}, "mo": {"usr/share/naev/dat/gettext/de/LC_MESSAGES/naev.mo": data}}
    kept, rec = deb.package_pairs(info)
    assert rec["kind"] == "narrative" and [(d, e) for d, e, n in kept] == [
        ("Der Händler wartet schon im Hafen.", "The trader is waiting in the port."),
        ("Er hat keine Zeit mehr für uns.", "He has no more time for us.")]
    info["package"] = "some-ui-package"           # a UI catalogue keeps its messages whole
    kept, rec = deb.package_pairs(info)
    assert [e for d, e, n in kept] == ["The trader is waiting in the port. He has no more time for us."]
