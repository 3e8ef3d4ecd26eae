r"""Stationary covariance, mixing time and iterate averages of SG(L)D (seed 003, DQ+exact).

Public functions first (``noise_covariance``, ``predict_stationary_cov``,
``iterate_average_cov``, ``autocorrelation_times``, ``max_stable_step``), private
helpers after.

The proxy chain (seed 003 eq. 8) linearises every per-sample gradient at θ̂. With
d = θ − θ̂ and, with momentum κ, the auxiliary ν (eq. B.2), the state z = (d[, ν])
evolves as z_t = F z_{t−1} + E η_t + (noise), so its second moment S solves the
*linear* equation

.. math::  S = F S F^\top + E\,\mathcal N(S_{dd})\,E^\top + Q_0,

with F = I − ΛH, E = −Λ without momentum, F = [[I−ΛH, −κΛ], [H, κI]], E = [−Λ; I] with
momentum, 𝒩(Σ) = (f/B)(mean_n J_nΣJ_n − JΣJ) the Σ-dependent part of C̄(Σ) (eq. 12),
Q₀ = E C₀ Eᵀ + blockdiag(2Λ/β, 0), C₀ = (f/B)(𝓘 − ḡḡᵀ), f = 1 with replacement and
(N−B)/(N−1) without. For κ = 0 this is eq. (11) with eq. (12) substituted.

Small systems are solved directly (Kronecker operator); large ones matrix-free: GMRES on
the noise correction, preconditioned by an exact Stein solve of the deterministic part
via one eigendecomposition of F. Neither route ever forms a D⁴ object for large D.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import LinearOperator, eigs, gmres

from ..core._refs import cites
from ..core._validation import as_float_array, check_int, check_positive, check_probability, is_symmetric
from ..core.errors import (AccuracyWarning, ConvergenceError, NotPositiveDefiniteError, SgtuneError,
                      ShapeError, UnstableStepSizeError)
from ..models import Expansion

__all__ = [
    "StationaryCov",
    "equilibration_steps",
    "noise_covariance",
    "predict_stationary_cov",
    "iterate_average_cov",
    "autocorrelation_times",
    "max_stable_step",
    "as_step_matrix",
    "finite_population_factor",
    "predict_comparison_cov",
    "THEORIES",
]

#: forward theories of seed 003 Table 1 / Algorithm 1
THEORIES = ("dq-exact", "ct", "dq-const", "lr-ws")

#: largest state dimension solved with the dense Kronecker operator
DIRECT_MAX_DIM = 20
#: largest state dimension whose spectral radius is computed by ARPACK; above it, and for data read
#: out of core (``expansion.stream``: every operator application is a pass over the rows), a certified
#: upper bound 1 − λ_min(S^{-1/2}Q₀S^{-1/2}) is reported (``spectral_radius_is_bound``)
ARPACK_MAX_DIM = 150
#: largest state dimension whose spectral radius may fall back to the dense m²×m² eigenvalues
#: (when ARPACK's answer is not the Perron pair of the positive map)
DENSE_RADIUS_MAX_DIM = 50
#: residual above which a result warns (AccuracyWarning) / raises (ConvergenceError)
WARN_RESIDUAL = 1e-10
FAIL_RESIDUAL = 1e-6


@dataclass(frozen=True)
class StationaryCov:
    """Result of :func:`predict_stationary_cov`.

    Attributes
    ----------
    cov : (D, D) stationary covariance Σ of θ.
    spectral_radius : spectral radius of the second-moment map S ↦ FSFᵀ + E𝒩(S_dd)Eᵀ (< 1 ⇔ stable).
    relative_residual : ‖S − FSFᵀ − E𝒩(S)Eᵀ − Q₀‖_F / ‖S‖_F of the returned solution.
    method : "direct" or "iterative".
    tau : (D,) integrated autocorrelation time of each coordinate θ_d (iterations).
    tau_worst : sup over linear functionals vᵀθ of τ_int (exact, see :func:`autocorrelation_times`).
    tau_spectral : 2/μ_min(ΛH) − 1, seed 003 Prop. 4.4 (no momentum only; else nan).
    spectral_radius_is_bound : True when ``spectral_radius`` is the certified upper bound
        1 − λ_min(S^{-1/2}Q₀S^{-1/2}) (valid for a positive map with S = P(S) + Q₀, S, Q₀ ≻ 0),
        used for state dimensions above ``ARPACK_MAX_DIM`` and for out-of-core (streamed) expansions.
    augmented_cov : full second moment of (d, ν) with momentum (2D, 2D), else equal to ``cov``.
    transition : the proxy's transition matrix F (I − ΛH, or the augmented one with momentum).
    """

    cov: np.ndarray
    spectral_radius: float
    relative_residual: float
    method: str
    tau: np.ndarray
    tau_worst: float
    tau_spectral: float
    augmented_cov: np.ndarray
    step_matrix: np.ndarray
    momentum: float
    inv_temperature: float
    batch_size: int
    without_replacement: bool
    transition: np.ndarray
    spectral_radius_is_bound: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"cov": self.cov, "spectral_radius": self.spectral_radius,
                "relative_residual": self.relative_residual, "method": self.method, "tau": self.tau,
                "tau_worst": self.tau_worst}


# --------------------------------------------------------------------------- public API
@cites("wang2026", "Thm. 4.3 (without replacement: × (N−B)/(N−1))")
def finite_population_factor(n_data: int, batch_size: int, without_replacement: bool) -> float:
    """f = (N−B)/(N−1) for batches drawn without replacement, 1 with replacement (Thm. 4.3)."""
    return (n_data - batch_size) / (n_data - 1) if without_replacement else 1.0


@cites("wang2026", "Thm. 4.3, Eq. (12)")
def noise_covariance(expansion: Expansion, stationary_cov: Any, *, batch_size: int,
                     without_replacement: bool = False) -> np.ndarray:
    r"""C̄(Σ) = (f/B) [𝓘 − ḡḡᵀ + mean_n J_nΣJ_n − JΣJ]  (seed 003, Eq. 12).

    The expected covariance of the minibatch gradient of the proxy chain at stationarity.
    The printed statement of Thm. 4.3 subtracts the scalar ‖Γθ̂‖²/N²; its proof (and the
    mathematics) gives the outer product ḡḡᵀ with ḡ = mean_n g_n = −Γθ̂/N, which is
    what is implemented. f = (N−B)/(N−1) without replacement, else 1.

    Parameters
    ----------
    expansion : Expansion at θ̂.
    stationary_cov : (D, D) Σ.
    batch_size : B.
    without_replacement : minibatches drawn without replacement.
    """
    n, d = expansion.n_data, expansion.dim
    B = _check_batch(batch_size, n)
    sigma = _as_sym(stationary_cov, "stationary_cov", d)
    J = expansion.curvature
    f = finite_population_factor(n, B, without_replacement)
    c = (expansion.gradient_cov() + expansion.mean_jsj(sigma) - J @ sigma @ J) * (f / B)
    return 0.5 * (c + c.T)


@cites("wang2026", "§2.1: Λ a D×D step-size matrix (scalar λ means Λ = λI)")
def as_step_matrix(step: Any, dim: int, *, name: str = "step_matrix") -> np.ndarray:
    """Λ as a (D, D) array from a scalar λ (Λ = λI), a (D,) diagonal or a (D, D) matrix."""
    arr = as_float_array(step, name)
    if arr.ndim == 0:
        lam = float(arr)
        if not lam > 0:
            raise SgtuneError(f"{name} must be > 0, got {lam}")
        return lam * np.eye(dim)
    if arr.ndim == 1:
        if arr.shape[0] != dim:
            raise ShapeError(f"{name} (diagonal) must have length D = {dim} but has length {arr.shape[0]}")
        if not np.all(arr > 0):
            raise SgtuneError(f"{name} (diagonal) must be positive, smallest entry is {arr.min():g}")
        return np.diag(arr)
    if arr.shape != (dim, dim):
        raise ShapeError(f"{name} must be (D, D) = ({dim}, {dim}) but has shape {arr.shape}")
    symmetric = is_symmetric(arr) or np.linalg.norm(arr - arr.T) <= 1e-12 * np.linalg.norm(arr)
    if symmetric:  # a non-symmetric Λ is allowed for SGD; its stability is checked by the solver
        lam_min = float(np.linalg.eigvalsh(0.5 * (arr + arr.T))[0])
        if not lam_min > 0:
            raise NotPositiveDefiniteError(
                f"{name} Λ must be symmetric positive definite, but its smallest eigenvalue is {lam_min:.4g}; "
                "pass a positive-definite step-size matrix (e.g. the output of sgtune lambda)")
    return arr.copy()


@cites("wang2026", "Prop. 4.2, Eq. (11); Thm. 4.3, Eq. (12); Prop. B.1 (momentum, general Λ)")
def predict_stationary_cov(expansion: Expansion, step_matrix: Any, *, batch_size: int,
                           inv_temperature: float = math.inf, without_replacement: bool = False,
                           momentum: float = 0.0, method: str | None = None,
                           tol: float = 1e-13, initial_guess: Any = None,
                           radius_bound: bool = False) -> StationaryCov:
    r"""Solve ΛHΣ + ΣHΛ = Λ(C̄(Σ) + HΣH)Λ + 2β⁻¹Λ for Σ (seed 003 Eqs. 11–12; momentum: Prop. B.1).

    Computes the exact stationary covariance of the proxy SG(L)D chain (exact for linear
    regression; O(λ/B) accurate in W₂ otherwise, Cor. 4.6) for any step-size matrix Λ
    (scalar, diagonal or dense; symmetric positive definite when β < ∞), with or without
    replacement, with heavy-ball momentum κ (the augmented (d, ν) chain is solved for any
    Λ; the paper's eq. B.3 is the Λ = λI special case and is used as a test).

    Parameters
    ----------
    expansion : Expansion
        Quantities at θ̂ (from :func:`sgtune.models.expand`).
    step_matrix : float, (D,) or (D, D)
        Λ.
    batch_size : int
        B, 1 ≤ B ≤ N.
    inv_temperature : float
        β; ``inf`` is SGD, N the canonical SGLD temperature.
    without_replacement : bool
        Minibatches drawn without replacement (noise × (N−B)/(N−1)).
    momentum : float
        κ ∈ [0, 1).
    method : {"direct", "iterative", None}
        Dense Kronecker solve (state dimension ≤ 20 by default) or matrix-free GMRES
        preconditioned by a Stein solve.
    tol : float
        Relative tolerance of the iterative solve.
    initial_guess : (D, D) array, optional
        Warm start for the iterative solve (e.g. the target of a tuned Λ: if it already
        satisfies the equation to machine precision it is returned after one residual check).
    radius_bound : bool
        Iterative path: report the certified bound 1 − λ_min(S^{-1/2}Q₀S^{-1/2}) ≥ ρ at every state
        dimension instead of ARPACK's ρ below ``ARPACK_MAX_DIM`` (no eigen-iteration, O(D³);
        ``spectral_radius_is_bound`` says which; ARPACK is still used when the bound is void).

    Returns
    -------
    StationaryCov

    Raises
    ------
    UnstableStepSizeError
        If the second-moment map has spectral radius ≥ 1; the message gives the largest
        stable multiple of Λ.
    ConvergenceError
        If the solution's relative residual exceeds 1e-6.

    Examples
    --------
    >>> import numpy as np
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model, expand
    >>> e = expand(get_model("linear"), example("hetero-linear"))
    >>> res = predict_stationary_cov(e, 0.05, batch_size=32)
    >>> bool(res.relative_residual < 1e-10 and res.spectral_radius < 1)
    True
    """
    system = _build_system(expansion, step_matrix, batch_size, inv_temperature, without_replacement,
                           momentum)
    m = system.F.shape[0]
    if method is None:
        method = "direct" if m <= DIRECT_MAX_DIM else "iterative"
    if method not in ("direct", "iterative"):
        raise SgtuneError(f"method must be 'direct', 'iterative' or None, got {method!r}")
    _check_deterministic_stability(system)
    is_bound = False
    if method == "direct":
        S, rho = _solve_direct(system)
    else:
        S0 = None
        if initial_guess is not None and system.momentum == 0.0:
            S0 = _as_sym(initial_guess, "initial_guess", system.dim)
        S = _solve_iterative(system, tol, S0)
        # ARPACK applies the operator tens of times: for rows read out of core each application is a
        # pass over the data, so streamed expansions take the certified bound (no pass) at every size
        if m <= ARPACK_MAX_DIM and not radius_bound and expansion.stream is None:
            rho, is_bound = _spectral_radius_iterative(system, S)
        else:
            rho = _spectral_radius_bound(system, S)
            is_bound = True
            if not rho < 1:  # void bound: Q₀ singular (momentum without injected noise) — compute ρ instead
                rho, is_bound = _spectral_radius_iterative(system, S)
    if not rho < 1:
        _raise_unstable(system, rho)
    res = _relative_residual(system, S)
    if res > FAIL_RESIDUAL:
        raise ConvergenceError(
            f"stationary covariance solve ({method}) reached relative residual {res:.2e} > {FAIL_RESIDUAL}; "
            "the chain is probably close to unstable — reduce the step size", residual=res, method=method)
    if res > WARN_RESIDUAL:
        warnings.warn(f"stationary covariance relative residual {res:.2e} > {WARN_RESIDUAL}", AccuracyWarning,
                      stacklevel=2)
    d = system.dim
    cov = 0.5 * (S[:d, :d] + S[:d, :d].T)
    tau, tau_worst = _tau_from_system(system, S)
    tau_spec = math.nan
    if system.momentum == 0.0:
        mu = np.linalg.eigvals(system.lam @ system.H).real
        tau_spec = 2.0 / mu.min() - 1.0
    return StationaryCov(cov=cov, spectral_radius=float(rho), relative_residual=float(res), method=method,
                         tau=tau, tau_worst=tau_worst, tau_spectral=float(tau_spec), augmented_cov=S,
                         step_matrix=system.lam, momentum=system.momentum,
                         inv_temperature=system.beta, batch_size=system.B,
                         without_replacement=without_replacement, transition=system.F,
                         spectral_radius_is_bound=is_bound)


@cites("wang2026", "Eqs. (2)–(3) (CT), Eq. (5) (DQ+const), Eqs. (5)–(6) (LR+WS), Eqs. (11)–(12)")
def predict_comparison_cov(expansion: Expansion, step_matrix: Any, *, batch_size: int, theory: str,
                           inv_temperature: float = math.inf, without_replacement: bool = False) -> np.ndarray:
    r"""Σ predicted by a comparison theory: ΛHΣ + ΣHΛᵀ = Λ(C_th(Σ) [+ HΣH])Λᵀ + 2Λ/β.

    - ``ct``: the OU proxy, ΛHΣ + ΣHΛᵀ = ΛĈΛᵀ + 2Λ/β (no HΣH term), Ĉ = f(𝓘 − ḡḡᵀ)/B;
    - ``dq-const``: eq. (5) with the constant noise Ĉ, i.e. Σ = AΣAᵀ + ΛĈΛᵀ + 2Λ/β;
    - ``lr-ws``: eqs. (5)–(6), C(Σ) = (f/B)(JΣJ + tr(JΣ)J + (σ̂²/σ²)J) (linear models only);
    - ``dq-exact``: :func:`predict_stationary_cov` (returned for convenience).

    These are the *predictions* each theory makes for a given Λ (seed 003 Fig. 1, E.1, E.2),
    to compare with the exact one and with simulation. Dense solves in D² unknowns
    (``lr-ws``) or a Lyapunov/Stein solve (``ct``, ``dq-const``).
    """
    if theory not in THEORIES:
        raise SgtuneError(f"theory must be one of {', '.join(THEORIES)}, got {theory!r}")
    system = _build_system(expansion, step_matrix, batch_size, inv_temperature, without_replacement, 0.0)
    if theory == "dq-exact":
        return predict_stationary_cov(expansion, step_matrix, batch_size=batch_size,
                                      inv_temperature=inv_temperature,
                                      without_replacement=without_replacement).cov
    lam, H, d = system.lam, system.H, system.dim
    f_over_b = system.noise_scale
    C_hat = expansion.gradient_cov() * f_over_b
    inj = 2.0 * lam / system.beta if math.isfinite(system.beta) else np.zeros((d, d))
    if theory == "ct":
        S = sla.solve_continuous_lyapunov(lam @ H, lam @ C_hat @ lam.T + inj)
    elif theory == "dq-const":
        if not np.max(np.abs(np.linalg.eigvals(system.F))) < 1:
            _raise_unstable(system, np.inf)
        S = sla.solve_discrete_lyapunov(system.F, lam @ C_hat @ lam.T + inj)
    else:
        if math.isnan(expansion.residual_variance):  # only Gaussian linear models provide it
            raise SgtuneError("theory 'lr-ws' assumes a well-specified linear regression (a model with a "
                              f"residual variance); the model is {expansion.model!r}")
        J = expansion.curvature
        ratio = expansion.residual_variance / expansion.noise_variance
        # vec(ΛJΣJΛᵀ) = (ΛJ ⊗ ΛJ) vec Σ; vec(tr(JΣ) ΛJΛᵀ) = vec(ΛJΛᵀ) vec(J)ᵀ vec Σ
        LJ = lam @ J
        op = (np.eye(d * d) - np.kron(system.F, system.F)
              - f_over_b * (np.kron(LJ, LJ) + np.outer((lam @ J @ lam.T).ravel(), J.ravel())))
        rhs = f_over_b * ratio * lam @ J @ lam.T + inj
        S = np.linalg.solve(op, rhs.ravel()).reshape(d, d)
    return 0.5 * (S + S.T)


@cites("wang2026", "Prop. B.2 (corrected: weighted, symmetrised lag sum)")
def iterate_average_cov(stationary: StationaryCov, window: int) -> np.ndarray:
    r"""Σ^(k) = k⁻²[kΣ + Σ_{m=1}^{k−1}(k−m)(A^mΣ + ΣA^{mᵀ})] for the mean of k stationary iterates.

    A is the proxy transition matrix (I − ΛH, or the augmented F with momentum; the
    result is the θ block). The sum is evaluated in closed form,
    Σ_{m=1}^{k−1}(k−m)A^m = [kA(I−A) − A(I−A^k)](I−A)⁻², so the cost does not grow with k.

    Seed 003's Prop. B.2 prints k⁻²(kΣ + 2Σ_m A^mΣ): it drops the weights (k−m) and the
    transpose, which is wrong by a factor ≈ k for large k (a lag m appears k−m times in
    the double sum). The correct form is implemented and tested against simulation.

    Parameters
    ----------
    stationary : StationaryCov from :func:`predict_stationary_cov`.
    window : k ≥ 1, the number of consecutive iterates averaged.
    """
    k = check_int(window, "window", low=1)
    S = stationary.augmented_cov
    m = S.shape[0]
    F = stationary.transition
    I = np.eye(m)
    IF = I - F
    Fk = np.linalg.matrix_power(F, k)
    num = k * F @ IF - F @ (I - Fk)
    G = np.linalg.solve(IF.T, np.linalg.solve(IF.T, num.T)).T  # num (I−F)⁻²
    GS = G @ S
    out = (k * S + GS + GS.T) / k**2
    d = stationary.cov.shape[0]
    out = out[:d, :d]
    return 0.5 * (out + out.T)


@cites("wang2026", "Prop. 4.4 and its definition τ_int(f_v) = 1 + 2Σ_k ρ_k")
def autocorrelation_times(stationary: StationaryCov) -> tuple[np.ndarray, float]:
    r"""τ_d = 2[(I−A)⁻¹Σ]_dd / Σ_dd − 1 per coordinate and τ = sup_v τ_int(vᵀθ).

    Uses Cov(z_{t+k}, z_t) = A^k S for the proxy chain, so Σ_{k≥0} A^k S = (I−A)⁻¹S.
    With W = [(I−A)⁻¹S]_θθ, τ_int(vᵀθ) = 2 vᵀWv / vᵀΣv − 1, so the worst case over linear
    functionals is 2 μ_max − 1 with μ_max the largest generalised eigenvalue of
    (sym(W), Σ). Seed 003 Prop. 4.4 states the value
    2/μ_min(ΛH) − 1; this equals the exact supremum when ΛH and Σ commute (e.g. scalar Λ
    with Σ ∝ H⁻¹) and can differ otherwise, so both are reported
    (``tau_worst`` exact, ``tau_spectral`` Prop. 4.4).
    """
    return stationary.tau, stationary.tau_worst


@cites("wang2026", "Prop. 4.2 / Thm. 4.3: S_t = 𝒫(S_{t−1}) + Q₀, so S_t − Σ = 𝒫^t(S_0 − Σ)")
def equilibration_steps(spectral_radius: float, tol: float = 0.01) -> float:
    """Steps from θ̂ until the chain's second moments are within ``tol`` of their stationary values.

    The second moment of the proxy chain obeys S_t = 𝒫(S_{t−1}) + Q₀ (seed 003, Eqs. 11–12), so
    S_t − Σ = 𝒫^t(S_0 − Σ) and, started at θ̂ (S_0 = 0), the relative deviation decays like ρ(𝒫)^t:
    t = ⌈ln(1/tol) / (−ln ρ)⌉. This is a burn-in for the *covariance*: it differs from τ_worst, the
    integrated autocorrelation time (which sets how many draws an estimate needs), because the slowest
    eigen-direction of 𝒫 may carry little of the autocorrelation of any single linear functional.
    Returns ``inf`` for ρ ≥ 1 (no stationary law).
    """
    rho = float(spectral_radius)
    if not 0.0 < tol < 1.0:
        raise SgtuneError(f"tol must be in (0, 1), got {tol}")
    if not math.isfinite(rho) or rho >= 1.0:
        return math.inf
    if rho <= 0.0:
        return 1.0
    return float(math.ceil(math.log(1.0 / tol) / -math.log1p(rho - 1.0)))


@cites("wang2026", "Prop. 4.4 (deterministic bound 2/μ_max(ΛH)) and Eqs. (11)–(12) (noise)")
def max_stable_step(expansion: Expansion, step_matrix: Any, *, batch_size: int,
                    without_replacement: bool = False, momentum: float = 0.0,
                    rtol: float = 1e-3) -> float:
    r"""Largest c such that the chain with step matrix cΛ is second-moment stable.

    Without noise the bound is c < 2/μ_max(ΛH) (Prop. 4.4); the multiplicative minibatch
    noise (f/B)(mean J_nΣJ_n − JΣJ) lowers it. Found by bisection on the spectral radius
    of the second-moment map (relative accuracy ``rtol``). β does not affect stability.
    """
    base = _build_system(expansion, step_matrix, batch_size, math.inf, without_replacement, momentum)
    return _max_stable_multiplier(base, rtol)


# --------------------------------------------------------------------------- internals
@dataclass(frozen=True)
class _System:
    """S = F S Fᵀ + E 𝒩(S_dd) Eᵀ + Q0, 𝒩(Σ) = noise_scale·(mean J_nΣJ_n − JΣJ)."""

    expansion: Expansion
    lam: np.ndarray
    H: np.ndarray
    F: np.ndarray
    E: np.ndarray
    Q0: np.ndarray
    noise_scale: float
    dim: int
    momentum: float
    beta: float
    B: int
    without_replacement: bool

    def noise(self, sigma_dd: np.ndarray) -> np.ndarray:
        e = self.expansion
        J = e.curvature
        return self.noise_scale * (e.mean_jsj(sigma_dd) - J @ sigma_dd @ J)

    def apply(self, S: np.ndarray) -> np.ndarray:
        """The second-moment map P(S) = FSFᵀ + E𝒩(S_dd)Eᵀ (without Q0)."""
        d = self.dim
        N = self.noise(0.5 * (S[:d, :d] + S[:d, :d].T))
        return self.F @ S @ self.F.T + self.E @ N @ self.E.T


def _check_batch(batch_size: int, n: int) -> int:
    return check_int(batch_size, "batch_size", low=1, high=n)


def _as_sym(a: Any, name: str, d: int) -> np.ndarray:
    arr = as_float_array(a, name)
    if arr.shape != (d, d):
        raise ShapeError(f"{name} must be (D, D) = ({d}, {d}) but has shape {arr.shape}")
    if not is_symmetric(arr) and np.linalg.norm(arr - arr.T) > 1e-10 * np.linalg.norm(arr):
        raise NotPositiveDefiniteError(f"{name} must be symmetric")
    return 0.5 * (arr + arr.T)


def _build_system(expansion: Expansion, step_matrix: Any, batch_size: int, inv_temperature: float,
                  without_replacement: bool, momentum: float) -> _System:
    n, d = expansion.n_data, expansion.dim
    B = _check_batch(batch_size, n)
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    kappa = check_probability(momentum, "momentum")
    lam = as_step_matrix(step_matrix, d)
    if math.isfinite(beta):
        if not is_symmetric(lam) and np.linalg.norm(lam - lam.T) > 1e-12 * np.linalg.norm(lam):
            raise NotPositiveDefiniteError(
                "step_matrix must be symmetric positive definite for SGLD (finite inverse temperature), "
                "since the injected noise is N(0, 2Λ/β)")
        lam = 0.5 * (lam + lam.T)
        try:
            np.linalg.cholesky(lam)
        except np.linalg.LinAlgError:
            raise NotPositiveDefiniteError(
                f"step_matrix must be positive definite for SGLD; smallest eigenvalue "
                f"{np.linalg.eigvalsh(lam)[0]:.3g}") from None
    f = finite_population_factor(n, B, without_replacement)
    H = expansion.hessian
    C0 = expansion.gradient_cov() * (f / B)
    I = np.eye(d)
    if kappa == 0.0:
        F = I - lam @ H
        E = -lam
        Q0 = lam @ C0 @ lam.T
        if math.isfinite(beta):
            Q0 = Q0 + 2.0 * lam / beta
    else:
        F = np.block([[I - lam @ H, -kappa * lam], [H, kappa * I]])
        E = np.vstack([-lam, I])
        Q0 = E @ C0 @ E.T
        if math.isfinite(beta):
            Q0[:d, :d] += 2.0 * lam / beta
    Q0 = 0.5 * (Q0 + Q0.T)
    return _System(expansion, lam, H, F, E, Q0, f / B, d, kappa, beta, B, without_replacement)


def _noise_matrix(system: _System) -> np.ndarray:
    """Dense D²×D² matrix of 𝒩 on C-order vec (direct path only, small D)."""
    return system.noise_scale * _variance_kernel(system.expansion)


def _variance_kernel(e: Expansion) -> np.ndarray:
    """vec-matrix of Σ ↦ mean_n J_nΣJ_n − JΣJ (D²×D²), accumulated in row blocks of 4096."""
    d = e.dim
    J = e.curvature
    if e.stream is not None:  # rows out of core: streamed over chunks (sgtune.io.reduce)
        return e.variance_kernel_sum() - np.kron(J, J)
    K = np.zeros((d * d, d * d))
    if e.rank_one:
        X, w = e.design, e.weights
        for start in range(0, e.n_samples, 4096):
            xb = X[start:start + 4096]
            Z = (w[start:start + 4096][:, None, None] * xb[:, :, None] * xb[:, None, :]).reshape(len(xb), d * d)
            K += Z.T @ Z
    else:
        Hs = e.per_sample_hessians
        G = np.zeros((d * d, d * d))  # G[(i,j),(k,l)] = Σ_n J_n[i,j] J_n[k,l]: one BLAS product per block
        for start in range(0, e.n_samples, 4096):
            Z = Hs[start:start + 4096].reshape(-1, d * d)
            G += Z.T @ Z
        K += G.reshape(d, d, d, d).transpose(0, 2, 1, 3).reshape(d * d, d * d)  # K[(i,k),(j,l)]
    K /= e.n_samples
    return K - np.kron(J, J)


def _full_operator(system: _System, kernel: np.ndarray | None = None) -> np.ndarray:
    """Dense matrix of P on C-order vec of the m×m state moment."""
    m, d = system.F.shape[0], system.dim
    P = np.kron(system.F, system.F)
    noise = _noise_matrix(system) if kernel is None else system.noise_scale * kernel
    EN = np.kron(system.E, system.E) @ noise  # (m², d²)
    # selection of the dd block from the m×m vec
    idx = (np.arange(d)[:, None] * m + np.arange(d)[None, :]).ravel()
    P[:, idx] += EN
    return P


def _solve_direct(system: _System) -> tuple[np.ndarray, float]:
    m = system.F.shape[0]
    P = _full_operator(system)
    rho = float(np.max(np.abs(np.linalg.eigvals(P))))
    if not rho < 1:
        return np.full((m, m), np.nan), rho
    S = np.linalg.solve(np.eye(m * m) - P, system.Q0.ravel()).reshape(m, m)
    return 0.5 * (S + S.T), rho


class _Stein:
    """Exact solver of X = F X Fᵀ + Q through one eigendecomposition of F."""

    def __init__(self, system: _System) -> None:
        F = system.F
        lam = system.lam
        if system.momentum == 0.0 and is_symmetric(lam):
            try:
                L = np.linalg.cholesky(lam)
                mu, U = np.linalg.eigh(L.T @ system.H @ L)
                self.V = L @ U
                self.Vinv = sla.solve_triangular(L, np.eye(L.shape[0]), lower=True)
                self.Vinv = U.T @ self.Vinv
                self.a = 1.0 - mu
                self.real = True
                self._finish()
                return
            except np.linalg.LinAlgError:
                pass
        a, V = np.linalg.eig(F)
        self.F = F
        # near a defective F (e.g. critically damped momentum) the eigenvectors are ill-conditioned:
        # fall back to scipy's Schur-based (Bartels–Stewart) Stein solver, O(m³) per call
        self.fallback = bool(np.linalg.cond(V) > 1e6)
        self.a, self.V = a, V
        self.Vinv = None if self.fallback else np.linalg.inv(V)
        self.real = bool(np.all(np.isreal(a)) and np.all(np.isreal(V)))
        if self.real:
            self.a, self.V = a.real, V.real
            self.Vinv = None if self.fallback else self.Vinv.real
        self._finish()

    def _finish(self) -> None:
        self.denom = 1.0 - np.outer(self.a, self.a)

    def solve(self, Q: np.ndarray) -> np.ndarray:
        if getattr(self, "fallback", False):
            X = sla.solve_discrete_lyapunov(self.F, Q, method="bilinear")
            return 0.5 * (X + X.T)
        Qt = self.Vinv @ Q @ self.Vinv.T
        X = self.V @ (Qt / self.denom) @ self.V.T
        if not self.real:
            X = X.real
        return 0.5 * (X + X.T)


def _solve_iterative(system: _System, tol: float, S0: np.ndarray | None = None) -> np.ndarray:
    m, d = system.F.shape[0], system.dim
    if S0 is not None:
        R0 = system.Q0 - (S0 - system.apply(S0))
        if np.linalg.norm(R0) <= 1e-14 * np.linalg.norm(S0):
            return S0
    stein = _Stein(system)
    E = system.E

    def op(yvec: np.ndarray) -> np.ndarray:
        Y = yvec.reshape(m, m)
        X = stein.solve(Y)
        return (Y - E @ system.noise(X[:d, :d]) @ E.T).ravel()

    A = LinearOperator((m * m, m * m), matvec=op, dtype=float)
    if S0 is None:
        rhs, S = system.Q0.copy(), np.zeros((m, m))
    else:
        rhs, S = 0.5 * (R0 + R0.T), S0.copy()
    for _ in range(4):  # iterative refinement on the true residual
        y, info = gmres(A, rhs.ravel(), rtol=tol, atol=0.0, restart=60, maxiter=40)
        S = S + stein.solve(y.reshape(m, m))
        R = system.Q0 - (S - system.apply(S))
        if np.linalg.norm(R) <= 1e-13 * np.linalg.norm(S):
            break
        rhs = 0.5 * (R + R.T)
    return 0.5 * (S + S.T)


def _spectral_radius_iterative(system: _System, S: np.ndarray) -> tuple[float, bool]:
    r"""Perron root ρ(P) of the positive map P, and whether the value is only an upper bound.

    ARPACK (implicitly restarted Arnoldi on the m²-dimensional operator) first. Its answer is
    accepted only when it is the Perron pair the theory guarantees for a positive map: a real,
    non-negative eigenvalue whose eigenvector (as an m×m matrix) is positive semidefinite, with a
    small residual. ARPACK can return a value that is not an eigenvalue at all for these
    nonsymmetric operators (scipy issues #8307, #6827, #23163; seen here with momentum:
    −2.7 − 2.2i for a map of norm 1.98 whose ρ is 0.60, and a false "unstable" error), or a
    non-Perron member of a tight cluster (0.59987 for ρ = 0.60149, again with momentum: every
    underdamped heavy-ball mode has |z|² = κ exactly, so with little minibatch noise the Perron root
    sits just above a cluster of eigenvalues of modulus κ). When the check fails, ρ comes from the
    dense eigenvalues of P on symmetric matrices for m ≤ ``DENSE_RADIUS_MAX_DIM``
    (:func:`_dense_symmetric_radius`), else from the power iteration on positive-definite iterates
    with the Collatz–Wielandt bracket of a cone-preserving map,
    λ_min(X^{-1/2}P(X)X^{-1/2}) ≤ ρ ≤ λ_max(X^{-1/2}P(X)X^{-1/2}) for X ≻ 0
    (its midpoint once the bracket has closed to 1e-7 relative; else its upper end, flagged as a bound).
    """
    m = system.F.shape[0]
    if not np.all(np.isfinite(S)):
        return math.inf, False
    op = LinearOperator((m * m, m * m), matvec=lambda v: system.apply(v.reshape(m, m)).ravel(),
                        dtype=float)
    try:
        vals, vecs = eigs(op, k=1, which="LM", v0=S.ravel() / np.linalg.norm(S), tol=1e-8,
                          maxiter=max(200, 20 * m))
        rho = _perron_or_nan(system, complex(vals[0]), vecs[:, 0])
        if math.isfinite(rho):
            return rho, False
    except Exception:  # ARPACK non-convergence: the fallbacks below
        pass
    if m <= DENSE_RADIUS_MAX_DIM:
        return _dense_symmetric_radius(system), False
    return _bracketed_power_radius(system, S)


def _dense_symmetric_radius(system: _System) -> float:
    """ρ(P) from the dense eigenvalues of P restricted to symmetric matrices (m(m+1)/2 unknowns).

    P maps symmetric matrices to symmetric matrices and its Perron eigenvector is symmetric, so
    the restriction has the same spectral radius at an eighth of the cost of the m²×m² matrix.
    """
    m = system.F.shape[0]
    P = _full_operator(system)
    iu, ju = np.triu_indices(m)
    rows = iu * m + ju  # vech(Y): the upper triangle of vec(Y)
    cols = P[:, iu * m + ju] + np.where(iu != ju, 1.0, 0.0)[None, :] * P[:, ju * m + iu]  # vec(X) = Dup vech(X)
    return float(np.max(np.abs(np.linalg.eigvals(cols[rows]))))


def _perron_or_nan(system: _System, lam: complex, vec: np.ndarray) -> float:
    """λ if (λ, vec) is a Perron pair of P (real λ ≥ 0, PSD eigenvector, small residual), else nan."""
    m = system.F.shape[0]
    if not (abs(lam.imag) <= 1e-8 * max(abs(lam), 1e-300) and lam.real >= 0):
        return math.nan
    v = vec * np.exp(-1j * np.angle(vec[np.argmax(np.abs(vec))]))  # the phase that makes it real
    V = v.real.reshape(m, m)
    V = 0.5 * (V + V.T)
    if np.trace(V) < 0:
        V = -V
    nv = float(np.linalg.norm(V))
    if nv == 0 or np.linalg.eigvalsh(V)[0] < -1e-6 * nv:
        return math.nan
    res = float(np.linalg.norm(system.apply(V) - lam.real * V))
    return float(lam.real) if res <= 1e-6 * max(lam.real, 1e-300) * nv else math.nan


def _bracketed_power_radius(system: _System, S: np.ndarray, max_iter: int = 2000,
                            rtol: float = 1e-7) -> tuple[float, bool]:
    """Power iteration X ← P(X)/‖P(X)‖ from the stationary S ≻ 0 with the Collatz–Wielandt bracket."""
    X = S / np.linalg.norm(S)
    lo, hi = 0.0, math.inf
    for k in range(max_iter):
        Y = system.apply(X)
        if k % 10 == 0 or k == max_iter - 1:
            try:
                ev = sla.eigh(0.5 * (Y + Y.T), 0.5 * (X + X.T), eigvals_only=True)
                lo, hi = max(lo, float(ev[0])), min(hi, float(ev[-1]))
            except (np.linalg.LinAlgError, ValueError):  # X lost definiteness: no bracket from this iterate
                pass
            if hi - lo <= rtol * hi:
                return 0.5 * (lo + hi), False
        nrm = float(np.linalg.norm(Y))
        if not nrm > 0:
            return 0.0, False
        X = Y / nrm
    return hi, True


def stationary_cov_evaluator(expansion: Expansion, *, batch_size: int, inv_temperature: float = math.inf,
                             without_replacement: bool = False, momentum: float = 0.0) -> Any:
    """A fast Λ ↦ Σ(Λ) for repeated solves (tuning families); returns None when unstable.

    Caches the D²×D² noise kernel for small systems. Stability is decided without an
    eigenvalue computation: when Q₀ ≻ 0, a positive-definite solution of S − P(S) = Q₀
    exists iff the positive map P has spectral radius < 1, so a failed Cholesky of the
    solution (or ρ(F) ≥ 1) means unstable.
    """
    kernel = _variance_kernel(expansion) if (expansion.dim * (2 if momentum else 1)) <= DIRECT_MAX_DIM else None

    def evaluate(step_matrix: Any) -> np.ndarray | None:
        system = _build_system(expansion, step_matrix, batch_size, inv_temperature, without_replacement,
                               momentum)
        m = system.F.shape[0]
        if not np.max(np.abs(np.linalg.eigvals(system.F))) < 1:
            return None
        if kernel is not None:
            P = _full_operator(system, kernel)
            S = np.linalg.solve(np.eye(m * m) - P, system.Q0.ravel()).reshape(m, m)
        else:
            S = _solve_iterative(system, 1e-12)
        S = 0.5 * (S + S.T)
        try:
            np.linalg.cholesky(S)
        except np.linalg.LinAlgError:
            return None
        return S[:system.dim, :system.dim]

    return evaluate


def _spectral_radius_bound(system: _System, S: np.ndarray) -> float:
    """ρ(P) ≤ 1 − λ_min(S^{-1/2} Q₀ S^{-1/2}) since P(S) = S − Q₀ and P is a positive map."""
    try:
        L = np.linalg.cholesky(S)
        Li = np.linalg.inv(L)
        return float(1.0 - np.linalg.eigvalsh(Li @ system.Q0 @ Li.T)[0])
    except np.linalg.LinAlgError:
        return math.inf


def _check_deterministic_stability(system: _System) -> None:
    rho_F = float(np.max(np.abs(np.linalg.eigvals(system.F))))
    if not rho_F < 1:
        _raise_unstable(system, rho_F * rho_F)


def _raise_unstable(system: _System, rho: float) -> None:
    c = _max_stable_multiplier(system, 1e-3)
    if not c > 0:
        raise UnstableStepSizeError(
            f"step_matrix is unstable for every positive multiple (spectral radius {rho:.4g} >= 1): ΛH has an "
            "eigenvalue with non-positive real part; use a symmetric positive-definite Λ (e.g. from sgtune lambda)",
            spectral_radius=rho, max_stable_step=0.0)
    raise UnstableStepSizeError(
        f"step_matrix is unstable: the second-moment map has spectral radius {rho:.4g} >= 1; "
        f"scale the step size by less than {c:.4g} (largest stable multiple of Λ; without noise the bound "
        f"is λ < 2/μ_max(ΛH), seed 003 Prop. 4.4)", spectral_radius=rho, max_stable_step=c)


def _radius_scaled(system: _System, c: float, kernel: np.ndarray | None = None) -> float:
    sysc = _build_system(system.expansion, c * system.lam, system.B, math.inf, system.without_replacement,
                         system.momentum)
    rho_F = float(np.max(np.abs(np.linalg.eigvals(sysc.F))))
    if not rho_F < 1:
        return rho_F**2
    m = sysc.F.shape[0]
    if m <= DIRECT_MAX_DIM:
        return float(np.max(np.abs(np.linalg.eigvals(_full_operator(sysc, kernel)))))
    X = _Stein(sysc).solve(np.eye(m))
    return _spectral_radius_iterative(sysc, X)[0]


def _max_stable_multiplier(system: _System, rtol: float) -> float:
    lo, hi = 0.0, 1.0
    kernel = _variance_kernel(system.expansion) if system.F.shape[0] <= DIRECT_MAX_DIM else None
    # grow/shrink a bracket around the stability boundary
    while _radius_scaled(system, hi, kernel) < 1:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            return math.inf
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if _radius_scaled(system, mid, kernel) < 1:
            lo = mid
        else:
            hi = mid
    return lo


def _relative_residual(system: _System, S: np.ndarray) -> float:
    R = S - system.apply(S) - system.Q0
    return float(np.linalg.norm(R) / np.linalg.norm(S))


def _tau_from_system(system: _System, S: np.ndarray) -> tuple[np.ndarray, float]:
    d = system.dim
    m = S.shape[0]
    W = np.linalg.solve(np.eye(m) - system.F, S)[:d, :d]  # Σ_k A^k S, θ block
    sig = S[:d, :d]
    diag = np.diag(sig)
    tau = 2.0 * np.diag(W) / diag - 1.0
    Ws = 0.5 * (W + W.T)
    try:
        top = sla.eigh(Ws, 0.5 * (sig + sig.T), eigvals_only=True)[-1]
        worst = float(2.0 * top - 1.0)
    except (np.linalg.LinAlgError, ValueError):
        worst = float(np.max(tau))
    return tau, worst
