"""The ``sgtune`` command-line interface (click group; one module per command, loaded lazily).

Conventions (``../shared/CLI.md``): one JSON document on stdout (or ``--json FILE``),
human tables and progress on stderr, exit 0 ok / 1 domain error / 2 usage error /
3 verification failed, never a partial output file.

To add a command: create ``sgtune/cli/cmd_<name>.py`` defining a click command
called ``cli`` and add one line to :data:`COMMANDS`.
"""
from __future__ import annotations

import importlib

import click

#: command name -> module that defines a click command named ``cli``
COMMANDS: dict[str, str] = {
    "fluctuation": "sgtune.cli.cmd_fluctuation",
    "minibatch-error": "sgtune.cli.cmd_minibatch_error",
    "noise-anisotropy": "sgtune.cli.cmd_noise_anisotropy",
    "lambda": "sgtune.cli.cmd_lambda",
    "calibrate": "sgtune.cli.cmd_calibrate",
    "ksd": "sgtune.cli.cmd_ksd",
    "covariance": "sgtune.cli.cmd_covariance",
    "derive": "sgtune.cli.cmd_derive",
    "run": "sgtune.cli.cmd_run",
    "verify": "sgtune.cli.cmd_verify",
    "reshuffle": "sgtune.cli.cmd_reshuffle",
    "plan": "sgtune.cli.cmd_plan",
}


class LazyGroup(click.Group):
    """A click group that imports a command's module only when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        return importlib.import_module(module).cli


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sgtune")
def main() -> None:
    """sgtune: tune and predict SGD/SGLD before you run it.

    \b
    Conventions: mean loss L(θ) = (1/N) Σ_n l_n(θ) + R(θ)/N, batch size B,
    inverse temperature β (inf = SGD, N = canonical SGLD), step-size matrix Λ.
    Every command writes one JSON document to stdout (or --json FILE).
    """
