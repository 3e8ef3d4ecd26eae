"""sgtune.models.lastlayer: the output layer of a trained network on its frozen features.

Independent routes: the features from torch itself (the body run separately), torch's own
``parameters_to_vector`` for the θ layout, the last-layer generalised Gauss–Newton posterior
(Σ_n J_nᵀ Λ_n J_n + δI)⁻¹ built per sample from torch autograd (J_n = ∂f(x_n)/∂(head) in torch's
order, Λ_n = ∂²loss/∂f² of the torch loss, summed over the data, temperature 1 — laplace-torch's
convention; ``benchmarks/lastlayer_laplace.py`` compares with laplace-torch itself), the ridge
closed form, one hand-computed SGD step for the exports, and a simulation (``verify``).
"""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment

from click.testing import CliRunner  # noqa: E402

from sgtune.cli import main  # noqa: E402
from sgtune.core.config import Dynamics, RunSpec  # noqa: E402
from sgtune.core.errors import DataFormatError, NotPositiveDefiniteError, SgtuneError, ShapeError  # noqa: E402
from sgtune.io.export import TorchOptions, numpy_step, optax_transform, torch_optimizer  # noqa: E402
from sgtune.models import expand  # noqa: E402
from sgtune.models.lastlayer import HeadLayout, last_layer  # noqa: E402
from sgtune.workflows.verify import CheckOptions, verify_stationary_cov  # noqa: E402
from sgtune.theory.applicability import applicability  # noqa: E402
from sgtune.theory.stationary import predict_stationary_cov  # noqa: E402
from sgtune.theory.tuning import tune  # noqa: E402

from _tolerances import MC_ALPHA, SOLVER_RTOL  # noqa: E402

#: the same float64 features by two torch evaluations (the body alone, a hook inside the network)
SAME_FEATURES_ATOL = 1e-12


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(lik, n=200, p=3, seed=0, k=3):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, p))
    if lik == "gaussian":
        y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.3 * r.standard_normal(n)
    elif lik == "bernoulli":
        y = (r.random(n) < 1 / (1 + np.exp(-2 * X[:, 0] + X[:, 1]))).astype(float)
    else:
        y = np.argmax(X[:, :k] + 0.8 * r.standard_normal((n, k)), axis=1).astype(float)
    return X, y


def _net(lik, p=3, d=6, k=3, seed=0, steps=150):
    """A small tanh network trained with torch (seeded, float64, full batch Adam)."""
    torch.manual_seed(seed)
    out = k if lik == "softmax" else 1
    net = torch.nn.Sequential(torch.nn.Linear(p, 8), torch.nn.Tanh(), torch.nn.Linear(8, d), torch.nn.Tanh(),
                              torch.nn.Linear(d, out)).double()
    X, y = _data(lik, p=p, seed=seed, k=k)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    opt = torch.optim.Adam(net.parameters(), lr=2e-2)
    for _ in range(steps):
        opt.zero_grad()
        f = net(Xt)
        loss = {"gaussian": lambda: ((f[:, 0] - yt) ** 2).mean(),
                "bernoulli": lambda: torch.nn.functional.binary_cross_entropy_with_logits(f[:, 0], yt),
                "softmax": lambda: torch.nn.functional.cross_entropy(f, yt.long())}[lik]()
        loss.backward()
        opt.step()
    return net, X, y


# ----------------------------------------------------------------------------- layout
@pytest.mark.parametrize("k,bias", [(1, True), (3, True), (3, False)])
def test_layout_maps_torch_parameters_to_theta(k, bias):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, k, bias=bias).double()
    lay = HeadLayout("output", k, 4, bias)
    theta = lay.theta_of(lin.weight.detach().numpy(), None if not bias else lin.bias.detach().numpy())
    vec = torch.nn.utils.parameters_to_vector(lin.parameters()).detach().numpy()  # torch's own flattening
    np.testing.assert_array_equal(theta[lay.torch_order()], vec)
    w, b = lay.head_of(theta)
    np.testing.assert_array_equal(w, lin.weight.detach().numpy())
    assert (b is None) == (not bias)
    names = lay.names()
    assert len(names) == lay.dim == k * (4 + bias) and names[0] == "output.weight[0,0]"
    if bias:
        assert names[4] == "output.bias[0]" and theta[4] == lin.bias.detach().numpy()[0]


