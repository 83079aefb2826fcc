"""The fast training input pipeline (aiayn/training/loader.py, the length-based batching of aiayn/data/batching.py)
checked against plain reference implementations written here with Python loops:

* the token cache gives the examples of ``load_split`` + ``upsample_sentences`` + ``encode_pairs``, in order;
  it is keyed by the vocabulary and the split file (a change gives a new entry, never a stale one), a damaged
  entry is rebuilt, an unwritable folder falls back to memory;
* the loader yields, step by step and rank by rank, exactly the batches (same pairs, same order, same padding
  and decoder input) of the reference: Section 5.1's batching by approximate length, the paper's shifted
  decoder input (Section 3.1), widths rounded up to a multiple of ``pad_multiple``.
"""
from __future__ import annotations

import random
import shutil
import threading

import numpy as np
import pytest
import torch

from aiayn.data.batching import pad_flat, pad_ids, token_batches, token_batches_by_length
from aiayn.tokenizer import Tokenizer
from aiayn.training.loader import BatchLoader, collate_examples, load_pairs, split_arrays
from aiayn.training.pipeline import collate, encode_pairs, load_split, step_batches, step_groups, upsample_sentences
from aiayn.training.recipe import TrainConfig

PAD, BOS = 0, 2


# ---------------------------------------------------------------------------------------------------------
# Reference implementations: plain Python, one example at a time
# ---------------------------------------------------------------------------------------------------------
def ref_batches(src_ids, tgt_ids, max_tokens, seed, epoch):
    """Section 5.1 batching as the package documents it: cost max(|x|, |y| + 1), sort by cost with a random
    tie-break (random.Random(seed * 1_000_003 + epoch) shuffles first, the sort is stable), cut greedily while
    n_examples * max cost <= max_tokens, then shuffle the batches with the same generator."""
    cost = [max(len(s), len(t) + 1) for s, t in zip(src_ids, tgt_ids)]
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(range(len(cost)))
    rng.shuffle(order)
    order = sorted(order, key=lambda i: cost[i])
    batches, cur = [], []
    for i in order:
        if cur and max(cost[j] for j in cur + [i]) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def ref_steps(batches, per_step, rank, world):
    steps = []
    for start in range(0, len(batches) - per_step + 1, per_step):
        group = batches[start : start + per_step]
        steps.append([group[j] for j in range(rank, len(group), world)])
    return steps


def ref_collate(idx, src_ids, tgt_ids, multiple):
    """Rows padded one position at a time; widths rounded up to a multiple; decoder input BOS + y[:-1]."""
    def rounded(n):
        while n % multiple:
            n += 1
        return n

    S = rounded(max(len(src_ids[i]) for i in idx))
    T = rounded(max(len(tgt_ids[i]) for i in idx))
    src, dec, tgt = [], [], []
    for i in idx:
        x, y = src_ids[i], tgt_ids[i]
        src.append([x[p] if p < len(x) else PAD for p in range(S)])
        tgt.append([y[p] if p < len(y) else PAD for p in range(T)])
        dec.append([BOS if p == 0 else (y[p - 1] if p < len(y) else PAD) for p in range(T)])
    return src, dec, tgt


# ---------------------------------------------------------------------------------------------------------
# Token cache
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture()
def data_copy(tiny_data, tmp_path):
    """A writable copy of the tiny data directory (tests must not write into ``tiny_data``)."""
    d = tmp_path / "data"
    shutil.copytree(tiny_data, d)
    return d


