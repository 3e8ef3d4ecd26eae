"""SMILE's two step-size rules side by side (issue 36): the anchored tuner (default) and the paper's eq. (7).

Run: ``python benchmarks/smile_tuners.py [--steps N] [--table-steps M] [--skip-table] [--out FILE.json]``
(``--from-json FILE`` re-renders the tables of a saved run).

1. **ε over time on the bundled GLMs and a small network** (``sgtune run`` in-process, batch 32, 4 chains,
   N steps, burn-in 1000): for each rule and two initial steps 100× apart (0.002 and 0.2), the median over
   chains of ε at a few times, the band of ε over the second half (max/min over chains and both starts),
   the effective draws as a fraction of the draws, and the health check's verdict (its prediction check:
   the chains' covariance against (βH)⁻¹ at θ̂, exact for the Gaussian model, Laplace otherwise).
2. **Table 1 of the SMILE paper** (the appendix-C 10-d targets and noises, 10 chains, M steps): b² ± bootstrap
   sd of the anchored smile and psmile started 10× below and 10× above the best fixed step of the paper's grid
   search for smile-naive / psmile-naive (the best steps of ``benchmarks/results/table1_smile_1e6.json``, the
   grid at 10⁶ steps), against that fixed best step rerun here with the same seeds (the baseline, same run)
   and against the paper's Table 1 values for the naive samplers.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from sgtune.cli import main as cli_main
from sgtune.core.config import RunSpec
from sgtune.sampler.registry import SmileOptions
from sgtune.sampler.smile_ensemble import run_smile_ensemble
from sgtune.sampler.targets import make_target

RESULTS = Path(__file__).parent / "results"
PAPER_COLUMN = {"smile-naive": 0, "psmile-naive": 3}  # columns of table1_smile.PAPER
PROBLEMS = {
    "logistic": ["--example", "logistic"],
    "poisson": ["--example", "poisson"],
    "hetero-linear": ["--example", "hetero-linear"],
    "mlp 5-3-1 (logistic data)": ["--example", "logistic", "--model", "mlp", "--hidden-sizes", "3",
                                  "--likelihood", "bernoulli", "--prior-precision", "1"],
}
STARTS = (0.002, 0.2)
TIMES = (1000, 2000, 10_000, 50_000)


def run_glm(problem: list[str], tuner: str, eps0: float, steps: int, tmp: Path) -> dict:
    """One ``sgtune run`` of the tuned smile: its JSON and step-size trace (every 100 steps after burn-in)."""
    out = tmp / f"trace_{tuner}_{eps0}.npz"
    argv = ["run", *problem, "--sampler", "smile", "--tuner", tuner, "--batch-size", "32", "--step-size",
            str(eps0), "--steps", str(steps), "--burn-in", "1000", "--chains", "4", "--thin", "100", "-q",
            "-o", str(out), "--overwrite"]
    r = CliRunner().invoke(cli_main, argv)
    if r.exit_code not in (0, 4):
        raise RuntimeError(f"sgtune {' '.join(argv)} exited {r.exit_code}: {r.stderr}")
    doc = json.loads(r.stdout)
    with np.load(out) as z:
        trace = z["step_size_trace"]
    return {"doc": doc, "trace": trace}


def glm_part(steps: int, tmp: Path) -> list[dict]:
    rows = []
    for name, problem in PROBLEMS.items():
        for tuner in ("anchored", "paper"):
            runs = [run_glm(problem, tuner, e, steps, tmp) for e in STARTS]
            half = [r["trace"][:, r["trace"].shape[1] // 2:] for r in runs]
            lo, hi = min(float(h.min()) for h in half), max(float(h.max()) for h in half)
            for e, r in zip(STARTS, runs):
                h, doc = r["trace"], r["doc"]["health"]
                at = {t: float(np.median(h[:, max((t - 1000) // 100 - 1, 0)])) for t in TIMES if t <= steps}
                at[steps] = float(np.median(h[:, -1]))
                draws = 4 * (steps - 1000)
                rows.append({"problem": name, "tuner": tuner, "eps0": e, "eps_at": at, "band_second_half": hi / lo,
                             "ess_fraction": doc.get("ess_fraction", float("nan")) if "ess_fraction" in doc
                             else float(np.min(r["doc"]["ess"])) / draws,
                             "healthy": doc["healthy"], "frozen": doc["frozen"],
                             "prediction_passed": (doc.get("prediction_check") or {}).get("passed"),
                             "rel_error": (doc.get("prediction_check") or {}).get("relative_frobenius_error"),
                             "reasons": doc["reasons"]})
    return rows


def _at(row: dict, t: int) -> float:
    """ε at step t (keys are ints in memory, strings after a JSON round trip)."""
    at = row["eps_at"]
    return float(at[t] if t in at else at[str(t)])


def glm_table(rows: list[dict], steps: int) -> dict:
    """The measured table of the GLM part (columns and printed cells, ``make_docs_tables`` format)."""
    times = [t for t in TIMES if t <= steps] + [steps]
    cols = ["problem", "tuner", "ε₀", *[f"ε at t = {t:g}" for t in times], "band", "ESS / draws", "frozen",
            "prediction check (rel. error)"]
    out = []
    for r in rows:
        pc = "n/a" if r["prediction_passed"] is None else ("pass" if r["prediction_passed"] else "fail")
        if r["rel_error"] is not None:
            pc += f" ({r['rel_error']:.2f})"
        out.append([r["problem"], r["tuner"], f"{r['eps0']:g}", *[f"{_at(r, t):.3g}" for t in times],
                    f"{r['band_second_half']:.3g}", f"{r['ess_fraction']:.3%}", "yes" if r["frozen"] else "no", pc])
    return {"columns": cols, "align": ["---", "---"] + ["--:"] * (len(cols) - 2), "rows": out}


def print_rows(table: dict) -> None:
    widths = [max(len(str(c)) for c in col) + 2 for col in zip(table["columns"], *table["rows"])]
    for row in [table["columns"], *table["rows"]]:
        print("".join(f"{str(c):>{w}}" for c, w in zip(row, widths)))


def table_part(steps: int, chains: int) -> list[dict]:
    from benchmarks.table1_smile import NOISES, PAPER, TARGETS

    best = {(c["target"], c["noise"], c["sampler"]): c["best_step"]
            for c in json.loads((RESULTS / "table1_smile_1e6.json").read_text())["cells"] if "best_step" in c}
    rows = []
    for tg in TARGETS:
        for nz in NOISES:
            t = make_target(tg, nz, seed=0)
            for naive in ("smile-naive", "psmile-naive"):
                h = best[(tg, nz, naive)]
                pre = naive.startswith("p")
                run = RunSpec(steps, n_chains=chains, seed=1)
                row = {"target": tg, "noise": nz, "sampler": naive.replace("-naive", ""), "best_step": h,
                       "paper_naive": PAPER[(tg, nz)][PAPER_COLUMN[naive]]}
                for label, eps0, opts in (("fixed", h, SmileOptions(preconditioned=pre, tuned=False)),
                                          ("low", h / 10, SmileOptions(preconditioned=pre)),
                                          ("high", h * 10, SmileOptions(preconditioned=pre)),
                                          ("paper", h, SmileOptions(preconditioned=pre, tuner="paper"))):
                    res = run_smile_ensemble(t, eps0, run, opts)
                    if np.any(res.diverged >= 0):
                        row[label] = {"b2": math.inf, "sd": math.inf, "eps_final": float(np.median(res.final_step_size))}
                        continue
                    est = res.b2(t, np.random.default_rng(2), 2000)
                    row[label] = {"b2": est.value, "sd": est.bootstrap_std,
                                  "eps_final": float(np.median(res.final_step_size))}
                rows.append(row)
    return rows


def b2_table(rows: list[dict]) -> dict:
    """The measured table of the Table-1 part (``make_docs_tables`` format) and its z summary."""
    cols = ["target", "noise", "sampler", "fixed best step", "anchored from best/10", "anchored from best×10",
            "paper rule from best", "[paper, naive]", "best step", "ε anchored (final)", "ε paper rule (final)"]
    out = []
    for r in rows:
        cells = [f"{r[k]['b2']:.3f} ± {r[k]['sd']:.3f}" for k in ("fixed", "low", "high", "paper")]
        out.append([r["target"], r["noise"], r["sampler"], *cells, f"{r['paper_naive'][0]:.3f}",
                    f"{r['best_step']:.3g}", f"{r['low']['eps_final']:.3g}", f"{r['paper']['eps_final']:.3g}"])
    return {"columns": cols, "align": ["---"] * 3 + ["--:"] * (len(cols) - 3), "rows": out}


def b2_summary(rows: list[dict]) -> str:
    z = []
    for r in rows:
        for k in ("low", "high"):
            sd = math.hypot(r[k]["sd"], r["fixed"]["sd"])
            if math.isfinite(sd) and sd > 0:
                z.append((r[k]["b2"] - r["fixed"]["b2"]) / sd)
    z_arr = np.array(z)
    return (f"anchored − fixed best step, z = difference / combined bootstrap sd, over {z_arr.size} comparisons: "
            f"{int(np.sum(z_arr > 2))} worse (z > 2), {int(np.sum(z_arr < -2))} better (z < −2), "
            f"median z {np.median(z_arr):+.2f}")


def tables(out: dict) -> dict:
    """The results file's ``tables`` (``benchmarks/make_docs_tables.py`` renders them into the docs)."""
    cmd = (f"python benchmarks/smile_tuners.py --steps {out['steps']} --table-steps {out['table_steps']} "
           f"--chains {out['chains']}")
    t = {}
    if out["glm"]:
        t["glm"] = {"command": cmd, "measured": f"batch 32, 4 chains × {out['steps']:g} steps (burn-in 1000); ε median "
                    "over chains; band: max/min of ε over the second half, both starts; 2-core VM shared with other "
                    "jobs", **glm_table(out["glm"], out["steps"])}
    if out["table"]:
        t["table1"] = {"command": cmd, "measured": f"{out['chains']} chains × {out['table_steps']:g} steps; "
                       + b2_summary(out["table"]), **b2_table(out["table"])}
    return t


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100_000, help="steps per chain of the GLM runs")
    ap.add_argument("--table-steps", type=int, default=200_000, help="steps per chain of the Table-1 runs")
    ap.add_argument("--chains", type=int, default=10, help="chains of the Table-1 runs")
    ap.add_argument("--skip-table", action="store_true")
    ap.add_argument("--skip-glm", action="store_true")
    ap.add_argument("--out", default=None, help="write the rows and the docs tables as JSON")
    ap.add_argument("--from-json", default=None, help="re-render the tables of a file written by --out")
    args = ap.parse_args(argv)
    import tempfile

    if args.from_json:  # re-render the tables of a saved run
        out = json.loads(Path(args.from_json).read_text())
    else:
        t0 = time.perf_counter()
        glm = []
        if not args.skip_glm:
            with tempfile.TemporaryDirectory() as tmp:
                glm = glm_part(args.steps, Path(tmp))
            print(f"(GLM part: {time.perf_counter() - t0:.0f} s)", flush=True)
        table = []
        if not args.skip_table:
            t1 = time.perf_counter()
            table = table_part(args.table_steps, args.chains)
            print(f"(Table-1 part: {time.perf_counter() - t1:.0f} s)")
        out = {"steps": args.steps, "table_steps": args.table_steps, "chains": args.chains, "glm": glm,
               "table": table}
    out["tables"] = tables(out)
    for name, t in out["tables"].items():
        print(f"\n{name}: {t['measured']}")
        print_rows(t)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, default=float))
    return out


if __name__ == "__main__":
    main()
