"""Compare-sentences page (AppTest against tiny random checkpoints): both sentences from the URL, both maps and
their difference, computed independently of the page (translator + model directly, no alignment code)."""
from __future__ import annotations

import numpy as np
import pytest

from app_pages import arr, charts, open_page

PAGE = "pages/9_Compare_Sentences.py"
A, B = "I have no time.", "I have no money."


def run(query=None):
    return open_page(PAGE, query)


@pytest.fixture(scope="module")
def translator(tiny_checkpoints):
    from aiayn import Translator

    return Translator.load(tiny_checkpoints / "en-de", device="cpu")


def present(z: np.ndarray) -> np.ndarray:
    """The cells of an aligned map that belong to its sentence: rows and columns not entirely blank."""
    rows = ~np.isnan(z).all(axis=1)
    cols = ~np.isnan(z).all(axis=0)
    return z[rows][:, cols]


def test_default_view_shows_both_translations_maps_and_difference(checkpoints, translator):
    ta, tb = (translator.translate(s, beam_size=4, length_penalty=0.6, n_best=4) for s in (A, B))
    at = run()
    assert not at.exception, at.exception
    assert at.text_input(key="cmp_a").value == A and at.text_input(key="cmp_b").value == B
    # the default pair is left out of the URL: a link without ``a`` and ``b`` is this view
    assert "a" not in at.query_params and "b" not in at.query_params, at.query_params
    shown = " ".join(m.value for m in at.markdown)
    assert f"**A, model output:** {ta.text or '∅'}" in shown and f"**B, model output:** {tb.text or '∅'}" in shown
    c = charts(at)
    assert {"map_a", "map_b", "map_diff"} <= set(c), set(c)
    za, zb, zd = (arr(c[k]["data"][0]["z"]) for k in ("map_a", "map_b", "map_diff"))
    # default: cross-attention, last layer, mean over heads; the page keeps each sentence's map whole
    assert np.allclose(present(za), ta.attention.cross[-1, 0].mean(0).numpy(), atol=1e-5)
    assert np.allclose(present(zb), tb.attention.cross[-1, 0].mean(0).numpy(), atol=1e-5)
    both = ~np.isnan(za) & ~np.isnan(zb)
    assert both.any() and np.allclose(zd[both], (zb - za)[both], atol=1e-6)
    assert np.isnan(zd[~both]).all()
    d = c["map_diff"]["data"][0]
    assert d["zmid"] == 0 and d["zmin"] == -d["zmax"]
    assert len(c["map_a"]["data"][0]["x"]) >= max(len(ta.src_tokens), len(tb.src_tokens))


def test_url_restores_both_sentences_and_the_view(checkpoints, translator):
    sa, sb = "The house is small.", "The cat sat on the mat."
    ta, tb = (translator.translate(s, beam_size=4, length_penalty=0.6, n_best=4) for s in (sa, sb))
    at = run({"a": sa, "b": sb, "kind": "encoder", "by": "position", "layer": "1", "head": "2"})
    assert not at.exception, at.exception
    assert at.text_input(key="cmp_a").value == sa and at.text_input(key="cmp_b").value == sb
    assert not at.warning
    c = charts(at)
    za, zb = arr(c["map_a"]["data"][0]["z"]), arr(c["map_b"]["data"][0]["z"])
    Sa, Sb = len(ta.src_tokens), len(tb.src_tokens)
    assert Sa != Sb
    n = max(Sa, Sb)  # by position: padded to the longer sentence, the shorter one blank beyond its end
    assert za.shape == zb.shape == (n, n)
    for z, S, t in ((za, Sa, ta), (zb, Sb, tb)):
        assert np.allclose(z[:S, :S], t.attention.encoder[0, 0, 1].numpy(), atol=1e-5)
        assert np.isnan(z[S:]).all() and np.isnan(z[:, S:]).all()


def test_a_sentence_compared_with_itself_differs_by_zero(checkpoints):
    at = run({"a": A, "b": A, "kind": "decoder"})
    assert not at.exception
    c = charts(at)
    zd = arr(c["map_diff"]["data"][0]["z"])
    assert zd.size and np.isfinite(zd).all() and np.array_equal(zd, np.zeros_like(zd))
    assert np.array_equal(arr(c["map_a"]["data"][0]["z"]), arr(c["map_b"]["data"][0]["z"]))


