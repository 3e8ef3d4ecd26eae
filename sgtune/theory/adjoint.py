r"""Gradients of a criterion of the exact stationary covariance Σ(Λ) with respect to Λ, by one adjoint solve.

The stationary second moment S of the proxy chain (THEORY §1.2, §1.5; seed 003 eqs. 11–12,
Prop. B.1) solves the linear equation

.. math::  \mathcal A_\Lambda(S) := S − F S F^\top − E\,\mathcal N(S_{dd})\,E^\top = Q_0(\Lambda),

F = I − ΛH, E = −Λ without momentum; F = [[I−ΛH, −κΛ], [H, κI]], E = [−Λ; I] with
momentum κ; Q₀ = E C₀ Eᵀ + blockdiag(2Λ/β, 0). For a smooth criterion φ(Σ), Σ = S_dd,
differentiate the equation: 𝒜(dS) = dF S Fᵀ + F S dFᵀ + dE M Eᵀ + E M dEᵀ + blockdiag(2dΛ/β, 0),
M = C₀ + 𝒩(S_dd). With the adjoint state P solving 𝒜ᵀ(P) = ∂φ/∂S, i.e.

.. math::  P − F^\top P F − \iota\,\mathcal N(E^\top P E) = \iota\,\partial\varphi/\partial\Sigma

(𝒩 is self-adjoint in the Frobenius product, ι embeds in the dd block), dφ = ⟨P, d(RHS)⟩,
which collects to (P, S symmetric; W = PFS, V = PEM; the dd/dν blocks of the augmented
matrices)

.. math::  \nabla_\Lambda\varphi = −2\,[W_{dd} H + κ W_{dν}] − 2 V_{d\cdot} + (2/β) P_{dd}

(for κ = 0: −2PFSH + 2PΛM + 2P/β). The symmetric part is the gradient over symmetric Λ;
any family Λ(x) takes it by the chain rule. Cost: one forward and one adjoint solve,
independent of the number of free parameters in Λ.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import LinearOperator, gmres

from ..core._refs import cites
from ..models import Expansion
from .stationary import DIRECT_MAX_DIM, _build_system, _full_operator, _Stein, _System, _variance_kernel

__all__ = ["CovarianceGradient", "affine_discrepancy", "criterion_gradient", "GradientEvaluator"]

#: a criterion maps Σ to (φ(Σ), ∂φ/∂Σ)
Criterion = Callable[[np.ndarray], "tuple[float, np.ndarray]"]


@dataclass(frozen=True)
class CovarianceGradient:
    """Value and gradient of φ(Σ(Λ)).

    Attributes
    ----------
    value : φ(Σ(Λ)).
    gradient : (D, D) symmetric ∇_Λ φ over symmetric Λ (Frobenius product).
    cov : (D, D) Σ(Λ), the exact stationary covariance.
    augmented_cov : full second moment S ((2D, 2D) with momentum).
    """

    value: float
    gradient: np.ndarray
    cov: np.ndarray
    augmented_cov: np.ndarray


@cites("sgtune", "criterion of the tuning families: ‖Σ*^{-1/2}ΣΣ*^{-1/2} − I‖²_F (affine invariant)")
def affine_discrepancy(target_cov: np.ndarray) -> Criterion:
    r"""φ(Σ) = ‖L⁻¹ Σ L⁻ᵀ − I‖²_F with Σ* = LLᵀ, and ∂φ/∂Σ = 2 L⁻ᵀ(L⁻¹ΣL⁻ᵀ − I)L⁻¹.

    (The Cholesky factor gives the same value as the symmetric square root: the two whitened
    matrices are orthogonally similar.)
    """
    L = np.linalg.cholesky(target_cov)
    Li = sla.solve_triangular(L, np.eye(L.shape[0]), lower=True)
    eye = np.eye(L.shape[0])

    def crit(cov: np.ndarray) -> tuple[float, np.ndarray]:
        W = Li @ cov @ Li.T - eye
        g = 2.0 * Li.T @ W @ Li
        return float(np.sum(W * W)), 0.5 * (g + g.T)

    return crit


class GradientEvaluator:
    """Λ ↦ (φ(Σ(Λ)), ∇_Λφ) for repeated evaluations (caches the D²×D² noise kernel for small systems).

    ``evaluate`` returns None when the chain with this Λ is not second-moment stable (decided, as in
    :func:`!sgtune.theory.stationary.stationary_cov_evaluator`, by ρ(F) < 1 and a positive-definite
    solution S, valid when Q₀ ≻ 0).
    """

    def __init__(self, expansion: Expansion, criterion: Criterion, *, batch_size: int,
                 inv_temperature: float = math.inf, without_replacement: bool = False,
                 momentum: float = 0.0, tol: float = 1e-12) -> None:
        self.expansion = expansion
        self.criterion = criterion
        self.args = (batch_size, inv_temperature, without_replacement, momentum)
        m = expansion.dim * (2 if momentum else 1)
        self.kernel = _variance_kernel(expansion) if m <= DIRECT_MAX_DIM else None
        self.tol = tol
        self._last: np.ndarray | None = None  # warm starts of the next forward / adjoint solve
        self._last_adj: np.ndarray | None = None
        self.n_solves = 0

    def evaluate(self, step_matrix: Any) -> CovarianceGradient | None:
        system = _build_system(self.expansion, step_matrix, *self.args)
        m, d = system.F.shape[0], system.dim
        if not np.max(np.abs(np.linalg.eigvals(system.F))) < 1:
            return None
        if self.kernel is not None:
            A = np.eye(m * m) - _full_operator(system, self.kernel)
            lu = sla.lu_factor(A)
            S = sla.lu_solve(lu, system.Q0.ravel()).reshape(m, m)
        else:
            stein = _Stein(system)
            S = _solve(system, stein, system.Q0, self.tol, x0=self._last, adjoint=False)
        S = 0.5 * (S + S.T)
        try:
            np.linalg.cholesky(S)
        except np.linalg.LinAlgError:
            return None
        cov = S[:d, :d]
        value, dphi = self.criterion(cov)
        G = np.zeros((m, m))
        G[:d, :d] = dphi
        if self.kernel is not None:
            P = sla.lu_solve(lu, G.ravel(), trans=1).reshape(m, m)
        else:
            P = _solve(system, stein, G, self.tol, adjoint=True, x0=self._last_adj)
        P = 0.5 * (P + P.T)
        self._last, self._last_adj = S, P
        self.n_solves += 2
        grad = _lambda_gradient(system, S, P, _noise_from_solution(system, S))
        return CovarianceGradient(value=value, gradient=grad, cov=cov, augmented_cov=S)


@cites("sgtune", "adjoint of seed 003 eqs. (11)–(12) / Prop. B.1 (derivation in sgtune.theory.adjoint)")
def criterion_gradient(expansion: Expansion, step_matrix: Any, criterion: Criterion, *, batch_size: int,
                       inv_temperature: float = math.inf, without_replacement: bool = False,
                       momentum: float = 0.0) -> CovarianceGradient:
    r"""φ(Σ(Λ)) and its gradient over symmetric Λ from one forward and one adjoint solve.

    Parameters
    ----------
    expansion : Expansion at θ̂.
    step_matrix : scalar, (D,) or (D, D) Λ (symmetric).
    criterion : callable Σ ↦ (φ(Σ), ∂φ/∂Σ), e.g. :func:`affine_discrepancy`.
    batch_size, inv_temperature, without_replacement, momentum : as in
        :func:`sgtune.theory.stationary.predict_stationary_cov`.

    Raises
    ------
    UnstableStepSizeError
        When the chain with Λ is not second-moment stable.
    """
    from ..core.errors import UnstableStepSizeError
    from .stationary import max_stable_step

    ev = GradientEvaluator(expansion, criterion, batch_size=batch_size, inv_temperature=inv_temperature,
                           without_replacement=without_replacement, momentum=momentum)
    out = ev.evaluate(step_matrix)
    if out is None:
        c = max_stable_step(expansion, step_matrix, batch_size=batch_size,
                            without_replacement=without_replacement, momentum=momentum)
        raise UnstableStepSizeError(f"step_matrix is unstable; scale it by less than {c:.4g}",
                                    spectral_radius=math.inf, max_stable_step=c)
    return out


# --------------------------------------------------------------------------- internals
def _noise_from_solution(system: _System, S: np.ndarray) -> np.ndarray:
    r"""𝒩(S_dd) from the forward equation itself, E𝒩(S_dd)Eᵀ = S − FSFᵀ − Q₀, without a pass over the data.

    With momentum the νν block of E𝒩Eᵀ is 𝒩 itself (E's ν rows are I); without, the block is
    Λ𝒩Λ, so 𝒩 = Λ⁻¹(S − FSFᵀ − Q₀)Λ⁻¹. Exact for the exact solution; for a solve to relative
    residual δ its error is δ‖S‖ (times ‖Λ⁻¹‖² without momentum). Saves one evaluation of
    mean_n J_nΣJ_n (O(N·D²) for GLMs) per gradient.
    """
    d = system.dim
    Rm = S - system.F @ S @ system.F.T - system.Q0
    if system.momentum:
        out = Rm[d:, d:]
    else:
        out = np.linalg.solve(system.lam, np.linalg.solve(system.lam, Rm).T)
    return 0.5 * (out + out.T)


def _lambda_gradient(system: _System, S: np.ndarray, P: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
    d, kappa = system.dim, system.momentum
    e = system.expansion
    if noise is None:
        noise = system.noise(S[:d, :d])
    M = system.noise_scale * e.gradient_cov() + noise
    W = P @ system.F @ S
    V = (P @ system.E @ M)[:d, :]
    g = -2.0 * (W[:d, :d] @ system.H) - 2.0 * V
    if kappa:
        g -= 2.0 * kappa * W[:d, d:]
    if math.isfinite(system.beta):
        g += (2.0 / system.beta) * P[:d, :d]
    return 0.5 * (g + g.T)


def _stein_adjoint(stein: _Stein, Q: np.ndarray) -> np.ndarray:
    """X = Fᵀ X F + Q with the eigendecomposition F = V diag(a) V⁻¹ of ``stein``: X = V⁻ᵀ[(VᵀQV)/(1−aaᵀ)]V⁻¹."""
    if getattr(stein, "fallback", False):
        X = sla.solve_discrete_lyapunov(stein.F.T, Q, method="bilinear")
        return 0.5 * (X + X.T)
    Qt = stein.V.T @ Q @ stein.V
    X = stein.Vinv.T @ (Qt / stein.denom) @ stein.Vinv
    if not stein.real:
        X = X.real
    return 0.5 * (X + X.T)


def _solve(system: _System, stein: _Stein, rhs: np.ndarray, tol: float, *, adjoint: bool,
           x0: np.ndarray | None = None) -> np.ndarray:
    """𝒜(X) = rhs (or 𝒜ᵀ(X) = rhs) by GMRES right-preconditioned with the exact Stein solve."""
    m, d = system.F.shape[0], system.dim
    E = system.E
    pre = (lambda Y: _stein_adjoint(stein, Y)) if adjoint else stein.solve

    def apply_a(X: np.ndarray) -> np.ndarray:
        if adjoint:
            out = X - system.F.T @ X @ system.F
            out[:d, :d] -= system.noise(0.5 * (E.T @ X @ E + (E.T @ X @ E).T))
            return out
        return X - system.apply(X)

    def op(yvec: np.ndarray) -> np.ndarray:
        Y = yvec.reshape(m, m)
        X = pre(Y)
        if adjoint:
            Z = E.T @ X @ E
            out = Y.copy()
            out[:d, :d] -= system.noise(0.5 * (Z + Z.T))
            return out.ravel()
        return (Y - E @ system.noise(X[:d, :d]) @ E.T).ravel()

    A = LinearOperator((m * m, m * m), matvec=op, dtype=float)
    norm_rhs = np.linalg.norm(rhs)
    if norm_rhs == 0:
        return np.zeros((m, m))
    if x0 is not None and x0.shape == (m, m):
        X = x0.copy()
        R = rhs - apply_a(X)
    else:
        X, R = np.zeros((m, m)), rhs.copy()
    for _ in range(4):  # iterative refinement on the true residual
        if np.linalg.norm(R) <= 1e-14 * norm_rhs:
            break
        # absolute tolerance relative to ‖rhs‖, so a warm start saves iterations
        y, info = gmres(A, R.ravel(), rtol=0.0, atol=tol * norm_rhs, restart=60, maxiter=40)
        X = X + pre(y.reshape(m, m))
        if info == 0:  # right preconditioning: GMRES's residual is the true one (up to rounding)
            break
        R = rhs - apply_a(X)
        if np.linalg.norm(R) <= 10 * tol * norm_rhs:
            break
    return 0.5 * (X + X.T)
