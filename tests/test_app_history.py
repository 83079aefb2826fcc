"""The explorer's "Across training" tab (AppTest against tiny checkpoints, one of them carrying an attention
history recorded here at three steps with other weights at each): the slider picks the step, the map is the
recorded one, the URL restores the view, and a checkpoint without a history says so."""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from aiayn.training.history import AttentionRecorder, load_history

from app_pages import arr, charts, open_page

PAGE = "pages/2_Attention_Explorer.py"
STEPS = (0, 10, 20)


def run(query=None, tab=None):
    return open_page(PAGE, query, tab=tab)


@pytest.fixture(scope="module")
def history_checkpoints(tiny_checkpoints, tiny_translator, tmp_path_factory) -> Path:
    """The tiny checkpoints, en-de with a history of 3 steps (the weights perturbed between steps)."""
    root = tmp_path_factory.mktemp("with_history")
    shutil.copytree(tiny_checkpoints, root, dirs_exist_ok=True)
    model = copy.deepcopy(tiny_translator.model)
    rec = AttentionRecorder(tiny_translator.tokenizer, "en-de", max_len=model.cfg.max_len, n_sentences=3)
    gen = torch.Generator().manual_seed(0)
    for step in STEPS:
        rec.record(root / "en-de", model, step)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    # de-en: a history too (with the en-de weights: only its sentences matter here)
    rec_de = AttentionRecorder(tiny_translator.tokenizer, "de-en", max_len=model.cfg.max_len, n_sentences=2)
    for step in (0, 7):
        rec_de.record(root / "de-en", model, step)
    return root


def z_of(spec: dict) -> np.ndarray:
    return arr(spec["data"][0]["z"])


def test_slider_scrubs_the_recorded_steps(history_checkpoints, serve):
    serve(history_checkpoints)
    h = load_history(history_checkpoints / "en-de")
    at = run(tab="history")
    assert not at.exception, at.exception
    slider = at.select_slider(key="tstep")
    assert list(slider.options) == [str(s) for s in STEPS] and slider.value == "20"  # the last step by default
    c = charts(at)
    assert {"history_map", "history_strip", "history_entropy"} <= set(c)
    # default view: cross-attention, last layer, mean over heads, first recorded sentence
    expect = {s: h.stack(0, "cross")[h.step_index(s), -1].mean(0) for s in STEPS}
    np.testing.assert_allclose(z_of(c["history_map"]), expect[20], atol=1e-5)
    s0 = h.sentences[0]
    assert c["history_map"]["data"][0]["x"][-1] == f"{len(s0.src_tokens) - 1}:&lt;/s&gt;"
    assert c["history_map"]["data"][0]["y"][0] == f"0:&lt;s&gt;→{s0.output_tokens[0]}"
    at = slider.set_value("0").run()
    assert not at.exception, at.exception
    z0 = z_of(charts(at)["history_map"])
    np.testing.assert_allclose(z0, expect[0], atol=1e-5)
    assert np.abs(z0 - expect[20]).max() > 1e-3  # the map changed with the step
    assert at.query_params["tstep"] == "0"  # the step is in the URL
    # the strip shows every step (3 <= 8), each one its recorded map
    strip = charts(at)["history_strip"]["data"]
    assert len(strip) == 3
    for trace, s in zip(strip, STEPS):
        np.testing.assert_allclose(z_of({"data": [trace]}), expect[s], atol=1e-5)


def test_url_restores_sentence_kind_layer_head_and_step(history_checkpoints, serve):
    serve(history_checkpoints)
    h = load_history(history_checkpoints / "en-de")
    src = h.sentences[2].source
    at = run({"tsent": src, "tstep": "10", "kind": "encoder", "layer": "1", "head": "3"}, tab="history")
    assert not at.exception, at.exception
    assert at.selectbox(key="tsent").value == src and at.select_slider(key="tstep").value == "10"
    np.testing.assert_allclose(z_of(charts(at)["history_map"]), h.stack(2, "encoder")[1, 0, 2], atol=1e-5)
    # the entropy curve is the mean row entropy of the recorded maps, step by step
    y = arr(charts(at)["history_entropy"]["data"][0]["y"])
    w = h.stack(2, "encoder")[:, 0, 2].astype(np.float64)
    ent = np.where(w > 0, -w * np.log2(np.where(w > 0, w, 1)), 0).sum(-1).mean(-1)
    np.testing.assert_allclose(y.ravel(), ent, atol=1e-5)


