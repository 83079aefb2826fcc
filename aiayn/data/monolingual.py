"""Monolingual German and English sentences for back-translation (``aiayn backtranslate``,
:mod:`aiayn.data.backtranslate`).

Sources, Debian 12 "bookworm" packages of fortune cookies in ``strfile`` text format (fortunes separated by lines
that hold only ``%``, an attribution such as ``\\t\\t-- Hermann Josef Abs`` below the text):

* German: ``fortunes-de`` (quotes, proverbs, jokes; GPL-2+, Andreas Tille; version 0.35-1), files under
  ``usr/share/games/fortunes/de/``.
* English: ``fortunes`` and ``fortunes-min`` (BSD fortune(6)'s cookie files: quotations, jokes, platitudes; the BSD
  licence of the University of California, without its advertising clause; version 1:1.99.1-7.3), files directly
  under ``usr/share/games/fortunes/``.

A package is fetched with :func:`aiayn.data.debian.obtain_debs` and read from the ``.deb`` with
``dpkg-deb --fsys-tarfile`` as :func:`aiayn.data.debian.read_deb` reads packages (nothing is installed).

The pipeline, pure functions from text to sentences, each taking the ``language`` (``"de"``, the default, or
``"en"``): :func:`fortunes` (one paragraph per fortune, attributions and dialogue scripts removed) ->
:func:`split_sentences` -> :func:`modern_spelling` (German only: the 1996 reform's ``ß`` -> ``ss`` for frequent
words, ``daß`` -> ``dass``) -> :func:`keep_sentence` (full sentences of 4-25 words of plain text) -> deduplication
by :func:`~aiayn.data.splits.normalize` (:func:`fortune_sentences`; :func:`clean_sentences` for a plain sentence
list such as ``aiayn backtranslate --mono FILE``).
"""
from __future__ import annotations

import os
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Iterable

from ..files import sha256_file
from .corpora import collapse_whitespace
from .debian import DEFAULT_DEB_DIR, licence_of, obtain_debs
from .splits import is_sentence, normalize

__all__ = ["LANGUAGES", "FORTUNES_PACKAGES", "FORTUNES_PACKAGE", "FORTUNES_DIRS", "FORTUNES_DIR", "SKIP_FILES",
           "RESPELLINGS", "fortunes", "split_sentences", "keep_sentence", "modern_spelling", "clean_sentences",
           "fortune_sentences", "read_fortunes_deb", "obtain_fortunes"]

