"""The anchored SMILE tuner with and without its noise term on the disputed Table-1 cells, at the paper's 10⁶ steps.

Run: ``python benchmarks/smile_noise_1e6.py [--steps N] [--out FILE.json]`` (≈ 2 minutes per run of 10 chains ×
10⁶ steps on a shared 2-core VM; 4 cells × 3 runs).

The cells where the anchored rule without the noise term was worse than the best fixed step at 10⁵ steps, or where
the noise term's smaller step had not moved the chains yet (``benchmarks/smile_anchor.py --noise-weights 0,1``):
b² ± bootstrap sd (10 chains, seed 1) of the fixed best step of the paper's grid
(``benchmarks/results/table1_smile_1e6.json``), and the anchored rule (v* = 5·10⁻⁵) from a tenth of it with
``noise_weight`` 0 and 1.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from sgtune.core.config import RunSpec
from sgtune.sampler.registry import SmileOptions
from sgtune.sampler.smile_ensemble import run_smile_ensemble
from sgtune.sampler.targets import make_target

RESULTS = Path(__file__).parent / "results"
CELLS = (("gaussian", "diagonal", "smile"), ("funnel", "diagonal", "smile"), ("rosenbrock", "diagonal", "smile"),
         ("gaussian", "correlated", "psmile"))


def _b2(c: dict) -> str:
    return f"{c['b2']:.3f} ± {c['sd']:.3f}"


def tables(out: dict) -> dict:
    cols = ["target", "noise", "sampler", "best step", "fixed best step", "anchored (ε final)",
            "anchored + noise term (ε final)"]
    rows = [[r["target"], r["noise"], r["sampler"], f"{r['best_step']:.3g}", _b2(r["fixed"]),
             f"{_b2(r['w0'])} ({r['w0']['eps_final']:.2g})", f"{_b2(r['w1'])} ({r['w1']['eps_final']:.2g})"]
            for r in out["rows"]]
    return {"cells": {"command": f"python benchmarks/smile_noise_1e6.py --steps {out['steps']}",
                      "measured": f"10 chains × {out['steps']:g} steps, seed 1; v* = 5e-05, ε₀ = best step / 10; "
                                  "2-core VM shared with other jobs",
                      "columns": cols, "align": ["---"] * 3 + ["--:"] * 4, "rows": rows}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--from-json", default=None, help="re-render the tables of a file written by --out")
    args = ap.parse_args(argv)
    if args.from_json:
        out = json.loads(Path(args.from_json).read_text())
        out["tables"] = tables(out)
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1))
        return out
    best = {(c["target"], c["noise"], c["sampler"]): c["best_step"]
            for c in json.loads((RESULTS / "table1_smile_1e6.json").read_text())["cells"] if "best_step" in c}
    rows = []
    for tg, nz, name in CELLS:
        t = make_target(tg, nz, seed=0)
        pre = name == "psmile"
        h = best[(tg, nz, name + "-naive")]
        row = {"target": tg, "noise": nz, "sampler": name, "best_step": h}
        for label, eps0, opts in (("fixed", h, SmileOptions(preconditioned=pre, tuned=False)),
                                  ("w0", h / 10, SmileOptions(preconditioned=pre, noise_weight=0.0)),
                                  ("w1", h / 10, SmileOptions(preconditioned=pre, noise_weight=1.0))):
            t0 = time.perf_counter()
            res = run_smile_ensemble(t, eps0, RunSpec(args.steps, n_chains=10, seed=1, thin=1000), opts)
            est = res.b2(t, np.random.default_rng(2), 2000)
            row[label] = {"b2": est.value, "sd": est.bootstrap_std, "eps_final": float(np.median(res.final_step_size)),
                          "rejection_max": float(res.rejection_fraction.max()), "seconds": time.perf_counter() - t0}
            print(tg, nz, name, label, row[label], flush=True)
        rows.append(row)
    out = {"steps": args.steps, "rows": rows}
    out["tables"] = tables(out)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
