"""Make autodoc tolerant of the plain-text mathematics in sgtune's docstrings.

The docstrings write norms and absolute values as ``|x|`` and ``‖x‖``: in reStructuredText ``|x|`` is a
substitution reference, so each one would render as an error. ``autodoc-process-docstring`` escapes
the bars outside inline literals, ``:math:`` roles and math blocks.

A property's or attribute's docstring is prose ("β < ∞: the chain adds noise"): napoleon would read the
text before its first colon as a type, so such a docstring is kept as written unless it has numpydoc
sections.

Every other complaint about a docstring's layout is an error of the build, to be fixed in the docstring.
"""
from __future__ import annotations

import re
from typing import Any

from sphinx.application import Sphinx

# inline literals and roles (``…``, :math:`…`, :func:`…`) are copied as they are
_PROTECTED = re.compile(r"``.+?``|:[\w:.-]+:`[^`]*`|`[^`]*`_?")


def escape_bars(text: str) -> str:
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
            lines[i] = escape_bars(line)


_PROSE = ("attribute", "property", "data")
_SECTION_RULE = re.compile(r"^\s*-{3,}\s*$")
_saved: dict[tuple[str, str], list[str]] = {}


def save_prose(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Before napoleon: keep the text of a prose docstring (no numpydoc section)."""
    if what in _PROSE and not any(_SECTION_RULE.match(line) for line in lines):
        _saved[(what, name)] = list(lines)


def restore_prose(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """After napoleon: put the kept text back (then the bars are escaped as everywhere)."""
    saved = _saved.pop((what, name), None)
    if saved is not None:
        lines[:] = saved


def process_click_text(app: Sphinx, ctx: Any, lines: list[str]) -> None:
    """Keep wildcards such as ``e_cov_*`` in the command help literal.

    In reStructuredText a ``*`` opens emphasis and a word ending in ``_`` is a link reference.
    """
    for i, line in enumerate(lines):
        line = re.sub(r"(?<!\\)\*", r"\\*", line)
        lines[i] = re.sub(r"(?<=\w)_(?=\W|$)", r"\\_", line)


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.napoleon")  # its handler (priority 500) runs between these two
    app.connect("autodoc-process-docstring", save_prose, priority=400)
    app.connect("autodoc-process-docstring", restore_prose, priority=600)
    app.connect("autodoc-process-docstring", process_docstring, priority=700)
    app.connect("sphinx-click-process-description", process_click_text)
    app.connect("sphinx-click-process-epilog", process_click_text)
    app.connect("sphinx-click-process-options", process_click_text)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
