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


@pytest.mark.parametrize("direction, steps, runs, start", [("en-de", "10,000", 2, "8,000"), ("de-en", "13,602", 3, "12,000")])
def test_overview_shows_lifetime_totals_and_the_warm_starts(shipped, direction, steps, runs, start):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["direction"] = direction
    at.run()
    assert not at.exception, at.exception
    text = _texts(at)
    assert f"**Training steps:** {steps} over {runs} runs" in text
    assert f"warm start from the trained parent at lifetime step {start}" in text
    assert "**Training steps:** 2,000" not in text and "**Training steps:** 1,602" not in text


def test_model_and_training_lists_the_runs_and_says_the_curves_are_the_last_one(shipped):
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page("pages/6_Model_and_Training.py")
    at.run()
    assert not at.exception, at.exception
    text = _texts(at)
    assert "**Training steps:** 10,000 over 2 runs" in text
    assert "its step 0 is lifetime step 8,000, the weights of a trained parent" in text
    frames = [df.value for df in at.dataframe if "lifetime steps" in df.value.columns]
    assert frames and list(frames[0]["lifetime steps"]) == ["1–8,000", "8,001–10,000"]
    assert {m.label for m in at.metric} >= {"steps logged (last run)", "wall time (last run)"}
