"""Forward solver (Wang, Ding & Huggins (2026) eqs. 11–12, B.1–B.3, Prop. 4.4, B.2) against independent routes."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import sympy as sp

from sgtune.io.data import example, make_dataset
from sgtune.core.errors import NotPositiveDefiniteError, SgtuneError, ShapeError, UnstableStepSizeError
from sgtune.models import expand, get_model
from sgtune.symbolic import stationary as sym
from sgtune.theory.stationary import (iterate_average_cov, max_stable_step, noise_covariance,
                                      predict_stationary_cov)
from sgtune.core.config import Dynamics
from sgtune.theory.linear_chain import LinearChain

from _reference import covariance_z_scores, logistic_expansion, simulate_chains
from _tolerances import ENUMERATION_RTOL, SOLVER_RTOL, SYMBOLIC_RTOL, bonferroni_z


def hetero_linear(rng: np.random.Generator, n: int = 80, d: int = 3):
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + np.sqrt(1 + (X**2).sum(1)) * rng.standard_normal(n)
    return make_dataset(X, y)


def random_spd(rng: np.random.Generator, d: int, cond: float = 10.0) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return q @ np.diag(np.geomspace(1.0, cond, d)) @ q.T


# --------------------------------------------------------------- brute force (dense, per-sample loops)
def brute_force_cov(e, lam, B, beta=math.inf, f=1.0):
    """Σ from the definition: build the linear map column by column with explicit J_n loops."""
    d = e.dim
    Js = np.array([e.weights[i] * np.outer(e.design[i], e.design[i]) for i in range(e.n_data)])
    J = Js.mean(0)
    H = J + e.prior_precision / e.n_data
    g = e.grads
    C0 = (g - g.mean(0)).T @ (g - g.mean(0)) / e.n_data
    A = np.eye(d) - lam @ H
    P = np.zeros((d * d, d * d))
    for k in range(d * d):
        Ek = np.zeros(d * d)
        Ek[k] = 1.0
        Ek = Ek.reshape(d, d)
        var = sum((Jn - J) @ Ek @ (Jn - J) for Jn in Js) / e.n_data
        P[:, k] = (A @ Ek @ A.T + lam @ (f / B * var) @ lam.T).ravel()
    Q = lam @ (f / B * C0) @ lam.T + (2 * lam / beta if math.isfinite(beta) else 0)
    S = np.linalg.solve(np.eye(d * d) - P, Q.ravel()).reshape(d, d)
    return 0.5 * (S + S.T), np.max(np.abs(np.linalg.eigvals(P)))


@pytest.mark.parametrize("beta", [math.inf, 300.0])
@pytest.mark.parametrize("wor", [False, True])
@pytest.mark.parametrize("method", ["direct", "iterative"])
def test_matches_brute_force(rng, beta, wor, method):
    ds = hetero_linear(rng)
    e = expand(get_model("linear"), ds, 2.0)
    lam = 0.3 * random_spd(rng, 3, 3.0)
    B = 5
    f = (ds.n_data - B) / (ds.n_data - 1) if wor else 1.0
    S_bf, rho_bf = brute_force_cov(e, lam, B, beta, f)
    res = predict_stationary_cov(e, Dynamics(lam, B, inv_temperature=beta, batching=bool(wor)), method=method)
    np.testing.assert_allclose(res.cov, S_bf, rtol=SOLVER_RTOL, atol=0)
    assert res.spectral_radius == pytest.approx(rho_bf, rel=1e-7)  # ARPACK tol 1e-8
    assert res.relative_residual < 1e-12


def test_rank_one_and_dense_hessian_paths_agree(rng):
    ds = example("logistic")
    m = get_model("logistic")
    e1 = expand(m, ds, 1.0)
    e2 = expand(m, ds, 1.0, dense_hessians=True)
    lam = 0.5 * np.eye(ds.dim)
    r1 = predict_stationary_cov(e1, Dynamics(lam, 8))
    r2 = predict_stationary_cov(e2, Dynamics(lam, 8))
    np.testing.assert_allclose(r1.cov, r2.cov, rtol=SOLVER_RTOL)


@pytest.mark.parametrize("wor", [False, True])
def test_noise_covariance_by_enumerating_every_batch(rng, wor):
    """Eq. (12): average over all batches (ordered B-tuples / B-subsets) of the proxy gradient covariance."""
    n, d, B = 6, 2, 3
    ds = hetero_linear(rng, n=n, d=d)
    e = expand(get_model("poisson"), make_dataset(ds.X * 0.3, rng.poisson(2.0, n).astype(float)), 1.5)
    sigma = random_spd(rng, d)
    Js = e.weights[:, None, None] * e.design[:, :, None] * e.design[:, None, :]
    batches = itertools.combinations(range(n), B) if wor else itertools.product(range(n), repeat=B)
    gbar, J = e.grads.mean(0), Js.mean(0)
    acc, count = np.zeros((d, d)), 0
    for b in batches:
        b = list(b)
        gb, Jb = e.grads[b].mean(0) - gbar, Js[b].mean(0) - J
        acc += np.outer(gb, gb) + Jb @ sigma @ Jb  # E_d Cov_b(g_b + J_b d), d ~ N(0, Σ)
        count += 1
    np.testing.assert_allclose(noise_covariance(e, sigma, Dynamics(None, B, batching=bool(wor))), acc / count,
                               rtol=ENUMERATION_RTOL)


@pytest.mark.symbolic
@pytest.mark.parametrize("beta", [math.inf, 50.0])
@pytest.mark.parametrize("wor", [False, True])
def test_one_dimensional_sympy_oracle(rng, beta, wor):
    X = rng.standard_normal((40, 1))
    y = (rng.random(40) < 0.4).astype(float)
    e = expand(get_model("logistic"), make_dataset(X, y), 0.7)
    exprs = sym.stationary_variance_1d()
    subs = sym.substitutions(e, 4, wor)
    lam = 0.8
    key = "Sigma" if math.isfinite(beta) else "Sigma_sgd"
    expected = float(exprs[key].subs({**subs, sym.lam: lam, sym.beta: beta}))
    got = predict_stationary_cov(e, Dynamics(lam, 4, inv_temperature=beta, batching=bool(wor))).cov[0, 0]
    assert got == pytest.approx(expected, rel=SYMBOLIC_RTOL)
    lam_max = float(exprs["lambda_max"].subs(subs))
    assert max_stable_step(e, Dynamics(1.0, 4, batching=bool(wor)), rtol=1e-6) == pytest.approx(
        lam_max, rel=1e-5)


def test_direct_and_iterative_agree_with_momentum_and_nonsymmetric_step(rng):
    ds = hetero_linear(rng, n=120, d=4)
    e = expand(get_model("linear"), ds)
    lam = 0.2 * random_spd(rng, 4, 2.0) + 0.01 * rng.standard_normal((4, 4))  # SGD allows any Λ
    for kappa in (0.0, 0.5):
        a = predict_stationary_cov(e, Dynamics(lam, 6, momentum=kappa), method="direct")
        b = predict_stationary_cov(e, Dynamics(lam, 6, momentum=kappa), method="iterative")
        np.testing.assert_allclose(a.cov, b.cov, rtol=SOLVER_RTOL)
        np.testing.assert_allclose(a.tau, b.tau, rtol=SOLVER_RTOL)


def test_momentum_matches_corrected_eq_B3(rng):
    """Wang, Ding & Huggins (2026) eq. (B.3) for Λ = λI: its SGD part holds; its injected-noise term is corrected.

    Solving the 1-D augmented system in sympy gives the coefficient of 2Λ/β as
    (1−κ)² + 2κλH/(1+κ) instead of the printed (1+κ²); the test checks the corrected form
    holds to solver precision and that the printed one does not.
    """
    e = expand(get_model("logistic"), example("logistic"), 1.0)
    lam, k, B, beta = 0.3, 0.6, 16, 500.0
    S = predict_stationary_cov(e, Dynamics(lam, B, inv_temperature=beta, momentum=k)).cov
    H = e.hessian
    C = noise_covariance(e, S, Dynamics(None, B))
    lhs = (1 - k) * lam * (H @ S + S @ H) + k / (1 - k**2) * lam**2 * (H @ H @ S + S @ H @ H)
    rhs_sgd = lam**2 * C + (1 + k**2) / (1 - k**2) * lam**2 * H @ S @ H
    corrected = rhs_sgd + 2 / beta * ((1 - k) ** 2 * lam * np.eye(5) + 2 * k / (1 + k) * lam**2 * H)
    printed = rhs_sgd + (1 + k**2) * 2 * lam / beta * np.eye(5)
    assert np.linalg.norm(lhs - corrected) / np.linalg.norm(lhs) < 1e-12
    assert np.linalg.norm(lhs - printed) / np.linalg.norm(lhs) > 0.1


@pytest.mark.symbolic
def test_momentum_b3_coefficient_by_sympy():
    """Independent derivation of the corrected β-term of eq. (B.3) (1-D, no gradient noise)."""
    l, h, k, q = sp.symbols("lambda h kappa q", positive=True)
    a, b, c = sp.symbols("a b c")
    S = sp.Matrix([[a, b], [b, c]])
    F = sp.Matrix([[1 - l * h, -k * l], [h, k]])
    eqs = S - F * S * F.T - sp.Matrix([[q, 0], [0, 0]])
    sol = sp.solve([eqs[0, 0], eqs[0, 1], eqs[1, 1]], [a, b, c], dict=True)[0]
    Sdd = sol[a]
    lhs = (1 - k) * 2 * l * h * Sdd + k / (1 - k**2) * 2 * l**2 * h**2 * Sdd
    rhs = (1 + k**2) / (1 - k**2) * l**2 * h**2 * Sdd
    assert sp.simplify((lhs - rhs) / q - ((1 - k) ** 2 + 2 * k * l * h / (1 + k))) == 0


def test_tau_matches_truncated_autocovariance_sum(rng):
    e = expand(get_model("linear"), hetero_linear(rng, d=3))
    lam = 0.4 * random_spd(rng, 3, 2.0)
    res = predict_stationary_cov(e, Dynamics(lam, 4))
    A = np.eye(3) - lam @ e.hessian
    acc, Ak = np.zeros((3, 3)), np.eye(3)
    for _ in range(20000):
        acc += Ak @ res.cov
        Ak = Ak @ A
    np.testing.assert_allclose(res.tau, 2 * np.diag(acc) / np.diag(res.cov) - 1, rtol=1e-9)
    # worst case over linear functionals: brute-force maximise over random directions
    V = rng.standard_normal((20000, 3))
    taus = 2 * np.einsum("ij,jk,ik->i", V, acc, V) / np.einsum("ij,jk,ik->i", V, res.cov, V) - 1
    assert taus.max() <= res.tau_worst + 1e-9
    assert taus.max() >= res.tau_worst - 1e-2 * res.tau_worst
    # Prop. 4.4 holds in 1-D / commuting case
    e1 = expand(get_model("linear"), make_dataset(rng.standard_normal((30, 1)), rng.standard_normal(30)))
    r1 = predict_stationary_cov(e1, Dynamics(0.5, 3))
    assert r1.tau_worst == pytest.approx(r1.tau_spectral, rel=1e-12)


def test_iterate_average_closed_form_vs_explicit_sum_and_paper(rng):
    e = expand(get_model("linear"), hetero_linear(rng, d=3))
    lam = 0.3 * random_spd(rng, 3, 2.0)
    res = predict_stationary_cov(e, Dynamics(lam, 4, momentum=0.3))
    F, S = res.transition, res.augmented_cov
    for k in (1, 2, 7, 40):
        acc = k * S
        for m in range(1, k):
            Fm = np.linalg.matrix_power(F, m)
            acc = acc + (k - m) * (Fm @ S + S @ Fm.T)
        np.testing.assert_allclose(iterate_average_cov(res, k), (acc / k**2)[:3, :3], rtol=1e-10)


@pytest.mark.mc
def test_iterate_average_vs_simulation_and_prop_B2_is_wrong(rng):
    """Average of k = 25 consecutive stationary iterates: closed form vs Monte Carlo; Prop. B.2 rejected."""
    ds = hetero_linear(rng, n=100, d=2)
    e = expand(get_model("linear"), ds)
    lam = 0.25 * np.eye(2)
    res = predict_stationary_cov(e, Dynamics(lam, 4))
    k, chains = 25, 20000
    burn = int(math.log(1e-8) / math.log(res.spectral_radius)) + 1
    th = simulate_chains("linear", ds.X, ds.y, np.zeros((2, 2)), lam, e.theta_hat, batch_size=4,
                         steps=burn, chains=chains, rng=rng)
    avg = np.zeros_like(th)
    for _ in range(k):
        th = simulate_chains("linear", ds.X, ds.y, np.zeros((2, 2)), lam, th, batch_size=4, steps=1,
                             chains=chains, rng=rng)
        avg += th / k
    pred = iterate_average_cov(res, k)
    z = covariance_z_scores(avg, e.theta_hat, pred)
    assert np.max(np.abs(z)) < bonferroni_z(len(z))
    A = np.eye(2) - lam @ e.hessian
    paper = (k * res.cov + 2 * sum(np.linalg.matrix_power(A, m) @ res.cov for m in range(1, k))) / k**2
    z_paper = covariance_z_scores(avg, e.theta_hat, 0.5 * (paper + paper.T))
    assert np.max(np.abs(z_paper)) > 10  # the printed formula is far outside Monte Carlo error


@pytest.mark.mc
@pytest.mark.parametrize("case", ["sgd-tuned", "sgld-wor", "momentum"])
def test_linear_regression_monte_carlo_matches_exactly(rng, case):
    """Linear regression: the proxy is exact, so the chain's covariance equals the prediction (MC error)."""
    ds = hetero_linear(rng, n=150, d=3)
    gamma = 1.0 * np.eye(3)
    e = expand(get_model("linear"), ds, gamma)
    B, beta, kappa, wor = 6, math.inf, 0.0, False
    lam = 0.3 * random_spd(rng, 3, 2.0)
    if case == "sgld-wor":
        beta, wor = float(ds.n_data), True
    if case == "momentum":
        kappa, lam = 0.5, 0.15 * np.eye(3)
    res = predict_stationary_cov(e, Dynamics(lam, B, inv_temperature=beta, momentum=kappa, batching=bool(wor)))
    steps = int(math.log(1e-8) / math.log(res.spectral_radius)) + 1
    th = simulate_chains("linear", ds.X, ds.y, gamma, lam, e.theta_hat, batch_size=B, steps=steps,
                         chains=20000, rng=rng, beta=beta, momentum=kappa, replace=not wor)
    z = covariance_z_scores(th, e.theta_hat, res.cov)  # E d = 0 exactly for the linear proxy
    assert np.max(np.abs(z)) < bonferroni_z(len(z))


