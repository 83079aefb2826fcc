"""Translate page (AppTest against tiny random checkpoints): form, options, alignment heatmap, URL state."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")
PAGE = "pages/1_Translate.py"


def spec(at, i=0):
    return json.loads(at.get("plotly_chart")[i].proto.spec)


def esc(label: str) -> str:
    """Plotly reads labels as HTML: the page must escape <, > and & (so <s> does not strike through)."""
    return label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def arr(value):
    """A plotly JSON array: a plain list or a typed array ``{"dtype", "bdata", "shape"}`` (plotly >= 6)."""
    import base64

    import numpy as np

    if isinstance(value, dict) and "bdata" in value:
        a = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape:
            a = a.reshape([int(x) for x in str(shape).split(",")])
        return a.astype(float)
    return np.array(value, dtype=float)


def run(query=None):
    at = AppTest.from_file(APP, default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.switch_page(PAGE)
    return at.run()


def test_default_sentence_translates_with_alignment(checkpoints, tiny_translator):
    at = run()
    assert not at.exception, at.exception
    assert not at.error
    t = tiny_translator.translate("I have no time.", beam_size=4, length_penalty=0.6, n_best=4)
    assert at.subheader[0].value == (t.text or "∅ (empty output)")
    fig = spec(at)
    heat = fig["data"][0]
    # rows: decoder positions labelled decoder input→output; columns: source pieces, unique "i:piece" labels
    assert heat["x"] == [esc(f"{i}:{p}") for i, p in enumerate(t.src_tokens)]
    assert heat["y"] == [esc(f"{i}:{a}→{b}") for i, (a, b) in enumerate(zip(t.decoder_input_tokens, t.output_tokens))]
    # default view: last layer, mean over heads of the cross-attention
    import numpy as np

    want = t.attention.cross[-1, 0].float().mean(0).numpy()
    assert np.allclose(arr(heat["z"]), want, atol=1e-5)
    assert "mean over heads" in fig["layout"]["title"]["text"]


def test_head_and_layer_change_the_heatmap(checkpoints, tiny_translator):
    import numpy as np

    at = run()
    at.segmented_control(key="head").set_value("2").run()
    assert not at.exception
    t = tiny_translator.translate("I have no time.", beam_size=4, length_penalty=0.6)
    z = arr(spec(at)["data"][0]["z"])
    assert np.allclose(z, t.attention.cross[-1, 0, 1].float().numpy(), atol=1e-5)
    at.selectbox(key="layer").set_value("1").run()
    z = arr(spec(at)["data"][0]["z"])
    assert np.allclose(z, t.attention.cross[0, 0, 1].float().numpy(), atol=1e-5)
    # the view travels with the explorer link (AppTest does not mirror bound widgets into at.query_params)
    link = [pl for pl in at.get("page_link") if pl.proto.label.startswith("Open this sentence")][0]
    q = parse_qs(link.proto.query_string)
    assert q["layer"] == ["1"] and q["head"] == ["2"]


def test_form_submission_and_beam_options(checkpoints, tiny_translator):
    at = run()
    at.text_input(key="tr_text").set_value("The house is big.")
    at.number_input(key="tr_beam").set_value(2)
    at.button[0].click().run()  # the form's submit button
    assert not at.exception
    t = tiny_translator.translate("The house is big.", beam_size=2, length_penalty=0.6, n_best=2)
    assert at.subheader[0].value == (t.text or "∅ (empty output)")
    table = at.dataframe[0].value
    assert len(table) == 2 and list(table["translation"]) == [x for x, _ in t.nbest]
    qp = at.query_params
    assert qp["text"] in ("The house is big.", ["The house is big."]) and qp["beam"] in ("2", ["2"])


def test_url_restores_the_view(checkpoints, tiny_translator):
    at = run({"text": "Good morning", "beam": "1", "layer": "1", "head": "3", "alpha": "0"})
    assert not at.exception
    assert at.text_input(key="tr_text").value == "Good morning"
    assert at.number_input(key="tr_beam").value == 1
    t = tiny_translator.translate("Good morning", beam_size=1, length_penalty=0.0)
    assert at.subheader[0].value == (t.text or "∅ (empty output)")
    assert "layer 1, head 3" in spec(at)["layout"]["title"]["text"]
    # the explorer link carries the sentence and the view
    link = [pl for pl in at.get("page_link") if "explorer" in pl.proto.label.lower() and "Open" in pl.proto.label][0]
    q = parse_qs(link.proto.query_string)
    assert q["text"] == ["Good morning"] and q["kind"] == ["cross"] and q["layer"] == ["1"] and q["head"] == ["3"]


@pytest.mark.parametrize("query, needle", [
    ({"layer": "99"}, "layer=99"),
    ({"head": "abc"}, "head=abc"),
    ({"beam": "zero"}, "beam=zero"),
    ({"alpha": "nan"}, "alpha=nan"),
    ({"direction": "xx"}, "direction=xx"),
])
def test_malformed_url_parameters_warn_and_fall_back(checkpoints, query, needle):
    at = run(query)
    assert not at.exception
    assert any(needle in w.value for w in at.warning), [w.value for w in at.warning]
    assert at.get("plotly_chart"), "falls back to a valid view"


def test_empty_and_odd_input(checkpoints):
    at = run({"text": "   "})
    assert not at.exception
    assert any("empty" in m.value for m in at.info)
    assert not at.get("plotly_chart")
    at = run({"text": "Hallo\u200b Welt\x07 " + "x" * 1200})
    assert not at.exception
    texts = " ".join(w.value for w in at.warning)
    assert "only the first 1,000" in texts and "Control or invisible" in texts
    assert at.get("plotly_chart")


def test_direction_switch_swaps_the_default_sentence(checkpoints, tiny_checkpoints):
    from aiayn import Translator

    at = run()
    at.radio(key="direction").set_value("de-en").run()
    assert not at.exception
    assert at.text_input(key="tr_text").value == "Ich habe keine Zeit."
    t = Translator.load(tiny_checkpoints / "de-en", device="cpu").translate("Ich habe keine Zeit.", beam_size=4, n_best=4)
    assert at.subheader[0].value == (t.text or "∅ (empty output)")


@pytest.mark.parametrize("page", ["pages/1_Translate.py", "pages/2_Attention_Explorer.py"])
def test_missing_checkpoint_is_a_message_not_a_traceback(tmp_path, monkeypatch, page):
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tmp_path))
    st.cache_resource.clear()
    (tmp_path / "en-de").mkdir()
    (tmp_path / "en-de" / "model.safetensors").write_bytes(b"not a safetensors file")
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page(page)
    at.run()
    assert not at.exception
    assert at.error and "could not be loaded" in at.error[0].value
    assert not at.get("plotly_chart")


@pytest.mark.parametrize("bleu, chrf, shown", [(0.4, 11.6, "still weak"), (9.0, 40.0, None)])
def test_test_scores_are_shown_beside_the_translation(tmp_path, monkeypatch, tiny_checkpoints, bleu, chrf, shown):
    """A weak model's output must not pass for a translation: the page says how it compares with the baseline."""
    import shutil

    from aiayn.evaluation.modelcard import record_scores

    root = tmp_path / "ckpts"
    shutil.copytree(tiny_checkpoints, root)
    record_scores(root / "en-de", {"n_sentences": 1000, "scores": {"model": {"bleu": bleu, "chrf": chrf},
                                                                   "dictionary_baseline": {"bleu": 3.5, "chrf": 28.5}}})
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = run()
    assert not at.exception, at.exception
    infos = " ".join(i.value for i in at.info)
    captions = " ".join(c.value for c in at.caption)
    if shown:
        assert shown in infos and f"{bleu:.1f} / chrF {chrf:.1f}" in infos and "3.5 / 28.5" in infos
    else:
        assert "beats the word-by-word dictionary baseline" in captions and "weak" not in infos


def test_no_scores_no_verdict(checkpoints):
    at = run()
    assert not at.exception, at.exception
    texts = " ".join(x.value for x in list(at.info) + list(at.caption))
    assert "dictionary baseline" not in texts
