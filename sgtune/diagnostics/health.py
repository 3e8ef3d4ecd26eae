"""Chain health: is a finished run fit to be summarised at all?

A run can finish with finite numbers and still describe nothing: chains that diverged, chains that
froze (a tuned SMILE step size that collapsed, draws that barely move), chains that were still
travelling when they were summarised, or chains that disagree with what sgtune predicts for them.
:func:`chain_health` checks the four on the streaming summaries of a run (no trace needed):

* **diverged** — chains whose state became non-finite (the sampler records the step).
* **frozen** — a tuned MCLMC step size ε that ended below :data:`STEP_COLLAPSE` × its initial value
  in some chain (under the anchored tuner only if ε was still falling at the end of its recorded trace: its
  fixed point is reached from any start, a start far too large included), or an effective sample size below :data:`ESS_FRACTION` of the draws *and* below
  :data:`ESS_MIN` in all (a slowly mixing chain with thousands of effective draws is not frozen).
  Fewer than :data:`ESS_MIN` effective draws at a higher fraction is reported too (a run too short
  for its batch-means standard errors to be reliable), without the ``frozen`` flag.
* **nonstationary** — each chain's second half against its first: per chain c and coordinate i,
  d_ci = m̄₂ − m̄₁ (means) and log(v₂/v₁) (marginal variances). Chains are independent, so under
  stationarity the C differences of each statistic have mean zero, whatever the autocorrelation;
  the paired t-statistic t = d̄/(s_d/√C) is compared with the two-sided Bonferroni quantile of
  Student-t with C − 1 degrees of freedom over the 2D statistics at family-wise level
  :data:`ALPHA`. Needs C ≥ 3 chains with two halves each (else it is reported as not tested).
* **batch_length** — the standard errors (and the ESS) are batch means over K = C·S segments of L_s
  steps; they are right only when each batch is many integrated autocorrelation times τ long, else
  they are too small (by √(1 − τ/(2L_s)) for L_s ≫ τ, by √(L_s/τ) for L_s ≪ τ). The run itself
  measures τ: per coordinate, τ̂_S = (draws)·se²/var from the K short batches and τ̂_H from the 2C
  chain halves (L_H = ⌊S/2⌋·L_s steps, the longest batches the summaries keep). The ratio
  ρ = τ̂_S/τ̂_H is about 1 when the batches are long enough; :func:`batch_length_test` flags
  min ρ below the lower α/D quantile of F(K − 1, 2C − 1) (the two estimates' degrees of freedom,
  Bonferroni over D coordinates): the short batches see significantly less variance than the long
  ones. Not tested with the default S (= 2 for C ≥ 16: the batches are the halves) or S = 1.
* **prediction_check** — where sgtune has a prediction for the sampler, its covariance test
  (:func:`~sgtune.diagnostics.mcse.compare_covariance`) as computed by the caller; a check that
  carries a ``reason`` (e.g. the linearised chain is unstable at this Λ) fails with it.

The thresholds come from measurements (healthy and broken runs, ``benchmarks/health_table.py``,
table in ``docs/guide/applicability.md``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special  # not scipy.stats: its import costs ~1 s per sgtune process

from .mcse import bonferroni_threshold

__all__ = ["ChainHealth", "chain_health", "half_split_test", "batch_length_test", "ALPHA", "STEP_COLLAPSE",
           "ESS_FRACTION", "ESS_MIN", "BATCH_TAUS"]

#: family-wise false-alarm level of the half-split test on a stationary run
ALPHA = 0.01
#: the SMILE chains' predicted noise bias (``noise_bias_predicted``) above which a run without a noise-bias cap is
#: warned: where the prediction is resolved by the chains themselves. Measured (``benchmarks/smile_noise_bias.py``,
#: docs/benchmarks.md "The noise bias"; 68 GLM runs of 2·10⁴ steps): above 0.5 the chains' measured excess along the
#: posterior's whitened directions follows the prediction (ratio 0.73–1.34 where the runs have ≥ 0.6 % effective
#: draws); below 0.2 it is 0.18–0.72, the Monte Carlo floor of a run that long, so a smaller prediction cannot be
#: checked there
NOISE_BIAS_WARN = 0.2
#: a tuned step size that ends below this fraction of its initial value has collapsed
STEP_COLLAPSE = 1e-3
#: frozen: effective draws below this fraction of the draws …
ESS_FRACTION = 0.01
#: … and below this many in all
ESS_MIN = 100.0
#: batches recommended when the batch-length test fails: at least this many autocorrelation times long
#: (the batch-means variance is then low by about τ/(2L) ≤ 5 %)
BATCH_TAUS = 10.0


@dataclass(frozen=True)
class ChainHealth:
    """The verdict on one run (JSON key ``health``); ``reasons`` is empty when ``healthy``.

    Attributes
    ----------
    healthy : bool
        No check failed.
    reasons : tuple of str
        One sentence per failed check, with its numbers and the fix.
    diverged : int
        Chains that diverged.
    frozen : bool
        The chains stopped moving (e.g. a collapsed MCLMC step size).
    nonstationary : bool or None
        The half-split test rejected (None: not testable).
    prediction_check : dict or None
        The caller's comparison with sgtune's prediction.
    details : dict
        The individual tests' numbers (JSON-ready).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.sampler import run_chains
    >>> res = run_chains("logistic", example("logistic"), Dynamics(0.1, batch_size=32),
    ...                  RunSpec(1000, n_chains=4))
    >>> from sgtune.diagnostics.health import chain_health
    >>> health = chain_health(res)
    >>> health.diverged, health.frozen, type(health.reasons).__name__
    (0, False, 'tuple')
    """

    healthy: bool
    reasons: tuple[str, ...]
    diverged: int
    frozen: bool
    nonstationary: bool | None
    prediction_check: dict[str, Any] | None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "reasons": list(self.reasons), "diverged": self.diverged,
                "frozen": self.frozen, "nonstationary": self.nonstationary,
                "prediction_check": self.prediction_check, **self.details}


def half_split_test(half_means: Any, half_variances: Any, *, alpha: float = ALPHA) -> dict[str, Any] | None:
    """Paired test of each chain's second half against its first (module docstring).

    Parameters
    ----------
    half_means, half_variances : (C, 2, D) array_like
        Each chain's mean and marginal variances over the first and the second half of its kept
        steps; rows with non-finite entries (diverged chains) are dropped.
    alpha : float, optional
        Family-wise level over the 2D statistics.

    Returns
    -------
    dict or None
        None with fewer than 3 usable chains, else ``t_max``, ``threshold``, ``passed``,
        ``statistic`` ("mean" or "variance"), ``coordinate``, ``chains`` and ``alpha``.

    Examples
    --------
    Six chains whose second halves drift up by 1 in every coordinate:

    >>> from sgtune.diagnostics.health import half_split_test
    >>> jitter = np.array([0.1, -0.1, 0.05, -0.05, 0.02, -0.02])[:, None]
    >>> drift = np.stack([np.zeros((6, 2)), 1 + jitter + np.zeros((6, 2))], axis=1)
    >>> test = half_split_test(drift, np.ones((6, 2, 2)))
    >>> test["passed"], test["statistic"], test["chains"]
    (False, 'mean', 6)
    """
    m = np.asarray(half_means, dtype=float)
    v = np.asarray(half_variances, dtype=float)
    keep = np.all(np.isfinite(m), axis=(1, 2)) & np.all(np.isfinite(v), axis=(1, 2)) & np.all(v > 0, axis=(1, 2))
    m, v = m[keep], v[keep]
    c = m.shape[0]
    if c < 3:
        return None
    diffs = {"mean": m[:, 1] - m[:, 0], "variance": np.log(v[:, 1] / v[:, 0])}
    d = m.shape[2]
    threshold = bonferroni_threshold(alpha, 2 * d, c - 1)
    best = (0.0, "mean", 0)
    for name, x in diffs.items():
        mean = x.mean(axis=0)
        sd = x.std(axis=0, ddof=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(sd > 0, np.abs(mean) / (sd / math.sqrt(c)), np.where(mean == 0, 0.0, np.inf))
        i = int(np.argmax(t))
        if t[i] > best[0]:
            best = (float(t[i]), name, i)
    return {"t_max": best[0], "threshold": float(threshold), "passed": bool(best[0] <= threshold),
            "statistic": best[1], "coordinate": best[2], "chains": int(c), "alpha": float(alpha)}


def batch_length_test(chains: Any, *, alpha: float = ALPHA) -> dict[str, Any] | None:
    """Test whether the batches behind the standard errors are long enough for the chains' autocorrelation.

    See the module docstring. Reads ``half_means`` (C, 2, D), ``cov``, ``ess``, ``n_batches``, ``n_steps``,
    ``burn_in`` and
    ``settings["batches_per_chain"]`` of a :class:`~sgtune.sampler.ChainResult`. Returns ``None`` when
    there is nothing to test (no halves, S ≤ 2, fewer than 2 usable chains), else a dict with
    ``passed``, ``ratio`` (min ρ), ``threshold``, ``coordinate``, ``batch_steps`` (L_s), ``tau`` (τ̂_H of
    that coordinate, in steps), ``tau_short`` (τ̂_S), ``se_factor`` (√(1/ρ): how much larger the standard
    errors of the long batches are) and ``batches_per_chain_max`` (the most batches per chain that keep
    each :data:`BATCH_TAUS` × the largest τ̂_H long; 0 when even the halves are too short).

    Parameters
    ----------
    chains : ChainResult
        The run.
    alpha : float, optional
        Level of the test.

    Returns
    -------
    dict or None
        The test's numbers (above), or None when there is nothing to test.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.sampler import run_chains
    >>> res = run_chains("logistic", example("logistic"), Dynamics(0.1, batch_size=32),
    ...                  RunSpec(1000, n_chains=4))
    >>> from sgtune.diagnostics.health import batch_length_test
    >>> sorted(batch_length_test(res))[:4]
    ['alpha', 'batch_steps', 'batches_per_chain', 'batches_per_chain_max']
    """
    hm = getattr(chains, "half_means", None)
    settings = getattr(chains, "settings", None) or {}
    S = int(settings.get("batches_per_chain", 0) or 0)
    if hm is None or S <= 2:
        return None
    hm = np.asarray(hm, dtype=float)
    ok = np.all(np.isfinite(hm), axis=(1, 2))
    c = int(ok.sum())
    post = int(chains.n_steps) - int(chains.burn_in)
    var = np.diag(np.asarray(chains.cov, dtype=float))
    ess = np.asarray(chains.ess, dtype=float)
    k = int(chains.n_batches)
    if c < 2 or post < S or k < 3:
        return None
    batch_steps = post / S
    halves = hm[ok].reshape(2 * c, -1)
    usable = np.isfinite(ess) & (ess > 0) & np.isfinite(var) & (var > 0)
    if not usable.any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        tau_short = np.where(usable, c * post / ess, np.nan)
        tau_long = np.where(usable, (S // 2) * batch_steps * halves.var(axis=0, ddof=1) / var, np.nan)
        ratio = np.where(usable & (tau_long > 0), tau_short / tau_long, np.inf)
    i = int(np.argmin(ratio))
    d = int(usable.sum())
    threshold = float(special.fdtri(k - 1, 2 * c - 1, alpha / d))  # scipy.stats.f.ppf(alpha / d, k − 1, 2c − 1)
    tau_max = float(np.nanmax(tau_long))
    return {"passed": bool(ratio[i] >= threshold), "ratio": float(ratio[i]), "threshold": threshold,
            "coordinate": i, "batch_steps": float(batch_steps), "tau": float(tau_long[i]),
            "tau_short": float(tau_short[i]), "se_factor": float(math.sqrt(1.0 / ratio[i])) if ratio[i] > 0 else math.inf,
            "batches_per_chain_max": int(post // (BATCH_TAUS * tau_max)) if tau_max > 0 else S,
            "batches_per_chain": S, "chains": c, "alpha": float(alpha)}


def _collapse_advice(chains: Any) -> str:
    """What to do about a collapsed SMILE step size: the paper's rule drifts down by construction, so the
    anchored tuner is the remedy; a collapse under the anchored tuner means its target is out of reach."""
    settings = getattr(chains, "settings", None) or {}
    if settings.get("tuner") == "paper":
        return ("the SMILE paper's step-size rule (tuner 'paper') drifts ε down by ≈ 7e-4 per step at any step "
                "size; use the anchored tuner (tuner 'anchored', the default), which holds ε where the "
                "energy-error variance per dimension is 5e-5")
    return ("the anchored tuner (tuner 'anchored') shrank ε to keep the energy-error variance per dimension at its "
            "target, so the energy errors stay large even at tiny steps (a non-smooth or ill-scaled model?); check "
            "the model, or use the untuned sampler with a fixed step size (e.g. smile-naive)")


def chain_health(chains: Any, *, initial_step_size: float | None = None,
                 prediction_check: dict[str, Any] | None = None, alpha: float = ALPHA) -> ChainHealth:
    """Diagnose a :class:`~sgtune.sampler.ChainResult` (module docstring).

    Parameters
    ----------
    chains : ChainResult
        The run.
    initial_step_size : float or None, optional
        The MCLMC samplers' initial ε (the collapse check needs it).
    prediction_check : dict or None, optional
        The caller's comparison with sgtune's prediction, a dict with at least ``passed`` (bool)
        and ``z_max``/``threshold`` (:func:`sgtune.workflows.verify.prediction_check`), or ``None``
        when there is no prediction.
    alpha : float, optional
        Level of the half-split and batch-length tests.

    Returns
    -------
    ChainHealth
        The verdict and its reasons.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.sampler import run_chains
    >>> res = run_chains("logistic", example("logistic"), Dynamics(0.1, batch_size=32),
    ...                  RunSpec(1000, n_chains=4))
    >>> from sgtune.diagnostics.health import chain_health
    >>> health = chain_health(res)  # 1000 steps: too few effective draws to trust
    >>> health.healthy, any("effective draws" in reason for reason in health.reasons)
    (False, True)
    """
    details: dict[str, Any] = {}
    diverged = int(np.sum(np.asarray(chains.diverged_at) >= 0))
    reasons = [f"{diverged} of {int(chains.n_chains)} chains diverged (a non-finite state); use a smaller step size"
               ] if diverged else []
    collapsed, why = _step_collapse(chains, initial_step_size, details)
    reasons += why
    stuck, why = _effective_draws(chains, diverged, details)
    reasons += why
    frozen = collapsed or stuck
    nonstationary, why = _stationarity(chains, alpha, details)
    reasons += why
    reasons += _batch_length(chains, alpha, details)
    reasons += _noise_bias(chains, details)
    reasons += _prediction_disagreement(prediction_check)
    return ChainHealth(healthy=not reasons, reasons=tuple(reasons), diverged=diverged, frozen=frozen,
                       nonstationary=nonstationary, prediction_check=prediction_check, details=details)


def _step_collapse(chains: Any, initial_step_size: float | None, details: dict[str, Any]) -> tuple[bool, list[str]]:
    """A tuned MCLMC step size that collapsed below ``STEP_COLLAPSE`` × the initial one: (frozen, reasons)."""
    final = getattr(chains, "step_size_final", None)
    if final is None or initial_step_size is None or not initial_step_size > 0:
        return False, []
    ratio = float(np.nanmin(np.asarray(final, dtype=float))) / float(initial_step_size)
    details["step_size_ratio_min"] = ratio
    if ratio >= STEP_COLLAPSE:
        return False, []
    if (getattr(chains, "settings", None) or {}).get("tuner") == "anchored":
        falling = _still_falling(getattr(chains, "step_size_trace", None))
        details["step_size_still_falling"] = falling
        if not falling:
            return False, []
    return True, [f"the tuned step size collapsed in some chain (final ε = {ratio:.2g} × the initial ε, "
                  f"below {STEP_COLLAPSE:g}): the chain stopped moving; {_collapse_advice(chains)}"]


def _still_falling(trace: Any) -> bool:
    """Whether a tuned step size was still falling at the end of the run: in some chain the last recorded ε is below
    half the ε a quarter of the trace earlier (False without a trace of at least 8 points).

    The anchored rule has a fixed point and reaches it from any start, so its ε ending 10³× below a start that was
    10³× too large is no collapse (the same ε as from a start near it). A collapse is ε still shrinking: at the
    fixed point log ε fluctuates by a standard deviation of 0.0075–0.024 (``anchored_update``), so a factor 2
    (0.69 in log ε) is ≥ 29 of them, while a rule that cannot reach its target lowers log ε by up to
    γₙ(ξ_max − 1)/6 per step (over the last quarter of 2·10⁴ steps: e⁻³⁷)."""
    if trace is None:
        return False
    tr = np.asarray(trace, dtype=float)
    if tr.ndim != 2 or tr.shape[1] < 8:
        return False
    last, earlier = tr[:, -1], tr[:, (3 * tr.shape[1]) // 4 - 1]
    with np.errstate(invalid="ignore"):
        return bool(np.any(last < 0.5 * earlier))


def _effective_draws(chains: Any, diverged: int, details: dict[str, Any]) -> tuple[bool, list[str]]:
    """Too few effective draws: frozen chains (also a small fraction of the draws) or only a short run."""
    draws = float(max(int(chains.n_chains) - diverged, 0) * max(int(chains.n_steps) - int(chains.burn_in), 0))
    ess = np.asarray(chains.ess, dtype=float)
    if not (draws > 0 and ess.size and np.all(np.isfinite(ess))):
        return False, []
    ess_min = float(ess.min())
    details["ess_min"] = ess_min
    details["ess_fraction"] = ess_min / draws
    if ess_min < ESS_MIN and ess_min < ESS_FRACTION * draws:
        return True, [f"only {ess_min:.0f} effective draws of {draws:.0f} ({100 * ess_min / draws:.2g} %, below "
                      f"{100 * ESS_FRACTION:g} %): the chains barely move relative to their spread; run longer "
                      + ("or with a larger batch size (smile/psmile tune ε themselves; psmile rescales "
                         "ill-scaled coordinates)" if (getattr(chains, "settings", None) or {}).get("sampler")
                         in ("smile", "psmile") else "or with a larger step size") + _noise_limited(chains)]
    if ess_min < ESS_MIN:
        return False, [f"only {ess_min:.0f} effective draws (below {ESS_MIN:g}): the run is too short for its "
                       "standard errors to be reliable; run longer"]
    return False, []


#: what reduces the SMILE chains' noise bias, in the advice of :func:`_noise_limited` and :func:`_noise_bias`
_BATCH_REMEDY = "a larger batch size reduces the noise (its covariance falls as 1/B)"
_SGLD_REMEDY = "sgld with a step-size matrix from `sgtune lambda` accounts for the noise exactly"


def _noise_limited(chains: Any) -> str:
    """The SMILE chains' low ESS explained by the noise-bias cap, when it shortened their velocity refresh (else "")."""
    capped = getattr(chains, "refresh_capped", None)
    if capped is None or not np.any(capped):
        return ""
    tau = (getattr(chains, "settings", None) or {}).get("noise_bias")
    return (f". The minibatch noise limits this sampler here: its velocity refresh was shortened so that the noise's "
            f"anisotropic part biases the chains by at most noise_bias = {tau:g}, and the chains diffuse instead of "
            f"travelling. {_BATCH_REMEDY[0].upper()}{_BATCH_REMEDY[1:]}; a larger noise_bias trades bias for mixing; "
            f"{_SGLD_REMEDY}")


