"""sgtune.models.pytorch: a PyTorch network as a protocol model.

Independent routes: sgtune's own NumPy network (:class:`sgtune.models.mlp.MLP`, back-propagation and
Pearlmutter's R-operator) with the same weights, loaded by torch's own ``vector_to_parameters`` (so
the θ layout is checked too); the closed-form gradient and Hessian of softmax regression; central
differences of the gradients and of the outputs.
"""
from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment

from click.testing import CliRunner  # noqa: E402

from sgtune.cli import main  # noqa: E402
from sgtune.core.config import Dynamics, RunSpec  # noqa: E402
from sgtune.core.errors import DataFormatError, MissingExtraError, SgtuneError  # noqa: E402
from sgtune.io.data import make_dataset  # noqa: E402
from sgtune.models import expand, from_torch, per_sample_curvature  # noqa: E402
from sgtune.models.base import DenseCurvature, ModelError, RankOneCurvature  # noqa: E402
from sgtune.models.mlp import MLP  # noqa: E402
from sgtune.sampler import run_chains  # noqa: E402
from sgtune.theory.tuning import tune  # noqa: E402

from _tolerances import SOLVER_RTOL  # noqa: E402

#: two float64 evaluations of the same network by different code (autodiff vs hand-written
#: back-propagation) agree to ~1e2·eps of the values; 1e-10 leaves room for cancellation in Hessians
SAME_NETWORK_ATOL = 1e-10
ACTS = {"tanh": torch.tanh, "softplus": torch.nn.functional.softplus}


class Net(torch.nn.Module):
    """hidden1 … hiddenK, output: the parameter names and layout of sgtune's MLP."""

    def __init__(self, p, hidden, act="tanh", out=1):
        super().__init__()
        widths = (p, *hidden)
        for k in range(len(hidden)):
            setattr(self, f"hidden{k + 1}", torch.nn.Linear(widths[k], widths[k + 1]))
        self.output = torch.nn.Linear(widths[-1], out)
        self.n_hidden, self.act = len(hidden), ACTS[act]

    def forward(self, x):
        for k in range(self.n_hidden):
            x = self.act(getattr(self, f"hidden{k + 1}")(x))
        return self.output(x)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def data(lik, n=30, p=3, seed=0, k=3):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, p))
    y = {"gaussian": r.standard_normal(n), "bernoulli": (r.random(n) < 0.5).astype(float),
         "poisson": r.poisson(1.0, n).astype(float), "categorical": r.integers(0, k, n).astype(float)}[lik]
    return X, y


def net_with(theta, *args, **kw):
    torch.manual_seed(0)
    net = Net(*args, **kw).double()
    torch.nn.utils.vector_to_parameters(torch.tensor(theta), net.parameters())  # torch's own flattening
    return net


