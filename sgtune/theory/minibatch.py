r"""Minibatch second-order error terms of SGLD and SGLRW (Mensch et al. 2025, §4.3 and appendix A.3).

Convention (Mensch et al. 2025, eq. 2 and 6): the potential is a **sum** over
the data, U(θ) = −log p(θ) − Σ_i log p(y_i|x_i, θ), and the minibatch gradient is

    ∇̂U(θ; 𝔅) = −∇log p(θ) + (N/B) Σ_{i∈𝔅} u_i,    u_i = −∇log p(y_i|x_i, θ)

(u_i is what :meth:`sgtune.models.GLM.per_sample_grads` returns). The gradient noise is
ζ = ∇̂U − ∇U = (N/B) Σ_{i∈𝔅} d_i with d_i = u_i − ū (the prior cancels), and

    M_SGLD = ζζᵀ + ∇Uζᵀ + ζ∇Uᵀ   (eq. 99),     M_SGLRW = offdiag(M_SGLD)   (Lemma 4.3).

Everything here is an exact expectation over the minibatch draw, either B indices drawn
uniformly **with** replacement (ordered B-tuples) or a uniformly random B-subset
(**without** replacement). Write S = Σ_{i∈𝔅} d_i and P_k = Σ_i d_i^{⊗k} (population power
sums; P_1 = 0). Then (derived in :mod:`sgtune.symbolic.minibatch`, checked by enumerating
every batch in the tests)

    E[S⊗S]        = γ₂ P₂,
    E[S^{⊗3}]     = γ₃ P₃,
    E[S_a S_b S_c S_d] = α₄ (P₄)_{abcd} + β₄ [(P₂)_{ab}(P₂)_{cd} + (P₂)_{ac}(P₂)_{bd} + (P₂)_{ad}(P₂)_{bc}],

with, for sampling with replacement, γ₂ = γ₃ = α₄ = B/N and β₄ = B(B−1)/N², and without
replacement, with π_k = B(B−1)…(B−k+1) / (N(N−1)…(N−k+1)) (the probability that k given
distinct indices are all in the batch),

    γ₂ = π₁ − π₂ = B(N−B)/(N(N−1)),   γ₃ = π₁ − 3π₂ + 2π₃,
    α₄ = π₁ − 7π₂ + 12π₃ − 6π₄,        β₄ = π₂ − 2π₃ + π₄

(Möbius inversion on the partition lattice of the index pattern; P₁ = 0 kills every
pattern with a singleton block). Only scalar contractions of these tensors are needed,
so the cost is O(N·D) plus O(N·D·min(N, D)) for ‖P₂‖²_F = Σ_{i,j}(d_iᵀd_j)² (the Gram
trick: ‖DᵀD‖_F = ‖DDᵀ‖_F); no D³ or D⁴ object is ever formed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.linalg.blas import dsyrk

from ..core._refs import cites
from ..core._validation import as_float_array, as_square, as_symmetric, as_vector, check_int, check_positive
from ..io.data import Dataset
from ..core.errors import ShapeError, SgtuneError
from ..models import GLM, checked_call, model_dim, prior_matrix

__all__ = [
    "MomentCoefficients",
    "MinibatchError",
    "PosteriorMinibatchError",
    "IncrementMoments",
    "NoiseAnisotropy",
    "minibatch_moment_coefficients",
    "minibatch_error",
    "minibatch_error_from_grads",
    "gaussian_minibatch_error",
    "posterior_minibatch_error",
    "gradient_estimate_terms",
    "increment_moments",
    "sglrw_move_probabilities",
    "sglrw_drift",
    "clipped_sgld_drift",
    "noise_anisotropy",
    "residual_anisotropy",
]


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class MomentCoefficients:
    """Coefficients of the batch-sum moments in the population power sums P_k = Σ_i d_i^{⊗k}.

    Attributes
    ----------
    second : γ₂ with E[S⊗S] = γ₂ P₂.
    third : γ₃ with E[S^{⊗3}] = γ₃ P₃.
    fourth_single : α₄, the coefficient of P₄ in E[S^{⊗4}].
    fourth_pair : β₄, the coefficient of each of the three pairings P₂⊗P₂ in E[S^{⊗4}].
    n_data, batch_size, replacement : the sampling scheme.

    Examples
    --------
    >>> c = minibatch_moment_coefficients(10, 3, replacement=False)
    >>> f"{c.second:.4f}", f"{c.fourth_pair:.4f}", c.replacement
    ('0.2333', '0.0500', False)
    """

    second: float
    third: float
    fourth_single: float
    fourth_pair: float
    n_data: int
    batch_size: int
    replacement: bool

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class MinibatchError:
    r"""Exact minibatch expectations of the second-order error terms at one θ.

    Attributes
    ----------
    frob2_sgld : E_𝔅‖M_SGLD‖²_F.
    frob2_sglrw : E_𝔅‖M_SGLRW‖²_F = E_𝔅‖offdiag M_SGLD‖²_F.
    diagonal_share : E‖diag M_SGLD‖²_F / E‖M_SGLD‖²_F (0 when there is no minibatch noise).
    ratio : frob2_sglrw / frob2_sgld = 1 − diagonal_share (1 when there is no noise).
    expected_m_sgld : (D, D) E_𝔅[M_SGLD] = G = Cov_𝔅[ζ], or ``None`` if not requested.
    expected_m_sglrw : (D, D) offdiag(G), or ``None``.
    noise_cov_trace : tr G = E‖ζ‖².
    noise_cov_diagonal : (D,) diag G.
    grad_potential : (D,) ∇U(θ) used.
    frob2_sgld_gaussian, frob2_sglrw_gaussian, diagonal_share_gaussian : the same three
        numbers when ζ ~ N(0, G) (the Gaussian-noise approximation).
    n_data, batch_size, replacement : the sampling scheme.
    noise_model : ``"exact"`` or ``"gaussian"``.

    Examples
    --------
    >>> u = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    >>> r = minibatch_error_from_grads(u, np.zeros(2), 1)
    >>> float(r.frob2_sgld), float(r.frob2_sglrw), f"{r.ratio:.4f}"
    (162.0, 54.0, '0.3333')
    """

    frob2_sgld: float
    frob2_sglrw: float
    diagonal_share: float
    ratio: float
    expected_m_sgld: np.ndarray | None
    expected_m_sglrw: np.ndarray | None
    noise_cov_trace: float
    noise_cov_diagonal: np.ndarray
    grad_potential: np.ndarray
    frob2_sgld_gaussian: float
    frob2_sglrw_gaussian: float
    diagonal_share_gaussian: float
    n_data: int
    batch_size: int
    replacement: bool
    noise_model: str = "exact"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class PosteriorMinibatchError:
    r"""Posterior-averaged error terms over θ draws (the E_cov term of Theorem 4.2, eq. 15).

    Attributes
    ----------
    frob2_sgld, frob2_sglrw : averages over the draws of E_𝔅‖M‖²_F.
    diagonal_share, ratio : computed from the averages (share = 1 − averaged SGLRW/SGLD).
    e_cov_sgld, e_cov_sglrw : (δ²/L) Σ_n E‖M_n‖²_F with δ = ``step_size`` (``None`` without it).
    per_draw_sgld, per_draw_sglrw : (L,) the per-draw values.
    standard_error_sgld, standard_error_sglrw : naive standard errors of the averages
        (std/√L; too small if the draws are autocorrelated).
    step_size : δ, or ``None`` when not given.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> ds = example("logistic")
    >>> r = posterior_minibatch_error(get_model("logistic"), ds, np.zeros((3, ds.dim)), 32, step_size=1e-3)
    >>> r.per_draw_sgld.shape, bool(np.isclose(r.e_cov_sgld, 1e-6 * r.frob2_sgld))
    ((3,), True)
    """

    frob2_sgld: float
    frob2_sglrw: float
    diagonal_share: float
    ratio: float
    e_cov_sgld: float | None
    e_cov_sglrw: float | None
    per_draw_sgld: np.ndarray
    per_draw_sglrw: np.ndarray
    standard_error_sgld: float
    standard_error_sglrw: float
    step_size: float | None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class IncrementMoments:
    """Conditional first and second moments of one increment Δθ given θ (eqs. 94–95, 103–106).

    Attributes
    ----------
    mean : (D,) ndarray
        E[Δθ | θ] = −δ∇U.
    second_moment : (D, D) ndarray
        E[ΔθΔθᵀ | θ].
    scheme : str
        ``"sgld"`` or ``"sglrw"``.
    step_size : float
        The step δ.

    Examples
    --------
    >>> u = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    >>> m = increment_moments(u, np.zeros(2), 1, 0.1, scheme="sglrw")
    >>> m.scheme, m.second_moment
    ('sglrw', array([[0.2 , 0.03],
           [0.03, 0.2 ]]))
    """

    mean: np.ndarray
    second_moment: np.ndarray
    scheme: str
    step_size: float

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class NoiseAnisotropy:
    """Covariance V of the minibatch estimate of ∇log p(θ|𝒟) and its whitening preconditioners.

    Attributes
    ----------
    noise_cov : (D, D) V.
    condition_number : κ(V) = λ_max/λ_min (``inf`` → reported as a string in JSON by the CLI).
    diagonal_preconditioner : (D,) p_j = √D σ_j / ‖σ‖ with σ_j = √V_jj (pSMILE, the SMILE paper (anonymous, 2025)
        appendix A: θ' = θ ⊙ p, so the noise of the gradient in θ' is V' = P⁻¹VP⁻¹).
    residual_condition_number_diagonal : κ(P⁻¹VP⁻¹) (the correlation matrix's condition number).
    residual_condition_number_cholesky : κ after exact whitening with L⁻¹ (V = LLᵀ): 1 up to rounding.
    eigenvalues : (D,) eigenvalues of V, ascending.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> ds = example("logistic")
    >>> r = noise_anisotropy(get_model("logistic"), ds, np.zeros(ds.dim), 32)
    >>> r.noise_cov.shape, f"{r.residual_condition_number_cholesky:.3f}"
    ((5, 5), '1.000')
    """

    noise_cov: np.ndarray
    condition_number: float
    diagonal_preconditioner: np.ndarray
    residual_condition_number_diagonal: float
    residual_condition_number_cholesky: float
    eigenvalues: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# ----------------------------------------------------------------------------- public API
@cites("sgtune", "finite-population moments of a batch sum up to 4th order (derived; sgtune.symbolic.minibatch)")
def minibatch_moment_coefficients(n_data: int, batch_size: int, *, replacement: bool = True) -> MomentCoefficients:
    r"""Compute the coefficients γ₂, γ₃, α₄, β₄ of E[S^{⊗k}] in the power sums P_k (module docstring).

    With replacement γ₂ = γ₃ = α₄ = B/N, β₄ = B(B−1)/N²; without replacement
    γ₂ = π₁−π₂, γ₃ = π₁−3π₂+2π₃, α₄ = π₁−7π₂+12π₃−6π₄, β₄ = π₂−2π₃+π₄ with
    π_k = B^{(k)}/N^{(k)} (falling factorials). Evaluated in exact rational arithmetic,
    then rounded once to float64, so there is no cancellation error.

    Parameters
    ----------
    n_data : int
        Population size N ≥ 1.
    batch_size : int
        Batch size B, 1 ≤ B (≤ N without replacement).
    replacement : bool
        Sampling with replacement (ordered B-tuples, default) or a uniform B-subset.

    Returns
    -------
    MomentCoefficients
        The four coefficients and the sampling scheme.

    References
    ----------
    Derived in sgtune (:func:`sgtune.symbolic.minibatch.moment_coefficients`); the
    second-order factor (N−B)/(N−1) is Wang, Ding & Huggins (2026) §2.1

    Examples
    --------
    >>> c = minibatch_moment_coefficients(10, 3, replacement=False)
    >>> bool(abs(c.second - 3 * 7 / 90) < 1e-15)
    True
    """
    n = check_int(n_data, "n_data", low=1)
    b = check_int(batch_size, "batch_size", low=1)
    if replacement:
        p = Fraction(b, n)
        g2 = g3 = a4 = p
        b4 = Fraction(b * (b - 1), n * n)
    else:
        if b > n:
            raise SgtuneError(f"batch_size must be <= N = {n} without replacement, got {b}; "
                              "use replacement=True or a smaller batch")
        pi = [Fraction(1)]
        for k in range(1, 5):
            pi.append(pi[-1] * Fraction(b - k + 1, n - k + 1) if k <= b else Fraction(0))
        g2 = pi[1] - pi[2]
        g3 = pi[1] - 3 * pi[2] + 2 * pi[3]
        a4 = pi[1] - 7 * pi[2] + 12 * pi[3] - 6 * pi[4]
        b4 = pi[2] - 2 * pi[3] + pi[4]
    return MomentCoefficients(float(g2), float(g3), float(a4), float(b4), n, b, bool(replacement))


@cites("mensch2025", "eq. 99 (M_SGLD), Lemma 4.3 / eq. 110 (M_SGLRW), eq. 92 (G), eq. 15 (E_cov integrand)")
def minibatch_error_from_grads(per_sample_grads: Any, grad_potential: Any, batch_size: int, *,
                               replacement: bool = True, return_matrices: bool = True) -> MinibatchError:
    r"""E_𝔅‖M‖²_F for M_SGLD = ζζᵀ + ∇Uζᵀ + ζ∇Uᵀ (eq. 99) and M_SGLRW = offdiag(M_SGLD) (eq. 110).

    With a = ∇U and ζ = (N/B) Σ_{i∈𝔅} d_i,

        ‖M_SGLD‖² = ‖ζ‖⁴ + 4(aᵀζ)‖ζ‖² + 2‖a‖²‖ζ‖² + 2(aᵀζ)²,
        ‖diag M_SGLD‖² = Σ_j ζ_j⁴ + 4a_jζ_j³ + 4a_j²ζ_j²,

    and the expectations follow from the batch-sum moments of
    :func:`minibatch_moment_coefficients`. E[M_SGLD] = G = (N/B)²γ₂ Σ_i d_i d_iᵀ and
    E[M_SGLRW] = offdiag(G).

    Parameters
    ----------
    per_sample_grads : (N, D) array
        The terms u_i = ∇_θ[−log p(y_i|x_i, θ)] of ∇U, one row per observation (Mensch et al. 2025 write
        g_i = −u_i). The sign matters for the third-moment terms.
    grad_potential : (D,) array
        The full gradient ∇U(θ) = −∇log p(θ) + Σ_i u_i (the prior enters here only).
    batch_size : int
        The batch size B (≤ N without replacement).
    replacement : bool
        Sampling with replacement (default) or without.
    return_matrices : bool
        Also form the (D, D) matrices G and offdiag(G) (O(N·D²)); without them the cost
        is O(N·D·min(N, D)).

    Returns
    -------
    MinibatchError
        The expectations, G = E[M_SGLD] and their Gaussian-noise counterparts.

    References
    ----------
    Mensch et al. (2025), eqs. 92, 99, 110, Lemma 4.3; fourth-order finite-population
    moments derived in sgtune.

    Examples
    --------
    >>> u = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    >>> r = minibatch_error_from_grads(u, np.zeros(2), 1)
    >>> r.expected_m_sgld
    array([[6., 3.],
           [3., 6.]])
    """
    U = as_float_array(per_sample_grads, "per_sample_grads", ndim=2)
    n, d = U.shape
    a = as_vector(grad_potential, "grad_potential", d)
    b = check_int(batch_size, "batch_size", low=1, high=None if replacement else n)
    C = U - U.mean(axis=0)
    C2 = C * C
    sq = C2.sum(axis=1)                        # |d_i|²
    proj = C @ a                               # aᵀd_i
    p2_frob2, P2 = _gram_frob2(C, need_matrix=return_matrices)
    sums = _RowSums(sq_sq=float(sq @ sq), proj_proj=float(proj @ proj), proj_sq=float(proj @ sq),
                    p2_diag=C2.sum(axis=0), p2_frob2=p2_frob2, P2=P2, tr_p2=float(sq.sum()),
                    cube=np.einsum("ij,ij->j", C2, C), quart=float(np.vdot(C2, C2)))
    return _error_from_sums(sums, a, n, b, replacement)


@dataclass(frozen=True)
class _RowSums:
    """Row sums of the centred per-sample gradients d_i the error constants need (eqs. 99, 110)."""

    sq_sq: float          # Σ|d_i|⁴
    proj_proj: float      # Σ(aᵀd_i)²
    proj_sq: float        # Σ(aᵀd_i)|d_i|²
    p2_diag: np.ndarray   # diag P₂, P₂ = Σ d_i d_iᵀ
    p2_frob2: float       # ‖P₂‖²_F
    P2: np.ndarray | None
    tr_p2: float          # Σ|d_i|²
    cube: np.ndarray      # Σ_i d_ij³
    quart: float          # Σ_ij d_ij⁴


def _chunk_minibatch_sums(X: np.ndarray, y: np.ndarray, model: Any, theta: np.ndarray, mean: np.ndarray,
                          a: np.ndarray) -> tuple[np.ndarray, ...]:
    """One chunk of the streamed :func:`minibatch_error` (rows out of core, :mod:`sgtune.io.reduce`)."""
    C = model.per_sample_grads(theta, X, y) - mean
    C2 = C * C
    sq = C2.sum(axis=1)
    proj = C @ a
    return (np.array([sq @ sq, proj @ proj, proj @ sq, sq.sum(), np.vdot(C2, C2)]), C2.sum(axis=0), C.T @ C,
            np.einsum("ij,ij->j", C2, C))


def _chunk_shifted_moments(X: np.ndarray, y: np.ndarray, model: Any, theta: np.ndarray, d: int,
                           shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One chunk of the streamed :func:`noise_anisotropy`: (Σ(u_i − c), Σ(u_i − c)(u_i − c)ᵀ)."""
    C = checked_call(model, "per_sample_grads", theta, X, y, shape=(X.shape[0], d)) - shift
    return C.sum(axis=0), C.T @ C


def _streamed_scatter(model: Any, data: Dataset, th: np.ndarray, d: int, scheduler: str | None) -> np.ndarray:
    """Σ_i (u_i − ū)(u_i − ū)ᵀ in one streamed pass (O(chunk·D + D²) memory).

    Shifted sums: with c the mean gradient of the first chunk (fixed rows, so the same c on every
    backend), Σ(u−ū)(u−ū)ᵀ = Σ(u−c)(u−c)ᵀ − N(ū−c)(ū−c)ᵀ; c ≈ ū keeps the cancellation small.
    """
    from ..io import reduce

    rows = data.rows
    assert rows is not None
    n, chunk = rows.n_rows, reduce.CHUNK_ROWS
    X0, y0 = rows.read(0, min(n, chunk))
    shift = checked_call(model, "per_sample_grads", th, X0, y0, shape=(X0.shape[0], d)).mean(axis=0)
    s1, s2 = reduce.reduce_rows(_chunk_shifted_moments, rows, model, th, d, shift, chunk_rows=chunk,
                                scheduler=scheduler)
    delta = s1 / n
    out = s2 - n * np.outer(delta, delta)
    return 0.5 * (out + out.T)


def _chunk_grad_sum(X: np.ndarray, y: np.ndarray, model: Any, theta: np.ndarray) -> tuple[np.ndarray]:
    return (model.per_sample_grads(theta, X, y).sum(axis=0),)


def _streamed_error(model: GLM, data: Dataset, th: np.ndarray, gam: np.ndarray, batch_size: int,
                    replacement: bool, scheduler: str | None) -> MinibatchError:
    """Two streamed passes (Σu_i, then the centred row sums); O(chunk·D + D²) memory."""
    from ..io.reduce import reduce_rows

    rows = data.rows
    assert rows is not None
    n = data.n_data
    b = check_int(batch_size, "batch_size", low=1, high=None if replacement else n)
    usum = reduce_rows(_chunk_grad_sum, rows, model, th, scheduler=scheduler)[0]
    a = gam @ th + usum
    sc, p2_diag, P2, cube = reduce_rows(_chunk_minibatch_sums, rows, model, th, usum / n, a, scheduler=scheduler)
    P2 = 0.5 * (P2 + P2.T)
    sums = _RowSums(sq_sq=float(sc[0]), proj_proj=float(sc[1]), proj_sq=float(sc[2]), p2_diag=p2_diag,
                    p2_frob2=float(np.vdot(P2, P2)), P2=P2, tr_p2=float(sc[3]), cube=cube, quart=float(sc[4]))
    return _error_from_sums(sums, a, n, b, replacement)


def _error_from_sums(S: _RowSums, a: np.ndarray, n: int, b: int, replacement: bool) -> MinibatchError:
    """Assemble E‖M_SGLD‖², E‖M_SGLRW‖² and G from the row sums (see minibatch_error_from_grads)."""
    coef = minibatch_moment_coefficients(n, b, replacement=replacement)
    s = n / b
    g2, g3, a4, b4 = coef.second, coef.third, coef.fourth_single, coef.fourth_pair
    p2_diag, p2_frob2, P2, tr_p2 = S.p2_diag, S.p2_frob2, S.P2, S.tr_p2

    # second order
    tr_g = s * s * g2 * tr_p2
    aga = s * s * g2 * S.proj_proj
    g_diag = s * s * g2 * p2_diag
    # third order (ζ = +s S)
    e_proj_norm2 = s**3 * g3 * S.proj_sq                                      # E[(aᵀζ)|ζ|²]
    e_cube = s**3 * g3 * float(S.cube @ a)                                    # Σ_j a_j E ζ_j³
    # fourth order
    e_norm4 = s**4 * (a4 * S.sq_sq + b4 * (tr_p2 * tr_p2 + 2.0 * p2_frob2))
    e_quart = s**4 * (a4 * S.quart + 3.0 * b4 * float(p2_diag @ p2_diag))
    a2 = float(a @ a)

    full = e_norm4 + 4.0 * e_proj_norm2 + 2.0 * a2 * tr_g + 2.0 * aga
    diag = e_quart + 4.0 * e_cube + 4.0 * float(a * a @ g_diag)
    # Gaussian approximation ζ ~ N(0, G): E|ζ|⁴ = (tr G)² + 2‖G‖², odd moments vanish, E ζ_j⁴ = 3G_jj²
    g_frob2 = (s * s * g2) ** 2 * p2_frob2
    full_g = tr_g * tr_g + 2.0 * g_frob2 + 2.0 * a2 * tr_g + 2.0 * aga
    diag_g = 3.0 * float(g_diag @ g_diag) + 4.0 * float(a * a @ g_diag)

    G = s * s * g2 * P2 if P2 is not None else None
    return _assemble(full, diag, full_g, diag_g, G, tr_g, g_diag, a, n, b, replacement, "exact")


@cites("mensch2025", "eq. 99 and eq. 110 with ζ ~ N(0, G) (Gaussian-noise approximation)")
def gaussian_minibatch_error(noise_cov: Any, grad_potential: Any) -> MinibatchError:
    r"""E‖M‖²_F of eqs. (99)/(110) when ζ ~ N(0, G): ‖G‖ terms only (Isserlis' theorem).

    E‖M_SGLD‖² = (tr G)² + 2‖G‖²_F + 2‖a‖² tr G + 2aᵀGa and
    E‖diag M_SGLD‖² = 3 Σ_j G_jj² + 4 Σ_j a_j² G_jj, a = ∇U. For isotropic G = gI and
    a = 0 the diagonal share is exactly 3/(D+2); for ‖a‖²/g → ∞ it tends to 2/(D+1).

    Parameters
    ----------
    noise_cov : (D, D) symmetric positive semi-definite array
        G = Cov[ζ].
    grad_potential : (D,) array
        The full gradient a = ∇U(θ).

    Returns
    -------
    MinibatchError
        ``noise_model == "gaussian"``; ``n_data`` and ``batch_size`` are 0.

    References
    ----------
    Mensch et al. (2025), eqs. 99, 110; Isserlis' theorem for the Gaussian moments.

    Examples
    --------
    >>> r = gaussian_minibatch_error(np.eye(3), np.zeros(3))   # isotropic, a = 0: share 3/(D+2)
    >>> f"{r.diagonal_share:.3f}", r.noise_model
    ('0.600', 'gaussian')
    """
    G = as_square(noise_cov, "noise_cov")
    d = G.shape[0]
    G = 0.5 * (G + G.T)
    a = as_vector(grad_potential, "grad_potential", d)
    tr_g = float(np.trace(G))
    g_diag = np.diag(G).copy()
    full = tr_g * tr_g + 2.0 * float(np.sum(G * G)) + 2.0 * float(a @ a) * tr_g + 2.0 * float(a @ G @ a)
    diag = 3.0 * float(g_diag @ g_diag) + 4.0 * float(a * a @ g_diag)
    return _assemble(full, diag, full, diag, G, tr_g, g_diag, a, 0, 0, True, "gaussian")


@cites("mensch2025", "eq. 6 (∇̂U), eq. 99, eq. 110 at θ; U = −log p(θ) − Σ_i log p(y_i|x_i,θ) (eq. 2)")
def minibatch_error(model: GLM, data: Dataset, theta: Any, batch_size: int, *,
                    prior_precision: Any = 0.0, replacement: bool = True,
                    return_matrices: bool = True, scheduler: str | None = None) -> MinibatchError:
    r"""E_𝔅‖M_SGLD‖²_F, E_𝔅‖M_SGLRW‖²_F and E_𝔅[M] at θ for a GLM (Mensch et al. 2025, eqs. 99, 110).

    ∇U(θ) = Γθ + Σ_i ∇l_i(θ) with l_i the model's per-observation loss (its negative
    log-likelihood up to a constant, :mod:`sgtune.models`) and Γ the prior precision.

    Parameters
    ----------
    model : GLM
        From :func:`sgtune.models.get_model`.
    data : Dataset
        (X, y).
    theta : (D,) array
        Where to evaluate.
    batch_size : int
        B.
    prior_precision : float or (D, D) array
        Γ (scalar G means Γ = G·I).
    replacement : bool
        With (default) or without replacement.
    return_matrices : bool
        Also return E[M_SGLD] = G and E[M_SGLRW] = offdiag(G) (always, for out-of-core data).
    scheduler : str, optional
        Out-of-core data (``data.rows``) are streamed in two chunked passes (Σu_i, then the
        centred row sums) in this process or on Dask ("local" or an address).

    Returns
    -------
    MinibatchError
        The expectations at θ, G = E[M_SGLD] and their Gaussian-noise counterparts.

    References
    ----------
    Mensch et al. (2025), eqs. 2, 6, 92, 99, 110.

    Examples
    --------
    >>> from sgtune.models import get_model
    >>> from sgtune.io.data import example
    >>> ds = example("logistic")
    >>> r = minibatch_error(get_model("logistic"), ds, np.zeros(ds.dim), 32)
    >>> bool(abs(r.ratio + r.diagonal_share - 1) < 1e-12)
    True
    """
    if data.rows is not None:  # out of core: two streamed passes, never the (N, D) gradients
        th = as_vector(theta, "theta", data.dim)
        model.check_response(data.y, data.source or "y")
        return _streamed_error(model, data, th, prior_matrix(prior_precision, data.dim), batch_size, replacement,
                               scheduler)
    u, a = gradient_estimate_terms(model, data, theta, prior_precision)
    return minibatch_error_from_grads(u, a, batch_size, replacement=replacement, return_matrices=return_matrices)


@cites("mensch2025", "eq. 15: E_cov = (δ²/L) Σ_n E‖M_n‖²_F (Theorem 4.2)")
def posterior_minibatch_error(model: GLM, data: Dataset, thetas: Any, batch_size: int, *,
                              prior_precision: Any = 0.0, replacement: bool = True,
                              step_size: float | None = None) -> PosteriorMinibatchError:
    r"""E_cov = (δ²/L) Σ_n E_𝔅‖M_n‖²_F (eq. 15) for SGLD and SGLRW over θ draws θ_1..θ_L.

    Parameters
    ----------
    model : GLM
        From :func:`sgtune.models.get_model`.
    data : Dataset
        The data (X, y).
    thetas : (L, D) array
        The θ draws, e.g. from a chain (or exact posterior draws).
    batch_size : int
        The batch size B.
    prior_precision : float or (D, D) array
        The prior precision Γ (a scalar G means Γ = G·I).
    replacement : bool
        With (default) or without replacement.
    step_size : float, optional
        The step δ; when given, ``e_cov_*`` = δ² × the averages.

    Returns
    -------
    PosteriorMinibatchError
        The averages over the draws, the per-draw values and their standard errors.

    References
    ----------
    Mensch et al. (2025), Theorem 4.2, eq. 15; Lemma 4.3.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> ds = example("logistic")
    >>> r = posterior_minibatch_error(get_model("logistic"), ds, np.zeros((2, ds.dim)), 32)
    >>> r.per_draw_sgld.shape, r.e_cov_sgld is None
    ((2,), True)
    """
    T = as_float_array(thetas, "thetas")
    if T.ndim == 1:
        T = T[None, :]
    d = model_dim(model, data.dim)
    if T.ndim != 2 or T.shape[1] != d:
        raise ShapeError(f"thetas must be (L, D) = (L, {d}) but has shape {T.shape}")
    if T.shape[0] < 1:
        raise ShapeError("thetas must contain at least one draw (L >= 1)")
    delta = None if step_size is None else check_positive(step_size, "step_size")
    full = np.empty(T.shape[0])
    off = np.empty(T.shape[0])
    gam = prior_matrix(prior_precision, d)
    for k, th in enumerate(T):
        r = minibatch_error(model, data, th, batch_size, prior_precision=gam, replacement=replacement,
                            return_matrices=False)
        full[k], off[k] = r.frob2_sgld, r.frob2_sglrw
    f, o = float(full.mean()), float(off.mean())
    share, ratio = _share_ratio(f, o)
    L = T.shape[0]
    se_f = float(full.std(ddof=1) / math.sqrt(L)) if L > 1 else 0.0
    se_o = float(off.std(ddof=1) / math.sqrt(L)) if L > 1 else 0.0
    return PosteriorMinibatchError(f, o, share, ratio,
                                   None if delta is None else delta * delta * f,
                                   None if delta is None else delta * delta * o,
                                   full, off, se_f, se_o, delta)


@cites("mensch2025", "eq. 2 (U as a sum over data) and eq. 6 (minibatch gradient)")
def gradient_estimate_terms(model: GLM, data: Dataset, theta: Any, prior_precision: Any = 0.0
                            ) -> tuple[np.ndarray, np.ndarray]:
    r"""Compute u_i = ∇_θ[−log p(y_i|x_i,θ)] (N, D) and ∇U(θ) = Γθ + Σ_i u_i (eq. 2, 6).

    Parameters
    ----------
    model : GLM
        From :func:`sgtune.models.get_model`.
    data : Dataset
        The data (X, y).
    theta : (D,) array
        Where to evaluate.
    prior_precision : float or (D, D) array
        The prior precision Γ (a scalar G means Γ = G·I).

    Returns
    -------
    per_sample_grads : (N, D) array
        The per-observation terms u_i.
    grad_potential : (D,) array
        The full gradient ∇U(θ).

    References
    ----------
    Mensch et al. (2025), eqs. 2 and 6.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> ds = example("logistic")
    >>> u, a = gradient_estimate_terms(get_model("logistic"), ds, np.zeros(ds.dim))
    >>> u.shape, bool(np.allclose(a, u.sum(axis=0)))   # no prior: ∇U = Σ_i u_i
    ((2000, 5), True)
    """
    d = model_dim(model, data.dim)
    th = as_vector(theta, "theta", d)
    gam = prior_matrix(prior_precision, d)
    if callable(getattr(model, "check_response", None)):
        model.check_response(data.y, data.source or "y")
    u = checked_call(model, "per_sample_grads", th, data.X, data.y, shape=(data.n_data, d))
    return u, gam @ th + u.sum(axis=0)


@cites("mensch2025", "eqs. 94–95 (SGLD) and 103–106 (SGLRW): E[Δθ|θ], E[ΔθΔθᵀ|θ]")
def increment_moments(per_sample_grads: Any, grad_potential: Any, batch_size: int, step_size: float, *,
                      scheme: str = "sgld", replacement: bool = True) -> IncrementMoments:
    r"""E[Δθ|θ] = −δ∇U and E[ΔθΔθᵀ|θ] = 2δI + δ²(∇U∇Uᵀ + G) (SGLD, eq. 95) or 2δI + δ² offdiag(∇U∇Uᵀ + G) (SGLRW, eq. 106).

    The SGLRW formula assumes that no move probability clips, i.e.
    √(δ/2)|∂̂_iU| ≤ 1 for every batch; once they clip the drift is the clipped-SGLD drift
    (:func:`sglrw_drift`) and eq. (106) no longer holds.

    Parameters
    ----------
    per_sample_grads : (N, D) array
        The per-observation terms u_i (see :func:`minibatch_error_from_grads`).
    grad_potential : (D,) array
        The full gradient ∇U(θ).
    batch_size : int
        The batch size B.
    step_size : float
        The step δ > 0.
    scheme : {"sgld", "sglrw"}
        The sampler.
    replacement : bool
        With (default) or without replacement.

    Returns
    -------
    IncrementMoments
        E[Δθ|θ] and E[ΔθΔθᵀ|θ].

    Raises
    ------
    SgtuneError
        If ``scheme`` is not ``"sgld"`` or ``"sglrw"``.

    References
    ----------
    Mensch et al. (2025), appendix A.3, eqs. 94, 95, 103, 106.

    Examples
    --------
    >>> u = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    >>> increment_moments(u, np.zeros(2), 1, 0.1).second_moment   # 2δI + δ²G
    array([[0.26, 0.03],
           [0.03, 0.26]])
    """
    if scheme not in ("sgld", "sglrw"):
        raise SgtuneError(f"scheme must be 'sgld' or 'sglrw', got {scheme!r}")
    delta = check_positive(step_size, "step_size")
    r = minibatch_error_from_grads(per_sample_grads, grad_potential, batch_size, replacement=replacement)
    a = r.grad_potential
    d = a.shape[0]
    extra = np.outer(a, a) + r.expected_m_sgld  # type: ignore[operator]
    if scheme == "sglrw":
        extra = extra - np.diag(np.diag(extra))
    return IncrementMoments(-delta * a, 2.0 * delta * np.eye(d) + delta * delta * extra, scheme, delta)


@cites("mensch2025", "eq. 12 (SGLRW move probabilities), clipped to [0, 1] as in §4.3.1")
def sglrw_move_probabilities(grad_estimate: Any, step_size: float) -> tuple[np.ndarray, np.ndarray]:
    r"""P(Δθ_i = +√(2δ)) = clip(½ − ½√(δ/2) ∂̂_iU, 0, 1) (eq. 12, clipped) and the clip indicator.

    Parameters
    ----------
    grad_estimate : array
        ∇̂U(θ; 𝔅), any shape (e.g. (particles, D)).
    step_size : float
        The step δ > 0.

    Returns
    -------
    p_plus : array
        Probability of the +√(2δ) move, same shape.
    clipped : bool array
        True where √(δ/2)|∂̂_iU| > 1 (the unclipped probability left [0, 1]).

    References
    ----------
    Mensch et al. (2025), eq. 12 and §4.3.1.

    Examples
    --------
    >>> p_plus, clipped = sglrw_move_probabilities([0.0, 1.0, 100.0], 0.5)
    >>> p_plus, clipped
    (array([0.5 , 0.25, 0.  ]), array([False, False,  True]))
    """
    g = as_float_array(grad_estimate, "grad_estimate")
    delta = check_positive(step_size, "step_size")
    z = math.sqrt(delta / 2.0) * g
    return np.clip(0.5 - 0.5 * z, 0.0, 1.0), np.abs(z) > 1.0


@cites("mensch2025", "eq. 103 (SGLRW conditional drift), with clipped probabilities")
def sglrw_drift(grad_estimate: Any, step_size: float) -> np.ndarray:
    r"""E[Δθ | θ, 𝔅] = √(2δ)(2p₊ − 1) for SGLRW with clipped move probabilities.

    Without clipping this is −δ∇̂U (eq. 103); with clipping it equals −clip(δ∇̂U; √(2δ)),
    the clipped-SGLD drift of eq. (18).

    Parameters
    ----------
    grad_estimate : array
        ∇̂U(θ; 𝔅).
    step_size : float
        The step δ > 0.

    Returns
    -------
    array
        The conditional drift, the shape of ``grad_estimate``.

    References
    ----------
    Mensch et al. (2025), eqs. 12, 103, 18.

    Examples
    --------
    >>> sglrw_drift([0.0, 1.0, 100.0], 0.5)   # −δ∇̂U, clipped at √(2δ) = 1
    array([ 0. , -0.5, -1. ])
    """
    p, _ = sglrw_move_probabilities(grad_estimate, step_size)
    return math.sqrt(2.0 * float(step_size)) * (2.0 * p - 1.0)


@cites("mensch2025", "eq. 18: drift −clip(δ∇̂U; R), R = √(2δ), componentwise")
def clipped_sgld_drift(grad_estimate: Any, step_size: float) -> np.ndarray:
    r"""−clip(δ∇̂U; √(2δ)) with clip(x; R)_i = sign(x_i) min(|x_i|, R) (eq. 18).

    Parameters
    ----------
    grad_estimate : array
        ∇̂U(θ; 𝔅).
    step_size : float
        The step δ > 0.

    Returns
    -------
    array
        The clipped drift, the shape of ``grad_estimate``.

    References
    ----------
    Mensch et al. (2025), eq. 18.

    Examples
    --------
    >>> clipped_sgld_drift([0.0, 1.0, 100.0], 0.5)   # the SGLRW drift
    array([-0. , -0.5, -1. ])
    """
    g = as_float_array(grad_estimate, "grad_estimate")
    delta = check_positive(step_size, "step_size")
    R = math.sqrt(2.0 * delta)
    return -np.clip(delta * g, -R, R)


@cites("smile2025", "appendix A (anisotropic minibatch noise; pSMILE diagonal preconditioner)")
def noise_anisotropy(model: GLM, data: Dataset, theta: Any, batch_size: int, *,
                     replacement: bool = True, scheduler: str | None = None) -> NoiseAnisotropy:
    r"""V = Cov_𝔅[(N/B)Σ_{i∈𝔅}∇log p(y_i|x_i,θ)] = (N²/B)·f·Cov_i ∇log p_i, its condition number and the pSMILE preconditioner.

    f = 1 with replacement and (N−B)/(N−1) without (Cov_i is the population covariance).
    The diagonal preconditioner p = √D σ/‖σ‖, σ_j = √V_jj, rescales θ' = θ ⊙ p (the SMILE paper,
    anonymous, 2025, appendix A); the noise of the gradient in θ' is P⁻¹VP⁻¹, whose condition number is
    that of the correlation matrix of V. Exact whitening with the Cholesky factor leaves
    condition number 1.

    Parameters
    ----------
    model : GLM
        From :func:`sgtune.models.get_model`.
    data : Dataset
        The data (X, y).
    theta : (D,) array
        Where to evaluate.
    batch_size : int
        The batch size B.
    replacement : bool
        With (default) or without replacement.
    scheduler : str, optional
        For data read out of core (``data.rows``: a folder or Parquet file): None (this process),
        "local" or a Dask scheduler address. Such data are streamed in one pass over fixed row
        chunks, Σ(u_i − c)(u_i − c)ᵀ and Σ(u_i − c) with c the first chunk's mean gradient, so
        memory is O(chunk·D + D²) and the (N, D) gradients are never formed.

    Returns
    -------
    NoiseAnisotropy
        V, its condition number and eigenvalues, and the pSMILE preconditioner with what it leaves.

    Raises
    ------
    SgtuneError
        If some coordinate has no gradient noise (V_jj = 0).

    References
    ----------
    The SMILE paper (anonymous, 2025), appendix A.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> ds = example("logistic")
    >>> r = noise_anisotropy(get_model("logistic"), ds, np.zeros(ds.dim), 32)
    >>> bool(r.condition_number >= r.residual_condition_number_diagonal >= 1)
    True
    """
    n, d = data.n_data, model_dim(model, data.dim)
    th = as_vector(theta, "theta", d)
    b = check_int(batch_size, "batch_size", low=1, high=None if replacement else n)
    coef = minibatch_moment_coefficients(n, b, replacement=replacement)
    if data.rows is not None:
        scatter = _streamed_scatter(model, data, th, d, scheduler)
    else:
        u = checked_call(model, "per_sample_grads", th, data.X, data.y, shape=(n, d))
        C = u - u.mean(axis=0)
        scatter = C.T @ C
    V = (n / b) ** 2 * coef.second * scatter
    V = 0.5 * (V + V.T)
    lam = np.linalg.eigvalsh(V)
    cond = _condition(lam)
    sig = np.sqrt(np.clip(np.diag(V), 0.0, None))
    if np.any(sig <= 0):
        raise SgtuneError("noise_anisotropy: some coordinate has zero gradient noise (V_jj = 0), so the "
                          "diagonal preconditioner is undefined; drop constant columns or use B < N")
    p = math.sqrt(d) * sig / np.linalg.norm(sig)
    Vd = V / np.outer(p, p)
    res_diag = _condition(np.linalg.eigvalsh(0.5 * (Vd + Vd.T)))
    try:
        Lc = np.linalg.cholesky(V)
        W = np.linalg.solve(Lc, np.linalg.solve(Lc, V).T)
        res_chol = _condition(np.linalg.eigvalsh(0.5 * (W + W.T)))
    except np.linalg.LinAlgError:
        res_chol = math.inf
    return NoiseAnisotropy(V, cond, p, res_diag, res_chol, lam)


@cites("smile2025", "appendix A / section 3.2: noise of the gradient in θ' = θ ⊙ p is P⁻¹VP⁻¹")
def residual_anisotropy(noise_cov: Any, preconditioner: Any) -> float:
    r"""Compute κ(P⁻¹VP⁻¹) = λ_max/λ_min, P = diag(p): the anisotropy left by a diagonal preconditioner.

    In pSMILE's coordinates θ' = θ ⊙ p (the SMILE paper, anonymous, 2025, section 3.2 and appendix A) the
    minibatch gradient is g' = g / p, whose covariance is P⁻¹VP⁻¹. Its condition number is 1 for
    isotropic noise; for the ideal diagonal preconditioner p ∝ √diag V it is the condition number
    of the correlation matrix of V (``NoiseAnisotropy.residual_condition_number_diagonal``), and
    for p = 1 that of V itself. Use it to score a preconditioner a sampler converged to (e.g.
    ``ChainResult.preconditioner`` of pSMILE) against that ideal. κ is invariant to the scale of p.

    Parameters
    ----------
    noise_cov : (D, D) array
        V, symmetric positive semi-definite (e.g. ``noise_anisotropy(...).noise_cov``).
    preconditioner : (D,) array
        The preconditioner p > 0.

    Returns
    -------
    float
        The condition number κ(P⁻¹VP⁻¹); ``inf`` when P⁻¹VP⁻¹ is singular.

    Raises
    ------
    SgtuneError
        If some p_j ≤ 0.

    References
    ----------
    The SMILE paper (anonymous, 2025), section 3.2 and appendix A.

    Examples
    --------
    >>> V = np.diag([1.0, 4.0])
    >>> float(residual_anisotropy(V, [1.0, 1.0])), float(residual_anisotropy(V, [1.0, 2.0]))
    (4.0, 1.0)
    """
    V = as_symmetric(noise_cov, "noise_cov", rtol=1e-10)
    d = V.shape[0]
    p = as_vector(preconditioner, "preconditioner", d)
    if not np.all(p > 0):
        raise SgtuneError(f"preconditioner must be positive in every coordinate, got min {float(p.min()):.3g}; "
                          "pass p > 0 (e.g. ChainResult.preconditioner of a pSMILE chain)")
    return _condition(np.linalg.eigvalsh(V / np.outer(p, p)))


# ----------------------------------------------------------------------------- helpers
def _gram_frob2(C: np.ndarray, *, need_matrix: bool) -> tuple[float, np.ndarray | None]:
    """‖CᵀC‖²_F via the smaller Gram matrix (O(N·D·min(N, D))), and CᵀC if asked.

    Uses the BLAS rank-k update ``dsyrk`` on the (free) Fortran-ordered transpose:
    numpy's ``C.T @ C`` is 10–50× slower here for tall C.
    """
    n, d = C.shape
    Ct = C.T  # F-contiguous view of C (no copy)
    if need_matrix or d <= n:
        T = dsyrk(1.0, Ct, trans=0)            # upper triangle of CᵀC
    else:
        T = dsyrk(1.0, Ct, trans=1)            # upper triangle of CCᵀ (same Frobenius norm)
    T = np.triu(T)
    diag = np.diag(T)
    frob2 = 2.0 * float(np.vdot(T, T)) - float(diag @ diag)
    if not need_matrix:
        return frob2, None
    return frob2, T + np.triu(T, 1).T


def _share_ratio(full: float, off: float) -> tuple[float, float]:
    if full <= 0.0:
        return 0.0, 1.0
    off = min(max(off, 0.0), full)
    return 1.0 - off / full, off / full


def _assemble(full: float, diag: float, full_g: float, diag_g: float, G: np.ndarray | None, tr_g: float,
              g_diag: np.ndarray, a: np.ndarray, n: int, b: int, replacement: bool, kind: str) -> MinibatchError:
    d = a.shape[0]
    off = 0.0 if d == 1 else max(full - diag, 0.0)
    off_g = 0.0 if d == 1 else max(full_g - diag_g, 0.0)
    share, ratio = _share_ratio(full, off)
    share_g, _ = _share_ratio(full_g, off_g)
    G_off = None if G is None else G - np.diag(np.diag(G))
    return MinibatchError(float(full), float(off), share, ratio, G, G_off, float(tr_g), g_diag, a,
                          float(full_g), float(off_g), share_g, n, b, bool(replacement), kind)


def _condition(eigenvalues: np.ndarray) -> float:
    lo, hi = float(eigenvalues[0]), float(eigenvalues[-1])
    if lo <= 0.0 or hi <= 0.0:
        return math.inf
    return hi / lo
