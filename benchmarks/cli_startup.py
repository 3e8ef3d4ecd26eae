"""Start-up of the ``sgtune`` program: this checkout against a baseline, in the same run.

Four commands, each a new process as a user (or the test suite) starts it: ``sgtune --help``, ``sgtune run --help``,
a small ``sgtune run`` and a small ``sgtune verify`` on the bundled logistic example. The numba cache is warm (one
untimed run of each command per checkout first, in that checkout's own temporary ``NUMBA_CACHE_DIR``), so what
is timed is imports, the fit and the short chains, not compiling. Wall seconds and the child's CPU seconds, best of
``--repeats`` each, the checkouts alternating within each repeat (same machine load). Usage::

    python benchmarks/cli_startup.py --baseline /work/main [--repeats 5]
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "sgtune --help": ["--help"],
    "sgtune run --help": ["run", "--help"],
    "sgtune run (logistic, 2×2000 steps)": ["run", "--example", "logistic", "--batch-size", "16", "--step-size",
                                           "0.01", "--steps", "2000", "--chains", "2", "--seed", "7", "-q",
                                           "--json", "run.json", "--overwrite"],
    "sgtune verify (logistic, 2000 steps)": ["verify", "--example", "logistic", "--batch-size", "32", "--steps",
                                             "2000", "-q", "--json", "verify.json", "--overwrite"],
}


def _sgtune(tree: Path, folder: Path, cache: str, args: list[str]) -> tuple[float, float]:
    """(wall s, child CPU s) of ``sgtune ARGS`` run from ``tree``'s sources (exit 0 or 3: verify may reject)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": cache}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    tic = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", "import sys; from sgtune.cli import main; sys.exit(main())", *args],
                       cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - tic
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 3):
        raise SystemExit(f"sgtune {' '.join(args)} failed in {tree}:\n{p.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other checkout (its repository root)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    trees = {"this": ROOT, "baseline": args.baseline.resolve()}
    best = {(n, c): [math.inf, math.inf] for n in trees for c in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="sgtune-cli-startup-") as tmp:
        dirs = {n: (Path(tmp) / n, str(Path(tmp) / f"{n}-cache")) for n in trees}
        for name, tree in trees.items():
            dirs[name][0].mkdir()
            for argv in COMMANDS.values():  # warm the numba cache: not timed
                _sgtune(tree, *dirs[name], argv)
        for _ in range(args.repeats):
            for cmd, argv in COMMANDS.items():
                for name, tree in trees.items():
                    wall, cpu = _sgtune(tree, *dirs[name], argv)
                    b = best[(name, cmd)]
                    b[0], b[1] = min(b[0], wall), min(b[1], cpu)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; best of {args.repeats}, warm numba cache")
    print("| command | baseline wall s | this wall s | baseline CPU s | this CPU s |")
    print("|---|---|---|---|---|")
    for cmd in COMMANDS:
        (bw, bc), (tw, tc) = best[("baseline", cmd)], best[("this", cmd)]
        print(f"| {cmd} | {bw:.2f} | {tw:.2f} | {bc:.2f} | {tc:.2f} |")


if __name__ == "__main__":
    main()
