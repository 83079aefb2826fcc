"""Tests of the benchmark machinery (benchmarks/): FLOP counting, statistics helpers, result rows and
targets, the JSON written by a ``--quick`` run. No timing assertions: speed is reported, never tested."""
from __future__ import annotations

import json
import math

import pytest
import torch

from aiayn import Transformer, TransformerConfig
from benchmarks import flops, timing
from benchmarks.__main__ import main as bench_main
from benchmarks.report import Row, Target, evaluate_targets, format_value

TINY = TransformerConfig.preset("tiny", vocab_size=320, max_len=64)  # D=64, h=4, d_ff=128, N=2, V=320


# -- FLOP counting ---------------------------------------------------------------------------------------
def test_training_flops_match_a_hand_count_for_the_tiny_config():
    B, S, T = 2, 5, 7
    D, F, L, V = 64, 128, 2, 320
    # weight matrices per encoder layer: W^Q, W^K, W^V, W^O (D x D each) + W_1 (D x F) + W_2 (F x D)
    enc = L * (4 * D * D + 2 * D * F)  # 65,536, applied to the S source positions
    # decoder layer at target positions: self W^Q..W^O, cross W^Q and W^O, FFN; cross W^K, W^V at source positions
    dec = L * (6 * D * D + 2 * D * F)  # 81,920
    dec_kv = L * 2 * D * D  # 16,384
    gen = D * V  # 20,480: tied pre-softmax projection
    fwd_linear = 2 * B * ((enc + dec_kv) * S + (dec + gen) * T)
    assert fwd_linear == 4 * (409_600 + 716_800) == 4_505_600
    fwd_attention = B * L * (4 * S * S * D + 4 * T * T * D + 4 * T * S * D)  # QK^T and AV, 2 FLOPs per MAC
    assert fwd_attention == 111_616
    got = flops.training_flops(TINY, B, S, T)
    assert got.linear == 3 * 4_505_600
    assert got.attention == 3 * 111_616
    assert got.total == 13_851_648
    assert flops.forward_flops(TINY, B, S, T).total * 3 == got.total