#: The languages of monolingual text read here.
LANGUAGES = ("de", "en")
#: The Debian packages read by default, per language (in this order: deduplication keeps the first).
FORTUNES_PACKAGES = {"de": ("fortunes-de",), "en": ("fortunes", "fortunes-min")}
#: The German package (``FORTUNES_PACKAGES["de"][0]``).
FORTUNES_PACKAGE = FORTUNES_PACKAGES["de"][0]
#: Where the packages of a language keep their fortune files (strfile text; ``NAME.dat`` are strfile indexes,
#: ``NAME.u8`` symlinks to ``NAME``). Only the files directly in the folder are read.
FORTUNES_DIRS = {"de": "usr/share/games/fortunes/de/", "en": "usr/share/games/fortunes/"}
#: The German packages' folder (``FORTUNES_DIRS["de"]``).
FORTUNES_DIR = FORTUNES_DIRS["de"]
#: Files not read, per language (files with a suffix are never read either, see :func:`fortune_sentences`).
#:
#: * ``de`` (fortunes-de): files that are not running German text: ASCII pictures, word lists and dictionaries,
#:   first names and name jokes, quiz questions with their answers, English-German phrase tables, lists of things
#:   an apprentice is sent to fetch ("holen lassen").
#: * ``en`` (fortunes, fortunes-min): files that are not running English prose: ASCII pictures (``art``,
#:   ``ascii-art``), computer jargon, shell sessions, code and mailing-list quotes (``computers``, ``debian``,
#:   ``linux``, ``linuxcookie``, ``perl``, ``knghtbrd``), mock dictionary entries (``definitions``), legal
#:   boilerplate (``disclaimer``) and Latin and French sayings (``translate-me``); and files not fit for a classroom
#:   tool: ethnic jokes (``ethnic``), jokes about the sexes (``men-women``) and about drugs (``drugs``).
SKIP_FILES = {
    "de": frozenset("asciiart woerterbuch vornamen namen quiz translations holenlassen".split()),
    "en": frozenset("art ascii-art debian linux linuxcookie perl knghtbrd disclaimer ethnic men-women drugs "
                    "definitions computers translate-me".split()),
}
#: Spelling of the 1996 reform for frequent words whose ``ß`` after a short vowel became ``ss`` (fortunes-de keeps
#: the old spelling; the training data and the sentences students type use the new one). Applied word by word,
#: case-sensitive (:func:`modern_spelling`).
RESPELLINGS = {
    "daß": "dass", "Daß": "Dass", "muß": "muss", "Muß": "Muss", "mußte": "musste", "mußten": "mussten",
    "mußt": "musst", "müßte": "müsste", "müßten": "müssten", "läßt": "lässt", "laß": "lass", "Laß": "Lass",
    "wußte": "wusste", "wußten": "wussten", "bißchen": "bisschen", "Bißchen": "Bisschen", "Schluß": "Schluss",
    "Fluß": "Fluss", "Kuß": "Kuss", "Haß": "Hass", "naß": "nass", "gewiß": "gewiss", "Genuß": "Genuss",
    "ißt": "isst", "vergißt": "vergisst", "paßt": "passt", "Paß": "Pass", "wüßte": "wüsste", "Prozeß": "Prozess",
    "Verlaß": "Verlass", "Mißerfolg": "Misserfolg", "Schloß": "Schloss", "Faß": "Fass", "Biß": "Biss",
    "Riß": "Riss", "Schuß": "Schuss", "Einfluß": "Einfluss", "Entschluß": "Entschluss", "Überfluß": "Überfluss",
    "Abschluß": "Abschluss", "Anschluß": "Anschluss", "Ausschuß": "Ausschuss", "Verdruß": "Verdruss",
    "Gewißheit": "Gewissheit", "häßlich": "hässlich", "Mißtrauen": "Misstrauen",
    "Schlußfolgerung": "Schlussfolgerung", "blaß": "blass", "Gebiß": "Gebiss", "Geschoß": "Geschoss",
    "läßt's": "lässt's", "vermißt": "vermisst", "wißt": "wisst", "küßt": "küsst", "läßlich": "lässlich",
    "Bewußtsein": "Bewusstsein", "bewußt": "bewusst", "unbewußt": "unbewusst", "Mißbrauch": "Missbrauch",
    "mißverstanden": "missverstanden", "Selbstbewußtsein": "Selbstbewusstsein", "Nuß": "Nuss", "Roß": "Ross",
    "Kompromiß": "Kompromiss", "Imbiß": "Imbiss",
}

