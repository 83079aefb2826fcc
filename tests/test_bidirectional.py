"""One model for both directions (``aiayn train --bidirectional``): the target language's tag ``<2de>`` / ``<2en>`` is
the decoder's first input instead of the start piece (mBART, Liu et al. 2020; NLLB, 2022), the encoder input is
unchanged.

* The config: tags are rows after the vocabulary, stored in config.json; a model without them is unchanged.
* The model: tags are embedded but never projected to, so a tag can never be predicted (logits stay ``(B, T, V)``).
* The data: every train pair both ways, each example's decoder input started by its target's tag; exact resume.
* Warm start from a directional model: the tag rows start as the start piece's row, the rest is copied.
* Decoding: one stored model translates both ways (``Translator.load(dir, direction=...)``); a direction it
  lacks is a one-line error.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as np_load_file

from aiayn.model.config import TransformerConfig
from aiayn.model.transformer import Transformer
from aiayn.training.loader import collate_examples, load_pairs, load_pairs_both
from aiayn.training.loop import train
from aiayn.training.state import list_states
from aiayn.tokenizer import Tokenizer

from test_train import QUIET, read_metrics, tiny_tc, weights


def test_tags_are_rows_after_the_vocabulary_and_pick_the_start():
    cfg = TransformerConfig.preset("tiny", vocab_size=40, language_tags=["de", "en"])
    assert cfg.language_tags == ("de", "en") and cfg.n_embeddings == 42
    assert cfg.decoder_start_id == cfg.bos_id  # no target language: the start piece, as before
    assert cfg.replace(target_language="de").decoder_start_id == 40
    assert cfg.replace(target_language="en").decoder_start_id == 41
    assert TransformerConfig.from_dict(json.loads(cfg.replace(target_language="en").to_json())) == cfg.replace(target_language="en")
    with pytest.raises(ValueError, match="no tag"):
        cfg.replace(target_language="fr")
    with pytest.raises(ValueError, match="distinct"):
        TransformerConfig.preset("tiny", vocab_size=40, language_tags=["de", "de"])
    with pytest.raises(ValueError, match="no tag"):
        TransformerConfig.preset("tiny", vocab_size=40, target_language="de")  # a directional model has none


def test_a_config_written_before_the_tags_loads_unchanged():
    old = TransformerConfig.preset("tiny", vocab_size=40).to_dict()
    del old["language_tags"], old["target_language"]
    cfg = TransformerConfig.from_dict(old)
    assert cfg.language_tags == () and cfg.target_language is None and cfg.n_embeddings == 40
    assert cfg.decoder_start_id == cfg.bos_id and cfg.never_predicted == (cfg.pad_id, cfg.bos_id)
    assert Transformer(cfg).embedding.weight.shape == (40, cfg.d_model)


def test_tags_are_embedded_but_never_in_the_output_distribution():
    cfg = TransformerConfig.preset("tiny", vocab_size=40, language_tags=["de", "en"], target_language="en")
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    assert model.embedding.weight.shape == (42, cfg.d_model)
    src = torch.tensor([[5, 6, 7, cfg.eos_id]])
    logits = model(src, torch.tensor([[41, 9, 10]]))
    assert logits.shape == (1, 3, 40)  # the output layer is the vocabulary's rows only
    # the tag's embedding is used: another tag first changes every position's logits
    other = model(src, torch.tensor([[40, 9, 10]]))
    assert not torch.allclose(logits, other)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[41, cfg.eos_id]]), torch.tensor([[41]]))  # the source never holds a tag


def test_beam_search_never_emits_a_tag_even_when_its_row_wins():
    from aiayn.decoding import beam_search, greedy_decode

    cfg = TransformerConfig.preset("tiny", vocab_size=40, language_tags=["de", "en"], target_language="de")
    torch.manual_seed(1)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # make the tag rows the largest by far: were they projected to, they would win every step
        model.embedding.weight[40:] = 50.0 * model.embedding.weight[40:].sign()
    src = torch.tensor([[5, 6, 7, 8, cfg.eos_id]])
    hyps = beam_search(model, src, beam_size=3, max_len=8, n_best=3)[0]
    assert hyps and all(0 <= t < 40 and t not in cfg.never_predicted for h in hyps for t in h.tokens)
    greedy = greedy_decode(model, src, max_len=8)[0]
    assert all(0 <= t < 40 for t in greedy.tokens)


# ---------------------------------------------------------------------------------------------------------
# The data: both directions, each with its tag
# ---------------------------------------------------------------------------------------------------------
def test_both_directions_are_each_directions_examples_with_their_tag(tiny_data, tmp_path):
    tok = Tokenizer.load(tiny_data / "spm.model")
    kw = dict(max_len=64, upsample=2, cache_dir=tmp_path / "cache", log=QUIET)
    spm = tiny_data / "spm.model"
    ende, deen = (load_pairs(tiny_data, "train", d, tok, spm, **kw).lists() for d in ("en-de", "de-en"))
    both = load_pairs_both(tiny_data, "train", tok, spm, start_ids={"de": 900, "en": 901}, **kw)
    n = len(ende[0])
    assert len(both) == 2 * n
    src, tgt = both.lists()
    assert src == ende[0] + deen[0] and tgt == ende[1] + deen[1]
    assert both.decoder_starts.tolist() == [900] * n + [901] * n
    idx = [0, n, 1, n + 1]  # a batch mixing the directions: each row starts with its own tag, then its target
    _, dec, target = collate_examples(both, idx, pad_id=0, bos_id=2, multiple=1)
    assert dec[:, 0].tolist() == [900, 901, 900, 901]
    for row, i in enumerate(idx):
        length = len(tgt[i])
        assert target[row, :length].tolist() == tgt[i]
        assert dec[row, 1:length].tolist() == tgt[i][:-1]
    with pytest.raises(ValueError, match="start id"):
        load_pairs_both(tiny_data, "train", tok, spm, start_ids={"de": 900}, **kw)


def test_a_bidirectional_run_trains_on_both_and_resumes_exactly(tiny_data, tmp_path):
    """Run A: 20 steps straight. Run B: stopped after 6, resumed to 20 (across an epoch boundary: an epoch of both
    directions is about 16 steps here)."""
    kw = dict(bidirectional=True, max_tokens=1024, accumulation=2, valid_every=10, model_overrides={"dropout": 0.1})
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    log: list[str] = []
    train(tiny_tc(tiny_data, run_a, max_steps=20, **kw), log=log.append)
    assert any("both directions" in m for m in log)
    train(tiny_tc(tiny_data, run_b, max_steps=6, **kw), log=QUIET)
    train(tiny_tc(tiny_data, run_b, max_steps=20, **kw), resume=True, log=QUIET)
    a, b = list_states(run_a)[-1], list_states(run_b)[-1]
    assert a.name == b.name == "step_00000020"
    sa, sb = (json.loads((p / "trainer_state.json").read_text()) for p in (a, b))
    assert sa["epoch"] >= 1 and {k: sa[k] for k in ("epoch", "batch_in_epoch", "tokens")} == \
        {k: sb[k] for k in ("epoch", "batch_in_epoch", "tokens")}
    wa, wb = weights(a), weights(b)
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=1e-6, err_msg=k)
    la = {r["step"]: r["train_loss"] for r in read_metrics(run_a)}
    lb = {r["step"]: r["train_loss"] for r in read_metrics(run_b)}
    assert all(lb[s] == pytest.approx(la[s], rel=1e-5, abs=1e-6) for s in range(7, 21))
    cfg = json.loads((a / "config.json").read_text())["model"]
    assert cfg["language_tags"] == ["de", "en"] and cfg["target_language"] == "de"
    vocab = Tokenizer.load(tiny_data / "spm.model").vocab_size
    assert wa["embedding.weight"].shape[0] == vocab + 2
    assert json.loads((run_a / "train_config.json").read_text())["bidirectional"] is True
    # the exported average keeps the tags: one checkpoint, both directions
    from aiayn.training.export import export
    from aiayn.translator import Translator

    ckpt = export(run_a, tmp_path / "ckpt", last=2)
    for direction, tag in (("en-de", "<2de>"), ("de-en", "<2en>")):
        t = Translator.load(ckpt, direction=direction).translate("Guten Morgen", beam_size=2)
        assert t.decoder_input_tokens[0] == tag


def warm_started(data, tmp_path, **child) -> tuple[dict, dict]:
    """``(parent weights, child weights)``: a 2-step parent without tags, then a 1-step child warm-started from it
    with the training fields ``child`` (default lr_scale 0: its first state holds its initial weights)."""
    parent = tmp_path / "parent"
    if not parent.exists():  # one parent for every child of a test
        train(tiny_tc(data, parent, max_steps=2, save_every=2), log=QUIET)
    run = tmp_path / f"child-{len(list(tmp_path.glob('child-*')))}"
    train(tiny_tc(data, run, **{"lr_scale": 0.0, "max_steps": 1, "save_every": 1, **child}, init_from=str(parent)),
          log=QUIET)
    return weights(list_states(parent)[-1]), weights(list_states(run)[-1])


def test_a_warm_start_from_a_directional_model_copies_it_and_seeds_the_tags(tiny_data, tmp_path):
    expected, got = warm_started(tiny_data, tmp_path, bidirectional=True)
    assert set(got) == set(expected)
    emb, parent_emb = got["embedding.weight"], expected["embedding.weight"]
    vocab, bos = parent_emb.shape[0], Tokenizer.load(tiny_data / "spm.model").bos_id
    assert emb.shape[0] == vocab + 2
    np.testing.assert_array_equal(emb[:vocab], parent_emb)
    np.testing.assert_array_equal(emb[vocab:], np.stack([parent_emb[bos]] * 2))
    assert all(np.array_equal(got[k], expected[k]) for k in expected if k != "embedding.weight")


# ---------------------------------------------------------------------------------------------------------
# Decoding: one stored model, both directions
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def both_ways(tmp_path_factory, tiny_spm) -> Path:
    from tiny_models import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("both") / "ckpt", tiny_spm, "en-de", seed=3,
                                language_tags=["de", "en"], target_language="de")


def test_one_stored_model_translates_both_ways_with_the_target_tag_first(both_ways):
    from aiayn.translator import Translator

    default = Translator.load(both_ways)
    assert default.meta["direction"] == "en-de" and default.meta["directions"] == ["en-de", "de-en"]
    V = default.cfg.vocab_size
    out = {}
    for direction, tag, tag_id in (("en-de", "<2de>", V), ("de-en", "<2en>", V + 1)):
        tr = Translator.load(both_ways, direction=direction)
        assert tr.meta["direction"] == direction and tr.cfg.decoder_start_id == tag_id
        t = tr.translate("The cat sat on the mat.", beam_size=2)
        assert t.decoder_input_tokens[0] == tag and tag not in t.output_tokens
        assert all(0 <= i < V for i in t.output_ids)
        assert t.attention.cross.shape[-1] == len(t.src_tokens)  # the encoder input is unchanged: no tag there
        assert tag not in t.src_tokens
        out[direction] = t
    # the same weights, another start symbol: the first step's scores differ
    view = default.for_direction("de-en")
    assert view.model.embedding is default.model.embedding and default.cfg.target_language == "de"
    forced = [default.force("Guten Morgen", "Good morning", return_scores=True)[1],
              view.force("Guten Morgen", "Good morning", return_scores=True)[1]]
    assert not np.allclose(forced[0], forced[1])
    with pytest.raises(ValueError, match="no fr-de direction"):
        default.for_direction("fr-de")


def test_a_directional_checkpoint_refuses_the_other_direction_in_one_line(tiny_checkpoints):
    from aiayn.translator import Translator

    tr = Translator.load(tiny_checkpoints / "en-de")
    assert tr.for_direction("en-de") is tr and Translator.load(tiny_checkpoints / "en-de", direction="en-de").cfg == tr.cfg
    with pytest.raises(ValueError, match="translates en-de only") as err:
        Translator.load(tiny_checkpoints / "en-de", direction="de-en")
    assert "\n" not in str(err.value)
    assert tr.cfg.language_tags == () and tr.model.embedding.weight.shape[0] == tr.cfg.vocab_size


def test_translate_cli_decodes_a_bidirectional_checkpoint_in_the_direction_asked(both_ways, capsys):
    from aiayn.translate_cli import cli_main

    assert cli_main(["-c", str(both_ways), "--direction", "de-en", "--beam-size", "1", "Guten Morgen"]) == 0
    de_en = capsys.readouterr().out
    assert cli_main(["-c", str(both_ways), "--direction", "en-de", "--beam-size", "1", "Guten Morgen"]) == 0
    assert capsys.readouterr().out != de_en  # another start symbol, another output from the same weights


def test_cli_bidirectional_is_stored_and_a_resume_keeps_it(tiny_data, tmp_path):
    from aiayn.training.cli import cli_main

    run = tmp_path / "run"
    assert cli_main(["--data", str(tiny_data), "--run", str(run), "--preset", "tiny", "--bidirectional", "--max-tokens", "512",
                     "--accumulation", "1", "--warmup-steps", "20", "--max-steps", "2", "--save-every", "2",
                     "--valid-every", "10", "--valid-bleu-sentences", "0", "--threads", "1",
                     "--token-cache", str(tmp_path / "token_cache")]) == 0
    assert json.loads((run / "train_config.json").read_text())["bidirectional"] is True
    assert cli_main(["--run", str(run), "--resume", "--max-steps", "3", "--save-every", "3"]) == 0
    assert json.loads((run / "train_config.json").read_text())["bidirectional"] is True
    model = json.loads((list_states(run)[-1] / "config.json").read_text())["model"]
    assert model["language_tags"] == ["de", "en"]
