"""µs per chain-iteration of SGLD on an MLP (p = 10 inputs, 3 hidden layers of 16, tanh, gaussian; D = 737;
N = 10 000, B = 32).

Compares, in the same run: sgtune's compiled "mlp" gradient in the composed numba kernel (1 chain), a plain
NumPy loop of the same network and update (1 chain), JAX (``jax.jit`` + ``lax.scan`` over steps, minibatch
gather inside; only where installed), and sgtune's general NumPy path (the MLP seen only through its NumPy
``per_sample_grads`` / ``batched_grads``: what a user model without a numba spec gets), 1 chain and 16 chains.
Wall and CPU time (process CPU seconds over all threads) are both shown: wall times inflate on a loaded machine.
For the sgtune rows the wall time is the driver's own loop time (``result.seconds``) and the CPU time is the
marginal cost per step, (CPU(T) − CPU(T/5)) / (0.8 T): ``run_chains`` also allocates and summarises the
D × D covariance accumulators (≈40 ms of CPU for D = 737, independent of T), which is not per-step work.
The last line prints issue 9's target: the compiled kernel's speed-up over the NumPy loop (≥ 5×).

    python benchmarks/bench_mlp_sampler.py            # full
    python benchmarks/bench_mlp_sampler.py --quick    # smaller counts (smoke)
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import time

import numpy as np

from _timing import best_wall_cpu, timing_spec_kw

from sgtune.core.config import Dynamics, RunSpec
from sgtune.models.mlp import MLP
from sgtune.sampler import run_chains

N, P, HIDDEN, B = 10_000, 10, (16, 16, 16), 32
LAM, BETA = 1e-3, float(N)


def problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, P))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.1 * rng.standard_normal(N)
    return X, y


def sgtune_us(model, X, y, steps: int, chains: int, backend: str, repeats: int) -> tuple[float, float]:
    """(wall, CPU) µs per chain-iteration: best loop time over ``repeats`` runs of ``steps`` steps, and the
    marginal CPU per step between runs of ``steps`` and ``steps // 5`` steps (module docstring)."""
    theta0 = model.initial_params(P, np.random.default_rng(1))
    dyn = Dynamics(LAM, B, inv_temperature=BETA)
    kw = dict(initial=theta0, backend=backend)
    run_chains(model, (X, y), dyn, RunSpec(5, n_chains=chains, **timing_spec_kw(5, chains, 0)), **kw)  # compile / load
    short = max(steps // 5, 1)
    walls, cpus = [], {steps: [], short: []}
    for s in range(repeats):
        for t in (steps, short):
            c = time.process_time()
            r = run_chains(model, (X, y), dyn, RunSpec(t, n_chains=chains, seed=s, **timing_spec_kw(t, chains, t - 1)),
                           **kw)
            cpus[t].append(time.process_time() - c)
            if t == steps:
                walls.append(r.seconds)
    cpu = (min(cpus[steps]) - min(cpus[short])) / (steps - short)
    return 1e6 * min(walls) / (steps * chains), 1e6 * cpu / chains


def numpy_loop_us(model, X, y, steps: int) -> tuple[float, float]:
    """A plain NumPy SGLD loop of the same network (batch-major matrices), one chain.

    The weight views into θ are made once and θ is updated in place (2–3 % faster than rebuilding the
    views from a new θ every step)."""
    rng = np.random.default_rng(0)
    shapes = [(16, 10), (16, 16), (16, 16), (1, 16)]
    theta = model.initial_params(P, np.random.default_rng(1))
    noise = math.sqrt(2 * LAM / BETA)
    Ws, k = [], 0
    for o, i in shapes:
        Ws.append((theta[k:k + o * i].reshape(o, i), theta[k + o * i:k + o * i + o]))
        k += o * (i + 1)

    def run(n: int) -> None:
        for _ in range(n):
            idx = rng.integers(0, N, size=B)
            a, yb = X[idx], y[idx]
            acts = [a]
            for W, b in Ws[:-1]:
                a = np.tanh(a @ W.T + b)
                acts.append(a)
            f = (a @ Ws[-1][0].T)[:, 0] + Ws[-1][1][0]
            delta = ((f - yb) / B)[:, None]
            grads = []
            for li in range(3, -1, -1):
                grads[:0] = [(delta.T @ acts[li]).ravel(), delta.sum(axis=0)]
                if li > 0:
                    delta = (delta @ Ws[li][0]) * (1.0 - acts[li] ** 2)
            g = np.concatenate(grads)
            theta[:] -= LAM * g
            theta[:] += noise * rng.standard_normal(theta.size)

    run(steps // 10 or 1)  # warm-up
    wall, cpu = best_wall_cpu(lambda: run(steps), 3)
    return 1e6 * wall / steps, 1e6 * cpu / steps


def jax_us(model, X, y, steps: int) -> tuple[float, float] | str:
    if importlib.util.find_spec("jax") is None:
        return "not installed"
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)  # a benchmark process: float64 like the other columns
    shapes = [(16, 10), (16, 16), (16, 16), (1, 16)]
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    noise = math.sqrt(2 * LAM / BETA)

    def loss(th, xb, yb):
        a, k = xb, 0
        for li, (o, i) in enumerate(shapes):
            W = th[k:k + o * i].reshape(o, i)
            b = th[k + o * i:k + o * i + o]
            k += o * (i + 1)
            a = a @ W.T + b
            if li < 3:
                a = jnp.tanh(a)
        return jnp.mean((a[:, 0] - yb) ** 2 / 2)

    grad = jax.grad(loss)

    def step(carry, _):
        th, key = carry
        key, k1, k2 = jax.random.split(key, 3)
        idx = jax.random.randint(k1, (B,), 0, N)
        th = th - LAM * grad(th, Xj[idx], yj[idx]) + noise * jax.random.normal(k2, th.shape)
        return (th, key), None

    @jax.jit
    def run(th, key):
        return jax.lax.scan(step, (th, key), None, length=steps)[0][0]

    th0 = jnp.asarray(model.initial_params(P, np.random.default_rng(1)))
    run(th0, jax.random.PRNGKey(0)).block_until_ready()  # compile
    wall, cpu = best_wall_cpu(lambda: run(th0, jax.random.PRNGKey(1)).block_until_ready(), 3)
    return 1e6 * wall / steps, 1e6 * cpu / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller counts (smoke test)")
    args = ap.parse_args()
    steps = 2_000 if args.quick else 20_000
    X, y = problem()
    model = MLP(HIDDEN, "tanh", "gaussian")
    d = model.n_params(P)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"SGLD on an MLP {P}-{'-'.join(map(str, HIDDEN))}-1 (tanh, gaussian), D = {d}, N = {N}, B = {B}")
    print(f"machine load average (1 min): {load:.1f} on {os.cpu_count()} cores\n")
    rows: list[tuple[str, tuple[float, float] | str]] = []
    rows.append(("numpy loop (1 chain)", numpy_loop_us(model, X, y, steps // 4)))
    rows.append(("sgtune numba kernel (1 chain)", sgtune_us(model, X, y, steps, 1, "numba", 5)))
    rows.append(("jax jit + lax.scan (1 chain)", jax_us(model, X, y, steps)))
    rows.append(("sgtune general NumPy path, per_sample_grads (1 chain)",
                 sgtune_us(_PerSampleOnly(model), X, y, steps // 10, 1, "numpy", 2)))
    rows.append(("sgtune general NumPy path, batched_grads (16 chains)",
                 sgtune_us(model, X, y, steps // 20, 16, "numpy", 2)))
    base = rows[0][1]
    print("| implementation | µs / chain-iteration (wall) | vs NumPy loop (wall) | CPU µs / chain-iteration | "
          "vs NumPy loop (CPU) |")
    print("|---|---:|---:|---:|---:|")
    for name, val in rows:
        if isinstance(val, str):
            print(f"| {name} | {val} | | | |")
            continue
        assert not isinstance(base, str)
        print(f"| {name} | {val[0]:.2f} | {base[0] / val[0]:.1f}× | {val[1]:.2f} | {base[1] / val[1]:.1f}× |")
    kern = rows[1][1]
    assert not isinstance(base, str) and not isinstance(kern, str)
    print(f"\nissue 9 target, sgtune numba kernel ≥ 5× faster than the NumPy loop: "
          f"{base[0] / kern[0]:.2f}× (wall), {base[1] / kern[1]:.2f}× (CPU) — "
          f"{kern[0]:.2f} vs {base[0]:.2f} µs wall, {kern[1]:.2f} vs {base[1]:.2f} µs CPU")


class _PerSampleOnly:
    """The MLP without its numba spec and without batched_grads: the general path's per-chain route."""

    def __init__(self, model: MLP) -> None:
        self.model = model
        self.name = "mlp-per-sample"

    def n_params(self, p: int) -> int:
        return self.model.n_params(p)

    def initial_params(self, p: int, rng: np.random.Generator) -> np.ndarray:
        return self.model.initial_params(p, rng)

    def per_sample_grads(self, theta, X, y):  # type: ignore[no-untyped-def]
        return self.model.per_sample_grads(theta, X, y)


if __name__ == "__main__":
    main()
