"""``aiayn train-on`` (aiayn/training/continuous.py): training that goes on, on the committed fixture data with a
tiny "shipped" checkpoint and the ``tiny`` recipe.

* With no run folder it warm-starts from the shipped weights (``--init-from``), with the shipped model's shape, at
  nice 19; run again, it resumes the same run exactly where it stopped and counts only the steps it added.
* The deadline is honoured: a run without a step limit stops because its time is up, and the run's ``--max-minutes``
  (which counts its whole wall time) is the time it had before plus this call's budget.
* The verdict: beats only with a higher chrF on the test split and every development set.
* ``checkpoints/`` is never written without ``--ship``; with it, only a candidate that beats is copied over.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from aiayn.evaluation.devsets import DEVSETS_DIR, SET_NAMES, read_devset
from aiayn.training import continuous
from aiayn.training.continuous import BadInput, choose_run, data_with_shipped_spm, parse_deadline, verdict

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def world(tiny_data, tiny_spm):
    """Data (a copy: the trainer caches tokens in it), a tiny 'shipped' checkpoint, small dev sets (3 pairs each),
    in a folder of its own: pytest removes older basetemp folders, also those of a pytest run beside this one, and
    these runs take a minute."""
    from tiny_models import make_tiny_checkpoint

    root = Path(tempfile.mkdtemp(prefix="aiayn-train-on-"))
    try:
        yield _world(root, tiny_data, tiny_spm, make_tiny_checkpoint)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _world(root: Path, tiny_data: Path, tiny_spm: Path, make_tiny_checkpoint) -> dict[str, Path]:
    data = root / "data"
    shutil.copytree(tiny_data, data)
    shipped = make_tiny_checkpoint(root / "checkpoints" / "en-de", tiny_spm, "en-de", seed=3)
    dev = root / "devsets"
    dev.mkdir()
    for name in SET_NAMES:
        pairs = read_devset(DEVSETS_DIR / f"{name}.tsv")[:3]
        (dev / f"{name}.tsv").write_text("en\tde\n" + "".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    return {"root": root, "data": data, "shipped": Path(shipped), "dev": dev, "run": root / "runs" / "en-de-on",
            "out": root / "out"}


def _train_on(w: dict[str, Path], *extra: str, nice: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "aiayn", "train-on", "--direction", "en-de", "--run", str(w["run"]), "--data",
           str(w["data"]), "--shipped", str(w["shipped"]), "--out", str(w["out"]), "--devsets", str(w["dev"]),
           "--recipe", "tiny", "--threads", "1", "--last", "2", *extra] + ([] if nice else ["--no-nice"])
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=400, cwd=REPO)


def _state(run: Path) -> dict:
    last = sorted(run.glob("step_*"))[-1]
    return json.loads((last / "trainer_state.json").read_text())


@pytest.fixture(scope="module")
def warm(world) -> dict:
    before = _digest(world["shipped"])
    proc = _train_on(world, "--minutes", "6", "--reserve-minutes", "3", nice=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((world["out"] / "verdict.json").read_text())
    return {"proc": proc, "report": report, "shipped_before": before}


def test_warm_start_when_the_run_is_missing(world, warm):
    tc = json.loads((world["run"] / "train_config.json").read_text())
    assert tc["init_from"] == str(world["shipped"]) and tc["preset"] == "tiny"
    assert tc["model_overrides"]["max_len"] == 64  # the shipped model's shape, not the preset's
    assert tc["data_dir"] == str(world["data"])  # its spm.model is the shipped one: no -shipspm copy
    r = warm["report"]
    assert r["added"]["training_exit_code"] == 0, warm["proc"].stdout[-3000:] + warm["proc"].stderr[-3000:]
    assert r["resumed"] is False and r["added"]["steps"] == 24 == _state(world["run"])["step"]
    assert r["added"]["tokens"] == _state(world["run"])["tokens"] > 0
    assert r["nice"] == 19
    assert "warm start from" in warm["proc"].stdout
    assert set(r["scores"]["candidate"]) == set(r["scores"]["shipped"]) == {"test", "dev/short", "dev/long", "dev/classic"}
    # the sets it was judged on, by the bytes of their files (what `aiayn ship` compares with today's)
    assert r["devsets"] == {n: hashlib.sha256((world["dev"] / f"{n}.tsv").read_bytes()).hexdigest()
                            for n in ("short", "long", "classic")}
    assert r["beats"] == verdict(r["scores"]["candidate"], r["scores"]["shipped"])["beats"]
    line = "candidate beats shipped" if r["beats"] else "candidate does not beat shipped"
    assert line in warm["proc"].stdout
    cand = world["out"] / "candidate"
    assert {"config.json", "model.safetensors", "spm.model", "eval_test.json", "eval_dev.json", "MODEL_CARD.md",
            "head_sweep.json"} <= {p.name for p in cand.iterdir()}  # the sweep too: --ship copies a complete folder
    sweep = json.loads((cand / "head_sweep.json").read_text())
    assert sweep["weights_sha256"] == hashlib.sha256((cand / "model.safetensors").read_bytes()).hexdigest()
    assert json.loads((cand / "config.json").read_text())["meta"]["step"] == 24
    assert json.loads((cand / "eval_dev.json").read_text())["sets"]["short"]["n_pairs"] == 3  # --devsets reached it


def test_shipped_is_never_written_without_ship(world, warm):
    assert _digest(world["shipped"]) == warm["shipped_before"]
    assert (world["out"] / "shipped" / "eval_dev.json").is_file()  # the shipped side's scores went to the work folder


def test_resume_goes_on_where_it_stopped(world, warm):
    proc = _train_on(world, "--minutes", "6", "--reserve-minutes", "3", "--train-set", "max_steps=30")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"resuming {world['run']} at step 24" in proc.stdout
    r = json.loads((world["out"] / "verdict.json").read_text())
    assert r["resumed"] is True and r["added"]["steps"] == 6 and _state(world["run"])["step"] == 30
    changes = [json.loads(x) for x in (world["run"] / "config_changes.jsonl").read_text().splitlines()]
    assert changes[-1]["step"] == 24 and changes[-1]["changed"]["max_steps"] == [24, 30]


def test_deadline_is_honoured(world, warm):
    before = _state(world["run"])
    # 0.3 minutes of training; the child is only stopped from outside at the deadline less half the reserve
    proc = _train_on(world, "--minutes", "1.5", "--reserve-minutes", "1.2", "--train-set", "max_steps=1000000")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = _state(world["run"])
    tc = json.loads((world["run"] / "train_config.json").read_text())
    assert json.loads((world["out"] / "verdict.json").read_text())["added"]["training_exit_code"] == 0  # it stopped itself
    # the run's limit counts its whole wall time: what it had, plus this call's budget (1.5 - 1.2 minutes, less
    # the moments between reading the clock and planning)
    assert before["wall_time"] / 60 < tc["max_minutes"] <= before["wall_time"] / 60 + 0.3 + 1e-3  # printed to 3 decimals
    assert after["step"] > before["step"] and after["step"] < 1000000  # it trained, and stopped on time, not steps
    assert after["wall_time"] / 60 >= tc["max_minutes"]


# -- pure parts -----------------------------------------------------------------------------------------------------
def test_parse_deadline():
    now = dt.datetime(2026, 11, 25, 15, 30, tzinfo=dt.timezone.utc)
    assert parse_deadline("17:10", None, now) == now.replace(hour=17, minute=10)
    assert parse_deadline("09:00", None, now) == dt.datetime(2026, 11, 26, 9, 0, tzinfo=dt.timezone.utc)  # passed: tomorrow
    assert parse_deadline(None, 90, now) == now + dt.timedelta(minutes=90)
    for until, minutes, msg in [("25:00", None, "HH:MM"), ("5pm", None, "HH:MM"), (None, 0, "positive"),
                                (None, None, "exactly one"), ("17:00", 5, "exactly one")]:
        with pytest.raises(BadInput, match=msg):
            parse_deadline(until, minutes, now)


def test_verdict_needs_a_higher_chrf_everywhere():
    shipped = {"test": {"bleu": 10, "chrf": 30}, "dev/short": {"bleu": 30, "chrf": 56}, "dev/long": {"bleu": 9, "chrf": 35}}
    better = {"test": {"bleu": 9, "chrf": 31}, "dev/short": {"bleu": 31, "chrf": 57}, "dev/long": {"bleu": 10, "chrf": 36}}
    assert verdict(better, shipped)["beats"] is True  # chrF decides, not BLEU
    tie = dict(better, **{"dev/long": {"bleu": 12, "chrf": 35}})
    v = verdict(tie, shipped)
    assert v["beats"] is False and [n for n, s in v["sets"].items() if not s["better"]] == ["dev/long"]
    missing = {k: s for k, s in better.items() if k != "test"}
    assert verdict(missing, shipped)["beats"] is False  # a set the candidate was not scored on is no win
    assert verdict(better, {})["beats"] is False
    with pytest.raises(ValueError):
        verdict({}, {})


def test_choose_run_prefers_the_shipped_models_run(world, warm, monkeypatch, tmp_path):
    monkeypatch.setattr(continuous, "CACHE", tmp_path)
    assert choose_run(None, {"train_config": {"run_dir": str(world["run"])}}, "en-de") == (world["run"], True)
    assert choose_run(None, {"train_config": {"run_dir": str(tmp_path / "gone")}}, "en-de") == \
        (tmp_path / "runs" / "en-de-on", False)


def test_data_with_another_vocabulary_gets_the_shipped_spm(world, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(world["data"], data)
    (data / "spm.model").write_bytes(b"another vocabulary")
    out = data_with_shipped_spm(data, world["shipped"])
    assert out == tmp_path / "data-shipspm"
    assert (out / "spm.model").read_bytes() == (world["shipped"] / "spm.model").read_bytes()
    assert (out / "train.tsv").resolve() == (data / "train.tsv").resolve()
    assert data_with_shipped_spm(out, world["shipped"]) == out
    with pytest.raises(BadInput, match="lacks"):
        data_with_shipped_spm(tmp_path, world["shipped"])


def test_two_warm_starts_at_once_make_the_same_shipspm_folder(world, tmp_path):
    """Both directions started at once build the same -shipspm folder (session 17: the second one's unlink-then-link
    met the first one's link and failed): calls racing in threads all succeed and leave whole links, no temporaries."""
    from concurrent.futures import ThreadPoolExecutor

    data = tmp_path / "data"
    shutil.copytree(world["data"], data)
    (data / "spm.model").write_bytes(b"another vocabulary")
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda _: data_with_shipped_spm(data, world["shipped"]), range(64)))
    assert set(outs) == {tmp_path / "data-shipspm"}
    out = outs[0]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f.name for f in data.iterdir() if f.suffix == ".tsv" or f.name in ("datasheet.json", "DATASHEET.md", "train_kinds.txt")]
        + ["spm.model"])
    assert all((out / f.name).resolve() == f.resolve() for f in data.glob("*.tsv"))
    assert (out / "spm.model").read_bytes() == (world["shipped"] / "spm.model").read_bytes()


