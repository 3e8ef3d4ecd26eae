"""Found by ``benchmarks/smile_sweep.py``: the anchored rule's guardrail after one large energy error.

The sweep's runs from ε₀ = 0.1, far above the anchored step, rejected 2–6× more steps than those from 0.001
(unscaled logistic regression: 12 % against 4 %, at the same final ε). Cause: the first steps' huge |ΔE| inflate
the variance EMA, the fitted Gamma's shape k = μ²/s² falls toward 0, and the Wilson–Hilferty κ quantile
(appendix F.3) falls to 0 (for κ = 0.98 at k < 0.018): the printed guardrail then rejected *every* step, θ
restored each time, until the EMAs forgot — a frozen stretch of ~log(s²)/β steps. The anchored guardrail's
threshold is now never below the fitted mean (``sgtune.sampler.smile._gamma_guardrail``).
"""

import numpy as np
from scipy.special import ndtri

from sgtune.core.config import RunSpec
from sgtune.sampler.registry import SmileOptions
from sgtune.sampler.smile import anchored_update
from sgtune.sampler.smile_ensemble import run_smile_ensemble
from sgtune.sampler.targets import make_target
from sgtune.theory.smile import wilson_hilferty_quantile
from tests.reference import ensemble_kw


def test_guardrail_does_not_reject_below_the_fitted_mean_after_a_spike():
    """EMAs after a spike: μ = 1, s² = 100 (k = 0.01). An |ΔE| of half the mean is far below the exact 0.98
    quantile (8.1 μ, scipy below); the printed Wilson–Hilferty guardrail (quantile 0) rejected it."""
    from scipy import stats

    assert stats.gamma.ppf(0.98, 0.01, scale=100.0) > 8.0 and wilson_hilferty_quantile([0.98], 0.01, 100.0)[0] == 0
    zk = float(ndtri(0.98))
    tune = np.array([1.0, 100.0, 1e6, 0.1])
    assert not anchored_update(tune, 0.5, 10, zk, 0.01, 50.0, 5e-5, 0.02, 10.0)
    tune = np.array([1.0, 100.0, 1e6, 0.1])
    assert anchored_update(tune, 20.0, 10, zk, 0.01, 50.0, 5e-5, 0.02, 10.0)  # above the exact quantile: rejected
    tune = np.array([1.0, 100.0, 1e6, 0.1])
    assert anchored_update(tune, 1.5, 10, zk, 0.01, 50.0, 5e-5, 0.02, 10.0)  # above the mean: still rejected
    # a healthy fit (k = 4) is decided exactly as printed: WH quantile 2.2 μ, above the mean and the bound
    fit_q = wilson_hilferty_quantile([0.98], 4.0, 0.25)[0]
    for x, want in ((0.99 * fit_q, False), (1.01 * fit_q, True)):
        assert anchored_update(np.array([1.0, 0.25, 1e6, 0.1]), x, 10, zk, 0.01, 50.0, 5e-5, 0.02, 10.0) == want


def test_a_start_far_above_the_anchored_step_does_not_freeze_the_chain():
    """10-d Gaussian, isotropic noise, ε* ≈ 0.14: from ε₀ = 14 the printed guardrail rejected 34 % of 5000 steps
    (≈ 1600 frozen steps after the approach); the approach itself (≈ 200 steps) plus the guardrail's 2 %
    leave well under 10 %. From ε₀ = 0.14 the rejections are the guardrail's ≈ 2 % either way."""
    t = make_target("gaussian", "isotropic")
    far = run_smile_ensemble(t, 14.0, RunSpec(5000, n_chains=4, seed=1), SmileOptions())
    near = run_smile_ensemble(t, 0.14, RunSpec(5000, n_chains=4, seed=1), SmileOptions())
    assert np.all(far.rejection_fraction < 0.10), far.rejection_fraction
    assert np.all(near.rejection_fraction < 0.04), near.rejection_fraction
    np.testing.assert_allclose(far.final_step_size, near.final_step_size, rtol=0.05)


def test_kernel_matches_twin_through_a_spike():
    """The reference backend decides the guardrail the same way (60 steps from starts 20× and 70× too large, the
    guardrail from step 2: the first steps' errors are the largest of the run, and some steps are rejected)."""
    t = make_target("gaussian", "isotropic", dim=6, seed=1)
    kw = dict(n_steps=60, n_chains=2, burn_in=20, thin=7, seed=5, tune_start=2)
    for eps0 in (3.0, 10.0):
        a = run_smile_ensemble(t, **ensemble_kw("smile", eps0, **kw))
        b = run_smile_ensemble(t, **ensemble_kw("smile", eps0, backend="python", **kw))
        assert a.rejection_fraction.max() > 0
        np.testing.assert_array_equal(a.rejection_fraction, b.rejection_fraction)
        np.testing.assert_allclose(a.final_step_size, b.final_step_size, rtol=1e-9)
        np.testing.assert_allclose(a.final_state, b.final_state, rtol=1e-8, atol=1e-8)
