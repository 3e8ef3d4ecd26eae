"""Exact Gaussian bias of SGLD under random reshuffling (RR) vs Robbins–Monro (RM) batching.

Model problem of Shaw & Whalley (Shaw & Whalley (2025), section 4, eq. 7), restated in
docs/corrections.md: data x_1..x_N, U(θ) = Σ_i (θ − x_i)²/(2σ²), target
N(x̄, c) with c = σ²/N.  With the rescaled step h = ηN/σ² (eq. 8) one step of
SGLD on batch b is

    θ' = θ − h(θ − x̄_b) + sqrt(2hc) ξ,    ξ ~ N(0, 1).

Write a = 1 − h, d = θ − x̄ and e = x̄_b − x̄ (the batch-mean error).  Then
d' = a d + h e + sqrt(2hc) ξ and every quantity below is in units of c, i.e.
``V`` is Var(d)/c and the relative variance error is ε = V − 1 (the means are
exact for every scheme).

Noise ratio ``v = Var(e)/c = N Var(x̄_b − x̄)/σ²``.  For a batch of B distinct
indices of a finite data set, Var(x̄_b) carries the finite-population factor
(N − B)/(N − 1); with σ² = s² (unbiased sample variance) this gives exactly
v = R − 1 (R = N/B), **not** v = R as the published derivation uses.  With
replacement v = (s²/σ²)(N − 1)/B.

RR (derived here, not quoted): within one epoch the batch means e_0..e_{R−1}
of a uniformly random partition are exchangeable with Σ_j e_j = 0, hence
Var(e_j) = v and Cov(e_i, e_j) = −v/(R − 1) for i ≠ j; different epochs are
independent.  Composing the k affine steps of an epoch,

    d_k = a^k d_0 + Σ_{j<k} a^{k−1−j} (h e_j + sqrt(2hc) ξ_j),

and imposing periodicity V_R = V_0 gives V_k for every position k = 0..R−1
(k steps of the current epoch already taken).  The epoch average averages ε_k
over k — it averages the terms (1 − a^k)², not the square of an average
(the second mistake of the published derivation).

All functions return sympy expressions in the symbols of :data:`SYMBOLS`.
"""
from __future__ import annotations

import functools

import sympy as sp

from ..core._refs import cites

__all__ = [
    "SYMBOLS",
    "within_epoch_covariance",
    "ula_variance",
    "rm_variance",
    "rr_variance_by_position",
    "rel_err_ula",
    "rel_err_rm",
    "rel_err_rr_position",
    "rel_err_rr_average",
    "rel_err_rr_position_compact",
    "noise_ratio_without_replacement",
    "noise_ratio_with_replacement",
    "published_rel_err_rm",
    "published_rel_err_rr_average",
    "series_h",
    "rr_rm",
]

h = sp.Symbol("h", positive=True)
R = sp.Symbol("R", positive=True, integer=True)
k = sp.Symbol("k", nonnegative=True, integer=True)
v = sp.Symbol("v", nonnegative=True)
N = sp.Symbol("N", positive=True, integer=True)
B = sp.Symbol("B", positive=True, integer=True)
sigma2 = sp.Symbol("sigma2", positive=True)
s2 = sp.Symbol("s2", positive=True)

#: the symbols used by every expression of this module
SYMBOLS: dict[str, sp.Symbol] = {"h": h, "R": R, "k": k, "v": v, "N": N, "B": B,
                                 "sigma2": sigma2, "s2": s2}

_j = sp.Symbol("j", nonnegative=True, integer=True)
_V0 = sp.Symbol("V0")
# internal symbols: a = 1 − h, X = a^k, Y = a^R.  Every variance below is a rational
# function of (a, X, Y, v, R) (a^{2k} = X², a^{2R} = Y²), which keeps sympy fast and exact.
_a = sp.Symbol("a", real=True, nonzero=True)
_X = sp.Symbol("X", real=True)
_Y = sp.Symbol("Y", real=True)
_n = sp.Symbol("n", positive=True, integer=True)


