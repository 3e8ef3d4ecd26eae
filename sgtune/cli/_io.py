"""Output discipline shared by all commands: atomic files, strict JSON, mapped errors."""
from __future__ import annotations

import functools
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

import click
import numpy as np

from ..io._files import atomic_path
from ..io._json import dumps
from ..core.errors import AccuracyWarning, SgtuneError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_VERIFY_FAILED = 3


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """sgtune's warnings on the command line: one line on stderr, no source location."""
    click.echo(f"warning: {str(message).splitlines()[0]}", err=True)


def handle_errors(fn: F) -> F:
    """Turn an :class:`SgtuneError` into a one-line exit-1 message (click's ``ClickException``).

    :class:`~sgtune.core.errors.AccuracyWarning` s raised while the command runs are printed as one
    ``warning: …`` line each on stderr.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", AccuracyWarning)
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except SgtuneError as exc:
            raise click.ClickException(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None

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
    """
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
