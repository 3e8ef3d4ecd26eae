"""Tuner (Wang, Ding & Huggins (2026) Alg. 1 step 6, docs/conventions.md) against root-finding, closed forms and the forward solver."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize as sopt
from hypothesis import given, settings, strategies as st

from sgtune.io.data import example, make_dataset
from sgtune.core.errors import InfeasibleTargetError, NotPositiveDefiniteError, SgtuneError
from sgtune.models import Expansion, expand, get_model
from sgtune.theory.stationary import noise_covariance, predict_stationary_cov
from sgtune.theory.tuning import closed_form_step_matrix, solve_step_matrix, tune
from sgtune.core.config import Dynamics

from _tolerances import SOLVER_RTOL, TUNING_RESIDUAL


def synthetic_expansion(seed: int, n: int = 60, d: int = 4, prior: float = 0.5) -> Expansion:
    """A random rank-one problem: covariates with random scales, positive weights, random gradients."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.5, 2.0, d)
    w = rng.uniform(0.2, 2.0, n)
    g = rng.standard_normal((n, d)) * rng.uniform(0.5, 2.0, d)
    return Expansion(theta_hat=rng.standard_normal(d), grads=g, prior_precision=prior * np.eye(d), design=X,
                     weights=w)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), B=st.integers(1, 30), beta_is_inf=st.booleans(),
       kappa=st.sampled_from([0.0, 0.3]))
def test_forward_of_tune_is_the_target(seed, B, beta_is_inf, kappa):
    """Property: for random SPD problems forward(tune(Σ*)) = Σ*."""
    e = synthetic_expansion(seed)
    beta = math.inf if beta_is_inf else 50.0 * e.n_data
    res = tune(e, Dynamics(None, B, inv_temperature=beta, momentum=kappa), target="sandwich")
    assert res.residual < TUNING_RESIDUAL * (1e3 if kappa else 1)  # momentum: root-finding, xtol 1e-13
    np.testing.assert_allclose(res.predicted_cov, res.target_cov, rtol=1e-8 if kappa else SOLVER_RTOL,
                               atol=1e-8 * np.abs(res.target_cov).max())
    assert np.all(np.linalg.eigvalsh(res.step_matrix) > 0)
    np.testing.assert_array_equal(res.step_matrix, res.step_matrix.T)


def test_agrees_with_root_finding_started_near_the_answer():
    """scipy.optimize.root(hybr) on vec(Λ) of eq. (11), started 5 % away, converges to the same Λ."""
    e = expand(get_model("linear"), example("hetero-linear"))
    d = 6
    e = Expansion(theta_hat=e.theta_hat[:d], grads=e.grads[:, :d], prior_precision=e.prior_precision[:d, :d],
                  design=e.design[:, :d], weights=e.weights)
    res = tune(e, Dynamics(None, 16))
    S, H = res.target_cov, e.hessian
    R = noise_covariance(e, S, Dynamics(None, 16)) + H @ S @ H

    iu = np.triu_indices(d)

    def sym(v):  # symmetric Λ from its upper triangle (eq. 11 is stated for symmetric Λ)
        L = np.zeros((d, d))
        L[iu] = v
        return L + np.triu(L, 1).T

    def eq11(v):
        L = sym(v)
        return (L @ H @ S + S @ H @ L - L @ R @ L)[iu] / np.abs(S).max()

    rng = np.random.default_rng(3)
    start = res.step_matrix * (1 + 0.05 * rng.standard_normal((d, d)))
    sol = sopt.root(eq11, start[iu], method="hybr", options={"xtol": 1e-12})
    assert sol.success and np.abs(sol.fun).max() < 1e-9
    # hybr stops at relative step xtol = 1e-12; times the Jacobian's conditioning (~1e3 here)
    np.testing.assert_allclose(sym(sol.x), res.step_matrix, rtol=1e-8, atol=1e-9 * np.abs(res.step_matrix).max())
    # started from the identity scaled small, hybr finds the trivial root Λ = 0 and reports success
    trivial = sopt.root(eq11, 1e-3 * np.eye(d)[iu], method="hybr")
    assert np.abs(trivial.x).max() < 1e-6 * np.abs(res.step_matrix).max() or not trivial.success


def test_ct_is_2B_over_N_inverse_J_for_sandwich_without_prior():
    e = expand(get_model("logistic"), example("logistic"))
    B = 32
    res = tune(e, Dynamics(None, B), method="ct")
    np.testing.assert_allclose(res.step_matrix, 2 * B / e.n_data * np.linalg.inv(e.curvature), rtol=1e-10)


def test_well_specified_closed_form_matches_and_misspecified_does_not():
    """Closed form (ΣJ+JΣ)(C̄+JΣJ)⁻¹ is exact only when Λ commutes with JΣ."""
    e = expand(get_model("linear"), example("hetero-linear"))
    exact = tune(e, Dynamics(None, 64)).step_matrix
    approx = closed_form_step_matrix(e, Dynamics(None, 64), "sandwich")
    assert np.linalg.norm(approx - approx.T) / np.linalg.norm(approx) > 1e-3  # non-symmetric
    assert np.linalg.norm(approx - exact) / np.linalg.norm(exact) > 1e-3
    # 1-D: everything commutes, the closed form is exact
    rng = np.random.default_rng(0)
    e1 = expand(get_model("linear"), make_dataset(rng.standard_normal((50, 1)), rng.standard_normal(50)))
    np.testing.assert_allclose(closed_form_step_matrix(e1, Dynamics(None, 5), "sandwich"),
                               tune(e1, Dynamics(None, 5)).step_matrix, rtol=1e-12)


