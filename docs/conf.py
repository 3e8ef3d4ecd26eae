"""Sphinx configuration of the sgtune documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (``tests/test_docs.py`` does
this). The user's-guide pages are MyST notebooks executed at build time; the reproductions are the
notebooks of ``notebooks/`` stored with outputs by ``python docs/make_reproductions.py``.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# document (and execute) the package of this tree, not whichever checkout is installed
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))

import sgtune  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "sgtune"
author = "the sgtune developers"
copyright = "the sgtune developers"
release = version = sgtune.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    # MathJax 3 bundled into _static/mathjax: the maths renders without the network (no CDN)
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "sphinx_click",
    "sgtune_docstrings",
    "sgtune_api",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
# _generated/: files written by generators and included by a page (not pages of their own)
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store", "**/_generated",
                    "api/generated"]  # stub pages an earlier autosummary setup wrote
root_doc = "index"

# MyST: $…$ maths, ::: fences, auto-anchored headings for cross-page links
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# keep "--option" as typed (the CLI reference is a contract): no en dashes, no curly quotes
smartquotes = False

# notebooks: the user's guide pages are executed on every build (small examples); the reproductions
# are stored with their outputs (docs/make_reproductions.py; tests/test_docs.py checks they are current)
nb_execution_mode = "force"
nb_execution_excludepatterns = ["reproductions/*"]
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_in_temp = True
nb_merge_streams = True

# API reference from the numpydoc docstrings: docs/api/*.rst list each module's __all__ through the
# api-module directive (docs/_ext/sgtune_api.py); no stub pages, so nothing is generated into docs/
autodoc_default_options = {"show-inheritance": True}
autodoc_member_order = "bysource"
# types are those the numpydoc sections state, shown as written ("(D, D) ndarray"); the signature keeps
# the parameter names and defaults
autodoc_typehints = "none"
autodoc_preserve_defaults = True
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_param = False
napoleon_use_rtype = False
# a class's Attributes section is laid out like its Parameters (types as written, not parsed as Python)
napoleon_custom_sections = [("Attributes", "params_style")]

# every cross-reference must resolve (tests/test_docs.py builds with -W); a reference to an object under
# another path than the documented one is resolved by sgtune_api. Only other libraries' names are
# ignored: this site is built and read offline, so it cannot link to their documentation (no intersphinx)
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|scipy|sympy|click|jax|optax|arviz|xarray|dask|distributed|pyarrow|matplotlib|numba)"
               r"(\..+)?"),
    (r"py:.*", r"(os|pathlib|collections\.abc|concurrent\.futures|typing)\..+"),  # the standard library's
]

html_theme = "pydata_sphinx_theme"
html_title = f"sgtune {version}"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"index": [], "getting_started": []}
