"""The chain engine against another checkout of sgtune (e.g. the code before a refactoring), in one run.

CPU µs per chain-iteration of the compiled chains — the process CPU time of a run of 2T steps minus that of
T steps, each the best of ``--repeats``, so compile, setup and summary cancel and the time other processes
hold the core is not counted — for a few configurations — SG(L)D on logistic regression (N = 10 000, D = 50, B = 32) with
and without the streaming covariance, 1 and 64 chains, a dense Λ with momentum, reshuffling, SGLRW, the
SMILE sampler, and SG(L)D on a one-layer MLP. Each round runs a worker process per checkout (alternating
which goes first), so both see the same machine load; the table reports the best of the rounds per
configuration and the ratio now / baseline (on a shared machine the CPU time still grows with the load —
caches and the core's other hyper-thread are shared — but both checkouts see the same load).

    git worktree add /tmp/base <commit>            # the baseline checkout
    python benchmarks/bench_engine_ab.py --baseline /tmp/base [--rounds 5] [--json out.json]

Each checkout compiles into its own numba cache (``<checkout>/.numba_cache_ab``). The worker calls
``run_chains`` in whichever form the checkout has (``Dynamics``/``RunSpec``/options, or the keyword form
of 0.1), with numba limited to one thread.
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

N, D, B = 10_000, 50, 32
#: name -> (model, sampler, step, chains, steps, extra settings); "cov": streaming covariance on (burn-in 0)
CONFIGS = {
    "sgld, 1 chain, no covariance": ("logistic", "sgld", 0.5, 1, 40_000, {"cov": False}),
    "sgld, 1 chain, streaming covariance": ("logistic", "sgld", 0.5, 1, 40_000, {"cov": True}),
    "sgld, 64 chains, 1 thread, streaming cov.": ("logistic", "sgld", 0.5, 64, 1_000, {"cov": True}),
    "sgld, dense Λ, momentum 0.5": ("logistic", "sgld", "dense", 1, 20_000, {"cov": True, "momentum": 0.5}),
    "sgld, reshuffle": ("logistic", "sgld", 0.5, 1, 40_000, {"cov": True, "batching": "reshuffle"}),
    "sglrw": ("logistic", "sglrw", 0.5, 1, 40_000, {"cov": True}),
    "smile (3 gradients per step)": ("logistic", "smile", 0.03, 1, 20_000, {"cov": True}),
    "sgld, MLP 50-3-1 (D = 157)": ("mlp", "sgld", 0.2, 1, 20_000, {"cov": True}),
}


def _problem():
    import numpy as np

    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D)) / math.sqrt(D)
    theta = rng.standard_normal(D)
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ theta))).astype(float)
    return X, y


def _runner():
    """run(model, X, y, step, sampler, chains, steps, burn_in, seed, momentum, batching) in the checkout's API."""
    import warnings

    from sgtune.sampler import run_chains

    if "dynamics" in inspect.signature(run_chains).parameters:
        from sgtune.core.config import Dynamics, RunSpec
        from sgtune.sampler.registry import options_for

        def run(model, X, y, step, sampler, chains, steps, burn_in, seed, momentum, batching, initial):
            dyn = Dynamics(step, B, inv_temperature=float(N), momentum=momentum, batching=batching)
            spec = RunSpec(steps, n_chains=chains, burn_in=burn_in, batches_per_chain=1, seed=seed)
            return run_chains(model, (X, y), dyn, spec, options_for(sampler), initial=initial,
                              prior_precision=1.0)
        return run

    def run_old(model, X, y, step, sampler, chains, steps, burn_in, seed, momentum, batching, initial):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return run_chains(model, (X, y), step, batch_size=B, n_steps=steps, n_chains=chains, burn_in=burn_in,
                              batches_per_chain=1, seed=seed, sampler=sampler, inv_temperature=float(N),
                              momentum=momentum, batching=batching, initial=initial, prior_precision=1.0)
    return run_old


def _selected(only: str) -> list[str]:
    keys = [k.strip() for k in only.split(",") if k.strip()]
    names = [n for n in CONFIGS if not keys or any(k in n for k in keys)]
    if not names:
        raise SystemExit(f"--only {only!r} matches none of: {', '.join(CONFIGS)}")
    return names


