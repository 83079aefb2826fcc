"""aiayn.training.export.interpolate / ``aiayn interpolate``: the weight interpolation ``(1 - w) A + w B`` of two
checkpoints of one model (WiSE-FT, Wortsman et al. 2022), with B's other files and a meta the model card states."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from aiayn.checkpoint import load_checkpoint
from aiayn.training.export import interpolate, interpolate_cli_main
from tiny_models import make_tiny_checkpoint


@pytest.fixture()
def pair(tmp_path, tiny_spm):
    a = make_tiny_checkpoint(tmp_path / "a", tiny_spm, "en-de", seed=1)
    b = make_tiny_checkpoint(tmp_path / "b", tiny_spm, "en-de", seed=2)
    config = json.loads((b / "config.json").read_text())
    config["meta"].update(step=300, averaged_states=["step_00000250", "step_00000300"])
    (b / "config.json").write_text(json.dumps(config))
    (b / "metrics.jsonl").write_text('{"step": 300, "valid_loss": 2.5}\n')
    config = json.loads((a / "config.json").read_text())
    config["meta"]["step"] = 1000
    (a / "config.json").write_text(json.dumps(config))
    return a, b


def test_each_tensor_is_the_weighted_sum_and_b_keeps_its_files(pair, tmp_path):
    a, b = pair
    out = interpolate(a, b, tmp_path / "out", weight=0.25)
    (ma, _), (mb, _), (mo, config) = load_checkpoint(a), load_checkpoint(b), load_checkpoint(out)
    sa, sb = ma.state_dict(), mb.state_dict()
    for key, value in mo.state_dict().items():
        want = 0.75 * sa[key] + 0.25 * sb[key]
        assert torch.allclose(value, want.half().float(), atol=0, rtol=0), key  # stored in B's float16
    assert not torch.equal(sa["embedding.weight"], sb["embedding.weight"])  # the two really differ
    assert config["dtype"] == "float16" and (out / "spm.model").read_bytes() == (b / "spm.model").read_bytes()
    assert (out / "metrics.jsonl").read_text() == (b / "metrics.jsonl").read_text()
    meta = config["meta"]
    assert meta["step"] == 300 and meta["direction"] == "en-de"
    assert meta["interpolation"]["weight"] == 0.25 and meta["interpolation"]["a"]["step"] == 1000
    for w, same in ((0.0, a), (1.0, b)):  # the ends are the two checkpoints themselves
        end, _ = load_checkpoint(interpolate(a, b, tmp_path / f"w{w}", weight=w))
        mine = load_checkpoint(same)[0].state_dict()
        assert all(torch.equal(v, mine[k]) for k, v in end.state_dict().items())


def test_the_model_card_states_the_interpolation(pair, tmp_path):
    from aiayn.evaluation.modelcard import render_card

    a, b = pair
    out = interpolate(a, b, tmp_path / "out", weight=0.5)
    [weights] = [line for line in render_card(out, None, None, [], "CPU").splitlines() if line.startswith("- Weights:")]
    assert "0.5 x `" in weights and "(step 1,000) + 0.5 x this average" in weights and "WiSE-FT" in weights
    [plain] = [line for line in render_card(b, None, None, [], "CPU").splitlines() if line.startswith("- Weights:")]
    assert "WiSE-FT" not in plain


def test_two_different_models_a_bad_weight_or_a_missing_file_are_one_line_errors(pair, tmp_path, tiny_spm, capsys):
    a, b = pair
    other = make_tiny_checkpoint(tmp_path / "other", tiny_spm, "en-de", n_layers=1)
    with pytest.raises(ValueError, match="one model shape .*n_layers"):
        interpolate(a, other, tmp_path / "x", weight=0.5)
    foreign = tmp_path / "foreign"
    shutil.copytree(b, foreign)
    (foreign / "spm.model").write_bytes((foreign / "spm.model").read_bytes() + b"x")
    with pytest.raises(ValueError, match="SentencePiece"):
        interpolate(a, foreign, tmp_path / "x", weight=0.5)
    for weight in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"in \[0, 1\]"):
            interpolate(a, b, tmp_path / "x", weight=weight)
    assert not (tmp_path / "x").exists()
    assert interpolate_cli_main([str(a), str(tmp_path / "missing"), str(tmp_path / "y"), "--weight", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aiayn interpolate: ") and err.count("\n") == 1 and "Traceback" not in err
    assert interpolate_cli_main([str(a), str(b), str(tmp_path / "z"), "--weight", "0.3"]) == 0
    assert "0.7 x" in capsys.readouterr().out and (tmp_path / "z" / "model.safetensors").is_file()


def test_a_descendant_with_tags_added_interpolates_with_its_untagged_parent(pair, tmp_path, tiny_spm):
    """B warm-started from A with domain tags (train-on --interpolate met this at session 20's judge: the two were
    refused as "different shapes" naming no field). A counts with each tag row equal to its start piece's, so w = 0
    gives A's weights with those rows; a tagged A against an untagged B, or other tags, stay refused by name."""
    a, _ = pair
    tagged = make_tiny_checkpoint(tmp_path / "tagged", tiny_spm, "en-de", seed=5, domain_tags=["general", "software"],
                                  domain="general")
    ma, (mb, _) = load_checkpoint(a)[0], load_checkpoint(tagged)
    (mo, config) = load_checkpoint(interpolate(a, tagged, tmp_path / "half", weight=0.5))
    V, bos = ma.cfg.vocab_size, ma.cfg.bos_id
    ea, eb, eo = ma.embedding.weight, mb.embedding.weight, mo.embedding.weight
    assert config["model_config"].domain_tags == ("general", "software") and eo.shape[0] == V + 2
    assert torch.allclose(eo[:V], (0.5 * ea + 0.5 * eb[:V]).half().float(), atol=0, rtol=0)
    assert torch.allclose(eo[V:], (0.5 * ea[bos] + 0.5 * eb[V:]).half().float(), atol=0, rtol=0)
    w0 = load_checkpoint(interpolate(a, tagged, tmp_path / "w0", weight=0.0))[0]
    assert torch.equal(w0.embedding.weight[V:], ea[bos].half().float().expand(2, -1))
    with pytest.raises(ValueError, match="one model shape .*domain_tags"):
        interpolate(tagged, a, tmp_path / "x", weight=0.5)
    other = make_tiny_checkpoint(tmp_path / "other", tiny_spm, "en-de", seed=6, n_layers=1, domain_tags=["general", "x"])
    with pytest.raises(ValueError, match="one model shape .*n_layers"):
        interpolate(a, other, tmp_path / "y", weight=0.5)


