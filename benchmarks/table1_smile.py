"""Table 1 of the SMILE paper (2025) (SMILE) reproduced: b² of SMILE-naive, SGLD, SGHMC, pSMILE-naive on the appendix-C targets.

Run: ``python benchmarks/table1_smile.py [--steps N] [--chains C] [--smoke] [--out table1.json]
[--scheduler local|tcp://host:8786]``. With ``--scheduler`` each (target, noise, sampler) cell is
one Dask task (``sgtune.io.reduce.map_tasks``) with the same seeds as the serial run, so every b²,
step and bootstrap sd is identical; only the timings differ.

For each target (ill-conditioned Gaussian, Rosenbrock product, Neal's funnel; D = 10) and
injected noise (isotropic 256I, diagonal 256Λ, correlated, spatially varying) and sampler,
the appendix-C step-size search: b² at Δt = 10^i, i = −6..0, then 15 log-spaced values over
10^{i_opt ± 1}; the best step is then rerun with fresh seeds and its b² reported with the
bootstrap standard deviation over chains (see :func:`sgtune.sampler.smile_ensemble.grid_search_b2`).
b² is averaged over coordinates (maximum for the funnel) and over chains.

Printed: the table next to the paper's numbers, the paper's qualitative findings with
z-scores (z = difference / sqrt(sd₁² + sd₂²)), and timings: total wall and CPU time of the
grid, and the cost per chain-step of the numba kernel against its pure-Python twin (the
baseline) measured in the same run. Chains start at the posterior mean as in the paper;
the first 10 % of each run is discarded.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

from sgtune.core.config import RunSpec
from sgtune.sampler.registry import options_for
from sgtune.sampler.reference import ReferenceBackend
from sgtune.sampler.smile_ensemble import grid_search_b2, run_smile_ensemble
from sgtune.sampler.targets import make_target
from sgtune.theory.smile import b2_chains

TARGETS = ("gaussian", "rosenbrock", "funnel")
NOISES = ("isotropic", "diagonal", "correlated", "spatial")
SAMPLERS = ("smile-naive", "sgld", "sghmc", "psmile-naive")
LABEL = {"gaussian": "ICG", "rosenbrock": "Rosenbrock", "funnel": "Funnel"}

#: the SMILE paper (2025), Table 1 (mean ± sd), same row/column order
PAPER = {
    ("gaussian", "isotropic"): [(0.003, 0.001), (0.033, 0.006), (0.095, 0.033), (0.006, 0.001)],
    ("gaussian", "diagonal"): [(0.245, 0.027), (0.184, 0.021), (0.186, 0.020), (0.038, 0.008)],
    ("gaussian", "correlated"): [(0.502, 0.194), (0.189, 0.029), (0.235, 0.067), (0.055, 0.007)],
    ("gaussian", "spatial"): [(0.157, 0.010), (0.328, 0.011), (0.331, 0.011), (0.093, 0.019)],
    ("rosenbrock", "isotropic"): [(0.002, 0.001), (0.005, 0.001), (0.004, 0.002), (0.004, 0.001)],
    ("rosenbrock", "diagonal"): [(0.302, 0.111), (0.085, 0.007), (0.160, 0.027), (0.046, 0.002)],
    ("rosenbrock", "correlated"): [(0.265, 0.042), (0.074, 0.007), (0.085, 0.014), (0.070, 0.005)],
    ("rosenbrock", "spatial"): [(0.048, 0.005), (0.079, 0.013), (0.095, 0.013), (0.052, 0.005)],
    ("funnel", "isotropic"): [(0.014, 0.005), (0.141, 0.019), (0.128, 0.019), (0.021, 0.005)],
    ("funnel", "diagonal"): [(0.283, 0.146), (0.063, 0.017), (0.077, 0.039), (0.042, 0.012)],
    ("funnel", "correlated"): [(0.453, 0.231), (0.147, 0.034), (0.138, 0.039), (0.004, 0.002)],
    ("funnel", "spatial"): [(0.023, 0.008), (0.241, 0.043), (0.218, 0.034), (0.012, 0.003)],
}


def frozen_b2(name: str) -> float:
    """b² of a chain that never leaves its start (the posterior mean): the score of not sampling at all."""
    t = make_target(name, "none")
    return float(b2_chains((t.start ** 2)[None, :], t.second_moment, t.var_of_square, t.reduce)[0])


def per_step_cost(n_steps: int = 2000) -> list[tuple[str, float, float]]:
    """ns per chain-step of the numba kernel (1 chain) and of the pure-Python twin, same problem."""
    t = make_target("gaussian", "correlated")
    out = []
    for s, h in (("smile-naive", 0.1), ("psmile-naive", 0.1), ("sgld", 1e-3), ("sghmc", 1e-3)):
        run_smile_ensemble(t, h, RunSpec(10, n_chains=1), options_for(s))  # compile / load cache
        big = 100 * n_steps
        t0 = time.perf_counter()
        run_smile_ensemble(t, h, RunSpec(big, n_chains=1), options_for(s))
        fast = (time.perf_counter() - t0) / big
        t0 = time.perf_counter()
        run_smile_ensemble(t, h, RunSpec(n_steps, n_chains=1), options_for(s), backend=ReferenceBackend())
        slow = (time.perf_counter() - t0) / n_steps
        out.append((s, fast * 1e9, slow * 1e9))
    return out


def compare(res: dict, a: tuple, b: tuple) -> float:
    """z of b²(a) − b²(b) (positive: a is larger)."""
    x, y = res[a], res[b]
    sd = math.hypot(x["bootstrap_std"], y["bootstrap_std"])
    if not (math.isfinite(x["b2"]) and math.isfinite(y["b2"])):
        return math.nan
    return (x["b2"] - y["b2"]) / sd if sd > 0 else math.copysign(math.inf, x["b2"] - y["b2"])


def verdict(z: float, want_positive: bool = True) -> str:
    if not math.isfinite(z):
        return "n/a"
    z = z if want_positive else -z
    return "holds" if z > 2 else ("reversed" if z < -2 else "not resolved")


def findings(res: dict) -> list[tuple[str, str, float]]:
    """The paper's qualitative claims about Table 1, each with a z-score and a verdict."""
    rows = []
    for tg in TARGETS:
        for nz in NOISES[1:]:
            z = compare(res, (tg, nz, "smile-naive"), (tg, nz, "psmile-naive"))
            rows.append((f"{LABEL[tg]}/{nz}: pSMILE-naive < SMILE-naive", verdict(z), z))
        for other in ("sgld", "sghmc", "psmile-naive"):
            z = compare(res, (tg, "isotropic", other), (tg, "isotropic", "smile-naive"))
            rows.append((f"{LABEL[tg]}/isotropic: SMILE-naive < {other}", verdict(z), z))
        for nz in NOISES[1:]:
            for other in ("sgld", "sghmc"):
                z = compare(res, (tg, nz, other), (tg, nz, "psmile-naive"))
                rows.append((f"{LABEL[tg]}/{nz}: pSMILE-naive < {other}", verdict(z), z))
        z = compare(res, (tg, "diagonal", "smile-naive"), (tg, "isotropic", "smile-naive"))
        rows.append((f"{LABEL[tg]}: SMILE-naive worse under diagonal than isotropic noise", verdict(z), z))
    return rows


