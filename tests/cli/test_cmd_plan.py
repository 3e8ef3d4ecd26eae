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
    tied = [i for i, s in enumerate(secs) if s <= min(secs) * (1 + doc["seconds_tie"])]  # fewest steps among them
    assert doc["recommended"] == min(tied, key=lambda i: (doc["candidates"][i]["run_steps"], i))
    assert doc["objective"] == "seconds"
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
    assert r.exit_code == 2 and "--tolerance must be" in r.stderr  # an out-of-range option value: exit 2


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
             "--no-applicability", "--no-timing", "-q"])  # the timing runs: test_plan_quiet_plot_and_timing
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["applicability"]["checked"] is False
    assert any("not checked" in w for w in doc["warnings"]) and "warning: applicability" in r.stderr


def test_recommended_run_argv_runs_as_given(tmp_path):
    """Every feasible candidate carries the `sgtune run` command that executes it (burn-in inside --steps);
    the recommended one runs and its chains are the planned ones."""
    lam_dir = tmp_path / "lams"
    r = run(["plan", "--example", "logistic", "--prior-precision", "1", "--tolerance", "0.3", "--batch-sizes", "32",
             "--families", "dense,scalar", "--chains", "2", "--no-timing", "--lambda-dir", str(lam_dir), "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    for c in doc["candidates"]:
        assert c["run_argv"] == [] if not c["feasible"] else c["run_argv"][:2] == ["sgtune", "run"]
    best = doc["recommended_candidate"]
    argv = best["run_argv"]
    assert best["run_argv_ready"] is True and best["run_steps"] == best["burn_in_steps"] + best["steps"]
    assert argv[argv.index("--steps") + 1] == str(best["run_steps"])
    assert argv[argv.index("--burn-in") + 1] == str(best["burn_in_steps"])
    out = run([*argv[1:], "-q"])
    assert out.exit_code == 0, out.stderr
    rdoc = json.loads(out.stdout)
    assert rdoc["steps"] == best["run_steps"] and rdoc["burn_in"] == best["burn_in_steps"]
    assert rdoc["chains"] == 2 and rdoc["batch_size"] == 32
    # without --lambda-dir, the dense candidates' command names a file that plan did not write
    r = run(["plan", "--example", "logistic", "--prior-precision", "1", "--tolerance", "0.3", "--batch-sizes", "32",
             "--families", "dense,scalar", "--chains", "2", "--no-timing", "-q"])
    by_family = {c["family"]: c for c in json.loads(r.stdout)["candidates"] if c["feasible"]}
    assert by_family["dense"]["run_argv_ready"] is False
    if "scalar" in by_family:
        assert by_family["scalar"]["run_argv_ready"] is True and "--step-size" in by_family["scalar"]["run_argv"]


def test_absurd_run_length_is_a_one_line_error():
    r = run(["run", "--example", "logistic", "--batch-size", "32", "--step-size", "0.5", "--steps",
             "10000000000000", "-q"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "--steps" in r.stderr and "10^12" in r.stderr


def test_plan_none_feasible_names_what_stops_it_not_a_family_already_there():
    """--tolerance 1e-6 with the dense family in the grid: its bias (≈ 1e-15) is below the tolerance, so the
    advice "include the dense family" was wrong; the message says what stops the run (its length)."""
    r = run(["plan", "--example", "logistic", "--tolerance", "1e-6", "--batch-sizes", "32", "--families",
             "dense,scalar", "--chains", "2", "--no-timing", "-q"])
    assert r.exit_code == 1 and r.stdout == ""
    assert "include the dense family" not in r.stderr and "add dense" not in r.stderr
    assert "is below it" in r.stderr and "steps per chain" in r.stderr
    r = run(["plan", "--example", "logistic", "--tolerance", "0.01", "--families", "scalar", "--batch-sizes", "32",
             "--no-timing", "-q"])  # the bias decides: a richer family helps, and dense is not in the grid
    assert r.exit_code == 1 and "add dense to --families" in r.stderr
