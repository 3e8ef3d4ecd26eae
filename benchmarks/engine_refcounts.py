"""Reference-count operations in the compiled SG(L)D chain, for this checkout or another one.

Why: the engine runs the same instructions per step as the loop it replaced (valgrind's cachegrind, SG(L)D on
logistic regression, N = 10 000, D = 50, B = 32, one chain: 17 489 instructions per step before the redesign,
17 327 after — the difference of a 300 000- and a 100 000-step run), yet ``bench_engine_ab.py`` measures it
8–30 % slower per step. Instruction counts do not see the cost of numba's reference counting (``NRT_incref`` /
``NRT_decref``: an atomic read-modify-write each, tens of cycles), which grows with the arrays passed to a
component that is not inlined. This script counts the calls in the LLVM IR of the compiled chain function and
of its SG(L)D step component (static counts: the calls in the code, not per step).

    python benchmarks/engine_refcounts.py                  # this checkout
    PYTHONPATH=/path/to/other python benchmarks/engine_refcounts.py   # another checkout

It compiles afresh (numba's cached code cannot be inspected): a minute or two. A benchmark, not a test.
"""
from __future__ import annotations

import math
import os
import re
import tempfile

os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="sgtune-refcounts-")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from _timing import timing_spec_kw  # noqa: E402


def _run() -> None:
    import inspect

    from sgtune.sampler import run_chains

    rng = np.random.default_rng(0)
    N, D, B = 10_000, 50, 32
    X = rng.standard_normal((N, D)) / math.sqrt(D)
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ rng.standard_normal(D)))).astype(float)
    if "dynamics" in inspect.signature(run_chains).parameters:
        from sgtune.core.config import Dynamics, RunSpec
        run_chains("logistic", (X, y), Dynamics(0.5, B, inv_temperature=float(N)),
                   RunSpec(50, n_chains=1, **timing_spec_kw(50, 1, 49)), prior_precision=1.0,
                   initial=np.full(D, 0.01))
    else:  # the keyword form of 0.1
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_chains("logistic", (X, y), 0.5, batch_size=B, n_steps=50, n_chains=1, burn_in=49,
                       batches_per_chain=1, inv_temperature=float(N), prior_precision=1.0, initial=np.full(D, 0.01))


def _counts(dispatcher) -> tuple[int, int]:
    inc = dec = 0
    for ir in dispatcher.inspect_llvm().values():
        inc += len(re.findall(r"call void @NRT_incref", ir))
        dec += len(re.findall(r"call void @NRT_decref", ir))
    return inc, dec


def main() -> None:
    _run()
    import sgtune
    import sgtune.sampler.kernels as kernels
    try:
        from sgtune.sampler import engine
        chains = engine._chains
    except ImportError:
        chains = kernels.chains
    print(f"checkout: {os.path.dirname(os.path.dirname(sgtune.__file__))}")
    print(f"{'compiled function':32s} {'NRT_incref':>10s} {'NRT_decref':>10s}")
    rows = [("chains (the step loop)", chains)] + [(name, getattr(kernels, name, None))
                                                    for name in ("sgld_diag_rule", "sgld_diag_step")]
    for name, f in rows:
        if f is not None and f.signatures:
            inc, dec = _counts(f)
            print(f"{name:32s} {inc:>10d} {dec:>10d}")


if __name__ == "__main__":
    main()
