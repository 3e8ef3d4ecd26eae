"""The other papers' theories in a plan: notes and extra columns where they apply.

Each note is a JSON object ``{"source": ..., "applies_to": ..., "text": ..., <numbers>}`` and its headline
number is also an extra column of the candidate:

- ``reshuffle_variance_change`` (Shaw & Whalley (2025), §4; every candidate without momentum): the direction-averaged
  relative change of the stationary variance if the chain reshuffled once per epoch instead of drawing
  fresh batches, at the planned Λ (:func:`sgtune.theory.alternatives.reshuffle_variance_change`);
  for ``--batching reshuffle`` candidates it turns the fresh-batch prediction into the reshuffled one
  (marked ``approximate``);
- ``sglrw_variance_change`` and ``sglrw_error_ratio`` (Mensch et al. (2025), §4; SGLD targets with a scalar or
  diagonal Λ): the relative change of the variances if the chain ran SGLRW with the same Λ, and the
  ratio E‖M_SGLRW‖²_F/E‖M_SGLD‖²_F of the second-order error terms at θ̂ (Theorem 4.2, Lemma 4.3);
- ``nonreversible_variance_ratio`` (the GNLD paper (2025), Thm. 3.5, docs/conventions.md; SGLD targets): the asymptotic
  variance ratio of the slowest direction's functional with the budget-optimal non-reversible J, and
  whether the planned step is still stable with it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import SgtuneError
from ..theory.alternatives import (modal_directions, nonreversible_gain, reshuffle_variance_change,
                                   sglrw_variance_change)
from ..theory.minibatch import minibatch_error
from ..theory.stationary import finite_population_factor

__all__ = ["add_notes", "reshuffle_adjust", "SGLRW_RATIO_MAX_DIM"]

#: Mensch et al.'s (2025) E‖M‖² ratio costs O(N·D·min(N, D)); above this D only the variance change is reported
SGLRW_RATIO_MAX_DIM = 200
#: the budget κ_J of the non-reversible note
NONREVERSIBLE_BUDGET = 1.0


def _stationary_cov(ctx: Any, cand: Any) -> np.ndarray:
    return ctx.target_cov if cand.stationary is None else cand.stationary.cov


def _reshuffle(ctx: Any, cand: Any) -> Any:
    """Shaw & Whalley's (2025) change at the candidate's Λ; the gradient noise C̄ is taken at the target (exact for the dense
    family, whose Σ(Λ) is Σ*; for the others one more approximation in an approximate note)."""
    e = ctx.expansion
    cbar = ctx.noise_at_target(cand.batch_size, True)
    if cand.modes is None:
        cand.modes = modal_directions(e.hessian, cand.step_matrix)
    return reshuffle_variance_change(e.hessian, cand.step_matrix, cbar, n_data=e.n_data, batch_size=cand.batch_size,
                                     inv_temperature=cand.inverse_temperature, modes=cand.modes)


def reshuffle_adjust(ctx: Any, cand: Any) -> None:
    """A ``--batching reshuffle`` candidate: the fresh-batch (without replacement) prediction corrected by
    Shaw & Whalley's (2025) per-direction variance change; bias and c are approximations."""
    try:
        r = _reshuffle(ctx, cand)
    except SgtuneError as exc:
        cand.reason = f"reshuffle: {exc}"
        cand.burn_in_steps = math.inf
        return
    cov = r.reshuffled_cov(_stationary_cov(ctx, cand))
    cand.covariance_error = float(np.linalg.norm(cov - ctx.target_cov) / math.sqrt(ctx.target_norm2))
    cand.approximate += ["covariance_error", "cov_mc_error_constant"]
    cand.notes.append({
        "source": "shaw2025: §4, SGLD-RR vs SGLD-RM on the Gaussian model problem (docs/conventions.md), per modal direction",
        "applies_to": "batching reshuffle",
        "text": (f"reshuffling has no invariant law; its epoch-averaged covariance is the fresh-batch one with each "
                 f"modal direction's variance changed by {_fmt_range(r.variance_change)} (R = {r.n_batches} batches "
                 "per epoch; exact for a Gaussian location model, an approximation otherwise); the Monte Carlo "
                 "constant is the fresh-batch chain's"),
        "variance_change_mean": float(np.mean(r.variance_change)),
        "variance_change_min": float(np.min(r.variance_change)),
        "variance_change_max": float(np.max(r.variance_change)),
    })
    cand.extra["reshuffle_variance_change"] = float(np.mean(r.variance_change))


