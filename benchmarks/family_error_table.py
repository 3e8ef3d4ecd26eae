"""How far the structured families' Λ (scalar, diagonal, block) land from the target, over many problems.

For each problem and chain (batch B, SGD or SGLD at β = 2N, momentum 0 or 0.5) :func:`sgtune.theory.tuning.tune`
fits each family; the table prints the reported ``covariance_error`` ‖Σ(Λ) − Σ*‖_F/‖Σ*‖_F (Σ(Λ) the exact
stationary covariance of the returned Λ), the smallest and largest ratio of a predicted marginal sd to the
target's, and the refusals (a family that cannot be fitted: a one-line error). The threshold
:data:`sgtune.theory.tuning.MAX_FAMILY_ERROR` above which a family's result warns was chosen from this table
(docs/benchmarks.md).

Problems: the bundled examples (hetero-linear, logistic, poisson), simulated GLMs with correlated covariates
(logistic and Poisson, D = 6 and 12), standardised diabetes (linear), and the output layer of sgtune's own
tanh networks (diabetes with 8 units and prior precision 1 and 12, a synthetic regression with 6 units).

Usage: python benchmarks/family_error_table.py [--quick]
"""
from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np

from sgtune.core.config import Dynamics
from sgtune.core.errors import SgtuneError
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, fit_map, get_model, make_mlp
from sgtune.models.lastlayer import mlp_last_layer
from sgtune.theory.tuning import MAX_FAMILY_ERROR, tune


def _glm(kind: str, n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    L = np.linalg.cholesky(0.5 * np.eye(d) + 0.5 * np.ones((d, d)))
    X = rng.standard_normal((n, d)) @ L.T
    eta = X @ np.linspace(-0.5, 0.5, d)
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float) if kind == "logistic" else rng.poisson(np.exp(eta))
    return get_model(kind), make_dataset(X, np.asarray(y, float), intercept=True)


def _diabetes():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std()


def _head(X, y, hidden: str, prior: float):
    net = make_mlp(hidden)
    theta = fit_map(net, make_dataset(X, y), prior).theta_hat
    head, hd = mlp_last_layer(net, theta, X, y)
    return head, hd, prior


def problems(quick: bool):
    """(name, expansion, target) of each problem."""
    out = []
    for name in ("hetero-linear", "logistic", "poisson"):
        out.append((name, expand(get_model(name if name != "hetero-linear" else "linear"), example(name)), "sandwich"))
    for kind in ("logistic", "poisson"):
        for d in ((6,) if quick else (6, 12)):
            m, ds = _glm(kind, 400, d, d)
            out.append((f"sim-{kind}-{d}", expand(m, ds, 1.0), "sandwich"))
    X, y = _diabetes()
    out.append(("diabetes-linear", expand(get_model("linear"), make_dataset(X, y, intercept=True)), "sandwich"))
    for prior in ((12.0,) if quick else (1.0, 12.0)):
        head, hd, g = _head(X, y, "8", prior)
        out.append((f"diabetes-mlp8-head-g{g:g}", expand(head, hd, g), "posterior"))
    rng = np.random.default_rng(1)
    Xs = rng.standard_normal((300, 3))
    ys = np.sin(Xs[:, 0]) + 0.3 * Xs[:, 1] + 0.3 * rng.standard_normal(300)
    head, hd, g = _head(Xs, ys, "6", 1.0)
    out.append(("synthetic-mlp6-head-g1", expand(head, hd, g), "posterior"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows, errors = [], []
    print(f"{'problem':28s} {'D':>3s} {'B':>4s} {'beta':>6s} {'kappa':>5s} {'family':8s} {'cov.err':>8s} "
          f"{'sd ratio min':>12s} {'max':>6s}")
    for name, e, target in problems(args.quick):
        n = e.n_data
        for B in ((32,) if args.quick else (8, 32, 128)):
            if B >= n:
                continue
            for beta in (math.inf, 2.0 * n):
                for kappa in (0.0, 0.5):
                    for family in ("scalar", "diagonal") + (("block",) if e.parameter_blocks is not None else ()):
                        label = f"{name:28s} {e.dim:3d} {B:4d} {'inf' if beta == math.inf else '2N':>6s} {kappa:5.1f} {family:8s}"
                        try:
                            with warnings.catch_warnings():
                                warnings.simplefilter("ignore")
                                r = tune(e, Dynamics(None, B, inv_temperature=beta, momentum=kappa), target=target,
                                         family=family)
                        except SgtuneError as exc:
                            errors.append(type(exc).__name__)
                            print(f"{label} refused: {type(exc).__name__}: {str(exc)[:90]}")
                            continue
                        ratio = np.sqrt(np.diag(r.predicted_cov) / np.diag(r.target_cov))
                        rows.append(r.covariance_error)
                        print(f"{label} {r.covariance_error:8.3f} {ratio.min():12.3g} {ratio.max():6.3g}")
    v = np.array(rows)
    print(f"\n{len(v)} results, {len(errors)} refused; covariance error quantiles "
          f"50 % {np.quantile(v, 0.5):.3f}, 90 % {np.quantile(v, 0.9):.3f}, max {v.max():.3f}")
    for cut in (0.1, 0.2, 0.3, 0.5, 0.7, 0.9):
        print(f"  error >= {cut:.1f}: {int(np.sum(v >= cut))} of {len(v)}")
    print(f"MAX_FAMILY_ERROR = {MAX_FAMILY_ERROR}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
