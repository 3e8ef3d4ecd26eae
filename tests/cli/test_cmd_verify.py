"""``sgtune verify``: passes on a correct prediction, exits 3 on a deliberately wrong one."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from sgtune.cli import main


def test_verify_tuned_example_passes_and_inflated_prediction_fails():
    # the bundled example tuned like `sgtune lambda --example hetero-linear --batch-size 64`
    base = ["verify", "--example", "hetero-linear", "--batch-size", "64", "-q"]
    r = CliRunner().invoke(main, base)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["passed"] is True and doc["z_max"] <= doc["threshold"] and doc["mode"] == "lambda"
    # "seconds" is reported, not bounded: a wall-clock limit depends on the machine and its load (STYLE: speed
    # claims belong in benchmarks/)
    assert doc["seconds"] > 0 and np.isfinite(doc["seconds"]) and doc["n_tests"] == 210
    assert np.array(doc["predicted"]).shape == (20, 20)
    # a prediction 10% too large is rejected (exit 3) on the very same chains
    bad = CliRunner().invoke(main, [*base, "--inflate-prediction", "1.1"])
    assert bad.exit_code == 3
    bdoc = json.loads(bad.stdout)
    assert bdoc["passed"] is False and bdoc["z_max"] > bdoc["threshold"]
    assert bdoc["empirical"] == doc["empirical"]


def test_verify_covariance_mode():
    args = ["verify", "--example", "hetero-linear", "--batch-size", "32", "--step-size", "0.02",
            "--inverse-temperature", "N", "--chains", "8", "-q"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["mode"] == "covariance" and doc["passed"] is True
    # default run length T = max(20000, ceil(1000·τ_worst)) from the prediction's mixing time
    assert doc["steps"] == max(20000, int(np.ceil(1000 * doc["tau_worst"])))
    assert CliRunner().invoke(main, [*args, "--inflate-prediction", "0.9"]).exit_code == 3


def test_verify_rejects_mixed_modes():
    r = CliRunner().invoke(main, ["verify", "--example", "hetero-linear", "--batch-size", "32", "--step-size",
                                  "0.02", "--target", "sandwich"])
    assert r.exit_code == 2 and "not both" in r.stderr
