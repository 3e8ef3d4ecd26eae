"""Benchmark: what the Σ-dependent noise (``method="dq-exact"``) costs the Kronecker family at 10⁵–10⁶ parameters.

The setting of ``benchmarks/bench_kronecker.py`` (sgtune's NumPy MLP, tanh, 100 inputs, N = 10⁴ rows, θ its
Glorot initialisation, prior precision 1, B = 100, β = 2N, posterior), each configuration in its own
subprocess: ``none`` is the default path (no per-sample roots, ``dq-const``), ``dq-const``/``dq-exact`` collect
the per-sample curvature roots and the inputs' fourth moments (``samples=True``: a second forward pass) and
tune with that noise model (``dq-const`` then also bounds the step's noise gain). Printed: factor and tuning wall
seconds, peak RSS, the largest noise gain. Run: ``python benchmarks/bench_kronecker_noise.py``.
"""
from __future__ import annotations

import json
import subprocess
import sys

CONFIGS = [((300, 200), "none"), ((300, 200), "dq-exact"), ((700, 700, 600), "none"), ((700, 700, 600), "dq-exact")]


def one(hidden: tuple[int, ...], method: str) -> dict:
    import resource
    import time
    import warnings

    import numpy as np

    from sgtune.core.config import Dynamics
    from sgtune.models import MLP
    from sgtune.models.kfac import mlp_factors
    from sgtune.theory.kronecker import tune_factors

    n, p = 10_000, 100
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, p))
    y = np.tanh(X[:, :5].sum(axis=1)) + 0.3 * rng.normal(size=n)
    net = MLP(hidden, likelihood="gaussian", noise_variance=0.09, hessian="gauss-newton")
    theta = net.initial_params(p, rng)
    dyn = Dynamics(None, batch_size=100, inv_temperature=2.0 * n)
    t0 = time.perf_counter()
    fac = mlp_factors(net, theta, X, y, prior_precision=1.0, samples=method != "none")
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tune_factors(fac, dyn, method="dq-const" if method == "none" else method)
    t2 = time.perf_counter()
    return {"D": net.n_params(p), "hidden": list(hidden), "method": method, "factors_s": t1 - t0, "tune_s": t2 - t1,
            "maxrss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "noise_gain": res.to_dict()["noise_gain"]}


def main() -> None:
    import os

    print(f"{'D':>9} {'hidden':>16} {'method':>9} {'factors s':>10} {'tune s':>8} {'total s':>8} {'maxrss MB':>10}  noise gain")
    for hidden, method in CONFIGS:
        out = subprocess.run([sys.executable, __file__, "--one", json.dumps([list(hidden), method])],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{str(hidden):>26} {method:>9} failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['D']:>9} {str(tuple(r['hidden'])):>16} {method:>9} {r['factors_s']:>10.2f} {r['tune_s']:>8.2f} "
              f"{r['factors_s'] + r['tune_s']:>8.2f} {r['maxrss_MB']:>10.0f}  {r['noise_gain']}", flush=True)
    print(f"load average when done: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        h, m = json.loads(sys.argv[2])
        print(json.dumps(one(tuple(h), m)))
    else:
        main()
