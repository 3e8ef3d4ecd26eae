"""``sgtune run`` / ``verify`` with --sampler sghmc and the SMILE samplers: keys, defaults, errors."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from sgtune.cli import main

BASE = ["run", "--example", "hetero-linear", "--batch-size", "64", "--steps", "1500", "--chains", "2", "-q"]


def test_run_psmile_keys_and_step_size_trace(tmp_path):
    out = tmp_path / "t.npz"
    r = CliRunner().invoke(main, [*BASE, "--sampler", "psmile", "--step-size", "0.01", "--thin", "10", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["sampler"] == "psmile" and doc["inverse_temperature"] == doc["n_data"]  # β = N by default
    for key in ("step_size_final", "rejection_fraction", "energy_error_mean", "energy_error_abs_mean",
                "energy_error_var_per_dim"):
        assert len(doc[key]) == 2, key
    assert np.array(doc["preconditioner"]).shape == (2, 20)
    assert all(0.0 <= f < 1.0 for f in doc["rejection_fraction"]) and doc["step_size_final"] != [0.01, 0.01]
    with np.load(out) as z:
        assert z["step_size_trace"].shape == (2, 135) and z["draws"].shape == (2, 135, 20)
        np.testing.assert_allclose(z["step_size_trace"][:, -1], doc["step_size_final"], rtol=1e-15)


def test_run_sghmc_friction_and_explicit_temperature():
    r = CliRunner().invoke(main, [*BASE, "--sampler", "sghmc", "--step-size", "0.002", "--friction", "20",
                                  "--inverse-temperature", "2N"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["friction"] == 20.0 and doc["inverse_temperature"] == 2 * doc["n_data"]
    assert "step_size_final" not in doc


def test_run_smile_refuses_sgld_options(tmp_path):
    lam = tmp_path / "lam.npy"
    np.save(lam, np.full(20, 0.01))
    for extra, needle in ((["--step-size", "0.01", "--momentum", "0.5"], "momentum"),
                          (["--step-size", "0.01", "--inverse-temperature", "inf"], "finite inverse temperature"),
                          (["--lambda", str(lam)], "scalar step size"),
                          (["--step-size", "0.01", "--decay", "0.5"], "decay")):
        r = CliRunner().invoke(main, [*BASE, "--sampler", "smile", *extra])
        assert r.exit_code == 1 and needle in r.stderr and r.stdout == "", (extra, r.stderr)


def test_verify_posterior_mode_with_sghmc(tmp_path):
    png = tmp_path / "v.png"
    r = CliRunner().invoke(main, ["verify", "--example", "hetero-linear", "--batch-size", "2000",
                                  "--without-replacement", "--sampler", "sghmc", "--step-size", "0.002",
                                  "--friction", "50", "--steps", "6000", "--chains", "4", "-q", "--plot", str(png)])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["mode"] == "posterior" and doc["passed"] and doc["sampler"] == "sghmc"
    assert png.read_bytes()[:4] == b"\x89PNG" and doc["lambda"] == [0.002] * 20
    # the prediction is (N·H)⁻¹: a 1.5× inflated one is rejected
    r2 = CliRunner().invoke(main, ["verify", "--example", "hetero-linear", "--batch-size", "2000",
                                   "--without-replacement", "--sampler", "sghmc", "--step-size", "0.002",
                                   "--friction", "50", "--steps", "6000", "--chains", "4", "-q",
                                   "--inflate-prediction", "1.5"])
    assert r2.exit_code == 3


def test_verify_smile_needs_a_step_size():
    r = CliRunner().invoke(main, ["verify", "--example", "hetero-linear", "--batch-size", "64", "--sampler", "smile",
                                  "-q"])
    assert r.exit_code == 1 and "scalar step size" in r.stderr


def test_run_smile_issue36_holds_its_step_size_and_the_paper_rule_stays_available():
    """The run of issue 36 (logistic, batch 32, ε₀ = 0.05, 20 000 steps, 2 chains): with the anchored tuner (the
    default) ε ends within a factor 10 of its start in both chains (measured 0.2×), no collapse, the chains
    within the prediction check of (βH)⁻¹ and ≥ 0.5 % effective draws: measured 0.70–1.07 % over seeds 1–4, with the
    velocity refresh (the default since) and without it, so the issue's 1 % is met by some seeds only (the step
    the anchored target sets is what limits it; the refresh does not change it); --tuner paper is the SMILE
    paper's rule, whose ε drifts down (issue: 5.7e-5× its start; here below 1e-2×)."""
    argv = ["run", "--example", "logistic", "--sampler", "smile", "--batch-size", "32", "--step-size", "0.05",
            "--steps", "20000", "--chains", "2", "-q"]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tuner"] == "anchored" and "collapsed" not in r.stderr
    ratio = np.array(doc["step_size_final"]) / 0.05
    assert np.all((ratio > 0.1) & (ratio < 10.0)), ratio
    h = doc["health"]
    assert h["healthy"] and not h["frozen"] and h["prediction_check"]["passed"] and h["ess_fraction"] >= 0.005, h
    r = CliRunner().invoke(main, [*argv, "--tuner", "paper"])
    doc = json.loads(r.stdout)
    assert doc["tuner"] == "paper" and np.all(np.array(doc["step_size_final"]) < 0.05 * 1e-2), doc["step_size_final"]
    r = CliRunner().invoke(main, [*argv, "--tuner", "dual"])
    assert r.exit_code == 2 and "--tuner" in r.stderr


def test_guardrail_floor_option_reaches_the_sampler_and_is_validated():
    """--guardrail-floor k: 0 (default) is eq. (6) as printed, inf switches the guardrail off (no rejected step), a
    finite k is recorded; a negative, nan or non-numeric value is a one-line error naming the option, exit 2."""
    base = [*BASE, "--sampler", "smile", "--step-size", "0.01"]
    r = CliRunner().invoke(main, base)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["guardrail_floor"] == 0.0 and min(doc["rejection_fraction"]) > 0  # the printed guardrail rejects
    r = CliRunner().invoke(main, [*base, "--guardrail-floor", "inf"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["guardrail_floor"] == "inf" and doc["rejection_fraction"] == [0.0, 0.0]
    r = CliRunner().invoke(main, [*base, "--guardrail-floor", "3"])
    assert r.exit_code == 0 and json.loads(r.stdout)["guardrail_floor"] == 3.0
    for bad in ("-1", "nan", "abc"):
        r = CliRunner().invoke(main, [*base, "--guardrail-floor", bad])
        assert r.exit_code == 2, (bad, r.stderr)
        lines = [ln for ln in r.stderr.strip().splitlines() if ln]
        assert len(lines) == 1 and "--guardrail-floor" in lines[0] and "Traceback" not in r.stderr, r.stderr
