"""Plain words where a user reads: the package's docstrings and messages, the docs, the README and every
command's ``--help`` name papers by authors and year and never an internal name — the papers' old
working names ("seed 003"), issue numbers, or files outside the repository (THEORY.md, STYLE.md, CLI.md)."""
from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sgtune.cli import main

ROOT = Path(__file__).resolve().parents[1]
JARGON = re.compile(r"\b[Ss]eed 00[0-4]\b|\bTHEORY(\.md)?\b|\bSTYLE\.md\b|\bCLI\.md\b|\b[Ii]ssues? #?\d+\b"
                    r"|\.\./shared/")
#: third-party issue trackers cited as evidence (not sgtune's internal names)
EXTERNAL = re.compile(r"(scipy|numba|numpy|pytorch|jax) issues? #?\d+", re.IGNORECASE)


def _user_facing_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "sgtune").rglob("*.py"))]
    for ext in ("*.md", "*.rst", "*.py"):
        files += [p for p in sorted((ROOT / "docs").rglob(ext)) if "_build" not in p.parts]
    return files


def _hits(text: str) -> list[str]:
    return [m.group(0) for m in JARGON.finditer(EXTERNAL.sub("", text))]


def test_no_internal_names_in_the_package_docs_and_readme():
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}"
           for p in _user_facing_files() for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if _hits(line)]
    assert not bad, "internal names where a user reads (cite papers by authors and year):\n" + "\n".join(bad)


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path (the group's commands are loaded lazily: ask the group, not ``.commands``)."""
    ctx = click.Context(group)
    out = [prefix]
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        out += _commands(cmd, (*prefix, name)) if isinstance(cmd, click.Group) else [(*prefix, name)]
    return out


def test_every_command_is_checked():
    assert len(_commands(main)) > 12


@pytest.mark.parametrize("path", _commands(main), ids=lambda p: " ".join(p) or "sgtune")
def test_help_is_free_of_internal_names(path):
    r = CliRunner().invoke(main, [*path, "--help"])
    assert r.exit_code == 0, r.output
    assert not _hits(r.output), (path, _hits(r.output))


def test_the_pattern_catches_what_it_should():
    """The check itself can fail: each kind of internal name is caught, a third-party issue is not."""
    for s in ("seed 003 eq. 11", "see THEORY §1.3", "STYLE.md", "per CLI.md", "issue 20 item 3", "../shared/x"):
        assert _hits(s), s
    assert not _hits("scipy issue #8307") and not _hits("Wang, Ding & Huggins (2026) eq. 11")
