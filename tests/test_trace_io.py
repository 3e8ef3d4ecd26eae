"""ArviZ output: ``sgtune run -o trace.nc`` round-trips through ``arviz.from_netcdf``; R-hat and ESS run on it."""
from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.core.config import Dynamics, RunSpec
from sgtune.cli import main
from sgtune.io.data import example
from sgtune.core.errors import MissingExtraError, SgtuneError
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains
from sgtune.io.trace_io import default_thin, netcdf_attrs, require_arviz, to_inference_data, write_netcdf

BASE = ["run", "--example", "logistic", "--batch-size", "64", "--step-size", "0.05", "--steps", "3000",
        "--chains", "4", "--seed", "3", "-q"]


def _arviz():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz
    return arviz


def test_cli_run_netcdf_round_trip_matches_npz_draws(tmp_path):
    az = _arviz()
    nc, npz = tmp_path / "trace.nc", tmp_path / "trace.npz"
    r = CliRunner().invoke(main, [*BASE, "--thin", "5", "-o", str(nc)])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    r2 = CliRunner().invoke(main, [*BASE, "--thin", "5", "-o", str(npz)])   # same seed → same chains
    assert r2.exit_code == 0, r2.stderr
    idata = az.from_netcdf(str(nc))
    with np.load(npz) as z:
        draws = z["draws"]
    theta = idata.posterior["theta"]
    assert theta.dims == ("chain", "draw", "theta_dim") and theta.shape == (4, 540, 5)
    np.testing.assert_array_equal(theta.values, draws)   # float64 written and read back exactly
    assert list(idata.posterior["draw"].values[:2]) == [305, 310]  # burn-in 300, every 5th step
    assert list(idata.posterior["theta_dim"].values) == [f"x{i}" for i in range(5)]
    np.testing.assert_allclose(idata.constant_data["theta_hat"].values, doc["theta_hat"], rtol=1e-15)
    np.testing.assert_allclose(idata.constant_data["step_matrix"].values, 0.05 * np.eye(5))
    a = idata.posterior.attrs
    assert a["sampler"] == "sgld" and a["seed"] == 3 and a["thin"] == 5 and a["inv_temperature"] == "inf"
    assert a["batch_size"] == 64 and a["burn_in"] == 300 and a["model"] == "logistic"
    assert a["command"].startswith("sgtune") and a["inference_library"] == "sgtune"
    # ArviZ's diagnostics run on sgtune's chains and see the (chain, draw) layout: the classic
    # Gelman–Rubin R-hat computed by hand from the .npz draws equals az.rhat(method="identity")
    c, n = draws.shape[:2]
    w = draws.var(axis=1, ddof=1).mean(axis=0)
    b = n * draws.mean(axis=1).var(axis=0, ddof=1)
    by_hand = np.sqrt(((n - 1) / n * w + b / n) / w)
    np.testing.assert_allclose(az.rhat(idata, method="identity")["theta"].values, by_hand, rtol=1e-10)
    assert np.all(np.isfinite(az.rhat(idata)["theta"].values))
    ess = az.ess(idata)["theta"].values
    assert ess.shape == (5,) and np.all((ess > 0) & np.isfinite(ess)), ess


def test_format_flag_and_errors(tmp_path):
    out = tmp_path / "t.cdf"
    r = CliRunner().invoke(main, [*BASE, "--thin", "10", "--format", "netcdf", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    assert _arviz().from_netcdf(str(out)).posterior["theta"].shape == (4, 270, 5)
    r = CliRunner().invoke(main, [*BASE[:-1], "-o", str(tmp_path / "x.nc")])  # no --thin: a default, echoed
    assert r.exit_code == 0, r.stderr
    thin = json.loads(r.stdout)["thin"]
    assert thin == default_thin(3000, None, 4, 5) == 3 and f"--thin {thin}" in r.stderr
    assert _arviz().from_netcdf(str(tmp_path / "x.nc")).posterior["theta"].shape == (4, 900, 5)
    r = CliRunner().invoke(main, [*BASE, "--thin", "10", "--format", "netcdf"])
    assert r.exit_code == 2 and "-o FILE.nc" in r.stderr


def test_missing_arviz_is_a_one_line_install_hint_and_no_file(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "arviz", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'sgtune\[arviz\]'"):
        require_arviz()
    out = tmp_path / "t.nc"
    r = CliRunner().invoke(main, [*BASE, "--thin", "10", "-o", str(out)])
    assert r.exit_code == 1 and "sgtune[arviz]" in r.stderr and not out.exists() and r.stdout == ""


def test_library_drops_diverged_chains_and_needs_a_trace(tmp_path):
    ds, m = example("logistic"), get_model("logistic")
    e = expand(m, ds)
    res = run_chains(m, ds, Dynamics(0.05, 64), RunSpec(400, n_chains=3, burn_in=100, thin=10, seed=1),
                     initial=e.theta_hat)
    res.diverged_at[1] = 50  # pretend chain 1 diverged
    idata = to_inference_data(res)
    assert list(idata.posterior["chain"].values) == [0, 2] and idata.posterior.attrs["diverged_chains"] == [1]
    np.testing.assert_array_equal(idata.posterior["theta"].values, res.trace[[0, 2]])
    write_netcdf(idata, tmp_path / "a.nc")
    assert [f.name for f in tmp_path.iterdir()] == ["a.nc"]
    res0 = run_chains(m, ds, Dynamics(0.05, 64), RunSpec(200, n_chains=2, seed=1), initial=e.theta_hat)
    with pytest.raises(SgtuneError, match=r"`thin` > 0"):
        to_inference_data(res0)


def test_netcdf_attrs_are_scalars_or_strings():
    got = netcdf_attrs({"a": np.inf, "b": True, "c": None, "d": np.int64(3), "e": 0.5, "f": "x", "g": [1, 2],
                        "h": {"k": 1}})
    assert got == {"a": "inf", "b": 1, "d": 3, "e": 0.5, "f": "x", "g": [1, 2], "h": "{'k': 1}"}


def test_default_thin_bounds_draws_per_chain_and_bytes():
    assert default_thin(3000, None, 4, 5) == 3  # 2700 draws after burn-in -> ≤ 1000 per chain
    assert default_thin(500, 0, 4, 5) == 1  # short runs keep every draw
    k = default_thin(10**6, 0, 64, 10**4)  # a wide model: the 100 MB bound decides (19 draws per chain)
    assert 0.5e8 < 8 * 64 * (10**6 // k) * 10**4 <= 1e8
