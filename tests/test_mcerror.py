"""Monte Carlo error constants of the linear chain (sgtune.theory.mcerror).

Oracles, each independent of the code under test:
- brute force: the truncated lag sums with explicit matrix powers A_k = F^k S (no eigen- or block
  decomposition, no Kronecker products), truncated where the tail is below 1e-14 of the sum;
- simulation of the exactly Gaussian linear chain with the same F and noise (the formula's assumption);
- sgtune's own sampler on real data (the chain that runs, whose minibatch noise is not Gaussian),
  with tolerances from the Monte Carlo standard error of the repetitions.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import scipy.linalg as sla

from sgtune.core.config import Dynamics, RunSpec
from sgtune.core.errors import ConvergenceError, SgtuneError, ShapeError
from sgtune.io.data import example
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains
from sgtune.theory import cov_error_constant, mc_error, mean_asymptotic_cov
from sgtune.theory.linear_chain import LinearChain
from sgtune.theory.stationary import equilibration_steps, predict_stationary_cov
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics

from _tolerances import bonferroni_z

#: issue 20's agreement target for the brute-force check (the routes reach ~1e-13)
BRUTE_RTOL = 1e-6


def _brute(F, S, d):
    """Σ_k [(tr A_k)² + tr(A_kA_k)] and Σ_k A_k over |k| ≤ K with explicit powers A_k = P F^k S Pᵀ."""
    rho = max(abs(np.linalg.eigvals(F)))
    K = int(math.ceil(40.0 / -math.log(rho))) + 50  # ρ^{2K} < e^{-80}: the tail is far below 1e-14
    c, mean, Ak = 0.0, np.zeros((d, d)), S.copy()
    for k in range(K):
        A = Ak[:d, :d]
        g = np.trace(A) ** 2 + np.trace(A @ A)
        c += g if k == 0 else 2 * g
        mean += A if k == 0 else A + A.T
        Ak = F @ Ak
    return c, mean


def _linear_chain(rng, d, kappa, *, spd=True, hvals=None, lam=None):
    """(F, S, chain) of x' = Fx + noise: the proxy's transition (Wang, Ding & Huggins 2026, Eq. (8) / Prop. B.1)
    with a random H and Λ, built here by hand and checked against :class:`LinearChain`'s."""
    if hvals is None:
        X = rng.normal(size=(d, d))
        H = X @ X.T / d + 0.3 * np.eye(d)
    else:
        Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
        H = Q @ np.diag(hvals) @ Q.T
    if lam is None:
        Y = rng.normal(size=(d, d))
        lam = Y @ Y.T / d + 0.2 * np.eye(d) if spd else np.eye(d) + 0.4 * rng.normal(size=(d, d))
        mu = np.linalg.eigvals(lam @ H)
        lam = lam * 0.6 / np.max(np.abs(mu))  # stable: every |1 − μ| < 1 for the test's Λ
    C = np.cov(rng.normal(size=(3 * d, d)), rowvar=False) + 0.1 * np.eye(d)
    I = np.eye(d)
    if kappa == 0:
        F, Qn = I - lam @ H, lam @ C @ lam.T
    else:
        F = np.block([[I - lam @ H, -kappa * lam], [H, kappa * I]])
        E = np.vstack([-lam, I])
        Qn = E @ C @ E.T
    assert max(abs(np.linalg.eigvals(F))) < 1
    S = sla.solve_discrete_lyapunov(F, Qn)
    chain = LinearChain.with_constant_noise(Dynamics(lam, 1, momentum=kappa), H, C)
    np.testing.assert_array_equal(chain.transition, F)
    return F, 0.5 * (S + S.T), chain


@pytest.mark.parametrize("d, kappa", [(1, 0.0), (3, 0.0), (7, 0.0), (3, 0.5), (6, 0.5), (4, 0.9)])
def test_constants_equal_the_brute_force_lag_sums(rng, d, kappa):
    F, S, chain = _linear_chain(rng, d, kappa)
    c_bf, mean_bf = _brute(F, S, d)
    c, method = cov_error_constant(chain, S)
    assert method == ("blocks" if kappa else "symmetric")
    assert c == pytest.approx(c_bf, rel=BRUTE_RTOL)
    np.testing.assert_allclose(mean_asymptotic_cov(F, S, dim=d), mean_bf, rtol=BRUTE_RTOL,
                               atol=BRUTE_RTOL * np.abs(mean_bf).max())


@pytest.mark.parametrize("kappa", [0.0, 0.6])
def test_every_route_equals_the_brute_force(rng, kappa):
    d = 4
    F, S, chain = _linear_chain(rng, d, kappa)
    c_bf, _ = _brute(F, S, d)
    for method in ("blocks" if kappa else "symmetric", "eig", "kron"):
        c, used = cov_error_constant(chain, S, method=method)
        assert used == method and c == pytest.approx(c_bf, rel=BRUTE_RTOL)


def test_non_symmetric_step_matrix_uses_complex_eigenvalues(rng):
    d = 5
    F, S, chain = _linear_chain(rng, d, 0.0, spd=False)
    assert np.iscomplex(np.linalg.eigvals(F)).any()  # this Λ rotates: complex μ
    c, method = cov_error_constant(chain, S)
    assert method == "eig"
    assert c == pytest.approx(_brute(F, S, d)[0], rel=BRUTE_RTOL)


