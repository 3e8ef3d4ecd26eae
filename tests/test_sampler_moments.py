"""Moments of the chains against exact values, with MCSE-based z-scores.

Every check uses :func:`sgtune.diagnostics.mcse.compare_covariance`: z_ij = (Σ̂ − Σ)/se_ij over
i ≤ j with batch-means standard errors from K batches, rejected above the two-sided
Bonferroni Student-t quantile t_{K−1}(1 − α/(2k)), α = 1e-3 (family-wise false-rejection
probability ≤ 1e-3 per test when the prediction is exact). Means use the same rule.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import solve_discrete_lyapunov

from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler.registry import SGLRWOptions
from sgtune.io.data import example
from sgtune.diagnostics.mcse import bonferroni_threshold, compare_covariance
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains, run_quadratic_chains
from sgtune.core.config import Dynamics

# Not re-run under a generic CPU (test_portability.py): every chain here (SG(L)D, SGD with momentum, SGLRW without
# clipping, on a quadratic or a linear regression) is an affine, contracting map of θ driven by the
# same random stream on every CPU: other rounding moves the chain by rounding only (it does not grow), so it
# cannot change a result (the module docstring of test_portability.py).

ALPHA = 1e-3

A = np.array([[2.0, 0.6, 0.0], [0.6, 1.0, 0.3], [0.0, 0.3, 0.5]])
C = C0 = np.array([[1.0, 0.3, 0.1], [0.3, 0.8, 0.0], [0.1, 0.0, 0.4]])
MU = np.array([1.0, -2.0, 0.5])


def _check(res, exact_cov, exact_mean=None):
    t = compare_covariance(exact_cov, res.cov, res.cov_standard_error, n_batches=res.n_batches, alpha=ALPHA)
    assert t.passed, (t.z_max, t.threshold, t.argmax)
    if exact_mean is not None:
        z = np.abs(res.mean - exact_mean) / res.mean_standard_error
        assert z.max() < bonferroni_threshold(ALPHA, z.size, res.n_batches - 1), z
    return t


@pytest.mark.mc
def test_sgld_dense_step_on_gaussian_noise_quadratic():
    # exact: Σ = (I−ΛA)Σ(I−ΛA)ᵀ + ΛCΛ + 2Λ/β (linear Gaussian chain), mean μ
    lam = np.array([[0.2, 0.05, 0.0], [0.05, 0.3, 0.05], [0.0, 0.05, 0.4]])
    beta = 20.0
    F = np.eye(3) - lam @ A
    exact = solve_discrete_lyapunov(F, lam @ C @ lam + 2 * lam / beta)
    res = run_quadratic_chains(A, Dynamics(lam, 1, inv_temperature=beta), RunSpec(20000, n_chains=16, seed=1),
                               mean=MU, noise_cov=C)
    _check(res, exact, MU)
    # and the test has power: a 5% wrong prediction is rejected at this run length
    assert not compare_covariance(1.05 * exact, res.cov, res.cov_standard_error, n_batches=res.n_batches).passed


@pytest.mark.mc
def test_sgd_with_momentum_matches_augmented_lyapunov():
    # z = (θ−μ, m): z' = F z + noise, F = [[I−ΛA, −κΛ], [A, κI]], Q = [[ΛCΛ, −ΛC], [−CΛ, C]] (β = ∞)
    lam, kappa = 0.1 * np.eye(3), 0.6
    F = np.block([[np.eye(3) - lam @ A, -kappa * lam], [A, kappa * np.eye(3)]])
    Q = np.block([[lam @ C @ lam, -lam @ C], [-C @ lam, C]])
    exact = solve_discrete_lyapunov(F, Q)[:3, :3]
    res = run_quadratic_chains(A, Dynamics(lam, 1, momentum=kappa), RunSpec(30000, n_chains=16, seed=2), mean=MU,
                               noise_cov=C)
    _check(res, exact, MU)


@pytest.mark.mc
def test_sglrw_removes_the_diagonal_inflation():
    # SGLRW, diagonal Λ, no clipping: E[ΔΔᵀ|g] = ΛggᵀΛ − Diag(ΛggᵀΛ) + Diag(2Λ/β), E[ggᵀ] = AΣA + C, so
    # Σ = Σ − ΛAΣ − ΣAΛ + Λ(AΣA+C)Λ − Diag(Λ(AΣA+C)Λ) + 2Λ/β — solved here as a dense linear system.
    # small steps and weak noise: clipping needs |g_i| > sqrt(2/(λ_i β)) ≥ 7, over 6 standard deviations
    lam = np.diag([0.01, 0.015, 0.02])
    beta, d, C = 2.0, 3, 0.1 * C0
    ops = (np.kron(np.eye(d), lam @ A) + np.kron(lam @ A, np.eye(d))  # vec(ΛAΣ + ΣAΛ)  (symmetric A, Λ)
           - np.kron(lam @ A, lam @ A))                                 # − vec(ΛAΣAΛ)
    sel = np.diag(np.eye(d).reshape(-1))                                # keeps diagonal entries of vec
    ops += sel @ np.kron(lam @ A, lam @ A)                              # + vec(Diag(ΛAΣAΛ))
    rhs = (lam @ C @ lam - np.diag(np.diag(lam @ C @ lam)) + 2 * lam / beta).reshape(-1)
    exact = np.linalg.solve(ops, rhs).reshape(d, d)
    res = run_quadratic_chains(A, Dynamics(np.diag(lam), 1, inv_temperature=beta),
                               RunSpec(60000, n_chains=16, seed=3), SGLRWOptions(), mean=MU, noise_cov=C)
    assert res.clip_fraction == 0.0  # the formula holds only without clipping
    _check(res, exact, MU)
    # SGLD with the same Λ keeps the diagonal term ΛCΛ (eq. 11 with constant noise): its covariance differs
    sgld = solve_discrete_lyapunov(np.eye(3) - lam @ A, lam @ C @ lam + 2 * lam / beta)
    assert not np.allclose(sgld, exact, rtol=1e-3)


@pytest.mark.mc
def test_tuned_sgd_reproduces_predicted_covariance_linear_regression():
    # Wang, Ding & Huggins's (2026) heteroskedastic example, Λ tuned to the sandwich target (dense, dq-exact):
    # for linear regression the proxy is exact, so Σ̂ must match the prediction within MC error.
    from sgtune.theory.tuning import tune

    ds = example("hetero-linear")
    model = get_model("linear")
    e = expand(model, ds)
    t = tune(e, Dynamics(None, 64))
    res = run_chains(model, ds, Dynamics(t.step_matrix, 64), RunSpec(20000, n_chains=16, burn_in=2000, seed=4),
                     initial=e.theta_hat)
    test = _check(res, t.predicted_cov, e.theta_hat)
    assert test.n_tests == 210


@pytest.mark.mc
def test_sgld_without_replacement_matches_forward_prediction():
    from sgtune.theory.stationary import predict_stationary_cov

    ds = example("hetero-linear")
    model = get_model("linear")
    e = expand(model, ds, prior_precision=2.0)
    lam, B, beta = 0.02, 100, float(ds.n_data)
    pred = predict_stationary_cov(e, Dynamics(lam, B, inv_temperature=beta, batching="without-replacement"))
    res = run_chains(model, ds, Dynamics(lam, B, inv_temperature=beta, batching="without-replacement"),
                     RunSpec(20000, n_chains=16, seed=5), prior_precision=2.0, initial=e.theta_hat)
    _check(res, pred.cov)
    # with replacement has a different (larger) noise factor; at B = N/20 the difference is ≈5%
    assert not np.allclose(pred.cov, predict_stationary_cov(e, Dynamics(lam, B, inv_temperature=beta)).cov,
                           rtol=0.02)


@pytest.mark.slow
@pytest.mark.mc
def test_logistic_within_proxy_error():
    # the proxy is O(λ/B)-accurate for logistic regression; with a small step the prediction passes
    from sgtune.theory.stationary import predict_stationary_cov

    ds = example("logistic")
    model = get_model("logistic")
    e = expand(model, ds)
    pred = predict_stationary_cov(e, Dynamics(0.05, 32))
    res = run_chains(model, ds, Dynamics(0.05, 32), RunSpec(200000, n_chains=16, seed=6), initial=e.theta_hat)
    t = compare_covariance(pred.cov, res.cov, res.cov_standard_error, n_batches=res.n_batches,
                           relative_tolerance=0.05)
    assert t.passed, t.z_max
    assert math.isfinite(t.relative_frobenius_error)