@pytest.mark.mc
def test_logistic_monte_carlo_within_proxy_error(rng):
    """Logistic regression: the proxy is accurate to O(λ/B) (Cor. 4.6).

    Tolerance: Monte Carlo z-threshold plus a proxy allowance of (λ_max/B)·max|Σ| per entry
    (W₂ ≤ Aλ/B with A of order one for this well-conditioned design; stated, not fitted).
    """
    ds = example("logistic")
    X, y = ds.X[:400, :3], ds.y[:400]
    e = expand(get_model("logistic"), make_dataset(X, y), 1.0)
    lam = 0.5 * np.linalg.inv(e.hessian) * 0.5
    B = 16
    res = predict_stationary_cov(e, Dynamics(lam, B))
    steps = int(math.log(1e-8) / math.log(res.spectral_radius)) + 1
    th = simulate_chains("logistic", X, y, np.eye(3), lam, e.theta_hat, batch_size=B, steps=steps,
                         chains=20000, rng=rng)
    mean = th.mean(0)
    c = th - mean
    iu = np.triu_indices(3)
    prod = c[:, iu[0]] * c[:, iu[1]]
    se = prod.std(0, ddof=1) / math.sqrt(len(th))
    allowance = np.linalg.eigvalsh(lam).max() / B * np.abs(res.cov).max()
    assert np.all(np.abs(prod.mean(0) - res.cov[iu]) <= bonferroni_z(6) * se + allowance)


