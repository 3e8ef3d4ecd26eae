"""The public API's docstrings follow numpydoc (``numpydoc.validate``), with a short list of ignored checks.

The public API is the root ``sgtune.__all__`` and, in each user-facing subpackage, the package's ``__all__``
and the ``__all__`` of its public modules (those on the user's API pages; the developers' internals, listed
in ``docs/api/internals.rst``, are not part of it). Functions and classes are checked where they are
defined (a re-export is the same object, checked once). Their examples run in ``tests/test_doctests.py``.

Names not converted yet are in :data:`TODO`: that set may only shrink (a test fails when a name in it
already passes, so it is removed as soon as it is done).
"""
from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

import sgtune
from _public_api import public_objects

import numpydoc.validate as numpydoc_validate  # the [dev] extra; a missing numpydoc fails, not skips

#: checks ignored everywhere, each with its reason
IGNORED = {
    "ES01": "an extended summary is optional: a short function is clear from its summary and Parameters",
    "SA01": "See Also only where a related function is natural to point to, not on every name",
}
#: a class whose instances sgtune returns lists its fields under Attributes (the test below checks
#: every field is there); users do not construct it, so its constructor is not repeated under Parameters
RESULT_IGNORED = {"PR01", "PR02"}
#: exception and warning classes: they are raised, not called; an example would be absurd
EXCEPTION_IGNORED = {"EX01", "PR01"}  # PR01: the message (*args) and the keywords ``remedies``/``code``
#: are documented once, on SgtuneError, for every subclass
#: a typing.Protocol is a structural type, never constructed: its (*args, **kwargs) signature is not an API
PROTOCOL_IGNORED = {"PR01", "PR02"}

#: (module, name) not converted yet, each with its reason: empty, every public name passes. The set may only
#: shrink; a name that cannot be converted in its own change enters here with the reason (test below).
TODO: set[tuple[str, str]] = set()


PUBLIC = public_objects()


def _is_result(obj: object) -> bool:
    return dataclasses.is_dataclass(obj) and "Attributes\n" in (obj.__doc__ or "")


def _errors(path: str, obj: object) -> list[str]:
    ignored = set(IGNORED)
    if inspect.isclass(obj) and issubclass(obj, (BaseException, Warning)):
        ignored |= EXCEPTION_IGNORED
    if _is_result(obj):
        ignored |= RESULT_IGNORED
    if getattr(obj, "_is_protocol", False):
        ignored |= PROTOCOL_IGNORED
    report = numpydoc_validate.validate(path)
    return [f"{code}: {message}" for code, message in report["errors"] if code not in ignored]


DONE = sorted(p for p in PUBLIC if (p.rpartition(".")[0], p.rpartition(".")[2]) not in TODO)


@pytest.mark.parametrize("path", DONE)
def test_numpydoc(path):
    errors = _errors(path, PUBLIC[path])
    assert not errors, f"{path}:\n  " + "\n  ".join(errors)


@pytest.mark.parametrize("path", [p for p in DONE if _is_result(PUBLIC[p])])
def test_result_attributes_documented(path):
    """Every field of a result dataclass is an ``name : type`` line of its Attributes section."""
    doc = inspect.getdoc(PUBLIC[path])
    section = doc.split("Attributes\n----------\n", 1)[1]
    section = re.split(r"\n\n[A-Z][a-z ]+\n-+\n", section, maxsplit=1)[0]
    listed = set()
    for line in section.splitlines():
        m = re.match(r"^(\w+(?:, \w+)*) : ", line)
        if m:
            listed |= set(m.group(1).split(", "))
    missing = [f.name for f in dataclasses.fields(PUBLIC[path]) if not f.name.startswith("_") and f.name not in listed]
    assert not missing, f"{path}: fields missing from Attributes: {missing}"


def test_todo_only_shrinks():
    """Every TODO entry is public and still fails (a converted name leaves the set)."""
    for modname, name in sorted(TODO):
        path = f"{modname}.{name}"
        assert path in PUBLIC, f"TODO names {path}, which is not a public function or class"
        assert _errors(path, PUBLIC[path]), f"{path} passes now: remove it from TODO"


def test_scope_covers_the_root():
    for name in sgtune.__all__:
        if name != "__version__":
            obj = getattr(sgtune, name)
            assert f"{obj.__module__}.{obj.__qualname__}" in PUBLIC, name
