"""aiayn align on a tiny random checkpoint: the direction mapping, the counts, the JSON and the CLI."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from aiayn import alignment_eval as ae
from aiayn.analysis import alignment as al

GOLD = ("Ich habe keine Zeit .\tI have no time .\t0-0 1-1 2-2 3-3 4-4\n"
        "Wir sind gestern ins Kino gegangen .\tWe went to the cinema yesterday .\t0-0 1p1 2-5 3-2 3-3 4-4 5-1 6-6\n")


@pytest.fixture()
def gold(tmp_path):
    path = tmp_path / "gold.tsv"
    path.write_text(GOLD, encoding="utf-8")
    return path


def test_detokenize():
    assert ae.detokenize(["Ich", "habe", "keine", "Zeit", ",", "oder", "?"]) == "Ich habe keine Zeit, oder?"


@pytest.mark.parametrize("direction, n_target, n_source", [("en-de", 5 + 7, 5 + 7), ("de-en", 5 + 7, 5 + 7)])
def test_counts_follow_the_direction(tiny_checkpoints, gold, direction, n_target, n_source):
    from aiayn import Translator

    tr = Translator.load(tiny_checkpoints / direction, device="cpu")
    pairs = al.read_gold(gold)
    by_kind, skipped = ae.corpus_counts(tr, pairs, direction)
    assert skipped == [] and set(by_kind) == set(ae.MAP_KINDS)
    counts = np.stack([by_kind[k] for k in ae.MAP_KINDS])
    assert counts.shape[1:] == (2, len(al.METHODS), tr.cfg.n_layers * tr.cfg.n_heads + tr.cfg.n_layers + 1, 4)
    target, source = al.METHODS.index("target"), al.METHODS.index("source")
    # |S| is the gold's sure links whatever the reading; "target" gives every target word one link, "source" every
    # source word one link (both sides have 12 words here, so check with a one-sided pair too below)
    assert (counts[..., 3] == sum(len(p.sure) for p in pairs)).all()
    assert (counts[:, :, target, :, 2] == n_target).all() and (counts[:, :, source, :, 2] == n_source).all()


def test_target_links_are_the_target_words(tiny_checkpoints, tmp_path):
    from aiayn import Translator

    path = tmp_path / "g.tsv"  # 6 German words, 5 English words
    path.write_text("Ich habe keine Zeit mehr .\tI have no time .\t0-0 1-1 2-2 3-3 5-4\n", encoding="utf-8")
    pairs = al.read_gold(path)
    target = al.METHODS.index("target")
    for direction, n_target in (("en-de", 6), ("de-en", 5)):
        tr = Translator.load(tiny_checkpoints / direction, device="cpu")
        by_kind, _ = ae.corpus_counts(tr, pairs, direction)
        counts = by_kind["norms"]
        assert (counts[:, target, :, 2] == n_target).all(), direction


def test_cli_writes_alignment_json(tiny_checkpoints, gold, tmp_path, capsys):
    ckpt = tmp_path / "ck"
    shutil.copytree(tiny_checkpoints / "de-en", ckpt)
    assert ae.cli_main(["--checkpoint", str(ckpt), "--gold", str(gold), "--ibm1", str(FIXTURE)]) == 0
    payload = json.loads((ckpt / ae.ALIGN_FILE).read_text(encoding="utf-8"))
    assert payload["direction"] == "de-en" and payload["pairs"] == 2
    assert payload["ibm1"]["training_pairs"] == 8 and 0.0 <= payload["ibm1"]["union"] <= 1.0
    for kind in ae.MAP_KINDS:
        aer = al.aer_from_counts(np.array(payload[kind]["counts"]))
        for r in payload[kind]["readings"].values():
            heads = np.array(r["head_aer"])
            assert heads.shape == (payload["layers"], payload["heads"])
            assert r["best_head"]["aer"] == pytest.approx(heads.min())
        best = round(float(np.nanmin(aer[..., :-payload["layers"] - 1])), 4)
        assert payload[kind]["best"]["aer"] == pytest.approx(best)
    out = capsys.readouterr().out
    assert "best head" in out and "IBM Model 1 (8 pairs)" in out


def test_cli_bad_gold_is_a_clear_error(tiny_checkpoints, tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("Ich bin .\tI am .\t0-7\n", encoding="utf-8")
    assert ae.cli_main(["--checkpoint", str(tiny_checkpoints / "en-de"), "--gold", str(bad)]) == 2
    assert "bad.tsv:1" in capsys.readouterr().err


def test_cross_value_norms_match_the_decomposition(tiny_checkpoints):
    """The norms come from the encoder output the cross-attention really reads: alpha-weighted transformed values
    summed over heads and keys, plus W^O's bias, give the decoder's cross-attention output (checked on the last layer)."""
    import torch

    from aiayn import Translator, calls
    from aiayn.analysis.norms import transformed_values

    tr = Translator.load(tiny_checkpoints / "de-en", device="cpu")
    src = calls.batch(tr.cfg, [calls.encode_source(tr.tokenizer, tr.cfg, "Ich habe keine Zeit.").ids])
    got = ae.cross_value_norms(tr.model, src)
    assert got.shape == (tr.cfg.n_layers, 1, tr.cfg.n_heads, src.shape[1])
    with torch.inference_mode():
        memory = tr.model.encode(src).memory[0].numpy()
    att = tr.model.decoder_layers[-1].cross_attn
    w_v, b_v, w_o, b_o = (t.detach().numpy() for t in (att.w_v.weight, att.w_v.bias, att.w_o.weight, att.w_o.bias))
    f = transformed_values(memory, w_v, b_v, w_o, att.n_heads)
    assert got[-1, 0] == pytest.approx(np.linalg.norm(f, axis=-1))
    with torch.inference_mode():
        out, _ = att(torch.randn(1, 2, tr.cfg.d_model), tr.model.encode(src).memory, need_weights=True)
    rebuilt = np.einsum("hts,hsd->td", out.weights[0].numpy(), f) + b_o
    assert rebuilt == pytest.approx(out.output[0].numpy(), abs=1e-4)


def test_payload_names_what_it_was_computed_from(tiny_checkpoints, gold):
    from aiayn import Translator
    from aiayn.files import sha256_file
    from aiayn.sweep import weights_sha256

    tr = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    payload = ae.align_checkpoint(tr, gold)
    assert payload["weights_sha256"] == weights_sha256(tiny_checkpoints / "en-de")
    assert payload["gold_sha256"] == sha256_file(gold) and payload["direction"] == "en-de"


FIXTURE = __import__("pathlib").Path(__file__).parent / "fixtures" / "ibm1_parallel.tsv"


def test_read_parallel_sample():
    rows = ae.read_parallel(FIXTURE, 100, max_words=6)
    assert len(rows) == 7 and ("das haus", "the house") in rows  # header and the 11-word line left out
    assert ae.read_parallel(FIXTURE, 3, seed=1) == ae.read_parallel(FIXTURE, 3, seed=1)
    assert len(ae.read_parallel(FIXTURE, 3)) == 3


def test_read_parallel_bad_line(tmp_path):
    bad = tmp_path / "p.tsv"
    bad.write_text("de\ten\nnur deutsch\n", encoding="utf-8")
    with pytest.raises(ValueError, match="p.tsv:2: 1 tab-separated"):
        ae.read_parallel(bad, 5)


def test_ibm1_baseline_orientation(tmp_path):
    """A reordered gold pair IBM Model 1 gets right after training on the fixture: AER 0 in every reading; the same
    links transposed (a German/English index mix-up) would score badly."""
    path = tmp_path / "g.tsv"
    path.write_text("klein ist das haus\tthe house is small\t0-3 1-2 2-0 3-1\n", encoding="utf-8")
    pairs = al.read_gold(path)
    got = ae.ibm1_baseline(ae.read_parallel(FIXTURE, 100, max_words=6), pairs, iterations=20)
    assert {k: got[k] for k in ("en-de", "de-en", "intersection", "union")} == {
        "en-de": 0.0, "de-en": 0.0, "intersection": 0.0, "union": 0.0}
    path.write_text("klein ist das haus\tthe house is small\t3-0 2-1 0-2 1-3\n", encoding="utf-8")
    assert ae.ibm1_baseline(ae.read_parallel(FIXTURE, 100, max_words=6), al.read_gold(path), iterations=20)["en-de"] == 1.0


def test_shipped_alignment_json_is_fresh_and_the_docs_quote_it():
    """The shipped checkpoints' alignment.json belongs to their weights and the gold file, and docs/alignment.md and
    the README quote its best head and the IBM Model 1 baseline."""
    import re
    from pathlib import Path

    from aiayn.files import sha256_file
    from aiayn.sweep import weights_sha256

    root = Path(__file__).resolve().parents[1]
    docs = (root / "docs" / "alignment.md").read_text(encoding="utf-8")
    readme = (root / "README.md").read_text(encoding="utf-8")
    cell = r"layer (\d) head (\d), `(\w+)`, shift: \*\*([0-9.]+)\*\*"
    row = re.search(r"\| \*\*best head\*\*[^|]*\| " + cell + r" \| " + cell + r" \|", docs)
    assert row, "best-head row of docs/alignment.md"
    for direction, (layer, head, reading, quoted) in (("en-de", row.groups()[:4]), ("de-en", row.groups()[4:])):
        ckpt = root / "checkpoints" / direction
        payload = json.loads((ckpt / ae.ALIGN_FILE).read_text(encoding="utf-8"))
        assert payload["weights_sha256"] == weights_sha256(ckpt), f"{direction}: rerun aiayn align"
        assert payload["gold_sha256"] == sha256_file(ae.GOLD_PATH), f"{direction}: rerun aiayn align"
        assert payload["skipped"] == [] and payload["pairs"] == len(al.read_gold(ae.GOLD_PATH)), direction
        best = payload["weights"]["best"]
        quoted_head = (int(layer), int(head), reading, True)
        assert (best["layer"] + 1, best["head"] + 1, best["method"], best["shift"]) == quoted_head, direction
        assert f"{best['aer']:.3f}" == quoted and quoted in readme, direction
        ibm = payload["ibm1"][direction]
        assert f"{ibm:.3f}" in docs and f"{ibm:.3f}" in readme, direction
