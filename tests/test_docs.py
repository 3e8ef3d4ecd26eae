"""The documentation site builds with warnings as errors, and what it shows is current.

``test_site_builds`` (marker ``docs``, part of the default run) builds the whole site with
``sphinx-build -W --keep-going`` — executing the user's-guide pages — and checks that the API
reference, the CLI reference (every command of ``sgtune.cli.COMMANDS``) and the rendered notebooks
are in the output. The other tests are fast: the results tables and the stored notebooks are
current, and the drawings of the layers match ``tests/test_layout.py``.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sgtune
from sgtune.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
SUBPACKAGES = ("core", "io", "models", "symbolic", "diagnostics", "theory", "sampler", "workflows")
#: seconds the whole build may take on the 2-core CI machine (it takes about one minute)
BUILD_BUDGET = 300


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.docs
def test_site_builds(tmp_path):
    for module in ("sphinx", "myst_nb", "sphinx_click", "pydata_sphinx_theme", "jupytext", "ipykernel"):
        pytest.importorskip(module, reason="the [docs] extra (included in [dev]) builds the site")
    out = tmp_path / "html"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-d",
                           str(tmp_path / "doctrees"), str(DOCS), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=2 * BUILD_BUDGET)
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    assert seconds < BUILD_BUDGET, f"the docs build took {seconds:.0f} s (budget {BUILD_BUDGET} s)"

    # the API reference: one generated page per layer and per module of the theory
    api = out / "api"
    assert (api / "index.html").exists()
    for sub in SUBPACKAGES:
        assert (api / "generated" / f"sgtune.{sub}.html").exists(), sub
    for module in ("tuning", "stationary", "fluctuation", "minibatch", "reshuffle", "smile"):
        page = (api / "generated" / f"sgtune.theory.{module}.html").read_text(encoding="utf-8")
        assert 'class="sig-name descname"' in page, f"sgtune.theory.{module} documents no function"

    # the CLI reference is the contract: every registered command, with its options
    cli = (out / "cli.html").read_text(encoding="utf-8")
    assert "command-line" in cli and "contract" in cli
    missing = [name for name in COMMANDS if f'id="sgtune-{name}"' not in cli]
    assert not missing, f"commands missing from the CLI reference: {missing}"
    assert cli.count("--batch-size") >= 5

    # the reproductions, rendered with their outputs, and the executed user's-guide examples
    for script in NOTEBOOKS:
        page = out / "reproductions" / f"{script.stem}.html"
        assert page.exists(), script.name
        assert 'class="cell_output' in page.read_text(encoding="utf-8"), f"{script.stem} shows no output"
    for guide in ("stationary", "fluctuation", "minibatch", "reshuffling", "smile"):
        page = (out / "guide" / f"{guide}.html").read_text(encoding="utf-8")
        assert "<img" in page and 'class="cell_output' in page, f"guide/{guide} has no executed figure"
    assert (out / "_images").is_dir() or (out / "_static" / "overview.png").exists()


def test_results_tables_are_current():
    """Every generated table of the docs equals what ``benchmarks/make_docs_tables.py`` makes of the results."""
    tables = _load(ROOT / "benchmarks" / "make_docs_tables.py", "make_docs_tables")
    assert tables.pages(), "no docs page asks for a results table"
    assert tables.main(["--check"]) == 0, "run: python benchmarks/make_docs_tables.py"


def test_the_table_generator_rebuilds_a_stale_block():
    tables = _load(ROOT / "benchmarks" / "make_docs_tables.py", "make_docs_tables")
    page = "intro\n<!-- results: bench_ksd.json#ksd -->\n| stale |\n<!-- end results -->\noutro\n"
    new = tables.regenerate(page)
    assert "| stale |" not in new and "| 200 |" in new and new.startswith("intro\n") and new.endswith("outro\n")
    with pytest.raises(ValueError, match="end results"):
        tables.regenerate("<!-- results: bench_ksd.json#ksd -->\n| row |\n")


@pytest.mark.parametrize("script", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_reproduction_is_current(script):
    """The stored notebook was executed, without errors, from the current version of its script."""
    stored = DOCS / "reproductions" / f"{script.stem}.ipynb"
    fix = f"run: python docs/make_reproductions.py {script.stem}"
    assert stored.exists(), f"{stored.relative_to(ROOT)} is missing; {fix}"
    nb = json.loads(stored.read_text(encoding="utf-8"))
    meta = nb["metadata"]["sgtune"]
    assert meta["source"] == f"notebooks/{script.name}" and meta["smoke"] is True
    assert meta["source_sha256"] == hashlib.sha256(script.read_bytes()).hexdigest(), \
        f"notebooks/{script.name} changed since its stored outputs were made; {fix}"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["execution_count"] is not None for c in code), f"not executed; {fix}"
    errors = [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors, f"the stored notebook has errors; {fix}"


def _drawn_layers(document: str) -> dict[str, int]:
    text = (ROOT / document).read_text(encoding="utf-8")
    return {m[1]: int(m[2]) for m in re.finditer(r"^\s+(\w+)/\s+layer (\d+)\s", text, re.M)}


@pytest.mark.parametrize("document", ["README.md", "docs/architecture.md"])
def test_layer_drawing_matches_the_layout_test(document):
    layers = _load(ROOT / "tests" / "test_layout.py", "_layout_for_docs").LAYERS
    assert _drawn_layers(document) == layers


def test_architecture_lists_every_moved_module():
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    assert all(f"`{old}` | `{new}`" in page for old, new in sgtune._MOVED.items())


def test_readme_links_point_to_files():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert links
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
