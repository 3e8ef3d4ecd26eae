"""Numba-compiled SG-MCMC chains (the only package that imports numba).

Public API: :func:`run_chains` (chains of a model on data), :func:`run_quadratic_chains`
(quadratic potential with synthetic Gaussian / α-stable gradient noise), :class:`ChainResult`, and the
samplers' options (:mod:`sgtune.sampler.registry`). Chains run in one compiled loop composed of a batch
schedule, a gradient oracle, a step rule and a recorder (:mod:`sgtune.sampler.engine`); models reach
their gradient through a numba spec (:mod:`sgtune.sampler.specs`), models with only NumPy gradients run
on :mod:`sgtune.sampler.general`. The SMILE samplers on the SMILE paper's analytic targets are
:func:`sgtune.sampler.smile_ensemble.run_smile_ensemble` (also ``sgtune.sampler.run_smile_ensemble``).
"""
from __future__ import annotations

from .driver import BATCHINGS, SAMPLERS, ChainResult, run_chains, run_quadratic_chains
from .registry import ClippedSGLDOptions, SGHMCOptions, SGLDOptions, SGLRWOptions, SmileOptions, options_for
from .smile_ensemble import SmileEnsembleResult, run_smile_ensemble

__all__ = ["run_chains", "run_quadratic_chains", "ChainResult", "SAMPLERS", "BATCHINGS", "SGLDOptions",
           "SGLRWOptions", "ClippedSGLDOptions", "SGHMCOptions", "SmileOptions", "options_for",
           "run_smile_ensemble", "SmileEnsembleResult"]
