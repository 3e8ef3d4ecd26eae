"""The anchored SMILE tuner's noise term (:func:`sgtune.sampler.smile.noise_update`, ``noise_work_var``,
``SmileOptions.noise_weight``): the online estimates of tr V' and tr V'² from successive gradients at one point
against their closed forms, and the fixed point of the capped rule on a Gaussian target with known noise."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sgtune.core.config import RunSpec
from sgtune.core.errors import SgtuneError
from sgtune.sampler import SmileOptions
from sgtune.sampler.smile import NOISE_RATE, NZ_LVL, NZ_N1, NZ_N2, NZ_SQ, NZ_TR, noise_keep, noise_update, noise_work_var
from sgtune.sampler.smile_ensemble import run_smile_ensemble
from sgtune.sampler.targets import make_target


def _feed(V, n, seed, grad_mean=None, reject_every=0):
    """Drive the estimator as the chain does: at each point a start gradient and an end gradient, each the
    mean plus an independent noise draw N(0, V) (one batch each); the next start is at the same point."""
    d = V.shape[0]
    rng = np.random.default_rng(seed)
    L = np.linalg.cholesky(V)
    mean = np.zeros(d) if grad_mean is None else grad_mean
    tune, hist, ip = np.zeros(10), np.zeros(4 * d), np.ones(d)
    for t in range(n):
        noise_update(tune, hist, mean + L @ rng.standard_normal(d), ip)
        noise_keep(tune, hist, mean + L @ rng.standard_normal(d), bool(reject_every and t % reject_every == 0))
    return tune


def _anisotropic(d, seed):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * np.logspace(-1, 1, d)) @ q.T * 16.0


def test_noise_estimates_match_trace_and_square_trace():
    """E|a|² = tr V and E[(a_t·a_{t−2})²] = tr V² (a the half-difference of two batches' gradients at one point),
    whatever the gradient's mean: the running means after 1000 draws (weights 1/n) against the closed forms,
    tolerance 4 standard errors of a mean of 1000 (the draws' sd from the Gaussian moments, by simulation)."""
    d = 6
    V = _anisotropic(d, 0)
    n = int(1 / NOISE_RATE)   # 1/n weights throughout: plain means
    tune = _feed(V, n + 3, seed=1, grad_mean=np.linspace(-50.0, 50.0, d))
    assert tune[NZ_N1] == n + 2 and tune[NZ_N2] == n
    rng = np.random.default_rng(2)
    L = np.linalg.cholesky(V)
    a, b = L @ rng.standard_normal((d, 20000)), L @ rng.standard_normal((d, 20000))
    sd_tr, sd_sq = np.std(np.sum(a * a, 0)), np.std(np.sum(a * b, 0) ** 2)
    assert abs(tune[NZ_TR] - np.trace(V)) < 4 * sd_tr / math.sqrt(n + 2)
    assert abs(tune[NZ_SQ] - np.trace(V @ V)) < 4 * sd_sq / math.sqrt(n)


def test_rejection_restarts_the_history():
    """A rejected step's last gradient is not at the restored θ: no draw is formed with it."""
    d = 4
    V = np.eye(d)
    tune = _feed(V, 50, seed=3, reject_every=1)       # every step rejected
    assert tune[NZ_N1] == 0 and tune[NZ_N2] == 0 and tune[NZ_LVL] == 0
    tune = _feed(V, 50, seed=3, reject_every=2)       # every other (from the first): a draw at steps 2, 4, …, 48
    assert tune[NZ_N1] == 24 and tune[NZ_N2] == 0     # and never two in a row: no pair


def test_work_is_zero_for_isotropic_noise_and_matches_the_closed_form_otherwise():
    """Isotropic noise (d tr V² = (tr V)²) does no anisotropic work: w = 0 once the means resolve it. Anisotropic
    noise: w = ε²√(2 a/d)/d² with a = d tr V² − (tr V)² less the estimate's shrink 2d·se (se the standard error of
    the mean of (a·b)² over the 2/NOISE_RATE − 1 effective draws, from the draws' sd by simulation), within
    ±3d·se in a (the mean's own error; tr V's is 25× smaller here)."""
    d, eps = 8, 0.01
    iso = _feed(16.0 * np.eye(d), 5000, seed=4)
    assert noise_work_var(iso, eps, d) == 0.0
    V = _anisotropic(d, 5)
    est = noise_work_var(_feed(V, 20000, seed=6), eps, d)
    rng = np.random.default_rng(7)
    L = np.linalg.cholesky(V)
    se = np.std(np.sum((L @ rng.standard_normal((d, 40000))) * (L @ rng.standard_normal((d, 40000))), 0) ** 2)
    se /= math.sqrt(2 / NOISE_RATE - 1)
    a = d * np.trace(V @ V) - np.trace(V) ** 2 - 2 * d * se

    def w(x):
        return eps ** 2 * math.sqrt(2 * x / d) / d ** 2
    assert w(a - 3 * d * se) < est < w(a + 3 * d * se)
    assert noise_work_var(_feed(V, 2, seed=6), eps, d) == 0.0   # no pair yet


def test_noise_weight_option():
    assert SmileOptions(noise_weight=2).tuner_params(1.0).noise_weight == 2.0
    assert SmileOptions(noise_weight=0).tuner_params(1.0).noise_weight == 0.0
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(SgtuneError, match="noise_weight must be a finite number >= 0"):
            SmileOptions(noise_weight=bad)


@pytest.mark.parametrize("v_star,weight", [(5e-5, 1.0), (5e-4, 4.0)])
def test_capped_fixed_point_on_a_gaussian_with_known_noise(v_star, weight):
    """The anchored rule with the noise term settles where w(ε) = v*/weight, ε_cap = √(v* d²/(weight √(2(d tr V²
    − (tr V)²)/d))) from the closed-form V (the 10-d Gaussian with the appendix-C diagonal noise, where the energy
    error alone would hold ε ≈ 0.035, 30–90× larger, so the cap binds and ΔE²/(d v*) ≈ (ε/0.035)⁶ ≈ 0 there),
    from starts 10× below and 10× above: measured 1.07–1.10 ε_cap (the two-standard-error shrink of the estimate
    lowers w), so the band is [0.97, 1.2] ε_cap, and the two starts within 5 % of each other."""
    t = make_target("gaussian", "diagonal", seed=0)
    V, d = t.noise_cov, t.dim
    cap = math.sqrt(v_star * d * d / (weight * math.sqrt(2 * (d * np.trace(V @ V) - np.trace(V) ** 2) / d)))
    finals = []
    for e0 in (cap / 10, cap * 10):
        r = run_smile_ensemble(t, e0, RunSpec(20000, n_chains=4, thin=100, seed=1),
                               SmileOptions(energy_var_target=v_star, noise_weight=weight))
        assert np.all(r.final_step_size > 0.97 * cap) and np.all(r.final_step_size < 1.2 * cap)
        finals.append(np.median(r.final_step_size))
    assert finals[0] == pytest.approx(finals[1], rel=0.05)


@pytest.mark.parametrize("name,noise,sampler", [("gaussian", "correlated", "smile"), ("rosenbrock", "spatial", "psmile"),
                                                ("funnel", "diagonal", "smile")])
def test_kernel_matches_twin_with_the_noise_term(name, noise, sampler):
    """The kernel and the pure-Python twin (``tests/reference/smile_twin.py``) agree to rounding with the noise term
    on, at a weight that makes it hold ε (the run differs from the one without it), as ``test_smile_sampler``'s
    twin test (60 steps, 2 chains, tolerance 1e-12)."""
    from tests.reference import ensemble_kw

    t = make_target(name, noise, dim=6, seed=1)
    kw = dict(n_steps=60, n_chains=2, burn_in=20, thin=7, seed=5, precond_start=30)
    a = run_smile_ensemble(t, **ensemble_kw(sampler, 0.3, noise_weight=1e4, **kw))
    b = run_smile_ensemble(t, **ensemble_kw(sampler, 0.3, backend="python", noise_weight=1e4, **kw))
    off = run_smile_ensemble(t, **ensemble_kw(sampler, 0.3, **kw))
    assert np.all(a.final_step_size < (1 - 1e-3) * off.final_step_size)
    for f in ("final_state", "trace", "step_size_trace", "energy_trace", "final_step_size"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(a.rejection_fraction, b.rejection_fraction)
