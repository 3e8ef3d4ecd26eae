"""Does the linearised chain describe the chain that runs? The applicability report.

sgtune's stationary covariance (Wang, Ding & Huggins 2026, Eqs. (11)–(12)) is exact for the *proxy* chain:
the quadratic expansion of the loss at θ̂ with the exact minibatch noise. The chain that runs sees the loss itself.
Over the predicted spread Σ the curvature H(θ) and the gradient noise Cov_n ∇l_n(θ) change; when
they change enough, the prediction is wrong although every solve converged.

This module measures that with the model's own calls, at points of the predicted spread:

* ``curvature_change`` — the largest relative change of the curvature, ‖H^{-1/2}(H(θ) − H)H^{-1/2}‖₂,
  and of the gradient-noise covariance (relative Frobenius change against its linearised value)
  at θ̂ ± 2 sd along the leading eigenvectors of Σ and at random draws from N(θ̂, Σ);
* ``predicted_deviation`` — a second prediction that keeps the non-quadratic part of the loss to the
  order that matters for the covariance: the *statistically linearised* chain (the Gaussian-closure
  or "equivalent linearisation" of random-vibration theory). Under θ ~ N(θ̂, Σ), Stein's lemma gives
  the best linear drift E[∇L(θ)(θ − θ̂)ᵀ]Σ⁻¹ = E[∇²L(θ)] =: H_eff, and the expected gradient noise is
  C_eff = E[Cov_n ∇l_n(θ)]. Solving the stationary equation with (H_eff, C_eff) and iterating Σ to a
  fixed point gives Σ_SL; ``predicted_deviation`` = max_ij |Σ_SL − Σ|_ij / √(Σ_ii Σ_jj), the same
  entry-wise scale as ``sgtune verify --relative-tolerance``. For a quadratic loss Σ_SL = Σ exactly
  (the expectations use antithetic pairs and a control variate that is exact for the proxy, so the
  estimate has no Monte Carlo noise there); a fixed-point iteration that runs away (Σ_SL growing
  without bound, H_eff losing definiteness) means the spread is not local;
* ``equilibration_steps`` (:func:`~sgtune.theory.stationary.equilibration_steps`) against
  ``tau_worst``: when the spectral radius of the second-moment map is close to 1 while τ is not, the
  multiplicative (state-dependent) minibatch noise is close to critical — the stationary law is heavy
  tailed and its sample covariance converges far more slowly than τ suggests;
* ``conditioning`` — condition numbers of H, of the target and of Λ, the solve's backward error,
  and the covariates' column scales.

The thresholds (module constants below) were chosen from measurements against long ``verify`` runs
on real and simulated problems; the table is in the documentation (``docs``: applicability).

Data out of core (``data.rows`` set: a folder or a Parquet file). Each evaluation point would be a
pass over all N rows, so the model is evaluated on a seeded random subsample of M rows
(:func:`subsample_rows`, read in sorted order by explicit reads; every row when N ≤ M), and each
subsample average is *anchored* to all rows by a control variate that is exact at θ̂: the curvature
and mean gradient are shifted by (all rows − subsample) at θ̂, and the linearised gradient noise
C + C̄(S) − JSJ by the same difference, where C̄(S) = mean_n J_nSJ_n of all rows is used only at the
predicted Σ₀ (one chunked pass, usually remembered from the solve) and extended to other S through
its linearity, C̄(S) = C̄(Σ₀) + C̄(S − Σ₀), the second term from the subsample. For a quadratic loss
every subsample term cancels and Σ_SL = Σ exactly, as in memory; otherwise only the non-quadratic
part comes from the subsample. The same computation on SUBSAMPLE_GROUPS disjoint random parts of the
M rows gives standard errors (sd over parts / √parts); a decision whose estimate is within
UNCERTAIN_Z standard errors of its threshold is listed as uncertain. The column scales come from the
expansion's own chunked pass. Memory is O(M·D + chunk·D + D²), independent of N.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core.errors import SgtuneError
from ..io.data import Dataset
from ..io.reduce import blas_single_thread, reduce_rows
from ..models import Expansion, expansion_at
from .linear_chain import LinearChain
from .noise_models import NOISE_MODELS
from .stationary import StationaryCov, equilibration_steps

__all__ = ["Applicability", "applicability", "statistically_linearised_cov", "MAX_DEVIATION",
           "MAX_EQUILIBRATION_RATIO", "COLUMN_SCALE_RATIO", "MAX_CURVATURE_CHANGE", "subsample_rows"]

#: largest predicted deviation (max_ij |Σ_SL − Σ|/√(Σ_ii Σ_jj)) of an applicable answer
MAX_DEVIATION = 0.05
#: largest equilibration_steps / max(τ_worst, 1) of an applicable answer (≈ 1.2 for additive noise)
MAX_EQUILIBRATION_RATIO = 10.0
#: covariate column scales (RMS) differing by more than this factor warn and suggest standardising
COLUMN_SCALE_RATIO = 1e3
#: Σ_SL growing beyond this multiple of ‖Σ‖ (or H_eff indefinite) means the spread is not local
RUNAWAY_FACTOR = 20.0
#: a curvature that changes by more than this (relative, at ±2 sd and draws) means the spread is not local:
#: measured ≤ 1.09 on every problem whose chain the statistically linearised model describes (spector,
#: iris, wine, near-separable logistic), ≈ 4 on the β-divergence fits it does not (docs/guide/applicability.md)
MAX_CURVATURE_CHANGE = 2.0
#: out-of-core data: the model is evaluated on a seeded random subsample of M = 2²²/D² rows (an evaluation's
#: O(M·D²) cost the same at every D: 10 485 rows at D = 20), clipped to [SUBSAMPLE_MIN_ROWS, SUBSAMPLE_MAX_ROWS]
SUBSAMPLE_WORK = 2**22
SUBSAMPLE_MIN_ROWS = 4096
SUBSAMPLE_MAX_ROWS = 32768
#: … and on this many disjoint random parts of it, whose spread gives the standard errors
SUBSAMPLE_GROUPS = 8
#: a threshold decision within this many standard errors of its threshold is reported as uncertain
UNCERTAIN_Z = 2.0


@dataclass(frozen=True)
class Applicability:
    """Result of :func:`applicability` (``to_dict`` is the JSON object ``applicability``).

    Attributes
    ----------
    applicable : bool
        No check failed: the linearised chain describes the chain that runs.
    reasons : tuple of str
        One sentence per failed check (empty when ``applicable``).
    curvature_change : dict of str to float
        The largest relative changes of the curvature and of the gradient noise over the
        predicted spread, and the model evaluations used (module docstring).
    equilibration_steps : float
        Steps from θ̂ until the second moments are stationary
        (:func:`~sgtune.theory.linear_chain.equilibration_steps`).
    tau_worst : float
        The worst integrated autocorrelation time of the prediction.
    conditioning : dict
        Condition numbers of the problem (H, the target) and the solve's backward error.
    predicted_deviation : float
        max_ij |Σ_SL − Σ|_ij / √(Σ_ii Σ_jj), Σ_SL the statistically linearised chain's covariance.
    mean_shift : float
        max_i |m_i|/sd_i of the drift's mean shift m = −H_eff⁻¹E[∇L].
    linearised_cov : (D, D) ndarray or None
        Σ_SL (None when its iteration runs away).
    subsample : dict or None
        The rows evaluated for data out of core (None in memory).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.stationary import predict_stationary_cov
    >>> data, model = example("logistic"), get_model("logistic")
    >>> e = expand(model, data)
    >>> st = predict_stationary_cov(e, Dynamics(0.1, batch_size=32))
    >>> from sgtune.theory.applicability import applicability
    >>> report = applicability(model, data, e, st)
    >>> sorted(report.curvature_change)
    ['curvature', 'gradient_noise', 'points']
    """

    applicable: bool
    reasons: tuple[str, ...]
    curvature_change: dict[str, float]
    equilibration_steps: float
    tau_worst: float
    conditioning: dict[str, Any]
    predicted_deviation: float
    mean_shift: float
    linearised_cov: np.ndarray | None = field(default=None, repr=False)
    subsample: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (non-finite numbers as the string ``"inf"``, as elsewhere in sgtune's JSON)."""
        ratio = self.equilibration_steps / max(self.tau_worst, 1.0) if math.isfinite(self.tau_worst) else math.inf
        return {"applicable": self.applicable, "reasons": list(self.reasons),
                "curvature_change": self.curvature_change, "equilibration_steps": _num(self.equilibration_steps),
                "equilibration_ratio": _num(ratio),
                "predicted_deviation": _num(self.predicted_deviation), "mean_shift": _num(self.mean_shift),
                "conditioning": self.conditioning, "subsample": self.subsample,
                "thresholds": {"predicted_deviation": MAX_DEVIATION,
                               "equilibration_ratio": MAX_EQUILIBRATION_RATIO,
                               "curvature_change": MAX_CURVATURE_CHANGE,
                               "column_scale_ratio": COLUMN_SCALE_RATIO}}


