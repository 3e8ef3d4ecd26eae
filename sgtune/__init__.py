"""sgtune: turn the theory of stochastic-gradient MCMC into numbers before you run SGD/SGLD.

The package is layered; each subpackage imports only from the layers below it
(``tests/test_layout.py`` checks this):

====================  =====================================================================
``sgtune.core``       errors, input validation, the citation registry
``sgtune.io``         data sets (in memory and out of core), chunked reductions, blocks files,
                      traces, figures, exporting Λ to training loops
``sgtune.models``     the per-observation model protocol, GLMs, MLPs, user models, the expansion
``sgtune.symbolic``   sympy derivations of the closed forms (oracles for the numeric code)
``sgtune.diagnostics`` ESS, MCSE, covariance z-tests, kernel Stein discrepancy
``sgtune.theory``     stationary covariance, tuning, fluctuation, minibatch, reshuffling, SMILE
``sgtune.sampler``    numba-compiled chains and the ``verify`` check (the only numba user)
``sgtune.workflows``  multi-step studies: calibration, Wang, Ding & Huggins's (2026) experiments, the BNN study
``sgtune.cli``        the ``sgtune`` command line
====================  =====================================================================

The most used functions are also reachable from the package root (loaded on first use):
``sgtune.expand``, ``sgtune.tune``, ``sgtune.run_chains`` and the others in ``__all__``.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it; resolved lazily so ``import sgtune`` stays cheap (no numba, no scipy)
_API = {
    "load_dataset": "sgtune.io.data", "make_dataset": "sgtune.io.data", "example": "sgtune.io.data",
    "Dataset": "sgtune.io.data",
    "get_model": "sgtune.models", "expand": "sgtune.models", "fit_map": "sgtune.models",
    "tune": "sgtune.theory.tuning", "TuningResult": "sgtune.theory.tuning",
    "predict_stationary_cov": "sgtune.theory.stationary", "StationaryCov": "sgtune.theory.stationary",
    "run_chains": "sgtune.sampler", "ChainResult": "sgtune.sampler",
    "verify_stationary_cov": "sgtune.sampler.verify",
    "SgtuneError": "sgtune.core.errors",
}
__all__ = ["__version__", *_API]

# modules that lived at the package root in 0.1.0 -> where they live now
_MOVED = {
    "sgtune.errors": "sgtune.core.errors",
    "sgtune._validation": "sgtune.core._validation",
    "sgtune._refs": "sgtune.core._refs",
    "sgtune._json": "sgtune.io._json",
    "sgtune._files": "sgtune.io._files",
    "sgtune.data": "sgtune.io.data",
    "sgtune.reduce": "sgtune.io.reduce",
    "sgtune.trace_io": "sgtune.io.trace_io",
    "sgtune.export": "sgtune.io.export",
    "sgtune.plots": "sgtune.io.plots",
    "sgtune.ksd": "sgtune.diagnostics.ksd",
    "sgtune.calibrate": "sgtune.workflows.calibrate",
    "sgtune.experiments": "sgtune.workflows.experiments",
    "sgtune.bnn": "sgtune.workflows.bnn",
}


class _MovedModuleLoader(importlib.abc.Loader):
    """Hands out the new module object under its old name, with a DeprecationWarning."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: Any) -> Any:
        warnings.warn(f"{spec.name} moved to {self.new}; import it from there "
                      "(the old name will be removed in a future release)", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self.spec = module.__spec__  # the import system overwrites __spec__ with the old name's spec
        return module

    def exec_module(self, module: Any) -> None:  # already executed under its new name: restore its spec
        module.__spec__ = self.spec


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        new = _MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedModuleLoader(new))


if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sgtune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
