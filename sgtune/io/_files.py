"""Atomic file output: a result is written to a temporary file beside its destination and renamed
into place, so a failed or interrupted write never leaves a partial file (the CLI's contract)."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path in ``path``'s folder; on normal exit rename it to ``path``, on any
    exception delete it and re-raise (``path`` is then untouched)."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