# ----------------------------------------------------------------------------- features and the split
def test_sequential_split_features_names_and_trained_head():
    net, X, y = _net("gaussian", steps=20)
    model, data = last_layer(net, X, y, likelihood="gaussian", chunk_rows=37)
    with torch.no_grad():
        phi = net[:-1](torch.tensor(X)).numpy()  # the body run on its own
    np.testing.assert_allclose(data.X[:, :-1], phi, rtol=0, atol=SAME_FEATURES_ATOL)
    np.testing.assert_array_equal(data.X[:, -1], 1.0)
    np.testing.assert_array_equal(data.y, y)
    assert model.parameter_names()[:2] == ("4.weight[0,0]", "4.weight[0,1]") and model.parameter_names()[-1] == "4.bias[0]"
    np.testing.assert_array_equal(model.initial_params(), np.r_[net[4].weight.detach().numpy()[0],
                                                                net[4].bias.detach().numpy()])
    assert model.describe()["last_layer"]["head"] == "4"


class _Named(torch.nn.Module):
    def __init__(self, tail=None):
        super().__init__()
        self.hidden = torch.nn.Linear(3, 5)
        self.output = torch.nn.Linear(5, 1)
        self.tail = tail

    def forward(self, x):
        f = self.output(torch.tanh(self.hidden(x)))
        return f if self.tail is None else self.tail(f)


def test_module_with_named_head_and_explicit_body_head_agree():
    torch.manual_seed(1)
    net = _Named().double()
    X, y = _data("gaussian", n=50)
    m1, d1 = last_layer(net, X, y)
    body = torch.nn.Sequential(net.hidden, torch.nn.Tanh())
    m2, d2 = last_layer(body=body, head=net.output, X=X, y=y, head_name="output")
    np.testing.assert_allclose(d1.X, d2.X, rtol=0, atol=SAME_FEATURES_ATOL)
    assert m1.parameter_names() == m2.parameter_names() and m1.parameter_names()[0] == "output.weight[0,0]"


def test_a_layer_after_the_head_is_refused():
    torch.manual_seed(1)
    X, y = _data("bernoulli", n=40)
    with pytest.raises(SgtuneError, match="follows it"):
        last_layer(_Named(tail=torch.nn.Sigmoid()).double(), X, y, likelihood="bernoulli")
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    with pytest.raises(ShapeError, match="likelihood='softmax'"):
        last_layer(net, X, y, likelihood="bernoulli")
    with pytest.raises(SgtuneError, match="likelihood must be one of"):
        last_layer(net, X, y, likelihood="poisson")


def test_numpy_and_jax_features_chunked():
    jnp = pytest.importorskip("jax.numpy")  # jax is in the [dev] extra
    X, y = _data("bernoulli", n=90)
    A = np.linspace(-1, 1, 12).reshape(3, 4)
    m1, d1 = last_layer(lambda Z: np.tanh(Z @ A), X, y, likelihood="bernoulli", chunk_rows=16,
                        head=(np.ones(4), 0.5))
    np.testing.assert_allclose(d1.X[:, :4], np.tanh(X @ A), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(m1.initial_params(), [1, 1, 1, 1, 0.5])
    m2, d2 = last_layer(lambda Z: jnp.tanh(jnp.asarray(Z) @ jnp.asarray(A)), X, y, likelihood="bernoulli")
    np.testing.assert_allclose(d2.X, d1.X, rtol=0, atol=1e-6)  # JAX computes in float32 unless x64 is enabled
    assert m2.trained is None and m2.parameter_names()[-1] == "output.bias[0]"
    with pytest.raises(ShapeError, match=r"\(90, d\)"):
        last_layer(lambda Z: np.ones(3), X, y)


# ----------------------------------------------------------------------------- the posterior = last-layer Laplace
def _dense_ggn_posterior(net, X, y, lik, delta, s2):
    """(Σ_n J_nᵀ Λ_n J_n + δI)⁻¹ per sample by torch autograd, in torch's head order (weights, then biases)."""
    head = net[-1]
    params = list(head.parameters())
    total = sum(p.numel() for p in params)
    prec = delta * np.eye(total)
    for xn, yn in zip(torch.tensor(X), torch.tensor(y)):
        f = net(xn[None])[0]
        jac = np.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(f[k], params, retain_graph=True)])
                        .numpy() for k in range(f.numel())])  # (K, P)
        fd = f.detach()
        if lik == "gaussian":
            loss = lambda v: 0.5 * (v[0] - yn) ** 2 / s2  # noqa: E731
        elif lik == "bernoulli":
            loss = lambda v: torch.nn.functional.binary_cross_entropy_with_logits(v[0], yn)  # noqa: E731
        else:
            loss = lambda v: torch.nn.functional.cross_entropy(v[None], yn.long()[None])  # noqa: E731
        lam = torch.autograd.functional.hessian(loss, fd).numpy().reshape(fd.numel(), fd.numel())
        prec += jac.T @ lam @ jac
    return np.linalg.inv(prec)


