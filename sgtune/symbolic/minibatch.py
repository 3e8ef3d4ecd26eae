r"""Symbolic derivations for the minibatch error terms of Mensch et al. (2025) (docs/conventions.md).

- :func:`clip_factor`: the diffusion factor of full-increment clipping,
  s = E[min(ξ², 1)], ξ ~ N(0, 1) (Mensch et al. (2025) appendix A.4, eq. 118), by integration.
- :func:`moment_coefficients`: the coefficients of the batch-sum moments E[S^{⊗k}],
  k = 2, 3, 4, in the population power sums P_k = Σ_i d_i^{⊗k} (Σ_i d_i = 0), for B
  indices drawn with replacement and for a uniform B-subset (without replacement).
- :func:`isotropic_diagonal_share`: the diagonal share of E‖M_SGLD‖²_F for Gaussian
  isotropic noise, 3/(D+2) at ∇U = 0 and its dependence on ‖∇U‖².

Derivation of the without-replacement coefficients. S = Σ_i ε_i d_i with ε_i the
inclusion indicators; for k distinct indices E[ε_{i₁}⋯ε_{i_k}] = π_k = B^{(k)}/N^{(k)}
(falling factorials). Expanding E[S^{⊗k}] groups index tuples by their equality pattern,
a set partition σ of {1..k}; the sum over tuples whose equality pattern is exactly σ is,
by Möbius inversion on the partition lattice, Σ_{τ ≥ σ} μ(σ, τ) p_τ with p_τ the product
of power sums over the blocks of τ. Since P₁ = 0, only τ without singleton blocks
survive, so the coefficient of p_τ is c(τ) = Σ_{σ ≤ τ} μ(σ, τ) π_{|σ|}, computed here by
enumerating the set partitions (μ(σ, τ) = Π_blocks of τ (−1)^{m−1}(m−1)!, m the number
of σ-blocks merged into it).

With replacement S is a sum of B i.i.d. draws X with E X = 0, so its cumulants are
B times those of X: κ₂ = B m₂, κ₃ = B m₃, κ₄ = B(m₄ − 3m₂²), hence
E S⁴ = κ₄ + 3κ₂² = B m₄ + 3B(B−1) m₂², with m_k = P_k / N.
"""
from __future__ import annotations

import math
from typing import Any

import sympy as sp
from sympy.utilities.iterables import multiset_partitions

from ..core._refs import cites

__all__ = ["clip_factor", "moment_coefficients", "falling_ratio", "isotropic_diagonal_share",
           "minibatch_moments"]

N, B, D = sp.symbols("N B D", positive=True, integer=True)


@cites("mensch2025", "appendix A.4, eq. 118: s = E[min(ξ², 1)] = 1 − √(2/π) e^{−1/2}")
def clip_factor() -> sp.Expr:
    r"""s = E[min(ξ², 1)] = ∫ min(x², 1) φ(x) dx = 1 − √(2/π) e^{−1/2} (Mensch et al. (2025) eq. 118).

    Computed by integrating the standard normal density over |x| < 1 (weight x²) and
    |x| ≥ 1 (weight 1). Full-increment clipping at R = √(2δ) gives diffusion 2sδ
    instead of 2δ.

    Returns
    -------
    sympy.Expr

    References
    ----------
    Mensch et al. (Mensch et al. (2025)), appendix A.4, eqs. 117–119.
    """
    x = sp.Symbol("x", real=True)
    phi = sp.exp(-x**2 / 2) / sp.sqrt(2 * sp.pi)
    inner = sp.integrate(x**2 * phi, (x, -1, 1))
    outer = 2 * sp.integrate(phi, (x, 1, sp.oo))
    return sp.simplify(sp.expand_func(inner + outer))


def falling_ratio(k: int) -> sp.Expr:
    """π_k = B(B−1)⋯(B−k+1) / (N(N−1)⋯(N−k+1))."""
    return sp.ff(B, k) / sp.ff(N, k)


