"""Batch means with batches too short for the chain: how wrong are the standard errors, and when does the
batch-length test of the chain health (``sgtune.diagnostics.health.batch_length_test``) fire?

For each problem (bundled GLM examples, simulated and real linear regressions — a quadratic loss), a
scalar SGD/SGLD step chosen so that the linearised chain's worst integrated autocorrelation time τ
(``predict_stationary_cov(...).tau``, an independent route) is about 20 or 200 steps, C = 4 or 16 chains
of 300 τ steps and several seeds, run the chains with the default number of batches per chain and with
S batches per chain such that each batch is L = 20, 5, 2, 1, 0.3 or 0.1 τ long. Each row records the
standard errors the run reports against the true ones, √(Σ_ii τ_i / n) with the predicted Σ and τ
(``se_ratio``: the smallest over coordinates), and whether the batch-length test fired.

    python benchmarks/batch_length_table.py [--seeds 6] [--out benchmarks/results/batch_length.jsonl]
    python benchmarks/batch_length_table.py --table benchmarks/results/batch_length.jsonl   (docs/health.md)
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings

import numpy as np

from sgtune.core.config import Dynamics, RunSpec
from sgtune.core.errors import AccuracyWarning
from sgtune.diagnostics.health import batch_length_test
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains
from sgtune.theory.stationary import predict_stationary_cov

#: batch length in units of the predicted worst τ (None: the default S)
LENGTHS = (None, 20.0, 5.0, 2.0, 1.0, 0.3, 0.1)
TAUS = (20.0, 200.0)
CHAINS = (4, 16)
BATCH = 32


def problems():
    yield "logistic (example)", get_model("logistic"), example("logistic")
    yield "poisson (example)", get_model("poisson"), example("poisson")
    yield "hetero-linear (example, quadratic)", get_model("linear"), example("hetero-linear")
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2000, 4))
    yield "linear D=4 (simulated, quadratic)", get_model("linear"), make_dataset(X, X @ [1, -0.5, 0.3, 2] + rng.normal(size=2000))
    try:
        from sklearn.datasets import load_diabetes
    except ImportError:  # pragma: no cover - the [dev] extra installs scikit-learn
        return
    Xd, yd = load_diabetes(return_X_y=True)
    Xd = (Xd - Xd.mean(0)) / Xd.std(0)
    yd = (yd - yd.mean()) / yd.std()
    yield "diabetes, standardised (real, quadratic)", get_model("linear", noise_variance=0.5), make_dataset(Xd, yd)


def step_for(e, tau: float, beta: float):
    """A scalar step whose linearised chain has worst τ ≈ ``tau`` (τ ≈ 2/(hλ_min)), within the stable range."""
    lam = np.linalg.eigvalsh(e.hessian)
    h = min(2.0 / (tau * lam[0]), 0.5 / lam[-1])
    st = predict_stationary_cov(e, Dynamics(h, BATCH, inv_temperature=beta))
    return h, st


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        table(sys.argv[2])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    warnings.simplefilter("ignore", AccuracyWarning)
    rows = []
    for pname, model, data in problems():
        e = expand(model, data)
        n_data = data.n_data
        for tau_target, beta, sampler_name in ((TAUS[0], float(n_data), "SGLD"), (TAUS[1], math.inf, "SGD")):
            h, st = step_for(e, tau_target, beta)
            tau_pred = np.asarray(st.tau)
            tau_w = float(tau_pred.max())
            steps = int(300 * tau_w) + 1
            burn = steps // 10
            post = steps - burn
            for chains in CHAINS:
                for length in LENGTHS:
                    S = None if length is None else max(3, int(post // (length * tau_w)))
                    for seed in range(args.seeds):
                        tic = time.perf_counter()
                        res = run_chains(model, data, Dynamics(h, BATCH, inv_temperature=beta),
                                         RunSpec(steps, n_chains=chains, burn_in=burn, batches_per_chain=S, seed=seed),
                                         initial=e.theta_hat)
                        n = chains * post
                        se_true = np.sqrt(np.diag(st.cov) * tau_pred / n)
                        se_ratio = res.mean_standard_error / se_true
                        test = batch_length_test(res)
                        s_used = int(res.settings["batches_per_chain"])
                        row = {"problem": pname, "sampler": sampler_name, "tau_target": tau_target,
                               "tau_pred": tau_w, "chains": chains, "seed": seed, "length": length,
                               "batches_per_chain": s_used, "batch_over_tau": post / s_used / tau_w,
                               "se_ratio_min": float(se_ratio.min()), "se_ratio_median": float(np.median(se_ratio)),
                               "tested": test is not None, "flagged": bool(test is not None and not test["passed"]),
                               "ratio": None if test is None else test["ratio"],
                               "threshold": None if test is None else test["threshold"],
                               "tau_estimate": None if test is None else test["tau"],
                               "seconds": time.perf_counter() - tic}
                        rows.append(row)
                        print(f"{pname:40s} {sampler_name:4s} τ={tau_w:7.1f} C={chains:2d} S={s_used:5d} "
                              f"L/τ={row['batch_over_tau']:7.2f} seed={seed} se/true={row['se_ratio_min']:.2f}"
                              f"..{row['se_ratio_median']:.2f} flagged={row['flagged']!s:5s} "
                              f"ρ={row['ratio'] if row['ratio'] is not None else float('nan'):.2f}/"
                              f"{row['threshold'] if row['threshold'] is not None else float('nan'):.2f}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


def table(path: str) -> None:
    """The Markdown summary for docs/health.md: per batch length (in τ) and C, over problems, τ and seeds."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    print("| batches per chain | chains C | runs | batch length / τ (median) | reported / true standard error "
          "(median of the smallest; 10 % quantile) | tested | flagged |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for length in LENGTHS:
        for chains in CHAINS:
            sub = [r for r in rows if r["length"] == length and r["chains"] == chains]
            if not sub:
                continue
            se = np.array([r["se_ratio_min"] for r in sub])
            label = "default" if length is None else f"batches of {length:g} τ"
            print(f"| {label} | {chains} | {len(sub)} | {np.median([r['batch_over_tau'] for r in sub]):.3g} "
                  f"| {np.median(se):.2f}; {np.quantile(se, 0.1):.2f} | {sum(r['tested'] for r in sub)} "
                  f"| {sum(r['flagged'] for r in sub)} |")
    problems_ = sorted({r["problem"] for r in rows})
    print()
    print(f"*{len(rows)} runs on {len(problems_)} problems ({'; '.join(problems_)}), worst τ ≈ "
          f"{'/'.join(f'{t:g}' for t in TAUS)} steps (SGLD β = N / SGD), {len({r['seed'] for r in rows})} seeds each; "
          "τ and the true standard errors from the linearised chain's prediction.*")


if __name__ == "__main__":
    main()
