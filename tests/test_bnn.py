"""The BNN comparison's pure pieces (sgtune.workflows.bnn): splits, LPPD/RMSE, the equal gradient budget, a tiny run."""
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _timeouts import HANG_GUARD_S
from scipy.stats import norm

from sgtune.workflows import bnn
from sgtune.core.errors import SgtuneError, ShapeError
from sgtune.models import make_mlp


# ----------------------------------------------------------------------------- metrics
def test_lppd_matches_a_direct_average_of_densities():
    """Independent route: scipy's normal pdf averaged over draws, then log (fine at moderate values)."""
    rng = np.random.default_rng(0)
    F = rng.normal(size=(37, 11))
    y = rng.normal(size=11)
    s2 = 0.7
    direct = np.mean(np.log(norm.pdf(y[None, :], loc=F, scale=math.sqrt(s2)).mean(axis=0)))
    assert bnn.gaussian_lppd(F, y, s2) == pytest.approx(direct, rel=1e-12)
    # original units: y_orig = m + s·y, the density divides by s
    s = 3.5
    direct_orig = np.mean(np.log(norm.pdf(2.0 + s * y[None, :], loc=2.0 + s * F, scale=s * math.sqrt(s2)).mean(axis=0)))
    assert bnn.gaussian_lppd(F, y, s2, y_scale=s) == pytest.approx(direct_orig, rel=1e-12)


def test_lppd_is_stable_where_every_density_underflows():
    """All residuals ≈ 40σ: pdf underflows to 0, the closed form is log N(40σ) + log((1 + e^{−Δ})/2)."""
    y = np.array([0.0])
    F = np.array([[40.0], [40.5]])  # σ² = 1
    a, b = -0.5 * 40.0 ** 2, -0.5 * 40.5 ** 2
    expected = a + math.log1p(math.exp(b - a)) - math.log(2.0) - 0.5 * math.log(2 * math.pi)
    assert np.all(norm.pdf(F[:, 0]) < 1e-300)
    assert bnn.gaussian_lppd(F, y, 1.0) == pytest.approx(expected, rel=1e-13)


def test_single_draw_lppd_and_rmse_closed_form():
    y = np.array([1.0, -2.0, 0.5])
    f = np.array([[0.0, 0.0, 0.0]])
    s2 = 2.0
    assert bnn.gaussian_lppd(f, y, s2) == pytest.approx(-0.5 * math.log(2 * math.pi * s2) - np.mean(y ** 2) / (2 * s2))
    assert bnn.predictive_rmse(f, y) == pytest.approx(math.sqrt(np.mean(y ** 2)))
    # RMSE uses the predictive mean: two draws symmetric about y give zero error
    assert bnn.predictive_rmse(np.stack([y + 1, y - 1]), y, y_scale=10.0) == pytest.approx(0.0, abs=1e-15)


def test_metric_errors_name_the_argument():
    with pytest.raises(ShapeError, match="predictions must have shape"):
        bnn.gaussian_lppd(np.zeros((3, 4)), np.zeros(5), 1.0)
    with pytest.raises(SgtuneError, match="noise_variance"):
        bnn.gaussian_lppd(np.zeros((3, 4)), np.zeros(4), 0.0)
    with pytest.raises(SgtuneError, match="sampler must be one of"):
        bnn.steps_for_budget("nuts", 100)


# ----------------------------------------------------------------------------- budget and splits
def test_equal_gradient_budget():
    assert bnn.steps_for_budget("sgld", 3000) == 3000
    assert bnn.steps_for_budget("sghmc", 3000) == 3000
    for s in ("smile", "psmile", "smile-naive", "psmile-naive"):
        assert bnn.steps_for_budget(s, 3000) == 1000
        assert bnn.steps_for_budget(s, 3000) * bnn.GRADS_PER_STEP[s] == 3000
    assert set(bnn.DEFAULT_STEP_GRIDS) == set(bnn.GRADS_PER_STEP)
    assert len({len(g) for g in bnn.DEFAULT_STEP_GRIDS.values()}) == 1  # same tuning effort


def test_split_is_a_seeded_partition_standardised_on_train():
    X, y = bnn.load_diabetes_arrays()
    a = bnn.standardised_split(X, y, seed=3)
    b = bnn.standardised_split(X, y, seed=3)
    c = bnn.standardised_split(X, y, seed=4)
    assert np.array_equal(a.X_test, b.X_test) and not np.array_equal(a.y_test, c.y_test)
    n = X.shape[0]
    assert (a.X_train.shape[0], a.X_val.shape[0], a.X_test.shape[0]) == (n - 44 - 88, 44, 88)
    np.testing.assert_allclose(a.X_train.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(a.X_train.std(axis=0), 1.0, rtol=1e-12)
    assert a.y_train.mean() == pytest.approx(0.0, abs=1e-12) and a.y_train.std() == pytest.approx(1.0)
    # every original response appears exactly once, recovered from the stored mean and scale
    back = np.concatenate([a.y_train, a.y_val, a.y_test]) * a.y_scale + a.y_mean
    np.testing.assert_allclose(np.sort(back), np.sort(y), rtol=1e-12)
    with pytest.raises(SgtuneError, match="test_fraction"):
        bnn.standardised_split(X, y, 0, test_fraction=1.5)


# ----------------------------------------------------------------------------- a tiny end-to-end run
def _tiny():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(80, 3))
    y = np.tanh(X[:, 0]) - 0.5 * X[:, 1] + 0.3 * rng.normal(size=80)
    return X, y


