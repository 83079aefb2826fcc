"""The app frame: Overview page, sidebar navigation, shared direction, URL state, missing checkpoints."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
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
    # every page of PAGES exists and the sidebar links it, in PAGES order
    assert all((REPO / path).is_file() for path, _, _ in ui.PAGES)
    labels = [el.proto.label for el in at.get("page_link")]
    names = [label for _, label, _ in ui.PAGES]
    assert [label for label in labels if label in names] == names  # the Overview's own links are in bold


def test_direction_bound_to_url(checkpoints):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["direction"] = "de-en"
    at.run()
    assert not at.exception
    assert at.radio(key="direction").value == "de-en"
    assert "German → English" in _texts(at)
    # the frame's widgets are bound to the URL and Streamlit carries them: a link repeating them doubled them in the URL
    from urllib.parse import parse_qs

    qs = [parse_qs(el.proto.query_string) for el in at.get("page_link")]
    assert qs and not any("direction" in q or "presenter" in q for q in qs)
    # the direction belongs to the frame that runs every page: it stays through a page change
    at.switch_page("pages/1_Translate.py").run()
    assert not at.exception, at.exception
    assert at.radio(key="direction").value == "de-en" and at.query_params["direction"] == "de-en"
    assert at.text_input(key="tr_text").label == "Sentence in German"


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


def test_presenter_mode_sets_large_page_type(checkpoints):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["presenter"] = "true"
    at.run()
    assert not at.exception
    assert at.toggle(key="presenter").value is True
    css = " ".join(str(h.proto) for h in at.get("html"))
    assert f"font-size: {ui.PRESENTER_FONT_SIZE}px" in css
    at.toggle(key="presenter").set_value(False).run()
    assert not any("font-size" in str(h.proto) for h in at.get("html"))


def _probe_page():
    """A page with one heatmap drawn the way the pages draw theirs (colour scale from the frame)."""
    import plotly.graph_objects as go
    import streamlit as st

    from aiayn import app as ui

    ctx = ui.setup_page("Frame probe")
    st.write(f"colorscale={ctx.colorscale} template={ctx.template}")
    fig = go.Figure(go.Heatmap(z=[[0.0, 1.0], [1.0, 0.0]], colorscale=ctx.colorscale, colorbar=dict(title="w")))
    fig.update_layout(title="probe", xaxis_title="key", yaxis_title="query")
    fig.add_annotation(x=0, y=0, text="note")
    ui.show_figure(fig, key="probe", filename="probe chart")


def _probe(params: dict[str, str]):
    at = AppTest.from_function(_probe_page, default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    chart = at.get("plotly_chart")[0].proto
    return at, json.loads(chart.spec), json.loads(chart.config)


def test_presenter_mode_switches_colour_scale_and_chart_type(checkpoints):
    import plotly.colors

    at, normal, config = _probe({})
    assert "colorscale=Viridis" in _texts(at)
    assert [c[1] for c in normal["data"][0]["colorscale"]] == [c[1] for c in plotly.colors.get_colorscale("Viridis")]
    assert "size" not in normal["layout"].get("font", {}) and "tickfont" not in normal["layout"]["xaxis"]
    assert config["toImageButtonOptions"] == {"format": "png", "filename": "probe_chart", "scale": 2}

    at, big, config = _probe({"presenter": "true", "export": "svg"})
    size = ui.PRESENTER_FONT_SIZE
    assert "colorscale=Cividis" in _texts(at)
    assert [c[1] for c in big["data"][0]["colorscale"]] == [c[1] for c in plotly.colors.get_colorscale("Cividis")]
    # large type set on every element (Streamlit's chart theme would override a layout-level font alone)
    lay = big["layout"]
    assert lay["font"]["size"] == size and lay["title"]["font"]["size"] == size + 4
    assert lay["hoverlabel"]["font"]["size"] == size and lay["legend"]["font"]["size"] == size
    for axis in ("xaxis", "yaxis"):
        assert lay[axis]["tickfont"]["size"] == size - 2 and lay[axis]["title"]["font"]["size"] == size
    assert lay["annotations"][0]["font"]["size"] == size
    assert big["data"][0]["colorbar"]["tickfont"]["size"] == size - 2
    assert big["data"][0]["colorbar"]["title"]["font"]["size"] == size
    assert lay["height"] == 480
    assert config["toImageButtonOptions"] == {"format": "svg", "filename": "probe_chart", "scale": 1}


def test_checkpoint_info_reads_config_without_torch(tiny_checkpoints):
    import subprocess
    import sys

    code = ("import sys; from aiayn.app import models; info = models.checkpoint_info('en-de'); "
            "print(info.cfg.d_model, info.meta['num_parameters'] > 0, 'torch' in sys.modules)")
    env = {**__import__("os").environ, "AIAYN_CHECKPOINTS": str(tiny_checkpoints)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    assert out.stdout.split() == ["64", "True", "False"]


def test_checkpoint_info_names_the_file_at_fault(tmp_path, monkeypatch, tiny_checkpoints):
    import shutil

    from aiayn.checkpoint_format import FORMAT_VERSION, SPM_FILE

    root = tmp_path / "ckpts"
    shutil.copytree(tiny_checkpoints, root)
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    assert ui.checkpoint_info("de-en").cfg.d_model == 64
    (root / "en-de" / SPM_FILE).unlink()
    with pytest.raises(ui.ModelUnavailable, match="checkpoint file missing: .*spm.model"):
        ui.checkpoint_info("en-de")
    cfg_file = root / "de-en" / "config.json"
    config = json.loads(cfg_file.read_text())
    cfg_file.write_text(json.dumps({**config, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ui.ModelUnavailable, match="format_version"):
        ui.checkpoint_info("de-en")
    cfg_file.write_text(json.dumps({**config, "model": "d_model=64"}))
    with pytest.raises(ui.ModelUnavailable, match="invalid model config"):
        ui.checkpoint_info("de-en")
    shutil.rmtree(root / "de-en")
    with pytest.raises(ui.ModelUnavailable, match="no checkpoint directory"):
        ui.checkpoint_info("de-en")


def test_warm_imports_starts_one_thread_per_process():
    st.cache_resource.clear()
    first = ui.warm_imports()
    assert ui.warm_imports() is first and first.daemon
    first.join(timeout=60)
    assert not first.is_alive()
    st.cache_resource.clear()


def test_page_paths_resolve_from_the_repository_root(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert all(ui.page_exists(path) for path, _, _ in ui.PAGES if (REPO / path).is_file())
    assert not ui.page_exists("pages/0_Missing.py")


def test_checkpoints_dir_defaults_to_the_shipped_checkpoints(monkeypatch, tmp_path):
    monkeypatch.delenv("AIAYN_CHECKPOINTS", raising=False)
    assert ui.checkpoints_dir() == REPO / "checkpoints"
    assert ui.checkpoint_path("de-en") == REPO / "checkpoints" / "de-en"
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tmp_path))
    assert ui.checkpoint_path("en-de") == tmp_path / "en-de"
    with pytest.raises(ValueError, match="unknown direction"):
        ui.checkpoint_path("fr-en")


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


def test_url_numbers_parse_whole_and_real_numbers_and_refuse_nan():
    from aiayn.app.params import is_float, is_int, parse_number

    assert parse_number("3", int) == 3 and parse_number("-2", int) == -2
    assert parse_number("3.5", int) is None and parse_number("three", int) is None
    assert parse_number("0.6", float) == pytest.approx(0.6) and parse_number("1e-1", float) == pytest.approx(0.1)
    assert parse_number("nan", float) is None and not is_float("NaN")  # NaN would pass every range check otherwise
    assert is_int("7") and not is_int("7.0") and is_float("7.0")


# ----------------------------------------------------------------------------------------------- issue 14
def _emoji(text: str) -> list[str]:
    """Characters that need an emoji or symbol font: Unicode category So (pictographs, dingbats, arrows such as
    ⬇), the Extended_Pictographic ones outside it (〰 U+3030, 〽 U+303D), the emoji blocks and U+FE0F."""
    import unicodedata

    return [c for c in text if unicodedata.category(c) == "So" or c in "\u3030\u303d\ufe0f"
            or 0x1F000 <= ord(c) <= 0x1FAFF]


def test_emoji_detector_catches_the_old_page_icons():
    assert all(_emoji(icon) for icon in ("🏠", "🌐", "🔍", "〰️", "🎭", "✖️", "📈", "⬇", "🚫", "⚠️"))
    assert not _emoji(":material/home: → · π ① – ×")


def test_page_icons_are_material_icons_not_emoji(checkpoints):
    """Issue 14: every page icon was an emoji, an empty box on a machine without an emoji font."""
    from streamlit.string_util import validate_material_icon

    for path, label, icon in ui.PAGES:
        assert icon.startswith(":material/") and icon.endswith(":") and not _emoji(icon), (path, icon)
        validate_material_icon(icon)  # a name Streamlit knows (raises otherwise)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    links = at.get("page_link")
    assert len(links) >= len(ui.PAGES)
    for el in links:
        assert el.proto.icon.startswith(":material/") and not _emoji(el.proto.icon + el.proto.label), el.proto
    assert not _emoji(" ".join(str(t.value) for t in at.title))
    for box in list(at.info) + list(at.success) + list(at.error) + list(at.warning):
        assert not _emoji(str(box.proto.icon)), box.proto.icon


def test_sidebar_does_not_show_the_servers_checkpoint_path(checkpoints):
    """Issue 14: the sidebar printed the checkpoint directory, shown on the classroom projector."""
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    shown = " ".join(str(e.value) for e in list(at.sidebar.markdown) + list(at.sidebar.caption))
    assert "aiayn" in shown  # the sidebar was read
    assert str(ui.checkpoints_dir()) not in shown and "Checkpoints:" not in shown
    assert str(ui.checkpoints_dir()) not in _texts(at)


def test_overview_score_line_is_readable(tmp_path, monkeypatch, tiny_checkpoints):
    """Issue 14: the score line showed raw keys (``test_scores.dictionary_baseline_bleu = 1.7``)."""
    import shutil

    from aiayn.evaluation.modelcard import record_scores

    root = tmp_path / "ckpts"
    shutil.copytree(tiny_checkpoints, root)
    record_scores(root / "en-de", {"n_sentences": 1000, "scores": {"model": {"bleu": 6.47, "chrf": 26.98},
                                                                   "dictionary_baseline": {"bleu": 1.74, "chrf": 25.87}}})
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    line = [m.value for m in at.markdown if "BLEU" in m.value and "dictionary baseline" in m.value]
    assert line and "test BLEU 6.5, chrF 27.0 (dictionary baseline BLEU 1.7, chrF 25.9)" in line[0]
    assert "1,000 held-out test sentences" in line[0]
    assert not any("test_scores" in m.value or "_bleu" in m.value for m in at.markdown)


def test_architecture_figure_text_reads_at_projector_size():
    """Issue 14: the architecture figure's text was about 6 px high at 1366 px. The Overview shows it in one
    of two equal columns, about 420 px wide at 1366 px (measured in Chromium, see pages/0_Overview.py); every font size
    of the SVG, scaled to that width, must be at least 11 px."""
    import re
    import xml.etree.ElementTree as ET

    svg = (REPO / "assets" / "architecture.svg").read_text()
    root = ET.fromstring(svg)
    view_w = float(root.get("viewBox").split()[2])
    sizes = [float(v) for v in re.findall(r"font-size(?:=\"|:\s*)([0-9.]+)", svg)]
    assert sizes
    assert min(sizes) * 420 / view_w >= 11, (min(sizes), view_w)
    app_src = (REPO / "pages" / "0_Overview.py").read_text()
    assert "st.columns([1, 1]" in app_src  # the figure's column: half the page, not two fifths


def test_presenter_mode_makes_every_chart_taller():
    """Issue 14 (Layout): presenter mode enlarged type but left most charts at their height (a 460 px chart
    got 480 px, a 600 px one nothing)."""
    import plotly.graph_objects as go

    from aiayn.app.charts import PRESENTER_MIN_HEIGHT, prepare_figure

    for h in (None, 300, 400, 460, 600, 900):
        fig = prepare_figure(go.Figure(go.Scatter(y=[1, 2]), layout=dict(height=h)), presenter=True)
        assert fig.layout.height >= max(PRESENTER_MIN_HEIGHT, 1.25 * (h or 0)), (h, fig.layout.height)
        plain = prepare_figure(go.Figure(go.Scatter(y=[1, 2]), layout=dict(height=h)), presenter=False)
        assert plain.layout.height == h
    # an explicit height still wins
    assert prepare_figure(go.Figure(), presenter=True, height=333).layout.height == 333


def test_downloads_say_that_layers_and_heads_count_from_zero():
    """Issue 14: downloads count layers and heads from 0 while the app counts from 1: every export says so."""
    import pandas as pd

    from aiayn.app.downloads import export_frame, export_json

    df = pd.DataFrame({"kind": ["cross"], "layer": [0], "head": [2], "weight": [0.5]})
    out = export_frame(df)
    assert list(out.columns) == ["kind", "layer_from_0", "head_from_0", "weight"]
    assert out["layer_from_0"].tolist() == [0] and out["head_from_0"].tolist() == [2]
    assert list(df.columns) == ["kind", "layer", "head", "weight"]  # the caller's frame is not changed
    untouched = pd.DataFrame({"position": [0, 1]})
    assert export_frame(untouched) is untouched
    obj = json.loads(export_json(json.dumps({"layer": 1, "weights": [[0.5]]})))
    assert obj == {"layers_and_heads_count_from": 0, "layer": 1, "weights": [[0.5]]}
    assert list(obj)[0] == "layers_and_heads_count_from"
    assert json.loads(export_json({"a": 1}))["layers_and_heads_count_from"] == 0
    records = json.loads(export_json(df.to_json(orient="records")))
    assert records == [{"kind": "cross", "layer_from_0": 0, "head_from_0": 2, "weight": 0.5}]
    assert json.loads(export_json([1, 2])) == [1, 2]
    with pytest.raises(ValueError):
        export_json("{not json")


def test_download_buttons_have_no_emoji_and_name_the_numbering(checkpoints):
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("pages/6_Model_and_Training.py")
    at.run()
    assert not at.exception, at.exception
    buttons = at.get("download_button")
    assert buttons
    for b in buttons:
        assert not _emoji(b.proto.label) and b.proto.label in ("CSV", "JSON"), b.proto.label
        assert b.proto.icon == ":material/download:"
        assert "count from 0" in b.proto.help and "count from 1" in b.proto.help


def test_server_uses_two_torch_threads_at_most_unless_told_otherwise(tiny_checkpoints, monkeypatch):
    """The server's one decode job at a time gets two intra-op threads, one on a one-core machine
    (AIAYN_TORCH_THREADS overrides; a bad value is a clear ModelUnavailable on the page, not a traceback)."""
    import streamlit as st
    import torch

    from aiayn.app import models

    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tiny_checkpoints))
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv(models.THREADS_ENV, raising=False)
        for cores, threads in ((1, 1), (2, 2), (16, 2)):
            monkeypatch.setattr(models, "usable_cores", lambda cores=cores: cores)
            assert models.serving_threads() == threads
        monkeypatch.setenv(models.THREADS_ENV, "1")
        assert models.serving_threads() == 1
        for bad in ("0", "two", "-1", "1.5"):
            monkeypatch.setenv(models.THREADS_ENV, bad)
            with pytest.raises(ValueError, match=models.THREADS_ENV):
                models.serving_threads()
            st.cache_resource.clear()
            with pytest.raises(models.ModelUnavailable, match=models.THREADS_ENV):
                models.load_translator("en-de")
        monkeypatch.setenv(models.THREADS_ENV, "2")
        st.cache_resource.clear()
        models.load_translator("en-de")
        assert torch.get_num_threads() == 2
        monkeypatch.delenv(models.THREADS_ENV)
        monkeypatch.setattr(models, "usable_cores", lambda: 1)  # the default reaches torch: 1 on a one-core machine
        st.cache_resource.clear()
        models.load_translator("de-en")
        assert torch.get_num_threads() == 1
    finally:
        st.cache_resource.clear()
        torch.set_num_threads(before)


def test_a_visit_to_the_masking_page_keeps_the_explorers_layer_and_head(checkpoints):
    """Issue 14: the masking page bound its integer pickers to the explorer's keys (``layer``, ``head``), so a visit
    there reset the explorer's head ("mean" is no masking head). Its pickers are ``dec_layer`` / ``dec_head`` now."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("pages/2_Attention_Explorer.py")
    at.run()
    at.selectbox(key="layer").set_value("1").run()
    assert at.segmented_control(key="head").value == "mean"
    at.switch_page("pages/4_Masking.py")
    at.run()
    assert not at.exception, at.exception
    at.selectbox(key="dec_head").set_value(3).run()
    assert not at.exception, at.exception
    at.switch_page("pages/2_Attention_Explorer.py")
    at.run()
    assert not at.exception, at.exception
    assert at.segmented_control(key="head").value == "mean" and at.selectbox(key="layer").value == "1"


