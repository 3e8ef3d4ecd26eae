"""Output discipline shared by all commands: atomic files, strict JSON, mapped errors."""
from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import math
import os
import re
import shlex
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import click
import numpy as np

from ..io._files import (OutputAppearedError, atomic_path, check_claims, expect_new, new_outputs, not_regular_reason,
                         output_set, pending_set, remove_temporary, temporary_file)
from ..io._json import dumps
from ..core.errors import AccuracyWarning, SgtuneError
from ._config import config_json
from ._names import ARGV, FILE_ONLY, PARAM_OPTIONS
from ._remedies import as_text, render

F = TypeVar("F", bound=Callable[..., Any])

EXIT_VERIFY_FAILED = 3
#: ``--strict``: the command ran, but its answer (or chain) should not be trusted
EXIT_UNTRUSTED = 4


@dataclass
class _Report:
    """What a running command has warned about, and why its result is not to be trusted (if it is not)."""

    warnings: list[str] = field(default_factory=list)
    untrusted: list[str] = field(default_factory=list)
    #: library parameter name -> the option that sets it in this command (see :func:`in_option_names`)
    options: dict[str, str] = field(default_factory=dict)
    #: long option -> the short name the user typed instead (see :func:`as_typed`)
    aliases: dict[str, str] = field(default_factory=dict)


_REPORT: contextvars.ContextVar[_Report | None] = contextvars.ContextVar("sgtune_report", default=None)


def _typed_aliases() -> dict[str, str]:
    """``{"--output": "-o"}`` for each option of the running command that the user gave by its short
    name only: messages then name the option as it was typed."""
    ctx = click.get_current_context(silent=True)
    argv = ARGV.get()
    if ctx is None or not argv:
        return {}
    out = {}
    for param in ctx.command.params:
        longs = [o for o in param.opts if o.startswith("--")]
        shorts = [o for o in param.opts if not o.startswith("--") and o.startswith("-")]
        if not longs or not shorts:
            continue
        used_long = any(a == longs[0] or a.startswith(longs[0] + "=") for a in argv)
        used_short = next((o for o in shorts if any(a == o or (a.startswith(o) and not a.startswith("--"))
                                                     for a in argv)), None)
        if used_short and not used_long:
            out[longs[0]] = used_short
    return out


def as_typed(message: str, aliases: dict[str, str]) -> str:
    """``message`` naming each option in ``aliases`` as the user typed it (``--output`` -> ``-o``)."""
    for long, short in aliases.items():
        message = re.sub(rf"(?<![\w-]){re.escape(long)}(?![\w-])", short, message)
    return message


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """sgtune's warnings on the command line: one line on stderr (even with ``-q``), no source location,
    also collected for the JSON document's ``warnings`` key."""
    text = str(message).splitlines()[0] if str(message) else category.__name__
    text = _plain_warning(text, category)
    report = _REPORT.get()
    if report is not None:
        text = as_typed(in_option_names(text, report.options), report.aliases)
        if text in report.warnings:
            return
        report.warnings.append(text)
    click.echo(f"warning: {text}", err=True)


_RCOND = re.compile(r"rcond\s*=\s*([0-9.eE+-]+)")


def _plain_warning(text: str, category: Any) -> str:
    """A library's raw warning in sgtune's words: scipy's "Ill-conditioned matrix (rcond=…): result may not be
    accurate" says what went wrong inside, not in the problem the user gave."""
    if getattr(category, "__name__", "") == "LinAlgWarning" or text.lower().startswith("ill-conditioned matrix"):
        m = _RCOND.search(text)
        rc = f" (reciprocal condition number {float(m.group(1)):.2g})" if m else ""
        return (f"a linear system in this computation is nearly singular{rc}, so the result may be inaccurate; "
                "standardise the covariates, drop collinear ones, or add a --prior-precision")
    return text


def warn(message: str) -> None:
    """A warning from a command: stderr now (even with ``-q``) and the JSON's ``warnings`` list."""
    warnings.warn(message, AccuracyWarning, stacklevel=2)


def untrusted(reason: str) -> None:
    """Warn that the result should not be trusted; ``--strict`` then makes the command exit 4."""
    warn(reason)
    report = _REPORT.get()
    if report is not None:
        report.untrusted.append(reason)


