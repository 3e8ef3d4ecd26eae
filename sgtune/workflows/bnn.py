"""A small Bayesian-neural-network comparison of SG-MCMC samplers at an equal gradient budget.

The setting follows the SMILE paper (2025) (SMILE), Table 2 and appendix E.1, at the size of a data set that a
package ships (scikit-learn's diabetes data, N = 442, p = 10; no download):

- **Model.** A fully connected tanh network with three hidden layers of width 16
  (:func:`sgtune.models.make_mlp`, ``"16,16,16"``; D = 737 parameters for p = 10) and a Gaussian
  likelihood y | x, θ ~ N(f(x; θ), σ²) with a *known* σ² (below); prior θ ~ N(0, Γ⁻¹) with
  Γ = ``prior_precision``·I. Default Γ = 10 (prior sd 0.32), not the standard normal prior of
  appendix E.1: with Γ = 1 the posterior of 737 parameters given ~310 rows overfits (the MAP's
  validation mean squared residual is 0.8–1.2 in standardised units, worse than predicting 0,
  against ≈ 0.5 with Γ = 10), so the better a sampler explores that posterior the worse it
  predicts, and the step-size grid rewards not moving from the start.
  Posterior p(θ|𝒟) ∝ exp(−Σ_n l_n(θ) − θᵀΓθ/2), sampled by :func:`sgtune.sampler.run_chains`
  at β = N (mean-loss scaling, docs/conventions.md).
- **Splits.** :func:`standardised_split`: a seeded permutation into train / validation / test
  (70 % / 10 % / 20 % as in appendix E.1); covariates and response standardised with the
  *training* mean and sd only.
- **σ² and the start (deep-ensemble initialisation, as in Table 2).** Each of the C chains
  starts from its own fit: at most ``start_iter`` (default 300: converged for Γ = 10) L-BFGS
  iterations on the training loss Σ_n (y_n − f_n)²/2 + θᵀΓθ/2 from an independent Glorot start
  (:func:`ensemble_start`). σ² is the mean squared residual of these members on the *training*
  part, averaged over members (the plug-in noise level of the likelihood; the validation residual
  of a point estimate already contains the parameter uncertainty the posterior predictive adds,
  so using it would count that twice). The same σ² and starts are given to every sampler.
- **Equal gradient budget.** Every sampler gets the same number of minibatch gradient
  evaluations per chain (``gradient_budget``): SGLD and SGHMC use one per step, the SMILE family
  three (the minimal-norm P-Q-P-Q-P integrator, appendix F.2), so they run a third of the steps
  (:data:`GRADS_PER_STEP`, :func:`steps_for_budget`). The first half of the steps is burn-in;
  ``draws_per_chain`` thinned draws of each chain after burn-in form the predictive.
- **Step size (same effort for every sampler).** :func:`choose_step`: each sampler runs every
  value of its grid (``step_grids``, the same number of values each) for the same reduced budget
  from the same starts, trained on the training part and scored by the LPPD on the validation
  part; the best value is then run on the full budget. The grid is over the step size itself for
  SGLD / SGHMC and over the *initial* step size for smile / psmile (whose energy-variance tuner
  then adapts it: the anchored rule by default; ``sampler_options={"smile": {"tuner": "paper"}}``
  runs the SMILE paper's eq. (7) instead).
- **Metrics.** :func:`gaussian_lppd` (test log pointwise predictive density of the SMILE paper (2025), appendix
  E, with the C·S draws pooled) and :func:`predictive_rmse` (RMSE of the posterior-predictive
  mean), both reported on the original scale of the response; mean ± sd over the splits
  (:func:`summarise`).

``benchmarks/bnn_smile.py`` prints the table; ``notebooks/bnn_smile.py`` walks through it.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

from ..core._refs import cites
from ..core._validation import as_float_array, check_int, check_positive
from ..core.errors import SgtuneError, ShapeError, UnstableStepSizeError
from .experiments import load_diabetes_arrays
from ..models import make_mlp
from ..core.config import Dynamics, RunSpec
from ..sampler import run_chains
from ..sampler.registry import SAMPLERS, options_for

__all__ = ["GRADS_PER_STEP", "DEFAULT_STEP_GRIDS", "START_ROW", "Split", "load_diabetes_arrays", "standardised_split",
           "gaussian_lppd", "predictive_rmse", "steps_for_budget", "EnsembleStart", "ensemble_start",
           "NetworkSetup", "ComparisonBudget", "SamplerRun", "run_sampler", "StepChoice", "choose_step",
           "ComparisonRow", "compare_samplers", "summarise"]

#: minibatch gradient evaluations per step: one for SGLD/SGHMC, three for the MN integrator of SMILE
GRADS_PER_STEP: dict[str, int] = {name: SAMPLERS[name].grads_per_step
                                  for name in ("sgld", "sghmc", "smile-naive", "psmile-naive", "smile", "psmile")}

#: name of the baseline row of :func:`compare_samplers`: the starting members' own predictive
START_ROW = "deep-ensemble start"

#: step-size grids (the units ``run_chains`` takes for each sampler), five values each, ~√10 apart
DEFAULT_STEP_GRIDS: dict[str, tuple[float, ...]] = {
    "sgld": (1e-4, 3e-4, 1e-3, 3e-3, 1e-2),       # λ (mean-loss scaling, β = N)
    "sghmc": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2),      # h (time step, unit mass, friction 1)
    "smile-naive": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2),  # ε (distance per step)
    "psmile-naive": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2),
    "smile": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2),      # initial ε (then the energy-variance tuner)
    "psmile": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2),
}


# ----------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Split:
    """One seeded train / validation / test split, standardised with the training statistics.

    ``y_*`` are standardised, (y − y_mean)/y_scale; multiply by ``y_scale`` for the original units.
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    y_mean: float
    y_scale: float
    seed: int


