"""MAP fitting and the second-order expansion of any protocol model (:mod:`sgtune.models.base`).

Scaling (Wang, Ding & Huggins (2026), §2.1): mean loss L(θ) = (1/N) Σ_n l_n(θ) + (1/N) R(θ),
R(θ) = ½ θᵀΓθ (a Gaussian prior N(0, Γ⁻¹)). Only the protocol is used: per-sample losses,
gradients and curvature; the rank-one structure J_n = w_n u_n u_nᵀ a model declares (GLMs,
Gauss–Newton networks) and the block structure J_n = W_n ⊗ x_n x_nᵀ (multinomial logistic
regression) select the O(N·D²) paths, dense J_n the general ones.

Data read out of core (``Dataset.rows`` set: a folder or a Parquet file, :mod:`sgtune.io.data`)
take the streamed paths: every pass over the rows (the fit's loss/gradient/curvature, the
expansion's J, 𝓘, ḡ, and C̄(Σ) = mean_n J_nΣJ_n at each use) is a
:func:`sgtune.io.reduce.reduce_rows` over fixed chunks — O(chunk·D + D²) memory, never an
(N, D) array of gradients — serially or on a Dask cluster (``scheduler``), with the same
numbers either way. The in-memory path is unchanged.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core._validation import as_float_array, as_symmetric
from ..io.data import Dataset
from ..core.errors import AccuracyWarning, ConvergenceError, DataFormatError, NotPositiveDefiniteError, SgtuneError
from ..core.reasons import REACHABLE_MARGIN, Remedy
from ..core.results import ResultMixin, SummaryTable, estimate_columns, resolve_parameter_names, table_from_columns
from ..io.reduce import CHUNK_ROWS, RowSource, reduce_rows
from .base import (BlockCurvature, DenseCurvature, ModelError, RankOneCurvature, block_dense, block_matrix,
                   checked_call, model_dim, model_label, parameter_names, per_sample_curvature)

__all__ = ["FitResult", "fit_map", "Expansion", "expand", "expansion_at", "prior_matrix", "DENSE_HESSIAN_BUDGET", "Reductions",
           "RowStream"]

#: largest D⁴ (float64 entries, ≈ 100 MB) of the cached operator Σ ↦ mean_n J_nΣJ_n for dense J_n
_JSJ_OPERATOR_BUDGET = 12_500_000
#: streamed C̄(Σ) results an Expansion remembers (exact Σ match; each saves a pass over the rows)
_JSJ_RECENT = 4
#: largest N·D² (float64 entries) of dense per-sample Hessians sgtune forms (≈ 800 MB)
DENSE_HESSIAN_BUDGET = 100_000_000
#: κ(H) above which the theory solves in whitened coordinates (:meth:`Expansion.whitening`): there
#: ε·κ(H) > 1e-8, half the digits of a solve in θ's own units are rounding
WHITEN_CONDITION = 1e8
#: rows per block of the in-memory block-curvature C̄(Σ) (its (rows, D) temporaries stay ≤ 2²² numbers at D = 1024)
_BLOCK_ROWS = 4096


def prior_matrix(prior_precision: Any, dim: int) -> np.ndarray:
    """Γ as a (D, D) symmetric positive semi-definite matrix from a scalar G (Γ = G·I) or a matrix.

    Parameters
    ----------
    prior_precision : float or (D, D) array_like
        G ≥ 0 or the matrix Γ (the prior term of the mean loss is θᵀΓθ/(2N)).
    dim : int
        D.

    Returns
    -------
    (D, D) ndarray
        Γ.

    Raises
    ------
    SgtuneError
        A negative or non-finite scalar.
    ShapeError
        A matrix that is not (D, D).
    NotPositiveDefiniteError
        A matrix with a negative eigenvalue.

    Examples
    --------
    >>> from sgtune.models import prior_matrix
    >>> prior_matrix(2.0, 2)
    array([[2., 0.],
           [0., 2.]])
    """
    arr = np.asarray(prior_precision, dtype=float)
    if arr.ndim == 0:
        g = float(arr)
        if not (math.isfinite(g) and g >= 0):
            raise SgtuneError(f"prior_precision must be a finite number >= 0, got {g}")
        return g * np.eye(dim)
    gam = as_symmetric(arr, "prior_precision", dim)
    lam = interruptible(4.0 * dim ** 3 / 3, np.linalg.eigvalsh, gam)
    if lam[0] < -1e-12 * max(1.0, abs(lam[-1])):
        raise NotPositiveDefiniteError(
            f"prior_precision must be positive semi-definite but has eigenvalue {lam[0]:.3g}")
    return gam


@dataclass(frozen=True)
class FitResult:
    """MAP estimate and Newton diagnostics, as :func:`fit_map` returns them.

    Attributes
    ----------
    theta_hat : (D,) ndarray
        The MAP θ̂.
    iterations : int
        Newton iterations taken (after L-BFGS, for models fitted that way).
    grad_norm : float
        ‖∇L(θ̂)‖ at the returned point.
    loss : float
        The penalised mean loss L(θ̂) = (1/N) Σ_n l_n(θ̂) + θ̂ᵀΓθ̂/(2N).

    Examples
    --------
    >>> from sgtune.io.data import make_dataset
    >>> from sgtune.models import fit_map, get_model
    >>> data = make_dataset([[1.0], [2.0], [3.0]], [2.0, 4.0, 6.0])
    >>> fit = fit_map(get_model("linear"), data)
    >>> np.round(fit.theta_hat, 6), bool(fit.grad_norm < 1e-8)
    (array([2.]), True)
    """

    theta_hat: np.ndarray
    iterations: int
    grad_norm: float
    loss: float


@cites("wang2026", "§2.1: θ̂ = argmin (1/N)Σ l_n(θ) + R(θ)/N")
def fit_map(model: Any, data: Dataset, prior_precision: Any = 0.0, *, theta0: Any = None,
            tol: float = 1e-10, max_iter: int = 200, population_size: int | None = None,
            seed: int = 0, scheduler: str | None = None) -> FitResult:
    r"""Fit the MAP θ̂ = argmin_θ (1/N) Σ_n l_n(θ) + θᵀΓθ/(2N) of a protocol model, checking convergence.

    Parameters
    ----------
    model : PerSampleModel
        The model (a :class:`~sgtune.models.glm.GLM`, an MLP, a user's model).
    data : Dataset
        The observations.
    prior_precision : float or array_like, optional
        Γ: a scalar (Γ = γI) or a (D, D) positive semi-definite matrix; 0 is a flat prior.
    theta0 : array_like or None, optional
        Starting point (default: the model's own start).
    tol : float, optional
        Convergence when the Newton decrement gᵀH⁻¹g ≤ tol².
    max_iter : int, optional
        Most Newton iterations.
    population_size : int or None, optional
        N when ``data`` is a subsample of M rows of a data set of N rows (the prior term is then
        θᵀΓθ/(2N), so θ̂ estimates the full-data MAP).
    seed : int, optional
        Seed of a non-convex model's random start.
    scheduler : str or None, optional
        For data out of core: None (serial), ``"local"`` or a Dask scheduler's address.

    Returns
    -------
    FitResult
        The MAP θ̂, the iterations taken, ‖∇L(θ̂)‖ and L(θ̂).

    Raises
    ------
    DataFormatError
        Response outside the model's domain; the model's identifiability check failed (GLMs:
        separable logistic data, rank-deficient design without a prior).
    ConvergenceError
        No convergence within ``max_iter`` Newton iterations (or L-BFGS failed).

    See Also
    --------
    expand : Fit and expand the losses at θ̂ in one call.

    Notes
    -----
    Implements θ̂ of Wang, Ding & Huggins (2026), §2.1. GLMs (``fit_method = "newton"``): damped Newton with a
    backtracking line search from ``model.newton_start`` (or ``theta0``). Other (non-convex) models: L-BFGS
    from ``model.initial_params(p, default_rng(seed))`` (or ``theta0``), polished by the same Newton, which
    certifies a strict local minimum (``gᵀH⁻¹g ≤ tol²`` with an undamped, positive-definite H; Levenberg
    damping otherwise). Out-of-core data (``data.rows``) are streamed in chunked passes (``scheduler``),
    Newton starting from the MAP of a random sample of at most ``IDENTIFIABILITY_SAMPLE`` rows (where the
    identifiability check runs too). Dense factorisations are interruptible (Ctrl-C is prompt at large D).

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import fit_map, get_model
    >>> fit = fit_map(get_model("logistic"), example("logistic"))
    >>> np.round(fit.theta_hat, 2)
    array([ 0.13, -0.05,  0.51,  0.11, -0.59])
    >>> fit.grad_norm < 1e-8
    True
    """
    X, y = data.X, data.y
    m_rows = X.shape[0]
    d = model_dim(model, X.shape[1])
    n = m_rows if population_size is None else int(population_size)
    label = model_label(model)
    if callable(getattr(model, "check_response", None)):
        model.check_response(y, data.source or "y")
    gam = prior_matrix(prior_precision, d)
    rows = data.rows
    newton = getattr(model, "fit_method", "lbfgs") == "newton"
    sample = None
    if rows is not None and (newton or callable(getattr(model, "check_identifiable", None))):
        sample = _sample_rows(data, seed)
    if callable(getattr(model, "check_identifiable", None)):
        if rows is None:
            model.check_identifiable(X, y, gam, data.source)
        else:
            _check_identifiable_sample(model, data, gam, sample)

    obj = _MapObjective(model, data, gam, n, d, scheduler)
    theta = _fit_start(model, data, theta0, gam, n, d, label, max_iter, sample, seed)
    if not newton:
        theta = _lbfgs(obj.value_grad, theta, label, max_iter)
        if not _dense_affordable(model, m_rows, d):  # no curvature to certify with: gradient check only
            val, grad = obj.value_grad(theta)
            gn = float(np.linalg.norm(grad))
            if gn > math.sqrt(tol) * max(1.0, abs(val)):
                raise ConvergenceError(
                    f"MAP fit ({label}) by L-BFGS stopped with gradient norm {gn:.3g}; pass trained weights "
                    "(`theta_hat`) or use `hessian='gauss-newton'`", residual=gn, method="lbfgs")
            return FitResult(theta, 0, gn, val)
    try:
        return _newton(obj.objective, obj.value, theta, d, tol, max_iter, label)
    except _NotStrictMinimum as exc:
        raise _not_strict_minimum_error(exc, label, gam, n) from None


class _MapObjective:
    """The MAP objective L(θ) = (1/M) Σ_n l_n(θ) + θᵀΓθ/(2N) of :func:`fit_map` on M rows in memory or streamed:
    ``value_grad`` (L, ∇L), ``value`` (L) and ``objective`` (L, ∇L, H). Streamed data take one chunked pass for
    all three (remembered for the last θ: an accepted line-search point is the next iterate at no second pass);
    a rank-one (Gauss–Newton) curvature of a non-convex model is replaced by the exact mean Hessian from D
    Hessian–vector products when the model has them (quadratic convergence)."""

    def __init__(self, model: Any, data: Dataset, gam: np.ndarray, n: int, d: int, scheduler: str | None) -> None:
        self.model, self.X, self.y, self.rows = model, data.X, data.y, data.rows
        self.gam, self.n, self.d, self.m, self.scheduler = gam, n, d, data.X.shape[0], scheduler
        newton = getattr(model, "fit_method", "lbfgs") == "newton"
        self.exact_hvp = (not newton and getattr(model, "rank_one", False)
                          and callable(getattr(model, "hessian_vector_products", None)))
        self.last: dict[bytes, tuple[float, np.ndarray, np.ndarray]] = {}

    def _prior(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        return 0.5 * theta @ self.gam @ theta / self.n, self.gam @ theta / self.n

    def value_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        pv, pg = self._prior(theta)
        if self.rows is not None:
            ls, gs = reduce_rows(_chunk_fit_terms, self.rows, self.model, theta, self.d, False,
                                 chunk_rows=_chunk_rows(self.model, self.d), scheduler=self.scheduler)
            return float(ls[0] / self.m + pv), gs / self.m + pg
        losses = checked_call(self.model, "per_sample_losses", theta, self.X, self.y, shape=(self.m,))
        g = checked_call(self.model, "per_sample_grads", theta, self.X, self.y, shape=(self.m, self.d))
        return float(losses.mean() + pv), _column_sums(g) / self.m + pg

    def value(self, theta: np.ndarray) -> float:
        if self.rows is not None:  # streamed: the loss by chunks too (never an (N,) temporary), with ∇L and H
            return self.objective(theta)[0]
        losses = checked_call(self.model, "per_sample_losses", theta, self.X, self.y, shape=(self.m,))
        return float(losses.mean() + self._prior(theta)[0])

    def objective(self, theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        if self.rows is not None:  # one pass: loss, gradient and curvature sums (remembered for the last θ)
            key = np.asarray(theta, dtype=float).tobytes()
            if key not in self.last:
                ls, gs, js = reduce_rows(_chunk_fit_terms, self.rows, self.model, theta, self.d, True,
                                         chunk_rows=_chunk_rows(self.model, self.d), scheduler=self.scheduler)
                J, (pv, pg) = js / self.m, self._prior(theta)
                self.last = {key: (float(ls[0] / self.m + pv), gs / self.m + pg,
                                   0.5 * (J + J.T) + self.gam / self.n)}
            return self.last[key]
        val, grad = self.value_grad(theta)
        if self.exact_hvp:
            cols = [checked_call(self.model, "hessian_vector_products", theta, self.X, self.y, e,
                                 shape=(self.m, self.d)).mean(axis=0) for e in np.eye(self.d)]
            hess = np.array(cols).T
            return val, grad, 0.5 * (hess + hess.T) + self.gam / self.n
        return val, grad, _mean_curvature(per_sample_curvature(self.model, theta, self.X, self.y)) + self.gam / self.n


def _fit_start(model: Any, data: Dataset, theta0: Any, gam: np.ndarray, n: int, d: int, label: str, max_iter: int,
               sample: tuple[np.ndarray, np.ndarray] | None, seed: int) -> np.ndarray:
    """Where :func:`fit_map` starts: ``theta0``; streamed Newton models the MAP of a random sample (so few passes
    remain); in memory the model's ``newton_start`` (else zeros); non-convex models their seeded initial_params."""
    if theta0 is not None:
        theta = as_float_array(theta0, "theta0").reshape(-1).copy()
        if theta.shape[0] != d:
            raise SgtuneError(f"theta0 must have length D = {d}, got {theta.shape[0]}")
        return theta
    if getattr(model, "fit_method", "lbfgs") != "newton":
        return checked_call(model, "initial_params", data.X.shape[1], np.random.default_rng(seed), shape=(d,))
    if sample is not None:
        return _sample_start(model, sample, gam, n, d, label, max_iter)
    if callable(getattr(model, "newton_start", None)):
        return np.asarray(model.newton_start(data.X, data.y, gam), dtype=float)
    return np.zeros(d)


def _lbfgs(value_grad: Any, theta: np.ndarray, label: str, max_iter: int) -> np.ndarray:
    """L-BFGS to a small gradient (the Newton polish that follows certifies the minimum).

    A run that exhausts its budget with growing parameters means the loss has no minimiser at
    finite θ (a network without weight decay, separable classes): that is an error, with the remedies.
    """
    from scipy.optimize import minimize

    norm0 = float(np.linalg.norm(theta))
    res = minimize(value_grad, theta, jac=True, method="L-BFGS-B",
                   options={"maxiter": 25 * max_iter, "maxfun": 50 * max_iter, "gtol": 1e-10, "ftol": 1e-15,
                            "maxcor": 30})
    x = np.asarray(res.x, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ConvergenceError(f"MAP fit ({label}) by L-BFGS diverged; standardise the covariates or add a "
                               "prior precision", method="lbfgs")
    if res.status == 1:  # iteration / evaluation budget exhausted
        gn = float(np.linalg.norm(res.jac))
        grew = float(np.linalg.norm(x)) > 100 * max(norm0, 1.0)
        raise ConvergenceError(
            f"MAP fit ({label}) by L-BFGS did not converge in {res.nit} iterations (gradient norm {gn:.3g}, "
            f"‖θ‖ = {np.linalg.norm(x):.3g}{', still growing: the loss has no minimiser at finite θ' if grew else ''}); "
            "pass a `prior_precision` > 0 (e.g. 1: weight decay) or trained weights (`theta_hat`)",
            residual=gn, method="lbfgs")
    return x


def _newton(objective: Any, value: Any, theta: np.ndarray, d: int, tol: float, max_iter: int,
            label: str) -> FitResult:
    """Damped Newton with a backtracking line search and Levenberg damping (see :func:`fit_map`).

    ``objective(θ)`` gives (L, ∇L, H); the line search calls only ``value(θ)`` = L. Converged
    (Newton decrement ≤ tol, undamped): returns θ plus the final Newton step (quadratically closer
    to θ̂; ``grad_norm`` and ``loss`` are those at θ, before the step).
    """
    val, grad, hess = objective(theta)
    # diverging (no minimiser at finite θ): far beyond where it started; relative, so that a model whose
    # θ̂ is large in its own units (an intercept near 1e9 for a response near 1e9) is not taken for one
    runaway = 1e8 * max(1.0, float(np.linalg.norm(theta)))
    for it in range(1, max_iter + 1):
        damping = 0.0
        while True:
            try:
                chol = interruptible(d ** 3 / 3, np.linalg.cholesky, hess + damping * np.eye(d))
                break
            except np.linalg.LinAlgError:
                damping = max(2 * damping, 1e-8 * max(1.0, np.abs(hess).max()))
        step = -interruptible(2.0 * d ** 2, lambda: np.linalg.solve(chol.T, np.linalg.solve(chol, grad)))
        decrement2 = float(-grad @ step)
        if decrement2 <= tol**2 and damping == 0.0:
            # converged; the step already computed takes θ to O(decrement²) of θ̂ at no cost, so fits that
            # stop at different iterates (in memory, streamed from a sample's MAP) agree to rounding level
            return FitResult(theta + step, it - 1, float(np.linalg.norm(grad)), val)
        t = 1.0
        # a predicted decrease below the loss's rounding cannot be line-searched (the Armijo test then compares
        # rounding errors and halves the step at random); that deep in the quadratic region take the full step
        full = damping == 0.0 and decrement2 <= 1e3 * np.finfo(float).eps * max(1.0, abs(val))
        while not full:
            cand = theta + t * step
            try:
                cval = value(cand)
            except ModelError:  # overflow far from the minimum: shorten the step
                cval = math.inf
            if math.isfinite(cval) and cval <= val - 1e-4 * t * decrement2:
                break
            t *= 0.5
            if t < 1e-12:
                break
        if full:
            cand, cval = theta + step, val
        elif t < 1e-12:
            if decrement2 <= (1e3 * tol) ** 2:  # stalled at rounding level: accept
                return FitResult(theta, it, float(np.linalg.norm(grad)), val)
            raise ConvergenceError(
                f"MAP fit ({label}) stalled: line search failed with Newton decrement "
                f"{math.sqrt(decrement2):.3g}; check the data scale or add a prior precision",
                residual=math.sqrt(decrement2), method="newton")
        theta = cand
        stalled = val - cval <= 4 * np.finfo(float).eps * abs(val)  # no progress beyond rounding
        val, grad, hess = objective(theta)
        if stalled and damping == 0.0 and decrement2 <= (1e3 * tol) ** 2:  # converged to rounding level
            return FitResult(theta, it, float(np.linalg.norm(grad)), val)
        if not np.all(np.isfinite(theta)) or np.linalg.norm(theta) > runaway:
            break
    gn = float(np.linalg.norm(grad))
    lam = interruptible(4.0 * d ** 3 / 3, np.linalg.eigvalsh, 0.5 * (hess + hess.T)) if np.all(np.isfinite(hess)) \
        else None
    if lam is not None and gn <= STATIONARY_GRADIENT * max(1.0, abs(val)) and not lam[0] > SINGULAR_RTOL * lam[-1]:
        raise _NotStrictMinimum(gn, float(lam[0]), float(lam[-1]), theta)
    raise ConvergenceError(
        f"MAP fit ({label}) did not converge in {max_iter} Newton iterations "
        f"(gradient norm {gn:.3g}); the MLE may not exist — add a prior precision "
        "or rescale the covariates", residual=gn, method="newton")


#: a fit whose gradient norm is below this (relative to max(1, |L|)) has reached a stationary point
STATIONARY_GRADIENT = 1e-8
#: a curvature whose smallest eigenvalue is at most this fraction of its largest is singular
SINGULAR_RTOL = 1e-10
#: a computed prior precision makes H's smallest eigenvalue this fraction of its largest
PRIOR_MARGIN = 1e-2


class _NotStrictMinimum(Exception):
    """Newton reached a stationary point whose curvature is singular or indefinite (fit_map turns it into an error)."""

    def __init__(self, grad_norm: float, lam_min: float, lam_max: float, theta: np.ndarray) -> None:
        super().__init__("stationary point, not a strict minimum")
        self.grad_norm, self.lam_min, self.lam_max, self.theta = grad_norm, lam_min, lam_max, theta


def prior_remedy(hessian_min: float, hessian_max: float, gam: np.ndarray, n: int) -> Remedy | None:
    """A prior precision G·I that makes H = J + Γ/N positive definite at θ̂ by a margin: G = g + N·(margin·λ_max
    − λ_min)⁺ rounded up to 2 significant digits (g the current Γ's largest eigenvalue), as a computed remedy."""
    g = float(np.linalg.eigvalsh(gam)[-1]) if gam.size else 0.0
    add = n * max(PRIOR_MARGIN * abs(hessian_max) - hessian_min, 0.0)
    if not math.isfinite(add) or add <= 0:
        return None
    new = g + add
    digits = 10 ** (math.floor(math.log10(new)) - 1)
    new = math.ceil(new / digits) * digits
    return Remedy(f"a prior precision {new:.2g} (weight decay), which makes the curvature H = J + Γ/N positive "
                  f"definite at θ̂ with its smallest eigenvalue at least {PRIOR_MARGIN:g}× its largest",
                  {"prior_precision": float(f"{new:.2g}")}, expect="runs")


def _curvature_code(a: np.ndarray) -> str:
    """``indefinite-curvature`` when a has a clearly negative eigenvalue, else ``singular-curvature``."""
    lam = np.linalg.eigvalsh(a)
    return "indefinite-curvature" if lam[0] < -SINGULAR_RTOL * abs(lam[-1]) else "singular-curvature"


def prior_remedies(remedy: Remedy | None, n: int) -> tuple[Remedy, ...]:
    """``remedy`` (a prior precision) with the posterior target at REACHABLE_MARGIN·N first — a non-convex loss's
    J stays indefinite under any prior, so where the command has a target the sandwich would fail — then alone."""
    if remedy is None:
        return ()
    beta = float(f"{REACHABLE_MARGIN * n:.6g}")
    full = Remedy(f"{remedy.why}, and the posterior target H⁻¹/N (the sandwich needs J itself positive definite, "
                  f"which no prior changes) with SGLD at inverse temperature {beta:.6g} ({REACHABLE_MARGIN:g}·N: at "
                  "β = N the injected noise alone gives the posterior)",
                  {**remedy.changes, "target": "posterior", "inv_temperature": beta}, expect="runs")
    return (full, remedy)


def _not_strict_minimum_error(exc: _NotStrictMinimum, label: str, gam: np.ndarray, n: int) -> NotPositiveDefiniteError:
    kind = "indefinite" if exc.lam_min < -SINGULAR_RTOL * abs(exc.lam_max) else "singular"
    remedy = prior_remedy(exc.lam_min, exc.lam_max, gam, n)
    remedies = prior_remedies(remedy, n)
    return NotPositiveDefiniteError(
        f"MAP fit ({label}) reached a stationary point of the loss (gradient norm {exc.grad_norm:.2g}) whose curvature "
        f"is {kind} (eigenvalues from {exc.lam_min:.3g} to {exc.lam_max:.3g}): θ̂ is not a strict minimum, so the "
        "data do not determine every parameter there (a network's symmetries, or more parameters than the data fix)"
        + ("" if remedy is None else "; a prior precision makes the minimum strict"), remedies=remedies,
        code=f"{kind}-curvature")


#: rows per block of :func:`_column_sums`
_SUM_BLOCK = 256
#: multiply-adds above which a dense linear-algebra call runs where Ctrl-C and SIGTERM can interrupt it
#: (:func:`interruptible`; about a second on one core)
INTERRUPTIBLE_WORK = 1e9


def interruptible(work: float, fn: Any, *args: Any) -> Any:
    """``fn(*args)``; when it costs more than :data:`INTERRUPTIBLE_WORK` multiply-adds (``work``) and this is the
    main thread, in a worker thread the main thread waits on in short slices: a signal (Ctrl-C, SIGTERM) is
    handled within a fraction of a second instead of when a minutes-long LAPACK call returns (NumPy releases
    the interpreter lock inside it; the abandoned call ends with the process)."""
    import threading

    if work < INTERRUPTIBLE_WORK or threading.current_thread() is not threading.main_thread():
        return fn(*args)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = fn(*args)
        except BaseException as exc:  # handed to the caller below
            box["exc"] = exc

    worker = threading.Thread(target=run, name="sgtune-linalg", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "exc" in box:
        raise box["exc"]
    return box["out"]


def _column_sums(g: np.ndarray) -> np.ndarray:
    """Σ_n g_n of an (N, D) array by two-level blocked summation: error O(ε(b + N/b)), b = 256.

    NumPy's sum along axis 0 of a C-order array is a plain running sum, O(εN): at N = 10⁶ that is
    a gradient floor of 1e-10, which sets how closely fits on different paths (in memory, streamed)
    agree. Sums of row blocks, then of the block sums, cost twice the plain sum (a transposed copy
    for NumPy's pairwise sum costs eight times).
    """
    n = g.shape[0]
    k = n // _SUM_BLOCK
    out = g[:k * _SUM_BLOCK].reshape(k, _SUM_BLOCK, -1).sum(axis=1).sum(axis=0) if k else np.zeros(g.shape[1])
    return out + g[k * _SUM_BLOCK:].sum(axis=0)


def _mean_curvature(cur: RankOneCurvature | BlockCurvature | DenseCurvature) -> np.ndarray:
    """J = mean_n J_n from any structure (rank-one: Uᵀ diag(w) U / n, one BLAS call)."""
    if isinstance(cur, RankOneCurvature):
        u, w = cur.features, cur.weights
        J = interruptible(float(u.shape[0]) * u.shape[1] ** 2, lambda: (u.T * w) @ u) / u.shape[0]
    elif isinstance(cur, BlockCurvature):
        J = interruptible(float(cur.features.shape[0]) * (cur.weights.shape[1] * cur.features.shape[1]) ** 2,
                          block_matrix, cur.features, cur.weights) / cur.features.shape[0]
    else:
        J = cur.hessians.mean(axis=0)
    return 0.5 * (J + J.T)


#: rows the streamed fit checks identifiability on (a sample that is identified proves the full data are)
IDENTIFIABILITY_SAMPLE = 20_000


def _sample_rows(data: Dataset, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random sample of at most IDENTIFIABILITY_SAMPLE rows of out-of-core data (all rows if fewer)."""
    n = data.n_data
    rows = data.rows
    assert rows is not None
    if n <= IDENTIFIABILITY_SAMPLE:
        return rows.read(0, n)
    idx = np.sort(np.random.default_rng(seed).choice(n, size=IDENTIFIABILITY_SAMPLE, replace=False))
    return rows.read_index(idx)


def _sample_start(model: Any, sample: tuple[np.ndarray, np.ndarray], gam: np.ndarray, n: int, d: int,
                  label: str, max_iter: int) -> np.ndarray:
    """Newton start for streamed data: the MAP of the random sample (prior Γ/N as for the full data).

    Each full-data Newton iteration is a pass over the rows; from the sample's MAP (O(√(D/M)) from
    θ̂) quadratic convergence needs about three. Any failure on the sample (separable, not
    converged) falls back to the model's ``newton_start`` on it: the full-data Newton decides.
    """
    Xs, ys = sample
    m = Xs.shape[0]

    def value(th: np.ndarray) -> float:
        return float(checked_call(model, "per_sample_losses", th, Xs, ys, shape=(m,)).mean() + 0.5 * th @ gam @ th / n)

    def objective(th: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        g = checked_call(model, "per_sample_grads", th, Xs, ys, shape=(m, d)).mean(axis=0) + gam @ th / n
        return value(th), g, _mean_curvature(per_sample_curvature(model, th, Xs, ys)) + gam / n

    start = np.asarray(model.newton_start(Xs, ys, gam), dtype=float) if callable(
        getattr(model, "newton_start", None)) else np.zeros(d)
    try:
        theta = _newton(objective, value, start, d, 1e-8, max_iter, label).theta_hat
    except (ConvergenceError, ModelError):
        return start
    return theta if np.all(np.isfinite(theta)) else start


def _check_identifiable_sample(model: Any, data: Dataset, gam: np.ndarray,
                               sample: tuple[np.ndarray, np.ndarray]) -> None:
    """``model.check_identifiable`` on a seeded random sample of at most IDENTIFIABILITY_SAMPLE rows.

    One-sided: a full-rank, non-separable sample proves the full data are too; a failure on
    the sample is reported as such (it may, rarely, pass on the full data: then use a prior).
    """
    n = data.n_data
    Xs, ys = sample
    if n <= IDENTIFIABILITY_SAMPLE:
        model.check_identifiable(Xs, ys, gam, data.source)
        return
    try:
        model.check_identifiable(Xs, ys, gam, data.source)
    except DataFormatError as exc:
        raise DataFormatError(f"{exc} (checked on a random sample of {IDENTIFIABILITY_SAMPLE} of the N = {n} rows; "
                              "a prior precision > 0 skips the check)") from None


def _chunk_rows(model: Any, d: int) -> int:
    """Rows per chunk: CHUNK_ROWS for rank-one models; block-curvature chunks hold ≤ 2²² gradient numbers
    (the C̄(Σ) pass forms one (rows, D) product per block); dense J_n chunks ≤ 2²² numbers."""
    if getattr(model, "rank_one", False):
        return CHUNK_ROWS
    if getattr(model, "block_curvature", False):
        return max(1, min(CHUNK_ROWS, (1 << 22) // d))
    return max(1, min(CHUNK_ROWS, (1 << 22) // (d * d)))


def _curvature_sum(cur: RankOneCurvature | BlockCurvature | DenseCurvature, dense: bool = False) -> np.ndarray:
    """Σ_n J_n over the rows of one chunk (unsymmetrised)."""
    if isinstance(cur, RankOneCurvature):
        u, w = cur.features, cur.weights
        if not dense:
            return (u.T * w) @ u
        return np.einsum("n,ni,nj->ij", w, u, u)
    if isinstance(cur, BlockCurvature):
        return block_matrix(cur.features, cur.weights)
    return cur.hessians.sum(axis=0)


def _chunk_fit_terms(X: np.ndarray, y: np.ndarray, model: Any, theta: np.ndarray, d: int,
                     curvature: bool) -> tuple[np.ndarray, ...]:
    """One chunk of the streamed fit: (Σ l_n, Σ g_n[, Σ J_n])."""
    m = X.shape[0]
    losses = checked_call(model, "per_sample_losses", theta, X, y, shape=(m,))
    g = checked_call(model, "per_sample_grads", theta, X, y, shape=(m, d))
    out: tuple[np.ndarray, ...] = (np.array([losses.sum()]), _column_sums(g))
    if curvature:
        out += (_curvature_sum(per_sample_curvature(model, theta, X, y)),)
    return out


def _chunk_expansion_terms(X: np.ndarray, y: np.ndarray, model: Any, theta: np.ndarray, d: int,
                           resid: bool) -> tuple[np.ndarray, ...]:
    """One chunk of the streamed expansion: (Σ g_n, Σ g_n g_nᵀ, Σ J_n, [rank-one?, residual Σ r², block?], Σ x_n²).

    The covariates' column sums of squares (for the applicability report's column scales) cost
    nothing here: the chunk is already in memory.
    """
    m = X.shape[0]
    g = checked_call(model, "per_sample_grads", theta, X, y, shape=(m, d))
    cur = per_sample_curvature(model, theta, X, y)
    r2 = float("nan")
    if resid:  # residual_variance = Σ r²/max(m − D, 1) on the chunk, so this is the chunk's Σ r²
        r2 = float(model.residual_variance(theta, X, y)) * max(m - X.shape[1], 1)
    return (_column_sums(g), g.T @ g, _curvature_sum(cur),
            np.array([float(isinstance(cur, RankOneCurvature)), r2, float(isinstance(cur, BlockCurvature))]),
            (X * X).sum(axis=0))


def _chunk_jsj(X: np.ndarray, y: np.ndarray, model: Any, theta: np.ndarray, sigma: np.ndarray,
               dense: bool) -> tuple[np.ndarray]:
    """Σ_n J_n Σ J_n over one chunk (rank-one: Uᵀ diag(w_n² u_nᵀΣu_n) U; block: :func:`_block_jsj_sum`)."""
    cur = per_sample_curvature(model, theta, X, y)
    if isinstance(cur, RankOneCurvature) and not dense:
        u, w = cur.features, cur.weights
        q = np.einsum("ij,ij->i", u @ sigma, u)
        return ((u.T * (w * w * q)) @ u,)
    if isinstance(cur, BlockCurvature) and not dense:
        return (_block_jsj_sum(cur.features, cur.weights, sigma),)
    out = np.zeros_like(sigma)
    for a in range(0, X.shape[0], 4096):
        hs = _dense_block(cur, a, a + 4096)
        out += np.einsum("nij,jk,nkl->il", hs, sigma, hs, optimize=True)
    return (out,)


def _chunk_kernel(X: np.ndarray, y: np.ndarray, model: Any, theta: np.ndarray, d: int) -> tuple[np.ndarray]:
    """Σ_n vec(J_n) vec(J_n)ᵀ over one chunk (D²×D²; :func:`_kron_from_vec_outer` turns the total into
    Σ_n J_n ⊗ J_n, the direct solve's variance kernel)."""
    cur = per_sample_curvature(model, theta, X, y)
    K = np.zeros((d * d, d * d))
    for a in range(0, X.shape[0], 4096):
        Z = _dense_block(cur, a, a + 4096).reshape(-1, d * d)
        K += Z.T @ Z
    return (K,)


def _kron_from_vec_outer(G: np.ndarray, d: int) -> np.ndarray:
    """Σ_n J_n ⊗ J_n from G = Σ_n vec(J_n)vec(J_n)ᵀ: (J⊗J)[(i,k),(j,l)] = J[i,j]J[k,l] = G[(i,j),(k,l)]."""
    return G.reshape(d, d, d, d).transpose(0, 2, 1, 3).reshape(d * d, d * d)


def _block_jsj_sum(X: np.ndarray, W: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Σ_n J_n Σ J_n for J_n = W_n ⊗ x_n x_nᵀ: Σ_n (W_n Q_n W_n) ⊗ x_n x_nᵀ with Q_n[a,b] = x_nᵀ Σ_{ab} x_n.

    (J_nΣJ_n)[(a,i),(b,j)] = Σ_{c,e} W_n[a,c] x_n[i] (x_nᵀΣ_{ce}x_n) x_n[j] W_n[e,b]. O(N·D²) in r products
    X Σ_{c·} (rows × D) — never an (N, D, D) array.
    """
    n, p = X.shape
    r = W.shape[1]
    s4 = np.asarray(sigma, dtype=float).reshape(r, p, r, p)
    Q = np.empty((n, r, r))
    for a in range(r):
        T = (X @ s4[a].reshape(p, r * p)).reshape(n, r, p)  # rows of X Σ_{a·}
        Q[:, a, :] = np.einsum("nbi,ni->nb", T, X)
    Q = 0.5 * (Q + np.swapaxes(Q, 1, 2))
    M = W @ Q @ W
    return block_matrix(X, 0.5 * (M + np.swapaxes(M, 1, 2)))


def _dense_block(cur: RankOneCurvature | BlockCurvature | DenseCurvature, a: int, b: int) -> np.ndarray:
    if isinstance(cur, RankOneCurvature):
        u, w = cur.features[a:b], cur.weights[a:b]
        return w[:, None, None] * u[:, :, None] * u[:, None, :]
    if isinstance(cur, BlockCurvature):
        return block_dense(cur.features[a:b], cur.weights[a:b])
    return cur.hessians[a:b]


@dataclass(frozen=True)
class Reductions:
    """Per-sample means an :class:`Expansion` needs, computed elsewhere (streamed over chunks).

    Parameters
    ----------
    curvature : (D, D) ndarray
        J = mean_n J_n.
    fisher : (D, D) ndarray
        𝓘 = mean_n g_n g_nᵀ.
    mean_grad : (D,) ndarray
        The mean gradient ḡ = mean_n g_n.
    n_rows : int
        The number of rows averaged over.
    column_mean_squares : (p,) ndarray or None, optional
        The mean of x_n² per covariate column (when the pass computed it).

    Examples
    --------
    >>> from sgtune.models.expansion import Reductions
    >>> r = Reductions(np.eye(2), 0.5 * np.eye(2), np.zeros(2), n_rows=100)
    >>> r.n_rows, r.column_mean_squares is None
    (100, True)
    """

    curvature: np.ndarray
    fisher: np.ndarray
    mean_grad: np.ndarray
    n_rows: int
    column_mean_squares: np.ndarray | None = None


@dataclass(frozen=True)
class RowStream:
    """Rows an :class:`Expansion` re-reads at θ̂ for C̄(Σ) and the variance kernel (out-of-core data).

    Made by :func:`expand` for data out of core; not built by hand.

    Parameters
    ----------
    rows : RowSource
        The file-backed rows.
    model : PerSampleModel
        The model whose per-sample quantities each pass computes.
    rank_one : bool
        Whether the model's curvature is rank one.
    scheduler : str or None, optional
        None (serial), ``"local"`` or a Dask scheduler's address.
    chunk_rows : int, optional
        Rows per chunk of a pass.
    block : bool, optional
        Whether the model's curvature is block structured (:class:`~sgtune.models.base.BlockCurvature`).

    See Also
    --------
    sgtune.io.reduce.reduce_rows : One chunked pass.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from sgtune.io.data import example, load_dataset
    >>> from sgtune.models import expand, get_model
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> data = example("logistic")
    >>> np.save(folder / "X.npy", data.X); np.save(folder / "y.npy", data.y)
    >>> e = expand(get_model("logistic"), load_dataset(folder))
    >>> e.grads is None, type(e.stream).__name__
    (True, 'RowStream')
    """

    rows: RowSource
    model: Any
    rank_one: bool
    scheduler: str | None = None
    chunk_rows: int = CHUNK_ROWS
    #: the model's curvature is a BlockCurvature on every chunk (and dense Hessians were not asked for)
    block: bool = False

    @property
    def dense(self) -> bool:
        """No structured (rank-one or block) fast path: C̄(Σ) forms the chunks' J_n."""
        return not (self.rank_one or self.block)

    def reduce(self, fn: Any, *args: Any) -> tuple[np.ndarray, ...]:
        return reduce_rows(fn, self.rows, self.model, *args, chunk_rows=self.chunk_rows, scheduler=self.scheduler)


def _dense_affordable(model: Any, n: int, d: int) -> bool:
    """Can the model's curvature be formed? Rank-one and block always; dense while N·D² ≤ the budget."""
    if getattr(model, "rank_one", False) or getattr(model, "block_curvature", False):
        return True
    return n * d * d <= DENSE_HESSIAN_BUDGET


@dataclass(frozen=True, repr=False)
class Expansion(ResultMixin):
    r"""Second-order expansion of the per-sample losses at θ̂ (Wang, Ding & Huggins 2026, §3 and Thm. 4.3).

    One curvature structure must be given: rank-one (``design`` X and ``weights`` w with
    J_n = w_n x_n x_nᵀ), block (``block``: a :class:`~sgtune.models.base.BlockCurvature` with
    J_n = W_n ⊗ x_n x_nᵀ) or dense ``per_sample_hessians`` (N, D, D) — or, for data out of core,
    ``grads=None`` with precomputed ``reductions`` (J, 𝓘, ḡ) and a ``stream`` over the rows,
    which :meth:`mean_jsj` and the variance kernel re-read chunk by chunk.

    Attributes
    ----------
    theta_hat : (D,) ndarray
        The expansion point θ̂ (the MAP unless given).
    grads : (N, D) ndarray or None
        Per-sample gradients g_n = ∇l_n(θ̂) (None out of core).
    prior_precision : (D, D) ndarray
        Γ.
    design, weights : (N, D) and (N,) ndarray, or None
        The rank-one curvature J_n = w_n x_n x_nᵀ (None for dense curvature or out of core).
    per_sample_hessians : (N, D, D) ndarray or None
        Dense per-sample curvature J_n (None for rank-one curvature or out of core).
    block : BlockCurvature or None
        Block curvature J_n = W_n ⊗ x_n x_nᵀ (:class:`~sgtune.models.base.BlockCurvature`).
    curvature : (D, D) ndarray
        J = mean_n J_n.
    hessian : (D, D) ndarray
        H = J + Γ/N.
    fisher : (D, D) ndarray
        𝓘 = mean_n g_n g_nᵀ.
    mean_grad : (D,) ndarray
        ḡ = mean_n g_n (= −Γθ̂/N at the MAP).
    gradient_norm : float
        ‖∇L(θ̂)‖ = ‖ḡ + Γθ̂/N‖ (0 at the MAP; reported for given weights).
    gradient_z : float
        √(N ∇L(θ̂)ᵀ C⁺ ∇L(θ̂)), C = 𝓘 − ḡḡᵀ: the gradient in units of its own sampling noise
        (above 1 the expansion point is not a stationary point to within noise).
    hessian_min_eigenvalue : float
        λ_min(H).
    model : str
        The model's label.
    noise_variance : float
        σ² of a Gaussian likelihood (1 otherwise).
    residual_variance : float
        σ̂² = Σ r_n²/(N − D) of a linear model (NaN otherwise).
    population_size : int or None
        N when the expansion was fitted on a subsample of M < N rows (Wang, Ding & Huggins 2026,
        Algorithm 1, steps 1–5): means are over the M rows, every 1/N uses N.
    reductions, stream : Reductions and RowStream, or None
        The streamed form (out-of-core data; ``grads``, ``design``, ``block`` and
        ``per_sample_hessians`` are then None).
    parameter_blocks : tuple of tuple of int, or None
        The model's default blocks of Λ (an MLP's layers).
    parameter_names : tuple of str
        The name of each coordinate of θ (:func:`sgtune.models.base.parameter_names`; ``theta[0]`` …
        when none are given).
    sandwich_refusal : str or None
        Why the model has no sandwich target (the model's ``sandwich_refusal``: J singular along a
        symmetry of the loss), or None.
    model_description : dict or None
        JSON-ready keys the model gives about its parameterisation (its ``describe()``: the
        multinomial model's classes and layout), or None.

    See Also
    --------
    expand : Fit θ̂ and build the expansion.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("linear"), example("hetero-linear"))
    >>> e.dim, e.n_data, e.rank_one
    (20, 2000, True)
    >>> e.sandwich_cov().shape
    (20, 20)
    """

    theta_hat: np.ndarray
    grads: np.ndarray | None
    prior_precision: np.ndarray
    design: np.ndarray | None = None
    weights: np.ndarray | None = None
    per_sample_hessians: np.ndarray | None = None
    curvature: np.ndarray = field(init=False)
    hessian: np.ndarray = field(init=False)
    fisher: np.ndarray = field(init=False)
    mean_grad: np.ndarray = field(init=False)
    gradient_norm: float = field(init=False)
    gradient_z: float = field(init=False)
    hessian_min_eigenvalue: float = field(init=False)
    model: str = "custom"
    noise_variance: float = 1.0
    residual_variance: float = float("nan")
    population_size: int | None = None
    reductions: Reductions | None = None
    stream: RowStream | None = None
    parameter_blocks: tuple[tuple[int, ...], ...] | None = None
    parameter_names: tuple[str, ...] | None = None
    block: BlockCurvature | None = None
    sandwich_refusal: str | None = None
    model_description: dict[str, Any] | None = None
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        d = int(np.shape(self.theta_hat)[0])
        object.__setattr__(self, "parameter_names", resolve_parameter_names(self.parameter_names, d))
        if self.grads is None:
            self._init_streamed()
            return
        n, d = self.grads.shape
        if self.population_size is not None and self.population_size < n:
            raise SgtuneError(f"population_size N = {self.population_size} must be >= the {n} rows of the expansion")
        if sum(x is not None for x in (self.design, self.block, self.per_sample_hessians)) != 1:
            raise SgtuneError("Expansion needs exactly one of design+weights (rank-one), block (BlockCurvature) or "
                              "per_sample_hessians")
        if self.design is not None:
            if self.weights is None or self.design.shape != (n, d) or self.weights.shape != (n,):
                raise SgtuneError(f"design must be (N, D) = ({n}, {d}) and weights (N,) = ({n},)")
            J = interruptible(float(n) * d * d, lambda: (self.design.T * self.weights) @ self.design) / n
        elif self.block is not None:
            x, w = self.block.features, self.block.weights
            p = x.shape[1] if x.ndim == 2 else 0
            r = d // p if p and d % p == 0 else 0
            if x.shape != (n, p) or not r or w.shape != (n, r, r):
                raise SgtuneError(f"block features must be (N, p) and weights (N, r, r) with r·p = D = {d}, got "
                                  f"{x.shape} and {w.shape}")
            J = interruptible(float(n) * d * d, block_matrix, x, w) / n
        else:
            if self.per_sample_hessians.shape != (n, d, d):  # type: ignore[union-attr]
                raise SgtuneError(f"per_sample_hessians must be (N, D, D) = ({n}, {d}, {d})")
            J = self.per_sample_hessians.mean(axis=0)  # type: ignore[union-attr]
        J = 0.5 * (J + J.T)
        self._set_moments(J, interruptible(float(n) * d * d, lambda: self.grads.T @ self.grads) / n,
                          _column_sums(self.grads) / n)

    def _init_streamed(self) -> None:
        r = self.reductions
        if r is None or self.stream is None:
            raise SgtuneError("Expansion needs grads (N, D), or precomputed reductions and a row stream")
        if self.design is not None or self.per_sample_hessians is not None or self.block is not None:
            raise SgtuneError("a streamed Expansion (grads=None) takes no design, block or per_sample_hessians")
        d = self.theta_hat.shape[0]
        if r.curvature.shape != (d, d) or r.fisher.shape != (d, d) or r.mean_grad.shape != (d,):
            raise SgtuneError(f"reductions must be (D, D), (D, D) and (D,) with D = {d}")
        if self.population_size is not None and self.population_size < r.n_rows:
            raise SgtuneError(f"population_size N = {self.population_size} must be >= the {r.n_rows} rows of the "
                              "expansion")
        J = 0.5 * (r.curvature + r.curvature.T)
        self._set_moments(J, 0.5 * (r.fisher + r.fisher.T), r.mean_grad)

    def _set_moments(self, J: np.ndarray, fisher: np.ndarray, mean_grad: np.ndarray) -> None:
        if not (np.all(np.isfinite(J)) and np.all(np.isfinite(fisher)) and np.all(np.isfinite(mean_grad))):
            raise DataFormatError(
                f"the expansion of model {self.model} at θ̂ overflowed (non-finite curvature or gradients): the "
                "data or the parameters are too large in magnitude; standardise the covariates")
        object.__setattr__(self, "curvature", J)
        object.__setattr__(self, "hessian", J + self.prior_precision / self.n_data)
        object.__setattr__(self, "fisher", fisher)
        object.__setattr__(self, "mean_grad", mean_grad)
        grad_l = self.mean_grad + self.prior_precision @ self.theta_hat / self.n_data  # ∇L(θ̂)
        object.__setattr__(self, "gradient_norm", float(np.linalg.norm(grad_l)))
        # ∇L against its own sampling noise: √(N ∇Lᵀ C⁺ ∇L), C = Cov_n g_n (pseudo-inverse if singular)
        z2 = _inverse_form(self.gradient_cov(), grad_l) * self.n_data
        object.__setattr__(self, "gradient_z", math.sqrt(max(z2, 0.0)))
        lam = interruptible(4.0 * self.dim ** 3 / 3, np.linalg.eigvalsh, self.hessian)
        object.__setattr__(self, "hessian_min_eigenvalue", float(lam[0]))
        self._cache["hessian_max_eigenvalue"] = float(lam[-1])  # for whitening(): no second O(D³) pass

    @property
    def n_data(self) -> int:
        """N, the number of data points the chain runs on (scales Γ/N, the 1/N of the targets, (N−B)/(N−1))."""
        return int(self.population_size if self.population_size is not None else self.n_samples)

    @property
    def n_samples(self) -> int:
        """Rows the per-sample means are taken over (M < N after ``--subsample M``, else N)."""
        if self.grads is None:
            return int(self.reductions.n_rows)  # type: ignore[union-attr]
        return int(self.grads.shape[0])

    @property
    def dim(self) -> int:
        return int(self.theta_hat.shape[0] if self.grads is None else self.grads.shape[1])

    @property
    def rank_one(self) -> bool:
        if self.stream is not None:
            return self.stream.rank_one
        return self.design is not None

    @property
    def structure(self) -> str:
        """The per-sample curvature's structure: ``"rank-one"``, ``"block"`` or ``"dense"``."""
        if self.stream is not None:
            return "rank-one" if self.stream.rank_one else "block" if self.stream.block else "dense"
        return "rank-one" if self.design is not None else "block" if self.block is not None else "dense"

    def variance_kernel_sum(self) -> np.ndarray:
        """mean_n J_n ⊗ J_n (D²×D²): the matrix of Σ ↦ mean_n J_nΣJ_n on C-order vec(Σ).

        Accumulated in row blocks of 4096 as Σ_n vec(J_n)vec(J_n)ᵀ (one BLAS product per block;
        rank-one J_n = w_n x_n x_nᵀ give a fully symmetric tensor, so that sum is the Kronecker sum
        already; block and dense J_n are rearranged). Streamed expansions take one pass over the rows.
        O(N·D⁴): for the direct solves of small D.
        """
        d = self.dim
        if self.stream is not None:
            G = self.stream.reduce(_chunk_kernel, self.theta_hat, d)[0] / self.n_samples
            return G if self.stream.rank_one else _kron_from_vec_outer(G, d)
        K = np.zeros((d * d, d * d))
        if self.design is not None:
            X, w = self.design, self.weights
            for start in range(0, self.n_samples, 4096):
                xb = X[start:start + 4096]
                Z = (w[start:start + 4096][:, None, None] * xb[:, :, None] * xb[:, None, :]).reshape(len(xb), d * d)
                K += Z.T @ Z
        else:
            cur = (DenseCurvature(self.per_sample_hessians) if self.block is None  # type: ignore[arg-type]
                   else self.block)
            G = np.zeros((d * d, d * d))  # G[(i,j),(k,l)] = Σ_n J_n[i,j] J_n[k,l]: one BLAS product per block
            for start in range(0, self.n_samples, 4096):
                Z = _dense_block(cur, start, start + 4096).reshape(-1, d * d)
                G += Z.T @ Z
            K += _kron_from_vec_outer(G, d)
        K /= self.n_samples
        return K

    def mean_jsj(self, sigma: np.ndarray) -> np.ndarray:
        """mean_n J_n Σ J_n; rank-one path = Xᵀ diag(w_n² x_nᵀΣx_n) X / N in O(N·D²); block path
        mean_n (W_nQ_nW_n) ⊗ x_n x_nᵀ with Q_n[a,b] = x_nᵀΣ_{ab}x_n, also O(N·D²).

        Streamed expansions re-read the rows chunk by chunk (one pass, O(chunk·D + D²) memory) and
        remember the last few results, so asking again at the same Σ costs no pass.
        """
        if self.stream is not None:
            sigma = np.asarray(sigma, dtype=float)
            # each call is a pass over the data: remember the last few (tune and the stationary solve ask for
            # C̄ at the same Σ — the target — up to three times: the noise term, the warm start, the residual)
            recent = self._cache.setdefault("jsj_recent", [])
            for s_prev, out_prev in recent:
                if s_prev.shape == sigma.shape and np.array_equal(s_prev, sigma):
                    return out_prev.copy()
            out = self.stream.reduce(_chunk_jsj, self.theta_hat, sigma, self.stream.dense)[0] / self.n_samples
            out = 0.5 * (out + out.T)
            recent.insert(0, (sigma.copy(), out.copy()))
            del recent[_JSJ_RECENT:]
            return out
        elif self.design is not None:
            X, w = self.design, self.weights
            q = np.einsum("ij,ij->i", X @ sigma, X)  # x_nᵀ Σ x_n
            out = (X.T * (w * w * q)) @ X / self.n_samples  # type: ignore[operator]
        elif self.block is not None:  # J_n = W_n ⊗ x_n x_nᵀ: through x_nᵀ Σ_{ab} x_n, O(N·D²) in row blocks
            X, W = self.block.features, self.block.weights
            out = np.zeros((self.dim, self.dim))
            for start in range(0, self.n_samples, _BLOCK_ROWS):
                out += _block_jsj_sum(X[start:start + _BLOCK_ROWS], W[start:start + _BLOCK_ROWS], sigma)
            out /= self.n_samples
        else:
            Hs = self.per_sample_hessians
            n, d = Hs.shape[0], self.dim
            if n > d and d ** 4 <= _JSJ_OPERATOR_BUDGET:  # iterative solvers call this hundreds of times
                M = self._cache.get("jsj_operator")
                if M is None:  # M[(i,l),(j,k)] = mean_n J_n[i,j] J_n[k,l]: one BLAS product, then D⁴ per call
                    Z = Hs.reshape(n, d * d)
                    M = (Z.T @ Z / n).reshape(d, d, d, d).transpose(0, 3, 1, 2).reshape(d * d, d * d)
                    self._cache["jsj_operator"] = M
                out = (M @ np.asarray(sigma, dtype=float).ravel()).reshape(d, d)
            else:
                out = np.einsum("nij,jk,nkl->il", Hs, sigma, Hs, optimize=True) / self.n_samples
        return 0.5 * (out + out.T)

    def gradient_cov(self) -> np.ndarray:
        """Population covariance of the per-sample gradients, 𝓘 − ḡḡᵀ."""
        c = self.fisher - np.outer(self.mean_grad, self.mean_grad)
        return 0.5 * (c + c.T)

    def whitening(self) -> np.ndarray | None:
        """T with H = T⁻ᵀT⁻¹ (θ − θ̂ = Tφ makes the Hessian the identity) when H is so ill-conditioned
        (κ(H) > ``WHITEN_CONDITION``, e.g. covariates in very different units or nearly collinear
        with the intercept) that solving in θ's own units loses the answer to rounding; else None.

        The theory's solves (:func:`sgtune.theory.tuning.tune` with the dense family,
        :func:`sgtune.theory.stationary.predict_stationary_cov`) then run on
        :meth:`in_coordinates` and map the answer back, so it does not depend on the units of θ.
        Streamed expansions (their passes re-read the rows in θ's units) and block-structured ones
        (J_n = W_n ⊗ x_nx_nᵀ: a change of variables would densify it) are left as they are.
        """
        if self.stream is not None or self.block is not None:
            return None
        if "whitening" not in self._cache:
            low, high = self.hessian_min_eigenvalue, self._cache["hessian_max_eigenvalue"]
            T = None
            if low > 0 and high > WHITEN_CONDITION * low:
                s = 1.0 / np.sqrt(np.diag(self.hessian))  # Jacobi scaling first: Cholesky of a unit-diagonal H
                c = np.linalg.cholesky(s[:, None] * self.hessian * s[None, :])
                T = s[:, None] * np.linalg.inv(c).T  # H = (S⁻¹C)(S⁻¹C)ᵀ, S = diag(s): T = S C⁻ᵀ gives TᵀHT = I
            self._cache["whitening"] = T
        return self._cache["whitening"]

    def in_coordinates(self, T: np.ndarray) -> "Expansion":
        """The same expansion in the coordinates φ with θ = Tφ (T invertible, in-memory expansions):
        g_n → Tᵀg_n, J_n → TᵀJ_nT, Γ → TᵀΓT, θ̂ → T⁻¹θ̂; a chain with Λ_φ = T⁻¹ΛT⁻ᵀ in φ is the chain
        with Λ in θ, and a covariance Σ_φ in φ is TΣ_φTᵀ in θ."""
        if self.stream is not None or self.block is not None:
            raise SgtuneError("in_coordinates needs an expansion held in memory with rank-one or dense J_n")
        key = ("in_coordinates", T.tobytes())
        if key not in self._cache:
            hs = self.per_sample_hessians
            self._cache[key] = Expansion(
                np.linalg.solve(T, self.theta_hat), self.grads @ T, T.T @ self.prior_precision @ T,  # type: ignore[operator]
                design=None if self.design is None else self.design @ T, weights=self.weights,
                per_sample_hessians=None if hs is None else np.einsum("ji,njk,kl->nil", T, hs, T, optimize=True),
                model=self.model, noise_variance=self.noise_variance, residual_variance=self.residual_variance,
                population_size=self.population_size, sandwich_refusal=self.sandwich_refusal)
        return self._cache[key]

    @cites("wang2026", "§2.2 and Alg. 1 steps 3–5 (with the 1/N of §2.2)")
    def sandwich_cov(self) -> np.ndarray:
        """S* = J⁻¹ 𝓘 J⁻¹ / N (frequentist sampling covariance of θ̂; Wang, Ding & Huggins (2026) §2.2).

        Raises :class:`NotPositiveDefiniteError` when J is not positive definite (with computed remedies),
        or with the model's ``sandwich_refusal`` when the model declares J singular (the full softmax layout).
        """
        if self.sandwich_refusal:
            raise NotPositiveDefiniteError(self.sandwich_refusal)
        try:
            Jinv = _spd_inverse(self.curvature, "curvature J (mean per-sample Hessian at θ̂)", "", prior=False)
        except NotPositiveDefiniteError as exc:
            raise self._sandwich_error(exc) from None
        s = Jinv @ self.fisher @ Jinv / self.n_data
        return 0.5 * (s + s.T)

    def _sandwich_error(self, exc: NotPositiveDefiniteError) -> NotPositiveDefiniteError:
        """J is not positive definite: no prior changes J (it enters H = J + Γ/N only), so the way out is the
        posterior target H⁻¹/N with SGLD at REACHABLE_MARGIN·N (when H is positive definite), else a prior."""
        if self.hessian_min_eigenvalue > 0:
            beta = float(f"{REACHABLE_MARGIN * self.n_data:.6g}")
            remedy = Remedy(f"the posterior target H⁻¹/N (H = J + Γ/N is positive definite at θ̂) with SGLD at inverse "
                            f"temperature {beta:.6g} ({REACHABLE_MARGIN:g}·N: the posterior is unreachable at β = N, "
                            "where the injected noise alone gives it)", {"target": "posterior", "inv_temperature": beta},
                            expect="runs")
            return NotPositiveDefiniteError(f"{exc}; the sandwich target needs J⁻¹, which no prior precision changes",
                                            remedies=(remedy,), code=_curvature_code(self.curvature))
        lam = np.linalg.eigvalsh(self.hessian)
        remedy = prior_remedy(float(lam[0]), float(lam[-1]), self.prior_precision, self.n_data)
        return NotPositiveDefiniteError(str(exc), remedies=() if remedy is None else (remedy,),
                                        code="indefinite-curvature")

    @cites("wang2026", "§2.2 (Bernstein–von Mises)")
    def posterior_cov(self) -> np.ndarray:
        """P* = H⁻¹ / N (Laplace / Bernstein–von Mises posterior covariance)."""
        return _spd_inverse(self.hessian, "hessian H = J + Γ/N") / self.n_data

    def _repr_items(self) -> list[tuple[str, Any]]:
        return [("model", self.model), ("D", self.dim), ("N", self.n_data), ("gradient_norm", self.gradient_norm),
                ("hessian_min_eigenvalue", self.hessian_min_eigenvalue)]

    def summary(self, target: str = "sandwich") -> SummaryTable:
        """θ̂ with standard errors from ``target`` (``"sandwich"``: √diag(J⁻¹𝓘J⁻¹/N), robust to a misspecified
        likelihood; ``"posterior"``: √diag(H⁻¹/N)), z, P>|z| and the normal 95 % interval; the other
        target's standard deviation and the gradient ∇L(θ̂) as further columns."""
        if target not in ("sandwich", "posterior"):
            raise SgtuneError(f"target must be 'sandwich' or 'posterior', got {target!r}")
        sd = {"sandwich": np.sqrt(np.diag(self.sandwich_cov())), "posterior": np.sqrt(np.diag(self.posterior_cov()))}
        other = "posterior" if target == "sandwich" else "sandwich"
        cols = {**estimate_columns(self.theta_hat, sd[target]), f"sd {other}": sd[other],
                "gradient": self.mean_grad + self.prior_precision @ self.theta_hat / self.n_data}
        return table_from_columns(
            f"Expansion at θ̂: {self.model}, D = {self.dim}, N = {self.n_data}", self.parameter_names, cols,
            info=(("std err", f"{target} (√diag {'J⁻¹𝓘J⁻¹/N' if target == 'sandwich' else 'H⁻¹/N'})"),
                  ("‖∇L(θ̂)‖", self.gradient_norm), ("λ_min(H)", self.hessian_min_eigenvalue)),
            notes=("z = coef / std err; P>|z| and the interval use the normal distribution.",))

    def to_dict(self) -> dict[str, Any]:
        """θ̂, the moments at θ̂ and the names (arrays stay NumPy arrays)."""
        return {"parameter_names": list(self.parameter_names), "theta_hat": self.theta_hat,  # type: ignore[arg-type]
                "hessian": self.hessian, "fisher": self.fisher, "gradient_norm": self.gradient_norm,
                "hessian_min_eigenvalue": self.hessian_min_eigenvalue, "n_data": self.n_data, "dim": self.dim,
                "model": self.model}


def _inverse_form(c: np.ndarray, v: np.ndarray) -> float:
    """vᵀC⁺v for a symmetric positive semi-definite C: by Cholesky when C is positive definite (D³/3
    multiply-adds, the same number as the pseudo-inverse's to rounding), else by the pseudo-inverse
    (an eigendecomposition, about thirty times the work)."""
    from scipy.linalg import lapack, solve_triangular

    d = c.shape[0]
    try:
        chol = interruptible(d ** 3 / 3, np.linalg.cholesky, c)
        rcond, info = lapack.dpocon(chol, float(np.abs(c).sum(axis=0).max()), uplo="L")
    except np.linalg.LinAlgError:
        rcond, info = 0.0, 0
    if info != 0 or not rcond > CHOLESKY_RCOND:  # (nearly) singular: the pseudo-inverse drops the null space
        return float(v @ interruptible(9.0 * d ** 3, lambda: np.linalg.pinv(c, hermitian=True)) @ v)
    w = solve_triangular(chol, v, lower=True)  # C = LLᵀ: vᵀC⁻¹v = ‖L⁻¹v‖²
    return float(w @ w)


#: reciprocal condition number above which :func:`_inverse_form` trusts the Cholesky solve
CHOLESKY_RCOND = 1e-10


def _spd_inverse(a: np.ndarray, name: str, hint: str = "", *, prior: bool = True) -> np.ndarray:
    try:
        c = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        lam = np.linalg.eigvalsh(a)
        raise NotPositiveDefiniteError(
            f"{name} is not positive definite (smallest eigenvalue {lam[0]:.3g} of largest {lam[-1]:.3g}); θ̂ is not "
            f"a strict minimum of the loss{' — add a prior precision or check the model' if prior else ''}{hint}"
        ) from None
    ci = np.linalg.inv(c)
    out = ci.T @ ci
    return 0.5 * (out + out.T)


def expand(model: Any, data: Dataset, prior_precision: Any = 0.0, *, theta_hat: Any = None,
           dense_hessians: bool = False, population_size: int | None = None, seed: int = 0,
           scheduler: str | None = None) -> Expansion:
    """Fit θ̂ (unless given) and compute g_n and J_n at θ̂ through the model protocol.

    Parameters
    ----------
    model : PerSampleModel
        The model (a :class:`~sgtune.models.glm.GLM`, an MLP, a user's model).
    data : Dataset
        The observations (in memory or out of core).
    prior_precision : float or array_like, optional
        Γ: a scalar (Γ = γI) or a (D, D) positive semi-definite matrix; 0 is a flat prior.
    theta_hat : array_like or None, optional
        Expand at these parameters instead of fitting the MAP (e.g. a trained network's weights). Without
        it, a model with ``trained_weights()`` returning weights (a :func:`~sgtune.models.from_torch`
        network without ``fit=True``) is expanded at those, else the MAP is fitted.
    dense_hessians : bool, optional
        Keep dense per-sample Hessians J_n even for a rank-one model.
    population_size : int or None, optional
        N when ``data`` is a subsample of M rows of a data set of N rows.
    seed : int, optional
        Seed of a non-convex model's random start (:func:`fit_map`).
    scheduler : str or None, optional
        For data out of core: None (serial), ``"local"`` or a Dask scheduler's address.

    Returns
    -------
    Expansion
        The point θ̂ with g_n, J_n (or their streamed reductions), J, H = J + Γ/N, 𝓘 and ḡ.

    Raises
    ------
    NotPositiveDefiniteError
        H = J + Γ/N is not positive definite at θ̂ (the message names the remedies).
    ModelError
        The model returned a wrong shape or a non-finite value.
    SgtuneError
        ``theta_hat`` does not have the model's length D.

    See Also
    --------
    fit_map : The fit alone.
    expansion_at : The same quantities at any θ, without a fit or checks.

    Notes
    -----
    The second-order expansion of Wang, Ding & Huggins (2026), §3 and Theorem 4.3.
    The curvature keeps the structure the model declares (rank-one ``design``/``weights``, or
    dense ``per_sample_hessians``; ``dense_hessians`` forces dense). ``theta_hat`` expands at
    given parameters (e.g. trained weights of a non-convex model, which has no unique MAP): the
    expansion then reports ‖∇L(θ̂)‖ and λ_min(H), warns (:class:`~sgtune.core.errors.AccuracyWarning`)
    when the gradient is larger than its own sampling noise, and refuses when H is not positive
    definite. ``population_size`` N: ``data`` is a subsample of M rows of a data set of N rows
    (Wang, Ding & Huggins (2026) Alg. 1 steps 1–5); per-sample means use the M rows, every 1/N uses N.
    Out-of-core data (``data.rows``) give a streamed Expansion (reductions + row stream, no
    (N, D) arrays); ``scheduler`` (None, "local" or a Dask address) runs its passes on Dask.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> e.n_data, e.dim
    (2000, 5)
    >>> np.allclose(e.hessian, e.curvature)  # flat prior: H = J
    True
    >>> bool(e.hessian_min_eigenvalue > 0)
    True
    """
    d = model_dim(model, data.dim)
    gam = prior_matrix(prior_precision, d)
    label = model_label(model)
    if theta_hat is None:  # a model that brings trained weights (e.g. from_torch) is expanded there, not refitted
        trained = getattr(model, "trained_weights", None)
        theta_hat = trained() if callable(trained) else None
    if theta_hat is None:
        theta = fit_map(model, data, gam, population_size=population_size, seed=seed, scheduler=scheduler).theta_hat
    else:
        if callable(getattr(model, "check_response", None)):
            model.check_response(data.y, data.source or "y")
        theta = as_float_array(theta_hat, "theta_hat").reshape(-1)
        if theta.shape[0] != d:
            raise SgtuneError(f"theta_hat must have length D = {d} (the parameters of model {label}), "
                              f"got {theta.shape[0]}")
    if data.rows is not None:
        e = _expand_streamed(model, data.rows, theta, gam, label, dense_hessians, population_size, scheduler,
                             data.names)
    else:
        e = _expand_in_memory(model, data, theta, gam, label, dense_hessians, population_size)
    _check_expansion_point(e, label, given=theta_hat is not None)
    return e


def expansion_at(model: Any, data: Dataset, prior_precision: Any, theta: Any, *, dense_hessians: bool = False,
                 population_size: int | None = None, scheduler: str | None = None) -> Expansion:
    """The expansion's quantities (g_n, J_n, H, 𝓘, ḡ) at any θ: no fit, no check that θ is a minimum.

    The applicability report evaluates the curvature and the gradient noise at points of the
    predicted stationary spread through this (the same model calls and chunked passes as
    :func:`expand`); H may be indefinite there.

    Parameters
    ----------
    model : PerSampleModel
        The model.
    data : Dataset
        The observations (in memory or out of core).
    prior_precision : float or array_like
        Γ (:func:`prior_matrix`).
    theta : array_like
        The point θ, length D.
    dense_hessians : bool, optional
        Keep dense per-sample Hessians even for a rank-one model.
    population_size : int or None, optional
        N when ``data`` is a subsample of M rows of a data set of N rows.
    scheduler : str or None, optional
        For data out of core: None (serial), ``"local"`` or a Dask scheduler's address.

    Returns
    -------
    Expansion
        The quantities at θ (not checked: ``gradient_norm`` need not be 0, H need not be SPD).

    Raises
    ------
    ModelError
        The model returned a wrong shape or a non-finite value.

    See Also
    --------
    expand : The expansion at the MAP, with its checks.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expansion_at, get_model
    >>> e = expansion_at(get_model("logistic"), example("logistic"), 0.0, np.zeros(5))
    >>> bool(e.gradient_norm > 0)  # θ = 0 is not the MAP
    True
    """
    d = model_dim(model, data.dim)
    gam = prior_matrix(prior_precision, d)
    theta = as_float_array(theta, "theta").reshape(-1)
    label = model_label(model)
    if data.rows is not None:
        return _expand_streamed(model, data.rows, theta, gam, label, dense_hessians, population_size, scheduler,
                                data.names)
    return _expand_in_memory(model, data, theta, gam, label, dense_hessians, population_size)


def _expand_in_memory(model: Any, data: Dataset, theta: np.ndarray, gam: np.ndarray, label: str,
                      dense_hessians: bool, population_size: int | None) -> Expansion:
    d = theta.shape[0]
    n_rows = data.n_data
    grads = checked_call(model, "per_sample_grads", theta, data.X, data.y, shape=(n_rows, d))
    if not _dense_affordable(model, n_rows, d) and dense_hessians:
        raise SgtuneError(f"dense per-sample Hessians of model {label} need N·D² = {n_rows * d * d:.3g} numbers "
                          f"(more than {DENSE_HESSIAN_BUDGET:.0e}); use a rank-one curvature (`hessian='gauss-newton'`)")
    cur = per_sample_curvature(model, theta, data.X, data.y)
    resid = float("nan")
    if callable(getattr(model, "residual_variance", None)):
        resid = float(model.residual_variance(theta, data.X, data.y))
    blocks = None
    if callable(getattr(model, "parameter_blocks", None)):  # e.g. an MLP's layers: the default Λ blocks
        blocks = tuple(tuple(int(i) for i in b) for b in checked_call(model, "parameter_blocks", data.dim))
    common = dict(theta_hat=theta, grads=grads, prior_precision=gam, model=label, parameter_blocks=blocks,
                  parameter_names=parameter_names(model, data.names, data.dim),
                  noise_variance=float(getattr(model, "noise_variance", 1.0)), residual_variance=resid,
                  population_size=population_size, **_model_keys(model))
    if isinstance(cur, RankOneCurvature) and not dense_hessians:
        e = Expansion(design=cur.features, weights=cur.weights, **common)
    elif isinstance(cur, RankOneCurvature):
        u, w = cur.features, cur.weights
        e = Expansion(per_sample_hessians=w[:, None, None] * u[:, :, None] * u[:, None, :], **common)
    elif isinstance(cur, BlockCurvature) and not dense_hessians:
        e = Expansion(block=cur, **common)
    elif isinstance(cur, BlockCurvature):
        e = Expansion(per_sample_hessians=block_dense(cur.features, cur.weights), **common)
    else:
        return Expansion(per_sample_hessians=cur.hessians, **common)
    return e


def _model_keys(model: Any) -> dict[str, Any]:
    """The Expansion fields a model fills about itself: ``sandwich_refusal`` and ``model_description``."""
    refusal = getattr(model, "sandwich_refusal", None)
    describe = getattr(model, "describe", None)
    desc = checked_call(model, "describe") if callable(describe) else None
    if desc is not None and not isinstance(desc, dict):
        raise ModelError(f"model {model_label(model)}: describe() returned {type(desc).__name__}, expected a dict")
    return {"sandwich_refusal": str(refusal) if refusal else None, "model_description": desc}


def _expand_streamed(model: Any, rows: RowSource, theta: np.ndarray, gam: np.ndarray, label: str,
                     dense_hessians: bool, population_size: int | None, scheduler: str | None,
                     names: tuple[str, ...] = ()) -> Expansion:
    """One streamed pass for Σ g_n, Σ g_n g_nᵀ, Σ J_n (and Σ r²); the rows stay on disk for C̄(Σ)."""
    d = theta.shape[0]
    m = rows.n_rows
    chunk = _chunk_rows(model, d)
    resid = callable(getattr(model, "residual_variance", None))
    gs, ggs, js, flags, xx = reduce_rows(_chunk_expansion_terms, rows, model, theta, d, resid, chunk_rows=chunk,
                                     scheduler=scheduler)
    n_chunks = -(-m // chunk)
    rank_one = bool(flags[0] == n_chunks) and not dense_hessians
    block = bool(flags[2] == n_chunks) and not dense_hessians
    resid_var = float(flags[1]) / max(m - rows.n_cols, 1) if resid else float("nan")
    red = Reductions(curvature=js / m, fisher=ggs / m, mean_grad=gs / m, n_rows=m, column_mean_squares=xx / m)
    stream = RowStream(rows, model, rank_one, scheduler, chunk, block)
    blocks = None
    if callable(getattr(model, "parameter_blocks", None)):
        blocks = tuple(tuple(int(i) for i in b) for b in checked_call(model, "parameter_blocks", rows.n_cols))
    return Expansion(theta_hat=theta, grads=None, prior_precision=gam, model=label, parameter_blocks=blocks,
                     parameter_names=parameter_names(model, names, rows.n_cols),
                     noise_variance=float(getattr(model, "noise_variance", 1.0)), residual_variance=resid_var,
                     population_size=population_size, reductions=red, stream=stream, **_model_keys(model))


def _check_expansion_point(e: Expansion, label: str, *, given: bool) -> None:
    """Refuse an indefinite H; warn when ∇L(θ̂) exceeds its sampling noise (module docstring of expand)."""
    if not e.hessian_min_eigenvalue > 0:
        where = "at the given theta_hat" if given else "at the fitted θ̂"
        lam = np.linalg.eigvalsh(e.hessian)
        remedy = prior_remedy(float(lam[0]), float(lam[-1]), e.prior_precision, e.n_data)
        raise NotPositiveDefiniteError(
            f"the Hessian H = J + Γ/N of model {label} is not positive definite {where} (smallest eigenvalue "
            f"{e.hessian_min_eigenvalue:.3g}), so the expansion has no stationary Gaussian: add a prior precision "
            "or expand at other weights", remedies=prior_remedies(remedy, e.n_data), code=_curvature_code(e.hessian))
    if e.gradient_z > 1.0 and not _rounding_level_step(e):
        warnings.warn(
            f"the gradient of the mean loss at θ̂ is not small: ‖∇L(θ̂)‖ = {e.gradient_norm:.3g}, "
            f"{e.gradient_z:.3g} times its sampling noise (√(N ∇Lᵀ C⁻¹ ∇L)); the chain's mean will sit "
            "H⁻¹∇L away from θ̂ — train longer or polish the weights", AccuracyWarning, stacklevel=3)


def _rounding_level_step(e: Expansion) -> bool:
    """Is the Newton step H⁻¹∇L(θ̂) within rounding of θ̂ (√(∇LᵀH⁻¹∇L) ≤ 100ε√(θ̂ᵀHθ̂), lengths in the metric H)?
    Then a gradient "larger than its noise" compares rounding with rounding (noise-free data, y = Xθ
    exactly): no advice to train longer can help."""
    grad = e.mean_grad + e.prior_precision @ e.theta_hat / e.n_data
    try:
        step2 = float(grad @ np.linalg.solve(e.hessian, grad))
    except np.linalg.LinAlgError:
        return False
    size2 = float(e.theta_hat @ e.hessian @ e.theta_hat)
    return step2 <= (100 * np.finfo(float).eps) ** 2 * size2
