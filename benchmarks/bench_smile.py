"""µs per iteration of sgtune's pSMILE vs sgtune's SGLD on logistic regression (N = 10⁴, D = 50, B = 32).

Issue 11 target: pSMILE within 1.5× of SGLD per iteration, measured in the same run, and against
blackjax's MCLMC step (``blackjax.mcmc.mclmc.build_kernel`` with ``isokinetic_mclachlan``) on a
minibatch log density under ``jax.jit`` + ``lax.scan`` where blackjax is installed (extra ``peers``).

A pSMILE step evaluates the minibatch gradient three times (start, half step, end, all on the
step's batch; the loss at the start and the end) where SGLD evaluates it once, so the table gives
µs per iteration AND per gradient evaluation. blackjax's kernel reuses the gradient at the end
of the previous step (computed on the previous batch) as the first one, i.e. 2 evaluations per
step; the row "blackjax mclmc, fresh batch" recomputes it on the new batch (3, like sgtune).
Times are the best of ``--repeats`` runs, wall and CPU (``time.process_time``, all threads), with
compilation excluded. The machine is shared: compare ratios, which are measured in the same run.

    python benchmarks/bench_smile.py             # full
    python benchmarks/bench_smile.py --quick     # smaller counts (smoke)
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time

import numpy as np

from _timing import timing_spec_kw

from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler.registry import options_for
from sgtune.sampler import run_chains
from sgtune.sampler.grads import LOGISTIC
from sgtune.sampler.smile_chain import value_gradient_cost

from bench_sampler import B, D, N, problem  # the same logistic problem as the SGLD benchmark


def sgtune_us(X, y, sampler: str, chains: int, steps: int, repeats: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per chain-iteration of ``run_chains`` (moments off: burn-in = T − 1)."""
    step = 0.5 if sampler == "sgld" else 0.05
    dyn = Dynamics(step, B, inv_temperature=float(N))
    opts = options_for(sampler)
    run_chains("logistic", (X, y), dyn, RunSpec(10, n_chains=chains, **timing_spec_kw(10, chains, 0)), opts,
               initial=np.zeros(D))  # compile / load the cache
    walls, cpus = [], []
    for s in range(repeats):
        c = time.process_time()
        r = run_chains("logistic", (X, y), dyn, RunSpec(steps, n_chains=chains, seed=s,
                                                        **timing_spec_kw(steps, chains, steps - 1)), opts, initial=np.zeros(D))
        cpus.append(time.process_time() - c)
        walls.append(r.seconds)
    return 1e6 * min(walls) / (chains * steps), 1e6 * min(cpus) / (chains * steps)


def fixed_batch_us(X, y, steps: int, repeats: int, want: bool) -> float:
    """CPU µs of one minibatch gradient (with the loss when ``want``) on a fixed batch (rows in L1)."""
    idx = np.random.default_rng(1).integers(0, N, size=B).astype(np.int64)
    theta = np.zeros(D)
    value_gradient_cost(theta, X, y, idx, LOGISTIC, 10, want)
    cpus = []
    for _ in range(repeats):
        c = time.process_time()
        value_gradient_cost(theta, X, y, idx, LOGISTIC, steps, want)
        cpus.append(time.process_time() - c)
    return 1e6 * min(cpus) / steps


