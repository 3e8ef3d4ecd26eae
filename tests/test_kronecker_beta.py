"""The Kronecker family's inverse-temperature and prior-precision searches (sgtune.workflows.kronecker_beta) and the
remedy's wiring (the CLI runs the prior search).

Independent route for the verdicts: the matrix-free check is tested against dense solves in
test_kronecker_applicability.py; here the network's failure at every β of the ladder is the measured behaviour
(benchmarks/kronecker_beta.py: minibatch growth ×1.65 per step at β = 2N, ×2.9–4.4 at 4N–16N, the growth
limit being 1), and the search must report exactly the ladder it was given, stop at the first pass, and say
"none" in one line naming the range.
"""
import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.core.errors import SgtuneError
from sgtune.workflows.kronecker_beta import BETA_LADDER, PRIOR_LADDER, search_inverse_temperature, search_prior_precision

torch = pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment
pytest.importorskip("curvlinops")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _fitted(net, X, y, delta):
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(y)
    opt = torch.optim.LBFGS(net.parameters(), max_iter=500, tolerance_grad=1e-10, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = 0.5 * (net(Xt)[:, 0] - Yt).pow(2).mean() + delta / (2 * len(X)) * sum(
            p.pow(2).sum() for p in net.parameters())
        loss.backward()
        return loss

    for _ in range(4):
        opt.step(closure)
    return net


def _tanh_network(n=500, hidden=8, delta=10.0):
    """The benchmark's first network: tanh(8) regression on 8 inputs, fitted to its MAP."""
    from sgtune.models.kfac import torch_factors

    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    X = rng.normal(size=(n, 8))
    y = (np.tanh(X[:, :3].sum(axis=1)) + 0.3 * rng.normal(size=n)) / 0.3
    net = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)).double()
    _fitted(net, X, y, delta)
    return net, X, y, torch_factors(net, X, y, "gaussian", prior_precision=delta)


def test_no_beta_passes_on_a_tanh_network_and_the_search_says_so_in_one_line():
    net, X, y, fac = _tanh_network()
    n = len(X)
    lines = []
    s = search_inverse_temperature(fac, Dynamics(None, 50, inv_temperature=2.0 * n), net, X, y, "gaussian",
                                   max_seconds=1e9, progress=lines.append)
    assert len(lines) == 1 and "3 checks from 2000 to 8000" in lines[0]
    assert s.tried == tuple(c * 2.0 * n for c in BETA_LADDER) == (2000.0, 4000.0, 8000.0)
    assert s.passed == (False, False, False) and s.value is None and not s.found and not s.stopped_early
    assert all("minibatch curvature" in r for r in s.reasons)  # the measured cause: check (c) diverges
    msg = s.message()
    assert "\n" not in msg
    assert msg.startswith("no inverse temperature from 1000 to 8000 makes the Kronecker family's applicability")


def test_the_time_budget_stops_the_search_after_one_beta_and_says_so():
    net, X, y, fac = _tanh_network()
    s = search_inverse_temperature(fac, Dynamics(None, 50, inv_temperature=1000.0), net, X, y, "gaussian",
                                   max_seconds=0.0)
    assert s.tried == (2000.0,) and s.stopped_early
    assert "budget stopped it before 8000" in s.message()


def test_the_search_stops_at_the_first_beta_that_passes():
    """The exact case (:func:`_linear_exact`): the first β of the ladder passes and ends the search."""
    net, X, y, fac = _linear_exact()
    n = len(X)
    s = search_inverse_temperature(fac, Dynamics(None, 40, inv_temperature=2.0 * n), net, X, y, "gaussian",
                                   ladder=(4.0, 2.0), max_seconds=1e9)
    assert s.tried == (1200.0,) and s.passed == (True,) and s.value == 1200.0
    assert "passes its applicability check at inverse temperature 1200" in s.message()


def test_sgd_and_a_bad_ladder_are_refused():
    net, X, y, fac = _tanh_network(n=100, hidden=2)
    with pytest.raises(SgtuneError, match="SGD has none"):
        search_inverse_temperature(fac, Dynamics(None, 50), net, X, y)
    with pytest.raises(SgtuneError, match="ladder must hold multiples above 1"):
        search_inverse_temperature(fac, Dynamics(None, 50, inv_temperature=200.0), net, X, y, ladder=(0.5,))


def _linear_exact():
    """A linear regression on a product design (every input point with every centred noise value) and no prior:
    H and C are exactly Kronecker (the case benchmarks/kronecker_applicability.py calls exact), so the check passes
    at every β (linearised ratios 1 within the series tolerance)."""
    from sgtune.models.kfac import torch_factors

    rng = np.random.default_rng(3)
    X0, eps = rng.normal(size=(60, 3)), rng.normal(size=5)
    eps -= eps.mean()
    i, j = np.divmod(np.arange(300), 5)
    X, y = X0[i], X0[i] @ np.array([1.0, -0.5, 0.3]) + eps[j]
    net = _fitted(torch.nn.Linear(3, 1).double(), X, y, 0.0)
    return net, X, y, torch_factors(net, X, y, "gaussian", prior_precision=0.0)