def _mock_scores(monkeypatch, by_ckpt) -> None:
    """The scoring of both sides mocked: each checkpoint's evaluation files are its own (``side_evals``), and its
    scores are ``by_ckpt(checkpoint folder)`` (``eval_scores``)."""
    monkeypatch.setattr(continuous, "side_evals",
                        lambda ckpt, *a: {"test": ckpt / "eval_test.json", "dev": ckpt / "eval_dev.json"})
    monkeypatch.setattr(continuous, "eval_scores", lambda evals, direction: by_ckpt(evals["dev"].parent))


@pytest.mark.parametrize("beats, flag, shipped_changes", [(True, True, True), (True, False, False), (False, True, False)])
def test_ship_only_with_the_flag_and_a_win(world, warm, monkeypatch, tmp_path, beats, flag, shipped_changes, capsys):
    """The whole command in-process, with training and the candidate build skipped and the scores mocked."""
    shipped = tmp_path / "checkpoints" / "en-de"
    shutil.copytree(world["shipped"], shipped)
    out = tmp_path / "out"
    shutil.copytree(world["out"] / "candidate", out / "candidate")
    before = _digest(shipped)
    monkeypatch.setattr(continuous, "_run_child", lambda cmd, timeout_s, env=None, processes=1: 0)
    monkeypatch.setattr(continuous, "_build_candidate", lambda *a: 0)
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    score = {"test": {"bleu": 1.0, "chrf": 20.0}, **{f"dev/{n}": {"bleu": 1.0, "chrf": 20.0} for n in SET_NAMES}}
    up = {k: {"bleu": 1.0, "chrf": 21.0 if beats else 19.0} for k in score}
    _mock_scores(monkeypatch, lambda ckpt: up if ckpt == out / "candidate" else score)
    argv = ["--direction", "en-de", "--minutes", "5", "--reserve-minutes", "1", "--run", str(world["run"]), "--shipped",
            str(shipped), "--out", str(out), "--no-nice", "--threads", "1"] + (["--ship"] if flag else [])
    assert continuous.cli_main(argv) == 0
    text = capsys.readouterr().out
    assert ("candidate beats shipped" in text) is beats
    if shipped_changes:
        cand = _digest(out / "candidate")
        assert all(_digest(shipped)[k] == cand[k] for k in ("model.safetensors", "config.json", "MODEL_CARD.md"))
        assert json.loads((shipped / "eval_test.json").read_text())["checkpoint"] == str(shipped.resolve())
    else:
        assert _digest(shipped) == before


