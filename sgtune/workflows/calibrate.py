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
from ..core.config import Dynamics
from ..io.data import Dataset
from ..models import Expansion, expand, model_dim, prior_matrix
from ..core.config import Dynamics, RunSpec
from ..sampler import ChainResult, run_chains
from ..sampler.verify import default_run_length
from ..theory.tuning import TuningResult, tune

__all__ = ["CalibrationResult", "calibrate", "pit_values", "ks_uniform"]


@dataclass(frozen=True)
class CalibrationResult:
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

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> from sgtune.workflows.calibrate import calibrate
    >>> result = calibrate(get_model("logistic"), example("logistic"), batch_size=32, n_steps=1000, n_chains=4)
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
def calibrate(model: Any, data: Dataset, *, batch_size: int, prior_precision: Any = 0.0,
              target: Any = "sandwich", method: str = "dq-exact", family: str = "dense",
              subsample: int | None = None, inv_temperature: float = math.inf, without_replacement: bool = False,
              momentum: float = 0.0, n_steps: int | None = None, burn_in: int | None = None, n_chains: int = 8,
              seed: int = 0, true_theta: Any = None,
              progress: Callable[[int, int], None] | None = None, keep_draws: int = 0,
              scheduler: str | None = None) -> CalibrationResult:
    r"""Run Algorithm 1: fit θ̂ and Ĵ, Î on M rows, tune Λ for the target, run SG(L)D on all N rows.

    Reports the covariance error ‖S* − Ŝ‖_F/‖S*‖_F both *predicted* (Ŝ = the exact stationary
    covariance of the tuned chain, eqs. 11–12) and *empirical* (Ŝ = the chains' sample
    covariance) with the Monte Carlo noise floor that an exact Λ would show — with short runs
    the empirical error is dominated by Monte Carlo noise, so the floor is part of the answer.
    With ``true_theta``, also the probability-integral transforms q_d and their exact KS
    distance to Unif(0, 1). Run length defaults to T = max(20 000, 1000·τ) with τ the tuned
    chain's worst-case integrated autocorrelation time. ``keep_draws`` > 0 keeps at least about
    that many thinned draws (pooled over chains) in ``chains.trace`` (e.g. for the KSD).
    ``scheduler`` (None, "local" or a Dask address) runs the fit's and the expansion's passes over
    out-of-core data (``data.rows``) on Dask, with the same numbers.

    Parameters
    ----------
    model : PerSampleModel
        The model.
    data : Dataset
        All N rows.
    batch_size : int
        B.
    prior_precision : float or array_like, optional
        Γ.
    target : {"sandwich", "posterior"} or array_like, optional
        Σ* (:func:`sgtune.theory.tuning.tune`).
    method, family : str, optional
        The tuning's noise model and family.
    subsample : int or None, optional
        M, the rows the expansion is fitted on (Algorithm 1, steps 1–5; default all).
    inv_temperature : float, optional
        The inverse temperature β (``inf``: SGD).
    without_replacement : bool, optional
        Draw each batch without replacement.
    momentum : float, optional
        The heavy-ball momentum κ.
    n_steps, burn_in : int or None, optional
        The run's length and burn-in (defaults above).
    n_chains : int, optional
        C.
    seed : int, optional
        Seed of the subsample and the chains.
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
        Settings out of range (as :func:`sgtune.theory.tuning.tune` and
        :func:`sgtune.sampler.run_chains` refuse them).

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> from sgtune.workflows.calibrate import calibrate
    >>> result = calibrate(get_model("logistic"), example("logistic"), batch_size=32, n_steps=1000, n_chains=4)
    >>> result.n_steps, result.tuning.family
    (1000, 'dense')
    """
    d = model_dim(model, data.dim)
    gam = prior_matrix(prior_precision, d)
    rng = np.random.default_rng(seed)
    if subsample is not None:
        m = check_int(subsample, "subsample", low=d + 1, high=data.n_data)
        e = expand(model, data.subsample(m, rng), gam, population_size=data.n_data, seed=seed, scheduler=scheduler)
    else:
        e = expand(model, data, gam, seed=seed, scheduler=scheduler)
    dynamics = Dynamics(None, batch_size, inv_temperature=inv_temperature, momentum=momentum,
                        batching="without-replacement" if without_replacement else "replacement")
    t = tune(e, dynamics, target=target, method=method, family=family)
    steps_default, burn_default = default_run_length(t.tau_worst)
    steps = check_int(n_steps, "n_steps", low=2) if n_steps is not None else steps_default
    burn = check_int(burn_in, "burn_in", low=0, high=steps - 1) if burn_in is not None else min(burn_default,
                                                                                              steps // 2)
    theta_star = None if true_theta is None else as_vector(true_theta, "true_theta", d)
    thin = max(1, (steps - burn) // 4000) if theta_star is not None else 0
    if keep_draws > 0 and thin == 0:
        thin = max(1, -(-(steps - burn) * n_chains // keep_draws))  # ≤ keep_draws draws in all
    res = run_chains(model, data,
                     Dynamics(t.step_matrix, batch_size, inv_temperature=inv_temperature, momentum=momentum,
                              batching="without-replacement" if without_replacement else "replacement"),
                     RunSpec(steps, n_chains=n_chains, burn_in=burn, thin=thin, seed=seed), prior_precision=gam,
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
        standard_errors=np.sqrt(np.diag(res.cov)), n_steps=steps, burn_in=burn, pit=pit, calibration_ks=ks)
