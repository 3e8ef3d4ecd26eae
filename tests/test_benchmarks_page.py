"""The benchmarks page names the machine and software the measurements ran on (issue 37), generated from
``benchmarks/results/machine.json`` by ``benchmarks/make_docs_tables.py``, as the machine record says."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_benchmarks_page_names_the_machine_and_the_versions():
    m = json.loads((ROOT / "benchmarks" / "results" / "machine.json").read_text(encoding="utf-8"))
    assert set(m) >= {"cpu", "cores", "os", "python", "numpy", "scipy", "numba"}
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    line = next(x for x in page.splitlines() if x.startswith("**Machine:**"))
    for key in ("cpu", "os", "python", "numpy", "scipy", "numba"):
        assert str(m[key]) in line, key
    assert f"{m['cores']} logical cores" in line
    assert "at commit d02eb73" not in page and "2026-11-23" not in page  # a day and a commit name no machine
