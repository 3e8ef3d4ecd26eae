"""``sgtune verify/run --lambda L.npz``: a Kronecker-factored Λ's chain on the real network, probes in the JSON."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main

pytest.importorskip("curvlinops")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def tuned(tmp_path):
    """A linear torch layer on well-specified Gaussian data (the family is exact there up to the noise model)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 2))
    y = X @ np.array([1.0, -0.5]) + rng.normal(size=400)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    w = np.linalg.lstsq(np.column_stack([X, np.ones(400)]), y, rcond=None)[0]
    (tmp_path / "net.py").write_text(
        "import torch\nNET = torch.nn.Linear(2, 1).double()\nwith torch.no_grad():\n"
        f"    NET.weight.copy_(torch.tensor([[{float(w[0])!r}, {float(w[1])!r}]]))\n    NET.bias.fill_({float(w[2])!r})\n")
    r = CliRunner().invoke(main, ["lambda", str(tmp_path / "d.npz"), "--model", f"{tmp_path / 'net.py'}:NET",
                                  "--family", "kronecker", "--batch-size", "20", "--inverse-temperature", "2N",
                                  "--target", "posterior", "-o", str(tmp_path / "lam.npz"), "-q", "--no-applicability"])
    assert r.exit_code == 0, r.stderr
    return tmp_path


def test_verify_reports_probes_and_applicability(tuned):
    r = CliRunner().invoke(main, ["verify", str(tuned / "d.npz"), "--model", f"{tuned / 'net.py'}:NET",
                                  "--lambda", str(tuned / "lam.npz"), "--batch-size", "20", "--steps", "6000", "-q",
                                  "--json", str(tuned / "v.json")])
    doc = json.loads((tuned / "v.json").read_text())
    assert r.exit_code in (0, 3), r.stderr
    assert (r.exit_code == 0) == doc["passed"]
    assert doc["family"] == "kronecker" and doc["mode"] == "probes" and doc["dim"] == 3
    labels = [p["label"] for p in doc["probes"]]
    assert labels[:4] == [f"random {i}" for i in range(4)] and "linear least" in labels
    for p in doc["probes"]:
        assert p["mcse"] > 0 and p["predicted"] > 0
        z = (p["measured"] - p["predicted"]) / np.hypot(p["mcse"], 0.1 * p["predicted"])
        assert p["z_with_tolerance"] == pytest.approx(z, rel=1e-12)
    assert doc["applicability"]["stable"] is True
    assert doc["batch_size"] == 20 and doc["relative_tolerance"] == 0.1


