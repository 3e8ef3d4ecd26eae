"""Fluctuation constants of non-reversible SG Langevin samplers (sgtune.theory.fluctuation, docs/conventions.md).

Independent routes used as oracles:
- the Ornstein–Uhlenbeck time-integral formula σ² = ℓᵀB⁻¹(2D)B⁻ᵀℓ, B = (D+Q)M
  (∫Z dt ≈ B⁻¹∫sqrt(2D)dW), never used by the code under test;
- scipy's continuous Lyapunov solver (invariant covariance M⁻¹);
- the Schur-complement route for augmented states vs the full-state solve;
- brute-force spectral radii for the stable step;
- direct summation of the discrete second-moment recursion for the finite-η variance;
- explicit enumeration of the minibatch for the gradient-noise covariance;
- AR(1) processes with known long-run variance for batch means (Monte Carlo, MCSE tolerance).
"""
from __future__ import annotations

import numpy as np
import pytest
from _timeouts import HANG_GUARD_S
import scipy.linalg as sla
from hypothesis import given, settings
from hypothesis import strategies as st

from sgtune.core.errors import NotPositiveDefiniteError, SgtuneError, ShapeError, UnstableStepSizeError
from sgtune.theory.fluctuation import (
    NotAntisymmetricError,
    augmented_position_fluctuation,
    blr_gradient_noise_cov,
    estimate_fluctuation_from_chains,
    gaul_matrices,
    hfhr_matrices,
    max_stable_step,
    optimal_antisymmetric_nld,
    predict_time_average_variance,
    solve_fluctuation_gaul,
    solve_fluctuation_general,
    solve_fluctuation_hfhr,
    solve_fluctuation_nld,
    spectral_gap_optimal_nld,
)
from tests._tolerances import SOLVER_RTOL, bonferroni_z


def _spd(rng: np.random.Generator, n: int, shift: float = 0.5) -> np.ndarray:
    b = rng.standard_normal((n, n))
    return b @ b.T / n + shift * np.eye(n)


def _anti(rng: np.random.Generator, n: int, scale: float = 1.0) -> np.ndarray:
    b = rng.standard_normal((n, n)) * scale
    return b - b.T


def _ou_sigma2(m: np.ndarray, d: np.ndarray, q: np.ndarray, ell: np.ndarray) -> float:
    """Independent route: asymptotic variance of (1/T)∫ℓᵀZ dt for dZ = −BZdt + sqrt(2D)dW."""
    b = (d + q) @ m
    binv = np.linalg.inv(b)
    return float(ell @ binv @ (2 * d) @ binv.T @ ell)


# ------------------------------------------------------------------ general formula

@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_general_matches_ou_time_integral(rng: np.random.Generator, n: int) -> None:
    m, d, q, ell = _spd(rng, n), _spd(rng, n), _anti(rng, n), rng.standard_normal(n)
    res = solve_fluctuation_general(m, d, q, ell)
    # two dense float64 solves of well-conditioned n <= 6 problems: SOLVER_RTOL
    np.testing.assert_allclose(res.sigma2, _ou_sigma2(m, d, q, ell), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(res.sigma2_reversible, _ou_sigma2(m, d, 0 * q, ell), rtol=SOLVER_RTOL)
    # the reduction formula 2(QD⁻¹b)ᵀ(D+QᵀD⁻¹Q)⁻¹(QD⁻¹b) is a different expression of σ_R² − σ²
    np.testing.assert_allclose(res.reduction, res.sigma2_reversible - res.sigma2,
                               rtol=SOLVER_RTOL, atol=SOLVER_RTOL * res.sigma2_reversible)
    # Poisson solution: −𝓛φ = ℓᵀz ⟺ zᵀM(D−Q)a = ℓᵀz for all z, checked as a residual
    np.testing.assert_allclose(m @ (d - q) @ res.poisson_coefficient, ell, rtol=SOLVER_RTOL,
                               atol=SOLVER_RTOL * np.abs(ell).max())
    # σ² = 2aᵀDa (carré du champ form of Thm 3.2)
    a = res.poisson_coefficient
    np.testing.assert_allclose(2 * a @ d @ a, res.sigma2, rtol=SOLVER_RTOL)


def test_invariant_covariance_is_inverse_hessian(rng: np.random.Generator) -> None:
    """π ∝ exp(−½zᵀMz) is invariant for any Q: (D+Q)MΣ + Σ M(D+Q)ᵀ = 2D at Σ = M⁻¹ (scipy)."""
    n = 4
    m, d, q = _spd(rng, n), _spd(rng, n), _anti(rng, n)
    b = (d + q) @ m
    sigma = sla.solve_continuous_lyapunov(b, 2 * d)
    np.testing.assert_allclose(sigma, np.linalg.inv(m), rtol=SOLVER_RTOL, atol=SOLVER_RTOL)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), scale=st.floats(0.0, 5.0))
