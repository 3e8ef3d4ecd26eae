"""Analytic targets of the SMILE paper (anonymous, 2025) (appendix C) with injected gradient noise, as numba gradient functions.

Targets (D = 10 in the paper; any D here, even for Rosenbrock):

- ``gaussian`` — ill-conditioned Gaussian N(0, Σ), Σ = Rᵀ Λ R, Λ = diag(logspace(−2, 2, D))
  (eigenvalues 1/100..100), R a random rotation: log p = −½ θᵀ Σ⁻¹ θ.
- ``rosenbrock`` — product of D/2 bananas, log p = −Σ_i [(θ²_{2i−1} − θ_{2i})²/Q + (θ_{2i−1} − 1)²],
  Q = 0.1.
- ``funnel`` — Neal's funnel θ₁ ~ N(0, 3²), θ_i | θ₁ ~ N(0, e^{θ₁}):
  log p = −θ₁²/18 − Σ_{i≥2} [θ_i² e^{−θ₁}/2 + θ₁/2].

Injected noise (eq. 24): log p_noise(θ) = log p(θ) + εᵀθ, ε ~ N(0, V(θ)); the sampler sees
the gradient ∇log p(θ) + ε. ``isotropic`` V = 256 I; ``diagonal`` V = 256 Λ (the Λ of the
Gaussian target); ``correlated`` V = R'ᵀ(256 Λ)R' (R' another rotation); ``spatial``
V(θ) = V_corr · exp(−θ₂/σ(θ₂)) (σ(θ₂) the target's marginal standard deviation of θ₂, the
second coordinate); ``none`` V = 0. One ε per step plays the minibatch: ξ (D standard
normals, drawn once per step) gives w = L ξ (LLᵀ = V_const, :func:`noise_vector`) and
ε(θ) = exp(−θ₂/(2σ₂))^{[spatial]} · w,
so every gradient evaluation of a step sees the same "batch" (the position dependence of
the spatial case is evaluated at each point).

Functions are small ``@njit`` helpers so they can be plugged into other kernels as the
gradient function; targets and noises are selected by the integer ids below.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import SgtuneError
from ..theory.smile import funnel_second_moments, gaussian_second_moments, rosenbrock_second_moments
from ._jit import component, component_inline, njit, njit_inline
from .rng import fill_normals

__all__ = ["TARGET_IDS", "NOISE_KINDS", "AnalyticTarget", "make_target", "target_logp_grad", "noisy_logp_grad",
           "noise_vector", "random_rotation", "draw_step_noise", "target_value_grad", "target_grad"]

GAUSSIAN, ROSENBROCK, FUNNEL = 0, 1, 2
TARGET_IDS: dict[str, int] = {"gaussian": GAUSSIAN, "rosenbrock": ROSENBROCK, "funnel": FUNNEL}
NOISE_KINDS: tuple[str, ...] = ("none", "isotropic", "diagonal", "correlated", "spatial")
#: the paper's noise scale (V_iso = 256 I)
NOISE_SCALE = 256.0
FUNNEL_SCALE = 3.0


@njit
def target_logp_grad(target_id, prec, q, theta, grad):  # type: ignore[no-untyped-def]
    """log p(θ) (up to a constant) and ∇log p(θ) written into ``grad``.

    ``prec`` is Σ⁻¹ for the Gaussian (ignored otherwise), ``q`` is Q for Rosenbrock.
    """
    d = theta.shape[0]
    if target_id == GAUSSIAN:
        lp = 0.0
        for i in range(d):
            acc = 0.0
            for j in range(d):
                acc += prec[i, j] * theta[j]
            grad[i] = -acc
            lp -= 0.5 * theta[i] * acc
        return lp
    if target_id == ROSENBROCK:
        lp = 0.0
        for k in range(d // 2):
            x = theta[2 * k]
            y = theta[2 * k + 1]
            r = x * x - y
            lp -= r * r / q + (x - 1.0) * (x - 1.0)
            grad[2 * k] = -(4.0 * x * r / q + 2.0 * (x - 1.0))
            grad[2 * k + 1] = 2.0 * r / q
        return lp
    # FUNNEL
    a2 = FUNNEL_SCALE * FUNNEL_SCALE
    t1 = theta[0]
    w = math.exp(-t1)
    s = 0.0
    for i in range(1, d):
        s += theta[i] * theta[i]
        grad[i] = -theta[i] * w
    grad[0] = -t1 / a2 + 0.5 * s * w - 0.5 * (d - 1)
    return -0.5 * t1 * t1 / a2 - 0.5 * s * w - 0.5 * (d - 1) * t1


@njit
def noise_vector(noise_chol, xi, w):  # type: ignore[no-untyped-def]
    """w ← L ξ (L lower triangular): the step's noise before the spatial factor."""
    d = xi.shape[0]
    for i in range(d):
        acc = 0.0
        for j in range(i + 1):
            acc += noise_chol[i, j] * xi[j]
        w[i] = acc


