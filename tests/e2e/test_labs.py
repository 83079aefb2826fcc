"""End-to-end: the lab pages (3-6) from cold deep links in a real headless Chromium (harness: conftest.py)."""
from __future__ import annotations

import time

import pytest

from e2e_harness import page_url, wait_ready

CHART_TITLES = ".gtitle, [data-testid=stPlotlyChart] .annotation-text"


def _no_exception(pg) -> None:
    exc = pg.locator("[data-testid=stException]")
    assert exc.count() == 0, exc.first.inner_text()


def _titles(pg) -> str:
    texts = pg.locator(f"[data-testid=stPlotlyChart] {CHART_TITLES}").evaluate_all("els => els.map(e => e.textContent)")
    return " | ".join(t for t in texts if t)


def _wait_charts(pg, n: int) -> None:
    pg.wait_for_function(f"() => document.querySelectorAll('[data-testid=stPlotlyChart] .main-svg').length >= {n}")


LABS = [
    ("pages/3_Positional_Encoding.py", "d_model=16&length=20&layout=concatenated&k=4", "Positional encoding",
     ["PE (concatenated): 20 positions × d_model = 16", "Similarity depends on the offset only", "M_k PE(pos)"], 6),
    ("pages/4_Masking.py", "dec_layer=2&dec_head=2&nomask=true", "Masking",
     ["look-ahead (causal) mask", "masked: future keys", "attention mass on future tokens"], 10),
    ("pages/5_Scaled_Dot_Product.py", "d_k=8&scaled=true&mask=causal", "Scaled dot-product",
     ["d_k = 8: sample variance", "Unscaled scores saturate", "softmax per row"], 6),
    ("pages/6_Model_and_Training.py", "warmup=1000&eps=0.2", "Model and training",
     ["Parameters per component", "lrate = d_model", "Label smoothing penalises"], 3),
]


@pytest.mark.parametrize("script, query, heading, titles, n_charts", LABS, ids=[s for s, *_ in LABS])
def test_lab_page_from_a_cold_deep_link(server, page, script, query, heading, titles, n_charts):
    page.goto(page_url(server, script, query))
    wait_ready(page)
    _no_exception(page)
    assert page.get_by_text("Page not found").count() == 0
    assert heading.lower() in page.locator("h1").first.inner_text().lower()
    _wait_charts(page, n_charts)
    deadline = time.monotonic() + 30  # plotly draws titles after the SVG appears: poll, don't race
    while not all(t in _titles(page) for t in titles) and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    shown = _titles(page)
    for t in titles:
        assert t in shown, shown
    # the URL state survived the first run (bound widgets keep non-default values in the URL)
    for pair in query.split("&"):
        assert pair in page.url, page.url
    assert not page.console_errors(), page.console_errors()


def test_lab_bad_deep_link_shows_a_message(server, page):
    page.goto(page_url(server, "pages/3_Positional_Encoding.py", "d_model=7"))
    wait_ready(page)
    _no_exception(page)
    alert = page.locator("[data-testid=stAlert]").all_inner_texts()
    assert any("d_model must be even" in a for a in alert), alert
    assert not page.console_errors(), page.console_errors()
