"""Every remedy sgtune prints runs as printed: applicability reasons, errors and warnings.

A remedy is a computed value or a command; each command (JSON ``remedies[].argv``, or the backquoted
``sgtune …`` of an error or warning line) is run exactly as printed and must exit 0, and where it
says ``expect: applicable`` the new report must be applicable. The chain of advice is followed until
it ends (a command that prints no further remedy).
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.cli._remedies import remedy_argv, render
from sgtune.core.config import Dynamics
from sgtune.core.errors import InfeasibleTargetError
from sgtune.core.reasons import REACHABLE_MARGIN, Remedy
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.theory.tuning import tune

_COMMAND = re.compile(r"`(sgtune [^`]*)`")


def _invoke(argv: list[str]):
    r = CliRunner().invoke(main, argv)
    return r, (json.loads(r.stdout) if r.exit_code == 0 and r.stdout.strip().startswith("{") else None)


def _printed_remedies(result, doc) -> list[tuple[list[str], str]]:
    """(argv, expect) of every remedy the command printed: JSON remedies, else the commands in its error."""
    import shlex

    out = []
    if doc is not None:
        app = doc.get("applicability") or {}
        out += [(r["argv"], r["expect"]) for r in app.get("remedies", [])]
    out += [(shlex.split(c), "runs") for c in _COMMAND.findall(result.stderr) if (shlex.split(c), "runs") not in out
            and not any(shlex.split(c) == a for a, _ in out)]
    return out


def follow(argv: list[str], depth: int = 3) -> list[list[str]]:
    """Run ``argv`` and every remedy it prints (recursively, ``depth`` levels); return the commands run."""
    result, doc = _invoke(argv)
    ran = [argv]
    for rem, expect in _printed_remedies(result, doc):
        assert rem[0] == "sgtune", rem
        r2, d2 = _invoke(rem[1:])
        assert r2.exit_code == 0, (rem, r2.stderr)
        if expect == "applicable":
            assert d2["applicability"]["applicable"], (rem, d2["applicability"]["reasons"])
        ran += follow(rem[1:], depth - 1)[1:] if depth > 1 else [rem[1:]]
    return ran


def _csv(path, X, y):
    np.savetxt(path, np.c_[X, y], delimiter=",", comments="",
               header=",".join([f"x{i}" for i in range(X.shape[1])] + ["y"]))
    return str(path)


def _poisson17(path, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((17, 2))
    return _csv(path, X, rng.poisson(np.exp(0.5 + X @ np.full(2, 0.5))).astype(float))


# ------------------------------------------------------------------ rendering (fast, no numerics)
def test_a_remedy_becomes_the_typed_command_with_its_options_replaced():
    argv = ("lambda", "--example", "poisson", "--batch-size", "8", "--inverse-temperature", "N", "--json", "o.json",
            "--strict", "-q", "--prior-precision-matrix", "g.npy")
    r = Remedy("why", {"inv_temperature": 2500.0, "prior_precision": 3.0})
    assert remedy_argv(r, argv) == ["sgtune", "lambda", "--example", "poisson", "--batch-size", "8", "-q",
                                    "--inverse-temperature", "2500", "--prior-precision", "3"]
    assert remedy_argv(Remedy("why", {"refine_rounds": 3}), ("lambda", "d.csv", "--model=poisson")) == [
        "sgtune", "lambda", "d.csv", "--model=poisson", "--refine", "3"]
    assert remedy_argv(Remedy("why", {"no_such_parameter": 1}), argv) is None  # never a command that cannot run


def test_the_last_layer_remedy_replaces_the_model_and_drops_what_the_head_cannot_take():
    r = Remedy("head", {"model": "last-layer", "features_from": "mlp", "target": "posterior", "blocks": None})
    argv = ("lambda", "d.csv", "--model", "mlp", "--hidden-sizes", "8", "--family", "block", "--blocks", "b.json",
            "--target", "t.npy", "--batch-size", "8")
    assert remedy_argv(r, argv) == ["sgtune", "lambda", "d.csv", "--hidden-sizes", "8", "--family", "block",
                                    "--batch-size", "8", "--model", "last-layer", "--features-from", "mlp",
                                    "--target", "posterior"]
    drop = Remedy("only drops", {"blocks": None, "inv_temperature": 900.0})  # calibrate has no --blocks
    cal = remedy_argv(drop, ("calibrate", "--example", "logistic", "--batch-size", "8"))
    assert cal == ["sgtune", "calibrate", "--example", "logistic", "--batch-size", "8", "--inverse-temperature", "900"]


def test_nested_remedies_show_the_fullest_the_command_can_express():
    full = Remedy("a", {"prior_precision": 12.0, "target": "posterior", "inv_temperature": 552.5})
    part = Remedy("b", {"prior_precision": 12.0})
    lam = render([full, part], ("lambda", "--example", "poisson", "--batch-size", "8"))
    assert [r["why"] for r in lam] == ["a"]
    cov = render([full, part], ("covariance", "--example", "poisson", "--batch-size", "8", "--step-size", "0.1"))
    assert [r["why"] for r in cov] == ["b"] and cov[0]["argv"][-2:] == ["--prior-precision", "12"]


def test_only_checked_remedies_are_printed_as_what_works():
    """Issue 35: a remedy sgtune did not check is a suggestion, worded so; a checked one is what works."""
    from sgtune.cli._remedies import as_text, first_checked

    rendered = [{"why": "unchecked", "argv": ["sgtune", "lambda", "--prior-precision", "12"], "expect": "runs"},
                {"why": "checked", "argv": ["sgtune", "lambda", "--model", "last-layer"], "expect": "applicable"}]
    text = as_text(rendered)
    works, _, rest = text.partition("worth trying (not checked")
    assert "what works: checked:" in works and "unchecked" not in works and "unchecked:" in rest
    assert "what works" not in as_text(rendered[:1]) and "worth trying" not in as_text(rendered[1:])
    assert first_checked(rendered) == rendered[1]["argv"] and first_checked(rendered[:1]) is None


def test_a_rejected_verify_keeps_the_target_in_its_next_command():
    """Issue 35: verify's next command after a rejection dropped --target (and so tuned another target)."""
    from sgtune.cli.cmd_verify import _next

    line = _next({"target": "posterior", "method": "dq-exact", "family": "diagonal"}, False, False)
    assert "--target posterior" in line and "--family diagonal" in line and "--refine 2" in line