def blackjax_us(X, y, steps: int, repeats: int, fresh: bool) -> tuple[float, float]:  # pragma: no cover - optional
    """One chain of blackjax's MCLMC kernel (no momentum noise, L = ∞) on minibatch log densities."""
    import jax
    import jax.numpy as jnp
    from blackjax.mcmc import mclmc
    from blackjax.mcmc.integrators import isokinetic_mclachlan

    jax.config.update("jax_enable_x64", True)
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    kernel = mclmc.build_kernel(integrator=isokinetic_mclachlan)

    def logdensity(theta, idx):
        xb, yb = Xj[idx], yj[idx]
        eta = xb @ theta
        return -N * jnp.mean(jnp.logaddexp(0.0, eta) - yb * eta)

    def body(state, key):
        k1, k2 = jax.random.split(key)
        idx = jax.random.randint(k1, (B,), 0, N)
        fn = lambda th: logdensity(th, idx)  # noqa: E731
        if fresh:
            lp, g = jax.value_and_grad(fn)(state.position)
            state = state._replace(logdensity=lp, logdensity_grad=g)
        new, _info = kernel(k2, state, fn, jnp.ones(D), jnp.inf, 0.05)
        return new, None

    state0 = mclmc.init(jnp.zeros(D), lambda th: logdensity(th, jnp.arange(B)), jax.random.PRNGKey(1))
    scan = jax.jit(lambda st, keys: jax.lax.scan(body, st, keys)[0])
    keys = jax.random.split(jax.random.PRNGKey(0), steps)
    scan(state0, keys).position.block_until_ready()
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        scan(state0, keys).position.block_until_ready()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return 1e6 * min(walls) / steps, 1e6 * min(cpus) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    steps = 20_000 if args.quick else 200_000
    X, y = problem()
    rows: list[tuple[str, int, int, float, float]] = []  # name, chains, grads/iter, wall µs, CPU µs
    for chains in (1, args.chains):
        t = steps if chains == 1 else max(1, steps // chains)
        for sampler, grads in (("sgld", 1), ("smile-naive", 3), ("psmile-naive", 3), ("psmile", 3)):
            wall, cpu = sgtune_us(X, y, sampler, chains, t, args.repeats)
            rows.append((f"sgtune {sampler}", chains, grads, wall, cpu))
    if importlib.util.find_spec("blackjax") is None:
        print("blackjax: not installed (pip install 'sgtune[peers]')")
    else:
        for fresh in (False, True):
            wall, cpu = blackjax_us(X, y, steps // 4, args.repeats, fresh)
            rows.append(("blackjax mclmc" + (", fresh batch" if fresh else " (FSAL)"), 1, 3 if fresh else 2, wall,
                         cpu))
    base = {c: (w, p) for name, c, _, w, p in rows if name == "sgtune sgld"}
    print(f"logistic regression N = {N}, D = {D}, B = {B}; {steps} steps (1 chain), best of {args.repeats}")
    head = (f"{'method':<32}{'chains':>7}{'grads/it':>9}{'µs/it wall':>12}{'µs/it CPU':>11}{'µs/grad CPU':>12}"
            f"{'× sgld (CPU)':>13}{'× sgld (wall)':>14}")
    print(head)
    print("-" * len(head))
    out = []
    for name, c, g, wall, cpu in rows:
        bw, bc = base[c]
        print(f"{name:<32}{c:>7}{g:>9}{wall:>12.3f}{cpu:>11.3f}{cpu / g:>12.3f}{cpu / bc:>13.2f}{wall / bw:>14.2f}")
        out.append({"method": name, "chains": c, "grads_per_iteration": g, "us_per_iteration_wall": wall,
                    "us_per_iteration_cpu": cpu, "us_per_gradient_cpu": cpu / g, "ratio_to_sgld_cpu": cpu / bc,
                    "ratio_to_sgld_wall": wall / bw})
    g0 = fixed_batch_us(X, y, steps, args.repeats, False)
    g1 = fixed_batch_us(X, y, steps, args.repeats, True)
    ps = next(r for r in out if r["method"] == "sgtune psmile" and r["chains"] == 1)
    rest = ps["us_per_iteration_cpu"] - (g0 + 2 * g1)
    print(f"\nsplit of a pSMILE step (1 chain, CPU µs): gradient on a fixed batch {g0:.3f}, gradient + loss {g1:.3f}; "
          f"3 evaluations (2 with the loss) ≈ {g0 + 2 * g1:.3f} of {ps['us_per_iteration_cpu']:.3f} "
          f"(batch draw, row loads, integrator, EMAs, tuner: {rest:.3f}); SGLD's whole step {base[1][1]:.3f}")
    print(f"pSMILE floor from its 3 gradient evaluations alone: {(g0 + 2 * g1) / base[1][1]:.2f}× SGLD's step")
    out.append({"method": "split", "gradient_fixed_batch_us": g0, "value_gradient_fixed_batch_us": g1,
                "psmile_rest_us": rest})
    print(f"target (pSMILE ≤ 1.5 × SGLD per iteration, 1 chain): {ps['ratio_to_sgld_cpu']:.2f}× (CPU) — "
          f"{'met' if ps['ratio_to_sgld_cpu'] <= 1.5 else 'NOT met'}; per gradient evaluation "
          f"{ps['us_per_gradient_cpu'] / base[1][1]:.2f}× SGLD's step")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
