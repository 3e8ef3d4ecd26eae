"""The Kronecker factors of a torch network (curvlinops) against sgtune's NumPy MLP and a brute-force torch route."""
import math

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.core.errors import SgtuneError
from sgtune.models import MLP, from_torch
from sgtune.models.kfac import mlp_factors, torch_factors
from sgtune.theory.kronecker import tune_kronecker

torch = pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment
pytest.importorskip("curvlinops")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _torch_copy(net: MLP, theta: np.ndarray, p: int):
    s = net.widths(p)
    mods = []
    for i, (W, b) in enumerate(net.unflatten(theta, p)):
        lin = torch.nn.Linear(s[i], s[i + 1]).double()
        with torch.no_grad():
            lin.weight.copy_(torch.as_tensor(W))
            lin.bias.copy_(torch.as_tensor(b))
        mods.append(lin)
        if i < len(s) - 2:
            mods.append(torch.nn.Tanh())
    return torch.nn.Sequential(*mods)


@pytest.mark.parametrize("likelihood,noise_variance", [("gaussian", 2.0), ("bernoulli", 1.0)])
def test_curvlinops_factors_equal_the_numpy_mlp(rng, likelihood, noise_variance):
    n, p = 120, 3
    X = rng.normal(size=(n, p))
    y = np.tanh(X[:, 0]) + 0.5 * rng.normal(size=n)
    if likelihood == "bernoulli":
        y = (y > 0).astype(float)
    net = MLP((4, 3), activation="tanh", likelihood=likelihood, noise_variance=noise_variance)
    theta = net.initial_params(p, rng)
    ref = mlp_factors(net, theta, X, y)
    got = torch_factors(_torch_copy(net, theta, p), X, y, likelihood, noise_variance=noise_variance, chunk_rows=50)
    assert got.dim == ref.dim and got.n_data == n
    for a, b in zip(got.layers, ref.layers):
        assert np.array_equal(a.theta_indices(), b.theta_indices())
        for field in ("input_factor", "curvature_factor", "noise_factor", "mean_gradient"):
            x, r = getattr(a, field), getattr(b, field)
            assert np.allclose(x, r, rtol=1e-10, atol=1e-13 * np.abs(r).max()), (a.name, field)


def test_curvlinops_categorical_against_brute_force(rng):
    """K = 3 logits: A from the layer inputs, G = mean J_nᵀ(diag p − ppᵀ)J_n, E and Ḡ from per-sample gradients."""
    n, p, K = 60, 2, 3
    X = rng.normal(size=(n, p))
    y = rng.integers(0, K, size=n).astype(float)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(p, 4), torch.nn.Tanh(), torch.nn.Linear(4, K)).double()
    fac = torch_factors(net, X, y, "categorical")
    Xt = torch.as_tensor(X)
    h = torch.tanh(net[0](Xt)).detach()
    g = from_torch(net, "categorical").per_sample_grads(from_torch(net, "categorical").flatten(), X, y)
    probs = torch.softmax(net(Xt), dim=1).detach().numpy()
    for lf, inp, suffix in ((fac.layers[0], Xt, lambda z: net[2](torch.tanh(z))), (fac.layers[1], h, lambda z: z)):
        at = np.hstack([inp.numpy(), np.ones((n, 1))])
        assert np.allclose(lf.input_factor, at.T @ at / n, rtol=1e-10)
        z = net[0](Xt).detach() if lf.name == "0" else net(Xt).detach()
        G = np.zeros((lf.d_out, lf.d_out))
        for i in range(n):
            Jn = torch.autograd.functional.jacobian(suffix, z[i]).numpy()  # (K, d_out)
            Hr = np.diag(probs[i]) - np.outer(probs[i], probs[i])
            G += Jn.T @ Hr @ Jn / n
        assert np.allclose(lf.curvature_factor, G, rtol=1e-9, atol=1e-14)
        blocks = g[:, lf.theta_indices()].reshape(n, lf.d_out, lf.d_in)
        e = blocks[:, :, -1]
        assert np.allclose(lf.noise_factor, e.T @ e / n, rtol=1e-9, atol=1e-14)
        assert np.allclose(lf.mean_gradient, blocks.mean(axis=0), rtol=1e-9, atol=1e-14)


def test_tune_kronecker_on_a_torch_network_and_refusals(rng):
    X = rng.normal(size=(200, 3))
    y = rng.integers(0, 2, size=200).astype(float)
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 1))
    lines = []
    res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=20, inv_temperature=400.0),
                         likelihood="bernoulli", prior_precision=1.0, progress=lines.append)
    assert res.names == ("0", "2") and len(lines) == 2 and "layer 2/2 2" in lines[1]
    assert res.covariance_error < 1e-10 and res.dim == 26
    conv = torch.nn.Sequential(torch.nn.Conv1d(1, 1, 2), torch.nn.Flatten(), torch.nn.Linear(2, 1))
    with pytest.raises(SgtuneError, match="parameter '0.weight' belongs to another module"):
        tune_kronecker(conv, (X, y), Dynamics(None, batch_size=20), likelihood="bernoulli")
    with pytest.raises(SgtuneError, match="likelihood must be one of gaussian, bernoulli, categorical"):
        tune_kronecker(net, (X, y), Dynamics(None, batch_size=20), likelihood="poisson")


