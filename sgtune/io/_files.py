"""Atomic file output: a result is written to a temporary file beside its destination and renamed
into place, so a failed or interrupted write never leaves a partial file (the CLI's contract).

Two writers of one file: a destination claimed with :func:`expect_new` (the command line does so for
every output given without ``--overwrite``) is put in place with ``os.link``, which fails when a file
of that name appeared meanwhile — another process writing the same output — so the later writer
stops with :class:`OutputAppearedError` and the earlier file is kept, instead of one silently
replacing the other. Other destinations are replaced with ``os.replace`` (atomic either way).

The destination must be a regular file or not exist yet: a directory, a FIFO, a device or a
symbolic link is refused (renaming over it would replace the device node or the link itself, not
write into it). A new file gets the permissions ``open()`` would give it (0666 minus the umask),
not the 0600 of the temporary file; a replaced file keeps its permission bits.
"""
from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "not_regular_reason", "new_file_mode", "expect_new", "new_outputs", "check_claims",
           "OutputAppearedError"]

#: absolute path -> how the user named it (e.g. "-o"), for outputs that must not replace a file that
#: appears while the command runs; one set per :func:`new_outputs` scope
_NEW_ONLY: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("sgtune_new_only", default=None)
#: os.link failures that mean "this file system has no hard links", not "the name is taken"
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS, errno.EACCES}


_APPEARED = "was created by another process while this one ran; that file was kept and this result was not written"


class OutputAppearedError(FileExistsError):
    """A file claimed with :func:`expect_new` was created by someone else while this process wrote it."""


@contextlib.contextmanager
def new_outputs() -> Iterator[None]:
    """A scope (one command) for :func:`expect_new` claims."""
    token = _NEW_ONLY.set({})
    try:
        yield
    finally:
        _NEW_ONLY.reset(token)


def expect_new(path: str | os.PathLike[str], label: str = "") -> None:
    """Claim ``path`` as a new file: :func:`atomic_path` will not replace a file that appears there
    meanwhile (module docstring). ``label`` names the path in the message (e.g. the option). Outside a
    :func:`new_outputs` scope this does nothing."""
    claims = _NEW_ONLY.get()
    if claims is not None:
        claims[os.path.abspath(path)] = f"{label} {os.fspath(path)}" if label else os.fspath(path)


def check_claims() -> None:
    """Raise :class:`OutputAppearedError` for the first path claimed with :func:`expect_new` that
    exists by now (called before the first output is written, so a lost race writes nothing)."""
    for path, shown in (_NEW_ONLY.get() or {}).items():
        if os.path.lexists(path):
            raise OutputAppearedError(errno.EEXIST, _APPEARED, shown)


def _link_into_place(tmp: str, p: Path, shown: str) -> None:
    """Move ``tmp`` to ``p`` only if ``p`` does not exist (hard link + unlink: atomic and no-clobber)."""
    appeared = OutputAppearedError(errno.EEXIST, _APPEARED, shown)
    try:
        os.link(tmp, p)
    except FileExistsError:
        raise appeared from None
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        if os.path.lexists(p):  # no hard links on this file system: check, then rename (a small window)
            raise appeared from None
        os.replace(tmp, p)
        return
    os.unlink(tmp)

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
    A path claimed with :func:`expect_new` raises :class:`OutputAppearedError` (and is left as it is)
    when a file appeared there while the body ran.
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
        claims = _NEW_ONLY.get() or {}
        key = os.path.abspath(p)
        if key in claims:
            _link_into_place(tmp, p, claims.pop(key))  # ours from now on
        else:
            os.replace(tmp, p)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
