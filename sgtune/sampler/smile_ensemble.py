"""The SMILE ensembles on the SMILE paper's analytic targets (anonymous, 2025): :func:`run_smile_ensemble` and the
appendix-C step-size search :func:`grid_search_b2`.

:func:`run_smile_ensemble` runs any of :data:`sgtune.sampler.smile.METHOD_IDS` on an analytic target of
:mod:`sgtune.sampler.targets` on the chain engine (:mod:`sgtune.sampler.engine`; the plan is
:func:`sgtune.sampler.smile_chain.target_plan`: one xoshiro256++ stream per chain, the step's noise ξ drawn
first, then the step). This module sits above :mod:`sgtune.sampler.smile` (the integrator and tuner
primitives), :mod:`sgtune.sampler.smile_chain` (their composition into the engine's components) and
:mod:`sgtune.sampler.registry` (the samplers' options).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core._refs import cites
from ..core._validation import check_int, check_positive
from ..core.errors import SgtuneError
from ..theory.smile import B2Estimate, b2_chains, bootstrap_b2
from .engine import backend_of, run_plan
from .registry import SmileOptions, options_for, sampler_spec
from .smile import METHOD_IDS
from .smile_chain import refresh_report, target_plan
from .state import STAT_ABS_DE_SUM, STAT_DE_SQ_SUM, STAT_DE_SUM, STAT_REJECTIONS
from .targets import AnalyticTarget

__all__ = ["SmileEnsembleResult", "run_smile_ensemble", "GridSearchResult", "grid_search_b2"]


@dataclass(frozen=True, slots=True)
class SmileEnsembleResult:
    """Outcome of :func:`run_smile_ensemble` (per-chain arrays have C rows).

    Attributes
    ----------
    sampler, target, noise : str
        The sampler, the target's name and its injected noise.
    step_size : float
        The (initial) step size.
    n_steps, burn_in, seed : int
        The run: steps, burn-in steps excluded from the moments, root seed.
    final_state : (C, D) ndarray
        Each chain's last θ.
    sample_mean, sample_second_moment : (C, D) ndarray
        The mean of θ and of θ² after burn-in.
    rejection_fraction : (C,) ndarray
        Guardrail rejections per step (0 for the untuned samplers).
    final_step_size : (C,) ndarray
        The step size at the end (tuned samplers).
    mean_energy_error, mean_abs_energy_error : (C,) ndarray
        The mean ΔE and |ΔE| per step (MCLMC samplers; 0 otherwise).
    energy_error_var_per_dim : (C,) ndarray
        The mean ΔE² / D.
    diverged : (C,) ndarray
        The step at which each chain diverged, or −1.
    preconditioner : (C, D) ndarray
        The final pSMILE p (ones for the other samplers).
    trace : (C, T, D) ndarray or None
        θ every ``thin`` steps.
    step_size_trace, energy_trace : (C, T) ndarray or None
        The step size and Σ ΔE so far (= E_t − E_0 without noise) every ``thin`` steps.
    thin : int
        The recording interval (0: no traces).
    settings : dict
        The tuner's settings.
    noise_bias_predicted : (C,) ndarray or None
        MCLMC samplers with the velocity refresh: the bias of each chain's covariance along the injected noise's
        noisiest direction, predicted from the noise measured along the chain
        (:func:`sgtune.sampler.smile.noise_excess`).

    Examples
    --------
    >>> from sgtune.core.config import RunSpec
    >>> from sgtune.sampler.targets import make_target
    >>> res = run_smile_ensemble(make_target("gaussian", dim=4), 0.1, RunSpec(200, n_chains=2))
    >>> res.sampler, res.sample_second_moment.shape, res.diverged
    ('smile', (2, 4), array([-1, -1]))
    """

    sampler: str
    target: str
    noise: str
    step_size: float
    n_steps: int
    burn_in: int
    seed: int
    final_state: np.ndarray          # (C, D)
    sample_mean: np.ndarray          # (C, D) mean of θ after burn-in
    sample_second_moment: np.ndarray  # (C, D) mean of θ² after burn-in
    rejection_fraction: np.ndarray   # (C,) guardrail rejections / steps (0 for untuned samplers)
    final_step_size: np.ndarray      # (C,)
    mean_energy_error: np.ndarray    # (C,) mean ΔE per step (MCLMC samplers; 0 otherwise)
    mean_abs_energy_error: np.ndarray  # (C,)
    energy_error_var_per_dim: np.ndarray  # (C,) mean ΔE² / D
    diverged: np.ndarray             # (C,) step of divergence or −1
    preconditioner: np.ndarray       # (C, D) final pSMILE p (ones for the other samplers)
    trace: np.ndarray | None = None  # (C, T, D) every ``thin`` steps
    step_size_trace: np.ndarray | None = None  # (C, T)
    energy_trace: np.ndarray | None = None  # (C, T) Σ ΔE so far (= E_t − E_0 without noise)
    thin: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    noise_bias_predicted: np.ndarray | None = None

    def b2(self, target: AnalyticTarget, rng: np.random.Generator | None = None,
           n_bootstrap: int = 2000) -> B2Estimate:
        """Table-1 b² of this ensemble against the target's exact moments (bootstrap over chains)."""
        if np.any(self.diverged >= 0):
            raise SgtuneError(f"{int(np.sum(self.diverged >= 0))} of {self.diverged.size} chains diverged "
                              f"(sampler {self.sampler!r}, step size {self.step_size}); b² is undefined — "
                              "use a smaller step size")
        per = b2_chains(self.sample_second_moment, target.second_moment, target.var_of_square, target.reduce)
        return bootstrap_b2(per, rng if rng is not None else np.random.default_rng(self.seed),
                            n_bootstrap=n_bootstrap, reduce=target.reduce)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sampler": self.sampler, "target": self.target, "noise": self.noise, "step_size": self.step_size,
            "n_steps": self.n_steps, "burn_in": self.burn_in, "seed": self.seed,
            "rejection_fraction": self.rejection_fraction.tolist(),
            "final_step_size": self.final_step_size.tolist(),
            "mean_energy_error": self.mean_energy_error.tolist(),
            "mean_abs_energy_error": self.mean_abs_energy_error.tolist(),
            "diverged": self.diverged.tolist(), "settings": dict(self.settings)}
        if self.step_size_trace is not None:
            out["step_size_trace"] = self.step_size_trace.tolist()
            out["thin"] = self.thin
        return out


