"""Attention explorer page (AppTest against tiny random checkpoints): every control changes the view."""
from __future__ import annotations

import numpy as np
import pytest

from app_pages import arr, charts, open_page

PAGE = "pages/2_Attention_Explorer.py"
SENT = "I have no time."


def run(query=None, tab=None):
    return open_page(PAGE, query, tab=tab)


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    """What the page must show, computed independently of the page (translator + model directly)."""
    from aiayn import Translator

    tr = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    t = tr.translate(SENT, beam_size=4, length_penalty=0.6, n_best=4)
    forced, probs = tr.force(SENT, "Ich habe keine Zeit.")
    return tr, t, forced, probs


def esc(label: str) -> str:
    """Plotly reads labels as HTML: the page must escape <, > and & (so <s> does not strike through)."""
    return label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_default_view_is_cross_attention_of_the_models_output(checkpoints, reference):
    _, t, _, _ = reference
    at = run()
    assert not at.exception, at.exception
    c = charts(at)
    assert set(c) == {"head_view"}, set(c)  # only the open tab is drawn (issue 14: a class of 30 on one server)
    assert {"model_view"} == set(charts(run(tab="all")))
    assert {"step_decoder", "step_cross", "step_topk"} == set(charts(run(tab="step")))
    head = c["head_view"]["data"][0]
    assert head["x"] == [esc(f"{i}:{p}") for i, p in enumerate(t.src_tokens)]
    assert head["y"] == [esc(f"{i}:{a}→{b}") for i, (a, b) in enumerate(zip(t.decoder_input_tokens, t.output_tokens))]
    assert np.allclose(arr(head["z"]), t.attention.cross[-1, 0].mean(0).numpy(), atol=1e-5)
    assert any("What to look for" in i.value for i in at.info)  # curated example hint


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
def test_kind_layer_head_pick_the_map(checkpoints, reference, kind):
    _, t, _, _ = reference
    at = run({"kind": kind, "layer": "1", "head": "2"})
    assert not at.exception
    z = arr(charts(at)["head_view"]["data"][0]["z"])
    assert np.allclose(z, getattr(t.attention, kind)[0, 0, 1].numpy(), atol=1e-5)
    mv = charts(run({"kind": kind, "layer": "1", "head": "2"}, tab="all"))["model_view"]
    L, H = t.attention.n_layers, t.attention.n_heads
    heat = [tr for tr in mv["data"] if tr["type"] == "heatmap"]  # + one invisible click marker per head
    assert len(heat) == L * H and all(tr.get("coloraxis") == "coloraxis" for tr in heat)


def test_widgets_change_the_view(checkpoints, reference):
    _, t, _, _ = reference
    at = run()
    at.segmented_control(key="kind").set_value("encoder").run()
    z = arr(charts(at)["head_view"]["data"][0]["z"])
    assert z.shape == (len(t.src_tokens), len(t.src_tokens))
    at.segmented_control(key="head").set_value("3").run()
    assert np.allclose(arr(charts(at)["head_view"]["data"][0]["z"]), t.attention.encoder[-1, 0, 2].numpy(), atol=1e-5)
    at.toggle(key="nospecial").set_value(True).run()
    x = charts(at)["head_view"]["data"][0]["x"]
    assert not any(lbl.endswith("&lt;/s&gt;") for lbl in x) and len(x) == len(t.src_tokens) - 1
    at.toggle(key="words").set_value(True).run()
    assert not at.exception
    # a word starts at ▁ (or the first piece); a punctuation-only piece is a word of its own (issue 14)
    n_words = sum(p.startswith("▁") or i == 0 or all(not c.isalnum() for c in p.lstrip("▁"))
                  for i, p in enumerate(t.src_tokens) if p != "</s>")
    assert len(charts(at)["head_view"]["data"][0]["x"]) <= n_words
    at.toggle(key="values").set_value(True).run()
    assert charts(at)["head_view"]["data"][0].get("texttemplate") == "%{z:.2f}"


