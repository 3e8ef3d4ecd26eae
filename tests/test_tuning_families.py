"""Structured Λ families (adjoint gradients) and exact momentum tuning (issue 10).

Independent routes: central finite differences of φ(Σ(Λ)) computed by the forward solver;
the previous derivative-free implementation (restated below from the definitions); the
augmented (d, ν) forward solve of Prop. B.1 for the reduced momentum equation; the dense
exact solve for the one-block family.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.optimize as sopt
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.core.errors import DataFormatError, SgtuneError, ShapeError
from sgtune.models import Expansion
from tests.test_tuning import synthetic_expansion as _rank_one_problem
from sgtune.theory.adjoint import GradientEvaluator, affine_discrepancy, criterion_gradient
from sgtune.theory.stationary import noise_covariance, predict_stationary_cov
from sgtune.theory.tuning import (load_blocks, momentum_tuning_residual, solve_momentum_step_matrix,
                                  solve_step_matrix, tune)
from sgtune.core.config import Dynamics

from _reference import logistic_expansion
from _tolerances import SOLVER_RTOL, TUNING_RESIDUAL

#: central differences with h ≈ 1e-6 relative: truncation O(h²) plus rounding eps/h ≈ 1e-10, with
#: the solver residual (1e-12) amplified by 1/h → agreement to ~1e-6 relative
FD_RTOL = 1e-6


def synthetic_expansion(seed: int, n: int = 80, d: int = 5, prior: float = 0.5) -> Expansion:
    """test_tuning's random rank-one problem, with this file's default size."""
    return _rank_one_problem(seed, n=n, d=d, prior=prior)


def crit_of(target: np.ndarray, cov: np.ndarray) -> float:
    """‖Σ*^{-1/2}ΣΣ*^{-1/2} − I‖_F with the symmetric square root (independent of the Cholesky route)."""
    w, U = np.linalg.eigh(target)
    Ri = U @ np.diag(w ** -0.5) @ U.T
    return float(np.linalg.norm(Ri @ cov @ Ri - np.eye(len(w))))


# --------------------------------------------------------------------------- adjoint gradient
@pytest.mark.parametrize("d, kappa, beta, direct", [(4, 0.0, math.inf, True), (4, 0.3, 300.0, True),
                                                     (12, 0.0, 500.0, False), (12, 0.4, math.inf, False)])
def test_adjoint_gradient_matches_finite_differences(d, kappa, beta, direct):
    e = synthetic_expansion(1, d=d)
    B = 8
    lam0 = tune(e, Dynamics(None, B)).step_matrix
    target = 1.1 * e.sandwich_cov()
    crit = affine_discrepancy(target)
    ev = GradientEvaluator(e, crit, Dynamics(None, B, inv_temperature=beta, momentum=kappa))
    if not direct:
        ev.kernel = None  # force the Stein-preconditioned GMRES forward and adjoint solves
    lam = 0.8 * lam0
    out = ev.evaluate(lam)
    assert out is not None
    np.testing.assert_allclose(out.gradient, out.gradient.T, rtol=0, atol=0)
    rng = np.random.default_rng(0)

    def phi(L):  # the criterion by the public forward solver, not the evaluator
        cov = predict_stationary_cov(e, Dynamics(L, B, inv_temperature=beta, momentum=kappa)).cov
        return crit_of(target, cov) ** 2

    for _ in range(2):
        Dl = rng.standard_normal((d, d))
        Dl = Dl + Dl.T
        h = 1e-6 * np.abs(lam).max()
        fd = (phi(lam + h * Dl) - phi(lam - h * Dl)) / (2 * h)
        assert np.sum(out.gradient * Dl) == pytest.approx(fd, rel=FD_RTOL)
    assert out.value == pytest.approx(phi(lam), rel=1e-10)


def test_criterion_gradient_public_wrapper_and_unstable_step():
    from sgtune.core.errors import UnstableStepSizeError

    e = synthetic_expansion(3, d=3)
    S = e.sandwich_cov()
    lam = tune(e, Dynamics(None, 4)).step_matrix
    out = criterion_gradient(e, Dynamics(lam, 4), affine_discrepancy(S))
    assert out.value < 1e-20 and np.abs(out.gradient).max() < 1e-8 * np.abs(lam).max() ** -1 * 1e-3
    with pytest.raises(UnstableStepSizeError, match="scale it by less than"):
        criterion_gradient(e, Dynamics(100 * lam, 4), affine_discrepancy(S))


# --------------------------------------------------------------------------- families
def _old_family_fit(e, S, lam_dense, family, B):
    """The previous implementation: derivative-free minimisation of the criterion (Brent / L-BFGS-B with
    finite-difference gradients), started from the same projection of the dense Λ."""
    d = e.dim

    def obj(L):
        try:
            cov = predict_stationary_cov(e, Dynamics(L, B)).cov
        except SgtuneError:
            return 1e6
        return crit_of(S, cov)

    if family == "scalar":
        lam0 = float(np.exp(np.mean(np.log(np.linalg.eigvalsh(lam_dense)))))
        r = sopt.minimize_scalar(lambda t: obj(math.exp(t) * np.eye(d)),
                                 bracket=(math.log(lam0) - 0.5, math.log(lam0)), tol=1e-10)
        return math.exp(r.x) * np.eye(d)
    r = sopt.minimize(lambda x: obj(np.diag(np.exp(x))), np.log(np.diag(lam_dense)), method="L-BFGS-B",
                      options={"maxiter": 500})
    return np.diag(np.exp(r.x))


#: the rank-one synthetic problems' scalar/diagonal optima miss the target by 0.6–0.8 (they warn: issue 35); these
#: tests are about the optimum itself
_MISSES = pytest.mark.filterwarnings("ignore:family '.*' misses the target:sgtune.core.errors.AccuracyWarning")


@_MISSES
@pytest.mark.parametrize("family", ["scalar", "diagonal"])
@pytest.mark.parametrize("seed", [0, 1])
def test_families_no_worse_than_previous_implementation(family, seed):
    e = synthetic_expansion(seed, n=60, d=5)
    B = 6
    res = tune(e, Dynamics(None, B), family=family)
    S = res.target_cov
    dense = tune(e, Dynamics(None, B)).step_matrix
    old = _old_family_fit(e, S, dense, family, B)
    old_cov = predict_stationary_cov(e, Dynamics(old, B)).cov
    c_new, c_old = crit_of(S, res.predicted_cov), crit_of(S, old_cov)
    assert c_new <= c_old * (1 + 1e-8) + 1e-12
    err_old = np.linalg.norm(old_cov - S) / np.linalg.norm(S)
    assert res.covariance_error <= err_old * (1 + 1e-4)
    # local optimality checked by the forward solver alone: every coordinate move increases the criterion
    lam = np.diag(res.step_matrix)
    moves = [np.ones_like(lam)] if family == "scalar" else list(np.eye(len(lam)))
    for mv in moves:
        for f in (-1e-3, 1e-3):
            L = np.diag(lam * np.exp(f * mv))
            assert crit_of(S, predict_stationary_cov(e, Dynamics(L, B)).cov) > c_new


@_MISSES
def test_block_family_extremes_are_dense_and_diagonal():
    e = synthetic_expansion(4, n=60, d=4)
    B = 6
    dense = tune(e, Dynamics(None, B))
    one = tune(e, Dynamics(None, B), family="block", blocks=[[0, 1, 2, 3]])
    # the one-block family contains the exact dense Λ: the optimum reaches the target
    assert one.covariance_error < 1e-7
    np.testing.assert_allclose(one.step_matrix, dense.step_matrix, rtol=1e-5,
                               atol=1e-7 * np.abs(dense.step_matrix).max())
    singles = tune(e, Dynamics(None, B), family="block", blocks=[[2], [0], [3], [1]])
    diag = tune(e, Dynamics(None, B), family="diagonal")
    np.testing.assert_allclose(singles.step_matrix, diag.step_matrix, rtol=1e-5, atol=0)
    two = tune(e, Dynamics(None, B), family="block", blocks=[[0, 2], [1, 3]])
    lam = two.step_matrix
    assert lam[0, 1] == 0 and lam[0, 3] == 0 and lam[0, 2] != 0 and lam[1, 3] != 0
    assert np.all(np.linalg.eigvalsh(lam) > 0)
    # nested families: block ⊇ diagonal ⊇ scalar in the criterion
    c = {k: crit_of(r.target_cov, r.predicted_cov) for k, r in
         {"two": two, "diag": diag, "scalar": tune(e, Dynamics(None, B), family="scalar")}.items()}
    assert c["two"] <= c["diag"] * (1 + 1e-8) <= c["scalar"] * (1 + 1e-6)


def test_diagonal_family_with_momentum_and_sgld_improves_on_its_start():
    e = synthetic_expansion(5, n=60, d=4)
    B, kappa, beta = 6, 0.4, 20.0 * e.n_data
    res = tune(e, Dynamics(None, B, inv_temperature=beta, momentum=kappa), family="diagonal")
    S = res.target_cov
    dense = tune(e, Dynamics(None, B, inv_temperature=beta, momentum=kappa)).step_matrix
    start = predict_stationary_cov(e, Dynamics(np.diag(np.diag(dense)), B, inv_temperature=beta, momentum=kappa)).cov
    assert crit_of(S, res.predicted_cov) < crit_of(S, start)
    again = predict_stationary_cov(e, Dynamics(res.step_matrix, B, inv_temperature=beta, momentum=kappa)).cov
    np.testing.assert_allclose(res.predicted_cov, again, rtol=1e-12)


def test_load_blocks_validation(tmp_path):
    assert [b.tolist() for b in load_blocks([[1, 0], [2]], 3)] == [[1, 0], [2]]
    f = tmp_path / "b.json"
    f.write_text(json.dumps({"blocks": [[0], [1, 2]]}))
    assert len(load_blocks(str(f), 3)) == 2
    with pytest.raises(DataFormatError, match="index 2 is missing"):
        load_blocks([[0, 1]], 3)
    with pytest.raises(DataFormatError, match="index 1 appears 2 times"):
        load_blocks([[0, 1], [1, 2]], 3)
    with pytest.raises(ShapeError, match="index 5 is out of range 0..2"):
        load_blocks([[0, 1, 2, 5]], 3)
    with pytest.raises(DataFormatError, match="non-integer"):
        load_blocks([[0, 1.5]], 3)
    with pytest.raises(DataFormatError, match="non-empty list of non-empty lists"):
        load_blocks([0, 1, 2], 3)
    f.write_text("[[0, 1")
    with pytest.raises(DataFormatError, match="not valid JSON"):
        load_blocks(str(f), 3)
    with pytest.raises(DataFormatError, match="cannot read"):
        load_blocks(str(tmp_path / "none.json"), 3)
    e = synthetic_expansion(0, d=3)
    with pytest.raises(SgtuneError, match="needs `blocks`"):
        tune(e, Dynamics(None, 4), family="block")
    with pytest.raises(SgtuneError, match="only used with family 'block'"):
        tune(e, Dynamics(None, 4), family="diagonal", blocks=[[0, 1, 2]])


# --------------------------------------------------------------------------- momentum
@pytest.mark.parametrize("kappa, beta", [(0.3, math.inf), (0.5, 400.0), (0.9, math.inf)])
def test_reduced_momentum_equation_holds_at_the_augmented_solution(kappa, beta):
    """The D×D reduction is satisfied by Σ(Λ) from the augmented (2D×2D) solve for an arbitrary Λ."""
    e = synthetic_expansion(2)
    rng = np.random.default_rng(7)
    A = rng.standard_normal((5, 5))
    lam = 0.3 * tune(e, Dynamics(None, 8)).step_matrix + 1e-3 * (A @ A.T)
    st = predict_stationary_cov(e, Dynamics(lam, 8, inv_temperature=beta, momentum=kappa))
    M = noise_covariance(e, st.cov, Dynamics(None, 8))
    assert momentum_tuning_residual(lam, e.hessian, st.cov, M, kappa, beta) < 1e-13


@pytest.mark.parametrize("kappa, beta", [(0.3, math.inf), (0.5, 400.0), (0.9, math.inf), (0.0, 3000.0)])
def test_momentum_tuning_reaches_the_target_exactly(kappa, beta):
    e = synthetic_expansion(2)
    S = e.sandwich_cov()
    res = tune(e, Dynamics(None, 8, inv_temperature=beta, momentum=kappa))
    assert res.residual < TUNING_RESIDUAL
    cov = predict_stationary_cov(e, Dynamics(res.step_matrix, 8, inv_temperature=beta, momentum=kappa)).cov
    np.testing.assert_allclose(cov, S, rtol=SOLVER_RTOL, atol=SOLVER_RTOL * np.abs(S).max())
    assert np.all(np.linalg.eigvalsh(res.step_matrix) > 0)
    if kappa == 0.0:  # κ = 0 is the Lyapunov route
        M = noise_covariance(e, S, Dynamics(None, 8))
        lam0 = solve_momentum_step_matrix(e.hessian, S, M, momentum=0.0, inv_temperature=beta)
        ref = solve_step_matrix(e.hessian, S, M + e.hessian @ S @ e.hessian, inv_temperature=beta)
        np.testing.assert_allclose(lam0, ref, rtol=1e-10)


def test_momentum_infeasible_sgld_target():
    from sgtune.core.errors import InfeasibleTargetError

    e = synthetic_expansion(2)
    with pytest.raises(InfeasibleTargetError, match="inverse temperature >"):
        tune(e, Dynamics(None, 8, inv_temperature=1.0, momentum=0.5))


# --------------------------------------------------------------------------- CLI
def test_cli_block_family(tmp_path):
    f = tmp_path / "blocks.json"
    blocks = [list(range(0, 10)), list(range(10, 20))]
    f.write_text(json.dumps(blocks))
    r = CliRunner().invoke(main, ["lambda", "--example", "hetero-linear", "--batch-size", "64", "--family",
                                  "block", "--blocks", str(f), "-q"], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    lam = np.array(doc["lambda"])
    assert doc["family"] == "block" and np.all(lam[:10, 10:] == 0) and "criterion" in doc
    S = np.array(doc["target_cov"])
    assert doc["covariance_error"] == pytest.approx(
        np.linalg.norm(np.array(doc["predicted_cov"]) - S) / np.linalg.norm(S), rel=1e-12)
    f.write_text(json.dumps([list(range(0, 10))]))
    out = tmp_path / "lam.npy"
    r = CliRunner().invoke(main, ["lambda", "--example", "hetero-linear", "--batch-size", "64", "--family",
                                  "block", "--blocks", str(f), "-o", str(out)])
    assert r.exit_code == 1 and "index 10 is missing" in r.stderr and not out.exists()
    assert "Traceback" not in r.stderr


# --------------------------------------------------------------------------- closed form (family part of eq. 11)
@pytest.mark.parametrize("beta", [math.inf, 40.0 * 80])
def test_structured_closed_form_zeroes_the_family_part_of_eq_11(beta):
    from sgtune.theory.tuning import structured_step_matrix

    e = synthetic_expansion(6, d=5)
    S = e.sandwich_cov()
    H = e.hessian
    R = noise_covariance(e, S, Dynamics(None, 8)) + H @ S @ H

    def eq11(L):  # residual of ΛHΣ + ΣHΛ − ΛRΛ − 2Λ/β written out
        out = L @ H @ S + S @ H @ L - L @ R @ L
        return out - (2.0 / beta) * L if math.isfinite(beta) else out

    lam = structured_step_matrix(H, S, R, family="diagonal", inv_temperature=beta)
    res = eq11(lam)
    scale = np.abs(lam @ H @ S).max()
    assert np.abs(np.diag(res)).max() < 1e-13 * scale and np.abs(res).max() > 1e-6 * scale
    blocks = [[0, 3], [1, 2, 4]]
    lam = structured_step_matrix(H, S, R, family="block", blocks=blocks, inv_temperature=beta)
    res = eq11(lam)
    for b in blocks:
        assert np.abs(res[np.ix_(b, b)]).max() < 1e-12 * scale
    assert np.all(np.linalg.eigvalsh(lam) > 0)
    lam = structured_step_matrix(H, S, R, family="scalar", inv_temperature=beta)
    assert abs(np.trace(eq11(lam))) < 1e-13 * scale * 5
    one = structured_step_matrix(H, S, R, family="block", blocks=[[0, 1, 2, 3, 4]], inv_temperature=beta)
    np.testing.assert_allclose(one, solve_step_matrix(H, S, R, inv_temperature=beta), rtol=1e-9)


def test_moment_criterion_versus_the_optimum():
    """The closed form is never better than the minimiser in the criterion; close to it for small noise
    (logistic, B = 32: within 1 %), far from it for strong minibatch noise (synthetic, B = 8: ≈ +50 %)."""
    for e, B, worst in ((synthetic_expansion(7, n=80, d=5), 8, 2.0), (logistic_expansion(2000, 12), 32, 1.01)):
        opt = tune(e, Dynamics(None, B), family="diagonal")
        mom = tune(e, Dynamics(None, B), family="diagonal", family_criterion="moment")
        assert "closed form" in mom.criterion and "L-BFGS" in opt.criterion
        c_opt, c_mom = crit_of(opt.target_cov, opt.predicted_cov), crit_of(mom.target_cov, mom.predicted_cov)
        assert c_opt <= c_mom * (1 + 1e-9) and c_mom < worst * c_opt
    with pytest.raises(SgtuneError, match="family_criterion must be"):
        tune(e, Dynamics(None, 8), family="diagonal", family_criterion="fast")


def test_block_family_defaults_to_the_expansions_parameter_blocks():
    """A model that knows its layers (the MLP protocol) exposes ``parameter_blocks``; --blocks overrides it."""
    e = synthetic_expansion(8, n=60, d=4)
    explicit = tune(e, Dynamics(None, 6), family="block", blocks=[[0, 1], [2, 3]])
    object.__setattr__(e, "parameter_blocks", [[0, 1], [2, 3]])
    implicit = tune(e, Dynamics(None, 6), family="block")
    np.testing.assert_array_equal(implicit.step_matrix, explicit.step_matrix)
    other = tune(e, Dynamics(None, 6), family="block", blocks=[[0], [1, 2, 3]])
    assert other.step_matrix[0, 1] == 0 and implicit.step_matrix[0, 1] != 0


# --------------------------------------------------------------------------- matrix-free large-D route
def test_matrix_free_posterior_diagonal_converges_to_the_closed_form():
    """Random-probe estimate vs the exact closed form (dense Expansion route): unbiased up to O(1/k)."""
    from sgtune.theory.largescale import ProbeOptions, RankOneProblem, posterior_diagonal_step_sizes
    from sgtune.theory.tuning import structured_step_matrix

    rng = np.random.default_rng(0)
    m, d, B = 300, 10, 1  # B = 1: the probed noise terms matter
    U = rng.standard_normal((m, d)) * np.linspace(0.5, 2, d)
    w = rng.uniform(0.1, 1.0, m)
    c = rng.standard_normal(m) * (1 + np.abs(U[:, 0]))
    gam = rng.uniform(0.5, 2.0, d)
    e = Expansion(theta_hat=np.zeros(d), grads=c[:, None] * U, prior_precision=np.diag(gam), design=U, weights=w)
    S, H = e.posterior_cov(), e.hessian
    exact = np.diag(structured_step_matrix(H, S, noise_covariance(e, S, Dynamics(None, B)) + H @ S @ H,
                                           family="diagonal"))
    problem = RankOneProblem(U, w, c, gam)
    reps = np.array([posterior_diagonal_step_sizes(problem, Dynamics(None, B), ProbeOptions(probes=16, seed=s)).diagonal
                     for s in range(20)])
    sd = reps.std(axis=0, ddof=1)
    assert np.all(sd > 1e-6 * exact)  # the probes do add noise, so the test below has power
    z = (reps.mean(axis=0) - exact) / (sd / math.sqrt(len(reps)))
    assert np.abs(z).max() < 5.0  # |bias| O(sd²/λ) ≪ MCSE here
    big = posterior_diagonal_step_sizes(problem, Dynamics(None, B), ProbeOptions(probes=4096, seed=99))
    assert np.all(np.abs(big.diagonal - exact) < 5 * sd * math.sqrt(16 / 4096))  # error ∝ 1/√k
    assert big.cg_residual <= 1e-8
    with pytest.raises(SgtuneError, match="prior_diagonal must be > 0"):
        RankOneProblem(U, w, c, 0.0)
    with pytest.raises(ShapeError, match="length M = 300"):
        RankOneProblem(U, w[:5], c, gam)


def test_cli_mlp_block_family_defaults_to_the_layers():
    """`sgtune lambda --model mlp --family block` without --blocks: Λ is block-diagonal over the network's
    layers (W_1, b_1 | W_2, b_2), the blocks are reported, and the covariance error matches the JSON's own
    matrices."""
    from sgtune.models.mlp import make_mlp

    r = CliRunner().invoke(main, ["lambda", "--example", "logistic", "--model", "mlp", "--hidden-sizes", "2",
                                  "--likelihood", "bernoulli", "--batch-size", "32", "--family", "block",
                                  "--target", "posterior", "--prior-precision", "1", "-q",
                                  # the claim is Λ's structure: the network's applicability report (its
                                  # Kronecker remedy check, ~2 min) is tested in tests/cli/test_kronecker_remedy.py
                                  "--no-applicability"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    p = 5  # the logistic example's covariates
    layers = make_mlp("2").layer_slices(p)
    assert doc["dim"] == 15 and doc["family"] == "block"
    assert doc["blocks"] == [list(range(a, b)) for a, b in layers] == [list(range(12)), [12, 13, 14]]
    lam = np.array(doc["lambda"])
    assert np.all(lam[:12, 12:] == 0) and np.all(lam[12:, :12] == 0)
    assert np.all(np.linalg.eigvalsh(lam[:12, :12]) > 0) and np.all(np.linalg.eigvalsh(lam[12:, 12:]) > 0)
    S = np.array(doc["target_cov"])
    assert doc["covariance_error"] == pytest.approx(
        np.linalg.norm(np.array(doc["predicted_cov"]) - S) / np.linalg.norm(S), rel=1e-12)


# --------------------------------------------------------------------------- issue 35, item 5: never silently wrong
def _linear_problem(case: str, prior: float):
    """Linear regressions on which the structured families fail: two zero columns (no gradient noise there:
    SGD cannot give the posterior its spread, and a family's fit runs to a step of 0 or to the edge of
    stability), or two nearly collinear columns (a diagonal/scalar Λ misses the posterior almost entirely)."""
    from sgtune.io.data import make_dataset
    from sgtune.models import expand, get_model

    rng = np.random.default_rng(0)
    n = 200
    z = rng.standard_normal(n)
    if case == "zero":
        X = np.column_stack([rng.standard_normal(n), rng.standard_normal(n), np.zeros(n), np.zeros(n)])
    else:
        X = np.column_stack([z, z + 0.05 * rng.standard_normal(n), rng.standard_normal(n)])
    y = X[:, 0] + rng.standard_normal(n)
    return expand(get_model("linear"), make_dataset(X, y), prior)


@pytest.mark.parametrize("family", ["scalar", "diagonal", "block"])
@pytest.mark.parametrize("beta, kappa", [(math.inf, 0.0), (300.0, 0.4)])
def test_family_covariance_error_is_the_exact_one_for_its_lambda(rng, family, beta, kappa):
    """The reported error is ‖Σ(Λ) − Σ*‖_F/‖Σ*‖_F with Σ(Λ) the dense Kronecker solve of the returned Λ's chain."""
    from test_linear_chain import _brute_force, _problem

    e = _problem("logistic", rng)
    blocks = [[0, 2], [1]] if family == "block" else None
    res = tune(e, Dynamics(None, 6, inv_temperature=beta, momentum=kappa), family=family, blocks=blocks)
    S_bf = _brute_force(e, res.step_matrix, 6, beta, False, kappa)[0][:e.dim, :e.dim]
    err = np.linalg.norm(S_bf - res.target_cov) / np.linalg.norm(res.target_cov)
    assert res.covariance_error == pytest.approx(err, rel=1e-8)
    np.testing.assert_allclose(res.predicted_cov, S_bf, rtol=1e-9, atol=1e-9 * np.abs(S_bf).max())


