"""The step rule of the SMILE samplers on data models (a component of :mod:`sgtune.sampler.engine`).

Target (mean-loss scaling, Wang, Ding & Huggins 2026, §2.1): the tempered posterior
log p_β(θ) = −β (L(θ) + θᵀΓθ/(2N)), the posterior p(θ|𝒟) at β = N. A step of chain c uses one
minibatch S_t for all its gradient evaluations: the minibatch log density
log p_β(θ|S_t) = −β (L_S(θ) + θᵀΓθ/(2N)) with L_S the batch-mean loss, whose gradient is −β G_t
(G_t the minibatch mean-loss gradient of SG(L)D; at β = N, −N G_t is the (N/B)-scaled minibatch
gradient of log p of the SMILE paper, anonymous, 2025, eq. 3). One step of the MCLMC samplers
(the SMILE paper, eqs. 1–3, appendix F.2, as :func:`sgtune.sampler.smile.mn_step`; :func:`mclmc_rule`):

    S_t ← batch(…)                                               the step's minibatch
    g, ℓ₀ ← ∇log p_β(θ|S_t), log p_β(θ|S_t)                       gradient evaluation 1 (with the loss)
    pSMILE: EMAs of g → preconditioner p (:func:`~sgtune.sampler.smile.precond_update`)
    P(b₁ε) Q(ε/2)  ·  g ← ∇log p_β(θ'|S_t)  ·  P(b₂ε) Q(ε/2)       gradient evaluation 2 (no loss)
    g, ℓ₁ ← …                                                    gradient evaluation 3 (with the loss)
    P(b₁ε);  ΔE = ΣΔK − (ℓ₁ − ℓ₀)                                 (eq. 2; sign as in :mod:`sgtune.sampler.smile`)
    smile/psmile: the guardrail of Algorithm 1 (reject: θ restored, u zeroed) and the step-size rule —
    anchored (:func:`~sgtune.sampler.smile.anchored_update`, the default) or the paper's eq. (7)
    (:func:`~sgtune.sampler.smile.tuner_update`).

ε (the scalar ``Dynamics.step`` of :func:`~sgtune.sampler.driver.run_chains`) is the distance θ moves per
step in the preconditioned coordinates (|u| = 1); it does not depend on β. The phases of a step
are the jitted functions :func:`step_begin`, :func:`step_mid`, :func:`step_end`, so the compiled
engine (:func:`mclmc_rule` in ``sgtune.sampler.engine._chains``) and the general NumPy path
(:func:`general_phase`, gradients from the model's NumPy code) run the same arithmetic after the
gradient and agree to the rounding of the gradients.

SMILE state: an :class:`~sgtune.sampler.state.MclmcState` record ``mc`` (ε ``step`` (C,), ``tune`` (C, 10)
[μ_raw, s²_raw, n, ε, the noise estimates], ``ipre`` (C, D) = 1/p, ``gbar``, ``gvar`` (C, D), ``pcount`` (C,) int,
``stats`` (C, 4) [rejections, Σ ΔE, Σ |ΔE|, Σ ΔE²], ``prev`` (C, D) θ at the step's start, ``noise_hist`` (C, 3D or 0)
the noise term's history, the step's ΣΔK ``step_dk`` and ℓ₀ ``step_logp`` (C,), the refresh's path statistics
``path_n``, ``path_mean``, ``path_m2``) with the fixed settings ``mc.params``, a :class:`~sgtune.sampler.state.TunerParams` record. The velocity u is the
state's ``mom`` (C, D), drawn uniformly on the sphere by :func:`init_velocity` from each chain's
stream before the first step. :func:`mclmc_rule` is the engine's step rule
(:mod:`sgtune.sampler.engine`); :func:`general_phase` the general path's.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

import numba

from ._jit import call_value_grad, component, component_inline, njit, njit_inline
from .grads import PRIOR_NONE, add_prior, minibatch_value_gradient, prior_value
from .kernels import BATCH_FNS, borrowed, data_gradient, diverges, finish, record, sghmc_rule
from .rng import chain_states, fill_normals
from .smile import (MN_A1, MN_B1, MN_B2, anchored_update, momentum_map, noise_excess, noise_keep, noise_length,
                    noise_update,
                    noise_work_var, partial_refresh, path_length, path_update, position_map, precond_update,
                    random_unit_vector, sgld_step, tuner_update)
from .state import (LAM_DIAG, REFRESH_AUTO, REFRESH_OFF, STAT_ABS_DE_SUM, STAT_DE_SQ_SUM, STAT_DE_SUM, STAT_REJECTIONS, ChainPlan, Schedule, TunerParams,
                    chain_state, mclmc_state, oracle, recorder, step_params)
from .targets import draw_step_noise, noisy_logp_grad, target_grad, target_value_grad

__all__ = ["to_logp", "init_velocity", "step_begin", "step_mid", "step_end", "mclmc_rule", "mclmc_target_rule",
           "sgld_target_rule", "general_phase", "value_gradient_cost", "target_plan", "refresh_report",
           "refresh_length_in_use"]


@njit_inline
def to_logp(beta, value, grad, prior_kind, prior, th):  # type: ignore[no-untyped-def]
    """Data term G (in ``grad``) and batch-mean loss ``value`` → ∇log p_β (in place) and log p_β."""
    add_prior(prior_kind, prior, th, grad)
    for j in range(th.shape[0]):
        grad[j] *= -beta
    pv = 0.0  # prior_value's own 0.0 for no prior, without the call (three a step)
    if prior_kind != PRIOR_NONE:
        pv = prior_value(prior_kind, prior, th)
    return -beta * (value + pv)


@njit
def init_velocity(state):  # type: ignore[no-untyped-def]
    """u of every live chain: D normals from its stream, normalised (uniform on the sphere)."""
    for c in range(state.theta.shape[0]):
        random_unit_vector(state.rng[c], state.mom[c])


@njit_inline
def _noise_on(params):  # type: ignore[no-untyped-def]
    """``state.noise_estimated`` in the compiled rules: the noise term, or the refresh (the noise bias's prediction and
    cap)."""
    return params.noise_weight > 0.0 or params.refresh != REFRESH_OFF


@njit_inline
def refresh_length_in_use(params, tune, path_n, path_m2, ipre, h, d):  # type: ignore[no-untyped-def]
    """The velocity refresh's decoherence length for a step of size h, and whether the noise-bias cap set it: the
    fixed length or :func:`~sgtune.sampler.smile.path_length` of the path so far (0 before its 100th position),
    shortened to the cap's L_τ (:func:`~sgtune.sampler.smile.noise_length`) where that is shorter or there is no
    length yet (∞: no refresh). One chain's ``tune``, path statistics and ``ipre``; ``refresh`` and
    :func:`refresh_report` both use it."""
    length = params.refresh_length
    if params.refresh == REFRESH_AUTO:
        length = path_length(path_n, path_m2, ipre)
    cap = math.inf
    if params.noise_bias > 0.0 and params.refresh != REFRESH_OFF:
        cap = noise_length(tune, h, d, params.noise_bias)
    if cap < length or not length > 0.0:
        return cap, cap < math.inf
    return length, False


@njit_inline
def step_begin(c, th, u, g, lp0, mc):  # type: ignore[no-untyped-def]
    """After gradient evaluation 1 (g = ∇log p_β(θ|S), lp0 its log density): preconditioner EMAs,
    save θ, P(b₁ε), Q(ε/2)."""
    params = mc.params
    d = th.shape[0]
    if params.precond != 0.0:
        mc.pcount[c] = precond_update(mc.gbar[c], mc.gvar[c], mc.pcount[c], g, params.alpha, mc.ipre[c],
                                      params.pre_start)
    p = mc.ipre[c]
    if _noise_on(params):
        noise_update(mc.tune[c], mc.noise_hist[c], g, p)
    for i in range(d):
        mc.prev[c, i] = th[i]
    h = mc.step[c]
    mc.step_dk[c] = momentum_map(u, g, p, MN_B1 * h, d)
    mc.step_logp[c] = lp0
    position_map(th, u, p, MN_A1 * h)


@njit_inline
def step_mid(c, th, u, g, mc):  # type: ignore[no-untyped-def]
    """After gradient evaluation 2 (at the half step): P(b₂ε), Q(ε/2)."""
    h = mc.step[c]
    mc.step_dk[c] += momentum_map(u, g, mc.ipre[c], MN_B2 * h, th.shape[0])
    position_map(th, u, mc.ipre[c], MN_A1 * h)


@njit_inline
def step_end(c, th, u, g, lp1, mc):  # type: ignore[no-untyped-def]
    """After gradient evaluation 3: P(b₁ε), ΔE, the tuner (reject: θ restored, u zeroed) and the
    statistics. Returns ΔE."""
    params = mc.params
    tune = mc.tune
    stats = mc.stats
    d = th.shape[0]
    h = mc.step[c]
    dk = mc.step_dk[c] + momentum_map(u, g, mc.ipre[c], MN_B1 * h, d)
    de = dk - (lp1 - mc.step_logp[c])
    if params.tuned != 0.0:
        tune[c, 3] = h
        if params.mode == 0.0:
            rej = tuner_update(tune[c], abs(de), params.zk, params.zlo, params.zhi, params.beta, params.delta,
                               params.tune_start)
        else:
            rho = 0.0
            if params.noise_weight > 0.0:
                rho = params.noise_weight * noise_work_var(tune[c], h, d) / params.anchor
            rej = anchored_update(tune[c], abs(de), d, params.zk, params.beta, params.tune_start, params.anchor,
                                  params.gain, params.clip, rho, params.floor)
        if rej or diverges(th):
            stats[c, STAT_REJECTIONS] += 1.0
            for i in range(d):
                th[i] = mc.prev[c, i]
                u[i] = 0.0
            rej = True
        mc.step[c] = tune[c, 3]
        if _noise_on(params):
            noise_keep(tune[c], mc.noise_hist[c], g, rej)
    elif _noise_on(params):
        noise_keep(tune[c], mc.noise_hist[c], g, False)
    if math.isfinite(de):
        stats[c, STAT_DE_SUM] += de
        stats[c, STAT_ABS_DE_SUM] += abs(de)
        stats[c, STAT_DE_SQ_SUM] += de * de
    return de


@njit_inline
def refresh(c, th, u, st, z, mc, h, rejected):  # type: ignore[no-untyped-def]
    """After the step (and the tuner): the path's statistics, and the velocity's partial refresh of decoherence
    length L (fixed, or :func:`~sgtune.sampler.smile.path_length` of the path so far; with the noise-bias cap, no
    longer than :func:`~sgtune.sampler.smile.noise_length`) for the step of size ``h`` just taken; none after a rejected step, whose velocity restarts from rest (:func:`~sgtune.sampler.smile.partial_refresh`,
    normals from stream ``st`` into ``z``)."""
    params = mc.params
    if params.refresh == REFRESH_AUTO:
        mc.path_n[c] = path_update(mc.path_n[c], mc.path_mean[c], mc.path_m2[c], th)
    length, _ = refresh_length_in_use(params, mc.tune[c], mc.path_n[c], mc.path_m2[c], mc.ipre[c], h, th.shape[0])
    if rejected or not (length > 0.0 and length < math.inf):
        return
    fill_normals(st, z)
    partial_refresh(u, z, h, length)


@njit_inline
def end_and_refresh(c, th, u, st, g, z, lp1, mc):  # type: ignore[no-untyped-def]
    """:func:`step_end` (gradient evaluation 3: gradient ``g``, log density ``lp1``), then the velocity's
    :func:`refresh` for the step just taken (normals from stream ``st`` into ``z``), when it is on; the end of every
    MCLMC step (the engine's rules and the general path)."""
    h = mc.step[c]
    rejected = mc.stats[c, STAT_REJECTIONS]
    step_end(c, th, u, g, lp1, mc)
    if mc.params.refresh != REFRESH_OFF:
        refresh(c, th, u, st, z, mc, h, mc.stats[c, STAT_REJECTIONS] != rejected)


@njit_inline
def _eval(value_grad, th, ora, st, nb, w, want, beta):  # type: ignore[no-untyped-def]
    value = call_value_grad(value_grad, th, ora, w.idx, nb, st, w.wk, w.grad, want)
    return to_logp(beta, value, w.grad, ora.prior_kind, ora.prior, th)


@njit_inline
def _mclmc_step(value_grad, c, th, u, st, nb, ora, mc, w):  # type: ignore[no-untyped-def]
    beta = mc.params.inv_temp
    lp = _eval(value_grad, th, ora, st, nb, w, True, beta)
    step_begin(c, th, u, w.grad, lp, mc)
    _eval(value_grad, th, ora, st, nb, w, False, beta)
    step_mid(c, th, u, w.grad, mc)
    lp = _eval(value_grad, th, ora, st, nb, w, True, beta)
    end_and_refresh(c, th, u, st, w.grad, w.xi, lp, mc)


# not inlined into the loop (unlike the SG(L)D rules): its body is large, and inlined it made every SMILE
# specialisation of the loop compile ≈ 1.5× longer (cold) for ≤ 3 % of a step. Called, it works on views of its
# arguments that own nothing (``kernels.borrowed``, as ``engine._chain``'s loop does): numba increments and
# decrements the owner of every array of every record at each inlined helper, ≈ 230 calls of NRT_incref/decref a
# step here (on null owners: no atomics, but the calls), which the views let LLVM delete
@component
def mclmc_rule(value_grad, c, th, u, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    """One MCLMC step of chain c on the batch ``w.idx[:nb]`` (the engine's rule signature, ``value_grad`` the name of
    a value-and-gradient oracle; module docstring)."""
    numba.literally(value_grad)
    _mclmc_step(value_grad, c, borrowed(th), borrowed(u), borrowed(st), nb, borrowed(ora), borrowed(mc),
                borrowed(w))
    return 0


@njit_inline
def _eval_target(th, ora, w, beta):  # type: ignore[no-untyped-def]
    """log p_β and ∇log p_β (into ``w.grad``) of the analytic target on the step's noise: ``_eval`` of
    :func:`sgtune.sampler.targets.target_value_grad` without its two passes over the gradient (the oracle's
    negation to a loss, ``to_logp``'s multiplication by −β) when β = 1 and there is no prior: (−g)·(−1) = g and
    −1·(−ℓ + 0) = ℓ exactly (ℓ ≠ 0). The passes lay on the step's dependency chain (store, reload, per gradient)."""
    d = th.shape[0]
    g = w.grad
    lp = noisy_logp_grad(ora.ints[0], ora.hessian, ora.floats[0], ora.floats[1], w.wk[d:2 * d], th, g)
    if beta == 1.0 and ora.prior_kind == PRIOR_NONE:
        return lp
    for j in range(d):
        g[j] = -g[j]
    return to_logp(beta, -lp, g, ora.prior_kind, ora.prior, th)


@component
def mclmc_target_rule(value_grad, c, th, u, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    """One MCLMC step on an analytic target: the step's noise drawn first, then the three gradients on it
    (:func:`sgtune.sampler.targets.target_value_grad`, evaluated as ``_eval_target``; the phases as in
    :func:`mclmc_rule`)."""
    numba.literally(value_grad)
    st = borrowed(st)
    ora = borrowed(ora)
    w = borrowed(w)
    th = borrowed(th)
    u = borrowed(u)
    mc = borrowed(mc)
    draw_step_noise(st, ora.noise_factor, w.wk, th.shape[0])
    beta = mc.params.inv_temp
    lp = _eval_target(th, ora, w, beta)
    step_begin(c, th, u, w.grad, lp, mc)
    _eval_target(th, ora, w, beta)
    step_mid(c, th, u, w.grad, mc)
    lp = _eval_target(th, ora, w, beta)
    end_and_refresh(c, th, u, st, w.grad, w.xi, lp, mc)
    return 0


@component_inline
def sgld_target_rule(grad, c, th, m, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    """The SMILE paper's SGLD baseline on an analytic target, θ ← θ + h g + √(2h) η with g = ∇log p_ξ(θ)
    (:func:`sgtune.sampler.smile.sgld_step`, h = s · ``p.step``; the oracle draws the step's noise)."""
    data_gradient(grad, th, ora, st, nb, w)
    buf = w.buf
    g = w.grad
    for j in range(th.shape[0]):
        buf[j] = -g[j]
    fill_normals(st, w.xi)
    sgld_step(th, buf, w.xi, s * p.step)
    return 0


@njit
def general_phase(phase, state, t, burn_in, grads, values, ora, mc, rec):  # type: ignore[no-untyped-def]
    """Phase 0/1/2 (begin/mid/end) of step t for every live chain, given the NumPy data gradients
    ``grads[c]`` (overwritten) and batch-mean losses ``values[c]`` of the current positions; phase 2
    also checks divergence and records the outputs (the same code as the engine's loop)."""
    theta = state.theta
    diverged = state.diverged
    beta = mc.params.inv_temp
    buf = np.empty(theta.shape[1])
    for c in range(theta.shape[0]):
        if diverged[c] >= 0:
            continue
        th = theta[c]
        g = grads[c]
        lp = to_logp(beta, values[c], g, ora.prior_kind, ora.prior, th)
        if phase == 0:
            step_begin(c, th, state.mom[c], g, lp, mc)
        elif phase == 1:
            step_mid(c, th, state.mom[c], g, mc)
        else:
            end_and_refresh(c, th, state.mom[c], state.rng[c], g, buf, lp, mc)
            # the step's tail as in engine._chain, written out there and in kernels.advance (why: engine._chain)
            if diverges(th):
                diverged[c] = t
                continue
            if t > burn_in:
                record(c, t - burn_in, th, state.epoch_pos[c], rec, mc, buf)
            finish(c, rec, diverged, buf)


@njit
def value_gradient_cost(theta, X, y, idx, model, n_iter, want):  # type: ignore[no-untyped-def]
    """Evaluate the GLM minibatch gradient (and the loss when ``want``) on the fixed batch ``idx`` ``n_iter``
    times (benchmark helper, as ``sgtune.sampler.grads.gradient_cost``); returns a checksum."""
    b = idx.shape[0]
    eta = np.empty(b)
    grad = np.empty(theta.shape[0])
    mpar = np.array([1.0, 1.5, 1.0, 2.0, 0.0])
    acc = 0.0
    for _ in range(n_iter):
        acc += minibatch_value_gradient(theta, X, y, idx, b, model, mpar, eta, grad, want) + grad[0]
    return acc


def refresh_report(mc: Any, d: int) -> dict[str, Any]:
    """The SMILE samplers' velocity refresh at the end of a run, per chain (plain Python on the state's arrays).

    Parameters
    ----------
    mc : MclmcState
        The chains' SMILE state after the run.
    d : int
        D.

    Returns
    -------
    dict
        ``refresh_length_final`` (the length in use, as ``refresh`` computes it), ``noise_bias_predicted``
        (:func:`~sgtune.sampler.smile.noise_excess` at the final ε and length) and, with the noise-bias cap,
        ``refresh_capped``; empty without the refresh.
    """
    p = mc.params
    if p.refresh == REFRESH_OFF:
        return {}
    lengths, capped, excess = [], [], []
    for c in range(mc.step.shape[0]):
        h = float(mc.step[c])
        length, cap = refresh_length_in_use(p, mc.tune[c], float(mc.path_n[c]), mc.path_m2[c], mc.ipre[c], h, d)
        lengths.append(float(length))
        capped.append(bool(cap))
        excess.append(float(noise_excess(mc.tune[c], h, lengths[-1], d)))
    out: dict[str, Any] = {"refresh_length_final": np.array(lengths), "noise_bias_predicted": np.array(excess)}
    if p.noise_bias > 0.0:
        out["refresh_capped"] = np.array(capped)
    return out


# --------------------------------------------------------------------------- the SMILE paper's analytic targets
def target_plan(target: Any, sampler: str, tuner: TunerParams, step: float, run: Any, n_trace: int,
                x0: np.ndarray) -> ChainPlan:
    """The engine's plan of an ensemble on an analytic target (:func:`sgtune.sampler.smile_ensemble.run_smile_ensemble`).

    The oracle is :func:`~sgtune.sampler.targets.target_value_grad` (MCLMC: :func:`mclmc_target_rule` draws the
    step's noise, then three gradients on it) or :func:`~sgtune.sampler.targets.target_grad` (SGLD:
    :func:`sgld_target_rule`; SGHMC: :func:`~sgtune.sampler.kernels.sghmc_rule` with β = 1), with no data
    (batching ``none``); ``run`` (a :class:`~sgtune.core.config.RunSpec`) gives the steps, chains, burn-in,
    ``thin`` and seed. The MCLMC velocities are drawn by the backend's ``prepare`` (``init_fn`` =
    :func:`init_velocity`), before the first step. Every step is recorded (the engine's burn-in is 0): the
    trace, the step-size trace and Σ ΔE every ``thin`` steps, counting steps from the first; Σθ and Σθ²
    (the recorder's ``theta_sum``, ``theta_sq_sum``) only after the run's burn-in, which is the plan's
    ``split``: its ``burn_recorder`` shares the trace arrays and has no sums.
    """
    n_chains, thin, seed = run.n_chains, run.thin, int(run.seed)
    C, d = n_chains, target.dim
    mclmc = sampler not in ("sgld", "sghmc")
    state = chain_state(np.tile(x0, (C, 1)), chain_states(seed, C))
    ora = oracle(hessian=target.precision, ints=np.array([target.target_id], dtype=np.int64),
                 floats=np.array([float(target.q), float(target.spatial_sd)]), noise_factor=target.noise_chol,
                 work_len=2 * d)
    params_ = step_params(lam=np.zeros((d, d)), fac=np.zeros((d, d)), friction=float(tuner.friction), step=float(step))
    rule = {"sgld": sgld_target_rule, "sghmc": sghmc_rule}.get(sampler, mclmc_target_rule)
    # the trace arrays are shared by both recorders; Σθ, Σθ² only after burn-in
    burn = recorder(C, d, thin=int(thin), n_trace=n_trace, step_trace=True, energy_trace=True)._replace(flush=True)
    kept_rec = burn._replace(theta_sum=np.zeros((C, d)), theta_sq_sum=np.zeros((C, d)))
    return ChainPlan(sampler=sampler, lam_kind=LAM_DIAG, batching="none", oracle_kind="analytic-target",
                     batch_fn=BATCH_FNS["none"], grad_fn=target_value_grad if mclmc else target_grad, rule_fn=rule,
                     move_fn=None, state=state, oracle=ora, sched=Schedule(batch_size=0, decay=0.0), params=params_,
                     mclmc=mclmc_state(C, d, step, tuner), recorder=lambda last: kept_rec, burn_in=0,
                     n_steps=int(run.n_steps), is_mclmc=mclmc, split=int(run.burn_in_steps), burn_recorder=burn,
                     init_fn=init_velocity if mclmc else None)
