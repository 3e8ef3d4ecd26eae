"""Kernels vs their pure-Python twins, compile counts, determinism, batching, divergence, streaming outputs."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sgtune.core.config import Dynamics, RunSpec
from sgtune.models import get_model
from sgtune.sampler.registry import ClippedSGLDOptions, SGLRWOptions, options_for
from sgtune.diagnostics.mcse import covariance_batch_means
from sgtune.core.errors import NotPositiveDefiniteError, SgtuneError, UnstableStepSizeError
from sgtune.sampler import engine, kernels, run_chains, run_quadratic_chains
from sgtune.sampler._jit import get_num_threads, set_num_threads
from sgtune.sampler.rng import chain_states
from sgtune.sampler.reference import ReferenceBackend, batch_indices
from sgtune.sampler.rng import Xoshiro256PP
from tests._threads import many_threads

# kernel vs twin: same arithmetic in a different order (loops vs BLAS) along ≤ 60 contracting steps
TWIN_RTOL, TWIN_ATOL = 1e-12, 1e-13


def _problem(name, n=40, d=3, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    theta = np.array([0.5, -0.3, 0.2])[:d]
    if name == "logistic":
        y = (r.random(n) < 1 / (1 + np.exp(-X @ theta))).astype(float)
    elif name == "poisson":
        y = r.poisson(np.exp(X @ theta * 0.5)).astype(float)
    else:
        y = X @ theta + r.standard_normal(n)
    return X, y


def _assert_same(a, b):
    for field in ("final_state", "mean", "cov", "chain_means", "chain_covs", "batch_covs"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=TWIN_RTOL, atol=TWIN_ATOL,
                                   err_msg=field)
    for field in ("trace", "observable_means", "epoch_position_mean", "epoch_position_var"):
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None) == (y is None), field
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=TWIN_RTOL, atol=TWIN_ATOL, err_msg=field)
    np.testing.assert_array_equal(a.diverged_at, b.diverged_at)
    assert a.clip_fraction == b.clip_fraction


CASES = [
    # (model, sampler, batching, step kind, beta, momentum, decay, prior)
    ("linear", "sgld", "replacement", "dense", math.inf, 0.0, 0.0, 0.0),
    ("logistic", "sgld", "without-replacement", "dense", 40.0, 0.5, 0.0, 1.0),
    ("poisson", "sgld", "reshuffle", "diag", 40.0, 0.0, 0.3, "dense"),
    ("beta-linear", "sgld", "replacement", "scalar", 40.0, 0.0, 0.0, 0.0),
    ("logistic", "sglrw", "reshuffle", "diag", 40.0, 0.0, 0.0, 0.5),
    ("linear", "sglrw", "replacement", "scalar", 5.0, 0.0, 0.0, 0.0),
    ("linear", "clipped-sgld", "without-replacement", "diag", 40.0, 0.2, 0.5, 0.0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c[:4])))
def test_glm_kernel_matches_twin(case):
    name, sampler, batching, kind, beta, kappa, decay, prior = case
    X, y = _problem(name)
    d = X.shape[1]
    step = {"dense": np.array([[0.2, 0.05, 0.0], [0.05, 0.15, 0.02], [0.0, 0.02, 0.1]]),
            "diag": np.array([0.2, 0.1, 0.15]), "scalar": 0.1}[kind]
    if prior == "dense":
        prior = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.0], [0.0, 0.0, 0.5]])
    model = get_model(name, beta_power=1.5) if name == "beta-linear" else name
    dyn = Dynamics(step, 4, inv_temperature=beta, momentum=kappa, batching=batching, decay=decay)
    run = RunSpec(60, n_chains=2, burn_in=10, thin=3, seed=11, batches_per_chain=3)
    kw = dict(prior_precision=prior, initial=np.zeros(d), observables=np.array([[1.0, 0.0, 2.0], [0.0, -1.0, 0.5]]),
              epoch_moments=batching == "reshuffle")
    a = run_chains(model, (X, y), dyn, run, options_for(sampler), backend="numba", **kw)
    b = run_chains(model, (X, y), dyn, run, options_for(sampler), backend=ReferenceBackend(), **kw)
    _assert_same(a, b)


@pytest.mark.parametrize("noise", ["gaussian", "stable"])
def test_quadratic_kernel_matches_twin(noise):
    A = np.array([[2.0, 0.3], [0.3, 1.0]])
    dyn, run = Dynamics(0.05, 1, inv_temperature=10.0), RunSpec(50, n_chains=3, burn_in=5, thin=2, seed=5)
    kw: dict = dict(mean=[1.0, -1.0])
    if noise == "gaussian":
        kw["noise_cov"] = np.array([[1.0, 0.2], [0.2, 0.5]])
    else:
        kw.update(noise_alpha=1.5, noise_scale=0.3)
    a = run_quadratic_chains(A, dyn, run, backend="numba", **kw)
    b = run_quadratic_chains(A, dyn, run, backend=ReferenceBackend(), **kw)
    _assert_same(a, b)


def test_blocked_covariance_matches_per_step_welford_twin():
    # D = 11 exercises the 8-wide register blocks and the remainder; 193 post-burn-in draws in 3 segments
    # (64, 64, 65) fill blocks of COV_BLOCK = 32, flush partial blocks at segment ends and at the end of the
    # run; the chunked run (progress) must give the same numbers as one call and as the twin's Welford.
    r = np.random.default_rng(4)
    d = 11
    Q = r.standard_normal((d, d))
    A = Q @ Q.T / d + np.eye(d)
    dyn = Dynamics(0.1, 1, inv_temperature=10.0)
    run = RunSpec(200, n_chains=2, burn_in=7, seed=8, batches_per_chain=3)
    kw = dict(noise_cov=np.eye(d) * 0.5, mean=r.standard_normal(d))
    a = run_quadratic_chains(A, dyn, run, backend="numba", **kw)
    chunked = run_quadratic_chains(A, dyn, run, backend="numba", progress=lambda done, total: None, **kw)
    b = run_quadratic_chains(A, dyn, run, backend=ReferenceBackend(), **kw)
    _assert_same(a, b)
    np.testing.assert_array_equal(a.batch_covs, chunked.batch_covs)
    np.testing.assert_array_equal(a.chain_means, chunked.chain_means)


def test_one_specialisation_per_combination_used():
    # the composed kernel is specialised on its two component names (gradient oracle, step rule); every other
    # argument must keep one type whatever the run (chain count, chunking, data, batching scheme, Λ kind, β) —
    # the batch schedule is a run-time number (kernels.batch_by_kind) — so each (gradient, step) combination
    # compiles exactly once, whatever its batch schedules
    X, y = _problem("logistic")
    X2, y2 = _problem("linear", n=30)
    for c, batching in ((1, "replacement"), (3, "reshuffle"), (5, "without-replacement")):
        run_chains("logistic", (X, y), Dynamics(0.1, 4, inv_temperature=40.0, batching=batching),
                   RunSpec(20, n_chains=c, seed=c))
        run_chains("logistic", (X, y), Dynamics(0.1, 4, inv_temperature=40.0), RunSpec(20, n_chains=c, seed=c),
                   SGLRWOptions(), progress=lambda done, total: None)
        run_chains("linear", (X2, y2), Dynamics(0.1, 3, batching=batching), RunSpec(20, n_chains=c, seed=c),
                   prior_precision=1.0 if c == 3 else 0.0)
    run_quadratic_chains(np.eye(2), Dynamics(np.eye(2) * 0.1, 1), RunSpec(20, n_chains=2))
    run_quadratic_chains(np.eye(2), Dynamics(np.eye(2) * 0.1, 1, inv_temperature=5.0), RunSpec(20, n_chains=3))
    combos: dict[tuple, list] = {}
    for sig in engine._chains.signatures:
        assert str(sig[2]) == "int64", sig  # the batch schedule: a number, not a specialisation
        combos.setdefault(tuple(sig[:2]), []).append(sig)
    assert len(combos) >= 3  # GLM × (sgld, sglrw), each for all 3 batchings; the quadratic oracle
    for key, sigs in combos.items():
        assert len(sigs) == 1, (key, sigs)
    # the per-chain loop too: the chain index must reach it as int64 only (a prange index reached it as int64 and
    # as uint64: two compiles per combination, issue 38). Its on-disk index holds every signature compiled with this
    # cache (in this process or an earlier one; a kernel loaded from the cache does not type _chain again), keyed
    # by the CPU it was built for
    cached: dict[tuple, list] = {}
    for sig, codegen_key, *_ in _cache_index(engine._chain):
        cached.setdefault((tuple(sig[:3]), codegen_key), []).append(sig)
    for sig in engine._chain.signatures:
        assert str(sig[3]) == "int64", sig
    assert len(cached) >= 3
    for key, sigs in cached.items():
        assert len(sigs) == 1, (key, sigs)


def _cache_index(dispatcher):
    """The keys of a dispatcher's on-disk cache index ((signature, codegen magic tuple, code hash) each;
    numba's own reader of its index, ``numba.core.caching``)."""
    cache = dispatcher._cache
    assert cache.cache_path, "the engine's kernels are cached (sgtune.sampler._jit)"
    return list(cache._cache_file._load_index())


