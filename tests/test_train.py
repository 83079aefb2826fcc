"""The training recipe of Section 5, checked against formulas written out here and against independent runs.

* Equation 3 (learning rate), label smoothing (Section 5.4; computed by torch's
  ``cross_entropy(label_smoothing=...)``) against hand-computed values and the paper's formula written out.
* Batches: ``collate`` pads and shifts the decoder input (BOS + y[:-1]) as written out here.
* A short run on real Ding pairs (tests/fixtures/ding_sample.txt) lowers the loss.
* Checkpoint averaging (Section 6.1) equals the mean computed here with numpy.
* Resume after an interruption continues exactly (weights, Adam moments, dropout RNG, data order).
* Run states are written atomically and pruned to the last ``keep``.
* 2-process DDP on CPU (gloo) gives the weights of one process accumulating the same micro-batches.
* A training step reads no tensor value back from the device; the loop reads one per metrics record.
(The input pipeline itself is checked against reference loops in tests/test_train_pipeline.py.)
"""
from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file as np_load_file

from aiayn.training.loop import train
from aiayn.training.pipeline import step_batches
from aiayn.training.recipe import TrainConfig, label_smoothed_loss, noam_lr
from aiayn.training.state import list_states, save_state

REPO = Path(__file__).resolve().parent.parent
QUIET = lambda *a, **k: None  # noqa: E731  (train's log callback)


# ---------------------------------------------------------------------------------------------------------
# Equation 3
# ---------------------------------------------------------------------------------------------------------
def eq3(step: int, d_model: int, warmup: int) -> float:
    """lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5), written out by regime."""
    if step <= warmup:  # "increasing the learning rate linearly for the first warmup_steps training steps"
        return step * warmup ** -1.5 / math.sqrt(d_model)
    return 1.0 / math.sqrt(d_model * step)  # "decreasing it thereafter proportionally to the inverse square root"


@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (256, 400), (64, 1)])
def test_noam_lr_equals_equation_3(d_model, warmup):
    for step in [1, 2, 3, warmup // 2 + 1, warmup - 1, warmup, warmup + 1, 2 * warmup, 10 * warmup, 100_000]:
        if step < 1:
            continue
        assert noam_lr(step, d_model, warmup) == pytest.approx(eq3(step, d_model, warmup), rel=1e-12)
        assert noam_lr(step, d_model, warmup, lr_scale=2.5) == pytest.approx(2.5 * eq3(step, d_model, warmup), rel=1e-12)


def test_noam_lr_peak_and_regimes():
    d, w = 512, 4000
    # the paper's base setting peaks at 1/sqrt(512 * 4000) = 6.98771e-4 (hand-computed: sqrt(2048000) = 1431.0835)
    assert noam_lr(w, d, w) == pytest.approx(1 / 1431.0835, rel=1e-6)
    lrs = [noam_lr(s, d, w) for s in range(1, 3 * w + 1)]
    assert int(np.argmax(lrs)) + 1 == w
    # warmup regime: linear in step (lr(2s) = 2 lr(s)); decay regime: lr(4s) = lr(s) / 2
    assert noam_lr(200, d, w) == pytest.approx(2 * noam_lr(100, d, w), rel=1e-12)
    assert noam_lr(4 * 5000, d, w) == pytest.approx(noam_lr(5000, d, w) / 2, rel=1e-12)
    # strictly increasing before the peak, strictly decreasing after
    assert all(a < b for a, b in zip(lrs[: w - 1], lrs[1:w]))
    assert all(a > b for a, b in zip(lrs[w - 1 : -1], lrs[w:]))


def test_noam_lr_rejects_step_zero():
    with pytest.raises(ValueError, match="step"):
        noam_lr(0, 512, 4000)
    with pytest.raises(ValueError, match="warmup"):
        noam_lr(1, 512, 0)


def test_noam_lr_linear_decay_reaches_zero_at_max_steps():
    d, w, m = 256, 400, 1000
    for step in (1, 2, w, 401, 999, 1000):
        # Equation 3 times (m - step + 1) / m, written out
        assert noam_lr(step, d, w, 0.2, decay="linear", max_steps=m) == pytest.approx(
            0.2 * eq3(step, d, w) * (m - step + 1) / m, rel=1e-12)
    lrs = [noam_lr(s, d, w, decay="linear", max_steps=m) for s in range(1, m + 1)]
    assert lrs[-1] == pytest.approx(eq3(m, d, w) / m, rel=1e-12)  # one m-th of Equation 3 at the last step
    assert all(a > b for a, b in zip(lrs[w - 1:-1], lrs[w:]))  # falls after the warmup
    assert noam_lr(5, d, w, decay="none", max_steps=3) == noam_lr(5, d, w)  # max_steps matters to "linear" only


def test_noam_lr_linear_decay_errors():
    with pytest.raises(ValueError, match="max_steps"):
        noam_lr(11, 256, 400, decay="linear", max_steps=10)
    with pytest.raises(ValueError, match="max_steps"):
        noam_lr(1, 256, 400, decay="linear", max_steps=0)
    with pytest.raises(ValueError, match="none, linear"):
        noam_lr(1, 256, 400, decay="cosine", max_steps=10)


# ---------------------------------------------------------------------------------------------------------
# Label smoothing (Section 5.4)
# ---------------------------------------------------------------------------------------------------------
def test_label_smoothing_hand_computed():
    """V = 4, pad id 0. Position 1: p = (1, 1, 2, 4) / 8, target 3. Position 2: uniform p, target 1.
    Position 3: target = pad (ignored, whatever its logits)."""
    eps = 0.1
    logits = torch.tensor([[[0.0, 0.0, math.log(2), math.log(4)], [0.0, 0.0, 0.0, 0.0], [50.0, -50.0, 3.0, 7.0]]])
    target = torch.tensor([[3, 1, 0]])
    loss, n = label_smoothed_loss(logits, target, eps, pad_id=0)
    nll, _ = label_smoothed_loss(logits, target, 0.0, pad_id=0)
    # NLL: -log(4/8) - log(1/4) = log 2 + log 4 = log 8
    assert n == 2
    assert float(nll) == pytest.approx(math.log(8), rel=1e-6)
    # smoothed: q = 0.9 * onehot + 0.1 / 4; H(q, p) = 0.9 * NLL + 0.1 * mean_v(-log p_v)
    pos1 = 0.9 * math.log(2) + 0.1 * (math.log(8) + math.log(8) + math.log(4) + math.log(2)) / 4
    pos2 = math.log(4)  # uniform p: every term is log 4
    assert float(loss) == pytest.approx(pos1 + pos2, rel=1e-6)
    # independent reference: torch's label-smoothed cross-entropy (same eps / V convention)
    ref = F.cross_entropy(logits.view(-1, 4), target.view(-1), ignore_index=0, label_smoothing=eps, reduction="sum")
    assert float(loss) == pytest.approx(float(ref), rel=1e-6)
    # eps = 0 is plain NLL
    loss0, n0 = label_smoothed_loss(logits, target, 0.0, pad_id=0)
    assert float(loss0) == pytest.approx(math.log(8), rel=1e-6) and int(n0) == 2


def paper_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, eps: float, pad_id: int) -> tuple[float, float, int]:
    """Section 5.4 written out with numpy in float64, position by position: q = (1 - eps) * onehot(y) + eps / V,
    loss = sum over non-pad positions of -sum_v q_v log p_v; nll = sum of -log p_y."""
    x = logits.double().numpy().reshape(-1, logits.shape[-1])
    y = target.numpy().reshape(-1)
    V = x.shape[1]
    loss = nll = 0.0
    n = 0
    for row, t in zip(x, y):
        if t == pad_id:
            continue
        logp = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
        q = np.full(V, eps / V)
        q[t] += 1.0 - eps
        loss += float(-(q * logp).sum())
        nll += float(-logp[t])
        n += 1
    return loss, nll, n


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_pads_ignored_random(eps):
    """Random logits, pads in the middle of a batch: label_smoothed_loss (F.cross_entropy inside) equals the
    paper's smoothed loss computed by hand, with pad positions ignored whatever their logits."""
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11) * 3
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = 0
    target[2, 1:] = 0
    loss, n = label_smoothed_loss(logits, target, eps, pad_id=0)
    nll, _ = label_smoothed_loss(logits, target, 0.0, pad_id=0)
    ref_loss, ref_nll, ref_n = paper_smoothed_loss(logits, target, eps, pad_id=0)
    assert ref_n == 9 and n.dtype == torch.int64 and int(n) == ref_n
    assert float(loss) == pytest.approx(ref_loss, rel=1e-5)
    assert float(nll) == pytest.approx(ref_nll, rel=1e-5)
    assert (float(loss) == pytest.approx(float(nll), rel=1e-6)) == (eps == 0.0)  # smoothing changes the loss
    # changing logits at pad positions changes nothing
    logits2 = logits.clone()
    logits2[target == 0] = 1000.0
    loss2, _ = label_smoothed_loss(logits2, target, eps, pad_id=0)
    nll2, _ = label_smoothed_loss(logits2, target, 0.0, pad_id=0)
    assert float(loss2) == pytest.approx(float(loss), rel=1e-6) and float(nll2) == pytest.approx(float(nll), rel=1e-6)
    # bf16 logits (as under autocast) are computed in float32: the same numbers up to bf16 rounding of the input
    loss_bf, _ = label_smoothed_loss(logits.bfloat16(), target, eps, pad_id=0)
    assert loss_bf.dtype == torch.float32
    assert float(loss_bf) == pytest.approx(paper_smoothed_loss(logits.bfloat16().float(), target, eps, 0)[0], rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pad_id", [0, 57])
def test_label_smoothed_loss_gradient_across_chunks(dtype, pad_id):
    """On a CPU the loss is computed 256 rows at a time (recipe._ChunkedSmoothedCE): over 700 rows (three chunks,
    the last partial) its value and its gradient equal F.cross_entropy's on the float32 logits, pad rows get a zero
    gradient, the gradient has the logits' dtype, and the logits are left as they were (a float32 chunk is a view,
    which the kernel must not overwrite)."""
    torch.manual_seed(1)
    logits = (torch.randn(7, 100, 64) * 4).to(dtype).requires_grad_()
    before = logits.detach().clone()
    target = torch.randint(0, 64, (7, 100))
    target[target == pad_id] = (pad_id + 1) % 64
    target[:, 90:] = pad_id
    target[3] = pad_id
    loss, n = label_smoothed_loss(logits, target, 0.1, pad_id=pad_id)
    (g,) = torch.autograd.grad(loss * 0.5, logits)
    ref_logits = logits.detach().float().requires_grad_()
    ref = F.cross_entropy(ref_logits.reshape(-1, 64), target.reshape(-1), ignore_index=pad_id, label_smoothing=0.1,
                          reduction="sum")
    (ref_g,) = torch.autograd.grad(ref * 0.5, ref_logits)
    assert torch.equal(logits.detach(), before)
    assert int(n) == int((target != pad_id).sum())
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-6)
    assert g.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 4e-3  # bf16 holds the gradient to 2^-8 of its size (<= 0.5 here)
    assert torch.allclose(g.float(), ref_g, atol=tol, rtol=0)
    assert not g[target == pad_id].any() and g[target != pad_id].abs().sum() > 0


