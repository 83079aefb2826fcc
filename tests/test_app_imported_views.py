"""The app's wording and views with an imported Opus-MT model chosen in the sidebar (``?model=opus-mt-en-de``) beside
the tiny shipped models (AppTest): what a page says must fit the model that is served, and a page must not go blank
because the imported model lacks a file that only a model trained and scored here has."""
from __future__ import annotations


import pytest

pytest.importorskip("transformers")  # the imported model is built from a tiny MarianMTModel (tests/marian_fixture.py)

from marian_fixture import served_teachers_folder, write_marian  # noqa: E402

from aiayn.import_marian import cli_main  # noqa: E402

SHIPPED_WORDS = "trained on German–English dictionary pairs"


@pytest.fixture(scope="module")
def imported(tmp_path_factory, fixture_pairs):
    source = write_marian(tmp_path_factory.mktemp("marian") / "opus-mt-tiny", fixture_pairs)
    out = tmp_path_factory.mktemp("imported") / "opus-mt-en-de"
    assert cli_main([str(source), "--out", str(out), "--dtype", "float32", "--no-progress"]) == 0
    return out


@pytest.fixture()
def folder(imported, tiny_checkpoints, tmp_path, monkeypatch):
    """The teacher's checkpoints folder: both tiny shipped models and the imported ``opus-mt-en-de``."""
    import streamlit as st

    yield served_teachers_folder(imported, tiny_checkpoints, tmp_path, monkeypatch)
    st.cache_data.clear()
    st.cache_resource.clear()


