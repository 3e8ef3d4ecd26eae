"""Atomic file output: a result is written to a temporary file beside its destination and renamed
into place, so a failed or interrupted write never leaves a partial file (the CLI's contract).

The destination must be a regular file or not exist yet: a directory, a FIFO, a device or a
symbolic link is refused (renaming over it would replace the device node or the link itself, not
write into it). A new file gets the permissions ``open()`` would give it (0666 minus the umask),
not the 0600 of the temporary file; a replaced file keeps its permission bits.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "not_regular_reason", "new_file_mode"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_regular_reason(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it exists and is not a regular file ("a FIFO (named pipe)", "a symbolic
    link", ...; a link is not followed); ``None`` when it is a regular file or does not exist."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def new_file_mode() -> int:
    """0o666 with the process's umask applied: the mode ``open(path, "w")`` gives a new file."""
    mask = os.umask(0o022)  # the umask can only be read by setting it; restored at once
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path in ``path``'s folder; on normal exit rename it to ``path``, on any
    exception delete it and re-raise (``path`` is then untouched).

    Raises :class:`IsADirectoryError` (a directory) or :class:`FileExistsError` (a symbolic link, a
    FIFO, a device, a socket) when ``path`` exists and is not a regular file; nothing is created then.
    """
    p = Path(path)
    what = not_regular_reason(p)
    if what is not None:
        err = IsADirectoryError if what == "a directory" else FileExistsError
        raise err(f"{p} is {what}, not a regular file; refusing to replace it")
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        try:
            mode = stat.S_IMODE(os.stat(p).st_mode)  # replacing a file: keep its permissions
        except FileNotFoundError:
            mode = new_file_mode()
        os.fchmod(fd, mode)
        os.close(fd)
        fd = -1
        yield tmp
        if not_regular_reason(p) is not None:  # became a link / FIFO / folder while we wrote
            raise FileExistsError(f"{p} is no longer a regular file; refusing to replace it")
        os.replace(tmp, p)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
