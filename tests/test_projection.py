"""aiayn.model.projection: the output projection at a serving precision (int8, bfloat16), chosen explicitly per
loaded model; float32 (the default) unchanged; a class's batch equal to a lone run with the same setting."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from aiayn import Translator
from aiayn.analysis import explain, explain_batch
from aiayn.decoding import beam_search
from aiayn.model.projection import PROJECTION_ENV, OutputProjection, serving_precision

SENTENCES = ["The cat sleeps on the sofa.", "Where is the nearest station?", "I would like a cup of coffee.",
             "My brother plays football every Sunday.", "Good morning."]
QUANT_ATOL = 2e-3


@pytest.fixture(autouse=True)
def _no_setting(monkeypatch):
    monkeypatch.delenv(PROJECTION_ENV, raising=False)


@pytest.fixture(scope="module")
def shipped_int8():
    from aiayn.translator import CHECKPOINTS_DIR

    d = CHECKPOINTS_DIR / "en-de"
    if not d.is_dir():
        pytest.skip(f"shipped checkpoint {d} does not exist")
    return Translator.load(d, device="cpu", projection="int8")


def _states(model, rows: int, seed: int = 0) -> torch.Tensor:
    """Decoder-like hidden states ``(rows, D)``: the embedding rows of random pieces plus noise."""
    g = torch.Generator().manual_seed(seed)
    weight, _ = model.output_layer()
    ids = torch.randint(0, weight.size(0), (rows,), generator=g)
    return (weight[ids] * model.cfg.d_model ** 0.5 + torch.randn(rows, model.cfg.d_model, generator=g)).detach()


def test_int8_quantizes_the_weights_and_stays_within_the_rounding_bound(shipped_int8):
    model = shipped_int8.model
    proj = shipped_int8.projection
    assert proj.precision == "int8" and proj._w_int8_t.dtype == torch.int8
    h = _states(model, 12)
    with torch.inference_mode():
        exact = model.project(h)
        got = proj.function(h)
    assert got.dtype == torch.float32 and got.shape == exact.shape
    assert not torch.equal(got, exact)  # the option really changes the product
    # |x.w - q(x).q(w)| <= sum_i |x_i| s_w / 2 + |w_i| s_x / 2 + s_x s_w / 4 (round to nearest, one scale per row)
    weight, _ = model.output_layer()
    s_w = weight.detach().abs().amax(1) / 127
    s_x = h.abs().amax(1) / 127
    bound = (h.abs().sum(1)[:, None] * s_w / 2 + s_x[:, None] * weight.detach().abs().sum(1) / 2
             + h.size(1) * s_x[:, None] * s_w / 4)
    assert bool(((got - exact).abs() <= bound * 1.001 + 1e-4).all())


def test_int8_logits_of_a_row_do_not_depend_on_its_batch(shipped_int8):
    h = _states(shipped_int8.model, 9, seed=1)
    with torch.inference_mode():
        together = shipped_int8.projection.function(h[None])[0]
        for i in (0, 4, 8):
            assert torch.equal(shipped_int8.projection.function(h[i:i + 1]), together[i:i + 1])


def test_bfloat16_casts_once_and_stays_within_bfloat16_rounding(shipped_int8):
    model = shipped_int8.model
    proj = OutputProjection(model, "bfloat16")
    assert proj._w_bf16.dtype == torch.bfloat16
    h = _states(model, 6, seed=2)
    weight, _ = model.output_layer()
    with torch.inference_mode():
        exact, got = model.project(h), proj.function(h)
    assert got.dtype == torch.float32 and not torch.equal(got, exact)
    # each factor rounded to 8 significant bits (relative error <= 2^-8), float32 sums
    bound = (h.abs() @ weight.detach().abs().t()) * (2 * 2.0 ** -8 + 2.0 ** -16)
    assert bool(((got - exact).abs() <= bound * 1.01 + 1e-4).all())


def test_a_class_batch_equals_a_lone_run_with_int8(shipped_int8):
    """Same texts, pieces, n-best lists and next pieces. Scores agree to QUANT_ATOL, not to float32 rounding: a
    padded batch moves a decoder state by ~1e-6, which can carry one of its values across an int8 rounding
    boundary, a step of ``s_h * w`` in a few logits."""
    out = explain_batch(shipped_int8, SENTENCES)
    assert {t.batch_size for t in out} == {len(SENTENCES)}
    for t in out:
        alone = explain(shipped_int8, t.source)
        assert t.text == alone.text and t.output_tokens == alone.output_tokens
        assert [x for x, _ in t.nbest] == [x for x, _ in alone.nbest]
        assert np.allclose([s for _, s in t.nbest], [s for _, s in alone.nbest], atol=QUANT_ATOL, rtol=0)
        assert t.next_pieces.pieces == alone.next_pieces.pieces
        assert np.allclose(t.next_pieces.probs, alone.next_pieces.probs, atol=QUANT_ATOL, rtol=0)


def test_the_float32_default_is_the_models_own_projection(tiny_checkpoints):
    tr = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    assert tr.projection.precision == "float32" and tr.projection.function is None
    src = torch.tensor([tr.encode_source("the house").ids])
    with torch.inference_mode():
        plain = beam_search(tr.model, src, beam_size=4, n_best=4)[0]
        own = beam_search(tr.model, src, beam_size=4, n_best=4, project=tr.model.project)[0]
    t = tr.translate("the house", n_best=4)
    assert [h.tokens for h in plain] == [h.tokens for h in own] and [h.score for h in plain] == [h.score for h in own]
    assert t.output_ids == plain[0].tokens and t.score == pytest.approx(plain[0].score, abs=0)


def test_the_setting_comes_from_the_argument_then_the_environment_then_the_checkpoint(tiny_checkpoints, tmp_path,
                                                                                       monkeypatch):
    d = tmp_path / "en-de"
    shutil.copytree(tiny_checkpoints / "en-de", d)
    config = json.loads((d / "config.json").read_text())
    config["meta"]["serve_projection"] = "int8"
    (d / "config.json").write_text(json.dumps(config))
    assert Translator.load(d).projection.precision == "int8"
    assert Translator.load(d, projection="float32").projection.precision == "float32"
    monkeypatch.setenv(PROJECTION_ENV, "bfloat16")
    assert Translator.load(d).projection.precision == "bfloat16"
    assert Translator.load(tiny_checkpoints / "en-de").projection.precision == "bfloat16"
    assert serving_precision("int8", {"serve_projection": "float32"}) == "int8"


def test_a_view_for_another_direction_shares_the_converted_weights(shipped_int8):
    assert shipped_int8.for_direction("en-de").projection is shipped_int8.projection


@pytest.mark.parametrize("where", ["argument", "environment", "checkpoint"])
def test_a_bad_setting_is_a_one_line_error_naming_its_source(where, tiny_checkpoints, tmp_path, monkeypatch):
    d = tiny_checkpoints / "en-de"
    kwargs = {}
    if where == "argument":
        kwargs["projection"] = "fp8"
    elif where == "environment":
        monkeypatch.setenv(PROJECTION_ENV, "int4")
    else:
        d = tmp_path / "en-de"
        shutil.copytree(tiny_checkpoints / "en-de", d)
        config = json.loads((d / "config.json").read_text())
        config["meta"]["serve_projection"] = 16
        (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as err:
        Translator.load(d, **kwargs)
    msg = str(err.value)
    assert "\n" not in msg and "float32, int8, bfloat16" in msg
    assert {"argument": "'fp8'", "environment": PROJECTION_ENV, "checkpoint": "serve_projection"}[where] in msg


def test_import_marian_records_the_serving_precision_and_refuses_a_bad_one(tmp_path, fixture_pairs, capsys):
    pytest.importorskip("transformers")
    from marian_fixture import write_marian

    from aiayn.import_marian import cli_main

    src = write_marian(tmp_path / "opus-mt-tiny", fixture_pairs)
    assert cli_main([str(src), "--out", str(tmp_path / "bad"), "--serve-projection", "fp8", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--serve-projection must be one of float32, int8, bfloat16, got 'fp8'" in err
    assert not (tmp_path / "bad").exists()
    out = tmp_path / "int8"
    assert cli_main([str(src), "--out", str(out), "--dtype", "float32", "--serve-projection", "int8", "--no-progress"]) == 0
    meta = json.loads((out / "config.json").read_text(encoding="utf-8"))["meta"]
    assert meta["serve_projection"] == "int8"
    assert meta["imported"]["agreement"]["greedy_equal"] == meta["imported"]["agreement"]["sentences"]  # float32
    assert Translator.load(out).projection.precision == "int8"


def test_evaluate_dev_records_the_precision_it_decoded_with(tiny_checkpoints, tmp_path, monkeypatch, capsys):
    from aiayn.evaluation.devsets import DEVSETS_DIR, cli_main, read_devset

    sets = tmp_path / "sets"
    sets.mkdir()
    pairs = read_devset(DEVSETS_DIR / "short.tsv")[:3]
    (sets / "short.tsv").write_text("en\tde\n" + "".join(f"{en}\t{de}\n" for en, de in pairs), encoding="utf-8")
    args = ["--checkpoint", str(tiny_checkpoints / "en-de"), "--devsets", str(sets), "--sets", "short", "--device", "cpu"]
    monkeypatch.setenv(PROJECTION_ENV, "int8")
    assert cli_main([*args, "--out", str(tmp_path / "dev.json")]) == 0
    res = json.loads((tmp_path / "dev.json").read_text(encoding="utf-8"))
    assert res["decoding"]["projection"] == "int8"
    tr = Translator.load(tiny_checkpoints / "en-de", projection="int8")
    assert res["details"]["en-de"]["short"]["hypotheses"] == [t.text for t in tr.translate_batch([en for en, _ in pairs])]
    monkeypatch.setenv(PROJECTION_ENV, "half")
    assert cli_main([*args, "--out", "-"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("aiayn evaluate-dev: $AIAYN_SERVE_PROJECTION must be one of") and "'half'" in err[-1]


def test_the_server_serves_every_user_the_environments_precision(tiny_checkpoints, monkeypatch):
    """The app's cached Translator (one per process and checkpoint, shared by every session) and its decode queue
    carry $AIAYN_SERVE_PROJECTION; a bad value is a ModelUnavailable naming the variable."""
    import streamlit as st

    from aiayn.app import models

    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tiny_checkpoints))
    try:
        st.cache_resource.clear()
        assert models.load_translator("en-de").projection.precision == "float32"
        monkeypatch.setenv(PROJECTION_ENV, "int8")
        st.cache_resource.clear()
        tr = models.load_translator("en-de")
        assert tr.projection.precision == "int8" and models.decode_queue("en-de").translator is tr
        monkeypatch.setenv(PROJECTION_ENV, "INT8")
        st.cache_resource.clear()
        with pytest.raises(models.ModelUnavailable, match=PROJECTION_ENV):
            models.load_translator("en-de")
    finally:
        st.cache_resource.clear()


@pytest.mark.parametrize("precision", ["int8", "float32"])
def test_the_sidebar_says_when_the_output_layer_is_not_float32(tiny_checkpoints, monkeypatch, precision):
    """A class served in int8 sees it said in the sidebar (its translations can differ from float32's); in float32
    the sidebar says nothing about precision. The note reads the setting without loading the model: the Overview,
    which never needs the model, stays free of it."""
    import streamlit as st
    from app_pages import open_page

    from aiayn.app import models

    loads = []
    monkeypatch.setattr(models, "_load_translator", lambda *a: loads.append(a))
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tiny_checkpoints))
    monkeypatch.setenv(PROJECTION_ENV, precision)
    st.cache_resource.clear()
    try:
        at = open_page("pages/0_Overview.py")
        assert loads == []
        assert not at.exception
        notes = [c.value for c in at.sidebar.caption if "output layer runs in" in c.value]
        assert notes == ([] if precision == "float32" else [notes[0]])
        assert precision == "float32" or "**int8**" in notes[0]
    finally:
        st.cache_resource.clear()


def test_a_sweep_in_int8_is_stored_apart_and_never_read_as_float32(tiny_checkpoints, tmp_path):
    """The head sweep's chrF drops come from translations, so they depend on the output layer's precision: a sweep
    made in int8 goes to head_sweep.int8.json (the checkpoint's float32 head_sweep.json is neither read nor
    overwritten), records its precision, and each precision reads back only its own file; a stored file without
    the field was made in float32."""
    import json
    import shutil

    from aiayn import Translator
    from aiayn.sweep import cached_head_sweep, load_sweep, sweep_path

    ckpt = tmp_path / "en-de"
    shutil.copytree(tiny_checkpoints / "en-de", ckpt)
    pairs = [("the cat", "die katze")]
    f32 = cached_head_sweep(Translator.load(ckpt, projection="float32"), pairs, beam_size=2)
    before = sweep_path(ckpt).read_bytes()
    i8 = cached_head_sweep(Translator.load(ckpt, projection="int8"), pairs, beam_size=2)
    assert sweep_path(ckpt, "int8").name == "head_sweep.int8.json" and sweep_path(ckpt).read_bytes() == before
    assert json.loads(sweep_path(ckpt, "int8").read_text())["projection"] == "int8"
    assert load_sweep(ckpt, pairs, beam_size=2, projection="int8")["chrf_drop"].tolist() == i8["chrf_drop"].tolist()
    assert load_sweep(ckpt, pairs, beam_size=2)["chrf_drop"].tolist() == f32["chrf_drop"].tolist()
    # a float32 file from before the field existed stays fresh for float32 only
    payload = json.loads(sweep_path(ckpt).read_text())
    del payload["projection"]
    sweep_path(ckpt).write_text(json.dumps(payload))
    assert load_sweep(ckpt, pairs, beam_size=2) is not None
    sweep_path(ckpt, "int8").unlink()
    assert load_sweep(ckpt, pairs, beam_size=2, projection="int8") is None
