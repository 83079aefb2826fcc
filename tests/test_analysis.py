"""Pure analysis functions against hand-computed values (no Streamlit, no model unless stated)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from aiayn.analysis import (
    check_text, entropy, head_stats, is_punctuation, join_pieces, kind_labels, kind_stack, merge_words, pieces_view,
    query_labels, top_k, unique_labels, view_stack, word_groups, words_text,
)


def test_entropy_by_hand():
    assert entropy(np.array([1.0, 0.0, 0.0])) == 0.0
    assert entropy(np.array([0.25] * 4)) == pytest.approx(2.0)  # log2(4)
    p = np.array([0.5, 0.25, 0.25])
    assert entropy(p) == pytest.approx(1.5)  # 0.5*1 + 2*0.25*2
    rows = np.array([[0.5, 0.5], [1.0, 0.0]])
    assert entropy(rows).tolist() == pytest.approx([1.0, 0.0])


def test_word_groups_and_join():
    pieces = ["▁The", "▁cat", "s", ".", "</s>"]
    assert word_groups(pieces) == [[0], [1, 2], [3], [4]]  # the full stop is a word of its own (issue 14)
    assert word_groups(["<s>", "Ha", "▁du"]) == [[0], [1], [2]]  # a piece after a special opens a word
    assert join_pieces(["▁cat", "s", "."]) == "cats."
    assert join_pieces(["▁", "<0xC3>", "<0xA4>"]) == "ä"  # UTF-8 byte pieces decoded
    assert unique_labels(["a", "a"]) == ["0:a", "1:a"]


def test_merge_words_sum_over_keys_mean_over_queries():
    q = ["▁un", "believ", "▁it"]
    k = ["▁un", "believ", "▁it"]
    w = np.array([[0.1, 0.2, 0.7],
                  [0.3, 0.3, 0.4],
                  [0.5, 0.25, 0.25]])
    m, qw, kw = merge_words(w, q, k)
    assert qw == kw == ["unbeliev", "it"]
    # row "unbeliev" = mean of rows 0 and 1, after summing columns 0 and 1
    assert m[0].tolist() == pytest.approx([(0.3 + 0.6) / 2, (0.7 + 0.4) / 2])
    assert m[1].tolist() == pytest.approx([0.75, 0.25])
    assert m.sum(axis=-1).tolist() == pytest.approx([1.0, 1.0])  # rows still sum to 1
    # leading dimensions (L, H) are kept
    stack = np.stack([w, w[::-1]])[None]
    assert merge_words(stack, q, k)[0].shape == (1, 2, 2, 2)
    with pytest.raises(ValueError):
        merge_words(w, q[:2], k)


def test_merge_words_drops_special_without_renormalising():
    q = ["<s>", "▁Hi"]
    k = ["▁Hi", "</s>"]
    w = np.array([[0.6, 0.4], [0.9, 0.1]])
    m, qw, kw = merge_words(w, q, k, drop_special=True)
    assert qw == ["Hi"] and kw == ["Hi"]
    assert m.shape == (1, 1) and m[0, 0] == pytest.approx(0.9)


def test_head_stats_by_hand():
    # L=1, H=2 self-attention over 3 keys ["<s>", "▁a", "</s>"]
    toks = ["<s>", "▁a", "</s>"]
    prev_head = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # looks at the previous token
    uniform = np.full((3, 3), 1 / 3)
    w = np.stack([prev_head, uniform])[None]
    df = head_stats(w, toks, toks, kind="encoder")
    assert list(df["layer"]) == [1, 1] and list(df["head"]) == [1, 2]
    h1, h2 = df.iloc[0], df.iloc[1]
    assert h1["entropy"] == pytest.approx(0.0) and h2["entropy"] == pytest.approx(math.log2(3))
    assert h1["confidence"] == pytest.approx(1.0) and h2["confidence"] == pytest.approx(1 / 3)
    assert h1["previous"] == pytest.approx(1.0)  # queries 1 and 2 both put all weight on i-1
    assert h1["next"] == pytest.approx(0.0)
    assert h1["self"] == pytest.approx(1 / 3)  # only query 0 attends to itself
    assert h1["bos"] == pytest.approx(2 / 3) and h1["eos"] == pytest.approx(0.0)
    assert h2["bos"] == pytest.approx(1 / 3) and h2["eos"] == pytest.approx(1 / 3)
    assert h1["max_key"] == "<s>"
    cross = head_stats(w, toks, toks, kind="cross")
    assert cross["previous"].isna().all() and cross["entropy"].tolist() == pytest.approx(df["entropy"].tolist())
    with pytest.raises(ValueError):
        head_stats(w, toks, toks, kind="sideways")


def test_top_k_sorted():
    p = np.array([[0.1, 0.5, 0.15, 0.25], [0.7, 0.1, 0.1, 0.1]])
    ids, vals = top_k(p, 2)
    assert ids[0].tolist() == [1, 3] and vals[0].tolist() == pytest.approx([0.5, 0.25])
    assert ids[1, 0] == 0


def test_check_text():
    assert check_text("  Hello   world ") == ("Hello world", [])
    assert check_text("   ")[0] is None and "empty" in check_text("   ")[1][0]
    assert check_text(None)[0] is None
    cleaned, notes = check_text("a\u200bb")
    assert cleaned == "a b" and "Control" in notes[0]
    cleaned, notes = check_text("x" * 20, max_chars=5)
    assert cleaned == "xxxxx" and "only the first 5" in notes[0]


def _maps():
    """A B=1 AttentionMaps by hand: L=1 layer, H=2 heads, S=T=3 (the shape of a Translation's maps)."""
    import torch

    from aiayn.model.maps import AttentionMaps

    src = ["▁Hi", "▁there", "</s>"]
    fed = ["<s>", "▁Hal", "lo"]
    out = ["▁Hal", "lo", "</s>"]
    rng = np.random.default_rng(0)

    def rows(shape):
        a = rng.random(shape)
        return a / a.sum(-1, keepdims=True)

    dec = np.tril(rows((1, 2, 3, 3)))
    dec = dec / dec.sum(-1, keepdims=True)
    t = lambda a: torch.tensor(a, dtype=torch.float32)[:, None]  # noqa: E731 - (L, H, Q, K) -> (L, 1, H, Q, K)
    return AttentionMaps(encoder=t(rows((1, 2, 3, 3))), decoder=t(dec), cross=t(rows((1, 2, 3, 3))),
                         src_tokens=[src], decoder_input_tokens=[fed], output_tokens=[out])


def test_query_labels():
    assert query_labels(["<s>", "▁Hal"], ["▁Hal", "lo"]) == ["0:<s>→▁Hal", "1:▁Hal→lo"]
    assert query_labels(["<s>", "<s>"]) == ["0:<s>", "1:<s>"]
    assert query_labels(["<s>", "▁Hal", "lo"], ["▁Hal", "lo", "</s>"], positions=[2]) == ["2:lo→</s>"]


def test_view_stack_labels_and_merging():
    m = _maps()
    src, fed = m.src_tokens[0], m.decoder_input_tokens[0]
    assert kind_labels(m, "cross") == (fed, src) and kind_labels(m, "decoder") == (fed, fed)
    cross = kind_stack(m, "cross")
    assert cross.shape == (1, 2, 3, 3) and cross.dtype == np.float32
    assert np.array_equal(cross, m.cross[:, 0].numpy())
    w, ql, kl = view_stack(m, "cross")
    assert ql == ["0:<s>→▁Hal", "1:▁Hal→lo", "2:lo→</s>"] and kl == ["0:▁Hi", "1:▁there", "2:</s>"]
    assert np.array_equal(w, cross)
    w, ql, kl = view_stack(m, "encoder")
    assert ql == kl == ["0:▁Hi", "1:▁there", "2:</s>"]
    w, ql, kl = view_stack(m, "cross", hide_special=True)
    assert ql == ["1:▁Hal→lo", "2:lo→</s>"] and kl == ["0:▁Hi", "1:▁there"]
    assert np.allclose(w, cross[..., 1:, :2])
    dec = kind_stack(m, "decoder")
    w, ql, kl = view_stack(m, "decoder", words=True)
    # word rows read "fed word→predicted": <s> predicted ▁Hal; the word Hallo (fed at 1, 2) predicted lo, </s>
    assert ql == ["0:<s>→Hal", "1:Hallo→lo </s>"] and kl == ["0:<s>", "1:Hallo"]
    assert np.allclose(w[..., 1, 1], (dec[..., 1, 1:].sum(-1) + dec[..., 2, 1:].sum(-1)) / 2)
    with pytest.raises(ValueError):
        view_stack(m, "sideways")
    m.src_tokens = None
    with pytest.raises(ValueError, match="no piece labels"):
        kind_labels(m, "cross")


def test_explain_matches_translator(tiny_translator):
    """explain() holds the translator's own maps and the teacher-forced probabilities of its output."""
    import torch

    from aiayn.analysis import explain

    e = explain(tiny_translator, "Good morning", beam_size=1, max_len=8)
    t = tiny_translator.translate("Good morning", beam_size=1, max_len=8)
    assert e.mode == "free-running" and e.reference is None and e.next_pieces_note is None
    assert e.output_tokens == t.output_tokens and e.src_tokens == t.src_tokens and e.output_ids == t.output_ids
    assert e.attention.cross.device.type == "cpu" and e.attention.batch_size == 1
    assert torch.allclose(e.attention.cross, t.attention.cross, atol=1e-6)
    # greedy decoding: the piece chosen at every step is the most probable one of the forced pass
    nxt = e.next_pieces
    assert [row[0] for row in nxt.pieces] == t.output_tokens
    assert nxt.probs.shape == (len(t.output_tokens), 10) and nxt.chosen_prob.shape == (len(t.output_tokens),)
    assert np.allclose(nxt.chosen_prob, nxt.probs[:, 0], atol=1e-5)
    assert np.all(np.diff(nxt.probs, axis=1) <= 0)
    # the pages' downloads: the maps' own exports, labelled with the one vocabulary
    df = e.attention.to_dataframe(kinds=["cross"])
    assert list(df["query_token"]) == [e.decoder_input_tokens[i] for i in df["query_pos"]]
    data = json.loads(e.attention.to_json())
    assert data["decoder_input_tokens"] == [e.decoder_input_tokens] and data["output_tokens"] == [e.output_tokens]
    assert data["meta"] == {"source": "Good morning", "mode": "free-running", "output": e.text}
    f = explain(tiny_translator, "Good morning", reference="Guten Morgen", k=3)
    forced, probs = tiny_translator.force("Good morning", "Guten Morgen")
    assert f.mode == "teacher-forced" and f.reference == "Guten Morgen" and f.output_tokens == forced.output_tokens
    assert f.next_pieces.probs.shape == (len(forced.output_ids), 3)
    ids = torch.tensor(forced.output_ids)
    assert np.allclose(f.next_pieces.chosen_prob, probs[torch.arange(len(ids)), ids].numpy(), atol=1e-6)


def test_explain_says_why_probabilities_are_missing(tiny_translator, monkeypatch):
    """An empty output has no next pieces: explain() says so instead of failing."""
    from dataclasses import replace

    from aiayn.analysis import explain

    real = tiny_translator.translate_batch

    def empty(texts, **kw):
        return [replace(t, output_ids=[], output_tokens=[], decoder_input_tokens=[]) for t in real(texts, **kw)]

    monkeypatch.setattr(tiny_translator, "translate_batch", empty)
    e = explain(tiny_translator, "Good morning", beam_size=1, max_len=4)
    assert e.next_pieces is None and e.next_pieces_note == "the output is empty"


def test_analysis_import_is_light():
    """``import aiayn.analysis`` must not import torch (the app's first page stays fast)."""
    import subprocess
    import sys

    code = "import sys, aiayn.analysis; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- issue 14: punctuation words, word-mode decoder labels, undefined statistics ---------------------------------

def test_punctuation_pieces_are_words_of_their_own():
    assert is_punctuation(".") and is_punctuation("▁,") and is_punctuation("?!") and is_punctuation("%")
    assert not is_punctuation("▁") and not is_punctuation("car") and not is_punctuation("</s>")
    # "car." -> car | .   (the example); "kaufen." -> kaufen | .
    assert word_groups(["▁my", "▁car", ".", "</s>"]) == [[0], [1], [2], [3]]
    assert word_groups(["▁kau", "fen", "."]) == [[0, 1], [2]]
    # a piece after a punctuation word opens a new word; word-internal punctuation stays inside the word
    assert word_groups(["▁(", "car", ")", "▁x"]) == [[0], [1], [2], [3]]
    assert word_groups(["▁don", "'", "t", "▁go", "."]) == [[0, 1, 2], [3], [4]]
    assert words_text(["fen", ".", "</s>"]) == "fen . </s>"
    m, qw, kw = merge_words(np.full((3, 3), 1 / 3), ["▁my", "▁car", "."], ["▁my", "▁car", "."])
    assert kw == ["my", "car", "."] and m.shape == (3, 3)


def test_word_mode_decoder_rows_read_fed_word_to_predicted():
    fed = ["<s>", "▁Ich", "▁kau", "fen", "."]
    out = ["▁Ich", "▁kau", "fen", ".", "</s>"]
    src = ["▁I", "▁buy", ".", "</s>"]
    w = np.random.default_rng(1).random((5, 4))
    m, ql, kl = pieces_view(w, fed, src, out, words=True)
    assert ql == ["0:<s>→Ich", "1:Ich→kau", "2:kaufen→fen .", "3:.→</s>"]
    assert kl == ["0:I", "1:buy", "2:.", "3:</s>"]
    # row "kaufen" = mean of piece rows 2 and 3 (keys are single pieces here)
    assert np.allclose(m[2], w[2:4].mean(axis=0))
    m, ql, kl = pieces_view(w, fed, src, out, words=True, hide_special=True)
    assert ql == ["0:Ich→kau", "1:kaufen→fen .", "2:.→</s>"] and kl == ["0:I", "1:buy", "2:."]
    # pieces (no words): unchanged "i:fed→predicted"
    assert pieces_view(w, fed, src, out)[1][2] == "2:▁kau→fen"
    with pytest.raises(ValueError):
        pieces_view(w, fed, src, out[:-1])


def test_head_stats_undefined_is_nan_never_zero():
    src = ["▁a", "▁b", "</s>"]  # the source: no <s>
    fed = ["<s>", "▁x", "▁y"]  # the decoder input: no </s>
    rng = np.random.default_rng(2)
    w = rng.random((1, 2, 3, 3))
    w /= w.sum(-1, keepdims=True)
    cross = head_stats(w, fed, src, kind="cross")
    assert cross["bos"].isna().all()  # was 0.000 for every cross-attention head
    assert cross["eos"].tolist() == pytest.approx(w[0, :, :, 2].mean(-1).tolist())
    assert cross[["self", "previous", "next"]].isna().all().all()
    enc = head_stats(w, src, src, kind="encoder")
    assert enc["bos"].isna().all() and enc["eos"].notna().all() and enc["next"].notna().all()
    dec_w = np.tril(w)
    dec_w /= dec_w.sum(-1, keepdims=True)
    dec = head_stats(dec_w, fed, fed, kind="decoder")
    assert dec["eos"].isna().all() and dec["next"].isna().all()  # </s> never fed; key i+1 masked
    assert dec["bos"].tolist() == pytest.approx(dec_w[0, :, :, 0].mean(-1).tolist())
    assert dec["previous"].tolist() == pytest.approx(((dec_w[0, :, 1, 0] + dec_w[0, :, 2, 1]) / 2).tolist())
    one = head_stats(np.ones((1, 1, 1, 1)), ["▁a"], ["▁a"], kind="encoder")
    assert one["previous"].isna().all() and one["next"].isna().all() and one["self"].tolist() == [1.0]


def test_split_sentences_rule():
    from aiayn.analysis import split_sentences

    assert split_sentences("I have no time. Do you? Yes!  \"Fine.\" Go… now") == [
        "I have no time.", "Do you?", "Yes!", "\"Fine.\"", "Go…", "now"]
    assert split_sentences("我没有时间。你好！好吗？") == ["我没有时间。", "你好！", "好吗？"]
    assert split_sentences("3.5 km, e.g.the end") == ["3.5 km, e.g.the end"]  # no space after the dot: no cut
    assert split_sentences("Mr. Smith") == ["Mr.", "Smith"]  # the stated rule has no abbreviation list
    assert split_sentences("  ") == [] and split_sentences("one") == ["one"]


def test_unseen_script_share():
    from aiayn.analysis import unseen_script_share

    assert unseen_script_share("Müßig café, 123!") == (0.0, [])
    assert unseen_script_share("我没有时间。") == (1.0, ["CJK"])
    share, scripts = unseen_script_share("ab ليس")  # 2 Latin letters, 3 Arabic ones
    assert share == pytest.approx(3 / 5) and scripts == ["ARABIC"]
    assert unseen_script_share("...") == (0.0, [])
