"""sampler/targets.py: appendix-C targets (gradients, noise covariances, construction)."""
import math

import numpy as np
import pytest

from sgtune.core.errors import SgtuneError
from sgtune.sampler.targets import NOISE_KINDS, make_target, noise_vector, noisy_logp_grad, target_logp_grad
from sgtune.sampler._smile_reference import logp_grad_twin
from tests._tolerances import bonferroni_z

#: central differences with step 1e-6 on O(1)–O(100) log densities: truncation ~h²·f''' and
#: cancellation ~eps·|f|/h give ≈1e-8 relative error
FD_RTOL = 1e-6


@pytest.mark.parametrize("name", ["gaussian", "rosenbrock", "funnel"])
def test_gradient_matches_finite_differences(name, rng):
    t = make_target(name, "none", dim=6, seed=4)
    for _ in range(3):
        th = t.start + 0.5 * rng.standard_normal(6)
        g = np.empty(6)
        lp = target_logp_grad(t.target_id, t.precision, t.q, th, g)
        fd = np.empty(6)
        for i in range(6):
            e = np.zeros(6)
            e[i] = 1e-6
            fd[i] = (target_logp_grad(t.target_id, t.precision, t.q, th + e, np.empty(6))
                     - target_logp_grad(t.target_id, t.precision, t.q, th - e, np.empty(6))) / 2e-6
        np.testing.assert_allclose(g, fd, rtol=FD_RTOL, atol=FD_RTOL * np.abs(g).max())
        # the independent twin (vector expressions) agrees to rounding
        lp2, g2 = logp_grad_twin(t.target_id, t.precision, t.q, 0.0, np.zeros(6), th)
        assert lp == pytest.approx(lp2, rel=1e-12)
        np.testing.assert_allclose(g, g2, rtol=1e-12, atol=1e-12)


def test_log_densities_are_the_paper_formulas():
    th = np.array([0.3, -1.2, 0.7, 2.0])
    ros = make_target("rosenbrock", "none", dim=4)
    want = -((0.09 + 1.2) ** 2 / 0.1 + 0.49 + (0.49 - 2.0) ** 2 / 0.1 + 0.09)
    assert target_logp_grad(1, ros.precision, 0.1, th, np.empty(4)) == pytest.approx(want, rel=1e-14)
    fun = make_target("funnel", "none", dim=4)
    want = -0.09 / 18 - (1.44 + 0.49 + 4.0) * math.exp(-0.3) / 2 - 1.5 * 0.3
    assert target_logp_grad(2, fun.precision, 0.1, th, np.empty(4)) == pytest.approx(want, rel=1e-14)


def test_gaussian_covariance_spectrum():
    t = make_target("gaussian", "none", dim=10, seed=3)
    cov = np.linalg.inv(t.precision)
    np.testing.assert_allclose(np.linalg.eigvalsh(cov), np.logspace(-2, 2, 10), rtol=1e-10)
    np.testing.assert_allclose(np.diag(cov), t.second_moment, rtol=1e-10)
    assert not np.allclose(cov, np.diag(np.diag(cov)))  # rotated


@pytest.mark.parametrize("noise", ["isotropic", "diagonal", "correlated"])
def test_noise_covariance(noise):
    t = make_target("gaussian", noise, dim=10, seed=3)
    np.testing.assert_allclose(t.noise_chol @ t.noise_chol.T, t.noise_cov, rtol=1e-12, atol=1e-9)
    lam = 256 * np.logspace(-2, 2, 10)
    ev = np.linalg.eigvalsh(t.noise_cov)
    if noise == "isotropic":
        np.testing.assert_allclose(t.noise_cov, 256 * np.eye(10))
    else:
        np.testing.assert_allclose(ev, lam, rtol=1e-10)
    if noise == "diagonal":
        np.testing.assert_allclose(t.noise_cov, np.diag(lam))
    if noise == "correlated":
        assert not np.allclose(t.noise_cov, np.diag(np.diag(t.noise_cov)))


def test_injected_noise_has_covariance_V_by_monte_carlo(rng):
    """ε = ∇log p_noise − ∇log p over many draws: sample covariance vs V (Bonferroni z on the diagonal)."""
    t = make_target("rosenbrock", "correlated", dim=4, seed=2)
    th = t.start.copy()
    g0 = np.empty(4)
    target_logp_grad(t.target_id, t.precision, t.q, th, g0)
    n = 20000
    eps = np.empty((n, 4))
    w = np.empty(4)
    g = np.empty(4)
    for k in range(n):
        noise_vector(t.noise_chol, rng.standard_normal(4), w)
        noisy_logp_grad(t.target_id, t.precision, t.q, t.spatial_sd, w, th, g)
        eps[k] = g - g0
    var = eps.var(axis=0)
    se = np.diag(t.noise_cov) * math.sqrt(2 / n)
    assert np.all(np.abs(var - np.diag(t.noise_cov)) < bonferroni_z(4) * se)


def test_spatial_noise_scales_with_theta2():
    t = make_target("gaussian", "spatial", dim=4, seed=1)
    assert t.spatial_sd == pytest.approx(math.sqrt(np.linalg.inv(t.precision)[1, 1]), rel=1e-12)
    w = np.array([1.0, -2.0, 0.5, 3.0])
    g0, g1 = np.empty(4), np.empty(4)
    th = np.array([0.1, 0.0, 0.2, -0.3])
    th2 = th.copy()
    th2[1] = 1.5
    lp = noisy_logp_grad(0, t.precision, t.q, t.spatial_sd, w, th, g0)
    target_logp_grad(0, t.precision, t.q, th, g1)
    np.testing.assert_allclose(g0 - g1, w, rtol=1e-14)  # θ₂ = 0: factor 1
    assert lp == pytest.approx(target_logp_grad(0, t.precision, t.q, th, np.empty(4)) + w @ th, rel=1e-14)
    noisy_logp_grad(0, t.precision, t.q, t.spatial_sd, w, th2, g0)
    target_logp_grad(0, t.precision, t.q, th2, g1)
    # covariance × exp(−θ₂/σ₂) ⇒ noise × exp(−θ₂/(2σ₂))
    np.testing.assert_allclose(g0 - g1, w * math.exp(-0.75 / t.spatial_sd), rtol=1e-12)


def test_start_is_the_posterior_mean_and_all_noises_build():
    assert np.allclose(make_target("rosenbrock").start[:2], [1.0, 1.5])
    for noise in NOISE_KINDS:
        for name in ("gaussian", "rosenbrock", "funnel"):
            t = make_target(name, noise)
            assert t.dim == 10 and t.reduce == ("max" if name == "funnel" else "mean")


def test_make_target_errors():
    with pytest.raises(SgtuneError, match="target must be one of"):
        make_target("banana")
    with pytest.raises(SgtuneError, match="noise must be one of"):
        make_target("gaussian", "pink")
    with pytest.raises(SgtuneError, match="dim must be even"):
        make_target("rosenbrock", dim=5)
    with pytest.raises(SgtuneError, match="q must be"):
        make_target("rosenbrock", q=-1.0)
