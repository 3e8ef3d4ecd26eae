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
#: NIST StRD Longley (16 rows, 7 coefficients, column-scaled cond(X) = 4.3e4, relative residual 0.005): a
#: backward-stable least-squares solve is accurate to ≈ κε + κ²ε·0.005 ≈ 2e-9; observed 6e-12
NIST_LONGLEY_RTOL = 1e-8
#: the same problem in two unit systems (raw and standardised Longley, κ(H) = 2.4e19 and 2e9): the standardised
#: solve is itself accurate to ≈ κ(H)·ε ≈ 4e-7 in the worst direction; observed 2e-9
UNITS_RTOL = 1e-6
