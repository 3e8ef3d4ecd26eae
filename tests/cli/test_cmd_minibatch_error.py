"""CLI tests of ``sgtune minibatch-error`` (CliRunner; JSON from result.stdout)."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main


@pytest.fixture
def data_file(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 2))
    y = X @ np.array([1.0, -0.5]) + rng.standard_normal(5)
    path = tmp_path / "d.npz"
    np.savez(path, X=X, y=y)
    theta = np.array([0.3, 0.2])
    tpath = tmp_path / "theta.npy"
    np.save(tpath, theta)
    return path, tpath, X, y, theta


def _run(args):
    return CliRunner().invoke(main, ["minibatch-error", *map(str, args)])


@pytest.mark.parametrize("replacement", [True, False])
def test_json_matches_enumeration_of_every_batch(data_file, replacement):
    """Linear model, σ² = 2, Γ = 0.5·I; oracle: enumerate all batches from eq. (6)/(93) directly."""
    path, tpath, X, y, theta = data_file
    s2, gam, b = 2.0, 0.5, 2
    args = [path, "--model", "linear", "--theta", tpath, "--batch-size", b, "--noise-variance", s2,
            "--prior-precision", gam]
    if not replacement:
        args.append("--without-replacement")
    res = _run(args)
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    n = len(y)
    loglik = (y - X @ theta)[:, None] * X / s2            # ∇log p(y_i|x_i, θ)
    grad_u = gam * theta - loglik.sum(0)
    batches = itertools.product(range(n), repeat=b) if replacement else itertools.combinations(range(n), b)
    f = o = 0.0
    G = np.zeros((2, 2))
    k = 0
    for bt in batches:
        ghat = gam * theta - (n / b) * loglik[list(bt)].sum(0)
        M = np.outer(ghat, ghat) - np.outer(grad_u, grad_u)    # eq. (93) for SGLD
        f += np.sum(M * M)
        o += 2 * M[0, 1] ** 2
        G += np.outer(ghat - grad_u, ghat - grad_u)
        k += 1
    # tolerance: exact formula vs exact enumeration, both float64 (issue target 1e-12)
    assert doc["frob2_sgld"] == pytest.approx(f / k, rel=1e-12)
    assert doc["frob2_sglrw"] == pytest.approx(o / k, rel=1e-12)
    assert doc["ratio"] == pytest.approx(o / f, rel=1e-11)
    assert doc["diagonal_share"] == pytest.approx(1 - o / f, rel=1e-11)
    np.testing.assert_allclose(doc["expected_m_sgld"], G / k, rtol=1e-12)
    np.testing.assert_allclose(doc["expected_m_sglrw"], (G / k) * (1 - np.eye(2)), rtol=1e-12, atol=0)
    assert doc["replacement"] is replacement
    assert doc["batch_size"] == b


def test_default_theta_is_the_map_and_output_file(data_file, tmp_path):
    path, _, X, y, _ = data_file
    out = tmp_path / "G.npy"
    res = _run([path, "--model", "linear", "--batch-size", 3, "--step-size", 0.01, "-o", out])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    theta_ls = np.linalg.lstsq(X, y, rcond=None)[0]
    np.testing.assert_allclose(doc["theta"], theta_ls, rtol=1e-8)
    assert doc["theta_source"] == "map"
    np.testing.assert_allclose(np.load(out), doc["expected_m_sgld"], rtol=0, atol=0)
    assert doc["e_cov_sgld"] == pytest.approx(1e-4 * doc["frob2_sgld"], rel=1e-14)


def test_error_theta_wrong_length(data_file, tmp_path):
    path, _, _, _, _ = data_file
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros(3))
    res = _run([path, "--model", "linear", "--theta", bad, "--batch-size", 2])
    assert res.exit_code == 1
    assert "--theta must hold D = 2" in res.stderr


@pytest.mark.parametrize("command", ["minibatch-error", "noise-anisotropy"])
def test_error_theta_not_numeric(data_file, tmp_path, command):
    path, *_ = data_file
    bad = tmp_path / "words.npy"
    np.save(bad, np.array(["a", "b"]))
    res = CliRunner().invoke(main, [command, str(path), "--model", "linear", "--theta", str(bad),
                                    "--batch-size", "2"])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --theta: ") and "is not numeric" in lines[0]


def test_error_batch_size_too_large(data_file):
    path, tpath, *_ = data_file
    res = _run([path, "--model", "linear", "--theta", tpath, "--batch-size", 9])
    assert res.exit_code == 2  # an out-of-range option value is a usage error, as the help says
    assert "--batch-size must be in [1, N = 5]" in res.stderr


def test_error_missing_model(data_file):
    path, tpath, *_ = data_file
    res = _run([path, "--theta", tpath, "--batch-size", 2])
    assert res.exit_code == 2
    assert "--model is required" in res.stderr


def test_refuses_to_overwrite_output(data_file, tmp_path):
    path, tpath, *_ = data_file
    out = tmp_path / "G.npy"
    out.write_bytes(b"x")
    res = _run([path, "--model", "linear", "--theta", tpath, "--batch-size", 2, "-o", out])
    assert res.exit_code == 1
    assert "already exists" in res.stderr
    assert out.read_bytes() == b"x"


@pytest.mark.parametrize("command", ["minibatch-error", "noise-anisotropy"])
def test_unserialisable_document_leaves_no_array_file(data_file, tmp_path, monkeypatch, command):
    """The JSON document is serialised before the -o array is written: no partial output."""
    path, tpath, *_ = data_file
    def refuse(doc):
        raise ValueError("non-finite number at $.x")

    monkeypatch.setattr("sgtune.cli._io.dumps", refuse)
    out = tmp_path / "o.npy"
    res = CliRunner().invoke(main, [command, str(path), "--model", "linear", "--theta", str(tpath),
                                    "--batch-size", "2", "-o", str(out)])
    assert res.exit_code == 1 and "internal error (ValueError: non-finite number" in res.stderr
    assert not out.exists()


# ----------------------------------------------------------------------------- noise-anisotropy
def test_noise_anisotropy_json_matches_dense_covariance(data_file):
    path, tpath, X, y, theta = data_file
    res = CliRunner().invoke(main, ["noise-anisotropy", str(path), "--model", "linear", "--theta", str(tpath),
                                    "--batch-size", "2", "--without-replacement"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    g = (y - X @ theta)[:, None] * X                 # ∇log p(y_i|x_i, θ), σ² = 1
    n, b = len(y), 2
    V = (n**2 / b) * (n - b) / (n - 1) * np.cov(g.T, bias=True)
    np.testing.assert_allclose(doc["noise_cov"], V, rtol=1e-12)
    lam = np.linalg.eigvalsh(V)
    assert doc["condition_number"] == pytest.approx(lam[-1] / lam[0], rel=1e-10)
    assert doc["residual_condition_number_cholesky"] == pytest.approx(1.0, abs=1e-10)


def test_noise_anisotropy_error_theta_length(data_file, tmp_path):
    path, *_ = data_file
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros(4))
    res = CliRunner().invoke(main, ["noise-anisotropy", str(path), "--model", "linear", "--theta", str(bad),
                                    "--batch-size", "2"])
    assert res.exit_code == 1
    assert "--theta must hold D = 2" in res.stderr
