"""German-English pairs from gettext catalogues (``.mo``) and the cleaning rules shared by every Debian source.

A catalogue maps each English message (msgid) to its German translation (msgstr). :func:`mo_pairs` reads one
with ``polib`` (context prefixes ``ctx\\x04msgid`` become ``msgctxt`` and are not part of the text; of plural
forms only the singular pair ``msgid`` / ``msgstr[0]`` is used; fuzzy or empty translations are skipped).
:func:`clean_message` applies the text rules, :func:`pair_filter` the pair rules; both say why a pair was
dropped, so the datasheet can count each rule (:data:`RULES` describes them).
"""
from __future__ import annotations

import html
import os
import re
import tempfile
from typing import Iterable

from .corpora import collapse_whitespace

__all__ = ["RULES", "MIN_WORDS", "MAX_WORDS", "MAX_RATIO", "clean_message", "pair_filter", "german_score",
           "english_score", "mo_pairs", "clean_pairs", "strip_caret_context", "MAX_PLACEHOLDERS"]

MIN_WORDS = 5
MAX_WORDS = 80
MAX_RATIO = 2.0
#: At most this many placeholders in one message are normalised; messages with more are dropped.
MAX_PLACEHOLDERS = 2

#: The rules, as written into the datasheet (the reason keys are the counters' names).
RULES = {
    "context": "a context prefix `ctx\\x04msgid` is removed (polib gives it as msgctxt); plural forms: singular only",
    "caret_context": "a context written into the English message as `context^text` (Wesnoth's sgettext convention: "
                     "`female^Good morning`, `editor^...`) is removed, from the German side too when it has it",
    "placeholders": "printf/format placeholders (`%s`, `%1$d`, `%qD`, `%(name)s`, `{0}`, `{name}`, `$(ARG1)`, "
                    "`%1`, `$1`, `${name}`, minetest's `@1`, undecoded entities such as KDE's `&kgpg;`) are replaced by `X`; gcc's `%<`/`%>` quotes become `'`; `%%` becomes `%`",
    "too_many_placeholders": f"messages with more than {MAX_PLACEHOLDERS} placeholders are dropped",
    "accelerators": "keyboard accelerators are removed: `_File`, `&File`, `~File`, `(_F)`",
    "markup": "markup tags (`<b>`, `<a href=...>`) are removed (their text kept) and entities decoded "
              "(`&amp;` -> `&`); `\\n` and tabs become spaces",
    "too_short": f"a side with fewer than {MIN_WORDS} words",
    "too_long": f"a side with more than {MAX_WORDS} words",
    "ratio": f"word-count or character-count ratio of the sides above {MAX_RATIO}",
    "untranslated": "German side equal to the English side (case/whitespace-normalised)",
    "not_german": "German side not German-looking (no more German than English function words, "
                  "umlauts and ß counting as German), or English side more German than English",
    "odd_characters": "a side with a control character or U+FFFD",
}

_PLACEHOLDER = re.compile(
    r"%(?:\d+\$)?[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I64|I)*[diouxXeEfFgGaAcspnmDTHV]"
    r"|%\([A-Za-z_][\w.]*\)[-+ #0]*\d*(?:\.\d+)?[sdifrxXgeEc]"
    r"|%\d+"
    r"|\{[0-9]*(?:[A-Za-z_][\w.]*)?(?:![rsa])?(?::[^{}]*)?\}"
    r"|\$\([A-Za-z0-9_]+\)"
    r"|\$\{[A-Za-z0-9_]+\}"
    r"|\$\d+\b"
    r"|(?<!\w)@\d+\b"                   # minetest: "@1"
    r"|&[A-Za-z][\w.-]*;"                # an entity html.unescape does not know (KDE: "&kgpg;", "&kde;")
)
#: Wesnoth's sgettext context: a word or two and "^" before the message ("female^", "addon_tag^", "stats dialog^");
#: at least two characters and no digit, space, "^" or "@" after it, so "x^n" and "malformed ^@epsf" stay text
_CARET_CONTEXT = re.compile(r"[A-Za-z_][A-Za-z_ ]{1,30}\^(?=[^\d\s^@])")
_PERCENT = "\ue000"  # stands for a literal "%%" while placeholders are replaced
_GCC_QUOTE = re.compile(r"%[<>]")
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9:_-]*(?:\s[^<>]*)?/?>")
_ACCEL_PAREN = re.compile(r"\s*\((?:_|&)[A-Za-z0-9]\)")
_ACCEL = re.compile(r"(?<![\w&])[_~](?=[^\W_])|&(?=[^\W_])(?![A-Za-z]+;|#\d+;|#x[0-9A-Fa-f]+;)")
_ODD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]")

_DE_WORDS = frozenset(
    "der die das den dem des und ist sind nicht ein eine einen einem einer eines mit von zu für auf im ins wird "
    "werden kann können sie es wurde wurden oder auch als bei aus nach wenn diese dieser dieses sich zum zur über "
    "um noch nur alle keine kein muss müssen soll sollte hat haben wählen klicken möchten ihr ihre ihren hier "
    "dass wie durch vom beim sein seine ob damit andere anderen oder jetzt sowie geben öffnen datei dateien "
    "verwenden werden mehr neue neuen".split())
_EN_WORDS = frozenset(
    "the and is are of to a an with for this that be not can cannot you your will was were it on from by or which "
    "has have been if when these there their its into all no must should would may could select click use file "
    "files open new more than other only such".split())
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")


