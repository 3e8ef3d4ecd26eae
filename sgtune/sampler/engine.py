"""The chain engine: one compiled step loop composed of components, and the seam for other backends.

Design
------
A run of C chains is a :class:`ChainPlan`: four components and the named records they share
(:mod:`sgtune.sampler.state`). One step t of chain c in ``_chains`` (ranges of chains on threads, each
with its own xoshiro256++ stream, :mod:`sgtune.sampler.rng`) is::

    nb, pos ← batch_by_kind(k, stream, perm, N, B, pos, idx, …)      batch schedule number k
    clips  += rule_fn(grad_fn, c, θ, m, stream, nb, s_t, oracle, p, mc, work)   step rule (calls the
                                                                         gradient oracle as often as it needs)
    diverged? (‖θ‖₁ ≥ DIVERGENCE_BOUND or non-finite: the chain stops)
    t > burn-in: record(c, t − burn-in, θ, pos, recorder, mc, buf)     recorder

- **batch schedule** (:data:`sgtune.sampler.kernels.BATCH_FNS`): with or without replacement,
  reshuffling, or none (analytic oracles), chosen at run time by its number
  (:func:`sgtune.sampler.kernels.batch_by_kind`);
- **gradient oracle** (:data:`sgtune.sampler.specs.ORACLES`): a model's minibatch gradient (GLM, MLP),
  with the batch-mean loss for the samplers that need it, or an analytic oracle (a quadratic with
  Gaussian or α-stable noise);
- **step rule** (the sampler registry, :data:`sgtune.sampler.registry.SAMPLERS`): SG(L)D with
  momentum and a diagonal or dense Λ, SGLRW, clipped SGLD, SGHMC (:mod:`sgtune.sampler.kernels`),
  the SMILE family with its tuner and pSMILE preconditioner (:mod:`sgtune.sampler.smile_chain`);
- **recorder** (:func:`sgtune.sampler.kernels.record`): streaming moments by segment, trace,
  observables, epoch-position moments, the MCLMC step size.

The gradient oracle and the step rule reach ``_chains`` by their names (strings,
:func:`~sgtune.sampler._jit.component_name`), which the kernel makes compile-time constants with
``numba.literally``: ``_chains`` is compiled once per (oracle, rule) pair actually used, and cached on disk
under that signature (plain numba, :mod:`sgtune.sampler._jit`). The batch schedule is an integer instead
(:data:`sgtune.sampler.kernels.BATCH_KIND_OF`): one branch per step on a loop-invariant number costs nothing
next to a gradient, while each schedule as a name was a compile of its own (11–14 s of CPU cold; the default
test run compiled 31 specialisations for 20 pairs). The step rule, the batch schedules and the small gradient
oracles are inlined into the loop in numba's IR (through the overloads ``call_rule`` and ``call_grad`` of
:mod:`sgtune.sampler._jit`, for components declared with :func:`~sgtune.sampler._jit.component_inline`;
SMILE's large MCLMC rules and the MLP's and multinomial model's gradients stay calls, which keeps their
compile time down; the MCLMC rules borrow their arguments as the loop does, below): called as a function, a
component passes its arrays through numba's reference counting on every step (an atomic increment and
decrement each, ≈ 350 per step for a rule: 2–15 % of a step of SG(L)D on logistic regression;
``benchmarks/engine_refcounts.py``, ``benchmarks/bench_engine_ab.py``). Inlining does not remove all of it:
numba still increments and decrements the owner of every array of every record at each inlined call, and its
reference-count pruning gives up on a loop this size (≈ 150 atomic operations per step, more than the whole
arithmetic of a one-dimensional model problem). So ``_chain`` runs its loop on views of the records that own
nothing (``borrowed``: same data and types, a null owner, so the reference counting compiles away) and does its
writes after the loop through the records it was given. The step loop allocates nothing; all state lives
in the records' arrays and is updated in place, so the driver runs a long chain in chunks (progress,
Ctrl-C) with results independent of the chunking.

The step rule signature, for a new sampler (a :func:`~sgtune.sampler._jit.component_inline`; then one
entry in the registry):
``rule(grad, c, th, m, st, nb, s, ora, p, mc, w) -> clipped coordinates``, with ``grad`` the gradient
oracle's name (call it through ``call_grad(grad, …)``), θ = ``th`` and its
auxiliary vector ``m`` (chain c's rows), the stream ``st``, the batch ``w.idx[:nb]``, the schedule factor
``s``, the :class:`~sgtune.sampler.state.Oracle` ``ora``, the :class:`~sgtune.sampler.state.StepParams`
``p``, the :class:`~sgtune.sampler.state.MclmcState` ``mc`` and the :class:`~sgtune.sampler.state.Work`
scratch ``w`` (``w.grad`` receives the gradient).

Backends: the seam
------------------
The driver (:func:`sgtune.sampler.run_chains`) validates, allocates the records of a
:class:`ChainPlan`, hands it to a backend, and summarises the records. A backend is any object with
``prepare(plan)`` (compile; its time is reported as ``compile_seconds``) and
``advance(plan, t0, n_steps, last)`` (advance every chain by ``n_steps`` steps from step ``t0``,
merging the pending blocks when ``last``). :class:`NumbaBackend` runs ``_chains``;
:class:`~sgtune.sampler.general.NumpyBackend` the general path for models with NumPy gradients
only; :class:`~sgtune.sampler.reference.ReferenceBackend` the reference implementation in plain NumPy (the
oracle of the tests and the template for a new backend). Every entry point (``run_chains``,
``run_quadratic_chains``, ``run_reshuffle_chains``, ``run_sg_gnld``, ``run_smile_ensemble``) builds its plan and
runs it through :func:`run_plan`, with ``backend="numba"``
(:func:`backend_of`) or a backend object. A
GPU backend would implement the same two methods over the same records (reading the components'
names from ``plan.sampler``, ``plan.lam_kind``, ``plan.batching`` and ``plan.oracle_kind``) without
touching the theory, the registry or the driver.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

import numba

from ..core.errors import SgtuneError
from ._jit import call_rule, component_name, get_num_threads, njit, specialisation
from .kernels import BATCH_KIND_OF, batch_by_kind, borrowed, diverges, finish, record, schedule
from .state import ChainPlan, Work

__all__ = ["chain_ranges", "NumbaBackend", "backend_of", "run_plan"]

#: without a progress bar, :func:`run_plan` doubles its chunk after a backend call shorter than this (seconds)
MIN_CALL_SECONDS = 1e-3


@njit
def _chain(grad, rule, batch, c, owned_state, t0, n_steps, burn_in, owned_ora, batch_size, decay, row_sums, owned_p, owned_mc, owned_rec):  # type: ignore[no-untyped-def]
    """Chain c from step t0 + 1 to t0 + n_steps: the one step loop of sgtune (module docstring)."""
    # views that own nothing (``borrowed``) for the step loop; the owned records are used after it
    state = borrowed(owned_state)
    ora = borrowed(owned_ora)
    p = borrowed(owned_p)
    mc = borrowed(owned_mc)
    rec = borrowed(owned_rec)
    diverged = state.diverged
    if diverged[c] >= 0:
        return
    d = state.theta.shape[1]
    st = state.rng[c]
    th = state.theta[c]
    m = state.mom[c]
    pm = state.perm[c]
    ld = np.empty(d)  # diagonals of Λ and of its noise factor, contiguous (per-step constants)
    fd = np.empty(d)
    for j in range(d):
        ld[j] = p.lam[j, j]
        fd[j] = p.fac[j, j]
    # local scratch: LLVM knows it aliases none of the arguments; borrowed in the loop, owned by ``scratch``
    scratch = Work(idx=np.empty(max(batch_size, 1), dtype=np.int64), wk=np.empty(max(ora.work_len, 1)),
                   grad=np.empty(d), xi=np.empty(d), buf=np.empty(d), ld=ld, fd=fd)
    w = borrowed(scratch)
    idx = w.idx
    buf = w.buf
    n_data = ora.X.shape[0]
    # the data (N values: one column) when the batch schedule sums it for the oracle (Schedule.row_sums), else empty
    xs = ora.X.reshape(ora.X.size)
    if not row_sums:
        xs = xs[:0]
    pos = state.epoch_pos[c]
    clips = 0
    for t in range(t0 + 1, t0 + n_steps + 1):
        nb, pos = batch_by_kind(batch, st, pm, n_data, batch_size, pos, idx, xs, w.wk)
        clips += call_rule(rule, grad, c, th, m, st, nb, schedule(t, decay), ora, p, mc, w)
        # the step's tail (divergence, recorder) is written out here, in kernels.advance and in smile_chain.general_phase:
        # shared as one inlined function (record inlined two levels deep), numba's dead-code removal dropped recorder
        # writes (2026-11-29: pos_m2 zeros in golden chains_reshuffle_gnld; with the record's arrays bound to locals
        # first, step_trace and energy_trace zeros in smile_ensembles), the alias-analysis gap kernels.borrowed closes
        # for its views (benchmarks/results/engine_refcounts.txt)
        if diverges(th):
            diverged[c] = t
            break
        if t > burn_in:
            record(c, t - burn_in, th, pos, rec, mc, buf)
    # through the owned records (which also keeps them and the scratch alive for the whole loop)
    finish(c, owned_rec, owned_state.diverged, scratch.buf)
    owned_state.epoch_pos[c] = pos
    owned_state.clip_count[c] += clips


@njit
def _chains(grad, rule, batch, state, t0, n_steps, burn_in, ora, sched, p, mc, rec, c0, c1):  # type: ignore[no-untyped-def]
    """Advance chains c0, …, c1 − 1 by ``n_steps`` steps, composed from the components named ``grad`` and
    ``rule`` and the batch schedule number ``batch`` (module docstring; one specialisation per pair of names).

    A serial loop: :class:`NumbaBackend` runs ranges of chains on threads (the kernels release the GIL).
    A ``prange`` over the chains compiled numba's parfor machinery into every combination: cold, on the
    quadratic oracle, 14–16 s of CPU for this loop against 19–21 s for the ``prange`` (27–28 s when its index
    reached ``_chain`` as int64 and uint64: two compiles), ``benchmarks/bench_compile.py``; the same code per
    chain (every chain has its own stream and records, so the results are the same bits either way).
    """
    numba.literally(grad)
    numba.literally(rule)
    batch_size = sched.batch_size
    decay = sched.decay
    row_sums = sched.row_sums
    for c in range(c0, c1):
        _chain(grad, rule, batch, c, state, t0, n_steps, burn_in, ora, batch_size, decay, row_sums, p, mc, rec)


def chain_ranges(n_chains: int, n_threads: int) -> list[tuple[int, int]]:
    """Contiguous ranges of chains, one per thread (at most ``n_chains``), sizes differing by at most one."""
    k = max(1, min(n_threads, n_chains))
    q, r = divmod(n_chains, k)
    bounds = [0]
    for i in range(k):
        bounds.append(bounds[-1] + q + (i < r))
    return list(zip(bounds[:-1], bounds[1:]))


class NumbaBackend:
    """The compiled engine (``_chains``)."""

    name = "numba"

    def prepare(self, plan: ChainPlan) -> None:
        if plan.init_fn is not None:
            plan.init_fn(plan.state)
        self.advance(plan, 0, 0, False)  # compiles (or loads the cache) without doing any work

    def advance(self, plan: ChainPlan, t0: int, n_steps: int, last: bool) -> None:
        """Chain ranges on ``get_num_threads()`` threads (numba's setting: ``NUMBA_NUM_THREADS``,
        ``set_num_threads``); the first range runs in the calling thread, the others on a pool kept between calls."""
        cached = getattr(self, "_kernel", None)
        if cached is None or cached[0] is not plan:  # names and kernel once per plan (its types never change)
            names = (component_name(plan.grad_fn), component_name(plan.rule_fn),
                     BATCH_KIND_OF[component_name(plan.batch_fn)])
            args = (*names, plan.state, 0, 0, int(plan.burn_in), plan.oracle, plan.sched, plan.params, plan.mclmc,
                    plan.recorder_at(t0, last))
            cached = self._kernel = (plan, names, _kernel_for(args))
        _, names, kernel = cached
        args = (*names, plan.state, int(t0), int(n_steps), int(plan.burn_in), plan.oracle, plan.sched, plan.params,
                plan.mclmc, plan.recorder_at(t0, last))
        ranges = chain_ranges(plan.state.theta.shape[0], get_num_threads() if n_steps > 0 else 1)
        if len(ranges) == 1:
            kernel(*args, *ranges[0])
            return
        pool = _pool(len(ranges) - 1)
        rest = [pool.submit(kernel, *args, c0, c1) for c0, c1 in ranges[1:]]
        kernel(*args, *ranges[0])
        for f in rest:
            f.result()


#: the compiled ``_chains`` by the cheap type key of its arguments (:func:`_type_key`): typing the records with
#: ``numba.typeof`` costs ≈ 0.4 ms a plan, more than a model problem's short run (benchmarks/results/engine_refcounts.txt)
_KERNELS: dict[Any, Any] = {}
#: (threads, pool) of :func:`_pool`
_POOLS: list[tuple[int, ThreadPoolExecutor]] = []


def _type_key(v: Any) -> Any:
    """What numba's type of ``v`` depends on, without building it: an array's dtype, dimension, layout
    (C/F-contiguous flags), writability and alignment; a record's class and fields; a scalar's class (an int's
    sign and size too: numba types 2^63 and above as uint64); a string (a component's name) itself."""
    if isinstance(v, np.ndarray):
        f = v.flags
        return (v.dtype, v.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned)
    if isinstance(v, tuple):
        return (type(v), *(_type_key(e) for e in v))
    if isinstance(v, str):
        return v
    if type(v) is int:
        return (int, -(2**63) <= v < 2**63)
    return type(v)


def _kernel_for(args: tuple[Any, ...]) -> Any:
    """``_chains`` compiled for ``args`` (the call's arguments without the chain range), found by
    :func:`_type_key`."""
    key = _type_key(args)
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = specialisation(_chains, 2, *args, 0, 1)
    return kernel


def _pool(n_workers: int) -> ThreadPoolExecutor:
    """A thread pool of at least ``n_workers`` threads, kept for the next calls (starting threads for each of a
    run's 50 calls cost ≈ 0.1 ms a call)."""
    if not _POOLS or _POOLS[0][0] < n_workers:
        if _POOLS:
            _POOLS.pop()[1].shutdown(wait=False)
        _POOLS.append((n_workers, ThreadPoolExecutor(n_workers, thread_name_prefix="sgtune-chains")))
    return _POOLS[0][1]


def backend_of(backend: Any, where: str) -> Any:
    """The backend object of an entry point's ``backend`` argument: ``"numba"`` (:class:`NumbaBackend`) or an
    object with ``prepare(plan)`` and ``advance(plan, t0, n_steps, last)``; ``where`` names the entry point in
    the error."""
    if isinstance(backend, str):
        if backend == "numba":
            return NumbaBackend()
        raise SgtuneError(f"backend must be 'numba' or a backend object for {where}, got {backend!r}")
    if not (callable(getattr(backend, "prepare", None)) and callable(getattr(backend, "advance", None))):
        raise SgtuneError(f"backend must be 'numba' or an object with prepare(plan) and "
                          f"advance(plan, t0, n_steps, last) for {where}, got {backend!r}")
    return backend


def run_plan(plan: ChainPlan, backend: Any, progress: Callable[[int, int], None] | None) -> tuple[float, float]:
    """Run ``plan`` on ``backend`` in 50 chunks (progress and Ctrl-C between them; one more boundary at
    ``plan.split``); (seconds, compile seconds)."""
    tic = time.perf_counter()
    backend.prepare(plan)
    compile_seconds = time.perf_counter() - tic
    T = plan.n_steps
    if progress is not None:  # compiled (or loaded from the cache): the caller may stop saying "compiling"
        progress(0, T)
    # 50 calls even without a progress bar: Python runs its signal handlers between them, so Ctrl-C stops a
    # long run within ~2 % of its time instead of after it (the chains are identical either way). Without a
    # progress bar, a call shorter than MIN_CALL_SECONDS doubles the chunk: a call costs ≈ 10 µs of Python and
    # unboxing (a 1-epoch model problem, 39 steps of 4 chains, made 39 of them), while an expensive step keeps
    # the 50 calls (a fixed minimum of steps per call would not: 2 048 steps of a large network are seconds)
    chunk = max(1, -(-T // 50))
    tic = time.perf_counter()
    done = 0
    while done < T:
        end = min(done + chunk, T)
        if done < plan.split < end:
            end = plan.split
        call = time.perf_counter()
        backend.advance(plan, done, end - done, end == T)
        done = end
        if progress is not None:
            progress(done, T)
        elif time.perf_counter() - call < MIN_CALL_SECONDS:
            chunk *= 2
    return time.perf_counter() - tic, compile_seconds
