"""The compiled gradient oracle of multinomial logistic regression (softmax), a component of the engine.

Mirror of :class:`sgtune.models.multinomial.Multinomial` (tested against its NumPy gradient):
the data term of the stochastic gradient of the mean loss on the minibatch S = idx[:nb],

    G_data(θ) = (1/|S|) Σ_{n∈S} (π_n − e_{y_n}) ⊗ x_n,

over the r classes that own a block of θ (class-major: θ[a·p + i] is covariate i of block a). The
spec (:meth:`~sgtune.models.multinomial.Multinomial.numba_spec`) is ints = [K, r, p] (r = K − 1: the
baseline layout, whose first class has logit 0; r = K: the full layout) and floats = the K sorted
class labels (a row's class is the position of y_n among them). The work buffer holds the K logits
of one row (:func:`work_size`). Per row: r dot products, a stable softmax (the largest logit
subtracted), and grad += (π − e_y)_a x_n for every block a — a fixed summation order.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.errors import SgtuneError
from ._jit import component_inline, njit

__all__ = ["work_size", "n_params", "check_spec", "class_of", "softmax_value_gradient", "multinomial_grad",
           "multinomial_value_grad"]


def work_size(ints: np.ndarray, d: int, batch_size: int) -> int:
    """K: the logits of one row."""
    return int(ints[0])


def n_params(ints: np.ndarray, p: int) -> int:
    """D = r·p."""
    return int(ints[1]) * int(p)


def check_spec(ints: np.ndarray, floats: np.ndarray, label: str) -> None:
    """ints = [K, r, p] with K ≥ 2, r ∈ {K − 1, K}; floats = K increasing labels."""
    if ints.shape != (3,) or ints[0] < 2 or ints[1] not in (ints[0] - 1, ints[0]) or ints[2] < 1:
        raise SgtuneError(f"model {label}: a 'multinomial' numba spec needs ints = [K ≥ 2, r ∈ {{K−1, K}}, p ≥ 1], "
                          f"got {ints.tolist()}")
    if floats.shape != (int(ints[0]),) or np.any(np.diff(floats) <= 0):
        raise SgtuneError(f"model {label}: a 'multinomial' numba spec needs floats = the K = {int(ints[0])} sorted "
                          f"distinct class labels, got {floats.tolist()}")


@njit
def class_of(labels, yv):  # type: ignore[no-untyped-def]
    """The position of ``yv`` among the sorted ``labels`` (bisection; the response was checked before the run)."""
    lo = 0
    hi = labels.shape[0] - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if labels[mid] < yv:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit
def softmax_value_gradient(theta, X, y, idx, nb, ints, labels, f, grad, want):  # type: ignore[no-untyped-def]
    """grad ← (1/nb) Σ_k (π_{n_k} − e_{y_{n_k}}) ⊗ x_{n_k}, n_k = idx[k]; returns the mean loss
    (1/nb) Σ_k [logsumexp(f_{n_k}) − f_{n_k, y}] when ``want`` (else 0). ``f`` holds K numbers."""
    K = ints[0]
    r = ints[1]
    p = ints[2]
    k0 = K - r  # 1 in the baseline layout: class 0 has logit 0 and no block
    for j in range(grad.shape[0]):
        grad[j] = 0.0
    val = 0.0
    for k in range(nb):
        n = idx[k]
        if k0 == 1:
            f[0] = 0.0
        for a in range(r):
            s = 0.0
            for i in range(p):
                s += theta[a * p + i] * X[n, i]
            f[k0 + a] = s
        m = f[0]
        for c in range(1, K):
            if f[c] > m:
                m = f[c]
        yc = class_of(labels, y[n])
        fy = f[yc] - m
        tot = 0.0
        for c in range(K):
            f[c] = math.exp(f[c] - m)
            tot += f[c]
        if want:
            val += math.log(tot) - fy  # logsumexp(f) − f_y, both shifted by m
        inv = 1.0 / tot
        for a in range(r):
            w = f[k0 + a] * inv
            if k0 + a == yc:
                w -= 1.0
            for i in range(p):
                grad[a * p + i] += w * X[n, i]
    inv_nb = 1.0 / nb
    for j in range(grad.shape[0]):
        grad[j] *= inv_nb
    return val * inv_nb


@component_inline
def multinomial_grad(theta, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
    """Softmax data term (module docstring); ints = [K, r, p], floats = the labels, work ≥ K."""
    softmax_value_gradient(theta, ora.X, ora.y, idx, nb, ora.ints, ora.floats, work, grad, False)


@component_inline
def multinomial_value_grad(theta, ora, idx, nb, st, work, grad, want):  # type: ignore[no-untyped-def]
    """:func:`multinomial_grad` that also returns the minibatch mean loss when ``want``."""
    return softmax_value_gradient(theta, ora.X, ora.y, idx, nb, ora.ints, ora.floats, work, grad, want)