def worker(repeats: int, only: str = "") -> dict[str, float]:
    """µs per chain-iteration, best of ``repeats``, for every configuration (this process's sgtune)."""
    import numpy as np

    from sgtune.models import make_mlp
    from sgtune.sampler._jit import set_num_threads

    set_num_threads(1)
    X, y = _problem()
    run = _runner()
    out = {}
    for name in _selected(only):
        model_name, sampler, step, chains, steps, extra = CONFIGS[name]
        model = make_mlp("3", activation="tanh", likelihood="bernoulli") if model_name == "mlp" else model_name
        dim = model.n_params(D) if model_name == "mlp" else D
        lam = 0.3 * (np.eye(dim) + 0.2 * np.ones((dim, dim)) / dim) if step == "dense" else step
        initial = 0.01 * np.random.default_rng(1).standard_normal(dim)
        kw = dict(momentum=extra.get("momentum", 0.0), batching=extra.get("batching", "replacement"),
                  initial=initial)
        run(model, X, y, lam, sampler, chains, 50, 0, 0, **kw)  # compile / load the cache
        cpu = {}
        for n in (steps, 2 * steps):
            best = math.inf
            for s in range(repeats):
                tic = time.process_time()
                run(model, X, y, lam, sampler, chains, n, 0 if extra["cov"] else n - 1, s, **kw)
                best = min(best, time.process_time() - tic)
            cpu[n] = best
        # the CPU time of `steps` more steps: the setup and summary cancel, and the time other processes
        # take the core is not counted (this machine is shared)
        out[name] = 1e6 * (cpu[2 * steps] - cpu[steps]) / (chains * steps)
    return out


def _spawn(tree: Path, repeats: int, only: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(tree / ".numba_cache_ab"),
               OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", "--repeats", str(repeats),
                          "--only", only],
                         env=env, cwd=str(tree), capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"worker in {tree} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, help="the other checkout (its repository root)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="runs per configuration inside a worker")
    ap.add_argument("--json", type=Path, help="also write the table here (the docs' results format)")
    ap.add_argument("--label", default="baseline", help="the baseline's name in the table (e.g. its commit)")
    ap.add_argument("--note", default="", help="a remark for the table's caption (e.g. the machine's load)")
    ap.add_argument("--only", default="", help="comma-separated substrings: run only the configurations whose "
                    "name contains one (e.g. sglrw,MLP)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.repeats, a.only)))
        return
    if a.baseline is None:
        ap.error("--baseline is required")
    here = Path(__file__).resolve().parents[1]
    trees = {"baseline": a.baseline.resolve(), "now": here}
    best: dict[str, dict[str, float]] = {k: {} for k in trees}
    for r in range(a.rounds):
        for label in (("baseline", "now") if r % 2 == 0 else ("now", "baseline")):
            for name, us in _spawn(trees[label], a.repeats, a.only).items():
                best[label][name] = min(best[label].get(name, math.inf), us)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    rows = []
    print(f"{'configuration':44s} {'baseline µs':>12s} {'now µs':>9s} {'now/base':>9s}")
    for name in _selected(a.only):
        b, n = best["baseline"][name], best["now"][name]
        rows.append([name, f"{b:.3g}", f"{n:.3g}", f"{n / b:.2f}"])
        print(f"{name:44s} {b:12.3f} {n:9.3f} {n / b:9.3f}")
    if a.json:
        table = {"command": f"python benchmarks/bench_engine_ab.py --baseline <{a.label}> --rounds {a.rounds}",
                 "measured": (f"{a.label} against this checkout; best of {a.rounds} alternating rounds × "
                              f"{a.repeats} runs, CPU time of T more steps, numba on 1 thread; {a.note}").rstrip("; "),
                 "columns": ["configuration", f"{a.label} µs/iteration", "now µs/iteration", "now / before"],
                 "align": ["---", "---:", "---:", "---:"], "rows": rows}
        a.json.write_text(json.dumps({"tables": {"engine_ab": table}}, indent=1, ensure_ascii=False) + "\n")

if __name__ == "__main__":
    main()
