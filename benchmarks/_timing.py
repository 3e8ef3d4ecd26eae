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