def test_label_smoothed_loss_gradient_is_p_minus_q():
    logits = torch.randn(2, 4, 7, requires_grad=True)
    target = torch.tensor([[1, 2, 3, 0], [4, 0, 0, 0]])
    loss, _ = label_smoothed_loss(logits, target, 0.1, pad_id=0)
    loss.backward()
    # the gradient of the smoothed cross-entropy w.r.t. the logits is p - q at non-pad positions, 0 at pads
    p = torch.softmax(logits.detach(), -1)
    q = torch.full_like(p, 0.1 / 7).scatter_(-1, target.unsqueeze(-1), 0.9 + 0.1 / 7)
    expected = torch.where((target != 0).unsqueeze(-1), p - q, torch.zeros_like(p))
    torch.testing.assert_close(logits.grad, expected, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# Runs on the tiny data directory (conftest.tiny_data: the real fixture pairs, split leak-free)
# ---------------------------------------------------------------------------------------------------------
def tiny_tc(data: Path, run: Path, **kw) -> TrainConfig:
    base = dict(data_dir=str(data), run_dir=str(run), direction="en-de", preset="tiny", model_overrides={"dropout": 0.1},
                max_tokens=512, accumulation=1, warmup_steps=20, max_steps=12, valid_every=1000, valid_bleu_sentences=0,
                save_every=1000, keep=5, threads=1, seed=7, token_cache=str(run.parent / "token_cache"))
    base.update(kw)
    return TrainConfig(**base)


def weights(state_dir: Path) -> dict[str, np.ndarray]:
    return np_load_file(str(state_dir / "model.safetensors"))


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_short_run_lowers_loss_on_real_pairs(tiny_data, tmp_path):
    run = tmp_path / "run"
    tc = tiny_tc(tiny_data, run, max_steps=40, valid_every=20, valid_bleu_sentences=2, save_every=20)
    train(tc, log=QUIET)
    recs = read_metrics(run)
    assert [r["step"] for r in recs] == list(range(2, 41, 2))  # a record every valid_every // 10 = 2 steps
    first = recs[0]["train_loss"]
    last = float(np.mean([r["train_loss"] for r in recs[-3:]]))
    # an untrained model sits near log V (uniform over 320 pieces); 40 steps must be clearly below
    assert first > math.log(320) - 1.0
    assert last < first - 1.0, (first, last)
    valid = [r for r in recs if "valid_loss" in r]
    assert [r["step"] for r in valid] == [20, 40]
    assert valid[-1]["valid_loss"] < valid[0]["valid_loss"] + 0.5 and all(np.isfinite(r["valid_loss"]) for r in valid)
    assert all(0.0 <= r["valid_bleu"] <= 100.0 for r in valid)
    # lr follows Equation 3 in the log
    for r in recs:
        assert r["lr"] == pytest.approx(eq3(r["step"], 64, 20), rel=1e-12)
    assert [p.name for p in list_states(run)] == ["step_00000020", "step_00000040"]
    cfg = json.loads((run / "train_config.json").read_text())
    assert cfg["max_steps"] == 40 and cfg["preset"] == "tiny"


def test_linear_decay_run_logs_the_decayed_rate_and_resumes_on_it(tiny_data, tmp_path):
    """``lr_decay="linear"``: every logged rate is Equation 3 times (max_steps - step + 1) / max_steps, also after a
    resume; the setting is stored with the run."""
    run = tmp_path / "run"
    train(tiny_tc(tiny_data, run, max_steps=6, valid_every=10, save_every=3, lr_decay="linear"), log=QUIET)
    cfg = json.loads((run / "train_config.json").read_text())
    assert cfg["lr_decay"] == "linear"
    resumed = tmp_path / "resumed"
    shutil.copytree(run, resumed)
    for f in list_states(resumed)[1:]:
        shutil.rmtree(f)  # keep only step 3's state, then go on from it to 6
    (resumed / "metrics.jsonl").write_text("")
    train(tiny_tc(tiny_data, resumed, max_steps=6, valid_every=10, save_every=3, lr_decay="linear"), resume=True, log=QUIET)
    for r in read_metrics(run) + read_metrics(resumed):
        assert r["lr"] == pytest.approx(eq3(r["step"], 64, 20) * (6 - r["step"] + 1) / 6, rel=1e-12)
    assert [r["step"] for r in read_metrics(resumed)] == [4, 5, 6]


# ---------------------------------------------------------------------------------------------------------
# Keep, averaging, export
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved_run(tiny_data, tmp_path_factory) -> Path:
    """7 steps, a state saved after every step, keep = 3."""
    run = tmp_path_factory.mktemp("keep") / "run"
    train(tiny_tc(tiny_data, run, max_steps=7, save_every=1, keep=3), log=QUIET)
    return run


def test_keep_prunes_to_last_k(saved_run):
    assert [p.name for p in list_states(saved_run)] == ["step_00000005", "step_00000006", "step_00000007"]
    assert sorted(p.name for p in saved_run.iterdir() if p.name.startswith(("step_", ".step_"))) == [
        "step_00000005", "step_00000006", "step_00000007"]
    for p in list_states(saved_run):
        assert json.loads((p / "trainer_state.json").read_text())["step"] == int(p.name.split("_")[1])
    # consecutive states differ (the optimizer really stepped)
    w5, w7 = weights(saved_run / "step_00000005"), weights(saved_run / "step_00000007")
    assert any(not np.array_equal(w5[k], w7[k]) for k in w5)


def _numpy_mean(dirs: list[Path]) -> dict[str, np.ndarray]:
    ws = [weights(d) for d in dirs]
    return {k: np.mean(np.stack([w[k].astype(np.float64) for w in ws]), axis=0) for k in ws[0]}


def test_average_checkpoints_is_arithmetic_mean(saved_run):
    from aiayn.checkpoint import average_checkpoints

    dirs = list_states(saved_run)
    avg = average_checkpoints([d / "model.safetensors" for d in dirs])
    ref = _numpy_mean(dirs)
    assert set(avg) == set(ref)
    for k in ref:
        assert avg[k].dtype == torch.float32
        np.testing.assert_allclose(avg[k].numpy(), ref[k], rtol=1e-6, atol=1e-7)
    # the mean is not any one of the inputs
    k = next(k for k in ref if not np.array_equal(weights(dirs[0])[k], weights(dirs[-1])[k]))
    assert not np.array_equal(avg[k].numpy(), weights(dirs[-1])[k])
    with pytest.raises(ValueError):
        average_checkpoints([])


def test_average_cli_and_export(saved_run, tmp_path):
    from aiayn import Translator
    from aiayn.cli import main

    dirs = list_states(saved_run)
    ref = _numpy_mean(dirs[-2:])
    out32 = tmp_path / "avg32"
    assert main(["average", str(saved_run), str(out32), "--last", "2", "--dtype", "float32"]) == 0
    got = weights(out32)
    for k in ref:
        assert got[k].dtype == np.float32
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-7)
    meta = json.loads((out32 / "config.json").read_text())["meta"]
    assert meta["averaged_states"] == ["step_00000006", "step_00000007"]
    assert meta["direction"] == "en-de" and meta["step"] == 7
    assert "data_mix" not in meta  # trained without --kind-weights: nothing claimed
    assert (out32 / "spm.model").read_bytes() == (saved_run / "spm.model").read_bytes()
    assert (out32 / "metrics.jsonl").is_file()
    # default dtype float16 (the shipped format): the mean rounded to half precision
    out16 = tmp_path / "avg16"
    assert main(["average", str(saved_run), str(out16), "--last", "3"]) == 0
    ref3 = _numpy_mean(dirs)
    got16 = weights(out16)
    for k in ref3:
        assert got16[k].dtype == np.float16
        np.testing.assert_allclose(got16[k].astype(np.float64), ref3[k], rtol=1e-3, atol=1e-6)
    tr = Translator.load(out16, device="cpu")
    assert tr.meta["direction"] == "en-de" and tr.translate("Good morning.", beam_size=2).output_tokens


