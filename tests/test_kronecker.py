"""The Kronecker family (sgtune.theory.kronecker, sgtune.models.kfac) against dense routes.

- the factored chain's stationary covariance A⁻¹-structure against the dense Lyapunov solve of the same
  chain built with np.kron (LinearChain.with_constant_noise): 1e-10, with/without replacement, momentum,
  β = 2N and SGD;
- the layout (row-major [W | b], the bias as a last input column) against the MLP's own per-sample
  gradients; the KFAC factors against the expansion where KFAC is exact (a Gaussian GLM);
- apply / noise / probe_variance / save-load against the dense Λ and Σ;
- the prior's damping against laplace-torch's eigenbasis form, computed densely.
"""
import math

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.core.errors import NotPositiveDefiniteError, SgtuneError
from sgtune.io.data import make_dataset
from sgtune.models import MLP, expand
from sgtune.models.kfac import mlp_factors
from sgtune.theory.kronecker import tune_kronecker
from sgtune.theory.kronecker import (KroneckerTuning, damped_factors, eigenbasis_posterior_variance,
                                     noise_factor_for, tune_factors)
from sgtune.theory.linear_chain import LinearChain, finite_population_factor


def _net_data(rng, n=300, p=3, hidden=(4,), likelihood="gaussian"):
    X = rng.normal(size=(n, p))
    y = np.tanh(X @ rng.normal(size=p)) + 0.3 * rng.normal(size=n)
    if likelihood == "bernoulli":
        y = (y > 0).astype(float)
    net = MLP(hidden, activation="tanh", likelihood=likelihood)
    theta = net.initial_params(p, rng)
    return net, theta, X, y


def _dense_factored_chain(res: KroneckerTuning, factors):
    """H, C (per-sample, before f/B) and Λ of the factored chain as dense (D, D) matrices, from np.kron."""
    D = res.dim
    H, C = np.zeros((D, D)), np.zeros((D, D))
    for lf in factors.layers:
        A_d, G_d = damped_factors(lf, factors.prior_precision, factors.n_data)
        idx = lf.theta_indices()
        H[np.ix_(idx, idx)] = np.kron(G_d, A_d)
        C[np.ix_(idx, idx)] = np.kron(noise_factor_for(lf, A_d), A_d)
    return H, C, res.dense_step_matrix()


@pytest.mark.parametrize("momentum", [0.0, 0.5])
@pytest.mark.parametrize("batching", ["replacement", "without-replacement"])
@pytest.mark.parametrize("beta_factor", [math.inf, 2.0])
def test_factored_chain_matches_dense_solve(rng, momentum, batching, beta_factor):
    net, theta, X, y = _net_data(rng)
    n = X.shape[0]
    fac = mlp_factors(net, theta, X, y, prior_precision=2.0)
    dyn = Dynamics(None, batch_size=20, inv_temperature=beta_factor * n, momentum=momentum, batching=batching)
    res = tune_factors(fac, dyn, target="posterior")
    H, C, lam = _dense_factored_chain(res, fac)
    f = finite_population_factor(n, 20, batching != "replacement")
    chain = LinearChain.with_constant_noise(dyn.replace(step=lam), H, C, noise_scale=f / 20)
    S = chain.solve_constant_noise()
    dense = 0.5 * (S[:res.dim, :res.dim] + S[:res.dim, :res.dim].T)
    fact = res.dense_cov()
    assert np.linalg.norm(fact - dense) / np.linalg.norm(dense) < 1e-10
    # and the tuned chain hits the factored target (Σ* = S* ⊗ Ã⁻¹ per layer)
    target = np.zeros_like(dense)
    for lay in res.layers:
        idx = lay.theta_indices()
        target[np.ix_(idx, idx)] = np.kron(lay.target_output_cov, lay.input_inverse)
    assert np.linalg.norm(dense - target) / np.linalg.norm(target) < 1e-10
    # the reported spectral radius is the dense chain's ρ(F)²
    assert res.spectral_radius == pytest.approx(np.max(np.abs(np.linalg.eigvals(chain.transition))) ** 2, rel=1e-9)