def _linear_exact_prior(delta=0.01):
    """:func:`_linear_exact` with a weak prior δ (the route the remedy's prior search needs: a δ to scale)."""
    from sgtune.models.kfac import torch_factors

    net, X, y, _ = _linear_exact()
    net = _fitted(net, X, y, delta)
    return net, X, y, torch_factors(net, X, y, "gaussian", prior_precision=delta)


def test_the_remedy_offers_the_prior_found_as_what_works_with_every_other_option_kept():
    """The CLI remedy runs the prior search (not the β search): the δ it finds is what works, its command
    `sgtune lambda … --family kronecker --prior-precision δ` keeps every other option of the source command, and
    that δ's check, re-run independently here, passes."""
    import dataclasses

    from sgtune.cli._kronecker_remedy import _searched
    from sgtune.cli._remedies import render
    from sgtune.workflows.kronecker_beta import _check

    net, X, y, fac = _linear_exact_prior()
    dyn = Dynamics(None, 40, inv_temperature=600.0, momentum=0.0)
    r = _searched(fac, dyn, net, X, y, "gaussian", 1.0, 4, "posterior", True)
    assert r is not None and r.expect == "applicable" and r.command == "lambda"
    delta = r.changes["prior_precision"]
    assert delta in tuple(c * 0.01 for c in PRIOR_LADDER) and r.changes["family"] == "kronecker"
    assert "inv_temperature" not in r.changes and "refits the MLP" in r.why
    ok, _ = _check(dataclasses.replace(fac, prior_precision=delta), dyn, "posterior", 600.0, net, X, y, "gaussian",
                   1.0, 200, 0)
    assert ok
    src = ("lambda", "--model", "mlp", "--prior-precision", "0.01", "--inverse-temperature", "600", "--batch-size",
           "40", "--momentum", "0", "--target", "posterior")
    a = render([r], src)[0]["argv"]
    assert a[:4] == ["sgtune", "lambda", "--model", "mlp"] and a.count("--prior-precision") == 1
    assert float(a[a.index("--prior-precision") + 1]) == delta and a[a.index("--family") + 1] == "kronecker"
    for opt, val in (("--inverse-temperature", "600"), ("--batch-size", "40"), ("--momentum", "0"),
                     ("--target", "posterior")):
        assert a.count(opt) == 1 and a[a.index(opt) + 1] == val


def test_the_remedy_says_none_in_one_line_and_offers_nothing(capsys):
    """On the tanh network no δ of the ladder passes (measured: the linearised variance is > 10 % off once the
    divergence is cured): two lines on stderr, the search's start and its one-line "none", and no remedy."""
    from sgtune.cli._kronecker_remedy import _searched

    net, X, y, fac = _tanh_network()
    assert _searched(fac, Dynamics(None, 50, inv_temperature=1000.0), net, X, y, "gaussian", 1.0, 81,
                     "posterior", False) is None
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err[0].startswith("searching the Kronecker family's prior precision: 3 checks from 40 to 640")
    assert err[1].startswith("no prior precision from 10 to ") and "makes the Kronecker family's" in err[1]
    assert len(err) == 2


def test_the_prior_search_on_a_tanh_network_reports_its_ladder_and_a_checked_verdict():
    """Whichever the verdict, it is the measured one: the δs tried are the ladder's prefix × δ₀, the search stops at
    the first pass (whose check, re-run independently, passes) or says none in one line; and a larger δ cures the
    failure at δ₀ (the minibatch-curvature divergence of check (c)), which is the reason to search δ."""
    import dataclasses

    from sgtune.workflows.kronecker_beta import _check, search_prior_precision

    net, X, y, fac = _tanh_network()
    dyn = Dynamics(None, 50, inv_temperature=1000.0)
    ok0, why0 = _check(fac, dyn, "posterior", 1000.0, net, X, y, "gaussian", 1.0, 200, 0)
    assert not ok0 and "minibatch curvature" in why0
    s = search_prior_precision(fac, dyn, net, X, y, "gaussian", max_seconds=1e9)
    assert s.requested == 10.0 and s.tried == (40.0, 160.0, 640.0)[:len(s.tried)]
    assert not any("minibatch curvature" in r for r in s.reasons)
    msg = s.message()
    assert "\n" not in msg
    if s.found:
        assert s.passed[-1] and not any(s.passed[:-1]) and s.value == s.tried[-1]
        ok, _ = _check(dataclasses.replace(fac, prior_precision=s.value), dyn, "posterior", 1000.0, net,
                       X, y, "gaussian", 1.0, 200, 0)
        assert ok and msg.startswith("the Kronecker family passes its applicability check at prior precision")
    else:
        assert len(s.tried) == 3 and not any(s.passed) and not s.stopped_early
        assert msg.startswith("no prior precision from 10 to 640 makes the Kronecker family's applicability check")


def test_the_prior_search_refuses_no_prior_and_a_bad_ladder():
    net, X, y, fac = _linear_exact()
    with pytest.raises(SgtuneError, match="needs a prior"):
        search_prior_precision(fac, Dynamics(None, 40, inv_temperature=600.0), net, X, y)
    net, X, y, fac = _linear_exact_prior()
    with pytest.raises(SgtuneError, match="ladder must hold multiples above 1 of the requested prior"):
        search_prior_precision(fac, Dynamics(None, 40, inv_temperature=600.0), net, X, y, ladder=(1.0,))