_REPEATED = re.compile(r"(--[\w-]+) \(\1((?: [^()]*)?)\)")
_QUOTED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")
#: `name=value` / `name='value'` in backticks: the option followed by its value ("--hessian gauss-newton")
_QUOTED_VALUE = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)=(['\"]?)([^`'\"]*)\2`")
_SUBJECT = re.compile(r" (must|contains|has|is|needs|should)\b")
_IDENT = re.compile(r"(?<![\w\-.'\"])([A-Za-z_][A-Za-z0-9_]*)(?![\w(=])")


def _command_options(kwargs: dict[str, Any]) -> dict[str, str]:
    """:data:`PARAM_OPTIONS` resolved for the running click command: library name -> ``--option``."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return {}
    spelled: dict[str, str] = {}
    files = {p.name for p in ctx.command.params if isinstance(p.type, click.Path)}
    for param in ctx.command.params:
        if param.name is None:
            continue
        longs = [o for o in param.opts if o.startswith("--")]
        spelled[param.name] = longs[0] if longs else (param.opts[0] if isinstance(param, click.Option)
                                                      else param.human_readable_name.upper())
    out: dict[str, str] = {}
    for name, candidates in PARAM_OPTIONS.items():
        present = [c for c in candidates if c in spelled and (name not in FILE_ONLY or c in files)]
        given = [c for c in present if kwargs.get(c) is not None]
        if present:
            out[name] = spelled[(given or present)[0]]
        if name in FILE_ONLY:  # `hessian='gauss-newton'` names a value: the option that takes a word
            words = [c for c in candidates if c in spelled and c not in files]
            if words:
                out[name + "="] = spelled[words[0]]
    return out


def in_option_names(message: str, options: dict[str, str]) -> str:
    """``message`` with the library's parameter names replaced by the command's options
    (``step_matrix must …`` -> ``--lambda must …``). Names with an underscore are replaced
    wherever they stand as a word; plain words (``momentum``, ``seed``) only as the subject of a
    message that opens "momentum must / contains / has / is …", where they cannot be prose."""
    if not options:
        return message
    # `name='value'` in backticks: the option and its value as typed ("`hessian='gauss-newton'`")
    def with_value(m: re.Match[str]) -> str:
        name, value = m.group(1), m.group(3)
        option = options.get(name + "=") or (None if name in FILE_ONLY else options.get(name))
        return f"{option} {value}" if option else m.group(0)

    message = _QUOTED_VALUE.sub(with_value, message)
    # `name` in backticks: a parameter named on purpose, wherever it stands ("a larger `thin`")
    message = _QUOTED.sub(lambda m: options.get(m.group(1), m.group(0)), message)

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name in options and ("_" in name or (m.start() == 0 and _SUBJECT.match(message, m.end()))):
            return options[name]
        return name

    out = _IDENT.sub(sub, message)
    # "step_matrix (--lambda)" -> "--lambda (--lambda)" -> "--lambda"; "--beta-power (--beta-power P)" -> "--beta-power P"
    return _REPEATED.sub(r"\1\2", out)


def _check_finite_floats(kwargs: dict[str, Any]) -> None:
    """A float option given as nan or ±inf is a usage error naming the option (click's FLOAT accepts
    them; no sgtune option means anything by them, and they would surface as NaN in the results).
    An option that does take them sets ``allow_nonfinite`` on its click parameter."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    for param in ctx.command.params:
        if not isinstance(param.type, click.types.FloatParamType) or getattr(param, "allow_nonfinite", False):
            continue
        value = kwargs.get(param.name or "")
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                raise click.BadParameter(f"must be a finite number, got {v}", ctx=ctx, param=param)


def handle_errors(fn: F) -> F:
    """Turn an :class:`SgtuneError` into a one-line exit-1 message (click's ``ClickException``).

    :class:`~sgtune.core.errors.AccuracyWarning` s raised while the command runs are printed as one
    ``warning: …`` line each on stderr and collected into the JSON's ``warnings`` (see :func:`emit`).
    With ``strict=True`` among the command's options, a result marked :func:`untrusted` makes the
    command exit with :data:`EXIT_UNTRUSTED` after writing its outputs.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _check_finite_floats(kwargs)
        if kwargs.get("json_path") == "-":  # --json - : stdout, as without --json
            kwargs["json_path"] = None
        report = _Report(options=_command_options(kwargs), aliases=_typed_aliases())
        token = _REPORT.set(report)
        try:
            check_distinct_outputs(kwargs)
            # every file of the command is written as one set: all put in place at the end, or none
            with warnings.catch_warnings(), new_outputs(), output_set(commit_on=(click.exceptions.Exit,)):
                warnings.simplefilter("always", AccuracyWarning)
                warnings.showwarning = _show_warning
                out = fn(*args, **kwargs)
        except SgtuneError as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            text = as_typed(in_option_names(text, report.options), report.aliases)
            if getattr(exc, "remedies", ()):  # computed ways out, as the commands that apply them
                text += as_text(render(exc.remedies))
            if bad_option_value(text, kwargs):  # "--momentum must lie in [0, 1)": a usage error, exit 2
                raise click.UsageError(text, ctx=click.get_current_context(silent=True)) from None
            raise click.ClickException(text) from None
        except click.UsageError as exc:
            exc.message = as_typed(exc.message, report.aliases)
            raise
        except click.ClickException as exc:  # check_writable & co. name the long option; say it as typed
            exc.message = as_typed(exc.message, report.aliases)
            raise
        except OutputAppearedError as exc:
            raise click.ClickException(as_typed(appeared_message(exc), report.aliases)) from None
        except EOFError as exc:  # np.load & co. on a truncated file; click would print a bare "Aborted!"
            raise click.ClickException(f"an input file ended unexpectedly ({exc or 'EOFError'}); check the files "
                                       "given to the options") from None
        finally:
            _REPORT.reset(token)
        if kwargs.get("strict") and report.untrusted:
            why = as_typed(in_option_names(report.untrusted[0], report.options), report.aliases)  # as typed
            click.echo(f"error: --strict: the result is not trusted ({why})", err=True)
            raise click.exceptions.Exit(EXIT_UNTRUSTED)
        return out

    return wrapper  # type: ignore[return-value]


_MUST = re.compile(r"(--[\w-]+) (must|needs to|cannot be|should)\b")


def bad_option_value(message: str, kwargs: dict[str, Any]) -> bool:
    """Does ``message`` (already in option names) refuse the value of an option the user typed — "--batch-size
    must be in [1, N = 2000]" — rather than the content of a file it names? Then it is a usage error (exit 2, as
    ``--help`` says of an out-of-range value): the option opens the message, takes a value that is not a file
    (no click ``Path`` type, and no existing file given to an option such as ``--target``)."""
    m = _MUST.match(message)
    ctx = click.get_current_context(silent=True)
    if m is None or ctx is None:
        return False
    param = next((p for p in ctx.command.params if m.group(1) in p.opts), None)
    if param is None or param.name is None or isinstance(param.type, (click.Path, click.File)):
        return False
    value = kwargs.get(param.name)
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, str) and os.path.exists(value):
        return False
    return ctx.get_parameter_source(param.name) not in (click.core.ParameterSource.DEFAULT, None)


def appeared_message(exc: OutputAppearedError) -> str:
    """The one line for an output that another process created while this command ran."""
    return f"{exc.filename} {exc.strerror}; pass --overwrite to replace it, or choose another name"


#: what each output option writes: (command, option) or option -> the accepted file name endings
OUTPUT_SUFFIXES: dict[tuple[str, str] | str, tuple[str, ...]] = {
    ("run", "--output"): (".npz", ".nc"), ("plan", "--output"): (".csv",), "--output": (".npy",),
    ("lambda", "--output"): (".npy", ".npz"),  # .npz: the per-layer factors of --family kronecker
    "--json": (".json",), "--plot": (".png",), "--lambda-dir": (".npy",)}
_WRITES = {".npy": "a .npy array (numpy.save)", ".npz": "an .npz archive", ".nc": "a netCDF file",
           ".csv": "a CSV table", ".json": "a JSON document", ".png": "a PNG image"}


def output_suffixes(option: str) -> tuple[str, ...]:
    """The file name endings ``option`` of the running command accepts (:data:`OUTPUT_SUFFIXES`)."""
    ctx = click.get_current_context(silent=True)
    name = ctx.command.name if ctx is not None else ""
    return OUTPUT_SUFFIXES.get((str(name), option)) or OUTPUT_SUFFIXES.get(option, ())


def _check_folder_name(text: str, option: str) -> None:
    """A usage error (exit 2) for an output named as a folder (``-o out/``: it would become a file ``out``)."""
    if text.endswith(("/", os.sep)):
        suffixes = output_suffixes(option)
        example = f" (e.g. {text}out{suffixes[0]})" if suffixes else ""
        raise click.UsageError(f"{option} {text} names a folder (it ends in '/'); give the name of a file in it"
                               f"{example}")


def _check_suffix(text: str, option: str) -> None:
    """A usage error (exit 2) for an output whose name does not end the way what ``option`` writes does
    (an explicit ``--format`` names the format of ``-o`` instead: then any name not claiming another;
    ``--json`` writes text, so any name not ending like another format's file is accepted)."""
    ctx = click.get_current_context(silent=True)
    if option == "--output" and ctx is not None and ctx.params.get("out_format"):
        return
    suffixes = output_suffixes(option)
    if option == "--json":  # JSON is text: any name (out.txt, report.log) except one claiming another format
        others = tuple(x for x in _WRITES if x not in suffixes)
        if not text.lower().endswith(others):
            return
    if suffixes and not text.lower().endswith(suffixes):
        what = " or ".join(_WRITES.get(x, x) for x in suffixes)
        raise click.UsageError(f"{option} {text}: this option writes {what}; give a file name ending in "
                               f"{' or '.join(suffixes)}")


#: the output options of every command: click parameter name -> option
OUTPUT_OPTIONS = {"output": "--output", "json_path": "--json", "plot_path": "--plot"}


def check_distinct_outputs(kwargs: dict[str, Any]) -> None:
    """Two output options naming one file (``-o same.npy --json same.npy``): a usage error naming both,
    before any work (one output would silently replace the other)."""
    seen: dict[str, str] = {}
    for name, option in OUTPUT_OPTIONS.items():
        path = kwargs.get(name)
        if path is None:
            continue
        key = os.path.normcase(os.path.realpath(os.fspath(path)))
        other = seen.get(key) or next((o for k, o in seen.items() if os.path.exists(k) and os.path.exists(key)
                                       and os.path.samefile(k, key)), None)
        if other is not None:
            raise click.UsageError(f"{other} and {option} both name {os.fspath(path)}: one output would replace the "
                                   "other; give each its own file")
        seen[key] = option


def check_writable(path: str | os.PathLike[str] | None, overwrite: bool, option: str) -> None:
    """Refuse (before any work) an output ``path`` that cannot be written as promised.

    Usage errors (exit 2): a name ending in '/', an ending that does not match what ``option`` writes
    (:data:`OUTPUT_SUFFIXES`), the file of another output. Exit 1: an existing file needs
    ``--overwrite``; a directory, symbolic link (never followed: its target would stay, the link
    would be replaced), FIFO or device is refused even then; the folder must exist and accept new
    files (checked by creating and removing an empty temporary file there). Without ``--overwrite``
    the file is claimed as new (:func:`~sgtune.io._files.expect_new`): a file another process
    creates there meanwhile is kept, and this command fails when it would replace it.
    """
    if path is None:
        return
    _check_folder_name(os.fspath(path), option)
    p = Path(path)
    what = not_regular_reason(p)
    if what is not None:
        raise click.ClickException(f"{option} {p} is {what}, not a regular file; give the path of a new or "
                                   "regular file (outputs are written beside it and renamed into place)")
    _check_suffix(os.fspath(path), option)
    if p.exists() and not overwrite:
        raise click.ClickException(f"{option} {p} already exists; pass --overwrite to replace it")
    folder = p.parent
    if not folder.exists():
        raise click.ClickException(f"{option} {p}: folder {folder} does not exist")
    if not folder.is_dir():
        raise click.ClickException(f"{option} {p}: {folder} is not a folder")
    try:
        fd, probe = temporary_file(p)  # the name the output's temporary will have (a long name is shortened)
        os.close(fd)
        remove_temporary(probe)
    except OSError as exc:
        raise click.ClickException(f"{option} {p}: cannot create files in {folder} ({exc.strerror or exc}); "
                                   "choose a writable folder") from None
    if not overwrite:
        expect_new(p, option)


def atomic_write(path: str | os.PathLike[str], write: Callable[[Any], None], mode: str) -> None:
    """Write ``path`` through ``write(fh)`` into a temporary file renamed over it: never half written."""
    try:
        with atomic_path(path) as tmp, open(tmp, mode) as fh:
            write(fh)
    except OutputAppearedError:
        raise
    except OSError as exc:  # the folder filled up, vanished, became read-only, … since check_writable
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None


def save_array(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` as ``.npy`` atomically (temporary file + rename)."""
    atomic_write(path, lambda fh: np.save(fh, np.asarray(array)), "wb")


def save_npz(path: str | os.PathLike[str], **arrays: np.ndarray) -> None:
    """Write arrays as ``.npz`` atomically."""
    atomic_write(path, lambda fh: np.savez(fh, **arrays), "wb")


def emit(doc: dict[str, Any], json_path: str | os.PathLike[str] | None = None, *,
         arrays: dict[str | None, np.ndarray | dict[str, np.ndarray]] | None = None) -> None:
    """Write the JSON document to stdout, or atomically to ``json_path``.

    ``arrays`` maps output paths (``None`` = not requested) to an array, saved as ``.npy``, or
    to a dict of named arrays, saved as ``.npz`` (both atomically), after the document has
    been serialised, so a document that cannot be written leaves no array file behind.
    The warnings issued so far (:func:`warn`) are added as the document's ``warnings`` list.
    """
    config = config_json(click.get_current_context(silent=True))
    if config is not None:
        doc = {**doc, "config": config}
    report = _REPORT.get()
    if report is not None:
        doc = {**doc, "warnings": list(dict.fromkeys([*doc.get("warnings", []), *report.warnings]))}
    digests = {os.path.basename(os.fspath(path)): array_digest(array) for path, array in (arrays or {}).items()
               if path is not None and not isinstance(array, dict)}
    if digests and json_path is not None:  # the sidecar names the arrays it describes (read_sidecar checks them)
        doc = {**doc, "array_digests": digests}
    text = dumps(doc)
    check_claims()  # another process created an output meanwhile: fail before writing any of them
    for path, array in (arrays or {}).items():
        if path is None:
            continue
        if isinstance(array, dict):
            save_npz(path, **array)
        else:
            save_array(path, array)
    if json_path is None:
        outs = pending_set()
        if outs is not None:  # on stdout once every file of the command is in place
            outs.after.append(lambda: _echo_json(text))
        else:
            _echo_json(text)
    else:
        atomic_write(json_path, lambda fh: fh.write(text + "\n"), "w")


def array_digest(array: Any) -> str:
    """``sha256:…`` of an array's shape, dtype and values (C order): what a JSON sidecar records of the ``.npy``
    written with it, so a sidecar next to another array is recognised (:func:`sgtune.cli._against.read_sidecar`)."""
    import hashlib

    arr = np.ascontiguousarray(np.asarray(array, dtype=np.float64))
    h = hashlib.sha256(f"{arr.shape}".encode())
    h.update(arr.tobytes())
    return "sha256:" + h.hexdigest()


def _echo_json(text: str) -> None:
    """The JSON document on stdout; a failed write is one line (a closed pipe: the group's main exits quietly)."""
    try:
        click.echo(text)
    except OSError as exc:
        if exc.errno == errno.EPIPE:  # the reader went away (| head): the group's main exits quietly
            raise
        _discard_stdout()
        raise click.ClickException(f"cannot write the JSON to stdout: {exc.strerror or exc}") from None


def _discard_stdout() -> None:
    """After a failed write to stdout: drop what is still buffered, so the interpreter's final flush
    does not fail again ("Exception ignored … OSError") after the one-line error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):  # no real file descriptor (e.g. CliRunner's stdout)
        pass


#: a stage that runs longer than this (seconds) says so on stderr (without -q)
SLOW_STAGE_SECONDS = 2.0
#: the environment variable that sets every progress threshold (seconds; ``inf`` or ``never``: no progress lines)
PROGRESS_ENV = "SGTUNE_PROGRESS_AFTER"
#: under ``-q`` a step still says what it waits for once it has run this long (seconds), as pip and conda do
QUIET_PROGRESS_AFTER = 10.0


def progress_after(default: float, quiet: bool = False) -> float:
    """The seconds after which a slow step says so on stderr: ``$SGTUNE_PROGRESS_AFTER`` when set (a number
    of seconds, ``0`` for at once, ``inf``/``never`` for never; the same for every step, with or without
    ``-q``), else ``default`` (at least :data:`QUIET_PROGRESS_AFTER` under ``-q``). Scripts and tests that
    count stderr lines set it, so what they see does not depend on the machine's speed."""
    text = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if text:
        if text in ("never", "off", "none"):
            return math.inf
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if value >= 0:  # nan (not a number) fails this too: the default below
            return value
    return max(default, QUIET_PROGRESS_AFTER) if quiet else default


def _echo_err(text: str) -> None:
    try:
        click.echo(text, err=True)
    except (OSError, ValueError):  # stderr gone: nothing to tell
        pass


class slow_stage:
    """``with slow_stage("applicability: …", quiet):`` — a line on stderr once the stage has run for
    :data:`SLOW_STAGE_SECONDS` (nothing for a quick one), and how long it took when it ends
    (the threshold: :func:`progress_after`)."""

    def __init__(self, label: str, quiet: bool | None = None, after: float = SLOW_STAGE_SECONDS) -> None:
        import threading

        if quiet is None:  # the running command's -q
            ctx = click.get_current_context(silent=True)
            quiet = bool(ctx is not None and ctx.params.get("quiet"))
        self.label, self.quiet, self.shown = label, quiet, False
        self.after = progress_after(after)
        self.timer = threading.Timer(self.after if math.isfinite(self.after) else 0.0, self._show)
        self.timer.daemon = True

    def _show(self) -> None:
        self.shown = True
        _echo_err(f"{self.label} …")

    def __enter__(self) -> "slow_stage":
        import time

        self.tic = time.perf_counter()
        if not self.quiet and math.isfinite(self.after):
            if self.after <= 0:  # at once, in this thread: no race with a quick stage
                self._show()
            else:
                self.timer.start()
        return self

    def cancel(self) -> None:
        """The slow part is over (e.g. the first progress report arrived): say how long it took if it
        was announced, and nothing from now on."""
        import time

        self.timer.cancel()
        if self.shown:
            self.shown = False
            info(f"  done in {time.perf_counter() - self.tic:.0f} s")

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self.shown = False
        self.cancel()


def info(message: str, quiet: bool = False) -> None:
    """Human-readable line on stderr (silenced by ``-q``)."""
    if not quiet:
        click.echo(message, err=True)


#: a step that takes longer than this many seconds says so on stderr (under ``-q``: :data:`QUIET_PROGRESS_AFTER`)
PROGRESS_AFTER = 2.0


def multiply_add_rate() -> float:
    """Multiply-adds per second this machine does now (one 384×384 matrix product, a few milliseconds): the
    speed a rough time estimate of a dense step divides by."""
    import time

    a = np.random.default_rng(0).standard_normal((384, 384))
    tic = time.perf_counter()
    a @ a
    return 384.0 ** 3 / max(time.perf_counter() - tic, 1e-9)


def rough_seconds(seconds: float) -> str:
    """``about 40 s`` / ``about 3 min`` / ``about 2 h``: one significant figure, for an estimate."""
    for unit, size in (("h", 3600.0), ("min", 60.0)):
        if seconds >= 1.5 * size:
            return f"about {float(f'{seconds / size:.1g}'):g} {unit}"
    return f"about {float(f'{max(seconds, 1.0):.1g}'):g} s"


@contextlib.contextmanager
def announced(label: str, quiet: bool = False, *, at_once: bool = False) -> Any:
    """Run a step that may be slow (a fit, an expansion, the applicability report): when it is still running
    after :func:`progress_after` seconds (PROGRESS_AFTER, or QUIET_PROGRESS_AFTER with ``-q``), one
    ``label …`` line on stderr, and ``label: done in T s`` when it ends (nothing for a quick step, and no
    "done" for a step that failed or was interrupted). ``at_once``: a step known to be long (its label says how
    long) says so when it starts, unless ``$SGTUNE_PROGRESS_AFTER`` sets the threshold."""
    import threading
    import time

    start, shown = time.monotonic(), threading.Event()
    after = progress_after(PROGRESS_AFTER, quiet)
    if at_once and not os.environ.get(PROGRESS_ENV, "").strip():
        after = 0.0

    def say() -> None:
        shown.set()
        _echo_err(f"{label} …")

    timer = threading.Timer(after if math.isfinite(after) else 0.0, say)
    timer.daemon = True
    if after <= 0:
        say()
    elif math.isfinite(after):
        timer.start()
    try:
        yield
    except BaseException:  # a failed or interrupted step is not "done"
        timer.cancel()
        raise
    timer.cancel()
    if shown.is_set():
        _echo_err(f"{label}: done in {time.monotonic() - start:.0f} s")


def command_line() -> str:
    """The exact command, for provenance in artifacts: the arguments this invocation received (also
    when called in-process, as ``main([...])`` or click's test runner), shell-quoted so it can be re-run."""
    return shlex.join(["sgtune", *(ARGV.get() or tuple(sys.argv[1:]))])
