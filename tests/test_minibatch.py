"""Tests of sgtune.theory.minibatch (Mensch et al. (2025), §4.3 and appendix A.3; docs/conventions.md).

Independent routes used as oracles:
- exact enumeration of EVERY batch of a tiny data set (all N^B ordered tuples with
  replacement, all C(N, B) subsets without), with M computed from its *definition*
  eq. (93), δ⁻²E_ε[Δθ^mb Δθ^mbᵀ − Δθ^fb Δθ^fbᵀ | θ, 𝔅] — for SGLD via E_ξ in closed form,
  for SGLRW by enumerating all 2^D lattice moves — not from eq. (99)/(110);
- hand-derived closed forms (axis-aligned data) and Isserlis' theorem;
- Monte Carlo with tolerances from the Monte Carlo standard error.
"""
from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from _timeouts import HANG_GUARD_S
from scipy.stats import norm

from sgtune.io.data import make_dataset
from sgtune.core.errors import ShapeError, SgtuneError
from sgtune.models import get_model
from sgtune.theory.minibatch import (clipped_sgld_drift, gaussian_minibatch_error, gradient_estimate_terms,
                                     increment_moments, minibatch_error, minibatch_error_from_grads,
                                     minibatch_moment_coefficients, noise_anisotropy,
                                     posterior_minibatch_error, sglrw_drift, sglrw_move_probabilities)

ROOT = Path(__file__).resolve().parents[1]
# exact-vs-enumeration tolerance: the target; the enumeration itself sums up to
# 7776 terms of size ~1e4 in float64, so its own rounding is ~1e-14 relative
ENUM_RTOL = 1e-12


def _bonferroni_z(k: int, alpha: float = 1e-3) -> float:
    """|z| threshold for k simultaneous two-sided tests at family-wise level alpha."""
    return float(norm.ppf(1 - alpha / (2 * k)))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20260511)


def _tiny_problem(seed: int = 3, n: int = 6, d: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * np.array([1.0, 0.5, 2.0])[:d]
    theta_true = rng.standard_normal(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ theta_true))).astype(float)
    ds = make_dataset(X, y)
    model = get_model("logistic")
    theta = rng.standard_normal(d)
    return model, ds, theta


def _batches(n: int, b: int, replacement: bool):
    if replacement:
        return itertools.product(range(n), repeat=b)
    return itertools.combinations(range(n), b)


def _grad_hat(model, ds, theta, gam, batch) -> np.ndarray:
    """∇̂U(θ; 𝔅) straight from eq. (6): −∇log p(θ) − (N/B) Σ_{i∈𝔅} ∇log p(y_i|x_i, θ)."""
    n = ds.n_data
    idx = np.array(batch)
    eta = ds.X[idx] @ theta
    p = 1 / (1 + np.exp(-eta))
    loglik_grad = ((ds.y[idx] - p)[:, None] * ds.X[idx]).sum(axis=0)   # Σ ∇log p(y|x,θ), logistic
    return gam @ theta - (n / len(idx)) * loglik_grad