def _interp_argv(world, shipped: Path, out: Path, *extra: str) -> list[str]:
    return ["--direction", "en-de", "--minutes", "5", "--reserve-minutes", "1", "--run", str(world["run"]), "--shipped",
            str(shipped), "--out", str(out), "--devsets", str(world["dev"]), "--no-nice", "--threads", "1", *extra]


def _skip_training(monkeypatch) -> None:
    monkeypatch.setattr(continuous, "_run_child", lambda cmd, timeout_s, env=None, processes=1: 0)
    monkeypatch.setattr(continuous, "_build_candidate", lambda *a: 0)
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)


def _judged_world(world, tmp_path, monkeypatch) -> tuple[Path, Path]:
    """``(shipped, out)``: copies of the tiny world's shipped model and candidate to judge, training skipped."""
    shipped = tmp_path / "checkpoints" / "en-de"
    shutil.copytree(world["shipped"], shipped)
    out = tmp_path / "out"
    shutil.copytree(world["out"] / "candidate", out / "candidate")
    _skip_training(monkeypatch)
    return shipped, out


#: judged scores for the mocked scoring: every set at one chrF, above it, below it
SAME = {"test": {"bleu": 1.0, "chrf": 20.0}, **{f"dev/{n}": {"bleu": 1.0, "chrf": 20.0} for n in SET_NAMES}}
HIGHER = {k: {"bleu": 1.0, "chrf": 21.0} for k in SAME}
LOWER = {k: {"bleu": 1.0, "chrf": 19.0} for k in SAME}


