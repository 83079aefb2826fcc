"""Tests for aiayn.checkpoint: safetensors round trips, clear errors naming the faulty file, no pickle."""
from __future__ import annotations

import json
import pickle
import shutil

import pytest
import torch
from safetensors.torch import save_file

from aiayn import Translator
from aiayn.checkpoint import CONFIG_FILE, WEIGHTS_FILE, average_checkpoints, load_checkpoint, read_config, save_checkpoint
from tiny_models import perturbed_tiny_model as tiny

SRC = torch.tensor([[5, 9, 12, 7, 3], [11, 3, 0, 0, 0]])
TGT = torch.tensor([[2, 8, 6, 30], [2, 13, 14, 0]])


@pytest.fixture
def saved(tmp_path):
    model = tiny()
    return save_checkpoint(tmp_path / "ckpt", model, dtype="float32", meta={"direction": "en-de"}), model


@pytest.mark.parametrize("overrides", [dict(), dict(norm_first=True, positional="learned", share_embeddings=False)], ids=["paper", "variants"])
def test_fp32_round_trip_is_exact(tmp_path, overrides):
    model = tiny(**overrides)
    save_checkpoint(tmp_path / "c", model, dtype="float32", meta={"note": "x"})
    loaded, config = load_checkpoint(tmp_path / "c")
    assert not loaded.training
    assert loaded.cfg == model.cfg
    assert config["meta"] == {"note": "x"} and config["dtype"] == "float32"
    assert config["num_parameters"] == model.num_parameters()
    with torch.no_grad():
        assert torch.equal(loaded(SRC, TGT), model(SRC, TGT))


def test_fp16_round_trip_within_half_precision(tmp_path):
    model = tiny()
    save_checkpoint(tmp_path / "c", model, dtype="float16")
    loaded, config = load_checkpoint(tmp_path / "c")
    assert config["dtype"] == "float16"
    # the stored weights are the fp16 rounding of the originals, loaded back as float32
    for (name, ours), theirs in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert theirs.dtype == torch.float32
        assert torch.equal(theirs, ours.half().float()), name
    with torch.no_grad():
        torch.testing.assert_close(loaded(SRC, TGT), model(SRC, TGT), atol=2e-2, rtol=1e-2)
    # and the file really is half the size of the fp32 one
    save_checkpoint(tmp_path / "c32", model, dtype="float32")
    size16 = (tmp_path / "c" / WEIGHTS_FILE).stat().st_size
    size32 = (tmp_path / "c32" / WEIGHTS_FILE).stat().st_size
    assert size16 < 0.6 * size32


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_checkpoint(tmp_path / "nowhere")


@pytest.mark.parametrize("name", [CONFIG_FILE, WEIGHTS_FILE])
def test_missing_file_is_named(saved, name):
    d, _ = saved
    (d / name).unlink()
    with pytest.raises(FileNotFoundError, match=name):
        load_checkpoint(d)


def test_truncated_safetensors_is_named(saved):
    d, _ = saved
    data = (d / WEIGHTS_FILE).read_bytes()
    (d / WEIGHTS_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=WEIGHTS_FILE):
        load_checkpoint(d)


def test_empty_and_garbage_safetensors_are_named(saved):
    d, _ = saved
    for content in (b"", b"\x00" * 7, b"hello, I am not a tensor file at all" * 10):
        (d / WEIGHTS_FILE).write_bytes(content)
        with pytest.raises(ValueError, match=WEIGHTS_FILE):
            load_checkpoint(d)


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'{"format": "something-else"}',
     b'{"format": "aiayn-checkpoint", "format_version": 1, "model": {"d_model": 100, "n_heads": 3}}'],
    ids=["broken-json", "binary", "list", "foreign-format", "invalid-model"],
)
def test_garbage_config_is_named(saved, content):
    d, _ = saved
    (d / CONFIG_FILE).write_bytes(content)
    with pytest.raises(ValueError, match=CONFIG_FILE):
        load_checkpoint(d)


def test_foreign_safetensors_keys_are_named(saved):
    d, _ = saved
    save_file({"bert.embeddings.word_embeddings.weight": torch.zeros(10, 4)}, str(d / WEIGHTS_FILE))
    with pytest.raises(ValueError, match=WEIGHTS_FILE):
        load_checkpoint(d)


def test_foreign_safetensors_shapes_are_named(tmp_path, saved):
    d, _ = saved
    other = tiny(d_ff=96)  # same tensor names, one shape differs
    save_checkpoint(tmp_path / "other", other, dtype="float32")
    shutil.copy(tmp_path / "other" / WEIGHTS_FILE, d / WEIGHTS_FILE)
    with pytest.raises(ValueError, match=f"{WEIGHTS_FILE}.*shape"):
        load_checkpoint(d)


def test_non_finite_weights_are_rejected(saved):
    d, model = saved
    state = {k: v.clone() for k, v in model.state_dict().items()}
    key = next(iter(state))
    state[key][0] = float("nan")
    save_file(state, str(d / WEIGHTS_FILE))
    with pytest.raises(ValueError, match="NaN"):
        load_checkpoint(d)


def test_nothing_is_unpickled(saved, tiny_checkpoints, monkeypatch):
    d, model = saved

    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint load tried to unpickle")

    class RefusingUnpickler(pickle.Unpickler):
        def load(self):
            refuse()

    import torch.serialization

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", RefusingUnpickler)
    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(torch.serialization, "load", refuse)
    with pytest.raises(AssertionError, match="unpickle"):  # the trap works
        pickle.loads(pickle.dumps(1))
    loaded, _ = load_checkpoint(d)
    with torch.no_grad():
        assert torch.equal(loaded(SRC, TGT), model(SRC, TGT))
    tr = Translator.load(tiny_checkpoints / "en-de", device="cpu")  # weights + SentencePiece model
    assert tr.cfg.vocab_size == tr.tokenizer.vocab_size


def test_translator_load_names_missing_spm(tiny_checkpoints, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(tiny_checkpoints / "en-de", d)
    (d / "spm.model").unlink()
    with pytest.raises(FileNotFoundError, match="spm.model"):
        Translator.load(d, device="cpu")


def test_read_config_reports_meta(saved):
    d, model = saved
    config = read_config(d)
    assert config["model_config"] == model.cfg
    assert config["meta"] == {"direction": "en-de"}
    assert json.loads((d / CONFIG_FILE).read_text())["model"] == model.cfg.to_dict()


def test_average_checkpoints_is_the_mean(tmp_path):
    a, b = tiny(seed=1), tiny(seed=2)
    save_checkpoint(tmp_path / "a", a, dtype="float32")
    save_checkpoint(tmp_path / "b", b, dtype="float32")
    avg = average_checkpoints([tmp_path / "a" / WEIGHTS_FILE, tmp_path / "b" / WEIGHTS_FILE])
    for k, v in a.state_dict().items():
        torch.testing.assert_close(avg[k], (v + b.state_dict()[k]) / 2)
    save_checkpoint(tmp_path / "c", tiny(d_ff=96), dtype="float32")
    with pytest.raises(ValueError, match="same tensors"):
        average_checkpoints([tmp_path / "a" / WEIGHTS_FILE, tmp_path / "c" / WEIGHTS_FILE])