def test_training_flops_equal_torch_flop_counter_on_the_capture_path():
    """Independent reference: torch.utils.flop_counter counts every matmul of forward + backward. The
    capture path computes attention with explicit matmuls, which the counter sees (the fused CPU SDPA
    kernel has no FLOP formula registered)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = Transformer(TINY).train()
    B, S, T = 3, 6, 4
    src = torch.randint(4, TINY.vocab_size, (B, S))
    tgt = torch.randint(4, TINY.vocab_size, (B, T))
    counter = FlopCounterMode(display=False)
    with counter:
        logits, _ = model(src, tgt, return_attention=True)
        logits.float().pow(2).mean().backward()
    assert counter.get_total_flops() == flops.training_flops(TINY, B, S, T).total


def test_weight_params_match_the_model_matrices():
    model = Transformer(TINY)
    p = flops.weight_params(TINY)
    enc = sum(w.numel() for n, w in model.encoder_layers.named_parameters() if w.dim() == 2)
    dec_all = sum(w.numel() for n, w in model.decoder_layers.named_parameters() if w.dim() == 2)
    assert p["enc"] == enc
    assert p["dec"] + p["dec_kv"] == dec_all
    assert p["generator"] == model.embedding.weight.numel()


def test_flops_reject_bad_sizes():
    with pytest.raises(ValueError, match="src_len"):
        flops.forward_flops(TINY, 1, 0, 3)


def test_gpu_peak_lookup_and_mfu():
    assert flops.gpu_bf16_peak_tflops("NVIDIA H100 80GB HBM3") == pytest.approx(989.4)
    assert flops.gpu_bf16_peak_tflops("NVIDIA H100 PCIe") == pytest.approx(756.0)
    assert flops.gpu_bf16_peak_tflops("NVIDIA H200") == pytest.approx(989.4)
    assert flops.gpu_bf16_peak_tflops("NVIDIA A100-SXM4-80GB") == pytest.approx(312.0)
    assert flops.gpu_bf16_peak_tflops("Some Future GPU") is None
    assert flops.gpu_bf16_peak_tflops(None) is None
    # 494.7e12 FLOP in 1 s on a 989.4 TFLOP/s card = 50 %
    assert flops.mfu(494.7e12, 1.0, 989.4) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        flops.mfu(1.0, 0.0, 989.4)


# -- statistics ------------------------------------------------------------------------------------------
def test_median_and_percentile_by_hand():
    assert timing.median([3.0, 1.0, 2.0]) == 2.0
    assert timing.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    # p95 of 1..20 with linear interpolation: rank 0.95 * 19 = 18.05 -> 19 + 0.05 * (20 - 19)
    assert timing.percentile(list(range(1, 21)), 95) == pytest.approx(19.05)
    assert timing.percentile([5.0], 95) == 5.0
    st = timing.Stats.of([0.1, 0.3, 0.2, 0.4])
    assert (st.median, st.min, st.max, st.n) == (pytest.approx(0.25), 0.1, 0.4, 4)
    with pytest.raises(ValueError, match="empty"):
        timing.median([])
    with pytest.raises(ValueError, match="q must be"):
        timing.percentile([1.0], 101)


def test_interleaved_calls_alternate_and_count():
    calls = []
    out = timing.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, warmup=1, repeats=3)
    assert calls == ["a", "b"] * 4
    assert {k: len(v) for k, v in out.items()} == {"a": 3, "b": 3}
    with pytest.raises(ValueError):
        timing.repeat(lambda: None, warmup=0, repeats=0)


# -- rows, targets, formatting -----------------------------------------------------------------------------
def test_rows_and_targets():
    with pytest.raises(ValueError, match="unknown group"):
        Row("x", "nope", "cpu", "x", 1.0, "x")
    assert Row("a", "train", "cpu", "a", None, "x").note.startswith("n/a")
    assert Row("a", "train", "cpu", "a", float("nan"), "x").value is None
    t_ge = Target("t", "d", "train.cpu.eager.speedup", ">=", 1.0, "x")
    t_le = Target("u", "d", "capture.cpu.single.ratio", "<=", 1.3, "x")
    rows = [Row("train.cpu.eager.speedup", "train", "cpu", "s", 0.9, "x"),
            Row("capture.cpu.single.ratio", "capture", "cpu", "r", 1.3, "x")]
    res = evaluate_targets(rows, (t_ge, t_le))
    assert [r["status"] for r in res] == ["missed", "met"]
    res = evaluate_targets([Row("train.cpu.eager.speedup", "train", "cpu", "s", None, "x", "n/a: broke")], (t_ge,))
    assert res[0]["status"] == "n/a: broke" and res[0]["measured"] is None
    gpu = Target("g", "d", "train.cuda.eager.speedup", ">=", 1.3, "x")
    assert evaluate_targets([], (gpu,), devices=["cpu"])[0]["status"] == "n/a: no GPU in this run"
    assert format_value(None, "x") == "n/a"
    assert format_value(0.456, "fraction") == "45.6%"
    assert format_value(12345.6, "tok/s") == "12,346"


# -- the machinery end to end -------------------------------------------------------------------------------
def test_make_batches_are_shifted_targets_without_pads():
    from benchmarks.training import make_batches

    (src, dec_in, tgt), = make_batches(TINY, 3, 5, 6, 1, "cpu")
    assert src.shape == (3, 5) and dec_in.shape == tgt.shape == (3, 6)
    assert (dec_in[:, 0] == TINY.bos_id).all() and torch.equal(dec_in[:, 1:], tgt[:, :-1])
    assert min(int(src.min()), int(tgt.min())) > max(TINY.pad_id, TINY.bos_id, TINY.eos_id)


def test_measure_train_reports_consistent_figures():
    from benchmarks.training import measure_train

    cfg = TINY.replace(dropout=0.1)
    res = measure_train(dict(device="cpu", cfg=cfg.to_dict(), batch=2, src_len=4, tgt_len=5, compile=False, warmup=0, repeats=2))
    assert res["flops_per_step"]["total"] == flops.training_flops(cfg, 2, 4, 5).total
    for rec in res["models"].values():
        assert rec["tokens_per_s"] == pytest.approx(2 * 5 / rec["step_s"]["median"])
        assert rec["mfu"] is None  # no GPU peak on CPU
    assert res["num_parameters"] == Transformer(cfg).num_parameters()
    from benchmarks.training import cpu_bf16_supported

    assert ("aiayn_bf16" in res["models"]) == cpu_bf16_supported()
    res = measure_train(dict(device="cpu", cfg=cfg.to_dict(), batch=2, src_len=4, tgt_len=5, compile=False, warmup=0, repeats=1,
                             cpu_bf16=False))
    assert set(res["models"]) == {"aiayn", "torch"}


def test_bf16_rows_carry_the_ratio_of_the_measured_speeds():
    from benchmarks.training import _rows_from

    step = {"median": 1.0, "p95": 1.0, "min": 1.0, "max": 1.0, "n": 1}
    res = {"batch": 2, "src_len": 4, "tgt_len": 5, "target_tokens_per_step": 10, "flops_per_step": {}, "peak_tflops": None,
           "gpu": None, "num_parameters": 1,
           "models": {n: {"tokens_per_s": v, "first_call_s": 0.1, "step_s": step, "mfu": None, "achieved_tflops": 0.0}
                      for n, v in (("aiayn", 100.0), ("torch", 80.0), ("aiayn_bf16", 150.0))}}
    rows = {r.id: r for r in _rows_from(res, "cpu", "eager")}
    assert rows["train.cpu.eager.amp_cpu_speedup"].value == pytest.approx(1.5)
    assert rows["train.cpu.eager.speedup"].value == pytest.approx(1.25)
    del res["models"]["aiayn_bf16"]
    assert "train.cpu.eager.amp_cpu_speedup" not in {r.id for r in _rows_from(res, "cpu", "eager")}


def test_decode_sentences_have_the_asked_lengths_and_random_stand_in_is_bounded():
    from benchmarks.decode import SENTENCES, Subject

    assert {k: len(v.split()) for k, v in SENTENCES.items()} == {"short": 5, "medium": 15, "long": 40}
    torch.manual_seed(0)
    subject = Subject(Transformer(TINY).eval(), None, None)
    n_src = math.ceil(1.3 * 15) + 1  # pieces + EOS
    lengths = subject.run([SENTENCES["medium"]], beam_size=2, use_cache=True, return_attention=False)
    assert 1 <= lengths[0] <= math.ceil(1.2 * n_src)
    assert subject.describe()["kind"] == "random"


def test_quick_run_writes_the_json_schema(tmp_path, tiny_checkpoints):
    out = tmp_path / "res.json"
    argv = ["--quick", "--only", "capture", "--threads", "1", "--device", "cpu", "--checkpoint", str(tiny_checkpoints / "en-de"), "--out", str(out)]
    assert bench_main(argv) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "aiayn-bench/1" and data["quick"] is True and data["groups"] == ["capture"]
    m = data["machine"]
    for key in ("host", "cpu_model", "cpu_count", "torch", "torch_threads", "gpu", "date", "command", "git_commit"):
        assert key in m
    assert m["torch"] == torch.__version__ and m["torch_threads"] == 1
    assert "--only capture" in m["command"]
    assert data["settings"]["checkpoint"] == str(tiny_checkpoints / "en-de")
    rows = {r["id"]: r for r in data["rows"]}
    assert set(rows) == {f"capture.cpu.{c}.{w}" for c in ("single", "batch") for w in ("plain", "capture", "ratio")}
    for r in data["rows"]:
        assert set(r) == {"id", "group", "device", "name", "value", "unit", "note", "detail"}
        assert r["value"] is not None and r["value"] > 0
    single = rows["capture.cpu.single.plain"]["detail"]
    assert rows["capture.cpu.single.ratio"]["value"] == pytest.approx(single["capture_s"]["median"] / single["plain_s"]["median"])
    targets = {t["id"]: t for t in data["targets"]}
    assert targets["capture_cpu"]["status"] in ("met", "missed")
    assert targets["capture_cpu"]["measured"] == rows["capture.cpu.single.ratio"]["value"]
    assert targets["train_gpu"]["status"].startswith("n/a")


@pytest.mark.parametrize("argv, message", [
    (["--only", "nonsense"], "unknown group"),
    (["--checkpoint", "/nonexistent/ckpt"], "not a checkpoint directory"),
    (["--repeats", "0"], "positive integer"),
])
def test_bad_arguments_give_exit_code_2_and_a_message(argv, message, capsys, tmp_path):
    assert bench_main(argv + ["--out", str(tmp_path / "x.json")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_gpu_configuration_is_the_papers_base_model_and_token_batch():
    from benchmarks.common import train_config

    cfg, sizes = train_config("cuda", quick=False)
    assert (cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.n_layers, cfg.vocab_size) == (512, 8, 2048, 6, 37000)
    assert sizes["batch"] * sizes["src_len"] == sizes["batch"] * sizes["tgt_len"] == 24_576  # ~25k + 25k (Section 5.1)
    f = flops.training_flops(cfg, **sizes)
    # the 6 * P * tokens part with P = weight matrices (Table 3 base: ~44M non-embedding + 19M tied projection)
    p = flops.weight_params(cfg)
    assert f.linear == 6 * 24_576 * (p["enc"] + p["dec_kv"] + p["dec"] + p["generator"])
    assert 40e6 < p["enc"] + p["dec"] + p["dec_kv"] < 50e6


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given when CUDA is absent")
def test_cuda_request_without_cuda_is_a_clear_error(capsys, tmp_path):
    assert bench_main(["--device", "cuda", "--only", "capture", "--out", str(tmp_path / "x.json")]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_quick_classroom_run_has_its_rows_and_right_answers(tmp_path, tiny_checkpoints, monkeypatch):
    """``--quick --only classroom``: one streamlit server on the tiny checkpoints, N = 1 and 3 protocol students;
    every student answered with the lone translation (rows have values), server cost rows present."""
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tiny_checkpoints))
    out = tmp_path / "classroom.json"
    argv = ["--quick", "--only", "classroom", "--threads", "1", "--device", "cpu", "--out", str(out)]
    assert bench_main(argv) == 0
    data = json.loads(out.read_text())
    rows = {r["id"]: r for r in data["rows"]}
    want = {f"classroom.cpu.n{n}.{page}.{q}" for n in (1, 3) for page in ("translate", "explorer", "all") for q in ("p50", "p95")}
    want.discard("classroom.cpu.n1.explorer.p50")  # N=1: one student, on Translate
    want.discard("classroom.cpu.n1.explorer.p95")
    want |= {f"classroom.cpu.n{n}.{w}" for n in (1, 3) for w in ("cpu_per_student", "peak_rss")}
    assert want <= set(rows), sorted(want - set(rows))
    for rid in want:
        assert rows[rid]["value"] is not None and rows[rid]["value"] > 0, rows[rid]
    assert len(rows["classroom.cpu.n3.all.p95"]["detail"]["samples_s"]) == 3
    assert rows["classroom.cpu.n3.translate.p50"]["detail"]["students"] == 2  # half and half: 2 + 1
    assert rows["classroom.cpu.n3.peak_rss"]["value"] >= rows["classroom.cpu.n1.peak_rss"]["value"]  # a high-water mark
    assert rows["classroom.cpu.n3.all.p50"]["value"] <= rows["classroom.cpu.n3.all.p95"]["value"]
    targets = {t["id"]: t for t in data["targets"]}
    assert targets["classroom_30"]["status"].startswith("n/a")  # quick mode has no 30-student level


def test_classroom_check_compares_with_the_lone_translation():
    import numpy as np

    from benchmarks.classroom import _heatmaps, check

    m = np.array([[0.25, 0.75], [0.5, 0.5]])
    ref = {"text": "Die Katze schläft.", "maps": [np.eye(2), m]}
    page = {"texts": ["#### Translation", "Die Katze schläft."], "heatmaps": [m.copy()]}
    assert check(page, ref) is None
    assert "not on the page" in check(dict(page, texts=["Die Katze."]), ref)
    assert "no heatmap" in check(dict(page, heatmaps=[m + 1e-3]), ref)
    assert check({"error": "TimeoutError: late"}, ref) == "TimeoutError: late"
    spec = json.dumps({"data": [{"type": "heatmap", "z": m.tolist()}, {"type": "scatter", "y": [1]}]})
    (z,) = _heatmaps(spec)
    assert np.array_equal(z, m)


def test_the_training_command_rows_compare_the_three_ways_on_the_same_steps():
    """benchmarks/trainer.py: the old loop, the default loop as threads and as train-on's processes; the command's
    speed-up is processes over old, its share of the bf16 peak uses the in-process run's peak and FLOPs per token."""
    from benchmarks.trainer import _processes_rows, _recipe_rows, summarise_ways

    run = lambda tok_s, trained=4096: {"tokens_per_s": tok_s, "train_tokens": trained, "max_tokens": 4096}  # noqa: E731
    res = summarise_ways({"old": [run(1000.0), run(1200.0)], "threads": [run(2000.0), run(2400.0)],
                          "processes": [run(3000.0), run(3600.0)]}, rounds=2, cores=2)
    assert res["old_tokens_per_s"] == 1100.0 and res["processes_tokens_per_s"] == 3300.0
    assert res["speedup"] == 3300.0 / 2200.0 and res["command_speedup"] == 3.0
    speed = {"flops_per_target_token": 50e6, "peak_gflops": 330.0, "fp32_peak_gflops": 165.0}
    rows = {r.id: r for r in _processes_rows(res, speed=speed)}
    assert rows["trainer.cpu.command_speedup"].value == 3.0
    assert abs(rows["trainer.cpu.command_peak_share"].value - 3300.0 * 50e6 / 1e9 / 330.0) < 1e-12  # 0.5
    assert "1,000, 1,200" in rows["trainer.cpu.command_speedup"].note
    recipe = {r.id: r for r in _recipe_rows(dict(res, per_process=3), speed=speed)}
    assert recipe["trainer.cpu.command_speedup_recipe"].value == 3.0
    assert "3 x 4,096-token micro-batches per process" in recipe["trainer.cpu.command_speedup_recipe"].note
    assert recipe["trainer.cpu.command_peak_share_recipe"].value == rows["trainer.cpu.command_peak_share"].value
    no_peak = {r.id: r for r in _processes_rows(res, speed=None)}
    assert no_peak["trainer.cpu.command_speedup"].value == 3.0
    assert no_peak["trainer.cpu.command_peak_share"].value is None
    with pytest.raises(RuntimeError, match="different target tokens"):
        summarise_ways({"old": [run(1.0, 4096)], "threads": [run(1.0, 4096)], "processes": [run(1.0, 4000)]}, 1, 2)
    with pytest.raises(RuntimeError, match="every way"):
        summarise_ways({"old": [run(1.0)], "threads": [run(1.0)], "processes": []}, 1, 2)


