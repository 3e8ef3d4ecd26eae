"""Pure-NumPy reference implementations used as independent routes in tests.

Written from the definitions (Wang, Ding & Huggins (2026) §2.1, eq. B.1), vectorised over chains, with no
code shared with ``sgtune.theory`` or ``sgtune.sampler``.
"""
from __future__ import annotations

import math

import numpy as np


def glm_grad(model: str, eta: np.ndarray, y: np.ndarray, s2: float = 1.0) -> np.ndarray:
    """dρ/dη for the mean-loss GLMs (linear: (η−y)/σ², logistic: σ(η)−y, poisson: e^η−y)."""
    if model == "linear":
        return (eta - y) / s2
    if model == "logistic":
        return 1.0 / (1.0 + np.exp(-eta)) - y
    if model == "poisson":
        return np.exp(eta) - y
    raise ValueError(model)


def simulate_chains(model: str, X: np.ndarray, y: np.ndarray, gamma: np.ndarray, lam: np.ndarray,
                    theta0: np.ndarray, *, batch_size: int, steps: int, chains: int,
                    rng: np.random.Generator, beta: float = math.inf, momentum: float = 0.0,
                    replace: bool = True, s2: float = 1.0) -> np.ndarray:
    """Final states (chains, D) of SG(L)D θ ← θ − Λ m + sqrt(2Λ/β)ξ, m ← κm + G_t(θ).

    ``theta0`` is one start (D,) for every chain or one per chain (chains, D); momentum starts at 0.
    """
    n, d = X.shape
    theta = np.tile(theta0, (chains, 1)) if np.ndim(theta0) == 1 else np.array(theta0, dtype=float)
    m = np.zeros_like(theta)
    noise_factor = None
    if math.isfinite(beta):
        noise_factor = np.linalg.cholesky(2.0 * lam / beta)
    for _ in range(steps):
        if replace:
            idx = rng.integers(0, n, size=(chains, batch_size))
        else:
            idx = np.argsort(rng.random((chains, n)), axis=1)[:, :batch_size]
        Xb = X[idx]  # (C, B, D)
        eta = np.einsum("cbd,cd->cb", Xb, theta)
        r = glm_grad(model, eta, y[idx], s2)
        G = np.einsum("cb,cbd->cd", r, Xb) / batch_size + theta @ gamma.T / n
        m = momentum * m + G
        theta = theta - m @ lam.T
        if noise_factor is not None:
            theta = theta + rng.standard_normal((chains, d)) @ noise_factor.T
    return theta


def covariance_z_scores(samples: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """z-scores of the sample second moments about a known mean vs ``cov`` (independent rows).

    For each entry (i ≤ j) the statistic is the average of (x_i − μ_i)(x_j − μ_j) over the
    rows; its standard error is the sample standard deviation of those products / sqrt(n).
    """
    c = samples - mean
    n, d = c.shape
    iu = np.triu_indices(d)
    prod = c[:, iu[0]] * c[:, iu[1]]
    est = prod.mean(axis=0)
    se = prod.std(axis=0, ddof=1) / math.sqrt(n)
    return (est - cov[iu]) / se


def logistic_expansion(n: int, d: int, seed: int = 0):
    """The misspecified logistic-regression problem of benchmarks/bench_tuning.py (rank-one J_n = w_n x_nx_nᵀ,
    covariate scales 0.5–1.5, true link steeper by 1.3), for tests at sizes the benchmark also uses."""
    from sgtune.models import Expansion

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * np.linspace(0.5, 1.5, d)
    eta = X @ (rng.standard_normal(d) / math.sqrt(d))
    p = 1 / (1 + np.exp(-eta))
    y = (rng.random(n) < 1 / (1 + np.exp(-1.3 * eta))).astype(float)  # misspecified link
    return Expansion(theta_hat=np.zeros(d), grads=(p - y)[:, None] * X, prior_precision=np.eye(d),
                     design=X, weights=p * (1 - p))
