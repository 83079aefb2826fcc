"""True facts on the pages (AppTest on the shipped checkpoints): lifetime totals over a checkpoint's lineage on
the Overview and on Model and training, not only the last warm start's."""
from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")


@pytest.fixture
def shipped(monkeypatch):
    import streamlit as st

    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(REPO / "checkpoints"))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield REPO / "checkpoints"
    st.cache_data.clear()
    st.cache_resource.clear()


def _texts(at) -> str:
    return "\n".join(str(m.value) for m in list(at.markdown) + list(at.caption))


def _life(direction: str):
    """The shipped checkpoint's lifetime as its config.json records it (the pages must show these facts; the lineage
    test checks the record itself against docs/training.md)."""
    import json

    from aiayn.lineage import lifetime

    meta = json.loads((REPO / "checkpoints" / direction / "config.json").read_text(encoding="utf-8"))["meta"]
    life = lifetime(meta)
    assert life is not None and len(life.stages) >= 4 and life.stages[-1].warm
    return life


@pytest.mark.parametrize("direction", ["en-de", "de-en"])
def test_overview_shows_lifetime_totals_and_the_warm_starts(shipped, direction):
    life = _life(direction)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["direction"] = direction
    at.run()
    assert not at.exception, at.exception
    text = _texts(at)
    assert f"**Training steps:** {life.steps:,} over {len(life.stages)} runs" in text
    assert f"warm start from the trained parent at lifetime step {life.stages[-1].start:,}" in text
    assert "**Training steps:** 2,000" not in text and "**Training steps:** 1,602" not in text


def test_overview_describes_every_page_it_lists(shipped):
    """Each page link in the Overview's list has its own one-line description (a page added to the frame without
    one showed an empty caption)."""
    from aiayn.app.frame import PAGES

    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    captions = [str(c.value) for c in at.caption]
    src = (REPO / "pages" / "0_Overview.py").read_text(encoding="utf-8")
    listed = [path for path, _, _ in PAGES[1:] if (REPO / path).is_file()]
    assert len(listed) >= 11 and all(f'"{path}"' in src for path in listed)
    assert "" not in captions
    assert len([c for c in captions if c]) >= len(listed)


def test_model_and_training_lists_the_runs_and_says_the_curves_are_the_last_one(shipped):
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page("pages/6_Model_and_Training.py")
    at.run()
    assert not at.exception, at.exception
    text = _texts(at)
    life = _life("en-de")
    assert f"**Training steps:** {life.steps:,} over {len(life.stages)} runs" in text
    assert f"its step 0 is lifetime step {life.stages[-1].start:,}, the weights of a trained parent" in text
    frames = [df.value for df in at.dataframe if "lifetime steps" in df.value.columns]
    assert frames and list(frames[0]["lifetime steps"]) == [f"{s.start + 1:,}–{s.last:,}" for s in life.stages]
    assert {m.label for m in at.metric} >= {"steps logged (last run)", "wall time (last run)"}


def _captions(at) -> list[str]:
    return [str(c.value) for c in at.caption]


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
def test_explorer_kind_caption_says_what_rows_and_columns_are(checkpoints, kind):
    from app_pages import open_page

    at = open_page("pages/2_Attention_Explorer.py", {"kind": kind}, tab="head")
    assert not at.exception, at.exception
    text = "\n".join(_captions(at))
    assert "Encoder-decoder (cross): encoder-decoder (cross) attention" not in text
    assert "attends to" in text and "Each row sums to 1." in text
    from aiayn.model.maps import KIND_TITLES

    assert f"{KIND_TITLES[kind].capitalize()}: each " in text


def test_step_tab_does_not_caption_its_maps_with_the_chosen_kind(checkpoints):
    """The Step-by-step tab draws decoder and cross maps; with kind = encoder it used to say 'Encoder self: ...'."""
    from app_pages import open_page

    at = open_page("pages/2_Attention_Explorer.py", {"kind": "encoder"}, tab="step")
    assert not at.exception, at.exception
    text = "\n".join(_captions(at))
    assert "Encoder self" not in text and "Encoder self-attention: each source piece" not in text
    assert "masked decoder self-attention and the encoder-decoder (cross) attention of each step" in text


def test_scaled_dot_product_maps_use_the_tables_names(checkpoints):
    from app_pages import charts, open_page

    from aiayn import lessons

    at = open_page("pages/5_Scaled_Dot_Product.py")
    assert not at.exception, at.exception
    q, k, v = lessons.example_qkv()
    out = charts(at)["m_output"]["data"][0]
    assert list(out["x"]) == list(v.columns) and list(out["y"]) == [f"q{i}" for i in q.index]
    assert list(charts(at)["m_scores"]["data"][0]["x"]) == [f"k{i}" for i in k.index]
    assert any("count from 0 in the tables and in the maps" in m.value for m in at.markdown)


def _warnings(at) -> str:
    return "\n".join(str(w.value) for w in at.warning)


@pytest.mark.parametrize("page", ["pages/1_Translate.py", "pages/2_Attention_Explorer.py"])
def test_german_typed_into_en_de_gets_a_hint(checkpoints, page):
    from app_pages import open_page

    at = open_page(page)
    assert not at.exception, at.exception
    assert "looks like" not in _warnings(at)  # the default English sentence
    at = open_page(page, {"text": "Ich habe heute keine Zeit für dich."})
    assert not at.exception, at.exception
    assert "This looks like German, but this model translates English → German" in _warnings(at)
    at = open_page(page, {"text": "I have no time for you today."})
    assert "looks like" not in _warnings(at)


def test_english_typed_into_de_en_gets_a_hint(checkpoints):
    from app_pages import open_page

    at = open_page("pages/1_Translate.py", {"direction": "de-en", "text": "Where is the train station?"})
    assert not at.exception, at.exception
    assert "This looks like English, but this model translates German → English" in _warnings(at)
    assert "looks like" not in _warnings(open_page("pages/1_Translate.py", {"direction": "de-en"}))


def test_masking_names_the_languages(checkpoints):
    from app_pages import open_page

    at = open_page("pages/4_Masking.py")
    assert not at.exception, at.exception
    labels = [t.label for t in at.text_input] + [t.label for t in at.text_area]
    assert "Source sentence (English)" in labels and any(lb.startswith("Decoder input (German)") for lb in labels)
    assert any("batch of English sentences" in lb for lb in labels)
    assert not any("(en)" in lb or "(de)" in lb or " en sentences" in lb for lb in labels)


def test_ablation_and_rollout_say_only_what_is_true(checkpoints):
    from app_pages import open_page

    at = open_page("pages/7_Head_Ablation.py")
    assert not at.exception, at.exception
    text = _texts(at)
    assert "curated sentences of this direction" in text and "do not exist yet" not in text
    at = open_page("pages/8_Attention_Rollout.py")
    assert not at.exception, at.exception
    text = _texts(at)
    assert "Abnar and Zuidema use $r = 0.5$" in text and "the paper uses" not in text
