"""Issue 13 benchmark: `sgtune lambda` (logistic regression) on data larger than memory.

Each row runs `sgtune lambda DATA --model logistic --batch-size B` in a fresh subprocess and
reports its wall time and peak RSS (getrusage of that process; for Dask also the largest
worker's peak). Rows:

* in-memory: the first --mem-n rows loaded into RAM (np.load, no memory map) — the baseline
  path of every command before issue 13 — at the largest N we let it use;
* folder: the same --mem-n rows as an X.npy/y.npy folder (streamed), same N, so the two
  compare like for like (Λ must agree to 1e-10);
* folder / dask-local: the full --n rows streamed in this process, and on a local Dask
  cluster with 2 workers (Λ must agree to 1e-10 between them).

Usage: python benchmarks/bench_bigdata.py [--n 10000000] [--d 50] [--mem-n 1000000] [--dir /tmp/sgtune-bench]
The data (x ~ N(0, I), θ* ~ N(0, 4I/D), y ~ Bernoulli(σ(xᵀθ*))) are generated once, chunk by chunk.

``--report`` (issue 27 item 2) measures instead what the applicability report costs on a folder:
`sgtune lambda FOLDER --model logistic --batch-size 64 --target sandwich` (and, with the report, `sgtune
covariance FOLDER --step-size 0.5` at the largest N, this tree only) with and without the report
(``--no-applicability``), for N in --report-n and D in --report-d, each in a fresh process (wall, CPU =
user + system, peak RSS = VmHWM of the child), and the same lambda runs of a baseline source tree (``--baseline-src``, e.g. ``git archive
b19a108 | tar -x -C /tmp/sgtune-main``; it has no --no-applicability, so its "without" rows replace
the report by an empty one in the child process). ``--save`` writes the table to
``benchmarks/results/bench_bigdata.json`` (``#applicability``). Data: 8·N·D bytes per folder, in --dir.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = r"""
import json, resource, sys, time
import numpy as np
from sgtune.cli import main
from sgtune.io.reduce import pass_counts
args, mode = json.loads(sys.argv[1]), sys.argv[2]
t = time.perf_counter()
if mode == "in-memory":
    from sgtune.io.data import make_dataset
    from sgtune.models import expand, get_model
    from sgtune.core.config import Dynamics
    from sgtune.theory.tuning import tune
    X = np.load(args["dir"] + "/X.npy")[: args["n"]]
    y = np.load(args["dir"] + "/y.npy")[: args["n"]]
    ds = make_dataset(X, y)
    del X, y
    lam = tune(expand(get_model("logistic"), ds, args["prior"]), Dynamics(None, args["batch"])).step_matrix
    np.save(args["out"], lam)
else:
    extra = ["--scheduler", "local"] if mode == "dask-local" else []
    main(["lambda", args["data"], "--model", "logistic", "--batch-size", str(args["batch"]), "-q",
          "--prior-precision", str(args["prior"]),
          "--json", args["out"] + ".json", "-o", args["out"], "--overwrite", *extra], standalone_mode=False)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_SELF)
workers, cpu = 0.0, ru.ru_utime + ru.ru_stime
if mode == "dask-local":
    from sgtune.io.reduce import get_client
    stats = get_client("local").run(lambda: (lambda r: (r.ru_maxrss, r.ru_utime + r.ru_stime))(
        __import__("resource").getrusage(0)))
    workers = max(v[0] for v in stats.values()) / 1024
    cpu += sum(v[1] for v in stats.values())
print(json.dumps({"wall": wall, "rss": ru.ru_maxrss / 1024, "workers": workers, "cpu": cpu,
                  "passes": sum(pass_counts().values()), "by_kind": pass_counts()}))
"""


CLI_CHILD = r"""
import json, resource, sys, time
args = json.loads(sys.argv[1])
if args["stub"]:  # the baseline has no --no-applicability: replace its report by an empty one
    import sgtune.cli.cmd_covariance as C, sgtune.cli.cmd_lambda as L
    stub = lambda *a, **k: {"applicable": True, "reasons": [], "equilibration_steps": "inf",
                            "predicted_deviation": "not computed", "mean_shift": "not computed"}
    L.applicability_report = C.applicability_report = stub
from sgtune.cli import main
from sgtune.io.reduce import pass_counts
t = time.perf_counter()
main(args["argv"], standalone_mode=False)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_SELF)
# peak RSS of this process image: VmHWM (ru_maxrss would also count the parent's RSS at fork)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
app = json.load(open(args["json"]))["applicability"]
print(json.dumps({"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": hwm / 1024,
                  "passes": sum(pass_counts().values()), "applicable": app.get("applicable"),
                  "deviation": app.get("predicted_deviation"),
                  "se": ((app.get("subsample") or {}).get("standard_error") or {}).get("predicted_deviation")}))