def standardised_split(X: Any, y: Any, seed: int, *, val_fraction: float = 0.1,
                       test_fraction: float = 0.2) -> Split:
    """Seeded permutation into train / validation / test; X and y standardised with the training mean and sd.

    Parameters
    ----------
    X : (N, p) array
    y : (N,) array
    seed : int
        Seed of the permutation (``np.random.default_rng(seed)``).
    val_fraction, test_fraction : float
        Shares of the rows (rounded to the nearest row; at least two rows each and for training).
    """
    Xa = as_float_array(X, "X", ndim=2)
    ya = as_float_array(y, "y", ndim=1)
    n = Xa.shape[0]
    if ya.shape[0] != n:
        raise ShapeError(f"y must have one entry per row of X ({n}), got {ya.shape[0]}")
    for name, v in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < float(v) < 1.0:
            raise SgtuneError(f"{name} must lie in (0, 1), got {v}")
    n_val, n_test = int(round(val_fraction * n)), int(round(test_fraction * n))
    n_train = n - n_val - n_test
    if min(n_val, n_test) < 2 or n_train < 2:
        raise SgtuneError(f"val_fraction={val_fraction} and test_fraction={test_fraction} leave "
                          f"{n_train}/{n_val}/{n_test} train/validation/test rows of {n}; each needs at least 2")
    perm = np.random.default_rng(seed).permutation(n)
    tr, va, te = perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:]
    mu, sd = Xa[tr].mean(axis=0), Xa[tr].std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    ym, ys = float(ya[tr].mean()), float(ya[tr].std())
    if not ys > 0:
        raise SgtuneError("y is constant on the training rows; nothing to regress")

    def zx(idx: np.ndarray) -> np.ndarray:
        return (Xa[idx] - mu) / sd

    def zy(idx: np.ndarray) -> np.ndarray:
        return (ya[idx] - ym) / ys

    return Split(zx(tr), zy(tr), zx(va), zy(va), zx(te), zy(te), ym, ys, int(seed))