@pytest.mark.parametrize("direction,max_len,upsample", [("en-de", 128, 1), ("de-en", 128, 3), ("en-de", 12, 1), ("en-de", 30, 2)])
def test_cached_pairs_equal_the_list_pipeline(data_copy, direction, max_len, upsample):
    tok = Tokenizer.load(data_copy / "spm.model")
    src, tgt = load_split(data_copy, "train", direction)
    src, tgt = upsample_sentences(src, tgt, upsample)
    ref_s, ref_t = encode_pairs(tok, src, tgt, max_len, tok.eos_id)
    for attempt in ("build", "load"):  # the second call reads the memory-mapped cache entry
        data = load_pairs(data_copy, "train", direction, tok, data_copy / "spm.model", max_len=max_len, upsample=upsample)
        assert data.cache_path is not None and data.cache_path.parent == data_copy / "cache"
        s_ids, t_ids = data.lists()
        assert s_ids == ref_s and t_ids == ref_t, attempt
        assert data.src_lengths.tolist() == [len(x) for x in ref_s]
    assert isinstance(data.src_flat, np.memmap)
    if max_len == 12:
        assert len(ref_s) < len(src)  # the filter really dropped pairs
    if upsample > 1:
        plain = encode_pairs(tok, *load_split(data_copy, "train", direction), max_len, tok.eos_id)
        assert len(ref_s) > len(plain[0])  # full-sentence pairs really repeated


def test_cache_key_follows_the_split_file_and_the_vocabulary(data_copy, tiny_data, tmp_path):
    tok = Tokenizer.load(data_copy / "spm.model")
    spm = data_copy / "spm.model"
    first = load_pairs(data_copy, "train", "en-de", tok, spm, max_len=128)
    # the other direction shares the entry (both languages are cached)
    assert load_pairs(data_copy, "train", "de-en", tok, spm, max_len=128).cache_path == first.cache_path
    # new data: a new entry with the new pairs, never the stale ids
    lines = (data_copy / "train.tsv").read_text(encoding="utf-8").splitlines()
    (data_copy / "train.tsv").write_text("\n".join(lines[:1] + lines[3:]) + "\n", encoding="utf-8")
    second = load_pairs(data_copy, "train", "en-de", tok, spm, max_len=128)
    assert second.cache_path != first.cache_path
    ref = encode_pairs(tok, *load_split(data_copy, "train", "en-de"), 128, tok.eos_id)
    assert second.lists() == ref and len(ref[0]) < len(first)
    # another vocabulary file: another key
    other_spm = tmp_path / "other.model"
    other_spm.write_bytes(spm.read_bytes() + b"\0")
    arrays, entry = split_arrays(data_copy, "train", tok, other_spm)
    assert entry not in (first.cache_path, second.cache_path)


def test_damaged_cache_entry_is_rebuilt(data_copy):
    tok = Tokenizer.load(data_copy / "spm.model")
    data = load_pairs(data_copy, "train", "en-de", tok, data_copy / "spm.model", max_len=128)
    ref = data.lists()
    (data.cache_path / "en.npy").write_bytes(b"not numpy")
    again = load_pairs(data_copy, "train", "en-de", tok, data_copy / "spm.model", max_len=128)
    assert again.cache_path == data.cache_path and again.lists() == ref


def test_no_cache_and_unwritable_cache_tokenise_in_memory(data_copy, tmp_path):
    tok = Tokenizer.load(data_copy / "spm.model")
    ref = load_pairs(data_copy, "train", "en-de", tok, data_copy / "spm.model", max_len=128, cache_dir=tmp_path / "c").lists()
    off = load_pairs(data_copy, "train", "en-de", tok, data_copy / "spm.model", max_len=128, cache_dir="")
    assert off.cache_path is None and off.lists() == ref
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    messages = []
    bad = load_pairs(data_copy, "train", "en-de", tok, data_copy / "spm.model", max_len=128, cache_dir=blocker / "sub",
                     log=messages.append)
    assert bad.cache_path is None and bad.lists() == ref
    assert any("token cache not written" in m for m in messages)
    with pytest.raises(ValueError, match="direction"):
        load_pairs(data_copy, "train", "en-fr", tok, data_copy / "spm.model", max_len=128)
    with pytest.raises(FileNotFoundError, match="no nonexistent split"):
        load_pairs(data_copy, "nonexistent", "en-de", tok, data_copy / "spm.model", max_len=128)


