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

The divergence risk (:func:`divergence_risk`).
The step θ ← θ − Λ∇L_b(θ) on a batch b is locally unstable where Λ J_b(θ) has an eigenvalue above
2(1 + κ) (the spectral radius of I − ΛJ_b exceeds 1; κ the momentum). J_b ⪰ J_n/B for each row n of
the batch, so a row with λ_max(ΛJ_n(θ)) > 2(1 + κ)B alone makes the step unstable. Along directions
s of the predicted spread Σ — its leading axes, the direction in which λ_max(ΛH(θ)) grows fastest
(finite differences, D ≤ RISK_GRADIENT_MAX_DIM), the per-sample gradient directions Σg_n of the rows
with the largest ΛJ_n at θ̂, and ``n_random`` random ones, both ways — the curvatures are evaluated
at t = 1, 2, … sd (RISK_SEARCH_SD) and t* is where they reach the limit (log-linear, extrapolated).
Under the predicted Gaussian, θ lies beyond t* along s with probability Φ(−t*). Per step:

    p = Σ_n (B/N) max_s Φ(−t*_n(s))  +  max_s Φ(−t*_H(s)) / τ_min,

the first term for a batch holding a row whose own step is unstable, the second for the mean
curvature H (one independent visit per τ_min steps, the fastest coordinate's autocorrelation time);
risk = 1 − exp(−p·T) for a run of T steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core._refs import cites
from ..core.errors import SgtuneError
from ..core.reasons import CODES, Reason, Remedy
from ..core.results import ResultMixin, SummaryTable
from ..io.data import Dataset
from ..io.reduce import blas_single_thread, reduce_rows
from ..models import Expansion, expansion_at
from .linear_chain import LinearChain
from .noise_models import NOISE_MODELS
from .stationary import StationaryCov, equilibration_steps
from .tuning import reachable_inv_temperature

__all__ = ["Applicability", "applicability", "statistically_linearised_cov", "MAX_DEVIATION",
           "MAX_EQUILIBRATION_RATIO", "COLUMN_SCALE_RATIO", "MAX_CURVATURE_CHANGE", "subsample_rows",
           "REASON_CODES", "divergence_risk", "MAX_DIVERGENCE_RISK", "last_layer_remedy", "checked_remedies",
           "target_name", "BETA_SEARCH_SCALES"]

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


#: a chain whose divergence risk index (:func:`divergence_risk`) over the run length sgtune recommends
#: (``verify``'s default, max(20000, 1000·τ_worst) steps) is above this is flagged (``divergence-risk``).
#: Measured (``benchmarks/divergence_table.py``, 32 chains of 22 000 steps each): on 20 Poisson regressions
#: of 17 rows at β = 2N (posterior target) the index was ≥ 0.67 and 11 of 640 chains diverged (up to 5 of
#: 32 on one data set); on the same data at β = 1.25N, Poisson regressions of 40 rows, near-separable
#: logistic, diabetes and the bundled examples it was ≤ 0.14 and no chain of 416 diverged
MAX_DIVERGENCE_RISK = 0.3
#: … searched along each direction up to this many standard deviations of the predicted spread
RISK_SEARCH_SD = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 12.0)
#: … and an unstable region counts only where the curvature still grows by this factor from 9 to 12 sd (an
#: exponential or polynomial curvature, as a Poisson regression's, runs away; a bounded one, as a logistic
#: regression's, saturates and only makes the chain oscillate)
RUNAWAY_GROWTH = 1.5
#: finite-difference search for the direction in which the step loses stability fastest: up to this dimension
RISK_GRADIENT_MAX_DIM = 60

#: the codes a :class:`Reason` of the report carries, with what each means (:data:`sgtune.core.reasons.CODES`)
REASON_CODES = {code: CODES[code][0] for code in ("not-local", "not-quadratic", "slow-equilibration",
                                                 "divergence-risk", "scale")}


@dataclass(frozen=True, repr=False)
class Applicability(ResultMixin):
    """Result of :func:`applicability` (``to_dict`` is the JSON object ``applicability``).

    Attributes
    ----------
    applicable : bool
        No check failed: the linearised chain describes the chain that runs.
    reasons : tuple of Reason
        One :class:`~sgtune.core.reasons.Reason` per failed check (code, message, computed remedies;
        empty when ``applicable``).
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
    parameter_names : tuple of str or None
        The coordinates of the prediction checked (the prediction's names).
    divergence : dict or None
        The divergence-risk estimate (:func:`divergence_risk`): the index, the run length it is
        combined over and where the step is unstable (None when not estimated).
    notes : tuple of Reason
        Advisory notes that do not change the verdict (e.g. code ``scale``: covariate scales).

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
    reasons: tuple[Reason, ...]
    curvature_change: dict[str, float]
    equilibration_steps: float
    tau_worst: float
    conditioning: dict[str, Any]
    predicted_deviation: float
    mean_shift: float
    linearised_cov: np.ndarray | None = field(default=None, repr=False)
    subsample: dict[str, Any] | None = None
    parameter_names: tuple[str, ...] | None = None
    divergence: dict[str, Any] | None = None
    notes: tuple[Reason, ...] = ()

    @property
    def reason_codes(self) -> tuple[str, ...]:
        """The stable codes of ``reasons`` (branch on these, never on the messages)."""
        return tuple(r.code for r in self.reasons)

    def _repr_items(self) -> list[tuple[str, Any]]:
        return [("applicable", self.applicable), ("reasons", len(self.reasons)),
                ("predicted_deviation", self.predicted_deviation), ("equilibration_steps", self.equilibration_steps),
                ("tau_worst", self.tau_worst)]

    def summary(self) -> SummaryTable:
        """The checks: each measured value, its threshold and whether it passes (the reasons follow as notes)."""
        ratio = self.equilibration_steps / max(self.tau_worst, 1.0) if math.isfinite(self.tau_worst) else math.inf
        csr = self.conditioning.get("column_scale_ratio")
        checks = [("predicted_deviation", self.predicted_deviation, MAX_DEVIATION),
                  ("curvature_change", float(self.curvature_change.get("curvature", math.nan)), MAX_CURVATURE_CHANGE),
                  ("equilibration_ratio", ratio, MAX_EQUILIBRATION_RATIO),
                  ("column_scale_ratio", math.nan if csr is None else float(csr), COLUMN_SCALE_RATIO)]
        rows = tuple((v, lim, None if math.isnan(v) else bool(v <= lim)) for _, v, lim in checks)
        return SummaryTable(
            title=f"Applicability: {'applicable' if self.applicable else 'NOT applicable'}",
            index=tuple(k for k, _, _ in checks), columns=("value", "threshold", "passes"), rows=rows,
            index_name="check", info=(("equilibration steps", self.equilibration_steps),
                                      ("worst autocorrelation time", self.tau_worst)),
            notes=tuple(f"- {r}" for r in self.reasons))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (non-finite numbers as the string ``"inf"``, as elsewhere in sgtune's JSON).

        ``reasons`` are the messages; ``reason_codes`` their codes, ``reason_details`` each reason with its
        remedies, ``notes`` advisory reasons that do not change the verdict (``scale``), ``remedies`` every
        remedy of the reasons (most promising first, duplicates dropped), ``divergence`` the risk estimate.
        """
        ratio = self.equilibration_steps / max(self.tau_worst, 1.0) if math.isfinite(self.tau_worst) else math.inf
        remedies: list[dict[str, Any]] = []
        for r in self.reasons:
            for m in r.remedies:
                if m.to_dict() not in remedies:
                    remedies.append(m.to_dict())
        return {"applicable": self.applicable, "reasons": [r.message for r in self.reasons],
                "reason_codes": list(self.reason_codes), "reason_details": [r.to_dict() for r in self.reasons],
                "notes": [r.to_dict() for r in self.notes], "remedies": remedies,
                "divergence_risk": None if self.divergence is None else _num(self.divergence["risk"]),
                "divergence": self.divergence,
                "curvature_change": self.curvature_change, "equilibration_steps": _num(self.equilibration_steps),
                "equilibration_ratio": _num(ratio),
                "predicted_deviation": _num(self.predicted_deviation), "mean_shift": _num(self.mean_shift),
                "conditioning": self.conditioning, "subsample": self.subsample,
                "parameter_names": None if self.parameter_names is None else list(self.parameter_names),
                "thresholds": {"predicted_deviation": MAX_DEVIATION,
                               "equilibration_ratio": MAX_EQUILIBRATION_RATIO,
                               "curvature_change": MAX_CURVATURE_CHANGE,
                               "column_scale_ratio": COLUMN_SCALE_RATIO,
                               "divergence_risk": MAX_DIVERGENCE_RISK}}


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


