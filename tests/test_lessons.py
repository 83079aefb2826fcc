"""aiayn.lessons against the paper's formulas, written out independently here (Sections 3.2.1, 3.2.3, 3.5,
5.3, 5.4, Table 3)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from aiayn import Transformer, TransformerConfig, lessons
from aiayn.decoding import greedy_decode
from aiayn.training.recipe import label_smoothed_loss


def small_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig.preset("tiny", vocab_size=50, max_len=32, **overrides)
    return Transformer(cfg).eval()


# -------------------------------------------------------------------------------------------- positional
def test_pe_matches_section_3_5_written_out():
    length, d = 37, 20
    pe = lessons.pe_matrix(length, d)
    for pos in range(length):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-12)
    concat = lessons.pe_matrix(length, d, "concatenated")
    assert np.allclose(concat[:, : d // 2], pe[:, 0::2]) and np.allclose(concat[:, d // 2 :], pe[:, 1::2])


def test_wavelengths_run_from_2pi_towards_10000_2pi():
    d = 512
    wl = lessons.wavelengths(d)
    assert wl[0] == pytest.approx(2 * math.pi)
    assert wl[-1] == pytest.approx(2 * math.pi * 10000 ** ((d - 2) / d))
    ratios = wl[1:] / wl[:-1]
    assert np.allclose(ratios, 10000 ** (2 / d))  # geometric progression
    # a wavelength is a period of its pair of dimensions
    pe_curve = lessons.pe_curves(10, 8, [2])
    assert set(pe_curve["kind"]) == {"sin"} and pe_curve["wavelength"].iloc[0] == pytest.approx(2 * math.pi * 10000 ** (2 / 8))


@pytest.mark.parametrize("k", [1, 7, -3, 50, 99])
def test_offset_map_identity(k):
    les = lessons.pe_offset_map(k, 100, 64)
    assert les.max_error < 1e-5
    pe = lessons.pe_matrix(100, 64)
    # independent check on every valid pos: PE(pos + k) = M_k PE(pos)
    for pos in range(max(0, -k), min(100, 100 - k)):
        assert np.abs(les.matrix @ pe[pos] - pe[pos + k]).max() < 1e-5
    assert len(les.positions) == 100 - abs(k)
    # M_k is the same matrix for every pos and is orthogonal (a rotation per frequency)
    assert np.allclose(les.matrix @ les.matrix.T, np.eye(64), atol=1e-12)


def test_offset_out_of_range_is_a_clear_error():
    with pytest.raises(lessons.LessonInputError, match=r"\|k\| < length"):
        lessons.pe_offset_map(100, 100, 64)
    with pytest.raises(lessons.LessonInputError, match="whole number"):
        lessons.pe_offset_map(1.5, 100, 64)


def test_similarity_depends_on_offset_only():
    n, d = 60, 32
    les = lessons.pe_similarity(n, d)
    sim = les.matrix
    # every diagonal is constant: sim[p, q] == sim[p + 1, q + 1]
    assert np.abs(sim[1:, 1:] - sim[:-1, :-1]).max() < 1e-9
    assert les.max_deviation < 1e-9
    # formula: sum_i cos(omega_i k); at k = 0 that is d / 2
    omega = [1 / 10000 ** (2 * i / d) for i in range(d // 2)]
    for k in (0, 1, 5, -17):
        expected = sum(math.cos(w * k) for w in omega)
        assert les.profile[k + n - 1] == pytest.approx(expected, abs=1e-9)
        assert sim[20, 20 + k] == pytest.approx(expected, abs=1e-9)
    assert les.profile[n - 1] == pytest.approx(d / 2)


@pytest.mark.parametrize("length,d_model,match", [(0, 64, "length"), (2049, 64, "length"), (10, 63, "even"),
                                                   (10, 100000, "d_model"), ("x", 64, "whole number")])
def test_pe_size_errors(length, d_model, match):
    with pytest.raises(lessons.LessonInputError, match=match):
        lessons.check_pe_size(length, d_model)


def test_pe_curves_reject_out_of_range_dimensions():
    with pytest.raises(lessons.LessonInputError, match="0..15"):
        lessons.pe_curves(10, 16, [3, 16])
    assert lessons.parse_int_list("0, 1 5") == [0, 1, 5]
    assert lessons.as_int(4.0, "x") == 4 and type(lessons.as_int(np.int64(3), "x")) is int
    for bad in (True, 2.5, "3", None):
        with pytest.raises(lessons.LessonInputError, match="x must be a whole number"):
            lessons.as_int(bad, "x")
    with pytest.raises(lessons.LessonInputError, match="not a whole number"):
        lessons.parse_int_list("1, two")


def test_embedding_norms_and_learned_positions():
    model = small_model()
    df = lessons.embedding_norms(model)
    emb = df[df["what"] == "scaled token embedding"]["norm"].to_numpy()
    w = model.embedding.weight.detach().double().numpy()
    assert np.allclose(emb, math.sqrt(64) * np.sqrt((w ** 2).sum(1)))
    pe = df[df["what"].str.startswith("positional")]["norm"].to_numpy()
    assert len(pe) == 32 and np.allclose(pe, math.sqrt(64 / 2))  # sin^2 + cos^2 = 1 per pair
    assert lessons.learned_positions(model) is None
    learned = small_model(positional="learned")
    table = lessons.learned_positions(learned, "tgt", 10)
    assert table.shape == (10, 64) and np.allclose(table, learned.tgt_positions.weight.detach().double()[:10].numpy())
    dfl = lessons.embedding_norms(learned)
    assert np.allclose(dfl[dfl["what"].str.startswith("positional")]["norm"].to_numpy(),
                       np.linalg.norm(learned.tgt_positions.weight.detach().double().numpy(), axis=1))


# -------------------------------------------------------------------------------------------- masks
class FakeTok:
    def encode(self, s):
        return [4 + (ord(c) % 40) for c in s.split()[0]] if s else []

    def id_to_piece(self, i):
        return {0: "<pad>", 3: "</s>"}.get(i, f"p{i}")


def test_padded_batch_and_combined_mask():
    b = lessons.padded_batch(FakeTok(), ["abc", "a", "", "ab"], pad_id=0, eos_id=3)
    assert b.sentences == ["abc", "a", "ab"]
    assert b.ids.shape == (3, 4)
    assert b.key_mask.tolist() == [[True] * 4, [True, True, False, False], [True, True, True, False]]
    assert b.pieces[1][2:] == ["<pad>", "<pad>"] and b.pieces[0][-1] == "</s>"
    comb = lessons.combined_mask(b.key_mask)
    for r in range(3):
        for i in range(4):
            for j in range(4):
                assert comb[r, i, j] == (j <= i and b.key_mask[r, j])
    with pytest.raises(lessons.LessonInputError, match="at least one"):
        lessons.padded_batch(FakeTok(), ["", "  "], pad_id=0)


def test_decode_with_causal_mask_equals_model_decode():
    model = small_model()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt = torch.tensor([[2, 10, 11, 12, 13], [2, 14, 15, 0, 0]])
    with torch.inference_mode():
        enc = model.encode(src)
        ref = model.decode(tgt, enc, need_weights=True, need_scores=True)
        mine = lessons.decode_with_self_mask(model, tgt, enc, causal=True, need_weights=True)
    # it is the model's decoder itself (Transformer.decode), bit for bit
    assert torch.equal(mine.logits, ref.logits) and torch.equal(mine.self_weights, ref.self_weights)
    assert torch.equal(mine.self_scores, ref.self_scores) and torch.equal(mine.cross_weights, ref.cross_weights)
    # and with the causal mask no weight falls on a future key
    assert float(torch.triu(mine.self_weights, diagonal=1).abs().max()) == 0.0


def test_unmasked_decoder_differs_only_through_future_positions():
    model = small_model()
    src = torch.tensor([[5, 6, 7, 3]])
    tgt = torch.tensor([[2, 10, 11, 12, 13, 14]])
    changed = tgt.clone()
    changed[0, 4] = 30  # change a token that is in the future of positions 0..3
    with torch.inference_mode():
        enc = model.encode(src)
        m1 = lessons.decode_with_self_mask(model, tgt, enc, causal=True).logits
        m2 = lessons.decode_with_self_mask(model, changed, enc, causal=True).logits
        u1 = lessons.decode_with_self_mask(model, tgt, enc, causal=False, need_weights=True)
        u2 = lessons.decode_with_self_mask(model, changed, enc, causal=False).logits
    assert torch.allclose(m1[0, :4], m2[0, :4], atol=1e-6)          # masked: blind to the future
    assert (u1.logits[0, :4] - u2[0, :4]).abs().amax(-1).min() > 1e-4  # unmasked: every earlier row sees it
    assert float(torch.triu(u1.self_weights, diagonal=1).sum()) > 0
    # a single layer: the last position has no future, so it is the same with or without the mask
    one = small_model(n_layers=1)
    with torch.inference_mode():
        enc1 = one.encode(src)
        a = lessons.decode_with_self_mask(one, tgt, enc1, causal=True).logits[0]
        b = lessons.decode_with_self_mask(one, tgt, enc1, causal=False).logits[0]
    assert torch.allclose(a[-1], b[-1], atol=1e-5)
    assert (a[:-1] - b[:-1]).abs().amax(-1).min() > 1e-4


def test_leak_and_greedy_do_not_mutate_the_model():
    model = small_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attrs = {name: sorted(vars(m).keys()) for name, m in model.named_modules()}
    leak = lessons.causal_leak(model, [5, 6, 7, 3], [2, 10, 11, 12], [10, 11, 12, 3])
    greedy_masked = lessons.greedy_with_self_mask(model, [5, 6, 7, 3], causal=True, max_len=12)
    lessons.greedy_with_self_mask(model, [5, 6, 7, 3], causal=False, max_len=12)
    lessons.decoder_mask_steps(model, [5, 6, 7, 3], [2, 10, 11, 12], 1, 2)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert attrs == {name: sorted(vars(m).keys()) for name, m in model.named_modules()}
    assert not model.training and all(p.grad is None for p in model.parameters())
    # leak: the first query can only leak (its only past key is itself); the last one has no future at all
    assert leak.future_mass.shape == (2, 4, 4)
    assert np.all(leak.future_mass[..., -1] == 0) and np.all(leak.future_mass[..., 0] > 0)
    assert np.all((leak.p_next_masked > 0) & (leak.p_next_masked <= 1))
    # with the mask, the recomputing greedy decoder is the library's greedy decoder
    ref = greedy_decode(model, torch.tensor([[5, 6, 7, 3]]), max_len=12)[0].tokens
    assert greedy_masked == list(ref)


def test_decoder_mask_steps_against_the_projections():
    model = small_model()
    src, dec_in = [5, 6, 7, 3], [2, 10, 11, 12, 13]
    st = lessons.decoder_mask_steps(model, src, dec_in, 0, 1)
    d_k = model.cfg.d_k
    # layer 0's queries and keys come from the embedded decoder input: recompute Q K^T by hand
    with torch.no_grad():
        x = model.embed(torch.tensor([dec_in]), "tgt")[0].double()
        att = model.decoder_layers[0].self_attn
        wq, bq = att.w_q.weight.double(), att.w_q.bias.double()
        wk, bk = att.w_k.weight.double(), att.w_k.bias.double()
        q = (x @ wq.T + bq)[:, d_k : 2 * d_k]
        k = (x @ wk.T + bk)[:, d_k : 2 * d_k]
        raw = (q @ k.T).numpy()
    assert np.allclose(st.raw, raw, atol=1e-4)
    assert np.allclose(st.scaled, raw / math.sqrt(d_k), atol=1e-4)
    upper = np.triu(np.ones((5, 5), dtype=bool), 1)
    assert np.all(np.isneginf(st.masked[upper])) and np.all(np.isfinite(st.masked[~upper]))
    assert np.allclose(st.weights.sum(-1), 1.0) and np.all(st.weights[upper] == 0)
    assert st.max_weight_error < 1e-5
    with pytest.raises(lessons.LessonInputError, match="head must be in 0..3"):
        lessons.decoder_mask_steps(model, src, dec_in, 0, 4)


# -------------------------------------------------------------------------------------------- scaled dot-product
@pytest.mark.parametrize("d_k", [1, 16, 64, 512])
def test_dot_product_variance_is_d_k(d_k):
    n = 20000
    x = lessons.random_dot_products(d_k, n, seed=123)
    # Var(sample variance) ~ (mu4 - sigma^4) / n with mu4 = 3 d_k^2 + 6 d_k for a sum of d_k products of normals
    sd = math.sqrt((2 * d_k**2 + 6 * d_k) / n)
    assert abs(x.var() - d_k) < 5 * sd
    assert abs(x.mean()) < 5 * math.sqrt(d_k / n)
    assert abs((x / math.sqrt(d_k)).var() - 1) < 5 * sd / d_k


def test_softmax_sharpness_unscaled_saturates_scaled_does_not():
    df = lessons.softmax_sharpness([1, 16, 256, 1024], n_keys=16, n_queries=300)
    un = df[df["scaling"] == "unscaled"].set_index("d_k")
    sc = df[df["scaling"] != "unscaled"].set_index("d_k")
    assert un.loc[1024, "entropy"] < 0.3 * un.loc[1, "entropy"] and un.loc[1024, "max_weight"] > 0.8
    assert sc["entropy"].max() - sc["entropy"].min() < 0.15 and sc["max_weight"].max() < 0.4
    assert (df["entropy"] <= math.log(16) + 1e-12).all()


def test_attention_steps_hand_computed():
    st = lessons.attention_steps([[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [3.0]])
    s = 1 / math.sqrt(2)
    w0 = math.exp(s) / (math.exp(s) + 1)
    assert st.scores.tolist() == [[1.0, 0.0]]
    assert st.scaled[0, 0] == pytest.approx(s)
    assert st.weights[0].tolist() == pytest.approx([w0, 1 - w0])
    assert st.output[0, 0] == pytest.approx(w0 * 1 + (1 - w0) * 3)
    assert st.max_abs_diff < 1e-6
    masked = lessons.attention_steps([[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [3.0]],
                                     [[True, False], [False, False]])
    assert np.isneginf(masked.masked[0, 1]) and masked.weights[0].tolist() == [1.0, 0.0]
    assert masked.output[0, 0] == 1.0 and masked.weights[1].tolist() == [0.0, 0.0]  # fully masked row -> 0
    assert masked.max_abs_diff < 1e-6


def test_attention_steps_agree_with_library_on_random_input():
    g = np.random.default_rng(0)
    q, k, v = g.normal(size=(5, 8)), g.normal(size=(7, 8)), g.normal(size=(7, 3))
    mask = g.random((5, 7)) > 0.3
    st = lessons.attention_steps(q, k, v, mask)
    assert st.max_abs_diff < 1e-5
    assert np.allclose(st.weights.sum(-1)[mask.any(-1)], 1.0)


@pytest.mark.parametrize("q,k,v,match", [
    ([[1.0, 2.0]], [[1.0]], [[1.0]], "same number of columns"),
    ([[1.0]], [[1.0], [2.0]], [[1.0]], "same number of rows"),
    ([[float("nan")]], [[1.0]], [[1.0]], "non-finite"),
    ([["a"]], [[1.0]], [[1.0]], "numbers only"),
])
def test_attention_steps_bad_input(q, k, v, match):
    with pytest.raises(lessons.LessonInputError, match=match):
        lessons.attention_steps(q, k, v)


# -------------------------------------------------------------------------------------------- model and training
def _formula_count(cfg: TransformerConfig) -> int:
    d, f, n, v = cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.vocab_size
    attn = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    ln = 2 * d
    return v * d + n * (attn + ffn + 2 * ln) + n * (2 * attn + ffn + 3 * ln)


def test_parameter_breakdown_sums_to_num_parameters():
    for overrides in ({}, {"share_embeddings": False, "positional": "learned", "norm_first": True}):
        cfg = TransformerConfig.preset("tiny", vocab_size=50, max_len=32, **overrides)
        df = lessons.parameter_breakdown(cfg)
        assert int(df["parameters"].sum()) == Transformer(cfg).num_parameters()
    base = TransformerConfig.preset("base", vocab_size=37000)
    summ = lessons.parameter_summary(base).set_index(["stack", "component"])["parameters"]
    assert int(summ.sum()) == _formula_count(base)
    assert summ[("encoder", "self-attention")] == 6 * 4 * (512 * 512 + 512)
    assert summ[("decoder", "cross-attention")] == 6 * 4 * (512 * 512 + 512)
    assert summ[("decoder", "feed-forward")] == 6 * (2 * 512 * 2048 + 2048 + 512)
    assert summ[("embeddings", "token embeddings")] == 37000 * 512  # tied: counted once
    big = TransformerConfig.preset("big", vocab_size=37000)
    assert int(lessons.parameter_breakdown(big)["parameters"].sum()) == _formula_count(big)


def test_lr_schedule_is_equation_3_with_peak_at_warmup():
    d, w = 512, 4000
    df = lessons.lr_schedule(d, w, 20000)
    for s, lr in zip(df["step"], df["lr"]):
        assert lr == pytest.approx(d**-0.5 * min(s**-0.5, s * w**-1.5))
    assert int(df.loc[df["lr"].idxmax(), "step"]) == w
    assert df["lr"].max() == pytest.approx(1 / math.sqrt(d * w))
    with pytest.raises(lessons.LessonInputError, match="warmup_steps"):
        lessons.lr_schedule(512, 0, 100)


def test_label_smoothing_target_and_loss_by_hand():
    q = lessons.smoothed_target(4, 1, 0.2)
    assert q.sum() == pytest.approx(1.0)
    assert q.tolist() == pytest.approx([0.05, 0.85, 0.05, 0.05])
    p = [0.1, 0.7, 0.1, 0.1]
    hand = -(3 * 0.05 * math.log(0.1) + 0.85 * math.log(0.7))  # = 0.648562...
    assert lessons.smoothed_cross_entropy(p, 1, 0.2) == pytest.approx(hand)
    assert hand == pytest.approx(0.648562, abs=1e-6)
    # the training loss agrees (logits = log p)
    loss, n = label_smoothed_loss(torch.log(torch.tensor([[p]])), torch.tensor([[1]]), 0.2, pad_id=0)
    nll, _ = label_smoothed_loss(torch.log(torch.tensor([[p]])), torch.tensor([[1]]), 0.0, pad_id=0)
    assert n == 1 and float(loss) == pytest.approx(hand, rel=1e-5) and float(nll) == pytest.approx(-math.log(0.7), rel=1e-5)
    for eps in (0.0, 0.1, 0.5):
        assert lessons.smoothed_target(37, 5, eps).sum() == pytest.approx(1.0)
    # over-confidence costs: the smoothed loss is minimal at p_true = 1 - eps + eps / V
    tab = lessons.label_smoothing_table(10, 0, 0.1, np.linspace(0.5, 0.999, 500))
    best = float(tab.loc[tab["smoothed_loss"].idxmin(), "p_true"])
    assert best == pytest.approx(1 - 0.1 + 0.01, abs=2e-3)
    with pytest.raises(lessons.LessonInputError, match=r"\[0, 1\)"):
        lessons.smoothed_target(10, 0, 1.0)


def test_load_metrics(tmp_path):
    p = tmp_path / "metrics.jsonl"
    with pytest.raises(lessons.MetricsLogError, match="missing"):
        lessons.load_metrics(p)
    p.write_text("")
    with pytest.raises(lessons.MetricsLogError, match="empty"):
        lessons.load_metrics(p)
    p.write_text("{oops\n[1, 2]\n")
    with pytest.raises(lessons.MetricsLogError, match="corrupt"):
        lessons.load_metrics(p)
    lines = [{"step": 200, "epoch": 0, "train_loss": 5.0, "lr": 2e-4, "tokens_per_s": 900.0, "wall_time": 20.0},
             {"step": 100, "epoch": 0, "train_loss": 6.0, "lr": 1e-4, "tokens_per_s": 1000.0, "wall_time": 10.0,
              "valid_loss": 5.5, "valid_bleu": 1.5}]
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    df, warnings = lessons.load_metrics(p)
    assert df["step"].tolist() == [100, 200] and df["train_loss"].tolist() == [6.0, 5.0]
    assert df["valid_bleu"].iloc[0] == 1.5 and math.isnan(df["valid_bleu"].iloc[1])
    assert len(warnings) == 1 and "line 3" in warnings[0]


def test_scaled_dot_product_lab_counts_tables_and_maps_from_0():
    """The lab's tables (Q, K, V) and its maps label the same rows and columns: q0 is row 0 of Q, v0 column 0 of V
    (the tables used to say d1..d3 / v1..v2 while the maps said q0.. / v0..)."""
    from aiayn import lessons

    q, k, v = lessons.example_qkv()
    assert list(q.columns) == list(k.columns) == lessons.names("d", 3) == ["d0", "d1", "d2"]
    assert list(v.columns) == lessons.names("v", v.shape[1]) == ["v0", "v1"]
    assert list(q.index) == [0, 1, 2] and list(k.index) == list(v.index) == [0, 1, 2, 3]
    res = lessons.attention_steps(q.to_numpy(), k.to_numpy(), v.to_numpy())
    assert res.output.shape == (len(q), v.shape[1]) and lessons.names("q", len(q))[0] == "q0"