def test_teacher_forced_mode_uses_the_reference(checkpoints, reference):
    _, _, forced, probs = reference
    at = run({"mode": "forced", "text": SENT, "ref": "Ich habe keine Zeit."})
    assert not at.exception
    head = charts(at)["head_view"]["data"][0]
    assert head["y"] == [esc(f"{i}:{a}→{b}") for i, (a, b) in enumerate(zip(forced.decoder_input_tokens, forced.output_tokens))]
    assert np.allclose(arr(head["z"]), forced.attention.cross[-1, 0].mean(0).numpy(), atol=1e-5)
    assert any("Teacher-forced" in m.value for m in at.markdown)


def test_step_scrubber(checkpoints, reference):
    tr, t, _, _ = reference
    at = run({"step": "3", "head": "1"}, tab="step")
    assert not at.exception
    c = charts(at)
    dec = arr(c["step_decoder"]["data"][0]["z"])
    assert dec.shape == (3, 3)  # rows 0..t and keys 0..t at step 3
    assert np.allclose(dec, t.attention.decoder[-1, 0, 0, :3, :3].numpy(), atol=1e-5)
    cross = arr(c["step_cross"]["data"][0]["z"])
    assert np.allclose(cross, t.attention.cross[-1, 0, 0, 2:3].numpy(), atol=1e-5)
    # top-k: an independent teacher-forced forward pass over the model's own output ids
    import torch

    with torch.inference_mode():
        logits = tr.model(torch.tensor([t.src_ids]), torch.tensor([[tr.cfg.bos_id] + t.output_ids[:-1]]))
    p = torch.softmax(logits[0, 2].float(), -1)
    top = torch.topk(p, 10)
    bar = c["step_topk"]["data"][0]
    assert [lbl.split(":", 1)[1] for lbl in bar["y"]] == [esc(tr.tokenizer.id_to_piece(int(i))) for i in top.indices]
    assert np.allclose(arr(bar["x"]), top.values.numpy(), atol=1e-5)
    at.slider(key="step").set_value(1).run()
    assert arr(charts(at)["step_decoder"]["data"][0]["z"]).shape == (1, 1)


def test_head_statistics_table(checkpoints, reference):
    _, t, _, _ = reference
    from aiayn.analysis import entropy

    at = run({"kind": "encoder"}, tab="stats")
    df = at.dataframe[0].value
    L, H = t.attention.n_layers, t.attention.n_heads
    assert len(df) == L * H
    w = t.attention.encoder[1, 0, 3].numpy()  # layer 2, head 4
    row = df[(df["layer"] == 2) & (df["head"] == 4)].iloc[0]
    assert row["entropy"] == pytest.approx(entropy(w).mean(), abs=1e-5)
    assert row["confidence"] == pytest.approx(w.max(-1).mean(), abs=1e-5)
    assert row["eos"] == pytest.approx(w[:, -1].mean(), abs=1e-5)  # </s> is the last source piece


@pytest.mark.parametrize("query, needle, tab, chart", [
    ({"layer": "99"}, "layer=99", None, "head_view"),
    ({"head": "abc"}, "head=abc", None, "head_view"),
    ({"kind": "sideways"}, "kind=sideways", None, "head_view"),
    ({"step": "-4"}, "step=-4", "step", "step_decoder"),  # the step is read (and checked) by its tab
    ({"mode": "guess"}, "mode=guess", None, "head_view"),
])
def test_malformed_url_parameters_warn_and_fall_back(checkpoints, query, needle, tab, chart):
    at = run(query, tab=tab)
    assert not at.exception
    assert any(needle in w.value for w in at.warning), [w.value for w in at.warning]
    assert chart in charts(at)


def test_bad_sentences(checkpoints):
    at = run({"text": ""})
    assert not at.exception and any("empty" in i.value for i in at.info)
    assert not at.get("plotly_chart")
    at = run({"mode": "forced", "text": "Hello", "ref": "  "})
    assert not at.exception
    assert any("needs a reference" in w.value for w in at.warning)
    assert "head_view" in charts(at)


