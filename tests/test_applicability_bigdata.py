"""The applicability report on data read out of core (issue 27 item 2): memory independent of N.

On a folder the report evaluates the model on a seeded random subsample of rows anchored to the
full data by control variates, with standard errors from disjoint parts of the subsample. Checked
here against independent routes: the in-memory report on all rows (the reference), the exactness of
the anchoring for a quadratic loss, a guard that fails on any read of X through the memory map, and
tracemalloc against an O(N·D) allocation.
"""
from __future__ import annotations

import dataclasses
import json
import tracemalloc

import numpy as np
import pytest
from click.testing import CliRunner

import sgtune.models.expansion as exp_mod
import sgtune.theory.applicability as app_mod
from sgtune.cli import main
from sgtune.io.data import example, load_dataset, make_dataset
from sgtune.io.reduce import NpyFile
from sgtune.models import expand, get_model
from sgtune.theory.applicability import applicability, subsample_rows
from sgtune.theory.stationary import predict_stationary_cov
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics

from scipy.stats import t as student_t

from tests._tolerances import MC_ALPHA


def _folder(path, X, y):
    path.mkdir(parents=True, exist_ok=True)
    np.save(path / "X.npy", np.ascontiguousarray(X, dtype=np.float64))
    np.save(path / "y.npy", np.asarray(y, dtype=np.float64))
    return path


