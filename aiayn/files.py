"""Writing files so that nothing a user made is lost: every write goes to a temporary file in the same folder
and is then renamed over the target (``os.replace`` is atomic on POSIX and Windows), so a crash or a full disk
leaves either the old file or the new one, never half of each. One copy of this logic for the whole package
(checkpoints, SentencePiece models, data splits, datasheets, run metadata, model cards).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


def umask_mode() -> int:
    """File mode a plain ``open(path, "w")`` would give (``0o666`` less the process umask): ``mkstemp`` makes
    0600 files, which would make shared checkpoints and data unreadable for other users."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path`` (mode as by ``open``),
    on any error it is removed and ``path`` is left untouched. The parent folder is created if missing.

    Use it with writers that want a file name (``safetensors.torch.save_file``, ``DataFrame.to_csv``)::

        with atomic_path(out / "model.safetensors") as tmp:
            save_file(state, tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, umask_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`); returns ``path`` as a ``Path``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` as UTF-8 with ``\\n`` line ends to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
    return Path(path)


def atomic_copy(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Copy the file ``src`` to ``dest`` atomically; returns ``dest``."""
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)
    return Path(dest)


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``final``; on success it replaces ``final`` (an existing one is removed
    first), on any error it is removed and ``final`` is left untouched."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_outside(data_dir: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Raise ValueError unless ``out_dir`` lies outside ``data_dir`` and does not hold it (a folder derived from
    another must not replace or contain it)."""
    src, dst = Path(data_dir).expanduser().resolve(), Path(out_dir).expanduser().resolve()
    if src == dst or src in dst.parents or dst in src.parents:
        raise ValueError(f"the output folder {out_dir} must lie outside the data folder {data_dir} (and not hold it)")


@contextlib.contextmanager
def derived_data_folder(data_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary copy of the prepared data folder ``data_dir`` (every file but the token cache ``cache/``,
    which training rebuilds) to change; on success it becomes ``out_dir`` (:func:`atomic_dir`: an existing one is
    replaced), with the permissions of a folder made under the umask (mkdtemp's are private), on any error nothing
    is left. Used by ``aiayn backtranslate`` and ``aiayn data sentence-kind``.

    Raises:
        ValueError: ``out_dir`` is ``data_dir``, lies inside it or holds it.
    """
    data_dir, out_dir = Path(data_dir).expanduser(), Path(out_dir).expanduser()
    check_outside(data_dir, out_dir)
    mask = os.umask(0)
    os.umask(mask)
    with atomic_dir(out_dir) as tmp:
        tmp.chmod(0o777 & ~mask)
        shutil.copytree(data_dir, tmp, dirs_exist_ok=True, ignore=lambda d, names: ["cache"] if Path(d) == data_dir else [])
        yield tmp


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks.

    Raises:
        FileNotFoundError: ``path`` is not a file (the message names it).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()
