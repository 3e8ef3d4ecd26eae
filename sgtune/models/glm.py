"""Generalised linear models: one family of the model protocol (:mod:`sgtune.models.base`).

The GLMs are generalised linear: the per-observation loss depends on θ only
through the linear predictor η_n = x_nᵀθ, l_n(θ) = ρ(η_n, y_n). Hence

    g_n = ∇l_n(θ) = ρ'(η_n) x_n,      J_n = ∇²l_n(θ) = ρ''(η_n) x_n x_nᵀ  (rank one),

and every curvature sum costs O(N·D²) BLAS (never a loop over n, never an (N, D, D)
array). A GLM declares this structure through :meth:`GLM.curvature` (a
:class:`~sgtune.models.base.RankOneCurvature`); the expansion and the theory choose their fast
path from it, never from the model's name.

Scaling (Wang, Ding & Huggins (2026), §2.1): mean loss L(θ) = (1/N) Σ_n l_n(θ) + (1/N) R(θ),
R(θ) = ½ θᵀΓθ (a Gaussian prior N(0, Γ⁻¹)).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core._validation import check_positive
from ..core.errors import DataFormatError, SgtuneError
from .base import RankOneCurvature, separable

__all__ = ["GLM", "get_model", "MODEL_NAMES", "GLM_IDS"]

MODEL_NAMES = ("linear", "logistic", "poisson", "beta-linear")
#: ids of the GLMs in the sampler's compiled gradient (``sgtune.sampler.grads.MODEL_IDS``; a test checks)
GLM_IDS = {"linear": 0, "logistic": 1, "poisson": 2, "beta-linear": 3}


def _smallest_eigenvalue(a: np.ndarray) -> float:
    """λ_min of a symmetric matrix: its smallest diagonal entry when it is diagonal (Γ = 0 or γI: no O(D³)
    eigendecomposition, which takes minutes at D = 5000), else from the eigenvalues (interruptible)."""
    diag = np.diag(a)
    if not np.any(a - np.diag(diag)):
        return float(diag.min()) if diag.size else 0.0
    from .expansion import interruptible

    return float(interruptible(4.0 * a.shape[0] ** 3 / 3, np.linalg.eigvalsh, a)[0])


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
        The family. ``linear``: ρ = (y−η)²/(2σ²) (Gaussian, known noise variance σ²).
        ``logistic``: ρ = log(1+e^η) − yη, y ∈ {0, 1}.
        ``poisson``: ρ = e^η − yη (log link; the constant log y! is dropped), y ∈ {0, 1, 2, …}.
        ``beta-linear``: the β-divergence (density-power) loss of the Gaussian linear model,
        Wang, Ding & Huggins (2026), appendix D.3, ρ = −f(y; η)^{p−1}/(p−1) + (1/p)∫ f(z; η)^p dz with
        f(·; η) = N(η, σ²) and power p = ``beta_power`` > 1.
    noise_variance : float
        The variance σ² of the Gaussian models (``linear``, ``beta-linear``).
    beta_power : float
        The power p of the β-divergence (``beta-linear`` only); p → 1 recovers the log loss.

    See Also
    --------
    get_model : The validated constructor.

    Notes
    -----
    For the β-divergence the integral term has the closed form
    ∫ N(z; η, σ²)^p dz = (2πσ²)^{(1−p)/2} p^{−1/2}; it does not depend on η, so it
    contributes nothing to gradients or Hessians (the paper's public code estimates it by
    Monte Carlo, which only adds noise and bias to the loss value). The curvature weight
    ρ'' = c e^{−(p−1)r²/(2σ²)} (1 − (p−1) r²/σ²)/σ², r = y − η, c = (2πσ²)^{(1−p)/2}, is
    negative for outlying residuals, so J_n is rank-one but not necessarily positive.

    Examples
    --------
    >>> from sgtune.models import GLM
    >>> model = GLM("logistic")
    >>> X, y = np.array([[1.0, 0.0], [1.0, 2.0]]), np.array([0.0, 1.0])
    >>> model.per_sample_losses(np.zeros(2), X, y)  # log 2 at θ = 0
    array([0.6931, 0.6931])
    """

    name: str
    noise_variance: float = 1.0
    beta_power: float = 1.5

    #: fitted by damped Newton from :meth:`newton_start` (the rank-one Hessian is cheap)
    fit_method = "newton"

    @property
    def rank_one(self) -> bool:
        """All GLMs have rank-one per-sample Hessians J_n = w_n x_n x_nᵀ."""
        return True

    def n_params(self, n_features: int) -> int:
        """D = the number of covariates (θ holds one coefficient per column of X)."""
        return int(n_features)

    def check_identifiable(self, X: np.ndarray, y: np.ndarray, prior_precision: np.ndarray, source: str) -> None:
        """Raise when θ̂ is not identified: rank-deficient X, or separable logistic data, without a prior."""
        if _smallest_eigenvalue(prior_precision) > 0:
            return
        from .expansion import interruptible

        d = X.shape[1]
        rank = interruptible(4.0 * X.shape[0] * d * d, np.linalg.matrix_rank, X)  # an SVD: Ctrl-C stays prompt
        if rank < d:
            raise DataFormatError(
                f"{source or 'X'}: the design matrix has rank {rank} < D = {d} (collinear or constant "
                "columns), so θ̂ is not identified; drop columns or pass a prior precision > 0")
        if self.name == "logistic" and not np.any(prior_precision) and separable(X, y):
            raise DataFormatError(
                f"{source or 'data'}: the logistic data are linearly separable, so the maximum-likelihood "
                "estimate does not exist (θ̂ → ∞); pass a `prior_precision` > 0")

    def newton_start(self, X: np.ndarray, y: np.ndarray, prior_precision: np.ndarray) -> np.ndarray:
        """Least squares (ridge with Γ) for the Gaussian models, zeros otherwise."""
        d = X.shape[1]
        gam = prior_precision
        if self.name in ("linear", "beta-linear"):
            from .expansion import interruptible

            A = np.vstack([X, np.sqrt(gam) if np.any(gam) else np.zeros((0, d))])
            b = np.concatenate([y, np.zeros(d if np.any(gam) else 0)])
            return interruptible(4.0 * A.shape[0] * d * d, lambda: np.linalg.lstsq(A, b, rcond=None)[0])
        return np.zeros(d)

    def residual_variance(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        """Σ_n r_n²/(N − D) for the Gaussian linear model (the LR+WS comparison theory); NaN otherwise."""
        if self.name != "linear":
            return float("nan")
        r = y - X @ theta
        return float(r @ r / max(X.shape[0] - X.shape[1], 1))

    def numba_spec(self, n_features: int | None = None) -> tuple[str, np.ndarray, np.ndarray]:
        """("glm", [model id], [σ², p, c, α, scale]) for the sampler's compiled GLM gradient.

        ``n_features`` (the protocol's argument, :mod:`sgtune.models.base`) is ignored: a GLM's
        spec does not depend on p.
        """
        p = self.beta_power
        c = (2 * math.pi * self.noise_variance) ** ((1 - p) / 2)
        return ("glm", np.array([GLM_IDS[self.name]], dtype=np.int64),
                np.array([self.noise_variance, p, c, 2.0, 0.0], dtype=np.float64))

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

    def curvature(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> RankOneCurvature:
        """J_n = w_n x_n x_nᵀ with w_n = ρ''(x_nᵀθ): the rank-one structure the fast paths use."""
        return RankOneCurvature(X, self.curvature_weights(theta, X, y))

    def per_sample_hessians(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Dense J_n, shape (N, D, D): the general path (O(N·D²) memory; for tests and small N)."""
        w = self.curvature_weights(theta, X, y)
        return w[:, None, None] * X[:, :, None] * X[:, None, :]


def get_model(name: str, *, noise_variance: float = 1.0, beta_power: float | None = None, labels: Any = None,
              layout: str = "baseline") -> Any:
    """A validated model by name: a :class:`GLM`, or ``"multinomial"`` with its class ``labels`` and ``layout``.

    Parameters
    ----------
    name : str
        One of :data:`MODEL_NAMES`: ``linear`` (Gaussian), ``logistic`` (Bernoulli), ``poisson``,
        ``beta-linear`` (a linear model with the generalised loss |r|^p / p), or ``multinomial``
        (:mod:`sgtune.models.multinomial`; ``Multinomial.from_response`` builds it from a response).
    noise_variance : float, optional
        The variance σ² of the ``linear`` model's Gaussian likelihood (> 0).
    beta_power : float or None, optional
        The power p > 1 of ``beta-linear``; required for that model, unused by the others.
    labels : array_like or int, optional
        Multinomial only: the class labels (the values the response takes, e.g. ``np.unique(y)``)
        or their number K (labels 0 … K−1).
    layout : {"baseline", "full"}, optional
        Multinomial only: the parameterisation.

    Returns
    -------
    GLM or Multinomial
        The model, implementing the per-observation protocol (:class:`~sgtune.models.base.PerSampleModel`).

    Raises
    ------
    SgtuneError
        If ``name`` is unknown, ``noise_variance`` is not positive, ``beta_power`` is missing or
        not a finite number above 1 for ``beta-linear``, ``labels`` are missing for
        ``multinomial``, or ``layout`` is given to another model.

    See Also
    --------
    sgtune.models.make_mlp : A feed-forward network model.

    Examples
    --------
    >>> from sgtune.models import get_model
    >>> get_model("logistic").name
    'logistic'
    >>> get_model("beta-linear", beta_power=1.5).beta_power
    1.5
    """
    if name == "multinomial":
        from .multinomial import Multinomial

        if labels is None:
            raise SgtuneError("model 'multinomial' needs its class labels: get_model('multinomial', labels=np.unique(y)) "
                              "or Multinomial.from_response(y)")
        if isinstance(labels, (int, np.integer)):
            labels = range(int(labels))
        return Multinomial(tuple(np.asarray(labels, dtype=float).reshape(-1)), layout)
    if layout != "baseline":
        raise SgtuneError(f"layout is an option of the multinomial model, not of {name!r}")
    if name not in MODEL_NAMES:
        raise SgtuneError(f"model must be one of {', '.join(MODEL_NAMES)} or multinomial, got {name!r}")
    s2 = check_positive(noise_variance, "noise_variance")
    if name == "beta-linear":
        if beta_power is None:
            raise SgtuneError("model 'beta-linear' needs `beta_power=P` with P > 1, e.g. 1.5")
        p = float(beta_power)
        if not (p > 1 and math.isfinite(p)):
            raise SgtuneError(f"beta_power must be a finite number > 1, got {beta_power}")
        return GLM(name, s2, p)
    return GLM(name, s2)
