"""Cold compile of one engine combination: the serial chain loop against the two ``prange`` loops it replaced.

Each variant compiles the same combination (quadratic oracle, no batch, the diagonal SG(L)D rule) in a fresh
process with an empty ``NUMBA_CACHE_DIR``, and the table gives the CPU seconds (``time.process_time``: the
machine is shared, wall time is not comparable between rounds) of the first run, which is the compile, and
the signatures ``_chain`` was compiled for. Variants, all in the same run (issue 38):

- ``serial``: :func:`sgtune.sampler.engine.chains` as it is (a serial loop over a range of chains; the
  backend runs ranges on threads);
- ``prange-int64``: a ``prange`` loop over the chains calling ``_chain`` with the index cast to int64;
- ``prange``: the loop of before issue 38, the ``prange`` index passed as it is (numba types it int64 in
  the function and uint64 in the parfor's gufunc: ``_chain`` compiles twice).

Every variant gives the same covariance bits (printed as a check). Usage::

    python benchmarks/bench_compile.py [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys, time
import numpy as np
import numba
from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler import engine, run_quadratic_chains

variant = sys.argv[1]
_chain = engine._chain
if variant != "serial":
    cast = variant == "prange-int64"

    @numba.njit(parallel=True, nogil=True, error_model="numpy")
    def chains_prange(batch_fn, grad_fn, rule_fn, state, t0, n_steps, burn_in, ora, sched, p, mc, rec, c0, c1):
        batch_size = sched.batch_size
        decay = sched.decay
        for c in numba.prange(state.theta.shape[0]):
            _chain(batch_fn, grad_fn, rule_fn, np.int64(c) if cast else c, state, t0, n_steps, burn_in, ora,
                   batch_size, decay, p, mc, rec)

    engine.chains = chains_prange
    engine.get_num_threads = lambda: 1  # one call over all chains: the prange splits them
t = time.process_time()
res = run_quadratic_chains(np.eye(2), Dynamics(0.1, 1, inv_temperature=7.0), RunSpec(2000, n_chains=3, seed=3))
cpu = time.process_time() - t
print(json.dumps({"cpu": cpu, "chain_signatures": [str(s[3]) for s in _chain.signatures],
                  "cov": [float(x).hex() for x in res.cov.ravel()]}))
'''


def run(variant: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="sgtune-bench-compile-") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache,
               "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        out = subprocess.run([sys.executable, "-c", CHILD, variant], capture_output=True, text=True, env=env,
                             check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    variants = ("serial", "prange-int64", "prange")
    rows: dict[str, list[float]] = {v: [] for v in variants}
    sigs: dict[str, list[str]] = {}
    covs = set()
    for _ in range(args.rounds):  # interleaved: each round runs every variant once, at the same machine load
        for v in variants:
            r = run(v)
            rows[v].append(r["cpu"])
            sigs[v] = r["chain_signatures"]
            covs.add(tuple(r["cov"]))
    print(f"{'variant':14s} {'cold CPU s (each round)':>28s} {'_chain index types':>22s}")
    for v in variants:
        print(f"{v:14s} {' '.join(f'{c:6.1f}' for c in rows[v]):>28s} {','.join(sigs[v]):>22s}")
    print(f"covariance bits identical across variants: {len(covs) == 1}")


if __name__ == "__main__":
    main()
