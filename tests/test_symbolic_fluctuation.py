"""sympy closed forms (sgtune.symbolic.fluctuation) vs the numeric solver, at SYMBOLIC_RTOL = 1e-12."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from sgtune.symbolic import DERIVATIONS, derive
from sgtune.symbolic.fluctuation import gaul, hfhr, nld
from sgtune.theory.fluctuation import solve_fluctuation_gaul, solve_fluctuation_hfhr, solve_fluctuation_nld
from tests._tolerances import SYMBOLIC_RTOL

pytestmark = pytest.mark.symbolic


def _num(expr: sp.Expr, subs: dict) -> float:  # type: ignore[type-arg]
    return float(sp.N(expr.subs(subs), 30))


def test_registered() -> None:
    for name in ("nld", "hfhr", "gaul"):
        assert DERIVATIONS[name].startswith("sgtune.symbolic.fluctuation:")
        assert derive(name)


def test_nld_d2_explicit_matches_numeric() -> None:
    e = nld()
    a11, a12, a22, l1, l2, j, d1, d2 = sp.symbols("a11 a12 a22 l1 l2 j d1 d2")
    vals = {"a11": 2.0, "a12": 0.3, "a22": 1.1, "l1": 0.7, "l2": -1.2, "j": 1.6, "d1": 0.8, "d2": 1.7}
    subs = {s: vals[str(s)] for e_ in e.values() for s in getattr(e_, "free_symbols", set()) if str(s) in vals}
    a = np.array([[2.0, 0.3], [0.3, 1.1]])
    res = solve_fluctuation_nld(a, [0.7, -1.2], [[0.0, 1.6], [-1.6, 0.0]], np.diag([0.8, 1.7]))
    np.testing.assert_allclose(_num(e["sigma2_d2"], subs), res.sigma2, rtol=SYMBOLIC_RTOL)
    np.testing.assert_allclose(_num(e["sigma2_reversible_d2"], subs), res.sigma2_reversible, rtol=SYMBOLIC_RTOL)
    np.testing.assert_allclose(_num(e["ratio_d2"], subs), res.ratio, rtol=SYMBOLIC_RTOL)
    coef = np.array([float(sp.N(c.subs(subs), 30)) for c in e["poisson_coefficient_d2"]])
    np.testing.assert_allclose(coef, res.poisson_coefficient, rtol=SYMBOLIC_RTOL)
    # D = I: the factor 1/(1 + j²)
    res_i = solve_fluctuation_nld(a, [0.7, -1.2], [[0.0, 1.6], [-1.6, 0.0]])
    np.testing.assert_allclose(_num(e["ratio_d2_identity"], subs), res_i.ratio, rtol=SYMBOLIC_RTOL)


def test_nld_general_matrix_form_matches_numeric(rng: np.random.Generator) -> None:
    e = nld()
    n = 3
    b = rng.standard_normal((n, n))
    a = b @ b.T + np.eye(n)
    dm = np.diag([0.5, 1.0, 2.0])
    jm = np.array([[0.0, 1.0, -0.4], [-1.0, 0.0, 0.7], [0.4, -0.7, 0.0]])
    ell = rng.standard_normal(n)
    syms = {str(s): s for s in e["sigma2"].free_symbols}
    subs = {syms["A"]: sp.Matrix(a), syms["D"]: sp.Matrix(dm), syms["J"]: sp.Matrix(jm),
            syms["l"]: sp.Matrix(ell)}
    res = solve_fluctuation_nld(a, ell, jm, dm)
    val = float(sp.Matrix(e["sigma2"].subs(subs).doit())[0, 0])
    np.testing.assert_allclose(val, res.sigma2, rtol=SYMBOLIC_RTOL)
    val_r = float(sp.Matrix(e["sigma2_reversible"].subs(subs).doit())[0, 0])
    np.testing.assert_allclose(val_r, res.sigma2_reversible, rtol=SYMBOLIC_RTOL)


@pytest.mark.parametrize(("alpha", "gamma"), [(1.0, 1.0), (0.3, 4.0)])
def test_hfhr_matches_numeric(rng: np.random.Generator, alpha: float, gamma: float) -> None:
    e = hfhr()
    a = np.diag([1.5, 0.5]) + 0.2
    ell = rng.standard_normal(2)
    w = np.linalg.solve(a, ell)
    subs = {sp.Symbol("alpha", positive=True): alpha, sp.Symbol("gamma", positive=True): gamma,
            sp.Symbol("w2", positive=True): float(w @ w)}
    res = solve_fluctuation_hfhr(a, ell, alpha, gamma)
    np.testing.assert_allclose(_num(e["sigma2"], subs), res.sigma2, rtol=SYMBOLIC_RTOL)
    np.testing.assert_allclose(_num(e["sigma2_reversible"], subs), res.sigma2_reversible, rtol=SYMBOLIC_RTOL)
    np.testing.assert_allclose(_num(e["ratio"], subs), res.ratio, rtol=SYMBOLIC_RTOL)
    # Poisson solution a = (γw, w)/(1+αγ) on (x, v)
    coef = np.r_[_num(e["poisson_coefficient_x"], subs) * w, _num(e["poisson_coefficient_v"], subs) * w]
    np.testing.assert_allclose(coef, res.poisson_coefficient, rtol=SYMBOLIC_RTOL)


def test_gaul_scalar_and_matrix_forms_match_numeric(rng: np.random.Generator) -> None:
    e = gaul()
    aa, gamma = 1.2, 1.5
    # scalar (d = 1) derivation
    a, ell, c = np.array([[1.7]]), np.array([0.9]), 2.5
    res = solve_fluctuation_gaul(a, ell, aa, gamma, [[c]])
    sa, sg, sc, sw = (sp.Symbol("a", positive=True), sp.Symbol("gamma", positive=True),
                      sp.Symbol("c", positive=True), sp.Symbol("w", real=True))
    subs = {sa: aa, sg: gamma, sc: c, sw: 0.9 / 1.7}
    np.testing.assert_allclose(_num(e["sigma2_scalar"], subs), res.sigma2, rtol=SYMBOLIC_RTOL)
    np.testing.assert_allclose(_num(e["sigma2_reversible_scalar"], subs), res.sigma2_reversible, rtol=SYMBOLIC_RTOL)
    np.testing.assert_allclose(_num(e["ratio_scalar"], subs), res.ratio, rtol=SYMBOLIC_RTOL)
    # matrix form with a non-diagonal C, d = 3
    n = 3
    b = rng.standard_normal((n, n))
    amat = b @ b.T + np.eye(n)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    cmat = q @ np.diag([0.7, 1.0, 1.8]) @ q.T
    cmat = 0.5 * (cmat + cmat.T)
    ellv = rng.standard_normal(n)
    res = solve_fluctuation_gaul(amat, ellv, aa, gamma, cmat)
    w = np.linalg.solve(amat, ellv)
    syms = {str(s): s for s in e["sigma2_reversible"].free_symbols}
    dsym = sp.Symbol("d", integer=True, positive=True)
    msubs = {dsym: n, syms["C"]: sp.Matrix(cmat), syms["w"]: sp.Matrix(w), syms["a"]: aa, syms["gamma"]: gamma}
    val = float(sp.Matrix(e["sigma2"].subs(msubs).doit())[0, 0])
    val_r = float(sp.Matrix(e["sigma2_reversible"].subs(msubs).doit())[0, 0])
    np.testing.assert_allclose(val, res.sigma2, rtol=SYMBOLIC_RTOL)
    np.testing.assert_allclose(val_r, res.sigma2_reversible, rtol=SYMBOLIC_RTOL)


def test_gaul_reduces_to_hfhr_symbolically() -> None:
    g, h = gaul(), hfhr()
    a, gamma, c, w = sp.symbols("a gamma c w", positive=True)
    alpha, w2 = sp.Symbol("alpha", positive=True), sp.Symbol("w2", positive=True)
    gs = g["ratio_scalar"].subs({sp.Symbol("c", positive=True): 1, sp.Symbol("a", positive=True): alpha})
    assert sp.simplify(gs - h["ratio"]) == 0
