"""Input checks shared by every teaching lab: the :class:`LessonInputError` a page shows as is, the parsers of
whole numbers and number lists, and the size limits that keep each lab fast (no paper section of its own).
"""
from __future__ import annotations

from typing import Any

import numpy as np

#: bounds that keep every lab fast (a page never builds more than these).
MAX_PE_LENGTH = 2048
MAX_PE_D_MODEL = 2048
MAX_D_K = 4096
MAX_SAMPLES = 200_000


class LessonInputError(ValueError):
    """Bad input to a lab (the message is written for the page user)."""


def as_int(value: Any, name: str) -> int:
    """``value`` as an ``int`` when it is a whole number (int, numpy integer or integral float; not bool).

    Raises:
        LessonInputError: anything else, with a message naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)) or (
        isinstance(value, float) and not value.is_integer()
    ):
        raise LessonInputError(f"{name} must be a whole number, got {value!r}")
    return int(value)


def parse_int_list(text: Any, name: str = "values", *, max_items: int = 12) -> list[int]:
    """Parse ``"0, 1, 64"`` into ``[0, 1, 64]`` (commas or spaces).

    Raises:
        LessonInputError: a non-integer item, no item, or more than ``max_items``.
    """
    if not isinstance(text, str):
        raise LessonInputError(f"{name}: expected a comma-separated list of whole numbers")
    items = [t for t in text.replace(",", " ").split() if t]
    if not items:
        raise LessonInputError(f"{name}: enter at least one whole number")
    if len(items) > max_items:
        raise LessonInputError(f"{name}: at most {max_items} values, got {len(items)}")
    out = []
    for t in items:
        try:
            out.append(int(t))
        except ValueError:
            raise LessonInputError(f"{name}: {t[:20]!r} is not a whole number") from None
    return out
