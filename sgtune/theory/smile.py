"""SMILE (anonymous, 2025) in pure NumPy: Gamma fit of |ΔE|, Wilson–Hilferty quantiles, EMAs, the b² metric.

The SMILE paper (anonymous, 2025: *Can Microcanonical Langevin Dynamics Leverage Mini-batch Gradient Noise?*),
section 4.2 (energy-variance tuner), appendix F.3 (Gamma quantiles), section 3.2 and
appendix C (Table 1 metric).

- Gamma moment matching: a Gamma(k, θ) law has mean kθ and variance kθ², so matching
  mean μ and standard deviation s gives **shape k = μ²/s², scale θ = s²/μ**. The paper's
  eq. (5) prints shape = s²/μ and scale = (μ/s)²: its mean kθ is still μ but its variance
  kθ² = μ³/s² is not s² (unless μ³ = s⁴), so its quantiles are wrong;
  :func:`gamma_moment_match` uses the correct pair and the tests show the printed one fails.
- Wilson–Hilferty (1931, appendix F.3): Q(p; k, θ) ≈ kθ (1 − 1/(9k) + z/(3√k))³,
  z = Φ⁻¹(p); the cube's base is clipped at 0 (it can go negative for k < 1/9·(1 − …)).
- EMAs (eq. 4, β = 0.01) start from zero and are divided by 1 − (1 − β)ⁿ after n updates
  (the "standard correction factor" of section 4.2, as in Adam); the deviation in the
  variance update uses the corrected mean (the raw one is biased to 0 early on).
- b² (Hoffman & Sountsov 2022, used in Table 1): for coordinate i,
  b²_i = (E_samples[θ_i²] − E[θ_i²])² / Var(θ_i²); per chain averaged over i (maximum for
  the funnel), then averaged over chains; the bootstrap resamples chains.
- Exact second moments of the three appendix-C targets (E[θ_i²], Var(θ_i²)).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtri

from ..core._refs import cites
from ..core._validation import as_float_array, as_vector, check_int, check_positive
from ..core.errors import ShapeError, SgtuneError

__all__ = [
    "GammaFit",
    "B2Estimate",
    "gamma_moment_match",
    "wilson_hilferty_quantile",
    "ema_update",
    "ema_corrected",
    "b2_per_coordinate",
    "b2_chains",
    "bootstrap_b2",
    "gaussian_second_moments",
    "rosenbrock_second_moments",
    "funnel_second_moments",
    "normal_raw_moment",
]


@dataclass(frozen=True, slots=True)
class GammaFit:
    """Gamma(shape, scale) matched to a mean and a standard deviation.

    Attributes
    ----------
    shape : float
        k = μ²/s².
    scale : float
        θ = s²/μ.

    Examples
    --------
    >>> gamma_moment_match(2.0, 1.0)
    GammaFit(shape=4.0, scale=0.5)
    """

    shape: float
    scale: float

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "scale": self.scale}


@dataclass(frozen=True, slots=True)
class B2Estimate:
    """The b² of an ensemble: mean over chains and its bootstrap standard deviation.

    Attributes
    ----------
    value : float
        The mean of the per-chain b².
    bootstrap_std : float
        The standard deviation of that mean over chain resamples.
    per_chain : (C,) ndarray
        The per-chain b².
    reduce : str
        ``"mean"`` or ``"max"``: how each chain's b² was reduced over coordinates.
    n_bootstrap : int
        The number of resamples.

    Examples
    --------
    >>> est = bootstrap_b2([0.01, 0.02, 0.03], np.random.default_rng(0), n_bootstrap=200)
    >>> f"{est.value:.3f}", est.n_bootstrap
    ('0.020', 200)
    """

    value: float
    bootstrap_std: float
    per_chain: np.ndarray
    reduce: str
    n_bootstrap: int

    def to_dict(self) -> dict[str, Any]:
        return {"b2": self.value, "bootstrap_std": self.bootstrap_std, "per_chain": self.per_chain.tolist(),
                "reduce": self.reduce, "n_bootstrap": self.n_bootstrap}


@cites("smile2025", "section 4.2, eq. (5) (with shape and scale in the correct moment-matching order)")
def gamma_moment_match(mean: float, std: float) -> GammaFit:
    r"""Gamma(k, θ) with mean μ and standard deviation s: k = μ²/s², θ = s²/μ.

    The paper's eq. (5) prints k = s²/μ and θ = (μ/s)²; that pair keeps the mean μ but has
    variance μ³/s² instead of s². This function implements the moment matching.

    Parameters
    ----------
    mean : float
        The mean μ > 0 (of |ΔE|).
    std : float
        The standard deviation s > 0.

    Returns
    -------
    GammaFit
        The shape k and the scale θ.

    References
    ----------
    The SMILE paper (anonymous, 2025), section 4.2, eq. (5).

    Examples
    --------
    >>> fit = gamma_moment_match(2.0, 1.0)
    >>> fit.shape * fit.scale, fit.shape * fit.scale ** 2   # the mean and the variance
    (2.0, 1.0)
    """
    mu = check_positive(mean, "mean")
    s = check_positive(std, "std")
    return GammaFit(mu * mu / (s * s), s * s / mu)


@cites("smile2025", "appendix F.3 (Wilson–Hilferty Gamma quantile)")
def wilson_hilferty_quantile(p: Any, shape: float, scale: float) -> np.ndarray:
    r"""Q(p) ≈ kθ·max(0, 1 − 1/(9k) + Φ⁻¹(p)/(3√k))³ (Wilson & Hilferty 1931).

    Parameters
    ----------
    p : float or array
        Probabilities in (0, 1).
    shape, scale : float
        The Gamma shape k > 0 and scale θ > 0.

    Returns
    -------
    ndarray
        The quantiles, the shape of ``p``.

    Raises
    ------
    SgtuneError
        If some p ∉ (0, 1).

    References
    ----------
    The SMILE paper (anonymous, 2025), appendix F.3.

    Examples
    --------
    >>> np.round(wilson_hilferty_quantile([0.5, 0.95], 4.0, 0.5), 3)
    array([1.838, 3.872])
    """
    pa = as_float_array(p, "p")
    if np.any((pa <= 0.0) | (pa >= 1.0)):
        raise SgtuneError(f"p must lie in (0, 1), got {pa.ravel()[np.argmax((pa <= 0) | (pa >= 1))]}")
    k = check_positive(shape, "shape")
    th = check_positive(scale, "scale")
    z = ndtri(pa)
    base = np.maximum(1.0 - 1.0 / (9.0 * k) + z / (3.0 * math.sqrt(k)), 0.0)
    return np.asarray(k * th * base ** 3)


@cites("smile2025", "section 4.2, eq. (4); section 3.2 (pSMILE EMAs, α = 0.01)")
def ema_update(mean_raw: Any, var_raw: Any, count: int, x: Any, rate: float) -> tuple[np.ndarray, np.ndarray, int]:
    r"""One EMA step: m ← (1−β)m + βx, v ← (1−β)v + β(x − m̂)², with m̂ the bias-corrected new mean.

    Both EMAs start at 0 (``count`` = 0); :func:`ema_corrected` divides them by 1 − (1 − β)ⁿ.

    Parameters
    ----------
    mean_raw, var_raw : float or array
        Raw (uncorrected) EMA of the value and of the squared deviation.
    count : int
        Number of updates so far (n ≥ 0).
    x : float or array
        New observation.
    rate : float
        The rate β ∈ (0, 1].

    Returns
    -------
    mean_raw : ndarray
        The updated raw EMA of the value.
    var_raw : ndarray
        The updated raw EMA of the squared deviation.
    count : int
        ``count + 1``.

    Raises
    ------
    SgtuneError
        If β ∉ (0, 1].

    References
    ----------
    The SMILE paper (anonymous, 2025), eq. (4) and the pSMILE EMAs of section 3.2.

    Examples
    --------
    >>> m, v, n = ema_update(0.0, 0.0, 0, 2.0, 0.1)
    >>> f"{float(m):.3f}", n   # raw: biased towards the start 0
    ('0.200', 1)
    """
    b = check_positive(rate, "rate")
    if b > 1.0:
        raise SgtuneError(f"rate must lie in (0, 1], got {b}")
    n = check_int(count, "count", low=0) + 1
    m = (1.0 - b) * np.asarray(mean_raw, dtype=float) + b * np.asarray(x, dtype=float)
    mhat = m / (1.0 - (1.0 - b) ** n)
    v = (1.0 - b) * np.asarray(var_raw, dtype=float) + b * (np.asarray(x, dtype=float) - mhat) ** 2
    return m, v, n


@cites("smile2025", "section 4.2 (bias correction of the EMAs)")
def ema_corrected(mean_raw: Any, var_raw: Any, count: int, rate: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Bias-corrected EMAs (m, v)/(1 − (1 − β)ⁿ) after n = ``count`` ≥ 1 updates.

    Parameters
    ----------
    mean_raw, var_raw : float or array
        The raw EMAs (:func:`ema_update`).
    count : int
        The number n ≥ 1 of updates.
    rate : float
        The rate β.

    Returns
    -------
    mean : ndarray
        The corrected EMA of the value.
    variance : ndarray
        The corrected EMA of the squared deviation.

    References
    ----------
    The SMILE paper (anonymous, 2025), section 4.2.

    Examples
    --------
    >>> m, v, n = ema_update(0.0, 0.0, 0, 2.0, 0.1)
    >>> mean, var = ema_corrected(m, v, n, 0.1)
    >>> f"{float(mean):.3f}"   # after one update: the observation
    '2.000'
    """
    n = check_int(count, "count", low=1)
    b = check_positive(rate, "rate")
    c = 1.0 - (1.0 - b) ** n
    return np.asarray(mean_raw, dtype=float) / c, np.asarray(var_raw, dtype=float) / c