def test_the_default_loop_is_timed_on_the_threads_it_decides_before_the_benchmark_loads_the_cpu(monkeypatch):
    """benchmarks/trainer.py measure_speedup: the default loop gets the thread count auto_threads decides once, before
    the first round (decided at each run, the load average would count the old loop's run just before), and the old
    loop the benchmark's threads."""
    import aiayn.training.loop as loop
    import benchmarks.flops as flops
    import benchmarks.trainer as trainer

    decisions = iter([2, 1, 1, 1])
    monkeypatch.setattr(loop, "auto_threads", lambda *a, **k: next(decisions))
    monkeypatch.setattr(flops, "measure_matmul_peak", lambda *a, **k: {"gflops": 400.0})
    seen = []

    def fake_loop(run):
        seen.append((run["run_dir"].rsplit("-", 1)[1], run["threads"]))
        return {"tokens_per_s": 2000.0 if run["recipe"] == {} else 1000.0, "flops_per_target_token": 50e6}

    monkeypatch.setattr(trainer, "measure_loop", fake_loop)
    res = trainer.measure_speedup({"run_dir": "/tmp/x/run", "threads": 2}, rounds=2)
    assert seen == [("old0", 2), ("new0", 2), ("new1", 2), ("old1", 2)]
    assert res["speedup"] == 2.0 and res["peak_share"] == 2000.0 * 50e6 / 1e9 / 400.0


