"""The Examples sections of the public modules' docstrings run and print what they show.

Each public module (``tests/test_numpydoc.py`` defines which) is run through :mod:`doctest` with
``ELLIPSIS | NORMALIZE_WHITESPACE`` and NumPy's print options fixed (4 digits, no scientific notation
for small numbers), so an example's output does not depend on the machine beyond what its ``...``
leaves out. Examples are small (tiny arrays, the ``hetero-linear`` example data, short chains).
"""
from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

from _public_api import public_modules

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
#: modules whose examples need an optional extra (both are in [dev], which the test suite installs)
NEEDS = {"sgtune.models.pytorch": "torch", "sgtune.models.autodiff": "jax"}


@pytest.fixture
def fixed_printing():
    saved = np.get_printoptions()
    np.set_printoptions(precision=4, suppress=True, linewidth=88, legacy=False)
    try:
        yield
    finally:
        np.set_printoptions(**saved)


@pytest.mark.parametrize("modname", public_modules())
def test_examples_run(modname, fixed_printing):
    if modname in NEEDS:
        pytest.importorskip(NEEDS[modname], reason=f"the examples of {modname} need {NEEDS[modname]}")
    module = importlib.import_module(modname)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    # the module's namespace, as ``doctest.testmod`` and ``pytest --doctest-modules`` give it, plus ``np``
    tests = [t for t in finder.find(module, modname, extraglobs={"np": np}) if t.examples]
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {modname} failed (output above)"
