"""What a user types, checked on every page the same way: :func:`aiayn.analysis.check_text` cleans it and says
what it changed; here each note is shown (a warning when text is left to translate, an info line when nothing
is), so bad input gets a clear message and never a traceback; and a text that looks like the model's other
language gets a hint (:func:`language_hint`). Not a paper section.
"""
from __future__ import annotations

import streamlit as st

from ..analysis import MAX_CHARS, check_text, wrong_language_hint


def checked_text(text: object, *, what: str = "sentence", prefix: str = "", max_chars: int = MAX_CHARS) -> str | None:
    """The cleaned ``text`` (cut to ``max_chars`` characters), or None when nothing is left; every note of
    :func:`~aiayn.analysis.check_text` is shown, prefixed with ``prefix`` (e.g. ``"Sentence A: "``)."""
    cleaned, notes = check_text(text, what=what, max_chars=max_chars)
    for note in notes:
        if cleaned is not None:
            st.warning(prefix + note, icon=":material/warning:")
        else:
            st.info(prefix + note, icon=":material/edit:")
    return cleaned


def sentence_or_stop(text: object, *, max_chars: int = MAX_CHARS) -> str:
    """The cleaned sentence (cut to ``max_chars`` characters); when nothing is left to translate, the note is
    shown and the page stops here."""
    cleaned = checked_text(text, max_chars=max_chars)
    if cleaned is None:
        st.stop()
    return cleaned


def optional_reference(ref: object, *, prefix: str = "") -> str | None:
    """The cleaned reference, or None when the box is empty (nothing shown) or holds nothing usable (the note
    is shown)."""
    if not isinstance(ref, str) or not ref.strip():
        return None
    return checked_text(ref, what="reference", prefix=prefix)


def language_hint(text: str | None, src_lang: str, tgt_lang: str) -> bool:
    """Warn when ``text`` looks like the model's other language (German typed into en-de, English into de-en;
    :func:`~aiayn.analysis.wrong_language_hint`, a function-word count). Returns whether a warning was shown."""
    hint = wrong_language_hint(text, src_lang, tgt_lang) if isinstance(text, str) else None
    if hint:
        st.warning(hint, icon=":material/translate:")
    return hint is not None
