"""The Σ-dependent minibatch noise of the Kronecker family (C̄(Σ) of Eq. (12) in factored form) against dense routes.

- the factored prediction with the Σ-dependent noise (``exact_noise_prediction``, the ``dq-exact`` tuner) against
  the same factored noise built densely (np.kron, a 4-index contraction for KFAC's independence, an explicit
  whitened partial trace or eigenbasis diagonal) and a dense fixed-point Lyapunov iteration: 1e-10, with
  momentum, β = 2N and SGD, with and without replacement, damped and eigenbasis forms;
- m₂ from the inputs' fourth moments against the direct mean of (ãᵀÃ⁻¹ã)²;
- a step without a stationary covariance (noise gain ≥ 1): flagged and warned, the dense iteration diverges,
  and the ``dq-exact`` tuner's step for the same layer is stable.
"""
import math

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.core.errors import AccuracyWarning, SgtuneError, UnstableStepSizeError
from sgtune.models import MLP
from sgtune.models.kfac import KroneckerFactors, LayerFactors, mlp_factors
from sgtune.theory.kronecker import (KroneckerTuning, curvature_noise_factor, damped_factors, exact_noise_prediction,
                                     tune_factors)
from sgtune.theory.kronecker_dense import dense_factored_exact_cov, layer_samples


def _net(rng, n=300, p=3, hidden=(4,), likelihood="gaussian"):
    X = rng.normal(size=(n, p))
    y = np.tanh(X @ rng.normal(size=p)) + 0.3 * rng.normal(size=n)
    if likelihood == "bernoulli":
        y = (y > 0).astype(float)
    net = MLP(hidden, activation="tanh", likelihood=likelihood)
    theta = net.initial_params(p, rng)
    return net, theta, X, y


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("prior", ["damped", "eigenbasis"])
@pytest.mark.parametrize("momentum", [0.0, 0.5])
@pytest.mark.parametrize("batching", ["replacement", "without-replacement"])
@pytest.mark.parametrize("beta_factor", [math.inf, 2.0])
def test_dq_exact_prediction_matches_the_dense_factored_chain(rng, prior, momentum, batching, beta_factor):
    net, theta, X, y = _net(rng, likelihood="bernoulli" if momentum else "gaussian")
    n = X.shape[0]
    fac = mlp_factors(net, theta, X, y, prior_precision=2.0, samples=True)
    dyn = Dynamics(None, batch_size=20, inv_temperature=beta_factor * n, momentum=momentum, batching=batching)
    res = tune_factors(fac, dyn, prior=prior, method="dq-exact")
    dense = dense_factored_exact_cov(res, fac, layer_samples(net, theta, X))
    assert _rel(res.dense_cov(), dense) < 1e-10
    assert res.covariance_error < 1e-10 and 0.0 < res.noise_gain < 1.0
    # the factored target holds: the dense chain lands on it
    assert _rel(dense, exact_noise_prediction(res, fac).dense_cov()) < 1e-10


@pytest.mark.parametrize("prior", ["damped", "eigenbasis"])
@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_the_exact_noise_prediction_of_a_dq_const_step_matches_dense(rng, prior, momentum):
    net, theta, X, y = _net(rng, hidden=(3, 2))
    n = X.shape[0]
    fac = mlp_factors(net, theta, X, y, prior_precision=1.0, samples=True)
    res = tune_factors(fac, Dynamics(None, batch_size=10, inv_temperature=2.0 * n, momentum=momentum), prior=prior)
    pred = exact_noise_prediction(res, fac)
    dense = dense_factored_exact_cov(res, fac, layer_samples(net, theta, X))
    assert _rel(pred.dense_cov(), dense) < 1e-10
    assert pred.covariance_error > 1e-4  # the constant-noise step misses the target under the Σ-dependent noise
    # both reported gains bound the true spectral radius of the layer's noise map, computed densely here
    from sgtune.theory.kronecker import _noise_response

    for lay, play, lf in zip(res.layers, pred.layers, fac.layers):
        if lay.eigenbasis is not None:
            continue
        A_d, G_d = damped_factors(lf, 1.0, n)
        resp = _noise_response(G_d, lay.step_factor, res.dynamics, n)
        d = lf.d_out
        K = np.column_stack([resp(curvature_noise_factor(lf, A_d, e.reshape(d, d))).ravel() for e in np.eye(d * d)])
        rho = np.max(np.abs(np.linalg.eigvals(K)))
        assert 0 < rho <= min(lay.noise_gain, play.noise_gain) + 1e-12 and lay.noise_gain < 1


