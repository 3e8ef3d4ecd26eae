"""The README and the getting-started page run as written.

Every ```bash / ```console / ```sh / ```shell and ```python block of ``README.md`` and
``docs/getting_started.md`` is executed, in order, in one fresh temporary directory per document:
shell blocks through ``bash`` with ``set -euo pipefail`` (a ``console`` block runs its ``$ `` lines),
Python blocks as a script in a new interpreter. The package is imported from this tree.

A block that must not run is preceded by an HTML comment ``<!-- no-test: REASON -->``. Only the
install-and-test block may carry it (it installs the package and runs this very suite); the test
checks that, and that ``.ci/run`` runs exactly the commands that block gives.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from _timeouts import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "docs/getting_started.md")
SHELLS = {"bash", "console", "sh", "shell"}
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\n`]*)$")
NO_TEST = re.compile(r"<!--\s*no-test\b(?P<reason>[^>]*)-->")


@dataclass
class Block:
    document: str
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    skip_reason: str | None


def blocks(document: str) -> list[Block]:
    """Every fenced block of ``document`` with an info string (the language), in order."""
    lines = (ROOT / document).read_text(encoding="utf-8").splitlines()
    out, i, previous = [], 0, ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                previous = lines[i]
            i += 1
            continue
        fence, start = m["fence"], i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        skip = NO_TEST.search(previous)
        language = m["info"].split()[0].lower() if m["info"].strip() else ""
        out.append(Block(document, start + 1, language, "\n".join(body) + "\n",
                         skip["reason"].strip(" :") if skip else None))
        previous = ""
        i += 1
    return out


def runnable(document: str) -> list[Block]:
    return [b for b in blocks(document) if b.language in SHELLS | {"python"}]


def _shell_script(block: Block) -> str:
    if block.language != "console":
        return block.code
    commands = [line[2:] for line in block.code.splitlines() if line.startswith("$ ")]
    return "\n".join(commands) + "\n" if commands else block.code


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")])),
        "SGTUNE_SMOKE": "1",
        "MPLBACKEND": "Agg",
        "OPENBLAS_NUM_THREADS": "1",
        "NUMBA_CACHE_DIR": env.get("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache")),
        # the sgtune executable of this interpreter comes first
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    })
    return env


def run_block(block: Block, cwd: Path) -> None:
    if block.language == "python":
        cmd = [sys.executable, "-c", block.code]
    else:
        cmd = ["bash", "-c", "set -euo pipefail\n" + _shell_script(block)]
    proc = subprocess.run(cmd, cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, (
        f"{block.document}:{block.line} ({block.language} block) exited {proc.returncode}\n"
        f"--- code ---\n{block.code}--- stdout (tail) ---\n{proc.stdout[-3000:]}\n"
        f"--- stderr (tail) ---\n{proc.stderr[-3000:]}")


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_block_runs_as_written(document, tmp_path):
    """In order, in one folder; the README's (the quickstart) a second time in the same folder, as a user
    trying it again would: outputs are replaced, never refused, and no file is left empty."""
    todo = [b for b in runnable(document) if b.skip_reason is None]
    assert todo, f"{document} has no runnable block"
    for _ in range(2 if document == "README.md" else 1):
        for block in todo:
            run_block(block, tmp_path)
        empty = [p.name for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_size == 0]
        assert not empty, f"{document} left empty files: {empty}"


@pytest.mark.parametrize("document", DOCUMENTS)
def test_only_the_install_block_is_excluded(document):
    skipped = [b for b in blocks(document) if b.skip_reason is not None]
    for b in skipped:
        commands = [c for c in b.code.splitlines() if c.strip() and not c.lstrip().startswith("#")]
        assert commands and all(c.split("#")[0].strip() in {'pip install -e ".[dev]"', "python -m pytest"}
                                for c in commands), f"{document}:{b.line} is excluded but is not the install block"
    if document == "README.md":
        assert len(skipped) == 1, "the README has exactly one excluded block: install and test"


def test_ci_runs_the_readme_commands():
    """``.ci/run`` runs exactly the README's install and test commands."""
    (block,) = [b for b in blocks("README.md") if b.skip_reason is not None]
    readme = [c.split("#")[0].strip() for c in block.code.splitlines() if c.split("#")[0].strip()]
    assert readme == ['pip install -e ".[dev]"', "python -m pytest"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    steps = [s.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")
             for s in line.split("&&")]
    assert readme[0] in steps and readme[1] in steps, f".ci/run does not run {readme}"
    assert [s for s in steps if "pytest" in s] == [readme[1]], "the test command differs from the README's"
    assert [s for s in steps if s.startswith("pip install")] == [readme[0]]


def test_the_extractor_sees_fences_languages_and_markers(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("text\n<!-- no-test: installs -->\n```bash\npip install -e \".[dev]\"\n```\n\n"
                   "```python\nprint(1)\n```\n```text\nnot run\n```\n````console\n$ echo hi\nhi\n````\n",
                   encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = blocks("doc.md")
    assert [(b.language, b.skip_reason is not None) for b in found] == [
        ("bash", True), ("python", False), ("text", False), ("console", False)]
    assert _shell_script(found[3]) == "echo hi\n"
    assert shlex.split(found[0].code) == ["pip", "install", "-e", ".[dev]"]
