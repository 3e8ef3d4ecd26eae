"""The Kronecker family's inverse-temperature search (``sgtune.workflows.kronecker_beta``): cost per β and verdicts.

For each network (PyTorch, fitted to its MAP with the prior as in ``benchmarks/kronecker_probes.py``; posterior
target, B = 50) the check at the requested β = 2N, then the search over BETA_LADDER × 2N; printed per β: the
time of its tune + capped check and the first reason it failed. A larger β makes the posterior-target Λ larger,
so for comparison the table also checks β BELOW the request (1.25N, 1.05N: Λ smaller), which the search does not
try. Run: ``python benchmarks/kronecker_beta.py``.
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
from sgtune.models.kfac import torch_factors  # noqa: E402
from sgtune.workflows.kronecker_beta import _check, search_inverse_temperature  # noqa: E402

torch.set_num_threads(1)


def networks():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    for n, hidden, delta in ((500, 8, 10.0), (500, 0, 1.0), (2000, 32, 10.0)):
        X = rng.normal(size=(n, 8))
        y = (np.tanh(X[:, :3].sum(axis=1)) + 0.3 * rng.normal(size=n)) / 0.3
        net = (torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
               if hidden else torch.nn.Linear(8, 1)).double()
        name = f"regression tanh {hidden}" if hidden else "regression linear (misspecified)"
        yield f"{name}, N = {n}, δ = {delta:g}", net, X, y, delta


def main():
    for name, net, X, y, delta in networks():
        _fit(net, X, y, "gaussian", delta)
        n = len(X)
        fac = torch_factors(net, X, y, "gaussian", prior_precision=delta)
        dyn = Dynamics(None, batch_size=50, inv_temperature=2.0 * n)
        print(f"{name}: D = {sum(p.numel() for p in net.parameters())}", flush=True)
        for mult in (1.05, 1.25, 2.0):
            t = time.perf_counter()
            ok, why = _check(fac, dyn, "posterior", mult * n, net, X, y, "gaussian", 1.0, 200, 0)
            print(f"   β = {mult:g}N: {'PASS' if ok else 'fail'} in {time.perf_counter() - t:.1f} s  {why[:110]}",
                  flush=True)
        s = search_inverse_temperature(fac, dyn, net, X, y, "gaussian", progress=lambda m: print("   " + m, flush=True))
        for b, ok, why in zip(s.tried, s.passed, s.reasons):
            print(f"   β = {b / n:g}N: {'PASS' if ok else 'fail'}  {why[:110]}", flush=True)
        print(f"   search: {s.seconds:.1f} s for {len(s.tried)} β ({s.seconds / max(1, len(s.tried)):.1f} s each): "
              f"{s.message()}", flush=True)


if __name__ == "__main__":
    main()
