r"""NumPy and optax updates of a Kronecker-factored Λ (the ``kronecker`` family), matrix-free, with momentum and β.

The update (the same as :func:`sgtune.io.kronecker_torch.kronecker_torch_optimizer` and the factored theory of
:mod:`sgtune.theory.kronecker`), per layer l with Λ_l = L_l L_lᵀ,

    m' = κ m + G,    θ' = θ − Λ m' + √(2/β) L ξ,   ξ ~ N(0, I),

where G is the gradient of the batch-mean loss (with the prior's δθ/N) at θ, in θ order, and Λ m' and L ξ are
two small matrix products per layer on the [W | b] matrix (M X Ã⁻¹ and chol(M) Z chol(Ã⁻¹)ᵀ for the damped
prior; Q_G((Q_Gᵀ X Q_A) ∘ λ)Q_Aᵀ and Q_G(√λ ∘ Z)Q_Aᵀ for the eigenbasis prior). No D×D object. κ and β are the
result's (what its prediction is for).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..core.errors import MissingExtraError, ShapeError

__all__ = ["kronecker_numpy_step", "kronecker_optax"]


def kronecker_numpy_step(result: Any, *, rng: np.random.Generator | None = None
                         ) -> Callable[[Any, Any, Any], tuple[np.ndarray, np.ndarray]]:
    """A NumPy step ``(θ, m, G) ↦ (θ', m')`` applying a Kronecker-factored Λ (module docstring).

    Parameters
    ----------
    result : KroneckerTuning
        The tuned step (its κ and β are used).
    rng : numpy.random.Generator, optional
        The noise stream (default ``numpy.random.default_rng()``).

    Returns
    -------
    callable
        ``step(theta, m, grad) -> (theta, m)``; θ, m and G of shape (..., D) in θ order (leading axes: chains).
        Start with m = 0.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import KroneckerFactors, LayerFactors
    >>> from sgtune.theory.kronecker import tune_factors
    >>> from sgtune.io.kronecker_export import kronecker_numpy_step
    >>> lf = LayerFactors("fc", np.eye(2), np.eye(1), np.eye(1), (0, 2))
    >>> res = tune_factors(KroneckerFactors((lf,), n_data=50, dim=2), Dynamics(None, batch_size=5))
    >>> step = kronecker_numpy_step(res)
    >>> theta, m = step(np.zeros(2), np.zeros(2), np.ones(2))
    >>> bool(np.allclose(theta, -res.apply(np.ones(2))))
    True
    """
    gen = rng if rng is not None else np.random.default_rng()
    dyn = result.dynamics
    kappa, beta = float(dyn.momentum), float(dyn.inv_temperature)
    scale = 0.0 if math.isinf(beta) else math.sqrt(2.0 / beta)

    def step(theta: Any, m: Any, grad: Any) -> tuple[np.ndarray, np.ndarray]:
        theta, m, grad = (np.asarray(a, dtype=np.float64) for a in (theta, m, grad))
        if not theta.shape == m.shape == grad.shape or theta.shape[-1] != result.dim:
            raise ShapeError(f"θ, m and G must have the same shape (..., D = {result.dim}); got {theta.shape}, "
                             f"{m.shape}, {grad.shape}")
        m_new = kappa * m + grad
        out = theta - result.apply(m_new)
        if scale:
            out = out + scale * result.noise(gen.standard_normal(theta.shape))
        return out, m_new

    return step


def _jax() -> tuple[Any, Any, Any]:
    try:
        import jax
        import jax.numpy as jnp
        import optax
    except ImportError:
        raise MissingExtraError("the optax export needs JAX and optax: pip install 'sgtune[jax]'") from None
    return jax, jnp, optax


def _layer_fns(lay: Any, jnp: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(X ↦ Λ_l X, Z ↦ L_l Z) on (d_out, d_in) jnp matrices."""
    if lay.eigenbasis is None:
        M, Ainv = jnp.asarray(lay.step_factor), jnp.asarray(lay.input_inverse)
        LM, LA = jnp.asarray(np.linalg.cholesky(lay.step_factor)), jnp.asarray(np.linalg.cholesky(lay.input_inverse))
        return (lambda X: M @ X @ Ainv), (lambda Z: LM @ Z @ LA.T)
    Qg, Qa, lam = (jnp.asarray(a) for a in lay.eigenbasis[:3])
    root = jnp.sqrt(lam)
    return (lambda X: Qg @ ((Qg.T @ X @ Qa) * lam) @ Qa.T), (lambda Z: Qg @ (root * Z) @ Qa.T)