@cites("smile2025", "eqs. (1)–(3), (6), (7), Algorithm 1, section 3.2 (pSMILE), appendix F.2 (integrator)")
def run_smile_ensemble(target: AnalyticTarget, step_size: Any, run: Any = None, options: Any = None, *,
                       start: Any = None, backend: Any = "numba", **removed: Any) -> SmileEnsembleResult:
    """Run an ensemble of C chains of a sampler on an analytic target with injected noise.

    Parameters
    ----------
    target : AnalyticTarget
        From :func:`sgtune.sampler.targets.make_target`.
    step_size : float
        Δt (MCLMC; the initial one for the tuned samplers) or h (SGLD, SGHMC).
    run : RunSpec
        Steps, chains, burn-in (steps excluded from the moments, default n_steps // 10), ``thin`` (record
        θ, the step size and Σ ΔE every ``thin`` steps) and seed (chain c uses stream c of
        ``SeedSequence(seed)``).
    options : SmileOptions, SGLDOptions or SGHMCOptions, optional
        The sampler and its settings (:mod:`sgtune.sampler.registry`; default the tuned SMILE). The
        guardrail quantile κ is ``SmileOptions.guardrail``.
    start : (D,) array, optional
        Initial position of every chain (default: the posterior mean).
    backend : "numba" or a backend object
        The engine's backend (:func:`sgtune.sampler.engine.run_plan`): ``"numba"``, or an object with
        ``prepare(plan)`` and ``advance(plan, t0, n_steps, last)`` (the pure-NumPy reference,
        the tests' twin).

    **removed
        Not accepted: the keyword form of 0.1, ``run_smile_ensemble(target, sampler, step_size, n_steps=…, …)``,
        raises a ``TypeError`` naming the new form.

    Returns
    -------
    SmileEnsembleResult
        The chains' moments after burn-in, the tuner's statistics and the traces.

    Raises
    ------
    SgtuneError
        If the sampler is not one of this module's, or ``start`` is not a finite vector of length D.

    References
    ----------
    The SMILE paper (anonymous, 2025), eqs. (1)–(3), (6), (7), Algorithm 1, section 3.2, appendix F.2.

    Examples
    --------
    >>> from sgtune.core.config import RunSpec
    >>> from sgtune.sampler.registry import SGLDOptions
    >>> from sgtune.sampler.targets import make_target
    >>> res = run_smile_ensemble(make_target("gaussian", dim=4), 0.01, RunSpec(200, n_chains=2), SGLDOptions())
    >>> res.sampler, res.final_state.shape
    ('sgld', (2, 4))
    """
    new = "run_smile_ensemble(target, step_size, RunSpec(n_steps, …), options) (RunSpec from sgtune.core.config)"
    if isinstance(step_size, str):
        raise TypeError(f"run_smile_ensemble(target, sampler, step_size, n_steps=…, …) is the form of 0.1, removed "
                        f"in 0.2.0: use {new} with the sampler's options from sgtune.sampler.registry")
    if removed:
        raise TypeError(f"run_smile_ensemble() got an unexpected keyword argument {next(iter(removed))!r}; use {new}")
    options = SmileOptions() if options is None else options
    sampler = sampler_spec(options).name
    if sampler not in METHOD_IDS:
        raise SgtuneError(f"sampler must be one of {list(METHOD_IDS)}, got {sampler!r}")
    h = check_positive(step_size, "step_size")
    ns, nc, bi, th_ = run.n_steps, run.n_chains, run.burn_in_steps, run.thin
    d = target.dim
    x0 = target.start if start is None else np.asarray(start, dtype=np.float64)
    if x0.shape != (d,) or not np.all(np.isfinite(x0)):
        raise SgtuneError(f"start must be a finite vector of length D = {d}, got shape {x0.shape}")
    params = options.tuner_params(1.0) if hasattr(options, "ema_rate") else SmileOptions().tuner_params(1.0)
    params = params._replace(friction=float(getattr(options, "friction", 1.0)))
    n_rec = ns // th_ if th_ > 0 else 0
    plan = target_plan(target, sampler, params, h, run, n_rec, x0)
    run_plan(plan, backend_of(backend, "SMILE ensembles"), None)
    rec, mc, div = plan.recorder(True), plan.mclmc, plan.state.diverged
    theta, step, ipre, sum1, sum2, stats = plan.state.theta, mc.step, mc.ipre, rec.theta_sum, rec.theta_sq_sum, mc.stats
    trace, step_trace, energy_trace = rec.trace, rec.step_trace, rec.energy_trace
    diverged = np.where(div >= 0, div - 1, -1)  # the engine counts steps from 1, the results of 0.1 from 0
    kept = float(ns - bi)
    smile = options if hasattr(options, "ema_rate") else SmileOptions()
    settings = {"friction": params.friction, "ema_rate": smile.ema_rate, "precond_rate": smile.precond_rate,
                "kappa": smile.guardrail, "adapt_a": smile.adapt_a, "adapt_delta": smile.adapt_delta,
                "tune_start": smile.tune_start, "precond_start": smile.precond_start, "n_chains": nc,
                "tuner": smile.tuner, "energy_var_target": smile.energy_var_target, "anchor_rate": smile.anchor_rate,
                **({"noise_weight": smile.noise_weight} if getattr(smile, "noise_weight", 0.0) else {}),
                **({"guardrail_floor": smile.guardrail_floor} if getattr(smile, "guardrail_floor", 0.0) else {})}
    return SmileEnsembleResult(
        sampler, target.name, target.noise, h, ns, bi, int(run.seed), theta, sum1 / kept, sum2 / kept,
        stats[:, STAT_REJECTIONS] / ns, step.copy(), stats[:, STAT_DE_SUM] / ns, stats[:, STAT_ABS_DE_SUM] / ns,
        stats[:, STAT_DE_SQ_SUM] / ns / d, diverged, 1.0 / ipre,
        trace if th_ else None, step_trace if th_ else None, energy_trace if th_ else None, th_, settings,
        refresh_report(mc, d).get("noise_bias_predicted") if plan.is_mclmc else None)


