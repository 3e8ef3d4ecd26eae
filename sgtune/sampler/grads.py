"""Numba gradient oracles: GLM minibatch gradients and a quadratic potential with synthetic noise.

Convention (Wang, Ding & Huggins 2026, §2.1): the stochastic gradient of the *mean* loss,

    G(θ) = (1/|S|) Σ_{n∈S} ∇l_n(θ) + Γθ/N,       ∇l_n(θ) = ρ'(x_nᵀθ, y_n) x_n,

with ρ' from :meth:`sgtune.models.GLM.derivatives` (mirrored here elementwise and tested
against it). Model ids (:data:`MODEL_IDS`): linear 0, logistic 1, poisson 2, beta-linear 3.

The quadratic oracle (ids 4, 5) is for theory checks without data:
G(θ) = A(θ − μ) + ε with ε = L z, z ~ N(0, I), LLᵀ = C (``quadratic-gaussian``), or
ε_i = scale · S_α i.i.d. symmetric α-stable (``quadratic-stable``).

Gradient components (composed into a chain by :mod:`sgtune.sampler.kernels`) all have the
signature ``grad(theta, ora, idx, nb, st, work, grad)``: write the data term of G for the minibatch
``idx[:nb]`` into ``grad`` (the chain adds the prior Γθ/N with :func:`add_prior`), reading the fields
they need of the :class:`~sgtune.sampler.state.Oracle` record ``ora`` (data, the model's integer and
float parameters, the quadratic's Hessian, mean and noise factor), the chain's random stream ``st`` and
a per-chain work buffer ``work`` (its length is the model's ``work_size``, see
:data:`sgtune.sampler.specs.ORACLES`). :data:`GRAD_FNS` maps a
spec kind to its component.

Model parameters are passed as a float64 vector ``mpar`` = [σ², p, c, α, scale] with
c = (2πσ²)^{(1−p)/2} (β-divergence constant); unused entries are ignored.
"""
from __future__ import annotations

import math

import numpy as np

from ._jit import component, component_inline, njit, njit_inline
from .rng import fill_normals, stable_symmetric

__all__ = ["MODEL_IDS", "LINEAR", "LOGISTIC", "POISSON", "BETA_LINEAR", "QUAD_GAUSS", "QUAD_STABLE",
           "model_params", "glm_d1", "glm_d1_vector", "row_dot", "rows4_dot", "linear_predictors",
           "weighted_row_mean", "minibatch_gradient", "quadratic_gradient", "add_prior", "glm_grad",
           "quad_gauss_grad", "quad_stable_grad", "GRAD_FNS", "glm_rho", "minibatch_value_gradient",
           "glm_value_grad", "prior_value"]

LINEAR, LOGISTIC, POISSON, BETA_LINEAR, QUAD_GAUSS, QUAD_STABLE = 0, 1, 2, 3, 4, 5
MODEL_IDS: dict[str, int] = {"linear": LINEAR, "logistic": LOGISTIC, "poisson": POISSON,
                             "beta-linear": BETA_LINEAR, "quadratic-gaussian": QUAD_GAUSS,
                             "quadratic-stable": QUAD_STABLE}
PRIOR_NONE, PRIOR_SCALAR, PRIOR_DENSE = 0, 1, 2


def model_params(noise_variance: float = 1.0, beta_power: float = 1.5, alpha: float = 2.0,
                 scale: float = 0.0) -> np.ndarray:
    """The ``mpar`` vector [σ², p, c, α, scale] (see module docstring)."""
    c = (2 * math.pi * noise_variance) ** ((1 - beta_power) / 2)
    return np.array([noise_variance, beta_power, c, alpha, scale], dtype=np.float64)


@njit
def glm_d1(model, eta, y, mpar):  # type: ignore[no-untyped-def]
    """∂ρ/∂η(η, y) of the GLM ``model`` (mirror of ``GLM.derivatives(...)[1]``)."""
    if model == LINEAR:
        return (eta - y) / mpar[0]
    if model == LOGISTIC:
        # σ(η) = 1/(1 + e^{−η}) for η ≥ 0 and e^{η}/(1 + e^{η}) for η < 0 (no overflow), written
        # with e = e^{−|η|} and a select instead of a branch: the sign of η is a coin flip on
        # a minibatch, and a mispredicted branch costs more than the exp
        e = math.exp(-abs(eta))
        num = 1.0 if eta >= 0.0 else e
        return num / (1.0 + e) - y
    if model == POISSON:
        return math.exp(eta) - y
    # BETA_LINEAR: ρ' = −c e^{−(p−1) r²/(2σ²)} r/σ², r = y − η
    s2 = mpar[0]
    r = y - eta
    return -mpar[2] * math.exp(-(mpar[1] - 1.0) * r * r / (2.0 * s2)) * r / s2