def test_server_decodes_sessions_through_one_queue_per_model(tiny_checkpoints, monkeypatch):
    """Every session's explained sentences go through one DecodeQueue per checkpoint (AIAYN_MAX_BATCH sets its
    batch, 1 = never batch; a bad value is a clear ModelUnavailable on the page); explain_sentence uses it."""
    import streamlit as st

    from aiayn.app import models, results
    from aiayn.serving import DEFAULT_MAX_BATCH

    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tiny_checkpoints))
    try:
        monkeypatch.delenv(models.BATCH_ENV, raising=False)
        st.cache_resource.clear()
        q = models.decode_queue("en-de")
        assert q.max_batch == DEFAULT_MAX_BATCH and q is models.decode_queue("en-de")
        assert q.translator is models.load_translator("en-de") and q is not models.decode_queue("de-en")
        st.cache_data.clear()
        t = results.explain_sentence("en-de", "Good morning.")
        assert q.stats.turns == 1 and q.stats.sentences == 1 and t.batch_size == 1
        for bad in ("0", "many", "-3"):
            monkeypatch.setenv(models.BATCH_ENV, bad)
            st.cache_resource.clear()
            with pytest.raises(models.ModelUnavailable, match=models.BATCH_ENV):
                models.decode_queue("en-de")
        monkeypatch.setenv(models.BATCH_ENV, "1")
        st.cache_resource.clear()
        assert models.decode_queue("de-en").max_batch == 1
    finally:
        st.cache_resource.clear()
        st.cache_data.clear()


