"""Figure 1 walked: the block numbers of aiayn.figures.figure1 against direct computations on the trace, the beam
tree and logit lens figures against their values, and the page (AppTest on the tiny checkpoints)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from app_pages import arr, charts, open_page
from tiny_models import perturbed_tiny_model

from aiayn import Translator
from aiayn.figures import figure1 as f1
from aiayn.tokenizer import Tokenizer

PAGE = "pages/10_Figure_1.py"
TEXT = "I have no time."


@pytest.fixture(scope="module")
def tr(tiny_spm):
    tok = Tokenizer.load(tiny_spm)
    return Translator(perturbed_tiny_model(8, vocab_size=tok.vocab_size, max_len=24), tok)


def test_block_keys_walk_figure_1(tr):
    keys = [k for k, _ in f1.block_keys(2)]
    assert keys[:3] == ["enc.embed", "enc.scale", "enc.pe"] and keys[-1] == "out"
    assert keys.count("dec.2.cross_attn") == 1 and "enc.1.cross_attn" not in keys and len(keys) == 3 + 4 + 3 + 6 + 1


def test_block_numbers_equal_direct_computations(tr):
    trace = tr.trace(TEXT, "Ich habe keine Zeit.")
    src = trace.meta["src_tokens"]
    view = f1.block_view(trace, "enc.2.ffn", src)
    s = trace.encoder.layers[1].sublayers[1]
    x, out, sub = s.stream_in[0].numpy(), s.stream_out[0].numpy(), s.sublayer_out[0].numpy()
    np.testing.assert_allclose(view.matrix, out)
    np.testing.assert_allclose(view.norms, np.sqrt((out ** 2).sum(-1)), rtol=1e-5)
    np.testing.assert_allclose(view.metrics["‖Sublayer(x)‖ / ‖x‖"],
                               np.sqrt((sub ** 2).sum(-1)) / np.sqrt((x ** 2).sum(-1)), rtol=1e-5)
    np.testing.assert_allclose(view.metrics["FFN zero units (fraction)"], (s.hidden[0].numpy() == 0).mean(-1))
    n_out = s.norm_out[0].numpy()
    np.testing.assert_allclose(view.metrics["LayerNorm var after"], n_out.var(-1), rtol=1e-5)
    emb = trace.encoder.embedding[0].numpy()
    cos = (out * emb).sum(-1) / np.linalg.norm(out, axis=-1) / np.linalg.norm(emb, axis=-1)
    np.testing.assert_allclose(view.metrics["cos(output, input embedding)"], cos, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f1.drift(trace, "enc")[2], cos, rtol=1e-5, atol=1e-6)
    out_view = f1.block_view(trace, "out", trace.meta["decoder_input_tokens"], pieces=tr.tokenizer.id_to_piece, k=3)
    probs = trace.log_probs[0].exp()
    top = probs.topk(3, -1)
    np.testing.assert_allclose(out_view.matrix, top.values.numpy(), rtol=1e-6)
    assert [p for p, _ in out_view.top[1]] == [tr.tokenizer.id_to_piece(int(i)) for i in top.indices[1]]
    with pytest.raises(ValueError, match="unknown block"):
        f1.block_view(trace, "enc.9.ffn", src)
    bars = f1.metrics_figure(view)  # every series drawn, both axes named (the series mix units)
    assert [t.name for t in bars.data] == ["‖row‖", *view.metrics]
    np.testing.assert_allclose(bars.data[0].y, view.norms)
    assert bars.layout.xaxis.title.text and "legend" in bars.layout.yaxis.title.text
    assert bars.layout.showlegend  # the axis points at the legend: plotly hides it for a single trace otherwise


def test_tree_and_lens_figures_show_their_values(tr):
    tree = tr.beam_tree(TEXT, beam_size=3)
    fig = f1.beam_tree_figure(tree)
    shown = {i for t in fig.data if t.customdata is not None for i in t.customdata}
    assert shown == {n.id for n in tree.nodes}
    pos = f1.tree_layout(tree)
    assert all(pos[n.id][0] == n.step for n in tree.nodes)
    lens = tr.logit_lens(TEXT, k=3, output_ids=tree.translation.output_ids)
    z = np.asarray(f1.logit_lens_figure(lens).data[0].z, dtype=float)
    np.testing.assert_allclose(z, lens.probs[:, :, 0], rtol=1e-6)


def test_tree_summary_counts_the_search(tr):
    tree = tr.beam_tree(TEXT, beam_size=3, length_penalty=0.6)
    line = f1.tree_summary(tree)
    statuses = [n.status for n in tree.nodes[1:]]
    steps = max(n.step for n in tree.nodes)
    best = max((n for n in tree.nodes if n.ended), key=lambda n: n.score)
    assert line.startswith("Beam search with K = 3, α = 0.6: ")
    assert f"{len(statuses)} hypotheses weighed over {steps} steps" in line
    assert f"{statuses.count('kept')} kept, {statuses.count('pruned')} pruned" in line
    assert f"{statuses.count('finished') + statuses.count('cut')} ended" in line
    assert line.endswith(f"is {best.score:.3f}.")


def test_page_opens_and_every_block_draws(checkpoints):
    at = open_page(PAGE)
    assert not at.exception
    found = charts(at)
    assert {"architecture", "block_heatmap", "block_metrics"} == set(found)
    picked = [t for t in found["architecture"]["data"] if "markers" in t.get("mode", "")]  # the clickable points
    assert len(picked) == 2 and all(t["unselected"]["marker"]["opacity"] == 1 for t in picked)  # not faded on a click
    # the first draw leaves the beam tree, the logit lens and the greedy / sampled decodes to their sections,
    # drawn when opened; the tree's one-line summary is there
    assert len(at.table) == 0 and "force" not in [w.key for w in at.selectbox]
    assert any(c.value.startswith("Beam search with K = 4") for c in at.caption)
    at = open_page(PAGE, {"open_lens": "true", "open_decodings": "true", "open_tree": "true"})
    assert not at.exception and {"lens", "next_piece", "beam_tree"} <= set(charts(at))
    assert len(at.table) == 1 and len(at.table[0].value) == 3
    at = open_page(PAGE, {"block": "out"})
    assert not at.exception and len(at.dataframe) == 1 and "block_metrics" not in charts(at)
    at = open_page(PAGE, {"block": "dec.2.cross_attn", "open_lens": "true"})
    assert not at.exception
    assert "Decoder layer 2" in charts(at)["block_heatmap"]["layout"]["title"]["text"]
    lens = arr(charts(at)["lens"]["data"][0]["z"])
    assert lens.shape[0] == 2 and np.all((lens >= 0) & (lens <= 1))


def test_architecture_figure_draws_every_block_and_highlights_the_selected():
    keys = {k for k, _ in f1.block_keys(3)}
    for selected in ("enc.pe", "dec.3.cross_attn", "out"):
        fig = f1.architecture_figure(3, selected)
        blocks, chips = fig.data[-2], fig.data[-1]
        layer = int(selected.split(".")[1]) if selected.count(".") == 2 else 1
        drawn = set(blocks.customdata) | set(chips.customdata)
        # the drawn layer's sub-layers, every layer through its chip, and every non-layer block
        assert {k for k in keys if k.count(".") < 2 or k.split(".")[1] == str(layer)} <= drawn <= keys
        assert {f"{s}.{l}.self_attn" for s in ("enc", "dec") for l in (1, 2, 3)} <= set(chips.customdata)
        boxes = [s for s in fig.layout.shapes if s.x1 - s.x0 < 2.2]  # the block boxes (the N x frames are wider)
        assert len(boxes) == len(blocks.customdata)
        red = [k for s, k in zip(boxes, blocks.customdata) if s.line.width == 4]
        assert red and set(red) == {selected}  # a sub-layer and its Add & Norm, or Linear and Softmax: one key
        assert all(s.line.width == 1 for s, k in zip(boxes, blocks.customdata) if k != selected)
        chip_red = [k for k, c in zip(chips.customdata, chips.marker.color) if c == "#d62728"]
        assert chip_red == ([f"{selected.split('.')[0]}.{layer}.self_attn"] if selected.count(".") == 2 else [])
    with pytest.raises(ValueError, match="layer must be"):
        f1.architecture_blocks(3, layer=4)
    assert f1.selected_block([{"x": 1, "customdata": "dec.2.ffn"}]) == "dec.2.ffn"
    assert f1.selected_block([{"x": 1, "customdata": ["enc.1.ffn"]}]) == "enc.1.ffn"
    assert f1.selected_block([{"x": 1}]) is None and f1.selected_block([]) is None


def test_next_piece_bars_show_each_decodings_chosen_probabilities(checkpoints, tiny_translator):
    fig = f1.next_piece_figure([("greedy", ["a", "</s>"], [0.5, 0.25]), ("beam 4", ["b"], [0.75])])
    assert [list(t.y) for t in fig.data] == [[0.5, 0.25], [0.75]] and list(fig.data[0].text) == ["a", "&lt;/s&gt;"]
    at = open_page(PAGE, {"text": TEXT, "open_decodings": "true"})
    assert not at.exception
    bars = charts(at)["next_piece"]["data"]
    assert len(bars) == 3
    beam = tiny_translator.beam_tree(TEXT, beam_size=4, length_penalty=0.6).translation
    lp = tiny_translator.trace(TEXT, output_ids=beam.output_ids).log_probs[0]  # an independent pass: the trace
    want = lp.gather(-1, torch.tensor(beam.output_ids)[:, None])[:, 0].exp().numpy()
    np.testing.assert_allclose(arr(bars[1]["y"]), want, rtol=1e-4)
    assert math.isclose(float(np.log(arr(bars[1]["y"])).sum()), beam.log_prob, rel_tol=1e-3, abs_tol=1e-3)


def test_forced_node_survives_closing_the_tree_section(checkpoints, tiny_translator):
    at = open_page(PAGE, {"text": TEXT, "open_tree": "true"})
    tree = tiny_translator.beam_tree(TEXT, beam_size=4, length_penalty=0.6)
    node = tree.nodes[-1].id
    at.selectbox(key="force").set_value(node).run()
    forced = [m.value for m in at.markdown if m.value.startswith("**Forced:**")]
    assert len(forced) == 1
    at.session_state["open_tree"] = False  # the student closes the section: its chart and picker are not drawn
    del at.query_params["open_tree"]
    at.run()
    assert "beam_tree" not in charts(at) and "force" not in [w.key for w in at.selectbox]
    at.session_state["open_tree"] = True
    at.run()
    assert at.selectbox(key="force").value == node and "beam_tree" in charts(at)
    assert [m.value for m in at.markdown if m.value.startswith("**Forced:**")] == forced
    assert not at.exception


def test_sessions_that_picked_different_models_see_their_own_walk(tiny_checkpoints, tiny_spm, tmp_path, monkeypatch):
    """The page's cached beam search, forced decodes and decodings are keyed by the picked checkpoint: a session on
    another en-de model (the sidebar's picker, ?model=) never gets the first session's results."""
    import shutil

    import streamlit as st
    from tiny_models import make_tiny_checkpoint

    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoints / "en-de", root / "en-de")
    shutil.copytree(tiny_checkpoints / "de-en", root / "de-en")
    make_tiny_checkpoint(root / "other-en-de", tiny_spm, "en-de", seed=5)
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    expected = {name: Translator.load(root / name, device="cpu").beam_tree(TEXT, beam_size=4, length_penalty=0.6)
                for name in ("en-de", "other-en-de")}
    assert expected["en-de"].translation.text != expected["other-en-de"].translation.text  # so the check can fail
    st.cache_data.clear()
    st.cache_resource.clear()
    try:
        for model in ("en-de", "other-en-de", "en-de"):  # one process, caches kept between the sessions
            at = open_page(PAGE, {"text": TEXT, "model": model, "open_decodings": "true"})
            assert not at.exception, at.exception
            shown = [m.value for m in at.markdown if m.value.startswith("**Beam search output:**")]
            assert shown == [f"**Beam search output:** {expected[model].translation.text or '∅'}"]
            assert at.table[0].value["output"].tolist()[1] == expected[model].translation.text
    finally:
        st.cache_data.clear()
        st.cache_resource.clear()


def test_tree_labels_fit_one_step_and_keep_the_whole_piece_in_the_hover(tr):
    """A long search of long pieces: each kept node's label is cut with "…" to the room one step leaves
    (f1.TREE_PLOT_PX over the steps shown at once + 2, less the marker's gap), the whole piece stays in the hover."""
    import dataclasses

    tree = tr.beam_tree(TEXT, beam_size=3)
    long = "▁Entscheidungsfindungsprozess"
    tree = dataclasses.replace(tree, nodes=[dataclasses.replace(n, piece=long) if n.id else n for n in tree.nodes])
    steps = max(n.step for n in tree.nodes)
    room = f1.TREE_PLOT_PX / (min(steps, f1.TREE_WINDOW) + 2) - 2 * f1.TREE_LABEL_PX  # the steps shown at once
    fig = f1.beam_tree_figure(tree)
    labelled = [t for t in fig.data if t.mode == "markers+text" and t.name != "root"]
    assert labelled and all(t.textfont.size == f1.TREE_LABEL_PX for t in labelled)
    for t in labelled:
        for label, hover in zip(t.text, t.hovertext):
            assert label.endswith("…") and long.startswith(label[:-1]) and len(label) >= 3
            assert len(label) * f1.TREE_CHAR_PX <= max(room, 3 * f1.TREE_CHAR_PX)
            assert hover.startswith(long + "<br>")
    assert f1.tree_label("▁Zeit", 8) == "▁Zeit"  # a short piece is left whole


def test_a_long_search_opens_on_a_window_of_steps_with_a_slider_to_pan(tr):
    """A search longer than f1.TREE_WINDOW steps opens on its first TREE_WINDOW steps, with a range slider over the
    whole search, and its labels get the room one step of the window leaves (not of the whole search); a short one
    shows every step and no slider."""
    import dataclasses

    tree = tr.beam_tree(TEXT, beam_size=3, max_len=6)
    steps = max(n.step for n in tree.nodes)
    assert steps <= f1.TREE_WINDOW
    short = f1.beam_tree_figure(tree)
    assert not short.layout.xaxis.rangeslider.visible and tuple(short.layout.xaxis.range) == (-0.5, steps + 1.5)
    # the same tree, stretched to four times as many steps (every node's step x 4)
    long = dataclasses.replace(tree, nodes=[dataclasses.replace(n, step=4 * n.step) for n in tree.nodes])
    assert 4 * steps > f1.TREE_WINDOW
    fig = f1.beam_tree_figure(long)
    ax = fig.layout.xaxis
    assert ax.rangeslider.visible and tuple(ax.rangeslider.range) == (-0.5, 4 * steps + 1.5)
    assert tuple(ax.range) == (-0.5, f1.TREE_WINDOW + 1.5) and f"{4 * steps} in all" in ax.title.text
    labels = [label for t in fig.data if t.mode == "markers+text" for label in t.text]
    assert labels == [f1._text(f1.tree_label(n, f1.TREE_WINDOW)) for t in fig.data if t.mode == "markers+text"
                      for n in [next(x.piece for x in long.nodes if x.id == i) for i in t.customdata]]


def test_ffn_block_of_a_swish_model_counts_negative_units(tiny_spm):
    """Swish (an imported Opus-MT model's FFN) sets no hidden unit to exactly zero: the block's bar chart counts the
    negative units instead of an all-zero "zero units" series."""
    tok = Tokenizer.load(tiny_spm)
    tr = Translator(perturbed_tiny_model(3, vocab_size=tok.vocab_size, max_len=24, activation="swish"), tok)
    trace = tr.trace(TEXT, "Ich habe keine Zeit.")
    view = f1.block_view(trace, "enc.1.ffn", trace.meta["src_tokens"])
    hidden = trace.encoder.layers[0].sublayer("ffn").hidden[0].numpy()
    assert "FFN zero units (fraction)" not in view.metrics and (hidden == 0).mean() == 0
    np.testing.assert_allclose(view.metrics["FFN negative units (fraction)"], (hidden < 0).mean(-1))
    assert 0 < view.metrics["FFN negative units (fraction)"].mean() < 1
