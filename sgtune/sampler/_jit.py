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

What LLVM vectorises under these options (checked with ``inspect_asm`` on numba 0.68):
elementwise loops (axpy, copies) go through the loop vectoriser; floating-point reductions
(dot products) do not, because that needs reassociation (fastmath), and numba leaves the SLP
vectoriser off by default (``NUMBA_SLP_VECTORIZE=0``, numba issue #8705), so the explicit
partial sums of :func:`~sgtune.sampler.grads.row_dot` buy instruction-level parallelism
but not SIMD. (Measured: a reassociating dot product would take the 32 row products of the
benchmark step from ≈0.63 µs to ≈0.23 µs; not used, to keep IEEE order and twin agreement.)

Cache caveat: numba's on-disk cache is keyed by the source file of the compiled function
only. A kernel that inlines helpers from another module (``kernels`` uses ``rng`` and
``grads``) is not recompiled when only the helper's file changes; after editing ``rng.py``
or ``grads.py`` delete ``sgtune/sampler/__pycache__/*.nb[ic]`` (or ``$NUMBA_CACHE_DIR``).

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