@pytest.mark.parametrize("lik", ["gaussian", "bernoulli", "softmax"])
def test_posterior_target_is_the_last_layer_ggn_laplace_covariance(lik):
    net, X, y = _net(lik, steps=60)
    X, y = X[:80], y[:80]
    delta, s2 = 0.7, 0.25
    model, data = last_layer(net, X, y, likelihood=lik, noise_variance=s2)
    e = expand(model, data, prior_precision=delta)
    w, b = model.layout.head_of(e.theta_hat)
    with torch.no_grad():  # the Laplace approximation is taken at the MAP: load sgtune's θ̂ into the head
        net[-1].weight.copy_(torch.tensor(w))
        net[-1].bias.copy_(torch.tensor(b))
    ref = _dense_ggn_posterior(net, X, y, lik, delta, s2)
    perm = model.layout.torch_order()
    np.testing.assert_allclose(e.posterior_cov(), ref[np.ix_(np.argsort(perm), np.argsort(perm))],
                               rtol=SOLVER_RTOL, atol=SOLVER_RTOL * np.abs(ref).max())


def test_gaussian_map_is_the_ridge_solution_from_the_trained_start():
    net, X, y = _net("gaussian", steps=30)
    model, data = last_layer(net, X, y, noise_variance=0.5)
    e = expand(model, data, prior_precision=2.0)
    P = data.X
    ridge = np.linalg.solve(P.T @ P / 0.5 + 2.0 * np.eye(P.shape[1]), P.T @ y / 0.5)
    np.testing.assert_allclose(e.theta_hat, ridge, rtol=1e-9, atol=1e-10)
    assert np.abs(model.initial_params() - ridge).max() > 1e-3  # the trained head is a start, not the MAP


def test_softmax_needs_a_prior_and_has_no_sandwich():
    net, X, y = _net("softmax", steps=20)
    model, data = last_layer(net, X, y, likelihood="softmax")
    assert model.layout.n_outputs == 3 and model.layout.dim == 3 * 7
    assert model.parameter_names()[6:8] == ("4.bias[0]", "4.weight[1,0]")
    with pytest.raises(DataFormatError, match="`prior_precision` > 0"):
        expand(model, data, prior_precision=0.0)
    e = expand(model, data, prior_precision=1.0)
    with pytest.raises(NotPositiveDefiniteError, match="softmax last layer has no sandwich"):
        e.sandwich_cov()
    # the shift direction gets no gradient noise (Σ_k (π − e_y)_k = 0), so SGD cannot reach the posterior's
    # prior-only spread there; SGLD's injected noise can (β > N: the noise alone stays below the target)
    with pytest.raises(SgtuneError, match="use SGLD"):
        tune(e, Dynamics(None, 32), target="posterior")
    res = tune(e, Dynamics(None, 32, inv_temperature=2.0 * data.n_data), target="posterior")
    assert res.step_matrix.shape == (21, 21) and res.spectral_radius < 1
    keep = y != 2  # a class without rows: its weights are identified by the prior
    m2, d2 = last_layer(net, X[keep], y[keep], likelihood="softmax")
    assert np.all(np.isfinite(expand(m2, d2, prior_precision=1.0).posterior_cov()))
    with pytest.raises(DataFormatError, match=r"class indices 0 … 2, but y\[0\] = 3"):
        last_layer(net, X, np.r_[3.0, y[1:]], likelihood="softmax")


# ----------------------------------------------------------------------------- exports on the head only
def _tuned(lik="gaussian", B=20):
    net, X, y = _net(lik, steps=40)
    model, data = last_layer(net, X, y, likelihood=lik)
    e = expand(model, data, prior_precision=1.0)
    return net, X, model, data, e, tune(e, Dynamics(None, B), target="posterior")


