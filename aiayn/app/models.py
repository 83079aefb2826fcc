"""The app's models: where the checkpoints are, the translator of each direction loaded once per server
process (``st.cache_resource``), what a checkpoint says about itself without loading it (for the Overview's
model card, without torch), and the background import of torch. Not a paper section: the serving job.

Importing this module does not import torch: the model code is imported inside the functions that load it.
"""
from __future__ import annotations

import gc
import importlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from ..checkpoint_format import CHECKPOINT_FILES, DEFAULT_CHECKPOINTS_DIR, check_files, read_config
from .model_picker import chosen_checkpoint

DIRECTIONS: tuple[str, ...] = ("en-de", "de-en")
DIRECTION_LABELS = {"en-de": "English → German", "de-en": "German → English"}
DEFAULT_DIRECTION = "en-de"
#: seconds :func:`warm_imports` waits before importing (the page that asked finishes drawing first)
WARM_DELAY_S = 0.5


class ModelUnavailable(RuntimeError):
    """The checkpoint of a direction could not be loaded (message names the file at fault)."""


def checkpoints_dir() -> Path:
    """Directory holding ``en-de/`` and ``de-en/``: ``$AIAYN_CHECKPOINTS`` (read now) or the shipped one
    (:data:`aiayn.checkpoint_format.DEFAULT_CHECKPOINTS_DIR`)."""
    env = os.environ.get("AIAYN_CHECKPOINTS")
    return Path(env) if env else DEFAULT_CHECKPOINTS_DIR


