r"""How far the Kronecker family's factored theory is from the dense exact one, on a small network.

A check for networks small enough for D×D matrices (D ≤ ``DENSE_CHECK_MAX_DIM``); the Kronecker family
itself never forms them (:mod:`sgtune.theory.kronecker`). With the tuned Λ = blockdiag(M_l ⊗ Ã_l⁻¹) fixed,
:func:`approximation_ladder` removes the factored chain's approximations one at a time and solves each
chain densely (Wang, Ding & Huggins 2026, Eq. (11); Eq. (12) for the last rung):

0. ``factored`` — the family's own chain: H_l = G̃ ⊗ Ã, C_l = E_eff ⊗ Ã (its prediction);
1. ``exact prior`` — H_l = G ⊗ A + (δ/N) I instead of the damped factors (the prior approximation);
2. ``layer blocks`` — the expansion's own per-layer blocks of H and of C = 𝓘 − ḡḡᵀ instead of their
   KFAC factorisations (the expectation approximation and ḡḡᵀ's projection);
3. ``cross-layer`` — the full H and C (the block-diagonal approximation);
4. ``exact noise`` — the proxy chain with the exact minibatch noise C̄(Σ) of Eq. (12)
   (:func:`sgtune.theory.stationary.predict_stationary_cov`): the dense exact answer.

Each rung's distance to the previous one is what that approximation costs; rung 4 against the dense
target (``posterior``: H⁻¹/N, ``sandwich``: J⁻¹𝓘J⁻¹/N) is how far the real proxy chain with this Λ lands
from what the user asked for.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core.errors import SgtuneError, UnstableStepSizeError
from ..models import Expansion
from ..models.kfac import KroneckerFactors
from .kronecker import DENSE_CHECK_MAX_DIM, KroneckerTuning, damped_factors, noise_factor_for
from .linear_chain import LinearChain, finite_population_factor
from .stationary import predict_stationary_cov
from .tuning import target_covariance

__all__ = ["approximation_ladder", "LADDER"]

#: the rungs of :func:`approximation_ladder`
LADDER = ("factored", "exact prior", "layer blocks", "cross-layer", "exact noise")


def _rel(a: np.ndarray | None, b: np.ndarray | None) -> float:
    if a is None or b is None:
        return math.nan
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _blocks(result: KroneckerTuning, factors: KroneckerFactors, dim: int) -> list[tuple[np.ndarray, ...]]:
    """Per layer: (θ indices, H̃, C_factored, H with the exact prior)."""
    out = []
    gamma = factors.prior_precision / factors.n_data
    for lf in factors.layers:
        A_d, G_d = damped_factors(lf, factors.prior_precision, factors.n_data)
        C = np.kron(noise_factor_for(lf, A_d), A_d)
        H_exact_prior = np.kron(lf.curvature_factor, lf.input_factor) + gamma * np.eye(lf.n_params)
        out.append((lf.theta_indices(), np.kron(G_d, A_d), C, H_exact_prior))
    return out


def _constant_noise_cov(result: KroneckerTuning, H: np.ndarray, C: np.ndarray,
                        lam: np.ndarray) -> tuple[np.ndarray | None, float]:
    dyn = result.dynamics
    f = finite_population_factor(result.n_data, dyn.batch_size, dyn.without_replacement)
    chain = LinearChain.with_constant_noise(dyn.replace(step=lam), H, C, noise_scale=f / dyn.batch_size)
    rho = float(np.max(np.abs(np.linalg.eigvals(chain.transition)))) ** 2
    if not rho < 1.0:
        return None, rho
    S = chain.solve_constant_noise()
    d = H.shape[0]
    return 0.5 * (S[:d, :d] + S[:d, :d].T), rho


@cites("wang2026", "Eqs. (11)–(12): the dense chains the factored one approximates, one approximation at a time")
def approximation_ladder(result: KroneckerTuning, factors: KroneckerFactors, expansion: Expansion) -> dict[str, Any]:
    """The dense stationary covariance of each rung (module docstring) and the distances between them.

    Parameters
    ----------
    result : KroneckerTuning
        The tuned Kronecker step.
    factors : KroneckerFactors
        The factors it was tuned from.
    expansion : Expansion
        The dense expansion of the same network, data and prior at the same θ̂.

    Returns
    -------
    dict
        ``covs`` (rung → (D, D) covariance or None when that chain is unstable), ``spectral_radius`` (rung → ρ
        of its second-moment map), ``step`` (rung → relative
        Frobenius distance to the previous rung), ``to_exact`` (rung → distance to the exact-noise rung),
        ``target_distance`` (the factored target against the dense one) and ``exact_to_target`` (the exact
        rung against the dense target).

    Raises
    ------
    SgtuneError
        D above ``DENSE_CHECK_MAX_DIM``, or an expansion of another size.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import make_dataset
    >>> from sgtune.models import MLP, expand
    >>> from sgtune.models.kfac import mlp_factors
    >>> from sgtune.theory.kronecker import tune_factors
    >>> from sgtune.theory.kronecker_dense import approximation_ladder
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = X @ [1.0, -1.0] + rng.normal(size=200)
    >>> e = expand(MLP(()), make_dataset(X, y))
    >>> fac = mlp_factors(MLP(()), e.theta_hat, X, y)
    >>> lad = approximation_ladder(tune_factors(fac, Dynamics(None, batch_size=20)), fac, e)
    >>> sorted(lad["step"])
    ['cross-layer', 'exact noise', 'exact prior', 'layer blocks']
    """
    D = result.dim
    if D > DENSE_CHECK_MAX_DIM or expansion.dim != D:
        raise SgtuneError(f"approximation_ladder needs D ≤ {DENSE_CHECK_MAX_DIM} and an expansion of the same "
                          f"network (D = {D}, expansion D = {expansion.dim})")
    lam = result.dense_step_matrix()
    blocks = _blocks(result, factors, D)
    H0, C0, H1 = np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D))
    Hb, Cb = np.zeros((D, D)), np.zeros((D, D))
    Hfull, Cfull = expansion.hessian, expansion.gradient_cov()
    for idx, Ht, C, He in blocks:
        ix = np.ix_(idx, idx)
        H0[ix], C0[ix], H1[ix] = Ht, C, He
        Hb[ix], Cb[ix] = Hfull[ix], Cfull[ix]
    solved = {"factored": _constant_noise_cov(result, H0, C0, lam),
              "exact prior": _constant_noise_cov(result, H1, C0, lam),
              "layer blocks": _constant_noise_cov(result, Hb, Cb, lam),
              "cross-layer": _constant_noise_cov(result, Hfull, Cfull, lam)}
    try:
        st = predict_stationary_cov(expansion, result.dynamics.replace(step=lam))
        solved["exact noise"] = (st.cov, st.spectral_radius)
    except UnstableStepSizeError as exc:
        solved["exact noise"] = (None, exc.spectral_radius)
    covs = {k: v[0] for k, v in solved.items()}
    exact = covs["exact noise"]
    exact = covs["exact noise"]
    dense_target = target_covariance(expansion, result.target)
    return {"covs": covs, "spectral_radius": {k: v[1] for k, v in solved.items()},
            "step": {LADDER[i]: _rel(covs[LADDER[i]], covs[LADDER[i - 1]]) for i in range(1, len(LADDER))},
            "to_exact": {k: _rel(v, exact) for k, v in covs.items()},
            "target_distance": _rel(_factored_target(result), dense_target),
            "exact_to_target": _rel(exact, dense_target)}


def _factored_target(result: KroneckerTuning) -> np.ndarray:
    D = result.dim
    out = np.zeros((D, D))
    for lay in result.layers:
        idx = lay.theta_indices()
        if lay.eigenbasis is None:
            out[np.ix_(idx, idx)] = np.kron(lay.target_output_cov, lay.input_inverse)
        else:  # (Q_G ⊗ Q_A) diag(σ*) (Q_G ⊗ Q_A)ᵀ
            Q = np.kron(lay.eigenbasis[0], lay.eigenbasis[1])
            out[np.ix_(idx, idx)] = (Q * lay.eigenbasis[4].ravel()) @ Q.T
    return out
