"""The head-ablation page's sweep of a checkpoint without a stored one, as a server-wide background job
(aiayn.app.ablation.sweep_jobs, aiayn.jobs, aiayn.serving.DecodeQueue.run_background): Run starts it, a second visitor
sees the same job's progress and Cancel button instead of a second Run, the heatmap appears for both when it is done
(and head_sweep.json is written beside the checkpoint), Cancel stops it with nothing stored. The job is held at a gate
(an event) between two model runs, so the tests never depend on how fast the tiny model is."""
from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest
import streamlit as st
from app_pages import arr, charts, open_page

from aiayn.serving import DecodeQueue

PAGE = "pages/7_Head_Ablation.py"


@pytest.fixture()
def own_checkpoints(tiny_checkpoints, tmp_path, monkeypatch):
    """A writable copy of the tiny checkpoints without a sweep, served by the app (caches cleared around the test)."""
    root = shutil.copytree(tiny_checkpoints, tmp_path / "checkpoints")
    for d in ("en-de", "de-en"):
        (root / d / "head_sweep.json").unlink(missing_ok=True)
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield root
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture()
def gate(monkeypatch):
    """Holds the sweep's second model run until ``gate.set()`` (outside the queue's turn: the pages never wait
    for it); ``gate.pieces`` counts the pieces asked for; ``gate.entered`` is set once the second one waits."""
    hold = threading.Event()
    hold.pieces = 0
    hold.entered = threading.Event()  # set when the second model run has started waiting at the gate
    real = DecodeQueue.run_background

    def gated(self, fn, *args, **kwargs):
        hold.pieces += 1
        if hold.pieces == 2:
            hold.entered.set()
            assert hold.wait(60)
        return real(self, fn, *args, **kwargs)

    monkeypatch.setattr(DecodeQueue, "run_background", gated)
    yield hold
    hold.set()


def _job(root):
    from aiayn.app import ablation

    return ablation.sweep_jobs().get(ablation.sweep_job_key(root / "en-de"))


def _labels(at) -> list[str]:
    return [b.label for b in at.button]


def test_run_shows_progress_to_every_visitor_then_the_heatmap(own_checkpoints, gate):
    from aiayn.sweep import load_sweep

    first = open_page(PAGE)
    assert not first.exception and "Run the sweep" in _labels(first) and _job(own_checkpoints) is None
    first.button(key="ab_sweep_run").click().run()
    assert not first.exception, first.exception
    job = _job(own_checkpoints)
    assert job is not None and job.running
    assert len(first.get("progress")) == 1 and "Cancel the sweep" in _labels(first)
    second = open_page(PAGE)  # another visitor: the same job, not a second Run
    assert not second.exception, second.exception
    assert "Run the sweep" not in _labels(second) and "Cancel the sweep" in _labels(second)
    assert len(second.get("progress")) == 1 and _job(own_checkpoints) is job
    gate.set()
    assert job.wait(120) and job.status().state == "done", job.status()
    from aiayn.examples import sentence_pairs

    stored = load_sweep(own_checkpoints / "en-de", sentence_pairs("en-de"))
    assert stored is not None  # written beside the checkpoint
    for at in (first.run(), second.run()):
        assert not at.exception, at.exception
        assert not at.get("progress") and "Run the sweep" not in _labels(at)
        heatmaps = charts(at)["ab_sweep"]["data"]
        assert len(heatmaps) == 3  # encoder, decoder, cross: layer x head of chrF drop
        expect = stored[stored["kind"] == "encoder"]["chrf_drop"].to_numpy().reshape(2, 4)
        assert np.allclose(arr(heatmaps[0]["z"]), expect)


def test_cancel_stops_the_sweep_for_everyone_and_stores_nothing(own_checkpoints, gate):
    at = open_page(PAGE)
    at.button(key="ab_sweep_run").click().run()
    job = _job(own_checkpoints)
    assert job is not None and job.running
    # the job's thread may not have reached its first model run yet (the page's own model calls go first):
    # wait until it is inside the second one, so Cancel lands while a piece runs
    assert gate.entered.wait(60)
    at.button(key="ab_sweep_cancel").click().run()
    assert not at.exception, at.exception
    assert job.status().cancelling and "Cancelling…" in _labels(at)
    gate.set()  # the model run under way finishes; the sweep stops before the next one
    assert job.wait(120) and job.status().state == "cancelled"
    assert gate.pieces == 2
    assert not (own_checkpoints / "en-de" / "head_sweep.json").exists()
    at.run()
    assert not at.exception, at.exception
    assert "Run the sweep" in _labels(at) and not at.get("progress")
    assert any("cancelled" in w.value for w in at.warning)


def test_a_sweep_that_cannot_be_stored_is_still_shown_and_says_so(own_checkpoints, gate, monkeypatch):
    """A checkpoint folder the server cannot write (a read-only install): the finished sweep is shown from the job,
    with a warning that it was not stored and why, instead of the notice's promise that it is."""
    import aiayn.files
    from aiayn.sweep import load_sweep

    real = aiayn.files.atomic_write_text

    def refuse(path, text):
        if "head_sweep" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, text)

    monkeypatch.setattr(aiayn.files, "atomic_write_text", refuse)
    at = open_page(PAGE)
    at.button(key="ab_sweep_run").click().run()
    job = _job(own_checkpoints)
    gate.set()
    assert job.wait(120) and job.status().state == "done", job.status()
    from aiayn.examples import sentence_pairs

    assert load_sweep(own_checkpoints / "en-de", sentence_pairs("en-de")) is None  # nothing written
    at.run()
    assert not at.exception, at.exception
    assert len(charts(at)["ab_sweep"]["data"]) == 3  # the job's result is shown
    warned = [w.value for w in at.warning if "could not be stored" in w.value]
    assert len(warned) == 1 and "Permission denied" in warned[0] and "until it restarts" in warned[0]
