"""SMILE / pSMILE chains on data models, composed like :mod:`sgtune.sampler.kernels`.

Target (THEORY.md §1.1, mean-loss scaling): the tempered posterior
log p_β(θ) = −β (L(θ) + θᵀΓθ/(2N)), the posterior p(θ|𝒟) at β = N. A step of chain c uses one
minibatch S_t for all its gradient evaluations: the minibatch log density
log p_β(θ|S_t) = −β (L_S(θ) + θᵀΓθ/(2N)) with L_S the batch-mean loss, whose gradient is −β G_t
(G_t the minibatch mean-loss gradient of SG(L)D; at β = N, −N G_t is the (N/B)-scaled minibatch
gradient of log p of seed 001, eq. 3). One step of the MCLMC samplers (seed 001, eqs. 1–3,
appendix F.2, as :func:`sgtune.sampler.smile.mn_step`):

    S_t ← batch_fn(…)                                            the step's minibatch
    g, ℓ₀ ← ∇log p_β(θ|S_t), log p_β(θ|S_t)                       gradient evaluation 1 (with the loss)
    pSMILE: EMAs of g → preconditioner p (:func:`~.smile.precond_update`)
    P(b₁ε) Q(ε/2)  ·  g ← ∇log p_β(θ'|S_t)  ·  P(b₂ε) Q(ε/2)       gradient evaluation 2 (no loss)
    g, ℓ₁ ← …                                                    gradient evaluation 3 (with the loss)
    P(b₁ε);  ΔE = ΣΔK − (ℓ₁ − ℓ₀)                                 (eq. 2; sign as in :mod:`~sgtune.sampler.smile`)
    smile/psmile: Algorithm 1 (:func:`~.smile.tuner_update`): reject (θ restored, u zeroed) or
    rescale ε.

ε (``step_size`` of :func:`~sgtune.sampler.driver.run_chains`, a scalar) is the distance θ moves per
step in the preconditioned coordinates (|u| = 1); it does not depend on β. The phases of a step
are the jitted functions :func:`step_begin`, :func:`step_mid`, :func:`step_end`, so the compiled
chain (:func:`smile_chains`, ``prange`` over chains) and the general NumPy path
(:func:`general_phase`, gradients from the model's NumPy code) run the same arithmetic after the
gradient and agree to the rounding of the gradients.

SMILE state ``sm`` = (ε (C,), tune (C, 4) [μ_raw, s²_raw, n, ε], ipre (C, D) = 1/p, gbar (C, D),
gvar (C, D), pcount (C,) int, stats (C, 4) [rejections, Σ ΔE, Σ |ΔE|, Σ ΔE²], step_trace (C, T'),
prev (C, D), scal (C, 2) [ΣΔK of the step, ℓ₀], params) with ``params`` indexed by the ``Q_*``
constants. The velocity u is the state's ``m`` (C, D), drawn uniformly on the sphere by
:func:`init_velocity` from each chain's stream before the first step.
"""
from __future__ import annotations

import math

import numpy as np

from ._jit import njit, njit_parallel, prange
from .grads import add_prior, minibatch_value_gradient, prior_value
from .kernels import _diverges, _finish, _record
from .smile import (MN_A1, MN_B1, MN_B2, momentum_map, position_map, precond_update, random_unit_vector,
                    tuner_update)

__all__ = ["MCLMC_SAMPLERS", "Q_ALPHA", "Q_BETA", "Q_ZK", "Q_ZLO", "Q_ZHI", "Q_DELTA", "Q_TUNE_START",
           "Q_PRE_START", "Q_INV_TEMP", "Q_PRECOND", "Q_TUNED", "N_PARAMS", "to_logp", "init_velocity",
           "step_begin", "step_mid", "step_end", "smile_chains", "general_phase", "value_gradient_cost"]

#: the MCLMC samplers of this module: (preconditioned, tuned)
MCLMC_SAMPLERS: dict[str, tuple[bool, bool]] = {"smile-naive": (False, False), "psmile-naive": (True, False),
                                                "smile": (False, True), "psmile": (True, True)}
(Q_ALPHA, Q_BETA, Q_ZK, Q_ZLO, Q_ZHI, Q_DELTA, Q_TUNE_START, Q_PRE_START, Q_INV_TEMP, Q_PRECOND,
 Q_TUNED) = range(11)
