"""The components of the chain engine (:mod:`sgtune.sampler.engine`) for the SG(L)D family and SGHMC.

- batch schedules (:data:`BATCH_FNS`): ``replacement`` (B uniform indices), ``without-replacement``
  (a partial Fisher–Yates shuffle of the chain's permutation per step: a uniform B-subset),
  ``reshuffle`` (a fresh Fisher–Yates permutation per chain at the start of every epoch, then
  batches perm[kB:(k+1)B], k = 0..R−1, R = ceil(N/B); the last batch is smaller when B does
  not divide N), ``none`` (oracles without data, e.g. the quadratic ones); and for the recorder's
  epoch-position moments ``full`` (no draw, an empty batch: the oracle uses all the data) and
  ``replacement-positions`` / ``without-replacement-positions`` (the same draws as ``replacement`` /
  ``without-replacement``, with the epoch position counted);
- update moves (θ and its auxiliary m from a given gradient; the general NumPy path uses them alone)
  and the step rules of the engine (the gradient from the oracle, the prior, the move);
- the recorder: :func:`record`, :func:`finish`, :func:`flush_block`, and the divergence test
  :func:`diverges`.

Update rules (θ ∈ R^D, step t = 1, 2, …, gradient G_t, schedule factor s_t = t^{−γ} =
(1+k)^{−γ} with k = t − 1 the 0-based iteration, γ = 0 by default), with the settings in a
:class:`~sgtune.sampler.state.StepParams` record ``p``:

- ``sgld`` (Wang, Ding & Huggins 2026, §2.1 and eq. B.1): m ← κm + G_t;  θ ← θ − s_t Λ m + sqrt(s_t) L ξ,
  LLᵀ = 2Λ/β (Cholesky for dense Λ, sqrt of the diagonal otherwise), ξ ~ N(0, I).
  β = ∞ (no injected noise) is SGD; κ = 0 is plain SG(L)D. Moves
  :func:`sgld_diag_step` and :func:`sgld_dense_step`.
- ``sglrw`` (Mensch et al. 2025, eqs. 11–12, in the mean-loss scaling): coordinate i moves by
  ±r_i, r_i = sqrt(2 s_t Λ_ii/β), with P(+r_i) = ½ − s_t Λ_ii m_i / (2 r_i) clipped to
  [0, 1] (clips counted). With Λ = λI and β = N this is Mensch et al.'s SGLRW with δ = λ/N.
- ``clipped-sgld`` (Mensch et al. 2025, eq. 18): θ_i ← θ_i − clip(s_t Λ_ii m_i; ±r_i) + r_i ξ_i
  (componentwise clip, clips counted).
- ``sghmc`` (Chen et al. 2014): :func:`sghmc_data_step`.

Recorder (after burn-in, t > burn_in, u = t − burn_in; :func:`record`): mean and (upper-triangle)
centred sum of squares M2 per chain and segment (segment = min((u−1) // seg_len, S−1), used for
batch-means standard errors), accumulated in blocks: the states are collected in ``blk`` (C, K, D)
(``blk_n[c]`` = [pending count, segment]) and merged by :func:`flush_block` when K are pending, when
the segment changes, and at the end of a call with ``flush`` true (the driver's last call) — so the
result does not depend on how the run is split into calls; thinned trace (every ``thin`` steps) and
the step size of the MCLMC samplers (and their Σ ΔE so far, ``energy_trace``) at the same draws, sums
of linear observables ℓ_kᵀθ, Σθ and Σθ² (``theta_sum``, ``theta_sq_sum``: the SMILE ensembles), and per-epoch-position Welford mean and variance (position = number
of batches of the current epoch already used, 0..R−1, as the batch schedule counts it: ``reshuffle``,
``full`` and the ``*-positions`` schedules) — or, when the recorder has a ``pos_centre`` c, the sums of
d = θ − c and of d² by position instead (Shaw & Whalley's model problem, :mod:`sgtune.sampler.reshuffle`).
Segment moments are skipped when the recorder has no segment (S = 0).

:func:`draw_batches` and :func:`advance` run the parts of a step around the gradient for all
chains at once: the general (NumPy) path for models without a numba spec
(:mod:`sgtune.sampler.general`) uses them, so it shares the random streams, update rules and
outputs with the compiled chains.
"""
from __future__ import annotations

