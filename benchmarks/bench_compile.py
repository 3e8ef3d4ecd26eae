"""Cold compile per engine combination, this checkout against a baseline checkout, in the same run.

Each (checkout, combination) compiles in a fresh process with an empty ``NUMBA_CACHE_DIR``; the table gives the
CPU seconds (``time.process_time``: the machine is shared, wall time is not comparable between rounds) of the
first run, which is the compile, then of a second process on the same cache (a load: no compile), and the
number of signatures the engine's ``_chain`` holds in the first process (1: each specialisation compiles
once). Combinations: the quadratic oracle with the diagonal SG(L)D rule, logistic regression with SGLD
(replacement batches), logistic regression with SMILE, the SMILE paper's ensemble on its Gaussian target,
Shaw & Whalley's reshuffling model problem (``--only`` picks some). Every checkout gives the same covariance bits (checked).
Usage::

    git worktree add /tmp/sgtune_base main
    python benchmarks/bench_compile.py --baseline /tmp/sgtune_base [--rounds 1]
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
from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler import engine, run_chains, run_quadratic_chains
from sgtune.sampler.registry import options_for

combo = sys.argv[1]
rng = np.random.default_rng(0)
X = rng.standard_normal((500, 5))
y = (rng.random(500) < 0.5).astype(float)
t = time.process_time()
if combo == "quadratic":
    res = run_quadratic_chains(np.eye(2), Dynamics(0.1, 1, inv_temperature=7.0), RunSpec(2000, n_chains=3, seed=3))
elif combo == "logistic-sgld":
    res = run_chains("logistic", (X, y), Dynamics(0.1, 8, inv_temperature=500.0), RunSpec(2000, n_chains=3, seed=3))
elif combo == "logistic-smile":
    res = run_chains("logistic", (X, y), Dynamics(0.05, 8, inv_temperature=500.0), RunSpec(2000, n_chains=3, seed=3),
                     options_for("smile"))
elif combo == "reshuffle":  # Shaw & Whalley's model problem (the Gaussian-mean oracle, its fused batch sum)
    from sgtune.sampler.reshuffle import run_reshuffle_chains
    res = run_reshuffle_chains(rng.standard_normal(120), 6, 0.5, scheme="rm", n_chains=3, n_epochs=50, seed=3)
else:  # the SMILE paper's ensemble on its analytic Gaussian target (the rule compiled on its own, then the loop)
    from sgtune.sampler.smile_ensemble import run_smile_ensemble
    from sgtune.sampler.targets import make_target
    res = run_smile_ensemble(make_target("gaussian", "isotropic", dim=10, seed=0), 0.3, RunSpec(2000, n_chains=3, seed=3),
                             options_for("smile"))
cpu = time.process_time() - t
out = res.cov if hasattr(res, "cov") else getattr(res, "sample_second_moment", getattr(res, "second_moment", None))
print(json.dumps({"cpu": cpu, "chain_signatures": len(engine._chain.signatures),
                  "cov": [float(x).hex() for x in out.ravel()]}))
'''

COMBOS = ("quadratic", "logistic-sgld", "logistic-smile", "ensemble-smile", "reshuffle")


def run(tree: Path, combo: str, cache: str) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, combo], capture_output=True, text=True, env=env, check=True,
                         cwd=str(tree))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other checkout (its repository root)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated combinations (default: all)")
    args = ap.parse_args()
    combos = [c for c in COMBOS if not args.only or c in args.only.split(",")]
    trees = {"this": ROOT, "baseline": args.baseline.resolve()}
    rows: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    covs: dict[str, set] = {c: set() for c in combos}
    for _ in range(args.rounds):  # interleaved: each round runs every checkout and combination at the same load
        for combo in combos:
            for name, tree in trees.items():
                with tempfile.TemporaryDirectory(prefix="sgtune-bench-compile-") as cache:
                    cold = run(tree, combo, cache)
                    warm = run(tree, combo, cache)
                rows.setdefault((combo, name), []).append((cold["cpu"], warm["cpu"], cold["chain_signatures"]))
                covs[combo].add(tuple(cold["cov"]))
    print(f"| combination | checkout | cold CPU s | cached CPU s | _chain signatures |")
    print("|---|---|---|---|---|")
    for (combo, name), r in rows.items():
        print(f"| {combo} | {name} | {' '.join(f'{x[0]:.1f}' for x in r)} | {' '.join(f'{x[1]:.1f}' for x in r)} | "
              f"{' '.join(str(x[2]) for x in r)} |")
    print("covariance bits identical across checkouts: "
          + ", ".join(f"{c} {len(v) == 1}" for c, v in covs.items()))


if __name__ == "__main__":
    main()
