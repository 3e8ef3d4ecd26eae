"""SMILE samplers (the SMILE paper, anonymous, 2025) in numba: building blocks and a standalone ensemble driver.

Building blocks (small top-level ``@njit`` functions, so that the composed sampler core can
later use them as "update step" functions):

- :func:`momentum_map` — the microcanonical momentum map of time ε (appendix F.2): with
  g' = g/p (p the preconditioner, 1 without), e = g'/|g'|, δ = ε|g'|/(d − 1), uₑ = u·e,
  u ← (u + (sinh δ + uₑ(cosh δ − 1))e)/(cosh δ + uₑ sinh δ), evaluated after multiplying
  numerator and denominator by 2e^{−δ} (no overflow for large δ). It is the exact flow of
  du/dt = (I − uuᵀ)g'/(d − 1) for any u: it keeps |u| = 1 (a unit u is divided by the norm
  of the numerator, which equals the denominator exactly, so |u| = 1 holds to rounding over
  millions of steps, as in BlackJAX), and from the zeroed momentum of a rejected step it
  gives u = tanh(δ) e (the chain restarts from rest). Returns the kinetic-energy change
  (d − 1) log(cosh δ + uₑ sinh δ).
  **Sign:** e points along +∇log p (the momentum turns towards higher density). Appendix
  F.2 and eq. (2) write e = −∇log p/|∇log p|, which is the original MCHMC convention
  e = −∇U/|∇U| with U = −log p written with the wrong gradient; with e = −∇log p the
  energy is not conserved (the slope test in ``tests/test_smile_integrator.py`` checks it).
- :func:`position_map` — θ ← θ + ε u/p.
- :func:`mn_step` — one minimal-norm (Omelyan) P-Q-P-Q-P step with b₁ = 0.1931833275037836,
  a₁ = ½, b₂ = 1 − 2b₁, three gradient evaluations on the step's "batch", and the energy
  error ΔE = ΣΔK − (log p(θ₁) − log p(θ₀)) (eq. 2 up to its overall sign; only |ΔE| is used).
- :func:`precond_update` — pSMILE: EMAs (α = 0.01, bias-corrected) of the minibatch gradient
  mean ḡ and of σ² = EMA((g − ḡ)²); preconditioner p = √d σ/|σ| (θ' = p ⊙ θ, section 3.2),
  frozen at 1 for the first ``precond_start`` steps.
- :func:`tuner_update` — Algorithm 1: Gamma fit (k = μ²/s², θ = s²/μ) of the bias-corrected
  EMAs (β = 0.01) of |ΔE| *before* this step's update, Wilson–Hilferty quantiles, guardrail
  |ΔE| > Q(κ = 0.98) → reject (θ restored, momentum zeroed: the next momentum map then sets
  u = e), step ×(1 + δ) below Q(a/3), ×(1 − δ) above Q(1 − 2a/3) (δ = 0.02, a = 0.1); active
  after ``tune_start`` steps. A non-finite ΔE is always rejected (and not fed to the EMAs). The paper's
  rule as printed (``SmileOptions(tuner="paper")``): its log ε drifts down at every step size.
- :func:`anchored_update` — the default step rule of ``smile``/``psmile``: the same EMAs and guardrail, and
  log ε ← log ε + (γ_n/6)(1 − min(ΔE²/(d v*), ξ_max)) toward the energy-error variance per dimension
  v* = 5·10⁻⁵ (a tenth of MCLMC's target), a stable fixed point, with a gain γ_n = γ/√(1 + n/1000) that diminishes
  over the n tuned steps (derivation and measurements in its docstring).
  **Its guardrail** (eq. 6, ``SmileOptions.guardrail_floor`` = k: reject only if also |ΔE| > k √(d v*), k = 0 as
  printed and the default, k = inf off). The threshold is a quantile of the chain's own fitted |ΔE|, so it rejects
  ≈ 1 − κ = 2 % of the steps at any ε, and a rejection restarts the velocity from rest along +∇log p. Rejected
  steps feed the EMAs and ξ like any other, so the rule's fixed point and stability do not depend on k; where the
  chain goes does. Measured across Table 1 (``benchmarks/smile_guardrail.py``, 10⁵ steps, same seeds): off, the
  Gaussian and funnel cells with spatially varying noise improve by z < −2 (funnel/spatial smile b² 151 → 1.6,
  pSMILE 7.1 → 0.19: the relative guardrail confines the chains to the low-noise region near their start) and no
  cell is worse by z > 2, but three are worse by more than one combined sd (Rosenbrock/spatial smile 0.18 → 0.74,
  ε 10× smaller; losses of that kind recur on a second seed); k = 3 changes little, except that funnel chains fall into the neck
  somewhat more often. Neither is no worse everywhere, so the default stays k = 0.
- :func:`noise_update`, :func:`noise_keep`, :func:`noise_work_var` — the anchored rule's optional noise term
  (``SmileOptions(noise_weight=…)``, off by default): the gradient noise from successive gradients at one point
  (two batches at the same θ), and the work per step and dimension of its anisotropic part, which the rule then
  also holds at v*.
- :func:`sgld_step`, :func:`sghmc_step` — the baselines: SGLD θ ← θ + h g + √(2h) η;
  vanilla SGHMC (Chen et al. 2014, no noise estimate B̂) v ← v + h(g − γv) + √(2γh) η,
  θ ← θ + h v (unit mass, friction γ = 1 by default).

:data:`METHOD_IDS` names the samplers and ``check_tuner_settings`` validates Algorithm 1's settings. The
ensembles that run them on the analytic targets (:func:`sgtune.sampler.smile_ensemble.run_smile_ensemble`,
:func:`sgtune.sampler.smile_ensemble.grid_search_b2`) live in :mod:`sgtune.sampler.smile_ensemble`, above
:mod:`sgtune.sampler.smile_chain` (which composes this module's primitives).
"""
from __future__ import annotations

