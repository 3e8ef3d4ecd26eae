"""The answer does not depend on the units of θ: MAP fit and tuning in equilibrated coordinates.

Longley's data and certified values: NIST Statistical Reference Datasets (StRD), linear regression,
"Longley" (higher difficulty), https://www.itl.nist.gov/div898/strd/lls/data/Longley.shtml — J. W. Longley
(1967), "An appraisal of least squares programs for the electronic computer from the point of view of the
user", JASA 62, 819–841. y = total employment; x1 … x6 = GNP deflator, GNP, unemployed, armed forces,
population, year; the model has an intercept (7 coefficients).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.core.errors import AccuracyWarning
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.theory.stationary import predict_stationary_cov
from sgtune.theory.tuning import ROUNDING_LEVEL_SPREAD, spread_in_rounding_units, target_covariance, tune

from _tolerances import NIST_LONGLEY_RTOL, UNITS_RTOL

LONGLEY = np.array([
    [60323, 83.0, 234289, 2356, 1590, 107608, 1947], [61122, 88.5, 259426, 2325, 1456, 108632, 1948],
    [60171, 88.2, 258054, 3682, 1616, 109773, 1949], [61187, 89.5, 284599, 3351, 1650, 110929, 1950],
    [63221, 96.2, 328975, 2099, 3099, 112075, 1951], [63639, 98.1, 346999, 1932, 3594, 113270, 1952],
    [64989, 99.0, 365385, 1870, 3547, 115094, 1953], [63761, 100.0, 363112, 3578, 3350, 116219, 1954],
    [66019, 101.2, 397469, 2904, 3048, 117388, 1955], [67857, 104.6, 419180, 2822, 2857, 118734, 1956],
    [68169, 108.4, 442769, 2936, 2798, 120445, 1957], [66513, 110.8, 444546, 4681, 2637, 121950, 1958],
    [68655, 112.6, 482704, 3813, 2552, 123366, 1959], [69564, 114.2, 502601, 3931, 2514, 125368, 1960],
    [69331, 115.7, 518173, 4806, 2572, 127852, 1961], [70551, 116.9, 554894, 4007, 2827, 130081, 1962]],
    dtype=float)
#: NIST's certified coefficients (intercept first) and their certified standard deviations
CERTIFIED = np.array([-3482258.63459582, 15.0618722713733, -0.358191792925910e-1, -2.02022980381683,
                      -1.03322686717359, -0.511041056535807e-1, 1829.15146461355])
CERTIFIED_SD = np.array([890420.383607373, 84.9149257747669, 0.334910077722432e-1, 0.488399681651699,
                         0.214274163161675, 0.226073200069370, 455.478499142212])
CERTIFIED_RESIDUAL_SD = 304.854073561965


def _longley(standardised: bool = False):
    y, x = LONGLEY[:, 0], LONGLEY[:, 1:]
    if standardised:
        y = (y - y.mean()) / y.std(ddof=1)
        x = (x - x.mean(axis=0)) / x.std(axis=0, ddof=1)
    return make_dataset(np.column_stack([np.ones(len(y)), x]), y)


def _change_of_variables() -> np.ndarray:
    """A with X_standardised = X_raw A (both with the intercept column first)."""
    x = LONGLEY[:, 1:]
    m, s = x.mean(axis=0), x.std(axis=0, ddof=1)
    A = np.eye(7)
    A[1:, 1:] = np.diag(1 / s)
    A[0, 1:] = -m / s
    return A


def test_longley_meets_nist_certified_values():
    e = expand(get_model("linear"), _longley())
    np.testing.assert_allclose(e.theta_hat, CERTIFIED, rtol=NIST_LONGLEY_RTOL)
    n, d = 16, 7
    s2 = e.residual_variance  # σ̂² = Σr²/(N − D)
    np.testing.assert_allclose(np.sqrt(s2), CERTIFIED_RESIDUAL_SD, rtol=NIST_LONGLEY_RTOL)
    # the classical OLS covariance σ̂²(XᵀX)⁻¹ = σ̂² H⁻¹/N (σ² = 1): in the whitened coordinates of the expansion
    T = e.whitening()
    assert T is not None  # κ(H) = 2.4e19: far beyond a solve in the raw units
    ew = e.in_coordinates(T)
    cov = T @ np.linalg.inv(ew.hessian) @ T.T * s2 / n
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), CERTIFIED_SD, rtol=NIST_LONGLEY_RTOL * 10)
    assert d == e.dim


@pytest.mark.parametrize("batch_size, momentum", [(4, 0.0), (16, 0.0), (4, 0.5)])
def test_raw_and_standardised_longley_give_the_same_lambda(batch_size, momentum):
    """Λ_raw = A Λ_std Aᵀ, Σ_raw = s_y² A Σ_std Aᵀ (SGD: Λ does not depend on the response's units)."""
    A = _change_of_variables()
    sy = LONGLEY[:, 0].std(ddof=1)
    raw = tune(expand(get_model("linear"), _longley()), Dynamics(None, batch_size, momentum=momentum))
    std = tune(expand(get_model("linear"), _longley(True)), Dynamics(None, batch_size, momentum=momentum))
    Ai = np.linalg.inv(A)

    def rel(a, b):
        return np.linalg.norm(a - b) / np.linalg.norm(b)

    assert rel(Ai @ raw.step_matrix @ Ai.T, std.step_matrix) < UNITS_RTOL
    assert rel(Ai @ raw.predicted_cov @ Ai.T / sy**2, std.predicted_cov) < UNITS_RTOL
    assert raw.tau_worst == pytest.approx(std.tau_worst, rel=UNITS_RTOL)
    assert raw.spectral_radius == pytest.approx(std.spectral_radius, rel=UNITS_RTOL)
    assert raw.covariance_error < UNITS_RTOL
    # the forward prediction for a Λ of our choosing, in both unit systems
    fwd_raw = predict_stationary_cov(expand(get_model("linear"), _longley()),
                                     Dynamics(0.5 * raw.step_matrix, batch_size, momentum=momentum))
    fwd_std = predict_stationary_cov(expand(get_model("linear"), _longley(True)),
                                     Dynamics(0.5 * std.step_matrix, batch_size, momentum=momentum))
    assert rel(Ai @ fwd_raw.cov @ Ai.T / sy**2, fwd_std.cov) < UNITS_RTOL
    assert fwd_raw.tau_worst == pytest.approx(fwd_std.tau_worst, rel=UNITS_RTOL)


def test_well_scaled_problems_are_not_whitened():
    """The bundled examples (κ(H) < 2) keep the solves in θ's own units: their numbers are unchanged."""
    for name, model in (("hetero-linear", "linear"), ("logistic", "logistic"), ("poisson", "poisson")):
        assert expand(get_model(model), example(name)).whitening() is None


def test_response_near_1e9_fits():
    rng = np.random.default_rng(1)
    X = np.column_stack([np.ones(200), rng.standard_normal((200, 3))])
    y = X @ np.array([1e9, 1e8, 2e8, 3e8]) + 1e7 * rng.standard_normal(200)
    e = expand(get_model("linear"), make_dataset(X, y))
    np.testing.assert_allclose(e.theta_hat, np.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-12)


def _noise_free(n, d, scale, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return make_dataset(X, X @ (scale * rng.standard_normal(d)))


@pytest.mark.parametrize("n,d,scale", [(50, 5, 1e6), (200, 4, 1e-6), (2000, 10, 1.0)])
def test_noise_free_target_warns(n, d, scale):
    e = expand(get_model("linear"), _noise_free(n, d, scale, 0))
    S = target_covariance(e, "sandwich")
    assert spread_in_rounding_units(e, S) < ROUNDING_LEVEL_SPREAD
    with pytest.warns(AccuracyWarning, match="zero up to rounding"):
        try:
            tune(e, Dynamics(None, 4))
        except Exception:  # a sandwich that is exactly zero is then refused as not positive definite
            pass


def test_a_tiny_but_real_noise_does_not_warn():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((100, 3))
    y = X @ np.array([1.0, 2.0, 3.0]) + 1e-7 * rng.standard_normal(100)
    e = expand(get_model("linear"), make_dataset(X, y))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        tune(e, Dynamics(None, 4))