def test_critically_damped_momentum_is_exact(rng):
    """h = (1 − √κ)² makes a 2×2 block defective (a Jordan block): no eigenvector basis exists."""
    d, kappa = 4, 0.64
    hcrit = (1 - math.sqrt(kappa)) ** 2
    F, S, chain = _linear_chain(rng, d, kappa, hvals=[hcrit, hcrit, 0.5, 0.05], lam=np.eye(d))
    assert np.linalg.cond(np.linalg.eig(F)[1]) > 1e7
    c_bf, _ = _brute(F, S, d)
    c, method = cov_error_constant(chain, S)
    assert method == "blocks" and c == pytest.approx(c_bf, rel=BRUTE_RTOL)
    with pytest.raises(ConvergenceError, match="condition number"):
        cov_error_constant(F, S, dim=d, method="eig")
    c_k, used = cov_error_constant(F, S, dim=d)  # without Λ: the general route falls back to Kronecker
    assert used == "kron" and c_k == pytest.approx(c_bf, rel=BRUTE_RTOL)


def test_slow_modes_keep_their_digits():
    """μ = 1 − 1e-7: 1 − μ_iμ_j is formed without cancellation. Oracle: for diagonal F the lag sums are
    geometric series, Σ_k μ_i^kμ_j^k = 1/(1 − μ_iμ_j), evaluated in exact rational arithmetic."""
    from fractions import Fraction as Fr

    h = [Fr(1), Fr(1, 2), Fr(1, 10**7)]
    S = [[Fr(2), Fr(1, 3), Fr(-1, 5)], [Fr(1, 3), Fr(1), Fr(1, 7)], [Fr(-1, 5), Fr(1, 7), Fr(3)]]
    mu = [1 - x for x in h]
    g = [[1 / (1 - mu[i] * mu[j]) for j in range(3)] for i in range(3)]
    half = sum(S[i][i] * S[j][j] * g[i][j] + S[i][j] * S[j][i] * g[i][j] for i in range(3) for j in range(3))
    k0 = sum(S[i][i] for i in range(3)) ** 2 + sum(S[i][j] * S[j][i] for i in range(3) for j in range(3))
    exact = float(2 * half - k0)
    F = np.diag([float(m) for m in mu])
    Sf = np.array(S, dtype=float)
    lam = 0.1 * np.eye(3)  # F = I − ΛH with H = diag(h)/0.1; the chain carries the exactly rounded F
    chain = replace(LinearChain.with_constant_noise(Dynamics(lam, 1), np.diag([float(x) for x in h]) / 0.1,
                                                    np.eye(3)), transition=F)
    c, method = cov_error_constant(chain, Sf)
    assert method == "symmetric" and c == pytest.approx(exact, rel=1e-9)
    assert cov_error_constant(F, Sf, method="eig")[0] == pytest.approx(exact, rel=1e-9)


def test_ar1_closed_form():
    """Scalar AR(1) x' = a x + e: A_k = a^|k| s, so c = 2s²(1 + a²)/(1 − a²) and T·Var(x̄) = s(1 + a)/(1 − a)."""
    a, q = -0.7, 2.0
    s = q / (1 - a * a)
    c, _ = cov_error_constant([[a]], [[s]])
    assert c == pytest.approx(2 * s * s * (1 + a * a) / (1 - a * a), rel=1e-13)
    assert mean_asymptotic_cov([[a]], [[s]])[0, 0] == pytest.approx(s * (1 + a) / (1 - a), rel=1e-13)


def test_from_a_stationary_prediction_with_momentum():
    e = expand(get_model("logistic"), example("logistic"))
    st = predict_stationary_cov(e, Dynamics(0.5, 16, momentum=0.5))
    r = mc_error(st)
    c_bf, mean_bf = _brute(st.transition, st.augmented_cov, e.dim)
    assert r.method == "blocks"
    assert r.cov_mc_error == pytest.approx(c_bf, rel=BRUTE_RTOL)
    assert r.cov_mc_error_constant == pytest.approx(c_bf / np.sum(st.cov ** 2), rel=BRUTE_RTOL)
    np.testing.assert_allclose(r.mean_mc_variance, mean_bf, rtol=BRUTE_RTOL, atol=1e-12 * np.abs(mean_bf).max())
    target = 2.0 * st.cov
    assert mc_error(st, reference_cov=target).cov_mc_error_constant == pytest.approx(c_bf / np.sum(target ** 2),
                                                                                     rel=BRUTE_RTOL)


def test_bad_inputs():
    with pytest.raises(SgtuneError, match="spectral radius"):
        cov_error_constant([[1.0]], [[1.0]])
    with pytest.raises(ShapeError, match="square of one size"):
        mean_asymptotic_cov(np.eye(2) * 0.5, np.eye(3))
    with pytest.raises(SgtuneError, match="method must be one of"):
        cov_error_constant([[0.5]], [[1.0]], method="nope")
    with pytest.raises(SgtuneError, match="symmetric positive-definite step_matrix"):
        cov_error_constant([[0.5]], [[1.0]], method="symmetric")


