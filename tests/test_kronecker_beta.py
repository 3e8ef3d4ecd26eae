"""The Kronecker family's inverse-temperature search (sgtune.workflows.kronecker_beta) and its remedy wiring.

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
from sgtune.workflows.kronecker_beta import BETA_LADDER, search_inverse_temperature

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
    assert s.passed == (False, False, False) and s.beta is None and not s.found and not s.stopped_early
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
    assert s.tried == (1200.0,) and s.passed == (True,) and s.beta == 1200.0
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


def test_the_remedy_offers_the_beta_found_as_what_works_with_the_inverse_temperature_option():
    from sgtune.cli._kronecker_remedy import _searched
    from sgtune.cli._remedies import render

    net, X, y, fac = _linear_exact()
    r = _searched(fac, Dynamics(None, 40, inv_temperature=600.0, momentum=0.0), net, X, y, "gaussian", 1.0, 4,
                  "posterior")
    assert r is not None and r.expect == "applicable" and r.command == "lambda"
    assert r.changes["inv_temperature"] == 1200.0 and r.changes["family"] == "kronecker"
    argv = render([r], ("lambda", "--model", "mlp", "--inverse-temperature", "600", "--batch-size", "40"))
    assert argv and argv[0]["argv"][argv[0]["argv"].index("--inverse-temperature") + 1] == "1200"
    a = argv[0]["argv"]
    assert a[:4] == ["sgtune", "lambda", "--model", "mlp"] and a[a.index("--batch-size") + 1] == "40"
    assert a.count("--inverse-temperature") == 1 and a[a.index("--family") + 1] == "kronecker"


def test_the_remedy_says_none_in_one_line_and_offers_nothing(capsys):
    from sgtune.cli._kronecker_remedy import _searched

    net, X, y, fac = _tanh_network()
    assert _searched(fac, Dynamics(None, 50, inv_temperature=1000.0), net, X, y, "gaussian", 1.0, 81,
                     "posterior") is None
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err[0].startswith("searching the Kronecker family's inverse temperature: 3 checks from 2000 to 8000")
    assert err[1].startswith("no inverse temperature from 1000 to 8000 makes the Kronecker family's")
    assert len(err) == 2
    assert _searched(fac, Dynamics(None, 50), net, X, y, "gaussian", 1.0, 81, "posterior") is None  # SGD: no β
