"""The one run-length policy of the workflows (sgtune.workflows.run_length) and where it is used."""
from __future__ import annotations

import math

import pytest

from sgtune.core.errors import SgtuneError
from sgtune.theory.linear_chain import equilibration_steps
from sgtune.workflows import run_length as rl


def test_default_length_and_burn_in_follow_tau():
    assert rl.default_steps(1.0) == 20_000 and rl.default_steps(math.nan) == 20_000
    assert rl.default_steps(50.5) == 50_500  # 1000·τ above the floor
    # a tenth of the run, 20 τ, or the equilibration steps, whichever is largest; at most half the run
    assert rl.burn_in_steps(3.0, total=20_000) == 2000
    assert rl.burn_in_steps(300.0, total=20_000) == 6000
    assert rl.burn_in_steps(3000.0, total=20_000) == 10_000
    rho = 1 - 1e-4  # slow second moments with a short τ: equilibration decides
    assert rl.burn_in_steps(2.0, rho, kept=1000) == equilibration_steps(rho) > 20 * 2
    assert rl.burn_in_steps(2.0, math.nan, kept=1000) == 100
    with pytest.raises(SgtuneError):
        rl.burn_in_steps(2.0)


def test_length_from_a_target_error_and_thinning_from_a_budget():
    # Var = c/(C·T) ≤ v: T = ⌈c/(C·v)⌉, and one step fewer misses it
    c, C, v = 37.0, 4, 0.01 ** 2
    T = rl.steps_for_error(c, C, v)
    assert c / (C * T) <= v < c / (C * (T - 1))
    with pytest.raises(SgtuneError):
        rl.steps_for_error(math.inf, C, v)
    with pytest.raises(SgtuneError):
        rl.steps_for_error(c, C, 0.0)
    # at most 2000 pooled draws of 4 chains × 9000 kept steps: every 18th, 4·500 = 2000 draws
    k = rl.thinning(9000, 4, max_draws=2000)
    assert 4 * (9000 // k) <= 2000 < 4 * (9000 // (k - 1))
    k = rl.thinning(9000, 4, min_draws=4000)  # at least 4000 per chain
    assert 9000 // k >= 4000 and 9000 // (k + 1) < 4000
    assert rl.thinning(9000, 4) == 0


def test_run_spec_uses_given_values_as_they_are():
    r = rl.run_spec(2.0, n_chains=8, seed=3)
    assert (r.n_steps, r.burn_in, r.thin, r.n_chains, r.seed) == (20_000, 2000, 0, 8, 3)
    r = rl.run_spec(2.0, n_chains=8, n_steps=5000, burn_in=7, max_draws=100)
    assert (r.n_steps, r.burn_in) == (5000, 7) and 8 * (4993 // r.thin) <= 100


def test_the_workflows_share_the_policy():
    """No workflow keeps its own copy of a run-length or thinning formula (the policy lives in one module)."""
    from pathlib import Path

    import sgtune.workflows as wf

    root = Path(wf.__file__).parent
    for name in ("verify.py", "calibrate.py", "refine.py", "plan.py"):
        text = (root / name).read_text(encoding="utf-8")
        assert "from .run_length import" in text, name
        assert "// keep_draws" not in text and "20_000" not in text and "// 4000" not in text, name


@pytest.mark.parametrize("command", ["verify", "calibrate"])
def test_given_steps_get_the_policy_burn_in(command):
    """With --steps T and no --burn-in, verify and calibrate discard the policy's burn-in for T: the largest of
    T/10, 20·τ and the equilibration steps, at most T/2 (verify used to take T/10 whatever τ; calibrate a tenth
    of the *default* 20 000-step run, half of a 4000-step one)."""
    import json

    from click.testing import CliRunner

    from sgtune.cli import main

    r = CliRunner().invoke(main, [command, "--example", "hetero-linear", "--batch-size", "64", "--steps", "4000",
                                  "--chains", "4", "-q", "--no-applicability"] if command == "calibrate" else
                           [command, "--example", "hetero-linear", "--batch-size", "64", "--steps", "4000",
                            "--chains", "4", "-q"])
    assert r.exit_code in (0, 3), r.stderr
    doc = json.loads(r.stdout)
    tau, rho = doc["tau_worst"], doc["spectral_radius"]
    want = min(max(400, math.ceil(20 * max(tau, 1.0)), int(equilibration_steps(rho))), 2000)
    assert doc["burn_in"] == want and doc["steps"] == 4000


def test_batches_are_never_shorter_than_ten_autocorrelation_times():
    """Batches of 14 steps with τ ≈ 32 have correlated means: the standard errors were too small and verify rejected
    correct chains (issue 37). A given count above ⌊kept/(10τ)⌋ is refused; the default is lowered to fit."""
    from sgtune.core.config import RunSpec

    run = RunSpec(31_667, n_chains=4, burn_in=3166)  # the hetero-linear example's verify run
    assert rl.max_batches_per_chain(run.kept_steps, 31.7) == 28_501 // 317 == 89
    assert rl.check_batches_per_chain(run, 31.7, 89) == 89
    with pytest.raises(SgtuneError, match=r"batches_per_chain must be at most 89 for this run, got 2000"):
        rl.check_batches_per_chain(run, 31.7, 2000)
    assert rl.check_batches_per_chain(run, 31.7) is None  # the default 8 per chain is long enough
    short = RunSpec(2000, n_chains=4, burn_in=200)  # default 8 batches of 225 steps, τ = 31.7 needs 317
    assert rl.check_batches_per_chain(short, 31.7) == 4 and rl.check_batches_per_chain(short, 200.0) == 2
    assert rl.check_batches_per_chain(run, math.nan, 2000) == 2000  # τ unknown (posterior samplers): as given


def test_verify_refuses_batches_too_short_for_its_chain():
    from click.testing import CliRunner

    from sgtune.cli import main

    r = CliRunner().invoke(main, ["verify", "--example", "hetero-linear", "--batch-size", "64", "--chains", "4",
                                  "--batches-per-chain", "2000", "-q"])
    assert r.exit_code == 2 and r.stdout == ""
    assert "--batches-per-chain must be at most 89 for this run, got 2000" in r.stderr
    assert "--steps" in r.stderr and "autocorrelation times" in r.stderr
