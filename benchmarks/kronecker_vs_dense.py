"""What the Kronecker family's approximations cost, against the dense exact theory, on small networks.

For each network (regression and classification, sgtune's NumPy MLP with a prior, fitted MAP) the
Kronecker step Λ = blockdiag(M_l ⊗ Ã_l⁻¹) is tuned for the posterior (or sandwich) target, then
:func:`sgtune.theory.kronecker_dense.approximation_ladder` solves the dense chains that remove one
approximation at a time (factored → exact prior → the layers' own Hessian/noise blocks → cross-layer
blocks → the exact Σ-dependent noise of Eq. (12)). Printed per network: the relative Frobenius distance
of each rung to the previous one (what that approximation costs), each rung's second-moment spectral
radius, the factored target against the dense target, and the dense exact chain against the dense target
(how far the real proxy chain with the Kronecker Λ lands from what was asked). "unstable": that chain has
no stationary law with this Λ. Each network is tuned twice: with the constant noise at θ̂ (``dq-const``)
and with the factored Σ-dependent noise C̄(Σ) (``dq-exact``); the last number is that step's own factored
prediction against the dense exact answer (DQ+exact with the network's non-factored per-sample Hessians). Run: ``python benchmarks/kronecker_vs_dense.py`` (10–15 minutes on a busy 2-core machine; ``--sources``: only
the noise_sources section).
"""
from __future__ import annotations

import dataclasses
import math
import sys
import warnings

import numpy as np

from sgtune.core.config import Dynamics
from sgtune.io.data import make_dataset
from sgtune.models import MLP, expand
from sgtune.models.kfac import mlp_factors
from sgtune.theory.kronecker import tune_factors
from sgtune.theory.kronecker_dense import LADDER, approximation_ladder


def _fmt(v: float) -> str:
    return "unstable" if not math.isfinite(v) else f"{v:.3g}"


