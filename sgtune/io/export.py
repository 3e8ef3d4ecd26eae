r"""Λ back in the training loop: a NumPy step function and an optax ``GradientTransformation``.

Both apply sgtune's update (THEORY §1.1, §1.5; seed 003 §2.1 and eq. B.1) with a tuned
step-size matrix Λ:

.. math::  m_t = κ m_{t−1} + G_t(θ_{t−1}),\qquad θ_t = θ_{t−1} − Λ m_t + \sqrt{2/β}\,Λ^{1/2} ξ_t,

ξ_t ~ N(0, I), G_t the **mean-loss** minibatch gradient (1/B)Σ_{n∈batch}∇l_n(θ) + Γθ/N
(κ = 0: plain SG(L)D; β = ∞: no injected noise, i.e. SGD). Λ^{1/2} is any factor with
Λ^{1/2}Λ^{1/2ᵀ} = Λ (a Cholesky factor for blocks/dense), so the injected noise has covariance
2Λ/β exactly. Λ is stored in its structure — scalar, diagonal (D,), blocks of index sets, or
dense (D, D) — and applied without forming a dense matrix for the structured kinds.

With these updates the chain's stationary covariance is the one sgtune predicts for Λ
(:func:`sgtune.theory.stationary.predict_stationary_cov`), which ``tests/test_export.py``
checks by simulation for every kind.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from ..core._refs import cites
from ..core._validation import as_float_array, check_positive, check_probability
from ..core.errors import MissingExtraError, NotPositiveDefiniteError, SgtuneError, ShapeError

__all__ = ["StepMatrix", "step_matrix", "numpy_step", "optax_transform", "SGMCMCState"]

KINDS = ("scalar", "diagonal", "block", "dense")


@dataclass(frozen=True)
class StepMatrix:
    """A step-size matrix Λ in its structure.

    Attributes
    ----------
    kind : "scalar", "diagonal", "block" or "dense".
    dim : D.
    scalar : λ (kind scalar).
    diagonal : (D,) diagonal (kind diagonal).
    blocks : index arrays (kind block), with ``block_values`` the SPD blocks Λ_b.
    dense : (D, D) Λ (kind dense).
    """

    kind: str
    dim: int
    scalar: float = float("nan")
    diagonal: np.ndarray | None = None
    blocks: tuple[np.ndarray, ...] = ()
    block_values: tuple[np.ndarray, ...] = ()
    dense: np.ndarray | None = None

    def to_dense(self) -> np.ndarray:
        """Λ as a (D, D) array (for checks; the step functions never form it for structured kinds)."""
        if self.kind == "scalar":
            return self.scalar * np.eye(self.dim)
        if self.kind == "diagonal":
            return np.diag(self.diagonal)  # type: ignore[arg-type]
        if self.kind == "block":
            out = np.zeros((self.dim, self.dim))
            for b, v in zip(self.blocks, self.block_values):
                out[np.ix_(b, b)] = v
            return out
        return np.array(self.dense)

    def factors(self) -> Any:
        """Λ^{1/2} in the same structure (sqrt for scalar/diagonal, Cholesky factors otherwise)."""
        if self.kind == "scalar":
            return math.sqrt(self.scalar)
        if self.kind == "diagonal":
            return np.sqrt(self.diagonal)  # type: ignore[arg-type]
        if self.kind == "block":
            return tuple(np.linalg.cholesky(v) for v in self.block_values)
        return np.linalg.cholesky(self.dense)  # type: ignore[arg-type]


@cites("wang2026", "§2.1: Λ a D×D step-size matrix (scalar λ means Λ = λI)")
def step_matrix(value: Any, *, kind: str | None = None, blocks: Any = None) -> StepMatrix:
    """A :class:`StepMatrix` from a scalar, a (D,) diagonal, a (D, D) matrix or a ``TuningResult``.

    ``kind`` picks the structure of a (D, D) input (default: the family of a ``TuningResult``,
    else ``dense``); ``kind="block"`` needs ``blocks`` (lists of indices partitioning 0..D−1) and
    keeps only Λ's diagonal blocks, which must be symmetric positive definite.
    """
    from .blocks import load_blocks

    if hasattr(value, "step_matrix") and hasattr(value, "family"):  # a TuningResult
        if kind is None:
            kind = value.family
        value = value.step_matrix
    arr = as_float_array(value, "step_matrix")
    if arr.ndim == 0:
        raise SgtuneError("step_matrix: a scalar needs the dimension; pass step_matrix(lam * np.ones(D)) "
                          "or use StepMatrix('scalar', D, scalar=lam)")
    if arr.ndim == 1:
        if kind not in (None, "diagonal", "scalar"):
            raise SgtuneError(f"step_matrix: a (D,) vector is a diagonal Λ, not kind {kind!r}")
        if not np.all(arr > 0):
            raise NotPositiveDefiniteError(f"step_matrix: the diagonal must be positive, smallest {arr.min():g}")
        if kind == "scalar":
            if not np.all(arr == arr[0]):
                raise SgtuneError("step_matrix: kind 'scalar' needs equal diagonal entries")
            return StepMatrix("scalar", arr.shape[0], scalar=float(arr[0]))
        return StepMatrix("diagonal", arr.shape[0], diagonal=arr.copy())
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ShapeError(f"step_matrix must be (D,) or (D, D), got shape {arr.shape}")
    d = arr.shape[0]
    kind = kind or "dense"
    if kind not in KINDS:
        raise SgtuneError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "scalar":
        return StepMatrix("scalar", d, scalar=float(arr[0, 0]))
    if kind == "diagonal":
        return step_matrix(np.diag(arr).copy())
    if kind == "block":
        if blocks is None:
            raise SgtuneError("step_matrix: kind 'block' needs blocks (lists of parameter indices)")
        part = load_blocks(blocks, d)
        vals = tuple(0.5 * (arr[np.ix_(b, b)] + arr[np.ix_(b, b)].T) for b in part)
        for v in vals:
            _check_spd(v)
        return StepMatrix("block", d, blocks=part, block_values=vals)
    sym = 0.5 * (arr + arr.T)
    _check_spd(sym)
    return StepMatrix("dense", d, dense=sym)


def _check_spd(a: np.ndarray) -> None:
    try:
        np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        raise NotPositiveDefiniteError(f"step_matrix must be symmetric positive definite; smallest eigenvalue "
                                       f"{np.linalg.eigvalsh(a)[0]:.3g}") from None


def _apply_numpy(lam: StepMatrix, v: np.ndarray, factor: Any = None) -> np.ndarray:
    """Λ v (or Λ^{1/2} v with ``factor``) for v of shape (..., D), without a dense matrix for structured Λ."""
    if lam.kind == "scalar":
        return (lam.scalar if factor is None else factor) * v
    if lam.kind == "diagonal":
        return (lam.diagonal if factor is None else factor) * v
    if lam.kind == "block":
        out = np.empty_like(v)
        mats = lam.block_values if factor is None else factor
        for b, m in zip(lam.blocks, mats):
            out[..., b] = v[..., b] @ m.T
        return out
    return v @ (lam.dense if factor is None else factor).T


@cites("wang2026", "§2.1 update θ ← θ − ΛG + sqrt(2Λ/β)ξ; momentum as in Prop. B.1 / THEORY §1.5")
def numpy_step(lam: StepMatrix | Any, *, momentum: float = 0.0, inv_temperature: float = math.inf,
               rng: np.random.Generator | None = None) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    r"""A NumPy step ``(θ, m, G) ↦ (θ', m')``: m' = κm + G, θ' = θ − Λm' + sqrt(2/β)Λ^{1/2}ξ.

    θ, m and G may carry leading batch axes (e.g. (chains, D)); G is the mean-loss minibatch
    gradient at θ. Start with m = 0.
    """
    L = lam if isinstance(lam, StepMatrix) else step_matrix(lam)
    kappa = check_probability(momentum, "momentum")
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    fac = L.factors() if math.isfinite(beta) else None
    scale = math.sqrt(2.0 / beta) if math.isfinite(beta) else 0.0
    gen = rng if rng is not None else np.random.default_rng()

    def step(theta: np.ndarray, m: np.ndarray, grad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if grad.shape[-1] != L.dim:
            raise ShapeError(f"gradient must have last axis D = {L.dim}, got shape {grad.shape}")
        m_new = kappa * m + grad
        out = theta - _apply_numpy(L, m_new)
        if fac is not None:
            out = out + scale * _apply_numpy(L, gen.standard_normal(np.shape(out)), fac)
        return out, m_new

    return step


class SGMCMCState(NamedTuple):
    """optax state: the momentum buffer (flat, (D,)) and the PRNG key of the injected noise."""

    momentum: Any
    key: Any


@cites("wang2026", "§2.1 update θ ← θ − ΛG + sqrt(2Λ/β)ξ; momentum as in Prop. B.1 / THEORY §1.5")
def optax_transform(lam: StepMatrix | Any, *, momentum: float = 0.0, inv_temperature: float = math.inf,
                    seed: int = 0) -> Any:
    r"""An optax ``GradientTransformation`` whose update is −Λm' + sqrt(2/β)Λ^{1/2}ξ, m' = κm + g.

    Feed it the mean-loss minibatch gradient and apply with ``optax.apply_updates``. Parameters
    may be any pytree; they are flattened with ``jax.flatten_util.ravel_pytree`` and Λ's index
    order is that flat order. Needs the ``jax`` extra (``pip install sgtune[jax]``).
    """
    try:
        import jax
        import jax.numpy as jnp
        import optax
        from jax.flatten_util import ravel_pytree
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise MissingExtraError("sgtune.io.export.optax_transform needs jax and optax: pip install 'sgtune[jax]'") \
            from None
    L = lam if isinstance(lam, StepMatrix) else step_matrix(lam)
    kappa = check_probability(momentum, "momentum")
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    noisy = math.isfinite(beta)
    scale = math.sqrt(2.0 / beta) if noisy else 0.0
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    if L.kind == "scalar":
        mat, fac = jnp.asarray(L.scalar, dtype), jnp.asarray(math.sqrt(L.scalar), dtype)

        def apply(a: Any, v: Any) -> Any:
            return a * v
    elif L.kind == "diagonal":
        mat, fac = jnp.asarray(L.diagonal, dtype), jnp.asarray(np.sqrt(L.diagonal), dtype)

        def apply(a: Any, v: Any) -> Any:
            return a * v
    elif L.kind == "block":
        idx = [jnp.asarray(b) for b in L.blocks]
        mat = tuple(jnp.asarray(v, dtype) for v in L.block_values)
        fac = tuple(jnp.asarray(f, dtype) for f in L.factors())

        def apply(a: Any, v: Any) -> Any:
            out = jnp.zeros_like(v)
            for b, m in zip(idx, a):
                out = out.at[b].set(m @ v[b])
            return out
    else:
        mat, fac = jnp.asarray(L.dense, dtype), jnp.asarray(L.factors(), dtype)

        def apply(a: Any, v: Any) -> Any:
            return a @ v

    def init_fn(params: Any) -> SGMCMCState:
        flat, _ = ravel_pytree(params)
        if flat.shape[0] != L.dim:
            raise ShapeError(f"the parameters have {flat.shape[0]} entries but Λ is {L.dim}×{L.dim}")
        return SGMCMCState(momentum=jnp.zeros_like(flat), key=jax.random.PRNGKey(seed))

    def update_fn(updates: Any, state: SGMCMCState, params: Any = None) -> tuple[Any, SGMCMCState]:
        g, unravel = ravel_pytree(updates)
        m = kappa * state.momentum + g
        step = -apply(mat, m)
        key = state.key
        if noisy:
            key, sub = jax.random.split(key)
            step = step + scale * apply(fac, jax.random.normal(sub, g.shape, g.dtype))
        return unravel(step), SGMCMCState(momentum=m, key=key)

    return optax.GradientTransformation(init_fn, update_fn)
