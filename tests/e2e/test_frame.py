"""End-to-end: one frame for every page. The sidebar's settings (direction, presenter mode) survive every page change,
also on a freshly started server whose first request is a deep link to a sub-page; the explorer's tab is in its URL;
the browser's Back and Forward restore the view that was left.

On the legacy ``pages/`` layout each page drew its own sidebar: a click from ``/?direction=de-en&presenter=true`` to
Translate opened ``/Translate?text=I+have+no+time.`` in English without presenter mode; a link copied on the
explorer's "Step by step" tab opened "One head"; Back after a page change showed the page's default view. AppTest
does not click links, keep a browser history or start servers fresh, so this runs in Chromium. To show a test fails
on older code: ``git worktree add /tmp/orig <commit>`` and ``AIAYN_E2E_APP=/tmp/orig pytest tests/e2e/test_frame.py``.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

from e2e_harness import page_url, wait_ready

SHOWN_MS = 15_000  # how long a widget may take to show its value after its run (see test_state.py)


def _sidebar(pg, label: str) -> None:
    pg.locator("[data-testid=stSidebar] [data-testid=stPageLink] a", has_text=label).first.click()
    pg.wait_for_timeout(500)
    wait_ready(pg)


def _history(pg, step: str) -> None:
    (pg.go_back if step == "back" else pg.go_forward)()
    pg.wait_for_timeout(500)
    wait_ready(pg)


def _query(pg) -> dict[str, list[str]]:
    return parse_qs(urlparse(pg.url).query)


def _path(pg) -> str:
    return urlparse(pg.url).path


def _settings(pg) -> tuple[str, bool]:
    """The frame's direction and presenter mode as the sidebar shows them."""
    bar = pg.locator("[data-testid=stSidebar]")
    checked = [d for d in ("en-de", "de-en") if bar.get_by_role("radio", name=re.compile(f"^{d}")).is_checked()]
    assert len(checked) == 1, checked
    return checked[0], bar.get_by_role("switch", name="Presenter mode").is_checked()


def _assert_settings_kept(pg, where: str) -> None:
    from playwright.sync_api import expect

    expect(pg.locator("[data-testid=stSidebar]").get_by_role("switch", name="Presenter mode")).to_be_checked(
        timeout=SHOWN_MS)
    assert _settings(pg) == ("de-en", True), (where, pg.url)
    q = _query(pg)
    # in the URL once each: a link that repeated the frame's bound parameters doubled them
    assert q.get("direction") == ["de-en"] and q.get("presenter") == ["true"], (where, pg.url)
    assert pg.locator("[data-testid=stException]").count() == 0, where


def _selected_tab(pg) -> str:
    return pg.locator("[data-testid=stMain] [role=tab][aria-selected=true]").first.inner_text()


def _picked(pg, control: str) -> str:
    """The option a segmented control of the main area shows as picked."""
    group = pg.locator("[data-testid=stMain]").get_by_role("radiogroup", name=control).first
    return group.get_by_role("radio", checked=True).first.inner_text().strip()


def _sentence_box(pg):
    return pg.get_by_label(re.compile(r"^Sentence \("))


def test_settings_survive_two_sidebar_clicks_from_a_deep_link(server, page):
    from playwright.sync_api import expect

    page.goto(page_url(server, "app.py", "direction=de-en&presenter=true"))
    wait_ready(page)
    _assert_settings_kept(page, "Overview")
    _sidebar(page, "Translate")
    assert _path(page) == "/Translate"
    _assert_settings_kept(page, "Translate")
    expect(page.get_by_label(re.compile("^Sentence in"))).to_have_value("Ich habe keine Zeit.", timeout=SHOWN_MS)
    assert page.get_by_text("Sentence in German").count() == 1
    _sidebar(page, "Masking")
    assert _path(page) == "/Masking"
    _assert_settings_kept(page, "Masking")