def test_torch_optimizer_subset_updates_the_head_only():
    net, X, model, data, e, res = _tuned()
    body = [p.detach().clone() for p in net[:-1].parameters()]
    theta0 = model.layout.theta_of(net[-1].weight.detach().numpy(), net[-1].bias.detach().numpy())
    names = e.parameter_names  # the head's names (a tuning result carries them too where it records names)
    opt = torch_optimizer(res, net, prior="in-loss", parameter_names=names,
                          options=TorchOptions(subset=True, check_batch_size=False))
    assert len(opt.param_groups[0]["params"]) == 2
    idx = np.arange(20)
    net.zero_grad()  # training left the last step's gradients
    out = net(torch.tensor(X[idx]))
    loss = 0.5 * ((out[:, 0] - torch.tensor(data.y[idx])) ** 2).mean()
    loss.backward()
    g = model.per_sample_grads(theta0, data.X[idx], data.y[idx]).mean(axis=0)
    opt.step()
    theta1 = model.layout.theta_of(net[-1].weight.detach().numpy(), net[-1].bias.detach().numpy())
    np.testing.assert_allclose(theta1, theta0 - res.step_matrix @ g, rtol=1e-12, atol=1e-14)
    for a, b in zip(body, net[:-1].parameters()):
        assert torch.equal(a, b)
    with pytest.raises(SgtuneError, match="has no rows in the layout"):
        torch_optimizer(res, net, prior="in-loss", parameter_names=names)  # without subset the body's parameters are unaccounted for


def test_optax_subset_updates_the_head_leaves_only():
    pytest.importorskip("optax")
    import jax.numpy as jnp

    _, _, model, data, e, res = _tuned()
    w, b = model.layout.head_of(e.theta_hat)
    params = {"0": {"weight": jnp.ones((8, 3)), "bias": jnp.zeros(8)}, "4": {"weight": jnp.asarray(w),
                                                                              "bias": jnp.asarray(b)}}
    g = np.random.default_rng(0).standard_normal(model.layout.dim)
    gw, gb = model.layout.head_of(g)
    grads = {"0": {"weight": jnp.ones((8, 3)), "bias": jnp.ones(8)}, "4": {"weight": jnp.asarray(gw),
                                                                           "bias": jnp.asarray(gb)}}
    tx = optax_transform(res, subset=True, prior="in-loss", parameter_names=e.parameter_names)
    upd, _ = tx.update(grads, tx.init(params), params)
    assert float(jnp.abs(upd["0"]["weight"]).max()) == 0.0 and float(jnp.abs(upd["0"]["bias"]).max()) == 0.0
    step = model.layout.theta_of(np.asarray(upd["4"]["weight"]), np.asarray(upd["4"]["bias"]))
    np.testing.assert_allclose(step, -res.step_matrix @ g, rtol=1e-5, atol=1e-6)  # JAX float32 arithmetic
    ref = numpy_step(res, prior="in-loss")(e.theta_hat, np.zeros_like(g), g)[0] - e.theta_hat
    np.testing.assert_allclose(step, ref, rtol=1e-5, atol=1e-6)


def test_numpy_step_on_a_whole_network_vector_updates_the_head_entries_only():
    net, X, model, data, e, res = _tuned()
    full_names = [f"{n}[{','.join(map(str, i))}]" for n, p in net.named_parameters() for i in np.ndindex(*p.shape)]
    full = torch.nn.utils.parameters_to_vector(net.parameters()).detach().numpy()
    g_full = np.random.default_rng(1).standard_normal(full.size)
    for prior in ("in-loss", "add"):
        kw = dict(prior=prior, parameter_names=e.parameter_names)
        if prior == "add":
            kw.update(prior_precision=1.0, n_data=data.n_data)
        out, m = numpy_step(res, vector_names=full_names, **kw)(full, np.zeros_like(full), g_full)
        pos = np.array([full_names.index(n) for n in e.parameter_names])
        head, m_head = numpy_step(res, **kw)(full[pos], np.zeros(pos.size), g_full[pos])
        np.testing.assert_array_equal(out[pos], head)
        np.testing.assert_array_equal(m[pos], m_head)
        frozen = np.setdiff1d(np.arange(full.size), pos)
        np.testing.assert_array_equal(out[frozen], full[frozen])
        assert not np.any(m[frozen])
    with pytest.raises(SgtuneError, match="not among vector_names"):
        numpy_step(res, prior="in-loss", parameter_names=e.parameter_names, vector_names=full_names[:-1])


