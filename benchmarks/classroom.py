"""The classroom load test: N students at once against ONE ``python -m streamlit run app.py`` server on
127.0.0.1 (a free port; the repository's ``.streamlit/config.toml`` applies), each opening Translate
(``/Translate?text=...``) or the Attention explorer (``/Attention_Explorer?text=...``) with their own sentence,
half and half. Not a paper section: the serving job.

**Method.** Most students are driven at the protocol level, as a browser would: a WebSocket to
``/_stcore/stream`` (subprotocol ``streamlit``), one ``BackMsg`` ``rerun_script`` with the page's query string
and page name (``page_script_hash`` empty: the server resolves the page from its name, as for a deep link), then
``ForwardMsg``s read until ``script_finished``. A student's time runs from opening the WebSocket to the
``script_finished`` of the run that holds both the translation text and a plotly heatmap. Real Chromium tabs on the
same 2 cores would measure the browser more than the server, so only one or two are kept as probes (full run,
N >= 10: one Translate and one explorer tab, Playwright + Debian ``chromium``, JavaScript already cached: the
browser first visits the Overview and a chart page without the model, :data:`WARM_CHART_PAGE`, which loads plotly's
bundle), timed from navigation to the translation text and the heatmap being painted (two animation frames).

**Content check.** Every output must be what a lone student gets: the translation text must equal the text of
``Translator.translate(sentence, beam_size=4, length_penalty=0.6, n_best=4)`` computed in this process (an
independent path: no Streamlit, no cache, no batching), and the heatmap's values must equal one of that lone
translation's cross-attention maps (a layer's head or head mean, ``atol`` 1e-5): the server decodes the sentences
of students who arrive together in one batch (:class:`aiayn.serving.DecodeQueue`), which differs from a lone call by
float32 rounding only (at most 2e-6 measured; ``AIAYN_MAX_BATCH=1`` in the environment turns batching off). The
explorer says when its sentence shared a batch; the sizes are kept in each row's ``detail["explorer_batches"]`` and
the server's ``AIAYN_MAX_BATCH`` / ``AIAYN_TORCH_THREADS`` / ``AIAYN_GATHER_MS`` in the JSON ``info``.

**Server cost.** CPU-seconds of the server process (``/proc/PID/stat`` utime + stime, all threads) over each level
divided by N, and its peak resident memory (``VmHWM`` of ``/proc/PID/status``; a high-water mark, so it only grows
from level to level).

**Bounds.** Levels N = 1, 10, 30 (``--quick``: 1 and 3, on whatever checkpoints ``$AIAYN_CHECKPOINTS`` names);
every student has a deadline (90 s, quick 60 s), the server start has one (90 s), the whole group has one
(15 min, quick 4 min); only loopback addresses; the server is stopped at the end. Every level uses sentences no
earlier level used, so no student is answered from another level's cache. A warm-up visit to each page (its own
sentence) loads the model before the first level.

Rows: ``classroom.cpu.n<N>.<page>.p50`` / ``.p95`` (s, page ``translate``, ``explorer``, ``all``),
``classroom.cpu.n<N>.cpu_per_student`` (CPU-s), ``classroom.cpu.n<N>.peak_rss`` (MiB) and, with probes,
``classroom.cpu.n<N>.probe.<page>`` (s). The target reads ``classroom.cpu.n30.all.p95`` (<= 3 s).

**The paper-size model.** The group then runs the same levels on a randomly initialised model of Opus-MT en-de's
exact shape (74 M parameters, vocabulary 58,101), converted through ``aiayn import-marian`` into a temporary
checkpoints folder beside the shipped models and served with ``?model=`` (:mod:`benchmarks.classroom_opus`; quick:
a small model of the same kind). Its rows are ``classroom.cpu.opus_shape.n<N>....``, the same measurements, the
parameter count in every note. ``AIAYN_BENCH_CLASSROOM=shipped`` or ``=opus_shape`` runs one class only (default
both).

**The reranked class** (``AIAYN_BENCH_CLASSROOM=rerank``, only when named): the shipped model's levels with every
student on Translate and ``?rerank=true`` (:mod:`aiayn.reranking`: the n-best list reranked and read back by the
de-en model), each checked against the reranked translation and, where the beam did not put it first, the maps of its
teacher-forced pass. Rows ``classroom.cpu.rerank.n<N>....``.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np

from .app import _wait_health, find_chromium, free_port
from .common import REPO
from .timing import Stats

PAGES = {"translate": "Translate", "explorer": "Attention_Explorer"}
#: a page with a plotly chart and no model, which the probes' browser visits before any timing (plotly's bundle)
WARM_CHART_PAGE = "Positional_Encoding"
LEVELS, QUICK_LEVELS = (1, 10, 30), (1, 3)
#: each student's own sentence; a level never reuses an earlier level's sentences
SENTENCES = (
    "The cat sleeps on the sofa.", "My brother plays football every Sunday.", "We are going to the cinema tonight.",
    "The weather is very nice today.", "I would like a cup of coffee.", "She reads a book in the garden.",
    "The train leaves at eight o'clock.", "Where is the nearest station?", "He has lived in Berlin for ten years.",
    "The children are playing in the park.", "This house is too expensive for us.", "I forgot my umbrella at home.",
    "The teacher explains the lesson.", "Can you help me with my homework?", "The shop opens at nine.",
    "Our neighbours have a big dog.", "I need a new computer for work.", "The soup is too hot.",
    "They visited their grandmother last week.", "The museum is closed on Mondays.", "My phone is on the table.",
    "We drink tea in the afternoon.", "The doctor says I should rest.", "The river flows through the city.",
    "I am learning German at school.", "The bus is late again.", "Please close the window.",
    "The flowers in the garden are red.", "He writes a letter to his friend.", "The meeting starts in ten minutes.",
    "My sister works in a hospital.", "The book is on the shelf.", "We have no milk left.",
    "The government announced new rules.", "I like to swim in the lake.", "The car is parked in front of the house.",
    "The students ask many questions.", "It is raining in the mountains.", "Do you know this song?",
    "The bread is fresh from the bakery.", "My father cooks dinner tonight.", "The film was very long.",
    "I have a question about the price.", "The hotel is near the beach.", "The company sells old furniture.",
)
WARMUP = {"translate": "Good morning, everyone.", "explorer": "Thank you very much."}
#: what the explorer writes under the model output when the server decoded the sentence in a batch (aiayn.serving)
BATCH_NOTE = re.compile(r"a batch of (\d+) sentences")
#: the server's settings that change its capacity (aiayn.app.models), recorded with the results
SERVER_ENV = ("AIAYN_MAX_BATCH", "AIAYN_TORCH_THREADS", "AIAYN_GATHER_MS", "AIAYN_SERVE_PROJECTION")
#: the group's two classes (:func:`parts`) and the variable that picks them; ``rerank`` (the shipped model's class
#: on Translate with the reverse-model reranking switched on) runs only when named
PARTS, PARTS_ENV = ("shipped", "opus_shape"), "AIAYN_BENCH_CLASSROOM"
EXTRA_PARTS = ("rerank",)


# -- one student over the WebSocket ---------------------------------------------------------------------------

def _run_async(coro):
    """``asyncio.run(coro)`` in a thread of its own: the caller's thread may already run an event loop (Playwright's
    sync API keeps one in the test process), where ``asyncio.run`` refuses to start."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="classroom-students", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]