# ---------------------------------------------------------------------------------------------------------
# Batching and collation against the references
# ---------------------------------------------------------------------------------------------------------
def test_length_batching_equals_the_reference_and_token_batches():
    r = random.Random(0)
    for trial in range(20):
        n = r.randint(1, 400)
        s = [[7] * r.randint(1, 40) for _ in range(n)]
        t = [[7] * r.randint(1, 40) for _ in range(n)]
        budget = r.choice([41, 64, 300, 1000])
        got = token_batches_by_length([len(x) for x in s], [len(x) for x in t], budget, seed=trial, epoch=trial % 3)
        assert got == ref_batches(s, t, budget, trial, trial % 3)
        assert got == token_batches(s, t, budget, seed=trial, epoch=trial % 3)
    assert token_batches_by_length([3, 4], [3, 4], 100, seed=1, epoch=0) != [] and \
        token_batches_by_length([3] * 50, [3] * 50, 8, seed=1, epoch=0) != token_batches_by_length([3] * 50, [3] * 50, 8, seed=1, epoch=1)
    with pytest.raises(ValueError, match="alone needs 41 tokens"):
        token_batches_by_length([3, 41], [3, 3], 40)
    assert sorted(i for b in token_batches_by_length([3, 41, 5], [3, 3, 3], 40, drop_long=True) for i in b) == [0, 2]
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        token_batches_by_length([3, 4], [3], 40)


def test_pad_flat_equals_pad_ids():
    rows = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15]]
    flat = np.array([x for r in rows for x in r], dtype=np.int32)
    starts = np.array([0, 3, 4, 9])
    lengths = np.array([len(r) for r in rows])
    order = [2, 0, 3]
    got = pad_flat(flat, starts[order], lengths[order], 1, multiple=4)
    assert got.dtype == np.int64 and got.tolist() == pad_ids([rows[i] for i in order], 1, multiple=4).tolist()
    assert pad_flat(flat, starts[order], lengths[order], 1, multiple=4, max_width=6).shape == (3, 6)
    assert pad_flat(flat, starts[order], lengths[order], 1, multiple=4, max_width=2).shape == (3, 5)  # never below the longest
    with pytest.raises(ValueError, match="does not fit width 3"):
        pad_flat(flat, starts, lengths, 1, width=3)
    with pytest.raises(ValueError, match="at least one row"):
        pad_flat(flat, starts[:0], lengths[:0], 1)


def _pairs(data_dir, upsample=2):
    tok = Tokenizer.load(data_dir / "spm.model")
    data = load_pairs(data_dir, "train", "en-de", tok, data_dir / "spm.model", max_len=128, upsample=upsample)
    return tok, data


@pytest.mark.parametrize("world,prefetch,multiple", [(1, 2, 8), (1, 0, 1), (2, 3, 8)])
def test_loader_yields_exactly_the_reference_batches(data_copy, world, prefetch, multiple):
    tok, data = _pairs(data_copy)
    s_ids, t_ids = data.lists()
    tc = TrainConfig(str(data_copy), "unused", max_tokens=256, accumulation=2, seed=11)
    for epoch in (0, 3):
        batches = ref_batches(s_ids, t_ids, 256, 11, epoch)
        groups = step_groups(tc, data.src_lengths, data.tgt_lengths, epoch, world=world)
        for rank in range(world):
            ref = ref_steps(batches, 2 * world, rank, world)
            assert len(ref) > 3
            assert step_batches(tc, s_ids, t_ids, epoch, rank=rank, world=world) == ref
            loader = BatchLoader(data, groups, pad_id=PAD, bos_id=BOS, device=torch.device("cpu"), start=1, rank=rank,
                                 world=world, multiple=multiple, prefetch=prefetch)
            got = list(loader)
            assert [k for k, _, _ in got] == list(range(1, len(ref)))
            for k, micro, n_tok in got:
                assert len(micro) == len(ref[k]) == 2
                group_tokens = sum(len(t_ids[i]) for b in batches[k * 2 * world : (k + 1) * 2 * world] for i in b)
                assert n_tok == group_tokens  # the whole step, every rank
                for (s, d, t), idx in zip(micro, ref[k]):
                    assert s.dtype == d.dtype == t.dtype == torch.int64
                    rs, rd, rt = ref_collate(idx, s_ids, t_ids, multiple)
                    assert s.tolist() == rs and d.tolist() == rd and t.tolist() == rt
                    assert s.shape[1] % multiple == 0 and t.shape[1] % multiple == 0


