"""Symbolic RR/RM derivation (Shaw & Whalley (2025) §4, corrected) against independent routes.

Routes: explicit R-step composition with concrete R (sympy matrices), exact
rational enumeration of every ordered partition of a tiny data set, the
numeric module (1e-12), and the O(h³) remainder of the series.
"""
from __future__ import annotations

import functools
import itertools
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from sgtune.symbolic import derive
from sgtune.symbolic import reshuffle as sym
from sgtune.theory import reshuffle as num

pytestmark = pytest.mark.symbolic

h, R, k, v = sym.h, sym.R, sym.k, sym.v

# the exact ε_k and ε̄ expressions, derived once, when a test first asks (≈ 2 s of CPU): not at collection, which
# every xdist worker does for every file, whichever worker runs this one
@functools.cache
def eps_k() -> sp.Expr:
    return sym.rel_err_rr_position()


@functools.cache
def eps_avg() -> sp.Expr:
    return sym.rel_err_rr_average()


def _explicit_rr_eps(r: int) -> list[sp.Expr]:
    """ε_k for concrete R = r by composing the r affine steps with an r×r batch covariance matrix."""
    a = 1 - h
    cov_e = sp.Matrix(r, r, lambda i, j: v if i == j else -v / (r - 1))
    V0 = sp.Symbol("V0")

    def var_after(n: int, start: sp.Expr) -> sp.Expr:
        w = sp.Matrix([[a ** (n - 1 - j) if j < n else 0 for j in range(r)]])
        noise = (w * cov_e * w.T)[0, 0]
        lang = sum(a ** (2 * (n - 1 - j)) for j in range(n))
        return a ** (2 * n) * start + h ** 2 * noise + 2 * h * lang

    v0 = sp.solve(sp.Eq(V0, var_after(r, V0)), V0)[0]
    return [var_after(kk, v0) - 1 for kk in range(r)]


@pytest.mark.parametrize("r", [2, 3, 5])
def test_rr_position_matches_explicit_composition(r: int) -> None:
    explicit = _explicit_rr_eps(r)
    for kk in range(r):
        diff = sp.cancel(sp.expand(eps_k().subs({R: r, k: kk}) - explicit[kk]))
        assert diff == 0, (r, kk, diff)


@pytest.mark.parametrize("r", [2, 3, 5])
def test_rr_average_is_average_of_positions(r: int) -> None:
    explicit = _explicit_rr_eps(r)
    diff = sp.cancel(sp.expand(eps_avg().subs(R, r) - sum(explicit) / r))
    assert diff == 0


def test_compact_form_equals_derivation() -> None:
    compact = sym.rel_err_rr_position_compact()
    for r, kk in [(2, 1), (4, 0), (4, 3), (7, 2)]:
        assert sp.cancel(sp.expand(compact.subs({R: r, k: kk}) - eps_k().subs({R: r, k: kk}))) == 0


def test_ula_and_rm_solve_their_recursions() -> None:
    V = sym.rm_variance()
    assert sp.simplify(V - ((1 - h) ** 2 * V + h ** 2 * v + 2 * h)) == 0
    assert sp.simplify(sym.rel_err_ula() - h / (2 - h)) == 0


