"""Closed forms of the fluctuation constants of NLD, HFHR and GAUL (the GNLD paper (2025), Sec. 5), derived with sympy.

Each derivation actually solves the Poisson equation −𝓛φ = ℓᵀz for a linear φ = aᵀz
(i.e. M(D − Q)a = ℓ, Prop. 5.2) with sympy's linear solver and evaluates σ² = 2aᵀDa; nothing
is typed in from the paper. The functions take no required arguments and return a dict of
named sympy expressions (``sgtune derive nld|hfhr|gaul``).
"""
from __future__ import annotations

import sympy as sp

from ..core._refs import cites

__all__ = ["nld", "hfhr", "gaul", "poisson_sigma2"]


def poisson_sigma2(hessian: sp.Matrix, diffusion: sp.Matrix, antisymmetric: sp.Matrix,
                   observable: sp.Matrix) -> tuple[sp.Matrix, sp.Expr]:
    """Solve M(D − Q)a = ℓ symbolically and return (a, σ² = 2aᵀDa), simplified."""
    n = hessian.shape[0]
    a = sp.Matrix(sp.symbols(f"a0:{n}"))
    sol = sp.solve(list(hessian * (diffusion - antisymmetric) * a - observable), list(a), dict=True)[0]
    a_sol = a.subs(sol).applyfunc(sp.simplify)
    sig2 = sp.simplify((2 * a_sol.T * diffusion * a_sol)[0, 0])
    return a_sol, sig2


@cites("gnld2025", "Sec. 5.2, Eqs. (5.5)-(5.7)")
def nld() -> dict[str, sp.Expr]:
    r"""NLD: φ(x) = aᵀx with A(D − J)a = ℓ; σ² = 2wᵀ(D + JᵀD⁻¹J)⁻¹w, and the explicit d = 2 case (the GNLD paper (2025), Eqs. (5.5)-(5.7)).

    General d (matrix symbols): ``poisson_coefficient``, ``sigma2``, ``sigma2_reversible``.
    Explicit d = 2 with A = [[a11, a12], [a12, a22]], ℓ = (l1, l2), J = [[0, j], [−j, 0]] and
    D = diag(d1, d2): ``sigma2_d2``, ``sigma2_reversible_d2``, ``ratio_d2``, and for D = I the
    scalar factor ``ratio_d2_identity`` = 1/(1 + j²) (derived, not typed in).

    Returns
    -------
    dict
        Named sympy expressions.
    """
    d = sp.Symbol("d", integer=True, positive=True)
    amat = sp.MatrixSymbol("A", d, d)
    dmat = sp.MatrixSymbol("D", d, d)
    jmat = sp.MatrixSymbol("J", d, d)
    ell = sp.MatrixSymbol("l", d, 1)
    w = amat.I * ell
    out: dict[str, sp.Expr] = {
        "poisson_coefficient": (dmat - jmat).I * amat.I * ell,
        "sigma2": 2 * w.T * (dmat + jmat.T * dmat.I * jmat).I * w,
        "sigma2_reversible": 2 * w.T * dmat.I * w,
    }
    a11, a12, a22, l1, l2, j = sp.symbols("a11 a12 a22 l1 l2 j", real=True)
    d1, d2 = sp.symbols("d1 d2", positive=True)
    a2 = sp.Matrix([[a11, a12], [a12, a22]])
    l2v = sp.Matrix([l1, l2])
    j2 = sp.Matrix([[0, j], [-j, 0]])
    dd = sp.diag(d1, d2)
    a_sol, s2 = poisson_sigma2(a2, dd, j2, l2v)
    _, s2r = poisson_sigma2(a2, dd, sp.zeros(2, 2), l2v)
    out["poisson_coefficient_d2"] = a_sol
    out["sigma2_d2"] = sp.factor(s2)
    out["sigma2_reversible_d2"] = sp.factor(s2r)
    out["ratio_d2"] = sp.factor(sp.simplify(s2 / s2r))
    out["ratio_d2_identity"] = sp.factor(sp.simplify((s2 / s2r).subs({d1: 1, d2: 1})))
    return out