def _noise_bias(chains: Any, details: dict[str, Any]) -> list[str]:
    """The SMILE chains' predicted noise bias (``noise_bias_predicted``) above :data:`NOISE_BIAS_WARN`, or above the
    cap's τ (``noise_bias``) when there is one: no refresh holds it at this step size."""
    pred = getattr(chains, "noise_bias_predicted", None)
    if pred is None or not np.size(pred):
        return []
    tau = float((getattr(chains, "settings", None) or {}).get("noise_bias", 0.0) or 0.0)
    worst = float(np.max(pred))
    details["noise_bias_predicted"] = worst
    # at L_τ the prediction equals τ up to rounding: only a prediction the cap could not reach is above it
    if not worst > (tau * (1.0 + 1e-6) if tau > 0.0 else NOISE_BIAS_WARN):
        return []
    if tau > 0.0:
        why = (f"more than noise_bias = {tau:g}: even a complete velocity refresh every step cannot hold it at this "
               f"step size; {_BATCH_REMEDY}, or {_SGLD_REMEDY}")
    else:
        why = ("which the chains' covariance check may not see (it weighs the directions the posterior is wide in; "
               f"the noise is largest where it is narrow); {_BATCH_REMEDY}, noise_bias holds it (e.g. 0.05: a "
               f"shorter velocity refresh, slower mixing), or {_SGLD_REMEDY}")
    return [f"the minibatch noise biases the chains' covariance by about {worst:.2g} along its noisiest direction "
            f"(predicted from the noise measured along the chains), {why}"]


