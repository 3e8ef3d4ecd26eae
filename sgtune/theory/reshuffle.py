"""Exact asymptotic bias of SGLD with random reshuffling (RR) vs Robbins–Monro (RM) batching.

Gaussian model problem of Shaw & Whalley (2025, section 4): data x_1..x_N, U(θ) = Σ_i (θ − x_i)²/(2σ²), target
N(x̄, σ²/N).  With the rescaled step h = ηN/σ² one SGLD step on batch b reads

    θ' = θ − h(θ − x̄_b) + sqrt(2hσ²/N) ξ.

Schemes: ``ula`` (full gradient), ``rm`` (a fresh batch of B distinct indices
every step), ``rm_with_replacement`` (B indices drawn with replacement) and
``rr`` (one uniformly random partition into R = N/B batches per epoch, visited
in order).  RR has no invariant law; its variance is periodic in the epoch
position k = 0..R−1 (k steps of the current epoch already taken).

Closed forms (a = 1 − h, X = a^k, Y = a^R, ρ = s²/σ², s² the unbiased sample
variance; derived with sympy in :mod:`sgtune.symbolic.reshuffle`)::

    ε_ULA = h/(2 − h)
    ε_RM  = h(1 + v)/(2 − h),   v = ρ(R − 1) (without repl.),  v = ρ(N − 1)/B (with repl.)
    ε_k   = h/(2 − h) + ρ[hR/(2 − h) − X²(1 − Y)/(1 + Y) − (1 − X)²]
    ε̄     = (1/R) Σ_k ε_k
          = h/(2 − h) + ρ[hR/(2 − h) − 1 + 2(1 − Y)/(Rh) − ((1 − Y)² + 1 − Y²)/(Rh(2 − h))]

Leading orders: ε_RM = (1 + v)h/2 + O(h²) (the gradient noise enters at O(h)),
ε_k = h/2 + (1/4 + ρk(R − k))h² + O(h³), ε̄ = h/2 + (1/4 + ρ(R² − 1)/6)h² + O(h³).
The published derivation uses v = R (no finite-population factor) and averages
k inside the square; both are corrected here.  For h > 1 RR
can be *worse* than RM (e.g. ε_0 > ε_RM near h → 2); the numbers say so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core._validation import as_float_array, as_spd, check_int, check_positive
from ..core.errors import ShapeError, SgtuneError, UnstableStepSizeError

__all__ = [
    "ReshuffleBias",
    "GaussianReshuffleBias",
    "reshuffle_bias",
    "gaussian_reshuffle_bias",
    "rel_err_ula",
    "rel_err_rm",
    "rel_err_rr_position",
    "rel_err_rr_average",
    "w2_gaussian_1d",
    "SCHEMES",
]

#: names of the schemes, in the order the CLI reports them
SCHEMES: tuple[str, ...] = ("ula", "rm", "rm_with_replacement", "rr_by_position", "rr_average")


def _check_step(h: Any, name: str = "step") -> float:
    hv = check_positive(h, name)
    if not hv < 2.0:
        raise UnstableStepSizeError(
            f"{name} = {hv} makes the chains unstable: every scheme needs 0 < h < 2 "
            f"(|1 − h| < 1, the ULA bound); use e.g. {name} = 1.0 or smaller",
            spectral_radius=abs(1.0 - hv), max_stable_step=2.0)
    return hv


def _check_batches(n: int, batch_size: Any) -> tuple[int, int]:
    b = check_int(batch_size, "batch_size", low=1, high=n)
    if n % b:
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        near = min(divisors, key=lambda d: (abs(d - b), d))
        raise SgtuneError(
            f"batch_size = {b} does not divide N = {n}: random reshuffling needs R = N/B "
            f"whole batches per epoch; use a divisor of N such as {near}")
    return b, n // b


@cites("shaw2025", "section 4, eq. (10)")
def rel_err_ula(h: Any) -> float:
    """Compute ε_ULA = h/(2 − h), the relative variance error of ULA on the model problem (Shaw & Whalley 2025, §4, after eq. 10).

    Parameters
    ----------
    h : float
        Rescaled step h = ηN/σ², 0 < h < 2.

    Returns
    -------
    float
        The relative error Var_∞/(σ²/N) − 1.

    Raises
    ------
    UnstableStepSizeError
        If h ∉ (0, 2).

    Examples
    --------
    >>> f"{rel_err_ula(0.1):.4f}"   # h/(2 − h) ≈ h/2
    '0.0526'
    """
    hv = _check_step(h, "h")
    return hv / (2.0 - hv)


@cites("shaw2025", "section 4, SGLD-RM (noise ratio corrected: v = R − 1 for σ² = s²)")
def rel_err_rm(h: Any, noise_ratio: Any) -> float:
    """Compute ε_RM = h(1 + v)/(2 − h), the relative variance error of SGLD-RM (Shaw & Whalley 2025, §4, corrected noise ratio).

    Parameters
    ----------
    h : float
        Rescaled step, 0 < h < 2.
    noise_ratio : float
        The noise ratio v = N Var(x̄_b − x̄)/σ² ≥ 0; v = (s²/σ²)(R − 1) without replacement
        (the paper's v = R omits the finite-population factor),
        (s²/σ²)(N − 1)/B with replacement.

    Returns
    -------
    float
        The relative error Var_∞/(σ²/N) − 1.

    Raises
    ------
    UnstableStepSizeError
        If h ∉ (0, 2).

    Examples
    --------
    >>> f"{rel_err_rm(0.1, 3.0):.4f}"   # (1 + v) times the ULA error
    '0.2105'
    """
    hv = _check_step(h, "h")
    vv = check_positive(noise_ratio, "noise_ratio", strict=False)
    return hv * (1.0 + vv) / (2.0 - hv)


def _rr_bracket_position(h: float, n_batches: int, k: np.ndarray) -> np.ndarray:
    a = 1.0 - h
    X = np.power(a, k.astype(np.float64))
    Y = a ** n_batches
    return h * n_batches / (2.0 - h) - X * X * (1.0 - Y) / (1.0 + Y) - (1.0 - X) ** 2


def _rr_bracket_average(h: float, n_batches: int) -> float:
    a = 1.0 - h
    R = n_batches
    Y = a ** R
    return (h * R / (2.0 - h) - 1.0 + 2.0 * (1.0 - Y) / (R * h)
            - ((1.0 - Y) ** 2 + 1.0 - Y * Y) / (R * h * (2.0 - h)))


@cites("sgtune", "periodic stationary variance of SGLD-RR (corrects Shaw & Whalley 2025, §4)")
def rel_err_rr_position(h: Any, n_batches: Any, variance_ratio: Any = 1.0) -> np.ndarray:
    """Compute ε_k = h/(2−h) + ρ[hR/(2−h) − a^{2k}(1−a^R)/(1+a^R) − (1−a^k)²], k = 0..R−1 (Shaw & Whalley 2025, §4, corrected).

    Parameters
    ----------
    h : float
        Rescaled step, 0 < h < 2.
    n_batches : int
        R = N/B.
    variance_ratio : float
        The ratio ρ = s²/σ² (1 when σ² is the unbiased sample variance).  The within-epoch
        batch means have Var = ρ(R − 1)σ²/N and pairwise Cov = −ρσ²/N.

    Returns
    -------
    numpy.ndarray
        The errors ε_k for k = 0..R−1 (k steps of the epoch taken).

    Raises
    ------
    UnstableStepSizeError
        If h ∉ (0, 2).

    Examples
    --------
    >>> np.round(rel_err_rr_position(0.1, 4), 4)
    array([0.0555, 0.085 , 0.0908, 0.0794])
    """
    hv = _check_step(h, "h")
    R = check_int(n_batches, "n_batches", low=1)
    rho = check_positive(variance_ratio, "variance_ratio", strict=False)
    k = np.arange(R)
    return hv / (2.0 - hv) + rho * _rr_bracket_position(hv, R, k)


@cites("sgtune", "epoch average of SGLD-RR (corrects Shaw & Whalley 2025, §4)")
def rel_err_rr_average(h: Any, n_batches: Any, variance_ratio: Any = 1.0) -> float:
    """Compute ε̄ = (1/R)Σ_k ε_k = h/(2−h) + ρ[hR/(2−h) − 1 + 2(1−a^R)/(Rh) − ((1−a^R)² + 1 − a^{2R})/(Rh(2−h))] (Shaw & Whalley 2025, §4, corrected).

    The average is taken of the exact ε_k (the terms (1 − a^k)² are averaged);
    the published formula averages k inside the square and uses v = R.

    Parameters
    ----------
    h : float
        Rescaled step, 0 < h < 2.
    n_batches : int
        R = N/B.
    variance_ratio : float
        The ratio ρ = s²/σ².

    Returns
    -------
    float
        The epoch-averaged relative variance error.

    Raises
    ------
    UnstableStepSizeError
        If h ∉ (0, 2).

    Examples
    --------
    >>> bool(np.isclose(rel_err_rr_average(0.1, 4), rel_err_rr_position(0.1, 4).mean()))
    True
    """
    hv = _check_step(h, "h")
    R = check_int(n_batches, "n_batches", low=1)
    rho = check_positive(variance_ratio, "variance_ratio", strict=False)
    return hv / (2.0 - hv) + rho * _rr_bracket_average(hv, R)


@cites("shaw2025", "section 4.1 (W2 between 1-D Gaussians)")
def w2_gaussian_1d(var: Any, target_var: Any) -> Any:
    """W₂ = |sqrt(V) − sqrt(V*)| for two laws with equal means (Shaw & Whalley 2025, §4.1).

    Exact between two Gaussians with equal means; for a non-Gaussian law with
    variance V (SGLD iterates) it is a lower bound (Gelbrich bound).

    Parameters
    ----------
    var : float or array
        Variance(s) V of the chain.
    target_var : float
        Target variance V*.

    Returns
    -------
    float or numpy.ndarray
        The distance(s).

    Examples
    --------
    >>> w2_gaussian_1d(np.array([1.0, 2.25]), 1.0)
    array([0. , 0.5])
    """
    return np.abs(np.sqrt(var) - np.sqrt(target_var))


@dataclass(frozen=True)
class ReshuffleBias:
    """Asymptotic variances and errors of ULA / SGLD-RM / SGLD-RR on the 1-D Gaussian model problem.

    Variances are of θ (``*_var``), ``*_rel_err`` = Var/target_var − 1, ``w2_*``
    the 1-D Gaussian W₂ (a lower bound for the non-Gaussian SGLD laws).
    ``rr_average_var`` is the variance at a uniformly random epoch position;
    ``leading_coefficients[name]`` = (c1, c2) with ε = c1 h + c2 h² + O(h³)
    (for ``rr_by_position`` an R × 2 list).

    Attributes
    ----------
    n, batch_size, n_batches : int
        N, B and R = N/B.
    step : float
        The rescaled step h.
    sigma2, sample_var : float
        The model's σ² and the unbiased sample variance s² of the data.
    mean, target_var : float
        The target's mean x̄ and variance σ²/N.
    noise_ratio, noise_ratio_with_replacement : float
        v without and with replacement (:func:`rel_err_rm`).
    batch_mean_var, batch_mean_cov_within_epoch : float
        Var(x̄_b − x̄) and the covariance of two batch means of one RR epoch.
    ula_var, rm_var, rm_with_replacement_var, rr_average_var : float
        The stationary variances of θ.
    rr_by_position_var : (R,) ndarray
        The RR variance after k steps of an epoch, k = 0..R−1.
    ula_rel_err, rm_rel_err, rm_with_replacement_rel_err, rr_average_rel_err : float
        Var/target_var − 1.
    rr_by_position_rel_err : (R,) ndarray
        The same per epoch position.
    w2_ula, w2_rm, w2_rm_with_replacement, w2_rr_average : float
        W₂ to the target (:func:`w2_gaussian_1d`).
    w2_rr_by_position : (R,) ndarray
        The same per epoch position.
    leading_coefficients : dict
        Scheme name -> (c1, c2).

    Examples
    --------
    >>> r = reshuffle_bias(np.arange(8.0), batch_size=2, step=0.1)
    >>> r.n_batches, f"{r.rm_rel_err:.4f}", f"{r.rr_average_rel_err:.4f}"
    (4, '0.2105', '0.0777')
    """

    n: int
    batch_size: int
    n_batches: int
    step: float
    sigma2: float
    sample_var: float
    mean: float
    target_var: float
    noise_ratio: float
    noise_ratio_with_replacement: float
    batch_mean_var: float
    batch_mean_cov_within_epoch: float
    ula_var: float
    ula_rel_err: float
    rm_var: float
    rm_rel_err: float
    rm_with_replacement_var: float
    rm_with_replacement_rel_err: float
    rr_by_position_var: np.ndarray
    rr_by_position_rel_err: np.ndarray
    rr_average_var: float
    rr_average_rel_err: float
    w2_ula: float
    w2_rm: float
    w2_rm_with_replacement: float
    w2_rr_by_position: np.ndarray
    w2_rr_average: float
    leading_coefficients: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the keys of ``sgtune reshuffle``."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            val = getattr(self, name)
            out[name] = val.tolist() if isinstance(val, np.ndarray) else val
        return out


@cites("shaw2025", "section 4 (eqs. 7–10 and the SGLD-RM / SGLD-RR variances, corrected)")
def reshuffle_bias(data: Any, batch_size: Any, step: Any, sigma2: Any | None = None) -> ReshuffleBias:
    """Var_∞ and ε for ULA, SGLD-RM (with/without replacement), SGLD-RR per position and averaged (Shaw & Whalley 2025, §4).

    Model: U(θ) = Σ_i (θ − x_i)²/(2σ²), target N(x̄, σ²/N), rescaled step
    h = ηN/σ² (Shaw & Whalley 2025, eq. 8): θ' = θ − h(θ − x̄_b) + sqrt(2hσ²/N) ξ.

    Parameters
    ----------
    data : array_like, shape (N,)
        Finite data x_1..x_N, N ≥ 2 (an (N, 1) column is accepted).
    batch_size : int
        The batch size B; must divide N (RR uses R = N/B whole batches per epoch).
    step : float
        The rescaled step h, 0 < h < 2 (|1 − h| < 1 keeps every scheme stable;
        h = 2 is the ULA stability limit).
    sigma2 : float, optional
        The model's variance σ² > 0; default the unbiased sample variance s² of
        ``data`` (the paper's choice).

    Returns
    -------
    ReshuffleBias
        Frozen result (see its docstring).

    Raises
    ------
    SgtuneError
        Non-finite data, N < 2, B not dividing N, σ² ≤ 0, or all data equal with
        the default σ².
    UnstableStepSizeError
        h ∉ (0, 2).

    Examples
    --------
    >>> import numpy as np
    >>> res = reshuffle_bias(np.arange(8.0), batch_size=2, step=0.1)
    >>> bool(res.rr_average_rel_err < res.rm_rel_err)
    True
    """
    x = as_float_array(data, "data")
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1:
        raise ShapeError(f"data must be a vector of N observations but has shape {x.shape}")
    n = x.shape[0]
    if n < 2:
        raise SgtuneError(f"data must hold at least N = 2 observations, got N = {n}")
    b, R = _check_batches(n, batch_size)
    h = _check_step(step)
    s2 = float(np.var(x, ddof=1))
    if sigma2 is None:
        if not s2 > 0:
            raise SgtuneError("data are all equal so the default sigma2 (sample variance) is 0; "
                              "pass sigma2 > 0 explicitly")
        sig2 = s2
    else:
        sig2 = check_positive(sigma2, "sigma2")
    c = sig2 / n
    rho = s2 / sig2
    v_wo = rho * (R - 1)
    v_w = rho * (n - 1) / b
    eps_ula = rel_err_ula(h)
    eps_rm = rel_err_rm(h, v_wo)
    eps_rmw = rel_err_rm(h, v_w)
    eps_k = rel_err_rr_position(h, R, rho)
    eps_avg = rel_err_rr_average(h, R, rho)
    k = np.arange(R, dtype=np.float64)
    lead = {
        "ula": [0.5, 0.25],
        "rm": [0.5 * (1 + v_wo), 0.25 * (1 + v_wo)],
        "rm_with_replacement": [0.5 * (1 + v_w), 0.25 * (1 + v_w)],
        "rr_by_position": np.column_stack([np.full(R, 0.5), 0.25 + rho * k * (R - k)]).tolist(),
        "rr_average": [0.5, 0.25 + rho * (R * R - 1) / 6.0],
    }
    var = {name: c * (1.0 + e) for name, e in
           [("ula", eps_ula), ("rm", eps_rm), ("rmw", eps_rmw), ("avg", eps_avg)]}
    var_k = c * (1.0 + eps_k)
    return ReshuffleBias(
        n=n, batch_size=b, n_batches=R, step=h, sigma2=sig2, sample_var=s2, mean=float(x.mean()),
        target_var=c, noise_ratio=v_wo, noise_ratio_with_replacement=v_w,
        batch_mean_var=v_wo * c, batch_mean_cov_within_epoch=-s2 / n,
        ula_var=var["ula"], ula_rel_err=eps_ula, rm_var=var["rm"], rm_rel_err=eps_rm,
        rm_with_replacement_var=var["rmw"], rm_with_replacement_rel_err=eps_rmw,
        rr_by_position_var=var_k, rr_by_position_rel_err=eps_k,
        rr_average_var=var["avg"], rr_average_rel_err=eps_avg,
        w2_ula=float(w2_gaussian_1d(var["ula"], c)), w2_rm=float(w2_gaussian_1d(var["rm"], c)),
        w2_rm_with_replacement=float(w2_gaussian_1d(var["rmw"], c)),
        w2_rr_by_position=w2_gaussian_1d(var_k, c), w2_rr_average=float(w2_gaussian_1d(var["avg"], c)),
        leading_coefficients=lead,
    )


# --------------------------------------------------------------------------------------
# multi-dimensional Gaussian generalisation
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GaussianReshuffleBias:
    """Stationary covariances of ULA / SGLD-RM / SGLD-RR for a quadratic potential in R^d.

    ``*_cov`` are d × d covariances of θ (``rr_by_position_cov`` is R × d × d);
    ``*_rel_err`` are per-eigendirection relative variance errors
    (u_jᵀ C u_j)/(u_jᵀ C* u_j) − 1 along the eigenvectors u_j of P;
    ``w2_*`` the Gaussian W₂ to the target (a lower bound for SGLD laws).

    Attributes
    ----------
    n, batch_size, n_batches : int
        N, B and R = N/B.
    step : float
        The raw step η.
    precision : (d, d) ndarray
        P.
    eigenvalues, eigenvectors : ndarray
        p (ascending) and U with P = U diag(p) Uᵀ.
    rescaled_steps : (d,) ndarray
        h_j = ηNp_j.
    mean : (d,) ndarray
        The target's mean x̄.
    target_cov, ula_cov, rm_cov, rm_with_replacement_cov, rr_average_cov : (d, d) ndarray
        The target (NP)⁻¹ and the stationary covariances of θ.
    rr_by_position_cov : (R, d, d) ndarray
        The RR covariance after k steps of an epoch.
    ula_rel_err, rm_rel_err, rm_with_replacement_rel_err, rr_average_rel_err : (d,) ndarray
        The relative variance errors along u_j.
    rr_by_position_rel_err : (R, d) ndarray
        The same per epoch position.
    w2_ula, w2_rm, w2_rm_with_replacement, w2_rr_average : float
        W₂ to the target.
    w2_rr_by_position : (R,) ndarray
        The same per epoch position.

    Examples
    --------
    >>> g = gaussian_reshuffle_bias(np.arange(8.0)[:, None] * [1.0, 0.5], np.eye(2), 2, 0.01)
    >>> g.rr_by_position_cov.shape, np.round(g.ula_rel_err, 4)
    ((4, 2, 2), array([0.0417, 0.0417]))
    """

    n: int
    batch_size: int
    n_batches: int
    step: float
    precision: np.ndarray
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    rescaled_steps: np.ndarray
    mean: np.ndarray
    target_cov: np.ndarray
    ula_cov: np.ndarray
    rm_cov: np.ndarray
    rm_with_replacement_cov: np.ndarray
    rr_by_position_cov: np.ndarray
    rr_average_cov: np.ndarray
    ula_rel_err: np.ndarray
    rm_rel_err: np.ndarray
    rm_with_replacement_rel_err: np.ndarray
    rr_by_position_rel_err: np.ndarray
    rr_average_rel_err: np.ndarray
    w2_ula: float
    w2_rm: float
    w2_rm_with_replacement: float
    w2_rr_by_position: np.ndarray
    w2_rr_average: float


def _sqrtm_psd(a: np.ndarray) -> np.ndarray:
    w, u = np.linalg.eigh(0.5 * (a + a.T))
    return (u * np.sqrt(np.clip(w, 0.0, None))) @ u.T


def _w2_gauss(cov: np.ndarray, target: np.ndarray, target_half: np.ndarray) -> float:
    cross = _sqrtm_psd(target_half @ cov @ target_half)
    val = np.trace(cov) + np.trace(target) - 2.0 * np.trace(cross)
    return float(np.sqrt(max(val, 0.0)))


def _rr_by_position(a: np.ndarray, hs: np.ndarray, gen: np.ndarray, hsn: np.ndarray, R: int) -> np.ndarray:
    """C_k, k = 0..R−1, of :func:`gaussian_reshuffle_bias`: C_k = qᵏC_0 + drive(k), C_0 = drive(R)/(1 − q^R)."""
    q = np.outer(a, a)

    def drive(m: int) -> np.ndarray:  # 2ηδ G(m) + h_jh_l(S_jl/N)(R G(m) − F_j(m)F_l(m))
        G = (1.0 - q ** m) / (1.0 - q)
        F = (1.0 - a ** m) / hs
        return gen * G + hsn * (R * G - np.outer(F, F))

    C0 = drive(R) / (1.0 - q ** R)
    rr = np.empty((R,) + q.shape)
    for kk in range(R):
        rr[kk] = q ** kk * C0 + drive(kk)
    return rr


def _gaussian_inputs(data: Any, precision: Any, batch_size: Any, step: Any
                     ) -> tuple[np.ndarray, np.ndarray, int, int, float]:
    """(X (N, d), P, B, R = N/B, η) of :func:`gaussian_reshuffle_bias`, validated."""
    X = as_float_array(data, "data")
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ShapeError(f"data must be an (N, d) array but has shape {X.shape}")
    n, d = X.shape
    if n < 2:
        raise SgtuneError(f"data must hold at least N = 2 observations, got N = {n}")
    P = as_spd(precision, "precision", size=d)
    b, R = _check_batches(n, batch_size)
    return X, P, b, R, check_positive(step, "step")


@cites("sgtune", "d-dimensional quadratic generalisation of Shaw & Whalley (2025), §4 (per-eigendirection reduction)")
def gaussian_reshuffle_bias(data: Any, precision: Any, batch_size: Any, step: Any) -> GaussianReshuffleBias:
    """Cov_∞ of θ' = θ − ηNP(θ − x̄_b) + sqrt(2η)ξ for ULA, SGLD-RM and SGLD-RR (generalises Shaw & Whalley 2025, §4).

    Model: U(θ) = Σ_i ½(θ − x_i)ᵀP(θ − x_i) with data x_i ∈ R^d and an SPD
    precision P; target N(x̄, (NP)⁻¹).  SGLD with raw step η and stochastic
    gradient (N/B)Σ_{i∈b} P(θ − x_i) = NP(θ − x̄_b).  In the eigenbasis
    P = U diag(p) Uᵀ each coordinate is the 1-D model problem with rescaled
    step h_j = ηNp_j and σ_j² = 1/p_j; the coordinates share the batches, so
    their cross-covariances follow from the same recursion with a_j a_l in
    place of a², Langevin noise 2η δ_jl, and the batch-mean covariance
    Cov(e_j, e_l) = (R − 1)S_jl/N within a batch, −S_jl/N between two batches
    of one RR epoch (S the unbiased sample covariance of the rotated data).
    For each pair (j, l), with q = a_j a_l, G(n) = (1 − qⁿ)/(1 − q),
    F_j(n) = (1 − a_jⁿ)/h_j:

        C_k = qᵏ C_0 + 2ηδ G(k) + h_j h_l (S_jl/N)(R G(k) − F_j(k)F_l(k)),   C_0 = C_R.

    Parameters
    ----------
    data : array_like, shape (N, d)
        Finite data vectors, N ≥ 2.
    precision : array_like, shape (d, d)
        SPD matrix P.
    batch_size : int
        The batch size B; must divide N.
    step : float
        Raw step η > 0 with ηN λ_max(P) < 2 (every rescaled step h_j in (0, 2)).

    Returns
    -------
    GaussianReshuffleBias
        Frozen result; for d = 1, P = 1/σ², η = hσ²/N it reproduces
        :func:`reshuffle_bias`.

    Raises
    ------
    ShapeError
        data not (N, d) with d matching P.
    UnstableStepSizeError
        ηN λ_max(P) ≥ 2.

    Examples
    --------
    >>> g = gaussian_reshuffle_bias(np.arange(8.0)[:, None], np.eye(1) / 6.0, 2, 0.075)
    >>> r = reshuffle_bias(np.arange(8.0), 2, 0.1)   # the same chain: d = 1, h = ηN/σ²
    >>> bool(np.isclose(g.rr_average_rel_err[0], r.rr_average_rel_err))
    True
    """
    X, P, b, R, eta = _gaussian_inputs(data, precision, batch_size, step)
    n, d = X.shape
    p, U = np.linalg.eigh(P)
    hs = eta * n * p
    if not hs[-1] < 2.0:
        raise UnstableStepSizeError(
            f"step = {eta} makes the chains unstable: step·N·λ_max(P) = {hs[-1]:.6g} must be < 2; "
            f"use step < {2.0 / (n * p[-1]):.6g}",
            spectral_radius=float(np.max(np.abs(1.0 - hs))), max_stable_step=2.0 / (n * p[-1]))
    Z = X @ U
    S = np.cov(Z, rowvar=False, ddof=1).reshape(d, d)
    a = 1.0 - hs
    q = np.outer(a, a)
    H = np.outer(hs, hs)
    eye = np.eye(d)
    gen = 2.0 * eta * eye
    Sn = S / n

    # RM / ULA: C = qC + 2ηδ + H·Cov(e) → C = (2ηδ + H Cov(e)) / (1 − q)
    cov_e_wo = (R - 1) * Sn
    cov_e_w = S * (n - 1) / n / b
    ula = gen / (1.0 - q)
    rm = (gen + H * cov_e_wo) / (1.0 - q)
    rmw = (gen + H * cov_e_w) / (1.0 - q)
    rr = _rr_by_position(a, hs, gen, H * Sn, R)
    rr_avg = rr.mean(axis=0)
    target_z = np.diag(1.0 / (n * p))

    def back(c: np.ndarray) -> np.ndarray:
        out = U @ c @ U.T
        return 0.5 * (out + out.T)

    def rel(c: np.ndarray) -> np.ndarray:
        return np.diagonal(c, axis1=-2, axis2=-1) * (n * p) - 1.0

    target = back(target_z)
    th = _sqrtm_psd(target)
    covs = {"ula": back(ula), "rm": back(rm), "rmw": back(rmw), "avg": back(rr_avg)}
    rr_cov = np.stack([back(c) for c in rr])
    return GaussianReshuffleBias(
        n=n, batch_size=b, n_batches=R, step=eta, precision=P, eigenvalues=p, eigenvectors=U,
        rescaled_steps=hs, mean=X.mean(axis=0), target_cov=target,
        ula_cov=covs["ula"], rm_cov=covs["rm"], rm_with_replacement_cov=covs["rmw"],
        rr_by_position_cov=rr_cov, rr_average_cov=covs["avg"],
        ula_rel_err=rel(ula), rm_rel_err=rel(rm), rm_with_replacement_rel_err=rel(rmw),
        rr_by_position_rel_err=rel(rr), rr_average_rel_err=rel(rr_avg),
        w2_ula=_w2_gauss(covs["ula"], target, th), w2_rm=_w2_gauss(covs["rm"], target, th),
        w2_rm_with_replacement=_w2_gauss(covs["rmw"], target, th),
        w2_rr_by_position=np.array([_w2_gauss(c, target, th) for c in rr_cov]),
        w2_rr_average=_w2_gauss(covs["avg"], target, th),
    )