def test_noise_ratios_and_within_epoch_covariance_by_enumeration() -> None:
    # exact rational arithmetic over every ordered partition of N = 6 points into R = 3 batches of 2
    x = [Fraction(p) for p in (0, 1, 3, 4, 8, 13)]
    n, b = 6, 2
    r = n // b
    xbar = sum(x) / n
    s2 = sum((xi - xbar) ** 2 for xi in x) / (n - 1)
    c = s2 / n  # target variance with σ² = s²
    var0 = cov01 = Fraction(0)
    perms = list(itertools.permutations(range(n)))
    for p in perms:
        e0 = sum(x[i] for i in p[0:2]) / b - xbar
        e1 = sum(x[i] for i in p[2:4]) / b - xbar
        var0 += e0 * e0
        cov01 += e0 * e1
    var0 /= len(perms)
    cov01 /= len(perms)
    v_sym = sym.noise_ratio_without_replacement().subs({sym.N: n, sym.B: b, sym.s2: 1, sym.sigma2: 1})
    assert sp.Rational(var0.numerator, var0.denominator) == v_sym * sp.Rational(c.numerator, c.denominator)
    assert v_sym == r - 1  # not R (the published value)
    gamma = sym.within_epoch_covariance()["covariance"].subs({v: v_sym, R: r})
    assert sp.Rational(cov01.numerator, cov01.denominator) == gamma * sp.Rational(c.numerator, c.denominator)
    # with replacement: every ordered pair of indices
    var_w = sum((sum(x[i] for i in t) / b - xbar) ** 2 for t in itertools.product(range(n), repeat=b))
    var_w /= n ** b
    v_w = sym.noise_ratio_with_replacement().subs({sym.N: n, sym.B: b, sym.s2: 1, sym.sigma2: 1})
    assert sp.Rational(var_w.numerator, var_w.denominator) == v_w * sp.Rational(c.numerator, c.denominator)


def _mp(expr: sp.Expr, subs: dict) -> float:
    return float(sp.N(expr.subs(subs), 40))


@pytest.mark.parametrize("hv", [0.013, 0.3, 0.99, 1.0, 1.37, 1.9])
@pytest.mark.parametrize("r", [1, 2, 4, 9])
def test_symbolic_matches_numeric(hv: float, r: int) -> None:
    rho = 0.7  # σ² ≠ s²
    hq = sp.Rational(hv)
    eps_num = num.rel_err_rr_position(hv, r, rho)
    if r == 1:
        # B = N: no gradient noise, RR is ULA (the v/(R−1) form is 0/0 there)
        assert np.allclose(eps_num, hv / (2 - hv), rtol=1e-12, atol=0)
        return
    vv = sp.Rational(rho).limit_denominator(10) * (r - 1)
    for kk in range(r):
        ref = _mp(eps_k(), {h: hq, R: r, k: kk, v: vv})
        assert eps_num[kk] == pytest.approx(ref, rel=1e-12, abs=1e-15)
    ref_avg = _mp(eps_avg(), {h: hq, R: r, v: vv})
    assert num.rel_err_rr_average(hv, r, rho) == pytest.approx(ref_avg, rel=1e-12, abs=1e-15)
    ref_rm = _mp(sym.rel_err_rm(), {h: hq, v: vv})
    assert num.rel_err_rm(hv, float(vv)) == pytest.approx(ref_rm, rel=1e-12)
    assert num.rel_err_ula(hv) == pytest.approx(_mp(sym.rel_err_ula(), {h: hq}), rel=1e-12)


