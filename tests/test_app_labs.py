"""AppTest of the lab pages (3-6): they render on the tiny checkpoints, every main control changes what the
charts hold (read from the plotly spec), bad input gives a message, URL parameters restore a view.

Pages are reached from the entry script with ``switch_page`` (the sidebar's ``st.page_link`` needs app.py
as the entry point, as in the real server)."""
from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from aiayn import Translator, lessons

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")
PE, MASK, SDP, MODEL = ("pages/3_Positional_Encoding.py", "pages/4_Masking.py", "pages/5_Scaled_Dot_Product.py",
                        "pages/6_Model_and_Training.py")


def open_page(page: str, **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


def _decode(v):
    if isinstance(v, dict) and "bdata" in v:
        arr = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        if "shape" in v:
            arr = arr.reshape([int(s) for s in str(v["shape"]).split(",")])
        return arr
    if isinstance(v, list):
        try:
            return np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            return v
    return v


def chart(at: AppTest, key: str) -> dict:
    """The plotly spec of the chart with element key ``key`` (arrays decoded)."""
    for c in at.get("plotly_chart"):
        if c.proto.id.endswith(f"-{key}"):
            spec = json.loads(c.proto.spec)
            for trace in spec["data"]:
                for f in ("x", "y", "z"):
                    if f in trace:
                        trace[f] = _decode(trace[f])
            return spec
    raise AssertionError(f"no chart with key {key!r}; have {[c.proto.id for c in at.get('plotly_chart')]}")


def keys(at: AppTest) -> set[str]:
    return {c.proto.id.rsplit("-", 1)[-1] for c in at.get("plotly_chart")}


def messages(at: AppTest) -> str:
    return " ".join(str(e.value) for e in list(at.error) + list(at.warning) + list(at.info))


# ----------------------------------------------------------------------------------------------- positional
def test_pe_page_defaults_follow_the_model_and_controls_change_the_table(checkpoints):
    at = open_page(PE)
    assert {"pe_heatmap", "pe_curves", "wavelengths", "similarity", "offset_map", "norms", "layouts"} <= keys(at)
    z = chart(at, "pe_heatmap")["data"][0]["z"]
    assert np.allclose(z, lessons.pe_matrix(64, 64))  # tiny model: d_model 64, max_len 64
    assert "sinusoids" in messages(at) and "learned" in messages(at)  # no learned table shipped
    at.number_input(key="d_model").set_value(32).run()
    at.selectbox(key="layout").set_value("concatenated").run()
    assert not at.exception
    assert np.allclose(chart(at, "pe_heatmap")["data"][0]["z"], lessons.pe_matrix(64, 32, "concatenated"))
    at.text_input(key="dims").set_value("3, 30").run()
    names = [t["name"] for t in chart(at, "pe_curves")["data"]]
    assert len(names) == 2 and names[0].startswith("dim 3 (cos") and names[1].startswith("dim 30 (sin")
    at.number_input(key="k").set_value(9).run()
    off = chart(at, "offset_map")
    assert "k = 9" in json.dumps(off["layout"]["annotations"]) and len(off["data"][1]["x"]) == 64 - 9


def test_pe_page_url_restores_view(checkpoints):
    at = open_page(PE, d_model="16", length="20", layout="concatenated", k="4", dims="1,2")
    assert np.allclose(chart(at, "pe_heatmap")["data"][0]["z"], lessons.pe_matrix(20, 16, "concatenated"))
    assert np.allclose(chart(at, "offset_map")["data"][0]["z"], lessons.pe_offset_map(4, 20, 16).matrix)
    assert len(chart(at, "pe_curves")["data"]) == 2


@pytest.mark.parametrize("params,expect", [
    ({"d_model": "7"}, "d_model must be even"),
    ({"d_model": "100000"}, "d_model must be between"),
    ({"length": "0"}, "length must be between 1 and 2048"),
    ({"length": "5000"}, "length must be between 1 and 2048"),
    ({"k": "500"}, "|k| < length"),
    ({"dims": "1, x"}, "not a whole number"),
    ({"d_model": "abc"}, "Ignored the URL parameter `d_model=abc`"),
])
def test_pe_page_bad_input_gives_a_message(checkpoints, params, expect):
    at = open_page(PE, **params)
    assert expect in messages(at)


# ----------------------------------------------------------------------------------------------- masking
def test_masking_page_stages_follow_layer_and_head(checkpoints):
    at = open_page(MASK)
    assert {"padding", "causal", "pad_row", "combined", "raw", "scaled", "masked", "weights"} <= keys(at)
    assert "future_mass" not in keys(at)
    masked = chart(at, "masked")
    assert any(str(t.get("name", "")).startswith("−∞ (masked)") for t in masked["data"])
    tr = Translator.load(checkpoints / "en-de", device="cpu")
    text = at.text_input(key="text").value
    hyp = tr.translate(text, beam_size=4, return_attention=False)
    src, _, _ = tr.encode_source(text)
    dec_in = [tr.cfg.bos_id] + hyp.output_ids[:-1]
    w00 = chart(at, "weights")["data"][0]["z"]
    assert np.allclose(w00, lessons.decoder_mask_steps(tr.model, src, dec_in, 0, 0).weights, atol=1e-6)
    at.selectbox(key="dec_layer").set_value(2).run()  # numbered from 1 in the app: index 1
    at.selectbox(key="dec_head").set_value(4).run()
    w13 = chart(at, "weights")["data"][0]["z"]
    assert np.allclose(w13, lessons.decoder_mask_steps(tr.model, src, dec_in, 1, 3).weights, atol=1e-6)
    assert not np.allclose(w00, w13)


def test_masking_page_remove_mask_shows_leak(checkpoints):
    at = open_page(MASK, dec_layer="2", dec_head="3", nomask="true", text="good morning", ref="guten Morgen")
    assert at.selectbox(key="dec_layer").value == 2 and at.selectbox(key="dec_head").value == 3
    assert {"future_mass", "unmasked_weights", "p_next"} <= keys(at)
    tr = Translator.load(checkpoints / "en-de", device="cpu")
    src, _, _ = tr.encode_source("good morning")
    target = tr.tokenizer.encode("guten Morgen") + [tr.cfg.eos_id]
    dec_in = [tr.cfg.bos_id] + target[:-1]
    leak = lessons.causal_leak(tr.model, src, dec_in, target)
    assert np.allclose(chart(at, "future_mass")["data"][0]["z"], leak.future_mass.reshape(-1, len(dec_in)), atol=1e-6)
    assert np.allclose(chart(at, "unmasked_weights")["data"][0]["z"], leak.weights_unmasked[1, 2], atol=1e-6)
    at.toggle(key="nomask").set_value(False).run()
    assert "future_mass" not in keys(at)


def test_masking_page_says_the_output_changes_only_when_it_does(checkpoints, monkeypatch):
    """Below the leak, the page compares greedy decoding with and without the look-ahead mask; its sentence says
    "so the output changes" only when the two outputs shown differ: the tiny model writes the same pieces either way
    for this sentence, and an unmasked decoder made to write one piece less must be said to change it."""
    import streamlit as st

    def shown(at):
        table = next(df.value for df in at.dataframe if "greedy output" in df.value.columns)
        said = next(m.value for m in at.markdown if "At **training** time" in m.value)
        return table["pieces"].iloc[0] != table["pieces"].iloc[1], said

    at = open_page(MASK, nomask="true", text="good morning")
    assert not at.exception, at.exception
    differ, said = shown(at)
    assert not differ and "so the output changes" not in said and "writes the same pieces either way" in said

    real = lessons.greedy_with_self_mask
    monkeypatch.setattr(lessons, "greedy_with_self_mask",
                        lambda model, src, causal=True: real(model, src, causal=True)[: None if causal else -1])
    st.cache_data.clear()
    at = open_page(MASK, nomask="true", text="good morning")
    assert not at.exception, at.exception
    differ, said = shown(at)
    assert differ and "so the output changes:" in said and "either way" not in said
    st.cache_data.clear()


def test_masking_page_bad_input(checkpoints):
    at = open_page(MASK, dec_head="9")
    assert "Ignored the URL parameter `dec_head=9`" in messages(at)
    at.text_input(key="text").set_value("   ").run()
    assert not at.exception and "Type a source sentence" in messages(at)
    at = open_page(MASK)
    at.text_area(key="batch").set_value("\n \n").run()
    assert "at least one non-empty sentence" in messages(at)


# ----------------------------------------------------------------------------------------------- scaled dot-product
def test_scaled_page_controls_and_url(checkpoints):
    at = open_page(SDP)
    h = chart(at, "hist")
    assert "d_k = 16" in h["layout"]["title"]["text"]  # the tiny model's d_model / h
    assert np.allclose(h["data"][0]["x"], lessons.random_dot_products(16, 20000, 0))
    at.number_input(key="d_k").set_value(256).run()
    assert np.allclose(chart(at, "hist")["data"][0]["x"], lessons.random_dot_products(256, 20000, 0))
    at = open_page(SDP, d_k="8", scaled="true", n_keys="32", mask="causal")
    h = chart(at, "hist")
    assert np.allclose(h["data"][0]["x"], lessons.random_dot_products(8, 20000, 0) / np.sqrt(8))
    assert "N(0, 1)" == h["data"][1]["name"]
    assert any(str(t.get("name", "")).startswith("−∞ (masked)") for t in chart(at, "m_masked")["data"])
    sharp = chart(at, "sharpness")
    assert sharp["data"][0]["x"].tolist() == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert [s["y0"] for s in sharp["layout"]["shapes"]] == pytest.approx([np.log(32)])  # n_keys from the URL
    assert "Equal to `aiayn.model.attention.scaled_dot_product_attention`" in " ".join(s.value for s in at.success)


def test_scaled_page_steps_match_the_library(checkpoints):
    at = open_page(SDP)
    q = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0]])
    k = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    v = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]])
    ref = lessons.attention_steps(q, k, v)
    assert np.allclose(chart(at, "m_weights")["data"][0]["z"], ref.weights)
    assert np.allclose(chart(at, "m_output")["data"][0]["z"], ref.output)
    at.radio(key="mask").set_value("hide last key").run()
    w = chart(at, "m_weights")["data"][0]["z"]
    assert np.allclose(w[:, -1], 0) and np.allclose(w.sum(1), 1)


