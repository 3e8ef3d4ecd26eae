"""``sgtune derive NAME``: print a sympy closed form."""
from __future__ import annotations

import click
import sympy as sp

from ..symbolic import DERIVATIONS, derive, render
from ._config import config_option
from ._io import check_writable, emit, handle_errors, info


@click.command("derive")
@click.argument("name", type=click.Choice(sorted(DERIVATIONS)))
@click.option("--latex", "as_latex", is_flag=True, help="Print the LaTeX form on stderr instead of the plain form.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON document to FILE instead of stdout.")
@click.option("--overwrite", is_flag=True, help="Allow replacing an existing --json file.")
@config_option
@handle_errors
def cli(name: str, as_latex: bool, json_path: str | None, overwrite: bool) -> None:
    """Print the sympy closed form NAME (JSON keys: expression, latex, expressions)."""
    check_writable(json_path, overwrite, "--json")
    exprs = derive(name)
    text, latex = render(exprs)
    info(latex if as_latex else text)
    emit({"name": name, "expression": text, "latex": latex,
          "expressions": {k: str(v) for k, v in exprs.items()},
          "latex_expressions": {k: sp.latex(v) for k, v in exprs.items()}}, json_path)
