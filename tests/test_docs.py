"""The documentation site builds with warnings as errors, works offline, links, and is current.

The ``site`` fixture builds the whole site once per run (marker ``docs``, part of the default run) with
``sphinx-build -W --keep-going`` in nitpicky mode — every cross-reference must resolve — executing the
user's-guide pages. The tests that use it check the API reference, the CLI reference (every command
of ``sgtune.cli.COMMANDS``) and the rendered notebooks; that no page loads a script or a style from
the network (MathJax is bundled); and that every local link and image of the site points to an
existing file and anchor. The other tests are fast: every public module is on an API page, the results
tables and the stored notebooks are current, and the drawings of the layers match
``tests/test_layout.py``.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from _timeouts import HANG_GUARD_S

import sgtune
from sgtune.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
#: the user's API reference: one page per area
API_PAGES = ("index", "models", "theory/index", "sampler", "diagnostics", "io", "workflows", "core")
THEORY_MODULES = ("stationary", "tuning", "applicability", "largescale", "alternatives", "testloss", "adjoint",
                  "fluctuation", "minibatch", "reshuffle", "smile")
#: compiled internals, documented on the developers' page only
INTERNALS = ("sgtune.sampler.engine", "sgtune.sampler.state", "sgtune.sampler.kernels", "sgtune.sampler.grads",
             "sgtune.sampler.rng", "sgtune.sampler.smile_chain", "sgtune.sampler.mlp", "sgtune.sampler.mlp_loss",
             "sgtune.sampler.specs")
DOCS_EXTRAS = ("sphinx", "myst_nb", "sphinx_click", "pydata_sphinx_theme", "jupytext", "ipykernel",
               "sphinx-mathjax-offline")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built site (built once for the tests of this module that ask for it)."""
    for module in DOCS_EXTRAS:
        pytest.importorskip(module, reason="the [docs] extra (included in [dev]) builds the site")
    tmp = tmp_path_factory.mktemp("docs")
    out = tmp / "html"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-d",
                           str(tmp / "doctrees"), str(DOCS), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return out


@pytest.mark.docs
def test_site_builds(site):
    out = site
    # nitpicky with -W: the build itself failed on any unresolved reference; nothing is set aside
    assert not list(out.rglob("docstring-warnings.txt"))

    # the API reference: one page per area; each theory module documents its functions
    for page in API_PAGES:
        assert (out / "api" / f"{page}.html").exists(), page
    for module in THEORY_MODULES:
        page = (out / "api" / "theory" / f"{module}.html").read_text(encoding="utf-8")
        assert 'class="sig-name descname"' in page, f"sgtune.theory.{module} documents no function"
        assert f'id="module-sgtune.theory.{module}"' in page
    # the compiled internals are on the developers' page, not in the user's reference
    user = "".join((out / "api" / f"{page}.html").read_text(encoding="utf-8") for page in API_PAGES)
    internals = (out / "api" / "internals.html").read_text(encoding="utf-8")
    for module in INTERNALS:
        assert f'id="module-{module}"' in internals and f'id="{module}.' in internals, module
        assert f'id="{module}.' not in user and f'id="module-{module}"' not in user, module
    # the top level links each name of sgtune.__all__ to where it is documented
    top = (out / "api" / "index.html").read_text(encoding="utf-8")
    for name in sgtune.__all__:
        if name != "__version__":
            assert re.search(rf'<a class="reference internal" href="[^"]+#[^"]+\.{name}"', top), name

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


