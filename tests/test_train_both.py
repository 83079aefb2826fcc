"""``aiayn train-both`` (aiayn/training/both.py): both directions side by side, then average (fp16), evaluate, card
and sweep, on the committed fixture data with the ``tiny`` recipe, run as a user runs it (a subprocess).

* The recipes are valid TransformerConfig / TrainConfig settings, and every training field is an ``aiayn train`` flag.
* Bad input (an invalid ``--set``, an unknown training field, a budget smaller than the reserve, no data) is refused
  with one line and exit 2 before anything starts.
* End to end: two loadable fp16 checkpoints in the shipped layout, eval JSONs for test and test_general, model cards
  whose numbers are the eval JSONs', a summary with the same numbers, and the budget handed to ``aiayn train``.
* A child that fails (a run directory that already holds a run) leaves the other direction to finish; the exit
  code says which failed. SIGINT stops both children, leaves no checkpoint and only complete run states.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file as np_load_file

from aiayn.training import both, finish
from aiayn.training.both import RECIPES, BadInput, check_recipe, cli_main, train_flags

REPO = Path(__file__).resolve().parent.parent
TINY = RECIPES["tiny"]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def _train_both(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aiayn", "train-both", *args], env=_env(), capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def data(tiny_data, tmp_path_factory) -> Path:
    """A copy of the tiny data folder (the trainer may cache tokens there) with a ``test_general.tsv`` (the valid
    pairs, so its scores differ from the test split's)."""
    d = tmp_path_factory.mktemp("both_data") / "ding_tiny"
    shutil.copytree(tiny_data, d)
    shutil.copyfile(d / "valid.tsv", d / "test_general.tsv")
    return d


# -- recipes and flags ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipes_are_valid_configs(name):
    from dataclasses import fields

    from aiayn.model.config import TransformerConfig
    from aiayn.training.recipe import TrainConfig

    r = RECIPES[name]
    cfg = TransformerConfig.preset(r["preset"], vocab_size=8000, **r["model"])
    for key, value in r["model"].items():
        assert getattr(cfg, key) == value
    tc = TrainConfig("d", "r", preset=r["preset"], model_overrides=r["model"], **r["train"])
    assert set(r["train"]) <= {f.name for f in fields(TrainConfig)}
    for key, value in r["train"].items():
        assert getattr(tc, key) == value
    check_recipe(r)  # every training field has an `aiayn train` flag
    assert r["average_last"] <= r["train"].get("keep", 5) and r["reserve_minutes"] >= 0


def test_gpu_recipe_is_the_best_measured_gpu_run():
    r = RECIPES["gpu-n6"]
    assert {k: r["model"][k] for k in ("d_model", "d_ff", "n_heads", "n_layers", "norm_first")} == \
        {"d_model": 256, "d_ff": 1024, "n_heads": 8, "n_layers": 6, "norm_first": True}
    assert {k: r["train"][k] for k in ("max_tokens", "accumulation", "warmup_steps", "lr_scale", "upsample_sentences", "amp")} == \
        {"max_tokens": 25000, "accumulation": 1, "warmup_steps": 1000, "lr_scale": 0.7, "upsample_sentences": 4, "amp": True}
    assert "max_steps" not in r["train"]  # it stops on the time budget


def test_train_flags_spell_aiayn_train_options():
    assert train_flags({"warmup_steps": 1000, "lr_scale": 0.7, "amp": True, "amp_cpu": False}) == \
        ["--warmup-steps", "1000", "--lr-scale", "0.7", "--amp", "--no-amp-cpu"]
    with pytest.raises(BadInput, match="no flag for 'adam_eps'"):
        train_flags({"adam_eps": 1e-8})
    with pytest.raises(BadInput, match="set by train-both itself"):
        train_flags({"threads": 4})
    with pytest.raises(BadInput, match="true or false"):
        train_flags({"amp": "yes"})


@pytest.mark.parametrize("argv, message", [
    (["--set", "n_heads=3"], "model settings are invalid"),           # d_model 32 is not divisible by 3
    (["--set", "n_layer=2"], "unknown TransformerConfig field"),
    (["--train-set", "warmup=5"], "unknown training field"),
    (["--train-set", "threads=2"], "set by train-both itself"),
    (["--train-set", "lr_scale"], "key=value"),
    (["--max-minutes", "0.4"], "leaves no time to train"),          # the tiny recipe keeps 0.5 min
    (["--max-minutes", "-1"], "must be > 0"),
    (["--device", "tpu"], "--device must be"),
    (["--kind-weights", "default"], "train_kinds.txt does not exist"),  # the tiny Ding folder has no kinds
    (["--kind-weights", "ding=1,story=two"], "kind=weight"),
])
def test_bad_input_is_one_line_exit_2_and_starts_nothing(argv, message, data, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main(["--data", str(data), "--out", str(out), "--recipe", "tiny", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_missing_data_or_time_limit_is_refused(data, tmp_path, capsys):
    assert cli_main(["--data", str(tmp_path), "--out", str(tmp_path / "o"), "--recipe", "tiny"]) == 2
    assert "not a prepared data folder: train.tsv, valid.tsv, test.tsv, spm.model missing" in capsys.readouterr().err
    # gpu-n6 has no max_steps: without a budget it would never stop
    assert cli_main(["--data", str(data), "--out", str(tmp_path / "o"), "--device", "cpu"]) == 2
    assert "give --max-minutes" in capsys.readouterr().err


def test_pack_takes_what_train_both_reads(data, tmp_path, capsys):
    (data / "notes.txt").write_text("not packed")
    try:
        assert cli_main(["--pack", str(data), str(tmp_path / "d.tar.gz")]) == 0
    finally:
        (data / "notes.txt").unlink()
    with tarfile.open(tmp_path / "d.tar.gz") as tar:
        names = sorted(tar.getnames())
        assert names == [f"ding_tiny/{n}" for n in ("datasheet.json", "dictionary.tsv", "spm.model", "test.tsv",
                                                     "test_general.tsv", "train.tsv", "valid.tsv")]
        assert tar.extractfile("ding_tiny/spm.model").read() == (data / "spm.model").read_bytes()
    assert cli_main(["--pack", str(tmp_path), str(tmp_path / "e.tar.gz")]) == 2
    assert "spm.model missing" in capsys.readouterr().err and not (tmp_path / "e.tar.gz").exists()


def test_gpu_warm_recipe_has_the_shipped_shape():
    """gpu-warm trains the shipped checkpoints on from their own weights: its model fields must be theirs, or
    `aiayn train --init-from` would refuse the weights on the device machine."""
    r = RECIPES["gpu-warm"]
    for d in ("en-de", "de-en"):
        shipped = json.loads((REPO / "checkpoints" / d / "config.json").read_text())["model"]
        assert {k: shipped[k] for k in r["model"]} == r["model"]


def test_init_from_warm_starts_each_direction_from_its_own_checkpoint(data, tmp_path, capsys):
    root = tmp_path / "ckpts"
    for d in ("en-de", "de-en"):
        (root / d).mkdir(parents=True)
        (root / d / "config.json").write_text("{}")
        shutil.copyfile(data / "spm.model", root / d / "spm.model")
    base = ["--data", str(data), "--out", str(tmp_path / "o"), "--recipe", "tiny", "--device", "cpu"]
    plan = both._plan(both._parser().parse_args(base + ["--init-from", str(root)]))
    for d in ("en-de", "de-en"):
        cmd = both.train_command(d, plan)
        assert cmd[cmd.index("--init-from") + 1] == str((root / d).resolve())
        assert cmd[cmd.index("--direction") + 1] == d
    assert "warm-started" in both._card_notes(plan)
    plain = both._plan(both._parser().parse_args(base))
    assert "--init-from" not in both.train_command("en-de", plain) and "warm-started" not in both._card_notes(plain)
    # another vocabulary: the weights' rows would mean other pieces
    (root / "de-en" / "spm.model").write_bytes(b"not the data's model")
    assert cli_main(base + ["--init-from", str(root)]) == 2
    assert "warm starts need the checkpoint's vocabulary" in capsys.readouterr().err
    assert cli_main(base + ["--init-from", str(tmp_path / "none")]) == 2
    assert "is not a checkpoint folder" in capsys.readouterr().err


def test_gpu_stack6_grows_the_shipped_shape_and_needs_init_from(data, tmp_path, capsys):
    """gpu-stack6 stacks the shipped N = 3 to N = 6: every other model field is the shipped one's, the depth a
    multiple of it; each child gets --init-from and --init-stack; without --init-from it is refused before anything
    starts (a fresh N = 6 with a warm-start schedule would train a different thing than asked)."""
    r = RECIPES["gpu-stack6"]
    for d in ("en-de", "de-en"):
        shipped = json.loads((REPO / "checkpoints" / d / "config.json").read_text())["model"]
        assert {k: shipped[k] for k in r["model"] if k != "n_layers"} == {k: v for k, v in r["model"].items()
                                                                          if k != "n_layers"}
        assert r["model"]["n_layers"] > shipped["n_layers"] and r["model"]["n_layers"] % shipped["n_layers"] == 0
    root = tmp_path / "ckpts"
    for d in ("en-de", "de-en"):
        (root / d).mkdir(parents=True)
        (root / d / "config.json").write_text("{}")
        shutil.copyfile(data / "spm.model", root / d / "spm.model")
    base = ["--data", str(data), "--out", str(tmp_path / "o"), "--recipe", "gpu-stack6", "--device", "cpu",
            "--max-minutes", "10"]
    plan = both._plan(both._parser().parse_args(base + ["--init-from", str(root)]))
    cmd = both.train_command("de-en", plan)
    assert "--init-stack" in cmd and cmd[cmd.index("--init-from") + 1] == str((root / "de-en").resolve())
    assert cmd[cmd.index("--set") + 1:].count("n_layers=6") == 1
    assert cli_main(base) == 2
    assert "give --init-from" in capsys.readouterr().err
    assert "--init-stack" not in train_flags({"init_stack": False})
    with pytest.raises(BadInput, match="on or off"):
        train_flags({"init_stack": "yes"})


def test_pack_takes_the_files_behind_links(data, tmp_path):
    """A `-shipspm` folder (aiayn train-on) links its splits to the data folder: the pack holds the files, not links
    that would dangle on the device machine."""
    folder = tmp_path / "linked"
    folder.mkdir()
    for name in ("train.tsv", "valid.tsv", "test.tsv", "spm.model"):
        (folder / name).symlink_to(data / name)
    assert cli_main(["--pack", str(folder), str(tmp_path / "l.tar.gz")]) == 0
    with tarfile.open(tmp_path / "l.tar.gz") as tar:
        member = tar.getmember("linked/train.tsv")
        assert member.isfile() and not member.issym()
        assert tar.extractfile(member).read() == (data / "train.tsv").read_bytes()


def test_kind_weights_reach_aiayn_train_and_the_pack(data, tmp_path):
    """--kind-weights goes into the recipe's training fields (so into the child's `aiayn train` flags) after the
    folder's kinds are checked; --pack takes train_kinds.txt along."""
    from test_train_pipeline import write_kinds

    folder = tmp_path / "ding_tiny"
    shutil.copytree(data, folder)
    write_kinds(folder)
    args = both._parser().parse_args(["--data", str(folder), "--out", str(tmp_path / "o"), "--recipe", "tiny",
                                      "--device", "cpu", "--kind-weights", "default"])
    plan = both._plan(args)
    assert plan["recipe"]["train"]["kind_weights"] == "default"
    flags = train_flags(plan["recipe"]["train"])
    assert flags[flags.index("--kind-weights") + 1] == "default"
    no_flag = both._plan(both._parser().parse_args(["--data", str(folder), "--out", str(tmp_path / "o"), "--recipe",
                                                    "tiny", "--device", "cpu"]))
    assert "kind_weights" not in no_flag["recipe"]["train"]  # the recipes' default: aiayn train's none
    assert cli_main(["--pack", str(folder), str(tmp_path / "d.tar.gz")]) == 0
    with tarfile.open(tmp_path / "d.tar.gz") as tar:
        assert tar.extractfile("ding_tiny/train_kinds.txt").read() == (folder / "train_kinds.txt").read_bytes()


def _extended(data: Path, folder: Path, rows: str) -> Path:
    """A copy of ``data`` whose train.tsv (and train_kinds.txt) has ``rows`` appended, as `aiayn backtranslate` makes
    one, and whose datasheet says something else."""
    from test_train_pipeline import write_kinds

    shutil.copytree(data, folder)
    write_kinds(folder)
    with open(folder / "train.tsv", "a", encoding="utf-8") as f:
        f.write(rows)
    with open(folder / "train_kinds.txt", "a", encoding="utf-8") as f:
        f.write("backtranslated\n" * rows.count("\n"))
    (folder / "datasheet.json").write_text(json.dumps({"backtranslation": {"pairs_added": rows.count("\n")}}))
    return folder


@pytest.mark.parametrize("suffix", ["tar.gz", "tar.xz"])
def test_a_pack_of_two_folders_stores_what_the_second_adds_and_unpacks_both(data, tmp_path, suffix, capsys):
    """Two back-translated folders share the build they extend; the device machine takes 64 MiB, so the second
    folder's train.tsv travels as its added rows only, and --unpack rebuilds it byte for byte."""
    from test_train_pipeline import write_kinds

    first = tmp_path / "src" / "bt"
    shutil.copytree(data, first)
    write_kinds(first)
    second = _extended(first, tmp_path / "src" / "bt-en", "Guten Morgen!\tGood morning!\nDanke.\tThanks.\n")
    pack = tmp_path / f"both.{suffix}"
    assert cli_main(["--pack", str(first), str(second), str(pack)]) == 0
    with tarfile.open(pack) as tar:
        names = set(tar.getnames())
        tail = tar.extractfile("bt-en/train.tsv.tail").read()
        manifest = json.loads(tar.extractfile("aiayn-pack.json").read())
    assert tail == "Guten Morgen!\tGood morning!\nDanke.\tThanks.\n".encode()
    assert "bt-en/train.tsv" not in names and "bt-en/datasheet.json" in names  # not an extension: stored whole
    assert "bt-en/valid.tsv.tail" in names and manifest["tails"]["bt-en/valid.tsv"]["bytes"] == (second / "valid.tsv").stat().st_size
    assert cli_main(["--unpack", str(pack), str(tmp_path / "dest")]) == 0
    assert "unpacked" in capsys.readouterr().out
    for folder in (first, second):
        got = tmp_path / "dest" / folder.name
        files = [p for p in folder.iterdir() if p.is_file()]  # not the token cache another test may have left
        assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in files)
        assert all((got / p.name).read_bytes() == p.read_bytes() for p in files)
    assert not (tmp_path / "dest" / "aiayn-pack.json").exists()


def test_a_damaged_pack_and_bad_pack_arguments_are_one_line_errors(data, tmp_path, capsys):
    first = tmp_path / "a" / "one"
    shutil.copytree(data, first)
    second = _extended(first, tmp_path / "b" / "two", "Ja.\tYes.\n")
    pack = tmp_path / "p.tar.gz"
    assert cli_main(["--pack", str(first), str(second), str(pack)]) == 0
    dest = tmp_path / "dest"
    with tarfile.open(pack) as tar:
        tar.extractall(dest, filter="data")
    manifest = json.loads((dest / "aiayn-pack.json").read_text())
    manifest["tails"]["two/train.tsv"]["sha256"] = "0" * 64
    (dest / "aiayn-pack.json").write_text(json.dumps(manifest))
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        for p in sorted(dest.rglob("*")):
            tar.add(p, arcname=str(p.relative_to(dest)), recursive=False)
    cases = [(["--unpack", str(bad), str(tmp_path / "d2")], "two/train.tsv rebuilt from one/train.tsv does not match"),
             (["--unpack", str(tmp_path / "none.tar.gz"), str(tmp_path / "d3")], "cannot unpack"),
             (["--pack", str(first), str(tmp_path / "c" / "one"), str(tmp_path / "q.tar.gz")], "different names"),
             (["--pack", str(tmp_path / "q.tar.gz")], "one or more data folders")]
    shutil.copytree(first, tmp_path / "c" / "one")
    assert cli_main(cases[0][0]) == 2 and "cannot rebuild" not in capsys.readouterr().err  # said once, not wrapped
    for argv, message in cases:
        assert cli_main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "q.tar.gz").exists()


def test_data_for_gives_each_direction_its_own_folder(data, tmp_path, capsys):
    """Back-translated data is made for one direction: --data-for D=DIR reaches that direction's training and
    post-training children and its warm-start check; the summary names each folder."""
    other = _extended(data, tmp_path / "bt-en", "Ja.\tYes.\n")
    base = ["--out", str(tmp_path / "o"), "--recipe", "tiny", "--device", "cpu"]
    plan = both._plan(both._parser().parse_args(base + ["--data", str(data), "--data-for", f"de-en={other}"]))
    assert plan["data_for"] == {"en-de": data.resolve(), "de-en": other.resolve()}
    for d, folder in plan["data_for"].items():
        cmd = both.train_command(d, plan)
        assert cmd[cmd.index("--data") + 1] == str(folder)
    summary = both._summary(plan, {}, time.time(), 0, False, ())
    assert summary["data_dir"] is None and summary["data_dirs"]["de-en"] == str(other.resolve())
    only = both._plan(both._parser().parse_args(base + ["--data-for", f"en-de={data}", f"de-en={other}"]))
    assert only["data_for"]["de-en"] == other.resolve()
    same = both._plan(both._parser().parse_args(base + ["--data", str(data)]))
    assert both._summary(same, {}, time.time(), 0, False, ())["data_dir"] == str(data.resolve())
    for argv, message in [(["--data-for", f"en-de={data}"], "for each direction"),
                          (["--data-for", f"fr-de={data}", f"en-de={data}", f"de-en={data}"], "DIRECTION=DIR"),
                          (["--data", str(data), "--data-for", f"de-en={tmp_path}"], "not a prepared data folder")]:
        assert cli_main(base + argv) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    one = both._plan(both._parser().parse_args(base + ["--data-for", f"en-de={data}", "--directions", "en-de"]))
    assert one["data_for"] == {"en-de": data.resolve()}  # a direction left out needs no folder


# -- end to end -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def done(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("both") / "out"
    proc = _train_both("--data", str(data), "--out", str(out), "--recipe", "tiny", "--device", "cpu", "--max-minutes", "5")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["en-de", "de-en"])
def test_end_to_end_checkpoints_are_loadable_fp16_in_the_shipped_layout(done, direction):
    from aiayn import Translator

    out, _ = done
    ckpt = out / "checkpoints" / direction
    shipped = {p.name for p in (REPO / "checkpoints" / direction).iterdir()}
    assert shipped <= {p.name for p in ckpt.iterdir()} | {"attention_history.safetensors"}
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]  # no leftover temporary folder
    tr = Translator.load(ckpt, device="cpu")
    assert tr.meta["direction"] == direction
    assert isinstance(tr.translate("Das Haus ist klein." if direction == "de-en" else "The house is small.").text, str)
    config = json.loads((ckpt / "config.json").read_text())
    assert config["dtype"] == "float16"
    assert {a.dtype for a in np_load_file(str(ckpt / "model.safetensors")).values()} == {np.dtype(np.float16)}
    # Section 6.1: the average of the last k saved states of the run
    states = sorted(p.name for p in (out / "runs" / direction).glob("step_*"))
    assert config["meta"]["averaged_states"] == states[-TINY["average_last"]:]
    assert config["meta"]["step"] == TINY["train"]["max_steps"]
    assert config["model"]["d_model"] == TINY["model"]["d_model"] and config["model"]["n_layers"] == TINY["model"]["n_layers"]


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["en-de", "de-en"])
def test_end_to_end_card_and_summary_hold_the_eval_numbers(done, data, direction):
    out, proc = done
    ckpt = out / "checkpoints" / direction
    summary = json.loads((out / "summary.json").read_text())
    row = summary["directions"][direction]
    assert summary["status"] == "ok" and row["status"] == "ok" and summary["exit_code"] == 0
    card = (ckpt / "MODEL_CARD.md").read_text()
    for split in ("test", "test_general"):
        ev = json.loads((ckpt / f"eval_{split}.json").read_text())
        assert ev["split"] == split and ev["checkpoint"] == str(ckpt.resolve())
        assert ev["n_sentences"] == len((data / f"{split}.tsv").read_text().splitlines()) - 1
        m, b = ev["scores"]["model"], ev["scores"]["dictionary_baseline"]
        assert row["scores"][split] == {"bleu": m["bleu"], "chrf": m["chrf"], "dictionary_bleu": b["bleu"],
                                        "dictionary_chrf": b["chrf"], "n_sentences": ev["n_sentences"]}
        if split == "test":
            assert f"| this model | {m['bleu']:.2f} | {m['chrf']:.2f} |" in card
            assert f"| Ding word-by-word dictionary baseline | {b['bleu']:.2f} | {b['chrf']:.2f} |" in card
        else:
            assert f"`test_general.tsv`, {ev['n_sentences']} sentences" in card
            assert f"BLEU {m['bleu']:.2f} / chrF {m['chrf']:.2f} (dictionary baseline {b['bleu']:.2f} / {b['chrf']:.2f})" in card
    meta = json.loads((ckpt / "config.json").read_text())["meta"]
    assert meta["test_scores"]["test_bleu"] == row["scores"]["test"]["bleu"]
    assert row["steps"] == meta["step"] and row["train_tokens"] == meta["train_tokens"] > 0
    assert row["tokens_per_s"] == pytest.approx(meta["train_tokens"] / meta["train_wall_time_s"])
    assert json.loads((ckpt / "head_sweep.json").read_text())["direction"] == direction
    attribution = json.loads((ckpt / "attribution.json").read_text())  # what the Alignment page's gold-set panel reads
    assert attribution["direction"] == direction and attribution["methods"]["grad_x_input"]["sentences"]["first"] == 40
    assert row["stages"] == {"train": 0, "average": 0, "evaluate_test": 0, "evaluate_test_general": 0, "evaluate_dev": 0,
                             "card": 0, "align": 0, "attribution": 0, "sweep": 0}
    dev = json.loads((ckpt / "eval_dev.json").read_text())  # the development sets, as beside the shipped checkpoints
    assert dev["checkpoint"] == str(ckpt.resolve()) and set(dev["scores"]) == {direction}
    for name, s in dev["details"][direction].items():
        assert row["scores"][f"dev_{name}"] == {"bleu": s["bleu"], "chrf": s["chrf"], "dictionary_bleu": None,
                                                "dictionary_chrf": None, "n_sentences": s["n_sentences"]}
    # the printed table and the logs
    table = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] == [direction]]
    assert [t[1] for t in table] == ["test", "test_general", "dev_short", "dev_long", "dev_classic"]
    assert table[0][2:4] == [f"{row['scores']['test']['bleu']:.2f}", f"{row['scores']['test']['chrf']:.2f}"]
    log = (out / "logs" / f"{direction}.log").read_text()
    assert " train | $ " in log and " post | == card: " in log and f"[{direction}] train | " in proc.stdout


