"""Raw model-problem chains (numba) vs the reference backend and vs every closed form, per epoch position.

Monte Carlo tolerance: each compared quantity q has a standard error from the
across-chain spread of per-chain time averages (chains are independent, so
this is honest whatever the autocorrelation).  A check passes when
|z| = |q̂ − q| / se < Φ⁻¹(1 − α/(2m)) with α = 1e-3 and m the number of
quantities compared in that test (Bonferroni).
"""
from __future__ import annotations

import numpy as np
import pytest
from _timeouts import HANG_GUARD_S
from scipy.stats import norm

from sgtune.core.config import Dynamics, RunSpec
from sgtune.models import get_model
from sgtune.core.errors import SgtuneError, UnstableStepSizeError
from sgtune.sampler import reshuffle as smp
from sgtune.theory.reshuffle import reshuffle_bias
from sgtune.sampler.reference import ReferenceBackend
from sgtune.sampler.rng import Xoshiro256PP

# Not re-run under a generic CPU (test_portability.py): the 1-D Gaussian-mean chain (h < 2) is an affine,
# contracting map of θ driven by the
# same random stream on every CPU: other rounding moves the chain by rounding only (it does not grow), so it
# cannot change a result (the module docstring of test_portability.py).
ALPHA = 1e-3
X12 = np.random.default_rng(11).normal(size=12) * 1.7 + 0.4


def _zcrit(m: int) -> float:
    return float(norm.ppf(1 - ALPHA / (2 * m)))