def ensemble_options(sampler: str, settings: dict[str, Any]) -> Any:
    """The options of ``sampler`` from the keyword settings of 0.1 (``kappa`` is the guardrail quantile)."""
    kw = dict(settings)
    if "kappa" in kw:
        kw["guardrail"] = kw.pop("kappa")
    return options_for(sampler, **kw)


@dataclass(frozen=True, slots=True)
class GridSearchResult:
    """Appendix-C step-size search: coarse grid 10^i, fine grid around the best, and the chosen step.

    Attributes
    ----------
    sampler : str
        The sampler searched.
    coarse_steps, coarse_b2 : ndarray
        The coarse grid 10^i and the b² of each (∞: diverged).
    fine_steps, fine_b2 : ndarray
        The fine grid around the best coarse step and the b² of each.
    best_step : float
        The chosen step.
    best_b2_in_sample : float
        The smallest b² of the search (biased low).
    b2 : B2Estimate
        The b² of a fresh ensemble (independent seed) at ``best_step``.
    seconds : float
        The search's wall time.

    Examples
    --------
    >>> from sgtune.sampler.targets import make_target
    >>> g = grid_search_b2(make_target("gaussian", dim=4), "smile-naive", n_steps=200, n_chains=4,
    ...                    exponents=(-2, -1), n_fine=3, n_bootstrap=100)
    >>> g.coarse_steps, g.fine_steps
    (array([0.01, 0.1 ]), array([0.01, 0.1 , 1.  ]))
    """

    sampler: str
    coarse_steps: np.ndarray
    coarse_b2: np.ndarray
    fine_steps: np.ndarray
    fine_b2: np.ndarray
    best_step: float
    best_b2_in_sample: float
    b2: B2Estimate  # a fresh ensemble (independent seed) at ``best_step``
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler, "coarse_steps": self.coarse_steps.tolist(),
                "coarse_b2": self.coarse_b2.tolist(), "fine_steps": self.fine_steps.tolist(),
                "fine_b2": self.fine_b2.tolist(), "best_step": self.best_step,
                "best_b2_in_sample": self.best_b2_in_sample, **self.b2.to_dict(), "seconds": self.seconds}


