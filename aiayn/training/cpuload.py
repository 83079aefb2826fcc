"""How much of the CPU's load is background work that gives way to a new training run (issue 21).

:func:`aiayn.training.loop.auto_threads` gives a CPU run all cores less the load already running, because two
OpenMP threads on a busy machine wait at every op's barrier for a descheduled partner (docs/training.md). Work
that yields to the new run is not such a partner: a trainer at nice 19 (``aiayn train-on`` sets its children's
scheduling autogroup to its nice, :func:`aiayn.training.continuous.yield_autogroup`) gets about 1.5 % of a core
beside a nice-0 thread (CFS weights 15 against 1,024), so it raises the load average to 2 on two cores while a
nice-0 run beside it still has both. Measured on the 2-core Zen 4 VM beside such a two-process trainer (session 34,
docs/training.md): a nice-0 step of the shipped shape took 0.56-0.59 s on two threads and 0.87-0.89 s on one.

:func:`background_cores` measures that work: the CPU time that processes which yield to this one spent over a short
window, in cores. A process yields when its scheduling group is niced by at least :data:`YIELDING_NICE` more than
ours: with autogroups on (``/proc/sys/kernel/sched_autogroup_enabled``) a process in another session competes as
its autogroup, whose nice is in ``/proc/<pid>/autogroup``; in our own session, or without autogroups, by its own
nice. Linux only; elsewhere (or where ``/proc`` cannot be read) it is 0, and the load average counts as before.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["YIELDING_NICE", "background_cores", "yielding_ticks"]

#: how much more niced than this process a scheduling group must be to count as background (nice 10 against 0:
#: CFS weight 110 against 1,024, about a tenth of a core beside one busy thread)
YIELDING_NICE = 10


def _autogroup(path: Path) -> tuple[str, int] | None:
    """``("/autogroup-149", 19)`` from ``/proc/<pid>/autogroup``; None when unreadable."""
    try:
        name, _, nice = path.read_text().split()
        return name, int(nice)
    except (OSError, ValueError):
        return None


def yielding_ticks(proc: Path = Path("/proc"), me: int | None = None) -> dict[int, int]:
    """``{pid: user + system clock ticks}`` of every process under ``proc`` whose scheduling group yields to process
    ``me`` (default: this one) by at least :data:`YIELDING_NICE` (module docstring); processes that vanish or cannot
    be read are left out, and so is ``me``. Empty without a readable ``proc``."""
    me = os.getpid() if me is None else me
    try:
        autogroups = (proc / "sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        autogroups = False
    own = _autogroup(proc / str(me) / "autogroup") if autogroups else None
    try:
        my_nice = int((proc / str(me) / "stat").read_text().rsplit(")", 1)[1].split()[16])
        entries = [p for p in proc.iterdir() if p.name.isdigit() and int(p.name) != me]
    except (OSError, ValueError, IndexError):
        return {}
    out: dict[int, int] = {}
    for entry in entries:
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": field 3 on
            nice, ticks = int(fields[16]), int(fields[11]) + int(fields[12])  # fields 19, 14 + 15 of proc(5)
        except (OSError, ValueError, IndexError):
            continue
        group = _autogroup(entry / "autogroup") if own is not None else None
        if group is not None and group[0] != own[0]:
            nice, mine = group[1], own[1]
        else:
            mine = my_nice
        if nice - mine >= YIELDING_NICE:
            out[int(entry.name)] = ticks
    return out


def background_cores(window_s: float = 0.5, proc: Path = Path("/proc")) -> float:
    """The cores' worth of CPU time that processes yielding to this one (:func:`yielding_ticks`) spent over the next
    ``window_s`` seconds (e.g. about 2.0 beside a two-process nice-19 trainer on an otherwise idle machine); 0.0
    where ``/proc`` cannot be read. Blocks for ``window_s``.

    Raises:
        ValueError: ``window_s`` not positive.
    """
    if not window_s > 0:
        raise ValueError(f"window_s must be positive, got {window_s}")
    before = yielding_ticks(proc)
    if not before:
        return 0.0
    t0 = time.monotonic()
    time.sleep(window_s)
    after = yielding_ticks(proc)
    elapsed = time.monotonic() - t0
    ticks = sum(after[p] - before[p] for p in after if p in before)
    return max(0.0, ticks / os.sysconf("SC_CLK_TCK") / elapsed)
