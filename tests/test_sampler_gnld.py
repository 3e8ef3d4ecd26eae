"""SG Euler–Maruyama GNLD chains (sgtune.sampler.gnld, on the chain engine) against the reference and theory.

Monte Carlo oracles:
- exact finite-η variance of the time average (``predict_time_average_variance``: closed-form
  second moments of the linear SG recursion, itself checked by brute force in
  test_fluctuation.py); chains start from N(0, S_η) so the formula is exact for every η, K;
- the small-stepsize constant σ² (Thm 3.2) with the O(η) allowance |Kη·V_η − σ²|.
z-scores use the MCSE of the mean of squared time averages; threshold Bonferroni over all
z-tests of a test (tests/_tolerances.py, α = 1e-3).
"""
from __future__ import annotations

import numpy as np
import pytest

from sgtune.core.errors import SgtuneError, ShapeError
from sgtune.sampler import engine
from sgtune.sampler.gnld import GnldProblem, run_sg_gnld
from sgtune.theory.fluctuation import (
    blr_gradient_noise_moments,
    gaul_matrices,
    hfhr_matrices,
    predict_time_average_variance,
    solve_fluctuation_general,
)
from tests._tolerances import bonferroni_z
from sgtune.sampler.reference import ReferenceBackend

# Not re-run under a generic CPU (test_portability.py): the GNLD recursion on a Bayesian linear regression (or a
# quadratic) is an affine, contracting map of the state driven by the
# same random stream on every CPU: other rounding moves the chain by rounding only (it does not grow), so it
# cannot change a result (the module docstring of test_portability.py).


_PROBLEM_KEYS = ("hessian", "design", "response", "noise_variance", "prior_precision")


def _gnld(d, q, ell, eta, k, r, **kw):  # type: ignore[no-untyped-def]
    """run_sg_gnld on GnldProblem(d, q, ℓ, <the problem's keywords>) with the run's keywords."""
    problem = GnldProblem(d, q, ell, **{key: kw.pop(key) for key in _PROBLEM_KEYS if key in kw})
    return run_sg_gnld(problem, eta, k, r, **kw)


def _problem(seed: int = 3):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    x = 0.5 * rng.standard_normal((12, 2))
    y = x @ np.array([1.0, -1.0]) + rng.standard_normal(12)
    return x, y, np.eye(2)


def _schemes():  # type: ignore[no-untyped-def]
    """(name, D, Q, ℓ) on the full state, for NLD, HFHR, GAUL; baselines take Q = 0."""
    ell = np.array([1.0, -0.5])
    d_h, q_h = hfhr_matrices(1.0, 1.0, 2)
    d_g, q_g = gaul_matrices(1.0, 2.0, np.diag([1.5, 0.8]))
    pad = np.r_[ell, 0.0, 0.0]
    return [("nld", np.eye(2), np.array([[0.0, 1.5], [-1.5, 0.0]]), ell),
            ("hfhr", d_h, q_h, pad), ("gaul", d_g, q_g, pad)]


def _configs():  # type: ignore[no-untyped-def]
    out = []
    for name, d, q, ell in _schemes():
        out.append((name, d, q, ell))
        out.append((name + "-baseline", d, np.zeros_like(q), ell))
    return out


def test_twin_agreement() -> None:
    x, y, gam = _problem()
    for name, d, q, ell in _schemes():
        kw = dict(design=x, response=y, batch_size=3, prior_precision=gam, seed=11)
        init = np.linspace(-0.3, 0.4, 3 * len(ell)).reshape(3, len(ell))
        a = _gnld(d, q, ell, 0.03, 60, 3, init=init, **kw)
        b = _gnld(d, q, ell, 0.03, 60, 3, init=init, backend=ReferenceBackend(), **kw)
        # same draws, arithmetic in another order: agreement to rounding (1e-12 absolute on O(1) values)
        np.testing.assert_allclose(a.time_averages, b.time_averages, rtol=0, atol=1e-12, err_msg=name)


def test_reproducible_and_one_signature() -> None:
    x, y, gam = _problem()
    name, d, q, ell = _schemes()[0]
    kw = dict(design=x, response=y, batch_size=3, prior_precision=gam)
    a = _gnld(d, q, ell, 0.03, 200, 16, seed=5, **kw)
    b = _gnld(d, q, ell, 0.03, 200, 16, seed=5, **kw)
    c = _gnld(d, q, ell, 0.03, 200, 16, seed=6, **kw)
    np.testing.assert_array_equal(a.time_averages, b.time_averages)
    assert not np.array_equal(a.time_averages, c.time_averages)
    # one stream per replica (SeedSequence child i): the first 8 replicas do not depend on R
    e = _gnld(d, q, ell, 0.03, 200, 8, seed=5, **kw)
    np.testing.assert_array_equal(e.time_averages, a.time_averages[:8])
    _gnld(*_schemes()[1][1:], 0.03, 10, 2, seed=1, **kw)  # another state dimension, same types
    gnld = [sig for sig in engine._chains.signatures if "gnld_grad" in str(sig[0])]
    assert len(gnld) == 1, gnld


def test_exact_gradient_without_data() -> None:
    """batch_size = 0, no data: OU-type chain on H = ½zᵀMz; compare with the exact variance."""
    m = np.array([[2.0, 0.3], [0.3, 1.0]])
    q = np.array([[0.0, 1.0], [-1.0, 0.0]])
    ell = np.array([1.0, 1.0])
    eta, k, r = 0.05, 400, 2000
    pred = predict_time_average_variance(m, np.eye(2), q, ell, eta, k)
    init = np.random.default_rng(0).multivariate_normal(np.zeros(2), pred["stationary_cov"], size=r)
    run = _gnld(np.eye(2), q, ell, eta, k, r, hessian=m, init=init, seed=2)
    sq = run.time_averages ** 2
    z = (sq.mean() - pred["variance"]) / (sq.std(ddof=1) / np.sqrt(r))
    assert abs(z) < bonferroni_z(1)


