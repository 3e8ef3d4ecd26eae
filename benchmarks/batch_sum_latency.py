"""Why the model problem's step lost time without losing instructions: the batch sum after the draws, not in them.

Two loops that do the same work per step as Shaw & Whalley's RM chain (N = 1200, B = 30, D = 1, one chain; the
engine's own partial Fisher–Yates draw, ``kernels._partial_shuffle``, and one ziggurat normal through
``rng.fill_normals``): ``fused`` has it add each drawn x to the batch sum inside its loop (the hand-written loop of
be8861c, and the engine since ``Schedule.row_sums``); ``split`` has it only write the indices and sums them in a
second loop (the engine's batch schedule, then its gradient oracle, before). Same draws,
same sums, same results (checked). The sum is a chain of B dependent additions (≈ 3–4 cycles each): in the
drawing loop it hides behind the draws, after it the whole chain is exposed on every step, since the reorder
buffer cannot reach far enough ahead. CPU ns per step, best of 7 runs of 200 000 steps; a benchmark, not a test.

    python benchmarks/batch_sum_latency.py
"""
from __future__ import annotations

import time

import numpy as np

from sgtune.sampler._jit import njit
from sgtune.sampler.kernels import _partial_shuffle
from sgtune.sampler.rng import chain_states, fill_normals


@njit
def fused(st, perm, x, batch, steps, th):  # type: ignore[no-untyped-def]
    n = perm.shape[0]
    xi = np.empty(1)
    idx = np.empty(batch, dtype=np.int64)
    for _ in range(steps):
        acc = _partial_shuffle(st, perm, n, batch, idx, x)  # the engine's: the sum in the drawing loop
        fill_normals(st, xi)
        th = th - 0.5 * (th - acc / batch) + 0.01 * xi[0]
    return th


@njit
def split(st, perm, x, batch, steps, th):  # type: ignore[no-untyped-def]
    n = perm.shape[0]
    xi = np.empty(1)
    idx = np.empty(batch, dtype=np.int64)
    no_rows = np.empty(0)
    for _ in range(steps):
        _partial_shuffle(st, perm, n, batch, idx, no_rows)  # the same draws, no sum ...
        acc = 0.0
        for k in range(batch):  # ... then the sum in a second loop
            acc += x[np.uint64(idx[k])]
        fill_normals(st, xi)
        th = th - 0.5 * (th - acc / batch) + 0.01 * xi[0]
    return th


def main() -> None:
    x = np.random.default_rng(3).standard_normal(1200)
    steps = 200_000
    results = {}
    for f in (fused, split):
        st = chain_states(1, 1)[0].copy()
        perm = np.arange(x.size, dtype=np.int64)
        f(st, perm, x, 30, 10, 0.0)  # compile
        best = np.inf
        for _ in range(7):
            st = chain_states(1, 1)[0].copy()
            perm = np.arange(x.size, dtype=np.int64)
            tic = time.process_time()
            th = f(st, perm, x, 30, steps, 0.0)
            best = min(best, time.process_time() - tic)
        results[f.__name__] = (1e9 * best / steps, th)
    assert results["fused"][1] == results["split"][1], "the two loops must give the same chain"
    print("| loop | CPU ns per step |")
    print("|---|---:|")
    for name, (ns, _) in results.items():
        print(f"| {name} | {ns:.1f} |")
    print(f"split / fused: {results['split'][0] / results['fused'][0]:.2f}")


if __name__ == "__main__":
    main()