def test_deterministic_regardless_of_threads_and_chunks():
    X, y = _problem("logistic", n=200)
    args = (Dynamics(0.2, 8, inv_temperature=200.0), RunSpec(400, n_chains=6, seed=3, thin=7))
    before = get_num_threads()
    try:
        set_num_threads(1)
        one = run_chains("logistic", (X, y), *args)
        set_num_threads(many_threads(before))
        many = run_chains("logistic", (X, y), *args)
    finally:
        set_num_threads(before)
    calls = []
    chunked = run_chains("logistic", (X, y), *args, progress=lambda done, total: calls.append(done))
    for other in (many, chunked):
        np.testing.assert_array_equal(one.final_state, other.final_state)
        np.testing.assert_array_equal(one.trace, other.trace)
        np.testing.assert_array_equal(one.cov, other.cov)
    assert calls[-1] == 400 and len(calls) > 1


def _epoch_batches(batching, n=12, b=4, steps=30, seed=9):
    st = chain_states(seed, 1)[0]
    perm = np.arange(n, dtype=np.int64)
    out = kernels.batch_schedule(kernels.BATCH_FNS[batching], st.copy(), perm.copy(), n, b, steps)
    # the twin's schedule from the same stream must be identical
    gen, p2, pos = Xoshiro256PP(st), perm.copy(), 0
    for t in range(steps):
        idx, pos = batch_indices(gen, p2, n, b, batching, pos)
        np.testing.assert_array_equal(out[t, : len(idx)], idx)
    return out