@pytest.mark.parametrize("params,expect", [({"d_k": "0"}, "d_k must be between"), ({"d_k": "x"}, "`d_k=x`"),
                                           ({"mask": "sideways"}, "`mask=sideways`")])
def test_scaled_page_bad_input(checkpoints, params, expect):
    assert expect in messages(open_page(SDP, **params))


# ----------------------------------------------------------------------------------------------- model and training
def test_model_page_parameters_and_missing_log(checkpoints):
    at = open_page(MODEL)
    spec = chart(at, "params")
    tr = Translator.load(checkpoints / "en-de", device="cpu")
    loaded = spec["data"][0]
    assert int(np.sum(loaded["y"])) == tr.model.num_parameters()
    assert f"{tr.model.num_parameters():,}" in loaded["name"]
    assert [t["name"].split(" (")[0] for t in spec["data"]][1:] == ["paper base", "paper big"]
    assert "no training log" in messages(at)
    at.toggle(key="logp").set_value(False).run()
    assert chart(at, "params")["layout"]["yaxis"]["type"] == "linear"


def test_model_page_training_curves_and_corrupt_lines(checkpoints, tmp_path, monkeypatch):
    root = tmp_path / "ck"
    shutil.copytree(checkpoints, root)
    lines = [json.dumps({"step": s, "epoch": 0, "train_loss": 10.0 / s, "lr": 1e-4 * s, "tokens_per_s": 1.0,
                         "wall_time": float(s), **({"valid_loss": 3.0, "valid_bleu": 2.5} if s == 20 else {})})
             for s in (10, 20, 30)]
    (root / "en-de" / "metrics.jsonl").write_text("\n".join(lines) + "\n{broken\n")
    (root / "de-en" / "metrics.jsonl").write_text("")
    cfg_path = root / "en-de" / "config.json"  # the run was resumed with another data mix at step 20
    cfg = json.loads(cfg_path.read_text())
    cfg["meta"]["config_changes"] = [{"step": 20, "changed": {"upsample_sentences": [4, 8], "keep": [6, 10]}}]
    cfg_path.write_text(json.dumps(cfg))
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    at = open_page(MODEL)
    spec = chart(at, "curves")
    curves = {t["name"]: t for t in spec["data"]}
    assert curves["train loss (label-smoothed)"]["y"].tolist() == [1.0, 0.5, 10.0 / 30]
    assert curves["valid BLEU"]["x"].tolist() == [20]
    assert "skipped 1 unreadable line" in messages(at)
    assert [sh["x0"] for sh in spec["layout"]["shapes"]] == [20, 20, 20]  # a dotted line in each panel
    assert "step 20: upsample_sentences 4 -> 8" in " ".join(c.value for c in at.caption)
    assert "keep" not in " ".join(c.value for c in at.caption)
    at = open_page(MODEL, direction="de-en")
    assert "empty" in messages(at) and "curves" not in keys(at)


