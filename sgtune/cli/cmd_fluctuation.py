"""``sgtune fluctuation``: small-stepsize fluctuation constants of NLD / HFHR / GAUL / general GNLD."""
from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class _Inputs:
    """The scheme's inputs as the options gave them: the matrices loaded (the preconditioner when its scheme
    needs it), the scalars as typed (None: not given)."""

    hessian: np.ndarray
    observable: np.ndarray
    antisymmetric: np.ndarray | None = None
    diffusion: np.ndarray | None = None
    alpha: float | None = None
    gamma: float | None = None
    a_param: float | None = None
    preconditioner: str | None = None  # a path, read by the one scheme that uses it (gaul)
    budget: float | None = None

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "_Inputs":
        """Load the matrix files (errors name the option) and keep the scalars."""
        return cls(hessian=_load(options["hessian"], "--hessian"),  # type: ignore[arg-type]
                   observable=_load(options["observable"], "--observable"),  # type: ignore[arg-type]
                   antisymmetric=_load(options["antisymmetric"], "--antisymmetric"),
                   diffusion=_load(options["diffusion"], "--diffusion"), alpha=options["alpha"],
                   gamma=options["gamma"], a_param=options["a_param"],
                   preconditioner=options["preconditioner"], budget=options["budget"])


def _solve(scheme: str, x: _Inputs) -> Any:
    """The fluctuation constants of ``scheme`` (the GNLD paper (2025), Prop. 5.2; Cor. 5.5/5.7/5.10)."""
    from ..theory import fluctuation as fl

    if scheme == "nld":
        return fl.solve_fluctuation_nld(x.hessian, x.observable, _need(x.antisymmetric, "--antisymmetric", scheme),
                                        x.diffusion)
    if scheme == "hfhr":
        return fl.solve_fluctuation_hfhr(x.hessian, x.observable, _need(x.alpha, "--alpha", scheme),
                                         _need(x.gamma, "--gamma", scheme))
    if scheme == "gaul":
        return fl.solve_fluctuation_gaul(x.hessian, x.observable, _need(x.a_param, "--a", scheme),
                                         _need(x.gamma, "--gamma", scheme), _load(x.preconditioner, "--preconditioner"))
    return fl.solve_fluctuation_general(x.hessian, _need(x.diffusion, "--diffusion", scheme),
                                        _need(x.antisymmetric, "--antisymmetric", scheme), x.observable)


def _optimal_antisymmetric(x: _Inputs) -> dict[str, Any]:
    """``--budget`` (nld): the variance-optimal J within the budget and the spectral-gap-optimal J."""
    from ..theory import fluctuation as fl

    opt = fl.optimal_antisymmetric_nld(x.hessian, x.observable, x.budget, x.diffusion)
    doc: dict[str, Any] = {"optimal_antisymmetric": opt.antisymmetric, "optimal_ratio": opt.ratio,
                           "optimal_bound_ratio": opt.bound_ratio}
    if np.asarray(x.hessian).shape[0] >= 2:
        gap = fl.spectral_gap_optimal_nld(x.hessian, x.observable, x.diffusion)
        doc.update(spectral_gap_optimal_antisymmetric=gap.antisymmetric, spectral_gap_optimal_ratio=gap.ratio,
                   spectral_gap_optimal_budget=gap.budget, spectral_gap=gap.spectral_gap,
                   spectral_gap_reversible=gap.spectral_gap_reversible)
    return doc


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
def cli(scheme: str, json_path: str | None, overwrite: bool, quiet: bool, strict: bool = False,
        **options: Any) -> None:
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
    check_writable(json_path, overwrite, "--json")
    x = _Inputs.from_options(options)
    if x.budget is not None and scheme != "nld":
        raise click.UsageError("--budget is only available for scheme 'nld'")
    res = _solve(scheme, x)
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
    if x.budget is not None:
        doc.update(_optimal_antisymmetric(x))
    if not quiet:
        info(f"{scheme}: sigma2 = {res.sigma2:.6g}  baseline = {res.sigma2_reversible:.6g}  "
             f"ratio = {res.ratio:.4g}", quiet)
        info(f"max stable step: {res.max_stable_step:.4g} (baseline {res.max_stable_step_reversible:.4g});"
             f" equal-cost ratio {res.equal_cost_ratio:.4g}", quiet)
    emit(doc, json_path)
