"""Output discipline shared by all commands: atomic files, strict JSON, mapped errors."""
from __future__ import annotations

import contextvars
import functools
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import click
import numpy as np

from ..io._files import atomic_path
from ..io._json import dumps
from ..core.errors import AccuracyWarning, SgtuneError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_VERIFY_FAILED = 3
#: ``--strict``: the command ran, but its answer (or chain) should not be trusted
EXIT_UNTRUSTED = 4


@dataclass
class _Report:
    """What a running command has warned about, and why its result is not to be trusted (if it is not)."""

    warnings: list[str] = field(default_factory=list)
    untrusted: list[str] = field(default_factory=list)


_REPORT: contextvars.ContextVar[_Report | None] = contextvars.ContextVar("sgtune_report", default=None)


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """sgtune's warnings on the command line: one line on stderr (even with ``-q``), no source location,
    also collected for the JSON document's ``warnings`` key."""
    text = str(message).splitlines()[0] if str(message) else category.__name__
    report = _REPORT.get()
    if report is not None:
        if text in report.warnings:
            return
        report.warnings.append(text)
    click.echo(f"warning: {text}", err=True)


def warn(message: str) -> None:
    """A warning from a command: stderr now (even with ``-q``) and the JSON's ``warnings`` list."""
    warnings.warn(message, AccuracyWarning, stacklevel=2)


def untrusted(reason: str) -> None:
    """Warn that the result should not be trusted; ``--strict`` then makes the command exit 4."""
    warn(reason)
    report = _REPORT.get()
    if report is not None:
        report.untrusted.append(reason)


def handle_errors(fn: F) -> F:
    """Turn an :class:`SgtuneError` into a one-line exit-1 message (click's ``ClickException``).

    :class:`~sgtune.core.errors.AccuracyWarning` s raised while the command runs are printed as one
    ``warning: …`` line each on stderr and collected into the JSON's ``warnings`` (see :func:`emit`).
    With ``strict=True`` among the command's options, a result marked :func:`untrusted` makes the
    command exit with :data:`EXIT_UNTRUSTED` after writing its outputs.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        report = _Report()
        token = _REPORT.set(report)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", AccuracyWarning)
                warnings.showwarning = _show_warning
                out = fn(*args, **kwargs)
        except SgtuneError as exc:
            raise click.ClickException(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
        finally:
            _REPORT.reset(token)
        if kwargs.get("strict") and report.untrusted:
            click.echo(f"error: --strict: the result is not trusted ({report.untrusted[0]})", err=True)
            raise click.exceptions.Exit(EXIT_UNTRUSTED)
        return out

    return wrapper  # type: ignore[return-value]


def check_writable(path: str | os.PathLike[str] | None, overwrite: bool, option: str) -> None:
    """Refuse (exit 1) to overwrite an existing file unless ``--overwrite``; check the folder exists."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not overwrite:
        raise click.ClickException(f"{option} {p} already exists; pass --overwrite to replace it")
    if not p.parent.exists():
        raise click.ClickException(f"{option} {p}: folder {p.parent} does not exist")


def _atomic_write(path: str | os.PathLike[str], write: Callable[[Any], None], mode: str) -> None:
    with atomic_path(path) as tmp, open(tmp, mode) as fh:
        write(fh)


def save_array(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` as ``.npy`` atomically (temporary file + rename)."""
    _atomic_write(path, lambda fh: np.save(fh, np.asarray(array)), "wb")


def save_npz(path: str | os.PathLike[str], **arrays: np.ndarray) -> None:
    """Write arrays as ``.npz`` atomically."""
    _atomic_write(path, lambda fh: np.savez(fh, **arrays), "wb")


def emit(doc: dict[str, Any], json_path: str | os.PathLike[str] | None = None, *,
         arrays: dict[str | None, np.ndarray | dict[str, np.ndarray]] | None = None) -> None:
    """Write the JSON document to stdout, or atomically to ``json_path``.

    ``arrays`` maps output paths (``None`` = not requested) to an array, saved as ``.npy``, or
    to a dict of named arrays, saved as ``.npz`` (both atomically), after the document has
    been serialised, so a document that cannot be written leaves no array file behind.
    The warnings issued so far (:func:`warn`) are added as the document's ``warnings`` list.
    """
    report = _REPORT.get()
    if report is not None:
        doc = {**doc, "warnings": list(dict.fromkeys([*doc.get("warnings", []), *report.warnings]))}
    text = dumps(doc)
    for path, array in (arrays or {}).items():
        if path is None:
            continue
        if isinstance(array, dict):
            save_npz(path, **array)
        else:
            save_array(path, array)
    if json_path is None:
        click.echo(text)
    else:
        _atomic_write(json_path, lambda fh: fh.write(text + "\n"), "w")


def info(message: str, quiet: bool = False) -> None:
    """Human-readable line on stderr (silenced by ``-q``)."""
    if not quiet:
        click.echo(message, err=True)


def command_line() -> str:
    """The exact command, for provenance in artifacts."""
    return " ".join(["sgtune", *sys.argv[1:]])