@pytest.mark.parametrize("lik", ["gaussian", "bernoulli", "poisson"])
@pytest.mark.parametrize("hidden, act", [((4,), "tanh"), ((3, 2), "softplus")])
def test_same_network_as_sgtune_mlp(lik, hidden, act):
    X, y = data(lik)
    mlp = MLP(hidden, act, lik, noise_variance=0.7)
    theta = mlp.initial_params(3, np.random.default_rng(1)) + 0.1 * np.random.default_rng(2).standard_normal(
        mlp.n_params(3))
    model = from_torch(net_with(theta, 3, hidden, act), lik, noise_variance=0.7)
    assert model.n_params(3) == mlp.n_params(3)
    np.testing.assert_array_equal(model.initial_params(3, None), theta)
    assert model.parameter_names(("x0", "x1", "x2")) == mlp.parameter_names(("0", "1", "2"))
    assert model.parameter_blocks(3) == mlp.parameter_blocks(3)
    for fn in ("per_sample_losses", "per_sample_grads", "per_sample_hessians"):
        np.testing.assert_allclose(getattr(model, fn)(theta, X, y), getattr(mlp, fn)(theta, X, y), rtol=0,
                                   atol=SAME_NETWORK_ATOL, err_msg=fn)
    v = np.random.default_rng(3).standard_normal(model.dim)
    np.testing.assert_allclose(model.hessian_vector_products(theta, X, y, v),
                               mlp.hessian_vector_products(theta, X, y, v), rtol=0, atol=SAME_NETWORK_ATOL)
    th_c = theta + 0.1 * np.random.default_rng(4).standard_normal((5, model.dim))
    Xb, yb = data(lik, n=35, seed=5)
    Xb, yb = Xb.reshape(5, 7, 3), yb.reshape(5, 7)
    np.testing.assert_allclose(model.batched_grads(th_c, Xb, yb), mlp.batched_grads(th_c, Xb, yb), rtol=0,
                               atol=SAME_NETWORK_ATOL)
    gn, gn_ref = model.with_hessian("gauss-newton"), MLP(hidden, act, lik, 0.7, hessian="gauss-newton")
    cur, ref = gn.curvature(theta, X, y), gn_ref.curvature(theta, X, y)
    assert isinstance(cur, RankOneCurvature) and gn.rank_one and not model.rank_one
    np.testing.assert_allclose(cur.features, ref.features, rtol=0, atol=SAME_NETWORK_ATOL)
    np.testing.assert_allclose(cur.weights, ref.weights, rtol=0, atol=SAME_NETWORK_ATOL)


def softmax_regression_reference(theta, X, y, K):
    """Closed form for logits z = Wx + b, θ = (W row-major, b): g = (p − e_y) ⊗ (x, 1), J = J_zᵀ(diag p − ppᵀ)J_z."""
    n, p = X.shape
    W, b = theta[:K * p].reshape(K, p), theta[K * p:]
    z = X @ W.T + b
    pr = np.exp(z - z.max(1, keepdims=True))
    pr /= pr.sum(1, keepdims=True)
    r = pr - np.eye(K)[y.astype(int)]
    g = np.hstack([(r[:, :, None] * X[:, None, :]).reshape(n, K * p), r])
    Jz = np.concatenate([np.einsum("kl,nj->nklj", np.eye(K), X).reshape(n, K, K * p),
                         np.broadcast_to(np.eye(K), (n, K, K))], axis=2)
    A = pr[:, :, None] * np.eye(K) - pr[:, :, None] * pr[:, None, :]
    return g, np.einsum("nka,nkl,nlb->nab", Jz, A, Jz)


@pytest.mark.parametrize("hessian", ["exact", "gauss-newton", "hvp"])
def test_categorical_softmax_regression_closed_form(hessian):
    K, p = 4, 3
    X, y = data("categorical", k=K)
    torch.manual_seed(1)
    lin = torch.nn.Linear(p, K)
    model = from_torch(lin, "categorical", hessian=hessian)
    theta = model.flatten()
    g, H = softmax_regression_reference(theta, X, y, K)
    np.testing.assert_allclose(model.per_sample_grads(theta, X, y), g, rtol=0, atol=SAME_NETWORK_ATOL)
    cur = per_sample_curvature(model, theta, X, y)  # linear logits: Gauss–Newton is the exact Hessian
    assert isinstance(cur, DenseCurvature)
    np.testing.assert_allclose(cur.hessians, H, rtol=0, atol=SAME_NETWORK_ATOL)
    z = model.output(theta, X)
    ref_loss = np.log(np.exp(z).sum(1)) - z[np.arange(len(y)), y.astype(int)]
    np.testing.assert_allclose(model.per_sample_losses(theta, X, y), ref_loss, rtol=1e-13)
    assert not model.rank_one