def cell(tg: str, nz: str, sampler: str, steps: int, chains: int, seed: int, exps: tuple[int, ...],
         n_fine: int) -> dict:
    """One cell of the table: the appendix-C step search for (target, noise, sampler); a Dask task.

    Seeds depend on ``seed`` only (target ``seed``, chains ``seed + 10``), never on where or when the
    cell runs.
    """
    t = make_target(tg, nz, seed=seed)
    g = grid_search_b2(t, sampler, n_steps=steps, n_chains=chains, seed=seed + 10, exponents=exps, n_fine=n_fine)
    return {"b2": g.b2.value, "bootstrap_std": g.b2.bootstrap_std, "best_step": g.best_step,
            "b2_in_sample": g.best_b2_in_sample, "seconds": g.seconds}


def _print_cell(key: tuple, r: dict) -> None:
    tg, nz, s = key
    print(f"  {tg}/{nz}/{s}: b² = {r['b2']:.4f} ± {r['bootstrap_std']:.4f} at Δt = {r['best_step']:.3g}"
          f" (in-sample {r['b2_in_sample']:.4f}; {r['seconds']:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200_000, help="steps per chain (paper: 10^6)")
    ap.add_argument("--chains", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny grid (for the test suite)")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--noises", default=",".join(NOISES))
    ap.add_argument("--out", default=None, help="write the results as JSON")
    ap.add_argument("--progress", action="store_true", help="print every cell as it finishes")
    ap.add_argument("--scheduler", default=None, metavar="ADDRESS",
                    help="run the cells as Dask tasks: 'local' (a local cluster) or tcp://host:8786; same numbers")
    args = ap.parse_args(argv)
    exps: tuple[int, ...] = (-6, -5, -4, -3, -2, -1, 0)
    n_fine = 15
    steps, chains = args.steps, args.chains
    if args.smoke:
        exps, n_fine, steps, chains = (-3, -2, -1), 3, 2000, 3
    targets, noises = args.targets.split(","), args.noises.split(",")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    res: dict = {}
    keys = [(tg, nz, s) for tg in targets for nz in noises for s in SAMPLERS]
    if args.scheduler is None:
        for key in keys:
            res[key] = cell(*key, steps, chains, args.seed, exps, n_fine)
            if args.progress:
                _print_cell(key, res[key])
    else:
        from sgtune.io.reduce import map_tasks

        if __name__ != "__main__" and __name__ in sys.modules:  # imported (e.g. by the tests): ship cell() by
            import cloudpickle                                   # value, the workers may not import this file

            cloudpickle.register_pickle_by_value(sys.modules[__name__])
        out_cells = map_tasks(cell, [(*key, steps, chains, args.seed, exps, n_fine) for key in keys], args.scheduler,
                              by_value=True)
        for key, r in zip(keys, out_cells):
            res[key] = r
            if args.progress:
                _print_cell(key, r)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0

    print(f"\nTable 1 (the SMILE paper (2025)): b² ± bootstrap sd, {chains} chains × {steps} steps, grid 10^{exps[0]}..10^{exps[-1]}"
          f" + {n_fine} fine; paper's value in brackets; best step in the last line")
    head = f"{'target':<11}{'noise':<12}" + "".join(f"{s:>26}" for s in SAMPLERS)
    print(head)
    for tg in targets:
        for nz in noises:
            cells, steps_ = [], []
            for j, s in enumerate(SAMPLERS):
                r = res[(tg, nz, s)]
                pv = PAPER[(tg, nz)][j]
                cells.append(f"{r['b2']:.3f}±{r['bootstrap_std']:.3f} [{pv[0]:.3f}]")
                steps_.append(f"Δt={r['best_step']:.3g}")
            print(f"{LABEL[tg]:<11}{nz:<12}" + "".join(f"{c:>26}" for c in cells))
            print(f"{'':<23}" + "".join(f"{c:>26}" for c in steps_))
    print("b² of a chain frozen at its start (the posterior mean): "
          + ", ".join(f"{LABEL[tg]} {frozen_b2(tg):.3f}" for tg in targets))
    if set(targets) == set(TARGETS) and set(noises) == set(NOISES):
        print("\nThe paper's findings (z = difference / combined bootstrap sd; 'holds' needs z > 2):")
        for text, v, z in findings(res):
            print(f"  {text:<60} {v:<13} z = {z:+.1f}")
    print(f"\nGrid: {len(targets) * len(noises) * len(SAMPLERS)} cells, {wall:.0f} s wall, {cpu:.0f} s CPU "
          f"(all threads{' of this process; the Dask workers are not counted' if args.scheduler else ''}) "
          "on this machine")
    print("\nCost per chain-step (1 chain; baseline = the pure-Python twin, same run):")
    print(f"{'sampler':<14}{'numba ns':>12}{'python ns':>14}{'speed-up':>10}")
    for s, fast, slow in per_step_cost(200 if args.smoke else 2000):
        print(f"{s:<14}{fast:>12.0f}{slow:>14.0f}{slow / fast:>10.0f}")
    out = {"steps": steps, "chains": chains, "seed": args.seed, "exponents": list(exps), "n_fine": n_fine,
           "scheduler": args.scheduler,
           "wall_seconds": wall, "cpu_seconds": cpu,
           "cells": [{"target": k[0], "noise": k[1], "sampler": k[2], **v} for k, v in res.items()]}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1, allow_nan=True)
    return out


if __name__ == "__main__":
    main()
