"""Appendix E.3: test loss of SGD on (ridge) linear regression from the stationary covariance."""
import math

import numpy as np
import pytest

from _tolerances import bonferroni_z
from sgtune.core.config import Dynamics, RunSpec
from sgtune.core.errors import SgtuneError, ShapeError
from sgtune.workflows.experiments import contaminated_linear, true_parameter
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains
from sgtune.theory.stationary import predict_stationary_cov
from sgtune.theory.testloss import (optimal_batch_size, optimal_weight_decay, predicted_test_loss,
                                    ridge_test_loss_path)
from sgtune.core.config import Dynamics


def _data(n=400, d=3, seed=0):
    theta = true_parameter(d, seed=seed)
    return (contaminated_linear(seed + 1, theta, n_data=n, outlier_fraction=0.0),
            contaminated_linear(seed + 2, theta, n_data=n, outlier_fraction=0.0))


@pytest.mark.mc
def test_predicted_test_loss_is_the_mean_over_gaussian_draws(rng):
    train, test = _data()
    th = np.array([0.3, -1.0, 2.0])
    A = rng.standard_normal((3, 3))
    S = A @ A.T / 10
    draws = th + rng.standard_normal((5_000, 3)) @ np.linalg.cholesky(S).T
    per_draw = np.mean((test.y[None, :] - draws @ test.X.T) ** 2, axis=1)  # test loss of each θ draw
    z = (per_draw.mean() - predicted_test_loss(th, S, test.X, test.y)) / (per_draw.std(ddof=1) / math.sqrt(len(per_draw)))
    assert abs(z) < bonferroni_z(1)


@pytest.mark.mc
def test_predicted_test_loss_matches_sgd_ridge_chains():
    """Stationary SGD iterates on ridge regression: their mean test loss is the dq-exact prediction."""
    train, test = _data(n=300)
    model = get_model("linear")
    gamma, lam, B = 20.0, 0.3, 4
    e = expand(model, train, gamma)
    pred = predicted_test_loss(e.theta_hat, predict_stationary_cov(e, Dynamics(lam, B)).cov, test.X, test.y)
    res = run_chains(model, train, Dynamics(lam, B), RunSpec(40_000, n_chains=8, burn_in=2000, thin=1, seed=5),
                     prior_precision=gamma, initial=e.theta_hat)
    tr = res.trace  # (C, T, D)
    # test loss of each iterate, mean_m (y_m − θᵀx_m)² = mean y² − 2θᵀ(Xᵀy/M) + θᵀÂθ (no covariance involved)
    A, b, c = test.X.T @ test.X / test.n_data, test.X.T @ test.y / test.n_data, np.mean(test.y**2)
    per_iter = c - 2 * tr @ b + np.einsum("ctd,de,cte->ct", tr, A, tr)  # (C, T)
    # batch means: 8 chains × 4 segments
    seg = per_iter.reshape(8, 4, -1).mean(axis=2).ravel()
    z = (seg.mean() - pred) / (seg.std(ddof=1) / math.sqrt(seg.size))
    assert abs(z) < 3.6  # t_{31} at two-sided α = 1e-3 (STYLE §13(c))


def test_weight_decay_path_matches_a_direct_evaluation():
    train, test = _data()
    gammas = [0.0, 50.0, 400.0, 3000.0]
    path = ridge_test_loss_path(train, test.X, test.y, step=0.2, batch_size=8, weight_decays=gammas,
                                theories=("dq-exact", "ct"))
    direct = []
    for g in gammas:
        e = expand(get_model("linear"), train, g)
        cov = predict_stationary_cov(e, Dynamics(0.2, 8)).cov
        direct.append(np.mean((test.y - test.X @ e.theta_hat) ** 2) + np.trace(cov @ test.X.T @ test.X) / test.n_data)
    np.testing.assert_allclose(path.losses["dq-exact"], direct, rtol=1e-12)
    assert optimal_weight_decay(train, test.X, test.y, step=0.2, batch_size=8,
                                weight_decays=gammas) == gammas[int(np.argmin(direct))]
    # the stationary noise only adds to the test loss of θ̂
    assert np.all(path.losses["dq-exact"] > path.bias) and np.all(path.losses["ct"] > path.bias)


def test_batch_size_path_decreases_and_marks_unstable():
    train, test = _data()
    path = ridge_test_loss_path(train, test.X, test.y, step=0.2, batch_sizes=[2, 8, 32, 128])
    assert np.all(np.diff(path.losses["dq-exact"]) < 0)  # larger batches, less gradient noise
    assert optimal_batch_size(train, test.X, test.y, step=0.2, batch_sizes=[2, 8, 32, 128]) == 128
    bad = ridge_test_loss_path(train, test.X, test.y, step=5.0, batch_sizes=[8], theories=("dq-exact",))
    assert math.isinf(bad.losses["dq-exact"][0])


def test_errors():
    train, test = _data()
    with pytest.raises(ShapeError, match="X_test must be \\(M, D\\) with D = 3 but has shape \\(400, 2\\)"):
        predicted_test_loss(np.zeros(3), np.eye(3), test.X[:, :2], test.y)
    with pytest.raises(ShapeError, match="y_test has 5 entries"):
        predicted_test_loss(np.zeros(3), np.eye(3), test.X, test.y[:5])
    with pytest.raises(ShapeError, match="stationary_cov must be"):
        predicted_test_loss(np.zeros(3), np.eye(2), test.X, test.y)
    with pytest.raises(SgtuneError, match="exactly one of weight_decays"):
        ridge_test_loss_path(train, test.X, test.y, step=0.1, batch_size=8)
    with pytest.raises(SgtuneError, match="theories must be among .* got 'sde'"):
        ridge_test_loss_path(train, test.X, test.y, step=0.1, batch_size=8, weight_decays=[0.0], theories=("sde",))
    with pytest.raises(SgtuneError, match="weight_decays must be finite and >= 0"):
        ridge_test_loss_path(train, test.X, test.y, step=0.1, batch_size=8, weight_decays=[-1.0])