def test_nonreversible_never_worse(seed: int, n: int, scale: float) -> None:
    """Theorem 3.5: σ² ≤ σ_R² for any antisymmetric Q."""
    rng = np.random.default_rng(seed)
    res = solve_fluctuation_general(_spd(rng, n), _spd(rng, n), _anti(rng, n, scale), rng.standard_normal(n))
    assert res.sigma2 <= res.sigma2_reversible * (1 + 1e-12)  # rounding of two solves
    assert 0 <= res.ratio <= 1 + 1e-12


def test_strict_condition(rng: np.random.Generator) -> None:
    """Equality iff QD⁻¹M⁻¹ℓ = 0: take ℓ = M D v with v in ker Q (Q = rotation in the first plane)."""
    n = 3
    m, d = _spd(rng, n), _spd(rng, n)
    q = np.zeros((n, n))
    q[0, 1], q[1, 0] = 2.0, -2.0
    ell = m @ d @ np.array([0.0, 0.0, 1.0])
    res = solve_fluctuation_general(m, d, q, ell)
    np.testing.assert_allclose(res.ratio, 1.0, rtol=SOLVER_RTOL)
    res2 = solve_fluctuation_general(m, d, q, m @ d @ np.array([1.0, 0.0, 0.0]))
    assert res2.ratio < 1 - 1e-3


# ------------------------------------------------------------------ the three examples

