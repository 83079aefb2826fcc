"""Layout at projector size (issue 14), in a real headless Chromium at 1366 x 768: the Attention explorer's main
heatmap starts above the fold, and presenter mode makes it larger (wider and taller), not smaller.

Measured on the heatmap's plot area (plotly's drag rectangle ``.nsewdrag`` inside the chart keyed ``head_view``),
the default view: cross-attention, last layer, mean over heads, "I have no time.".
"""
from __future__ import annotations

from e2e_harness import page_url, wait_ready

VIEWPORT = {"width": 1366, "height": 768}
PLOT_AREA = ".st-key-head_view .nsewdrag"


def _plot_area(browser, url: str) -> dict:
    context = browser.new_context(viewport=VIEWPORT)
    try:
        pg = context.new_page()
        pg.set_default_timeout(90_000)
        pg.goto(url)
        wait_ready(pg)
        pg.wait_for_selector(PLOT_AREA, state="attached")
        pg.wait_for_timeout(1000)  # plotly's resize to the container
        box = pg.locator(PLOT_AREA).first.bounding_box()
        assert box is not None
        return box
    finally:
        context.close()


def test_explorer_heatmap_above_the_fold_and_larger_in_presenter_mode(server, browser):
    query = "text=I+have+no+time."
    normal = _plot_area(browser, page_url(server, "pages/2_Attention_Explorer.py", query))
    big = _plot_area(browser, page_url(server, "pages/2_Attention_Explorer.py", query + "&presenter=true"))
    assert normal["y"] < VIEWPORT["height"], f"the heatmap starts at y = {normal['y']:.0f}, below the fold"
    assert big["width"] > normal["width"] and big["height"] > normal["height"], (normal, big)
