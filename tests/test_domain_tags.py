"""Domain tags (``aiayn train --domain-tags``): each pair's decoder input starts with the tag of its kind's domain
(``<general>``, ``<software>``) instead of the start piece, so one model learns from every source but can be told the
register to write in (domain control: Kobus et al. 2017; side constraints: Sennrich et al. 2016). The encoder input
is unchanged, so the maps keep their shape; the first tag is what the model decodes with by default.

* The config: tags are rows after the vocabulary, stored in config.json; they exclude language tags.
* The spec and the kinds: ``tag=kind+kind,...``, every kind of ``train_kinds.txt`` in exactly one tag.
* A run: each example starts with its kind's tag; warm start from a model without tags; exact resume; export.
* Decoding: ``Translator.for_domain`` and ``aiayn translate --domain``; an unknown domain is a one-line error.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from aiayn.model.config import TransformerConfig
from aiayn.training.loader import DataMixError, domain_index, parse_domain_tags
from aiayn.training.loop import train
from aiayn.training.state import list_states
from aiayn.tokenizer import Tokenizer

from test_bidirectional import warm_started
from test_train import QUIET, read_metrics, tiny_tc, weights
from test_train_pipeline import write_kinds

SPEC = "general=ding+narrative+everyday,software=ui"


def test_domain_tags_are_rows_after_the_vocabulary_and_pick_the_start():
    cfg = TransformerConfig.preset("tiny", vocab_size=40, domain_tags=["general", "software"])
    assert cfg.domain_tags == ("general", "software") and cfg.n_embeddings == 42
    assert cfg.decoder_start_id == cfg.bos_id  # no domain chosen: the start piece
    assert cfg.replace(domain="general").decoder_start_id == 40
    assert cfg.replace(domain="software").decoder_start_id == 41
    assert [cfg.tag_piece(i) for i in (39, 40, 41, 42)] == [None, "<general>", "<software>", None]
    chosen = cfg.replace(domain="software")
    assert TransformerConfig.from_dict(json.loads(chosen.to_json())) == chosen
    with pytest.raises(ValueError, match="no tag"):
        cfg.replace(domain="legal")
    with pytest.raises(ValueError, match="not both"):
        TransformerConfig.preset("tiny", vocab_size=40, domain_tags=["general"], language_tags=["de", "en"])
    for bad in (["general", "general"], ["two words"], ["<general>"]):
        with pytest.raises(ValueError, match="distinct names"):
            TransformerConfig.preset("tiny", vocab_size=40, domain_tags=bad)
    old = TransformerConfig.preset("tiny", vocab_size=40).to_dict()
    del old["domain_tags"], old["domain"]  # a config written before domain tags
    assert TransformerConfig.from_dict(old).n_embeddings == 40


def test_the_spec_names_each_kind_once():
    assert parse_domain_tags("none") is None and parse_domain_tags(None) is None
    assert parse_domain_tags(" general=ding+everyday , software=ui+documentation") == {
        "general": ("ding", "everyday"), "software": ("ui", "documentation")}
    for bad in ("general", "general=ding", "general=ding,software=ding", "general=ding,general=ui",
                "general=,software=ui", "gen eral=ding,software=ui", "general=ding+ding,software=ui"):
        with pytest.raises(DataMixError, match="domain-tags"):
            parse_domain_tags(bad)


def test_every_row_gets_its_kinds_tag_and_a_kind_in_no_tag_is_named(tiny_data, tmp_path):
    import shutil

    folder = tmp_path / "data"
    shutil.copytree(tiny_data, folder)
    kinds = write_kinds(folder)
    tags = parse_domain_tags(SPEC)
    index = domain_index(folder, tags)
    assert index.tolist() == [1 if k == "ui" else 0 for k in kinds]
    with pytest.raises(DataMixError, match="kind\\(s\\) ui .* in no tag"):
        domain_index(folder, parse_domain_tags("general=ding+narrative+everyday,other=documentation"))
    (folder / "train_kinds.txt").unlink()
    with pytest.raises(DataMixError, match="train_kinds.txt does not exist"):
        domain_index(folder, tags)


@pytest.fixture()
def kinds_data(tiny_data, tmp_path):
    import shutil

    folder = tmp_path / "data"
    shutil.copytree(tiny_data, folder)
    write_kinds(folder)
    return folder


def test_a_run_starts_each_example_with_its_kinds_tag_and_resumes_exactly(kinds_data, tmp_path):
    """Run A: 12 steps straight; run B: 5, then resumed to 12. Both log the examples per tag, and the exported
    checkpoint decodes with the first tag and, through ``for_domain``, with the other."""
    from aiayn.training.export import export
    from aiayn.translator import Translator

    kw = dict(domain_tags=SPEC, max_tokens=1024, accumulation=1, valid_every=6, model_overrides={"dropout": 0.1})
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    log: list[str] = []
    train(tiny_tc(kinds_data, run_a, max_steps=12, **kw), log=log.append)
    line = next(m for m in log if m.startswith("domain tags"))
    kinds = (kinds_data / "train_kinds.txt").read_text().split()
    n_ui = kinds.count("ui")
    assert "<general>" in line and "<software>" in line and 0 < n_ui < len(kinds)
    train(tiny_tc(kinds_data, run_b, max_steps=5, **kw), log=QUIET)
    train(tiny_tc(kinds_data, run_b, max_steps=12, **kw), resume=True, log=QUIET)
    a, b = list_states(run_a)[-1], list_states(run_b)[-1]
    wa, wb = weights(a), weights(b)
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=1e-6, err_msg=k)
    la = {r["step"]: r["train_loss"] for r in read_metrics(run_a)}
    lb = {r["step"]: r["train_loss"] for r in read_metrics(run_b)}
    assert all(lb[s] == pytest.approx(la[s], rel=1e-5, abs=1e-6) for s in range(6, 13) if s in la)
    vocab = Tokenizer.load(kinds_data / "spm.model").vocab_size
    assert wa["embedding.weight"].shape[0] == vocab + 2
    cfg = json.loads((a / "config.json").read_text())["model"]
    assert cfg["domain_tags"] == ["general", "software"] and cfg["domain"] == "general"
    ckpt = export(run_a, tmp_path / "ckpt", last=2)
    tr = Translator.load(ckpt)
    assert tr.translate("Guten Morgen", beam_size=2).decoder_input_tokens[0] == "<general>"
    soft = tr.for_domain("software")
    assert soft.model.embedding is tr.model.embedding  # a view: the same weights
    assert soft.translate("Guten Morgen", beam_size=2).decoder_input_tokens[0] == "<software>"
    assert tr.cfg.domain == "general"  # the view left the loaded model as it was
    with pytest.raises(ValueError, match="no domain 'legal' .*general, software"):
        tr.for_domain("legal")


def test_the_tags_change_what_the_decoder_sees(kinds_data, tmp_path):
    """The two tags' rows, once trained apart, give different output distributions for the same pair: the tag is
    an input the decoder reads, not a label."""
    import torch

    from aiayn.training.export import export
    from aiayn.translator import Translator

    run = tmp_path / "run"
    train(tiny_tc(kinds_data, run, max_steps=8, domain_tags=SPEC, lr_scale=2.0), log=QUIET)
    tr = Translator.load(export(run, tmp_path / "ckpt", last=1))
    gen, soft = tr.cfg.domain_tag_id("general"), tr.cfg.domain_tag_id("software")
    emb = tr.model.embedding.weight
    assert not torch.equal(emb[gen], emb[soft])
    src = torch.tensor([[5, 6, 7, tr.cfg.eos_id]])
    with torch.no_grad():
        a = tr.model(src, torch.tensor([[gen, 9, 10]]))
        b = tr.model(src, torch.tensor([[soft, 9, 10]]))
    assert not torch.allclose(a, b)


def test_a_warm_start_seeds_the_domain_rows_with_the_start_piece(kinds_data, tmp_path):
    expected, got = warm_started(kinds_data, tmp_path, domain_tags=SPEC)
    emb, parent_emb = got["embedding.weight"], expected["embedding.weight"]
    vocab, bos = parent_emb.shape[0], Tokenizer.load(kinds_data / "spm.model").bos_id
    np.testing.assert_array_equal(emb[:vocab], parent_emb)
    np.testing.assert_array_equal(emb[vocab:], np.stack([parent_emb[bos]] * 2))


def test_cli_refuses_bad_domain_tags_before_writing(kinds_data, tiny_data, tmp_path, capsys):
    from aiayn.training.cli import cli_main

    run = tmp_path / "run"
    assert cli_main(["--data", str(tiny_data), "--run", str(run), "--preset", "tiny", "--domain-tags", SPEC,
                     "--processes", "1"]) == 2
    err = capsys.readouterr().err
    assert "train_kinds.txt does not exist" in err and len(err.strip().splitlines()) == 1 and not run.exists()
    assert cli_main(["--data", str(kinds_data), "--run", str(run), "--preset", "tiny",
                     "--domain-tags", "general=ding,software=ui", "--processes", "1"]) == 2
    assert "narrative" in capsys.readouterr().err and not run.exists()
    for bad, flag in ((["--domain-tags", "general=ding"], "domain-tags"),
                      (["--domain-tags", SPEC, "--bidirectional"], "domain-tags"),
                      (["--domain-tags", SPEC, "--tag-lr-scale", "0"], "tag-lr-scale")):
        with pytest.raises(SystemExit):
            cli_main(["--data", str(kinds_data), "--run", str(run), "--preset", "tiny", *bad])
        assert flag in capsys.readouterr().err


def test_translate_cli_takes_a_domain(tiny_spm, tmp_path, capsys):
    from aiayn.translate_cli import cli_main
    from tiny_models import make_tiny_checkpoint

    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", tiny_spm, "en-de", seed=3, domain_tags=["general", "software"],
                                domain="general")
    assert cli_main(["-c", str(ckpt), "--domain", "software", "--pieces", "Good morning"]) == 0
    assert "<software>" in capsys.readouterr().out
    assert cli_main(["-c", str(ckpt), "--domain", "legal", "Good morning"]) == 2
    assert "no domain 'legal'" in capsys.readouterr().err


def test_the_masking_lessons_greedy_decoder_runs_a_tagged_model_like_the_library(tiny_spm, tmp_path):
    """The Masking page's own greedy loop starts from the model's tag and bans only output ids (a tag id is past
    the logits' end: banning it there raised IndexError); with the causal mask it matches the library's greedy."""
    from aiayn.decoding import greedy_decode
    from aiayn.lessons.masking import greedy_with_self_mask
    from aiayn.translator import Translator
    from tiny_models import make_tiny_checkpoint

    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", tiny_spm, "en-de", seed=5, domain_tags=["general", "software"],
                                domain="software")
    tr = Translator.load(ckpt)
    src = tr.encode_source("Good morning").ids
    import torch

    ours = greedy_with_self_mask(tr.model, src, max_len=12)
    library = greedy_decode(tr.model, torch.tensor([src]), max_len=12)[0].tokens
    assert ours[: len(library)] == list(library) and all(t < tr.cfg.vocab_size for t in ours)


@pytest.fixture()
def tagged_ckpt(tiny_spm, tmp_path):
    from tiny_models import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path / "ckpt", tiny_spm, "en-de", seed=3, domain_tags=["general", "software"],
                                domain="general")


def test_evaluate_takes_a_domain_records_it_and_train_on_reuses_only_the_default(tagged_ckpt, tiny_data, tmp_path, capsys):
    from aiayn.evaluation.scoring import cli_main
    from aiayn.training.continuous import _fresh_test_eval

    outs = {}
    for domain in (None, "software"):
        out = tmp_path / f"eval-{domain}.json"
        args = ["-c", str(tagged_ckpt), "--data", str(tiny_data), "--no-progress", "--samples", "0", "--out", str(out),
                "--hypotheses"]
        assert cli_main(args + (["--domain", domain] if domain else [])) == 0
        outs[domain] = json.loads(out.read_text())
    assert outs[None]["decoding"]["domain"] == "general" and outs["software"]["decoding"]["domain"] == "software"
    assert _fresh_test_eval(tmp_path / "eval-None.json", tagged_ckpt, tiny_data / "test.tsv")
    assert not _fresh_test_eval(tmp_path / "eval-software.json", tagged_ckpt, tiny_data / "test.tsv")
    capsys.readouterr()
    assert cli_main(["-c", str(tagged_ckpt), "--data", str(tiny_data), "--domain", "legal"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no domain 'legal'" in err and len(err.splitlines()) == 1


def test_evaluate_dev_with_a_domain_leaves_the_checkpoints_file_alone(tagged_ckpt, tmp_path, capsys):
    from aiayn.evaluation.devsets import EVAL_DEV_FILE, cli_main

    devsets = tmp_path / "devsets"
    devsets.mkdir()
    for name in ("short", "long", "classic"):
        (devsets / f"{name}.tsv").write_text("en\tde\nGood morning\tGuten Morgen\n", encoding="utf-8")
    assert cli_main(["-c", str(tagged_ckpt), "--devsets", str(devsets), "--domain", "software"]) == 0
    assert not (tagged_ckpt / EVAL_DEV_FILE).exists()
    out = tmp_path / "dev.json"
    assert cli_main(["-c", str(tagged_ckpt), "--devsets", str(devsets), "--domain", "software", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["decoding"]["domain"] == "software"
    assert cli_main(["-c", str(tagged_ckpt), "--devsets", str(devsets)]) == 0
    assert json.loads((tagged_ckpt / EVAL_DEV_FILE).read_text())["decoding"]["domain"] == "general"


def test_tag_lr_scale_multiplies_the_tag_rows_step_and_nothing_else(kinds_data, tmp_path):
    """One step from the same warm start with --tag-lr-scale 1 and 8: the tag rows moved 8 times as far, every other
    weight (the vocabulary's rows included) took the same step."""
    got = {}
    for k in (1.0, 8.0):
        start, got[k] = warm_started(kinds_data, tmp_path, domain_tags=SPEC, tag_lr_scale=k, lr_scale=1.0,
                                     model_overrides={"dropout": 0.0})
    start = start["embedding.weight"]
    vocab, bos = start.shape[0], Tokenizer.load(kinds_data / "spm.model").bos_id
    moved = {k: w["embedding.weight"][vocab:] - start[bos] for k, w in got.items()}
    assert np.abs(moved[1.0]).max() > 0
    np.testing.assert_allclose(moved[8.0], 8.0 * moved[1.0], rtol=1e-4, atol=1e-7)
    for name in got[1.0]:
        a, b = got[1.0][name], got[8.0][name]
        np.testing.assert_array_equal(a[:vocab] if name == "embedding.weight" else a,
                                      b[:vocab] if name == "embedding.weight" else b, err_msg=name)


def test_a_forced_prefix_may_not_hold_the_start_piece_of_a_tagged_model(tagged_ckpt):
    """With a tag first in the decoder the start piece <s> is still never an output: a prefix holding it is refused
    (the check named the decoder's start id, the tag, and let <s> through)."""
    import torch

    from aiayn.decoding import beam_search
    from aiayn.translator import Translator

    tr = Translator.load(tagged_ckpt)
    src = torch.tensor([tr.encode_source("Good morning").ids])
    with pytest.raises(ValueError, match="the start piece"):
        beam_search(tr.model, src, beam_size=2, prefix=[[tr.cfg.bos_id]])
    ok = beam_search(tr.model, src, beam_size=2, prefix=[[5, 6]], max_len=6)[0][0].tokens
    assert list(ok[:2]) == [5, 6]
