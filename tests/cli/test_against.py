"""A refined Λ is checkable: ``lambda --refine`` records the covariance its chain is expected to have (the
target), and ``run``/``verify --lambda`` compare their chains with it (``--against``, defaulting to what the
Λ's JSON sidecar expects) instead of the linearised prediction the refinement corrected away from."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main

LOGISTIC = ["--example", "logistic", "--batch-size", "32", "--prior-precision", "1"]


def _frob(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _refine_then_check(tmp_path, base, rounds, verify_extra=()):
    lam, side = tmp_path / "lam.npy", tmp_path / "lam.json"
    r = CliRunner().invoke(main, ["lambda", *base, "--refine", str(rounds), "-q", "-o", str(lam), "--json", str(side)])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(side.read_text())
    # what the refined result says: the chain is expected to give the target, within what the chains measured
    assert doc["expects"] == "target" and doc["expected_cov"] == doc["target_cov"]
    last = doc["refine"][-1]
    assert doc["expected_cov_tolerance"] == max(0.02, last["error"] + 3 * last["mcse"])
    # covariance_error is the refined chain's Monte Carlo error against the target, recomputed from its parts
    assert doc["covariance_error_source"] == "chains"
    assert doc["covariance_error"] == pytest.approx(_frob(doc["empirical_cov"], doc["target_cov"]), rel=1e-12)
    se = np.asarray(doc["empirical_cov_standard_error"])
    assert doc["covariance_error_noise_floor"] == pytest.approx(
        np.sqrt(np.sum(se ** 2)) / np.linalg.norm(doc["target_cov"]), rel=1e-12)
    # … and the linearised prediction of the refined Λ keeps its own key
    assert doc["predicted_covariance_error"] == pytest.approx(_frob(doc["predicted_cov"], doc["target_cov"]),
                                                              rel=1e-9)
    v = CliRunner().invoke(main, ["verify", *base, "--lambda", str(lam), "--seed", "4242", "-q", *verify_extra])
    vdoc = json.loads(v.stdout)
    assert vdoc["against"] == "target" and vdoc["against_source"] == str(side)
    assert vdoc["compared_with"] == doc["target_cov"]
    assert vdoc["relative_tolerance"] == doc["expected_cov_tolerance"]
    return doc, v, vdoc, lam


def test_refine_then_verify_compares_with_the_target_fast(tmp_path):
    doc, v, vdoc, lam = _refine_then_check(tmp_path, LOGISTIC, 1, ("--steps", "6000", "--chains", "8"))
    if doc["refine"][-1]["converged"]:  # a chain the refinement vouches for passes (family-wise level 1e-3)
        assert v.exit_code == 0, v.stderr
        assert vdoc["health"]["healthy"] is True
    # --against prediction still runs the old comparison on the very same chains
    p = CliRunner().invoke(main, ["verify", *LOGISTIC, "--lambda", str(lam), "--seed", "4242", "-q", "--steps",
                                  "6000", "--chains", "8", "--against", "prediction"])
    pdoc = json.loads(p.stdout)
    assert pdoc["against"] == "prediction" and pdoc["compared_with"] == pdoc["predicted"]
    assert pdoc["empirical"] == vdoc["empirical"] and pdoc["relative_tolerance"] == 0.0


@pytest.mark.slow
def test_refined_robust_regression_on_real_data_passes_verify_and_health(tmp_path):
    """The robust β-divergence regression (P = 1.5, σ² = 0.5) on the standardised diabetes data (442 × 10, with
    an intercept): its loss is not quadratic over the chain's spread, so the linearised prediction of the refined
    Λ is off by several percent (measured 5 %), while the refined chain is within ~2 % of the target. verify and
    run with that Λ compare with the target by default and pass / are healthy."""
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    X = (d.data - d.data.mean(0)) / d.data.std(0)
    np.savez(tmp_path / "diabetes.npz", X=X, y=(d.target - d.target.mean()) / d.target.std())
    base = [str(tmp_path / "diabetes.npz"), "--intercept", "--model", "beta-linear", "--beta-power", "1.5",
            "--noise-variance", "0.5", "--batch-size", "32"]
    doc, v, vdoc, lam = _refine_then_check(tmp_path, base, 5)
    assert doc["refine"][-1]["converged"] and doc["applicability"]["applicable"] is True
    assert doc["predicted_covariance_error"] > 0.02  # the prediction is not what the chain gives
    assert v.exit_code == 0, v.stderr
    assert vdoc["passed"] and vdoc["health"]["healthy"]
    r = CliRunner().invoke(main, ["run", *base, "--lambda", str(lam), "--steps", "40000", "--chains", "8",
                                  "--seed", "99", "-q", "--strict"])
    assert r.exit_code == 0, r.stderr
    rdoc = json.loads(r.stdout)
    assert rdoc["against"] == "target" and rdoc["health"]["prediction_check"]["passed"] is True


def test_sidecar_that_describes_another_lambda_is_ignored(tmp_path):
    lam, side = tmp_path / "lam.npy", tmp_path / "lam.json"
    r = CliRunner().invoke(main, ["lambda", *LOGISTIC, "-q", "-o", str(lam), "--json", str(side)])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(side.read_text())
    assert doc["expects"] == "prediction" and doc["expected_cov"] == doc["predicted_cov"]
    assert doc["covariance_error_source"] == "prediction" and doc["predicted_covariance_error"] == doc[
        "covariance_error"]
    doc["expects"] = "target"
    doc["lambda"] = (2 * np.asarray(doc["lambda"])).tolist()
    side.write_text(json.dumps(doc))
    args = ["run", *LOGISTIC, "--lambda", str(lam), "--steps", "600", "--chains", "2"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["against"] == "prediction" and "ignored" in r.stderr
    # a sidecar without the target cannot serve --against target: one line naming the option
    r = CliRunner().invoke(main, [*args, "--against", "target"])
    assert r.exit_code == 1 and "--against target" in r.stderr and "Traceback" not in r.stderr


def test_against_a_matrix_file_and_bad_values(tmp_path):
    args = ["run", "--example", "hetero-linear", "--batch-size", "64", "--step-size", "0.02", "--steps", "600",
            "--chains", "2", "-q"]
    np.save(tmp_path / "bad.npy", np.ones((3, 3)))
    r = CliRunner().invoke(main, [*args, "--against", str(tmp_path / "bad.npy")])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "--against" in r.stderr
    r = CliRunner().invoke(main, [*args, "--against", str(tmp_path / "missing.npy")])
    assert r.exit_code in (1, 2) and "--against" in r.stderr and "Traceback" not in r.stderr
    r = CliRunner().invoke(main, [*args, "--against", "target"])
    assert r.exit_code == 1 and "--against target" in r.stderr


def test_library_verify_against_target_and_a_wrong_matrix():
    """Linear regression, dense Λ tuned to the sandwich: Σ(Λ) = Σ* exactly, so the chains pass against the
    target; the very same chains are rejected against 1.3·Σ* (a 30 % error, far beyond Monte Carlo error)."""
    from sgtune.io.data import example
    from sgtune.models import expand, get_model
    from sgtune.core.config import Dynamics, RunSpec
    from sgtune.workflows.verify import CheckOptions, TuneOptions, verify_stationary_cov

    ds, model = example("hetero-linear"), get_model("linear")
    e = expand(model, ds, 0.0)
    run = RunSpec(8000, n_chains=8, seed=1)
    ok = verify_stationary_cov(model, ds, e, Dynamics(None, 64), run, tuning=TuneOptions(target="sandwich"),
                               check=CheckOptions(against="target"))
    assert ok.against == "target" and np.array_equal(ok.compared_with, ok.tuning.target_cov)
    assert ok.passed
    bad = verify_stationary_cov(model, ds, e, Dynamics(None, 64), run, tuning=TuneOptions(target="sandwich"),
                                check=CheckOptions(against=1.3 * ok.tuning.target_cov))
    assert bad.against == "matrix" and not bad.passed
    assert np.array_equal(bad.empirical, ok.empirical)
