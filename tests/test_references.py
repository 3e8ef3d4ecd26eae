"""Every public theory function cites the paper equation it implements (docs/contributing.md)."""
import importlib
import inspect
import pkgutil

import pytest

import sgtune.symbolic
import sgtune.theory
from sgtune.core._refs import REFERENCES

MODULES = [f"sgtune.theory.{m.name}" for m in pkgutil.iter_modules(sgtune.theory.__path__)]


@pytest.mark.parametrize("module", MODULES)
def test_public_theory_functions_are_registered(module):
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", [n for n in dir(mod) if not n.startswith("_")])
    missing = [n for n in names if inspect.isfunction(getattr(mod, n, None))
               and getattr(mod, n).__module__ == module and not getattr(getattr(mod, n), "__references__", None)]
    assert not missing, f"{module}: add @cites(...) to {missing}"
    for n in names:
        for key, where in getattr(getattr(mod, n, None), "__references__", []):
            assert key in REFERENCES and where


def test_every_derivation_is_importable_and_cited():
    from sgtune.symbolic import DERIVATIONS

    for name, target in DERIVATIONS.items():
        module, func = target.split(":")
        fn = getattr(importlib.import_module(module), func)
        assert getattr(fn, "__references__", None), f"derivation {name} ({target}) lacks @cites"