"""


def generate(folder: str, n: int, d: int, seed: int = 1) -> None:
    """X.npy / y.npy written chunk by chunk (never the whole X in memory)."""
    if os.path.exists(os.path.join(folder, "y.npy")) and np.load(os.path.join(folder, "X.npy"),
                                                                  mmap_mode="r").shape == (n, d):
        return
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    theta = 2.0 * rng.standard_normal(d) / np.sqrt(d)
    y = np.empty(n)
    with open(os.path.join(folder, "X.npy"), "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (n, d)})
        for a in range(0, n, 1 << 18):
            b = min(n, a + (1 << 18))
            xb = rng.standard_normal((b - a, d))
            fh.write(xb.tobytes())
            y[a:b] = (rng.random(b - a) < 1 / (1 + np.exp(-xb @ theta))).astype(float)
    np.save(os.path.join(folder, "y.npy"), y)


def prefix_folder(src: str, dst: str, n: int) -> None:
    """The first n rows of src as a folder (same bytes)."""
    os.makedirs(dst, exist_ok=True)
    X = np.load(os.path.join(src, "X.npy"), mmap_mode="r")
    d = X.shape[1]
    with open(os.path.join(dst, "X.npy"), "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (n, d)})
        for a in range(0, n, 1 << 18):
            fh.write(np.array(X[a:min(n, a + (1 << 18))]).tobytes())
    np.save(os.path.join(dst, "y.npy"), np.load(os.path.join(src, "y.npy"))[:n])


def run(mode: str, args: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args), mode], capture_output=True, text=True,
                       env=env)
    if p.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["lambda"] = np.load(args["out"])
    return out


def run_cli(src: str, argv: list[str], stub: bool, out_json: str) -> dict:
    """One sgtune command in a fresh process with PYTHONPATH=src; wall, CPU, peak RSS and the report's numbers."""
    env = dict(os.environ, PYTHONPATH=src)
    p = subprocess.run([sys.executable, "-c", CLI_CHILD, json.dumps({"argv": argv, "stub": stub, "json": out_json})],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{argv} ({src}) failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def report_table(a: argparse.Namespace) -> None:
    """The --report table: the applicability report's time and peak RSS against N, baseline in the same run."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    srcs = [("this tree", here)] + ([("baseline", a.baseline_src)] if a.baseline_src else [])
    ns = sorted(int(float(x)) for x in a.report_n.split(","))
    rows, out_json = [], os.path.join(a.dir, "report.json")
    for d in (int(x) for x in a.report_d.split(",")):
        full = os.path.join(a.dir, f"n{ns[-1]}_d{d}")
        generate(full, ns[-1], d)
        for n in ns:
            folder = full if n == ns[-1] else os.path.join(a.dir, f"n{n}_d{d}")
            if not os.path.exists(os.path.join(folder, "y.npy")):
                prefix_folder(full, folder, n)
            cmds = [("lambda", ["lambda", folder, "--model", "logistic", "--batch-size", "64", "--target", "sandwich"])]
            if n == ns[-1]:  # with the report only: its peak RSS at the largest N
                cmds.append(("covariance", ["covariance", folder, "--model", "logistic", "--batch-size", "64",
                                            "--step-size", "0.5"]))
            for cmd, argv in cmds:
                for label, src in srcs if cmd == "lambda" and n <= a.baseline_max_n else srcs[:1]:
                    base = None
                    for report in (False, True) if cmd == "lambda" else (True,):
                        if report and label == "baseline" and n > a.baseline_report_max_n:
                            rows.append([str(d), f"{n:,}".replace(",", " "), cmd, label, "yes", *["not run"] * 6])
                            continue
                        flag = [] if report or label == "baseline" else ["--no-applicability"]
                        r = run_cli(src, argv + flag + ["-q", "--json", out_json, "--overwrite"],
                                    stub=not report and label == "baseline", out_json=out_json)
                        base = r if not report else base
                        ratio = f"{r['cpu'] / base['cpu']:.2f}" if report and base else "-"
                        dev = r["deviation"]
                        dev_s = ("-" if not report else f"{dev:.3g}" + (f" ± {r['se']:.1g}" if r["se"] else ""))
                        row = [str(d), f"{n:,}".replace(",", " "), cmd, label, "yes" if report else "no",
                               f"{r['wall']:.1f}", f"{r['cpu']:.1f}", f"{r['rss']:.0f}", ratio, str(r["passes"]), dev_s]
                        rows.append(row)
                        print("  " + "  ".join(row) + f"   (load {os.getloadavg()[0]:.1f})", flush=True)
                        if a.save:  # after every row: a long run interrupted keeps what it measured
                            _save_table(here, a, rows)
    columns = REPORT_COLUMNS
    print(f"\nlogistic, B = 64, target sandwich (covariance: --step-size 0.5); fresh process per row; "
          f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(row))


REPORT_COLUMNS = ["D", "N", "command", "code", "report", "wall s", "CPU s", "peak RSS MiB", "CPU vs no report",
                  "data passes", "predicted deviation (± SE)"]


def _save_table(here: str, a: argparse.Namespace, rows: list[list[str]]) -> None:
    """Write the --report table to benchmarks/results/bench_bigdata.json (``#applicability``)."""
    path = os.path.join(here, "benchmarks", "results", "bench_bigdata.json")
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    doc["tables"]["applicability"] = {
        "command": "python benchmarks/bench_bigdata.py --report",
        "measured": a.measured or f"2-core VM, load ≈ {os.getloadavg()[0]:.0f}; every row in a fresh process",
        "columns": REPORT_COLUMNS, "align": ["---:", "---:", "---", "---", "---", *["---:"] * 6], "rows": rows}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, ensure_ascii=False)
        fh.write("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--mem-n", type=int, default=1_000_000)
    ap.add_argument("--prior", type=float, default=1.0,
                    help="prior precision G (> 0 skips the identifiability LP, whose in-memory cost at N = 2e6 "
                         "alone exceeds 10 GiB; the streamed path runs it on 20 000 rows)")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "sgtune-bench"))
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--dask-n", type=int, default=None, help="N of the Dask row: --n (default) or --mem-n")
    ap.add_argument("--report", action="store_true", help="measure the applicability report instead (docstring)")
    ap.add_argument("--report-n", default="1e6,4e6,1e7")
    ap.add_argument("--report-d", default="20,50")
    ap.add_argument("--baseline-src", default=None, help="a source tree to measure as the baseline (docstring)")
    ap.add_argument("--baseline-max-n", type=float, default=float("inf"),
                    help="--report: the baseline's runs only up to this N")
    ap.add_argument("--baseline-report-max-n", type=float, default=float("inf"),
                    help="--report: the baseline's runs with the report only up to this N (they take ~70 passes)")
    ap.add_argument("--save", action="store_true", help="--report: write the table to benchmarks/results")
    ap.add_argument("--measured", default=None, help="--report --save: the conditions, as stored with the table")
    a = ap.parse_args()
    if a.report:
        report_table(a)
        return
    full = os.path.join(a.dir, f"n{a.n}_d{a.d}")
    small = os.path.join(a.dir, f"n{a.mem_n}_d{a.d}")
    t = time.perf_counter()
    generate(full, a.n, a.d)
    if not os.path.exists(os.path.join(small, "y.npy")):
        prefix_folder(full, small, a.mem_n)
    print(f"data ready in {time.perf_counter() - t:.0f} s: {full} (X = {a.n * a.d * 8 / 2**30:.2f} GiB); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    rows = []
    plan = [("folder", a.n, full), ("in-memory", a.mem_n, small), ("folder", a.mem_n, small)]
    if not a.skip_dask:
        plan.append(("dask-local", a.dask_n or a.n, full if not a.dask_n or a.dask_n == a.n else small))
    ref: dict[int, np.ndarray] = {}
    for mode, n, folder in plan:
        out = run(mode, {"dir": folder, "data": folder, "n": n, "batch": a.batch, "prior": a.prior,
                         "out": os.path.join(a.dir, f"lam_{mode}_{n}.npy")})
        lam = out["lambda"]
        diff = float(np.max(np.abs(lam - ref[n])) / np.max(np.abs(ref[n]))) if n in ref else 0.0
        ref.setdefault(n, lam)
        passes = out["passes"] if mode != "in-memory" else 0
        rows.append((mode, n, out["wall"], out["cpu"], out["rss"], out["workers"], diff, passes))
        print(f"  {mode:<11} N={n:>9,d}  {out['wall']:7.1f} s wall  {out['cpu']:7.1f} s CPU  {out['rss']:7.0f} MiB  "
              f"Λ diff {diff:.1e}  passes {passes} {out['by_kind'] if passes else ''} "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
    print(f"\nsgtune lambda, logistic, D = {a.d}, B = {a.batch}, G = {a.prior} (peak RSS from getrusage of each "
          f"run's process); load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'path':<11} {'N':>11} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13} {'worker RSS MiB':>15} "
          f"{'Λ rel. diff':>12} {'data passes':>12}")
    for mode, n, wall, cpu, rss, wrk, diff, passes in rows:
        print(f"{mode:<11} {n:>11,d} {wall:>8.1f} {cpu:>8.1f} {rss:>13.0f} {(f'{wrk:.0f}' if wrk else '-'):>15} "
              f"{diff:>12.1e} {(passes or '-'):>12}")
    print("CPU s: user + system time of the run's process (plus its Dask workers'): robust to other load.")
    print("data passes: chunked reductions over the rows on disk (sgtune.io.reduce.pass_counts); target: "
          "folder at the full N within 180 s wall and 1 GiB peak RSS.")
    print("Λ rel. diff: max |Λ − Λ_ref| / max |Λ_ref| against the first row with the same N "
          "(in-memory for the small N, in-process folder for the full N).")


if __name__ == "__main__":
    main()
