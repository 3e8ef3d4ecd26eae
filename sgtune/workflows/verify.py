"""Predict, run, compare: check an exact stationary-covariance prediction against the chains."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core._validation import as_spd, check_positive
from ..core.results import ResultMixin, SummaryTable, table_from_columns
from ..core.config import Dynamics, RunSpec
from ..core.errors import SgtuneError, UnstableStepSizeError
from ..diagnostics.mcse import CovarianceTest, compare_covariance
from ..io.data import Dataset
from ..models import GLM, Expansion
from ..sampler.driver import ChainResult, ProgressCallback, run_chains
from ..sampler.registry import options_for, sampler_spec
from .run_length import RunOptions, default_run_length, resolve_run

__all__ = ["VerificationReport", "verify_stationary_cov", "TuneOptions", "CheckOptions",
           "default_run_length", "PosteriorPrediction", "chain_prediction", "prediction_check", "CHECK_ALPHA",
           "CHECK_TOLERANCE"]

#: the chain-health prediction check (:func:`prediction_check`): family-wise level …
CHECK_ALPHA = 1e-3
#: … and the model error allowed in quadrature (the applicability report's deviation threshold)
CHECK_TOLERANCE = 0.05


@dataclass(frozen=True)
class PosteriorPrediction:
    """The prediction for samplers of the posterior itself (sghmc, the SMILE samplers): Σ = (β H)⁻¹.

    H = J + Γ/N at θ̂ (exact for a linear model, the Laplace approximation otherwise); no Λ, so no
    spectral radius or autocorrelation time (NaN).

    Attributes
    ----------
    cov : (D, D) ndarray
        (β H)⁻¹.
    step_matrix : ndarray
        The scalar step as a diagonal (for reports).
    spectral_radius, tau_worst : float
        NaN (the sampler has no Λ).

    Examples
    --------
    >>> from sgtune.workflows.verify import PosteriorPrediction
    >>> PosteriorPrediction(np.eye(2), np.full(2, 0.1)).tau_worst
    nan
    """

    cov: np.ndarray
    step_matrix: np.ndarray
    spectral_radius: float = math.nan
    tau_worst: float = math.nan


@dataclass(frozen=True, repr=False)
class VerificationReport(ResultMixin):
    """Prediction vs chains, as :func:`verify_stationary_cov` returns it: ``test.passed`` is the verdict.

    Attributes
    ----------
    predicted : (D, D) ndarray
        The covariance the theory predicts (times ``inflate_prediction``).
    empirical : (D, D) ndarray
        The chains' pooled covariance.
    test : CovarianceTest
        The entrywise z-test (:func:`sgtune.diagnostics.mcse.compare_covariance`).
    chains : ChainResult
        The chains.
    step_matrix : ndarray
        The Λ the chains ran with (the scalar step as a diagonal for SGHMC and SMILE).
    stationary : StationaryCov or PosteriorPrediction
        The prediction behind ``predicted``.
    tuning : TuningResult or None
        The tuning, when Λ was tuned first.
    mode : str
        ``"covariance"`` (Λ given), ``"lambda"`` (Λ tuned) or ``"posterior"`` (SGHMC, SMILE).
    against : str
        What the chains were tested against: ``"prediction"``, ``"target"`` or ``"matrix"``.
    reference : (D, D) ndarray or None
        The matrix they were tested against when it is not the prediction (``compared_with``).
    parameter_names : tuple of str
        (property) The name of each coordinate of θ (the chains').

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.workflows.verify import CheckOptions, verify_stationary_cov
    >>> data, model = example("logistic"), get_model("logistic")
    >>> report = verify_stationary_cov(model, data, expand(model, data), Dynamics(0.1, batch_size=32),
    ...                                RunSpec(1000, n_chains=4), check=CheckOptions(relative_tolerance=0.1))
    >>> report.mode, report.predicted.shape, report.test.n_tests
    ('covariance', (5, 5), 15)
    """

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

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """The name of each coordinate of θ (the rows of ``predicted`` and ``empirical``)."""
        return self.chains.parameter_names  # type: ignore[return-value]

    def _repr_items(self) -> list[tuple[str, Any]]:
        return [("D", self.predicted.shape[0]), ("passed", self.passed), ("z_max", self.test.z_max),
                ("threshold", self.test.threshold), ("mode", self.mode)]

    def summary(self) -> SummaryTable:
        """Per coordinate: the predicted and the measured standard deviation, their ratio, the chains' mean and
        the z-score of the variance (the entrywise test's diagonal)."""
        psd = np.sqrt(np.clip(np.diag(self.compared_with), 0.0, None))
        esd = np.sqrt(np.clip(np.diag(self.empirical), 0.0, None))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = esd / psd
        return table_from_columns(
            f"Verification ({self.mode}): {'passed' if self.passed else 'REJECTED'}, D = {self.predicted.shape[0]}",
            self.parameter_names, {"mean": self.chains.mean, "sd predicted": psd, "sd measured": esd,
                                   "measured/predicted": ratio, "z (variance)": np.diag(self.test.z)},
            info=(("max |z| (all entries)", self.test.z_max), ("threshold", self.test.threshold),
                  ("tests", self.test.n_tests), ("relative Frobenius error", self.test.relative_frobenius_error)),
            notes=("z (variance): (measured − predicted variance) / its Monte Carlo standard error; the prediction "
                   "is rejected when any entry's |z| exceeds the threshold (Bonferroni over the upper triangle).",))

    def to_dict(self) -> dict[str, Any]:
        """Predicted and empirical covariances, the test and the names (arrays stay NumPy arrays)."""
        return {"parameter_names": list(self.parameter_names), "predicted": self.predicted,
                "empirical": self.empirical, "z_max": self.test.z_max, "passed": self.passed, "mode": self.mode,
                "against": self.against, "compared_with": self.compared_with,
                "test": self.test.to_dict(), "lambda": self.step_matrix}


@dataclass(frozen=True)
class TuneOptions:
    """How Λ is tuned when the chain's :class:`~sgtune.core.config.Dynamics` has no step.

    The arguments of :func:`sgtune.theory.tuning.tune` beyond the chain.

    Parameters
    ----------
    target : {"sandwich", "posterior"} or array_like, optional
        The target covariance Σ*.
    method : str, optional
        The noise model (:data:`~sgtune.theory.tuning.METHODS`).
    family : str, optional
        The step-size family (:data:`~sgtune.theory.tuning.FAMILIES`).

    Examples
    --------
    >>> from sgtune.workflows.verify import TuneOptions
    >>> TuneOptions(family="diagonal").target
    'sandwich'
    """

    target: Any = "sandwich"
    method: str = "dq-exact"
    family: str = "dense"


@dataclass(frozen=True)
class CheckOptions:
    """The entrywise z-test of a verification (:func:`sgtune.diagnostics.mcse.compare_covariance`).

    Parameters
    ----------
    alpha : float, optional
        Family-wise level of the test.
    relative_tolerance : float, optional
        A known model error r of the prediction, added in quadrature (e.g. 0.1 for a GLM whose proxy carries
        an O(λ/B) error).
    inflate_prediction : float, optional
        Multiply what is compared (a deliberately wrong prediction, to see the test reject).
    against : {"prediction", "target"} or array_like, optional
        What the chains are tested against: the linearised prediction, the tuning target Σ* (Λ tuned
        here), or a given (D, D) SPD matrix.

    Raises
    ------
    SgtuneError
        A level outside (0, 1), a negative tolerance or a factor ≤ 0.

    Examples
    --------
    >>> from sgtune.workflows.verify import CheckOptions
    >>> CheckOptions(relative_tolerance=0.1).alpha
    0.001
    """

    alpha: float = 1e-3
    relative_tolerance: float = 0.0
    inflate_prediction: float = 1.0
    against: Any = "prediction"

    def __post_init__(self) -> None:
        if not 0.0 < float(self.alpha) < 1.0:
            raise SgtuneError(f"alpha must lie in (0, 1), got {self.alpha}")
        if not (float(self.relative_tolerance) >= 0.0 and math.isfinite(self.relative_tolerance)):
            raise SgtuneError(f"relative_tolerance must be a finite number >= 0, got {self.relative_tolerance}")
        check_positive(self.inflate_prediction, "inflate_prediction")


@cites("wang2026", "Prop. 4.2, Eq. (11); Thm. 4.3, Eq. (12) — prediction checked by simulation")
def verify_stationary_cov(model: GLM, data: Dataset, expansion: Expansion, dynamics: Dynamics,
                          run: RunSpec | RunOptions | None = None, *, tuning: TuneOptions | None = None,
                          check: CheckOptions | None = None, sampler: Any = "sgld", prior_precision: Any = 0.0,
                          progress: ProgressCallback | None = None, keep_draws: int = 0) -> VerificationReport:
    r"""Test Σ̂ (chains) = Σ(Λ) (Eqs. (11)–(12)) entrywise with batch-means z-scores and a Bonferroni threshold.

    Parameters
    ----------
    model : GLM
        The model (or its name).
    data : Dataset
        The observations the chains run on.
    expansion : Expansion
        The expansion at θ̂ (:func:`sgtune.models.expand`); the chains start at θ̂.
    dynamics : Dynamics
        The chain: Λ as ``step`` (a scalar, (D,) diagonal or (D, D) matrix; ``None`` tunes Λ first with
        ``tuning``; for SGHMC and SMILE the scalar step size h or ε), B, β (``inf`` is SGD; for SGHMC and
        SMILE ``inf`` means N), κ and the batching (with or without replacement).
    run : RunSpec or RunOptions, optional
        The run; what it leaves open comes from :func:`~sgtune.workflows.run_length.resolve_run` (default
        ``RunOptions()``: 16 chains of the policy's length).
    tuning : TuneOptions, optional
        Target, method and family of the tuning when ``dynamics.step`` is None (default ``TuneOptions()``,
        the sandwich); refused with a given step.
    check : CheckOptions, optional
        The test's level, model tolerance, inflation and what is compared (default ``CheckOptions()``).
    sampler : str or options object, optional
        The sampler (:data:`sgtune.sampler.SAMPLERS`), or its options (e.g. ``SGHMCOptions(friction=2.0)``,
        ``SmileOptions(tuner="paper")``).
    prior_precision : float or array_like, optional
        Γ, as given to :func:`sgtune.models.expand`.
    progress : callable(done, total) or None, optional
        Called after each chunk of steps.
    keep_draws : int, optional
        Keep about that many thinned draws (pooled over chains) in ``chains.trace``.

    Returns
    -------
    VerificationReport
        The prediction, the chains' covariance, the z-test (``passed`` is the verdict) and the chains.

    Raises
    ------
    SgtuneError
        Incompatible settings (a step and ``tuning``; SGHMC or SMILE without a step size), batches shorter
        than 10 autocorrelation times, fewer than 2 batches, or a zero standard error.
    UnstableStepSizeError
        The predicted chain is unstable, or every chain diverged.

    See Also
    --------
    sgtune.sampler.run_chains : The chains alone.

    Notes
    -----
    The prediction is :func:`sgtune.theory.stationary.predict_stationary_cov` of the given Λ, or the tuned
    chain's (:func:`sgtune.theory.tuning.tune`). The chains start at θ̂; the decision is
    :func:`sgtune.diagnostics.mcse.compare_covariance`: max_{i≤j} |z_ij| ≤ t_{K−1}(1 − α/(2k)), over K batch
    means each at least 10 predicted autocorrelation times long (shorter ones have correlated means and too
    small standard errors). For linear regression the prediction is exact (a correct Σ passes with probability
    ≥ 1 − α); other GLMs carry an O(λ/B) proxy error: give ``check.relative_tolerance``.

    SGHMC and the SMILE samplers sample the tempered posterior: the prediction is (β H)⁻¹, H = J + Γ/N at θ̂
    (mode ``"posterior"``; exact for linear regression up to the sampler's own bias: SMILE-naive's law is exact
    only for isotropic minibatch noise, the SMILE paper's appendix A; SGHMC without a noise estimate runs hot
    unless the minibatch noise is small). ``check.against`` = ``"target"`` tests against Σ* (Λ tuned here), a
    (D, D) SPD matrix against it (e.g. what a refined Λ, :func:`sgtune.workflows.refine.refine`, is meant to give).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.workflows.verify import CheckOptions, verify_stationary_cov
    >>> data, model = example("logistic"), get_model("logistic")
    >>> report = verify_stationary_cov(model, data, expand(model, data), Dynamics(None, batch_size=32),
    ...                                RunSpec(1000, n_chains=4), check=CheckOptions(relative_tolerance=0.1))
    >>> report.mode, report.tuning.family, bool(report.test.threshold > 0)
    ('lambda', 'dense', True)
    """
    check = CheckOptions() if check is None else check
    stationary, dynamics, tuned, mode = _prediction(expansion, dynamics, tuning, sampler, data.n_data)
    spec = resolve_run(RunOptions() if run is None else run, stationary.tau_worst, stationary.spectral_radius,
                       max_draws=keep_draws)
    chains = run_chains(model, data, dynamics, spec, options_for(sampler) if isinstance(sampler, str) else sampler,
                        prior_precision=prior_precision, initial=expansion.theta_hat, progress=progress)
    if chains.n_batches < 2:
        raise SgtuneError("verification needs at least 2 batches for standard errors; use more chains")
    if np.any(chains.cov_standard_error[np.triu_indices(expansion.dim)] <= 0):
        raise SgtuneError("a covariance standard error is zero (deterministic chains?); nothing to test")
    f = float(check.inflate_prediction)
    predicted = f * stationary.cov
    label, reference = _reference(check.against, tuned, expansion.dim)
    compared = predicted if reference is None else f * reference
    test = compare_covariance(compared, chains.cov, chains.cov_standard_error, n_batches=chains.n_batches,
                              alpha=check.alpha, relative_tolerance=check.relative_tolerance)
    return VerificationReport(predicted=predicted, empirical=chains.cov, test=test, chains=chains,
                              step_matrix=np.asarray(stationary.step_matrix), stationary=stationary,
                              tuning=tuned, mode=mode, against=label,
                              reference=None if reference is None else f * reference)


def _prediction(expansion: Expansion, dynamics: Dynamics, tuning: TuneOptions | None, sampler: Any,
                n_data: int) -> tuple[Any, Dynamics, Any, str]:
    """(prediction, the chain's Dynamics, the TuningResult or None, mode) of :func:`verify_stationary_cov`."""
    from ..theory.stationary import predict_stationary_cov
    from ..theory.tuning import tune

    if sampler_spec(sampler).target == "posterior":
        if dynamics.step is None or tuning is not None:
            raise SgtuneError(f"sampler {sampler_spec(sampler).name!r} samples the posterior with a scalar step size: "
                              "give a number as the step of `dynamics` (the step size) and no `tuning`")
        beta = float(n_data) if math.isinf(dynamics.inv_temperature) else dynamics.inv_temperature
        arr = np.asarray(dynamics.step, dtype=float)  # the scalar step as the diagonal h·1 (reports, plots)
        cov = np.linalg.inv(beta * expansion.hessian)
        diag = np.full(expansion.dim, arr.reshape(-1)[0]) if arr.size == 1 else arr
        return PosteriorPrediction(cov, diag), dynamics.replace(inv_temperature=beta), None, "posterior"
    if dynamics.step is None:
        opts = TuneOptions() if tuning is None else tuning
        tuned = tune(expansion, dynamics, target=opts.target, method=opts.method, family=opts.family)
        return tuned.stationary, dynamics.replace(step=tuned.step_matrix), tuned, "lambda"
    if tuning is not None:
        raise SgtuneError("give either a step in `dynamics` (check a prediction) or `tuning` (tune first), not both")
    return predict_stationary_cov(expansion, dynamics), dynamics, None, "covariance"


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

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    step_matrix : float or array_like
        Λ (or the scalar step of SGHMC and SMILE).
    sampler : str
        The sampler (:data:`~sgtune.sampler.registry.SAMPLERS`).
    batch_size : int
        B.
    inv_temperature : float
        The inverse temperature β (``inf``: SGD, or N for the posterior samplers).
    n_data : int
        N.
    batching : str, optional
        One of :data:`~sgtune.core.config.BATCHINGS`.
    momentum : float, optional
        The heavy-ball momentum κ.
    decay : float, optional
        The step-size decay γ.

    Returns
    -------
    cov : (D, D) ndarray or None
        The prediction, or None when there is none.
    mode : str
        ``"covariance"``, ``"posterior"``, or why there is no prediction.

    Notes
    -----
    ``"covariance"``: SG(L)D with a constant Λ and minibatches with or without replacement, the
    exact stationary covariance of the linearised chain (wang2026 eqs. 11–12,
    :func:`~sgtune.theory.stationary.predict_stationary_cov`). ``"posterior"``: the tuned SMILE
    samplers (``smile``, ``psmile``), whose target is the tempered posterior, (β H)⁻¹ at θ̂ (exact
    for linear regression, Laplace otherwise). Otherwise ``(None, why)``: a decaying step size has no
    stationary law, and sgtune has no exact prediction for reshuffled epochs, SGLRW, clipped SGLD,
    SGHMC's or SMILE-naive's minibatch bias; ``(None, "unstable: …")`` when the linearised chain
    has no stationary law at this Λ (see :func:`prediction_check`).

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> from sgtune.workflows.verify import chain_prediction
    >>> cov, mode = chain_prediction(e, 0.1, sampler="sgld", batch_size=32, inv_temperature=float("inf"),
    ...                              n_data=e.n_data)
    >>> mode, cov.shape
    ('covariance', (5, 5))
    >>> chain_prediction(e, 0.1, sampler="sglrw", batch_size=32, inv_temperature=2000.0, n_data=e.n_data)
    (None, 'sgtune has no exact stationary prediction for the sglrw sampler')
    """
    from ..theory.stationary import predict_stationary_cov

    if decay:
        return None, "a decaying step size (`decay` > 0) has no stationary covariance"
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
    """Test the chains' covariance against ``predicted``: the ``prediction_check`` of the chain-health report.

    Parameters
    ----------
    chains : ChainResult
        The chains.
    predicted : (D, D) ndarray or None
        The prediction (:func:`chain_prediction`).
    mode : str
        Its mode; ``"unstable: …"`` (from :func:`chain_prediction`) is a failed check whose
        ``reason`` says that the chain cannot be stationary near θ̂, whatever it looks like.
    alpha : float, optional
        Family-wise level of :func:`~sgtune.diagnostics.mcse.compare_covariance`.
    relative_tolerance : float, optional
        A model error added in quadrature.

    Returns
    -------
    dict or None
        ``mode``, ``passed``, ``z_max``, ``threshold``, … (JSON-ready); None when there is no
        prediction, the run has fewer than 2 batches or a zero standard error (nothing to test).

    Examples
    --------
    >>> from sgtune.workflows.verify import prediction_check
    >>> check = prediction_check(None, None, mode="unstable: spectral radius 1.2")
    >>> check["mode"], check["passed"]
    ('unstable', False)
    """
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
