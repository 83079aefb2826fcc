"""``aiayn train-on --processes N`` (aiayn/training/continuous.py): one run trained by N DistributedDataParallel
processes (gloo on the CPU) that the command starts itself.

* A recipe's ``accumulation`` counts a whole step's micro-batches: N processes each take their share, so the steps
  are the same for any N, and an N that does not divide the step is refused before anything starts.
* A run trained by two processes resumes on one with the accumulation that keeps its steps (and the other way).
* The processes form one process group: a rank that fails stops the others (they would wait for it at the next
  all-reduce), and the deadline stops them all.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from aiayn.training import continuous
from aiayn.training.continuous import BadInput, rank_envs, resume_accumulation, share_accumulation

REPO = Path(__file__).resolve().parent.parent


# -- pure parts -----------------------------------------------------------------------------------------------------
def test_a_steps_micro_batches_are_shared_by_the_processes():
    assert [share_accumulation(6, n) for n in (1, 2, 3, 6)] == [6, 3, 2, 1]
    with pytest.raises(BadInput, match=r"give --processes 1 or 2 or 3 or 6"):
        share_accumulation(6, 4)


@pytest.mark.parametrize("stored, saved_world, given, processes, expected", [
    (3, 2, None, 1, 6),     # saved by two processes, resumed on one: the same 6 micro-batches a step
    (6, 1, None, 2, 3),     # and the other way
    (3, 2, None, 2, None),  # the same world: nothing to give
    (0, 1, None, 2, None),  # derived from tokens_per_step: aiayn train rounds it to the world itself
    (3, 2, 4, 2, 2),        # a new step size asked for with --train-set accumulation=4: shared
    (3, 2, 4, 1, 4),
])
def test_a_resume_keeps_the_runs_steps(stored, saved_world, given, processes, expected):
    assert resume_accumulation(stored, saved_world, given, processes) == expected


def test_a_resume_on_a_count_that_does_not_divide_the_step_is_refused():
    with pytest.raises(BadInput, match="cannot be shared by 4 processes"):
        resume_accumulation(3, 2, None, 4)


def test_each_rank_gets_the_rendezvous_of_torch_distributed():
    base = {"PATH": "/bin", "RANK": "7"}
    assert rank_envs(base, 1) == [base]
    envs = rank_envs(base, 2)
    assert [e["RANK"] for e in envs] == ["0", "1"] == [e["LOCAL_RANK"] for e in envs]
    assert {e["WORLD_SIZE"] for e in envs} == {"2"} and {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1 and int(envs[0]["MASTER_PORT"]) > 0
    assert all(e["PATH"] == "/bin" for e in envs)


# -- the process group ----------------------------------------------------------------------------------------------
def _ranks(tmp_path: Path, rank_1_code: str) -> list[str]:
    """A child command: each rank writes its pid; rank 1 runs ``rank_1_code``, the others sleep a minute."""
    code = (f"import os, time, pathlib; r = os.environ['RANK']; pathlib.Path(r'{tmp_path}', 'pid' + r)"
            f".write_text(str(os.getpid()))\nif r == '1':\n    {rank_1_code}\ntime.sleep(60)")
    return [sys.executable, "-c", code]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie of a child of this process does not count as running
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_a_failing_rank_stops_the_others(tmp_path):
    t0 = time.monotonic()
    code = continuous._run_child(_ranks(tmp_path, "time.sleep(1); raise SystemExit(5)"), 120, dict(os.environ),
                                 processes=3)
    assert code == 5 and time.monotonic() - t0 < 40
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(3)]
    assert all(_gone(p) for p in pids)


@pytest.mark.skipif(not Path("/proc/self/autogroup").is_file(), reason="no scheduling autogroups on this kernel")
def test_a_niced_train_on_gives_each_rank_a_niced_autogroup_of_its_own(tmp_path):
    """Each rank leads a session of its own, whose autogroup gets train-on's nice: a nice value alone orders
    processes only inside their autogroup, so the ranks would otherwise take a full share beside the test suite."""
    # the parent sets a rank's autogroup just after starting it, so a rank that reads it at once may still see 0
    # (CI of session 28): each rank waits up to 10 s for it to change
    child = ("import os, pathlib, time; r = os.environ.get('RANK', '0'); ag = pathlib.Path('/proc/self/autogroup')\n"
             "end = time.monotonic() + 10\n"
             "while ag.read_text().split()[-1] == '0' and time.monotonic() < end: time.sleep(0.05)\n"
             "pathlib.Path(r'%s', 'rank' + r).write_text(f\"{os.getsid(0) == os.getpid()} {ag.read_text().split()[-1]}\")"
             % tmp_path)
    driver = ("import os, sys; sys.path.insert(0, r'%s'); os.nice(19 - os.nice(0)); from aiayn.training import continuous; "
              "sys.exit(continuous._run_child([sys.executable, '-c', %r], 60, dict(os.environ), processes=2))"
              % (REPO, child))
    subprocess.run([sys.executable, "-c", driver], check=True, timeout=120, cwd=REPO)
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == ["True 19", "True 19"]
    assert continuous.yield_autogroup(os.getpid(), 0) is False  # not niced: nothing is changed


def test_the_deadline_stops_every_rank(tmp_path):
    t0 = time.monotonic()
    code = continuous._run_child(_ranks(tmp_path, "pass"), 3, dict(os.environ), processes=2)
    assert code != 0 and 3 <= time.monotonic() - t0 < 40  # stopped from outside, not finished
    assert all(_gone(int((tmp_path / f"pid{r}").read_text())) for r in range(2))


# -- the whole command ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tiny_data, tiny_spm):
    from test_train_on import _world
    from tiny_models import make_tiny_checkpoint

    root = Path(tempfile.mkdtemp(prefix="aiayn-train-on-ddp-"))
    try:
        yield _world(root, tiny_data, tiny_spm, make_tiny_checkpoint)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _train_on(w: dict[str, Path], *extra: str) -> subprocess.CompletedProcess:
    from test_train_on import _env

    cmd = [sys.executable, "-m", "aiayn", "train-on", "--direction", "en-de", "--run", str(w["run"]), "--data",
           str(w["data"]), "--shipped", str(w["shipped"]), "--out", str(w["out"]), "--devsets", str(w["dev"]),
           "--recipe", "tiny", "--threads", "2", "--last", "2", "--no-nice", "--minutes", "6", "--reserve-minutes",
           "3", *extra]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=400, cwd=REPO)


def _last(run: Path) -> dict:
    return json.loads((sorted(run.glob("step_*"))[-1] / "trainer_state.json").read_text())


def test_two_processes_train_one_run_that_resumes_on_one(world):
    proc = _train_on(world, "--processes", "2", "--train-set", "max_steps=6", "accumulation=2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "as 2 processes" in proc.stdout and "(x 2 processes)" in proc.stdout
    assert proc.stdout.count("initialised the weights from") == 1  # rank 0 speaks for both
    tc = json.loads((world["run"] / "train_config.json").read_text())
    assert tc["accumulation"] == 1 and tc["threads"] == 1  # each rank: half the step, half the threads
    assert _last(world["run"])["step"] == 6 and _last(world["run"])["world"] == 2
    report = json.loads((world["out"] / "verdict.json").read_text())
    assert report["processes"] == 2 and report["added"]["steps"] == 6 and report["added"]["training_exit_code"] == 0
    # the verdict compares the outputs too: the candidate's test outputs are stored, the shipped side's measured
    paired = report["paired"]
    assert paired["test_skipped"] is None and {"test", "short"} <= set(paired["sets"]), paired
    assert all(0.0 < s["p_value"] <= 1.0 and s["n_changed"] <= s["n_sentences"] for s in paired["sets"].values())
    assert "2 training processes" in (world["out"] / "candidate" / "MODEL_CARD.md").read_text()

    proc = _train_on(world, "--processes", "1", "--train-set", "max_steps=8")  # one process: the same 2 micro-batches a step
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _last(world["run"])["step"] == 8 and _last(world["run"])["world"] == 1
    assert json.loads((world["run"] / "train_config.json").read_text())["accumulation"] == 2
    changes = [json.loads(x) for x in (world["run"] / "config_changes.jsonl").read_text().splitlines()]
    assert changes[-1]["step"] == 6 and changes[-1]["changed"]["accumulation"] == [1, 2]
    assert _last(world["run"])["accumulation"] == 2  # a state says its micro-batches per process

    # and back on two: both ranks check the step against the state before rank 0 rewrites the configuration
    proc = _train_on(world, "--processes", "2", "--train-set", "max_steps=10")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _last(world["run"])["step"] == 10 and _last(world["run"])["world"] == 2
    assert proc.stdout.count("resumed from ") == 1
    assert _last(world["run"])["accumulation"] == 1


def test_a_training_that_adds_no_step_is_reported_not_judged(world, tmp_path, monkeypatch, capsys):
    """A training child that fails before its first step leaves the run as it was: nothing is averaged, scored or
    written as a candidate (the run's last state would be judged again as if it were new)."""
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    ran = []
    monkeypatch.setattr(continuous, "_run_child", lambda *a, **k: ran.append(1) or 1)
    # no state when planned (a warm start); afterwards the run at the step it was planned at: nothing added
    monkeypatch.setattr(continuous, "_last_state", lambda run: {"step": 0, "tokens": 0, "world": 1} if ran else None)
    monkeypatch.setattr(continuous, "_build_candidate", lambda *a: pytest.fail("a candidate was built"))
    out = tmp_path / "o"
    code = continuous.cli_main(["--direction", "en-de", "--minutes", "30", "--run", str(tmp_path / "run"),
                                "--shipped", str(world["shipped"]), "--data", str(world["data"]), "--out", str(out),
                                "--no-nice", "--recipe", "tiny"])
    err = capsys.readouterr().err
    assert code == continuous.EXIT_TRAIN_FAILED and "failed (exit 1) before adding a step" in err, err
    assert not (out / "candidate").exists() and not (out / "verdict.json").exists()


def test_a_step_the_processes_cannot_share_is_refused_before_anything_starts(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    run = tmp_path / "run"
    code = continuous.cli_main(["--direction", "en-de", "--minutes", "30", "--run", str(run), "--shipped",
                                str(world["shipped"]), "--data", str(world["data"]), "--out", str(tmp_path / "o"),
                                "--no-nice", "--recipe", "tiny", "--processes", "2", "--train-set", "accumulation=3"])
    assert code == 2 and "cannot be shared by 2 processes" in capsys.readouterr().err
    assert not run.exists() and not (tmp_path / "o").exists()


def test_two_processes_by_default_on_two_cores_one_where_they_cannot_share_the_step(world, tmp_path, monkeypatch,
                                                                                       capsys):
    """Without --processes, train-on plans as ``aiayn train`` decides (``auto_processes``): two ranks on a CPU with two
    cores, one with --threads 1, and one where two cannot share the recipe's step (no refusal: that is for a count
    given)."""
    import torch

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    base = ["--direction", "en-de", "--minutes", "30", "--run", str(tmp_path / "run"), "--shipped", str(world["shipped"]),
            "--data", str(world["data"]), "--out", str(tmp_path / "o"), "--no-nice", "--recipe", "tiny", "--dry-run"]

    def planned(*extra: str) -> list[str]:
        assert continuous.cli_main(base + list(extra)) == 0
        out = capsys.readouterr().out
        line = next(x for x in out.splitlines() if " -m aiayn train " in x)
        return line.split()

    cmd = planned("--train-set", "accumulation=4")
    assert cmd[cmd.index("--processes") + 1] == "2" and cmd[cmd.index("--accumulation") + 1] == "2"
    cmd = planned("--train-set", "accumulation=3")
    assert cmd[cmd.index("--processes") + 1] == "1" and cmd[cmd.index("--accumulation") + 1] == "3"
    cmd = planned("--train-set", "accumulation=4", "--threads", "1")
    assert cmd[cmd.index("--processes") + 1] == "1" and cmd[cmd.index("--accumulation") + 1] == "4"
    assert not (tmp_path / "run").exists() and not (tmp_path / "o").exists()