def _generic(expr: sp.Expr) -> sp.Expr:
    """Generic branch of a Piecewise produced by sp.summation (the branch valid for h ≠ 0)."""
    if isinstance(expr, sp.Piecewise):
        for value, cond in expr.args:
            if cond is sp.true:
                return value
        return expr.args[-1][0]
    return expr


def _geom(ratio: sp.Expr, n: sp.Expr) -> sp.Expr:
    """Σ_{j=0}^{n−1} ratio^j, by sympy's summation (generic branch, ratio ≠ 1)."""
    return _generic(sp.summation(ratio ** _j, (_j, 0, n - 1)))


def _to_h(expr: sp.Expr, X: sp.Expr | None = None) -> sp.Expr:
    """Back-substitute a = 1 − h, Y = (1 − h)^R and X = (1 − h)^k (or the given X)."""
    return expr.subs({_X: (1 - h) ** k if X is None else X, _Y: (1 - h) ** R}).subs(_a, 1 - h)


@cites("sgtune", "within-epoch covariance of RR batch means (docs/corrections.md)")
def within_epoch_covariance() -> dict[str, sp.Expr]:
    """Cov(e_i, e_j) = −Var(e)/(R − 1) for two batch means of one RR epoch (Shaw & Whalley (2025) §4, corrected).

    Derived from exchangeability and Σ_j e_j = 0: 0 = Var(Σ_j e_j) = R·v + R(R − 1)·γ.

    Returns
    -------
    dict
        ``variance`` (= v) and ``covariance`` (γ, both in units of c = σ²/N).
    """
    gamma = sp.Symbol("gamma")
    sol = sp.solve(sp.Eq(R * v + R * (R - 1) * gamma, 0), gamma)
    return {"variance": v, "covariance": sp.simplify(sol[0])}


@cites("shaw2025", "section 4, eq. (10) (ULA)")
def ula_variance() -> sp.Expr:
    """V = a²V + 2h (units of c): stationary variance of ULA, V = 2/(2 − h) (Shaw & Whalley (2025) §4, eq. 10)."""
    V = sp.Symbol("V")
    return sp.simplify(sp.solve(sp.Eq(V, (1 - h) ** 2 * V + 2 * h), V)[0])


@cites("shaw2025", "section 4, SGLD-RM (finite-population noise ratio corrected)")
def rm_variance() -> sp.Expr:
    """V = a²V + h²v + 2h (units of c): stationary variance of SGLD-RM, V = (2 + hv)/(2 − h) (Shaw & Whalley (2025) §4)."""
    V = sp.Symbol("V")
    return sp.factor(sp.solve(sp.Eq(V, (1 - h) ** 2 * V + h ** 2 * v + 2 * h), V)[0])


def _rr_map(P: sp.Expr, V0: sp.Expr) -> sp.Expr:
    """Var(d_n)/c after n steps of an RR epoch from Var(d_0)/c = V0, with P = a^n.

    d_n = a^n d_0 + Σ_{j<n} a^{n−1−j}(h e_j + sqrt(2hc) ξ_j); d_0 is independent of
    the epoch's batches.  The two geometric sums Σ_j a^{2(n−1−j)} and Σ_j a^{n−1−j}
    are computed by sympy's summation and written with P = a^n.
    """
    hh = 1 - _a
    cov = within_epoch_covariance()["covariance"]
    s2_ = _geom(_a ** 2, _n).subs(_a ** (2 * _n), P ** 2)
    s1 = _geom(_a, _n).subs(_a ** _n, P)
    if s2_.has(_n) or s1.has(_n):  # pragma: no cover - defensive
        raise RuntimeError("geometric sums did not reduce to powers a^n")
    # Var(Σ_j w_j e_j) = v Σw² + γ Σ_{i≠j} w_i w_j = v Σw² + γ((Σw)² − Σw²)
    noise = v * s2_ + cov * (s1 ** 2 - s2_)
    return P ** 2 * V0 + 2 * hh * s2_ + hh ** 2 * noise


@functools.lru_cache(maxsize=None)
def _rr_position_internal() -> sp.Expr:
    """V_k as a rational function of (a, X = a^k, Y = a^R, v, R)."""
    V0 = sp.solve(sp.Eq(_V0, _rr_map(_Y, _V0)), _V0)[0]
    return sp.factor(_rr_map(_X, sp.factor(V0)))