def test_bad_url_values_give_warnings(checkpoints):
    at = run({"by": "diagonal", "head": "99", "mode": "sideways"})
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    assert "`by=diagonal`" in warnings and "`head=99`" in warnings and "`mode=sideways`" in warnings
    assert {"map_a", "map_b", "map_diff"} <= set(charts(at))  # defaults shown instead


def test_empty_sentence_stops_with_a_message(checkpoints):
    at = run({"a": "   "})
    assert not at.exception
    assert any("Sentence A" in i.value for i in at.info) and not charts(at)


def test_teacher_forced_uses_each_reference(checkpoints, translator):
    ra, rb = "Ich habe keine Zeit.", "Ich habe kein Geld."
    fa, _ = translator.force(A, ra)
    fb, _ = translator.force(B, rb)
    at = run({"mode": "forced", "a": A, "b": B, "ra": ra, "rb": rb, "kind": "decoder", "by": "position"})
    assert not at.exception, at.exception
    shown = " ".join(m.value for m in at.markdown)
    assert "**A, teacher-forced reference:**" in shown and "**B, teacher-forced reference:**" in shown
    za = arr(charts(at)["map_a"]["data"][0]["z"])
    zb = arr(charts(at)["map_b"]["data"][0]["z"])
    T = max(len(fa.output_tokens), len(fb.output_tokens))
    assert za.shape == (T, T)
    assert np.allclose(present(za), fa.attention.decoder[-1, 0].mean(0).numpy(), atol=1e-5)
    assert np.allclose(present(zb), fb.attention.decoder[-1, 0].mean(0).numpy(), atol=1e-5)
    assert "ra" not in at.query_params and "rb" not in at.query_params  # each the default pair's reference


def test_the_url_keeps_what_differs_from_the_defaults(checkpoints):
    at = run({"mode": "forced", "a": "I have no car.", "ra": "Ich habe kein Auto."})
    assert not at.exception, at.exception
    assert at.text_input(key="cmp_a").value == "I have no car." and at.text_input(key="cmp_ra").value == "Ich habe kein Auto."
    assert at.query_params["a"] == "I have no car." and at.query_params["ra"] == "Ich habe kein Auto."
    assert "b" not in at.query_params and "rb" not in at.query_params  # B is the default pair


def test_widgets_change_the_view(checkpoints, translator):
    ta = translator.translate(A, beam_size=4, length_penalty=0.6, n_best=4)
    at = run()
    at.segmented_control(key="kind").set_value("encoder").run()
    at.segmented_control(key="head").set_value("1").run()
    assert not at.exception
    za = arr(charts(at)["map_a"]["data"][0]["z"])
    assert np.allclose(present(za), ta.attention.encoder[-1, 0, 0].numpy(), atol=1e-5)
    tb = translator.translate(B, beam_size=4, length_penalty=0.6, n_best=4)
    at.segmented_control(key="by").set_value("position").run()
    n = max(len(ta.src_tokens), len(tb.src_tokens))
    assert arr(charts(at)["map_a"]["data"][0]["z"]).shape == (n, n)
    assert not any("only)" in x for x in charts(at)["map_a"]["data"][0]["x"][: min(len(ta.src_tokens), len(tb.src_tokens))])
    at.toggle(key="values").set_value(True).run()
    assert charts(at)["map_diff"]["data"][0].get("texttemplate") == "%{z:+.2f}"


def test_direction_defaults(checkpoints):
    at = run({"direction": "de-en"})
    assert not at.exception
    assert at.text_input(key="cmp_a").value == "Ich habe keine Zeit."
    assert at.text_input(key="cmp_b").value == "Ich habe kein Geld."


def test_sentences_survive_a_visit_to_another_page(checkpoints):
    """Issue 14: leaving through the sidebar and coming back emptied both sentence boxes."""
    at = run()
    at.text_input(key="cmp_a").set_value("My dog sleeps.")
    at.text_input(key="cmp_b").set_value("My cat sleeps.")
    at.button[0].click().run()  # the form's submit button
    assert not at.exception, at.exception
    at.switch_page("pages/5_Scaled_Dot_Product.py").run()
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert (at.text_input(key="cmp_a").value, at.text_input(key="cmp_b").value) == ("My dog sleeps.", "My cat sleeps.")
    assert at.get("plotly_chart")  # the comparison is drawn again