def _logistic(n, d, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X[:, 0] *= 10.0  # column scales differ by ≈ 10
    theta = 2.0 * rng.standard_normal(d) / np.sqrt(d) / np.r_[10.0, np.ones(d - 1)]
    return X, (rng.random(n) < 1 / (1 + np.exp(-X @ theta))).astype(float)


class _NoRows:
    """Stands in for Dataset.X (the memory map): its shape may be read, its rows never."""

    def __init__(self, shape):
        self.shape, self.ndim, self.size = shape, 2, shape[0] * shape[1]

    def __array__(self, *a, **k):
        raise AssertionError("the report read X through the memory map")

    def __getitem__(self, key):
        raise AssertionError("the report indexed X through the memory map")


def test_report_on_a_folder_never_materialises_X(tmp_path, monkeypatch):
    """A guard in place of the memory map, counted file reads, and tracemalloc against an (N, D) allocation."""
    n, d = 400_000, 5  # X is 16 MB; the report holds ~12 arrays of M·D (M = 3000 here: 1.2 MB), independent of N
    monkeypatch.setattr(exp_mod, "CHUNK_ROWS", 4096)  # chunks of 0.7 MB: the bound is O(chunk·D + M·D), not O(N·D)
    monkeypatch.setattr(app_mod, "SUBSAMPLE_MAX_ROWS", 3000)
    X, y = _logistic(n, d)
    ds = load_dataset(_folder(tmp_path / "f", X, y))
    del X
    m = get_model("logistic")
    e = expand(m, ds, 1.0)
    st = predict_stationary_cov(e, Dynamics(0.05, 64))
    guarded = dataclasses.replace(ds, X=_NoRows(ds.X.shape))
    counts = {"read_rows": 0, "read_index": 0}
    for name in counts:
        orig = getattr(NpyFile, name)

        def counted(self, *a, _orig=orig, _name=name):
            out = _orig(self, *a)
            counts[_name] += out.shape[0] if out.ndim == 2 else 0  # rows of X
            return out
        monkeypatch.setattr(NpyFile, name, counted)
    tracemalloc.start()
    a = applicability(m, guarded, e, st)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    M = subsample_rows(n, d)
    assert a.subsample["rows"] == M < n / 10 and a.subsample["of"] == n
    assert counts["read_index"] == M  # the subsample, once
    assert counts["read_rows"] <= n  # at most one chunked pass (C̄ at the predicted Σ)
    assert peak < 8 * n * d / 4, peak  # a quarter of X would show
    assert a.conditioning["column_scale_ratio"] == pytest.approx(10.0, rel=0.05)  # the expansion's exact pass


def test_subsample_estimate_agrees_with_all_rows_within_its_standard_error(tmp_path, monkeypatch):
    """A problem where both are computable: the in-memory report on all 40 000 rows is the reference."""
    X, y = _logistic(40_000, 5, seed=7)
    m = get_model("logistic")
    mem = make_dataset(X, y)
    e = expand(m, mem, 1.0)
    st = predict_stationary_cov(e, Dynamics(0.05, 16))  # a non-quadratic effect well above rounding
    ref = applicability(m, mem, e, st).to_dict()
    monkeypatch.setattr(app_mod, "SUBSAMPLE_MAX_ROWS", 4000)
    folder = load_dataset(_folder(tmp_path / "f", X, y))
    ef = expand(m, folder, 1.0)
    sub = applicability(m, folder, ef, predict_stationary_cov(ef, Dynamics(0.05, 16))).to_dict()
    assert sub["subsample"]["rows"] == 4000 and sub["subsample"]["uncertain"] == []
    se = sub["subsample"]["standard_error"]
    # 8 parts: (estimate − truth)/SE is t-distributed with 7 degrees of freedom; 3 tests at MC_ALPHA (≈ 6.5)
    t7 = float(student_t.ppf(1 - MC_ALPHA / (2 * 3), df=app_mod.SUBSAMPLE_GROUPS - 1))
    for key, full, est in (("predicted_deviation", ref["predicted_deviation"], sub["predicted_deviation"]),
                           ("curvature_change", ref["curvature_change"]["curvature"], sub["curvature_change"]["curvature"]),
                           ("mean_shift", ref["mean_shift"], sub["mean_shift"])):
        assert 0 < se[key] < 0.2 * abs(full), (key, se[key], full)  # informative, not a blanket error bar
        assert abs(est - full) <= t7 * se[key], (key, est, full, se[key])
    assert sub["applicable"] == ref["applicable"] is True
    assert sub["conditioning"]["column_scale_ratio"] == pytest.approx(ref["conditioning"]["column_scale_ratio"],
                                                                      rel=1e-12)


def test_anchored_subsample_is_exact_for_a_quadratic_loss(tmp_path, monkeypatch):
    """Linear regression: the control variates cancel every subsample term, so Σ_SL = Σ to rounding."""
    ds = example("hetero-linear")
    monkeypatch.setattr(app_mod, "SUBSAMPLE_MAX_ROWS", 500)
    folder = load_dataset(_folder(tmp_path / "f", ds.X, ds.y))
    m = get_model("linear")
    e = expand(m, folder)
    st = predict_stationary_cov(e, Dynamics(0.05, 32))
    a = applicability(m, folder, e, st)
    assert a.subsample["rows"] == 500 < folder.n_data
    assert a.applicable and a.predicted_deviation < 1e-9 and a.curvature_change["curvature"] < 1e-9
    np.testing.assert_allclose(a.linearised_cov, st.cov, rtol=1e-8, atol=1e-14)


@pytest.mark.parametrize("name, prior, batch", [("beta-linear", 0.0, 32), ("logistic", 0.0, 32)])
def test_small_folder_reads_every_row_and_decides_as_in_memory(tmp_path, name, prior, batch):
    """N ≤ the subsample size: every row is read (no estimate) and the report is the in-memory one."""
    model = get_model("beta-linear", beta_power=1.5) if name == "beta-linear" else get_model(name)
    ds = example("hetero-linear", seed=1) if name == "beta-linear" else example(name)
    folder = load_dataset(_folder(tmp_path / "f", ds.X, ds.y))
    out = []
    for data in (ds, folder):
        e = expand(model, data, prior)
        res = tune(e, Dynamics(None, batch))
        out.append(applicability(model, data, e, res.stationary, target_cov=res.target_cov))
    mem, disk = out
    assert disk.subsample is None and mem.applicable == disk.applicable and len(mem.reasons) == len(disk.reasons)
    assert disk.predicted_deviation == pytest.approx(mem.predicted_deviation, rel=1e-6)
    assert (name == "beta-linear") == (not mem.applicable)  # the gallery's verdicts


@pytest.mark.parametrize("cmd", ["lambda", "covariance", "calibrate", "plan"])
def test_no_applicability_is_reported_in_the_json_and_warned(cmd):
    extra = {"lambda": ["--batch-size", "32"], "covariance": ["--batch-size", "32", "--step-size", "0.5"],
             "calibrate": ["--batch-size", "32", "--steps", "2000", "--chains", "2"],
             "plan": ["--tolerance", "0.2", "--no-timing"]}[cmd]
    strict = [] if cmd == "calibrate" else ["--strict"]  # a short calibrate run's chain health may exit 4
    r = CliRunner().invoke(main, [cmd, "--example", "logistic", *extra, "--no-applicability", "-q", *strict])
    assert r.exit_code == 0, r.stderr  # a warning, not an untrusted result
    doc = json.loads(r.stdout)
    assert doc["applicability"]["checked"] is False and doc["applicability"]["reason"] == "--no-applicability"
    assert any("applicability not checked (--no-applicability)" in w for w in doc["warnings"])
    assert "warning: applicability not checked" in r.stderr
    assert "--no-applicability" in CliRunner().invoke(main, [cmd, "--help"]).stdout


def test_refine_needs_the_report():
    r = CliRunner().invoke(main, ["lambda", "--example", "logistic", "--batch-size", "32", "--refine", "2",
                                  "--no-applicability"])
    assert r.exit_code == 2 and "--no-applicability" in r.stderr and "Traceback" not in r.stderr


def test_checked_report_says_so():
    r = CliRunner().invoke(main, ["lambda", "--example", "logistic", "--batch-size", "32", "-q"])
    app = json.loads(r.stdout)["applicability"]
    assert app["checked"] is True and app["subsample"] is None  # in memory: every row


def test_a_decision_within_its_standard_errors_is_warned(tmp_path, monkeypatch):
    """With the band around each threshold made huge, every estimated decision is uncertain: said on stderr."""
    X, y = _logistic(40_000, 5, seed=7)
    folder = _folder(tmp_path / "f", X, y)
    monkeypatch.setattr(app_mod, "SUBSAMPLE_MAX_ROWS", 4000)
    args = ["lambda", str(folder), "--model", "logistic", "--prior-precision", "1", "--batch-size", "16", "-q"]
    doc = json.loads(CliRunner().invoke(main, args).stdout)
    assert doc["applicability"]["subsample"]["uncertain"] == [] and doc["warnings"] == []
    monkeypatch.setattr(app_mod, "UNCERTAIN_Z", 1e12)
    r = CliRunner().invoke(main, args)
    doc = json.loads(r.stdout)
    uncertain = doc["applicability"]["subsample"]["uncertain"]
    assert len(uncertain) == 2 and doc["applicability"]["applicable"] is True  # the verdict stays the estimate's
    assert r.stderr.count("applicability estimated on a random subsample of 4000 of the 40000 rows") == 2
