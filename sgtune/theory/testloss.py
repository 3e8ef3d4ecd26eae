r"""Test loss of SGD on linear regression from the stationary covariance (Wang, Ding & Huggins 2026, appendix E.3).

With θ_t the stationary SGD iterate, E[θ_t] = θ̂ (Lemma F.1) and Cov θ_t = Σ_θ, so for a test set
{(x_m, y_m)}_{m=1}^M (App. E.3.2)

.. math:: L_{test} = E\Big[\frac1M\sum_m (y_m − θ_t^\top x_m)^2\Big]
                   = \frac1M\sum_m (y_m − \hat θ^\top x_m)^2 + \frac1M\sum_m x_m^\top Σ_θ x_m .

Ridge regression is the prior Γ = γI in sgtune's mean-loss scaling L(θ) = mean_n l_n(θ) + θᵀΓθ/(2N),
so "weight decay" γ enters as γ/N per step; θ̂_γ and Σ_θ(γ, λ, B) both depend on it.
The optimal weight decay / batch size is the grid minimiser of the predicted test loss.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..core._refs import cites
from ..core._validation import as_float_array, check_int
from ..core.config import Dynamics
from ..io.data import Dataset
from ..core.errors import ConvergenceError, ShapeError, SgtuneError, UnstableStepSizeError
from ..models import expand, get_model
from .stationary import THEORIES, predict_comparison_cov

__all__ = ["predicted_test_loss", "TestLossPath", "ridge_test_loss_path", "optimal_weight_decay",
           "optimal_batch_size"]


@cites("wang2026", "App. E.3 and E.3.2: L_test = mean (y_m − θ̂ᵀx_m)² + mean x_mᵀΣ_θx_m")
def predicted_test_loss(theta_hat: Any, stationary_cov: Any, X_test: Any, y_test: Any) -> float:
    r"""Expected squared-error test loss of a stationary iterate θ_t ~ (θ̂, Σ_θ): bias term + tr(Σ_θ Â).

    Parameters
    ----------
    theta_hat : (D,) array_like
        The stationary mean θ̂ (the MAP of the training loss).
    stationary_cov : (D, D) array_like
        Σ_θ (e.g. :func:`sgtune.theory.stationary.predict_stationary_cov`).
    X_test : (M, D) array_like
        Test covariates.
    y_test : (M,) array_like
        Test responses.

    Returns
    -------
    float
        (1/M) Σ_m (y_m − θ̂ᵀx_m)² + (1/M) Σ_m x_mᵀΣ_θx_m (Wang, Ding & Huggins 2026, App. E.3).

    Examples
    --------
    >>> from sgtune.theory.testloss import predicted_test_loss
    >>> predicted_test_loss(np.zeros(1), np.eye(1), np.ones((2, 1)), np.array([1.0, 3.0]))  # (1 + 9)/2 + 1
    6.0
    """
    th = as_float_array(theta_hat, "theta_hat").reshape(-1)
    d = th.shape[0]
    S = as_float_array(stationary_cov, "stationary_cov")
    X = as_float_array(X_test, "X_test")
    y = as_float_array(y_test, "y_test").reshape(-1)
    if S.shape != (d, d):
        raise ShapeError(f"stationary_cov must be (D, D) = ({d}, {d}) but has shape {S.shape}")
    if X.ndim != 2 or X.shape[1] != d:
        raise ShapeError(f"X_test must be (M, D) with D = {d} but has shape {X.shape}")
    if y.shape[0] != X.shape[0]:
        raise ShapeError(f"y_test has {y.shape[0]} entries but X_test has {X.shape[0]} rows; they must match")
    r = y - X @ th
    return float(np.mean(r * r) + np.mean(np.einsum("ij,jk,ik->i", X, S, X)))


@dataclass(frozen=True)
class TestLossPath:
    """Predicted test loss over a grid (weight decays or batch sizes), one curve per theory.

    Attributes
    ----------
    grid : ndarray
        The γ or B values.
    losses : dict of str to ndarray
        Theory -> the predicted test loss at each grid value; ``inf`` where the chain is unstable.
    bias : ndarray
        The Σ-free part (1/M)Σ(y_m − θ̂ᵀx_m)² at each grid value.
    step : float
        λ.
    parameter : str
        ``"weight_decay"`` or ``"batch_size"``.

    Examples
    --------
    >>> from sgtune.io.data import example, make_dataset
    >>> data = example("hetero-linear")
    >>> X, y = data.X[:, :3], data.y  # three of the covariates: a small, misspecified ridge problem
    >>> train, X_test, y_test = make_dataset(X[:1500], y[:1500]), X[1500:], y[1500:]
    >>> from sgtune.theory.testloss import ridge_test_loss_path
    >>> path = ridge_test_loss_path(train, X_test, y_test, step=0.01, batch_size=32, weight_decays=[0.0, 100.0])
    >>> path.parameter, sorted(path.losses)
    ('weight_decay', ['ct', 'dq-exact', 'lr-ws'])
    """

    __test__ = False  # not a pytest class despite the name

    grid: np.ndarray
    losses: dict[str, np.ndarray]
    bias: np.ndarray
    step: float
    parameter: str

    def argmin(self, theory: str = "dq-exact") -> float:
        """Grid value minimising the predicted test loss of ``theory``."""
        return float(self.grid[int(np.argmin(self.losses[theory]))])


def _predict(e: Any, step: float, B: int, theory: str) -> np.ndarray | None:
    try:
        return predict_comparison_cov(e, Dynamics(step, B), theory=theory)
    except (UnstableStepSizeError, ConvergenceError):
        return None


def _check_theories(theories: Sequence[str]) -> None:
    bad = [t for t in theories if t not in THEORIES]
    if bad:
        raise SgtuneError(f"theories must be among {', '.join(THEORIES)}, got {bad[0]!r}")


@cites("wang2026", "App. E.3, Fig. E.3: test loss of SGD ridge regression vs weight decay / batch size")
def ridge_test_loss_path(train: Dataset, X_test: Any, y_test: Any, *, step: float, batch_size: int | None = None,
                         weight_decays: Sequence[float] | None = None, batch_sizes: Sequence[int] | None = None,
                         weight_decay: float = 0.0, theories: Sequence[str] = ("dq-exact", "ct", "lr-ws"),
                         noise_variance: float = 1.0) -> TestLossPath:
    r"""Predicted test loss of constant-step SGD (Λ = λI) on ridge regression over γ or over B.

    Give ``weight_decays`` (with a fixed ``batch_size``; Fig. E.3 left) or ``batch_sizes`` (with a
    fixed ``weight_decay``; Fig. E.3 right). For each grid value: fit θ̂_γ, predict Σ_θ with each
    theory (:func:`sgtune.theory.stationary.predict_comparison_cov`), and evaluate
    :func:`predicted_test_loss`.

    Parameters
    ----------
    train : Dataset
        The training data (a linear model).
    X_test : (M, D) array_like
        Test covariates.
    y_test : (M,) array_like
        Test responses.
    step : float
        The scalar step λ (Λ = λI).
    batch_size : int or None, optional
        B, with ``weight_decays``.
    weight_decays : sequence of float or None, optional
        The γ grid.
    batch_sizes : sequence of int or None, optional
        The B grid.
    weight_decay : float, optional
        The weight decay γ, with ``batch_sizes``.
    theories : sequence of str, optional
        Noise models of :data:`sgtune.theory.noise_models.NOISE_MODELS`.
    noise_variance : float, optional
        The variance σ² of the linear model.

    Returns
    -------
    TestLossPath
        One predicted test-loss curve per theory (Wang, Ding & Huggins 2026, Fig. E.3).

    Raises
    ------
    SgtuneError
        Neither or both grids, or a grid without its fixed companion setting.

    Examples
    --------
    >>> from sgtune.io.data import example, make_dataset
    >>> data = example("hetero-linear")
    >>> X, y = data.X[:, :3], data.y  # three of the covariates: a small, misspecified ridge problem
    >>> train, X_test, y_test = make_dataset(X[:1500], y[:1500]), X[1500:], y[1500:]
    >>> from sgtune.theory.testloss import ridge_test_loss_path
    >>> path = ridge_test_loss_path(train, X_test, y_test, step=0.01, batch_sizes=[8, 128])
    >>> bool(path.losses["dq-exact"][0] > path.losses["dq-exact"][1])  # larger batches, less noise
    True
    """
    _check_theories(theories)
    if (weight_decays is None) == (batch_sizes is None):
        raise SgtuneError("give exactly one of weight_decays (a γ grid) or batch_sizes (a B grid)")
    model = get_model("linear", noise_variance=noise_variance)
    X = as_float_array(X_test, "X_test")
    y = as_float_array(y_test, "y_test").reshape(-1)
    lam = float(step)
    if not lam > 0:
        raise SgtuneError(f"step must be > 0, got {step}")
    if weight_decays is not None:
        if batch_size is None:
            raise SgtuneError("a weight-decay path needs batch_size")
        B = check_int(batch_size, "batch_size", low=1, high=train.n_data)
        grid = np.asarray(weight_decays, dtype=float)
        if np.any(grid < 0) or not np.all(np.isfinite(grid)):
            raise SgtuneError("weight_decays must be finite and >= 0")
        pairs = [(g, B) for g in grid]
        parameter = "weight_decay"
    else:
        grid = np.asarray([check_int(b, "batch_sizes", low=1, high=train.n_data) for b in batch_sizes],  # type: ignore[union-attr]
                          dtype=float)
        pairs = [(float(weight_decay), int(b)) for b in grid]
        parameter = "batch_size"
    losses = {th: np.empty(len(pairs)) for th in theories}
    bias = np.empty(len(pairs))
    cache: dict[float, Any] = {}
    for k, (g, B) in enumerate(pairs):
        if g not in cache:
            cache[g] = expand(model, train, g)
        e = cache[g]
        bias[k] = predicted_test_loss(e.theta_hat, np.zeros((e.dim, e.dim)), X, y)
        for th in theories:
            cov = _predict(e, lam, B, th)
            losses[th][k] = math.inf if cov is None else predicted_test_loss(e.theta_hat, cov, X, y)
    return TestLossPath(grid=grid, losses=losses, bias=bias, step=lam, parameter=parameter)


@cites("wang2026", "App. E.3: optimal weight decay from the predicted test loss")
def optimal_weight_decay(train: Dataset, X_test: Any, y_test: Any, *, step: float, batch_size: int,
                         weight_decays: Sequence[float], theory: str = "dq-exact") -> float:
    """The γ of ``weight_decays`` minimising the predicted test loss (App. E.3).

    Parameters
    ----------
    train : Dataset
        The training data (a linear model).
    X_test : (M, D) array_like
        Test covariates.
    y_test : (M,) array_like
        Test responses.
    step : float
        The scalar step λ (Λ = λI).
    batch_size : int
        B.
    weight_decays : sequence of float
        The candidates γ.
    theory : str, optional
        The noise model.

    Returns
    -------
    float
        The best γ.

    Examples
    --------
    >>> from sgtune.io.data import example, make_dataset
    >>> data = example("hetero-linear")
    >>> X, y = data.X[:, :3], data.y  # three of the covariates: a small, misspecified ridge problem
    >>> train, X_test, y_test = make_dataset(X[:1500], y[:1500]), X[1500:], y[1500:]
    >>> from sgtune.theory.testloss import optimal_weight_decay
    >>> optimal_weight_decay(train, X_test, y_test, step=0.01, batch_size=32, weight_decays=[0.0, 100.0, 1e4])
    10000.0
    """
    return ridge_test_loss_path(train, X_test, y_test, step=step, batch_size=batch_size,
                                weight_decays=weight_decays, theories=(theory,)).argmin(theory)


@cites("wang2026", "App. E.3: optimal batch size from the predicted test loss")
def optimal_batch_size(train: Dataset, X_test: Any, y_test: Any, *, step: float, batch_sizes: Sequence[int],
                       weight_decay: float = 0.0, theory: str = "dq-exact") -> int:
    """The B of ``batch_sizes`` minimising the predicted test loss at fixed λ and γ (App. E.3).

    Parameters
    ----------
    train : Dataset
        The training data (a linear model).
    X_test : (M, D) array_like
        Test covariates.
    y_test : (M,) array_like
        Test responses.
    step : float
        The scalar step λ (Λ = λI).
    batch_sizes : sequence of int
        The candidates B.
    weight_decay : float, optional
        The weight decay γ.
    theory : str, optional
        The noise model.

    Returns
    -------
    int
        The best B.

    Examples
    --------
    >>> from sgtune.io.data import example, make_dataset
    >>> data = example("hetero-linear")
    >>> X, y = data.X[:, :3], data.y  # three of the covariates: a small, misspecified ridge problem
    >>> train, X_test, y_test = make_dataset(X[:1500], y[:1500]), X[1500:], y[1500:]
    >>> from sgtune.theory.testloss import optimal_batch_size
    >>> optimal_batch_size(train, X_test, y_test, step=0.01, batch_sizes=[8, 32, 128])
    128
    """
    return int(ridge_test_loss_path(train, X_test, y_test, step=step, batch_sizes=batch_sizes,
                                    weight_decay=weight_decay, theories=(theory,)).argmin(theory))
