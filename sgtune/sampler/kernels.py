"""Top-level numba kernels for SG-MCMC chains, selected by name from :data:`KERNELS`.

Every kernel runs C independent chains in parallel (``prange`` over chains), each with its
own xoshiro256++ stream (:mod:`sgtune.sampler.rng`), and advances them by ``n_steps``
steps from step ``t0`` (so the driver can run in chunks and report progress). All state
lives in arrays passed in and updated in place; the step loop allocates nothing.

Update rules (θ ∈ R^D, step t = 1, 2, …, gradient G_t from :mod:`sgtune.sampler.grads`,
schedule factor s_t = t^{−γ} = (1+k)^{−γ} with k = t − 1 the 0-based iteration, γ = 0 by
default):

- ``sgld`` (seed 003, §2.1 and eq. B.1): m ← κm + G_t;  θ ← θ − s_t Λ m + sqrt(s_t) L ξ,
  LLᵀ = 2Λ/β (Cholesky for dense Λ, sqrt of the diagonal otherwise), ξ ~ N(0, I).
  β = ∞ (no injected noise) is SGD; κ = 0 is plain SG(L)D.
- ``sglrw`` (seed 000, eqs. 11–12, in the mean-loss scaling): coordinate i moves by
  ±r_i, r_i = sqrt(2 s_t Λ_ii/β), with P(+r_i) = ½ − s_t Λ_ii m_i / (2 r_i) clipped to
  [0, 1] (clips counted). With Λ = λI and β = N this is seed 000's SGLRW with δ = λ/N.
- ``clipped-sgld`` (seed 000, eq. 18): θ_i ← θ_i − clip(s_t Λ_ii m_i; ±r_i) + r_i ξ_i
  (componentwise clip, clips counted).

Batching (GLM oracles): 0 with replacement (B uniform indices), 1 without replacement per
step (a partial Fisher–Yates shuffle of the chain's permutation: a uniform B-subset),
2 random reshuffling (a fresh Fisher–Yates permutation per chain at the start of every
epoch, then batches perm[kB:(k+1)B], k = 0..R−1, R = ceil(N/B); the last batch is
smaller when B does not divide N).

Outputs accumulated after burn-in (t > burn_in), u = t − burn_in:
mean and (upper-triangle) centred sum of squares M2 per chain and segment
(segment = min((u−1) // seg_len, S−1), used for batch-means standard errors), accumulated
in blocks: the states are collected in ``blk`` (C, K, D) (``blk_n[c]`` = [pending count,
segment]) and merged by :func:`_flush_block` when K are pending, when the segment changes,
and at the end of a call with ``flush`` true (the driver's last call) — so the result does
not depend on how the run is split into calls; thinned trace (every ``thin`` steps), sums of linear observables ℓ_kᵀθ, and for
reshuffling per-epoch-position Welford mean and variance (position = number of batches of
the current epoch already used, 0..R−1). A chain whose state becomes non-finite (or
‖θ‖₁ > 1e150) stops; ``diverged[c]`` records the step (−1 if it never diverged).
"""
from __future__ import annotations

import math

import numpy as np

from ._jit import njit, njit_parallel, prange
from .grads import QUAD_GAUSS, minibatch_gradient, quadratic_gradient, row_dot
from .rng import fill_normals, fill_randbelow, randbelow, uniform

__all__ = ["KERNELS", "SAMPLER_IDS", "BATCHING_IDS", "LAM_DIAG", "LAM_DENSE", "COV_BLOCK", "sgld_chains",
           "sglrw_chains", "clipped_sgld_chains", "draw_batch", "batch_schedule"]

SGLD, SGLRW, CLIPPED_SGLD = 0, 1, 2
SAMPLER_IDS: dict[str, int] = {"sgld": SGLD, "sglrw": SGLRW, "clipped-sgld": CLIPPED_SGLD}
REPLACEMENT, WITHOUT_REPLACEMENT, RESHUFFLE = 0, 1, 2
BATCHING_IDS: dict[str, int] = {"replacement": REPLACEMENT, "without-replacement": WITHOUT_REPLACEMENT,
                                "reshuffle": RESHUFFLE}
LAM_DIAG, LAM_DENSE = 1, 2
#: states per covariance block (K of ``blk``); 32 × D doubles stay in L1 for D ≤ 100
COV_BLOCK = 32
DIVERGENCE_BOUND = 1e150


