"""Pure-Python reference of Shaw & Whalley's (2025) model-problem chains (sgtune.sampler.reshuffle).

Written independently of the engine: per chain, the stream of :class:`~sgtune.sampler.rng.Xoshiro256PP` drawn
in the order of the scheme (RR: a Fisher–Yates permutation at the start of every epoch; RM: a partial
Fisher–Yates shuffle of B indices per step; RM with replacement: B uniform indices per step; ULA: none), then
one normal per step; d = θ − x̄ and d² summed by epoch position *before* each step of the kept epochs, in
Python floats.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from sgtune.sampler.reshuffle import SCHEME_CODES, ReshuffleChains, seed_states
from sgtune.sampler.rng import Xoshiro256PP

__all__ = ["one_chain", "run_reshuffle_chains_python"]


def one_chain(x: np.ndarray, xbar: float, batch_size: int, h: float, noise_sd: float, scheme: int,
              n_epochs: int, burn_in_epochs: int, s: Xoshiro256PP) -> tuple[np.ndarray, np.ndarray]:
    """Per-position time averages of d and d² of one chain (scheme codes of ``SCHEME_CODES``)."""
    n = len(x)
    R = n // batch_size
    perm = list(range(n))
    m1 = [0.0] * R
    m2 = [0.0] * R
    theta = xbar
    for epoch in range(burn_in_epochs + n_epochs):
        if scheme == 3:
            for i in range(n - 1, 0, -1):
                j = s.randbelow(i + 1)
                perm[i], perm[j] = perm[j], perm[i]
        for k in range(R):
            if epoch >= burn_in_epochs:
                d = theta - xbar
                m1[k] += d
                m2[k] += d * d
            if scheme == 0:
                xb = xbar
            elif scheme == 1:
                acc = 0.0
                for i in range(batch_size):
                    j = i + s.randbelow(n - i)
                    perm[i], perm[j] = perm[j], perm[i]
                    acc += float(x[perm[i]])
                xb = acc / batch_size
            elif scheme == 2:
                acc = 0.0
                for i in range(batch_size):
                    acc += float(x[s.randbelow(n)])
                xb = acc / batch_size
            else:
                acc = 0.0
                for i in range(k * batch_size, (k + 1) * batch_size):
                    acc += float(x[perm[i]])
                xb = acc / batch_size
            theta = theta - h * (theta - xb) + noise_sd * s.normal()
    return np.array(m1) / n_epochs, np.array(m2) / n_epochs


def run_reshuffle_chains_python(data: Any, batch_size: int, step: float, *, scheme: str = "rr",
                                sigma2: float | None = None, n_chains: int = 4, n_epochs: int = 10,
                                burn_in_epochs: int = 2, seed: int = 0) -> ReshuffleChains:
    """The twin of :func:`sgtune.sampler.reshuffle.run_reshuffle_chains` (valid input only: no checks)."""
    x = np.asarray(data, dtype=np.float64).reshape(-1)
    n = x.shape[0]
    sig2 = float(np.var(x, ddof=1)) if sigma2 is None else float(sigma2)
    states = seed_states(int(seed), n_chains)
    xbar = float(x.mean())
    noise_sd = math.sqrt(2.0 * step * sig2 / n)
    m1, m2 = [], []
    for c in range(n_chains):
        a1, a2 = one_chain(x, xbar, batch_size, float(step), noise_sd, SCHEME_CODES[scheme], n_epochs,
                           burn_in_epochs, Xoshiro256PP(states[c]))
        m1.append(a1)
        m2.append(a2)
    return ReshuffleChains(scheme=scheme, seed=int(seed), n_epochs=n_epochs, burn_in_epochs=burn_in_epochs,
                           first_moment=np.array(m1), second_moment=np.array(m2))