@cites("smile2025", "section 3.2 and appendix C (b² = (E[θ²_samples] − E[θ²])²/Var(θ²))")
def b2_per_coordinate(sample_second_moment: Any, true_second_moment: Any, true_var_of_square: Any) -> np.ndarray:
    r"""Compute b²_i = (Ê[θ_i²] − E[θ_i²])² / Var(θ_i²), elementwise (last axis = coordinates).

    Parameters
    ----------
    sample_second_moment : (..., D) array
        Ê[θ_i²] from samples (e.g. one row per chain).
    true_second_moment, true_var_of_square : (D,) arrays
        E[θ_i²] and Var(θ_i²) > 0 of the target.

    Returns
    -------
    (..., D) array
        The b²_i.

    Raises
    ------
    SgtuneError
        If some Var(θ_i²) ≤ 0.

    References
    ----------
    The SMILE paper (anonymous, 2025), section 3.2; Hoffman & Sountsov (2022).

    Examples
    --------
    >>> b2_per_coordinate([[1.1, 2.0]], [1.0, 2.0], [2.0, 8.0])
    array([[0.005, 0.   ]])
    """
    m = as_float_array(sample_second_moment, "sample_second_moment")
    d = m.shape[-1] if m.ndim else 1
    e = as_vector(true_second_moment, "true_second_moment", d)
    v = as_vector(true_var_of_square, "true_var_of_square", d)
    if np.any(v <= 0):
        raise SgtuneError(f"true_var_of_square must be > 0, got min {v.min()}")
    return np.asarray((m - e) ** 2 / v)


