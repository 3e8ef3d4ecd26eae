"""Regenerate every results table of the documentation from ``benchmarks/results/``.

Run: ``python benchmarks/make_docs_tables.py`` (rewrites the pages in place) or
``python benchmarks/make_docs_tables.py --check`` (exit 1 and list the stale tables; the test suite
runs this).

A page asks for a table with a pair of HTML comments; everything between them is generated::

    <!-- results: bench_tuning.json#table1 -->
    ...
    <!-- end results -->

Sources (paths relative to ``benchmarks/results/``):

* ``NAME.json#TABLE`` — a measured table: ``{"tables": {TABLE: {"command", "measured", "columns",
  "align", "rows"}}}``, cells as printed. The benchmark scripts print these tables; a new
  measurement replaces the rows and the ``measured`` conditions in the JSON file.
* ``wang2026/NAME.csv`` — a table written by ``benchmarks/wang2026_tables.py --out``.
* ``table1_smile:NAME.json`` — the SMILE paper's (2025) Table 1 grid (b² ± bootstrap sd per target, noise and
  sampler) as written by ``benchmarks/table1_smile.py``, with the paper's value in brackets
  (``table1_smile_paper.json``).
* ``machine.json`` — the machine the measurements run on (CPU model, cores, OS, Python, NumPy, SciPy,
  numba), written by ``python benchmarks/make_docs_tables.py --record-machine`` on that machine
  (``benchmarks/_timing.py``'s ``machine()``); a results file with its own ``"machine"`` record names it
  in each table's caption.
* ``applicability.jsonl`` — ``benchmarks/applicability_table.py --table`` on those rows (likewise
  ``health.jsonl`` with ``benchmarks/health_table.py``).
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"
BEGIN, END = "<!-- results: ", "<!-- end results -->"

SAMPLERS = {"smile-naive": "SMILE-naive", "sgld": "SGLD", "sghmc": "SGHMC", "psmile-naive": "pSMILE-naive"}
TARGETS = {"gaussian": "ICG", "rosenbrock": "Rosenbrock", "funnel": "Funnel"}
NOISES = ("isotropic", "diagonal", "correlated", "spatial")


def _markdown(columns: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["---"] * len(columns)
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _machine(name: str) -> list[str]:
    """The machine record ``name`` (``machine.json``) as one line."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _timing import machine_line

    m = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    return [f"**Machine:** {machine_line(m)} (source: `benchmarks/results/{name}`)."]


def _measured(name: str, table: str) -> list[str]:
    doc = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    t = doc["tables"][table]
    where = ""
    if "machine" in t or "machine" in doc:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from _timing import machine_line

        where = f"; machine: {machine_line(t.get('machine') or doc['machine'])}"
    caption = f"*`{t['command']}` — {t['measured']}{where}* (source: `benchmarks/results/{name}`)"
    return [caption, "", *_markdown(t["columns"], t["rows"], t.get("align"))]


def _csv(name: str) -> list[str]:
    with open(RESULTS / name, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return [f"*source: `benchmarks/results/{name}`*", "", *_markdown(rows[0], rows[1:])]


def _table1(name: str) -> list[str]:
    doc = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    paper = {(c["target"], c["noise"], c["sampler"]): c["b2"]
             for c in json.loads((RESULTS / "table1_smile_paper.json").read_text(encoding="utf-8"))["cells"]}
    cells = {(c["target"], c["noise"], c["sampler"]): c for c in doc["cells"]}
    rows = []
    for target, tname in TARGETS.items():
        for noise in NOISES:
            row = [f"{tname} {noise}"]
            for sampler in SAMPLERS:
                c = cells[(target, noise, sampler)]
                row.append(f"{c['b2']:.3f}±{c['bootstrap_std']:.3f} [{paper[(target, noise, sampler)]:.3f}]")
            rows.append(row)
    caption = (f"*b² ± bootstrap sd over chains, the paper's value in brackets; {doc['steps']:,} steps, "
               f"{doc['chains']} chains (source: `benchmarks/results/{name}`)*")
    return [caption, "", *_markdown(["target / noise", *SAMPLERS.values()], rows)]


def _applicability(name: str) -> list[str]:
    """``<stem>.jsonl`` is tabled by ``benchmarks/<stem>_table.py --table`` (applicability, health)."""
    script = ROOT / "benchmarks" / f"{Path(name).stem}_table.py"
    out = subprocess.run([sys.executable, str(script), "--table",
                          str(RESULTS / name)], capture_output=True, text=True, check=True, cwd=ROOT)
    return [f"*source: `benchmarks/results/{name}`*", "", *out.stdout.rstrip("\n").splitlines()]


def render(source: str) -> list[str]:
    """The Markdown lines of one generated block."""
    if source.startswith("table1_smile:"):
        return _table1(source.split(":", 1)[1])
    if source == "machine.json":
        return _machine(source)
    if "#" in source:
        return _measured(*source.split("#", 1))
    if source.endswith(".csv"):
        return _csv(source)
    if source.endswith(".jsonl"):
        return _applicability(source)
    raise ValueError(f"unknown results source {source!r}")


def regenerate(text: str) -> str:
    """``text`` with every generated block rebuilt from the results files."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.startswith(BEGIN):
            source = line[len(BEGIN):].removesuffix("-->").strip()
            while i < len(lines) and lines[i].strip() != END:
                i += 1
            if i == len(lines):
                raise ValueError(f"{BEGIN}{source} --> has no {END}")
            out += render(source)
            out.append(END)
            i += 1
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts and BEGIN in p.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if a page is out of date")
    ap.add_argument("--record-machine", action="store_true",
                    help="first write this machine's record (CPU, cores, OS, Python, NumPy, SciPy, numba) to "
                         "benchmarks/results/machine.json: run it on the machine that measured")
    args = ap.parse_args(argv)
    if args.record_machine:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from _timing import machine

        (RESULTS / "machine.json").write_text(json.dumps(machine(), indent=1) + "\n", encoding="utf-8")
    stale = []
    for page in pages():
        old = page.read_text(encoding="utf-8")
        new = regenerate(old)
        if new != old:
            stale.append(page.relative_to(ROOT))
            if not args.check:
                page.write_text(new, encoding="utf-8")
    verb = "out of date" if args.check else "rewritten"
    for p in stale:
        print(f"{p}: {verb}")
    if args.check and stale:
        print("run: python benchmarks/make_docs_tables.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