@pytest.mark.slow
def test_end_to_end_budget_reaches_aiayn_train(done):
    out, _ = done
    summary = json.loads((out / "summary.json").read_text())
    assert summary["budget"] == {"max_minutes": 5.0, "reserve_minutes": TINY["reserve_minutes"],
                                 "train_max_minutes": 5.0 - TINY["reserve_minutes"]}
    for d in ("en-de", "de-en"):
        tc = json.loads((out / "runs" / d / "train_config.json").read_text())
        assert tc["max_minutes"] == 5.0 - TINY["reserve_minutes"]
        assert tc["direction"] == d and tc["preset"] == TINY["preset"] and tc["threads"] >= 1
        assert {k: tc[k] for k in TINY["train"]} == TINY["train"]
        assert tc["model_overrides"] == TINY["model"]


@pytest.mark.slow
def test_a_failing_child_leaves_the_other_to_finish(done, data, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(done[0] / "runs" / "de-en", out / "runs" / "de-en")  # a fresh start there is refused
    proc = _train_both("--data", str(data), "--out", str(out), "--recipe", "tiny", "--device", "cpu", "--no-sweep", "--quiet")
    assert proc.returncode == both.EXIT_FAILED[("de-en",)] == 4, proc.stderr[-3000:]
    assert "de-en failed at train" in proc.stderr and "already holds a training run" in proc.stderr
    assert "en-de failed" not in proc.stderr and "Traceback" not in proc.stderr
    assert (out / "checkpoints" / "en-de" / "MODEL_CARD.md").is_file() and not (out / "checkpoints" / "de-en").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["exit_code"] == 4
    assert summary["directions"]["de-en"]["status"] == "failed: train" and summary["directions"]["en-de"]["status"] == "ok"
    assert summary["directions"]["en-de"]["stages"]["sweep"].startswith("skipped")


@pytest.mark.slow
def test_sigint_stops_both_children_and_leaves_nothing_half_written(data, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "aiayn", "train-both", "--data", str(data), "--out", str(out), "--recipe", "tiny",
           "--device", "cpu", "--max-minutes", "3", "--quiet", "--train-set", "max_steps=1000000", "save_every=5"]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        logs = [out / "logs" / f"{d}.log" for d in ("en-de", "de-en")]
        deadline = time.monotonic() + 120  # a safety net, not a timing assertion
        while not all(p.is_file() and "it/s" in p.read_text() for p in logs):
            assert proc.poll() is None and time.monotonic() < deadline, "training never started"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted" in stderr and "--resume" in stderr and "failed" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert {row["status"] for row in summary["directions"].values()} == {"interrupted: train"}
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())
    for d in ("en-de", "de-en"):
        for state in (out / "runs" / d).iterdir():
            if state.name.startswith("step_"):
                assert sorted(p.name for p in state.iterdir()) == \
                    ["config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json"]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(out / "runs") not in ps  # no child left running