def test_the_trainer_groups_old_loop_trains_as_the_loop_did_before_the_speed_work(tiny_data, tmp_path):
    """The speed-up rows divide by :data:`benchmarks.trainer.OLD_CPU_LOOP`: a run with it must store (and so have
    trained with) float32, per-tensor Adam, widths x8 and ``F.dropout``, whatever the defaults have become since."""
    import json

    from benchmarks import trainer

    spec = {"data_dir": str(tiny_data), "run_dir": str(tmp_path / "old"), "device": "cpu", "preset": "tiny",
            "overrides": {"dropout": 0.1}, "max_tokens": 256, "steps": 2, "log_every": 1, "threads": 1,
            "recipe": trainer.OLD_CPU_LOOP}
    out = trainer.measure_loop(spec)
    stored = json.loads((tmp_path / "old" / "train_config.json").read_text())
    assert out["tokens_per_s"] > 0 and out["amp_cpu"] is False
    assert (stored["amp_cpu"], stored["adam_impl"], stored["pad_multiple"], stored["dropout_impl"]) == (False, "loop", 8, "bernoulli")
    defaults = trainer.measure_loop(dict(spec, run_dir=str(tmp_path / "new"), recipe={}))
    new = json.loads((tmp_path / "new" / "train_config.json").read_text())
    assert defaults["tokens_per_s"] > 0
    assert (new["adam_impl"], new["dropout_impl"]) == ("fused", "words") and new["pad_multiple"] != 8