def _mc_against_exact(eta: float, k: int, r: int, seed: int) -> list[tuple[str, float, float, float]]:
    x, y, gam = _problem()
    rows = []
    rng = np.random.default_rng(seed)
    for i, (name, d, q, ell) in enumerate(_configs()):
        n = len(ell)
        m = np.eye(n)
        m[:2, :2] = blr_gradient_noise_moments(x, y, 3, prior_precision=gam)["precision"]
        pred = predict_time_average_variance(m, d, q, ell, eta, k, design=x, response=y, batch_size=3,
                                             prior_precision=gam)
        init = rng.multivariate_normal(np.zeros(n), pred["stationary_cov"], size=r)
        run = _gnld(d, q, ell, eta, k, r, design=x, response=y, batch_size=3, prior_precision=gam,
                          init=init, seed=seed + i)
        sq = run.time_averages ** 2
        se = sq.std(ddof=1) / np.sqrt(r)
        sig2 = solve_fluctuation_general(m, d, q, ell).sigma2
        rows.append((name, (sq.mean() - pred["variance"]) / se, k * eta * sq.mean(), sig2,
                     k * eta * pred["variance"], k * eta * se))
    return rows  # type: ignore[return-value]


@pytest.mark.mc
def test_time_average_variance_matches_exact_prediction() -> None:
    """Fast: 6 schemes × 1000 replicas, η = 0.04, K = 1000; z-scores vs the exact finite-η variance."""
    rows = _mc_against_exact(0.04, 1000, 1000, seed=100)
    zmax = bonferroni_z(len(rows))
    for name, z, *_ in rows:
        assert abs(z) < zmax, f"{name}: z = {z:.2f}"


@pytest.mark.mc
def test_rmse_approaches_sqrt_sigma2() -> None:
    """Fast: η^{-1/2}·RMSE vs sqrt(σ²), K = 3/η², within MC error + the O(η) allowance |Kη·V_η − σ²|.

    The allowance is the exact finite-η bias (minibatch O(η) term and finite-K term); the test
    also requires it to be at most 30 % of σ² (measured 6–24 % at η = 0.025), so agreement is
    not vacuous. Compared on the σ² scale (Kη·MSE), equivalent to η^{-1/2}·RMSE vs sqrt(σ²).
    """
    eta = 0.025
    rows = _mc_against_exact(eta, int(3 / eta ** 2), 300, seed=200)
    zmax = bonferroni_z(len(rows))
    for name, _, scaled_mse, sig2, scaled_pred, scaled_se in rows:
        allowance = abs(scaled_pred - sig2)
        assert allowance < 0.30 * sig2, f"{name}: allowance {allowance:.3g} vs sigma2 {sig2:.3g}"
        assert abs(scaled_mse - sig2) < zmax * scaled_se + allowance, name
    # non-reversible RMSE below its baseline, for each pair
    for a, b in zip(rows[::2], rows[1::2]):
        assert a[2] < b[2], (a[0], b[0])


@pytest.mark.slow
@pytest.mark.mc
def test_rmse_approaches_sqrt_sigma2_slow() -> None:
    """Slow: smaller η (allowance ≤ 15 %) and more replicas."""
    eta = 0.005
    rows = _mc_against_exact(eta, int(2 / eta ** 2), 1000, seed=300)
    zmax = bonferroni_z(2 * len(rows))
    for name, z, scaled_mse, sig2, scaled_pred, scaled_se in rows:
        allowance = abs(scaled_pred - sig2)
        assert allowance < 0.15 * sig2, name
        assert abs(z) < zmax, f"{name}: z = {z:.2f}"
        assert abs(scaled_mse - sig2) < zmax * scaled_se + allowance, name


def test_error_hessian_mismatch() -> None:
    x, y, gam = _problem()
    with pytest.raises(ShapeError, match=r"hessian\[:p, :p\] must equal the BLR posterior precision"):
        _gnld(np.eye(2), np.zeros((2, 2)), [1.0, 0.0], 0.01, 10, 2, hessian=np.eye(2), design=x,
                    response=y, batch_size=2, prior_precision=gam)


def test_error_missing_hessian() -> None:
    with pytest.raises(SgtuneError, match="hessian is required when no design"):
        _gnld(np.eye(2), np.zeros((2, 2)), [1.0, 0.0], 0.01, 10, 2)


def test_error_batch_size_with_data() -> None:
    x, y, gam = _problem()
    with pytest.raises(SgtuneError, match="batch_size must be >= 1 when design is given"):
        _gnld(np.eye(2), np.zeros((2, 2)), [1.0, 0.0], 0.01, 10, 2, design=x, response=y)


def test_error_init_shape() -> None:
    with pytest.raises(ShapeError, match=r"init must be \(n_replicas, n\) = \(2, 2\)"):
        _gnld(np.eye(2), np.zeros((2, 2)), [1.0, 0.0], 0.01, 10, 2, hessian=np.eye(2), init=np.zeros((3, 2)))


def test_the_form_of_0_1_is_a_type_error_naming_gnld_problem() -> None:
    with pytest.raises(TypeError, match=r"removed in 0.2.0: use run_sg_gnld\(GnldProblem\(") as info:
        run_sg_gnld(np.eye(2), np.zeros((2, 2)), [1.0, 0.0], 0.01, 10, 2, hessian=np.eye(2))
    assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match="GnldProblem"):
        run_sg_gnld(np.eye(2), 0.01, 10, 2)
