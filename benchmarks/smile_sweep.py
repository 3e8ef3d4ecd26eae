"""SMILE's anchored tuner on problems it was not developed on: does ε hold, and are the chains right or warned?

Run: ``python benchmarks/smile_sweep.py [--steps N] [--chains C] [--part glm,gauss] [--only NAME,...]
[--out FILE.json]`` (``--from-json FILE`` re-renders the tables of a saved run). Default output
``benchmarks/results/smile_sweep.json``.

None of these problems is a bundled example or a Table-1 target:

1. **GLMs through the CLI** (``sgtune run DATA --sampler smile|psmile -q --json … -o … --thin …``, one process per
   run, exactly what a user runs): simulated logistic regressions (N 500–20000, d 2–50: well separated, nearly
   separable, correlated features, unscaled features), Poisson and linear regressions (homo- and
   heteroskedastic), and scikit-learn's bundled data sets (breast_cancer standardised and raw, diabetes, wine and
   iris made binary), each written to an ``.npz`` the CLI reads. Batch sizes 16/64/256 (where B ≤ N/2), initial
   steps 0.001 and 0.1, seeds fixed. Recorded: ε over the second half of the kept steps (per chain
   max/min, the band), the final ε of the two starts (their ratio), the JSON's ``warnings`` and whether stderr
   carried them under ``-q``, the health verdict (``prediction_check``: the chains' covariance against
   (βH)⁻¹ at θ̂, 5 % model error plus Monte Carlo error; ``ess_fraction``) and the wall time. For the small real
   data sets, where the Laplace covariance (βH)⁻¹ need not be the posterior's, an exact reference:
   preconditioned MALA on the full-data log posterior (4 chains, acceptance ≈ 0.6), and the relative Frobenius
   error of the SMILE chains' covariance against it.
2. **Gaussians of other dimensions and condition numbers** (Python API, ``run_smile_ensemble``): d = 2, 50, 100,
   covariance eigenvalues log-spaced over condition numbers 1, 10³ (random rotation), injected gradient noise
   none / isotropic (V = 256 I as in the SMILE paper's appendix C) / diagonal (V = 256 Σ⁻¹'s eigenvalues, i.e.
   the noise of a minibatch gradient, whose covariance follows the curvature), 8 chains; the chains' E[θᵢ²]
   against the exact Σᵢᵢ: max over i of |error| / (5 % + 3.5 Monte Carlo standard errors across chains)
   (the same form as the CLI's prediction check).

Classes of failure: (a) ε collapsed or drifting (band over the second half above 2, or the two starts'
final ε more than 2 apart, or a "collapsed" warning); (b) chains off the posterior without a warning;
(c) off the posterior with a warning.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
STARTS = (0.001, 0.1)
BATCHES = (16, 64, 256)


# ----------------------------------------------------------------------------------------------- data sets
def _logistic(rng, n, d, *, scale=1.0, rho=0.0, col_scales=None):
    cov = (1 - rho) * np.eye(d) + rho * np.ones((d, d))
    X = rng.multivariate_normal(np.zeros(d), cov, size=n)
    beta = rng.standard_normal(d) * scale / math.sqrt(d)
    p = 1 / (1 + np.exp(-X @ beta))
    y = (rng.random(n) < p).astype(float)
    if col_scales is not None:
        X = X * col_scales
    return X, y


def simulated(rng):
    """name -> (X, y, model, extra CLI args)."""
    out = {}
    out["logit-sep-n500-d2"] = (*_logistic(rng, 500, 2, scale=4.0), "logistic", [])
    out["logit-nearsep-n2000-d10"] = (*_logistic(rng, 2000, 10, scale=12.0), "logistic", [])
    out["logit-corr-n5000-d20"] = (*_logistic(rng, 5000, 20, scale=2.0, rho=0.9), "logistic", [])
    out["logit-unscaled-n20000-d50"] = (*_logistic(rng, 20000, 50, scale=2.0,
                                                     col_scales=np.logspace(-1, 2, 50)), "logistic", [])
    # Poisson: log-rate x·β, moderate counts
    X = rng.standard_normal((3000, 8)) * 0.5
    y = rng.poisson(np.exp(0.5 + X @ (rng.standard_normal(8) * 0.4))).astype(float)
    out["poisson-n3000-d8"] = (X, y, "poisson", ["--intercept"])
    X = rng.standard_normal((10000, 20)) * np.logspace(-0.5, 0.5, 20) * 0.3
    y = rng.poisson(np.exp(1.0 + X @ (rng.standard_normal(20) * 0.3))).astype(float)
    out["poisson-n10000-d20"] = (X, y, "poisson", ["--intercept"])
    X = rng.standard_normal((1000, 10))
    y = X @ rng.standard_normal(10) + rng.standard_normal(1000)
    out["linear-homo-n1000-d10"] = (X, y, "linear", ["--noise-variance", "1"])
    X = rng.standard_normal((5000, 30)) * np.logspace(-1, 1, 30)
    sd = 0.3 + np.abs(X[:, 0]) / 0.1 * 0.5
    y = X @ (rng.standard_normal(30) / np.logspace(-1, 1, 30)) + sd * rng.standard_normal(5000)
    out["linear-hetero-n5000-d30"] = (X, y, "linear", ["--noise-variance", f"{float(np.mean(sd ** 2)):.6g}"])
    return out


def real():
    from sklearn import datasets

    def std(X):
        return (X - X.mean(0)) / X.std(0)

    out = {}
    bc = datasets.load_breast_cancer()
    out["breast_cancer-std"] = (std(bc.data), bc.target.astype(float), "logistic",
                                ["--intercept", "--prior-precision", "1"])
    out["breast_cancer-raw"] = (bc.data, bc.target.astype(float), "logistic",
                                ["--intercept", "--prior-precision", "1"])
    db = datasets.load_diabetes()
    y = (db.target - db.target.mean()) / db.target.std()
    out["diabetes-linear"] = (std(db.data), y, "linear", ["--intercept", "--noise-variance", "0.5"])
    wi = datasets.load_wine()
    out["wine-binary"] = (std(wi.data), (wi.target == 0).astype(float), "logistic",
                          ["--intercept", "--prior-precision", "1"])
    ir = datasets.load_iris()
    keep = ir.target > 0  # versicolor vs virginica: not separable
    out["iris-binary"] = (std(ir.data[keep]), (ir.target[keep] == 2).astype(float), "logistic",
                          ["--intercept", "--prior-precision", "1"])
    return out


# ------------------------------------------------------------------- exact reference (small data sets)
def _loglik_grad(model, X, y, th, prior):
    f = th @ X.T  # (C, N)
    if model == "logistic":
        lp = (y * f - np.logaddexp(0, f)).sum(1)
        r = y - 1 / (1 + np.exp(-f))
    elif model == "poisson":
        lam = np.exp(f)
        lp = (y * f - lam).sum(1)
        r = y - lam
    else:
        raise ValueError(model)
    return lp - 0.5 * prior * (th ** 2).sum(1), r @ X - prior * th


def mala_reference(model, X, y, prior, theta_hat, cov_laplace, *, steps=40000, chains=4, seed=0):
    """Preconditioned MALA on the exact log posterior (prior precision ``prior`` on every coordinate):
    the covariance of the draws after a tenth burn-in, pooled over chains."""
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    L = np.linalg.cholesky(cov_laplace)
    h = 1.6 / d ** (1 / 3)
    th = theta_hat + (rng.standard_normal((chains, d)) @ L.T) * 0.5
    lp, g = _loglik_grad(model, X, y, th, prior)
    keep, acc = [], 0
    for t in range(steps):
        mu = th + 0.5 * h ** 2 * g @ cov_laplace
        prop = mu + h * rng.standard_normal((chains, d)) @ L.T
        lp2, g2 = _loglik_grad(model, X, y, prop, prior)
        mu2 = prop + 0.5 * h ** 2 * g2 @ cov_laplace
        P = np.linalg.inv(cov_laplace)

        def q(a, m):
            r = a - m
            return -0.5 * np.einsum("ci,ij,cj->c", r, P, r) / h ** 2
        la = lp2 - lp + q(th, mu2) - q(prop, mu)
        ok = np.log(rng.random(chains)) < la
        th = np.where(ok[:, None], prop, th)
        lp = np.where(ok, lp2, lp)
        g = np.where(ok[:, None], g2, g)
        if t >= steps // 10:
            keep.append(th.copy())
            acc += ok.mean()
    draws = np.concatenate(keep)
    return np.cov(draws.T), acc / len(keep)


# ---------------------------------------------------------------------------------------- GLM runs
def _cli(args: list[str]) -> tuple[int, str, float]:
    env = dict(os.environ)
    t0 = time.perf_counter()
    p = subprocess.run(["sgtune", *args], capture_output=True, text=True, env=env)
    return p.returncode, p.stderr, time.perf_counter() - t0


def run_glm(name, X, y, model, extra, workdir: Path, steps: int, chains: int, *, batches=BATCHES, starts=STARTS,
            samplers=("smile", "psmile"), cli_args=()) -> list[dict]:
    data = workdir / f"{name}.npz"
    np.savez(data, X=X, y=y)
    n = X.shape[0]
    rows = []
    thin = max(steps // 400, 1)
    for sampler in samplers:
        for b in batches:
            if b > n // 2:
                continue
            for eps0 in starts:
                js, npz = workdir / "r.json", workdir / "r.npz"
                args = ["run", str(data), "--model", model, *extra, "--sampler", sampler, "--batch-size", str(b),
                        "--step-size", str(eps0), "--steps", str(steps), "--chains", str(chains), "--seed", "1",
                        "--thin", str(thin), "-q", "--json", str(js), "-o", str(npz), "--overwrite", *cli_args]
                rc, err, wall = _cli(args)
                row = {"problem": name, "model": model, "n": int(n), "d": int(X.shape[1]), "sampler": sampler,
                       "batch": b, "eps0": eps0, "exit": rc, "wall_seconds": round(wall, 2)}
                if rc not in (0, 4) or not js.exists():
                    row["error"] = err.strip().splitlines()[-1:] if err.strip() else ["no output"]
                    rows.append(row)
                    continue
                doc = json.loads(js.read_text())
                tr = np.load(npz)["step_size_trace"]
                half = tr[:, tr.shape[1] // 2:]
                check = doc["health"].get("prediction_check") or {}
                row.update({
                    "eps_final": [float(v) for v in doc["step_size_final"]],
                    "band_second_half": float(np.max(half.max(1) / half.min(1))),
                    "eps_second_half_median": float(np.median(half)),
                    "rejection_fraction_max": float(np.max(doc["rejection_fraction"])),
                    "warnings": doc.get("warnings", []),
                    "stderr_has_warnings": all(w[:40] in err for w in doc.get("warnings", [])),
                    "healthy": doc["health"]["healthy"],
                    "check_passed": check.get("passed"),
                    "check_rel_error": check.get("relative_frobenius_error"),
                    "check_z": check.get("z_max"), "check_threshold": check.get("threshold"),
                    "ess_fraction": doc["health"].get("ess_fraction"),
                    "sampler_seconds": doc.get("seconds"),
                    "noise_bias_predicted": doc.get("noise_bias_predicted"),
                    "refresh_length_final": doc.get("refresh_length_final"),
                    "cov": doc["cov"], "cov_se": doc["cov_standard_error"], "n_batches": doc["n_batches"],
                    "theta_hat": doc.get("theta_hat")})
                rows.append(row)
                print(_glm_line(row), flush=True)
    return rows


def _glm_line(r: dict) -> str:
    if "error" in r:
        return f"{r['problem']:28s} {r['sampler']:6s} B={r['batch']:<4d} ε0={r['eps0']:<6g} ERROR {r['error']}"
    w = "W" if r["warnings"] else "-"
    return (f"{r['problem']:28s} {r['sampler']:6s} B={r['batch']:<4d} ε0={r['eps0']:<6g} "
            f"ε={np.median(r['eps_final']):.3g} band={r['band_second_half']:.3g} rej={r['rejection_fraction_max']:.3f} "
            f"check={r['check_passed']} rel={r['check_rel_error'] if r['check_rel_error'] is None else round(r['check_rel_error'], 3)} "
            f"ess%={100 * (r['ess_fraction'] or 0):.2f} warn={w} {r['wall_seconds']}s")


def reference_for(name, X, y, model, extra, row) -> dict | None:
    """An exact MALA reference for the small logistic data sets (θ̂ and the Laplace covariance from the run)."""
    if model != "logistic" or X.shape[0] > 1000:
        return None
    Xi = np.column_stack([np.ones(len(X)), X]) if "--intercept" in extra else X
    prior = float(extra[extra.index("--prior-precision") + 1]) if "--prior-precision" in extra else 0.0
    th = np.asarray(row["theta_hat"], dtype=float)
    f = Xi @ th
    w = 1 / (1 + np.exp(-f))
    H = (Xi * (w * (1 - w))[:, None]).T @ Xi + prior * np.eye(Xi.shape[1])
    cov_l = np.linalg.inv(H)
    t0 = time.perf_counter()
    cov, acc = mala_reference(model, Xi, y, prior, th, cov_l)
    return {"cov": cov.tolist(), "acceptance": float(acc), "seconds": time.perf_counter() - t0,
            "laplace_rel_error": float(np.linalg.norm(cov_l - cov) / np.linalg.norm(cov))}


# ----------------------------------------------------------------------------------- Gaussian targets
def gaussian_target(d: int, cond: float, noise: str, seed: int = 0):
    from sgtune.sampler.targets import make_target, random_rotation
    from sgtune.theory.smile import gaussian_second_moments

    base = make_target("gaussian", "none", dim=d, seed=seed)
    rng = np.random.default_rng(seed + 100)
    lam = np.logspace(-0.5 * math.log10(cond), 0.5 * math.log10(cond), d)
    R = random_rotation(d, rng)
    cov = R.T @ np.diag(lam) @ R
    cov = 0.5 * (cov + cov.T)
    prec = R.T @ np.diag(1 / lam) @ R
    prec = np.ascontiguousarray(0.5 * (prec + prec.T))
    if noise == "none":
        V = np.zeros((d, d))
    elif noise == "isotropic":
        V = 256.0 * np.eye(d)
    else:  # the curvature's directions, like a minibatch gradient's noise
        V = 256.0 * prec / np.mean(1 / lam)
        V = 0.5 * (V + V.T)
    L = np.zeros((d, d)) if noise == "none" else np.linalg.cholesky(V)
    e2, v2 = gaussian_second_moments(cov)
    return dataclasses.replace(base, noise=noise, precision=prec, noise_chol=np.ascontiguousarray(L),
                               noise_cov=V, second_moment=e2, var_of_square=v2)


def run_gauss(steps: int, chains: int) -> list[dict]:
    from sgtune.core.config import RunSpec
    from sgtune.sampler.registry import SmileOptions
    from sgtune.diagnostics.mcse import bonferroni_threshold
    from sgtune.sampler.smile_ensemble import run_smile_ensemble

    rows = []
    thin = max(steps // 400, 1)
    for d in (2, 50, 100):
        for cond in (1.0, 1e3):
            for noise in ("none", "isotropic", "diagonal"):
                t = gaussian_target(d, cond, noise)
                for pre in (False, True):
                    for eps0 in STARTS:
                        t0 = time.perf_counter()
                        r = run_smile_ensemble(t, eps0, RunSpec(steps, n_chains=chains, thin=thin, seed=3),
                                               SmileOptions(preconditioned=pre))
                        wall = time.perf_counter() - t0
                        tr = r.step_size_trace
                        half = tr[:, tr.shape[1] // 2:]
                        m2 = r.sample_second_moment
                        ok = np.all(np.isfinite(m2), axis=1)
                        est = m2[ok].mean(0)
                        se = m2[ok].std(0, ddof=1) / math.sqrt(ok.sum()) if ok.sum() > 1 else np.full(d, np.inf)
                        z = np.abs(est - t.second_moment) / np.sqrt((0.05 * t.second_moment) ** 2 + se ** 2)
                        z = z / bonferroni_threshold(1e-3, d, int(ok.sum()) - 1)
                        row = {"problem": f"gauss-d{d}-cond{cond:g}-{noise}", "sampler": "psmile" if pre else "smile",
                               "eps0": eps0, "d": d, "cond": cond, "noise": noise,
                               "eps_final": r.final_step_size.tolist(),
                               "band_second_half": float(np.max(half.max(1) / half.min(1))),
                               "eps_second_half_median": float(np.median(half)),
                               "rejection_fraction_max": float(r.rejection_fraction.max()),
                               "diverged": int(np.sum(r.diverged >= 0)),
                               "m2_rel_error_max": float(np.max(np.abs(est / t.second_moment - 1))),
                               "m2_score": float(z.max()), "m2_passed": bool(z.max() <= 1.0),
                               "wall_seconds": round(wall, 2)}
                        rows.append(row)
                        print(f"{row['problem']:30s} {row['sampler']:6s} ε0={eps0:<6g} ε={np.median(row['eps_final']):.3g} "
                              f"band={row['band_second_half']:.3g} rej={row['rejection_fraction_max']:.3f} "
                              f"m2err={row['m2_rel_error_max']:.3f} score={row['m2_score']:.2f} {wall:.1f}s", flush=True)
    return rows


def _against_reference(r: dict, cref: np.ndarray) -> dict:
    """The CLI's own covariance test (5 % model error plus Monte Carlo error), against the exact reference."""
    from sgtune.diagnostics.mcse import compare_covariance

    t = compare_covariance(cref, np.asarray(r["cov"]), np.asarray(r["cov_se"]), n_batches=int(r["n_batches"]),
                           relative_tolerance=0.05)
    return {"reference_passed": bool(t.passed), "reference_z": float(t.z_max),
            "reference_rel_error": float(np.linalg.norm(np.asarray(r["cov"]) - cref) / np.linalg.norm(cref))}


