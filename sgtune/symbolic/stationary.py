"""Closed form of the 1-D stationary variance of SG(L)D (Wang, Ding & Huggins (2026) eqs. 11–12 with D = 1).

Derived from the chain itself, not from eq. (11): for D = 1 the proxy is
d' = (1 − λh_b) d − λ ε_b + sqrt(2λ/β) ξ with h_b the batch mean of the curvatures J_n
(+Γ/N) and ε_b the batch mean of the gradients g_n (+Γθ̂/N, so E ε_b = 0). Taking second
moments at stationarity (E d = 0, batch independent of d) gives one linear equation for Σ.
"""
from __future__ import annotations

import sympy as sp

from ..core._refs import cites

# symbols shared with the tests
lam, B, N, beta, Gamma = sp.symbols("lambda B N beta Gamma", positive=True)
J, J2, I, gbar = sp.symbols("J J2 I gbar", real=True)  # mean J_n, mean J_n², mean g_n², mean g_n
f = sp.Symbol("f", positive=True)  # finite-population factor: 1, or (N−B)/(N−1)


@cites("wang2026", "Eqs. (11)–(12), D = 1 (derived from the proxy chain)")
def stationary_variance_1d() -> dict[str, sp.Expr]:
    """Σ(λ, B, N, β, moments) for 1-D SG(L)D; f = 1 with replacement, (N−B)/(N−1) without."""
    S = sp.Symbol("Sigma", positive=True)
    H = J + Gamma / N
    var_h = f * (J2 - J**2) / B          # variance of the batch-mean curvature
    var_eps = f * (I - gbar**2) / B      # variance of the batch-mean gradient at θ̂
    second_moment_factor = sp.expand((1 - lam * H) ** 2) + lam**2 * var_h  # E[(1 − λ h_b)²]
    eq = sp.Eq(S, second_moment_factor * S + lam**2 * var_eps + 2 * lam / beta)
    sol = sp.simplify(sp.solve(eq, S)[0])
    sgd = sp.simplify(sp.limit(sol, beta, sp.oo))
    lam_stab = sp.solve(sp.Eq(second_moment_factor, 1), lam)
    lam_max = [s for s in lam_stab if s != 0][0]
    return {"Sigma": sol, "Sigma_sgd": sgd, "lambda_max": sp.simplify(lam_max)}


def substitutions(expansion: object, batch_size: int, without_replacement: bool = False) -> dict[sp.Symbol, float]:
    """Numeric values of the symbols for a 1-D :class:`~sgtune.models.Expansion`."""
    import numpy as np

    e = expansion
    n = e.n_data  # type: ignore[attr-defined]
    if e.rank_one:  # type: ignore[attr-defined]
        jn = e.weights * e.design[:, 0] ** 2  # type: ignore[attr-defined]
    else:
        jn = e.per_sample_hessians[:, 0, 0]  # type: ignore[attr-defined]
    g = e.grads[:, 0]  # type: ignore[attr-defined]
    fval = (n - batch_size) / (n - 1) if without_replacement else 1.0
    return {J: float(np.mean(jn)), J2: float(np.mean(jn**2)), I: float(np.mean(g**2)), gbar: float(np.mean(g)),
            N: float(n), B: float(batch_size), Gamma: float(e.prior_precision[0, 0]), f: fval}  # type: ignore[attr-defined]
