"""Numeric RR/RM bias (sgtune.theory.reshuffle) against exact enumeration and dense linear algebra."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import linalg

from sgtune.core.errors import ShapeError, SgtuneError, UnstableStepSizeError
from sgtune.theory.reshuffle import (gaussian_reshuffle_bias, rel_err_rm, rel_err_rr_average,
                                     rel_err_rr_position, rel_err_ula, reshuffle_bias, w2_gaussian_1d)

X6 = np.array([0.3, -1.2, 2.5, 0.7, 4.1, -0.4])
# rounding tolerance of closed forms vs an O(1)-size dense computation in float64
RTOL = 1e-12


def _enumerate_epoch_cov(x: np.ndarray, b: int) -> np.ndarray:
    """Exact joint covariance of the R batch means (minus x̄) over every permutation (all ordered partitions)."""
    n = x.shape[0]
    r = n // b
    perms = np.array(list(itertools.permutations(range(n))))
    e = x[perms].reshape(len(perms), r, b).mean(axis=2) - x.mean()
    return e.T @ e / len(perms)


def _enumerate_epoch_cov_nd(x: np.ndarray, b: int) -> np.ndarray:
    """(R·d)×(R·d) covariance of the stacked batch-mean vectors over every permutation."""
    n, d = x.shape
    r = n // b
    perms = np.array(list(itertools.permutations(range(n))))
    e = x[perms].reshape(len(perms), r, b, d).mean(axis=2) - x.mean(axis=0)
    e = e.reshape(len(perms), r * d)
    return e.T @ e / len(perms)


def _periodic_from_epoch_cov(a: float, hh: float, lang: float, cov_e: np.ndarray) -> np.ndarray:
    """Periodic variances V_k from the exact batch covariance by composing the R affine steps."""
    r = cov_e.shape[0]

    def var_after(n: int, v0: float) -> float:
        w = np.array([a ** (n - 1 - j) if j < n else 0.0 for j in range(r)])
        return a ** (2 * n) * v0 + hh ** 2 * w @ cov_e @ w + lang * sum(a ** (2 * j) for j in range(n))

    v0 = var_after(r, 0.0) / (1 - a ** (2 * r))
    return np.array([var_after(kk, v0) for kk in range(r)])


def test_batch_mean_variance_and_covariance_by_enumeration() -> None:
    res = reshuffle_bias(X6, 2, 0.3)
    cov = _enumerate_epoch_cov(X6, 2)
    assert np.allclose(np.diag(cov), res.batch_mean_var, rtol=RTOL, atol=0)
    off = cov[~np.eye(3, dtype=bool)]
    assert np.allclose(off, res.batch_mean_cov_within_epoch, rtol=RTOL, atol=0)
    # Cov = −Var/(R−1), and Var = (R − 1)·s²/N (v = R − 1, not R)
    assert np.allclose(off, -cov[0, 0] / (3 - 1), rtol=RTOL)
    assert res.noise_ratio == pytest.approx(3 - 1, rel=RTOL)
    # RM without replacement: every B-subset; with replacement: every ordered B-tuple
    subs = np.array(list(itertools.combinations(range(6), 2)))
    var_wo = np.mean((X6[subs].mean(axis=1) - X6.mean()) ** 2)
    tup = np.array(list(itertools.product(range(6), repeat=2)))
    var_w = np.mean((X6[tup].mean(axis=1) - X6.mean()) ** 2)
    assert res.noise_ratio * res.target_var == pytest.approx(var_wo, rel=RTOL)
    assert res.noise_ratio_with_replacement * res.target_var == pytest.approx(var_w, rel=RTOL)


@pytest.mark.parametrize("hv", [0.05, 0.6, 1.0, 1.5, 1.95])
@pytest.mark.parametrize("sig2", [None, 0.5])
def test_rr_positions_equal_composition_with_enumerated_covariance(hv: float, sig2: float | None) -> None:
    res = reshuffle_bias(X6, 2, hv, sigma2=sig2)
    c = res.target_var
    cov_e = _enumerate_epoch_cov(X6, 2)
    want = _periodic_from_epoch_cov(1 - hv, hv, 2 * hv * c, cov_e)
    assert np.allclose(res.rr_by_position_var, want, rtol=RTOL, atol=0)
    assert res.rr_average_var == pytest.approx(want.mean(), rel=RTOL)
    # RM: stationary solution of V = a²V + h²Var(e) + 2hc; ULA: Var(e) = 0
    a = 1 - hv
    assert res.rm_var == pytest.approx((hv ** 2 * cov_e[0, 0] + 2 * hv * c) / (1 - a * a), rel=RTOL)
    assert res.ula_var == pytest.approx(2 * hv * c / (1 - a * a), rel=RTOL)


def test_rel_errors_and_w2_consistent() -> None:
    res = reshuffle_bias(X6, 3, 0.4)
    c = res.target_var
    for name in ("ula", "rm", "rm_with_replacement", "rr_average"):
        var = getattr(res, f"{name}_var")
        assert getattr(res, f"{name}_rel_err") == pytest.approx(var / c - 1, rel=RTOL)
        assert getattr(res, f"w2_{name}") == pytest.approx(abs(math.sqrt(var) - math.sqrt(c)), rel=RTOL)
    assert np.allclose(res.rr_by_position_rel_err, res.rr_by_position_var / c - 1, rtol=RTOL)
    # with σ² = s²: ε_RM = hR/(2 − h) exactly (v = R − 1)
    assert res.rm_rel_err == pytest.approx(0.4 * 2 / 1.6, rel=RTOL)


def test_batch_size_n_makes_every_scheme_ula() -> None:
    res = reshuffle_bias(X6, 6, 0.7)
    for e in (res.rm_rel_err, res.rr_average_rel_err, *res.rr_by_position_rel_err):
        assert e == pytest.approx(0.7 / 1.3, rel=RTOL)


def test_published_formulas_differ() -> None:
    """Published: v = R and average inside the square. Exact values differ (docs/corrections.md)."""
    hv, r = 0.1, 4
    x = np.arange(8.0)
    res = reshuffle_bias(x, 2, hv)
    published_rm = hv * (1 + r) / (2 - hv)
    assert res.rm_rel_err == pytest.approx(hv * r / (2 - hv), rel=RTOL)
    assert abs(res.rm_rel_err - published_rm) == pytest.approx(hv / (2 - hv), rel=RTOL)
    a = 1 - hv
    m1 = np.mean(a ** np.arange(r))
    m2 = np.mean(a ** (2 * np.arange(r)))
    Y = a ** r
    pub_avg = hv / (2 - hv) + (r / (r - 1)) * (hv * r / (2 - hv) - m2 * (1 - Y) / (1 + Y) - (1 - m1) ** 2)
    assert res.rr_average_rel_err == pytest.approx(np.mean(res.rr_by_position_rel_err), rel=RTOL)
    assert abs(pub_avg - res.rr_average_rel_err) > 1e-2 * res.rr_average_rel_err


def test_large_step_rr_can_be_worse_than_rm() -> None:
    x = np.random.default_rng(1).normal(size=12)
    small = reshuffle_bias(x, 3, 0.1)
    assert small.rr_average_rel_err < small.rm_rel_err
    big = reshuffle_bias(x, 3, 1.8)
    assert big.rr_average_rel_err > big.rm_rel_err  # RR is worse here: never claim otherwise
    assert big.rr_by_position_rel_err.max() > big.rm_rel_err


def test_functional_api_matches_dataclass() -> None:
    x = np.random.default_rng(2).normal(size=10)
    res = reshuffle_bias(x, 2, 0.3, sigma2=2.0)
    rho = res.sample_var / res.sigma2
    assert np.allclose(rel_err_rr_position(0.3, 5, rho), res.rr_by_position_rel_err, rtol=RTOL)
    assert rel_err_rr_average(0.3, 5, rho) == pytest.approx(res.rr_average_rel_err, rel=RTOL)
    assert rel_err_rm(0.3, res.noise_ratio) == pytest.approx(res.rm_rel_err, rel=RTOL)
    assert rel_err_ula(0.3) == pytest.approx(res.ula_rel_err, rel=RTOL)
    assert w2_gaussian_1d(4.0, 1.0) == pytest.approx(1.0)


# ------------------------------------------------------------------ multi-dimensional generalisation
def _lyap_periodic(M: np.ndarray, eta: float, n: int, P: np.ndarray, cov_e: np.ndarray, d: int
                   ) -> np.ndarray:
    """Per-position covariances by dense composition in the original coordinates (no eigenbasis)."""
    r = cov_e.shape[0] // d
    K = eta * n * P

    def after(m: int, C0: np.ndarray) -> np.ndarray:
        # d_m = M^m d_0 + Σ_{j<m} M^{m−1−j}(K e_j + sqrt(2η) ξ_j)
        W = np.zeros((d, r * d))
        C = np.linalg.matrix_power(M, m) @ C0 @ np.linalg.matrix_power(M, m).T
        for j in range(m):
            Mj = np.linalg.matrix_power(M, m - 1 - j)
            W[:, j * d:(j + 1) * d] = Mj @ K
            C += 2 * eta * Mj @ Mj.T
        return C + W @ cov_e @ W.T

    MR = np.linalg.matrix_power(M, r)
    C0 = linalg.solve_discrete_lyapunov(MR, after(r, np.zeros((d, d))))
    return np.stack([after(m, C0) for m in range(r)])


def test_multidim_matches_dense_composition_and_enumeration() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(6, 2)) @ np.array([[1.0, 0.4], [0.0, 0.6]])
    P = np.array([[2.0, 0.7], [0.7, 1.0]])
    eta = 0.9 / (6 * np.linalg.eigvalsh(P)[-1])
    res = gaussian_reshuffle_bias(x, P, 2, eta)
    M = np.eye(2) - eta * 6 * P
    cov_e = _enumerate_epoch_cov_nd(x, 2)
    want = _lyap_periodic(M, eta, 6, P, cov_e, 2)
    assert np.allclose(res.rr_by_position_cov, want, rtol=1e-10, atol=1e-14)  # Lyapunov solve: ~1e-14 residual
    assert np.allclose(res.rr_average_cov, want.mean(axis=0), rtol=1e-10, atol=1e-14)
    K = eta * 6 * P
    rm = linalg.solve_discrete_lyapunov(M, K @ cov_e[:2, :2] @ K.T + 2 * eta * np.eye(2))
    assert np.allclose(res.rm_cov, rm, rtol=1e-10, atol=1e-14)
    ula = linalg.solve_discrete_lyapunov(M, 2 * eta * np.eye(2))
    assert np.allclose(res.ula_cov, ula, rtol=1e-10, atol=1e-14)
    assert np.allclose(res.target_cov, np.linalg.inv(6 * P), rtol=1e-12)
    # Gaussian W2 from scipy's sqrtm
    S = res.target_cov
    Sh = linalg.sqrtm(S).real
    w2 = math.sqrt(max(np.trace(res.rm_cov + S - 2 * linalg.sqrtm(Sh @ res.rm_cov @ Sh).real), 0.0))
    assert res.w2_rm == pytest.approx(w2, rel=1e-8)  # sqrtm (Schur) accuracy ~1e-12 on a 2×2, squared-root amplifies


def test_multidim_reduces_to_1d() -> None:
    x = np.random.default_rng(6).normal(size=12)
    hv = 0.8
    one = reshuffle_bias(x, 4, hv)
    s2 = one.sigma2
    nd = gaussian_reshuffle_bias(x[:, None], [[1 / s2]], 4, hv * s2 / 12)
    assert np.allclose(nd.rr_by_position_rel_err[:, 0], one.rr_by_position_rel_err, rtol=RTOL)
    assert nd.rm_rel_err[0] == pytest.approx(one.rm_rel_err, rel=RTOL)
    assert nd.rm_with_replacement_rel_err[0] == pytest.approx(one.rm_with_replacement_rel_err, rel=RTOL)
    assert nd.ula_rel_err[0] == pytest.approx(one.ula_rel_err, rel=RTOL)
    assert nd.w2_rr_average == pytest.approx(one.w2_rr_average, rel=1e-10)


# ------------------------------------------------------------------ validation (one raises per path)
def test_step_too_large() -> None:
    with pytest.raises(UnstableStepSizeError, match=r"0 < h < 2"):
        reshuffle_bias(X6, 2, 2.0)


def test_step_not_positive() -> None:
    with pytest.raises(SgtuneError, match=r"step must be > 0"):
        reshuffle_bias(X6, 2, 0.0)


def test_batch_not_dividing() -> None:
    with pytest.raises(SgtuneError, match=r"batch_size = 4 does not divide N = 6.*divisor"):
        reshuffle_bias(X6, 4, 0.1)


def test_batch_too_large() -> None:
    with pytest.raises(SgtuneError, match=r"batch_size must be <= 6"):
        reshuffle_bias(X6, 7, 0.1)


def test_too_few_data() -> None:
    with pytest.raises(SgtuneError, match=r"at least N = 2"):
        reshuffle_bias([1.0], 1, 0.1)


def test_non_finite_data() -> None:
    with pytest.raises(SgtuneError, match=r"data contains a non-finite value"):
        reshuffle_bias([1.0, np.nan], 1, 0.1)


def test_matrix_data_rejected() -> None:
    with pytest.raises(ShapeError, match=r"data must be a vector"):
        reshuffle_bias(np.ones((4, 2)), 2, 0.1)


def test_constant_data_needs_sigma2() -> None:
    with pytest.raises(SgtuneError, match=r"pass sigma2 > 0"):
        reshuffle_bias(np.ones(4), 2, 0.1)


def test_sigma2_not_positive() -> None:
    with pytest.raises(SgtuneError, match=r"sigma2 must be > 0"):
        reshuffle_bias(X6, 2, 0.1, sigma2=-1.0)


def test_multidim_unstable_step() -> None:
    with pytest.raises(UnstableStepSizeError, match=r"use step <"):
        gaussian_reshuffle_bias(np.ones((4, 2)) + np.eye(4, 2), np.eye(2), 2, 1.0)


def test_multidim_shape_mismatch() -> None:
    with pytest.raises(ShapeError, match=r"precision must be"):
        gaussian_reshuffle_bias(np.ones((4, 2)), np.eye(3), 2, 0.01)