import math

from ..core._validation import check_int, check_positive
from ..core.errors import SgtuneError
from ._jit import njit
from .kernels import sghmc_step  # noqa: F401  (one of this module's names: the SGHMC baseline)
from .rng import fill_normals
from .targets import noisy_logp_grad

__all__ = ["METHOD_IDS", "MN_B1", "MN_A1", "MN_B2", "momentum_map", "position_map", "mn_step", "precond_update", "tuner_update",
           "sgld_step", "sghmc_step", "random_unit_vector", "anchored_update", "noise_update",
           "noise_keep", "noise_work_var", "noise_anisotropy", "noise_length", "noise_ratio", "noise_excess", "path_update", "path_length", "partial_refresh", "REFRESH_MIN_PATH"]

SMILE_NAIVE, PSMILE_NAIVE, SMILE, PSMILE, SGLD, SGHMC = 0, 1, 2, 3, 4, 5
METHOD_IDS: dict[str, int] = {"smile-naive": SMILE_NAIVE, "psmile-naive": PSMILE_NAIVE, "smile": SMILE,
                              "psmile": PSMILE, "sgld": SGLD, "sghmc": SGHMC}
MN_B1 = 0.1931833275037836
MN_A1 = 0.5
MN_B2 = 1.0 - 2.0 * MN_B1


@njit
def momentum_map(u, g, ipre, eps, ndim):  # type: ignore[no-untyped-def]
    """Microcanonical momentum map of time ``eps`` with gradient g' = g ⊙ ipre (in place); returns ΔK.

    ``ipre`` is the inverse preconditioner 1/p (ones without preconditioning).
    """
    d = u.shape[0]
    gn2 = 0.0
    r2 = 0.0
    ug = 0.0
    for i in range(d):
        gp = g[i] * ipre[i]
        gn2 += gp * gp
        r2 += u[i] * u[i]
        ug += u[i] * gp
    if gn2 == 0.0:
        return 0.0
    gn = math.sqrt(gn2)
    ign = 1.0 / gn
    ue = ug * ign
    delta = eps * gn / (ndim - 1)
    z = math.exp(-delta)
    z2 = z * z
    c_e = ((1.0 - z2) + ue * (1.0 - z) * (1.0 - z)) * ign  # 2e^{−δ}(sinh δ + uₑ(cosh δ − 1)) / |g'|
    den = (1.0 + ue) + z2 * (1.0 - ue)                     # 2e^{−δ}(cosh δ + uₑ sinh δ)
    c_u = 2.0 * z
    nrm2 = 0.0
    for i in range(d):
        u[i] = c_u * u[i] + c_e * (g[i] * ipre[i])
        nrm2 += u[i] * u[i]
    scale = den
    if abs(r2 - 1.0) < 1e-6:
        scale = math.sqrt(nrm2)  # unit u: |numerator| = den exactly; dividing by it keeps |u| = 1 to rounding
    inv = 1.0 / scale
    for i in range(d):
        u[i] *= inv
    # log(cosh δ + uₑ sinh δ) = δ − log 2 + log((1 + uₑ) + e^{−2δ}(1 − uₑ))
    return (ndim - 1) * (delta - math.log(2.0) + math.log(den))


@njit
def random_unit_vector(st, u):  # type: ignore[no-untyped-def]
    """u ← a uniform draw on the unit sphere: len(u) normals from stream ``st``, normalised."""
    fill_normals(st, u)
    nrm = 0.0
    for i in range(u.shape[0]):
        nrm += u[i] * u[i]
    nrm = math.sqrt(nrm)
    for i in range(u.shape[0]):
        u[i] /= nrm


@njit
def position_map(theta, u, ipre, eps):  # type: ignore[no-untyped-def]
    """θ ← θ + ε u ⊙ ipre (the Q map in the preconditioned coordinates θ' = p ⊙ θ, ipre = 1/p)."""
    for i in range(theta.shape[0]):
        theta[i] += eps * u[i] * ipre[i]


@njit
def mn_step(target_id, prec, q, spatial_sd, w, theta, u, ipre, dt, grad, lp0):  # type: ignore[no-untyped-def]
    """One minimal-norm P-Q-P-Q-P step of size ``dt`` from θ with ``grad`` = ∇log p_ξ(θ), ``lp0`` = log p_ξ(θ).

    Updates θ, u and ``grad`` (= the gradient at the new θ) in place and returns ΔE.
    """
    d = theta.shape[0]
    dk = momentum_map(u, grad, ipre, MN_B1 * dt, d)
    position_map(theta, u, ipre, MN_A1 * dt)
    noisy_logp_grad(target_id, prec, q, spatial_sd, w, theta, grad)
    dk += momentum_map(u, grad, ipre, MN_B2 * dt, d)
    position_map(theta, u, ipre, MN_A1 * dt)
    lp1 = noisy_logp_grad(target_id, prec, q, spatial_sd, w, theta, grad)
    dk += momentum_map(u, grad, ipre, MN_B1 * dt, d)
    return dk - (lp1 - lp0)