def test_collate_examples_with_multiple_1_is_the_list_collate(data_copy):
    from aiayn.model.config import TransformerConfig

    tok, data = _pairs(data_copy, upsample=1)
    s_ids, t_ids = data.lists()
    cfg = TransformerConfig.preset("tiny", vocab_size=tok.vocab_size)
    idx = [5, 0, 17, 3, 40]
    old = collate(idx, s_ids, t_ids, cfg)
    new = collate_examples(data, idx, pad_id=cfg.pad_id, bos_id=cfg.decoder_start_id, multiple=1)
    for a, b in zip(old, new):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="at least one example"):
        collate_examples(data, [], pad_id=0, bos_id=2)


def test_loader_error_reaches_the_training_thread_and_close_stops_the_thread(data_copy):
    tok, data = _pairs(data_copy)
    tc = TrainConfig(str(data_copy), "unused", max_tokens=256, accumulation=1, seed=1)
    groups = step_groups(tc, data.src_lengths, data.tgt_lengths, 0)
    broken = groups[:2] + [[[len(data) + 10**9]]] + groups[2:]  # an index past the data
    with pytest.raises(IndexError):
        for _ in BatchLoader(data, broken, pad_id=PAD, bos_id=BOS, device=torch.device("cpu"), prefetch=2):
            pass
    before = {t.ident for t in threading.enumerate()}
    loader = BatchLoader(data, groups, pad_id=PAD, bos_id=BOS, device=torch.device("cpu"), prefetch=1)
    with loader:
        it = iter(loader)
        next(it)
        worker = loader._thread
        assert worker is not None and worker.is_alive()
    assert not worker.is_alive() and {t.ident for t in threading.enumerate()} <= before | {worker.ident}
    with pytest.raises(ValueError, match="prefetch"):
        BatchLoader(data, groups, pad_id=PAD, bos_id=BOS, device=torch.device("cpu"), prefetch=-1)


def test_cli_rejects_a_bad_pad_multiple_with_a_message(tiny_data, tmp_path, capsys):
    from aiayn.training.cli import cli_main

    with pytest.raises(SystemExit):
        cli_main(["--data", str(tiny_data), "--run", str(tmp_path / "run"), "--pad-multiple", "0"])
    assert "--pad-multiple must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------------------
# The data mix by kind (--kind-weights: train_kinds.txt of `aiayn data debian`)
# ---------------------------------------------------------------------------------------------------------
KIND_CYCLE = ("ding", "narrative", "everyday", "ui")


def write_kinds(folder, cycle=KIND_CYCLE, defaults=None):
    """Give a prepared data folder ``train_kinds.txt`` (the kinds of ``cycle`` in turn, one per train.tsv row) and
    the datasheet's ``kinds.default_weights`` (``defaults``, default ding 1, narrative 2, everyday 3, ui 1), as
    ``aiayn data debian`` writes them. Returns the kinds."""
    import json

    n = len(load_split(folder, "train", "en-de")[0])
    kinds = [cycle[i % len(cycle)] for i in range(n)]
    (folder / "train_kinds.txt").write_text("\n".join(kinds) + "\n", encoding="utf-8")
    sheet = json.loads((folder / "datasheet.json").read_text(encoding="utf-8"))
    sheet["kinds"] = {"file": "train_kinds.txt", "default_weights": defaults or {"ding": 1, "narrative": 2, "everyday": 3, "ui": 1}}
    (folder / "datasheet.json").write_text(json.dumps(sheet), encoding="utf-8")
    return kinds