@njit
def draw_batch(st, perm, n_data, batch_size, batching, epoch_pos, idx):  # type: ignore[no-untyped-def]
    """Write the next minibatch into ``idx``; return (batch length, new epoch position)."""
    if batching == REPLACEMENT:
        fill_randbelow(st, n_data, idx, batch_size)
        return batch_size, epoch_pos
    if batching == WITHOUT_REPLACEMENT:
        for k in range(batch_size):
            j = k + randbelow(st, n_data - k)
            tmp = perm[k]
            perm[k] = perm[j]
            perm[j] = tmp
            idx[k] = perm[k]
        return batch_size, epoch_pos
    # RESHUFFLE
    n_batches = (n_data + batch_size - 1) // batch_size
    if epoch_pos == 0:
        for i in range(n_data - 1, 0, -1):
            j = randbelow(st, i + 1)
            tmp = perm[i]
            perm[i] = perm[j]
            perm[j] = tmp
    start = epoch_pos * batch_size
    stop = min(start + batch_size, n_data)
    for k in range(start, stop):
        idx[k - start] = perm[k]
    return stop - start, (epoch_pos + 1) % n_batches


@njit
def batch_schedule(st, perm, n_data, batch_size, batching, n_steps):  # type: ignore[no-untyped-def]
    """The first ``n_steps`` minibatches of a stream, (n_steps, B) with −1 padding (for tests)."""
    out = -np.ones((n_steps, batch_size), dtype=np.int64)
    idx = np.empty(batch_size, dtype=np.int64)
    pos = 0
    for t in range(n_steps):
        nb, pos = draw_batch(st, perm, n_data, batch_size, batching, pos, idx)
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


@njit
def _chain(c, sampler, theta, mom, rng_state, perm, epoch_pos, t0, n_steps, burn_in,  # type: ignore[no-untyped-def]
           X, y, model, mpar, noise_chol, prior_kind, prior,
           lam, lam_kind, noise_fac, inject, kappa, batch_size, batching, decay,
           seg_len, acc_n, acc_mean, acc_m2, blk, blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2,
           obs, obs_sum, diverged, clip_count):
    if diverged[c] >= 0:
        return
    d = theta.shape[1]
    st = rng_state[c]
    th = theta[c]
    m = mom[c]
    pm = perm[c]
    grad = np.empty(d)
    xi = np.empty(d)
    buf = np.empty(d)
    idx = np.empty(max(batch_size, 1), dtype=np.int64)
    eta = np.empty(max(batch_size, 1))
    ld = np.empty(d)  # diagonals of Λ and of its noise factor, contiguous (per-step constants)
    fd = np.empty(d)
    for j in range(d):
        ld[j] = lam[j, j]
        fd[j] = noise_fac[j, j]
    n_data = X.shape[0]
    n_seg = acc_n.shape[1]
    n_trace = trace.shape[1]
    n_pos = pos_n.shape[1]
    n_obs = obs.shape[0]
    pos = epoch_pos[c]
    quad = model >= QUAD_GAUSS
    clips = 0
    for t in range(t0 + 1, t0 + n_steps + 1):
        # --- stochastic gradient G_t(θ_{t-1})
        if quad:
            quadratic_gradient(th, X, y, model, noise_chol, mpar, st, buf, grad)
        else:
            nb, pos = draw_batch(st, pm, n_data, batch_size, batching, pos, idx)
            minibatch_gradient(th, X, y, idx, 0, nb, model, mpar, prior_kind, prior, eta, grad)
        # --- momentum m ← κm + G (m = G when κ = 0)
        for j in range(d):
            m[j] = kappa * m[j] + grad[j]
        s = 1.0
        if decay != 0.0:
            s = float(t) ** (-decay)
        rs = math.sqrt(s)
        # --- update
        if sampler == SGLD:
            if lam_kind == LAM_DENSE:
                for i in range(d):
                    buf[i] = row_dot(lam, i, m)
                for i in range(d):
                    th[i] -= s * buf[i]
                if inject:
                    fill_normals(st, xi)
                    for i in range(d):
                        acc = 0.0
                        for j in range(i + 1):
                            acc += noise_fac[i, j] * xi[j]
                        th[i] += rs * acc
            elif inject:  # diagonal Λ: one elementwise (vectorised) pass, same rounding as two
                fill_normals(st, xi)
                for j in range(d):
                    th[j] = (th[j] - s * ld[j] * m[j]) + rs * fd[j] * xi[j]
            else:
                for j in range(d):
                    th[j] -= s * ld[j] * m[j]
        elif sampler == SGLRW:
            for j in range(d):
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
        else:  # CLIPPED_SGLD
            fill_normals(st, xi)
            for j in range(d):
                r = rs * fd[j]
                dr = s * ld[j] * m[j]
                if dr > r:
                    dr = r
                    clips += 1
                elif dr < -r:
                    dr = -r
                    clips += 1
                th[j] += r * xi[j] - dr
        # --- divergence: non-finite or astronomically large state stops this chain
        t0_ = t1_ = t2_ = t3_ = 0.0  # four partial sums: no serial add chain
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
        if not (t0_ + t1_) + (t2_ + t3_) < DIVERGENCE_BOUND:
            diverged[c] = t
            break
        if t <= burn_in:
            continue
        # --- streaming outputs
        u = t - burn_in
        seg = (u - 1) // seg_len
        if seg >= n_seg:
            seg = n_seg - 1
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
            if k < n_trace:
                for j in range(d):
                    trace[c, k, j] = th[j]
        for k in range(n_obs):
            obs_sum[c, k] += row_dot(obs, k, th)
        if n_pos > 0:
            pos_n[c, pos] += 1
            inv_p = 1.0 / pos_n[c, pos]
            for j in range(d):
                delta = th[j] - pos_mean[c, pos, j]
                pos_mean[c, pos, j] += delta * inv_p
                pos_m2[c, pos, j] += delta * (th[j] - pos_mean[c, pos, j])
    if flush and diverged[c] < 0 and blk_n[c, 0] > 0:
        _flush_block(acc_n[c], acc_mean[c], acc_m2[c], blk[c], blk_n[c], buf)
    epoch_pos[c] = pos
    clip_count[c] += clips


