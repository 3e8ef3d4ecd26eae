"""The theory on a network: forward solver and tuner against a dense brute-force solve built from the
per-sample Hessians, and against SGD runs of the actual network near θ̂ (MCSE tolerances)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _timeouts import HANG_GUARD_S

from sgtune.core.config import Dynamics, RunSpec
from sgtune.io.data import make_dataset
from sgtune.diagnostics.mcse import compare_covariance
from sgtune.models import expand
from sgtune.models.mlp import make_mlp
from sgtune.sampler import run_chains
from sgtune.theory.stationary import predict_stationary_cov
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics
from sgtune.core.errors import AccuracyWarning

ROOT = Path(__file__).resolve().parents[1]


def _network_problem(n=600, seed=0):
    """p = 4 inputs, one hidden layer of 3 tanh units: D = 4·3 + 3 + 3 + 1 = 19."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = np.tanh(X @ np.array([0.8, -0.5, 0.3, 0.0])) + 0.5 * np.tanh(X[:, 1]) + 0.3 * rng.normal(size=n)
    data = make_dataset(X, y)
    net = make_mlp("3", activation="tanh", likelihood="gaussian", noise_variance=0.5)
    return net, data, expand(net, data, 1.0, seed=1)


def _brute_force_cov(e, lam, batch_size):
    """Σ = (I − ΛH)Σ(I − ΛH)ᵀ + Λ C̄(Σ) Λ, C̄(Σ) = (1/B)[𝓘 − ḡḡᵀ + mean_n J_nΣJ_n − JΣJ] (Wang, Ding & Huggins (2026) eqs. 11–12),
    as one dense D²×D² linear system assembled from the per-sample Hessians of the network
    (independently of sgtune.theory.stationary)."""
    Hs = e.per_sample_hessians
    d = e.dim
    I = np.eye(d)
    F = I - lam @ e.hessian
    J = Hs.mean(axis=0)
    K = np.einsum("nij,nkl->ikjl", Hs, Hs).reshape(d * d, d * d) / Hs.shape[0] - np.kron(J, J)
    g = e.grads
    C0 = g.T @ g / g.shape[0] - np.outer(g.mean(0), g.mean(0))
    LL = np.kron(lam, lam)
    op = np.eye(d * d) - np.kron(F, F) - LL @ K / batch_size
    rhs = (lam @ C0 @ lam.T / batch_size).ravel()
    S = np.linalg.solve(op, rhs).reshape(d, d)
    return 0.5 * (S + S.T)


def test_forward_solver_on_a_network_matches_the_dense_brute_force():
    net, data, e = _network_problem()
    assert e.dim == 19 and not e.rank_one
    rng = np.random.default_rng(3)
    A = rng.normal(size=(19, 19))
    lam = 0.02 * (np.eye(19) + 0.1 * (A + A.T) / 2)  # a dense SPD Λ
    st = predict_stationary_cov(e, Dynamics(lam, 16))
    ref = _brute_force_cov(e, lam, 16)
    np.testing.assert_allclose(st.cov, ref, rtol=1e-9, atol=1e-12 * np.abs(ref).max())


def test_tuner_on_a_network_hits_the_target_in_the_brute_force_solve():
    net, data, e = _network_problem()
    res = tune(e, Dynamics(None, 16), target="posterior")
    ref = _brute_force_cov(e, res.step_matrix, 16)
    target = e.posterior_cov()
    assert np.linalg.norm(ref - target) / np.linalg.norm(target) < 1e-9


@pytest.mark.mc
def test_sgd_on_the_network_matches_dq_exact_within_mcse():
    """SGD iterates of the real network (numba MLP kernel) near θ̂ vs the exact DQ prediction.

    At λ = 0.05 and B = 16 the Taylor proxy's error is O(λ/B) relative; the test allows 10 % of each
    entry on top of the Bonferroni MCSE threshold.

    It used to also require CT's prediction (which drops the HΣH term, 6 % of ‖Σ‖ here) to be further
    from the chains than DQ+exact's. That held for this seed only: on 20 seeds CT was the closer one 15
    times, and along the direction CT − DQ the chains sit ≈ 0.8 of the way from DQ towards CT (3–8 MCSE
    from DQ per seed) — the proxy's O(λ/B) error on this network is as large as the HΣH term, so the
    comparison cannot separate the two theories and was dropped.
    """
    net, data, e = _network_problem()
    lam = 0.05
    st = predict_stationary_cov(e, Dynamics(lam, 16))
    res = run_chains(net, data, Dynamics(lam, 16), RunSpec(200_000, n_chains=4, burn_in=20_000, seed=11),
                     prior_precision=1.0, initial=e.theta_hat)
    test = compare_covariance(st.cov, res.cov, res.cov_standard_error, n_batches=res.n_batches,
                              relative_tolerance=0.10)
    assert test.passed, (test.z_max, test.threshold, test.relative_frobenius_error)


@pytest.mark.notebook
def test_neural_network_notebook_smoke():
    env = {**os.environ, "SGTUNE_SMOKE": "1", "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "notebooks" / "neural_network_covariance.py")],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert "dq-exact" in out.stdout and "MC floor" in out.stdout


def test_block_family_defaults_to_the_network_layers():
    net, data, e = _network_problem()
    assert e.parameter_blocks == (tuple(range(0, 15)), tuple(range(15, 19)))  # W_1 (3×4), b_1 | W_2 (1×3), b_2
    with pytest.warns(AccuracyWarning, match="family 'block' misses the target"):  # layers apart: far off
        res = tune(e, Dynamics(None, 16), target="posterior", family="block")
    lam = res.step_matrix
    np.testing.assert_array_equal(lam[:15, 15:], 0.0)
    np.testing.assert_array_equal(lam[15:, :15], 0.0)
    assert np.all(np.linalg.eigvalsh(lam[:15, :15]) > 0) and np.all(np.linalg.eigvalsh(lam[15:, 15:]) > 0)
