"""sgtune.io.export: the settings read from a result, the refusals, and the parameter layout of each export.

The reference for every update is the recursion written out in NumPy in θ order (m ← κm + G,
θ ← θ − Λm, G including Γθ/N); the optax pytree and the PyTorch module hold the same parameters
under names, in an order (JAX's sorted keys, a module's registration order) that differs from θ's.
"""
from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.core.errors import MissingExtraError, SgtuneError, ShapeError
from sgtune.io.export import (StepMatrix, TorchOptions, numpy_step, optax_transform, pytree_parameter_names, step_matrix,
                              torch_optimizer, update_rule)
from sgtune.models.mlp import MLP

from _reference import covariance_z_scores
from _tolerances import bonferroni_z

@pytest.fixture(autouse=True)
def _one_torch_thread():
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


MLP_NET = MLP((2,))
P = 3
NAMES = tuple(MLP_NET.parameter_names(("age", "bmi", "bp")))  # hidden1.weight[0,age] … output.bias[0]
D = len(NAMES)
KAPPA, N_DATA = 0.5, 50
GAMMA = np.diag(np.linspace(0.5, 2.0, D))


def spd(d=D, seed=0):
    a = np.random.default_rng(seed).standard_normal((d, d))
    return 0.05 * (a @ a.T / d + np.eye(d))


def result(lam=None, **kw):
    """A TuningResult's fields (what the theory returns today), optionally more."""
    base = dict(step_matrix=spd() if lam is None else lam, family="dense", momentum=KAPPA,
                inv_temperature=math.inf, batch_size=4, without_replacement=False, parameter_names=NAMES)
    base.update(kw)
    return SimpleNamespace(**base)


def reference(lam, thetas0, grads, prior):
    """θ after len(grads) steps of m ← κm + G, θ ← θ − Λm (G = g + Γθ/N with prior="add")."""
    th, m = thetas0.copy(), np.zeros(D)
    for g in grads:
        m = KAPPA * m + g + (GAMMA @ th / N_DATA if prior == "add" else 0.0)
        th = th - lam @ m
    return th


def layers(v):
    (W1, b1), (W2, b2) = MLP_NET.unflatten(v, P)
    return W1, b1, W2, b2


# --------------------------------------------------------------------------- the same update everywhere
@pytest.mark.parametrize("prior", ["in-loss", "add"])
@pytest.mark.parametrize("kind", ["scalar", "diagonal", "block", "dense"])
def test_numpy_optax_torch_apply_the_same_update_in_theta_order(kind, prior):
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    import jax.numpy as jnp
    import optax

    jax.config.update("jax_enable_x64", True)
    blocks = [list(range(6)), [6, 7], [8, 9, 10]]
    lam = step_matrix(spd(), kind=kind, blocks=blocks if kind == "block" else None).to_dense()
    res = result(lam, family=kind)
    kw = dict(prior=prior, prior_precision=GAMMA, n_data=N_DATA) if prior == "add" else dict(prior=prior)
    rng = np.random.default_rng(1)
    th0, grads = rng.standard_normal(D), rng.standard_normal((2, D))
    want = reference(lam, th0, grads, prior)

    step = numpy_step(res, **kw)
    th, m = th0, np.zeros(D)
    for g in grads:
        th, m = step(th, m, g, batch_size=4)
    np.testing.assert_allclose(th, want, rtol=1e-13, atol=1e-15)

    def tree(v):  # JAX flattens dict keys sorted: bias before weight, so ravel order ≠ θ order
        W1, b1, W2, b2 = layers(v)
        return {"output": {"weight": jnp.asarray(W2), "bias": jnp.asarray(b2)},
                "hidden1": {"weight": jnp.asarray(W1), "bias": jnp.asarray(b1)}}

    tx = optax_transform(res, **kw)
    params = tree(th0)
    state = tx.init(params)
    for g in grads:
        upd, state = tx.update(tree(g), state, params, batch_size=4)
        params = optax.apply_updates(params, upd)
    got = np.concatenate([np.ravel(params["hidden1"]["weight"]), params["hidden1"]["bias"],
                          np.ravel(params["output"]["weight"]), params["output"]["bias"]])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)

    class Net(torch.nn.Module):  # the output layer registered first: module order ≠ θ order
        def __init__(self):
            super().__init__()
            self.output = torch.nn.Linear(2, 1).double()
            self.hidden1 = torch.nn.Linear(P, 2).double()

    net = Net()
    with torch.no_grad():
        for (W, b), layer in zip(((0, 1), (2, 3)), (net.hidden1, net.output)):
            layer.weight.copy_(torch.tensor(layers(th0)[W]))
            layer.bias.copy_(torch.tensor(layers(th0)[b]))
    opt = torch_optimizer(res, net, **kw)
    for g in grads:
        for (W, b), layer in zip(((0, 1), (2, 3)), (net.hidden1, net.output)):
            layer.weight.grad = torch.tensor(layers(g)[W])
            layer.bias.grad = torch.tensor(layers(g)[b])
        opt.step(batch_size=4)
    got = np.concatenate([t.detach().numpy().ravel() for t in (net.hidden1.weight, net.hidden1.bias,
                                                                net.output.weight, net.output.bias)])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