def test_run_reports_probes_and_mismatch_is_refused(tuned):
    r = CliRunner().invoke(main, ["run", str(tuned / "d.npz"), "--model", f"{tuned / 'net.py'}:NET",
                                  "--lambda", str(tuned / "lam.npz"), "--batch-size", "20", "--steps", "2000", "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["family"] == "kronecker" and not doc["diverged"] and len(doc["probes"]) == 6
    np.savez(tuned / "e.npz", X=np.zeros((10, 2)), y=np.zeros(10))
    r = CliRunner().invoke(main, ["run", str(tuned / "e.npz"), "--model", f"{tuned / 'net.py'}:NET",
                                  "--lambda", str(tuned / "lam.npz"), "--batch-size", "5", "--steps", "100"])
    assert r.exit_code != 0 and "was tuned on N = 400 rows" in r.stderr and "Traceback" not in r.stderr
    r = CliRunner().invoke(main, ["verify", str(tuned / "d.npz"), "--model", f"{tuned / 'net.py'}:NET",
                                  "--lambda", str(tuned / "nope.npz"), "--batch-size", "20"])
    assert r.exit_code != 0 and "no such file" in r.stderr and "Traceback" not in r.stderr


def test_lambda_kronecker_prior_eigenbasis(tuned):
    from sgtune.theory.kronecker import KroneckerTuning

    r = CliRunner().invoke(main, ["lambda", str(tuned / "d.npz"), "--model", f"{tuned / 'net.py'}:NET",
                                  "--family", "kronecker", "--kronecker-prior", "eigenbasis", "--batch-size", "20",
                                  "--inverse-temperature", "2N", "--prior-precision", "1", "--target", "posterior",
                                  "-o", str(tuned / "eig.npz"), "-q", "--no-applicability"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["layers"][0]["prior"] == "eigenbasis" and doc["applicability"]["checked"] is False
    assert KroneckerTuning.load(tuned / "eig.npz").layers[0].form == "eigenbasis"


def test_verify_honours_chains_independent_and_pooled(tuned):
    """--chains C: C independent torch chains (seeds s + 2c, the probes of seed s), the probes' variance their mean
    and its MCSE √(Σ MCSE_c²)/C; recomputed here chain by chain with probe_check."""
    import torch

    from sgtune.theory.kronecker import KroneckerTuning
    from sgtune.workflows.kronecker_probes import probe_check

    r = CliRunner().invoke(main, ["verify", str(tuned / "d.npz"), "--model", f"{tuned / 'net.py'}:NET",
                                  "--lambda", str(tuned / "lam.npz"), "--batch-size", "20", "--steps", "1500",
                                  "--chains", "3", "--seed", "7", "-q",
                                  "--json", str(tuned / "v.json")])
    assert r.exit_code in (0, 3), r.stderr
    doc = json.loads((tuned / "v.json").read_text())
    assert doc["n_chains"] == 3 and doc["seed"] == 7
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 2))
    y = X @ np.array([1.0, -0.5]) + rng.normal(size=400)
    ns: dict = {}
    exec((tuned / "net.py").read_text(), ns)
    res = KroneckerTuning.load(tuned / "lam.npz")
    runs = [probe_check(res, ns["NET"], X, y, steps=1500, n_random=4, seed=7 + 2 * c, probe_seed=7) for c in range(3)]
    assert all(pc.labels == runs[0].labels for pc in runs)
    assert not np.allclose(runs[0].measured, runs[1].measured, rtol=1e-6)  # independent, not one chain thrice
    measured = np.array([p["measured"] for p in doc["probes"]])
    mcse = np.array([p["mcse"] for p in doc["probes"]])
    np.testing.assert_allclose(measured, np.mean([pc.measured for pc in runs], axis=0), rtol=1e-10)
    np.testing.assert_allclose(mcse, np.sqrt(np.sum([pc.mcse ** 2 for pc in runs], axis=0)) / 3, rtol=1e-10)
    from scipy.stats import t as student_t

    k, K = len(doc["probes"]), doc["n_batches"]
    assert doc["threshold"] == pytest.approx(student_t.ppf(1 - doc["alpha"] / (2 * k), 3 * (K - 1)), rel=1e-12)
    assert torch.get_num_threads() == 1
    r = CliRunner().invoke(main, ["verify", str(tuned / "d.npz"), "--model", f"{tuned / 'net.py'}:NET",
                                  "--lambda", str(tuned / "lam.npz"), "--batch-size", "20", "--steps", "1500",
                                  "--chains", "0", "-q"])
    assert r.exit_code == 2 and "--chains" in r.stderr and "Traceback" not in r.stderr


def test_verify_without_chains_runs_one_chain(tuned):
    """The shared default of --chains (16, for the compiled sampler) is not 16 PyTorch runs: one chain, seed s."""
    r = CliRunner().invoke(main, ["run", str(tuned / "d.npz"), "--model", f"{tuned / 'net.py'}:NET",
                                  "--lambda", str(tuned / "lam.npz"), "--batch-size", "20", "--steps", "1000", "-q"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["n_chains"] == 1


def test_verify_applicability_above_the_size_cap_is_skipped_with_a_warning(tuned, monkeypatch):
    """Over CHECK_MAX_DIM verify skips the matrix-free checks (minutes of full-data products), never silently: the
    probes are still measured."""
    import sgtune.workflows.kronecker_applicability as ka

    def boom(*a, **k):
        raise AssertionError("the checks must not run above the cap")

    monkeypatch.setattr(ka, "CHECK_MAX_DIM", 2)
    monkeypatch.setattr(ka, "kronecker_applicability", boom)
    r = CliRunner().invoke(main, ["verify", str(tuned / "d.npz"), "--model", f"{tuned / 'net.py'}:NET",
                                  "--lambda", str(tuned / "lam.npz"), "--batch-size", "20", "--steps", "1500", "-q",
                                  "--json", str(tuned / "v.json")])
    assert r.exit_code in (0, 3), r.stderr
    doc = json.loads((tuned / "v.json").read_text())
    assert "applicability" not in doc and len(doc["probes"]) == 6
    assert any("D = 3 > 2" in w and "skipped" in w for w in doc["warnings"])
    assert "D = 3 > 2" in r.stderr