def test_lambda_next_keeps_the_blocks_file():
    """verify has no --blocks: lambda's next saves the Λ of these blocks instead of tuning other ones."""
    from sgtune.cli.cmd_lambda import _next

    kw = {"output": None, "target": "posterior", "method": "dq-exact", "family": "block", "blocks": "b.json"}
    line = _next(kw, {"applicability": {"applicable": True}})
    assert line.startswith("next: sgtune lambda") and "--blocks b.json" in line and "--target posterior" in line
    assert "-o lambda.npy" in line


# ------------------------------------------------------------------ the posterior target's inverse temperature
def test_the_posterior_is_reachable_above_n_and_the_suggested_beta_tunes():
    """Eq. (11): reachable iff HΣ* − I/β has positive eigenvalues; for Σ* = H⁻¹/N that is β > N exactly."""
    e = expand(get_model("poisson"), example("poisson"))
    n = e.n_data
    with pytest.raises(InfeasibleTargetError) as info:
        tune(e, Dynamics(None, 8, inv_temperature=float(n)), target="posterior")
    assert info.value.min_inv_temperature == pytest.approx(n, rel=1e-9)
    (rem,) = info.value.remedies
    beta = rem.changes["inv_temperature"]
    assert beta == pytest.approx(REACHABLE_MARGIN * n, rel=1e-5)
    res = tune(e, Dynamics(None, 8, inv_temperature=beta), target="posterior")
    np.testing.assert_allclose(res.predicted_cov, res.target_cov, rtol=1e-6, atol=1e-12 * np.abs(res.target_cov).max())
    with pytest.raises(InfeasibleTargetError):
        tune(e, Dynamics(None, 8, inv_temperature=n * (1 - 1e-6)), target="posterior")


def test_unreachable_target_error_prints_a_command_that_runs():
    ran = follow(["lambda", "--example", "poisson", "--batch-size", "8", "--target", "posterior",
                  "--inverse-temperature", "N", "-q", "--no-applicability"], depth=1)
    assert len(ran) == 2 and ran[1][ran[1].index("--inverse-temperature") + 1] == "2500"  # 1.25·N, N = 2000


