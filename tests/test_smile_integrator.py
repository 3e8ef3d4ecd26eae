"""Minimal-norm MCLMC integrator (the SMILE paper (2025), appendix F.2): momentum map and energy-error order."""
import math

import numpy as np
import pytest

from sgtune.core.config import RunSpec
from sgtune.sampler.registry import SmileOptions
from sgtune.sampler.smile import MN_A1, MN_B1, MN_B2, momentum_map, position_map
from sgtune.sampler.smile_ensemble import run_smile_ensemble
from sgtune.sampler._smile_reference import logp_grad_twin, momentum_map_twin
from sgtune.sampler.targets import make_target

pytestmark = pytest.mark.portability  # re-run under a generic CPU by test_portability.py

STEPS = np.array([0.0025, 0.005, 0.01, 0.02])
#: a second-order integrator: |E_t − E_0| = O(Δt²) over a fixed time, per-step |ΔE| = O(Δt³);
#: the fitted slopes over a factor 8 of Δt are within ±0.25 of the order (measured 2.00 and 3.00)
SLOPE_TOL = 0.25


def _fit(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def test_energy_error_order_without_noise():
    t = make_target("gaussian", "none", seed=0)
    per_step, drift = [], []
    for h in STEPS:
        r = run_smile_ensemble(t, h, RunSpec(int(10 / h), n_chains=4, thin=1, seed=1), SmileOptions(tuned=False))
        per_step.append(r.mean_abs_energy_error.mean())
        drift.append(np.abs(r.energy_trace).max(axis=1).mean())
    assert abs(_fit(STEPS, drift) - 2.0) < SLOPE_TOL
    assert abs(_fit(STEPS, per_step) - 3.0) < SLOPE_TOL


def _mn_energy_drift(h, sign, n_time=5.0):
    """Max |E_t − E_0| of the P-Q-P-Q-P scheme with e = sign·∇log p/|∇log p| (Python, no noise)."""
    t = make_target("gaussian", "none", dim=4, seed=2)
    r = np.random.default_rng(0)
    th = r.standard_normal(4)
    u = r.standard_normal(4)
    u /= np.linalg.norm(u)
    z = np.zeros(4)
    lp0, g = logp_grad_twin(0, t.precision, t.q, 0.0, z, th)
    e0, worst = -lp0, 0.0
    kin = 0.0
    for _ in range(int(n_time / h)):
        for kind, coef in (("P", MN_B1), ("Q", MN_A1), ("P", MN_B2), ("Q", MN_A1), ("P", MN_B1)):
            if kind == "P":
                u, dk = momentum_map_twin(u, sign * g, coef * h)
                kin += dk
            else:
                th = th + coef * h * u
                lp, g = logp_grad_twin(0, t.precision, t.q, 0.0, z, th)
        worst = max(worst, abs(kin - lp - e0))
    return worst


def test_paper_sign_of_e_does_not_conserve_energy():
    """Appendix F.2 writes e = −∇log p/|∇log p|; with it the energy error does not vanish like Δt²."""
    right = [_mn_energy_drift(h, +1.0) for h in (0.01, 0.02)]
    wrong = [_mn_energy_drift(h, -1.0) for h in (0.01, 0.02)]
    assert abs(_fit([0.01, 0.02], right) - 2.0) < SLOPE_TOL
    assert min(wrong) > 1e3 * max(right)


def test_momentum_map_against_paper_formula(rng):
    for _ in range(20):
        d = 7
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        g = 5 * rng.standard_normal(d)
        ipre = rng.uniform(0.5, 2.0, d)
        eps = rng.uniform(0.01, 2.0)
        k1 = momentum_map(u_n := u.copy(), g, ipre, eps, d)
        u_p, k2 = momentum_map_twin(u, g * ipre, eps)
        np.testing.assert_allclose(u_n, u_p, rtol=1e-12, atol=1e-13)
        assert k1 == pytest.approx(k2, rel=1e-12, abs=1e-13)
        assert np.linalg.norm(u_n) == pytest.approx(1.0, abs=1e-14)


def test_momentum_map_from_rest_and_large_delta():
    g = np.array([3.0, 4.0, 0.0])
    u = np.zeros(3)
    momentum_map(u, g, np.ones(3), 0.7, 3)
    delta = 0.7 * 5.0 / 2
    np.testing.assert_allclose(u, math.tanh(delta) * g / 5.0, rtol=1e-14)
    v = np.array([0.0, 0.0, 1.0])
    dk = momentum_map(v, g, np.ones(3), 1e4, 3)  # δ = 2.5e4: cosh overflows, the stable form does not
    assert np.all(np.isfinite(v)) and math.isfinite(dk)
    np.testing.assert_allclose(v, g / 5.0, atol=1e-12)


def test_position_map_uses_inverse_preconditioner():
    th = np.array([1.0, 2.0])
    position_map(th, np.array([0.6, 0.8]), np.array([2.0, 0.5]), 0.5)
    np.testing.assert_allclose(th, [1.6, 2.2], rtol=1e-15)