def _stationarity(chains: Any, alpha: float, details: dict[str, Any]) -> tuple[bool | None, list[str]]:
    """The half-split test: (nonstationary, or None without half moments; reasons)."""
    hm, hv = getattr(chains, "half_means", None), getattr(chains, "half_variances", None)
    split = None if hm is None or hv is None else half_split_test(hm, hv, alpha=alpha)
    if split is None:
        return None, []
    details["half_split"] = split
    if split["passed"]:
        return False, []
    return True, [f"the chains are not stationary: the {split['statistic']} of coordinate "
                  f"{split['coordinate']} differs between the first and second half of the chains "
                  f"(|t| = {split['t_max']:.3g} > {split['threshold']:.3g}); run longer or with a "
                  "longer burn-in"]


def _batch_length(chains: Any, alpha: float, details: dict[str, Any]) -> list[str]:
    """Batches shorter than ``BATCH_TAUS`` autocorrelation times: standard errors too small."""
    batches = batch_length_test(chains, alpha=alpha)
    if batches is None:
        return []
    details["batch_length"] = batches
    if batches["passed"]:
        return []
    fix = (f"use at most {batches['batches_per_chain_max']} `batches_per_chain`"
           if batches["batches_per_chain_max"] >= 2 else "run longer and leave `batches_per_chain` at its default")
    return [f"the standard errors come from batches of {batches['batch_steps']:.3g} steps, but the "
            f"chains' autocorrelation time is about {batches['tau']:.3g} steps (coordinate "
            f"{batches['coordinate']}): the standard errors are about {batches['se_factor']:.2g}× too "
            f"small and the effective sample size {batches['se_factor'] ** 2:.2g}× too large; {fix} "
            f"(batches of at least {BATCH_TAUS:g} autocorrelation times)"]