# ----------------------------------------------------------------------------- metrics
@cites("smile2025", "appendix E (LPPD = (1/n) Σ_n log((1/KS) Σ_{k,s} p(y_n | θ^{(k,s)}, x_n)))")
def gaussian_lppd(predictions: Any, y: Any, noise_variance: float, *, y_scale: float = 1.0) -> float:
    r"""Test LPPD (1/n) Σ_n log((1/S) Σ_s N(y_n | f_{s n}, σ²)), computed with logsumexp.

    Parameters
    ----------
    predictions : (S, n) array
        Network outputs f(x_n; θ_s) for S posterior draws (all chains pooled: S = K·S_k).
    y : (n,) array
        Test responses (same scale as the predictions).
    noise_variance : float
        σ² of the Gaussian likelihood (in the scale of ``y``).
    y_scale : float
        With y = (y_orig − m)/s given in standardised units, pass s to get the LPPD of y_orig:
        the density of y_orig is that of y divided by s, so ``− log s`` is added.

    Returns
    -------
    float

    References
    ----------
    The SMILE paper (2025) (SMILE), appendix E; Gelman, Hwang & Vehtari (2014).
    """
    F = as_float_array(predictions, "predictions", ndim=2)
    yv = as_float_array(y, "y", ndim=1)
    if F.shape[1] != yv.shape[0]:
        raise ShapeError(f"predictions must have shape (S, {yv.shape[0]}) (draws × test points), got {F.shape}")
    s2 = check_positive(noise_variance, "noise_variance")
    sc = check_positive(y_scale, "y_scale")
    logp = -0.5 * (yv[None, :] - F) ** 2 / s2 - 0.5 * math.log(2.0 * math.pi * s2)
    per_point = logsumexp(logp, axis=0) - math.log(F.shape[0])
    return float(per_point.mean() - math.log(sc))


def predictive_rmse(predictions: Any, y: Any, *, y_scale: float = 1.0) -> float:
    """RMSE of the posterior-predictive mean, √((1/n) Σ_n (y_n − (1/S) Σ_s f_{s n})²) · ``y_scale``."""
    F = as_float_array(predictions, "predictions", ndim=2)
    yv = as_float_array(y, "y", ndim=1)
    if F.shape[1] != yv.shape[0]:
        raise ShapeError(f"predictions must have shape (S, {yv.shape[0]}) (draws × test points), got {F.shape}")
    sc = check_positive(y_scale, "y_scale")
    return float(np.sqrt(np.mean((yv - F.mean(axis=0)) ** 2)) * sc)


def steps_for_budget(sampler: str, gradient_budget: int) -> int:
    """Steps per chain that spend ``gradient_budget`` minibatch gradient evaluations (:data:`GRADS_PER_STEP`)."""
    if sampler not in GRADS_PER_STEP:
        raise SgtuneError(f"sampler must be one of {', '.join(GRADS_PER_STEP)}, got {sampler!r}")
    g = check_int(gradient_budget, "gradient_budget", low=GRADS_PER_STEP[sampler] * 4)
    return g // GRADS_PER_STEP[sampler]


# ----------------------------------------------------------------------------- the start
@dataclass(frozen=True)
class EnsembleStart:
    """Deep-ensemble start: C optimised members (C, D), σ² from their validation residuals, the cost.

    ``noise_variance`` = mean over members of the mean squared *training* residual (standardised
    units: the plug-in σ² of the likelihood); ``val_msr`` the same on the validation part (for
    comparison: the point estimates' out-of-sample error); ``gradient_evals`` the full-batch
    gradient evaluations L-BFGS spent (shared by every sampler, not part of the budget).
    """

    members: np.ndarray
    noise_variance: float
    val_msr: float
    gradient_evals: int
    seconds: float


