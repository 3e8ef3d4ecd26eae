"""The one place that sets numba options for sgtune's kernels (STYLE.md §5, convention 10).

``njit`` compiles a helper or a single-threaded kernel, ``njit_parallel`` a kernel that
loops over chains with :data:`prange`. Options:

- ``cache=True``: compiled code is cached on disk (set ``NUMBA_CACHE_DIR`` in CI), so the
  JIT cost (a few seconds per kernel) is paid once per machine, not once per process;
- ``nogil=True``: kernels release the GIL;
- ``fastmath=False``: IEEE semantics, so a kernel and its pure-Python twin agree to
  rounding (≈1e-14) on the same random stream;
- ``error_model="numpy"``: division by zero gives inf/nan instead of raising (and costs
  no branch per division); the kernels detect non-finite states themselves.

Only ``sgtune/sampler/`` imports numba.
"""
from __future__ import annotations

import numba

__all__ = ["njit", "njit_parallel", "prange", "NJIT_OPTIONS", "get_num_threads", "set_num_threads"]

NJIT_OPTIONS: dict[str, object] = {"cache": True, "nogil": True, "fastmath": False, "error_model": "numpy"}

njit = numba.njit(**NJIT_OPTIONS)
njit_parallel = numba.njit(parallel=True, **NJIT_OPTIONS)
prange = numba.prange
get_num_threads = numba.get_num_threads
set_num_threads = numba.set_num_threads
