"""Instructions per chain-step of the model problems (valgrind's cachegrind), for this checkout and a baseline.

Why: CPU times on a shared 2-core machine vary by ±30 % between runs; instruction counts do not. Each model
problem of ``bench_engine_ab.py`` (Shaw & Whalley's reshuffling chains, rr and rm; the SMILE paper's SMILE and
SGLD ensembles on the isotropic Gaussian, D = 10; 4 chains, numba on one thread) runs twice under
``valgrind --tool=cachegrind --cache-sim=no``, a short and a long run from the compiled cache; the difference of
the two instruction counts divided by the extra chain-steps is the cost of a step (imports, loading the cache,
setup and summary cancel). Instruction counts do not see the cost of an atomic reference-count operation
(tens of cycles each), so read them with ``engine_refcounts.py``.

    git worktree add /tmp/base <commit>
    python benchmarks/model_problem_instructions.py [--baseline /tmp/base] [--only rr,smile]

Each checkout compiles into its own cache (``<checkout>/.numba_cache_instr``) before valgrind runs, for numba's
generic CPU (``NUMBA_CPU_NAME=generic``): numba keys its cache on the CPU it sees and valgrind shows another one
than the machine (a compile inside a measured run made nonsense of a first try). Generic code: the counts compare
checkouts, not this machine's best code. A benchmark, not a test: valgrind makes each run ≈ 50× slower (a few minutes in all).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

#: name -> (kind, settings, short steps, long steps) per chain (the reshuffle problem runs steps // 40 epochs)
PROBLEMS = {
    "reshuffle rr": ("reshuffle", {"scheme": "rr"}, 40_000, 120_000),
    "reshuffle rm": ("reshuffle", {"scheme": "rm"}, 40_000, 120_000),
    # without the velocity refresh (the default since): the hand-written loop's algorithm
    "smile ensemble D=10": ("ensemble", {"sampler": "smile", "step": 0.3, "refresh_length": "off"}, 5_000, 15_000),
    # Algorithm 1's step-size rule as printed, the one the hand-written loop ran (the default became the anchored rule)
    "smile paper-tuner D=10": ("ensemble", {"sampler": "smile", "step": 0.3, "tuner": "paper", "refresh_length": "off"},
                               5_000, 15_000),
    "smile ensemble with the refresh D=10": ("ensemble", {"sampler": "smile", "step": 0.3}, 5_000, 15_000),
    "sgld ensemble D=10": ("ensemble", {"sampler": "sgld", "step": 1e-3}, 10_000, 30_000),
}
CHAINS = 4


def _worker(name: str, steps: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_engine_ab import _model_problem_runner

    from sgtune.sampler._jit import set_num_threads

    set_num_threads(1)
    kind, settings, _, _ = PROBLEMS[name]
    _model_problem_runner()(kind, settings, steps, 0)


def _env(tree: Path) -> dict[str, str]:
    # the generic CPU: numba keys its cache on the CPU it sees, valgrind shows another one than the machine, and a
    # compile under valgrind takes ≈ 50× as long; with the generic target both see the same key
    return dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(tree / ".numba_cache_instr"),
                OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", NUMBA_CPU_NAME="generic")


#: cachegrind's summary lines read with ``--sim`` (cache and branch simulation), in the order printed
SIM_EVENTS = {r"I\s+refs": "instr", r"D\s+refs": "data refs", r"D1\s+misses": "D1 miss", r"LLd\s+misses": "LLd miss",
              r"Branches": "branches", r"Mispredicts": "mispred"}


def _counts(tree: Path, name: str, steps: int, sim: bool) -> dict[str, int]:
    flags = ["--cache-sim=yes", "--branch-sim=yes"] if sim else ["--cache-sim=no"]
    cmd = ["valgrind", "--tool=cachegrind", *flags, "--cachegrind-out-file=/dev/null",
           sys.executable, str(Path(__file__).resolve()), "--worker", name, "--steps", str(steps)]
    res = subprocess.run(cmd, env=_env(tree), cwd=str(tree), capture_output=True, text=True, check=False)
    out = {}
    for label, key in SIM_EVENTS.items():
        m = re.search(label + r":\s+([\d,]+)", res.stderr)
        if m is not None:
            out[key] = int(m.group(1).replace(",", ""))
    if res.returncode != 0 or "instr" not in out:
        raise SystemExit(f"valgrind run in {tree} failed:\n{res.stderr[-3000:]}")
    return out


def per_step_counts(tree: Path, name: str, sim: bool = False) -> dict[str, float]:
    """Cachegrind's counts per chain-step of the model problem ``name`` in the checkout ``tree`` (instructions;
    with ``sim`` also data references, D1 and last-level data misses, conditional+indirect branches and their
    mispredictions as cachegrind's simulated caches and predictor see them)."""
    _, _, short, long = PROBLEMS[name]
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", name, "--steps", "80"],
                   env=_env(tree), cwd=str(tree), check=True)  # compile into the cache outside valgrind
    a, b = _counts(tree, name, short, sim), _counts(tree, name, long, sim)
    return {k: (b[k] - a[k]) / (CHAINS * (long - short)) for k in b}


def per_step(tree: Path, name: str) -> float:
    """Instructions per chain-step of the model problem ``name`` in the checkout ``tree``."""
    return per_step_counts(tree, name)["instr"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, help="the other checkout (its repository root)")
    ap.add_argument("--only", default="", help="comma-separated substrings of the problems' names")
    ap.add_argument("--sim", action="store_true",
                    help="also simulate caches and branch prediction (data misses, mispredictions per step)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _worker(a.worker, a.steps)
        return
    keys = [k.strip() for k in a.only.split(",") if k.strip()]
    names = [n for n in PROBLEMS if not keys or any(k in n for k in keys)]
    trees = {"now": Path(__file__).resolve().parents[1]}
    if a.baseline is not None:
        trees = {"baseline": a.baseline.resolve(), **trees}
    if a.sim:
        _print_sim(names, trees)
        return
    print(f"{'model problem':22s} " + " ".join(f"{k + ' instr/step':>18s}" for k in trees)
          + ("  now/baseline" if len(trees) == 2 else ""), flush=True)
    for name in names:
        vals = [per_step(t, name) for t in trees.values()]
        tail = f"  {vals[1] / vals[0]:12.3f}" if len(vals) == 2 else ""
        print(f"{name:22s} " + " ".join(f"{v:18.0f}" for v in vals) + tail, flush=True)


def _print_sim(names: list[str], trees: dict[str, Path]) -> None:
    """One row per (problem, checkout): every simulated count per chain-step."""
    keys = list(SIM_EVENTS.values())
    print(f"{'model problem':24s} {'checkout':9s}" + "".join(f"{k:>11s}" for k in keys), flush=True)
    for name in names:
        for label, tree in trees.items():
            v = per_step_counts(tree, name, sim=True)
            print(f"{name:24s} {label:9s}" + "".join(f"{v.get(k, float('nan')):11.1f}" for k in keys), flush=True)


if __name__ == "__main__":
    main()
