"""Start-up cost of the ``sgtune`` program: the modules every command loads stay off scipy.stats and sympy (each
costs about a second per process), and the special functions they call instead are scipy.stats' own formulas."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from sgtune.diagnostics import bonferroni_threshold


@pytest.mark.parametrize("alpha,k", [(0.05, 1), (0.05, 10), (0.01, 3), (1e-6, 7), (0.5, 1), (1e-300, 2)])
@pytest.mark.parametrize("dof", [math.inf, 1, 2.5, 31, 1e6])
def test_bonferroni_threshold_is_scipy_stats_isf(alpha, k, dof):
    """Independent route: scipy.stats' norm/t inverse survival functions, bit for bit."""
    tail = alpha / (2 * k)
    expected = stats.norm.isf(tail) if math.isinf(dof) else stats.t.isf(tail, dof)
    assert bonferroni_threshold(alpha, k, dof=dof) == float(expected)


def test_the_special_functions_are_scipy_stats_quantiles():
    """health's F threshold (``fdtri``) and fluctuation's 97.5 % normal quantile (``ndtri``) against scipy.stats."""
    from scipy import special

    for q in (0.05, 0.05 / 3, 1e-6, 0.5):
        for d1 in (2, 5, 49):
            for d2 in (3, 7, 19):
                assert special.fdtri(d1, d2, q) == stats.f.ppf(q, d1, d2)
    assert special.ndtri(0.975) == stats.norm.ppf(0.975) and np.isclose(special.ndtri(0.975), 1.959963984540054)


@pytest.mark.parametrize("module", ["sgtune.cli.cmd_run", "sgtune.cli.cmd_verify", "sgtune.cli.cmd_lambda",
                                    "sgtune.cli.cmd_covariance", "sgtune.cli.cmd_plan", "sgtune.diagnostics"])
def test_a_command_module_loads_neither_scipy_stats_nor_sympy(module):
    code = (f"import sys, {module}\n"
            "print(sorted(m for m in ('scipy.stats', 'sympy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]", done.stdout
