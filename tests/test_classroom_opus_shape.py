"""The classroom benchmark's paper-size class (benchmarks/classroom_opus.py): the Opus-MT en-de shape as published,
its vocabulary at full size, the ``</s>`` fit that makes an untrained model end its outputs, and a ``--quick`` class
served through ``aiayn import-marian`` and ``?model=`` whose every answer equals a lone run. The full-size model is
built here without the import (74 M parameters: its conversion is too slow for a unit test); the import and the server
run on the quick shape. Needs ``transformers`` (requirements-dev.txt). No timing assertions."""
from __future__ import annotations

import importlib.util
import json

import pytest

transformers = pytest.importorskip("transformers")

from benchmarks import classroom, classroom_opus  # noqa: E402
from benchmarks.__main__ import main as bench_main  # noqa: E402

#: Helsinki-NLP/opus-mt-en-de's config.json, the fields that shape the model (typed from the model's hub page)
PUBLISHED = {"d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8,
             "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048, "vocab_size": 58101,
             "pad_token_id": 58100, "eos_token_id": 0, "decoder_start_token_id": 58100,
             "activation_function": "swish", "max_position_embeddings": 512, "scale_embedding": True,
             "static_position_embeddings": True, "share_encoder_decoder_embeddings": True,
             "normalize_before": False}


def test_the_published_shape_converts_to_the_papers_base_model():
    import torch

    from aiayn import Transformer
    from aiayn.interop_marian import marian_config

    config = transformers.MarianConfig(**classroom_opus.OPUS_MT_EN_DE)
    assert {k: getattr(config, k) for k in PUBLISHED} == PUBLISHED
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config)
    cfg = marian_config(model)  # what aiayn import-marian writes into config.json
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.vocab_size, cfg.max_len) == (6, 512, 8, 2048, 58101, 512)
    assert (cfg.pad_id, cfg.eos_id, cfg.decoder_start, cfg.activation) == (58100, 0, "pad", "swish")
    assert cfg.share_embeddings and not cfg.norm_first and cfg.positional == "sinusoidal" and cfg.final_logits_bias
    d, v, f, n = 512, 58101, 2048, 6
    attention, ffn, norm = 4 * (d * d + d), d * f + f + f * d + d, 2 * d
    by_hand = v * d + n * (attention + ffn + 2 * norm) + n * (2 * attention + ffn + 3 * norm)
    assert Transformer(cfg).num_parameters() == by_hand


def test_the_vocabulary_has_opus_mts_layout_at_full_size():
    pieces = ["<unk>", "<s>", "</s>", "\u2581the", "s", "\u2581the", "<pad>", "\u2581opus00000"]
    vocab = classroom_opus.opus_vocab(pieces, 58101)
    assert len(vocab) == len(set(vocab)) == 58101
    assert (vocab[0], vocab[1], vocab[-1]) == ("</s>", "<unk>", "<pad>")
    assert vocab[2:5] == ["\u2581the", "s", "\u2581opus00000"]  # the real pieces first, once each, in order
    assert "<s>" not in vocab
    with pytest.raises(ValueError, match="do not fit"):
        classroom_opus.opus_vocab(["a", "b", "c"], 5)


def _output_lengths(checkpoint, sentences):
    from aiayn import Translator

    tr = Translator.load(checkpoint, device="cpu")
    return [len(tr.translate(s, beam_size=4, length_penalty=0.6, n_best=4).output_ids) for s in sentences]


def test_the_eos_fit_ends_outputs_near_the_asked_length(tmp_path):
    """Untrained, the model never ends (source + 50 pieces); fitted, its outputs end near the asked position,
    later when asked for later."""
    sentences = list(classroom.SENTENCES[:4])
    short = classroom_opus.build_opus_shape_checkpoint(tmp_path / "short", output_pieces=8, **classroom_opus.QUICK_SHAPE)
    long = classroom_opus.build_opus_shape_checkpoint(tmp_path / "long", output_pieces=20, **classroom_opus.QUICK_SHAPE)
    short_lengths, long_lengths = _output_lengths(short, sentences), _output_lengths(long, sentences)
    assert all(2 <= n <= 10 for n in short_lengths), short_lengths
    assert all(10 < n <= 22 for n in long_lengths), long_lengths
    config = json.loads((short / "config.json").read_text(encoding="utf-8"))
    assert config["meta"]["origin"] == "imported" and config["meta"]["direction"] == "en-de"
    assert config["model"]["vocab_size"] == 4000 and config["model"]["decoder_start"] == "pad"
    vocab = json.loads((short / "vocab.json").read_text(encoding="utf-8"))
    assert len(vocab) == 4000 and vocab["<pad>"] == 3999 and vocab["</s>"] == 0


