"""theory/smile.py: Gamma moment matching, Wilson–Hilferty, EMAs, b², exact target moments (the SMILE paper (2025))."""
import math

import numpy as np
import pytest
from scipy import integrate, stats

from sgtune.core.errors import SgtuneError
from sgtune.theory.smile import (
    b2_chains,
    b2_per_coordinate,
    bootstrap_b2,
    ema_corrected,
    ema_update,
    funnel_second_moments,
    gamma_moment_match,
    gaussian_second_moments,
    normal_raw_moment,
    rosenbrock_second_moments,
    wilson_hilferty_quantile,
)
from tests._tolerances import bonferroni_z

#: the quantiles the tuner uses: a/3, 1 − 2a/3 (a = 0.1) and κ = 0.98
TUNER_P = np.array([0.1 / 3, 1 - 0.2 / 3, 0.98])


@pytest.mark.parametrize("mean,std", [(1.0, 1.0), (2.0, 0.7), (0.03, 0.05), (5.0, 40.0)])
def test_gamma_moment_match_reproduces_mean_and_std(mean, std):
    fit = gamma_moment_match(mean, std)
    g = stats.gamma(fit.shape, scale=fit.scale)
    assert g.mean() == pytest.approx(mean, rel=1e-12)
    assert g.std() == pytest.approx(std, rel=1e-12)


def test_printed_eq5_would_fail():
    """Eq. (5) as printed (shape = s²/μ, scale = (μ/s)²) keeps the mean but not the spread."""
    mean, std = 2.0, 0.7
    printed = stats.gamma(std ** 2 / mean, scale=(mean / std) ** 2)
    assert printed.mean() == pytest.approx(mean, rel=1e-12)
    assert abs(printed.std() - std) / std > 1.0  # variance μ³/s² = 16.3 instead of 0.49
    fit = gamma_moment_match(mean, std)
    q_ok = wilson_hilferty_quantile(0.98, fit.shape, fit.scale)
    assert abs(printed.ppf(0.98) - stats.gamma(fit.shape, scale=fit.scale).ppf(0.98)) > 1.0
    assert q_ok == pytest.approx(stats.gamma(fit.shape, scale=fit.scale).ppf(0.98), rel=1e-2)


# Wilson–Hilferty accuracy: the relative quantile error decays fast with the shape k. Bounds = the
# errors measured against scipy.stats.gamma.ppf, rounded up by a factor ≈ 2 (upper: max over the
# 1 − 2a/3 and κ quantiles; lower: the a/3 quantile, which WH gets badly wrong for k ≈ 1 —
# 37 % too low for the exponential law, so the tuner's step increases fire less often there).
WH_UPPER_RTOL = {1.0: 2e-2, 2.0: 8e-3, 5.0: 2.2e-3, 20.0: 3e-4, 100.0: 4e-5}
WH_LOWER_RTOL = {1.0: 0.75, 2.0: 0.11, 5.0: 1.1e-2, 20.0: 6e-4, 100.0: 3e-5}


@pytest.mark.parametrize("k", sorted(WH_UPPER_RTOL))
def test_wilson_hilferty_against_scipy(k):
    approx = wilson_hilferty_quantile(TUNER_P, k, 1.7)
    exact = stats.gamma.ppf(TUNER_P, k, scale=1.7)
    rel = np.abs(approx / exact - 1.0)
    assert rel[1:].max() < WH_UPPER_RTOL[k]
    assert rel[0] < WH_LOWER_RTOL[k]
    if k <= 20:
        assert rel[0] > rel[1:].max()  # the lower tail is the hard one (until all errors are ~1e-5)


def test_wilson_hilferty_is_the_cube_of_the_normal_approximation():
    k, th, p = 3.3, 0.4, 0.9
    z = stats.norm.ppf(p)
    assert wilson_hilferty_quantile(p, k, th) == pytest.approx(k * th * (1 - 1 / (9 * k) + z / (3 * math.sqrt(k))) ** 3,
                                                               rel=1e-14)
    # Large k: Gamma → normal; WH error vanishes
    assert wilson_hilferty_quantile(p, 1e6, 1.0) == pytest.approx(stats.gamma.ppf(p, 1e6), rel=1e-9)


def test_wilson_hilferty_clips_negative_base():
    assert wilson_hilferty_quantile(1e-6, 0.05, 1.0) == 0.0


def test_ema_constant_input_is_unbiased_after_correction():
    m = v = 0.0
    n = 0
    for _ in range(5):
        m, v, n = ema_update(m, v, n, 3.25, 0.01)
        mh, vh = ema_corrected(m, v, n, 0.01)
        assert mh == pytest.approx(3.25, rel=1e-13) and vh == pytest.approx(0.0, abs=1e-24)


def test_ema_matches_explicit_weighted_sum(rng):
    beta, xs = 0.05, rng.standard_normal(40)
    m = v = 0.0
    n = 0
    for x in xs:
        m, v, n = ema_update(m, v, n, x, beta)
    w = beta * (1 - beta) ** np.arange(len(xs))[::-1]
    assert float(m) == pytest.approx(float(w @ xs), rel=1e-12)
    mh, _ = ema_corrected(m, v, n, beta)
    assert float(mh) == pytest.approx(float(w @ xs / w.sum()), rel=1e-12)


