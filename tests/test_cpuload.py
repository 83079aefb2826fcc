"""aiayn/training/cpuload.py and the thread count it feeds (aiayn.training.loop.auto_threads): niced background
work that yields to a new training run does not cost that run a thread. Read from a /proc tree written here."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from aiayn.training import cpuload
from aiayn.training.loop import auto_threads

ME = 500


def _proc(root: Path, autogroups: bool | None, procs: dict[int, tuple[int, int, tuple[str, int] | None]]) -> Path:
    """A /proc tree: ``procs`` = {pid: (nice, clock ticks, (autogroup name, autogroup nice) or None)}."""
    root.mkdir(parents=True, exist_ok=True)
    if autogroups is not None:
        (root / "sys/kernel").mkdir(parents=True, exist_ok=True)
        (root / "sys/kernel/sched_autogroup_enabled").write_text("1\n" if autogroups else "0\n")
    for pid, (nice, ticks, group) in procs.items():
        d = root / str(pid)
        d.mkdir(exist_ok=True)
        # a comm with a space and a parenthesis, as proc(5) allows: fields are counted after the last ")"
        (d / "stat").write_text(f"{pid} (py (x) y) R 1 1 1 0 -1 0 0 0 0 0 {ticks - ticks // 4} {ticks // 4} 0 0 "
                                f"{20 + nice} {nice} 1 0 100\n")
        if group is not None:
            (d / "autogroup").write_text(f"/{group[0]} nice {group[1]}\n")
    return root


def test_with_autogroups_a_process_in_another_session_yields_by_its_groups_nice(tmp_path):
    proc = _proc(tmp_path, True, {
        ME: (0, 10, ("autogroup-1", 0)),
        601: (19, 400, ("autogroup-2", 19)),  # train-on's rank: its session's group niced (counted)
        602: (19, 300, ("autogroup-3", 0)),   # niced alone in a group of nice 0: competes as a whole group
        603: (12, 200, ("autogroup-1", 0)),   # our own session: its own nice decides (counted)
        604: (5, 100, ("autogroup-1", 0)),    # our session, nice 5: not enough
        605: (0, 50, ("autogroup-4", 10)),    # another group at exactly YIELDING_NICE (counted)
    })
    (proc / "606").mkdir()  # a process that vanished: no stat
    assert cpuload.yielding_ticks(proc, me=ME) == {601: 400, 603: 200, 605: 50}


def test_without_autogroups_each_process_yields_by_its_own_nice(tmp_path):
    procs = {ME: (0, 10, ("autogroup-1", 0)), 601: (19, 400, ("autogroup-2", 0)), 602: (9, 300, ("autogroup-3", 19))}
    assert cpuload.yielding_ticks(_proc(tmp_path / "off", False, procs), me=ME) == {601: 400}
    assert cpuload.yielding_ticks(_proc(tmp_path / "none", None, procs), me=ME) == {601: 400}
    # a niced caller counts only what is niced further still
    niced = {**procs, ME: (10, 10, None)}
    assert cpuload.yielding_ticks(_proc(tmp_path / "niced", False, niced), me=ME) == {}
    # no readable /proc at all (another OS): nothing is background
    assert cpuload.yielding_ticks(tmp_path / "missing", me=ME) == {}


def test_background_cores_is_the_yielding_cpu_time_over_the_window(tmp_path, monkeypatch):
    procs = {os.getpid(): (0, 10, ("autogroup-1", 0)), 601: (19, 1000, ("autogroup-2", 19)),
             602: (19, 2000, ("autogroup-2", 19)), 603: (0, 500, ("autogroup-3", 0))}
    proc = _proc(tmp_path, True, procs)
    tck = os.sysconf("SC_CLK_TCK")
    clock = [100.0]

    def window(seconds):  # during the window: 601 runs a whole core, 602 a half, 603 (not background) a whole
        clock[0] += seconds
        _proc(proc, True, {601: (19, 1000 + int(tck * seconds), ("autogroup-2", 19)),
                           602: (19, 2000 + int(tck * seconds / 2), ("autogroup-2", 19)),
                           603: (0, 500 + int(tck * seconds), ("autogroup-3", 0))})

    monkeypatch.setattr(cpuload.time, "sleep", window)
    monkeypatch.setattr(cpuload.time, "monotonic", lambda: clock[0])
    assert cpuload.background_cores(2.0, proc) == pytest.approx(1.5, abs=2 / tck)
    with pytest.raises(ValueError, match="window_s must be positive"):
        cpuload.background_cores(0.0, proc)
    # nothing niced running: no window is waited for
    monkeypatch.setattr(cpuload.time, "sleep", lambda s: pytest.fail("waited with nothing to measure"))
    assert cpuload.background_cores(2.0, _proc(tmp_path / "quiet", True, {os.getpid(): (0, 1, ("a", 0))})) == 0.0


def test_auto_threads_do_not_give_way_to_work_that_yields():
    # two cores under a load of 2.2: a nice-0 neighbour costs a thread, a nice-19 trainer of 2 cores' work does not
    assert auto_threads(2, 2.2, background=0.0) == 1
    assert auto_threads(2, 2.2, background=2.0) == 2
    assert auto_threads(2, 3.4, background=1.0) == 1  # the rest of the load still counts
    assert auto_threads(2, 0.3, background=2.0) == 2  # more background than load (averaged over a minute): no bonus
    assert auto_threads(16, 6.0, background=2.0) == 13