@pytest.fixture()
def kinds_copy(data_copy):
    write_kinds(data_copy)
    return data_copy


def _mixed(folder, spec, *, upsample=1, seed=7, max_len=30):
    from aiayn.training.loader import kind_mix

    tok = Tokenizer.load(folder / "spm.model")
    mix = kind_mix(folder, spec)
    data = load_pairs(folder, "train", "en-de", tok, folder / "spm.model", max_len=max_len, upsample=upsample,
                      row_weights=None if mix is None else mix.row_weights, seed=seed)
    return mix, data


@pytest.mark.parametrize("upsample", [1, 2])
def test_kind_weights_repeat_each_pair_weight_times_in_place(kinds_copy, upsample):
    """Reference with Python loops: each kept pair, in file order, upsample (full sentences) x weight times."""
    from aiayn.data.splits import is_sentence

    tok = Tokenizer.load(kinds_copy / "spm.model")
    weights = {"ding": 1, "narrative": 2, "everyday": 3, "ui": 0}
    kinds = (kinds_copy / "train_kinds.txt").read_text().split()
    src, tgt = load_split(kinds_copy, "train", "en-de")
    ref_s, ref_t = [], []
    for a, b, k in zip(src, tgt, kinds):
        one_s, one_t = encode_pairs(tok, [a], [b], 30, tok.eos_id)
        n = (upsample if is_sentence(a) and is_sentence(b) else 1) * weights[k]
        ref_s += one_s * n
        ref_t += one_t * n
    mix, data = _mixed(kinds_copy, "ding=1,narrative=2,everyday=3,ui=0", upsample=upsample)
    assert data.lists() == (ref_s, ref_t)
    plain = load_pairs(kinds_copy, "train", "en-de", tok, kinds_copy / "spm.model", max_len=30)
    assert data.cache_path == plain.cache_path  # one cache entry serves every mix
    summary = mix.summary(data)
    kept = np.unique(data.rows)
    for k, v in summary["kinds"].items():
        rows_k = [r for r in data.rows.tolist() if kinds[r] == k]
        assert v["examples"] == len(rows_k) and v["weight"] == weights[k]
        assert v["pairs"] == (len(set(rows_k)) if weights[k] else 0)
    assert summary["examples"] == len(ref_s) and sum(v["examples"] for v in summary["kinds"].values()) == len(ref_s)
    assert summary["kinds"]["everyday"]["examples"] >= 3 * summary["kinds"]["everyday"]["pairs"] > 0
    assert len(kept) < len(plain)  # ui (weight 0) really left out


def test_a_fractional_weight_keeps_a_seeded_subset(kinds_copy):
    """everyday 0.5: each everyday pair 0 or 1 times, the same ones for the same seed (and every other kind once);
    another seed keeps another subset; with upsample 2 a full-sentence everyday pair is kept exactly once."""
    kinds = (kinds_copy / "train_kinds.txt").read_text().split()
    spec = "ding=1,narrative=1,everyday=0.5,ui=1"
    _, a = _mixed(kinds_copy, spec, seed=7)
    _, b = _mixed(kinds_copy, spec, seed=7)
    _, c = _mixed(kinds_copy, spec, seed=8)
    _, whole = _mixed(kinds_copy, "ding=1,narrative=1,everyday=1,ui=1")
    np.testing.assert_array_equal(a.rows, b.rows)
    every = [r for r in whole.rows.tolist() if kinds[r] == "everyday"]
    kept_a = [r for r in a.rows.tolist() if kinds[r] == "everyday"]
    kept_c = [r for r in c.rows.tolist() if kinds[r] == "everyday"]
    assert len(set(kept_a)) == len(kept_a) and set(kept_a) < set(every) and 0 < len(kept_a) < len(every)
    assert kept_a != kept_c
    assert [r for r in a.rows.tolist() if kinds[r] != "everyday"] == [r for r in whole.rows.tolist() if kinds[r] != "everyday"]
    from aiayn.training.loader import weighted_copies

    copies = weighted_copies(np.array([2, 1, 2, 1]), np.array([0.5, 0.5, 1.5, 2.0]), seed=3)
    assert copies[0] == 1 and copies[1] in (0, 1) and copies[2] == 3 and copies[3] == 2