def ensemble_start(split: Split, n_members: int, *, hidden_sizes: Sequence[int] = (16, 16, 16),
                   activation: str = "tanh", prior_precision: float = 10.0, max_iter: int = 300,
                   seed: int = 0) -> EnsembleStart:
    """C members: at most ``max_iter`` L-BFGS iterations on Σ_n (y_n − f(x_n; θ))²/2 + Γ|θ|²/2 from independent Glorot starts.

    The deep-ensemble starts of the SMILE paper's (2025) Table 2 (Sommer et al. 2025, there Adam with
    early stopping). With Γ = 10 on the diabetes splits L-BFGS converges in ~200 iterations and
    the optimum does not overfit; with Γ = 1 it does (the validation error is smallest after
    ~5–20 iterations), and a small ``max_iter`` (e.g. 20) is a fixed-count early stopping that
    leaves the validation rows unused by the start. The loss uses σ² = 1. σ² is the mean squared
    training residual of the members.
    """
    c = check_int(n_members, "n_members", low=1)
    gam = check_positive(prior_precision, "prior_precision", strict=False)
    model = make_mlp(tuple(hidden_sizes), activation=activation, noise_variance=1.0)
    X, y = split.X_train, split.y_train
    p = X.shape[1]
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(c)]
    evals = 0

    def fun(th: np.ndarray) -> tuple[float, np.ndarray]:
        nonlocal evals
        evals += 1
        loss = float(model.per_sample_losses(th, X, y).sum()) + 0.5 * gam * float(th @ th)
        grad = model.per_sample_grads(th, X, y).sum(axis=0) + gam * th
        return loss, grad

    t0 = time.process_time()
    members = []
    for r in rngs:
        res = minimize(fun, model.initial_params(p, r), jac=True, method="L-BFGS-B",
                       options={"maxiter": int(max_iter)})
        members.append(np.asarray(res.x, dtype=np.float64))
    M = np.stack(members)
    val = [np.mean((split.y_val - model.output(th, split.X_val)) ** 2) for th in M]
    trn = [np.mean((y - model.output(th, X)) ** 2) for th in M]
    return EnsembleStart(M, float(np.mean(trn)), float(np.mean(val)), evals, time.process_time() - t0)


# ----------------------------------------------------------------------------- the configuration
@dataclass(frozen=True, kw_only=True)
class NetworkSetup:
    """The network posterior every sampler runs on, and how its chains are observed (the same for all samplers).

    Parameters
    ----------
    hidden_sizes : sequence of int, optional
        The widths of the hidden layers (:func:`sgtune.models.make_mlp`).
    activation : str, optional
        Their activation.
    prior_precision : float, optional
        Γ of the prior θ ~ N(0, Γ⁻¹I).
    batch_size : int, optional
        The minibatch size B of every chain.
    draws_per_chain : int, optional
        The thinned draws per chain, after burn-in, that form the predictive.

    Examples
    --------
    >>> NetworkSetup(hidden_sizes=[4], batch_size=8).hidden_sizes
    (4,)
    """

    hidden_sizes: tuple[int, ...] = (16, 16, 16)
    activation: str = "tanh"
    prior_precision: float = 10.0
    batch_size: int = 32
    draws_per_chain: int = 100

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(check_int(h, "hidden_sizes", low=1) for h in self.hidden_sizes))
        object.__setattr__(self, "prior_precision",
                           check_positive(self.prior_precision, "prior_precision", strict=False))
        object.__setattr__(self, "batch_size", check_int(self.batch_size, "batch_size", low=1))
        object.__setattr__(self, "draws_per_chain", check_int(self.draws_per_chain, "draws_per_chain", low=1))