def _text(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_overview_names_the_imported_model_instead_of_the_shipped_ones_data(folder):
    from app_pages import open_page

    at = open_page("pages/0_Overview.py", {"model": "opus-mt-en-de"})
    assert not at.exception, at.exception
    text = _text(at)
    assert "**opus-mt-en-de**, a Transformer imported from Opus-MT" in text
    assert SHIPPED_WORDS not in text
    at = open_page("pages/0_Overview.py")
    assert SHIPPED_WORDS in _text(at) and "imported from" not in _text(at)


def test_model_and_training_says_an_imported_model_has_no_curves_and_names_it(folder):
    from app_pages import charts, open_page

    at = open_page("pages/6_Model_and_Training.py", {"model": "opus-mt-en-de"})
    assert not at.exception, at.exception
    assert not [w.value for w in at.warning if "training curves" in w.value]
    infos = [i.value for i in at.info if "imported (Opus-MT)" in i.value]
    assert len(infos) == 1 and "no training curves" in infos[0]
    legend = [t["name"] for t in charts(at)["params"]["data"]]
    assert legend[0].startswith("loaded (opus-mt-en-de)")
    assert not any("shipped model" in m.value for m in at.markdown)
    at = open_page("pages/6_Model_and_Training.py")  # the shipped tiny model: its curves, no imported notice
    assert not [i.value for i in at.info if "imported" in i.value]
    assert [t["name"] for t in charts(at)["params"]["data"]][0].startswith("loaded (en-de)")


def test_alignment_page_shows_one_gold_sentence_without_alignment_json(folder):
    from app_pages import charts, open_page

    from aiayn import Translator

    assert not (folder / "opus-mt-en-de" / "alignment.json").exists()
    cfg = Translator.load(folder / "opus-mt-en-de", device="cpu").cfg
    at = open_page("pages/11_Alignment_and_Attribution.py", {"model": "opus-mt-en-de"})
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    c = charts(at)
    assert "aer_grid" not in c and {"gold_map", "attr_beside", "agree_grid"} <= set(c)
    assert any("alignment.json" in i.value and "aiayn align" in i.value for i in at.info)
    assert at.number_input(key="layer").value == cfg.n_layers and at.number_input(key="head").value == 1
    assert at.number_input(key="layer").max == cfg.n_layers and at.number_input(key="head").max == cfg.n_heads


def test_positional_encoding_defaults_to_the_layout_the_loaded_model_adds(folder):
    from app_pages import charts, open_page

    from aiayn import Translator

    assert Translator.load(folder / "opus-mt-en-de", device="cpu").cfg.positional_layout == "concatenated"
    at = open_page("pages/3_Positional_Encoding.py", {"model": "opus-mt-en-de"})
    assert not at.exception, at.exception
    assert at.selectbox(key="layout").value == "concatenated"
    assert charts(at)["pe_heatmap"]["layout"]["title"]["text"].startswith("PE (concatenated)")
    assert charts(at)["pe_heatmap"]["layout"]["xaxis"]["title"]["text"].startswith("dimension (first half: sin")
    assert any("the loaded model uses the concatenated one" in m.value for m in at.markdown)
    assert not any("aiayn uses the paper's" in m.value for m in at.markdown)
    at = open_page("pages/3_Positional_Encoding.py")  # the shipped tiny model adds the paper's interleaved table
    assert at.selectbox(key="layout").value == "interleaved"
    assert any("the loaded model uses the interleaved one (the paper's)" in m.value for m in at.markdown)


def test_head_ablation_shows_an_unchanged_score_as_no_change(folder):
    """A score that does not move at the shown precision reads "0.00" in grey, not a green "+0.00" rise."""
    from app_pages import open_page

    from aiayn import Translator
    from aiayn.analysis.ablation import head_mask_array

    text = "I have no time."
    tr = Translator.load(folder / "en-de", device="cpu")
    L, H = tr.cfg.n_layers, tr.cfg.n_heads
    intact = tr.translate(text, beam_size=4).text
    same = next(f"cross.{l + 1}.{h + 1}" for l in range(L) for h in range(H)  # a head whose removal keeps the text
                if tr.translate(text, beam_size=4, head_mask=head_mask_array([("cross", l, h)], L, H)).text == intact)
    at = open_page("pages/7_Head_Ablation.py", {"text": text, "off": same})
    assert not at.exception, at.exception
    deltas = {m.label: m.proto for m in at.metric if m.proto.delta}
    assert deltas["chrF"].delta == "0.00"  # the same text: the same chrF
    for label, proto in deltas.items():
        moved = proto.delta not in ("0.00",)
        assert (proto.color == proto.GRAY and proto.direction == proto.NONE) != moved, (label, proto)
        if moved:
            assert proto.delta[0] in "+-" and float(proto.delta) != 0


@pytest.fixture(scope="module")
def imported_n6(tmp_path_factory, fixture_pairs):
    """A tiny imported Marian model with the paper's N = 6 layers (d_model 16, 2 heads)."""
    source = write_marian(tmp_path_factory.mktemp("marian6") / "opus-mt-tiny-n6", fixture_pairs, encoder_layers=6,
                          decoder_layers=6)
    out = tmp_path_factory.mktemp("imported6") / "opus-mt-en-de"
    assert cli_main([str(source), "--out", str(out), "--dtype", "float32", "--no-progress"]) == 0
    return out


def test_rollout_in_presenter_mode_puts_six_layers_two_to_a_row(imported_n6, tiny_checkpoints, tmp_path,
                                                               monkeypatch):
    import streamlit as st
    from app_pages import charts, open_page

    served_teachers_folder(imported_n6, tiny_checkpoints, tmp_path, monkeypatch)

    def panel_columns(query):
        at = open_page("pages/8_Attention_Rollout.py", query)
        assert not at.exception, at.exception
        lay = charts(at)["layers"]["layout"]
        heatmaps = [t for t in charts(at)["layers"]["data"] if t["type"] == "heatmap"]
        domains = {tuple(v["domain"]) for k, v in lay.items() if k.startswith("xaxis")}
        return len(heatmaps), len(domains)

    try:
        assert panel_columns({"model": "opus-mt-en-de", "presenter": "true"}) == (6, 2)  # 3 rows of 2
        assert panel_columns({"model": "opus-mt-en-de"}) == (6, 6)  # one row, as before
        assert panel_columns({"presenter": "true"}) == (2, 1)  # the tiny shipped model (N = 2): one per row
    finally:
        st.cache_data.clear()
        st.cache_resource.clear()


def test_masking_shows_an_unchanged_probability_as_no_change(folder):
    """Without the look-ahead mask, a mean p(next reference token) that moves by less than 0.0005 reads "0.000" in
    grey, not a red "-0.000" fall (the imported random model's 1 / vocabulary probabilities barely move)."""
    from app_pages import open_page

    at = open_page("pages/4_Masking.py", {"model": "opus-mt-en-de", "nomask": "true"})
    assert not at.exception, at.exception
    (m,) = [m.proto for m in at.metric if m.label == "mean p(next reference token)"]
    assert m.delta == "0.000 vs masked" and m.color == m.GRAY and m.direction == m.NONE


def test_overview_vocabulary_help_fits_the_model(folder):
    """An imported Marian model has two SentencePiece models (source, target) over one vocabulary, not one joint
    BPE model as the models trained here."""
    from app_pages import open_page

    def vocab_help(query=None):
        at = open_page("pages/0_Overview.py", query)
        (m,) = [m for m in at.metric if m.label == "Vocabulary"]
        return m.proto.help

    assert "source and the target SentencePiece models" in vocab_help({"model": "opus-mt-en-de"})
    assert "joint" not in vocab_help({"model": "opus-mt-en-de"})
    assert vocab_help() == "joint SentencePiece BPE pieces, shared embeddings"


def test_explorer_says_shifted_right_not_bos_for_a_model_that_starts_from_pad(folder):
    """Opus-MT's decoder starts from <pad>, not <s>: the decoder map's key axis and the caption use the paper's
    "shifted right" (Section 3.1), which holds for every start piece."""
    from app_pages import charts, open_page

    at = open_page("pages/2_Attention_Explorer.py", {"model": "opus-mt-en-de", "kind": "decoder",
                                                     "text": "The cat sat on the mat."})
    assert not at.exception, at.exception
    spec = charts(at)["head_view"]
    assert spec["data"][0]["x"][0].startswith("0:&lt;pad&gt;")
    assert spec["layout"]["xaxis"]["title"]["text"] == "key (decoder input, shifted right)"
    captions = " ".join(c.value for c in at.caption)
    assert "BOS" not in captions and "shifted right behind the start piece" in captions


def test_figure_1_query_key_space_on_the_imported_model(folder):
    """The queries and keys of an imported Marian model's cross-attention head: its pieces (decoder input from
    <pad>) on the queries and the source's on the keys."""
    from app_pages import charts, open_page

    at = open_page("pages/10_Figure_1.py", {"model": "opus-mt-en-de", "block": "dec.1.cross_attn", "open_qk": "true",
                                            "qk_head": "2", "text": "The cat sat on the mat."})
    assert not at.exception, at.exception
    spec = charts(at)["qk_space"]
    assert "head 2" in spec["layout"]["title"]["text"]
    assert spec["data"][1]["hovertext"][0].startswith("query 0: &lt;pad&gt;")
    assert spec["data"][2]["hovertext"][-1].startswith("key ") and "&lt;/s&gt;" in spec["data"][2]["hovertext"][-1]