def checkpoint_path(direction: str) -> Path:
    """Checkpoint directory of ``direction`` (``"en-de"`` or ``"de-en"``) this session is served: the model chosen
    in the sidebar's picker (:func:`aiayn.app.model_picker.chosen_checkpoint`), by default the shipped one.

    Raises:
        ValueError: an unknown direction.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; choose one of {DIRECTIONS}")
    return chosen_checkpoint(direction)  # the sidebar's model picker (the shipped model by default)


def model_key(direction: str) -> tuple[str, str]:
    """The cache key of the model this session is served for ``direction``: the picked checkpoint's path and its
    :func:`checkpoint_stamp` (two sessions that picked different models of one direction must not share results;
    a re-export reloads). Raises ValueError as :func:`checkpoint_path`."""
    path = checkpoint_path(direction)
    return str(path), checkpoint_stamp(path)


def checkpoint_stamp(path: str | Path) -> str:
    """Modification stamp (mtime in ns and size in bytes of each file of a checkpoint directory), part of
    the cache keys so that a re-exported checkpoint is reloaded; a missing file reads ``name:missing``."""
    parts = []
    for name in CHECKPOINT_FILES:
        p = Path(path) / name
        try:
            stat = p.stat()
            parts.append(f"{name}:{stat.st_mtime_ns}:{stat.st_size}")
        except OSError:
            parts.append(f"{name}:missing")
    return "|".join(parts)


#: environment variable: torch intra-op threads of the app's server process (default: see :func:`serving_threads`)
THREADS_ENV = "AIAYN_TORCH_THREADS"
#: the most threads the server takes by default: the decode queue runs one batch at a time, and a class's batch
#: measured faster with two sleeping threads than with one, on a quiet machine and no slower under load
DEFAULT_SERVING_THREADS = 2


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity where the OS tells it, else ``os.cpu_count()``), >= 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def serving_threads() -> int:
    """Torch intra-op threads for the app's server: ``$AIAYN_TORCH_THREADS``, default
    ``min(DEFAULT_SERVING_THREADS, usable_cores())``.

    The sessions take turns on the model (:func:`decode_queue`), so one job (often a class's batch of sentences)
    runs at a time and its threads compete with the sessions' page scripts only. Torch's own default (one thread
    per core) spun against those scripts; one thread left the batch's beam search at one core; two threads whose
    OpenMP workers sleep while they wait (``OMP_WAIT_POLICY=PASSIVE``, set by :mod:`aiayn.app.preload`) answered
    30 students faster than one on a quiet machine and no slower under load (docs/benchmarks.md, "Classroom on the
    paper-size model, third round").

    Raises:
        ValueError: the variable is set to something other than a positive integer.
    """
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return min(DEFAULT_SERVING_THREADS, usable_cores())
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{THREADS_ENV} must be a positive integer (torch threads of the app server), got {raw!r}")
    return int(raw)


@st.cache_resource(show_spinner="Loading the model (once per server process)…", max_entries=6)
def _load_translator(path: str, stamp: str):  # noqa: ARG001 - stamp is part of the cache key
    import torch  # only when a page needs the model

    from ..translator import Translator

    torch.set_num_threads(serving_threads())  # process-wide: the whole server shares one setting
    tr = Translator.load(path)
    # torch, Streamlit, plotly and the model live as long as the server: a full collection of the cyclic garbage
    # collector walked all of them, holding the GIL so long that it stalled every session's script (measured in
    # docs/benchmarks.md). Frozen, they are never walked again; what sessions create later is collected as before.
    gc.collect()
    gc.freeze()
    return tr


#: environment variable: most sentences of different sessions decoded in one beam search (default 32, 1 = never
#: batch; see :func:`serving_max_batch` and :class:`aiayn.serving.DecodeQueue`)
BATCH_ENV = "AIAYN_MAX_BATCH"


def serving_max_batch() -> int:
    """Most sentences the server decodes together: ``$AIAYN_MAX_BATCH``, default
    :data:`aiayn.serving.DEFAULT_MAX_BATCH` (32). 1 turns batching off: sessions still take turns, and every
    result is bit for bit a lone translation's.

    Raises:
        ValueError: the variable is set to something other than a positive integer.
    """
    from ..serving import DEFAULT_MAX_BATCH

    raw = os.environ.get(BATCH_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BATCH
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{BATCH_ENV} must be a positive integer (sentences decoded together), got {raw!r}")
    return int(raw)


#: environment variable: the decode queue's gathering window in milliseconds (default
#: :data:`aiayn.serving.DEFAULT_GATHER_MS`, 0 = none; see :func:`serving_gather_ms`)
GATHER_ENV = "AIAYN_GATHER_MS"


def serving_gather_ms() -> float:
    """The server's gathering window: ``$AIAYN_GATHER_MS`` milliseconds, default
    :data:`aiayn.serving.DEFAULT_GATHER_MS`. A sentence that finds the model idle waits that long for a second one
    (and, once others came, for the rest of the class: :class:`aiayn.serving.DecodeQueue`), so that a class's
    requests arriving together share one beam search; 0 decodes it at once.

    Raises:
        ValueError: the variable is set to something other than a finite number >= 0.
    """
    import math

    from ..serving import DEFAULT_GATHER_MS

    raw = os.environ.get(GATHER_ENV, "").strip()
    if not raw:
        return DEFAULT_GATHER_MS
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{GATHER_ENV} must be a number of milliseconds >= 0 (the decode queue's gathering window; "
                         f"0 = none), got {raw!r}")
    return value


@st.cache_resource(show_spinner=False)
def announcements():
    """The process's one :class:`aiayn.serving.Announcements`, shared by every decode queue: the script runs that
    will soon ask for a sentence (:func:`announce_sentence`), which a gathering sentence waits for."""
    from ..serving import Announcements

    return Announcements()


def announce_sentence(checkpoint: str | None = None) -> None:
    """Say that this script run (its thread) will soon ask the decode queue of ``checkpoint`` (a checkpoint
    directory's path, as :func:`checkpoint_path` gives it; None: a queue it cannot name yet, which every queue then
    waits for) for a sentence: a sentence gathering others in that queue waits for it
    (:class:`aiayn.serving.Announcements`). Its job takes it back, else :func:`withdraw_sentence`."""
    announcements().announce(checkpoint)


def withdraw_sentence() -> None:
    """Take back this script run's announcement (:func:`announce_sentence`), if it still holds one."""
    announcements().withdraw()


@st.cache_resource(show_spinner=False, max_entries=6)
def _decode_queue(path: str, stamp: str):
    from ..serving import DecodeQueue

    return DecodeQueue(_load_translator(path, stamp), max_batch=serving_max_batch(), gather_ms=serving_gather_ms(),
                       announcements=announcements(), announce_key=path)


def decode_queue(direction: str):
    """The :class:`~aiayn.serving.DecodeQueue` of ``direction``'s translator, one per process and checkpoint
    stamp: every session's model work for the explained sentences goes through it (one job at a time, waiting
    free-running sentences decoded together).

    Raises:
        ModelUnavailable: the checkpoint cannot be loaded, or ``$AIAYN_MAX_BATCH`` / ``$AIAYN_TORCH_THREADS``
            is not a positive integer, or ``$AIAYN_GATHER_MS`` not a number >= 0 (the message says which).
    """
    return _per_checkpoint(direction, _decode_queue)


def load_translator(direction: str):
    """The :class:`~aiayn.translator.Translator` of ``direction``, loaded once per process and checkpoint
    stamp (:func:`checkpoint_stamp`).

    Raises:
        ModelUnavailable: the checkpoint is missing, truncated or corrupt (message names the file).
    """
    return _per_checkpoint(direction, _load_translator)


def _per_checkpoint(direction: str, resource):
    """``resource(path, stamp)`` (a ``st.cache_resource`` function) for the checkpoint of ``direction``, its
    errors as :class:`ModelUnavailable` naming the file or setting at fault."""
    path = checkpoint_path(direction)
    if not path.is_dir():
        raise ModelUnavailable(f"no checkpoint directory at {path}")
    try:
        return resource(str(path), checkpoint_stamp(path))
    except (FileNotFoundError, ValueError, OSError, RuntimeError, KeyError) as exc:
        raise ModelUnavailable(str(exc)) from None


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint directory says about itself, read from ``config.json`` without loading the model
    (and without importing torch): for the Overview's model card.

    Attributes:
        path: the checkpoint directory.
        cfg: the :class:`~aiayn.model.config.TransformerConfig` of ``config.json["model"]``.
        meta: ``config.json["meta"]`` plus ``num_parameters`` and ``dtype`` from the top level (as
            :meth:`aiayn.translator.Translator.load` fills ``Translator.meta``).
    """

    path: Path
    cfg: Any
    meta: dict[str, Any]


def checkpoint_info(direction: str) -> CheckpointInfo:
    """Read the checkpoint of ``direction`` from its ``config.json`` only (milliseconds; no torch).

    Checks what can be checked without loading the weights (:func:`aiayn.checkpoint_format.read_config`
    and :func:`~aiayn.checkpoint_format.check_files`): the directory and its three files exist,
    ``config.json`` is an aiayn checkpoint config with a valid model config. A truncated weights file is
    only found when a page loads the model (:func:`load_translator`).

    Raises:
        ModelUnavailable: missing directory or file, invalid ``config.json`` (the message names the file).
    """
    path = checkpoint_path(direction)
    if not path.is_dir():
        raise ModelUnavailable(f"no checkpoint directory at {path}")
    try:
        config = read_config(path)
        check_files(path)
    except (FileNotFoundError, ValueError) as exc:
        raise ModelUnavailable(str(exc)) from None
    meta = dict(config.get("meta") or {})
    meta.setdefault("num_parameters", config.get("num_parameters"))
    meta.setdefault("dtype", config.get("dtype"))
    return CheckpointInfo(path=path, cfg=config["model_config"], meta=meta)


def served_precision(direction: str) -> str | None:
    """The precision the output layer of ``direction``'s model is (or will be) served with
    (:func:`aiayn.model.projection.serving_precision`: ``$AIAYN_SERVE_PROJECTION``, else the checkpoint's
    ``meta["serve_projection"]``, else ``"float32"``), read from ``config.json`` as :func:`checkpoint_info` does:
    without loading the model or importing torch. None when the checkpoint or the setting is unusable (a page that
    loads the model says why)."""
    from ..model.projection import serving_precision

    try:
        return serving_precision(None, checkpoint_info(direction).meta)
    except (ModelUnavailable, ValueError):
        return None


def model_card(path: str | Path) -> str | None:
    """Text of ``MODEL_CARD.md`` in a checkpoint directory, or None when it is missing or unreadable."""
    p = Path(path) / "MODEL_CARD.md"
    try:
        return p.read_text(encoding="utf-8")
    except OSError:
        return None


def _import_model_code() -> None:
    try:
        importlib.import_module("aiayn.app.preload")  # torch and all the pages need, in one go
    except Exception:  # noqa: BLE001 - a broken install shows up (with a message) on the model pages
        pass


@st.cache_resource(show_spinner=False)
def warm_imports() -> threading.Thread:
    """Import torch and the model code in a background thread, once per process (``st.cache_resource``),
    so that the first page needing the model does not wait for ``import torch`` (seconds). Only imports:
    no Streamlit call, no file read, no model load. Call it at the end of a page that does not need the
    model; the thread starts :data:`WARM_DELAY_S` seconds later.

    Returns:
        the thread (the same one on every call, until the resource cache is cleared).
    """
    timer = threading.Timer(WARM_DELAY_S, _import_model_code)
    timer.name, timer.daemon = "aiayn-warm-imports", True
    timer.start()
    return timer