@pytest.mark.parametrize("scheme", ["ula", "rm", "rm_with_replacement", "rr"])
def test_numba_matches_the_reference_backend(scheme: str) -> None:
    kw = dict(scheme=scheme, n_chains=3, n_epochs=6, burn_in_epochs=2, seed=17)
    a = smp.run_reshuffle_chains(X12, 3, 0.4, **kw)
    b = smp.run_reshuffle_chains(X12, 3, 0.4, backend=ReferenceBackend(), **kw)
    # identical integer streams; libm vs math.log/cos may differ by an ulp → 1e-12
    assert np.allclose(a.first_moment, b.first_moment, rtol=1e-12, atol=1e-14)
    assert np.allclose(a.second_moment, b.second_moment, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("scheme", ["ula", "rm", "rr"])
def test_numba_matches_the_reference_backend_without_burn_in(scheme: str) -> None:
    # no burn-in: the engine does not record the starting state θ = x̄ (its d is exactly 0)
    kw = dict(scheme=scheme, n_chains=2, n_epochs=4, burn_in_epochs=0, seed=3, sigma2=2.0)
    a = smp.run_reshuffle_chains(X12, 4, 0.7, **kw)
    b = smp.run_reshuffle_chains(X12, 4, 0.7, backend=ReferenceBackend(), **kw)
    assert np.allclose(a.first_moment, b.first_moment, rtol=1e-12, atol=1e-14)
    assert np.allclose(a.second_moment, b.second_moment, rtol=1e-12, atol=1e-14)


def test_streams_are_per_chain_and_reproducible() -> None:
    from sgtune.sampler import engine

    before = len(engine._chains.signatures)
    a = smp.run_reshuffle_chains(X12, 3, 0.4, n_chains=4, n_epochs=20, seed=5)
    b = smp.run_reshuffle_chains(X12, 3, 0.4, n_chains=7, n_epochs=20, seed=5)
    assert np.array_equal(a.second_moment, b.second_moment[:4])  # chain c independent of n_chains
    c = smp.run_reshuffle_chains(X12, 3, 0.4, n_chains=4, n_epochs=20, seed=6)
    assert not np.array_equal(a.second_moment, c.second_moment)
    smp.run_reshuffle_chains(X12[:6], 2, 0.4, n_chains=3, n_epochs=5, seed=5)
    assert len(engine._chains.signatures) - before <= 1  # one compilation of the engine per scheme, none per size


def _zscores(x: np.ndarray, b: int, hv: float, n_chains: int, n_epochs: int, seed: int) -> dict[str, np.ndarray]:
    th = reshuffle_bias(x, b, hv)
    r = th.n_batches
    burn = int(np.ceil(40 / (hv * r))) + 1  # transient a^{2t}·Var ≤ e^{−80}: negligible vs any MC error
    out: dict[str, np.ndarray] = {}
    want = {"ula": np.full(r, th.ula_var), "rm": np.full(r, th.rm_var),
            "rm_with_replacement": np.full(r, th.rm_with_replacement_var), "rr": th.rr_by_position_var}
    for i, (scheme, w) in enumerate(want.items()):
        ch = smp.run_reshuffle_chains(x, b, hv, scheme=scheme, n_chains=n_chains, n_epochs=n_epochs,
                                      burn_in_epochs=burn, seed=seed + i)
        out[f"{scheme}_var"] = (ch.var - w) / ch.var_se
        out[f"{scheme}_mean"] = ch.mean / ch.mean_se  # every scheme's mean is exact: x̄
        if scheme == "rr":
            out["rr_average_var"] = np.array([(ch.average_var - th.rr_average_var) / ch.average_var_se])
            out["rr_published_average"] = np.array(
                [(ch.average_var - _published_average_var(th)) / ch.average_var_se])
        if scheme == "rm":
            published = th.target_var * (1 + hv * (1 + r) / (2 - hv))
            out["rm_published"] = np.array([(ch.var.mean() - published) / ch.var_se.mean()])
    return out


def _published_average_var(th) -> float:  # type: ignore[no-untyped-def]
    """Published ε̄ (v = R, k averaged inside the square), as a variance."""
    hv, r = th.step, th.n_batches
    a = 1 - hv
    m1 = np.mean(a ** np.arange(r))
    m2 = np.mean(a ** (2 * np.arange(r)))
    Y = a ** r
    eps = hv / (2 - hv) + (r / (r - 1)) * (hv * r / (2 - hv) - m2 * (1 - Y) / (1 + Y) - (1 - m1) ** 2)
    return th.target_var * (1 + eps)


def _check(z: dict[str, np.ndarray]) -> None:
    tested = {k: v for k, v in z.items() if "published" not in k}
    m = sum(v.size for v in tested.values())
    zc = _zcrit(m)
    worst = max(float(np.max(np.abs(v))) for v in tested.values())
    print(f"m = {m} quantities, Bonferroni z-threshold {zc:.2f}, max |z| = {worst:.2f}")
    for k, v in tested.items():
        print(k, np.round(v, 2))
        assert np.all(np.abs(v) < zc), (k, v, zc)


@pytest.mark.mc
@pytest.mark.parametrize("hv", [0.3, 1.5])
def test_chains_match_every_formula_fast(hv: float) -> None:
    z = _zscores(X12, 3, hv, n_chains=200, n_epochs=400, seed=100)
    _check(z)


@pytest.mark.mc
def test_published_formulas_rejected_by_simulation() -> None:
    # h = 0.3, R = 4: the published RM error is off by h/(2−h) ≈ 0.18 of the target variance
    z = _zscores(X12, 3, 0.3, n_chains=200, n_epochs=400, seed=300)
    _check(z)
    print("published RM z =", z["rm_published"], " published RR-average z =", z["rr_published_average"])
    # both published formulas are rejected at the Bonferroni threshold for these 2 tests
    assert abs(z["rm_published"][0]) > _zcrit(2)
    assert abs(z["rr_published_average"][0]) > _zcrit(2)


@pytest.mark.mc
def test_large_step_rr_worse_than_rm_in_simulation() -> None:
    x = X12
    th = reshuffle_bias(x, 3, 1.8)
    assert th.rr_average_var > th.rm_var
    rr = smp.run_reshuffle_chains(x, 3, 1.8, scheme="rr", n_chains=200, n_epochs=400, burn_in_epochs=20, seed=7)
    rm = smp.run_reshuffle_chains(x, 3, 1.8, scheme="rm", n_chains=200, n_epochs=400, burn_in_epochs=20, seed=8)
    diff = rr.average_var - rm.var.mean()
    se = np.hypot(rr.average_var_se, rm.var_se.mean())  # conservative: mean of positional SEs ≥ SE of mean
    assert diff / se > _zcrit(1)


@pytest.mark.slow
@pytest.mark.mc
@pytest.mark.parametrize("hv", [0.05, 0.3, 1.0, 1.5, 1.9])
@pytest.mark.parametrize("n,b", [(12, 3), (20, 2), (6, 2)])
def test_chains_match_every_formula_slow(hv: float, n: int, b: int) -> None:
    x = np.random.default_rng(n).standard_t(5, size=n)
    z = _zscores(x, b, hv, n_chains=1000, n_epochs=4000, seed=1000)
    _check(z)


def test_bad_scheme() -> None:
    with pytest.raises(SgtuneError, match=r"scheme = 'sgd' is unknown"):
        smp.run_reshuffle_chains(X12, 3, 0.1, scheme="sgd")


def test_bad_step() -> None:
    with pytest.raises(UnstableStepSizeError, match=r"0 < h < 2"):
        smp.run_reshuffle_chains(X12, 3, 2.5)


def test_batch_not_dividing() -> None:
    with pytest.raises(SgtuneError, match=r"does not divide N = 12"):
        smp.run_reshuffle_chains(X12, 5, 0.1)


def test_one_chain_refused() -> None:
    with pytest.raises(SgtuneError, match=r"n_chains must be >= 2"):
        smp.run_reshuffle_chains(X12, 3, 0.1, n_chains=1)


@pytest.mark.mc
def test_sampler_core_batching_matches_formulas() -> None:
    """The general sampler core (run_chains, linear model = this model problem) per epoch position.

    linear model l_n = (y_n − θ)²/(2σ²) with x_n = 1, β = N and Λ = hσ² is exactly
    θ' = θ − h(θ − ȳ_b) + sqrt(2hσ²/N)ξ.  Standard errors from 10 independent runs
    (t distribution with 9 degrees of freedom, Bonferroni over the 6 quantities).
    """
    from scipy.stats import t as student_t

    from sgtune.sampler.driver import run_chains

    n, b, hv = 12, 3, 0.3
    th = reshuffle_bias(X12, b, hv)
    want = {"reshuffle": th.rr_by_position_var, "without-replacement": np.array([th.rm_var]),
            "replacement": np.array([th.rm_with_replacement_var])}
    reps = 10
    crit = float(student_t.ppf(1 - ALPHA / (2 * 6), reps - 1))
    for batching, w in want.items():
        vals = []
        for seed in range(reps):
            r = run_chains(get_model("linear", noise_variance=th.sigma2), (np.ones((n, 1)), X12),
                           Dynamics(hv * th.sigma2, b, inv_temperature=n, batching=batching),
                           RunSpec(4000, n_chains=16, burn_in=200, seed=seed),
                           epoch_moments=batching == "reshuffle", initial=[X12.mean()])
            vals.append(r.epoch_position_var[:, 0] if batching == "reshuffle" else [r.cov[0, 0]])
        arr = np.array(vals)
        z = (arr.mean(axis=0) - w) / (arr.std(axis=0, ddof=1) / np.sqrt(reps))
        print(batching, "t =", np.round(z, 2), "threshold", round(crit, 2))
        assert np.all(np.abs(z) < crit), (batching, z)


@pytest.mark.notebook
def test_notebook_smoke() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "reshuffle_vs_robbins_monro.py"
    subprocess.run([sys.executable, str(path)], env={**os.environ, "SGTUNE_SMOKE": "1"}, check=True,
                   capture_output=True, timeout=HANG_GUARD_S)


def test_reshuffle_chains_run_through_the_backend_seam():
    # run_reshuffle_chains hands its plan to run_plan: a backend object sees every call, and the chunked run
    # (run_plan's 50 calls) gives the bits of the default
    from sgtune.core.errors import SgtuneError
    from sgtune.sampler.engine import NumbaBackend
    from sgtune.sampler.reshuffle import run_reshuffle_chains

    class Counting(NumbaBackend):
        calls = 0

        def advance(self, plan, t0, n_steps, last):  # type: ignore[no-untyped-def]
            Counting.calls += 1
            super().advance(plan, t0, n_steps, last)

    x = np.arange(8.0)
    a = run_reshuffle_chains(x, 2, 0.5, n_chains=3, n_epochs=30, burn_in_epochs=2, seed=4)
    b = run_reshuffle_chains(x, 2, 0.5, n_chains=3, n_epochs=30, burn_in_epochs=2, seed=4, backend=Counting())
    assert Counting.calls > 1
    np.testing.assert_array_equal(a.first_moment, b.first_moment)
    np.testing.assert_array_equal(a.second_moment, b.second_moment)
    with pytest.raises(SgtuneError, match="backend must be 'numba'"):
        run_reshuffle_chains(x, 2, 0.5, n_chains=3, n_epochs=30, backend="numpy")


def _shaw_whalley_rr(x: np.ndarray, b: int, h: float, n_epochs: int, burn_in_epochs: int, seed: int,
                     n_chains: int) -> np.ndarray:
    """Random reshuffling as Shaw & Whalley (2025, §4) define the recorded quantity, in Python floats: per chain,
    a Fisher–Yates permutation at each epoch's start, then for k = 0..R−1 the state *before* step k is added to
    position k's sums of d² (kept epochs only), then θ ← θ − h(θ − x̄_k) + sqrt(2hσ²/N) ξ. (C, R) time averages."""
    n, r = len(x), len(x) // b
    xbar, noise_sd = float(np.mean(x)), float(np.sqrt(2.0 * h * np.var(x, ddof=1) / n))
    out = np.zeros((n_chains, r))
    for c, state in enumerate(smp.seed_states(seed, n_chains)):
        s, perm, theta = Xoshiro256PP(state), list(range(n)), xbar
        for epoch in range(burn_in_epochs + n_epochs):
            for i in range(n - 1, 0, -1):
                j = s.randbelow(i + 1)
                perm[i], perm[j] = perm[j], perm[i]
            for k in range(r):
                if epoch >= burn_in_epochs:
                    out[c, k] += (theta - xbar) ** 2
                xb = sum(float(x[perm[i]]) for i in range(k * b, (k + 1) * b)) / b
                theta = theta - h * (theta - xb) + noise_sd * s.normal()
    return out / n_epochs


@pytest.mark.parametrize("burn_in_epochs", [0, 2])
def test_the_plan_records_the_states_shaw_and_whalley_average(burn_in_epochs: int) -> None:
    # the engine records after step t at the next step's position, with burn-in R·burn_in − 1 steps: the same
    # states as the paper's "before step k of each kept epoch" (checked on the reference backend, which the
    # compiled chains match to rounding above)
    kw = dict(n_chains=2, n_epochs=5, burn_in_epochs=burn_in_epochs, seed=9)
    got = smp.run_reshuffle_chains(X12, 3, 0.6, scheme="rr", backend=ReferenceBackend(), **kw)
    want = _shaw_whalley_rr(X12, 3, 0.6, **kw)
    np.testing.assert_allclose(got.second_moment, want, rtol=1e-12, atol=1e-14)
