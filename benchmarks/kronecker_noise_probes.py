"""The Σ-dependent minibatch noise on real networks: the Kronecker step tuned with and without C̄(Σ), real chains.

For each network (PyTorch, trained to its MAP with the prior by full-batch L-BFGS, as in
``benchmarks/kronecker_probes.py``) the factors are computed once (:func:`sgtune.models.kfac.torch_factors`) and
the Kronecker step is tuned twice (posterior target, β = 2N, B = 50): ``dq-const`` (the noise at θ̂, the old
model) and ``dq-exact`` (with the factored Σ-dependent noise, :func:`sgtune.theory.kronecker.curvature_noise_factor`).
Printed: each step's noise gain (≥ 1: no stationary covariance under the factored Σ-dependent noise), the
``dq-const`` step's exact-noise prediction, and :func:`sgtune.workflows.kronecker_probes.probe_check` on the real
chain: measured/predicted per probe (± MCSE) and the median and max |relative error|.
Run: ``python benchmarks/kronecker_noise_probes.py [STEPS]`` (default 6000 steps per chain; minutes per network).
"""
from __future__ import annotations

import sys
import time
import warnings

import numpy as np
import torch

from sgtune.core.config import Dynamics
from sgtune.core.errors import SgtuneError
from sgtune.models.kfac import torch_factors
from sgtune.theory.kronecker import exact_noise_prediction, tune_factors
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
            loss = 0.5 * (f[:, 0] - Yt).pow(2).mean()
        elif likelihood == "bernoulli":
            loss = torch.nn.functional.binary_cross_entropy_with_logits(f[:, 0], Yt)
        else:
            loss = torch.nn.functional.cross_entropy(f, Yt.long())
        loss = loss + delta / (2 * n) * sum(p.pow(2).sum() for p in net.parameters())
        loss.backward()
        return loss

    for _ in range(4):
        opt.step(closure)


def _report(pc, predicted_other=None) -> str:
    d = pc.to_dict()["probes"]
    ratio = np.array([p["measured"] / p["predicted"] for p in d])
    rel = np.abs(pc.relative_error)
    line = (f"measured/predicted median {np.median(ratio):.3g} [{ratio.min():.3g}, {ratio.max():.3g}]; "
            f"median |rel. error| {np.median(rel):.1%}, within 10 %: {int(np.sum(rel <= 0.10))}/{len(rel)}")
    if predicted_other is not None:
        r2 = np.array([p["measured"] for p in d]) / predicted_other
        line += f"; against its exact-noise prediction: median {np.median(r2):.3g} [{r2.min():.3g}, {r2.max():.3g}]"
    return line


def run(name: str, net: torch.nn.Module, X: np.ndarray, y: np.ndarray, likelihood: str, delta: float,
        steps: int) -> None:
    net = net.double()
    _fit(net, X, y, likelihood, delta)
    n = len(X)
    t = time.perf_counter()
    fac = torch_factors(net, X, y, likelihood, prior_precision=delta, samples=True)
    print(f"{name}: D = {fac.dim}, N = {n}, δ = {delta:g}, {likelihood}, B = 50, β = 2N; factors "
          f"{time.perf_counter() - t:.1f} s", flush=True)
    dyn = Dynamics(None, batch_size=50, inv_temperature=2.0 * n)
    for method in ("dq-const", "dq-exact"):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = tune_factors(fac, dyn, method=method)
            other = None
            if method == "dq-const":
                pred = exact_noise_prediction(res, fac)
        tt = time.perf_counter() - t
        gains = ", ".join(f"{lay.name} {lay.noise_gain:.3g}" for lay in res.layers)
        print(f"   {method}: tuned in {tt:.1f} s; noise gain per layer {gains}; spectral radius "
              f"{res.spectral_radius:.4f}", flush=True)
        try:
            pc = probe_check(res, net, X, y, likelihood, steps=steps, n_random=4)
        except SgtuneError as exc:
            print(f"      real chain: {exc}", flush=True)
            continue
        if method == "dq-const":
            _, V = _directions(pc, res)
            other = pred.probe_variance(V) if np.all(np.isfinite(pred.variances())) else None
        print(f"      real chain {steps} steps: {_report(pc, other)}", flush=True)


def _directions(pc, res):
    from sgtune.workflows.kronecker_probes import probe_directions

    return probe_directions(res, 4, 0)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    n = 2000
    X = rng.normal(size=(n, 8))
    y = np.tanh(X[:, :3].sum(axis=1)) + 0.3 * rng.normal(size=n)
    yb = (X[:, 0] - X[:, 1] + 0.5 * rng.normal(size=n) > 0).astype(float)
    lin = torch.nn.Linear
    run("regression tanh 32", torch.nn.Sequential(lin(8, 32), torch.nn.Tanh(), lin(32, 1)), X, y / 0.3, "gaussian",
        10.0, steps)
    run("regression relu 16, weak prior", torch.nn.Sequential(lin(8, 16), torch.nn.ReLU(), lin(16, 1)), X, y / 0.3,
        "gaussian", 1.0, steps)
    run("classification tanh 32-32", torch.nn.Sequential(lin(8, 32), torch.nn.Tanh(), lin(32, 32), torch.nn.Tanh(),
                                                         lin(32, 1)), X, yb, "bernoulli", 10.0, steps)


if __name__ == "__main__":
    main()