def kronecker_optax(result: Any, *, seed: int = 0) -> Any:
    """An optax transformation whose update is −Λm' + √(2/β) L ξ, m' = κm + g (module docstring).

    Parameters are a single array θ of length D in θ order (e.g. ``jax.flatten_util.ravel_pytree`` of a
    pytree whose flattening order is the tuned network's θ order). Feed it the mean-loss minibatch gradient
    (with the prior term) and apply with ``optax.apply_updates``. Needs the ``jax`` extra. Computations in
    float64 need ``jax.config.update("jax_enable_x64", True)``.

    Parameters
    ----------
    result : KroneckerTuning
        The tuned step (its κ and β are used).
    seed : int, optional
        Seed of the noise's PRNG key.

    Returns
    -------
    optax.GradientTransformation
        ``init(params)`` and ``update(grads, state, params=None)``.

    Raises
    ------
    MissingExtraError
        JAX or optax is not installed.
    ShapeError
        Parameters that are not one array of length D.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import KroneckerFactors, LayerFactors
    >>> from sgtune.theory.kronecker import tune_factors
    >>> from sgtune.io.kronecker_export import kronecker_optax
    >>> lf = LayerFactors("fc", np.eye(2), np.eye(1), np.eye(1), (0, 2))
    >>> res = tune_factors(KroneckerFactors((lf,), n_data=50, dim=2), Dynamics(None, batch_size=5))
    >>> tx = kronecker_optax(res)
    >>> upd, state = tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))
    >>> bool(np.allclose(upd, -res.apply(np.ones(2)), atol=1e-6))
    True
    """
    jax, jnp, optax = _jax()
    dyn = result.dynamics
    kappa, beta = float(dyn.momentum), float(dyn.inv_temperature)
    scale = 0.0 if math.isinf(beta) else math.sqrt(2.0 / beta)
    layers = [(jnp.asarray(lay.theta_indices()), lay.d_out, lay.d_in, *_layer_fns(lay, jnp)) for lay in result.layers]

    def blockwise(v: Any, which: int) -> Any:
        out = jnp.zeros_like(v)
        for idx, d_out, d_in, *fns in layers:
            out = out.at[idx].set(fns[which](v[idx].reshape(d_out, d_in)).reshape(-1))
        return out

    def check(x: Any) -> None:
        if not hasattr(x, "shape") or tuple(x.shape) != (result.dim,):
            raise ShapeError(f"kronecker_optax takes θ as one array of length D = {result.dim} (ravel a pytree with "
                             f"jax.flatten_util.ravel_pytree in θ order); got {type(x).__name__} "
                             f"{getattr(x, 'shape', '')}")

    def init(params: Any) -> Any:
        check(params)
        return {"momentum": jnp.zeros_like(params), "key": jax.random.PRNGKey(int(seed))}

    def update(grads: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        check(grads)
        m = kappa * state["momentum"] + grads
        upd = -blockwise(m, 0)
        key, sub = jax.random.split(state["key"])
        if scale:
            upd = upd + scale * blockwise(jax.random.normal(sub, grads.shape, dtype=grads.dtype), 1)
        return upd, {"momentum": m, "key": key}

    return optax.GradientTransformation(init, update)
