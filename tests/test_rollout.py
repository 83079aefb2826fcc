"""Attention rollout (aiayn.analysis.rollout; Abnar and Zuidema 2020, Section 3): hand-computed 2-layer cases,
rows summing to 1, padding, the residual limits, causality and the cross rollout."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from aiayn import AttentionMaps
from aiayn.analysis import rollout, rollout_dict, rollout_frame

# -- a 2-layer, 2-head case small enough to compute by hand (S = T = 2, B = 1) ---------------------------------
# encoder, layer 0: heads [[1, 0], [.5, .5]] and [[.6, .4], [.1, .9]] -> mean [[.8, .2], [.3, .7]]
#                   A'_0 = .5 I + .5 mean = [[.9, .1], [.15, .85]]
# encoder, layer 1: heads [[0, 1], [1, 0]] and [[.4, .6], [.2, .8]]   -> mean [[.2, .8], [.6, .4]]
#                   A'_1 = [[.6, .4], [.3, .7]]
# R_1 = A'_1 A'_0 = [[.6*.9 + .4*.15, .6*.1 + .4*.85], [.3*.9 + .7*.15, .3*.1 + .7*.85]]
#     = [[.6, .4], [.375, .625]]
ENC = [[[[1.0, 0.0], [0.5, 0.5]], [[0.6, 0.4], [0.1, 0.9]]],
       [[[0.0, 1.0], [1.0, 0.0]], [[0.4, 0.6], [0.2, 0.8]]]]
ENC_ROLL = [[[0.9, 0.1], [0.15, 0.85]], [[0.6, 0.4], [0.375, 0.625]]]
# decoder, layer 0: heads [[1, 0], [.5, .5]] and [[1, 0], [.3, .7]] -> mean [[1, 0], [.4, .6]]
#                   A'_0 = [[1, 0], [.2, .8]]
# decoder, layer 1: heads [[1, 0], [.9, .1]] and [[1, 0], [.1, .9]] -> mean [[1, 0], [.5, .5]]
#                   A'_1 = [[1, 0], [.25, .75]]
# R_1 = A'_1 A'_0 = [[1, 0], [.25 + .75*.2, .75*.8]] = [[1, 0], [.4, .6]]
DEC = [[[[1.0, 0.0], [0.5, 0.5]], [[1.0, 0.0], [0.3, 0.7]]],
       [[[1.0, 0.0], [0.9, 0.1]], [[1.0, 0.0], [0.1, 0.9]]]]
DEC_ROLL = [[[1.0, 0.0], [0.2, 0.8]], [[1.0, 0.0], [0.4, 0.6]]]
# cross, layer 0: heads I and [[.5, .5], [.5, .5]]             -> C_0 = [[.75, .25], [.25, .75]]
# cross, layer 1: heads [[0, 1], [1, 0]] and [[.2, .8], [.6, .4]] -> C_1 = [[.1, .9], [.8, .2]]
# (residual .5, keys = encoder outputs) layer 0: U_0 = C_0 (rows sum to 1)
# layer 1: U_1 = .5 A'_1 U_0 + C_1
#          A'_1 U_0 = [[.75, .25], [.25*.75 + .75*.25, .25*.25 + .75*.75]] = [[.75, .25], [.375, .625]]
#          U_1 = [[.375 + .1, .125 + .9], [.1875 + .8, .3125 + .2]] = [[.475, 1.025], [.9875, .5125]], rows sum to 1.5
#          -> [[19/60, 41/60], [79/120, 41/120]]
CROSS = [[[[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.5], [0.5, 0.5]]],
         [[[0.0, 1.0], [1.0, 0.0]], [[0.2, 0.8], [0.6, 0.4]]]]
CROSS_ROLL = [[[0.75, 0.25], [0.25, 0.75]], [[19 / 60, 41 / 60], [79 / 120, 41 / 120]]]


def hand_maps() -> AttentionMaps:
    t = lambda x: torch.tensor(x, dtype=torch.float32)[:, None]  # noqa: E731 - (L, H, Q, K) -> (L, 1, H, Q, K)
    return AttentionMaps(encoder=t(ENC), decoder=t(DEC), cross=t(CROSS), src_tokens=[["a", "</s>"]],
                         decoder_input_tokens=[["<s>", "x"]], output_tokens=[["x", "</s>"]],
                         src_lengths=[2], tgt_lengths=[2])


def test_encoder_rollout_matches_the_hand_computed_case():
    r = rollout(hand_maps(), kind="encoder")
    assert r.dtype == torch.float32 and r.shape == (2, 1, 2, 2)
    np.testing.assert_allclose(r[:, 0].numpy(), ENC_ROLL, atol=1e-6)
    # the order matters: the earlier layer is on the right (A'_0 A'_1 would give [[.57, .43], ...])
    assert not np.allclose(r[1, 0].numpy(), np.array(ENC_ROLL[0]) @ np.array([[0.6, 0.4], [0.3, 0.7]]))


def test_decoder_rollout_matches_the_hand_computed_case():
    r = rollout(hand_maps(), kind="decoder")
    assert r.shape == (2, 1, 2, 2)
    np.testing.assert_allclose(r[:, 0].numpy(), DEC_ROLL, atol=1e-6)


def test_cross_rollout_matches_the_hand_computed_case():
    m = hand_maps()
    r = rollout(m, kind="cross", through_encoder=False)
    assert r.shape == (2, 1, 2, 2)
    np.testing.assert_allclose(r[:, 0].numpy(), CROSS_ROLL, atol=1e-6)
    # through the encoder: each layer's result times the encoder's full (last-layer) rollout
    r_enc = rollout(m, kind="cross")
    np.testing.assert_allclose(r_enc[:, 0].numpy(), np.array(CROSS_ROLL) @ np.array(ENC_ROLL[-1]), atol=1e-6)
    np.testing.assert_allclose(r_enc[0, 0].numpy(), [[0.54375, 0.45625], [0.43125, 0.56875]], atol=1e-6)


def test_residual_limits():
    m = hand_maps()
    for kind in ("encoder", "decoder"):
        r = rollout(m, kind=kind, residual=1.0)
        np.testing.assert_allclose(r.numpy(), np.broadcast_to(np.eye(2), r.shape), atol=1e-7)
        r0 = rollout(m, kind=kind, residual=0.0)
        heads = np.array(ENC if kind == "encoder" else DEC)
        np.testing.assert_allclose(r0[0, 0].numpy(), heads[0].mean(0), atol=1e-7)  # one layer: the head mean
        np.testing.assert_allclose(r0[1, 0].numpy(), heads[1].mean(0) @ heads[0].mean(0), atol=1e-7)
    c = np.array(CROSS).mean(1)  # (L, T, S) head means
    np.testing.assert_allclose(rollout(m, "cross", 0.0, through_encoder=False)[:, 0].numpy(), c, atol=1e-7)
    np.testing.assert_allclose(rollout(m, "cross", 1.0, through_encoder=False)[1, 0].numpy(), c.mean(0), atol=1e-7)


def test_paper_convention_is_residual_one_half():
    """0.5 W_att + 0.5 I, renormalised, multiplied through the layers (numpy, independent of the code)."""
    g = np.random.default_rng(0)
    w = g.random((3, 1, 4, 5, 5))
    w /= w.sum(-1, keepdims=True)
    expected, acc = [], np.eye(5)
    for layer in range(3):
        a = 0.5 * w[layer, 0].mean(0) + 0.5 * np.eye(5)
        a /= a.sum(-1, keepdims=True)
        acc = a @ acc
        expected.append(acc)
    r = rollout(AttentionMaps(encoder=torch.tensor(w, dtype=torch.float32)), kind="encoder")
    np.testing.assert_allclose(r[:, 0].numpy(), expected, atol=1e-5)


def random_padded_maps(seed: int = 0) -> AttentionMaps:
    """B=2, L=3, H=2, S=5, T=4; item 1 has src length 3 and tgt length 2. Padded rows are garbage that must
    be ignored (they put weight everywhere); unpadded rows put no weight on padded keys, as the model does."""
    g = torch.Generator().manual_seed(seed)
    L, H, S, T = 3, 2, 5, 4
    src_len, tgt_len = [5, 3], [4, 2]

    def soft(q, k, lengths_q, lengths_k, causal):
        x = torch.rand(L, 2, H, q, k, generator=g) + 0.05
        for b in range(2):
            keep = torch.zeros(q, k, dtype=torch.bool)
            keep[: lengths_q[b], : lengths_k[b]] = True
            if causal:
                keep &= torch.ones(q, k, dtype=torch.bool).tril()
            keep[lengths_q[b]:] = True  # padded rows: garbage over every key
            x[:, b] = x[:, b] * keep
        return x / x.sum(-1, keepdim=True)

    return AttentionMaps(encoder=soft(S, S, src_len, src_len, False), decoder=soft(T, T, tgt_len, tgt_len, True),
                         cross=soft(T, S, tgt_len, src_len, False), src_lengths=src_len, tgt_lengths=tgt_len)


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
@pytest.mark.parametrize("residual", [0.0, 0.3, 0.5, 1.0])
def test_rows_sum_to_one_and_padding_neither_receives_nor_passes_flow(kind, residual):
    m = random_padded_maps()
    r = rollout(m, kind=kind, residual=residual)
    L, B = 3, 2
    q_len = m.src_lengths if kind == "encoder" else m.tgt_lengths
    k_len = m.tgt_lengths if kind == "decoder" else m.src_lengths
    assert r.shape == (L, B, 5 if kind == "encoder" else 4, 4 if kind == "decoder" else 5)
    for b in range(B):
        qn, kn = q_len[b], k_len[b]
        np.testing.assert_allclose(r[:, b, :qn].sum(-1).numpy(), np.ones((L, qn)), atol=1e-5)
        assert (r[:, b, qn:] == 0).all() and (r[:, b, :, kn:] == 0).all()  # padded rows and columns hold zeros
        # the padded item gives what it gives alone, cropped to its length (AttentionMaps.select)
        alone = rollout(m.select(b), kind=kind, residual=residual)
        np.testing.assert_allclose(r[:, b, :qn, :kn].numpy(), alone[:, 0].numpy(), atol=1e-6)
    assert (r >= 0).all()


def test_decoder_rollout_stays_causal():
    r = rollout(random_padded_maps(1), kind="decoder", residual=0.2)
    assert (r.triu(diagonal=1) == 0).all()
    lower = torch.ones(4, 4, dtype=torch.bool).tril()
    assert (r[:, 0][:, lower] > 0).all()  # and fills the lower triangle of the unpadded item


def test_rollout_of_a_real_padded_batch(tiny_translator):
    """Maps from the tiny model's capture path on two sentences of different lengths."""
    tr = tiny_translator
    ids = [tr.encode_source(s)[0] for s in ("I have no time.", "Good morning, my dear friend, how are you?")]
    S = max(map(len, ids))
    src = torch.full((2, S), tr.cfg.pad_id, dtype=torch.long)
    for b, x in enumerate(ids):
        src[b, : len(x)] = torch.tensor(x)
    tgt = torch.tensor([[tr.cfg.bos_id, 5, 6, 7, 8], [tr.cfg.bos_id, 9, tr.cfg.pad_id, tr.cfg.pad_id, tr.cfg.pad_id]])
    with torch.inference_mode():
        _, maps = tr.model(src, tgt, return_attention=True)
    for kind in ("encoder", "decoder", "cross"):
        r = rollout(maps, kind=kind)
        assert r.shape[:2] == (tr.cfg.n_layers, 2)
        for b in range(2):
            q = (maps.src_lengths if kind == "encoder" else maps.tgt_lengths)[b]
            np.testing.assert_allclose(r[:, b, :q].sum(-1).numpy(), 1.0, atol=1e-5)
            alone = rollout(maps.select(b), kind=kind)
            np.testing.assert_allclose(r[:, b, : alone.shape[2], : alone.shape[3]].numpy(), alone[:, 0].numpy(),
                                       atol=1e-5)
    assert maps.src_lengths[0] < S and maps.tgt_lengths == [5, 2]


