"""The per-chain random streams: reference vector, twin agreement, distributions (MC z-tests)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sgtune.sampler import rng

# Bonferroni-style thresholds: each MC check below uses |z| < 5 (two-sided p ≈ 6e-7 per check).
Z = 5.0


def test_xoshiro_reference_value():
    # xoshiro256++ from state (1, 2, 3, 4): first output = rotl(1 + 4, 23) + 1 = 5·2^23 + 1 (by hand).
    st = np.array([1, 2, 3, 4], dtype=np.uint64)
    assert int(rng.next_u64(st)) == 5 * 2**23 + 1


def test_kernel_stream_equals_python_twin():
    st = rng.chain_states(123, 3)[2]
    twin = rng.Xoshiro256PP(st)
    s = st.copy()
    assert [int(rng.next_u64(s)) for _ in range(200)] == [twin.next_u64() for _ in range(200)]
    assert [int(rng.randbelow(s, 1000003)) for _ in range(200)] == [twin.randbelow(1000003) for _ in range(200)]
    out = np.empty(7)
    rng.fill_normals(s, out)
    np.testing.assert_allclose(out, twin.normals(7), rtol=1e-15, atol=0)
    a = [rng.stable_symmetric(s, 1.3) for _ in range(50)]
    b = [twin.stable_symmetric(1.3) for _ in range(50)]
    np.testing.assert_allclose(a, b, rtol=1e-13)  # libm pow/sin may differ by an ulp
    np.testing.assert_array_equal(s, twin.state())


def test_chain_streams_do_not_depend_on_chain_count():
    np.testing.assert_array_equal(rng.chain_states(7, 3), rng.chain_states(7, 10)[:3])
    assert len({tuple(r) for r in rng.chain_states(7, 64)}) == 64


def test_randbelow_is_uniform():
    s = rng.chain_states(1, 1)[0]
    n, draws = 7, 70_000
    counts = np.bincount([rng.randbelow(s, n) for _ in range(draws)], minlength=n)
    # chi-square goodness of fit; reject only below p = 1e-6
    assert stats.chisquare(counts).pvalue > 1e-6


def test_normals_moments():
    s = rng.chain_states(2, 1)[0]
    x = np.empty(200_001)
    rng.fill_normals(s, x)
    n = x.size
    assert abs(x.mean()) * math.sqrt(n) < Z  # se of the mean = 1/sqrt(n)
    assert abs(x.var() - 1) / math.sqrt(2 / n) < Z  # se of the variance = sqrt(2/n)
    assert abs(np.mean(x**4) - 3) / math.sqrt(96 / n) < Z  # Var(x^4) = 105 − 9 = 96
    assert abs(np.mean(x < -1.0) - stats.norm.cdf(-1.0)) / math.sqrt(0.16 * 0.84 / n) < Z


@pytest.mark.parametrize("alpha", [1.0, 1.5, 2.0])
def test_stable_distribution(alpha):
    s = rng.chain_states(3, 1)[0]
    n = 40_000
    x = np.array([rng.stable_symmetric(s, alpha) for _ in range(n)])
    # P(X <= q) against the closed forms: α=1 Cauchy, α=2 N(0, 2), α=1.5 scipy's levy_stable (S1, β=0)
    for q in (-2.0, -0.5, 0.7, 3.0):
        if alpha == 1.0:
            p = 0.5 + math.atan(q) / math.pi
        elif alpha == 2.0:
            p = stats.norm.cdf(q / math.sqrt(2))
        else:
            p = float(stats.levy_stable.cdf(q, alpha, 0.0))
        assert abs(np.mean(x <= q) - p) / math.sqrt(p * (1 - p) / n) < Z


def test_ziggurat_layers_have_equal_area():
    # independent route: scipy quadrature of the tail and the layer rectangles from the table edges
    from scipy import integrate

    x, f = rng.ZIG_X, rng.ZIG_F
    r = rng.ZIG_R
    tail = integrate.quad(lambda t: math.exp(-0.5 * t * t), r, np.inf, epsabs=1e-15)[0]
    v = r * math.exp(-0.5 * r * r) + tail
    assert x[1] == r and x[256] == 0.0 and np.all(np.diff(x[1:]) < 0)
    np.testing.assert_allclose(x[0] * f[1], v, rtol=1e-12)  # base layer: width x_0, height f(r), incl. tail
    areas = x[1:256] * (f[2:257] - f[1:256])  # layer i ≥ 1: width x_i, height f(x_{i+1}) − f(x_i)
    np.testing.assert_allclose(areas, v, rtol=1e-10)  # the recursion accumulates rounding over 255 layers


def test_ziggurat_twin_over_tail_and_wedges():
    st = rng.chain_states(9, 1)[0]
    n = 40_000
    out = np.empty(n)
    s = st.copy()
    rng.fill_normals(s, out)
    twin = rng.Xoshiro256PP(st)
    np.testing.assert_allclose(out, twin.normals(n), rtol=1e-15, atol=0)
    np.testing.assert_array_equal(s, twin.state())
    assert np.sum(np.abs(out) > rng.ZIG_R) >= 1  # the tail branch was exercised (expected ≈ 10 draws)


def test_normals_distribution_chi_square_and_tail():
    s = rng.chain_states(4, 1)[0]
    n = 400_000
    x = np.empty(n)
    rng.fill_normals(s, x)
    # 64 equiprobable bins: goodness of fit, reject only below p = 1e-6
    edges = stats.norm.ppf(np.linspace(0, 1, 65))
    counts = np.histogram(x, bins=edges)[0]
    assert stats.chisquare(counts).pvalue > 1e-6
    # the tail beyond r (sampled by its own branch) and a strip inside the wedges of the top layers
    for lo, hi in ((rng.ZIG_R, np.inf), (rng.ZIG_X[200], rng.ZIG_X[199])):
        p = 2 * (stats.norm.cdf(hi) - stats.norm.cdf(lo))
        q = np.mean((np.abs(x) > lo) & (np.abs(x) <= hi))
        assert abs(q - p) / math.sqrt(p * (1 - p) / n) < Z


def test_register_state_fillers_equal_single_draws():
    # fill_randbelow / fill_normals / fill_uniforms keep the state in registers; they must consume the stream
    # exactly as repeated randbelow / normal / uniform calls do (same values, same final state)
    st = rng.chain_states(21, 1)[0]
    a, b = st.copy(), st.copy()
    n = 3 * 2**30 + 7  # rejection probability (2^32 mod n)/2^32 ≈ 0.25: the rejection loop runs
    idx = np.empty(500, dtype=np.int64)
    rng.fill_randbelow(a, n, idx, 500)
    np.testing.assert_array_equal(idx, [rng.randbelow(b, n) for _ in range(500)])
    out = np.empty(20_000)
    rng.fill_normals(a, out)
    np.testing.assert_array_equal(out, [rng.normal(b) for _ in range(20_000)])
    u = np.empty(1000)
    rng.fill_uniforms(a, u)
    np.testing.assert_array_equal(u, [rng.uniform(b) for _ in range(1000)])
    np.testing.assert_array_equal(a, b)
