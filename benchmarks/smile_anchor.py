"""The anchored SMILE tuner's target v* = ``energy_var_target`` across problems: what a lower anchor buys and costs.

Run: ``python benchmarks/smile_anchor.py [--steps N] [--targets 5e-4,5e-5,5e-6] [--noise-weights 0,1]
[--out FILE.json]`` (``--from-json FILE`` re-renders the tables of a saved run). ``--noise-weights`` runs every
target with each ``SmileOptions.noise_weight`` (the anchored rule's noise term; 0: off, the default);
``benchmarks/results/smile_noise.json`` is ``--targets 5e-4,5e-5 --noise-weights 0,1``.

The anchor fixes E[ΔE²]/d, and E[ΔE²] ∝ ε⁶ (the minimal-norm integrator's error on the step's own potential,
also under minibatch noise), so ε* ∝ v*^{1/6}: 10× lower v* is a 1.47× smaller step. What the energy error does
not see is the bias the noise causes between steps (``sgtune.sampler.smile.anchored_update``, "What ΔE measures
under minibatch noise"); a smaller step reduces that bias, and on some targets it lets the chain reach regions
where the step then shrinks without end. Measured here, for each v*, with the same seeds:

1. **Table 1 of the SMILE paper** (the appendix-C 10-d targets and noises, 10 chains × N steps): b² ± bootstrap sd
   of the anchored smile and psmile started at a tenth of the best fixed step of the paper's grid search
   (``benchmarks/results/table1_smile_1e6.json``), the final ε (median over chains), the largest rejection
   fraction of a chain, and the fixed best step rerun here with the same seeds (the baseline, same run).
2. **The bundled GLM examples** (batch 32, ε₀ = 0.05, 4 chains × N steps, burn-in N/10): ε, E[ΔE²]/d, the
   effective draws as a fraction of the draws, and the relative Frobenius error of the chains' covariance
   against the posterior covariance (N H)⁻¹ at θ̂ (β = N) with the prediction check's verdict
   (:func:`sgtune.workflows.verify.prediction_check`, 5 % model error plus Monte Carlo error).
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


def _label(v: float | tuple[float, float]) -> str:
    """The column label of a configuration: v*, or (v*, the noise weight w of ``SmileOptions.noise_weight``)."""
    if isinstance(v, (tuple, list)):
        return f"{v[0]:.0e}" if v[1] == 0 else f"{v[0]:.0e}, w = {v[1]:g}"
    return f"{v:.0e}"


#: ``SmileOptions.refresh_length`` of the anchored runs (``--refresh``; None: the library's default)
REFRESH: list = [None]
#: ``SmileOptions.noise_bias`` of the anchored runs (``--noise-bias``; None: the library's default)
NOISE_BIAS: list = [None]


def _options(pre: bool, v: float | tuple[float, float]) -> SmileOptions:
    vs, w = (v[0], v[1]) if isinstance(v, (tuple, list)) else (v, 0.0)
    return SmileOptions(preconditioned=pre, energy_var_target=vs, noise_weight=w, refresh_length=REFRESH[0],
                        noise_bias=NOISE_BIAS[0])


def table_part(steps: int, chains: int, targets: list[float]) -> list[dict]:
    from benchmarks.table1_smile import NOISES, TARGETS

    best = {(c["target"], c["noise"], c["sampler"]): c["best_step"]
            for c in json.loads((RESULTS / "table1_smile_1e6.json").read_text())["cells"] if "best_step" in c}
    rows = []
    for tg in TARGETS:
        for nz in NOISES:
            t = make_target(tg, nz, seed=0)
            for pre in (False, True):
                name = "psmile" if pre else "smile"
                h = best[(tg, nz, name + "-naive")]
                run = RunSpec(steps, n_chains=chains, seed=1)
                row = {"target": tg, "noise": nz, "sampler": name, "best_step": h}
                runs = [("fixed", h, SmileOptions(preconditioned=pre, tuned=False))]
                runs += [(_label(v), h / 10, _options(pre, v)) for v in targets]
                for label, eps0, opts in runs:
                    res = run_smile_ensemble(t, eps0, run, opts)
                    cell = {"eps_final": float(np.median(res.final_step_size)),
                            "rejection_max": float(res.rejection_fraction.max())}
                    if np.any(res.diverged >= 0):
                        cell.update(b2=math.inf, sd=math.inf)
                    else:
                        est = res.b2(t, np.random.default_rng(2), 2000)
                        cell.update(b2=est.value, sd=est.bootstrap_std)
                    row[label] = cell
                rows.append(row)
                print(tg, nz, name, {k: round(v["b2"], 3) for k, v in row.items() if isinstance(v, dict)}, flush=True)
    return rows


def glm_chains(name: str, steps: int, options: SmileOptions) -> tuple:
    """The bundled GLM example ``name`` from θ̂ (batch 32, β = N, 4 chains, burn-in a tenth, seed 3) with the SMILE
    ``options``: (the chains' result, their prediction check against (βH)⁻¹ at θ̂, the kept draws). Shared with
    ``smile_guardrail.py``."""
    from sgtune.io.data import EXAMPLES, example
    from sgtune.models import expand, get_model
    from sgtune.sampler import run_chains
    from sgtune.workflows.verify import prediction_check

    ds, model = example(name), get_model(EXAMPLES[name][1])
    e = expand(model, ds)
    posterior = np.linalg.inv(ds.n_data * e.hessian)
    r = run_chains(model, ds, Dynamics(0.05, 32, inv_temperature=float(ds.n_data)),
                   RunSpec(steps, n_chains=4, burn_in=steps // 10, seed=3), options, initial=e.theta_hat)
    return r, prediction_check(r, posterior, mode="posterior") or {}, 4 * (steps - steps // 10)


def glm_part(steps: int, targets: list[float]) -> list[dict]:
    rows = []
    for name in GLMS:
        for v in targets:
            r, check, draws = glm_chains(name, steps, _options(False, v))
            rows.append({"problem": name, "target": v, "label": _label(v), "eps_final": float(np.median(r.step_size_final)),
                         "energy_var_per_dim": float(np.mean(r.energy_error_var_per_dim)),
                         "ess_fraction": float(np.min(r.ess)) / draws,
                         "rejection_max": float(np.max(r.rejection_fraction)),
                         "rel_error": check.get("relative_frobenius_error"), "passed": check.get("passed")})
            print(rows[-1], flush=True)
    return rows


def _b2(cell: dict) -> str:
    return f"{cell['b2']:.3f} ± {cell['sd']:.3f}" if math.isfinite(cell["b2"]) else "diverged"


def b2_table(rows: list[dict], targets: list[float]) -> dict:
    labels = [_label(v) for v in targets]
    cols = ["target", "noise", "sampler", "fixed best step", *[f"v* = {x}: b² (ε final, max rejection)" for x in labels]]
    out = []
    for r in rows:
        out.append([r["target"], r["noise"], r["sampler"], _b2(r["fixed"]),
                    *[f"{_b2(r[x])} ({r[x]['eps_final']:.2g}, {r[x]['rejection_max']:.0%})" for x in labels]])
    return {"columns": cols, "align": ["---"] * 3 + ["--:"] * (len(cols) - 3), "rows": out}


def b2_summary(rows: list[dict], targets: list[float]) -> str:
    parts = []
    for v in targets:
        x = _label(v)
        z = np.array([(r[x]["b2"] - r["fixed"]["b2"]) / math.hypot(r[x]["sd"], r["fixed"]["sd"])
                      if math.isfinite(r[x]["b2"]) else math.inf for r in rows])
        stuck = sum(not r[x]["b2"] < 100 for r in rows)
        meets = sum(bool(zz <= 2 and r[x]["b2"] <= 2 * r["fixed"]["b2"]) for zz, r in zip(z, rows))
        parts.append(f"v* = {x}: {int(np.sum(z > 2))} of {z.size} worse than the fixed best step (z > 2), "
                     f"{int(np.sum(z < -2))} better, {stuck} with b² > 100 (chains stuck far out), "
                     f"{meets} no worse (z ≤ 2 and b² ≤ 2× the fixed step's)")
    return "; ".join(parts)


def glm_table(rows: list[dict]) -> dict:
    cols = ["problem", "v*", "ε (final)", "E[ΔE²]/d", "ESS / draws", "max rejection", "rel. error to (NH)⁻¹",
            "prediction check"]
    out = [[r["problem"], r.get("label", _label(r["target"])), f"{r['eps_final']:.3g}", f"{r['energy_var_per_dim']:.2g}",
            f"{r['ess_fraction']:.2%}", f"{r['rejection_max']:.1%}",
            "n/a" if r["rel_error"] is None else f"{r['rel_error']:.3f}",
            "n/a" if r["passed"] is None else ("pass" if r["passed"] else "fail")] for r in rows]
    return {"columns": cols, "align": ["---", "---"] + ["--:"] * (len(cols) - 2), "rows": out}


def tables(out: dict) -> dict:
    vs = sorted({v[0] if isinstance(v, (tuple, list)) else v for v in out["targets"]}, reverse=True)
    ws = sorted({v[1] if isinstance(v, (tuple, list)) else 0.0 for v in out["targets"]})
    cmd = f"python benchmarks/smile_anchor.py --steps {out['steps']} --targets {','.join(_label(v) for v in vs)}"
    if ws != [0.0]:
        cmd += f" --noise-weights {','.join(f'{w:g}' for w in ws)}"
    # (results recorded before --refresh existed have no "refresh" key: they ran without the refresh, and their
    # command is kept as it was then)
    if out.get("refresh") not in (None, "auto"):
        cmd += f" --refresh {out['refresh']}"
    # (results recorded before --noise-bias existed have no "noise_bias" key: they ran without the cap)
    if out.get("noise_bias") not in (None, "default"):
        cmd += f" --noise-bias {out['noise_bias']}"
    t = {}
    if out["table"]:
        t["table1"] = {"command": cmd, "measured": f"10 chains × {out['steps']:g} steps from ε₀ = best step / 10; "
                       + b2_summary(out["table"], out["targets"]), **b2_table(out["table"], out["targets"])}
    if out["glm"]:
        t["glm"] = {"command": cmd, "measured": f"batch 32, ε₀ = 0.05, 4 chains × {out['steps']:g} steps (burn-in "
                    "a tenth); 2-core VM shared with other jobs", **glm_table(out["glm"])}
    return t


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100_000, help="steps per chain")
    ap.add_argument("--targets", default="5e-4,5e-5,5e-6", help="comma-separated energy_var_target values")
    ap.add_argument("--noise-weights", default="0", help="comma-separated noise_weight values (0: the noise cap off)")
    ap.add_argument("--refresh", default=None, help="refresh_length of the anchored runs (auto, off or a length; "
                    "default: the library's, auto)")
    ap.add_argument("--noise-bias", default=None, help="noise_bias of the anchored runs (a number or off; default: "
                    "the library's)")
    ap.add_argument("--skip-table", action="store_true")
    ap.add_argument("--skip-glm", action="store_true")
    ap.add_argument("--out", default=None, help="write the rows and the docs tables as JSON")
    ap.add_argument("--from-json", default=None, help="re-render the tables of a file written by --out")
    args = ap.parse_args(argv)
    REFRESH[0] = args.refresh
    NOISE_BIAS[0] = args.noise_bias
    if args.from_json:
        out = json.loads(Path(args.from_json).read_text())
    else:
        weights = [float(x) for x in args.noise_weights.split(",")]
        targets = [(float(x), w) for x in args.targets.split(",") for w in weights]
        t0 = time.perf_counter()
        glm = [] if args.skip_glm else glm_part(args.steps, targets)
        t1 = time.perf_counter()
        table = [] if args.skip_table else table_part(args.steps, 10, targets)
        out = {"steps": args.steps, "targets": targets, "refresh": args.refresh or "auto",
               "noise_bias": args.noise_bias or "default", "glm": glm, "table": table,
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