def _num(x: float) -> float | str:
    return float(x) if math.isfinite(x) else "inf"


def _sqrtm_psd(a: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh(0.5 * (a + a.T))
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def _entrywise_deviation(a: np.ndarray, ref: np.ndarray) -> float:
    s = np.sqrt(np.clip(np.diag(ref), 1e-300, None))
    return float(np.max(np.abs(a - ref) / np.outer(s, s)))


def _cond(a: np.ndarray) -> float:
    w = np.abs(np.linalg.eigvals(a))
    return float(w.max() / w.min()) if w.min() > 0 else math.inf


class _NotLocal(Exception):
    pass


def _lin_noise(e: Expansion, S: np.ndarray) -> np.ndarray:
    """Cov_n of the proxy's per-sample gradients averaged over d with E[ddᵀ] = S: C0 + mean J_nSJ_n − JSJ (B = 1)."""
    return NOISE_MODELS["dq-exact"].covariance(e, S, 1.0)


def _solve(e: Expansion, st: StationaryCov, H: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Stationary covariance of the linear chain with curvature H and constant gradient noise C (Eq. 11)."""
    chain = LinearChain.statistically_linearised(e, st.dynamics.replace(step=st.step_matrix), H, C)
    if not chain.transition_radius() < 1.0:
        raise _NotLocal("the chain is unstable under the curvature averaged over the predicted spread")
    S = chain.solve_constant_noise()
    d = e.dim
    return 0.5 * (S[:d, :d] + S[:d, :d].T)


@cites("sgtune", "statistical (equivalent) linearisation of Eq. (11): H_eff = E∇²L, C_eff = E Cov_n ∇l_n "
                 "under N(θ̂, Σ), by Stein's lemma")
def statistically_linearised_cov(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov, *,
                                 n_pairs: int = 16, max_iter: int = 6, seed: int = 0,
                                 with_shift: bool = True, full: Expansion | None = None) -> dict[str, Any]:
    """Σ_SL, the stationary covariance of the statistically linearised chain (module docstring).

    ``data`` are the rows the model is evaluated on and ``expansion`` their expansion at θ̂. With
    ``full`` (the expansion of all N rows, e.g. streamed from disk) ``data`` is a random subsample
    of those rows and every average is anchored to the full data by control variates (module
    docstring, "Data out of core"): the only full-data quantities used are ``full``'s moments and
    one C̄(Σ) = mean_n J_nΣJ_n at the predicted Σ (one chunked pass).

    Returns a dict with ``cov`` (Σ_SL or None when the iteration runs away), ``reason`` (why not
    local, else None), ``curvature_change``, ``noise_change``, ``mean_shift`` (max_i |m_i|/sd_i of
    the drift's mean shift m = −H_eff⁻¹E[∇L]) and ``points`` (model evaluations).
    """
    e = expansion
    d = e.dim
    gam = e.prior_precision
    sigma0 = stationary.cov
    sd0 = np.sqrt(np.clip(np.diag(sigma0), 1e-300, None))
    H0 = e.hessian
    Hm = np.linalg.inv(_sqrtm_psd(H0 if full is None else full.hessian))
    anchor = None if full is None else _Anchor.of(full, e, sigma0)
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n_pairs, d))
    w, V = np.linalg.eigh(sigma0)
    lead = V[:, ::-1][:, : min(d, 4)] * np.sqrt(np.clip(w[::-1][: min(d, 4)], 0, None)) * 2.0  # ±2 sd axes
    out: dict[str, Any] = {"cov": None, "reason": None, "curvature_change": 0.0, "noise_change": 0.0,
                           "mean_shift": 0.0, "points": 0}
    points = [0]

    def at(theta: np.ndarray) -> Expansion:
        points[0] += 1
        try:
            ei = expansion_at(model, data, gam, theta, population_size=e.population_size)
        except SgtuneError as exc:
            raise _NotLocal(f"the model cannot be evaluated over the predicted spread ({exc})") from None
        if not (np.all(np.isfinite(ei.hessian)) and np.all(np.isfinite(ei.fisher))):
            raise _NotLocal("the model overflows over the predicted spread")
        return ei

    def pair_terms(center: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
        """Mean H, mean Cov_n g, mean ∇L over center ± each row of dirs; largest pointwise changes."""
        Hs, Cs, gs = np.zeros((d, d)), np.zeros((d, d)), np.zeros(d)
        dH = dC = 0.0
        for v in dirs:
            ep, em = at(center + v), at(center - v)
            for ei in (ep, em):
                Hs += ei.hessian
                gs += ei.mean_grad + gam @ ei.theta_hat / e.n_data
                dH = max(dH, float(np.linalg.norm(Hm @ (ei.hessian - H0) @ Hm, 2)))
            cpair = 0.5 * (ep.gradient_cov() + em.gradient_cov())
            Cs += cpair
            clin = _lin_noise(e, np.outer(v, v))
            dC = max(dC, float(np.linalg.norm(cpair - clin) / max(np.linalg.norm(clin), 1e-300)))
        n = 2 * len(dirs)
        if anchor is not None:  # the subsample's averages, moved to the full data's values at θ̂
            return Hs / n + anchor.hessian, 2 * Cs / n, gs / n + anchor.mean_grad, dH, dC
        return Hs / n, 2 * Cs / n, gs / n, dH, dC

    def lin_noise(ec: Expansion, S: np.ndarray) -> np.ndarray:
        return _lin_noise(ec, S) if anchor is None else _lin_noise(ec, S) + anchor.noise(S)

    try:
        *_, dH, dC = pair_terms(e.theta_hat, lead.T)
        out["curvature_change"], out["noise_change"] = dH, dC
        sigma, shift, ec = sigma0, np.zeros(d), e
        for _ in range(max_iter):
            dirs = Z @ _sqrtm_psd(sigma)
            H_eff, C_pts, g_eff, dH, dC = pair_terms(e.theta_hat + shift, dirs)
            out["curvature_change"] = max(out["curvature_change"], dH)
            out["noise_change"] = max(out["noise_change"], dC)
            S_hat = dirs.T @ dirs / len(dirs)
            # control variate: the proxy expanded at the current centre, averaged exactly and over the same draws
            C_eff = lin_noise(ec, sigma) + C_pts - _lin_noise(ec, S_hat)
            H_eff = 0.5 * (H_eff + H_eff.T)
            if not np.linalg.eigvalsh(H_eff)[0] > 0:
                raise _NotLocal("the curvature averaged over the predicted spread is not positive definite")
            new = _solve(e, stationary, H_eff, C_eff)
            if not np.all(np.isfinite(new)) or np.trace(new) > RUNAWAY_FACTOR * np.trace(sigma0):
                raise _NotLocal("the spread feeds back on itself: over the predicted spread the curvature is "
                                "weaker than at θ̂, which widens the spread further")
            change = _entrywise_deviation(new, sigma)
            sigma = new
            if with_shift:  # Newton step on E[∇L(θ̂ + m + d)] = 0, at most half a standard deviation per step
                step = -np.linalg.solve(H_eff, g_eff)
                shift = shift + step / max(1.0, 2.0 * float(np.max(np.abs(step) / np.sqrt(np.diag(sigma)))))
                ec = at(e.theta_hat + shift)
            out["mean_shift"] = float(np.max(np.abs(shift - np.linalg.solve(H_eff, g_eff) * (not with_shift)) / sd0))
            if change < 1e-3:
                break
        out["cov"] = sigma
    except _NotLocal as exc:
        out["reason"] = str(exc)
    out["points"] = points[0]
    return out


@dataclass(frozen=True)
class _Anchor:
    """Control variates that move a subsample's averages to the full data's (module docstring).

    ``hessian`` and ``mean_grad``: full minus subsample at θ̂. ``noise(S)``: the full data's
    linearised gradient noise at θ̂ minus the subsample's, C − C_s + C̄(Σ₀) − C̄_s(Σ₀) − JSJ + J_sSJ_s,
    exact at S = Σ₀ and linear in S (C̄ is linear: C̄(S) = C̄(Σ₀) + C̄(S − Σ₀), whose second term the
    subsample estimates with an error proportional to ‖S − Σ₀‖, the deviation being measured).
    """

    hessian: np.ndarray
    mean_grad: np.ndarray
    constant: np.ndarray
    curvature: np.ndarray
    sub_curvature: np.ndarray

    @classmethod
    def of(cls, full: Expansion, sub: Expansion, sigma0: np.ndarray) -> "_Anchor":
        const = full.gradient_cov() - sub.gradient_cov() + full.mean_jsj(sigma0) - sub.mean_jsj(sigma0)
        return cls(full.hessian - sub.hessian, full.mean_grad - sub.mean_grad, const, full.curvature, sub.curvature)

    def noise(self, S: np.ndarray) -> np.ndarray:
        J, Js = self.curvature, self.sub_curvature
        c = self.constant - J @ S @ J + Js @ S @ Js
        return 0.5 * (c + c.T)


@cites("sgtune", "the subsample size of the out-of-core applicability report (a work budget, no paper equation)")
def subsample_rows(n_data: int, dim: int) -> int:
    """Choose the rows of the random subsample the report evaluates out-of-core data on (all N when N is at most that).

    Parameters
    ----------
    n_data : int
        N.
    dim : int
        D.

    Returns
    -------
    int
        The number of rows.

    Examples
    --------
    >>> from sgtune.theory.applicability import subsample_rows
    >>> subsample_rows(2000, 5)
    2000
    """
    return int(min(n_data, SUBSAMPLE_MAX_ROWS, max(SUBSAMPLE_MIN_ROWS, SUBSAMPLE_WORK // max(dim, 1) ** 2)))


def _chunk_column_squares(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray]:
    """Σ_n x_n² per column over one chunk (the column scales of out-of-core data, one chunked pass)."""
    return ((X * X).sum(axis=0),)


def _column_mean_squares(data: Dataset, expansion: Expansion) -> np.ndarray | None:
    """mean_n x_n² per covariate column: in memory from X, out of core from the expansion's pass (or one pass)."""
    if data.rows is None:
        X = getattr(data, "X", None)
        return np.mean(np.asarray(X, dtype=float) ** 2, axis=0) if X is not None and X.size else None
    red = expansion.reductions
    if red is not None and red.column_mean_squares is not None and red.n_rows == data.n_data:
        return red.column_mean_squares
    return reduce_rows(_chunk_column_squares, data.rows)[0] / data.n_data


def _sl_stats(sl: dict[str, Any], cov: np.ndarray) -> dict[str, float]:
    dev = math.inf if sl["cov"] is None else _entrywise_deviation(sl["cov"], cov)
    return {"predicted_deviation": dev, "curvature_change": sl["curvature_change"],
            "gradient_noise": sl["noise_change"], "mean_shift": sl["mean_shift"]}


def _subsampled_sl(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov, *, n_pairs: int,
                   seed: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Σ_SL for out-of-core data: on a seeded random subsample anchored to the full data; standard errors.

    The M rows (:func:`subsample_rows`) are drawn without replacement and read in sorted order by
    explicit reads (never all of X). The same computation on SUBSAMPLE_GROUPS disjoint random parts
    of the M rows gives each statistic's standard error, sd over parts / √parts (an M/G-row estimate
    varies G times as much as the M-row one). Returns the M-row result and the ``subsample`` object
    (None when M = N: every row was read, nothing is estimated).
    """
    rows = data.rows
    assert rows is not None
    n, m = data.n_data, subsample_rows(data.n_data, expansion.dim)

    def run(X: np.ndarray, y: np.ndarray) -> dict[str, Any]:
        part = Dataset(X, y, data.names, data.source)
        es = expansion_at(model, part, expansion.prior_precision, expansion.theta_hat,
                          population_size=expansion.n_data)
        return statistically_linearised_cov(model, part, es, stationary, n_pairs=n_pairs, seed=seed, full=expansion)

    if n <= m:
        return run(*rows.read(0, n)), None
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    idx = np.sort(rng.choice(n, size=m, replace=False))
    X, y = rows.read_index(idx)
    sl = run(X, y)
    parts = [np.sort(p) for p in np.array_split(rng.permutation(m), SUBSAMPLE_GROUPS)]
    stats = [_sl_stats(run(X[p], y[p]), stationary.cov) for p in parts]
    se = {}
    for key in stats[0]:
        v = np.array([s[key] for s in stats])
        se[key] = float(np.std(v, ddof=1) / math.sqrt(len(v))) if np.all(np.isfinite(v)) else math.inf
    est = _sl_stats(sl, stationary.cov)
    uncertain = []
    local = sum(s["predicted_deviation"] < math.inf for s in stats)
    if local not in (0, len(stats)):
        uncertain.append(f"whether the spread is local: the iteration ran away on {len(stats) - local} of "
                         f"{len(stats)} parts of the subsample")
    for key, thr in (("curvature_change", MAX_CURVATURE_CHANGE), ("predicted_deviation", MAX_DEVIATION)):
        if math.isfinite(est[key]) and abs(est[key] - thr) <= UNCERTAIN_Z * se[key]:
            uncertain.append(f"{key.replace('_', ' ')} {est[key]:.3g} ± {se[key]:.2g} is within {UNCERTAIN_Z:g} "
                             f"standard errors of its threshold {thr:g}")
    sub = {"rows": m, "of": n, "seed": seed, "groups": SUBSAMPLE_GROUPS,
           "standard_error": {k: _num(v) for k, v in se.items()}, "uncertain": uncertain}
    return sl, sub


@cites("sgtune", "applicability of Wang, Ding & Huggins (2026) Eqs. (11)–(12) to the chain on the loss itself "
                 "(module docstring)")
def applicability(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov, *,
                  target_cov: Any = None, backward_error: float | None = None, n_pairs: int = 16,
                  seed: int = 0) -> Applicability:
    """The applicability report of a prediction (``stationary``) for ``model`` on ``data``.

    Parameters
    ----------
    model : PerSampleModel
        The model.
    data : Dataset
        Its data.
    expansion : Expansion
        The expansion at θ̂ (:func:`sgtune.models.expand`).
    stationary : StationaryCov
        The prediction for the chain's Λ (:func:`~sgtune.theory.stationary.predict_stationary_cov`).
    target_cov : (D, D) array_like, optional
        The tuning target, when Λ was tuned (its condition number is reported).
    backward_error : float or None, optional
        The tuning or solve residual (reported).
    n_pairs : int, optional
        Antithetic pairs of draws per fixed-point step (the model is evaluated 2·n_pairs times each).
    seed : int, optional
        Seed of the draws.

    Returns
    -------
    Applicability
        The verdict, its reasons and the measurements behind them.

    See Also
    --------
    statistically_linearised_cov : The second prediction behind ``predicted_deviation``.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.stationary import predict_stationary_cov
    >>> data, model = example("logistic"), get_model("logistic")
    >>> e = expand(model, data)
    >>> st = predict_stationary_cov(e, Dynamics(0.1, batch_size=32))
    >>> from sgtune.theory.applicability import applicability
    >>> report = applicability(model, data, e, st)
    >>> report.applicable, report.reasons  # a logistic model at λ = 0.1 is close to quadratic
    (True, ())
    """
    if data.rows is None:
        sl, sub = statistically_linearised_cov(model, data, expansion, stationary, n_pairs=n_pairs, seed=seed), None
    else:  # out of core: a random subsample anchored to the full data (module docstring); small products
        with blas_single_thread():
            sl, sub = _subsampled_sl(model, data, expansion, stationary, n_pairs=n_pairs, seed=seed)
    reasons: list[str] = []
    dev = math.inf if sl["cov"] is None else _entrywise_deviation(sl["cov"], stationary.cov)
    eq = equilibration_steps(stationary.spectral_radius)
    tau = float(stationary.tau_worst)
    ratio = eq / max(tau, 1.0) if math.isfinite(tau) else math.inf
    cond = {"hessian": _cond(expansion.hessian), "step_matrix": _cond(stationary.step_matrix),
            "backward_error": float(stationary.relative_residual if backward_error is None else backward_error)}
    if target_cov is not None:
        cond["target"] = _cond(np.asarray(target_cov, dtype=float))
    cond = {k: (_num(v) if isinstance(v, float) else v) for k, v in cond.items()}
    ms = _column_mean_squares(data, expansion)
    if ms is not None:
        rms = np.sqrt(ms)
        rms = rms[rms > 0]
        cond["column_scale_ratio"] = float(rms.max() / rms.min()) if rms.size else 1.0
    else:
        cond["column_scale_ratio"] = None
    help_ = ("a larger prior precision (--prior-precision), the posterior target with SGLD (--target posterior "
             "--inverse-temperature N), a smaller target or a larger batch")
    csr = cond["column_scale_ratio"]
    if csr is not None and csr > COLUMN_SCALE_RATIO:
        help_ = f"standardised covariates (their column scales differ by a factor {csr:.3g}), " + help_
    if sl["reason"] is not None:
        reasons.append(f"the predicted spread is not local: {sl['reason']}; what would help: {help_}")
    elif sl["curvature_change"] > MAX_CURVATURE_CHANGE:
        reasons.append(f"the predicted spread is not local: the curvature changes by {sl['curvature_change']:.0%} "
                       f"(> {MAX_CURVATURE_CHANGE:.0%}) between θ̂ and points 2 sd away, so no fixed quadratic "
                       f"describes the chain and chains at this Λ cannot be refined; what would help: {help_}")
    elif dev > MAX_DEVIATION:
        reasons.append(f"the loss is not quadratic over the predicted spread: keeping its curvature and gradient "
                       f"noise there changes the prediction by {dev:.1%} (> {MAX_DEVIATION:.0%}); `sgtune lambda "
                       f"--refine ROUNDS` corrects Λ on short chains, or: {help_}")
    if ratio > MAX_EQUILIBRATION_RATIO:
        reasons.append(f"the second moments need {eq:.3g} steps from θ̂ to come within 1 % of stationarity, "
                       f"{ratio:.3g}× τ_worst: the state-dependent minibatch noise is close to critical, so the "
                       f"chain's covariance is heavy-tailed and slow to estimate; what would help: {help_}")
    return Applicability(applicable=not reasons, reasons=tuple(reasons),
                         curvature_change={"curvature": sl["curvature_change"], "gradient_noise": sl["noise_change"],
                                           "points": sl["points"]},
                         equilibration_steps=eq, tau_worst=tau, conditioning=cond, predicted_deviation=dev,
                         mean_shift=sl["mean_shift"], linearised_cov=sl["cov"], subsample=sub)