# ------------------------------------------------------------------ errors
def test_unstable_step_reports_largest_stable_multiple():
    e = expand(get_model("linear"), example("hetero-linear"))
    with pytest.raises(UnstableStepSizeError, match="largest stable multiple") as info:
        predict_stationary_cov(e, Dynamics(1.0, 4))
    c = info.value.max_stable_step
    assert 0 < c < 1
    predict_stationary_cov(e, Dynamics(0.99 * c, 4))  # stable just below
    with pytest.raises(UnstableStepSizeError):
        predict_stationary_cov(e, Dynamics(1.01 * c, 4))


@pytest.mark.parametrize("step, exc, match", [
    (np.ones((2, 2)), ShapeError, r"must be \(D, D\) = \(20, 20\)"),
    (np.ones(3), ShapeError, "length D = 20"),
    (-0.1, SgtuneError, "must be > 0"),
    (np.full(20, np.nan), SgtuneError, "non-finite"),
])
def test_bad_step_matrix(step, exc, match):
    e = expand(get_model("linear"), example("hetero-linear"))
    with pytest.raises(exc, match=match):
        predict_stationary_cov(e, Dynamics(step, 4))


def test_sgld_needs_spd_step_and_valid_arguments():
    e = expand(get_model("linear"), example("hetero-linear"))
    bad = 0.01 * np.eye(20)
    bad[0, 1] = 0.005
    with pytest.raises(NotPositiveDefiniteError, match="symmetric positive definite for SGLD"):
        predict_stationary_cov(e, Dynamics(bad, 4, inv_temperature=100.0))
    with pytest.raises(SgtuneError, match="batch_size must be <= 2000"):
        predict_stationary_cov(e, Dynamics(0.01, 5000))
    with pytest.raises(SgtuneError, match="momentum must lie in"):
        predict_stationary_cov(e, Dynamics(0.01, 4, momentum=1.0))
    with pytest.raises(SgtuneError, match="inv_temperature must be > 0"):
        predict_stationary_cov(e, Dynamics(0.01, 4, inv_temperature=-1))
    with pytest.raises(SgtuneError, match="method must be"):
        predict_stationary_cov(e, Dynamics(0.01, 4), method="qr")