import math

import numpy as np

import numba
from numba import types
from numba.core import cgutils, ir_utils
from numba.extending import intrinsic

from ._jit import call_batch, call_grad, call_move, component_inline, component_name, njit, njit_inline
from .grads import add_prior, row_dot
from .rng import fill_normals, fill_randbelow, fill_uniforms, xoshiro_step
from .state import DIVERGENCE_BOUND, STAT_DE_SUM

__all__ = ["BATCH_FNS", "BATCH_KINDS", "BATCH_KIND_OF", "batch_by_kind", "draw_batches", "advance", "batch_schedule",
           "sgld_diag_step", "sgld_dense_step", "sglrw_step", "clipped_sgld_step", "sghmc_step", "sghmc_data_step",
           "sgld_diag_rule", "sgld_dense_rule", "sglrw_rule", "clipped_sgld_rule", "sghmc_rule", "record", "finish",
           "flush_block", "diverges", "schedule", "data_gradient"]

@component_inline
def batch_replacement(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """B indices drawn independently and uniformly."""
    fill_randbelow(st, n_data, idx, batch_size)
    return batch_size, pos


@njit
def _below(u, n, s0, s1, s2, s3):  # type: ignore[no-untyped-def]
    """:func:`~sgtune.sampler.rng.randbelow` on a state held in local variables, from its first output ``u``:
    (draw, state). The same draws (Lemire's rejection, 2^32 mod n computed only when needed). Compiled on its own
    (LLVM inlines it), not in numba's IR: two copies of its loop in every specialisation of the engine's loop cost
    ≈ 0.8 s (7 %) of a cold compile (``benchmarks/bench_compile.py``, ``benchmarks/results/engine_refcounts.txt``)."""
    nn = np.uint64(n)
    mask = np.uint64(0xFFFFFFFF)
    m = (u >> np.uint64(32)) * nn
    if (m & mask) < nn:
        thresh = ((mask - nn) + np.uint64(1)) % nn  # 2^32 mod n
        while (m & mask) < thresh:
            u, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
            m = (u >> np.uint64(32)) * nn
    return m >> np.uint64(32), s0, s1, s2, s3


@njit_inline
def _partial_shuffle(st, perm, n_data, batch_size, idx, xs):  # type: ignore[no-untyped-def]
    """A uniform B-subset into ``idx``: a partial Fisher–Yates shuffle of the chain's permutation; returns
    Σ_k xs[idx[k]] when ``xs`` (one column of the data, N values) is not empty, summed in the drawing loop
    (:func:`batch_by_kind`), else 0.0.

    The stream's state is held in local variables for the whole batch (``randbelow`` on the array would
    load and store it at every draw: the stores to ``perm`` and ``idx`` may alias it for the compiler), and
    the indices are unsigned (no negative-index wraparound): the same draws and the same permutation, ≈ 12
    fewer instructions per index (``benchmarks/model_problem_instructions.py``).
    """
    s0 = st[0]
    s1 = st[1]
    s2 = st[2]
    s3 = st[3]
    use = xs.shape[0] > 0
    acc = 0.0
    for k in range(batch_size):
        u, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
        r, s0, s1, s2, s3 = _below(u, n_data - k, s0, s1, s2, s3)
        j = np.uint64(k) + r
        tmp = perm[k]
        pj = perm[j]
        perm[k] = pj
        perm[j] = tmp
        idx[k] = pj
        if use:
            acc += xs[np.uint64(pj)]
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3
    return acc


#: no data column: the batch schedules called on their own sum nothing
_NO_ROWS = np.zeros(0)


@component_inline
def batch_without_replacement(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """A uniform B-subset: a partial Fisher–Yates shuffle of the chain's permutation."""
    _partial_shuffle(st, perm, n_data, batch_size, idx, _NO_ROWS)
    return batch_size, pos


@njit_inline
def _next_position(pos, n_data, batch_size):  # type: ignore[no-untyped-def]
    """The epoch position after ``pos``: (pos + 1) mod R, R = ceil(N/B) (pos + 1 = R exactly when
    (pos + 1)·B ≥ N: no integer division in the step loop)."""
    nxt = pos + 1
    if nxt * batch_size >= n_data:
        return 0
    return nxt


@njit_inline
def _reshuffle_block(st, perm, n_data, batch_size, pos, idx, xs):  # type: ignore[no-untyped-def]
    """Random reshuffling's batch at epoch position ``pos``: (batch length, next position, Σ xs over the batch,
    summed in the block's loop when ``xs`` is not empty, as :func:`_partial_shuffle`)."""
    if pos == 0:  # Fisher–Yates, the stream's state in local variables (as in ``_partial_shuffle``)
        s0 = st[0]
        s1 = st[1]
        s2 = st[2]
        s3 = st[3]
        for i in range(n_data - 1, 0, -1):
            u, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
            j, s0, s1, s2, s3 = _below(u, i + 1, s0, s1, s2, s3)
            tmp = perm[i]
            perm[i] = perm[j]
            perm[j] = tmp
        st[0] = s0
        st[1] = s1
        st[2] = s2
        st[3] = s3
    start = pos * batch_size
    stop = min(start + batch_size, n_data)
    use = xs.shape[0] > 0
    acc = 0.0
    for k in range(start, stop):
        pk = perm[k]
        idx[k - start] = pk
        if use:
            acc += xs[np.uint64(pk)]
    return stop - start, _next_position(pos, n_data, batch_size), acc


@component_inline
def batch_reshuffle(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """Random reshuffling: a fresh permutation at epoch position 0, then consecutive blocks."""
    nb, nxt, _ = _reshuffle_block(st, perm, n_data, batch_size, pos, idx, _NO_ROWS)
    return nb, nxt


@component_inline
def batch_none(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """No data (quadratic oracles): an empty batch, no random draws."""
    return 0, pos




@component_inline
def batch_full(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """The full data every step (an empty batch: the oracle uses all of it), counting epoch positions."""
    return 0, _next_position(pos, n_data, batch_size)


@component_inline
def batch_replacement_positions(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """``replacement``, counting epoch positions (the recorder's epoch-position moments)."""
    fill_randbelow(st, n_data, idx, batch_size)
    return batch_size, _next_position(pos, n_data, batch_size)


@component_inline
def batch_without_replacement_positions(st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """``without-replacement``, counting epoch positions (the recorder's epoch-position moments)."""
    _partial_shuffle(st, perm, n_data, batch_size, idx, _NO_ROWS)
    return batch_size, _next_position(pos, n_data, batch_size)


#: batching name -> batch-schedule component (the ``*-positions`` and ``full`` schedules count epoch
#: positions, R = ceil(N/B) steps an epoch, for the recorder's epoch-position moments)
BATCH_FNS = {"replacement": batch_replacement, "without-replacement": batch_without_replacement,
             "reshuffle": batch_reshuffle, "none": batch_none, "full": batch_full,
             "replacement-positions": batch_replacement_positions,
             "without-replacement-positions": batch_without_replacement_positions}


#: batching name -> its number in :func:`batch_by_kind` (the engine's one batch schedule, switching at run time)
BATCH_KINDS = {name: k for k, name in enumerate(BATCH_FNS)}
#: batch-schedule component name (``<module>.<function>``) -> its number in :func:`batch_by_kind`
BATCH_KIND_OF = {component_name(fn): k for k, fn in enumerate(BATCH_FNS.values())}


@njit_inline
def batch_by_kind(kind, st, perm, n_data, batch_size, pos, idx, xs, sums):  # type: ignore[no-untyped-def]
    """The batch schedule number ``kind`` (:data:`BATCH_KINDS`): the same draws as its component in
    :data:`BATCH_FNS`, each drawing helper inlined once (the ``*-positions`` schedules and ``full`` are
    ``replacement``, ``without-replacement`` and ``none`` with the epoch position counted). With ``xs`` not
    empty (the data, one column: the engine's ``Schedule.row_sums``), the schedules without replacement and
    reshuffling also put Σ_k xs[idx[k]] into ``sums[0]`` (the others leave it).

    The engine's step loop calls this instead of a schedule chosen at compile time: one branch per step on a
    loop-invariant integer (nothing next to a gradient), and one compiled chain serves every schedule of a
    (gradient oracle, step rule) pair — each schedule as a literal was a compile of its own, 11–14 s of CPU.
    The sum runs in the drawing loop (without replacement) or the block's loop (reshuffling): a sum of B
    dependent additions (≈ 3–4 cycles each) hides behind the draws there, while after them it adds its whole
    latency to every step (``benchmarks/batch_sum_latency.py``: 59 against 79 ns a step of the RM model
    problem); the same sum, in the batch's order, either way.
    """
    use = xs.shape[0] > 0
    if kind == 2:
        nb, pos, acc = _reshuffle_block(st, perm, n_data, batch_size, pos, idx, xs)
        if use:
            sums[0] = acc
        return nb, pos
    nb = 0
    acc = 0.0
    if kind == 0 or kind == 5:
        fill_randbelow(st, n_data, idx, batch_size)
        nb = batch_size
    elif kind == 1 or kind == 6:
        acc = _partial_shuffle(st, perm, n_data, batch_size, idx, xs)
        nb = batch_size
    if use:
        sums[0] = acc
    if kind >= 4:
        return nb, _next_position(pos, n_data, batch_size)
    return nb, pos


def batch_schedule(batch_fn, st, perm, n_data, batch_size, n_steps):  # type: ignore[no-untyped-def]
    """The first ``n_steps`` minibatches of a stream, (n_steps, B) with −1 padding (for tests); ``batch_fn`` a
    batch-schedule component or its name. Drawn through :func:`batch_by_kind`, as the engine's loop draws them."""
    return _batch_schedule(BATCH_KIND_OF[component_name(batch_fn)], st, perm, n_data, batch_size, n_steps)


@njit
def _batch_schedule(kind, st, perm, n_data, batch_size, n_steps):  # type: ignore[no-untyped-def]
    out = -np.ones((n_steps, batch_size), dtype=np.int64)
    idx = np.empty(batch_size, dtype=np.int64)
    no_rows = np.empty(0)  # no row sums
    pos = 0
    for t in range(n_steps):
        nb, pos = batch_by_kind(kind, st, perm, n_data, batch_size, pos, idx, no_rows, no_rows)
        for k in range(nb):
            out[t, k] = idx[k]
    return out


@njit
def flush_block(acc_n, acc_mean, acc_m2, blk, blk_n, bm):  # type: ignore[no-untyped-def]
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


# --------------------------------------------------------------------------- views that own nothing
def _strip_owner(context, builder, ty, val):  # type: ignore[no-untyped-def]
    """``val`` of numba type ``ty`` with every array's owner (meminfo, parent) set to null, recursively in tuples."""
    if isinstance(ty, types.Array):
        ary = context.make_array(ty)(context, builder, value=val)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()
    if isinstance(ty, types.BaseTuple):
        for i, t in enumerate(ty.types):
            val = builder.insert_value(val, _strip_owner(context, builder, t, builder.extract_value(val, i)), i)
    return val


@intrinsic
def borrowed(typingctx, x):  # type: ignore[no-untyped-def]
    """``x`` (an array, or a tuple or record of them) as views that own nothing: the same data, shapes and type,
    with a null owner, so numba's reference counting on them compiles to nothing.

    For values that outlive the views: ``sgtune.sampler.engine._chain``'s records are held by its caller for the
    whole call and its local scratch is used again after its loop (which keeps it alive); a step rule that is
    called, not inlined (SMILE's MCLMC rules), borrows its arguments, which ``_chain`` holds. Numba increments and
    decrements the owner of every array that enters an inlined component (each field of each record, at each
    level of inlining) and cannot prune most of them in a loop this large: ≈ 150 atomic operations per step,
    twice the arithmetic of the model problems (``benchmarks/engine_refcounts.py``,
    ``benchmarks/model_problem_instructions.py``). With a null owner, ``NRT_incref``/``NRT_decref`` return at once
    and LLVM removes the calls.
    """
    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        return _strip_owner(context, builder, sig.args[0], args[0])
    return x(x), codegen


def _borrowed_aliases(lhs, args, alias_map, arg_aliases):  # type: ignore[no-untyped-def]
    """Tell numba's alias analysis that ``borrowed(x)`` aliases ``x``. Without it, numba's dead-code removal takes
    a view of a call's result for a fresh array and drops a write through it that nothing in the function reads
    again (``state.epoch_pos[c] = pos`` after the loop, ``rec.pos_m2[…] += …``, ``rec.obs_sum[…] += …``: seen)."""
    src = args[0].name
    alias_map.setdefault(lhs, set()).add(src)
    alias_map.setdefault(src, set()).add(lhs)
    if src in arg_aliases:
        arg_aliases.add(lhs)


ir_utils.alias_func_extensions[("borrowed", __name__)] = _borrowed_aliases


# --------------------------------------------------------------------------- update moves
@njit_inline
def _momentum(m, grad, kappa):  # type: ignore[no-untyped-def]
    """m ← κm + G (m = G when κ = 0)."""
    for j in range(m.shape[0]):
        m[j] = kappa * m[j] + grad[j]


@component_inline
def sgld_diag_step(th, m, grad, st, s, rs, p, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """SG(L)D with diagonal Λ: θ ← θ − s Λ m + sqrt(s) L ξ, one elementwise pass."""
    _momentum(m, grad, p.momentum)
    d = th.shape[0]
    if p.inject:
        fill_normals(st, xi)
        for j in range(d):
            th[j] = (th[j] - s * ld[j] * m[j]) + rs * fd[j] * xi[j]
    else:
        for j in range(d):
            th[j] -= s * ld[j] * m[j]
    return 0


@component_inline
def sgld_dense_step(th, m, grad, st, s, rs, p, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """SG(L)D with dense Λ and lower-triangular noise factor L (LLᵀ = 2Λ/β)."""
    _momentum(m, grad, p.momentum)
    d = th.shape[0]
    lam = p.lam
    fac = p.fac
    for i in range(d):
        buf[i] = row_dot(lam, i, m)
    for i in range(d):
        th[i] -= s * buf[i]
    if p.inject:
        fill_normals(st, xi)
        for i in range(d):
            acc = 0.0
            for j in range(i + 1):
                acc += fac[i, j] * xi[j]
            th[i] += rs * acc
    return 0


@component_inline
def sglrw_step(th, m, grad, st, s, rs, p, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """SGLRW (Mensch et al. 2025, eq. 12): ±r_i moves with P(+r_i) = ½ − s Λ_ii m_i/(2 r_i) clipped to [0, 1]."""
    _momentum(m, grad, p.momentum)
    fill_uniforms(st, xi)  # the D uniforms of the step, in coordinate order (the stream of D uniform calls)
    clips = 0
    for j in range(th.shape[0]):
        r = rs * fd[j]
        q = 0.5 - 0.5 * (s * ld[j] * m[j]) / r
        if q < 0.0:
            q = 0.0
            clips += 1
        elif q > 1.0:
            q = 1.0
            clips += 1
        if xi[j] < q:
            th[j] += r
        else:
            th[j] -= r
    return clips


@component_inline
def clipped_sgld_step(th, m, grad, st, s, rs, p, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """Clipped SGLD (Mensch et al. 2025, eq. 18): θ_i ← θ_i − clip(s Λ_ii m_i; ±r_i) + r_i ξ_i."""
    _momentum(m, grad, p.momentum)
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


@njit
def sghmc_step(theta, v, grad, eta, h, friction):  # type: ignore[no-untyped-def]
    """Vanilla SGHMC: v ← v + h(g − γv) + √(2γh) η, θ ← θ + h v (the SMILE paper's baseline; the
    data chains' and the analytic targets' SGHMC rules)."""
    s = math.sqrt(2.0 * friction * h)
    for i in range(theta.shape[0]):
        v[i] += h * (grad[i] - friction * v[i]) + s * eta[i]
        theta[i] += h * v[i]


@component_inline
def sghmc_data_step(th, m, grad, st, s, rs, p, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """Vanilla SGHMC (Chen et al. 2014, no noise estimate) on log p_β = −β(L + θᵀΓθ/(2N)):
    with g = −β G_t = ∇log p_β, h = s · ``p.step``, γ = ``p.friction`` and m the velocity v,
    v ← v + h(g − γv) + sqrt(2γh) ξ,  θ ← θ + h v (:func:`sghmc_step`).
    """
    beta = p.inv_temp
    for j in range(th.shape[0]):
        buf[j] = -beta * grad[j]
    fill_normals(st, xi)
    sghmc_step(th, m, buf, xi, s * p.step, p.friction)
    return 0


# --------------------------------------------------------------------------- step rules of the engine
@njit_inline
def data_gradient(grad, th, ora, st, nb, w):  # type: ignore[no-untyped-def]
    """G_t(θ) into ``w.grad``: the data term of the oracle named ``grad`` on the batch ``w.idx[:nb]``, plus the
    prior Γθ/N."""
    call_grad(grad, th, ora, w.idx, nb, st, w.wk, w.grad)
    add_prior(ora.prior_kind, ora.prior, th, w.grad)


@component_inline
def sgld_diag_rule(grad, c, th, m, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    """One SG(L)D step, diagonal Λ (the engine's rule signature; returns the clipped coordinates)."""
    data_gradient(grad, th, ora, st, nb, w)
    return sgld_diag_step(th, m, w.grad, st, s, math.sqrt(s), p, w.ld, w.fd, w.xi, w.buf)


@component_inline
def sgld_dense_rule(grad, c, th, m, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    """One SG(L)D step, dense Λ."""
    data_gradient(grad, th, ora, st, nb, w)
    return sgld_dense_step(th, m, w.grad, st, s, math.sqrt(s), p, w.ld, w.fd, w.xi, w.buf)


@component_inline
def sglrw_rule(grad, c, th, m, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    """One SGLRW step."""
    data_gradient(grad, th, ora, st, nb, w)
    return sglrw_step(th, m, w.grad, st, s, math.sqrt(s), p, w.ld, w.fd, w.xi, w.buf)


@component_inline
def clipped_sgld_rule(grad, c, th, m, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    """One clipped-SGLD step."""
    data_gradient(grad, th, ora, st, nb, w)
    return clipped_sgld_step(th, m, w.grad, st, s, math.sqrt(s), p, w.ld, w.fd, w.xi, w.buf)


@component_inline
def sghmc_rule(grad, c, th, m, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    """One SGHMC step."""
    data_gradient(grad, th, ora, st, nb, w)
    return sghmc_data_step(th, m, w.grad, st, s, math.sqrt(s), p, w.ld, w.fd, w.xi, w.buf)


# --------------------------------------------------------------------------- recorder
@njit_inline
def diverges(th):  # type: ignore[no-untyped-def]
    """True when θ is non-finite or ‖θ‖₁ ≥ DIVERGENCE_BOUND (four partial sums: no serial add chain).

    Below D = 4 only the first partial sum is used and the test is that sum's (t₀ + 0 = t₀ for t₀ ≥ 0 or NaN):
    a plain loop, without the unrolled loop's setup (≈ 25 instructions a step at D = 1).
    """
    d = th.shape[0]
    if d < 4:
        acc = 0.0
        for j in range(d):
            acc += abs(th[j])
        return not acc < DIVERGENCE_BOUND
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


@njit_inline
def _record_moments(c, u, th, rec, buf):  # type: ignore[no-untyped-def]
    """θ into chain c's pending covariance block (merged into its segment when full or when the segment changes)."""
    acc_n = rec.acc_n
    blk = rec.blk
    blk_n = rec.blk_n
    d = th.shape[0]
    seg = (u - 1) // rec.seg_len
    if seg >= acc_n.shape[1]:
        seg = acc_n.shape[1] - 1
    if blk_n[c, 0] > 0 and blk_n[c, 1] != seg:  # the pending block belongs to the previous segment
        flush_block(acc_n[c], rec.acc_mean[c], rec.acc_m2[c], blk[c], blk_n[c], buf)
    k = blk_n[c, 0]
    for j in range(d):
        blk[c, k, j] = th[j]
    blk_n[c, 0] = k + 1
    blk_n[c, 1] = seg
    if k + 1 == blk.shape[1]:
        flush_block(acc_n[c], rec.acc_mean[c], rec.acc_m2[c], blk[c], blk_n[c], buf)


@njit_inline
def record(c, u, th, pos, rec, mc, buf):  # type: ignore[no-untyped-def]
    """Streaming outputs of chain c for its u-th draw after burn-in (module docstring)."""
    if rec.acc_n.shape[1] > 0:
        _record_moments(c, u, th, rec, buf)
    d = th.shape[0]
    thin = rec.thin
    if thin > 0 and u % thin == 0:
        k = u // thin - 1
        if k < rec.trace.shape[1]:
            for j in range(d):
                rec.trace[c, k, j] = th[j]
    obs = rec.obs
    for k in range(obs.shape[0]):
        rec.obs_sum[c, k] += row_dot(obs, k, th)
    pos_n = rec.pos_n
    if pos_n.shape[1] > 0:
        pos_mean = rec.pos_mean
        pos_n[c, pos] += 1
        centre = rec.pos_centre
        if centre.shape[0] > 0:  # sums of d and d², d = θ − centre
            for j in range(d):
                dj = th[j] - centre[j]
                pos_mean[c, pos, j] += dj
                rec.pos_m2[c, pos, j] += dj * dj
        else:
            inv_p = 1.0 / pos_n[c, pos]
            for j in range(d):
                delta = th[j] - pos_mean[c, pos, j]
                pos_mean[c, pos, j] += delta * inv_p
                rec.pos_m2[c, pos, j] += delta * (th[j] - pos_mean[c, pos, j])
    ts = rec.theta_sum
    if ts.shape[1] > 0:  # Σθ and Σθ² (the SMILE ensembles' moments)
        t2 = rec.theta_sq_sum
        for j in range(d):
            ts[c, j] += th[j]
            t2[c, j] += th[j] * th[j]
    if thin > 0 and u % thin == 0:  # the MCLMC samplers' step size (and Σ ΔE) at the same draws
        k = u // thin - 1
        if k < rec.step_trace.shape[1]:
            rec.step_trace[c, k] = mc.step[c]
        if k < rec.energy_trace.shape[1]:
            rec.energy_trace[c, k] = mc.stats[c, STAT_DE_SUM]


@njit
def finish(c, rec, diverged, buf):  # type: ignore[no-untyped-def]
    """Merge chain c's pending covariance block when this is the run's last call (``flush``)."""
    if rec.flush and diverged[c] < 0 and rec.blk_n[c, 0] > 0:
        flush_block(rec.acc_n[c], rec.acc_mean[c], rec.acc_m2[c], rec.blk[c], rec.blk_n[c], buf)


@njit_inline
def schedule(t, decay):  # type: ignore[no-untyped-def]
    """s_t = t^{−γ} (1 when γ = 0)."""
    if decay != 0.0:
        return float(t) ** (-decay)
    return 1.0


# --------------------------------------------------------------------------- general (NumPy-gradient) path
@njit
def draw_batches(batch, state, n_data, batch_size, idx):  # type: ignore[no-untyped-def]
    """Next minibatch of every live chain into ``idx`` (C, B) from the batch schedule named ``batch``; returns
    the batch length.

    All chains start at epoch position 0 and share N and B, so their batch lengths agree.
    """
    numba.literally(batch)
    nb = 0
    for c in range(state.theta.shape[0]):
        if state.diverged[c] >= 0:
            continue
        nb, state.epoch_pos[c] = call_batch(batch, state.rng[c], state.perm[c], n_data, batch_size, state.epoch_pos[c], idx[c])
    return nb


@njit
def advance(move, state, t, burn_in, grads, ora, decay, p, rec, mc):  # type: ignore[no-untyped-def]
    """Step t of every live chain given its data gradient ``grads[c]`` (overwritten): prior, the move named
    ``move``, divergence, outputs — the same code as the engine's loop after its gradient. ``rec.flush``
    merges the pending covariance blocks (set it on the run's last step only).
    """
    numba.literally(move)
    theta = state.theta
    diverged = state.diverged
    d = theta.shape[1]
    xi = np.empty(d)
    buf = np.empty(d)
    ld = np.empty(d)
    fd = np.empty(d)
    for j in range(d):
        ld[j] = p.lam[j, j]
        fd[j] = p.fac[j, j]
    s = schedule(t, decay)
    for c in range(theta.shape[0]):
        if diverged[c] >= 0:
            continue
        th = theta[c]
        g = grads[c]
        add_prior(ora.prior_kind, ora.prior, th, g)
        state.clip_count[c] += call_move(move, th, state.mom[c], g, state.rng[c], s, math.sqrt(s), p, ld, fd, xi, buf)
        # the step's tail as in engine._chain, written out there and in smile_chain.general_phase (why: engine._chain)
        if diverges(th):
            diverged[c] = t
            continue
        if t > burn_in:
            record(c, t - burn_in, th, state.epoch_pos[c], rec, mc, buf)
        finish(c, rec, diverged, buf)
