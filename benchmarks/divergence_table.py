"""Predicted divergence risk against the observed fraction of diverged chains.

For each problem: tune Λ (``sgtune lambda``'s defaults unless stated), compute the applicability
report's divergence estimate (:func:`sgtune.theory.applicability.divergence_risk`) for a run of T
steps, then run C independent chains of T steps from θ̂ and count the chains that diverged (a
non-finite state). The threshold MAX_DIVERGENCE_RISK of the report was chosen from this table.

Problems: small Poisson regressions (17 and 40 rows, several seeds, SGLD at β = 2N on the posterior
target, the case that diverges although the linearised prediction is within 1.4 %), the bundled
logistic and heteroskedastic-linear examples (SGD on the sandwich target), a near-separable logistic
regression, and standardised diabetes (linear).

Each flagged problem is followed by a row for the inverse temperature its ``divergence-risk`` remedy
computes (tuned and run the same way).

Usage: python benchmarks/divergence_table.py [--chains 32] [--steps 22000] [--quick]
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

from sgtune.core.config import Dynamics, RunSpec
from sgtune.core.errors import SgtuneError
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.sampler.driver import run_chains
from sgtune.theory.applicability import MAX_DIVERGENCE_RISK, applicability
from sgtune.theory.tuning import tune


def poisson_rows(n: int, seed: int, d: int = 2, scale: float = 0.5) -> object:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = rng.poisson(np.exp(0.5 + X @ np.full(d, scale))).astype(float)
    return make_dataset(X, y, intercept=True)


def near_separable() -> object:
    rng = np.random.default_rng(5)
    X = rng.standard_normal((400, 5))
    y = (rng.random(400) < 1 / (1 + np.exp(-X @ np.array([4.0, -3, 2, 0, 1])))).astype(float)
    return make_dataset(X, y)


def wine() -> object:
    from sklearn.datasets import load_wine

    w = load_wine()
    return make_dataset((w.data - w.data.mean(0)) / w.data.std(0), (w.target == 0).astype(float), intercept=True)


def diabetes() -> object:
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return make_dataset((X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std(), intercept=True)


def problems(quick: bool) -> list[tuple[str, str, object, float, int, str, float]]:
    """(name, model, data, prior precision, B, target, β as a multiple of N or inf)."""
    out = []
    seeds = range(3) if quick else range(8)
    for s in seeds:
        for B in ((4,) if quick else (1, 4)):
            out.append((f"poisson N=17 seed {s} B={B}", "poisson", poisson_rows(17, s), 0.0, B, "posterior", 2.0))
    if not quick:
        for s in range(4):
            out.append((f"poisson N=17 D=4 seed {s} B=4", "poisson", poisson_rows(17, 100 + s, d=3, scale=0.4), 0.0,
                        4, "posterior", 2.0))
            out.append((f"poisson N=40 seed {s} B=4", "poisson", poisson_rows(40, s), 0.0, 4, "posterior", 2.0))
            out.append((f"poisson N=17 seed {s} B=4 β=1.25N", "poisson", poisson_rows(17, s), 0.0, 4, "posterior",
                        1.25))
        out.append(("near-separable logistic B=16", "logistic", near_separable(), 0.1, 16, "sandwich", math.inf))
        out.append(("diabetes linear B=32", "linear", diabetes(), 0.0, 32, "sandwich", math.inf))
        out.append(("wine logistic prior 1 B=16", "logistic", wine(), 1.0, 16, "sandwich", math.inf))
    out.append(("logistic example B=32", "logistic", example("logistic"), 0.0, 32, "sandwich", math.inf))
    out.append(("hetero-linear example B=64", "linear", example("hetero-linear"), 0.0, 64, "sandwich", math.inf))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=int, default=32)
    ap.add_argument("--steps", type=int, default=22000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(f"threshold MAX_DIVERGENCE_RISK = {MAX_DIVERGENCE_RISK}; C = {args.chains} chains of T = {args.steps} steps")
    print(f"{'problem':44s} {'risk':>9s} {'t* (sd)':>8s} {'diverged':>9s} {'fraction':>9s} {'flagged':>8s} {'s':>5s}")
    for name, mname, ds, gam, B, target, bmul in problems(args.quick):
        model = get_model(mname)
        e = expand(model, ds, gam)
        beta = bmul * ds.n_data
        while beta is not None:  # the problem, then (when flagged) the inverse temperature its remedy computes
            t0 = time.time()
            try:
                res = tune(e, Dynamics(None, B, inv_temperature=beta), target=target)
            except SgtuneError as exc:
                print(f"{name:44s} tune failed: {exc}")
                break
            a = applicability(model, ds, e, res.stationary, target_cov=res.target_cov)
            risk = a.divergence or {"risk": math.nan, "threshold_sd": math.nan}
            nd = diverged(model, ds, e, res, args)
            flagged = "divergence-risk" in a.reason_codes
            print(f"{name:44s} {risk['risk']:9.3g} {float(risk['threshold_sd']):8.3g} {nd:6d}/{args.chains:<2d} "
                  f"{nd / args.chains:9.3f} {str(flagged):>8s} {time.time() - t0:5.0f}", flush=True)
            nxt = [r.changes.get("inv_temperature") for r in a.reasons if r.code == "divergence-risk"
                   for r in r.remedies if "inv_temperature" in r.changes]
            beta = nxt[0] if nxt else None
            name = f"  remedy: β = {beta:.4g}" if beta is not None else name


def diverged(model: object, ds: object, e: object, res: object, args: argparse.Namespace) -> int:
    """Chains (of ``args.chains``, ``args.steps`` steps from θ̂) that reached a non-finite state."""
    try:
        ch = run_chains(model, ds, res.dynamics, RunSpec(args.steps, n_chains=args.chains, seed=1),  # type: ignore
                        initial=e.theta_hat, prior_precision=e.prior_precision)  # type: ignore[attr-defined]
        return ch.n_diverged
    except SgtuneError:  # every chain diverged
        return args.chains


if __name__ == "__main__":
    main()