def _heatmaps(spec: str) -> list[np.ndarray]:
    """The ``z`` arrays of the heatmap traces of a plotly JSON spec (plain lists or plotly's typed arrays)."""
    try:
        fig = json.loads(spec)
    except ValueError:
        return []
    out = []
    for trace in fig.get("data", []):
        if trace.get("type") != "heatmap" or "z" not in trace:
            continue
        z = trace["z"]
        if isinstance(z, dict) and "bdata" in z:  # plotly >= 6: {"dtype", "bdata", "shape"}
            arr = np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"]))
            shape = [int(s) for s in str(z.get("shape", len(arr))).split(",")]
            arr = arr.reshape(shape)
        else:
            arr = np.array(z, dtype=float)
        out.append(np.asarray(arr, dtype=float))
    return out


async def student(port: int, page: str, text: str, timeout: float, query: dict[str, str] | None = None) -> dict[str, Any]:
    """Open ``page`` (``"translate"`` or ``"explorer"``) with ``?text=`` (and ``query``'s other URL parameters, such
    as ``model``) over the WebSocket, as a browser's first visit does; returns ``seconds`` (to the
    ``script_finished`` of the run holding text and a heatmap), the texts (headings and markdown bodies) and
    heatmaps of that run, or ``error``."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    res: dict[str, Any] = {"page": page, "text": text}
    t0 = time.perf_counter()
    deadline = t0 + timeout
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"],
                                      origin=f"http://127.0.0.1:{port}", max_size=None, open_timeout=timeout) as ws:
            msg = BackMsg()
            msg.rerun_script.query_string = urllib.parse.urlencode({"text": text, **(query or {})})
            msg.rerun_script.page_name = PAGES[page]
            msg.rerun_script.page_script_hash = ""
            await ws.send(msg.SerializeToString())
            texts: list[str] = []
            maps: list[np.ndarray] = []
            runs = 0
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise TimeoutError(f"no translation and heatmap within {timeout:.0f} s ({runs} runs finished)")
                raw = await asyncio.wait_for(ws.recv(), left)
                if not isinstance(raw, bytes):
                    continue
                fm = ForwardMsg.FromString(raw)
                kind = fm.WhichOneof("type")
                if kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                    el = fm.delta.new_element
                    ek = el.WhichOneof("type")
                    if ek in ("heading", "markdown", "text"):
                        texts.append(getattr(el, ek).body)
                    elif ek == "exception":
                        texts.append("EXCEPTION: " + el.exception.message)
                    elif ek == "plotly_chart":
                        maps += _heatmaps(el.plotly_chart.spec)
                elif kind == "script_finished":
                    runs += 1
                    if maps and any(t.strip() for t in texts):
                        res.update(seconds=time.perf_counter() - t0, texts=texts, heatmaps=maps, runs=runs)
                        shared = [int(m.group(1)) for t in texts for m in [BATCH_NOTE.search(t)] if m]
                        res["batch"] = max(shared, default=1)  # the explorer says when it was decoded in a batch
                        return res
                    errors = [t for t in texts if t.startswith("EXCEPTION: ")]
                    if errors:
                        raise RuntimeError(f"the page shows an exception: {errors[0][11:200]}")
                    if fm.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
                        raise RuntimeError(f"the page finished without a translation and a heatmap "
                                           f"(texts: {[t[:40] for t in texts[-6:]]})")
                    texts, maps = [], []  # a rerun follows (st.rerun): its run is the one that counts
    except Exception as exc:  # noqa: BLE001 - reported per student
        res["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return res


def check(res: dict[str, Any], ref: dict[str, Any]) -> str | None:
    """None when a student's page shows the lone translation ``ref`` (text and a heatmap equal to one of its
    cross-attention maps), else what differs."""
    if "error" in res:
        return res["error"]
    want = ref["text"]
    if want:
        shown = [t for t in res["texts"] if t.strip() == want or f" {want}" in t or t.startswith(want + " ")]
    else:  # an empty output is shown as "∅"
        shown = [t for t in res["texts"] if "∅" in t]
    if not shown:
        return f"translation {want!r} not on the page (texts: {[t[:60] for t in res['texts'][:12]]})"
    for z in res["heatmaps"]:
        if any(z.shape == c.shape and np.allclose(z, c, atol=1e-5, rtol=0) for c in ref["maps"]):
            return None
    return f"no heatmap equals a cross-attention map of the lone translation (shapes {[z.shape for z in res['heatmaps']]})"


def lone_references(checkpoint: Path, sentences: list[str], *, rerank: bool = False) -> dict[str, dict[str, Any]]:
    """What a lone student gets for each sentence, computed here without Streamlit: ``text`` and the candidate
    heatmaps (each layer's cross-attention, per head and head mean, ``(T, S)``) and ``pieces`` (output length).
    ``rerank``: what the Translate page shows with ``?rerank=true`` (:mod:`aiayn.reranking` with the checkpoint of
    the opposite direction beside ``checkpoint``): the reranked translation, and when the beam did not put it first,
    the maps of its teacher-forced pass."""
    from aiayn import Translator
    from aiayn.reranking import DEFAULT_WEIGHT, reverse_direction

    tr = Translator.load(checkpoint, device="cpu")
    if rerank:
        from aiayn.reranking import rerank as rerank_nbest

        back = reverse_direction(tr.meta.get("direction") or checkpoint.name)
        reverse = Translator.load(checkpoint.parent / back, device="cpu").for_direction(back)
    out = {}
    for s in sentences:
        t = tr.translate(s, beam_size=4, length_penalty=0.6, n_best=4)
        text = t.text
        if rerank:
            best = rerank_nbest(s, t.nbest, reverse, DEFAULT_WEIGHT)[0]
            if best.beam_rank != 0:  # the page heads with the hypothesis and draws its forced pass's maps
                text, (t, _) = best.text, tr.force(s, best.text)
        cross = t.attention.cross.float().numpy()[:, 0]  # (L, H, T, S)
        cands = [c for layer in cross for c in (*layer, layer.mean(axis=0))]
        out[s] = {"text": text, "maps": [np.asarray(c, dtype=float) for c in cands], "pieces": len(t.output_ids)}
    return out


# -- the server ---------------------------------------------------------------------------------------------------
def proc_cpu_s(pid: int) -> float:
    """CPU-seconds (user + system, every thread) of process ``pid`` so far, from ``/proc/PID/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_peak_rss_mib(pid: int) -> float:
    """Peak resident memory (``VmHWM``) of process ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/PID/status")


def start_server(port: int, extra_args: list[str] | None = None, timeout: float = 90.0,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """``python -m streamlit run app.py`` on 127.0.0.1:``port`` (the repository's config applies; ``env``: variables
    set on top of this process's, such as ``AIAYN_CHECKPOINTS``), once healthy."""
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless=true", f"--server.port={port}",
           "--server.address=127.0.0.1", "--browser.gatherUsageStats=false", *(extra_args or [])]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, **env) if env else None)
    try:
        _wait_health(f"http://127.0.0.1:{port}", proc, timeout)
    except BaseException:
        stop_server(proc)
        raise
    return proc


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- browser probes -------------------------------------------------------------------------------------------------
_SHOWN = """([want]) => {
  const plot = document.querySelector('.js-plotly-plot .heatmaplayer image, .js-plotly-plot .hm image');
  return !!plot && document.body.innerText.includes(want);
}"""
_PAINTED = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"


