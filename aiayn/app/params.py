"""URL parameter checks: every view of the app is restored from its link (``?direction=de-en&layer=3``), and
a value in the link that a widget cannot take is reported in the page instead of being dropped silently.
Not a paper section: the app's URL state.

Bound widgets (``bind="query-params"``) write ``format_func(option)`` into the URL: give them options that
read well in a URL (``"en-de"``, ``"3"``, ``"mean"``) and no ``format_func``.
"""
from __future__ import annotations

from typing import Callable, Sequence

import streamlit as st

#: URL spellings of a toggle's values (compared lower-cased)
TRUE_VALUES = ("1", "true", "yes", "on")
FALSE_VALUES = ("0", "false", "no", "off")


def query_param(name: str) -> str | None:
    """The raw value of URL parameter ``name`` (the last one when repeated), or None when absent or when
    there is no URL (bare mode, outside ``streamlit run``)."""
    try:
        return st.query_params.get(name)
    except Exception:  # noqa: BLE001 - query params unavailable (bare mode)
        return None


def parse_number(raw: str, kind: type[int] | type[float] = int) -> int | float | None:
    """``kind(raw)`` (``int`` or ``float``), or None when ``raw`` does not parse or is NaN."""
    try:
        value = kind(raw)
    except ValueError:
        return None
    return None if value != value else value  # NaN


def is_int(raw: str) -> bool:
    """True if a URL parameter parses as a whole number (a validator for :func:`warn_bad_param`)."""
    return parse_number(raw, int) is not None


def is_float(raw: str) -> bool:
    """True if a URL parameter parses as a number, NaN excluded (a validator for :func:`warn_bad_param`)."""
    return parse_number(raw, float) is not None


def number_param(name: str, lo: int | float, hi: int | float, *, kind: type[int] | type[float] = int) -> int | float | None:
    """The URL parameter ``name`` as a number in ``[lo, hi]``, or None when absent; a value that does not parse
    or lies outside the range is reported with ``st.warning`` (naming the parameter and the range) and gives None,
    so the page falls back to its default."""
    raw = query_param(name)
    if raw is None:
        return None
    value = parse_number(raw, kind)
    if value is None or not lo <= value <= hi:
        what = "a whole number" if kind is int else "a number"
        st.warning(f"Ignored the URL parameter `{name}={raw[:40]}`: expected {what} from {lo} to {hi}.", icon=":material/warning:")
        return None
    return value


def is_bool(raw: str) -> bool:
    """True if a URL parameter spells a toggle's value (:data:`TRUE_VALUES`, :data:`FALSE_VALUES`, any case)."""
    return raw.lower() in TRUE_VALUES + FALSE_VALUES


def warn_bad_param(name: str, valid: Callable[[str], bool] | Sequence[str], explain: str) -> bool:
    """Show an ``st.warning`` when the URL parameter ``name`` is present but not valid.

    Call it *before* creating the widget bound to ``name`` (bound widgets drop invalid values from the
    URL silently).

    Args:
        name: the URL parameter.
        valid: a validator (:func:`is_int`, :func:`is_float`, :func:`is_bool`...) or the allowed values.
        explain: what a valid value is, shown in the warning.

    Returns:
        True when a warning was shown.
    """
    raw = query_param(name)
    if raw is None:
        return False
    ok = valid(raw) if callable(valid) else raw in valid
    if not ok:
        st.warning(f"Ignored the URL parameter `{name}={raw[:40]}`: {explain}. Showing the default instead.", icon=":material/warning:")
        return True
    return False