def test_reshuffling_visits_every_point_once_per_epoch():
    n, b = 12, 4
    out = _epoch_batches("reshuffle", n, b, steps=30)
    r = n // b
    epochs = [np.sort(out[e * r:(e + 1) * r].ravel()) for e in range(30 // r)]
    for e in epochs:
        np.testing.assert_array_equal(e, np.arange(n))
    # different permutations across epochs (probability of two equal orders is 1/12!)
    assert not np.array_equal(out[0:r], out[r:2 * r])


def test_reshuffling_with_ragged_last_batch():
    out = _epoch_batches("reshuffle", n=10, b=4, steps=9)  # R = 3 batches: 4, 4, 2
    for e in range(3):
        block = out[3 * e:3 * e + 3]
        assert (block[2, 2:] == -1).all()
        np.testing.assert_array_equal(np.sort(block[block >= 0]), np.arange(10))


def test_without_replacement_batches_are_distinct_and_uniform():
    n, b, steps = 10, 4, 20000
    out = _epoch_batches("without-replacement", n, b, steps=steps)
    assert all(len(set(row)) == b for row in out[:500])
    freq = np.bincount(out.ravel(), minlength=n) / (steps * b)
    # each index appears with probability 1/N per slot; multinomial-ish se sqrt(p(1-p)/(steps·b)) (slots
    # within a step are negatively correlated, which only shrinks the se); |z| < 5
    assert np.all(np.abs(freq - 1 / n) / math.sqrt((1 / n) * (1 - 1 / n) / (steps * b)) < 5)


def test_divergence_stops_only_that_chain():
    init = np.zeros((3, 2))
    init[1] = 1e151  # beyond the divergence bound at the first step
    res = run_quadratic_chains(np.eye(2), Dynamics(0.5, 1, inv_temperature=10.0), RunSpec(100, n_chains=3),
                               initial=init)
    np.testing.assert_array_equal(res.diverged_at, [-1, 1, -1])
    assert res.n_diverged == 1
    assert np.isnan(res.chain_means[1]).all() and np.isfinite(res.mean).all()


def test_all_chains_diverging_raises():
    with pytest.raises(UnstableStepSizeError, match="all 2 chains diverged"):
        run_quadratic_chains(np.eye(1), Dynamics(2.5, 1), RunSpec(2000, n_chains=2), initial=[1.0])


def test_streaming_moments_equal_trace_moments():
    X, y = _problem("logistic", n=100)
    res = run_chains("logistic", (X, y), Dynamics(0.3, 5, inv_temperature=100.0, batching="reshuffle"),
                     RunSpec(3000, n_chains=4, burn_in=200, thin=1, batches_per_chain=4, seed=2),
                     observables=np.array([[1.0, 2.0, -1.0]]), epoch_moments=True)
    tr = res.trace  # (C, 2800, D), every draw after burn-in
    cov, se, k = covariance_batch_means(tr, n_batches=16)
    np.testing.assert_allclose(res.cov, cov, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(res.cov_standard_error, se, rtol=1e-8)
    assert res.n_batches == k == 16
    np.testing.assert_allclose(res.mean, tr.reshape(-1, 3).mean(axis=0), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(res.observable_means[:, 0], tr @ np.array([1.0, 2.0, -1.0]) @ np.ones(2800) / 2800,
                               rtol=1e-10)
    # position in the epoch after step t is t mod R (R = 20); trace index u−1 is step t = burn_in + u
    t = 200 + np.arange(1, 2801)
    pos = t % 20
    for k_ in (0, 7, 19):
        sel = tr[:, pos == k_].reshape(-1, 3)
        np.testing.assert_allclose(res.epoch_position_mean[k_], sel.mean(axis=0), rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(res.epoch_position_var[k_], sel.var(axis=0), rtol=1e-9, atol=1e-14)


def test_clipped_sgld_clips_far_from_the_mode():
    # full-batch linear regression (the GLM oracle with clipped SGLD, the specialisation the twin case above compiles):
    # at θ0 every coordinate's drift λ|g_j| ≥ 0.1·1e3 ≫ r = sqrt(2·0.1/10) ≈ 0.14, so every coordinate update is
    # clipped, and θ moves by at most 2r per step, so it stays far from the mode (the drift stays that large) in 5 steps
    X, y = _problem("linear")
    theta0 = np.array([1e4, -1e4, 1e4])
    assert np.all(np.abs(get_model("linear").per_sample_grads(theta0, X, y).mean(axis=0)) > 1e3)
    res = run_chains("linear", (X, y), Dynamics(0.1, len(y), inv_temperature=10.0, batching="without-replacement"),
                     RunSpec(5, n_chains=2, burn_in=0, batches_per_chain=1), ClippedSGLDOptions(), initial=theta0)
    assert res.clip_fraction == 1.0


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(sampler="sglrw", inv_temperature=math.inf), SgtuneError, "needs a finite inverse temperature"),
    (dict(sampler="sglrw", step=np.array([[0.1, 0.01], [0.01, 0.1]])), SgtuneError, "scalar or diagonal"),
    (dict(step=np.array([[0.1, 0.2], [0.2, 0.1]])), NotPositiveDefiniteError, "symmetric positive-definite"),
    (dict(sampler="hmc"), SgtuneError, "sampler must be one of"),
    (dict(backend="python"), SgtuneError, "pure-Python reference"),
    (dict(batching="stratified"), SgtuneError, "batching must be one of"),
    (dict(momentum=1.0), SgtuneError, "momentum must lie in"),
    (dict(step=np.ones(3)), SgtuneError, "length D = 2"),
    (dict(initial=np.zeros(3)), SgtuneError, "initial must be"),
    (dict(epoch_moments=True), SgtuneError, "epoch_moments needs"),
])
def test_validation_errors(kwargs, error, match):
    X, y = _problem("linear", d=2)
    step = kwargs.pop("step", 0.1)
    kw = dict(batch_size=4, inv_temperature=40.0, initial=np.zeros(2), sampler="sgld", epoch_moments=False,
              backend="numba")
    kw.update(kwargs)
    with pytest.raises(error, match=match):
        dyn = Dynamics(step, kw["batch_size"], inv_temperature=kw["inv_temperature"], momentum=kw.get("momentum", 0.0),
                       batching=kw.get("batching", "replacement"))
        run_chains("linear", (X, y), dyn, RunSpec(10, n_chains=1), options_for(kw["sampler"]), initial=kw["initial"],
                   epoch_moments=kw["epoch_moments"], backend=kw["backend"])


def test_composed_kernel_is_loaded_from_the_disk_cache_in_a_new_process():
    # the kernel's cache key contains its components' names (literal strings, the same in every process), so a
    # second process loads the specialisation instead of compiling it
    import os
    import subprocess
    import sys

    run_quadratic_chains(np.eye(2), Dynamics(0.1, 1, inv_temperature=7.0), RunSpec(5, n_chains=1))  # compiled or loaded here
    code = ("import numpy as np\n"
            "from sgtune.core.config import Dynamics, RunSpec\n"
            "from sgtune.sampler import engine, run_quadratic_chains\n"
            "run_quadratic_chains(np.eye(2), Dynamics(0.1, 1, inv_temperature=7.0), RunSpec(5, n_chains=1))\n"
            "s = engine._chains.stats\n"
            "print(sum(s.cache_hits.values()), sum(s.cache_misses.values()))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    hits, misses = map(int, out.stdout.split())
    assert (hits, misses) == (1, 0), out.stdout + out.stderr


def test_every_batch_number_draws_its_schedule():
    # the engine draws batches through kernels.batch_by_kind (a number per schedule, not a specialisation each):
    # every number must give its schedule's draws — the twin's for the three drawing schedules, the same draws
    # for their *-positions variants (which only count epoch positions as well), no batch for none and full
    base = {name: _epoch_batches(name) for name in ("replacement", "without-replacement", "reshuffle")}
    st = chain_states(9, 1)[0]
    perm = np.arange(12, dtype=np.int64)
    for name in kernels.BATCH_FNS:
        out = kernels.batch_schedule(kernels.BATCH_FNS[name], st.copy(), perm.copy(), 12, 4, 30)
        expected = base.get(name.removesuffix("-positions"))
        if expected is None:
            assert name in ("none", "full") and np.all(out == -1), name
        else:
            np.testing.assert_array_equal(out, expected, err_msg=name)
    assert sorted(kernels.BATCH_KINDS.values()) == list(range(len(kernels.BATCH_FNS)))


def test_the_reference_draws_every_batch_schedule_of_the_engine():
    # the reference backend's batch_indices takes every schedule by its name (the reshuffle model problem's
    # full and *-positions schedules included) and draws the engine's batches from the same stream
    for name in kernels.BATCH_FNS:
        _epoch_batches(name)
