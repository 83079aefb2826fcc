"""Queries and keys of one head in one space (AttentionViz; aiayn/analysis/qk_space.py, aiayn.calls.query_keys):
the vectors give back the captured scores and weights of Eq. 1, the normalisation changes no weight, the
projection is deterministic, and the Figure 1 page draws it for an attention block."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from aiayn import calls
from aiayn.analysis.qk_space import normalise, qk_space
from aiayn.figures import figure1 as f1

TEXT = "I have no time."
KINDS = ("encoder", "decoder", "cross")


@pytest.fixture(scope="module")
def traced(tiny_checkpoints):
    from aiayn import Translator

    tr = Translator.load(tiny_checkpoints / "en-de")
    trace = tr.trace(TEXT, output_ids=tr.translate(TEXT, beam_size=1, return_attention=False).output_ids)
    src, tgt = trace.encoder.tokens, trace.target
    forced = calls.teacher_forced(tr.model, src, tgt, return_attention=True, return_scores=True)
    assert forced.maps.encoder_scores is not None
    return tr, trace, forced


@pytest.mark.parametrize("kind", KINDS)
def test_queries_and_keys_give_back_the_captured_scores_and_weights(traced, kind):
    """q_i . k_j / sqrt(d_k) of every head is the capture path's pre-softmax score where the mask allows it, and
    qk_space's softmax over the allowed keys is the captured map."""
    tr, trace, forced = traced
    L, d_k = tr.cfg.n_layers, tr.cfg.d_k
    for layer in range(1, L + 1):
        q, k = calls.query_keys(tr.model, trace, kind, layer)
        scores = forced.maps.get(kind, scores=True)[layer - 1, 0].float().cpu()  # before masking
        weights = forced.maps.get(kind)[layer - 1, 0].float().cpu()
        ours = q[0] @ k[0].transpose(-1, -2) / d_k ** 0.5
        assert ours.shape == scores.shape and torch.allclose(ours, scores, atol=1e-4, rtol=1e-4)
        if kind == "decoder":  # the causal mask: no weight above the diagonal
            assert weights.triu(1).abs().max() == 0
        for h in range(tr.cfg.n_heads):
            space = qk_space(q[0, h].numpy(), k[0, h].numpy(), causal=kind == "decoder")
            np.testing.assert_allclose(space.weights, weights[h].numpy(), atol=1e-5)
            assert (space.top_key == weights[h].numpy().argmax(1)).all()


def test_query_keys_refuses_a_bad_kind_or_layer(traced):
    tr, trace, _ = traced
    with pytest.raises(ValueError, match="kind must be one of"):
        calls.query_keys(tr.model, trace, "self", 1)
    with pytest.raises(ValueError, match="layer must be between 1 and"):
        calls.query_keys(tr.model, trace, "cross", tr.cfg.n_layers + 1)


def test_the_normalisation_changes_no_weight_and_meets_its_two_conditions():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(7, 16)) * 3 + 5  # far from the keys and three times their size
    k = rng.normal(size=(9, 16)) - 4
    qn, kn, a = normalise(q, k)
    np.testing.assert_allclose(np.linalg.norm(qn, axis=1).mean(), np.linalg.norm(kn, axis=1).mean())
    np.testing.assert_allclose(qn.mean(0) / a, kn.mean(0) * a)  # before scaling, the key mean is the query mean

    def softmax(s):
        e = np.exp(s - s.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    np.testing.assert_allclose(softmax(qn @ kn.T), softmax(q @ k.T), atol=1e-10)
    assert not np.allclose(qn @ kn.T, q @ k.T)  # the scores themselves moved (a per-query constant)
    with pytest.raises(ValueError, match="one width"):
        normalise(q, k[:, :8])


def test_the_projection_is_deterministic_and_its_agreement_is_measured():
    """Same input, same picture (signs fixed); keys laid out on a line in the order of one query's scores give a
    rank agreement of 1 for that query, and the explained shares are proportions."""
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(5, 8)), rng.normal(size=(6, 8))
    a, b = qk_space(q, k), qk_space(q.copy(), k.copy())
    np.testing.assert_array_equal(a.query_xy, b.query_xy)
    assert 0 < a.explained.sum() <= 1 + 1e-12 and -1 <= a.rank_agreement <= 1
    # unit vectors in one plane of an 8-d space, both sets centred on 0 (a triangle of queries, a pentagon of
    # keys): the normalisation moves nothing, ||q - k||^2 = 2 - 2 q.k, so distance orders keys exactly as scores
    def ring(degrees):
        out = np.zeros((len(degrees), 8))
        out[:, 2], out[:, 5] = np.cos(np.radians(degrees)), np.sin(np.radians(degrees))
        return out

    space = qk_space(ring([0, 120, 240]), ring([10, 82, 154, 226, 298]))
    assert space.scale == pytest.approx(1.0) and space.explained.sum() == pytest.approx(1.0)
    assert space.rank_agreement == pytest.approx(1.0)
    offset = qk_space(ring([0, 120, 240]) + np.eye(8)[0] * 5, ring([10, 82, 154, 226, 298]))
    assert offset.rank_agreement == pytest.approx(1.0)  # the queries' shared offset is moved onto the keys
    random = qk_space(rng.normal(size=(6, 64)), rng.normal(size=(6, 64)))
    assert abs(random.rank_agreement) < 0.6  # two of 64 random dimensions say little about the scores
    with pytest.raises(ValueError, match="causal"):
        qk_space(q, k, causal=True)


