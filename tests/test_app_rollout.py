"""Attention rollout page (AppTest against tiny random checkpoints): raw and rolled-out maps side by side, the
URL restores the view, bad URL values are reported, the rolled-out rows sum to 1 in the chart itself."""
from __future__ import annotations

import numpy as np
import pytest

from aiayn.examples import EXAMPLES

from app_pages import arr, charts, open_page

PAGE = "pages/8_Attention_Rollout.py"
SENT, REF = EXAMPLES["en-de"][0][0], EXAMPLES["en-de"][0][1]  # the page's default sentence


def run(query=None):
    at = open_page(PAGE, query)
    assert not at.exception, at.exception
    return at


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    """The model's own output and a teacher-forced pass, computed without the page."""
    from aiayn import Translator

    tr = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    t = tr.translate(SENT, beam_size=4, length_penalty=0.6, n_best=4, return_attention=True)
    forced, _ = tr.force(SENT, REF)
    return t, forced


def esc(label: str) -> str:
    return label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def head_mean_rollout(maps, kind: str, residual: float) -> np.ndarray:
    """Encoder/decoder rollout recomputed with numpy (Abnar and Zuidema 2020), B=1: (L, Q, Q)."""
    w = getattr(maps, kind)[:, 0].double().mean(1).numpy()
    out, acc = [], np.eye(w.shape[-1])
    for a in w:
        a = residual * np.eye(len(a)) + (1 - residual) * a
        acc = (a / a.sum(-1, keepdims=True)) @ acc
        out.append(acc)
    return np.array(out)


def test_default_view_raw_beside_rollout(checkpoints, reference):
    from aiayn.analysis import rollout

    t, _ = reference
    at = run()
    c = charts(at)
    assert {"raw", "rolled", "layers"} <= set(c), set(c)
    raw, rolled = c["raw"]["data"][0], c["rolled"]["data"][0]
    # default: cross-attention of the last layer of the model's own output, r = 0.5, through the encoder
    assert raw["x"] == [esc(f"{i}:{p}") for i, p in enumerate(t.src_tokens)]
    assert raw["y"] == rolled["y"] == [esc(f"{i}:{a}→{b}")
                                       for i, (a, b) in enumerate(zip(t.decoder_input_tokens, t.output_tokens))]
    np.testing.assert_allclose(arr(raw["z"]), t.attention.cross[-1, 0].mean(0).numpy(), atol=1e-5)
    z = arr(rolled["z"])
    np.testing.assert_allclose(z.sum(-1), 1.0, atol=1e-5)  # the rolled-out rows sum to 1 in the chart JSON
    np.testing.assert_allclose(z, rollout(t.attention, "cross", 0.5)[-1, 0].numpy(), atol=1e-5)
    assert not np.allclose(z, arr(raw["z"]), atol=1e-3)  # the rollout is not the raw map
    layers = c["layers"]["data"]
    assert len(layers) == t.attention.n_layers
    np.testing.assert_allclose(arr(layers[-1]["z"]), z, atol=1e-5)
    assert at.slider(key="residual").value == 0.5
    assert len(at.get("download_button")) == 2


def test_url_restores_the_view(checkpoints, reference):
    t, _ = reference
    at = run({"kind": "encoder", "layer": "1", "residual": "0.3"})
    assert not at.warning
    assert at.segmented_control(key="kind").value == "encoder" and at.selectbox(key="layer").value == "1"
    assert at.slider(key="residual").value == pytest.approx(0.3)
    c = charts(at)
    np.testing.assert_allclose(arr(c["raw"]["data"][0]["z"]),
                               t.attention.encoder[0, 0].mean(0).numpy(), atol=1e-5)
    z = arr(c["rolled"]["data"][0]["z"])
    np.testing.assert_allclose(z, head_mean_rollout(t.attention, "encoder", 0.3)[0], atol=1e-5)
    np.testing.assert_allclose(z.sum(-1), 1.0, atol=1e-5)


def test_decoder_rollout_is_causal_on_the_page(checkpoints, reference):
    t, _ = reference
    at = run({"kind": "decoder", "residual": "0.1"})
    z = arr(charts(at)["rolled"]["data"][0]["z"])
    np.testing.assert_allclose(z, head_mean_rollout(t.attention, "decoder", 0.1)[-1], atol=1e-5)
    assert np.all(np.triu(z, 1) == 0)


def test_widgets_change_the_view(checkpoints, reference):
    t, _ = reference
    at = run({"kind": "encoder"})
    at.slider(key="residual").set_value(1.0).run()
    z = arr(charts(at)["rolled"]["data"][0]["z"])
    np.testing.assert_allclose(z, np.eye(len(t.src_tokens)), atol=1e-6)  # r = 1: the identity
    at.slider(key="residual").set_value(0.0).run()
    at.selectbox(key="layer").set_value("1").run()
    z = arr(charts(at)["rolled"]["data"][0]["z"])
    # one layer, r = 0: the head mean
    np.testing.assert_allclose(z, t.attention.encoder[0, 0].mean(0).numpy(), atol=1e-5)


def test_bad_url_values_warn_and_fall_back(checkpoints, reference):
    t, _ = reference
    at = run({"kind": "heads", "residual": "7", "layer": "99", "via_encoder": "maybe"})
    warned = " ".join(w.value for w in at.warning)
    for name in ("kind=heads", "residual=7", "layer=99", "via_encoder=maybe"):
        assert name in warned, warned
    z = arr(charts(at)["rolled"]["data"][0]["z"])  # the default view: cross, last layer
    assert z.shape == (len(t.output_tokens), len(t.src_tokens))


def test_teacher_forced_mode_and_cross_without_the_encoder(checkpoints, reference):
    from aiayn.analysis import rollout

    _, forced = reference
    at = run({"mode": "forced", "via_encoder": "false"})  # no ref given: the curated reference of the example
    assert any("Teacher-forced reference" in m.value for m in at.markdown)
    rolled = charts(at)["rolled"]["data"][0]
    assert rolled["y"] == [esc(f"{i}:{a}→{b}")
                           for i, (a, b) in enumerate(zip(forced.decoder_input_tokens, forced.output_tokens))]
    expected = rollout(forced.attention, "cross", 0.5, through_encoder=False)[-1, 0].numpy()
    np.testing.assert_allclose(arr(rolled["z"]), expected, atol=1e-5)


def test_text_from_the_url(checkpoints, tiny_checkpoints):
    from aiayn import Translator
    from aiayn.analysis import rollout

    other = EXAMPLES["en-de"][2]  # "The house is small."
    t = Translator.load(tiny_checkpoints / "en-de", device="cpu").translate(other[0], return_attention=True)
    at = run({"text": other[0], "kind": "encoder", "residual": "0.5"})
    assert at.text_input(key="text").value == other[0]
    rolled = charts(at)["rolled"]["data"][0]
    assert rolled["x"] == [esc(f"{i}:{p}") for i, p in enumerate(t.src_tokens)]
    np.testing.assert_allclose(arr(rolled["z"]), rollout(t.attention, "encoder")[-1, 0].numpy(), atol=1e-5)


def test_empty_sentence_is_reported(checkpoints):
    at = run({"text": "   "})
    assert not charts(at) and (at.info or at.warning)
