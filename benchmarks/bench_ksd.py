"""Kernel Stein discrepancy (IMQ, V-statistic): sgtune's blocked sum vs the obvious dense implementations.

Compares, in the same run and on the same draws (D = 20, standard normal target):

- ``pairwise loop``: a Python double loop over pairs with the closed-form Stein kernel (small n only);
- ``dense broadcast``: the whole (n, n, D) difference tensor at once (``imq_stein_kernel``), O(n²D) memory;
- ``sgtune blocked``: ``sgtune.diagnostics.ksd.ksd`` — BLAS Gram products in block × block tiles, symmetric half only,
  O(block²) memory.

All three must agree to 1e-12 (checked here). Prints seconds and the speed-up over the dense baseline.

    python benchmarks/bench_ksd.py            # n up to 20 000
    python benchmarks/bench_ksd.py --quick    # n up to 2 000
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from sgtune.diagnostics.ksd import imq_stein_kernel, ksd

D = 20


def pairwise_loop(x: np.ndarray, s: np.ndarray) -> float:
    n, d = x.shape
    acc = 0.0
    for i in range(n):
        for j in range(n):
            r = x[i] - x[j]
            r2 = float(r @ r)
            u = 1.0 + r2
            acc += (s[i] @ s[j]) * u ** -0.5 + ((s[i] - s[j]) @ r + d) * u ** -1.5 - 3.0 * r2 * u ** -2.5
    return acc / (n * n)


def best_of(fn, repeat: int) -> tuple[float, float]:
    times, value = [], 0.0
    for _ in range(repeat):
        tic = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - tic)
    return min(times), value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = (200, 1000, 2000) if args.quick else (200, 1000, 2000, 5000, 20000)
    rng = np.random.default_rng(0)
    print(f"| n | pairwise loop | dense broadcast (baseline) | sgtune blocked | speed-up vs dense | max rel. diff |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        x = rng.standard_normal((n, D))
        s = -x
        t_blk, v_blk = best_of(lambda: ksd(x, s).ksd_squared, 5 if n <= 5000 else 1)
        gb = 2 * n * n * D * 8 / 1e9  # the two (n, n, D) temporaries
        if n <= 2000:
            t_dense, v_dense = best_of(lambda: float(imq_stein_kernel(x, x, s, s).mean()), 5)
            dense = f"{t_dense:.3g} s ({gb:.2g} GB)"
            speed = f"{t_dense / t_blk:.1f}×"
        else:
            v_dense, dense, speed = v_blk, f"skipped (needs {gb:.3g} GB)", "—"
        if n <= 200:
            t_loop, v_loop = best_of(lambda: pairwise_loop(x, s), 1)
            loop = f"{t_loop:.3g} s"
        else:
            v_loop, loop = v_blk, "skipped"
        diff = max(abs(v_dense / v_blk - 1), abs(v_loop / v_blk - 1))
        assert diff < 1e-12, diff
        print(f"| {n} | {loop} | {dense} | {t_blk:.3g} s | {speed} | {diff:.1e} |")


if __name__ == "__main__":
    main()