def test_cross_rollout_shape_and_rows():
    m = random_padded_maps(2)
    for through in (True, False):
        r = rollout(m, kind="cross", residual=0.5, through_encoder=through)
        assert r.shape == (3, 2, 4, 5)
        np.testing.assert_allclose(r[:, 0].sum(-1).numpy(), 1.0, atol=1e-5)
    # the independent closed form: sum_m r^(l-m) A'_l..A'_{m+1} C_m, renormalised (item 0, unpadded)
    rr = 0.5
    dec = m.decoder[:, 0].double().mean(1).numpy()
    cross = m.cross[:, 0].double().mean(1).numpy()
    prime = [rr * np.eye(4) + (1 - rr) * d for d in dec]
    layer = 2
    total = np.zeros((4, 5))
    for mm in range(layer + 1):
        carry = np.eye(4)
        for j in range(mm + 1, layer + 1):
            carry = prime[j] @ carry
        total += rr ** (layer - mm) * carry @ cross[mm]
    total /= total.sum(-1, keepdims=True)
    np.testing.assert_allclose(rollout(m, "cross", rr, through_encoder=False)[layer, 0].numpy(), total, atol=1e-5)


@pytest.mark.parametrize("bad", [
    dict(kind="heads"), dict(residual=-0.1), dict(residual=1.5), dict(residual=float("nan")), dict(residual="x"),
])
def test_bad_arguments_raise(bad):
    with pytest.raises(ValueError):
        rollout(hand_maps(), **{"kind": "encoder", **bad})


