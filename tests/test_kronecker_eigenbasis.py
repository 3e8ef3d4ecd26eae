"""The Kronecker family with the prior in the eigenbasis (prior="eigenbasis") against dense solves.

The chain it is exact for is built densely with np.kron: H_l = G ⊗ A + (δ/N) I, C_l = the KFAC noise E_eff ⊗ A
with its off-diagonal removed in the eigenbasis Q_G ⊗ Q_A, Λ = the result's dense step matrix; sgtune's dense
LinearChain solves it. Also: the posterior target equals (N·G ⊗ A + δI)⁻¹ (laplace-torch's KronLaplace form,
inverted densely), and apply / noise / probe_variance / save-load agree with the dense matrices.
"""
import math

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.core.errors import SgtuneError
from sgtune.models import MLP
from sgtune.models.kfac import mlp_factors
from sgtune.theory.kronecker import KroneckerTuning, noise_factor_for, tune_factors
from sgtune.theory.linear_chain import LinearChain, finite_population_factor


def _factors(rng, n=300, p=3, hidden=(4,), delta=2.0):
    X = rng.normal(size=(n, p))
    y = np.tanh(X @ rng.normal(size=p)) + 0.3 * rng.normal(size=n)
    net = MLP(hidden, activation="tanh")
    return mlp_factors(net, net.initial_params(p, rng), X, y, prior_precision=delta)


def _dense_chain(res, fac):
    D = res.dim
    H, C = np.zeros((D, D)), np.zeros((D, D))
    for lf, lay in zip(fac.layers, res.layers):
        idx = lf.theta_indices()
        Qg, Qa = lay.eigenbasis[0], lay.eigenbasis[1]
        Q = np.kron(Qg, Qa)
        H[np.ix_(idx, idx)] = np.kron(lf.curvature_factor, lf.input_factor) + fac.prior_precision / fac.n_data * np.eye(len(idx))
        Ck = np.kron(noise_factor_for(lf, lf.input_factor), lf.input_factor)
        C[np.ix_(idx, idx)] = Q @ np.diag(np.diag(Q.T @ Ck @ Q)) @ Q.T
    return H, C


@pytest.mark.parametrize("momentum", [0.0, 0.5])
@pytest.mark.parametrize("batching", ["replacement", "without-replacement"])
@pytest.mark.parametrize("beta_factor", [math.inf, 2.0])
def test_eigenbasis_chain_matches_dense_solve(rng, momentum, batching, beta_factor):
    fac = _factors(rng)
    n = fac.n_data
    dyn = Dynamics(None, batch_size=20, inv_temperature=beta_factor * n, momentum=momentum, batching=batching)
    res = tune_factors(fac, dyn, target="posterior", prior="eigenbasis")
    assert all(lay.form == "eigenbasis" for lay in res.layers)
    H, C = _dense_chain(res, fac)
    lam = res.dense_step_matrix()
    f = finite_population_factor(n, 20, batching != "replacement")
    chain = LinearChain.with_constant_noise(dyn.replace(step=lam), H, C, noise_scale=f / 20)
    S = chain.solve_constant_noise()[:res.dim, :res.dim]
    dense = 0.5 * (S + S.T)
    assert np.linalg.norm(res.dense_cov() - dense) / np.linalg.norm(dense) < 1e-10
    # the exact-prior KFAC posterior (N G⊗A + δI)⁻¹ per layer, inverted densely
    target = np.linalg.inv(n * H)
    assert np.linalg.norm(dense - target) / np.linalg.norm(target) < 1e-10
    assert res.spectral_radius == pytest.approx(np.max(np.abs(np.linalg.eigvals(chain.transition))) ** 2, rel=1e-9)


def test_sandwich_eigenbasis_matches_dense(rng):
    fac = _factors(rng)
    n = fac.n_data
    dyn = Dynamics(None, batch_size=20, inv_temperature=math.inf, momentum=0.3)
    res = tune_factors(fac, dyn, target="sandwich", prior="eigenbasis")
    H, C = _dense_chain(res, fac)
    Hi = np.linalg.inv(H)
    target = Hi @ C @ Hi / n
    assert np.linalg.norm(res.dense_cov() - target) / np.linalg.norm(target) < 1e-10


def test_eigenbasis_maps_and_save_load_against_dense(rng, tmp_path):
    fac = _factors(rng, hidden=(3, 2))
    res = tune_factors(fac, Dynamics(None, batch_size=20, inv_temperature=2.0 * fac.n_data), prior="eigenbasis")
    lam, cov = res.dense_step_matrix(), res.dense_cov()
    G = rng.normal(size=(3, res.dim))
    assert np.allclose(res.apply(G), G @ lam, rtol=1e-12, atol=1e-14)
    assert np.allclose(res.probe_variance(G), np.einsum("kd,de,ke->k", G, cov, G), rtol=1e-12)
    assert np.allclose(res.variances(), np.diag(cov), rtol=1e-12)
    L = np.array([res.noise(e) for e in np.eye(res.dim)]).T  # columns L e_k
    assert np.allclose(L @ L.T, lam, rtol=1e-10, atol=1e-14)
    assert np.allclose(res.sqrt_apply(np.eye(res.dim), transpose=True), L, rtol=1e-12, atol=1e-14)
    res.save(tmp_path / "eig.npz")
    back = KroneckerTuning.load(tmp_path / "eig.npz")
    assert np.array_equal(back.dense_step_matrix(), lam) and back.layers[0].form == "eigenbasis"


def test_unknown_prior_form_is_refused(rng):
    fac = _factors(rng)
    with pytest.raises(SgtuneError, match="prior must be one of damped, eigenbasis"):
        tune_factors(fac, Dynamics(None, batch_size=20), prior="exact")


@pytest.mark.parametrize("prior", ["damped", "eigenbasis"])
def test_probe_directions_are_the_extreme_variance_directions(rng, prior):
    from sgtune.workflows.kronecker_probes import probe_directions

    fac = _factors(rng)
    res = tune_factors(fac, Dynamics(None, batch_size=20, inv_temperature=2.0 * fac.n_data), prior=prior)
    labels, V = probe_directions(res, n_random=1)
    cov = res.dense_cov()
    for lay in res.layers:
        idx = lay.theta_indices()
        w = np.linalg.eigvalsh(cov[np.ix_(idx, idx)])
        lo, hi = V[labels.index(f"{lay.name} least")], V[labels.index(f"{lay.name} most")]
        assert np.linalg.norm(lo) == pytest.approx(1.0) and np.linalg.norm(hi) == pytest.approx(1.0)
        assert lo @ cov @ lo == pytest.approx(w[0], rel=1e-9) and hi @ cov @ hi == pytest.approx(w[-1], rel=1e-9)
