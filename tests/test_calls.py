"""The one owner of model calls (aiayn.calls) and every caller of it, each with a ``decoder_start="pad"`` model (an
imported Opus-MT model starts decoding from <pad>): Translator.force, explain (both modes), the decode queue, head
ablation (maps, reference log-probability, sweep), validation. Every expectation is a teacher-forced pass written
out here with <pad> first, and each test also checks that <s> first would have given something else (so a caller
feeding the wrong start piece fails). The attention-history recorder's case is in test_history.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import perturbed_tiny_model

from aiayn import Translator, calls
from aiayn.tokenizer import Tokenizer

PAIRS = [("I have no time.", "Ich habe keine Zeit."), ("The house is small.", "Das Haus ist klein.")]


@pytest.fixture(scope="module")
def pad_tr(tiny_spm):
    tok = Tokenizer.load(tiny_spm)
    model = perturbed_tiny_model(5, vocab_size=tok.vocab_size, max_len=24, decoder_start="pad")
    assert model.cfg.decoder_start_id == tok.pad_id != tok.bos_id
    return Translator(model, tok)


def written_out(model, src_ids, out_ids, start, head_mask=None):
    """``(log-probabilities (T, V), maps)`` of one teacher-forced pass fed ``[start] + out_ids[:-1]``."""
    with torch.inference_mode():
        logits, maps = model(torch.tensor([list(src_ids)]), torch.tensor([[start] + list(out_ids)[:-1]]),
                             return_attention=True, head_mask=head_mask)
    return torch.log_softmax(logits[0].float(), -1), maps


def ids(tok, text, max_len=24):
    return tok.encode(text)[: max_len - 1] + [tok.eos_id]


def _both_starts(tr, src_ids, out_ids, head_mask=None):
    cfg = tr.cfg
    return (written_out(tr.model, src_ids, out_ids, cfg.pad_id, head_mask),
            written_out(tr.model, src_ids, out_ids, cfg.bos_id, head_mask))


# -- the module itself ---------------------------------------------------------------------------------------------
def test_one_truncation_rule_for_sources_and_references(pad_tr):
    tok, cfg = pad_tr.tokenizer, pad_tr.cfg
    long = " ".join(["conference"] * 40)
    for encode in (calls.encode_source, calls.encode_reference):
        e = encode(tok, cfg, "  " + long + "\u200b ")
        assert e.truncated and len(e.ids) == cfg.max_len and e.ids[-1] == cfg.eos_id
        assert e.ids[:-1] == tok.encode(long)[: cfg.max_len - 1] and e.text == long
        short = encode(tok, cfg, "a house")
        assert not short.truncated and short.ids == tok.encode("a house") + [cfg.eos_id]
    with pytest.raises(ValueError, match="empty or only whitespace"):
        calls.encode_reference(tok, cfg, " \t ")
    assert calls.encode_many(tok, cfg, [long, ""]) == [calls.cut(tok.encode(long), cfg.max_len, cfg.eos_id)[0], [cfg.eos_id]]


def test_decoder_input_starts_from_the_configs_start_piece(pad_tr):
    from aiayn import TransformerConfig

    pad_cfg = pad_tr.cfg
    bos_cfg = TransformerConfig.preset("tiny", vocab_size=pad_cfg.vocab_size)
    target = torch.tensor([[7, 8, 9, 3], [10, 3, 0, 0]])
    assert calls.shift_right(pad_cfg, target).tolist() == [[0, 7, 8, 9], [0, 10, 0, 0]]
    assert calls.shift_right(bos_cfg, target).tolist() == [[2, 7, 8, 9], [2, 10, 0, 0]]
    assert calls.decoder_input_ids(pad_cfg, [7, 8, 3]) == [0, 7, 8]
    assert calls.decoder_input_ids(bos_cfg, [7, 8, 3]) == [2, 7, 8]


def test_teacher_forced_batch_equals_passes_written_out(pad_tr):
    tok, model = pad_tr.tokenizer, pad_tr.model
    srcs = [ids(tok, s) for s, _ in PAIRS]
    refs = [ids(tok, r) for _, r in PAIRS]
    mask = torch.ones(3, 2, 4)
    mask[2, 1, 0] = 0
    f = calls.teacher_forced_ids(model, srcs, refs, head_mask=mask, return_attention=True)
    assert f.log_probs.dtype == torch.float32 and f.log_probs.shape == (2, max(map(len, refs)), model.cfg.vocab_size)
    gold = f.target_log_probs(model.cfg.pad_id)
    for b, (s, r) in enumerate(zip(srcs, refs)):
        (want, maps), (wrong, _) = _both_starts(pad_tr, s, r, mask)
        T = len(r)
        torch.testing.assert_close(f.log_probs[b, :T], want, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(f.log_probs[b, :T], wrong, atol=1e-3)
        torch.testing.assert_close(gold[b, :T], want[torch.arange(T), r], atol=1e-5, rtol=1e-5)
        assert (gold[b, T:] == 0).all()
        torch.testing.assert_close(f.maps.cross[:, b, :, :T, : len(s)], maps.cross[:, 0], atol=1e-5, rtol=1e-5)
    assert f.maps.tgt_lengths == [len(r) for r in refs]
    with pytest.raises(ValueError, match="empty"):
        calls.teacher_forced_ids(model, srcs[:1], [[]])
    with pytest.raises(ValueError, match="1 sources but 2 targets"):
        calls.teacher_forced_ids(model, srcs[:1], refs)


def test_autocast_stays_float32_on_the_cpu():
    with torch.autocast("cpu", dtype=torch.bfloat16):  # an outer autocast (the training loop's) is switched off
        for enabled in (True, False):
            with calls.autocast_for("cpu", enabled):
                assert not torch.is_autocast_enabled("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_autocast_is_bf16_on_cuda_only_when_asked():
    with calls.autocast_for("cuda", True):
        assert torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16
    with calls.autocast_for("cuda", False):
        assert not torch.is_autocast_enabled("cuda")


# -- every caller, with <pad> as the start piece --------------------------------------------------------------------
def test_translator_force_feeds_pad_first(pad_tr):
    src, ref = PAIRS[0]
    t, probs = pad_tr.force(src, ref)
    tok = pad_tr.tokenizer
    assert t.decoder_input_tokens[0] == "<pad>" and t.decoder_input_tokens[1:] == t.output_tokens[:-1]
    (want, maps), (wrong, _) = _both_starts(pad_tr, ids(tok, src), ids(tok, ref))
    torch.testing.assert_close(probs, want.exp(), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(probs, wrong.exp(), atol=1e-4)
    assert t.log_prob == pytest.approx(float(want[torch.arange(len(t.output_ids)), t.output_ids].sum()), abs=1e-4)
    torch.testing.assert_close(t.attention.decoder, maps.decoder, atol=1e-6, rtol=1e-5)
    # the free-running labels say the same
    assert pad_tr.translate(src, beam_size=2, max_len=5).decoder_input_tokens[0] == "<pad>"


@pytest.mark.parametrize("mode", ["free-running", "teacher-forced"])
def test_explain_and_the_decode_queue_feed_pad_first(pad_tr, mode):
    from aiayn.analysis import explain
    from aiayn.serving import DecodeQueue

    src, ref = PAIRS[1]
    kw = dict(reference=ref) if mode == "teacher-forced" else dict(beam_size=2, max_len=6)
    for t in (explain(pad_tr, src, **kw), DecodeQueue(pad_tr).explain(src, **kw)):
        assert t.mode == mode and t.decoder_input_tokens[0] == "<pad>"
        (want, _), (wrong, _) = _both_starts(pad_tr, t.src_ids, t.output_ids)
        chosen = want.exp()[torch.arange(len(t.output_ids)), t.output_ids].numpy()
        np.testing.assert_allclose(t.next_pieces.chosen_prob, chosen, rtol=1e-5, atol=1e-7)
        assert not np.allclose(t.next_pieces.chosen_prob, wrong.exp()[torch.arange(len(t.output_ids)), t.output_ids].numpy(),
                               atol=1e-4)


def test_ablation_runs_feed_pad_first(pad_tr):
    from aiayn.analysis.ablation import head_mask_array
    from aiayn.sweep import forced_maps, reference_logprob

    tok = pad_tr.tokenizer
    mask = head_mask_array([("cross", 1, 2), ("decoder", 0, 1)], 2, 4)
    src_ids, out_ids = ids(tok, PAIRS[0][0]), ids(tok, PAIRS[0][1])
    got = forced_maps(pad_tr, src_ids, out_ids, head_mask=mask)
    (_, want), (_, wrong) = _both_starts(pad_tr, src_ids, out_ids, torch.from_numpy(mask))
    assert got.decoder_input_tokens[0][0] == "<pad>"
    for kind in ("decoder", "cross"):
        torch.testing.assert_close(got.get(kind), want.get(kind), atol=1e-6, rtol=1e-5)
        assert not torch.allclose(got.get(kind), wrong.get(kind), atol=1e-4)
    total, n = reference_logprob(pad_tr, PAIRS, head_mask=mask)
    want_total, wrong_total = 0.0, 0.0
    for s, r in PAIRS:
        (lp, _), (lp_bos, _) = _both_starts(pad_tr, ids(tok, s), ids(tok, r), torch.from_numpy(mask))
        rid = ids(tok, r)
        want_total += float(lp[torch.arange(len(rid)), rid].sum())
        wrong_total += float(lp_bos[torch.arange(len(rid)), rid].sum())
    assert n == sum(len(ids(tok, r)) for _, r in PAIRS)  # every reference piece counts, the first one too
    assert total == pytest.approx(want_total, abs=1e-3) and abs(total - wrong_total) > 1e-2


def test_head_sweep_scores_feed_pad_first(pad_tr):
    from aiayn.sweep import head_sweep

    tok = pad_tr.tokenizer
    df = head_sweep(pad_tr, PAIRS, kinds=("cross",), beam_size=1)
    lps, n = [], 0
    for s, r in PAIRS:
        (lp, _), _ = _both_starts(pad_tr, ids(tok, s), ids(tok, r))
        rid = ids(tok, r)
        lps.append(float(lp[torch.arange(len(rid)), rid].sum()))
        n += len(rid)
    assert np.allclose(df["logprob_intact"], sum(lps) / n, atol=1e-4)


def test_scoring_given_pairs_builds_no_autograd_graph(pad_tr, monkeypatch):
    """pair_log_probs returns floats, so the teacher-forced pass it runs (for log_likelihoods, the reverse-model
    reranking, the head sweep, the data filter) runs in inference mode whatever mode its caller is in."""
    seen, inner = [], calls.teacher_forced_ids

    def spy(*args, **kwargs):
        seen.append(torch.is_inference_mode_enabled())
        return inner(*args, **kwargs)

    monkeypatch.setattr(calls, "teacher_forced_ids", spy)
    assert torch.is_grad_enabled() and any(p.requires_grad for p in pad_tr.model.parameters())
    got = pad_tr.log_likelihoods([s for s, _ in PAIRS], [r for _, r in PAIRS], batch_size=1)
    assert seen == [True] * len(PAIRS) and all(lp < 0 and n > 1 for lp, n in got)


def test_validation_feeds_pad_first(pad_tr):
    from aiayn.training.loop import validate

    tok, cfg = pad_tr.tokenizer, pad_tr.cfg
    src = [s for s, _ in PAIRS] + ["", " ".join(["conference"] * 40)]
    tgt = [r for _, r in PAIRS] + ["Leer", " ".join(["Konferenz"] * 40)]
    v = validate(pad_tr.model, tok, src, tgt, cfg, beam_size=1, n_bleu=2, max_tokens=40, device=torch.device("cpu"))
    nll = {0: 0.0, 1: 0.0}
    n = 0
    for s, r in zip(src, tgt):
        if not tok.encode(s) or not tok.encode(r):
            continue  # a pair with an empty side is left out
        sid, rid = ids(tok, s), ids(tok, r)  # the long pair is cut, not dropped
        for k, (lp, _) in enumerate(_both_starts(pad_tr, sid, rid)):
            nll[k] -= float(lp[torch.arange(len(rid)), rid].sum())
        n += len(rid)
    assert v["valid_loss"] == pytest.approx(nll[0] / n, rel=1e-5)
    assert v["valid_loss"] != pytest.approx(nll[1] / n, rel=1e-3)
    assert [h for _, h in v["valid_samples"]] == [pad_tr.translate(s, beam_size=1, length_penalty=0.6).text
                                                 for s, _ in PAIRS]
    assert pad_tr.model.training is False