def test_interpolation_is_chosen_on_the_valid_split_and_judged_like_the_candidate(world, warm, monkeypatch, tmp_path):
    """--interpolate: each weight's (1 - w) shipped + w candidate is scored on valid.tsv, the best kept (its weights
    are that mix), judged on the test split and the dev sets by the candidate's rule, and carded; nothing shipped."""
    from safetensors.torch import load_file

    shipped, out = _judged_world(world, tmp_path, monkeypatch)
    before = _digest(shipped)
    assert continuous.cli_main(_interp_argv(world, shipped, out, "--interpolate", "0.6,0.3")) == 0
    r = json.loads((out / "verdict.json").read_text())
    it = r["interpolation"]
    assert set(it["valid_chrf"]) == {"0.3", "0.6"} and it["split"] == "valid"
    assert it["valid_chrf"][f"{it['weight']:g}"] == max(it["valid_chrf"].values())
    chosen = Path(it["checkpoint"])
    assert chosen == out / f"interp-{it['weight']:g}" and chosen.is_dir()
    assert [p.name for p in out.glob("interp-*")] == [chosen.name]  # the other weight's folder is gone
    valid = json.loads((chosen / "eval_valid.json").read_text())
    assert valid["split"] == "valid" and valid["scores"]["model"]["chrf"] == it["valid_chrf"][f"{it['weight']:g}"]
    a, b, mix = (load_file(str(d / "model.safetensors")) for d in (shipped, out / "candidate", chosen))
    w = it["weight"]
    for k, v in mix.items():
        assert torch.allclose(v.float(), (1 - w) * a[k].float() + w * b[k].float(), atol=2e-3), k
    assert set(it["scores"]) == {"test", "dev/short", "dev/long", "dev/classic"}
    assert it["beats"] == verdict(it["scores"], r["scores"]["shipped"])["beats"]
    assert it["scores"]["test"]["chrf"] == json.loads((chosen / "eval_test.json").read_text())["scores"]["model"]["chrf"]
    assert "w = " in (chosen / "MODEL_CARD.md").read_text() and it["stages"]["card"] == 0
    assert ("align" in it["stages"]) == it["beats"]  # the analysis files only for an interpolation that could ship
    assert _digest(shipped) == before


def test_an_interpolation_that_beats_ships_when_the_candidate_does_not(world, warm, monkeypatch, tmp_path, capsys):
    shipped, out = _judged_world(world, tmp_path, monkeypatch)

    def scores(ckpt):
        if ckpt.name.startswith("interp-"):  # what the real scoring leaves there, which the card reads
            shutil.copy(out / "candidate" / "eval_test.json", ckpt / "eval_test.json")
            return HIGHER
        return LOWER if ckpt == out / "candidate" else SAME

    _mock_scores(monkeypatch, scores)
    assert continuous.cli_main(_interp_argv(world, shipped, out, "--interpolate", "0.5", "--ship")) == 0
    text = capsys.readouterr().out
    assert "candidate does not beat shipped" in text and "interpolation w = 0.5" in text
    assert "the interpolation beats shipped" in text
    stages = json.loads((out / "verdict.json").read_text())["interpolation"]["stages"]
    assert stages == {"card": 0, "align": 0, "attribution": 0, "sweep": 0}  # the files a shipped checkpoint carries
    assert {"MODEL_CARD.md", "alignment.json", "attribution.json", "head_sweep.json"} <= {p.name for p in shipped.iterdir()}
    assert "alignment, attribution and head sweep" in text
    assert _digest(shipped)["model.safetensors"] == _digest(out / "interp-0.5")["model.safetensors"]
    assert json.loads((shipped / "config.json").read_text())["meta"]["interpolation"]["weight"] == 0.5