N_PARAMS = 11


@njit
def to_logp(beta, value, grad, prior_kind, prior, th):  # type: ignore[no-untyped-def]
    """Data term G (in ``grad``) and batch-mean loss ``value`` → ∇log p_β (in place) and log p_β."""
    add_prior(prior_kind, prior, th, grad)
    for j in range(th.shape[0]):
        grad[j] *= -beta
    return -beta * (value + prior_value(prior_kind, prior, th))


@njit
def init_velocity(state):  # type: ignore[no-untyped-def]
    """u of every live chain: D normals from its stream, normalised (uniform on the sphere)."""
    theta, mom, rng_state, perm, epoch_pos, diverged, clip_count = state
    for c in range(theta.shape[0]):
        random_unit_vector(rng_state[c], mom[c])


@njit
def step_begin(c, th, u, g, lp0, sm):  # type: ignore[no-untyped-def]
    """After gradient evaluation 1 (g = ∇log p_β(θ|S), lp0 its log density): preconditioner EMAs,
    save θ, P(b₁ε), Q(ε/2)."""
    step, tune, ipre, gbar, gvar, pcount, stats, step_trace, prev, scal, params = sm
    d = th.shape[0]
    if params[Q_PRECOND] != 0.0:
        pcount[c] = precond_update(gbar[c], gvar[c], pcount[c], g, params[Q_ALPHA], ipre[c], params[Q_PRE_START])
    p = ipre[c]
    for i in range(d):
        prev[c, i] = th[i]
    h = step[c]
    scal[c, 0] = momentum_map(u, g, p, MN_B1 * h, d)
    scal[c, 1] = lp0
    position_map(th, u, p, MN_A1 * h)


@njit
def step_mid(c, th, u, g, sm):  # type: ignore[no-untyped-def]
    """After gradient evaluation 2 (at the half step): P(b₂ε), Q(ε/2)."""
    step, tune, ipre, gbar, gvar, pcount, stats, step_trace, prev, scal, params = sm
    h = step[c]
    scal[c, 0] += momentum_map(u, g, ipre[c], MN_B2 * h, th.shape[0])
    position_map(th, u, ipre[c], MN_A1 * h)


@njit
def step_end(c, th, u, g, lp1, sm):  # type: ignore[no-untyped-def]
    """After gradient evaluation 3: P(b₁ε), ΔE, the tuner (reject: θ restored, u zeroed) and the
    statistics. Returns ΔE."""
    step, tune, ipre, gbar, gvar, pcount, stats, step_trace, prev, scal, params = sm
    d = th.shape[0]
    h = step[c]
    dk = scal[c, 0] + momentum_map(u, g, ipre[c], MN_B1 * h, d)
    de = dk - (lp1 - scal[c, 1])
    if params[Q_TUNED] != 0.0:
        tune[c, 3] = h
        rej = tuner_update(tune[c], abs(de), params[Q_ZK], params[Q_ZLO], params[Q_ZHI], params[Q_BETA],
                           params[Q_DELTA], params[Q_TUNE_START])
        if rej or _diverges(th):
            stats[c, 0] += 1.0
            for i in range(d):
                th[i] = prev[c, i]
                u[i] = 0.0
        step[c] = tune[c, 3]
    if math.isfinite(de):
        stats[c, 1] += de
        stats[c, 2] += abs(de)
        stats[c, 3] += de * de
    return de


@njit
def _record_step(c, u_, sm, thin):  # type: ignore[no-untyped-def]
    """ε into the step-size trace every ``thin`` draws after burn-in (as the θ trace)."""
    step_trace = sm[7]
    if thin > 0 and u_ % thin == 0:
        k = u_ // thin - 1
        if k < step_trace.shape[1]:
            step_trace[c, k] = sm[0][c]


@njit
def _eval(value_grad_fn, th, X, y, idx, nb, ints, floats, mat, st, wk, g, want, beta, prior_kind, prior):  # type: ignore[no-untyped-def]
    value = value_grad_fn(th, X, y, idx, nb, ints, floats, mat, st, wk, g, want)
    return to_logp(beta, value, g, prior_kind, prior, th)


