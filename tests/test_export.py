"""sgtune.io.export: the NumPy step and the optax transformation reproduce the predicted stationary covariance.

Linear regression (the proxy chain is exact there, Wang, Ding & Huggins 2026, §4), many independent chains run
to stationarity; the final states' second moments about θ̂ are z-tested entrywise against
:func:`predict_stationary_cov` with the MCSE of each entry and a Bonferroni threshold at the
family-wise level MC_ALPHA over every entry of every configuration in the file.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from sgtune.core.errors import NotPositiveDefiniteError, SgtuneError, ShapeError
from sgtune.io.export import SGMCMCState, StepMatrix, numpy_step, optax_transform, step_matrix
from sgtune.models import Expansion
from sgtune.theory.stationary import predict_stationary_cov
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics

from _reference import covariance_z_scores
from _tolerances import bonferroni_z

D, N, B = 3, 200, 10
CHAINS, STEPS = 3000, 600
#: configurations: (family, momentum, SGLD) — numpy runs all, optax the last three
CONFIGS = [("scalar", 0.0, False), ("diagonal", 0.0, True), ("block", 0.5, False), ("dense", 0.0, False),
           ("diagonal", 0.3, True), ("dense", 0.5, True)]
OPTAX_CONFIGS = CONFIGS[3:]
Z = bonferroni_z((len(CONFIGS) + len(OPTAX_CONFIGS)) * D * (D + 1) // 2)
BLOCKS = [[0, 2], [1]]


def problem():
    rng = np.random.default_rng(11)
    X = rng.standard_normal((N, D)) * np.array([0.7, 1.0, 1.4])
    X[:, 2] += 0.5 * X[:, 0]  # correlated covariates: a dense Λ differs from the structured ones
    y = X @ np.array([0.5, -1.0, 0.3]) + rng.standard_normal(N) * (0.5 + np.abs(X[:, 1]))  # heteroscedastic
    gam = np.eye(D)
    theta = np.linalg.solve(X.T @ X / N + gam / N, X.T @ y / N)
    r = X @ theta - y
    e = Expansion(theta_hat=theta, grads=r[:, None] * X, prior_precision=gam, design=X, weights=np.ones(N))
    return X, y, gam, theta, e


def tuned(e, family, kappa, sgld):
    beta = 4.0 * N if sgld else math.inf
    res = tune(e, Dynamics(None, B, inv_temperature=beta, momentum=kappa), family=family,
               blocks=BLOCKS if family == "block" else None)
    lam = step_matrix(res, blocks=BLOCKS if family == "block" else None)
    pred = predict_stationary_cov(e, Dynamics(res.step_matrix, B, inv_temperature=beta, momentum=kappa)).cov
    return lam, beta, pred


@pytest.mark.mc
@pytest.mark.parametrize("family, kappa, sgld", CONFIGS)
def test_numpy_step_reproduces_predicted_covariance(family, kappa, sgld):
    X, y, gam, theta, e = problem()
    lam, beta, pred = tuned(e, family, kappa, sgld)
    assert lam.kind == family
    rng = np.random.default_rng(abs(hash((family, kappa, sgld))) % 2**32)
    step = numpy_step(lam, momentum=kappa, inv_temperature=beta, rng=rng)
    th = np.tile(theta, (CHAINS, 1))
    m = np.zeros_like(th)
    for _ in range(STEPS):
        idx = rng.integers(0, N, size=(CHAINS, B))
        xb = X[idx]  # (C, B, D)
        resid = np.einsum("cbd,cd->cb", xb, th) - y[idx]
        grad = np.einsum("cb,cbd->cd", resid, xb) / B + th @ gam.T / N
        th, m = step(th, m, grad)
    z = covariance_z_scores(th, theta, pred)
    assert np.abs(z).max() < Z, (family, kappa, sgld, z)


@pytest.mark.mc
@pytest.mark.parametrize("family, kappa, sgld", OPTAX_CONFIGS)
def test_optax_transform_reproduces_predicted_covariance(family, kappa, sgld):
    jax = pytest.importorskip("jax")  # in the [dev] extra: never skipped in the test environment
    import jax.numpy as jnp
    import optax

    X, y, gam, theta, e = problem()
    lam, beta, pred = tuned(e, family, kappa, sgld)
    tx = optax_transform(lam, momentum=kappa, inv_temperature=beta)
    Xj, yj, gj = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32), jnp.asarray(gam, jnp.float32)

    def grad_fn(th, idx):
        xb = Xj[idx]
        return xb.T @ (xb @ th - yj[idx]) / B + gj @ th / N

    def one_step(th, st, idx):
        upd, st = tx.update(grad_fn(th, idx), st, th)
        return optax.apply_updates(th, upd), st

    def body(carry, idx):  # all chains, one step
        return jax.vmap(one_step)(*carry, idx), None

    th0 = jnp.tile(jnp.asarray(theta, jnp.float32), (CHAINS, 1))
    keys = jax.random.split(jax.random.PRNGKey(3), CHAINS)
    st0 = SGMCMCState(momentum=jnp.zeros((CHAINS, D), jnp.float32), key=keys)  # one noise stream per chain
    # the batches drawn up front (jax.random.randint inside the scan costs seconds of compilation)
    idx = jnp.asarray(np.random.default_rng(3).integers(0, N, size=(STEPS, CHAINS, B)), jnp.int32)
    out = np.asarray(jax.jit(lambda c, xs: jax.lax.scan(body, c, xs)[0][0])((th0, st0), idx), dtype=float)
    z = covariance_z_scores(out, theta, pred)
    assert np.abs(z).max() < Z, (family, kappa, sgld, z)


def test_structures_apply_without_dense_and_match_dense():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4, 4))
    dense = A @ A.T + np.eye(4)
    blk = step_matrix(dense, kind="block", blocks=[[0, 3], [1, 2]])
    ref = np.zeros((4, 4))
    for b in ([0, 3], [1, 2]):
        ref[np.ix_(b, b)] = dense[np.ix_(b, b)]
    np.testing.assert_array_equal(blk.to_dense(), ref)
    g = rng.standard_normal((5, 4))
    for lam in (blk, step_matrix(dense), step_matrix(np.array([1.0, 2.0, 3.0, 4.0])),
                StepMatrix("scalar", 4, scalar=0.3)):
        th, m = numpy_step(lam, momentum=0.5)(np.zeros((5, 4)), np.ones((5, 4)), g)
        np.testing.assert_allclose(m, 0.5 + g, rtol=1e-15)
        np.testing.assert_allclose(th, -(0.5 + g) @ lam.to_dense().T, rtol=1e-13)
        F = lam.factors()
        if lam.kind == "dense":
            np.testing.assert_allclose(F @ F.T, lam.to_dense(), rtol=1e-12)


def test_errors():
    with pytest.raises(NotPositiveDefiniteError, match="symmetric positive definite"):
        step_matrix(-np.eye(3))
    with pytest.raises(NotPositiveDefiniteError, match="diagonal must be positive"):
        step_matrix(np.array([1.0, -1.0]))
    with pytest.raises(SgtuneError, match="needs blocks"):
        step_matrix(np.eye(3), kind="block")
    with pytest.raises(ShapeError, match=r"\(D,\) or \(D, D\)"):
        step_matrix(np.ones((2, 3)))
    with pytest.raises(ShapeError, match="last axis D = 2"):
        numpy_step(np.array([1.0, 1.0]))(np.zeros(3), np.zeros(3), np.zeros(3))
    with pytest.raises(SgtuneError, match="momentum"):
        numpy_step(np.array([1.0, 1.0]), momentum=1.5)


def test_numpy_step_names_wrong_shapes_and_takes_lists():
    """A wrong-shaped θ, m or gradient is one ShapeError naming it (not numpy's broadcasting error); lists work."""
    from sgtune.core.config import Dynamics
    from sgtune.core.errors import ShapeError
    from sgtune.io.export import numpy_step

    step = numpy_step(Dynamics([0.1, 0.2], batch_size=32), prior="in-loss")
    theta, m = step([1.0, 1.0], 0.0, [1.0, 1.0])  # lists and the scalar m = 0
    np.testing.assert_array_equal(theta, [0.9, 0.8])
    np.testing.assert_array_equal(m, [1.0, 1.0])
    for args, name in (((np.ones(3), np.zeros(2), np.ones(2)), "theta must have last axis D = 2"),
                       ((np.ones(2), np.zeros(3), np.ones(2)), "m must have last axis D = 2"),
                       ((np.ones(2), np.zeros((4, 2)), np.ones(2)), r"m and gradient must have theta's shape \(2,\)"),
                       ((np.ones(2), np.zeros(2), "a"), "gradient must be an array of numbers")):
        with pytest.raises(ShapeError, match=name):
            step(*args)
