"""Benchmark: the Monte Carlo error constant and ``sgtune plan`` at D = 1000 (issue 20 item 5).

Prints two tables (run: ``python benchmarks/bench_plan.py [--quick]``):

1. lim T·E‖Ŝ_T − Σ‖²_F (Gaussian moments) for a tuned dense SGD chain of a synthetic heteroskedastic linear
   regression, by sgtune's routes (``symmetric`` without momentum, ``blocks`` with κ = 0.5: one eigen-
   decomposition, O(D³) and O(D²) memory) against two baselines measured in the same run: the truncated
   lag sum with explicit matrix powers (O(K·D³), K ≈ 40·τ terms; skipped where projected > 60 s) and the
   Kronecker form of the Stein equations (m² unknowns, an m²×m² solve: the naive D²×D² route; m ≤ 40),
   with the relative difference of each baseline to sgtune's value (``terms``: lags summed by the brute force,
   or projected from the spectral radius where it is skipped);
2. ``plan_run`` (the work behind ``sgtune plan``) on N = 5000 rows at D = 100, 300 and 1000 for the dense
   and the diagonal family over the default batch sizes (8 … 256): seconds for the expansion, the
   tuning/error constants of every candidate, the sampler timings, and in total (target: ≤ 30 s at
   D = 1000 on CI-class hardware), with the recommendation;
3. the command itself at D = 1000 (``sgtune plan DATA.npz …``: imports, loading, MAP fit, plan).

Wall-clock seconds (best of ``--repeat`` for table 1), and CPU seconds of the whole process for table 2
(``time.process_time``, all threads: less sensitive than wall time to other jobs on a shared machine); the
load average is printed first. Benchmarks, not tests.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from _timing import timed

from sgtune.io.data import make_dataset
from sgtune.models import expand, get_model
from sgtune.theory.linear_chain import LinearChain
from sgtune.theory.mcerror import cov_error_constant
from sgtune.theory.tuning import tune
from sgtune.workflows.plan import PlanGrid, plan_run
from sgtune.core.config import Dynamics


def synthetic(D: int, N: int, seed: int = 0):
    """Heteroskedastic linear regression with unequal column scales (Wang, Ding & Huggins's (2026) eq. E.2 spirit)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D)) * np.sqrt(rng.uniform(0.5, 2.0, size=D))
    theta = rng.normal(size=D) / math.sqrt(D)
    y = X @ theta + rng.normal(size=N) * (0.5 + np.abs(X[:, 0]) / 2)
    return make_dataset(X, y), get_model("linear")


def brute(F: np.ndarray, S: np.ndarray, d: int, tol: float = 1e-13) -> tuple[float, int]:
    """Σ_k [(tr A_k)² + tr(A_kA_k)] with explicit powers, until a term is below tol of the sum (value, terms)."""
    total, Ak, k = 0.0, S.copy(), 0
    while True:
        A = Ak[:d, :d]
        g = np.trace(A) ** 2 + np.sum(A * A.T)
        total += g if k == 0 else 2 * g
        if k > 10 and abs(g) < tol * abs(total):
            return total, k + 1
        Ak = F @ Ak
        k += 1


def kron(F: np.ndarray, S: np.ndarray, d: int) -> float:
    m = F.shape[0]
    X = np.zeros((m, m))
    X[:, :d] = S[:, :d]
    I2 = np.eye(m * m)
    s = np.trace(np.linalg.solve(I2 - np.kron(F, F), np.kron(X, X)))
    Z = np.linalg.solve(I2 - np.kron(F, F.T), X.ravel()).reshape(m, m)
    tot = s + np.trace(Z @ X)
    return float(2 * tot - (np.trace(S[:d, :d]) ** 2 + np.sum(S[:d, :d] ** 2)))


def table_constant(dims: list[int], repeat: int) -> None:
    print("\n1. Monte Carlo error constant lim T·E‖Ŝ−Σ‖²_F: sgtune's route vs the baselines (same run)")
    print(f"{'D':>5} {'κ':>4} {'m':>5} {'route':>9} {'sgtune s':>9} {'brute s':>9} {'(terms)':>8} {'rel diff':>9} "
          f"{'kron s':>8} {'rel diff':>9}")
    for D in dims:
        ds, model = synthetic(D, max(5 * D, 2000))
        e = expand(model, ds, 1.0)
        for kappa in (0.0, 0.5):
            res = tune(e, Dynamics(None, 32, momentum=kappa)) if D <= 300 or kappa == 0 else None
            if res is None:
                print(f"{D:>5} {kappa:>4g}   (momentum tuning at D = {D} takes minutes: not run)")
                continue
            st = res.stationary
            F, S = st.transition, st.augmented_cov
            chain = LinearChain.of(e, res.dynamics)  # the tuned chain: its F is st.transition
            t_s, (val, route) = timed(lambda: cov_error_constant(chain, S), repeat)
            m = F.shape[0]
            # ρ(F)² ≤ ρ of the second-moment map: its square root estimates ρ(F) without an m×m eigensolve
            rho = float(np.max(np.abs(np.linalg.eigvals(F)))) if m <= 400 else math.sqrt(st.spectral_radius)
            terms = int(30 / -math.log(rho)) if rho < 1 else 0
            # projected brute-force cost: terms × one m×m product (≈ 2m³ flops at ~5 GFLOP/s)
            proj = terms * 2 * m ** 3 / 5e9
            if proj < 60:
                t_b, (vb, terms) = timed(lambda: brute(F, S, D), 1)
                b_s, b_d = f"{t_b:9.3g}", f"{abs(vb / val - 1):9.1e}"
            else:
                b_s, b_d = f"{'(>60 s)':>9}", f"{'':>9}"
            if m <= 40:
                t_k, vk = timed(lambda: kron(F, S, D), 1)
                k_s, k_d = f"{t_k:8.3g}", f"{abs(vk / val - 1):9.1e}"
            else:
                k_s, k_d = f"{'(m>40)':>8}", f"{'':>9}"
            print(f"{D:>5} {kappa:>4g} {m:>5} {route:>9} {t_s:9.3g} {b_s} {terms:>8} {b_d} {k_s} {k_d}", flush=True)


def table_plan(dims: list[int], N: int) -> None:
    print(f"\n2. plan_run (sgtune plan) on N = {N}: dense and diagonal families, batch sizes 8–256, tolerance 0.1")
    print(f"{'D':>5} {'cands':>5} {'expand s':>9} {'tuning s':>9} {'timing s':>9} {'total s':>8} {'CPU s':>7}  "
          "recommendation")
    for D in dims:
        ds, model = synthetic(D, N)
        t0, c0 = time.perf_counter(), time.process_time()
        e = expand(model, ds, 1.0)
        t_e = time.perf_counter() - t0
        p = plan_run(model, ds, e, tolerance=0.1, prior_precision=1.0, grid=PlanGrid(families=("dense", "diagonal")))
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        b = p.best
        rec = "none feasible" if b is None else (
            f"B = {b.batch_size} {b.family}: {b.chains} × ({int(b.burn_in_steps)} + {int(b.steps)}) steps, "
            f"{b.gradient_evaluations:.3g} gradients, {b.predicted_seconds:.3g} s predicted")
        print(f"{D:>5} {len(p.candidates):>5} {t_e:9.3g} {p.tuning_seconds:9.3g} {p.timing_seconds:9.3g} "
              f"{total:8.3g} {cpu:7.3g}  {rec}", flush=True)


def table_cli(D: int, N: int) -> None:
    """The command itself on a .npz file: imports, loading, the MAP fit and the plan (applicability skipped above
    D = 200 by default)."""
    import os
    import subprocess
    import sys
    import tempfile

    print(f"\n3. sgtune plan DATA.npz --model linear --families dense,diagonal --tolerance 0.1 (D = {D}, N = {N}), "
          "wall seconds of the whole command")
    ds, _ = synthetic(D, N)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "d.npz")
        np.savez(path, X=ds.X, y=ds.y)
        cmd = [sys.executable, "-c", "from sgtune.cli import main; main()", "plan", path, "--model", "linear",
               "--prior-precision", "1", "--tolerance", "0.1", "--families", "dense,diagonal", "-q",
               "--json", os.path.join(tmp, "p.json")]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - t0
        doc = json.loads(open(os.path.join(tmp, "p.json")).read())
    print(f"   total {wall:.3g} s (plan {doc['tuning_seconds'] + doc['timing_seconds']:.3g} s), recommended "
          f"#{doc['recommended']}, applicability checked: {doc['applicability']['checked']}", flush=True)


def main() -> None:
    import os

    print("load average (1, 5, 15 min):", ", ".join(f"{x:.2f}" for x in os.getloadavg()), "on", os.cpu_count(), "CPUs")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only (a smoke run)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.quick:
        table_constant([10, 30], 1)
        table_plan([50], 2000)
        table_cli(50, 2000)
        return
    table_constant([10, 20, 100, 300, 1000], args.repeat)
    table_plan([100, 300, 1000], 5000)
    table_cli(1000, 5000)


if __name__ == "__main__":
    main()