@cites("smile2025", "appendix C (average over coordinates; maximum for the funnel; average over chains)")
def b2_chains(sample_second_moment: Any, true_second_moment: Any, true_var_of_square: Any,
              reduce: str = "mean") -> np.ndarray:
    r"""Per-chain b²: b²_c = mean_i b²_{ci} (``reduce="mean"``) or max_i b²_{ci} (``"max"``).

    Parameters
    ----------
    sample_second_moment : (C, D) array
        Ê[θ_i²], one row per chain.
    true_second_moment, true_var_of_square : (D,) arrays
        E[θ_i²] and Var(θ_i²) > 0 of the target.
    reduce : {"mean", "max"}
        How each chain's b²_i are reduced over coordinates.

    Returns
    -------
    (C,) array
        The per-chain b².

    Raises
    ------
    ShapeError
        If ``sample_second_moment`` is not (C, D).
    SgtuneError
        If ``reduce`` is not ``"mean"`` or ``"max"``.

    References
    ----------
    The SMILE paper (anonymous, 2025), appendix C.

    Examples
    --------
    >>> b2_chains([[1.1, 2.0], [0.9, 2.4]], [1.0, 2.0], [2.0, 8.0], reduce="max")
    array([0.005, 0.02 ])
    """
    m = as_float_array(sample_second_moment, "sample_second_moment")
    if m.ndim != 2:
        raise ShapeError(f"sample_second_moment must be (C, D) but has shape {m.shape}")
    b = b2_per_coordinate(m, true_second_moment, true_var_of_square)
    if reduce == "mean":
        return np.asarray(b.mean(axis=1))
    if reduce == "max":
        return np.asarray(b.max(axis=1))
    raise SgtuneError(f"reduce must be 'mean' or 'max', got {reduce!r}")


