"""Monte Carlo diagnostics in pure NumPy: ESS, batch-means MCSE, covariance standard errors, z-tests.

Shape convention (numpyro): draws are ``(chain, draw, *event)``. Everything here is
independent of the sampler, so it also serves to check the sampler's streaming
summaries (:class:`sgtune.sampler.ChainResult`) against its stored traces.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import special  # not scipy.stats: its import costs ~1 s per sgtune process

from ..core._validation import as_float_array, check_int, check_positive
from ..core.errors import ShapeError, SgtuneError

__all__ = ["autocorrelation", "effective_sample_size", "batch_means_se", "covariance_batch_means",
           "bonferroni_threshold", "CovarianceTest", "compare_covariance"]


def _draws(x: Any, name: str = "draws") -> np.ndarray:
    arr = as_float_array(x, name)
    if arr.ndim < 2:
        raise ShapeError(f"{name} must be (chain, draw, ...) but has shape {arr.shape}")
    if arr.shape[1] < 4:
        raise ShapeError(f"{name} needs at least 4 draws per chain, got {arr.shape[1]}")
    return arr


def autocorrelation(x: Any) -> np.ndarray:
    """Autocorrelation along axis 1 of ``(chain, draw, ...)`` draws, by FFT (biased estimator, ρ_0 = 1).

    Parameters
    ----------
    x : array_like, shape (C, T, ...)
        Draws: chains, then steps (at least 4), then the event shape.

    Returns
    -------
    ndarray, shape (C, T, ...)
        The autocorrelation ρ̂_k of each chain (NaN for a constant chain).

    Raises
    ------
    ShapeError
        Fewer than two axes or fewer than 4 draws per chain.

    Examples
    --------
    >>> from sgtune.diagnostics import autocorrelation
    >>> draws = np.random.default_rng(0).standard_normal((4, 1000))  # 4 chains of i.i.d. draws
    >>> rho = autocorrelation(draws)
    >>> rho.shape, bool(np.all(rho[:, 0] == 1)), bool(np.all(np.abs(rho[:, 1]) < 0.2))
    ((4, 1000), True, True)
    """
    arr = _draws(x)
    n = arr.shape[1]
    centred = arr - arr.mean(axis=1, keepdims=True)
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(centred, n=size, axis=1)
    acov = np.fft.irfft(f * np.conjugate(f), n=size, axis=1)[:, :n] / n
    with np.errstate(invalid="ignore", divide="ignore"):
        return acov / acov[:, :1]


def effective_sample_size(x: Any) -> np.ndarray:
    """ESS of ``(chain, draw, ...)`` draws: C·T / τ̂, Geyer's initial monotone positive sequence.

    τ̂ = −1 + 2 Σ_{k} P̂_k with P̂_k = ρ̂_{2k} + ρ̂_{2k+1} truncated at the first negative pair
    and made monotone (Geyer 1992; as in Stan/numpyro, with the within-chain variance and
    the chain-averaged autocorrelation).

    Parameters
    ----------
    x : array_like, shape (C, T, ...)
        Draws: chains, then steps (at least 4), then the event shape.

    Returns
    -------
    ndarray
        The ESS of each coordinate (the event shape).

    Raises
    ------
    ShapeError
        Fewer than two axes or fewer than 4 draws per chain.

    See Also
    --------
    batch_means_se : The standard error of the mean by batch means.

    Examples
    --------
    >>> from sgtune.diagnostics import effective_sample_size
    >>> draws = np.random.default_rng(0).standard_normal((4, 1000))  # 4 chains of i.i.d. draws
    >>> bool(2000 < effective_sample_size(draws) < 6000)  # about C·T = 4000 for i.i.d. draws
    True
    """
    arr = _draws(x)
    c, n = arr.shape[:2]
    rho = np.nanmean(autocorrelation(arr), axis=0)  # (n, *event)
    n_pairs = n // 2
    pairs = rho[: 2 * n_pairs].reshape(n_pairs, 2, *rho.shape[1:]).sum(axis=1)
    pairs = np.nan_to_num(pairs, nan=0.0)
    positive = np.cumprod(pairs > 0, axis=0).astype(bool)
    mono = np.minimum.accumulate(np.where(positive, pairs, 0.0), axis=0)
    tau = -1.0 + 2.0 * mono.sum(axis=0)
    tau = np.maximum(tau, 1.0 / math.log10(max(c * n, 10)))
    return np.asarray(c * n / tau)


def batch_means_se(x: Any, n_batches: int = 32) -> np.ndarray:
    """MCSE of the pooled mean of ``(chain, draw, ...)`` draws by non-overlapping batch means.

    Each chain is cut into ``max(1, n_batches // C)`` equal batches (a trailing remainder is
    dropped); with K batch means b_k the standard error is sd(b_k)/sqrt(K).

    Parameters
    ----------
    x : array_like, shape (C, T, ...)
        Draws: chains, then steps (at least 4), then the event shape.
    n_batches : int, optional
        The number of batches K over all chains (≥ 2).

    Returns
    -------
    ndarray
        The standard error of each coordinate's pooled mean (the event shape).

    Raises
    ------
    ShapeError
        Fewer than two axes or fewer than 4 draws per chain.
    SgtuneError
        Too few draws or batches.

    Examples
    --------
    >>> from sgtune.diagnostics import batch_means_se
    >>> draws = np.random.default_rng(0).standard_normal((4, 1000))  # 4 chains of i.i.d. draws
    >>> bool(0.5 < batch_means_se(draws) * np.sqrt(4000) < 2)  # about sd/√(C·T) for i.i.d. draws
    True
    """
    arr = _draws(x)
    c, n = arr.shape[:2]
    per = max(1, check_int(n_batches, "n_batches", low=2) // c)
    length = n // per
    if length < 1:
        raise SgtuneError(f"too few draws ({n}) for {per} batches per chain")
    b = arr[:, : per * length].reshape(c * per, length, *arr.shape[2:]).mean(axis=1)
    if b.shape[0] < 2:
        raise SgtuneError("batch means need at least 2 batches; use more chains or n_batches")
    return np.asarray(b.std(axis=0, ddof=1) / math.sqrt(b.shape[0]))


def covariance_batch_means(x: Any, n_batches: int = 32) -> tuple[np.ndarray, np.ndarray, int]:
    """Pooled covariance of ``(chain, draw, D)`` draws and its batch-means standard error.

    The pooled covariance (÷ count, about the pooled mean μ) is the average over K equal
    batches of b_k = mean over the batch of (θ−μ)(θ−μ)ᵀ; its standard error is
    sd(b_k)/sqrt(K).

    Parameters
    ----------
    x : array_like, shape (C, T, D)
        Draws: chains, steps (at least 4), coordinates.
    n_batches : int, optional
        The number of batches K over all chains (≥ 2).

    Returns
    -------
    cov : (D, D) ndarray
        The pooled covariance.
    se : (D, D) ndarray
        Its entrywise batch-means standard error.
    n_batches : int
        K, the batches used (the z-scores of :func:`compare_covariance` are t_{K−1}).

    Raises
    ------
    ShapeError
        Draws that are not (C, T, D) or fewer than 4 per chain.
    SgtuneError
        Fewer than 2 batches.

    Examples
    --------
    >>> from sgtune.diagnostics import covariance_batch_means
    >>> draws = np.random.default_rng(0).standard_normal((4, 1000, 2))
    >>> cov, se, k = covariance_batch_means(draws)
    >>> cov.shape, k, bool(np.all(np.abs(cov - np.eye(2)) < 5 * se))
    ((2, 2), 32, True)
    """
    arr = _draws(x)
    if arr.ndim != 3:
        raise ShapeError(f"draws must be (chain, draw, D) but have shape {arr.shape}")
    c, n, d = arr.shape
    per = max(1, check_int(n_batches, "n_batches", low=2) // c)
    length = n // per
    a = arr[:, : per * length]
    mu = a.reshape(-1, d).mean(axis=0)
    dev = (a - mu).reshape(c * per, length, d)
    b = np.einsum("kti,ktj->kij", dev, dev) / length
    if b.shape[0] < 2:
        raise SgtuneError("batch means need at least 2 batches; use more chains or n_batches")
    return b.mean(axis=0), b.std(axis=0, ddof=1) / math.sqrt(b.shape[0]), int(b.shape[0])


def bonferroni_threshold(alpha: float, n_tests: int, dof: float = math.inf) -> float:
    """Two-sided Bonferroni critical value: P(|Z| > z) = α/k for each of k tests.

    Z ~ N(0, 1) (``dof`` = inf) or Student-t with ``dof`` degrees of freedom — the right
    reference for a batch-means z-score with K batches (dof = K − 1).

    Parameters
    ----------
    alpha : float
        The family-wise level, in (0, 1).
    n_tests : int
        The number of tests k ≥ 1.
    dof : float, optional
        Degrees of freedom (``inf``: normal).

    Returns
    -------
    float
        The critical value z.

    Raises
    ------
    SgtuneError
        α outside (0, 1), or so small that α/(2k) underflows.

    Examples
    --------
    >>> from sgtune.diagnostics import bonferroni_threshold
    >>> round(bonferroni_threshold(0.05, 1), 3), round(bonferroni_threshold(0.05, 10, dof=31), 2)
    (1.96, 3.02)
    """
    a = check_positive(alpha, "alpha")
    if a >= 1:
        raise SgtuneError(f"alpha must lie in (0, 1), got {alpha}")
    k = check_int(n_tests, "n_tests", low=1)
    tail = a / (2 * k)  # the upper tail itself: 1 − α/(2k) rounds to 1 (an infinite z) once α/(2k) < 1e-16
    if not tail > 0:
        raise SgtuneError(f"alpha must be at least {2 * k * 5e-324:.3g} (α/(2k) with k = {k} tests underflows to 0), "
                          f"got {alpha}")
    # scipy.stats' norm.isf and t.isf evaluate exactly these (tests/test_lazy_imports.py)
    return float(-special.ndtri(tail) if math.isinf(dof) else -special.stdtrit(dof, tail))


@dataclass(frozen=True)
class CovarianceTest:
    """Entrywise comparison of a predicted and an empirical covariance (upper triangle).

    Attributes
    ----------
    z : (D, D) ndarray
        The z-scores (symmetric).
    z_max : float
        max |z_ij| over i ≤ j.
    argmax : tuple of int
        The entry (i, j) of ``z_max``.
    threshold : float
        The Bonferroni critical value t*.
    passed : bool
        ``z_max`` ≤ ``threshold``.
    n_tests : int
        k = D(D+1)/2.
    alpha : float
        The family-wise level.
    dof : float
        K − 1.
    relative_tolerance : float
        The model error r added in quadrature.
    relative_frobenius_error : float
        ‖Σ̂ − Σ‖_F / ‖Σ‖_F.

    Examples
    --------
    >>> from sgtune.diagnostics import compare_covariance
    >>> t = compare_covariance(np.eye(2), np.eye(2) + 0.01, np.full((2, 2), 0.02), n_batches=32)
    >>> t.passed, t.n_tests, t.dof
    (True, 3, 31.0)
    """

    z: np.ndarray
    z_max: float
    argmax: tuple[int, int]
    threshold: float
    passed: bool
    n_tests: int
    alpha: float
    dof: float
    relative_tolerance: float
    relative_frobenius_error: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_covariance(predicted: Any, empirical: Any, standard_error: Any, *, n_batches: int,
                       alpha: float = 1e-3, relative_tolerance: float = 0.0) -> CovarianceTest:
    r"""Test a predicted covariance entrywise: z_ij = (Σ̂_ij − Σ_ij) / sqrt(se_ij² + (r·sqrt(Σ_ii Σ_jj))²).

    Rejected when max_{i≤j} |z_ij| > t*.

    t* is the two-sided Bonferroni critical value at level α over k = D(D+1)/2 entries of
    Student-t with K − 1 degrees of freedom (K = ``n_batches``, the batches behind the
    standard errors). ``relative_tolerance`` r adds a known model error in quadrature
    (e.g. the O(λ/B) Taylor error of the proxy for non-Gaussian GLMs); r = 0 tests the
    prediction exactly. Family-wise false-rejection probability ≤ α when the prediction is exact.

    Parameters
    ----------
    predicted : (D, D) array_like
        Σ, the prediction.
    empirical : (D, D) array_like
        Σ̂, the chains' covariance.
    standard_error : (D, D) array_like
        Its entrywise standard error (e.g. from :func:`covariance_batch_means`).
    n_batches : int
        K, the batches behind the standard errors.
    alpha : float, optional
        The family-wise level.
    relative_tolerance : float, optional
        A known model error r ≥ 0.

    Returns
    -------
    CovarianceTest
        The z-scores, the threshold and the verdict ``passed``.

    Raises
    ------
    ShapeError
        The three matrices are not the same (D, D).
    SgtuneError
        A negative tolerance, K < 2 or α outside (0, 1).

    Examples
    --------
    >>> from sgtune.diagnostics import compare_covariance
    >>> t = compare_covariance(np.eye(2), 1.5 * np.eye(2), np.full((2, 2), 0.02), n_batches=32)
    >>> t.passed, t.argmax
    (False, (0, 0))
    """
    P = as_float_array(predicted, "predicted", ndim=2)
    E = as_float_array(empirical, "empirical", ndim=2)
    S = as_float_array(standard_error, "standard_error", ndim=2)
    if not (P.shape == E.shape == S.shape and P.shape[0] == P.shape[1]):
        raise ShapeError(f"predicted, empirical and standard_error must be the same (D, D); got "
                         f"{P.shape}, {E.shape}, {S.shape}")
    r = check_positive(relative_tolerance, "relative_tolerance", strict=False)
    K = check_int(n_batches, "n_batches", low=2)
    d = P.shape[0]
    iu = np.triu_indices(d)
    scale = np.sqrt(np.abs(np.outer(np.diag(P), np.diag(P))))
    denom = np.sqrt(S**2 + (r * scale) ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(denom > 0, (E - P) / denom, np.where(E == P, 0.0, np.inf))
    k = len(iu[0])
    thr = bonferroni_threshold(alpha, k, K - 1)
    zu = np.abs(z[iu])
    j = int(np.argmax(zu))
    zmax = float(zu[j])
    rel = float(np.linalg.norm(E - P) / max(np.linalg.norm(P), 1e-300))
    return CovarianceTest(z=z, z_max=zmax, argmax=(int(iu[0][j]), int(iu[1][j])), threshold=thr,
                          passed=bool(zmax <= thr), n_tests=k, alpha=float(alpha), dof=float(K - 1),
                          relative_tolerance=r, relative_frobenius_error=rel)
