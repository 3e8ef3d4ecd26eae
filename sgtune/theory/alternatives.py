r"""What the source papers' other theories say about alternatives to a planned SG(L)D chain.

A plan (:mod:`sgtune.workflows.plan`) tunes SG(L)D with fresh minibatches. Three other theories of
the source papers quantify what would change with another sampler or batching, each at the planned
step-size matrix Λ; the numbers are per *modal direction* of the chain: with Λ = LLᵀ and
LᵀHL = U diag(h) Uᵀ, the coordinates a = (LU)⁻¹(θ − θ̂) evolve independently under the full
gradient, a_j' = (1 − h_j)a_j + noise, with injected variance 2/β and gradient-noise variance
n_j = (UᵀLᵀ C̄ LU)_jj per step (C̄ the minibatch-noise covariance of the mean-loss gradient).

- :func:`reshuffle_variance_change` — random reshuffling instead of fresh batches (Shaw & Whalley 2025, §4, the
  Gaussian model problem): direction j is that problem with rescaled step h_j and gradient-noise ratio
  v_j = β n_j/h_j (v = N·Var(x̄_b)/σ² there; v = ∞ for SGD); the epoch-averaged variance of RR over
  the variance of RM is (1 + ε̄_RR)/(1 + ε_RM) with the closed forms of
  :mod:`sgtune.theory.reshuffle`. Exact for a Gaussian location model (constant per-sample curvature,
  every direction's noise additive and uncorrelated with the others); an approximation otherwise.
- :func:`sglrw_variance_change` — SGLRW instead of SGLD (Mensch et al. 2025, §4): SGLRW removes
  SGLD's per-coordinate variance inflation δG_jj/2 (relative), δ = Λ_jj/β the step and G = β²Ĉ the
  gradient-noise covariance in Mensch et al.'s (2025) units (U = β·L).
- :func:`nonreversible_gain` — a non-reversible drift J for an SGLD target (GNLD paper, anonymous 2025, Thm. 3.5):
  for the slowest modal direction's linear functional, the variance-optimal J under the
  budget ‖Λ^{-1/2}JΛ^{-1/2}‖₂ ≤ κ_J lowers the asymptotic variance by 1/(1 + κ_J²), and the Euler step
  stays stable only up to η_J (max_stable_step of (Λ + J)βH); the gain is available at the planned
  step when 1/β < η_J.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core._validation import as_float_array, check_int, check_positive
from ..core.errors import SgtuneError, ShapeError
from .fluctuation import max_stable_step, optimal_antisymmetric_nld
from .reshuffle import rel_err_rr_average, rel_err_ula

__all__ = ["ModalDirections", "modal_directions", "ReshuffleChange", "reshuffle_variance_change",
           "sglrw_variance_change", "NonReversibleGain", "nonreversible_gain"]


@dataclass(frozen=True)
class ModalDirections:
    """The modal directions of a chain: Λ = LLᵀ, LᵀHL = U diag(h) Uᵀ.

    Attributes
    ----------
    h : (D,) ndarray
        The eigenvalues h_j of LᵀHL (ascending): the rescaled steps of the directions.
    basis : (D, D) ndarray
        V = LU, one direction per column (θ − θ̂ = V a).

    Examples
    --------
    >>> m = modal_directions(np.diag([1.0, 4.0]), 0.1 * np.eye(2))
    >>> m.h
    array([0.1, 0.4])
    """

    h: np.ndarray
    basis: np.ndarray


@cites("wang2026", "Prop. 4.4: ΛH is similar to the symmetric Λ^{1/2}HΛ^{1/2}; its eigenvalues set the mixing")
def modal_directions(hessian: Any, step_matrix: Any) -> ModalDirections:
    """The modal directions of SG(L)D with an SPD Λ: eigenpairs of LᵀHL, basis V = LU (ΛH = V diag(h) V⁻¹).

    Parameters
    ----------
    hessian : (D, D) array
        The symmetric Hessian H.
    step_matrix : (D, D) array
        The symmetric positive-definite step-size matrix Λ.

    Returns
    -------
    ModalDirections
        The eigenvalues h and the basis V.

    Raises
    ------
    ShapeError
        If H and Λ are not square matrices of one size.
    SgtuneError
        If Λ is not positive definite.

    Examples
    --------
    >>> m = modal_directions(np.diag([1.0, 4.0]), 0.1 * np.eye(2))
    >>> m.h, np.round(m.basis, 4)
    (array([0.1, 0.4]), array([[0.3162, 0.    ],
           [0.    , 0.3162]]))
    """
    H = as_float_array(hessian, "hessian", ndim=2)
    lam = as_float_array(step_matrix, "step_matrix", ndim=2)
    if H.shape != lam.shape or H.shape[0] != H.shape[1]:
        raise ShapeError(f"hessian and step_matrix must be (D, D) of one size, got {H.shape} and {lam.shape}")
    try:
        L = np.linalg.cholesky(0.5 * (lam + lam.T))
    except np.linalg.LinAlgError:
        raise SgtuneError("step_matrix must be symmetric positive definite for the modal directions") from None
    G = L.T @ H @ L
    h, U = np.linalg.eigh(0.5 * (G + G.T))
    return ModalDirections(h=h, basis=L @ U)


@dataclass(frozen=True)
class ReshuffleChange:
    """Result of :func:`reshuffle_variance_change`.

    Attributes
    ----------
    h : (D,) ndarray
        The rescaled steps of the modal directions.
    noise_ratio : (D,) ndarray
        v_j = β n_j/h_j (``inf`` for SGD).
    variance_change : (D,) ndarray
        Var_RR/Var_RM − 1 per direction (epoch average of RR).
    n_batches : int
        R = ⌊N/B⌋ batches per epoch.
    basis : (D, D) ndarray
        V = LU, the modal directions (θ − θ̂ = V a).

    Examples
    --------
    >>> r = reshuffle_variance_change(np.eye(1), np.array([[0.01]]), np.eye(1), n_data=1000, batch_size=10)
    >>> r.n_batches, np.round(r.variance_change, 4)
    (100, array([-0.7321]))
    """

    h: np.ndarray
    noise_ratio: np.ndarray
    variance_change: np.ndarray
    n_batches: int
    basis: np.ndarray

    def reshuffled_cov(self, cov: np.ndarray) -> np.ndarray:
        """Σ_RR ≈ G Σ Gᵀ from the fresh-batch Σ, G = V diag(√(1 + change)) V⁻¹ (each modal standard deviation
        rescaled, the modal correlations kept)."""
        V = self.basis
        A = np.linalg.solve(V, np.linalg.solve(V, cov).T).T  # V⁻¹ Σ V⁻ᵀ
        s = np.sqrt(np.clip(1.0 + self.variance_change, 0.0, None))
        out = V @ (s[:, None] * A * s[None, :]) @ V.T
        return 0.5 * (out + out.T)


@cites("shaw2025", "§4: SGLD-RM and SGLD-RR variances of the Gaussian model problem, per modal direction "
                   "(noise ratio and epoch average corrected, see sgtune.theory.reshuffle)")
def reshuffle_variance_change(hessian: Any, step_matrix: Any, noise_cov: Any, *, n_data: int, batch_size: int,
                              inv_temperature: float = math.inf,
                              modes: ModalDirections | None = None) -> ReshuffleChange:
    r"""Compute Var_RR/Var_RM − 1 per modal direction: random reshuffling vs fresh batches.

    The Gaussian case of Shaw & Whalley (2025), §4, applied to each modal direction.

    Parameters
    ----------
    hessian : (D, D) array
        The Hessian H.
    step_matrix : (D, D) array
        The SPD step-size matrix Λ (no momentum).
    noise_cov : (D, D) array
        C̄, the covariance of the minibatch mean-loss gradient of the fresh-batch chain
        (batches without replacement, i.e. with the factor (N−B)/(N−1)).
    n_data, batch_size : int
        N and B; R = ⌊N/B⌋.
    inv_temperature : float
        The inverse temperature β (``inf``: SGD, where only the gradient noise drives the variance).
    modes : ModalDirections, optional
        The :func:`modal_directions` of (H, Λ), when already computed.

    Returns
    -------
    ReshuffleChange
        With x_j = 1/ρ_j = (R − 1)h_j/(β n_j) and ε_ULA = h/(2 − h),
        (1 + ε̄_RR)/(1 + ε_RM) = (x(1 + ε_ULA) + br̄)/(x(1 + ε_ULA) + (R − 1)h/(2 − h)), br̄ = (ε̄_RR − ε_ULA)/ρ.

    Raises
    ------
    SgtuneError
        If some h_j ∉ (0, 2) (the chain is not stable).

    Examples
    --------
    >>> import numpy as np
    >>> r = reshuffle_variance_change(np.eye(1), np.array([[0.01]]), np.eye(1), n_data=1000, batch_size=10)
    >>> bool(-1 < r.variance_change[0] < 0)   # SGD with reshuffling: the epoch's noise nearly cancels
    True
    """
    n = check_int(n_data, "n_data", low=2)
    B = check_int(batch_size, "batch_size", low=1, high=n)
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    if modes is None:
        modes = modal_directions(hessian, step_matrix)
    C = as_float_array(noise_cov, "noise_cov", ndim=2)
    V, h = modes.basis, modes.h
    if not (np.all(h > 0) and np.all(h < 2)):
        raise SgtuneError(f"reshuffle_variance_change needs a stable chain without momentum: every h_j in (0, 2), "
                          f"got [{h.min():.4g}, {h.max():.4g}]")
    nj = np.sum(V * (C @ V), axis=0)  # (VᵀC̄V)_jj
    R = n // B
    change = np.zeros_like(h)
    ratio = np.full_like(h, math.inf) if math.isinf(beta) else beta * nj / h
    if R >= 2:
        for j, hj in enumerate(h):
            eu = rel_err_ula(hj)
            br = rel_err_rr_average(hj, R, 1.0) - eu
            lin = (R - 1) * hj / (2.0 - hj)
            x = 0.0 if math.isinf(beta) else (R - 1) * hj / (beta * max(nj[j], 1e-300))
            change[j] = (x * (1.0 + eu) + br) / (x * (1.0 + eu) + lin) - 1.0
    return ReshuffleChange(h=h, noise_ratio=ratio, variance_change=change, n_batches=R, basis=V)


@cites("mensch2025", "§4, Lemma 4.3 / eq. 110: SGLRW's E[M] = offdiag(G) removes SGLD's diagonal inflation "
                     "δG_jj/2")
def sglrw_variance_change(step_diagonal: Any, noise_diagonal: Any, *, inv_temperature: float) -> np.ndarray:
    r"""Relative change of each coordinate's stationary variance from SGLD to SGLRW: −δ_j G_jj/2 = −Λ_jj β Ĉ_jj/2.

    Parameters
    ----------
    step_diagonal : (D,) array
        The diagonal of Λ (SGLRW moves coordinate-wise: scalar or diagonal Λ).
    noise_diagonal : (D,) array
        The variances Ĉ_jj of the minibatch mean-loss gradient (with 1/B and the
        finite-population factor).
    inv_temperature : float
        The inverse temperature β < ∞ (SGLRW is a Langevin sampler; Mensch et al.'s (2025) U = β·L,
        δ = Λ/β, G = β²Ĉ).

    Returns
    -------
    (D,) ndarray
        The relative change of each coordinate's variance.

    Raises
    ------
    ShapeError
        If the two diagonals differ in length.

    Examples
    --------
    >>> float(sglrw_variance_change([0.1], [2.0], inv_temperature=1.0)[0])
    -0.1
    """
    beta = check_positive(inv_temperature, "inv_temperature")
    lam = as_float_array(step_diagonal, "step_diagonal", ndim=1)
    c = as_float_array(noise_diagonal, "noise_diagonal", ndim=1)
    if lam.shape != c.shape:
        raise ShapeError(f"step_diagonal and noise_diagonal must have one length, got {lam.shape} and {c.shape}")
    return -lam * beta * c / 2.0


@dataclass(frozen=True)
class NonReversibleGain:
    """Result of :func:`nonreversible_gain`.

    Attributes
    ----------
    variance_ratio : float
        σ²/σ_R² for the slowest modal direction's functional with the optimal J (= 1/(1+κ_J²)).
    budget : float
        κ_J.
    max_step_multiple_reversible : float
        η_max·β of the reversible scheme (Λ alone): 2/h_max.
    max_step_multiple : float
        η_J·β, the largest stable multiple of the planned step with J.
    available : bool
        Whether the planned step (multiple 1) is stable with J.
    antisymmetric : (D, D) ndarray
        J.

    Examples
    --------
    >>> g = nonreversible_gain(np.diag([1.0, 4.0]), 0.1 * np.eye(2), inv_temperature=100.0)
    >>> f"{g.variance_ratio:.3f}", f"{g.max_step_multiple_reversible:.3f}", g.available
    ('0.500', '5.000', True)
    """

    variance_ratio: float
    budget: float
    max_step_multiple_reversible: float
    max_step_multiple: float
    available: bool
    antisymmetric: np.ndarray


@cites("gnld2025", "Thm. 3.5 (σ² ≤ σ_R²), Prop. 5.3, Cor. 5.5 (NLD): budget-optimal J, stiffer step")
def nonreversible_gain(hessian: Any, step_matrix: Any, *, inv_temperature: float, budget: float = 1.0
                       ) -> NonReversibleGain:
    r"""Mixing gain of a non-reversible drift J for SGLD with Λ at temperature β (the GNLD paper, anonymous 2025).

    SGLD θ' = θ − Λ∇L + sqrt(2Λ/β)ξ is the GNLD paper's Euler scheme (eq. 2.8) with H = βL, D = Λ, η = 1/β.
    For f = ℓᵀθ along the slowest modal direction b (ℓ = βHb) the optimal J with
    ‖Λ^{-1/2}JΛ^{-1/2}‖₂ ≤ κ_J gives σ²/σ_R² = 1/(1 + κ_J²)
    (:func:`~sgtune.theory.fluctuation.optimal_antisymmetric_nld`); the scheme with D + J is stable
    for η < η_J (:func:`~sgtune.theory.fluctuation.max_stable_step`).

    Parameters
    ----------
    hessian : (D, D) array
        The Hessian H of the mean loss, D ≥ 2.
    step_matrix : (D, D) array
        The SPD step-size matrix Λ.
    inv_temperature : float
        The inverse temperature β < ∞.
    budget : float
        The budget κ_J > 0.

    Returns
    -------
    NonReversibleGain
        The variance ratio with the optimal J and the stable step multiples with and without it.

    Examples
    --------
    >>> g = nonreversible_gain(np.diag([1.0, 4.0]), 0.1 * np.eye(2), inv_temperature=100.0, budget=1.0)
    >>> f"{g.variance_ratio:.3f}", f"{g.max_step_multiple:.3f}"   # 1/(1 + κ²); J allows a longer step
    ('0.500', '6.250')
    """
    beta = check_positive(inv_temperature, "inv_temperature")
    modes = modal_directions(hessian, step_matrix)
    H = as_float_array(hessian, "hessian", ndim=2)
    lam = as_float_array(step_matrix, "step_matrix", ndim=2)
    M = beta * 0.5 * (H + H.T)
    b = modes.basis[:, 0]
    res = optimal_antisymmetric_nld(M, M @ b, budget, diffusion=0.5 * (lam + lam.T))
    eta_j = max_stable_step(M, lam + res.antisymmetric)
    eta_r = max_stable_step(M, 0.5 * (lam + lam.T))
    return NonReversibleGain(variance_ratio=float(res.ratio), budget=float(budget),
                             max_step_multiple_reversible=float(eta_r * beta), max_step_multiple=float(eta_j * beta),
                             available=bool(eta_j * beta > 1.0), antisymmetric=res.antisymmetric)