@cites("gnld2025", "Sec. 5.3, Cor. 5.7, Eqs. (5.8)-(5.13)")
def hfhr() -> dict[str, sp.Expr]:
    r"""HFHR: φ(x, v) = (γwᵀx + wᵀv)/(1+αγ); σ² = 2γ/(1+αγ)|w|², σ_R² = (2/α)|w|², ratio αγ/(1+αγ) (the GNLD paper (2025), Cor. 5.7).

    The blocks of D = diag(αI, γI), Q = [[0, −I], [I, 0]] and M = diag(A, I) act as scalars on
    each coordinate of w = A⁻¹ℓ, so the derivation is done per coordinate (b = (w, 0)) and
    summed: |w|² is the symbol ``w2``.

    Returns
    -------
    dict
        ``poisson_coefficient_x``, ``poisson_coefficient_v`` (coefficients of w), ``sigma2``,
        ``sigma2_reversible``, ``ratio``.
    """
    alpha, gamma = sp.symbols("alpha gamma", positive=True)
    w, w2 = sp.symbols("w w2", positive=True)
    dmat = sp.diag(alpha, gamma)
    qmat = sp.Matrix([[0, -1], [1, 0]])
    # per coordinate: M = I on (x-coordinate of b, v), ℓ = b = (w, 0) since M⁻¹ℓ = (A⁻¹ℓ, 0)
    a_sol, s2 = poisson_sigma2(sp.eye(2), dmat, qmat, sp.Matrix([w, 0]))
    _, s2r = poisson_sigma2(sp.eye(2), dmat, sp.zeros(2, 2), sp.Matrix([w, 0]))
    s2 = sp.simplify(s2.subs(w ** 2, w2))
    s2r = sp.simplify(s2r.subs(w ** 2, w2))
    return {
        "poisson_coefficient_x": sp.simplify(a_sol[0] / w),
        "poisson_coefficient_v": sp.simplify(a_sol[1] / w),
        "sigma2": sp.factor(s2),
        "sigma2_reversible": sp.factor(s2r),
        "ratio": sp.factor(sp.simplify(s2 / s2r)),
    }


@cites("gnld2025", "Sec. 5.4, Cor. 5.10, Eqs. (5.14)-(5.16)")
def gaul() -> dict[str, sp.Expr]:
    r"""GAUL: σ² = 2wᵀSchur(K)⁻¹w = 2γ/(1+aγ) wᵀC⁻¹w, σ_R² = 2wᵀ(aC − (C−I)²/(4γ))⁻¹w (the GNLD paper (2025), Cor. 5.10).

    K = [[aC, −I], [C, γI]], D = sym K, Q = K − D. All blocks are polynomials in C, so they
    commute and the block algebra can be done with a scalar c (an eigenvalue of C, w the
    corresponding component of A⁻¹ℓ); the matrix statements follow by the functional calculus:
    ``schur_drift`` = aC + C/γ, ``schur_diffusion`` = aC − (C−I)²/(4γ). The scalar derivation
    solves the Poisson equation exactly; the matrix forms use ``C`` and ``w`` as matrix symbols.

    Returns
    -------
    dict
        Scalar (per eigen-direction): ``poisson_coefficient_x``, ``poisson_coefficient_v``,
        ``sigma2_scalar``, ``sigma2_reversible_scalar``, ``ratio_scalar``, ``schur_drift_scalar``,
        ``schur_diffusion_scalar``; matrix forms: ``sigma2``, ``sigma2_reversible``.
    """
    a, gamma, c = sp.symbols("a gamma c", positive=True)
    w = sp.Symbol("w", real=True)
    kmat = sp.Matrix([[a * c, -1], [c, gamma]])
    dmat = (kmat + kmat.T) / 2
    qmat = (kmat - kmat.T) / 2
    a_sol, s2 = poisson_sigma2(sp.eye(2), dmat, qmat, sp.Matrix([w, 0]))
    _, s2r = poisson_sigma2(sp.eye(2), dmat, sp.zeros(2, 2), sp.Matrix([w, 0]))
    schur_k = sp.simplify(kmat[0, 0] - kmat[0, 1] * kmat[1, 0] / kmat[1, 1])
    schur_d = sp.simplify(dmat[0, 0] - dmat[0, 1] * dmat[1, 0] / dmat[1, 1])
    d = sp.Symbol("d", integer=True, positive=True)
    cm = sp.MatrixSymbol("C", d, d)
    wm = sp.MatrixSymbol("w", d, 1)
    eye = sp.Identity(d)
    return {
        "poisson_coefficient_x": sp.simplify(a_sol[0] / w),
        "poisson_coefficient_v": sp.simplify(a_sol[1] / w),
        "schur_drift_scalar": sp.factor(schur_k),
        "schur_diffusion_scalar": sp.factor(schur_d),
        "sigma2_scalar": sp.factor(s2),
        "sigma2_reversible_scalar": sp.factor(s2r),
        "ratio_scalar": sp.factor(sp.simplify(s2 / s2r)),
        "sigma2": 2 * gamma / (1 + a * gamma) * wm.T * cm.I * wm,
        "sigma2_reversible": 2 * wm.T * (a * cm - (cm - eye) ** 2 / (4 * gamma)).I * wm,
    }