@cites("sgtune", "periodic stationary solution of SGLD-RR (corrects Shaw & Whalley (2025) §4)")
def rr_variance_by_position() -> sp.Expr:
    """V_k = a^{2k}V_0 + 2hΣa^{2j} + h²Var(Σ a^{k−1−j}e_j), V_0 = V_R (units of c; Shaw & Whalley (2025) §4, corrected).

    Returns
    -------
    sympy.Expr
        The periodic stationary variance at epoch position ``k`` (k steps of the
        epoch already taken), a function of ``h``, ``R``, ``k`` and ``v``.
    """
    return _to_h(_rr_position_internal())


@cites("shaw2025", "section 4 (ULA, eq. 10)")
def rel_err_ula() -> sp.Expr:
    """ε_ULA = V/c − 1 = h/(2 − h) (Shaw & Whalley (2025) §4, after eq. 10)."""
    return sp.simplify(ula_variance() - 1)


@cites("shaw2025", "section 4, SGLD-RM (finite-population noise ratio corrected)")
def rel_err_rm() -> sp.Expr:
    """ε_RM = h(1 + v)/(2 − h) with v = N Var(x̄_b − x̄)/σ² (Shaw & Whalley (2025) §4; v = R − 1 when σ² = s²)."""
    return sp.factor(rm_variance() - 1)


@cites("sgtune", "SGLD-RR at epoch position k (corrects Shaw & Whalley (2025) §4)")
def rel_err_rr_position() -> sp.Expr:
    """ε_k = V_k/c − 1 for SGLD-RR at epoch position k (Shaw & Whalley (2025) §4, corrected; see module docstring)."""
    return _to_h(sp.factor(_rr_position_internal() - 1))


def _average_over_k(expr: sp.Expr, inside_square: bool = False) -> sp.Expr:
    """Average an expression polynomial in X = a^k over k = 0..R−1.

    Correct route: expand in powers of X and replace X^m by ⟨a^{mk}⟩.  The
    ``inside_square`` route (the published mistake) replaces X itself by ⟨a^k⟩.
    """
    num, den = sp.fraction(sp.cancel(sp.together(expr)))
    if den.has(_X):  # pragma: no cover - defensive
        raise RuntimeError("denominator depends on a^k")
    if inside_square:
        return sp.factor(expr.subs(_X, _geom(_a, R).subs(_a ** R, _Y) / R))
    poly = sp.Poly(sp.expand(num), _X)
    out = sp.Integer(0)
    for (m,), coeff in poly.terms():
        mean = _geom(_a ** m, R).subs(_a ** (m * R), _Y ** m) / R if m else sp.Integer(1)
        out += coeff * mean
    return sp.factor(out / den)


@cites("sgtune", "SGLD-RR epoch average (corrects Shaw & Whalley (2025) §4)")
@functools.lru_cache(maxsize=None)
def rel_err_rr_average() -> sp.Expr:
    """ε̄ = (1/R) Σ_{k=0}^{R−1} ε_k, the average of the exact ε_k (Shaw & Whalley (2025) §4, corrected).

    ε_k is a polynomial in a^k (degree 2); each power a^{mk} is averaged
    separately, i.e. the terms (1 − a^k)² are averaged, never squared after
    averaging.
    """
    return _to_h(_average_over_k(_rr_position_internal() - 1))


@cites("sgtune", "noise ratio of a without-replacement batch (docs/corrections.md)")
def noise_ratio_without_replacement() -> sp.Expr:
    """v = N Var(x̄_b − x̄)/σ² = (s²/σ²)(N − B)/B = (s²/σ²)(R − 1) for B distinct indices (Shaw & Whalley (2025) §4, corrected)."""
    pop_var = s2 * (N - 1) / N
    var_e = pop_var / B * (N - B) / (N - 1)
    return sp.simplify(N * var_e / sigma2)


