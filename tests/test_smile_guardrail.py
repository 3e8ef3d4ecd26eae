"""The anchored SMILE tuner's guardrail floor (``SmileOptions(guardrail_floor=k)``, issue 36).

The guardrail (the SMILE paper's eq. 6) rejects a step whose |ΔE| exceeds the κ quantile of the Gamma fitted to
the chain's own |ΔE|; with a floor k it rejects only if |ΔE| also exceeds k √(d v*). The independent route is the
guardrail as printed (k = 0, already tested against the paper's rule in ``tests/test_smile_tuner.py``) and the
threshold k √(d v*) computed here: the decision is their conjunction, and nothing else changes.
"""
import math

import numpy as np
import pytest
from scipy.special import ndtri

from sgtune.core.errors import SgtuneError
from sgtune.sampler.registry import SmileOptions
from sgtune.sampler.smile import anchored_update


@pytest.mark.parametrize("floor, overruled", [(0.5, False), (10.0, True), (math.inf, True)])
def test_the_floor_rejects_only_above_both_thresholds_and_changes_nothing_else(floor, overruled):
    """k √(d v*) below the Gamma quantile (k = 0.5): the printed decisions; above it (k = 10): some printed
    rejections are overruled; k = inf: none is left. The EMAs and ε are the printed guardrail's either way."""
    zk = float(ndtri(0.98))
    rng = np.random.default_rng(5)
    d, v, g, clip, beta = 10, 5e-4, 0.02, 10.0, 0.01
    scale = math.sqrt(d * v)  # 0.0707: the draws below straddle both thresholds
    ours, ref = np.array([0.0, 0.0, 0.0, 0.3]), np.array([0.0, 0.0, 0.0, 0.3])
    kept = printed = 0
    for _ in range(3000):
        x = float(rng.gamma(2.0, 0.05)) * (10.0 if rng.random() < 0.05 else 1.0)
        rej = anchored_update(ours, x, d, zk, beta, 10.0, v, g, clip, 0.0, floor)
        rej_printed = anchored_update(ref, x, d, zk, beta, 10.0, v, g, clip, 0.0, 0.0)
        assert rej == (rej_printed and x > floor * scale)
        kept += rej_printed and not rej
        printed += rej_printed
        assert np.array_equal(ours, ref)  # the EMAs and ε do not depend on the floor
    assert (kept > 0) == overruled
    assert not math.isinf(floor) or kept == printed
    assert anchored_update(ours, float("nan"), d, zk, beta, 10.0, v, g, clip, 0.0, floor)  # still rejected


def test_the_floor_reaches_the_compiled_settings_and_is_validated():
    assert SmileOptions().guardrail_floor == 0.0 and SmileOptions().tuner_params(1.0).floor == 0.0
    assert SmileOptions(guardrail_floor=3).tuner_params(1.0).floor == 3.0
    assert math.isinf(SmileOptions(guardrail_floor=math.inf).tuner_params(1.0).floor)
    for bad in (-1.0, math.nan):
        with pytest.raises(SgtuneError, match="guardrail_floor must be a number >= 0"):
            SmileOptions(guardrail_floor=bad)


def test_the_compiled_chain_honours_the_floor():
    """Through the compiled SMILE chain (10-d Gaussian, isotropic noise): the printed guardrail rejects ≈ 2 % of
    the steps (at least one in 2 × 3000), with the guardrail off (k = inf) none is rejected, and the floor is
    recorded in the run's settings."""
    from sgtune.core.config import RunSpec
    from sgtune.sampler.smile_ensemble import run_smile_ensemble
    from sgtune.sampler.targets import make_target

    t = make_target("gaussian", "isotropic", seed=0)
    run = RunSpec(3000, n_chains=2, seed=1)
    printed = run_smile_ensemble(t, 0.05, run, SmileOptions())
    off = run_smile_ensemble(t, 0.05, run, SmileOptions(guardrail_floor=math.inf))
    assert np.all(printed.rejection_fraction > 0) and "guardrail_floor" not in printed.settings
    assert np.all(off.rejection_fraction == 0) and math.isinf(off.settings["guardrail_floor"])


def test_the_reference_backend_honours_the_floor_like_the_kernel():
    """The public reference backend (NumPy, written apart from the kernel) and the compiled chain agree to rounding
    along 400 steps (a 6-d Gaussian, isotropic noise, anchored tuner) with the printed guardrail, a
    floor k = 0.5 and none (k = inf), as ``test_kernel_matches_twin`` of tests/test_smile_sampler.py does for the
    printed one. The printed guardrail rejects dozens of the 800 steps and k = inf none, so a backend that ignored
    the floor would not match the kernel there (a property of the rule, not of one trajectory: the counts at
    k = 0.5 are compared between the backends only)."""
    from tests.reference import ensemble_kw
    from sgtune.sampler.smile_ensemble import run_smile_ensemble
    from sgtune.sampler.targets import make_target

    t = make_target("gaussian", "isotropic", dim=6, seed=0)
    rejected = {}
    for floor in (0.0, 0.5, math.inf):
        kw = dict(n_steps=400, n_chains=2, burn_in=20, thin=7, seed=5, precond_start=30, guardrail_floor=floor)
        a = run_smile_ensemble(t, **ensemble_kw("smile", 0.05, **kw))
        b = run_smile_ensemble(t, **ensemble_kw("smile", 0.05, backend="python", **kw))
        for f in ("final_state", "sample_second_moment", "trace", "step_size_trace", "energy_trace",
                  "final_step_size"):
            np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-10, atol=1e-10)
        np.testing.assert_array_equal(a.rejection_fraction, b.rejection_fraction)
        rejected[floor] = a.rejection_fraction.sum()
    assert rejected[0.0] > 0 and rejected[math.inf] == 0