# ------------------------------------------------------------------ divergence foreseen
def test_small_poisson_at_twice_n_is_flagged_and_its_remedy_is_applicable(tmp_path):
    """17 rows, SGLD at β = 2N on the posterior: some chains diverge (benchmarks/divergence_table.py);
    the report says so, and the computed inverse temperature gives an applicable report."""
    csv = _poisson17(tmp_path / "p.csv", 1)
    argv = ["lambda", csv, "--model", "poisson", "--intercept", "--batch-size", "4", "--target", "posterior",
            "--inverse-temperature", "2N", "-q"]
    r, doc = _invoke(argv)
    assert r.exit_code == 0, r.stderr
    app = doc["applicability"]
    assert "divergence-risk" in app["reason_codes"] and app["predicted_deviation"] < 0.05
    assert app["divergence_risk"] > app["thresholds"]["divergence_risk"]
    assert "diverge" in r.stderr and "`sgtune lambda" in r.stderr
    assert app["remedies"]
    for rem in app["remedies"]:
        # the inverse temperature was searched with the check, not guessed (issue 35: no β ladder)
        assert rem["expect"] == "applicable" and "found by running the applicability check" in rem["why"]
        r2, d2 = _invoke(rem["argv"][1:])
        assert r2.exit_code == 0, r2.stderr
        assert d2["applicability"]["applicable"], d2["applicability"]["reasons"]


def test_when_no_inverse_temperature_passes_the_answer_is_a_clear_no(tmp_path):
    """Issue 35: the β-divergence fit is not local (curvature change ≈ 5.5 > 2); the searched inverse temperatures
    (Λ down to 1/16 as large) all fail their check, so no temperature is offered (it would only lead to the next)
    and the next line says so instead of suggesting verify."""
    out = tmp_path / "o.json"
    r = CliRunner().invoke(main, ["lambda", "--example", "hetero-linear", "--model", "beta-linear", "--beta-power",
                                  "1.5", "--batch-size", "32", "--json", str(out)])
    assert r.exit_code == 0, r.stderr
    app = json.loads(out.read_text())["applicability"]
    assert not app["applicable"] and app["remedies"] == []
    assert "no inverse temperature from" in app["reasons"][0] and "makes the applicability check pass" in app["reasons"][0]
    nxt = [ln for ln in r.stderr.splitlines() if ln.startswith("next:")]
    assert len(nxt) == 1 and nxt[0].startswith("next: no command sgtune has checked") and "verify" not in nxt[0][:40]


def test_a_prior_is_searched_with_the_check_for_a_convex_model_and_ends_the_route():
    """Issue 35: the β-divergence fit on the posterior at 2N is not local; no inverse temperature passes, and the
    prior precision is searched (refit, tune, check: the computed one, 4× and 16×), printed as what works, and
    its command is applicable — the route ends in two commands, with no prior ladder."""
    argv = ["lambda", "--example", "hetero-linear", "--model", "beta-linear", "--beta-power", "1.5", "--batch-size",
            "32", "--target", "posterior", "--inverse-temperature", "2N", "-q"]
    r, doc = _invoke(argv)
    assert r.exit_code == 0, r.stderr
    app = doc["applicability"]
    assert not app["applicable"] and "no inverse temperature from" in app["reasons"][0]
    (rem,) = app["remedies"]
    assert rem["expect"] == "applicable" and "--prior-precision" in rem["argv"] and "refitting" in rem["why"]
    assert "what works: a prior precision" in r.stderr
    r2, d2 = _invoke(rem["argv"][1:])
    assert r2.exit_code == 0 and d2["applicability"]["applicable"] and d2["applicability"]["remedies"] == []


def test_covariance_does_not_send_a_prediction_that_does_not_apply_to_verify(tmp_path):
    csv = _poisson17(tmp_path / "p.csv", 1)
    r = CliRunner().invoke(main, ["covariance", csv, "--model", "poisson", "--intercept", "--batch-size", "4",
                                  "--step-size", "0.139"])
    assert r.exit_code == 0, r.stderr
    assert "warning: not applicable" in r.stderr
    nxt = [ln for ln in r.stderr.splitlines() if ln.startswith("next:")]
    assert nxt == [ln for ln in nxt if ln.startswith("next: no command sgtune has checked")] and len(nxt) == 1


@pytest.mark.parametrize("args", [["--example", "logistic", "--batch-size", "32"],
                                  ["--example", "hetero-linear", "--batch-size", "64"]])
