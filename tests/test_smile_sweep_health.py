"""Found by ``benchmarks/smile_sweep.py``: SMILE results that could be wrong without a warning."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from sgtune.cli import main


def test_run_checks_a_smile_posterior_above_200_dimensions(tmp_path):
    """``run`` skipped its prediction check above D = 200 (the SGLD prediction is a Lyapunov solve); the
    posterior samplers' prediction is only (βH)⁻¹, so a smile/psmile chain with D > 200 that is off its posterior
    carried no warning. Here: D = 210, 400 steps from θ̂ (far from mixed, so the check must see it); the run
    now has a posterior check, and its verdict is a warning on stderr (with -q) and in the JSON."""
    rng = np.random.default_rng(5)
    n, d = 1000, 210
    X = rng.standard_normal((n, d)) * np.linspace(0.2, 3.0, d)
    y = X @ (rng.standard_normal(d) * 0.1) + rng.standard_normal(n)
    np.savez(tmp_path / "wide.npz", X=X, y=y)
    r = CliRunner().invoke(main, ["run", str(tmp_path / "wide.npz"), "--model", "linear", "--sampler", "smile",
                                  "--batch-size", "32", "--step-size", "0.01", "--steps", "400", "--chains", "2",
                                  "--seed", "1", "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    check = doc["health"]["prediction_check"]
    assert check is not None and check["mode"] == "posterior", doc["health"].get("prediction_note")
    # 2 × 400 steps in 210 dimensions are nowhere near mixed: the check fails, and that is said
    assert check["passed"] is False
    assert "unhealthy chains: the chains disagree with the posterior covariance" in r.stderr
    assert any("posterior covariance" in w for w in doc["warnings"])