def test_critically_damped_momentum_is_solved_accurately(rng):
    """At κ = (1 − sqrt(λh))², F has a double eigenvalue (defective): the solver must not lose accuracy."""
    X = rng.standard_normal((100, 2))
    e = expand(get_model("linear"), make_dataset(X, rng.standard_normal(100)))
    lam = 0.25 / np.linalg.eigvalsh(e.hessian)[0]  # (1 − λh + κ)² = 4κ at κ = 1/4
    a = predict_stationary_cov(e, Dynamics(lam, 5, momentum=0.25), method="direct")
    b = predict_stationary_cov(e, Dynamics(lam, 5, momentum=0.25), method="iterative")
    np.testing.assert_allclose(b.cov, a.cov, rtol=SOLVER_RTOL)
    assert b.relative_residual < 1e-12


def test_stein_fallback_for_a_real_defective_transition(rng):
    """A real Jordan-block F (ill-conditioned eigenvectors) takes the Bartels–Stewart route exactly."""
    from dataclasses import replace

    from sgtune.theory.linear_chain import LinearChain, SteinSolver

    e = expand(get_model("linear"), make_dataset(rng.standard_normal((50, 2)), rng.standard_normal(50)))
    base = LinearChain.of(e, Dynamics(0.1, 5))
    F = np.array([[0.5, 1.0], [0.0, 0.5]])
    stein = SteinSolver(replace(base, transition=F, step_matrix=np.array([[1.0, 0.3], [0.0, 1.0]])))  # non-symmetric Λ
    assert stein.fallback and stein.real
    Q = np.array([[2.0, 0.5], [0.5, 1.0]])
    X = stein.solve(Q)
    np.testing.assert_allclose(X - F @ X @ F.T, Q, atol=1e-13)  # the Stein equation itself


