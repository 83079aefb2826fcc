"""Attention across training (aiayn.training.history): recorded at every saved state of a tiny run, identical
to an independent teacher-forced pass, without changing training; exported with the checkpoint; read back
torch-free; damaged files refused; the explorer's "Across training" tab (AppTest)."""
from __future__ import annotations

import copy
import json
import shutil
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as np_load_file
from safetensors.numpy import save_file as np_save_file

from aiayn.examples import sentence_pairs
from aiayn.training.history import (
    HISTORY_FILE, KINDS, MAX_BYTES, MAX_STATES, N_SENTENCES, AttentionRecorder, capacity, keep_evenly, load_history,
)
from aiayn.training.loop import train
from aiayn.training.recipe import TrainConfig
from aiayn.training.state import list_states

QUIET = lambda *a, **k: None  # noqa: E731


def tiny_tc(data: Path, run: Path, **kw) -> TrainConfig:
    base = dict(data_dir=str(data), run_dir=str(run), direction="en-de", preset="tiny", model_overrides={"dropout": 0.1},
                max_tokens=512, accumulation=1, warmup_steps=20, max_steps=5, valid_every=1000, valid_bleu_sentences=0,
                save_every=2, keep=5, threads=1, seed=7, token_cache=str(run.parent / "token_cache"))
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def runs(tiny_data, tmp_path_factory):
    """The same 5-step run (dropout 0.1, states at 2, 4, 5) with and without recording."""
    root = tmp_path_factory.mktemp("history")
    on, off = root / "on", root / "off"
    train(tiny_tc(tiny_data, on), log=QUIET)
    train(tiny_tc(tiny_data, off, record_attention=False), log=QUIET)
    return on, off


def state_translator(run: Path, state: Path):
    from aiayn import Translator
    from aiayn.checkpoint import load_checkpoint
    from aiayn.tokenizer import Tokenizer

    model, _ = load_checkpoint(state, device="cpu")
    return Translator(model, Tokenizer.load(run / "spm.model"))