def test_an_interpolation_without_a_card_is_not_shipped(world, warm, monkeypatch, tmp_path, capsys):
    shipped, out = _judged_world(world, tmp_path, monkeypatch)
    before = _digest(shipped)
    # beats on paper, but no eval_test.json is left for its card (the mocked scoring writes none)
    _mock_scores(monkeypatch, lambda ckpt: HIGHER if ckpt.name.startswith("interp-") else SAME)
    assert continuous.cli_main(_interp_argv(world, shipped, out, "--interpolate", "0.5", "--ship")) == 0
    assert json.loads((out / "verdict.json").read_text())["interpolation"]["stages"]["card"] != 0
    assert "not shipped" in capsys.readouterr().out and _digest(shipped) == before


@pytest.mark.parametrize("spec", ["0", "1", "0.5,2", "half", "-0.1"])
def test_bad_interpolation_weights_are_refused_before_training(world, tmp_path, monkeypatch, capsys, spec):
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    run, out = tmp_path / "run", tmp_path / "out"
    code = continuous.cli_main(["--direction", "en-de", "--minutes", "5", "--run", str(run), "--shipped",
                                str(world["shipped"]), "--data", str(world["data"]), "--out", str(out), "--no-nice",
                                "--threads", "1", "--interpolate", spec])
    assert code == 2 and "--interpolate takes weights strictly between 0 and 1" in capsys.readouterr().err
    assert not run.exists() and not out.exists()
    assert continuous.parse_weights("0.75, 0.25,0.75") == [0.25, 0.75] and continuous.parse_weights(None) == []


def test_a_run_that_another_process_trains_is_refused(world, tmp_path, monkeypatch, capsys):
    run = tmp_path / "busy-run"
    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "aiayn", "train", "--run", str(run)])
    try:
        time.sleep(0.5)
        assert continuous.training_pid(run) == fake.pid
        assert continuous.training_pid(tmp_path / "other-run") is None
        monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
        code = continuous.cli_main(["--direction", "en-de", "--minutes", "30", "--run", str(run), "--shipped",
                                    str(world["shipped"]), "--data", str(world["data"]), "--out", str(tmp_path / "o"),
                                    "--no-nice", "--threads", "1"])
        assert code == 2
        assert f"process {fake.pid} is training {run}" in capsys.readouterr().err
        assert not run.exists() and not (tmp_path / "o").exists()
    finally:
        fake.kill()
        fake.wait()


def test_an_evaluation_of_other_weights_or_files_is_stale(world, warm, tmp_path):
    cand = world["out"] / "candidate"
    test_file = world["data"] / "test.tsv"
    assert continuous._fresh_test_eval(cand / "eval_test.json", cand, test_file)
    assert continuous._fresh_dev_eval(cand / "eval_dev.json", cand, world["dev"], "en-de")
    # the same JSONs said of the shipped weights, of another test split, of other dev sets, of the other direction
    assert not continuous._fresh_test_eval(cand / "eval_test.json", world["shipped"], test_file)
    assert not continuous._fresh_test_eval(cand / "eval_test.json", cand, world["data"] / "valid.tsv")
    assert not continuous._fresh_dev_eval(cand / "eval_dev.json", world["shipped"], world["dev"], "en-de")
    assert not continuous._fresh_dev_eval(cand / "eval_dev.json", cand, DEVSETS_DIR, "en-de")
    assert not continuous._fresh_dev_eval(cand / "eval_dev.json", cand, world["dev"], "de-en")


