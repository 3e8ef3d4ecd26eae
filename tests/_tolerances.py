"""Declared tolerances with their provenance (docs/contributing.md). Import, don't inline."""
from scipy.stats import norm

#: two dense float64 solves of a well-conditioned D ≤ 20 problem agree to ~1e3·eps·cond
SOLVER_RTOL = 1e-10
#: sympy closed form evaluated in float64 vs the numeric solver (issue target: 1e-12)
SYMBOLIC_RTOL = 1e-12
#: exact enumeration of every minibatch vs the closed form (same arithmetic, ~1e2·eps)
ENUMERATION_RTOL = 1e-12
#: residual of the dq-exact tuning equation (issue target: ≤ 1e-10 for D ≤ 500)
TUNING_RESIDUAL = 1e-10
#: family-wise error rate of every Monte Carlo test
MC_ALPHA = 1e-3


def bonferroni_z(n_tests: int, alpha: float = MC_ALPHA) -> float:
    """Two-sided z threshold Φ⁻¹(1 − α/(2k)) for k simultaneous z-tests."""
    return float(norm.ppf(1 - alpha / (2 * n_tests)))