@cites("smile2025", "appendix C (bootstrap over chains for the standard deviation)")
def bootstrap_b2(per_chain_b2: Any, rng: np.random.Generator, *, n_bootstrap: int = 2000,
                 reduce: str = "mean") -> B2Estimate:
    r"""Mean of the per-chain b² and the standard deviation of that mean over chain resamples.

    Draws ``n_bootstrap`` resamples of the C chains with replacement, averages each, and
    reports the (ddof = 1) standard deviation of those averages.

    Parameters
    ----------
    per_chain_b2 : (C,) array
        Output of :func:`b2_chains`.
    rng : numpy.random.Generator
        The random stream of the resamples.
    n_bootstrap : int
        The number of resamples (≥ 2).
    reduce : str
        Recorded in the result (how ``per_chain_b2`` was reduced over coordinates).

    Returns
    -------
    B2Estimate
        The mean, its bootstrap standard deviation and the per-chain values.

    References
    ----------
    The SMILE paper (anonymous, 2025), appendix C.

    Examples
    --------
    >>> est = bootstrap_b2([0.01, 0.02, 0.03], np.random.default_rng(0), n_bootstrap=200)
    >>> bool(0 < est.bootstrap_std < 0.01)
    True
    """
    b = as_vector(per_chain_b2, "per_chain_b2")
    nb = check_int(n_bootstrap, "n_bootstrap", low=2)
    c = b.shape[0]
    idx = rng.integers(0, c, size=(nb, c))
    means = b[idx].mean(axis=1)
    return B2Estimate(float(b.mean()), float(means.std(ddof=1)), b, reduce, nb)