def test_missing_maps_raise():
    m = hand_maps()
    with pytest.raises(ValueError, match="encoder"):
        rollout(AttentionMaps(decoder=m.decoder, cross=m.cross), kind="encoder")
    with pytest.raises(ValueError, match="encoder"):  # cross through the encoder needs the encoder maps
        rollout(AttentionMaps(decoder=m.decoder, cross=m.cross), kind="cross")
    no_encoder = AttentionMaps(decoder=m.decoder, cross=m.cross)
    assert rollout(no_encoder, kind="cross", through_encoder=False).shape == (2, 1, 2, 2)
    with pytest.raises(ValueError, match="cross"):
        rollout(AttentionMaps(encoder=m.encoder, decoder=m.decoder), kind="cross")
    with pytest.raises(ValueError, match="decoder"):
        rollout(AttentionMaps(encoder=m.encoder), kind="decoder")


def test_exports_hold_the_rollout():
    m = random_padded_maps(3)
    m.src_tokens = [[f"s{i}" for i in range(5)], ["a", "b", "</s>"]]
    m.decoder_input_tokens = [["<s>", "x", "y", "z"], ["<s>", "w"]]
    r = rollout(m, kind="cross")
    df = rollout_frame(r, m, "cross")
    assert len(df) == 3 * (4 * 5 + 2 * 3)  # unpadded (query, key) pairs per layer and item
    one = df[(df.layer == 1) & (df.batch == 1) & (df.query_pos == 1)]
    np.testing.assert_allclose(one.weight.to_numpy(), r[1, 1, 1, :3].numpy(), atol=1e-6)
    assert list(one.key_token) == ["a", "b", "</s>"] and set(one.query_token) == {"w"}
    np.testing.assert_allclose(df.groupby(["layer", "batch", "query_pos"]).weight.sum().to_numpy(), 1.0, atol=1e-5)
    d = rollout_dict(r, m, "cross", 0.5, through_encoder=True)
    assert d["shape"] == [3, 2, 4, 5] and d["through_encoder"] is True
    np.testing.assert_allclose(np.array(d["rollout"]), r.numpy(), atol=1e-6)
    assert d["key_tokens"][1] == ["a", "b", "</s>"]