@njit
def glm_rho(model, eta, y, mpar):  # type: ignore[no-untyped-def]
    """ρ(η, y) of the GLM ``model`` up to an additive constant (mirror of ``GLM.derivatives(...)[0]``;
    beta-linear omits its constant ``integral_term``). Only differences on one batch are used (SMILE's ΔE).
    """
    if model == LINEAR:
        r = eta - y
        return 0.5 * r * r / mpar[0]
    if model == LOGISTIC:
        # log(1 + e^η) = max(η, 0) + log1p(e^{−|η|})
        return (eta if eta > 0.0 else 0.0) + math.log1p(math.exp(-abs(eta))) - y * eta
    if model == POISSON:
        return math.exp(eta) - y * eta
    s2 = mpar[0]
    r = y - eta
    return -mpar[2] * math.exp(-(mpar[1] - 1.0) * r * r / (2.0 * s2)) / (mpar[1] - 1.0)


@njit
def glm_d1_vector(model, eta, y, mpar, out):  # type: ignore[no-untyped-def]
    """Elementwise :func:`glm_d1` into ``out`` (for tests against ``sgtune.models``)."""
    for i in range(eta.shape[0]):
        out[i] = glm_d1(model, eta[i], y[i], mpar)


@njit
def row_dot(X, n, v):  # type: ignore[no-untyped-def]
    """x_nᵀv with 8 interleaved partial sums (a fixed, documented summation order).

    Without ``fastmath`` LLVM may not reassociate a reduction, so a single accumulator is a
    chain of dependent adds (latency-bound); 8 independent sums let it use SIMD lanes while
    staying deterministic (same order on every run, thread count and machine with the same ISA).
    """
    d = v.shape[0]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    j = 0
    while j + 8 <= d:
        s0 += X[n, j] * v[j]
        s1 += X[n, j + 1] * v[j + 1]
        s2 += X[n, j + 2] * v[j + 2]
        s3 += X[n, j + 3] * v[j + 3]
        s4 += X[n, j + 4] * v[j + 4]
        s5 += X[n, j + 5] * v[j + 5]
        s6 += X[n, j + 6] * v[j + 6]
        s7 += X[n, j + 7] * v[j + 7]
        j += 8
    while j < d:
        s0 += X[n, j] * v[j]
        j += 1
    return ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7))


@njit
def rows4_dot(r0, r1, r2, r3, v, out, k):  # type: ignore[no-untyped-def]
    """out[k + i] ← r_iᵀv for four rows at once, 4 partial sums each (j mod 4), fixed order.

    Sixteen independent accumulators and one load of v_j per four products: on this problem
    (D = 50) the 32 dot products of a minibatch take ≈0.31 µs instead of ≈0.60 µs with
    :func:`row_dot` one row at a time (both scalar: see :mod:`sgtune.sampler._jit`).
    """
    d = v.shape[0]
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = 0.0
    c0 = c1 = c2 = c3 = e0 = e1 = e2 = e3 = 0.0
    j = 0
    while j + 4 <= d:
        t0 = v[j]
        t1 = v[j + 1]
        t2 = v[j + 2]
        t3 = v[j + 3]
        a0 += r0[j] * t0
        a1 += r0[j + 1] * t1
        a2 += r0[j + 2] * t2
        a3 += r0[j + 3] * t3
        b0 += r1[j] * t0
        b1 += r1[j + 1] * t1
        b2 += r1[j + 2] * t2
        b3 += r1[j + 3] * t3
        c0 += r2[j] * t0
        c1 += r2[j + 1] * t1
        c2 += r2[j + 2] * t2
        c3 += r2[j + 3] * t3
        e0 += r3[j] * t0
        e1 += r3[j + 1] * t1
        e2 += r3[j + 2] * t2
        e3 += r3[j + 3] * t3
        j += 4
    while j < d:
        t0 = v[j]
        a0 += r0[j] * t0
        b0 += r1[j] * t0
        c0 += r2[j] * t0
        e0 += r3[j] * t0
        j += 1
    out[k] = (a0 + a2) + (a1 + a3)
    out[k + 1] = (b0 + b2) + (b1 + b3)
    out[k + 2] = (c0 + c2) + (c1 + c3)
    out[k + 3] = (e0 + e2) + (e1 + e3)


