"""The Kronecker family on real networks: the chain's variance along probes vs the factored prediction.

For each network (PyTorch, trained to its MAP with the prior by full-batch L-BFGS) the Kronecker step is tuned
(posterior target, β = 2N, B = 50) and :func:`sgtune.workflows.kronecker_probes.probe_check` runs the real
network's chain with it; printed per probe: predicted vᵀΣv, measured variance ± MCSE, z and the relative error.
Random probes are unit random directions of θ; "least"/"most" the per-layer extreme-variance directions.
Run: ``python benchmarks/kronecker_probes.py [STEPS]`` (default 20000 steps per chain; minutes per network).
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch

from sgtune.core.config import Dynamics
from sgtune.core.errors import SgtuneError
from sgtune.theory.kronecker import tune_kronecker
from sgtune.workflows.kronecker_probes import probe_check

torch.set_num_threads(1)


def _fit(net: torch.nn.Module, X: np.ndarray, y: np.ndarray, likelihood: str, delta: float) -> None:
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(y)
    n = len(X)
    opt = torch.optim.LBFGS(net.parameters(), max_iter=500, tolerance_grad=1e-10, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        f = net(Xt)
        if likelihood == "gaussian":
            loss = 0.5 * (f - Yt.reshape(f.shape)).pow(2).sum(dim=1).mean()
        elif likelihood == "bernoulli":
            loss = torch.nn.functional.binary_cross_entropy_with_logits(f[:, 0], Yt)
        else:
            loss = torch.nn.functional.cross_entropy(f, Yt.long())
        loss = loss + delta / (2 * n) * sum(p.pow(2).sum() for p in net.parameters())
        loss.backward()
        return loss

    for _ in range(4):
        opt.step(closure)


def run(name: str, net: torch.nn.Module, X: np.ndarray, y: np.ndarray, likelihood: str, delta: float,
        steps: int) -> None:
    net = net.double()
    _fit(net, X, y, likelihood, delta)
    n = len(X)
    res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=50, inv_temperature=2.0 * n), likelihood=likelihood,
                         prior_precision=delta, target="posterior")
    t = time.perf_counter()
    head = (f"{name}: D = {res.dim}, N = {n}, δ = {delta:g}, {likelihood}; layers "
            f"{', '.join(f'{lay.name} {lay.d_out}×{lay.d_in}' for lay in res.layers)}; spectral radius "
            f"{res.spectral_radius:.3f}, τ {max(lay.tau_worst for lay in res.layers):.3g}")
    try:
        pc = probe_check(res, net, X, y, likelihood, steps=steps, n_random=4)
    except SgtuneError as exc:
        print(f"{head}\n   {exc}", flush=True)
        return
    print(f"{head}; chain {steps} steps in {time.perf_counter() - t:.0f} s")
    for p in pc.to_dict()["probes"]:
        print(f"   {p['label']:>12}: predicted {p['predicted']:.4g}  measured {p['measured']:.4g} ± {p['mcse']:.2g}"
              f"  z {p['z']:+.1f}  relative {p['relative_error']:+.1%}")
    rel = np.abs(pc.relative_error)
    print(f"   median |relative error| {np.median(rel):.1%}, max {rel.max():.1%}; within 10 %: "
          f"{int(np.sum(rel <= 0.10))}/{len(rel)}", flush=True)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    n = 2000
    X = rng.normal(size=(n, 8))
    y = np.tanh(X[:, :3].sum(axis=1)) + 0.3 * rng.normal(size=n)
    yb = (X[:, 0] - X[:, 1] + 0.5 * rng.normal(size=n) > 0).astype(float)
    yc = np.argmax(X[:, :3] + 0.5 * rng.normal(size=(n, 3)), axis=1).astype(float)
    lin = torch.nn.Linear
    run("regression linear (misspecified: tanh data)", lin(8, 1), X, y / 0.3, "gaussian", 1.0, steps)
    ylin = X @ rng.normal(size=8) + rng.normal(size=n)
    run("regression linear (well specified)", lin(8, 1), X, ylin, "gaussian", 1.0, steps)
    run("regression tanh 32", torch.nn.Sequential(lin(8, 32), torch.nn.Tanh(), lin(32, 1)), X, y / 0.3, "gaussian",
        10.0, steps)
    run("classification tanh 32-32", torch.nn.Sequential(lin(8, 32), torch.nn.Tanh(), lin(32, 32), torch.nn.Tanh(),
                                                         lin(32, 1)), X, yb, "bernoulli", 10.0, steps)
    run("3 classes relu 64", torch.nn.Sequential(lin(8, 64), torch.nn.ReLU(), lin(64, 3)), X, yc, "categorical", 10.0,
        steps)
    run("classification tanh 128-64 (D ≈ 10⁴)", torch.nn.Sequential(lin(8, 128), torch.nn.Tanh(), lin(128, 64),
                                                                    torch.nn.Tanh(), lin(64, 1)), X, yb, "bernoulli",
        10.0, steps)


if __name__ == "__main__":
    main()
