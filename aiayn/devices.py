"""Which device a model runs on: the user's choice checked against this machine, or the best one available."""
from __future__ import annotations

import torch


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` if given (checked: it must exist on this machine), else CUDA when available, else CPU.

    Raises:
        ValueError: an unknown device name (``"banana"``), a device torch does not run the model on here
            (``"cuda"`` without CUDA, ``"cuda:3"`` on a machine with fewer GPUs, ``"mps"`` without MPS).
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"unknown device {str(device)!r}; use cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(device)!r} asked for but CUDA is not available on this machine "
                             f"(torch {torch.__version__}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {str(device)!r} asked for but this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {str(device)!r} asked for but MPS is not available on this machine; use --device cpu")
    elif dev.type != "cpu":
        raise ValueError(f"device {str(device)!r} is not supported; use cpu, cuda, cuda:N or mps")
    return dev
