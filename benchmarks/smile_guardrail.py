"""The anchored SMILE tuner's guardrail (the SMILE paper's eq. (6)): as printed, off, or with an absolute floor.

Run: ``python benchmarks/smile_guardrail.py [--steps N] [--floors 0,3,inf] [--cells gaussian/diagonal,...]
[--skip-glm] [--out FILE.json]`` (``--from-json FILE`` re-renders a saved run).

The guardrail rejects a step whose |ΔE| exceeds the κ = 0.98 quantile of the Gamma fitted online to the chain's own
|ΔE|: a relative threshold, so it rejects ≈ 2 % of the steps at any step size, and a rejection restores θ and
zeroes the velocity (the next momentum map restarts it along the gradient). ``SmileOptions(guardrail_floor=k)``
rejects only if |ΔE| also exceeds k √(d v*), k times the energy error's scale at the anchored rule's fixed point
(E[ΔE²] = d v*): k = 0 is the guardrail as printed (the default), k = inf switches it off (a non-finite ΔE or a
diverging θ is still rejected). Measured for each k with the same seeds:

1. **Table 1 of the SMILE paper** (appendix-C 10-d targets and noises, 10 chains × N steps from ε₀ = best fixed
   step / 10, as ``benchmarks/smile_anchor.py``): b² ± bootstrap sd, the final ε (median over chains), the
   rejection fraction (median and max over chains), ε at a tenth, half and the end of the run (median over
   chains), and the fixed best step of the grid rerun with the same seeds (the baseline, same run).
2. **The bundled GLM examples** (batch 32, ε₀ = 0.05, 4 chains × N steps, burn-in N/10): ε, effective draws as a
   fraction of the draws, the rejection fraction and the prediction check (relative Frobenius error of the
   chains' covariance against (N H)⁻¹).
3. With ``--neck-seeds S`` (``benchmarks/results/smile_guardrail_neck.json``: ``--steps 20000 --skip-table
   --skip-glm --neck-seeds 6``): on the funnel with isotropic noise, S × 10 chains per sampler and floor, how many
   reach v < −10, the funnel's neck, where a chain's ε collapses and one such chain dominates a cell's b².
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler.registry import SmileOptions
from sgtune.sampler.smile_ensemble import run_smile_ensemble
from sgtune.sampler.targets import make_target

from smile_tuners import print_rows  # this directory: the one table printer of the SMILE benchmarks

RESULTS = Path(__file__).parent / "results"
GLMS = ("logistic", "poisson", "hetero-linear")


def _label(k: float) -> str:
    return "printed" if k == 0 else ("off" if math.isinf(k) else f"floor {k:g}")


def _cell(res, t) -> dict:
    tr = res.step_size_trace
    n = tr.shape[1]
    out = {"eps_final": float(np.median(res.final_step_size)),
           "eps_trace": [float(np.median(tr[:, max(i, 1) - 1])) for i in (n // 10, n // 2, n)],
           "rejection_median": float(np.median(res.rejection_fraction)),
           "rejection_max": float(res.rejection_fraction.max())}
    if np.any(res.diverged >= 0):
        out.update(b2=math.inf, sd=math.inf)
    else:
        est = res.b2(t, np.random.default_rng(2), 2000)
        out.update(b2=est.value, sd=est.bootstrap_std)
    return out


def table_part(steps: int, floors: list[float], cells: list[str] | None, seed: int = 1) -> list[dict]:
    from benchmarks.table1_smile import NOISES, TARGETS

    best = {(c["target"], c["noise"], c["sampler"]): c["best_step"]
            for c in json.loads((RESULTS / "table1_smile_1e6.json").read_text())["cells"] if "best_step" in c}
    rows = []
    for tg in TARGETS:
        for nz in NOISES:
            if cells and f"{tg}/{nz}" not in cells:
                continue
            t = make_target(tg, nz, seed=0)
            for pre in (False, True):
                name = "psmile" if pre else "smile"
                h = best[(tg, nz, name + "-naive")]
                run = RunSpec(steps, n_chains=10, seed=seed, thin=max(steps // 100, 1))
                row = {"target": tg, "noise": nz, "sampler": name, "best_step": h,
                       "fixed": _cell(run_smile_ensemble(t, h, run, SmileOptions(preconditioned=pre, tuned=False)), t)}
                for k in floors:
                    row[_label(k)] = _cell(run_smile_ensemble(t, h / 10, run, SmileOptions(
                        preconditioned=pre, guardrail_floor=k)), t)
                rows.append(row)
                print(tg, nz, name, {x: (round(v["b2"], 3), f"{v['rejection_median']:.1%}", f"{v['eps_final']:.2g}")
                                     for x, v in row.items() if isinstance(v, dict)}, flush=True)
    return rows


def neck_part(steps: int, floors: list[float], seeds: int) -> list[dict]:
    """The funnel with isotropic noise, ``seeds`` × 10 chains of N steps: how many chains reach v < −10 (the neck,
    where a chain's ε collapses and its b² explodes) and the median rejection fraction, per sampler and floor."""
    best = {(c["target"], c["noise"], c["sampler"]): c["best_step"]
            for c in json.loads((RESULTS / "table1_smile_1e6.json").read_text())["cells"] if "best_step" in c}
    t = make_target("funnel", "isotropic", seed=0)
    rows = []
    for pre in (False, True):
        name = "psmile" if pre else "smile"
        h = best[("funnel", "isotropic", name + "-naive")]
        for k in floors:
            trapped, rej = 0, []
            for seed in range(1, seeds + 1):
                r = run_smile_ensemble(t, h / 10, RunSpec(steps, n_chains=10, seed=seed, thin=max(steps // 20, 1)),
                                       SmileOptions(preconditioned=pre, guardrail_floor=k))
                trapped += int(np.sum(r.trace[:, :, 0].min(axis=1) < -10.0))
                rej.append(float(np.median(r.rejection_fraction)))
            rows.append({"sampler": name, "label": _label(k), "trapped": trapped, "chains": 10 * seeds,
                         "rejection_median": float(np.median(rej))})
            print(rows[-1], flush=True)
    return rows


def glm_part(steps: int, floors: list[float]) -> list[dict]:
    from smile_anchor import glm_chains  # this directory: the same GLM chains as smile_anchor.py's

    rows = []
    for name in GLMS:
        for k in floors:
            r, check, draws = glm_chains(name, steps, SmileOptions(guardrail_floor=k))
            rows.append({"problem": name, "label": _label(k), "eps_final": float(np.median(r.step_size_final)),
                         "ess_fraction": float(np.min(r.ess)) / draws,
                         "rejection_median": float(np.median(r.rejection_fraction)),
                         "rel_error": check.get("relative_frobenius_error"), "passed": check.get("passed")})
            print(rows[-1], flush=True)
    return rows


def _b2(c: dict) -> str:
    return f"{c['b2']:.3f} ± {c['sd']:.3f}" if math.isfinite(c["b2"]) else "diverged"


def _z(c: dict, ref: dict) -> float:
    if not math.isfinite(c["b2"]):
        return math.inf
    return (c["b2"] - ref["b2"]) / math.hypot(c["sd"], ref["sd"])


def meets(c: dict, ref: dict) -> bool:
    """"No worse than the best fixed step": z ≤ 2 and b² ≤ 2× the fixed step's (docs/benchmarks.md's count)."""
    return bool(_z(c, ref) <= 2 and c["b2"] <= 2 * ref["b2"])


def tables(out: dict) -> dict:
    labels = [_label(k) for k in out["floors"]]
    cmd = (f"python benchmarks/smile_guardrail.py --steps {out['steps']} --floors "
           + ",".join("inf" if math.isinf(k) else f"{k:g}" for k in out["floors"]))
    if out.get("cells"):
        cmd += " --cells " + ",".join(out["cells"])
    if out.get("seed", 1) != 1:
        cmd += f" --seed {out['seed']}"
    t = {}
    rows = out["table"]
    if rows:
        summary = "; ".join(f"{x}: {sum(meets(r[x], r['fixed']) for r in rows)} of {len(rows)} no worse than the fixed "
                            f"best step (z ≤ 2 and b² ≤ 2×), {sum(_z(r[x], r['fixed']) > 2 for r in rows)} worse by z > 2"
                            for x in labels)
        cols = ["target", "noise", "sampler", "fixed best step",
                *[f"{x}: b² (ε final, rejected median/max)" for x in labels]]
        body = [[r["target"], r["noise"], r["sampler"], _b2(r["fixed"]),
                 *[f"{_b2(r[x])} ({r[x]['eps_final']:.2g}, {r[x]['rejection_median']:.1%}/{r[x]['rejection_max']:.0%})"
                   for x in labels]] for r in rows]
        t["table1"] = {"command": cmd, "measured": f"10 chains × {out['steps']:g} steps from ε₀ = best step / 10; "
                       + summary, "columns": cols, "align": ["---"] * 3 + ["--:"] * (len(cols) - 3), "rows": body}
    if out.get("neck"):
        cols = ["sampler", "guardrail", "chains reaching v < −10", "rejected (median)"]
        body = [[r["sampler"], r["label"], f"{r['trapped']} of {r['chains']}", f"{r['rejection_median']:.1%}"]
                for r in out["neck"]]
        skip = ("" if rows else " --skip-table") + ("" if out["glm"] else " --skip-glm")
        t["neck"] = {"command": cmd + skip + f" --neck-seeds {out['neck_seeds']}",
                     "measured": f"funnel, isotropic noise, {out['neck_seeds']} seeds × 10 chains × {out['steps']:g} "
                     "steps from ε₀ = best step / 10", "columns": cols, "align": ["---", "---", "--:", "--:"],
                     "rows": body}
    if out["glm"]:
        cols = ["problem", "guardrail", "ε (final)", "ESS / draws", "rejected (median)", "rel. error to (NH)⁻¹",
                "prediction check"]
        body = [[r["problem"], r["label"], f"{r['eps_final']:.3g}", f"{r['ess_fraction']:.2%}",
                 f"{r['rejection_median']:.1%}", "n/a" if r["rel_error"] is None else f"{r['rel_error']:.3f}",
                 "n/a" if r["passed"] is None else ("pass" if r["passed"] else "fail")] for r in out["glm"]]
        t["glm"] = {"command": cmd, "measured": f"batch 32, ε₀ = 0.05, 4 chains × {out['steps']:g} steps (burn-in a "
                    "tenth); 2-core VM shared with other jobs", "columns": cols,
                    "align": ["---", "---"] + ["--:"] * (len(cols) - 2), "rows": body}
    return t


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100_000, help="steps per chain")
    ap.add_argument("--floors", default="0,3,inf", help="comma-separated guardrail_floor values (0: as printed, inf: off)")
    ap.add_argument("--cells", default="", help="comma-separated target/noise cells (default: all 12)")
    ap.add_argument("--seed", type=int, default=1, help="the Table-1 chains' seed (1: the seeds of smile_anchor.py)")
    ap.add_argument("--neck-seeds", type=int, default=0, help="also count funnel chains trapped in the neck over "
                    "this many seeds of 10 chains (0: skip)")
    ap.add_argument("--skip-table", action="store_true")
    ap.add_argument("--skip-glm", action="store_true")
    ap.add_argument("--out", default=None, help="write the rows and the docs tables as JSON")
    ap.add_argument("--from-json", default=None, help="re-render the tables of a file written by --out")
    args = ap.parse_args(argv)
    if args.from_json:
        out = json.loads(Path(args.from_json).read_text())
    else:
        floors = [float(x) for x in args.floors.split(",")]
        cells = [c for c in args.cells.split(",") if c]
        t0 = time.perf_counter()
        glm = [] if args.skip_glm else glm_part(args.steps, floors)
        t1 = time.perf_counter()
        table = [] if args.skip_table else table_part(args.steps, floors, cells, args.seed)
        neck = neck_part(args.steps, floors, args.neck_seeds) if args.neck_seeds else []
        out = {"steps": args.steps, "floors": floors, "cells": cells, "seed": args.seed, "glm": glm, "table": table,
               "neck": neck, "neck_seeds": args.neck_seeds,
               "seconds": {"glm": t1 - t0, "table": time.perf_counter() - t1}}
    out["tables"] = tables(out)
    for name, t in out["tables"].items():
        print(f"\n{name}: {t['measured']}")
        print_rows(t)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, default=float))
    return out


if __name__ == "__main__":
    main()