def run(name: str, X: np.ndarray, y: np.ndarray, net: MLP, delta: float, B: int, beta: float,
        kappa: float = 0.0, target: str = "posterior") -> None:
    n = len(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e = expand(net, make_dataset(X, y), delta)
    fac = mlp_factors(net, e.theta_hat, X, y, prior_precision=delta, sample_hessian=net.hessian, samples=True)
    head = f"{name}: D={e.dim} N={n} δ={delta:g} B={B} β={'inf' if math.isinf(beta) else f'{beta:g}'} κ={kappa} " \
           f"{target}, dense J_n {net.hessian}"
    print(head)
    for method in ("dq-const", "dq-exact"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = tune_factors(fac, Dynamics(None, batch_size=B, inv_temperature=beta, momentum=kappa),
                                   target=target, method=method)
        except Exception as exc:  # the family's refusal is a result too
            print(f"   {method}: refused: {exc}")
            continue
        lad = approximation_ladder(res, fac, e)
        print(f"   {method}: noise gain of the factored step {_fmt(res.noise_gain)}")
        print("      cost of each step: " + ", ".join(f"{k} {_fmt(v)}" for k, v in lad["step"].items()))
        print("      spectral radius:   " + ", ".join(f"{k} {lad['spectral_radius'][k]:.4g}" for k in LADDER))
        print(f"      factored target vs dense target {_fmt(lad['target_distance'])}; "
              f"dense exact chain vs dense target {_fmt(lad['exact_to_target'])}; "
              f"the step's own factored prediction vs dense exact {_fmt(lad['prediction_to_exact'])}")


def noise_sources(name: str, X: np.ndarray, y: np.ndarray, net: MLP, delta: float, B: int, beta: float) -> None:
    """Where the exact noise's second-moment instability comes from (D ≤ 50: the D²×D² second-moment map, eig).

    With the ``dq-exact`` Kronecker Λ fixed, ρ of S ↦ FSFᵀ + s·Λ(mean_n J_nSJ_n − JSJ)Λ (Eq. (12), with
    replacement) for the mean dynamics F = I − ΛH with the factored or the exact H, and per-sample J_n: none,
    Gauss–Newton or exact, restricted to the layers' own blocks or full (cross-layer blocks included).
    """
    from sgtune.theory.kronecker import damped_factors

    n = len(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e = expand(net, make_dataset(X, y), delta)
    th = e.theta_hat
    fac = mlp_factors(net, th, X, y, prior_precision=delta, sample_hessian="exact", samples=True)
    res = tune_factors(fac, Dynamics(None, batch_size=B, inv_temperature=beta), method="dq-exact")
    lam, D = res.dense_step_matrix(), res.dim
    ex = net.per_sample_hessians(th, X, y)
    gn = dataclasses.replace(net, hessian="gauss-newton").per_sample_hessians(th, X, y)
    mask, Hf = np.zeros((D, D)), np.zeros((D, D))
    for lf in fac.layers:
        i = lf.theta_indices()
        mask[np.ix_(i, i)] = 1.0
        A_d, G_d = damped_factors(lf, delta, n)
        Hf[np.ix_(i, i)] = np.kron(G_d, A_d)
    He = ex.mean(axis=0) + delta / n * np.eye(D)

    def rho(H: np.ndarray, Js: np.ndarray) -> float:
        F = np.eye(D) - lam @ H
        LJ = lam @ Js
        K = np.kron(F, F) + (np.einsum("nab,ncd->acbd", LJ, LJ).reshape(D * D, D * D) / len(Js)
                             - np.kron(LJ.mean(0), LJ.mean(0))) / B
        return float(np.max(np.abs(np.linalg.eigvals(K))))

    none = np.zeros((1, D, D))
    print(f"{name}: D={D}, where the noise gain comes from (ρ of the dense second-moment map, dq-exact Λ)")
    for hn, H in (("factored H", Hf), ("exact H", He)):
        cells = [("no C̄", none), ("GGN J_n, layer blocks", gn * mask), ("exact J_n, layer blocks", ex * mask),
                 ("GGN J_n, full", gn), ("exact J_n, full", ex)]
        print(f"   {hn}: " + ", ".join(f"{k} {rho(H, J):.4g}" for k, J in cells), flush=True)


def main() -> None:
    rng = np.random.default_rng(0)
    n = 1000
    X = rng.normal(size=(n, 3))
    y = np.tanh(X @ [1.0, -1.0, 0.5]) + 0.3 * rng.normal(size=n)
    yb = (X @ [1.0, -1.0, 0.5] + 0.5 * rng.normal(size=n) > 0).astype(float)
    if "--sources" in sys.argv:  # only the noise_sources section
        sources(X, y, yb)
        return
    for hess in ("gauss-newton", "exact"):
        run("regression tanh(4)", X, y, MLP((4,), likelihood="gaussian", noise_variance=0.09, hessian=hess),
            10.0, 100, 2 * n)
    gn = dict(hessian="gauss-newton")
    run("regression tanh(4), weak prior", X, y, MLP((4,), likelihood="gaussian", noise_variance=0.09, **gn),
        0.1, 100, 2 * n)
    run("regression tanh(4), SGD", X, y, MLP((4,), likelihood="gaussian", noise_variance=0.09, **gn), 10.0, 100,
        math.inf)
    run("regression tanh(4), momentum", X, y, MLP((4,), likelihood="gaussian", noise_variance=0.09, **gn), 10.0,
        100, 2 * n, 0.5)
    run("regression tanh(8,8)", X, y, MLP((8, 8), likelihood="gaussian", noise_variance=0.09, **gn), 1.0, 100, 2 * n)
    run("classification tanh(5,3)", X, yb, MLP((5, 3), likelihood="bernoulli", **gn), 10.0, 100, 2 * n)
    run("classification tanh(5,3)", X, yb, MLP((5, 3), likelihood="bernoulli", **gn), 10.0, 100, 2 * n,
        target="sandwich")
    run("classification softplus(16)", X, yb, MLP((16,), activation="softplus", likelihood="bernoulli", **gn), 10.0, 50,
        2 * n)
    sources(X, y, yb)


def sources(X: np.ndarray, y: np.ndarray, yb: np.ndarray) -> None:
    n = len(X)
    noise_sources("regression tanh(4)", X, y, MLP((4,), likelihood="gaussian", noise_variance=0.09), 10.0, 100, 2 * n)
    noise_sources("regression softplus(4)", X, y, MLP((4,), activation="softplus", likelihood="gaussian",
                                                      noise_variance=0.09), 10.0, 100, 2 * n)
    noise_sources("classification tanh(5,3)", X, yb, MLP((5, 3), likelihood="bernoulli"), 10.0, 100, 2 * n)


if __name__ == "__main__":
    main()