def test_ensemble_start_members_beat_their_glorot_start():
    X, y = _tiny()
    sp = bnn.standardised_split(X, y, seed=0)
    st = bnn.ensemble_start(sp, 3, hidden_sizes=(4,), max_iter=50, seed=1)
    assert st.members.shape == (3, make_mlp((4,)).n_params(3)) and st.gradient_evals > 0
    model = make_mlp((4,))
    glorot = [np.mean((sp.y_val - model.output(model.initial_params(3, r), sp.X_val)) ** 2)
              for r in (np.random.default_rng(s) for s in np.random.SeedSequence(1).spawn(3))]
    assert st.val_msr <= np.mean(glorot)
    # σ² is the training mean squared residual; the signal explains part of the (standardised) variance
    trn = np.mean([np.mean((sp.y_train - model.output(th, sp.X_train)) ** 2) for th in st.members])
    assert st.noise_variance == pytest.approx(trn, rel=1e-12) and 0.0 < st.noise_variance < 1.0


def test_tiny_comparison_runs_with_equal_budget():
    X, y = _tiny()
    rows, starts = bnn.compare_samplers(
        ("sgld",), splits=(0,), budget=bnn.ComparisonBudget(n_chains=2, gradient_budget=600, tune_budget=200,
                                                            start_iter=50),
        setup=bnn.NetworkSetup(batch_size=8, draws_per_chain=10, hidden_sizes=(4,)),
        step_grids={"sgld": (1e-3, 1e-2)}, data=(X, y))
    start, r = rows
    assert start.sampler == bnn.START_ROW and start.gradient_evals_per_chain == 0
    assert r.gradient_evals_per_chain == 600 and r.n_steps == 600 and r.n_diverged == 0
    assert r.step in (1e-3, 1e-2) and len(r.val_lppd) == 2
    assert math.isfinite(r.test_lppd) and r.test_rmse > 0
    assert 0.0 < r.settings["rms_move"] < 10.0
    s = bnn.summarise(rows)
    assert s["sgld"]["n_splits"] == 1 and s["sgld"]["lppd_sd"] == 0.0 and bnn.START_ROW in s


# ----------------------------------------------------------------------------- notebook and benchmark at smoke size
ROOT = Path(__file__).resolve().parents[1]


def _env():
    # PYTHONPATH: run this checkout's sgtune even when another one is installed
    return {**os.environ, "SGTUNE_SMOKE": "1", "MPLBACKEND": "Agg",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.notebook
def test_bnn_notebook_smoke():
    out = subprocess.run([sys.executable, str(ROOT / "notebooks" / "bnn_smile.py")], cwd=ROOT, env=_env(),
                         check=True, capture_output=True, text=True, timeout=HANG_GUARD_S).stdout
    assert "best test LPPD:" in out and bnn.START_ROW in out
    # the analytic companion: pSMILE's EMA matches the predicted noise sd (median over 737 coordinates)
    line = next(s for s in out.splitlines() if s.startswith("pSMILE's EMA"))
    median = float(line.split("median")[1].split(",")[0])
    assert 0.8 < median < 1.25, line


def test_bnn_benchmark_script_smoke():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bnn_smile.py"), "--smoke", "--samplers",
                          "psmile,sgld"], cwd=ROOT, env=_env(), check=True, capture_output=True, text=True,
                         timeout=HANG_GUARD_S).stdout
    assert "| psmile" in out and "| sgld" in out and "| deep-ensemble start" in out and "test LPPD" in out


@pytest.mark.parametrize("sampler", ["sgld", "psmile"])
def test_the_trace_run_sampler_keeps_does_not_depend_on_the_batch_segments(sampler):
    """run_sampler asks for 2 batch-means segments per chain (its summary of a D = 737 network is then cheap):
    the chain, its trace and its tuned step sizes are the same, bit for bit, as with the default segments."""
    from sgtune.core.config import Dynamics, RunSpec
    from sgtune.sampler import run_chains
    from sgtune.sampler.registry import options_for

    X, y = _tiny()
    model = make_mlp((4,), noise_variance=0.5)
    init = np.stack([model.initial_params(X.shape[1], np.random.default_rng(s)) for s in (1, 2)])
    out = [run_chains(model, (X, y), Dynamics(3e-3, 8, inv_temperature=float(X.shape[0])),
                      RunSpec(300, n_chains=2, burn_in=150, thin=15, seed=4, batches_per_chain=b),
                      options_for(sampler), prior_precision=10.0, initial=init) for b in (None, 2)]
    assert out[0].n_batches > out[1].n_batches  # the segments did change
    np.testing.assert_array_equal(out[0].trace, out[1].trace)
    np.testing.assert_array_equal(out[0].diverged_at, out[1].diverged_at)
    for key in ("step_size_final", "rejection_fraction", "energy_error_mean"):
        a, b = getattr(out[0], key, None), getattr(out[1], key, None)
        assert (a is None) == (b is None) and (a is None or np.array_equal(a, b, equal_nan=True)), key