@njit_parallel
def sgld_chains(theta, mom, rng_state, perm, epoch_pos, t0, n_steps, burn_in,  # type: ignore[no-untyped-def]
                X, y, model, mpar, noise_chol, prior_kind, prior,
                lam, lam_kind, noise_fac, inject, kappa, batch_size, batching, decay,
                seg_len, acc_n, acc_mean, acc_m2, blk, blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2,
                obs, obs_sum, diverged, clip_count):
    """SG(L)D / SGD with scalar, diagonal or dense Λ and momentum κ (module docstring)."""
    for c in prange(theta.shape[0]):
        _chain(c, SGLD, theta, mom, rng_state, perm, epoch_pos, t0, n_steps, burn_in,
               X, y, model, mpar, noise_chol, prior_kind, prior,
               lam, lam_kind, noise_fac, inject, kappa, batch_size, batching, decay,
               seg_len, acc_n, acc_mean, acc_m2, blk, blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2,
               obs, obs_sum, diverged, clip_count)


@njit_parallel
def sglrw_chains(theta, mom, rng_state, perm, epoch_pos, t0, n_steps, burn_in,  # type: ignore[no-untyped-def]
                 X, y, model, mpar, noise_chol, prior_kind, prior,
                 lam, lam_kind, noise_fac, inject, kappa, batch_size, batching, decay,
                 seg_len, acc_n, acc_mean, acc_m2, blk, blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2,
                 obs, obs_sum, diverged, clip_count):
    """SGLRW (seed 000, eq. 12) with probability clipping; diagonal Λ, β < ∞."""
    for c in prange(theta.shape[0]):
        _chain(c, SGLRW, theta, mom, rng_state, perm, epoch_pos, t0, n_steps, burn_in,
               X, y, model, mpar, noise_chol, prior_kind, prior,
               lam, lam_kind, noise_fac, inject, kappa, batch_size, batching, decay,
               seg_len, acc_n, acc_mean, acc_m2, blk, blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2,
               obs, obs_sum, diverged, clip_count)


@njit_parallel
def clipped_sgld_chains(theta, mom, rng_state, perm, epoch_pos, t0, n_steps, burn_in,  # type: ignore[no-untyped-def]
                        X, y, model, mpar, noise_chol, prior_kind, prior,
                        lam, lam_kind, noise_fac, inject, kappa, batch_size, batching, decay,
                        seg_len, acc_n, acc_mean, acc_m2, blk, blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2,
                        obs, obs_sum, diverged, clip_count):
    """Clipped SGLD (seed 000, eq. 18): componentwise drift clip at r_i = sqrt(2Λ_ii/β)."""
    for c in prange(theta.shape[0]):
        _chain(c, CLIPPED_SGLD, theta, mom, rng_state, perm, epoch_pos, t0, n_steps, burn_in,
               X, y, model, mpar, noise_chol, prior_kind, prior,
               lam, lam_kind, noise_fac, inject, kappa, batch_size, batching, decay,
               seg_len, acc_n, acc_mean, acc_m2, blk, blk_n, flush, thin, trace, pos_n, pos_mean, pos_m2,
               obs, obs_sum, diverged, clip_count)


#: sampler name -> top-level kernel (one compiled signature each)
KERNELS = {"sgld": sgld_chains, "sglrw": sglrw_chains, "clipped-sgld": clipped_sgld_chains}
