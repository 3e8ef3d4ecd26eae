"""Numba-compiled SG-MCMC chains (the only package that imports numba).

Public API: :func:`run_chains` (GLM chains on data), :func:`run_quadratic_chains`
(quadratic potential with synthetic Gaussian / α-stable gradient noise), :class:`ChainResult`.
Chains run in one numba kernel composed from a batch schedule, a gradient and an update step
(:mod:`sgtune.sampler.kernels`; models reach their gradient through a numba spec,
:mod:`sgtune.sampler.specs`), with a pure-Python twin in :mod:`sgtune.sampler.twins`; models with
only NumPy gradients run on :mod:`sgtune.sampler.general`. ``run_chains(sampler=...)`` also runs
SGHMC and the SMILE samplers (:mod:`sgtune.sampler.smile_chain`) on every model; the SMILE
samplers on seed 001's analytic targets are :func:`sgtune.sampler.smile.run_smile_ensemble`.
"""
from __future__ import annotations

from .driver import BATCHINGS, SAMPLERS, ChainResult, run_chains, run_quadratic_chains

__all__ = ["run_chains", "run_quadratic_chains", "ChainResult", "SAMPLERS", "BATCHINGS"]