def _mobius_coefficient(block_sizes: tuple[int, ...]) -> sp.Expr:
    """c(τ) = Σ_{σ ≤ τ} μ(σ, τ) π_{|σ|} for τ with the given block sizes."""
    total = sp.Integer(0)
    # σ ≤ τ is a choice of a set partition inside each block of τ
    per_block: list[list[tuple[int, int]]] = []  # (number of σ-blocks m, μ-factor)
    for size in block_sizes:
        options = []
        for part in multiset_partitions(list(range(size))):
            m = len(part)
            options.append((m, (-1) ** (m - 1) * math.factorial(m - 1)))
        per_block.append(options)

    def rec(i: int, blocks: int, mu: int) -> None:
        nonlocal total
        if i == len(per_block):
            total += mu * falling_ratio(blocks)
            return
        for m, f in per_block[i]:
            rec(i + 1, blocks + m, mu * f)

    rec(0, 0, 1)
    return sp.factor(sp.simplify(total))


@cites("sgtune", "finite-population and i.i.d. moments of a batch sum to 4th order (derived)")
def moment_coefficients(replacement: bool = False) -> dict[str, sp.Expr]:
    r"""γ₂, γ₃, α₄, β₄ with E[S^{⊗2}] = γ₂P₂, E[S^{⊗3}] = γ₃P₃, E[S^{⊗4}] = α₄P₄ + β₄·(3 pairings of P₂⊗P₂).

    Parameters
    ----------
    replacement : bool
        B i.i.d. uniform indices (True) or a uniform B-subset (False, default).

    Returns
    -------
    dict
        ``second``, ``third``, ``fourth_single``, ``fourth_pair``: sympy expressions in N, B.

    References
    ----------
    Derived in sgtune (module docstring); numerically
    :func:`sgtune.theory.minibatch.minibatch_moment_coefficients`.
    """
    if replacement:
        # cumulants of a sum of B i.i.d. centred draws with moments m_k = P_k/N
        m2, m3, m4 = sp.symbols("m2 m3 m4")
        k2, k3, k4 = B * m2, B * m3, B * (m4 - 3 * m2**2)
        ES4 = sp.expand(k4 + 3 * k2**2)
        P2, P3, P4 = sp.symbols("P2 P3 P4")
        sub = {m2: P2 / N, m3: P3 / N, m4: P4 / N}
        ES2 = sp.expand((k2).subs(sub))
        ES3 = sp.expand((k3).subs(sub))
        ES4 = sp.expand(ES4.subs(sub))
        # in one dimension the three pairings collapse to 3 P₂², so β₄ = coeff(P₂²)/3
        return {"second": sp.factor(ES2.coeff(P2)), "third": sp.factor(ES3.coeff(P3)),
                "fourth_single": sp.factor(ES4.coeff(P4)), "fourth_pair": sp.factor(ES4.coeff(P2, 2) / 3)}
    return {"second": _mobius_coefficient((2,)), "third": _mobius_coefficient((3,)),
            "fourth_single": _mobius_coefficient((4,)), "fourth_pair": _mobius_coefficient((2, 2))}


@cites("sgtune", "finite-population and i.i.d. moments of a batch sum to 4th order (derived)")
def minibatch_moments() -> dict[str, Any]:
    """All eight coefficients (for ``sgtune derive minibatch-moments``)."""
    out: dict[str, Any] = {}
    for repl, tag in ((True, "with"), (False, "without")):
        for k, v in moment_coefficients(repl).items():
            out[f"{k}_{tag}_replacement"] = v
    return out


@cites("sgtune", "Gaussian isotropic noise: diagonal share of E‖M_SGLD‖²_F (docs/conventions.md)")
def isotropic_diagonal_share() -> dict[str, sp.Expr]:
    r"""Diagonal share of E‖M_SGLD‖²_F for ζ ~ N(0, gI) in D dimensions: 3/(D+2) at ∇U = 0.

    With r = ‖∇U‖²/g, share(r) = (3D + 4r) / (D(D+2) + 2(D+1)r); share(∞) = 2/(D+1).

    Returns
    -------
    dict
        ``share`` (in D and r), ``share_at_zero_gradient``, ``share_drift_dominated``.

    References
    ----------
    Mensch et al. (2025) eqs. 99 and 110 with Isserlis' theorem; docs/conventions.md.
    """
    r = sp.Symbol("r", nonnegative=True)
    g = sp.Symbol("g", positive=True)
    full = g**2 * (D**2 + 2 * D) + 2 * r * g * g * D + 2 * r * g * g   # ‖a‖² = r g
    diag = 3 * g**2 * D + 4 * r * g * g
    share = sp.simplify(diag / full)
    return {"share": share, "share_at_zero_gradient": sp.simplify(share.subs(r, 0)),
            "share_drift_dominated": sp.cancel(sp.limit(share, r, sp.oo))}