def test_sandwich_target_is_the_factored_sandwich_without_prior(rng):
    net, theta, X, y = _net_data(rng)
    fac = mlp_factors(net, theta, X, y)
    res = tune_factors(fac, Dynamics(None, batch_size=10), target="sandwich")
    for lf, lay in zip(fac.layers, res.layers):
        J = np.kron(lf.curvature_factor, lf.input_factor)
        I = np.kron(lf.noise_factor, lf.input_factor)
        Ji = np.linalg.inv(J)
        want = Ji @ I @ Ji / fac.n_data
        got = np.kron(lay.target_output_cov, lay.input_inverse)
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-9
        assert lay.covariance_error < 1e-10


def test_layout_matches_the_mlp_per_sample_gradients(rng):
    """θ[idx].reshape(d_out, d_in) is [W | b]: the per-sample gradient there is e ãᵀ, so E and Ḡ from it agree."""
    net, theta, X, y = _net_data(rng, n=50, hidden=(3, 2))
    fac = mlp_factors(net, theta, X, y)
    g = net.per_sample_grads(theta, X, y)
    for lf in fac.layers:
        blocks = g[:, lf.theta_indices()].reshape(len(X), lf.d_out, lf.d_in)
        e = blocks[:, :, -1]  # the bias column: ∂l/∂b = e
        assert np.allclose(blocks.mean(axis=0), lf.mean_gradient, rtol=1e-12, atol=1e-14)
        assert np.allclose(e.T @ e / len(X), lf.noise_factor, rtol=1e-12, atol=1e-14)
        ratio = blocks[:, :, :-1] / e[:, :, None]  # = the layer's input a_n for every output row
        assert np.allclose(ratio[:, 0, :], ratio[:, -1, :])
        at = np.hstack([ratio[:, 0, :], np.ones((len(X), 1))])
        assert np.allclose(at.T @ at / len(X), lf.input_factor, rtol=1e-9)


def test_kfac_is_exact_for_a_gaussian_glm(rng):
    """No hidden layer, Gaussian: J_n = ããᵀ/σ², so G ⊗ A is the expansion's J exactly (the scaling)."""
    X = rng.normal(size=(80, 3))
    y = X @ np.array([1.0, -0.5, 0.2]) + rng.normal(size=80)
    net = MLP((), likelihood="gaussian", noise_variance=2.0)
    e = expand(net, make_dataset(X, y))
    theta = e.theta_hat
    fac = mlp_factors(net, theta, X, y)
    lf = fac.layers[0]
    assert np.allclose(np.kron(lf.curvature_factor, lf.input_factor)[np.argsort(lf.theta_indices())][:, np.argsort(
        lf.theta_indices())], e.curvature, rtol=1e-12)


def test_apply_noise_probe_and_save_load(rng, tmp_path):
    net, theta, X, y = _net_data(rng, hidden=(3, 2))
    res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=25, inv_temperature=600.0, momentum=0.3),
                         theta=theta, prior_precision=1.0)
    lam, sig = res.dense_step_matrix(), res.dense_cov()
    G = rng.normal(size=(5, res.dim))
    assert np.allclose(res.apply(G), G @ lam.T, rtol=1e-12, atol=1e-15)
    Z = res.noise(np.eye(res.dim))  # columns: Λ^{1/2} e_i, so Z Zᵀ = Λ
    assert np.allclose(Z.T @ Z, lam, rtol=1e-10, atol=1e-15)
    assert np.allclose(res.probe_variance(G), np.einsum("ki,ij,kj->k", G, sig, G), rtol=1e-12)
    assert np.allclose(res.variances(), np.diag(sig), rtol=1e-12)
    path = tmp_path / "k.npz"
    res.save(path)
    back = KroneckerTuning.load(path)
    assert back.names == res.names and back.target == res.target
    for field in ("batch_size", "inv_temperature", "momentum", "batching"):
        assert getattr(back.dynamics, field) == getattr(res.dynamics, field)
    assert np.array_equal(back.apply(G), res.apply(G))
    assert back.to_dict() == res.to_dict()