def test_model_page_lr_and_label_smoothing_controls(checkpoints):
    at = open_page(MODEL, warmup="1000", lr_d_model="256", steps="5000", eps="0.2", V="5")
    lr = chart(at, "lr")
    peak = [t for t in lr["data"] if str(t.get("name", "")).startswith("peak")][0]
    assert peak["x"][0] == 1000 and peak["y"][0] == pytest.approx(256**-0.5 * 1000**-0.5)
    assert np.allclose(lr["data"][0]["y"], lessons.lr_schedule(256, 1000, 5000)["lr"])
    target = chart(at, "ls_target")["data"][1]["y"]
    assert np.allclose(target, lessons.smoothed_target(5, 0, 0.2))
    at.number_input(key="eps").set_value(0.0).run()
    assert np.allclose(chart(at, "ls_target")["data"][1]["y"], [1, 0, 0, 0, 0])
    assert "epsilon_ls must be in [0, 1)" in messages(open_page(MODEL, eps="1.5"))
    assert "warmup_steps must be between" in messages(open_page(MODEL, warmup="0"))


# ----------------------------------------------------------------------------------------------- issue 14
def test_pe_sinusoids_default_to_four_dimensions_over_a_short_range(checkpoints):
    """Issue 14: the sinusoid chart drew five dimensions over all 256 positions, a tangle."""
    at = open_page(PE, length="256")
    traces = chart(at, "pe_curves")["data"]
    assert len(traces) == 4  # d_model 64: dimensions 0, 8, 16, 32 (wavelengths ~6, 20, 63, 628)
    assert [t["name"].split(" (")[0] for t in traces] == ["dim 0", "dim 8", "dim 16", "dim 32"]
    pe = lessons.pe_matrix(256, 64)
    for t, d in zip(traces, (0, 8, 16, 32)):
        assert t["x"].tolist() == list(range(101)) and np.allclose(t["y"], pe[:101, d])
    assert at.slider(key="positions").value == (0, 100)
    at.slider(key="positions").set_value((40, 60)).run()
    assert not at.exception
    assert all(t["x"].tolist() == list(range(40, 61)) for t in chart(at, "pe_curves")["data"])
    at.number_input(key="length").set_value(50).run()  # the range is clamped to the shorter table, no error
    assert not at.exception, at.exception
    assert at.slider(key="positions").value == (40, 49)
    assert chart(at, "pe_curves")["data"][0]["x"].tolist() == list(range(40, 50))


