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
5. Standard normals: the ziggurat of Marsaglia & Tsang (2000) with 256 layers, tail start
   r = 3.6541528853610088 (tables :data:`ZIG_X`, built once at import from r alone). One
   64-bit draw u gives the layer i = u & 255, the sign (bit 8) and U = (u >> 11)·2⁻⁵³;
   x = U·x_i is returned at once when x < x_{i+1} (≈ 98.8 %); otherwise the base layer
   (i = 0) samples the tail |x| > r (Marsaglia 1964: a = −log(1−U₁)/r, b = −log(1−U₂),
   accept when 2b > a², x = r + a) and the other layers accept the wedge when
   f(x_i) + U₁(f(x_{i+1}) − f(x_i)) < f(x) = e^{−x²/2}, else start again with a new u.
   :func:`fill_normals` draws them one after the other, so the stream consumed per vector
   depends only on its length and on the draws.

Why not ``np.random.Generator`` inside the kernel: one generator object cannot feed chains
that run in parallel threads reproducibly, and numba's default generator costs 3–4 µs
per SGLD step (32 indices + 50 normals) on the benchmark problem; this one costs ≈0.2 µs.
The pure-Python twin :class:`Xoshiro256PP` produces the identical stream.
"""
from __future__ import annotations

import math

import numpy as np

from ._jit import njit

__all__ = ["chain_states", "next_u64", "uniform", "randbelow", "normal", "fill_normals", "fill_randbelow",
           "fill_uniforms", "stable_symmetric", "Xoshiro256PP", "ZIG_R", "ZIG_X", "ZIG_F"]

_M64 = (1 << 64) - 1
_TWO53 = 1.0 / 9007199254740992.0  # 2**-53


def _ziggurat_tables(r: float) -> tuple[np.ndarray, np.ndarray]:
    """Layer edges x_0..x_256 and f(x_i) = e^{−x_i²/2} of the 256-layer normal ziggurat.

    Every layer has area v = r f(r) + ∫_r^∞ f: x_0 = v / f(r) (the base layer's virtual width,
    covering the tail), x_1 = r, x_{i+1} = f⁻¹(v / x_i + f(x_i)), x_256 = 0 (the top layer's
    area x_255 (1 − f(x_255)) equals v to 1e-13 for this r).
    """
    f = lambda x: math.exp(-0.5 * x * x)  # noqa: E731
    v = r * f(r) + math.sqrt(math.pi / 2) * math.erfc(r / math.sqrt(2))
    xs = [v / f(r), r]
    for i in range(1, 255):
        xs.append(math.sqrt(-2.0 * math.log(v / xs[i] + f(xs[i]))))
    xs.append(0.0)
    x = np.array(xs)
    return x, np.exp(-0.5 * x * x)


ZIG_R = 3.6541528853610088
ZIG_X, ZIG_F = _ziggurat_tables(ZIG_R)


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
    result, st[0], st[1], st[2], st[3] = xoshiro_step(st[0], st[1], st[2], st[3])
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
def normal(st):  # type: ignore[no-untyped-def]
    """One N(0, 1) draw (256-layer ziggurat, module docstring item 5)."""
    while True:
        u = next_u64(st)
        i = np.int64(u & np.uint64(255))
        x = float(u >> np.uint64(11)) * _TWO53 * ZIG_X[i]
        neg = (u >> np.uint64(8)) & np.uint64(1)
        if x < ZIG_X[i + 1]:
            return -x if neg else x
        if i == 0:  # tail beyond r
            while True:
                a = -math.log(1.0 - uniform(st)) / ZIG_R
                b = -math.log(1.0 - uniform(st))
                if b + b > a * a:
                    x = ZIG_R + a
                    return -x if neg else x
        if ZIG_F[i] + uniform(st) * (ZIG_F[i + 1] - ZIG_F[i]) < math.exp(-0.5 * x * x):
            return -x if neg else x


@njit
def xoshiro_step(s0, s1, s2, s3):  # type: ignore[no-untyped-def]
    """xoshiro256++ on a state held in registers: (output, new state) — same as :func:`next_u64`."""
    result = _rotl(s0 + s3, 23) + s0
    t = s1 << np.uint64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, 45)
    return result, s0, s1, s2, s3


@njit
def fill_normals(st, out):  # type: ignore[no-untyped-def]
    """Fill ``out`` with N(0, 1) draws, one after the other (same stream as repeated :func:`normal`).

    The state is kept in local variables for the whole vector (the stores to ``out`` could
    alias ``st`` for the compiler, which would otherwise reload and store it at every draw).
    """
    s0 = st[0]
    s1 = st[1]
    s2 = st[2]
    s3 = st[3]
    for k in range(out.shape[0]):
        while True:
            u, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
            i = np.int64(u & np.uint64(255))
            x = float(u >> np.uint64(11)) * _TWO53 * ZIG_X[i]
            if x < ZIG_X[i + 1]:
                break
            if i == 0:  # tail beyond r
                while True:
                    ua, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
                    ub, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
                    a = -math.log(1.0 - float(ua >> np.uint64(11)) * _TWO53) / ZIG_R
                    b = -math.log(1.0 - float(ub >> np.uint64(11)) * _TWO53)
                    if b + b > a * a:
                        break
                x = ZIG_R + a
                break
            uw, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
            if ZIG_F[i] + float(uw >> np.uint64(11)) * _TWO53 * (ZIG_F[i + 1] - ZIG_F[i]) < math.exp(-0.5 * x * x):
                break
        out[k] = -x if (u >> np.uint64(8)) & np.uint64(1) else x
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3


@njit
def fill_uniforms(st, out):  # type: ignore[no-untyped-def]
    """Fill ``out`` with :func:`uniform` draws, one after the other, the state kept in local variables
    (the stores to ``out`` could alias ``st`` for the compiler, as in :func:`fill_normals`)."""
    s0 = st[0]
    s1 = st[1]
    s2 = st[2]
    s3 = st[3]
    for k in range(out.shape[0]):
        u, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
        out[k] = float(u >> np.uint64(11)) * _TWO53
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3


@njit
def fill_randbelow(st, n, out, count):  # type: ignore[no-untyped-def]
    """``out[:count]`` ← ``count`` draws of :func:`randbelow` (st, n), state kept in registers."""
    s0 = st[0]
    s1 = st[1]
    s2 = st[2]
    s3 = st[3]
    nn = np.uint64(n)
    mask = np.uint64(0xFFFFFFFF)
    thresh = ((mask - nn) + np.uint64(1)) % nn  # 2^32 mod n
    for k in range(count):
        u, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
        m = (u >> np.uint64(32)) * nn
        while (m & mask) < thresh:
            u, s0, s1, s2, s3 = xoshiro_step(s0, s1, s2, s3)
            m = (u >> np.uint64(32)) * nn
        out[k] = np.int64(m >> np.uint64(32))
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3


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

    def normal(self) -> float:
        while True:
            u = self.next_u64()
            i = u & 255
            x = float(u >> 11) * _TWO53 * float(ZIG_X[i])
            neg = (u >> 8) & 1
            if x < ZIG_X[i + 1]:
                return -x if neg else x
            if i == 0:
                while True:
                    a = -math.log(1.0 - self.uniform()) / ZIG_R
                    b = -math.log(1.0 - self.uniform())
                    if b + b > a * a:
                        x = ZIG_R + a
                        return -x if neg else x
            if float(ZIG_F[i]) + self.uniform() * (float(ZIG_F[i + 1]) - float(ZIG_F[i])) < math.exp(-0.5 * x * x):
                return -x if neg else x

    def normals(self, n: int) -> np.ndarray:
        return np.array([self.normal() for _ in range(n)], dtype=np.float64)

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
    idx = np.empty(n_indices, dtype=np.int64)
    for _ in range(n_iter):
        fill_randbelow(st, n_data, idx, n_indices)
        acc += idx[0]
        fill_normals(st, buf)
        acc += buf[0]
    return acc
