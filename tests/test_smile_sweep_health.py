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


def _fake(**kw):
    from types import SimpleNamespace

    base = dict(diverged_at=-np.ones(4, dtype=int), n_chains=4, n_steps=10_000, burn_in=1000,
                ess=np.full(3, 5000.0), half_means=None, half_variances=None)
    base.update(kw)
    return SimpleNamespace(**base)


def test_anchored_step_far_below_a_far_too_large_start_is_no_collapse():
    """The sweep started the anchored tuner at 0.1 on an unscaled logistic regression whose anchored ε is 7.6e-5:
    ε ended 7.5e-4 × the start — the same ε as from a start at 0.001 — and the health check called it collapsed.
    Under the anchored tuner a collapse is ε still falling at the end of its trace; the paper's rule (and a run of
    unknown tuner) keeps the ratio rule."""
    from sgtune.diagnostics.health import STEP_COLLAPSE, chain_health

    final = np.full(4, 0.1 * STEP_COLLAPSE / 2)
    settled = np.tile(np.r_[np.geomspace(0.1, final[0], 10), np.full(90, final[0])], (4, 1))
    h = chain_health(_fake(step_size_final=final, step_size_trace=settled, settings={"tuner": "anchored"}),
                     initial_step_size=0.1)
    assert h.healthy and not h.frozen and h.details["step_size_still_falling"] is False
    assert h.details["step_size_ratio_min"] < STEP_COLLAPSE
    h = chain_health(_fake(step_size_final=final, settings={"tuner": "anchored"}), initial_step_size=0.1)
    assert h.healthy  # no trace: no evidence of a collapse (frozen chains are the effective draws' check)
    falling = np.tile(np.geomspace(0.1, final[0], 100), (4, 1))
    h = chain_health(_fake(step_size_final=final, step_size_trace=falling, settings={"tuner": "anchored"}),
                     initial_step_size=0.1)
    assert h.frozen and "collapsed" in h.reasons[0]
    for settings in ({"tuner": "paper"}, {}):
        h = chain_health(_fake(step_size_final=final, step_size_trace=settled, settings=settings),
                         initial_step_size=0.1)
        assert h.frozen and "collapsed" in h.reasons[0]


def test_run_from_a_far_too_large_start_has_no_collapse_warning(tmp_path):
    """Through the CLI (the sweep's run, shorter): the anchored ε from ε₀ = 0.1 on an unscaled logistic regression
    ends ≈ 10⁻³·⁵ × ε₀, held at its fixed point; no "collapsed" on stderr or in the JSON, with or without a trace."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((4000, 6)) * np.array([1.0, 10.0, 100.0, 300.0, 1000.0, 1.0])
    y = (rng.random(4000) < 1 / (1 + np.exp(-X @ (rng.standard_normal(6) / np.array([1, 10, 100, 300, 1000, 1]))))
         ).astype(float)
    np.savez(tmp_path / "u.npz", X=X, y=y)
    base = ["run", str(tmp_path / "u.npz"), "--model", "logistic", "--sampler", "smile", "--batch-size", "32",
            "--step-size", "3", "--steps", "6000", "--chains", "2", "--seed", "1", "-q"]
    for extra in ([], ["--thin", "20", "-o", str(tmp_path / "t.npz")]):
        r = CliRunner().invoke(main, [*base, *extra])
        assert r.exit_code == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["health"]["step_size_ratio_min"] < 1e-3, doc["step_size_final"]  # the case in question
        assert "collapsed" not in r.stderr and not any("collapsed" in w for w in doc["warnings"])
        assert doc["health"]["frozen"] is False or "effective draws" in r.stderr