def test_input_moment_and_positivity(rng):
    net, theta, X, y = _net(rng, n=200)
    fac = mlp_factors(net, theta, X, y, prior_precision=3.0, samples=True)
    for lf, (inputs, Gn) in zip(fac.layers, layer_samples(net, theta, X)):
        A_d, _ = damped_factors(lf, 3.0, 200)
        q = np.einsum("ni,ij,nj->n", inputs, np.linalg.inv(A_d), inputs)
        S = np.eye(lf.d_out)
        direct = (np.mean(q ** 2) * np.mean(Gn @ S @ Gn, axis=0)
                  - np.trace(np.linalg.solve(A_d, lf.input_factor) @ np.linalg.solve(A_d, lf.input_factor))
                  * lf.curvature_factor @ S @ lf.curvature_factor) / lf.d_in
        assert _rel(curvature_noise_factor(lf, A_d, S), direct) < 1e-12
        for _ in range(5):  # completely positive: PSD in, PSD out
            Z = rng.normal(size=(lf.d_out, 2))
            assert np.linalg.eigvalsh(curvature_noise_factor(lf, A_d, Z @ Z.T))[0] > -1e-12


def _fluctuating_layer(n=100):
    """A one-parameter layer whose per-sample curvature is 0 on all rows but one: a large Hessian fluctuation."""
    roots = np.zeros((n, 1, 1))
    roots[0] = math.sqrt(n)
    lf = LayerFactors("fc", np.eye(1), np.eye(1), 0.01 * np.eye(1), (0, 1), curvature_roots=roots,
                      input_fourth=np.eye(1))
    samples = [(np.ones((n, 1)), roots[:, :, :, None][:, 0] * roots[:, 0, None, :])]
    return KroneckerFactors((lf,), n_data=n, dim=1), samples


def test_a_step_without_stationary_covariance_is_flagged():
    fac, samples = _fluctuating_layer()
    dyn = Dynamics(None, batch_size=1)
    with pytest.warns(AccuracyWarning, match="second moments grow"):
        res = tune_factors(fac, dyn)
    assert math.isinf(res.noise_gain) and res.to_dict()["warnings"]
    with pytest.raises(UnstableStepSizeError):  # the dense route agrees: no fixed point
        dense_factored_exact_cov(res, fac, samples, max_iter=2000)
    with pytest.warns(AccuracyWarning):
        assert math.isinf(exact_noise_prediction(res, fac).variances()[0])
    good = tune_factors(fac, dyn, method="dq-exact")
    assert good.noise_gain < 1.0 and not good.warnings
    assert _rel(good.dense_cov(), dense_factored_exact_cov(good, fac, samples, max_iter=20000)) < 1e-10


def test_method_save_load_and_refusals(rng, tmp_path):
    net, theta, X, y = _net(rng, n=100)
    fac = mlp_factors(net, theta, X, y, prior_precision=1.0, samples=True)
    res = tune_factors(fac, Dynamics(None, batch_size=10, inv_temperature=200.0), method="dq-exact")
    res.save(tmp_path / "k.npz")
    back = KroneckerTuning.load(tmp_path / "k.npz")
    assert back.method == "dq-exact" and back.noise_gain == res.noise_gain
    with pytest.raises(SgtuneError, match="method must be one of"):
        tune_factors(fac, Dynamics(None, batch_size=10), method="exact")
    bare = mlp_factors(net, theta, X, y, prior_precision=1.0, samples=False)
    with pytest.raises(SgtuneError, match="samples=True"):
        tune_factors(bare, Dynamics(None, batch_size=10), method="dq-exact")
    assert math.isnan(tune_factors(bare, Dynamics(None, batch_size=10)).noise_gain)