_SEPARATOR = re.compile(r"^%\s*$", re.M)
#: an attribution line ("\t\t-- Hermann Josef Abs"): the fortune's text ends above it
_ATTRIBUTION = re.compile(r"^\s*--")
#: a deeply indented line: the continuation of a signature (a tab first) or an indented list, table or picture
_INDENTED = re.compile(r"^(?: {0,5}\t| {6,})")
#: a speaker's line of a dialogue script ("C: Ich möchte ...", "Frage an Radio Eriwan: ...")
_SPEAKER = re.compile(r"^\s*[A-ZÄÖÜ][\w .]{0,20}:\s")
_WORD = re.compile(r"\w+(?:'s)?")
#: a possible sentence end: ``.`` ``!`` ``?`` and closing quotes or brackets, then whitespace
_END = re.compile(r"[.!?]+[\"'»«”“’)]*\s+")
#: what may open a sentence besides an upper-case letter, per language (English ASCII text quotes with `...')
_OPENING = {"de": "\"„“»«‚‘'(", "en": "\"“‘'`("}
#: a word before a full stop that does not end a sentence, per language.
#:
#: * ``de``: an ordinal ("30. Mai"), an initial ("Hermann J. Abs"), an abbreviation ("Dr. Müller", "z. B. Kinder").
#: * ``en``: an initial ("Thomas K. Connellan"; any capital but "I", the pronoun: "So did I. Then ..."), a title
#:   ("Mr. Smith", "Dr.", "St. Louis", "Gen.", "Sen."), "vs.", "cf.", "e.g.", "i.e." and "U.S." ("the U.S.
#:   Treasury"). Not a number (English writes no ordinal "30."; "in 1969. Then" ends a sentence) and not the
#:   abbreviations that mostly end one in running text ("etc.", "Inc.", "Co.", "a.m.", "Ph.D.", "Jr.", "No.").
#:   The word may follow a single or back quote too ("'Mr. Smith'", "`Dr. Who'").
_NO_END_BEFORE = {
    "de": re.compile(r"(?:^|[\s(\"„»«])(?:\d+|\w|Dr|Prof|St|Nr|Hr|Fr|Jh|Chr|Mio|Mrd|bzw|ca|vgl|ggf|evtl|usw|"
                     r"etc|Mr|Mrs|Ms|z\.\s?B|d\.\s?h|u\.\s?a|v\.\s?Chr|n\.\s?Chr)\.$"),
    "en": re.compile(r"(?:^|[\s(\"“‘'`])(?:[A-HJ-Z]|Mr|Mrs|Ms|Messrs|Mme|Dr|Prof|Rev|Hon|St|Mt|Ft|Gen|Col|Maj|Capt|"
                     r"Lt|Sgt|Adm|Cmdr|Sen|Rep|Gov|Pres|vs|cf|viz|e\.\s?g|i\.\s?e|U\.\s?S)\.$"),
}
#: the end of a line that ends a sentence (in verse, the next line starts with a capital all the same)
_LINE_END = re.compile(r"[.!?][\"'”’)]*$")
#: a line with a tab after text: a table row or a column of a list ("Nov 9\t\tKorean War Amputees")
_TABLE_ROW = re.compile(r"\S\t")
#: characters that mark a text as no running prose: URLs, e-mail, markup, code, tables, ellipses, dashes
_BAD = re.compile(r"https?:|www\.|@|[|<>{}\[\]#*_=~^\\\t]|\.\.|--|^-")
#: every character a kept sentence may hold: letters, digits, whitespace and common punctuation
_ALLOWED = re.compile(r"[\w\s.,;:!?'\"„“”‚‘’»«()\-–—/%&]+")
#: a numbered item ("1. Ellipsen werden ...", also "am 30. Mai"): two of them make an enumeration
_NUMBERED = re.compile(r"(?<!\S)\d+\.(?=\s)")
#: a list item's label at the start ("(1) Never eat on an empty stomach.", "b) ...")
_LIST_LABEL = re.compile(r"^\(?\w{1,2}\)\s")


def _check_language(language: str) -> str:
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, got {language!r}")
    return language


def _english_paragraphs(lines: list[str]) -> list[str]:
    """The paragraphs of an English fortune's lines, whitespace collapsed. English fortunes indent the first line of
    a paragraph and of each speaker's turn with a tab, so indented lines are kept, and one that starts with an
    upper-case letter or an opening quote or bracket starts a new paragraph unless the line above has the same
    indentation (a block indented as a whole); so a heading without a full stop ("Largest Number of Driving Test
    Failures" above "\\tBy April 1970 Mrs. Miriam Hargrave had failed ...") does not run into the next sentence.
    A blank line ends a paragraph too; a table row (a tab after text) is dropped and ends one."""
    out, current, above = [], [], ""
    for ln in lines + [""]:
        indent = ln[:len(ln) - len(ln.lstrip())]
        first = ln.lstrip()[:1]
        starts = bool(current) and indent and indent != above and (first.isupper() or first in _OPENING["en"])
        if ln.strip() and not _TABLE_ROW.search(ln) and not starts:
            current.append(ln)
            above = indent
            continue
        paragraph = collapse_whitespace(" ".join(current))
        if paragraph:
            out.append(paragraph)
        current, above = ([ln], indent) if starts and not _TABLE_ROW.search(ln) else ([], "")
    return out


def _verse(lines: list[str]) -> bool:
    """True if ``lines`` (a fortune) read as verse: at least two lines, and at least half of the lines that go on a
    sentence of the line above (which does not end with ``.`` ``!`` ``?``), start with an upper-case letter ("The rain
    falls on the hill / And on the quiet town, / ..."). Joined, verse makes sentences with capitals inside them;
    prose wraps its lines in lower case, but for names and "I"."""
    go_on = capitals = 0
    for above, line in zip(lines, lines[1:]):
        above, line = above.strip(), line.strip()
        if above and line and not _LINE_END.search(above):
            go_on += 1
            capitals += line[0].isupper()
    return capitals >= 2 and 2 * capitals >= go_on