def test_average_cli_missing_run_exit_2(tmp_path, capsys):
    from aiayn.cli import main

    assert main(["average", str(tmp_path / "nothing"), str(tmp_path / "out")]) == 2
    assert "no saved training state" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# Exact resume
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_resume_continues_exactly(tiny_data, tmp_path):
    """Run A: 12 steps straight. Run B: stopped after 5, resumed to 12. Dropout 0.1, so the restored RNG
    matters; with max_tokens 1024 and accumulation 2 an epoch has about 8 steps, so both runs cross an
    epoch boundary after the interruption (new data order)."""
    kw = dict(max_tokens=1024, accumulation=2, valid_every=10)  # a metrics record every step, validation at 10
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    train(tiny_tc(tiny_data, run_a, max_steps=12, **kw), log=QUIET)
    train(tiny_tc(tiny_data, run_b, max_steps=5, **kw), log=QUIET)
    st_b5 = json.loads((list_states(run_b)[-1] / "trainer_state.json").read_text())
    assert st_b5["step"] == 5
    messages = []
    train(tiny_tc(tiny_data, run_b, max_steps=12, **kw), resume=True, log=messages.append)
    assert any("resumed" in m and "step 5" in m for m in messages)
    a, b = list_states(run_a)[-1], list_states(run_b)[-1]
    assert a.name == b.name == "step_00000012"
    sa, sb = (json.loads((p / "trainer_state.json").read_text()) for p in (a, b))
    assert sa["epoch"] >= 1, "the run should cross an epoch boundary"
    for key in ("step", "epoch", "batch_in_epoch", "tokens"):
        assert sa[key] == sb[key], key
    wa, wb = weights(a), weights(b)
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=1e-6, err_msg=k)
    oa, ob = np_load_file(str(a / "optimizer.safetensors")), np_load_file(str(b / "optimizer.safetensors"))
    for k in oa:
        if k.startswith("exp_avg"):
            np.testing.assert_allclose(ob[k], oa[k], rtol=1e-6, atol=1e-9, err_msg=k)
    # the training losses logged after the interruption are those of the straight run
    la = {r["step"]: r["train_loss"] for r in read_metrics(run_a)}
    lb = {r["step"]: r["train_loss"] for r in read_metrics(run_b)}
    for s in range(6, 13):
        assert lb[s] == pytest.approx(la[s], rel=1e-5, abs=1e-6), s
    # valid_bleu_sentences 0: the validation record has its loss but no BLEU (0.0 would read as a measurement)
    valid = [r for r in read_metrics(run_a) if "valid_loss" in r]
    assert [r["step"] for r in valid] == [10, 12] and not [r for r in valid if "valid_bleu" in r]  # 12: the last step


@pytest.mark.slow
def test_resume_with_a_kind_mix_continues_exactly(tiny_data, tmp_path):
    """With --kind-weights (integer and fractional weights), a run stopped after 5 steps and resumed to 14 (across an epoch boundary) ends at
    the straight run's weights and losses; the mix, its counts (data_mix.json) and the spec (train_config.json)
    are recorded, and the epoch holds the weighted examples."""
    from test_train_pipeline import write_kinds

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    kinds = write_kinds(data)
    kw = dict(max_tokens=1024, accumulation=2, valid_every=10, kind_weights="ding=1,narrative=2,everyday=0.5,ui=1")
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    messages = []
    train(tiny_tc(data, run_a, max_steps=14, **kw), log=messages.append)
    assert any(m.startswith("data mix (--kind-weights ding=1,narrative=2") for m in messages)
    mix = json.loads((run_a / "data_mix.json").read_text())
    assert mix["kind_weights"] == kw["kind_weights"] and set(mix["kinds"]) == set(kinds)
    assert mix["kinds"]["narrative"]["examples"] == 2 * mix["kinds"]["narrative"]["pairs"] > 0
    assert mix["kinds"]["everyday"]["examples"] == mix["kinds"]["everyday"]["pairs"]
    assert 0 < mix["kinds"]["everyday"]["pairs"] < kinds.count("everyday")
    assert json.loads((run_a / "train_config.json").read_text())["kind_weights"] == kw["kind_weights"]
    train(tiny_tc(data, run_b, max_steps=5, **kw), log=QUIET)
    train(tiny_tc(data, run_b, max_steps=14, **kw), resume=True, log=QUIET)
    a, b = list_states(run_a)[-1], list_states(run_b)[-1]
    assert a.name == b.name == "step_00000014"
    sa, sb = (json.loads((p / "trainer_state.json").read_text()) for p in (a, b))
    assert sa["epoch"] >= 1 and all(sa[k] == sb[k] for k in ("step", "epoch", "batch_in_epoch", "tokens"))
    wa, wb = weights(a), weights(b)
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=1e-6, err_msg=k)
    la = {r["step"]: r["train_loss"] for r in read_metrics(run_a)}
    lb = {r["step"]: r["train_loss"] for r in read_metrics(run_b)}
    for s in range(6, 15):
        assert lb[s] == pytest.approx(la[s], rel=1e-5, abs=1e-6), s
    assert json.loads((run_b / "data_mix.json").read_text()) == mix
    from aiayn.training.export import export
    out = export(run_b, tmp_path / "exported", last=2)
    assert json.loads((out / "config.json").read_text())["meta"]["data_mix"] == mix  # the card can say what it saw


def test_resume_after_crash_logs_each_step_once(tiny_data, tmp_path):
    """A crash between saves leaves metrics records past the last state; the resumed run drops them and logs
    those steps again, so metrics.jsonl has every step once, with the straight run's losses."""
    kw = dict(valid_every=10)  # a record every step
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    train(tiny_tc(tiny_data, run_a, max_steps=9, save_every=100, **kw), log=QUIET)
    train(tiny_tc(tiny_data, run_b, max_steps=7, save_every=5, **kw), log=QUIET)
    assert [p.name for p in list_states(run_b)] == ["step_00000005", "step_00000007"]
    shutil.rmtree(list_states(run_b)[-1])  # the "crash" before the final save: records 6, 7 have no state
    assert [r["step"] for r in read_metrics(run_b)] == list(range(1, 8))
    with open(run_b / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 8, "train_lo')  # and a line torn by the crash
    messages = []
    train(tiny_tc(tiny_data, run_b, max_steps=9, save_every=100, **kw), resume=True, log=messages.append)
    assert any("dropped 3 metrics records" in m for m in messages), messages
    rb = read_metrics(run_b)
    assert [r["step"] for r in rb] == list(range(1, 10))
    la = {r["step"]: r["train_loss"] for r in read_metrics(run_a)}
    for r in rb:
        assert r["train_loss"] == pytest.approx(la[r["step"]], rel=1e-5, abs=1e-6), r["step"]


def test_resume_without_state_starts_fresh_and_dropout_matters(tiny_data, tmp_path):
    """Control for the resume test: a different seed (other dropout masks and data order) gives other
    weights, so equality above is not trivially true."""
    run_a, run_c = tmp_path / "a", tmp_path / "c"
    train(tiny_tc(tiny_data, run_a, max_steps=3), resume=True, log=QUIET)  # nothing to resume: fresh start
    assert [p.name for p in list_states(run_a)] == ["step_00000003"]
    tc_c = tiny_tc(tiny_data, run_c, max_steps=3)
    tc_c.seed = 8
    train(tc_c, log=QUIET)
    wa, wc = weights(run_a / "step_00000003"), weights(run_c / "step_00000003")
    assert any(not np.allclose(wa[k], wc[k], atol=1e-6) for k in wa)


# ---------------------------------------------------------------------------------------------------------
# Atomic run states
# ---------------------------------------------------------------------------------------------------------
def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("exc", [OSError("No space left on device"), KeyboardInterrupt()])
def test_failed_save_leaves_no_partial_state(tiny_data, tmp_path, monkeypatch, exc):
    import aiayn.training.state as state_mod
    from aiayn import Transformer, TransformerConfig

    run = tmp_path / "run"
    train(tiny_tc(tiny_data, run, max_steps=2, save_every=1), log=QUIET)
    before = _snapshot(run)
    assert [p.name for p in list_states(run)] == ["step_00000001", "step_00000002"]

    model = Transformer(TransformerConfig.preset("tiny", vocab_size=320, max_len=256))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7, 8]])).sum().backward()
    opt.step()

    def broken_save_file(*a, **k):  # fails after model.safetensors went into the temp dir
        raise exc

    monkeypatch.setattr(state_mod, "save_file", broken_save_file)
    for step in (3, 2):  # a new state, and overwriting an existing one
        with pytest.raises(type(exc)):
            save_state(run, model, opt, {"step": step, "epoch": 0, "batch_in_epoch": step, "wall_time": 0.0, "tokens": 0}, keep=5)
        assert _snapshot(run) == before
        assert sorted(p.name for p in run.iterdir() if p.is_dir()) == ["step_00000001", "step_00000002"]
    monkeypatch.undo()
    # the earlier states still resume
    msgs = []
    train(tiny_tc(tiny_data, run, max_steps=3, save_every=1), resume=True, log=msgs.append)
    assert any("step 2" in m for m in msgs)
    assert [p.name for p in list_states(run)] == ["step_00000001", "step_00000002", "step_00000003"]