def test_layers_figure_holds_every_layer():
    from aiayn.figures.rollout import rollout_layers

    r = rollout(hand_maps(), kind="encoder")[:, 0].numpy()
    fig = rollout_layers(r, ["a", "a"], ["a", "a"], highlight=2)  # repeated labels are made unique
    assert len(fig.data) == 2 and all(t.coloraxis == "coloraxis" for t in fig.data)
    np.testing.assert_allclose(np.asarray(fig.data[1].z), ENC_ROLL[1])
    assert list(fig.data[0].x) == ["0:a", "1:a"]
    assert "<b>layer 2</b>" in [a.text for a in fig.layout.annotations]
    # unique labels (the page's "i:piece") are kept, and the grid names its words: keys under every panel,
    # queries left of the first
    fig = rollout_layers(r, ["0:a", "1:</s>"], ["0:a", "1:</s>"])
    assert list(fig.data[0].x) == list(fig.data[1].x) == ["0:a", "1:&lt;/s&gt;"] and list(fig.data[0].y)[0] == "0:a"
    assert fig.layout.xaxis.showticklabels and fig.layout.xaxis2.showticklabels
    assert fig.layout.yaxis.showticklabels and not fig.layout.yaxis2.showticklabels
    with pytest.raises(ValueError):
        rollout_layers(r[0], ["a", "b"], ["a", "b"])
    with pytest.raises(ValueError):
        rollout_layers(r, ["a"], ["a", "b"])
