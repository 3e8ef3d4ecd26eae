"""A full disk on the k-th file a command writes, for the tests that outputs stay a set."""
from __future__ import annotations

import errno
import os
from typing import Any, Callable

import sgtune.cli._io as cli_io


def atomic_write_failing_on(k: int) -> tuple[Callable[..., Any], list[str]]:
    """A stand-in for ``sgtune.cli._io.atomic_write`` whose k-th call (1-based) writes a few bytes and then
    hits a full disk (ENOSPC), and the list of the paths it was called with (filled as the command runs).
    Patch it in with ``monkeypatch.setattr(cli_io, "atomic_write", fake)`` or ``mock.patch.object``."""
    real = cli_io.atomic_write
    seen: list[str] = []

    def atomic_write(path, write, mode):
        seen.append(os.fspath(path))
        if len(seen) != k:
            return real(path, write, mode)

        def partial(fh):
            fh.write(b"\x93NUMPY" if "b" in mode else "{")
            raise OSError(errno.ENOSPC, "No space left on device")

        return real(path, partial, mode)

    return atomic_write, seen
