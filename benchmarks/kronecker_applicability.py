"""Does the Kronecker family's applicability flag agree with the real network's chain? And why is it far off?

For each network (PyTorch, fitted to its MAP with the prior, as in ``benchmarks/kronecker_probes.py``) the
Kronecker step is tuned (posterior target, β = 2N, B = 50), then

- :func:`sgtune.workflows.kronecker_applicability.kronecker_applicability` (matrix-free: stability of the real
  linearised chain, and its variance along the probes with the true Hessian and constant gradient noise), timed;
- :func:`sgtune.workflows.kronecker_probes.probe_check` runs the real (nonlinear) chain with the same probes.

The first three networks are the cases where the factored theory is exact or nearly so: a multi-output linear
regression and a linear head on frozen random features, both on a product design (every input point with
every centred noise vector: H and C exactly Kronecker, ḡ = 0, no prior), and a softmax head on fixed inputs
(H = mean (diag p − ppᵀ) ⊗ ããᵀ is not a Kronecker product: the linearised ratio says how far).

For a network whose real chain is further than 10 % from the prediction (or diverges) two more real chains
locate the cause, each against the factored prediction of ITS chain (the same per-layer factors, M rescaled
or the batch changed, re-solved):

- ``halved Λ``: M/2, same B: the minibatch Hessians' multiplicative fluctuation (∝ Λ) halves;
- ``full batch``: B = N without replacement, same Λ: no minibatch noise and no minibatch-curvature fluctuation,
  so what remains is the curvature's factorisation (KFAC, cross-layer blocks) and the nonlinearity.

Printed per probe: the factored prediction, the linearised real chain's ratio to it (≥: a partial sum, the
series did not converge), the real chain's ratio ± MCSE, and the diagnostic chains' ratios ± MCSE.
Run: ``python benchmarks/kronecker_applicability.py [STEPS] [damped|eigenbasis] [NAME-SUBSTRING]``.
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
from sgtune.models.kfac import torch_factors  # noqa: E402
from sgtune.theory.kronecker import (KroneckerTuning, damped_factors, layer_stationary,  # noqa: E402
                                     noise_factor_for, tune_kronecker)
import sgtune.workflows.kronecker_applicability as _ka  # noqa: E402
from sgtune.workflows.kronecker_applicability import kronecker_applicability  # noqa: E402
from sgtune.workflows.kronecker_probes import probe_check  # noqa: E402

torch.set_num_threads(1)
_ka.DIAGNOSTIC_TERMS = 1000  # the results file's linearised lower bounds after a failed check (c) used 1000 terms


class RandomFeatures(torch.nn.Module):
    """tanh(W₁x + b₁) with W₁, b₁ buffers (a frozen first layer, not in θ), then a linear head."""

    def __init__(self, W1, b1, k):
        super().__init__()
        self.register_buffer("W1", torch.as_tensor(W1))
        self.register_buffer("b1", torch.as_tensor(b1))
        self.head = torch.nn.Linear(W1.shape[0], k).double()

    def features(self, x):
        return torch.tanh(x @ self.W1.T + self.b1)

    def forward(self, x):
        return self.head(self.features(x))


def variant(res, factors, scale=1.0, dynamics=None):
    """The result with every M scaled by ``scale`` (and/or other dynamics), its factored prediction re-solved."""
    from dataclasses import replace

    dyn = res.dynamics if dynamics is None else dynamics
    layers = []
    for lf, lay in zip(factors.layers, res.layers):
        A_d, G_d = damped_factors(lf, res.prior_precision, res.n_data)
        M = scale * lay.step_factor
        S, rho, tau = layer_stationary(G_d, noise_factor_for(lf, A_d), M, dyn, res.n_data)
        d = lay.d_out
        layers.append(replace(lay, step_factor=M, output_cov=0.5 * (S[:d, :d] + S[:d, :d].T), spectral_radius=rho,
                              tau_worst=tau))
    return KroneckerTuning(tuple(layers), res.dim, res.n_data, dyn, res.target, res.prior_precision)


def _chain(label, res, net, X, y, likelihood, steps):
    t = time.perf_counter()
    try:
        pc = probe_check(res, net, X, y, likelihood, steps=steps, n_random=4)
    except SgtuneError as exc:
        print(f"   {label}: {exc}", flush=True)
        return None
    print(f"   {label} {steps} steps in {time.perf_counter() - t:.0f} s", flush=True)
    return pc


def _summary(label, pc):
    rel = np.abs(pc.relative_error)
    print(f"   {label}: max |relative error| {rel.max():.1%}; within 10 %: {int(np.sum(rel <= 0.10))}/{len(rel)}; "
          f"median ratio {np.median(pc.measured / pc.predicted):.3g}; |z| ≤ 3: {int(np.sum(np.abs(pc.z) <= 3))}/"
          f"{len(rel)}", flush=True)


def run(name, net, X, y, likelihood, delta, steps, prior, momentum=0.0, diagnose=True):
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
          f"×{a.minibatch_growth:.3g}/step, {a.terms} terms{'' if a.converged else ', not converged'})", flush=True)
    pc = _chain("real chain", res, net, X, y, likelihood, steps)
    # far: beyond 10 % by more than 3 MCSE on some probe (a 6000-step chain's MCSE alone is 5–15 %)
    far = pc is None or not np.all(np.abs(pc.relative_error) <= 0.10 + 3.0 * pc.mcse / pc.predicted)
    extra = []
    if far and diagnose and (prior in (None, "damped")):
        fac = torch_factors(net, X, y, likelihood, prior_precision=delta)
        for label, r in (("halved Λ", variant(res, fac, 0.5)),
                         ("full batch", variant(res, fac, 1.0, res.dynamics.replace(batch_size=n,
                                                                                     batching="without-replacement")))):
            extra.append((label, _chain(label + " chain", r, net, X, y, likelihood, steps)))
    base = pc if pc is not None else next((q for _, q in extra if q is not None), None)
    if base is None:
        return
    ge = "" if a.converged else "≥"
    for i, lab in enumerate(base.labels):
        row = f"   {lab:>12}: predicted {base.predicted[i]:.4g}  linearised ×{ge}{a.ratio[i]:.3g}"
        for label, q in [("real", pc)] + extra:
            if q is not None:
                row += f"  {label} ×{q.measured[i] / q.predicted[i]:.3g} ± {q.mcse[i] / q.predicted[i]:.2g}"
        print(row, flush=True)
    for label, q in [("real", pc)] + extra:
        if q is not None:
            _summary(label, q)
    print(f"   linearised max |ratio − 1| {ge}{np.nanmax(np.abs(a.ratio - 1)):.1%}", flush=True)


def product_design(rng, n_points, n_noise, p, k):
    """Rows (x_i, ε_j) for every pair (centred ε): the fit is exact and C = cov(ε) ⊗ A exactly."""
    X0 = rng.normal(size=(n_points, p))
    L = np.array([[1.0, 0.0, 0.0], [0.5, 0.8, 0.0], [0.2, -0.3, 0.6]])[:k, :k]
    eps = rng.normal(size=(n_noise, k)) @ L.T
    eps -= eps.mean(axis=0)
    i, j = np.divmod(np.arange(n_points * n_noise), n_noise)
    return X0[i], eps[j]


def exact_networks():
    """(name, module, X, y, likelihood, δ) of the exact (or nearly exact) cases, N = 2000."""
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    X, eps = product_design(rng, 200, 10, 4, 3)
    yield ("exact: linear 4→3 outputs (product design, no prior)", torch.nn.Linear(4, 3), X,
           X @ rng.normal(size=(3, 4)).T + eps, "gaussian", 0.0)
    W1, b1 = rng.normal(size=(16, 4)), rng.normal(size=16)
    net = RandomFeatures(W1, b1, 3)
    F = net.features(torch.as_tensor(X)).numpy()
    yield ("exact: frozen random features 4→16 + linear head →3", net, X, F @ rng.normal(size=(3, 16)).T + eps,
           "gaussian", 0.0)
    Xs = rng.normal(size=(2000, 8))
    ys = np.argmax(Xs[:, :3] + 0.5 * rng.normal(size=(2000, 3)), axis=1).astype(float)
    yield "near: softmax head 8→3 on fixed inputs (δ = 1)", torch.nn.Linear(8, 3), Xs, ys, "categorical", 1.0


def networks():
    """(name, module, X, y, likelihood, δ) of the measured problems (N = 2000, 8 inputs)."""
    yield from exact_networks()
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
            run(name, net, X, y, lik, delta, steps, prior, diagnose="128-64" not in name)


if __name__ == "__main__":
    main()
