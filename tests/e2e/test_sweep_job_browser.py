"""The head-ablation page's sweep job in a real browser (what AppTest cannot run: the fragment that polls every
second): a copy of the e2e checkpoints without head_sweep.json, Run pressed in one tab, the same job's progress in a
second tab, and both tabs show the heatmap by themselves when the job has written the file (no reload, no click).
The progress checks assume the sweep outlasts a page load: the shipped model's sweep (146 model runs) takes tens of
seconds on the 2-core CPU, the tiny test model's about ten."""
from __future__ import annotations

import shutil

from conftest import streamlit_server
from e2e_harness import page_url, wait_ready

SWEEP_CHART = "[data-testid=stPlotlyChart]"


def test_run_the_sweep_shows_progress_in_every_tab_then_the_heatmap(e2e_checkpoints, browser, tmp_path):
    root = tmp_path / "checkpoints"
    for d in ("en-de", "de-en"):  # the checkpoint files only (not the other models of the folder)
        shutil.copytree(e2e_checkpoints / d, root / d)
    for d in ("en-de", "de-en"):
        (root / d / "head_sweep.json").unlink(missing_ok=True)
    with streamlit_server(root, tmp_path / "server.log") as base:
        tabs = []
        for _ in range(2):
            pg = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
            pg.set_default_timeout(120_000)
            pg.goto(page_url(base, "pages/7_Head_Ablation.py"))
            wait_ready(pg)
            tabs.append(pg)
        first, second = tabs
        charts_before = first.locator(SWEEP_CHART).count()
        first.get_by_role("button", name="Run the sweep").click()
        first.wait_for_selector("[data-testid=stProgress]")
        second.reload()  # a visitor arriving now: the same job's progress and Cancel, no second Run
        wait_ready(second)
        second.wait_for_selector("[data-testid=stProgress]")
        assert second.get_by_role("button", name="Run the sweep").count() == 0
        assert second.get_by_role("button", name="Cancel the sweep").count() == 1
        for pg in tabs:
            pg.wait_for_function(f"document.querySelectorAll('{SWEEP_CHART}').length > {charts_before}")
            pg.wait_for_selector("text=Intact model: corpus chrF")
            assert pg.get_by_role("button", name="Cancel the sweep").count() == 0
        assert (root / "en-de" / "head_sweep.json").is_file()
