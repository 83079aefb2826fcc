"""App timings in a real headless Chromium (Debian's ``chromium`` through Playwright):

* **first page**: seconds from starting ``python -m streamlit run app.py`` to the first page rendered in
  the browser (``[data-testid=stApp][data-test-script-state=notRunning]``, then two animation frames so
  that the page is painted). Chromium is started before the clock starts.
* **head switch**: on ``pages/2_Attention_Explorer.py`` with its "All heads" tab (the model-view grid)
  open (after the rerun that opening the tab may trigger), milliseconds from changing the widget labelled "Head" (segmented control, slider, number input,
  select box or radio) to the end of the rerun it
  triggers (script state ``running`` then ``notRunning``, then two animation frames); median of several
  switches, alternating between two heads. The end of the rerun is the server's ``script_finished``
  message on the app's WebSocket (decoded with Streamlit's own ``ForwardMsg`` protobuf), then two animation
  frames. (Watching the ``data-test-script-state`` attribute alone misses fast reruns: the frontend may
  handle "running" and "finished" in one render, so the attribute never changes; it is the fallback when
  the WebSocket cannot be watched.)

* **Figure 1 first draw**: on the same server, after the head switches (the model is loaded), seconds from
  opening ``pages/10_Figure_1.py`` with a new 15-word sentence (:data:`FIGURE1_SENTENCE`, no cached result) to
  the page painted (its last heading shown, the script finished, two animation frames): the beam search with its
  tree and the traced pass behind the blocks. Then **Figure 1 decodings opened**: seconds from a click on the
  closed "greedy and sampling" section to its table and the rerun's end (greedy, sampling, their teacher-forced
  passes and the next-piece bars, computed on request).

Anything missing (``app.py``, the page, Chromium, Playwright, a widget labelled "Head", the checkpoint the
app loads) gives ``n/a`` with the reason, never an error. The app reads its checkpoints from
``checkpoints/`` or ``$AIAYN_CHECKPOINTS`` (inherited by the server process); the row says which.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from .common import REPO
from .timing import Stats

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
EXPLORER_PAGE = "pages/2_Attention_Explorer.py"
FIGURE1_PAGE = "pages/10_Figure_1.py"
#: 15 words (the issue's size for the Figure 1 page's first draw)
FIGURE1_SENTENCE = "The old man walked slowly to the station because he had missed the early train."
#: the label of the Figure 1 page's closed section with the greedy and sampled decodes
FIGURE1_DECODINGS = "Decode greedily and by sampling, beside the beam"
READY = "[data-testid=stApp][data-test-script-state=notRunning]"
_PAINTED = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
#: once the script state is "notRunning": two animation frames (painted); resolves to performance.now()
_SETTLED = """() => new Promise(r => {
  const el = document.querySelector('[data-testid=stApp]');
  const f = () => (el.getAttribute('data-test-script-state') === 'notRunning')
    ? requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))) : requestAnimationFrame(f);
  f();
})"""
_OBSERVE = """() => {
  const el = document.querySelector('[data-testid=stApp]');
  window.__aiaynStates = [];
  if (window.__aiaynObserver) window.__aiaynObserver.disconnect();
  window.__aiaynObserver = new MutationObserver(() =>
    window.__aiaynStates.push([el.getAttribute('data-test-script-state'), performance.now()]));
  window.__aiaynObserver.observe(el, {attributes: true, attributeFilter: ['data-test-script-state']});
}"""
_RERUN_DONE = """() => {
  const s = window.__aiaynStates || [];
  const el = document.querySelector('[data-testid=stApp]');
  return s.some(x => x[0] === 'running') && el.getAttribute('data-test-script-state') === 'notRunning';
}"""


def find_chromium(explicit: str | None = None) -> str | None:
    """``explicit``, ``$AIAYN_CHROMIUM``, or the first Debian/Ubuntu Chromium found; None if none exists."""
    for cand in (explicit, os.environ.get("AIAYN_CHROMIUM"), *CHROMIUM_CANDIDATES, shutil.which("chromium")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"streamlit not healthy after {timeout:.0f} s")


def _is_script_finished(payload) -> bool:
    """Whether a WebSocket frame from the server is a ``ForwardMsg`` of type ``script_finished``."""
    if not isinstance(payload, (bytes, bytearray)):
        return False
    try:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        return ForwardMsg.FromString(bytes(payload)).WhichOneof("type") == "script_finished"
    except Exception:  # noqa: BLE001 - not a ForwardMsg
        return False


def _rerun(page, ws, action, timeout_ms: float = 30000) -> None:
    """Do ``action`` (a click) and return once the rerun it triggers has finished on the server and the
    browser has handled it (see the module docstring)."""
    if ws is not None:
        with ws.expect_event("framereceived", predicate=_is_script_finished, timeout=timeout_ms):
            action()
    else:
        page.evaluate(_OBSERVE)
        action()
        page.wait_for_function(_RERUN_DONE, timeout=timeout_ms)


def _head_widget(page):
    """``(kind, locator)`` of the first widget whose label starts with "Head", or None."""
    label = re.compile(r"^\s*head\b", re.I)
    for kind, testid in (("slider", "stSlider"), ("number", "stNumberInput"), ("select", "stSelectbox"),
                         ("radio", "stRadio"), ("buttons", "stButtonGroup"), ("select", "stSelectSlider")):
        boxes = page.locator(f"[data-testid={testid}]")
        for i in range(boxes.count()):
            box = boxes.nth(i)
            lab = box.locator("[data-testid=stWidgetLabel]")
            if lab.count() and label.search(lab.first.inner_text()):
                return kind, box
    return None


def _switch(page, kind: str, box, forward: bool) -> None:
    if kind == "slider":
        thumb = box.locator("[role=slider]").first
        thumb.focus()
        thumb.press("ArrowRight" if forward else "ArrowLeft")
    elif kind == "number":
        box.locator("[data-testid=stNumberInputStepUp]" if forward else "[data-testid=stNumberInputStepDown]").click()
    elif kind == "select":
        box.click()
        opts = page.locator("[role=option]")
        opts.nth(1 if forward else 0).click()
    elif kind == "radio":
        box.locator("label").nth(1 if forward else 0).click()
    else:
        box.locator("button").nth(1 if forward else 0).click()


def _figure1_first_draw(page, url: str, out: dict, timeout: float) -> None:
    """Time the Figure 1 page's first draw of :data:`FIGURE1_SENTENCE` into ``out["figure1_first_draw_s"]``."""
    from urllib.parse import quote

    t0 = time.perf_counter()
    page.goto(f"{url}/Figure_1?text={quote(FIGURE1_SENTENCE)}", timeout=timeout * 1000)
    # a fresh DOM: the page's last section drawn, then the script's end and two frames
    page.get_by_text("Greedy, beam and sampling").wait_for(timeout=timeout * 1000)
    page.evaluate(_SETTLED)
    out["figure1_first_draw_s"] = time.perf_counter() - t0
    if page.locator("[data-testid=stException]").count():
        out["figure1_warning"] = "the Figure 1 page shows an exception"
    section = page.get_by_text(FIGURE1_DECODINGS, exact=True)
    if section.count():  # the greedy / sampling section, drawn on request
        section.scroll_into_view_if_needed()
        t0 = time.perf_counter()
        section.click()
        page.get_by_role("cell", name="sampled", exact=True).wait_for(timeout=timeout * 1000)
        page.evaluate(_SETTLED)
        out["figure1_decodings_s"] = time.perf_counter() - t0


