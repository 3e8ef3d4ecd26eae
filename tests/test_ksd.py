"""Kernel Stein discrepancy: closed-form Stein kernel, blocked V-statistic, n^(−1/2) rate, bias detection."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from scipy.stats import chi2

from _tolerances import MC_ALPHA, bonferroni_z
from sgtune.core.config import Dynamics, RunSpec
from sgtune.io.data import make_dataset
from sgtune.core.errors import ShapeError, SgtuneError
from sgtune.diagnostics.ksd import (chain_ksd, chain_ksd_summary, imq_stein_kernel, ksd, posterior_is_gaussian, posterior_ksd,
                        posterior_scores)
from sgtune.models import get_model

#: blocked and dense sums of the same n² terms differ only in summation order: ~n·eps relative
BLOCKED_RTOL = 1e-12


def _stein_kernel_sympy(dim: int):
    """k₀ from its definition by symbolic differentiation of the IMQ kernel (independent of the closed form)."""
    x = sp.symbols(f"x0:{dim}")
    y = sp.symbols(f"y0:{dim}")
    sx = sp.symbols(f"sx0:{dim}")
    sy = sp.symbols(f"sy0:{dim}")
    k = (1 + sum((a - b) ** 2 for a, b in zip(x, y))) ** sp.Rational(-1, 2)
    k0 = (sum(a * b for a, b in zip(sx, sy)) * k
          + sum(sx[d] * sp.diff(k, y[d]) for d in range(dim))
          + sum(sy[d] * sp.diff(k, x[d]) for d in range(dim))
          + sum(sp.diff(k, x[d], y[d]) for d in range(dim)))
    return sp.lambdify((x, y, sx, sy), k0, "math")


def test_imq_stein_kernel_matches_symbolic_definition(rng):
    dim = 3
    f = _stein_kernel_sympy(dim)
    x, y = rng.standard_normal((4, dim)), 1.5 * rng.standard_normal((5, dim))
    sx, sy = rng.standard_normal((4, dim)) * 3, rng.standard_normal((5, dim))  # any vector field works
    got = imq_stein_kernel(x, y, sx, sy)
    want = np.array([[f(x[i], y[j], sx[i], sy[j]) for j in range(5)] for i in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


def test_imq_stein_kernel_matches_finite_differences(rng):
    """Second route: central differences of k (h = 1e-4: O(h²) = 1e-8 truncation, eps/h² = 1e-8 rounding)."""
    dim = 2

    def k(a, b):
        return (1 + np.sum((a - b) ** 2)) ** -0.5

    x, y, sx, sy = (rng.standard_normal(dim) for _ in range(4))
    h = 1e-4
    e = np.eye(dim) * h
    gx = np.array([(k(x + e[d], y) - k(x - e[d], y)) / (2 * h) for d in range(dim)])
    gy = np.array([(k(x, y + e[d]) - k(x, y - e[d])) / (2 * h) for d in range(dim)])
    mixed = sum((k(x + e[d], y + e[d]) - k(x + e[d], y - e[d]) - k(x - e[d], y + e[d]) + k(x - e[d], y - e[d]))
                / (4 * h * h) for d in range(dim))
    want = sx @ sy * k(x, y) + sx @ gy + sy @ gx + mixed
    np.testing.assert_allclose(imq_stein_kernel(x[None], y[None], sx[None], sy[None])[0, 0], want, rtol=1e-6)


@pytest.mark.parametrize("block", [1, 7, 64, 200, 10_000])
def test_blocked_v_statistic_equals_dense(rng, block):
    n, dim = 200, 4
    x = rng.standard_normal((n, dim)) @ rng.standard_normal((dim, dim)) + 3.0
    s = -np.tanh(x) + 0.1 * rng.standard_normal((n, dim))
    dense = imq_stein_kernel(x, x, s, s).mean()
    r = ksd(x, s, block=block)
    np.testing.assert_allclose(r.ksd_squared, dense, rtol=BLOCKED_RTOL)
    assert r.ksd == pytest.approx(np.sqrt(dense), rel=BLOCKED_RTOL) and r.n_samples == n
    np.testing.assert_allclose(r.diagonal_mean, np.trace(imq_stein_kernel(x, x, s, s)) / n, rtol=1e-13)


def test_invariant_under_translation_and_permutation(rng):
    x = rng.standard_normal((150, 3))
    s = -x
    base = ksd(x, s).ksd_squared
    perm = rng.permutation(150)
    np.testing.assert_allclose(ksd(x[perm], s[perm]).ksd_squared, base, rtol=BLOCKED_RTOL)
    # the kernel depends on x only through differences; shifting the points (not the scores) is exact
    np.testing.assert_allclose(ksd(x + 1e3, s).ksd_squared, base, rtol=1e-9)


def test_progress_reports_every_block_pair(rng):
    calls = []
    ksd(rng.standard_normal((25, 2)), rng.standard_normal((25, 2)), block=10, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(i, 6) for i in range(1, 7)]  # 3 row blocks → 3·4/2 upper-triangle pairs


# --- conjugate Gaussian model ----------------------------------------------------------------------
def _conjugate(rng, n_data=400, dim=3, prior=2.0, noise_variance=1.0):
    X = rng.standard_normal((n_data, dim))
    y = X @ np.linspace(-1, 1, dim) + np.sqrt(noise_variance) * rng.standard_normal(n_data)
    P = X.T @ X / noise_variance + prior * np.eye(dim)   # posterior precision of exp(−N·L)
    mu = np.linalg.solve(P, X.T @ y / noise_variance)
    return X, y, P, mu


def _exact_draws(rng, P, mu, n):
    return mu + np.linalg.solve(np.linalg.cholesky(P).T, rng.standard_normal((n, len(mu))).T).T


def test_posterior_scores_are_conjugate_gaussian_scores(rng):
    X, y, P, mu = _conjugate(rng, noise_variance=0.7)
    th = _exact_draws(rng, P, mu, 5)
    s = posterior_scores(get_model("linear", noise_variance=0.7), X, y, th, 2.0)
    np.testing.assert_allclose(s, -(th - mu) @ P, rtol=1e-10, atol=1e-9)


def test_posterior_scores_match_finite_differences_of_log_posterior(rng):
    """Logistic model: s = −∇(Σ l_n + θᵀΓθ/2) against central differences of the summed loss."""
    X = rng.standard_normal((300, 3))
    y = (rng.random(300) < 0.4).astype(float)
    m = get_model("logistic")
    gam = np.diag([0.5, 1.0, 2.0])
    th = rng.standard_normal(3) * 0.3

    def logp(t):
        return -(m.per_sample_losses(t, X, y).sum() + 0.5 * t @ gam @ t)

    h = 1e-5
    fd = np.array([(logp(th + h * e) - logp(th - h * e)) / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(posterior_scores(m, X, y, th[None], gam)[0], fd, rtol=1e-7, atol=1e-7)


def _mean_nv(rng, P, mu, n, reps):
    nv = np.array([n * ksd(x := _exact_draws(rng, P, mu, n), -(x - mu) @ P).ksd_squared for _ in range(reps)])
    return nv


@pytest.mark.mc
def test_exact_draws_expected_v_statistic_is_trace_formula(rng):
    """E[n·KSD²] = E k₀(θ, θ) = tr P + D exactly for i.i.d. draws (the off-diagonal U-part has mean 0)."""
    X, y, P, mu = _conjugate(rng)
    ns = (50, 400)
    z = bonferroni_z(len(ns))
    for n in ns:
        nv = _mean_nv(rng, P, mu, n, 60)
        se = nv.std(ddof=1) / np.sqrt(len(nv))
        assert abs(nv.mean() - (np.trace(P) + len(mu))) <= z * se, (n, nv.mean(), np.trace(P) + len(mu), se)


def _slope_check(rng, ns, reps):
    """Fit log mean(KSD²) on log n by weighted least squares; KSD slope = half of it.

    Tolerance: each log-mean has variance ≈ (sd/(√R·mean))² (delta method, from the replications),
    so the slope's standard error is 1/sqrt(Σ w_k (l_k − l̄)²) with w_k the inverse variances;
    the test is |slope_ksd + 1/2| ≤ z·se/2 with z = Φ⁻¹(1 − α/2), α = MC_ALPHA.
    """
    X, y, P, mu = _conjugate(rng)
    logn, logv, w = [], [], []
    for n in ns:
        v = _mean_nv(rng, P, mu, n, reps) / n
        logn.append(np.log(n))
        logv.append(np.log(v.mean()))
        w.append(1.0 / (v.std(ddof=1) / (np.sqrt(reps) * v.mean())) ** 2)
    logn, logv, w = map(np.asarray, (logn, logv, w))
    lbar = np.sum(w * logn) / w.sum()
    slope = np.sum(w * (logn - lbar) * (logv - np.sum(w * logv) / w.sum())) / np.sum(w * (logn - lbar) ** 2)
    se = 1.0 / np.sqrt(np.sum(w * (logn - lbar) ** 2))
    z = bonferroni_z(1)
    assert abs(slope / 2 + 0.5) <= z * se / 2, (slope / 2, se / 2)
    assert z * se / 2 < 0.15  # the test has power: a rate of n^(−0.35) or n^(−0.65) would fail it


@pytest.mark.mc
def test_ksd_of_exact_posterior_draws_shrinks_like_inverse_sqrt_n(rng):
    _slope_check(rng, (16, 32, 64, 128, 256, 512), reps=30)


@pytest.mark.slow
@pytest.mark.mc
def test_ksd_rate_slow(rng):
    _slope_check(rng, (32, 64, 128, 256, 512, 1024, 2048, 4096), reps=80)


def _biased_chain_case(rng, n_draws):
    from sgtune.sampler import run_chains

    n_data, dim, prior = 500, 3, 1.0
    X, y, P, mu = _conjugate(rng, n_data=n_data, dim=dim, prior=prior)
    model, data = get_model("linear"), make_dataset(X, y)
    h_max = np.linalg.eigvalsh(P / n_data).max()
    # full-batch SGLD at β = N with λ = 1/μ_max(Ĥ): the stationary variance along the top
    # eigenvector is 2/(2 − λμ) = 2× the posterior's (deliberately biased, not autocorrelated:
    # τ ≤ μ_max/μ_min steps ≪ the thinning)
    chains, steps = 4, 2_000 + 20 * n_draws // 4
    res = run_chains(model, data, Dynamics(1.0 / h_max, n_data, inv_temperature=n_data),
                     RunSpec(steps, n_chains=chains, burn_in=2_000, thin=20, seed=11),
                     prior_precision=prior * np.eye(dim), initial=mu)
    biased = posterior_ksd(model, X, y, res.trace.reshape(-1, dim), prior).ksd_squared
    exact = posterior_ksd(model, X, y, _exact_draws(rng, P, mu, n_draws), prior).ksd_squared
    return biased, exact, np.trace(P) + dim


@pytest.mark.mc
def test_biased_chain_scores_higher_than_exact_draws(rng):
    """Margin: n·KSD² of exact draws is asymptotically Σ λ_k Z_k² with Σ λ_k = tr P + D (mean above);
    for such Gaussian quadratic forms P(Σλ_k Z_k² ≥ t·Σλ_k) ≤ P(χ²₁ ≥ t) when t ≥ 1.54 (Székely &
    Bakirov 2003), so exact draws exceed t = χ²₁ quantile(1 − α) with probability ≤ α; the biased
    chain must exceed it."""
    n = 4000
    biased, exact, mean_nv = _biased_chain_case(rng, n)
    t = chi2.ppf(1 - MC_ALPHA, 1)
    assert n * exact < t * mean_nv            # exact draws pass (fails with probability ≤ α)
    assert n * biased > t * mean_nv, (n * biased / mean_nv, t)
    assert np.sqrt(biased) > 2 * np.sqrt(exact)


def test_chain_ksd_thins_drops_diverged_chains_and_matches_posterior_ksd(rng):
    X, y, P, mu = _conjugate(rng)
    m = get_model("linear")
    tr = _exact_draws(rng, P, mu, 3 * 50).reshape(3, 50, 3)
    tr_nan = np.concatenate([tr, np.full((1, 50, 3), np.nan)])
    got = chain_ksd(m, X, y, tr_nan, 2.0, max_draws=60)
    want = posterior_ksd(m, X, y, tr[:, 2::3].reshape(-1, 3), 2.0)   # k = ceil(150/60) = 3
    assert got.n_samples == 48 and got.ksd_squared == pytest.approx(want.ksd_squared, rel=1e-14)
    with pytest.raises(SgtuneError, match="no finite draws"):
        chain_ksd(m, X, y, tr_nan[3:], 2.0)


def test_errors_are_one_line_and_named(rng):
    x = rng.standard_normal((10, 2))
    with pytest.raises(ShapeError, match=r"scores must have the samples' shape \(n, D\) = \(10, 2\)"):
        ksd(x, x[:, :1])
    with pytest.raises(SgtuneError, match="samples contains a non-finite value"):
        ksd(np.where(x > 1, np.nan, x), x)
    with pytest.raises(SgtuneError, match="block must be"):
        ksd(x, x, block=0)
    with pytest.raises(SgtuneError, match="has no per_sample_grads"):
        posterior_scores(object(), x, x[:, 0], x)
    with pytest.raises(ShapeError, match="model's D = 2 columns but have 5"):
        posterior_scores(get_model("linear"), x, x[:, 0], np.zeros((3, 5)))
    with pytest.raises(ShapeError, match=r"prior_precision must be a scalar or \(D, D\)"):
        posterior_scores(get_model("linear"), x, x[:, 0], x, np.eye(3))
    with pytest.raises(SgtuneError, match=r"score is not finite at samples\[0\]"):
        posterior_scores(get_model("poisson"), x, np.ones(10), np.full((1, 2), 400.0))


def test_posterior_is_gaussian_only_for_the_linear_model():
    assert posterior_is_gaussian(get_model("linear"))
    assert not any(posterior_is_gaussian(get_model(m)) for m in ("logistic", "poisson"))


def test_keep_draws_does_not_change_the_chains_and_bounds_the_trace():
    """verify/calibrate keep thinned draws for the KSD; the chains' moments are bit-identical without them."""
    from sgtune.workflows.calibrate import calibrate
    from sgtune.io.data import example
    from sgtune.models import expand
    from sgtune.core.config import Dynamics, RunSpec
    from sgtune.workflows.verify import CheckOptions, verify_stationary_cov

    ds, m = example("logistic"), get_model("logistic")
    e = expand(m, ds, 1.0)
    kw = dict(prior_precision=1.0, check=CheckOptions(relative_tolerance=0.2))
    a = verify_stationary_cov(m, ds, e, Dynamics(None, 64), RunSpec(1500, n_chains=3, seed=5), **kw)
    b = verify_stationary_cov(m, ds, e, Dynamics(None, 64), RunSpec(1500, n_chains=3, seed=5), keep_draws=500, **kw)
    assert a.chains.trace is None and np.array_equal(a.empirical, b.empirical)
    assert 400 < b.chains.trace.shape[0] * b.chains.trace.shape[1] <= 500
    c = calibrate(m, ds, Dynamics(None, 64), RunSpec(1500, n_chains=2), prior_precision=1.0, keep_draws=300)
    assert 250 < c.chains.trace.shape[0] * c.chains.trace.shape[1] <= 300


def test_chain_ksd_summary_keys_budget_diverged_chains_and_gaussian_skip(rng):
    from types import SimpleNamespace

    X, y, P, mu = _conjugate(rng, n_data=400)
    yb = (y > 0).astype(float)
    tr = _exact_draws(rng, P, mu, 3 * 300).reshape(3, 300, 3)
    tr[1, 100:] = 0.0  # a diverged chain: the kernel stops writing its trace, which stays finite
    chains = SimpleNamespace(trace=tr, diverged_at=np.array([-1, 5000, -1]))
    assert chain_ksd_summary(get_model("linear"), X, y, chains, 2.0) == {}        # Gaussian posterior: no KSD
    assert chain_ksd_summary(get_model("logistic"), X, yb, SimpleNamespace(trace=None)) == {}
    doc = chain_ksd_summary(get_model("logistic"), X, yb, chains, 2.0, max_gradient_rows=400 * 150)
    want = chain_ksd(get_model("logistic"), X, yb, tr[[0, 2]], 2.0, max_draws=150)
    assert doc["ksd_n_samples"] == want.n_samples == 150 and doc["ksd"] == want.ksd and doc["ksd_iid_reference"] > 0