def test_run_records_every_saved_state_and_step_0(runs):
    on, _ = runs
    h = load_history(on)
    assert h is not None and h.path == on / HISTORY_FILE
    assert h.steps == [0, 2, 4, 5]  # the fresh model, then every saved state (save_every 2, and the last)
    assert [p.name for p in list_states(on)] == ["step_00000002", "step_00000004", "step_00000005"]
    pairs = sentence_pairs("en-de")[:N_SENTENCES]
    assert [(s.source, s.reference) for s in h.sentences] == pairs
    assert (h.direction, h.n_layers, h.n_heads) == ("en-de", 2, 4)
    for i, s in enumerate(h.sentences):
        S, T = len(s.src_tokens), len(s.output_tokens)
        assert s.src_tokens[-1] == "</s>" and s.decoder_input_tokens[0] == "<s>" and s.output_tokens[-1] == "</s>"
        assert s.decoder_input_tokens[1:] == s.output_tokens[:-1]
        shapes = {"encoder": (S, S), "decoder": (T, T), "cross": (T, S)}
        for kind in KINDS:
            w = h.stack(i, kind)
            assert w.shape == (4, 2, 4) + shapes[kind] and w.dtype == np.float32
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=5e-3)
        dec = h.stack(i, "decoder")
        assert np.all(dec[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)  # masked (Section 3.2.3)
    # the weights moved between the first and the last state
    assert np.abs(h.stack(0, "cross")[0] - h.stack(0, "cross")[-1]).max() > 1e-3


@pytest.mark.parametrize("step", [2, 5])
def test_recorded_maps_equal_an_independent_forced_pass(runs, step):
    """The history at step N equals Translator.force on the run state step_N (float16 storage: 1e-3)."""
    on, _ = runs
    h = load_history(on)
    tr = state_translator(on, on / f"step_{step:08d}")
    j = h.step_index(step)
    for i, (src, ref) in enumerate(sentence_pairs("en-de")[:N_SENTENCES]):
        t, _ = tr.force(src, ref)
        s = h.sentences[i]
        assert (s.src_tokens, s.decoder_input_tokens, s.output_tokens) == (t.src_tokens, t.decoder_input_tokens, t.output_tokens)
        for kind in KINDS:
            np.testing.assert_allclose(h.stack(i, kind)[j], getattr(t.attention, kind)[:, 0].numpy(), atol=1e-3)


def test_recording_does_not_change_training(runs):
    """Bit-identical weights, Adam moments, RNG state and losses with and without recording (dropout 0.1:
    a recording pass in train mode, or one drawing random numbers, would change them)."""
    on, off = runs
    assert not (off / HISTORY_FILE).exists() and load_history(off) is None
    for name in ("step_00000002", "step_00000005"):
        for f in ("model.safetensors", "optimizer.safetensors"):
            a, b = np_load_file(str(on / name / f)), np_load_file(str(off / name / f))
            assert set(a) == set(b)
            for k in a:
                assert np.array_equal(a[k], b[k]), (name, f, k)
    strip = lambda p: [{k: v for k, v in json.loads(x).items() if k not in ("tokens_per_s", "wall_time")}  # noqa: E731
                       for x in (p / "metrics.jsonl").read_text().splitlines()]
    assert strip(on) == strip(off)


@pytest.fixture()
def own(tiny_translator):
    """A private copy of the tiny en-de model (tests change its mode and weights) and the tokenizer."""
    return copy.deepcopy(tiny_translator.model), tiny_translator.tokenizer


def test_recorder_leaves_mode_and_rng_alone(own):
    model, tok = own
    rec = AttentionRecorder(tok, "de-en", max_len=model.cfg.max_len, n_sentences=2)
    model.train()
    rng = torch.get_rng_state()
    out = rec.maps(model)
    assert model.training and torch.equal(rng, torch.get_rng_state())
    assert len(out) == 2 and all(m[k].dtype == np.float16 for m in out for k in KINDS)
    assert [s.source for s in rec.sentences(model.cfg.decoder_start_id)] == [src for src, _ in sentence_pairs("de-en")[:2]]
    model.eval()
    rec.maps(model)
    assert not model.training


def test_export_copies_the_history_and_the_checkpoint_still_loads(runs, tmp_path):
    from aiayn import Translator
    from aiayn.training.export import export

    on, off = runs
    out = export(on, tmp_path / "ckpt", last=2)
    assert (out / HISTORY_FILE).read_bytes() == (on / HISTORY_FILE).read_bytes()
    assert load_history(out).steps == [0, 2, 4, 5]
    assert Translator.load(out, device="cpu").translate("Good morning.", beam_size=2).output_tokens
    # a run without a history exports none, and removes a stale one left in the output directory
    out2 = export(off, out, last=1)
    assert not (out2 / HISTORY_FILE).exists() and load_history(out2) is None


def test_checkpoint_without_history_gives_none(tiny_checkpoints, tmp_path):
    assert load_history(tiny_checkpoints / "en-de") is None
    with pytest.raises(FileNotFoundError):
        load_history(tmp_path / "nowhere")


def _damage(src: Path, dest: Path, how: str) -> None:
    data = src.read_bytes()
    if how == "truncated":
        dest.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        dest.write_bytes(b"not a safetensors file at all")
    elif how == "no-index":
        np_save_file(np_load_file(str(src)), str(dest))
    elif how == "wrong-shape":
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8 : 8 + n])
        index = json.loads(header["__metadata__"]["aiayn_history"])
        index["steps"] = index["steps"][:-1]  # fewer steps than the tensors hold
        np_save_file(np_load_file(str(src)), str(dest), metadata={"aiayn_history": json.dumps(index)})
    elif how == "rows":
        t = np_load_file(str(src))
        t["s0/cross"] = (t["s0/cross"] * 0.5).astype(np.float16)
        n = struct.unpack("<Q", data[:8])[0]
        np_save_file(t, str(dest), metadata=json.loads(data[8 : 8 + n])["__metadata__"])


@pytest.mark.parametrize("how", ["truncated", "garbage", "no-index", "wrong-shape", "rows"])
def test_damaged_history_is_a_value_error(runs, tmp_path, how):
    on, _ = runs
    d = tmp_path / "ckpt"
    d.mkdir()
    _damage(on / HISTORY_FILE, d / HISTORY_FILE, how)
    with pytest.raises(ValueError, match="attention history"):
        load_history(d)
    with pytest.raises(ValueError):
        load_history(d / HISTORY_FILE)  # the file itself
    # export leaves a damaged history out, with a warning, and still exports the weights
    if how == "garbage":
        from aiayn.training.export import export

        run = tmp_path / "run"
        shutil.copytree(on, run)
        shutil.copyfile(d / HISTORY_FILE, run / HISTORY_FILE)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = export(run, tmp_path / "out", last=1)
        assert any("attention history was not exported" in str(w.message) for w in caught)
        assert not (out / HISTORY_FILE).exists() and (out / "model.safetensors").is_file()


def test_keep_evenly_hand_computed():
    # [0..4] to 3: gaps (2, 2, 2) drop index 1 -> [0, 2, 3, 4]; gaps (3, 2) drop the value 3 -> [0, 2, 4]
    assert keep_evenly([0, 1, 2, 3, 4], 3) == [0, 2, 4]
    assert keep_evenly([0, 10, 11, 30], 3) == [0, 2, 3]  # gaps (11, 20): drop the crowded 10
    assert keep_evenly([5, 9], 2) == [0, 1] and keep_evenly([7], 4) == [0]
    with pytest.raises(ValueError):
        keep_evenly([0, 1, 2], 1)
    assert capacity(1000, max_states=32, max_bytes=10_000) == 10
    assert capacity(10**9) == 2 and capacity(1) == MAX_STATES
    assert MAX_BYTES <= 4 * 1024 * 1024