@cites("sgtune", "noise ratio of a with-replacement batch")
def noise_ratio_with_replacement() -> sp.Expr:
    """v = N Var(x̄_b − x̄)/σ² = (s²/σ²)(N − 1)/B for B indices drawn with replacement."""
    pop_var = s2 * (N - 1) / N
    return sp.simplify(N * (pop_var / B) / sigma2)


@cites("shaw2025", "section 4, SGLD-RM as published (v = R): WRONG, kept for comparison")
def published_rel_err_rm() -> sp.Expr:
    """ε_RM with the published noise ratio v = R instead of R − 1 (Shaw & Whalley (2025) §4; incorrect)."""
    return rel_err_rm().subs(v, R)


@cites("shaw2025", "section 4, SGLD-RR epoch average as published: WRONG, kept for comparison")
@functools.lru_cache(maxsize=None)
def published_rel_err_rr_average() -> sp.Expr:
    """ε̄ with v = R and the k-average put inside the square (Shaw & Whalley (2025) §4; incorrect, for comparison).

    Reconstruction of the published route (docs/corrections.md): ε_k written with
    X = a^k, then X replaced by its average ⟨a^k⟩ over k = 0..R−1, so that
    (1 − a^k)² becomes (1 − ⟨a^k⟩)², and the noise ratio set to v = R.
    """
    return _to_h(_average_over_k(_rr_position_internal() - 1, inside_square=True)).subs(v, R)


def series_h(expr: sp.Expr, order: int = 3) -> sp.Expr:
    """Taylor series of ``expr`` in h about 0, truncated before h**order (i.e. + O(h**order)).

    Each coefficient of h**i is factored, so e.g. the RR series reads
    h/2 + h²(1/4 + k(R − k)v/(R − 1)).
    """
    poly = sp.expand(sp.series(expr, h, 0, order).removeO())
    return sp.Add(*[sp.factor(sp.cancel(poly.coeff(h, i))) * h ** i for i in range(order)])


@cites("sgtune", "compact closed form of the SGLD-RR variance (equals rel_err_rr_position)")
def rel_err_rr_position_compact() -> sp.Expr:
    """ε_k = h/(2−h) + (v/(R−1))[hR/(2−h) − a^{2k}(1−a^R)/(1+a^R) − (1−a^k)²], a = 1 − h (Shaw & Whalley (2025) §4, corrected)."""
    a = 1 - h
    return h / (2 - h) + v / (R - 1) * (h * R / (2 - h) - a ** (2 * k) * (1 - a ** R) / (1 + a ** R)
                                        - (1 - a ** k) ** 2)


@cites("shaw2025", "section 4 (ULA, SGLD-RM, SGLD-RR; corrected)")
def rr_rm() -> dict[str, sp.Expr]:
    """Relative variance errors ε of ULA, SGLD-RM and SGLD-RR (Shaw & Whalley (2025) §4, corrected), exact and to O(h³).

    Returns
    -------
    dict
        Named expressions for ``sgtune derive rr-rm``.
    """
    v_wo = noise_ratio_without_replacement()
    v_w = noise_ratio_with_replacement()
    rm = rel_err_rm()
    rr_k = rel_err_rr_position()
    rr_avg = rel_err_rr_average()
    return {
        "noise_ratio_without_replacement": v_wo,
        "noise_ratio_with_replacement": v_w,
        "within_epoch_covariance": within_epoch_covariance()["covariance"],
        "eps_ula": rel_err_ula(),
        "eps_rm": rm,
        "eps_rm_without_replacement": sp.factor(rm.subs(v, v_wo)),
        "eps_rm_with_replacement": sp.factor(rm.subs(v, v_w)),
        "eps_rr_k": rr_k,
        "eps_rr_k_compact": rel_err_rr_position_compact(),
        "eps_rr_average": rr_avg,
        "series_eps_ula": series_h(rel_err_ula()),
        "series_eps_rm": series_h(rm),
        "series_eps_rr_k": series_h(rr_k),
        "series_eps_rr_average": series_h(rr_avg),
        "series_published_eps_rr_average": series_h(published_rel_err_rr_average()),
        "published_eps_rm_v_equals_R": published_rel_err_rm(),
        "published_eps_rr_average": published_rel_err_rr_average(),
    }
