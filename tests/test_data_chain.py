"""``aiayn data all`` (aiayn/data/chain.py): every folder the training recipes read, built in order from a prepared
base, each one kept when it is complete. The full chain runs for real from the ``-shipspm`` copy on: tiny checkpoints
back-translate the committed fortune excerpts, packed into ``.deb`` files as tests/test_backtranslate.py does; only
``aiayn data debian`` (2 GB of packages) is stood in for by a prepared folder."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aiayn.data import chain
from aiayn.data import monolingual as mono
from aiayn.data.corpora import read_tsv
from aiayn.data.kinds import KIND, sentence_kinds

from test_backtranslate import BSD_COPYRIGHT, EN_FIX, _build_deb, _pack_deb  # the packed fortune fixtures

NAMES = ["debian-story", "debian-story-shipspm", "debian-story-bt", "debian-story-bt-en", "debian-story-bt-dingsent",
         "debian-story-bt-en-dingsent"]


@pytest.fixture(scope="module")
def debs(tmp_path_factory) -> Path:
    """fortunes-de, fortunes and fortunes-min as cached .debs (the fixtures of tests/test_backtranslate.py)."""
    tmp = tmp_path_factory.mktemp("chain-debs")
    _build_deb(tmp, tmp / "debs")
    folder = mono.FORTUNES_DIRS["en"]
    _pack_deb(tmp, tmp / "debs", "fortunes", "1:1.99.1-7.3", folder, {"people": EN_FIX / "people"}, BSD_COPYRIGHT)
    _pack_deb(tmp, tmp / "debs", "fortunes-min", "1:1.99.1-7.3", folder, {"fortunes": EN_FIX / "fortunes"},
              BSD_COPYRIGHT)
    return tmp / "debs"


def _base(root: Path, tiny_data: Path) -> Path:
    """``root/debian-story`` as ``aiayn data debian`` leaves it: the tiny data with kinds and a datasheet, and a
    vocabulary of its own (not the checkpoints'), as a fresh build has."""
    d = root / "debian-story"
    shutil.copytree(tiny_data, d)
    n = len(read_tsv(d / "train.tsv"))
    (d / "train_kinds.txt").write_text("ding\n" * n, encoding="utf-8")
    sheet = json.loads((d / "datasheet.json").read_text(encoding="utf-8"))
    sheet["kinds"] = {"file": "train_kinds.txt", "train_pairs": {"ding": n}, "default_weights": {"ding": 1}}
    (d / "datasheet.json").write_text(json.dumps(sheet), encoding="utf-8")
    (d / "DATASHEET.md").write_text("# Datasheet\n", encoding="utf-8")
    (d / "spm.model").write_bytes(b"the base's own vocabulary")
    return d


def test_the_chain_builds_every_folder_and_then_keeps_them(tmp_path, tiny_data, tiny_checkpoints, debs, capsys):
    root = tmp_path / "data"
    base = _base(root, tiny_data)
    argv = ["--root", str(root), "--checkpoints", str(tiny_checkpoints), "--debs", str(debs), "--no-download",
            "--threads", "1"]
    assert chain.cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "[1/6] debian-story: kept" in out and "every folder is complete" in out
    assert all(chain.is_complete(root / n) for n in NAMES)
    ship = root / "debian-story-shipspm"
    assert (ship / "spm.model").read_bytes() == (tiny_checkpoints / "en-de" / "spm.model").read_bytes()
    assert (ship / "train.tsv").resolve() == (base / "train.tsv").resolve()
    n = len(read_tsv(base / "train.tsv"))
    # German fortunes by the de-en model (pairs for en-de); English ones by en-de, named kind backtranslated
    for name, checkpoint, language in (("debian-story-bt", "de-en", "de"), ("debian-story-bt-en", "en-de", "en")):
        sheet = json.loads((root / name / "datasheet.json").read_text(encoding="utf-8"))
        assert sheet["backtranslation"]["checkpoint"] == str(tiny_checkpoints / checkpoint)
        assert sheet["backtranslation"]["language"] == language
        kinds = (root / name / "train_kinds.txt").read_text().split()
        assert kinds[:n] == ["ding"] * n and len(kinds) > n and set(kinds[n:]) == {"backtranslated"}
        # the relabelled copy: Ding's example sentences as their own kind, the rest as in its input
        rows = (root / name / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
        relabelled = (root / f"{name}-dingsent" / "train_kinds.txt").read_text().split()
        assert relabelled == sentence_kinds(rows, kinds) and KIND in relabelled
    stamps = {n: (root / n / "train_kinds.txt").stat().st_mtime_ns for n in NAMES}
    assert chain.cli_main(argv) == 0
    assert capsys.readouterr().out.count(": kept (complete)") == 6
    assert {n: (root / n / "train_kinds.txt").stat().st_mtime_ns for n in NAMES} == stamps


def _stub(root: Path, fail_at: str | None = None, calls: list | None = None):
    """A runner that makes each folder complete (empty files) or fails at the step named ``fail_at``."""
    def run(step, checkpoints):
        calls.append(step.out.name)
        if step.out.name == fail_at:
            return 3
        step.out.mkdir(parents=True, exist_ok=True)
        for f in chain.REQUIRED_FILES:
            (step.out / f).write_text("")
        return 0
    return run


def test_the_steps_read_only_earlier_folders_and_name_their_commands(tmp_path, tiny_checkpoints):
    steps = chain.chain_steps(tmp_path, tiny_checkpoints, deb_dir="/debs", download=False, threads=1)
    assert [s.out.name for s in steps] == NAMES
    made: set[Path] = set()
    for s in steps:
        assert set(s.inputs) <= made and s.inputs == tuple(dict.fromkeys(s.inputs))
        made.add(s.out)
    assert steps[0].command[:3] == ("aiayn", "data", "debian") and "--no-download" in steps[0].command
    assert steps[2].command[steps[2].command.index("--checkpoint") + 1] == str(tiny_checkpoints / "de-en")
    bt_en = steps[3].command
    assert bt_en[bt_en.index("--kind") + 1] == "backtranslated" and bt_en[bt_en.index("--language") + 1] == "en"
    assert bt_en[bt_en.index("--checkpoint") + 1] == str(tiny_checkpoints / "en-de")
    assert bt_en[bt_en.index("--deb-dir") + 1] == "/debs" and bt_en[bt_en.index("--threads") + 1] == "1"
    assert steps[1].shell().startswith("(links to debian-story's files")


def test_a_failed_step_stops_the_chain_and_a_rerun_goes_on_from_it(tmp_path, tiny_checkpoints):
    steps = chain.chain_steps(tmp_path, tiny_checkpoints)
    calls: list[str] = []
    done = chain.run_chain(steps, tiny_checkpoints, runner=_stub(tmp_path, "debian-story-bt-en", calls),
                           log=lambda line: None)
    assert calls == NAMES[:4]
    assert [o for _, o in done] == ["built", "built", "built", "failed (exit 3)"]
    calls.clear()
    done = chain.run_chain(steps, tiny_checkpoints, runner=_stub(tmp_path, None, calls), log=lambda line: None)
    assert calls == NAMES[3:] and [o for _, o in done] == ["kept"] * 3 + ["built"] * 3


def test_a_step_that_exits_0_but_leaves_no_complete_folder_fails(tmp_path, tiny_checkpoints):
    steps = chain.chain_steps(tmp_path, tiny_checkpoints)
    done = chain.run_chain(steps, tiny_checkpoints, runner=lambda s, c: 0, log=lambda line: None)
    assert done == [(steps[0], "failed (its folder is not complete)")]


def test_an_unfinished_folder_in_the_way_is_not_touched(tmp_path, tiny_checkpoints, capsys):
    stray = tmp_path / "debian-story-bt"
    stray.mkdir()
    (stray / "train.tsv").write_text("mine\n")
    calls: list[str] = []
    with pytest.raises(chain.ChainError, match="debian-story-bt exists but lacks valid.tsv, test.tsv"):
        chain.run_chain(chain.chain_steps(tmp_path, tiny_checkpoints), tiny_checkpoints,
                        runner=_stub(tmp_path, None, calls))
    assert calls == [] and (stray / "train.tsv").read_text() == "mine\n"
    assert chain.cli_main(["--root", str(tmp_path), "--checkpoints", str(tiny_checkpoints)]) == 2
    assert "move it away or remove it" in capsys.readouterr().err
    # an unfinished base is the data command's own to write over: not refused
    (tmp_path / "debian-story").mkdir()
    stray.joinpath("train.tsv").unlink()
    stray.rmdir()
    done = chain.run_chain(chain.chain_steps(tmp_path, tiny_checkpoints), tiny_checkpoints,
                           runner=_stub(tmp_path, None, calls), log=lambda line: None)
    assert [o for _, o in done] == ["built"] * 6


def test_checkpoints_without_a_model_or_with_two_vocabularies_are_refused(tmp_path, tiny_checkpoints, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(tiny_checkpoints, ck)
    (ck / "de-en" / "spm.model").write_bytes(b"another vocabulary")
    with pytest.raises(chain.ChainError, match="different spm.model"):
        chain.run_chain(chain.chain_steps(tmp_path, ck), ck, dry_run=True)
    (ck / "en-de" / "model.safetensors").unlink()
    assert chain.cli_main(["--root", str(tmp_path / "data"), "--checkpoints", str(ck), "--dry-run"]) == 2
    assert f"{ck / 'en-de'} has no model.safetensors" in capsys.readouterr().err
    assert chain.cli_main(["--threads", "0", "--dry-run"]) == 2
    assert not (tmp_path / "data").exists()


def test_a_dry_run_prints_the_plan_and_makes_nothing(tmp_path, tiny_checkpoints, capsys):
    from aiayn.data.prepare import cli_main as data_main

    root = tmp_path / "data"
    assert data_main(["all", "--root", str(root), "--checkpoints", str(tiny_checkpoints), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [f"[{i}/6] {n}" for i, n in enumerate(NAMES, 1)]
    assert all(": would run " in line for line in out) and "aiayn data debian --out" in out[0]
    assert not root.exists()


def test_train_on_names_the_chain_when_there_is_no_data(tmp_path, tiny_checkpoints):
    import argparse

    from aiayn.training import continuous

    args = argparse.Namespace(run=str(tmp_path / "run"), direction="en-de", train_set=[], threads=None,
                              data=str(tmp_path / "gone"), kind_weights=None)
    with pytest.raises(continuous.BadInput, match=r"no data folder .*`aiayn data all`"):
        continuous.train_command(args, tiny_checkpoints / "en-de", {}, 10.0)