def test_well_behaved_examples_are_not_flagged(args):
    r, doc = _invoke(["lambda", *args, "-q"])
    assert r.exit_code == 0, r.stderr
    app = doc["applicability"]
    assert app["applicable"] and app["reason_codes"] == [] and app["remedies"] == []
    assert app["divergence_risk"] < app["thresholds"]["divergence_risk"]


# ------------------------------------------------------------------ slow: more problems, chains of advice
@pytest.mark.slow
def test_mlp_on_diabetes_chain_of_advice_ends_in_a_command_that_runs(tmp_path):
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    csv = _csv(tmp_path / "d.csv", (X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std())
    base = ["lambda", csv, "--model", "mlp", "--hidden-sizes", "8", "--batch-size", "32", "-q"]
    for extra in ([], ["--prior-precision", "1"], ["--hessian", "gauss-newton"]):
        r, _ = _invoke([*base, *extra])
        assert r.exit_code == 1 and "`sgtune lambda" in r.stderr, r.stderr
        if "gauss-newton" not in extra:  # no remedy switches the curvature; one the user chose is kept
            assert "gauss-newton" not in r.stderr.split("what works")[-1]
        follow([*base, *extra], depth=2)


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["logistic-wide", "beta-linear", "poisson17-seeds"])
def test_every_printed_remedy_runs(problem, tmp_path):
    if problem == "logistic-wide":  # D > N with a prior
        rng = np.random.default_rng(3)
        X = rng.standard_normal((30, 40))
        y = (rng.random(30) < 1 / (1 + np.exp(-X[:, 0]))).astype(float)
        runs = [["lambda", _csv(tmp_path / "w.csv", X, y), "--model", "logistic", "--prior-precision", "1",
                 "--batch-size", "8", "-q"]]
    elif problem == "beta-linear":
        runs = [["lambda", "--example", "hetero-linear", "--model", "beta-linear", "--beta-power", "1.5",
                 "--batch-size", "32", "-q"]]
    else:
        runs = [["lambda", _poisson17(tmp_path / f"p{s}.csv", s), "--model", "poisson", "--intercept",
                 "--batch-size", "4", "--target", "posterior", "--inverse-temperature", "2N", "-q"] for s in range(4)]
    for argv in runs:
        follow(argv, depth=2)


@pytest.mark.slow
def test_flagged_small_poisson_chains_diverge_and_the_remedy_stops_it():
    """Monte Carlo: on the two 17-row data sets where chains at β = 2N diverged in the benchmark, 64 chains
    of 22 000 steps diverge several times at 2N and fewer times at the remedy's inverse temperature."""
    from sgtune.core.config import RunSpec
    from sgtune.sampler.driver import run_chains
    from sgtune.theory.applicability import applicability

    at_2n = at_remedy = 0
    for seed, d in ((1, 2), (102, 3)):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((17, d))
        ds = make_dataset(X, rng.poisson(np.exp(0.5 + X @ np.full(d, 0.5 if d == 2 else 0.4))).astype(float),
                          intercept=True)
        m = get_model("poisson")
        e = expand(m, ds)
        res = tune(e, Dynamics(None, 4, inv_temperature=2.0 * ds.n_data), target="posterior")
        a = applicability(m, ds, e, res.stationary, target_cov=res.target_cov)
        assert "divergence-risk" in a.reason_codes
        beta = next(r.changes["inv_temperature"] for x in a.reasons for r in x.remedies)
        fixed = tune(e, Dynamics(None, 4, inv_temperature=beta), target="posterior")
        for t, count in ((res, "2n"), (fixed, "remedy")):
            ch = run_chains(m, ds, t.dynamics, RunSpec(22000, n_chains=32, seed=1), initial=e.theta_hat)
            if count == "2n":
                at_2n += ch.n_diverged
            else:
                at_remedy += ch.n_diverged
    assert at_2n >= 2 and at_remedy < at_2n and math.isfinite(beta)


