"""Minibatch mean loss of the ``"mlp"`` spec (for SMILE's energy error), beside :func:`sgtune.sampler.mlp.mlp_grad`.

(1/|S|) Σ_{n∈S} ρ(f(x_n; θ), y_n) with the network, spec and θ layout of :mod:`sgtune.sampler.mlp`
(f = W_L a_{L−1} + b_L, a_l = φ(W_l a_{l−1} + b_l); ρ the GLM loss of the likelihood id, up to a
constant: :func:`~sgtune.sampler.grads.glm_rho`). A self-contained forward pass (plain loops,
``math.tanh``), so it does not depend on the gradient kernel's private helpers or work layout,
which are tuned separately; tested against :meth:`sgtune.models.mlp.MLP.per_sample_losses`.
Work layout (m = |S|): two activation buffers of max_l n_l × m (ping-pong), inside the
gradient's :func:`~sgtune.sampler.mlp.work_size`.
"""
from __future__ import annotations

import math

from ._jit import component_inline, njit
from .grads import glm_rho
from .mlp import mlp_grad

__all__ = ["mlp_loss", "mlp_value_grad", "work_size"]


def work_size(ints, batch_size: int) -> int:  # type: ignore[no-untyped-def]
    """Work length :func:`mlp_loss` needs: 2 · max_l n_l · B."""
    return 2 * max(int(v) for v in ints[:-2]) * max(int(batch_size), 1)


@njit
def _phi(code, z):  # type: ignore[no-untyped-def]
    if code == 0:
        return math.tanh(z)
    if code == 1:
        return z if z > 0.0 else 0.0
    return max(z, 0.0) + math.log1p(math.exp(-abs(z)))


@njit
def mlp_loss(theta, X, y, idx, nb, ints, floats, work):  # type: ignore[no-untyped-def]
    """Minibatch mean loss (1/|S|) Σ_{n∈S} ρ(f(x_n; θ), y_n), S = idx[:nb] (module docstring)."""
    n_layers = ints.shape[0] - 3
    code = ints[n_layers + 1]
    lik = ints[n_layers + 2]
    m = nb
    maxw = 1
    for l in range(n_layers + 1):
        if ints[l] > maxw:
            maxw = ints[l]
    cur = 0          # offset of the current layer's activations (n_in × m, feature-major)
    nxt = maxw * m
    n0 = ints[0]
    for b in range(m):
        row = X[idx[b]]
        for i in range(n0):
            work[cur + i * m + b] = row[i]
    w0 = 0
    for l in range(1, n_layers + 1):
        n_in = ints[l - 1]
        n_out = ints[l]
        last = l == n_layers
        for o in range(n_out):
            bias = theta[w0 + n_out * n_in + o]
            r = w0 + o * n_in
            for b in range(m):
                acc = bias
                for i in range(n_in):
                    acc += theta[r + i] * work[cur + i * m + b]
                work[nxt + o * m + b] = acc if last else _phi(code, acc)
        w0 += n_out * (n_in + 1)
        cur, nxt = nxt, cur
    val = 0.0
    for b in range(m):
        val += glm_rho(lik, work[cur + b], y[idx[b]], floats)
    return val / m


@njit
def mlp_value_grad(theta, X, y, idx, nb, ints, floats, mat, st, work, grad, want):  # type: ignore[no-untyped-def]
    """:func:`~sgtune.sampler.mlp.mlp_grad`, plus the minibatch mean loss (:func:`mlp_loss`, a second
    forward pass) when ``want``."""
    mlp_grad(theta, X, y, idx, nb, ints, floats, mat, st, work, grad)
    if want:
        return mlp_loss(theta, X, y, idx, nb, ints, floats, work)
    return 0.0


@component_inline
def mlp_oracle_value_grad(theta, ora, idx, nb, st, work, grad, want):  # type: ignore[no-untyped-def]
    """The engine's value-and-gradient oracle of the ``"mlp"`` spec: :func:`mlp_value_grad` on the record ``ora``."""
    return mlp_value_grad(theta, ora.X, ora.y, idx, nb, ora.ints, ora.floats, ora.noise_factor, st, work, grad, want)