@cites("smile2025", "appendix C (step-size grid 10^i, i = −6..0, then 15 values over i_opt ± 1; bootstrap)")
def grid_search_b2(target: AnalyticTarget, sampler: str, *, n_steps: int, n_chains: int = 10, seed: int = 0,
                   exponents: tuple[int, ...] = (-6, -5, -4, -3, -2, -1, 0), n_fine: int = 15,
                   n_bootstrap: int = 2000, clock: Callable[[], float] | None = None,
                   **kwargs: Any) -> GridSearchResult:
    """Search the step size: b² at Δt = 10^i, then at ``n_fine`` log-spaced steps over [10^{i_opt−1}, 10^{i_opt+1}].

    A diverged ensemble scores b² = ∞. The best fine step is chosen on one set of seeds and
    its b² is then *reported from a fresh ensemble* (seed + 1) with the bootstrap standard
    deviation, so the reported number is not the minimum of 22 noisy estimates (which is
    biased low); the in-sample minimum is kept as ``best_b2_in_sample``.

    Parameters
    ----------
    target : AnalyticTarget
        From :func:`sgtune.sampler.targets.make_target`.
    sampler : str
        The sampler's name (``"smile"``, ``"smile-naive"``, ``"sgld"``, …).
    n_steps, n_chains, seed : int
        Each ensemble's steps and chains, and the seed of the search (the report uses seed + 1).
    exponents : tuple of int
        The coarse grid's exponents i.
    n_fine : int
        The number of fine steps.
    n_bootstrap : int
        The resamples of the reported b²'s standard deviation.
    clock : callable, optional
        ``time.perf_counter`` by default.
    **kwargs
        The sampler's settings (friction, ema_rate, precond_rate, kappa, adapt_a, adapt_delta, tune_start,
        precond_start, tuner, energy_var_target, anchor_rate) and ``start``/``backend`` of :func:`run_smile_ensemble`.

    Returns
    -------
    GridSearchResult
        Both grids with their b², the chosen step and its fresh b².

    Raises
    ------
    SgtuneError
        If every step of the coarse grid diverged.

    References
    ----------
    The SMILE paper (anonymous, 2025), appendix C.

    Examples
    --------
    >>> from sgtune.sampler.targets import make_target
    >>> g = grid_search_b2(make_target("gaussian", dim=4), "smile-naive", n_steps=200, n_chains=4,
    ...                    exponents=(-2, -1), n_fine=3, n_bootstrap=100)
    >>> bool(g.best_step in g.fine_steps or g.best_step in g.coarse_steps), g.b2.n_bootstrap
    (True, 100)
    """
    import time

    from ..core.config import RunSpec

    clk = clock or time.perf_counter
    t0 = clk()
    start = kwargs.pop("start", None)
    backend = kwargs.pop("backend", "numba")
    options = ensemble_options(sampler, kwargs)
    kwargs = {"start": start, "backend": backend}
    nf = check_int(n_fine, "n_fine", low=1)
    sel_seed = seed

    def score(h: float) -> float:
        res = run_smile_ensemble(target, h, RunSpec(n_steps, n_chains=n_chains, seed=sel_seed), options, **kwargs)
        if np.any(res.diverged >= 0) or not np.all(np.isfinite(res.sample_second_moment)):
            return math.inf
        per = b2_chains(res.sample_second_moment, target.second_moment, target.var_of_square, target.reduce)
        return float(per.mean())

    coarse = np.array([10.0 ** i for i in exponents])
    cb = np.array([score(h) for h in coarse])
    if not np.any(np.isfinite(cb)):
        raise SgtuneError(f"every step size of the coarse grid diverged for sampler {sampler!r} on "
                          f"{target.name}/{target.noise}; extend exponents downwards")
    i_opt = exponents[int(np.argmin(cb))]
    fine = np.logspace(i_opt - 1, i_opt + 1, nf)
    fb = np.array([score(h) for h in fine])
    j = int(np.argmin(fb))
    best = float(fine[j]) if fb[j] <= cb.min() else float(coarse[int(np.argmin(cb))])
    best_in = float(min(fb[j], cb.min()))
    res = run_smile_ensemble(target, best, RunSpec(n_steps, n_chains=n_chains, seed=seed + 1), options, **kwargs)
    if np.any(res.diverged >= 0):
        est = B2Estimate(math.inf, math.inf, np.full(n_chains, math.inf), target.reduce, n_bootstrap)
    else:
        est = res.b2(target, np.random.default_rng(seed + 2), n_bootstrap)
    return GridSearchResult(sampler, coarse, cb, fine, fb, best, best_in, est, clk() - t0)
