"""End-to-end: the app in a real headless Chromium against a freshly started `streamlit run app.py`."""
from __future__ import annotations

import re
from urllib.parse import quote
from pathlib import Path

import pytest

from aiayn import app as ui

from e2e_harness import REPO, page_url, screenshot, wait_ready

EXISTING = [(p, label, icon) for p, label, icon in ui.PAGES if (REPO / p).is_file()]


def _no_exception(pg) -> None:
    assert pg.locator("[data-testid=stException]").count() == 0, pg.locator("[data-testid=stException]").first.inner_text()


@pytest.mark.parametrize("script, label, icon", EXISTING, ids=[p for p, _, _ in EXISTING])
def test_every_page_from_a_cold_deep_link(server, page, script, label, icon):
    page.goto(page_url(server, script))
    wait_ready(page)
    _no_exception(page)
    assert page.get_by_text("Page not found").count() == 0
    h1 = page.locator("h1").first.inner_text()
    if label != "Overview":
        assert label.lower() in h1.lower(), h1
    # our own sidebar navigation is there, Streamlit's is not
    from playwright.sync_api import expect

    expect(page.locator("[data-testid=stSidebar] [data-testid=stPageLink]")).to_have_count(len(EXISTING))
    assert page.locator("[data-testid=stSidebarNav]").count() == 0
    screenshot(page, Path(script).stem.lower())
    assert not page.console_errors(), page.console_errors()


def test_live_translation_with_heatmap(server, page):
    page.goto(page_url(server, "pages/1_Translate.py"))
    wait_ready(page)
    box = page.get_by_label(re.compile("Sentence in"))
    box.fill("The house is small.")
    box.press("Enter")
    page.wait_for_function("() => new URL(location.href).searchParams.get('text') === 'The house is small.'")
    wait_ready(page)
    _no_exception(page)
    assert page.locator("[data-testid=stPlotlyChart] .main-svg").count() > 0
    # the heatmap's columns are the source pieces of the new sentence
    ticks = page.locator("[data-testid=stPlotlyChart] .xtick text").all_text_contents()
    surface = "".join(t.split(":", 1)[1] for t in ticks).replace("\u2581", " ")
    assert "house" in surface, ticks
    assert not page.console_errors(), page.console_errors()


def test_png_and_csv_downloads(server, page, tmp_path):
    page.goto(page_url(server, "pages/2_Attention_Explorer.py", "kind=encoder"))
    wait_ready(page)
    _no_exception(page)
    chart = page.locator("[data-testid=stPlotlyChart]:visible").first  # charts in other tabs are hidden
    chart.hover()
    with page.expect_download() as dl:
        chart.locator(".modebar-btn[data-title='download plot as a png' i]").first.click()
    png = tmp_path / "fig.png"
    dl.value.save_as(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert dl.value.suggested_filename.startswith("encoder_")
    with page.expect_download() as dl:
        page.get_by_role("button", name=re.compile("CSV")).last.click()
    csv = tmp_path / "maps.csv"
    dl.value.save_as(csv)
    header, first = csv.read_text().splitlines()[:2]
    assert header.split(",")[:7] == ["kind", "layer_from_0", "head_from_0", "batch", "query_pos", "key_pos", "weight"]
    assert first.startswith("encoder,0,0,0,0,0,")
    assert not page.console_errors(), page.console_errors()


def test_svg_export_format_from_the_url(server, page, tmp_path):
    page.goto(page_url(server, "pages/1_Translate.py", "export=svg"))
    wait_ready(page)
    chart = page.locator("[data-testid=stPlotlyChart]").first
    chart.hover()
    with page.expect_download() as dl:
        chart.locator(".modebar-btn[data-title^='download plot' i]").first.click()
    svg = tmp_path / "fig.svg"
    dl.value.save_as(svg)
    assert svg.read_text()[:200].lstrip().startswith("<svg")


def test_view_lives_in_the_url(server, page):
    page.goto(page_url(server, "pages/2_Attention_Explorer.py", "kind=decoder&layer=1&head=2&text=Good%20morning!"))
    wait_ready(page)
    _no_exception(page)
    title = page.locator("[data-testid=stPlotlyChart] .gtitle").first.text_content()
    assert "decoder" in title.lower() and "layer 1" in title and "head 2" in title
    # a control change is written back into the URL
    page.locator("[data-testid=stButtonGroup] button", has_text=re.compile(r"^encoder$")).first.click()
    page.wait_for_function("() => new URL(location.href).searchParams.get('kind') === 'encoder'")
    wait_ready(page)
    assert "encoder" in page.locator("[data-testid=stPlotlyChart] .gtitle").first.text_content().lower()


def test_rerank_switch_in_the_browser(server, page, e2e_checkpoints):
    """The Translate page's reverse-model reranking in a real browser: switching it on shows the reverse model's
    choice (computed here with the library) and the reranked n-best table; the URL keeps the switch."""
    from aiayn import Translator
    from aiayn.reranking import rerank

    text = "The cat sat on the mat."
    fwd, rev = (Translator.load(e2e_checkpoints / d, device="cpu") for d in ("en-de", "de-en"))
    t = fwd.translate(text, n_best=4, return_attention=False)
    want = rerank(text, t.nbest, rev)[0].text or "∅ (empty output)"  # a random stand-in model may write nothing
    page.goto(page_url(server, "pages/1_Translate.py", "text=" + quote(text)))
    wait_ready(page)
    page.get_by_text("Rerank with the reverse model").click()
    page.wait_for_function("() => new URL(location.href).searchParams.get('rerank') === 'true'")
    wait_ready(page)
    _no_exception(page)
    assert page.locator("h3").filter(has_text=want).count() == 1, page.locator("h3").all_inner_texts()
    assert page.get_by_text("n-best list, reranked").count() == 1
    assert page.get_by_text("log P(src | out)").count() == 1
    screenshot(page, "1_translate_reranked")
    assert not page.console_errors(), page.console_errors()