def fortunes(text: str, counts: dict | None = None, *, language: str = "de") -> list[str]:
    """The fortunes of one ``strfile`` text file (fortunes separated by lines holding only ``%``) as paragraphs with
    their whitespace collapsed, in file order: German (``language="de"``) one paragraph per fortune, English
    (``"en"``) one per paragraph of a fortune (:func:`_english_paragraphs`).

    Removed from a fortune: its attribution (from the first line starting with ``--`` on: the attribution, its
    indented continuation and the notes below it, such as "(Marc-Uwe Kling: Falsch zugeordnete Zitate)" or the URL
    of a source). German: deeply indented lines too (a tab first, as in the continuation of a signature, or 6+
    leading spaces: indented lists, tables, pictures). English keeps indented lines, which there start paragraphs
    and speakers' turns ("\\tBy April 1970 Mrs. Miriam Hargrave had failed ..."), and drops table rows (a tab
    after text) instead. Skipped whole: dialogue scripts, fortunes with two or more lines that start with a
    speaker's name and a colon (``F: ...`` / ``A: ...``, ``Sie: ...`` / ``Er: ...``, ``Q: ...``; one such line, as
    in "Merke: erst denken, dann posten.", is ordinary text); in English also verse (:func:`_verse`: songs, poems,
    the Tao Te Ching). Empty fortunes are dropped.

    Args:
        text: the file's text.
        counts: if given, ``counts["fortunes"]`` (fortunes that gave a paragraph), ``counts["dialogue_skipped"]``
            and (English) ``counts["verse_skipped"]`` are incremented.
        language: ``"de"`` or ``"en"``.

    Raises:
        ValueError: another language.
    """
    english = _check_language(language) == "en"
    out, n = [], 0
    for block in _SEPARATOR.split(text):
        lines = []
        for ln in block.splitlines():
            if _ATTRIBUTION.match(ln):
                break
            if english or not _INDENTED.match(ln):
                lines.append(ln)
        if sum(1 for ln in lines if _SPEAKER.match(ln)) >= 2:
            if counts is not None:
                counts["dialogue_skipped"] = counts.get("dialogue_skipped", 0) + 1
            continue
        if english and _verse(lines):
            if counts is not None:
                counts["verse_skipped"] = counts.get("verse_skipped", 0) + 1
            continue
        paragraphs = _english_paragraphs(lines) if english else [collapse_whitespace(" ".join(lines))]
        paragraphs = [p for p in paragraphs if p]
        n += bool(paragraphs)
        out.extend(paragraphs)
    if counts is not None:
        counts["fortunes"] = counts.get("fortunes", 0) + n
    return out


def split_sentences(paragraph: str, *, language: str = "de") -> list[str]:
    """``paragraph`` (whitespace collapsed first) cut into sentences, in order: after ``.``, ``!`` or ``?`` (and any
    closing quotes or brackets) when whitespace and then an upper-case letter or an opening quote follow. Not after
    a full stop that ends a word of :data:`_NO_END_BEFORE` of the ``language``: German an ordinal number ("am 30.
    Mai"), a single letter ("Hermann J. Abs") or a common abbreviation ("Dr.", "z. B.", "Nr."); English an initial
    ("Thomas K. Connellan"), a title ("Mr.", "Mrs.", "Dr.", "St.") or "e.g.", "i.e.", "U.S.". Unlike
    :func:`aiayn.data.help_pages.split_sentences` a digit does not start a sentence (German ordinals) and the
    closing quotes stay with their sentence.

    Raises:
        ValueError: a language other than ``"de"`` and ``"en"``.
    """
    no_end, opening = _NO_END_BEFORE[_check_language(language)], _OPENING[language]
    text = collapse_whitespace(paragraph)
    pieces, start = [], 0
    for m in _END.finditer(text):
        nxt = text[m.end():m.end() + 1]
        if not nxt or not (nxt.isupper() or nxt in opening):
            continue
        head = text[start:m.end()].rstrip()
        if head.rstrip("\"'»«”“’)").endswith(".") and no_end.search(head.rstrip("\"'»«”“’)")):
            continue
        pieces.append(head)
        start = m.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def _unquote(s: str) -> str:
    """``s`` without one pair of quotes around the whole of it (``"Ich komme."`` -> ``Ich komme.``), if there is
    no other quote of that kind inside."""
    for open_, close in (('"', '"'), ("„", "“"), ("“", "”"), ("»", "«"), ("«", "»")):
        inner = s[1:-1]
        if len(s) > 2 and s[0] == open_ and s[-1] == close and open_ not in inner and close not in inner:
            return inner.strip()
    return s


