"""Per-chain reproducible random streams for the numba kernels: xoshiro256++.

The stream of chain ``c`` for seed ``s`` is fully specified as follows.

1. State: ``np.random.SeedSequence(s).spawn(C)[c].generate_state(4, np.uint64)`` — four
   64-bit words (:func:`chain_states`). Spawned children are statistically independent
   and the stream of chain ``c`` does not depend on the number of chains C beyond c.
2. Generator: xoshiro256++ (Blackman & Vigna 2019), 64-bit output
   ``rotl(s0 + s3, 23) + s0``, period 2²⁵⁶ − 1.
3. Uniform double in [0, 1): ``(x >> 11) · 2⁻⁵³``.
4. Integer in [0, n), n < 2³²: Lemire's multiply-shift on the top 32 bits with
   rejection (exactly uniform; one draw almost always).
5. Standard normals: Marsaglia's polar method; a pair (u, v) uniform in (−1, 1)² is
   accepted when 0 < s = u² + v² < 1 and gives u·f, v·f with f = sqrt(−2 log s / s).
   :func:`fill_normals` fills a vector pairwise (an odd last draw is discarded), so the
   stream consumed per vector depends only on its length.

Why not ``np.random.Generator`` inside the kernel: one generator object cannot feed chains
that run in parallel threads reproducibly, and numba's default generator costs 3–4 µs
per SGLD step (32 indices + 50 normals) on the benchmark problem; this one costs ≈1 µs.
The pure-Python twin :class:`Xoshiro256PP` produces the identical stream.
"""
from __future__ import annotations

import math

import numpy as np

from ._jit import njit

__all__ = ["chain_states", "next_u64", "uniform", "randbelow", "normal_pair", "fill_normals",
           "stable_symmetric", "Xoshiro256PP"]

_M64 = (1 << 64) - 1


def chain_states(seed: int | np.random.SeedSequence, n_chains: int) -> np.ndarray:
    """(C, 4) uint64 xoshiro256++ states from ``SeedSequence(seed).spawn(C)`` (see module doc)."""
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    out = np.empty((n_chains, 4), dtype=np.uint64)
    for c, child in enumerate(ss.spawn(n_chains)):
        st = child.generate_state(4, np.uint64)
        if not st.any():  # pragma: no cover (probability 2^-256)
            st[0] = np.uint64(1)
        out[c] = st
    return out


@njit
def _rotl(x, k):  # type: ignore[no-untyped-def]
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit
def next_u64(st):  # type: ignore[no-untyped-def]
    """Next 64-bit output of xoshiro256++; ``st`` is a length-4 uint64 array, updated in place."""
    s0 = st[0]
    s1 = st[1]
    s2 = st[2]
    s3 = st[3]
    result = _rotl(s0 + s3, 23) + s0
    t = s1 << np.uint64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, 45)
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3
    return result


