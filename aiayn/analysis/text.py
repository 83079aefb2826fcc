"""Input hygiene for text typed into the app: length limit and control characters, with messages.

The job of this module is to turn whatever a user typed into a sentence the translator accepts (or
``None``), and to say in plain words what was changed; it also splits long input into sentences
(:func:`split_sentences`, the Translate page translates them one by one) and measures how much of a text is in a
script the English-German models never saw (:func:`unseen_script_share`). It reuses
:func:`aiayn.translator.clean_text`, the translator's own cleaning, so the app and the translator agree on what
counts as empty.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any

#: longest sentence the app translates, in characters (longer input is cut, with a message).
MAX_CHARS = 1000


def check_text(text: Any, *, max_chars: int = MAX_CHARS, what: str = "sentence") -> tuple[str | None, list[str]]:
    """Validate user text before translation.

    Returns:
        ``(cleaned text or None, messages)``: None when nothing is left to translate (empty, whitespace or
        control characters only, not a string); messages explain every change made (cut to ``max_chars``,
        control/format characters replaced). Never raises.
    """
    from ..translator import clean_text  # function-level: aiayn.translator imports torch; keep this module light

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