@pytest.mark.mc
def test_noise_reaches_the_named_entries_with_covariance_2_lambda_over_beta():
    # one step from G = 0 in a permuted layout: the increments (back in θ order) have covariance 2Λ/β
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    lam, beta, chains = spd(), 4.0, 5000
    res = result(lam, momentum=0.0, inv_temperature=beta)
    z_max = bonferroni_z(2 * D * (D + 1) // 2)

    tx = optax_transform(res, prior="in-loss")
    zero = {"output": {"weight": jnp.zeros((1, 2)), "bias": jnp.zeros(1)},
            "hidden1": {"weight": jnp.zeros((2, P)), "bias": jnp.zeros(2)}}
    st = tx.init(zero)
    st = st._replace(key=jax.random.split(jax.random.PRNGKey(5), chains),
                     momentum=jnp.zeros((chains, D)))
    upd, _ = jax.vmap(lambda s: tx.update(zero, s, zero))(st)
    inc = np.hstack([np.reshape(upd["hidden1"]["weight"], (chains, -1)), upd["hidden1"]["bias"],
                     np.reshape(upd["output"]["weight"], (chains, -1)), upd["output"]["bias"]])
    assert np.abs(covariance_z_scores(inc, np.zeros(D), 2 * lam / beta)).max() < z_max

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.output = torch.nn.Module()
            self.output.bias = torch.nn.Parameter(torch.zeros(chains, 1, dtype=torch.float64))
            self.output.weight = torch.nn.Parameter(torch.zeros(chains, 1, 2, dtype=torch.float64))
            self.hidden1 = torch.nn.Module()
            self.hidden1.weight = torch.nn.Parameter(torch.zeros(chains, 2, P, dtype=torch.float64))
            self.hidden1.bias = torch.nn.Parameter(torch.zeros(chains, 2, dtype=torch.float64))

    net = Net()
    opt = torch_optimizer(res, net, prior="in-loss", options=TorchOptions(n_chains=chains, seed=3))
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    inc = np.hstack([t.detach().numpy().reshape(chains, -1) for t in (net.hidden1.weight, net.hidden1.bias,
                                                                       net.output.weight, net.output.bias)])
    assert np.abs(covariance_z_scores(inc, np.zeros(D), 2 * lam / beta)).max() < z_max


# --------------------------------------------------------------------------- reading a result
def test_settings_come_from_the_result_and_contradictions_are_refused():
    rule = update_rule(result(inv_temperature=100.0), prior="in-loss")
    assert (rule.momentum, rule.inv_temperature, rule.batch_size, rule.names) == (KAPPA, 100.0, 4, NAMES)
    assert rule.batching == "replacement" and "κ = 0.5" in rule.describe()
    same = update_rule(result(), momentum=0.5, batch_size=4, prior="in-loss")  # agreeing arguments are fine
    assert same.momentum == KAPPA
    for kw, msg in [(dict(momentum=0.0), "momentum=0.0 contradicts the result's momentum 0.5: omit it"),
                    (dict(inv_temperature=50.0), "inv_temperature=50.0 contradicts the result's inv_temperature inf"),
                    (dict(batch_size=8), "batch_size=8 contradicts the result's batch_size 4: omit it"),
                    (dict(parameter_names=("a",) * D), "parameter_names contradicts the result's parameter names at "
                                                      "row 0")]:
        with pytest.raises(SgtuneError, match=msg.replace("(", r"\(")):
            numpy_step(result(), prior="in-loss", **kw)


def test_dynamics_are_preferred_and_accepted():
    dyn = Dynamics(spd(), batch_size=8, inv_temperature=30.0, momentum=0.25, batching="reshuffle")
    stale = result(dynamics=dyn)  # the old fields say κ = 0.5, B = 4: .dynamics wins
    for source in (dyn, stale):
        rule = update_rule(source, prior="in-loss")
        assert (rule.momentum, rule.inv_temperature, rule.batch_size, rule.batching) == (0.25, 30.0, 8, "reshuffle")
    assert update_rule(stale, prior="in-loss").names == NAMES
    with pytest.raises(SgtuneError, match="momentum=0.5 contradicts the dynamics' momentum 0.25"):
        update_rule(dyn, momentum=0.5, prior="in-loss")
    scalar = update_rule(Dynamics(0.1, batch_size=2), parameter_names=("a", "b"), prior="in-loss")
    assert scalar.step.kind == "scalar" and scalar.step.dim == 2


def test_a_resolved_rule_is_reused_and_not_changed():
    rule = update_rule(result(), prior="in-loss")
    assert numpy_step(rule).rule is rule
    with pytest.raises(SgtuneError, match="an UpdateRule is complete; momentum= cannot change it"):
        numpy_step(rule, momentum=0.0)


def test_the_old_call_with_a_bare_step_matrix_still_works():
    lam = step_matrix(np.array([0.1, 0.2, 0.3]))
    step = numpy_step(lam, momentum=0.5, inv_temperature=math.inf)  # no result: κ, β as given, G includes Γθ/N
    assert step.rule.prior == "in-loss" and step.rule.batch_size is None and step.rule.names is None
    th, m = step(np.zeros(3), np.ones(3), np.ones(3), batch_size=123)  # no B recorded: nothing to check
    np.testing.assert_allclose(th, -1.5 * np.array([0.1, 0.2, 0.3]))


@pytest.mark.parametrize("source, msg", [
    (Dynamics(spd(), batch_size=4, decay=0.5), r"step size decays .*tune with decay 0"),
    (result(sampler="smile"), "sampler is 'smile'; only SGLD/SGD updates are exported"),
    (Dynamics(None, batch_size=4), "still to be tuned"),
    (Dynamics(spd() + 0.01 * np.triu(np.ones((D, D)), 1), batch_size=4, inv_temperature=10.0),
     r"Λ is not symmetric, so the injected noise .* runs only as SGD"),
])
def test_results_the_update_cannot_represent_are_refused(source, msg):
    with pytest.raises(SgtuneError, match=msg):
        numpy_step(source, prior="in-loss")


def test_a_non_symmetric_lambda_runs_as_sgd_unchanged():
    lam = spd() + 0.01 * np.triu(np.ones((D, D)), 1)
    step = numpy_step(Dynamics(lam, batch_size=4), prior="in-loss")
    g = np.random.default_rng(2).standard_normal(D)
    np.testing.assert_allclose(step(np.zeros(D), np.zeros(D), g)[0], -lam @ g, rtol=1e-14)
    with pytest.raises(SgtuneError, match="kind 'diagonal' needs a symmetric"):
        step_matrix(lam, kind="diagonal")


def test_the_prior_term_is_never_guessed():
    with pytest.raises(SgtuneError, match="say where the prior term Γθ/N of the gradient comes from: prior='in-loss'"):
        numpy_step(result())
    with pytest.raises(SgtuneError, match="prior_precision is used only with prior='add'"):
        numpy_step(result(), prior="in-loss", prior_precision=1.0)
    with pytest.raises(SgtuneError, match="needs the prior precision"):
        numpy_step(result(), prior="add")
    with pytest.raises(SgtuneError, match="pass n_data=N"):
        numpy_step(result(), prior_precision=1.0)
    with pytest.raises(SgtuneError, match="prior must be one of"):
        numpy_step(result(), prior="weight-decay")
    recorded = result(prior_precision=GAMMA, n_data=N_DATA)
    assert update_rule(recorded, prior="add").n_data == N_DATA  # Γ and N recorded: prior="add" needs nothing
    with pytest.raises(SgtuneError, match="prior_precision contradicts the result's prior precision"):
        update_rule(recorded, prior="add", prior_precision=1.0)
    with pytest.raises(SgtuneError, match="say where"):
        update_rule(recorded)  # a recorded Γ ≠ 0 is still a choice: in your loss, or added
    assert update_rule(result(prior_precision=0.0), ).prior == "in-loss"  # recorded without prior: nothing to add


# --------------------------------------------------------------------------- batch size
def test_the_batch_size_is_checked_where_the_update_sees_it():
    torch = pytest.importorskip("torch")
    with pytest.raises(SgtuneError, match="a batch of 5 rows, but the result was tuned for B = 4"):
        numpy_step(result(), prior="in-loss")(np.zeros(D), np.zeros(D), np.zeros(D), batch_size=5)
    lin = torch.nn.Linear(3, 1).double()
    res = SimpleNamespace(step_matrix=np.diag(np.full(4, 0.1)), family="diagonal", momentum=0.0,
                          inv_temperature=math.inf, batch_size=4, without_replacement=False)
    opt = torch_optimizer(res, lin, prior="in-loss")
    X = torch.ones(6, 3, dtype=torch.float64)
    with torch.no_grad():
        lin(X)  # evaluation on other rows is fine
    lin(X[:4]).sum().backward()
    opt.step()
    lin(X).mean().backward()  # the gradient of a batch of 6
    with pytest.raises(SgtuneError, match="ran on a batch of 6 rows since the last step, but the result was tuned "
                                          "for B = 4"):
        opt.step()
    with pytest.raises(SgtuneError, match="a batch of 3 rows"):
        opt.step(batch_size=3)
    unchecked = torch_optimizer(res, lin, prior="in-loss", options=TorchOptions(check_batch_size=False))
    lin(X).mean().backward()
    unchecked.step()


def test_optax_batch_size_and_prior_need_their_arguments():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    tx = optax_transform(result(), prior="add", prior_precision=GAMMA, n_data=N_DATA)
    params = {"hidden1": {"weight": jnp.zeros((2, P)), "bias": jnp.zeros(2)},
              "output": {"weight": jnp.zeros((1, 2)), "bias": jnp.zeros(1)}}
    st = tx.init(params)
    with pytest.raises(SgtuneError, match="a batch of 8 rows"):
        tx.update(params, st, params, batch_size=8)
    with pytest.raises(SgtuneError, match="needs the parameters"):
        tx.update(params, st)
    with pytest.raises(SgtuneError, match="must be a Python int"):
        jax.jit(lambda b: tx.update(params, st, params, batch_size=b))(4)


# --------------------------------------------------------------------------- the layout
def test_pytree_layouts_that_differ_are_refused_naming_the_first_difference():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    tx = optax_transform(result(), prior="in-loss")

    def params(**change):
        p = {"hidden1": {"weight": jnp.zeros((2, P)), "bias": jnp.zeros(2)},
             "output": {"weight": jnp.zeros((1, 2)), "bias": jnp.zeros(1)}}
        for k, v in change.items():
            layer, leaf = k.split("__")
            if v is None:
                del p[layer][leaf]
            else:
                p[layer][leaf] = v
        return p

    tx.init(params())
    cases = [(dict(hidden1__weight=jnp.zeros((P, 2))),  # a (in, out) kernel: transposed
              r"parameter \['hidden1'\]\['weight'\] has shape \(3, 2\) but the layout's hidden1.weight is \(2, 3\)"),
             (dict(output__bias=None), "the layout's output.bias has no parameter among the 3 given"),
             (dict(output__extra=jnp.zeros(2)), r"parameter \['output'\]\['extra'\] has no rows in the layout "
                                                r"\(hidden1.weight\[0,age\] … output.bias\[0\]\)")]
    for change, msg in cases:
        with pytest.raises(SgtuneError, match=msg):
            tx.init(params(**change))
    unnamed = optax_transform(result(parameter_names=None), prior="in-loss")
    with pytest.raises(SgtuneError, match="Λ carries no parameter names"):
        unnamed.init(params())
    unnamed.init(jnp.zeros(D))  # one array: θ itself
    with pytest.raises(ShapeError, match="the parameters have 10 entries but Λ is 11×11"):
        unnamed.init(jnp.zeros(10))
    ravel_names = pytree_parameter_names(params())
    assert ravel_names[:3] == ["hidden1.bias[0]", "hidden1.bias[1]", "hidden1.weight[0,0]"]  # JAX's order
    optax_transform(step_matrix(np.full(D, 0.1), names=ravel_names)).init(params())


def test_torch_layouts_that_differ_are_refused():
    torch = pytest.importorskip("torch")
    seq = torch.nn.Sequential(torch.nn.Linear(P, 2), torch.nn.Tanh(), torch.nn.Linear(2, 1))
    with pytest.raises(SgtuneError, match=r"parameter 0.weight has no rows in the layout \(hidden1.weight\[0,age\]"):
        torch_optimizer(result(), seq, prior="in-loss")
    tensors = [p for p in seq.parameters()]
    opt = torch_optimizer(result(), tensors, prior="in-loss")  # a list: θ order, checked by shape
    assert len(opt.param_groups[0]["params"]) == 4
    with pytest.raises(SgtuneError, match=r"parameter 0 \(shape \(2,\)\) does not match the layout"):
        torch_optimizer(result(), tensors[1:] + tensors[:1], prior="in-loss")
    with pytest.raises(ShapeError, match="needs a leading axis of 7"):
        torch_optimizer(result(), tensors, prior="in-loss", options=TorchOptions(n_chains=7))
    with pytest.raises(SgtuneError, match="params must be a torch.nn.Module or a list of tensors"):
        torch_optimizer(result(), 3, prior="in-loss")
    opt = torch_optimizer(result(parameter_names=None), seq, prior="in-loss")  # no names: named_parameters order
    with pytest.raises(SgtuneError, match="parameter 2.bias has no gradient: call loss.backward"):
        for p in list(seq.parameters())[:3]:
            p.grad = torch.zeros_like(p)
        opt.step()


def test_torch_state_dict_round_trips_the_momentum():
    torch = pytest.importorskip("torch")
    lam = spd(4)
    res = SimpleNamespace(step_matrix=lam, family="dense", momentum=0.5, inv_temperature=math.inf, batch_size=2,
                          without_replacement=False)
    grads = np.random.default_rng(4).standard_normal((3, 4))

    def run(split):
        w = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
        opt = torch_optimizer(res, [w], prior="in-loss")
        for t, g in enumerate(grads):
            if t == split:
                saved = opt.state_dict()
                opt = torch_optimizer(res, [w], prior="in-loss")
                opt.load_state_dict(saved)
            w.grad = torch.tensor(g)
            opt.step()
        return w.detach().numpy()

    np.testing.assert_array_equal(run(split=2), run(split=-1))
    np.testing.assert_allclose(run(split=-1), reference_4(lam, grads), rtol=1e-13)


def reference_4(lam, grads):
    th, m = np.zeros(4), np.zeros(4)
    for g in grads:
        m = 0.5 * m + g
        th = th - lam @ m
    return th


def test_torch_optimizer_without_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'sgtune\[torch\]'"):
        torch_optimizer(result(), [], prior="in-loss")


def test_step_matrix_names():
    lam = step_matrix(result())
    assert lam.names == NAMES and lam.kind == "dense"
    with pytest.raises(ShapeError, match="parameter_names has 2 names but Λ is 11×11"):
        lam.with_names(["a", "b"])
    with pytest.raises(SgtuneError, match="'a' appears twice"):
        StepMatrix("scalar", 2, scalar=0.1, names=("a", "a"))


# --------------------------------------------------------------------------- what a real tuning result records
def test_a_tuning_result_records_gamma_and_n_so_exports_need_no_prior():
    """tune records the expansion's Γ and N: a fit without a prior exports with no ``prior=`` (nothing to add),
    a fit with one takes ``prior="add"`` alone, and the update adds exactly Γθ/N (the recursion written out)."""
    from sgtune.io.data import make_dataset
    from sgtune.models import expand, get_model
    from sgtune.theory.tuning import tune

    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 3))
    data = make_dataset(X, X @ np.array([1.0, -1.0, 0.5]) + rng.standard_normal(200))
    plain = tune(expand(get_model("linear"), data), Dynamics(None, batch_size=16))
    assert plain.n_data == 200 and not np.any(plain.prior_precision)
    theta, m, g = rng.standard_normal(3), np.zeros(3), rng.standard_normal(3)
    np.testing.assert_allclose(numpy_step(plain)(theta, m, g)[0], theta - plain.step_matrix @ g, rtol=1e-13)
    gamma = np.array([1.0, 2.0, 3.0])
    with_prior = tune(expand(get_model("linear"), data, prior_precision=np.diag(gamma)), Dynamics(None, batch_size=16))
    with pytest.raises(SgtuneError, match="the fit had a prior: say where .* or prior='add' .*as the result records"):
        numpy_step(with_prior)
    want = theta - with_prior.step_matrix @ (g + gamma * theta / 200)
    np.testing.assert_allclose(numpy_step(with_prior, prior="add")(theta, m, g)[0], want, rtol=1e-13)


