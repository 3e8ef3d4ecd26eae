"""Benchmark: is ``plan``'s ``predicted_seconds`` the sampler time of the run it recommends?

For five configurations (bundled examples and a synthetic D = 50 regression; different families, batch
sizes, momentum and batching), ``plan_run`` recommends a run; the run is then executed exactly as its
``run_argv`` would (``run_chains`` with the candidate's Λ, RunSpec and seed) and its sampler seconds
(``ChainResult.seconds``: compilation excluded, as ``sgtune run`` reports them) are compared with the
prediction. Same-run baseline: the previous predictor (one timed difference between a 16-step run and a
longer one per configuration, no repeats), applied to the same recommended configuration. Stability: the plan
is made ``--reruns`` times with the cost models forgotten in between; the spread of the recommended
candidate's ``predicted_seconds`` (max/min − 1) and whether the recommendation changed.

Run: ``python benchmarks/plan_seconds.py [--reruns 2] [--only I]``; the measured seconds are the median
(and range) of three runs of the recommended command. Wall-clock numbers on a shared machine: the load
average is printed first. A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

from _timing import timing_spec_kw

from sgtune.core.config import Dynamics, RunSpec
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains
from sgtune.workflows.plan import PlanGrid, TimingOptions, clear_cost_cache, plan_run


def synthetic(D: int = 50, N: int = 5000, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    y = X @ (rng.normal(size=D) / math.sqrt(D)) + rng.normal(size=N) * (0.5 + np.abs(X[:, 0]) / 2)
    return make_dataset(X, y), get_model("linear")


def configs():
    """(label, dataset, model, prior, plan keyword arguments)."""
    yield "logistic D=5, dense/diag/scalar, E=0.1", example("logistic"), get_model("logistic"), 1.0, {
        "tolerance": 0.1}
    yield "hetero-linear D=20, E=0.1", example("hetero-linear"), get_model("linear"), 0.0, {"tolerance": 0.1}
    yield "poisson D=5, diagonal, B=16,128, E=0.1", example("poisson"), get_model("poisson"), 0.0, {
        "tolerance": 0.1, "families": ("diagonal",), "batch_sizes": (16, 128)}
    ds, m = synthetic()
    yield "linear D=50 N=5000, dense, E=0.15", ds, m, 0.0, {"tolerance": 0.15, "families": ("dense",),
                                                             "batch_sizes": (32, 256)}
    yield "logistic, κ=0.5, w/o replacement, E=0.1", example("logistic"), get_model("logistic"), 1.0, {
        "tolerance": 0.1, "momenta": (0.5,), "batchings": ("without-replacement",), "families": ("dense",)}


def dynamics_of(c):
    lam = c.step_matrix.diagonal().copy() if c.lam_kind == "diagonal" else c.step_matrix
    return Dynamics(lam, c.batch_size, inv_temperature=c.inverse_temperature, momentum=c.momentum,
                    batching=c.batching)


def old_predictor(model, ds, e, c, prior, per=0.05, seed=0):
    """The previous timing (before this benchmark): per configuration, one 16-step run and one longer run
    grown until the difference takes ``per`` seconds; predicted = C·steps·per-step + fixed."""
    dyn = dynamics_of(c)

    def run(steps):
        return float(run_chains(model, ds, dyn, RunSpec(steps, n_chains=c.chains, seed=seed,
                                                        **timing_spec_kw(steps, c.chains, 0)), prior_precision=prior,
                                initial=e.theta_hat).seconds)
    k0 = 16
    base = run(k0)
    k, t = 64, run(64)
    while t - base < 0.5 * per and k < 2_000_000:
        rate = max(t - base, 1e-4) / (k - k0)
        k = int(min(2_000_000, max(4 * k, k0 + per / rate)))
        t = run(k)
    per_step = max(t - base, 1e-9) / ((k - k0) * c.chains)
    fixed = max(base - k0 * c.chains * per_step, 0.0)
    return c.chains * c.run_steps * per_step + fixed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reruns", type=int, default=2)
    ap.add_argument("--only", type=int, default=None, help="run only configuration i (0-4)")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'configuration':<42} {'rec':>24} {'steps':>8} {'measured s (3 runs)':>22} {'new pred':>9} {'ratio':>6} "
          f"{'old pred':>9} {'ratio':>6} {'rerun spread':>12} {'same rec':>8}", flush=True)
    for i, (label, ds, model, prior, kw) in enumerate(configs()):
        if args.only is not None and i != args.only:
            continue
        e = expand(model, ds, prior)
        preds, recs = [], []
        for r in range(args.reruns):
            clear_cost_cache()
            t0 = time.perf_counter()
            grid = {k: v for k, v in kw.items() if k != "tolerance"}
            p = plan_run(model, ds, e, tolerance=kw["tolerance"], prior_precision=prior, grid=PlanGrid(**grid),
                         timing=TimingOptions(seed=0), notes=False)
            if p.best is None:
                print(f"{label:<42} no feasible candidate")
                break
            recs.append(p.recommended)
            preds.append(p.best.predicted_seconds)
            if r == 0:
                best, plan_s = p.best, time.perf_counter() - t0
        else:
            c = best
            secs = [run_chains(model, ds, dynamics_of(c), c.run_spec(seed=0), prior_precision=prior,
                               initial=e.theta_hat).seconds for _ in range(3)]
            measured = float(np.median(secs))
            old = old_predictor(model, ds, e, c, prior)
            rec = f"B={c.batch_size} {c.family} κ={c.momentum:g}"
            spread = max(preds) / min(preds) - 1
            print(f"{label:<42} {rec:>24} {int(c.run_steps):>8} {measured:>8.3f} ({min(secs):.2f}–{max(secs):.2f}) "
                  f"{preds[0]:>9.3f} {preds[0] / measured:>6.2f} {old:>9.3f} {old / measured:>6.2f} "
                  f"{spread:>12.1%} {str(len(set(recs)) == 1):>8}   (plan {plan_s:.1f} s, load "
                  f"{os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
