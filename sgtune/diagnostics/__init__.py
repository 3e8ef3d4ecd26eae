"""Layer 3: Monte Carlo diagnostics that do not depend on the sampler.

- :mod:`sgtune.diagnostics.mcse` — ESS, batch-means MCSE, covariance standard errors, z-tests;
- :mod:`sgtune.diagnostics.ksd` — kernel Stein discrepancy against the posterior.

The names of :mod:`~sgtune.diagnostics.mcse` are re-exported here (``from sgtune.diagnostics
import compare_covariance`` keeps working as before the package became a folder).
"""
from __future__ import annotations

from .mcse import *  # noqa: F401,F403
from .mcse import __all__ as _mcse_all

__all__ = list(_mcse_all)
