"""Numba-compiled SG-MCMC chains (the only package that imports numba).

Public API: :func:`run_chains` (GLM chains on data), :func:`run_quadratic_chains`
(quadratic potential with synthetic Gaussian / α-stable gradient noise), :class:`ChainResult`.
Kernels are top-level ``@njit`` functions in :mod:`sgtune.sampler.kernels`, selected by
name from ``KERNELS``; each has a pure-Python twin in :mod:`sgtune.sampler.twins`.
"""
from __future__ import annotations

from .driver import BATCHINGS, SAMPLERS, ChainResult, run_chains, run_quadratic_chains

__all__ = ["run_chains", "run_quadratic_chains", "ChainResult", "SAMPLERS", "BATCHINGS"]
