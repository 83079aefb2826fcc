"""A freshly started ``streamlit run app.py`` answers sessions that arrive at once (issue 14, a class after the
teacher restarts the server): no page shows an import error. Protocol level (Streamlit's WebSocket, as a
browser's first visit), no browser; the tiny test checkpoints. Before ``aiayn.app.preload`` two of three such
sessions failed with "partially initialized module 'numpy'" or "cannot import name 'app' from 'aiayn'"."""
from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_every_model_page_imports_the_preload_module_first():
    """The cure only works if nothing is imported before it (a page holding another import lock could wait)."""
    for page in sorted((REPO / "pages").glob("*.py")):
        if page.name == "0_Overview.py":  # shows no model and stays free of torch (it warms the imports at its end)
            continue
        body = [n for n in ast.parse(page.read_text(encoding="utf-8")).body
                if isinstance(n, (ast.Import, ast.ImportFrom)) and not (isinstance(n, ast.ImportFrom)
                                                                         and n.module == "__future__")]
        first = body[0]
        assert isinstance(first, ast.Import) and first.names[0].name == "aiayn.app.preload", page.name


def test_sessions_arriving_together_at_a_cold_server_all_get_their_page(tiny_checkpoints, monkeypatch):
    pytest.importorskip("websockets")
    from benchmarks.app import free_port
    from benchmarks.classroom import _run_async, start_server, stop_server, student

    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tiny_checkpoints))  # the server inherits the environment
    port = free_port()
    proc = start_server(port, timeout=120)
    jobs = [("explorer", "I have no time."), ("translate", "The house is small."), ("explorer", "Good morning.")]

    async def together():
        return await asyncio.gather(*(student(port, page, text, 120) for page, text in jobs))

    try:
        results = _run_async(together())
    finally:
        stop_server(proc)
    errors = [f"{r['page']}: {r['error']}" for r in results if r.get("error")]
    assert not errors, errors
    assert all(r["heatmaps"] and any(t.strip() for t in r["texts"]) for r in results)
