"""End-to-end: a page keeps its state when the user leaves it through the sidebar and comes back (issue 14).

Streamlit drops the state of widgets that a run does not draw, so without ``persist_state`` a sidebar round trip
brought Translate back with an empty box, beam 1, alpha 0 and max length 1 (and the explorer with an empty box).
AppTest does not click sidebar links in a browser, so this runs in a real one.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

from e2e_harness import page_url, wait_ready

#: how long a widget may take to show its value after the run that set it (the browser renders after the
#: script_finished message; on a busy 2-core CI machine that lag was once longer than wait_ready's settling pause)
SHOWN_MS = 15_000


def _sidebar(pg, label: str) -> None:
    pg.locator("[data-testid=stSidebar] [data-testid=stPageLink] a", has_text=label).first.click()
    pg.wait_for_timeout(500)
    wait_ready(pg)


def _query(pg) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(pg.url).query).items()}


def _no_exception(pg) -> None:
    errors = pg.locator("[data-testid=stException]")
    assert errors.count() == 0, errors.first.inner_text()


def test_translate_and_explorer_keep_their_state_across_a_sidebar_round_trip(server, page):
    from playwright.sync_api import expect  # here: without playwright the e2e conftest skips, not a collection error

    # -- Translate: type, set beam / alpha / max length, translate -----------------------------------------------
    # a fresh session opening a link translates and draws the alignment in its first run, without a click
    page.goto(page_url(server, "pages/1_Translate.py", "text=Good%20morning"))
    wait_ready(page)
    expect(page.get_by_label(re.compile("Sentence in"))).to_have_value("Good morning", timeout=SHOWN_MS)
    assert page.locator("[data-testid=stHeading] h3").first.inner_text()
    # plotly draws after the script run has finished (its JavaScript loads on demand): wait for the SVG
    page.wait_for_selector("[data-testid=stPlotlyChart] .main-svg", timeout=30_000)
    page.get_by_role("spinbutton", name="Beam size").fill("3")
    page.get_by_role("spinbutton", name="Max output pieces").fill("20")
    page.get_by_role("slider", name=re.compile("Length penalty")).focus()
    for _ in range(4):  # 0.6 -> 1.0 in steps of 0.1
        page.keyboard.press("ArrowRight")
    box = page.get_by_label(re.compile("Sentence in"))
    box.fill("The house is small.")
    box.press("Enter")
    page.wait_for_function("() => new URL(location.href).searchParams.get('text') === 'The house is small.'")
    wait_ready(page)
    _no_exception(page)
    left = _query(page)
    assert (left["beam"], left["alpha"], left["maxlen"]) == ("3", "1.0", "20"), left
    translation = page.locator("[data-testid=stHeading] h3").first.inner_text()
    assert translation

    _sidebar(page, "Overview")
    _sidebar(page, "Translate")
    _no_exception(page)
    expect(page.get_by_label(re.compile("Sentence in"))).to_have_value("The house is small.", timeout=SHOWN_MS)
    expect(page.get_by_role("spinbutton", name="Beam size")).to_have_value("3", timeout=SHOWN_MS)
    expect(page.get_by_role("spinbutton", name="Max output pieces")).to_have_value("20", timeout=SHOWN_MS)
    expect(page.get_by_role("slider", name=re.compile("Length penalty"))).to_have_value("1", timeout=SHOWN_MS)
    back = _query(page)
    assert {k: back.get(k) for k in ("text", "beam", "alpha", "maxlen")} == {
        "text": "The house is small.", "beam": "3", "alpha": "1.0", "maxlen": "20"}, back
    # the translation and its alignment are shown again, not only the inputs
    assert page.locator("[data-testid=stHeading] h3").first.inner_text() == translation
    page.wait_for_selector("[data-testid=stPlotlyChart] .main-svg", timeout=30_000)
    assert page.get_by_text("stopped at the maximum output length").count() == 0

    # -- Attention explorer: sentence and reference ------------------------------------------------------------
    page.goto(page_url(server, "pages/2_Attention_Explorer.py"))
    wait_ready(page)
    page.get_by_label(re.compile(r"^Reference translation")).fill("Mein Auto ist rot.")
    box = page.get_by_label(re.compile(r"^Sentence \("))
    box.fill("My car is red.")
    box.press("Enter")
    page.wait_for_function("() => new URL(location.href).searchParams.get('text') === 'My car is red.'")
    wait_ready(page)
    output = page.get_by_text(re.compile("^Model output:")).first.inner_text()

    _sidebar(page, "Overview")
    _sidebar(page, "Attention explorer")
    _no_exception(page)
    expect(page.get_by_label(re.compile(r"^Sentence \("))).to_have_value("My car is red.", timeout=SHOWN_MS)
    expect(page.get_by_label(re.compile(r"^Reference translation"))).to_have_value("Mein Auto ist rot.", timeout=SHOWN_MS)
    assert _query(page).get("text") == "My car is red."
    assert page.get_by_text(re.compile("^Model output:")).first.inner_text() == output
    assert page.locator("[data-testid=stPlotlyChart]:visible .main-svg").count() > 0
    assert not page.console_errors(), page.console_errors()