@njit
def linear_predictors(theta, X, idx, start, nb, eta):  # type: ignore[no-untyped-def]
    """eta[k] ← x_nᵀθ for the rows n = idx[start + k], k < nb (four rows per pass while they are in L1)."""
    k = 0
    while k + 4 <= nb:
        rows4_dot(X[idx[start + k]], X[idx[start + k + 1]], X[idx[start + k + 2]], X[idx[start + k + 3]],
                  theta, eta, k)
        k += 4
    while k < nb:
        eta[k] = row_dot(X, idx[start + k], theta)
        k += 1


@njit
def weighted_row_mean(X, idx, start, nb, eta, grad):  # type: ignore[no-untyped-def]
    """grad ← (1/nb) Σ_{k<nb} eta[k] x_n, n = idx[start + k] (four rows per pass, a fixed summation order)."""
    d = grad.shape[0]
    for j in range(d):
        grad[j] = 0.0
    k = 0
    while k + 4 <= nb:
        r0 = X[idx[start + k]]
        r1 = X[idx[start + k + 1]]
        r2 = X[idx[start + k + 2]]
        r3 = X[idx[start + k + 3]]
        g0 = eta[k]
        g1 = eta[k + 1]
        g2 = eta[k + 2]
        g3 = eta[k + 3]
        for j in range(d):
            grad[j] += (g0 * r0[j] + g1 * r1[j]) + (g2 * r2[j] + g3 * r3[j])
        k += 4
    while k < nb:
        r0 = X[idx[start + k]]
        g0 = eta[k]
        for j in range(d):
            grad[j] += g0 * r0[j]
        k += 1
    inv = 1.0 / nb
    for j in range(d):
        grad[j] *= inv


@njit
def minibatch_gradient(theta, X, y, idx, start, stop, model, mpar, prior_kind, prior, eta, grad):  # type: ignore[no-untyped-def]
    """grad ← (1/|S|) Σ_{n∈S} ρ'(x_nᵀθ, y_n) x_n + Γθ/N,  S = idx[start:stop].

    Two passes over the rows, four rows at a time: first the linear predictors η_k = x_{n_k}ᵀθ
    into ``eta`` (:func:`rows4_dot`; independent row loads overlap in the memory system), then
    the weights w_k = ρ'(η_k) (overwriting ``eta``) and grad += w_k x_k + … + w_{k+3} x_{k+3}
    as one elementwise loop (the loop vectoriser handles it; four rows per load/store of grad),
    while the rows are in L1. ``prior`` is Γ/N: read as ``prior[0, 0]·I`` when ``prior_kind`` = 1,
    dense when 2, ignored when 0.
    """
    d = theta.shape[0]
    nb = stop - start
    linear_predictors(theta, X, idx, start, nb, eta)
    for k in range(nb):
        eta[k] = glm_d1(model, eta[k], y[idx[start + k]], mpar)
    weighted_row_mean(X, idx, start, nb, eta, grad)
    if prior_kind == PRIOR_SCALAR:
        g0 = prior[0, 0]
        for j in range(d):
            grad[j] += g0 * theta[j]
    elif prior_kind == PRIOR_DENSE:
        for i in range(d):
            grad[i] += row_dot(prior, i, theta)


@njit
def minibatch_value_gradient(theta, X, y, idx, nb, model, mpar, eta, grad, want):  # type: ignore[no-untyped-def]
    """grad ← (1/|S|) Σ_{n∈S} ρ'(x_nᵀθ, y_n) x_n (no prior), S = idx[:nb]; returns (1/|S|) Σ ρ(x_nᵀθ, y_n)
    when ``want`` (else 0).

    The same two passes as :func:`minibatch_gradient` (:func:`linear_predictors`, then
    :func:`weighted_row_mean`), with the loss summed from the linear predictors before they are
    overwritten by the weights ρ'.
    """
    linear_predictors(theta, X, idx, 0, nb, eta)
    val = 0.0
    if want and model == LOGISTIC:  # ρ and ρ' share e^{−|η|}: one exp per row instead of two
        for k in range(nb):
            et = eta[k]
            yk = y[idx[k]]
            e = math.exp(-abs(et))
            val += ((et if et > 0.0 else 0.0) + math.log1p(e)) - yk * et
            eta[k] = (1.0 if et >= 0.0 else e) / (1.0 + e) - yk
    else:
        if want:
            for k in range(nb):
                val += glm_rho(model, eta[k], y[idx[k]], mpar)
        for k in range(nb):
            eta[k] = glm_d1(model, eta[k], y[idx[k]], mpar)
    weighted_row_mean(X, idx, 0, nb, eta, grad)
    return val * (1.0 / nb)