def test_reshuffle_bias_matches_symbolic_for_data() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=20)
    n, b, hv, sig2 = 20, 4, 0.45, 1.3
    res = num.reshuffle_bias(x, b, hv, sigma2=sig2)
    s2 = float(np.var(x, ddof=1))
    subs = {sym.N: n, sym.B: b, sym.s2: s2, sym.sigma2: sig2}
    v_wo = float(sym.noise_ratio_without_replacement().subs(subs))
    v_w = float(sym.noise_ratio_with_replacement().subs(subs))
    assert res.noise_ratio == pytest.approx(v_wo, rel=1e-12)
    assert res.noise_ratio_with_replacement == pytest.approx(v_w, rel=1e-12)
    f = sp.lambdify((h, v), sym.rel_err_rm(), "mpmath")
    assert res.rm_rel_err == pytest.approx(float(f(hv, v_wo)), rel=1e-12)
    assert res.rm_with_replacement_rel_err == pytest.approx(float(f(hv, v_w)), rel=1e-12)
    fk = sp.lambdify((h, R, k, v), eps_k(), "mpmath")
    for kk in range(n // b):
        assert res.rr_by_position_rel_err[kk] == pytest.approx(float(fk(hv, n // b, kk, v_wo)), rel=1e-12)


def test_series_coefficients_match_numeric_leading_coefficients() -> None:
    x = np.arange(12.0) ** 1.5
    res = num.reshuffle_bias(x, 3, 0.1, sigma2=2.0)
    r = res.n_batches
    subs = {R: r, v: res.noise_ratio}
    ser_avg = sym.series_h(eps_avg())
    assert [float(ser_avg.coeff(h, i).subs(subs)) for i in (1, 2)] == pytest.approx(
        res.leading_coefficients["rr_average"], rel=1e-12)
    ser_k = sym.series_h(eps_k())
    for kk in range(r):
        got = [float(ser_k.coeff(h, i).subs({**subs, k: kk})) for i in (1, 2)]
        assert got == pytest.approx(res.leading_coefficients["rr_by_position"][kk], rel=1e-12)
    ser_rm = sym.series_h(sym.rel_err_rm())
    assert [float(ser_rm.coeff(h, i).subs(subs)) for i in (1, 2)] == pytest.approx(
        res.leading_coefficients["rm"], rel=1e-12)


def test_series_remainder_is_third_order() -> None:
    # |exact − series| / h³ must stay bounded as h → 0 (it tends to the h³ coefficient)
    subs = {R: 5, k: 2, v: 4}
    for expr in (eps_k(), eps_avg(), sym.rel_err_rm()):
        ser = sym.series_h(expr)
        third = sp.series(expr.subs(subs), h, 0, 4).removeO().coeff(h, 3)
        for hv in (sp.Rational(1, 1000), sp.Rational(1, 10000)):
            rem = (expr - ser).subs(subs).subs(h, hv)
            assert float(rem / hv ** 3) == pytest.approx(float(third), rel=2e-2)  # next term is O(h⁴)/h³ = O(h)


def test_rm_noise_is_first_order_rr_average_second_order() -> None:
    ser_rm = sym.series_h(sym.rel_err_rm() - sym.rel_err_ula())
    ser_rr = sym.series_h(eps_avg() - sym.rel_err_ula())
    assert sp.simplify(ser_rm.coeff(h, 1) - v / 2) == 0
    assert ser_rr.coeff(h, 1) == 0
    assert sp.simplify(ser_rr.coeff(h, 2) - v * (R + 1) / 6) == 0


def test_published_formulas_differ_from_exact() -> None:
    """Documents the two mistakes of the published derivation (docs/corrections.md)."""
    r = 8
    # (1) v = R instead of R − 1: the RM error is off by exactly h/(2 − h), i.e. ULA's error
    exact_rm = sym.rel_err_rm().subs(v, R - 1)
    assert sp.simplify(sym.published_rel_err_rm() - exact_rm - h / (2 - h)) == 0
    # (2) average inside the square (and v = R): h² coefficient R(R+1)/4 + 1/4 instead of (R²−1)/6 + 1/4
    pub = sym.series_h(sym.published_rel_err_rr_average()).coeff(h, 2)
    exact = sym.series_h(eps_avg().subs(v, R - 1)).coeff(h, 2)
    assert sp.cancel(pub - (R ** 2 + R + 1) / 4) == 0
    assert sp.cancel(exact - (sp.Rational(1, 4) + (R ** 2 - 1) / 6)) == 0
    assert float(pub.subs(R, r)) != pytest.approx(float(exact.subs(R, r)), rel=1e-3)
    # and the exact average equals the explicit average of the composed positions, the published one not
    explicit = sum(_explicit_rr_eps(3)) / 3
    pub3 = sym.published_rel_err_rr_average().subs(R, 3)
    at = {h: sp.Rational(1, 10)}
    assert sp.nsimplify(eps_avg().subs({R: 3, v: 2}).subs(at) - explicit.subs(v, 2).subs(at)) == 0
    assert sp.nsimplify(pub3.subs(at) - explicit.subs(v, 3).subs(at)) != 0


def test_derive_registry_entry() -> None:
    exprs = derive("rr-rm")
    for key in ("eps_ula", "eps_rm", "eps_rr_k", "eps_rr_average", "series_eps_rr_average",
                "published_eps_rr_average", "within_epoch_covariance"):
        assert key in exprs
    assert sp.simplify(exprs["within_epoch_covariance"] + v / (R - 1)) == 0