@njit
def precond_update(gbar, gvar, count, g, alpha, ipre, pre_start):  # type: ignore[no-untyped-def]
    """pSMILE EMAs of the gradient mean and variance (bias-corrected); sets ipre = 1/p, p = √d σ/|σ|; returns count + 1."""
    d = g.shape[0]
    n1 = count + 1
    corr = 1.0 - (1.0 - alpha) ** n1
    for i in range(d):
        gbar[i] = (1.0 - alpha) * gbar[i] + alpha * g[i]
        dev = g[i] - gbar[i] / corr
        gvar[i] = (1.0 - alpha) * gvar[i] + alpha * dev * dev
    if n1 >= pre_start:
        nrm2 = 0.0
        ok = True
        for i in range(d):
            nrm2 += gvar[i] / corr
            if not gvar[i] > 0.0:
                ok = False
        if ok and nrm2 > 0.0 and math.isfinite(nrm2):
            s = math.sqrt(nrm2 / d)
            for i in range(d):
                ipre[i] = s / math.sqrt(gvar[i] / corr)
    return n1


@njit
def _wh(z, k, scale):  # type: ignore[no-untyped-def]
    base = 1.0 - 1.0 / (9.0 * k) + z / (3.0 * math.sqrt(k))
    if base < 0.0:
        base = 0.0
    return k * scale * base * base * base


@njit
def _gamma_fit(tune, beta, tune_start):  # type: ignore[no-untyped-def]
    """Eq. (5), moment-matched: the Gamma's shape k = μ²/s² and scale θ = s²/μ from the bias-corrected EMAs
    before this step, and whether there is a fit (not before ``tune_start`` steps or while the EMAs are
    degenerate)."""
    n = tune[2]
    if n < tune_start:
        return False, 0.0, 0.0
    corr = 1.0 - (1.0 - beta) ** n
    mu = tune[0] / corr
    var = tune[1] / corr
    if mu > 0.0 and var > 0.0:
        return True, mu * mu / var, var / mu
    return False, 0.0, 0.0


@njit
def _gamma_guardrail(tune, abs_de, zk, beta, tune_start):  # type: ignore[no-untyped-def]
    """Eq. (6) of the anchored rule: |ΔE| above the κ quantile of the Gamma fitted to the EMAs before this step
    (False before ``tune_start`` steps or while the fit is degenerate), the quantile Wilson–Hilferty's (appendix
    F.3) but never below the fitted mean kθ.

    One large |ΔE| (a start far above ε*, an outlying minibatch) inflates the variance EMA; the fitted shape
    k = μ²/s² then decays toward 0 as the EMAs forget it, and Wilson–Hilferty's κ = 0.98 quantile falls below the
    mean for k < 0.026 and to 0 for k < 0.018: the printed guardrail rejected *every* step, θ restored each time,
    until the EMAs forgot the error — ≈ 1600 frozen steps (34 % of 5000) from ε₀ = 100 ε* on the 10-d Gaussian.
    A κ quantile below the mean means the fit no longer describes a law of |ΔE| (the exact κ = 0.98 quantile of a
    Gamma is above its mean for every k above 0.0041: 8.1 μ at k = 0.01), so the threshold is held at the mean:
    steps at or below the errors the EMAs still average are kept. Where Wilson–Hilferty's quantile is above the
    mean the decisions are the printed ones. The paper's rule (:func:`tuner_update`) keeps the printed quantiles."""
    fitted, k, scale = _gamma_fit(tune, beta, tune_start)
    if not fitted:
        return False
    return abs_de > max(_wh(zk, k, scale), k * scale)


@njit
def _ema_push(tune, abs_de, beta):  # type: ignore[no-untyped-def]
    """Eq. (4): the EMAs of |ΔE| and of its squared deviation (bias-corrected mean), and the count."""
    n1 = tune[2] + 1.0
    tune[0] = (1.0 - beta) * tune[0] + beta * abs_de
    dev = abs_de - tune[0] / (1.0 - (1.0 - beta) ** n1)
    tune[1] = (1.0 - beta) * tune[1] + beta * dev * dev
    tune[2] = n1


@njit
def tuner_update(tune, abs_de, zk, zlo, zhi, beta, delta, tune_start):  # type: ignore[no-untyped-def]
    """Algorithm 1 as printed after one integrator step; ``tune`` = [μ_raw, s²_raw, n, step]. Returns True to reject.

    The Gamma fit and quantiles use the EMAs before this step's |ΔE| (γ^{(t)} of eqs. 6–7);
    then the EMAs are updated (eq. 4) and the step size multiplied (eq. 7).

    **Drift.** Where the fitted Gamma describes |ΔE|, the step grows (×(1 + δ)) with probability a/3 and
    shrinks (×(1 − δ)) with probability 2a/3 at *every* step size, since both thresholds are quantiles of the
    chain's own energy errors: log ε performs a random walk with drift
    (a/3) log(1 + δ) + (2a/3) log(1 − δ) ≈ −7.1·10⁻⁴ per step at a = 0.1, δ = 0.02 (a factor e⁻¹⁴ over
    20 000 steps), and no restoring force. This is the paper's rule; :func:`anchored_update` is the default.
    """
    if not math.isfinite(abs_de):
        tune[3] *= 1.0 - delta
        return True
    reject = False
    factor = 1.0
    fitted, k, scale = _gamma_fit(tune, beta, tune_start)
    if fitted:
        reject = abs_de > _wh(zk, k, scale)
        if abs_de < _wh(zlo, k, scale):
            factor = 1.0 + delta
        elif abs_de > _wh(zhi, k, scale):
            factor = 1.0 - delta
    _ema_push(tune, abs_de, beta)
    tune[3] *= factor
    return reject