# --------------------------------------------------------------------------- spectral radius: ARPACK is checked
def _heavy_ball_case(d: int):
    """Logistic-type rank-one problem, scalar Λ from the momentum closed form, κ = 0.6, a third of the data per
    batch without replacement: every underdamped mode has |z|² = κ, so the Perron root (≈ 0.60) sits just above
    a cluster of eigenvalues of modulus κ — where scipy's ARPACK returned −2.7 − 2.2i (not an eigenvalue: the
    map's norm is 1.98) at D = 20 and the non-Perron 0.59987 at D = 10."""
    from sgtune.theory.linear_chain import LinearChain
    from sgtune.theory.tuning import structured_momentum_step_matrix

    e = logistic_expansion(3000, d, seed=d)
    S = e.sandwich_cov()
    M = noise_covariance(e, S, Dynamics(None, 1000, batching="without-replacement"))
    lam = structured_momentum_step_matrix(e.hessian, S, M, family="scalar", momentum=0.6, inv_temperature=3e5)
    return e, lam, LinearChain.of(e, Dynamics(lam, 1000, inv_temperature=3e5, momentum=0.6,
                                             batching="without-replacement"))


def _dense_radius_by_blocks(system) -> float:
    """ρ(P) of the dense m²×m² operator P from two diagonal blocks (an exact eigenvalue computation, like
    ``eigvals`` of all of P, at a quarter of its cost: the 1600×1600 matrix of D = 20 took most of this file's time).

    In the orthonormal basis U (symmetric matrices: E_ii and (E_ij + E_ji)/√2, i < j) and V (antisymmetric:
    (E_ij − E_ji)/√2, i < j) of R^{m×m}, P is block upper triangular when it maps symmetric matrices to symmetric
    ones (VᵀPU = 0, checked on P itself), so spec(P) = spec(UᵀPU) ∪ spec(VᵀPV)."""
    P = system.operator()
    m = system.state_dim
    i, j = np.triu_indices(m)
    a, b = i * m + j, j * m + i
    diag = i == j
    r = math.sqrt(0.5)
    PU = np.where(diag, P[:, a], (P[:, a] + P[:, b]) * r)  # P U, (m², m(m+1)/2)
    np.testing.assert_allclose(PU[a], PU[b], rtol=0, atol=1e-13 * np.abs(P).max())  # P(sym) ⊂ sym: VᵀPU = 0
    UtPU = np.where(diag[:, None], PU[a], (PU[a] + PU[b]) * r)
    a, b = a[~diag], b[~diag]
    PV = (P[:, a] - P[:, b]) * r
    VtPV = (PV[a] - PV[b]) * r
    return max(float(np.max(np.abs(np.linalg.eigvals(M)))) for M in (UtPU, VtPV))


