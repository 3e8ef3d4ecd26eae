"""Benchmark: the Kronecker family on fully connected networks of 10³–10⁶ parameters, 10⁴ rows, vs the dense path.

Each configuration runs in its own subprocess (a clean peak memory): sgtune's NumPy MLP (tanh, 100 inputs,
one output, Gaussian), θ its Glorot initialisation (the timing does not depend on θ being a MAP), prior
precision 1, B = 100, β = 2N, target posterior. Printed per configuration: D, the widths, wall seconds of the
KFAC factors (:func:`sgtune.models.kfac.mlp_factors`) and of the per-layer tuning
(:func:`sgtune.theory.kronecker.tune_factors`), and the peak memory (``ru_maxrss`` of the subprocess, and the
tracemalloc peak of the numpy allocations). ``dense`` rows: the dense path (``expand`` with the Gauss–Newton
curvature + ``tune``, family dense) on the same network and data, where D×D still fits; it is not run above
D = 3000 (``expand`` and ``tune`` hold several D×D matrices and an N×D gradient matrix).

Run: ``python benchmarks/bench_kronecker.py`` (``--quick`` skips the 10⁶ row). Target (issue 35): 10⁶
parameters on 10⁴ rows in ≤ 2 min and ≤ 4 GB on 2 cores.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

N_ROWS, P = 10_000, 100
#: a configuration still running after this many seconds is reported as not finished (the dense path at D = 3000)
TIMEOUT_S = 600
#: (label, hidden widths, momentum, route)
CONFIGS = [("1e3", (9,), 0.0, "dense"), ("1e3", (9,), 0.0, "kronecker"),
           ("3e3", (29,), 0.0, "dense"), ("3e3", (29,), 0.0, "kronecker"),
           ("1e4", (96,), 0.0, "kronecker"), ("1e5", (300, 200), 0.0, "kronecker"),
           ("1e5", (300, 200), 0.5, "kronecker"), ("1e6", (700, 700, 600), 0.0, "kronecker"),
           ("1e6", (700, 700, 600), 0.5, "kronecker")]


def one(hidden: tuple[int, ...], momentum: float, route: str) -> dict:
    import resource
    import time
    import tracemalloc
    import warnings

    import numpy as np

    from sgtune.core.config import Dynamics
    from sgtune.models import MLP

    rng = np.random.default_rng(0)
    X = rng.normal(size=(N_ROWS, P))
    y = np.tanh(X[:, :5].sum(axis=1)) + 0.3 * rng.normal(size=N_ROWS)
    net = MLP(hidden, likelihood="gaussian", noise_variance=0.09, hessian="gauss-newton")
    theta = net.initial_params(P, rng)
    dyn = Dynamics(None, batch_size=100, inv_temperature=2.0 * N_ROWS, momentum=momentum)
    tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    if route == "dense":
        from sgtune.io.data import make_dataset
        from sgtune.models import expand
        from sgtune.theory.tuning import tune

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e = expand(net, make_dataset(X, y), 1.0, theta_hat=theta)
            t1 = time.perf_counter()
            res = tune(e, dyn, target="posterior")
        extra = {"covariance_error": float(res.covariance_error)}
    else:
        from sgtune.models.kfac import mlp_factors
        from sgtune.theory.kronecker import tune_factors

        fac = mlp_factors(net, theta, X, y, prior_precision=1.0)
        t1 = time.perf_counter()
        res = tune_factors(fac, dyn, target="posterior")
        extra = {"covariance_error": float(res.covariance_error), "spectral_radius": float(res.spectral_radius)}
    t2, c2 = time.perf_counter(), time.process_time()
    peak = tracemalloc.get_traced_memory()[1]
    return {"D": net.n_params(P), "hidden": list(hidden), "momentum": momentum, "route": route,
            "factors_s": t1 - t0, "tune_s": t2 - t1, "total_s": t2 - t0, "cpu_s": c2 - c0, "tracemalloc_peak_MB": peak / 2**20,
            "maxrss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}


def main() -> None:
    quick = "--quick" in sys.argv
    print(f"{'D':>9} {'hidden':>16} {'κ':>4} {'route':>10} {'factors s':>10} {'tune s':>8} {'total s':>8} {'cpu s':>8} "
          f"{'maxrss MB':>10} {'numpy peak MB':>14}  covariance error")
    for label, hidden, kappa, route in CONFIGS:
        if quick and label == "1e6":
            continue
        cmd = [sys.executable, __file__, "--one", json.dumps([list(hidden), kappa, route])]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"{label:>9} {str(hidden):>16} {kappa:>4} {route:>10} did not finish in {TIMEOUT_S} s", flush=True)
            continue
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            print(f"{label:>9} {str(hidden):>16} {kappa:>4} {route:>10} failed: {last}", flush=True)
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['D']:>9} {str(tuple(r['hidden'])):>16} {kappa:>4} {route:>10} {r['factors_s']:>10.2f} "
              f"{r['tune_s']:>8.2f} {r['total_s']:>8.2f} {r['cpu_s']:>8.2f} {r['maxrss_MB']:>10.0f} {r['tracemalloc_peak_MB']:>14.0f}  "
              f"{r['covariance_error']:.2g}", flush=True)
    print("dense: expand (θ fixed, Gauss–Newton J_n) + tune (dense family); kronecker: KFAC factors + per-layer "
          "tuning. factors s: expand / mlp_factors; tune s: tune / tune_factors (wall); cpu s: CPU seconds, all "
          "threads. N = 10⁴ rows, 100 inputs.")
    print(f"load average when done: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        h, k, route = json.loads(sys.argv[2])
        print(json.dumps(one(tuple(h), float(k), route)))
    else:
        main()