#: the anchored rule's gain is γ/√(1 + n/n₀) after n tuned steps: full for the approach, then diminishing
ANCHOR_DECAY_STEPS = 1000.0


@njit
def anchor_gain(gain, n_tuned):  # type: ignore[no-untyped-def]
    """The anchored rule's gain after ``n_tuned`` tuned steps: γ_n = γ/√(1 + max(n, 0)/n₀), n₀ = 1000."""
    if n_tuned < 0.0:
        n_tuned = 0.0
    return gain / math.sqrt(1.0 + n_tuned / ANCHOR_DECAY_STEPS)


#: ``tune`` columns of the noise estimates (:func:`noise_update`): running means of tr V' and (a·b)², their
#: counts, how much of the history in ``hist`` is valid, and the running mean of (a·b)⁴
NZ_TR, NZ_N1, NZ_SQ, NZ_N2, NZ_LVL, NZ_SQ2 = 4, 5, 6, 7, 8, 9
#: the noise estimates are running means (weight 1/n) until n = 1/NOISE_RATE, then EMAs of that rate. 10⁻⁴ (10⁻³
#: until the noise-bias prediction used them): with an effective 2·10³ draws the two-standard-error shrink of
#: d‖A‖²_F hid a 15 % anisotropy (pSMILE on a 2-d logistic regression: predicted 0, measured 0.38; now 0.27–0.30)
NOISE_RATE = 1e-4


@njit
def _mean_push(tune, col, ncol, x):  # type: ignore[no-untyped-def]
    n1 = tune[ncol] + 1.0
    w = 1.0 / n1
    if w < NOISE_RATE:
        w = NOISE_RATE
    tune[col] += w * (x - tune[col])
    tune[ncol] = n1


@njit
def noise_update(tune, hist, g, ipre):  # type: ignore[no-untyped-def]
    """The gradient noise seen by the sampler, from successive gradients at one point; call at the step's start.

    ``g`` is the step's first gradient, at θ_t on the step's batch (noise ζ_t); ``hist`` (3D, the chain's
    ``MclmcState.noise_hist``) holds the previous step's last gradient in [0, D) (at the same θ_t, on the previous
    batch: noise ζ_{t−1}) and the last two noise draws in [D, 2D), [2D, 3D). With p the preconditioner (g' = g/p):

    - a_t = (g − g_prev)/(p√2) = (ζ_t − ζ_{t−1})/(p√2) has mean 0 and covariance V' = V/(ppᵀ), the noise
      covariance in the sampler's metric, at θ_t: E|a_t|² = tr V';
    - a_t and a_{t−2} are independent (disjoint batches) with that covariance: E[(a_t·a_{t−2})²] = tr V'².

    Running means (weight 1/n, then ``NOISE_RATE``) of |a_t|², (a_t·a_{t−2})² and (a_t·a_{t−2})⁴ go to
    ``tune`` (columns ``NZ_*``); the history restarts (``tune[NZ_LVL]`` = 0) after a rejected step, whose last gradient is not at
    the restored θ. Exact gradients give a = 0: no noise.
    """
    d = g.shape[0]
    lvl = tune[NZ_LVL]
    if lvl < 1.0:
        return
    tv = 0.0
    cross = 0.0
    for i in range(d):
        a = (g[i] - hist[i]) * ipre[i] * 0.7071067811865476
        tv += a * a
        cross += a * hist[2 * d + i]
        hist[2 * d + i] = hist[d + i]
        hist[d + i] = a
    if not (math.isfinite(tv) and math.isfinite(cross)):
        tune[NZ_LVL] = 0.0
        return
    _mean_push(tune, NZ_TR, NZ_N1, tv)
    if lvl >= 3.0:
        c2 = cross * cross
        _mean_push(tune, NZ_SQ2, NZ_N2, c2 * c2)
        tune[NZ_N2] -= 1.0
        _mean_push(tune, NZ_SQ, NZ_N2, c2)
    tune[NZ_LVL] = min(lvl + 1.0, 3.0)


@njit
def noise_keep(tune, hist, g, rejected):  # type: ignore[no-untyped-def]
    """At the step's end: keep its last gradient ``g`` for :func:`noise_update`, or restart the history."""
    if rejected:
        tune[NZ_LVL] = 0.0
        return
    d = g.shape[0]
    for i in range(d):
        hist[i] = g[i]
    if tune[NZ_LVL] < 1.0:
        tune[NZ_LVL] = 1.0


@njit
def noise_anisotropy(tune, ndim):  # type: ignore[no-untyped-def]
    """(d‖A‖_F², tr V'): the anisotropic part A = V' − (tr V'/d) I of the gradient noise's covariance in the sampler's
    metric, and its trace, from :func:`noise_update`'s means ((0, 0) until there are some; A = 0 where the
    means do not resolve an anisotropy).

    d‖A‖_F² = d tr V'² − (tr V')², with tr V'² estimated by the mean of (a·b)² less two of its standard errors (from
    the mean of (a·b)⁴ and the effective sample size, n or 2/``NOISE_RATE`` − 1), so that isotropic noise, where
    d tr V'² − (tr V')² = 0, gives 0 but in ≈ 2 % of the chains' time, instead of a floor set by the estimates'
    noise."""
    n2 = tune[NZ_N2]
    if n2 < 2.0 or ndim < 2:
        return 0.0, 0.0
    tr = tune[NZ_TR]
    sq = tune[NZ_SQ]
    n_eff = min(n2, 2.0 / NOISE_RATE - 1.0)
    se = math.sqrt(max(tune[NZ_SQ2] - sq * sq, 0.0) / n_eff)
    an2 = ndim * (sq - 2.0 * se) - tr * tr
    if not an2 > 0.0:
        return 0.0, tr
    return an2, tr