@njit
def _smile_chain(batch_fn, value_grad_fn, c, state, t0, n_steps, burn_in, oracle, batch_size, sm, out):  # type: ignore[no-untyped-def]
    theta, mom, rng_state, perm, epoch_pos, diverged, clip_count = state
    X, y, ints, floats, mat, prior_kind, prior, work_len = oracle
    if diverged[c] >= 0:
        return
    params = sm[10]
    beta = params[Q_INV_TEMP]
    thin = out[7]
    d = theta.shape[1]
    st = rng_state[c]
    th = theta[c]
    u = mom[c]
    pm = perm[c]
    wk = np.empty(max(work_len, 1))
    g = np.empty(d)
    buf = np.empty(d)
    idx = np.empty(max(batch_size, 1), dtype=np.int64)
    n_data = X.shape[0]
    pos = epoch_pos[c]
    for t in range(t0 + 1, t0 + n_steps + 1):
        nb, pos = batch_fn(st, pm, n_data, batch_size, pos, idx)
        lp = _eval(value_grad_fn, th, X, y, idx, nb, ints, floats, mat, st, wk, g, True, beta, prior_kind, prior)
        step_begin(c, th, u, g, lp, sm)
        _eval(value_grad_fn, th, X, y, idx, nb, ints, floats, mat, st, wk, g, False, beta, prior_kind, prior)
        step_mid(c, th, u, g, sm)
        lp = _eval(value_grad_fn, th, X, y, idx, nb, ints, floats, mat, st, wk, g, True, beta, prior_kind, prior)
        step_end(c, th, u, g, lp, sm)
        if _diverges(th):
            diverged[c] = t
            break
        if t > burn_in:
            _record(c, t - burn_in, th, pos, out, buf)
            _record_step(c, t - burn_in, sm, thin)
    _finish(c, out, diverged, buf)
    epoch_pos[c] = pos


@njit_parallel
def smile_chains(batch_fn, value_grad_fn, state, t0, n_steps, burn_in, oracle, batch_size, sm, out):  # type: ignore[no-untyped-def]
    """Advance C MCLMC chains by ``n_steps`` steps (module docstring); arrays updated in place."""
    for c in prange(state[0].shape[0]):
        _smile_chain(batch_fn, value_grad_fn, c, state, t0, n_steps, burn_in, oracle, batch_size, sm, out)


@njit
def general_phase(phase, state, t, burn_in, grads, values, prior_kind, prior, sm, out):  # type: ignore[no-untyped-def]
    """Phase 0/1/2 (begin/mid/end) of step t for every live chain, given the NumPy data gradients
    ``grads[c]`` (overwritten) and batch-mean losses ``values[c]`` of the current positions; phase 2
    also checks divergence and records the outputs (the same code as :func:`!_smile_chain`)."""
    theta, mom, rng_state, perm, epoch_pos, diverged, clip_count = state
    beta = sm[10][Q_INV_TEMP]
    thin = out[7]
    buf = np.empty(theta.shape[1])
    for c in range(theta.shape[0]):
        if diverged[c] >= 0:
            continue
        th = theta[c]
        g = grads[c]
        lp = to_logp(beta, values[c], g, prior_kind, prior, th)
        if phase == 0:
            step_begin(c, th, mom[c], g, lp, sm)
        elif phase == 1:
            step_mid(c, th, mom[c], g, sm)
        else:
            step_end(c, th, mom[c], g, lp, sm)
            if _diverges(th):
                diverged[c] = t
                continue
            if t > burn_in:
                _record(c, t - burn_in, th, epoch_pos[c], out, buf)
                _record_step(c, t - burn_in, sm, thin)
            _finish(c, out, diverged, buf)


@njit
def value_gradient_cost(theta, X, y, idx, model, n_iter, want):  # type: ignore[no-untyped-def]
    """Evaluate the GLM minibatch gradient (and the loss when ``want``) on the fixed batch ``idx`` ``n_iter``
    times (benchmark helper, as :func:`!sgtune.sampler.grads.gradient_cost`); returns a checksum."""
    b = idx.shape[0]
    eta = np.empty(b)
    grad = np.empty(theta.shape[0])
    mpar = np.array([1.0, 1.5, 1.0, 2.0, 0.0])
    acc = 0.0
    for _ in range(n_iter):
        acc += minibatch_value_gradient(theta, X, y, idx, b, model, mpar, eta, grad, want) + grad[0]
    return acc
