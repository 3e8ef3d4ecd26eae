r"""Target-covariance tuning: the step-size matrix Λ that makes SG(L)D's stationary covariance Σ*.

Public functions first (``tune``, ``solve_step_matrix``, ``tuning_residual``,
``closed_form_step_matrix``), private helpers after.

With Σ fixed at the target, eq. (11) of seed 003 is the quadratic matrix equation

    ΛHΣ + ΣHΛ − ΛRΛ − (2/β)Λ = 0,     R = C̄(Σ) + HΣH,

whose invertible solution satisfies, with Y = Λ⁻¹, the continuous Lyapunov equation
(HΣ − I/β)Y + Y(ΣH − I/β) = R. With Σ = LLᵀ and Z = LᵀYL it becomes
(M − I/β)Z + Z(M − I/β) = LᵀRL with M = LᵀHL symmetric, solved by one symmetric
eigendecomposition and an elementwise division: Λ = L Z⁻¹ Lᵀ, exactly symmetric positive
definite whenever M − I/β ≻ 0 and R ≻ 0. Every comparison theory of Algorithm 1 is the
same equation with a different noise model R (and so the same solve).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize as sopt

from .._refs import cites
from .._validation import as_spd, check_int, check_positive, check_probability
from ..errors import ConvergenceError, InfeasibleTargetError, SgtuneError, UnstableStepSizeError
from ..models import Expansion
from .stationary import (StationaryCov, finite_population_factor, noise_covariance,
                         predict_stationary_cov, stationary_cov_evaluator)

__all__ = ["TuningResult", "tune", "solve_step_matrix", "tuning_residual", "closed_form_step_matrix",
           "target_covariance", "METHODS", "FAMILIES"]

METHODS = ("dq-exact", "ct", "dq-const", "lr-ws")
FAMILIES = ("dense", "diagonal", "scalar")


@dataclass(frozen=True)
class TuningResult:
    """Result of :func:`tune`.

    Attributes
    ----------
    step_matrix : (D, D) tuned Λ.
    target_cov : (D, D) the target Σ*.
    predicted_cov : (D, D) the exact stationary covariance of the chain run with Λ
        (seed 003 eqs. 11–12, i.e. DQ+exact, whatever ``method`` chose Λ).
    residual : relative residual of the tuning equation the method solves (machine
        precision for every dense method; for the families, of eq. 11 at the target).
    covariance_error : ‖predicted − target‖_F / ‖target‖_F.
    stationary : the full :class:`StationaryCov` of the tuned chain (spectral radius, τ).
    """

    step_matrix: np.ndarray
    target_cov: np.ndarray
    predicted_cov: np.ndarray
    residual: float
    covariance_error: float
    method: str
    family: str
    criterion: str
    stationary: StationaryCov
    batch_size: int
    inv_temperature: float
    momentum: float
    without_replacement: bool

    @property
    def spectral_radius(self) -> float:
        return self.stationary.spectral_radius

    @property
    def tau(self) -> np.ndarray:
        return self.stationary.tau

    @property
    def tau_worst(self) -> float:
        return self.stationary.tau_worst


@cites("wang2026", "§2.2: sandwich J⁻¹𝓘J⁻¹/N, posterior H⁻¹/N")
def target_covariance(expansion: Expansion, target: Any) -> np.ndarray:
    """Σ* from ``"sandwich"`` (J⁻¹𝓘J⁻¹/N), ``"posterior"`` (H⁻¹/N) or a (D, D) SPD array."""
    if isinstance(target, str):
        if target == "sandwich":
            return expansion.sandwich_cov()
        if target == "posterior":
            return expansion.posterior_cov()
        raise SgtuneError(f"target must be 'sandwich', 'posterior' or a (D, D) matrix, got {target!r}")
    return as_spd(target, "target", expansion.dim, rtol=1e-10)


@cites("wang2026", "Eq. (11) solved for Λ via the Lyapunov reduction (THEORY §1.3)")
def solve_step_matrix(hessian: Any, target_cov: Any, noise_rhs: Any, *,
                      inv_temperature: float = math.inf) -> np.ndarray:
    r"""Λ = Y⁻¹ with (HΣ − I/β)Y + Y(ΣH − I/β) = R: the SPD root of ΛHΣ + ΣHΛ = ΛRΛ + 2Λ/β.

    Parameters
    ----------
    hessian : (D, D) H.
    target_cov : (D, D) SPD Σ.
    noise_rhs : (D, D) symmetric positive definite R (e.g. C̄(Σ) + HΣH for DQ+exact).
    inv_temperature : β (``inf`` for SGD).

    Raises
    ------
    InfeasibleTargetError
        When HΣ has an eigenvalue ≤ 1/β: the injected noise alone exceeds the target. The
        message names the smallest feasible inverse temperature 1/μ_min(HΣ).
    """
    H = np.asarray(hessian, dtype=float)
    sigma = as_spd(target_cov, "target_cov", H.shape[0], rtol=1e-10)
    R = np.asarray(noise_rhs, dtype=float)
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    L = np.linalg.cholesky(sigma)
    M = L.T @ H @ L
    mu, U = np.linalg.eigh(0.5 * (M + M.T))
    shift = 0.0 if math.isinf(beta) else 1.0 / beta
    if not mu[0] > shift:
        bmin = 1.0 / mu[0] if mu[0] > 0 else math.inf
        raise InfeasibleTargetError(
            f"target covariance is unreachable at inverse temperature {beta:g}: the injected noise alone "
            f"gives more variance than the target; use an inverse temperature > {bmin:.6g} "
            f"(= 1/μ_min(HΣ)) or a larger target", min_inv_temperature=bmin)
    Rt = U.T @ (L.T @ R @ L) @ U
    Rt = 0.5 * (Rt + Rt.T)
    den = (mu[:, None] - shift) + (mu[None, :] - shift)
    Zt = Rt / den
    # Λ = L Z⁻¹ Lᵀ with Z = U Zt Uᵀ
    try:
        cz = np.linalg.cholesky(Zt)
    except np.linalg.LinAlgError:
        raise SgtuneError(
            "the noise model R = C̄ + HΣH is not positive definite at the target, so no SPD step-size "
            "matrix exists; check that H and the gradient covariance are nonsingular") from None
    W = np.linalg.solve(cz, U.T @ L.T)  # cz⁻¹ Uᵀ Lᵀ
    lam = W.T @ W
    return 0.5 * (lam + lam.T)


@cites("wang2026", "Eq. (11), residual at the target")
def tuning_residual(step_matrix: np.ndarray, hessian: np.ndarray, target_cov: np.ndarray,
                    noise_rhs: np.ndarray, inv_temperature: float = math.inf) -> float:
    """‖ΛHΣ + ΣHΛ − ΛRΛ − 2Λ/β‖_F / ‖ΛHΣ + ΣHΛ‖_F."""
    lam, H, S, R = step_matrix, hessian, target_cov, noise_rhs
    lhs = lam @ H @ S + S @ H @ lam.T
    rhs = lam @ R @ lam.T
    if math.isfinite(inv_temperature):
        rhs = rhs + 2.0 * lam / inv_temperature
    return float(np.linalg.norm(lhs - rhs) / np.linalg.norm(lhs))


@cites("wang2026", "public code of the seed: Λ = (ΣJ + JΣ)(C̄ + JΣJ)⁻¹ (baseline only)")
def closed_form_step_matrix(expansion: Expansion, target_cov: Any, *, batch_size: int,
                            without_replacement: bool = False) -> np.ndarray:
    r"""The seed code's approximate closed form Λ = (ΣJ + JΣ)(C̄(Σ) + JΣJ)⁻¹ (a benchmark baseline).

    Exact only when Λ commutes with JΣ (e.g. a well-specified model with Σ ∝ J⁻¹);
    otherwise non-symmetric and off by 5–20 % in eq. (11). Provided for comparison.
    """
    S = target_covariance(expansion, target_cov)
    J = expansion.curvature
    C = noise_covariance(expansion, S, batch_size=batch_size, without_replacement=without_replacement)
    return np.linalg.solve((C + J @ S @ J).T, (S @ J + J @ S).T).T


@cites("wang2026", "Alg. 1 step 6 (DQ+exact: Eqs. 11–12; CT: Eqs. 2–3; DQ+const: Eq. 5; LR+WS: Eqs. 5–6)")
def tune(expansion: Expansion, *, batch_size: int, target: Any = "sandwich", method: str = "dq-exact",
         family: str = "dense", inv_temperature: float = math.inf, without_replacement: bool = False,
         momentum: float = 0.0) -> TuningResult:
    r"""Step-size matrix Λ whose SG(L)D stationary covariance equals the target Σ* (Algorithm 1, step 6).

    Methods (each is "solve eq. 11 for Λ at Σ = Σ* with a noise model R", one Lyapunov solve):

    - ``dq-exact`` (this work, seed 003 eqs. 11–12): R = C̄(Σ*) + HΣ*H, exact.
    - ``ct`` (continuous time, eqs. 2–3): the OU proxy ΛHΣ + ΣHΛ = ΛĈΛ (+2Λ/β), R = Ĉ,
      Ĉ = f(𝓘 − ḡḡᵀ)/B the gradient-noise covariance at θ̂. Its SPD solution; for Γ = 0 and
      the sandwich target this is Λ = (2B/N)J⁻¹ (the seed's public code). The paper's printed
      eq. (3) Λ = (ΣH+HΣ)Ĉ⁻¹ agrees only when the matrices commute and is not offered.
    - ``dq-const`` (eq. 5 with constant noise, Dieuleveut et al. / Liu et al.): R = Ĉ + HΣ*H,
      i.e. eq. (12) without its Σ-dependent terms. (Algorithm 1 prints C̄ = 𝓘, appendix E.2
      Ĥ/B and the public code J without 1/B; we take the noise covariance at θ̂ with its 1/B,
      the only choice that is the B-sample gradient covariance the method assumes.)
    - ``lr-ws`` (eqs. 5–6, Ziyin et al.; linear regression assumed well specified):
      R = (f/B)(JΣJ + tr(JΣ)J + (σ̂²/σ²)J) + HΣH with σ̂² = Σr_n²/(N−D) (the model's σ²
      from the expansion). Only for ``linear`` models.

    Families: ``dense`` (exact solve); ``scalar`` (Λ = λI) and ``diagonal``: the member
    minimising the affine-invariant discrepancy ‖Σ*^{-1/2} Σ(Λ) Σ*^{-1/2} − I‖_F with the exact
    stationary covariance Σ(Λ) (dq-exact only). With momentum κ > 0 the dense Λ is found by
    root-finding on the exact augmented stationary equation, started from (1−κ)·Λ(κ=0).

    Returns
    -------
    TuningResult
        Λ, the exact predicted covariance of the tuned chain and its error to the target.
    """
    n = expansion.n_data
    B = check_int(batch_size, "batch_size", low=1, high=n)
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    kappa = check_probability(momentum, "momentum")
    if method not in METHODS:
        raise SgtuneError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if family not in FAMILIES:
        raise SgtuneError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if family != "dense" and method != "dq-exact":
        raise SgtuneError(f"family {family!r} is defined through the exact stationary covariance; use "
                          "method 'dq-exact' (the comparison theories give dense Λ only)")
    S = target_covariance(expansion, target)
    H = expansion.hessian
    R = _noise_rhs(expansion, S, B, without_replacement, method)
    lam = solve_step_matrix(H, S, R, inv_temperature=beta)
    residual = tuning_residual(lam, H, S, R, beta)
    criterion = "exact: eq. (11) with the method's noise model"
    if family != "dense" or kappa > 0:
        lam, criterion = _fit_family(expansion, S, lam, family, B, beta, without_replacement, kappa)
        if kappa > 0 and family == "dense":
            residual = _momentum_residual(expansion, S, lam, B, beta, without_replacement, kappa)
        else:
            Rx = _noise_rhs(expansion, S, B, without_replacement, "dq-exact")
            residual = tuning_residual(lam, H, S, Rx, beta)
    try:
        st = predict_stationary_cov(expansion, lam, batch_size=B, inv_temperature=beta,
                                    without_replacement=without_replacement, momentum=kappa, initial_guess=S)
    except UnstableStepSizeError as exc:
        raise UnstableStepSizeError(
            f"method {method!r} gives a step-size matrix whose chain diverges ({exc}); the target is out of "
            "reach of this method's noise model — use method 'dq-exact'",
            spectral_radius=exc.spectral_radius, max_stable_step=exc.max_stable_step) from None
    err = float(np.linalg.norm(st.cov - S) / np.linalg.norm(S))
    return TuningResult(step_matrix=lam, target_cov=S, predicted_cov=st.cov, residual=residual,
                        covariance_error=err, method=method, family=family, criterion=criterion,
                        stationary=st, batch_size=B, inv_temperature=beta, momentum=kappa,
                        without_replacement=without_replacement)


# --------------------------------------------------------------------------- internals
def _noise_rhs(e: Expansion, S: np.ndarray, B: int, wor: bool, method: str) -> np.ndarray:
    H, J = e.hessian, e.curvature
    f = finite_population_factor(e.n_data, B, wor)
    C_hat = e.gradient_cov() * (f / B)
    if method == "dq-exact":
        R = noise_covariance(e, S, batch_size=B, without_replacement=wor) + H @ S @ H
    elif method == "ct":
        R = C_hat
    elif method == "dq-const":
        R = C_hat + H @ S @ H
    else:  # lr-ws
        if e.model != "linear":
            raise SgtuneError(f"method 'lr-ws' assumes a well-specified linear regression; the model is "
                              f"{e.model!r} — use 'dq-exact'")
        ratio = e.residual_variance / e.noise_variance
        R = (f / B) * (J @ S @ J + np.trace(J @ S) * J + ratio * J) + H @ S @ H
    return 0.5 * (R + R.T)


def _discrepancy(S: np.ndarray) -> Any:
    Li = np.linalg.inv(np.linalg.cholesky(S))

    def disc(cov: np.ndarray) -> float:
        return float(np.linalg.norm(Li @ cov @ Li.T - np.eye(S.shape[0])))

    return disc


def _fit_family(e: Expansion, S: np.ndarray, lam_dense: np.ndarray, family: str, B: int, beta: float,
                wor: bool, kappa: float) -> tuple[np.ndarray, str]:
    disc = _discrepancy(S)
    d = e.dim

    predicted = stationary_cov_evaluator(e, batch_size=B, inv_temperature=beta, without_replacement=wor,
                                         momentum=kappa)

    if family == "dense":  # momentum: root-finding on vech(Λ)
        iu = np.triu_indices(d)
        scale = np.abs(lam_dense).max()

        def unpack(v: np.ndarray) -> np.ndarray:
            m = np.zeros((d, d))
            m[iu] = v * scale
            return m + np.triu(m, 1).T

        Si = S[iu]

        def resid(v: np.ndarray) -> np.ndarray:
            cov = predicted(unpack(v))
            if cov is None:
                return np.full(v.shape, 1e3)
            return (cov[iu] - Si) / np.abs(S).max()

        v0 = (1 - kappa) * lam_dense[iu] / scale
        sol = sopt.root(resid, v0, method="hybr", options={"xtol": 1e-13})
        lam = unpack(sol.x)
        cov = predicted(lam)
        if not sol.success or cov is None or np.linalg.norm(cov - S) > 1e-8 * np.linalg.norm(S):
            raise ConvergenceError(
                f"momentum tuning did not converge ({sol.message}); try a smaller momentum",
                residual=float(np.linalg.norm(sol.fun)), method="hybr")
        return 0.5 * (lam + lam.T), "exact: augmented stationary equation (root-finding from (1−κ)Λ(κ=0))"

    def objective_from(lam: np.ndarray) -> float:
        cov = predicted(lam)
        return 1e6 if cov is None else disc(cov)

    if family == "scalar":
        lam0 = float(np.exp(np.mean(np.log(np.linalg.eigvalsh(lam_dense)))))
        res = sopt.minimize_scalar(lambda t: objective_from(math.exp(t) * np.eye(d)),
                                   bracket=(math.log(lam0) - 0.5, math.log(lam0)), tol=1e-10)
        if not res.success:
            raise ConvergenceError(f"scalar tuning failed: {res.message}", method="brent")
        lam = math.exp(res.x) * np.eye(d)
    else:
        x0 = np.log(np.diag(lam_dense))
        res = sopt.minimize(lambda x: objective_from(np.diag(np.exp(x))), x0, method="Nelder-Mead"
                            if d == 1 else "L-BFGS-B", options={"maxiter": 500})
        lam = np.diag(np.exp(res.x))
        if predicted(lam) is None:
            raise ConvergenceError("diagonal tuning ended at an unstable step size", method="L-BFGS-B")
    return lam, "min ‖Σ*^{-1/2} Σ(Λ) Σ*^{-1/2} − I‖_F over the family (exact Σ(Λ))"


def _momentum_residual(e: Expansion, S: np.ndarray, lam: np.ndarray, B: int, beta: float, wor: bool,
                       kappa: float) -> float:
    cov = predict_stationary_cov(e, lam, batch_size=B, inv_temperature=beta, without_replacement=wor,
                                 momentum=kappa).cov
    return float(np.linalg.norm(cov - S) / np.linalg.norm(S))