# ------------------------------------------------------------------ a network ends in an answer: its last layer
def test_a_network_prints_its_last_layer_and_every_remedy_runs(tmp_path):
    """A 2-unit tanh network on 40 rows of a noisy sine at β = 2N on the posterior is not applicable; the first
    remedy printed is the network's output layer at the fitted weights (``--features-from mlp``), which runs as
    printed and is applicable, and whose θ̂ is the output layer of the network's own θ̂ (the body frozen)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(40, 1))
    csv = _csv(tmp_path / "s.csv", x, np.sin(x[:, 0]) + 0.1 * rng.standard_normal(40))
    argv = ["lambda", csv, "--model", "mlp", "--hidden-sizes", "2", "--noise-variance", "0.01", "--prior-precision",
            "1", "--batch-size", "10", "--target", "posterior", "--inverse-temperature", "2N", "-q"]
    r, doc = _invoke(argv)
    assert r.exit_code == 0, r.stderr
    app = doc["applicability"]
    assert not app["applicable"]
    head = app["remedies"][0]
    assert head["argv"][head["argv"].index("--model") + 1] == "last-layer" and "--features-from" in head["argv"]
    assert head["expect"] == "applicable" and "body frozen" in head["why"]
    assert [m["expect"] for m in app["remedies"]] == ["applicable"]  # the head works: no β/prior ladder offered
    ran = follow(argv, depth=1)  # every printed remedy: exit 0, applicable where it says so
    assert head["argv"][1:] in ran
    loud = CliRunner().invoke(main, [a for a in argv if a != "-q"])  # the readable next line: the checked head
    nxt = [ln for ln in loud.stderr.splitlines() if ln.startswith("next:")]
    assert nxt == ["next: " + " ".join(a for a in head["argv"] if a != "-q")
                   + " (checked: its applicability report passes)"], nxt
    _, hdoc = _invoke(head["argv"][1:])
    theta, names = np.asarray(doc["theta_hat"]), doc["parameter_names"]
    out = [names.index(n) for n in hdoc["parameter_names"]]  # output.weight[0,j], output.bias[0] in both
    np.testing.assert_allclose(hdoc["theta_hat"], theta[out], rtol=0, atol=1e-6 * np.abs(theta[out]).max())


def _network_data(tmp_path, lik):
    """The network problems' data as a CSV: 40 rows of a noisy sine (``gaussian``) or 60 rows of a noisy circle
    (``bernoulli``), seed 0."""
    rng = np.random.default_rng(0)
    if lik == "gaussian":
        x = rng.uniform(-3, 3, size=(40, 1))
        return _csv(tmp_path / "s.csv", x, np.sin(x[:, 0]) + 0.1 * rng.standard_normal(40))
    x = rng.standard_normal((60, 2))
    p = 1.0 / (1.0 + np.exp(-3.0 * (1.2 - (x ** 2).sum(1))))
    return _csv(tmp_path / "c.csv", x, (rng.uniform(size=60) < p).astype(float))


@pytest.mark.parametrize("lik", ["gaussian", "bernoulli"])
def test_a_users_network_prints_its_last_layer_and_every_remedy_runs(tmp_path, lik):
    """A user's tanh network (a model file, tests/_networks.py) where tuning the whole network is not applicable —
    a 2-unit regression on 40 rows of a noisy sine, a 3-unit classifier on 60 rows of a noisy circle, both SGLD at
    β = 2N on the posterior (not applicable on every one of 30 problems measured: 4 widths/sizes × 3 seeds of the
    sine, 3 simulated classifiers × 2 sizes × 3 seeds) — prints its output layer first:
    ``--model last-layer --features-from FILE.py:MODEL --likelihood L``, which runs as printed and is applicable;
    a --noise-variance typed for the whole model is dropped (the head's σ² is the model's)."""
    from _networks import write_net

    csv = _network_data(tmp_path, lik)
    if lik == "gaussian":
        spec, extra = write_net(tmp_path, "TanhNet(2, 'gaussian', 0.01)"), ["--noise-variance", "0.3"]
    else:
        spec, extra = write_net(tmp_path, "TanhNet(3, 'bernoulli')"), []
    argv = ["lambda", csv, "--model", spec, *extra, "--prior-precision", "1", "--batch-size", "10", "--target",
            "posterior", "--inverse-temperature", "2N", "-q"]
    r, doc = _invoke(argv)
    assert r.exit_code == 0, r.stderr
    app = doc["applicability"]
    assert not app["applicable"]
    head = app["remedies"][0]
    a = head["argv"]
    assert a[a.index("--model") + 1] == "last-layer" and a[a.index("--features-from") + 1] == spec
    assert a[a.index("--likelihood") + 1] == lik and "--noise-variance" not in a
    assert head["expect"] == "applicable" and "body frozen" in head["why"]
    ran = follow(argv, depth=1)  # every printed remedy: exit 0, applicable where it says so
    assert a[1:] in ran
    _, hdoc = _invoke(a[1:])
    theta, h = np.asarray(doc["theta_hat"]), 2 if lik == "gaussian" else 3
    out = theta[-(h + 1):]  # θ̂'s output layer (w, c): the head refit on θ̂'s features stays there
    np.testing.assert_allclose(hdoc["theta_hat"], out, rtol=0, atol=1e-6 * np.abs(out).max())


def _torch_problem(tmp_path, lik, module=None):
    """The problems of the test above with a PyTorch network of the same shape in a model file (tests/_networks.py):
    ``from_torch(nn.Sequential(Linear, Tanh, Linear), L)``, initial weights from torch.manual_seed(0)."""
    from _networks import write_torch_net

    csv = _network_data(tmp_path, lik)
    if lik == "gaussian":
        spec = write_torch_net(tmp_path, module or "nn.Sequential(nn.Linear(1, 2), nn.Tanh(), nn.Linear(2, 1))",
                               "gaussian", ", noise_variance=0.01")
    else:
        spec = write_torch_net(tmp_path, module or "nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))",
                               "bernoulli")
    return ["lambda", csv, "--model", spec, "--prior-precision", "1", "--batch-size", "10", "--target", "posterior",
            "--inverse-temperature", "2N", "-q"], spec


@pytest.mark.parametrize("lik", ["gaussian", "bernoulli"])
def test_a_torch_network_prints_its_last_layer_and_every_remedy_runs(tmp_path, lik):
    """A PyTorch network from a model file (``MODEL = from_torch(nn.Sequential(Linear, Tanh, Linear), L)``) where
    tuning the whole network is not applicable — the 2-unit regression on 40 rows of the noisy sine and the 3-unit
    classifier on 60 rows of the noisy circle, SGLD at β = 2N on the posterior (not applicable on every one of 24
    problems measured: sine 40/80 rows × 2/3 units, circle 60/120 rows × 3 units, each × 2 data seeds × 2 torch
    initialisations; the last layer applicable on all 24) — prints its output layer first, which runs as printed,
    is applicable, and whose θ̂ is the network's own θ̂ at the same names (``2.weight[0,j]``, ``2.bias[0]``)."""
    argv, spec = _torch_problem(tmp_path, lik)
    r, doc = _invoke(argv)
    assert r.exit_code == 0, r.stderr
    app = doc["applicability"]
    assert not app["applicable"]
    head = app["remedies"][0]
    a = head["argv"]
    assert a[a.index("--model") + 1] == "last-layer" and a[a.index("--features-from") + 1] == spec
    assert a[a.index("--likelihood") + 1] == lik and head["expect"] == "applicable"
    docs = {}
    for rem, expect in _printed_remedies(r, doc):  # follow(argv, depth=1) without running argv again
        r2, docs[tuple(rem)] = _invoke(rem[1:])
        assert r2.exit_code == 0, (rem, r2.stderr)
        assert expect != "applicable" or docs[tuple(rem)]["applicability"]["applicable"], rem
    hdoc = docs[tuple(a)]
    theta, names = np.asarray(doc["theta_hat"]), doc["parameter_names"]
    out = [names.index(n) for n in hdoc["parameter_names"]]
    assert [names[i] for i in out] == [n for n in names if n.startswith("2.")]  # the last Linear, all of it
    np.testing.assert_allclose(hdoc["theta_hat"], theta[out], rtol=0, atol=1e-6 * np.abs(theta[out]).max())


def test_a_torch_network_without_an_identifiable_output_layer_gets_no_last_layer(tmp_path):
    """The sine network whose forward scales its last Linear's output (nothing in its modules shows it) is not
    applicable either: its remedies run, none is a last layer; asked for by hand it is one line (exit 1)."""
    argv, spec = _torch_problem(tmp_path, "gaussian", module="Scaled(1, 2)")
    r, doc = _invoke(argv)
    assert r.exit_code == 0, r.stderr
    assert not doc["applicability"]["applicable"]
    assert all("last-layer" not in rem["argv"] for rem in doc["applicability"]["remedies"])
    r2, _ = _invoke(["lambda", argv[1], "--model", "last-layer", "--features-from", spec, "--prior-precision", "1",
                     "--batch-size", "10", "-q"])
    lines = [ln for ln in r2.stderr.splitlines() if ln.strip()]
    assert r2.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: ") and "follows it" in lines[0]
