"""A checkpoint's lineage (aiayn.lineage): recorded when a run starts, carried through `--init-from` and
`aiayn average`, summed into lifetime totals; the shipped checkpoints' recorded history."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aiayn.lineage import distinct_paths, lifetime, lineage_markdown, lineage_of, short_path
from aiayn.training.export import export
from aiayn.training.loop import train
from aiayn.training.recipe import TrainConfig

QUIET = lambda *a, **k: None  # noqa: E731
ROOT = Path(__file__).resolve().parent.parent


def tiny_tc(data: Path, run: Path, **kw) -> TrainConfig:
    base = dict(data_dir=str(data), run_dir=str(run), direction="en-de", preset="tiny", model_overrides={"dropout": 0.1},
                max_tokens=512, accumulation=1, warmup_steps=20, max_steps=3, valid_every=1000, valid_bleu_sentences=0,
                save_every=1000, keep=2, threads=1, seed=7, token_cache=str(run.parent / "token_cache"),
                record_attention=False)
    base.update(kw)
    return TrainConfig(**base)


def meta_of(ckpt: Path) -> dict:
    return json.loads((ckpt / "config.json").read_text())["meta"]


def test_lineage_is_carried_through_init_from_and_average(tiny_data, tmp_path):
    parent_run = tmp_path / "runs" / "parent"
    train(tiny_tc(tiny_data, parent_run, max_steps=3), log=QUIET)
    parent = export(parent_run, tmp_path / "ckpt" / "en-de", last=1)
    pm = meta_of(parent)
    assert [e["steps"] for e in pm["lineage"]] == [3] and pm["lineage"][0]["init_from"] is None
    assert pm["lineage"][0]["hardware"].startswith("CPU ") and pm["lineage"][0]["train_tokens"] == pm["train_tokens"] > 0

    # a child warm-started from the exported checkpoint, in the other direction; then the parent checkpoint is
    # overwritten (as a re-export over the checkpoint a run started from does): the child keeps what it started from
    child_run = tmp_path / "runs" / "child"
    train(tiny_tc(tiny_data, child_run, direction="de-en", max_steps=2, init_from=str(parent)), log=QUIET)
    shutil.rmtree(parent)
    child = export(child_run, tmp_path / "ckpt" / "de-en", last=1)
    cm = meta_of(child)
    assert [(e["run"], e["direction"], e["steps"]) for e in cm["lineage"]] == [("runs/parent", "en-de", 3),
                                                                                ("runs/child", "de-en", 2)]
    assert cm["lineage"][1]["init_from"] == "ckpt/en-de" and cm["step"] == 2  # the meta's own step: this run only
    life = lifetime(cm)
    assert (life.steps, life.complete) == (5, True)
    assert life.train_tokens == pm["train_tokens"] + cm["train_tokens"]
    assert [(s.start, s.last, s.warm) for s in life.stages] == [(0, 3, False), (3, 5, True)]

    # a grandchild started from the child's run directory (its last state) inherits both runs
    grand_run = tmp_path / "runs" / "grand"
    train(tiny_tc(tiny_data, grand_run, direction="de-en", max_steps=1, init_from=str(child_run)), log=QUIET)
    gm = meta_of(export(grand_run, tmp_path / "ckpt" / "grand", last=1))
    assert [e["steps"] for e in gm["lineage"]] == [3, 2, 1] and lifetime(gm).steps == 6

    # a resumed run keeps its parents and its own totals continue
    train(tiny_tc(tiny_data, grand_run, direction="de-en", max_steps=2, init_from=str(child_run)), resume=True, log=QUIET)
    gm2 = meta_of(export(grand_run, tmp_path / "ckpt" / "grand", last=1))
    assert [e["steps"] for e in gm2["lineage"]] == [3, 2, 2]


def test_the_data_description_names_back_translated_sentences(tmp_path):
    """A run's lineage says what it trained on from the datasheet: the Debian pairs, and each back-translation
    record (``aiayn backtranslate``, the earlier one kept under ``previous``), tagged or not."""
    from aiayn.lineage import data_description

    sheet = {"debian_sources": [{"pairs_in_train": 1200}, {"pairs_kept": 34}]}
    (tmp_path / "datasheet.json").write_text(json.dumps(sheet))
    assert data_description(tmp_path) == "Ding + 1,234 sentence pairs from 2 Debian packages"
    sheet["backtranslation"] = {"language": "en", "pairs_added": 10803, "tag": "<bt>",
                                "source": [{"package": "fortunes"}, {"file": "extra.txt"}],
                                "previous": {"language": "de", "pairs_added": 18875, "source": {"package": "fortunes-de"}}}
    (tmp_path / "datasheet.json").write_text(json.dumps(sheet))
    assert data_description(tmp_path) == ("Ding + 1,234 sentence pairs from 2 Debian packages + 18,875 back-translated "
                                          "German sentences of fortunes-de + 10,803 tagged back-translated English "
                                          "sentences of fortunes, extra.txt")
    sheet["sentence_kind"] = {"kind": "ding_sentence", "rows": 18505}
    (tmp_path / "datasheet.json").write_text(json.dumps(sheet))
    assert data_description(tmp_path).endswith("sentences of fortunes, extra.txt (18,505 Ding example sentences as "
                                               "kind ding_sentence)")
    sheet["pair_filter"] = {"pairs_dropped": 5952, "previous": {"pairs_dropped": 48}}  # aiayn data filter, twice
    (tmp_path / "datasheet.json").write_text(json.dumps(sheet))
    assert data_description(tmp_path).endswith("kind ding_sentence), less 6,000 pairs dropped by dual cross-entropy")
    (tmp_path / "datasheet.json").write_text(json.dumps({"backtranslation": {"pairs_added": "many"}}))
    assert data_description(tmp_path) == "Ding German-English dictionary + back-translated sentences"


def test_the_commit_is_known_in_a_checkout_and_in_a_git_archive_copy(tmp_path):
    """Background runs train from a `git archive HEAD | tar -x` copy of the code (docs/training.md), which has no .git:
    the commit a checkpoint records then comes from aiayn/_commit.py, which `git archive` fills in (export-subst)."""
    import subprocess
    import sys

    from aiayn._commit import ARCHIVED, source_commit

    assert source_commit(tmp_path) is None and "Format" in ARCHIVED  # neither a checkout nor an archive
    assert source_commit(tmp_path, "ab" * 20) == "ab" * 20 and source_commit(tmp_path, "$Format:%H$") is None
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "aiayn/_commit.py", ".gitattributes"], cwd=ROOT,
                                 capture_output=True).returncode == 0
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert source_commit() == head
    if not tracked:
        pytest.skip("aiayn/_commit.py is not committed yet")
    archive = subprocess.run(["git", "archive", "HEAD", "aiayn/_commit.py"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    code = "import _commit, sys; print(_commit.source_commit(sys.argv[1]))"
    got = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=tmp_path / "aiayn", capture_output=True,
                         text=True, check=True, env={"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert got.stdout.strip() == head


def test_lineage_of_an_old_checkpoint_and_of_none():
    old = {"step": 2000, "train_tokens": 7_000_000, "train_wall_time_s": 3600.0, "direction": "en-de",
           "train_config": {"init_from": "/home/x/checkpoints/en-de", "run_dir": "/home/x/runs/en-de-debian"}}
    runs = lineage_of(old)
    assert len(runs) == 1 and runs[0]["init_from"] == "checkpoints/en-de"
    life = lifetime(old)
    assert life.steps == 2000 and not life.complete  # an unrecorded parent: the totals are lower bounds
    assert "at least 2,000" in lineage_markdown(old) and "not recorded" in lineage_markdown(old)
    scratch = dict(old, train_config={})
    assert lifetime(scratch).complete and "Lineage" not in lineage_markdown(scratch)
    assert lifetime({}) is None and lineage_markdown({"lineage": "bad"}) is None and lineage_of(None) == []


@pytest.mark.parametrize("direction, steps, runs, hours", [("en-de", 55_115, 17, 18.6), ("de-en", 41_929, 7, 8.6)])
def test_the_shipped_checkpoints_record_their_whole_history(direction, steps, runs, hours):
    """docs/training.md: en-de 8,000 steps on Ding, then 2,000 on Ding + Debian, then 3,500 on the story build
    (sessions 9 and 10), then 6,546 on the story build on a GPU (session 11), then 3,609 more on a GPU (session 12),
    then 8,084 more (session 13), then 10,396 more (session 14), then 1,000 more on the CPU (session 17), then 1,200
    more on the CPU with back-translated sentences (session 21), then 1,200 more the same way (shipped in session 22), then 1,200 more (session 22),
    then 400 more with larger batches and Ding's sentences weighted up (session 26), then 400 more (session 27), then 280 more
    (session 28, shipped in session 29), then 6,500 on a GPU (session 32), then 400 on the CPU (shipped in session 32), then
    400 more on the CPU (session 33, in session 34's soup, shipped in session 37); de-en warm-started from the en-de run at step 8,000,
    4,000 steps, then 1,602 on Ding + Debian, then 6,468 on the story build on the GPU, then 3,585 more (session 12),
    then 8,043 more (session 13), then 10,231 more (session 14). The last run matches the meta's own numbers and says (in its
    note) how it was trained."""
    meta = meta_of(ROOT / "checkpoints" / direction)
    life = lifetime(meta)
    assert (life.steps, len(life.stages), life.complete) == (steps, runs, True)
    assert round(life.wall_time_s / 3600, 1) == hours
    last = meta["lineage"][-1]
    assert (last["steps"], last["train_tokens"], last["wall_time_s"]) == (
        meta["step"], meta["train_tokens"], meta["train_wall_time_s"])
    assert [s.warm for s in life.stages] == [False] + [True] * (runs - 1)
    assert life.stages[1].start == 8000 and "Debian" in last["data"] and "Debian" not in meta["lineage"][0]["data"]
    assert all(e.get("note") for e in meta["lineage"]), "every shipped run says how it was trained"
    text = lineage_markdown(meta)
    assert f"**Training steps:** {steps:,} over {runs} runs" in text and "lifetime step 8,000" in text


@pytest.mark.parametrize("direction", ["en-de", "de-en"])
def test_the_shipped_cards_show_the_recorded_lineage(direction):
    """The cards must say what render_card says (they were edited by hand while `aiayn card` lacked the training
    data), bf16 autocast on the GPU only when the last run's hardware is a GPU."""
    from aiayn.evaluation.modelcard import lineage_lines

    ckpt = ROOT / "checkpoints" / direction
    card = (ckpt / "MODEL_CARD.md").read_text()
    lines = lineage_lines(meta_of(ckpt))
    assert lines and "\n".join(lines) in card
    on_gpu = "NVIDIA" in meta_of(ckpt)["lineage"][-1]["hardware"]
    assert "- Steps (this run):" in card and ("bf16 autocast on the GPU" in card) == on_gpu


