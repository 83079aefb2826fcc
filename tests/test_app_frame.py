"""The app frame: Overview page, sidebar navigation, shared direction, URL state, missing checkpoints."""
from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

from aiayn import app as ui

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")


def _texts(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [t.value for t in at.title]
    parts += [e.value for e in at.error] + [w.value for w in at.warning]
    return "\n".join(map(str, parts))


def test_overview_renders_model_card_and_links(checkpoints):
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    assert not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["d_model"] == "64" and metrics["N (layers)"] == "2" and metrics["h (heads)"] == "4"
    assert "tiny random test model" in _texts(at)
    # the sidebar links every page that exists, in PAGES order
    labels = [el.proto.label for el in at.get("page_link")]
    for path, label, _ in ui.PAGES:
        if (REPO / path).is_file():
            assert label in labels, path


def test_direction_bound_to_url(checkpoints):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["direction"] = "de-en"
    at.run()
    assert not at.exception
    assert at.radio(key="direction").value == "de-en"
    assert "German → English" in _texts(at)
    # the shared direction travels with the navigation links
    from urllib.parse import parse_qs

    qs = [parse_qs(el.proto.query_string) for el in at.get("page_link")]
    assert qs and all(q.get("direction") == ["de-en"] for q in qs)


def test_switching_direction_changes_model(checkpoints):
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert "English → German" in _texts(at)
    at.radio(key="direction").set_value("de-en").run()
    assert not at.exception
    assert "German → English" in _texts(at)


def test_bad_url_parameters_warn_and_fall_back(checkpoints):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["direction"] = "xx"
    at.query_params["presenter"] = "maybe"
    at.run()
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    assert "direction=xx" in warnings and "presenter=maybe" in warnings
    assert at.radio(key="direction").value == "en-de"


def test_missing_checkpoint_shows_error_not_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tmp_path))
    st.cache_resource.clear()
    (tmp_path / "en-de").mkdir()
    (tmp_path / "en-de" / "config.json").write_text("{not json")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert at.error, "a missing/corrupt checkpoint must be reported in the page"
    assert "config.json" in at.error[0].value


def test_presenter_mode_switches_colour_scale(checkpoints):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["presenter"] = "true"
    at.run()
    assert not at.exception
    assert at.toggle(key="presenter").value is True
    css = " ".join(str(h.proto) for h in at.get("html"))
    assert f"font-size: {ui.PRESENTER_FONT_SIZE}px" in css
    at.toggle(key="presenter").set_value(False).run()
    assert not any("font-size" in str(h.proto) for h in at.get("html"))


def test_overview_compares_test_scores_with_the_dictionary_baseline(tmp_path, monkeypatch, tiny_checkpoints):
    import shutil

    from aiayn.evaluation.modelcard import record_scores

    root = tmp_path / "ckpts"
    shutil.copytree(tiny_checkpoints, root)
    record_scores(root / "en-de", {"n_sentences": 1000, "scores": {"model": {"bleu": 4.2, "chrf": 23.1},
                                                                   "dictionary_baseline": {"bleu": 1.7, "chrf": 25.9}}})
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    infos = " ".join(i.value for i in at.info)
    assert "on one score only" in infos and "4.2 / chrF 23.1" in infos and "1.7 / 25.9" in infos
    assert not at.success