def _balanced(s: str) -> bool:
    """True if the quotes and brackets of ``s`` pair up: an even number of double quotes (``"`` ``„`` ``“`` ``”``)
    and of guillemets (``»`` ``«``), as many ``(`` as ``)``. A sentence cut out of a quotation fails this."""
    return (sum(s.count(c) for c in "\"„“”") % 2 == 0 and (s.count("»") + s.count("«")) % 2 == 0
            and s.count("(") == s.count(")"))


def keep_sentence(s: str) -> bool:
    """True if ``s`` is a sentence worth translating: :func:`aiayn.data.splits.is_sentence` (ends with ``.`` ``!``
    ``?``, capitalised, 4+ words), at most 25 words, no URL, e-mail address, markup or code characters (``|`` ``<``
    ``>`` ``{`` ``}`` ``[`` ``]`` ``#`` ``*`` ``_`` ``=`` ``~`` ``^`` ``\\``), tab, ``..`` (ellipsis) or ``--``, not
    starting with ``-``, at most 4 digits, at most 30 % of its letters upper-case, only letters, digits, whitespace
    and common punctuation (``.,;:!?'"„“”‚‘’»«()-–—/%&``), balanced quotes and brackets, no enumeration (two
    or more numbers with a full stop: "1. Ellipsen sind Eier. 2. Kreise ...") and no list item ("(1) Never eat on
    an empty stomach.", "b) ...")."""
    if not is_sentence(s) or len(s.split()) > 25 or _BAD.search(s) or not _ALLOWED.fullmatch(s):
        return False
    letters = [c for c in s if c.isalpha()]
    if sum(c.isdigit() for c in s) > 4 or sum(c.isupper() for c in letters) > 0.3 * len(letters):
        return False
    if len(_NUMBERED.findall(s)) >= 2 or _LIST_LABEL.match(s):
        return False
    return _balanced(s)


def modern_spelling(s: str) -> str:
    """``s`` with the words of :data:`RESPELLINGS` in the spelling of the 1996 reform (``daß`` -> ``dass``,
    ``Schluß`` -> ``Schluss``): whole words only ("Flußpferd" and "Schlußstrich" stay), case-sensitive."""
    return _WORD.sub(lambda m: RESPELLINGS.get(m.group(0), m.group(0)), s)


def clean_sentences(sentences: Iterable[str], counts: dict | None = None) -> list[str]:
    """The sentences of ``sentences`` that :func:`keep_sentence` keeps (each stripped of surrounding whitespace and
    of one pair of quotes around the whole of it), deduplicated by :func:`~aiayn.data.splits.normalize` (the first
    kept), in order. ``counts`` (if given): ``sentences`` (seen), ``rejected`` (by :func:`keep_sentence`),
    ``duplicates`` and ``kept`` are incremented. No respelling here (:func:`fortune_sentences` does that)."""
    seen: set[str] = set()
    out = []
    c = {"sentences": 0, "rejected": 0, "duplicates": 0, "kept": 0}
    for s in sentences:
        c["sentences"] += 1
        s = _unquote(collapse_whitespace(s))
        if not keep_sentence(s):
            c["rejected"] += 1
            continue
        key = normalize(s)
        if key in seen:
            c["duplicates"] += 1
            continue
        seen.add(key)
        out.append(s)
    c["kept"] = len(out)
    if counts is not None:
        for k, v in c.items():
            counts[k] = counts.get(k, 0) + v
    return out


def fortune_sentences(files: dict[str, str], *, language: str = "de") -> tuple[list[str], dict]:
    """The sentences of fortune files in ``language`` (``"de"`` or ``"en"``): ``files`` maps a file name to its text
    (in the order read; a name may carry a folder, ``fortunes-min/fortunes``, to tell apart files of several
    packages: the rules below look at the base name). Files named in :data:`SKIP_FILES` of the language or with a
    suffix (``.dat`` indexes, ``.u8`` links, ``channel-debian.fortunes``: an IRC log) are skipped. Each file:
    :func:`fortunes` -> :func:`split_sentences` -> :func:`modern_spelling` (German only) -> :func:`keep_sentence`;
    then all files together deduplicated by :func:`~aiayn.data.splits.normalize`, the first kept.

    Returns:
        ``(sentences in file order, counts)``; counts: ``files`` (per file read: ``fortunes``,
        ``dialogue_skipped``, ``verse_skipped`` (English only), ``sentences``, ``rejected``, ``respelled`` (German
        only), ``kept``: new sentences it added), ``skipped_files`` (names), ``duplicates`` (across and within
        files), ``kept``.

    Raises:
        ValueError: another language.
    """
    german = _check_language(language) == "de"
    per_file: dict[str, dict] = {}
    skipped, out, seen, duplicates = [], [], set(), 0
    for name, text in files.items():
        base = name.rsplit("/", 1)[-1]
        if base in SKIP_FILES[language] or "." in base:
            skipped.append(name)
            continue
        c: dict = {"fortunes": 0, "dialogue_skipped": 0, **({} if german else {"verse_skipped": 0}), "sentences": 0,
                   "rejected": 0, **({"respelled": 0} if german else {}), "kept": 0}
        for paragraph in fortunes(text, c, language=language):
            for s in split_sentences(paragraph, language=language):
                c["sentences"] += 1
                s = _unquote(s)
                new = modern_spelling(s) if german else s
                if german:
                    c["respelled"] += new != s
                if not keep_sentence(new):
                    c["rejected"] += 1
                    continue
                key = normalize(new)
                if key in seen:
                    duplicates += 1
                    continue
                seen.add(key)
                out.append(new)
                c["kept"] += 1
        per_file[name] = c
    return out, {"files": per_file, "skipped_files": skipped, "duplicates": duplicates, "kept": len(out)}