def test_dry_run_prints_the_plan_and_starts_nothing(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    run, out = tmp_path / "run", tmp_path / "out"
    code = continuous.cli_main(["--direction", "en-de", "--minutes", "600", "--run", str(run), "--shipped",
                                str(world["shipped"]), "--data", str(world["data"]), "--out", str(out), "--no-nice",
                                "--threads", "1", "--recipe", "tiny", "--dry-run"])
    text = capsys.readouterr().out
    assert code == 0 and "warm start from" in text and "dry run: nothing started" in text
    cmd = next(line for line in text.splitlines() if line.startswith("$ "))
    assert f"--init-from {world['shipped']}" in cmd and "--preset tiny" in cmd and "max_len=64" in cmd
    assert not run.exists() and not out.exists()


def test_kind_weights_pass_through_and_a_folder_without_kinds_is_refused(world, tmp_path, monkeypatch, capsys):
    """--kind-weights reaches the training command of a warm start (the -shipspm folder links train_kinds.txt);
    a folder without kinds is refused before anything starts."""
    from test_train_pipeline import write_kinds

    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    data = tmp_path / "data"
    shutil.copytree(world["data"], data)
    (data / "spm.model").write_bytes(b"another vocabulary")  # so the warm start links a -shipspm folder
    base = ["--direction", "en-de", "--minutes", "600", "--run", str(tmp_path / "run"), "--shipped", str(world["shipped"]),
            "--out", str(tmp_path / "out"), "--no-nice", "--threads", "1", "--recipe", "tiny", "--dry-run",
            "--kind-weights", "default"]
    assert continuous.cli_main(base + ["--data", str(data)]) == 2
    assert "train_kinds.txt does not exist" in capsys.readouterr().err
    write_kinds(data)
    assert continuous.cli_main(base + ["--data", str(data)]) == 0
    cmd = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("$ "))
    assert "--kind-weights default" in cmd and f"--data {tmp_path / 'data-shipspm'}" in cmd
    assert (tmp_path / "data-shipspm" / "train_kinds.txt").resolve() == (data / "train_kinds.txt").resolve()


def test_a_named_recipe_goes_on_with_the_shipped_models_data_mix(world, tmp_path, monkeypatch, capsys):
    """A warm start with a named recipe (which sets no mix) trains on the mix the shipped weights last saw (its
    meta's train_config.kind_weights), not on every pair once; --kind-weights still overrides it; a folder that
    cannot give the inherited mix is refused in one line that names the way out."""
    from test_train_pipeline import write_kinds

    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    shipped = tmp_path / "shipped"
    shutil.copytree(world["shipped"], shipped)
    cfg = json.loads((shipped / "config.json").read_text())
    cfg.setdefault("meta", {}).setdefault("train_config", {})["kind_weights"] = "ding=1,everyday=6"
    (shipped / "config.json").write_text(json.dumps(cfg))
    data = tmp_path / "data"
    shutil.copytree(world["data"], data)
    base = ["--direction", "en-de", "--minutes", "600", "--run", str(tmp_path / "run"), "--shipped", str(shipped),
            "--out", str(tmp_path / "out"), "--no-nice", "--threads", "1", "--recipe", "tiny", "--dry-run",
            "--data", str(data)]

    def command(*extra: str) -> str:
        assert continuous.cli_main(base + list(extra)) == 0
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("$ "))

    assert continuous.cli_main(base) == 2
    err = capsys.readouterr().err
    assert "ding=1,everyday=6" in err and "train_kinds.txt" in err and "--kind-weights none" in err
    assert "--kind-weights" not in command("--kind-weights", "none").replace("--kind-weights none", "")
    write_kinds(data)
    assert "--kind-weights ding=1,everyday=6" in command()
    assert "--kind-weights default" in command("--kind-weights", "default")
    assert continuous.recipe_flags("tiny", {}, {})[1] == continuous.recipe_flags("tiny", {"train_config": {"kind_weights": "none"}}, {})[1]


def test_ship_keeps_the_shipped_ibm1_baseline_for_the_same_gold_set(tmp_path):
    """IBM Model 1's AER is a baseline of a training sample, not of the weights: a ship keeps the shipped one (so
    both directions' Alignment pages compare heads with one baseline) unless the gold set changed."""
    def folder(name: str, payload: dict | None) -> Path:
        d = tmp_path / name
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(name.encode())
        if payload is not None:
            (d / "alignment.json").write_text(json.dumps(payload))
        return d

    shipped = folder("checkpoints/en-de", {"gold_sha256": "g", "ibm1": {"intersection": 0.16}, "heads": [1]})
    cand = folder("cand", {"gold_sha256": "g", "ibm1": {"intersection": 0.15}, "heads": [2]})
    continuous.ship(cand, shipped)
    got = json.loads((shipped / "alignment.json").read_text())
    assert got == {"gold_sha256": "g", "ibm1": {"intersection": 0.16}, "heads": [2]}
    assert (shipped / "model.safetensors").read_bytes() == b"cand"
    other = folder("cand2", {"gold_sha256": "another gold set", "ibm1": {"intersection": 0.3}, "heads": [3]})
    continuous.ship(other, shipped)
    assert json.loads((shipped / "alignment.json").read_text())["ibm1"] == {"intersection": 0.3}
    continuous.ship(folder("cand3", None), shipped)  # a candidate without the file: nothing to keep, nothing made
    assert not (shipped / "alignment.json").exists()