class _Links(HTMLParser):
    """The ids of a page, and the targets of its links, scripts, styles and images."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if value is None:
                continue
            if key in ("id", "name") and tag != "meta":
                self.ids.add(value)
            elif (key == "href" and tag in ("a", "link", "area")) or (key == "src" and tag in ("script", "img")):
                self.links.append((tag, key, value))


def _pages(site: Path) -> dict[Path, _Links]:
    out = {}
    for page in sorted(site.rglob("*.html")):
        if "_sources" in page.parts or "_static" in page.parts:  # copies of sources; theme templates
            continue
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        out[page] = parser
    return out


@pytest.mark.docs
def test_site_is_offline(site):
    """No page loads a script or a style from the network; the MathJax the pages load is in the site."""
    remote = []
    mathjax = set()
    for page, parsed in _pages(site).items():
        for tag, _, value in parsed.links:
            if tag in ("script", "link") and re.match(r"(https?:)?//", value):
                remote.append(f"{page.relative_to(site)}: <{tag}> {value}")
            if tag == "script" and "mathjax" in value.lower():
                mathjax.add((page.parent / urlsplit(value).path).resolve())
    assert not remote, "pages load from the network:\n" + "\n".join(remote[:20])
    assert mathjax, "no page loads MathJax (the maths would show as raw TeX)"
    missing = [str(p) for p in mathjax if not p.is_file()]
    assert not missing, f"MathJax is referenced but not in the site: {missing}"
    math_page = (site / "guide" / "stationary.html").read_text(encoding="utf-8")
    assert "mathjax" in math_page.lower() and "\\[" in math_page


@pytest.mark.docs
def test_site_links_resolve(site):
    """Every local href and src of every page points to an existing file, and its #anchor exists there."""
    pages = _pages(site)
    broken = []
    for page, parsed in pages.items():
        for tag, attr, value in parsed.links:
            parts = urlsplit(value)
            if parts.scheme or parts.netloc or value.startswith(("mailto:", "javascript:", "data:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(site)}: <{tag} {attr}={value!r}>"
            if not target.is_file():
                broken.append(f"{where} -> missing file")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else set()
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} -> no anchor #{parts.fragment}")
    assert not broken, f"{len(broken)} broken local links:\n" + "\n".join(broken[:40])


def test_every_public_module_is_on_an_api_page():
    """A module with public names of its own is documented on a page of docs/api (user's or developers')."""
    api = _load_api()
    documented = api.documented_modules(DOCS)
    undocumented = [m for m in api.public_modules() if m not in documented and api.public_names(m, documented)]
    assert not undocumented, f"public modules on no page of docs/api/ (add an api-module directive): {undocumented}"
    stale = [m for m in documented if importlib.util.find_spec(m) is None]
    assert not stale, f"docs/api/ documents modules that do not exist: {stale}"
    assert all(documented[m] == "api/internals" for m in INTERNALS), "compiled internals belong to api/internals"
    assert ".. api-summary:: sgtune\n" in (DOCS / "api" / "index.rst").read_text(encoding="utf-8")


def _load_api():
    pytest.importorskip("sphinx", reason="the [docs] extra (included in [dev]) builds the site")
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        return _load(DOCS / "_ext" / "sgtune_api.py", "sgtune_api_for_tests")
    finally:
        sys.path.remove(str(DOCS / "_ext"))


def test_results_tables_are_current():
    """Every generated table of the docs equals what ``benchmarks/make_docs_tables.py`` makes of the results."""
    tables = _load(ROOT / "benchmarks" / "make_docs_tables.py", "make_docs_tables")
    assert tables.pages(), "no docs page asks for a results table"
    assert tables.main(["--check"]) == 0, "run: python benchmarks/make_docs_tables.py"


def test_remedies_table_is_current_and_lists_every_code():
    """docs/guide/_generated/remedies.md is what docs/make_remedies.py writes: every reason code, its remedies."""
    from sgtune.core.reasons import CODES
    from sgtune.theory.applicability import REASON_CODES

    gen = _load(DOCS / "make_remedies.py", "make_remedies")
    assert gen.OUT.read_text(encoding="utf-8") == gen.table(), "run: python docs/make_remedies.py"
    assert set(REASON_CODES) <= set(CODES) and all(f"| `{c}` |" in gen.table() for c in CODES)


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
    """The table of the modules 0.2.0 removed from the root: each old path is gone, each new one imports, and
    CHANGELOG.md names the move."""
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    moved = re.findall(r"^\| `(sgtune[\w.]*)` \| `(sgtune[\w.]*)` \|$", page, re.M)
    assert len(moved) == 15
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    for old, new in moved:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
        importlib.import_module(new)
        assert f"`{old}` → `{new}`" in changelog, old


def test_readme_links_point_to_files():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert links
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
