"""Layer 3: the theory of SG(L)D chains (stationary covariance, tuning, error constants of the source papers).

Import from the modules (``sgtune.theory.stationary``, ``sgtune.theory.tuning``, …); the names below
are re-exported for convenience.
"""
from __future__ import annotations

from .mcerror import MCError, cov_error_constant, mc_error, mean_asymptotic_cov

__all__ = ["MCError", "mc_error", "mean_asymptotic_cov", "cov_error_constant"]