@dataclass(frozen=True, kw_only=True)
class ComparisonBudget:
    """What every sampler of :func:`compare_samplers` gets: chains and minibatch gradient evaluations per chain.

    Parameters
    ----------
    n_chains : int, optional
        C, the chains of each run (one per deep-ensemble member).
    gradient_budget : int, optional
        Minibatch gradient evaluations per chain of the final run.
    tune_budget : int or None, optional
        The same for each step-size grid value on the validation run (``None``: ``gradient_budget // 3``).
    start_iter : int, optional
        The L-BFGS iterations of each ensemble member (:func:`ensemble_start`, not part of the budget).

    Examples
    --------
    >>> ComparisonBudget(gradient_budget=600).tune_gradients
    200
    """

    n_chains: int = 10
    gradient_budget: int = 30_000
    tune_budget: int | None = None
    start_iter: int = 300

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_chains", check_int(self.n_chains, "n_chains", low=1))
        object.__setattr__(self, "gradient_budget", check_int(self.gradient_budget, "gradient_budget", low=1))
        if self.tune_budget is not None:
            object.__setattr__(self, "tune_budget", check_int(self.tune_budget, "tune_budget", low=1))
        object.__setattr__(self, "start_iter", check_int(self.start_iter, "start_iter", low=0))

    @property
    def tune_gradients(self) -> int:
        """The per-chain gradient budget of each grid value (``tune_budget``, or a third of ``gradient_budget``)."""
        return self.gradient_budget // 3 if self.tune_budget is None else self.tune_budget


# ----------------------------------------------------------------------------- one sampler run
@dataclass(frozen=True)
class SamplerRun:
    """Predictions of one sampler run: test (or validation) outputs of the pooled thinned draws and run facts.

    ``settings`` holds ``rms_move`` (√ of the mean over kept draws and coordinates of (θ − θ_start)²,
    how far the chains went) and, for the SMILE samplers, ``step_size_final``,
    ``rejection_fraction``, ``energy_error_mean`` (per chain).
    """

    sampler: str
    step: float
    n_steps: int
    gradient_evals_per_chain: int
    predictions: np.ndarray
    n_diverged: int
    cpu_seconds: float
    settings: dict[str, Any] = field(default_factory=dict)