@njit
def uniform(st):  # type: ignore[no-untyped-def]
    """Uniform double in [0, 1) with 53 random bits."""
    return float(next_u64(st) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit
def randbelow(st, n):  # type: ignore[no-untyped-def]
    """Uniform integer in [0, n) for 1 <= n < 2**32 (Lemire 2019, with rejection)."""
    nn = np.uint64(n)
    mask = np.uint64(0xFFFFFFFF)
    m = (next_u64(st) >> np.uint64(32)) * nn
    low = m & mask
    if low < nn:
        thresh = ((mask - nn) + np.uint64(1)) % nn  # 2^32 mod n
        while low < thresh:
            m = (next_u64(st) >> np.uint64(32)) * nn
            low = m & mask
    return np.int64(m >> np.uint64(32))


@njit
def normal_pair(st):  # type: ignore[no-untyped-def]
    """Two independent N(0, 1) draws (Marsaglia polar method)."""
    while True:
        u = 2.0 * uniform(st) - 1.0
        v = 2.0 * uniform(st) - 1.0
        s = u * u + v * v
        if s < 1.0 and s > 0.0:
            f = math.sqrt(-2.0 * math.log(s) / s)
            return u * f, v * f


@njit
def fill_normals(st, out):  # type: ignore[no-untyped-def]
    """Fill ``out`` with N(0, 1) draws, two per polar pair (an odd last draw is discarded)."""
    n = out.shape[0]
    i = 0
    while i < n:
        a, b = normal_pair(st)
        out[i] = a
        if i + 1 < n:
            out[i + 1] = b
        i += 2


@njit
def stable_symmetric(st, alpha):  # type: ignore[no-untyped-def]
    """Standard symmetric α-stable draw (characteristic function e^{−|t|^α}), Chambers–Mallows–Stuck.

    V ~ U(−π/2, π/2), W ~ Exp(1):  X = sin(αV)/cos(V)^{1/α} · (cos((1−α)V)/W)^{(1−α)/α};
    α = 2 gives N(0, 2), α = 1 the standard Cauchy.
    """
    v = math.pi * (uniform(st) - 0.5)
    w = -math.log(1.0 - uniform(st))
    if alpha == 1.0:
        return math.tan(v)
    return (math.sin(alpha * v) / math.cos(v) ** (1.0 / alpha)
            * (math.cos((1.0 - alpha) * v) / w) ** ((1.0 - alpha) / alpha))


class Xoshiro256PP:
    """Pure-Python twin of the stream above (slow; for tests)."""

    def __init__(self, state: np.ndarray) -> None:
        self.s = [int(x) for x in np.asarray(state, dtype=np.uint64)]

    def next_u64(self) -> int:
        s = self.s
        rot = lambda x, k: ((x << k) | (x >> (64 - k))) & _M64  # noqa: E731
        result = (rot((s[0] + s[3]) & _M64, 23) + s[0]) & _M64
        t = (s[1] << 17) & _M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rot(s[3], 45)
        return result

    def state(self) -> np.ndarray:
        return np.array(self.s, dtype=np.uint64)

    def uniform(self) -> float:
        return (self.next_u64() >> 11) * (1.0 / 9007199254740992.0)

    def randbelow(self, n: int) -> int:
        m = (self.next_u64() >> 32) * n
        low = m & 0xFFFFFFFF
        if low < n:
            thresh = (1 << 32) % n
            while low < thresh:
                m = (self.next_u64() >> 32) * n
                low = m & 0xFFFFFFFF
        return m >> 32

    def normal_pair(self) -> tuple[float, float]:
        while True:
            u = 2.0 * self.uniform() - 1.0
            v = 2.0 * self.uniform() - 1.0
            s = u * u + v * v
            if 0.0 < s < 1.0:
                f = math.sqrt(-2.0 * math.log(s) / s)
                return u * f, v * f

    def normals(self, n: int) -> np.ndarray:
        out = np.empty(n)
        for i in range(0, n, 2):
            a, b = self.normal_pair()
            out[i] = a
            if i + 1 < n:
                out[i + 1] = b
        return out

    def stable_symmetric(self, alpha: float) -> float:
        v = math.pi * (self.uniform() - 0.5)
        w = -math.log(1.0 - self.uniform())
        if alpha == 1.0:
            return math.tan(v)
        return (math.sin(alpha * v) / math.cos(v) ** (1.0 / alpha)
                * (math.cos((1.0 - alpha) * v) / w) ** ((1.0 - alpha) / alpha))


@njit
def stream_cost(st, n_iter, n_indices, n_normals, n_data):  # type: ignore[no-untyped-def]
    """Draw ``n_indices`` integers below ``n_data`` and ``n_normals`` normals per iteration (benchmark helper).

    Returns a checksum so the work cannot be optimised away.
    """
    buf = np.empty(n_normals)
    acc = 0.0
    for _ in range(n_iter):
        for _k in range(n_indices):
            acc += randbelow(st, n_data)
        fill_normals(st, buf)
        acc += buf[0]
    return acc
