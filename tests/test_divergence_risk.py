"""The divergence risk index against closed forms on a one-parameter Poisson regression.

With D = 1 and no intercept, row n's curvature along the spread is exp(x_n(θ̂ + t·sd))·x_n², so the
distance at which its step λ·J_n exceeds 2B is t_n = (ln(2B/(λx_n²)) − x_nθ̂)/(|x_n|·sd) in the direction
of sign(x_n) — log-linear in t, so the report's interpolation must reproduce it to rounding.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from sgtune.core.config import Dynamics
from sgtune.io.data import make_dataset
from sgtune.models import expand, get_model
from sgtune.theory.applicability import MAX_DIVERGENCE_RISK, divergence_risk
from sgtune.theory.stationary import predict_stationary_cov


def _poisson_1d(seed=0, n=17):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    return make_dataset(x[:, None], rng.poisson(np.exp(0.3 + 0.5 * x)).astype(float))


@pytest.mark.parametrize("B", [1, 4])
def test_row_crossings_match_the_closed_form(B):
    ds = _poisson_1d()
    m = get_model("poisson")
    e = expand(m, ds)
    lam = 0.5 / float(e.hessian[0, 0])  # stable at θ̂ (λH = 0.5), unstable far out
    st = predict_stationary_cov(e, Dynamics(lam, B))
    r = divergence_risk(m, ds, e, st, n_random=0)
    x, th, sd = ds.X[:, 0], float(e.theta_hat[0]), math.sqrt(float(st.cov[0, 0]))
    t_rows = (np.log(2 * B / (lam * x**2)) - x * th) / (np.abs(x) * sd)
    assert float(r["threshold_sd"]) == pytest.approx(max(float(t_rows.min()), 0.0), rel=1e-9)
    rows = B / len(x) * norm.sf(np.maximum(t_rows, 0.0)).sum()
    assert r["per_step"] >= rows * (1 - 1e-9)  # the rows' part; the mean curvature's part adds to it
    assert r["risk"] == pytest.approx(-math.expm1(-r["per_step"] * r["steps"]), rel=1e-12)


def test_a_bounded_curvature_does_not_count_and_a_smaller_step_lowers_the_risk():
    """Logistic: J_n = p(1 − p)x_n² ≤ x_n²/4 saturates — unstable single steps there only oscillate."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(40)
    ds = make_dataset(x[:, None], (rng.random(40) < 1 / (1 + np.exp(-x))).astype(float))
    m = get_model("logistic")
    e = expand(m, ds)
    lam = 0.5 / float(e.hessian[0, 0])
    assert lam * float(np.max(x**2)) / 4 > 2  # some rows' own steps are unstable near their decision boundary
    st = predict_stationary_cov(e, Dynamics(lam, 1))
    assert divergence_risk(m, ds, e, st, n_random=0)["risk"] == 0.0
    ds = _poisson_1d(2)
    m = get_model("poisson")
    e = expand(m, ds)
    big = divergence_risk(m, ds, e, predict_stationary_cov(e, Dynamics(0.5 / float(e.hessian[0, 0]), 4)))
    small = divergence_risk(m, ds, e, predict_stationary_cov(e, Dynamics(0.1 / float(e.hessian[0, 0]), 4)))
    assert small["risk"] < big["risk"] and big["stable_scale"] < 1.0
    assert 0.0 <= small["risk"] <= 1.0 and MAX_DIVERGENCE_RISK > 0