def _prediction_disagreement(prediction_check: dict[str, Any] | None) -> list[str]:
    """The caller's comparison with a prediction, when it failed (or carries its own reason)."""
    if prediction_check is not None and prediction_check.get("reason"):
        return [str(prediction_check["reason"])]
    if prediction_check is None or prediction_check.get("passed", True):
        return []
    mode = prediction_check.get("mode")
    what = {"posterior": "the posterior covariance (βH)⁻¹ they sample",
            "target": "the target covariance the step size was tuned (or refined) for",
            "matrix": "the covariance they were compared with (`against`)"}.get(
                str(mode), "sgtune's prediction for the linearised chain")
    return [f"the chains disagree with {what} (max |z| = {prediction_check['z_max']:.3g} > "
            f"{prediction_check['threshold']:.3g}, relative error "
            f"{prediction_check.get('relative_frobenius_error', float('nan')):.2g}); "
            + {"posterior": "the sampler is biased or has not mixed (SMILE: the minibatch noise biases the chain "
                            "where it is anisotropic, more at a larger step, which the anchored tuner's energy error "
                            "cannot see; try more steps at a smaller fixed step with the velocity refresh on "
                            "(sampler smile-naive, refresh length auto; sgtune verify checks it against the "
                            "posterior), psmile for ill-scaled features, or sgld "
                            "with a step-size matrix from `sgtune lambda`, whose stationary covariance sgtune "
                            "predicts)",
               "target": "this Λ's chain does not reach the target here (refine it again, or compare "
                         "with `against='prediction'`)",
               "matrix": "check that the covariance given is the one this chain should have"}.get(
                   str(mode), "see the applicability report of sgtune covariance for this Λ")]