def test_curated_example_fills_the_form(checkpoints):
    at = run()
    at.selectbox(key="ex_pick").set_value("The house is small.").run()
    assert not at.exception
    assert at.text_input(key="ex_text").value == "The house is small."
    assert at.text_input(key="ex_ref").value == "Das Haus ist klein."
    assert any("diagonal" in i.value for i in at.info)


def test_presenter_mode_large_type_and_cividis(checkpoints):
    from aiayn import app as ui

    at = run()
    normal = charts(at)["head_view"]
    assert normal["data"][0]["colorscale"][0][1] != ""
    at = run({"presenter": "true"})
    assert not at.exception
    big = charts(at)["head_view"]
    assert big["layout"]["font"]["size"] == ui.PRESENTER_FONT_SIZE
    assert big["layout"]["xaxis"]["tickfont"]["size"] == ui.PRESENTER_FONT_SIZE - 2
    # a colour-blind-safe scale that differs from the default one
    import plotly.colors

    cividis = plotly.colors.get_colorscale("Cividis")
    assert [c[1] for c in big["data"][0]["colorscale"]] == [c[1] for c in cividis]
    assert [c[1] for c in normal["data"][0]["colorscale"]] != [c[1] for c in cividis]


def _submit(at, text=None, ref=None):
    if text is not None:
        at.text_input(key="ex_text").set_value(text)
    if ref is not None:
        at.text_input(key="ex_ref").set_value(ref)
    at.button[0].click().run()  # the form's submit button
    assert not at.exception, at.exception
    return at


def test_form_state_survives_a_visit_to_another_page(checkpoints, reference):
    """Issue 14: leaving through the sidebar and coming back emptied the sentence box."""
    tr = reference[0]
    at = _submit(run(), "My car is red.", "Mein Auto ist rot.")
    at.switch_page("pages/5_Scaled_Dot_Product.py").run()
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert at.text_input(key="ex_text").value == "My car is red."
    assert at.text_input(key="ex_ref").value == "Mein Auto ist rot."
    # the maps are shown again: the model's output for this sentence, its source pieces as columns
    t = tr.translate("My car is red.", beam_size=4, length_penalty=0.6)
    assert any(t.text in m.value for m in at.markdown if m.value.startswith("**Model output:**"))
    assert charts(at)["head_view"]["data"][0]["x"] == [esc(f"{i}:{p}") for i, p in enumerate(t.src_tokens)]


def test_a_new_sentence_does_not_keep_the_old_reference(checkpoints):
    """Issue 14: the reference box kept the previous sentence's reference after a new sentence was typed."""
    from aiayn.examples import EXAMPLES

    curated = {s: ref for s, ref, _ in EXAMPLES["en-de"]}
    at = run()
    assert at.text_input(key="ex_ref").value == curated[at.text_input(key="ex_text").value]
    _submit(at, "My dog sleeps.")  # not curated: the box is cleared
    assert at.text_input(key="ex_ref").value == ""
    _submit(at, "The house is small.")  # curated: its own reference
    assert at.text_input(key="ex_ref").value == curated["The house is small."]
    _submit(at, "The cat is big.", "Die Katze ist groß.")  # typed together: the user's reference stays
    assert at.text_input(key="ex_ref").value == "Die Katze ist groß."
    _submit(at, ref="Die Katze ist sehr groß.")  # same sentence, new reference: kept
    assert at.text_input(key="ex_ref").value == "Die Katze ist sehr groß."
    # a link that gives both keeps both, even for a curated sentence
    at = run({"text": "The house is small.", "ref": "Das Haus ist winzig.", "mode": "forced"})
    assert at.text_input(key="ex_ref").value == "Das Haus ist winzig."


def test_a_link_with_text_seeds_the_explorer_visited_before(checkpoints):
    """Translate's "open this sentence in the explorer" link (?text=) wins over the sentence typed earlier."""
    at = _submit(run(), "My car is red.", "Mein Auto ist rot.")
    at.switch_page("pages/1_Translate.py").run()
    at.query_params["text"] = "Good morning"
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert at.text_input(key="ex_text").value == "Good morning"
    assert at.text_input(key="ex_ref").value == ""  # not the reference of the sentence typed before