@pytest.mark.slow
def test_a_failing_post_stage_leaves_no_checkpoint(done, data, tmp_path, capsys):
    bad = tmp_path / "data"
    shutil.copytree(data, bad, ignore=shutil.ignore_patterns("cache"))
    (bad / "test_general.tsv").write_text("x\ty\nein\tone\n", encoding="utf-8")  # no de / en columns
    ckpt = tmp_path / "checkpoints" / "en-de"
    status = tmp_path / "status.json"
    code = finish.post_main(["--run", str(done[0] / "runs" / "en-de"), "--checkpoint", str(ckpt), "--data", str(bad),
                             "--last", "2", "--device", "cpu", "--hardware", "test", "--status", str(status)])
    assert code == 2
    assert json.loads(status.read_text()) == {"average": 0, "evaluate_test": 0, "evaluate_test_general": 2}
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())
    assert "evaluate_test_general failed (exit code 2); no checkpoint was written" in capsys.readouterr().err


def test_post_ln_recipe_differs_from_the_gpu_recipe_only_in_layer_order_and_init():
    """gpu-n6-post is gpu-n6 with the paper's post-LN and the residual branches starting at DeepNet's beta."""
    from aiayn.training.recipe import deepnet_beta

    pre, post = RECIPES["gpu-n6"], RECIPES["gpu-n6-post"]
    assert post["model"] == {**pre["model"], "norm_first": False}
    assert post["train"] == {**pre["train"], "residual_init_scale": round(deepnet_beta(post["model"]["n_layers"]), 2)}
