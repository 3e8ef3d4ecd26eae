"""Kernel Stein discrepancy (KSD) of samples against the full-data posterior, IMQ kernel, V-statistic.

The KSD measures how far an empirical distribution Q_n = (1/n) Σ_i δ_{θ_i} is from a target
p known only through its score s(θ) = ∇ log p(θ) (no normalising constant, no draws from p).
With a base kernel k and the Langevin Stein operator, Gorham & Mackey (2017, §3.1)

    KSD²(Q_n) = (1/n²) Σ_{i,j} k₀(θ_i, θ_j),
    k₀(x, y) = s(x)ᵀs(y) k(x, y) + s(x)ᵀ∇_y k + s(y)ᵀ∇_x k + Σ_d ∂²k/∂x_d∂y_d.

sgtune uses the inverse multiquadric k(x, y) = (1 + ‖x − y‖²)^(−1/2) (c = 1, β = −1/2), the
kernel whose KSD detects non-convergence (their §3.3). With r = x − y and
u = 1 + ‖r‖², the four terms are, in closed form (derived in this module's docstring of
:func:`imq_stein_kernel` and checked against finite differences in the tests),

    k₀(x, y) = u^(−1/2) s(x)ᵀs(y) + u^(−3/2) (s(x) − s(y))ᵀ r + D u^(−3/2) − 3 ‖r‖² u^(−5/2).

Target (docs/cli.rst, mean-loss convention): p(θ | 𝒟) ∝ exp(−N·L(θ)) with
L(θ) = (1/N) Σ_n l_n(θ) + θᵀΓθ/(2N), so s(θ) = −Σ_n ∇l_n(θ) − Γθ.

For n i.i.d. draws from p the off-diagonal part of the V-statistic has mean zero, so
E[KSD²] = E[k₀(θ, θ)]/n = (E‖s(θ)‖² + D)/n; for a Gaussian target with precision P this is
(tr P + D)/n exactly, which is how the tests check the n^(−1/2) rate without trusting the code.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core._refs import cites
from ..core._validation import as_float_array, check_int
from ..core.errors import ShapeError, SgtuneError

__all__ = ["KSDResult", "imq_stein_kernel", "ksd", "posterior_scores", "posterior_ksd", "chain_ksd",
           "chain_ksd_summary", "posterior_is_gaussian", "DEFAULT_BLOCK", "CHAIN_KSD_MAX_DRAWS"]

#: rows per block: the blocked sum holds two (block, n) float64 work arrays at a time
DEFAULT_BLOCK = 1024
#: draws kept (evenly thinned) when verify/calibrate score a chain: KSD costs O(n²D) + n score evaluations
CHAIN_KSD_MAX_DRAWS = 2000
#: per-observation gradient evaluations allowed for the chain KSD of verify/calibrate (draws × N)
CHAIN_KSD_GRADIENT_BUDGET = 20_000_000

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class KSDResult:
    """Kernel Stein discrepancy of n samples.

    Attributes
    ----------
    ksd : float
        sqrt of the V-statistic, the reported discrepancy (same units as the score).
    ksd_squared : float
        The V-statistic (1/n²) Σ_{i,j} k₀(θ_i, θ_j) (≥ 0 up to rounding).
    diagonal_mean : float
        (1/n) Σ_i k₀(θ_i, θ_i) = mean of ‖s(θ_i)‖² + D; n·ksd_squared equals it for a perfect
        sample in expectation, so ``diagonal_mean / n`` is the KSD² an i.i.d. sample of this
        size from the target would show (an order-of-magnitude yardstick).
    n_samples : int
        The number of samples n.
    block : int
        Rows per block used for the double sum.

    Examples
    --------
    >>> from sgtune.diagnostics.ksd import ksd
    >>> x = np.random.default_rng(0).standard_normal((200, 2))
    >>> r = ksd(x, -x)
    >>> r.n_samples, bool(r.ksd == np.sqrt(r.ksd_squared))
    (200, True)
    """

    ksd: float
    ksd_squared: float
    diagonal_mean: float
    n_samples: int
    block: int


@cites("gorham2017", "§3.1 (Langevin Stein kernel k₀, closed-form KSD); §3.3 (IMQ kernel, c = 1, β = −1/2)")
def imq_stein_kernel(x: Any, y: Any, score_x: Any, score_y: Any) -> np.ndarray:
    r"""Stein kernel k₀(x_i, y_j) of the IMQ base kernel, all pairs: an (n, m) matrix.

    k₀ = u^(−1/2) s(x)ᵀs(y) + u^(−3/2) (s(x) − s(y))ᵀ(x − y) + D u^(−3/2) − 3‖x − y‖² u^(−5/2),
    u = 1 + ‖x − y‖².

    Derivation (k = u^β, β = −1/2, r = x − y): ∇_x k = 2β u^(β−1) r, ∇_y k = −∇_x k, and
    Σ_d ∂²k/∂x_d∂y_d = −2βD u^(β−1) − 4β(β−1)‖r‖² u^(β−2). Inserting these into
    k₀ = s(x)ᵀs(y) k + s(x)ᵀ∇_y k + s(y)ᵀ∇_x k + Σ_d ∂²k/∂x_d∂y_d with −2β = 1 and
    −4β(β−1) = −3 gives the line above.

    Parameters
    ----------
    x, y : (n, D) and (m, D) array_like
        The points.
    score_x, score_y : (n, D) and (m, D) array_like
        The scores ∇ log p at those points.

    Returns
    -------
    (n, m) ndarray
        The kernel k₀(x_i, y_j) of every pair.

    References
    ----------
    [1] Gorham & Mackey, Measuring Sample Quality with Kernels (ICML 2017), §3.1 and §3.3.

    Examples
    --------
    >>> from sgtune.diagnostics.ksd import imq_stein_kernel
    >>> x = np.zeros((1, 2))
    >>> imq_stein_kernel(x, x, x, x)  # at x = y with zero scores: D u^(−3/2) = 2
    array([[2.]])
    """
    x, y = np.atleast_2d(np.asarray(x, float)), np.atleast_2d(np.asarray(y, float))
    sx, sy = np.atleast_2d(np.asarray(score_x, float)), np.atleast_2d(np.asarray(score_y, float))
    d = x.shape[1]
    r = x[:, None, :] - y[None, :, :]
    r2 = np.einsum("ijk,ijk->ij", r, r)
    u = 1.0 + r2
    ds = sx[:, None, :] - sy[None, :, :]
    cross = np.einsum("ijk,ijk->ij", ds, r)
    return (u ** -0.5 * (sx @ sy.T) + u ** -1.5 * (cross + d) - 3.0 * r2 * u ** -2.5)


def _as_samples(samples: Any, scores: Any) -> tuple[np.ndarray, np.ndarray]:
    x = as_float_array(samples, "samples")
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] < 1:
        raise ShapeError(f"samples must be (n, D) with n ≥ 1 but has shape {x.shape}")
    s = as_float_array(scores, "scores")
    if s.ndim == 1 and x.shape[1] == 1:
        s = s[:, None]
    if s.shape != x.shape:
        raise ShapeError(f"scores must have the samples' shape (n, D) = {x.shape} but has shape {s.shape}")
    return x, s


@cites("gorham2017", "§3.1 (closed-form KSD); §3.3 (IMQ kernel, c = 1, β = −1/2)")
def ksd(samples: Any, scores: Any, *, block: int = DEFAULT_BLOCK,
        progress: ProgressCallback | None = None) -> KSDResult:
    r"""KSD² = (1/n²) Σ_{i,j} k₀(θ_i, θ_j), IMQ Stein kernel, V-statistic, in row blocks.

    Cost O(n²D) flops in BLAS products, memory O(block·n): each pair of row blocks forms the
    Gram matrices s_Iᵀs_J, x_Iᵀx_J, s_Iᵀx_J, x_Iᵀs_J and combines them with
    (s_i − s_j)ᵀ(x_i − x_j) = s_iᵀx_i + s_jᵀx_j − s_iᵀx_j − s_jᵀx_i and
    ‖x_i − x_j‖² = ‖x_i‖² + ‖x_j‖² − 2x_iᵀx_j. Samples are centred first (the kernel is
    translation invariant), which keeps that subtraction accurate for tight posteriors.
    Only blocks J ≥ I are formed (k₀ is symmetric).

    Parameters
    ----------
    samples : (n, D) array_like
        The draws θ_i (a 1-D array is n draws of a scalar).
    scores : (n, D) array_like
        The target's score s(θ_i) = ∇ log p(θ_i).
    block : int, optional
        Rows per block (≥ 1); changes only rounding.
    progress : callable(done, total), optional
        Called over the block pairs.

    Returns
    -------
    KSDResult
        The discrepancy (``ksd`` = sqrt of the V-statistic) and its i.i.d. yardstick.

    Raises
    ------
    ShapeError
        Samples and scores disagree in shape.
    SgtuneError
        Non-finite samples or scores.

    References
    ----------
    [1] Gorham & Mackey, Measuring Sample Quality with Kernels (ICML 2017), §3.1 and §3.3.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).standard_normal((500, 2))
    >>> r = ksd(x, -x)                      # standard normal target, s(θ) = −θ
    >>> bool(abs(r.ksd_squared * 500 / 4 - 1) < 0.5)   # E[n·KSD²] = tr P + D = 4
    True
    """
    x, s = _as_samples(samples, scores)
    b = check_int(block, "block", low=1)
    n, d = x.shape
    x = x - x.mean(axis=0)
    xx = np.einsum("ij,ij->i", x, x)
    sxd = np.einsum("ij,ij->i", s, x)
    starts = list(range(0, n, b))
    total = len(starts) * (len(starts) + 1) // 2
    done = 0
    acc = 0.0
    for bi, i0 in enumerate(starts):
        I = slice(i0, min(i0 + b, n))
        for j0 in starts[bi:]:
            J = slice(j0, min(j0 + b, n))
            r2 = x[I] @ x[J].T
            r2 *= -2.0
            r2 += xx[I, None]
            r2 += xx[None, J]
            np.maximum(r2, 0.0, out=r2)
            if i0 == j0:
                np.fill_diagonal(r2, 0.0)
            inv = np.add(r2, 1.0)                 # u = 1 + ‖r‖²
            np.sqrt(inv, out=inv)
            np.reciprocal(inv, out=inv)           # u^(−1/2)
            inv2 = inv * inv                      # u^(−1)
            # (s_i − s_j)ᵀ(x_i − x_j) + D
            cross = s[I] @ x[J].T
            cross += x[I] @ s[J].T
            np.subtract(sxd[I, None] + d, cross, out=cross)
            cross += sxd[None, J]
            r2 *= inv2
            r2 *= 3.0                             # 3‖r‖²/u
            cross -= r2
            cross *= inv2                         # u^(−1)·(cross + D − 3‖r‖²/u)
            cross += s[I] @ s[J].T
            cross *= inv                          # k₀
            k0 = cross
            acc += float(k0.sum()) * (1.0 if i0 == j0 else 2.0)
            done += 1
            if progress is not None:
                progress(done, total)
    v = acc / (n * n)
    diag = float(np.mean(np.einsum("ij,ij->i", s, s)) + d)
    if v < 0:  # k₀ is a positive-definite kernel: a negative V-statistic is rounding only
        v = 0.0
    return KSDResult(ksd=math.sqrt(v), ksd_squared=v, diagonal_mean=diag, n_samples=n, block=b)


def posterior_is_gaussian(model: Any) -> bool:
    """Tell whether p(θ | 𝒟) ∝ exp(−N·L) is exactly Gaussian (linear model + Gaussian prior).

    There the covariance test of ``verify``/``calibrate`` is complete; for every other model the
    commands add the KSD of the chain against the posterior.

    Parameters
    ----------
    model : object
        The model.

    Returns
    -------
    bool
        True for the ``linear`` GLM.

    Examples
    --------
    >>> from sgtune.diagnostics.ksd import posterior_is_gaussian
    >>> from sgtune.models import get_model
    >>> posterior_is_gaussian(get_model("linear")), posterior_is_gaussian(get_model("logistic"))
    (True, False)
    """
    return getattr(model, "name", None) == "linear"


@cites("gorham2017", "§2: the Langevin Stein operator needs only the score ∇ log p")
def posterior_scores(model: Any, X: Any, y: Any, samples: Any, prior_precision: Any = None, *,
                     progress: ProgressCallback | None = None) -> np.ndarray:
    r"""Compute the scores s(θ_i) = −Σ_n ∇l_n(θ_i) − Γθ_i of the full-data posterior p(θ | 𝒟) ∝ e^(−N·L(θ)).

    Mean-loss convention L(θ) = (1/N) Σ_n l_n(θ) + θᵀΓθ/(2N), so ∇ log p = −N∇L. Uses only
    ``model.per_sample_grads(theta, X, y) -> (N, D)`` (the model protocol); one call per sample.

    Parameters
    ----------
    model : PerSampleModel
        Any object with ``per_sample_grads(theta, X, y)``.
    X, y : (N, p) and (N,) array_like
        The full data set.
    samples : (n, D) array_like
        Parameter draws.
    prior_precision : float, (D, D) array_like or None, optional
        Γ, a scalar G (Γ = G·I) or None (no prior).
    progress : callable(done, total), optional
        Called over the samples.

    Returns
    -------
    (n, D) ndarray
        The scores.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> data, model = example("logistic"), get_model("logistic")
    >>> e = expand(model, data)
    >>> from sgtune.diagnostics.ksd import posterior_scores
    >>> s = posterior_scores(model, data.X, data.y, e.theta_hat[None, :])
    >>> bool(np.abs(s).max() < 1e-6)  # the score vanishes at the MAP (flat prior)
    True
    """
    if not callable(getattr(model, "per_sample_grads", None)):
        raise SgtuneError(f"model {getattr(model, 'name', model)!r} has no per_sample_grads(theta, X, y); "
                          "the KSD needs per-observation gradients (see the model protocol in the README)")
    x = as_float_array(samples, "samples")
    if x.ndim != 2:
        raise ShapeError(f"samples must be (n, D) but has shape {x.shape}")
    n, d = x.shape
    from ..models.base import model_dim

    d_model = model_dim(model, int(np.shape(X)[1]))
    if d != d_model:
        raise ShapeError(f"samples must have the model's D = {d_model} columns but have {d} (shape {x.shape})")
    if prior_precision is None:
        gam = np.zeros((d, d))
    else:
        gam = np.asarray(prior_precision, float)
        gam = gam * np.eye(d) if gam.ndim == 0 else gam
        if gam.shape != (d, d):
            raise ShapeError(f"prior_precision must be a scalar or (D, D) = ({d}, {d}) but has shape {gam.shape}")
    out = np.empty((n, d))
    step = max(1, n // 50)
    for i in range(n):
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, by sample
            g = np.asarray(model.per_sample_grads(x[i], X, y), float)
        if g.ndim != 2 or g.shape[1] != d:
            raise ShapeError(f"samples must have the model's D = {g.shape[-1] if g.ndim else '?'} columns but "
                             f"have {d} (per_sample_grads returned shape {g.shape})")
        out[i] = -g.sum(axis=0)
        if progress is not None and ((i + 1) % step == 0 or i + 1 == n):
            progress(i + 1, n)
    with np.errstate(invalid="ignore"):
        out -= x @ gam.T
    if not np.all(np.isfinite(out)):
        i = int(np.argmax(~np.all(np.isfinite(out), axis=1)))
        raise SgtuneError(f"the posterior score is not finite at samples[{i}]; the sample lies where the "
                          "model's loss overflows (diverged chain?) — drop it")
    return out


@cites("gorham2017", "§3.1 and §3.3 — KSD of samples against p(θ|𝒟) ∝ exp(−N·L(θ))")
def posterior_ksd(model: Any, X: Any, y: Any, samples: Any, prior_precision: Any = None, *,
                  block: int = DEFAULT_BLOCK, progress: ProgressCallback | None = None) -> KSDResult:
    """KSD (IMQ, V-statistic) of ``samples`` against the full-data posterior of ``model`` on (X, y).

    :func:`posterior_scores` then :func:`ksd`; ``progress(done, total)`` counts the n score
    evaluations and then the kernel block pairs on one scale (total = n + block pairs).

    Parameters
    ----------
    model : PerSampleModel
        The model.
    X, y : (N, p) and (N,) array_like
        The full data set.
    samples : (n, D) array_like
        Parameter draws.
    prior_precision : float, (D, D) array_like or None, optional
        Γ (None: no prior).
    block : int, optional
        Rows per block of the double sum.
    progress : callable(done, total), optional
        Progress over both stages.

    Returns
    -------
    KSDResult
        The discrepancy of the draws against the posterior.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> data, model = example("logistic"), get_model("logistic")
    >>> e = expand(model, data)
    >>> from sgtune.diagnostics.ksd import posterior_ksd
    >>> draws = np.random.default_rng(0).multivariate_normal(e.theta_hat, e.posterior_cov(), 200)
    >>> posterior_ksd(model, data.X, data.y, draws).n_samples
    200
    """
    n = int(np.shape(samples)[0]) if np.ndim(samples) else 0
    nb = -(-n // max(1, int(block))) if n else 0
    total = n + nb * (nb + 1) // 2
    s = posterior_scores(model, X, y, samples, prior_precision,
                         progress=None if progress is None else (lambda d, t: progress(d, total)))
    return ksd(samples, s, block=block, progress=None if progress is None else (lambda d, t: progress(n + d, total)))


def chain_ksd(model: Any, X: Any, y: Any, trace: Any, prior_precision: Any = None, *,
              max_draws: int = CHAIN_KSD_MAX_DRAWS, block: int = DEFAULT_BLOCK,
              progress: ProgressCallback | None = None) -> KSDResult:
    """:func:`posterior_ksd` of a chain trace (C, T, D): non-finite chains dropped, draws thinned evenly.

    Keeps at most ``max_draws`` draws in total (every k-th draw of each chain, same k for all
    chains), so the cost stays O(max_draws²·D) whatever the run length.

    Parameters
    ----------
    model : PerSampleModel
        The model.
    X, y : (N, p) and (N,) array_like
        The full data set.
    trace : (C, T, D) array_like
        The chains' draws.
    prior_precision : float, (D, D) array_like or None, optional
        Γ (None: no prior).
    max_draws : int, optional
        Most draws kept in total.
    block : int, optional
        Rows per block of the double sum.
    progress : callable(done, total), optional
        Progress, as in :func:`posterior_ksd`.

    Returns
    -------
    KSDResult
        The discrepancy of the kept draws.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> data, model = example("logistic"), get_model("logistic")
    >>> e = expand(model, data)
    >>> from sgtune.diagnostics.ksd import chain_ksd
    >>> trace = np.random.default_rng(0).multivariate_normal(e.theta_hat, e.posterior_cov(), (2, 300))
    >>> chain_ksd(model, data.X, data.y, trace, max_draws=100).n_samples
    100
    """
    tr = np.asarray(trace, float)
    if tr.ndim != 3:
        raise ShapeError(f"trace must be (chains, draws, D) but has shape {tr.shape}")
    tr = tr[np.all(np.isfinite(tr), axis=(1, 2))]
    if tr.shape[0] == 0 or tr.shape[1] == 0:
        raise SgtuneError("the trace holds no finite draws (all chains diverged or thin left no draws)")
    m = check_int(max_draws, "max_draws", low=1)
    k = min(tr.shape[1], max(1, math.ceil(tr.shape[0] * tr.shape[1] / m)))  # ≥ 1 draw per chain
    draws = tr[:, k - 1::k, :].reshape(-1, tr.shape[2])
    return posterior_ksd(model, X, y, draws, prior_precision, block=block, progress=progress)


def chain_ksd_summary(model: Any, X: Any, y: Any, chains: Any, prior_precision: Any = None, *,
                      max_draws: int = CHAIN_KSD_MAX_DRAWS,
                      max_gradient_rows: int = CHAIN_KSD_GRADIENT_BUDGET) -> dict[str, float | int]:
    """The KSD keys ``verify`` and ``calibrate`` report beside the covariance test (empty when not applicable).

    Empty for a Gaussian posterior (:func:`posterior_is_gaussian`: the covariance test is
    complete there) or when ``chains`` (a :class:`~sgtune.sampler.ChainResult`) kept no trace;
    diverged chains (``chains.diverged_at >= 0``) are left out. Otherwise ``ksd`` (of at most ``max_draws`` evenly
    thinned draws against p(θ|𝒟) ∝ exp(−N·L)), ``ksd_n_samples`` and ``ksd_iid_reference``
    = sqrt(mean(‖s(θ_i)‖² + D)/n), about what n independent posterior draws would score.
    Each draw costs one full-data gradient (N per-observation gradients), so for large N the
    number of draws shrinks to keep n·N ≤ ``max_gradient_rows`` (never below 100 draws).

    Parameters
    ----------
    model : PerSampleModel
        The model.
    X, y : (N, p) and (N,) array_like
        The full data set.
    chains : ChainResult
        The run (with a trace).
    prior_precision : float, (D, D) array_like or None, optional
        Γ (None: no prior).
    max_draws : int, optional
        Most draws used.
    max_gradient_rows : int, optional
        Budget of per-observation gradients n·N.

    Returns
    -------
    dict
        ``ksd``, ``ksd_n_samples`` and ``ksd_iid_reference``, or empty.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.diagnostics.ksd import chain_ksd_summary
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model
    >>> from sgtune.sampler import run_chains
    >>> data = example("logistic")
    >>> res = run_chains("logistic", data, Dynamics(0.1, batch_size=32, inv_temperature=data.n_data),
    ...                  RunSpec(1000, n_chains=2, thin=10))
    >>> sorted(chain_ksd_summary(get_model("logistic"), data.X, data.y, res))
    ['ksd', 'ksd_iid_reference', 'ksd_n_samples']
    """
    trace = getattr(chains, "trace", None)
    if trace is None or posterior_is_gaussian(model):
        return {}
    trace = np.asarray(trace)[np.asarray(chains.diverged_at) < 0]
    n_data = int(np.shape(X)[0])
    max_draws = int(min(max_draws, max(100, max_gradient_rows // max(n_data, 1))))
    r = chain_ksd(model, X, y, trace, prior_precision, max_draws=max_draws)
    return {"ksd": r.ksd, "ksd_n_samples": r.n_samples,
            "ksd_iid_reference": math.sqrt(r.diagonal_mean / r.n_samples)}
