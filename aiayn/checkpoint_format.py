"""The on-disk format of a checkpoint directory, without torch: its file names, the format tag and version
of ``config.json``, and the reading and validation of ``config.json``. The one source of truth for both
:mod:`aiayn.checkpoint` (which writes and loads the weights, with torch) and the app's Overview page (which
shows a checkpoint's model card in milliseconds, before torch is imported). Not a paper section: this is
the project's storage format (safetensors weights, SentencePiece model, JSON config).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .model.config import TransformerConfig  # a plain dataclass: no torch

#: the ``"format"`` tag of every ``config.json`` written by :func:`aiayn.checkpoint.save_checkpoint`
FORMAT = "aiayn-checkpoint"
#: highest ``"format_version"`` this code reads
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SPM_FILE = "spm.model"
#: the files a complete checkpoint directory holds (config first: it says what the others must be)
CHECKPOINT_FILES = (CONFIG_FILE, WEIGHTS_FILE, SPM_FILE)
#: an imported Marian (Opus-MT) checkpoint's tokenizer files, in place of ``spm.model``
#: (:mod:`aiayn.marian_tokenizer`, written by ``aiayn import-marian``)
MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB = "source.spm", "target.spm", "vocab.json"
MARIAN_TOKENIZER_FILES = (MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB)
#: the shipped checkpoints (``<repo>/checkpoints/{en-de,de-en}``), used when ``$AIAYN_CHECKPOINTS`` is unset
DEFAULT_CHECKPOINTS_DIR = Path(__file__).resolve().parent.parent / "checkpoints"


def weights_sha256(checkpoint: str | Path) -> str:
    """SHA-256 (hex) of a checkpoint directory's weights file: what says which weights a stored evaluation, sweep,
    alignment or verdict was computed on.

    Raises:
        FileNotFoundError: no weights file.
    """
    from .files import sha256_file

    return sha256_file(Path(checkpoint).expanduser() / WEIGHTS_FILE)


def read_config(directory: str | Path) -> dict[str, Any]:
    """Read and validate ``config.json`` of a checkpoint directory (no weights read, no torch).

    Returns:
        the parsed JSON object, plus ``"model_config"``: the :class:`~aiayn.model.config.TransformerConfig`
        of ``config["model"]`` (d_model, n_layers, n_heads, d_ff, P_drop, vocabulary size...).

    Raises:
        FileNotFoundError: the directory or its ``config.json`` is missing.
        ValueError: ``config.json`` is unreadable, not valid JSON, not an aiayn checkpoint config, of a newer
            ``format_version``, or holds an invalid model config (the message names the file).
    """
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {d}")
    path = d / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file missing: {path}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); the checkpoint is truncated or corrupt") from exc
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise ValueError(f"{path} is not an aiayn checkpoint config (expected \"format\": \"{FORMAT}\")")
    if config.get("format_version", 0) > FORMAT_VERSION:
        raise ValueError(f"{path} has format_version {config['format_version']}; this aiayn reads up to {FORMAT_VERSION}")
    try:
        config["model_config"] = TransformerConfig.from_dict(config["model"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: invalid model config: {exc}") from exc
    return config


def check_files(directory: str | Path) -> None:
    """Check that every file of :data:`CHECKPOINT_FILES` exists in ``directory`` (contents are not read); an
    imported Marian checkpoint (one with ``vocab.json``) has :data:`MARIAN_TOKENIZER_FILES` in place of ``spm.model``.

    Raises:
        FileNotFoundError: naming the first missing file.
    """
    d = Path(directory)
    names = CHECKPOINT_FILES
    if (d / MARIAN_VOCAB).is_file():
        names = (CONFIG_FILE, WEIGHTS_FILE) + MARIAN_TOKENIZER_FILES
    for name in names:
        if not (d / name).is_file():
            raise FileNotFoundError(f"checkpoint file missing: {d / name}")
