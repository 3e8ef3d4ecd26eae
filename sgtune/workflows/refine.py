"""Repair a tuned Λ on short real chains where the chain stays local but the loss is not quadratic.

The tuning map target ↦ Λ(target) ↦ Σ_proxy(Λ) is the identity for the linearised chain (Wang, Ding &
Huggins 2026, Algorithm 1), so the theory's own sensitivity of the stationary covariance to the tuning target is the
identity, and the Newton step for the chain's map target ↦ Σ_chain is the defect correction

    target_{k+1} = target_k + (Σ* − Σ̂_k),    Λ_{k+1} = tune(target_{k+1}),

applied here in its positive-definite form target_{k+1} = G target_k Gᵀ with G = Σ*^{1/2} Σ̂_k^{-1/2}
(G Σ̂_k Gᵀ = Σ*; to first order in Σ̂_k − Σ* the two agree), where Σ̂_k is the covariance measured on chains run with Λ_k (batch-means standard errors). Rounds stop
when the measured covariance matches Σ* within Monte Carlo error (or the rounds are spent). A chain
whose spread is not local (the applicability report's runaway or near-critical cases) is not refined:
its sample covariance is not a trustworthy measurement.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import SgtuneError
from ..io.data import Dataset
from ..models import Expansion
from ..core.config import Dynamics, RunSpec
from ..sampler import run_chains
from ..theory.tuning import TuningResult
from .run_length import MIN_STEPS, burn_in_steps, steps_for_error

__all__ = ["RefineRound", "refine", "MC_TARGET"]

#: relative Monte Carlo standard error (entry-wise, largest) each round's chains aim for
MC_TARGET = 0.01
#: a round has converged when the largest entry-wise error is below max(CONVERGED, 3 × its MCSE)
CONVERGED = 0.02
MAX_STEPS = 2_000_000


@dataclass(frozen=True)
class RefineRound:
    """One round: the chains at the current Λ and the correction applied after them.

    Attributes
    ----------
    round : int
        The round's number (from 1).
    steps, chains : int
        The chains' length and number.
    error : float
        max_ij |Σ̂ − Σ*|_ij / √(Σ*_ii Σ*_jj).
    mcse : float
        The same scale, of the standard errors of Σ̂.
    lambda_change : float
        ‖Λ_{k+1} − Λ_k‖_F / ‖Λ_k‖_F (0 after the last round).
    converged : bool
        Whether Σ̂ matched Σ* within Monte Carlo error.
    cov : (D, D) ndarray or None
        Σ̂, the covariance the round's chains measured (with the round's Λ).
    cov_standard_error : (D, D) ndarray or None
        Its entrywise Monte Carlo standard errors.

    Examples
    --------
    >>> from sgtune.workflows.refine import RefineRound
    >>> RefineRound(1, 2000, 8, error=0.02, mcse=0.03, lambda_change=0.0, converged=True).to_dict()["converged"]
    True
    """

    round: int
    steps: int
    chains: int
    error: float          # max_ij |Σ̂ − Σ*|_ij / √(Σ*_ii Σ*_jj)
    mcse: float           # the same scale, of the standard errors of Σ̂
    lambda_change: float  # ‖Λ_{k+1} − Λ_k‖_F / ‖Λ_k‖_F (0 after the last round)
    converged: bool
    cov: np.ndarray | None = field(default=None, repr=False, compare=False)  # Σ̂ of this round's chains
    cov_standard_error: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def tolerance(self) -> float:
        """How close (largest entry-wise error, scaled like ``error``) the round's chain is vouched to be to
        the target: max(``CONVERGED``, error + 3·MCSE), an upper confidence bound on its true error."""
        return max(CONVERGED, self.error + 3.0 * self.mcse)

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "steps": self.steps, "chains": self.chains, "error": self.error,
                "mcse": self.mcse, "lambda_change": self.lambda_change, "converged": self.converged}


def _power(a: np.ndarray, p: float) -> np.ndarray:
    w, v = np.linalg.eigh(0.5 * (a + a.T))
    return (v * np.clip(w, 1e-300, None) ** p) @ v.T


def _power_general(g: np.ndarray, p: float) -> np.ndarray:
    if p == 1.0:
        return g
    w, v = np.linalg.eig(g)
    return np.real((v * w.astype(complex) ** p) @ np.linalg.inv(v))


def _scaled(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    s = np.sqrt(np.diag(ref))
    return np.abs(a) / np.outer(s, s)


def refine(model: Any, data: Dataset, expansion: Expansion, tuned: TuningResult, *, rounds: int,
           prior_precision: Any = 0.0, n_chains: int = 8, seed: int = 0,
           progress: Any = None) -> tuple[TuningResult, list[RefineRound]]:
    """Correct ``tuned`` (a :func:`~sgtune.theory.tuning.tune` result) on chains; see the module docstring.

    Each round re-tunes with exactly ``tuned``'s configuration (:meth:`TuningResult.retune`: its dynamics,
    method, family, blocks and family criterion); only the target moves.

    Parameters
    ----------
    model : PerSampleModel
        The model.
    data : Dataset
        The observations the chains run on.
    expansion : Expansion
        The expansion at θ̂.
    tuned : TuningResult
        The result to correct.
    rounds : int
        Most rounds (≥ 1).
    prior_precision : float or array_like, optional
        Γ.
    n_chains : int, optional
        Chains per round.
    seed : int, optional
        Seed of the first round's chains.
    progress : callable(done, total), optional
        Called over the chains' steps.

    Returns
    -------
    result : TuningResult
        The last tuning result: its ``step_matrix`` is the refined Λ; its ``predicted_cov`` is the
        *proxy's* covariance for that Λ, not Σ*.
    rounds : list of RefineRound
        What each round measured. The last round's chains ran with the returned Λ: its ``cov`` is
        their covariance, the Monte Carlo measurement of what the refined chain gives.

    Raises
    ------
    SgtuneError
        ``rounds`` < 1.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.tuning import tune
    >>> from sgtune.workflows.refine import refine
    >>> data, model = example("logistic"), get_model("logistic")
    >>> e = expand(model, data)
    >>> result, rounds = refine(model, data, e, tune(e, Dynamics(None, batch_size=32)), rounds=1, n_chains=4)
    >>> len(rounds), result.step_matrix.shape
    (1, (5, 5))
    """
    if rounds < 1:
        raise SgtuneError(f"`rounds` must be >= 1, got {rounds}")
    sigma_star = tuned.target_cov
    st = tuned.stationary
    current, target = tuned, sigma_star
    out: list[RefineRound] = []
    for k in range(rounds):
        tau = max(1.0, float(current.tau_worst))
        # chains long enough for an MC_TARGET relative error of a variance: Var ≈ 2τ Σ²/(C·T)
        steps = min(MAX_STEPS, max(MIN_STEPS, steps_for_error(2.0 * tau, n_chains, MC_TARGET ** 2)))
        burn = min(steps, burn_in_steps(tau, current.spectral_radius, kept=steps))
        ch = run_chains(model, data,
                        Dynamics(current.step_matrix, st.batch_size, inv_temperature=st.inv_temperature,
                                 momentum=st.momentum,
                                 batching="without-replacement" if st.without_replacement else "replacement"),
                        RunSpec(steps + burn, n_chains=n_chains, burn_in=burn, seed=seed + 1000 * k),
                        prior_precision=prior_precision, initial=expansion.theta_hat, progress=progress)
        err = float(_scaled(ch.cov - sigma_star, sigma_star).max())
        mcse = float(_scaled(ch.cov_standard_error, sigma_star).max())
        converged = err <= max(CONVERGED, 3.0 * mcse)
        if converged or k == rounds - 1:
            out.append(RefineRound(k + 1, steps, n_chains, err, mcse, 0.0, converged, ch.cov, ch.cov_standard_error))
            break
        nxt = None
        for damping in (1.0, 0.5, 0.25):  # keep Λ tunable: a shorter step when the corrected target is not
            G = _power(sigma_star, 0.5) @ _power(ch.cov, -0.5)  # G Σ̂ Gᵀ = Σ*: the congruence that maps the
            G = _power_general(G, damping)                       # chain's covariance onto the target
            cand = G @ target @ G.T
            cand = 0.5 * (cand + cand.T)
            try:  # the same dynamics, method, family, blocks and criterion: only the target moves
                nxt = current.retune(expansion, cand)
            except SgtuneError:
                continue
            target = cand
            break
        if nxt is None:
            out.append(RefineRound(k + 1, steps, n_chains, err, mcse, 0.0, False, ch.cov, ch.cov_standard_error))
            break
        change = float(np.linalg.norm(nxt.step_matrix - current.step_matrix) / np.linalg.norm(current.step_matrix))
        out.append(RefineRound(k + 1, steps, n_chains, err, mcse, change, False, ch.cov, ch.cov_standard_error))
        current = nxt
    return current, out
