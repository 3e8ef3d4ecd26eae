"""Does the Kronecker family's applicability flag agree with the real network's chain?

For each network (PyTorch, fitted to its MAP with the prior, as in ``benchmarks/kronecker_probes.py``) the
Kronecker step is tuned (posterior target, β = 2N, B = 50), then

- :func:`sgtune.workflows.kronecker_applicability.kronecker_applicability` (matrix-free: stability of the real
  linearised chain, and its variance along the probes with the true Hessian and gradient noise), timed;
- :func:`sgtune.workflows.kronecker_probes.probe_check` runs the real (nonlinear) chain with the same probes.

Printed per probe: the factored prediction, the linearised real chain's ratio to it, the real chain's ratio
(± MCSE). Run: ``python benchmarks/kronecker_applicability.py [STEPS] [damped|eigenbasis]``.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kronecker_probes import _fit  # noqa: E402

from sgtune.core.config import Dynamics  # noqa: E402
from sgtune.core.errors import SgtuneError  # noqa: E402
from sgtune.theory.kronecker import tune_kronecker  # noqa: E402
from sgtune.workflows.kronecker_applicability import kronecker_applicability  # noqa: E402
from sgtune.workflows.kronecker_probes import probe_check  # noqa: E402

torch.set_num_threads(1)


def run(name, net, X, y, likelihood, delta, steps, prior, momentum=0.0):
    net = net.double()
    _fit(net, X, y, likelihood, delta)
    n = len(X)
    kw = {} if prior is None else {"prior": prior}
    try:
        res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=50, inv_temperature=2.0 * n, momentum=momentum),
                             likelihood=likelihood, prior_precision=delta, target="posterior", **kw)
    except SgtuneError as exc:
        print(f"{name}: tuning refused: {exc}", flush=True)
        return
    t = time.perf_counter()
    a = kronecker_applicability(res, net, X, y, likelihood)
    ta = time.perf_counter() - t
    print(f"{name}: D = {res.dim}, δ = {delta:g}, κ = {momentum:g}, {likelihood}; flag: "
          f"{'applicable' if a.applicable else 'NOT applicable'} ({ta:.0f} s; ΛH in [{a.eigenvalue_min:.3g}, "
          f"{a.eigenvalue_max:.3g}], real spectral radius {a.spectral_radius:.4g}, minibatch growth "
          f"×{a.minibatch_growth:.3g}/step, {a.terms} terms)", flush=True)
    t = time.perf_counter()
    try:
        pc = probe_check(res, net, X, y, likelihood, steps=steps, n_random=4)
    except SgtuneError as exc:
        print(f"   real chain: {exc}", flush=True)
        return
    print(f"   real chain {steps} steps in {time.perf_counter() - t:.0f} s")
    for lab, p, r, m, s in zip(pc.labels, pc.predicted, a.ratio, pc.measured, pc.mcse):
        print(f"   {lab:>12}: predicted {p:.4g}  linearised ×{r:.3g}  real ×{m / p:.3g} ± {s / p:.2g}", flush=True)
    rel = np.abs(pc.relative_error)
    print(f"   real: max |relative error| {rel.max():.1%}; within 10 %: {int(np.sum(rel <= 0.10))}/{len(rel)}; "
          f"linearised max |ratio − 1| {np.nanmax(np.abs(a.ratio - 1)):.1%}", flush=True)


def networks():
    """(name, module, X, y, likelihood, δ) of the measured problems (N = 2000, 8 inputs)."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    n = 2000
    X = rng.normal(size=(n, 8))
    y = np.tanh(X[:, :3].sum(axis=1)) + 0.3 * rng.normal(size=n)
    yb = (X[:, 0] - X[:, 1] + 0.5 * rng.normal(size=n) > 0).astype(float)
    yc = np.argmax(X[:, :3] + 0.5 * rng.normal(size=(n, 3)), axis=1).astype(float)
    lin, tanh, relu = torch.nn.Linear, torch.nn.Tanh, torch.nn.ReLU
    ylin = X @ rng.normal(size=8) + rng.normal(size=n)
    yield "regression linear (well specified)", lin(8, 1), X, ylin, "gaussian", 1.0
    yield "regression linear (misspecified: tanh data)", lin(8, 1), X, y / 0.3, "gaussian", 1.0
    yield "regression tanh 32", torch.nn.Sequential(lin(8, 32), tanh(), lin(32, 1)), X, y / 0.3, "gaussian", 10.0
    yield ("regression relu 16, weak prior", torch.nn.Sequential(lin(8, 16), relu(), lin(16, 1)), X, y / 0.3,
           "gaussian", 1.0)
    yield ("classification tanh 32-32", torch.nn.Sequential(lin(8, 32), tanh(), lin(32, 32), tanh(), lin(32, 1)), X,
           yb, "bernoulli", 10.0)
    yield "3 classes relu 64", torch.nn.Sequential(lin(8, 64), relu(), lin(64, 3)), X, yc, "categorical", 10.0
    yield ("classification tanh 128-64", torch.nn.Sequential(lin(8, 128), tanh(), lin(128, 64), tanh(), lin(64, 1)),
           X, yb, "bernoulli", 10.0)


def growth_only():
    """The minibatch-curvature growth (check (c)) per network for both prior forms (cheap: 300 minibatch HVPs)."""
    from sgtune.workflows.kronecker_applicability import NetworkOperators, minibatch_growth

    for name, net, X, y, lik, delta in networks():
        net = net.double()
        _fit(net, X, y, lik, delta)
        ops = NetworkOperators(net, X, y, lik, prior_precision=delta)
        row = []
        for prior in ("damped", "eigenbasis"):
            res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=50, inv_temperature=2.0 * len(X)),
                                 likelihood=lik, prior_precision=delta, target="posterior", prior=prior)
            row.append(f"{prior} ×{minibatch_growth(res, ops):.3g}")
        print(f"{name}: minibatch growth per step: {', '.join(row)}", flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "growth":
        return growth_only()
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    prior = sys.argv[2] if len(sys.argv) > 2 else None
    only = sys.argv[3] if len(sys.argv) > 3 else None
    for name, net, X, y, lik, delta in networks():
        if only is None or only in name:
            run(name, net, X, y, lik, delta, steps, prior)


if __name__ == "__main__":
    main()
