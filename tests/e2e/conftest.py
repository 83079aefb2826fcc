"""End-to-end harness: a real ``streamlit run app.py`` on a free port, driven by Debian's headless Chromium.

* The server uses the shipped checkpoints when both ``checkpoints/en-de`` and ``checkpoints/de-en`` exist,
  else the tiny test checkpoints (``AIAYN_CHECKPOINTS``). ``AIAYN_E2E_CHECKPOINTS`` forces a directory.
* Tests are marked ``e2e`` and skipped (with the reason) when ``/usr/bin/chromium`` or Playwright is missing.
* ``AIAYN_SCREENSHOTS=1`` saves a screenshot of each page into ``assets/screenshots/``.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from e2e_harness import REPO

CHROMIUM = Path(os.environ.get("AIAYN_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-dev-shm-usage"]


def pytest_collection_modifyitems(config, items):
    reason = None
    if not CHROMIUM.exists():
        reason = f"end-to-end browser tests need Debian's chromium at {CHROMIUM} (apt-get install -y chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "end-to-end browser tests need the python package playwright"
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.e2e)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shipped_ok() -> bool:
    return all((REPO / "checkpoints" / d / f).is_file() for d in ("en-de", "de-en")
               for f in ("config.json", "model.safetensors", "spm.model"))


@pytest.fixture(scope="session")
def e2e_checkpoints(request) -> Path:
    forced = os.environ.get("AIAYN_E2E_CHECKPOINTS")
    if forced:
        return Path(forced)
    if _shipped_ok():
        return REPO / "checkpoints"
    return request.getfixturevalue("tiny_checkpoints")


#: the checkout whose app the servers run: this repository, or AIAYN_E2E_APP (e.g. an older commit checked out with
#: ``git worktree add /tmp/orig <commit>``, to show that a browser test fails there)
APP_DIR = Path(os.environ.get("AIAYN_E2E_APP", REPO))


@contextlib.contextmanager
def streamlit_server(checkpoints: Path, log: Path):
    """Start ``streamlit run app.py`` of :data:`APP_DIR` on a free port; yields its base URL once healthy."""
    port = _free_port()
    env = dict(os.environ, AIAYN_CHECKPOINTS=str(checkpoints), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless=true", f"--server.port={port}",
           "--server.address=127.0.0.1", "--browser.gatherUsageStats=false", "--server.fileWatcherType=none"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=APP_DIR, env=env, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                    if r.read().decode().strip() == "ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not become healthy in 120 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def server(e2e_checkpoints, tmp_path_factory):
    """Base URL of a Streamlit server started once for the session (stopped at its end)."""
    with streamlit_server(e2e_checkpoints, tmp_path_factory.mktemp("streamlit") / "server.log") as base:
        yield base


@pytest.fixture()
def fresh_server(e2e_checkpoints, tmp_path):
    """Base URL of a Streamlit server started for this test alone: the test's first request is the server's first."""
    with streamlit_server(e2e_checkpoints, tmp_path / "server.log") as base:
        yield base


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser):
    """A fresh browser context/page; ``page.console_errors()`` lists console errors, page errors and HTTP errors."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    raw: list[str] = []
    benign: list[str] = []

    def on_response(r):
        if r.status >= 400:
            # Streamlit's frontend probes for its base path on a deep link (``/Translate/_stcore/health``,
            # then ``/_stcore/health``): those two 404s are expected, anything else is an error.
            if r.status == 404 and re.search(r"/[^/]+/_stcore/(health|host-config)$", r.url):
                benign.append(r.url)
            else:
                raw.append(f"HTTP {r.status} {r.url}")

    pg.on("console", lambda m: raw.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: raw.append(f"page error: {e}"))
    pg.on("response", on_response)

    def console_errors() -> list[str]:
        out, skip = [], len(benign)
        for e in raw:
            if skip and e.startswith("Failed to load resource") and "404" in e:
                skip -= 1
                continue
            out.append(e)
        return out

    pg.console_errors = console_errors
    yield pg
    context.close()
