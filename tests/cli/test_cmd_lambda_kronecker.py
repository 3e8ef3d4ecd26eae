"""``sgtune lambda --family kronecker``: a network's per-layer factors as .npz, per-layer summaries in the JSON."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.core.config import Dynamics
from sgtune.models import MLP
from sgtune.theory.kronecker import tune_kronecker
from sgtune.theory.kronecker import KroneckerTuning


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3))
    y = np.tanh(X[:, 0] - X[:, 1]) + 0.3 * rng.normal(size=300)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    np.savez(tmp_path / "c.npz", X=X, y=(y > 0).astype(float))
    net = MLP((4,))
    theta = net.initial_params(3, rng)
    np.save(tmp_path / "theta.npy", theta)
    (tmp_path / "net.py").write_text(
        "import torch\ntorch.manual_seed(0)\n"
        "NET = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))\n")
    return tmp_path, X, y, net, theta


def test_mlp_writes_the_factors_and_the_layers(files):
    tmp, X, y, net, theta = files
    out, js = tmp / "lam.npz", tmp / "lam.json"
    r = CliRunner().invoke(main, ["lambda", str(tmp / "d.npz"), "--model", "mlp", "--hidden-sizes", "4",
                                  "--theta-hat", str(tmp / "theta.npy"), "--family", "kronecker", "--batch-size", "30",
                                  "--inverse-temperature", "2N", "--prior-precision", "1", "--momentum", "0.3",
                                  "--target", "posterior", "-o", str(out), "--json", str(js)])
    assert r.exit_code == 0, r.stderr
    assert "kronecker: layer 1/2 hidden1 (4×4)" in r.stderr and "layer 2/2 output (1×5)" in r.stderr
    doc = json.loads(js.read_text())
    assert doc["family"] == "kronecker" and [lay["name"] for lay in doc["layers"]] == ["hidden1", "output"]
    assert any("factored" in w for w in doc["warnings"])
    back = KroneckerTuning.load(out)
    ref = tune_kronecker(net, (X, y), Dynamics(None, batch_size=30, inv_temperature=600.0, momentum=0.3),
                         theta=theta, prior_precision=1.0)
    g = np.random.default_rng(0).normal(size=(3, ref.dim))
    assert np.allclose(back.apply(g), ref.apply(g), rtol=1e-12)
    assert doc["layers"] == json.loads(json.dumps(ref.to_dict()["layers"]))


def test_torch_network_file(files):
    pytest.importorskip("curvlinops")
    tmp = files[0]
    r = CliRunner().invoke(main, ["lambda", str(tmp / "c.npz"), "--model", f"{tmp / 'net.py'}:NET", "--likelihood",
                                  "bernoulli", "--family", "kronecker", "--batch-size", "20", "--inverse-temperature",
                                  "2N", "--prior-precision", "1", "--target", "posterior", "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [lay["name"] for lay in doc["layers"]] == ["0", "2"] and doc["factors_from"] == "curvlinops"
    assert doc["dim"] == 3 * 6 + 6 + 6 + 1 and doc["covariance_error"] < 1e-10


@pytest.mark.parametrize("extra,match", [
    (["--target", "t.npy"], "--family kronecker takes --target posterior or sandwich"),
    (["-o", "lam.npy"], "writes its per-layer factors as an .npz file"),
    (["--method", "ct"], "--method is not an option of --family kronecker"),
])
def test_bad_options_exit_2(files, extra, match):
    tmp = files[0]
    r = CliRunner().invoke(main, ["lambda", str(tmp / "d.npz"), "--model", "mlp", "--hidden-sizes", "4",
                                  "--theta-hat", str(tmp / "theta.npy"), "--family", "kronecker", "--batch-size", "30",
                                  *extra])
    assert r.exit_code == 2 and match in r.stderr and "Traceback" not in r.stderr


def test_glm_and_dense_npz_are_refused(files):
    tmp = files[0]
    r = CliRunner().invoke(main, ["lambda", str(tmp / "d.npz"), "--model", "linear", "--family", "kronecker",
                                  "--batch-size", "30"])
    assert r.exit_code == 2 and "--family kronecker is for networks" in r.stderr
    r = CliRunner().invoke(main, ["lambda", str(tmp / "d.npz"), "--model", "linear", "--batch-size", "30",
                                  "-o", str(tmp / "lam.npz")])
    assert r.exit_code == 2 and "per-layer factors of --family kronecker" in r.stderr


def test_applicability_above_the_size_cap_is_skipped_with_a_warning(files, monkeypatch):
    """Over CHECK_MAX_DIM the matrix-free checks (minutes of full-data products) are skipped, never silently."""
    import sgtune.workflows.kronecker_applicability as ka

    monkeypatch.setattr(ka, "CHECK_MAX_DIM", 10)
    tmp = files[0]
    r = CliRunner().invoke(main, ["lambda", str(tmp / "d.npz"), "--model", "mlp", "--hidden-sizes", "4",
                                  "--theta-hat", str(tmp / "theta.npy"), "--family", "kronecker", "--batch-size", "30",
                                  "--inverse-temperature", "2N", "--prior-precision", "1", "--target", "posterior",
                                  "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["applicability"]["checked"] is False and "D = 21 > 10" in doc["applicability"]["reason"]
    assert any("applicability report was skipped" in w for w in doc["warnings"])
    assert "applicability report was skipped" in r.stderr