def run_sampler(sampler: str, step: float, X: np.ndarray, y: np.ndarray, X_eval: np.ndarray,
                initial: np.ndarray, noise_variance: float, *, gradient_budget: int, seed: int = 0,
                sampler_options: Mapping[str, Any] | None = None, setup: NetworkSetup | None = None) -> SamplerRun:
    """Run ``sampler`` on the network posterior for ``gradient_budget`` gradient evaluations per chain.

    One chain per row of ``initial`` (C, D); posterior at β = N (``run_chains``' mean-loss scaling);
    burn-in = half the steps; ``setup.draws_per_chain`` thinned draws per chain are pushed through the
    network on ``X_eval``. Diverged chains (non-finite state) are dropped from the predictions and
    counted; if every chain diverges, :class:`~sgtune.core.errors.UnstableStepSizeError` propagates.
    ``setup`` (default ``NetworkSetup()``) is the network, its prior, B and the draws kept.
    """
    setup = NetworkSetup() if setup is None else setup
    steps = steps_for_budget(sampler, gradient_budget)
    burn = steps // 2
    k = check_int(setup.draws_per_chain, "draws_per_chain", low=1, high=steps - burn)
    thin = max((steps - burn) // k, 1)
    model = make_mlp(setup.hidden_sizes, activation=setup.activation, noise_variance=noise_variance)
    init = np.asarray(initial, dtype=np.float64)
    n = X.shape[0]
    t0 = time.process_time()
    res = run_chains(model, (X, y), Dynamics(float(step), setup.batch_size, inv_temperature=float(n)),
                     # 2 segments per chain: only the trace is used here, and the batch-means summary of a
                     # D = 737 network costs O(C·S·D²) (the default ⌈32/C⌉ segments: seconds per run); the
                     # chain and its trace do not depend on S (tests/test_bnn.py checks it)
                     RunSpec(steps, n_chains=init.shape[0], burn_in=burn, thin=thin, seed=seed,
                             batches_per_chain=min(2, steps - burn)),
                     options_for(sampler, **dict(sampler_options or {})), prior_precision=setup.prior_precision,
                     initial=init)
    cpu = time.process_time() - t0
    trace = res.trace
    assert trace is not None  # thin > 0
    ok = res.diverged_at < 0
    kept = trace[ok][:, -k:, :]
    start = init[ok] if init.ndim == 2 else np.broadcast_to(init, (int(ok.sum()), init.shape[-1]))
    move = float(np.sqrt(np.nanmean((kept - start[:, None, :]) ** 2))) if kept.size else math.nan
    draws = kept.reshape(-1, trace.shape[2])
    draws = draws[np.all(np.isfinite(draws), axis=1)]
    preds = np.stack([model.output(th, X_eval) for th in draws]) if len(draws) else np.empty((0, X_eval.shape[0]))
    extra = {key: getattr(res, key) for key in ("step_size_final", "rejection_fraction", "energy_error_mean")
             if getattr(res, key, None) is not None}
    extra["rms_move"] = move  # RMS per coordinate of θ_draw − θ_start: how far the kept draws are from the start
    return SamplerRun(sampler, float(step), steps, steps * GRADS_PER_STEP[sampler], preds, int(res.n_diverged),
                      cpu, extra)


# ----------------------------------------------------------------------------- step-size choice
@dataclass(frozen=True)
class StepChoice:
    """The grid, the validation LPPD at each value (−inf: every chain diverged or no finite draw), the choice."""

    sampler: str
    grid: tuple[float, ...]
    val_lppd: tuple[float, ...]
    best: float


def choose_step(sampler: str, split: Split, start: EnsembleStart, grid: Sequence[float], *,
                gradient_budget: int, **kwargs: Any) -> StepChoice:
    """Run each grid value on the training part for ``gradient_budget`` and keep the best validation LPPD."""
    scores = []
    for i, h in enumerate(grid):
        try:
            r = run_sampler(sampler, h, split.X_train, split.y_train, split.X_val, start.members,
                            start.noise_variance, gradient_budget=gradient_budget,
                            **{**kwargs, "seed": kwargs.get("seed", 0) + 7919 * (i + 1)})
            lp = gaussian_lppd(r.predictions, split.y_val, start.noise_variance) if len(r.predictions) else -math.inf
        except UnstableStepSizeError:
            lp = -math.inf
        scores.append(lp if math.isfinite(lp) else -math.inf)
    if not any(math.isfinite(s) for s in scores):
        raise UnstableStepSizeError(f"{sampler}: every step size of the grid {tuple(grid)} diverged on the "
                                    "validation run; pass smaller values in step_grids")
    best = float(grid[int(np.argmax(scores))])
    return StepChoice(sampler, tuple(float(h) for h in grid), tuple(scores), best)


# ----------------------------------------------------------------------------- the comparison
@dataclass(frozen=True)
class ComparisonRow:
    """One (split, sampler): chosen step, test LPPD and RMSE (original units), cost and divergences."""

    split: int
    sampler: str
    step: float
    n_steps: int
    gradient_evals_per_chain: int
    test_lppd: float
    test_rmse: float
    n_diverged: int
    cpu_seconds: float
    val_lppd: tuple[float, ...]
    settings: dict[str, Any] = field(default_factory=dict)


def compare_samplers(samplers: Sequence[str] = ("psmile", "smile", "sghmc", "sgld"), *,
                     splits: Sequence[int] = (0, 1, 2), budget: ComparisonBudget | None = None,
                     setup: NetworkSetup | None = None, step_grids: Mapping[str, Sequence[float]] | None = None,
                     data: tuple[np.ndarray, np.ndarray] | None = None, seed: int = 0,
                     sampler_options: Mapping[str, Mapping[str, Any]] | None = None,
                     include_start: bool = True,
                     log: Any = None) -> tuple[list[ComparisonRow], dict[int, EnsembleStart]]:
    """The full comparison (module docstring): per split, the ensemble start, step choice, final run, metrics.

    With ``include_start`` a row :data:`START_ROW` scores the C starting members themselves (the
    deep ensemble the chains start from, no sampling): the baseline every sampler should beat.

    ``budget`` (default ``ComparisonBudget()``) gives the chains, the gradient budget of the final run
    and of each grid value on the validation run, and the ensemble's L-BFGS iterations; ``setup``
    (default ``NetworkSetup()``) the network, its prior, B and the draws kept. ``data`` defaults to the
    diabetes data.
    """
    budget = ComparisonBudget() if budget is None else budget
    setup = NetworkSetup() if setup is None else setup
    grids = {**DEFAULT_STEP_GRIDS, **dict(step_grids or {})}
    for s in samplers:
        if s not in GRADS_PER_STEP:
            raise SgtuneError(f"samplers: {s!r} is not one of {', '.join(GRADS_PER_STEP)}")
    X, y = load_diabetes_arrays() if data is None else data
    rows: list[ComparisonRow] = []
    starts: dict[int, EnsembleStart] = {}
    for sp in splits:
        split = standardised_split(X, y, seed=1000 + int(sp))
        start = ensemble_start(split, budget.n_chains, hidden_sizes=setup.hidden_sizes, activation=setup.activation,
                               prior_precision=setup.prior_precision, max_iter=budget.start_iter,
                               seed=2000 + int(sp))
        starts[int(sp)] = start
        if include_start:  # the baseline: the C starting members' own predictive (no sampling)
            model = make_mlp(setup.hidden_sizes, activation=setup.activation, noise_variance=start.noise_variance)
            P = np.stack([model.output(th, split.X_test) for th in start.members])
            row0 = ComparisonRow(int(sp), START_ROW, math.nan, 0, 0,
                                 gaussian_lppd(P, split.y_test, start.noise_variance, y_scale=split.y_scale),
                                 predictive_rmse(P, split.y_test, y_scale=split.y_scale), 0, start.seconds, ())
            rows.append(row0)
            if log is not None:
                log(row0)
        for j, s in enumerate(samplers):
            opts = dict((sampler_options or {}).get(s, {}))
            choice = choose_step(s, split, start, grids[s], gradient_budget=budget.tune_gradients,
                                 seed=seed + 100 * int(sp) + j, sampler_options=opts, setup=setup)
            r = run_sampler(s, choice.best, split.X_train, split.y_train, split.X_test, start.members,
                            start.noise_variance, gradient_budget=budget.gradient_budget,
                            seed=seed + 100 * int(sp) + 50 + j, sampler_options=opts, setup=setup)
            row = ComparisonRow(int(sp), s, choice.best, r.n_steps, r.gradient_evals_per_chain,
                                gaussian_lppd(r.predictions, split.y_test, start.noise_variance,
                                              y_scale=split.y_scale),
                                predictive_rmse(r.predictions, split.y_test, y_scale=split.y_scale),
                                r.n_diverged, r.cpu_seconds, choice.val_lppd, r.settings)
            rows.append(row)
            if log is not None:
                log(row)
    return rows, starts


def summarise(rows: Sequence[ComparisonRow]) -> dict[str, dict[str, float]]:
    """Per sampler: mean and sd (ddof = 1; 0 for one split) over splits of the test LPPD and RMSE."""
    out: dict[str, dict[str, float]] = {}
    for s in dict.fromkeys(r.sampler for r in rows):
        lp = np.array([r.test_lppd for r in rows if r.sampler == s])
        rm = np.array([r.test_rmse for r in rows if r.sampler == s])
        sd = (lambda a: float(a.std(ddof=1)) if a.size > 1 else 0.0)
        out[s] = {"lppd_mean": float(lp.mean()), "lppd_sd": sd(lp), "rmse_mean": float(rm.mean()),
                  "rmse_sd": sd(rm), "n_splits": int(lp.size)}
    return out
