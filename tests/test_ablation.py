"""Head ablation (issue 15, item 1): head masks in the model, decoding, translator and app; the sweep
(Michel et al. 2019) and its per-checkpoint cache; the figures and the page. Expectations are computed by hand
or through an independent path (per-head values from the captured weights, sacrebleu directly, Translator.force)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import perturbed_tiny_model

from aiayn.analysis.ablation import format_heads, head_mask_array, maps_difference_frame, parse_heads
from aiayn.sweep import cached_head_sweep, forced_maps, head_sweep, load_sweep, sweep_path
from aiayn.decoding import beam_search, greedy_decode
from aiayn.model.attention import MultiHeadAttention

REPO = Path(__file__).resolve().parent.parent


# -- one multi-head attention, by hand ---------------------------------------------------------------------------
@pytest.fixture()
def mha():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x, kv = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    full, _ = m(x, kv, need_weights=True)
    v = m.w_v(kv).view(2, 7, 4, 4).transpose(1, 2)
    heads = (full.weights @ v).detach()  # (B, H, T, d_v): head_i = softmax(QK^T/sqrt(d_k)) V, by hand
    return m, x, kv, full, heads


def by_hand(m, heads, scale):
    """W^O applied to the concatenation of the heads, each multiplied by scale[h]."""
    h = heads * torch.as_tensor(scale, dtype=heads.dtype)[None, :, None, None]
    return h.transpose(1, 2).reshape(2, 5, 16) @ m.w_o.weight.T + m.w_o.bias


@pytest.mark.parametrize("head", range(4))
def test_masking_a_head_zeroes_only_its_slice_before_w_o(mha, head):
    m, x, kv, full, heads = mha
    scale = [1.0] * 4
    scale[head] = 0.0
    for need_weights in (True, False):  # capture path and fused SDPA fast path
        got, _ = m(x, kv, need_weights=need_weights, head_mask=torch.tensor(scale))
        assert torch.allclose(got.output, by_hand(m, heads, scale), atol=1e-5)
    got, _ = m(x, kv, need_weights=True, head_mask=torch.tensor(scale) > 0)  # bool mask, same result
    assert torch.allclose(got.output, by_hand(m, heads, scale), atol=1e-5)
    # the change is exactly that head's contribution through its slice of W^O; its weights are still computed
    w_o_slice = m.w_o.weight[:, head * 4:(head + 1) * 4]
    assert torch.allclose(full.output - got.output, heads[:, head].detach() @ w_o_slice.T, atol=1e-5)
    assert torch.equal(got.weights, full.weights)


def test_a_float_scales_the_head(mha):
    m, x, kv, full, heads = mha
    half, _ = m(x, kv, head_mask=torch.tensor([1.0, 0.5, 1.0, 1.0]))
    off, _ = m(x, kv, head_mask=torch.tensor([1.0, 0.0, 1.0, 1.0]))
    assert torch.allclose(half.output, by_hand(m, heads, [1, 0.5, 1, 1]), atol=1e-5)
    assert torch.allclose(half.output, (full.output + off.output) / 2, atol=1e-5)  # W^O is affine
    assert not torch.allclose(half.output, full.output, atol=1e-4)


def test_mha_rejects_a_bad_head_mask(mha):
    m, x, kv, _, _ = mha
    for bad in (torch.ones(5), torch.ones(1, 4), torch.ones(4, dtype=torch.long), [1, 1, 1, 1]):
        with pytest.raises(ValueError, match="head_mask"):
            m(x, kv, head_mask=bad)


# -- the whole model ---------------------------------------------------------------------------------------------
def ones(model, dtype=torch.float32):
    return torch.ones(3, model.cfg.n_layers, model.cfg.n_heads, dtype=dtype)


def test_masking_a_head_changes_only_what_comes_after_it():
    model = perturbed_tiny_model(3)
    src, tgt = torch.tensor([[5, 9, 12, 7, 2]]), torch.tensor([[1, 8, 11, 6]])
    ref, maps = model(src, tgt, return_attention=True)
    L = model.cfg.n_layers
    m = ones(model)
    m[2, L - 1, 1] = 0.0  # last layer's cross-attention head 1
    logits, am = model(src, tgt, return_attention=True, head_mask=m)
    assert torch.equal(model.encode(src, head_mask=m).memory, model.encode(src).memory)  # encoder untouched
    assert torch.equal(am.encoder, maps.encoder) and torch.equal(am.decoder, maps.decoder)
    assert torch.equal(am.cross, maps.cross)  # the removed head's own weights are still computed
    assert not torch.allclose(logits, ref, atol=1e-4)
    m = ones(model)
    m[0, 0, 2] = 0.0  # first encoder layer, head 2: later encoder layers and the whole decoder change
    _, am = model(src, tgt, return_attention=True, head_mask=m)
    assert torch.equal(am.encoder[0], maps.encoder[0])
    assert not torch.allclose(am.encoder[1], maps.encoder[1], atol=1e-5)
    assert not torch.allclose(am.cross, maps.cross, atol=1e-5)


def test_every_cross_head_off_makes_the_output_independent_of_the_source():
    model = perturbed_tiny_model(4)
    tgt = torch.tensor([[1, 8, 11, 6, 9]])
    src_a, src_b = torch.tensor([[5, 9, 12, 7, 2]]), torch.tensor([[20, 3, 33, 2]])
    m = ones(model)
    m[2] = 0.0
    a, b = model(src_a, tgt, head_mask=m), model(src_b, tgt, head_mask=m)
    assert torch.allclose(a, b, atol=1e-6)
    assert not torch.allclose(model(src_a, tgt), model(src_b, tgt), atol=1e-4)  # the intact model reads the source
    ga = greedy_decode(model, src_a, max_len=8, head_mask=m)[0]
    gb = greedy_decode(model, src_b, max_len=8, head_mask=m)[0]
    assert ga.tokens == gb.tokens and abs(ga.log_prob - gb.log_prob) < 1e-5


@pytest.mark.parametrize("use_cache", [True, False])
def test_decoding_with_a_mask_equals_teacher_forcing_with_it(use_cache):
    """Decoding passes the mask to every step: the stitched maps equal a forced pass under the same mask."""
    model = perturbed_tiny_model(5)
    src = torch.tensor([[5, 9, 12, 7, 2]])
    m = ones(model)
    m[1, 0, 0] = m[2, 1, 3] = 0.0
    h = beam_search(model, src, beam_size=3, max_len=6, use_cache=use_cache, return_attention=True, head_mask=m)[0][0]
    tgt = torch.tensor([[model.cfg.bos_id] + h.tokens[:-1]])
    with torch.no_grad():
        logits, maps = model(src, tgt, return_attention=True, head_mask=m)
    assert torch.allclose(h.attention.cross, maps.cross, atol=1e-5)
    assert torch.allclose(h.attention.decoder, maps.decoder, atol=1e-5)
    lp = torch.log_softmax(logits[0], -1).gather(1, torch.tensor(h.tokens)[:, None]).sum()
    assert abs(float(lp) - h.log_prob) < 1e-4
    plain = beam_search(model, src, beam_size=3, max_len=6, use_cache=use_cache)[0][0]
    assert (plain.tokens, round(plain.log_prob, 4)) != (h.tokens, round(h.log_prob, 4))


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("use_cache", [True, False])
def test_all_ones_mask_is_bit_identical(tiny_translator, beam, use_cache):
    tr = tiny_translator
    kw = dict(beam_size=beam, use_cache=use_cache, n_best=beam)
    base = tr.translate("I have no time.", **kw)
    for mask in (ones(tr.model), ones(tr.model, torch.bool), np.ones((3, tr.cfg.n_layers, tr.cfg.n_heads)).tolist()):
        t = tr.translate("I have no time.", head_mask=mask, **kw)
        assert (t.text, t.output_ids, t.score, t.log_prob, t.nbest) == (base.text, base.output_ids, base.score,
                                                                         base.log_prob, base.nbest)
        for kind in ("encoder", "decoder", "cross"):
            assert torch.equal(getattr(t.attention, kind), getattr(base.attention, kind))


def test_all_ones_mask_is_bit_identical_teacher_forced(tiny_translator):
    from aiayn.analysis import explain

    tr = tiny_translator
    base, p0 = tr.force("I have no time.", "Ich habe keine Zeit.", return_scores=True)
    t, p1 = tr.force("I have no time.", "Ich habe keine Zeit.", return_scores=True, head_mask=ones(tr.model))
    assert torch.equal(p0, p1) and t.score == base.score
    for kind in ("encoder", "decoder", "cross", "cross_scores"):
        assert torch.equal(getattr(t.attention, kind), getattr(base.attention, kind))
    e0, e1 = explain(tr, "I have no time."), explain(tr, "I have no time.", head_mask=np.ones((3, 2, 4)))
    assert e0.text == e1.text and np.array_equal(e0.next_pieces.probs, e1.next_pieces.probs)


def test_translator_head_mask_changes_the_output_as_the_model_does(tiny_translator):
    """List, numpy and tensor masks give the same result, and it matches decoding with the model directly."""
    tr = tiny_translator
    m = ones(tr.model)
    m[2, :, :2] = 0.0
    m[0, 1, 3] = 0.5
    t = tr.translate("I would like to buy a new car.", head_mask=m)
    for other in (m.numpy(), m.tolist(), tuple(map(tuple, m.numpy().reshape(3, -1).tolist()))):
        if isinstance(other, tuple):
            other = np.asarray(other).reshape(3, 2, 4)
        assert tr.translate("I would like to buy a new car.", head_mask=other).output_ids == t.output_ids
    src = torch.tensor([t.src_ids])
    direct = beam_search(tr.model, src, beam_size=4, head_mask=m)[0][0]
    assert direct.tokens == t.output_ids
    batch = tr.translate_batch(["I have no time.", "I would like to buy a new car."], head_mask=m)
    assert batch[1].output_ids == t.output_ids


@pytest.mark.parametrize("bad, match", [
    (torch.ones(3, 2, 5), "shape"), (torch.ones(2, 2, 4), "shape"), (torch.ones(2, 4), "shape"),
    (torch.ones(3, 2, 4, dtype=torch.long), "bool or floating"), (torch.full((3, 2, 4), float("nan")), "NaN"),
    ([["a"] * 4] * 2, "numbers or booleans"), ([[1, 1], [1]], "head_mask"),
])
def test_bad_head_masks_raise_clearly(tiny_translator, bad, match):
    tr = tiny_translator
    with pytest.raises(ValueError, match=match):
        tr.translate("I have no time.", head_mask=bad)
    with pytest.raises(ValueError, match="head_mask|NaN"):
        tr.force("I have no time.", "Ich habe keine Zeit.", head_mask=bad)
    with pytest.raises(ValueError, match="head_mask|NaN"):
        tr.model(torch.tensor([[5, 2]]), torch.tensor([[1, 5]]), head_mask=bad)


# -- URL spelling, app cache key, maps comparison ----------------------------------------------------------------
def test_parse_and_format_heads():
    heads, bad = parse_heads("cross.3.2, encoder.1.5,bogus,cross.4.1,decoder.0.1,Cross.3.2,,encoder.1", 3, 8)
    assert heads == [("encoder", 0, 4), ("cross", 2, 1)]
    assert bad == ["bogus", "cross.4.1", "decoder.0.1", "encoder.1"]
    assert format_heads(heads) == "encoder.1.5,cross.3.2"
    assert parse_heads(format_heads(heads), 3, 8) == (heads, [])
    mask = head_mask_array(heads, 3, 8)
    assert mask.shape == (3, 3, 8) and mask.sum() == 72 - 2 and mask[0, 0, 4] == 0 and mask[2, 2, 1] == 0
    with pytest.raises(ValueError, match="no head"):
        head_mask_array([("cross", 3, 0)], 3, 8)


def test_app_cache_key_is_hashable_and_all_ones_is_none():
    from aiayn.app.results import head_mask_key

    assert head_mask_key(None) is None and head_mask_key(torch.ones(3, 2, 4)) is None
    m = np.ones((3, 2, 4))
    m[1, 0, 3] = 0
    key = head_mask_key(m)
    assert hash(key) == hash(head_mask_key(torch.tensor(m))) and np.array_equal(np.asarray(key), m)
    with pytest.raises(ValueError):
        head_mask_key(np.ones((2, 4)))


def test_forced_maps_line_up_with_the_free_running_maps(tiny_translator):
    tr = tiny_translator
    t = tr.translate("I have no time.")
    intact = forced_maps(tr, t.src_ids, t.output_ids)
    assert torch.allclose(intact.cross, t.attention.cross, atol=1e-5)
    assert intact.output_tokens == [t.output_tokens] and intact.src_tokens == [t.src_tokens]
    m = head_mask_array([("encoder", 0, 1)], 2, 4)
    ablated = forced_maps(tr, t.src_ids, t.output_ids, head_mask=m)
    df = maps_difference_frame(intact, ablated)
    cross = df[(df["kind"] == "cross") & (df["layer"] == 1) & (df["head"] == 2)]
    expect = (ablated.cross[1, 0, 2] - intact.cross[1, 0, 2]).numpy().ravel()
    assert np.allclose(cross["difference"].to_numpy(), expect, atol=1e-6)
    assert (df[df["kind"] == "encoder"].query("layer == 0")["difference"] == 0).all()  # before the removed head


# -- the sweep -----------------------------------------------------------------------------------------------------
PAIRS = [("I have no time.", "Ich habe keine Zeit."), ("The house is small.", "Das Haus ist klein.")]


def independent_scores(tr, mask):
    from sacrebleu import corpus_chrf

    outs = [tr.translate(s, beam_size=2, head_mask=mask).text for s, _ in PAIRS]
    chrf = corpus_chrf(outs, [[r for _, r in PAIRS]]).score
    forced = [tr.force(s, r, head_mask=mask)[0] for s, r in PAIRS]
    return chrf, sum(f.log_prob for f in forced) / sum(len(f.output_ids) for f in forced)


def test_head_sweep_rows_match_independent_runs(tiny_translator):
    tr = tiny_translator
    seen = []
    df = head_sweep(tr, PAIRS, kinds=("cross",), beam_size=2, progress=lambda f, label: seen.append(f))
    assert len(df) == 2 * 4 and set(df["kind"]) == {"cross"}
    assert list(zip(df["layer"], df["head"])) == [(lay, h) for lay in range(2) for h in range(4)]
    chrf0, lp0 = independent_scores(tr, None)
    assert df["chrf_intact"].eq(chrf0).all() and np.allclose(df["logprob_intact"], lp0, atol=1e-4)
    row = df[(df["layer"] == 1) & (df["head"] == 2)].iloc[0]
    m = torch.ones(3, 2, 4)
    m[2, 1, 2] = 0
    chrf, lp = independent_scores(tr, m)
    assert row["chrf"] == pytest.approx(chrf) and row["chrf_drop"] == pytest.approx(chrf0 - chrf)
    assert row["logprob"] == pytest.approx(lp, abs=1e-4) and row["logprob_drop"] == pytest.approx(lp0 - lp, abs=1e-4)
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0) and len(seen) == 9
    with pytest.raises(ValueError, match="kinds"):
        head_sweep(tr, PAIRS, kinds=("self",))
    with pytest.raises(ValueError, match="pair"):
        head_sweep(tr, [])


def test_sweep_cache_beside_the_checkpoint_detects_stale_files(tiny_checkpoints, tmp_path):
    from aiayn import Translator
    from aiayn.files import sha256_file

    ckpt = shutil.copytree(tiny_checkpoints / "en-de", tmp_path / "en-de")
    tr = Translator.load(ckpt, device="cpu")
    assert load_sweep(ckpt, PAIRS, beam_size=2) is None
    df = cached_head_sweep(tr, PAIRS, beam_size=2)
    payload = json.loads(sweep_path(ckpt).read_text())
    assert payload["weights_sha256"] == sha256_file(ckpt / "model.safetensors") and len(payload["rows"]) == 3 * 2 * 4
    again = load_sweep(ckpt, PAIRS, beam_size=2)
    assert again is not None and np.allclose(again["chrf_drop"], df["chrf_drop"])
    assert again.attrs["chrf_intact"] == pytest.approx(df.attrs["chrf_intact"])
    labels = []
    cached_head_sweep(tr, PAIRS, beam_size=2, progress=lambda f, label: labels.append(label))
    assert labels == ["read from head_sweep.json"]  # fresh: not recomputed
    assert load_sweep(ckpt, PAIRS[:1], beam_size=2) is None and load_sweep(ckpt, PAIRS, beam_size=4) is None
    with open(ckpt / "model.safetensors", "ab") as fh:  # other weights: stale
        fh.write(b"\0")
    assert load_sweep(ckpt, PAIRS, beam_size=2) is None


@pytest.mark.parametrize("direction", ["en-de", "de-en"])
def test_shipped_sweeps_are_fresh(direction):
    from aiayn.examples import sentence_pairs

    ckpt = REPO / "checkpoints" / direction
    if not (ckpt / "model.safetensors").is_file():
        pytest.skip("no shipped checkpoint")
    df = load_sweep(ckpt, sentence_pairs(direction))
    assert df is not None, f"run: aiayn sweep --checkpoint checkpoints/{direction}"
    assert len(df) == 3 * 3 * 8 and np.isfinite(df[["chrf_drop", "logprob_drop"]].to_numpy()).all()


# -- figures -------------------------------------------------------------------------------------------------------
def test_sweep_figure_shows_each_kind_as_layer_by_head():
    import pandas as pd

    from aiayn.figures.ablation import difference_grid, sweep_figure

    rng = np.random.default_rng(0)
    rows = [{"kind": k, "layer": lay, "head": h, "chrf_drop": float(rng.normal()), "logprob_drop": 0.0}
            for k in ("encoder", "decoder", "cross") for lay in range(2) for h in range(3)]
    df = pd.DataFrame(rows)
    fig = sweep_figure(df, "chrf_drop")
    assert len(fig.data) == 3
    for trace, kind in zip(fig.data, ("encoder", "decoder", "cross")):
        expect = df[df["kind"] == kind]["chrf_drop"].to_numpy().reshape(2, 3)
        assert np.allclose(np.asarray(trace.z, dtype=float), expect)
    ax = fig.layout.coloraxis
    assert ax.cmin == -ax.cmax and ax.cmax == pytest.approx(np.abs(df["chrf_drop"]).max())
    with pytest.raises(ValueError, match="metric"):
        sweep_figure(df, "bleu")
    grid = difference_grid(rng.normal(size=(2, 3, 4, 5)), removed=[(0, 1), (1, 2)])
    assert len(grid.data) == 6 and [a.text for a in grid.layout.annotations].count("<b>off</b>") == 2


# -- the page ------------------------------------------------------------------------------------------------------
def test_page_applies_the_heads_in_the_url(checkpoints):
    from streamlit.testing.v1 import AppTest

    from aiayn import Translator

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=90)
    at.query_params["text"] = "I have no time."
    at.query_params["off"] = "cross.2.1,cross.1.3,bogus.1.1"
    at.switch_page("pages/7_Head_Ablation.py")
    at.run()
    assert not at.exception, at.exception
    assert any("bogus.1.1" in w.value for w in at.warning)
    assert at.query_params["off"] in ("cross.1.3,cross.2.1", ["cross.1.3,cross.2.1"])
    tr = Translator.load(checkpoints / "en-de", device="cpu")
    m = head_mask_array([("cross", 1, 0), ("cross", 0, 2)], 2, 4)
    expect = tr.translate("I have no time.", head_mask=m).text
    intact = tr.translate("I have no time.").text
    texts = " ".join(md.value for md in at.markdown)
    assert f"**Without 2 heads** (beam 4)  \n{expect or '∅'}" in texts
    assert f"**Intact model** (beam 4)  \n{intact or '∅'}" in texts
    assert any("Run the sweep" in b.label for b in at.button)  # no head_sweep.json beside the tiny checkpoint
    # every model run of the page took its turn in the server's decode queue (aiayn.serving): the intact beam search
    # (batchable: 1 sentence), the ablated one (a head mask runs alone), the reference's log-probability with and
    # without the heads, the two teacher-forced passes of the comparison
    from aiayn.app import models

    q = models.decode_queue("en-de")
    assert q.stats.turns == 6 and q.stats.sentences == 1, q.stats


def test_page_keeps_sentence_and_switches_across_pages(checkpoints):
    """Issue 14: leaving through the sidebar and coming back emptied the sentence and switched every head back on;
    a newly typed sentence kept the previous sentence's reference."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=90)
    at.query_params["off"] = "cross.2.1"
    at.switch_page("pages/7_Head_Ablation.py")
    at.run()
    at.text_input(key="ab_text").set_value("My dog sleeps.")
    at.button[0].click().run()  # the form's submit button
    assert not at.exception, at.exception
    assert at.text_input(key="ab_ref").value == ""  # not the curated sentence's reference
    at.switch_page("pages/5_Scaled_Dot_Product.py").run()
    at.switch_page("pages/7_Head_Ablation.py").run()
    assert not at.exception, at.exception
    assert at.text_input(key="ab_text").value == "My dog sleeps."
    assert at.segmented_control(key="ab_off_cross_1").value == ["1"]
    assert any("**Without 1 head** (beam 4)" in md.value for md in at.markdown)