class _Pairs:
    """The model's curvature, gradient noise and mean gradient at pairs of points around a centre (the
    expansions of :func:`statistically_linearised_cov`, counted in ``points``)."""

    def __init__(self, model: Any, data: Dataset, e: Expansion, anchor: "_Anchor | None", full: Expansion | None):
        self.model, self.data, self.e, self.anchor, self.points = model, data, e, anchor, 0
        self.H0 = e.hessian
        self.Hm = np.linalg.inv(_sqrtm_psd(e.hessian if full is None else full.hessian))

    def at(self, theta: np.ndarray) -> Expansion:
        self.points += 1
        e = self.e
        try:
            ei = expansion_at(self.model, self.data, e.prior_precision, theta, population_size=e.population_size)
        except SgtuneError as exc:
            raise _NotLocal(f"the model cannot be evaluated over the predicted spread ({exc})") from None
        if not (np.all(np.isfinite(ei.hessian)) and np.all(np.isfinite(ei.fisher))):
            raise _NotLocal("the model overflows over the predicted spread")
        return ei

    def terms(self, center: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
        """Mean H, mean Cov_n g, mean ∇L over center ± each row of dirs; largest pointwise changes."""
        e, d = self.e, self.e.dim
        Hs, Cs, gs = np.zeros((d, d)), np.zeros((d, d)), np.zeros(d)
        dH = dC = 0.0
        for v in dirs:
            ep, em = self.at(center + v), self.at(center - v)
            for ei in (ep, em):
                Hs += ei.hessian
                gs += ei.mean_grad + e.prior_precision @ ei.theta_hat / e.n_data
                dH = max(dH, float(np.linalg.norm(self.Hm @ (ei.hessian - self.H0) @ self.Hm, 2)))
            cpair = 0.5 * (ep.gradient_cov() + em.gradient_cov())
            Cs += cpair
            clin = _lin_noise(e, np.outer(v, v))
            dC = max(dC, float(np.linalg.norm(cpair - clin) / max(np.linalg.norm(clin), 1e-300)))
        n = 2 * len(dirs)
        if self.anchor is not None:  # the subsample's averages, moved to the full data's values at θ̂
            a = self.anchor
            return Hs / n + a.hessian, 2 * Cs / n, gs / n + a.mean_grad, dH, dC
        return Hs / n, 2 * Cs / n, gs / n, dH, dC

    def lin_noise(self, ec: Expansion, S: np.ndarray) -> np.ndarray:
        return _lin_noise(ec, S) if self.anchor is None else _lin_noise(ec, S) + self.anchor.noise(S)


@cites("sgtune", "statistical (equivalent) linearisation of Eq. (11): H_eff = E∇²L, C_eff = E Cov_n ∇l_n "
                 "under N(θ̂, Σ), by Stein's lemma")
def statistically_linearised_cov(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov, *,
                                 n_pairs: int = 16, max_iter: int = 6, seed: int = 0,
                                 with_shift: bool = True, full: Expansion | None = None) -> dict[str, Any]:
    """Σ_SL, the stationary covariance of the statistically linearised chain (module docstring).

    Parameters
    ----------
    model : object
        The model (the protocol of :mod:`sgtune.models.base`).
    data : Dataset
        The rows the model is evaluated on.
    expansion : Expansion
        Their expansion at θ̂.
    stationary : StationaryCov
        The linearised prediction Σ to start from (its dynamics are the chain's).
    n_pairs : int, optional
        Antithetic pairs θ̂ + m ± d, d ~ N(0, Σ), per average.
    max_iter : int, optional
        Fixed-point iterations Σ ← Σ_SL(Σ).
    seed : int, optional
        Seed of the draws d.
    with_shift : bool, optional
        Follow the drift's mean shift m = −H_eff⁻¹E[∇L] (a Newton step per iteration).
    full : Expansion, optional
        The expansion of all N rows (e.g. streamed from disk): then ``data`` is a random subsample of
        them and every average is anchored to the full data by control variates (module docstring,
        "Data out of core").

    Returns
    -------
    dict
        ``cov`` (Σ_SL, or None when the iteration runs away), ``reason`` (why the spread is not local,
        else None), ``curvature_change``, ``noise_change``, ``mean_shift`` (max_i |m_i|/sd_i) and
        ``points`` (model evaluations).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.stationary import predict_stationary_cov
    >>> data, model = example("logistic"), get_model("logistic")
    >>> e = expand(model, data)
    >>> st = predict_stationary_cov(e, Dynamics(0.1, batch_size=32))
    >>> sl = statistically_linearised_cov(model, data, e, st)
    >>> sl["reason"] is None, sl["points"] > 0
    (True, True)
    >>> bool(np.linalg.norm(sl["cov"] - st.cov) < 0.2 * np.linalg.norm(st.cov))  # close to Σ: a local spread
    True
    """
    e = expansion
    d = e.dim
    sigma0 = stationary.cov
    sd0 = np.sqrt(np.clip(np.diag(sigma0), 1e-300, None))
    pairs = _Pairs(model, data, e, None if full is None else _Anchor.of(full, e, sigma0), full)
    Z = np.random.default_rng(seed).standard_normal((n_pairs, d))
    w, V = np.linalg.eigh(sigma0)
    lead = V[:, ::-1][:, : min(d, 4)] * np.sqrt(np.clip(w[::-1][: min(d, 4)], 0, None)) * 2.0  # ±2 sd axes
    out: dict[str, Any] = {"cov": None, "reason": None, "curvature_change": 0.0, "noise_change": 0.0,
                           "mean_shift": 0.0, "points": 0}
    try:
        *_, dH, dC = pairs.terms(e.theta_hat, lead.T)
        out["curvature_change"], out["noise_change"] = dH, dC
        sigma, shift, ec = sigma0, np.zeros(d), e
        for _ in range(max_iter):
            dirs = Z @ _sqrtm_psd(sigma)
            H_eff, C_pts, g_eff, dH, dC = pairs.terms(e.theta_hat + shift, dirs)
            out["curvature_change"] = max(out["curvature_change"], dH)
            out["noise_change"] = max(out["noise_change"], dC)
            S_hat = dirs.T @ dirs / len(dirs)
            # control variate: the proxy expanded at the current centre, averaged exactly and over the same draws
            C_eff = pairs.lin_noise(ec, sigma) + C_pts - _lin_noise(ec, S_hat)
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
                ec = pairs.at(e.theta_hat + shift)
            out["mean_shift"] = float(np.max(np.abs(shift - np.linalg.solve(H_eff, g_eff) * (not with_shift)) / sd0))
            if change < 1e-3:
                break
        out["cov"] = sigma
    except _NotLocal as exc:
        out["reason"] = str(exc)
    out["points"] = pairs.points
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


def _step_limit(momentum: float) -> float:
    """Largest eigenvalue of ΛH(θ) for which the local step is stable: the spectral radius of I − ΛH is < 1
    iff its eigenvalues lie in (0, 2); with heavy-ball momentum κ, in (0, 2(1 + κ))."""
    return 2.0 * (1.0 + momentum)


def _crossing(ts: list[float], fs: list[float], limit: float) -> float:
    """The distance t (in standard deviations) from which on f(t) stays at or above ``limit`` — where an unstable
    step can run away, because the curvature keeps growing outward (a bounded curvature, as a logistic
    regression's, that rises and falls again only makes the chain oscillate): log-linear interpolation
    after the last point below the limit, provided f still grows at the far end (by RUNAWAY_GROWTH between
    the last two points, or overflows); when every point is below, extrapolated from the last two if
    f still grows there, else ``inf``."""
    if fs[-1] >= limit and math.isfinite(fs[-1]) and not fs[-1] >= RUNAWAY_GROWTH * fs[-2]:
        return math.inf  # the curvature saturates or falls again at the far end: bounded, no runaway
    below = [i for i, f in enumerate(fs) if not f >= limit]
    if not below:
        return ts[0]
    i = below[-1]
    if i + 1 < len(fs):
        a, b = math.log(max(fs[i], 1e-300)), math.log(fs[i + 1])
        return ts[i] + (ts[i + 1] - ts[i]) * (math.log(limit) - a) / max(b - a, 1e-300)
    if len(fs) < 2 or not fs[-1] > fs[-2] > 0:
        return math.inf
    slope = (math.log(fs[-1]) - math.log(fs[-2])) / (ts[-1] - ts[-2])
    return ts[-1] + (math.log(limit) - math.log(fs[-1])) / slope if slope > 0 else math.inf


def _crossings(ts: list[float], R: np.ndarray, limit: float) -> np.ndarray:
    """:func:`_crossing` of every column of R (points × rows) at once."""
    t = np.asarray(ts, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        L = np.log(np.maximum(R, 1e-300))
        out = np.full(R.shape[1], np.inf)
        below = ~(R >= limit)
        anyb = below.any(axis=0)
        out[~anyb] = t[0]
        i = R.shape[0] - 1 - np.argmax(below[::-1], axis=0)
        mid = anyb & (i + 1 < R.shape[0])
        j = np.minimum(i + 1, R.shape[0] - 1)
        cols = np.arange(R.shape[1])
        a, b = L[i, cols], L[j, cols]
        interp = t[i] + (t[j] - t[i]) * (math.log(limit) - a) / np.maximum(b - a, 1e-300)
        out[mid] = interp[mid]
        end = anyb & (i + 1 >= R.shape[0])
        if R.shape[0] >= 2:
            slope = (L[-1] - L[-2]) / (t[-1] - t[-2])
            grow = end & (R[-1] > R[-2]) & (R[-2] > 0) & (slope > 0)
            out[grow] = (t[-1] + (math.log(limit) - L[-1]) / slope)[grow]
            sat = (R[-1] >= limit) & np.isfinite(R[-1]) & ~(R[-1] >= RUNAWAY_GROWTH * R[-2])
            out[sat] = np.inf
    return out


def _normal_tail(t: float) -> float:
    return 0.5 * math.erfc(t / math.sqrt(2.0)) if math.isfinite(t) else 0.0


#: per-row curvatures are compared for at most this many numbers N·D³ (dense per-sample Hessians)
RISK_ROW_BUDGET = 10**8


def _row_curvatures(e: Expansion, root_l: np.ndarray) -> np.ndarray | None:
    """λ_max(Λ^{1/2} J_n Λ^{1/2}) of every row n (None when the rows are not in memory or too costly)."""
    if e.design is not None and e.weights is not None:
        u = e.design @ root_l
        return e.weights * np.einsum("ni,ni->n", u, u)
    if e.per_sample_hessians is not None and e.per_sample_hessians.size * e.dim <= RISK_ROW_BUDGET:
        return np.linalg.eigvalsh(root_l @ e.per_sample_hessians @ root_l)[:, -1]
    return None


@cites("sgtune", "divergence risk: Gaussian mass of the predicted spread (Wang, Ding & Huggins 2026, Eq. (11)) where "
                 "the minibatch step I − ΛJ_b(θ) is unstable, over the steps of a run")
def divergence_risk(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov, *,
                    steps: float | None = None, n_random: int = 4, seed: int = 0) -> dict[str, Any]:
    """Risk that a chain of ``steps`` steps reaches a state where its own step is unstable.

    The method is in the module docstring. The Gaussian understates the tails of a chain whose noise grows
    with the curvature: the risk is an index calibrated against chains (MAX_DIVERGENCE_RISK), not a probability.

    Parameters
    ----------
    model, data, expansion, stationary : model, Dataset, Expansion, StationaryCov
        The model, the rows it is evaluated on, their expansion at θ̂ and the prediction (Σ, Λ, B, κ, τ).
    steps : float, optional
        T (default ``sgtune verify``'s run length max(20000, 1000·τ_worst)).
    n_random, seed : int, optional
        The number of random directions (each searched both ways) and their seed.

    Returns
    -------
    dict
        ``risk`` = 1 − exp(−p·T), ``per_step`` p, ``steps`` T, ``threshold_sd`` (min t*),
        ``stable_scale`` (the factor c ≤ 1 by which scaling Λ keeps every row's and the mean's step
        stable out to the distance where the risk would be a quarter of MAX_DIVERGENCE_RISK) and
        ``points`` (model evaluations).

    Examples
    --------
    >>> import sgtune
    >>> from sgtune.core.config import Dynamics
    >>> model, data = sgtune.get_model("logistic"), sgtune.example("logistic")
    >>> e = sgtune.expand(model, data)
    >>> r = divergence_risk(model, data, e, sgtune.predict_stationary_cov(e, Dynamics(0.05, batch_size=32)))
    >>> r["risk"], r["stable_scale"]   # a small step: no state within reach is unstable
    (0.0, 1.0)
    """
    e, d = expansion, expansion.dim
    lam = stationary.step_matrix
    dyn = stationary.dynamics
    limit = _step_limit(dyn.momentum if dyn is not None else 0.0)
    B = int(dyn.batch_size) if dyn is not None else 1
    tau_worst = float(stationary.tau_worst) if math.isfinite(stationary.tau_worst) else 1.0
    T = float(steps) if steps is not None else max(20000.0, 1000.0 * max(tau_worst, 1.0))
    tau_min = max(1.0, float(np.min(stationary.tau))) if np.size(stationary.tau) else 1.0
    root_l, root_s = _sqrtm_psd(lam), _sqrtm_psd(stationary.cov)
    points = [0]

    def curv(theta: np.ndarray) -> tuple[float, np.ndarray | None]:
        points[0] += 1
        try:
            ei = expansion_at(model, data, e.prior_precision, theta, population_size=e.population_size)
        except SgtuneError:
            return math.inf, None
        if not np.all(np.isfinite(ei.hessian)):
            return math.inf, None
        rows = _row_curvatures(ei, root_l)
        return float(np.linalg.eigvalsh(root_l @ ei.hessian @ root_l)[-1]), rows

    f0, rows0 = curv(e.theta_hat)
    w, V = np.linalg.eigh(stationary.cov)
    axes = [V[:, -k - 1] * math.sqrt(max(w[-k - 1], 0.0)) for k in range(min(d, 4))]  # 1 sd along Σ's axes
    if d <= RISK_GRADIENT_MAX_DIM and math.isfinite(f0):
        grad = np.array([curv(e.theta_hat + 0.5 * root_s[:, i])[0] - f0 for i in range(d)])
        if np.linalg.norm(grad) > 0 and np.all(np.isfinite(grad)):
            axes.append(root_s @ (grad / np.linalg.norm(grad)))
    if rows0 is not None and e.grads is not None:
        for n in np.argsort(rows0)[::-1][:4]:
            v = stationary.cov @ e.grads[n]
            if v @ e.grads[n] > 0:
                axes.append(v / math.sqrt(float(v @ e.grads[n])))
    rng = np.random.default_rng(seed)
    for _ in range(n_random):
        z = rng.standard_normal(d)
        axes.append(root_s @ (z / np.linalg.norm(z)))
    n_rows = 0 if rows0 is None else rows0.shape[0]
    row_tail, mean_tail = np.zeros(n_rows), 0.0
    t_min, curves = math.inf, []
    for s in axes:
        both = []
        for sign in (1.0, -1.0):
            ts, fs, rs = [0.0], [f0], [rows0]
            for t in RISK_SEARCH_SD:
                f, r = curv(e.theta_hat + sign * t * s)
                ts.append(t), fs.append(f), rs.append(r)
                if not math.isfinite(f):  # the model overflows: unstable from here on
                    break
            both.append(_crossing(ts, fs, limit))
            curves.append((ts, fs, rs))
            if n_rows and all(r is not None for r in rs):
                tc = _crossings(ts, np.array(rs), limit * B)  # (points, N) -> each row's crossing
                row_tail = np.maximum(row_tail, 0.5 * _erfc(tc / math.sqrt(2.0)))
                t_min = min(t_min, float(tc.min()))
        t_min = min(t_min, *both)
        mean_tail = max(mean_tail, _normal_tail(both[0]) + _normal_tail(both[1]))
    per_step = float(np.sum(row_tail)) * B / max(n_rows, 1) + mean_tail / tau_min
    risk = -math.expm1(-per_step * T)
    return {"risk": risk, "per_step": per_step, "steps": T, "threshold_sd": _num(t_min),
            "stable_scale": _stable_scale(curves, limit, B, T), "points": points[0]}


def _stable_scale(curves: list[Any], limit: float, B: int, T: float) -> float:
    """The factor c ≤ 1 that moves every runaway crossing (the mean's and each row's) out to t_safe sd, where
    Φ(−t_safe)·T is a quarter of MAX_DIVERGENCE_RISK: Λ scaled by c scales each λ_max(ΛJ) by c."""
    t_safe = -_normal_quantile(0.25 * MAX_DIVERGENCE_RISK / max(T, 1.0))
    scale = 1.0
    for ts, fs, rs in curves:
        series = [(list(fs), limit)]
        for f, lim in series:
            if _crossing(ts, f, lim) < t_safe:
                scale = min(scale, 0.9 * lim / _value_at(ts, f, t_safe))
        if all(r is not None for r in rs):
            R = np.array(rs)
            hit = _crossings(ts, R, limit * B) < t_safe
            if hit.any():
                scale = min(scale, 0.9 * limit * B / float(np.max(_values_at(ts, R[:, hit], t_safe))))
    return float(min(scale, 1.0))


def _value_at(ts: list[float], fs: list[float], t: float) -> float:
    """f at distance t: log-linear interpolation of the evaluated points, extrapolated beyond the last two."""
    if not all(math.isfinite(v) for v in fs):
        return math.inf
    lf = np.log(np.maximum(fs, 1e-300))
    if t <= ts[-1]:
        return float(np.exp(np.interp(t, ts, lf)))
    slope = max((lf[-1] - lf[-2]) / (ts[-1] - ts[-2]), 0.0) if len(ts) > 1 else 0.0
    return float(np.exp(lf[-1] + slope * (t - ts[-1])))


def _values_at(ts: list[float], R: np.ndarray, t: float) -> np.ndarray:
    """:func:`_value_at` of every column of R (points × rows) at once (``inf`` for a column that overflowed)."""
    finite = np.all(np.isfinite(R), axis=0)
    L = np.log(np.maximum(np.where(np.isfinite(R), R, 1.0), 1e-300))
    tt = np.asarray(ts, dtype=float)
    if t <= tt[-1]:
        k = int(np.clip(np.searchsorted(tt, t) - 1, 0, len(tt) - 2))
        w = (t - tt[k]) / (tt[k + 1] - tt[k])
        out = np.exp((1 - w) * L[k] + w * L[k + 1])
    else:
        slope = np.maximum((L[-1] - L[-2]) / (tt[-1] - tt[-2]), 0.0)
        out = np.exp(L[-1] + slope * (t - tt[-1]))
    return np.where(finite, out, np.inf)


def _erfc(x: np.ndarray) -> np.ndarray:
    from scipy.special import erfc

    return np.where(np.isfinite(x), erfc(np.where(np.isfinite(x), x, 0.0)), np.where(x > 0, 0.0, 2.0))


def _normal_quantile(p: float) -> float:
    from scipy.special import ndtri

    return float(ndtri(min(max(p, 1e-300), 0.5)))


def _min_inv_temperature(hessian: np.ndarray, target: np.ndarray) -> float:
    """β_min = 1/μ_min(HΣ*): below it the injected noise alone exceeds the target (Eq. (11))."""
    L = np.linalg.cholesky(0.5 * (target + target.T))
    mu = float(np.linalg.eigvalsh(L.T @ hessian @ L)[0])
    return 1.0 / mu if mu > 0 else math.inf


def _smaller_step_remedies(expansion: Expansion, stationary: StationaryCov, target_cov: Any,
                           scale: float) -> list[Remedy]:
    """Remedies that make Λ about ``scale`` times as large (computed values, see :func:`applicability`)."""
    dyn = stationary.dynamics
    lam = stationary.step_matrix
    if target_cov is None:  # a given Λ: scale it (the command line can set a scalar step only)
        if np.allclose(lam, lam[0, 0] * np.eye(lam.shape[0]), rtol=0, atol=1e-15 * abs(lam[0, 0])):
            step = float(f"{scale * lam[0, 0]:.4g}")
            return [Remedy(f"a step size {step:.4g} ({scale:.2g}× the current one), which keeps the local step "
                           "stable over the predicted spread", {"step_size": step}, expect="runs")]
        return []
    bmin = _min_inv_temperature(expansion.hessian, np.asarray(target_cov, dtype=float))
    beta = dyn.inv_temperature if dyn is not None else math.inf
    share = 1.0 - bmin / beta if math.isfinite(beta) else 1.0
    beta_new = reachable_inv_temperature(bmin, gradient_share=scale * share)
    if not math.isfinite(beta_new) or not beta_new > bmin:
        return []
    beta_new = float(f"{beta_new:.6g}")
    out = []
    target = np.asarray(target_cov, dtype=float)
    if np.allclose(target, np.linalg.inv(expansion.hessian) / expansion.n_data, rtol=1e-8, atol=0):
        # the posterior target's spread is H⁻¹/N: a larger prior shrinks it where the data say least
        lam_min = float(np.linalg.eigvalsh(expansion.hessian)[0])
        g = float(np.linalg.eigvalsh(expansion.prior_precision)[-1])
        new = float(f"{g + 3.0 * expansion.n_data * lam_min:.2g}")
        if new > g:
            out.append(Remedy(f"a prior precision {new:.2g}: the posterior's widest direction (curvature "
                              f"{lam_min:.3g}) then has four times the curvature, half the spread",
                              {"prior_precision": new}, expect="runs"))
    return out + [Remedy(f"SGLD at inverse temperature {beta_new:.6g}: the injected noise then supplies "
                   f"{bmin / beta_new:.0%} of the target and the gradient noise the rest, so the tuned Λ is about "
                   f"{scale:.2g}× as large (the target is reachable above β = {bmin:.6g})",
                   {"inv_temperature": beta_new}, expect="runs")]


@cites("sgtune", "which named target (posterior, sandwich; Wang, Ding & Huggins 2026) a tuning target is")
def target_name(expansion: Expansion, target: np.ndarray) -> str | None:
    """The name of a tuning target: ``"posterior"``, ``"sandwich"`` or None (a matrix given by the user).

    ``target`` is named when it equals that target of ``expansion`` to 1e-8 (relative).

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    target : (D, D) ndarray
        The target covariance Λ was tuned to.

    Returns
    -------
    str or None
        The name a remedy's command passes as ``--target``.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.applicability import target_name
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> target_name(e, e.posterior_cov()), target_name(e, 2 * e.posterior_cov())
    ('posterior', None)
    """
    if np.allclose(target, expansion.posterior_cov(), rtol=1e-8, atol=0):
        return "posterior"
    try:
        return "sandwich" if np.allclose(target, expansion.sandwich_cov(), rtol=1e-8, atol=0) else None
    except (SgtuneError, np.linalg.LinAlgError):  # a network's J need not be invertible
        return None


def _features_from(model: Any) -> str | None:
    """How the command line names the network whose last layer is offered: ``"mlp"`` for sgtune's own network with
    hidden layers, the model file ``path.py:NAME`` of a user's model offering its features; None otherwise."""
    from ..models.lastlayer import declared_head
    from ..models.mlp import MLP
    from ..models.user import is_model_file_spec

    if isinstance(model, MLP):
        return "mlp" if model.hidden_sizes and model.last_layer_likelihood is not None else None
    spec = getattr(model, "source", None)
    if not (isinstance(spec, str) and is_model_file_spec(spec)):
        return None
    try:
        lik, _ = declared_head(model)
    except SgtuneError:
        return None
    return spec if lik is not None else None


@cites("sgtune", "the output layer on frozen features is a GLM (sgtune.models.lastlayer), checked by this report")
def last_layer_remedy(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov,
                      target_cov: Any) -> Remedy | None:
    """The network's output layer at θ̂ with the body frozen, as a remedy — checked here, not hoped for.

    For a network model that offers its last layer — sgtune's own :class:`~sgtune.models.mlp.MLP` (gaussian or
    bernoulli likelihood), or a user's model loaded from ``path.py:NAME`` (:class:`~sgtune.models.user.UserModel`)
    with ``features(theta, X)`` and ``last_layer_likelihood`` (:func:`~sgtune.models.lastlayer.declared_head`) —
    whose Λ was tuned to the posterior or sandwich target with an isotropic prior, the head at θ̂
    (:func:`~sgtune.models.lastlayer.model_last_layer`) is a linear, logistic or softmax model: this tunes Λ for
    it with the same batch, β, momentum and target and runs its applicability report, so ``expect`` is
    ``"applicable"`` only when that report is. None when the remedy does not apply (another model, a model
    without a file to name, a given Λ or target matrix, a prior matrix, data out of core or subsampled, a target
    the head cannot reach at this β).

    Parameters
    ----------
    model : PerSampleModel
        The model whose report found reasons.
    data : Dataset
        Its data.
    expansion : Expansion
        The network's expansion at θ̂.
    stationary : StationaryCov
        The prediction for the tuned Λ (its dynamics give B, β, momentum and batching).
    target_cov : (D, D) array_like or None
        The tuning target (None: Λ was given, not tuned).

    Returns
    -------
    Remedy or None
        Changes ``{"model": "last-layer", "features_from": "mlp", "target": …, "blocks": None}``; for a user's
        model ``features_from`` is its ``path.py:NAME``, ``likelihood`` its head's and ``noise_variance`` None
        (the head's σ² is the one the model declares, or 1: a σ² typed for the whole model is dropped).

    Examples
    --------
    >>> import numpy as np
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.tuning import tune
    >>> from sgtune.theory.applicability import last_layer_remedy
    >>> data, model = example("logistic"), get_model("logistic")
    >>> e = expand(model, data)
    >>> res = tune(e, Dynamics(None, 32), target="posterior")
    >>> last_layer_remedy(model, data, e, res.stationary, res.target_cov) is None  # a GLM: no network
    True
    """
    from ..models import expand
    from ..models.lastlayer import model_last_layer
    from .tuning import tune

    spec = _features_from(model)
    if target_cov is None or spec is None or data.rows is not None or expansion.n_samples != expansion.n_data:
        return None
    gam = np.asarray(expansion.prior_precision, dtype=float)
    g = float(gam[0, 0])
    if not np.array_equal(gam, g * np.eye(gam.shape[0])):
        return None
    name = target_name(expansion, np.asarray(target_cov, dtype=float))
    if name is None:
        return None
    try:
        head, hdata = model_last_layer(model, expansion.theta_hat, data.X, data.y)
        e = expand(head, hdata, g)
        res = tune(e, stationary.dynamics.replace(step=None), target=name)
        rep = applicability(head, hdata, e, res.stationary, target_cov=res.target_cov, check_remedies=False)
    except (SgtuneError, np.linalg.LinAlgError):
        return None
    verdict = ("its own applicability report is applicable" if rep.applicable else
               f"its own applicability report is not ({', '.join(rep.reason_codes)}): follow its remedies")
    changes: dict[str, Any] = {"model": "last-layer", "features_from": spec}
    if spec != "mlp":  # the head's likelihood as the model declares it; its σ² is the model's (or 1), never typed
        changes.update(likelihood=head.likelihood, noise_variance=None)
    return Remedy(f"the network's last layer: SGD/SGLD on the output layer's {e.dim} weights and bias with the "
                  "body frozen at the fitted weights θ̂ (features φ(x; θ̂) of the same fit), same target, batch "
                  f"and β — a {head.inner.name} model, for which {verdict}",
                  {**changes, "target": name, "blocks": None}, expect="applicable" if rep.applicable else "runs")


#: the inverse-temperature search of :func:`checked_remedies`: Λ about this fraction of the tuned one at each probe
#: (the log grid, largest first; the first that passes is offered), so at most len(...) checks per report
BETA_SEARCH_SCALES = (0.5, 0.25, 0.125, 0.0625)


def _beta_for_scale(expansion: Expansion, stationary: StationaryCov, target: np.ndarray, scale: float) -> float | None:
    """The inverse temperature at which the Λ tuned to ``target`` is about ``scale`` times as large (None: none)."""
    bmin = _min_inv_temperature(expansion.hessian, target)
    dyn = stationary.dynamics
    beta = dyn.inv_temperature if dyn is not None else math.inf
    share = 1.0 - bmin / beta if math.isfinite(beta) else 1.0
    beta_new = reachable_inv_temperature(bmin, gradient_share=scale * share)
    if not math.isfinite(beta_new) or not beta_new > bmin:
        return None
    return float(f"{beta_new:.6g}")


def _probe(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov, target: np.ndarray,
           beta: float, seed: int) -> bool:
    """Is the report applicable for Λ tuned to ``target`` at inverse temperature ``beta`` (no remedies of its own)?"""
    from .tuning import tune

    try:
        res = tune(expansion, stationary.dynamics.replace(step=None, inv_temperature=beta), target=target)
        rep = applicability(model, data, expansion, res.stationary, target_cov=res.target_cov, seed=seed,
                            check_remedies=False)
    except (SgtuneError, np.linalg.LinAlgError):
        return False
    return rep.applicable


def _is_temperature(r: Remedy) -> bool:
    return r.command is None and set(r.changes) == {"inv_temperature"}


def _is_prior(r: Remedy) -> bool:
    return r.command is None and set(r.changes) == {"prior_precision"}


@cites("sgtune", "remedies checked by the applicability report before they are offered")
def checked_remedies(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov, target_cov: Any,
                     reasons: list[Reason], *, seed: int = 0,
                     network_remedies: tuple[Callable[..., Remedy | None], ...] = ()) -> list[Reason]:
    """The reasons with remedies that were checked where sgtune can check them cheaply.

    Order and rules: (1) for a network, the models the theory is exact for come first — its last layer
    (:func:`last_layer_remedy`, checked by its own report), then each of ``network_remedies`` (the command line
    passes the Kronecker family there, checked by its matrix-free report) — and when one of them is applicable the ladder
    remedies (inverse temperature, prior) are not offered: they would lead to remedies of the same kind;
    (2) otherwise the inverse temperature is searched, not guessed: Λ tuned at the inverse temperatures that
    make it about each of :data:`BETA_SEARCH_SCALES` times as large, largest first, each probe this report
    without remedies (the expansion is the same: no refit); the first that passes is offered with ``expect``
    ``"applicable"``, and when none passes the reason says so and no temperature is offered (following one
    would only print another); (3) a prior precision (posterior target) changes θ̂: for a model with a Newton
    fit (convex: GLMs, softmax regression) the computed one, 4× and 16× it are refitted and checked the same
    way, the first that passes offered; for another model it is not checked, and it is offered as a
    suggestion (``expect`` ``"runs"``) only when no search was run. Remedies of another kind (refinement, a
    larger batch) are kept as they are.

    Parameters
    ----------
    model : PerSampleModel
        The model of the report.
    data : Dataset
        Its data.
    expansion : Expansion
        The expansion at θ̂.
    stationary : StationaryCov
        The prediction for the tuned Λ (its dynamics give B, β, momentum and batching).
    target_cov : (D, D) array_like or None
        The tuning target (None: Λ was given, not tuned; no inverse temperature is searched).
    reasons : list of Reason
        The report's reasons with their computed remedies.
    seed : int, optional
        Seed of the probes' reports.
    network_remedies : tuple of callable, optional
        Further remedies for a network, each called as ``f(model, data, expansion, stationary, target_cov)`` and
        returning a checked :class:`~sgtune.core.reasons.Remedy` (``expect`` ``"applicable"`` only when its own
        check passed) or None; offered after the last layer.

    Returns
    -------
    list of Reason
        The same reasons with the remedies as described.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.tuning import tune
    >>> data, model = example("logistic"), get_model("logistic")
    >>> e = expand(model, data)
    >>> res = tune(e, Dynamics(None, 32), target="posterior")
    >>> checked_remedies(model, data, e, res.stationary, res.target_cov, [])  # nothing to remedy
    []
    """
    if not reasons:
        return reasons
    network: list[Remedy] = []
    head = last_layer_remedy(model, data, expansion, stationary, target_cov)
    if head is not None:
        network.append(head)
    for offer in network_remedies:
        extra = offer(model, data, expansion, stationary, target_cov)
        if extra is not None:
            network.append(extra)
    if any(r.expect == "applicable" for r in network):
        return [Reason(r.code, r.message, (*network, *(m for m in r.remedies if not (_is_temperature(m)
                                                                                      or _is_prior(m)))))
                for r in reasons]
    searched, none_found = _searched_temperature(model, data, expansion, stationary, target_cov, reasons, seed)
    prior: Remedy | None = None
    priors = [float(m.changes["prior_precision"]) for r in reasons for m in r.remedies if _is_prior(m)]
    if searched is None and priors and data.rows is None and getattr(model, "fit_method", "lbfgs") == "newton":
        prior, tried_g = _searched_prior(model, data, expansion, stationary, priors[0], seed)
        if prior is None and tried_g:
            none_found += (f"; nor a prior precision from {min(tried_g):.2g} to {max(tried_g):.2g} (each refitted and "
                           "checked)")
    elif searched is None and priors and none_found:
        none_found += ("; a larger prior precision was not checked (it needs a refit of this non-convex model) and "
                       "is not offered")
    out = []
    for r in reasons:
        rest = [m for m in r.remedies if not _is_temperature(m)]
        if searched is not None or prior is not None or none_found:
            rest = [m for m in rest if not _is_prior(m)]
        had = any(_is_temperature(m) or _is_prior(m) for m in r.remedies)
        found = [x for x in (searched, prior) if x is not None] if had else []
        rem = (*network, *found, *rest)
        out.append(Reason(r.code, r.message + (none_found if had else ""), tuple(rem)))
    return out


def _searched_temperature(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov,
                          target_cov: Any, reasons: list[Reason], seed: int) -> tuple[Remedy | None, str]:
    """The inverse-temperature search of :func:`checked_remedies`: the first inverse temperature of the grid
    (Λ about each of :data:`BETA_SEARCH_SCALES` times as large, then the computed one) whose report passes, and
    the words to add to the reason when none does (empty when the search did not run or found one)."""
    searched: Remedy | None = None
    none_found = ""
    if target_cov is None or data.rows is not None or not any(_is_temperature(m) for r in reasons
                                                              for m in r.remedies):
        return searched, none_found
    target = np.asarray(target_cov, dtype=float)
    tried: list[float] = []
    grid = [(f"Λ about {c:g}× as large", _beta_for_scale(expansion, stationary, target, c))
            for c in BETA_SEARCH_SCALES]
    # the computed one last (e.g. the divergence estimate's scale, when it is below the grid)
    grid += [("the computed one", float(m.changes["inv_temperature"])) for r in reasons for m in r.remedies
             if _is_temperature(m)]
    for label, beta in grid:
        if beta is None or beta in tried:
            continue
        tried.append(beta)
        if _probe(model, data, expansion, stationary, target, beta, seed):
            searched = Remedy(f"SGLD at inverse temperature {beta:.6g}, found by running the applicability check "
                              f"at {len(tried)} inverse temperature(s) ({label}): its report is applicable",
                              {"inv_temperature": beta}, expect="applicable")
            break
    if searched is None and tried:
        none_found = (f"; no inverse temperature from {min(tried):.6g} to {max(tried):.6g} (Λ down to "
                      f"{BETA_SEARCH_SCALES[-1]:g}× as large, and the one computed for this reason) makes the "
                      "applicability check pass")
    return searched, none_found


def _searched_prior(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov, g0: float,
                    seed: int) -> tuple[Remedy | None, list[float]]:
    """A prior precision for the posterior target, checked: the computed one, then 4× and 16× it, each refitted
    (a convex model's Newton fit), tuned and reported without remedies; the first that passes, and those tried."""
    from ..models import expand
    from .tuning import tune

    tried: list[float] = []
    for g in (g0, 4.0 * g0, 16.0 * g0):
        g = float(f"{g:.2g}")
        tried.append(g)
        try:
            e = expand(model, data, g, population_size=expansion.population_size)
            res = tune(e, stationary.dynamics.replace(step=None), target="posterior")
            rep = applicability(model, data, e, res.stationary, target_cov=res.target_cov, seed=seed,
                                check_remedies=False)
        except (SgtuneError, np.linalg.LinAlgError):
            continue
        if rep.applicable:
            return Remedy(f"a prior precision {g:.2g} with the posterior target, found by refitting and running the "
                          f"applicability check at {len(tried)} prior precision(s): its report is applicable",
                          {"prior_precision": g}, expect="applicable"), tried
    return None, tried


def _reasons(sl: dict[str, Any], dev: float, eq: float, ratio: float, risk: dict[str, Any] | None,
             expansion: Expansion, stationary: StationaryCov, target_cov: Any) -> list[Reason]:
    """The reasons (with computed remedies) of a report whose measurements are given."""
    tuned = target_cov is not None
    scale = 0.5 if risk is None else min(0.5, float(risk["stable_scale"]))
    spread = _smaller_step_remedies(expansion, stationary, target_cov, scale)
    B, n = stationary.dynamics.batch_size, expansion.n_data
    out: list[Reason] = []
    if sl["reason"] is not None:
        out.append(Reason("not-local", f"the predicted spread is not local: {sl['reason']}", tuple(spread)))
    elif sl["curvature_change"] > MAX_CURVATURE_CHANGE:
        out.append(Reason("not-local", f"the predicted spread is not local: the curvature changes by "
                          f"{sl['curvature_change']:.0%} (> {MAX_CURVATURE_CHANGE:.0%}) between θ̂ and points 2 sd "
                          "away, so no fixed quadratic describes the chain and chains at this Λ cannot be refined",
                          tuple(spread)))
    elif dev > MAX_DEVIATION:
        refine = [Remedy("correct Λ on short chains of the loss itself until their covariance matches the target",
                         {"refine_rounds": 3}, expect="runs")] if tuned else []
        out.append(Reason("not-quadratic", f"the loss is not quadratic over the predicted spread: keeping its "
                          f"curvature and gradient noise there changes the prediction by {dev:.1%} "
                          f"(> {MAX_DEVIATION:.0%})", tuple(refine + spread)))
    if ratio > MAX_EQUILIBRATION_RATIO:
        batch = [Remedy(f"a batch of {min(n, 4 * B)} (the state-dependent minibatch noise falls as 1/B)",
                        {"batch_size": min(n, 4 * B)}, expect="runs")] if B < n else []
        out.append(Reason("slow-equilibration", f"the second moments need {eq:.3g} steps from θ̂ to come within 1 % "
                          f"of stationarity, {ratio:.3g}× τ_worst: the state-dependent minibatch noise is close to "
                          "critical, so the chain's covariance is heavy-tailed and slow to estimate",
                          tuple(batch + spread)))
    if risk is not None and risk["risk"] > MAX_DIVERGENCE_RISK:
        out.append(Reason("divergence-risk", f"chains of {risk['steps']:.0f} steps are likely to diverge (risk index "
                          f"{risk['risk']:.2g} > {MAX_DIVERGENCE_RISK:g}): the minibatch step becomes unstable (ΛJ_b(θ) "
                          f"has an eigenvalue above {_step_limit(stationary.dynamics.momentum):g}) "
                          f"{float(risk['threshold_sd']):.2g} sd from θ̂ along the predicted spread, about "
                          f"{risk['per_step']:.2g} of the steps", tuple(spread)))
    return out


@cites("sgtune", "applicability of Wang, Ding & Huggins (2026) Eqs. (11)–(12) to the chain on the loss itself "
                 "(module docstring)")
def applicability(model: Any, data: Dataset, expansion: Expansion, stationary: StationaryCov, *,
                  target_cov: Any = None, backward_error: float | None = None, n_pairs: int = 16,
                  seed: int = 0, divergence: bool = True, check_remedies: bool = True,
                  network_remedies: tuple[Callable[..., Any], ...] = ()) -> Applicability:
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
    divergence : bool, optional
        Estimate the divergence risk (:func:`divergence_risk`; in memory only).
    check_remedies : bool, optional
        Run the check on the remedies before they are offered (:func:`checked_remedies`: the network's last
        layer and ``network_remedies`` first; otherwise the inverse temperature searched on a log grid, each probe
        this report without its own remedies). False: computed but not checked (``expect`` ``"runs"``).
    network_remedies : tuple of callable, optional
        Further checked remedies for a network (:func:`checked_remedies`).

    Returns
    -------
    Applicability
        The verdict, its reasons and the measurements behind them.

    See Also
    --------
    statistically_linearised_cov : The second prediction behind ``predicted_deviation``.

    Notes
    -----
    Each reason is a :class:`~sgtune.core.reasons.Reason` with a stable code (:data:`REASON_CODES`) and
    computed remedies in the Python API's parameter names: for a tuned Λ (``target_cov`` given) the
    inverse temperature at which the tuned Λ is about half as large (or small enough to keep the local
    step stable over the spread, from the divergence estimate), ``refine_rounds`` when the loss is only
    not quadratic, a four times larger ``batch_size`` when the noise is near critical; for a given
    scalar step, the step that keeps the local step stable.

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
    rms = None if ms is None else np.sqrt(ms)[ms > 0]
    cond["column_scale_ratio"] = None if rms is None else (float(rms.max() / rms.min()) if rms.size else 1.0)
    risk = None
    if divergence and data.rows is None and sl["reason"] is None:
        risk = divergence_risk(model, data, expansion, stationary, seed=seed)
    reasons = _reasons(sl, dev, eq, ratio, risk, expansion, stationary, target_cov)
    if reasons and check_remedies:
        reasons = checked_remedies(model, data, expansion, stationary, target_cov, reasons, seed=seed,
                                   network_remedies=network_remedies)
    csr = cond["column_scale_ratio"]
    notes = (Reason("scale", f"the covariates' column scales (RMS) differ by a factor {csr:.3g} (> "
                    f"{COLUMN_SCALE_RATIO:.0e}): standardise them (subtract the mean, divide by the standard "
                    "deviation) for a better-conditioned fit"),) if csr is not None and csr > COLUMN_SCALE_RATIO else ()
    return Applicability(applicable=not reasons, reasons=tuple(reasons),
                         curvature_change={"curvature": sl["curvature_change"], "gradient_noise": sl["noise_change"],
                                           "points": sl["points"]},
                         equilibration_steps=eq, tau_worst=tau, conditioning=cond, predicted_deviation=dev,
                         mean_shift=sl["mean_shift"], linearised_cov=sl["cov"], subsample=sub,
                         divergence=risk, notes=notes, parameter_names=stationary.parameter_names)
