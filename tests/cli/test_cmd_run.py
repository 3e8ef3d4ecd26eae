"""``sgtune run``: JSON contract, outputs, reproducibility, errors."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from sgtune.cli import main

BASE = ["run", "--example", "hetero-linear", "--batch-size", "64", "--step-size", "0.01", "--steps", "3000",
        "--chains", "4", "-q"]


def test_run_json_keys_and_shapes():
    r = CliRunner().invoke(main, BASE)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("mean", "cov", "cov_standard_error", "ess", "seconds", "iterations_per_second", "seed"):
        assert key in doc
    cov = np.array(doc["cov"])
    assert cov.shape == (20, 20) and np.allclose(cov, cov.T) and np.all(np.linalg.eigvalsh(cov) > 0)
    assert len(doc["ess"]) == 20 and doc["burn_in"] == 300 and doc["diverged_chains"] == []
    # same seed, same numbers; another seed, other numbers
    again = json.loads(CliRunner().invoke(main, BASE).stdout)
    assert again["cov"] == doc["cov"]
    other = json.loads(CliRunner().invoke(main, [*BASE, "--seed", "1"]).stdout)
    assert other["cov"] != doc["cov"]


def test_run_writes_npz_with_draws_and_refuses_overwrite(tmp_path):
    out = tmp_path / "trace.npz"
    r = CliRunner().invoke(main, [*BASE, "--thin", "10", "-o", str(out), "--sampler", "sglrw",
                                  "--inverse-temperature", "N", "--batching", "reshuffle"])
    assert r.exit_code == 0, r.stderr
    with np.load(out) as z:
        assert z["draws"].shape == (4, 270, 20)
        np.testing.assert_allclose(z["cov"], json.loads(r.stdout)["cov"], rtol=1e-15)
    r2 = CliRunner().invoke(main, [*BASE, "-o", str(out)])
    assert r2.exit_code == 1 and "--overwrite" in r2.stderr


def test_run_lambda_file(tmp_path):
    lam = tmp_path / "lam.npy"
    np.save(lam, np.full(20, 0.01))
    args = [a for a in BASE if a not in ("--step-size", "0.01")]
    r = CliRunner().invoke(main, [*args, "--lambda", str(lam)])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["cov"] == json.loads(CliRunner().invoke(main, BASE).stdout)["cov"]


def test_run_needs_exactly_one_step_option(tmp_path):
    r = CliRunner().invoke(main, [*BASE, "--lambda", str(tmp_path / "x.npy")])
    assert r.exit_code == 2 and "exactly one of --step-size" in r.stderr


def test_run_sglrw_needs_temperature():
    r = CliRunner().invoke(main, [*BASE, "--sampler", "sglrw"])
    assert r.exit_code == 1 and "finite inverse temperature" in r.stderr


def test_run_contradictory_batching():
    r = CliRunner().invoke(main, [*BASE, "--without-replacement", "--batching", "reshuffle"])
    assert r.exit_code == 2 and "contradicts" in r.stderr
