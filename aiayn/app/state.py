"""A page's view in the URL: one helper seeds a page's form from the URL and ``st.session_state``, writes the view
back to the URL and remembers it for the links to that page, so that every view's URL is complete and the browser's
Back and Forward restore the previous view. Not a paper section: the app's URL state.

The rule (the same on every page with a form):

* a form's values live in ``st.session_state`` (its widgets use ``persist_state="session"``, so they survive a
  visit to another page);
* the page writes its view to the URL with :func:`write_view`, leaving out values equal to their defaults (a URL
  without ``text`` means the default sentence), and the view is remembered for the page;
* every link to the page (the frame's sidebar, the Overview) carries the remembered view (:func:`link_params`), so
  arriving by a link changes nothing and adds no history entry;
* :func:`seed_form` seeds the form from the URL on the first visit and whenever the URL's view differs from the
  remembered one (a shared link, Back or Forward to an older view, another page's "open this sentence" link);
  otherwise the session's values stay.

Server-side writes to ``st.query_params`` push a browser history entry (Streamlit's frontend), so a page that
rewrote its URL on arrival needed two presses of Back; with the links carrying the view, the first run writes
nothing new.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import streamlit as st

from .params import query_param

#: session key of the remembered views: {page script path: {URL parameter: value or None}}
VIEWS_KEY = "_aiayn_views"


def remembered_view(page: str) -> dict[str, str | None] | None:
    """The view ``page`` (a script path of :data:`aiayn.app.frame.PAGES`) last wrote to the URL, or None before its
    first run in this session."""
    return st.session_state.get(VIEWS_KEY, {}).get(page)


def link_params(page: str, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Query parameters of a link to ``page``: ``extra`` (strings; None values left out) when given, else the
    page's remembered view (its parameters that are set). The shared settings (direction, presenter mode, download
    format) are not included: the frame's widgets are bound to the URL and Streamlit carries them."""
    if extra:
        return {k: str(v) for k, v in extra.items() if v is not None}
    return {k: v for k, v in (remembered_view(page) or {}).items() if v is not None}


def seed_form(page: str, params: Sequence[str], direction: str, *, from_url: Callable[[], Mapping[str, Any]],
              for_direction: Callable[[str], Mapping[str, Any] | None] | None = None,
              keys: Sequence[str] = ()) -> str | None:
    """Seed a page's form (session-state keys of its widgets) before the widgets are created.

    Args:
        page: the page's script path (its key among the remembered views).
        params: the URL parameters of the form that the page writes with :func:`write_view`.
        direction: the translation direction of this run.
        from_url: the form's values read from the URL (``{session key: value}``; absent parameters give the
            defaults). Called on the page's first run in the session and whenever the URL's ``params`` differ
            from the view the page last wrote.
        for_direction: called with the previous direction when the direction changed since the page's last run;
            returns the values to replace (e.g. the other language's default sentence) or None.
        keys: session keys whose absence also seeds from the URL (the state of a widget without
            ``persist_state``, which Streamlit drops while another page is shown).

    Returns:
        ``"url"`` when the form was seeded from the URL, ``"direction"`` when ``for_direction`` changed it, else None.
    """
    state = st.session_state
    view = remembered_view(page)
    url = {p: query_param(p) for p in params}
    dir_key = f"_aiayn_dir:{page}"
    seeded, values = None, None
    if view is None or url != {p: view.get(p) for p in params} or any(k not in state for k in keys):
        seeded, values = "url", from_url()
    elif for_direction is not None and state.get(dir_key) not in (None, direction):
        values = for_direction(state[dir_key])
        seeded = "direction" if values else None
    for key, value in (values or {}).items():
        state[key] = value
    state[dir_key] = direction
    return seeded


def write_view(page: str, values: Mapping[str, Any]) -> None:
    """Write ``page``'s view to the URL (``{parameter: value}``; None removes the parameter: the page's default)
    and remember it for the links to the page (:func:`link_params`). Parameters already holding the value are left
    untouched, so an unchanged view does not touch the URL (nor the browser's history). Parameters not named keep
    their remembered values (a page may write its view in parts, e.g. the form and a fragment's tab)."""
    view = st.session_state.setdefault(VIEWS_KEY, {}).setdefault(page, {})
    for name, value in values.items():
        text = None if value is None else str(value)
        if text is None:
            if query_param(name) is not None:
                st.query_params.pop(name, None)
        elif query_param(name) != text:
            st.query_params[name] = text
        view[name] = text


def reference_follows(text_key: str, ref_key: str, curated: Callable[[str], str]) -> None:
    """A newly typed sentence gets its curated reference (``curated(sentence)``, ``""`` when there is none),
    never the previous sentence's reference; a reference edited together with the sentence stays. Call it after
    :func:`seed_form` returned None, before the widgets; :func:`remember_form` records the values after them."""
    last = st.session_state.get(f"_aiayn_last:{text_key}")
    if last is not None and st.session_state.get(text_key) != last[0] and st.session_state.get(ref_key) == last[1]:
        st.session_state[ref_key] = curated(st.session_state.get(text_key) or "")


def remember_form(text_key: str, text: str | None, ref: str | None) -> None:
    """Record the sentence and reference a run showed (for :func:`reference_follows`)."""
    st.session_state[f"_aiayn_last:{text_key}"] = (text, ref)