# ----------------------------------------------------------------------------- verify, applicability
def test_verify_passes_and_applicability_reports_on_a_trained_last_layer():
    """Gaussian last layer: the chain on the head is linear, so the prediction is exact and verify passes
    with probability ≥ 1 − α (α = MC_ALPHA); the applicability report finds the loss quadratic."""
    net, X, y = _net("gaussian", steps=300)
    model, data = last_layer(net, X, y, likelihood="gaussian", noise_variance=0.1)
    e = expand(model, data, prior_precision=1.0)
    res = tune(e, Dynamics(None, 16), target="posterior")
    rep = verify_stationary_cov(model, data, e, Dynamics(res.step_matrix, 16), RunSpec(20_000, n_chains=8, seed=3),
                                check=CheckOptions(alpha=MC_ALPHA), prior_precision=1.0)
    assert rep.test.passed, rep.test.z_max
    st = predict_stationary_cov(e, Dynamics(res.step_matrix, 16))
    a = applicability(model, data, e, st, target_cov=res.target_cov)
    assert a.applicable and a.reasons == ()
    assert a.predicted_deviation < 1e-6 and a.curvature_change["curvature"] < 1e-9


# ----------------------------------------------------------------------------- command line
NET_FILE = textwrap.dedent("""
    import numpy as np
    import torch
    torch.manual_seed(0)
    NET = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    def features(X):
        return np.tanh(X @ np.linspace(-1, 1, 12).reshape(3, 4))
    NOT_A_NET = 3
    WIDE = torch.nn.Sequential(torch.nn.Linear(5, 2), torch.nn.Tanh(), torch.nn.Linear(2, 1))
    def broken(X):
        raise ValueError("boom")
""")


@pytest.fixture
def cli_files(tmp_path):
    X, y = _data("bernoulli", n=120)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    (tmp_path / "net.py").write_text(NET_FILE)
    np.save(tmp_path / "phi.npy", np.tanh(X @ np.linspace(-1, 1, 12).reshape(3, 4)))
    return tmp_path, X, y


def _lam(args):
    r = CliRunner().invoke(main, ["lambda", *args, "--batch-size", "16", "--prior-precision", "1", "-q",
                                  "--no-applicability"])
    return r


def test_cli_last_layer_features_file_and_function_agree_with_python(cli_files):
    tmp, X, y = cli_files
    r1 = _lam([str(tmp / "d.npz"), "--model", "last-layer", "--features", str(tmp / "phi.npy"),
               "--likelihood", "bernoulli"])
    r2 = _lam([str(tmp / "d.npz"), "--model", "last-layer", "--features-from", f"{tmp / 'net.py'}:features",
               "--likelihood", "bernoulli"])
    assert r1.exit_code == 0 and r2.exit_code == 0, (r1.output, r2.output)
    d1, d2 = json.loads(r1.stdout), json.loads(r2.stdout)
    assert d1["model"] == "last-layer (bernoulli)" and d1["dim"] == 5
    np.testing.assert_allclose(d1["lambda"], d2["lambda"], rtol=1e-12)
    model, data = last_layer(lambda Z: np.tanh(Z @ np.linspace(-1, 1, 12).reshape(3, 4)), X, y, likelihood="bernoulli")
    res = tune(expand(model, data, 1.0), Dynamics(None, 16), target="sandwich")
    np.testing.assert_allclose(d1["lambda"], res.step_matrix, rtol=1e-10)


