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
``sgtune.sampler``    numba-compiled chains (the only numba user)
``sgtune.workflows``  multi-step studies: the ``verify`` check, calibration, refinement, planning,
                      the experiments of Wang, Ding & Huggins (2026), the BNN study
``sgtune.cli``        the ``sgtune`` command line
====================  =====================================================================

The most used functions are also reachable from the package root (loaded on first use):
``sgtune.expand``, ``sgtune.tune``, ``sgtune.run_chains`` and the others in ``__all__``.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

# name -> module that defines it; resolved lazily so ``import sgtune`` stays cheap (no numba, no scipy)
_API = {
    "load_dataset": "sgtune.io.data", "make_dataset": "sgtune.io.data", "example": "sgtune.io.data",
    "Dataset": "sgtune.io.data",
    "get_model": "sgtune.models", "expand": "sgtune.models", "fit_map": "sgtune.models",
    "tune": "sgtune.theory.tuning", "TuningResult": "sgtune.theory.tuning",
    "predict_stationary_cov": "sgtune.theory.stationary", "StationaryCov": "sgtune.theory.stationary",
    "run_chains": "sgtune.sampler", "ChainResult": "sgtune.sampler",
    "verify_stationary_cov": "sgtune.workflows.verify",
    "SgtuneError": "sgtune.core.errors",
}
__all__ = ["__version__", *_API]

def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sgtune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