def test_categorical_network_against_central_differences():
    K = 3
    X, y = data("categorical", n=8, k=K)
    torch.manual_seed(2)
    net = Net(3, (4,), "tanh", out=K)
    exact, gn = from_torch(net, "categorical"), from_torch(net, "categorical", hessian="gauss-newton")
    theta, d, h = exact.flatten(), exact.dim, 1e-5
    fd_h = np.empty((len(y), d, d))
    fd_j = np.empty((len(y), K, d))
    for j in range(d):
        e = np.zeros(d)
        e[j] = h
        fd_h[:, :, j] = (exact.per_sample_grads(theta + e, X, y) - exact.per_sample_grads(theta - e, X, y)) / (2 * h)
        fd_j[:, :, j] = (exact.output(theta + e, X) - exact.output(theta - e, X)) / (2 * h)
        fd_g = (exact.per_sample_losses(theta + e, X, y) - exact.per_sample_losses(theta - e, X, y)) / (2 * h)
        np.testing.assert_allclose(exact.per_sample_grads(theta, X, y)[:, j], fd_g, rtol=0, atol=1e-8)
    # central differences: O(h²) truncation (~1e-10 here) plus ~eps/h rounding (~1e-11)
    np.testing.assert_allclose(exact.per_sample_hessians(theta, X, y), fd_h, rtol=0, atol=1e-8)
    z = exact.output(theta, X)
    pr = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    A = pr[:, :, None] * np.eye(K) - pr[:, :, None] * pr[:, None, :]
    np.testing.assert_allclose(gn.per_sample_hessians(theta, X, y), np.einsum("nka,nkl,nlb->nab", fd_j, A, fd_j),
                               rtol=0, atol=1e-8)
    assert np.all(np.linalg.eigvalsh(gn.per_sample_hessians(theta, X, y)) > -1e-12)  # PSD, unlike the exact one


def test_names_unflatten_and_the_module_left_alone():
    torch.manual_seed(3)
    net = Net(3, (2,))  # float32, as users build them
    before = [p.detach().clone() for p in net.parameters()]
    model = from_torch(net, "bernoulli", name="tiny")
    assert all(p.dtype == torch.float32 for p in net.parameters())  # the model works on a float64 copy
    for p, q in zip(net.parameters(), before):
        assert torch.equal(p, q)
    theta = model.flatten()
    np.testing.assert_array_equal(theta, torch.nn.utils.parameters_to_vector(net.parameters()).detach().double().numpy())
    np.testing.assert_array_equal(model.flatten(net), theta)
    parts = model.unflatten(np.arange(model.dim, dtype=float))
    names = model.parameter_names(())
    assert names[:4] == ["hidden1.weight[0,0]", "hidden1.weight[0,1]", "hidden1.weight[0,2]", "hidden1.weight[1,0]"]
    assert names[-1] == "output.bias[0]" and len(names) == model.dim == 2 * 3 + 2 + 2 + 1
    for row, name in enumerate(names):  # every name points at the entry of its own row
        base, idx = name[:-1].split("[")
        assert parts[base][tuple(int(i) for i in idx.split(","))].item() == row
    assert model.parameter_blocks(3) == [list(range(8)), [8, 9, 10]]
    with pytest.raises(SgtuneError, match="differ"):
        model.flatten(Net(3, (3,)))


def test_hvp_mode_hides_dense_hessians_and_assembles_the_same_curvature():
    X, y = data("poisson", n=10)
    torch.manual_seed(4)
    net = Net(3, (3,), "softplus")
    exact, hvp = from_torch(net, "poisson"), from_torch(net, "poisson", hessian="hvp")
    assert not hasattr(hvp, "per_sample_hessians") and not hasattr(hvp, "curvature")
    assert not hasattr(exact, "curvature")
    theta = exact.flatten()
    np.testing.assert_allclose(per_sample_curvature(hvp, theta, X, y).hessians,
                               exact.per_sample_hessians(theta, X, y), rtol=0, atol=1e-12)