def measure_app(*, chromium: str, switches: int = 5, timeout: float = 120.0) -> dict:
    """Run the app and time it (see the module docstring). Returns ``first_page_s``, ``server_ready_s``,
    and ``head_switch_ms`` (list) or ``head_switch_na`` (reason)."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless=true", f"--server.port={port}",
           "--server.address=127.0.0.1", "--browser.gatherUsageStats=false", "--server.fileWatcherType=none"]
    out: dict = {"command": " ".join(cmd[1:]), "checkpoints": os.environ.get("AIAYN_CHECKPOINTS", str(REPO / "checkpoints"))}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"])
        page = browser.new_page()
        sockets: list = []
        page.on("websocket", lambda ws: sockets.append(ws) if "_stcore/stream" in ws.url else None)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait_health(url, proc, timeout)
            out["server_ready_s"] = time.perf_counter() - t0
            page.goto(url, timeout=timeout * 1000)
            page.wait_for_selector(READY, timeout=timeout * 1000)
            page.evaluate(_PAINTED)
            out["first_page_s"] = time.perf_counter() - t0
            if page.locator("[data-testid=stException]").count():
                out["first_page_warning"] = "the first page shows an exception"
            if not (REPO / EXPLORER_PAGE).is_file():
                out["head_switch_na"] = f"{EXPLORER_PAGE} does not exist yet"
                return out
            page.goto(url + "/Attention_Explorer", timeout=timeout * 1000)
            page.wait_for_selector(READY, timeout=timeout * 1000)
            page.evaluate(_PAINTED)
            if page.locator("[data-testid=stException]").count():
                out["head_switch_na"] = "the explorer page shows an exception: " + page.locator("[data-testid=stException]").first.inner_text()[:200]
                return out
            found = _head_widget(page)
            if found is None:
                alerts = page.locator("[data-testid=stAlert]")
                why = f" (the page says: {alerts.first.inner_text().strip()[:160]!r})" if alerts.count() else ""
                out["head_switch_na"] = "no widget labelled 'Head' on the explorer page" + why
                return out
            ws = next((w for w in reversed(sockets) if not w.is_closed()), None)
            out["rerun_end"] = "script_finished message" if ws is not None else "script-state attribute"
            tab = page.get_by_role("tab", name=re.compile("all heads", re.I))
            if tab.count():  # the model-view grid of every layer x head
                # A tab may draw its content on a rerun (tabs with on_change): wait for it to finish, or
                # the first timed switch would overlap it.
                try:
                    _rerun(page, ws, tab.first.click, timeout_ms=3000)
                except Exception:  # noqa: BLE001 - a client-side tab: no rerun
                    pass
                page.wait_for_selector(READY, timeout=timeout * 1000)
                page.evaluate(_PAINTED)
                out["tab"] = "All heads"
            kind, box = found
            out["head_widget"] = kind
            times = []
            for i in range(switches + 1):
                start = page.evaluate("() => performance.now()")
                _rerun(page, ws, lambda: _switch(page, kind, box, forward=(i % 2 == 0)))
                end = page.evaluate(_SETTLED)
                if i > 0:  # the first switch warms caches
                    times.append(end - start)
            out["head_switch_ms"] = times
            if (REPO / FIGURE1_PAGE).is_file():
                _figure1_first_draw(page, url, out, timeout)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            browser.close()
    return out


def run(ctx) -> list:
    from .report import Row, na

    first, switch = ("app.cpu.first_page", "app", "cpu", "app first page after `streamlit run`", "s"), \
                    ("app.cpu.head_switch", "app", "cpu", "explorer re-render after a head switch", "ms")
    if not (REPO / "app.py").is_file():
        return [na(*first, "app.py does not exist yet"), na(*switch, "app.py does not exist yet")]
    chromium = find_chromium(getattr(ctx, "chromium", None))
    if chromium is None:
        why = "Chromium not found (apt-get install chromium, or set AIAYN_CHROMIUM)"
        return [na(*first, why), na(*switch, why)]
    try:
        import playwright  # noqa: F401
    except ImportError:
        return [na(*first, "python playwright is not installed"), na(*switch, "python playwright is not installed")]
    ctx.log(f"[app] streamlit run app.py with {chromium}")
    try:
        res = measure_app(chromium=chromium, switches=2 if ctx.quick else 7)
    except Exception as exc:  # a broken app must not lose the other groups
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        return [na(*first, why), na(*switch, why)]
    rows = [Row(*first[:4], res["first_page_s"], first[4], f"server healthy after {res['server_ready_s']:.1f} s" + (f"; {res['first_page_warning']}" if "first_page_warning" in res else ""), res)]
    if "head_switch_ms" in res:
        st = Stats.of(res["head_switch_ms"])
        ck = res["checkpoints"]
        ck_note = "" if ck == str(REPO / "checkpoints") else f"; checkpoints from {ck}"
        rows.append(Row(*switch[:4], st.median, switch[4], f"p95 {st.p95:.0f} ms, {st.n} switches via {res['head_widget']}{ck_note}",
                        {"samples_ms": res["head_switch_ms"], "checkpoints": ck, "tab": res.get("tab")}))
    else:
        rows.append(na(*switch, res["head_switch_na"]))
    fig1 = ("app.cpu.figure1_first_draw", "app", "cpu", "Figure 1 page, first draw of a 15-word sentence", "s")
    if "figure1_first_draw_s" in res:
        rows.append(Row(*fig1[:4], res["figure1_first_draw_s"], fig1[4],
                        f"model loaded, sentence not cached; target < 1.5 s on the 2-core CPU"
                        + (f"; {res['figure1_warning']}" if "figure1_warning" in res else ""),
                        {"sentence": FIGURE1_SENTENCE}))
    else:
        rows.append(na(*fig1, res.get("head_switch_na", f"{FIGURE1_PAGE} does not exist")))
    if "figure1_decodings_s" in res:
        rows.append(Row("app.cpu.figure1_decodings", "app", "cpu", "Figure 1 page, greedy and sampling section opened",
                        res["figure1_decodings_s"], "s", "greedy + sampled decodes, their passes and bars, on request",
                        {"sentence": FIGURE1_SENTENCE}))
    return rows
