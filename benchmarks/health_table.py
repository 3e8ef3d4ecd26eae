"""Chain-health indicators on healthy and broken runs: how often does each one fire?

For each problem (bundled examples, simulated and real data), sampler and seed, run the chains the
way the CLI does and record the indicators of :func:`sgtune.diagnostics.health.chain_health`: the
smallest tuned-step ratio, ESS and its fraction of the draws, the half-split |t| against its
threshold, and the prediction check's max |z| against its threshold. "healthy" runs use the default
run length of ``sgtune verify``; "broken" ones are deliberately too short (no burn-in, a fraction of
the equilibration time), too hot (a step beyond the stable range) or the frozen pSMILE of issue 19.

    python benchmarks/health_table.py [--seeds 4] [--out benchmarks/results/health.jsonl]
    python benchmarks/health_table.py --table benchmarks/results/health.jsonl   (docs/guide/applicability.md)

Prints one row per run and a summary: the false-alarm rate of each indicator on the healthy runs and
its detection rate on the broken ones.
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
from sgtune.sampler.registry import options_for
from sgtune.core.errors import AccuracyWarning
from sgtune.diagnostics.health import ESS_MIN, chain_health
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains
from sgtune.workflows.verify import chain_prediction, default_run_length, prediction_check
from sgtune.theory.stationary import equilibration_steps
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics


def problems():
    yield "logistic (example)", get_model("logistic"), example("logistic")
    yield "poisson (example)", get_model("poisson"), example("poisson")
    yield "hetero-linear (example)", get_model("linear"), example("hetero-linear")
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2000, 4))
    yield "linear N=2000 D=4 (simulated)", get_model("linear"), make_dataset(X, X @ [1, -0.5, 0.3, 2] + rng.normal(size=2000))
    X = rng.normal(size=(1000, 8)) @ np.diag([1, 1, 1, 1, 3, 3, 0.3, 0.3])
    p = 1 / (1 + np.exp(-(X @ (0.3 * rng.normal(size=8)))))
    yield "logistic D=8 scaled (simulated)", get_model("logistic"), make_dataset(X, (rng.random(1000) < p) * 1.0)
    try:
        from sklearn.datasets import load_diabetes
    except ImportError:  # pragma: no cover - the [dev] extra installs scikit-learn
        return
    Xd, yd = load_diabetes(return_X_y=True)
    Xd = (Xd - Xd.mean(0)) / Xd.std(0)
    yd = (yd - yd.mean()) / yd.std()
    yield "diabetes, standardised (real)", get_model("linear", noise_variance=0.5), make_dataset(Xd, yd)


def configs(e, n):
    """(label, kind, kwargs for run_chains, initial step for SMILE) — kind 'healthy' or 'broken'."""
    B = 32
    for target, beta in (("sandwich", math.inf), ("sandwich", 4.0 * n)):
        try:
            t = tune(e, Dynamics(None, B, inv_temperature=beta), target=target)
        except Exception:  # an unreachable target at this β: nothing to run
            continue
        steps, burn = default_run_length(t.tau_worst)
        name = "SGD" if math.isinf(beta) else "SGLD"
        yield (f"{name} tuned ({target})", "healthy",
               dict(step_matrix=t.step_matrix, inv_temperature=beta, n_steps=steps, burn_in=burn), None)
        if target == "sandwich":
            eq = equilibration_steps(t.stationary.spectral_radius)
            short = max(200, eq // 5)
            yield (f"{name} tuned, eq/5 = {short} steps, no burn-in", "broken",
                   dict(step_matrix=t.step_matrix, inv_temperature=beta, n_steps=short, burn_in=0), None)
    lam_max = float(np.linalg.eigvalsh(e.hessian)[-1])
    h = 0.5 / lam_max
    yield ("SGLD scalar 0.5/λmax", "healthy",
           dict(step_matrix=h, inv_temperature=float(n), n_steps=default_run_length(1 / (h * float(np.linalg.eigvalsh(e.hessian)[0])))[0]),
           None)
    yield ("SGLD scalar 3/λmax (unstable)", "broken", dict(step_matrix=3.0 / lam_max, inv_temperature=float(n), n_steps=20000), None)
    for sampler in ("smile", "psmile"):
        yield (f"{sampler} ε=0.05, B=32, 40k steps", "broken", dict(step_matrix=0.05, sampler=sampler, n_steps=40000), 0.05)
        yield (f"{sampler} ε=0.05, B=N, 20k steps", "healthy?",
               dict(step_matrix=0.05, sampler=sampler, n_steps=20000, batch_size=n), 0.05)
    yield ("smile-naive ε=0.05, B=32, 40k steps", "healthy?", dict(step_matrix=0.05, sampler="smile-naive", n_steps=40000), 0.05)


def table(path: str) -> None:
    """The Markdown summary of docs/guide/applicability.md: one row per configuration, over problems and seeds."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    order: list[str] = []
    for r in rows:
        key = r["config"].split(", eq/5")[0] + (", eq/5 steps, no burn-in" if "eq/5" in r["config"] else "")
        r["group"] = key
        if key not in order:
            order.append(key)
    problems = sorted({r["problem"] for r in rows})
    print("| configuration | kind | runs | flagged | frozen | non-stationary | prediction failed | ESS < 100 "
          "| max \\|t\\| / threshold | prediction error (median) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in order:
        sub = [r for r in rows if r["group"] == key]
        ran = [r for r in sub if "refused" not in r]
        refused = len(sub) - len(ran)
        ratio = max((r["t_max"] / r["t_threshold"] for r in ran if r.get("t_max") is not None), default=float("nan"))
        errs = [r["prediction_error"] for r in ran if r.get("prediction_error") is not None]
        med = f"{np.median(errs):.3f}" if errs else "—"
        flagged = sum(not r["healthy"] for r in ran)
        note = f" (+{refused} refused: all chains diverged)" if refused else ""
        print(f"| {key} | {sub[0]['kind']} | {len(ran)}{note} | {flagged} | {sum(r['frozen'] for r in ran)} "
              f"| {sum(bool(r['nonstationary']) for r in ran)} | {sum(r['prediction_passed'] is False for r in ran)} "
              f"| {sum((r['ess_min'] or 0) < ESS_MIN for r in ran)} | {ratio:.2f} | {med} |")
    print()
    print(f"*{len(rows)} runs of 16 chains on {len(problems)} problems ({'; '.join(problems)}), "
          f"{len({r['seed'] for r in rows})} seeds each.*")


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        table(sys.argv[2])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--chains", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    warnings.simplefilter("ignore", AccuracyWarning)
    for pname, model, data in problems():
        e = expand(model, data)
        n = data.n_data
        for label, kind, kw, eps0 in configs(e, n):
            for seed in range(args.seeds):
                tic = time.perf_counter()
                sampler = kw.get("sampler", "sgld")
                beta = kw.get("inv_temperature", float(n))
                try:
                    res = run_chains(model, data,
                                     Dynamics(kw["step_matrix"], kw.get("batch_size", 32), inv_temperature=beta),
                                     RunSpec(kw["n_steps"], n_chains=args.chains, burn_in=kw.get("burn_in"),
                                             seed=seed),
                                     options_for(sampler), initial=e.theta_hat)
                except Exception as exc:  # an unstable step is refused before running: that is "caught"
                    rows.append({"problem": pname, "config": label, "kind": kind, "seed": seed, "refused": str(exc)[:80]})
                    print(f"{pname:34s} {label:40s} {seed}  refused: {str(exc)[:60]}")
                    continue
                pred, mode = chain_prediction(e, kw["step_matrix"], sampler=sampler, batch_size=kw.get("batch_size", 32),
                                              inv_temperature=beta, n_data=n)
                check = prediction_check(res, pred, mode=mode)
                hl = chain_health(res, initial_step_size=eps0, prediction_check=check)
                hs = hl.details.get("half_split") or {}
                row = {"problem": pname, "config": label, "kind": kind, "seed": seed, "healthy": hl.healthy,
                       "diverged": hl.diverged, "frozen": hl.frozen, "nonstationary": hl.nonstationary,
                       "step_ratio": hl.details.get("step_size_ratio_min"), "ess_min": hl.details.get("ess_min"),
                       "ess_fraction": hl.details.get("ess_fraction"), "t_max": hs.get("t_max"),
                       "t_threshold": hs.get("threshold"),
                       "z_max": None if check is None else check.get("z_max"),
                       "z_threshold": None if check is None else check.get("threshold"),
                       "prediction_error": None if check is None else check.get("relative_frobenius_error"),
                       "prediction_passed": None if check is None else check["passed"],
                       "steps": res.n_steps, "seconds": time.perf_counter() - tic}
                rows.append(row)
                print(f"{pname:34s} {label:40s} {seed}  healthy={hl.healthy!s:5s} div={hl.diverged} "
                      f"frozen={hl.frozen!s:5s} ns={hs.get('t_max', float('nan')):6.2f}/{hs.get('threshold', float('nan')):.2f} "
                      f"ess={row['ess_min'] or float('nan'):9.1f} ({(row['ess_fraction'] or float('nan')):.2e}) "
                      f"pred={row['z_max'] if row['z_max'] is not None else float('nan'):7.2f}/"
                      f"{row['z_threshold'] if row['z_threshold'] is not None else float('nan'):.2f} "
                      f"err={row['prediction_error'] if row['prediction_error'] is not None else float('nan'):.3f} "
                      f"ratio={row['step_ratio'] if row['step_ratio'] is not None else float('nan'):.2g}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    print()
    for kind in ("healthy", "healthy?", "broken"):
        sub = [r for r in rows if r["kind"] == kind and "refused" not in r]
        if not sub:
            continue
        flagged = sum(not r["healthy"] for r in sub)
        print(f"{kind:9s}: {len(sub)} runs, flagged {flagged} "
              f"(frozen {sum(r['frozen'] for r in sub)}, nonstationary {sum(bool(r['nonstationary']) for r in sub)}, "
              f"diverged {sum(r['diverged'] > 0 for r in sub)}, prediction {sum(r['prediction_passed'] is False for r in sub)}, "
              f"ESS < {ESS_MIN:g} {sum((r['ess_min'] or 0) < ESS_MIN for r in sub)})")


if __name__ == "__main__":
    main()
