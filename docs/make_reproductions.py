"""Execute the notebooks of ``notebooks/`` at smoke size and store them, with outputs, for the docs.

Run: ``python docs/make_reproductions.py [NAME ...]`` (default: every notebook; NAME is a file stem such
as ``stationary_covariance_tuning``). Each ``notebooks/NAME.py`` (a jupytext "percent" script) becomes
``docs/reproductions/NAME.ipynb``, executed in a Jupyter kernel from the repository root with
``SGTUNE_SMOKE=1``; the docs render it as it is, without executing it again (that would take minutes).
The stored notebook records the SHA-256 of the script it came from, and ``tests/test_docs.py`` fails
when a script has changed since: rerun this command for it (the whole set takes ≈ 4 minutes on 2 cores).

A hidden first cell (tag ``remove-cell``, not rendered) lets the scripts run unchanged in a kernel: it
defines ``__file__`` and keeps the kernel's inline figures although the scripts select the Agg backend.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
OUT = ROOT / "docs" / "reproductions"

SETUP = '''\
# Added by docs/make_reproductions.py (not rendered): run the script unchanged in a kernel.
__file__ = {path!r}
import matplotlib
import matplotlib.pyplot as plt
from IPython.display import display

matplotlib.use = lambda *args, **kwargs: None   # keep the kernel's inline backend
_close = plt.close


def _show_then_close(fig=None):  # the inline backend itself closes "all" after showing them
    if hasattr(fig, "savefig"):
        display(fig)
    _close(fig)


plt.close = _show_then_close
'''


def source_digest(path: Path) -> str:
    """SHA-256 of a notebook script (what the stored notebook must have been made from)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(name: str) -> Path:
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    script = NOTEBOOKS / f"{name}.py"
    nb = jupytext.read(script, fmt="py:percent")
    setup = nbformat.v4.new_code_cell(SETUP.format(path=f"notebooks/{name}.py"))
    setup.metadata["tags"] = ["remove-cell"]
    nb.cells.insert(0, setup)
    first_text = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown")
    nb.cells.insert(first_text + 1, nbformat.v4.new_markdown_cell(
        f"*Run at smoke size (`SGTUNE_SMOKE=1`) when these pages were made: the numbers below show the "
        f"code path, not the result. The full-size results are listed in {{doc}}`index`; the script is "
        f"`notebooks/{name}.py`.*"))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.pop("jupytext", None)
    # figures and result files go to notebooks/figures/ (ignored by git), as when the scripts run
    env = {"SGTUNE_SMOKE": "1", "SGTUNE_FIGURES": "notebooks/figures", "SGTUNE_NOTEBOOK_OUT": "notebooks/figures",
           "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for cell in nb.cells:  # keep the stored file stable between runs
        cell.metadata.pop("execution", None)
    nb.metadata["sgtune"] = {"source": f"notebooks/{name}.py", "source_sha256": source_digest(script),
                             "smoke": True, "generated_by": "python docs/make_reproductions.py"}
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"{name}.ipynb"
    nbformat.write(nb, target)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="notebook stems (default: all of notebooks/*.py)")
    args = ap.parse_args(argv)
    names = args.names or sorted(p.stem for p in NOTEBOOKS.glob("*.py"))
    for name in names:
        t0 = time.perf_counter()
        target = build(name)
        print(f"{target.relative_to(ROOT)}: {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