def test_readme_states_the_shipped_lifetimes_and_the_serving_defaults():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    en, de = (lifetime(meta_of(ROOT / "checkpoints" / d)) for d in ("en-de", "de-en"))
    assert f"en-de has trained {en.steps:,} steps" in readme and f"de-en {de.steps:,}" in readme
    assert f"{en.wall_time_s / 3600:.1f} hours" in readme and f"{de.wall_time_s / 3600:.1f} hours" in readme
    # the serving section: the default already listens on every interface; 127.0.0.1 restricts; no login
    assert "--server.address 0.0.0.0" not in readme and "--server.address 127.0.0.1" in readme
    assert "listens on every network interface" in readme and "**no login**" in readme
    # both shipped models were trained on the Debian sentences: the licence section must not say only en-de
    assert "en-de also on German translations" not in readme and "both (en-de and de-en)" in readme


def test_distinct_paths_tell_alike_folders_apart_with_the_shortest_tail():
    paths = ["/c/train-on27-43/de-en/candidate", "/c/train-on28-46/de-en/candidate", "/c/shipped14-de-en",
             "/x/a/b/en-de/candidate", "/y/a/b/en-de/candidate"]
    names = distinct_paths(paths)
    assert names == ["train-on27-43/de-en/candidate", "train-on28-46/de-en/candidate", "c/shipped14-de-en",
                     "x/a/b/en-de/candidate", "y/a/b/en-de/candidate"]
    assert len(set(names)) == len(names) and {short_path(p) for p in paths[:2]} == {"de-en/candidate"}
    assert all(p.endswith(n) for p, n in zip(paths, names))
    assert distinct_paths(["/a/b"]) == ["a/b"] and distinct_paths([]) == []
