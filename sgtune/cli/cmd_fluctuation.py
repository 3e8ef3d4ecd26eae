"""``sgtune fluctuation``: small-stepsize fluctuation constants of NLD / HFHR / GAUL / general GNLD."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import numpy as np

from ._io import check_writable, emit, handle_errors, info
from ._options import json_output_options, load_float_npy

_SCHEMES = ("nld", "hfhr", "gaul", "general")


def _load(path: str | None, option: str) -> np.ndarray | None:
    """A numeric array from a .npy, .csv or whitespace-separated .txt file (errors name ``option``)."""
    if path is None:
        return None
    return np.atleast_1d(load_float_npy(path, option))


def _need(value: Any, option: str, scheme: str) -> Any:
    if value is None:
        raise click.UsageError(f"{option} is required for scheme {scheme!r}")
    return value


@click.command("fluctuation")
@click.argument("scheme", type=click.Choice(_SCHEMES))
@click.option("--hessian", required=True, type=click.Path(exists=True, dir_okay=False),
              help="A (d×d, .npy/.csv) of U(x) = ½xᵀAx; for 'general' the M of the full state H(z) = ½zᵀMz.")
@click.option("--observable", required=True, type=click.Path(exists=True, dir_okay=False),
              help="ℓ of the linear observable ℓᵀx (position part for augmented states).")
@click.option("--antisymmetric", type=click.Path(exists=True, dir_okay=False), default=None,
              help="J (nld) or Q (general): antisymmetric matrix.")
@click.option("--diffusion", type=click.Path(exists=True, dir_okay=False), default=None,
              help="D: symmetric positive definite (nld: default I; general: required).")
@click.option("--alpha", type=float, default=None, help="HFHR α > 0.")
@click.option("--gamma", type=float, default=None, help="HFHR/GAUL γ > 0.")
@click.option("--a", "a_param", type=float, default=None, help="GAUL a > 0.")
@click.option("--preconditioner", type=click.Path(exists=True, dir_okay=False), default=None,
              help="GAUL C (SPD, default I).")
@click.option("--budget", type=float, default=None,
              help="nld only: also report the variance-optimal J with ‖D^{-1/2}JD^{-1/2}‖₂ ≤ BUDGET "
                   "and the spectral-gap-optimal J (Lelièvre–Nier–Pavliotis).")
@json_output_options
@handle_errors
def cli(scheme: str, hessian: str, observable: str, antisymmetric: str | None,
        diffusion: str | None, alpha: float | None, gamma: float | None, a_param: float | None,
        preconditioner: str | None, budget: float | None, json_path: str | None,
        overwrite: bool, quiet: bool, strict: bool = False) -> None:
    """Fluctuation constant σ² of SG non-reversible Langevin vs its reversible baseline.

    \b
    Quadratic potential U(x) = ½xᵀAx, observable f = ℓᵀx; for K iterations of step η the
    time average has Var ≈ σ²/(Kη) (the GNLD paper (2025), Thm. 3.2). Schemes:
      nld      dX = −(D+J)∇U dt + sqrt(2D) dW          (--antisymmetric J, --diffusion D)
      hfhr     (x, v), D = diag(αI, γI), Q = [[0,−I],[I,0]]   (--alpha, --gamma)
      gaul     (x, v), D+Q = [[aC, −I], [C, γI]]         (--a, --gamma, --preconditioner C)
      general  full state: --hessian M, --diffusion D, --antisymmetric Q
    Baseline: same D, Q = 0. max_stable_step: largest η with ρ(I − η(D+Q)M) < 1.
    JSON keys: sigma2, sigma2_reversible, ratio, max_stable_step, max_stable_step_reversible,
    reduction, equal_cost_ratio, poisson_coefficient, scheme (+ optimal_* with --budget).
    """
    from ..theory import fluctuation as fl

    check_writable(json_path, overwrite, "--json")
    a_mat = _load(hessian, "--hessian")
    ell = _load(observable, "--observable")
    j_mat = _load(antisymmetric, "--antisymmetric")
    d_mat = _load(diffusion, "--diffusion")
    if budget is not None and scheme != "nld":
        raise click.UsageError("--budget is only available for scheme 'nld'")
    if scheme == "nld":
        res = fl.solve_fluctuation_nld(a_mat, ell, _need(j_mat, "--antisymmetric", scheme), d_mat)
    elif scheme == "hfhr":
        res = fl.solve_fluctuation_hfhr(a_mat, ell, _need(alpha, "--alpha", scheme),
                                        _need(gamma, "--gamma", scheme))
    elif scheme == "gaul":
        res = fl.solve_fluctuation_gaul(a_mat, ell, _need(a_param, "--a", scheme),
                                        _need(gamma, "--gamma", scheme),
                                        _load(preconditioner, "--preconditioner"))
    else:
        res = fl.solve_fluctuation_general(a_mat, _need(d_mat, "--diffusion", scheme),
                                           _need(j_mat, "--antisymmetric", scheme), ell)
    doc: dict[str, Any] = {
        "scheme": scheme,
        "sigma2": res.sigma2,
        "sigma2_reversible": res.sigma2_reversible,
        "ratio": res.ratio,
        "reduction": res.reduction,
        "max_stable_step": res.max_stable_step,
        "max_stable_step_reversible": res.max_stable_step_reversible,
        "equal_cost_ratio": res.equal_cost_ratio,
        "poisson_coefficient": res.poisson_coefficient,
        "poisson_coefficient_reversible": res.poisson_coefficient_reversible,
        "references": ["gnld2025: Prop. 5.2, Cor. 5.5/5.7/5.10"],
    }
    if budget is not None:
        opt = fl.optimal_antisymmetric_nld(a_mat, ell, budget, d_mat)
        doc["optimal_antisymmetric"] = opt.antisymmetric
        doc["optimal_ratio"] = opt.ratio
        doc["optimal_bound_ratio"] = opt.bound_ratio
        if np.asarray(a_mat).shape[0] >= 2:
            gap = fl.spectral_gap_optimal_nld(a_mat, ell, d_mat)
            doc["spectral_gap_optimal_antisymmetric"] = gap.antisymmetric
            doc["spectral_gap_optimal_ratio"] = gap.ratio
            doc["spectral_gap_optimal_budget"] = gap.budget
            doc["spectral_gap"] = gap.spectral_gap
            doc["spectral_gap_reversible"] = gap.spectral_gap_reversible
    if not quiet:
        info(f"{scheme}: sigma2 = {res.sigma2:.6g}  baseline = {res.sigma2_reversible:.6g}  "
             f"ratio = {res.ratio:.4g}", quiet)
        info(f"max stable step: {res.max_stable_step:.4g} (baseline {res.max_stable_step_reversible:.4g});"
             f" equal-cost ratio {res.equal_cost_ratio:.4g}", quiet)
    emit(doc, json_path)