def test_dense_radius_by_blocks_is_the_radius_of_the_whole_operator():
    """The block route of the D = 20 reference against ``eigvals`` of the whole operator (D = 10: 400×400)."""
    _, _, system = _heavy_ball_case(10)
    whole = float(np.max(np.abs(np.linalg.eigvals(system.operator()))))
    assert _dense_radius_by_blocks(system) == pytest.approx(whole, rel=1e-11)


@pytest.mark.parametrize("d", [10, 20])
def test_momentum_radius_is_the_perron_root_not_arpacks_answer(d):
    """The iterative path's radius equals the largest |eigenvalue| of the dense m²×m² operator (independent)."""
    e, lam, system = _heavy_ball_case(d)
    exact = _dense_radius_by_blocks(system)
    res = predict_stationary_cov(e, system.dynamics, method="iterative")
    assert not res.spectral_radius_is_bound
    assert res.spectral_radius == pytest.approx(exact, rel=1e-9)


def test_perron_check_rejects_what_is_not_a_perron_pair():
    """A complex or negative value, a non-PSD eigenvector or a large residual is not accepted from ARPACK."""
    _, _, system = _heavy_ball_case(10)
    m = system.state_dim
    _perron_or_nan = system._perron_or_nan
    w, V = np.linalg.eig(system.operator())
    k = int(np.argmax(np.abs(w)))
    assert _perron_or_nan(complex(w[k]), V[:, k]) == pytest.approx(abs(w[k]), rel=1e-12)
    assert math.isnan(_perron_or_nan(complex(-2.7, -2.2), V[:, k]))  # ARPACK's spurious value
    assert math.isnan(_perron_or_nan(complex(w[k]) * 1.01, V[:, k]))  # residual too large
    # a real eigenvalue of the cluster whose eigenvector is not positive semidefinite
    real = [i for i in np.argsort(-np.abs(w)) if abs(w[i].imag) < 1e-12 and i != k]
    assert math.isnan(_perron_or_nan(complex(w[real[0]]), V[:, real[0]]))
    assert m == 20


