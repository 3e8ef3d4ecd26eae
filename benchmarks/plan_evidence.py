"""Evidence for ``sgtune plan`` (issue 20 item 4): planned runs measured against their predicted error.

What it does (run: ``python benchmarks/plan_evidence.py [--problem hetero-linear] [--smoke]``):

1. plans the problem (``plan_run``: dense, diagonal and scalar families, batch sizes 8 … 256, C chains,
   tolerance E);
2. runs the recommended configuration and two others — the dense family at B = 32 (or the next feasible
   dense one) and the cheapest feasible candidate of another family (else the largest feasible batch) —
   plus the default user choice "B = 32, scalar step" (Λ = λI tuned to the target by sgtune, run as long
   as *its* plan needs to reach E), each at its planned burn-in, T and C, with sgtune's own sampler
   (:func:`sgtune.sampler.run_chains`, what ``sgtune run`` calls) over R ≥ 20 repetitions with fresh
   seeds;
3. prints, per configuration, the measured RMS relative error sqrt(mean_r ‖Ŝ_r − Σ*‖²_F)/‖Σ*‖_F with its
   Monte Carlo standard error, the predicted sqrt(b² + c/(T·C)), their ratio (target: within ±25 %),
   the gradient evaluations and the measured seconds; then the cost the recommendation saves against
   the scalar B = 32 baseline at the same accuracy.

``--smoke`` (a fast test runs it) plans the logistic example on B ∈ {8, 32} without timing and measures 2
repetitions of runs shortened to 1000 steps (the ratio is then not meaningful; it only exercises the code). ``--json FILE``
writes the numbers, ``--plot FILE.png`` a figure (measured vs predicted, cost per configuration).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np

from sgtune.core.config import Dynamics, RunSpec
from sgtune.io.data import example
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains
from sgtune.workflows.plan import Candidate, PlanGrid, TimingOptions, plan_run

MODELS = {"hetero-linear": "linear", "logistic": "logistic", "poisson": "poisson"}


def choose(p: Any) -> list[tuple[str, Candidate]]:
    """The recommended candidate, a dense B = 32 (or nearest) one, and a cheap one of another family."""
    cands = p.candidates
    best = p.best
    out = [("recommended", best)]
    dense = [c for c in cands if c.feasible and c.family == "dense" and c is not best]
    if dense:
        out.append(("dense, B nearest 32", min(dense, key=lambda c: (abs(math.log2(c.batch_size / 32)),
                                                                       c.batch_size))))
    others = [c for c in cands if c.feasible and c.family != best.family and all(c is not o for _, o in out)]
    if others:
        out.append(("cheapest other family", min(others, key=lambda c: c.gradient_evaluations)))
    rest = [c for c in cands if c.feasible and all(c is not o for _, o in out)]
    while len(out) < 3 and rest:
        c = max(rest, key=lambda c: c.batch_size)
        out.append(("largest batch", c))
        rest.remove(c)
    return out


def measure(model: Any, ds: Any, e: Any, c: Candidate, target: np.ndarray, reps: int, seed: int,
            steps: int | None = None) -> dict[str, Any]:
    """R repetitions of C chains at the candidate's burn-in and T: measured RMS relative error (and its SE)."""
    T = int(c.steps) if steps is None else steps
    burn = int(c.burn_in_steps)
    lam = c.step_matrix if c.lam_kind == "dense" else np.diag(c.step_matrix).copy()
    nrm = np.linalg.norm(target)
    sq, secs = [], 0.0
    for r in range(reps):
        t0 = time.perf_counter()
        res = run_chains(model, ds,
                         Dynamics(lam, c.batch_size, inv_temperature=c.inverse_temperature, momentum=c.momentum,
                                  batching=c.batching),
                         RunSpec(burn + T, n_chains=c.chains, burn_in=burn, batches_per_chain=1,
                                 seed=seed + 7919 * r),
                         initial=e.theta_hat)
        secs += time.perf_counter() - t0
        sq.append(float(np.sum((res.cov - target) ** 2)) / nrm ** 2)
    sq = np.array(sq)
    rms = math.sqrt(sq.mean())
    se = sq.std(ddof=1) / math.sqrt(reps) / (2 * rms) if reps > 1 else math.nan  # delta method
    pred = math.sqrt(c.covariance_error ** 2 + c.cov_mc_error_constant / (T * c.chains))
    return {"batch_size": c.batch_size, "family": c.family, "momentum": c.momentum, "chains": c.chains,
            "burn_in": burn, "steps": T, "bias": c.covariance_error, "c": c.cov_mc_error_constant,
            "measured_rms": rms, "measured_rms_se": se, "predicted_rms": pred, "ratio": rms / pred,
            "gradient_evaluations": c.chains * c.batch_size * (burn + T), "seconds_per_run": secs / reps,
            "predicted_seconds": c.predicted_seconds, "reps": reps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", choices=sorted(MODELS), default="hetero-linear")
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="logistic example, 3 repetitions of shortened runs")
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args(argv)
    problem, reps, steps, grid = args.problem, args.reps, None, {}
    if args.smoke:
        problem, reps, steps, grid = "logistic", 2, 1000, {"batch_sizes": (8, 32)}
    ds = example(problem)
    model = get_model(MODELS[problem])
    e = expand(model, ds)
    t0 = time.perf_counter()
    p = plan_run(model, ds, e, tolerance=args.tolerance, grid=PlanGrid(chains=args.chains, **grid),
                 timing=TimingOptions(enabled=not args.smoke, seed=args.seed))
    print(f"plan: {problem} (N = {ds.n_data}, D = {e.dim}), tolerance E = {args.tolerance:g}, C = {args.chains}: "
          f"{len(p.candidates)} candidates in {time.perf_counter() - t0:.2g} s", flush=True)
    if p.best is None:
        print("no feasible candidate", file=sys.stderr)
        return 1
    picks = choose(p)
    base = next((c for c in p.candidates if c.family == "scalar" and c.batch_size == 32 and c.momentum == 0
                 and c.batching == "replacement" and math.isinf(c.inverse_temperature)), None)
    if base is not None and base.feasible:
        picks.append(("baseline: B = 32, scalar", base))
    rows = []
    head = (f"{'configuration':<26} {'B':>4} {'family':<8} {'bias':>7} {'c':>8} {'burn':>6} {'T':>8} {'grads':>10} "
            f"{'measured RMS':>16} {'predicted':>9} {'ratio':>6} {'s/run':>7}")
    print(head)
    for label, c in picks:
        m = measure(model, ds, e, c, p.target_cov, reps, args.seed * 1000 + len(rows) * 97, steps)
        m["label"] = label
        rows.append(m)
        ok = "" if args.smoke else ("  ✓" if abs(m["ratio"] - 1) <= 0.25 else "  ✗")
        print(f"{label:<26} {m['batch_size']:>4} {m['family']:<8} {m['bias']:7.3g} {m['c']:8.4g} {m['burn_in']:>6} "
              f"{m['steps']:>8} {m['gradient_evaluations']:10.3g} {m['measured_rms']:8.4f} ± {m['measured_rms_se']:.4f} "
              f"{m['predicted_rms']:9.4f} {m['ratio']:6.3f} {m['seconds_per_run']:7.3g}{ok}", flush=True)
    summary: dict[str, Any] = {"problem": problem, "tolerance": args.tolerance, "chains": args.chains, "reps": reps,
                               "smoke": args.smoke, "rows": rows}
    rec = rows[0]
    if base is None:
        print("baseline B = 32 scalar: not in the grid")
    elif not base.feasible:
        print(f"baseline B = 32, scalar step: cannot reach E = {args.tolerance:g} at any length ({base.reason}); "
              f"the recommendation needs {rec['gradient_evaluations']:.3g} gradient evaluations")
        summary["saving"] = "inf"
    else:
        b = rows[-1]
        saving = b["gradient_evaluations"] / rec["gradient_evaluations"]
        tsave = b["seconds_per_run"] / rec["seconds_per_run"]
        print(f"cost saving vs 'B = 32, scalar step' at the same accuracy: {saving:.3g}× fewer gradient evaluations "
              f"({b['gradient_evaluations']:.3g} → {rec['gradient_evaluations']:.3g}), {tsave:.3g}× less wall time "
              f"per run ({b['seconds_per_run']:.3g} s → {rec['seconds_per_run']:.3g} s)")
        summary["saving"] = saving
        summary["time_saving"] = tsave
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)
    if args.plot:
        _plot(rows, args.plot, problem, args.tolerance)
    return 0


