"""The Kronecker family as a checked remedy for a network (issue 35, item 4: offered first, with the last layer)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment
pytest.importorskip("curvlinops")  # in the [dev] extra (through [kfac]): never skipped in the test environment

from sgtune.cli._kronecker_remedy import kronecker_remedy  # noqa: E402
from sgtune.cli._remedies import as_text, render  # noqa: E402
from sgtune.core.config import Dynamics  # noqa: E402
from sgtune.core.reasons import Reason, Remedy  # noqa: E402
from sgtune.io.data import make_dataset  # noqa: E402
from sgtune.models import expand, make_mlp  # noqa: E402
from sgtune.theory.tuning import tune  # noqa: E402

ARGV = ("lambda", "data.csv", "--model", "mlp", "--hidden-sizes", "3", "--method", "dq-exact", "--target",
        "posterior", "--batch-size", "50", "--inverse-temperature", "2N", "--prior-precision", "1")


@pytest.fixture(scope="module")
def problem():
    """A tanh(3) regression network at its MAP, Λ tuned to the posterior (B = 50, β = 2N)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(200, 1))
    ds = make_dataset(x, np.sin(x[:, 0]) + 0.1 * rng.standard_normal(200))
    mlp = make_mlp("3", noise_variance=0.01)
    e = expand(mlp, ds, 1.0)
    res = tune(e, Dynamics(None, 50, inv_temperature=2.0 * ds.n_data), target="posterior")
    return mlp, ds, e, res


def test_a_network_whose_kronecker_check_fails_is_not_offered(problem):
    """The real check runs: this network's minibatch curvature grows the chain (its own report says not
    applicable), so the family is no way out and is not printed at all."""
    from sgtune.io.kronecker_io import mlp_module
    from sgtune.models.kfac import mlp_factors
    from sgtune.theory.kronecker import tune_factors
    from sgtune.workflows.kronecker_applicability import kronecker_applicability

    mlp, ds, e, res = problem
    fac = mlp_factors(mlp, e.theta_hat, ds.X, ds.y, prior_precision=1.0)
    kr = tune_factors(fac, res.stationary.dynamics.replace(step=None), target="posterior")
    own = kronecker_applicability(kr, mlp_module(mlp, e.theta_hat, 1), ds.X, ds.y, "gaussian", noise_variance=0.01)
    assert not own.applicable
    assert kronecker_remedy(mlp, ds, e, res.stationary, res.target_cov) is None


def test_nothing_to_offer_without_a_target_or_a_network(problem):
    from sgtune.io.data import example
    from sgtune.models import get_model

    mlp, ds, e, res = problem
    assert kronecker_remedy(mlp, ds, e, res.stationary, None) is None  # a given Λ
    glm, lg = get_model("logistic"), example("logistic")
    el = expand(glm, lg)
    rl = tune(el, Dynamics(None, 32), target="posterior")
    assert kronecker_remedy(glm, lg, el, rl.stationary, rl.target_cov) is None  # no layers
    e2 = expand(mlp, ds, np.diag(np.linspace(1.0, 2.0, e.dim)))
    r2 = tune(e2, Dynamics(None, 50, inv_temperature=2.0 * ds.n_data), target="posterior")
    assert kronecker_remedy(mlp, ds, e2, r2.stationary, r2.target_cov) is None  # a prior matrix


def test_above_the_check_cap_it_is_a_suggestion_worded_as_not_checked(problem, monkeypatch):
    """Above CHECK_MAX_DIM the check is not run (minutes): the family is offered as worth trying, not as what works,
    and its command is `sgtune lambda … --family kronecker` without the options the family refuses."""
    import sgtune.workflows.kronecker_applicability as ka

    def boom(*a, **k):
        raise AssertionError("the check must not run above the cap")

    monkeypatch.setattr(ka, "CHECK_MAX_DIM", 5)
    monkeypatch.setattr(ka, "kronecker_applicability", boom)
    mlp, ds, e, res = problem
    rem = kronecker_remedy(mlp, ds, e, res.stationary, res.target_cov)
    assert rem is not None and rem.expect == "runs" and f"D = {e.dim} > 5" in rem.why and "not checked" in rem.why
    rendered = render([rem], ARGV)
    argv = rendered[0]["argv"]
    assert argv[:2] == ["sgtune", "lambda"] and "--method" not in argv
    assert argv[argv.index("--family") + 1] == "kronecker" and argv[argv.index("--target") + 1] == "posterior"
    for opt, val in (("--batch-size", "50"), ("--inverse-temperature", "2N"), ("--prior-precision", "1"),
                     ("--hidden-sizes", "3")):
        assert argv[argv.index(opt) + 1] == val
    text = as_text(rendered)
    assert "what works" not in text and text.startswith("; worth trying (not checked")


def test_a_passing_check_is_what_works_and_ends_the_ladder(problem, monkeypatch):
    """When the family's own report passes (here: its verdict replaced, to reach this branch on a small network
    whose real report fails), it is offered first with expect "applicable", and the temperature and prior ladders
    are dropped (checked_remedies' rule for a network remedy that works)."""
    import sgtune.workflows.kronecker_applicability as ka
    from sgtune.theory.applicability import checked_remedies

    calls = []

    class Passed:
        applicable = True

    def passed(res, net, X, y, likelihood, **kw):
        calls.append((res.names, likelihood, kw["max_terms"]))
        return Passed()

    monkeypatch.setattr(ka, "kronecker_applicability", passed)
    mlp, ds, e, res = problem
    rem = kronecker_remedy(mlp, ds, e, res.stationary, res.target_cov)
    assert calls == [(("hidden1", "output"), "gaussian", 200)]
    assert rem.expect == "applicable" and rem.command == "lambda" and rem.changes["family"] == "kronecker"
    ladder = Reason("nonlinear", "the loss is not quadratic", (Remedy("colder", {"inv_temperature": 4000.0}),
                                                                  Remedy("prior", {"prior_precision": 12.0}),
                                                                  Remedy("refine", {"refine_rounds": 2})))
    out = checked_remedies(mlp, ds, e, res.stationary, res.target_cov, [ladder],
                           network_remedies=(kronecker_remedy,))
    whys = [m.why for m in out[0].remedies]
    assert not any(w in ("colder", "prior") for w in whys) and whys[-1] == "refine"
    kron = [m for m in out[0].remedies if m.changes.get("family") == "kronecker"]
    assert len(kron) == 1 and out[0].remedies.index(kron[0]) <= 1  # after the last layer, before the rest
    assert "what works: the Kronecker family" in as_text(render([kron[0]], ARGV))
