"""Symbolic (sympy) derivations: closed forms users can print and tests use as oracles.

Each entry of ``DERIVATIONS`` maps a name (as used by ``sgtune derive NAME``) to
``"module:function"``; the function takes no required arguments and returns either one
sympy expression or a ``dict`` of named expressions (insertion order is kept).
To add one, write the function in a module of this package and add a line here.
"""
from __future__ import annotations

import importlib
from typing import Any

import sympy as sp

DERIVATIONS: dict[str, str] = {
    "nld": "sgtune.symbolic.fluctuation:nld",
    "hfhr": "sgtune.symbolic.fluctuation:hfhr",
    "gaul": "sgtune.symbolic.fluctuation:gaul",
    "clip-factor": "sgtune.symbolic.minibatch:clip_factor",
    "minibatch-moments": "sgtune.symbolic.minibatch:minibatch_moments",
    "isotropic-diagonal-share": "sgtune.symbolic.minibatch:isotropic_diagonal_share",
    "stationary-1d": "sgtune.symbolic.stationary:stationary_variance_1d",
    "rr-rm": "sgtune.symbolic.reshuffle:rr_rm",
}


def derive(name: str) -> dict[str, Any]:
    """Run the derivation ``name``; return ``{label: sympy expression}``."""
    try:
        target = DERIVATIONS[name]
    except KeyError:
        from ..core.errors import SgtuneError
        raise SgtuneError(
            f"unknown derivation {name!r}; choose one of {', '.join(sorted(DERIVATIONS))}") from None
    module, func = target.split(":")
    result = getattr(importlib.import_module(module), func)()
    if isinstance(result, dict):
        return dict(result)
    return {name: result}


def render(exprs: dict[str, Any]) -> tuple[str, str]:
    """Plain-text and LaTeX renderings of a dict of expressions."""
    if len(exprs) == 1:
        (e,) = exprs.values()
        return str(e), sp.latex(e)
    text = "\n".join(f"{k} = {v}" for k, v in exprs.items())
    latex = " \\\\\n".join(f"\\text{{{k}}} = {sp.latex(v)}" for k, v in exprs.items())
    return text, latex
