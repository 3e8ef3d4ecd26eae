"""The public API whose docstrings ``tests/test_numpydoc.py`` validates and ``tests/test_doctests.py`` runs.

The root ``sgtune.__all__`` and, in each user-facing subpackage, the package's ``__all__`` and the
``__all__`` of its public modules (those on the user's API pages; the developers' internals, listed in
``docs/api/internals.rst``, are not part of it).
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("theory", "models", "sampler", "io", "diagnostics", "workflows", "core")


def _internal_modules() -> set[str]:
    text = (ROOT / "docs" / "api" / "internals.rst").read_text(encoding="utf-8")
    return set(re.findall(r"^\.\.\s+api-module::\s*(\S+)\s*$", text, re.M))


def public_modules() -> list[str]:
    """The root package, the user-facing subpackages and their public (non-underscore) modules."""
    internal = _internal_modules()
    out = ["sgtune"]
    for sub in SUBPACKAGES:
        pkg = importlib.import_module(f"sgtune.{sub}")
        out.append(pkg.__name__)
        out += [f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)
                if not m.name.startswith("_") and f"{pkg.__name__}.{m.name}" not in internal]
    return out


def public_objects() -> dict[str, object]:
    """``module.qualname`` where it is defined -> each public function and class."""
    out: dict[str, object] = {}
    for modname in public_modules():
        module = importlib.import_module(modname)
        for name in getattr(module, "__all__", ()):
            if name == "__version__":
                continue
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                out.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return out
