"""Numba gradient oracles against the reference model library, elementwise."""
from __future__ import annotations

import numpy as np
import pytest

from sgtune.models import get_model
from sgtune.sampler import grads

# agreement of two float64 evaluations of the same formula: a few ulps
RTOL = 1e-13


@pytest.fixture
def rng():
    return np.random.default_rng(20260101)


def _data(name, rng, n=50, d=4):
    X = rng.standard_normal((n, d))
    if name == "logistic":
        y = (rng.random(n) < 0.5).astype(float)
    elif name == "poisson":
        y = rng.poisson(2.0, n).astype(float)
    else:
        y = rng.standard_normal(n) * 2
    return X, y


@pytest.mark.parametrize("name", ["linear", "logistic", "poisson", "beta-linear"])
def test_d1_matches_models(name, rng):
    model = get_model(name, noise_variance=1.7, beta_power=1.4 if name == "beta-linear" else None)
    eta = np.concatenate([rng.standard_normal(40) * 3, [-40.0, 40.0, 0.0]])
    y = _data(name, rng, n=eta.size)[1]
    out = np.empty_like(eta)
    grads.glm_d1_vector(grads.MODEL_IDS[name], eta, y, grads.model_params(1.7, 1.4), out)
    np.testing.assert_allclose(out, model.derivatives(eta, y)[1], rtol=RTOL, atol=1e-300)


@pytest.mark.parametrize("name", ["linear", "logistic", "poisson", "beta-linear"])
@pytest.mark.parametrize("prior_kind", [0, 1, 2])
def test_minibatch_gradient_matches_models(name, prior_kind, rng):
    model = get_model(name, beta_power=1.5 if name == "beta-linear" else None)
    X, y = _data(name, rng)
    n, d = X.shape
    theta = rng.standard_normal(d) * 0.3
    idx = np.array([3, 3, 17, 0, 49], dtype=np.int64)
    gam = {0: np.zeros((d, d)), 1: 2.5 * np.eye(d), 2: (lambda a: a @ a.T)(rng.standard_normal((d, d)))}[prior_kind]
    out = np.empty(d)
    grads.minibatch_gradient(theta, X, y, idx, 1, 5, grads.MODEL_IDS[name], grads.model_params(1.0, 1.5),
                             prior_kind, gam / n, np.empty(5), out)
    expected = model.per_sample_grads(theta, X, y)[idx[1:5]].mean(axis=0) + gam @ theta / n
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=1e-15)


@pytest.mark.parametrize("d", [3, 4, 7, 9])
@pytest.mark.parametrize("start, stop", [(0, 1), (1, 4), (1, 5), (2, 11), (0, 12)])
def test_minibatch_gradient_row_blocks_and_remainders(d, start, stop, rng):
    # four rows / four columns at a time plus remainders: every split of batch length and dimension
    model = get_model("logistic")
    X, y = _data("logistic", rng, d=d)
    theta = rng.standard_normal(d) * 0.3
    idx = rng.integers(0, X.shape[0], size=12).astype(np.int64)
    out = np.empty(d)
    grads.minibatch_gradient(theta, X, y, idx, start, stop, grads.LOGISTIC, grads.model_params(), 0,
                             np.zeros((d, d)), np.empty(12), out)
    expected = model.per_sample_grads(theta, X, y)[idx[start:stop]].mean(axis=0)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=1e-15)


def test_quadratic_gradient_without_noise(rng):
    d = 3
    A = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.1], [0.0, 0.1, 3.0]])
    mu, theta = rng.standard_normal(d), rng.standard_normal(d)
    out = np.empty(d)
    st = np.array([1, 2, 3, 4], dtype=np.uint64)
    grads.quadratic_gradient(theta, A, mu, grads.QUAD_GAUSS, np.zeros((d, d)), grads.model_params(), st,
                             np.empty(d), out)
    np.testing.assert_allclose(out, A @ (theta - mu), rtol=RTOL)


def test_gradient_cost_helper_sums_the_reference_gradient(rng):
    # benchmark helper: n_iter evaluations of the same minibatch gradient, checksum = n_iter · G_0
    X, y = _data("logistic", rng, d=6)
    theta = rng.standard_normal(6) * 0.3
    idx = np.array([4, 9, 9, 31, 0], dtype=np.int64)
    g0 = get_model("logistic").per_sample_grads(theta, X, y)[idx].mean(axis=0)[0]
    assert grads.gradient_cost(theta, X, y, idx, grads.LOGISTIC, 7) == pytest.approx(7 * g0, rel=1e-13)
