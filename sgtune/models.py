"""Per-observation losses, their derivatives at θ, MAP fitting and the expansion at the MAP.

All built-in models are generalised linear: the per-observation loss depends on θ only
through the linear predictor η_n = x_nᵀθ, l_n(θ) = ρ(η_n, y_n). Hence

    g_n = ∇l_n(θ) = ρ'(η_n) x_n,      J_n = ∇²l_n(θ) = ρ''(η_n) x_n x_nᵀ  (rank one),

and every curvature sum costs O(N·D²) BLAS (never a loop over n, never an (N, D, D)
array). :class:`Expansion` also accepts general dense per-sample Hessians (N, D, D)
for losses that are not of this form (the *general path*); both paths implement the
same formulas and are tested against each other.

Scaling (seed 003, §2.1): mean loss L(θ) = (1/N) Σ_n l_n(θ) + (1/N) R(θ),
R(θ) = ½ θᵀΓθ (a Gaussian prior N(0, Γ⁻¹)).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._refs import cites
from ._validation import as_float_array, as_spd, as_symmetric, check_positive
from .data import Dataset
from .errors import ConvergenceError, DataFormatError, NotPositiveDefiniteError, SgtuneError

__all__ = ["GLM", "get_model", "MODEL_NAMES", "FitResult", "fit_map", "Expansion", "expand",
           "prior_matrix"]

MODEL_NAMES = ("linear", "logistic", "poisson", "beta-linear")


def _log1pexp(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x) without overflow."""
    return np.logaddexp(0.0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


@dataclass(frozen=True)
class GLM:
    """A generalised-linear per-observation loss l_n(θ) = ρ(x_nᵀθ, y_n).

    Parameters
    ----------
    name : {"linear", "logistic", "poisson", "beta-linear"}
        ``linear``: ρ = (y−η)²/(2σ²) (Gaussian, known noise variance σ²).
        ``logistic``: ρ = log(1+e^η) − yη, y ∈ {0, 1}.
        ``poisson``: ρ = e^η − yη (log link; the constant log y! is dropped), y ∈ {0, 1, 2, …}.
        ``beta-linear``: the β-divergence (density-power) loss of the Gaussian linear model,
        seed 003 appendix D.3, ρ = −f(y; η)^{p−1}/(p−1) + (1/p)∫ f(z; η)^p dz with
        f(·; η) = N(η, σ²) and power p = ``beta_power`` > 1.
    noise_variance : float
        σ² of the Gaussian models (``linear``, ``beta-linear``).
    beta_power : float
        The power p of the β-divergence (``beta-linear`` only); p → 1 recovers the log loss.

    Notes
    -----
    For the β-divergence the integral term has the closed form
    ∫ N(z; η, σ²)^p dz = (2πσ²)^{(1−p)/2} p^{−1/2}; it does not depend on η, so it
    contributes nothing to gradients or Hessians (the seed's public code estimates it by
    Monte Carlo, which only adds noise and bias to the loss value). The curvature weight
    ρ'' = c e^{−(p−1)r²/(2σ²)} (1 − (p−1) r²/σ²)/σ², r = y − η, c = (2πσ²)^{(1−p)/2}, is
    negative for outlying residuals, so J_n is rank-one but not necessarily positive.
    """

    name: str
    noise_variance: float = 1.0
    beta_power: float = 1.5

    @property
    def rank_one(self) -> bool:
        """All built-in models have rank-one per-sample Hessians J_n = w_n x_n x_nᵀ."""
        return True

    def check_response(self, y: np.ndarray, source: str = "y") -> None:
        """Raise :class:`DataFormatError` if ``y`` is outside the model's domain."""
        if self.name == "logistic":
            bad = ~np.isin(y, (0.0, 1.0))
            if bad.any():
                i = int(np.argmax(bad))
                raise DataFormatError(
                    f"{source}: logistic regression needs y in {{0, 1}} but y[{i}] = {y[i]:g}; recode the labels")
        elif self.name == "poisson":
            bad = (y < 0) | (y != np.round(y))
            if bad.any():
                i = int(np.argmax(bad))
                raise DataFormatError(
                    f"{source}: Poisson regression needs non-negative integer counts but y[{i}] = {y[i]:g}")

    def integral_term(self) -> float:
        """(1/p)∫ f(z; η)^p dz for ``beta-linear`` in closed form (0 for other models)."""
        if self.name != "beta-linear":
            return 0.0
        p, s2 = self.beta_power, self.noise_variance
        return (2 * math.pi * s2) ** ((1 - p) / 2) / math.sqrt(p) / p

    def derivatives(self, eta: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """ρ(η, y), ∂ρ/∂η and ∂²ρ/∂η², elementwise."""
        if self.name == "linear":
            s2 = self.noise_variance
            r = eta - y
            return 0.5 * r * r / s2, r / s2, np.full_like(eta, 1.0 / s2)
        if self.name == "logistic":
            p = _sigmoid(eta)
            return _log1pexp(eta) - y * eta, p - y, p * (1.0 - p)
        if self.name == "poisson":
            mu = np.exp(eta)
            return mu - y * eta, mu - y, mu
        if self.name == "beta-linear":
            p, s2 = self.beta_power, self.noise_variance
            c = (2 * math.pi * s2) ** ((1 - p) / 2)
            r = y - eta
            e = c * np.exp(-(p - 1) * r * r / (2 * s2))
            rho = -e / (p - 1) + self.integral_term()
            return rho, -e * r / s2, e * (1.0 - (p - 1) * r * r / s2) / s2
        raise SgtuneError(f"unknown model {self.name!r}")  # pragma: no cover (checked in get_model)

    # --- per-sample quantities ------------------------------------------------
    def per_sample_losses(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """l_n(θ), shape (N,)."""
        return self.derivatives(X @ theta, y)[0]

    def per_sample_grads(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """g_n = ρ'(x_nᵀθ) x_n, shape (N, D)."""
        return self.derivatives(X @ theta, y)[1][:, None] * X

    def curvature_weights(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """w_n = ρ''(x_nᵀθ) with J_n = w_n x_n x_nᵀ, shape (N,)."""
        return self.derivatives(X @ theta, y)[2]

    def per_sample_hessians(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Dense J_n, shape (N, D, D): the general path (O(N·D²) memory; for tests and small N)."""
        w = self.curvature_weights(theta, X, y)
        return w[:, None, None] * X[:, :, None] * X[:, None, :]


def get_model(name: str, *, noise_variance: float = 1.0, beta_power: float | None = None) -> GLM:
    """Validated :class:`GLM` by name."""
    if name not in MODEL_NAMES:
        raise SgtuneError(f"model must be one of {', '.join(MODEL_NAMES)}, got {name!r}")
    s2 = check_positive(noise_variance, "noise_variance")
    if name == "beta-linear":
        if beta_power is None:
            raise SgtuneError("model 'beta-linear' needs beta_power (--beta-power P) with P > 1, e.g. 1.5")
        p = float(beta_power)
        if not (p > 1 and math.isfinite(p)):
            raise SgtuneError(f"beta_power must be a finite number > 1, got {beta_power}")
        return GLM(name, s2, p)
    return GLM(name, s2)


def prior_matrix(prior_precision: Any, dim: int) -> np.ndarray:
    """Γ as a (D, D) symmetric positive semi-definite matrix from a scalar G (Γ = G·I) or a matrix."""
    arr = np.asarray(prior_precision, dtype=float)
    if arr.ndim == 0:
        g = float(arr)
        if not (math.isfinite(g) and g >= 0):
            raise SgtuneError(f"prior_precision must be a finite number >= 0, got {g}")
        return g * np.eye(dim)
    gam = as_symmetric(arr, "prior_precision", dim)
    lam = np.linalg.eigvalsh(gam)
    if lam[0] < -1e-12 * max(1.0, abs(lam[-1])):
        raise NotPositiveDefiniteError(
            f"prior_precision must be positive semi-definite but has eigenvalue {lam[0]:.3g}")
    return gam


@dataclass(frozen=True)
class FitResult:
    """MAP estimate and Newton diagnostics."""

    theta_hat: np.ndarray
    iterations: int
    grad_norm: float
    loss: float


def _separable(X: np.ndarray, y: np.ndarray) -> bool:
    """Is there θ with (2y−1)·x_nᵀθ ≥ 1 for all n (complete separation)? One LP (HiGHS)."""
    from scipy.optimize import linprog

    s = 2 * y - 1
    res = linprog(np.zeros(X.shape[1]), A_ub=-(s[:, None] * X), b_ub=-np.ones(X.shape[0]),
                  bounds=[(None, None)] * X.shape[1], method="highs")
    return bool(res.status == 0)


@cites("wang2026", "§2.1: θ̂ = argmin (1/N)Σ l_n(θ) + R(θ)/N")
def fit_map(model: GLM, data: Dataset, prior_precision: Any = 0.0, *, theta0: Any = None,
            tol: float = 1e-10, max_iter: int = 200, population_size: int | None = None) -> FitResult:
    r"""θ̂ = argmin_θ (1/N) Σ_n l_n(θ) + θᵀΓθ/(2N) by damped Newton with a backtracking line search.

    Converged when the Newton decrement satisfies ``gᵀH⁻¹g ≤ tol²`` (affine invariant).
    With ``population_size`` N (fitting on a subsample of M rows), the prior term is θᵀΓθ/(2N),
    so θ̂ estimates the full-data MAP.
    Indefinite Hessians (possible for ``beta-linear``) are handled by Levenberg damping.

    Raises
    ------
    DataFormatError
        Response outside the model's domain; logistic data that are linearly separable
        (the MLE does not exist: add a prior); rank-deficient design without a prior.
    ConvergenceError
        No convergence within ``max_iter`` iterations.
    """
    X, y = data.X, data.y
    m_rows, d = X.shape
    n = m_rows if population_size is None else int(population_size)
    model.check_response(y, data.source or "y")
    gam = prior_matrix(prior_precision, d)
    if np.linalg.eigvalsh(gam)[0] <= 0:
        rank = np.linalg.matrix_rank(X)
        if rank < d:
            raise DataFormatError(
                f"{data.source or 'X'}: the design matrix has rank {rank} < D = {d} (collinear or constant "
                "columns), so θ̂ is not identified; drop columns or pass a prior precision > 0")
    if model.name == "logistic" and not np.any(np.linalg.eigvalsh(gam) > 0) and _separable(X, y):
        raise DataFormatError(
            f"{data.source or 'data'}: the logistic data are linearly separable, so the maximum-likelihood "
            "estimate does not exist (θ̂ → ∞); pass a prior precision > 0 (--prior-precision)")

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        rho, d1, d2 = model.derivatives(X @ theta, y)
        val = rho.mean() + 0.5 * theta @ gam @ theta / n
        grad = X.T @ d1 / m_rows + gam @ theta / n
        hess = (X.T * d2) @ X / m_rows + gam / n
        return float(val), grad, hess

    if theta0 is not None:
        theta = as_float_array(theta0, "theta0").reshape(d).copy()
    elif model.name in ("linear", "beta-linear"):
        theta = np.linalg.lstsq(np.vstack([X, np.sqrt(gam) if np.any(gam) else np.zeros((0, d))]),
                                np.concatenate([y, np.zeros(d if np.any(gam) else 0)]), rcond=None)[0]
    else:
        theta = np.zeros(d)
    val, grad, hess = objective(theta)
    for it in range(1, max_iter + 1):
        damping = 0.0
        while True:
            try:
                chol = np.linalg.cholesky(hess + damping * np.eye(d))
                break
            except np.linalg.LinAlgError:
                damping = max(2 * damping, 1e-8 * max(1.0, np.abs(hess).max()))
        step = -np.linalg.solve(chol.T, np.linalg.solve(chol, grad))
        decrement2 = float(-grad @ step)
        if decrement2 <= tol**2 and damping == 0.0:
            return FitResult(theta, it - 1, float(np.linalg.norm(grad)), val)
        t = 1.0
        while True:
            cand = theta + t * step
            cval, cgrad, chess = objective(cand)
            if math.isfinite(cval) and cval <= val - 1e-4 * t * decrement2:
                break
            t *= 0.5
            if t < 1e-12:
                break
        if t < 1e-12:
            if decrement2 <= (1e3 * tol) ** 2:  # stalled at rounding level: accept
                return FitResult(theta, it, float(np.linalg.norm(grad)), val)
            raise ConvergenceError(
                f"MAP fit ({model.name}) stalled: line search failed with Newton decrement "
                f"{math.sqrt(decrement2):.3g}; check the data scale or add a prior precision",
                residual=math.sqrt(decrement2), method="newton")
        theta, val, grad, hess = cand, cval, cgrad, chess
        if not np.all(np.isfinite(theta)) or np.linalg.norm(theta) > 1e8:
            break
    raise ConvergenceError(
        f"MAP fit ({model.name}) did not converge in {max_iter} Newton iterations "
        f"(gradient norm {np.linalg.norm(grad):.3g}); the MLE may not exist — add a prior precision "
        "(--prior-precision) or rescale the covariates", residual=float(np.linalg.norm(grad)), method="newton")


@dataclass(frozen=True)
class Expansion:
    r"""Second-order expansion of the per-sample losses at θ̂ (seed 003, §3 and Thm. 4.3).

    Either rank-one curvature (``design`` X and ``weights`` w with J_n = w_n x_n x_nᵀ) or
    dense ``per_sample_hessians`` (N, D, D) must be given.

    Attributes
    ----------
    theta_hat : (D,) MAP θ̂.
    grads : (N, D) per-sample gradients g_n = ∇l_n(θ̂).
    prior_precision : (D, D) Γ.
    curvature : (D, D) J = mean_n J_n.
    hessian : (D, D) H = J + Γ/N.
    fisher : (D, D) 𝓘 = mean_n g_n g_nᵀ.
    mean_grad : (D,) ḡ = mean_n g_n (= −Γθ̂/N at the MAP).
    population_size : N when the expansion was fitted on a subsample of M < N rows
        (seed 003 Alg. 1 steps 1–5): means are over the M rows, every 1/N uses N.
    """

    theta_hat: np.ndarray
    grads: np.ndarray
    prior_precision: np.ndarray
    design: np.ndarray | None = None
    weights: np.ndarray | None = None
    per_sample_hessians: np.ndarray | None = None
    curvature: np.ndarray = field(init=False)
    hessian: np.ndarray = field(init=False)
    fisher: np.ndarray = field(init=False)
    mean_grad: np.ndarray = field(init=False)
    model: str = "custom"
    noise_variance: float = 1.0
    residual_variance: float = float("nan")
    population_size: int | None = None

    def __post_init__(self) -> None:
        n, d = self.grads.shape
        if self.population_size is not None and self.population_size < n:
            raise SgtuneError(f"population_size N = {self.population_size} must be >= the {n} rows of the expansion")
        if (self.design is None) == (self.per_sample_hessians is None):
            raise SgtuneError("Expansion needs either design+weights (rank-one) or per_sample_hessians")
        if self.design is not None:
            if self.weights is None or self.design.shape != (n, d) or self.weights.shape != (n,):
                raise SgtuneError(f"design must be (N, D) = ({n}, {d}) and weights (N,) = ({n},)")
            J = (self.design.T * self.weights) @ self.design / n
        else:
            if self.per_sample_hessians.shape != (n, d, d):  # type: ignore[union-attr]
                raise SgtuneError(f"per_sample_hessians must be (N, D, D) = ({n}, {d}, {d})")
            J = self.per_sample_hessians.mean(axis=0)  # type: ignore[union-attr]
        J = 0.5 * (J + J.T)
        object.__setattr__(self, "curvature", J)
        object.__setattr__(self, "hessian", J + self.prior_precision / self.n_data)
        object.__setattr__(self, "fisher", self.grads.T @ self.grads / n)
        object.__setattr__(self, "mean_grad", self.grads.mean(axis=0))

    @property
    def n_data(self) -> int:
        """N, the number of data points the chain runs on (scales Γ/N, the 1/N of the targets, (N−B)/(N−1))."""
        return int(self.population_size if self.population_size is not None else self.grads.shape[0])

    @property
    def n_samples(self) -> int:
        """Rows the per-sample means are taken over (M < N after ``--subsample M``, else N)."""
        return int(self.grads.shape[0])

    @property
    def dim(self) -> int:
        return int(self.grads.shape[1])

    @property
    def rank_one(self) -> bool:
        return self.design is not None

    def mean_jsj(self, sigma: np.ndarray) -> np.ndarray:
        """mean_n J_n Σ J_n; rank-one path = Xᵀ diag(w_n² x_nᵀΣx_n) X / N in O(N·D²)."""
        if self.design is not None:
            X, w = self.design, self.weights
            q = np.einsum("ij,ij->i", X @ sigma, X)  # x_nᵀ Σ x_n
            out = (X.T * (w * w * q)) @ X / self.n_samples  # type: ignore[operator]
        else:
            Hs = self.per_sample_hessians
            out = np.einsum("nij,jk,nkl->il", Hs, sigma, Hs, optimize=True) / self.n_samples
        return 0.5 * (out + out.T)

    def gradient_cov(self) -> np.ndarray:
        """Population covariance of the per-sample gradients, 𝓘 − ḡḡᵀ."""
        c = self.fisher - np.outer(self.mean_grad, self.mean_grad)
        return 0.5 * (c + c.T)

    @cites("wang2026", "§2.2 and Alg. 1 steps 3–5 (with the 1/N of §2.2)")
    def sandwich_cov(self) -> np.ndarray:
        """S* = J⁻¹ 𝓘 J⁻¹ / N (frequentist sampling covariance of θ̂; seed 003 §2.2)."""
        Jinv = _spd_inverse(self.curvature, "curvature J (mean per-sample Hessian at θ̂)")
        s = Jinv @ self.fisher @ Jinv / self.n_data
        return 0.5 * (s + s.T)

    @cites("wang2026", "§2.2 (Bernstein–von Mises)")
    def posterior_cov(self) -> np.ndarray:
        """P* = H⁻¹ / N (Laplace / Bernstein–von Mises posterior covariance)."""
        return _spd_inverse(self.hessian, "hessian H = J + Γ/N") / self.n_data


def _spd_inverse(a: np.ndarray, name: str) -> np.ndarray:
    try:
        c = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        lam = np.linalg.eigvalsh(a)
        raise NotPositiveDefiniteError(
            f"{name} is not positive definite (smallest eigenvalue {lam[0]:.3g}); θ̂ is not a strict "
            "minimum — add a prior precision or check the model") from None
    ci = np.linalg.inv(c)
    out = ci.T @ ci
    return 0.5 * (out + out.T)


def expand(model: GLM, data: Dataset, prior_precision: Any = 0.0, *, theta_hat: Any = None,
           dense_hessians: bool = False, population_size: int | None = None) -> Expansion:
    """Fit θ̂ (unless given) and compute g_n, J_n (rank-one, or dense with ``dense_hessians``) at θ̂.

    ``population_size`` N: ``data`` is a subsample of M rows of a data set of N rows (seed 003
    Alg. 1 steps 1–5); per-sample means use the M rows, every 1/N uses N.
    """
    gam = prior_matrix(prior_precision, data.dim)
    if theta_hat is None:
        theta = fit_map(model, data, gam, population_size=population_size).theta_hat
    else:
        model.check_response(data.y, data.source or "y")
        theta = as_float_array(theta_hat, "theta_hat").reshape(-1)
        if theta.shape[0] != data.dim:
            raise SgtuneError(f"theta_hat must have length D = {data.dim}, got {theta.shape[0]}")
    _, d1, d2 = model.derivatives(data.X @ theta, data.y)
    grads = d1[:, None] * data.X
    resid = float("nan")
    if model.name == "linear":
        r = data.y - data.X @ theta
        resid = float(r @ r / max(data.n_data - data.dim, 1))
    common = dict(theta_hat=theta, grads=grads, prior_precision=gam, model=model.name,
                  noise_variance=model.noise_variance, residual_variance=resid, population_size=population_size)
    if dense_hessians:
        return Expansion(per_sample_hessians=model.per_sample_hessians(theta, data.X, data.y), **common)
    return Expansion(design=data.X, weights=d2, **common)
