"""Prepared data folders packed for the device machine (``aiayn train-both --pack`` / ``--unpack``).

The device machine gets a copy of the working tree with at most 64 MiB of it and the carried files together
(docs/training.md, "One command for a GPU session"); the tracked tree takes about 46 MB of that. One data folder of
the story build packs into about 17 MB (gzip) or 12 MB (xz), so two whole folders do not fit. The best data is
direction-specific, though: back-translation appends its synthetic pairs to a copy of the same build, German
fortunes for en-de, English ones for de-en (``aiayn backtranslate``, docs/data.md), so the two ``train.tsv`` share
their first 586,324 rows. A pack of several folders therefore stores the first folder whole and, of every later
folder, each file that shares at least its first half with the first folder's file of the same name only as the
bytes after what they share (``<file>.tail``; a file equal to the first folder's is a tail of length 0). ``aiayn-pack.json`` in the archive says
which, with every rebuilt file's size and SHA-256, and :func:`unpack_data` puts the folders back together and checks
them. A pack of one folder is a plain archive of it (``tar -xf`` unpacks it too).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any, Sequence

__all__ = ["MANIFEST", "PACK_FILES", "REQUIRED_DATA", "BadPack", "pack_data", "unpack_data"]

#: the files of a prepared data folder that a pack takes (``test*.tsv`` too)
PACK_FILES = ("train.tsv", "valid.tsv", "spm.model", "datasheet.json", "dictionary.tsv", "train_kinds.txt")
REQUIRED_DATA = ("train.tsv", "valid.tsv", "test.tsv", "spm.model")
#: the archive member that says how the later folders of a pack are rebuilt
MANIFEST = "aiayn-pack.json"
#: the suffix of a stored tail
TAIL = ".tail"
_CHUNK = 1 << 20


class BadPack(ValueError):
    """A folder that cannot be packed, or an archive that cannot be unpacked (the message says why, in one line)."""


def _files(data: Path) -> list[str]:
    missing = [name for name in REQUIRED_DATA if not (data / name).is_file()]
    if missing:
        raise BadPack(f"{data} is not a prepared data folder: {', '.join(missing)} missing (make one with `aiayn data`)")
    return sorted({*(n for n in PACK_FILES if (data / n).is_file()), *(p.name for p in data.glob("test*.tsv"))})


def _shared_prefix(base: Path, path: Path) -> int:
    """How many bytes ``path`` shares with the beginning of ``base`` (read in chunks)."""
    n = 0
    with open(base, "rb") as fb, open(path, "rb") as fp:
        while True:
            a, b = fb.read(_CHUNK), fp.read(_CHUNK)
            if not a or not b or a != b:
                return n + len(os.path.commonprefix([a, b]))
            n += len(a)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _mode(out: Path) -> str:
    """``w:xz`` for ``*.xz`` (a third smaller, several times slower to write), else ``w:gz``."""
    return "w:xz" if out.name.endswith(".xz") else "w:gz"


def pack_data(data_dirs: str | Path | Sequence[str | Path], out: str | Path) -> Path:
    """Write ``out`` (``.tar.gz``, or ``.tar.xz`` for a smaller file) with what ``aiayn train-both`` reads from each
    prepared data folder of ``data_dirs``: ``train.tsv``, ``valid.tsv``, ``test*.tsv``, ``spm.model``, and
    ``datasheet.json``, ``dictionary.tsv`` (the evaluation's baseline) and ``train_kinds.txt`` when present, each
    folder under its own name (the files behind links, never the links). Folders after the first store a file that
    shares at least its first half with the first folder's file of the same name as what follows the shared bytes
    only (module docstring). Written to a temporary name and renamed: an interrupted pack leaves no archive.
    Returns ``out``.

    Raises:
        BadPack: no folder; a folder lacks ``train.tsv``, ``valid.tsv``, ``test.tsv`` or ``spm.model``; two folders
            have the same name (they would land in one folder).
    """
    dirs = [Path(data_dirs).expanduser()] if isinstance(data_dirs, (str, Path)) else [Path(d).expanduser() for d in data_dirs]
    if not dirs:
        raise BadPack("give at least one data folder to pack")
    names = [d.resolve().name for d in dirs]
    if len(set(names)) != len(names):
        raise BadPack(f"the folders to pack must have different names, got {names}")
    files = [_files(d) for d in dirs]
    out = Path(out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    manifest: dict[str, Any] = {"format": "aiayn-data-pack", "format_version": 1, "base": names[0], "folders": names,
                                "tails": {}}
    try:
        with tarfile.open(tmp, _mode(out), dereference=True) as tar:  # a `-shipspm` folder links its splits
            for name in files[0]:
                tar.add(dirs[0] / name, arcname=f"{names[0]}/{name}")
            for data, folder, own in zip(dirs[1:], names[1:], files[1:]):
                for name in own:
                    path = (data / name).resolve()
                    n = _shared_prefix((dirs[0] / name).resolve(), path) if name in files[0] else 0
                    if n == 0 or 2 * n < path.stat().st_size:  # little shared: the whole file is simpler
                        tar.add(path, arcname=f"{folder}/{name}")
                        continue
                    manifest["tails"][f"{folder}/{name}"] = {"prefix_bytes": n, "bytes": path.stat().st_size,
                                                             "sha256": _sha256(path)}
                    with open(path, "rb") as f:
                        f.seek(n)
                        info = tar.gettarinfo(fileobj=f, arcname=f"{folder}/{name}{TAIL}")
                        info.size = path.stat().st_size - n
                        tar.addfile(info, f)
            if len(dirs) > 1:
                blob = json.dumps(manifest, indent=1).encode()
                info = tarfile.TarInfo(MANIFEST)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def unpack_data(pack: str | Path, dest: str | Path) -> list[Path]:
    """Unpack an archive of :func:`pack_data` into ``dest`` and rebuild every stored tail as the first folder's file
    followed by it, checked against the size and SHA-256 the pack recorded. Returns the data folders, in the order
    they were packed.

    Raises:
        BadPack: not a readable archive; a member that would land outside ``dest`` or is not a plain file or folder;
            a rebuilt file of the wrong size or SHA-256 (the pack is damaged or was unpacked over other files).
    """
    pack, dest = Path(pack).expanduser(), Path(dest).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(pack) as tar:
            members = tar.getmembers()
            for m in members:
                if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in Path(m.name).parts:
                    raise BadPack(f"{pack}: member {m.name!r} is not a plain file inside the archive")
            tar.extractall(dest, members=members, filter="data")
    except (OSError, tarfile.TarError) as exc:
        raise BadPack(f"cannot unpack {pack}: {exc}") from None
    manifest_path = dest / MANIFEST
    if not manifest_path.is_file():  # one folder: a plain archive
        tops = sorted({Path(m.name).parts[0] for m in members if Path(m.name).parts})
        return [dest / t for t in tops]
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        base, folders, tails = manifest["base"], manifest["folders"], manifest["tails"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadPack(f"{pack}: unreadable {MANIFEST} ({exc})") from None
    try:
        for rel, want in tails.items():
            _rebuild(pack, dest, base, rel, want)
    except BadPack:  # its own message already names the file (BadPack is a ValueError)
        raise
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise BadPack(f"{pack}: cannot rebuild the packed folders ({exc})") from None
    manifest_path.unlink()
    return [dest / f for f in folders]


def _rebuild(pack: Path, dest: Path, base: str, rel: str, want: dict[str, Any]) -> None:
    """Write ``dest/rel`` as the first ``prefix_bytes`` of ``dest/base/<its name>`` and its stored tail; check it."""
    if any(Path(x).is_absolute() or ".." in Path(x).parts for x in (rel, base)):
        raise BadPack(f"{pack}: {MANIFEST} names a path outside the archive ({rel!r})")
    target = dest / rel
    tail = target.with_name(target.name + TAIL)
    with open(target, "wb") as out, open(dest / base / target.name, "rb") as fb, open(tail, "rb") as ft:
        remaining = int(want["prefix_bytes"])
        while remaining:
            chunk = fb.read(min(_CHUNK, remaining))
            if not chunk:
                break
            out.write(chunk)
            remaining -= len(chunk)
        for chunk in iter(lambda: ft.read(_CHUNK), b""):
            out.write(chunk)
    tail.unlink()
    if target.stat().st_size != want["bytes"] or _sha256(target) != want["sha256"]:
        raise BadPack(f"{pack}: {rel} rebuilt from {base}/{target.name} does not match what was packed "
                      "(size or SHA-256)")
