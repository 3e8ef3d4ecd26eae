"""The engine's on-disk numba cache is not stale (what :mod:`sgtune.sampler._jit` asks a maintainer to watch).

numba keys a cached function on its own source file only; the engine's step loop inlines helpers from the other
sampler modules. After editing one of them, the cached loop would keep the old machine code: this test fails
then, and says what to do.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler import engine, run_quadratic_chains


#: the sampler's pure-NumPy modules (the reference backend): nothing compiled reads them, so editing them cannot
#: leave stale machine code in the cache
NUMPY_ONLY = frozenset({"reference.py", "_smile_reference.py"})


def test_the_numpy_only_modules_hold_no_compiled_code():
    here = Path(engine.__file__).parent
    for name in NUMPY_ONLY:
        text = (here / name).read_text()
        assert "@njit" not in text and "@overload" not in text and "import numba" not in text, name


def test_cached_engine_is_newer_than_every_sampler_source():
    run_quadratic_chains(np.eye(2), Dynamics(0.1, 1), RunSpec(5, n_chains=1))  # compiled, or loaded from the cache
    cache = engine._chains._cache
    index = Path(cache._cache_path) / cache._cache_file._index_name
    assert index.exists(), "the engine's kernel is cached on disk (sgtune.sampler._jit)"
    sources = sorted((p for p in Path(engine.__file__).parent.glob("*.py") if p.name not in NUMPY_ONLY), key=lambda p: p.stat().st_mtime_ns)
    newest = sources[-1]
    assert index.stat().st_mtime_ns >= newest.stat().st_mtime_ns, (
        f"{newest.name} changed after the engine's kernels were cached in {index.parent}: numba keys them on "
        "engine.py only, so they may hold stale machine code; delete the numba cache (rm -r \"$NUMBA_CACHE_DIR\", "
        "or sgtune/sampler/__pycache__/*.nb[ic]) and run again")
