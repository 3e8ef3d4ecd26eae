"""Model library: derivatives vs finite differences / quadrature, MAP fitting and its error paths."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad

from sgtune.io.data import example, make_dataset
from sgtune.core.errors import ConvergenceError, DataFormatError, NotPositiveDefiniteError, SgtuneError
from sgtune.models import MODEL_NAMES, expand, fit_map, get_model, prior_matrix

# central differences with step 1e-5 on O(1) functions: truncation ~1e-10, rounding ~1e-11
FD_RTOL = 1e-6


def data_for(name: str, rng: np.random.Generator):
    X = rng.standard_normal((30, 3))
    if name == "logistic":
        y = (rng.random(30) < 0.5).astype(float)
    elif name == "poisson":
        y = rng.poisson(1.5, 30).astype(float)
    else:
        y = X @ np.array([0.5, -1.0, 0.2]) + rng.standard_normal(30)
    return X, y


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_gradients_and_hessians_by_finite_differences(rng, name):
    model = get_model(name, beta_power=1.4, noise_variance=1.3)
    X, y = data_for(name, rng)
    theta = 0.3 * rng.standard_normal(3)
    h = 1e-5
    g = model.per_sample_grads(theta, X, y)
    Hs = model.per_sample_hessians(theta, X, y)
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        fd = (model.per_sample_losses(theta + e, X, y) - model.per_sample_losses(theta - e, X, y)) / (2 * h)
        np.testing.assert_allclose(g[:, k], fd, rtol=FD_RTOL, atol=1e-8)
        fdg = (model.per_sample_grads(theta + e, X, y) - model.per_sample_grads(theta - e, X, y)) / (2 * h)
        np.testing.assert_allclose(Hs[:, :, k], fdg, rtol=FD_RTOL, atol=1e-8)


def test_beta_divergence_integral_term_closed_form():
    """(1/p)∫ N(z; η, σ²)^p dz by quadrature equals the closed form (independent of η)."""
    for p, s2 in [(1.2, 1.0), (1.5, 2.5), (2.0, 0.3)]:
        model = get_model("beta-linear", beta_power=p, noise_variance=s2)
        for eta in (0.0, 3.0):
            val, _ = quad(lambda z: (math.exp(-(z - eta) ** 2 / (2 * s2)) / math.sqrt(2 * math.pi * s2)) ** p,
                          -np.inf, np.inf, epsabs=1e-14, epsrel=1e-13)
            assert model.integral_term() == pytest.approx(val / p, rel=1e-10)


def test_beta_divergence_tends_to_log_loss_gradient():
    """As p → 1, ∇ρ → c·∇(log-loss) with c = 1 (f^{p−1} → 1)."""
    rng = np.random.default_rng(0)
    X, y = data_for("linear", rng)
    theta = np.zeros(3)
    g_beta = get_model("beta-linear", beta_power=1 + 1e-9).per_sample_grads(theta, X, y)
    g_lin = get_model("linear").per_sample_grads(theta, X, y)
    np.testing.assert_allclose(g_beta, g_lin, rtol=1e-7)


@pytest.mark.parametrize("name,ex", [("linear", "hetero-linear"), ("logistic", "logistic"),
                                     ("poisson", "poisson"), ("beta-linear", "hetero-linear")])
def test_map_is_a_stationary_point(name, ex):
    ds = example(ex)
    model = get_model(name, beta_power=1.3)
    fit = fit_map(model, ds, 2.0)
    grad = model.per_sample_grads(fit.theta_hat, ds.X, ds.y).mean(0) + 2.0 * fit.theta_hat / ds.n_data
    assert np.linalg.norm(grad) < 1e-9
    e = expand(model, ds, 2.0)
    np.testing.assert_allclose(e.mean_grad, -2.0 * e.theta_hat / ds.n_data, atol=1e-10)  # ḡ = −Γθ̂/N


def test_linear_map_equals_ridge_closed_form(rng):
    X, y = data_for("linear", rng)
    ds = make_dataset(X, y)
    fit = fit_map(get_model("linear", noise_variance=2.0), ds, 3.0)
    ridge = np.linalg.solve(X.T @ X / 2.0 + 3.0 * np.eye(3), X.T @ y / 2.0)
    np.testing.assert_allclose(fit.theta_hat, ridge, rtol=1e-10)


def test_expansion_quantities_and_targets(rng):
    X, y = data_for("logistic", rng)
    e = expand(get_model("logistic"), make_dataset(X, y), 1.0)
    Js = get_model("logistic").per_sample_hessians(e.theta_hat, X, y)
    np.testing.assert_allclose(e.curvature, Js.mean(0), rtol=1e-12)
    np.testing.assert_allclose(e.hessian, Js.mean(0) + np.eye(3) / 30, rtol=1e-12)
    sigma = np.diag([1.0, 2.0, 3.0])
    np.testing.assert_allclose(e.mean_jsj(sigma), np.mean([J @ sigma @ J for J in Js], 0), rtol=1e-12)
    Jinv = np.linalg.inv(Js.mean(0))
    np.testing.assert_allclose(e.sandwich_cov(), Jinv @ e.fisher @ Jinv / 30, rtol=1e-10)
    np.testing.assert_allclose(e.posterior_cov(), np.linalg.inv(e.hessian) / 30, rtol=1e-10)


def test_separable_logistic_data_is_a_clear_error():
    X = np.array([[1.0, -2.0], [1.0, -1.0], [1.0, 1.0], [1.0, 2.0]])
    y = np.array([0.0, 0.0, 1.0, 1.0])
    with pytest.raises(DataFormatError, match="linearly separable.*`prior_precision` > 0"):
        fit_map(get_model("logistic"), make_dataset(X, y))
    assert np.all(np.isfinite(fit_map(get_model("logistic"), make_dataset(X, y), 1.0).theta_hat))


def test_rank_deficient_design_is_a_clear_error(rng):
    X = rng.standard_normal((20, 2))
    X = np.column_stack([X, X[:, 0] + X[:, 1]])
    with pytest.raises(DataFormatError, match="rank 2 < D = 3"):
        fit_map(get_model("linear"), make_dataset(X, rng.standard_normal(20)))


def test_non_convergence_is_reported(rng):
    X, y = data_for("poisson", rng)
    with pytest.raises(ConvergenceError, match="did not converge in 2 Newton iterations"):
        fit_map(get_model("poisson"), make_dataset(3 * X, y), max_iter=2)


@pytest.mark.parametrize("name,y,match", [
    ("logistic", [0.0, 1.0, 2.0], r"y in \{0, 1\}"),
    ("poisson", [0.0, 1.5, 2.0], "non-negative integer"),
    ("poisson", [0.0, -1.0, 2.0], "non-negative integer"),
])
def test_response_domain(name, y, match):
    ds = make_dataset(np.eye(3), np.array(y))
    with pytest.raises(DataFormatError, match=match):
        fit_map(get_model(name), ds, 1.0)


def test_model_and_prior_validation():
    with pytest.raises(SgtuneError, match="model must be one of"):
        get_model("probit")
    with pytest.raises(SgtuneError, match="needs `beta_power=P` with P > 1"):
        get_model("beta-linear")
    with pytest.raises(SgtuneError, match="finite number > 1"):
        get_model("beta-linear", beta_power=0.5)
    with pytest.raises(SgtuneError, match="noise_variance must be > 0"):
        get_model("linear", noise_variance=0.0)
    with pytest.raises(SgtuneError, match="prior_precision must be a finite number >= 0"):
        prior_matrix(-1.0, 2)
    with pytest.raises(NotPositiveDefiniteError, match="positive semi-definite"):
        prior_matrix(np.diag([1.0, -1.0]), 2)


def test_subsample_expansion_uses_full_population_size():
    """Alg. 1 steps 1–5 on M rows: means over M, every 1/N over the full N."""
    ds = example("logistic")
    sub = ds.subsample(500, np.random.default_rng(0))
    model = get_model("logistic")
    e = expand(model, sub, 2.0, population_size=ds.n_data)
    assert e.n_data == 2000 and e.n_samples == 500
    # θ̂ is the stationary point of (1/M)Σ_m l_m + θᵀΓθ/(2N)
    grad = model.per_sample_grads(e.theta_hat, sub.X, sub.y).mean(0) + 2.0 * e.theta_hat / 2000
    assert np.linalg.norm(grad) < 1e-9
    Js = model.per_sample_hessians(e.theta_hat, sub.X, sub.y)
    np.testing.assert_allclose(e.hessian, Js.mean(0) + 2.0 * np.eye(5) / 2000, rtol=1e-12)
    Jinv = np.linalg.inv(Js.mean(0))
    np.testing.assert_allclose(e.sandwich_cov(), Jinv @ e.fisher @ Jinv / 2000, rtol=1e-10)
    sigma = np.eye(5)
    np.testing.assert_allclose(e.mean_jsj(sigma), np.mean([J @ sigma @ J for J in Js], 0), rtol=1e-12)
    with pytest.raises(SgtuneError, match="population_size N = 100 must be >= the 500 rows"):
        expand(model, sub, 2.0, population_size=100)
