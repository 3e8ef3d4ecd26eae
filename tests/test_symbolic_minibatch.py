"""Tests of sgtune.symbolic.minibatch: the clip factor and the batch-sum moment coefficients."""
from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
from click.testing import CliRunner
from scipy import integrate
from scipy.stats import norm

from sgtune.cli import main
from sgtune.symbolic import derive
from sgtune.symbolic.minibatch import B, D, N, clip_factor, isotropic_diagonal_share, moment_coefficients
from sgtune.theory.minibatch import gaussian_minibatch_error, minibatch_moment_coefficients

pytestmark = pytest.mark.symbolic


def test_clip_factor_closed_form_and_quadrature():
    s = clip_factor()
    # the closed form printed in Mensch et al. (2025) eq. (118)
    assert sp.simplify(s - (1 - sp.sqrt(2 / sp.pi) * sp.exp(-sp.Rational(1, 2)))) == 0
    # independent route: adaptive quadrature of E[min(ξ², 1)] (quad error estimate < 1e-12)
    inner, _ = integrate.quad(lambda x: x * x * norm.pdf(x), -1, 1)
    val = inner + 2 * norm.sf(1.0)
    assert float(s) == pytest.approx(val, abs=1e-12)
    assert float(s) == pytest.approx(0.516, abs=5e-4)   # the paper's rounded value


@pytest.mark.mc
def test_clip_factor_monte_carlo():
    """Var(clip(ξ; 1)) = s: full-increment clipping shrinks the diffusion to 2sδ (A.4)."""
    rng = np.random.default_rng(1)
    k = 1_000_000
    x = np.clip(rng.standard_normal(k), -1, 1) ** 2
    z = (x.mean() - float(clip_factor())) / (x.std(ddof=1) / math.sqrt(k))
    assert abs(z) < norm.ppf(1 - 1e-3 / 2)


def _enumerated_coefficients(n: int, b: int, replacement: bool) -> tuple[Fraction, ...]:
    """γ₂, γ₃, α₄, β₄ recovered from exact rational enumeration of two populations.

    (A zero-sum population with three non-zero values always has P₄ = P₂²/2 — Newton —
    so the second population needs four.)

    Scalar population x: E S² = γ₂P₂, E S³ = γ₃P₃, E S⁴ = α₄P₄ + 3β₄P₂²; two different
    populations give two equations for (α₄, β₄).
    """
    pops = [[Fraction(v) for v in p] for p in ([3, -1, -2] + [0] * (n - 3), [3, -1, -1, -1] + [0] * (n - 4))]
    pops = [[v - sum(p) / n for v in p] for p in pops]
    batches = list(itertools.product(range(n), repeat=b) if replacement else itertools.combinations(range(n), b))
    rows = []
    for p in pops:
        e = [sum(sum(p[i] for i in bt) ** k for bt in batches) / len(batches) for k in (2, 3, 4)]
        P = {k: sum(v**k for v in p) for k in (2, 3, 4)}
        rows.append((e, P))
    (e, P), (e2, P2) = rows
    g2 = e[0] / P[2]
    g3 = e[1] / P[3] if P[3] != 0 else None
    # solve α P4 + 3β P2² = E S⁴ for both populations
    a11, a12, r1 = P[4], 3 * P[2] ** 2, e[2]
    a21, a22, r2 = P2[4], 3 * P2[2] ** 2, e2[2]
    det = a11 * a22 - a12 * a21
    alpha = (r1 * a22 - a12 * r2) / det
    beta = (a11 * r2 - a21 * r1) / det
    return g2, g3, alpha, beta


@pytest.mark.parametrize("replacement", [True, False])
def test_moment_coefficients_match_enumeration_exactly(replacement):
    coeffs = moment_coefficients(replacement)
    for n in (4, 5, 6):
        for b in range(1, (5 if replacement else n + 1)):
            g2, g3, alpha, beta = _enumerated_coefficients(n, b, replacement)
            sub = {N: n, B: b}
            assert sp.nsimplify(coeffs["second"].subs(sub)) == sp.Rational(g2.numerator, g2.denominator)
            assert sp.nsimplify(coeffs["third"].subs(sub)) == sp.Rational(g3.numerator, g3.denominator)
            assert sp.nsimplify(coeffs["fourth_single"].subs(sub)) == sp.Rational(alpha.numerator, alpha.denominator)
            assert sp.nsimplify(coeffs["fourth_pair"].subs(sub)) == sp.Rational(beta.numerator, beta.denominator)
            num = minibatch_moment_coefficients(n, b, replacement=replacement)
            assert (num.second, num.third, num.fourth_single, num.fourth_pair) == pytest.approx(
                tuple(float(v) for v in (g2, g3, alpha, beta)), rel=1e-15, abs=1e-17)


def test_without_replacement_reduces_to_known_cases():
    c = moment_coefficients(False)
    # second order: the finite-population factor (N−B)/(N−1) times B/N
    assert sp.simplify(c["second"] - B * (N - B) / (N * (N - 1))) == 0
    # B = N: the batch sum is Σ d_i = 0, every moment vanishes
    assert all(sp.simplify(v.subs(B, N)) == 0 for v in c.values())
    # N → ∞ at fixed B: sampling without replacement looks like sampling with replacement
    w = moment_coefficients(True)
    for k in c:
        assert sp.limit(c[k] / w[k], N, sp.oo) == 1


def test_isotropic_share_symbolic_matches_numeric():
    sh = isotropic_diagonal_share()
    assert sp.simplify(sh["share_at_zero_gradient"] - 3 / (D + 2)) == 0
    assert sp.simplify(sh["share_drift_dominated"] - 2 / (D + 1)) == 0
    r = sp.Symbol("r", nonnegative=True)
    for dim, rr in ((3, 0.0), (7, 2.5), (20, 40.0)):
        a = np.zeros(dim)
        a[0] = math.sqrt(rr * 1.3)
        num = gaussian_minibatch_error(1.3 * np.eye(dim), a).diagonal_share
        assert float(sh["share"].subs({D: dim, r: rr})) == pytest.approx(num, rel=1e-13)


def test_derive_cli_clip_factor():
    res = CliRunner().invoke(main, ["derive", "clip-factor"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert float(sp.sympify(doc["expression"])) == pytest.approx(1 - math.sqrt(2 / math.pi) * math.exp(-0.5),
                                                                 rel=1e-15)
    assert set(derive("minibatch-moments")) >= {"second_without_replacement", "fourth_pair_with_replacement"}
