"""Issue 11 item 5: the noise-anisotropy theory vs what pSMILE's EMA preconditioner converges to.

``theory.minibatch.noise_anisotropy`` predicts, at θ̂, the covariance V of the minibatch estimate of
∇log p(θ|𝒟) (log-density scale: (N/B)Σ_{i∈𝔅}∇log p_i = −N·G_t, with G_t the minibatch mean-loss
gradient; the prior term is the same for every batch and drops out of V), pSMILE's ideal diagonal
preconditioner p* = √D σ/‖σ‖ (σ_j = √V_jj) and the residual anisotropy κ(P*⁻¹VP*⁻¹).
``run_chains(..., sampler="psmile-naive")`` returns the chains' final EMA standard deviation σ̂ of
the minibatch ∇log p_β (β = N: the same scale) and p = √D σ̂/‖σ̂‖. Near θ̂ (small ε, started at θ̂)
σ̂_j should match √V_jj(θ̂) coordinate by coordinate, and p the ideal p*.

Tolerance (derived, not tuned): the EMA (rate α) of X_t = (g_t − ḡ)² over independent minibatches
has relative variance α/(2 − α)·Var(X)/σ⁴ = α/(2 − α)·(2 + κ_j/B), κ_j the excess kurtosis of the
per-sample gradients (the minibatch mean of B draws has excess kurtosis κ_j/B), so σ̂_j has relative
sd ½√(α/(2−α)·(2 + κ_j/B)) ≈ 0.05 for α = 0.01 (~200 effective draws), divided by √C for the mean
over C independent chains; bonferroni_z over the D coordinates. The EMA's deviation uses the mean
already updated with g_t: E σ̂² = (1 − α)²·2/(2 − α)·σ² (−0.75 % in σ at α = 0.01), applied to the
prediction. The chain's drift around θ̂ adds the variation of the full gradient along the path and
of V(θ) along it; both are measured on the chains' trace and added to the tolerance.
"""
import math

import numpy as np
import pytest

from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler.registry import SmileOptions
from sgtune.io.data import make_dataset
from sgtune.core.errors import SgtuneError
from sgtune.models import fit_map, get_model
from sgtune.sampler import run_chains
from sgtune.theory.minibatch import noise_anisotropy, residual_anisotropy

from _tolerances import bonferroni_z

pytestmark = pytest.mark.portability  # re-run under a generic CPU by test_portability.py

ALPHA = 0.01  # pSMILE's EMA rate (run_chains' precond_rate default, the SMILE paper (2025) §3.2)


# ----------------------------------------------------------------------------- residual_anisotropy
def _equicorrelated(d, rho, scales):
    R = (1 - rho) * np.eye(d) + rho * np.ones((d, d))
    return R * np.outer(scales, scales)


def test_residual_anisotropy_closed_form_equicorrelation():
    """V = S R S, R equicorrelated: with p ∝ diag S, κ = (1 + (d−1)ρ)/(1 − ρ) whatever S is."""
    d, rho = 6, 0.4
    scales = np.array([0.01, 0.1, 1.0, 3.0, 10.0, 100.0])
    V = _equicorrelated(d, rho, scales)
    expected = (1 + (d - 1) * rho) / (1 - rho)
    assert residual_anisotropy(V, scales) == pytest.approx(expected, rel=1e-10)
    assert residual_anisotropy(V, 7.3 * scales) == pytest.approx(expected, rel=1e-10)  # scale-free
    # the ideal preconditioner of noise_anisotropy's convention, p = √D σ/‖σ‖, σ_j = √V_jj
    sig = np.sqrt(np.diag(V))
    assert residual_anisotropy(V, math.sqrt(d) * sig / np.linalg.norm(sig)) == pytest.approx(expected, rel=1e-10)


def test_residual_anisotropy_without_preconditioning_is_the_condition_number_of_v():
    """p = 1: κ(V), here by the SVD (numpy.linalg.cond), a different route from the eigenvalues."""
    rng = np.random.default_rng(1)
    A = rng.normal(size=(5, 5)) * np.array([1, 2, 5, 10, 50])
    V = A.T @ A
    assert residual_anisotropy(V, np.ones(5)) == pytest.approx(np.linalg.cond(V), rel=1e-8)


def test_residual_anisotropy_diagonal_v_two_preconditioners():
    """V = diag(v): p = √v whitens exactly (κ = 1); p = v^{1/4} leaves κ = √(max v / min v)."""
    v = np.array([1e-2, 1.0, 4.0, 1e4])
    assert residual_anisotropy(np.diag(v), np.sqrt(v)) == pytest.approx(1.0, rel=1e-12)
    assert residual_anisotropy(np.diag(v), v ** 0.25) == pytest.approx(math.sqrt(1e6), rel=1e-12)


def test_residual_anisotropy_errors():
    with pytest.raises(SgtuneError, match="preconditioner must be positive"):
        residual_anisotropy(np.eye(2), [1.0, 0.0])
    with pytest.raises(SgtuneError, match="noise_cov must be symmetric"):
        residual_anisotropy([[1.0, 0.5], [0.0, 1.0]], [1.0, 1.0])
    with pytest.raises(SgtuneError, match="preconditioner"):
        residual_anisotropy(np.eye(3), [1.0, 1.0])


# ----------------------------------------------------------------------------- pSMILE's EMA vs the theory
SCALES = np.array([0.1, 0.5, 1.0, 4.0, 20.0])