def test_bad_step_in_the_url_is_reported(history_checkpoints, serve):
    serve(history_checkpoints)
    at = run({"tstep": "15"}, tab="history")
    assert not at.exception
    assert any("tstep" in w.value and "0, 10, 20" in w.value for w in at.warning)


def test_checkpoint_without_history_says_so(tiny_checkpoints, serve):
    serve(tiny_checkpoints)
    at = run(tab="history")
    assert not at.exception, at.exception
    assert any("trained before the attention history was recorded" in i.value for i in at.info)
    assert "history_map" not in charts(at) and not at.get("select_slider")


def test_switching_direction_keeps_the_tab_working(history_checkpoints, serve):
    """A sentence picked in en-de is not one of de-en's: the tab falls back to de-en's first sentence."""
    serve(history_checkpoints)
    h_de = load_history(history_checkpoints / "de-en")
    at = run({"tsent": load_history(history_checkpoints / "en-de").sentences[1].source}, tab="history")
    assert not at.exception, at.exception
    at = at.select_slider(key="tstep").set_value("10").run()  # a step de-en's history does not have
    at.radio(key="direction").set_value("de-en")
    at = at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="tsent").value == h_de.sentences[0].source
    assert h_de.steps == [0, 7] and list(at.select_slider(key="tstep").options) == ["0", "7"]
    assert at.select_slider(key="tstep").value == "7"  # its last step
    np.testing.assert_allclose(z_of(charts(at)["history_map"]), h_de.stack(0, "cross")[1, -1].mean(0), atol=1e-5)


def test_a_warm_started_history_counts_lifetime_steps_and_the_entropy_title_fits_the_curve(history_checkpoints, serve,
                                                                                            tmp_path):
    """A checkpoint whose lineage says its last run started from a trained parent at lifetime step 8,000: the tab
    says so and shows lifetime steps (the URL keeps the run's own); the entropy title names the curve's direction."""
    import json

    root = tmp_path / "ckpts"
    shutil.copytree(history_checkpoints, root)
    cfg = json.loads((root / "en-de" / "config.json").read_text())
    cfg.setdefault("meta", {})["lineage"] = [
        {"run": "runs/a", "direction": "en-de", "init_from": None, "steps": 8000, "train_tokens": 1, "wall_time_s": 1.0},
        {"run": "runs/b", "direction": "en-de", "init_from": "checkpoints/en-de", "steps": 20, "train_tokens": 1,
         "wall_time_s": 1.0}]
    (root / "en-de" / "config.json").write_text(json.dumps(cfg))
    serve(root)
    at = run({"tstep": "8010"}, tab="history")  # the URL holds the lifetime step too
    assert not at.exception, at.exception
    assert list(at.select_slider(key="tstep").options) == ["8000", "8010", "8020"]
    assert at.select_slider(key="tstep").value == "8010" and at.query_params["tstep"] == "8010"
    assert any("starts from a trained parent" in c.value and "lifetime step 8,000" in c.value for c in at.caption)
    c = charts(at)
    assert c["history_map"]["layout"]["title"]["text"].endswith("step 8,010")
    assert [a["text"] for a in c["history_strip"]["layout"]["annotations"]][:3] == [
        "step 8,000 (parent)", "▶ step 8,010", "step 8,020"]
    ent = c["history_entropy"]
    y = arr(ent["data"][0]["y"]).ravel()
    assert list(arr(ent["data"][0]["x"]).ravel()) == [8000, 8010, 8020]
    title = ent["layout"]["title"]["text"]
    direction = "rose" if y[-1] > y[0] else "fell"
    assert f"{direction} from {y[0]:.2f} to {y[-1]:.2f} bits" in title or "stayed at about" in title
    assert "falls as the map focuses" not in title
    # the same history without a lineage: run steps, no parent
    serve(history_checkpoints)
    plain = run({"tstep": "10"}, tab="history")
    assert charts(plain)["history_map"]["layout"]["title"]["text"].endswith("step 10")
    assert not any("trained parent" in c.value for c in plain.caption)
