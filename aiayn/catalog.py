"""Every model the app can serve: the checkpoint directories under ``checkpoints/`` (or ``$AIAYN_CHECKPOINTS``),
each described from its ``config.json`` alone (no weights read, no torch): name, direction, size, origin
("trained here" or "imported: Opus-MT", :mod:`aiayn.import_marian`). The shipped ``en-de`` and ``de-en`` come
first (they stay the default); the rest follow by name. Not a paper section: the serving job.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checkpoint_format import WEIGHTS_FILE, check_files, read_config

__all__ = ["CatalogEntry", "SHIPPED", "count_parameters", "imported_from", "imported_source", "list_checkpoints",
           "models_for", "origin_of", "resolve_checkpoint"]

#: the shipped checkpoints' directory names, the default models, listed first in this order
SHIPPED = ("en-de", "de-en")



def count_parameters(n: int) -> str:
    """``"74.4M parameters"``; below 100,000 the exact count (``"7,120 parameters"``), never ``"0.0M"``."""
    return f"{n / 1e6:.1f}M parameters" if n >= 100_000 else f"{n:,} parameters"

@dataclass(frozen=True)
class CatalogEntry:
    """One checkpoint directory as the model picker shows it.

    Attributes:
        name: the directory's name (``"en-de"``, ``"opus-mt-en-de"``).
        path: the directory.
        direction: ``config.json["meta"]["direction"]`` (``"en-de"``), or None when the checkpoint does not say.
        num_parameters: parameter count from ``config.json`` (None when absent).
        weights_bytes: size of ``model.safetensors`` in bytes.
        origin: ``"trained here"`` or ``"imported: <from>"`` (:func:`origin_of`).
        shipped: one of :data:`SHIPPED`.
    """

    name: str
    path: Path
    direction: str | None
    num_parameters: int | None
    weights_bytes: int
    origin: str
    shipped: bool

    @property
    def label(self) -> str:
        """One line for a picker: ``"opus-mt-en-de · en-de · 74.4M parameters · imported: Opus-MT"``."""
        parts = [self.name]
        if self.direction and self.direction != self.name:
            parts.append(self.direction)
        if self.num_parameters:
            parts.append(count_parameters(self.num_parameters))
        parts.append(self.origin)
        return " · ".join(parts)


def origin_of(meta: dict[str, Any]) -> str:
    """``"imported: Opus-MT"`` for a checkpoint written by ``aiayn import-marian`` (``meta["origin"] ==
    "imported"``; the name from ``meta["imported"]["from"]``), else ``"trained here"``."""
    if meta.get("origin") == "imported":
        source = (meta.get("imported") or {}).get("from") or "elsewhere"
        return f"imported: {source}"
    return "trained here"


def imported_source(meta: dict[str, Any]) -> str | None:
    """Where an imported checkpoint comes from (``"Opus-MT"``, :func:`origin_of`), or None for a model trained here."""
    origin = origin_of(meta)
    return origin.split(": ", 1)[1] if origin.startswith("imported: ") else None


def imported_from(checkpoint: str | Path) -> str | None:
    """:func:`imported_source` of a checkpoint directory, read from its ``config.json`` alone (no torch); None for a
    model trained here or an unreadable config."""
    try:
        meta = read_config(checkpoint).get("meta") or {}
    except (FileNotFoundError, ValueError):
        return None
    return imported_source(meta)


def _entry(d: Path) -> CatalogEntry | None:
    try:
        config = read_config(d)
        check_files(d)
        size = (d / WEIGHTS_FILE).stat().st_size
    except (FileNotFoundError, ValueError, OSError):
        return None
    meta = config.get("meta") or {}
    direction = meta.get("direction") if isinstance(meta.get("direction"), str) else None
    n = config.get("num_parameters")
    return CatalogEntry(name=d.name, path=d, direction=direction,
                        num_parameters=n if isinstance(n, int) and not isinstance(n, bool) else None,
                        weights_bytes=size, origin=origin_of(meta), shipped=d.name in SHIPPED)


def list_checkpoints(root: str | Path) -> list[CatalogEntry]:
    """The complete checkpoint directories directly under ``root``: the shipped ones first (in
    :data:`SHIPPED` order), then the others by name. A folder that is not a complete checkpoint (no or an
    invalid ``config.json``, a missing file: :func:`aiayn.checkpoint_format.check_files`) and hidden folders
    (``.name``: an import still being written) are left out. A missing ``root`` gives ``[]``."""
    root = Path(root)
    if not root.is_dir():
        return []
    entries = [e for d in root.iterdir() if d.is_dir() and not d.name.startswith(".") and (e := _entry(d))]
    order = {name: i for i, name in enumerate(SHIPPED)}
    return sorted(entries, key=lambda e: (order.get(e.name, len(order)), e.name))


def models_for(entries: list[CatalogEntry], direction: str) -> list[CatalogEntry]:
    """The entries a model picker offers for ``direction``: the shipped one of that name first, then every other
    checkpoint whose ``meta.direction`` is ``direction`` (by name, as :func:`list_checkpoints` orders them)."""
    return [e for e in entries if e.name == direction or (not e.shipped and e.direction == direction)]


def resolve_checkpoint(root: str | Path, direction: str, model: str | None) -> Path:
    """The checkpoint directory to serve for ``direction``: ``root / model`` when ``model`` names a complete
    checkpoint directly under ``root`` whose direction is ``direction``, else the shipped ``root / direction``
    (the default; also for an unknown, foreign or malformed ``model`` such as ``"../x"``: a URL value never
    reaches outside ``root``)."""
    root = Path(root)
    if model and model != direction and "/" not in model and "\\" not in model and not model.startswith("."):
        entry = _entry(root / model) if (root / model).is_dir() else None
        if entry is not None and entry.direction == direction:
            return root / model
    return root / direction
