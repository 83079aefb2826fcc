"""Shared fixtures: a tiny joint SentencePiece model and tiny checkpoints built from the committed Ding
fixture (tests never touch the full corpus or need the shipped checkpoints, except where they say so)."""
from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

# Bit-for-bit tests (a sentence encoded ahead equals its lone encoding, a resumed run equals an uninterrupted one)
# compare the same ops on the same shapes. By default MKL may pick its code path by the memory alignment of the
# operands, so on some CPUs (an AMD EPYC Zen 4 VM, session 33) two float32 matmuls of equal inputs differ in the
# last bit from one call to the next; conditional numerical reproducibility (set before MKL's first call) rules that
# out. Servers and the browser tests' apps inherit it.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

import torch  # noqa: E402

from tiny_models import make_tiny_checkpoint  # noqa: E402  (tests/ is on sys.path)

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent

# Tests use tiny tensors: one thread is as fast and does not fight other processes for the 2 CI cores.
torch.set_num_threads(1)

#: the settings of a server and of the benchmarks (which model, its precision, threads, batching): a developer's shell
#: that exports one (e.g. ``AIAYN_SERVE_PROJECTION=int8`` for a class) must not change what the tests see, nor the
#: servers the browser tests start (they inherit this environment). A test that needs one sets it (monkeypatch).
SERVER_SETTINGS = ("AIAYN_CHECKPOINTS", "AIAYN_GATHER_MS", "AIAYN_MAX_BATCH", "AIAYN_SERVE_PROJECTION",
                   "AIAYN_TORCH_THREADS", "AIAYN_BENCH_CLASSROOM", "AIAYN_BENCH_OPUS_CHECKPOINT")
for _name in SERVER_SETTINGS:
    os.environ.pop(_name, None)


@pytest.fixture(autouse=True)
def _unfreeze_gc():
    """The app freezes the garbage collector's objects when it loads a model, for a server's lifetime
    (:mod:`aiayn.app.models`); in the test process each test ends unfrozen, so earlier tests' garbage is collected."""
    yield
    gc.unfreeze()


@pytest.fixture(scope="session")
def fixture_pairs():
    """Real (de, en) pairs parsed from ``tests/fixtures/ding_sample.txt``."""
    from aiayn.data import parse_ding

    pairs, _ = parse_ding(FIXTURES / "ding_sample.txt")
    return pairs


@pytest.fixture(scope="session")
def tiny_spm(tmp_path_factory, fixture_pairs) -> Path:
    """A joint BPE SentencePiece model (vocab 320) trained on the fixture pairs."""
    from aiayn.tokenizer import train_sentencepiece

    path = tmp_path_factory.mktemp("spm") / "spm.model"
    texts = [p.de for p in fixture_pairs] + [p.en for p in fixture_pairs]
    train_sentencepiece(texts, path, vocab_size=320, num_threads=1)
    return path


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory, fixture_pairs, tiny_spm) -> Path:
    """A prepared data directory like ``aiayn data`` writes, from the fixture pairs: ``train/valid/test.tsv``
    (split leak-free by :func:`aiayn.data.make_splits`, 8 valid and 8 test pairs), ``dictionary.tsv`` (train
    only), the tiny ``spm.model`` and a small ``datasheet.json`` (corpus sha256 ``"abc123"``). Shared by the
    training and evaluation tests; tests must not write into it."""
    import json
    import shutil

    from aiayn.data import build_dictionary, make_splits, write_tsv

    d = tmp_path_factory.mktemp("ding_tiny")
    splits = make_splits(fixture_pairs, n_valid=8, n_test=8, heldout_pool="auto")
    for name, pairs in splits.items():
        write_tsv(pairs, d / f"{name}.tsv")
    write_tsv(build_dictionary(splits["train"]), d / "dictionary.tsv")
    shutil.copyfile(tiny_spm, d / "spm.model")
    sheet = {"source": {"sha256": "abc123", "name": "fixture", "license": "GPL-2.0-or-later"},
             "parameters": {"n_valid": 8, "n_test": 8, "heldout_pool": "auto"}}
    (d / "datasheet.json").write_text(json.dumps(sheet), encoding="utf-8")
    return d


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory, tiny_spm) -> Path:
    """A directory with ``en-de/`` and ``de-en/`` tiny checkpoints (the layout of ``checkpoints/``)."""
    root = tmp_path_factory.mktemp("checkpoints")
    make_tiny_checkpoint(root / "en-de", tiny_spm, "en-de", seed=1)
    make_tiny_checkpoint(root / "de-en", tiny_spm, "de-en", seed=2)
    return root


@pytest.fixture(scope="session")
def tiny_translator(tiny_checkpoints):
    from aiayn import Translator

    return Translator.load(tiny_checkpoints / "en-de", device="cpu")


@pytest.fixture(scope="session")
def shipped_en_de():
    """The shipped en-de :class:`~aiayn.translator.Translator` (``checkpoints/en-de``) on the CPU; the test is
    skipped where the checkpoint is missing."""
    from aiayn import Translator
    from aiayn.translator import CHECKPOINTS_DIR

    d = CHECKPOINTS_DIR / "en-de"
    if not d.is_dir():
        pytest.skip(f"shipped checkpoint {d} does not exist")
    return Translator.load(d, device="cpu")


@pytest.fixture()
def serve(monkeypatch):
    """``serve(directory)`` points the app at a checkpoints folder (``AIAYN_CHECKPOINTS``) with Streamlit's caches
    cleared, so the next AppTest starts from a cold process state; the caches are cleared again after the test.
    Returns ``directory``."""
    import streamlit as st

    def point(directory: Path) -> Path:
        monkeypatch.setenv("AIAYN_CHECKPOINTS", str(directory))
        st.cache_data.clear()
        st.cache_resource.clear()
        return directory

    yield point
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture()
def checkpoints(tiny_checkpoints, serve):
    """The app pointed at the tiny checkpoints (:func:`serve`)."""
    return serve(tiny_checkpoints)