@njit
def noise_work_var(tune, eps, ndim):  # type: ignore[no-untyped-def]
    """w = ε² √2 ‖A‖_F / d²: the anisotropic gradient noise's work per step, per dimension.

    From :func:`noise_update`'s means via :func:`noise_anisotropy` (0 until there are some). Between steps the
    sampler's true Hamiltonian H = K + U changes by the step's energy error ΔE_t (the integrator's error on the
    batch's own potential U_t, which :func:`anchored_update` anchors) plus the work of the noise: U − U_t changes
    over the step by ≈ −ε u·ζ_t, so E[(ε u·ζ')² | u] = ε² uᵀV'u. Its isotropic part ε² tr V'/d acts on u as MCLMC's
    partial refresh does and leaves the stationary law unchanged (the SMILE paper, appendix A.2): it is not
    counted, as MCLMC does not count its refresh. The anisotropic part ε² uᵀAu, A = V' − (tr V'/d) I, changes
    the law (appendix A.3); over directions u uniform on the sphere its standard deviation is
    ε² √(2/(d(d + 2))) ‖A‖_F ≈ ε² √2 ‖A‖_F/d. Per dimension (/d), as MCLMC's Var[ΔE]/d: w. It grows as ε².
    """
    an2, _ = noise_anisotropy(tune, ndim)
    return eps * eps * math.sqrt(2.0 * an2 / ndim) / (ndim * ndim)


@njit
def noise_ratio(tune, eps, ndim, tau):  # type: ignore[no-untyped-def]
    """q = ε² d (‖A‖_F − τ tr V'/d) / (4 (d − 1)² τ): the refresh the anisotropic gradient noise calls for at step
    size ε to bias the chain's covariance by at most a fraction ``tau`` in any direction. The refresh must have
    c₁ ≤ (1 − q)/(1 + q) (:func:`noise_length`); for q ≥ 1 no refresh suffices at this ε (0: no limit, or no estimate
    yet).

    **Derivation** (no equation of the SMILE paper, whose samplers have no refresh). The step's gradient noise ζ'
    (covariance V' in the sampler's metric, one draw for the step's three gradients) kicks the velocity by
    κ = ε(I − uuᵀ)ζ'/(d − 1) over the step (the momentum maps' b₁ + b₂ + b₁ = 1), of covariance ε²V'/(d − 1)²
    (tangential part). The kick moves θ by ε κ (b₁ + b₂/2) = ε κ/2 within the step and, carried by the velocity
    (damped by c₁ = e^{−ε/L} at each refresh, :func:`partial_refresh`), by ε κ c₁/(1 − c₁) after it: ε κ (1 + c₁)/
    (2(1 − c₁)) in all. The refresh's own noise, √(1 − c₁²) z/√d at the step's end, moves θ by ε √(1 − c₁²) z/(√d
    (1 − c₁)). Along a direction e the ratio of the two displacements' variances is the excess "temperature" the
    noise adds, σ eᵀV'e with σ = ε² d (1 + c₁)²/(4 (d − 1)² (1 − c₁²)) = ε² d (1 + c₁)/(4 (d − 1)² (1 − c₁)), and
    |u| = 1 divides out the mean: the isotropic part of the noise only refreshes u faster (the SMILE paper,
    appendix A.2); the anisotropic part A = V' − (tr V'/d) I heats some directions more than others (appendix A.3),
    and the positions follow (overdamped Langevin with direction-dependent noise: Var θ_e ∝ T_e where A commutes
    with the target's curvature, and within max T_e/T̄ by the monotonicity of the Lyapunov solution where it does
    not):

        T_e/T̄ − 1 = σ (eᵀV'e − tr V'/d) / (1 + σ tr V'/d) ≤ σ λ/(1 + σ tr V'/d),    λ = λ_max(A) ≤ ‖A‖_F,

    at most τ when σ (‖A‖_F − τ tr V'/d) ≤ τ, i.e. (1 + c₁)/(1 − c₁) ≤ 1/q; no limit where ‖A‖_F ≤ τ tr V'/d. For
    ε ≪ L the excess is ε L d λ/(2(d − 1)²) (it depends on ε·L only); for a complete refresh (c₁ = 0) it is q τ.
    ‖A‖_F bounds λ_max(A) from above (tight for noise with one dominant direction), so q errs on the large side.
    Checked on the chains (``tests/test_smile_noise_bias.py``: a standard Gaussian with gradient noise of variance
    100 along one axis, d = 10, fixed ε and L, 64 chains × 40 000 steps): measured excess 0.380 ± 0.017 against
    0.523 predicted at ε = 0.05, L = 2 (c₁ = 0.98), 0.192 ± 0.019 against 0.268 at ε = 0.3, L = 0.1 (c₁ = 0.05),
    0.719 ± 0.015 against 0.847 with a complete refresh at ε = 0.58: the derivation overstates it by 1.2–1.4×
    in every regime (without the factor (1 + c₁)²/4 it overstated the complete refresh's 3.7×)."""
    if not (eps > 0.0 and tau > 0.0):
        return 0.0
    an2, tr = noise_anisotropy(tune, ndim)
    lam = math.sqrt(an2 / ndim) - tau * tr / ndim
    if not lam > 0.0:
        return 0.0
    dm1 = ndim - 1.0
    return eps * eps * ndim * lam / (4.0 * dm1 * dm1 * tau)


