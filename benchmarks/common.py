"""Run settings shared by every group, model configurations and the shipped-checkpoint lookup."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from aiayn.checkpoint_format import CHECKPOINT_FILES
from aiayn.model.config import TransformerConfig

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Context:
    """Settings of one benchmark run.

    Attributes:
        devices: ``"cpu"`` and, where CUDA is present, ``"cuda"``.
        quick: tiny sizes and few repeats (tests / CI); the figures then say nothing about speed.
        threads: ``torch.set_num_threads`` for this process and every worker.
        warmup / repeats: untimed and timed calls per measurement (latencies use ``latency_repeats``).
        checkpoint: the checkpoint directory for decoding / capture / memory (None: random model).
        compile_timeout: seconds allowed to a ``torch.compile`` worker before it is reported n/a.
        peak_tflops: bf16 peak to use for MFU instead of the table in :mod:`benchmarks.flops`.
        info: run-level facts the groups record (e.g. which model was decoded), written to the JSON.
        log: progress messages (stderr).
    """

    devices: list[str]
    quick: bool = False
    threads: int = 1
    warmup: int = 3
    repeats: int = 10
    latency_repeats: int = 15
    checkpoint: Path | None = None
    compile_timeout: float = 600.0
    peak_tflops: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))

    def settings(self) -> dict[str, Any]:
        return {"devices": self.devices, "quick": self.quick, "threads": self.threads, "warmup": self.warmup,
                "repeats": self.repeats, "latency_repeats": self.latency_repeats,
                "checkpoint": str(self.checkpoint) if self.checkpoint else None,
                "compile_timeout_s": self.compile_timeout, "peak_tflops_override": self.peak_tflops}


def shipped_checkpoint(path: str | Path | None = None) -> Path | None:
    """``path`` (or the shipped ``checkpoints/en-de``, ``$AIAYN_CHECKPOINTS/en-de`` when set, as the app
    and :class:`aiayn.Translator` read it) when it holds a complete checkpoint, else None."""
    if path is None:
        from aiayn.translator import default_checkpoint

        path = default_checkpoint("en-de")
    d = Path(path)
    return d if all((d / f).is_file() for f in CHECKPOINT_FILES) else None


def checkpoint_info(path: Path) -> dict[str, Any]:
    """What a result needs to say about the checkpoint used: path, config, meta (git commit, step...),
    the weight file's size and modification time, and the last line of ``metrics.jsonl``."""
    from aiayn.checkpoint import read_config

    cfg = read_config(path)
    info: dict[str, Any] = {"path": str(path), "config": cfg.get("model")}
    for key in ("meta", "dtype", "num_parameters"):
        if key in cfg:
            info[key] = cfg[key]
    w = path / "model.safetensors"
    st = w.stat()
    info["weights_bytes"] = st.st_size
    info["weights_mtime"] = st.st_mtime
    metrics = path / "metrics.jsonl"
    if metrics.is_file():
        lines = [ln for ln in metrics.read_text().splitlines() if ln.strip()]
        if lines:
            try:
                info["last_metrics"] = json.loads(lines[-1])
            except json.JSONDecodeError:
                pass
    return info


#: The shipped models' shape (d_model 256, N=3, h=8, 8k joint BPE vocabulary); used for the CPU training
#: race and, without a checkpoint, for a randomly initialised stand-in.
SHIPPED_SHAPE = dict(d_model=256, n_heads=8, d_ff=1024, n_layers=3, vocab_size=8000, max_len=256)


def train_config(device: str, quick: bool) -> tuple[TransformerConfig, dict[str, int]]:
    """Model and batch of the training race: ``(cfg, {"batch", "src_len", "tgt_len"})``.

    CPU: the shipped shape, 32 pairs of 32 x 32 positions (1,024 target tokens a step), fp32. GPU: the
    paper's base model (Table 3, vocabulary 37,000 as in Section 5.1), 384 pairs of 64 x 64 positions =
    24,576 source + 24,576 target tokens (the paper's ~25,000 + 25,000, Section 5.1), bf16 autocast.
    Quick: the tiny preset and a 4 x 8 x 8 batch.

    P_drop = 0.1 everywhere, attention weights included (``attention_dropout = 0.1``): ``torch.nn.Transformer``
    has one dropout rate for residuals and attention weights, so this is the configuration both can run.
    """
    drop = dict(dropout=0.1, attention_dropout=0.1)
    if quick:
        return TransformerConfig.preset("tiny", vocab_size=320, max_len=64, **drop), dict(batch=4, src_len=8, tgt_len=8)
    if device == "cuda":
        return TransformerConfig.preset("base", vocab_size=37000, max_len=256, **drop), dict(batch=384, src_len=64, tgt_len=64)
    return TransformerConfig.preset("base", **dict(SHIPPED_SHAPE, **drop)), dict(batch=32, src_len=32, tgt_len=32)


def worker_env(threads: int) -> dict[str, str]:
    """Environment of a worker process: the repository importable, thread counts fixed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    return env


def run_worker(task: str, spec: dict[str, Any], *, threads: int, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """Run ``python -m benchmarks.worker TASK SPEC_JSON`` in a fresh process; its last stdout line is JSON.

    Returns:
        ``(result, "")`` or ``(None, reason)`` on time-out, crash or unreadable output.
    """
    cmd = [sys.executable, "-m", "benchmarks.worker", task, json.dumps(dict(spec, threads=threads))]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=worker_env(threads), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return None, f"worker failed (exit {proc.returncode}): {' | '.join(tail)[:300]}"
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    try:
        return json.loads(lines[-1]), ""
    except (IndexError, json.JSONDecodeError):
        return None, f"worker printed no JSON result: {proc.stdout[-200:]!r}"


def set_threads(n: int) -> None:
    torch.set_num_threads(max(1, int(n)))
