"""The project file: data and model options shared by every command, read from ``sgtune.toml``.

``sgtune.toml`` in the working directory (else the ``[tool.sgtune]`` table of ``pyproject.toml`` there; ``--config
pyproject.toml`` reads only that table), or the file named by ``--config FILE`` (``sgtune --config
FILE lambda …`` or ``sgtune lambda --config FILE …``), holds values of the shared data, model and
batch options under their option names (``data``, ``model``, ``batch-size``, ``prior-precision``,
…; ``_`` may stand for ``-``). Precedence: the command line, then the file, then the defaults (the
file's values are click's ``default_map``, so an option typed on the command line always wins). A
command uses the keys it has options for (``sgtune reshuffle`` takes none of them); a key that is
no shared option is a usage error naming it, the nearest known key and the file. Each value is converted by
its option's own click type from the text it would have on the command line (:func:`check_value`), so the
file accepts exactly what the options accept (``batch-size = 32.7`` fails as ``--batch-size 32.7`` does). ``--example NAME`` on the command line
replaces the file's DATA and brings the example's own model (unless ``--model`` is typed too). Relative paths in a file outside the
working directory are relative to the file. The JSON document echoes ``config``: the file and the
values it supplied to this command.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from ._shared_options import batch_options, data_options

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (Python 3.10: the same parser, a dependency there)
    import tomli as tomllib

#: the file a command reads from its working directory when no --config is given
PROJECT_FILE = "sgtune.toml"
#: read from the working directory when there is no sgtune.toml, if it has a ``[tool.sgtune]`` table
PYPROJECT = "pyproject.toml"
#: where a command's context keeps the file it read (ctx.meta key)
META_KEY = "sgtune.config"
#: where the group keeps ``sgtune --config FILE`` for the command (ctx.meta key)
GROUP_KEY = "sgtune.group_config"
#: keys whose values are paths (relative to the file when the file is elsewhere)
PATH_KEYS = ("data", "theta-hat", "prior-precision-matrix")


def shared_params() -> dict[str, click.Parameter]:
    """option name as in the file (``batch-size``) -> the click parameter of the shared data and batch options
    (:mod:`sgtune.cli._shared_options`): the one table both the command line and the file are checked against, so
    the two cannot drift apart."""
    probe = batch_options(data_options(click.Command("probe")))
    out = {}
    for p in probe.params:
        if p.name is None:
            continue
        longs = [o for o in p.opts if o.startswith("--")]
        out[(longs[0][2:] if longs else p.name)] = p
    return out


def shared_keys() -> dict[str, str]:
    """option name as in the file (``batch-size``) -> click parameter name (``batch_size``): the
    parameters of the shared data and batch options (:mod:`sgtune.cli._shared_options`)."""
    return {key: str(p.name) for key, p in shared_params().items()}


#: the table of ``pyproject.toml`` that holds sgtune's options (as ruff, black and pytest use theirs)
PYPROJECT_TABLE = ("tool", "sgtune")


def _load_toml(p: Path) -> dict[str, Any]:
    """The file's values: all of ``sgtune.toml`` (or any other file), only ``[tool.sgtune]`` of a ``pyproject.toml``."""
    try:
        with open(p, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise click.UsageError(f"--config: file {p} does not exist") from None
    except IsADirectoryError:
        raise click.UsageError(f"--config {p} is a folder; give a .toml file") from None
    except OSError as exc:
        raise click.UsageError(f"--config: cannot read {p} ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"{p} is not valid TOML ({exc})") from None
    if p.name != PYPROJECT:
        return raw
    table = raw.get("tool", {}).get("sgtune") if isinstance(raw.get("tool"), dict) else None
    if not isinstance(table, dict):
        raise click.UsageError(f"{p} has no [tool.sgtune] table; add one holding the shared options (e.g. "
                               "batch-size = 32), or give a sgtune.toml")
    return table


def _where(p: Path) -> str:
    """How messages name the file (and the table, for a pyproject.toml)."""
    return f"{p} [tool.sgtune]" if p.name == PYPROJECT else str(p)


def _unknown_key(p: Path, key: str, known: list[str]) -> click.UsageError:
    import difflib

    near = difflib.get_close_matches(key.replace("_", "-"), known, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return click.UsageError(f"{_where(p)}: unknown key {key!r}; {hint}the file holds the shared data and model "
                            f"options: {', '.join(known)}")


def check_value(p: Path, key: str, value: Any, param: click.Parameter, ctx: click.Context | None) -> Any:
    """``value`` of ``key`` converted by the option's own click type, as if typed on the command line (its text:
    ``batch-size = 32.7`` fails as ``--batch-size 32.7`` does, and so do ``true`` and ``3.0`` for an integer);
    a flag takes ``true`` or ``false`` only. A usage error names the key, the value, the file and the fix."""
    shown = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    if isinstance(value, (dict, list)):
        raise click.UsageError(f"{_where(p)}: key {key!r} must be a single value (a string, number or true/false), "
                               f"got {type(value).__name__}")
    if getattr(param, "is_flag", False):
        if not isinstance(value, bool):
            raise click.UsageError(f"{_where(p)}: key {key!r} = {shown} must be true or false (the flag "
                                   f"--{key}); write {key} = true")
        return value
    if isinstance(value, bool):
        raise click.UsageError(f"{_where(p)}: key {key!r} = {shown}: true/false is not a value of --{key}; give "
                               f"what you would type after --{key} on the command line")
    text = value if isinstance(value, str) else str(value)
    try:
        return param.type.convert(text, param, ctx)
    except click.BadParameter as exc:
        why = exc.message.rstrip(".")  # click's own sentence, then ours
        raise click.UsageError(f"{_where(p)}: key {key!r} = {shown}: {why}; give a value --{key} accepts "
                               f"on the command line (see --help)") from None


def read_config(path: str | os.PathLike[str], ctx: click.Context | None = None) -> dict[str, Any]:
    """The file's values keyed by click parameter name, each checked and converted by its option's type
    (:func:`check_value`); one-line usage errors for a file that cannot be read, is not TOML, or holds a key
    that is no shared option (naming the nearest one)."""
    p = Path(path)
    raw = _load_toml(p)
    params = shared_params()
    values: dict[str, Any] = {}
    here = p.resolve().parent == Path.cwd().resolve()
    for key, value in raw.items():
        name = key.replace("_", "-")
        if name not in params:
            raise _unknown_key(p, key, sorted(params))
        param = params[name]
        value = check_value(p, key, value, param, ctx)
        if name in PATH_KEYS and isinstance(value, str) and not here and not os.path.isabs(value):
            value = os.path.join(p.parent, value)
        values[str(param.name)] = value
    return values


def find_config(explicit: str | None) -> str | None:
    """The file to read: ``explicit`` (``--config``), else ``sgtune.toml`` in the working directory, else a
    ``pyproject.toml`` there with a ``[tool.sgtune]`` table, else None."""
    if explicit is not None:
        return explicit
    if os.path.isfile(PROJECT_FILE):
        return PROJECT_FILE
    if os.path.isfile(PYPROJECT):
        try:
            with open(PYPROJECT, "rb") as fh:
                tool = tomllib.load(fh).get("tool")
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            return PYPROJECT  # read again, to say what is wrong with it
        if isinstance(tool, dict) and "sgtune" in tool:
            return PYPROJECT
    return None


def command_defaults(command: click.Command, values: dict[str, Any]) -> dict[str, Any]:
    """The file's values that ``command`` has options for, if it has the shared data options at all (``reshuffle``'s
    ``--data`` and ``--batch-size`` are a one-dimensional problem's, not the project's)."""
    names = {p.name for p in command.params}
    if "example" not in names:
        return {}
    return {k: v for k, v in values.items() if k in names}


def install(ctx: click.Context, command: click.Command, path: str) -> None:
    """Make the file's values ``command``'s defaults (``ctx`` is the command's own context)."""
    ctx.default_map = command_defaults(command, read_config(path, ctx))  # an explicit file replaces sgtune.toml's values
    ctx.meta[META_KEY] = path


def config_option_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--config FILE`` on a command, else ``sgtune --config FILE``, else ``./sgtune.toml``: its values
    become the command's defaults (the option is eager, so before any other option is resolved)."""
    if ctx.resilient_parsing:
        return value
    path = find_config(value if value is not None else ctx.meta.get(GROUP_KEY))
    if path is not None:
        install(ctx, ctx.command, path)
    return value


#: ``--config FILE`` on each command (the group has one too: ``sgtune --config FILE COMMAND …``)
config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), default=None, is_eager=True, expose_value=False,
    callback=config_option_callback,
    help=f"Read the shared data and model options (DATA, --model, --batch-size, --prior-precision, …) from this "
         f"TOML file (default: {PROJECT_FILE} in the working directory, else [tool.sgtune] in its {PYPROJECT}; "
         f"--config {PYPROJECT} reads only that table). Values are checked as the options are. The command line "
         "overrides the file, the file overrides the defaults; the JSON's config says what the file supplied.")


def config_json(ctx: click.Context | None) -> dict[str, Any] | None:
    """``{"path": …, "values": {option: value}}`` for the file this command read, else None."""
    if ctx is None:
        return None
    path = ctx.meta.get(META_KEY)
    if path is None:
        return None
    from click.core import ParameterSource

    spelled = {p.name: (next((o for o in p.opts if o.startswith("--")), p.name or "")).lstrip("-")
               for p in ctx.command.params}
    supplied = {spelled.get(name, name): value for name, value in (ctx.default_map or {}).items()
                if ctx.get_parameter_source(name) == ParameterSource.DEFAULT_MAP}
    return {"path": os.fspath(path), "values": supplied}


def from_file(name: str) -> bool:
    """Did the project file (not the command line) give parameter ``name`` of the running command?"""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source(name) == ParameterSource.DEFAULT_MAP
