"""Input hygiene for text typed into the app: length limit and control characters, with messages.

The job of this module is to turn whatever a user typed into a sentence the translator accepts (or
``None``), and to say in plain words what was changed; it also splits long input into sentences
(:func:`split_sentences`, the Translate page translates them one by one), measures how much of a text is in a
script the English-German models never saw (:func:`unseen_script_share`), and guesses when a text is in the
model's other language (:func:`wrong_language_hint`: German typed into en-de, English into de-en). It reuses
:func:`aiayn.translation.clean_text`, the translator's own cleaning, so the app and the translator agree on what
counts as empty.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any

from ..translation import LANGUAGE_NAMES, clean_text

#: longest sentence the app translates, in characters (longer input is cut, with a message).
MAX_CHARS = 1000


def check_text(text: Any, *, max_chars: int = MAX_CHARS, what: str = "sentence") -> tuple[str | None, list[str]]:
    """Validate user text before translation.

    Returns:
        ``(cleaned text or None, messages)``: None when nothing is left to translate (empty, whitespace or
        control characters only, not a string); messages explain every change made (cut to ``max_chars``,
        control/format characters replaced). Never raises.
    """
    if not isinstance(text, str):
        return None, [f"The {what} must be text."]
    notes = []
    if len(text) > max_chars:
        notes.append(f"The {what} was {len(text):,} characters long; only the first {max_chars:,} are used.")
        text = text[:max_chars]
    try:
        cleaned = clean_text(text)
    except ValueError:
        return None, [f"The {what} is empty (or only spaces and control characters): type something to translate."]
    if cleaned != " ".join(text.split()):
        notes.append(f"Control or invisible formatting characters in the {what} were replaced by spaces.")
    return cleaned, notes


#: where :func:`split_sentences` cuts: after . ! ? … (optionally followed by closing quotes or brackets) and a
#: space, or after the CJK full stops 。！？ (which take no space)
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’»)\]]*\s+|(?<=[。！？])\s*")


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences with one stated rule: a sentence ends after ``.``, ``!``, ``?`` or ``…``
    (plus any closing quotes or brackets) followed by white space, or after ``。``, ``！``, ``？``. No abbreviation
    list: "Mr. Smith" is cut after "Mr.". Empty pieces are dropped; white space inside a sentence is kept.

    Returns:
        the sentences in order (``[text.strip()]`` when there is no sentence end; ``[]`` for blank text).
    """
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        cut = m.start() + len(m.group(0).rstrip())  # keep closing quotes / brackets with their sentence
        out.append(text[start:cut])
        start = m.end()
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]


def unseen_script_share(text: str) -> tuple[float, list[str]]:
    """How much of ``text`` is written in a script other than Latin (the only one of English and German).

    Returns:
        ``(share, scripts)``: the fraction of the letters (``str.isalpha``) whose Unicode name does not start
        with ``LATIN`` (0.0 when there are no letters), and the sorted first words of those names, e.g.
        ``["CJK"]`` for Chinese, ``["ARABIC"]``, ``["CYRILLIC"]``, ``["HIRAGANA", "KATAKANA"]``.
    """
    letters = [c for c in text if c.isalpha()]
    foreign = [c for c in letters if not unicodedata.name(c, "").startswith("LATIN")]
    if not letters:
        return 0.0, []
    return len(foreign) / len(letters), sorted({unicodedata.name(c, "UNKNOWN").split()[0] for c in foreign})


#: frequent function words (articles, pronouns, auxiliaries, conjunctions, prepositions) of each language that are
#: not words of the other one; words both use or that mean something else there ("in", "so", "also", "an",
#: "was", "will", "war", "man", "hat" ...) are left out, so one of these words is evidence for its language
FUNCTION_WORDS = {
    "en": frozenset("""the a and is are were be been being have has had of to it its this that these those with for
        you he she we they i me my your his our their not do does did what where how why who which when can
        could would should there here very because or but from by at on if than then into about no yes please
        thank isn't don't doesn't didn't won't can't i'm it's""".split()),
    "de": frozenset("""der die das den dem des ein eine einen einem einer eines und ist sind waren bin bist nicht
        ich du er sie wir ihr es mich mir dich dir uns euch mein meine dein deine sein seine mit von zu zum zur
        auf für bei aus nach über unter haben habe hast hatte wird werden wurde kann können möchte sehr auch aber
        oder wo wie warum wer welche wenn dass noch schon nur kein keine keinen ja nein bitte danke heute morgen
        gern gerne im vom ins""".split()),
}
_GERMAN_LETTERS = frozenset("äöüßÄÖÜẞ")
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def language_evidence(text: str) -> dict[str, int]:
    """How many words of ``text`` are function words of each language (:data:`FUNCTION_WORDS`, case-folded),
    plus one for German when the text has an umlaut or ß (once: a German name in an English sentence is one
    point, not one per letter). Returns ``{"en": n, "de": m}``."""
    words = _WORD.findall(text.casefold().replace("’", "'"))
    counts = {lang: sum(w in vocab for w in words) for lang, vocab in FUNCTION_WORDS.items()}
    counts["de"] += any(c in _GERMAN_LETTERS for c in text)
    return counts


def likely_language(text: str, *, min_evidence: int = 2) -> str | None:
    """``"en"`` or ``"de"`` when :func:`language_evidence` clearly favours one: at least ``min_evidence`` points
    and at least twice the other's; None otherwise (too short, mixed, or neither: "Danke!" alone says nothing).
    A cheap hint, not a language identifier: it only knows the two languages of the models."""
    ev = language_evidence(text)
    (best, n), (_, other) = sorted(ev.items(), key=lambda kv: -kv[1])
    return best if n >= min_evidence and n >= 2 * other else None


def wrong_language_hint(text: str, src_lang: str, tgt_lang: str) -> str | None:
    """A message when ``text`` looks like it is in the other language than the model's source (German typed
    into an English -> German model, or English into German -> English), saying what happens and what to do;
    None when it looks right or there is too little evidence (:func:`likely_language`)."""
    guess = likely_language(text)
    if guess is None or guess == src_lang or src_lang not in LANGUAGE_NAMES:
        return None
    src, tgt, seen = (LANGUAGE_NAMES.get(x, x) for x in (src_lang, tgt_lang, guess))
    return (f"**This looks like {seen}, but this model translates {src} → {tgt}.** It reads every input as "
            f"{src}, so the output (and its attention) is of little use; type {src}, or switch the translation "
            f"direction in the sidebar to {LANGUAGE_NAMES.get(tgt_lang, tgt_lang)} → {src}.")
