"""Timing helper shared by the benchmark scripts (run as ``python benchmarks/NAME.py``)."""
from __future__ import annotations

import math
import time
from typing import Any, Callable


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    """(best wall seconds over ``repeat`` calls, the last result)."""
    best, out = math.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out
