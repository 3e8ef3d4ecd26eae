"""Spike: components chosen by literal integer arguments cache on disk across processes, with plain numba.

A kernel ``loop(rule, kind_g, x, n)`` calls ``numba.literally`` on its component kinds, and ``call_rule`` is a
``numba.extending.overload`` (``inline="always"``) whose typing picks the component from the literal value:
no first-class function arguments (whose type pickles as a per-process dispatcher uuid), no generated
source, no private numba API. Run from a temporary module file in two fresh processes sharing one
``NUMBA_CACHE_DIR``: the first compiles each (rule, gradient) combination once, the second loads every one
from the cache (``loop.stats.cache_hits``, no new index entries). Prints one line per process::

    python benchmarks/numba_literal_cache.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

MODULE = textwrap.dedent('''
    import numba
    import numpy as np
    from numba import types
    from numba.extending import overload

    @numba.njit(inline="always", cache=True)
    def grad_a(x, g):
        for j in range(x.shape[0]):
            g[j] = x[j]

    @numba.njit(inline="always", cache=True)
    def grad_b(x, g):
        for j in range(x.shape[0]):
            g[j] = 2.0 * x[j]

    GRADS = (grad_a, grad_b)

    def call_grad(kind, x, g):
        return GRADS[kind](x, g)

    @overload(call_grad, inline="always")
    def _call_grad(kind, x, g):
        if not isinstance(kind, types.IntegerLiteral):
            return None
        fn = GRADS[kind.literal_value]
        def impl(kind, x, g):
            return fn(x, g)
        return impl

    @numba.njit(inline="always", cache=True)
    def rule_sgd(kg, x, g):
        call_grad(kg, x, g)
        for j in range(x.shape[0]):
            x[j] -= 0.1 * g[j]

    @numba.njit(inline="always", cache=True)
    def rule_half(kg, x, g):
        call_grad(kg, x, g)
        for j in range(x.shape[0]):
            x[j] -= 0.05 * g[j]

    RULES = (rule_sgd, rule_half)

    def call_rule(kind, kg, x, g):
        return RULES[kind](kg, x, g)

    @overload(call_rule, inline="always")
    def _call_rule(kind, kg, x, g):
        if not isinstance(kind, types.IntegerLiteral):
            return None
        fn = RULES[kind.literal_value]
        def impl(kind, kg, x, g):
            return fn(kg, x, g)
        return impl

    @numba.njit(cache=True)
    def loop(rule, kg, x, n):
        numba.literally(rule)
        numba.literally(kg)
        g = np.empty_like(x)
        for _ in range(n):
            call_rule(rule, kg, x, g)
        return x
''')

CHILD = textwrap.dedent('''
    import json, sys, time
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import spike_mod
    out = {}
    t = time.process_time()
    for r in (0, 1):
        for k in (0, 1):
            out[f"{r}{k}"] = float(spike_mod.loop(r, k, np.ones(3), 10)[0])
    out["cpu"] = time.process_time() - t
    out["signatures"] = len(spike_mod.loop.signatures)
    out["cache_hits"] = sum(spike_mod.loop.stats.cache_hits.values())
    out["cache_misses"] = sum(spike_mod.loop.stats.cache_misses.values())
    print(json.dumps(out))
''')


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="sgtune-literal-spike-") as tmp:
        with open(os.path.join(tmp, "spike_mod.py"), "w") as fh:
            fh.write(MODULE)
        env = {**os.environ, "NUMBA_CACHE_DIR": os.path.join(tmp, "cache")}
        for run in ("first process", "second process"):
            res = subprocess.run([sys.executable, "-c", CHILD, tmp], env=env, capture_output=True, text=True,
                                 check=True)
            print(run, res.stdout.strip().splitlines()[-1])
        idx = [f for _, _, fs in os.walk(env["NUMBA_CACHE_DIR"]) for f in fs]
        print("cache files:", sorted(idx))


if __name__ == "__main__":
    main()
