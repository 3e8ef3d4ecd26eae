"""A small BNN comparison (issue 11 item 4): pSMILE vs SMILE vs SGHMC vs SGLD at an equal gradient budget.

Run: ``python benchmarks/bnn_smile.py [--budget G] [--chains C] [--splits 0,1,2]
[--samplers psmile,smile,sghmc,sgld] [--smoke] [--out bnn.json]``.

Setting (:mod:`sgtune.workflows.bnn`, after the SMILE paper's (2025) Table 2 / appendix E.1): scikit-learn's diabetes
data (N = 442, p = 10; shipped, no download), 70/10/20 train/validation/test splits standardised on
the training rows; a tanh network with three hidden layers of width 16 (D = 737); Gaussian
likelihood with σ² fixed at the training mean squared residual of the starting members; prior
N(0, Γ⁻¹I) with Γ = 10 (``--prior-precision``; the paper's Γ = 1 makes this small-data posterior
overfit, see :mod:`sgtune.workflows.bnn`); 10 chains per sampler, each from its own L-BFGS fit
(deep-ensemble start, the same for every sampler); minibatch B = 32; every sampler spends G minibatch gradient
evaluations per chain (SGLD/SGHMC G steps, the SMILE family G/3 steps of the 3-gradient MN
integrator); half the steps are burn-in, 100 thinned draws per chain. Each sampler's step size
is the best validation LPPD over a grid of five values, each run for G/3 gradients (the same
effort for all). Metrics on the test rows, original units of the response: LPPD (higher is
better) and RMSE of the predictive mean (lower is better), mean ± sd over the splits.

Baseline, measured in the same run: the deep-ensemble start itself (the C starting members'
predictive, no sampling). CPU seconds are ``time.process_time`` of the final runs (all threads).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from sgtune.workflows import bnn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=int, default=30_000, help="gradient evaluations per chain (default 30000)")
    ap.add_argument("--chains", type=int, default=10)
    ap.add_argument("--splits", default="0,1,2")
    ap.add_argument("--samplers", default="psmile,smile,sghmc,sgld")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--prior-precision", type=float, default=10.0, help="Γ of the prior N(0, Γ⁻¹I) (default 10)")
    ap.add_argument("--start-iter", type=int, default=300,
                    help="L-BFGS iterations of the starting members (default 300; e.g. 20 = early stopping for Γ = 1)")
    ap.add_argument("--smoke", action="store_true", help="tiny run (2 chains, 1 split, budget 600)")
    ap.add_argument("--out", default=None, help="write the rows as JSON")
    a = ap.parse_args()
    samplers = tuple(s.strip() for s in a.samplers.split(",") if s.strip())
    splits = tuple(int(s) for s in a.splits.split(","))
    budget, chains, draws = a.budget, a.chains, 100
    grids = None
    if a.smoke:
        budget, chains, draws, splits = 600, 2, 10, splits[:1]
        grids = {s: bnn.DEFAULT_STEP_GRIDS[s][1:3] for s in samplers}
    print(f"BNN comparison: diabetes, mlp 16,16,16 (tanh), {chains} chains, B = {a.batch_size}, "
          f"{budget} gradient evaluations per chain, splits {splits}, prior precision {a.prior_precision:g}, "
          f"start: {a.start_iter} L-BFGS iterations", flush=True)
    t0 = time.perf_counter()
    c0 = time.process_time()

    def log(r: bnn.ComparisonRow) -> None:
        vals = " ".join(f"{v:.3f}" for v in r.val_lppd)
        eps = r.settings.get("step_size_final")
        extra = "" if eps is None else f"  final ε (median over chains) {np.median(eps):.3g}"
        print(f"  split {r.split} {r.sampler:<20} step {r.step:<8.3g} LPPD {r.test_lppd:8.4f} RMSE {r.test_rmse:7.3f} "
              f"diverged {r.n_diverged}  cpu {r.cpu_seconds:6.1f}s  RMS move from start "
              f"{r.settings.get('rms_move', float('nan')):.3g}{extra}  validation LPPD over the grid: [{vals}]",
              flush=True)

    rows, starts = bnn.compare_samplers(
        samplers, splits=splits,
        budget=bnn.ComparisonBudget(n_chains=chains, gradient_budget=budget, start_iter=a.start_iter),
        setup=bnn.NetworkSetup(batch_size=a.batch_size, draws_per_chain=draws, prior_precision=a.prior_precision),
        step_grids=grids, log=log)
    summ = bnn.summarise(rows)
    print()
    print(f"σ² (training MSR of the starts, standardised units; validation MSR in brackets): "
          + ", ".join(f"split {k}: {v.noise_variance:.3f} [{v.val_msr:.3f}]" for k, v in starts.items()))
    print()
    hdr = (f"| {'sampler':<20} | {'grads/chain':>11} | {'steps':>6} | {'step (per split)':<24} | "
           f"{'test LPPD ↑':>17} | {'test RMSE ↓':>15} | {'diverged':>8} | {'CPU s':>6} |")
    print(hdr)
    print("|" + "|".join("-" * (len(c)) for c in hdr.split("|")[1:-1]) + "|")
    for s, v in summ.items():
        rs = [r for r in rows if r.sampler == s]
        steps = ", ".join("—" if np.isnan(r.step) else f"{r.step:.3g}" for r in rs)
        print(f"| {s:<20} | {rs[0].gradient_evals_per_chain:>11} | {rs[0].n_steps:>6} | {steps:<24} | "
              f"{v['lppd_mean']:8.4f} ± {v['lppd_sd']:6.4f} | {v['rmse_mean']:7.3f} ± {v['rmse_sd']:5.3f} | "
              f"{sum(r.n_diverged for r in rs):>8} | {sum(r.cpu_seconds for r in rs):6.1f} |")
    best = max((s for s in summ if s != bnn.START_ROW), key=lambda s: summ[s]["lppd_mean"])
    print()
    print(f"best test LPPD among the samplers: {best}; baseline (deep-ensemble start) "
          f"{summ[bnn.START_ROW]['lppd_mean']:.4f}")
    print(f"total: wall {time.perf_counter() - t0:.0f} s, CPU {time.process_time() - c0:.0f} s")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"rows": [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.__dict__.items()
                                 if k != "settings"} for r in rows], "summary": summ}, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
