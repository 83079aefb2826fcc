"""What a result was measured on: host, CPU model and cores, GPU, torch version, date, command, git commit."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """CPU model name from ``/proc/cpuinfo`` (Linux), else :func:`platform.processor`, else ``"unknown"``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def gpu_name() -> str | None:
    """Name of CUDA device 0, or None when CUDA is absent (never raises)."""
    try:
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # pragma: no cover - broken driver
        return None
    return None


def git_commit(path: Path = REPO) -> str | None:
    """``git rev-parse HEAD`` of ``path`` (plus ``-dirty`` when the tracked files differ), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=path, capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def slug(text: str) -> str:
    """Lower-case file-name-safe form: ``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def machine_info(argv: list[str] | None = None) -> dict[str, Any]:
    """JSON-able description of this machine and run: host, OS, Python, CPU model, logical cores, torch
    threads, GPU name / memory / CUDA version (None without CUDA), torch version, UTC date, the exact
    command line and the git commit."""
    gpu = gpu_name()
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": gpu,
        "gpu_memory_gib": None,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in ([sys.executable] + list(sys.argv) if argv is None else argv)),
        "git_commit": git_commit(),
    }
    if gpu is not None:
        try:
            info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        except Exception:  # pragma: no cover
            pass
    return info
