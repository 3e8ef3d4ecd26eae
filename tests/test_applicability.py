"""The applicability report: exact where the loss is quadratic, loud where the chain leaves the local regime.

The gallery (issue 19 item 6) runs each problem's chain: every answer is either marked not applicable
(with a reason) or its chain passes ``verify`` with a 5 % relative tolerance."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.workflows.verify import CheckOptions, verify_stationary_cov
from sgtune.theory.applicability import MAX_DEVIATION, REASON_CODES, applicability
from sgtune.theory.stationary import predict_stationary_cov
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics, RunSpec


def _std(X):
    return (X - X.mean(0)) / X.std(0)


def _breast_cancer(standardise):
    from sklearn.datasets import load_breast_cancer

    bc = load_breast_cancer()
    X = _std(bc.data) if standardise else bc.data
    return make_dataset(X, bc.target.astype(float), intercept=standardise)


def _randhie():
    import statsmodels.api as sm

    r = sm.datasets.randhie.load_pandas()
    return make_dataset(r.exog.values.astype(float), r.endog.values.astype(float), intercept=True)


def _diabetes():
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    return make_dataset(d.data, d.target, intercept=True)


def _near_separable():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((400, 5))
    y = (rng.random(400) < 1 / (1 + np.exp(-X @ np.array([4.0, -3, 2, 0, 1])))).astype(float)
    return make_dataset(X, y)


def _ill_conditioned():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((1000, 1)) + 0.01 * rng.standard_normal((1000, 4))
    return make_dataset(X, X @ np.ones(4) + rng.standard_normal(1000), intercept=True)


GALLERY = {  # name: (model, data, prior precision, B)
    "breast-cancer standardised": (lambda: get_model("logistic"), lambda: _breast_cancer(True), 1.0, 32),
    "breast-cancer raw": (lambda: get_model("logistic"), lambda: _breast_cancer(False), 1.0, 32),
    "diabetes": (lambda: get_model("linear"), _diabetes, 0.0, 32),
    "randhie": (lambda: get_model("poisson"), _randhie, 0.0, 64),
    "near-separable logistic": (lambda: get_model("logistic"), _near_separable, 0.1, 16),
    "ill-conditioned linear": (lambda: get_model("linear"), _ill_conditioned, 0.0, 32),
    "beta-linear (non-quadratic)": (lambda: get_model("beta-linear", beta_power=1.5),
                                    lambda: example("hetero-linear", seed=1), 0.0, 32),
}


def test_quadratic_loss_is_exact_and_applicable():
    """Linear regression: the proxy is the chain, so the statistical linearisation returns Σ itself."""
    ds = example("hetero-linear")
    m = get_model("linear")
    e = expand(m, ds)
    st = predict_stationary_cov(e, Dynamics(0.05, 32))
    a = applicability(m, ds, e, st)
    assert a.applicable and a.reasons == ()
    assert a.predicted_deviation < 1e-9 and a.curvature_change["curvature"] < 1e-9
    np.testing.assert_allclose(a.linearised_cov, st.cov, rtol=1e-8, atol=1e-14)
    assert a.equilibration_steps / st.tau_worst < 2  # additive noise: burn-in ≈ τ


@pytest.mark.parametrize("name", sorted(GALLERY))
def test_gallery_each_answer_is_flagged_or_its_chain_agrees(name):
    model_fn, data_fn, prior, B = GALLERY[name]
    model, ds = model_fn(), data_fn()
    e = expand(model, ds, prior)
    res = tune(e, Dynamics(None, B), target="sandwich")
    a = applicability(model, ds, e, res.stationary, target_cov=res.target_cov)
    if not a.applicable:
        assert a.reasons and all(len(r.message) > 40 and r.code in REASON_CODES for r in a.reasons)
        return
    steps = int(min(max(100_000, 2000 * res.tau_worst), 400_000))
    rep = verify_stationary_cov(model, ds, e, Dynamics(res.step_matrix, B), RunSpec(steps, n_chains=4, seed=1),
                                check=CheckOptions(relative_tolerance=0.05), prior_precision=prior)
    assert rep.test.passed, (name, rep.test.z_max)


def test_known_failures_are_flagged():
    """The issue's breast-cancer fit (sd ≈ 30 in weak directions) and a β-divergence loss that misses by ~70 %."""
    for name in ("breast-cancer standardised", "breast-cancer raw", "beta-linear (non-quadratic)"):
        model_fn, data_fn, prior, B = GALLERY[name]
        model, ds = model_fn(), data_fn()
        e = expand(model, ds, prior)
        res = tune(e, Dynamics(None, B), target="sandwich")
        a = applicability(model, ds, e, res.stationary)
        assert not a.applicable, name
    assert a.predicted_deviation > MAX_DEVIATION and math.isfinite(a.predicted_deviation)  # local, not quadratic


