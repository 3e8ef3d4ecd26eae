"""The API reference: each module's public names (its ``__all__``), and links that find them.

Two directives write the reference pages under ``docs/api/``:

``.. api-module:: sgtune.theory.stationary``
    the module's docstring (the target of ``:mod:`` links), a summary table of its public names and
    the documentation of each, in the order of ``__all__``. A name the module only re-exports from a
    documented ancestor package (``sgtune.sampler.driver.run_chains`` is ``sgtune.sampler.run_chains``)
    is documented there, once. A new name in ``__all__`` appears without editing the pages.
``.. api-summary:: sgtune``
    a summary table of ``__all__`` that links to where each name is documented (the top level).

A cross-reference that names an object by another path than the one it is documented under
(``sgtune.tune``, ``sgtune.models.expansion.expand``, ``run_chains`` inside a module that imports it,
the annotation ``Expansion``) is resolved to the documented name when the object it imports is the
same; a reference to a module without its own section goes to its nearest documented package. Any
other reference stays unresolved, so the nitpicky build reports it.

:func:`public_modules` and :func:`documented_modules` are also what ``tests/test_docs.py`` uses to
check, without building, that every public module is on a page.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from typing import Any

import numpy as np
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

from sgtune_docstrings import escape_bars

API_DIR = "api"
_DIRECTIVE = re.compile(r"^\.\.\s+api-module::\s*(\S+)\s*$", re.M)
#: a data value whose repr is longer than this is shown without its value
_MAX_VALUE_REPR = 70


def documented_modules(srcdir: str | Path) -> dict[str, str]:
    """Module name -> the page (docname) whose ``api-module`` directive documents it."""
    out: dict[str, str] = {}
    root = Path(srcdir)
    for path in sorted((root / API_DIR).rglob("*.rst")):
        if "generated" in path.parts:
            continue
        docname = path.relative_to(root).with_suffix("").as_posix()
        for name in _DIRECTIVE.findall(path.read_text(encoding="utf-8")):
            out.setdefault(name, docname)
    return out


def _import(dotted: str) -> Any:
    """The object a dotted path names (a module, or attributes of the longest importable module)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _all(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:  # no __all__: the public functions and classes it defines
        names = [n for n, v in vars(module).items() if not n.startswith("_")
                 and (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == module.__name__]
    return [n for n in names if n != "__version__"]


def _own(obj: Any) -> bool:
    """False for a function or class of another library that a module re-exports (numba's ``prange``)."""
    if inspect.isclass(obj) or callable(obj):
        return str(getattr(obj, "__module__", "sgtune") or "sgtune").startswith("sgtune")
    return True


def public_names(modname: str, documented: set[str] | dict[str, str],
                 _visiting: frozenset[str] = frozenset()) -> list[str]:
    """The names of ``modname.__all__`` documented under ``modname``, each object once.

    Leaves out another library's functions and classes, what a documented ancestor package re-exports
    (the same object under the same name: documented there), and a function or class that a
    documented module defines and lists itself (``sgtune.theory.tuning.load_blocks`` is
    ``sgtune.io.blocks.load_blocks``).
    """
    module = importlib.import_module(modname)
    names = [n for n in _all(module) if _own(getattr(module, n))]
    for parent in documented:
        if parent != modname and modname.startswith(parent + "."):
            pmod = importlib.import_module(parent)
            shared = {n for n in _all(pmod) if n in names and getattr(pmod, n) is getattr(module, n)}
            names = [n for n in names if n not in shared]
    out = []
    for name in names:
        obj = getattr(module, name)
        home = getattr(obj, "__module__", None) if inspect.isclass(obj) or callable(obj) else None
        if (home and home != modname and home in documented and home not in _visiting
                and not modname.startswith(home + ".") and not home.startswith(modname + ".")
                and name in public_names(home, documented, _visiting | {modname})):
            continue
        out.append(name)
    return out


def public_modules() -> list[str]:
    """Every module of sgtune below the top level, without private parts or the CLI.

    The top level only re-exports (``.. api-summary:: sgtune`` links its names).
    """
    import sgtune
    out = []
    for info in pkgutil.walk_packages(sgtune.__path__, "sgtune."):
        parts = info.name.split(".")
        if parts[1] == "cli" or any(p.startswith("_") for p in parts):
            continue
        out.append(info.name)
    return out


def _data_doc(modname: str, name: str, obj: Any) -> list[str]:
    """The ``#:`` comment of a module-level value: in ``modname`` or in the module it was imported from."""
    import sys
    package = modname.split(".")[0]
    sources = [modname, *sorted(m for m, mod in list(sys.modules.items()) if m.startswith(package + ".")
                                and m != modname and getattr(mod, name, None) is obj)]
    for source in sources:
        try:
            docs = ModuleAnalyzer.for_module(source).find_attr_docs()
        except Exception:
            continue
        if ("", name) in docs:
            return [line for line in docs[("", name)] if line is not None]
    return []


def _entry(modname: str, name: str, obj: Any) -> list[str]:
    full = f"{modname}.{name}"
    if inspect.isclass(obj):
        kind = "autoexception" if issubclass(obj, BaseException) else "autoclass"
        return [f".. {kind}:: {full}", "   :members:", ""]
    if callable(obj):
        return [f".. autofunction:: {full}", ""]
    # a value: its #: comment as written (not the docstring of its type, not parsed as "type: text")
    lines = [f".. py:data:: {name}", f"   :module: {modname}"]
    value = repr(obj)
    if not isinstance(obj, np.ndarray) and len(value) <= _MAX_VALUE_REPR and "\n" not in value:
        lines.append(f"   :value: {value}")
    doc = [escape_bars(line) for line in _data_doc(modname, name, obj)]
    return [*lines, "", *(f"   {line}" if line else "" for line in doc), ""]


_ROLE = re.compile(r"(:[\w:]+:`)([^`<]+)`")


def _summary(modname: str, name: str, obj: Any) -> str:
    """The first line of the docstring (of a value: of its ``#:`` comment).

    A relative cross-reference in it (``:class:`Dataset```) is made absolute, relative to the module
    that defines the object: the table may stand on another page (the top level).
    """
    if inspect.isclass(obj) or callable(obj):
        doc = (inspect.getdoc(obj) or "").strip().splitlines()
        home = importlib.import_module(getattr(obj, "__module__", None) or modname)
    else:
        doc = [line for line in _data_doc(modname, name, obj) if line.strip()]
        home = importlib.import_module(modname)

    def absolute(m: re.Match[str]) -> str:
        target = m.group(2).strip()
        bare = target.lstrip("~.")
        if target.startswith("!") or "." in bare or not hasattr(home, bare):
            return m.group(0)
        return f"{m.group(1)}~{home.__name__}.{bare}`"

    return _ROLE.sub(absolute, escape_bars(doc[0].strip())) if doc else ""


def summary_table(modname: str, names: list[str], qualified: bool = False) -> list[str]:
    """A two-column table: each name, linked (shown as ``modname.name`` when ``qualified``), and the first
    line of its docstring."""
    module = importlib.import_module(modname)
    lines = [".. list-table::", "   :class: autosummary longtable", "   :widths: 30 70", ""]
    for name in names:
        summary = _summary(modname, name, getattr(module, name))
        shown = f"{modname}.{name}" if qualified else name
        lines += [f"   * - :py:obj:`{shown} <{modname}.{name}>`", f"     - {summary}" if summary else "     -"]
    return [*lines, ""]


class ApiModule(SphinxDirective):
    """``.. api-module:: MODULE``: the module's docstring, a summary table and its public names."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        modname = self.arguments[0]
        documented = getattr(self.env.app, "sgtune_api_modules", {})
        module = importlib.import_module(modname)
        names = public_names(modname, documented)
        lines = [f".. automodule:: {modname}", "   :no-members:", ""]
        if names:
            lines += summary_table(modname, names)
            for name in names:
                lines += _entry(modname, name, getattr(module, name))
        self.env.note_dependency(module.__file__)
        node = nodes.section()
        nested_parse_with_titles(self.state, StringList(lines, source=f"<api-module {modname}>"), node)
        return node.children


class ApiSummary(SphinxDirective):
    """``.. api-summary:: MODULE``: a summary table of ``__all__`` linking to where each name is documented."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        modname = self.arguments[0]
        names = _all(importlib.import_module(modname))
        lines = summary_table(modname, names, qualified=True)
        node = nodes.section()
        nested_parse_with_titles(self.state, StringList(lines, source=f"<api-summary {modname}>"), node)
        return node.children


def _scan(app: Sphinx) -> None:
    app.sgtune_api_modules = documented_modules(app.srcdir)  # type: ignore[attr-defined]


# -- resolving another path to the same object ------------------------------------------------------

_INDEX: dict[int, tuple[dict[int, str], dict[tuple[str, int], str], set[str]]] = {}
_RESOLVABLE = ("class", "function", "method", "classmethod", "staticmethod", "property", "exception")


def _index(env: Any) -> tuple[dict[int, str], dict[tuple[str, int], str], set[str]]:
    """id(object) -> documented name (functions, classes, methods), (name, id) for data, the modules."""
    key = id(env)
    if key not in _INDEX:
        by_id: dict[int, str] = {}
        data: dict[tuple[str, int], str] = {}
        modules: set[str] = set()
        for fullname, entry in env.get_domain("py").objects.items():
            if entry.objtype == "module":
                modules.add(fullname)
                continue
            try:
                obj = _import(fullname)
            except Exception:  # an attribute documented by a docstring section, not importable
                continue
            if entry.objtype in _RESOLVABLE or callable(obj):
                by_id.setdefault(id(obj), fullname)
            elif entry.objtype == "data":
                data.setdefault((fullname.rpartition(".")[2], id(obj)), fullname)
        _INDEX[key] = (by_id, data, modules)
    return _INDEX[key]


def _candidates(target: str, modname: str | None, clsname: str | None) -> list[str]:
    """Where ``target`` may live: as written, in the enclosing class and module, and in the module that
    defines the enclosing class (a class documented under a package that re-exports it)."""
    target = target.lstrip(".~")
    out = [target]
    if modname:
        if clsname:
            out.append(f"{modname}.{clsname}.{target}")
            try:
                home = _import(f"{modname}.{clsname.split('.')[0]}").__module__
                out += [f"{home}.{clsname}.{target}", f"{home}.{target}"]
            except Exception:
                pass
        out.append(f"{modname}.{target}")
    return out


def resolve_same_object(app: Sphinx, env: Any, node: Any, contnode: nodes.Element) -> nodes.Element | None:
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not (target.lstrip(".~").startswith("sgtune") or (node.get("py:module") or "").startswith("sgtune")):
        return None
    by_id, data, modules = _index(env)
    domain = env.get_domain("py")
    if node.get("reftype") == "mod":
        name = target.lstrip(".~")
        while "." in name and name not in modules:
            name = name.rpartition(".")[0]
        found = name if name in modules and name != target else None
    else:
        found = None
        for dotted in _candidates(target, node.get("py:module"), node.get("py:class")):
            try:
                obj = _import(dotted)
            except Exception:
                continue
            found = by_id.get(id(obj)) or data.get((dotted.rpartition(".")[2], id(obj)))
            if found is None and inspect.ismodule(obj) and obj.__name__ in modules:
                found = obj.__name__
            if found:
                break
    if not found:
        return None
    return domain.resolve_xref(env, node["refdoc"], app.builder, "obj" if node.get("reftype") != "mod"
                               else "mod", found, node, contnode)


# -- the path an object is defined under, as a second anchor --------------------------------------

def _canonical(obj: Any) -> str | None:
    obj = getattr(obj, "fget", obj)  # a property: its getter
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and module.startswith("sgtune"):
        return f"{module}.{qualname}"
    return None


def add_canonical_ids(app: Sphinx, doctree: nodes.document) -> None:
    """Give each object documented under a re-exporting package the id of its defining module too.

    ``sgtune.models.expand`` also answers to ``#sgtune.models.expansion.expand``: the anchor the source
    pages of ``viewcode`` link back to (see :func:`viewcode_refnames`).
    """
    from sphinx import addnodes
    for sig in doctree.findall(addnodes.desc_signature):
        module, fullname = sig.get("module"), sig.get("fullname")
        if not module or not fullname or not sig.get("ids"):
            continue
        try:
            canonical = _canonical(_import(f"{module}.{fullname}"))
        except Exception:
            continue
        if canonical and canonical not in sig["ids"] and canonical != f"{module}.{fullname}":
            sig["ids"].append(canonical)


def viewcode_refnames(app: Sphinx) -> None:
    """A source page links back to ``#<its module>.<name>`` (the anchor ``add_canonical_ids`` adds).

    ``viewcode`` takes the module name of the first object documented from a source file for all its
    objects, a wrong anchor when a package re-exports some of them and the module documents others.
    """
    modules = getattr(app.env, "_viewcode_modules", {})
    for modname, entry in list(modules.items()):
        if isinstance(entry, tuple) and len(entry) == 4 and entry[3] != modname:
            modules[modname] = (*entry[:3], modname)


def _before_viewcode_pages(app: Sphinx) -> list[Any]:
    viewcode_refnames(app)
    return []


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("api-module", ApiModule)
    app.add_directive("api-summary", ApiSummary)
    app.connect("builder-inited", _scan)
    app.connect("missing-reference", resolve_same_object, priority=400)
    app.connect("doctree-read", add_canonical_ids, priority=600)
    app.connect("html-collect-pages", _before_viewcode_pages, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
