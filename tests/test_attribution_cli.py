"""aiayn attribution (aiayn.attribution_eval.cli_main): the corpus-level agreement of gradient attribution with
attention in attribution.json on tiny random checkpoints - its structure, its values against a direct computation
sentence by sentence, methods kept side by side, one-line errors - and the shipped checkpoints' file against their
weights. (The statistics themselves are checked against scipy in tests/test_attribution.py.)"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from aiayn import attribution_eval as ae
from aiayn.analysis import alignment as al
from aiayn.analysis import attribution as at

GOLD = ("Ich habe keine Zeit .\tI have no time .\t0-0 1-1 2-2 3-3 4-4\n"
        "Wir sind gestern ins Kino gegangen .\tWe went to the cinema yesterday .\t0-0 1p1 2-5 3-2 3-3 4-4 5-1 6-6\n"
        "Das Haus ist klein .\tThe house is small .\t0-0 1-1 2-2 3-3 4-4\n")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def gold(tmp_path):
    path = tmp_path / "gold.tsv"
    path.write_text(GOLD, encoding="utf-8")
    return path


@pytest.fixture()
def ckpt(tiny_checkpoints, tmp_path):
    out = tmp_path / "ck"
    shutil.copytree(tiny_checkpoints / "de-en", out)
    return out


def _direct(tr, pairs, direction, method="grad_x_input", steps=32):
    """Each pair through sentence_agreement, done here by hand: (agreements, per-sentence row means, shares)."""
    from aiayn import calls

    per, shares = [], []
    for pair in pairs:
        src_w, tgt_w, _ = ae._sides(pair, direction)
        src = calls.encode_source(tr.tokenizer, tr.cfg, ae.detokenize(src_w)).ids
        tgt = calls.encode_reference(tr.tokenizer, tr.cfg, ae.detokenize(tgt_w)).ids
        one = ae.sentence_agreement(tr.model, src, tgt, method=method, steps=steps)
        per.append(one["agreement"])
        shares.append(one["share"])
    means = [{k: np.nanmean(v, axis=-2) for k, v in a.items()} for a in per]
    return per, means, shares


def _arr(nested):
    """A JSON value (nested lists, None for NaN) as a float array."""
    return np.array(nested, dtype=np.float64)


def test_cli_writes_the_corpus_agreement(ckpt, gold, capsys):
    from aiayn import Translator
    from aiayn.sweep import weights_sha256

    assert ae.cli_main([str(ckpt), "--gold", str(gold), "--sentences", "gold", "--no-progress"]) == 0
    payload = json.loads((ckpt / ae.ATTRIBUTION_FILE).read_text(encoding="utf-8"))
    tr = Translator.load(ckpt, device="cpu")
    L, H = tr.cfg.n_layers, tr.cfg.n_heads
    assert (payload["format"], payload["direction"], payload["layers"], payload["heads"]) == (
        ae.ATTRIBUTION_FORMAT, "de-en", L, H)
    assert payload["weights_sha256"] == weights_sha256(ckpt) and list(payload["methods"]) == ["grad_x_input"]
    r = payload["methods"]["grad_x_input"]
    assert r["pairs"] == 3 and r["sentences"] == {"first": 3, "of": 3, "subset": False} and r["skipped"] == []
    assert set(r["readings"]) == set(at.READINGS) == set(payload["readings"])
    shapes = {"heads": (L, H), "norm_heads": (L, H), "head_mean": (L,), "norm_head_mean": (L,), "rollout": ()}
    _, means, shares = _direct(tr, al.read_gold(gold), "de-en")
    for name, shape in shapes.items():
        for i, stat in enumerate(("spearman", "kendall")):
            got = r["readings"][name][stat]
            want = np.stack([m[name][..., i] for m in means])
            assert _arr(got["mean"]).shape == shape, name
            np.testing.assert_allclose(_arr(got["mean"]), np.nanmean(want, 0), atol=6e-5, err_msg=name)
            np.testing.assert_allclose(_arr(got["std"]), np.nanstd(want, 0), atol=6e-5, err_msg=name)
    flat = np.concatenate(shares)
    assert r["share"]["steps"] == flat.size
    assert r["share"]["source_mean"] == pytest.approx(flat.mean(), abs=6e-5)
    assert r["share"]["prefix_mean"] == pytest.approx(1 - flat.mean(), abs=6e-5)
    assert r["share"]["by_position"]["steps"][0] == 3 and r["max_completeness_gap"] is None
    assert [s["line"] for s in r["per_sentence"]] == [1, 2, 3]
    best = r["readings"]["heads"]["best_head"]
    assert best["spearman"] == pytest.approx(np.nanmax(_arr(r["readings"]["heads"]["spearman"]["mean"])))
    assert "grad_x_input, 3 of 3 gold pairs" in capsys.readouterr().out


def test_pooled_agreement_equals_gold_agreement(ckpt, gold):
    """The pooled row means in the file are what ``gold_agreement`` (the function docs/alignment.md quotes) gives."""
    from aiayn import Translator

    tr = Translator.load(ckpt, device="cpu")
    payload = ae.attribution_payload(tr, gold, n_pairs=2, method="grad_x_input")
    direct = ae.gold_agreement(tr, gold, n_pairs=2, method="grad_x_input")
    r = payload["methods"]["grad_x_input"]
    assert r["sentences"] == {"first": 2, "of": 3, "subset": True} and r["pairs"] == 2
    for name in at.READINGS:
        for stat in ("spearman", "kendall"):
            np.testing.assert_allclose(_arr(r["readings"][name]["pooled"][stat]),
                                       np.array(direct["agreement"][name][stat], dtype=float), atol=6e-5)
        assert r["readings"][name]["pooled"]["rows"] == direct["agreement"][name]["rows"]
    assert r["share"]["source_mean"] == pytest.approx(direct["source_share"], abs=6e-5)


def test_integrated_gradients_join_the_file_and_stale_methods_go(ckpt, gold):
    assert ae.cli_main([str(ckpt), "--gold", str(gold), "--sentences", "1", "--no-progress"]) == 0
    assert ae.cli_main([str(ckpt), "--gold", str(gold), "--sentences", "1", "--method", "integrated_gradients",
                        "--steps", "8", "--no-progress"]) == 0
    payload = ae.read_attribution(ckpt)
    assert set(payload["methods"]) == {"grad_x_input", "integrated_gradients"}
    ig = payload["methods"]["integrated_gradients"]
    assert ig["steps"] == 8 and ig["baseline"] == "zero" and ig["max_completeness_gap"] >= 0
    gap = ig["completeness_gap"]
    assert gap["max"] == ig["max_completeness_gap"] and 0 <= gap["median"] <= gap["p90"] <= gap["max"]
    assert 0 <= gap["within_5pct"] <= 1 and gap["pieces"] >= 1
    assert payload["methods"]["grad_x_input"]["steps"] is None
    # a file for other weights is not merged into
    old = {**payload, "weights_sha256": "0" * 64}
    new = {**payload, "methods": {"grad_x_input": payload["methods"]["grad_x_input"]}}
    assert set(ae.merge_payload(old, new)["methods"]) == {"grad_x_input"}
    assert set(ae.merge_payload(payload, new)["methods"]) == {"grad_x_input", "integrated_gradients"}
    (ckpt / ae.ATTRIBUTION_FILE).write_text("{not json", encoding="utf-8")
    assert ae.read_attribution(ckpt) is None


def test_a_pair_over_max_len_is_skipped_by_name(ckpt, tmp_path):
    long = " ".join(["Haus"] * 80)
    path = tmp_path / "g.tsv"
    path.write_text(GOLD.splitlines(keepends=True)[0] + f"{long}\t{' '.join(['house'] * 80)}\t0-0\n", encoding="utf-8")
    assert ae.cli_main([str(ckpt), "--gold", str(path), "--no-progress"]) == 0
    r = ae.read_attribution(ckpt)["methods"]["grad_x_input"]
    assert r["pairs"] == 1 and r["skipped"] == [{"line": 2, "reason": "longer than max_len=64 pieces"}]


@pytest.mark.parametrize("args, message", [
    (["--sentences", "0"], "--sentences must be 'gold' or a whole number from 1 to 3"),
    (["--sentences", "4"], "from 1 to 3, got '4'"),
    (["--sentences", "all"], "got 'all'"),
    (["--method", "saliency"], "invalid choice: 'saliency'"),
    (["--steps", "0"], "--steps must be a whole number >= 1"),
    (["--steps", "x"], "invalid int value: 'x'"),
    (["--direction", "fr-en"], "invalid choice: 'fr-en'"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_arguments_are_one_line_errors(ckpt, gold, capsys, args, message):
    from aiayn.cli import main

    assert main(["attribution", str(ckpt), "--gold", str(gold), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aiayn attribution: ") and err.count("\n") == 1 and message in err, err
    assert not (ckpt / ae.ATTRIBUTION_FILE).exists()


def test_missing_checkpoint_or_gold_are_one_line_errors(ckpt, gold, tmp_path, capsys):
    assert ae.cli_main([str(tmp_path / "nowhere"), "--gold", str(gold)]) == 2
    assert ae.cli_main([str(ckpt), "--gold", str(tmp_path / "missing.tsv")]) == 2
    bad = tmp_path / "bad.tsv"
    bad.write_text("Ich bin .\tI am .\t0-7\n", encoding="utf-8")
    assert ae.cli_main([str(ckpt), "--gold", str(bad)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all(line.startswith("aiayn attribution: ") for line in lines)
    assert "nowhere: not a checkpoint directory" in lines[0] and "missing.tsv" in lines[1] and "bad.tsv:1" in lines[2]


def test_parse_sentences_and_spread():
    assert ae.parse_sentences("gold", 173) == 173 and ae.parse_sentences(" 40 ", 173) == 40
    for bad in ("-1", "1.5", "174", ""):
        with pytest.raises(ValueError, match="1 to 173"):
            ae.parse_sentences(bad, 173)
    got = ae._spread([[1.0, np.nan], [3.0, np.nan]])
    assert got == {"mean": [2.0, None], "std": [1.0, None], "sentences": [2, 0]}


@pytest.mark.parametrize("direction", ["en-de", "de-en"])
def test_shipped_attribution_json_is_fresh_and_the_docs_quote_it(direction):
    """The shipped attribution.json belongs to the shipped weights and gold file; its first sentence recomputed
    (gradient x input, one pair) gives the stored row means; docs/alignment.md quotes its rollout agreement."""
    from aiayn import Translator, calls
    from aiayn.files import sha256_file
    from aiayn.sweep import weights_sha256

    ckpt = ROOT / "checkpoints" / direction
    payload = ae.read_attribution(ckpt)
    assert payload is not None, f"{direction}: run aiayn attribution {ckpt}"
    assert payload["weights_sha256"] == weights_sha256(ckpt), f"{direction}: rerun aiayn attribution"
    assert payload["gold_sha256"] == sha256_file(ae.GOLD_PATH), f"{direction}: rerun aiayn attribution"
    r = payload["methods"]["grad_x_input"]
    first = al.read_gold(ae.GOLD_PATH)[0]
    tr = Translator.load(ckpt, device="cpu")
    _, means, _ = _direct(tr, [first], direction)
    stored = r["per_sentence"][0]
    assert stored["line"] == first.line
    for name in ("head_mean", "norm_head_mean", "rollout"):
        for i, stat in enumerate(("spearman", "kendall")):
            np.testing.assert_allclose(_arr(stored[stat][name]), means[0][name][..., i], atol=2e-3, err_msg=name)
    docs = (ROOT / "docs" / "alignment.md").read_text(encoding="utf-8")
    assert f"{r['readings']['rollout']['spearman']['mean']:.2f}" in docs and "aiayn attribution" in docs
    assert set(payload["methods"]) <= set(calls.ATTRIBUTION_METHODS)


@pytest.fixture()
def page_checkpoints(tiny_checkpoints, tmp_path, monkeypatch):
    """Tiny checkpoints whose en-de has alignment.json (the page needs it) and attribution.json on 2 gold pairs."""
    import streamlit as st

    from aiayn import Translator
    from aiayn.alignment_eval import ALIGN_FILE, align_checkpoint

    for d in ("en-de", "de-en"):
        shutil.copytree(tiny_checkpoints / d, tmp_path / d)
    tr = Translator.load(tmp_path / "en-de", device="cpu")
    (tmp_path / "en-de" / ALIGN_FILE).write_text(json.dumps(align_checkpoint(tr)), encoding="utf-8")
    assert ae.cli_main([str(tmp_path / "en-de"), "--sentences", "2", "--no-progress"]) == 0
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tmp_path))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield tmp_path
    st.cache_data.clear()
    st.cache_resource.clear()


def test_page_shows_the_gold_set_agreement_beside_the_sentence(page_checkpoints):
    from app_pages import arr, charts, open_page

    page = "pages/11_Alignment_and_Attribution.py"
    result = ae.read_attribution(page_checkpoints / "en-de")["methods"]["grad_x_input"]
    at = open_page(page, {"method": "grad_x_input"})
    assert not at.exception, at.exception
    c = charts(at)
    np.testing.assert_allclose(arr(c["agree_corpus"]["data"][0]["z"]),
                               _arr(result["readings"]["heads"]["spearman"]["mean"]))
    table = at.dataframe[0].value
    assert list(table["Spearman"]) == [r["spearman_mean"] for r in ae.corpus_rows(result, per_head=False)]
    assert "rollout (all layers)" in set(table["attention"])
    assert len(at.get("download_button")) == 6  # AER, this sentence, the gold set: CSV and JSON each
    at = open_page(page, {"method": "grad_x_input", "measure": "norms"})
    np.testing.assert_allclose(arr(charts(at)["agree_corpus"]["data"][0]["z"]),
                               _arr(result["readings"]["norm_heads"]["spearman"]["mean"]))
    at = open_page(page, {"method": "integrated_gradients"})  # no such method in the file: how to make it
    assert not at.exception, at.exception
    assert "agree_corpus" not in charts(at)
    assert any("aiayn attribution" in i.value and "integrated_gradients" in i.value for i in at.info)
