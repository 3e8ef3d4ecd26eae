"""Remedies on the command line: each library :class:`~sgtune.core.reasons.Remedy` as the exact command.

The library says what would help in its own vocabulary (``{"inv_temperature": 42.5}``); this module
renders it as ``{"why": …, "argv": ["sgtune", "lambda", …, "--inverse-temperature", "42.5"]}``: the
command line the user typed, with the changed options replaced, through the one table from Python
parameter names to options (:data:`sgtune.cli._names.PARAM_OPTIONS`). The argv never repeats output
options (re-running would refuse to overwrite their files) nor ``--strict``, so it runs as printed.
A remedy whose parameter the command has no option for is not shown (nothing sgtune prints can fail
for want of an option), unless the remedy only drops it (value None). The library may list a remedy and, after it, the same remedy with fewer changes
(e.g. a prior precision with the posterior target, then the prior precision alone): the first one the
command can express is shown, the nested ones after it are not (commands without ``--target`` show the
second).
"""
from __future__ import annotations

import math
import shlex
from typing import Any

import click

from ..core.reasons import Remedy
from ._names import ARGV, PARAM_OPTIONS

#: click parameters a remedy's argv never repeats: outputs (their files exist after the first run), --strict
DROPPED = ("output", "json_path", "plot_path", "overwrite", "strict")
#: setting a parameter removes the options that would contradict it
REPLACES: dict[str, tuple[str, ...]] = {"prior_precision": ("prior_precision_matrix",),
                                        "step_size": ("lambda_file", "lambda_path")}


def _param_of(command: click.Command) -> dict[str, click.Parameter]:
    out: dict[str, click.Parameter] = {}
    for p in command.params:
        if isinstance(p, click.Option):
            for o in (*p.opts, *p.secondary_opts):
                out[o] = p
    return out


def parse_argv(command: click.Command, argv: list[str]) -> list[tuple[str | None, list[str]]]:
    """The arguments of ``command`` as (click parameter name, its tokens), in the order given."""
    opts = _param_of(command)
    args = [p for p in command.params if isinstance(p, click.Argument)]
    out: list[tuple[str | None, list[str]]] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        head = tok.split("=", 1)[0] if tok.startswith("--") else tok
        if tok == "--":
            out.extend((args[0].name if args else None, [t]) for t in argv[i + 1:])
            break
        p = opts.get(head) or (opts.get(tok[:2]) if tok.startswith("-") and not tok.startswith("--") else None)
        if p is None:
            out.append((args[0].name if args and not tok.startswith("-") else None, [tok]))
            i += 1
            continue
        takes = 0 if (getattr(p, "is_flag", False) or getattr(p, "count", False) or "=" in tok
                      or head != tok or (head == tok[:2] and len(tok) > 2)) else max(p.nargs, 1)
        out.append((p.name, argv[i:i + 1 + takes]))
        i += 1 + takes
    return out


def _value(v: Any) -> list[str]:
    if isinstance(v, bool):
        return []
    if isinstance(v, float):
        return ["inf" if math.isinf(v) else f"{v:.6g}"]
    return [str(v)]


def _option_for(command: click.Command, name: str, value: Any) -> click.Parameter | None:
    """The option of ``command`` that sets library parameter ``name`` (to ``value``), via PARAM_OPTIONS."""
    by_name = {p.name: p for p in command.params}
    for cand in PARAM_OPTIONS.get(name, (name,)):
        p = by_name.get(cand)
        if p is None or not isinstance(p, click.Option):
            continue
        if isinstance(p.type, click.Path) and value is not None and not isinstance(value, str):
            continue  # a number is not a file
        return p
    return None


def remedy_argv(remedy: Remedy, argv: tuple[str, ...] | None = None,
                group: click.Group | None = None) -> list[str] | None:
    """``remedy`` as the full command line (``["sgtune", cmd, …]``), or None if it cannot be expressed."""
    argv = tuple(ARGV.get() if argv is None else argv)
    if not argv:
        return None
    if group is None:
        from . import main as group
    ctx = click.Context(group)
    name = remedy.command or argv[0]
    source = group.get_command(ctx, argv[0])
    target = group.get_command(ctx, name)
    if source is None or target is None:
        return None
    tokens = parse_argv(source, list(argv[1:]))
    keep = {p.name for p in target.params}
    changed: list[str] = []
    extra: list[str] = []
    for key, value in remedy.changes.items():
        p = _option_for(target, key, value)
        if p is None:
            if value is None:  # dropping an option the command does not have changes nothing
                continue
            return None
        changed += [str(p.name), *REPLACES.get(key, ())]
        if value is None or value is False:
            continue
        extra += [p.opts[0] if (p.opts[0].startswith("--") or not p.secondary_opts) else p.opts[0], *_value(value)]
    kept = [t for pname, toks in tokens if pname is not None and pname in keep and pname not in DROPPED
            and pname not in changed for t in toks]
    return ["sgtune", name, *kept, *extra]


def render(remedies: Any, argv: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The JSON ``remedies`` list: ``{"why", "argv", "expect"}`` for each remedy the command line can express."""
    out: list[dict[str, Any]] = []
    shown: list[Remedy] = []
    for r in remedies:
        r = r if isinstance(r, Remedy) else Remedy(**r)
        if any(_nested(r, s) for s in shown):  # a fuller remedy applies here (module docstring)
            continue
        a = remedy_argv(r, argv)
        if a is not None and all(a != o["argv"] for o in out):
            out.append({"why": r.why, "argv": a, "expect": r.expect})
            shown.append(r)
    return out


def _nested(r: Remedy, fuller: Remedy) -> bool:
    """``r`` changes a subset of what ``fuller`` changes, to the same values, in the same command."""
    return r.command == fuller.command and all(k in fuller.changes and fuller.changes[k] == v
                                               for k, v in r.changes.items())


def as_text(rendered: list[dict[str, Any]]) -> str:
    """``; what works: WHY: `sgtune …`; worth trying (not checked): …`` for a warning or error line ('' when there
    is nothing). Only a remedy sgtune has checked (``expect`` ``"applicable"``: its own applicability report was
    run and passes) is printed as what works; the others are suggestions, worded so."""
    if not rendered:
        return ""
    checked = [r for r in rendered if r.get("expect") == "applicable"]
    other = [r for r in rendered if r.get("expect") != "applicable"]
    text = ""
    if checked:
        text += "; what works: " + "; ".join(f"{r['why']}: `{shlex.join(r['argv'])}`" for r in checked)
    if other:
        text += ("; worth trying (not checked: it runs, whether its chain follows the prediction is not known): "
                 + "; ".join(f"{r['why']}: `{shlex.join(r['argv'])}`" for r in other))
    return text


def first_checked(rendered: list[dict[str, Any]]) -> list[str] | None:
    """The argv of the first remedy sgtune checked (``expect`` ``"applicable"``), else None."""
    return next((list(r["argv"]) for r in rendered if r.get("expect") == "applicable"), None)