# ------------------------------------------------------------------------------------------- summary
def classify(rows: list[dict]) -> list[dict]:
    """Pair the two starts of each cell and classify (module docstring)."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        if "error" in r:
            continue
        cells.setdefault((r["problem"], r["sampler"], r.get("batch")), []).append(r)
    out = []
    for key, rs in cells.items():
        finals = [float(np.median(r["eps_final"])) for r in rs]
        start_ratio = max(finals) / min(finals) if min(finals) > 0 else math.inf
        band = max(r["band_second_half"] for r in rs)
        collapsed = any(any("collapsed" in w for w in r.get("warnings", [])) for r in rs)
        drift = band > 2 or start_ratio > 2 or collapsed
        if "m2_passed" in rs[0]:
            off = [not r["m2_passed"] for r in rs]
            warned = [False for _ in rs]
        else:
            off = [r["check_passed"] is False or r.get("reference_passed") is False for r in rs]
            warned = [bool(r["warnings"]) for r in rs]
        silent = any(o and not w for o, w in zip(off, warned))
        honest = any(o and w for o, w in zip(off, warned))
        b = "b*" if "m2_passed" in rs[0] else "b"
        cls = "".join(c for c, f in (("a", drift), (b, silent), ("c", honest)) if f) or "ok"
        out.append({"problem": key[0], "sampler": key[1], "batch": key[2], "eps_final": finals,
                    "start_ratio": start_ratio, "band": band, "class": cls})
    return out


def table(summary: list[dict]) -> str:
    lines = ["| problem | sampler | B | final ε (starts 0.001, 0.1) | starts' ratio | band (2nd half) | class |",
             "|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['problem']} | {s['sampler']} | {s['batch'] or '—'} | "
                     f"{', '.join(f'{v:.3g}' for v in s['eps_final'])} | {s['start_ratio']:.2f} | {s['band']:.2f} | "
                     f"{s['class']} |")
    return "\n".join(lines)


def condensed(rows: list[dict], summary: list[dict]) -> str:
    """One line per problem and sampler, over its batch sizes and both starts (the docs' table)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "error" not in r:
            groups.setdefault((r["problem"], r["sampler"]), []).append(r)
    cls: dict[tuple, set] = {}
    for s in summary:
        cls.setdefault((s["problem"], s["sampler"]), set()).add(s["class"])
    lines = ["| problem | sampler | B | final ε | starts' ratio (max) | band (max) | rejected (max) | "
             "off the posterior | rel. error | ESS / draws | class |",
             "|---|---|---|---|--:|--:|--:|--:|---|---|---|"]
    for key, rs in groups.items():
        eps = [float(np.median(r["eps_final"])) for r in rs]
        sm = [x for x in summary if (x["problem"], x["sampler"]) == key]
        if "m2_passed" in rs[0]:
            off = sum(not r["m2_passed"] for r in rs)
            rel = [r["m2_rel_error_max"] for r in rs]
            ess, b = "—", "—"
        else:
            off = sum(r["check_passed"] is False or r.get("reference_passed") is False for r in rs)
            rel = [r.get("reference_rel_error", r["check_rel_error"]) or 0.0 for r in rs]
            ef = [100 * (r["ess_fraction"] or 0) for r in rs]
            ess = f"{min(ef):.2g}–{max(ef):.2g} %"
            b = ",".join(str(x) for x in sorted({r["batch"] for r in rs}))
        c = ",".join(sorted(cls.get(key, {"ok"})))
        lines.append(f"| {key[0]} | {key[1]} | {b} | {min(eps):.2g}–{max(eps):.2g} | "
                     f"{max(x['start_ratio'] for x in sm):.2f} | {max(x['band'] for x in sm):.2f} | "
                     f"{max(r['rejection_fraction_max'] for r in rs):.3f} | {off}/{len(rs)} | "
                     f"{min(rel):.2g}–{max(rel):.2g} | {ess} | {c} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--gauss-chains", type=int, default=8)
    ap.add_argument("--part", default="glm,gauss")
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default=str(RESULTS / "smile_sweep.json"))
    ap.add_argument("--from-json", default=None)
    ap.add_argument("--full", action="store_true", help="with --from-json: one row per batch size")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)), help="GLM batch sizes, comma-separated")
    ap.add_argument("--starts", default=",".join(map(str, STARTS)), help="initial step sizes, comma-separated")
    ap.add_argument("--samplers", default="smile,psmile")
    ap.add_argument("--cli-args", default="", help="more options for every GLM run (e.g. '--refresh-length off')")
    a = ap.parse_args(argv)
    if a.from_json:
        doc = json.loads(Path(a.from_json).read_text())
        print(table(doc["summary"]) if a.full else condensed(doc["runs"], doc["summary"]))
        return
    rows: list[dict] = []
    refs = {}
    t0 = time.perf_counter()
    if "glm" in a.part:
        probs = {**simulated(np.random.default_rng(20261129)), **real()}
        only = [s for s in a.only.split(",") if s]
        with tempfile.TemporaryDirectory() as tmp:
            for name, (X, y, model, extra) in probs.items():
                if only and name not in only:
                    continue
                rs = run_glm(name, X, y, model, extra, Path(tmp), a.steps, a.chains,
                             batches=[int(b) for b in a.batches.split(",")],
                             starts=[float(e) for e in a.starts.split(",")], samplers=a.samplers.split(","),
                             cli_args=a.cli_args.split())
                ok = [r for r in rs if "cov" in r]
                ref = reference_for(name, X, y, model, extra, ok[0]) if ok else None
                if ref is not None:
                    refs[name] = {k: v for k, v in ref.items() if k != "cov"}
                    cref = np.asarray(ref["cov"])
                    print(f"  reference {name}: MALA acceptance {ref['acceptance']:.2f}, Laplace vs exact "
                          f"{ref['laplace_rel_error']:.3f} ({ref['seconds']:.0f} s)", flush=True)
                    for r in ok:
                        r.update(_against_reference(r, cref))
                for r in rs:
                    for k in ("cov", "cov_se", "theta_hat"):
                        r.pop(k, None)
                rows += rs
    if "gauss" in a.part:
        rows += run_gauss(a.steps, a.gauss_chains)
    summary = classify(rows)
    print(condensed(rows, summary))
    doc = {"steps": a.steps, "chains": a.chains, "batches": a.batches, "samplers": a.samplers, "cli_args": a.cli_args, "gauss_chains": a.gauss_chains, "starts": list(STARTS),
           "seconds": time.perf_counter() - t0, "runs": rows, "references": refs, "summary": summary}
    Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