@pytest.mark.parametrize("family, beta_n", [("scalar", math.inf), ("diagonal", 2.0)])
def test_a_family_that_misses_the_target_warns(family, beta_n):
    """SGD: the scalar Λ misses the posterior by ≈ 1 (≥ MAX_FAMILY_ERROR). SGLD at β = 2N: the diagonal Λ ends
    near 0.5, the error of a chain that does not move (H⁻¹/β against H⁻¹/N), and warns for that."""
    from sgtune.core.errors import AccuracyWarning
    from sgtune.theory.tuning import MAX_FAMILY_ERROR, STILL_FRACTION

    e = _linear_problem("collinear", 12.0)
    beta = beta_n * e.n_data
    with pytest.warns(AccuracyWarning, match=f"family '{family}' misses the target"):
        res = tune(e, Dynamics(None, 16, inv_temperature=beta), target="posterior", family=family)
    S_bf = predict_stationary_cov(e, Dynamics(res.step_matrix, 16, inv_temperature=beta)).cov  # solved again
    err = np.linalg.norm(S_bf - res.target_cov) / np.linalg.norm(res.target_cov)
    still = 1.0 if beta == math.inf else abs(1.0 - e.n_data / beta)  # Σ → H⁻¹/β as Λ → 0; target H⁻¹/N
    assert err >= min(MAX_FAMILY_ERROR, STILL_FRACTION * still)