def add_notes(ctx: Any, model: Any, dataset: Any, cand: Any, tolerance: float) -> None:
    """Attach the notes that apply to a candidate with a tuned Λ (module docstring)."""
    if cand.step_matrix is None:
        return
    e = ctx.expansion
    sgld = math.isfinite(cand.inverse_temperature)
    if cand.momentum == 0.0 and cand.batching != "reshuffle":
        try:
            r = _reshuffle(ctx, cand)
        except SgtuneError:
            r = None
        if r is not None:
            mean = float(np.mean(r.variance_change))
            cand.extra["reshuffle_variance_change"] = mean
            cand.notes.append({
                "source": "shaw2025: §4, SGLD-RR vs SGLD-RM on the Gaussian model problem (docs/conventions.md)",
                "applies_to": "batching",
                "text": (f"reshuffling once per epoch instead of fresh batches would change the stationary variance "
                         f"by {_fmt_range(r.variance_change)} across the modal directions (mean {mean:+.1%}); "
                         "Λ is tuned for fresh batches" + (" — with SGD the epoch's gradient noise nearly cancels, "
                                                            "so reshuffled SGD under-disperses" if not sgld else "")),
                "variance_change_mean": mean,
                "variance_change_min": float(np.min(r.variance_change)),
                "variance_change_max": float(np.max(r.variance_change)),
            })
    if not sgld:
        return
    if cand.family in ("scalar", "diagonal") and cand.momentum == 0.0:
        wor = cand.batching != "replacement"
        f = finite_population_factor(e.n_data, cand.batch_size, wor)
        cdiag = np.diag(e.gradient_cov()) * (f / cand.batch_size)
        change = sglrw_variance_change(np.diag(cand.step_matrix), cdiag, inv_temperature=cand.inverse_temperature)
        note: dict[str, Any] = {
            "source": "mensch2025: §4, Thm. 4.2 and Lemma 4.3 (SGLRW's E[M] = offdiag(G)); docs/conventions.md",
            "applies_to": "sampler sglrw (scalar/diagonal Λ, SGLD target)",
            "text": (f"SGLRW with this Λ would remove SGLD's per-coordinate variance inflation δG_jj/2: the variances "
                     f"would change by {_fmt_range(change)}, which the tuned Λ relies on"),
            "variance_change_mean": float(np.mean(change)),
        }
        cand.extra["sglrw_variance_change"] = float(np.mean(change))
        if e.dim <= SGLRW_RATIO_MAX_DIM and dataset is not None and not getattr(dataset, "out_of_core", False):
            try:
                err = minibatch_error(model, dataset, e.theta_hat, cand.batch_size,
                                      prior_precision=_prior(e), replacement=not wor, return_matrices=False)
                note["error_ratio"] = float(err.ratio)
                note["text"] += (f"; its second-order covariance error term E‖M‖²_F is {err.ratio:.3g} × SGLD's "
                                 f"at θ̂ (diagonal share {err.diagonal_share:.3g})")
                cand.extra["sglrw_error_ratio"] = float(err.ratio)
            except (SgtuneError, TypeError, AttributeError):  # not a GLM: no per-sample gradients in Mensch et al. (2025) form
                pass
        cand.notes.append(note)
    if cand.momentum == 0.0 and e.dim >= 2:
        try:
            g = nonreversible_gain(e.hessian, cand.step_matrix, inv_temperature=cand.inverse_temperature,
                                   budget=NONREVERSIBLE_BUDGET)
        except SgtuneError:
            return
        cand.extra["nonreversible_variance_ratio"] = g.variance_ratio
        cand.notes.append({
            "source": "gnld2025: Thm. 3.5, Prop. 5.3, Cor. 5.5 (NLD); docs/conventions.md (budget-optimal J)",
            "applies_to": "non-reversible SGLD (NLD drift Λ + J)",
            "text": (f"a non-reversible drift J with ‖Λ^(-1/2)JΛ^(-1/2)‖₂ ≤ {g.budget:g} cuts the asymptotic variance of "
                     f"the slowest direction's mean by the factor {g.variance_ratio:.3g}; the step stays stable up "
                     f"to {g.max_step_multiple:.3g} × the planned one (reversible: {g.max_step_multiple_reversible:.3g} "
                     f"×), so the gain is {'available' if g.available else 'NOT available'} at the planned step"),
            "variance_ratio": g.variance_ratio, "budget": g.budget,
            "max_step_multiple": g.max_step_multiple, "available": g.available,
        })


def _prior(e: Any) -> Any:
    gam = getattr(e, "prior_precision", None)
    return 0.0 if gam is None else gam


def _fmt_range(x: np.ndarray) -> str:
    lo, hi = float(np.min(x)), float(np.max(x))
    return f"{lo:+.1%}" if math.isclose(lo, hi, rel_tol=1e-3, abs_tol=1e-6) else f"{lo:+.1%} to {hi:+.1%}"