def _gaussian_twin_errors(st, T, R, C, seed):
    """R repetitions of C exactly Gaussian chains x' = Fx + N(0, S − FSFᵀ) started at stationarity:
    T·C·‖Ŝ − Σ‖²_F of the pooled sample covariance, and the chain means."""
    F, S = st.transition, st.augmented_cov
    m, d = F.shape[0], st.cov.shape[0]
    Lq = np.linalg.cholesky(S - F @ S @ F.T + 1e-300 * np.eye(m))
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(R * C, m)) @ np.linalg.cholesky(S).T
    s1, s2 = np.zeros((R * C, d)), np.zeros((R * C, d, d))
    for _ in range(T):
        p = x[:, :d]
        s1 += p
        s2 += p[:, :, None] * p[:, None, :]
        x = x @ F.T + rng.normal(size=(R * C, m)) @ Lq.T
    means = s1 / T
    s1, s2 = s1.reshape(R, C, d).sum(1), s2.reshape(R, C, d, d).sum(1)
    mean = s1 / (T * C)
    cov = s2 / (T * C) - mean[:, :, None] * mean[:, None, :]
    return np.sum((cov - st.cov) ** 2, axis=(1, 2)) * T * C, means


@pytest.mark.mc
def test_gaussian_chain_matches_the_constants():
    """The formula's own assumption: an exactly Gaussian linear chain (logistic example's tuned F, S)."""
    e = expand(get_model("logistic"), example("logistic"))
    st = tune(e, Dynamics(None, 64)).stationary
    r = mc_error(st)
    T = int(600 * st.tau_worst)  # finite-T corrections are O(τ/T): ≈ 0.2 % here, far below the MCSE
    err, means = _gaussian_twin_errors(st, T, R=150, C=1, seed=1)
    z = (err.mean() - r.cov_mc_error) / (err.std(ddof=1) / math.sqrt(len(err)))
    assert abs(z) < bonferroni_z(2), (err.mean() / r.cov_mc_error, z)
    # mean: Var(vᵀx̄)·T against vᵀΩv along Ω's leading eigenvector (chi-square: relative SE √(2/(n−1)))
    w, V = np.linalg.eigh(r.mean_mc_variance)
    v = V[:, -1]
    proj = means @ v
    ratio = np.var(proj, ddof=1) * T / w[-1]
    assert abs(ratio - 1) < bonferroni_z(2) * math.sqrt(2 / (len(proj) - 1)), ratio


def _sampler_check(name, model, B, kappa, T, reps, C=4, family="dense"):
    ds = example(name)
    m = get_model(model)
    e = expand(m, ds)
    tr = tune(e, Dynamics(None, B, momentum=kappa), family=family)
    st = tr.stationary
    r = mc_error(st)
    burn = int(equilibration_steps(st.spectral_radius, tol=1e-3))
    errs, means = [], []
    for rep in range(reps):
        res = run_chains(m, ds, Dynamics(tr.step_matrix, B, momentum=kappa),
                         RunSpec(burn + T, n_chains=C, burn_in=burn, seed=1000 + rep))
        errs.append(np.sum((res.cov - st.cov) ** 2) * T * C)
        means.append(res.chain_means)
    errs = np.array(errs)
    z = (errs.mean() - r.cov_mc_error) / (errs.std(ddof=1) / math.sqrt(reps))
    assert abs(z) < bonferroni_z(2), (errs.mean() / r.cov_mc_error, z)
    means = np.concatenate(means)
    w, V = np.linalg.eigh(r.mean_mc_variance)
    proj = means @ V[:, -1]
    ratio = np.var(proj, ddof=1) * T / w[-1]
    assert abs(ratio - 1) < bonferroni_z(2) * math.sqrt(2 / (len(proj) - 1)), ratio
    return errs.mean() / r.cov_mc_error


@pytest.mark.mc
def test_sampler_chains_match_the_constants_fast():
    """sgtune's chains (logistic, B = 32): the squared error of the pooled covariance and the variance of the
    chain means against the constants, tolerance from the standard error of 12 repetitions."""
    _sampler_check("logistic", "logistic", 32, 0.0, T=20_000, reps=12)


@pytest.mark.slow
@pytest.mark.mc
@pytest.mark.parametrize("name, model, B, kappa", [("hetero-linear", "linear", 32, 0.0),
                                                   ("logistic", "logistic", 32, 0.5),
                                                   ("poisson", "poisson", 8, 0.0)])
def test_sampler_chains_match_the_constants(name, model, B, kappa):
    _sampler_check(name, model, B, kappa, T=20_000, reps=60)


def test_the_keyword_form_of_0_1_is_gone(rng):
    """0.2.0 removed cov_error_constant(F, S, step_matrix=Λ, momentum=κ): Λ and κ come with the LinearChain."""
    F, S, chain = _linear_chain(rng, 3, 0.5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'step_matrix'"):
        cov_error_constant(F, S, dim=3, step_matrix=chain.step_matrix, momentum=0.5)