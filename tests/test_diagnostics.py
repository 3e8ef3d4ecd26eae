"""Diagnostics against closed forms (AR(1) autocorrelation time, normal/t quantiles) and exact pooling."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sgtune.diagnostics.mcse import (autocorrelation, batch_means_se, bonferroni_threshold, compare_covariance,
                                covariance_batch_means, effective_sample_size)
from sgtune.core.errors import ShapeError, SgtuneError


def _ar1(rng, phi, chains, n, dim=1):
    """Stationary AR(1) x_t = φ x_{t−1} + e_t, Var x = 1/(1−φ²), τ_int = (1+φ)/(1−φ)."""
    x = np.empty((chains, n, dim))
    x[:, 0] = rng.standard_normal((chains, dim)) / math.sqrt(1 - phi**2)
    e = rng.standard_normal((chains, n, dim))
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x


def test_autocorrelation_of_ar1():
    rng = np.random.default_rng(0)
    x = _ar1(rng, 0.6, 4, 50_000)
    rho = np.mean(autocorrelation(x), axis=0)[:4, 0]
    # ρ_k = φ^k; se of a lag-k autocorrelation ≈ sqrt(τ/n_total) ≈ 0.0090 (Bartlett); |z| < 5
    assert np.all(np.abs(rho - 0.6 ** np.arange(4)) < 5 * math.sqrt(4 / 200_000))


def test_ess_and_batch_means_on_ar1_replicates():
    # 20 independent replicates: their average ESS and average se² must match the closed forms within
    # 5 standard errors of that average (estimated from the replicates themselves).
    rng = np.random.default_rng(1)
    phi, chains, n = 0.5, 4, 10_000
    tau = (1 + phi) / (1 - phi)
    var_mean = (1 / (1 - phi**2)) * tau / (chains * n)
    ess, se2 = [], []
    for _ in range(20):
        x = _ar1(rng, phi, chains, n)
        ess.append(effective_sample_size(x)[0])
        se2.append(batch_means_se(x, n_batches=32)[0] ** 2)
    ess, se2 = np.array(ess), np.array(se2)
    assert abs(ess.mean() - chains * n / tau) < 5 * ess.std(ddof=1) / math.sqrt(20)
    assert abs(se2.mean() - var_mean) < 5 * se2.std(ddof=1) / math.sqrt(20) + 0.05 * var_mean  # + batch bias O(τ/L)


def test_covariance_batch_means_pools_exactly():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 1000, 3)) @ np.array([[1.0, 0.5, 0], [0, 1.0, 0.2], [0, 0, 0.7]])
    cov, se, k = covariance_batch_means(x, n_batches=8)
    np.testing.assert_allclose(cov, np.cov(x.reshape(-1, 3).T, ddof=0), rtol=1e-12)
    assert k == 8 and se.shape == (3, 3) and np.all(se > 0)


def test_bonferroni_threshold_known_quantiles():
    assert bonferroni_threshold(0.05, 1) == pytest.approx(1.959963984540054, rel=1e-12)  # Φ⁻¹(0.975)
    assert bonferroni_threshold(0.05, 1, dof=10) == pytest.approx(2.228138851986, rel=1e-10)  # t_10 table
    assert bonferroni_threshold(0.1, 5) == pytest.approx(2.326347874040841, rel=1e-12)  # Φ⁻¹(0.99)


def test_compare_covariance_accepts_and_rejects():
    p = np.array([[2.0, 0.3], [0.3, 1.0]])
    se = np.full((2, 2), 0.01)
    ok = compare_covariance(p, p + 0.01, se, n_batches=32)
    assert ok.passed and ok.z_max == pytest.approx(1.0) and ok.n_tests == 3
    bad = compare_covariance(p, p + np.diag([0.0, 0.2]), se, n_batches=32)
    assert not bad.passed and bad.argmax == (1, 1) and bad.z_max == pytest.approx(20.0)
    # a declared relative model error r adds r·sqrt(Σ_ii Σ_jj) in quadrature: 0.2/sqrt(1e-4 + 0.25²·1) < 1
    assert compare_covariance(p, p + np.diag([0.0, 0.2]), se, n_batches=32, relative_tolerance=0.25).passed


def test_compare_covariance_shape_error():
    with pytest.raises(ShapeError, match="must be the same"):
        compare_covariance(np.eye(2), np.eye(3), np.eye(2), n_batches=4)


def test_batch_means_needs_two_batches():
    with pytest.raises(SgtuneError, match="n_batches must be >= 2"):
        batch_means_se(np.zeros((1, 100)), n_batches=1)


def test_draws_shape_error():
    with pytest.raises(ShapeError, match="at least 4 draws"):
        effective_sample_size(np.zeros((2, 3)))