def _plot(rows: list[dict[str, Any]], path: str, problem: str, E: float) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained", dpi=110)
    a, b = fig.subplots(1, 2)
    x = np.arange(len(rows))
    short = {"recommended": "recommended", "dense, B nearest 32": "dense, B≈32", "cheapest other family": "other family",
             "largest batch": "largest B", "baseline: B = 32, scalar": "baseline"}
    labels = [f"{short.get(r['label'], r['label'])}\nB = {r['batch_size']}, {r['family']}" for r in rows]
    a.bar(x - 0.2, [r["predicted_rms"] for r in rows], 0.4, label="predicted √(b² + c/(T·C))", color="#0072B2")
    a.bar(x + 0.2, [r["measured_rms"] for r in rows], 0.4, yerr=[2 * r["measured_rms_se"] for r in rows],
          label=f"measured RMS ({rows[0]['reps']} runs, ±2 SE)", color="#E69F00")
    a.axhline(E, color="k", linestyle="--", linewidth=1, label=f"tolerance E = {E:g}")
    a.set_xticks(x, labels, fontsize=8)
    a.set_ylabel("RMS relative covariance error")
    a.legend(fontsize=8)
    b.bar(x, [r["gradient_evaluations"] for r in rows], color="#009E73")
    b.set_xticks(x, labels, fontsize=8)
    b.set_ylabel("gradient evaluations C·B·(burn-in + T)")
    fig.suptitle(f"sgtune plan evidence: {problem}, planned runs at their T and C")
    fig.savefig(path)


if __name__ == "__main__":
    sys.exit(main())