def test_kind_weights_none_and_all_ones_leave_the_examples_and_batches_unchanged(kinds_copy, data_copy):
    from aiayn.training.loader import kind_mix

    assert kind_mix(kinds_copy, "none") is None
    (kinds_copy / "train_kinds.txt").unlink()
    assert kind_mix(kinds_copy, "none") is None  # none never needs the kinds
    write_kinds(kinds_copy)
    tok = Tokenizer.load(kinds_copy / "spm.model")
    before = load_pairs(kinds_copy, "train", "en-de", tok, kinds_copy / "spm.model", max_len=30, upsample=2)
    _, ones = _mixed(kinds_copy, "ding=1,narrative=1,everyday=1,ui=1", upsample=2)
    assert ones.lists() == before.lists()
    np.testing.assert_array_equal(ones.rows, before.rows)
    tc = TrainConfig("", "", max_tokens=256, accumulation=2, seed=3)
    for epoch in (0, 1):
        assert step_groups(tc, ones.src_lengths, ones.tgt_lengths, epoch) == \
            step_groups(tc, before.src_lengths, before.tgt_lengths, epoch)


def test_a_mix_the_folder_cannot_give_is_a_clear_error(kinds_copy, data_copy, tmp_path):
    from aiayn.training.loader import DataMixError, kind_mix, parse_kind_weights

    mix = kind_mix(kinds_copy, "default")
    assert mix.weights == {"ding": 1.0, "narrative": 2.0, "everyday": 3.0, "ui": 1.0}
    with pytest.raises(DataMixError, match=r"no weight for kind\(s\) everyday, ui"):
        kind_mix(kinds_copy, "ding=1,narrative=2")
    with pytest.raises(DataMixError, match="no kind everday in"):
        kind_mix(kinds_copy, "ding=1,narrative=2,everday=3,everyday=3,ui=1")
    for bad in ("ding", "ding=-1", "ding=x", "ding=1,ding=2", "ding=inf"):
        with pytest.raises(DataMixError, match="kind=weight"):
            parse_kind_weights(bad)
    plain = tmp_path / "plain"
    shutil.copytree(data_copy, plain)
    (plain / "train_kinds.txt").unlink(missing_ok=True)
    with pytest.raises(DataMixError, match=r"train_kinds.txt does not exist .*`aiayn data debian`"):
        kind_mix(plain, "default")
    lines = (kinds_copy / "train_kinds.txt").read_text().split()
    (kinds_copy / "train_kinds.txt").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(DataMixError, match="does not match train.tsv"):
        _mixed(kinds_copy, "default")


def test_cli_refuses_a_mix_without_kinds_in_one_line_before_writing(tiny_data, tmp_path, capsys):
    from aiayn.training.cli import cli_main

    run = tmp_path / "run"
    assert cli_main(["--data", str(tiny_data), "--run", str(run), "--preset", "tiny", "--kind-weights", "default",
                     "--processes", "1"]) == 2
    err = capsys.readouterr().err
    assert "train_kinds.txt does not exist" in err and "aiayn data debian" in err and len(err.strip().splitlines()) == 1
    assert not run.exists()
    with pytest.raises(SystemExit):
        cli_main(["--data", str(tiny_data), "--run", str(run), "--kind-weights", "narrative=two"])
    assert "kind=weight" in capsys.readouterr().err