def test_prior_damping_against_the_eigenbasis_posterior(rng):
    """prior_error is ‖Σ_damped − Σ_eig‖_F/‖Σ_eig‖_F, Σ_eig = (N·G⊗A + δI)⁻¹ (laplace-torch), checked densely."""
    net, theta, X, y = _net_data(rng)
    n, delta = len(X), 5.0
    fac = mlp_factors(net, theta, X, y, prior_precision=delta)
    res = tune_factors(fac, Dynamics(None, batch_size=10), target="posterior")
    for lf, lay in zip(fac.layers, res.layers):
        eig = np.linalg.inv(n * np.kron(lf.curvature_factor, lf.input_factor) + delta * np.eye(lf.n_params))
        damped = np.kron(lay.target_output_cov, lay.input_inverse)
        assert lay.prior_error == pytest.approx(np.linalg.norm(damped - eig) / np.linalg.norm(eig), rel=1e-8)
        V = rng.normal(size=(4, lf.d_out, lf.d_in))
        Vf = V.reshape(4, -1)
        assert np.allclose(eigenbasis_posterior_variance(lf, V, delta, n), np.einsum("ki,ij,kj->k", Vf, eig, Vf),
                           rtol=1e-10)


def test_bad_input_is_one_line(rng):
    net, theta, X, y = _net_data(rng, n=3, p=5)  # 6 inputs (with the 1), 3 rows: A singular
    fac = mlp_factors(net, theta, X, y)
    with pytest.raises(NotPositiveDefiniteError, match="input factor A is singular.*prior_precision"):
        tune_factors(fac, Dynamics(None, batch_size=2))
    with pytest.raises(SgtuneError, match="target must be one of posterior, sandwich"):
        tune_factors(fac, Dynamics(None, batch_size=2), target="dense")


def test_approximation_ladder_structure(rng):
    """One Gaussian layer without prior: KFAC's H is exact and there is no prior and no other layer, so those
    rungs cost nothing; the first rung is the family's own prediction and the last the dense exact one."""
    from sgtune.theory.kronecker_dense import approximation_ladder
    from sgtune.theory.stationary import predict_stationary_cov

    X = rng.normal(size=(200, 3)) * np.array([1.0, 2.0, 0.5])
    y = X @ np.array([1.0, -0.5, 0.2]) + (1 + np.abs(X[:, 0])) * rng.normal(size=200)
    net = MLP((), likelihood="gaussian")
    e = expand(net, make_dataset(X, y))
    fac = mlp_factors(net, e.theta_hat, X, y)
    res = tune_factors(fac, Dynamics(None, batch_size=20, inv_temperature=400.0), target="sandwich")
    lad = approximation_ladder(res, fac, e)
    assert lad["step"]["exact prior"] < 1e-12 and lad["step"]["cross-layer"] < 1e-12
    assert lad["step"]["layer blocks"] > 1e-3  # heteroscedastic: E ⊗ A is not 𝓘
    assert np.linalg.norm(lad["covs"]["factored"] - res.dense_cov()) < 1e-10 * np.linalg.norm(res.dense_cov())
    exact = predict_stationary_cov(e, res.dynamics.replace(step=res.dense_step_matrix())).cov
    assert np.allclose(lad["covs"]["exact noise"], exact, rtol=1e-12)
    assert lad["target_distance"] == pytest.approx(
        np.linalg.norm(res.dense_cov() - e.sandwich_cov()) / np.linalg.norm(e.sandwich_cov()), rel=1e-8)
