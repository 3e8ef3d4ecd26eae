"""SG-MCMC chains composed from three jitted components: a batch schedule, a gradient, an update step.

A run is one call of :func:`chains` (``prange`` over C chains, each with its own xoshiro256++
stream from :mod:`sgtune.sampler.rng`), which advances every chain by ``n_steps`` steps from
step ``t0`` (so the driver can run in chunks and report progress). All state lives in arrays
passed in and updated in place; the step loop allocates nothing. One step of chain c is

    nb, pos ← batch_fn(st, perm, N, B, pos, idx)                 (a) which data points
    grad_fn(θ, X, y, idx, nb, ints, floats, mat, st, work, G)     (b) data term of G_t(θ_{t−1})
    G += Γθ/N                                                     (prior, :func:`~.grads.add_prior`)
    clips += step_fn(θ, m, G, st, s_t, sqrt(s_t), hp, Λ, L, diag Λ, diag L, ξ, buf)   (c) update

then the divergence check and the streaming outputs (below). The three functions are numba
first-class function arguments: :func:`chains` is compiled once per combination actually used
(numba specialises on each function's type, and LLVM inlines them as before), and cached on
disk because every component is declared with :func:`~sgtune.sampler._jit.component` (a stable
identity for the cache index; see :mod:`sgtune.sampler._jit`).

How to add a piece (no new branch in :func:`!_chain`):

- a sampler: write ``@component def my_step(th, m, grad, st, s, rs, hp, lam, fac, ld, fd, xi, buf)``
  that updates θ (and its auxiliary state m, length D) in place and returns the number of
  clipped coordinates; ``hp`` is the float vector of the sampler's hyper-parameters (built in
  :func:`!sgtune.sampler.driver.step_factors`: [κ, inject] today), ``xi``/``buf`` are scratch
  vectors of length D. Register it in :data:`STEP_FNS` under (name, Λ kind) and add the
  name's validation in the driver (and a branch in the Python twin).
- a model: write ``@component def my_grad(theta, X, y, idx, nb, ints, floats, mat, st, work, grad)``
  (:mod:`sgtune.sampler.grads`) and register it with its work-buffer size in
  :data:`sgtune.sampler.specs.ORACLES`; a model object reaches it through
  ``numba_spec(n_features) -> (kind, ints, floats)`` (:func:`sgtune.sampler.specs.numba_spec_of`).
- a batch schedule: ``@component def my_batches(st, perm, n_data, batch_size, pos, idx) -> (nb, pos)``
  in :data:`BATCH_FNS`.

Update rules (θ ∈ R^D, step t = 1, 2, …, gradient G_t, schedule factor s_t = t^{−γ} =
(1+k)^{−γ} with k = t − 1 the 0-based iteration, γ = 0 by default):

- ``sgld`` (seed 003, §2.1 and eq. B.1): m ← κm + G_t;  θ ← θ − s_t Λ m + sqrt(s_t) L ξ,
  LLᵀ = 2Λ/β (Cholesky for dense Λ, sqrt of the diagonal otherwise), ξ ~ N(0, I).
  β = ∞ (no injected noise) is SGD; κ = 0 is plain SG(L)D. Components
  :func:`sgld_diag_step` and :func:`sgld_dense_step`.
- ``sglrw`` (seed 000, eqs. 11–12, in the mean-loss scaling): coordinate i moves by
  ±r_i, r_i = sqrt(2 s_t Λ_ii/β), with P(+r_i) = ½ − s_t Λ_ii m_i / (2 r_i) clipped to
  [0, 1] (clips counted). With Λ = λI and β = N this is seed 000's SGLRW with δ = λ/N.
- ``clipped-sgld`` (seed 000, eq. 18): θ_i ← θ_i − clip(s_t Λ_ii m_i; ±r_i) + r_i ξ_i
  (componentwise clip, clips counted).

Batching (:data:`BATCH_FNS`): ``replacement`` (B uniform indices), ``without-replacement``
(a partial Fisher–Yates shuffle of the chain's permutation per step: a uniform B-subset),
``reshuffle`` (a fresh Fisher–Yates permutation per chain at the start of every epoch, then
batches perm[kB:(k+1)B], k = 0..R−1, R = ceil(N/B); the last batch is smaller when B does
not divide N), and ``none`` (oracles without data, e.g. the quadratic ones).

Outputs accumulated after burn-in (t > burn_in), u = t − burn_in (:func:`!_record`):
mean and (upper-triangle) centred sum of squares M2 per chain and segment
(segment = min((u−1) // seg_len, S−1), used for batch-means standard errors), accumulated
in blocks: the states are collected in ``blk`` (C, K, D) (``blk_n[c]`` = [pending count,
segment]) and merged by :func:`!_flush_block` when K are pending, when the segment changes,
and at the end of a call with ``flush`` true (the driver's last call) — so the result does
not depend on how the run is split into calls; thinned trace (every ``thin`` steps), sums of linear observables ℓ_kᵀθ, and for
reshuffling per-epoch-position Welford mean and variance (position = number of batches of
the current epoch already used, 0..R−1). A chain whose state becomes non-finite (or
‖θ‖₁ > 1e150) stops; ``diverged[c]`` records the step (−1 if it never diverged).

Argument groups (tuples, so a new component does not change :func:`chains`' signature):
``state`` = (θ (C, D), m (C, D), rng (C, 4), perm (C, N'), epoch_pos (C,), diverged (C,),
clip_count (C,)); ``oracle`` = (X, y, ints, floats, mat, prior_kind, prior, W) with W the gradient's work length
(each chain allocates its scratch vectors once per call, never in the step loop);
``sched`` = (B, γ); ``upd`` = (Λ, L, hp); ``out`` = (seg_len, acc_n, acc_mean, acc_m2, blk,
blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2, obs, obs_sum).

:func:`draw_batches` and :func:`advance` run the parts of a step around the gradient for all
chains at once: the general (NumPy) path for models without a numba spec
(:mod:`sgtune.sampler.general`) uses them, so it shares the random streams, update rules and
outputs with the compiled chains.
"""
from __future__ import annotations

