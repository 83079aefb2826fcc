"""`aiayn ship` (aiayn.training.shipping): a candidate goes into checkpoints/ only on its verdict (it beat the weights
the target holds, on every set, with a card), followed through a climb; nothing is written when it is refused."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from aiayn.evaluation.devsets import DEVSETS_DIR as DEVSETS
from aiayn.training import shipping
from aiayn.training.continuous import devset_digests

SETS = ("test", "dev/short", "dev/long", "dev/classic")


def _scores(chrf: float) -> dict:
    return {k: {"bleu": 1.0, "chrf": chrf} for k in SETS}


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _checkpoint(folder: Path, weights: bytes, parent: Path | None = None) -> Path:
    """A checkpoint folder whose files name ``parent`` the way a warm start's do (full path in the meta, the card
    and the evaluation files; the lineage's last two parts)."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(weights)
    p = str(parent) if parent else None
    short = "/".join(parent.parts[-2:]) if parent else None
    (folder / "config.json").write_text(json.dumps({"d_model": 8, "meta": {
        "direction": "en-de", "interpolation": {"a": {"path": p}},
        "lineage": [{"init_from": short, "note": f"0.5 x {short} + 0.5 x this run's"}]}}, indent=2))
    (folder / "MODEL_CARD.md").write_text(f"A weight interpolation (1 - w) x {p} + w x the candidate.\n")
    for name in ("eval_test.json", "eval_dev.json", "eval_valid.json"):
        (folder / name).write_text(json.dumps({"checkpoint": str(folder), "note": f"from {p}"}, indent=2))
    return folder


def _judged(out: Path, against: Path, *, beats: bool = True, interp: bool = True, card: int = 0,
            record_sha: bool = True, weights: bytes = b"child", devsets: dict | None = None) -> Path:
    """``out/verdict.json`` of a train-on call judged against ``against``, with ``out/candidate`` (which loses)
    and, with ``interp``, ``out/interp-0.5`` (``beats``); returns the folder the verdict says beats (or would).
    ``devsets``: the sets it records having been judged on (default: the repository's as they are now)."""
    cand = _checkpoint(out / "candidate", weights + b"-avg", against)
    chosen = _checkpoint(out / "interp-0.5", weights, against) if interp else cand
    report = {"beats": (not interp) and beats, "candidate": str(cand), "shipped": str(against),
              "scores": {"candidate": _scores(21.0 if not interp and beats else 19.0), "shipped": _scores(20.0)},
              "shipped_evals": {"dev": str(against / "eval_dev.json")}}
    if record_sha:
        report["shipped_sha256"] = hashlib.sha256((against / "model.safetensors").read_bytes()).hexdigest()
        report["devsets"] = devset_digests(DEVSETS) if devsets is None else devsets
    if interp:
        report["interpolation"] = {"checkpoint": str(chosen), "beats": beats, "scores": _scores(21.0 if beats else 19.0),
                                   "stages": {"card": card}}
    else:
        (out / "finish_status.json").write_text(json.dumps({"card": card}))
    (out / "verdict.json").write_text(json.dumps(report))
    return chosen


@pytest.fixture()
def repo(tmp_path) -> dict[str, Path]:
    """A repository with a shipped en-de, and the copy of it a background run started from (outside the repo)."""
    target = _checkpoint(tmp_path / "repo" / "checkpoints" / "en-de", b"parent")
    copy = _checkpoint(tmp_path / "cache" / "shipped-en-de", b"parent")
    return {"repo": tmp_path / "repo", "target": target, "copy": copy, "cache": tmp_path / "cache"}