def _small_tuned(rng, momentum=0.0, beta=math.inf):
    X = rng.normal(size=(120, 3))
    y = np.tanh(X[:, 0]) + 0.3 * rng.normal(size=120)
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=12, inv_temperature=beta, momentum=momentum),
                         prior_precision=1.0)
    return net, res, X, y


def _theta(net):
    return torch.nn.utils.parameters_to_vector(net.parameters()).detach().numpy().copy()


def _grad(net):
    return np.concatenate([p.grad.detach().numpy().ravel() for p in net.parameters()])


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_torch_optimizer_applies_the_kronecker_step(rng, momentum):
    from sgtune.io.export import torch_optimizer

    net, res, X, y = _small_tuned(rng, momentum)
    opt = torch_optimizer(res, net)
    buf = np.zeros(res.dim)
    for t in range(3):
        opt.zero_grad()
        Xb, yb = torch.as_tensor(X[12 * t:12 * t + 12]), torch.as_tensor(y[12 * t:12 * t + 12])
        (0.5 * (net(Xb)[:, 0] - yb).pow(2)).mean().backward()
        before, g = _theta(net), _grad(net)
        buf = momentum * buf + g
        opt.step()
        assert np.allclose(_theta(net), before - res.apply(buf), rtol=1e-12, atol=1e-15)


def _whitened_noise_cov(net, res, beta):
    """Zero gradients, 4000 steps: the covariance of the increments whitened by (2Λ/β)^{-1/2}, and the steps."""
    from sgtune.io.kronecker_torch import kronecker_torch_optimizer

    opt = kronecker_torch_optimizer(res, net, seed=7)
    n = 4000
    inc = np.empty((n, res.dim))
    for t in range(n):
        for p in net.parameters():
            p.grad = torch.zeros_like(p)
        before = _theta(net)
        opt.step()
        inc[t] = _theta(net) - before
    w, V = np.linalg.eigh(res.dense_step_matrix() * 2.0 / beta)
    white = inc @ V / np.sqrt(w)
    return white.T @ white / n, n


def test_torch_optimizer_noise_is_n_0_2lambda_over_beta(rng):
    """Zero gradients: the increments are N(0, 2Λ/β); whitened by (2Λ/β)^{-1/2} their covariance is I within MC error."""
    net, res, _, _ = _small_tuned(rng, beta=500.0)
    cov, n = _whitened_noise_cov(net, res, 500.0)
    assert np.max(np.abs(cov - np.eye(res.dim))) < 5 * np.sqrt(2.0 / n)


def test_probe_check_on_a_linear_gaussian_layer(rng):
    """One homoscedastic Gaussian layer without prior: the factored prediction is the dense exact one up to the
    noise factorisation's sampling error (≈ 1/√N) and the dropped Σ-dependent noise (≈ D/N), and the real chain
    matches it within Monte Carlo error along every probe."""
    from sgtune.io.data import make_dataset
    from sgtune.models import expand
    from sgtune.theory.stationary import predict_stationary_cov
    from sgtune.workflows.kronecker_probes import probe_check, probe_directions

    n = 2000
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=n)
    A1 = np.hstack([X, np.ones((n, 1))])
    w = np.linalg.lstsq(A1, y, rcond=None)[0]
    net = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        net.weight.copy_(torch.as_tensor(w[None, :3]))
        net.bias.copy_(torch.as_tensor(w[3:]))
    res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=50, inv_temperature=2.0 * n))
    e = expand(MLP(()), make_dataset(X, y), theta_hat=w)
    exact = predict_stationary_cov(e, res.dynamics.replace(step=res.dense_step_matrix())).cov
    labels, V = probe_directions(res, 3, 0)
    assert np.allclose(res.probe_variance(V), np.einsum("ki,ij,kj->k", V, exact, V), rtol=0.05)
    pc = probe_check(res, net, X, y, steps=6000, n_random=3, n_batches=30)
    assert pc.labels == labels and np.all(pc.mcse > 0)
    assert np.all(np.abs(pc.z) < 4.0), pc.to_dict()


def _small_tuned_eig(rng, momentum=0.0, beta=math.inf):
    X = rng.normal(size=(120, 3))
    y = np.tanh(X[:, 0]) + 0.3 * rng.normal(size=120)
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=12, inv_temperature=beta, momentum=momentum),
                         prior_precision=1.0, prior="eigenbasis")
    return net, res, X, y


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_torch_optimizer_applies_the_eigenbasis_step(rng, momentum):
    from sgtune.io.export import torch_optimizer

    net, res, X, y = _small_tuned_eig(rng, momentum)
    assert res.layers[0].form == "eigenbasis"
    opt = torch_optimizer(res, net)
    lam = res.dense_step_matrix()
    buf = np.zeros(res.dim)
    for t in range(3):
        opt.zero_grad()
        Xb, yb = torch.as_tensor(X[12 * t:12 * t + 12]), torch.as_tensor(y[12 * t:12 * t + 12])
        (0.5 * (net(Xb)[:, 0] - yb).pow(2)).mean().backward()
        before, g = _theta(net), _grad(net)
        buf = momentum * buf + g
        opt.step()
        assert np.allclose(_theta(net), before - lam @ buf, rtol=1e-12, atol=1e-15)


def test_torch_optimizer_eigenbasis_noise_is_n_0_2lambda_over_beta(rng):
    net, res, _, _ = _small_tuned_eig(rng, beta=500.0)
    cov, n = _whitened_noise_cov(net, res, 500.0)
    assert np.max(np.abs(cov - np.eye(res.dim))) < 5 * np.sqrt(2.0 / n)
