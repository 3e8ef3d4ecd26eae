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
from ..models.mlp import MLP
from .kronecker import DENSE_CHECK_MAX_DIM, KroneckerTuning, damped_factors, noise_factor_for
from .linear_chain import LinearChain, finite_population_factor
from .stationary import predict_stationary_cov
from .tuning import target_covariance

__all__ = ["approximation_ladder", "LADDER", "layer_samples", "dense_factored_exact_cov"]

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
        ``target_distance`` (the factored target against the dense one), ``exact_to_target`` (the exact
        rung against the dense target) and ``prediction_to_exact`` (the result's own prediction — with the
        Σ-dependent noise for ``method="dq-exact"`` — against the exact rung).

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
    dense_target = target_covariance(expansion, result.target)
    return {"covs": covs, "spectral_radius": {k: v[1] for k, v in solved.items()},
            "prediction_to_exact": _rel(result.dense_cov() if np.all(np.isfinite(result.variances())) else None,
                                        exact),
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


@cites("sgtune", "per-sample curvature roots and input vectors of each layer, the data of the factored C̄(Σ) built densely")
def layer_samples(model: MLP, theta: Any, X: Any, y: Any = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer of an MLP: the inputs ã_n (N, d_in) and the per-sample Gauss–Newton output blocks G_n (N, d_out, d_out).

    The layer's per-sample Gauss–Newton block is J_n = G_n ⊗ ã_nã_nᵀ with G_n = ρ''(f_n) u_nu_nᵀ, u_n = ∂f/∂z
    (row-major, :mod:`sgtune.theory.kronecker`); computed here from the network's forward and backward pass,
    not from :func:`sgtune.models.kfac.mlp_factors` (a dense check's own route). ρ'' needs y: the Gaussian and
    Bernoulli ρ'' used here do not depend on it beyond the fit (a placeholder y of zeros is passed).

    Parameters
    ----------
    model : MLP
        The network.
    theta : (D,) array_like
        The parameters θ̂.
    X : (N, p) array_like
        Covariates.
    y : (N,) array_like, optional
        Responses: given, G_n is the output factor of the exact per-sample Hessian instead, read off the layer
        block of the model's own dense per-sample Hessian H_n = G_n ⊗ ããᵀ as G_n[i,k] = Σ_jl H_n[ij,kl]ã_jã_l/‖ã‖⁴.

    Returns
    -------
    list of (ndarray, ndarray)
        (ã, G_n) per layer, in θ order.

    Examples
    --------
    >>> from sgtune.models import MLP
    >>> from sgtune.theory.kronecker_dense import layer_samples
    >>> rng = np.random.default_rng(0)
    >>> net = MLP((3,))
    >>> [(a.shape, g.shape) for a, g in layer_samples(net, net.initial_params(2, rng), rng.normal(size=(5, 2)))]
    [((5, 3), (5, 3, 3)), ((5, 4), (5, 1, 1))]
    """
    X = np.asarray(X, dtype=np.float64)
    layers, acts, d1s, _, f = model._forward(np.asarray(theta, dtype=np.float64), X)
    r2 = model.glm.derivatives(f, np.zeros_like(f))[2]
    us = model._deltas(layers, d1s, np.ones(X.shape[0]))
    out = [(np.hstack([a, np.ones((a.shape[0], 1))]), r2[:, None, None] * u[:, :, None] * u[:, None, :])
           for a, u in zip(acts, us)]
    if y is None:
        return out
    Hn = model.per_sample_hessians(np.asarray(theta, dtype=np.float64), X, np.asarray(y, dtype=np.float64))
    exact, start = [], 0
    for (a, u), (W, b) in zip(out, layers):
        d_out, d_in = u.shape[1], a.shape[1]
        w = np.arange(start, start + W.size).reshape(d_out, d_in - 1)
        idx = np.hstack([w, np.arange(start + W.size, start + W.size + b.size)[:, None]]).ravel()
        start += W.size + b.size
        B = Hn[:, idx][:, :, idx].reshape(len(X), d_out, d_in, d_out, d_in)
        exact.append((a, np.einsum("nijkl,nj,nl->nik", B, a, a) / np.sum(a * a, axis=1)[:, None, None] ** 2))
    return exact


def _dense_layer_noise(lay: Any, lf: Any, samples: tuple[np.ndarray, np.ndarray], prior: float,
                       n: int) -> tuple[np.ndarray, Any]:
    """(H_l, Σ_l ↦ C_l(Σ_l)) of the factored chain with the Σ-dependent noise, built densely with np.kron.

    C_l(Σ) = C_const + Π(Y(Σ) − JΣJ): Y(Σ) = mean_{n,m}(G_n ⊗ P_m)Σ(G_n ⊗ P_m) (P_m = ã_mã_mᵀ: KFAC's independence
    of the two sides, as a 4-index contraction on the dense Σ), J = mean_n G_n ⊗ A, and Π the projection the factored
    chain uses: the whitened partial trace over the input / d_in, ⊗ Ã (damped), or the diagonal in Q_G ⊗ Q_A
    (eigenbasis).
    """
    inputs, Gn = samples
    do, di = lf.d_out, lf.d_in
    TG = np.einsum("nab,ncd->abcd", Gn, Gn) / len(Gn)
    TP = np.einsum("na,nb,nc,nd->abcd", inputs, inputs, inputs, inputs, optimize=True) / len(inputs)
    J = np.kron(Gn.mean(axis=0), lf.input_factor)  # KFAC of J = mean_n J_n (the Gauss–Newton G for GGN samples)

    def fluct(Sig: np.ndarray) -> np.ndarray:
        Y = np.einsum("abcd,efgh,bfcg->aedh", TG, TP, Sig.reshape(do, di, do, di), optimize=True)
        return Y.reshape(do * di, do * di) - J @ Sig @ J

    if lay.eigenbasis is None:
        A_d, G_d = damped_factors(lf, prior, n)
        w, V = np.linalg.eigh(A_d)
        W = np.kron(np.eye(do), (V / np.sqrt(w)) @ V.T)

        def proj(X: np.ndarray) -> np.ndarray:
            Xw = (W @ X @ W).reshape(do, di, do, di)
            return np.kron(np.einsum("ijkj->ik", Xw) / di, A_d)

        C0 = np.kron(noise_factor_for(lf, A_d), A_d)
        return np.kron(G_d, A_d), lambda Sig: C0 + proj(fluct(Sig))
    Q = np.kron(lay.eigenbasis[0], lay.eigenbasis[1])
    E = noise_factor_for(lf, lf.input_factor)
    la = np.clip(np.linalg.eigvalsh(lf.input_factor), 0, None)
    c0 = np.outer(np.clip(np.einsum("ji,jk,ki->i", lay.eigenbasis[0], E, lay.eigenbasis[0]), 0, None), la).ravel()
    H = J + prior / n * np.eye(do * di)
    return H, lambda Sig: (Q * (c0 + np.einsum("ij,ij->j", Q, fluct(Sig) @ Q))) @ Q.T


@cites("wang2026", "Eqs. (11)–(12): the factored chain with the Σ-dependent noise, solved densely")
def dense_factored_exact_cov(result: KroneckerTuning, factors: KroneckerFactors,
                             samples: list[tuple[np.ndarray, np.ndarray]], *, tol: float = 1e-14,
                             max_iter: int = 500) -> np.ndarray:
    """The stationary covariance of the factored chain with the Σ-dependent noise, by a dense solve (D ≤ 5000).

    An independent route to :func:`sgtune.theory.kronecker.exact_noise_prediction`: H, Λ and the noise map
    Σ ↦ C(Σ) are built as dense (D, D) matrices from the per-sample factors (np.kron, 4-index contractions,
    an explicit partial trace; never the factored formulas), and Σ = Σ₀ + (the chain's response to C(Σ)) is
    iterated to its fixed point with dense Lyapunov solves (:class:`sgtune.theory.linear_chain.LinearChain`;
    momentum, β, with or without replacement).

    Parameters
    ----------
    result : KroneckerTuning
        The tuned step (its Λ, dynamics, prior form).
    factors : KroneckerFactors
        The factors it was tuned from.
    samples : list of (ndarray, ndarray)
        Per layer (ã_n, G_n) (:func:`layer_samples`).
    tol : float, optional
        Relative change at which the fixed-point iteration stops.
    max_iter : int, optional
        Iterations before giving up.

    Returns
    -------
    (D, D) ndarray
        Σ.

    Raises
    ------
    UnstableStepSizeError
        The iteration does not converge (no stationary covariance).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models import MLP
    >>> from sgtune.models.kfac import mlp_factors
    >>> from sgtune.theory.kronecker import tune_factors
    >>> from sgtune.theory.kronecker_dense import dense_factored_exact_cov, layer_samples
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(100, 2)), rng.normal(size=100)
    >>> net = MLP((2,))
    >>> theta = net.initial_params(2, rng)
    >>> fac = mlp_factors(net, theta, X, y, prior_precision=1.0, samples=True)
    >>> res = tune_factors(fac, Dynamics(None, batch_size=10, inv_temperature=200.0), method="dq-exact")
    >>> Sig = dense_factored_exact_cov(res, fac, layer_samples(net, theta, X))
    >>> bool(np.linalg.norm(Sig - res.dense_cov()) < 1e-10 * np.linalg.norm(Sig))
    True
    """
    D, dyn, n = result.dim, result.dynamics, result.n_data
    if D > DENSE_CHECK_MAX_DIM:
        raise SgtuneError(f"dense_factored_exact_cov needs D ≤ {DENSE_CHECK_MAX_DIM}, got {D}")
    H = np.zeros((D, D))
    parts = []
    for lay, lf, smp in zip(result.layers, factors.layers, samples):
        Hl, noise = _dense_layer_noise(lay, lf, smp, result.prior_precision, n)
        idx = lf.theta_indices()
        H[np.ix_(idx, idx)] = Hl
        parts.append((np.ix_(idx, idx), noise))
    f = finite_population_factor(n, dyn.batch_size, dyn.without_replacement)
    lam, Sig, last = result.dense_step_matrix(), np.zeros((D, D)), -1.0
    for _ in range(max_iter):
        C = np.zeros((D, D))
        for ix, noise in parts:
            C[ix] = noise(Sig[ix])
        chain = LinearChain.with_constant_noise(dyn.replace(step=lam), H, 0.5 * (C + C.T), noise_scale=f / dyn.batch_size)
        S = chain.solve_constant_noise()
        new = 0.5 * (S[:D, :D] + S[:D, :D].T)
        if not np.all(np.isfinite(new)) or np.linalg.norm(new) > 1e30:
            break
        change = np.linalg.norm(new - Sig) / np.linalg.norm(new)
        if change <= tol or change >= last >= 0.0 and change < 1e-11:  # converged, or stalled at rounding
            return new
        Sig, last = new, change
    raise UnstableStepSizeError("the dense factored chain with the Σ-dependent noise did not converge: no stationary "
                                "covariance", spectral_radius=math.inf)