@njit
def noise_excess(tune, eps, length, ndim):  # type: ignore[no-untyped-def]
    """The predicted bias of the chain's covariance along the gradient noise's noisiest direction at step size ε and
    refresh length L (``length``; ≤ 0 or ∞: none): σ λ/(1 + σ tr V'/d), σ = ε² d (1 + c₁)/(4 (d − 1)² (1 − c₁)),
    c₁ = e^{−ε/L}, λ = ‖A‖_F (:func:`noise_ratio`'s derivation; 0 without an anisotropy or an estimate, ∞ without a
    refresh)."""
    an2, tr = noise_anisotropy(tune, ndim)
    if not (an2 > 0.0 and eps > 0.0):
        return 0.0
    if not (length > 0.0 and length < math.inf):
        return math.inf
    dm1 = ndim - 1.0
    c1 = math.exp(-eps / length)
    sig = eps * eps * ndim * (1.0 + c1) / (4.0 * dm1 * dm1 * -math.expm1(-eps / length))
    return sig * math.sqrt(an2 / ndim) / (1.0 + sig * tr / ndim)


@njit
def noise_length(tune, eps, ndim, tau):  # type: ignore[no-untyped-def]
    """L_τ = ε/log((1 + q)/(1 − q)), q = :func:`noise_ratio`: the longest decoherence length of the partial refresh
    (c₁ = e^{−ε/L} = (1 − q)/(1 + q)) at which the anisotropic gradient noise biases the chain's covariance by at most a
    fraction ``tau`` (∞: no limit; for q ≥ 1 a length that refreshes u completely, c₁ = 0, and the bias is then
    about q τ). For small q, L_τ ≈ 2τ(d − 1)²/(d ε (‖A‖_F − τ tr V'/d))."""
    q = noise_ratio(tune, eps, ndim, tau)
    if not q > 0.0:
        return math.inf
    if q >= 1.0:
        return eps / 800.0  # e^{−800} = 0 in double precision: c₁ = 0
    return eps / (math.log1p(q) - math.log1p(-q))