@cites("sgtune", "raw moments of a normal law (binomial expansion; used for the Rosenbrock moments)")
def normal_raw_moment(order: int, mean: float, var: float) -> float:
    """Compute E[Xⁿ] for X ~ N(mean, var): Σ_k C(n, 2k) μ^{n−2k} var^k (2k − 1)!!.

    Parameters
    ----------
    order : int
        The order n ≥ 0.
    mean, var : float
        The normal law's mean and variance.

    Returns
    -------
    float
        The raw moment E[Xⁿ].

    Examples
    --------
    >>> normal_raw_moment(4, 0.0, 1.0), normal_raw_moment(2, 1.0, 0.5)
    (3.0, 1.5)
    """
    n = check_int(order, "order", low=0)
    total = 0.0
    for k in range(n // 2 + 1):
        dfact = 1.0
        for j in range(1, 2 * k, 2):
            dfact *= j
        total += math.comb(n, 2 * k) * mean ** (n - 2 * k) * var ** k * dfact
    return total


@cites("smile2025", "appendix C (ill-conditioned Gaussian N(0, Σ))")
def gaussian_second_moments(cov: Any) -> tuple[np.ndarray, np.ndarray]:
    r"""E[θ_i²] = Σ_ii and Var(θ_i²) = 2Σ_ii² for θ ~ N(0, Σ).

    Parameters
    ----------
    cov : (D, D) array
        The covariance Σ.

    Returns
    -------
    second_moment : (D,) ndarray
        E[θ_i²].
    var_of_square : (D,) ndarray
        Var(θ_i²).

    References
    ----------
    The SMILE paper (anonymous, 2025), appendix C.

    Examples
    --------
    >>> gaussian_second_moments(np.diag([1.0, 4.0]))
    (array([1., 4.]), array([ 2., 32.]))
    """
    s = np.diag(as_float_array(cov, "cov", ndim=2)).copy()
    return s, 2.0 * s * s


@cites("smile2025", "appendix C (Rosenbrock product, log p = −Σ[(θ²_{2i−1} − θ_{2i})²/Q + (θ_{2i−1} − 1)²])")
def rosenbrock_second_moments(dim: int, q: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    r"""Exact E[θ_i²], Var(θ_i²) of the Rosenbrock product: x ~ N(1, ½), y | x ~ N(x², Q/2).

    E[x²] = 3/2, Var(x²) = E[x⁴] − 9/4; E[y²] = E[x⁴] + Q/2,
    E[y⁴] = E[x⁸] + 6(Q/2)E[x⁴] + 3(Q/2)².

    Parameters
    ----------
    dim : int
        Even D.
    q : float
        Q > 0.

    Returns
    -------
    second_moment : (D,) ndarray
        E[θ_i²].
    var_of_square : (D,) ndarray
        Var(θ_i²).

    Raises
    ------
    SgtuneError
        If D is odd.

    References
    ----------
    The SMILE paper (anonymous, 2025), appendix C (after Grumitt et al. 2022).

    Examples
    --------
    >>> e, v = rosenbrock_second_moments(4)
    >>> e
    array([1.5, 4.8, 1.5, 4.8])
    """
    d = check_int(dim, "dim", low=2)
    if d % 2:
        raise SgtuneError(f"dim must be even for the Rosenbrock product, got {d}")
    qh = check_positive(q, "q") / 2.0
    x2, x4, x8 = (normal_raw_moment(n, 1.0, 0.5) for n in (2, 4, 8))
    y2 = x4 + qh
    y4 = x8 + 6.0 * qh * x4 + 3.0 * qh * qh
    e = np.tile([x2, y2], d // 2)
    v = np.tile([x4 - x2 * x2, y4 - y2 * y2], d // 2)
    return e, v


@cites("smile2025", "appendix C (Neal's funnel θ₁ ~ N(0, 3²), θ_i | θ₁ ~ N(0, e^{θ₁}))")
def funnel_second_moments(dim: int, scale: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    r"""Exact moments of Neal's funnel: E[θ₁²] = a², Var = 2a⁴; E[θ_i²] = e^{a²/2}, Var = 3e^{2a²} − e^{a²}.

    Uses E[e^{tθ₁}] = e^{t²a²/2} with θ_i² | θ₁ having mean e^{θ₁} and fourth moment 3e^{2θ₁}.

    Parameters
    ----------
    dim : int
        The dimension D ≥ 2.
    scale : float
        The standard deviation a of θ₁ (3 in the paper).

    Returns
    -------
    second_moment : (D,) ndarray
        E[θ_i²].
    var_of_square : (D,) ndarray
        Var(θ_i²).

    References
    ----------
    The SMILE paper (anonymous, 2025), appendix C (Neal 2003).

    Examples
    --------
    >>> e, v = funnel_second_moments(3, scale=1.0)   # E[θ_i²] = e^{1/2} for i > 1
    >>> e
    array([1.    , 1.6487, 1.6487])
    """
    d = check_int(dim, "dim", low=2)
    a2 = check_positive(scale, "scale") ** 2
    e = np.full(d, math.exp(a2 / 2.0))
    v = np.full(d, 3.0 * math.exp(2.0 * a2) - math.exp(a2))
    e[0] = a2
    v[0] = 2.0 * a2 * a2
    return e, v