def test_qk_figure_marks_queries_keys_and_each_querys_top_key():
    rng = np.random.default_rng(2)
    space = qk_space(rng.normal(size=(4, 8)), rng.normal(size=(4, 8)), causal=True)
    toks = ["<s>", "▁Ich", "▁habe", "</s>"]
    fig = f1.qk_space_figure(space, toks, toks, title="decoder layer 1, head 1")
    names = [t.name for t in fig.data]
    assert names == ["query → its top key", "queries", "keys"]
    lines = fig.data[0]
    assert len(lines.x) == 3 * 4  # one segment (and a break) per query
    assert list(fig.data[2].text)[-1] == "&lt;/s&gt;"  # escaped for plotly
    assert "query 0: &lt;s&gt;" in fig.data[1].hovertext[0] and "→ 0:" in fig.data[1].hovertext[0]
    assert "→ 1:" not in fig.data[1].hovertext[0]  # the first query sees only the first key (causal)
    with pytest.raises(ValueError, match="pieces"):
        f1.qk_space_figure(space, toks[:3], toks, title="x")


def test_figure_1_page_draws_the_query_key_space_of_an_attention_block(checkpoints):
    """Closed by default (the first draw sends nothing more); opened on an attention block with a head from the
    URL, it draws that head's queries and keys with the measured agreement; a head the model lacks is reported;
    a block that is not attention has no such section."""
    from app_pages import arr, charts, open_page

    page = "pages/10_Figure_1.py"
    at = open_page(page, {"block": "dec.2.cross_attn"})
    assert not at.exception and "qk_space" not in charts(at)
    at = open_page(page, {"block": "dec.2.cross_attn", "open_qk": "true", "qk_head": "3"})
    assert not at.exception
    spec = charts(at)["qk_space"]
    assert "Decoder layer 2 encoder-decoder attention, head 3" in spec["layout"]["title"]["text"]
    queries, keys = spec["data"][1], spec["data"][2]
    assert queries["name"] == "queries" and keys["name"] == "keys"
    assert len(arr(queries["x"])) * 3 == len(spec["data"][0]["x"])  # one line to its top key per query
    assert all(h.startswith("query ") for h in queries["hovertext"]) and all(h.startswith("key ") for h in keys["hovertext"])
    assert any("Spearman correlation of **" in c.value for c in at.caption)
    bad = open_page(page, {"block": "enc.1.self_attn", "open_qk": "true", "qk_head": "99"})
    assert not bad.exception and any("qk_head=99" in w.value for w in bad.warning)
    assert "Encoder layer 1 self-attention, head 1" in charts(bad)["qk_space"]["layout"]["title"]["text"]
    many = open_page(page, {"block": "enc.2.self_attn", "open_qk": "true", "qk_all": "true"})
    assert not many.exception
    spec = charts(many)["qk_space"]
    from aiayn.examples import EXAMPLES

    n = len(dict.fromkeys([EXAMPLES["en-de"][0][0]] + [e[0] for e in EXAMPLES["en-de"]]))
    assert f"queries and keys of {n} sentences" in spec["layout"]["title"]["text"]
    assert spec["data"][0]["mode"] == "markers" and spec["data"][0]["hovertext"][-1].startswith(f"sentence {n} · ")
    ffn = open_page(page, {"block": "enc.1.ffn", "open_qk": "true"})
    assert not ffn.exception and "qk_space" not in charts(ffn)