@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli", "categorical"])
def test_torch_roots_rebuild_the_curvlinops_factor_and_match_the_mlp(rng, likelihood):
    torch = pytest.importorskip("torch")
    pytest.importorskip("curvlinops")
    from sgtune.models.kfac import torch_factors

    n, p, k = 120, 3, 3 if likelihood == "categorical" else 1
    X = rng.normal(size=(n, p))
    y = rng.integers(0, k, size=n) if likelihood == "categorical" else (rng.normal(size=n) > 0).astype(float)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(p, 4), torch.nn.Tanh(), torch.nn.Linear(4, k)).double()
    fac = torch_factors(net, X, y, likelihood, noise_variance=0.5, prior_precision=1.0, samples=True)
    for lf in fac.layers:  # mean_n Σ_k v_nk v_nkᵀ is curvlinops' type-2 factor G (an independent computation)
        V = lf.curvature_roots
        assert _rel(np.einsum("nkd,nke->de", V, V) / n, lf.curvature_factor) < 1e-10
    first = np.sum(np.hstack([X, np.ones((n, 1))]) ** 2, axis=1)  # ΣR = mean_n ‖ã_n‖⁴ in any orthonormal basis
    assert fac.layers[0].input_fourth.sum() == pytest.approx(np.mean(first ** 2), rel=1e-12)
    if likelihood == "gaussian":  # the NumPy MLP's own route gives the same roots and fourth moments
        W1, b1, W2, b2 = (t.detach().numpy() for t in net.parameters())
        theta = np.concatenate([W1.ravel(), b1, W2.ravel(), b2])
        mfac = mlp_factors(MLP((4,), activation="tanh", likelihood="gaussian", noise_variance=0.5), theta, X, y,
                           prior_precision=1.0, samples=True)
        for lt, lm in zip(fac.layers, mfac.layers):
            assert _rel(np.abs(lt.curvature_roots), np.abs(lm.curvature_roots)) < 1e-10
            assert _rel(lt.input_fourth, lm.input_fourth) < 1e-8


def test_exact_sample_hessian_roots_rebuild_the_mlp_per_sample_hessians(rng):
    net, theta, X, y = _net(rng, n=40, hidden=(3, 2))
    net = MLP((3, 2), activation="tanh", likelihood="gaussian", hessian="exact")
    fac = mlp_factors(net, theta, X, y, sample_hessian="exact", samples=True)
    Hn = net.per_sample_hessians(theta, X, y)  # the model's own dense per-sample Hessians (N, D, D)
    for lf, (inputs, _) in zip(fac.layers, layer_samples(net, theta, X)):
        idx = lf.theta_indices()
        V, sg = lf.curvature_roots, lf.curvature_signs
        Gn = np.einsum("nk,nkd,nke->nde", sg, V, V)
        blocks = np.einsum("nde,ni,nj->ndiej", Gn, inputs, inputs).reshape(len(X), len(idx), len(idx))
        assert _rel(blocks, Hn[:, idx][:, :, idx]) < 1e-10


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_dq_exact_with_exact_sample_hessians_matches_dense(rng, momentum):
    net, theta, X, y = _net(rng, n=200)
    net = MLP((4,), activation="tanh", likelihood="gaussian", hessian="exact")
    fac = mlp_factors(net, theta, X, y, prior_precision=2.0, sample_hessian="exact", samples=True)
    res = tune_factors(fac, Dynamics(None, batch_size=20, inv_temperature=400.0, momentum=momentum), method="dq-exact")
    dense = dense_factored_exact_cov(res, fac, layer_samples(net, theta, X, y))
    assert _rel(res.dense_cov(), dense) < 1e-10 and res.noise_gain < 1
