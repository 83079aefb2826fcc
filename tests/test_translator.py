"""Tests for aiayn.translator: input hygiene, token labels vs map shapes, cache, threads, map exports.

Uses the tiny random checkpoint of ``tests/conftest.py`` (its outputs are gibberish, which is fine: the
checks are about shapes, labels, hygiene and consistency) with short output limits to stay fast.
"""
from __future__ import annotations

import copy
import json
import unicodedata
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from aiayn import Translator
from aiayn.tokenizer import Tokenizer

FAST = dict(beam_size=4, max_len=6)

UNICODE = {
    "emoji": "I love pizza 🍕🚀 and flags 🇩🇪🇬🇧 👩‍👩‍👧",
    "cjk": "日本語の文章と中文句子。",
    "arabic": "مرحبا بالعالم",
    "hebrew": "שלום עולם",
    "mixed-rtl": "The word שלום means peace, سلام too.",
    "control": "tab\there\x07bell\x1bescape\x00nul\r\nnewline",
    "zwj": "a\u200db\u200cc\u200bd\ufeffe",
    "combining": "Cafe\u0301 Zoe\u0308 n\u0303 a\u030a\u0327",
    "rtl-marks": "\u202eevil\u202c \u200fright\u200e",
    "math-letters": "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ℌ𝔢𝔩𝔩𝔬 ⅫⅣ ①②",
}


@pytest.fixture(scope="module")
def tr(tiny_translator) -> Translator:
    return tiny_translator


def _check_consistent(tr: Translator, t, *, finished: bool | None = None):
    """Labels and map shapes agree (S source pieces, T decoder positions)."""
    S, T = len(t.src_tokens), len(t.output_tokens)
    L, H = tr.cfg.n_layers, tr.cfg.n_heads
    assert t.src_tokens[-1] == "</s>" and len(t.src_ids) == S
    assert len(t.decoder_input_tokens) == T and len(t.output_ids) == T
    assert t.decoder_input_tokens[0] == "<s>"
    assert t.decoder_input_tokens[1:] == t.output_tokens[:-1]
    assert (t.output_tokens[-1] == "</s>") == t.finished
    if finished is not None:
        assert t.finished == finished
    att = t.attention
    assert att.encoder.shape == (L, 1, H, S, S)
    assert att.decoder.shape == (L, 1, H, T, T)
    assert att.cross.shape == (L, 1, H, T, S)
    assert att.src_tokens == [t.src_tokens] and att.decoder_input_tokens == [t.decoder_input_tokens]
    assert att.output_tokens == [t.output_tokens]
    for kind in ("encoder", "decoder", "cross"):
        w = att.get(kind)
        assert torch.isfinite(w).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("text", ["", " ", "   \t\n  ", "\u200b\u200d", "\x00\x07"], ids=["empty", "space", "whitespace", "zero-width", "control"])
def test_empty_text_raises_clear_error(tr, text):
    with pytest.raises(ValueError, match="empty or only whitespace"):
        tr.translate(text, **FAST)


def test_bad_arguments_raise_clear_errors(tr):
    with pytest.raises(ValueError, match="string"):
        tr.translate(None)
    with pytest.raises(ValueError, match="text 1"):
        tr.translate_batch(["fine", "  "], **FAST)
    with pytest.raises(ValueError, match="list of texts"):
        tr.translate_batch("one text")
    with pytest.raises(ValueError, match="beam_size"):
        tr.translate("hello", beam_size=0)
    with pytest.raises(ValueError, match="max_len"):
        tr.translate("hello", max_len=0)


def test_long_text_is_truncated_and_flagged(tr):
    text = " ".join(["conference"] * 300)
    t = tr.translate(text, **FAST)
    assert t.truncated
    assert len(t.src_tokens) == tr.cfg.max_len and t.src_tokens[-1] == "</s>"
    expected = tr.tokenizer.encode(text)[: tr.cfg.max_len - 1]
    assert t.src_ids[:-1] == expected
    _check_consistent(tr, t)
    short = tr.translate("conference", **FAST)
    assert not short.truncated


@pytest.mark.parametrize("name", list(UNICODE))
def test_unicode_inputs_translate(tr, name):
    text = UNICODE[name]
    t = tr.translate(text, **FAST)
    assert isinstance(t.text, str)
    # control/format characters were cleaned away before tokenisation; letters and marks were kept
    assert not any(unicodedata.category(c) in ("Cc", "Cf") for c in t.source)
    letters = lambda x: [c for c in unicodedata.normalize("NFKC", x) if unicodedata.category(c)[0] in "LMN"]  # noqa: E731
    assert letters(t.source) == letters(text)
    assert t.src_ids[:-1] == tr.tokenizer.encode(t.source)
    _check_consistent(tr, t)


def _constant_translator(tiny_checkpoints, token: int) -> Translator:
    """A copy of the tiny model whose last decoder LayerNorm outputs (a multiple of) the embedding of
    ``token`` at every position: with the tied output layer it predicts ``token`` at every step."""
    base = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    model = copy.deepcopy(base.model)
    with torch.no_grad():
        norm = model.decoder_layers[-1].norm3
        norm.weight.zero_()
        norm.bias.copy_(model.embedding.weight[token] * 50)
    return Translator(model, base.tokenizer)


def test_unfinished_output_is_cut_at_max_len(tiny_checkpoints):
    tr = _constant_translator(tiny_checkpoints, token=10)
    piece = tr.tokenizer.id_to_piece(10)
    t = tr.translate("The cat sat on the mat.", beam_size=2, max_len=5)
    assert t.src_tokens == tr.tokenizer.encode_pieces("The cat sat on the mat.") + ["</s>"]
    assert not t.finished and t.output_tokens == [piece] * 5
    assert t.decoder_input_tokens == ["<s>"] + [piece] * 4
    _check_consistent(tr, t, finished=False)


