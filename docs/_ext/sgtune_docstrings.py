"""Make autodoc tolerant of the plain-text mathematics in sgtune's docstrings.

The docstrings write norms and absolute values as ``|x|`` and ``‖x‖``: in reStructuredText ``|x|`` is a
substitution reference, so each one would render as an error. ``autodoc-process-docstring`` escapes
the bars outside inline literals, ``:math:`` roles and math blocks.

Docutils' remaining complaints about a docstring's layout (a field list without a closing blank line,
an unexpected indentation) do not stop the build: they are collected into
``<outdir>/docstring-warnings.txt`` and counted in one line of the build log, so ``-W`` stays strict
for the documentation pages themselves.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging as sphinx_logging

# inline literals and roles (``…``, :math:`…`, :func:`…`) are copied as they are
_PROTECTED = re.compile(r"``.+?``|:[\w:.-]+:`[^`]*`|`[^`]*`_?")


def _escape_bars(text: str) -> str:
    out, pos = [], 0
    for m in _PROTECTED.finditer(text):
        out.append(re.sub(r"(?<!\\)\|", r"\\|", text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(re.sub(r"(?<!\\)\|", r"\\|", text[pos:]))
    return "".join(out)


def process_docstring(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    in_math, math_indent = False, 0
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if in_math:
            if stripped and indent <= math_indent:
                in_math = False
            else:
                continue
        if stripped.startswith(".. math::"):
            in_math, math_indent = True, indent
            continue
        if "|" in line:
            lines[i] = _escape_bars(line)


def process_click_text(app: Sphinx, ctx: Any, lines: list[str]) -> None:
    """Keep wildcards such as ``e_cov_*`` in the command help literal.

    In reStructuredText a ``*`` opens emphasis and a word ending in ``_`` is a link reference.
    """
    for i, line in enumerate(lines):
        line = re.sub(r"(?<!\\)\*", r"\\*", line)
        lines[i] = re.sub(r"(?<=\w)_(?=\W|$)", r"\\_", line)


def skip_foreign(app: Sphinx, what: str, name: str, obj: Any, skip: bool, options: Any) -> bool | None:
    """Skip members imported from other packages (``scipy.stats.kstest`` in a module's namespace)."""
    module = getattr(obj, "__module__", None)
    if what == "module" and isinstance(module, str) and not module.startswith("sgtune"):
        return True
    return None


#: warning types diverted when they are located in a docstring (layout, footnotes, an ambiguous short name)
_TOLERATED = {"docutils", "ref.footnote", "ref.python"}


class _DocstringWarnings(logging.Filter):
    """Diverts docutils' layout warnings located in a docstring into a list."""

    def __init__(self) -> None:
        super().__init__()
        self.collected: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        location = getattr(record, "location", None)  # not yet translated to text: a node, a tuple or a str
        if hasattr(location, "source") or hasattr(location, "document"):
            location = sphinx_logging.get_node_location(location) or ""
        location = str(location or "")
        kind = getattr(record, "type", None)
        subtype = getattr(record, "subtype", None)
        if kind in _TOLERATED or f"{kind}.{subtype}" in _TOLERATED:
            if "docstring of " in location or "<autosummary>" in location or "/api/generated/" in location:
                entry = f"{location}: {record.getMessage()}"
                if entry not in self.collected:
                    self.collected.append(entry)
                return False
        return True


_FILTER = _DocstringWarnings()


def _install_filter(app: Sphinx) -> None:
    logger = logging.getLogger(sphinx_logging.NAMESPACE)
    for handler in logger.handlers:  # first, so that Sphinx neither counts nor raises these
        if isinstance(handler, sphinx_logging.WarningStreamHandler) and _FILTER not in handler.filters:
            handler.filters.insert(0, _FILTER)


def _report(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None:
        return
    path = Path(app.outdir) / "docstring-warnings.txt"
    path.write_text("".join(f"{w}\n" for w in _FILTER.collected), encoding="utf-8")
    sphinx_logging.getLogger(__name__).info(
        f"{len(_FILTER.collected)} docstring layout warnings (not errors) written to {path}")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", process_docstring)
    app.connect("autodoc-skip-member", skip_foreign)
    app.connect("sphinx-click-process-description", process_click_text)
    app.connect("sphinx-click-process-epilog", process_click_text)
    app.connect("sphinx-click-process-options", process_click_text)
    app.connect("builder-inited", _install_filter)
    app.connect("build-finished", _report)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