def test_a_layout_with_more_parameters_than_lambda_suggests_subset():
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh(), torch.nn.Linear(2, 1)).double()
    head = ("2.weight[0,0]", "2.weight[0,1]", "2.bias[0]")
    res = result(lam=np.diag(np.full(3, 0.1)), parameter_names=head, momentum=0.0)
    with pytest.raises(SgtuneError, match=r"parameter 0\.weight has no rows in the layout .*pass options=TorchOptions\(subset=True\)"):
        torch_optimizer(res, net, prior="in-loss")
    assert len(torch_optimizer(res, net, prior="in-loss", options=TorchOptions(subset=True)).param_groups[0]["params"]) == 2


def test_torch_optimizer_takes_its_options_as_one_object():
    """TorchOptions(subset=…, seed=…) sets the optimizer's options; the keywords of the 0.1 form are a TypeError
    that names TorchOptions, an unknown keyword one as for any function; torch_optimizer has at most 12
    parameters."""
    import inspect

    torch = pytest.importorskip("torch")
    assert len(inspect.signature(torch_optimizer).parameters) <= 12
    head = ("2.weight[0,0]", "2.weight[0,1]", "2.bias[0]")
    res = result(lam=np.diag(np.full(3, 0.1)), parameter_names=head, momentum=0.0, inv_temperature=50.0)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh(), torch.nn.Linear(2, 1)).double()
    body = [p.detach().clone() for p in net[0].parameters()]
    opt = torch_optimizer(res, net, prior="in-loss", options=TorchOptions(subset=True, seed=7, check_batch_size=False))
    assert len(opt.param_groups[0]["params"]) == 2
    net(torch.ones(4, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    assert all(torch.equal(a, p) for a, p in zip(body, net[0].parameters()))  # the body is frozen
    with pytest.raises(TypeError, match=r"torch_optimizer\(subset=…\) is the form of 0\.1: give "
                                        r"options=TorchOptions\(subset=…\)"):
        torch_optimizer(res, net, prior="in-loss", subset=True, seed=7)
    with pytest.raises(TypeError, match="unexpected keyword argument 'subsett'"):
        torch_optimizer(res, torch.nn.Linear(2, 1), prior="in-loss", subsett=True)