def test_the_explorers_tab_is_in_the_url(checkpoints):
    """A link copied on the Step-by-step tab opened "One head": the open tab is in the URL (``?tab=step``), the first
    tab is left out, an unknown tab is reported."""
    from app_pages import charts, open_page

    at = open_page("pages/2_Attention_Explorer.py", {"tab": "step"})
    assert not at.exception, at.exception
    assert "step_decoder" in charts(at) and "head_view" not in charts(at)
    assert at.query_params["tab"] == "step"
    at = open_page("pages/2_Attention_Explorer.py")
    assert "head_view" in charts(at) and "tab" not in at.query_params
    at = open_page("pages/2_Attention_Explorer.py", {"tab": "sideways"})
    assert not at.exception, at.exception
    assert any("tab=sideways" in w.value for w in at.warning) and "head_view" in charts(at)


def _form_page():
    import streamlit as st

    from aiayn.app.state import link_params, seed_form, write_view

    seeded = seed_form("probe", ("text",), "en-de", from_url=lambda: {"p_text": st.query_params.get("text", "default")})
    text = st.text_input("Sentence", key="p_text", persist_state="session")
    write_view("probe", {"text": None if text == "default" else text})
    st.write(f"seeded={seeded} link={link_params('probe')}")


def test_a_page_view_is_seeded_from_the_url_only_when_the_url_holds_another_view():
    """The one seeding rule of every form page (aiayn.app.state): the URL seeds the form on the first run and when it
    differs from the view the page last wrote (a link, Back / Forward); otherwise the session's values stay; defaults
    stay out of the URL; the link to the page carries its view."""
    at = AppTest.from_function(_form_page, default_timeout=30)
    at.query_params["text"] = "from a link"
    at.run()
    assert not at.exception, at.exception
    said = lambda: [m.value for m in at.markdown if str(m.value).startswith("seeded=")][0]  # noqa: E731
    assert at.text_input(key="p_text").value == "from a link" and said().startswith("seeded=url")
    assert "'text': 'from a link'" in said()  # the link to the page carries the view
    at.text_input(key="p_text").set_value("typed").run()  # the user's own value: kept, written to the URL
    assert at.text_input(key="p_text").value == "typed" and at.query_params["text"] == "typed"
    assert said().startswith("seeded=None")
    at.query_params["text"] = "from a link"  # Back to the older view
    at.run()
    assert at.text_input(key="p_text").value == "from a link" and said().startswith("seeded=url")
    at.text_input(key="p_text").set_value("default").run()  # the default leaves the URL
    assert "text" not in at.query_params and said() == "seeded=None link={}"


