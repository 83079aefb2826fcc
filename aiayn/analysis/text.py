"""Input hygiene for text typed into the app: length limit and control characters, with messages.

The job of this module is to turn whatever a user typed into a sentence the translator accepts (or
``None``), and to say in plain words what was changed. It reuses :func:`aiayn.translator.clean_text`, the
translator's own cleaning, so the app and the translator agree on what counts as empty.
"""
from __future__ import annotations

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
