"""Timing helper shared by the benchmark scripts (run as ``python benchmarks/NAME.py``)."""
from __future__ import annotations

import math
import time
from typing import Any, Callable


def timed(fn: Callable[[], Any], repeat: int = 3, clock: Callable[[], float] = time.perf_counter) -> tuple[float, Any]:
    """(best seconds over ``repeat`` calls by ``clock`` — wall by default, ``time.process_time`` for CPU —,
    the last result)."""
    best, out = math.inf, None
    for _ in range(repeat):
        t = clock()
        out = fn()
        best = min(best, clock() - t)
    return best, out


def best_wall_cpu(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds — ``time.process_time``, all threads) over ``repeats`` calls.

    Both minima are taken separately: on a loaded machine the fastest wall run need not be the one
    that used the least CPU.
    """
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def timing_spec_kw(n_steps: int, n_chains: int, burn_in: int) -> dict[str, int]:
    """``burn_in`` and ``batches_per_chain`` of a timing run that ``RunSpec`` accepts: one batch mean per chain
    (the moments are not what is timed), but 2 batch means and so at least 2 kept steps with one chain
    (``RunSpec`` refuses a single batch mean in all: its standard errors would be NaN)."""
    if n_chains >= 2:
        return {"burn_in": burn_in, "batches_per_chain": 1}
    return {"burn_in": max(0, min(burn_in, n_steps - 2)), "batches_per_chain": 2}