def test_finished_output_ends_with_eos(tiny_checkpoints):
    tr = _constant_translator(tiny_checkpoints, token=3)
    t = tr.translate("Hello world.", beam_size=4)
    assert t.finished and t.output_tokens == ["</s>"] and t.decoder_input_tokens == ["<s>"] and t.text == ""
    _check_consistent(tr, t, finished=True)


def test_use_cache_false_gives_same_output(tr):
    for text in ["Hello world.", "He won't be attending the conference."]:
        a = tr.translate(text, beam_size=3, max_len=7, use_cache=True)
        b = tr.translate(text, beam_size=3, max_len=7, use_cache=False)
        assert a.output_tokens == b.output_tokens and a.text == b.text
        assert a.score == pytest.approx(b.score, abs=1e-4)
        for kind in ("encoder", "decoder", "cross"):
            torch.testing.assert_close(a.attention.get(kind), b.attention.get(kind), atol=1e-5, rtol=1e-5)


def test_n_best_sorted(tr):
    t = tr.translate("Good morning, everybody.", beam_size=4, n_best=4, max_len=6)
    assert len(t.nbest) == 4
    scores = [s for _, s in t.nbest]
    assert scores == sorted(scores, reverse=True)
    assert t.nbest[0] == (t.text, t.score)


def test_threads_share_one_translator(tr):
    texts = [
        "Hello world.", "The cat sat on the mat.", "Er wird an der Konferenz nicht teilnehmen.", "Good morning!",
        "I love pizza 🍕", "日本語の文章", "שלום עולם", "One two three four five six seven.",
    ]
    sequential = [tr.translate(x, beam_size=3, max_len=6) for x in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(lambda x: tr.translate(x, beam_size=3, max_len=6), texts))
    assert len({tuple(s.src_tokens) for s in sequential}) == 8
    for s, p in zip(sequential, parallel):
        assert (p.source, p.src_tokens, p.output_tokens, p.text) == (s.source, s.src_tokens, s.output_tokens, s.text)
        assert p.score == pytest.approx(s.score, abs=1e-5)
        for kind in ("encoder", "decoder", "cross"):
            torch.testing.assert_close(p.attention.get(kind), s.attention.get(kind), atol=1e-6, rtol=1e-5)


def test_maps_to_dataframe_and_json(tr):
    t = tr.translate("The cat sat.", beam_size=2, max_len=4)
    att = t.attention
    L, H = tr.cfg.n_layers, tr.cfg.n_heads
    S, T = len(t.src_tokens), len(t.output_tokens)
    df = att.to_dataframe()
    assert {"kind", "layer", "head", "batch", "query_pos", "key_pos", "weight", "query_token", "key_token"} <= set(df.columns)
    counts = df["kind"].value_counts().to_dict()
    assert counts == {"encoder": L * H * S * S, "decoder": L * H * T * T, "cross": L * H * T * S}
    labels = {"encoder": (t.src_tokens, t.src_tokens), "decoder": (t.decoder_input_tokens, t.decoder_input_tokens),
              "cross": (t.decoder_input_tokens, t.src_tokens)}
    for kind, part in df.groupby("kind"):
        w = att.get(kind)[:, 0].numpy()
        np.testing.assert_allclose(part["weight"].to_numpy(), w[part["layer"], part["head"], part["query_pos"], part["key_pos"]], rtol=0, atol=0)
        q_lab, k_lab = labels[kind]
        assert list(part["query_token"]) == [q_lab[i] for i in part["query_pos"]]
        assert list(part["key_token"]) == [k_lab[i] for i in part["key_pos"]]
        assert set(part["batch"]) == {0}
    only_cross = att.to_dataframe(kinds=["cross"])
    assert len(only_cross) == L * H * T * S
    data = json.loads(att.to_json())
    assert data["shapes"] == {"encoder": [L, 1, H, S, S], "decoder": [L, 1, H, T, T], "cross": [L, 1, H, T, S]}
    np.testing.assert_allclose(np.array(data["cross"]), att.cross.numpy(), atol=1e-6)
    assert data["src_tokens"] == [t.src_tokens] and data["decoder_input_tokens"] == [t.decoder_input_tokens]
    assert data["output_tokens"] == [t.output_tokens] and data["meta"]["output"] == t.text


def test_force_is_teacher_forced(tr):
    t, probs = tr.force("The cat sat.", "Die Katze saß.", return_scores=True)
    ref_ids = tr.tokenizer.encode("Die Katze saß.") + [tr.cfg.eos_id]
    assert t.output_ids == ref_ids and t.output_tokens[-1] == "</s>"
    assert t.mode == "teacher-forced" and t.reference == "Die Katze saß." and t.nbest == []
    assert probs.shape == (len(ref_ids), tr.cfg.vocab_size)
    torch.testing.assert_close(probs.sum(-1), torch.ones(len(ref_ids)), atol=1e-5, rtol=0)
    assert t.log_prob == pytest.approx(float(torch.log(probs[torch.arange(len(ref_ids)), ref_ids]).sum()), abs=1e-3)
    _check_consistent(tr, t, finished=True)
    assert t.attention.cross_scores is not None


def test_mismatched_tokenizer_is_rejected(tr, tiny_spm):
    from aiayn import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.preset("tiny", vocab_size=tr.tokenizer.vocab_size + 1))
    with pytest.raises(ValueError, match="vocabulary"):
        Translator(model, Tokenizer.load(tiny_spm))