def test_a_winning_interpolation_ships_with_the_parent_named_as_the_target(repo):
    chosen = _judged(repo["cache"] / "out", repo["copy"])
    done = shipping.ship_judged(chosen, repo["target"], repo["repo"])
    target = repo["target"]
    assert (target / "model.safetensors").read_bytes() == b"child"
    assert not (target / "eval_valid.json").exists()  # the valid split chose w; it is not a shipped evaluation
    assert done["name"] == "checkpoints/en-de" and [link["candidate"] for link in done["chain"]] == [chosen]
    text = {f: (target / f).read_text() for f in ("config.json", "MODEL_CARD.md", "eval_test.json", "eval_dev.json")}
    assert not any(str(repo["copy"]) in t or "cache/shipped-en-de" in t for t in text.values())
    meta = json.loads(text["config.json"])["meta"]
    assert meta["interpolation"]["a"]["path"] == "checkpoints/en-de"
    assert meta["lineage"][-1]["init_from"] == "checkpoints/en-de"
    assert "(1 - w) x checkpoints/en-de + w" in text["MODEL_CARD.md"]
    assert json.loads(text["eval_test.json"])["checkpoint"] == str(target.resolve())
    assert sorted(done["renamed"]) == ["MODEL_CARD.md", "config.json", "eval_dev.json", "eval_test.json"]


def test_a_plain_candidate_that_beats_ships(repo):
    chosen = _judged(repo["cache"] / "out", repo["copy"], interp=False)
    assert chosen.name == "candidate"
    shipping.ship_judged(chosen, repo["target"], repo["repo"])
    assert (repo["target"] / "model.safetensors").read_bytes() == b"child-avg"


@pytest.mark.parametrize("case, message", [
    ("no verdict", "has no verdict"), ("lost", "did not beat"), ("no card", "no model card"),
    ("target moved", "whose weights are not"), ("other folder", "does not judge")])
def test_refusals_write_nothing(repo, case, message):
    out = repo["cache"] / "out"
    chosen = _judged(out, repo["copy"], beats=case != "lost", card=1 if case == "no card" else 0)
    if case == "no verdict":
        (out / "verdict.json").unlink()
    if case == "target moved":  # the target was replaced after the verdict (another candidate shipped)
        (repo["target"] / "model.safetensors").write_bytes(b"someone else's")
    if case == "other folder":
        chosen = _checkpoint(out / "interp-0.25", b"x", repo["copy"])  # beside the verdict, but not what it judged
    before = _digest(repo["target"])
    with pytest.raises(shipping.ShipRefused, match=message):
        shipping.ship_judged(chosen, repo["target"], repo["repo"])
    assert _digest(repo["target"]) == before


def test_a_climb_is_followed_back_to_the_target(repo):
    """Round 1 beat the copy of the target; round 2 started from round 1's winner and beat it: round 2 ships, its
    verdict chain ending at the target's weights. A broken link (round 1 lost after all) refuses it."""
    first = _judged(repo["cache"] / "out", repo["copy"], weights=b"round 1")
    second = _judged(repo["cache"] / "out-seed8", first, interp=False, weights=b"round 2")
    done = shipping.ship_judged(second, repo["target"], repo["repo"], dry_run=True)
    assert [link["candidate"] for link in done["chain"]] == [second, first]
    assert (repo["target"] / "model.safetensors").read_bytes() == b"parent" and done["renamed"] == []  # dry run
    shipping.ship_judged(second, repo["target"], repo["repo"])
    assert (repo["target"] / "model.safetensors").read_bytes() == b"round 2-avg"
    # round 2 names round 1 (an unshipped folder) as its parent: that path is true and stays
    assert str(first) in (repo["target"] / "MODEL_CARD.md").read_text()

    verdict = json.loads((repo["cache"] / "out" / "verdict.json").read_text())
    verdict["interpolation"]["beats"] = False
    (repo["cache"] / "out" / "verdict.json").write_text(json.dumps(verdict))
    (repo["target"] / "model.safetensors").write_bytes(b"parent")
    with pytest.raises(shipping.ShipRefused, match="did not beat"):
        shipping.ship_judged(second, repo["target"], repo["repo"])


