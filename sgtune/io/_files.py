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

One command's outputs are a set (:func:`output_set`): inside the scope, :func:`atomic_path` writes each
file to its temporary and only *stages* it; when the command has written everything, :meth:`OutputSet.commit`
renames them all with the stop signals deferred, restoring the files it replaced if a rename fails, so
either every file of the set is new or none is replaced (a disk that fills on the second file, a SIGTERM
at any point). Every temporary is registered before it is created, so an interruption at any point,
even inside the creation, removes it (:func:`remove_temporaries`).
"""
from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import secrets
import signal
import stat
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["atomic_path", "not_regular_reason", "new_file_mode", "expect_new", "new_outputs", "check_claims",
           "OutputAppearedError", "OutputSet", "output_set", "temporary_file", "remove_temporary",
           "remove_temporaries"]

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


#: the longest file name (bytes) most file systems take; a temporary's name is kept within it
NAME_MAX = 255
#: temporaries that exist or are being created by this process (removed on failure: :func:`remove_temporaries`)
_TEMPS: set[str] = set()
_TEMPS_LOCK = threading.Lock()


def temporary_name(path: str | os.PathLike[str]) -> str:
    """A fresh hidden name beside ``path`` (``.NAME.1a2b3c4d.tmp``), within :data:`NAME_MAX` bytes: a long
    ``NAME`` is shortened in the temporary's name, never refused because of it."""
    p = Path(path)
    tail = f".{secrets.token_hex(4)}.tmp"
    stem = p.name
    room = NAME_MAX - 1 - len(tail.encode())
    if len(os.fsencode(stem)) > room:
        stem = os.fsdecode(os.fsencode(stem)[:room]).rstrip("\udcff")
        while len(os.fsencode(stem)) > room:  # a multi-byte character cut in two
            stem = stem[:-1]
    return os.fspath(p.parent / f".{stem}{tail}")


def temporary_file(path: str | os.PathLike[str], mode: int = 0o600) -> tuple[int, str]:
    """Create a new temporary file beside ``path`` (O_EXCL); (open descriptor, its name). The name is registered
    before the file exists, so :func:`remove_temporaries` removes it whenever an interruption comes."""
    for _ in range(100):
        tmp = temporary_name(path)
        with _TEMPS_LOCK:
            _TEMPS.add(tmp)
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode), tmp
        except FileExistsError:  # someone else's: not ours to remove
            with _TEMPS_LOCK:
                _TEMPS.discard(tmp)
    raise FileExistsError(errno.EEXIST, "no free temporary file name", os.fspath(path))


def _forget(tmp: str) -> None:
    with _TEMPS_LOCK:
        _TEMPS.discard(tmp)


def remove_temporary(tmp: str) -> None:
    """Remove the temporary ``tmp`` (if it exists) and forget it."""
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    except OSError:  # pragma: no cover (a folder that became read-only)
        return
    _forget(tmp)


def remove_temporaries() -> None:
    """Remove every temporary this process registered and has not put in place (after a failure or a signal)."""
    with _TEMPS_LOCK:
        pending = list(_TEMPS)
    for tmp in pending:
        remove_temporary(tmp)