def test_cli_last_layer_torch_network(cli_files):
    tmp, _, _ = cli_files
    r = _lam([str(tmp / "d.npz"), "--model", "last-layer", "--features-from", f"{tmp / 'net.py'}:NET",
              "--likelihood", "bernoulli", "--target", "posterior"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["dim"] == 7 and doc["model"] == "last-layer (bernoulli)"
    assert doc["last_layer"]["head"] == "2" and doc["parameter_names"][-1] == "2.bias[0]"


@pytest.mark.parametrize("extra,code,text", [
    ([], 2, "exactly one of --features"),
    (["--features", "phi.npy", "--intercept"], 2, "--intercept does not apply"),
    (["--features", "phi.npy", "--likelihood", "poisson"], 2, "not poisson"),
    (["--features", "phi.npy", "--layout", "full"], 2, "full layout"),
    (["--features-from", "net.py:NOT_A_NET"], 1, "neither a torch.nn.Module nor a function"),
    (["--features", "d.npz"], 1, ".npz archive"),
    (["--features-from", "net.py:WIDE"], 1, "raised RuntimeError"),
    (["--features-from", "net.py:broken"], 1, "raised ValueError: boom"),
])
def test_cli_last_layer_errors(cli_files, monkeypatch, extra, code, text):
    tmp, _, _ = cli_files
    monkeypatch.chdir(tmp)
    r = _lam(["d.npz", "--model", "last-layer", *extra])
    assert r.exit_code == code and text in r.output and "Traceback" not in r.output, r.output


def test_cli_features_and_softmax_belong_to_last_layer(cli_files, monkeypatch):
    tmp, _, _ = cli_files
    monkeypatch.chdir(tmp)
    r = _lam(["d.npz", "--model", "logistic", "--features", "phi.npy"])
    assert r.exit_code == 2 and "option of --model last-layer" in r.output
    r = _lam(["d.npz", "--model", "mlp", "--hidden-sizes", "2", "--likelihood", "softmax"])
    assert r.exit_code == 2 and "--likelihood softmax" in r.output


@pytest.mark.slow
def test_verify_passes_on_a_softmax_last_layer_with_sgld():
    """K = 3 classes, full softmax layout, SGLD at β = 2N tuned to the posterior: the applicability report finds
    the prediction applicable, and the chains agree with it within the O(λ/B) proxy error the report
    measures (relative_tolerance 5 %, as for the non-Gaussian GLMs of test_applicability). Fast version: the
    Gaussian head above."""
    net, X, y = _net("softmax", steps=300)
    model, data = last_layer(net, X, y, likelihood="softmax")
    e = expand(model, data, prior_precision=1.0)
    beta = 2.0 * data.n_data
    res = tune(e, Dynamics(None, 32, inv_temperature=beta), target="posterior")
    a = applicability(model, data, e, res.stationary, target_cov=res.target_cov)
    assert a.applicable, a.reasons
    rep = verify_stationary_cov(model, data, e, Dynamics(res.step_matrix, 32, inv_temperature=beta),
                                RunSpec(40_000, n_chains=8, seed=1),
                                check=CheckOptions(alpha=MC_ALPHA, relative_tolerance=0.05), prior_precision=1.0)
    assert rep.test.passed, rep.test.z_max


@pytest.mark.parametrize("command,extra", [
    ("covariance", ["--step-size", "0.05", "--batch-size", "16"]),
    ("verify", ["--target", "posterior", "--batch-size", "16", "--steps", "4000", "--chains", "4"]),
    ("run", ["--step-size", "0.05", "--batch-size", "16", "--steps", "500", "--chains", "2"]),
    # --no-timing: plan's short timing runs are run_chains on this same model, which the run case exercises (≈ 4 s of
    # CPU); tests/cli/test_cmd_plan.py covers the timing itself
    ("plan", ["--target", "posterior", "--tolerance", "0.2", "--batch-sizes", "16,32", "--no-timing"]),
])
def test_cli_commands_take_the_last_layer(cli_files, monkeypatch, command, extra):
    tmp, _, _ = cli_files
    monkeypatch.chdir(tmp)
    r = CliRunner().invoke(main, [command, "d.npz", "--model", "last-layer", "--features-from", "net.py:NET",
                                  "--likelihood", "gaussian", "--prior-precision", "1", "-q", *extra])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["model"] == "last-layer (gaussian)" and doc["last_layer"]["features"] == "net.py:NET"


# ----------------------------------------------------------------------------- sgtune's own network's last layer
def _sine(n=40, seed=0):
    from sgtune.io.data import make_dataset

    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, size=(n, 1))
    return make_dataset(x, np.sin(x[:, 0]) + 0.1 * rng.standard_normal(n))


def test_mlp_features_are_the_hidden_activations_and_the_head_reproduces_the_output():
    """Independent route: the forward pass written out with numpy (tanh(XW₁ᵀ + b₁), then W₂ᵀ, b₂)."""
    from sgtune.models import make_mlp
    from sgtune.models.lastlayer import mlp_last_layer

    mlp = make_mlp("3,2", noise_variance=0.25)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((7, 2))
    theta = rng.standard_normal(mlp.n_params(2))
    (W1, b1), (W2, b2), (W3, b3) = mlp.unflatten(theta, 2)
    phi = np.tanh(np.tanh(X @ W1.T + b1) @ W2.T + b2)
    np.testing.assert_allclose(mlp.features(theta, X), phi, rtol=1e-13, atol=1e-15)
    head, data = mlp_last_layer(mlp, theta, X, rng.standard_normal(7))
    assert head.layout.names() == ("output.weight[0,0]", "output.weight[0,1]", "output.bias[0]")
    np.testing.assert_allclose(data.X @ head.trained, phi @ W3[0] + b3[0], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(data.X @ head.trained, mlp.output(theta, X), rtol=1e-12, atol=1e-14)
    assert head.inner.noise_variance == 0.25
    with pytest.raises(SgtuneError, match="poisson"):
        mlp_last_layer(make_mlp("3", likelihood="poisson"), np.zeros(10), X[:, :1], np.ones(7))


def test_the_fitted_networks_head_refit_on_its_features_stays_at_theta_hat():
    """θ̂ is stationary in every coordinate, so the head's MAP with the same prior is θ̂'s output layer."""
    from sgtune.models import make_mlp
    from sgtune.models.lastlayer import mlp_last_layer

    ds = _sine()
    mlp = make_mlp("3", noise_variance=0.01)
    e = expand(mlp, ds, 1.0)
    head, data = mlp_last_layer(mlp, e.theta_hat, ds.X, ds.y)
    eh = expand(head, data, 1.0)
    out = e.theta_hat[-4:]  # output.weight[0,0..2], output.bias[0]
    np.testing.assert_allclose(eh.theta_hat, out, rtol=0, atol=1e-7 * np.abs(out).max())


def test_a_network_that_is_not_applicable_gets_its_checked_last_layer_first():
    from sgtune.io.data import example
    from sgtune.models import get_model, make_mlp
    from sgtune.theory.applicability import last_layer_remedy
    from sgtune.theory.tuning import tune

    ds = _sine()
    mlp = make_mlp("2", noise_variance=0.01)
    e = expand(mlp, ds, 1.0)
    res = tune(e, Dynamics(None, 10, inv_temperature=2.0 * ds.n_data), target="posterior")
    rep = applicability(mlp, ds, e, res.stationary, target_cov=res.target_cov)
    assert not rep.applicable
    first = rep.reasons[0].remedies[0]
    assert first.changes == {"model": "last-layer", "features_from": "mlp", "target": "posterior", "blocks": None}
    assert first.expect == "applicable" and "body frozen" in first.why
    # nothing to offer: a GLM, a given Λ (no target), a prior matrix that is not G·I
    glm, lg = get_model("logistic"), example("logistic")
    el = expand(glm, lg)
    rl = tune(el, Dynamics(None, 32), target="posterior")
    assert last_layer_remedy(glm, lg, el, rl.stationary, rl.target_cov) is None
    assert last_layer_remedy(mlp, ds, e, res.stationary, None) is None
    e2 = expand(mlp, ds, np.diag(np.linspace(1.0, 2.0, e.dim)))
    r2 = tune(e2, Dynamics(None, 10, inv_temperature=2.0 * ds.n_data), target="posterior")
    assert last_layer_remedy(mlp, ds, e2, r2.stationary, r2.target_cov) is None


def test_features_from_mlp_takes_the_network_weights_from_theta_hat_and_refuses_what_it_cannot(tmp_path):
    """--theta-hat gives the network's D weights (here θ̂ of --model mlp itself, saved and passed back): the head's
    fit on their features stays at their output layer; what the option cannot do is one line naming it."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(40, 1))
    csv = tmp_path / "s.csv"
    np.savetxt(csv, np.c_[x, np.sin(x[:, 0])], delimiter=",", header="x,y", comments="")
    base = [str(csv), "--hidden-sizes", "2", "--noise-variance", "0.01", "--prior-precision", "1",
            "--batch-size", "10", "--target", "posterior", "--inverse-temperature", "2N", "-q", "--no-applicability"]
    r = CliRunner().invoke(main, ["lambda", "--model", "mlp", *base])
    assert r.exit_code == 0, r.stderr
    theta = np.asarray(json.loads(r.stdout)["theta_hat"])
    np.save(tmp_path / "w.npy", theta)
    r2 = CliRunner().invoke(main, ["lambda", "--model", "last-layer", "--features-from", "mlp", *base,
                                   "--theta-hat", str(tmp_path / "w.npy")])
    assert r2.exit_code == 0, r2.stderr
    np.testing.assert_allclose(json.loads(r2.stdout)["theta_hat"], theta[-3:], rtol=0,
                               atol=1e-6 * np.abs(theta[-3:]).max())
    r3 = CliRunner().invoke(main, ["lambda", "--model", "last-layer", "--features-from", "mlp", *base,
                                   "--likelihood", "poisson"])
    assert r3.exit_code == 2 and "--likelihood gaussian or bernoulli" in r3.stderr
    bad = [a for a in base if a not in ("--hidden-sizes", "2")]
    r4 = CliRunner().invoke(main, ["lambda", "--model", "last-layer", "--features-from", "mlp", *bad])
    assert r4.exit_code == 2 and "--features-from mlp needs --hidden-sizes" in r4.stderr
    np.save(tmp_path / "short.npy", theta[:3])
    r5 = CliRunner().invoke(main, ["lambda", "--model", "last-layer", "--features-from", "mlp", *base,
                                   "--theta-hat", str(tmp_path / "short.npy")])
    assert r5.exit_code == 1 and "--theta-hat must hold D = 7" in r5.stderr


# ----------------------------------------------------------------------------- which Linear is the head; NaN features
HEAD_FIRST_FILE = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    class First(torch.nn.Module):  # the output layer registered before the body
        def __init__(self):
            super().__init__()
            self.out = torch.nn.Linear(4, 1)
            self.body = torch.nn.Linear(3, 4)
        def forward(self, x):
            return self.out(torch.tanh(self.body(x)))
    FIRST = First()
    class Twice(torch.nn.Module):  # no nn.Linear gives the output: a scaling follows
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(3, 4), torch.nn.Linear(4, 1)
        def forward(self, x):
            return 2 * self.b(torch.tanh(self.a(x)))
    TWICE = Twice()
    class Sqrt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.out = torch.nn.Linear(3, 4), torch.nn.Linear(4, 1)
        def forward(self, x):
            return self.out(torch.sqrt(self.body(x)))  # NaN where the body is negative
    SQRT = Sqrt()
""")


def test_the_head_is_the_linear_that_gives_the_output_or_the_one_named(cli_files, monkeypatch):
    """A network whose output nn.Linear is registered first: the head is the layer whose output is the
    network's (the features are the input of `out`, tanh(body(x)), computed independently here), ``--head``
    names it, a name the network lacks lists its nn.Linear modules (exit 2), and NaN features are said as such."""
    tmp, X, y = cli_files
    (tmp / "first.py").write_text(HEAD_FIRST_FILE)
    monkeypatch.chdir(tmp)
    base = ["d.npz", "--model", "last-layer", "--likelihood", "bernoulli", "--features-from"]
    docs = []
    for extra in ([], ["--head", "out"]):
        r = _lam([*base, "first.py:FIRST", *extra])
        assert r.exit_code == 0, r.output
        docs.append(json.loads(r.stdout))
    assert docs[0]["last_layer"]["head"] == "out" and docs[0]["parameter_names"][0] == "out.weight[0,0]"
    np.testing.assert_array_equal(docs[0]["lambda"], docs[1]["lambda"])
    ns: dict = {}
    exec(HEAD_FIRST_FILE, ns)
    body = ns["FIRST"].body
    W, b = body.weight.detach().double().numpy(), body.bias.detach().double().numpy()
    model, data = last_layer(lambda Z: np.tanh(Z @ W.T + b), X, y, likelihood="bernoulli")
    res = tune(expand(model, data, 1.0), Dynamics(None, 16), target="sandwich")
    np.testing.assert_allclose(docs[0]["lambda"], res.step_matrix, rtol=1e-8)
    r = _lam([*base, "first.py:FIRST", "--head", "nope"])
    assert r.exit_code == 2 and "--head nope" in r.stderr and "'out', 'body'" in r.stderr, r.output
    r = _lam([*base, "first.py:TWICE"])
    assert r.exit_code == 1 and "follows it" in r.stderr and "--head NAME" in r.stderr and "'a', 'b'" in r.stderr
    r = _lam([*base, "first.py:SQRT"])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "features" in r.stderr and "not finite" in r.stderr, \
        r.stderr
    with pytest.raises(SgtuneError, match="`head='nope'`"):
        last_layer(ns["FIRST"], X, y, likelihood="bernoulli", head="nope")