def test_quick_class_on_the_opus_shape_model_answers_as_lone_runs(tmp_path, monkeypatch):
    """``--quick --only classroom`` with ``AIAYN_BENCH_CLASSROOM=opus_shape``: the model imported into a temporary
    checkpoints folder, N = 1 and 3 students opening ``?model=opus-shape-en-de``, every answer equal to a lone run of
    that checkpoint (the shipped model's would differ), and no shipped-model rows."""
    monkeypatch.setenv(classroom.PARTS_ENV, "opus_shape")
    out = tmp_path / "opus.json"
    assert bench_main(["--quick", "--only", "classroom", "--threads", "1", "--device", "cpu", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = {r["id"]: r for r in data["rows"]}
    assert all(r.startswith("classroom.cpu.opus_shape.") for r in rows), sorted(rows)
    for rid in ("classroom.cpu.opus_shape.n3.all.p95", "classroom.cpu.opus_shape.n3.explorer.p95",
                "classroom.cpu.opus_shape.n1.translate.p95", "classroom.cpu.opus_shape.n3.cpu_per_student"):
        assert rows[rid]["value"] is not None and rows[rid]["value"] > 0, rows[rid]
    every = rows["classroom.cpu.opus_shape.n3.all.p95"]
    assert len(every["detail"]["samples_s"]) == 3 and every["detail"]["wrong"] == []
    info = data["info"]["classroom_opus_shape"]
    assert f"{info['num_parameters']:,} parameters" in every["note"]
    assert all(w["error"] is None for w in info["warmup"])
    assert info["model"]["vocab_size"] == 4000 and info["agreement"]["greedy_equal"] == info["agreement"]["sentences"]
    assert all(2 <= n < 30 for n in every["detail"]["output_pieces"])  # ended, not cut at source + 50


def test_without_transformers_the_rows_say_why(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name, *a))

    class Ctx:
        quick, info = True, {}

        @staticmethod
        def log(msg):
            pass

    rows = classroom_opus.run_opus_shape(Ctx(), None)
    assert [r.id for r in rows] == ["classroom.cpu.opus_shape.n3.all.p95"]
    assert rows[0].value is None and "transformers" in rows[0].note


@pytest.mark.parametrize("value, want", [("", ("shipped", "opus_shape")), ("opus_shape", ("opus_shape",)),
                                         (" shipped ", ("shipped",))])
def test_the_parts_variable(monkeypatch, value, want):
    monkeypatch.setenv(classroom.PARTS_ENV, value)
    assert classroom.parts() == want


def test_an_unknown_part_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(classroom.PARTS_ENV, "opus")
    with pytest.raises(ValueError, match="choose from shipped,opus_shape"):
        classroom.parts()


def test_the_reranked_class_is_named_only(monkeypatch):
    monkeypatch.setenv(classroom.PARTS_ENV, "rerank")
    assert classroom.parts() == ("rerank",)
    monkeypatch.setenv(classroom.PARTS_ENV, "")
    assert "rerank" not in classroom.parts()


def test_reranked_references_are_what_the_reranked_translate_page_shows(tiny_checkpoints):
    """The reranked class checks each student against the reranked translation and, when the beam did not put it
    first, the cross-attention of its teacher-forced pass (what pages/1_Translate.py shows)."""
    import numpy as np

    from aiayn import Translator
    from aiayn.reranking import DEFAULT_WEIGHT, rerank

    sentences = list(classroom.SENTENCES) + ["Good morning!", "The cat sat on the mat.", "We will go home tomorrow."]
    fwd, rev = (Translator.load(tiny_checkpoints / d, device="cpu") for d in ("en-de", "de-en"))
    plain = classroom.lone_references(tiny_checkpoints / "en-de", sentences)
    refs = classroom.lone_references(tiny_checkpoints / "en-de", sentences, rerank=True)
    moved = 0
    for s in sentences:
        best = rerank(s, fwd.translate(s, beam_size=4, length_penalty=0.6, n_best=4).nbest, rev, DEFAULT_WEIGHT)[0]
        assert refs[s]["text"] == best.text
        if best.beam_rank == 0:
            assert refs[s]["text"] == plain[s]["text"]
            continue
        moved += 1
        forced, _ = fwd.force(s, best.text)
        want = forced.attention.cross.float().numpy()[-1, 0].mean(axis=0)
        assert any(m.shape == want.shape and np.allclose(m, want, atol=1e-6) for m in refs[s]["maps"])
    assert moved, "the random tiny models should rerank some of these sentences"


def test_two_probes_on_one_page_get_numbered_ids():
    level = {"n": 30, "students": [{"page": "translate", "seconds": 1.0, "wrong": None}], "cpu_per_student_s": 0.1,
             "server_cpu_s": 3.0, "wall_s": 2.0, "peak_rss_mib": 500.0,
             "probes": [{"page": "translate", "seconds": 1.5, "text": "a"}, {"page": "translate", "seconds": 2.5, "text": "b"}]}
    rows = classroom.rows_of({"levels": [level]}, prefix="classroom.cpu.rerank")
    probes = {r.id: r.value for r in rows if ".probe" in r.id}
    assert probes == {"classroom.cpu.rerank.n30.probe.translate.1": 1.5, "classroom.cpu.rerank.n30.probe.translate.2": 2.5}
    assert not any(".explorer." in r.id for r in rows)  # a class on one page has no rows for the other