import math

import numpy as np

from ._jit import component, njit, njit_parallel, prange
from .grads import add_prior, row_dot
from .rng import fill_normals, fill_randbelow, randbelow, uniform
from .smile import sghmc_step

__all__ = ["SAMPLERS", "BATCHINGS", "BATCH_FNS", "STEP_FNS", "LAM_DIAG", "LAM_DENSE", "COV_BLOCK", "chains",
           "draw_batches", "advance", "batch_schedule", "step_fn_for", "sgld_diag_step", "sgld_dense_step",
           "sglrw_step", "clipped_sgld_step", "sghmc_data_step"]

SAMPLERS = ("sgld", "sglrw", "clipped-sgld", "sghmc")
BATCHINGS = ("replacement", "without-replacement", "reshuffle")
LAM_DIAG, LAM_DENSE = 1, 2
#: states per covariance block (K of ``blk``); 32 × D doubles stay in L1 for D ≤ 100
COV_BLOCK = 32
DIVERGENCE_BOUND = 1e150


@component
def batch_replacement(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """B indices drawn independently and uniformly."""
    fill_randbelow(st, n_data, idx, batch_size)
    return batch_size, pos


@component
def batch_without_replacement(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """A uniform B-subset: a partial Fisher–Yates shuffle of the chain's permutation."""
    for k in range(batch_size):
        j = k + randbelow(st, n_data - k)
        tmp = perm[k]
        perm[k] = perm[j]
        perm[j] = tmp
        idx[k] = perm[k]
    return batch_size, pos


@component
def batch_reshuffle(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """Random reshuffling: a fresh permutation at epoch position 0, then consecutive blocks."""
    n_batches = (n_data + batch_size - 1) // batch_size
    if pos == 0:
        for i in range(n_data - 1, 0, -1):
            j = randbelow(st, i + 1)
            tmp = perm[i]
            perm[i] = perm[j]
            perm[j] = tmp
    start = pos * batch_size
    stop = min(start + batch_size, n_data)
    for k in range(start, stop):
        idx[k - start] = perm[k]
    return stop - start, (pos + 1) % n_batches


@component
def batch_none(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """No data (quadratic oracles): an empty batch, no random draws."""
    return 0, pos


#: batching name -> batch-schedule component
BATCH_FNS = {"replacement": batch_replacement, "without-replacement": batch_without_replacement,
             "reshuffle": batch_reshuffle, "none": batch_none}


@njit
def batch_schedule(batch_fn, st, perm, n_data, batch_size, n_steps):  # type: ignore[no-untyped-def]
    """The first ``n_steps`` minibatches of a stream, (n_steps, B) with −1 padding (for tests)."""
    out = -np.ones((n_steps, batch_size), dtype=np.int64)
    idx = np.empty(batch_size, dtype=np.int64)
    pos = 0
    for t in range(n_steps):
        nb, pos = batch_fn(st, perm, n_data, batch_size, pos, idx)
        for k in range(nb):
            out[t, k] = idx[k]
    return out


@njit
def _flush_block(acc_n, acc_mean, acc_m2, blk, blk_n, bm):  # type: ignore[no-untyped-def]
    """Merge the k = blk_n[0] pending states ``blk[:k]`` into segment s = blk_n[1] and empty the block.

    Block mean b̄ and centred scatter Σ_r (x_r − b̄)(x_r − b̄)ᵀ, then Chan et al.'s pairwise merge
    with the segment's (n, mean, M2): M2 += scatter + (n k / (n + k)) δδᵀ, mean += δ k/(n + k),
    δ = b̄ − mean. Same quantity as k rank-one Welford updates (both are exact up to rounding),
    but the scatter is a rank-k product whose 8-wide register blocks read each pending state
    once per block of 8 entries instead of loading and storing every M2 entry at every step.
    Only the upper triangle of M2 is accumulated.
    """
    k = blk_n[0]
    s = blk_n[1]
    d = bm.shape[0]
    mean = acc_mean[s]
    m2 = acc_m2[s]
    for j in range(d):
        acc = 0.0
        for r in range(k):
            acc += blk[r, j]
        bm[j] = acc / k
    for r in range(k):
        for j in range(d):
            blk[r, j] -= bm[j]
    for i in range(d):
        j = i
        while j + 8 <= d:
            s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
            for r in range(k):
                a = blk[r, i]
                s0 += a * blk[r, j]
                s1 += a * blk[r, j + 1]
                s2 += a * blk[r, j + 2]
                s3 += a * blk[r, j + 3]
                s4 += a * blk[r, j + 4]
                s5 += a * blk[r, j + 5]
                s6 += a * blk[r, j + 6]
                s7 += a * blk[r, j + 7]
            m2[i, j] += s0
            m2[i, j + 1] += s1
            m2[i, j + 2] += s2
            m2[i, j + 3] += s3
            m2[i, j + 4] += s4
            m2[i, j + 5] += s5
            m2[i, j + 6] += s6
            m2[i, j + 7] += s7
            j += 8
        while j < d:
            s0 = 0.0
            for r in range(k):
                s0 += blk[r, i] * blk[r, j]
            m2[i, j] += s0
            j += 1
    na = acc_n[s]
    n = na + k
    if na > 0:
        f = na * (k / n)
        for i in range(d):
            bm[i] -= mean[i]  # δ
        for i in range(d):
            fi = f * bm[i]
            for j in range(i, d):
                m2[i, j] += fi * bm[j]
        w = k / n
        for j in range(d):
            mean[j] += bm[j] * w
    else:
        for j in range(d):
            mean[j] = bm[j]
    acc_n[s] = n
    blk_n[0] = 0


# --------------------------------------------------------------------------- update steps
@njit
def _momentum(m, grad, kappa):  # type: ignore[no-untyped-def]
    """m ← κm + G (m = G when κ = 0)."""
    for j in range(m.shape[0]):
        m[j] = kappa * m[j] + grad[j]


@component
def sgld_diag_step(th, m, grad, st, s, rs, hp, lam, fac, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """SG(L)D with diagonal Λ: θ ← θ − s Λ m + sqrt(s) L ξ, one elementwise pass; hp = [κ, inject]."""
    _momentum(m, grad, hp[0])
    d = th.shape[0]
    if hp[1] != 0.0:
        fill_normals(st, xi)
        for j in range(d):
            th[j] = (th[j] - s * ld[j] * m[j]) + rs * fd[j] * xi[j]
    else:
        for j in range(d):
            th[j] -= s * ld[j] * m[j]
    return 0


@component
def sgld_dense_step(th, m, grad, st, s, rs, hp, lam, fac, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """SG(L)D with dense Λ and lower-triangular noise factor L (LLᵀ = 2Λ/β); hp = [κ, inject]."""
    _momentum(m, grad, hp[0])
    d = th.shape[0]
    for i in range(d):
        buf[i] = row_dot(lam, i, m)
    for i in range(d):
        th[i] -= s * buf[i]
    if hp[1] != 0.0:
        fill_normals(st, xi)
        for i in range(d):
            acc = 0.0
            for j in range(i + 1):
                acc += fac[i, j] * xi[j]
            th[i] += rs * acc
    return 0


@component
def sglrw_step(th, m, grad, st, s, rs, hp, lam, fac, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """SGLRW (seed 000, eq. 12): ±r_i moves with P(+r_i) = ½ − s Λ_ii m_i/(2 r_i) clipped to [0, 1]."""
    _momentum(m, grad, hp[0])
    clips = 0
    for j in range(th.shape[0]):
        r = rs * fd[j]
        p = 0.5 - 0.5 * (s * ld[j] * m[j]) / r
        if p < 0.0:
            p = 0.0
            clips += 1
        elif p > 1.0:
            p = 1.0
            clips += 1
        if uniform(st) < p:
            th[j] += r
        else:
            th[j] -= r
    return clips


@component
def clipped_sgld_step(th, m, grad, st, s, rs, hp, lam, fac, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """Clipped SGLD (seed 000, eq. 18): θ_i ← θ_i − clip(s Λ_ii m_i; ±r_i) + r_i ξ_i."""
    _momentum(m, grad, hp[0])
    fill_normals(st, xi)
    clips = 0
    for j in range(th.shape[0]):
        r = rs * fd[j]
        dr = s * ld[j] * m[j]
        if dr > r:
            dr = r
            clips += 1
        elif dr < -r:
            dr = -r
            clips += 1
        th[j] += r * xi[j] - dr
    return clips


@component
def sghmc_data_step(th, m, grad, st, s, rs, hp, lam, fac, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """Vanilla SGHMC (Chen et al. 2014, no noise estimate) on log p_β = −β(L + θᵀΓθ/(2N)):
    with g = −β G_t = ∇log p_β, h = s Λ₁₁ (scalar Λ), γ = hp[1] (hp = [β, γ]) and m the velocity v,
    v ← v + h(g − γv) + sqrt(2γh) ξ,  θ ← θ + h v (:func:`sgtune.sampler.smile.sghmc_step`).
    """
    beta = hp[0]
    for j in range(th.shape[0]):
        buf[j] = -beta * grad[j]
    fill_normals(st, xi)
    sghmc_step(th, m, buf, xi, s * ld[0], hp[1])
    return 0


#: (sampler name, Λ kind) -> update-step component
STEP_FNS = {("sgld", LAM_DIAG): sgld_diag_step, ("sgld", LAM_DENSE): sgld_dense_step,
            ("sglrw", LAM_DIAG): sglrw_step, ("clipped-sgld", LAM_DIAG): clipped_sgld_step,
            ("sghmc", LAM_DIAG): sghmc_data_step}


def step_fn_for(sampler: str, lam_kind: int):  # type: ignore[no-untyped-def]
    """The update component of ``sampler`` for a diagonal (1) or dense (2) Λ."""
    return STEP_FNS[(sampler, lam_kind)]


# --------------------------------------------------------------------------- the chain
@njit
def _diverges(th):  # type: ignore[no-untyped-def]
    """True when θ is non-finite or ‖θ‖₁ ≥ 1e150 (four partial sums: no serial add chain)."""
    d = th.shape[0]
    t0_ = t1_ = t2_ = t3_ = 0.0
    j = 0
    while j + 4 <= d:
        t0_ += abs(th[j])
        t1_ += abs(th[j + 1])
        t2_ += abs(th[j + 2])
        t3_ += abs(th[j + 3])
        j += 4
    while j < d:
        t0_ += abs(th[j])
        j += 1
    return not (t0_ + t1_) + (t2_ + t3_) < DIVERGENCE_BOUND


@njit
def _record(c, u, th, pos, out, buf):  # type: ignore[no-untyped-def]
    """Streaming outputs of chain c for its u-th draw after burn-in (module docstring)."""
    seg_len, acc_n, acc_mean, acc_m2, blk, blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2, obs, obs_sum = out
    d = th.shape[0]
    seg = (u - 1) // seg_len
    if seg >= acc_n.shape[1]:
        seg = acc_n.shape[1] - 1
    if blk_n[c, 0] > 0 and blk_n[c, 1] != seg:  # the pending block belongs to the previous segment
        _flush_block(acc_n[c], acc_mean[c], acc_m2[c], blk[c], blk_n[c], buf)
    k = blk_n[c, 0]
    for j in range(d):
        blk[c, k, j] = th[j]
    blk_n[c, 0] = k + 1
    blk_n[c, 1] = seg
    if k + 1 == blk.shape[1]:
        _flush_block(acc_n[c], acc_mean[c], acc_m2[c], blk[c], blk_n[c], buf)
    if thin > 0 and u % thin == 0:
        k = u // thin - 1
        if k < trace.shape[1]:
            for j in range(d):
                trace[c, k, j] = th[j]
    for k in range(obs.shape[0]):
        obs_sum[c, k] += row_dot(obs, k, th)
    if pos_n.shape[1] > 0:
        pos_n[c, pos] += 1
        inv_p = 1.0 / pos_n[c, pos]
        for j in range(d):
            delta = th[j] - pos_mean[c, pos, j]
            pos_mean[c, pos, j] += delta * inv_p
            pos_m2[c, pos, j] += delta * (th[j] - pos_mean[c, pos, j])


@njit
def _finish(c, out, diverged, buf):  # type: ignore[no-untyped-def]
    """Merge chain c's pending covariance block when this is the run's last call (``flush``)."""
    seg_len, acc_n, acc_mean, acc_m2, blk, blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2, obs, obs_sum = out
    if flush and diverged[c] < 0 and blk_n[c, 0] > 0:
        _flush_block(acc_n[c], acc_mean[c], acc_m2[c], blk[c], blk_n[c], buf)


@njit
def _schedule(t, decay):  # type: ignore[no-untyped-def]
    """s_t = t^{−γ} (1 when γ = 0)."""
    if decay != 0.0:
        return float(t) ** (-decay)
    return 1.0


@njit
def _chain(batch_fn, grad_fn, step_fn, c, state, t0, n_steps, burn_in, oracle, batch_size, decay, upd, out):  # type: ignore[no-untyped-def]
    theta, mom, rng_state, perm, epoch_pos, diverged, clip_count = state
    X, y, ints, floats, mat, prior_kind, prior, work_len = oracle
    lam, fac, hp = upd
    if diverged[c] >= 0:
        return
    d = theta.shape[1]
    st = rng_state[c]
    th = theta[c]
    m = mom[c]
    pm = perm[c]
    wk = np.empty(max(work_len, 1))  # local: LLVM knows it aliases none of the arguments
    grad = np.empty(d)
    xi = np.empty(d)
    buf = np.empty(d)
    idx = np.empty(max(batch_size, 1), dtype=np.int64)
    ld = np.empty(d)  # diagonals of Λ and of its noise factor, contiguous (per-step constants)
    fd = np.empty(d)
    for j in range(d):
        ld[j] = lam[j, j]
        fd[j] = fac[j, j]
    n_data = X.shape[0]
    pos = epoch_pos[c]
    clips = 0
    for t in range(t0 + 1, t0 + n_steps + 1):
        nb, pos = batch_fn(st, pm, n_data, batch_size, pos, idx)
        grad_fn(th, X, y, idx, nb, ints, floats, mat, st, wk, grad)
        add_prior(prior_kind, prior, th, grad)
        s = _schedule(t, decay)
        clips += step_fn(th, m, grad, st, s, math.sqrt(s), hp, lam, fac, ld, fd, xi, buf)
        if _diverges(th):
            diverged[c] = t
            break
        if t > burn_in:
            _record(c, t - burn_in, th, pos, out, buf)
    _finish(c, out, diverged, buf)
    epoch_pos[c] = pos
    clip_count[c] += clips


@njit_parallel
def chains(batch_fn, grad_fn, step_fn, state, t0, n_steps, burn_in, oracle, sched, upd, out):  # type: ignore[no-untyped-def]
    """Advance C chains by ``n_steps`` steps, composed from the three components (module docstring)."""
    batch_size, decay = sched  # unpacked here: parfor lowering mistypes a mixed tuple used inside prange
    for c in prange(state[0].shape[0]):
        _chain(batch_fn, grad_fn, step_fn, c, state, t0, n_steps, burn_in, oracle, batch_size, decay, upd, out)


# --------------------------------------------------------------------------- general (NumPy-gradient) path
@njit
def draw_batches(batch_fn, state, n_data, batch_size, idx):  # type: ignore[no-untyped-def]
    """Next minibatch of every live chain into ``idx`` (C, B); returns the batch length.

    All chains start at epoch position 0 and share N and B, so their batch lengths agree.
    """
    theta, mom, rng_state, perm, epoch_pos, diverged, clip_count = state
    nb = 0
    for c in range(theta.shape[0]):
        if diverged[c] >= 0:
            continue
        nb, epoch_pos[c] = batch_fn(rng_state[c], perm[c], n_data, batch_size, epoch_pos[c], idx[c])
    return nb


@njit
def advance(step_fn, state, t, burn_in, grads, prior_kind, prior, decay, upd, out):  # type: ignore[no-untyped-def]
    """Step t of every live chain given its data gradient ``grads[c]`` (overwritten): prior, update,
    divergence, outputs — the same code as :func:`!_chain` after its gradient. ``out``'s flush
    flag merges the pending covariance blocks (set it on the run's last step only).
    """
    theta, mom, rng_state, perm, epoch_pos, diverged, clip_count = state
    lam, fac, hp = upd
    d = theta.shape[1]
    xi = np.empty(d)
    buf = np.empty(d)
    ld = np.empty(d)
    fd = np.empty(d)
    for j in range(d):
        ld[j] = lam[j, j]
        fd[j] = fac[j, j]
    s = _schedule(t, decay)
    for c in range(theta.shape[0]):
        if diverged[c] >= 0:
            continue
        th = theta[c]
        g = grads[c]
        add_prior(prior_kind, prior, th, g)
        clip_count[c] += step_fn(th, mom[c], g, rng_state[c], s, math.sqrt(s), hp, lam, fac, ld, fd, xi, buf)
        if _diverges(th):
            diverged[c] = t
            continue
        if t > burn_in:
            _record(c, t - burn_in, th, epoch_pos[c], out, buf)
        _finish(c, out, diverged, buf)
