"""The git commit this source tree came from, for a checkpoint's meta and lineage (``git_commit``).

In a git checkout it is ``git rev-parse HEAD``. A background training run works on a frozen copy of the code made by
``git archive HEAD | tar -x`` (docs/training.md, so that later commits do not change a running job); such a tree has
no ``.git``, and ``git archive`` writes the commit into :data:`ARCHIVED` below instead (``export-subst`` in
``.gitattributes``; gitattributes(5), "Creating an archive").
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

#: ``git archive`` replaces this by the archived commit's full hash; in a checkout it stays a placeholder
ARCHIVED = "$Format:%H$"

_HASH = re.compile(r"[0-9a-f]{40}")


def source_commit(where: str | Path | None = None, archived: str = ARCHIVED) -> str | None:
    """The full 40-hex commit of the code in ``where`` (default: this package's folder): ``git rev-parse HEAD`` there,
    else ``archived`` when ``git archive`` filled it in, else None (neither a checkout nor an archive, or no ``git``).
    Never raises."""
    folder = Path(where) if where is not None else Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=folder,
                             timeout=30).stdout.strip()
        if _HASH.fullmatch(out):
            return out
    except (OSError, subprocess.SubprocessError):
        pass
    return archived if _HASH.fullmatch(archived or "") else None
