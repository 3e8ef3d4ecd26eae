"""Chain health (issue 19 item 4): sgtune.diagnostics.health and its inputs from the sampler."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler.registry import SmileOptions
from sgtune.cli import main
from sgtune.diagnostics.health import ALPHA, ESS_MIN, STEP_COLLAPSE, chain_health, half_split_test
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains
from sgtune.workflows.verify import chain_prediction, prediction_check
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics


def _fake(**kw):
    base = dict(diverged_at=-np.ones(16, dtype=int), n_chains=16, n_steps=10_000, burn_in=1000,
                ess=np.full(3, 5000.0), step_size_final=None, half_means=None, half_variances=None)
    base.update(kw)
    return SimpleNamespace(**base)


# ----------------------------------------------------------------------------- the half-split test
def test_half_split_false_alarm_rate_is_at_most_alpha():
    """Stationary halves (independent normal chain statistics): the family-wise rate of alarms over
    600 replicates stays within α plus three binomial standard errors."""
    rng = np.random.default_rng(0)
    reps, alarms = 600, 0
    for _ in range(reps):
        m = rng.normal(size=(16, 2, 5))
        v = rng.chisquare(50, size=(16, 2, 5)) / 50
        alarms += not half_split_test(m, v)["passed"]
    assert alarms / reps <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)


@pytest.mark.parametrize("which", ["mean", "variance"])
def test_half_split_detects_a_drift_shared_by_the_chains(which):
    rng = np.random.default_rng(1)
    m = rng.normal(size=(16, 2, 5))
    v = rng.chisquare(50, size=(16, 2, 5)) / 50
    if which == "mean":
        m[:, 1, 3] += 2.0
    else:
        v[:, 1, 3] *= 2.0
    out = half_split_test(m, v)
    assert not out["passed"] and out["statistic"] == which and out["coordinate"] == 3


def test_half_split_drops_diverged_chains_and_needs_three():
    m = np.zeros((3, 2, 2))
    v = np.ones((3, 2, 2))
    m[0] = np.nan
    assert half_split_test(m, v) is None


# ----------------------------------------------------------------------------- chain_health rules
def test_a_healthy_summary_has_no_reasons():
    h = chain_health(_fake())
    assert h.healthy and h.reasons == () and not h.frozen and h.nonstationary is None


def test_divergence_collapse_and_prediction_are_reasons():
    h = chain_health(_fake(diverged_at=np.array([-1, 5, -1])), initial_step_size=0.1,
                     prediction_check={"passed": False, "z_max": 9.0, "threshold": 4.0})
    assert h.diverged == 1 and not h.healthy
    h = chain_health(_fake(step_size_final=np.array([0.1, 0.1 * STEP_COLLAPSE / 2])), initial_step_size=0.1)
    assert h.frozen and "collapsed" in h.reasons[0]
    h = chain_health(_fake(step_size_final=np.array([0.1, 0.1 * STEP_COLLAPSE * 2])), initial_step_size=0.1)
    assert h.healthy
    # the advice names the anchored tuner when the paper's rule collapsed, and does not re-advise it otherwise
    collapsed = np.array([0.1, 0.1 * STEP_COLLAPSE / 2])
    h = chain_health(_fake(step_size_final=collapsed, settings={"tuner": "paper"}), initial_step_size=0.1)
    assert "use the anchored tuner (tuner 'anchored'" in h.reasons[0]
    h = chain_health(_fake(step_size_final=collapsed, settings={"tuner": "anchored"},  # still falling at the end
                           step_size_trace=np.geomspace(0.1, collapsed[1], 40)[None, :]), initial_step_size=0.1)
    assert "smile-naive" in h.reasons[0] and "use the anchored tuner" not in h.reasons[0]
    h = chain_health(_fake(), prediction_check={"passed": False, "z_max": 9.0, "threshold": 4.0, "mode": "covariance"})
    assert not h.healthy and "9" in h.reasons[0]
    h = chain_health(_fake(), prediction_check={"passed": False, "reason": "the step size is unstable"})
    assert h.reasons == ("the step size is unstable",)


def test_few_effective_draws_is_frozen_only_at_a_small_fraction():
    draws = 16 * 9000
    frozen = chain_health(_fake(ess=np.array([ESS_MIN / 2, 1e4])))
    assert frozen.frozen and not frozen.healthy
    short = chain_health(_fake(n_steps=200, burn_in=0, ess=np.array([ESS_MIN / 2])))  # 25 % of 3200 draws
    assert not short.frozen and not short.healthy and "too short" in short.reasons[0]
    slow = chain_health(_fake(ess=np.array([0.005 * draws])))  # 0.5 % of the draws, 720 effective: slow, not frozen
    assert slow.healthy


# ----------------------------------------------------------------------------- on real chains
def test_half_moments_are_the_halves_of_the_trace():
    ds = example("logistic")
    e = expand(get_model("logistic"), ds)
    res = run_chains(get_model("logistic"), ds, Dynamics(0.05, 32),
                     RunSpec(1100, n_chains=4, burn_in=100, thin=1, seed=3), initial=e.theta_hat)
    assert res.settings["batches_per_chain"] % 2 == 0
    tr = res.trace  # (C, 1000, D); 8 segments of 125 draws
    np.testing.assert_allclose(res.half_means[:, 0], tr[:, :500].mean(axis=1), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.half_means[:, 1], tr[:, 500:].mean(axis=1), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.half_variances[:, 1], tr[:, 500:].var(axis=1), rtol=1e-8)


def _linear_2000():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 4))
    return make_dataset(X, X @ [1.0, -0.5, 0.3, 2.0] + rng.normal(size=2000))


@pytest.mark.portability
def test_tuned_sgd_on_the_logistic_example_is_healthy():
    ds = example("logistic")
    model = get_model("logistic")
    e = expand(model, ds)
    t = tune(e, Dynamics(None, 32), target="sandwich")
    res = run_chains(model, ds, Dynamics(t.step_matrix, 32), RunSpec(20000, n_chains=16, seed=0),
                     initial=e.theta_hat)
    cov, mode = chain_prediction(e, t.step_matrix, sampler="sgld", batch_size=32, inv_temperature=math.inf,
                                 n_data=ds.n_data)
    h = chain_health(res, prediction_check=prediction_check(res, cov, mode=mode))
    assert h.healthy, h.reasons
    assert h.prediction_check["passed"] and h.nonstationary is False


@pytest.mark.portability
def test_the_frozen_psmile_run_of_issue_19_is_unhealthy():
    """Tuned pSMILE on a homoskedastic linear regression (N = 2000, D = 4, ε = 0.05, 40 000 steps) with the
    paper's step-size rule (issue 19's run, before the anchored tuner was the default): frozen. The same run
    with the anchored tuner (issue 36) is healthy: ε held, the covariance within the prediction check."""
    ds = _linear_2000()
    model = get_model("linear")
    e = expand(model, ds)
    cov, mode = chain_prediction(e, 0.05, sampler="psmile", batch_size=32, inv_temperature=math.inf,
                                 n_data=ds.n_data)
    res = run_chains(model, ds, Dynamics(0.05, 32), RunSpec(40000, n_chains=16, seed=0),
                     SmileOptions(preconditioned=True, tuner="paper"), initial=e.theta_hat)
    h = chain_health(res, initial_step_size=0.05, prediction_check=prediction_check(res, cov, mode=mode))
    assert h.frozen and not h.healthy
    assert h.details["step_size_ratio_min"] < STEP_COLLAPSE
    assert not h.prediction_check["passed"]
    res = run_chains(model, ds, Dynamics(0.05, 32), RunSpec(40000, n_chains=16, seed=0),
                     SmileOptions(preconditioned=True), initial=e.theta_hat)
    h = chain_health(res, initial_step_size=0.05, prediction_check=prediction_check(res, cov, mode=mode))
    assert not h.frozen and h.details["step_size_ratio_min"] > 0.01 and h.prediction_check["passed"], h.reasons


def test_an_unstable_step_is_a_reason_even_when_the_chain_stays_finite():
    """Logistic gradients are bounded: a step beyond the linearised stability bound need not diverge."""
    ds = example("logistic")
    e = expand(get_model("logistic"), ds)
    lam = 3.0 / float(np.linalg.eigvalsh(e.hessian)[-1])
    cov, mode = chain_prediction(e, lam, sampler="sgld", batch_size=32, inv_temperature=float(ds.n_data),
                                 n_data=ds.n_data)
    assert cov is None and mode.startswith("unstable:")
    check = prediction_check(SimpleNamespace(), cov, mode=mode)
    assert check["passed"] is False and "unstable" in check["reason"]


# ----------------------------------------------------------------------------- the command line
def test_run_reports_health_and_strict_exits_4_on_the_frozen_psmile(tmp_path):
    """The paper's rule (--tuner paper) collapses ε on this run (its log ε drifts down at every step size); the
    health check says so, names the anchored tuner, and --strict exits 4. The anchored default holds ε."""
    ds = _linear_2000()
    np.savez(tmp_path / "lin.npz", X=ds.X, y=ds.y)
    argv = ["run", str(tmp_path / "lin.npz"), "--model", "linear", "--batch-size", "32", "--sampler", "psmile",
            "--step-size", "0.05", "--steps", "40000", "-q", "--strict"]
    r = CliRunner().invoke(main, [*argv, "--tuner", "paper"])
    assert r.exit_code == 4, r.stderr
    doc = json.loads(r.stdout)
    assert doc["health"]["healthy"] is False and doc["health"]["frozen"] is True
    assert "unhealthy chains: the tuned step size collapsed" in r.stderr  # even with -q
    assert "use the anchored tuner (tuner 'anchored'" in r.stderr
    assert any(w.startswith("unhealthy chains") for w in doc["warnings"])
    r = CliRunner().invoke(main, argv)
    doc = json.loads(r.stdout)
    assert doc["health"]["frozen"] is False and "collapsed" not in r.stderr, r.stderr
    assert doc["health"]["step_size_ratio_min"] > 0.01


def test_run_verify_calibrate_report_health_on_a_healthy_run():
    r = CliRunner().invoke(main, ["run", "--example", "hetero-linear", "--batch-size", "64", "--step-size", "0.01",
                                  "--steps", "20000", "-q", "--strict"])
    assert r.exit_code == 0, r.stderr
    h = json.loads(r.stdout)["health"]
    assert h["healthy"] and h["prediction_check"]["mode"] == "covariance" and h["nonstationary"] is False
    r = CliRunner().invoke(main, ["verify", "--example", "hetero-linear", "--batch-size", "64", "-q", "--strict"])
    assert r.exit_code == 0, r.stderr
    h = json.loads(r.stdout)["health"]
    assert h["healthy"] and h["prediction_check"]["passed"]
    r = CliRunner().invoke(main, ["calibrate", "--example", "hetero-linear", "--batch-size", "64", "-q", "--strict"])
    assert r.exit_code == 0, r.stderr
    h = json.loads(r.stdout)["health"]
    assert h["healthy"] and h["prediction_check"]["passed"]