@pytest.mark.parametrize("method", ["dq-exact", "ct", "dq-const", "lr-ws"])
def test_each_method_solves_its_own_equation(method):
    e = expand(get_model("linear"), example("hetero-linear"))
    res = tune(e, Dynamics(None, 64), method=method)
    assert res.residual < TUNING_RESIDUAL
    if method == "dq-exact":
        assert res.covariance_error < 1e-10
    else:  # the comparison theories miss the exact covariance on misspecified data
        assert res.covariance_error > 1e-3


def test_methods_coincide_in_one_dimension_without_noise_terms():
    """B = N without replacement: no minibatch noise at all, so dq-exact = dq-const and SGLD only."""
    rng = np.random.default_rng(1)
    e = expand(get_model("linear"), make_dataset(rng.standard_normal((30, 2)), rng.standard_normal(30)))
    a = tune(e, Dynamics(None, 30, inv_temperature=1e3, batching="without-replacement"), target="posterior")
    b = tune(e, Dynamics(None, 30, inv_temperature=1e3, batching="without-replacement"), target="posterior",
             method="dq-const")
    np.testing.assert_allclose(a.step_matrix, b.step_matrix, rtol=1e-12)
    # closed form: Λ(2HΣ − ΛHΣH) = 2Λ/β with Σ = H⁻¹/N ⇒ Λ = 2(1 − N/β)H⁻¹ ... solve the scalar family in 1-D
    S = a.target_cov
    H = e.hessian
    lhs = a.step_matrix @ H @ S + S @ H @ a.step_matrix
    np.testing.assert_allclose(lhs, a.step_matrix @ H @ S @ H @ a.step_matrix + 2e-3 * a.step_matrix,
                               rtol=1e-12, atol=1e-15)


def test_families_minimise_the_stated_criterion():
    e = expand(get_model("linear"), example("hetero-linear"))
    dense = tune(e, Dynamics(None, 64))
    scal = tune(e, Dynamics(None, 64), family="scalar")
    lam = scal.step_matrix[0, 0]
    np.testing.assert_array_equal(scal.step_matrix, lam * np.eye(20))
    Li = np.linalg.inv(np.linalg.cholesky(dense.target_cov))

    def crit(cov):
        return np.linalg.norm(Li @ cov @ Li.T - np.eye(20))

    c0 = crit(scal.predicted_cov)
    for f in (0.98, 1.02):  # a local minimum along the family
        assert crit(predict_stationary_cov(e, Dynamics(f * lam, 64)).cov) > c0
    assert crit(dense.predicted_cov) < 1e-10 < c0
    diag = tune(e, Dynamics(None, 64), family="diagonal")
    assert np.count_nonzero(diag.step_matrix - np.diag(np.diag(diag.step_matrix))) == 0
    assert crit(diag.predicted_cov) <= c0 + 1e-9  # the diagonal family contains the scalar one


def test_sgld_infeasible_target_names_smallest_temperature():
    e = expand(get_model("linear"), example("hetero-linear"), 1.0)
    S = e.posterior_cov()
    beta_min = 1.0 / np.linalg.eigvals(e.hessian @ S).real.min()  # = N here: posterior needs β > N
    assert beta_min == pytest.approx(e.n_data, rel=1e-10)
    with pytest.raises(InfeasibleTargetError, match=r"inverse temperature > 2000") as info:
        tune(e, Dynamics(None, 64, inv_temperature=e.n_data), target="posterior")
    assert info.value.min_inv_temperature == pytest.approx(beta_min)
    res = tune(e, Dynamics(None, 64, inv_temperature=1.5 * e.n_data), target="posterior")
    assert res.covariance_error < 1e-10


def test_errors():
    e = expand(get_model("logistic"), example("logistic"))
    with pytest.raises(SgtuneError, match="lr-ws.*linear regression"):
        tune(e, Dynamics(None, 8), method="lr-ws")
    with pytest.raises(SgtuneError, match="method must be one of"):
        tune(e, Dynamics(None, 8), method="newton")
    with pytest.raises(SgtuneError, match="family must be one of"):
        tune(e, Dynamics(None, 8), family="blocky")
    with pytest.raises(SgtuneError, match="use method 'dq-exact'"):
        tune(e, Dynamics(None, 8), method="ct", family="scalar")
    with pytest.raises(SgtuneError, match="target must be"):
        tune(e, Dynamics(None, 8), target="prior")
    with pytest.raises(NotPositiveDefiniteError, match="target must be symmetric positive definite"):
        tune(e, Dynamics(None, 8), target=-np.eye(5))
    with pytest.raises(SgtuneError, match=r"must be \(D, D\) = \(5, 5\)"):
        tune(e, Dynamics(None, 8), target=np.eye(3))
    with pytest.raises(InfeasibleTargetError):
        solve_step_matrix(np.eye(2), np.eye(2) * 0.1, np.eye(2), inv_temperature=5.0)


@pytest.mark.parametrize("method", ["ct", "dq-const", "lr-ws", "dq-exact"])
def test_each_theory_forward_recovers_target_at_its_own_lambda(method):
    """Inverse (eigen route) vs forward (scipy's Lyapunov/Stein solvers or a dense vec solve)."""
    from sgtune.theory.stationary import predict_comparison_cov

    e = expand(get_model("linear"), example("hetero-linear"))
    res = tune(e, Dynamics(None, 64, inv_temperature=3 * e.n_data), method=method)
    S = predict_comparison_cov(e, Dynamics(res.step_matrix, 64, inv_temperature=3 * e.n_data), theory=method)
    np.testing.assert_allclose(S, res.target_cov, rtol=1e-9, atol=1e-12)
