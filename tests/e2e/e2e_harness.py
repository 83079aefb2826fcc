"""Helpers of the end-to-end harness (see conftest.py)."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "assets" / "screenshots"
READY = "[data-testid=stApp][data-test-script-state=notRunning]"


def page_url(base: str, script: str, query: str = "") -> str:
    """URL of a page script (``pages/2_Attention_Explorer.py`` -> ``/Attention_Explorer``; the Overview, the frame's
    default page, is ``/``)."""
    if script in ("app.py", "pages/0_Overview.py"):
        path = ""
    else:
        stem = Path(script).stem
        path = stem.split("_", 1)[1] if stem.split("_", 1)[0].isdigit() else stem
    return f"{base}/{path}" + (f"?{query}" if query else "")


def wait_ready(pg, timeout: float = 90_000) -> None:
    """Wait until the page's script run has finished (and the app has rendered something)."""
    pg.wait_for_selector("[data-testid=stApp]", timeout=timeout)
    pg.wait_for_selector("h1", timeout=timeout)
    pg.wait_for_selector(READY, timeout=timeout)
    pg.wait_for_timeout(400)
    pg.wait_for_selector(READY, timeout=timeout)


def screenshot(pg, name: str) -> None:
    if os.environ.get("AIAYN_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        # Streamlit scrolls inside its main container, so a tall viewport (not full_page) captures the page.
        size = pg.viewport_size
        pg.set_viewport_size({"width": 1400, "height": 2000})
        pg.wait_for_timeout(1000)
        pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
        if size:
            pg.set_viewport_size(size)