def german_score(text: str) -> int:
    """Number of German function words in ``text`` plus the number of words with ä, ö, ü or ß."""
    words = [w.lower() for w in _WORD.findall(text)]
    return sum(w in _DE_WORDS for w in words) + sum(any(c in w for c in "äöüß") for w in words)


def english_score(text: str) -> int:
    """Number of English function words in ``text``."""
    return sum(w.lower() in _EN_WORDS for w in _WORD.findall(text))


def clean_message(text: str, counts: dict | None = None) -> tuple[str | None, bool]:
    """Apply the text rules (:data:`RULES`: context, markup, accelerators, placeholders) to one message.

    Returns ``(cleaned_text, normalised)`` where ``normalised`` is True if a placeholder was replaced, or
    ``(None, False)`` when the message is dropped (too many placeholders). ``counts`` (optional) is a dict of
    rule -> count, incremented for every rule that changed something.
    """
    def hit(rule):
        if counts is not None:
            counts[rule] = counts.get(rule, 0) + 1
    if "\x04" in text:
        text = text.split("\x04")[-1]
        hit("context")
    text = text.replace("\\n", " ").replace("\n", " ").replace("\t", " ")
    t2 = _TAG.sub("", text)
    if t2 != text:
        hit("markup")
    t3 = _ACCEL.sub("", _ACCEL_PAREN.sub("", t2))
    if t3 != t2:
        hit("accelerators")
    t4 = html.unescape(t3)
    if t4 != t3:
        hit("markup")
    t5 = _GCC_QUOTE.sub("'", t4).replace("%%", _PERCENT)
    n = len(_PLACEHOLDER.findall(t5))
    normalised = False
    if n:
        if n > MAX_PLACEHOLDERS:
            hit("too_many_placeholders")
            return None, False
        t5 = _PLACEHOLDER.sub("X", t5)
        normalised = True
        hit("placeholders")
    t5 = t5.replace(_PERCENT, "%")
    return collapse_whitespace(t5), normalised


def pair_filter(de: str, en: str) -> str | None:
    """The pair rules of :data:`RULES` (length, ratio, untranslated, not German, odd characters) for one
    cleaned pair. Returns the reason it is dropped (a key of :data:`RULES`) or None to keep it."""
    nd, ne = len(de.split()), len(en.split())
    if nd < MIN_WORDS or ne < MIN_WORDS:
        return "too_short"
    if nd > MAX_WORDS or ne > MAX_WORDS:
        return "too_long"
    if max(nd, ne) / min(nd, ne) > MAX_RATIO or max(len(de), len(en)) / max(1, min(len(de), len(en))) > MAX_RATIO:
        return "ratio"
    if _ODD.search(de) or _ODD.search(en):
        return "odd_characters"
    if collapse_whitespace(de).casefold() == collapse_whitespace(en).casefold():
        return "untranslated"
    gd, ed = german_score(de), english_score(de)
    ge, ee = german_score(en), english_score(en)
    if gd < 1 or gd <= ed or ge > ee:
        return "not_german"
    return None


def mo_pairs(data: bytes | str) -> tuple[list[tuple[str, str]], int]:
    """``(msgstr, msgid)`` pairs of one ``.mo`` catalogue (German, English), raw (not yet cleaned), in catalogue
    order, and the number of messages read (the header entry not counted).

    ``data`` is the file's bytes or its path. Plural entries give their singular pair only; entries without a
    translation are skipped.

    Raises:
        ValueError: ``data`` is not a valid ``.mo`` file.
    """
    import polib  # function-level: only ``aiayn data debian`` needs it (not a core dependency)
    path, tmp = data, None
    if isinstance(data, (bytes, bytearray)):
        fd, tmp = tempfile.mkstemp(suffix=".mo")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        path = tmp
    try:
        try:
            mo = polib.mofile(path)
        except (OSError, ValueError, IndexError) as exc:
            raise ValueError(f"not a valid .mo catalogue: {exc}") from None
    finally:
        if tmp:
            os.unlink(tmp)
    out, n = [], 0
    for e in mo:
        if not e.msgid:
            continue
        n += 1
        de = e.msgstr_plural.get(0, "") if e.msgid_plural else e.msgstr
        if de:
            out.append((de, e.msgid))
    return out, n


def strip_caret_context(de: str, en: str, counts: dict | None = None) -> tuple[str, str]:
    """``(de, en)`` without a ``context^`` prefix on the English side (Wesnoth marks gendered and ambiguous messages
    ``female^Good morning``; its ``sgettext`` shows only what follows the ``^``), removed from the German side too
    when the translator kept it. ``counts["caret_context"]`` counts the pairs changed."""
    m = _CARET_CONTEXT.match(en)
    if not m:
        return de, en
    if counts is not None:
        counts["caret_context"] = counts.get("caret_context", 0) + 1
    prefix = m.group(0)
    return (de[len(prefix):] if de.startswith(prefix) else de), en[m.end():]


def clean_pairs(raw: Iterable[tuple[str, str]], counts: dict) -> list[tuple[str, str, bool]]:
    """Clean and filter raw ``(de, en)`` pairs: :func:`clean_message` on both sides, then :func:`pair_filter`.
    Returns ``[(de, en, normalised), ...]``; ``counts`` gets the number of pairs each rule changed or dropped."""
    out = []
    for de, en in raw:
        de, en = strip_caret_context(de, en, counts)
        cd, nd = clean_message(de, counts)
        ce, ne = clean_message(en, counts)
        if cd is None or ce is None:
            continue
        why = pair_filter(cd, ce)
        if why:
            counts[why] = counts.get(why, 0) + 1
            continue
        out.append((cd, ce, nd or ne))
    return out
