"""``sgtune ksd`` per docs/cli.rst: keys, the score convention against a closed form, errors with no partial file."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.diagnostics.ksd import imq_stein_kernel


def _linear_npz(tmp_path, rng, n_data=300, dim=3):
    X = rng.standard_normal((n_data, dim))
    y = X @ np.array([0.5, -1.0, 0.25]) + rng.standard_normal(n_data)
    path = tmp_path / "d.npz"
    np.savez(path, X=X, y=y)
    return path, X, y


def test_ksd_matches_dense_stein_kernel_with_conjugate_scores(tmp_path, rng):
    """The CLI's score convention: s(θ) = −Σ∇l_n − Γθ = −P(θ − μ) with P = XᵀX/σ² + Γ (conjugate)."""
    data, X, y = _linear_npz(tmp_path, rng)
    gam, s2 = 3.0, 0.5
    P = X.T @ X / s2 + gam * np.eye(3)
    mu = np.linalg.solve(P, X.T @ y / s2)
    th = mu + 0.05 * rng.standard_normal((40, 3))
    np.save(tmp_path / "s.npy", th)
    r = CliRunner().invoke(main, ["ksd", str(data), "--model", "linear", "--noise-variance", str(s2),
                                  "--samples", str(tmp_path / "s.npy"), "--prior-precision", str(gam), "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    s = -(th - mu) @ P
    want = np.sqrt(imq_stein_kernel(th, th, s, s).mean())
    assert doc["n_samples"] == 40 and abs(doc["ksd"] / want - 1) < 1e-9
    assert abs(doc["ksd_squared"] - want**2) <= 1e-9 * want**2
    assert doc["ksd_iid_reference"] > 0 and doc["kernel"].startswith("imq") and doc["dim"] == 3


def test_ksd_accepts_a_chain_trace_and_writes_json_file(tmp_path, rng):
    data, X, y = _linear_npz(tmp_path, rng)
    tr = 0.1 * rng.standard_normal((2, 15, 3))
    np.save(tmp_path / "t.npy", tr)
    out = tmp_path / "k.json"
    r = CliRunner().invoke(main, ["ksd", str(data), "--model", "linear", "--samples", str(tmp_path / "t.npy"),
                                  "--json", str(out), "--block", "7"])
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "" and json.loads(out.read_text())["n_samples"] == 30
    assert "KSD" in r.stderr


def test_ksd_errors_exit_1_with_one_line_and_no_file(tmp_path, rng):
    data, X, y = _linear_npz(tmp_path, rng)
    np.save(tmp_path / "bad.npy", np.zeros((5, 4)))
    out = tmp_path / "k.json"
    base = ["ksd", str(data), "--model", "linear", "--json", str(out), "--samples"]
    r = CliRunner().invoke(main, [*base, str(tmp_path / "bad.npy")])
    assert r.exit_code == 1 and "--samples must be (n, D) = (n, 3)" in r.stderr and not out.exists()
    nan = np.zeros((5, 3))
    nan[2, 1] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    r = CliRunner().invoke(main, [*base, str(tmp_path / "nan.npy")])
    assert r.exit_code == 1 and "row 2" in r.stderr and not out.exists()
    r = CliRunner().invoke(main, [*base, str(tmp_path / "nope.npy")])
    assert r.exit_code == 1 and "does not exist" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    np.save(tmp_path / "ok.npy", np.zeros((5, 3)))
    r = CliRunner().invoke(main, [*base, str(tmp_path / "ok.npy"), "--block", "0"])
    assert r.exit_code == 2 and "--block" in r.stderr and not out.exists()


def test_ksd_uses_the_models_parameter_dimension_not_the_covariates(tmp_path, rng):
    """mlp with 5 covariates and one hidden layer of 2: D = 2·5 + 2 + 1·2 + 1 = 15 parameters."""
    np.save(tmp_path / "s.npy", 0.1 * rng.standard_normal((20, 15)))
    base = ["ksd", "--example", "logistic", "--model", "mlp", "--hidden-sizes", "2", "--likelihood", "bernoulli",
            "-q", "--samples"]
    r = CliRunner().invoke(main, [*base, str(tmp_path / "s.npy")])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dim"] == 15 and doc["n_samples"] == 20 and doc["ksd"] > 0
    np.save(tmp_path / "bad.npy", np.zeros((20, 5)))
    r = CliRunner().invoke(main, [*base, str(tmp_path / "bad.npy")])
    assert r.exit_code == 1 and "(n, D) = (n, 15)" in r.stderr