def test_bad_input_is_one_line():
    lin = torch.nn.Linear(3, 1)
    with pytest.raises(SgtuneError, match="likelihood must be one of"):
        from_torch(lin, "student")
    with pytest.raises(SgtuneError, match="hessian must be one of"):
        from_torch(lin, hessian="fisher")
    with pytest.raises(SgtuneError, match="needs a torch.nn.Module"):
        from_torch(lambda x: x, "gaussian")
    with pytest.raises(SgtuneError, match="no parameters"):
        from_torch(torch.nn.Tanh())
    X, y = data("categorical")
    with pytest.raises(SgtuneError, match="K ≥ 2 logits"):
        from_torch(lin, "categorical").per_sample_losses(np.zeros(4), X, y)
    with pytest.raises(SgtuneError, match="one output per row"):
        from_torch(torch.nn.Linear(3, 2), "gaussian").per_sample_grads(np.zeros(8), X, y)
    with pytest.raises(DataFormatError, match=r"integer class labels 0..K−1 but y\[0\] = 0.5"):
        from_torch(torch.nn.Linear(3, 2), "categorical").check_response(np.array([0.5, 1.0]))
    with pytest.raises(DataFormatError, match="needs y in"):
        from_torch(lin, "bernoulli").check_response(np.array([0.0, 2.0]))


def test_missing_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'sgtune\[torch\]'"):
        from_torch(object())


def test_expand_tune_and_the_sampler_use_it_like_the_builtin_network():
    X, y = data("bernoulli", n=80, seed=6)
    ds = make_dataset(X, y)
    mlp = MLP((3,), "tanh", "bernoulli")
    fit = expand(mlp, ds, prior_precision=1.0)  # the MAP, from sgtune's fit of its own network
    model = from_torch(net_with(fit.theta_hat, 3, (3,)), "bernoulli")
    e = expand(model, ds, prior_precision=1.0, theta_hat=model.flatten())
    for attr in ("hessian", "fisher", "mean_grad"):
        np.testing.assert_allclose(getattr(e, attr), getattr(fit, attr), rtol=0, atol=SAME_NETWORK_ATOL, err_msg=attr)
    assert e.parameter_names == tuple(mlp.parameter_names(("0", "1", "2")))
    t, t_ref = [tune(x, Dynamics(None, 8, inv_temperature=160.0), target="posterior") for x in (e, fit)]
    np.testing.assert_allclose(t.step_matrix, t_ref.step_matrix, rtol=SOLVER_RTOL * 1e2)
    dyn, run = Dynamics(0.05, 8, inv_temperature=200.0, momentum=0.3), RunSpec(40, n_chains=2, burn_in=5, seed=5)
    kw = dict(prior_precision=1.0, initial=fit.theta_hat)
    a = run_chains(model, (X, y), dyn, run, **kw)  # the general path with the model's vmapped batched_grads
    b = run_chains(mlp, (X, y), dyn, run, backend="numpy", **kw)  # the same streams, sgtune's NumPy network
    assert a.settings["backend"] == "numpy"
    np.testing.assert_allclose(a.final_state, b.final_state, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.cov, b.cov, rtol=1e-8, atol=1e-14)


MODEL_FILE = '''
import torch
from sgtune.models.pytorch import from_torch

class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.output = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.output(x)

torch.manual_seed(0)
MODEL = from_torch(Lin(), "gaussian", name="torch-linear")
'''