def _rounds_world(world, tmp_path, monkeypatch) -> dict:
    """A copy of the tiny world's finished run and shipped model, training mocked: each warm start "trains" by
    writing the finished run's last state and its train_config.json (with the command's seed) into its run folder,
    and records its command and the shipped weights it starts from; the candidate is the tiny world's."""
    shipped = tmp_path / "checkpoints" / "en-de"
    shutil.copytree(world["shipped"], shipped)
    run = tmp_path / "runs" / "r"
    shutil.copytree(world["run"], run)
    starts: list[dict] = []

    def fake_child(cmd, timeout_s, env=None, processes=1):
        target = Path(cmd[cmd.index("--run") + 1])
        starts.append({"cmd": cmd, "shipped": _digest(shipped)["model.safetensors"], "timeout_s": timeout_s})
        if "--init-from" in cmd:
            last = sorted(run.glob("step_*"))[-1]
            shutil.copytree(last, target / last.name)
            tc = json.loads((run / "train_config.json").read_text())
            tc.update(run_dir=str(target), seed=int(cmd[cmd.index("--seed") + 1]))
            (target / "train_config.json").write_text(json.dumps(tc))
        return 0

    monkeypatch.setattr(continuous, "_run_child", fake_child)
    monkeypatch.setattr(continuous, "_build_candidate",
                        lambda plan, args, out, notes: shutil.copytree(world["out"] / "candidate", out / "candidate",
                                                                       dirs_exist_ok=True) and 0)
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    return {"shipped": shipped, "run": run, "out": tmp_path / "out", "starts": starts}


def _rounds_argv(w: dict, *extra: str) -> list[str]:
    return ["--direction", "en-de", "--minutes", "60", "--reserve-minutes", "1", "--run", str(w["run"]), "--shipped",
            str(w["shipped"]), "--out", str(w["out"]), "--no-nice", "--threads", "1", *extra]


def test_then_seeds_warm_start_more_runs_with_the_finished_runs_recipe(world, warm, monkeypatch, tmp_path, capsys):
    """--then-seeds 7,8 --ship: after the resumed run, two warm starts from the shipped folder, each with the
    finished run's recipe and its own seed, in <run>-seed<S>, judged into <out>-seed<S>; seed 7's candidate beats
    and ships, so seed 8 starts from it (a greedy climb)."""
    w = _rounds_world(world, tmp_path, monkeypatch)
    original = _digest(w["shipped"])["model.safetensors"]
    seed7_out = tmp_path / "out-seed7"
    _mock_scores(monkeypatch, lambda ckpt: HIGHER if ckpt == seed7_out / "candidate" else SAME)
    assert continuous.cli_main(_rounds_argv(w, "--then-seeds", "7,8", "--min-round-minutes", "1", "--ship")) == 0
    text = capsys.readouterr().out
    first, seven, eight = w["starts"]
    assert "--resume" in first["cmd"] and "--init-from" not in first["cmd"]
    for start, seed in ((seven, 7), (eight, 8)):
        cmd = start["cmd"]
        assert cmd[cmd.index("--run") + 1] == str(tmp_path / "runs" / f"r-seed{seed}")
        assert cmd[cmd.index("--seed") + 1] == str(seed) and cmd[cmd.index("--init-from") + 1] == str(w["shipped"])
        stored = json.loads((w["run"] / "train_config.json").read_text())
        for flag, field in (("--max-steps", "max_steps"), ("--warmup-steps", "warmup_steps"), ("--max-tokens", "max_tokens")):
            assert cmd[cmd.index(flag) + 1] == str(stored[field]), flag  # the finished run's recipe
        assert cmd[cmd.index("--data") + 1] == stored["data_dir"]
        verdict_s = json.loads((tmp_path / f"out-seed{seed}" / "verdict.json").read_text())
        assert verdict_s["run"] == str(tmp_path / "runs" / f"r-seed{seed}") and verdict_s["resumed"] is False
        assert verdict_s["beats"] is (seed == 7)
    assert seven["shipped"] == original != eight["shipped"]  # seed 8 warm-started from what seed 7 shipped
    assert eight["shipped"] == _digest(world["out"] / "candidate")["model.safetensors"]
    assert text.count("shipped: copied") == 1 and text.count("not shipped") == 2
    assert "results in " + str(tmp_path / "out-seed8") in text


def test_then_seeds_stop_when_a_round_has_no_time(world, warm, monkeypatch, tmp_path, capsys):
    w = _rounds_world(world, tmp_path, monkeypatch)
    _mock_scores(monkeypatch, lambda ckpt: SAME)
    assert continuous.cli_main(_rounds_argv(w, "--then-seeds", "7", "--min-round-minutes", "90")) == 0
    assert len(w["starts"]) == 1 and not (tmp_path / "runs" / "r-seed7").exists()
    assert "no round for seed 7" in capsys.readouterr().out