def test_cli_reports_warns_under_quiet_and_strict_exits_4(tmp_path):
    ds = _breast_cancer(False)
    csv = tmp_path / "bc.csv"
    np.savetxt(csv, np.c_[ds.X, ds.y], delimiter=",", comments="",
               header=",".join([f"x{i}" for i in range(ds.dim)] + ["y"]))
    # one run, with --strict: the answer, its JSON and its warnings are those of the run without it (the flag only
    # sets the exit status); a not-applicable lambda without --strict exits 0, test_refine_repairs_… below. The
    # remedy search behind this answer costs ≈ 5 s of CPU, so the answer is computed once, not twice.
    args = ["lambda", str(csv), "--model", "logistic", "--prior-precision", "1", "--batch-size", "32", "-q",
            "--strict", "-o", str(tmp_path / "lam.npy")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 4 and (tmp_path / "lam.npy").exists()  # written, but not vouched for
    assert "error: --strict" in r.stderr
    doc = json.loads(r.stdout)
    app = doc["applicability"]
    assert app["applicable"] is False and app["reasons"]
    assert app["conditioning"]["column_scale_ratio"] > 1e3
    assert any("standardise" in w for w in doc["warnings"])
    assert r.stderr.count("warning: ") == len(doc["warnings"]) >= 2
    assert app["equilibration_steps"] > 1e6 > 1e3 > doc["tau_worst"]


def test_cli_applicable_answer_is_quiet():
    r = CliRunner().invoke(main, ["covariance", "--example", "logistic", "--batch-size", "32", "--step-size", "0.5",
                                  "-q", "--strict"])
    assert r.exit_code == 0 and r.stderr == ""
    doc = json.loads(r.stdout)
    assert doc["applicability"]["applicable"] is True and doc["warnings"] == []


def test_refine_checks_a_local_answer_on_chains_and_refuses_a_nonlocal_one(tmp_path):
    r = CliRunner().invoke(main, ["lambda", "--example", "logistic", "--batch-size", "32", "--refine", "2", "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    first = doc["refine"][0]
    assert set(first) == {"round", "steps", "chains", "error", "mcse", "lambda_change", "converged"}
    # the chain's measured error is what the rounds report: converged means within max(2 %, 3 MCSE)
    assert first["converged"] == (first["error"] <= max(0.02, 3 * first["mcse"]))
    assert doc["applicability"]["applicable"] is first["converged"]
    ds = _breast_cancer(True)
    csv = tmp_path / "bc.csv"
    np.savetxt(csv, np.c_[ds.X[:, 1:], ds.y], delimiter=",", comments="",
               header=",".join([f"x{i}" for i in range(ds.dim - 1)] + ["y"]))
    r = CliRunner().invoke(main, ["lambda", str(csv), "--model", "logistic", "--intercept", "--prior-precision", "1",
                                  "--batch-size", "32", "--refine", "3", "-q", "--strict"])
    assert r.exit_code == 4
    assert "--refine not run" in r.stderr


def test_calibrate_reports_applicability_on_the_subsample_it_fitted():
    r = CliRunner().invoke(main, ["calibrate", "--example", "hetero-linear", "--batch-size", "32", "--subsample", "500",
                                  "--steps", "5000", "-q"])
    assert r.exit_code == 0, r.stderr
    app = json.loads(r.stdout)["applicability"]
    assert app["applicable"] is True and app["predicted_deviation"] < 1e-9  # the same rows: exact for a linear model


def test_refine_repairs_a_local_nonquadratic_fit_and_refuses_a_nonlocal_one(tmp_path):
    """Standardised wine (class 0 vs rest), logistic, prior 1, B = 16: the tuned chain misses the
    sandwich by about 20 % (flagged); --refine brings it within 5 %, checked by an independent verify
    with other seeds. The β-divergence fit, whose curvature changes by several hundred percent over
    the spread, is refused as not local."""
    from sklearn.datasets import load_wine

    w = load_wine()
    X = (w.data - w.data.mean(0)) / w.data.std(0)
    np.savez(tmp_path / "wine.npz", X=X, y=(w.target == 0).astype(float))
    base = [str(tmp_path / "wine.npz"), "--intercept", "--model", "logistic", "--prior-precision", "1",
            "--batch-size", "16"]
    r = CliRunner().invoke(main, ["lambda", *base, "-q"])
    assert r.exit_code == 0, r.stderr
    app = json.loads(r.stdout)["applicability"]
    assert not app["applicable"] and app["predicted_deviation"] > 0.1
    assert app["reason_codes"][0] == "not-quadratic" and app["reasons"][0].startswith("the loss is not quadratic")
    lam = tmp_path / "lam.npy"
    r = CliRunner().invoke(main, ["lambda", *base, "--refine", "5", "-q", "-o", str(lam)])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["refine"][0]["error"] > 0.1 and doc["refine"][-1]["converged"]
    assert doc["applicability"]["applicable"] is True
    r = CliRunner().invoke(main, ["verify", *base, "--lambda", str(lam), "--relative-tolerance", "0.05",
                                  "--seed", "12345", "-q"])
    assert r.exit_code == 0, r.stderr
    r = CliRunner().invoke(main, ["lambda", "--example", "hetero-linear", "--model", "beta-linear", "--beta-power",
                                  "1.5", "--batch-size", "32", "--refine", "5", "-q", "--strict"])
    assert r.exit_code == 4 and "--refine not run" in r.stderr and "curvature changes by" in r.stderr
