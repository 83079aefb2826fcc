"""The ``trainer`` group: the REAL training path of ``aiayn train`` (data + step), not the model alone.

Data: the committed Ding fixture (``tests/fixtures/ding_sample.txt``, 750 real pairs) repeated to a corpus of
Ding's shape (mostly 1-3 word phrases, some sentences), written as a prepared data directory in a temporary
folder with the shipped ``spm.model`` (``checkpoints/en-de``; a small vocabulary is trained from the fixture
when it is absent). No network.

Rows (target tokens are the non-pad target pieces, EOS included: the unit of ``tokens_per_s`` in ``metrics.jsonl``):

* ``input pipeline``: one epoch of batches as the trainer makes them (:func:`aiayn.training.pipeline.step_groups`,
  then every micro-batch collated by :class:`aiayn.training.loader.BatchLoader` in the calling thread,
  ``pad_multiple`` 8; on CUDA into pinned memory plus the host-to-device copy, synchronised at the end), in target
  tokens per second of wall time; median over epochs. Two ``before`` rows time older paths on the same data: lists of ids,
  :func:`aiayn.training.pipeline.collate` per micro-batch (vectorised by ``pad_ids``) and a blocking
  ``.to(device)``, as the loop did before the loader; and the same with the per-row collate of commit c914517,
  the code of the GPU runs (:func:`collate_c914517`). Their batching is the new length-based one (the old
  list-based ``token_batches`` was slower, but runs once an epoch).
* token cache: the first start (tokenise + write the memory-mapped arrays), a later start (read them back) and
  tokenising in memory at every start (before).
* ``training loop``: :func:`aiayn.training.loop.train` itself on that data directory (loader thread, fused Adam and
  bf16 autocast on CUDA, a metrics record every few steps), median ``tokens_per_s`` of the records after the first
  (warm-up, compilation). CPU: the shipped shape (d_model 256, N 3), 2,048-token micro-batches. CUDA: d_model 256,
  N 6, 25,000-token steps (the GPU runs of docs/benchmarks.md), and the base model (Table 3) with ``--compile``
  in a worker process, with its model FLOPs utilisation (FLOPs of the padded batch shapes the run trained on,
  :mod:`benchmarks.flops`, over the card's bf16 peak).
* CPU, ``training loop, processes over threads``: the default loop on all cores as one process with that many
  threads against that many one-thread processes under ``torchrun`` (DistributedDataParallel over gloo), the same
  optimizer steps on the same micro-batches (:func:`measure_processes`); in the same rounds the old loop on all
  cores, for ``training command speed-up`` (the processes, as ``aiayn train`` trains by default on a CPU with 2 or more
  cores and ``train-on --processes`` trains, over the old loop) and the command's share of the bf16 matmul peak.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .common import REPO, worker_env

FIXTURE = REPO / "tests" / "fixtures" / "ding_sample.txt"
SHIPPED_SPM = REPO / "checkpoints" / "en-de" / "spm.model"


def make_data_dir(root: Path, n_pairs: int) -> Path:
    """A prepared data directory under ``root``: ``train.tsv`` (the fixture pairs repeated to ``n_pairs``),
    ``valid.tsv`` (8 of them) and ``spm.model``; returns it."""
    from aiayn.data import parse_ding
    from aiayn.data.corpora import write_tsv

    pairs, _ = parse_ding(FIXTURE)
    d = root / "data"
    d.mkdir(parents=True, exist_ok=True)
    reps = -(-n_pairs // len(pairs))
    write_tsv((pairs * reps)[:n_pairs], d / "train.tsv")
    write_tsv(pairs[:8], d / "valid.tsv")
    if SHIPPED_SPM.is_file():
        shutil.copyfile(SHIPPED_SPM, d / "spm.model")
    else:  # a fresh clone without the shipped checkpoints
        from aiayn.tokenizer import train_sentencepiece

        train_sentencepiece([p.de for p in pairs] + [p.en for p in pairs], d / "spm.model", vocab_size=320, num_threads=1)
    return d


def collate_c914517(idx, src_ids, tgt_ids, cfg):
    """The collate of commit c914517 (``aiayn/train.py``), the code of the GPU runs in docs/benchmarks.md: a
    Python loop with a few torch calls per row. Kept here only as the oldest "before"."""
    B = len(idx)
    S = max(len(src_ids[i]) for i in idx)
    T = max(len(tgt_ids[i]) for i in idx)
    src = torch.full((B, S), cfg.pad_id, dtype=torch.long)
    dec_in = torch.full((B, T), cfg.pad_id, dtype=torch.long)
    tgt = torch.full((B, T), cfg.pad_id, dtype=torch.long)
    for r, i in enumerate(idx):
        s, t = src_ids[i], tgt_ids[i]
        src[r, : len(s)] = torch.tensor(s)
        tgt[r, : len(t)] = torch.tensor(t)
        dec_in[r, 0] = cfg.bos_id
        dec_in[r, 1 : len(t)] = torch.tensor(t[:-1])
    return src, dec_in, tgt


def collate_pad_ids(idx, src_ids, tgt_ids, cfg):
    """The list collate the loop used before the loader (``pad_ids`` per side, then the shifted decoder input in
    numpy); :func:`aiayn.training.pipeline.collate` now goes through the loader's one collate. Kept here only as
    a "before"."""
    from aiayn.data.batching import pad_ids

    src = pad_ids([src_ids[i] for i in idx], cfg.pad_id)
    tgt_rows = [tgt_ids[i] for i in idx]
    tgt = pad_ids(tgt_rows, cfg.pad_id)
    lengths = np.fromiter((len(t) for t in tgt_rows), dtype=np.int64, count=len(tgt_rows))
    dec_in = np.empty_like(tgt)
    dec_in[:, 0] = cfg.decoder_start_id
    dec_in[:, 1:] = tgt[:, :-1]
    dec_in[np.arange(tgt.shape[1]) >= np.maximum(lengths, 1)[:, None]] = cfg.pad_id
    return torch.from_numpy(src), torch.from_numpy(dec_in), torch.from_numpy(tgt)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure_pipeline(data_dir: Path, device: str, *, epochs: int, before_epochs: int, max_tokens: int) -> dict[str, Any]:
    """Time the token cache, the new input pipeline and the list path of before (see the module docstring)."""
    from aiayn.model.config import TransformerConfig
    from aiayn.tokenizer import Tokenizer
    from aiayn.training.loader import BatchLoader, load_pairs
    from aiayn.training.pipeline import encode_pairs, load_split, step_groups
    from aiayn.training.recipe import TrainConfig

    dev = torch.device(device)
    tok = Tokenizer.load(data_dir / "spm.model")
    cfg = TransformerConfig.preset("base", vocab_size=tok.vocab_size, max_len=256)
    tc = TrainConfig(str(data_dir), "unused", max_tokens=max_tokens, accumulation=1, seed=1234)
    cache = data_dir / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    load_pairs(data_dir, "train", "en-de", tok, data_dir / "spm.model", max_len=128, cache_dir=cache, log=lambda m: None)
    first_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = load_pairs(data_dir, "train", "en-de", tok, data_dir / "spm.model", max_len=128, cache_dir=cache)
    later_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    s_ids, t_ids = encode_pairs(tok, *load_split(data_dir, "train", "en-de"), 128, tok.eos_id)
    in_memory = time.perf_counter() - t0

    new_tps, n_tok_epoch = [], 0
    for epoch in range(epochs):
        _sync(dev)
        t0 = time.perf_counter()
        groups = step_groups(tc, data.src_lengths, data.tgt_lengths, epoch)
        n_tok = 0
        last = None
        for _, micro, n in BatchLoader(data, groups, pad_id=cfg.pad_id, bos_id=cfg.decoder_start_id, device=dev,
                                       multiple=8, max_width=cfg.max_len, prefetch=0):
            n_tok += n
            last = micro
        _sync(dev)
        new_tps.append(n_tok / (time.perf_counter() - t0))
        n_tok_epoch = n_tok
        del last
    old_tps: dict[str, list[float]] = {"head": [], "c914517": []}
    for name, fn in (("head", collate_pad_ids), ("c914517", collate_c914517)):
        for epoch in range(before_epochs):
            _sync(dev)
            t0 = time.perf_counter()
            groups = step_groups(tc, [len(s) for s in s_ids], [len(t) for t in t_ids], epoch)
            n_tok = 0
            for group in groups:
                for b in group:
                    n_tok += sum(len(t_ids[i]) for i in b)
                    s, d, t = fn(b, s_ids, t_ids, cfg)
                    s, d, t = s.to(dev), d.to(dev), t.to(dev)
            _sync(dev)
            old_tps[name].append(n_tok / (time.perf_counter() - t0))
    return {"pairs": len(data), "target_tokens_per_epoch": n_tok_epoch, "steps_per_epoch": len(groups),
            "max_tokens": max_tokens, "new_tokens_per_s": new_tps, "before_tokens_per_s": old_tps,
            "cache_first_start_s": first_start, "cache_later_start_s": later_start, "tokenise_in_memory_s": in_memory}


def flops_per_target_token(tc, cfg, tokenizer) -> float:
    """Training FLOPs (:func:`benchmarks.flops.training_flops`) of the padded batch shapes of epoch 0 of ``tc``'s
    run, per (non-pad) target token: what MFU multiplies by the measured tokens/s."""
    from aiayn.training.loader import load_pairs
    from aiayn.training.pipeline import step_groups

    from .flops import training_flops

    data_dir = Path(tc.data_dir)
    data = load_pairs(data_dir, "train", tc.direction, tokenizer, data_dir / "spm.model", max_len=tc.max_len,
                      upsample=tc.upsample_sentences, log=lambda m: None)
    from aiayn.training.loop import pad_multiple_for

    m = pad_multiple_for(tc, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    flops = n_tok = 0
    for group in step_groups(tc, data.src_lengths, data.tgt_lengths, 0):
        for b in group:
            idx = np.asarray(b)
            s, t = int(data.src_lengths[idx].max()), int(data.tgt_lengths[idx].max())
            s, t = min(-(-s // m) * m, max(s, cfg.max_len)), min(-(-t // m) * m, max(t, cfg.max_len))
            flops += training_flops(cfg, len(b), s, t).total
            n_tok += int(data.tgt_lengths[idx].sum())
    return flops / max(n_tok, 1)


def measure_loop(spec: dict[str, Any]) -> dict[str, Any]:
    """Run :func:`aiayn.training.loop.train` on ``spec["data_dir"]`` and read its ``metrics.jsonl``.

    ``spec``: ``data_dir``, ``run_dir``, ``device`` (informative: train() picks CUDA when present), ``preset``,
    ``overrides`` (model), ``max_tokens``, ``steps``, ``log_every``, ``compile``, ``threads``, optional
    ``peak_tflops``. Returns the median ``tokens_per_s`` of the records after the first, the per-record figures,
    and on CUDA the MFU (FLOPs of the padded shapes of epoch 0 per target token x tokens/s / bf16 peak).
    """
    from aiayn.model.config import TransformerConfig
    from aiayn.tokenizer import Tokenizer
    from aiayn.training.loop import train
    from aiayn.training.recipe import TrainConfig

    from .flops import gpu_bf16_peak_tflops

    data_dir, run_dir = Path(spec["data_dir"]), Path(spec["run_dir"])
    rank = int(os.environ.get("RANK", "0"))  # a torchrun worker (measure_processes): rank 0 owns the run folder
    if rank == 0:
        shutil.rmtree(run_dir, ignore_errors=True)
    tc = TrainConfig(str(data_dir), str(run_dir), preset=spec["preset"], model_overrides=dict(spec["overrides"]),
                     max_tokens=int(spec["max_tokens"]), accumulation=int(spec.get("accumulation", 1)), warmup_steps=4000,
                     max_steps=int(spec["steps"]),
                     valid_every=10 * int(spec["log_every"]), valid_bleu_sentences=0, save_every=10**9, keep=1,
                     compile=bool(spec.get("compile")), threads=int(spec.get("threads", 0)), record_attention=False,
                     **dict(spec.get("recipe") or {}))
    t0 = time.perf_counter()
    train(tc, log=lambda m: None)
    wall = time.perf_counter() - t0
    if rank != 0:
        return {}
    recs = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    timed = [r["tokens_per_s"] for r in recs[1:]] or [r["tokens_per_s"] for r in recs]
    tok = Tokenizer.load(data_dir / "spm.model")
    overrides = dict(tc.model_overrides, vocab_size=tok.vocab_size, max_len=max(256, tc.max_len + 2))
    cfg = TransformerConfig.preset(tc.preset, **overrides)
    decided = json.loads((run_dir / "train_config.json").read_text())
    from aiayn.training.state import list_states

    states = list_states(run_dir)  # the last step is always saved: how many target tokens the run trained on
    last = json.loads((states[-1] / "trainer_state.json").read_text()) if states else {}
    out: dict[str, Any] = {"threads": decided.get("threads"), "amp_cpu": decided.get("amp_cpu"),
                           "tokens_per_s": float(np.median(timed)), "records": [{k: r[k] for k in ("step", "tokens_per_s")} for r in recs],
                           "wall_s": wall, "steps": tc.max_steps, "train_tokens": last.get("tokens"), "compile": tc.compile, "d_model": cfg.d_model,
                           "n_layers": cfg.n_layers, "vocab_size": cfg.vocab_size, "max_tokens": tc.max_tokens,
                           "device": "cuda" if torch.cuda.is_available() else "cpu", "mfu": None}
    if spec.get("flops"):
        out["flops_per_target_token"] = flops_per_target_token(tc, cfg, tok)
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        peak = spec.get("peak_tflops") or gpu_bf16_peak_tflops(gpu)
        out.update(gpu=gpu, peak_tflops=peak, flops_per_target_token=flops_per_target_token(tc, cfg, tok))
        if peak:
            out["mfu"] = out["flops_per_target_token"] * out["tokens_per_s"] / (peak * 1e12)
    return out


#: the CPU loop before the speed work, as settings of today's loop: float32 forward, PyTorch's per-tensor Adam, batch
#: widths rounded up to a multiple of 8 (and every core: the benchmark's --threads)
OLD_CPU_LOOP = {"amp_cpu": False, "adam_impl": "loop", "pad_multiple": 8, "dropout_impl": "bernoulli"}


def measure_speedup(spec: dict[str, Any], rounds: int, log=lambda m: None) -> dict[str, Any]:
    """The old CPU loop (:data:`OLD_CPU_LOOP`) and the default loop, each :func:`measure_loop` on ``spec``, alternated
    in this process (old-new, then new-old, ...: a trend in the machine's load hits both), with this CPU's bf16
    matmul peak (:func:`benchmarks.flops.measure_matmul_peak`) measured before every round and at the end. The
    default loop trains on the threads :func:`aiayn.training.loop.auto_threads` decides before the first round.

    Returns the per-round results, ``old`` / ``new`` (mean over rounds of each run's median tok/s), ``speedup``
    (new / old), ``peak_gflops`` (the best peak seen: the share below is then a lower bound),
    ``flops_per_target_token`` (padded shapes the default loop trained on), ``gflops`` and ``peak_share``.
    """
    from aiayn.training.loop import auto_threads

    from .flops import measure_matmul_peak

    # the default loop's own thread count (auto_threads), decided once before this benchmark loads the CPU: decided
    # at each run, the load average would count the benchmark's previous runs (session 34: 1 thread beside them)
    decided = auto_threads()
    torch.set_num_threads(max(1, int(spec.get("threads") or torch.get_num_threads())))
    res: dict[str, list] = {"old": [], "new": [], "peaks": [], "fp32_peaks": []}
    for r in range(rounds):
        res["peaks"].append(measure_matmul_peak())
        res["fp32_peaks"].append(measure_matmul_peak(torch.float32))
        order = (("old", OLD_CPU_LOOP), ("new", {})) if r % 2 == 0 else (("new", {}), ("old", OLD_CPU_LOOP))
        for name, recipe in order:
            log(f"[trainer] cpu loop {name}, round {r + 1} of {rounds}")
            run = dict(spec, run_dir=f"{spec['run_dir']}-{name}{r}", recipe=recipe, flops=name == "new" and r == 0)
            if name == "new":  # the threads the default loop decides for itself; the old one used all cores
                run["threads"] = decided
            res[name].append(measure_loop(run))
    res["peaks"].append(measure_matmul_peak())
    res["fp32_peaks"].append(measure_matmul_peak(torch.float32))
    old = float(np.mean([x["tokens_per_s"] for x in res["old"]]))
    new = float(np.mean([x["tokens_per_s"] for x in res["new"]]))
    peak = max(x["gflops"] for x in res["peaks"])
    fpt = res["new"][0]["flops_per_target_token"]
    fp32_peak = max(x["gflops"] for x in res["fp32_peaks"])
    return dict(res, old_tokens_per_s=old, new_tokens_per_s=new, speedup=new / old, peak_gflops=peak, fp32_peak_gflops=fp32_peak,
                flops_per_target_token=fpt, gflops=new * fpt / 1e9, peak_share=new * fpt / 1e9 / peak, rounds=rounds)


def measure_allocator(spec: dict[str, Any], rounds: int, log=lambda m: None) -> dict[str, Any]:
    """The default loop (:func:`measure_loop`) in worker processes on glibc's malloc and with tcmalloc preloaded
    (:mod:`aiayn.training.allocator`, what ``aiayn train-on`` and ``train-both`` give their children), alternated
    ``rounds`` times (glibc-tcmalloc, then tcmalloc-glibc, ...). Returns the per-run results and ``speedup`` (mean
    tcmalloc over mean glibc tok/s).

    Raises:
        RuntimeError: a worker failed (its reason).
    """
    res: dict[str, list] = {"glibc": [], "tcmalloc": []}
    for r in range(rounds):
        for name in (("glibc", "tcmalloc") if r % 2 == 0 else ("tcmalloc", "glibc")):
            log(f"[trainer] cpu loop on {name}, round {r + 1} of {rounds} (worker)")
            out, why = _loop_in_worker(dict(spec, run_dir=f"{spec['run_dir']}-{name}{r}", threads=0), 900, name)
            if out is None:
                raise RuntimeError(f"{name}: {why}")
            res[name].append(out)
    mean = {k: float(np.mean([x["tokens_per_s"] for x in v])) for k, v in res.items()}
    return dict(res, glibc_tokens_per_s=mean["glibc"], tcmalloc_tokens_per_s=mean["tcmalloc"],
                speedup=mean["tcmalloc"] / mean["glibc"], rounds=rounds)


def _allocator_row(res: dict[str, Any] | None, why: str = "") -> list:
    from .report import Row, na

    if res is None:
        return [na("trainer.cpu.loop_tcmalloc_speedup", "trainer", "cpu", "training loop, tcmalloc over glibc", "x", why)]
    per = lambda key: ", ".join(f"{x['tokens_per_s']:,.0f}" for x in res[key])  # noqa: E731
    return [Row("trainer.cpu.loop_tcmalloc_speedup", "trainer", "cpu", "training loop, tcmalloc over glibc", res["speedup"],
                "x", f"the default loop in worker processes, {res['rounds']} round(s) alternated; tok/s glibc {per('glibc')}, "
                f"tcmalloc {per('tcmalloc')} (aiayn.training.allocator: what train-on and train-both children get)",
                {"glibc": res["glibc"], "tcmalloc": res["tcmalloc"]})]


def _speedup_rows(res: dict[str, Any]) -> list:
    from .report import Row

    new0 = res["new"][0]
    shape = (f"d_model {new0['d_model']}, N {new0['n_layers']}, V {new0['vocab_size']}, {new0['max_tokens']:,}-token steps, "
             f"{len(res['new'])} round(s) alternated")
    per = lambda key: ", ".join(f"{x['tokens_per_s']:,.0f}" for x in res[key])  # noqa: E731
    peaks = ", ".join(f"{x['gflops']:,.0f}" for x in res["peaks"])
    return [
        Row("trainer.cpu.loop_old", "trainer", "cpu", "training loop, before (fp32, per-tensor Adam, widths x8)",
            res["old_tokens_per_s"], "tok/s", f"{shape}; per round {per('old')}", {"old": res["old"]}),
        Row("trainer.cpu.loop", "trainer", "cpu", "training loop", res["new_tokens_per_s"], "tok/s",
            f"the loop in one process (--processes 1; bf16 {'on' if new0['amp_cpu'] else 'off'}: measured at the start, fused Adam, widths x1, "
            f"threads decided at the start: {', '.join(str(x['threads']) for x in res['new'])}), same data; per round {per('new')}",
            {"new": res["new"]}),
        Row("trainer.cpu.loop_speedup", "trainer", "cpu", "training loop speed-up", res["speedup"], "x",
            "the one-process loop over the old fp32 eager loop, same data, same run (mean of each run's median record)"),
        Row("trainer.cpu.bf16_peak", "trainer", "cpu", "bf16 matmul peak (this run)", res["peak_gflops"], "GFLOP/s",
            f"best a @ b of {', '.join(res['peaks'][0]['by_shape'])} (shape@threads); before each round "
            f"and at the end: {peaks}", {"peaks": res["peaks"]}),
        Row("trainer.cpu.fp32_peak", "trainer", "cpu", "float32 matmul peak (this run)", res["fp32_peak_gflops"], "GFLOP/s",
            "the same shapes and threads in float32, for comparison (not the share's denominator)", {"fp32_peaks": res["fp32_peaks"]}),
        Row("trainer.cpu.loop_flops", "trainer", "cpu", "training loop FLOP/s", res["gflops"], "GFLOP/s",
            f"{res['flops_per_target_token'] / 1e6:.1f} MFLOP per target token (benchmarks/flops.py, padded shapes trained on)"),
        Row("trainer.cpu.loop_peak_share", "trainer", "cpu", "training loop, share of the bf16 matmul peak", res["peak_share"],
            "fraction", f"FLOP/s of the loop over the best bf16 matmul of the same run (goal 0.5); over the float32 peak: "
            f"{res['gflops'] / res['fp32_peak_gflops']:.0%}"),
    ]


def _loop_in_worker(spec: dict[str, Any], timeout: float, allocator: str = "glibc",
                    processes: int = 1) -> tuple[dict[str, Any] | None, str]:
    """:func:`measure_loop` in a fresh process, or with ``processes`` > 1 in that many under ``torchrun``
    (``torch.distributed.run --standalone``: DistributedDataParallel over gloo, rank 0 reports)."""
    from aiayn.training.allocator import allocator_env

    launch = ([] if processes == 1 else
              ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"])
    cmd = [sys.executable, *launch, "-m", "benchmarks.trainer", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=allocator_env(worker_env(int(spec.get("threads") or 1)), allocator),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return None, f"worker failed (exit {proc.returncode}): {' | '.join(tail)[:300]}"
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), ""
    except (IndexError, json.JSONDecodeError):
        return None, f"worker printed no JSON result: {proc.stdout[-200:]!r}"


#: the three ways :func:`measure_processes` trains the same steps on ``cores`` cores: the old loop as it ran before
#: the speed work (one process, every core, glibc's malloc), the default loop as one process of ``cores`` threads,
#: and the default loop as ``train-on --processes`` runs it (one-thread processes), both on train-on's allocator
WAYS = ("old", "threads", "processes")


def measure_processes(spec: dict[str, Any], rounds: int, cores: int, log=lambda m: None, per_process: int = 1) -> dict[str, Any]:
    """The same optimizer steps on ``cores`` cores three ways (:data:`WAYS`), each in worker processes, alternated
    ``rounds`` times (old-threads-processes, then the reverse, ...): the old loop (:data:`OLD_CPU_LOOP`, glibc's
    malloc) and the default loop (on the allocator ``train-on`` gives its children), each as one process with
    ``cores`` threads and ``cores`` micro-batches per step, and the default loop as ``cores`` processes of one
    thread each under ``torchrun`` (DistributedDataParallel over gloo, one micro-batch each per step), which is how
    ``aiayn train --processes`` and ``aiayn train-on --processes`` train. All train the same optimizer steps on the same micro-batches
    (:func:`aiayn.training.pipeline.step_groups`: W ranks with accumulation a = one process with a x W), so
    ``speedup`` (mean tok/s of the processes over the threads) is the gain of processes over threads alone and
    ``command_speedup`` (the processes over the old loop) the gain of the whole training command over the loop
    before the speed work. ``per_process``: micro-batches each process trains per step (the processes' accumulation;
    the one-process ways accumulate ``cores`` times as many): 1 is the group's spec, 3 the CPU recipe's
    (``accumulation=6`` over two processes).

    Raises:
        RuntimeError: a worker failed (its reason), or the ways trained different target tokens.
    """
    res: dict[str, list] = {name: [] for name in WAYS}
    for r in range(rounds):
        for name in (WAYS if r % 2 == 0 else WAYS[::-1]):
            log(f"[trainer] cpu loop, {cores} {'processes' if name == 'processes' else 'threads'}"
                f"{', old loop' if name == 'old' else ''}, round {r + 1} of {rounds} (worker)")
            run = dict(spec, run_dir=f"{spec['run_dir']}-{name}{r}")
            if name == "processes":
                run.update(threads=1, accumulation=per_process)
                out, why = _loop_in_worker(run, 900, "auto", processes=cores)
            else:
                run.update(threads=cores, accumulation=cores * per_process)
                if name == "old":
                    run["recipe"] = OLD_CPU_LOOP
                out, why = _loop_in_worker(run, 900, "glibc" if name == "old" else "auto")
            if out is None:
                raise RuntimeError(f"{name}: {why}")
            res[name].append(out)
    return dict(summarise_ways(res, rounds, cores), per_process=per_process)


def summarise_ways(res: dict[str, list], rounds: int, cores: int) -> dict[str, Any]:
    """``res`` (each of :data:`WAYS` -> its runs' :func:`measure_loop` results) with the mean tok/s of each way
    (``<way>_tokens_per_s``), ``speedup`` (processes over threads) and ``command_speedup`` (processes over old).

    Raises:
        RuntimeError: a way is missing or has no run, or the runs did not all train the same target tokens (a
            run's ``train_tokens``): the ratios compare speeds only on the same steps.
    """
    if any(not res.get(name) for name in WAYS):
        raise RuntimeError(f"every way needs a run: {', '.join(WAYS)}")
    trained = {x["train_tokens"] for name in WAYS for x in res[name]}
    if len(trained) != 1 or None in trained:
        raise RuntimeError(f"the ways trained different target tokens: {sorted(map(str, trained))}")
    mean = {name: float(np.mean([x["tokens_per_s"] for x in res[name]])) for name in WAYS}
    return dict(res, old_tokens_per_s=mean["old"], threads_tokens_per_s=mean["threads"],
                processes_tokens_per_s=mean["processes"], speedup=mean["processes"] / mean["threads"],
                command_speedup=mean["processes"] / mean["old"], rounds=rounds, cores=cores)


def _processes_rows(res: dict[str, Any] | None, why: str = "", speed: dict[str, Any] | None = None) -> list:
    """Rows of :func:`measure_processes`: processes over threads, the training command over the old loop and the
    command's FLOP/s as a share of the bf16 matmul peak. ``speed`` (:func:`measure_speedup` of the same run, or
    None when it failed) gives that peak and the FLOPs per target token; without it the share is n/a."""
    from .report import Row, na

    name = "training loop, processes over threads"
    cmd, share = "training command speed-up (aiayn train's default processes)", "training command, share of the bf16 matmul peak"
    if res is None:
        return [na("trainer.cpu.loop_processes_speedup", "trainer", "cpu", name, "x", why),
                *_command_rows(None, None, "", cmd, share, why)]
    per = lambda key: ", ".join(f"{x['tokens_per_s']:,.0f}" for x in res[key])  # noqa: E731
    n = res["cores"]
    return [Row("trainer.cpu.loop_processes_speedup", "trainer", "cpu", name, res["speedup"], "x",
                f"{n} processes x 1 thread (torchrun, DDP over gloo) over 1 process x {n} threads, the same steps "
                f"({n} micro-batches each), {res['rounds']} round(s) alternated; tok/s threads {per('threads')}, "
                f"processes {per('processes')}", {"threads": res["threads"], "processes": res["processes"]}),
            *_command_rows(res, speed, "", cmd, share,
                           f"the loop as `aiayn train` trains by default on {n} cores (and train-on --processes {n}): "
                           f"{n} processes x 1 thread, its allocator, over the old fp32 loop (1 process x {n} threads, glibc), the same steps, alternated "
                           f"with the row above; tok/s old {per('old')}, processes {per('processes')} (goal >= 3)")]


def _command_rows(res: dict[str, Any] | None, speed: dict[str, Any] | None, suffix: str, name: str, share: str,
                  note: str) -> list:
    """The two rows of one training-command measurement (:func:`measure_processes`): ``trainer.cpu.command_speedup
    <suffix>`` (processes over the old loop) and ``trainer.cpu.command_peak_share<suffix>`` (the processes' FLOP/s
    over the bf16 matmul peak of ``speed``, :func:`measure_speedup` of the same run, with its FLOPs per target
    token). ``res`` None: both n/a with ``note`` as the reason; ``speed`` None: the share n/a."""
    from .report import Row, na

    sid, shid = f"trainer.cpu.command_speedup{suffix}", f"trainer.cpu.command_peak_share{suffix}"
    if res is None:
        return [na(sid, "trainer", "cpu", name, "x", note), na(shid, "trainer", "cpu", share, "fraction", note)]
    rows = [Row(sid, "trainer", "cpu", name, res["command_speedup"], "x", note, {w: res[w] for w in WAYS})]
    if speed is None:
        return rows + [na(shid, "trainer", "cpu", share, "fraction", "no bf16 peak: the in-process loop comparison failed")]
    gflops = res["processes_tokens_per_s"] * speed["flops_per_target_token"] / 1e9
    return rows + [Row(shid, "trainer", "cpu", share, gflops / speed["peak_gflops"], "fraction",
                       f"{gflops:,.0f} GFLOP/s over the best bf16 matmul of the same run ({speed['peak_gflops']:,.0f}; "
                       f"goal 0.5); over the float32 peak: {gflops / speed['fp32_peak_gflops']:.0%}")]


#: the CPU recipe's steps (docs/training.md, "Training that goes on": accumulation 6 of 4,096-token micro-batches
#: over two processes) for the training command's second measurement: micro-batches per process, tokens each
RECIPE_STEPS = {"per_process": 3, "max_tokens": 4096}


def _recipe_rows(res: dict[str, Any] | None, why: str = "", speed: dict[str, Any] | None = None) -> list:
    """The training command over the old loop at the CPU recipe's steps (:data:`RECIPE_STEPS`), and its share of
    the bf16 matmul peak (``speed`` as in :func:`_processes_rows`; the FLOPs per target token of the group's
    spec, whose shapes differ only in batch rows)."""
    name = "training command speed-up, the CPU recipe's steps"
    share = "training command at the recipe's steps, share of the bf16 matmul peak"
    if res is None:
        return _command_rows(None, None, "_recipe", name, share, why)
    per = lambda key: ", ".join(f"{x['tokens_per_s']:,.0f}" for x in res[key])  # noqa: E731
    n, k = res["cores"], res["per_process"]
    return _command_rows(res, speed, "_recipe", name, share,
                         f"as the row above, {k} x {res['processes'][0]['max_tokens']:,}-token micro-batches per process "
                         f"per step ({n * k} per step); tok/s old {per('old')}, 1 process x {n} threads {per('threads')}, "
                         f"processes {per('processes')} (goal >= 3)")


def _loop_row(device: str, key: str, name: str, res: dict[str, Any] | None, why: str = "") -> list:
    from .report import Row, na

    rid = f"trainer.{device}.{key}"
    if res is None:
        return [na(rid, "trainer", device, name, "tok/s", why)]
    note = (f"d_model {res['d_model']}, N {res['n_layers']}, V {res['vocab_size']}, {res['max_tokens']:,}-token steps, "
            f"{'compiled' if res['compile'] else 'eager'}, median of {max(1, len(res['records']) - 1)} records")
    rows = [Row(rid, "trainer", device, name, res["tokens_per_s"], "tok/s", note, res)]
    if device == "cuda":
        if res.get("mfu") is None:
            rows.append(na(f"{rid}.mfu", "trainer", device, "MFU (loop above)" if key == "loop" else f"MFU, {name}", "fraction",
                           f"unknown bf16 peak for GPU {res.get('gpu')!r} (pass --peak-tflops)"))
        else:
            rows.append(Row(f"{rid}.mfu", "trainer", device, "MFU (loop above)" if key == "loop" else f"MFU, {name}", res["mfu"], "fraction",
                            f"{res['flops_per_target_token'] * res['tokens_per_s'] / 1e12:.0f} of {res['peak_tflops']:.0f} TFLOP/s bf16"))
    return rows


def run(ctx) -> list:
    """The ``trainer`` group on every device of ``ctx`` (see the module docstring)."""
    from .report import Row, na

    rows: list = []
    q = ctx.quick
    with tempfile.TemporaryDirectory(prefix="aiayn-bench-trainer-") as tmp:
        root = Path(tmp)
        data_dir = make_data_dir(root, 3_000 if q else 120_000)
        for device in ctx.devices:
            ctx.log(f"[trainer] {device} input pipeline")
            p = measure_pipeline(data_dir, device, epochs=2 if q else 3, before_epochs=1, max_tokens=25000)
            new = float(np.median(p["new_tokens_per_s"]))
            before = {k: float(np.median(v)) for k, v in p["before_tokens_per_s"].items()}
            size = f"{p['pairs']:,} pairs, {p['target_tokens_per_epoch']:,} target tokens and {p['steps_per_epoch']} steps an epoch"
            rows += [
                Row(f"trainer.{device}.pipeline", "trainer", device, "input pipeline", new, "tok/s",
                    f"batching + collation{' + pinned copy' if device == 'cuda' else ''}, {size}, median of {len(p['new_tokens_per_s'])} epochs", p),
                Row(f"trainer.{device}.pipeline_before", "trainer", device, "before: id lists + collate",
                    before["head"], "tok/s", "the loop's path before the loader (pad_ids collate, blocking copy), same data", p),
                Row(f"trainer.{device}.pipeline_before_c914517", "trainer", device, "before: per-row collate (c914517)",
                    before["c914517"], "tok/s", "the collate of the GPU runs (commit c914517), same data", p),
                Row(f"trainer.{device}.pipeline_speedup", "trainer", device, "speed-up over id lists + collate",
                    new / before["head"], "x", "median over median"),
                Row(f"trainer.{device}.pipeline_speedup_c914517", "trainer", device, "speed-up over c914517",
                    new / before["c914517"], "x", "median over median"),
                Row(f"trainer.{device}.cache_first_start", "trainer", device, "token cache, first start (tokenise + write)",
                    p["cache_first_start_s"], "s", size),
                Row(f"trainer.{device}.cache_later_start", "trainer", device, "token cache, later start (memory-map)",
                    p["cache_later_start_s"], "s", "before: tokenise at every start, next row"),
                Row(f"trainer.{device}.tokenise_every_start", "trainer", device, "tokenise in memory (before, every start)",
                    p["tokenise_in_memory_s"], "s", "load_split + encode_pairs"),
            ]
            threads = ctx.threads
            if device == "cpu":
                spec = dict(data_dir=str(data_dir), run_dir=str(root / "run-cpu"), device="cpu", threads=threads,
                            preset="tiny" if q else "base",
                            overrides={} if q else dict(d_model=256, n_heads=8, d_ff=1024, n_layers=3),
                            max_tokens=1024 if q else 2048, steps=8 if q else 10, log_every=2 if q else 2, compile=False)
                speed = None
                try:
                    speed = measure_speedup(spec, 1 if q else 2, log=ctx.log)
                    rows += _speedup_rows(speed)
                except Exception as exc:  # a failure must not lose the other rows
                    rows.append(na("trainer.cpu.loop", "trainer", "cpu", "training loop", "tok/s", f"{type(exc).__name__}: {exc}"))
                from aiayn.training.allocator import find_tcmalloc

                if find_tcmalloc() is None:
                    rows += _allocator_row(None, "no tcmalloc on this machine (apt install libtcmalloc-minimal4)")
                else:
                    try:
                        rows += _allocator_row(measure_allocator(spec, 1 if q else 2, log=ctx.log))
                    except Exception as exc:
                        rows += _allocator_row(None, f"{type(exc).__name__}: {exc}")
                cores = max(1, int(threads or os.cpu_count() or 1))
                if cores < 2:
                    one = "one core: nothing to split between processes or threads"
                    rows += _processes_rows(None, one) + _recipe_rows(None, one)
                else:
                    try:
                        rows += _processes_rows(measure_processes(spec, 1 if q else 2, cores, log=ctx.log), speed=speed)
                    except Exception as exc:
                        rows += _processes_rows(None, f"{type(exc).__name__}: {exc}")
                    recipe = dict(spec, run_dir=str(root / "run-cpu-recipe"), steps=4 if q else 8,
                                  max_tokens=1024 if q else RECIPE_STEPS["max_tokens"])
                    try:
                        rows += _recipe_rows(measure_processes(recipe, 1 if q else 2, cores, log=ctx.log,
                                                               per_process=RECIPE_STEPS["per_process"]), speed=speed)
                    except Exception as exc:
                        rows += _recipe_rows(None, f"{type(exc).__name__}: {exc}")
            else:
                ctx.log("[trainer] cuda training loop, d_model 256, N 6")
                spec = dict(data_dir=str(data_dir), run_dir=str(root / "run-cuda"), device="cuda", threads=threads,
                            preset="base", overrides=dict(d_model=256, n_heads=8, d_ff=1024, n_layers=6),
                            max_tokens=25000, steps=20 if q else 100, log_every=5 if q else 10, compile=False,
                            peak_tflops=ctx.peak_tflops)
                try:
                    rows += _loop_row("cuda", "loop", "training loop", measure_loop(spec))
                except Exception as exc:
                    rows.append(na("trainer.cuda.loop", "trainer", "cuda", "training loop", "tok/s", f"{type(exc).__name__}: {exc}"))
                torch.cuda.empty_cache()
                name = "base model loop, torch.compile"
                if getattr(ctx, "compile", True):
                    ctx.log(f"[trainer] cuda base model, torch.compile (worker, time limit {ctx.compile_timeout:.0f} s)")
                    base = dict(spec, run_dir=str(root / "run-cuda-base"), overrides={}, compile=True,
                                steps=20 if q else 80, log_every=5 if q else 10)
                    res, why = _loop_in_worker(base, ctx.compile_timeout)
                else:
                    res, why = None, "skipped (--no-compile)"
                rows += _loop_row("cuda", "base_compiled", name, res, f"torch.compile: {why}")
    return rows


if __name__ == "__main__":  # worker: python -m benchmarks.trainer SPEC_JSON -> one JSON line (rank 0 under torchrun)
    _spec = json.loads(sys.argv[1])
    torch.set_num_threads(max(1, int(_spec.get("threads") or 1)))
    _out = measure_loop(_spec)
    if _out:
        print(json.dumps(_out, default=str))