def _anisotropic_logistic(n, seed=0):
    """Correlated covariates with scales 0.1..20 (gradient-noise sd spans ~200×), logits of order one."""
    rng = np.random.default_rng(seed)
    d = SCALES.size
    L = np.linalg.cholesky(0.5 * np.eye(d) + 0.5 * np.ones((d, d)))
    X = (rng.normal(size=(n, d)) @ L.T) * SCALES
    theta_star = np.array([1.0, -0.8, 0.6, 0.15, -0.02])  # logits of order one
    p = 1.0 / (1.0 + np.exp(-(X @ theta_star)))
    y = (rng.uniform(size=n) < p).astype(float)
    return make_dataset(X, y, source="anisotropic-logistic")


def _check_psmile_against_theory(n, batch, n_chains, n_steps, eps, seed):
    model = get_model("logistic")
    ds = _anisotropic_logistic(n, seed)
    prior = 1.0
    theta_hat = fit_map(model, ds, prior).theta_hat
    th = noise_anisotropy(model, ds, theta_hat, batch)  # with replacement, as the sampler draws
    V = th.noise_cov
    d = V.shape[0]
    assert th.condition_number > 1e3  # the data are strongly anisotropic
    res = run_chains(model, ds, Dynamics(eps, batch, inv_temperature=n),
                     RunSpec(n_steps, n_chains=n_chains, burn_in=n_steps // 2, thin=max(n_steps // 200, 1),
                             seed=seed),
                     SmileOptions(preconditioned=True, tuned=False), prior_precision=prior, initial=theta_hat)
    assert res.n_diverged == 0
    sd_chain = np.asarray(res.gradient_sd)           # (C, D) EMA sd of the minibatch ∇log p_N
    p_chain = np.asarray(res.preconditioner)         # (C, D)
    assert sd_chain.shape == (n_chains, d) and p_chain.shape == (n_chains, d)

    # statistical tolerance of the EMA (module docstring), per coordinate
    u = model.per_sample_grads(theta_hat, ds.X, ds.y)
    c = u - u.mean(axis=0)
    kurt = (c ** 4).mean(axis=0) / (c ** 2).mean(axis=0) ** 2 - 3.0
    rel_sd = 0.5 * np.sqrt(ALPHA / (2 - ALPHA) * (2 + kurt / batch)) / math.sqrt(n_chains)
    z = bonferroni_z(2 * d)
    bias = math.sqrt((1 - ALPHA) ** 2 * 2 / (2 - ALPHA))

    # drift: variance of the full-data ∇log p along the trace, and the spread of V_jj(θ) along it
    draws = res.trace.reshape(-1, d)[:: max(res.trace.shape[1] // 20, 1)]
    full = np.stack([-model.per_sample_grads(t, ds.X, ds.y).sum(axis=0) - prior * t for t in draws])
    drift_var = full.var(axis=0)
    vjj = np.stack([np.diag(noise_anisotropy(model, ds, t, batch).noise_cov) for t in draws])
    v_rel = np.abs(vjj / np.diag(V) - 1.0).max(axis=0)
    drift_rel = np.sqrt(1.0 + drift_var / np.diag(V)) - 1.0 + 0.5 * v_rel

    predicted = bias * np.sqrt(np.diag(V))
    ratio = sd_chain.mean(axis=0) / predicted
    tol = z * rel_sd + drift_rel
    assert np.all(np.abs(ratio - 1.0) <= tol), (ratio, tol)
    assert np.all(drift_rel < 0.05)  # the chain stayed near θ̂: the comparison is about the noise

    # the preconditioner: p = √D σ̂/‖σ̂‖ vs the ideal p* (the EMA bias cancels in the normalisation)
    p_mean = p_chain.mean(axis=0)
    p_ratio = p_mean / th.diagonal_preconditioner
    tol_p = 2 * (z * rel_sd.max() + drift_rel.max())  # p_j/p*_j = (σ̂_j/σ_j)/(‖σ̂‖/‖σ‖): two such errors
    assert np.all(np.abs(p_ratio - 1.0) <= tol_p), (p_ratio, tol_p)

    # residual anisotropy with the converged preconditioner vs the theory's for the ideal one:
    # κ(E⁻¹RE⁻¹) ∈ [κ(R)/ρ², κ(R)ρ²] for E = diag(p/p*), ρ = max/min of p/p* ≤ (1 + tol_p)/(1 − tol_p)
    kappa_chain = residual_anisotropy(V, p_mean)
    kappa_ideal = th.residual_condition_number_diagonal
    rho = (1 + tol_p) / (1 - tol_p)
    assert kappa_ideal / rho ** 2 <= kappa_chain <= kappa_ideal * rho ** 2, (kappa_chain, kappa_ideal, rho)
    assert residual_anisotropy(V, np.ones(d)) == pytest.approx(th.condition_number, rel=1e-8)
    assert kappa_chain < th.condition_number / 100  # pSMILE removed almost all of the anisotropy
    return ratio, tol, kappa_chain, kappa_ideal, th.condition_number


@pytest.mark.mc
def test_psmile_ema_converges_to_the_predicted_gradient_noise():
    _check_psmile_against_theory(n=2000, batch=32, n_chains=8, n_steps=3000, eps=2e-3, seed=3)


@pytest.mark.slow
@pytest.mark.mc
def test_psmile_ema_converges_to_the_predicted_gradient_noise_long():
    _check_psmile_against_theory(n=10_000, batch=32, n_chains=16, n_steps=20_000, eps=2e-3, seed=4)