def test_the_lineage_notes_the_interpolation_on_its_last_run(pair, tmp_path):
    """The Model and training page's lineage lists runs; the last one's note must say its weights were mixed with A
    (named by folder and lifetime step), kept after a note the run already had."""
    a, b = pair
    for folder, lineage in ((a, [{"run": "runs/a", "steps": 700}, {"run": "runs/a2", "steps": 500}]),
                            (b, [{"run": "runs/a", "steps": 700}, {"run": "runs/b", "steps": 300, "note": "seed 22"}])):
        config = json.loads((folder / "config.json").read_text())
        config["meta"]["lineage"] = lineage
        (folder / "config.json").write_text(json.dumps(config))
    meta = load_checkpoint(interpolate(a, b, tmp_path / "out", weight=0.25))[1]["meta"]
    first, last = meta["lineage"]
    assert first == {"run": "runs/a", "steps": 700} and last["run"] == "runs/b" and last["steps"] == 300
    assert last["note"].startswith("seed 22; the weights are the interpolation 0.75 x ")
    assert f"{a.parent.name}/{a.name} (lifetime step 1,200) + 0.25 x this run's" in last["note"]
    # B's own files are untouched: only the output's lineage says it
    assert json.loads((b / "config.json").read_text())["meta"]["lineage"][-1]["note"] == "seed 22"


def test_a_search_keeps_the_weight_best_on_the_valid_split(pair, tiny_data, tmp_path, capsys):
    """Several weights: each is written and scored on the data's valid split, the best one (ties: nearer 0.5) is
    kept as OUT with the scores beside it, and no other weight's folder is left behind."""
    from aiayn.training.continuous import valid_chrf

    a, b = pair
    out = tmp_path / "found" / "best"
    assert interpolate_cli_main([str(a), str(b), str(out), "--weight", "0.75,0.25,0.5", "--data", str(tiny_data)]) == 0
    found = json.loads((out / "interpolation_search.json").read_text())
    chrf = {float(w): c for w, c in found["valid_chrf"].items()}
    assert sorted(chrf) == [0.25, 0.5, 0.75] and found["split"] == "valid" and found["direction"] == "en-de"
    best = max(chrf, key=lambda w: (chrf[w], -abs(w - 0.5)))
    assert found["weight"] == best and found["checkpoint"] == str(out)
    want = load_checkpoint(interpolate(a, b, tmp_path / "want", weight=best))[0].state_dict()
    got = load_checkpoint(out)[0].state_dict()
    assert all(torch.equal(v, want[k]) for k, v in got.items())
    other = next(w for w in chrf if w != best)  # each score is its own weight's, not the chosen one's
    assert valid_chrf(interpolate(a, b, tmp_path / "other", weight=other), tiny_data, "en-de") == pytest.approx(chrf[other])
    assert [p.name for p in (tmp_path / "found").iterdir()] == ["best"]
    assert f"w = {best:g}" in capsys.readouterr().out


def test_a_search_is_refused_in_one_line_before_anything_is_written(pair, tiny_data, tmp_path, capsys):
    a, b = pair
    out = tmp_path / "out"
    for argv, says in ((["--weight", "0.25,0.5"], "need --data DIR"),
                       (["--weight", "0.25,x", "--data", str(tiny_data)], "separated by commas"),
                       (["--weight", "0.25,1.5", "--data", str(tiny_data)], "in [0, 1]"),
                       (["--weight", "0.5,0.5", "--data", str(tiny_data)], "two different weights"),
                       (["--weight", "0.25,0.5", "--data", str(tmp_path)], "has no valid.tsv")):
        assert interpolate_cli_main([str(a), str(b), str(out)] + argv) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, argv
        assert not out.exists()
    out.mkdir()  # an existing folder is never replaced
    assert interpolate_cli_main([str(a), str(b), str(out), "--weight", "0.25,0.5", "--data", str(tiny_data)]) == 2
    assert "already exists" in capsys.readouterr().err and list(out.iterdir()) == []