@pytest.mark.parametrize("off, blank", [("cross.2.1", True), ("encoder.1.1", False)])
def test_page_says_why_no_map_changed(checkpoints, off, blank):
    """The comparison's note appears when the removed head is the last layer's cross-attention (the tiny model has
    2 layers: no cross map is computed after it) and not when an encoder head of layer 1 is removed."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=90)
    at.query_params["text"] = "I have no time."
    at.query_params["off"] = off
    at.query_params["kind"] = "cross"
    at.switch_page("pages/7_Head_Ablation.py")
    at.run()
    assert not at.exception, at.exception
    assert any("map changed" in i.value for i in at.info) == blank


def test_a_blank_difference_says_why_and_a_real_one_does_not(tiny_translator):
    """Removing the last layer's cross-attention head changes no map of any kind (only what is computed after it:
    the probabilities), so each kind gets the note; removing an encoder head of layer 1 changes the encoder maps above
    it and every cross map, so those kinds get none."""
    from aiayn.analysis.ablation import unchanged_maps_note

    tr = tiny_translator
    L, H = tr.cfg.n_layers, tr.cfg.n_heads
    src = tr.encode_source("the cat sat on the mat").ids
    out = tr.translate("the cat sat on the mat", beam_size=1).output_ids
    intact = forced_maps(tr, src, out)
    last_cross = forced_maps(tr, src, out, head_mask=head_mask_array([("cross", L - 1, 0)], L, H))
    first_enc = forced_maps(tr, src, out, head_mask=head_mask_array([("encoder", 0, 0)], L, H))
    for kind in ("encoder", "decoder", "cross"):
        note = unchanged_maps_note(last_cross.get(kind).numpy() - intact.get(kind).numpy(), kind.title())
        assert note is not None and kind in note
    assert unchanged_maps_note(first_enc.get("cross").numpy() - intact.get("cross").numpy(), "Cross") is None
    assert unchanged_maps_note(first_enc.get("encoder").numpy() - intact.get("encoder").numpy(), "Encoder") is None
    assert unchanged_maps_note(np.zeros((0, 0, 0, 0)), "Encoder") is not None