def _stop_signals() -> set[int]:
    return {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP (delivered when the block ends) where the system can (POSIX); else nothing."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())  # the mask as it is (nothing changed yet)
    try:  # blocked inside the try: an exception right after the call still restores the mask
        signal.pthread_sigmask(signal.SIG_BLOCK, _stop_signals())
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class OutputSet:
    """The files one command writes, staged as temporaries and renamed together (module docstring)."""

    def __init__(self) -> None:
        self.staged: dict[str, tuple[str, Path]] = {}
        self.after: list[Callable[[], Any]] = []

    def stage(self, tmp: str, path: Path) -> None:
        """``tmp`` (complete) is to become ``path`` at :meth:`commit` (a second write of ``path`` replaces the first)."""
        key = os.path.abspath(path)
        old = self.staged.pop(key, None)
        if old is not None:
            remove_temporary(old[0])
        self.staged[key] = (tmp, path)

    def abort(self) -> None:
        """Remove every staged temporary; nothing is put in place."""
        for tmp, _ in self.staged.values():
            remove_temporary(tmp)
        self.staged.clear()
        self.after.clear()

    def commit(self) -> None:
        """Put every staged file in place, or none: checks first (each destination still a regular file or
        absent, no claimed file appeared), then the renames with the stop signals deferred; a rename that
        fails puts back the files already replaced (their old versions were kept as hard links) and removes
        the new ones. Then the ``after`` actions (the JSON on stdout) run."""
        items = list(self.staged.values())
        try:
            for _, p in items:
                if not_regular_reason(p) is not None:
                    raise FileExistsError(errno.EEXIST, "is no longer a regular file; refusing to replace it", str(p))
            check_claims()
            with signals_deferred():
                self._rename_all(items)
        except BaseException:
            self.abort()
            raise
        self.staged.clear()
        actions, self.after = self.after, []
        for action in actions:
            action()

    def _rename_all(self, items: list[tuple[str, Path]]) -> None:
        claims = _NEW_ONLY.get() or {}
        done: list[tuple[Path, str | None]] = []
        try:
            for tmp, p in items:
                backup = None
                if os.path.lexists(p):  # the old file, kept until the whole set is in place
                    fd, backup = temporary_file(p)
                    os.close(fd)
                    os.unlink(backup)
                    try:
                        os.link(p, backup)
                    except OSError:  # no hard links here: this one file cannot be restored
                        _forget(backup)
                        backup = None
                key = os.path.abspath(p)
                if key in claims:
                    _link_into_place(tmp, p, claims.pop(key))
                else:
                    os.replace(tmp, p)
                _forget(tmp)
                done.append((p, backup))
        except BaseException:
            for p, backup in reversed(done):
                try:
                    if backup is not None:
                        os.replace(backup, p)
                        _forget(backup)
                    else:
                        os.unlink(p)
                except OSError:  # pragma: no cover (the folder vanished meanwhile)
                    pass
            raise
        finally:
            for _, backup in done:
                if backup is not None:
                    remove_temporary(backup)


_SET: contextvars.ContextVar[OutputSet | None] = contextvars.ContextVar("sgtune_output_set", default=None)


@contextlib.contextmanager
def output_set(commit_on: tuple[type[BaseException], ...] = ()) -> Iterator[OutputSet]:
    """A scope whose :func:`atomic_path` files are written as one set: committed when the scope ends normally
    or with one of the exceptions ``commit_on`` (e.g. click's ``Exit``: ``verify``'s exit 3 comes after its
    outputs), else none is put in place and every temporary of this process is removed."""
    outs = OutputSet()
    token = _SET.set(outs)
    try:
        yield outs
    except commit_on:
        _SET.reset(token)
        outs.commit()
        raise
    except BaseException:
        _SET.reset(token)
        outs.abort()
        remove_temporaries()
        raise
    _SET.reset(token)
    try:
        outs.commit()
    except BaseException:
        remove_temporaries()
        raise


def pending_set() -> OutputSet | None:
    """The :class:`OutputSet` of the running scope, if any."""
    return _SET.get()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path in ``path``'s folder; on normal exit rename it to ``path`` (inside an
    :func:`output_set`: stage it, renamed with the rest of the set), on any exception delete it and
    re-raise (``path`` is then untouched).

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
    fd, tmp = -1, ""
    try:
        fd, tmp = temporary_file(p)
        try:
            mode = stat.S_IMODE(os.stat(p).st_mode)  # replacing a file: keep its permissions
        except FileNotFoundError:
            mode = new_file_mode()
        os.fchmod(fd, mode)
        os.close(fd)
        fd = -1
        yield tmp
        outs = _SET.get()
        if outs is not None:
            outs.stage(tmp, p)
            return
        if not_regular_reason(p) is not None:  # became a link / FIFO / folder while we wrote
            raise FileExistsError(f"{p} is no longer a regular file; refusing to replace it")
        claims = _NEW_ONLY.get() or {}
        key = os.path.abspath(p)
        if key in claims:
            _link_into_place(tmp, p, claims.pop(key))  # ours from now on
        else:
            os.replace(tmp, p)
        _forget(tmp)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        if tmp:
            remove_temporary(tmp)
        raise
