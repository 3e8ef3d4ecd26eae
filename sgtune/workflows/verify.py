"""Predict, run, compare: check an exact stationary-covariance prediction against the chains."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core._validation import as_spd, check_positive
from ..core.config import Dynamics
from ..core.errors import SgtuneError, UnstableStepSizeError
from ..diagnostics.mcse import CovarianceTest, compare_covariance
from ..io.data import Dataset
from ..models import GLM, Expansion
from ..sampler.driver import ChainResult, ProgressCallback, run_chains
from ..sampler.registry import options_for, sampler_spec
from .run_length import default_run_length, run_spec

__all__ = ["VerificationReport", "verify_stationary_cov", "default_run_length", "PosteriorPrediction",
           "chain_prediction", "prediction_check", "CHECK_ALPHA", "CHECK_TOLERANCE"]

#: the chain-health prediction check (:func:`prediction_check`): family-wise level …
CHECK_ALPHA = 1e-3
#: … and the model error allowed in quadrature (the applicability report's deviation threshold)
CHECK_TOLERANCE = 0.05


@dataclass(frozen=True)
class PosteriorPrediction:
    """The prediction for samplers of the posterior itself (sghmc, the SMILE samplers): Σ = (β H)⁻¹,
    H = J + Γ/N at θ̂ (exact for a linear model, the Laplace approximation otherwise); no Λ, so no
    spectral radius or autocorrelation time (NaN)."""

    cov: np.ndarray
    step_matrix: np.ndarray
    spectral_radius: float = math.nan
    tau_worst: float = math.nan


@dataclass(frozen=True)
class VerificationReport:
    """Prediction vs chains: ``test.passed`` is the verdict."""

    predicted: np.ndarray
    empirical: np.ndarray
    test: CovarianceTest
    chains: ChainResult
    step_matrix: np.ndarray
    stationary: Any
    tuning: Any
    mode: str
    against: str = "prediction"
    reference: Any = None

    @property
    def passed(self) -> bool:
        return self.test.passed

    @property
    def compared_with(self) -> np.ndarray:
        """The matrix the chains were tested against: ``reference`` (``against`` = "target" or "matrix"),
        else ``predicted``."""
        return self.predicted if self.reference is None else self.reference


@cites("wang2026", "Prop. 4.2, Eq. (11); Thm. 4.3, Eq. (12) — prediction checked by simulation")
def verify_stationary_cov(model: GLM, data: Dataset, expansion: Expansion, step_matrix: Any = None, *,
                          batch_size: int, target: Any = None, method: str = "dq-exact", family: str = "dense",
                          inv_temperature: float = math.inf, without_replacement: bool = False,
                          momentum: float = 0.0, prior_precision: Any = 0.0, n_steps: int | None = None,
                          burn_in: int | None = None, n_chains: int = 16, batches_per_chain: int | None = None,
                          alpha: float = 1e-3, relative_tolerance: float = 0.0, inflate_prediction: float = 1.0,
                          seed: int = 0, progress: ProgressCallback | None = None,
                          keep_draws: int = 0, sampler: str = "sgld", friction: float = 1.0,
                          against: Any = "prediction") -> VerificationReport:
    r"""Test Σ̂ (chains) = Σ(Λ) (eqs. 11–12) entrywise with batch-means z-scores and a Bonferroni t-threshold.

    With ``step_matrix`` given, Σ(Λ) comes from :func:`sgtune.theory.stationary.predict_stationary_cov`;
    otherwise Λ is first tuned to ``target`` (default ``"sandwich"``) with
    :func:`sgtune.theory.tuning.tune` and Σ(Λ) is the tuned chain's exact prediction.
    The chains start at θ̂ and run SG(L)D with that Λ. The decision is
    :func:`sgtune.diagnostics.mcse.compare_covariance`: max_{i≤j} |z_ij| ≤ t_{K−1}(1 − α/(2k)).
    For linear regression the prediction is exact, so a correct Σ passes with probability
    ≥ 1 − α; for other GLMs the proxy carries an O(λ/B) error — pass a
    ``relative_tolerance`` for it. ``inflate_prediction`` multiplies the prediction (a
    deliberately wrong prediction, to see the test reject). ``keep_draws`` > 0 keeps about
    that many thinned post-burn-in draws (pooled over chains) in ``chains.trace`` (e.g. for
    :func:`sgtune.diagnostics.ksd.chain_ksd`); the draws do not change the chains.

    ``sampler`` = ``"sghmc"`` or a SMILE sampler (:func:`~sgtune.sampler.driver.run_chains`) samples
    the tempered posterior itself: ``step_matrix`` is then its scalar step size (h or ε), β = ``inf``
    means N, and the prediction is the posterior covariance (β H)⁻¹ with H = J + Γ/N at θ̂ (mode
    ``"posterior"``; exact for linear regression up to the sampler's own bias: SMILE-naive's
    stationary law is exact only for isotropic minibatch noise, the SMILE paper (anonymous, 2025) appendix A, and SGHMC
    without a noise estimate is hot unless the minibatch noise is small).

    ``against`` chooses what the chains are tested against: ``"prediction"`` (default, the above),
    ``"target"`` (the tuning target Σ*; needs ``target``, i.e. Λ tuned here) or a (D, D) SPD matrix,
    e.g. the target a Λ refined on chains (:func:`sgtune.workflows.refine.refine`) is meant to give,
    whose linearised prediction is not what its chain gives. ``inflate_prediction`` multiplies
    whichever is compared.

    Returns
    -------
    VerificationReport
    """
    from ..theory.stationary import predict_stationary_cov
    from ..theory.tuning import tune

    f = check_positive(inflate_prediction, "inflate_prediction")
    tuning = None
    if sampler_spec(sampler).target == "posterior":
        if step_matrix is None or target is not None:
            raise SgtuneError(f"sampler {sampler!r} samples the posterior with a scalar step size: give step_matrix "
                              "(--step-size) and no tuning target")
        beta = data.n_data if math.isinf(inv_temperature) else check_positive(inv_temperature, "inv_temperature")
        inv_temperature = float(beta)
        arr = np.asarray(step_matrix, dtype=float)  # the scalar step as the diagonal h·1 (reports, plots)
        stationary: Any = PosteriorPrediction(np.linalg.inv(beta * expansion.hessian),
                                              np.full(expansion.dim, arr.reshape(-1)[0]) if arr.size == 1 else arr)
        lam = step_matrix
        mode = "posterior"
    elif step_matrix is None:
        tuning = tune(expansion, Dynamics(None, batch_size, inv_temperature=inv_temperature, momentum=momentum,
                                          batching=bool(without_replacement)),
                      target="sandwich" if target is None else target, method=method, family=family)
        lam = tuning.step_matrix
        stationary = tuning.stationary
        mode = "lambda"
    else:
        if target is not None:
            raise SgtuneError("give either step_matrix (check a prediction) or target (tune first), not both")
        lam = step_matrix
        stationary = predict_stationary_cov(expansion, Dynamics(lam, batch_size, inv_temperature=inv_temperature,
                                                                momentum=momentum, batching=bool(without_replacement)))
        mode = "covariance"
    run = run_spec(stationary.tau_worst, stationary.spectral_radius, n_chains=n_chains, n_steps=n_steps,
                   burn_in=burn_in, max_draws=keep_draws, batches_per_chain=batches_per_chain, seed=seed)
    chains = run_chains(model, data,
                        Dynamics(lam, batch_size, inv_temperature=inv_temperature, momentum=momentum,
                                 batching="without-replacement" if without_replacement else "replacement"),
                        run,
                        options_for(sampler, friction=friction), prior_precision=prior_precision,
                        initial=expansion.theta_hat, progress=progress)
    if chains.n_batches < 2:
        raise SgtuneError("verification needs at least 2 batches for standard errors; use more chains")
    if np.any(chains.cov_standard_error[np.triu_indices(expansion.dim)] <= 0):
        raise SgtuneError("a covariance standard error is zero (deterministic chains?); nothing to test")
    predicted = f * stationary.cov
    label, reference = _reference(against, tuning, expansion.dim)
    compared = predicted if reference is None else f * reference
    test = compare_covariance(compared, chains.cov, chains.cov_standard_error, n_batches=chains.n_batches,
                              alpha=alpha, relative_tolerance=relative_tolerance)
    return VerificationReport(predicted=predicted, empirical=chains.cov, test=test, chains=chains,
                              step_matrix=np.asarray(stationary.step_matrix), stationary=stationary,
                              tuning=tuning, mode=mode, against=label,
                              reference=None if reference is None else f * reference)


def _reference(against: Any, tuning: Any, dim: int) -> tuple[str, np.ndarray | None]:
    """(label, matrix) of ``against``: ("prediction", None), ("target", Σ*) or ("matrix", the array)."""
    if isinstance(against, str):
        if against == "prediction":
            return "prediction", None
        if against == "target":
            if tuning is None:
                raise SgtuneError("against='target' needs Λ tuned here (a target, no step_matrix); with a given Λ "
                                  "pass the target covariance itself as against=")
            return "target", np.asarray(tuning.target_cov)
        raise SgtuneError(f"against must be 'prediction', 'target' or a (D, D) matrix, got {against!r}")
    return "matrix", as_spd(against, "against", dim, rtol=1e-10)


def chain_prediction(expansion: Expansion, step_matrix: Any, *, sampler: str, batch_size: int,
                     inv_temperature: float, n_data: int, batching: str = "replacement", momentum: float = 0.0,
                     decay: float = 0.0) -> tuple[np.ndarray | None, str]:
    """The stationary covariance sgtune predicts for chains run with these settings, and its mode.

    ``"covariance"``: SG(L)D with a constant Λ and minibatches with or without replacement, the
    exact stationary covariance of the linearised chain (wang2026 eqs. 11–12,
    :func:`~sgtune.theory.stationary.predict_stationary_cov`). ``"posterior"``: the tuned SMILE
    samplers (``smile``, ``psmile``), whose target is the tempered posterior, (β H)⁻¹ at θ̂ (exact
    for linear regression, Laplace otherwise). Otherwise ``(None, why)``: a decaying step size has no
    stationary law, and sgtune has no exact prediction for reshuffled epochs, SGLRW, clipped SGLD,
    SGHMC's or SMILE-naive's minibatch bias; ``(None, "unstable: …")`` when the linearised chain
    has no stationary law at this Λ (see :func:`prediction_check`).
    """
    from ..theory.stationary import predict_stationary_cov

    if decay:
        return None, "a decaying step size (--decay) has no stationary covariance"
    spec = sampler_spec(sampler)
    if spec.prediction == "posterior":
        beta = n_data if math.isinf(inv_temperature) else float(inv_temperature)
        return np.linalg.inv(beta * expansion.hessian), "posterior"
    if spec.prediction != "covariance":
        return None, f"sgtune has no exact stationary prediction for the {sampler} sampler"
    if batching not in ("replacement", "without-replacement"):
        return None, f"sgtune has no stationary prediction for {batching} batching in this check"
    try:
        st = predict_stationary_cov(expansion, Dynamics(step_matrix, batch_size, inv_temperature=inv_temperature,
                                                        momentum=momentum, batching=batching))
    except UnstableStepSizeError as exc:
        return None, f"unstable: {str(exc).splitlines()[0]}"
    return st.cov, "covariance"


def prediction_check(chains: ChainResult, predicted: np.ndarray | None, *, mode: str, alpha: float = CHECK_ALPHA,
                     relative_tolerance: float = CHECK_TOLERANCE) -> dict[str, Any] | None:
    """The chains' covariance against ``predicted`` (:func:`compare_covariance`, with a model error of
    ``relative_tolerance`` in quadrature): the ``prediction_check`` of the chain-health report.
    ``None`` when there is no prediction, the run has fewer than 2 batches or a zero standard error
    (nothing to test). ``mode`` "unstable: …" (from :func:`chain_prediction`) is a failed check whose
    ``reason`` says that the chain cannot be stationary near θ̂, whatever it looks like."""
    if mode.startswith("unstable:"):
        return {"mode": "unstable", "passed": False,
                "reason": f"the step size is unstable for the linearised chain ({mode[len('unstable:'):].strip()}); "
                          "the chain cannot settle near θ̂ and its moments describe no stationary law"}
    if predicted is None:
        return None
    d = predicted.shape[0]
    if chains.n_batches < 2 or not np.all(np.isfinite(chains.cov)) or \
            np.any(chains.cov_standard_error[np.triu_indices(d)] <= 0):
        return None
    t = compare_covariance(predicted, chains.cov, chains.cov_standard_error, n_batches=chains.n_batches,
                           alpha=alpha, relative_tolerance=relative_tolerance)
    return {"mode": mode, "passed": t.passed, "z_max": t.z_max, "threshold": t.threshold, "argmax": list(t.argmax),
            "alpha": t.alpha, "relative_tolerance": t.relative_tolerance,
            "relative_frobenius_error": t.relative_frobenius_error}