def test_the_sidebar_links_carry_each_pages_last_view(checkpoints):
    """A link to a page carries the view the page last wrote (so arriving by it changes nothing and adds no history
    entry); the link to the page just shown carries the view of this run, not of the one before."""
    from urllib.parse import parse_qs

    from app_pages import open_page

    at = open_page("pages/1_Translate.py", {"text": "Good morning", "beam": "2"})
    assert not at.exception, at.exception

    def links() -> dict[str, dict]:
        return {el.proto.label: parse_qs(el.proto.query_string) for el in at.sidebar.get("page_link")}

    assert links()["Translate"] == {"text": ["Good morning"], "beam": ["2"]}
    assert links()["Masking"] == {} and links()["Attention explorer"] == {}
    at.number_input(key="tr_beam").set_value(3)
    at.button[0].click().run()  # the form's submit button
    assert links()["Translate"] == {"text": ["Good morning"], "beam": ["3"]}


def test_after_a_page_changed_its_view_only_its_own_link_is_drawn_again(checkpoints, monkeypatch):
    """The sidebar draws every page's link before the page runs; afterwards it replaces only the links whose page
    changed its view (each link's element in place), not the whole list: a class's sessions each sent a dozen more
    elements when every link was drawn twice. No link is duplicated or lost."""
    from app_pages import open_page

    from aiayn.app import frame

    calls: list[tuple[str, bool]] = []
    real = frame.page_link
    monkeypatch.setattr(frame, "page_link", lambda path, **kw: (calls.append((path, kw.get("into") is not None)),
                                                                  real(path, **kw))[1])
    at = open_page("pages/1_Translate.py", {"text": "Good morning"})
    assert not at.exception, at.exception
    pages = [path for path, _, _ in frame.PAGES]
    last_draw = max(i for i, (path, into) in enumerate(calls) if path == pages[0] and not into)
    redrawn = [path for path, into in calls[last_draw:] if into]
    assert [path for path, into in calls[last_draw:last_draw + len(pages)]] == pages  # the list, once
    assert redrawn == ["pages/1_Translate.py"]  # the page that changed its view (its text), alone
    labels = [el.proto.label for el in at.sidebar.get("page_link")]
    assert sorted(labels) == sorted(label for _, label, _ in frame.PAGES)  # each page once


def test_the_class_pages_announce_their_sentence_and_take_it_back(checkpoints, monkeypatch):
    """Translate and the explorer announce the sentence they will ask for when their run starts (so a gathering
    class waits for them: aiayn.serving.Announcements); other pages do not; no announcement outlives its run, whether
    the sentence was decoded (the job takes it back) or came from the cache (the page withdraws it)."""
    from app_pages import open_page

    from aiayn.app import frame, models

    pages: list[str] = []
    real = frame.announce_sentence
    monkeypatch.setattr(frame, "announce_sentence", lambda *a: (pages.append("announced"), real(*a)))
    at = AppTest.from_file(APP, default_timeout=60).run()  # the Overview
    assert not at.exception and pages == []
    for path in ("pages/1_Translate.py", "pages/2_Attention_Explorer.py"):
        at = open_page(path, {"text": "Good morning"})
        assert not at.exception, at.exception
        at.run()  # again: the sentence now comes from the cache
        assert not at.exception, at.exception
    assert pages == ["announced"] * 4
    assert len(models.announcements()) == 0
