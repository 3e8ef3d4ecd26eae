r"""Monte Carlo error of the stationary linearised chain, exactly: the mean's and the covariance's.

The proxy chain of Wang, Ding & Huggins (2026) (Eq. (8); with momentum the augmented (d, ν) chain of
Prop. B.1; :class:`sgtune.theory.linear_chain.LinearChain`) is a linear recursion z_{t+1} = F z_t + ε_t
whose noise has conditional mean zero, so at stationarity its lag-k autocovariances are

.. math::  A_k = \operatorname{Cov}(z_{t+k}, z_t) = F^k S \;(k \ge 0),\qquad A_{-k} = A_k^\top,

S the stationary second moment (``StationaryCov.augmented_cov``), and for the positions
x = P z (P = [I 0] with momentum) the lags are P A_k Pᵀ. Two limits of a run of T steps follow.

**The mean** (exact for the proxy, whatever the noise law):

.. math::  \lim_{T\to\infty} T\,\operatorname{Cov}(\bar x_T) = \sum_{k=-\infty}^{\infty} P A_k P^\top
           = P\,[(I-F)^{-1}S + S(I-F)^{-\top} - S]\,P^\top .

**The sample covariance** Ŝ_T, under Gaussian fourth moments (Isserlis:
Cov(x_i x_j, y_i y_j) = E[x_i y_i]E[x_j y_j] + E[x_i y_j]E[x_j y_i] for jointly Gaussian, centred x, y):

.. math::  \lim_{T\to\infty} T\,E\|\hat S_T - \Sigma\|_F^2 = \sum_{k=-\infty}^{\infty}
           [(\operatorname{tr} A_k)^2 + \operatorname{tr}(A_k A_k)],

with A_k the position lags (both summands are unchanged by A_k ↦ A_kᵀ, so the sum is the k = 0 term plus
twice the k ≥ 1 terms). No D²×D² matrix is formed: F is brought to block-diagonal form
F = V diag(T_1, …, T_n) V⁻¹ and, with M = V⁻¹ S Π V (Π = PᵀP) cut into blocks M_ij,

.. math::  \sum_{k\ge0} (\operatorname{tr} A_k)^2 = \sum_{ij} \operatorname{tr}\big[(I - T_i\otimes T_j)^{-1}(M_{ii}\otimes M_{jj})\big],
           \qquad \sum_{k\ge0}\operatorname{tr}(A_kA_k) = \sum_{ij}\operatorname{tr}(Z_{ij}M_{ji}),\;
           Z_{ij} - T_i Z_{ij} T_j = M_{ij},

geometric sums for 1×1 blocks (T_i = μ_i: c_ic_j/(1 − μ_iμ_j) and M_ijM_ji/(1 − μ_iμ_j), c = diag M) and
4×4 solves for 2×2 blocks. The block form comes from the structure (:func:`cov_error_constant`):

- no momentum, Λ symmetric positive definite (``"symmetric"``): with Λ = LLᵀ and LᵀHL = U diag(h) Uᵀ,
  F = I − ΛH = (LU) diag(1 − h) (LU)⁻¹ — ΛH is similar to the symmetric LᵀHL, so the eigenvalues are
  real and the eigenvectors are as well conditioned as L;
- momentum κ, Λ SPD (``"blocks"``): in the coordinates d = LUa, ν = L⁻ᵀUb the augmented F splits into
  D independent 2×2 blocks [[1 − h_i, −κ], [h_i, κ]] (their complex eigenvalues, and the defective
  critically damped ones, need no eigenvectors: each pair of blocks is a 4×4 solve);
- anything else (``"eig"``): the complex eigendecomposition of I − F (1 − μ_iμ_j is formed as
  δ_i + δ_j − δ_iδ_j from δ = eig(I − F), so slow modes keep their digits); when its eigenvector matrix
  is ill conditioned (cond > 1e8) and the state is small, the Kronecker form of the two Stein
  equations (``"kron"``: Σ_k (F⊗F)^k = (I − F⊗F)⁻¹ on m² unknowns); a large ill-conditioned
  non-symmetric system is refused with a message.

The Gaussian assumption. With the multiplicative minibatch noise of SGD (the Σ-dependent part of C̄,
Eq. (12)) the chain is not Gaussian: its fourth moments carry excess cumulants and the
second-moment map decays more slowly than F ⊗ F. The formula above is then an approximation; the
mean's formula stays exact. How well it holds against real chains is measured in the tests and in
``benchmarks/plan_evidence.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla

from ..core._refs import cites
from ..core._validation import as_float_array, check_probability
from ..core.errors import ConvergenceError, SgtuneError, ShapeError
from .linear_chain import LinearChain, heavy_ball_transition
from .stationary import StationaryCov

__all__ = ["MCError", "mc_error", "mean_asymptotic_cov", "cov_error_constant", "MC_METHODS"]

#: routes of :func:`cov_error_constant` (``None`` chooses by structure)
MC_METHODS = ("symmetric", "blocks", "eig", "kron")
#: eigenvector condition number above which the ``eig`` route is not trusted
EIG_COND_MAX = 1e8
#: largest state dimension of the Kronecker route (m² unknowns, an m²×m² inverse)
KRON_MAX_DIM = 40
#: pairs of 2×2 blocks processed per chunk (4×4 inverses; bounds memory at D = 1000)
_PAIR_CHUNK = 200_000


@dataclass(frozen=True)
class MCError:
    """Result of :func:`mc_error` (asymptotic Monte Carlo error of a stationary run of T steps).

    Attributes
    ----------
    mean_mc_variance : (D, D) ndarray
        The limit T·Cov(x̄_T), exact for the linearised chain.
    cov_mc_error : float
        The limit T·E‖Ŝ_T − Σ‖²_F (absolute; Gaussian fourth moments).
    cov_mc_error_constant : float
        The relative constant ``cov_mc_error`` / ‖reference‖²_F (reference: Σ unless given).
    reference_norm2 : float
        The squared norm ‖reference‖²_F.
    method : str
        The route of :func:`cov_error_constant` that computed it.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory import mc_error
    >>> from sgtune.theory.stationary import predict_stationary_cov
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> err = mc_error(predict_stationary_cov(e, Dynamics(0.1, batch_size=32)))
    >>> err.mean_mc_variance.shape
    (5, 5)
    >>> bool(err.predicted_rms_error(steps=10_000, chains=4) < err.predicted_rms_error(steps=1_000, chains=4))
    True
    """

    mean_mc_variance: np.ndarray
    cov_mc_error: float
    cov_mc_error_constant: float
    reference_norm2: float
    method: str

    def predicted_rms_error(self, steps: float, chains: int = 1, bias: float = 0.0) -> float:
        """sqrt(bias² + c/(T·C)): the predicted RMS relative error of the pooled covariance estimate."""
        return math.sqrt(bias * bias + self.cov_mc_error_constant / (float(steps) * int(chains)))


# --------------------------------------------------------------------------- public API
@cites("wang2026", "§4 / Prop. B.2: lag-k autocovariance (I − ΛH)^k Σ of the proxy chain, summed over k")
def mean_asymptotic_cov(transition: Any, second_moment: Any, *, dim: int | None = None,
                        _check: bool = True) -> np.ndarray:
    r"""Asymptotic covariance of the chain's mean, lim T·Cov(x̄_T) = P[(I−F)⁻¹S + S(I−F)⁻ᵀ − S]Pᵀ.

    Parameters
    ----------
    transition : (m, m) or LinearChain
        F (I − ΛH, or the augmented momentum transition), spectral radius < 1; a
        :class:`~sgtune.theory.linear_chain.LinearChain` gives F and D.
    second_moment : (m, m)
        S, the stationary covariance of the state.
    dim : int, optional
        D, the number of leading state coordinates that are positions (default m).
    _check : bool, optional
        Internal: check that ρ(F) < 1 (callers that checked it already pass False).

    Returns
    -------
    (D, D) ndarray
        The sum of all lag autocovariances of the positions, symmetric positive semi-definite;
        exact for the linear chain whatever the law of its noise, as long as the noise has
        conditional mean zero.

    Raises
    ------
    ShapeError
        F and S are not square of one size, or ``dim`` is out of range.
    SgtuneError
        The transition's spectral radius is not below 1 (no stationary law).

    See Also
    --------
    cov_error_constant : The same sum for the covariance estimate's error.

    Notes
    -----
    The lag-k autocovariance of the proxy chain is F^k S (Wang, Ding & Huggins 2026, §4 and
    Prop. B.2); the sum over k ∈ ℤ is the closed form above, with P the projection on the positions.

    Examples
    --------
    >>> import numpy as np
    >>> F, S = np.array([[0.5]]), np.array([[4 / 3]])   # AR(1) with unit noise: S = 1/(1 − 0.25)
    >>> bool(np.isclose(mean_asymptotic_cov(F, S)[0, 0], 1 / (1 - 0.5) ** 2))
    True
    """
    if isinstance(transition, LinearChain):
        transition, dim = transition.transition, transition.dim if dim is None else dim
    F, S, d = _check_pair(transition, second_moment, dim, check_stable=_check)
    m = F.shape[0]
    W = np.linalg.solve(np.eye(m) - F, S)
    out = (W + W.T - S)[:d, :d]
    return 0.5 * (out + out.T)


@cites("sgtune", "Isserlis' theorem on the lag autocovariances F^k S of the proxy chain (Wang, Ding & Huggins "
                 "2026, §4, Prop. B.2), summed through a block-diagonal form of F")
def cov_error_constant(transition: Any, second_moment: Any, *, dim: int | None = None,
                       method: str | None = None) -> tuple[float, str]:
    r"""Error constant of the covariance estimate, lim T·E‖Ŝ_T − Σ‖²_F = Σ_k [(tr A_k)² + tr(A_kA_k)].

    Parameters
    ----------
    transition : LinearChain or (m, m)
        The chain (:class:`~sgtune.theory.linear_chain.LinearChain`: its F, D, Λ and κ; the
        well-conditioned structured routes are used when Λ is symmetric positive definite), or any
        stable transition F of a linear recursion (the ``eig`` / ``kron`` routes).
    second_moment : (m, m)
        S, the stationary covariance of the state.
    dim : int, optional
        D, the leading state coordinates that are positions (default: the chain's D, or m).
    method : {"symmetric", "blocks", "eig", "kron", None}
        Force a route (None: ``symmetric`` / ``blocks`` when Λ is SPD and H symmetric, else ``eig``,
        else ``kron`` for ill-conditioned small systems).

    Returns
    -------
    (value, method)
        The absolute constant (divide by ‖Σ‖²_F for a relative one) and the route used.

    Raises
    ------
    ConvergenceError
        A non-symmetric system whose eigenvectors are ill conditioned and too large for ``kron``.

    See Also
    --------
    mc_error : The constant of a predicted chain, normalised.

    Notes
    -----
    A_k = P F^k S Pᵀ is the lag-k autocovariance of the positions (Wang, Ding & Huggins 2026, §4,
    Prop. B.2); Isserlis' theorem turns the fourth moments of a Gaussian chain into the sum above,
    computed through a block-diagonal form of F (module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> a, s = 0.5, 4 / 3           # AR(1): A_k = a^|k| s, Σ_k 2 a^{2|k|} s² = 2 s² (1 + a²)/(1 − a²)
    >>> c, _ = cov_error_constant(np.array([[a]]), np.array([[s]]))
    >>> bool(np.isclose(c, 2 * s * s * (1 + a * a) / (1 - a * a)))
    True
    """
    if isinstance(transition, LinearChain):
        chain = transition
        return _error_constant(chain.transition, second_moment, chain.dim if dim is None else dim,
                               chain.step_matrix, chain.momentum, method)
    return _error_constant(transition, second_moment, dim, None, 0.0, method)


def _error_constant(transition: Any, second_moment: Any, dim: int | None, lam: np.ndarray | None, kappa: float,
                    method: str | None) -> tuple[float, str]:
    """:func:`cov_error_constant` with Λ (or None) and κ given."""
    F0 = as_float_array(transition, "transition", ndim=2)
    if dim is None:
        dim = F0.shape[0] // 2 if kappa > 0 else F0.shape[0]
    F, S, d = _check_pair(F0, second_moment, dim, check_stable=False)  # each route checks ρ(F) < 1 itself
    if method is not None and method not in MC_METHODS:
        raise SgtuneError(f"method must be one of {', '.join(MC_METHODS)} or None, got {method!r}")
    g0 = float(np.trace(S[:d, :d]) ** 2 + np.sum(S[:d, :d] * S[:d, :d].T))
    if method in (None, "symmetric", "blocks"):
        form = _structured_form(F, S, d, lam, kappa)
        if form is None and method is not None:
            raise SgtuneError(f"method {method!r} needs a symmetric positive-definite step_matrix, a symmetric "
                              "Hessian and the transition built from them (Wang, Ding & Huggins 2026, Eq. (8) / "
                              "Prop. B.1)")
        if form is not None:
            label, total = form
            if method is not None and label != method:
                raise SgtuneError(f"method {method!r} does not fit: the system is the {label!r} case "
                                  f"({'with' if kappa > 0 else 'without'} momentum)")
            return _finish(total, g0), label
    if method in (None, "eig"):
        total = _eig_sum(F, S, d, strict=method == "eig")
        if total is not None:
            return _finish(total, g0), "eig"
    _check_radius(np.linalg.eigvals(F))
    if F.shape[0] > KRON_MAX_DIM:
        raise ConvergenceError(
            f"the transition's eigenvectors are ill conditioned (cond > {EIG_COND_MAX:g}) and the state dimension "
            f"{F.shape[0]} is too large for the Kronecker route (≤ {KRON_MAX_DIM}); use a symmetric "
            "positive-definite step-size matrix, for which the structured route is well conditioned",
            residual=math.nan, method="eig")
    return _finish(_kron_sum(F, S, d), g0), "kron"


@cites("sgtune", "Monte Carlo error of the linearised chain (Wang, Ding & Huggins 2026, Eqs. (8), (11)–(12), "
                 "Prop. B.1; Isserlis for Ŝ)")
def mc_error(stationary: StationaryCov, *, reference_cov: Any = None, method: str | None = None) -> MCError:
    r"""The mean's asymptotic covariance and the covariance estimate's error constant of a predicted chain.

    Parameters
    ----------
    stationary : StationaryCov
        From :func:`sgtune.theory.stationary.predict_stationary_cov` (or a tuning result's
        ``.stationary``): its ``transition``, ``augmented_cov``, ``step_matrix`` and ``momentum``.
    reference_cov : (D, D), optional
        The matrix whose squared Frobenius norm normalises the constant (default Σ(Λ) itself; the
        planner passes the target Σ*).
    method : str, optional
        Route of :func:`cov_error_constant`.

    Returns
    -------
    MCError
        A run of T steps and C independent chains has Cov(x̄) ≈ ``mean_mc_variance``/(T·C) and
        E‖Ŝ − Σ‖²_F/‖reference‖²_F ≈ ``cov_mc_error_constant``/(T·C).

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model, expand
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.theory.stationary import predict_stationary_cov
    >>> e = expand(get_model("linear"), example("hetero-linear"))
    >>> r = mc_error(predict_stationary_cov(e, Dynamics(0.05, batch_size=32)))
    >>> bool(r.cov_mc_error_constant > 0 and r.method == "symmetric")
    True
    """
    st = stationary
    d = st.cov.shape[0]
    lam = as_float_array(st.step_matrix, "step_matrix", ndim=2)
    value, used = _error_constant(st.transition, st.augmented_cov, d, lam, check_probability(st.momentum, "momentum"),
                                  method)  # checks ρ(F) < 1 on its route
    mean_var = mean_asymptotic_cov(st.transition, st.augmented_cov, dim=d, _check=False)
    ref = st.cov if reference_cov is None else as_float_array(reference_cov, "reference_cov", ndim=2)
    if ref.shape != (d, d):
        raise ShapeError(f"reference_cov must be (D, D) = ({d}, {d}) but has shape {ref.shape}")
    norm2 = float(np.sum(ref * ref))
    if not norm2 > 0:
        raise SgtuneError("reference_cov is zero; its squared Frobenius norm normalises the error constant")
    return MCError(mean_mc_variance=mean_var, cov_mc_error=value, cov_mc_error_constant=value / norm2,
                   reference_norm2=norm2, method=used)


# --------------------------------------------------------------------------- internals
def _check_pair(transition: Any, second_moment: Any, dim: int | None,
                check_stable: bool = True) -> tuple[np.ndarray, np.ndarray, int]:
    F = as_float_array(transition, "transition", ndim=2)
    S = as_float_array(second_moment, "second_moment", ndim=2)
    m = F.shape[0]
    if F.shape != (m, m) or S.shape != (m, m):
        raise ShapeError(f"transition and second_moment must be square of one size, got {F.shape} and {S.shape}")
    d = m if dim is None else int(dim)
    if not 1 <= d <= m:
        raise ShapeError(f"dim must be in [1, {m}], got {dim}")
    if check_stable:
        _check_radius(np.linalg.eigvals(F) if m else np.zeros(0))
    return F, 0.5 * (S + S.T), d


def _check_radius(mu: np.ndarray) -> None:
    rho = float(np.max(np.abs(mu))) if mu.size else 0.0
    if not rho < 1.0:
        raise SgtuneError(f"the transition has spectral radius {rho:.6g} >= 1: the chain has no stationary law")


def _finish(total_from_zero: float, g0: float) -> float:
    """Σ_{k=−∞}^{∞} = 2 Σ_{k≥0} − (k = 0 term)."""
    return float(2.0 * total_from_zero - g0)


def _structured_form(F: np.ndarray, S: np.ndarray, d: int, lam: np.ndarray | None,
                     kappa: float) -> tuple[str, float] | None:
    """The ``symmetric`` / ``blocks`` routes: Σ_{k≥0}[(tr A_k)² + tr(A_kA_k)], or None when Λ, H do not fit."""
    m = F.shape[0]
    if lam is None or lam.shape != (d, d) or m != (2 * d if kappa > 0 else d):
        return None
    scale = max(float(np.max(np.abs(lam))), 1e-300)
    if float(np.max(np.abs(lam - lam.T))) > 1e-12 * scale:
        return None
    try:
        L = np.linalg.cholesky(0.5 * (lam + lam.T))
    except np.linalg.LinAlgError:
        return None
    I = np.eye(d)
    if kappa > 0:
        H = F[d:, :d]
        expected = heavy_ball_transition(lam, H, kappa)
        if float(np.max(np.abs(F - expected))) > 1e-10 * max(float(np.max(np.abs(F))), 1.0):
            return None
        G = L.T @ H @ L
    else:
        G = sla.solve_triangular(L, (I - F) @ L, lower=True)  # L⁻¹ΛHL = LᵀHL
    gs = float(np.max(np.abs(G)))
    if float(np.max(np.abs(G - G.T))) > 1e-8 * max(gs, 1e-300):
        return None  # H not symmetric: ΛH is not similar to a symmetric matrix
    h, U = np.linalg.eigh(0.5 * (G + G.T))
    LU = L @ U
    if kappa == 0.0:
        _check_radius(1.0 - h)
    else:  # eigenvalues of each block [[1 − h, −κ], [h, κ]]: roots of z² − (1 − h + κ)z + κ
        tr = 1.0 - h + kappa
        disc = np.sqrt((tr * tr - 4 * kappa).astype(complex))
        _check_radius(np.concatenate([(tr + disc) / 2, (tr - disc) / 2]))
    if kappa == 0.0:
        # M = V⁻¹ S V with V = LU, V⁻¹ = UᵀL⁻¹; δ = h (1 − μ = h exactly)
        M = U.T @ sla.solve_triangular(L, S @ LU, lower=True)
        return "symmetric", _diagonal_sum(h, M)
    # a-columns only: M_aa = UᵀL⁻¹S_dd LU, M_ba = UᵀLᵀS_νd LU
    Maa = U.T @ sla.solve_triangular(L, S[:d, :d] @ LU, lower=True)
    Mba = U.T @ (L.T @ (S[d:, :d] @ LU))
    return "blocks", _two_by_two_sum(h, kappa, Maa, Mba)


def _diagonal_sum(delta: np.ndarray, M: np.ndarray) -> float:
    """Σ_{k≥0}[(tr A_k)² + tr(A_kA_k)] for 1×1 blocks μ = 1 − δ: Σ_ij (c_ic_j + M_ijM_ji)/(1 − μ_iμ_j)."""
    denom = delta[:, None] + delta[None, :] - delta[:, None] * delta[None, :]
    c = np.diagonal(M)
    G = 1.0 / denom
    total = c @ G @ c + np.sum(M * M.T * G)
    if np.iscomplexobj(total):
        return float(total.real)
    return float(total)


def _two_by_two_sum(h: np.ndarray, kappa: float, Maa: np.ndarray, Mba: np.ndarray) -> float:
    """Σ_{k≥0}[(tr A_k)² + tr(A_kA_k)] for the 2×2 momentum blocks T_i = [[1 − h_i, −κ], [h_i, κ]].

    With A_i = I − T_i = [[h_i, κ], [−h_i, 1 − κ]] (exact), I − T_i⊗T_j = A_i⊗I + I⊗A_j − A_i⊗A_j
    avoids the cancellation in 1 − μ_iμ_j for slow modes. M_ij = [[Maa_ij, 0], [Mba_ij, 0]].
    """
    d = h.shape[0]
    A = np.zeros((d, 2, 2))
    A[:, 0, 0], A[:, 0, 1], A[:, 1, 0], A[:, 1, 1] = h, kappa, -h, 1.0 - kappa
    I2 = np.eye(2)
    v = np.stack([np.diagonal(Maa), np.diagonal(Mba)], axis=1)  # (d, 2): the a-column of M_ii
    total = 0.0
    rows = max(1, _PAIR_CHUNK // d)
    for start in range(0, d, rows):
        i = np.arange(start, min(d, start + rows))
        Ai = A[i][:, None]          # (r, 1, 2, 2)
        Aj = A[None, :]             # (1, d, 2, 2)
        # s-term: row (0,0) of (I − T_i⊗T_j)⁻¹, contracted with v_i ⊗ v_j
        K = _kron(Ai, np.broadcast_to(I2, Aj.shape)) + _kron(np.broadcast_to(I2, Ai.shape), Aj) - _kron(Ai, Aj)
        K = np.broadcast_to(K, (len(i), d, 4, 4))
        e0 = np.zeros((len(i), d, 4, 1))
        e0[..., 0, 0] = 1.0
        y = np.linalg.solve(np.swapaxes(K, -1, -2), e0)[..., 0].reshape(len(i), d, 2, 2)
        total += float(np.einsum("ijrs,ir,js->", y, v[i], v))
        # t-term: vec_r Z = (I − T_i⊗T_jᵀ)⁻¹ vec_r M_ij, then Z[0,0]Maa_ji + Z[0,1]Mba_ji
        AjT = np.swapaxes(Aj, -1, -2)
        Kt = _kron(Ai, np.broadcast_to(I2, AjT.shape)) + _kron(np.broadcast_to(I2, Ai.shape), AjT) - _kron(Ai, AjT)
        Kt = np.broadcast_to(Kt, (len(i), d, 4, 4))
        rhs = np.zeros((len(i), d, 4, 1))
        rhs[..., 0, 0] = Maa[i]
        rhs[..., 2, 0] = Mba[i]
        z = np.linalg.solve(Kt, rhs)[..., 0]
        total += float(np.sum(z[..., 0] * Maa[:, i].T + z[..., 1] * Mba[:, i].T))
    return total


def _kron(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Batched Kronecker product of 2×2 matrices: (..., 2, 2) ⊗ (..., 2, 2) → (..., 4, 4)."""
    out = a[..., :, None, :, None] * b[..., None, :, None, :]
    return out.reshape(*out.shape[:-4], 4, 4)


def _eig_sum(F: np.ndarray, S: np.ndarray, d: int, strict: bool) -> float | None:
    """The ``eig`` route (complex 1×1 blocks); None when the eigenvectors are ill conditioned."""
    m = F.shape[0]
    delta, V = np.linalg.eig(np.eye(m) - F)
    _check_radius(1.0 - delta)
    cond = float(np.linalg.cond(V))
    if not cond <= EIG_COND_MAX:
        if strict:
            raise ConvergenceError(f"method 'eig': the transition's eigenvector matrix has condition number "
                                   f"{cond:.3g} > {EIG_COND_MAX:g}; use method None or 'kron'",
                                   residual=math.nan, method="eig")
        return None
    Vinv = np.linalg.inv(V)
    M = Vinv[:, :d] @ S[:d, :d] @ V[:d, :] + Vinv[:, d:] @ S[d:, :d] @ V[:d, :]
    return _diagonal_sum(delta, M)


def _kron_sum(F: np.ndarray, S: np.ndarray, d: int) -> float:
    """The ``kron`` route: Σ_k (F⊗F)^k = (I − F⊗F)⁻¹ on the m² unknowns (small systems only)."""
    m = F.shape[0]
    X = np.zeros((m, m))
    X[:, :d] = S[:, :d]  # S Π
    I2 = np.eye(m * m)
    # Σ_k tr(F^kX)² = tr((I − F⊗F)⁻¹ (X⊗X))
    s = float(np.trace(np.linalg.solve(I2 - np.kron(F, F), np.kron(X, X))))
    # Σ_k tr(F^kXF^kX) = tr(ZX), vec_r Z = (I − F⊗Fᵀ)⁻¹ vec_r X
    Z = np.linalg.solve(I2 - np.kron(F, F.T), X.ravel()).reshape(m, m)
    return s + float(np.trace(Z @ X))
