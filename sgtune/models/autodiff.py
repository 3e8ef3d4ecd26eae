"""A protocol model from a per-observation log-likelihood written in ``jax.numpy`` (extra ``[jax]``).

>>> import jax.numpy as jnp
>>> from sgtune.models.autodiff import from_jax
>>> def loglik(theta, x, y):                                     # one observation
...     eta = x @ theta
...     return y * eta - jnp.logaddexp(0.0, eta)
>>> model = from_jax(loglik, name="logistic-jax")

The per-observation loss is l_n(θ) = −loglik(θ, x_n, y_n). Per-sample gradients are
``vmap(grad)``; per-sample curvature is ``vmap(hessian)`` (dense J_n, ``hessian="exact"``), or
J_n v by forward-over-reverse ``vmap(jvp(grad))`` (``hessian="hvp"``, for larger D: sgtune then
assembles dense J_n column by column only where it needs them). Everything runs in float64
(``jax_enable_x64`` is switched on when the model is built). JAX is imported only here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core.errors import MissingExtraError, SgtuneError

__all__ = ["from_jax", "JaxModel"]


def _jax() -> Any:
    try:
        import jax
    except ImportError:
        raise MissingExtraError("the JAX model adapter needs JAX: pip install 'sgtune[jax]'") from None
    jax.config.update("jax_enable_x64", True)
    return jax


@dataclass(frozen=True)
class JaxModel:
    """Protocol model built by :func:`from_jax` (see the module docstring).

    Parameters
    ----------
    loglik : callable
        The log-likelihood log p(y | x, θ) of one observation, in ``jax.numpy``.
    name : str
        Shown in outputs.
    hessian : {"exact", "hvp"}
        The per-sample curvature the model declares.
    n_params_fn : callable(p) -> D, optional
        Length of θ for p features (default D = p).
    init_fn : callable(p, rng) -> (D,), optional
        Seeded start for the MAP fit.
    fit_method : {"lbfgs", "newton"}
        How the MAP is fitted.
    _fns : dict
        Internal: the compiled JAX functions, built on first use.

    See Also
    --------
    from_jax : The validated constructor.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sgtune.models.autodiff import JaxModel, from_jax
    >>> model = from_jax(lambda theta, x, y: -0.5 * (y - x @ theta) ** 2, name="gauss-jax")
    >>> isinstance(model, JaxModel), model.name
    (True, 'gauss-jax')
    """

    loglik: Callable[..., Any]
    name: str = "jax-model"
    hessian: str = "exact"
    n_params_fn: Callable[[int], int] | None = None
    init_fn: Callable[[int, np.random.Generator], Any] | None = None
    fit_method: str = "lbfgs"
    _fns: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        jax = _jax()
        jnp = jax.numpy
        loss = lambda th, x, y: -self.loglik(th, x, y)  # noqa: E731
        over = (None, 0, 0)
        self._fns["loss"] = jax.jit(jax.vmap(loss, in_axes=over))
        self._fns["grad"] = jax.jit(jax.vmap(jax.grad(loss), in_axes=over))
        self._fns["hess"] = jax.jit(jax.vmap(jax.hessian(loss), in_axes=over))

        def hvp(th: Any, x: Any, y: Any, v: Any) -> Any:
            return jax.jvp(lambda t: jax.grad(loss)(t, x, y), (th,), (v,))[1]

        self._fns["hvp"] = jax.jit(jax.vmap(hvp, in_axes=(None, 0, 0, None)))
        self._fns["jnp"] = jnp

    def n_params(self, n_features: int) -> int:
        """D (default: one parameter per feature)."""
        return int(self.n_params_fn(n_features)) if self.n_params_fn is not None else int(n_features)

    def initial_params(self, n_features: int, rng: np.random.Generator) -> np.ndarray:
        """The user's seeded start, else small normal draws (scale 0.1)."""
        if self.init_fn is not None:
            return np.asarray(self.init_fn(n_features, rng), dtype=float)
        return 0.1 * rng.standard_normal(self.n_params(n_features))

    def per_sample_losses(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(self._fns["loss"](theta, X, y), dtype=float)

    def per_sample_grads(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(self._fns["grad"](theta, X, y), dtype=float)

    def per_sample_hessians(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Dense J_n by ``vmap(hessian)``."""
        return np.asarray(self._fns["hess"](theta, X, y), dtype=float)

    def hessian_vector_products(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray,
                                v: np.ndarray) -> np.ndarray:
        """J_n v for every n by forward-over-reverse (no dense J_n)."""
        return np.asarray(self._fns["hvp"](theta, X, y, v), dtype=float)

    def __getattribute__(self, attr: str) -> Any:
        # with hessian="hvp" the dense route is hidden, so sgtune uses the HVPs
        if attr == "per_sample_hessians" and object.__getattribute__(self, "hessian") == "hvp":
            raise AttributeError(attr)
        return object.__getattribute__(self, attr)


def from_jax(loglik: Callable[..., Any], *, name: str = "jax-model", hessian: str = "exact",
             n_params: Callable[[int], int] | None = None,
             initial_params: Callable[[int, np.random.Generator], Any] | None = None,
             fit_method: str = "lbfgs") -> JaxModel:
    """A protocol model from ``loglik(theta, x, y) -> scalar`` (one observation, ``jax.numpy``).

    Parameters
    ----------
    loglik : callable
        The log-likelihood log p(y | x, θ) of one observation (x: a row of X, y: a scalar).
    name : str
        Shown in outputs.
    hessian : {"exact", "hvp"}
        Dense per-sample Hessians by ``vmap(hessian)``, or Hessian–vector products only.
    n_params : callable(p) -> D, optional
        Length of θ for p features (default D = p).
    initial_params : callable(p, rng) -> (D,), optional
        Seeded start for the MAP fit.
    fit_method : {"lbfgs", "newton"}
        The MAP fit: "newton" for convex log-likelihoods (damped Newton from zeros).

    Returns
    -------
    JaxModel
        The model (float64 throughout: ``jax_enable_x64`` is switched on).

    Raises
    ------
    MissingExtraError
        JAX is not installed (extra ``[jax]``).
    SgtuneError
        An unknown ``hessian`` or ``fit_method``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sgtune.models.autodiff import from_jax
    >>> model = from_jax(lambda theta, x, y: y * (x @ theta) - jnp.logaddexp(0.0, x @ theta))
    >>> model.per_sample_grads(np.zeros(2), np.ones((3, 2)), np.array([0.0, 1.0, 1.0])).shape
    (3, 2)
    """
    if hessian not in ("exact", "hvp"):
        raise SgtuneError(f"hessian must be 'exact' or 'hvp', got {hessian!r}")
    if fit_method not in ("lbfgs", "newton"):
        raise SgtuneError(f"fit_method must be 'lbfgs' or 'newton', got {fit_method!r}")
    if not callable(loglik):
        raise SgtuneError(f"loglik must be a function (theta, x, y) -> scalar, got {type(loglik).__name__}")
    return JaxModel(loglik, name, hessian, n_params, initial_params, fit_method)