def test_a_fresh_servers_first_request_to_a_sub_page_runs_the_frame(fresh_server, page):
    """The server's first request is a deep link to Translate (Streamlit's legacy pages/ mode would run the page
    without the frame: no settings, the URL's parameters lost); then two sidebar clicks."""
    from playwright.sync_api import expect

    page.goto(page_url(fresh_server, "pages/1_Translate.py", "direction=de-en&presenter=true"))
    wait_ready(page)
    _assert_settings_kept(page, "Translate, first request")
    expect(page.get_by_label(re.compile("^Sentence in"))).to_have_value("Ich habe keine Zeit.", timeout=SHOWN_MS)
    _sidebar(page, "Masking")
    _assert_settings_kept(page, "Masking")
    _sidebar(page, "Overview")
    _assert_settings_kept(page, "Overview")
    assert not page.console_errors(), page.console_errors()


def test_a_link_copied_on_the_step_by_step_tab_opens_that_tab(server, browser):
    from playwright.sync_api import expect

    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    pg = ctx.new_page()
    pg.goto(page_url(server, "pages/2_Attention_Explorer.py", "head=2"))
    wait_ready(pg)
    assert "One head" in _selected_tab(pg)
    pg.get_by_role("tab", name=re.compile("Step by step")).click()
    pg.wait_for_timeout(500)
    wait_ready(pg)
    expect(pg.get_by_text("Decoding step")).to_be_visible(timeout=SHOWN_MS)
    copied = pg.url
    ctx.close()

    fresh = browser.new_context(viewport={"width": 1366, "height": 768})  # another visitor: no session, no history
    other = fresh.new_page()
    other.goto(copied)
    wait_ready(other)
    assert "Step by step" in _selected_tab(other), copied
    expect(other.get_by_text("Decoding step")).to_be_visible(timeout=SHOWN_MS)
    assert _picked(other, "Head") == "2"
    fresh.close()


def test_back_after_a_page_change_restores_the_explorers_head_and_tab(server, page):
    from playwright.sync_api import expect

    page.goto(page_url(server, "pages/2_Attention_Explorer.py", "head=4"))
    wait_ready(page)
    page.get_by_role("tab", name=re.compile("Step by step")).click()
    page.wait_for_timeout(500)
    wait_ready(page)
    left = page.url
    _sidebar(page, "Masking")
    assert _path(page) == "/Masking"
    _history(page, "back")
    assert page.url == left, (page.url, left)
    assert "Step by step" in _selected_tab(page)
    expect(page.get_by_text("Decoding step")).to_be_visible(timeout=SHOWN_MS)
    assert _picked(page, "Head") == "4"  # not "mean"


def test_back_and_forward_restore_the_explorers_own_sentence_and_translates_view(server, page):
    from playwright.sync_api import expect

    page.goto(page_url(server, "pages/2_Attention_Explorer.py"))
    wait_ready(page)
    box = _sentence_box(page)
    box.fill("My car is red.")
    box.press("Enter")
    page.wait_for_function("() => new URL(location.href).searchParams.get('text') === 'My car is red.'")
    wait_ready(page)
    _sidebar(page, "Translate")
    expect(page.get_by_label(re.compile("^Sentence in"))).to_have_value("I have no time.", timeout=SHOWN_MS)
    _history(page, "back")  # one press: the explorer, with its own sentence
    assert _path(page) == "/Attention_Explorer", page.url
    expect(_sentence_box(page)).to_have_value("My car is red.", timeout=SHOWN_MS)
    assert _query(page).get("text") == ["My car is red."]
    _history(page, "forward")
    assert _path(page) == "/Translate", page.url
    expect(page.get_by_label(re.compile("^Sentence in"))).to_have_value("I have no time.", timeout=SHOWN_MS)
    _history(page, "back")
    expect(_sentence_box(page)).to_have_value("My car is red.", timeout=SHOWN_MS)
    assert page.locator("[data-testid=stException]").count() == 0
