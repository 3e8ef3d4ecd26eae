"""The best effective-draw fraction SMILE can reach on hetero-linear and a small network, at fixed steps and batches.

Run: ``python benchmarks/smile_mixing.py [--steps N] [--problems hetero-linear,mlp] [--out FILE.json]``
(``--from-json FILE`` re-renders a saved run).

Issue 36 asks the tuned chains to mix (effective draws ≥ 1 % of the draws). A step-size rule can only pick a step
size, so the best it can do is the best *fixed* step: this benchmark runs the untuned ``smile-naive`` sampler
(4 chains from θ̂ × N steps, burn-in N/10) over a grid of fixed ε at batch 32 and at larger
batches, and records for each run the effective draws as a fraction of the draws (the minimum over coordinates,
as the health check), E[ΔE²]/d, and the prediction check (the chains' covariance against (βH)⁻¹ at θ̂: the
posterior for hetero-linear's Gaussian model, a Laplace approximation for the network, which is no verdict on a
non-identifiable posterior). The anchored ``smile`` (the default tuner, ε₀ = 0.05) is run at each batch size
too. If no fixed step within the prediction check's tolerance reaches 1 %, no tuner at that batch size can.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler.registry import SmileOptions

from smile_tuners import print_rows  # this directory: the one table printer of the SMILE benchmarks


def problem(name: str) -> tuple:
    """(model, data, prior precision, expansion at θ̂) of a problem: hetero-linear, or the 5-3-1 network."""
    from sgtune.io.data import EXAMPLES, example
    from sgtune.models import expand, get_model
    from sgtune.models.mlp import make_mlp

    if name == "mlp":
        ds, model, pp = example("logistic"), make_mlp((3,), likelihood="bernoulli"), 1.0
    else:
        ds, model, pp = example(name), get_model(EXAMPLES[name][1]), 0.0
    return model, ds, pp, expand(model, ds, pp)


#: (batch size, fixed step sizes) per problem; the anchored smile runs at each batch size as well
GRIDS = {
    "hetero-linear": [(32, (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08)), (256, (0.005, 0.01, 0.02, 0.04, 0.08)),
                      (512, (0.005, 0.01, 0.02)), (1000, (0.005, 0.01, 0.02)), (2000, (0.01, 0.02, 0.04, 0.08, 0.16))],
    "mlp": [(32, (0.005, 0.01, 0.02, 0.04, 0.08, 0.16)), (256, (0.01, 0.02, 0.04, 0.08, 0.16)), (2000, (0.04, 0.08))],
}
LABELS = {"hetero-linear": "hetero-linear (D = 20)", "mlp": "mlp 5-3-1 (logistic data)"}


def run_one(name: str, prob: tuple, sampler: str, batch: int, eps: float, steps: int) -> dict:
    """One run of 4 chains from θ̂: effective draws, energy error, final ε, health and prediction check."""
    from sgtune.diagnostics.health import chain_health
    from sgtune.sampler import run_chains
    from sgtune.workflows.verify import chain_prediction, prediction_check

    model, ds, pp, e = prob
    n = float(ds.n_data)
    r = run_chains(model, ds, Dynamics(eps, batch, inv_temperature=n), RunSpec(steps, n_chains=4, burn_in=steps // 10,
                   seed=3, thin=steps // 10), SmileOptions(tuned=sampler == "smile"), initial=e.theta_hat, prior_precision=pp)
    cov, _ = chain_prediction(e, eps, sampler="smile", batch_size=batch, inv_temperature=n, n_data=ds.n_data)
    pc = prediction_check(r, cov, mode="posterior") or {}
    draws = 4 * (steps - steps // 10)
    ess = np.asarray(r.ess, dtype=float)
    row = {"problem": name, "sampler": sampler, "batch": batch, "eps0": eps,
           "eps_final": float(np.median(r.step_size_final)),
           "energy_var_per_dim": float(np.mean(r.energy_error_var_per_dim)),
           "ess_fraction": float(ess.min()) / draws, "ess_argmin": r.parameter_names[int(ess.argmin())],
           "norm_theta_hat": float(np.linalg.norm(e.theta_hat)),
           "norm_trace": np.median(np.linalg.norm(r.trace, axis=2), axis=0).tolist(),
           "eps_trace": (np.median(r.step_size_trace, axis=0).tolist() if r.step_size_trace is not None else None),
           "ess_median_fraction": float(np.median(ess)) / draws,
           "frozen": bool(chain_health(r, initial_step_size=eps).frozen),
           "rel_error": pc.get("relative_frobenius_error"), "passed": pc.get("passed")}
    print(row, flush=True)
    return row


def run_all(steps: int, problems: list[str], batches: list[int] | None = None) -> list[dict]:
    rows = []
    for p in problems:
        prob = problem(p)
        for batch, grid in GRIDS[p]:
            if batches and batch not in batches:
                continue
            rows += [run_one(p, prob, "smile-naive", batch, e, steps) for e in grid]
            rows.append(run_one(p, prob, "smile", batch, 0.05, steps))
    return rows


def best_rows(rows: list[dict]) -> list[dict]:
    """Per problem and batch: the fixed step with the most effective draws among those that pass the check."""
    out = []
    for key in sorted({(r["problem"], r["batch"]) for r in rows}):
        ok = [r for r in rows if (r["problem"], r["batch"]) == key and r["sampler"] == "smile-naive" and r["passed"]]
        if ok:
            out.append(max(ok, key=lambda r: r["ess_fraction"]))
    return out


def tables(out: dict) -> dict:
    cols = ["problem", "sampler", "batch", "ε (fixed, or final)", "E[ΔE²]/d", "ESS / draws (min coord.)",
            "ESS / draws (median coord.)", "frozen", "prediction check (rel. error)"]
    body = []
    for r in out["rows"]:
        pc = "n/a" if r["passed"] is None else ("pass" if r["passed"] else "fail")
        if r["rel_error"] is not None:
            pc += f" ({r['rel_error']:.2f})"
        body.append([LABELS[r["problem"]], r["sampler"] if r["sampler"] == "smile-naive" else "smile (anchored)",
                     str(r["batch"]), f"{r['eps_final']:.3g}", f"{r['energy_var_per_dim']:.2g}",
                     f"{r['ess_fraction']:.3%}", f"{r['ess_median_fraction']:.2%}", "yes" if r["frozen"] else "no", pc])
    best = "; ".join(f"{LABELS[r['problem']]}, batch {r['batch']}: {r['ess_fraction']:.2%} at ε = {r['eps0']:g}"
                     for r in best_rows(out["rows"]))
    cmd = f"python benchmarks/smile_mixing.py --steps {out['steps']}"
    if out.get("problems", "hetero-linear,mlp") != "hetero-linear,mlp":
        cmd += f" --problems {out['problems']}"
    if out.get("batches"):
        cmd += " --batches " + ",".join(str(b) for b in out["batches"])
    return {"mixing": {"command": cmd,
                       "measured": f"4 chains × {out['steps']:g} steps (burn-in a tenth); best passing fixed step: "
                       + (best or "none passes"), "columns": cols,
                       "align": ["---", "---"] + ["--:"] * (len(cols) - 2), "rows": body}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100_000, help="steps per chain")
    ap.add_argument("--problems", default="hetero-linear,mlp", help="comma-separated, of " + ", ".join(GRIDS))
    ap.add_argument("--batches", default="", help="comma-separated batch sizes of GRIDS to run (default: all)")
    ap.add_argument("--out", default=None, help="write the rows and the docs table as JSON")
    ap.add_argument("--from-json", default=None, help="re-render the table of a file written by --out")
    args = ap.parse_args(argv)
    if args.from_json:
        out = json.loads(Path(args.from_json).read_text())
    else:
        t0 = time.perf_counter()
        batches = [int(b) for b in args.batches.split(",") if b]
        out = {"steps": args.steps, "problems": args.problems, "batches": batches,
               "rows": run_all(args.steps, args.problems.split(","), batches)}
        out["seconds"] = time.perf_counter() - t0
    out["tables"] = tables(out)
    t = out["tables"]["mixing"]
    print(f"\n{t['measured']}")
    print_rows(t)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, default=float))
    return out


if __name__ == "__main__":
    main()