def test_budget_and_resume_replacement(own, tmp_path):
    """Appends thin to the budget (hand-computed steps), a step at or before the last replaces the later ones
    (a resumed run records them again), and a damaged file is started afresh."""
    model, tok = own
    msgs: list[str] = []
    rec = AttentionRecorder(tok, "en-de", max_len=model.cfg.max_len, n_sentences=2, max_states=3, log=msgs.append)
    for step in range(7):
        rec.record(tmp_path, model, step)
    # [0,1,2,3] -> [0,2,3]; +4 -> [0,2,4]; +5 -> [0,2,5]; +6 -> [0,2,6] (keep_evenly at k = 3)
    assert load_history(tmp_path).steps == [0, 2, 6]
    before = load_history(tmp_path).stack(1, "cross")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # other weights: other maps
    rec.record(tmp_path, model, 2)  # resumed from step 1: steps 2 and 6 belong to the lost run
    h = load_history(tmp_path)
    assert h.steps == [0, 2]
    np.testing.assert_array_equal(h.stack(1, "cross")[0], before[0])
    assert np.abs(h.stack(1, "cross")[1] - before[1]).max() > 1e-3
    np.testing.assert_array_equal(h.stack(1, "cross")[1], rec.maps(model)[1]["cross"].astype(np.float32))
    # byte budget: 2 states at most (first and newest)
    small = AttentionRecorder(tok, "en-de", max_len=model.cfg.max_len, n_sentences=1, max_bytes=1)
    for step in (0, 5, 9):
        small.record(tmp_path / "b", model, step)
    assert load_history(tmp_path / "b").steps == [0, 9]
    # another sentence set (direction) or a torn file: started afresh, with a message
    rec_de = AttentionRecorder(tok, "de-en", max_len=model.cfg.max_len, n_sentences=2, log=msgs.append)
    rec_de.record(tmp_path, model, 3)
    assert load_history(tmp_path).steps == [3] and load_history(tmp_path).direction == "de-en"
    (tmp_path / HISTORY_FILE).write_bytes(b"torn")
    rec.record(tmp_path, model, 12)
    assert load_history(tmp_path).steps == [12]
    assert sum("afresh" in m for m in msgs) == 2


def test_exports_are_the_recorded_weights(runs):
    on, _ = runs
    h = load_history(on)
    w = h.stack(1, "cross")  # (N, L, H, T, S)
    n, L, H, T, S = w.shape
    df = h.to_dataframe(1, "cross", layer=1, head=2)
    assert len(df) == n * T * S and set(df["layer"]) == {1} and set(df["head"]) == {2}
    assert sorted(set(df["step"])) == h.steps
    row = df[(df.step == 4) & (df["query"] == 2) & (df["key"] == 0)].iloc[0]
    assert row.weight == pytest.approx(float(w[2, 1, 2, 2, 0]))
    assert (row.query_token, row.key_token) == (h.sentences[1].decoder_input_tokens[2], h.sentences[1].src_tokens[0])
    assert len(h.to_dataframe(0, "encoder")) == w.shape[0] * L * H * len(h.sentences[0].src_tokens) ** 2
    js = json.loads(json.dumps(h.to_json(1, "cross", layer=0)))
    assert js["steps"] == h.steps and js["layers"] == [0] and js["heads"] == list(range(H))
    np.testing.assert_allclose(np.array(js["weights"]), w[:, :1], atol=1e-5)
    with pytest.raises(ValueError, match="layer 2 out of range"):
        h.to_dataframe(0, "cross", layer=2)
    with pytest.raises(ValueError, match="unknown attention kind"):
        h.stack(0, "self")
    with pytest.raises(ValueError, match="out of range"):
        h.stack(9, "cross")
    with pytest.raises(ValueError, match="step 3 was not recorded"):
        h.step_index(3)