@njit
def anchored_update(tune, abs_de, ndim, zk, beta, tune_start, target, gain, clip, rho=0.0, floor=0.0):  # type: ignore[no-untyped-def]
    """The anchored tuner after one integrator step; ``tune`` = [μ_raw, s²_raw, n, step]. Returns True to reject.

    Algorithm 1 with eq. (7) replaced: the guardrail (eq. 6, :func:`tuner_update`'s Gamma fit and
    κ quantile) and the EMAs (eq. 4) are unchanged; the step size moves toward an absolute target
    v* = ``target`` of the energy-error variance per dimension, Var[ΔE]/d (MCLMC's anchor, for exact gradients;
    BlackJAX's ``mclmc_find_L_and_step_size`` uses ``desired_energy_var`` = 5·10⁻⁴; the default here is
    5·10⁻⁵, see "Choice of v*"):

        ξ_t = min(ΔE_t² / (d v*), ξ_max),    log ε ← log ε + (γ_n/6) (1 − ξ_t),    γ_n = γ/√(1 + n/n₀)

    (γ = ``gain``, ξ_max = ``clip``, n the tuned steps so far, n₀ = 1000; from step ``tune_start`` on). A
    non-finite ΔE counts as ξ = ξ_max and is rejected. With the noise term, ΔE²/(d v*) is replaced by
    max(ΔE²/(d v*), ``rho``) (below; ``rho`` = 0 without it). ``floor`` = k: reject only if also |ΔE| > k √(d v*).

    **Fixed point.** The mean change of x = log ε is (γ_n/6)(1 − m(x)) with m(x) = E[min(ΔE²/(d v*), ξ_max)]
    at step size eˣ, so the only fixed point is m(x*) = 1: E[ΔE²]/d = v* up to the clip (for a Gaussian
    ΔE at the target, ξ ~ χ²₁ and the clip at 10 moves m by E[(χ²₁ − 10)₊] ≈ 1.4·10⁻⁴).
    The up and down rates balance there and nowhere else: m is increasing in ε (the minimal-norm
    integrator's energy error on the step's fixed potential is O(ε³), so m ∝ ε^p with p = 6 for small ε).

    **Stability.** Linearised at x*, x_{t+1} − x* = (1 − γ_n m'(x*)/6)(x_t − x*) + noise, with
    m'(x*) = p m(x*) = p: a contraction for 0 < γ_n p/6 < 2, which holds at every n since γ_n ≤ γ
    (p = 6, γ = 0.02: factor 0.98 at first, relaxation time 1/γ_n = 50 steps, 500 at n = 10⁵). Far from
    x* the drift is bounded and points to x*: at most +γ_n/6 per step below and −γ_n(ξ_max − 1)/6 above;
    Σ γ_n diverges (as 2γ√(n₀ n)), so x* is reached from any start (ε 100× too small: ≈ 1900 steps,
    10⁴× too small: ≈ 4700). The spread of x around x* is that of an AR(1) with a slowly varying
    coefficient: Var x ≈ γ_n Var ξ / 72 (Var ξ = 2 for a Gaussian ΔE: standard deviation ≈ 0.024 at
    n ≤ n₀, 0.0075 at n = 10⁵, for independent ξ_t), so x converges to x* in probability.

    **Why the gain diminishes.** A gain that stays at γ makes ε follow the chain's state within ≈ 1/γ = 50
    steps, far faster than the chain mixes: the step is then a function of where the chain is, the chain
    lingers where ε is small, and it is no longer the fixed-step chain at ε* (adaptive MCMC needs
    *diminishing adaptation*, Roberts & Rosenthal 2007). Measured on the funnel with diagonal noise,
    pSMILE, 10 chains × 5·10⁴ steps, v* = 5·10⁻⁴: with a constant gain chains were trapped (b² 1.2 and 0.41 over two
    seeds, chains with 21–25 % rejected steps; at v* = 5·10⁻⁵ ε fell to 10⁻⁸); with γ_n, b² = 0.13 for
    both seeds (the fixed best step: 0.11) and ε stays put at v* = 5·10⁻⁵ as well.

    **What ΔE measures under minibatch noise.** A step draws its noise (its minibatch) once, so its three
    gradients and both log-densities belong to one potential U_t = −log p_ξt, whose MCLMC flow conserves
    K + U_t: ΔE_t is the integrator's error on the step's own potential, O(ε³), and E[ΔE²] ∝ ε^p still
    (p ≈ 6.5 measured on the 10-d Gaussian with isotropic noise: ε* ∝ v*^(1/p) over v* = 5·10⁻⁷…5·10⁻⁴), so
    the fixed point and its stability above hold as derived. The noise enters ΔE twice. (i) Through the size
    of the gradient (the momentum map's δ = ε|g'|/(d − 1)): more noise, smaller anchored step (10-d Gaussian,
    v* = 5·10⁻⁴: ε* = 1.18 without noise, 0.47, 0.20, 0.12 at 0.1, 1 and 3 times the appendix-C noise). (ii) The step
    starts from a state in equilibrium for the chain, not for U_t, so ΔE has a mean of the order of its
    spread: E[ΔE]/√E[ΔE²] ≈ 0.7 at that step (≈ 0.006 without noise) — half of E[ΔE²] is the
    squared mean. What ΔE cannot see is the bias the noise causes *between* steps: successive steps
    integrate different potentials, no energy is conserved along the chain, and the velocity takes kicks
    ε(I − uuᵀ)ζ_t/(d − 1) (ζ_t the gradient noise) whose anisotropy biases the stationary law, O(ε) where
    the flow mixes and O(1) where it does not (without noise MCLMC is not ergodic on a Gaussian: b² = 0.5
    at ε*). The anchor therefore bounds the integrator's bias, as in MCLMC, not the noise's; a lower v*
    reduces the latter only through ε* ∝ v*^(1/6) (``benchmarks/smile_anchor.py`` measures both sides).

    **The noise term** (``rho``; ``SmileOptions.noise_weight`` = ω > 0, off by default). ρ_t = ω w_t/v* with
    w_t = :func:`noise_work_var` at the step's ε, the anisotropic gradient noise's work per step and dimension
    (estimated online from successive gradients at one point, :func:`noise_update`), and ξ_t = min(max(ΔE_t²/(d v*),
    ρ_t), ξ_max): the rule then holds the true Hamiltonian's energy error per dimension — the integrator's and
    the part of the noise's that changes the stationary law — at v*. Fixed point: m(x) = E[max(ΔE²/(d v*), ρ)]
    = 1. With the noise's estimates fixed (they do not depend on ε) ρ = (ε/ε_c)², ε_c = √(v*/(ω c)), c = w/ε²;
    m is increasing in ε (each argument is), so the fixed point is unique, at ε* ≤ min(ε_E, ε_c) (ε_E the
    energy-only fixed point), and ε* = ε_c when ε_c ≪ ε_E (ΔE²/(d v*) ≈ (ε_c/ε_E)⁶ ≈ 0 there). Its local
    exponent p = d log m/d log ε lies between 2 (ρ dominates) and 6, so the linearised factor 1 − γ_n p/6 lies in
    [1 − γ_n, 1 − γ_n/3]: stable for every n as above. The estimates are running means (weight 1/n, then 10⁻⁴),
    so ρ changes more slowly than ε's own relaxation after the first thousand steps. Measured
    (``tests/test_smile_noise.py``): on the 10-d Gaussian with the appendix-C diagonal noise (ε_E ≈ 0.035,
    ε_c = 3.8·10⁻⁴ at v* = 5·10⁻⁵) ε settles at 1.07–1.10 ε_c from starts 10× below and above (the
    estimate's two-standard-error shrink lowers w a little). Across Table 1 (``benchmarks/smile_anchor.py
    --noise-weights 0,1``, 10⁵ steps) ω = 1 brings every anisotropic Rosenbrock cell to or below the best fixed
    step's b² (Rosenbrock/diagonal smile 9.3 → 0.040, fixed 0.080; partly because the guardrail, a relative
    quantile that rejects 2 % of the steps at any ε and restarts the velocity toward the mode, pins the chains
    near their start at so small a step) but holds the Gaussian cells' ε at ≈ 10⁻³,
    where 10⁵ steps do not move the chains (b² ≈ 0.5), and traps the funnel's pSMILE chains (b² 16–206):
    hence off by default.

    **Choice of v*.** MCLMC's 5·10⁻⁴ bounds the only bias there is with exact gradients; with minibatch
    noise the bias has the O(ε) part above besides, so the anchor belongs lower, at a cost in mixing per step
    where the flow moves the chain. Measured across all 24 cells of the SMILE paper's Table 1 and the bundled
    GLMs (``benchmarks/smile_anchor.py``, 10⁵ steps, same seeds, diminishing gain): cells no worse than
    the best fixed step (z ≤ 2 and b² ≤ 2×) 13 of 24 at 5·10⁻⁴, 16 at 5·10⁻⁵, 15 at 5·10⁻⁶ (there the
    funnel's pSMILE chains are trapped at 34–77 % rejected steps); the logistic and Poisson chains' covariance
    0.24 and 0.23 from (NH)⁻¹ at 5·10⁻⁴, 0.15 and 0.12 at 5·10⁻⁵, 0.11 and 0.09 at 5·10⁻⁶; their effective
    draws 1.15 and 1.06 %, 1.21 and 0.91 %, 1.02 and 0.75 % of the draws. The default, 5·10⁻⁵, is the best
    of the three on the analytic targets and halves most of the GLMs' bias; it is a measured compromise,
    not a derived optimum.
    """
    reject = True
    xi = clip
    if math.isfinite(abs_de):
        reject = _gamma_guardrail(tune, abs_de, zk, beta, tune_start) and abs_de > floor * math.sqrt(ndim * target)
        xi = abs_de * abs_de / (ndim * target)
        if rho > xi:
            xi = rho
        if xi > clip:
            xi = clip
        _ema_push(tune, abs_de, beta)
        if tune[2] <= tune_start:
            return reject
    tune[3] *= math.exp(anchor_gain(gain, tune[2] - tune_start) * (1.0 - xi) / 6.0)
    return reject


