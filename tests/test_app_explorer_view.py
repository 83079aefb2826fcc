"""Attention explorer, issue 14 (AppTest against tiny random checkpoints): the view reads right in a classroom.

Material icons instead of emoji, the all-heads grid (labels, the picked head framed, a click opens a head), the
step-by-step titles keep ``</s>`` and the single cross-attention row is scaled to its maximum, word mode labels
rows "fed word → predicted", undefined head statistics are n/a (never 0.000), and presenter mode makes every
chart taller. Layout in a real browser: ``tests/e2e/test_layout.py``.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from app_pages import arr, charts, open_page

PAGE = "pages/2_Attention_Explorer.py"
SENT, REF = "I have no time.", "Ich habe keine Zeit."
EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2300-\u23FF\u2600-\u27BF\u2B00-\u2BFF]")


def run(query=None, tab=None):
    at = open_page(PAGE, query, tab=tab)
    assert not at.exception, at.exception
    return at


@pytest.fixture(scope="module")
def forced(tiny_checkpoints):
    """The teacher-forced maps of SENT / REF, computed without the page."""
    from aiayn import Translator

    tr = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    return tr.force(SENT, REF)[0]


def test_tabs_buttons_and_hint_use_material_icons_not_emoji(checkpoints):
    at = run(tab="stats")
    labels = [t.label for t in at.tabs]
    assert len(labels) >= 5 and all(lbl.startswith(":material/") for lbl in labels[:5]), labels
    assert not any(EMOJI.search(lbl) for lbl in labels), labels
    assert all(not EMOJI.search(i.icon or "") for i in at.info), [i.icon for i in at.info]
    stats_csv = [b for b in at.get("download_button") if "Head statistics" in b.proto.label]
    assert stats_csv and all(not EMOJI.search(b.proto.label) for b in stats_csv)


def test_all_heads_grid_frames_the_picked_head_and_is_clickable(checkpoints):
    at = run({"layer": "2", "head": "3"}, tab="all")
    mv = charts(at)["model_view"]
    heat = [t for t in mv["data"] if t["type"] == "heatmap"]
    marks = [t for t in mv["data"] if t["type"] == "scatter"]
    L, H = 2, 4  # the tiny model
    assert len(heat) == len(marks) == L * H
    assert [m["customdata"] for m in marks] == [[[layer, head]] for layer in range(1, L + 1) for head in range(1, H + 1)]
    # the picked head is framed in the browser (a style on that subplot; the grid's figure stays the same)
    styles = [h.proto.body for h in at.get("html") if "nsewdrag" in h.proto.body]
    assert styles and all('.st-key-model_view rect.nsewdrag[data-subplot="x7y7"]' in x for x in styles)
    assert all('data-subplot="x6y6"' not in x and "stroke:" in x for x in styles)  # layer 2, head 3 only
    # token labels on the first column and the last row; hover names each label once
    assert mv["layout"]["yaxis"]["showticklabels"] and mv["layout"][f"xaxis{L * H}"]["showticklabels"]
    assert not re.search(r"query \d+:", heat[0]["hovertemplate"])
    assert "layer 1, head 1<br>query (decoder input → output): %{y}<br>key (source): %{x}" in heat[0]["hovertemplate"]
    # the chart sends selection events (clicks on the markers)
    el = next(e for e in at.get("plotly_chart") if e.proto.id.endswith("-model_view"))
    from streamlit.proto.PlotlyChart_pb2 import PlotlyChart

    assert list(el.proto.selection_mode) == [PlotlyChart.SelectionMode.POINTS]
    at = run({"head": "mean", "layer": "1"}, tab="all")
    (style,) = [h.proto.body for h in at.get("html") if "nsewdrag" in h.proto.body]
    assert all(f'data-subplot="x{n}y{n}"' in style for n in ("", 2, 3, 4)) and 'x5y5' not in style  # the row
    assert charts(at)["model_view"] == mv  # the grid's figure does not change with the head: no browser redraw


def test_a_clicked_thumbnail_opens_that_head():
    """The grid's selection callback sets the layer and head controls and opens the one-head tab."""

    def script():
        import streamlit as st

        from aiayn.app.explorer import TAB_LABELS, open_picked_head

        if "model_view" not in st.session_state:
            st.session_state["model_view"] = {"selection": {"points": [{"curve_number": 13, "customdata": [2, 3]}]}}
            open_picked_head()
        st.write(st.session_state.get("layer"), st.session_state.get("head"),
                 st.session_state.get("tab") == TAB_LABELS["head"])

    at = AppTest.from_function(script, default_timeout=30).run()
    assert not at.exception, at.exception
    assert at.session_state["layer"] == "2" and at.session_state["head"] == "3"
    assert "One head" in at.session_state["tab"]


def test_step_titles_keep_eos_and_the_cross_row_is_scaled_to_its_max(checkpoints, forced):
    T = len(forced.output_tokens)
    assert forced.output_tokens[-1] == "</s>"
    at = run({"mode": "forced", "text": SENT, "ref": REF, "step": str(T), "head": "2"}, tab="step")
    c = charts(at)
    assert "next: &lt;/s&gt;, p = " in c["step_topk"]["layout"]["title"]["text"]
    row = forced.attention.cross[-1, 0, 1, T - 1].numpy()
    cross = c["step_cross"]["data"][0]
    assert np.allclose(arr(cross["z"]), row[None], atol=1e-5)
    assert cross["zmax"] == pytest.approx(float(row.max()), abs=1e-5) and cross["zmax"] < 1
    assert "row max" in cross["colorbar"]["title"]["text"]


def test_word_mode_rows_read_fed_word_to_predicted(checkpoints, forced):
    at = run({"mode": "forced", "text": SENT, "ref": REF, "words": "true"})
    y = charts(at)["head_view"]["data"][0]["y"]
    assert all(re.fullmatch(r"\d+:[^→]+→.+", lbl) for lbl in y), y
    assert y[0].startswith("0:&lt;s&gt;→") and y[-1].endswith("&lt;/s&gt;")
    # the fed words, by hand: <s>, then a new word at each ▁ piece or punctuation-only piece
    fed = forced.decoder_input_tokens
    starts = [i for i, p in enumerate(fed) if i == 0 or p.startswith("▁") or p.strip("▁") in {".", ",", "!", "?"}
              or (i > 0 and fed[i - 1] in {"<s>", ".", ",", "!", "?"})]
    assert len(y) == len(starts)


def test_undefined_head_statistics_are_na_not_zero(checkpoints):
    at = run(tab="stats")  # cross-attention: the source has no <s>; self/previous/next not defined
    df = at.dataframe[0].value
    assert df["bos"].isna().all() and df["eos"].notna().all()
    assert at.dataframe[0].proto.placeholder == "–"  # how the browser shows a missing value (default: "None")
    at = run({"kind": "decoder"}, tab="stats")
    df = at.dataframe[0].value
    assert df["eos"].isna().all() and df["next"].isna().all() and df["bos"].notna().all()
    assert df["previous"].notna().all()


def test_presenter_mode_makes_every_chart_taller(checkpoints):
    def every_tab(query=None):
        return {k: v for tab in ("head", "all", "step", "stats") for k, v in charts(run(query, tab=tab)).items()}

    normal, big = every_tab(), every_tab({"presenter": "true"})
    keys = {"head_view", "model_view", "step_decoder", "step_cross", "stats_grid"}
    assert keys <= set(normal) and keys <= set(big)
    for key in keys | ({"step_topk"} & set(normal)):
        assert big[key]["layout"]["height"] > normal[key]["layout"]["height"], key
