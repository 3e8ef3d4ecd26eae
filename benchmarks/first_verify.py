"""The first ``sgtune verify`` of the README's quickstart with a cold numba cache, this checkout against a baseline.

In a fresh folder per checkout: the quickstart's data (2000 rows, logistic, 3 covariates) and ``sgtune.toml``,
``sgtune lambda --target sandwich`` (no chains: not timed), then ``sgtune verify --lambda lambda.npy
--relative-tolerance 0.1 -q`` with an empty ``NUMBA_CACHE_DIR`` (timed: wall seconds and the child's CPU
seconds, most of it numba compiling the chain loop), then the same command again on the filled cache. The
checkouts alternate within each round (same machine load). Usage::

    git worktree add /tmp/sgtune_base main
    python benchmarks/first_verify.py --baseline /tmp/sgtune_base [--rounds 1]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VERIFY = ["verify", "--lambda", "lambda.npy", "--relative-tolerance", "0.1", "-q", "--json", "verify.json",
          "--overwrite"]


def _write_quickstart(folder: Path) -> None:
    rng = np.random.default_rng(0)
    theta = np.array([1.0, -0.5, 0.25])
    X = rng.standard_normal((2000, 3))
    y = (rng.random(2000) < 1 / (1 + np.exp(-X @ theta))).astype(int)
    np.savetxt(folder / "data.csv", np.column_stack([X, y]), delimiter=",", header="x1,x2,x3,y", comments="",
               fmt="%.6g")
    (folder / "sgtune.toml").write_text('data = "data.csv"\nmodel = "logistic"\nbatch-size = 32\n')


def _sgtune(tree: Path, folder: Path, cache: str, args: list[str]) -> tuple[float, float, int]:
    """(wall s, child CPU s, exit code) of ``sgtune ARGS`` run from ``tree``'s sources."""
    env = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": cache}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    tic = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", "import sys; from sgtune.cli import main; sys.exit(main())", *args], cwd=folder, env=env, capture_output=True,
                       text=True)
    wall = time.perf_counter() - tic
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 3):
        raise SystemExit(f"sgtune {' '.join(args)} failed in {tree}:\n{p.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), p.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other checkout (its repository root)")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    trees = {"this": ROOT, "baseline": args.baseline.resolve()}
    rows = []
    for r in range(args.rounds):
        for name, tree in trees.items():
            with tempfile.TemporaryDirectory(prefix="sgtune-first-verify-") as tmp:
                folder, cache = Path(tmp) / "work", str(Path(tmp) / "cache")
                folder.mkdir()
                _write_quickstart(folder)
                _sgtune(tree, folder, cache, ["lambda", "--target", "sandwich", "-o", "lambda.npy", "--json",
                                              "lambda.json", "--overwrite", "-q"])
                cold = _sgtune(tree, folder, cache, VERIFY)
                warm = _sgtune(tree, folder, cache, VERIFY)
                rows.append((r, name, cold, warm))
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("| round | checkout | cold wall s | cold CPU s | cached wall s | cached CPU s | exit |")
    print("|---|---|---|---|---|---|---|")
    for r, name, cold, warm in rows:
        print(f"| {r} | {name} | {cold[0]:.1f} | {cold[1]:.1f} | {warm[0]:.1f} | {warm[1]:.1f} | {cold[2]} |")


if __name__ == "__main__":
    main()
