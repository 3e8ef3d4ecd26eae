"""NumPy and optax exports of a Kronecker-factored Λ against the dense Λ (small networks), both prior forms."""
import math

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.core.errors import ShapeError
from sgtune.io.kronecker_export import kronecker_numpy_step, kronecker_optax
from sgtune.models import MLP
from sgtune.models.kfac import mlp_factors
from sgtune.theory.kronecker import tune_factors


def _result(rng, prior, momentum=0.4, beta=600.0):
    X = rng.normal(size=(300, 2))
    y = np.tanh(X[:, 0]) + 0.3 * rng.normal(size=300)
    net = MLP((3,))
    fac = mlp_factors(net, net.initial_params(2, rng), X, y, prior_precision=2.0)
    return tune_factors(fac, Dynamics(None, batch_size=20, inv_temperature=beta, momentum=momentum), prior=prior)


@pytest.mark.parametrize("prior", ["damped", "eigenbasis"])
def test_numpy_step_drift_and_noise(rng, prior):
    res = _result(rng, prior)
    lam = res.dense_step_matrix()
    step = kronecker_numpy_step(res, rng=np.random.default_rng(0))
    noiseless = kronecker_numpy_step(_result(np.random.default_rng(1), prior, beta=math.inf))
    res0 = _result(np.random.default_rng(1), prior, beta=math.inf)
    th, m = np.zeros(res0.dim), np.zeros(res0.dim)
    for g in rng.normal(size=(3, res0.dim)):
        th2, m2 = noiseless(th, m, g)
        assert np.allclose(m2, 0.4 * m + g) and np.allclose(th2, th - res0.dense_step_matrix() @ m2, rtol=1e-12)
        th, m = th2, m2
    # zero gradients: the increments are N(0, 2Λ/β) (chains as a leading axis)
    n = 20000
    th1, _ = step(np.zeros((n, res.dim)), np.zeros((n, res.dim)), np.zeros((n, res.dim)))
    cov = th1.T @ th1 / n
    ref = 2.0 * lam / 600.0
    se = np.sqrt((ref ** 2 + np.outer(np.diag(ref), np.diag(ref))) / n)
    assert np.max(np.abs(cov - ref) / se) < 5.0
    with pytest.raises(ShapeError, match="same shape"):
        step(np.zeros(res.dim), np.zeros(res.dim), np.zeros(res.dim + 1))


@pytest.mark.parametrize("prior", ["damped", "eigenbasis"])
def test_optax_matches_the_numpy_drift_and_noise_covariance(rng, prior):
    jax = pytest.importorskip("jax")  # in the [dev] extra
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    res = _result(rng, prior)
    lam = res.dense_step_matrix()
    res0 = _result(np.random.default_rng(1), prior, beta=math.inf)
    tx = kronecker_optax(res0, seed=3)
    params = jnp.zeros(res0.dim)
    state = tx.init(params)
    m = np.zeros(res0.dim)
    for g in rng.normal(size=(2, res0.dim)):
        upd, state = tx.update(jnp.asarray(g), state, params)
        m = 0.4 * m + g
        assert np.allclose(np.asarray(state["momentum"]), m)
        assert np.allclose(np.asarray(upd), -res0.dense_step_matrix() @ m, rtol=1e-12)
    params = jnp.zeros(res.dim)
    tx0 = kronecker_optax(res, seed=4)
    st = tx0.init(params)
    draws = []
    upd_fn = jax.jit(tx0.update)
    for _ in range(4000):
        u, st = upd_fn(jnp.zeros(res.dim), st)
        draws.append(np.asarray(u))
    D = np.array(draws)
    ref = 2.0 * lam / 600.0
    se = np.sqrt((ref ** 2 + np.outer(np.diag(ref), np.diag(ref))) / len(D))
    assert np.max(np.abs(D.T @ D / len(D) - ref) / se) < 5.0
    with pytest.raises(ShapeError, match="one array of length D"):
        tx.init({"w": params})
