"""SMILE's predicted noise bias against the chains' measured one, on GLMs the prediction was not developed on.

Run: ``python benchmarks/smile_noise_bias.py [--steps N] [--cli-args "--noise-bias 0.05"] [--out FILE.json]``
(``--from-json FILE`` re-renders a saved run). Default output ``benchmarks/results/smile_noise_bias.json``.

The problems are ``smile_sweep.py``'s GLMs (simulated logistic, Poisson and linear regressions; scikit-learn's
breast cancer, diabetes, wine and iris), each run through the CLI as a user runs it
(``sgtune run DATA --sampler smile|psmile --batch-size B --step-size 0.1 --steps N --chains 4 --seed 1 --json -``,
batch sizes 16/64/256 where B ≤ N/2). Per run:

- **predicted**: the JSON's ``noise_bias_predicted`` (max over chains), the bias of the chains' covariance along the
  minibatch noise's noisiest direction that :func:`sgtune.sampler.smile.noise_excess` predicts from the noise measured
  along the chains, at the final step size and refresh length;
- **measured**: λ_max(P^{-1/2} C P^{-1/2}) − 1, the chains' covariance C whitened by the posterior's (βH)⁻¹ = P at θ̂
  (the CLI's own prediction for these samplers): the largest relative excess of the chains' variance over the
  posterior's in any direction. It carries the run's Monte Carlo error (the largest eigenvalue of a noisy estimate is
  biased up: its floor here, where nothing is predicted, is 0.2–1);
- the prediction check's verdict and relative Frobenius error, and the number of warnings.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import smile_sweep as sweep  # noqa: E402  (the same problems)

RESULTS = Path(__file__).parent / "results"


def posterior(path: str, model: str, extra: list[str]) -> np.ndarray:
    """(βH)⁻¹ at θ̂ as ``sgtune run`` computes it for the SMILE samplers (the data options as the CLI reads them)."""
    from sgtune.cli._options import load_problem
    from sgtune.workflows.verify import chain_prediction

    kw = {"data": path, "model": model, "intercept": "--intercept" in extra, "seed": 0}
    for opt in ("--prior-precision", "--noise-variance"):
        if opt in extra:
            kw[opt[2:].replace("-", "_")] = extra[extra.index(opt) + 1]
    p = load_problem(kw)
    n = p.dataset.n_data
    cov, _ = chain_prediction(p.expansion, 0.1, sampler="smile", batch_size=16, inv_temperature=float(n), n_data=n)
    return cov


def run_problem(name, X, y, model, extra, workdir: Path, steps: int, cli_args: list[str]) -> list[dict]:
    path = str(workdir / f"{name}.npz")
    np.savez(path, X=X, y=y)
    w, U = np.linalg.eigh(posterior(path, model, extra))
    whiten = U @ np.diag(w ** -0.5) @ U.T
    rows = []
    for sampler in ("smile", "psmile"):
        for b in (16, 64, 256):
            if b > X.shape[0] // 2:
                continue
            cmd = ["sgtune", "run", path, "--model", model, *extra, "--sampler", sampler, "--batch-size", str(b),
                   "--step-size", "0.1", "--steps", str(steps), "--chains", "4", "--seed", "1", "-q", "--json", "-",
                   *cli_args]
            doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
            ev = np.linalg.eigvalsh(whiten @ np.asarray(doc["cov"]) @ whiten)
            check = doc["health"].get("prediction_check") or {}
            rows.append({"problem": name, "sampler": sampler, "batch": b,
                         "eps": float(np.median(doc["step_size_final"])),
                         "refresh_length": float(np.median(doc["refresh_length_final"])),
                         "predicted": float(max(doc["noise_bias_predicted"])), "measured": float(ev.max() - 1.0),
                         "check_passed": check.get("passed"), "rel_error": check.get("relative_frobenius_error"),
                         "ess_fraction": doc["health"].get("ess_fraction"), "warnings": len(doc.get("warnings", []))})
            r = rows[-1]
            print(f"{name:26s} {sampler:6s} B={b:<4d} ε={r['eps']:.3g} L={r['refresh_length']:.3g} "
                  f"predicted={r['predicted']:.3g} measured={r['measured']:.3g} check={r['check_passed']} "
                  f"ess%={100 * (r['ess_fraction'] or 0):.2f} warnings={r['warnings']}", flush=True)
    return rows


def summary(rows: list[dict]) -> dict:
    """The agreement where a bias is predicted above the measurement's floor, and the runs' verdicts."""
    big = [r for r in rows if r["predicted"] >= 0.5]
    ratio = np.array([r["measured"] / r["predicted"] for r in big])
    return {"runs": len(rows), "predicted_at_least_0.5": len(big),
            "measured_over_predicted": {"median": float(np.median(ratio)), "min": float(ratio.min()),
                                        "max": float(ratio.max())} if big else None,
            "check_passed": sum(bool(r["check_passed"]) for r in rows),
            "ess_at_least_1_percent": sum((r["ess_fraction"] or 0) >= 0.01 for r in rows),
            "median_measured": float(np.median([r["measured"] for r in rows]))}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--cli-args", default="", help="more options for every run (e.g. '--noise-bias 0.05')")
    ap.add_argument("--out", default=str(RESULTS / "smile_noise_bias.json"))
    ap.add_argument("--from-json", default=None)
    args = ap.parse_args(argv)
    if args.from_json:
        out = json.loads(Path(args.from_json).read_text())
    else:
        rows = []
        probs = {**sweep.simulated(np.random.default_rng(20261129)), **sweep.real()}
        with tempfile.TemporaryDirectory() as tmp:
            for name, (X, y, model, extra) in probs.items():
                rows += run_problem(name, X, y, model, extra, Path(tmp), args.steps, args.cli_args.split())
        out = {"steps": args.steps, "cli_args": args.cli_args, "rows": rows}
    out["summary"] = summary(out["rows"])
    print(json.dumps(out["summary"], indent=1))
    if not args.from_json:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
