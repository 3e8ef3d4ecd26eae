"""Algorithm 1 of Wang, Ding & Huggins (2026) end to end: subsample, fit, tune Λ, run SG(L)D, report the errors.

Kept separate from ``theory/`` (pure maths) and ``sampler/`` (chains): this module only
composes them, as ``sgtune calibrate`` does on the command line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.stats import kstest

from ..core._refs import cites
from ..core._validation import as_vector, check_int
from ..core.results import ResultMixin, SummaryTable, estimate_columns, table_from_columns
from ..core.config import Dynamics, RunSpec
from ..core.errors import SgtuneError
from ..io.data import Dataset
from ..models import Expansion, expand, model_dim, prior_matrix
from ..sampler import ChainResult, run_chains
from ..theory.tuning import TuningResult, tune
from .run_length import RunOptions, resolve_run
from .verify import TuneOptions

__all__ = ["CalibrationResult", "calibrate", "pit_values", "ks_uniform", "PIT_DRAWS"]

#: with ``true_theta``, the probability-integral transforms use at least this many draws per chain
PIT_DRAWS = 4000


@dataclass(frozen=True, repr=False)
class CalibrationResult(ResultMixin):
    """What Algorithm 1 reports (Wang, Ding & Huggins (2026) §6 and docs/conventions.md).

    Attributes
    ----------
    tuning : TuningResult
        Λ, the target and the exact predicted covariance.
    chains : ChainResult
        The preconditioned SG(L)D run.
    expansion : Expansion
        The expansion at θ̂ (fitted on the subsample when one was asked for).
    cov_error_predicted : float
        ‖S* − Σ(Λ)‖_F / ‖S*‖_F with Σ(Λ) the exact stationary covariance.
    cov_error_empirical : float
        ‖S* − Σ̂‖_F / ‖S*‖_F with Σ̂ the chains' sample covariance.
    cov_error_noise_floor : float
        sqrt(Σ_ij MCSE_ij²)/‖S*‖_F, the empirical error a perfect Λ shows from Monte Carlo noise
        alone (compare ``cov_error_empirical`` with it).
    standard_errors : (D,) ndarray
        The square roots of the chains' marginal variances (the reported uncertainty of θ).
    n_steps, burn_in : int
        The run's length and burn-in.
    pit : (D,) ndarray or None
        The fraction of iterates ≤ θ*_d per coordinate (when ``true_theta`` is given).
    calibration_ks : float or None
        The exact Kolmogorov–Smirnov distance of ``pit`` to Unif(0, 1).
    parameter_names : tuple of str
        (property) The name of each coordinate of θ (the expansion's).

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> from sgtune.workflows.calibrate import calibrate
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> result = calibrate(get_model("logistic"), example("logistic"), Dynamics(None, batch_size=32),
    ...                    RunSpec(1000, n_chains=4))
    >>> bool(result.cov_error_predicted < 1e-10), result.standard_errors.shape
    (True, (5,))
    """

    tuning: TuningResult
    chains: ChainResult
    expansion: Expansion
    cov_error_predicted: float
    cov_error_empirical: float
    cov_error_noise_floor: float
    standard_errors: np.ndarray
    n_steps: int
    burn_in: int
    pit: np.ndarray | None = None
    calibration_ks: float | None = None

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return self.expansion.parameter_names  # type: ignore[return-value]

    def _repr_items(self) -> list[tuple[str, Any]]:
        return [("D", self.expansion.dim), ("cov_error_predicted", self.cov_error_predicted),
                ("cov_error_empirical", self.cov_error_empirical), ("cov_error_noise_floor", self.cov_error_noise_floor),
                ("steps", self.n_steps), ("chains", self.chains.n_chains)]

    def summary(self) -> SummaryTable:
        """Per coordinate: θ̂ with the target's standard deviation as standard error (z, P>|z|, 95 % interval),
        the tuned chain's predicted and the chains' measured standard deviation, and the chains' mean."""
        t = self.tuning
        cols = {**estimate_columns(self.expansion.theta_hat, np.sqrt(np.diag(t.target_cov))),
                "sd predicted": np.sqrt(np.clip(np.diag(t.predicted_cov), 0.0, None)),
                "sd measured": self.standard_errors, "chain mean": self.chains.mean}
        info = [("target", t.target if isinstance(t.target, str) else "a given matrix"),
                ("covariance error, predicted", self.cov_error_predicted),
                ("covariance error, measured", self.cov_error_empirical),
                ("Monte Carlo noise floor", self.cov_error_noise_floor),
                ("chains × steps", f"{self.chains.n_chains} × {self.n_steps} (burn-in {self.burn_in})")]
        if self.calibration_ks is not None:
            info.append(("calibration KS", self.calibration_ks))
        return table_from_columns(
            f"Calibration (Algorithm 1 of Wang, Ding & Huggins 2026), D = {self.expansion.dim}",
            self.parameter_names, cols, info=tuple(info),
            notes=("std err: √ of the target's diagonal (z = coef / std err, normal P>|z| and interval); "
                   "sd measured: the chains' standard deviation.",))

    def to_dict(self) -> dict[str, Any]:
        """Λ, the covariances, the errors and the names (arrays stay NumPy arrays)."""
        return {"parameter_names": list(self.parameter_names), "lambda": self.tuning.step_matrix,
                "target_cov": self.tuning.target_cov, "predicted_cov": self.tuning.predicted_cov,
                "empirical_cov": self.chains.cov, "theta_hat": self.expansion.theta_hat,
                "standard_errors": self.standard_errors, "cov_error_predicted": self.cov_error_predicted,
                "cov_error_empirical": self.cov_error_empirical, "cov_error_noise_floor": self.cov_error_noise_floor,
                "calibration_ks": self.calibration_ks}


def pit_values(trace: np.ndarray, true_theta: np.ndarray) -> np.ndarray:
    """Compute the probability-integral transforms q_d = fraction of draws with θ_d ≤ θ*_d, pooled over chains.

    Parameters
    ----------
    trace : (C, T, D) ndarray
        The draws.
    true_theta : (D,) ndarray
        The true θ*.

    Returns
    -------
    (D,) ndarray
        The transforms q_d.

    Examples
    --------
    >>> from sgtune.workflows.calibrate import pit_values
    >>> pit_values(np.arange(10.0).reshape(1, 10, 1), np.array([4.5]))
    array([0.5])
    """
    return np.mean(trace <= true_theta[None, None, :], axis=(0, 1))


def ks_uniform(q: np.ndarray) -> float:
    """Exact two-sided Kolmogorov–Smirnov statistic sup|F_n − U| of the values q to Unif(0, 1).

    Parameters
    ----------
    q : ndarray
        Values in [0, 1].

    Returns
    -------
    float
        The statistic.

    Examples
    --------
    >>> from sgtune.workflows.calibrate import ks_uniform
    >>> ks_uniform(np.array([0.5]))
    0.5
    """
    return float(kstest(np.asarray(q, dtype=float), "uniform").statistic)


@cites("wang2026", "Algorithm 1 (steps 1–13) and §6's covariance-error and calibration metrics")
def calibrate(model: Any, data: Dataset, dynamics: Dynamics, run: RunSpec | RunOptions | None = None, *,
              tuning: TuneOptions | None = None, prior_precision: Any = 0.0, subsample: int | None = None,
              true_theta: Any = None, progress: Callable[[int, int], None] | None = None, keep_draws: int = 0,
              scheduler: str | None = None) -> CalibrationResult:
    r"""Run Algorithm 1: fit θ̂ and Ĵ, Î on M rows, tune Λ for the target, run SG(L)D on all N rows.

    Reports the covariance error ‖S* − Ŝ‖_F/‖S*‖_F both *predicted* (Ŝ = the exact stationary
    covariance of the tuned chain, eqs. 11–12) and *empirical* (Ŝ = the chains' sample
    covariance) with the Monte Carlo noise floor that an exact Λ would show — with short runs
    the empirical error is dominated by Monte Carlo noise, so the floor is part of the answer.
    With ``true_theta``, also the probability-integral transforms q_d and their exact KS
    distance to Unif(0, 1). What ``run`` leaves open comes from the run-length policy
    (:func:`sgtune.workflows.run_length.resolve_run`: T = max(20 000, 1000·τ) with τ the tuned chain's
    worst-case integrated autocorrelation time). ``keep_draws`` > 0 keeps at most about that many thinned
    draws (pooled over chains) in ``chains.trace`` (e.g. for the KSD); with ``true_theta`` at least
    ``PIT_DRAWS`` per chain are kept. ``scheduler`` (None, "local" or a Dask address) runs the fit's and the
    expansion's passes over out-of-core data (``data.rows``) on Dask, with the same numbers.

    Parameters
    ----------
    model : PerSampleModel
        The model.
    data : Dataset
        All N rows.
    dynamics : Dynamics
        The chain to tune and run: no step (Λ is tuned here), B, β (``inf``: SGD), κ and the batching.
    run : RunSpec or RunOptions, optional
        The run (default ``RunOptions(n_chains=8)``); its seed also draws the subsample.
    tuning : TuneOptions, optional
        Target Σ*, method and family of the tuning (default the sandwich, dq-exact, dense).
    prior_precision : float or array_like, optional
        Γ.
    subsample : int or None, optional
        M, the rows the expansion is fitted on (Algorithm 1, steps 1–5; default all).
    true_theta : (D,) array_like or None, optional
        The true θ* for the probability-integral transforms.
    progress : callable(done, total), optional
        Called over the chains' steps.
    keep_draws : int, optional
        Draws to keep in ``chains.trace``.
    scheduler : str or None, optional
        For data out of core: None, ``"local"`` or a Dask address.

    Returns
    -------
    CalibrationResult
        The tuning, the chains, and the predicted and empirical covariance errors.

    Raises
    ------
    SgtuneError
        A step in ``dynamics``, or settings out of range (as :func:`sgtune.theory.tuning.tune` and
        :func:`sgtune.sampler.run_chains` refuse them).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> from sgtune.workflows.calibrate import calibrate
    >>> result = calibrate(get_model("logistic"), example("logistic"), Dynamics(None, batch_size=32),
    ...                    RunSpec(1000, n_chains=4))
    >>> result.n_steps, result.tuning.family
    (1000, 'dense')
    """
    if dynamics.step is not None:
        raise SgtuneError("calibrate tunes Λ itself (Algorithm 1): give `dynamics` without a step")
    run = RunOptions(n_chains=8) if run is None else run
    d = model_dim(model, data.dim)
    gam = prior_matrix(prior_precision, d)
    e = _expansion(model, data, gam, subsample, run.seed, scheduler)
    opts = TuneOptions() if tuning is None else tuning
    t = tune(e, dynamics, target=opts.target, method=opts.method, family=opts.family)
    theta_star = None if true_theta is None else as_vector(true_theta, "true_theta", d)
    # the PIT needs at least PIT_DRAWS draws per chain; otherwise at most keep_draws in all (for the KSD)
    spec = resolve_run(run, t.tau_worst, t.spectral_radius, min_draws=PIT_DRAWS if theta_star is not None else 0,
                       max_draws=keep_draws if theta_star is None else 0)
    res = run_chains(model, data, dynamics.replace(step=t.step_matrix), spec, prior_precision=gam,
                     initial=e.theta_hat, progress=progress)
    S = t.target_cov
    norm = float(np.linalg.norm(S))
    pit = ks = None
    if theta_star is not None and res.trace is not None:
        pit = pit_values(res.trace, theta_star)
        ks = ks_uniform(pit)
    return CalibrationResult(
        tuning=t, chains=res, expansion=e, cov_error_predicted=t.covariance_error,
        cov_error_empirical=float(np.linalg.norm(res.cov - S) / norm),
        cov_error_noise_floor=float(math.sqrt(np.sum(res.cov_standard_error**2)) / norm),
        standard_errors=np.sqrt(np.diag(res.cov)), n_steps=spec.n_steps, burn_in=spec.burn_in_steps, pit=pit,
        calibration_ks=ks)


def _expansion(model: Any, data: Dataset, gam: np.ndarray, subsample: int | None, seed: int,
               scheduler: str | None) -> Expansion:
    """The expansion at θ̂ on all rows, or on M = ``subsample`` rows drawn with ``seed`` (scaled to N)."""
    if subsample is None:
        return expand(model, data, gam, seed=seed, scheduler=scheduler)
    m = check_int(subsample, "subsample", low=model_dim(model, data.dim) + 1, high=data.n_data)
    return expand(model, data.subsample(m, np.random.default_rng(seed)), gam, population_size=data.n_data,
                  seed=seed, scheduler=scheduler)
