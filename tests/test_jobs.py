"""aiayn.jobs (long work in a thread of its own: progress, cancellation, outcome; one job per key) and the head
sweep run as such a job, its model runs as background pieces of the DecodeQueue (aiayn.serving) and its
cancellation hook (aiayn.sweep). Threads are synchronised with events, never with timings."""
from __future__ import annotations

import queue
import shutil
import threading

import numpy as np
import pytest

from aiayn.jobs import CANCELLED, DONE, FAILED, RUNNING, Cancelled, Job, JobRegistry

PAIRS = [("I have no time.", "Ich habe keine Zeit."), ("The house is small.", "Das Haus ist klein.")]


class Steps:
    """Work in ``n`` pieces, each released by the test (``go()``), each reported (``report``) and announced on
    ``done`` after its report; checks ``should_stop`` before each piece, fails at piece ``fail_at``."""

    def __init__(self, n: int, fail_at: int | None = None):
        self.n, self.fail_at = n, fail_at
        self.gate, self.done, self.ran = threading.Semaphore(0), queue.Queue(), []

    def go(self):
        self.gate.release()
        return self.done.get(timeout=10)

    def __call__(self, report, should_stop):
        for i in range(self.n):
            assert self.gate.acquire(timeout=10)
            if should_stop():
                self.done.put("stopped")
                raise Cancelled("stopped")
            if i == self.fail_at:
                self.done.put("failed")
                raise ValueError(f"piece {i} is broken")
            self.ran.append(i)
            report((i + 1) / self.n, f"piece {i + 1} of {self.n}")
            self.done.put(i)
        return "all pieces"


def test_progress_goes_from_zero_to_one_and_the_result_comes_back():
    work = Steps(4)
    job = Job("steps", work)
    first = job.status()
    assert (first.state, first.fraction, first.cancelling, first.error) == (RUNNING, 0.0, False, None)
    with pytest.raises(RuntimeError, match="still running"):
        job.result()
    seen = []
    for i in range(4):
        assert work.go() == i
        seen.append(job.status().fraction)
        assert job.status().label == f"piece {i + 1} of 4"
    assert seen == [0.25, 0.5, 0.75, 1.0]
    assert job.wait(10) and job.status().state == DONE and job.result() == "all pieces"


def test_cancel_stops_the_work_before_its_next_piece():
    work = Steps(5)
    job = Job("steps", work)
    assert work.go() == 0 and work.go() == 1
    job.cancel()
    assert job.status().cancelling and job.running
    assert work.go() == "stopped"
    assert job.wait(10)
    status = job.status()
    assert status.state == CANCELLED and not status.cancelling and status.fraction == 0.4 and work.ran == [0, 1]
    with pytest.raises(Cancelled):
        job.result()


def test_an_error_in_a_piece_reaches_whoever_polls_the_job():
    work = Steps(3, fail_at=1)
    job = Job("steps", work)
    assert work.go() == 0 and work.go() == "failed"
    assert job.wait(10)
    status = job.status()
    assert status.state == FAILED and status.error == "ValueError: piece 1 is broken"
    with pytest.raises(ValueError, match="piece 1 is broken"):
        job.result()


def test_the_registry_joins_a_running_job_and_replaces_a_finished_one():
    reg = JobRegistry()
    work, other = Steps(1), Steps(1)
    job = reg.start(("ckpt", "head_sweep"), work)
    assert reg.start(("ckpt", "head_sweep"), other) is job and reg.get(("ckpt", "head_sweep")) is job
    assert reg.get(("other", "head_sweep")) is None
    assert work.go() == 0 and job.wait(10)
    assert reg.get(("ckpt", "head_sweep")) is job  # kept after it finished: every visitor sees its result
    again = reg.start(("ckpt", "head_sweep"), other)
    assert again is not job and other.go() == 0 and again.wait(10) and again.result() == "all pieces"
    assert other.ran == [0] and work.ran == [0]  # each work ran once


# -- the head sweep as a background job -------------------------------------------------------------------------------
@pytest.fixture()
def tiny_copy(tiny_checkpoints, tmp_path):
    """A writable copy of the tiny en-de checkpoint (the sweep writes head_sweep.json beside it)."""
    from aiayn import Translator

    ckpt = shutil.copytree(tiny_checkpoints / "en-de", tmp_path / "en-de")
    return ckpt, Translator.load(ckpt, device="cpu")


def test_the_sweep_as_a_job_equals_the_direct_sweep_and_is_written(tiny_copy):
    from aiayn.serving import DecodeQueue
    from aiayn.sweep import cached_head_sweep, head_sweep, load_sweep

    ckpt, tr = tiny_copy
    q = DecodeQueue(tr)
    job = JobRegistry().start("sweep", lambda report, stop: cached_head_sweep(
        tr, PAIRS, checkpoint=ckpt, beam_size=2, progress=report, should_stop=stop, run=q.run_background))
    assert job.wait(120) and job.status().state == DONE and job.status().fraction == 1.0
    df = job.result()
    direct = head_sweep(tr, PAIRS, beam_size=2)
    assert np.allclose(df["chrf_drop"], direct["chrf_drop"]) and np.allclose(df["logprob_drop"], direct["logprob_drop"])
    stored = load_sweep(ckpt, PAIRS, beam_size=2)
    assert stored is not None and np.allclose(stored["chrf_drop"], df["chrf_drop"])
    # every model run was a background piece: a beam search and a teacher-forced pass per head, and the intact model
    assert q.stats.background == 2 * (3 * 2 * 4 + 1) == q.stats.turns


def test_a_cancelled_sweep_stops_within_one_model_run_and_writes_nothing(tiny_copy):
    from aiayn.sweep import cached_head_sweep, sweep_path

    ckpt, tr = tiny_copy
    ran, stop = [], threading.Event()

    def run(fn, *args, **kwargs):
        ran.append(fn.__name__)
        if len(ran) == 5:
            stop.set()  # cancelled while the fifth model run is under way
        return fn(*args, **kwargs)

    fractions = []
    with pytest.raises(Cancelled, match="head sweep was cancelled"):
        cached_head_sweep(tr, PAIRS, checkpoint=ckpt, beam_size=2, run=run, should_stop=stop.is_set,
                          progress=lambda f, label: fractions.append(f))
    assert ran == ["translate_batch", "reference_logprob"] * 2 + ["translate_batch"]
    assert len(fractions) == 2 and not sweep_path(ckpt).exists()