@pytest.mark.parametrize("words,hide", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("kind", KINDS)
def test_app_view_matches_the_explorers_view_stack(runs, kind, words, hide):
    """The tab's (N, Q', K') maps and labels at a step are the explorer's view_stack of a forced pass."""
    from aiayn.analysis import view_stack
    from aiayn.app.history import history_view

    on, _ = runs
    h = load_history(on)
    tr = state_translator(on, on / "step_00000004")
    t, _ = tr.force(*sentence_pairs("en-de")[3])
    ref, q_ref, k_ref = view_stack(t.attention, kind, words=words, hide_special=hide)
    for head in (None, 2):
        w, q, k = history_view(h, 3, kind, 2, head, words=words, hide_special=hide)
        assert (q, k) == (q_ref, k_ref)
        expect = ref[1].mean(0) if head is None else ref[1, head - 1]
        np.testing.assert_allclose(w[h.step_index(4)], expect, atol=2e-3)
        assert w.shape[0] == len(h.steps)
    with pytest.raises(ValueError):
        history_view(h, 0, kind, 3, None)


def test_strip_and_curve_figures():
    from aiayn.app.history import strip_indices
    from aiayn.figures.history import history_curve, history_strip

    w = np.random.default_rng(0).dirichlet(np.ones(3), size=(4, 2))  # (N=4, Q=2, K=3)
    fig = history_strip(w, [0, 5, 9, 12], ["a", "b"], ["x", "<s>", "z"], current=9)
    assert [a.text for a in fig.layout.annotations] == ["step 0", "step 5", "▶ step 9", "step 12"]
    assert len(fig.data) == 4 and np.allclose(np.array(fig.data[2].z), w[2]) and fig.data[0].x[1] == "&lt;s&gt;"
    with pytest.raises(ValueError):
        history_strip(w, [0, 5, 9], ["a", "b"], ["x", "y", "z"])
    c = history_curve([3.0, 2.0, 1.5], [0, 5, 9], current=5, y_title="bits")
    assert list(c.data[0].y) == [3.0, 2.0, 1.5] and list(c.data[1].x) == [5]
    with pytest.raises(ValueError):
        history_curve([1.0], [0, 1])
    assert strip_indices(3, 1) == [0, 1, 2]
    assert strip_indices(32, 5) == [0, 4, 5, 9, 13, 18, 22, 27, 31]  # 8 evenly spread, plus the current one
    assert strip_indices(0, 0) == []


def test_recorder_feeds_the_models_own_start_piece(tiny_translator):
    """An imported Opus-MT model starts decoding from <pad> (decoder_start="pad"): the recorded maps are those of
    a teacher-forced pass written out here feeding <pad> first, and the labels say so; feeding <s> would differ."""
    from tiny_models import perturbed_tiny_model

    tok = tiny_translator.tokenizer
    model = perturbed_tiny_model(3, vocab_size=tok.vocab_size, max_len=64, decoder_start="pad")
    rec = AttentionRecorder(tok, "en-de", max_len=model.cfg.max_len, n_sentences=2)
    got = rec.maps(model)
    for (src, ref), maps, sent in zip(sentence_pairs("en-de")[:2], got, rec.sentences(model.cfg.decoder_start_id)):
        src_ids, ref_ids = tok.encode(src) + [tok.eos_id], tok.encode(ref) + [tok.eos_id]
        assert sent.decoder_input_tokens[0] == "<pad>" and sent.output_tokens == [tok.id_to_piece(i) for i in ref_ids]
        with torch.inference_mode():
            for start, same in ((tok.pad_id, True), (tok.bos_id, False)):
                _, want = model(torch.tensor([src_ids]), torch.tensor([[start] + ref_ids[:-1]]), return_attention=True)
                for k in KINDS:
                    close = np.allclose(maps[k], getattr(want, k)[:, 0].numpy().astype(np.float16), atol=2e-3)
                    assert close == same or k == "encoder", (k, start)


def test_figures_place_a_warm_started_history_on_the_models_lifetime():
    """A run warm-started from a trained parent records its step 0 = the parent's weights: with the lineage's
    offset the figures say lifetime steps and name the parent, instead of calling it step 0."""
    from aiayn.figures.history import history_curve, history_strip

    w = np.random.default_rng(1).dirichlet(np.ones(3), size=(3, 2))
    fig = history_strip(w, [0, 250, 500], ["a", "b"], ["x", "y", "z"], current=250, offset=8000)
    assert [a.text for a in fig.layout.annotations] == ["step 8,000 (parent)", "▶ step 8,250", "step 8,500"]
    c = history_curve([1.3, 1.35, 1.4], [0, 250, 500], current=500, offset=8000)
    assert list(c.data[0].x) == [8000, 8250, 8500] and list(c.data[1].x) == [8500]
    assert c.layout.xaxis.title.text == "lifetime training step" and c.layout.annotations[0].text == "trained parent"
    plain = history_curve([1.3, 1.4], [0, 5])
    assert plain.layout.xaxis.title.text == "training step" and not plain.layout.annotations


@pytest.mark.parametrize("values, words", [
    ([1.27, 1.30, 1.41], "rose from 1.27 to 1.41 bits"),
    ([2.0, 1.2, 0.9], "fell from 2.00 to 0.90 bits"),
    ([1.000, 1.2, 1.005], "stayed at about 1.00 bits"),  # the ends within 2%: no direction claimed
    ([np.nan, 1.5], ""),
])
def test_trend_words_describe_the_data(values, words):
    from aiayn.figures.history import trend_words

    assert trend_words(values, "bits") == words