def test_presenter_mode_enlarges_the_labels():
    rng = np.random.default_rng(3)
    space = qk_space(rng.normal(size=(3, 4)), rng.normal(size=(3, 4)))
    small, large = (f1.qk_space_figure(space, list("abc"), list("xyz"), title="t", presenter=p) for p in (False, True))
    assert large.data[1].textfont.size > small.data[1].textfont.size
    assert large.data[2].marker.size > small.data[2].marker.size


def test_many_sentences_in_one_space_keep_each_sentences_own_attention():
    """AttentionViz's global view: with groups, a query attends only to its own sentence's keys (causally for the
    decoder), with exactly the weights that sentence alone gives; the projection is shared."""
    rng = np.random.default_rng(4)
    sizes = (3, 5, 4)
    qs = [rng.normal(size=(n, 8)) for n in sizes]
    ks = [rng.normal(size=(n, 8)) for n in sizes]
    groups = (np.repeat(np.arange(3), sizes), np.repeat(np.arange(3), sizes))
    for causal in (False, True):
        joint = qk_space(np.concatenate(qs), np.concatenate(ks), causal=causal, groups=groups)
        start = 0
        for q, k in zip(qs, ks):
            alone = qk_space(q, k, causal=causal)
            block = slice(start, start + len(q))
            np.testing.assert_allclose(joint.weights[block, block], alone.weights, atol=1e-12)
            assert joint.weights[block].sum() == pytest.approx(len(q))  # nothing leaks to other sentences
            start += len(q)
    with pytest.raises(ValueError, match="groups of"):
        qk_space(np.concatenate(qs), np.concatenate(ks), groups=(groups[0][:-1], groups[1]))
    with pytest.raises(ValueError, match="causal"):
        qk_space(np.concatenate(qs), np.concatenate(ks)[:-1], causal=True, groups=(groups[0], groups[1][:-1]))
    fig = f1.qk_space_figure(joint, ["a"] * 12, ["b"] * 12, title="t", groups=groups)
    assert [t.mode for t in fig.data] == ["markers", "markers"]  # unlabelled, unjoined
    assert fig.data[0].hovertext[3].startswith("sentence 2 · query 0: a")
    np.testing.assert_allclose(fig.data[0].marker.color[:3], [0, 0.5, 1])  # place in its own sentence


def test_the_explorer_links_one_head_to_its_query_key_space(checkpoints):
    """Under one head's map of the model's own output, a link opens the Figure 1 page on the same sentence, block
    and head with the section open; the mean over heads and a teacher-forced output get no link."""
    from urllib.parse import parse_qs

    from app_pages import open_page

    page = "pages/2_Attention_Explorer.py"

    def links(at):
        return [parse_qs(pl.proto.query_string) for pl in at.get("page_link")
                if pl.proto.label.startswith("This head's queries and keys")]

    at = open_page(page, {"text": "The house is small.", "kind": "cross", "layer": "2", "head": "2"}, tab="head")
    assert not at.exception and "head_view" in [el.proto.id.rsplit("-", 1)[-1] for el in at.get("plotly_chart")]
    assert links(at) == [{"text": ["The house is small."], "block": ["dec.2.cross_attn"], "open_qk": ["true"],
                          "qk_head": ["2"]}]
    enc = open_page(page, {"text": "The house is small.", "kind": "encoder", "layer": "1", "head": "2"}, tab="head")
    assert [q["block"] for q in links(enc)] == [["enc.1.self_attn"]]
    assert links(open_page(page, {"text": "The house is small.", "kind": "cross", "layer": "2"}, tab="head")) == []
    forced = open_page(page, {"text": "The house is small.", "ref": "Das Haus ist klein.", "kind": "cross",
                              "layer": "2", "head": "2", "mode": "forced"}, tab="head")
    assert not forced.exception and links(forced) == []
    assert any("head_view" in el.proto.id for el in forced.get("plotly_chart"))  # the map is drawn, the link is not
    assert any("teacher" in m.value.lower() or "reference" in m.value.lower() for m in forced.markdown)