@njit
def prior_value(prior_kind, prior, theta):  # type: ignore[no-untyped-def]
    """½ θᵀ(Γ/N)θ with ``prior`` = Γ/N read as in :func:`add_prior` (0 for kind 0)."""
    if prior_kind == PRIOR_SCALAR:
        acc = 0.0
        for j in range(theta.shape[0]):
            acc += theta[j] * theta[j]
        return 0.5 * prior[0, 0] * acc
    if prior_kind == PRIOR_DENSE:
        acc = 0.0
        for i in range(theta.shape[0]):
            acc += theta[i] * row_dot(prior, i, theta)
        return 0.5 * acc
    return 0.0


@njit
def quadratic_gradient(theta, A, mu, model, noise_chol, mpar, st, buf, grad):  # type: ignore[no-untyped-def]
    """grad ← A(θ − μ) + ε, ε ~ N(0, LLᵀ) (model 4) or scale·S_α i.i.d. (model 5)."""
    d = theta.shape[0]
    for j in range(d):
        buf[j] = theta[j] - mu[j]
    for i in range(d):
        grad[i] = row_dot(A, i, buf)
    if model == QUAD_GAUSS:
        fill_normals(st, buf)
        for i in range(d):
            acc = 0.0
            for j in range(i + 1):
                acc += noise_chol[i, j] * buf[j]
            grad[i] += acc
    else:
        alpha = mpar[3]
        scale = mpar[4]
        for i in range(d):
            grad[i] += scale * stable_symmetric(st, alpha)


@njit
def gradient_cost(theta, X, y, idx, model, n_iter):  # type: ignore[no-untyped-def]
    """Evaluate the minibatch gradient on the fixed batch ``idx`` ``n_iter`` times (benchmark helper).

    With a fixed batch the rows stay in L1, so this is the compute part of a step's gradient.
    Returns a checksum so the work cannot be optimised away.
    """
    d = theta.shape[0]
    b = idx.shape[0]
    eta = np.empty(b)
    grad = np.empty(d)
    mpar = np.array([1.0, 1.5, 1.0, 2.0, 0.0])
    prior = np.zeros((1, 1))
    acc = 0.0
    for _ in range(n_iter):
        minibatch_gradient(theta, X, y, idx, 0, b, model, mpar, PRIOR_NONE, prior, eta, grad)
        acc += grad[0]
    return acc


@njit_inline
def add_prior(prior_kind, prior, theta, grad):  # type: ignore[no-untyped-def]
    """grad += Γθ/N with ``prior`` = Γ/N read as ``prior[0, 0]·I`` (kind 1), dense (kind 2), or nothing (0)."""
    if prior_kind == PRIOR_SCALAR:
        g0 = prior[0, 0]
        for j in range(theta.shape[0]):
            grad[j] += g0 * theta[j]
    elif prior_kind == PRIOR_DENSE:
        for i in range(theta.shape[0]):
            grad[i] += row_dot(prior, i, theta)


@component_inline
def glm_grad(theta, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
    """GLM data term (1/|S|) Σ ρ'(x_nᵀθ, y_n) x_n; ints = [model id], floats = ``mpar``, work ≥ B."""
    minibatch_gradient(theta, ora.X, ora.y, idx, 0, nb, ora.ints[0], ora.floats, PRIOR_NONE, ora.prior, work, grad)


@component_inline
def quad_gauss_grad(theta, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
    """A(θ − μ) + L z with A = ``ora.hessian``, μ = ``ora.mean``, L = ``ora.noise_factor`` (LLᵀ = C), work ≥ D."""
    quadratic_gradient(theta, ora.hessian, ora.mean, QUAD_GAUSS, ora.noise_factor, ora.floats, st, work, grad)


@component_inline
def quad_stable_grad(theta, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
    """A(θ − μ) + scale·S_α i.i.d. with A = ``ora.hessian``, μ = ``ora.mean``, floats = [σ², p, c, α, scale],
    work ≥ D."""
    quadratic_gradient(theta, ora.hessian, ora.mean, QUAD_STABLE, ora.noise_factor, ora.floats, st, work, grad)


@component_inline
def glm_value_grad(theta, ora, idx, nb, st, work, grad, want):  # type: ignore[no-untyped-def]
    """:func:`glm_grad` that also returns the minibatch mean loss (1/|S|) Σ ρ(x_nᵀθ, y_n) when ``want``."""
    return minibatch_value_gradient(theta, ora.X, ora.y, idx, nb, ora.ints[0], ora.floats, work, grad, want)


#: gradient component per oracle kind (the MLP's lives in :mod:`sgtune.sampler.mlp`)
GRAD_FNS = {"glm": glm_grad, "quadratic-gaussian": quad_gauss_grad, "quadratic-stable": quad_stable_grad}
