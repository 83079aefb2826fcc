"""The memory allocator of a training child process: tcmalloc where the machine has it (issue 21).

A CPU training step allocates and frees hundreds of activation and gradient tensors of a few MB each. glibc's
malloc hands blocks of that size to the kernel and back (``mmap``/``munmap``, page faults on every first touch);
tcmalloc (gperftools) keeps them in per-size free lists. Intel's CPU guides for PyTorch recommend preloading
tcmalloc or jemalloc for the same reason (``torch.backends.xeon.run_cpu --enable-tcmalloc``, which looks only for
``libtcmalloc.so`` in a few folders and so misses Debian's ``libtcmalloc_minimal.so.4``). Measured on the 2-core
AMX VM (docs/training.md, "Session 21"): the default loop trains about 1.10x the target tokens a second with
tcmalloc (6 alternated pairs of runs, 0.99-1.22x), jemalloc was slower (0.8x), and glibc's own knobs (heap
thresholds, transparent huge pages) changed nothing. An allocator changes no result: training with and without
it is bit-identical, so a resumed run may switch.

An allocator can only be chosen before a process starts (``LD_PRELOAD``), so this module gives the *environment*
of the children that ``aiayn train-on`` and ``aiayn train-both`` start. Nothing else is preloaded and nothing is
installed: on a machine without tcmalloc (``apt install libtcmalloc-minimal4``) training runs on glibc as before.
"""
from __future__ import annotations

import ctypes.util
import functools
import os
from typing import Callable, Mapping

__all__ = ["ALLOCATORS", "TCMALLOC_NAMES", "find_tcmalloc", "allocator_env", "describe"]

#: ``--allocator`` choices: ``auto`` (tcmalloc when found, else glibc), ``tcmalloc`` (required), ``glibc``
ALLOCATORS = ("auto", "tcmalloc", "glibc")
#: library names tried, in order (``ctypes.util.find_library`` names: without ``lib`` and ``.so``)
TCMALLOC_NAMES = ("tcmalloc_minimal", "tcmalloc")


@functools.lru_cache(maxsize=1)
def find_tcmalloc() -> str | None:
    """The name of an installed tcmalloc the dynamic linker can preload (e.g. ``libtcmalloc_minimal.so.4``, found
    through ``ldconfig``'s cache by :func:`ctypes.util.find_library`, which runs ``ldconfig -p``: looked up once
    per process), or None."""
    for name in TCMALLOC_NAMES:
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def allocator_env(env: Mapping[str, str], allocator: str = "auto",
                  find: Callable[[], str | None] | None = None) -> dict[str, str]:
    """``env`` for a training child with ``allocator``: tcmalloc prepended to ``LD_PRELOAD`` (``auto`` when it is
    found, ``tcmalloc`` always), unchanged for ``glibc``, for ``auto`` without tcmalloc, and when ``LD_PRELOAD``
    already names a tcmalloc (the caller chose).

    Args:
        env: the environment to start from (not modified).
        allocator: one of :data:`ALLOCATORS`.
        find: the library lookup (default :func:`find_tcmalloc`).

    Returns:
        a new dict.

    Raises:
        ValueError: an unknown ``allocator``; ``tcmalloc`` asked for and not installed (the message says how to
            install it).
    """
    if allocator not in ALLOCATORS:
        raise ValueError(f"--allocator must be one of {', '.join(ALLOCATORS)}, got {allocator!r}")
    out = dict(env)
    if allocator == "glibc" or "tcmalloc" in out.get("LD_PRELOAD", ""):
        return out
    lib = (find or find_tcmalloc)()
    if lib is None:
        if allocator == "tcmalloc":
            raise ValueError("--allocator tcmalloc: no tcmalloc library found (Debian/Ubuntu: apt install "
                             "libtcmalloc-minimal4); --allocator auto falls back to glibc's malloc")
        return out
    out["LD_PRELOAD"] = lib + (os.pathsep + out["LD_PRELOAD"] if out.get("LD_PRELOAD") else "")
    return out


def describe(env: Mapping[str, str]) -> str:
    """One phrase for a log line: which allocator a child with ``env`` runs on."""
    preload = env.get("LD_PRELOAD", "")
    lib = next((p for p in preload.split(os.pathsep) if "tcmalloc" in p), None)
    return f"tcmalloc ({lib})" if lib else "glibc malloc"