def test_bracketed_power_iteration_brackets_the_perron_root():
    """The Collatz–Wielandt bracket of the power iteration contains the dense radius; once closed (no cluster,
    κ = 0) it is that radius; not closed (the heavy-ball cluster) it is reported as an upper bound."""
    e, lam, system = _heavy_ball_case(10)
    exact = float(np.max(np.abs(np.linalg.eigvals(system.operator()))))
    S = system.solve_iterative(1e-12)
    rho, is_bound = system._bracketed_power_radius(S, max_iter=20)
    assert is_bound and exact <= rho
    rho, is_bound = system._bracketed_power_radius(S)  # the cluster at κ: slow, but a valid bound
    assert is_bound and exact <= rho <= 1.01 * exact
    plain = system.scaled(2.0).dynamics.replace(momentum=0.0, inv_temperature=3e5)  # no momentum: separated root
    plain = LinearChain.of(e, plain)
    exact = float(np.max(np.abs(np.linalg.eigvals(plain.operator()))))
    rho, is_bound = plain._bracketed_power_radius(plain.solve_iterative(1e-12))
    assert not is_bound and rho == pytest.approx(exact, rel=2e-7)


def test_equilibration_steps_match_the_second_moment_recursion():
    """Iterate S_t = F S_{t−1} Fᵀ + Q₀ from S_0 = 0 (a scalar SGD chain, 𝒫(S) = (1−λh)²S) and count the steps
    until |S_t − Σ| ≤ 1 % Σ: the closed form must give the first such t."""
    import math

    from sgtune.theory.stationary import equilibration_steps

    for lam_h in (0.3, 0.05, 1e-3):
        rho = (1 - lam_h) ** 2
        q0 = 0.7
        sigma = q0 / (1 - rho)
        s, t = 0.0, 0
        while abs(s - sigma) > 0.01 * sigma:
            s, t = rho * s + q0, t + 1
        assert equilibration_steps(rho) == t
    assert equilibration_steps(1.0) == math.inf and equilibration_steps(0.0) == 1.0
    assert equilibration_steps(1 - 3e-8) > 1e8  # the near-unit radius of an ill-conditioned fit is not hidden
