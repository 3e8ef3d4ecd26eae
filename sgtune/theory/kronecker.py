r"""A per-layer Kronecker-factored step-size matrix Λ for whole networks (the ``kronecker`` family).

Convention (row-major, PyTorch's and sgtune's). A fully connected layer l maps an input a ∈ ℝ^{d_in} to
z = W a (+ b). Its parameters are the matrix W̃ = [W | b] of shape (d_out, d_in) (the bias is the last
column: the input is augmented with a 1, the standard KFAC convention; d_in counts that column), and
vec(W̃) is the **row-major** flattening, entry (i, j) at i·d_in + j — the order of ``W.flatten()`` in
PyTorch and of θ in :class:`sgtune.models.mlp.MLP`. In that order the per-sample gradient of the
layer is vec(e aᵀ) = e ⊗ a (``np.kron(e, a)``, e = ∂l/∂z), so every Kronecker product below is written
``np.kron(output_factor, input_factor)``: the KFAC literature's column-major A ⊗ G is our G ⊗ A.
sgtune's models store W row-major and then b (not interleaved): :class:`LayerFactors` records where
each lies in θ, and every map here (``apply``, the dense checks) goes through that layout.

The factored chain. Per layer, with s = f/B the noise scale (f = (N−B)/(N−1) without replacement,
1 with replacement; Wang, Ding & Huggins 2026, Thm. 4.3),

    H_l = G̃_l ⊗ Ã_l,   C_l = E_l ⊗ Ã_l,   Λ_l = M_l ⊗ Ã_l⁻¹     (row-major: np.kron(M, inv(Ã)))

and the chain θ_l' = θ_l − Λ_l m_l' + √(2Λ_l/β) ξ, m_l' = κ m_l + H_l(θ_l − θ̂_l) + η_l, η_l ~ (0, s C_l),
independently over layers (block-diagonal H, C and Λ). Then ΛH = M G̃ ⊗ I, and in the coordinates
u = (I ⊗ Ã^{1/2}) d, w = (I ⊗ Ã^{−1/2}) ν (d = θ − θ̂, ν the momentum) every matrix of the chain is
X ⊗ I: the layer is d_in independent copies of the d_out-dimensional chain with curvature G̃, noise E and
step M. So its stationary second moment is exactly

    Σ_dd = S_dd ⊗ Ã⁻¹,   Σ_dν = S_dν ⊗ I,   Σ_νν = S_νν ⊗ Ã,

with S the stationary second moment of the small chain: S = F S Fᵀ + Q₀ (Wang, Ding & Huggins 2026,
Eq. (11) with constant noise; Prop. B.1 with momentum), F = I − MG̃ (or the heavy-ball
[[I−MG̃, −κM], [G̃, κI]]), Q₀ = s M E M + 2M/β (or E_aug s E E_augᵀ + blockdiag(2M/β, 0)). The
theory is **exact for this factored chain**: block-diagonal over layers, with the Kronecker products
above as its Hessian, its constant minibatch-noise covariance and its Λ, for any B, β, κ, with or
without replacement (tests: dense np.kron matrices through :class:`sgtune.theory.linear_chain.LinearChain`
agree to 1e-10).

What the factored chain leaves out of the real proxy chain (measured, not hidden:
``tests/test_kronecker.py`` and docs/guide/kronecker.md report the distance to the dense exact answer):

- KFAC's expectation approximation: mean_n (e eᵀ ⊗ a aᵀ) ≈ mean(e eᵀ) ⊗ mean(a aᵀ) for the
  Gauss–Newton curvature (output factor G = mean ρ''·u uᵀ) and for the per-sample gradient
  covariance (E = mean e eᵀ, empirical-Fisher factor), and the cross-layer blocks of H and C.
- The mean gradient ḡ (C = 𝓘 − ḡḡᵀ): ḡḡᵀ is replaced by its nearest Kronecker product with input
  factor Ã in whitened coordinates, Ḡ Ã⁻¹ Ḡᵀ / d_in ⊗ Ã (Ḡ the layer's mean gradient as a matrix):
  the partial trace over the input of (I ⊗ Ã^{−1/2}) ḡḡᵀ (I ⊗ Ã^{−1/2}), divided by d_in. E is clipped
  at 0 (eigenvalues) should the difference of the two approximations be indefinite.
- The Σ-dependent part of the exact noise C̄(Σ) (Eq. (12): (f/B)(mean_n J_nΣJ_n − JΣJ)): with
  ``method="dq-const"`` (the default) the factored noise is the constant C at θ̂ (DQ+const of Algorithm 1 in
  factored form); with ``method="dq-exact"`` it is added in factored form, c(S) ⊗ Ã
  (:func:`curvature_noise_factor`: the per-sample Gauss–Newton blocks G_n ⊗ ã_nã_nᵀ, KFAC's independence of
  the input and output sides, the whitened partial trace), so the layer's second moment solves the linear fixed
  point S = L(S) + Q₀ + s·M c(S) M of size d_out² (:func:`layer_exact_stationary`), which has no solution when
  the noise gain ρ ≥ 1 (the mean dynamics stable, the second moments growing). The tuner then evaluates c at
  the target as the dense ``tune(method="dq-exact")`` does. Only the Gauss–Newton part of the per-sample
  Hessians enters: the residual term ρ'(f_n)∂²f_n of the exact per-sample Hessian is left out (measured:
  benchmarks/results/kronecker_vs_dense.txt).
- The prior (weight decay δ, H = J + (δ/N) I) is not Kronecker-separable. It is absorbed by factored
  Tikhonov damping (Martens & Grosse 2015, §6.3): with γ = δ/N and
  π = √((tr A/d_in)/(tr G/d_out)), Ã = A + π√γ I and G̃ = G + (√γ/π) I, so G̃ ⊗ Ã = G ⊗ A + γI +
  √γ(π G ⊗ I + I ⊗ A/π) over-counts the prior by the cross terms. laplace-torch's ``KronLaplace``
  instead adds δ exactly in the joint eigenbasis of G and A; both are diagonal in that basis, so the
  relative Frobenius distance between the damped posterior and laplace-torch's is computed exactly
  per layer (``prior_error``) with d_out·d_in numbers.

The prior in the eigenbasis (``prior="eigenbasis"``, :func:`tune_layer_eigenbasis`): instead of damping,
H_l = G ⊗ A + γI = (Q_G ⊗ Q_A)(diag(g ⊗ a) + γ)(Q_G ⊗ Q_A)ᵀ exactly, the noise is taken diagonal in the same
basis (EKFAC-style) and Λ_l is diagonal there, so each layer is d_out·d_in independent scalar chains and the
prediction is exact for that chain (the KFAC curvature with the exact prior, laplace-torch's ``KronLaplace``
posterior as the target). Measured on real networks it is worse than damping (docs/guide/kronecker.md), so
``"damped"`` is the default.

Targets (per layer, for the output factor S*; the input factor is Ã⁻¹):

- ``posterior``: Σ* = H̃⁻¹/N = (G̃⁻¹/N) ⊗ Ã⁻¹, so S* = G̃⁻¹/N (KFAC-Laplace in the damped form; the
  eigenbasis form of laplace-torch is reported alongside: :func:`eigenbasis_posterior_variance`).
- ``sandwich``: J⁻¹𝓘J⁻¹/N with J = G ⊗ A and 𝓘 = E ⊗ A is G⁻¹EG⁻¹/N ⊗ A⁻¹, exact in factored form
  when δ = 0; with a prior the damped J̃ = G̃ ⊗ Ã gives G̃⁻¹EG̃⁻¹ ⊗ Ã⁻¹AÃ⁻¹, whose input factor is
  replaced by t·Ã⁻¹ with t = tr(Ã⁻¹A)/d_in (the same whitened partial trace).

Tuning: with S = S* fixed the small chain's equation is the dense tuning problem of
:func:`sgtune.theory.tuning.solve_step_matrix` (R = sE + G̃S*G̃) or, with momentum,
:func:`sgtune.theory.tuning.solve_momentum_step_matrix` (noise sE) at size d_out: M is SPD and the
factored chain's stationary covariance equals the factored target exactly.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core._refs import cites
from ..core.config import Dynamics
from ..core.errors import AccuracyWarning, NotPositiveDefiniteError, SgtuneError, ShapeError, UnstableStepSizeError
from ..models.kfac import KroneckerFactors, LayerFactors, damp_factors, mlp_factors, theta_indices, torch_factors
from ..models.mlp import MLP
from .linear_chain import LinearChain, SteinSolver, finite_population_factor
from .tuning import solve_momentum_step_matrix, solve_step_matrix

__all__ = ["tune_kronecker", "KroneckerLayer", "KroneckerTuning", "damped_factors", "tune_layer",
           "noise_factor_for",
           "layer_target", "layer_stationary", "tune_factors", "eigenbasis_posterior_variance",
           "KRONECKER_TARGETS", "KRONECKER_PRIORS", "tune_layer_eigenbasis", "KRONECKER_METHODS",
           "curvature_noise_factor", "layer_exact_stationary", "eigenbasis_curvature_noise",
           "exact_noise_prediction"]

#: the targets of the Kronecker family
KRONECKER_TARGETS = ("posterior", "sandwich")
#: the noise models of the Kronecker family (the dense tuner's names, :func:`sgtune.theory.tuning.tune`)
KRONECKER_METHODS = ("dq-exact", "dq-const")
#: how the prior enters the factors (:func:`tune_factors`)
KRONECKER_PRIORS = ("damped", "eigenbasis")


def _sym(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + a.T)


@cites("martens2015", "§6.3: factored Tikhonov damping (A + π√γ I) ⊗ (G + √γ/π I), π² = (tr A/d_in)/(tr G/d_out)")
def damped_factors(layer: LayerFactors, prior_precision: float, n_data: int) -> tuple[np.ndarray, np.ndarray]:
    """(Ã, G̃): the layer's factors with the prior γ = δ/N absorbed by factored Tikhonov damping.

    Parameters
    ----------
    layer : LayerFactors
        The layer.
    prior_precision : float
        The prior precision δ (0: the factors unchanged).
    n_data : int
        N (the mean loss's curvature is J + (δ/N) I).

    Returns
    -------
    A_damped : ndarray
        Ã = A + π√γ I (Martens & Grosse 2015, §6.3).
    G_damped : ndarray
        G̃ = G + (√γ/π) I.

    Examples
    --------
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import damped_factors
    >>> lf = LayerFactors("fc", np.eye(2), 4 * np.eye(1), np.eye(1), (0, 2))
    >>> A, G = damped_factors(lf, 4.0, 1)   # γ = 4, π = √(1/4) = 1/2
    >>> float(A[0, 0]), float(G[0, 0])
    (2.0, 8.0)
    """
    return damp_factors(layer.input_factor, layer.curvature_factor, prior_precision / n_data)


@cites("sgtune", "C = 𝓘 − ḡḡᵀ ≈ E_eff ⊗ Ã: nearest Kronecker product with input factor Ã in whitened coordinates")
def noise_factor_for(layer: LayerFactors, A_damped: np.ndarray) -> np.ndarray:
    """E_eff with C ≈ E_eff ⊗ Ã: t·E − ḠÃ⁻¹Ḡᵀ/d_in, t = tr(Ã⁻¹A)/d_in, eigenvalues clipped at 0.

    The KFAC 𝓘 ≈ E ⊗ A and the mean-gradient term ḡḡᵀ are each replaced by the partial trace over the
    input of (I ⊗ Ã^{−1/2}) X (I ⊗ Ã^{−1/2}), divided by d_in — the Frobenius-nearest X_out ⊗ I in the
    whitened coordinates where the factored chain decouples (t = 1 and the first term is E itself when
    Ã = A, i.e. without prior).

    Parameters
    ----------
    layer : LayerFactors
        The layer.
    A_damped : (d_in, d_in) ndarray
        Ã.

    Returns
    -------
    (d_out, d_out) ndarray
        E_eff, symmetric positive semi-definite.

    Examples
    --------
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import noise_factor_for
    >>> lf = LayerFactors("fc", np.eye(2), np.eye(1), 2 * np.eye(1), (0, 2), mean_gradient=np.ones((1, 2)))
    >>> noise_factor_for(lf, np.eye(2))   # 2 − (1·1 + 1·1)/2
    array([[1.]])
    """
    t = float(np.trace(np.linalg.solve(A_damped, layer.input_factor))) / layer.d_in
    E = t * layer.noise_factor
    if layer.mean_gradient is not None:
        Gb = np.asarray(layer.mean_gradient, dtype=np.float64)
        E = E - Gb @ np.linalg.solve(A_damped, Gb.T) / layer.d_in
    w, V = np.linalg.eigh(_sym(E))
    if w[0] < 0:
        E = (V * np.clip(w, 0.0, None)) @ V.T
    return _sym(E)


@cites("wang2026", "§2.2 targets (posterior H⁻¹/N, sandwich J⁻¹𝓘J⁻¹/N) in Kronecker-factored form")
def layer_target(layer: LayerFactors, A_damped: np.ndarray, G_damped: np.ndarray, target: str,
                 n_data: int) -> np.ndarray:
    """S*, the output factor of the layer's target Σ* = S* ⊗ Ã⁻¹ (module docstring).

    Parameters
    ----------
    layer : LayerFactors
        The layer.
    A_damped, G_damped : ndarray
        Ã and G̃ (:func:`damped_factors`).
    target : {"posterior", "sandwich"}
        The target.
    n_data : int
        N.

    Returns
    -------
    (d_out, d_out) ndarray
        S*: G̃⁻¹/N (posterior) or t·G̃⁻¹EG̃⁻¹/N, t = tr(Ã⁻¹A)/d_in (sandwich; t = 1 without prior).

    Examples
    --------
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import layer_target
    >>> lf = LayerFactors("fc", np.eye(2), 2 * np.eye(1), 3 * np.eye(1), (0, 2))
    >>> float(layer_target(lf, np.eye(2), 2 * np.eye(1), "sandwich", 10)[0, 0])  # 3/(2·2)/10
    0.075
    """
    Gi = np.linalg.inv(G_damped)
    if target == "posterior":
        return _sym(Gi) / n_data
    if target == "sandwich":
        t = float(np.trace(np.linalg.solve(A_damped, layer.input_factor))) / layer.d_in
        return _sym(t * Gi @ layer.noise_factor @ Gi) / n_data
    raise SgtuneError(f"target must be one of {', '.join(KRONECKER_TARGETS)} for the kronecker family, got {target!r}")


@cites("wang2026", "Eq. (11) with constant noise; Prop. B.1 (momentum): the d_out-dimensional chain of one layer")
def layer_stationary(curvature: np.ndarray, noise: np.ndarray, step: np.ndarray, dynamics: Dynamics,
                     n_data: int) -> tuple[np.ndarray, float, float]:
    """The small chain of one layer: (S, ρ, τ_worst) for curvature G̃, noise E and step M.

    Parameters
    ----------
    curvature, noise, step : (d_out, d_out) ndarray
        G̃, E and M.
    dynamics : Dynamics
        B, β, κ and the batching (its step is ignored).
    n_data : int
        N (for the finite-population factor).

    Returns
    -------
    S : ndarray
        The stationary second moment of the small chain, (d_out, d_out), or (2d_out, 2d_out) of (d, ν)
        with momentum; the layer's is Σ_dd = S_dd ⊗ Ã⁻¹ (module docstring).
    spectral_radius : float
        The spectral radius ρ(F)² of the second-moment map S ↦ FSFᵀ (< 1 ⇔ stable).
    tau_worst : float
        The largest integrated autocorrelation time over linear functionals of the layer (the same as
        the small chain's: the layer is d_in independent copies of it in whitened coordinates).

    Raises
    ------
    UnstableStepSizeError
        The small chain is not stable.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.theory.kronecker import layer_stationary
    >>> S, rho, tau = layer_stationary(np.eye(1), np.eye(1), 0.5 * np.eye(1), Dynamics(None, batch_size=1), 10)
    >>> round(float(S[0, 0]), 12), rho   # S = ¼S + ¼ → 1/3
    (0.333333333333, 0.25)
    """
    f = finite_population_factor(n_data, dynamics.batch_size, dynamics.without_replacement)
    if dynamics.momentum > 0.0:
        return _momentum_stationary(curvature, noise, step, f / dynamics.batch_size, float(dynamics.momentum),
                                    float(dynamics.inv_temperature))
    chain = LinearChain.with_constant_noise(dynamics.replace(step=step), curvature, noise,
                                            noise_scale=f / dynamics.batch_size)
    rho = float(np.max(np.abs(np.linalg.eigvals(chain.transition)))) ** 2
    if not rho < 1.0 - 1e-9:
        raise UnstableStepSizeError(f"the layer's chain is not stable (spectral radius {rho:.6g} ≥ 1); "
                                    "use a smaller step factor", spectral_radius=rho)
    if dynamics.momentum == 0.0:
        S = SteinSolver(chain).solve(chain.constant_noise)
    else:
        S = _sym(chain.solve_constant_noise())
    return S, rho, chain.autocorrelation_times(S)[1]


@cites("wang2026", "Prop. B.1: the heavy-ball chain's stationary second moment, decoupled into 2×2 modes")
def _momentum_stationary(G: np.ndarray, E: np.ndarray, M: np.ndarray, s: float, kappa: float,
                         beta: float, with_tau: bool = True) -> tuple[np.ndarray, float, float]:
    """(S, ρ², τ_worst) of the small heavy-ball chain m' = κm + Gd + η, d' = d − Mm' + √(2M/β)ξ, exactly.

    With K = M^{1/2} G M^{1/2} = U diag(μ) Uᵀ, the coordinates d = M^{1/2}U a, m = M^{−1/2}U b decouple the
    transition into 2×2 blocks F_i = [[1 − μ_i, −κ], [μ_i, κ]]; the noise becomes Q_aa = sẼ + (2/β)I,
    Q_ab = −sẼ, Q_bb = sẼ with Ẽ = UᵀM^{1/2}EM^{1/2}U. Each pair (i, j) of the Lyapunov equation
    P = FPFᵀ + Q is a 4×4 system (I − F_i ⊗ F_j) vec(P_ij) = vec(Q_ij), solved in one batch: O(d³ + 16d²)
    instead of the Schur decomposition of the 2d × 2d transition. τ_worst as
    :meth:`sgtune.theory.linear_chain.LinearChain.autocorrelation_times` (W = (I − F)⁻¹S), in these coordinates.
    """
    d = G.shape[0]
    wm, Vm = np.linalg.eigh(_sym(M))
    Mh, Mih = (Vm * np.sqrt(wm)) @ Vm.T, (Vm / np.sqrt(wm)) @ Vm.T
    mu, U = np.linalg.eigh(_sym(Mh @ G @ Mh))
    t = 1.0 - mu + kappa
    disc = t * t - 4.0 * kappa
    modulus = np.where(disc >= 0, 0.5 * (np.abs(t) + np.sqrt(np.clip(disc, 0, None))), math.sqrt(kappa))
    rho = float(np.max(modulus)) ** 2
    if not rho < 1.0 - 1e-9:
        raise UnstableStepSizeError(f"the layer's chain is not stable (spectral radius {rho:.6g} ≥ 1); "
                                    "use a smaller step factor", spectral_radius=rho)
    Et = _sym(U.T @ Mh @ E @ Mh @ U)
    inj = 0.0 if math.isinf(beta) else 2.0 / beta
    Fi = np.zeros((d, 2, 2))
    Fi[:, 0, 0], Fi[:, 0, 1], Fi[:, 1, 0], Fi[:, 1, 1] = 1.0 - mu, -kappa, mu, kappa
    Q = np.empty((d, d, 2, 2))
    Q[..., 0, 0], Q[..., 0, 1], Q[..., 1, 0], Q[..., 1, 1] = s * Et + inj * np.eye(d), -s * Et, -s * Et, s * Et
    kron = np.einsum("iab,jcd->ijacbd", Fi, Fi).reshape(d, d, 4, 4)
    P = np.linalg.solve(np.eye(4) - kron, Q.reshape(d, d, 4, 1)).reshape(d, d, 2, 2)
    Td, Tm = Mh @ U, Mih @ U
    S = np.empty((2 * d, 2 * d))
    S[:d, :d] = _sym(Td @ P[..., 0, 0] @ Td.T)
    S[:d, d:] = Td @ P[..., 0, 1] @ Tm.T
    S[d:, :d] = S[:d, d:].T
    S[d:, d:] = _sym(Tm @ P[..., 1, 1] @ Tm.T)
    if not with_tau:  # S linear in E (the Σ-dependent noise's response, E need not be PSD)
        return S, rho, math.nan
    inv = np.linalg.inv(np.eye(2) - Fi)  # (I − F_i)⁻¹, per mode (the row index of W)
    W_aa = inv[:, 0, 0][:, None] * P[..., 0, 0] + inv[:, 0, 1][:, None] * P[..., 1, 0]
    import scipy.linalg as sla

    top = sla.eigh(_sym(W_aa), _sym(P[..., 0, 0]), eigvals_only=True, subset_by_index=[d - 1, d - 1])[-1]
    return S, rho, float(2.0 * top - 1.0)


def _layer_step(G: np.ndarray, E: np.ndarray, S: np.ndarray, dynamics: Dynamics, n_data: int) -> np.ndarray:
    """M: the SPD step of the small chain whose stationary covariance is S (Eq. (11) / the momentum equation)."""
    s = finite_population_factor(n_data, dynamics.batch_size, dynamics.without_replacement) / dynamics.batch_size
    beta, kappa = dynamics.inv_temperature, dynamics.momentum
    if kappa == 0.0:
        return solve_step_matrix(G, S, s * E + G @ S @ G, inv_temperature=beta)
    return solve_momentum_step_matrix(G, S, s * E, momentum=kappa, inv_temperature=beta)


@cites("wang2026", "Eq. (12): the Σ-dependent part (f/B)(mean_n J_nΣJ_n − JΣJ) of C̄(Σ), in Kronecker-factored form")
def curvature_noise_factor(layer: LayerFactors, A_damped: np.ndarray, S: np.ndarray) -> np.ndarray:
    r"""The output factor c(S) of the Σ-dependent noise: mean_n J_nΣJ_n − JΣJ ≈ c(S) ⊗ Ã for Σ_l = S ⊗ Ã⁻¹.

    The exact minibatch noise of the proxy chain is C̄(Σ) = (f/B)[𝓘 − ḡḡᵀ + mean_n J_nΣJ_n − JΣJ]
    (Wang, Ding & Huggins 2026, Eq. (12)); the constant part is :func:`noise_factor_for`. Per sample the
    layer's Gauss–Newton block is exactly J_n = G_n ⊗ ã_nã_nᵀ (row-major; G_n = Σ_k s_nk v_nk v_nkᵀ,
    ``layer.curvature_roots``; so is the exact per-sample Hessian's, with signed roots), so with Σ_l = S ⊗ Ã⁻¹

        J_nΣJ_n = G_nSG_n ⊗ q_n ã_nã_nᵀ,  q_n = ã_nᵀÃ⁻¹ã_n,      JΣJ ≈ GSG ⊗ AÃ⁻¹A  (KFAC J ≈ G ⊗ A, G = mean_n G_n).

    Each is replaced, as in :func:`noise_factor_for`, by its whitened partial trace over the input divided
    by d_in (the Frobenius-nearest X ⊗ I in the coordinates where the factored chain decouples):
    ptr(G_nSG_n ⊗ q_n Ã^{−½}ããᵀÃ^{−½}) = q_n² G_nSG_n and ptr(GSG ⊗ Ã^{−½}AÃ⁻¹AÃ^{−½}) = t₂ GSG with
    t₂ = tr((Ã⁻¹A)²). KFAC's independence assumption between the input and the output side,
    mean_n q_n² G_nSG_n ≈ m₂ mean_n G_nSG_n with m₂ = mean_n q_n² (= wᵀRw from ``layer.input_fourth``,
    w_j = 1/(α_j + c) for Ã = A + cI in A's eigenbasis), gives

        c(S) = (m₂/d_in) mean_n G_nSG_n − (t₂/d_in) GSG
             = (t₂/d_in)[mean_n G_nSG_n − GSG] + ((m₂ − t₂)/d_in) mean_n G_nSG_n,

    and m₂ ≥ (mean_n q_n)² = (tr Ã⁻¹A)² ≥ t₂, so S ↦ c(S) is completely positive: the factored noise is
    positive semi-definite for every S ⪰ 0, as the exact C̄(Σ) is, and the stability test of
    :func:`layer_exact_stationary` (a positive linear map) is exact. One pass over the N per-sample
    roots, O(N·K·d_out²); linear in S.

    Parameters
    ----------
    layer : LayerFactors
        The layer, with ``curvature_roots`` and ``input_fourth``.
    A_damped : (d_in, d_in) ndarray
        Ã = A + cI (:func:`damped_factors`).
    S : (d_out, d_out) ndarray
        The output factor of Σ_l (symmetric; need not be definite).

    Returns
    -------
    (d_out, d_out) ndarray
        The symmetric c(S).

    Examples
    --------
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import curvature_noise_factor
    >>> V = np.array([[[1.0]], [[3.0]]])            # G_n = 1, 9; G = 5; ã_n = 1, A = Ã = 1: q_n = 1, m₂ = t₂ = 1
    >>> lf = LayerFactors("fc", np.eye(1), 5 * np.eye(1), np.eye(1), (0, 1), curvature_roots=V, input_fourth=np.eye(1))
    >>> curvature_noise_factor(lf, np.eye(1), np.eye(1))   # mean(1, 81) − 25
    array([[16.]])
    """
    V = layer.curvature_roots
    if V is None or layer.input_fourth is None:
        raise SgtuneError(f"layer {layer.name!r}: the Σ-dependent noise (method 'dq-exact') needs the per-sample "
                          "curvature roots; compute the factors with samples=True or use method 'dq-const'")
    S = _sym(np.asarray(S, dtype=np.float64))
    out, G = np.zeros_like(S), np.zeros_like(S)
    sg = layer.curvature_signs if layer.curvature_signs is not None else np.ones(V.shape[:2])
    d = S.shape[0]
    for i in range(0, V.shape[0], 4096):  # G_nSG_n = V_nᵀ(s s ∘ V_nSV_nᵀ)V_n, as two (n·K, d) × (d, d) products
        Vc, sc = V[i:i + 4096], sg[i:i + 4096]
        W = np.matmul(Vc @ S, Vc.transpose(0, 2, 1)) * sc[:, :, None] * sc[:, None, :]
        out += Vc.reshape(-1, d).T @ np.matmul(W, Vc).reshape(-1, d)
        G += Vc.reshape(-1, d).T @ (sc[:, :, None] * Vc).reshape(-1, d)
    G /= V.shape[0]  # mean_n G_n: the Gauss–Newton G itself, or the exact mean of the per-sample blocks
    AiA = np.linalg.solve(A_damped, layer.input_factor)
    t2 = float(np.sum(AiA * AiA.T))
    return _sym((_input_moment(layer, A_damped) * out / V.shape[0] - t2 * G @ S @ G) / layer.d_in)


def _input_moment(layer: LayerFactors, A_damped: np.ndarray) -> float:
    """m₂ = mean_n (ã_nᵀÃ⁻¹ã_n)² = wᵀRw, w = diag(Q_AᵀÃ⁻¹Q_A) (Ã = A + cI shares A's eigenbasis Q_A)."""
    Qa = np.linalg.eigh(layer.input_factor)[1]
    w = np.einsum("ji,ji->i", Qa, np.linalg.solve(A_damped, Qa))
    return float(w @ layer.input_fourth @ w)


def _noise_response(G: np.ndarray, M: np.ndarray, dynamics: Dynamics, n_data: int) -> Callable[[np.ndarray], np.ndarray]:
    """X ↦ the dd block of the small chain's stationary second moment driven by the noise s·X alone (linear).

    Without momentum S = FSFᵀ + M(sX)M, F = I − MG, solved in the modes of K = M^{½}GM^{½} = U diag(μ)Uᵀ:
    with T = M^{½}U, S = T P Tᵀ and P_ij = s(UᵀM^{½}XM^{½}U)_ij / (1 − (1 − μ_i)(1 − μ_j)); with momentum the
    same 2×2-mode solve as :func:`layer_stationary` (Wang, Ding & Huggins 2026, Prop. B.1).
    """
    s = finite_population_factor(n_data, dynamics.batch_size, dynamics.without_replacement) / dynamics.batch_size
    d, kappa = G.shape[0], float(dynamics.momentum)
    if kappa > 0.0:
        return lambda X: _momentum_stationary(G, X, M, s, kappa, math.inf, with_tau=False)[0][:d, :d]
    wm, Vm = np.linalg.eigh(_sym(M))
    Mh = (Vm * np.sqrt(wm)) @ Vm.T
    mu, U = np.linalg.eigh(_sym(Mh @ G @ Mh))
    f = 1.0 - mu
    T = Mh @ U
    den = 1.0 - np.outer(f, f)
    return lambda X: _sym(T @ ((s * T.T @ X @ T) / den) @ T.T)


def _cw_upper(X: np.ndarray, base: np.ndarray) -> float:
    """1 − λ_min(X^{−½} base X^{−½}): ρ(P) ≤ this for a positive map P with X = base + P(X), X ≻ 0 (Collatz–Wielandt)."""
    import scipy.linalg as sla

    return float(1.0 - sla.eigh(_sym(base), _sym(X), eigvals_only=True)[0])


def _fixed_point(P: Callable[[np.ndarray], np.ndarray], base: np.ndarray) -> np.ndarray:
    """X solving X = base + P(X), P linear on symmetric d×d (dense solve for d ≤ 16, else GMRES in vec form)."""
    d = base.shape[0]
    iu = np.triu_indices(d)
    w = np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))  # an orthonormal basis of the symmetric matrices

    def unvec(x: np.ndarray) -> np.ndarray:
        X = np.zeros((d, d))
        X[iu] = x / w
        return X + np.triu(X, 1).T

    def op(x: np.ndarray) -> np.ndarray:
        return x - P(unvec(x))[iu] * w

    b = base[iu] * w
    if d <= 16:
        K = np.column_stack([op(e) for e in np.eye(len(b))])
        return unvec(np.linalg.solve(K, b))
    from scipy.sparse.linalg import LinearOperator, gmres

    x, _ = gmres(LinearOperator((len(b), len(b)), matvec=op), b, x0=b, rtol=1e-13, atol=0.0, restart=60,
                 maxiter=20)
    return unvec(x)


@cites("wang2026", "Eqs. (11)–(12) with the Σ-dependent noise C̄(Σ), per layer in Kronecker-factored form")
def layer_exact_stationary(layer: LayerFactors, A_damped: np.ndarray, curvature: np.ndarray, noise: np.ndarray,
                           step: np.ndarray, dynamics: Dynamics, n_data: int) -> tuple[np.ndarray, float, float, float]:
    r"""The small chain of one layer with the Σ-dependent minibatch noise: S = L(S) + Q₀ + s·M c(S) M.

    The factored chain of the module docstring, its noise now s(E + c(S_dd)) ⊗ Ã with c of
    :func:`curvature_noise_factor` (Wang, Ding & Huggins 2026, Eq. (12) in factored form): the layer is
    still d_in copies of the d_out-dimensional chain (Σ_l = S_dd ⊗ Ã⁻¹), whose second moment solves the
    linear fixed point S_dd = S₀ + P(S_dd) — S₀ the constant-noise answer (:func:`layer_stationary`),
    P(X) the chain's response to the noise s·c(X) alone. P is a positive map (c is completely positive,
    the Lyapunov inverse of a stable chain is positive), so a stationary second moment exists iff ρ(P) < 1,
    iff the solution is positive definite (Collatz–Wielandt); then ρ(P) ≤ 1 − λ_min(S_dd^{−½}S₀S_dd^{−½}) < 1.
    ρ(P) ≥ 1 is the second-moment instability: the mean dynamics are stable but the minibatch Hessian's
    fluctuation makes the chain's second moments grow without bound.

    Parameters
    ----------
    layer : LayerFactors
        The layer, with its per-sample curvature roots.
    A_damped, curvature, noise, step : ndarray
        Ã, G̃, E (the constant part, :func:`noise_factor_for`) and M.
    dynamics : Dynamics
        B, β, κ and the batching.
    n_data : int
        N.

    Returns
    -------
    S : ndarray
        The stationary second moment of the small chain (augmented (d, ν) with momentum).
    spectral_radius : float
        The spectral radius ρ(F)² of the mean dynamics' second-moment map.
    tau_worst : float
        The largest integrated autocorrelation time over linear functionals.
    noise_gain : float
        The certified upper bound on ρ(P) above (< 1).

    Raises
    ------
    UnstableStepSizeError
        The mean dynamics are unstable, or ρ(P) ≥ 1 (no stationary second moment; the message says so).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import layer_exact_stationary
    >>> lf = LayerFactors("fc", np.eye(1), np.eye(1), np.eye(1), (0, 1), curvature_roots=np.ones((2, 1, 1)),
    ...                   input_fourth=np.eye(1))      # G_n = 1 for all n: no Hessian fluctuation, c = 0
    >>> S, rho, tau, gain = layer_exact_stationary(lf, np.eye(1), np.eye(1), np.eye(1), 0.5 * np.eye(1),
    ...                                            Dynamics(None, batch_size=1), 10)
    >>> round(float(S[0, 0]), 12), round(gain, 12)
    (0.333333333333, 0.0)
    """
    d = layer.d_out
    S0 = layer_stationary(curvature, noise, step, dynamics, n_data)[0][:d, :d]
    resp = _noise_response(curvature, step, dynamics, n_data)
    X = _sym(_fixed_point(lambda Y: resp(curvature_noise_factor(layer, A_damped, Y)), _sym(S0)))
    w = np.linalg.eigvalsh(X)
    if not w[0] > 1e-12 * max(abs(w[-1]), 1e-300):
        Y, lo = _sym(S0) / np.linalg.norm(S0), 0.0
        for _ in range(200):  # power iteration of the positive map: ‖P^k S₀‖ ratios tend to ρ(P) from below
            Z = resp(curvature_noise_factor(layer, A_damped, Y))
            lo, Y = float(np.linalg.norm(Z)), Z / max(np.linalg.norm(Z), 1e-300)
        raise UnstableStepSizeError(
            f"layer {layer.name!r}: the minibatch-Hessian noise makes the chain's second moments grow (the mean "
            f"dynamics are stable, but the noise gain ρ(P) ≈ {lo:.4g} ≥ 1): no stationary covariance; use a "
            "smaller step or a larger batch", spectral_radius=max(lo, 1.0))
    gain = max(_cw_upper(X, S0), 0.0)
    S, rho, tau = layer_stationary(curvature, noise + curvature_noise_factor(layer, A_damped, X), step, dynamics,
                                   n_data)
    return S, rho, tau, gain


@cites("ritter2018", "§3: the Kronecker-factored Laplace posterior with the prior added in the eigenbasis")
def eigenbasis_posterior_variance(layer: LayerFactors, directions: np.ndarray, prior_precision: float,
                                  n_data: int) -> np.ndarray:
    """The variances vᵀ(N·G ⊗ A + δI)⁻¹v along directions V (k, d_out, d_in): laplace-torch's ``KronLaplace``.

    The prior δ is added to the eigenvalues of the Kronecker product in the joint eigenbasis of G and A
    (as laplace-torch does), so this is exact for the KFAC curvature with the exact prior; matrix-free.

    Parameters
    ----------
    layer : LayerFactors
        The layer.
    directions : (k, d_out, d_in) or (d_out, d_in) ndarray
        Directions in the layer's [W | b] matrix form.
    prior_precision : float
        The prior precision δ.
    n_data : int
        N.

    Returns
    -------
    (k,) ndarray
        The posterior variances along the directions.

    Examples
    --------
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import eigenbasis_posterior_variance
    >>> lf = LayerFactors("fc", np.eye(2), np.eye(1), np.eye(1), (0, 2))
    >>> eigenbasis_posterior_variance(lf, np.ones((1, 2)), 1.0, 9)   # 2/(9 + 1)
    array([0.2])
    """
    V = np.asarray(directions, dtype=np.float64)
    V = V[None] if V.ndim == 2 else V
    la, Qa = np.linalg.eigh(layer.input_factor)
    lg, Qg = np.linalg.eigh(layer.curvature_factor)
    den = n_data * np.outer(np.clip(lg, 0, None), np.clip(la, 0, None)) + prior_precision
    Vt = np.einsum("ji,kjl,lm->kim", Qg, V, Qa)
    return np.einsum("kim,im->k", Vt * Vt, 1.0 / den)


def _prior_error(layer: LayerFactors, A_d: np.ndarray, G_d: np.ndarray, prior_precision: float,
                 n_data: int) -> float:
    """‖Σ_damped − Σ_eig‖_F/‖Σ_eig‖_F of the posteriors (both diagonal in the joint eigenbasis of G and A)."""
    if prior_precision == 0.0:
        return 0.0
    la, lg = np.linalg.eigvalsh(layer.input_factor), np.linalg.eigvalsh(layer.curvature_factor)
    # Ã = A + aI and G̃ = G + gI (damped_factors): the same eigenvectors, eigenvalues shifted by a and g
    lad = la + float(np.mean(np.diag(A_d) - np.diag(layer.input_factor)))
    lgd = lg + float(np.mean(np.diag(G_d) - np.diag(layer.curvature_factor)))
    eig = 1.0 / (n_data * np.outer(np.clip(lg, 0, None), np.clip(la, 0, None)) + prior_precision)
    damp = 1.0 / (n_data * np.outer(lgd, lad))
    return float(np.linalg.norm(damp - eig) / np.linalg.norm(eig))


@dataclass(frozen=True, repr=False)
class KroneckerLayer:
    """The tuned step of one layer, Λ_l = M ⊗ Ã⁻¹ (row-major), and its factored prediction.

    Attributes
    ----------
    name : str
        The layer's name.
    step_factor : (d_out, d_out) ndarray
        M (symmetric positive definite).
    input_inverse : (d_in, d_in) ndarray
        Ã⁻¹, the inverse of the (damped) input factor.
    output_cov : (d_out, d_out) ndarray
        S, the output factor of the predicted stationary covariance Σ_l = S ⊗ Ã⁻¹.
    target_output_cov : (d_out, d_out) ndarray
        S*, the output factor of the target.
    weight_index, bias_index : tuple of int or None
        Where W (row-major) and b lie in θ.
    spectral_radius : float
        ρ of the layer's second-moment map.
    tau_worst : float
        The layer's largest integrated autocorrelation time over linear functionals (iterations).
    covariance_error : float
        ‖S − S*‖_F/‖S*‖_F = ‖Σ_l − Σ*_l‖_F/‖Σ*_l‖_F in the factored chain.
    prior_error : float
        ‖Σ_damped − Σ_eig‖_F/‖Σ_eig‖_F: the damped posterior against laplace-torch's eigenbasis one.
    eigenbasis : tuple of ndarray or None
        None for the damped form; for ``prior="eigenbasis"`` (:func:`tune_layer_eigenbasis`) the arrays
        (Q_G, Q_A, λ, σ, σ*): Λ_l = (Q_G ⊗ Q_A) diag(λ)(Q_G ⊗ Q_A)ᵀ, the predicted and target Σ_l likewise
        with σ and σ* (each (d_out, d_in)); the four matrix fields are then zeros.
    method : str
        The noise model the step was tuned with: ``"dq-const"`` (the constant noise at θ̂) or ``"dq-exact"``
        (with the Σ-dependent part, :func:`curvature_noise_factor`).
    noise_gain : float
        For a layer with per-sample curvature roots: the certified upper bound on the gain ρ(P) of the
        Σ-dependent noise (:func:`layer_exact_stationary`; < 1: the chain has a stationary covariance); ``inf``
        when the step has none (ρ(P) ≥ 1, the chain's second moments grow); NaN when not computed. For a
        ``dq-const`` step it comes from at most 30 power iterations (Collatz–Wielandt); a value ≥ 1 that is
        not ``inf`` means the bound could not show ρ(P) < 1.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import tune_layer
    >>> lay = tune_layer(LayerFactors("fc", np.eye(2), np.eye(1), np.eye(1), (0, 2)), Dynamics(None, batch_size=4),
    ...                  target="posterior", n_data=40)
    >>> lay.variances().shape
    (1, 2)
    """

    name: str
    step_factor: np.ndarray
    input_inverse: np.ndarray
    output_cov: np.ndarray
    target_output_cov: np.ndarray
    weight_index: tuple[int, int]
    bias_index: tuple[int, int] | None
    spectral_radius: float
    tau_worst: float
    covariance_error: float
    prior_error: float
    eigenbasis: tuple[np.ndarray, ...] | None = None
    method: str = "dq-const"
    noise_gain: float = math.nan

    @property
    def form(self) -> str:
        """``"damped"`` (Λ_l = M ⊗ Ã⁻¹) or ``"eigenbasis"`` (Λ_l diagonal in the eigenbasis Q_G ⊗ Q_A)."""
        return "damped" if self.eigenbasis is None else "eigenbasis"

    @property
    def d_in(self) -> int:
        """Input width, counting the bias column."""
        return (self.input_inverse if self.eigenbasis is None else self.eigenbasis[1]).shape[0]

    @property
    def d_out(self) -> int:
        """Output width."""
        return (self.step_factor if self.eigenbasis is None else self.eigenbasis[0]).shape[0]

    def _in_basis(self, X: np.ndarray, diag: np.ndarray) -> np.ndarray:
        Qg, Qa = self.eigenbasis[0], self.eigenbasis[1]  # type: ignore[index]
        return Qg @ ((Qg.T @ X @ Qa) * diag) @ Qa.T

    def step_map(self, X: np.ndarray) -> np.ndarray:
        """Λ_l applied to matrices X (..., d_out, d_in) in the [W | b] layout (two small products a side)."""
        if self.eigenbasis is None:
            return self.step_factor @ X @ self.input_inverse
        return self._in_basis(X, self.eigenbasis[2])

    def cov_map(self, X: np.ndarray) -> np.ndarray:
        """The predicted Σ_l applied to matrices X (..., d_out, d_in)."""
        if self.eigenbasis is None:
            return self.output_cov @ X @ self.input_inverse
        return self._in_basis(X, self.eigenbasis[3])

    def sqrt_map(self, X: np.ndarray, transpose: bool = False) -> np.ndarray:
        """L X (or Lᵀ X) for a square root Λ_l = LLᵀ: chol(M) ⊗ chol(Ã⁻¹), or (Q_G ⊗ Q_A) diag(√λ)."""
        if self.eigenbasis is None:
            LM, LA = np.linalg.cholesky(self.step_factor), np.linalg.cholesky(self.input_inverse)
            return LM.T @ X @ LA if transpose else LM @ X @ LA.T
        Qg, Qa, lam = self.eigenbasis[0], self.eigenbasis[1], np.sqrt(self.eigenbasis[2])
        return lam * (Qg.T @ X @ Qa) if transpose else Qg @ (lam * X) @ Qa.T

    def extreme_directions(self) -> tuple[np.ndarray, np.ndarray]:
        """The unit directions (d_out, d_in) of least and most predicted variance (Kronecker products)."""
        if self.eigenbasis is None:
            ws, Vs = np.linalg.eigh(self.output_cov)
            wa, Va = np.linalg.eigh(self.input_inverse)
            return np.outer(Vs[:, 0], Va[:, 0]), np.outer(Vs[:, -1], Va[:, -1])
        Qg, Qa, sig = self.eigenbasis[0], self.eigenbasis[1], self.eigenbasis[3]
        lo = np.unravel_index(np.argmin(sig), sig.shape)
        hi = np.unravel_index(np.argmax(sig), sig.shape)
        return np.outer(Qg[:, lo[0]], Qa[:, lo[1]]), np.outer(Qg[:, hi[0]], Qa[:, hi[1]])

    def theta_indices(self) -> np.ndarray:
        """The positions in θ of vec([W | b]) (row-major)."""
        return theta_indices(self.weight_index, self.bias_index, self.d_out, self.d_in)

    def variances(self) -> np.ndarray:
        """diag(Σ_l) as a (d_out, d_in) matrix in the [W | b] layout."""
        if self.eigenbasis is None:
            return np.outer(np.diag(self.output_cov), np.diag(self.input_inverse))
        Qg, Qa, sig = self.eigenbasis[0], self.eigenbasis[1], self.eigenbasis[3]
        return (Qg * Qg) @ sig @ (Qa * Qa).T

    def summary_dict(self) -> dict[str, Any]:
        """The layer's summary as plain values (the JSON's per-layer entry)."""
        sd = np.sqrt(np.clip(self.variances(), 0.0, None))
        return {"name": self.name, "d_out": self.d_out, "d_in": self.d_in,
                "n_params": self.d_out * self.d_in, "bias": self.bias_index is not None,
                "spectral_radius": float(self.spectral_radius), "tau_worst": float(self.tau_worst),
                "covariance_error": float(self.covariance_error), "prior_error": float(self.prior_error),
                "prior": self.form, "method": self.method,
                "noise_gain": None if math.isnan(self.noise_gain) else float(self.noise_gain),
                "sd_min": float(sd.min()), "sd_median": float(np.median(sd)), "sd_max": float(sd.max())}


#: above this D the dense checks (``dense_step_matrix``, ``dense_cov``) refuse: the family never needs them
DENSE_CHECK_MAX_DIM = 5000


@dataclass(frozen=True, repr=False)
class KroneckerTuning:
    """Result of :func:`tune_factors` / :func:`tune_kronecker`: Λ = blockdiag_l(M_l ⊗ Ã_l⁻¹).

    Holds only per-layer factors (no D×D object): :meth:`apply` multiplies a gradient by Λ with two
    small matrix products per layer, :meth:`noise` draws from N(0, Λ) the same way, :meth:`save` /
    :meth:`load` keep it in an ``.npz`` file with the layer names.

    Attributes
    ----------
    layers : tuple of KroneckerLayer
        One per layer, in θ order.
    dim : int
        D.
    n_data : int
        N.
    dynamics : Dynamics
        B, β, κ and the batching the step was tuned for (``step`` None: Λ lives in ``layers``).
    target : str
        ``"posterior"`` or ``"sandwich"``.
    prior_precision : float
        δ.
    method : str
        The noise model it was tuned with (``"dq-exact"`` or ``"dq-const"``, :func:`tune_layer`).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import KroneckerFactors, LayerFactors
    >>> from sgtune.theory.kronecker import tune_factors
    >>> lf = LayerFactors("fc", np.array([[2.0, 0.5], [0.5, 1.0]]), np.eye(1), np.eye(1), (0, 1), (1, 2))
    >>> res = tune_factors(KroneckerFactors((lf,), n_data=100, dim=2), Dynamics(None, batch_size=10))
    >>> res.apply(np.array([1.0, 0.0])).shape, res.layers[0].covariance_error < 1e-12
    ((2,), True)
    """

    layers: tuple[KroneckerLayer, ...]
    dim: int
    n_data: int
    dynamics: Dynamics
    target: str
    prior_precision: float = 0.0
    method: str = "dq-const"

    @property
    def names(self) -> tuple[str, ...]:
        """The layer names."""
        return tuple(lay.name for lay in self.layers)

    @property
    def covariance_error(self) -> float:
        """The largest per-layer ‖Σ_l − Σ*_l‖_F/‖Σ*_l‖_F of the factored chain."""
        return max(lay.covariance_error for lay in self.layers)

    @property
    def spectral_radius(self) -> float:
        """The largest per-layer spectral radius (the chain's, since layers are independent)."""
        return max(lay.spectral_radius for lay in self.layers)

    @property
    def noise_gain(self) -> float:
        """The largest per-layer noise gain (``KroneckerLayer.noise_gain``; NaN when none was computed)."""
        gains = [lay.noise_gain for lay in self.layers if not math.isnan(lay.noise_gain)]
        return max(gains) if gains else math.nan

    @property
    def warnings(self) -> tuple[str, ...]:
        """What sgtune cannot vouch for in this result (one line each): layers without a stationary covariance."""
        bad = [lay.name for lay in self.layers if lay.noise_gain >= 1.0]
        if not bad:
            return ()
        return (f"with this step the minibatch-Hessian noise makes the chain's second moments grow in layer(s) "
                f"{', '.join(bad)} (noise gain ≥ 1, or not shown below 1): the real chain may have no stationary "
                "covariance and the prediction does not hold; tune with method 'dq-exact'",)

    def _map(self, vectors: Any, fn: Callable[[KroneckerLayer, np.ndarray], np.ndarray]) -> np.ndarray:
        """fn(layer, [W | b] matrices) for every layer, on vectors (..., D) in θ order."""
        x = np.asarray(vectors, dtype=np.float64)
        if x.shape[-1] != self.dim:
            raise ShapeError(f"expected vectors of length D = {self.dim} (θ order), got shape {x.shape}")
        out = np.empty_like(x)
        lead = x.shape[:-1]
        for lay in self.layers:
            w0, w1 = lay.weight_index
            d_w = lay.d_in - (lay.bias_index is not None)
            blocks = [x[..., w0:w1].reshape(*lead, lay.d_out, d_w)]
            if lay.bias_index is not None:
                blocks.append(x[..., lay.bias_index[0]:lay.bias_index[1], None])
            Y = fn(lay, np.concatenate(blocks, axis=-1))
            out[..., w0:w1] = Y[..., :d_w].reshape(*lead, w1 - w0)
            if lay.bias_index is not None:
                out[..., lay.bias_index[0]:lay.bias_index[1]] = Y[..., d_w]
        return out

    def apply(self, grad: Any) -> np.ndarray:
        """Λ g: per layer M Γ Ã⁻¹ with Γ = [∇W | ∇b] (two small products; g of shape (..., D) in θ order).

        Parameters
        ----------
        grad : (..., D) array_like
            Gradients in θ order.

        Returns
        -------
        (..., D) ndarray
            Λ g.
        """
        return self._map(grad, lambda lay, X: lay.step_map(X))

    def noise(self, z: Any) -> np.ndarray:
        """Λ^{1/2} z with the Kronecker square root chol(M) ⊗ chol(Ã⁻¹): N(0, I) draws z give N(0, Λ).

        Parameters
        ----------
        z : (..., D) array_like
            Standard normal draws in θ order.

        Returns
        -------
        (..., D) ndarray
            Draws with covariance Λ.
        """
        return self._map(z, lambda lay, X: lay.sqrt_map(X))

    def sqrt_apply(self, x: Any, transpose: bool = False) -> np.ndarray:
        """L x (or Lᵀ x) with Λ = LLᵀ, L = blockdiag_l of each layer's Kronecker square root (matrix-free).

        Parameters
        ----------
        x : (..., D) array_like
            Vectors in θ order.
        transpose : bool, optional
            Apply Lᵀ instead of L.

        Returns
        -------
        (..., D) ndarray
            L x or Lᵀ x.
        """
        return self._map(x, lambda lay, X: lay.sqrt_map(X, transpose))

    def variances(self) -> np.ndarray:
        """The predicted stationary variance of every θ_i, (D,) in θ order (diag of S_l ⊗ Ã_l⁻¹)."""
        out = np.empty(self.dim)
        for lay in self.layers:
            out[lay.theta_indices()] = lay.variances().ravel()
        return out

    def probe_variance(self, directions: Any) -> np.ndarray:
        """vᵀΣv for directions V (k, D) in θ order, from the factors (Σ_l = S_l ⊗ Ã_l⁻¹; no D×D object).

        Parameters
        ----------
        directions : (k, D) or (D,) array_like
            Directions in θ order.

        Returns
        -------
        (k,) ndarray
            The predicted stationary variances along the directions.
        """
        V = np.atleast_2d(np.asarray(directions, dtype=np.float64))
        total = np.zeros(V.shape[0])
        for lay in self.layers:
            X = V[:, lay.theta_indices()].reshape(-1, lay.d_out, lay.d_in)
            total += np.einsum("kij,kij->k", lay.cov_map(X), X)
        return total

    def _dense(self, what: str) -> np.ndarray:
        if self.dim > DENSE_CHECK_MAX_DIM:
            raise SgtuneError(f"the dense {what} of D = {self.dim} is not formed above D = {DENSE_CHECK_MAX_DIM}; "
                              "use apply / probe_variance")
        out = np.zeros((self.dim, self.dim))
        for lay in self.layers:
            idx = lay.theta_indices()
            eye = np.eye(lay.d_out * lay.d_in).reshape(-1, lay.d_out, lay.d_in)
            fn = lay.step_map if what == "step matrix" else lay.cov_map
            out[np.ix_(idx, idx)] = fn(eye).reshape(len(idx), len(idx))
        return out

    def dense_step_matrix(self) -> np.ndarray:
        """Λ as a dense (D, D) matrix in θ order, for small networks (checks against the dense theory)."""
        return self._dense("step matrix")

    def dense_cov(self) -> np.ndarray:
        """The factored prediction Σ as a dense (D, D) matrix in θ order, for small networks."""
        return self._dense("covariance")

    def to_dict(self) -> dict[str, Any]:
        """The settings and per-layer summaries as plain values (no matrices)."""
        dyn = self.dynamics
        return {"family": "kronecker", "target": self.target, "dim": self.dim, "n_data": self.n_data,
                "batch_size": dyn.batch_size, "inverse_temperature": dyn.inv_temperature,
                "momentum": dyn.momentum, "batching": dyn.batching, "prior_precision": self.prior_precision,
                "covariance_error": self.covariance_error, "spectral_radius": self.spectral_radius,
                "method": self.method, "noise_gain": None if math.isnan(self.noise_gain) else self.noise_gain,
                "warnings": list(self.warnings),
                "layers": [lay.summary_dict() for lay in self.layers]}

    def __repr__(self) -> str:
        return (f"KroneckerTuning(D={self.dim}, layers={len(self.layers)}, target={self.target!r}, "
                f"spectral_radius={self.spectral_radius:.4g}, covariance_error={self.covariance_error:.2e})")

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The named arrays :meth:`save` writes (layer names, per-layer factors, settings)."""
        arrays: dict[str, np.ndarray] = {"names": np.array(self.names, dtype=str)}
        for i, lay in enumerate(self.layers):
            b = lay.bias_index if lay.bias_index is not None else (-1, -1)
            arrays[f"index_{i}"] = np.array([*lay.weight_index, *b], dtype=np.int64)
            arrays[f"M_{i}"] = lay.step_factor
            arrays[f"Ainv_{i}"] = lay.input_inverse
            arrays[f"S_{i}"] = lay.output_cov
            arrays[f"S_target_{i}"] = lay.target_output_cov
            arrays[f"stats_{i}"] = np.array([lay.spectral_radius, lay.tau_worst, lay.covariance_error,
                                             lay.prior_error, lay.noise_gain])
            if lay.eigenbasis is not None:
                for tag, arr in zip(("Qg", "Qa", "lam", "sig", "sig_target"), lay.eigenbasis):
                    arrays[f"{tag}_{i}"] = arr
        dyn = self.dynamics
        arrays["settings"] = np.array([self.dim, self.n_data, dyn.batch_size, dyn.inv_temperature, dyn.momentum,
                                       self.prior_precision])
        arrays["text"] = np.array(["kronecker", self.target, dyn.batching, self.method], dtype=str)
        return arrays

    def save(self, path: Any) -> None:
        """Write the per-layer factors and settings to an ``.npz`` file (read back with :meth:`load`).

        Parameters
        ----------
        path : str or path-like
            The file.
        """
        np.savez(path, **self.to_arrays())

    @classmethod
    def load(cls, path: Any) -> "KroneckerTuning":
        """Read a result written by :meth:`save`.

        Parameters
        ----------
        path : str or path-like
            The ``.npz`` file.

        Returns
        -------
        KroneckerTuning
            The result.

        Raises
        ------
        SgtuneError
            The file is not a Kronecker step written by sgtune.
        """
        with np.load(path, allow_pickle=False) as z:
            if "text" not in z or str(z["text"][0]) != "kronecker":
                raise SgtuneError(f"{path}: not a kronecker step-size file written by sgtune (save)")
            dim, n, B, beta, kappa, prior = (float(v) for v in z["settings"])
            target, batching = str(z["text"][1]), str(z["text"][2])
            method = str(z["text"][3]) if len(z["text"]) > 3 else "dq-const"
            layers = []
            for i, name in enumerate(z["names"]):
                ix = [int(v) for v in z[f"index_{i}"]]
                st = z[f"stats_{i}"]
                eig = (tuple(z[f"{tag}_{i}"] for tag in ("Qg", "Qa", "lam", "sig", "sig_target"))
                       if f"Qg_{i}" in z else None)
                layers.append(KroneckerLayer(str(name), z[f"M_{i}"], z[f"Ainv_{i}"], z[f"S_{i}"], z[f"S_target_{i}"],
                                             (ix[0], ix[1]), None if ix[2] < 0 else (ix[2], ix[3]),
                                             float(st[0]), float(st[1]), float(st[2]), float(st[3]), eig, method,
                                             float(st[4]) if len(st) > 4 else math.nan))
        dyn = Dynamics(None, int(B), inv_temperature=beta, momentum=kappa, batching=batching)
        return cls(tuple(layers), int(dim), int(n), dyn, target, prior, method)


def _check_method(method: str) -> None:
    if method not in KRONECKER_METHODS:
        raise SgtuneError(f"method must be one of {', '.join(KRONECKER_METHODS)} for the kronecker family, "
                          f"got {method!r}")


def _check_factor(name: str, what: str, X: np.ndarray, fix: str) -> None:
    try:
        np.linalg.cholesky(X)
    except np.linalg.LinAlgError:
        raise NotPositiveDefiniteError(f"layer {name!r}: the {what} is singular (smallest eigenvalue "
                                       f"{np.linalg.eigvalsh(X)[0]:.3g}); {fix}") from None


@cites("wang2026", "Eq. (11) / Prop. B.1 per layer in Kronecker-factored form (module docstring)")
def tune_layer(layer: LayerFactors, dynamics: Dynamics, *, target: str, n_data: int,
               prior_precision: float = 0.0, method: str = "dq-const") -> KroneckerLayer:
    """Tune one layer: M with Λ_l = M ⊗ Ã⁻¹ so that the factored chain's Σ_l equals the factored target.

    ``method="dq-exact"`` tunes with the Σ-dependent noise as the dense :func:`sgtune.theory.tuning.tune` does
    (Algorithm 1 with C̄(Σ*), Wang, Ding & Huggins 2026, Eq. (12)): the noise factor is E + c(S*)
    (:func:`curvature_noise_factor` at the target), so S* is the fixed point of the layer's exact-noise
    second-moment map, which is then stable (a positive map with a positive definite fixed point). With
    ``"dq-const"`` and per-sample roots, that Λ's noise gain under the Σ-dependent noise is computed
    (:func:`layer_exact_stationary`; ``inf``: no stationary covariance).

    Parameters
    ----------
    layer : LayerFactors
        The layer's factors.
    dynamics : Dynamics
        B, β, κ and the batching.
    target : {"posterior", "sandwich"}
        The target.
    n_data : int
        N.
    prior_precision : float, optional
        The prior precision δ (absorbed by :func:`damped_factors`).
    method : {"dq-const", "dq-exact"}, optional
        The noise model (above; the names of :func:`sgtune.theory.tuning.tune`).

    Returns
    -------
    KroneckerLayer
        M, Ã⁻¹, the predicted S and its diagnostics.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import tune_layer
    >>> lf = LayerFactors("fc", np.eye(3), np.diag([1.0, 2.0]), np.eye(2), (0, 6))
    >>> lay = tune_layer(lf, Dynamics(None, batch_size=8), target="posterior", n_data=100)
    >>> bool(lay.covariance_error < 1e-12)
    True
    """
    fix = "add a prior (prior_precision > 0) or more data rows"
    A_d, G_d = damped_factors(layer, prior_precision, n_data)
    _check_factor(layer.name, "input factor A", A_d, fix)
    _check_factor(layer.name, "curvature factor G", G_d, fix)
    S_star = layer_target(layer, A_d, G_d, target, n_data)
    w = np.linalg.eigvalsh(S_star)
    if not w[0] > 1e-12 * w[-1]:
        raise NotPositiveDefiniteError(f"layer {layer.name!r}: the {target} target is singular (no gradient noise "
                                       "along some output direction of the layer); use target posterior")
    _check_method(method)
    E = E0 = noise_factor_for(layer, A_d)
    if method == "dq-exact":
        E = E0 + curvature_noise_factor(layer, A_d, S_star)
    M = _layer_step(G_d, E, S_star, dynamics, n_data)
    try:
        S, rho, tau = layer_stationary(G_d, E, M, dynamics, n_data)
    except UnstableStepSizeError as exc:
        k = int(np.sum(np.linalg.eigvalsh(E) <= 1e-12 * max(np.linalg.eigvalsh(E)[-1], 1e-300)))
        why = (f"the gradient noise is zero along {k} output direction(s) of the layer, so a chain without injected "
               "noise cannot hold the target's variance there; use SGLD (a finite inverse temperature, e.g. 2N)"
               if k and math.isinf(dynamics.inv_temperature) else "no stable step reaches the target")
        raise UnstableStepSizeError(f"layer {layer.name!r}: {why}", spectral_radius=exc.spectral_radius) from None
    d = layer.d_out
    S_dd = _sym(S[:d, :d])
    err = float(np.linalg.norm(S_dd - S_star) / np.linalg.norm(S_star))
    Ainv = _sym(np.linalg.inv(A_d))
    return KroneckerLayer(layer.name, M, Ainv, S_dd, S_star, layer.weight_index, layer.bias_index, rho, tau, err,
                          _prior_error(layer, A_d, G_d, prior_precision, n_data), None, method,
                          _noise_gain(layer, A_d, G_d, E0, M, S_dd, dynamics, n_data, method))


def _noise_gain(layer: LayerFactors, A_d: np.ndarray, G_d: np.ndarray, E0: np.ndarray, M: np.ndarray,
                S_dd: np.ndarray, dynamics: Dynamics, n_data: int, method: str) -> float:
    """The certified bound on ρ(P) of :func:`layer_exact_stationary` for the tuned M (inf: none; NaN: no roots)."""
    if layer.curvature_roots is None:
        return math.nan
    if method == "dq-exact":  # S_dd is the exact-noise fixed point: one constant-noise solve gives the bound
        S0 = layer_stationary(G_d, E0, M, dynamics, n_data)[0][:layer.d_out, :layer.d_out]
        return max(_cw_upper(S_dd, S0), 0.0)
    resp = _noise_response(G_d, M, dynamics, n_data)
    lo, hi = _gain_bracket(lambda X: resp(curvature_noise_factor(layer, A_d, X)), S_dd)
    return math.inf if lo >= 1.0 else max(hi, 0.0)


def _gain_bracket(P: Callable[[np.ndarray], np.ndarray], X0: np.ndarray, iters: int = 30) -> tuple[float, float]:
    """Collatz–Wielandt bounds lo ≤ ρ(P) ≤ hi of a positive map P on symmetric matrices, by power iteration.

    For X ≻ 0 the generalised eigenvalues of (P(X), X) bracket ρ(P); the power iterates (kept definite by a
    small share of X₀) tighten it. Stops once the bracket decides ρ(P) < 1 or ≥ 1 (one data pass per step).
    """
    import scipy.linalg as sla

    base = _sym(X0) / np.linalg.norm(X0)
    X, lo, hi = base, 0.0, math.inf
    for _ in range(iters):
        Y = _sym(P(X))
        w = sla.eigh(Y, X, eigvals_only=True)
        lo, hi = max(lo, float(w[0])), min(hi, float(w[-1]))
        if hi < 1.0 or lo >= 1.0:
            break
        X = Y / np.linalg.norm(Y) + 1e-6 * base
    return lo, hi


def _scalar_stationary(lam: np.ndarray, h: np.ndarray, c: np.ndarray, kappa: float, beta: float) -> np.ndarray:
    """Stationary variance of the scalar chains m' = κm + h d + η (var c), d' = d − λm' + √(2λ/β) ξ (elementwise).

    The 2×2 Lyapunov equation P = FPFᵀ + Q, F = [[1 − λh, −κλ], [h, κ]],
    Q = [[λ²c + 2λ/β, −λc], [−λc, c]], solved as a 3×3 linear system in (P₁₁, P₁₂, P₂₂) per coordinate.
    """
    inj = 0.0 if math.isinf(beta) else 2.0 / beta
    a, b = 1.0 - lam * h, -kappa * lam
    z = np.zeros_like(lam)
    K = np.stack([np.stack([1 - a * a, -2 * a * b, -b * b], -1),
                  np.stack([-a * h, 1 - (a * kappa + b * h), -b * kappa], -1),
                  np.stack([-h * h, -2 * h * kappa, 1 - kappa * kappa + z], -1)], -2)
    rhs = np.stack([lam * lam * c + inj * lam, -lam * c, c], -1)
    return np.linalg.solve(K, rhs[..., None])[..., 0, 0]


def _root_modulus(lam: np.ndarray, h: np.ndarray, kappa: float) -> np.ndarray:
    """The largest |z| of z² − (1 − λh + κ)z + κ, elementwise (the scalar heavy-ball chain's mean map)."""
    t = 1.0 - lam * h + kappa
    disc = t * t - 4.0 * kappa
    return np.where(disc >= 0, 0.5 * (np.abs(t) + np.sqrt(np.clip(disc, 0, None))), math.sqrt(kappa))


def _eigen_steps(h: np.ndarray, c: np.ndarray, target: np.ndarray, kappa: float, beta: float) -> np.ndarray:
    """λ per coordinate with stationary variance = target: closed form for κ = 0, else bisection."""
    inj = 0.0 if math.isinf(beta) else 2.0 / beta
    if kappa == 0.0:  # σ*λh(2 − λh) = λ²c + 2λ/β  ⇔  λ = 2(σ*h − 1/β)/(c + σ*h²)
        return 2.0 * (target * h - 0.5 * inj) / (c + target * h * h)
    lo, hi = np.zeros_like(h), 2.0 * (1.0 + kappa) / h
    for _ in range(200):  # p(λ) → (injected-noise limit) at λ → 0, → ∞ at the stability edge
        mid = 0.5 * (lo + hi)
        above = _scalar_stationary(mid, h, c, kappa, beta) > target
        lo, hi = np.where(above, lo, mid), np.where(above, mid, hi)
        if np.all(hi - lo <= 1e-15 * hi):
            break
    return 0.5 * (lo + hi)


@cites("ritter2018", "§3: the prior added in the joint eigenbasis of the Kronecker factors (laplace-torch KronLaplace)")
def tune_layer_eigenbasis(layer: LayerFactors, dynamics: Dynamics, *, target: str, n_data: int,
                          prior_precision: float = 0.0, method: str = "dq-const") -> KroneckerLayer:
    r"""Tune one layer with the prior in the eigenbasis: Λ_l diagonal in Q_G ⊗ Q_A (module docstring).

    With G = Q_G diag(g) Q_Gᵀ and A = Q_A diag(a) Q_Aᵀ the prior is exact in the Kronecker eigenbasis:
    H_l = G ⊗ A + γI = (Q_G ⊗ Q_A)(diag(g ⊗ a) + γ)(Q_G ⊗ Q_A)ᵀ, γ = δ/N (laplace-torch's ``KronLaplace``).
    The noise is taken diagonal in the same basis (EKFAC-style, George et al. 2018, here from the KFAC noise: c_ij =
    (Q_Gᵀ E_eff Q_G)_ii a_j, E_eff of :func:`noise_factor_for` without damping). A Λ_l diagonal there makes
    Λ_l H_l diagonal, so the layer's chain is d_out·d_in independent scalar chains (curvature
    h_ij = g_i a_j + γ, noise s·c_ij, step λ_ij), and the stationary covariance is exactly
    (Q_G ⊗ Q_A) diag(σ_ij) (Q_G ⊗ Q_A)ᵀ, σ_ij the scalar chain's (Wang, Ding & Huggins 2026, Eq. (11) in one
    dimension; Prop. B.1 with momentum). It is **exact for the chain** block-diagonal over layers with
    H_l = G ⊗ A + γI (the KFAC curvature with the exact prior) and C_l = (Q_G ⊗ Q_A) diag(c)(Q_G ⊗ Q_A)ᵀ.
    Without momentum λ_ij = 2(σ*_ij h_ij − 1/β)/(s c_ij + σ*_ij h_ij²) in closed form; with momentum
    the scalar equation is solved by bisection. Targets: σ* = 1/(N h) (posterior = laplace-torch's
    KronLaplace) or c/(N h²) (sandwich). ``method="dq-exact"`` adds the Σ-dependent noise (Eq. (12)) diagonal in
    the same basis (:func:`eigenbasis_curvature_noise`) at the target, as :func:`tune_layer` does.

    Parameters
    ----------
    layer : LayerFactors
        The layer's factors.
    dynamics : Dynamics
        B, β, κ and the batching.
    target : {"posterior", "sandwich"}
        The target.
    n_data : int
        N.
    prior_precision : float, optional
        The prior precision δ.
    method : {"dq-const", "dq-exact"}, optional
        The noise model (:func:`tune_layer`).

    Returns
    -------
    KroneckerLayer
        With ``eigenbasis = (Q_G, Q_A, λ, σ, σ*)`` (``form == "eigenbasis"``).

    Raises
    ------
    InfeasibleTargetError
        β too small (the injected noise alone exceeds the target along some direction).
    NotPositiveDefiniteError
        A direction with no curvature (no prior) or no noise under SGD.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import tune_layer_eigenbasis
    >>> lf = LayerFactors("fc", np.eye(3), np.diag([1.0, 2.0]), np.eye(2), (0, 6))
    >>> lay = tune_layer_eigenbasis(lf, Dynamics(None, batch_size=8), target="posterior", n_data=100,
    ...                             prior_precision=1.0)
    >>> lay.form, bool(lay.covariance_error < 1e-12)
    ('eigenbasis', True)
    """
    from ..core.errors import InfeasibleTargetError

    if target not in KRONECKER_TARGETS:
        raise SgtuneError(f"target must be one of {', '.join(KRONECKER_TARGETS)} for the kronecker family, "
                          f"got {target!r}")
    la, Qa = np.linalg.eigh(layer.input_factor)
    lg, Qg = np.linalg.eigh(layer.curvature_factor)
    gamma = prior_precision / n_data
    h = np.outer(np.clip(lg, 0, None), np.clip(la, 0, None)) + gamma
    if not np.all(h > 1e-14 * h.max()):
        raise NotPositiveDefiniteError(f"layer {layer.name!r}: the curvature G ⊗ A is singular without a prior; "
                                       "add a prior (prior_precision > 0)")
    E = noise_factor_for(layer, layer.input_factor)
    c_raw = np.outer(np.clip(np.einsum("ji,jk,ki->i", Qg, E, Qg), 0, None), np.clip(la, 0, None))
    scale = finite_population_factor(n_data, dynamics.batch_size, dynamics.without_replacement) / dynamics.batch_size
    c = scale * c_raw
    sig_t = 1.0 / (n_data * h) if target == "posterior" else c_raw / (n_data * h * h)
    beta, kappa = float(dynamics.inv_temperature), float(dynamics.momentum)
    if target == "sandwich" and not np.all(sig_t > 0):
        raise NotPositiveDefiniteError(f"layer {layer.name!r}: the sandwich target is singular (no gradient noise "
                                       "along some eigen-direction of the layer); use target posterior")
    if math.isinf(beta) and not np.all(c > 0):
        raise NotPositiveDefiniteError(f"layer {layer.name!r}: the gradient noise is zero along some eigen-direction "
                                       "of the layer, so SGD cannot hold the target's variance there; use SGLD "
                                       "(a finite inverse temperature, e.g. 2N)")
    _check_method(method)
    c0 = c
    c = c0 + scale * eigenbasis_curvature_noise(layer, sig_t) if method == "dq-exact" else c0
    floor = float(np.max(h * sig_t))
    lam = _eigen_steps(h, c, sig_t, kappa, beta)
    rho = _root_modulus(lam, h, kappa)
    if not (np.all(lam > 0) and np.all(rho < 1.0)):
        raise InfeasibleTargetError(f"layer {layer.name!r}: the injected noise alone (β = {beta:g}) exceeds the "
                                    f"{target} target along some eigen-direction (largest σ*·h {floor:.3g}); raise "
                                    "the inverse temperature (e.g. 2N)")
    sig = _scalar_stationary(lam, h, c, kappa, beta)
    err = float(np.linalg.norm(sig - sig_t) / np.linalg.norm(sig_t))
    f = 1.0 - lam * h
    tau = float(np.max((1 + f) / (1 - f))) if kappa == 0.0 else float(np.max((1 + rho) / (1 - rho)))
    empty_o, empty_i = np.zeros((layer.d_out, layer.d_out)), np.zeros((layer.d_in, layer.d_in))
    gain = (math.nan if layer.curvature_roots is None else
            _eigen_noise_gain(layer, lam, h, c0, sig if method == "dq-exact" else None, dynamics, n_data)[0])
    return KroneckerLayer(layer.name, empty_o, empty_i, empty_o, empty_o, layer.weight_index, layer.bias_index,
                          float(np.max(rho)) ** 2, tau, err, 0.0, (Qg, Qa, lam, sig, sig_t), method, gain)


@cites("wang2026", "Eq. (12): the Σ-dependent part of C̄(Σ), diagonal in the Kronecker eigenbasis")
def eigenbasis_curvature_noise(layer: LayerFactors, sigma: np.ndarray) -> np.ndarray:
    r"""The Σ-dependent noise c(σ), diagonal in Q_G ⊗ Q_A, for Σ_l = (Q_G ⊗ Q_A) diag(σ)(Q_G ⊗ Q_A)ᵀ.

    In the eigenbasis the per-sample block is J_n = Ĝ_n ⊗ â_nâ_nᵀ (Ĝ_n = Q_GᵀG_nQ_G, â_n = Q_Aᵀã_n), so
    (J_n diag(σ) J_n)_{(ij),(ij)} = Σ_kl Ĝ_n[i,k]² â_j² â_l² σ_kl. KFAC's independence of the input and output
    sides gives mean_n ≈ Σ_kl P_ik R_jl σ_kl with P = mean_n Ĝ_n∘Ĝ_n and R = mean_n (â∘â)(â∘â)ᵀ
    (``layer.input_fourth``); the mean term is (g_i a_j)² σ_ij (J = G ⊗ A; with signed roots of exact
    per-sample Hessians, Ḡ = mean_n Ĝ_n: ((Ḡ∘Ḡ)σ)_ij a_j²). So c(σ) = PσR − (g⊗a)²∘σ, with
    P_ii ≥ g_i², R_jj ≥ a_j² (Jensen) and every other entry ≥ 0: a nonnegative linear map of σ (Wang, Ding &
    Huggins 2026, Eq. (12), noise taken diagonal in the basis as the layer's constant noise is).

    Parameters
    ----------
    layer : LayerFactors
        The layer, with ``curvature_roots`` and ``input_fourth``.
    sigma : (d_out, d_in) ndarray
        The variances σ_ij in the eigenbasis.

    Returns
    -------
    (d_out, d_in) ndarray
        The diagonal of mean_n J_nΣJ_n − JΣJ in the basis (without the factor f/B).

    Examples
    --------
    >>> from sgtune.models.kfac import LayerFactors
    >>> from sgtune.theory.kronecker import eigenbasis_curvature_noise
    >>> V = np.array([[[1.0]], [[3.0]]])      # G_n = 1, 9: P = 41, G = 5; ã = 1: R = 1, A = 1
    >>> lf = LayerFactors("fc", np.eye(1), 5 * np.eye(1), np.eye(1), (0, 1), curvature_roots=V, input_fourth=np.eye(1))
    >>> eigenbasis_curvature_noise(lf, np.ones((1, 1)))
    array([[16.]])
    """
    V = layer.curvature_roots
    if V is None or layer.input_fourth is None:
        raise SgtuneError(f"layer {layer.name!r}: the Σ-dependent noise (method 'dq-exact') needs the per-sample "
                          "curvature roots; compute the factors with samples=True or use method 'dq-const'")
    la, _ = np.linalg.eigh(layer.input_factor)
    lg, Qg = np.linalg.eigh(layer.curvature_factor)
    K, d = V.shape[1], V.shape[2]
    P, Gb = np.zeros((d, d)), np.zeros((d, d))
    sg = layer.curvature_signs if layer.curvature_signs is not None else np.ones(V.shape[:2])
    step = max(1, 2 ** 22 // max(K * K * d, 1))
    for i in range(0, V.shape[0], step):
        Vh, sc = V[i:i + step] @ Qg, sg[i:i + step]
        W = (Vh[:, :, None, :] * Vh[:, None, :, :]).reshape(-1, d)
        P += W.T @ (W * (sc[:, :, None] * sc[:, None, :]).reshape(-1, 1))
        Gb += np.einsum("nk,nki,nkj->ij", sc, Vh, Vh)
    Gb /= V.shape[0]  # mean_n Ĝ_n: diag(g) for Gauss–Newton roots
    return P / V.shape[0] @ sigma @ layer.input_fourth - (Gb * Gb) @ sigma * np.clip(la, 0, None) ** 2


def _eigen_noise_gain(layer: LayerFactors, lam: np.ndarray, h: np.ndarray, c0: np.ndarray, sig: np.ndarray | None,
                      dynamics: Dynamics, n_data: int) -> tuple[float, np.ndarray]:
    """(bound on the noise gain, the exact-noise variances σ) of the scalar chains (entrywise Collatz–Wielandt).

    x = base + P(x), base the constant-noise variances, P(x) = r∘c(x) with r the scalar chains' response to
    unit noise: ρ(P) ≤ max(1 − base/x) when x > 0 solves it; no positive solution ⇔ ρ(P) ≥ 1.
    """
    kappa, beta = float(dynamics.momentum), float(dynamics.inv_temperature)
    scale = finite_population_factor(n_data, dynamics.batch_size, dynamics.without_replacement) / dynamics.batch_size
    base = _scalar_stationary(lam, h, c0, kappa, beta)
    r = _scalar_stationary(lam, h, np.full_like(h, scale), kappa, math.inf)
    if sig is None:
        from scipy.sparse.linalg import LinearOperator, gmres

        shp = h.shape
        op = LinearOperator((h.size, h.size), matvec=lambda x: x - (r * eigenbasis_curvature_noise(
            layer, x.reshape(shp))).ravel())
        x, _ = gmres(op, base.ravel(), x0=base.ravel(), rtol=1e-13, atol=0.0, restart=60, maxiter=20)
        sig = x.reshape(shp)
    if not np.all(sig > 0):
        return math.inf, np.full_like(sig, math.inf)
    return float(max(np.max(1.0 - base / sig), 0.0)), sig


@cites("wang2026", "Eqs. (11)–(12): the stationary covariance with the Σ-dependent noise, per layer in factored form")
def exact_noise_prediction(result: KroneckerTuning, factors: KroneckerFactors) -> KroneckerTuning:
    """The prediction of a tuned Kronecker step Λ under the Σ-dependent minibatch noise (C̄(Σ) in factored form).

    For every layer the factored chain with the same Λ_l and the noise s(E + c(S)) ⊗ Ã
    (:func:`layer_exact_stationary`, or diagonal in the eigenbasis, :func:`eigenbasis_curvature_noise`); a
    layer without a stationary covariance (noise gain ≥ 1) gets infinite variances, ``noise_gain = inf`` and is
    listed in :attr:`KroneckerTuning.warnings`. For a step tuned with ``method="dq-exact"`` this returns its own
    prediction (up to rounding); for ``"dq-const"`` it is that step's better prediction.

    Parameters
    ----------
    result : KroneckerTuning
        The tuned step.
    factors : KroneckerFactors
        The factors it was tuned from, with per-sample curvature roots.

    Returns
    -------
    KroneckerTuning
        The same Λ with the exact-noise predicted covariance, its error against the target and noise gains.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models import MLP
    >>> from sgtune.models.kfac import mlp_factors
    >>> from sgtune.theory.kronecker import exact_noise_prediction, tune_factors
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(200, 2)), rng.normal(size=200)
    >>> net = MLP((3,))
    >>> fac = mlp_factors(net, net.initial_params(2, rng), X, y, prior_precision=1.0, samples=True)
    >>> res = tune_factors(fac, Dynamics(None, batch_size=20, inv_temperature=400.0))
    >>> pred = exact_noise_prediction(res, fac)
    >>> bool(pred.noise_gain < 1), bool(pred.covariance_error > res.covariance_error)
    (True, True)
    """
    dyn, n, out = result.dynamics, result.n_data, []
    for lay, lf in zip(result.layers, factors.layers):
        if lay.eigenbasis is not None:
            la, lg = np.linalg.eigvalsh(lf.input_factor), np.linalg.eigvalsh(lf.curvature_factor)
            h = np.outer(np.clip(lg, 0, None), np.clip(la, 0, None)) + result.prior_precision / n
            E = noise_factor_for(lf, lf.input_factor)
            Qg = lay.eigenbasis[0]
            scale = finite_population_factor(n, dyn.batch_size, dyn.without_replacement) / dyn.batch_size
            c0 = scale * np.outer(np.clip(np.einsum("ji,jk,ki->i", Qg, E, Qg), 0, None), np.clip(la, 0, None))
            gain, sig = _eigen_noise_gain(lf, lay.eigenbasis[2], h, c0, None, dyn, n)
            sig_t = lay.eigenbasis[4]
            err = float(np.linalg.norm(sig - sig_t) / np.linalg.norm(sig_t)) if math.isfinite(gain) else math.inf
            out.append(_replace_layer(lay, eigenbasis=(*lay.eigenbasis[:3], sig, sig_t), covariance_error=err,
                                      noise_gain=gain))
            continue
        A_d, G_d = damped_factors(lf, result.prior_precision, n)
        try:
            S, rho, tau, gain = layer_exact_stationary(lf, A_d, G_d, noise_factor_for(lf, A_d), lay.step_factor, dyn, n)
        except UnstableStepSizeError:
            inf = np.full_like(lay.output_cov, math.inf)
            out.append(_replace_layer(lay, output_cov=inf, covariance_error=math.inf, noise_gain=math.inf))
            continue
        S_dd = _sym(S[:lf.d_out, :lf.d_out])
        err = float(np.linalg.norm(S_dd - lay.target_output_cov) / np.linalg.norm(lay.target_output_cov))
        out.append(_replace_layer(lay, output_cov=S_dd, spectral_radius=rho, tau_worst=tau, covariance_error=err,
                                  noise_gain=gain))
    res = KroneckerTuning(tuple(out), result.dim, n, dyn, result.target, result.prior_precision, result.method)
    for msg in res.warnings:
        warnings.warn(msg, AccuracyWarning, stacklevel=2)
    return res


def _replace_layer(lay: KroneckerLayer, **changes: Any) -> KroneckerLayer:
    import dataclasses

    return dataclasses.replace(lay, **changes)


@cites("wang2026", "Eq. (11) / Prop. B.1, per layer in Kronecker-factored form (module docstring)")
def tune_factors(factors: KroneckerFactors, dynamics: Dynamics, *, target: str = "posterior",
                 progress: Callable[[str], None] | None = None, prior: str = "damped",
                 method: str = "dq-const") -> KroneckerTuning:
    """Tune every layer of a network (:func:`tune_layer`): Λ = blockdiag_l(M_l ⊗ Ã_l⁻¹).

    Parameters
    ----------
    factors : KroneckerFactors
        The layers' factors at θ̂ (:mod:`sgtune.models.kfac`).
    dynamics : Dynamics
        B, β, κ and the batching (``step`` is ignored).
    target : {"posterior", "sandwich"}, optional
        The target (module docstring).
    progress : callable, optional
        Called with one line per layer (e.g. to print on stderr).
    prior : {"damped", "eigenbasis"}, optional
        How the prior enters: factored Tikhonov damping (:func:`tune_layer`, Λ_l = M ⊗ Ã⁻¹) or exactly in
        the Kronecker eigenbasis (:func:`tune_layer_eigenbasis`, Λ_l diagonal in Q_G ⊗ Q_A).
    method : {"dq-const", "dq-exact"}, optional
        The noise model: constant at θ̂, or with the Σ-dependent minibatch noise (:func:`tune_layer`; needs
        the per-sample curvature roots of the factors). A step without a stationary covariance under the
        Σ-dependent noise is returned with an :class:`~sgtune.core.errors.AccuracyWarning` and listed in
        :attr:`KroneckerTuning.warnings`.

    Returns
    -------
    KroneckerTuning
        The per-layer factors and summaries.

    Raises
    ------
    SgtuneError
        An unknown target, B > N, or a singular factor.
    InfeasibleTargetError
        β too small for the target (the injected noise alone exceeds it).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import KroneckerFactors, LayerFactors
    >>> from sgtune.theory.kronecker import tune_factors
    >>> lf = LayerFactors("fc", np.eye(2), np.eye(1), np.eye(1), (0, 2))
    >>> tune_factors(KroneckerFactors((lf,), n_data=50, dim=2), Dynamics(None, batch_size=5)).names
    ('fc',)
    """
    if target not in KRONECKER_TARGETS:
        raise SgtuneError(f"target must be one of {', '.join(KRONECKER_TARGETS)} for the kronecker family, "
                          f"got {target!r}")
    if prior not in KRONECKER_PRIORS:
        raise SgtuneError(f"prior must be one of {', '.join(KRONECKER_PRIORS)} for the kronecker family, got {prior!r}")
    _check_method(method)
    tuner = tune_layer if prior == "damped" else tune_layer_eigenbasis
    dynamics.check_data(factors.n_data)
    out = []
    for i, layer in enumerate(factors.layers):
        lay = tuner(layer, dynamics, target=target, n_data=factors.n_data, prior_precision=factors.prior_precision,
                    method=method)
        out.append(lay)
        if progress is not None:
            gain = "" if math.isnan(lay.noise_gain) else f", noise gain {lay.noise_gain:.3g}"
            progress(f"kronecker: layer {i + 1}/{len(factors.layers)} {layer.name} ({layer.d_out}×{layer.d_in}): "
                     f"spectral radius {lay.spectral_radius:.4g}, tau {lay.tau_worst:.3g}{gain}")
    res = KroneckerTuning(tuple(out), factors.dim, factors.n_data, dynamics.replace(step=None), target,
                          factors.prior_precision, method)
    for msg in res.warnings:
        warnings.warn(msg, AccuracyWarning, stacklevel=2)
    return res


def _xy(data: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(data, tuple) and len(data) == 2:
        X, y = data
    else:
        X, y = getattr(data, "X", None), getattr(data, "y", None)
        if X is None:
            raise SgtuneError("data must be an sgtune Dataset or a tuple (X, y)")
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


@cites("wang2026", "Eq. (11) / Prop. B.1 per layer in Kronecker-factored form (sgtune.theory.kronecker)")
def tune_kronecker(model_or_net: Any, data: Any, dynamics: Dynamics, *, target: str = "posterior",
                   prior_precision: float = 0.0, theta: Any = None, likelihood: str = "gaussian",
                   noise_variance: float = 1.0, progress: Callable[[str], None] | None = None,
                   prior: str = "damped", method: str = "dq-const") -> KroneckerTuning:
    """Λ = blockdiag_l(M_l ⊗ Ã_l⁻¹) for a whole network: KFAC factors, then one d_out-sized solve per layer.

    Parameters
    ----------
    model_or_net : MLP, torch.nn.Module, TorchModel or KroneckerFactors
        The network (an sgtune MLP needs ``theta``; a torch network is taken at its current weights).
    data : Dataset or tuple (X, y)
        The data the factors average over (ignored for ``KroneckerFactors``).
    dynamics : Dynamics
        B, β, κ and the batching (``step`` is ignored).
    target : {"posterior", "sandwich"}, optional
        The target (:mod:`sgtune.theory.kronecker`).
    prior_precision : float, optional
        The precision δ of the prior N(0, δ⁻¹I) (weight decay δ/N on the mean loss).
    theta : (D,) array_like, optional
        The parameters θ̂ of an MLP.
    likelihood : str, optional
        The torch network's loss (``gaussian``, ``bernoulli``, ``categorical``).
    noise_variance : float, optional
        The variance σ² of the Gaussian likelihood (torch networks).
    progress : callable, optional
        Called with one line per layer.
    prior : {"damped", "eigenbasis"}, optional
        How the prior enters (:func:`tune_factors`).
    method : {"dq-const", "dq-exact"}, optional
        The noise model (:func:`tune_factors`).

    Returns
    -------
    KroneckerTuning
        The per-layer factors, the predicted covariances and summaries.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models import MLP
    >>> from sgtune.theory.kronecker import tune_kronecker
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(200, 2)), rng.normal(size=200)
    >>> net = MLP((3,))
    >>> res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=20), theta=net.initial_params(2, rng),
    ...                      prior_precision=1.0)
    >>> res.names, bool(res.covariance_error < 1e-10)
    (('hidden1', 'output'), True)
    """
    if isinstance(model_or_net, KroneckerFactors):
        factors = model_or_net
    elif isinstance(model_or_net, MLP):
        if theta is None:
            raise SgtuneError("tune_kronecker: an MLP needs theta (its fitted parameters θ̂)")
        X, y = _xy(data)
        factors = mlp_factors(model_or_net, theta, X, y, prior_precision=prior_precision,
                              samples=method == "dq-exact")
    else:
        X, y = _xy(data)
        factors = torch_factors(model_or_net, X, y, likelihood, noise_variance=noise_variance,
                                prior_precision=prior_precision, samples=method == "dq-exact")
    return tune_factors(factors, dynamics, target=target, progress=progress, prior=prior, method=method)
