"""`sgtune plan` (docs/cli.rst: plan) and the Monte Carlo keys of `sgtune covariance` (issue 20)."""
from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.io.data import example
from sgtune.models import expand, get_model
from sgtune.theory.stationary import predict_stationary_cov
from sgtune.core.config import Dynamics

from test_mcerror import _brute

CANDIDATE_KEYS = {"batch_size", "family", "momentum", "batching", "inverse_temperature", "chains",
                  "covariance_error", "cov_mc_error_constant", "burn_in_steps", "steps", "gradient_evaluations",
                  "predicted_seconds", "feasible"}


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.fixture(scope="module")
def logistic_expansion():
    return expand(get_model("logistic"), example("logistic"))


def test_plan_json_csv_and_recommendation(tmp_path, logistic_expansion):
    out = tmp_path / "plan.csv"
    r = run(["plan", "--example", "logistic", "--tolerance", "0.12", "--batch-sizes", "16,64",
             "--families", "dense,scalar", "--chains", "3", "--no-timing", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"candidates", "recommended", "lambda", "warnings", "applicability", "pareto_front"} <= set(doc)
    assert doc["applicability"]["checked"] is True and doc["applicability"]["applicable"] is True  # D = 5
    cands = doc["candidates"]
    assert len(cands) == 4 and all(CANDIDATE_KEYS <= set(c) for c in cands)
    assert all("reason" in c for c in cands if not c["feasible"])
    feas = [i for i, c in enumerate(cands) if c["feasible"]]
    assert doc["recommended"] == min(feas, key=lambda i: cands[i]["gradient_evaluations"])
    best = cands[doc["recommended"]]
    assert best["chains"] == 3 and best["predicted_seconds"] == "inf"  # --no-timing
    # the recommended Λ: its chain's covariance and error constant from independent calls
    lam = np.array(doc["lambda"])
    st = predict_stationary_cov(logistic_expansion, Dynamics(lam, best["batch_size"]))
    target = np.array(doc["target_cov"])
    assert np.linalg.norm(st.cov - target) / np.linalg.norm(target) == pytest.approx(best["covariance_error"],
                                                                                    abs=1e-10)
    c_bf, _ = _brute(st.transition, st.augmented_cov, logistic_expansion.dim)
    assert best["cov_mc_error_constant"] == pytest.approx(c_bf / np.sum(target ** 2), rel=1e-6)
    assert math.sqrt(best["covariance_error"] ** 2 + best["cov_mc_error_constant"] / (best["steps"] * 3)) <= 0.12
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert len(rows) == 4 and int(rows[doc["recommended"]]["recommended"]) == 1
    assert int(rows[0]["steps"]) == cands[0]["steps"] or rows[0]["steps"] == str(cands[0]["steps"])
    assert "recommended" in r.stderr and "gradients" in r.stderr  # the human table
    # an existing output is refused without --overwrite, before any work
    again = run(["plan", "--example", "logistic", "--tolerance", "0.12", "--no-timing", "-o", str(out)])
    assert again.exit_code == 1 and "already exists" in again.stderr and "--overwrite" in again.stderr


def test_plan_quiet_plot_and_timing(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "plan.png"
    r = run(["plan", "--example", "logistic", "--tolerance", "0.2", "--batch-sizes", "8,64", "--families", "dense",
             "--objective", "seconds", "--plot", str(png), "-q"])
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""  # -q: no table (and no warnings for this problem)
    doc = json.loads(r.stdout)
    secs = [c["predicted_seconds"] for c in doc["candidates"]]
    assert all(isinstance(s, float) and s > 0 for s in secs)
    assert doc["recommended"] == int(np.argmin(secs)) and doc["objective"] == "seconds"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_nothing_feasible_is_a_domain_error():
    r = run(["plan", "--example", "logistic", "--tolerance", "0.01", "--families", "scalar", "--batch-sizes", "32",
             "--no-timing"])
    assert r.exit_code == 1
    assert "no candidate reaches --tolerance 0.01" in r.stderr and r.stdout == ""


def test_plan_usage_errors():
    r = run(["plan", "--example", "logistic", "--tolerance", "0.1", "--batch-sizes", "8,x"])
    assert r.exit_code == 2 and "--batch-sizes" in r.stderr
    r = run(["plan", "--example", "logistic"])
    assert r.exit_code == 2 and "--tolerance" in r.stderr
    r = run(["plan", "--example", "logistic", "--tolerance", "0", "--no-timing"])
    assert r.exit_code == 1 and "--tolerance must be" in r.stderr


def test_covariance_reports_the_monte_carlo_constants(logistic_expansion):
    r = run(["covariance", "--example", "logistic", "--batch-size", "32", "--step-size", "0.5", "--momentum", "0.3",
             "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    st = predict_stationary_cov(logistic_expansion, Dynamics(0.5, 32, momentum=0.3))
    c_bf, mean_bf = _brute(st.transition, st.augmented_cov, logistic_expansion.dim)
    cov = np.array(doc["cov"])
    assert doc["cov_mc_error_constant"] == pytest.approx(c_bf / np.sum(cov ** 2), rel=1e-6)
    np.testing.assert_allclose(doc["mean_mc_variance"], mean_bf, rtol=1e-6, atol=1e-9 * np.abs(mean_bf).max())


def test_plan_skipped_applicability_is_not_silent():
    r = run(["plan", "--example", "logistic", "--tolerance", "0.2", "--batch-sizes", "32", "--families", "dense",
             "--no-applicability", "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["applicability"]["checked"] is False
    assert any("not checked" in w for w in doc["warnings"]) and "warning: applicability" in r.stderr
