"""aiayn.training.soup / ``aiayn soup``: model soups (Wortsman et al. 2022), the mean of several fine-tunes of one model
(uniform), or the ones a held-out score keeps (greedy, Recipe 1), with a meta that the model card and lineage state."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch

from aiayn.checkpoint import load_checkpoint
from aiayn.training import soup as soup_mod
from aiayn.training.soup import greedy_soup, soup
from tiny_models import make_tiny_checkpoint


@pytest.fixture()
def three(tmp_path, tiny_spm):
    out = []
    for seed, step in ((1, 300), (2, 300), (3, 300)):
        c = make_tiny_checkpoint(tmp_path / f"seed{seed}", tiny_spm, "en-de", seed=seed)
        config = json.loads((c / "config.json").read_text())
        config["meta"].update(step=step, lineage=[{"run": "runs/parent", "steps": 1000},
                                                  {"run": f"runs/seed{seed}", "steps": step}])
        (c / "config.json").write_text(json.dumps(config))
        (c / "metrics.jsonl").write_text(f'{{"step": {step}, "seed": {seed}}}\n')
        out.append(c)
    return out


def _state(path):
    return load_checkpoint(path)[0].state_dict()


def test_the_uniform_soup_is_the_mean_of_every_tensor(three, tmp_path):
    out = soup(three, tmp_path / "soup", record={"method": "uniform"})
    states = [_state(p) for p in three]
    mine, config = load_checkpoint(out)
    for key, value in mine.state_dict().items():
        want = sum(s[key].double() for s in states) / 3
        assert torch.equal(value, want.float().half().float()), key  # stored in the ingredients' float16
    assert not torch.equal(states[0]["embedding.weight"], states[1]["embedding.weight"])  # they really differ
    meta = config["meta"]
    assert [i["path"] for i in meta["soup"]["ingredients"]] == [str(p) for p in three]
    assert meta["soup"]["method"] == "uniform" and config["dtype"] == "float16"
    assert (out / "metrics.jsonl").read_text() == (three[0] / "metrics.jsonl").read_text()
    assert (out / "spm.model").read_bytes() == (three[0] / "spm.model").read_bytes()
    # one ingredient alone is itself
    alone = _state(soup(three[:1], tmp_path / "alone"))
    assert all(torch.equal(v, states[0][k]) for k, v in alone.items())


def test_the_lineage_and_the_card_say_the_weights_are_a_soup(three, tmp_path):
    from aiayn.evaluation.modelcard import render_card

    out = soup(three, tmp_path / "soup", record={"method": "uniform"})
    meta = load_checkpoint(out)[1]["meta"]
    first, last = meta["lineage"]
    assert first == {"run": "runs/parent", "steps": 1000} and last["run"] == "runs/seed1"
    assert "mean of this run's and 2 other fine-tune(s)" in last["note"] and "seed2" in last["note"] and "seed3" in last["note"]
    [weights] = [line for line in render_card(out, None, None, [], "CPU").splitlines() if line.startswith("- Weights:")]
    assert "mean of 3 such checkpoints" in weights and "seed2" in weights and "model soup" in weights
    [plain] = [line for line in render_card(three[0], None, None, [], "CPU").splitlines() if line.startswith("- Weights:")]
    assert "soup" not in plain


def test_ingredients_of_other_models_or_named_twice_are_refused(three, tmp_path, tiny_spm):
    other = make_tiny_checkpoint(tmp_path / "other", tiny_spm, "en-de", n_layers=1)
    with pytest.raises(ValueError, match="one model shape .*n_layers"):
        soup([three[0], other], tmp_path / "x")
    foreign = tmp_path / "foreign"
    shutil.copytree(three[1], foreign)
    (foreign / "spm.model").write_bytes((foreign / "spm.model").read_bytes() + b"x")
    with pytest.raises(ValueError, match="SentencePiece"):
        soup([three[0], foreign], tmp_path / "x")
    with pytest.raises(ValueError, match="named twice"):
        soup([three[0], three[1], three[0]], tmp_path / "x")
    with pytest.raises(FileNotFoundError, match="not a checkpoint folder"):
        soup([three[0], tmp_path / "missing"], tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_a_checkpoint_written_before_a_field_existed_is_still_one_model(three, tmp_path):
    """Session 14's de-en config has no "domain_tags" (the field came later, default ()); its fine-tunes write []:
    the same model, as loading both says."""
    older = tmp_path / "older"
    shutil.copytree(three[0], older)
    config = json.loads((older / "config.json").read_text())
    assert config["model"].pop("domain_tags") == []
    (older / "config.json").write_text(json.dumps(config))
    out = soup([older, three[1]], tmp_path / "x")
    a, b, mix = _state(three[0]), _state(three[1]), _state(out)
    assert all(torch.allclose(mix[k].float(), (a[k].float() + b[k].float()) / 2, atol=1e-3) for k in mix)


def test_the_greedy_soup_keeps_an_ingredient_only_when_the_held_out_score_does_not_fall(three, tmp_path):
    """A scorer that reads the weights each folder really holds: minus the distance to the mean of seeds 1 and 2.
    Alone, seeds 1 and 2 tie (each half the distance between them) and seed 3 is farther; the pot starts with seed 1
    (the given order breaks the tie), seed 2 makes the soup the target itself (kept), seed 3 pulls it away (not)."""
    s1, s2 = _state(three[0]), _state(three[1])
    target = {k: (s1[k].double() + s2[k].double()) / 2 for k in s1}

    def distance(path):
        st = _state(path)
        return -sum(float((st[k].double() - target[k]).pow(2).sum()) for k in st) ** 0.5

    order = [three[2], three[0], three[1]]
    record = greedy_soup(order, tmp_path / "greedy", distance, tmp_path / "work")
    assert record["chosen"] == [str(three[0]), str(three[1])]
    assert [t["kept"] for t in record["trials"]] == [True, False]
    assert record["trials"][1]["ingredients"] == [str(three[0]), str(three[1]), str(three[2])]
    assert record["score"] == max(t["score"] for t in record["trials"]) > max(record["scores"].values())
    out = tmp_path / "greedy"
    mine = _state(out)
    assert all(torch.equal(v, target[k].float().half().float()) for k, v in mine.items())
    assert load_checkpoint(out)[1]["meta"]["soup"]["method"] == "greedy"
    assert not (tmp_path / "work" / "trial").exists()


def test_the_command_line_refuses_bad_input_in_one_line(three, tmp_path, capsys):
    out = tmp_path / "out"
    assert soup_mod.cli_main([*map(str, three), "--out", str(out)]) == 0
    assert "uniform soup of 3" in capsys.readouterr().out and (out / "model.safetensors").is_file()
    before = (out / "model.safetensors").read_bytes()
    for argv, said in (([*map(str, three), "--out", str(out)], "exists"),  # never overwritten
                       ([*map(str, three), "--out", str(tmp_path / "g"), "--greedy"], "give --data"),
                       ([*map(str, three), "--out", str(tmp_path / "g"), "--ship"], "give --judge"),
                       ([*map(str, three), "--out", str(tmp_path / "g"), "--greedy", "--data", str(tmp_path)],
                        "no valid.tsv"),
                       ([str(three[0]), str(tmp_path / "missing"), "--out", str(tmp_path / "m")], "not a checkpoint")):
        assert soup_mod.cli_main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("aiayn soup: ") and said in err and err.count("\n") == 1
    assert (out / "model.safetensors").read_bytes() == before
    assert not (tmp_path / "g").exists() and not (tmp_path / "m").exists()


def test_a_greedy_soup_is_chosen_on_valid_and_judged_like_a_candidate(tmp_path, tiny_data, tiny_spm, capsys):
    """The whole command on the committed fixture data: ingredients scored on the valid split (their own
    eval_valid.json), the soup scored on the test split and the development sets, carded, the verdict written."""
    from test_train_on import _world

    w = _world(tmp_path / "world", tiny_data, tiny_spm, make_tiny_checkpoint)
    lines = (w["data"] / "test.tsv").read_text(encoding="utf-8").splitlines()
    (w["data"] / "test_general.tsv").write_text("\n".join(lines[:4]) + "\n", encoding="utf-8")  # header + 3 pairs
    ingredients = [make_tiny_checkpoint(tmp_path / f"i{s}", tiny_spm, "en-de", seed=s) for s in (5, 6)]
    out = tmp_path / "soup"
    code = soup_mod.cli_main([*map(str, ingredients), "--out", str(out), "--greedy", "--judge", "--data", str(w["data"]),
                              "--shipped", str(w["shipped"]), "--devsets", str(w["dev"]), "--threads", "1"])
    text = capsys.readouterr().out
    assert code == 0, text[-3000:]
    assert all((i / "eval_valid.json").is_file() for i in ingredients)  # each ingredient scored on valid
    report = json.loads((tmp_path / "soup.work" / "verdict.json").read_text())
    assert set(report["scores"]["candidate"]) == {"test", "dev/short", "dev/long", "dev/classic"}
    assert report["devsets"] == {n: hashlib.sha256((w["dev"] / f"{n}.tsv").read_bytes()).hexdigest()
                                 for n in ("short", "long", "classic")}
    assert report["record"]["method"] == "greedy" and len(report["record"]["scores"]) == 2
    assert report["stages"]["card"] == 0 and report["stages"]["general"] == 0
    assert json.loads((out / "eval_test_general.json").read_text())["n_sentences"] == 3
    card = (out / "MODEL_CARD.md").read_text()
    assert "General-sentence test split (`test_general.tsv`, 3 sentences" in card, card
    assert ("greedy soup" in card) is (len(report["record"]["chosen"]) == 2), card
    assert ("the soup beats shipped" in text) is report["beats"]
    assert json.loads((out / "eval_test.json").read_text())["checkpoint"] == str(out.resolve())


def test_a_greedy_soup_that_keeps_only_the_shipped_model_is_not_judged(tmp_path, tiny_data, tiny_spm, monkeypatch,
                                                                       capsys):
    """The pot kept one ingredient, the shipped model itself: its verdict would be the model against itself."""
    from test_train_on import _world

    w = _world(tmp_path / "world", tiny_data, tiny_spm, make_tiny_checkpoint)
    other = make_tiny_checkpoint(tmp_path / "i5", tiny_spm, "en-de", seed=5)
    monkeypatch.setattr(soup_mod, "valid_scorer", lambda data, direction: lambda p: 50.0 if p == w["shipped"] else 10.0)
    out = tmp_path / "soup"
    code = soup_mod.cli_main([str(other), str(w["shipped"]), "--out", str(out), "--greedy", "--judge", "--data",
                              str(w["data"]), "--shipped", str(w["shipped"]), "--devsets", str(w["dev"])])
    text = capsys.readouterr().out
    assert code == 0 and "nothing to judge" in text, text[-2000:]
    report = json.loads((tmp_path / "soup.work" / "verdict.json").read_text())
    assert report["same_weights_as_shipped"] and report["record"]["chosen"] == [str(w["shipped"])]
    assert not (out / "eval_test.json").exists() and not (tmp_path / "soup.work" / "shipped").exists()
    assert soup_mod.same_weights(out, w["shipped"]) and not soup_mod.same_weights(out, other)


@pytest.mark.parametrize("beats", [True, False])
def test_ship_copies_only_a_soup_that_beats(tmp_path, tiny_data, tiny_spm, monkeypatch, capsys, beats):
    """Scores mocked (a soup of random tiny models beats nothing on purpose); everything else is real: the card,
    and for a soup that beats the alignment, attribution and head sweep, then the copy over the shipped folder."""
    import hashlib

    from aiayn.evaluation.devsets import SET_NAMES
    from aiayn.training import continuous
    from test_train_on import _world

    w = _world(tmp_path / "world", tiny_data, tiny_spm, make_tiny_checkpoint)
    # named as train-on names its candidates: the last two parts alike, so the card must name them by more
    ingredients = [make_tiny_checkpoint(tmp_path / f"on-{s}" / "en-de" / "candidate", tiny_spm, "en-de", seed=s)
                   for s in (5, 6)]
    out = tmp_path / "soup"
    low = {"test": {"bleu": 1.0, "chrf": 20.0}, **{f"dev/{n}": {"bleu": 1.0, "chrf": 20.0} for n in SET_NAMES}}
    high = {k: {"bleu": 1.0, "chrf": 21.0 if beats else 19.0} for k in low}

    # the evaluations are real (the files a shipped folder carries), the scores the verdict compares are not
    monkeypatch.setattr(continuous, "eval_scores", lambda evals, direction: high if evals["dev"].parent == out else low)
    before = hashlib.sha256((w["shipped"] / "model.safetensors").read_bytes()).hexdigest()
    code = soup_mod.cli_main([*map(str, ingredients), "--out", str(out), "--judge", "--ship", "--data", str(w["data"]),
                              "--shipped", str(w["shipped"]), "--devsets", str(w["dev"]), "--threads", "1"])
    text = capsys.readouterr().out
    assert code == 0, text[-3000:]
    after = hashlib.sha256((w["shipped"] / "model.safetensors").read_bytes()).hexdigest()
    card = (out / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert "`on-5/en-de/candidate`, `on-6/en-de/candidate`" in card, card  # each ingredient told apart
    assert "`aiayn soup`" in card and "no training" in card and "aiayn train-on" not in card, card  # nothing trained
    if beats:
        assert "shipped: copied" in text and after == hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
        assert {"MODEL_CARD.md", "alignment.json", "attribution.json", "head_sweep.json"} <= {p.name for p in w["shipped"].iterdir()}
        assert load_checkpoint(w["shipped"])[1]["meta"]["soup"]["method"] == "uniform"
    else:
        assert "not shipped" in text and after == before


def test_a_soup_of_one_is_that_checkpoint_judged_as_it_is(tmp_path, tiny_data, tiny_spm, monkeypatch, capsys):
    """`aiayn soup X --judge` on one folder judges X (e.g. a candidate made elsewhere): its weights unchanged, and
    its card tells no soup and keeps the hardware of X's last run, not "aiayn soup, no training"."""
    from aiayn.evaluation.devsets import SET_NAMES
    from aiayn.training import continuous
    from test_train_on import _world

    w = _world(tmp_path / "world", tiny_data, tiny_spm, make_tiny_checkpoint)
    one = make_tiny_checkpoint(tmp_path / "on-7" / "en-de" / "interp-0.5", tiny_spm, "en-de", seed=7)
    config = json.loads((one / "config.json").read_text())
    config["meta"]["lineage"] = [{"run": "runs/en-de-7", "direction": "en-de", "steps": 400, "train_tokens": 9000,
                                  "wall_time_s": 60.0, "hardware": "CPU Testium (2 logical cores), 1 thread(s)"}]
    (one / "config.json").write_text(json.dumps(config))
    out = tmp_path / "judged"
    scores = {"test": {"bleu": 1.0, "chrf": 20.0}, **{f"dev/{n}": {"bleu": 1.0, "chrf": 20.0} for n in SET_NAMES}}
    monkeypatch.setattr(continuous, "eval_scores", lambda evals, direction: scores)
    code = soup_mod.cli_main([str(one), "--out", str(out), "--judge", "--data", str(w["data"]), "--shipped",
                              str(w["shipped"]), "--devsets", str(w["dev"]), "--threads", "1"])
    assert code == 0, capsys.readouterr().out[-3000:]
    card = (out / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert "`en-de/interp-0.5` as it is" in card and "model soup" not in card, card
    [hardware] = [line for line in card.splitlines() if line.startswith("- Hardware:")]
    assert "CPU Testium (2 logical cores)" in hardware and "no training" not in hardware, hardware
    mine, theirs = load_checkpoint(one)[0].state_dict(), load_checkpoint(out)[0].state_dict()
    assert all(torch.equal(v, mine[k]) for k, v in theirs.items())
