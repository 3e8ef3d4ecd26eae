"""Structured Λ families with momentum without the augmented fit (issue 10, item 2 at large D).

Independent routes: the reduced momentum equation's two sides computed densely by
``_momentum_terms`` (the residual function of the dense momentum tuner, not the closed form);
a one-dimensional root (Brent) of the trace of that residual for the scalar family; the dense
Newton–Krylov momentum solve for the one-block family; the κ = 0 closed form of eq. (11); the
augmented (d, ν) forward solve of Prop. B.1 (``predict_stationary_cov(momentum=κ)``, 2D×2D
state, ARPACK radius) for the large-D covariance route.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.optimize as sopt
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.core.errors import InfeasibleTargetError, UnstableStepSizeError
from sgtune.theory import tuning
from sgtune.theory.largescale import stationary_cov_from_target_momentum
from sgtune.theory.stationary import noise_covariance, predict_stationary_cov
from tests.test_tuning_families import crit_of
from _reference import logistic_expansion
from sgtune.theory.tuning import (_momentum_terms, solve_momentum_step_matrix, structured_momentum_step_matrix,
                                  structured_step_matrix, tune)
from sgtune.core.config import Dynamics

#: the closed forms are one dense solve (or a Newton iteration to 1e-13): the family's part of the
#: residual vanishes to a few hundred eps of its terms
FAMILY_PART_RTOL = 1e-12
#: GMRES tolerance 1e-10 on the correction (≈ 10 % of Σ*) vs the dense augmented solve (residual 1e-13)
COV_RTOL = 1e-8


@pytest.fixture(scope="module")
def problem():
    e = logistic_expansion(2000, 12)
    S = e.sandwich_cov()
    return e, S, noise_covariance(e, S, Dynamics(None, 32))


BLOCKS = [[0, 3, 4, 7, 8], [1, 2, 5, 6, 9, 10, 11]]


def _part(family: str, X: np.ndarray) -> np.ndarray:
    if family == "diagonal":
        return np.diag(X)
    if family == "scalar":
        return np.array([np.trace(X)])
    return np.concatenate([X[np.ix_(b, b)].ravel() for b in BLOCKS])


# --------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("kappa", [0.3, 0.9])
@pytest.mark.parametrize("beta", [math.inf, 20.0 * 2000])
@pytest.mark.parametrize("family", ["diagonal", "scalar", "block"])
def test_closed_form_zeroes_the_family_part_of_the_reduced_equation(problem, family, kappa, beta):
    e, S, M = problem
    lam = structured_momentum_step_matrix(e.hessian, S, M, family=family, momentum=kappa, inv_temperature=beta,
                                          blocks=BLOCKS if family == "block" else None)
    lhs, rhs = _momentum_terms(lam, e.hessian, S, M, kappa, beta)
    part = _part(family, lhs - rhs)
    assert np.linalg.norm(part) <= FAMILY_PART_RTOL * np.linalg.norm(_part(family, lhs))
    # structure and positivity
    if family == "diagonal":
        assert np.array_equal(lam, np.diag(np.diag(lam))) and np.all(np.diag(lam) > 0)
    elif family == "scalar":
        np.testing.assert_array_equal(lam, lam[0, 0] * np.eye(12))
    else:
        assert np.all(lam[np.ix_(BLOCKS[0], BLOCKS[1])] == 0)
        for b in BLOCKS:
            assert np.linalg.eigvalsh(lam[np.ix_(b, b)]).min() > 0
    # not the whole equation: a structured Λ cannot solve it (the test above is not vacuous)
    assert np.linalg.norm(lhs - rhs) > 1e-3 * np.linalg.norm(lhs)


@pytest.mark.parametrize("beta", [math.inf, 20.0 * 2000])
@pytest.mark.parametrize("family", ["diagonal", "scalar", "block"])
def test_zero_momentum_is_the_closed_form_of_eq_11(problem, family, beta):
    e, S, M = problem
    H = e.hessian
    blocks = BLOCKS if family == "block" else None
    a = structured_momentum_step_matrix(H, S, M, family=family, momentum=0.0, inv_temperature=beta, blocks=blocks)
    b = structured_step_matrix(H, S, M + H @ S @ H, family=family, inv_temperature=beta, blocks=blocks)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15 * np.abs(b).max())


@pytest.mark.parametrize("kappa, beta", [(0.3, math.inf), (0.9, 20.0 * 2000)])
def test_scalar_closed_form_is_the_root_of_the_trace(problem, kappa, beta):
    e, S, M = problem
    H = e.hessian

    def trace_residual(t: float) -> float:  # tr(LHS − RHS)/λ at Λ = λI, from the dense residual function
        lhs, rhs = _momentum_terms(t * np.eye(12), H, S, M, kappa, beta)
        return float(np.trace(lhs - rhs)) / t

    lam = structured_momentum_step_matrix(H, S, M, family="scalar", momentum=kappa, inv_temperature=beta)[0, 0]
    root = sopt.brentq(trace_residual, 1e-6 * lam, 10 * lam, xtol=1e-15 * lam, rtol=1e-14)
    assert lam == pytest.approx(root, rel=1e-11)


def test_block_family_limits(problem):
    """Singleton blocks give the diagonal solution; one block covering everything, the dense momentum Λ."""
    e, S, M = problem
    H = e.hessian
    kappa, beta = 0.6, 50.0 * 2000
    diag = structured_momentum_step_matrix(H, S, M, family="diagonal", momentum=kappa, inv_temperature=beta)
    single = structured_momentum_step_matrix(H, S, M, family="block", momentum=kappa, inv_temperature=beta,
                                             blocks=[[i] for i in range(12)])
    np.testing.assert_allclose(single, diag, rtol=1e-12, atol=0)
    whole = structured_momentum_step_matrix(H, S, M, family="block", momentum=kappa, inv_temperature=beta,
                                            blocks=[list(range(12))])
    dense = solve_momentum_step_matrix(H, S, M, momentum=kappa, inv_temperature=beta)
    np.testing.assert_allclose(whole, dense, rtol=1e-9, atol=1e-11 * np.abs(dense).max())


def test_infeasible_target_is_one_line_naming_the_remedy(problem):
    e, S, M = problem
    for family in ("diagonal", "scalar", "block"):
        with pytest.raises(InfeasibleTargetError) as exc:
            structured_momentum_step_matrix(e.hessian, S, M, family=family, momentum=0.5, inv_temperature=1.0,
                                            blocks=BLOCKS if family == "block" else None)
        msg = str(exc.value)
        assert "\n" not in msg and "momentum 0.5" in msg and "inverse temperature" in msg
    with pytest.raises(InfeasibleTargetError, match="inverse temperature"):  # through tune, any D
        tune(e, Dynamics(None, 32, inv_temperature=1.0, momentum=0.5), family="diagonal", family_criterion="moment")


# --------------------------------------------------------------------------- exact covariance at large D
@pytest.mark.parametrize("d, kappa, beta, family, wor", [(20, 0.3, math.inf, "diagonal", False),
                                                         (30, 0.9, 1e5, "diagonal", False),
                                                         (24, 0.5, math.inf, "block", False),
                                                         (10, 0.6, 3e5, "scalar", True)])
def test_covariance_from_target_matches_the_augmented_solve(d, kappa, beta, family, wor):
    e = logistic_expansion(3000, d, seed=d)
    S = e.sandwich_cov()
    B = 32 if not wor else 1000  # without replacement: a batch that is a third of the data (D = 10: the
    # reference is the dense Kronecker solve, whose radius is exact eigenvalues rather than ARPACK's)
    M = noise_covariance(e, S, Dynamics(None, B, batching=bool(wor)))
    blocks = [list(range(0, d, 2)), list(range(1, d, 2))] if family == "block" else None
    lam = structured_momentum_step_matrix(e.hessian, S, M, family=family, momentum=kappa, inv_temperature=beta,
                                          blocks=blocks)
    st = stationary_cov_from_target_momentum(e, Dynamics(lam, B, inv_temperature=beta, momentum=kappa,
                                                         batching=bool(wor)), S, M, tol=1e-10)
    ref = predict_stationary_cov(e, Dynamics(lam, B, inv_temperature=beta, momentum=kappa, batching=bool(wor)))
    rel = np.linalg.norm(st.cov - ref.cov) / np.linalg.norm(ref.cov)
    assert rel < COV_RTOL
    assert np.linalg.norm(st.augmented_cov - ref.augmented_cov) < COV_RTOL * np.linalg.norm(ref.augmented_cov)
    np.testing.assert_allclose(st.tau, ref.tau, rtol=COV_RTOL)
    assert st.tau_worst == pytest.approx(ref.tau_worst, rel=COV_RTOL)
    np.testing.assert_allclose(st.transition, ref.transition, rtol=0, atol=1e-15 * np.abs(ref.transition).max())
    # ref: the exact Perron root (dense eigenvalues, or the closed Collatz–Wielandt bracket), else an upper bound
    assert st.spectral_radius_is_bound and st.spectral_radius < 1
    if not ref.spectral_radius_is_bound:
        assert ref.spectral_radius <= st.spectral_radius
    assert st.momentum == kappa and math.isnan(st.tau_spectral)


def test_covariance_from_target_rejects_an_unstable_step():
    e = logistic_expansion(1000, 6)
    S = e.sandwich_cov()
    M = noise_covariance(e, S, Dynamics(None, 32))
    lam = structured_momentum_step_matrix(e.hessian, S, M, family="diagonal", momentum=0.5)
    mu_max = np.linalg.eigvals(lam @ e.hessian).real.max()
    with pytest.raises(UnstableStepSizeError, match="scale it by less than") as exc:
        stationary_cov_from_target_momentum(e, Dynamics(4.0 / mu_max * lam, 32, momentum=0.5), S, M)
    assert exc.value.max_stable_step == pytest.approx(2 * 1.5 / 4.0, rel=1e-12)


# --------------------------------------------------------------------------- tune
def test_tune_moment_with_momentum_at_any_dimension(problem, monkeypatch):
    """'moment' with κ > 0 is the closed form (no dense momentum solve); 'discrepancy' still fits."""
    e, S, M = problem
    kappa, beta = 0.5, 40.0 * 2000

    def no_dense(*a, **k):
        raise AssertionError("the dense momentum solve is not needed for the closed form")

    with monkeypatch.context() as m:
        m.setattr(tuning, "solve_momentum_step_matrix", no_dense)
        res = tune(e, Dynamics(None, 32, inv_temperature=beta, momentum=kappa), family="diagonal",
                   family_criterion="moment")
    assert "closed form" in res.criterion and "momentum" in res.criterion
    lam = structured_momentum_step_matrix(e.hessian, S, M, family="diagonal", momentum=kappa, inv_temperature=beta)
    np.testing.assert_array_equal(res.step_matrix, lam)
    ref = predict_stationary_cov(e, Dynamics(lam, 32, inv_temperature=beta, momentum=kappa)).cov
    np.testing.assert_allclose(res.predicted_cov, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
    fit = tune(e, Dynamics(None, 32, inv_temperature=beta, momentum=kappa), family="diagonal")  # auto at D = 12: fit
    assert "L-BFGS" in fit.criterion
    assert crit_of(S, fit.predicted_cov) < crit_of(S, res.predicted_cov)  # what the fit minimises


@pytest.mark.filterwarnings("ignore:family '.*' misses the target:sgtune.core.errors.AccuracyWarning")  # issue 35
@pytest.mark.parametrize("family", ["diagonal", "scalar", "block"])
def test_tune_above_fit_max_dim_uses_the_closed_form_and_the_correction_solve(family, monkeypatch):
    e = logistic_expansion(3000, 20, seed=4)
    kappa = 0.5
    blocks = [list(range(0, 8)), list(range(8, 20))] if family == "block" else None
    monkeypatch.setattr(tuning, "FIT_MAX_DIM", 10)
    res = tune(e, Dynamics(None, 32, momentum=kappa), family=family, blocks=blocks)
    assert "closed form" in res.criterion and "momentum" in res.criterion
    assert res.stationary.spectral_radius_is_bound and res.momentum == kappa
    ref = predict_stationary_cov(e, Dynamics(res.step_matrix, 32, momentum=kappa))
    S = res.target_cov
    # tune solves the correction to tuning.LARGE_COV_TOL relative to the target's residual (≈ ‖Δ‖), so Σ to about it
    assert np.linalg.norm(res.predicted_cov - ref.cov) < tuning.LARGE_COV_TOL * np.linalg.norm(ref.cov)
    err = np.linalg.norm(ref.cov - S) / np.linalg.norm(S)
    assert res.covariance_error == pytest.approx(err, rel=10 * tuning.LARGE_COV_TOL)
    assert ref.spectral_radius <= res.spectral_radius < 1


@pytest.mark.parametrize("criterion", ["moment", "discrepancy"])
def test_mid_dimension_covariance_uses_the_tight_correction_solve(criterion, monkeypatch):
    """Above AUGMENTED_MAX_DIM (and below FIT_MAX_DIM) Σ(Λ) of a momentum family comes from the D×D solve at 1e-12."""
    e = logistic_expansion(3000, 16, seed=7)
    monkeypatch.setattr(tuning, "AUGMENTED_MAX_DIM", 8)
    res = tune(e, Dynamics(None, 32, inv_temperature=3e5, momentum=0.7), family="diagonal", family_criterion=criterion)
    assert res.stationary.spectral_radius_is_bound  # the correction route's certified bound
    ref = predict_stationary_cov(e, Dynamics(res.step_matrix, 32, inv_temperature=3e5, momentum=0.7)).cov
    assert np.linalg.norm(res.predicted_cov - ref) < 1e-11 * np.linalg.norm(ref)


@pytest.mark.filterwarnings("ignore:family '.*' misses the target:sgtune.core.errors.AccuracyWarning")  # issue 35
def test_auto_switches_at_fit_max_dim_without_monkeypatching():
    """The real threshold: D = 301 > FIT_MAX_DIM gets the closed form with momentum (no fit)."""
    e = logistic_expansion(600, tuning.FIT_MAX_DIM + 1, seed=1)
    res = tune(e, Dynamics(None, 32, momentum=0.5), family="diagonal", target="posterior")
    assert "closed form" in res.criterion and "momentum" in res.criterion
    assert res.stationary.spectral_radius_is_bound and res.spectral_radius < 1
    # the returned covariance solves the reduced (Yule–Walker) equation of its own chain
    M = noise_covariance(e, res.predicted_cov, Dynamics(None, 32))
    lhs, rhs = _momentum_terms(res.step_matrix, e.hessian, res.predicted_cov, M, 0.5, math.inf)
    assert np.linalg.norm(lhs - rhs) < tuning.LARGE_COV_TOL * np.linalg.norm(lhs)  # the correction's tolerance


# --------------------------------------------------------------------------- CLI
def test_cli_diagonal_momentum_above_fit_max_dim(monkeypatch, tmp_path):
    monkeypatch.setattr(tuning, "FIT_MAX_DIM", 2)
    r = CliRunner().invoke(main, ["lambda", "--example", "logistic", "--batch-size", "32", "--family", "diagonal",
                                  "--momentum", "0.5", "-q"], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    lam = np.array(doc["lambda"])
    assert np.array_equal(lam, np.diag(np.diag(lam))) and doc["momentum"] == 0.5
    assert "closed form" in doc["criterion"] and "momentum" in doc["criterion"]
    assert doc["spectral_radius_is_bound"] is True
    S = np.array(doc["target_cov"])
    assert doc["covariance_error"] == pytest.approx(
        np.linalg.norm(np.array(doc["predicted_cov"]) - S) / np.linalg.norm(S), rel=1e-12)
    out = tmp_path / "lam.npy"
    r = CliRunner().invoke(main, ["lambda", "--example", "logistic", "--batch-size", "32", "--family", "diagonal",
                                  "--momentum", "0.5", "--inverse-temperature", "1", "-o", str(out)])
    assert r.exit_code == 1 and "inverse temperature" in r.stderr and not out.exists()
    assert "Traceback" not in r.stderr


def test_radius_bound_against_exact_eigenvalues_where_arpack_misleads():
    """D = 20, κ = 0.6, a third of the data per batch without replacement: the augmented map is far from
    normal and ARPACK (predict_stationary_cov's iterative path) returns a spurious |λ| ≈ 4 here; the
    correction route's certified bound must sit between the exact radius (dense eigenvalues of the
    Kronecker operator, 1600 × 1600) and 1, and its covariance must be the dense solve's."""
    d, kappa, beta, B = 20, 0.6, 3e5, 1000
    e = logistic_expansion(3000, d, seed=d)
    S = e.sandwich_cov()
    M = noise_covariance(e, S, Dynamics(None, B, batching="without-replacement"))
    lam = structured_momentum_step_matrix(e.hessian, S, M, family="scalar", momentum=kappa, inv_temperature=beta)
    st = stationary_cov_from_target_momentum(e, Dynamics(lam, B, inv_temperature=beta, momentum=kappa,
                                                         batching="without-replacement"), S, M, tol=1e-10)
    ref = predict_stationary_cov(e, Dynamics(lam, B, inv_temperature=beta, momentum=kappa,
                                             batching="without-replacement"), method="direct")
    assert ref.spectral_radius <= st.spectral_radius < 1
    assert np.linalg.norm(st.cov - ref.cov) < COV_RTOL * np.linalg.norm(ref.cov)
