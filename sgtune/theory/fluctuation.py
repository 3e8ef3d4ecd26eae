"""Small-stepsize fluctuation constants of non-reversible SG Langevin samplers (the GNLD paper, anonymous 2025).

Generalised non-reversible Langevin dynamics (GNLD)

    dZ = −(D + Q) ∇H(Z) dt + sqrt(2D) dW,   D SPD, Q antisymmetric,

discretised by SG Euler–Maruyama, Z_{k+1} = Z_k − η (D+Q) ĝ_k + sqrt(2η) D^{1/2} ξ_k. With
K ≍ η⁻² iterations the time average Π_η f = (1/K) Σ_k f(Z_k) satisfies
η^{−1/2}(Π_η f − πf) ⇒ N(0, σ²), σ² = 2∫φ(−𝓛φ)dπ (Theorem 3.2). For a quadratic
H(z) = ½ zᵀMz and a linear observable f(z) = ℓᵀz everything is explicit (§2.2):

    σ²  = 2 bᵀ (D + QᵀD⁻¹Q)⁻¹ b,   b = M⁻¹ℓ,      σ_R² = 2 bᵀ D⁻¹ b   (Q = 0).

Public functions (listed first):

- :func:`solve_fluctuation_general` — any (M, D, Q, ℓ);
- :func:`solve_fluctuation_nld`, :func:`solve_fluctuation_hfhr`, :func:`solve_fluctuation_gaul`
  — the three examples of the paper, with position observables for augmented states;
- :func:`augmented_position_fluctuation` — the Schur-complement route
  σ² = 2 wᵀ Schur(K)⁻¹ w for augmented states with kinetic energy |v|²/2;
- :func:`max_stable_step` — largest η with spectral radius of I − η(D+Q)M below 1;
- :func:`optimal_antisymmetric_nld`, :func:`spectral_gap_optimal_nld` — §2.4 (beyond the paper);
- :func:`predict_time_average_variance` — exact finite-η, finite-K variance of the time
  average of the SG-EM chain on a Bayesian linear regression posterior (oracle for tests);
- :func:`estimate_fluctuation_from_chains` — batch-means estimate of σ² and of the ratio
  to a baseline, with standard errors, for non-quadratic targets.
"""
from __future__ import annotations

import math

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import special  # not scipy.stats: its import costs ~1 s per sgtune process

from ..core._refs import cites
from ..core._validation import as_float_array, as_spd, as_square, as_vector, check_int, check_positive
from ..core.errors import NotPositiveDefiniteError, SgtuneError, ShapeError

__all__ = [
    "FluctuationResult",
    "OptimalAntisymmetric",
    "SpectralGapOptimal",
    "FluctuationEstimate",
    "NotAntisymmetricError",
    "solve_fluctuation_general",
    "solve_fluctuation_nld",
    "solve_fluctuation_hfhr",
    "solve_fluctuation_gaul",
    "augmented_position_fluctuation",
    "hfhr_matrices",
    "gaul_matrices",
    "max_stable_step",
    "optimal_antisymmetric_nld",
    "spectral_gap_optimal_nld",
    "blr_gradient_noise_moments",
    "blr_gradient_noise_cov",
    "predict_time_average_variance",
    "estimate_fluctuation_from_chains",
]


class NotAntisymmetricError(SgtuneError, ValueError):
    """A matrix that must be antisymmetric (Q = −Qᵀ) is not."""