def test_a_family_close_to_the_target_does_not_warn():
    import warnings as _w

    e = synthetic_expansion(0, n=60, d=5)
    with _w.catch_warnings():
        _w.simplefilter("error")
        res = tune(e, Dynamics(None, 6), family="diagonal")
    assert res.covariance_error < 0.5


@pytest.mark.parametrize("family", ["scalar", "diagonal"])
@pytest.mark.parametrize("kappa", [0.0, 0.5])
def test_a_family_that_cannot_be_fitted_is_refused_in_one_line(family, kappa):
    """Zero columns and SGD: the family's fit used to stop with "Λ must be symmetric positive definite, smallest
    eigenvalue 0" (a traceback through scipy); now one line naming the family and what to try."""
    e = _linear_problem("zero", 12.0)
    with pytest.raises(SgtuneError) as info:
        tune(e, Dynamics(None, 16, momentum=kappa), target="posterior", family=family)
    msg = str(info.value)
    assert msg.startswith(f"family '{family}' cannot be fitted") and "family='dense'" in msg and "\n" not in msg
    assert "inv_temperature" in msg  # SGD: SGLD is worth trying
    assert ("no momentum" in msg) == (kappa > 0)


def test_cli_family_refusal_and_warning(tmp_path):
    csv = tmp_path / "z.csv"
    rng = np.random.default_rng(0)
    n = 200
    X = np.column_stack([rng.standard_normal(n), rng.standard_normal(n), np.zeros(n), np.zeros(n)])
    y = X[:, 0] + rng.standard_normal(n)
    np.savetxt(csv, np.column_stack([X, y]), delimiter=",", header="a,b,c,d,y", comments="")
    r = CliRunner().invoke(main, ["lambda", str(csv), "--model", "linear", "--prior-precision", "12", "--batch-size",
                                  "16", "--target", "posterior", "--family", "diagonal", "--momentum", "0.5", "-q"])
    assert r.exit_code != 0 and r.exception is None or isinstance(r.exception, SystemExit)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: family 'diagonal' cannot be fitted"), r.stderr
    assert "--family dense" in lines[0] and "Traceback" not in r.output


def test_cli_diabetes_network_head_diagonal_warns_even_quiet(tmp_path):
    """Issue 35's case: the output layer of sgtune's 8-unit tanh network on diabetes, diagonal Λ for the posterior
    under SGD: it used to exit 0 with 'applicable: yes' and no warning at covariance error ≈ 0.98."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    csv = tmp_path / "d.csv"
    np.savetxt(csv, np.c_[(X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std()], delimiter=",", comments="",
               header=",".join([f"x{i}" for i in range(10)] + ["y"]))
    r = CliRunner().invoke(main, ["lambda", str(csv), "--model", "last-layer", "--features-from", "mlp",
                                  "--hidden-sizes", "8", "--prior-precision", "1", "--batch-size", "32", "--target",
                                  "posterior", "--family", "diagonal", "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["covariance_error"] >= 0.5 and doc["family_misses_target"] is True
    assert any(w.startswith("family 'diagonal' misses the target") for w in doc["warnings"])
    assert "warning: family 'diagonal' misses the target" in r.stderr
