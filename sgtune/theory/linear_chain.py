r"""The linearised SG(L)D chain of Wang, Ding & Huggins (2026): one object for F, the noise map and Q₀.

The proxy chain (Wang, Ding & Huggins 2026, Eq. (8)) linearises every per-sample gradient at θ̂.
With d = θ − θ̂ and, with momentum κ, the auxiliary ν of Prop. B.1, the state z = (d[, ν]) evolves
as z_t = F z_{t−1} + E η_t + (injected noise), so its second moment S solves the *linear* equation

.. math::  S = F S F^\top + E\,\mathcal N(S_{dd})\,E^\top + Q_0,

- F = I − ΛH and E = −Λ without momentum; F = [[I−ΛH, −κΛ], [H, κI]], E = [−Λ; I] with momentum
  (Prop. B.1, any Λ);
- 𝒩(Σ) = (f/B)(mean_n J_nΣJ_n − JΣJ), the Σ-dependent part of the minibatch-noise covariance
  C̄(Σ) of Thm. 4.3, Eq. (12); f = 1 with replacement and (N−B)/(N−1) without;
- Q₀ = E C₀ Eᵀ + blockdiag(2Λ/β, 0), C₀ = (f/B)(𝓘 − ḡḡᵀ), the constant part.

For κ = 0 this is Prop. 4.2, Eq. (11) with Eq. (12) substituted. :class:`LinearChain` holds these
pieces for one :class:`~sgtune.core.config.Dynamics` and solves the equation: small systems directly
(the Kronecker operator on the m² unknowns of S), large ones matrix-free (GMRES on the noise
correction, preconditioned by an exact Stein solve of the deterministic part through one
eigendecomposition of F); neither route forms a D⁴ object for large D. It also gives the spectral
radius of the second-moment map (or a certified bound), the largest stable multiple of Λ, the
integrated autocorrelation times and, for the applicability check, the *statistically linearised*
chain (an effective curvature and a constant effective noise instead of H and C̄(Σ)).

Every theory module that needs the chain builds it here (``LinearChain.of(expansion, dynamics)``);
the comparison theories' noise models are in :mod:`sgtune.theory.noise_models`.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import LinearOperator, eigs, gmres

from ..core._refs import cites
from ..core.reasons import Remedy
from ..core._validation import as_symmetric, is_symmetric
from ..core.config import Dynamics
from ..core.errors import (AccuracyWarning, ConvergenceError, NotPositiveDefiniteError, SgtuneError,
                           UnstableStepSizeError)
from ..models import Expansion

__all__ = ["LinearChain", "StationarySolution", "SteinSolver", "DIRECT_MAX_DIM", "ARPACK_MAX_DIM",
           "DENSE_RADIUS_MAX_DIM", "WARN_RESIDUAL", "FAIL_RESIDUAL", "finite_population_factor",
           "noise_scale", "heavy_ball_transition", "variance_kernel", "equilibration_steps"]

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


# --------------------------------------------------------------------------- the settings
def require_dynamics(function: str, new_form: str, dynamics: Any) -> Dynamics:
    """``dynamics`` when it is a :class:`~sgtune.core.config.Dynamics`, else a one-line ``TypeError``.

    The message names ``new_form``, the call that takes the chain's settings (the keyword forms of
    0.1 — ``batch_size=…``, ``inv_temperature=…``, ``without_replacement=…``, ``momentum=…`` — were
    removed in 0.2.0).
    """
    if isinstance(dynamics, Dynamics):
        return dynamics
    raise TypeError(f"{function}() takes the chain's settings as one sgtune.core.config.Dynamics: {new_form}; "
                    f"got {type(dynamics).__name__} (the keyword forms of 0.1 were removed in 0.2.0)")


@cites("wang2026", "Thm. 4.3 (without replacement: × (N−B)/(N−1))")
def finite_population_factor(n_data: int, batch_size: int, without_replacement: bool) -> float:
    """The finite-population factor f = (N−B)/(N−1) without replacement, 1 with replacement (Thm. 4.3).

    Parameters
    ----------
    n_data : int
        N.
    batch_size : int
        B.
    without_replacement : bool
        How the batch is drawn.

    Returns
    -------
    float
        The factor f (Wang, Ding & Huggins 2026, Thm. 4.3).

    Examples
    --------
    >>> from sgtune.theory.linear_chain import finite_population_factor
    >>> finite_population_factor(101, 11, True), finite_population_factor(101, 11, False)
    (0.9, 1.0)
    """
    return (n_data - batch_size) / (n_data - 1) if without_replacement else 1.0


@cites("wang2026", "Thm. 4.3, Eq. (12): the factor f/B of the minibatch-noise covariance")
def noise_scale(n_data: int, dynamics: Dynamics) -> float:
    """The noise scale f/B: the minibatch-noise covariance of B draws is f/B times that of one (Thm. 4.3).

    Parameters
    ----------
    n_data : int
        N.
    dynamics : Dynamics
        B and the batching.

    Returns
    -------
    float
        The scale f/B.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.theory.linear_chain import noise_scale
    >>> noise_scale(101, Dynamics(0.1, batch_size=11, batching="without-replacement"))
    0.08181818181818182
    """
    B = dynamics.batch_size
    return finite_population_factor(n_data, B, dynamics.without_replacement) / B


@cites("wang2026", "Prop. 4.2 (F = I − ΛH) and Prop. B.1 (momentum: F = [[I−ΛH, −κΛ], [H, κI]])")
def heavy_ball_transition(step_matrix: np.ndarray, hessian: np.ndarray, momentum: float) -> np.ndarray:
    """The transition F of the proxy chain: I − ΛH, or the augmented [[I−ΛH, −κΛ], [H, κI]] of (d, ν).

    Parameters
    ----------
    step_matrix : (D, D) ndarray
        Λ.
    hessian : (D, D) ndarray
        H.
    momentum : float
        The heavy-ball momentum κ (0: the (D, D) transition).

    Returns
    -------
    ndarray
        F, (D, D) or (2D, 2D) (Wang, Ding & Huggins 2026, Prop. B.1).

    Examples
    --------
    >>> from sgtune.theory.linear_chain import heavy_ball_transition
    >>> heavy_ball_transition(np.array([[0.1]]), np.eye(1), 0.5)
    array([[ 0.9 , -0.05],
           [ 1.  ,  0.5 ]])
    """
    lam, H = step_matrix, hessian
    I = np.eye(lam.shape[0])
    if momentum == 0.0:
        return I - lam @ H
    return np.block([[I - lam @ H, -momentum * lam], [H, momentum * I]])


def _noise_map(step_matrix: np.ndarray, momentum: float) -> np.ndarray:
    """E: −Λ, or [−Λ; I] with momentum (Prop. B.1)."""
    return -step_matrix if momentum == 0.0 else np.vstack([-step_matrix, np.eye(step_matrix.shape[0])])


@cites("wang2026", "Thm. 4.3, Eq. (12): the Σ-dependent part mean_n J_nΣJ_n − JΣJ as a D²×D² matrix")
def variance_kernel(expansion: Expansion) -> np.ndarray:
    """The matrix of Σ ↦ mean_n J_nΣJ_n − JΣJ on vec(Σ) (D²×D², C order).

    mean_n J_n ⊗ J_n is the expansion's (:meth:`~sgtune.models.expansion.Expansion.variance_kernel_sum`:
    accumulated in row blocks for every curvature structure — rank-one, block, dense — or streamed over
    the rows of out-of-core data).

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.

    Returns
    -------
    (D², D²) ndarray
        The Σ-dependent part of the noise of Eq. (12) (Wang, Ding & Huggins 2026), without f/B.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.linear_chain import variance_kernel
    >>> variance_kernel(expand(get_model("logistic"), example("logistic"))).shape
    (25, 25)
    """
    J = expansion.curvature
    return expansion.variance_kernel_sum() - np.kron(J, J)


@cites("wang2026", "Prop. 4.2 / Thm. 4.3: S_t = 𝒫(S_{t−1}) + Q₀, so S_t − Σ = 𝒫^t(S_0 − Σ)")
def equilibration_steps(spectral_radius: float, tol: float = 0.01) -> float:
    """Count the steps from θ̂ until the chain's second moments are within ``tol`` of their stationary values.

    The second moment of the proxy chain obeys S_t = 𝒫(S_{t−1}) + Q₀ (Wang, Ding & Huggins 2026,
    Eqs. (11)–(12)), so S_t − Σ = 𝒫^t(S_0 − Σ) and, started at θ̂ (S_0 = 0), the relative deviation
    decays like ρ(𝒫)^t: t = ⌈ln(1/tol) / (−ln ρ)⌉. This is a burn-in for the *covariance*: it differs
    from τ_worst, the integrated autocorrelation time (which sets how many draws an estimate needs),
    because the slowest eigen-direction of 𝒫 may carry little of the autocorrelation of any single
    linear functional.

    Parameters
    ----------
    spectral_radius : float
        The spectral radius ρ(𝒫) of the second-moment map.
    tol : float, optional
        The relative deviation to reach.

    Returns
    -------
    float
        The number of steps (``inf`` for ρ ≥ 1: no stationary law).

    Examples
    --------
    >>> from sgtune.theory.linear_chain import equilibration_steps
    >>> equilibration_steps(0.9), equilibration_steps(1.0)
    (44.0, inf)
    """
    rho = float(spectral_radius)
    if not 0.0 < tol < 1.0:
        raise SgtuneError(f"tol must be in (0, 1), got {tol}")
    if not math.isfinite(rho) or rho >= 1.0:
        return math.inf
    if rho <= 0.0:
        return 1.0
    return float(math.ceil(math.log(1.0 / tol) / -math.log1p(rho - 1.0)))


#: an unstable scalar step's remedy: this fraction of the largest stable step (a margin, as the chain's
#: second moments grow without bound as the step approaches it)
STABLE_FRACTION = 0.5


# --------------------------------------------------------------------------- the chain
@dataclass(frozen=True)
class StationarySolution:
    """The stationary second moment of a :class:`LinearChain` and how it was obtained.

    Attributes
    ----------
    second_moment : (m, m) ndarray
        S (the augmented (d, ν) moment with momentum).
    spectral_radius : float
        ρ of the second-moment map (or its certified upper bound, ``is_bound``).
    is_bound : bool
        Whether ``spectral_radius`` is the bound 1 − λ_min(S^{-1/2}Q₀S^{-1/2}).
    relative_residual : float
        ‖S − P(S) − Q₀‖_F / ‖S‖_F.
    method : str
        ``"direct"`` or ``"iterative"``.
    dim : int
        D (the leading block of S that is θ).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.linear_chain import LinearChain
    >>> chain = LinearChain.of(expand(get_model("logistic"), example("logistic")), Dynamics(0.1, batch_size=32))
    >>> sol = chain.solve()
    >>> sol.method, sol.second_moment.shape, bool(sol.relative_residual < 1e-10)
    ('direct', (5, 5), True)
    """

    second_moment: np.ndarray
    spectral_radius: float
    is_bound: bool
    relative_residual: float
    method: str
    dim: int

    @property
    def cov(self) -> np.ndarray:
        """The (D, D) θ block of S, symmetrised."""
        d = self.dim
        S = self.second_moment
        return 0.5 * (S[:d, :d] + S[:d, :d].T)


@dataclass(frozen=True, eq=False)
class LinearChain:
    r"""S = F S Fᵀ + E 𝒩(S_dd) Eᵀ + Q₀: the linearised chain of one :class:`~sgtune.core.config.Dynamics`.

    Build it with :meth:`of` (the proxy of Wang, Ding & Huggins 2026: H and the exact noise of
    Eq. (12)) or :meth:`statistically_linearised` (an effective curvature and a constant effective
    noise, no Σ-dependent part).

    Attributes
    ----------
    expansion : Expansion or None
        The expansion at θ̂ (its per-sample curvatures give 𝒩; None for a chain built from
        matrices by :meth:`with_constant_noise`).
    dynamics : Dynamics
        The chain's settings (Λ, B, β, κ, batching).
    step_matrix : (D, D) ndarray
        Λ (symmetrised when β < ∞).
    hessian : (D, D) ndarray
        H (or the effective curvature).
    transition : ndarray
        F, (D, D) or (2D, 2D) with momentum.
    noise_map : ndarray
        E, (D, D) or (2D, D).
    constant_noise : (m, m) ndarray
        Q₀, symmetric.
    noise_scale : float
        f/B.
    state_dependent : bool
        Whether the map has the Σ-dependent noise E𝒩(S_dd)Eᵀ (False for the statistically
        linearised chain, whose noise is constant).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.linear_chain import LinearChain
    >>> chain = LinearChain.of(expand(get_model("logistic"), example("logistic")), Dynamics(0.1, batch_size=32))
    >>> chain.transition.shape, chain.noise_scale
    ((5, 5), 0.03125)
    >>> bool(chain.transition_radius() < 1)
    True
    """

    expansion: Expansion | None
    dynamics: Dynamics
    step_matrix: np.ndarray
    hessian: np.ndarray
    transition: np.ndarray
    noise_map: np.ndarray
    constant_noise: np.ndarray
    noise_scale: float
    state_dependent: bool = True

    # ----------------------------------------------------------------- construction
    @classmethod
    @cites("wang2026", "Prop. 4.2, Eq. (11); Thm. 4.3, Eq. (12); Prop. B.1 (momentum, general Λ)")
    def of(cls, expansion: Expansion, dynamics: Dynamics) -> "LinearChain":
        """The proxy chain of ``dynamics`` at ``expansion``: F, E, Q₀ and 𝒩 of Eqs. (11)–(12) / Prop. B.1.

        Raises when B > N, when Λ is missing (``dynamics.step`` is None), or when β < ∞ and Λ is
        not symmetric positive definite (the injected noise N(0, 2Λ/β) needs it).
        """
        n, d = expansion.n_data, expansion.dim
        dynamics.check_data(n)
        B, beta, kappa = dynamics.batch_size, dynamics.inv_temperature, dynamics.momentum
        lam = dynamics.step_matrix(d)
        if math.isfinite(beta):
            lam = _spd_for_sgld(lam)
        f = finite_population_factor(n, B, dynamics.without_replacement)
        H = expansion.hessian
        C0 = expansion.gradient_cov() * (f / B)
        F = heavy_ball_transition(lam, H, kappa)
        E = _noise_map(lam, kappa)
        if kappa == 0.0:
            Q0 = lam @ C0 @ lam.T
            if math.isfinite(beta):
                Q0 = Q0 + 2.0 * lam / beta
        else:
            Q0 = E @ C0 @ E.T
            if math.isfinite(beta):
                Q0[:d, :d] += 2.0 * lam / beta
        Q0 = 0.5 * (Q0 + Q0.T)
        return cls(expansion, dynamics, lam, H, F, E, Q0, f / B)

    @classmethod
    @cites("sgtune", "statistical (equivalent) linearisation of Eq. (11): H_eff = E∇²L, C_eff = E Cov_n ∇l_n")
    def statistically_linearised(cls, expansion: Expansion, dynamics: Dynamics, curvature: np.ndarray,
                                 gradient_noise: np.ndarray) -> "LinearChain":
        """The chain with curvature H_eff and the constant per-sample gradient covariance C_eff (no 𝒩 term).

        The linear chain whose drift and noise are the averages of the real ones over N(θ̂, Σ)
        (Gaussian closure, :mod:`sgtune.theory.applicability`): :meth:`with_constant_noise` with
        f/B of ``dynamics`` at ``expansion``'s N.
        """
        return cls.with_constant_noise(dynamics, curvature, gradient_noise,
                                       noise_scale=noise_scale(expansion.n_data, dynamics), expansion=expansion)

    @classmethod
    @cites("wang2026", "Eq. (5) (constant noise) with Prop. B.1 (momentum): F, E and Q₀ from Λ, H and C")
    def with_constant_noise(cls, dynamics: Dynamics, hessian: np.ndarray, gradient_noise: np.ndarray, *,
                            noise_scale: float = 1.0, expansion: Expansion | None = None) -> "LinearChain":
        """The linear chain with curvature H and constant noise: F from Λ, H, κ; Q₀ = s·E C Eᵀ + blockdiag(2Λ/β, 0).

        ``noise_scale`` s multiplies the per-sample gradient covariance C (f/B for a minibatch of B).
        No Σ-dependent noise (``state_dependent=False``), so :meth:`solve_constant_noise` is one Stein
        solve. Λ is used as given (``dynamics.step``: any stable Λ, symmetric or not for β = ∞).
        """
        lam = dynamics.step_matrix(np.shape(hessian)[0])
        d = lam.shape[0]
        kappa, beta = dynamics.momentum, dynamics.inv_temperature
        H, C, f = hessian, gradient_noise, noise_scale
        F = heavy_ball_transition(lam, H, kappa)
        E = _noise_map(lam, kappa)
        if kappa == 0.0:
            Q = f * lam @ C @ lam.T
            if math.isfinite(beta):
                Q = Q + 2.0 * lam / beta
        else:
            Q = f * E @ C @ E.T
            if math.isfinite(beta):
                Q[:d, :d] += 2.0 * lam / beta
        return cls(expansion, dynamics, lam, H, F, E, 0.5 * (Q + Q.T), f, state_dependent=False)

    def scaled(self, factor: float) -> "LinearChain":
        """The chain with step matrix factor·Λ and no injected noise (β does not affect stability)."""
        dyn = self.dynamics.replace(step=factor * self.step_matrix, inv_temperature=math.inf)
        return LinearChain.of(self.expansion, dyn)

    # ----------------------------------------------------------------- sizes and settings
    @property
    def dim(self) -> int:
        """D, the number of parameters."""
        return self.step_matrix.shape[0]

    @property
    def state_dim(self) -> int:
        """m, the dimension of the state (D, or 2D with momentum)."""
        return self.transition.shape[0]

    @property
    def momentum(self) -> float:
        return self.dynamics.momentum

    @property
    def inv_temperature(self) -> float:
        return self.dynamics.inv_temperature

    @property
    def batch_size(self) -> int:
        return self.dynamics.batch_size

    @property
    def without_replacement(self) -> bool:
        return self.dynamics.without_replacement

    # ----------------------------------------------------------------- the map
    def noise(self, sigma: np.ndarray) -> np.ndarray:
        """𝒩(Σ) = (f/B)(mean_n J_nΣJ_n − JΣJ) (zero for a constant-noise chain)."""
        if not self.state_dependent:
            return np.zeros_like(sigma)
        e = self.expansion
        J = e.curvature
        return self.noise_scale * (e.mean_jsj(sigma) - J @ sigma @ J)

    def apply(self, S: np.ndarray) -> np.ndarray:
        """The second-moment map P(S) = FSFᵀ + E𝒩(S_dd)Eᵀ (without Q₀)."""
        d = self.dim
        N = self.noise(0.5 * (S[:d, :d] + S[:d, :d].T))
        return self.transition @ S @ self.transition.T + self.noise_map @ N @ self.noise_map.T

    def relative_residual(self, S: np.ndarray) -> float:
        """‖S − P(S) − Q₀‖_F / ‖S‖_F."""
        R = S - self.apply(S) - self.constant_noise
        return float(np.linalg.norm(R) / np.linalg.norm(S))

    def operator(self, kernel: np.ndarray | None = None) -> np.ndarray:
        """Dense m²×m² matrix of P on C-order vec (``kernel``: a cached :func:`variance_kernel`)."""
        m, d = self.state_dim, self.dim
        P = np.kron(self.transition, self.transition)
        if not self.state_dependent:
            return P
        noise = self.noise_scale * (variance_kernel(self.expansion) if kernel is None else kernel)
        EN = np.kron(self.noise_map, self.noise_map) @ noise  # (m², d²)
        idx = (np.arange(d)[:, None] * m + np.arange(d)[None, :]).ravel()  # the dd block of the m×m vec
        P[:, idx] += EN
        return P

    def stein(self) -> "SteinSolver":
        """The exact solver of X = FXFᵀ + Q (and of its adjoint) for this F."""
        return SteinSolver(self)

    def transition_radius(self) -> float:
        """ρ(F); the chain is second-moment stable only if ρ(F) < 1."""
        return float(np.max(np.abs(np.linalg.eigvals(self.transition))))

    # ----------------------------------------------------------------- solves
    @cites("wang2026", "Prop. 4.2, Eq. (11); Thm. 4.3, Eq. (12); Prop. B.1")
    def solve(self, *, method: str | None = None, tol: float = 1e-13, initial_guess: Any = None,
              radius_bound: bool = False) -> StationarySolution:
        """The stationary second moment S = P(S) + Q₀, its spectral radius and residual.

        ``method``: ``"direct"`` (the Kronecker solve, default for state dimension ≤
        ``DIRECT_MAX_DIM``) or ``"iterative"`` (GMRES preconditioned by the Stein solve;
        ``initial_guess`` warm-starts it without momentum). The iterative path reports ARPACK's ρ
        up to ``ARPACK_MAX_DIM`` (unless ``radius_bound`` or the rows are streamed), else the
        certified bound.

        Raises
        ------
        UnstableStepSizeError
            ρ ≥ 1; the message gives the largest stable multiple of Λ.
        ConvergenceError
            The relative residual exceeds ``FAIL_RESIDUAL``.
        """
        m = self.state_dim
        if method is None:
            method = "direct" if m <= DIRECT_MAX_DIM else "iterative"
        if method not in ("direct", "iterative"):
            raise SgtuneError(f"method must be 'direct', 'iterative' or None, got {method!r}")
        rho_F = self.transition_radius()
        if not rho_F < 1:
            self.raise_unstable(rho_F * rho_F)
        is_bound = False
        if method == "direct":
            S, rho = self.solve_direct()
        else:
            S0 = None
            if initial_guess is not None and self.momentum == 0.0:
                S0 = as_symmetric(initial_guess, "initial_guess", self.dim, rtol=1e-10)
            S = self.solve_iterative(tol, S0)
            rho, is_bound = self.spectral_radius(S, bound=radius_bound)
        if not rho < 1:
            self.raise_unstable(rho)
        res = self.relative_residual(S)
        if res > FAIL_RESIDUAL:
            raise ConvergenceError(
                f"stationary covariance solve ({method}) reached relative residual {res:.2e} > {FAIL_RESIDUAL}; "
                "the chain is probably close to unstable — reduce the step size", residual=res, method=method)
        if res > WARN_RESIDUAL:
            warnings.warn(f"stationary covariance relative residual {res:.2e} > {WARN_RESIDUAL}", AccuracyWarning,
                          stacklevel=3)
        return StationarySolution(S, float(rho), is_bound, float(res), method, self.dim)

    def solve_direct(self, kernel: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """S from the dense Kronecker system, and ρ from the eigenvalues of its operator (NaN S if ρ ≥ 1)."""
        m = self.state_dim
        P = self.operator(kernel)
        rho = float(np.max(np.abs(np.linalg.eigvals(P))))
        if not rho < 1:
            return np.full((m, m), np.nan), rho
        S = np.linalg.solve(np.eye(m * m) - P, self.constant_noise.ravel()).reshape(m, m)
        return 0.5 * (S + S.T), rho

    def solve_iterative(self, tol: float, initial_guess: np.ndarray | None = None) -> np.ndarray:
        """S by GMRES on the noise correction, right-preconditioned by the exact Stein solve (no m⁴ object)."""
        m, d = self.state_dim, self.dim
        S0, Q0 = initial_guess, self.constant_noise
        if S0 is not None:
            R0 = Q0 - (S0 - self.apply(S0))
            if np.linalg.norm(R0) <= 1e-14 * np.linalg.norm(S0):
                return S0
        stein = self.stein()
        E = self.noise_map

        def op(yvec: np.ndarray) -> np.ndarray:
            Y = yvec.reshape(m, m)
            X = stein.solve(Y)
            return (Y - E @ self.noise(X[:d, :d]) @ E.T).ravel()

        A = LinearOperator((m * m, m * m), matvec=op, dtype=float)
        if S0 is None:
            rhs, S = Q0.copy(), np.zeros((m, m))
        else:
            rhs, S = 0.5 * (R0 + R0.T), S0.copy()
        for _ in range(4):  # iterative refinement on the true residual
            y, info = gmres(A, rhs.ravel(), rtol=tol, atol=0.0, restart=60, maxiter=40)
            S = S + stein.solve(y.reshape(m, m))
            R = Q0 - (S - self.apply(S))
            if np.linalg.norm(R) <= 1e-13 * np.linalg.norm(S):
                break
            rhs = 0.5 * (R + R.T)
        return 0.5 * (S + S.T)

    def solve_constant_noise(self) -> np.ndarray:
        """S = FSFᵀ + Q₀, the stationary second moment without the Σ-dependent noise (one Stein solve)."""
        return sla.solve_discrete_lyapunov(self.transition, self.constant_noise)

    # ----------------------------------------------------------------- spectral radius and stability
    def spectral_radius(self, S: np.ndarray, *, bound: bool = False) -> tuple[float, bool]:
        """ρ of the second-moment map at the solution S, and whether it is only the certified bound.

        ARPACK's ρ (:meth:`perron_radius`) up to ``ARPACK_MAX_DIM`` unless ``bound`` or the rows are
        streamed (each application is then a pass over the data); else the bound
        :meth:`spectral_radius_bound`, or ARPACK's ρ when the bound is void (Q₀ singular: momentum
        without injected noise).
        """
        if self.state_dim <= ARPACK_MAX_DIM and not bound and self.expansion.stream is None:
            return self.perron_radius(S)
        rho = self.spectral_radius_bound(S)
        if not rho < 1:
            return self.perron_radius(S)
        return rho, True

    def spectral_radius_bound(self, S: np.ndarray) -> float:
        """ρ(P) ≤ 1 − λ_min(S^{-1/2} Q₀ S^{-1/2}) since P(S) = S − Q₀ and P is a positive map."""
        try:
            L = np.linalg.cholesky(S)
            Li = np.linalg.inv(L)
            return float(1.0 - np.linalg.eigvalsh(Li @ self.constant_noise @ Li.T)[0])
        except np.linalg.LinAlgError:
            return math.inf

    def perron_radius(self, S: np.ndarray) -> tuple[float, bool]:
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
        (:meth:`symmetric_radius`), else from the power iteration on positive-definite iterates with
        the Collatz–Wielandt bracket of a cone-preserving map,
        λ_min(X^{-1/2}P(X)X^{-1/2}) ≤ ρ ≤ λ_max(X^{-1/2}P(X)X^{-1/2}) for X ≻ 0
        (its midpoint once the bracket has closed to 1e-7 relative; else its upper end, flagged as a bound).
        """
        m = self.state_dim
        if not np.all(np.isfinite(S)):
            return math.inf, False
        op = LinearOperator((m * m, m * m), matvec=lambda v: self.apply(v.reshape(m, m)).ravel(), dtype=float)
        try:
            vals, vecs = eigs(op, k=1, which="LM", v0=S.ravel() / np.linalg.norm(S), tol=1e-8,
                              maxiter=max(200, 20 * m))
            rho = self._perron_or_nan(complex(vals[0]), vecs[:, 0])
            if math.isfinite(rho):
                return rho, False
        except Exception:  # ARPACK non-convergence: the fallbacks below
            pass
        if m <= DENSE_RADIUS_MAX_DIM:
            return self.symmetric_radius(), False
        return self._bracketed_power_radius(S)

    def symmetric_radius(self, kernel: np.ndarray | None = None) -> float:
        """ρ(P) from the dense eigenvalues of P restricted to symmetric matrices (m(m+1)/2 unknowns).

        P maps symmetric matrices to symmetric matrices and its Perron eigenvector is symmetric, so
        the restriction has the same spectral radius at an eighth of the cost of the m²×m² matrix.
        """
        m = self.state_dim
        P = self.operator(kernel)
        iu, ju = np.triu_indices(m)
        rows = iu * m + ju  # vech(Y): the upper triangle of vec(Y)
        cols = P[:, iu * m + ju] + np.where(iu != ju, 1.0, 0.0)[None, :] * P[:, ju * m + iu]  # vec(X) = Dup vech(X)
        return float(np.max(np.abs(np.linalg.eigvals(cols[rows]))))

    def _perron_or_nan(self, lam: complex, vec: np.ndarray) -> float:
        """λ if (λ, vec) is a Perron pair of P (real λ ≥ 0, PSD eigenvector, small residual), else nan."""
        m = self.state_dim
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
        res = float(np.linalg.norm(self.apply(V) - lam.real * V))
        return float(lam.real) if res <= 1e-6 * max(lam.real, 1e-300) * nv else math.nan

    def _bracketed_power_radius(self, S: np.ndarray, max_iter: int = 2000,
                                rtol: float = 1e-7) -> tuple[float, bool]:
        """Power iteration X ← P(X)/‖P(X)‖ from the stationary S ≻ 0 with the Collatz–Wielandt bracket."""
        X = S / np.linalg.norm(S)
        lo, hi = 0.0, math.inf
        for k in range(max_iter):
            Y = self.apply(X)
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

    @cites("wang2026", "Prop. 4.4 (deterministic bound 2/μ_max(ΛH)) and Eqs. (11)–(12) (noise)")
    def max_stable_multiplier(self, rtol: float = 1e-3) -> float:
        """Largest c such that the chain with step matrix cΛ is second-moment stable (bisection on ρ)."""
        lo, hi = 0.0, 1.0
        kernel = variance_kernel(self.expansion) if self.state_dim <= DIRECT_MAX_DIM else None
        while self._radius_scaled(hi, kernel) < 1:  # grow/shrink a bracket around the stability boundary
            lo, hi = hi, hi * 2
            if hi > 1e12:
                return math.inf
        while hi - lo > rtol * hi:
            mid = 0.5 * (lo + hi)
            if self._radius_scaled(mid, kernel) < 1:
                lo = mid
            else:
                hi = mid
        return lo

    def _radius_scaled(self, c: float, kernel: np.ndarray | None) -> float:
        chain = self.scaled(c)
        rho_F = chain.transition_radius()
        if not rho_F < 1:
            return rho_F**2
        m = chain.state_dim
        if m <= DIRECT_MAX_DIM:
            return float(np.max(np.abs(np.linalg.eigvals(chain.operator(kernel)))))
        X = chain.stein().solve(np.eye(m))
        return chain.perron_radius(X)[0]

    def raise_unstable(self, rho: float) -> NoReturn:
        """Raise :class:`UnstableStepSizeError` for spectral radius ``rho``, naming the largest stable multiple."""
        c = self.max_stable_multiplier(1e-3)
        if not c > 0:
            raise UnstableStepSizeError(
                f"step_matrix is unstable for every positive multiple (spectral radius {rho:.4g} >= 1): ΛH has an "
                "eigenvalue with non-positive real part; use a symmetric positive-definite Λ (e.g. from sgtune "
                "lambda)", spectral_radius=rho, max_stable_step=0.0)
        lam = self.step_matrix
        remedies = ()
        if np.allclose(lam, lam[0, 0] * np.eye(lam.shape[0]), rtol=0, atol=1e-15 * abs(lam[0, 0])):
            step = float(f"{STABLE_FRACTION * c * lam[0, 0]:.3g}")  # a scalar step: the computed one
            remedies = (Remedy(f"a step size {step:.3g} ({STABLE_FRACTION:g}× the largest stable one, "
                               f"{c * lam[0, 0]:.4g})", {"step_size": step}, expect="runs"),)
        raise UnstableStepSizeError(
            f"step_matrix is unstable: the second-moment map has spectral radius {rho:.4g} >= 1; "
            f"scale the step size by less than {c:.4g} (largest stable multiple of Λ; without noise the bound "
            f"is λ < 2/μ_max(ΛH), Wang, Ding & Huggins 2026, Prop. 4.4)", spectral_radius=rho, max_stable_step=c,
            remedies=remedies)

    # ----------------------------------------------------------------- autocorrelation
    @cites("wang2026", "Prop. 4.4 and its definition τ_int(f_v) = 1 + 2Σ_k ρ_k")
    def autocorrelation_times(self, S: np.ndarray, basis: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """τ_d = 2W_dd/Σ_dd − 1 and τ_worst = 2μ_max(sym W, Σ) − 1, W = [(I − F)⁻¹S]_θθ = Σ_k [F^kS]_θθ.

        ``basis`` T: this chain runs in coordinates φ with θ = Tφ (:meth:`Expansion.in_coordinates`);
        τ_d is then that of θ_d (W and Σ mapped by T; τ_worst does not depend on the coordinates)."""
        d = self.dim
        m = S.shape[0]
        W = np.linalg.solve(np.eye(m) - self.transition, S)[:d, :d]
        sig = S[:d, :d]
        if basis is None:
            tau = 2.0 * np.diag(W) / np.diag(sig) - 1.0
        else:
            tau = 2.0 * np.einsum("ij,jk,ik->i", basis, W, basis) / np.einsum("ij,jk,ik->i", basis, sig, basis) - 1.0
        Ws = 0.5 * (W + W.T)
        try:
            top = sla.eigh(Ws, 0.5 * (sig + sig.T), eigvals_only=True)[-1]
            worst = float(2.0 * top - 1.0)
        except (np.linalg.LinAlgError, ValueError):
            worst = float(np.max(tau))
        return tau, worst


def _spd_for_sgld(lam: np.ndarray) -> np.ndarray:
    """Λ symmetrised and checked positive definite: SGLD injects N(0, 2Λ/β)."""
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
    return lam


class SteinSolver:
    """Exact solver of X = F X Fᵀ + Q (and of the adjoint X = Fᵀ X F + Q) through one eigendecomposition of F.

    Without momentum and with Λ = LLᵀ symmetric positive definite, ΛH = (LU) diag(μ) (LU)⁻¹ with
    LᵀHL = U diag(μ) Uᵀ, so the eigenvectors are real and as well conditioned as L. Otherwise the
    complex eigendecomposition of F; when its eigenvectors are ill conditioned (cond > 1e6, e.g. a
    critically damped momentum mode) scipy's Schur-based Bartels–Stewart solver, O(m³) per call.

    Parameters
    ----------
    chain : LinearChain
        The chain whose transition F is decomposed.

    Attributes
    ----------
    eigenvalues : (m,) ndarray
        The eigenvalues a of F.
    V, Vinv : ndarray or None
        Its eigenvectors and their inverse (None when ``fallback``).
    real : bool
        Whether a and V are real.
    fallback : bool
        Whether the Schur-based solver is used.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.linear_chain import LinearChain
    >>> chain = LinearChain.of(expand(get_model("logistic"), example("logistic")), Dynamics(0.1, batch_size=32))
    >>> from sgtune.theory.linear_chain import SteinSolver
    >>> solver = SteinSolver(chain)
    >>> X = solver.solve(np.eye(5))
    >>> bool(np.allclose(X, chain.transition @ X @ chain.transition.T + np.eye(5)))
    True
    """

    def __init__(self, chain: LinearChain) -> None:
        F = chain.transition
        lam = chain.step_matrix
        self.F = F
        self.fallback = False
        if chain.momentum == 0.0 and is_symmetric(lam):
            try:
                L = np.linalg.cholesky(lam)
                mu, U = np.linalg.eigh(L.T @ chain.hessian @ L)
                self.V = L @ U
                Vinv = sla.solve_triangular(L, np.eye(L.shape[0]), lower=True)
                self.Vinv = U.T @ Vinv
                self.eigenvalues = 1.0 - mu
                self.real = True
                self.denom = 1.0 - np.outer(self.eigenvalues, self.eigenvalues)
                return
            except np.linalg.LinAlgError:
                pass
        a, V = np.linalg.eig(F)
        self.fallback = bool(np.linalg.cond(V) > 1e6)
        self.eigenvalues, self.V = a, V
        self.Vinv = None if self.fallback else np.linalg.inv(V)
        self.real = bool(np.all(np.isreal(a)) and np.all(np.isreal(V)))
        if self.real:
            self.eigenvalues, self.V = a.real, V.real
            self.Vinv = None if self.fallback else self.Vinv.real
        self.denom = 1.0 - np.outer(self.eigenvalues, self.eigenvalues)

    def solve(self, Q: np.ndarray) -> np.ndarray:
        """X = F X Fᵀ + Q (symmetrised)."""
        if self.fallback:
            X = sla.solve_discrete_lyapunov(self.F, Q, method="bilinear")
            return 0.5 * (X + X.T)
        Qt = self.Vinv @ Q @ self.Vinv.T
        X = self.V @ (Qt / self.denom) @ self.V.T
        if not self.real:
            X = X.real
        return 0.5 * (X + X.T)

    def solve_adjoint(self, Q: np.ndarray) -> np.ndarray:
        """X = Fᵀ X F + Q: X = V⁻ᵀ[(VᵀQV)/(1−aaᵀ)]V⁻¹ (symmetrised)."""
        if self.fallback:
            X = sla.solve_discrete_lyapunov(self.F.T, Q, method="bilinear")
            return 0.5 * (X + X.T)
        Qt = self.V.T @ Q @ self.V
        X = self.Vinv.T @ (Qt / self.denom) @ self.Vinv
        if not self.real:
            X = X.real
        return 0.5 * (X + X.T)