def test_cli_model_file(tmp_path):
    X, y = data("gaussian", n=60, seed=7)
    npz = tmp_path / "d.npz"
    np.savez(npz, X=X, y=y)
    f = tmp_path / "net.py"
    f.write_text(textwrap.dedent(MODEL_FILE))
    docs = []
    for spec in ([f"{f}:MODEL", "--fit"], ["mlp", "--hidden-sizes", ""]):  # a linear network: one MAP for both fits
        r = CliRunner().invoke(main, ["lambda", str(npz), "--model", *spec, "--batch-size", "16", "-q"],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        docs.append(json.loads(r.stdout))
    assert docs[0]["model"].startswith("torch-linear")
    for key in ("lambda", "predicted_cov", "theta_hat"):  # both MAPs solved to the fit's tolerance
        np.testing.assert_allclose(np.array(docs[0][key]), np.array(docs[1][key]), rtol=1e-7, atol=1e-12)
    r = CliRunner().invoke(main, ["lambda", str(npz), "--model", f"{f}:MODEL", "--hessian", "gauss-newton",
                                  "--batch-size", "16", "-q", "--fit"], catch_exceptions=False)
    assert r.exit_code == 0, r.output


def test_from_torch_takes_the_modules_weights_as_theta_hat_without_a_refit(tmp_path, monkeypatch):
    """Issue 35 item 6: a trained network is expanded at its weights (no L-BFGS on the whole network); fit=True
    (--fit) fits, with a progress line that estimates its time."""
    import sgtune.models.expansion as expansion_module

    X, y = data("gaussian", n=60, seed=7)
    ds = make_dataset(X, y)
    net = torch.nn.Linear(3, 1).double()  # "trained" weights that are not the MAP: H is SPD, ∇L(θ̂) is not 0
    torch.nn.utils.vector_to_parameters(torch.tensor([0.3, -0.2, 0.1, 0.05]), net.parameters())
    weights = from_torch(net, "gaussian").flatten()
    calls = []
    real = expansion_module.fit_map
    monkeypatch.setattr(expansion_module, "fit_map", lambda *a, **k: calls.append(1) or real(*a, **k))
    from sgtune.core.errors import AccuracyWarning

    with pytest.warns(AccuracyWarning, match="gradient of the mean loss at θ̂ is not small"):  # said, not hidden
        e = expand(from_torch(net, "gaussian"), ds, 1.0)
    assert calls == [] and np.array_equal(e.theta_hat, weights)
    assert e.model_description["theta_hat_source"].startswith("the module's current weights")
    e_fit = expand(from_torch(net, "gaussian", fit=True), ds, 1.0)
    assert calls == [1] and e_fit.gradient_norm < 1e-6 < e.gradient_norm
    with pytest.raises(SgtuneError, match="fit must be True"):
        from_torch(net, "gaussian", fit="yes")
    monkeypatch.undo()
    npz, f = tmp_path / "d.npz", tmp_path / "net.py"
    np.savez(npz, X=X, y=y)
    f.write_text(textwrap.dedent(MODEL_FILE))
    base = ["lambda", str(npz), "--model", f"{f}:MODEL", "--batch-size", "16", "--inverse-temperature", "2N",
            "--target", "posterior", "--prior-precision", "1", "--no-applicability"]
    r = CliRunner().invoke(main, base, catch_exceptions=False)
    doc = json.loads(r.stdout)
    assert "θ̂ = the network's current weights, not refitted" in r.stderr and "‖∇L(θ̂)‖ =" in r.stderr
    assert doc["theta_hat_source"].startswith("the module's current weights") and doc["gradient_norm"] > 1e-6
    r = CliRunner().invoke(main, [*base, "--fit"], catch_exceptions=False)
    assert "--fit: fitting θ̂ of the whole network" in r.stderr and "one gradient pass took" in r.stderr
    assert json.loads(r.stdout)["gradient_norm"] < 1e-6
    np.save(tmp_path / "w.npy", np.zeros(4))
    r = CliRunner().invoke(main, [*base, "--fit", "--theta-hat", str(tmp_path / "w.npy")])
    assert r.exit_code == 2 and "--fit fits θ̂, --theta-hat gives it" in r.stderr
    r = CliRunner().invoke(main, ["lambda", str(npz), "--model", "linear", "--batch-size", "16", "--fit"])
    assert r.exit_code == 2 and "--fit applies to a torch network" in r.stderr
