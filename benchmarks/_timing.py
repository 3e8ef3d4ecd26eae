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


def machine() -> dict[str, Any]:
    """The machine and software a benchmark runs on: CPU model, logical cores, OS, Python, NumPy, SciPy and numba
    versions (what a reader needs to compare a table with their own numbers; a date or a commit says none of it)."""
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:  # not Linux: platform's name
        pass
    versions = {}
    for name in ("numpy", "scipy", "numba"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = "not installed"
    return {"cpu": cpu, "cores": os.cpu_count(), "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), **versions}


def machine_line(m: dict[str, Any]) -> str:
    """One line naming the machine of :func:`machine`."""
    return (f"{m['cpu']}, {m['cores']} logical cores; {m['os']}; Python {m['python']}, NumPy {m['numpy']}, "
            f"SciPy {m['scipy']}, numba {m['numba']}")


def timing_spec_kw(n_steps: int, n_chains: int, burn_in: int) -> dict[str, int]:
    """``burn_in`` and ``batches_per_chain`` of a timing run that ``RunSpec`` accepts: one batch mean per chain
    (the moments are not what is timed), but 2 batch means and so at least 2 kept steps with one chain
    (``RunSpec`` refuses a single batch mean in all: its standard errors would be NaN)."""
    if n_chains >= 2:
        return {"burn_in": burn_in, "batches_per_chain": 1}
    return {"burn_in": max(0, min(burn_in, n_steps - 2)), "batches_per_chain": 2}
