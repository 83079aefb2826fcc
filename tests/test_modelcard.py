"""MODEL_CARD.md is rendered from measured inputs (config, datasheet, evaluate JSON), never typed by hand."""
from __future__ import annotations

import json

import pytest

from aiayn.checkpoint import read_config
from aiayn.evaluation.modelcard import config_change_notes, quality_verdict, record_scores, render_card


def _evaluation(bleu: float, base: float) -> dict:
    return {
        "n_sentences": 1000,
        "decoding": {"beam_size": 4, "alpha": 0.6, "max_len": "source length + 50"},
        "scores": {"model": {"bleu": bleu, "chrf": 40.5}, "dictionary_baseline": {"bleu": base, "chrf": 30.25}},
        "signatures": {"bleu": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0", "chrf": "nrefs:1|nc:6"},
    }


def test_card_carries_the_measured_numbers_and_the_license(tiny_checkpoints):
    ckpt = tiny_checkpoints / "en-de"
    sheet = {"source": {"license": "GPL-2.0-or-later", "sha256": "abc123"},
             "counts": {"train": {"pairs": 12345, "sentences": 678, "phrases": 11667}}}
    text = render_card(ckpt, _evaluation(12.34, 3.21), sheet, [("I have no time.", "Ich habe keine Zeit.")], "2-core CPU")
    assert "GPL-2.0-or-later" in text and "abc123" in text
    assert "| this model | 12.34 | 40.50 |" in text
    assert "| Ding word-by-word dictionary baseline | 3.21 | 30.25 |" in text
    assert "| train | 12,345 | 678 | 11,667 |" in text
    assert "tok:13a" in text and "2-core CPU" in text
    assert "| I have no time. | Ich habe keine Zeit. |" in text
    cfg = read_config(ckpt)["model"]
    assert f"| d_model | {cfg['d_model']} |" in text and f"| n_layers | {cfg['n_layers']} |" in text


def test_card_without_evaluation_says_so(tiny_checkpoints):
    text = render_card(tiny_checkpoints / "de-en", None, None, [], "cpu")
    assert "Not evaluated yet." in text and "this model |" not in text


def test_record_scores_writes_into_config_meta(tiny_checkpoints, tmp_path):
    import shutil

    ckpt = tmp_path / "en-de"
    shutil.copytree(tiny_checkpoints / "en-de", ckpt)
    record_scores(ckpt, _evaluation(7.5, 2.0))
    meta = json.loads((ckpt / "config.json").read_text())["meta"]
    assert meta["test_scores"]["test_bleu"] == 7.5 and meta["test_scores"]["dictionary_baseline_bleu"] == 2.0
    assert read_config(ckpt)["model_config"].d_model > 0  # still a valid checkpoint config


def test_config_change_notes_leave_out_bookkeeping():
    changes = [{"step": 900, "changed": {"max_minutes": [52.0, 175.0], "keep": [6, 8]}},
               {"step": 1000, "changed": {"amp_cpu": [False, True]}},
               {"step": 1600, "changed": {"keep": [8, 10], "upsample_sentences": [4, 8]}}]
    assert config_change_notes(changes) == [(1000, "amp_cpu False -> True"), (1600, "upsample_sentences 4 -> 8")]
    assert config_change_notes(None) == [] and config_change_notes([]) == []


def test_tokens_per_step_change_is_left_out_when_accumulation_is_fixed():
    changes = [{"step": 3600, "changed": {"tokens_per_step": [4096, 25000]}}]
    assert config_change_notes(changes, accumulation=1) == []
    assert config_change_notes(changes, accumulation=0) == [(3600, "tokens_per_step 4096 -> 25000")]


def _scores(bleu, chrf, base_bleu=3.5, base_chrf=28.5, n=1000):
    return {"test_scores": {"test_bleu": bleu, "test_chrf": chrf, "dictionary_baseline_bleu": base_bleu,
                            "dictionary_baseline_chrf": base_chrf, "n_sentences": n}}


@pytest.mark.parametrize("bleu, chrf, level", [
    (9.0, 31.0, "beats"),      # higher on both
    (4.2, 23.1, "mixed"),      # BLEU higher, chrF lower (the en-de model of session 2)
    (3.0, 30.0, "mixed"),      # chrF higher only
    (0.45, 11.6, "below"),
    (3.5, 28.5, "below"),      # a tie is not a win
])
def test_quality_verdict_compares_both_scores_with_the_baseline(bleu, chrf, level):
    got, text = quality_verdict(_scores(bleu, chrf))
    assert got == level
    assert f"{bleu:.1f} / chrF {chrf:.1f}" in text and "3.5 / 28.5" in text and "1,000 held-out" in text


@pytest.mark.parametrize("meta", [None, {}, {"test_scores": None}, {"test_scores": "high"},
                                  _scores(None, 20.0), _scores("4", 20.0), _scores(True, 20.0),
                                  _scores(float("nan"), 20.0), _scores(4.0, 20.0, base_chrf=None)])
def test_quality_verdict_says_nothing_without_usable_scores(meta):
    assert quality_verdict(meta) is None


def test_quality_verdict_reads_what_record_scores_writes(tiny_checkpoints, tmp_path):
    import shutil

    ckpt = tmp_path / "en-de"
    shutil.copytree(tiny_checkpoints / "en-de", ckpt)
    record_scores(ckpt, _evaluation(12.34, 3.21))  # chrF 40.5 vs 30.25
    level, text = quality_verdict(json.loads((ckpt / "config.json").read_text())["meta"])
    assert level == "beats" and "12.3 / chrF 40.5" in text and "3.2 / 30.2" in text


def test_card_says_a_warm_started_model_was_not_trained_from_scratch(tiny_checkpoints, tmp_path):
    import shutil

    ckpt = tmp_path / "de-en"
    shutil.copytree(tiny_checkpoints / "de-en", ckpt)
    assert "trained from scratch" in render_card(ckpt, None, None, [], "cpu")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.setdefault("meta", {}).setdefault("train_config", {})["init_from"] = "/home/someone/.cache/aiayn/runs/en-de"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    text = render_card(ckpt, None, None, [], "cpu")
    assert "trained from scratch" not in text
    assert "starting from the weights of the run `runs/en-de`" in text and "- Warm start:" in text
    assert "/home/someone" not in text  # the user's home stays out of a shipped card


def test_card_says_plainly_when_the_layer_order_departs_from_the_paper(tiny_checkpoints, tmp_path):
    """Issue 13: a pre-LN model must not be carded as "Post-LN as in the paper"."""
    import shutil

    ckpt = tmp_path / "en-de"
    shutil.copytree(tiny_checkpoints / "en-de", ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    post = render_card(ckpt, None, None, [], "cpu")
    assert cfg["model"]["norm_first"] is False and "Post-LN as in the paper" in post and "departure" not in post
    cfg["model"]["norm_first"] = True
    (ckpt / "config.json").write_text(json.dumps(cfg))
    pre = render_card(ckpt, None, None, [], "cpu")
    assert "Post-LN as in the paper" not in pre and "Pre-LN, a departure from the paper" in pre


def test_card_mentions_bf16_on_the_gpu_only_when_trained_on_one(tiny_checkpoints):
    ckpt = tiny_checkpoints / "en-de"
    gpu = render_card(ckpt, None, None, [], "1 x NVIDIA H100 80GB, 16 CPU cores")
    cpu = render_card(ckpt, None, None, [], "2-core AMD EPYC CPU")
    assert "bf16 autocast on the GPU" in gpu and "bf16 autocast on the GPU" not in cpu


def test_card_of_a_model_trained_on_ding_and_debian_names_every_licence(tiny_checkpoints):
    """Issue 13: a datasheet of `aiayn data debian` (Ding + Debian packages) gives a data section naming Ding, the
    packages' licences with their pair counts and the held-out packages, not the Ding-only licence sentence."""
    sheet = {
        "ding": {"debian_package": "trans-de-en", "version": "1.9-6", "sha256": "ab" * 32, "license": "GPL-2.0-or-later"},
        "debian_sources": [
            {"package": "libreoffice-help-de", "version": "7.4", "licence": "MPL-2.0", "pairs_in_train": 300},
            {"package": "gimp-help-de", "version": "2.10", "licence": "GFDL-NIV-1.2+", "pairs_in_train": 120},
            {"package": "inkscape", "version": "1.2", "licence": "MPL-2.0", "pairs_in_train": 5},
        ],
        "held_out_packages": ["coreutils", "tar"],
        "counts": {"train": {"pairs": 1000, "sentences": 500, "phrases": 500}},
    }
    text = render_card(tiny_checkpoints / "en-de", None, sheet, [], "cpu")
    assert "Ding" in text and "GPL-2.0-or-later" in text and "3 Debian packages" in text
    assert "MPL-2.0: 305 pairs" in text and "GFDL-NIV-1.2+: 120 pairs" in text
    assert "coreutils, tar" in text and "distributed under the same license (GPL-2.0-or-later)" not in text
    # the opening sentence names both corpora (it said "on the Ding German-English dictionary corpus" alone)
    first = text.split("\n\n")[1]
    assert "Ding German-English dictionary corpus and the German translations of Debian packages" in first
    ding_only_card = render_card(tiny_checkpoints / "en-de", None, {"source": {"name": "Ding"}}, [], "cpu")
    ding_only = ding_only_card.split("\n\n")[1]
    assert "Debian" not in ding_only and "on the Ding German-English dictionary corpus." in ding_only
    # the limitations name the domain the model saw (they said "no dialogue text" of every model)
    limits = text[text.index("## Limitations"):]
    assert "software messages" in limits and "no news, web or dialogue text" not in limits
    sheet["kinds"] = {"train_pairs": {"ding": 600, "ui": 300, "narrative": 100}}
    limits = render_card(tiny_checkpoints / "en-de", None, sheet, [], "cpu").split("## Limitations")[1]
    assert "training pairs by kind: ding 60%, ui 30%, narrative 10%" in limits
    assert "no news, web or dialogue text" in ding_only_card.split("## Limitations")[1]


def test_card_names_back_translated_corpora_with_their_licences(tiny_checkpoints):
    """Issue 21: the back-translated sentences of `aiayn backtranslate` (the datasheet's `backtranslation` record,
    earlier ones under `previous`) are a corpus of their own on the card, with package, version, sha256, licence,
    the model that translated them and the kind; a folder without them gets no such line."""
    de = {"language": "de", "source": {"package": "fortunes-de", "version": "0.35-1", "sha256": "cd" * 32,
                                       "licence": "GPL-2+"},
          "checkpoint": "checkpoints/de-en", "beam_size": 4, "kind": "backtranslated", "pairs_added": 18875,
          "train_rows_before": 586324, "train_rows_after": 605199}
    en = {"language": "en", "source": [{"package": "fortunes", "version": "1:1.99.1-7.3", "sha256": "ef" * 32,
                                        "licence": "BSD-3-clause"}, {"file": "mine.txt", "sha256": "01" * 32}],
          "checkpoint": "checkpoints/en-de", "beam_size": 4, "kind": "backtranslated-en", "pairs_added": 10780,
          "train_rows_before": 605199, "train_rows_after": 615979, "previous": de}
    sheet = {"debian_sources": [{"package": "inkscape", "version": "1.2", "licence": "MPL-2.0", "pairs_in_train": 5}],
             "backtranslation": en}
    text = render_card(tiny_checkpoints / "en-de", None, sheet, [], "cpu")
    third, fourth = (next(ln for ln in text.splitlines() if ln.startswith(f"- Corpus {n} ")) for n in (3, 4))
    assert "18,875 real German sentences of Debian `fortunes-de` 0.35-1" in third and "**GPL-2+**" in third
    assert "`checkpoints/de-en` (beam 4)" in third and "kind `backtranslated`" in third and "586,324 -> 605,199" in third
    assert "10,780 real English" in fourth and "**BSD-3-clause**" in fourth and "`mine.txt`" in fourth
    assert "`checkpoints/en-de`" in fourth and "kind `backtranslated-en`" in fourth
    assert "back-translated sentences" in text.split("## Limitations")[1]
    del sheet["backtranslation"]
    assert "back-translation" not in render_card(tiny_checkpoints / "en-de", None, sheet, [], "cpu")


def _with_lineage(tiny_checkpoints, tmp_path):
    import shutil

    ckpt = tmp_path / "de-en"
    shutil.copytree(tiny_checkpoints / "de-en", ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    meta = cfg.setdefault("meta", {})
    meta.update(step=1602, epoch=0, train_tokens=5_000_000, train_wall_time_s=3600.0)
    meta.setdefault("train_config", {})["init_from"] = "checkpoints/de-en"
    meta["lineage"] = [
        {"run": "runs/en-de", "direction": "en-de", "init_from": None, "steps": 8000, "train_tokens": 28_000_000,
         "wall_time_s": 18000.0, "hardware": "CPU A", "data": "Ding", "note": "sessions 1-3"},
        {"run": "runs/de-en-debian", "direction": "de-en", "init_from": "checkpoints/de-en", "steps": 1602,
         "train_tokens": 5_000_000, "wall_time_s": 3600.0, "hardware": "CPU B", "data": "Ding + Debian"}]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    return ckpt


def test_card_lists_every_run_of_the_lineage_with_lifetime_totals(tiny_checkpoints, tmp_path):
    text = render_card(_with_lineage(tiny_checkpoints, tmp_path), None, None, [], "cpu")
    assert "## Lineage" in text and "2 recorded training runs" in text
    assert "- Steps (this run): 1602" in text and "- Lifetime (2 runs, see Lineage): 9,602 steps, 33,000,000 target tokens" in text
    assert "| `runs/en-de` | en-de | 1–8,000 | scratch | 28,000,000 | 300 min (5.00 h) | Ding | CPU A |" in text
    assert "| `runs/de-en-debian` | de-en | 8,001–9,602 | trained parent, lifetime step 8,000 |" in text
    assert "over 2 runs (9,602 steps in all" in text and "at lifetime step 8,000" in text
    assert "- `runs/en-de`: sessions 1-3." in text
    # one run from scratch: no lineage section, no lifetime line
    plain = render_card(tiny_checkpoints / "en-de", None, None, [], "cpu")
    assert "## Lineage" not in plain and "Lifetime" not in plain and "(this run)" not in plain


def test_card_does_not_read_no_gpu_as_a_gpu(tiny_checkpoints):
    text = render_card(tiny_checkpoints / "en-de", None, None, [], "2-core CPU VM; no GPU was available to this session")
    assert "bf16 autocast on the GPU" not in text


def test_render_card_and_its_parts_stay_short():
    """The project's limit: no function over 80 lines (docstring excluded)."""
    import ast
    import inspect

    from aiayn.evaluation import modelcard

    tree = ast.parse(inspect.getsource(modelcard))
    for node in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        body = node.body[1:] if ast.get_docstring(node) else node.body
        assert node.end_lineno - body[0].lineno + 1 <= 80, node.name


def test_card_states_the_data_mix_by_kind_only_when_one_was_used(tiny_checkpoints, tmp_path):
    import shutil

    ckpt = tmp_path / "en-de"
    shutil.copytree(tiny_checkpoints / "en-de", ckpt)
    assert "Data mix by kind" not in render_card(ckpt, None, None, [], "cpu")
    mix = {"kind_weights": "ding=1,everyday=3", "examples": 1030,
           "kinds": {"ding": {"weight": 1.0, "pairs": 1000, "examples": 1000},
                     "everyday": {"weight": 3.0, "pairs": 10, "examples": 30}}}
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.setdefault("meta", {})["data_mix"] = mix
    (ckpt / "config.json").write_text(json.dumps(cfg))
    line = next(ln for ln in render_card(ckpt, None, None, [], "cpu").splitlines() if ln.startswith("- Data mix"))
    assert "`--kind-weights ding=1,everyday=3`" in line
    assert "everyday x3: 10 pairs -> 30" in line and "ding x1: 1,000 pairs -> 1,000" in line and "1,030 in all" in line


def test_card_states_the_domain_tags_only_of_a_model_that_has_them(tiny_checkpoints, tmp_path):
    import shutil

    ckpt = tmp_path / "en-de"
    shutil.copytree(tiny_checkpoints / "en-de", ckpt)
    assert "Domain tags" not in render_card(ckpt, None, None, [], "cpu")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["model"].update(domain_tags=["general", "software"], domain="general")
    cfg.setdefault("meta", {}).setdefault("train_config", {})["domain_tags"] = "general=ding,software=ui"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    line = next(x for x in render_card(ckpt, None, None, [], "cpu").splitlines() if "Domain tags" in x)
    assert "--domain-tags general=ding,software=ui" in line and "`<general>`, `<software>`" in line
    assert "decodes with `<general>`" in line