class Probes:
    """One or two real Chromium tabs (Playwright, in a thread of their own): :meth:`open` times each page from
    navigation to the translation text and a painted heatmap. The browser's JavaScript is cached by a first
    visit to the app's home page before any timing."""

    def __init__(self, chromium: str, port: int, timeout: float, query: dict[str, str] | None = None) -> None:
        self.chromium, self.port, self.timeout, self.query = chromium, port, timeout, query or {}

    def run(self, jobs: list[tuple[str, str, str]], ready: threading.Event, start: threading.Event,
            out: list[dict[str, Any]]) -> None:
        """Open the tabs, set ``ready``, then open each ``(page, sentence, want)`` in its tab once ``start`` is
        set; append results to ``out``."""
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=self.chromium, headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                                   "--disable-background-networking"])
                try:
                    context = browser.new_context(viewport={"width": 1366, "height": 768})
                    warm = context.new_page()
                    warm.goto(f"http://127.0.0.1:{self.port}/", timeout=self.timeout * 1000)
                    warm.wait_for_selector("[data-testid=stApp][data-test-script-state=notRunning]", timeout=self.timeout * 1000)
                    # the Overview draws no chart: the plotly bundle (loaded with the first chart) is cached by a
                    # page that draws one without the model, so the probes time the server and the paint, not the
                    # download and compilation of several MB of JavaScript on the class's busy cores
                    warm.goto(f"http://127.0.0.1:{self.port}/{WARM_CHART_PAGE}", timeout=self.timeout * 1000)
                    warm.wait_for_selector(".js-plotly-plot", timeout=self.timeout * 1000)
                    tabs = [context.new_page() for _ in jobs]
                    ready.set()
                    start.wait(self.timeout)
                    for tab, (page, sentence, want) in zip(tabs, jobs):  # one after another: the tabs share a thread
                        # a background tab gets no animation frames and its timers run at most once a second
                        # (Chromium's throttling): the first tab's time would read in whole seconds
                        tab.bring_to_front()
                        t0 = time.perf_counter()
                        tab.goto(f"http://127.0.0.1:{self.port}/{PAGES[page]}?" + urllib.parse.urlencode({"text": sentence, **self.query}),
                                 timeout=self.timeout * 1000)
                        tab.wait_for_function(_SHOWN, arg=[want], timeout=self.timeout * 1000)
                        tab.evaluate(_PAINTED)
                        out.append({"page": page, "text": sentence, "seconds": time.perf_counter() - t0})
                finally:
                    browser.close()
        except Exception as exc:  # noqa: BLE001 - reported as an n/a row
            ready.set()
            out.append({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"})


# -- one level and the group ---------------------------------------------------------------------------------------
async def _level(port: int, jobs: list[tuple[str, str]], timeout: float,
                 query: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(student(port, page, text, timeout, query) for page, text in jobs)))


def run_levels(*, levels: tuple[int, ...], checkpoint: Path, chromium: str | None, quick: bool,
               extra_server_args: list[str] | None = None, server_env: dict[str, str] | None = None,
               query: dict[str, str] | None = None, pages: tuple[str, ...] = ("translate", "explorer"),
               rerank: bool = False, log=print) -> dict[str, Any]:
    """Start one server (``server_env`` on top of this process's environment), warm it, run each level (N students
    at once, spread over ``pages`` in turn: half Translate and half explorer by default; probes among them when
    ``chromium``; every URL also carries ``query``, such as ``{"model": name}``), stop the server; returns per-level
    results (see the module docstring). ``rerank``: the students are checked against the reranked translation
    (:func:`lone_references`; for a class on Translate with ``?rerank=true``)."""
    timeout = 60.0 if quick else 90.0
    group_deadline = time.monotonic() + (240.0 if quick else 900.0)
    need = sum(levels)
    if need > len(SENTENCES):
        raise ValueError(f"levels {levels} need {need} sentences, {len(SENTENCES)} are defined")
    sentences = list(SENTENCES[:need])
    refs = lone_references(checkpoint, sentences + [WARMUP[p] for p in pages], rerank=rerank)
    port = free_port()
    proc = start_server(port, extra_server_args, env=server_env)
    out: dict[str, Any] = {"port": port, "pid": proc.pid, "levels": []}
    try:
        # One page after the other, as the teacher does before the class: the levels then meet a warm server.
        # (Sessions arriving together at a cold server no longer fail on their imports since aiayn.app.preload:
        # tests/test_cold_server.py.)
        out["warmup"] = []
        for page, text in ((p, WARMUP[p]) for p in pages):
            w = _run_async(_level(port, [(page, text)], timeout * 2, query))[0]  # loads torch and the model
            out["warmup"].append({"page": page, "seconds": w.get("seconds"), "error": check(w, refs[text])})
        used = 0
        for n in levels:
            if time.monotonic() > group_deadline:
                out["levels"].append({"n": n, "skipped": "the group's deadline passed"})
                continue
            mine = sentences[used:used + n]
            used += n
            jobs = [(pages[i % len(pages)], s) for i, s in enumerate(mine)]
            n_probes = 2 if (chromium and not quick and n >= 10) else 0
            probe_jobs = [(p, s, refs[s]["text"]) for p, s in jobs[:n_probes]]
            ws_jobs = jobs[n_probes:]
            probe_out: list[dict[str, Any]] = []
            ready, start = threading.Event(), threading.Event()
            thread = None
            if n_probes:
                thread = threading.Thread(target=Probes(chromium, port, timeout, query).run,
                                          args=(probe_jobs, ready, start, probe_out), daemon=True)
                thread.start()
                ready.wait(timeout)
                time.sleep(1.0)  # let the warm-up page's rerun finish on the server
            cpu0, t0 = proc_cpu_s(proc.pid), time.perf_counter()
            start.set()
            results = _run_async(_level(port, ws_jobs, timeout, query))
            if thread is not None:
                thread.join(timeout)
            wall = time.perf_counter() - t0
            cpu = proc_cpu_s(proc.pid) - cpu0
            for r in results:
                r["wrong"] = check(r, refs[r["text"]])
                r.pop("heatmaps", None)
                r.pop("texts", None)
            level = {"n": n, "wall_s": wall, "server_cpu_s": cpu, "cpu_per_student_s": cpu / n,
                     "output_pieces": [refs[s]["pieces"] for s in mine],
                     "peak_rss_mib": proc_peak_rss_mib(proc.pid), "students": results, "probes": probe_out}
            bad = [r for r in results if r["wrong"]]
            log(f"[classroom] N={n}: {n - len(bad) - n_probes}/{n - n_probes} protocol students right, wall {wall:.1f} s, "
                f"server {cpu:.1f} CPU-s, peak RSS {level['peak_rss_mib']:.0f} MiB")
            out["levels"].append(level)
    finally:
        stop_server(proc)
    return out


def parts() -> tuple[str, ...]:
    """Which classes the group runs: ``$AIAYN_BENCH_CLASSROOM`` (comma-separated ``shipped``, ``opus_shape``,
    ``rerank``), default the first two.

    Raises:
        ValueError: an unknown part."""
    text = os.environ.get(PARTS_ENV, "").strip()
    chosen = tuple(p.strip() for p in text.split(",") if p.strip()) if text else PARTS
    bad = [p for p in chosen if p not in PARTS + EXTRA_PARTS]
    if bad or not chosen:
        raise ValueError(f"${PARTS_ENV}={text!r}: choose from {','.join(PARTS + EXTRA_PARTS)}")
    return chosen


def run(ctx) -> list:
    """The ``classroom`` group (see the module docstring): the shipped model's class, then the Opus-shape one's
    (:mod:`benchmarks.classroom_opus`), as :func:`parts` chooses."""
    chosen = parts()
    chromium = None
    if not ctx.quick:
        chromium = find_chromium(getattr(ctx, "chromium", None))
        try:
            import playwright  # noqa: F401
        except ImportError:
            chromium = None
    rows = run_shipped(ctx, chromium) if "shipped" in chosen else []
    if "rerank" in chosen:
        rows += run_shipped(ctx, chromium, rerank=True)
    if "opus_shape" in chosen:
        from .classroom_opus import run_opus_shape

        rows += run_opus_shape(ctx, chromium)
    return rows


def run_shipped(ctx, chromium: str | None, *, rerank: bool = False) -> list:
    """The class on the shipped ``en-de`` checkpoint (or ``$AIAYN_CHECKPOINTS/en-de``). ``rerank``: every student on
    Translate with ``?rerank=true`` (the reverse model's reranking and read-back: one more model run per student, two
    when the beam's output is not the one shown), rows under ``classroom.cpu.rerank``."""
    from .report import na

    levels = QUICK_LEVELS if ctx.quick else LEVELS
    prefix = "classroom.cpu.rerank" if rerank else "classroom.cpu"
    top = f"{prefix}.n{levels[-1]}.all.p95"
    name = f"{levels[-1]} students, p95 to translation and heatmap"
    if not (REPO / "app.py").is_file():
        return [na(top, "classroom", "cpu", name, "s", "app.py does not exist")]
    try:
        import websockets  # noqa: F401
    except ImportError:
        return [na(top, "classroom", "cpu", name, "s", "the websockets package is not installed")]
    env_ck = os.environ.get("AIAYN_CHECKPOINTS")
    checkpoint = Path(env_ck) / "en-de" if env_ck else REPO / "checkpoints" / "en-de"
    if not (checkpoint / "model.safetensors").is_file():
        return [na(top, "classroom", "cpu", name, "s", f"no checkpoint at {checkpoint}")]
    ctx.log(f"[classroom] levels {levels}, one server, checkpoint {checkpoint}, probes: {chromium or 'none'}")
    try:
        res = run_levels(levels=levels, checkpoint=checkpoint, chromium=chromium, quick=ctx.quick, log=ctx.log,
                         **({"query": {"rerank": "true"}, "pages": ("translate",), "rerank": True} if rerank else {}))
    except Exception as exc:  # noqa: BLE001 - a broken app must not lose the other groups
        return [na(top, "classroom", "cpu", name, "s", f"{type(exc).__name__}: {str(exc)[:200]}")]
    ctx.info["classroom_rerank" if rerank else "classroom"] = {"checkpoint": str(checkpoint), "warmup": res["warmup"],
                             "server_env": {k: os.environ.get(k, "(default)") for k in SERVER_ENV}}
    rows = rows_of(res, prefix=prefix)
    if rerank:
        for r in rows:
            r.name = "reranked " + r.name
            r.note = (r.note + "; " if r.note else "") + "every student on Translate with ?rerank=true"
    failed = [f"{w['page']}: {w['error']}" for w in res["warmup"] if w["error"]]
    if failed:  # say it on every row: the first level then also paid for the warm-up
        for r in rows:
            r.note = (r.note + "; " if r.note else "") + "warm-up visit failed (" + "; ".join(failed)[:160] + ")"
    return rows


def rows_of(res: dict[str, Any], prefix: str = "classroom.cpu") -> list:
    """Rows of :func:`run_levels`' result (ids in the module docstring, under ``prefix``)."""
    from .report import Row, na

    rows: list = []
    for lv in res["levels"]:
        n = lv["n"]
        base = f"{prefix}.n{n}"
        if "skipped" in lv:
            rows.append(na(f"{base}.all.p95", "classroom", "cpu", f"classroom {n} students, p95", "s", lv["skipped"]))
            continue
        students = lv["students"]
        n_ws = len(students)
        for page in ("translate", "explorer", "all"):
            mine = [s for s in students if page == "all" or s["page"] == page]
            if not mine and page != "all":  # a class on one page only (the reranked class): no rows for the other
                continue
            ok = [s["seconds"] for s in mine if not s["wrong"]]
            label = {"translate": "Translate", "explorer": "explorer", "all": "both pages"}[page]
            if not ok:
                why = mine[0]["wrong"] if mine else "no student on this page"
                for q in ("p50", "p95"):
                    rows.append(na(f"{base}.{page}.{q}", "classroom", "cpu", f"classroom {n} students, {label}, {q}", "s", why))
                continue
            st = Stats.of(ok)
            wrong = [s for s in mine if s["wrong"]]
            note = f"{len(ok)}/{len(mine)} protocol students answered and right"
            detail = {"samples_s": ok, "wrong": [s["wrong"] for s in wrong][:5], "students": len(mine),
                      "explorer_batches": sorted(s.get("batch", 1) for s in mine if s["page"] == "explorer"),
                      "output_pieces": lv.get("output_pieces")}
            if wrong:
                detail["target_caveat"] = f"{len(wrong)} of {len(mine)} wrong or unanswered"
            rows.append(Row(f"{base}.{page}.p50", "classroom", "cpu", f"classroom {n} students, {label}, p50", st.median, "s", note, detail))
            rows.append(Row(f"{base}.{page}.p95", "classroom", "cpu", f"classroom {n} students, {label}, p95", st.p95, "s",
                            note + f"; max {max(ok):.2f} s", detail))
        rows.append(Row(f"{base}.cpu_per_student", "classroom", "cpu", f"classroom {n} students, server CPU per student",
                        lv["cpu_per_student_s"], "CPU-s", f"server {lv['server_cpu_s']:.1f} CPU-s over {lv['wall_s']:.1f} s wall "
                        f"({n_ws} protocol students, {len(lv['probes'])} browser probes)", {"wall_s": lv["wall_s"]}))
        rows.append(Row(f"{base}.peak_rss", "classroom", "cpu", f"classroom {n} students, server peak RSS (VmHWM)",
                        lv["peak_rss_mib"], "MiB", "high-water mark of the one server process so far"))
        probe_pages = [p.get("page") for p in lv["probes"]]
        for k, p in enumerate(lv["probes"]):
            # two probes on one page (the reranked class) get their number in the id
            nth = f".{probe_pages[:k].count(p.get('page')) + 1}" if probe_pages.count(p.get("page")) > 1 else ""
            if "error" in p:
                rows.append(na(f"{base}.probe", "classroom", "cpu", f"classroom {n} students, Chromium probe", "s", p["error"]))
            else:
                rows.append(Row(f"{base}.probe.{p['page']}{nth}", "classroom", "cpu",
                                f"classroom {n} students, Chromium probe tab, {'Translate' if p['page'] == 'translate' else 'explorer'}",
                                p["seconds"], "s", "navigation to translation text + painted heatmap (JS cached)", {"text": p["text"]}))
    return rows