def _enumerate(model, ds, theta, gam, b, replacement, delta_lrw):
    """Average over every batch of M_SGLD and M_SGLRW from the definition eq. (93)."""
    n, d = ds.X.shape
    a = _grad_hat(model, ds, theta, gam, tuple(range(n)))  # full batch: (N/N) Σ all = ∇U
    moves = np.array(list(itertools.product((-1.0, 1.0), repeat=d))) * math.sqrt(2 * delta_lrw)
    # full-batch lattice second moment: E[Δ_iΔ_j] with P(+) = ½ − ½√(δ/2)∂_iU
    def lrw_second(g):
        p_plus = 0.5 - 0.5 * math.sqrt(delta_lrw / 2) * g
        assert np.all((p_plus >= 0) & (p_plus <= 1)), "tiny problem must not clip here"
        w = np.prod(np.where(moves > 0, p_plus, 1 - p_plus), axis=1)
        return (moves * w[:, None]).T @ moves
    fb = lrw_second(a)
    f = o = 0.0
    m_sgld = np.zeros((d, d))
    m_sglrw = np.zeros((d, d))
    count = 0
    for batch in _batches(n, b, replacement):
        g = _grad_hat(model, ds, theta, gam, batch)
        # SGLD: E_ξ[ΔΔᵀ] = δ²ĝĝᵀ + 2δI for Δ = −δĝ + √(2δ)ξ; the 2δI cancels in eq. (93)
        M1 = np.outer(g, g) - np.outer(a, a)
        M2 = (lrw_second(g) - fb) / delta_lrw**2
        f += np.sum(M1 * M1)
        o += np.sum(M2 * M2)
        m_sgld += M1
        m_sglrw += M2
        count += 1
    return f / count, o / count, m_sgld / count, m_sglrw / count, a


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("b", [1, 2, 3, 5])
def test_exact_expectations_match_enumeration_of_every_batch(replacement, b):
    model, ds, theta = _tiny_problem()
    gam = 0.7 * np.eye(ds.dim)
    # δ small enough that no lattice probability clips for any batch (checked in _enumerate)
    f, o, m1, m2, a = _enumerate(model, ds, theta, gam, b, replacement, delta_lrw=1e-4)
    r = minibatch_error(model, ds, theta, b, prior_precision=gam, replacement=replacement)
    np.testing.assert_allclose(r.grad_potential, a, rtol=ENUM_RTOL, atol=0)
    np.testing.assert_allclose(r.frob2_sgld, f, rtol=ENUM_RTOL)
    # the SGLRW enumeration goes through probabilities ~½ ± 1e-2 and a division by δ² = 1e-8:
    # it loses ~|log10(δ)|·2 digits to cancellation, so it is checked to 1e-6 relative;
    # the exact-vs-exact SGLRW check at 1e-12 is the offdiag enumeration below
    np.testing.assert_allclose(r.frob2_sglrw, o, rtol=1e-6)
    scale = np.abs(m1).max()
    np.testing.assert_allclose(r.expected_m_sgld, m1, rtol=0, atol=ENUM_RTOL * scale)
    np.testing.assert_allclose(r.expected_m_sglrw, m2, rtol=0, atol=1e-6 * scale)
    assert np.allclose(np.diag(m2), 0, atol=1e-6 * scale)


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("n,b", [(5, 1), (5, 2), (5, 4), (5, 5), (4, 3)])
def test_offdiag_and_gaussian_terms_match_enumeration(replacement, n, b):
    model, ds, theta = _tiny_problem(seed=11, n=n, d=3)
    gam = np.diag([0.3, 1.0, 2.0])
    a = _grad_hat(model, ds, theta, gam, tuple(range(n)))
    f = o = 0.0
    G = np.zeros((3, 3))
    k = 0
    for batch in _batches(n, b, replacement):
        zeta = _grad_hat(model, ds, theta, gam, batch) - a
        M = np.outer(zeta, zeta) + np.outer(a, zeta) + np.outer(zeta, a)
        off = M - np.diag(np.diag(M))
        f += np.sum(M * M)
        o += np.sum(off * off)
        G += np.outer(zeta, zeta)
        k += 1
    f, o, G = f / k, o / k, G / k
    r = minibatch_error(model, ds, theta, b, prior_precision=gam, replacement=replacement)
    scale = max(f, 1e-300)
    assert abs(r.frob2_sgld - f) <= ENUM_RTOL * scale
    assert abs(r.frob2_sglrw - o) <= ENUM_RTOL * scale
    assert abs(r.ratio - (o / f if f > 0 else 1.0)) <= 1e-11
    np.testing.assert_allclose(r.expected_m_sgld, G, rtol=0, atol=ENUM_RTOL * max(np.abs(G).max(), 1e-300))
    # Gaussian approximation: Isserlis with the enumerated G
    tr = np.trace(G)
    full_g = tr**2 + 2 * np.sum(G * G) + 2 * (a @ a) * tr + 2 * a @ G @ a
    diag_g = 3 * np.sum(np.diag(G) ** 2) + 4 * np.sum(a**2 * np.diag(G))
    assert abs(r.frob2_sgld_gaussian - full_g) <= ENUM_RTOL * max(full_g, 1e-300)
    assert abs(r.frob2_sglrw_gaussian - (full_g - diag_g)) <= ENUM_RTOL * max(full_g, 1e-300)
    if not replacement and b == n:   # the full batch: no noise at all
        assert r.frob2_sgld == pytest.approx(0, abs=1e-20 * np.abs(a).max() ** 4)
        assert (r.diagonal_share, r.ratio) == (0.0, 1.0)