def test_half_written_state_dir_is_not_listed(tmp_path):
    run = tmp_path / "run"
    (run / "step_00000009").mkdir(parents=True)  # e.g. a crash of some older writer: no trainer_state.json
    (run / ".step_00000010.abc").mkdir()
    assert list_states(run) == []


# ---------------------------------------------------------------------------------------------------------
# DDP (2 processes, gloo, CPU) = 1 process accumulating the same micro-batches
# ---------------------------------------------------------------------------------------------------------
def test_step_batches_partition_global_batch(tiny_data, monkeypatch):
    """Rank r of W with accumulation a gets the r-th, (r+W)-th ... micro-batch of each group of a*W; the
    ranks' shares together are exactly one process's step with accumulation a*W."""
    import aiayn.training.pipeline as pipeline
    from aiayn.tokenizer import Tokenizer

    tok = Tokenizer.load(tiny_data / "spm.model")
    src, tgt = pipeline.load_split(tiny_data, "train", "en-de")
    s_ids, t_ids = pipeline.encode_pairs(tok, src, tgt, 128, tok.eos_id)
    tc = tiny_tc(tiny_data, tiny_data / "unused", max_tokens=256, accumulation=4)
    single = step_batches(tc, s_ids, t_ids, epoch=3)
    shares = [step_batches(replace(tc, accumulation=2), s_ids, t_ids, epoch=3, rank=rank, world=2) for rank in range(2)]
    # the default rank and world come from torch.distributed (as train() passes them under torchrun)
    monkeypatch.setattr(pipeline, "rank_and_world", lambda: (1, 2))
    assert step_batches(replace(tc, accumulation=2), s_ids, t_ids, epoch=3) == shares[1]
    monkeypatch.undo()
    assert len(single) == len(shares[0]) == len(shares[1]) > 3
    for k, micro in enumerate(single):
        assert len(micro) == 4 and len(shares[0][k]) == len(shares[1][k]) == 2
        assert sorted(map(tuple, shares[0][k] + shares[1][k])) == sorted(map(tuple, micro))
        assert not set(i for b in shares[0][k] for i in b) & set(i for b in shares[1][k] for i in b)
    # every example appears at most once per epoch
    flat = [i for m in single for b in m for i in b]
    assert len(flat) == len(set(flat))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "processes", "auto"])