def test_pe_sinusoid_range_is_restored_from_the_url_and_bad_values_warn(checkpoints):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["positions"] = ["5", "20"]
    at.query_params["dims"] = "2"
    at.switch_page(PE)
    at.run()
    assert not at.exception, at.exception
    (trace,) = chart(at, "pe_curves")["data"]
    assert trace["x"].tolist() == list(range(5, 21)) and np.allclose(trace["y"], lessons.pe_matrix(64, 64)[5:21, 2])
    for bad in (["5", "999"], ["30", "10"], ["x", "3"], ["7"]):
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params["positions"] = bad
        at.switch_page(PE)
        at.run()
        assert not at.exception, at.exception
        assert "Ignored the URL parameter `positions=" in messages(at), bad
        assert chart(at, "pe_curves")["data"][0]["x"].tolist() == list(range(64))  # the default: 0..63 here
    assert "at most 8 dimensions" in messages(open_page(PE, dims="0,1,2,3,4,5,6,7,8"))


def test_masking_page_counts_layers_and_heads_from_one(checkpoints):
    """Issue 14: the future-mass heatmap read "L0 H0" beside selectors counting from 1."""
    at = open_page(MASK, nomask="true", dec_layer="2", dec_head="3")
    rows = list(chart(at, "future_mass")["data"][0]["y"])
    assert rows[0] == "layer 1 · head 1" and rows[-1] == "layer 2 · head 4" and len(rows) == 2 * 4
    assert "layer 2, head 3" in chart(at, "unmasked_weights")["layout"]["title"]["text"]


def test_model_page_numbers_the_resume_marks_in_the_caption_and_chart(checkpoints, tmp_path, monkeypatch):
    root = tmp_path / "ck"
    shutil.copytree(checkpoints, root)
    lines = [json.dumps({"step": s, "train_loss": 10.0 / s, "lr": 1e-4}) for s in range(10, 101, 10)]
    (root / "en-de" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    cfg_path = root / "en-de" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["meta"]["config_changes"] = [{"step": 60, "changed": {"upsample_sentences": [4, 8]}},
                                     {"step": 50, "changed": {"amp_cpu": [False, True]}}]
    cfg_path.write_text(json.dumps(cfg))
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    at = open_page(MODEL)
    captions = " ".join(c.value for c in at.caption)
    assert "(1) step 50: amp_cpu" in captions and "(2) step 60: upsample_sentences 4" in captions
    spec = chart(at, "curves")
    notes = {a["text"]: a for a in spec["layout"]["annotations"] if a["text"] in ("(1)", "(2)")}
    assert notes["(1)"]["x"] == 50 and notes["(2)"]["x"] == 60
    assert spec["layout"]["xaxis"]["range"][0] >= 10 - 0.05 * 90  # the loss panel starts at the data


def test_masking_page_runs_the_model_in_the_servers_decode_queue(checkpoints):
    """Thirty students on the Masking lab with their own sentences must not run thirty decoders side by side: the
    page's model work (translation, the four stages, the leak, greedy with and without the mask) takes its turn."""
    from aiayn.app import models

    at = open_page(MASK, nomask="true", text="good morning")
    assert not at.exception
    q = models.decode_queue("en-de")
    # translation + stages + leak + two greedy decodes; nothing else of this page used the queue
    assert q.stats.turns == 5 and q.stats.sentences == 0
