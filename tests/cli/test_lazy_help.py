"""``sgtune --help`` lists the commands without importing them (sgtune.cli.SUMMARIES): the list must stay what
click would print from the commands themselves, at every width, and must not import a command's module."""
from __future__ import annotations

import importlib
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from sgtune.cli import COMMANDS, SUMMARIES, main


def test_summaries_name_every_command_and_only_those():
    assert sorted(SUMMARIES) == sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_summary_is_the_first_paragraph_of_the_commands_help(name):
    command = importlib.import_module(COMMANDS[name]).cli
    assert command.short_help is None and not command.deprecated and not command.hidden
    for limit in range(5, 200):
        assert click.utils.make_default_short_help(SUMMARIES[name], limit).strip() == \
            command.get_short_help_str(limit)


@pytest.mark.parametrize("width", [40, 80, 120, 200])
def test_group_help_equals_clicks_own_listing(width):
    """The group's help against click's stock ``format_commands`` run on the imported commands."""

    class Eager(click.Group):
        def list_commands(self, ctx):
            return sorted(COMMANDS)

        def get_command(self, ctx, name):
            return importlib.import_module(COMMANDS[name]).cli

    ctx = click.Context(main, terminal_width=width, max_content_width=width)
    ours, stock = ctx.make_formatter(), ctx.make_formatter()
    main.format_commands(ctx, ours)
    click.Group.format_commands(Eager(), ctx, stock)
    assert ours.getvalue() == stock.getvalue() and "Commands:" in ours.getvalue()


def test_group_help_imports_no_command_module():
    code = ("import sys\nfrom sgtune.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('sgtune.cli.cmd_') or m in ('sympy', 'numba', "
            "'scipy.stats')), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "Commands:" in done.stdout and done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_group_help_through_the_runner_lists_every_command():
    result = CliRunner().invoke(main, ["--help"], terminal_width=100)
    assert result.exit_code == 0
    listed = result.output.split("Commands:")[1].split()
    assert all(name in listed for name in COMMANDS)