@dataclass(frozen=True, slots=True)
class FluctuationResult:
    """Fluctuation constants of a GNLD scheme and of its reversible baseline (same D, Q = 0).

    Attributes
    ----------
    sigma2, sigma2_reversible : float
        σ² and σ_R²; ``Var(Π_η f) ≈ σ²/(Kη)`` for K iterations of step η.
    ratio : float
        σ²/σ_R² ≤ 1 (Theorem 3.5).
    reduction : float
        σ_R² − σ² = 2 (QD⁻¹b)ᵀ(D + QᵀD⁻¹Q)⁻¹(QD⁻¹b) ≥ 0, computed from that formula.
    max_stable_step, max_stable_step_reversible : float
        Largest η with spectral radius of I − η(D+Q)M (resp. I − ηDM) below 1.
    equal_cost_ratio : float
        (σ²/η_max)/(σ_R²/η_max,R): the variance ratio when each scheme runs the same number
        of iterations at the same fraction of its own largest stable step.
    poisson_coefficient, poisson_coefficient_reversible : ndarray
        a with φ(z) = aᵀz solving −𝓛φ = f − πf, i.e. M(D − Q)a = ℓ.
    scheme : str
        ``"general"``, ``"nld"``, ``"hfhr"`` or ``"gaul"``.
    diffusion, antisymmetric, hessian : ndarray
        D, Q and M of the full state.

    Examples
    --------
    >>> import numpy as np
    >>> r = solve_fluctuation_nld(np.eye(2), [1.0, 0.0], [[0.0, 2.0], [-2.0, 0.0]])
    >>> r.scheme, f"{r.sigma2:.3f}", f"{r.sigma2_reversible:.3f}", f"{r.ratio:.3f}"
    ('nld', '0.400', '2.000', '0.200')
    """

    sigma2: float
    sigma2_reversible: float
    ratio: float
    reduction: float
    max_stable_step: float
    max_stable_step_reversible: float
    equal_cost_ratio: float
    poisson_coefficient: np.ndarray
    poisson_coefficient_reversible: np.ndarray
    scheme: str
    diffusion: np.ndarray = field(repr=False)
    antisymmetric: np.ndarray = field(repr=False)
    hessian: np.ndarray = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (arrays stay arrays; ``sgtune.io._json.dumps`` turns them into lists)."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class OptimalAntisymmetric:
    """Variance-optimal NLD antisymmetric matrix under ‖D^{-1/2}JD^{-1/2}‖₂ ≤ κ.

    Attributes
    ----------
    antisymmetric : ndarray
        J attaining the minimum.
    budget : float
        κ.
    sigma2, sigma2_reversible, ratio : float
        σ²(J) (from the general solver), σ_R², and their ratio, which equals the bound.
    bound_ratio : float
        1/(1+κ²), the minimum of σ²/σ_R² over the budget set.

    Examples
    --------
    >>> import numpy as np
    >>> r = optimal_antisymmetric_nld(np.diag([1.0, 4.0]), [1.0, 1.0], budget=2.0)
    >>> r.antisymmetric.shape, f"{r.ratio:.3f}", f"{r.bound_ratio:.3f}"
    ((2, 2), '0.200', '0.200')
    """

    antisymmetric: np.ndarray
    budget: float
    sigma2: float
    sigma2_reversible: float
    ratio: float
    bound_ratio: float

    def to_dict(self) -> dict[str, Any]:
        """Plain dict."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SpectralGapOptimal:
    """Spectral-gap-optimal NLD antisymmetric matrix (Lelièvre, Nier & Pavliotis 2013).

    Attributes
    ----------
    antisymmetric : ndarray
        J such that every eigenvalue of (D+J)A has real part tr(DA)/d.
    spectral_gap : float
        min Re λ((D+J)A), equal to tr(DA)/d (the largest achievable).
    spectral_gap_reversible : float
        λ_min(DA), the gap of the reversible baseline.
    budget : float
        κ = ‖D^{-1/2}JD^{-1/2}‖₂ of this J.
    sigma2, sigma2_reversible, ratio : float
        σ² of this J for the given observable, σ_R², their ratio.
    variance_optimal_ratio : float
        1/(1+κ²): what the variance-optimal J achieves with the same budget.

    Examples
    --------
    >>> import numpy as np
    >>> r = spectral_gap_optimal_nld(np.diag([1.0, 3.0]), [1.0, 0.0])
    >>> f"{r.spectral_gap:.3f}", f"{r.spectral_gap_reversible:.3f}", f"{r.budget:.3f}"
    ('2.000', '1.000', '1.732')
    """

    antisymmetric: np.ndarray
    spectral_gap: float
    spectral_gap_reversible: float
    budget: float
    sigma2: float
    sigma2_reversible: float
    ratio: float
    variance_optimal_ratio: float

    def to_dict(self) -> dict[str, Any]:
        """Plain dict."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class FluctuationEstimate:
    """Batch-means estimate of σ² (and of σ²/σ_R² when a baseline is given).

    Attributes
    ----------
    sigma2, sigma2_standard_error : float
        σ̂² = η·L·(sample variance of batch means), pooled over chains, and its standard error
        (spread of the per-chain estimates, or the χ² formula for one chain).
    n_chains, n_batches, batch_length : int
        Layout used.
    sigma2_baseline, sigma2_baseline_standard_error : float or None
        The same for the baseline trajectories.
    ratio, ratio_standard_error : float or None
        σ̂²/σ̂²_R and its delta-method standard error (independent runs).
    ratio_interval : tuple of float or None
        95 % interval for the ratio, exp(log r ± 1.96·SE(log r)).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> est = estimate_fluctuation_from_chains(rng.standard_normal((8, 4000)), 0.5, n_batches=10,
    ...                                        baseline=rng.standard_normal((8, 4000)))
    >>> est.n_chains, est.n_batches, est.batch_length
    (8, 10, 400)
    >>> lo, hi = est.ratio_interval   # two iid runs: the true ratio is 1
    >>> bool(lo < est.ratio < hi)
    True
    """

    sigma2: float
    sigma2_standard_error: float
    n_chains: int
    n_batches: int
    batch_length: int
    sigma2_baseline: float | None = None
    sigma2_baseline_standard_error: float | None = None
    ratio: float | None = None
    ratio_standard_error: float | None = None
    ratio_interval: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict."""
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------

@cites("gnld2025", "Prop. 5.2, Eqs. (5.3)-(5.4); Thm. 3.5")
def solve_fluctuation_general(hessian: Any, diffusion: Any, antisymmetric: Any,
                              observable: Any, *, scheme: str = "general") -> FluctuationResult:
    r"""Asymptotic variances σ² = 2bᵀ(D + QᵀD⁻¹Q)⁻¹b and σ_R² = 2bᵀD⁻¹b, b = M⁻¹ℓ (GNLD paper, anonymous 2025, Prop. 5.2, Eqs. (5.3)-(5.4)).

    Quadratic Hamiltonian H(z) = ½zᵀMz, linear observable f(z) = ℓᵀz, GNLD drift −(D+Q)Mz,
    diffusion sqrt(2D). The Poisson solution is φ(z) = aᵀz with M(D − Q)a = ℓ, and
    σ² = 2aᵀDa = 2bᵀ(D+Q)⁻¹b = 2bᵀ(D + QᵀD⁻¹Q)⁻¹b.

    Parameters
    ----------
    hessian : array_like, (n, n)
        M, symmetric positive definite.
    diffusion : array_like, (n, n)
        D, symmetric positive definite.
    antisymmetric : array_like, (n, n)
        Q, antisymmetric (Qᵀ = −Q).
    observable : array_like, (n,)
        The observable ℓ.
    scheme : str, optional
        Label stored in the result.

    Returns
    -------
    FluctuationResult
        The constants σ², σ_R², their ratio and difference, the largest stable Euler steps and the
        Poisson solutions.

    Raises
    ------
    NotPositiveDefiniteError
        M or D is not symmetric positive definite.
    NotAntisymmetricError
        Q is not antisymmetric.
    ShapeError
        Shapes do not match.

    Notes
    -----
    The reduction σ_R² − σ² is computed from the separate formula
    2(QD⁻¹b)ᵀ(D + QᵀD⁻¹Q)⁻¹(QD⁻¹b), which is ≥ 0 (Theorem 3.5) and exactly 0 iff QD⁻¹b = 0.

    References
    ----------
    The GNLD paper (anonymous, 2025), *Variance Reduction for SG Generalized Non-reversible Langevin MC*, Prop. 5.2.

    Examples
    --------
    >>> import numpy as np
    >>> r = solve_fluctuation_general(np.eye(2), np.eye(2), [[0, 1.0], [-1.0, 0]], [1.0, 0])
    >>> bool(np.isclose(r.sigma2, 1.0) and np.isclose(r.sigma2_reversible, 2.0))
    True
    """
    m = as_spd(hessian, "hessian")
    n = m.shape[0]
    d = as_spd(diffusion, "diffusion", n)
    q = _as_antisymmetric(antisymmetric, "antisymmetric", n)
    ell = as_vector(observable, "observable", n)
    return _solve(m, d, q, ell, scheme)


@cites("gnld2025", "Sec. 4.1 (4.1)-(4.2); Cor. 5.5, Eqs. (5.5)-(5.7)")
def solve_fluctuation_nld(hessian: Any, observable: Any, antisymmetric: Any,
                          diffusion: Any | None = None) -> FluctuationResult:
    r"""NLD: σ² = 2wᵀ(D + JᵀD⁻¹J)⁻¹w vs σ_R² = 2wᵀD⁻¹w, w = A⁻¹ℓ (GNLD paper, anonymous 2025, Eqs. (5.5)-(5.6)).

    dX = −(D + J)∇U(X)dt + sqrt(2D)dW with U(x) = ½xᵀAx; with D = I this is
    σ² = 2wᵀ(I − J²)⁻¹w (Cor. 5.5, Eq. (5.7)) vs σ_R² = 2|w|².

    Parameters
    ----------
    hessian : array_like, (d, d)
        A, symmetric positive definite.
    observable : array_like, (d,)
        The observable ℓ.
    antisymmetric : array_like, (d, d)
        J, antisymmetric.
    diffusion : array_like, (d, d), optional
        D (default the identity), symmetric positive definite.

    Returns
    -------
    FluctuationResult
        With ``scheme="nld"``.

    Raises
    ------
    NotPositiveDefiniteError
        A or D is not SPD.
    NotAntisymmetricError
        J is not antisymmetric.

    Examples
    --------
    >>> import numpy as np
    >>> r = solve_fluctuation_nld(np.eye(2), [1.0, 0.0], [[0.0, 2.0], [-2.0, 0.0]])
    >>> bool(np.isclose(r.ratio, 1 / 5))
    True
    """
    a = as_spd(hessian, "hessian")
    n = a.shape[0]
    d = np.eye(n) if diffusion is None else as_spd(diffusion, "diffusion", n)
    j = _as_antisymmetric(antisymmetric, "antisymmetric", n)
    ell = as_vector(observable, "observable", n)
    return _solve(a, d, j, ell, "nld")


@cites("gnld2025", "Sec. 4.2 (4.5)-(4.9); Cor. 5.7, Eqs. (5.8)-(5.9)")
def solve_fluctuation_hfhr(hessian: Any, observable: Any, alpha: float,
                           gamma: float) -> FluctuationResult:
    r"""HFHR: σ² = 2γ/(1+αγ)|w|² vs σ_R² = (2/α)|w|², w = A⁻¹ℓ (GNLD paper, anonymous 2025, Cor. 5.7, Eq. (5.8)).

    State (x, v), H = U(x) + |v|²/2, D = diag(αI, γI), Q = [[0, −I], [I, 0]]; the position
    observable is f(x, v) = ℓᵀx. The result is computed by the general solver on the augmented
    state; the ratio is the scalar αγ/(1+αγ) (Eq. (5.9)).

    Parameters
    ----------
    hessian : array_like, (d, d)
        A, symmetric positive definite.
    observable : array_like, (d,)
        The observable ℓ (its position part).
    alpha, gamma : float
        The friction parameters α > 0 and γ > 0.

    Returns
    -------
    FluctuationResult
        With ``scheme="hfhr"``; matrices are those of the 2d-dimensional state.

    Raises
    ------
    NotPositiveDefiniteError
        A is not SPD.
    SgtuneError
        α or γ is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> r = solve_fluctuation_hfhr(np.eye(2), [1.0, 0.0], alpha=1.0, gamma=2.0)
    >>> bool(np.isclose(r.ratio, 2 / 3))
    True
    """
    a = as_spd(hessian, "hessian")
    n = a.shape[0]
    ell = as_vector(observable, "observable", n)
    dmat, qmat = hfhr_matrices(alpha, gamma, n)
    return _solve_augmented(a, ell, dmat, qmat, "hfhr")


@cites("gnld2025", "Sec. 4.3 (4.12)-(4.19); Cor. 5.10, Eqs. (5.15)-(5.16)")
def solve_fluctuation_gaul(hessian: Any, observable: Any, a: float, gamma: float,
                           preconditioner: Any | None = None) -> FluctuationResult:
    r"""GAUL: σ² = 2γ/(1+aγ) wᵀC⁻¹w vs σ_R² = 2wᵀS⁻¹w, S = aC − (C−I)²/(4γ) (GNLD paper, anonymous 2025, Eqs. (5.15)-(5.16)).

    Drift matrix K = D + Q = [[aC, −I], [C, γI]] on the state (x, v), H = U(x) + |v|²/2,
    D = sym K = [[aC, (C−I)/2], [(C−I)/2, γI]] (must be positive definite: the paper's
    "positive-definite subclass"), Q = [[0, −(C+I)/2], [(C+I)/2, 0]]. Reduces to HFHR for
    C = I, a = α. The block layout of K is reconstructed from the paper's prose;
    σ² only depends on K through Schur complements, see :func:`augmented_position_fluctuation`.

    Parameters
    ----------
    hessian : array_like, (d, d)
        A, symmetric positive definite.
    observable : array_like, (d,)
        The observable ℓ (its position part).
    a, gamma : float
        The GAUL parameters a > 0 and γ > 0.
    preconditioner : array_like, (d, d), optional
        C, symmetric positive definite (default the identity).

    Returns
    -------
    FluctuationResult
        With ``scheme="gaul"``.

    Raises
    ------
    NotPositiveDefiniteError
        A or C is not SPD, or the symmetric part D is not positive definite (the message gives
        the smallest eigenvalue of S = aC − (C−I)²/(4γ) and the fix).

    Examples
    --------
    >>> import numpy as np
    >>> r = solve_fluctuation_gaul(np.eye(2), [1.0, 0.0], a=1.0, gamma=2.0)
    >>> bool(np.isclose(r.ratio, 2 / 3))   # C = I: the HFHR factor aγ/(1+aγ)
    True
    """
    amat = as_spd(hessian, "hessian")
    n = amat.shape[0]
    ell = as_vector(observable, "observable", n)
    cmat = np.eye(n) if preconditioner is None else as_spd(preconditioner, "preconditioner", n)
    dmat, qmat = gaul_matrices(a, gamma, cmat)
    return _solve_augmented(amat, ell, dmat, qmat, "gaul")


@cites("gnld2025", "Cor. 5.7/5.10 proofs (Schur complements)")
def augmented_position_fluctuation(hessian: Any, observable: Any, drift: Any) -> tuple[float, float]:
    r"""Asymptotic variances σ² = 2wᵀSchur(K)⁻¹w and σ_R² = 2wᵀSchur(sym K)⁻¹w for augmented states (GNLD paper, anonymous 2025, proofs of Cor. 5.7, 5.10).

    State (x, v) ∈ R^{2d}, H = ½xᵀAx + ½|v|², drift matrix K = D + Q (blocks K_xx, K_xv, K_vx,
    K_vv), position observable ℓᵀx, w = A⁻¹ℓ. Since b = (w, 0), σ² = 2bᵀ(K⁻¹)b only needs the
    (x, x) block of K⁻¹, which is the inverse of the Schur complement
    Schur(K) = K_xx − K_xv K_vv⁻¹ K_vx. This route is independent of the full-state solve in
    :func:`solve_fluctuation_general` and is used to cross-check it.

    Parameters
    ----------
    hessian : array_like, (d, d)
        A, symmetric positive definite.
    observable : array_like, (d,)
        The observable ℓ.
    drift : array_like, (2d, 2d)
        K = D + Q; its symmetric part must be positive definite.

    Returns
    -------
    (float, float)
        (σ², σ_R²).

    Raises
    ------
    NotPositiveDefiniteError
        A or sym K is not positive definite.
    ShapeError
        K is not (2d, 2d).

    Examples
    --------
    >>> import numpy as np
    >>> k = np.array([[1.0, -1.0], [1.0, 2.0]])          # HFHR, alpha = 1, gamma = 2, d = 1
    >>> s2, s2r = augmented_position_fluctuation([[1.0]], [1.0], k)
    >>> bool(np.isclose(s2, 2 * 2 / 3) and np.isclose(s2r, 2.0))
    True
    """
    amat = as_spd(hessian, "hessian")
    n = amat.shape[0]
    ell = as_vector(observable, "observable", n)
    kmat = as_square(drift, "drift", 2 * n)
    as_spd(0.5 * (kmat + kmat.T), "symmetric part of drift")
    w = np.linalg.solve(amat, ell)

    def schur(mat: np.ndarray) -> np.ndarray:
        return mat[:n, :n] - mat[:n, n:] @ np.linalg.solve(mat[n:, n:], mat[n:, :n])

    sig2 = 2.0 * float(w @ np.linalg.solve(schur(kmat), w))
    sig2_r = 2.0 * float(w @ np.linalg.solve(schur(0.5 * (kmat + kmat.T)), w))
    return sig2, sig2_r


@cites("gnld2025", "Sec. 4.2, (4.5)")
def hfhr_matrices(alpha: float, gamma: float, dim: int) -> tuple[np.ndarray, np.ndarray]:
    r"""HFHR D = diag(αI, γI), Q = [[0, −I], [I, 0]] (GNLD paper, anonymous 2025, Eq. (4.5)).

    Parameters
    ----------
    alpha, gamma : float
        The friction parameters α > 0 and γ > 0.
    dim : int
        The position dimension d.

    Returns
    -------
    (ndarray, ndarray)
        D and Q, both (2d, 2d).

    Raises
    ------
    SgtuneError
        α, γ not positive or d < 1.

    Examples
    --------
    >>> d, q = hfhr_matrices(1.0, 2.0, 1)
    >>> (d + q).tolist()
    [[1.0, -1.0], [1.0, 2.0]]
    """
    al = check_positive(alpha, "alpha")
    ga = check_positive(gamma, "gamma")
    n = check_int(dim, "dim", low=1)
    eye = np.eye(n)
    zero = np.zeros((n, n))
    dmat = np.block([[al * eye, zero], [zero, ga * eye]])
    qmat = np.block([[zero, -eye], [eye, zero]])
    return dmat, qmat


@cites("gnld2025", "Sec. 4.3, (4.12)-(4.13)")
def gaul_matrices(a: float, gamma: float, preconditioner: Any) -> tuple[np.ndarray, np.ndarray]:
    r"""GAUL D = [[aC, (C−I)/2], [(C−I)/2, γI]], Q = [[0, −(C+I)/2], [(C+I)/2, 0]] (GNLD paper, anonymous 2025, Eqs. (4.12)-(4.13)).

    D + Q = [[aC, −I], [C, γI]]. D is positive definite iff the Schur complement
    S = aC − (C−I)²/(4γ) is, i.e. iff a·c > (c−1)²/(4γ) for every eigenvalue c of C.

    Parameters
    ----------
    a, gamma : float
        The GAUL parameters a > 0 and γ > 0.
    preconditioner : array_like, (d, d)
        C, symmetric positive definite.

    Returns
    -------
    (ndarray, ndarray)
        D and Q, both (2d, 2d).

    Raises
    ------
    NotPositiveDefiniteError
        C is not SPD, or D is not positive definite (GAUL's symmetric part condition fails).

    Examples
    --------
    >>> import numpy as np
    >>> d, q = gaul_matrices(1.0, 2.0, np.eye(1))
    >>> (d + q).tolist()
    [[1.0, -1.0], [1.0, 2.0]]
    """
    aa = check_positive(a, "a")
    ga = check_positive(gamma, "gamma")
    cmat = as_spd(preconditioner, "preconditioner")
    n = cmat.shape[0]
    eye = np.eye(n)
    off = 0.5 * (cmat - eye)
    s = aa * cmat - off @ off / ga
    lam = np.linalg.eigvalsh(0.5 * (s + s.T))
    if lam[0] <= 0:
        cev = np.linalg.eigvalsh(cmat)
        need = float(np.max((cev - 1) ** 2 / (4 * ga * cev)))
        raise NotPositiveDefiniteError(
            f"GAUL symmetric part D = sym[[aC, -I], [C, gamma I]] is not positive definite: the Schur "
            f"complement aC - (C-I)^2/(4 gamma) has smallest eigenvalue {lam[0]:.3g} (a={aa:g}, "
            f"gamma={ga:g}); take a > {need:.4g}, increase gamma, or bring C closer to I")
    dmat = np.block([[aa * cmat, off], [off, ga * eye]])
    qmat = np.block([[np.zeros((n, n)), -0.5 * (cmat + eye)], [0.5 * (cmat + eye), np.zeros((n, n))]])
    return 0.5 * (dmat + dmat.T), qmat


@cites("sgtune", "stability of the full-gradient EM scheme (2.8)")
def max_stable_step(hessian: Any, drift: Any) -> float:
    r"""Largest η with ρ(I − η(D+Q)M) < 1: η_max = min_λ 2Re λ/|λ|² over eigenvalues λ of (D+Q)M.

    The full-gradient Euler–Maruyama scheme Z_{k+1} = Z_k − η(D+Q)MZ_k + noise is mean-square
    stable iff every eigenvalue λ of (D+Q)M satisfies |1 − ηλ| < 1, i.e. η < 2Re λ/|λ|². For
    the reversible baseline (real λ) this is the familiar 2/λ_max(DM). Non-reversibility adds
    imaginary parts to λ and so stiffens the step. The bound is strict: η_max
    itself is marginally stable.

    Parameters
    ----------
    hessian : array_like, (n, n)
        M, symmetric positive definite.
    drift : array_like, (n, n)
        K = D + Q with positive-definite symmetric part.

    Returns
    -------
    float
        The largest stable step η_max.

    Raises
    ------
    NotPositiveDefiniteError
        M or sym K is not positive definite.

    Examples
    --------
    >>> import numpy as np
    >>> float(max_stable_step(np.eye(2), np.eye(2)))
    2.0
    >>> bool(np.isclose(max_stable_step(np.eye(2), [[1.0, 1.0], [-1.0, 1.0]]), 1.0))  # λ = 1 ± i
    True
    """
    m = as_spd(hessian, "hessian")
    k = as_square(drift, "drift", m.shape[0])
    as_spd(0.5 * (k + k.T), "symmetric part of drift")
    return _max_step(k @ m)


@cites("sgtune", "min σ² over ‖D^{-1/2}JD^{-1/2}‖₂ ≤ κ is σ_R²/(1+κ²)")
def optimal_antisymmetric_nld(hessian: Any, observable: Any, budget: float,
                              diffusion: Any | None = None, *,
                              plane_vector: Any | None = None) -> OptimalAntisymmetric:
    r"""Variance-optimal NLD J under ‖D^{-1/2}JD^{-1/2}‖₂ ≤ κ: min σ² = σ_R²/(1+κ²) (derived in sgtune).

    With J̃ = D^{-1/2}JD^{-1/2} and c = D^{-1/2}b, b = A⁻¹ℓ, the NLD constant is
    σ² = 2cᵀ(I + J̃ᵀJ̃)⁻¹c. Since J̃ᵀJ̃ ⪯ κ²I on the budget set, σ² ≥ 2|c|²/(1+κ²) = σ_R²/(1+κ²),
    with equality for the rank-2 rotation J̃ = κ(uvᵀ − vuᵀ), u = c/|c|, v ⊥ u a unit vector
    (not unique). Without a budget the infimum 0 is not attained. Needs d ≥ 2.

    Parameters
    ----------
    hessian : array_like, (d, d)
        A, symmetric positive definite.
    observable : array_like, (d,)
        The observable ℓ (non-zero).
    budget : float
        The budget κ > 0.
    diffusion : array_like, (d, d), optional
        D (default the identity).
    plane_vector : array_like, (d,), optional
        A vector not parallel to u; its component orthogonal to u gives v. Default: the
        coordinate axis on which u has the smallest entry.

    Returns
    -------
    OptimalAntisymmetric
        J, σ²(J) from the general solver, σ_R², ratio and the bound 1/(1+κ²).

    Raises
    ------
    ShapeError
        d < 2.
    SgtuneError
        ℓ = 0, κ ≤ 0, or ``plane_vector`` parallel to u.

    Examples
    --------
    >>> import numpy as np
    >>> r = optimal_antisymmetric_nld(np.diag([1.0, 4.0]), [1.0, 1.0], budget=2.0)
    >>> bool(np.isclose(r.ratio, 1 / 5))
    True
    """
    amat = as_spd(hessian, "hessian")
    n = amat.shape[0]
    if n < 2:
        raise ShapeError("optimal_antisymmetric_nld needs dimension d >= 2 (no non-zero "
                         f"antisymmetric matrix exists for d = {n})")
    ell = as_vector(observable, "observable", n)
    kappa = check_positive(budget, "budget")
    if kappa > 1e7:
        raise SgtuneError(f"budget must be at most 1e7, got {kappa:g}: the optimal variance ratio 1/(1 + budget²) is "
                          "then below 1e-14, finer than double precision resolves")
    dmat = np.eye(n) if diffusion is None else as_spd(diffusion, "diffusion", n)
    dh, dhi = _sqrt_and_inv_sqrt(dmat)
    c = dhi @ np.linalg.solve(amat, ell)
    norm_c = np.linalg.norm(c)
    if norm_c == 0:
        raise SgtuneError("observable must be non-zero: with l = 0 every J gives sigma2 = 0")
    u = c / norm_c
    if plane_vector is None:
        raw = np.zeros(n)
        raw[int(np.argmin(np.abs(u)))] = 1.0
    else:
        raw = as_vector(plane_vector, "plane_vector", n)
    v = raw - (raw @ u) * u
    if np.linalg.norm(v) <= 1e-12 * max(np.linalg.norm(raw), 1e-300):
        raise SgtuneError("plane_vector is parallel to D^{-1/2}A^{-1}l; pass a vector with a "
                          "component orthogonal to it")
    v /= np.linalg.norm(v)
    jt = kappa * (np.outer(u, v) - np.outer(v, u))
    j = dh @ jt @ dh
    j = 0.5 * (j - j.T)
    res = _solve(amat, dmat, j, ell, "nld")
    return OptimalAntisymmetric(antisymmetric=j, budget=kappa, sigma2=res.sigma2,
                                sigma2_reversible=res.sigma2_reversible, ratio=res.ratio,
                                bound_ratio=1.0 / (1.0 + kappa ** 2))


@cites("sgtune", "Lelièvre, Nier & Pavliotis (2013), J. Stat. Phys. 152, optimal linear drift")
def spectral_gap_optimal_nld(hessian: Any, observable: Any, diffusion: Any | None = None, *,
                             weights: Any | None = None) -> SpectralGapOptimal:
    r"""Spectral-gap-optimal NLD J: every eigenvalue of (D+J)A has real part tr(DA)/d (Lelièvre–Nier–Pavliotis 2013).

    Implementation (LNP's construction, transported to general D): let S = D^{1/2}AD^{1/2} and
    μ̄ = tr(S)/d. (1) Build an orthonormal basis ψ₁..ψ_d with ψ_kᵀSψ_k = μ̄ for every k:
    recursively rotate the extreme eigenvectors of S restricted to the current subspace,
    ψ = cos θ e_min + sin θ e_max with cos²θ λ_min + sin²θ λ_max = μ̄, and continue in the
    orthogonal complement (where the mean Rayleigh quotient is still μ̄). (2) In that basis,
    S̃ = ΨᵀSΨ has constant diagonal μ̄; set Ĵ̃_jk = (λ_j+λ_k)/(λ_j−λ_k)·S̃_jk for distinct
    weights λ (default λ_k = k), so that S + ΨĴ̃Ψᵀ is diagonalisable with all real parts μ̄.
    (3) Map back: J̃ = S^{-1/2}ΨĴ̃ΨᵀS^{-1/2}, J = D^{1/2}J̃D^{1/2}. Since tr((D+J)A) = tr(DA) for
    any antisymmetric J, tr(DA)/d is the largest possible spectral gap. This J is generally not
    variance-optimal for a given observable: compare ``ratio`` with ``variance_optimal_ratio``
    (what :func:`optimal_antisymmetric_nld` achieves with the same budget κ).

    Parameters
    ----------
    hessian : array_like, (d, d)
        A, symmetric positive definite.
    observable : array_like, (d,)
        The observable ℓ (used only to report σ² of this J).
    diffusion : array_like, (d, d), optional
        D (default the identity).
    weights : array_like, (d,), optional
        Distinct reals λ_k of LNP's construction (default 1, ..., d).

    Returns
    -------
    SpectralGapOptimal
        J, its spectral gap, the reversible gap, its budget κ, σ² and the comparison.

    Raises
    ------
    ShapeError
        d < 2.
    SgtuneError
        Weights not distinct.

    Examples
    --------
    >>> import numpy as np
    >>> r = spectral_gap_optimal_nld(np.diag([1.0, 3.0]), [1.0, 0.0])
    >>> bool(np.isclose(r.spectral_gap, 2.0))
    True
    """
    amat = as_spd(hessian, "hessian")
    n = amat.shape[0]
    if n < 2:
        raise ShapeError(f"spectral_gap_optimal_nld needs dimension d >= 2, got d = {n}")
    ell = as_vector(observable, "observable", n)
    dmat = np.eye(n) if diffusion is None else as_spd(diffusion, "diffusion", n)
    lam = np.arange(1.0, n + 1.0) if weights is None else as_vector(weights, "weights", n)
    if len(np.unique(lam)) != n:
        raise SgtuneError(f"weights must be distinct, got {lam.tolist()}")
    dh, _ = _sqrt_and_inv_sqrt(dmat)
    s = dh @ amat @ dh
    s = 0.5 * (s + s.T)
    mu = float(np.trace(s)) / n
    psi = _constant_diagonal_basis(s, mu)
    st = psi.T @ s @ psi
    diff = lam[:, None] - lam[None, :]
    np.fill_diagonal(diff, 1.0)
    jtt = (lam[:, None] + lam[None, :]) / diff * st
    np.fill_diagonal(jtt, 0.0)
    jhat = psi @ jtt @ psi.T
    sh, shi = _sqrt_and_inv_sqrt(s)
    j = dh @ (shi @ jhat @ shi) @ dh
    j = 0.5 * (j - j.T)
    gap = float(np.min(np.linalg.eigvals((dmat + j) @ amat).real))
    gap_r = float(np.min(np.linalg.eigvals(dmat @ amat).real))
    _, dhi = _sqrt_and_inv_sqrt(dmat)
    kappa = float(np.linalg.norm(dhi @ j @ dhi, 2))
    res = _solve(amat, dmat, j, ell, "nld")
    return SpectralGapOptimal(antisymmetric=j, spectral_gap=gap, spectral_gap_reversible=gap_r,
                              budget=kappa, sigma2=res.sigma2,
                              sigma2_reversible=res.sigma2_reversible, ratio=res.ratio,
                              variance_optimal_ratio=1.0 / (1.0 + kappa ** 2))


@cites("sgtune", "minibatch gradient-noise covariance of Bayesian linear regression (GNLD paper, anonymous 2025, Eq. (6.3))")
def blr_gradient_noise_moments(design: Any, response: Any, batch_size: int, *,
                               noise_variance: float = 1.0,
                               prior_precision: Any | None = None) -> dict[str, np.ndarray]:
    r"""Affine map S ↦ E[Cov(ĝ | x)] for x ~ (0, S) of the BLR minibatch gradient (GNLD paper, anonymous 2025, Eq. (6.3)).

    Potential U(θ) = Σ_i (y_i − x_iᵀθ)²/(2s²) + ½θᵀΓθ, minibatch gradient with replacement
    ĝ = (N/B)Σ_{b≤B} g_{i_b}(θ) + Γθ, g_i(θ) = x̃_i(x̃_iᵀθ − ỹ_i) with x̃ = x/s, ỹ = y/s. Writing
    θ = θ̄ + x (θ̄ the posterior mean), g_i = x̃_i x̃_iᵀ x + c_i with c_i = x̃_i(x̃_iᵀθ̄ − ỹ_i), and
    Cov(ĝ | x) = (N²/B)[(1/N)Σ_i g_i g_iᵀ − ḡḡᵀ]. For E[x] = 0, E[xxᵀ] = S this is
    (N²/B)[(1/N)Σ_i (x̃_iᵀSx̃_i) x̃_ix̃_iᵀ + (1/N)Σ_i c_ic_iᵀ − G̅SG̅ − c̄c̄ᵀ], G̅ = (1/N)Σ x̃_ix̃_iᵀ.

    Parameters
    ----------
    design : array_like, (N, p)
        X.
    response : array_like, (N,)
        The responses y.
    batch_size : int
        B ≥ 1.
    noise_variance : float, optional
        The noise variance s² (default 1).
    prior_precision : array_like, (p, p), optional
        Γ (default 0).

    Returns
    -------
    dict
        ``posterior_mean`` θ̄, ``precision`` A = X̃ᵀX̃ + Γ, ``scaled_design`` X̃, ``residual_terms``
        c (N×p), ``constant`` the S-independent part of the covariance, ``scale`` N²/B.

    Raises
    ------
    ShapeError
        Shapes disagree.
    NotPositiveDefiniteError
        A is singular (add a prior precision).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[1.0], [2.0]]); y = np.array([1.0, 2.0])
    >>> m = blr_gradient_noise_moments(x, y, 1)
    >>> bool(np.allclose(m["posterior_mean"], [1.0]) and np.allclose(m["constant"], 0.0))
    True
    """
    x = as_float_array(design, "design", ndim=2)
    nrows, p = x.shape
    y = as_vector(response, "response", nrows)
    bsz = check_int(batch_size, "batch_size", low=1)
    s2 = check_positive(noise_variance, "noise_variance")
    gam = np.zeros((p, p)) if prior_precision is None else as_square(prior_precision, "prior_precision", p)
    xs = x / np.sqrt(s2)
    ys = y / np.sqrt(s2)
    prec = as_spd(xs.T @ xs + gam, "posterior precision X^T X / s2 + prior_precision")
    mean = np.linalg.solve(prec, xs.T @ ys)
    c = xs * (xs @ mean - ys)[:, None]
    cbar = c.mean(axis=0)
    const = (nrows ** 2 / bsz) * (c.T @ c / nrows - np.outer(cbar, cbar))
    return {"posterior_mean": mean, "precision": prec, "scaled_design": xs, "residual_terms": c,
            "constant": const, "scale": np.array(nrows ** 2 / bsz)}


@cites("sgtune", "minibatch gradient-noise covariance of Bayesian linear regression (GNLD paper, anonymous 2025, Eq. (6.3))")
def blr_gradient_noise_cov(design: Any, response: Any, batch_size: int, second_moment: Any, *,
                           noise_variance: float = 1.0,
                           prior_precision: Any | None = None) -> np.ndarray:
    r"""C̄(S) = E[Cov(ĝ | x)], x = θ − θ̄ with E[x] = 0, E[xxᵀ] = S, for the BLR minibatch gradient (GNLD paper, anonymous 2025, Eq. (6.3)).

    See :func:`blr_gradient_noise_moments` for the formula; C̄ is affine in S.

    Parameters
    ----------
    design, response : array_like
        X (N×p), y (N).
    batch_size : int
        B ≥ 1 (with replacement).
    second_moment : array_like, (p, p)
        S.
    noise_variance : float, optional
        The noise variance s².
    prior_precision : array_like, optional
        Γ.

    Returns
    -------
    ndarray, (p, p)
        C̄(S).

    Raises
    ------
    ShapeError
        S is not (p, p).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[1.0], [-1.0]]); y = np.array([0.0, 0.0])
    >>> blr_gradient_noise_cov(x, y, 1, [[1.0]]).tolist()   # g_i = x (always 1*x), no noise
    [[0.0]]
    """
    mom = blr_gradient_noise_moments(design, response, batch_size, noise_variance=noise_variance,
                                     prior_precision=prior_precision)
    p = mom["precision"].shape[0]
    smat = as_square(second_moment, "second_moment", p)
    return mom["constant"] + _noise_cov_linear(mom, smat)


@cites("sgtune", "exact second moments of the linear SG-EM recursion (GNLD paper, anonymous 2025, Eq. (2.8), Prop. 5.3)")
def predict_time_average_variance(hessian: Any, diffusion: Any, antisymmetric: Any,
                                  observable: Any, step_size: float, n_steps: int, *,
                                  design: Any | None = None, response: Any | None = None,
                                  batch_size: int | None = None, noise_variance: float = 1.0,
                                  prior_precision: Any | None = None) -> dict[str, Any]:
    r"""Exact Var((1/K)Σ_{k<K} ℓᵀZ_k) of the SG-EM chain started from its stationary second moment (derived in sgtune).

    Chain (GNLD paper, anonymous 2025, Eq. (2.8)) on H = ½zᵀMz: Z_{k+1} = GZ_k − ηKPε_k + sqrt(2η)D^{1/2}ξ_k with
    G = I − ηKM, K = D + Q, ε_k the minibatch noise of the BLR gradient on the first p
    coordinates (P the embedding; none when ``design`` is None). Second moments close:
    S' = GSGᵀ + 2ηD + η²KP C̄(S_xx) PᵀKᵀ with C̄ from :func:`blr_gradient_noise_moments`; the
    stationary S is solved exactly (vec form). Starting from mean 0 and covariance S,
    Cov(Z_{k+h}, Z_k) = GʰS, so Var(ΣY_k) = K ℓᵀSℓ + 2ℓᵀ[Σ_{h=1}^{K−1}(K−h)Gʰ]Sℓ with the
    geometric sum in closed form. As η → 0 with K ∝ η⁻², Kη·Var → σ² (Theorem 3.2); the exact
    long-run variance is σ²/(Kη) + bᵀC̄b/K (the minibatch term, Prop. 5.3's O(η) part).

    Parameters
    ----------
    hessian, diffusion, antisymmetric : array_like, (n, n)
        M, D, Q of the full state (validated as in :func:`solve_fluctuation_general`).
    observable : array_like, (n,)
        The observable ℓ.
    step_size : float
        The step η > 0, below :func:`max_stable_step`.
    n_steps : int
        K ≥ 1.
    design, response : array_like, optional
        BLR data X (N×p) and y; M[:p, :p] must equal X̃ᵀX̃ + Γ.
    batch_size : int, optional
        B (required with ``design``).
    noise_variance : float, optional
        The noise variance s².
    prior_precision : array_like, optional
        Γ.

    Returns
    -------
    dict
        ``variance`` (of the time average), ``scaled_variance`` = Kη·variance,
        ``long_run_scaled_variance`` (K → ∞ limit of Kη·variance), ``stationary_cov`` S,
        ``sigma2`` the η → 0 limit.

    Raises
    ------
    UnstableStepSizeError
        η ≥ max stable step or the second-moment recursion is unstable.
    ShapeError
        The BLR precision does not match M[:p, :p].

    Examples
    --------
    >>> import numpy as np
    >>> out = predict_time_average_variance(np.eye(1), np.eye(1), np.zeros((1, 1)), [1.0], 0.01, 10**6)
    >>> bool(abs(out["long_run_scaled_variance"] - 2.0) < 1e-9)
    True
    """
    from ..core.errors import UnstableStepSizeError

    m = as_spd(hessian, "hessian")
    n = m.shape[0]
    dmat = as_spd(diffusion, "diffusion", n)
    qmat = _as_antisymmetric(antisymmetric, "antisymmetric", n)
    ell = as_vector(observable, "observable", n)
    eta = check_positive(step_size, "step_size")
    kk = check_int(n_steps, "n_steps", low=1)
    kmat = dmat + qmat
    eta_max = _max_step(kmat @ m)
    if eta >= eta_max:
        raise UnstableStepSizeError(
            f"step_size {eta:g} is unstable: the largest stable step is {eta_max:.4g}; use e.g. "
            f"{0.5 * eta_max:.3g}", max_stable_step=eta_max)
    g = np.eye(n) - eta * kmat @ m
    eye_n2 = np.eye(n * n)
    # vec(G S G^T) = (G ⊗ G) vec(S) (row-major vec)
    op = np.kron(g, g)
    rhs = (2 * eta * dmat).ravel()
    if design is not None:
        if batch_size is None:
            raise SgtuneError("batch_size is required with design")
        lin, const = _blr_noise_terms(design, response, batch_size, noise_variance, prior_precision, m, kmat, eta)
        op = op + lin
        rhs = rhs + const
    rho = float(np.max(np.abs(np.linalg.eigvals(op))))
    if rho >= 1:
        raise UnstableStepSizeError(
            f"step_size {eta:g} makes the second moments of the SG chain diverge (spectral radius "
            f"{rho:.4g} >= 1); reduce it", spectral_radius=rho, max_stable_step=eta_max)
    svec = np.linalg.solve(eye_n2 - op, rhs)
    s = svec.reshape(n, n)
    s = 0.5 * (s + s.T)
    variance, long_run = _time_average_variance(g, s, ell, kk)
    sig = _solve(m, dmat, qmat, ell, "general")
    return {"variance": variance, "scaled_variance": kk * eta * variance,
            "long_run_scaled_variance": eta * long_run, "stationary_cov": s,
            "sigma2": sig.sigma2, "step_size": eta, "n_steps": kk}

def _time_average_variance(g: np.ndarray, s: np.ndarray, ell: np.ndarray, kk: int) -> tuple[float, float]:
    """Var((1/K)Σ_k ℓᵀZ_k) from Cov(Z_{k+h}, Z_k) = GʰS, and its K → ∞ limit times K (geometric sums closed)."""
    n = g.shape[0]
    ig = np.linalg.inv(np.eye(n) - g)
    gk1 = np.linalg.matrix_power(g, kk - 1)
    gk = gk1 @ g
    sum_g = g @ (np.eye(n) - gk1) @ ig
    sum_hg = g @ (np.eye(n) - kk * gk1 + (kk - 1) * gk) @ ig @ ig
    fmat = kk * sum_g - sum_hg
    var_sum = kk * float(ell @ s @ ell) + 2.0 * float(ell @ fmat @ s @ ell)
    return var_sum / kk ** 2, float(ell @ (s + g @ ig @ s + s @ (g @ ig).T) @ ell)


def _blr_noise_terms(design: Any, response: Any, batch_size: int, noise_variance: float, prior_precision: Any,
                     m: np.ndarray, kmat: np.ndarray, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """η²KP C̄(S_xx) PᵀKᵀ of :func:`predict_time_average_variance` as (its matrix on row-major vec S, its constant)."""
    n = m.shape[0]
    mom = blr_gradient_noise_moments(design, response, batch_size, noise_variance=noise_variance,
                                     prior_precision=prior_precision)
    p = mom["precision"].shape[0]
    if p > n or not np.allclose(mom["precision"], m[:p, :p], rtol=1e-10, atol=1e-12 * np.abs(m).max()):
        raise ShapeError("hessian[:p, :p] must equal the BLR posterior precision X^T X/s2 + prior_precision")
    kp = kmat[:, :p]
    lin = np.zeros((n * n, n * n))
    for a_ in range(p):
        for b_ in range(p):
            e = np.zeros((p, p))
            e[a_, b_] = 1.0
            cpp = _noise_cov_linear(mom, e)
            lin[:, a_ * n + b_] = (eta ** 2 * kp @ cpp @ kp.T).ravel()
    return lin, (eta ** 2 * kp @ mom["constant"] @ kp.T).ravel()


@cites("sgtune", "batch means for Thm. 3.2's sigma^2")
def estimate_fluctuation_from_chains(trajectories: Any, step_size: float, *, n_batches: int = 20,
                                     baseline: Any | None = None,
                                     baseline_step_size: float | None = None) -> FluctuationEstimate:
    r"""Batch means σ̂² = η·L·s²_batch (pooled over chains), ratio σ̂²/σ̂²_R with delta-method SE (derived in sgtune).

    By Theorem 3.2, Var(Π_η f) ≈ σ²/(Kη) for a time average over K iterations, so the means of
    non-overlapping batches of length L (each L·η ≫ the relaxation time) have variance
    ≈ σ²/(Lη). Per chain, σ̂²_c = ηL·(sample variance of its batch means around the chain's own
    mean); σ̂² is the mean over chains. The standard error is the standard deviation of the
    σ̂²_c over √C for C ≥ 2 chains, or σ̂²·sqrt(2/(n_batches − 1)) (χ² approximation) for one
    chain. With a baseline (an independent run), ratio r = σ̂²/σ̂²_R and, by the delta method,
    SE(r) = r·sqrt((SE/σ̂²)² + (SE_R/σ̂²_R)²); the 95 % interval is taken on the log scale.
    Batch means are biased low when L·η is not large compared with the integrated
    autocorrelation time of f; use few, long batches.

    Parameters
    ----------
    trajectories : array_like, (C, T) or (T,)
        Values f(Z_k) of C chains over T iterations (after burn-in).
    step_size : float
        The step η of the run.
    n_batches : int, optional
        Batches per chain (≥ 2; default 20); L = T // n_batches (a remainder at the start of
        each chain is dropped).
    baseline : array_like, optional
        Trajectories of the baseline scheme.
    baseline_step_size : float, optional
        The step η of the baseline (default ``step_size``).

    Returns
    -------
    FluctuationEstimate
        The estimate σ̂², its SE, the layout, and the ratio with SE and interval when a baseline is given.

    Raises
    ------
    ShapeError
        Trajectories not 1-D/2-D or too short for the batches.
    SgtuneError
        Non-positive step size or non-finite values.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> est = estimate_fluctuation_from_chains(rng.standard_normal((8, 4000)), 0.5, n_batches=10)
    >>> bool(abs(est.sigma2 - 0.5) < 5 * est.sigma2_standard_error)   # iid: sigma2 = eta * Var
    True
    """
    eta = check_positive(step_size, "step_size")
    nb = check_int(n_batches, "n_batches", low=2)
    s2, se, c, lb = _batch_means(trajectories, eta, nb, "trajectories")
    if baseline is None:
        return FluctuationEstimate(sigma2=s2, sigma2_standard_error=se, n_chains=c, n_batches=nb,
                                   batch_length=lb)
    eta_b = eta if baseline_step_size is None else check_positive(baseline_step_size, "baseline_step_size")
    s2b, seb, _, _ = _batch_means(baseline, eta_b, nb, "baseline")
    ratio = s2 / s2b
    rel = float(np.hypot(se / s2, seb / s2b))
    z = float(special.ndtri(0.975))  # scipy.stats.norm.ppf(0.975)
    return FluctuationEstimate(sigma2=s2, sigma2_standard_error=se, n_chains=c, n_batches=nb,
                               batch_length=lb, sigma2_baseline=s2b,
                               sigma2_baseline_standard_error=seb, ratio=ratio,
                               ratio_standard_error=ratio * rel,
                               ratio_interval=(ratio * float(np.exp(-z * rel)), ratio * float(np.exp(z * rel))))


# ---------------------------------------------------------------------------------------------
# private helpers
# ---------------------------------------------------------------------------------------------

def _as_antisymmetric(value: Any, name: str, size: int) -> np.ndarray:
    q = as_square(value, name, size)
    norm = np.linalg.norm(q, 1)
    err = np.linalg.norm(q + q.T, 1)
    if err > 100 * np.spacing(max(norm, 1e-300)) and err > 0:
        raise NotAntisymmetricError(
            f"{name} must be antisymmetric (Q^T = -Q) but ||Q+Q^T||_1/||Q||_1 = "
            f"{err / max(norm, 1e-300):.3g}; pass (Q - Q.T)/2, and put any symmetric part into the diffusion")
    return 0.5 * (q - q.T)


def _noise_cov_linear(mom: dict[str, np.ndarray], smat: np.ndarray) -> np.ndarray:
    """S-dependent part of C̄(S): (N²/B)[(1/N)Σ(x̃ᵢᵀSx̃ᵢ)x̃ᵢx̃ᵢᵀ − G̅SG̅]."""
    xs = mom["scaled_design"]
    nrows = xs.shape[0]
    gbar = xs.T @ xs / nrows
    q = np.einsum("ia,ab,ib->i", xs, smat, xs)
    return float(mom["scale"]) * ((xs * q[:, None]).T @ xs / nrows - gbar @ smat @ gbar)


def _solve_augmented(a: np.ndarray, ell: np.ndarray, d: np.ndarray, q: np.ndarray,
                     scheme: str) -> FluctuationResult:
    """:func:`_solve` on the state (x, v): H = ½xᵀAx + ½|v|², observable ℓᵀx (M = blockdiag(A, I))."""
    n = a.shape[0]
    m = np.block([[a, np.zeros((n, n))], [np.zeros((n, n)), np.eye(n)]])
    return _solve(m, d, q, np.concatenate([ell, np.zeros(n)]), scheme)


def _max_step(km: np.ndarray) -> float:
    lam = np.linalg.eigvals(km)
    return float(np.min(2.0 * lam.real / np.abs(lam) ** 2))


def _solve(m: np.ndarray, d: np.ndarray, q: np.ndarray, ell: np.ndarray, scheme: str) -> FluctuationResult:
    b = np.linalg.solve(m, ell)
    dinv_b = np.linalg.solve(d, b)
    eff = d + q.T @ np.linalg.solve(d, q)  # D + QᵀD⁻¹Q, SPD
    eff = 0.5 * (eff + eff.T)
    sig2 = 2.0 * float(b @ np.linalg.solve(eff, b))
    sig2_r = 2.0 * float(b @ dinv_b)
    u = q @ dinv_b
    red = 2.0 * float(u @ np.linalg.solve(eff, u))
    a_coef = np.linalg.solve(m @ (d - q), ell)
    a_rev = np.linalg.solve(m @ d, ell)
    eta = _max_step((d + q) @ m)
    eta_r = _max_step(d @ m)
    if not (eta > 0 and math.isfinite(eta) and math.isfinite(sig2) and math.isfinite(red)):
        raise SgtuneError(f"{scheme}: the antisymmetric part is too large for double precision (‖Q‖ = "
                          f"{np.linalg.norm(q, 2):.3g} against ‖D‖ = {np.linalg.norm(d, 2):.3g}; the stable step "
                          "underflows); scale the antisymmetric matrix down")
    ratio = sig2 / sig2_r if sig2_r > 0 else 1.0
    eq_cost = ratio * eta_r / eta if sig2_r > 0 else 1.0
    return FluctuationResult(sigma2=sig2, sigma2_reversible=sig2_r, ratio=ratio, reduction=red,
                             max_stable_step=eta, max_stable_step_reversible=eta_r,
                             equal_cost_ratio=eq_cost, poisson_coefficient=a_coef,
                             poisson_coefficient_reversible=a_rev, scheme=scheme,
                             diffusion=d, antisymmetric=q, hessian=m)


def _sqrt_and_inv_sqrt(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lam, u = np.linalg.eigh(s)
    return (u * np.sqrt(lam)) @ u.T, (u / np.sqrt(lam)) @ u.T


def _constant_diagonal_basis(s: np.ndarray, mu: float) -> np.ndarray:
    """Orthonormal basis (columns) with ψ_kᵀSψ_k = μ for all k (needs μ = tr(S)/d)."""
    n = s.shape[0]
    v = np.eye(n)
    cols = []
    for _ in range(n - 1):
        k = v.shape[1]
        lam, u = np.linalg.eigh(v.T @ s @ v)
        lo, hi = lam[0], lam[-1]
        c2 = 1.0 if hi - lo <= 1e-15 * max(abs(hi), 1.0) else (hi - mu) / (hi - lo)
        c2 = min(max(c2, 0.0), 1.0)
        loc = np.sqrt(c2) * u[:, 0] + np.sqrt(1.0 - c2) * u[:, -1]
        cols.append(v @ loc)
        qq, _ = np.linalg.qr(np.column_stack([loc, np.eye(k)]))
        v = v @ qq[:, 1:k]
    cols.append(v[:, 0])
    return np.column_stack(cols)


def _batch_means(traj: Any, eta: float, nb: int, name: str) -> tuple[float, float, int, int]:
    arr = as_float_array(traj, name)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ShapeError(f"{name} must be (chains, iterations) but has shape {arr.shape}")
    c, t = arr.shape
    lb = t // nb
    if lb < 1:
        raise ShapeError(f"{name} has {t} iterations, fewer than n_batches = {nb}; use fewer batches")
    x = arr[:, t - nb * lb:].reshape(c, nb, lb).mean(axis=2)
    per_chain = eta * lb * x.var(axis=1, ddof=1)
    s2 = float(per_chain.mean())
    if c >= 2:
        se = float(per_chain.std(ddof=1) / np.sqrt(c))
    else:
        se = s2 * float(np.sqrt(2.0 / (nb - 1)))
    return s2, se, c, lb
