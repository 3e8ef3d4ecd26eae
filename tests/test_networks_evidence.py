"""The stored evidence table of docs/guide/networks_evidence.md (benchmarks/networks_evidence.py).

Fast: it reads the stored result, it does not run the benchmark. Every problem the script defines has
a row, every row names the command it measured and a finite chain error with a positive Monte Carlo
standard error, a remedy chosen by hand says so, and each network row measures a remedy sgtune printed,
followed as printed to an applicable report.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "networks_evidence.json"
SCRIPT = ROOT / "benchmarks" / "networks_evidence.py"


def _problem_names() -> set[str]:
    """The problems benchmarks/networks_evidence.py defines (the keys of its problems() dict)."""
    text = SCRIPT.read_text(encoding="utf-8")
    body = text[text.index("def problems("):text.index("# ---", text.index("def problems("))]
    return set(re.findall(r'^\s+"([a-z0-9-]+)": \(', body, flags=re.M))


def test_every_problem_has_a_row_with_a_finite_chain_error():
    doc = json.loads(RESULT.read_text(encoding="utf-8"))
    rows = {r["problem"]: r for r in doc["rows"]}
    names = _problem_names()
    assert {"diabetes-mlp8", "digits-softmax", "digits-last-layer", "sine-mlp8"} <= names
    assert set(rows) == names and len(rows) >= 4
    for name in ("diabetes-mlp8", "sine-mlp8"):  # a network ends in a printed remedy, followed as printed
        r = rows[name]
        assert not r["remedy_by_hand"] and r["followed"] and r["remedy_applicable"], name
        assert r["followed"][-1]["argv"] == r["remedy_argv"], name
    for name, r in rows.items():
        assert math.isfinite(r["error"]) and r["error"] >= 0, name
        assert math.isfinite(r["se"]) and r["se"] > 0, name
        assert r["chains"] >= 2 and r["steps"] > r["burn_in"] > 0, name
        assert r["argv"][:2] == ["sgtune", "lambda"] and r["remedy_argv"][0] == "sgtune", name
        assert r["sgtune_says"], name
    table = doc["tables"]["evidence"]
    assert len(table["rows"]) == len(rows)
    assert all(len(row) == len(table["columns"]) for row in table["rows"])
    for r, cells in zip(doc["rows"], table["rows"]):
        assert cells[0].startswith(f"**{r['problem']}**")
        assert ("chosen by hand" in cells[3]) == r["remedy_by_hand"]


def test_the_stored_markdown_is_the_json_table():
    doc = json.loads(RESULT.read_text(encoding="utf-8"))
    md = (RESULT.with_suffix(".md")).read_text(encoding="utf-8")
    for cells in doc["tables"]["evidence"]["rows"]:
        assert "| " + " | ".join(cells) + " |" in md