def test_b2_formula_and_reductions():
    e, var = np.array([1.0, 2.0]), np.array([2.0, 8.0])
    m = np.array([[2.0, 2.0], [1.0, 6.0]])
    np.testing.assert_allclose(b2_per_coordinate(m, e, var), [[0.5, 0.0], [0.0, 2.0]], rtol=1e-15)
    np.testing.assert_allclose(b2_chains(m, e, var), [0.25, 1.0], rtol=1e-15)
    np.testing.assert_allclose(b2_chains(m, e, var, "max"), [0.5, 2.0], rtol=1e-15)
    with pytest.raises(SgtuneError, match="reduce must be"):
        b2_chains(m, e, var, "median")
    with pytest.raises(SgtuneError, match="true_var_of_square must be > 0"):
        b2_per_coordinate(m, e, [1.0, 0.0])


def test_bootstrap_std_matches_standard_error_of_the_mean(rng):
    """Bootstrap sd of a mean of C values → s·sqrt((C−1)/C)/sqrt(C) (plug-in); MC error of B resamples."""
    per = rng.exponential(size=10)
    nb = 20000
    est = bootstrap_b2(per, np.random.default_rng(1), n_bootstrap=nb)
    c = per.size
    exact = per.std(ddof=0) / math.sqrt(c)
    # sd of a sample sd from nb draws ≈ sd/sqrt(2 nb) (near-normal bootstrap means)
    assert abs(est.bootstrap_std - exact) < bonferroni_z(1) * exact / math.sqrt(2 * nb) * 1.5
    assert est.value == pytest.approx(per.mean(), rel=1e-15)


@pytest.mark.parametrize("n,mu,var", [(4, 1.0, 0.5), (8, 1.0, 0.5), (5, -0.3, 2.0), (0, 1.0, 1.0)])
def test_normal_raw_moment_against_scipy(n, mu, var):
    assert normal_raw_moment(n, mu, var) == pytest.approx(stats.norm(mu, math.sqrt(var)).moment(n), rel=1e-12)


def test_rosenbrock_moments_by_quadrature():
    q = 0.1
    e, v = rosenbrock_second_moments(4, q)

    def dens(y, x):
        return math.exp(-((x * x - y) ** 2 / q + (x - 1) ** 2))

    z = integrate.dblquad(dens, -6, 8, lambda x: x * x - 3, lambda x: x * x + 3, epsabs=1e-12)[0]
    mom = {}
    for name, f in {"x2": lambda y, x: x ** 2, "x4": lambda y, x: x ** 4, "y2": lambda y, x: y ** 2,
                    "y4": lambda y, x: y ** 4}.items():
        mom[name] = integrate.dblquad(lambda y, x, f=f: f(y, x) * dens(y, x), -6, 8, lambda x: x * x - 3,
                                      lambda x: x * x + 3, epsabs=1e-12)[0] / z
    np.testing.assert_allclose(e, [mom["x2"], mom["y2"]] * 2, rtol=1e-7)
    np.testing.assert_allclose(v, [mom["x4"] - mom["x2"] ** 2, mom["y4"] - mom["y2"] ** 2] * 2, rtol=1e-7)


def test_funnel_moments_by_quadrature():
    e, v = funnel_second_moments(3, 3.0)
    phi = stats.norm(0, 3).pdf
    # E[θ_i²] = E[e^{θ₁}], E[θ_i⁴] = 3 E[e^{2θ₁}]
    m2 = integrate.quad(lambda t: math.exp(t) * phi(t), -60, 60, epsabs=0, epsrel=1e-13)[0]
    m4 = integrate.quad(lambda t: 3 * math.exp(2 * t) * phi(t), -60, 80, epsabs=0, epsrel=1e-13)[0]
    np.testing.assert_allclose(e, [9.0, m2, m2], rtol=1e-9)
    np.testing.assert_allclose(v, [162.0, m4 - m2 ** 2, m4 - m2 ** 2], rtol=1e-9)


def test_gaussian_moments_by_monte_carlo(rng):
    a = rng.standard_normal((3, 3))
    cov = a @ a.T + np.eye(3)
    e, v = gaussian_second_moments(cov)
    x = rng.multivariate_normal(np.zeros(3), cov, size=400_000)
    se_e = (x ** 2).std(axis=0) / math.sqrt(len(x))
    assert np.all(np.abs((x ** 2).mean(axis=0) - e) < bonferroni_z(3) * se_e)
    np.testing.assert_allclose(v, 2 * np.diag(cov) ** 2, rtol=1e-15)


def test_input_errors_name_the_argument():
    with pytest.raises(SgtuneError, match="std must be > 0"):
        gamma_moment_match(1.0, 0.0)
    with pytest.raises(SgtuneError, match=r"p must lie in \(0, 1\)"):
        wilson_hilferty_quantile(1.0, 2.0, 1.0)
    with pytest.raises(SgtuneError, match="dim must be even"):
        rosenbrock_second_moments(5)
    with pytest.raises(SgtuneError, match="rate must lie in"):
        ema_update(0.0, 0.0, 0, 1.0, 1.5)
