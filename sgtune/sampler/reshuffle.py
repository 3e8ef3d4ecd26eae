"""Raw chains of the 1-D Gaussian model problem of Shaw & Whalley (2025) (RR vs RM batching), in numba.

One step on batch b (Shaw & Whalley 2025, §4; rescaled step h = ηN/σ²):

    θ' = θ − h(θ − x̄_b) + sqrt(2hσ²/N) ξ,    ξ ~ N(0, 1).

Schemes (integer codes in :data:`SCHEME_CODES`):

- ``ula``: full gradient, x̄_b = x̄;
- ``rm``: a fresh batch of B distinct indices every step (partial Fisher–Yates);
- ``rm_with_replacement``: B indices drawn independently and uniformly;
- ``rr``: at the start of every epoch a fresh uniformly random permutation
  (full Fisher–Yates), then the R = N/B consecutive blocks in order.

Every chain owns an independent stream of the package's one generator,
:mod:`sgtune.sampler.rng` (xoshiro256++ seeded from
``numpy.random.SeedSequence(seed).spawn(n_chains)``; 53-bit uniforms, ziggurat
normals, exactly uniform indices by Lemire's method), so results do not depend
on the number of threads; the Python twin replays the same stream with
:class:`~sgtune.sampler.rng.Xoshiro256PP`.

The kernels store no traces: after ``burn_in_epochs`` they accumulate, per
chain and per epoch position k = 0..R−1 (k steps of the epoch already taken),
the time averages of d = θ − x̄ and d².  Because chains are independent, the
across-chain spread of these per-chain averages gives an honest Monte Carlo
standard error whatever the autocorrelation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._validation import as_vector, check_int, check_positive
from ..core.errors import SgtuneError, UnstableStepSizeError
from ._jit import njit, njit_parallel, prange
from .rng import Xoshiro256PP, chain_states, normal, randbelow

__all__ = ["SCHEME_CODES", "ReshuffleChains", "run_reshuffle_chains", "run_reshuffle_chains_python"]

SCHEME_CODES: dict[str, int] = {"ula": 0, "rm": 1, "rm_with_replacement": 2, "rr": 3}


# ----------------------------------------------------------------------------- numba kernels
@njit
def _one_chain(x: np.ndarray, xbar: float, batch_size: int, h: float, noise_sd: float, scheme: int,
               n_epochs: int, burn_in_epochs: int, s: np.ndarray, perm: np.ndarray,
               m1: np.ndarray, m2: np.ndarray) -> None:  # pragma: no cover - compiled
    n = x.shape[0]
    R = n // batch_size
    for i in range(n):
        perm[i] = i
    for k in range(R):
        m1[k] = 0.0
        m2[k] = 0.0
    theta = xbar
    for epoch in range(burn_in_epochs + n_epochs):
        if scheme == 3:  # RR: fresh permutation per epoch (Fisher–Yates)
            for i in range(n - 1, 0, -1):
                j = randbelow(s, i + 1)
                tmp = perm[i]
                perm[i] = perm[j]
                perm[j] = tmp
        for k in range(R):
            if epoch >= burn_in_epochs:
                d = theta - xbar
                m1[k] += d
                m2[k] += d * d
            if scheme == 0:
                xb = xbar
            elif scheme == 1:  # RM without replacement: partial Fisher–Yates, B distinct indices
                acc = 0.0
                for i in range(batch_size):
                    j = i + randbelow(s, n - i)
                    tmp = perm[i]
                    perm[i] = perm[j]
                    perm[j] = tmp
                    acc += x[perm[i]]
                xb = acc / batch_size
            elif scheme == 2:  # RM with replacement
                acc = 0.0
                for i in range(batch_size):
                    acc += x[randbelow(s, n)]
                xb = acc / batch_size
            else:  # RR: block k of this epoch's permutation
                acc = 0.0
                for i in range(k * batch_size, (k + 1) * batch_size):
                    acc += x[perm[i]]
                xb = acc / batch_size
            theta = theta - h * (theta - xb) + noise_sd * normal(s)
    for k in range(R):
        m1[k] /= n_epochs
        m2[k] /= n_epochs


@njit_parallel
def _run_chains(x: np.ndarray, xbar: float, batch_size: int, h: float, noise_sd: float, scheme: int,
                n_epochs: int, burn_in_epochs: int, states: np.ndarray, perms: np.ndarray,
                m1: np.ndarray, m2: np.ndarray) -> None:  # pragma: no cover - compiled
    for c in prange(states.shape[0]):
        _one_chain(x, xbar, batch_size, h, noise_sd, scheme, n_epochs, burn_in_epochs,
                   states[c], perms[c], m1[c], m2[c])


# ----------------------------------------------------------------------------- pure-Python twin
def _py_one_chain(x: np.ndarray, xbar: float, batch_size: int, h: float, noise_sd: float, scheme: int,
                  n_epochs: int, burn_in_epochs: int, s: Xoshiro256PP) -> tuple[np.ndarray, np.ndarray]:
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


# ----------------------------------------------------------------------------- public API
@dataclass(frozen=True)
class ReshuffleChains:
    """Per-chain, per-epoch-position time averages of d = θ − x̄ and d² (shape (chains, R)).

    ``var`` / ``var_se`` and ``mean`` / ``mean_se`` pool the chains (standard
    errors from the across-chain spread); ``average_var`` / ``average_var_se``
    pool the positions too.

    Attributes
    ----------
    scheme : str
        The batching scheme.
    seed : int
        The root seed.
    n_epochs, burn_in_epochs : int
        The kept and the discarded epochs.
    first_moment, second_moment : (C, R) ndarray
        Each chain's time averages of d and d² per epoch position.

    Examples
    --------
    >>> r = run_reshuffle_chains(np.arange(8.0), 2, 0.1, n_chains=4, n_epochs=50, burn_in_epochs=5, seed=1)
    >>> r.first_moment.shape, r.var.shape
    ((4, 4), (4,))
    """

    scheme: str
    seed: int
    n_epochs: int
    burn_in_epochs: int
    first_moment: np.ndarray
    second_moment: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        return self.first_moment.mean(axis=0)

    @property
    def mean_se(self) -> np.ndarray:
        c = self.first_moment.shape[0]
        return self.first_moment.std(axis=0, ddof=1) / math.sqrt(c)

    @property
    def var(self) -> np.ndarray:
        """E[(θ − x̄)²] per position (the exact mean is x̄, so this is the variance)."""
        return self.second_moment.mean(axis=0)

    @property
    def var_se(self) -> np.ndarray:
        c = self.second_moment.shape[0]
        return self.second_moment.std(axis=0, ddof=1) / math.sqrt(c)

    @property
    def average_var(self) -> float:
        return float(self.second_moment.mean())

    @property
    def average_var_se(self) -> float:
        per_chain = self.second_moment.mean(axis=1)
        return float(per_chain.std(ddof=1) / math.sqrt(per_chain.shape[0]))


def seed_states(seed: int, n_chains: int) -> np.ndarray:
    """(n_chains, 4) uint64 generator states: :func:`sgtune.sampler.rng.chain_states`."""
    return chain_states(int(seed), n_chains)


def _validate(data: Any, batch_size: Any, step: Any, sigma2: Any, scheme: str, n_chains: Any,
              n_epochs: Any, burn_in_epochs: Any) -> tuple[np.ndarray, int, float, float, int, int, int, int]:
    x = as_vector(data, "data")
    n = x.shape[0]
    if n < 2:
        raise SgtuneError(f"data must hold at least N = 2 observations, got N = {n}")
    if n >= 2**32:
        raise SgtuneError(f"the chains support N < 2^32 observations, got N = {n}; subsample the data")
    b = check_int(batch_size, "batch_size", low=1, high=n)
    if n % b:
        raise SgtuneError(f"batch_size = {b} does not divide N = {n}; use a divisor of N")
    h = check_positive(step, "step")
    if not h < 2.0:
        raise UnstableStepSizeError(f"step = {h} is unstable: the chains need 0 < h < 2; use h < 2",
                                    spectral_radius=abs(1 - h), max_stable_step=2.0)
    sig2 = float(np.var(x, ddof=1)) if sigma2 is None else check_positive(sigma2, "sigma2")
    if not sig2 > 0:
        raise SgtuneError("data are all equal so the default sigma2 is 0; pass sigma2 > 0")
    if scheme not in SCHEME_CODES:
        raise SgtuneError(f"scheme = {scheme!r} is unknown; choose one of {', '.join(SCHEME_CODES)}")
    c = check_int(n_chains, "n_chains", low=2)
    e = check_int(n_epochs, "n_epochs", low=1)
    bi = check_int(burn_in_epochs, "burn_in_epochs", low=0)
    return x, b, h, sig2, SCHEME_CODES[scheme], c, e, bi


def run_reshuffle_chains(data: Any, batch_size: Any, step: Any, *, scheme: str = "rr",
                         sigma2: Any | None = None, n_chains: int = 256, n_epochs: int = 1000,
                         burn_in_epochs: int = 100, seed: int = 0) -> ReshuffleChains:
    """Run independent model-problem chains θ' = θ − h(θ − x̄_b) + sqrt(2hσ²/N)ξ (Shaw & Whalley 2025, §4, eq. 8).

    Parameters
    ----------
    data : array_like, shape (N,)
        The data x_1..x_N.
    batch_size : int
        The batch size B, dividing N.
    step : float
        Rescaled step h, 0 < h < 2.
    scheme : {"ula", "rm", "rm_with_replacement", "rr"}
        Batching policy.
    sigma2 : float, optional
        The model's variance σ² (default the unbiased sample variance).
    n_chains, n_epochs, burn_in_epochs : int
        Chains (started at x̄), kept epochs, discarded epochs (R steps each).
    seed : int
        Root seed; chain c uses ``SeedSequence(seed).spawn(n_chains)[c]``.

    Returns
    -------
    ReshuffleChains
        Per-chain moments per epoch position.

    Raises
    ------
    SgtuneError
        If B does not divide N, the scheme is unknown, or a count is out of range.
    UnstableStepSizeError
        If h ∉ (0, 2).

    Examples
    --------
    >>> from sgtune.theory.reshuffle import reshuffle_bias
    >>> r = run_reshuffle_chains(np.arange(8.0), 2, 0.5, n_chains=64, n_epochs=200, seed=1)
    >>> exact = reshuffle_bias(np.arange(8.0), 2, 0.5).rr_average_var
    >>> bool(abs(r.average_var - exact) < 4 * r.average_var_se)
    True
    """
    x, b, h, sig2, code, c, e, bi = _validate(data, batch_size, step, sigma2, scheme, n_chains,
                                              n_epochs, burn_in_epochs)
    n = x.shape[0]
    R = n // b
    states = seed_states(int(seed), c)
    perms = np.empty((c, n), dtype=np.int64)
    m1 = np.empty((c, R))
    m2 = np.empty((c, R))
    _run_chains(x, float(x.mean()), b, h, math.sqrt(2.0 * h * sig2 / n), code, e, bi, states, perms, m1, m2)
    return ReshuffleChains(scheme=scheme, seed=int(seed), n_epochs=e, burn_in_epochs=bi,
                           first_moment=m1, second_moment=m2)


def run_reshuffle_chains_python(data: Any, batch_size: Any, step: Any, *, scheme: str = "rr",
                                sigma2: Any | None = None, n_chains: int = 4, n_epochs: int = 10,
                                burn_in_epochs: int = 2, seed: int = 0) -> ReshuffleChains:
    """Pure-Python twin of :func:`run_reshuffle_chains` (same streams, same arithmetic; for tests).

    Parameters
    ----------
    data : array_like, shape (N,)
        The data x_1..x_N.
    batch_size : int
        The batch size B, dividing N.
    step : float
        Rescaled step h, 0 < h < 2.
    scheme : {"ula", "rm", "rm_with_replacement", "rr"}
        Batching policy.
    sigma2 : float, optional
        The model's variance σ² (default the unbiased sample variance).
    n_chains, n_epochs, burn_in_epochs : int
        Chains, kept epochs, discarded epochs (defaults small: it is slow).
    seed : int
        Root seed, as in :func:`run_reshuffle_chains`.

    Returns
    -------
    ReshuffleChains
        The moments :func:`run_reshuffle_chains` gives for the same arguments.

    Raises
    ------
    SgtuneError
        As :func:`run_reshuffle_chains`.
    UnstableStepSizeError
        If h ∉ (0, 2).

    Examples
    --------
    >>> kw = dict(n_chains=4, n_epochs=50, burn_in_epochs=5, seed=1)
    >>> py = run_reshuffle_chains_python(np.arange(8.0), 2, 0.1, **kw)
    >>> bool(np.allclose(py.second_moment, run_reshuffle_chains(np.arange(8.0), 2, 0.1, **kw).second_moment))
    True
    """
    x, b, h, sig2, code, c, e, bi = _validate(data, batch_size, step, sigma2, scheme, n_chains,
                                              n_epochs, burn_in_epochs)
    n = x.shape[0]
    states = seed_states(int(seed), c)
    xbar = float(x.mean())
    noise_sd = math.sqrt(2.0 * h * sig2 / n)
    m1, m2 = [], []
    for ci in range(c):
        a1, a2 = _py_one_chain(x, xbar, b, h, noise_sd, code, e, bi, Xoshiro256PP(states[ci]))
        m1.append(a1)
        m2.append(a2)
    return ReshuffleChains(scheme=scheme, seed=int(seed), n_epochs=e, burn_in_epochs=bi,
                           first_moment=np.array(m1), second_moment=np.array(m2))
