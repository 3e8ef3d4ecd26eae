"""``--plot FILE.png`` for ``lambda``, ``verify`` and ``calibrate``: one option, checked first, written last.

A command adds :data:`plot_option`, calls :func:`check_plot` before any work (refuses an
existing file without ``--overwrite`` and a missing matplotlib with the ``pip install
'sgtune[plot]'`` hint), renders with :func:`render_plot` before it writes anything, and writes
with :func:`write_plot` after the JSON, so a failure never leaves a partial file.
"""
from __future__ import annotations

from typing import Any, Callable

import click

from ._io import check_writable

plot_option = click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
    help="Also write a report figure to FILE.png: 95% ellipses of the target / predicted / empirical "
         "covariance of θ − θ̂ for the most correlated coordinate pairs, Λ as a heat map (and the PIT "
         "histogram for calibrate --true-theta). Needs matplotlib: pip install 'sgtune[plot]'.")


def check_plot(kw: dict[str, Any]) -> None:
    """Before any work: the --plot file may be written and matplotlib is importable."""
    if kw.get("plot_path"):
        from ..io.plots import require_matplotlib

        check_writable(kw["plot_path"], bool(kw.get("overwrite")), "--plot")
        require_matplotlib()


def render_plot(kw: dict[str, Any], build: Callable[[], Any]) -> bytes | None:
    """PNG bytes of ``build()`` when --plot was given (nothing is written yet), else None."""
    if not kw.get("plot_path"):
        return None
    from ..io.plots import render_png

    return render_png(build())


def write_plot(kw: dict[str, Any], png: bytes | None) -> None:
    """Write the rendered figure atomically to the --plot path."""
    if png is not None:
        from ..io.plots import write_png

        write_png(kw["plot_path"], png)
