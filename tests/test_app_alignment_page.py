"""The "Alignment and attribution" page (AppTest against a tiny checkpoint with its own alignment.json)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from app_pages import arr, charts, open_page

PAGE = "pages/11_Alignment_and_Attribution.py"


@pytest.fixture(scope="module")
def aligned(tiny_checkpoints, tmp_path_factory):
    """A copy of the tiny checkpoints whose en-de has an alignment.json computed on the gold set."""
    from aiayn import Translator
    from aiayn.alignment_eval import ALIGN_FILE, align_checkpoint

    root = tmp_path_factory.mktemp("aligned")
    for d in ("en-de", "de-en"):
        shutil.copytree(tiny_checkpoints / d, root / d)
    tr = Translator.load(root / "en-de", device="cpu")
    payload = align_checkpoint(tr)
    (root / "en-de" / ALIGN_FILE).write_text(json.dumps(payload))
    return root, tr, payload


@pytest.fixture()
def app_at(aligned, monkeypatch):
    import streamlit as st

    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(aligned[0]))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield aligned
    st.cache_data.clear()
    st.cache_resource.clear()


def test_aer_grid_and_the_gold_links_of_the_default_view(app_at):
    _, tr, payload = app_at
    from aiayn.alignment_eval import GOLD_PATH, _gold, _sides
    from aiayn.analysis import alignment as al

    at = open_page(PAGE)
    assert not at.exception, at.exception
    c = charts(at)
    assert {"aer_grid", "gold_map", "attr_beside", "agree_grid"} <= set(c)
    want = np.asarray(payload["weights"]["readings"]["source_shift"]["head_aer"], dtype=float)
    np.testing.assert_allclose(arr(c["aer_grid"]["data"][0]["z"]), want)
    pair = al.read_gold(GOLD_PATH)[0]
    _, tgt_w, transpose = _sides(pair, "en-de")
    sure, possible = _gold(pair, len(tgt_w), len(pair.english), transpose)
    markers = {t["name"]: t for t in c["gold_map"]["data"] if t["type"] == "scatter"}
    assert len(markers["sure link"]["x"]) == int(sure.sum())
    assert len(markers["possible link"]["x"]) == int((possible & ~sure).sum())
    assert len(at.get("download_button")) == 4


def test_deep_link_picks_sentence_head_and_method(app_at):
    _, tr, _ = app_at
    from aiayn import calls
    from aiayn.alignment_eval import GOLD_PATH, detokenize
    from aiayn.analysis import alignment as al

    at = open_page(PAGE, {"sent": "2", "layer": "1", "head": "2", "method": "integrated_gradients"})
    assert not at.exception, at.exception
    pair = al.read_gold(GOLD_PATH)[2]
    src = calls.encode_source(tr.tokenizer, tr.cfg, detokenize(pair.english)).ids
    tgt = calls.encode_reference(tr.tokenizer, tr.cfg, detokenize(pair.german)).ids
    forced = calls.teacher_forced_ids(tr.model, [src], [tgt], return_attention=True)
    panel = [t for t in charts(at)["attr_beside"]["data"] if t["type"] == "heatmap"][1]
    np.testing.assert_allclose(arr(panel["z"]), forced.maps.cross[0, 0, 1].numpy(), rtol=1e-4, atol=1e-6)
    assert any("Completeness" in c.value for c in at.caption), [c.value for c in at.caption]


def test_norms_switch_reads_the_norm_based_aer(app_at):
    _, _, payload = app_at
    at = open_page(PAGE, {"measure": "norms", "reading": "target"})
    assert not at.exception, at.exception
    want = np.asarray(payload["norms"]["readings"]["target"]["head_aer"], dtype=float)
    np.testing.assert_allclose(arr(charts(at)["aer_grid"]["data"][0]["z"]), want)


def test_bad_sentence_index_warns(app_at):
    at = open_page(PAGE, {"sent": "9999"})
    assert not at.exception, at.exception
    assert any("sentence must be" in w.value for w in at.warning)


def test_without_alignment_json_the_page_says_how_to_make_it(checkpoints):
    at = open_page(PAGE)
    assert not at.exception, at.exception
    assert any("aiayn align" in i.value for i in at.info)


def test_contrast_section_explains_the_least_certain_step_and_takes_a_typed_word(app_at):
    """The student's own sentence (in the URL): the least certain output step is asked first, against the most
    probable other piece; the chart's bars are contrastive.contrast's values; a typed word's first piece becomes
    the foil; a word that starts with the chosen piece is refused with a warning, not a traceback."""
    from aiayn import calls
    from aiayn.contrastive import alternatives, contrast

    _, tr, _ = app_at
    text = "I have no time."
    at = open_page(PAGE, {"ctext": text})
    assert not at.exception, at.exception
    out = tr.translate(text, beam_size=4, length_penalty=0.6, return_attention=False)
    alt = alternatives(tr, out.src_ids, out.output_ids, 10)
    step = int(np.argmin(alt.chosen_probs))
    foil = next(int(i) for i in alt.ids[step] if int(i) != out.output_ids[step])
    want = contrast(tr, out.src_ids, out.output_ids, step, foil, method="grad_x_input")
    spec = charts(at)["contrast"]
    np.testing.assert_allclose(arr(spec["data"][0]["y"]), want.source, atol=1e-6)
    np.testing.assert_allclose(arr(spec["data"][1]["y"]), want.prefix, atol=1e-6)
    assert f"at step {step}" in spec["layout"]["title"]["text"]
    from aiayn.contrastive import foil_from_text

    word = next(w for w in ("Haus", "Auto", "Zeit", "Katze") if foil_from_text(tr.tokenizer, w) != out.output_ids[step])
    at.text_input(key="cword").set_value(word).run()
    assert not at.exception
    from aiayn.contrastive import foil_from_text

    typed = contrast(tr, out.src_ids, out.output_ids, step, foil_from_text(tr.tokenizer, word))
    np.testing.assert_allclose(arr(charts(at)["contrast"]["data"][0]["y"]), typed.source, atol=1e-6)
    # a typed word that starts with the chosen piece is refused (this random model writes no whole words, so the
    # tokenizer is told what the word's first piece is)
    real = calls.encode_target
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(calls, "encode_target", lambda tok, w: [out.output_ids[step]] if w == "sameword" else real(tok, w))
        at.text_input(key="cword").set_value("sameword").run()
    assert not at.exception and any("starts with the piece the model chose" in w.value for w in at.warning)
    assert "contrast" not in charts(at)


def test_sessions_that_picked_different_models_get_their_own_gold_sentence_and_contrast(tiny_checkpoints, tiny_spm,
                                                                                        tmp_path, monkeypatch):
    """The page's caches (the gold sentence's attribution, the contrast's output) are keyed by the picked
    checkpoint: a session on another en-de model (?model=) never gets the first session's numbers."""
    import streamlit as st
    from tiny_models import make_tiny_checkpoint

    from aiayn import Translator

    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoints / "en-de", root / "en-de")
    shutil.copytree(tiny_checkpoints / "de-en", root / "de-en")
    make_tiny_checkpoint(root / "other-en-de", tiny_spm, "en-de", seed=5)
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    text = "I have no time."
    outputs = {m: Translator.load(root / m, device="cpu").translate(text, beam_size=4, length_penalty=0.6).text
               for m in ("en-de", "other-en-de")}
    assert outputs["en-de"] != outputs["other-en-de"]  # so the check can fail
    st.cache_data.clear()
    st.cache_resource.clear()
    seen = {}
    try:
        for model in ("en-de", "other-en-de", "en-de"):  # one process, caches kept between the sessions
            at = open_page(PAGE, {"model": model, "ctext": text})
            assert not at.exception, at.exception
            shown = [m.value for m in at.markdown if m.value.startswith("**Beam search output:**")]
            assert shown == [f"**Beam search output:** {outputs[model] or '∅'}"]
            attr = arr(charts(at)["attr_beside"]["data"][0]["z"])
            seen.setdefault(model, attr)
            np.testing.assert_array_equal(attr, seen[model])
        assert not np.array_equal(seen["en-de"], seen["other-en-de"])
    finally:
        st.cache_data.clear()
        st.cache_resource.clear()