#: the automatic refresh length waits for this many positions of the chain's path (the first steps from θ̂ say
#: little about the posterior's scale)
REFRESH_MIN_PATH = 100.0


@njit
def path_update(n, mean, m2, th):  # type: ignore[no-untyped-def]
    """Welford's update of the path's mean and sum of squared deviations with the position ``th``; returns n + 1."""
    n1 = n + 1.0
    for i in range(th.shape[0]):
        dev = th[i] - mean[i]
        mean[i] += dev / n1
        m2[i] += dev * (th[i] - mean[i])
    return n1


@njit
def path_length(n, m2, ipre):  # type: ignore[no-untyped-def]
    """The automatic decoherence length L = √(Σᵢ Var θ'ᵢ) of a path of n positions, θ' = p ⊙ θ (``ipre`` = 1/p):
    MCLMC's initial L (Robnik et al. 2024, section on tuning; BlackJAX ``mclmc_find_L_and_step_size``), from the
    path's own variance. 0 before :data:`REFRESH_MIN_PATH` positions (no refresh yet)."""
    if n < REFRESH_MIN_PATH:
        return 0.0
    s = 0.0
    for i in range(m2.shape[0]):
        s += m2[i] / (ipre[i] * ipre[i])
    return math.sqrt(s / n)


@njit
def partial_refresh(u, z, eps, length):  # type: ignore[no-untyped-def]
    """MCLMC's partial refresh of the velocity after a step of size ``eps`` (in place; ``z`` D standard normals):

        u ← (c₁ u + c₂ z/√d) / |c₁ u + c₂ z/√d|,    c₁ = e^{−ε/L},  c₂ = √(1 − c₁²),

    BlackJAX's ``partially_refresh_momentum``: the velocity noise η dW of MCLMC's eq. (1) in the SMILE paper, as an
    exact Ornstein–Uhlenbeck step projected on the sphere (the velocity decorrelates over a path length L). It leaves
    the uniform law of u on the sphere, and so MCLMC's stationary law, unchanged. The SMILE paper's
    SMILE-naive (eq. 3) drops it and lets the minibatch noise play its role; where that noise is anisotropic it
    does not randomise u in every direction, and the chains stop sampling their posterior (measured on GLMs:
    ``benchmarks/smile_sweep.py``, docs/benchmarks.md "The velocity refresh"). ``length`` ≤ 0 or infinite leaves u unchanged."""
    if not (length > 0.0 and length < math.inf):
        return
    d = u.shape[0]
    c1 = math.exp(-eps / length)
    c2 = math.sqrt(max(1.0 - c1 * c1, 0.0)) / math.sqrt(d)
    nrm = 0.0
    for i in range(d):
        u[i] = c1 * u[i] + c2 * z[i]
        nrm += u[i] * u[i]
    inv = 1.0 / math.sqrt(nrm)
    for i in range(d):
        u[i] *= inv


@njit
def sgld_step(theta, grad, eta, h):  # type: ignore[no-untyped-def]
    """SGLD: θ ← θ + h g + √(2h) η."""
    s = math.sqrt(2.0 * h)
    for i in range(theta.shape[0]):
        theta[i] += h * grad[i] + s * eta[i]


def check_tuner_settings(ema_rate: float, precond_rate: float, guardrail: float, adapt_a: float, adapt_delta: float,
                         tune_start: int, precond_start: int, *, guardrail_name: str = "guardrail") -> tuple[int, int]:
    """Validate the EMA rates, guardrail quantile κ and adaptation (a, δ) of Algorithm 1 and the pSMILE
    preconditioner (each in (0, 1), κ above the step-decrease quantile 1 − 2a/3); returns the
    validated (tune_start, precond_start). ``guardrail_name`` is the caller's name for κ in messages."""
    for name, val in (("ema_rate", ema_rate), ("precond_rate", precond_rate), (guardrail_name, guardrail),
                      ("adapt_a", adapt_a), ("adapt_delta", adapt_delta)):
        v = check_positive(val, name)
        if not v < 1.0:
            raise SgtuneError(f"{name} must lie in (0, 1), got {v}")
    if not guardrail > 1.0 - 2.0 * adapt_a / 3.0:
        raise SgtuneError(f"{guardrail_name} = {guardrail} must exceed the step-decrease quantile 1 − 2a/3 = "
                          f"{1 - 2 * adapt_a / 3:.4g}; raise {guardrail_name} or adapt_a")
    return check_int(tune_start, "tune_start", low=2), check_int(precond_start, "precond_start", low=2)
