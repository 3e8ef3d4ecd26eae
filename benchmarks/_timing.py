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