def test_nld_identity_closed_form(rng: np.random.Generator) -> None:
    """Cor. 5.5: σ² = 2wᵀ(I − J²)⁻¹w with D = I."""
    n = 4
    a, j, ell = _spd(rng, n), _anti(rng, n), rng.standard_normal(n)
    w = np.linalg.solve(a, ell)
    res = solve_fluctuation_nld(a, ell, j)
    np.testing.assert_allclose(res.sigma2, 2 * w @ np.linalg.solve(np.eye(n) - j @ j, w), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(res.sigma2_reversible, 2 * w @ w, rtol=SOLVER_RTOL)


def test_nld_with_diffusion_matches_ou(rng: np.random.Generator) -> None:
    n = 3
    a, d, j, ell = _spd(rng, n), _spd(rng, n), _anti(rng, n), rng.standard_normal(n)
    res = solve_fluctuation_nld(a, ell, j, d)
    np.testing.assert_allclose(res.sigma2, _ou_sigma2(a, d, j, ell), rtol=SOLVER_RTOL)


@pytest.mark.parametrize(("alpha", "gamma"), [(1.0, 1.0), (0.3, 4.0), (2.5, 0.2)])
def test_hfhr_scalar_factor(rng: np.random.Generator, alpha: float, gamma: float) -> None:
    n = 3
    a, ell = _spd(rng, n), rng.standard_normal(n)
    w = np.linalg.solve(a, ell)
    res = solve_fluctuation_hfhr(a, ell, alpha, gamma)
    np.testing.assert_allclose(res.ratio, alpha * gamma / (1 + alpha * gamma), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(res.sigma2, 2 * gamma / (1 + alpha * gamma) * w @ w, rtol=SOLVER_RTOL)
    np.testing.assert_allclose(res.sigma2_reversible, 2 / alpha * w @ w, rtol=SOLVER_RTOL)
    # OU route on the augmented state
    dmat, qmat = hfhr_matrices(alpha, gamma, n)
    m = sla.block_diag(a, np.eye(n))
    np.testing.assert_allclose(res.sigma2, _ou_sigma2(m, dmat, qmat, np.r_[ell, np.zeros(n)]), rtol=SOLVER_RTOL)


def test_gaul_closed_forms_and_schur_route(rng: np.random.Generator) -> None:
    n = 3
    a, ell = _spd(rng, n), rng.standard_normal(n)
    c = _spd(rng, n, shift=0.8)
    aa, gamma = 1.5, 2.0
    w = np.linalg.solve(a, ell)
    res = solve_fluctuation_gaul(a, ell, aa, gamma, c)
    s = aa * c - (c - np.eye(n)) @ (c - np.eye(n)) / (4 * gamma)
    np.testing.assert_allclose(res.sigma2, 2 * gamma / (1 + aa * gamma) * w @ np.linalg.solve(c, w), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(res.sigma2_reversible, 2 * w @ np.linalg.solve(s, w), rtol=SOLVER_RTOL)
    dmat, qmat = gaul_matrices(aa, gamma, c)
    np.testing.assert_allclose(dmat + qmat, np.block([[aa * c, -np.eye(n)], [c, gamma * np.eye(n)]]), atol=1e-15)
    s2, s2r = augmented_position_fluctuation(a, ell, dmat + qmat)
    np.testing.assert_allclose([s2, s2r], [res.sigma2, res.sigma2_reversible], rtol=SOLVER_RTOL)


def test_gaul_reduces_to_hfhr(rng: np.random.Generator) -> None:
    a, ell = _spd(rng, 2), rng.standard_normal(2)
    g = solve_fluctuation_gaul(a, ell, 0.7, 1.3, np.eye(2))
    h = solve_fluctuation_hfhr(a, ell, 0.7, 1.3)
    np.testing.assert_allclose([g.sigma2, g.sigma2_reversible, g.max_stable_step],
                               [h.sigma2, h.sigma2_reversible, h.max_stable_step], rtol=SOLVER_RTOL)


def test_schur_route_agrees_with_general_for_random_drift(rng: np.random.Generator) -> None:
    n = 3
    a, ell = _spd(rng, n), rng.standard_normal(n)
    dmat, qmat = _spd(rng, 2 * n), _anti(rng, 2 * n)
    s2, s2r = augmented_position_fluctuation(a, ell, dmat + qmat)
    res = solve_fluctuation_general(sla.block_diag(a, np.eye(n)), dmat, qmat, np.r_[ell, np.zeros(n)])
    np.testing.assert_allclose([s2, s2r], [res.sigma2, res.sigma2_reversible], rtol=SOLVER_RTOL)


# ------------------------------------------------------------------ stable step

def _rho(g: np.ndarray) -> float:
    return float(np.max(np.abs(np.linalg.eigvals(g))))


@pytest.mark.parametrize("scale", [0.0, 0.5, 3.0])
def test_max_stable_step_brackets_spectral_radius(rng: np.random.Generator, scale: float) -> None:
    n = 4
    m, d, q = _spd(rng, n), _spd(rng, n), _anti(rng, n, scale)
    eta = max_stable_step(m, d + q)
    k = (d + q) @ m
    assert _rho(np.eye(n) - 0.999 * eta * k) < 1 < _rho(np.eye(n) - 1.001 * eta * k)
    res = solve_fluctuation_general(m, d, q, np.ones(n))
    np.testing.assert_allclose(res.max_stable_step, eta, rtol=1e-14)
    # baseline: 2/λ_max(DM) (real spectrum), a different formula
    np.testing.assert_allclose(res.max_stable_step_reversible, 2 / np.max(np.linalg.eigvals(d @ m).real), rtol=SOLVER_RTOL)


def test_nonreversibility_stiffens_hfhr_step() -> None:
    """HFHR on A = I: eigenvalues of [[α,−1],[1,γ]] are complex for (α−γ)² < 4 → smaller step."""
    res = solve_fluctuation_hfhr(np.eye(2), [1.0, 0.0], 1.0, 1.0)
    # λ = 1 ± i: η_max = 2·1/2 = 1 (hand computation); baseline 2/1 = 2
    np.testing.assert_allclose([res.max_stable_step, res.max_stable_step_reversible], [1.0, 2.0], rtol=1e-14)


# ------------------------------------------------------------------ beyond the paper (§2.4)

@pytest.mark.parametrize("n", [2, 3, 5])
def test_optimal_antisymmetric_attains_bound(rng: np.random.Generator, n: int) -> None:
    a, d, ell = _spd(rng, n), _spd(rng, n), rng.standard_normal(n)
    kappa = 1.7
    opt = optimal_antisymmetric_nld(a, ell, kappa, d)
    dhi = np.linalg.inv(sla.sqrtm(d).real)
    np.testing.assert_allclose(np.linalg.norm(dhi @ opt.antisymmetric @ dhi, 2), kappa, rtol=SOLVER_RTOL)
    np.testing.assert_allclose(opt.ratio, 1 / (1 + kappa ** 2), rtol=SOLVER_RTOL)
    # independent OU route for σ²(J)
    np.testing.assert_allclose(opt.sigma2, _ou_sigma2(a, d, opt.antisymmetric, ell), rtol=SOLVER_RTOL)
    # no random J of the same budget does better
    for _ in range(50):
        jt = _anti(rng, n)
        jt *= kappa / np.linalg.norm(jt, 2)
        j = sla.sqrtm(d).real @ jt @ sla.sqrtm(d).real
        j = 0.5 * (j - j.T)
        assert solve_fluctuation_nld(a, ell, j, d).ratio >= opt.bound_ratio * (1 - 1e-10)


def test_spectral_gap_optimal_lnp(rng: np.random.Generator) -> None:
    n = 4
    a, d, ell = _spd(rng, n), _spd(rng, n), rng.standard_normal(n)
    gap = spectral_gap_optimal_nld(a, ell, d)
    lam = np.linalg.eigvals((d + gap.antisymmetric) @ a)
    mean = np.trace(d @ a) / n
    # all real parts equal tr(DA)/d (LNP 2013); eigen-solver accuracy ~1e-12 relative here
    np.testing.assert_allclose(lam.real, mean, rtol=1e-9)
    assert gap.spectral_gap > gap.spectral_gap_reversible
    np.testing.assert_allclose(gap.antisymmetric, -gap.antisymmetric.T, atol=0)
    # the gap-optimal J is not variance-optimal for a generic observable when d >= 3
    assert gap.ratio > gap.variance_optimal_ratio * (1 + 1e-3)
    np.testing.assert_allclose(gap.sigma2, _ou_sigma2(a, d, gap.antisymmetric, ell), rtol=SOLVER_RTOL)


# ------------------------------------------------------------------ finite-η prediction

def _direct_variance(m, d, q, ell, eta, k, noise_map=None):  # type: ignore[no-untyped-def]
    """Brute force: iterate S_k and sum Cov(Y_j, Y_k) = ℓᵀG^{k−j}S_jℓ directly (stationary start)."""
    n = m.shape[0]
    g = np.eye(n) - eta * (d + q) @ m
    # stationary S by fixed-point iteration of the full recursion (independent of the vec solve)
    s = np.linalg.inv(m)
    for _ in range(20000):
        extra = np.zeros((n, n)) if noise_map is None else noise_map(s)
        s_new = g @ s @ g.T + 2 * eta * d + extra
        if np.max(np.abs(s_new - s)) < 1e-16:
            break
        s = s_new
    total = 0.0
    vec = ell.copy()  # ℓᵀG^h
    for h in range(k):
        c = float(vec @ s @ ell)
        total += (k if h == 0 else 2 * (k - h)) * c
        vec = vec @ g
    return total / k ** 2


def test_predict_time_average_variance_full_gradient(rng: np.random.Generator) -> None:
    n = 2
    m, d, q, ell = _spd(rng, n, 1.0), np.eye(n), _anti(rng, n), rng.standard_normal(n)
    eta = 0.05 * max_stable_step(m, d + q)
    out = predict_time_average_variance(m, d, q, ell, eta, 300)
    np.testing.assert_allclose(out["variance"], _direct_variance(m, d, q, ell, eta, 300), rtol=1e-9)
    # the long-run variance of the linear EM chain is exactly σ²/(Kη) without minibatch noise
    np.testing.assert_allclose(out["long_run_scaled_variance"], solve_fluctuation_general(m, d, q, ell).sigma2,
                               rtol=SOLVER_RTOL)


def _blr(rng: np.random.Generator, n_rows: int = 12, p: int = 2):  # type: ignore[no-untyped-def]
    x = 0.5 * rng.standard_normal((n_rows, p))
    y = x @ np.linspace(1, -1, p) + rng.standard_normal(n_rows)
    return x, y


def test_blr_noise_cov_by_enumeration(rng: np.random.Generator) -> None:
    """C̄(xxᵀ) = ½[Cov(ĝ|x) + Cov(ĝ|−x)], each Cov enumerated over the N rows (B draws iid)."""
    x, y = _blr(rng)
    n_rows, p = x.shape
    gam = 0.5 * np.eye(p)
    s2, bsz = 2.0, 3
    prec = x.T @ x / s2 + gam
    mean = np.linalg.solve(prec, x.T @ y / s2)
    z = rng.standard_normal(p)
    covs = []
    for sign in (1, -1):
        th = mean + sign * z
        gi = n_rows * x * ((x @ th - y) / s2)[:, None] + gam @ th   # ĝ for B = 1, one value per row
        covs.append(np.cov(gi.T, bias=True) / bsz)
    np.testing.assert_allclose(blr_gradient_noise_cov(x, y, bsz, np.outer(z, z), noise_variance=s2,
                                                      prior_precision=gam),
                               0.5 * (covs[0] + covs[1]), rtol=1e-11, atol=1e-11)


def test_predict_time_average_variance_with_minibatch(rng: np.random.Generator) -> None:
    x, y = _blr(rng)
    gam = np.eye(2)
    a = x.T @ x + gam
    j = np.array([[0.0, 1.0], [-1.0, 0.0]])
    ell = np.array([1.0, -0.5])
    eta = 0.01
    out = predict_time_average_variance(a, np.eye(2), j, ell, eta, 200, design=x, response=y,
                                        batch_size=3, prior_precision=gam)
    kmat = np.eye(2) + j

    def noise(s):  # type: ignore[no-untyped-def]
        return eta ** 2 * kmat @ blr_gradient_noise_cov(x, y, 3, s, prior_precision=gam) @ kmat.T

    np.testing.assert_allclose(out["variance"], _direct_variance(a, np.eye(2), j, ell, eta, 200, noise), rtol=1e-8)


def test_scaled_variance_converges_to_sigma2(rng: np.random.Generator) -> None:
    """Kη·Var(Π_η f) → σ² as η → 0 with K = c/η² (Thm 3.2); Richardson removes the O(η) term."""
    x, y = _blr(rng)
    gam = np.eye(2)
    a = x.T @ x + gam
    j = np.array([[0.0, 1.5], [-1.5, 0.0]])
    ell = np.array([1.0, -0.5])
    sig2 = solve_fluctuation_nld(a, ell, j).sigma2
    vals = []
    for eta in (4e-3, 2e-3):
        out = predict_time_average_variance(a, np.eye(2), j, ell, eta, int(4 / eta ** 2), design=x, response=y,
                                            batch_size=3, prior_precision=gam)
        vals.append(out["scaled_variance"])
    err1, err2 = abs(vals[0] - sig2), abs(vals[1] - sig2)
    assert err2 < 0.6 * err1  # O(η): halving η roughly halves the error
    # Richardson 2f(η/2) − f(η) = σ² + O(η²): O(η²) with η = 4e-3 is ~1e-2 of the O(η) error
    assert abs(2 * vals[1] - vals[0] - sig2) < 0.1 * err1


# ------------------------------------------------------------------ batch means

def _ar1(rng: np.random.Generator, rho: float, c: int, t: int) -> np.ndarray:
    e = rng.standard_normal((c, t))
    out = np.empty((c, t))
    out[:, 0] = e[:, 0] / np.sqrt(1 - rho ** 2)
    for k in range(1, t):
        out[:, k] = rho * out[:, k - 1] + e[:, k]
    return out


@pytest.mark.mc
def test_batch_means_recovers_long_run_variance(rng: np.random.Generator) -> None:
    """AR(1), unit innovations: long-run variance 1/(1−ρ)², so σ² = η/(1−ρ)²."""
    eta, rho, rho_b = 0.1, 0.5, 0.8
    traj = _ar1(rng, rho, 16, 20000)
    base = _ar1(rng, rho_b, 16, 20000)
    est = estimate_fluctuation_from_chains(traj, eta, n_batches=20, baseline=base)
    truth, truth_b = eta / (1 - rho) ** 2, eta / (1 - rho_b) ** 2
    # batch-means bias ≈ −2ρ/((1−ρ)²·L)·LRV relative ≤ 0.8·2/(0.04·1000) = 4 % for rho_b at L = 1000;
    # add it to the Bonferroni z-band (3 z-tests)
    z = bonferroni_z(3)
    assert abs(est.sigma2 - truth) < z * est.sigma2_standard_error + 2 * rho / (1 - rho) / 1000 * truth
    assert abs(est.sigma2_baseline - truth_b) < z * est.sigma2_baseline_standard_error + 2 * rho_b / (1 - rho_b) / 1000 * truth_b
    ratio = truth / truth_b
    assert abs(est.ratio - ratio) < z * est.ratio_standard_error + 0.05 * ratio
    lo, hi = est.ratio_interval
    assert lo < est.ratio < hi


# ------------------------------------------------------------------ error paths

def test_error_diffusion_not_spd() -> None:
    with pytest.raises(NotPositiveDefiniteError, match="diffusion must be symmetric positive definite"):
        solve_fluctuation_general(np.eye(2), np.diag([1.0, -1.0]), np.zeros((2, 2)), [1.0, 0.0])


def test_error_not_antisymmetric() -> None:
    with pytest.raises(NotAntisymmetricError, match="antisymmetric must be antisymmetric"):
        solve_fluctuation_nld(np.eye(2), [1.0, 0.0], [[0.0, 1.0], [1.0, 0.0]])


def test_error_gaul_symmetric_part() -> None:
    # c = 9: need a·9 > 64/(4γ) = 16 at γ = 1 → a > 1.78
    with pytest.raises(NotPositiveDefiniteError, match="GAUL symmetric part .* take a > 1.778"):
        solve_fluctuation_gaul(np.eye(1), [1.0], 1.0, 1.0, [[9.0]])


def test_error_hessian_not_spd() -> None:
    with pytest.raises(NotPositiveDefiniteError, match="hessian must be symmetric positive definite"):
        solve_fluctuation_hfhr(-np.eye(2), [1.0, 0.0], 1.0, 1.0)


def test_error_shape() -> None:
    with pytest.raises(ShapeError, match="observable must have length D = 2"):
        solve_fluctuation_nld(np.eye(2), [1.0, 0.0, 0.0], np.zeros((2, 2)))


def test_error_alpha() -> None:
    with pytest.raises(SgtuneError, match="alpha must be > 0"):
        solve_fluctuation_hfhr(np.eye(2), [1.0, 0.0], 0.0, 1.0)


def test_error_optimal_dimension_one() -> None:
    with pytest.raises(ShapeError, match="needs dimension d >= 2"):
        optimal_antisymmetric_nld(np.eye(1), [1.0], 1.0)


def test_error_optimal_zero_observable() -> None:
    with pytest.raises(SgtuneError, match="observable must be non-zero"):
        optimal_antisymmetric_nld(np.eye(2), [0.0, 0.0], 1.0)


def test_error_optimal_plane_vector_parallel() -> None:
    with pytest.raises(SgtuneError, match="plane_vector is parallel"):
        optimal_antisymmetric_nld(np.eye(2), [1.0, 0.0], 1.0, plane_vector=[2.0, 0.0])


def test_error_gap_weights() -> None:
    with pytest.raises(SgtuneError, match="weights must be distinct"):
        spectral_gap_optimal_nld(np.eye(2), [1.0, 0.0], weights=[1.0, 1.0])


def test_error_unstable_step() -> None:
    with pytest.raises(UnstableStepSizeError, match="the largest stable step is 2"):
        predict_time_average_variance(np.eye(1), np.eye(1), np.zeros((1, 1)), [1.0], 2.5, 10)


def test_error_minibatch_second_moment_unstable(rng: np.random.Generator) -> None:
    x, y = _blr(rng)
    a = x.T @ x + np.eye(2)
    eta = 0.9 * max_stable_step(a, np.eye(2))
    with pytest.raises(UnstableStepSizeError, match="second moments of the SG chain diverge"):
        predict_time_average_variance(a, np.eye(2), np.zeros((2, 2)), [1.0, 0.0], eta, 10, design=x,
                                      response=y, batch_size=1, prior_precision=np.eye(2))


def test_error_batch_means_too_short() -> None:
    with pytest.raises(ShapeError, match="fewer than n_batches = 20"):
        estimate_fluctuation_from_chains(np.zeros((2, 10)), 0.1)


# ------------------------------------------------------------------ notebook smoke run

@pytest.mark.notebook
def test_notebook_smoke(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "fluctuation_nonreversible.py"
    env = {**os.environ, "SGTUNE_SMOKE": "1", "SGTUNE_FIGURES": str(tmp_path)}
    subprocess.run([sys.executable, str(path)], env=env, check=True, capture_output=True, timeout=HANG_GUARD_S)