@njit
def noisy_logp_grad(target_id, prec, q, spatial_sd, w, theta, grad):  # type: ignore[no-untyped-def]
    """log p(θ) + εᵀθ and ∇log p(θ) + ε (into ``grad``), ε = f(θ) w, w = L ξ (:func:`noise_vector`).

    ``spatial_sd`` > 0 switches the spatial factor f(θ) = exp(−θ₂/(2σ₂)) on (σ₂ = spatial_sd);
    0 means f = 1.
    """
    lp = target_logp_grad(target_id, prec, q, theta, grad)
    f = 1.0
    if spatial_sd > 0.0:
        f = math.exp(-0.5 * theta[1] / spatial_sd)
    for i in range(theta.shape[0]):
        eps = f * w[i]
        grad[i] += eps
        lp += eps * theta[i]
    return lp


# --------------------------------------------------------------------------- the engine's gradient oracle
# (sgtune.sampler.engine): an analytic target as a loss, −log p_ξ(θ), in the oracles' convention. Oracle fields:
# hessian = Σ⁻¹ (D, D), ints = [target id], floats = [Q, σ₂ of the spatial noise (0: off)], noise_factor = L, work ≥ 2D: work[:D] = ξ, work[D:2D] = w = Lξ, the step's noise (its "minibatch").
@njit_inline
def draw_step_noise(st, noise_chol, work, d):  # type: ignore[no-untyped-def]
    """The step's noise: ξ (D normals from the chain's stream) into ``work[:D]``, w = Lξ into ``work[D:2D]``."""
    xi = work[:d]
    fill_normals(st, xi)
    noise_vector(noise_chol, xi, work[d:2 * d])


@njit_inline
def _target_loss_grad(theta, X, ints, floats, work, grad):  # type: ignore[no-untyped-def]
    d = theta.shape[0]
    lp = noisy_logp_grad(ints[0], X, floats[0], floats[1], work[d:2 * d], theta, grad)
    for j in range(d):
        grad[j] = -grad[j]
    return -lp


@component_inline
def target_value_grad(theta, ora, idx, nb, st, work, grad, want):  # type: ignore[no-untyped-def]
    """−log p_ξ(θ) and its gradient −∇log p_ξ(θ) (into ``grad``) with the step's noise already drawn
    (:func:`draw_step_noise`): the MCLMC samplers evaluate three gradients on one noise."""
    # inlined into the MCLMC rule, which works on views that own nothing (a call here cost ≈ 165 instructions,
    # reference counting included; benchmarks/model_problem_instructions.py)
    return _target_loss_grad(theta, ora.hessian, ora.ints, ora.floats, work, grad)


@component_inline
def target_grad(theta, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
    """The step's noise drawn, then −∇log p_ξ(θ): the samplers with one gradient a step (SGLD, SGHMC)."""
    draw_step_noise(st, ora.noise_factor, work, theta.shape[0])
    _target_loss_grad(theta, ora.hessian, ora.ints, ora.floats, work, grad)


def random_rotation(dim: int, rng: np.random.Generator) -> np.ndarray:
    """Draw a Haar-distributed rotation (QR of a Gaussian matrix with the sign fix, det = +1).

    Parameters
    ----------
    dim : int
        D.
    rng : numpy.random.Generator
        The random stream.

    Returns
    -------
    (D, D) ndarray
        An orthogonal matrix with determinant +1.

    Examples
    --------
    >>> from sgtune.sampler.targets import random_rotation
    >>> R = random_rotation(3, np.random.default_rng(0))
    >>> bool(np.allclose(R @ R.T, np.eye(3))), round(float(np.linalg.det(R)), 6)
    (True, 1.0)
    """
    a = rng.standard_normal((dim, dim))
    qm, r = np.linalg.qr(a)
    qm = qm * np.sign(np.diag(r))
    if np.linalg.det(qm) < 0:
        qm[:, 0] = -qm[:, 0]
    return np.ascontiguousarray(qm)


@dataclass(frozen=True, slots=True)
class AnalyticTarget:
    """A target with injected noise, as the arrays the kernels take, plus its exact moments.

    Made by :func:`make_target` (the SMILE paper, anonymous, 2025, appendix C).

    Attributes
    ----------
    name, noise : str
        The target and the noise model.
    dim : int
        D.
    target_id : int
        The kernels' code of the target.
    precision : (D, D) ndarray
        Σ⁻¹ (Gaussian; an identity placeholder otherwise, unused).
    q : float
        Rosenbrock's Q.
    noise_chol : (D, D) ndarray
        L with LLᵀ = V_const (zeros for ``"none"``).
    spatial_sd : float
        σ(θ₂) for ``"spatial"``, else 0.
    noise_cov : (D, D) ndarray
        V_const.
    start : (D,) ndarray
        The posterior mean (the paper's initial position).
    second_moment : (D,) ndarray
        E[θ_i²].
    var_of_square : (D,) ndarray
        Var(θ_i²).
    reduce : str
        ``"mean"`` (Gaussian, Rosenbrock) or ``"max"`` (funnel), as appendix C reduces the errors.
    seed : int
        Seed of the rotations.

    Examples
    --------
    >>> from sgtune.sampler.targets import make_target
    >>> target = make_target("gaussian", dim=4)
    >>> target.name, target.noise, target.second_moment.shape
    ('gaussian', 'isotropic', (4,))
    """

    name: str
    noise: str
    dim: int
    target_id: int
    precision: np.ndarray      # Σ⁻¹ (Gaussian; identity placeholder otherwise, unused)
    q: float                   # Rosenbrock Q
    noise_chol: np.ndarray     # L with LLᵀ = V_const (zeros for "none")
    spatial_sd: float          # σ(θ₂) for "spatial", else 0
    noise_cov: np.ndarray      # V_const
    start: np.ndarray          # the posterior mean (the paper's initial position)
    second_moment: np.ndarray  # E[θ_i²]
    var_of_square: np.ndarray  # Var(θ_i²)
    reduce: str                # "mean" (Gaussian, Rosenbrock) or "max" (funnel), appendix C
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.name, "noise": self.noise, "dim": self.dim, "q": self.q, "seed": self.seed,
                "spatial_sd": self.spatial_sd, "reduce": self.reduce,
                "second_moment": self.second_moment.tolist(), "var_of_square": self.var_of_square.tolist()}