@pytest.mark.parametrize("spec, message", [("7,x", "whole numbers"), ("7,-1", "whole numbers"), ("7,7", "twice")])
def test_bad_seeds_are_refused_before_training(world, tmp_path, monkeypatch, capsys, spec, message):
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    run, out = tmp_path / "run", tmp_path / "out"
    code = continuous.cli_main(["--direction", "en-de", "--minutes", "5", "--run", str(run), "--shipped",
                                str(world["shipped"]), "--data", str(world["data"]), "--out", str(out), "--no-nice",
                                "--threads", "1", "--then-seeds", spec])
    assert code == 2 and message in capsys.readouterr().err
    assert not run.exists() and not out.exists()
    assert continuous.parse_seeds(" 9, 4,") == [9, 4] and continuous.parse_seeds(None) == []


def test_recipe_of_run_counts_a_whole_steps_micro_batches(tmp_path):
    """A run resumed as 2 processes stores 3 micro-batches per process; a new warm start's recipe counts the step's
    6 (what --train-set accumulation=N means), so it can be shared again among 1, 2, 3 or 6 processes."""
    run = tmp_path / "run"
    (run / "step_00000050").mkdir(parents=True)
    (run / "train_config.json").write_text(json.dumps({"accumulation": 3, "seed": 45, "max_steps": 400}))
    (run / "step_00000050" / "trainer_state.json").write_text(json.dumps({"step": 50, "world": 2, "accumulation": 3}))
    assert continuous.recipe_of_run(run)["accumulation"] == 6
    (run / "step_00000050" / "trainer_state.json").write_text(json.dumps({"step": 50}))  # an older state: 1 process
    assert continuous.recipe_of_run(run) == {"accumulation": 3, "seed": 45, "max_steps": 400}
    with pytest.raises(BadInput, match="cannot read .*train_config.json"):
        continuous.recipe_of_run(tmp_path / "nothing")


def test_climb_starts_each_round_from_the_last_winner_and_never_writes_shipped(world, warm, monkeypatch, tmp_path, capsys):
    """--then-seeds 7,8 --climb: seed 7's candidate beats the shipped model, so seed 8 warm-starts from that
    candidate and is judged against it (and loses); the shipped folder is never written, and the command names
    seed 7's candidate as the one to ship, which `aiayn ship` then takes."""
    from aiayn.training import shipping

    w = _rounds_world(world, tmp_path, monkeypatch)
    before = _digest(w["shipped"])
    seed7 = tmp_path / "out-seed7" / "candidate"
    monkeypatch.setattr(continuous, "side_evals", lambda ckpt, *a: {"test": ckpt / "eval_test.json", "dev": ckpt / "eval_dev.json"})
    # the winner keeps its score when it is judged against: seed 8 (as good as the shipped model) loses to it
    monkeypatch.setattr(continuous, "eval_scores", lambda evals, direction: HIGHER if evals["dev"].parent == seed7 else SAME)
    assert continuous.cli_main(_rounds_argv(w, "--then-seeds", "7,8", "--min-round-minutes", "1", "--climb")) == 0
    text = capsys.readouterr().out
    _, seven, eight = w["starts"]
    assert seven["cmd"][seven["cmd"].index("--init-from") + 1] == str(w["shipped"])
    assert eight["cmd"][eight["cmd"].index("--init-from") + 1] == str(seed7)
    v8 = json.loads((tmp_path / "out-seed8" / "verdict.json").read_text())
    assert v8["shipped"] == str(seed7) and v8["beats"] is False
    assert v8["shipped_sha256"] == _digest(seed7)["model.safetensors"]
    assert _digest(w["shipped"]) == before
    assert f"the best of the rounds is {seed7}" in text and "climb: the next round starts from" in text
    assert [link["candidate"] for link in shipping.judged_chain(seed7, w["shipped"])] == [seed7]


@pytest.mark.parametrize("extra", [["--climb"], ["--climb", "--then-seeds", "7", "--ship"]])
def test_climb_needs_seeds_and_not_ship(world, tmp_path, monkeypatch, capsys, extra):
    monkeypatch.setattr(continuous.signal, "signal", lambda *a: None)
    run, out = tmp_path / "run", tmp_path / "out"
    code = continuous.cli_main(["--direction", "en-de", "--minutes", "5", "--run", str(run), "--shipped",
                                str(world["shipped"]), "--data", str(world["data"]), "--out", str(out), "--no-nice",
                                "--threads", "1", *extra])
    assert code == 2 and "--climb needs --then-seeds" in capsys.readouterr().err
    assert not run.exists() and not out.exists()
