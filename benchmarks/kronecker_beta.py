"""The Kronecker family's β and prior-precision searches (``sgtune.workflows.kronecker_beta``): cost and verdicts.

For each network (PyTorch, fitted to its MAP with the prior δ as in ``benchmarks/kronecker_probes.py``; posterior
target, B = 50, β = 2N) the check at the requested β and δ, then the β search (BETA_LADDER × 2N) and the prior
search (PRIOR_LADDER × δ, re-tuned from the same factors at the same θ̂); printed per value: verdict and the first
reason it failed. When the prior search finds a δ, the real network's chain is run with that step
(``probe_check``, from the same θ̂, a few thousand steps) and measured/predicted ± MCSE is printed per probe; when
none passes, the same at the ladder's last δ (not offered: to compare the check's "fail" with the real chain); then
the network is refitted to its MAP under that δ (what ``--model mlp`` does with the remedy's command) and the
check and the chain are repeated there.
Run: ``python benchmarks/kronecker_beta.py [chain steps] [beta|prior|both] [budget s]`` (the default budget is the
CLI's, SEARCH_MAX_SECONDS; a large one checks the whole ladder).
"""
from __future__ import annotations

import copy
import dataclasses
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
from sgtune.theory.kronecker import tune_factors  # noqa: E402
from sgtune.workflows.kronecker_beta import (SEARCH_MAX_SECONDS, _check, search_inverse_temperature,  # noqa: E402
                                             search_prior_precision)
from sgtune.workflows.kronecker_probes import probe_check  # noqa: E402

torch.set_num_threads(1)


def networks():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    lin = torch.nn.Linear
    for n, hidden, act, lik in ((500, 8, "tanh", "gaussian"), (2000, 32, "tanh", "gaussian"),
                                (500, 16, "relu", "gaussian"), (500, 8, "tanh", "bernoulli")):
        X = rng.normal(size=(n, 8))
        if lik == "gaussian":
            y = (np.tanh(X[:, :3].sum(axis=1)) + 0.3 * rng.normal(size=n)) / 0.3
        else:
            y = (X[:, 0] - X[:, 1] + 0.5 * rng.normal(size=n) > 0).astype(float)
        f = torch.nn.Tanh() if act == "tanh" else torch.nn.ReLU()
        net = torch.nn.Sequential(lin(8, hidden), f, lin(hidden, 1)).double()
        kind = "regression" if lik == "gaussian" else "classification"
        yield f"{kind} {act} {hidden}, N = {n}, δ = 10", net, X, y, lik, 10.0


def _chain(fac, dyn, net, X, y, lik, delta, steps, where="from the same θ̂"):
    res = tune_factors(dataclasses.replace(fac, prior_precision=delta), dyn.replace(step=None), target="posterior")
    t = time.perf_counter()
    try:
        pc = probe_check(res, net, X, y, lik, steps=steps, n_random=4)
    except SgtuneError as exc:
        print(f"   chain at δ = {delta:g}: {exc}", flush=True)
        return
    d = pc.to_dict()["probes"]
    print(f"   real chain at δ = {delta:g} (its check's verdict above) {where}, {steps} steps in {time.perf_counter() - t:.0f} s:")
    for p in d:
        r = p["measured"] / p["predicted"]
        print(f"      {p['label']:>12}: measured/predicted {r:.3f} ± {p['mcse'] / p['predicted']:.3f}  "
              f"z {p['z']:+.1f}")
    rel = np.abs(pc.relative_error)
    print(f"      median |relative error| {np.median(rel):.1%}, max {rel.max():.1%}; within 10 %: "
          f"{int(np.sum(rel <= 0.10))}/{len(rel)}", flush=True)


def _refit(net, X, y, lik, delta, dyn, steps):
    net2 = copy.deepcopy(net)
    _fit(net2, X, y, lik, delta)
    fac2 = torch_factors(net2, X, y, lik, prior_precision=delta)
    ok, why = _check(fac2, dyn, "posterior", float(dyn.inv_temperature), net2, X, y, lik, 1.0, 200, 0)
    print(f"   refitted to the MAP at δ = {delta:g}: check {'PASS' if ok else 'fail'}  {why[:230]}", flush=True)
    _chain(fac2, dyn, net2, X, y, lik, delta, steps, "from the refitted MAP")


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    which = sys.argv[2] if len(sys.argv) > 2 else "both"
    budget = float(sys.argv[3]) if len(sys.argv) > 3 else SEARCH_MAX_SECONDS
    for name, net, X, y, lik, delta in networks():
        _fit(net, X, y, lik, delta)
        n = len(X)
        fac = torch_factors(net, X, y, lik, prior_precision=delta)
        dyn = Dynamics(None, batch_size=50, inv_temperature=2.0 * n)
        print(f"{name}: D = {sum(p.numel() for p in net.parameters())}", flush=True)
        t = time.perf_counter()
        ok, why = _check(fac, dyn, "posterior", 2.0 * n, net, X, y, lik, 1.0, 200, 0)
        print(f"   requested (β = 2N, δ = {delta:g}): {'PASS' if ok else 'fail'} in {time.perf_counter() - t:.1f} s  "
              f"{why[:110]}", flush=True)
        searches = []
        if which in ("beta", "both"):
            searches.append(("β", n, search_inverse_temperature))
        if which in ("prior", "both"):
            searches.append(("δ", 1.0, search_prior_precision))
        for sym, unit, search in searches:
            s = search(fac, dyn, net, X, y, lik, max_seconds=budget, progress=lambda m: print("   " + m, flush=True))
            for v, ok, why in zip(s.tried, s.passed, s.reasons):
                print(f"   {sym} = {v / unit:g}{'N' if unit != 1 else ''}: {'PASS' if ok else 'fail'}  {why[:230]}",
                      flush=True)
            print(f"   search: {s.seconds:.1f} s for {len(s.tried)} ({s.seconds / max(1, len(s.tried)):.1f} s each): "
                  f"{s.message()}", flush=True)
            if sym == "δ" and s.tried:
                d1 = s.value if s.found else s.tried[-1]
                _chain(fac, dyn, net, X, y, lik, d1, steps)
                _refit(net, X, y, lik, d1, dyn, steps)


if __name__ == "__main__":
    main()