def make_target(name: str, noise: str = "isotropic", *, dim: int = 10, q: float = 0.1, seed: int = 0,
                noise_scale: float = NOISE_SCALE) -> AnalyticTarget:
    """Build an appendix-C target and noise (rotations R, R' drawn from ``SeedSequence(seed)``).

    Parameters
    ----------
    name : {"gaussian", "rosenbrock", "funnel"}
        The target of the SMILE paper (anonymous, 2025), appendix C.
    noise : {"none", "isotropic", "diagonal", "correlated", "spatial"}
        The injected gradient noise.
    dim : int
        The dimension D ≥ 2 (even for Rosenbrock).
    q : float
        Rosenbrock's Q.
    seed : int
        Seed of the two random rotations (the same seed gives the same Σ and V for every target).
    noise_scale : float
        The 256 of V_iso = 256 I.

    Returns
    -------
    AnalyticTarget
        The arrays the compiled kernels take and the target's exact moments.

    Examples
    --------
    >>> from sgtune.sampler.targets import make_target
    >>> make_target("rosenbrock", "none", dim=4).reduce
    'mean'
    """
    if name not in TARGET_IDS:
        raise SgtuneError(f"target must be one of {sorted(TARGET_IDS)}, got {name!r}")
    if noise not in NOISE_KINDS:
        raise SgtuneError(f"noise must be one of {list(NOISE_KINDS)}, got {noise!r}")
    if isinstance(dim, bool) or int(dim) != dim or dim < 2:
        raise SgtuneError(f"dim must be an integer >= 2, got {dim!r}")
    if name == "rosenbrock" and dim % 2:
        raise SgtuneError(f"dim must be even for the Rosenbrock product, got {dim}; use dim={dim + 1}")
    if not (q > 0 and math.isfinite(q)):
        raise SgtuneError(f"q must be a finite number > 0, got {q}")
    if not (noise_scale >= 0 and math.isfinite(noise_scale)):
        raise SgtuneError(f"noise_scale must be a finite number >= 0, got {noise_scale}")
    dim = int(dim)
    r1, r2 = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    lam = np.logspace(-2.0, 2.0, dim)
    R = random_rotation(dim, r1)
    Rp = random_rotation(dim, r2)
    cov = R.T @ np.diag(lam) @ R
    cov = 0.5 * (cov + cov.T)
    prec = R.T @ np.diag(1.0 / lam) @ R
    prec = np.ascontiguousarray(0.5 * (prec + prec.T))
    if name == "gaussian":
        e2, v2 = gaussian_second_moments(cov)
        start = np.zeros(dim)
        sd2 = math.sqrt(cov[1, 1])
    elif name == "rosenbrock":
        e2, v2 = rosenbrock_second_moments(dim, q)
        start = np.tile([1.0, 1.5], dim // 2)
        sd2 = math.sqrt(e2[1] - 1.5 ** 2)
        prec = np.eye(dim)
    else:
        e2, v2 = funnel_second_moments(dim, FUNNEL_SCALE)
        start = np.zeros(dim)
        sd2 = math.sqrt(e2[1])
        prec = np.eye(dim)
    if noise == "none":
        V = np.zeros((dim, dim))
    elif noise == "isotropic":
        V = noise_scale * np.eye(dim)
    elif noise == "diagonal":
        V = noise_scale * np.diag(lam)
    else:
        V = Rp.T @ (noise_scale * np.diag(lam)) @ Rp
        V = 0.5 * (V + V.T)
    L = np.zeros((dim, dim)) if noise == "none" or noise_scale == 0 else np.linalg.cholesky(V)
    return AnalyticTarget(name, noise, dim, TARGET_IDS[name], prec, float(q), np.ascontiguousarray(L),
                          sd2 if noise == "spatial" else 0.0, V, start, e2, v2,
                          "max" if name == "funnel" else "mean", int(seed))