def test_ddp_two_processes_equal_one_process(tiny_data, tmp_path, launcher):
    """Two ranks with accumulation 1 train the steps of one process with accumulation 2, started by torchrun, by
    ``aiayn train --processes 2`` itself (which shares --threads 2 among them), or by ``aiayn train`` with neither on
    two cores (``--accumulation 2`` is then the whole step's)."""
    if launcher == "auto" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("aiayn train trains as one process on one core")
    steps = 4
    single = tmp_path / "single"
    ddp = tmp_path / "ddp"
    common = dict(max_tokens=256, warmup_steps=4, max_steps=steps, model_overrides={"dropout": 0.0}, save_every=steps,
                  valid_every=10)
    # float32 in both (amp_cpu False): this compares summation orders, and bf16 rounding would swamp the tolerance
    train(tiny_tc(tiny_data, single, accumulation=2, amp_cpu=False, **common), log=QUIET)

    env = dict(os.environ, MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    launch = (["-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(_free_port())] if launcher == "torchrun" else [])
    cmd = [sys.executable, *launch,
           "-m", "aiayn", "train", "--data", str(tiny_data), "--run-dir", str(ddp), "--direction", "en-de",
           "--preset", "tiny", "--set", "dropout=0.0", "--max-tokens", "256",
           "--accumulation", "2" if launcher == "auto" else "1",
           "--warmup-steps", "4", "--max-steps", str(steps), "--valid-every", "10", "--valid-bleu-sentences", "0",
           "--save-every", str(steps), "--keep", "5", "--seed", "7", "--no-amp-cpu",
           "--token-cache", str(tmp_path / "token_cache")]
    cmd += {"torchrun": ["--threads", "1"], "processes": ["--threads", "2", "--processes", "2"], "auto": ["--threads", "2"]}[launcher]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "world 2" in proc.stdout + proc.stderr
    if launcher != "torchrun":
        assert "2 processes of 1 thread(s) each" in proc.stdout
        assert json.loads((ddp / "train_config.json").read_text())["threads"] == 1
        # the same command again: every rank refuses the run that is there, one says why, the exit code is theirs
        again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 2 and again.stderr.count("already holds a training run") == 1, again.stderr[-2000:]
    a, b = list_states(single)[-1], list_states(ddp)[-1]
    assert a.name == b.name == f"step_{steps:08d}"
    sa, sb = (json.loads((p / "trainer_state.json").read_text()) for p in (a, b))
    assert sa["tokens"] == sb["tokens"]  # the same global batches
    wa, wb = weights(a), weights(b)
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=2e-5, err_msg=k)
    # control: the weights moved far more than the tolerance
    from aiayn import Transformer, TransformerConfig

    torch.manual_seed(7)
    init = Transformer(TransformerConfig.preset("tiny", vocab_size=320, max_len=256, dropout=0.0)).state_dict()
    w0 = {k: v.numpy() for k, v in init.items()}
    assert max(float(np.abs(wa[k] - w0[k]).max()) for k in wa) > 1e-2
    # the logged loss is that of the global batch in both (DDP all-reduces it)
    la = [r["train_loss"] for r in read_metrics(single)]
    lb = [r["train_loss"] for r in read_metrics(ddp)]
    assert len(la) == len(lb) == steps
    np.testing.assert_allclose(lb, la, rtol=1e-5)


def _agree_worker(rank: int, init_file: str, out_dir: str) -> None:
    """One rank of :func:`test_ddp_ranks_take_rank_0s_precision_and_threads`: decides differently from the other."""
    import torch.distributed as dist

    from aiayn.training.loop import agree_across_ranks

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        mine = TrainConfig("data", "run", amp_cpu=rank == 0, threads=1 + 2 * rank)  # rank 0: bf16, 1 thread
        agreed = agree_across_ranks(mine, torch.device("cpu"), 2)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps([agreed.amp_cpu, agreed.threads]))
    finally:
        dist.destroy_process_group()


def test_ddp_ranks_take_rank_0s_precision_and_threads(tmp_path):
    """Each rank times its own bf16 matmul and reads its own load; under DDP they must train one way: rank 0's."""
    import torch.multiprocessing as mp

    from aiayn.training.loop import agree_across_ranks

    mp.spawn(_agree_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert got == [[True, 1], [True, 1]]
    alone = TrainConfig("data", "run", amp_cpu=False, threads=3)
    assert agree_across_ranks(alone, torch.device("cpu"), 1) is alone  # one process: nothing to agree on


def test_check_world_keeps_a_runs_steps_across_process_counts():
    from aiayn.training.loop import WorldChangeError, check_world

    check_world({"world": 2}, 3, 6, 1)      # 3 on each of 2 = 6 on 1: the same steps
    check_world({"world": 1}, 6, 3, 2)
    check_world({}, 6, 6, 1)                # a state from before the world was recorded: 1
    check_world({"world": 2}, 3, 1, 2)      # the same world: a changed accumulation is a recorded recipe change
    check_world({"world": 2}, 0, 1, 1)      # derived accumulation: not checked
    with pytest.raises(WorldChangeError, match=r"6 micro-batches \(3 on each of 2 process\(es\)\).*--accumulation 6"):
        check_world({"world": 2}, 3, 3, 1)
    with pytest.raises(WorldChangeError, match="a number of processes that divides 3"):
        check_world({"world": 1}, 3, 1, 2)
    # the state's own accumulation wins over the stored configuration, which rank 0 of a resume rewrites (a rank
    # that read it after rank 0 had written "3" refused a run saved by one process of 6 as 3 on 2)
    check_world({"world": 1, "accumulation": 6}, 3, 3, 2)
    with pytest.raises(WorldChangeError, match=r"6 micro-batches \(6 on each of 1"):
        check_world({"world": 1, "accumulation": 6}, 3, 6, 2)


def test_a_state_records_its_world_and_a_resume_on_another_is_refused(tiny_data, tmp_path):
    """A run's states say how many processes saved them; resuming under another count with micro-batches that
    change the step is refused (nothing trained), and resuming with the accumulation that keeps it goes on."""
    from aiayn.training.loop import WorldChangeError

    run = tmp_path / "run"
    tc = tiny_tc(tiny_data, run, max_tokens=256, max_steps=2, save_every=2, valid_every=10, accumulation=1)
    train(tc, log=QUIET)
    last = list_states(run)[-1]
    state = json.loads((last / "trainer_state.json").read_text())
    assert state["world"] == 1
    state["world"] = 2  # as if two processes had saved it
    (last / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(WorldChangeError, match="--accumulation 2"):
        train(replace(tc, max_steps=4), resume=True, log=QUIET)
    assert [s.name for s in list_states(run)] == [last.name]
    train(replace(tc, max_steps=4, accumulation=2), resume=True, log=QUIET)
    after = json.loads((list_states(run)[-1] / "trainer_state.json").read_text())
    assert after["step"] == 4 and after["world"] == 1


def test_upsample_sentences_repeats_only_full_sentence_pairs():
    from aiayn.training.pipeline import upsample_sentences

    src = ["I have no time.", "house", "Where is the station?", "to be late"]
    tgt = ["Ich habe keine Zeit.", "Haus", "bahnhof", "sich verspäten"]  # third: target is no sentence
    s3, t3 = upsample_sentences(src, tgt, 3)
    assert s3.count("I have no time.") == 3 and t3.count("Ich habe keine Zeit.") == 3
    assert s3.count("Where is the station?") == 1  # only pairs whose two sides are sentences
    assert s3.count("house") == 1 and s3.count("to be late") == 1
    assert list(zip(s3, t3)).count(("I have no time.", "Ich habe keine Zeit.")) == 3  # pairs stay aligned
    assert upsample_sentences(src, tgt, 1) == (src, tgt)
    with pytest.raises(ValueError):
        upsample_sentences(src, tgt, 0)


def test_collate_pads_and_shifts_the_decoder_input():
    from aiayn.model.config import TransformerConfig
    from aiayn.training.pipeline import collate

    cfg = TransformerConfig.preset("tiny", vocab_size=50)
    P, BOS = cfg.pad_id, cfg.bos_id
    src_ids = [[5, 6, 3], [7, 3], [8, 9, 10, 11, 3]]
    tgt_ids = [[12, 3], [13, 14, 15, 3], [16, 3]]
    s, d, t = collate([2, 0, 1], src_ids, tgt_ids, cfg)
    assert s.dtype == d.dtype == t.dtype == torch.int64
    assert s.tolist() == [[8, 9, 10, 11, 3], [5, 6, 3, P, P], [7, 3, P, P, P]]
    assert t.tolist() == [[16, 3, P, P], [12, 3, P, P], [13, 14, 15, 3]]
    assert d.tolist() == [[BOS, 16, P, P], [BOS, 12, P, P], [BOS, 13, 14, 15]]  # BOS + y[:-1], never the final EOS


def test_importing_the_recipe_does_not_load_the_loop():
    """The app's lessons import aiayn.training.recipe; the package must not pull in the loop (sacreBLEU, the
    tokenizer, the data pipeline) with it. (tqdm is not checked: torch itself imports it.)"""
    code = ("import sys, aiayn.training.recipe; "
            "print(sorted(m for m in ('aiayn.training.loop', 'aiayn.training.pipeline', 'aiayn.training.state', "
            "'aiayn.training.cli', 'aiayn.training.export', 'sacrebleu') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------------------
# bf16 autocast on CPU (--amp-cpu)
# ---------------------------------------------------------------------------------------------------------
def test_autocast_for_picks_bf16_only_where_asked():
    from aiayn.training.loop import autocast_for

    cpu = torch.device("cpu")
    x = torch.randn(4, 8)
    w = torch.randn(8, 3)
    with autocast_for(TrainConfig("", "", amp_cpu=True), cpu):
        assert (x @ w).dtype == torch.bfloat16
    for tc in (TrainConfig("", "", amp_cpu=False), TrainConfig("", "", amp_cpu=True, amp=False)):  # --no-amp-cpu, --no-amp wins
        with autocast_for(tc, cpu):
            assert (x @ w).dtype == torch.float32


@pytest.mark.parametrize("pays_off", [False, True])
def test_the_default_cpu_precision_follows_the_measurement(monkeypatch, pays_off):
    """amp_cpu None (the default): bf16 exactly where cpu_bf16_pays_off says bf16 matmuls are faster here."""
    from aiayn.training import loop

    monkeypatch.setattr(loop, "cpu_bf16_pays_off", lambda *a, **k: pays_off)
    tc = TrainConfig("", "")
    assert tc.amp_cpu is None
    with loop.autocast_for(tc, torch.device("cpu")):
        assert (torch.randn(4, 8) @ torch.randn(8, 3)).dtype == (torch.bfloat16 if pays_off else torch.float32)
    assert loop.resolve_amp_cpu(tc, torch.device("cpu")).amp_cpu is pays_off
    assert loop.resolve_amp_cpu(TrainConfig("", "", amp_cpu=not pays_off), torch.device("cpu")).amp_cpu is (not pays_off)


def test_cpu_bf16_pays_off_needs_native_bf16(monkeypatch):
    from aiayn.training import loop

    loop.cpu_bf16_pays_off.cache_clear()
    rng = torch.get_rng_state()
    assert isinstance(loop.cpu_bf16_pays_off(8, 16, 32, 1), bool)
    assert torch.equal(torch.get_rng_state(), rng)  # the timing draws nothing from the run's random stream
    loop.cpu_bf16_pays_off.cache_clear()
    monkeypatch.setattr(loop, "cpu_bf16_supported", lambda: False)
    try:
        assert loop.cpu_bf16_pays_off(8, 16, 32, 1) is False
    finally:
        loop.cpu_bf16_pays_off.cache_clear()


def test_a_run_stores_its_precision_and_a_resume_keeps_it(tiny_data, tmp_path, monkeypatch):
    """The default precision is decided once, stored in train_config.json, and a resume (even where the
    measurement would now say otherwise) keeps it: the resumed steps equal those of the uninterrupted run."""
    from aiayn.training import loop

    monkeypatch.setattr(loop, "cpu_bf16_pays_off", lambda *a, **k: True)
    full, part = tmp_path / "full", tmp_path / "part"
    train(tiny_tc(tiny_data, full, max_steps=6, save_every=3, valid_every=10), log=QUIET)
    train(tiny_tc(tiny_data, part, max_steps=3, save_every=3, valid_every=10), log=QUIET)
    assert json.loads((part / "train_config.json").read_text())["amp_cpu"] is True
    monkeypatch.setattr(loop, "cpu_bf16_pays_off", lambda *a, **k: False)
    train(tiny_tc(tiny_data, part, max_steps=6, save_every=3, valid_every=10), resume=True, log=QUIET)
    changes = [json.loads(ln) for ln in (part / "config_changes.jsonl").read_text().splitlines()]
    assert [sorted(c["changed"]) for c in changes] == [["max_steps"]]  # the precision is not among them
    wa, wb = weights(list_states(full)[-1]), weights(list_states(part)[-1])
    for k in wa:
        np.testing.assert_array_equal(wb[k], wa[k], err_msg=k)


def test_auto_threads_leave_room_for_the_load_already_running():
    from aiayn.training.loop import auto_threads

    assert [auto_threads(2, load) for load in (0.0, 1.0, 1.4, 1.7, 2.0, 12.0)] == [2, 2, 2, 1, 1, 1]
    assert auto_threads(16, 4.0) == 13 and auto_threads(16, 40.0) == 1 and auto_threads(4, 0.0) == 4


def test_threads_0_is_decided_once_and_kept_by_a_resume(tiny_data, tmp_path, monkeypatch):
    from aiayn.training import loop

    monkeypatch.setattr(loop, "auto_threads", lambda *a, **k: 1)
    run = tmp_path / "run"
    before = torch.get_num_threads()
    try:
        train(tiny_tc(tiny_data, run, threads=0, max_steps=2, save_every=2, valid_every=10), log=QUIET)
        assert json.loads((run / "train_config.json").read_text())["threads"] == 1
        monkeypatch.setattr(loop, "auto_threads", lambda *a, **k: 2)
        train(tiny_tc(tiny_data, run, threads=0, max_steps=3, save_every=3, valid_every=10), resume=True, log=QUIET)
        assert torch.get_num_threads() == 1  # the stored decision, not today's load
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("impl", ["fused", "foreach"])
def test_adam_implementations_make_the_same_update(impl):
    """make_optimizer's fused and foreach Adam against PyTorch's per-tensor loop: same update rule, three steps."""
    from aiayn import Transformer, TransformerConfig
    from aiayn.training.loop import make_optimizer

    torch.manual_seed(0)
    cfg = TransformerConfig.preset("tiny", vocab_size=50, dropout=0.0)
    models = {k: Transformer(cfg) for k in ("loop", impl)}
    models[impl].load_state_dict(models["loop"].state_dict())
    init = {n: t.clone() for n, t in models["loop"].state_dict().items()}
    # eps 1e-3, not the paper's 1e-9: W^K's bias has no true gradient (softmax ignores a shift), and Adam at eps 1e-9
    # would blow its rounding noise, which differs between implementations, up to full-size steps
    opts = {k: make_optimizer(m, TrainConfig("", "", adam_impl=k, adam_eps=1e-3)) for k, m in models.items()}
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 5))
    for _ in range(3):
        for k, m in models.items():
            opts[k].zero_grad()
            for g in opts[k].param_groups:
                g["lr"] = 1e-2
            m(src, tgt).float().square().mean().backward()
            opts[k].step()
    a, b = models["loop"].state_dict(), models[impl].state_dict()
    assert max(float((a[n] - init[n]).abs().max()) for n in a) > 1e-3  # the steps moved the weights
    for n in a:
        torch.testing.assert_close(b[n], a[n], rtol=1e-5, atol=1e-6, msg=n)
    with pytest.raises(ValueError, match="adam_impl"):
        make_optimizer(models["loop"], TrainConfig("", "", adam_impl="sgd"))


def test_batch_widths_are_rounded_only_where_it_pays():
    from aiayn.training.loop import pad_multiple_for

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert pad_multiple_for(TrainConfig("", ""), cpu) == 1  # eager CPU: padding is only lost work
    assert pad_multiple_for(TrainConfig("", "", compile=True), cpu) == 8
    assert pad_multiple_for(TrainConfig("", ""), cuda) == 8
    assert pad_multiple_for(TrainConfig("", "", pad_multiple=4), cpu) == 4


def test_amp_cpu_run_trains_in_bf16_and_keeps_float32_state(tiny_data, tmp_path):
    """The same 12 steps with and without --amp-cpu: both lower the loss, the saved weights stay float32, and
    the weights differ (bf16 matmuls round differently), so the flag really reaches the forward pass."""
    runs = {}
    for amp_cpu in (False, True):
        run = tmp_path / f"amp{int(amp_cpu)}"
        train(tiny_tc(tiny_data, run, max_steps=12, valid_every=10, save_every=12, amp_cpu=amp_cpu), log=QUIET)
        recs = read_metrics(run)
        assert recs[-1]["train_loss"] < recs[0]["train_loss"] - 0.3, (amp_cpu, recs[0], recs[-1])
        runs[amp_cpu] = weights(list_states(run)[-1])
    assert all(v.dtype == np.float32 for v in runs[True].values())
    diff = max(float(np.abs(runs[True][k] - runs[False][k]).max()) for k in runs[False])
    assert diff > 1e-4, diff


def test_resume_with_other_flags_is_recorded_and_reaches_the_card(tiny_data, tmp_path):
    """Resuming with another data mix is allowed but recorded: config_changes.jsonl, train_config.json updated,
    the export's meta and the model card say what changed at which step; an unchanged resume records nothing."""
    from aiayn.checkpoint import read_config
    from aiayn.evaluation.modelcard import render_card
    from aiayn.training.export import export
    from aiayn.training.state import read_config_changes

    run = tmp_path / "run"
    train(tiny_tc(tiny_data, run, max_steps=4, save_every=2), log=QUIET)
    assert read_config_changes(run) == []
    messages = []
    train(tiny_tc(tiny_data, run, max_steps=6, save_every=2, upsample_sentences=2, keep=4), resume=True, log=messages.append)
    assert read_config_changes(run) == [{"step": 4, "changed": {"max_steps": [4, 6], "keep": [5, 4], "upsample_sentences": [1, 2]}}]
    assert any("upsample_sentences 1 -> 2" in m for m in messages), messages
    assert json.loads((run / "train_config.json").read_text())["upsample_sentences"] == 2
    train(tiny_tc(tiny_data, run, max_steps=6, save_every=2, upsample_sentences=2, keep=4), resume=True, log=QUIET)
    assert len(read_config_changes(run)) == 1  # same flags again: nothing new
    ckpt = export(run, tmp_path / "ckpt", last=2)
    meta = read_config(ckpt)["meta"]
    assert meta["config_changes"][0]["step"] == 4 and meta["step"] == 6
    text = render_card(ckpt, None, None, [], "cpu")
    assert "from step 4: upsample_sentences 1 -> 2" in text
    assert "full-sentence pairs repeated 2 times" in text
    assert "keep" not in text.split("Changed when the run was resumed")[1].split("\n")[0]  # bookkeeping left out


# ---------------------------------------------------------------------------------------------------------
# The command line: --resume keeps the run's recipe; a fresh start never overwrites a run
# ---------------------------------------------------------------------------------------------------------
def test_resolve_config_keeps_the_stored_recipe_and_applies_only_given_flags():
    from dataclasses import asdict

    from aiayn.training.cli import resolve_config

    stored = asdict(TrainConfig("/data/a", "/runs/x", direction="de-en", preset="tiny", model_overrides={"d_model": 64, "dropout": 0.1},
                                warmup_steps=400, lr_scale=0.4, accumulation=1, amp_cpu=True, upsample_sentences=8))
    stored = json.loads(json.dumps(stored))  # as read back from train_config.json (tuples become lists)
    none = {k: None for k in asdict(TrainConfig("", ""))}
    tc = resolve_config({**none, "run_dir": "/runs/x", "max_steps": 50, "model_overrides": {"dropout": 0.2}}, stored)
    assert (tc.warmup_steps, tc.lr_scale, tc.accumulation, tc.amp_cpu, tc.upsample_sentences) == (400, 0.4, 1, True, 8)
    assert tc.direction == "de-en" and tc.data_dir == "/data/a" and tc.max_steps == 50
    assert tc.model_overrides == {"d_model": 64, "dropout": 0.2}  # merged key by key
    assert tc.adam_betas == (0.9, 0.98)
    # a flag given explicitly wins, even when it equals the class default
    assert resolve_config({**none, "run_dir": "/runs/x", "amp_cpu": False, "warmup_steps": 4000}, stored).amp_cpu is False
    # without a stored run: the class defaults
    fresh = resolve_config({**none, "run_dir": "/runs/y", "data_dir": "/data/b"}, None)
    assert fresh == TrainConfig("/data/b", "/runs/y")
    with pytest.raises(ValueError, match="direction 'de-en'.*cannot be resumed with direction 'en-de'"):
        resolve_config({**none, "run_dir": "/runs/x", "direction": "en-de"}, stored)
    with pytest.raises(ValueError, match="no data directory"):
        resolve_config({**none, "run_dir": "/runs/y"}, None)
    assert resolve_config({**none, "run_dir": "/runs/x", "lr_decay": "linear"}, stored).lr_decay == "linear"
    with pytest.raises(ValueError, match="--lr-decay must be one of none, linear, got 'cosine'"):
        resolve_config({**none, "run_dir": "/runs/x", "lr_decay": "cosine"}, stored)


def test_cli_resume_continues_the_run_recipe_and_a_fresh_start_is_refused(tiny_data, tmp_path, capsys):
    from aiayn.training.cli import cli_main
    from aiayn.training.state import read_config_changes

    run = tmp_path / "run"
    first = ["--data", str(tiny_data), "--run", str(run), "--preset", "tiny", "--set", "dropout=0.1", "--max-tokens", "512",
             "--accumulation", "1", "--warmup-steps", "20", "--lr-scale", "0.5", "--max-steps", "3", "--save-every", "3",
             "--valid-every", "10", "--valid-bleu-sentences", "0", "--threads", "1", "--seed", "7", "--upsample-sentences", "2",
             "--token-cache", str(tmp_path / "token_cache")]
    assert cli_main(first) == 0
    stored = json.loads((run / "train_config.json").read_text())
    # resume naming only the new step limit: the recipe (rate, warmup, data mix, model) is the run's own
    assert cli_main(["--run", str(run), "--resume", "--max-steps", "5", "--save-every", "5"]) == 0
    after = json.loads((run / "train_config.json").read_text())
    assert {k: v for k, v in after.items() if after[k] != stored[k]} == {"max_steps": 5, "save_every": 5}
    assert read_config_changes(run) == [{"step": 3, "changed": {"max_steps": [3, 5], "save_every": [3, 5]}}]
    recs = read_metrics(run)
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5]
    assert recs[-1]["lr"] == pytest.approx(0.5 * eq3(5, 64, 20), rel=1e-12)  # lr_scale 0.5 and warmup 20 kept
    # a fresh start over the run is refused with a message, and nothing of the run changes
    before = _snapshot(run)
    assert cli_main(first) == 2
    assert "already holds a training run" in capsys.readouterr().err
    assert _snapshot(run) == before
    # resuming in another direction is refused before anything is touched
    with pytest.raises(SystemExit):
        cli_main(["--run", str(run), "--resume", "--direction", "de-en"])
    assert "cannot be resumed with direction" in capsys.readouterr().err
    assert _snapshot(run) == before


def test_cli_processes_starts_the_ranks_itself_and_refuses_counts_it_cannot_start(tmp_path, monkeypatch, capsys):
    """``aiayn train --processes N`` runs the same command as N ranks (each with its share of --threads, tcmalloc
    where installed); a count below 1, or one that disagrees with a launcher's WORLD_SIZE, is refused before
    anything starts."""
    import aiayn.training.continuous as continuous
    from aiayn.training.cli import cli_main

    started: list = []

    def fake_child(cmd, timeout_s, env=None, processes=1, who=""):
        started.append((cmd, timeout_s, env, processes, who))
        return 5

    monkeypatch.setattr(continuous, "_run_child", fake_child)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    base = ["--data", str(tmp_path / "data"), "--run", str(tmp_path / "run"), "--max-steps", "3"]
    assert cli_main(base + ["--processes", "2", "--threads", "4"]) == 5  # the ranks' exit code
    [(cmd, timeout_s, env, processes, who)] = started
    assert processes == 2 and who == "aiayn train" and timeout_s == float("inf")
    assert cmd[1:4] == ["-m", "aiayn", "train"] and cmd[-2:] == ["--threads", "2"]
    assert cmd[4:-2] == base + ["--processes", "2", "--threads", "4"]  # the ranks see WORLD_SIZE and do not relaunch
    assert "2 processes of 2 thread(s) each" in capsys.readouterr().out
    assert not (tmp_path / "run").exists()
    for argv, env_world, message in ((["--processes", "0"], None, "--processes must be at least 1"),
                                     (["--processes", "3"], "2", "a launcher that started 2 processes")):
        if env_world:
            monkeypatch.setenv("WORLD_SIZE", env_world)
        with pytest.raises(SystemExit):
            cli_main(base + argv)
        assert message in capsys.readouterr().err
    assert len(started) == 1 and not (tmp_path / "run").exists()


def test_auto_processes_is_two_only_on_a_cpu_with_two_cores_and_threads():
    from aiayn.training.cli import auto_processes

    assert auto_processes(cores=2, cuda=False) == 2
    assert auto_processes(threads=0, cores=16, cuda=False) == 2  # more cores: threads of the two, not more ranks
    assert auto_processes(threads=4, cores=16, cuda=False) == 2
    for kwargs in (dict(cores=1, cuda=False), dict(cores=8, cuda=True), dict(threads=1, cores=8, cuda=False),
                   dict(compiled=True, cores=8, cuda=False)):
        assert auto_processes(**kwargs) == 1, kwargs


@pytest.fixture
def two_cpu_cores(monkeypatch):
    """This process sees two usable cores and no CUDA, as on the CI machine, and its ranks only record how they
    were started (``continuous._run_child``); ``started`` lists ``(cmd, processes)``, ``trained`` the
    configurations ``aiayn train`` trained in this process."""
    import aiayn.training.cli as T
    import aiayn.training.continuous as continuous

    started, trained = [], []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(continuous, "_run_child", lambda cmd, timeout_s, env=None, processes=1, who="": started.append((cmd, processes)) or 0)
    monkeypatch.setattr(T, "train", lambda tc, resume=False: trained.append(tc) or Path(tc.run_dir))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    return started, trained


def _fake_state(run: Path, step: int, world: int, accumulation: int) -> None:
    state = run / f"step_{step:08d}"
    state.mkdir(parents=True)
    (state / "trainer_state.json").write_text(json.dumps({"step": step, "world": world, "accumulation": accumulation}))
    (run / "train_config.json").write_text(json.dumps({"data_dir": str(run), "accumulation": accumulation}))


def test_cli_trains_as_two_processes_by_default_with_the_steps_of_one(tmp_path, two_cpu_cores, capsys):
    """Without --processes, a CPU with two cores trains as two ranks, --accumulation counting the whole step (each
    rank takes half); a step two ranks cannot share, one thread, or a resumed run's steps decide it otherwise."""
    from aiayn.training.cli import cli_main

    started, trained = two_cpu_cores
    base = ["--data", str(tmp_path / "data"), "--run", str(tmp_path / "run"), "--max-steps", "3"]
    assert cli_main(base + ["--accumulation", "6"]) == 0
    [(cmd, processes)] = started
    assert processes == 2 and not trained
    # argparse keeps the last of a repeated flag: the ranks take 2 processes (their WORLD_SIZE) and 3 micro-batches each
    assert cmd[4:] == base + ["--accumulation", "6", "--processes", "2", "--accumulation", "3", "--threads", "1"]
    assert "2 processes of 1 thread(s) each" in capsys.readouterr().out
    # 7 micro-batches cannot be shared: one process trains them, and says why
    assert cli_main(base + ["--accumulation", "7"]) == 0
    assert len(started) == 1 and [tc.accumulation for tc in trained] == [7]
    assert "one process (--accumulation of 7 micro-batches a step cannot be shared by 2 processes" in capsys.readouterr().out
    # --threads 1 is one core: one process; --processes 1 says so too
    assert cli_main(base + ["--accumulation", "6", "--threads", "1"]) == 0
    assert cli_main(base + ["--accumulation", "6", "--processes", "1"]) == 0
    assert len(started) == 1 and [tc.accumulation for tc in trained] == [7, 6, 6]
    # accumulation 0 (from --tokens-per-step) is rounded to the world by the loop: nothing is passed
    assert cli_main(base) == 0
    assert started[-1][0][4:] == base + ["--processes", "2", "--threads", "1"]


def test_cli_resumes_by_default_with_the_steps_of_the_last_state(tmp_path, two_cpu_cores, capsys):
    from aiayn.training.cli import cli_main

    started, trained = two_cpu_cores
    two, one = tmp_path / "two", tmp_path / "one"
    _fake_state(two, 50, world=2, accumulation=3)  # saved by two ranks of 3 micro-batches
    _fake_state(one, 50, world=1, accumulation=5)  # saved by one process of 5
    assert cli_main(["--run", str(two), "--resume"]) == 0
    # the same world: the ranks keep the stored 3 micro-batches each
    assert started[-1][0][4:] == ["--run", str(two), "--resume", "--processes", "2", "--threads", "1"]
    assert cli_main(["--run", str(two), "--resume", "--threads", "1"]) == 0  # one core: 6 micro-batches in one process
    assert cli_main(["--run", str(one), "--resume"]) == 0  # 5 cannot be shared by two: one process, as saved
    assert len(started) == 1 and [tc.accumulation for tc in trained] == [6, 5]
    # a damaged last state is a message, not a traceback
    (two / "step_00000050" / "trainer_state.json").write_text("{")
    with pytest.raises(SystemExit):
        cli_main(["--run", str(two), "--resume"])
    assert "cannot resume" in capsys.readouterr().err


@pytest.mark.parametrize("content", ['{"max_steps": 5', "[1, 2]"])
def test_cli_resume_with_a_damaged_train_config_is_a_message(tmp_path, capsys, content):
    from aiayn.training.cli import cli_main

    run = tmp_path / "run"
    run.mkdir()
    (run / "train_config.json").write_text(content)
    with pytest.raises(SystemExit) as exc:
        cli_main(["--run", str(run), "--resume"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and "train_config.json" in err and "Traceback" not in err
    assert (run / "train_config.json").read_text() == content  # left as it was


# ---------------------------------------------------------------------------------------------------------
# Warm start (--init-from): weights only, from a run of either direction
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def en_de_parent(tiny_data, tmp_path_factory) -> Path:
    """A 3-step en-de run: the parent a de-en child is warm-started from."""
    run = tmp_path_factory.mktemp("parent") / "run"
    train(tiny_tc(tiny_data, run, max_steps=3, save_every=3), log=QUIET)
    return run


@pytest.mark.parametrize("source", ["run", "state", "checkpoint"])
def test_init_from_copies_the_parent_weights_and_starts_a_fresh_schedule(tiny_data, en_de_parent, tmp_path, source):
    from aiayn.training.export import export

    parent_state = list_states(en_de_parent)[-1]
    if source == "run":
        init, expected = en_de_parent, weights(parent_state)
    elif source == "state":
        init, expected = parent_state, weights(parent_state)
    else:  # an exported fp16 checkpoint: the child starts from the fp16 values
        init = export(en_de_parent, tmp_path / "ckpt", last=1, dtype="float16")
        expected = {k: v.astype(np.float32) for k, v in weights(init).items()}
    # lr_scale 0: Adam's update is exactly zero, so the child's first state holds its initial weights
    child = tmp_path / "child"
    train(tiny_tc(tiny_data, child, direction="de-en", lr_scale=0.0, max_steps=1, save_every=1, init_from=str(init)), log=QUIET)
    got = weights(list_states(child)[-1])
    assert set(got) == set(expected)
    assert all(np.array_equal(got[k], expected[k]) for k in expected)
    assert json.loads((list_states(child)[-1] / "trainer_state.json").read_text())["step"] == 1  # fresh schedule
    cfg = json.loads((child / "train_config.json").read_text())
    assert cfg["init_from"] == str(init) and cfg["direction"] == "de-en"
    # control: the same child without --init-from starts elsewhere (so the check above can fail)
    scratch = tmp_path / "scratch"
    train(tiny_tc(tiny_data, scratch, direction="de-en", lr_scale=0.0, max_steps=1, save_every=1), log=QUIET)
    assert any(not np.array_equal(weights(list_states(scratch)[-1])[k], expected[k]) for k in expected)


def test_init_from_refuses_another_vocabulary_shape_or_nothing(tiny_data, en_de_parent, tmp_path, capsys):
    from aiayn.training.cli import cli_main

    other_vocab = tmp_path / "other_vocab"
    shutil.copytree(en_de_parent, other_vocab)
    (other_vocab / "spm.model").write_bytes(b"another vocabulary")
    other_shape = tmp_path / "other_shape"
    train(tiny_tc(tiny_data, other_shape, max_steps=1, save_every=1, model_overrides={"d_ff": 96}), log=QUIET)
    base = ["--data", str(tiny_data), "--preset", "tiny", "--direction", "de-en", "--max-steps", "1", "--threads", "1",
            "--valid-bleu-sentences", "0"]
    for n, (init, message) in enumerate([(other_vocab, "vocabulary"), (other_shape, "do not fit"),
                                         (tmp_path / "missing", "no model.safetensors")]):
        child = tmp_path / f"child{n}"
        assert cli_main(base + ["--run", str(child), "--init-from", str(init)]) == 2
        err = capsys.readouterr().err
        assert message in err and str(init) in err and "Traceback" not in err
        assert not list_states(child) and not (child / "train_config.json").exists()
    # a run that has states continues from its own weights: --init-from with --resume is refused, untouched
    before = _snapshot(en_de_parent)
    with pytest.raises(SystemExit) as exc:
        cli_main(["--run", str(en_de_parent), "--resume", "--init-from", str(other_shape)])
    assert exc.value.code == 2 and "--init-from starts a new run" in capsys.readouterr().err
    assert _snapshot(en_de_parent) == before


def test_stack_layers_copies_layer_j_mod_n_and_keeps_the_rest():
    """Progressive stacking (Gong et al. 2019): layer j of the deep stack is layer j mod N of the shallow one."""
    from aiayn import Transformer, TransformerConfig
    from aiayn.training.stacking import count_layers, stack_layers

    torch.manual_seed(0)
    shallow = Transformer(TransformerConfig.preset("tiny", vocab_size=40, n_layers=2)).state_dict()
    deep = stack_layers(shallow, 6)
    assert count_layers(deep) == {"encoder_layers": 6, "decoder_layers": 6}
    assert set(deep) == set(Transformer(TransformerConfig.preset("tiny", vocab_size=40, n_layers=6)).state_dict())
    for key, value in deep.items():
        stack, _, rest = key.partition("_layers.")
        if not rest:  # embeddings, output projection: the same tensors
            assert value is shallow[key]
            continue
        j, name = rest.split(".", 1)
        source = shallow[f"{stack}_layers.{int(j) % 2}.{name}"]
        assert torch.equal(value, source) and value is not source  # a copy: training the copies apart is possible
    # layers 0 and 1 differ, so a copy from the wrong layer would show above
    assert not torch.equal(shallow["encoder_layers.0.ffn.w_1.weight"], shallow["encoder_layers.1.ffn.w_1.weight"])


@pytest.mark.parametrize("n_layers, message", [(3, "multiple of 2"), (1, "multiple of 2"), (0, "multiple of 2")])
def test_stack_layers_refuses_a_depth_that_is_not_a_multiple(n_layers, message):
    from aiayn import Transformer, TransformerConfig
    from aiayn.training.stacking import stack_layers

    shallow = Transformer(TransformerConfig.preset("tiny", vocab_size=40, n_layers=2)).state_dict()
    with pytest.raises(ValueError, match=message):
        stack_layers(shallow, n_layers)
    uneven = {k: v for k, v in shallow.items() if not k.startswith("decoder_layers.1.")}
    with pytest.raises(ValueError, match="same depth"):
        stack_layers(uneven, 4)
    gap = {k: v for k, v in shallow.items() if not k.startswith("encoder_layers.0.")}
    with pytest.raises(ValueError, match="not 0..0"):
        stack_layers(gap, 4)


def test_init_stack_starts_a_deeper_run_from_the_stacked_parent(tiny_data, en_de_parent, tmp_path, capsys):
    """``--init-stack``: the child's first state holds the parent's layers stacked (lr_scale 0: Adam moves nothing);
    without it the deeper child cannot start from the shallower parent; without --init-from it is refused."""
    from aiayn.training.cli import cli_main
    from aiayn.training.stacking import stack_layers

    parent = {k: torch.from_numpy(v) for k, v in weights(list_states(en_de_parent)[-1]).items()}
    child = tmp_path / "child"
    train(tiny_tc(tiny_data, child, lr_scale=0.0, max_steps=1, save_every=1, init_from=str(en_de_parent),
                  init_stack=True, model_overrides={"dropout": 0.1, "n_layers": 4}), log=QUIET)
    got = weights(list_states(child)[-1])
    expected = stack_layers(parent, 4)
    assert set(got) == set(expected) and all(np.array_equal(got[k], expected[k].numpy()) for k in expected)
    assert json.loads((child / "train_config.json").read_text())["init_stack"] is True
    base = ["--data", str(tiny_data), "--preset", "tiny", "--max-steps", "1", "--threads", "1", "--valid-bleu-sentences", "0",
            "--set", "n_layers=4"]
    assert cli_main(base + ["--run", str(tmp_path / "plain"), "--init-from", str(en_de_parent)]) == 2
    assert "do not fit" in capsys.readouterr().err
    assert cli_main(base[:-1] + ["n_layers=3", "--run", str(tmp_path / "odd"), "--init-from", str(en_de_parent),
                                 "--init-stack"]) == 2
    err = capsys.readouterr().err
    assert "--init-stack" in err and "multiple of 2" in err and "Traceback" not in err
    assert not (tmp_path / "odd" / "train_config.json").exists()
    with pytest.raises(SystemExit) as exc:
        cli_main(base + ["--run", str(tmp_path / "alone"), "--init-stack"])
    assert exc.value.code == 2 and "give --init-from" in capsys.readouterr().err


def test_cli_reports_only_its_own_setup_errors(tmp_path, monkeypatch):
    """A bad --init-from is a message (above); any other error inside training keeps its traceback."""
    import aiayn.training.cli as T

    def broken(tc, resume=False):
        raise ValueError("a bug deep inside training")

    monkeypatch.setattr(T, "train", broken)
    with pytest.raises(ValueError, match="a bug deep inside training"):
        T.cli_main(["--data", str(tmp_path), "--run", str(tmp_path / "run"), "--processes", "1"])


def test_a_step_reads_nothing_back_from_the_device(tiny_data, tmp_path, monkeypatch):
    """The loop reads a tensor's value (``.item()``, ``float()``, ``int()``, ``bool()``) only when it writes a
    metrics record: 12 steps with a record every 4 steps give exactly 3 reads in ``train`` and its step functions (on a GPU each read
    would wait for the queued work). Before the loader there were 2 reads per step (``n_tok.item()`` and
    ``float(loss)`` per micro-batch)."""
    import aiayn.training.loop as loop_mod

    # train and the functions its steps run through (validation, at the last step, is not a step)
    STEP_FUNCTIONS = {"train", "_train_epoch", "_train_step", "_out_of_time", "_record"}
    reads = []
    for name in ("item", "__float__", "__int__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, _name=name, **k):
            caller = sys._getframe(1).f_code
            if caller.co_filename == loop_mod.__file__ and caller.co_name in STEP_FUNCTIONS:
                reads.append((_name, sys._getframe(1).f_lineno))
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    run = tmp_path / "run"
    train(tiny_tc(tiny_data, run, max_steps=12, valid_every=40, accumulation=2), log=QUIET)
    monkeypatch.undo()
    assert [r["step"] for r in read_metrics(run)] == [4, 8, 12]
    assert len(reads) == 3, reads


def test_an_epoch_too_small_for_one_step_is_said_not_looped_through(tiny_data, tmp_path):
    """accumulation 0 derives the micro-batches of a step from tokens_per_step: 25,000 target tokens are more
    than the whole tiny corpus holds, so no epoch has a step; the run says so and stops (it used to run through
    max_epochs empty epochs in silence)."""
    messages = []
    run = tmp_path / "run"
    train(tiny_tc(tiny_data, run, accumulation=0, tokens_per_step=25000), log=messages.append)
    assert any("no training step" in m and "--tokens-per-step 25000" in m for m in messages), messages
    assert list_states(run) == [] and read_metrics(run) == []
    train(tiny_tc(tiny_data, tmp_path / "ok", accumulation=0, tokens_per_step=300, max_steps=2), log=messages.append)
    assert [p.name for p in list_states(tmp_path / "ok")] == ["step_00000002"]


def test_scale_residual_init_scales_only_the_residual_branch_ends():
    """W_V, W_O (every attention) and W_2 (every FFN) times the scale; embeddings, W_Q, W_K, W_1, norms untouched."""
    import copy

    from aiayn.model.config import TransformerConfig
    from aiayn.model.transformer import Transformer
    from aiayn.training.recipe import scale_residual_init

    model = Transformer(TransformerConfig.preset("base", vocab_size=50, d_model=16, d_ff=32, n_heads=2, n_layers=2))
    before = copy.deepcopy(model.state_dict())
    n = scale_residual_init(model, 0.25)
    assert n == 2 * 3 + 2 * 5  # encoder layer: W_V, W_O, W_2; decoder layer: two attentions' W_V, W_O and W_2
    scaled = {k for k in before if k.endswith(("w_v.weight", "w_o.weight", "w_2.weight"))}
    assert len(scaled) == n
    for k, v in model.state_dict().items():
        expected = before[k] * 0.25 if k in scaled else before[k]
        assert torch.equal(v, expected), k
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive"):
            scale_residual_init(model, bad)


def test_residual_init_scale_starts_a_fresh_run_small_and_not_a_warm_start(tiny_data, tmp_path):
    """The step-0 weights of a run with residual_init_scale are the plain run's, scaled (same seed); a warm start
    keeps its parent's weights."""
    plain = train(tiny_tc(tiny_data, tmp_path / "plain", max_steps=1, save_every=1, lr_scale=1e-12))
    small = train(tiny_tc(tiny_data, tmp_path / "small", max_steps=1, save_every=1, lr_scale=1e-12,
                          residual_init_scale=0.5))
    a, b = weights(list_states(plain)[-1]), weights(list_states(small)[-1])
    ends = [k for k in a if k.endswith(("w_v.weight", "w_o.weight", "w_2.weight"))]
    assert ends
    for k in a:  # one step at a learning rate of ~0: the weights are still the initial ones
        np.testing.assert_allclose(b[k], a[k] * (0.5 if k in ends else 1.0), rtol=1e-4, atol=1e-7, err_msg=k)
    warm = train(tiny_tc(tiny_data, tmp_path / "warm", max_steps=1, save_every=1, lr_scale=1e-12,
                         residual_init_scale=0.5, init_from=str(plain)))
    c = weights(list_states(warm)[-1])
    for k in ends:
        np.testing.assert_allclose(c[k], a[k], rtol=1e-4, atol=1e-7, err_msg=k)


def test_an_interrupted_prune_leaves_no_half_deleted_state(tmp_path, monkeypatch):
    """An interrupt (Ctrl-C) while an old state is being deleted must not leave a ``step_*/`` that has lost its
    weights but still looks like a state to ``list_states`` (and so to ``--resume``)."""
    import shutil as _shutil

    from aiayn.training import state as state_mod

    run = tmp_path / "run"
    for step in (1, 2):
        d = run / f"step_{step:08d}"
        d.mkdir(parents=True)
        for name in ("config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json"):
            (d / name).write_text("{}")
    real_rmtree = _shutil.rmtree

    def interrupted_rmtree(path, *args, **kwargs):
        (Path(path) / "model.safetensors").unlink()  # deletion got this far...
        raise KeyboardInterrupt  # ...when the user pressed Ctrl-C

    monkeypatch.setattr(state_mod.shutil, "rmtree", interrupted_rmtree)
    with pytest.raises(KeyboardInterrupt):
        state_mod.prune_state(run / "step_00000001")
    monkeypatch.setattr(state_mod.shutil, "rmtree", real_rmtree)
    assert [p.name for p in state_mod.list_states(run)] == ["step_00000002"]
