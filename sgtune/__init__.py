"""sgtune: turn the theory of stochastic-gradient MCMC into numbers before you run SGD/SGLD."""
from __future__ import annotations

__version__ = "0.1.0"
