"""Checkpoint directories: ``config.json`` + ``model.safetensors`` + ``spm.model`` (+ model card, metrics).

Weights are stored with safetensors, never pickle: nothing read from a checkpoint is ever unpickled.
Loading checks every file and names the one at fault: a missing file raises ``FileNotFoundError``, a
truncated, corrupt or foreign one raises ``ValueError``. File names, the format tag and the reading of
``config.json`` live in the torch-free :mod:`aiayn.checkpoint_format` (re-exported here).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .checkpoint_format import (  # noqa: F401 - the format's names stay importable from here
    CONFIG_FILE,
    FORMAT,
    FORMAT_VERSION,
    SPM_FILE,
    WEIGHTS_FILE,
    read_config,
)
from .files import atomic_path, atomic_write_bytes
from .model.transformer import Transformer
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def save_checkpoint(
    directory: str | Path,
    model: Transformer,
    *,
    spm_model: str | Path | bytes | None = None,
    dtype: str = "float32",
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write ``model`` as a checkpoint directory; every file is written atomically (temp file, rename).

    Args:
        directory: created if missing.
        model: the Transformer; its config goes into ``config.json``.
        spm_model: the SentencePiece model (path or serialized bytes) to copy in as ``spm.model``.
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"`` for the stored weights.
        meta: free-form JSON-able metadata (direction, languages, training summary...).

    Returns:
        the directory path.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", _DTYPES[dtype]).contiguous() for k, v in model.state_dict().items()}
    with atomic_path(d / WEIGHTS_FILE) as tmp:
        save_file(state, str(tmp), metadata={"format": FORMAT, "dtype": dtype})
    if spm_model is not None:
        data = spm_model if isinstance(spm_model, (bytes, bytearray)) else Path(spm_model).read_bytes()
        atomic_write_bytes(d / SPM_FILE, bytes(data))
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model.cfg.to_dict(),
        "dtype": dtype,
        "num_parameters": model.num_parameters(),
        "meta": meta or {},
    }
    atomic_write_bytes(d / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True).encode())
    return d


def load_state(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file (no pickle involved).

    Raises:
        FileNotFoundError: missing file. ValueError: truncated or not a safetensors file.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint file missing: {p}")
    try:
        return load_file(str(p))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ValueError(f"{p} is not a readable safetensors file ({exc}); it may be truncated or corrupt") from exc


def load_checkpoint(
    directory: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[Transformer, dict[str, Any]]:
    """Build the model of a checkpoint directory and load its weights (in eval mode).

    Returns:
        ``(model, config)`` where ``config`` is the parsed ``config.json`` (``config["meta"]`` holds metadata).

    Raises:
        FileNotFoundError: the directory, ``config.json`` or ``model.safetensors`` is missing.
        ValueError: a file is truncated, corrupt or belongs to another model (names the file).
    """
    d = Path(directory)
    config = read_config(d)
    state = load_state(d / WEIGHTS_FILE)
    model = Transformer(config["model_config"])
    load_weights_into(model, state, d / WEIGHTS_FILE, against=str(d / CONFIG_FILE))
    model.to(device=device, dtype=dtype).eval()
    return model, config


def load_weights_into(model: Transformer, state: dict[str, torch.Tensor], source: str | Path, *, against: str = "this model") -> None:
    """Check that ``state`` (tensors read from ``source``) fits ``model`` exactly, then copy it in as float32.

    Raises:
        ValueError: a tensor name is missing or foreign, a shape differs (another d_model, N, vocabulary size...)
            or a value is NaN/infinite; the message names ``source`` and what it was checked ``against``.
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{source} does not match {against}: missing {missing[:5]}, unexpected {unexpected[:5]}"
            " (a foreign or mismatched weights file)"
        )
    for key, value in expected.items():
        if tuple(state[key].shape) != tuple(value.shape):
            raise ValueError(f"{source}: {key} has shape {tuple(state[key].shape)}, {against} expects {tuple(value.shape)}")
        if not torch.isfinite(state[key].float()).all():
            raise ValueError(f"{source}: {key} holds NaN or infinite values")
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})


def average_checkpoints(paths: list[str | Path]) -> dict[str, torch.Tensor]:
    """Arithmetic mean of the weights of several safetensors files (Section 6.1: "averaging the last 5
    checkpoints"), computed in float64 and returned in float32.

    Raises:
        ValueError: fewer than one path, or files with different tensor names or shapes.
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    total: dict[str, torch.Tensor] | None = None
    for path in paths:
        state = load_state(path)
        if total is None:
            total = {k: v.to(torch.float64).clone() for k, v in state.items()}
            continue
        if set(state) != set(total) or any(state[k].shape != total[k].shape for k in total):
            raise ValueError(f"{path} does not have the same tensors as {paths[0]}: cannot average")
        for k, v in state.items():
            total[k] += v.to(torch.float64)
    assert total is not None
    return {k: (v / len(paths)).to(torch.float32) for k, v in total.items()}