@pytest.mark.parametrize("replacement", [True, False])
def test_moment_coefficients_match_exact_rational_enumeration(replacement):
    """E[S^k] for a scalar and a 2-D population, enumerated in exact rationals."""
    pop2 = [(Fraction(3), Fraction(-1)), (Fraction(-1), Fraction(2)), (Fraction(-4), Fraction(0)),
            (Fraction(2), Fraction(-3)), (Fraction(0), Fraction(2))]   # both columns sum to 0
    n = len(pop2)
    P2 = [[sum(x[i] * x[j] for x in pop2) for j in range(2)] for i in range(2)]
    for b in range(1, (7 if replacement else n + 1)):
        batches = list(_batches(n, b, replacement))
        c = minibatch_moment_coefficients(n, b, replacement=replacement)

        def mean(fn):
            return sum(fn([pop2[i] for i in bt]) for bt in batches) / len(batches)

        e2 = mean(lambda xs: sum(x[0] for x in xs) ** 2)
        e3 = mean(lambda xs: sum(x[0] for x in xs) ** 3)
        e1122 = mean(lambda xs: sum(x[0] for x in xs) ** 2 * sum(x[1] for x in xs) ** 2)
        p2, p3 = P2[0][0], sum(x[0] ** 3 for x in pop2)
        p1122 = sum(x[0] ** 2 * x[1] ** 2 for x in pop2)
        pairs = P2[0][0] * P2[1][1] + 2 * P2[0][1] ** 2
        assert float(e2) == pytest.approx(c.second * float(p2), rel=1e-15, abs=1e-15)
        assert float(e3) == pytest.approx(c.third * float(p3), rel=1e-15, abs=1e-13)
        assert float(e1122) == pytest.approx(c.fourth_single * float(p1122) + c.fourth_pair * float(pairs),
                                             rel=1e-14, abs=1e-12)