def read_fortunes_deb(deb: str | os.PathLike, *, language: str = "de") -> tuple[dict[str, str], dict]:
    """The fortune files of a ``.deb`` of fortunes in ``language`` (``fortunes-de``; ``fortunes``,
    ``fortunes-min``): the regular files directly in :data:`FORTUNES_DIRS` of the language (symlinks such as
    ``NAME.u8`` are not files), by base name in archive order, decoded as UTF-8 with undecodable bytes replaced;
    and its record: ``package``, ``version``, ``file`` (the .deb's name), ``sha256``, ``licence``
    (:func:`~aiayn.data.debian.licence_of` its copyright file), ``path``. Read with ``dpkg-deb`` as
    :func:`aiayn.data.debian.read_deb` does; nothing is installed.

    Raises:
        RuntimeError: ``dpkg-deb`` cannot read the file.
        ValueError: the package has no files in the language's folder; another language.
    """
    folder = FORTUNES_DIRS[_check_language(language)]
    deb = Path(deb)
    r = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"dpkg-deb cannot read {deb}: {r.stderr.strip()}")
    fields = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    files: dict[str, str] = {}
    copyright_text = ""
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    read_all = False
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for m in tar:
                name = m.name[2:] if m.name.startswith("./") else m.name
                if not m.isfile():
                    continue
                if name.startswith(folder) and "/" not in name[len(folder):]:
                    files[name[len(folder):]] = tar.extractfile(m).read().decode("utf-8", "replace")
                elif re.fullmatch(r"usr/share/doc/[^/]+/copyright", name):
                    copyright_text = tar.extractfile(m).read().decode("utf-8", "replace")
        proc.stdout.read()  # the archive's end padding, so that dpkg-deb ends without a broken pipe
        read_all = True
    except tarfile.TarError as exc:
        raise RuntimeError(f"dpkg-deb cannot unpack {deb}: {exc}") from None
    finally:
        proc.stdout.close()
        if not read_all:
            proc.kill()
        err = proc.stderr.read().decode("utf-8", "replace")
        proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"dpkg-deb cannot unpack {deb}: {err.strip()}")
    if not files:
        raise ValueError(f"{deb} has no fortune files in {folder}")
    record = {"package": fields.get("Package", ""), "version": fields.get("Version", ""), "file": deb.name,
              "sha256": sha256_file(deb), "licence": licence_of(copyright_text), "path": folder}
    return files, record


def obtain_fortunes(package: str = FORTUNES_PACKAGE, deb_dir: str | os.PathLike = DEFAULT_DEB_DIR,
                    download: bool = True, *, language: str = "de") -> tuple[dict[str, str], dict]:
    """:func:`read_fortunes_deb` of ``package``'s ``.deb`` (fortunes in ``language``), from ``deb_dir``
    (``PACKAGE_*.deb``) or fetched into it with ``apt-get download`` (:func:`aiayn.data.debian.obtain_debs`).

    Raises:
        FileNotFoundError: the .deb is not in ``deb_dir`` and ``download`` is False.
        RuntimeError: ``apt-get download`` or ``dpkg-deb`` failed.
        ValueError: the package has no fortune files in the language's folder; another language.
    """
    _check_language(language)
    deb = obtain_debs([package], deb_dir, download=download)[package]
    return read_fortunes_deb(deb, language=language)
