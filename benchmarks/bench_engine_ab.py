"""The chain engine against another checkout of sgtune (e.g. the code before a refactoring), in one run.

CPU µs per chain-iteration of the compiled chains — the process CPU time of a run of 2T steps (compiled or
loaded from the cache first), the best of ``--repeats``, so the time other processes hold the core is not
counted (the run's setup and summary, a few ms, are) — for a few configurations — SG(L)D on logistic regression (N = 10 000, D = 50, B = 32) with
and without the streaming covariance, 1 and 64 chains, a dense Λ with momentum, reshuffling, SGLRW, the
SMILE sampler, and SG(L)D on a one-layer MLP; and the model problems that have their own public entry point
(Shaw & Whalley's reshuffling chains, ``run_reshuffle_chains``; the SMILE paper's ensembles on an analytic
target, ``run_smile_ensemble``), 4 chains each. Each round runs a worker process per checkout (alternating
which goes first), so both see the same machine load; the table reports the best of the rounds per
configuration and the ratio now / baseline, and the median and range of the ratios within a round (the two
checkouts of a round run back to back, so the ratio cancels most of the machine's drift; on a shared machine the CPU time still grows with the load —
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

from _timing import timing_spec_kw

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


#: the model-problem engines (the same public functions in both checkouts): name -> (kind, settings, steps per
#: chain); µs per chain-iteration as above (2T steps per chain, 4 chains, 1 thread)
MODEL_PROBLEMS = {
    "reshuffle model problem, rr (N = 1200, B = 30)": ("reshuffle", {"scheme": "rr"}, 40_000),
    "reshuffle model problem, rm (N = 1200, B = 30)": ("reshuffle", {"scheme": "rm"}, 40_000),
    # the hand-written loop's algorithm: no velocity refresh (the default of smile since: the row below)
    "smile ensemble, Gaussian D = 10": ("ensemble", {"sampler": "smile", "step": 0.3, "refresh_length": "off"},
                                        20_000),
    # the step-size rule of the hand-written loop (Algorithm 1 as printed; the default is the anchored rule since)
    "smile ensemble, paper tuner, Gaussian D = 10": ("ensemble", {"sampler": "smile", "step": 0.3, "tuner": "paper",
                                                                  "refresh_length": "off"}, 20_000),
    # today's default, with the velocity refresh (D more normals and the path's statistics a step): its cost
    "smile ensemble with the refresh (default), D = 10": ("ensemble", {"sampler": "smile", "step": 0.3}, 20_000),
    "sgld ensemble, Gaussian D = 10": ("ensemble", {"sampler": "sgld", "step": 1e-3}, 40_000),
}


def _model_problem_runner():
    """run(kind, settings, steps, seed) for Shaw & Whalley's model problem and the SMILE paper's ensembles."""
    import numpy as np

    from sgtune.sampler.reshuffle import run_reshuffle_chains
    try:  # the ensembles' own module since engine4; sgtune.sampler.smile before (the A/B runs older checkouts)
        from sgtune.sampler.smile_ensemble import run_smile_ensemble
    except ImportError:
        from sgtune.sampler.smile import run_smile_ensemble
    from sgtune.sampler.targets import make_target

    x = np.random.default_rng(3).standard_normal(1200)
    target = make_target("gaussian", "isotropic", dim=10, seed=0)
    new_form = "run" in inspect.signature(run_smile_ensemble).parameters

    def run(kind, settings, steps, seed):
        if kind == "reshuffle":
            return run_reshuffle_chains(x, 30, 0.5, scheme=settings["scheme"], n_chains=4, n_epochs=steps // 40,
                                        burn_in_epochs=0, seed=seed)
        if new_form:
            from sgtune.core.config import RunSpec
            from sgtune.sampler.registry import options_for

            extra = {k: v for k, v in settings.items() if k not in ("sampler", "step")}
            return run_smile_ensemble(target, settings["step"], RunSpec(steps, n_chains=4, seed=seed),
                                      options_for(settings["sampler"], **extra))
        return run_smile_ensemble(target, settings["sampler"], settings["step"], n_steps=steps, n_chains=4, seed=seed)
    return run


def _cpu_per_step(call, steps: int, chains: int, repeats: int) -> float:
    """µs per chain-iteration: the best CPU time of ``call(2T, seed)`` over ``repeats`` seeds (its setup and
    summary, a few ms, included; the time other processes take the core is not counted). A difference of two
    best times, long minus short, was tried and is not robust here: one slow short run makes it absurdly small."""
    n = 2 * steps
    best = math.inf
    for s in range(repeats):
        tic = time.process_time()
        call(n, s)
        best = min(best, time.process_time() - tic)
    return 1e6 * best / (chains * n)


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
            spec = RunSpec(steps, n_chains=chains, seed=seed, **timing_spec_kw(steps, chains, burn_in))
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
    names = [n for n in (*CONFIGS, *MODEL_PROBLEMS) if not keys or any(k in n for k in keys)]
    if not names:
        raise SystemExit(f"--only {only!r} matches none of: {', '.join((*CONFIGS, *MODEL_PROBLEMS))}")
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
    for name in [n for n in _selected(only) if n in CONFIGS]:
        model_name, sampler, step, chains, steps, extra = CONFIGS[name]
        model = make_mlp("3", activation="tanh", likelihood="bernoulli") if model_name == "mlp" else model_name
        dim = model.n_params(D) if model_name == "mlp" else D
        lam = 0.3 * (np.eye(dim) + 0.2 * np.ones((dim, dim)) / dim) if step == "dense" else step
        initial = 0.01 * np.random.default_rng(1).standard_normal(dim)
        kw = dict(momentum=extra.get("momentum", 0.0), batching=extra.get("batching", "replacement"),
                  initial=initial)
        run(model, X, y, lam, sampler, chains, 50, 0, 0, **kw)  # compile / load the cache
        burn = (lambda n: 0) if extra["cov"] else (lambda n: n - 1)  # covariance on: record every step
        out[name] = _cpu_per_step(lambda n, s: run(model, X, y, lam, sampler, chains, n, burn(n), s, **kw),
                                  steps, chains, repeats)
    run_mp = _model_problem_runner()
    for name in [n for n in _selected(only) if n in MODEL_PROBLEMS]:
        kind, settings, steps = MODEL_PROBLEMS[name]
        run_mp(kind, settings, 80, 0)  # compile / load the cache
        out[name] = _cpu_per_step(lambda n, s: run_mp(kind, settings, n, s), steps, 4, repeats)
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
    per_round: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
    for r in range(a.rounds):
        for label in (("baseline", "now") if r % 2 == 0 else ("now", "baseline")):
            for name, us in _spawn(trees[label], a.repeats, a.only).items():
                per_round[label].setdefault(name, []).append(us)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    rows = []
    print(f"{'configuration':44s} {'baseline µs':>12s} {'now µs':>9s} {'now/base':>9s} {'per-round now/base':>22s}")
    for name in _selected(a.only):
        b, n = min(per_round["baseline"][name]), min(per_round["now"][name])
        # the two checkouts of one round ran back to back: the ratio within a round cancels most of the
        # machine's drift; the median over rounds and its range show what is noise
        ratios = sorted(x / y for x, y in zip(per_round["now"][name], per_round["baseline"][name]))
        med = ratios[len(ratios) // 2] if len(ratios) % 2 else 0.5 * (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2])
        rng_txt = f"{med:.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]"
        rows.append([name, f"{b:.3g}", f"{n:.3g}", f"{n / b:.2f}", rng_txt])
        print(f"{name:44s} {b:12.3f} {n:9.3f} {n / b:9.3f} {rng_txt:>22s}")
    if a.json:
        table = {"command": f"python benchmarks/bench_engine_ab.py --baseline <{a.label}> --rounds {a.rounds}",
                 "measured": (f"{a.label} against this checkout; best of {a.rounds} alternating rounds × "
                              f"{a.repeats} runs, best CPU time of a 2T-step run per chain-step, numba on 1 thread; {a.note}").rstrip("; "),
                 "columns": ["configuration", f"{a.label} µs/iteration", "now µs/iteration", "now / before",
                             "now / before per round: median [range]"],
                 "align": ["---", "---:", "---:", "---:", "---:"], "rows": rows}
        a.json.write_text(json.dumps({"tables": {"engine_ab": table}}, indent=1, ensure_ascii=False) + "\n")

if __name__ == "__main__":
    main()