def test_axis_aligned_data_diagonal_share_closed_form():
    """3/(D+2) needs Gaussian-like noise, not only an isotropic covariance.

    Data d_i = ±√D e_{j(i)} (each observation moves one coordinate) have isotropic G, yet
    with ∇U = 0 and replacement the diagonal share is, by hand,
    [D + 3(B−1)] / [D + (B−1)(D+2)]: 1 at B = 1 (M is diagonal), → 3/(D+2) as B → ∞.
    """
    for dim in (2, 5, 20):
        reps = 3
        n = 2 * dim * reps
        U = np.zeros((n, dim))
        for k in range(n):
            U[k, (k // 2) % dim] = math.sqrt(dim) * (1 if k % 2 == 0 else -1)
        for b in (1, 2, 7, 100, 10_000):
            r = minibatch_error_from_grads(U, np.zeros(dim), b)
            hand = (dim + 3 * (b - 1)) / (dim + (b - 1) * (dim + 2))
            assert r.diagonal_share == pytest.approx(hand, rel=1e-12)
            G = r.expected_m_sgld
            np.testing.assert_allclose(G, G[0, 0] * np.eye(dim), rtol=1e-12)  # isotropic
            assert r.diagonal_share_gaussian == pytest.approx(3 / (dim + 2), rel=1e-12)


def test_isotropic_gaussian_share_is_three_over_d_plus_two_only_at_zero_gradient(rng):
    """ζ ~ N(0, gI): share = 3/(D+2) at ∇U = 0 (Isserlis); (3D+4r)/(D(D+2)+2(D+1)r) with r = ‖∇U‖²/g."""
    for dim in (1, 2, 3, 10, 50):
        g = 2.5
        r0 = gaussian_minibatch_error(g * np.eye(dim), np.zeros(dim))
        assert r0.diagonal_share == pytest.approx(3 / (dim + 2), rel=1e-13)
        a = rng.standard_normal(dim) * 3
        rr = float(a @ a) / g
        r1 = gaussian_minibatch_error(g * np.eye(dim), a)
        assert r1.diagonal_share == pytest.approx((3 * dim + 4 * rr) / (dim * (dim + 2) + 2 * (dim + 1) * rr),
                                                  rel=1e-13)


@pytest.mark.mc
def test_gaussian_approximation_matches_monte_carlo(rng):
    dim, k = 4, 200_000
    A = rng.standard_normal((dim, dim))
    G = A @ A.T + np.eye(dim)
    a = rng.standard_normal(dim)
    z = rng.standard_normal((k, dim)) @ np.linalg.cholesky(G).T
    M = z[:, :, None] * z[:, None, :] + a[None, :, None] * z[:, None, :] + z[:, :, None] * a[None, None, :]
    full = np.sum(M * M, axis=(1, 2))
    diag = np.sum(np.diagonal(M, axis1=1, axis2=2) ** 2, axis=1)
    r = gaussian_minibatch_error(G, a)
    zmax = _bonferroni_z(2)
    for est, exact in ((full, r.frob2_sgld), (full - diag, r.frob2_sglrw)):
        assert abs(est.mean() - exact) / (est.std(ddof=1) / math.sqrt(k)) < zmax


def _sample_batches(rng, n, b, k, replacement):
    if replacement:
        return rng.integers(0, n, size=(k, b))
    return np.argsort(rng.random((k, n)), axis=1)[:, :b]


@pytest.mark.mc
@pytest.mark.parametrize("replacement", [True, False])
def test_exact_expectations_match_monte_carlo(rng, replacement):
    """Moderate N (200) where enumeration is impossible: MC over 40 000 batches, Bonferroni z."""
    n, dim, b, k = 200, 4, 5, 40_000
    X = rng.standard_normal((n, dim))
    y = X @ rng.standard_normal(dim) + rng.standard_t(3, n)
    ds = make_dataset(X, y)
    model = get_model("linear", noise_variance=1.5)
    theta = rng.standard_normal(dim)
    u, a = gradient_estimate_terms(model, ds, theta, 0.1)
    idx = _sample_batches(rng, n, b, k, replacement)
    zeta = (n / b) * u[idx].sum(axis=1) - u.sum(axis=0)
    M = zeta[:, :, None] * zeta[:, None, :] + a[None, :, None] * zeta[:, None, :] + zeta[:, :, None] * a[None, None, :]
    full = np.sum(M * M, axis=(1, 2))
    off = full - np.sum(np.diagonal(M, axis1=1, axis2=2) ** 2, axis=1)
    r = minibatch_error(model, ds, theta, b, prior_precision=0.1, replacement=replacement)
    G_mc = M.mean(axis=0)
    G_se = M.std(axis=0, ddof=1) / math.sqrt(k)
    zmax = _bonferroni_z(2 + dim * (dim + 1) // 2)
    for est, exact in ((full, r.frob2_sgld), (off, r.frob2_sglrw)):
        assert abs(est.mean() - exact) / (est.std(ddof=1) / math.sqrt(k)) < zmax
    iu = np.triu_indices(dim)
    assert np.max(np.abs(G_mc - r.expected_m_sgld)[iu] / G_se[iu]) < zmax


def test_gram_trick_path_equals_dense_path(rng):
    """N < D uses ‖DDᵀ‖_F (N×N); it must equal the D×D route."""
    U = rng.standard_normal((7, 40))
    a = rng.standard_normal(40)
    for repl in (True, False):
        r1 = minibatch_error_from_grads(U, a, 3, replacement=repl, return_matrices=False)
        r2 = minibatch_error_from_grads(U, a, 3, replacement=repl, return_matrices=True)
        assert r1.expected_m_sgld is None
        assert r1.frob2_sgld == pytest.approx(r2.frob2_sgld, rel=1e-13)
        assert r1.frob2_sglrw == pytest.approx(r2.frob2_sglrw, rel=1e-13)


def test_invariant_to_permuting_data_rows(rng):
    U = rng.standard_normal((30, 5))
    a = rng.standard_normal(5)
    r1 = minibatch_error_from_grads(U, a, 4, replacement=False)
    r2 = minibatch_error_from_grads(U[rng.permutation(30)], a, 4, replacement=False)
    assert r1.frob2_sgld == pytest.approx(r2.frob2_sgld, rel=1e-13)
    assert r1.frob2_sglrw == pytest.approx(r2.frob2_sglrw, rel=1e-13)


def test_posterior_average_is_the_mean_over_draws(rng):
    model, ds, _ = _tiny_problem(n=20, d=3)
    thetas = rng.standard_normal((5, 3))
    res = posterior_minibatch_error(model, ds, thetas, 4, prior_precision=1.0, step_size=1e-3)
    each = [minibatch_error(model, ds, t, 4, prior_precision=1.0) for t in thetas]
    f = np.mean([e.frob2_sgld for e in each])
    o = np.mean([e.frob2_sglrw for e in each])
    assert res.frob2_sgld == pytest.approx(f, rel=1e-13)
    assert res.e_cov_sgld == pytest.approx(1e-6 * f, rel=1e-13)
    assert res.e_cov_sglrw == pytest.approx(1e-6 * o, rel=1e-13)
    assert res.e_cov_sglrw <= res.e_cov_sgld     # Theorem 4.2's inequality


# ----------------------------------------------------------------------------- one-step moments
def _simulate_increments(rng, u, a, b, delta, scheme, k):
    n, dim = u.shape
    idx = rng.integers(0, n, size=(k, b))
    ghat = a + (n / b) * u[idx].sum(axis=1) - u.sum(axis=0)
    if scheme == "sgld":
        return -delta * ghat + math.sqrt(2 * delta) * rng.standard_normal((k, dim)), ghat
    p_plus = 0.5 - 0.5 * math.sqrt(delta / 2) * ghat           # eq. (12), no clipping here
    assert p_plus.min() >= 0 and p_plus.max() <= 1
    return np.where(rng.random((k, dim)) < p_plus, 1.0, -1.0) * math.sqrt(2 * delta), ghat


@pytest.mark.mc
@pytest.mark.parametrize("scheme", ["sgld", "sglrw"])
def test_one_step_increment_moments_match_eqs_95_and_106(rng, scheme):
    """Simulated E[Δθ] and E[ΔθΔθᵀ] vs eq. (94)/(95) (SGLD) and (103)/(106) (SGLRW)."""
    n, dim, b, k = 40, 3, 2, 400_000
    u = rng.standard_normal((n, dim)) * np.array([1.0, 3.0, 0.5]) + 0.3
    a = np.array([20.0, -35.0, 10.0])
    # δ with √(δ/2)·max|ĝ| ≤ 1 for every possible batch (no clipping): bound |ĝ_j| ≤ |a_j| + 2N max|u|
    gmax = np.max(np.abs(a)) + 2 * n * np.abs(u).max()
    delta = 2.0 / gmax**2 * 0.99
    pred = increment_moments(u, a, b, delta, scheme=scheme)
    inc, _ = _simulate_increments(rng, u, a, b, delta, scheme, k)
    outer = inc[:, :, None] * inc[:, None, :]
    zmax = _bonferroni_z(dim + dim * (dim + 1) // 2)
    z_mean = (inc.mean(0) - pred.mean) / (inc.std(0, ddof=1) / math.sqrt(k))
    iu = np.triu_indices(dim)
    z_sec = ((outer.mean(0) - pred.second_moment) / (outer.std(0, ddof=1) / math.sqrt(k)))[iu]
    if scheme == "sglrw":   # the diagonal is exactly 2δ: zero variance, compare exactly
        assert np.allclose(np.diag(outer.mean(0)), 2 * delta, rtol=1e-12)
        z_sec = z_sec[iu[0] != iu[1]]
    assert np.max(np.abs(z_mean)) < zmax
    assert np.max(np.abs(z_sec)) < zmax


def test_sglrw_and_sgld_second_moments_differ_by_the_diagonal_of_expected_m():
    """E[ΔΔᵀ]_SGLD − E[ΔΔᵀ]_SGLRW = δ² diag(∇U∇Uᵀ + G): SGLD's per-coordinate inflation (docs/conventions.md)."""
    rng = np.random.default_rng(5)
    u = rng.standard_normal((12, 3))
    a = rng.standard_normal(3)
    delta = 1e-3
    m1 = increment_moments(u, a, 2, delta, scheme="sgld")
    m2 = increment_moments(u, a, 2, delta, scheme="sglrw")
    G = minibatch_error_from_grads(u, a, 2).expected_m_sgld
    np.testing.assert_allclose(m1.second_moment - m2.second_moment,
                               delta**2 * np.diag(a**2 + np.diag(G)), rtol=1e-12, atol=0)


# ----------------------------------------------------------------------------- clipping
@pytest.mark.parametrize("replacement", [True, False])
def test_clipped_sglrw_drift_equals_clipped_sgld_drift_by_enumeration(replacement):
    """With clipping, E[Δθ|θ] over every batch and every ±√(2δ) move = E_𝔅[−clip(δ∇̂U; √(2δ))]."""
    model, ds, theta = _tiny_problem(seed=7, n=5, d=3)
    gam = np.eye(3)
    n, dim = ds.X.shape
    delta = 1.0                        # large: ~18 % of the probabilities clip
    s = math.sqrt(2 * delta)
    moves = np.array(list(itertools.product((-s, s), repeat=dim)))
    drift = np.zeros(dim)
    second = np.zeros((dim, dim))
    clip_drift = np.zeros(dim)
    clip_outer = np.zeros((dim, dim))
    n_clipped = 0
    nb = 0
    a = _grad_hat(model, ds, theta, gam, tuple(range(n)))
    G = np.zeros((dim, dim))
    for batch in _batches(n, 3, replacement):
        g = _grad_hat(model, ds, theta, gam, batch)
        raw = 0.5 - 0.5 * math.sqrt(delta / 2) * g          # eq. (12)
        n_clipped += int(np.sum((raw < 0) | (raw > 1)))
        p = np.minimum(np.maximum(raw, 0.0), 1.0)
        w = np.prod(np.where(moves > 0, p, 1 - p), axis=1)
        drift += w @ moves
        second += (moves * w[:, None]).T @ moves
        c = -np.sign(delta * g) * np.minimum(np.abs(delta * g), s)   # −clip(δĝ; R), eq. (18)
        clip_drift += c
        clip_outer += np.outer(c, c)
        np.testing.assert_allclose(sglrw_drift(g, delta), w @ moves, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(clipped_sgld_drift(g, delta), c, rtol=0, atol=1e-15)
        G += np.outer(g - a, g - a)
        nb += 1
    drift, second, clip_drift, clip_outer, G = drift / nb, second / nb, clip_drift / nb, clip_outer / nb, G / nb
    assert 0 < n_clipped < nb * dim   # some clip, some do not
    np.testing.assert_allclose(drift, clip_drift, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.diag(second), 2 * delta, rtol=1e-12)
    off = ~np.eye(dim, dtype=bool)
    np.testing.assert_allclose(second[off], clip_outer[off], rtol=1e-12, atol=1e-15)
    # eq. (106) no longer holds once the probabilities clip
    eq106 = delta**2 * (np.outer(a, a) + G)
    assert np.max(np.abs(second[off] - eq106[off])) > 0.1 * np.max(np.abs(eq106[off]))


def test_move_probabilities_flag_clipping():
    p, clipped = sglrw_move_probabilities(np.array([0.0, 10.0, -100.0]), 0.02)
    np.testing.assert_allclose(p, [0.5, 0.5 - 0.5 * 0.1 * 10.0, 1.0])
    np.testing.assert_array_equal(clipped, [False, False, True])


# ----------------------------------------------------------------------------- noise anisotropy
def test_noise_anisotropy_matches_dense_covariance(rng):
    X = rng.standard_normal((50, 4)) * np.array([1.0, 2.0, 0.5, 3.0])
    y = X @ rng.standard_normal(4) + rng.standard_normal(50)
    ds = make_dataset(X, y)
    model = get_model("linear")
    theta = rng.standard_normal(4)
    for repl, fac in ((True, 1.0), (False, (50 - 8) / 49)):
        res = noise_anisotropy(model, ds, theta, 8, replacement=repl)
        g = -model.per_sample_grads(theta, X, y)            # ∇log p(y_i|x_i, θ)
        V = (50**2 / 8) * fac * np.cov(g.T, bias=True)
        np.testing.assert_allclose(res.noise_cov, V, rtol=1e-12)
        lam = np.linalg.eigvalsh(V)
        assert res.condition_number == pytest.approx(lam[-1] / lam[0], rel=1e-10)
        corr = V / np.sqrt(np.outer(np.diag(V), np.diag(V)))
        lc = np.linalg.eigvalsh(corr)
        assert res.residual_condition_number_diagonal == pytest.approx(lc[-1] / lc[0], rel=1e-10)
        assert res.residual_condition_number_cholesky == pytest.approx(1.0, abs=1e-10)
        assert np.sum(res.diagonal_preconditioner**2) == pytest.approx(4.0, rel=1e-13)


# ----------------------------------------------------------------------------- errors
def test_error_batch_larger_than_n_without_replacement():
    with pytest.raises(SgtuneError, match="batch_size must be <= 6"):
        minibatch_error_from_grads(np.ones((6, 2)), np.zeros(2), 7, replacement=False)


def test_error_grad_potential_wrong_length():
    with pytest.raises(ShapeError, match="grad_potential must have length D = 2"):
        minibatch_error_from_grads(np.ones((6, 2)), np.zeros(3), 2)


def test_error_per_sample_grads_not_matrix():
    with pytest.raises(ShapeError, match="per_sample_grads must be a 2-D array"):
        minibatch_error_from_grads(np.ones(6), np.zeros(1), 2)


def test_error_unknown_scheme():
    with pytest.raises(SgtuneError, match="scheme must be 'sgld' or 'sglrw'"):
        increment_moments(np.ones((6, 2)), np.zeros(2), 2, 0.1, scheme="hmc")


def test_error_non_positive_step():
    with pytest.raises(SgtuneError, match="step_size must be > 0"):
        clipped_sgld_drift(np.ones(2), 0.0)


def test_error_thetas_shape():
    model, ds, _ = _tiny_problem()
    with pytest.raises(ShapeError, match=r"thetas must be \(L, D\)"):
        posterior_minibatch_error(model, ds, np.zeros((2, 5)), 2)


def test_error_zero_noise_coordinate_in_anisotropy():
    X = np.column_stack([np.zeros(10), np.arange(10.0)])
    ds = make_dataset(X, np.arange(10.0))
    with pytest.raises(SgtuneError, match="zero gradient noise"):
        noise_anisotropy(get_model("linear"), ds, np.zeros(2), 3)


# ----------------------------------------------------------------------------- notebook
@pytest.mark.notebook
def test_notebook_runs_at_smoke_size(tmp_path):
    path = ROOT / "notebooks" / "minibatch_sgld_vs_sglrw.py"
    env = {**os.environ, "SGTUNE_SMOKE": "1", "MPLBACKEND": "Agg", "SGTUNE_NOTEBOOK_OUT": str(tmp_path)}
    subprocess.run([sys.executable, str(path)], env=env, check=True, cwd=tmp_path, timeout=HANG_GUARD_S,
                   capture_output=True)
