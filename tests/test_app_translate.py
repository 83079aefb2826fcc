"""Translate page (AppTest against tiny random checkpoints): form, options, alignment heatmap, URL state."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from app_pages import arr, open_page

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")
PAGE = "pages/1_Translate.py"


def run(query=None):
    return open_page(PAGE, query)


def spec(at, i=0):
    return json.loads(at.get("plotly_chart")[i].proto.spec)


def esc(label: str) -> str:
    """Plotly reads labels as HTML: the page must escape <, > and & (so <s> does not strike through)."""
    return label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


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
    table = nbest_table(at)
    assert len(table) == 2 and list(table["translation"]) == [x or "∅" for x, _ in t.nbest]
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
    at = run({"text": "Hallo\u200b Welt\x07 " + "x" * 5200})
    assert not at.exception
    texts = " ".join(w.value for w in at.warning)
    assert "only the first 5,000" in texts and "Control or invisible" in texts
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


def test_form_state_survives_a_visit_to_another_page(checkpoints, tiny_translator):
    """Issue 14: leaving through the sidebar and coming back kept nothing (empty box, beam 1, alpha 0, max length 1)."""
    at = run()
    at.text_input(key="tr_text").set_value("The house is big.")
    at.number_input(key="tr_beam").set_value(3)
    at.slider(key="tr_alpha").set_value(1.0)
    at.number_input(key="tr_maxlen").set_value(20)
    at.button[0].click().run()
    assert not at.exception, at.exception
    at.switch_page("pages/5_Scaled_Dot_Product.py").run()
    assert not at.exception, at.exception
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert at.text_input(key="tr_text").value == "The house is big."
    assert at.number_input(key="tr_beam").value == 3
    assert at.slider(key="tr_alpha").value == 1.0
    assert at.number_input(key="tr_maxlen").value == 20
    # the translation is shown again, with these settings
    t = tiny_translator.translate("The house is big.", beam_size=3, length_penalty=1.0, max_len=20, n_best=3)
    assert at.subheader[0].value == (t.text or "∅ (empty output)")
    assert at.get("plotly_chart")


def test_a_link_with_text_seeds_a_page_visited_before(checkpoints, tiny_translator):
    """A later visit through a link that carries ?text= (another page's "open in ...") shows that text."""
    at = run()
    at.text_input(key="tr_text").set_value("The house is big.")
    at.button[0].click().run()
    at.switch_page("pages/5_Scaled_Dot_Product.py").run()
    at.query_params["text"] = "Good morning"
    at.query_params["beam"] = "2"
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert at.text_input(key="tr_text").value == "Good morning"
    assert at.number_input(key="tr_beam").value == 2
    t = tiny_translator.translate("Good morning", beam_size=2, length_penalty=0.6, n_best=2)
    assert at.subheader[0].value == (t.text or "∅ (empty output)")


LONG_SENTENCE = "The old man who lives in the small house near the river has no time for his garden this summer."


def nbest_table(at):
    """The n-best table with its markdown escapes undone (st.table cells are markdown; the page escapes markup)."""
    import re

    return at.table[-1].value.map(lambda v: re.sub(r"\\(.)", r"\1", v) if isinstance(v, str) else v)


def test_nbest_hypotheses_are_shown_in_full_with_the_score_in_view(checkpoints, tiny_translator):
    """Issue 14: the n-best column cut long hypotheses (all four looked identical) and long output pushed the score
    out of view: a wrapping table, score before the text, every hypothesis in full."""
    at = run({"text": LONG_SENTENCE})
    assert not at.exception, at.exception
    t = tiny_translator.translate(LONG_SENTENCE, beam_size=4, length_penalty=0.6, n_best=4)
    table = nbest_table(at)
    assert list(table.columns) == ["rank", "score", "translation"]
    assert list(table["translation"]) == [x or "∅" for x, _ in t.nbest]
    assert [float(s) for s in table["score"]] == pytest.approx([s for _, s in t.nbest], abs=5e-4)
    assert not at.dataframe  # a dataframe cell cuts long text to its column width


@pytest.mark.parametrize("text, script", [("我没有时间。我今天很忙。", "CJK"), ("ليس لدي وقت.", "Arabic")])
def test_a_script_the_model_never_saw_gets_a_hint(checkpoints, text, script):
    at = run({"text": text})
    assert not at.exception, at.exception
    hints = [w.value for w in at.warning if "only knows English and German" in w.value]
    assert len(hints) == 1 and script in hints[0] and "100% of the letters" in hints[0], [w.value for w in at.warning]
    assert list(nbest_table(at).columns)[:2] == ["rank", "score"]  # the score stays left of the long text
    at = run({"text": "The house is small."})
    assert not any("only knows English and German" in w.value for w in at.warning)


def test_long_input_is_translated_sentence_by_sentence(checkpoints, tiny_translator):
    """Issue 14: 3,000 characters became one cut translation with only a truncation note. The page splits long
    input into sentences (the Translator itself still cuts and flags over-long input)."""
    base = ["The house is small.", "I have no time!", "Where is my red car?", "The cat sleeps on the warm sofa.",
            "We will go home tomorrow."]
    sentences = (base * 40)[:int(3000 / 21)]
    text = " ".join(sentences)
    assert len(text) >= 2900
    assert tiny_translator.translate(text, beam_size=1).truncated  # the library still cuts and says so
    at = run({"text": text})
    assert not at.exception, at.exception
    assert not any("only the first" in w.value for w in at.warning)
    assert any(f"{len(sentences)} sentences" in i.value for i in at.info), [i.value for i in at.info]
    each = {s: tiny_translator.translate(s, beam_size=4, length_penalty=0.6, n_best=4) for s in base}
    assert at.text[0].value == " ".join(each[s].text for s in sentences)
    # the attention and n-best list of a chosen sentence
    at.selectbox(key="sent").set_value(4).run()
    assert not at.exception, at.exception
    want = each[sentences[3]]
    assert spec(at)["data"][0]["x"] == [esc(f"{i}:{p}") for i, p in enumerate(want.src_tokens)]
    assert list(nbest_table(at)["translation"]) == [x or "∅" for x, _ in want.nbest]
    # a short input is one sentence, as before
    at = run({"text": "The house is small. I have no time."})
    assert not at.text and at.subheader[0].value == (
        tiny_translator.translate("The house is small. I have no time.", beam_size=4, n_best=4).text or "∅ (empty output)")


RERANK_CANDIDATES = ["I have no time.", "The house is small.", "Good morning!", "The cat sat on the mat.",
                     "Where is my red car?", "We will go home tomorrow.", "The dog sleeps in the garden."]


def test_rerank_toggle_shows_the_reverse_models_choice_with_its_own_maps(checkpoints, tiny_checkpoints):
    """The toggle reranks the n-best list with the de-en model (aiayn.reranking): the headline, the table in the new
    order with both scores, and the pieces and maps of the translation shown (a teacher-forced pass when it is not
    the beam's own output)."""
    import numpy as np

    from aiayn import Translator
    from aiayn.reranking import DEFAULT_WEIGHT, rerank

    fwd, rev = (Translator.load(tiny_checkpoints / d, device="cpu") for d in ("en-de", "de-en"))
    want = {s: rerank(s, fwd.translate(s, n_best=4, return_attention=False).nbest, rev, DEFAULT_WEIGHT)
            for s in RERANK_CANDIDATES}
    moved = [s for s, rows in want.items() if rows[0].beam_rank != 0]
    stayed = [s for s, rows in want.items() if rows[0].beam_rank == 0]
    assert moved and stayed, "the random tiny models should give both cases"
    at = run({"text": moved[0], "rerank": "true"})
    assert not at.exception, at.exception
    rows = want[moved[0]]
    assert at.subheader[0].value == rows[0].text
    table = nbest_table(at)
    assert list(table.columns) == ["rank", "beam", "beam score", "log P(src | out)", "score", "translation"]
    assert list(table["translation"]) == [r.text or "∅" for r in rows]
    assert [int(b) for b in table["beam"]] == [r.beam_rank + 1 for r in rows]
    assert [float(s) for s in table["score"]] == pytest.approx([r.score for r in rows], abs=5e-4)
    assert any(f"beam's #{rows[0].beam_rank + 1}" in c.value for c in at.caption)
    forced, _ = fwd.force(moved[0], rows[0].text)
    heat = [d for c in at.get("plotly_chart") for d in json.loads(c.proto.spec)["data"] if d["type"] == "heatmap"][0]
    assert heat["y"] == [esc(f"{i}:{a}→{b}") for i, (a, b) in enumerate(zip(forced.decoder_input_tokens,
                                                                                 forced.output_tokens))]
    assert np.allclose(arr(heat["z"]), forced.attention.cross[-1, 0].float().mean(0).numpy(), atol=1e-5)
    # what the shown translation keeps of the source: the reverse model's piece probabilities
    chart = [c for c in at.get("plotly_chart") if json.loads(c.proto.spec)["layout"].get("yaxis", {}).get("title", {})
             .get("text") == "P(piece | translation)"]
    assert len(chart) == 1
    forced_back, probs = rev.force(rows[0].text, moved[0])
    want_p = [float(probs[t, i]) for t, i in enumerate(forced_back.output_ids)]
    assert arr(json.loads(chart[0].proto.spec)["data"][0]["y"]) == pytest.approx(want_p, abs=1e-4)
    # the explorer link opens the same translation, fed to the decoder
    [link] = [pl for pl in at.get("page_link") if pl.proto.label.startswith("Open this sentence")]
    q = parse_qs(link.proto.query_string)
    assert q["mode"] == ["forced"] and q["ref"] == [rows[0].text] and q["text"] == [moved[0]]
    # off again: the paper's beam search, its own table
    at.toggle(key="rerank").set_value(False).run()
    assert at.subheader[0].value == fwd.translate(moved[0], n_best=4, return_attention=False).text
    assert list(nbest_table(at).columns) == ["rank", "score", "translation"]
    # a sentence whose beam output stays first says so
    at = run({"text": stayed[0], "rerank": "true"})
    assert at.subheader[0].value == want[stayed[0]][0].text
    assert any("stays first" in c.value for c in at.caption)
    [link] = [pl for pl in at.get("page_link") if pl.proto.label.startswith("Open this sentence")]
    assert "mode" not in parse_qs(link.proto.query_string)  # the beam's own output: the explorer decodes it too


def test_rerank_without_a_reverse_model_falls_back_with_a_warning(tmp_path, monkeypatch, tiny_checkpoints):
    import shutil

    import streamlit as st

    shutil.copytree(tiny_checkpoints / "en-de", tmp_path / "en-de")
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tmp_path))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = run({"text": "I have no time.", "rerank": "true"})
    assert not at.exception, at.exception
    assert any("Could not rerank with the de-en model" in w.value for w in at.warning), [w.value for w in at.warning]
    from aiayn import Translator

    assert at.subheader[0].value == Translator.load(tmp_path / "en-de").translate("I have no time.").text
    st.cache_data.clear()
    st.cache_resource.clear()


def test_rerank_long_input_reranks_each_sentence(checkpoints, tiny_checkpoints):
    from aiayn import Translator
    from aiayn.reranking import DEFAULT_WEIGHT, rerank

    fwd, rev = (Translator.load(tiny_checkpoints / d, device="cpu") for d in ("en-de", "de-en"))
    sentences = (RERANK_CANDIDATES * 8)[:20]
    text = " ".join(sentences)
    assert len(text) > 300
    at = run({"text": text, "rerank": "true"})
    assert not at.exception, at.exception
    best = {s: rerank(s, fwd.translate(s, n_best=4, return_attention=False).nbest, rev, DEFAULT_WEIGHT)[0]
            for s in set(sentences)}
    assert at.text[0].value == " ".join(best[s].text for s in sentences)
    table = at.table[0].value
    assert "reranked score" in table.columns
    assert [float(v) for v in table["reranked score"]] == pytest.approx([best[s].score for s in sentences], abs=5e-4)