def test_an_older_verdict_is_matched_by_its_evaluations_sha(repo):
    """Verdicts written before session 29 hold no shipped_sha256: the folder judged against, else (when that copy
    is gone) the model_sha256 its development-set evaluation recorded, says which weights were judged."""
    chosen = _judged(repo["cache"] / "out", repo["copy"], record_sha=False)
    sha = hashlib.sha256(b"parent").hexdigest()
    sets = {n: {"sha256": d} for n, d in devset_digests(DEVSETS).items()}
    (repo["copy"] / "eval_dev.json").write_text(json.dumps({"model_sha256": sha, "sets": sets}))
    assert shipping.judged_chain(chosen, repo["target"])[0]["against_sha256"] == sha
    (repo["copy"] / "model.safetensors").unlink()
    assert shipping.judged_chain(chosen, repo["target"])[0]["against_sha256"] == sha
    (repo["copy"] / "eval_dev.json").write_text(json.dumps({"model_sha256": "another", "sets": sets}))
    with pytest.raises(shipping.ShipRefused, match="whose weights are not"):
        shipping.judged_chain(chosen, repo["target"])


def test_a_verdict_on_other_development_sets_than_todays_is_refused(repo, tmp_path):
    """A background run judges on the sets of the code it started with; when a set has changed since (session 39 grew
    the classic set while a chain was running), its verdict says nothing about today's sets: refused, naming the set,
    and nothing written. The same verdict ships when the sets it names are today's (a copy of the sets with the
    classic file edited stands for the repository after the edit)."""
    import shutil

    chosen = _judged(repo["cache"] / "out", repo["copy"])
    edited = tmp_path / "devsets"
    shutil.copytree(DEVSETS, edited)
    with (edited / "classic.tsv").open("a", encoding="utf-8") as f:
        f.write("The ship sails at dawn.\tDas Schiff legt im Morgengrauen ab.\n")
    before = _digest(repo["target"])
    with pytest.raises(shipping.ShipRefused, match=r"another version of the development set\(s\) classic\.tsv than"):
        shipping.ship_judged(chosen, repo["target"], repo["repo"], devsets=edited)
    assert _digest(repo["target"]) == before
    shipping.ship_judged(chosen, repo["target"], repo["repo"], devsets=DEVSETS)  # judged on these: ships
    assert (repo["target"] / "model.safetensors").read_bytes() == b"child"


def test_a_verdict_that_cannot_name_its_development_sets_is_refused(repo):
    """An old verdict without ``devsets`` whose shipped-side evaluation is gone (or names no sets) cannot say what
    it was judged on: refused rather than trusted."""
    chosen = _judged(repo["cache"] / "out", repo["copy"])
    path = repo["cache"] / "out" / "verdict.json"
    report = json.loads(path.read_text())
    del report["devsets"]
    path.write_text(json.dumps(report))
    before = _digest(repo["target"])
    with pytest.raises(shipping.ShipRefused, match="does not say which development sets"):
        shipping.ship_judged(chosen, repo["target"], repo["repo"])
    assert _digest(repo["target"]) == before


def test_cli_says_what_it_did_and_refuses_with_exit_2(repo, capsys):
    chosen = _judged(repo["cache"] / "out", repo["copy"])
    before = _digest(repo["target"])
    assert shipping.cli_main([str(chosen), "--to", str(repo["target"]), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would ship" in out and "test: chrF 20.000 -> 21.000" in out and _digest(repo["target"]) == before
    assert shipping.cli_main([str(repo["cache"] / "out" / "candidate"), "--to", str(repo["target"])]) == 2
    assert "did not beat" in capsys.readouterr().err and _digest(repo["target"]) == before
    assert shipping.cli_main([str(chosen), "--to", str(repo["target"])]) == 0
    assert "shipped" in capsys.readouterr().out and (repo["target"] / "model.safetensors").read_bytes() == b"child"


def test_rename_leaves_a_path_json_would_escape(tmp_path):
    parent = tmp_path / 'odd"name'
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "MODEL_CARD.md").write_text(f"from {parent}\n")
    assert shipping.rename_parent(folder, parent, "checkpoints/en-de") == []
    assert (folder / "MODEL_CARD.md").read_text() == f"from {parent}\n"
