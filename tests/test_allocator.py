"""The training children's memory allocator (aiayn/training/allocator.py): tcmalloc preloaded where installed."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aiayn.training import allocator, both, continuous
from aiayn.training.allocator import allocator_env, describe, find_tcmalloc

FAKE = "libtcmalloc_minimal.so.9"


def test_auto_preloads_tcmalloc_when_found_and_keeps_other_preloads():
    env = allocator_env({"PATH": "/bin", "LD_PRELOAD": "libother.so"}, "auto", find=lambda: FAKE)
    assert env["LD_PRELOAD"].split(os.pathsep) == [FAKE, "libother.so"] and env["PATH"] == "/bin"
    assert allocator_env({}, "tcmalloc", find=lambda: FAKE)["LD_PRELOAD"] == FAKE
    assert describe(env) == f"tcmalloc ({FAKE})"


def test_glibc_and_a_machine_without_tcmalloc_leave_the_environment_alone():
    base = {"LD_PRELOAD": "libother.so"}
    assert allocator_env(base, "glibc", find=lambda: FAKE) == base
    assert allocator_env(base, "auto", find=lambda: None) == base
    assert describe(allocator_env({}, "auto", find=lambda: None)) == "glibc malloc"


def test_a_preload_the_caller_chose_is_not_doubled():
    env = allocator_env({"LD_PRELOAD": "/opt/libtcmalloc.so"}, "auto", find=lambda: FAKE)
    assert env["LD_PRELOAD"] == "/opt/libtcmalloc.so"


def test_tcmalloc_asked_for_but_missing_and_unknown_allocators_are_refused():
    with pytest.raises(ValueError, match="apt install libtcmalloc-minimal4"):
        allocator_env({}, "tcmalloc", find=lambda: None)
    with pytest.raises(ValueError, match="--allocator must be one of"):
        allocator_env({}, "jemalloc", find=lambda: FAKE)


@pytest.mark.skipif(find_tcmalloc() is None, reason="no tcmalloc on this machine (apt install libtcmalloc-minimal4)")
def test_a_child_started_with_the_environment_runs_on_tcmalloc():
    env = allocator_env(os.environ, "auto")
    code = "print(any('tcmalloc' in line for line in open('/proc/self/maps')))"
    on = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    off = subprocess.run([sys.executable, "-c", code], env=allocator_env(os.environ, "glibc"), capture_output=True,
                         text=True, check=True).stdout
    assert (on.strip(), off.strip()) == ("True", "False")


def _train_on(monkeypatch, tmp_path, found: str | None, *extra: str) -> int:
    """``aiayn train-on`` with the library lookup answering ``found`` and the planning stubbed out (a shipped folder
    with an empty meta; the training child is whatever the test puts in ``continuous._run_child``)."""
    (tmp_path / "config.json").write_text('{"meta": {}}')
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: found)
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    monkeypatch.setattr(continuous, "train_command", lambda *a: {"cmd": ["true"], "resume": False, "run": tmp_path / "r",
                                                                  "recipe": "cpu", "data": tmp_path, "before": {}})
    return continuous.cli_main(["--direction", "en-de", "--minutes", "30", "--shipped", str(tmp_path), "--out",
                                str(tmp_path / "out"), "--no-nice", *extra])


def test_train_on_refuses_a_missing_tcmalloc_before_anything_starts(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(continuous, "_run_child", lambda *a, **k: pytest.fail("training started"))
    code = _train_on(monkeypatch, tmp_path, None, "--allocator", "tcmalloc")
    assert code == continuous.EXIT_BAD_INPUT and "libtcmalloc-minimal4" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_train_on_gives_the_child_the_allocators_environment(monkeypatch, tmp_path, capsys):
    seen = {}

    def child(cmd, timeout_s, env=None, processes=1):
        seen["env"] = env
        return 1
    monkeypatch.setattr(continuous, "_run_child", child)
    monkeypatch.setattr(continuous, "_last_state", lambda run: None)  # training "left no state": stop after the child
    _train_on(monkeypatch, tmp_path, FAKE)
    assert seen["env"]["LD_PRELOAD"].split(os.pathsep)[0] == FAKE
    assert f"on tcmalloc ({FAKE})" in capsys.readouterr().out
    _train_on(monkeypatch, tmp_path, FAKE, "--allocator", "glibc")
    assert FAKE not in seen["env"].get("LD_PRELOAD", "")


def test_train_both_children_get_the_allocator_and_a_missing_one_is_refused(monkeypatch):
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: FAKE)
    assert both._child_env("cpu", 1, "auto")["LD_PRELOAD"].split(os.pathsep)[0] == FAKE
    assert FAKE not in both._child_env("cpu", 1, "glibc").get("LD_PRELOAD", "")
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: None)
    with pytest.raises(ValueError):
        both._child_env("cpu", 1, "tcmalloc")


@pytest.mark.skipif(find_tcmalloc() is None, reason="no tcmalloc on this machine (apt install libtcmalloc-minimal4)")
def test_training_on_tcmalloc_is_bit_identical_to_glibc(tiny_data, tmp_path):
    """The module's promise that lets a resumed run switch allocators: the same steps give the same losses, to the
    last bit, on either allocator (a kernel that read uninitialised memory, or chose its path by a block's address,
    would break it)."""
    code = ("import json, sys; from aiayn.training.loop import train; from aiayn.training.recipe import TrainConfig; "
            "d, run = sys.argv[1:]; "
            "train(TrainConfig(data_dir=d, run_dir=run, direction='en-de', preset='tiny', max_tokens=512, accumulation=1, "
            "warmup_steps=20, max_steps=6, valid_every=1000, valid_bleu_sentences=0, save_every=1000, keep=1, threads=1, "
            "seed=7, record_attention=False), log=lambda m: None); "
            "print(json.dumps([json.loads(x)['train_loss'] for x in open(run + '/metrics.jsonl')]))")
    losses = {}
    for name in ("glibc", "tcmalloc"):
        env = allocator_env(dict(os.environ, OMP_NUM_THREADS="1"), name)
        proc = subprocess.run([sys.executable, "-c", code, str(tiny_data), str(tmp_path / name)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        losses[name] = proc.stdout.strip().splitlines()[-1]
    assert losses["glibc"] == losses["tcmalloc"] and len(json.loads(losses["glibc"])) >= 1
