"""Comparing two sentences (issue 15, item 3): maps aligned by position or by pieces, their difference, the
difference heatmap. Expectations are written out by hand from small hand-made maps."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from aiayn.analysis import AlignedMaps, align_maps
from aiayn.analysis.compare import lcs_pairs, pair_labels, position_pairs
from aiayn.figures.compare import difference_heatmap
from aiayn.model.maps import AttentionMaps

NAN = np.nan


def maps(src, fed=None, out=None, *, encoder=None, decoder=None, cross=None) -> AttentionMaps:
    """B=1 maps from (L, H, Q, K) nested lists (or arrays)."""
    def t(x):
        return None if x is None else torch.tensor(np.asarray(x, dtype=np.float32)).unsqueeze(1)

    return AttentionMaps(encoder=t(encoder), decoder=t(decoder), cross=t(cross), src_tokens=[list(src)],
                         decoder_input_tokens=None if fed is None else [list(fed)],
                         output_tokens=None if out is None else [list(out)])


def random_maps(src, fed, out, *, L=2, H=3, seed=0) -> AttentionMaps:
    g = np.random.default_rng(seed)
    S, T = len(src), len(fed)

    def soft(*shape):
        x = g.random(shape) + 0.01
        return x / x.sum(-1, keepdims=True)

    dec = soft(L, H, T, T) * np.tril(np.ones((T, T)))
    return maps(src, fed, out, encoder=soft(L, H, S, S), decoder=dec / dec.sum(-1, keepdims=True),
                cross=soft(L, H, T, S))


def same_nan(x, y) -> bool:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return x.shape == y.shape and np.array_equal(np.isnan(x), np.isnan(y)) and np.allclose(
        np.nan_to_num(x), np.nan_to_num(y), atol=1e-7)


# -- alignments of index sequences -------------------------------------------------------------------------------

def test_lcs_pairs_by_hand():
    assert lcs_pairs(["▁The", "▁cat", "▁sat", "</s>"], ["▁The", "▁dog", "▁sat", "</s>"]) == [
        (0, 0), (1, None), (None, 1), (2, 2), (3, 3)]
    assert lcs_pairs(list("abcd"), list("bde")) == [(0, None), (1, 0), (2, None), (3, 1), (None, 2)]
    assert lcs_pairs([], list("ab")) == [(None, 0), (None, 1)]
    assert lcs_pairs(list("ab"), []) == [(0, None), (1, None)]
    # reversed order: one piece can match; ties skip a piece of a first, so z (a 2) meets z (b 0)
    assert lcs_pairs(list("xyz"), list("zyx")) == [(0, None), (1, None), (2, 0), (None, 1), (None, 2)]


@pytest.mark.parametrize("seed", range(20))
def test_lcs_pairs_is_a_longest_common_subsequence(seed):
    """Against brute force: the matched pairs are a common subsequence, of the longest length, and every index
    of both sequences appears once, in order."""
    rng = np.random.default_rng(seed)
    a = list(rng.choice(list("abc"), size=int(rng.integers(0, 7))))
    b = list(rng.choice(list("abc"), size=int(rng.integers(0, 7))))
    pairs = lcs_pairs(a, b)
    assert [i for i, _ in pairs if i is not None] == list(range(len(a)))
    assert [j for _, j in pairs if j is not None] == list(range(len(b)))
    matched = [(i, j) for i, j in pairs if i is not None and j is not None]
    assert all(a[i] == b[j] for i, j in matched)
    brute = max((r for r in range(min(len(a), len(b)), -1, -1)
                 if any(list(c) in [list(d) for d in itertools.combinations(b, r)] for c in itertools.combinations(a, r))),
                default=0)
    assert len(matched) == brute


def test_position_pairs_pad_the_shorter():
    assert position_pairs(3, 2) == [(0, 0), (1, 1), (2, None)]
    assert position_pairs(1, 3) == [(0, 0), (None, 1), (None, 2)]
    assert position_pairs(0, 0) == []


def test_pair_labels():
    pairs = [(0, 0), (1, None), (None, 1), (2, 3), (3, 2)]
    labels = pair_labels(pairs, ["x", "cat", "sat", "y"], ["x", "dog", "q", "sat"])
    assert labels == ["0:x", "1:cat (a only)", "1:dog (b only)", "2/3:sat", "3/2:y | q"]


# -- align_maps ------------------------------------------------------------------------------------------------

def test_by_position_pads_with_nan_and_subtracts():
    # encoder maps, L=1, H=1: a has 2 source pieces, b has 3
    a = maps(["▁a", "</s>"], encoder=[[[[0.75, 0.25], [0.5, 0.5]]]])
    b = maps(["▁a", "▁b", "</s>"], encoder=[[[[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.2, 0.3, 0.5]]]])
    r = align_maps(a, b, "encoder", by="position")
    assert isinstance(r, AlignedMaps) and r.kind == "encoder" and r.by == "position"
    assert r.a.dtype == r.b.dtype == r.diff.dtype == np.float32
    assert same_nan(r.a[0, 0], [[0.75, 0.25, NAN], [0.5, 0.5, NAN], [NAN, NAN, NAN]])
    assert same_nan(r.b[0, 0], [[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.2, 0.3, 0.5]])
    assert same_nan(r.diff[0, 0], [[-0.25, 0.0, NAN], [-0.5, 0.5, NAN], [NAN, NAN, NAN]])
    assert r.q_labels == r.k_labels == ["0:▁a", "1:</s> | ▁b", "2:</s> (b only)"]
    assert r.q_pairs == [(0, 0), (1, 1), (None, 2)]
    assert r.q_matched.tolist() == [True, True, False]


def test_by_position_decoder_labels_show_fed_and_predicted():
    dec_a = [[[[1.0, 0.0], [0.4, 0.6]]]]
    dec_b = [[[[1.0, 0.0], [0.1, 0.9]]]]
    a = maps(["▁x", "</s>"], ["<s>", "▁Die"], ["▁Die", "</s>"], decoder=dec_a)
    b = maps(["▁x", "</s>"], ["<s>", "▁Der"], ["▁Der", "</s>"], decoder=dec_b)
    r = align_maps(a, b, "decoder", by="position")
    assert r.q_labels == ["0:<s>→▁Die | <s>→▁Der", "1:▁Die→</s> | ▁Der→</s>"]
    assert r.k_labels == ["0:<s>", "1:▁Die | ▁Der"]
    assert same_nan(r.diff[0, 0], [[0.0, 0.0], [-0.3, 0.3]])


def test_by_pieces_aligns_the_cat_and_the_dog():
    src_a, src_b = ["▁The", "▁cat", "▁sat", "</s>"], ["▁The", "▁dog", "▁sat", "</s>"]
    # L=1, H=2; rows by hand (any numbers do: the alignment must carry them, not renormalise them)
    ea = np.array([[[0.1, 0.2, 0.3, 0.4], [0.5, 0.1, 0.1, 0.3], [0.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.25]],
                   [[0.7, 0.1, 0.1, 0.1], [0.2, 0.2, 0.2, 0.4], [0.3, 0.3, 0.2, 0.2], [0.0, 0.5, 0.5, 0.0]]])[None]
    eb = np.array([[[0.4, 0.3, 0.2, 0.1], [0.0, 1.0, 0.0, 0.0], [0.5, 0.0, 0.5, 0.0], [0.1, 0.1, 0.1, 0.7]],
                   [[0.1, 0.1, 0.1, 0.7], [0.6, 0.2, 0.1, 0.1], [0.2, 0.3, 0.3, 0.2], [0.0, 0.0, 0.0, 1.0]]])[None]
    r = align_maps(maps(src_a, encoder=ea), maps(src_b, encoder=eb), "encoder", by="pieces")
    # 3 of 4 pieces match (The, sat, </s>); cat and dog each get a row/column of their own
    assert r.q_pairs == r.k_pairs == [(0, 0), (1, None), (None, 1), (2, 2), (3, 3)]
    assert r.q_labels == ["0:▁The", "1:▁cat (a only)", "1:▁dog (b only)", "2:▁sat", "3:</s>"]
    assert int(r.q_matched.sum()) == 3 and int(r.k_matched.sum()) == 3
    assert r.a.shape == r.b.shape == r.diff.shape == (1, 2, 5, 5)
    # sentence a: its rows/columns 0, 1, 2, 3 land on aligned 0, 1, 3, 4; aligned row/column 2 (dog) is NaN
    ia, ib = [0, 1, 3, 4], [0, 2, 3, 4]
    assert np.isnan(r.a[:, :, 2, :]).all() and np.isnan(r.a[:, :, :, 2]).all()
    assert np.isnan(r.b[:, :, 1, :]).all() and np.isnan(r.b[:, :, :, 1]).all()
    assert np.allclose(r.a[0][:, ia][:, :, ia], ea[0])
    assert np.allclose(r.b[0][:, ib][:, :, ib], eb[0])
    # diff = b - a on matched rows x matched columns, NaN everywhere else; one cell by hand:
    # head 0, row sat (a 2, b 2), column The (0, 0): 0.5 - 0.0
    assert r.diff[0, 0, 3, 0] == pytest.approx(0.5)
    # head 1, row </s>, column </s>: 1.0 - 0.0
    assert r.diff[0, 1, 4, 4] == pytest.approx(1.0)
    both = [0, 3, 4]
    exp = np.full((1, 2, 5, 5), np.nan)
    for qa, qb, q in zip([0, 2, 3], [0, 2, 3], both):
        for ka, kb, k in zip([0, 2, 3], [0, 2, 3], both):
            exp[0, :, q, k] = eb[0, :, qb, kb] - ea[0, :, qa, ka]
    assert same_nan(r.diff, exp)


def test_by_pieces_cross_matches_fed_queries_and_source_keys():
    a = random_maps(["▁The", "▁cat", "▁sat", "</s>"], ["<s>", "▁Die", "▁Katze", "▁saß"],
                    ["▁Die", "▁Katze", "▁saß", "</s>"], seed=1)
    b = random_maps(["▁The", "▁dog", "▁sat", "</s>"], ["<s>", "▁Der", "▁Hund", "▁saß"],
                    ["▁Der", "▁Hund", "▁saß", "</s>"], seed=2)
    r = align_maps(a, b, "cross", by="pieces")
    assert r.k_pairs == [(0, 0), (1, None), (None, 1), (2, 2), (3, 3)]
    assert r.q_pairs == [(0, 0), (1, None), (2, None), (None, 1), (None, 2), (3, 3)]
    assert r.q_labels[0] == "0:<s>→▁Die | <s>→▁Der" and r.q_labels[-1] == "3:▁saß→</s>"
    ca, cb = a.cross[:, 0].numpy(), b.cross[:, 0].numpy()
    # row "▁saß" (3 in both), column "▁sat" (2 in both, aligned column 3)
    assert np.allclose(r.diff[:, :, 5, 3], cb[:, :, 3, 2] - ca[:, :, 3, 2])
    assert np.isnan(r.diff[:, :, 1, :]).all() and np.isnan(r.diff[:, :, :, 2]).all()


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
@pytest.mark.parametrize("by", ["position", "pieces"])
def test_a_sentence_compared_with_itself_differs_by_zero(kind, by):
    m = random_maps(["▁I", "▁have", "▁no", "▁time", ".", "</s>"], ["<s>", "▁Ich", "▁habe", "▁Zeit"],
                    ["▁Ich", "▁habe", "▁Zeit", "</s>"])
    r = align_maps(m, m, kind, by=by)
    assert r.q_matched.all() and r.k_matched.all()
    assert np.array_equal(r.diff, np.zeros_like(r.diff))
    assert np.array_equal(r.a, m.get(kind)[:, 0].numpy())


def test_pick_layer_and_head():
    m1 = random_maps(["▁a", "▁b", "</s>"], ["<s>", "▁x"], ["▁x", "</s>"], seed=3)
    m2 = random_maps(["▁a", "▁b", "</s>"], ["<s>", "▁x"], ["▁x", "</s>"], seed=4)
    r = align_maps(m1, m2, "encoder")
    e1, e2 = m1.encoder[:, 0].numpy(), m2.encoder[:, 0].numpy()
    a, b, d = r.pick(1, 2)
    assert np.allclose(a, e1[1, 2]) and np.allclose(b, e2[1, 2]) and np.allclose(d, e2[1, 2] - e1[1, 2])
    a, b, d = r.pick(0)
    assert np.allclose(d, e2[0].mean(0) - e1[0].mean(0), atol=1e-6)
    with pytest.raises(ValueError, match="layer"):
        r.pick(2)
    with pytest.raises(ValueError, match="head"):
        r.pick(0, 3)


def test_exports_keep_absent_cells_blank():
    a = maps(["▁a", "</s>"], encoder=[[[[0.75, 0.25], [0.5, 0.5]]]])
    b = maps(["▁a", "▁b", "</s>"], encoder=[[[[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.2, 0.3, 0.5]]]])
    r = align_maps(a, b, "encoder", by="pieces")
    df = r.to_dataframe()
    assert len(df) == 9 and set(df["layer"]) == {0} and set(df["head"]) == {0}
    row = df[(df["query"] == "1/2:</s>") & (df["key"] == "0:▁a")].iloc[0]  # a's row 1 vs b's row 2, column 0
    assert (row["query_pos_a"], row["query_pos_b"]) == (1, 2)
    assert row["weight_a"] == pytest.approx(0.5) and row["weight_b"] == pytest.approx(0.2)
    assert row["diff"] == pytest.approx(-0.3)
    only_b = df[df["query"] == "1:▁b (b only)"]
    assert only_b["query_pos_a"].isna().all() and only_b["weight_a"].isna().all() and only_b["diff"].isna().all()
    payload = json.loads(json.dumps(r.to_json(), allow_nan=False))  # valid JSON: absent cells are null
    assert payload["q_pairs"] == [[0, 0], [None, 1], [1, 2]]
    assert payload["diff"][0][0][1] == [None, None, None]
    assert payload["diff"][0][0][2][0] == pytest.approx(-0.3)


def test_bad_inputs_raise_value_error():
    m = random_maps(["▁a", "</s>"], ["<s>", "▁x"], ["▁x", "</s>"])
    with pytest.raises(ValueError, match="kind"):
        align_maps(m, m, "self")
    with pytest.raises(ValueError, match="alignment"):
        align_maps(m, m, "encoder", by="words")
    other = random_maps(["▁a", "</s>"], ["<s>", "▁x"], ["▁x", "</s>"], H=2)
    with pytest.raises(ValueError, match="model shapes"):
        align_maps(m, other, "cross")
    two = AttentionMaps(encoder=torch.rand(1, 2, 1, 2, 2), src_tokens=[["▁a", "</s>"]] * 2)
    with pytest.raises(ValueError, match="B=1"):
        align_maps(two, two, "encoder")
    with pytest.raises(ValueError, match="no attention maps"):
        align_maps(None, m, "encoder")
    no_labels = AttentionMaps(encoder=torch.rand(1, 1, 1, 2, 2))
    with pytest.raises(ValueError, match="labels"):
        align_maps(no_labels, no_labels, "encoder")


# -- the difference heatmap -------------------------------------------------------------------------------------

def test_difference_heatmap_is_centred_at_zero():
    d = np.array([[0.2, -0.5], [NAN, 0.1]])
    fig = difference_heatmap(d, ["0:<s>", "1:x"], ["0:a", "1:b"], title="t")
    tr = fig.data[0]
    assert tr.zmid == 0 and tr.zmin == -0.5 and tr.zmax == 0.5
    assert tr.colorscale[0][1] != tr.colorscale[-1][1]  # diverging: the two ends differ
    assert list(tr.y) == ["0:&lt;s&gt;", "1:x"]
    assert np.isnan(np.asarray(tr.z, dtype=float)[1, 0])
    zero = difference_heatmap(np.zeros((2, 2)), ["a", "b"], ["c", "d"]).data[0]
    assert (zero.zmin, zero.zmax) == (-1.0, 1.0)
    assert difference_heatmap(d, ["a", "b"], ["c", "d"], zmax=2).data[0].zmax == 2
    with pytest.raises(ValueError, match="labels"):
        difference_heatmap(d, ["a"], ["c", "d"])
    with pytest.raises(ValueError, match="unique"):
        difference_heatmap(d, ["a", "a"], ["c", "d"])
    with pytest.raises(ValueError, match="positive"):
        difference_heatmap(d, ["a", "b"], ["c", "d"], zmax=0)


def test_the_ablation_difference_map_is_the_compare_map_with_its_own_scale_and_name():
    """Head ablation's ablated - intact map reuses this builder: red where the ablated model attends more (the
    reversed scale), its name on the colour bar and in the hover text, repeated labels made unique, and every text
    escaped for plotly (a title or axis title holding ``<s>`` shows it rather than eating it)."""
    from aiayn.figures.ablation import DIVERGING
    from aiayn.figures.ablation import difference_heatmap as ablation_difference

    d = np.array([[0.3, -0.1], [0.0, 0.2]])
    fig = ablation_difference(d, ["<s>", "<s>"], ["a", "b"], title="<s> row", y_title="query <s>")
    mine, theirs = fig.data[0], difference_heatmap(d, ["0:<s>", "1:<s>"], ["a", "b"], colorscale=DIVERGING).data[0]
    assert list(mine.y) == ["0:&lt;s&gt;", "1:&lt;s&gt;"] and list(mine.colorscale) == list(theirs.colorscale)
    assert list(mine.colorscale) != list(difference_heatmap(d, ["a", "b"], ["c", "d"]).data[0].colorscale)
    assert mine.colorbar.title.text == "ablated − intact" and "ablated − intact: %{z:+.3f}" in mine.hovertemplate
    assert "query &lt;s&gt;: %{y}" in mine.hovertemplate and "<s>" not in mine.hovertemplate
    assert fig.layout.title.text == "&lt;s&gt; row" and fig.layout.yaxis.title.text == "query &lt;s&gt;"
