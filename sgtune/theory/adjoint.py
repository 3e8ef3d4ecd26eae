r"""Gradients of a criterion of the exact stationary covariance Σ(Λ) with respect to Λ, by one adjoint solve.

The stationary second moment S of the proxy chain (Wang, Ding & Huggins 2026, Eqs. (11)–(12) and
Prop. B.1; :class:`sgtune.theory.linear_chain.LinearChain`) solves the linear equation

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
from ..core.config import Dynamics
from ..core.errors import UnstableStepSizeError
from ..models import Expansion
from .linear_chain import DIRECT_MAX_DIM, LinearChain, SteinSolver, require_dynamics, variance_kernel

__all__ = ["CovarianceGradient", "affine_discrepancy", "criterion_gradient", "GradientEvaluator"]

#: a criterion maps Σ to (φ(Σ), ∂φ/∂Σ)
Criterion = Callable[[np.ndarray], "tuple[float, np.ndarray]"]


@dataclass(frozen=True)
class CovarianceGradient:
    """Value and gradient of φ(Σ(Λ)).

    Attributes
    ----------
    value : float
        φ(Σ(Λ)).
    gradient : (D, D) ndarray
        The symmetric ∇_Λ φ over symmetric Λ (Frobenius product).
    cov : (D, D) ndarray
        Σ(Λ), the exact stationary covariance.
    augmented_cov : ndarray
        The full second moment S ((2D, 2D) with momentum).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.adjoint import affine_discrepancy
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> phi = affine_discrepancy(e.sandwich_cov())
    >>> from sgtune.theory.adjoint import criterion_gradient
    >>> g = criterion_gradient(e, Dynamics(0.1, batch_size=32), phi)
    >>> g.gradient.shape, bool(np.allclose(g.gradient, g.gradient.T))
    ((5, 5), True)
    """

    value: float
    gradient: np.ndarray
    cov: np.ndarray
    augmented_cov: np.ndarray


@cites("sgtune", "criterion of the tuning families: ‖Σ*^{-1/2}ΣΣ*^{-1/2} − I‖²_F (affine invariant)")
def affine_discrepancy(target_cov: np.ndarray) -> Criterion:
    r"""The affine-invariant discrepancy φ(Σ) = ‖L⁻¹ Σ L⁻ᵀ − I‖²_F (Σ* = LLᵀ) and its gradient in Σ.

    ∂φ/∂Σ = 2 L⁻ᵀ(L⁻¹ΣL⁻ᵀ − I)L⁻¹.

    (The Cholesky factor gives the same value as the symmetric square root: the two whitened
    matrices are orthogonally similar.)

    Parameters
    ----------
    target_cov : (D, D) ndarray
        Σ*, symmetric positive definite.

    Returns
    -------
    callable
        Σ ↦ (φ(Σ), ∂φ/∂Σ), the criterion of the structured families of
        :func:`sgtune.theory.tuning.tune`.

    Examples
    --------
    >>> from sgtune.theory.adjoint import affine_discrepancy
    >>> phi = affine_discrepancy(np.diag([1.0, 4.0]))
    >>> phi(np.diag([2.0, 4.0]))[0]  # (2/1 − 1)²
    1.0
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

    ``dynamics`` gives B, β, κ and the batching of the chain (its ``step`` is not used: each
    ``evaluate`` takes a Λ). It returns None when the chain with this Λ is not
    second-moment stable (decided, as in :func:`sgtune.theory.stationary.stationary_cov_evaluator`,
    by ρ(F) < 1 and a positive-definite solution S, valid when Q₀ ≻ 0).

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    criterion : callable
        Σ ↦ (φ(Σ), ∂φ/∂Σ), e.g. :func:`affine_discrepancy`.
    dynamics : Dynamics
        B, β, κ and the batching.
    tol : float, optional
        Relative tolerance of the iterative solves (large systems).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.adjoint import affine_discrepancy
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> phi = affine_discrepancy(e.sandwich_cov())
    >>> from sgtune.theory.adjoint import GradientEvaluator
    >>> evaluator = GradientEvaluator(e, phi, Dynamics(None, batch_size=32))
    >>> evaluator.evaluate(0.1 * np.eye(5)).cov.shape, evaluator.evaluate(100 * np.eye(5))
    ((5, 5), None)
    """

    def __init__(self, expansion: Expansion, criterion: Criterion, dynamics: Dynamics, *,
                 tol: float = 1e-12) -> None:
        dynamics = require_dynamics("GradientEvaluator", "GradientEvaluator(expansion, criterion, "
                                    "Dynamics(None, batch_size, …))", dynamics)
        self.expansion = expansion
        self.criterion = criterion
        self.dynamics = dynamics
        m = expansion.dim * (2 if dynamics.momentum else 1)
        self.kernel = variance_kernel(expansion) if m <= DIRECT_MAX_DIM else None
        self.tol = tol
        self._last: np.ndarray | None = None  # warm starts of the next forward / adjoint solve
        self._last_adj: np.ndarray | None = None
        self.n_solves = 0

    def evaluate(self, step_matrix: Any) -> CovarianceGradient | None:
        chain = LinearChain.of(self.expansion, self.dynamics.replace(step=step_matrix))
        m, d = chain.state_dim, chain.dim
        if not chain.transition_radius() < 1:
            return None
        if self.kernel is not None:
            A = np.eye(m * m) - chain.operator(self.kernel)
            lu = sla.lu_factor(A)
            S = sla.lu_solve(lu, chain.constant_noise.ravel()).reshape(m, m)
        else:
            stein = chain.stein()
            S = _solve(chain, stein, chain.constant_noise, self.tol, x0=self._last, adjoint=False)
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
            P = _solve(chain, stein, G, self.tol, adjoint=True, x0=self._last_adj)
        P = 0.5 * (P + P.T)
        self._last, self._last_adj = S, P
        self.n_solves += 2
        grad = _lambda_gradient(chain, S, P, _noise_from_solution(chain, S))
        return CovarianceGradient(value=value, gradient=grad, cov=cov, augmented_cov=S)


@cites("sgtune", "adjoint of Wang, Ding & Huggins (2026) Eqs. (11)–(12) / Prop. B.1 (derivation in "
                 "sgtune.theory.adjoint)")
def criterion_gradient(expansion: Expansion, dynamics: Dynamics, criterion: Criterion) -> CovarianceGradient:
    r"""Compute φ(Σ(Λ)) and its gradient over symmetric Λ from one forward and one adjoint solve.

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    dynamics : Dynamics
        The chain: Λ (``step``, symmetric: scalar, (D,) or (D, D)), B, β, κ and the batching, as in
        :func:`sgtune.theory.stationary.predict_stationary_cov`.
    criterion : callable
        Σ ↦ (φ(Σ), ∂φ/∂Σ), e.g. :func:`affine_discrepancy`.

    Returns
    -------
    CovarianceGradient
        The value φ(Σ(Λ)), ∇_Λ φ and Σ(Λ) (Wang, Ding & Huggins 2026, Eqs. (11)–(12) and their adjoint).

    Raises
    ------
    UnstableStepSizeError
        When the chain with Λ is not second-moment stable.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.adjoint import affine_discrepancy
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> phi = affine_discrepancy(e.sandwich_cov())
    >>> from sgtune.theory.adjoint import criterion_gradient
    >>> bool(criterion_gradient(e, Dynamics(0.1, batch_size=32), phi).value > 0)
    True
    """
    dynamics = require_dynamics("criterion_gradient", "criterion_gradient(expansion, Dynamics(step_matrix, "
                                "batch_size, …), criterion)", dynamics)
    ev = GradientEvaluator(expansion, criterion, dynamics.replace(step=None))
    out = ev.evaluate(dynamics.step)
    if out is None:
        c = LinearChain.of(expansion, dynamics.replace(inv_temperature=math.inf)).max_stable_multiplier(1e-3)
        raise UnstableStepSizeError(f"step_matrix is unstable; scale it by less than {c:.4g}",
                                    spectral_radius=math.inf, max_stable_step=c)
    return out


# --------------------------------------------------------------------------- internals
def _noise_from_solution(chain: LinearChain, S: np.ndarray) -> np.ndarray:
    r"""𝒩(S_dd) from the forward equation itself, E𝒩(S_dd)Eᵀ = S − FSFᵀ − Q₀, without a pass over the data.

    With momentum the νν block of E𝒩Eᵀ is 𝒩 itself (E's ν rows are I); without, the block is
    Λ𝒩Λ, so 𝒩 = Λ⁻¹(S − FSFᵀ − Q₀)Λ⁻¹. Exact for the exact solution; for a solve to relative
    residual δ its error is δ‖S‖ (times ‖Λ⁻¹‖² without momentum). Saves one evaluation of
    mean_n J_nΣJ_n (O(N·D²) for GLMs) per gradient.
    """
    d = chain.dim
    F = chain.transition
    Rm = S - F @ S @ F.T - chain.constant_noise
    if chain.momentum:
        out = Rm[d:, d:]
    else:
        out = np.linalg.solve(chain.step_matrix, np.linalg.solve(chain.step_matrix, Rm).T)
    return 0.5 * (out + out.T)


def _lambda_gradient(chain: LinearChain, S: np.ndarray, P: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
    d, kappa, beta = chain.dim, chain.momentum, chain.inv_temperature
    e = chain.expansion
    if noise is None:
        noise = chain.noise(S[:d, :d])
    M = chain.noise_scale * e.gradient_cov() + noise
    W = P @ chain.transition @ S
    V = (P @ chain.noise_map @ M)[:d, :]
    g = -2.0 * (W[:d, :d] @ chain.hessian) - 2.0 * V
    if kappa:
        g -= 2.0 * kappa * W[:d, d:]
    if math.isfinite(beta):
        g += (2.0 / beta) * P[:d, :d]
    return 0.5 * (g + g.T)


def _solve(chain: LinearChain, stein: SteinSolver, rhs: np.ndarray, tol: float, *, adjoint: bool,
           x0: np.ndarray | None = None) -> np.ndarray:
    """𝒜(X) = rhs (or 𝒜ᵀ(X) = rhs) by GMRES right-preconditioned with the exact Stein solve."""
    m, d = chain.state_dim, chain.dim
    E, F = chain.noise_map, chain.transition
    pre = stein.solve_adjoint if adjoint else stein.solve

    def apply_a(X: np.ndarray) -> np.ndarray:
        if adjoint:
            out = X - F.T @ X @ F
            out[:d, :d] -= chain.noise(0.5 * (E.T @ X @ E + (E.T @ X @ E).T))
            return out
        return X - chain.apply(X)

    def op(yvec: np.ndarray) -> np.ndarray:
        Y = yvec.reshape(m, m)
        X = pre(Y)
        if adjoint:
            Z = E.T @ X @ E
            out = Y.copy()
            out[:d, :d] -= chain.noise(0.5 * (Z + Z.T))
            return out.ravel()
        return (Y - E @ chain.noise(X[:d, :d]) @ E.T).ravel()

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
