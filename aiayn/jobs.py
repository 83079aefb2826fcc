"""Long work that one visitor starts and every visitor sees: :class:`Job` runs a function in a thread of its own
with its progress, its cancellation and its outcome readable from any thread; :class:`JobRegistry` holds one job
per key (a checkpoint and a kind of work), so that starting the same work twice joins the running job. Not a paper
section: the serving job (the head sweep of a model without a stored sweep, started from the app while a class
translates).

The work itself takes its model runs from :meth:`aiayn.serving.DecodeQueue.run_background` (a class's requests go
first); this module only runs, reports and stops it. Importing it imports neither torch nor Streamlit.
"""
from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Callable

#: the states of a :class:`Job`
RUNNING, DONE, CANCELLED, FAILED = "running", "done", "cancelled", "failed"

#: ``work(report, should_stop)``: ``report(fraction in [0, 1], label)`` says how far it is; ``should_stop()``
#: becomes True once someone cancels, and the work then raises :class:`Cancelled` at its next check
Work = Callable[[Callable[[float, str], Any], Callable[[], bool]], Any]


class Cancelled(Exception):
    """Long work stopped because someone cancelled it (raised by the work at a check of ``should_stop``)."""


@dataclass(frozen=True)
class JobStatus:
    """What a poller sees of a :class:`Job`: ``state`` (``"running"``, ``"done"``, ``"cancelled"`` or
    ``"failed"``), ``fraction`` done in [0, 1], the work's last ``label``, ``cancelling`` (cancel asked, the work
    not yet stopped) and, for a failed job, ``error`` (one line: the exception's type and message)."""

    state: str
    fraction: float
    label: str
    cancelling: bool = False
    error: str | None = None


class Job:
    """``work(report, should_stop)`` run once in a daemon thread of its own, started at once.

    Args:
        name: what the work is (thread name, messages).
        work: see :data:`Work`.
    """

    def __init__(self, name: str, work: Work) -> None:
        self.name = name
        self._work = work
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._finished = threading.Event()
        self._state, self._fraction, self._label = RUNNING, 0.0, "waiting for its turn"
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"aiayn job: {name}", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            result = self._work(self._report, self._stop.is_set)
        except Cancelled:
            outcome = (CANCELLED, None, None)
        except BaseException as exc:  # noqa: BLE001 - kept for whoever polls the job
            outcome = (FAILED, None, exc)
        else:
            outcome = (DONE, result, None)
        with self._lock:
            self._state, self._result, self._error = outcome
            if self._state == DONE:
                self._fraction = 1.0
        self._finished.set()

    def _report(self, fraction: float, label: str) -> None:
        with self._lock:
            self._fraction, self._label = min(1.0, max(0.0, float(fraction))), str(label)

    def cancel(self) -> None:
        """Ask the work to stop (at its next check of ``should_stop``); a finished job is left as it is."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job has finished (or ``timeout`` seconds); True when it has."""
        return self._finished.wait(timeout)

    @property
    def running(self) -> bool:
        return not self._finished.is_set()

    def status(self) -> JobStatus:
        """The job's :class:`JobStatus` now."""
        with self._lock:
            error = None if self._error is None else f"{type(self._error).__name__}: {self._error}"
            return JobStatus(self._state, self._fraction, self._label,
                             cancelling=self._state == RUNNING and self._stop.is_set(), error=error)

    def result(self) -> Any:
        """The work's return value.

        Raises:
            RuntimeError: the job is still running.
            Cancelled: it was cancelled.
            Exception: the work's own exception, when it failed.
        """
        with self._lock:
            state, result, error = self._state, self._result, self._error
        if state == RUNNING:
            raise RuntimeError(f"{self.name} is still running")
        if state == CANCELLED:
            raise Cancelled(f"{self.name} was cancelled")
        if error is not None:
            raise error
        return result


class JobRegistry:
    """The long jobs of one server process, one per key (e.g. ``(checkpoint, stamp, "head_sweep")``). The last job
    of each key is kept after it finishes, so that every visitor sees its result, its error or that it was
    cancelled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[Hashable, Job] = {}

    def start(self, key: Hashable, work: Work, *, name: str | None = None) -> Job:
        """The running job of ``key`` if there is one (the work is not started twice), else a new job of ``work``
        (replacing a finished one)."""
        with self._lock:
            job = self._jobs.get(key)
            if job is None or not job.running:
                job = self._jobs[key] = Job(name or str(key), work)
            return job

    def get(self, key: Hashable) -> Job | None:
        """The last job of ``key`` (running or finished), or None."""
        with self._lock:
            return self._jobs.get(key)
