"""The general (NumPy-gradient) path: same chains as the compiled kernel on shared streams; MLP model end to end;
validation of user models."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.reference import chain_kw
from sgtune.core.config import Dynamics, RunSpec
from sgtune.io.data import make_dataset
from sgtune.core.errors import SgtuneError, ShapeError
from sgtune.models import fit_map, get_model
from sgtune.models.mlp import MLP
from sgtune.sampler import run_chains

RTOL, ATOL = 1e-12, 1e-13


class StrippedGLM:
    """A GLM seen only through NumPy per-sample gradients (no numba spec)."""

    def __init__(self, name, batched=False, **kw):
        self.glm = get_model(name, **kw)
        self.name = f"stripped-{name}"
        if batched:
            self.batched_grads = self._batched

    def per_sample_grads(self, theta, X, y):
        return self.glm.derivatives(X @ theta, y)[1][:, None] * X

    def _batched(self, thetas, X, y):
        d1 = self.glm.derivatives(np.einsum("cbp,cp->cb", X, thetas), y)[1]
        return np.einsum("cb,cbp->cp", d1, X) / X.shape[1]


def _problem(name, n=50, d=3, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    theta = np.array([0.5, -0.3, 0.2])[:d]
    if name == "logistic":
        y = (r.random(n) < 1 / (1 + np.exp(-X @ theta))).astype(float)
    else:
        y = X @ theta + r.standard_normal(n)
    return X, y


def _assert_same(a, b, rtol=RTOL, atol=ATOL):
    for field in ("final_state", "mean", "cov", "chain_means", "batch_covs", "trace", "observable_means",
                  "epoch_position_mean", "epoch_position_var"):
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None) == (y is None), field
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=field)
    np.testing.assert_array_equal(a.diverged_at, b.diverged_at)
    assert a.clip_fraction == b.clip_fraction


#: every sampler and every batching on the general path; each (batching, step rule) pair is one that
#: tests/test_sampler_kernels.py compiles too, so the compiled side adds no engine specialisation to a cold run
#: (the general path's batch schedule and move are separate components, checked here in every pairing they
#: have; issue 38: three pairs of this list were compiled for this file alone, ≈ 10 s of CPU each)
CASES = [
    # (model, sampler, batching, step, beta, momentum, decay, prior, batched)
    ("logistic", "sgld", "replacement", "dense", 40.0, 0.5, 0.0, "dense", False),
    ("linear", "sgld", "reshuffle", "diag", 40.0, 0.0, 0.3, 1.0, True),
    ("logistic", "sglrw", "reshuffle", "diag", 40.0, 0.0, 0.0, 0.0, False),
    ("linear", "clipped-sgld", "without-replacement", "scalar", 20.0, 0.2, 0.0, 0.0, True),
    ("linear", "sgld", "replacement", "scalar", math.inf, 0.0, 0.0, 0.0, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c[:3])) + ("-batched" if c[-1] else ""))
def test_general_path_reproduces_the_compiled_chain(case):
    name, sampler, batching, kind, beta, kappa, decay, prior, batched = case
    X, y = _problem(name, n=50 if batching != "reshuffle" else 47)  # 47: a ragged last batch per epoch
    step = {"dense": np.array([[0.2, 0.05, 0.0], [0.05, 0.15, 0.02], [0.0, 0.02, 0.1]]),
            "diag": np.array([0.2, 0.1, 0.15]), "scalar": 0.1}[kind]
    if prior == "dense":
        prior = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.0], [0.0, 0.0, 0.5]])
    kw = dict(batch_size=5, n_steps=60, n_chains=3, burn_in=10, prior_precision=prior, initial=np.zeros(3),
              inv_temperature=beta, momentum=kappa, sampler=sampler, batching=batching, decay=decay, thin=3,
              observables=np.array([[1.0, 0.0, 2.0]]), epoch_moments=batching == "reshuffle", seed=7,
              batches_per_chain=2)
    compiled = run_chains(name, (X, y), **chain_kw(step, **kw))
    general = run_chains(StrippedGLM(name, batched=batched), (X, y), **chain_kw(step, **kw))
    assert general.settings["backend"] == "numpy" and general.settings["oracle"] == "python"
    _assert_same(compiled, general)


def test_general_path_progress_and_chunks_give_the_same_chain():
    X, y = _problem("logistic")
    kw = dict(batch_size=4, n_steps=120, n_chains=2, inv_temperature=50.0, initial=np.zeros(3), seed=1)
    calls = []
    a = run_chains(StrippedGLM("logistic"), (X, y), **chain_kw(0.2, progress=lambda d, t: calls.append(d), **kw))
    b = run_chains(StrippedGLM("logistic"), (X, y), **chain_kw(0.2, **kw))
    assert calls[-1] == 120 and len(calls) > 1
    np.testing.assert_array_equal(a.final_state, b.final_state)
    np.testing.assert_array_equal(a.cov, b.cov)


@pytest.mark.parametrize("act, lik", [("tanh", "gaussian"), ("relu", "bernoulli"), ("softplus", "poisson")])
def test_mlp_compiled_chain_matches_numpy_model(act, lik):
    # the compiled "mlp" kernel and the model's own NumPy gradients (general path) on the same streams; batches
    # with replacement, the MLP specialisation the other MLP chain tests compile (the batch schedules are checked
    # on the general path by test_general_path_reproduces_the_compiled_chain; issue 38: one MLP chain fewer cold)
    r = np.random.default_rng(2)
    X = r.standard_normal((60, 4))
    y = {"gaussian": r.standard_normal(60), "bernoulli": (r.random(60) < 0.5).astype(float),
         "poisson": r.poisson(1.0, 60).astype(float)}[lik]
    model = MLP((5, 3), act, lik, noise_variance=0.8)
    d = model.n_params(4)
    assert d == 5 * 5 + 3 * 6 + 4
    kw = dict(batch_size=7, n_steps=50, n_chains=2, burn_in=5, inv_temperature=500.0, prior_precision=1.0,
              initial=model.initial_params(4, np.random.default_rng(3)), momentum=0.3, batching="replacement",
              seed=4, thin=5)
    a = run_chains(model, (X, y), **chain_kw(0.05, **kw))
    b = run_chains(model, (X, y), **chain_kw(0.05, backend="numpy", **kw))
    assert a.mean.shape == (d,) and a.settings["oracle"] == "mlp" and a.settings["n_params"] == d
    # tanh: the kernel's call-free tanh differs from np.tanh by a few ulps, propagated along 50 steps
    _assert_same(a, b, rtol=1e-10, atol=1e-12)


def test_mlp_numpy_gradients_match_central_differences():
    r = np.random.default_rng(5)
    model = MLP((4, 2), "softplus", "bernoulli")
    X = r.standard_normal((6, 3))
    y = (r.random(6) < 0.5).astype(float)
    theta = model.initial_params(3, np.random.default_rng(1))
    ps = model.per_sample_grads(theta, X, y)
    batched = model.batched_grads(np.stack([theta, theta + 0.1]), np.stack([X, X]), np.stack([y, y]))

    def loss(th, n):
        a = X[n]
        k = 0
        for li, (fi, fo) in enumerate(((3, 4), (4, 2), (2, 1))):
            W = th[k:k + fo * fi].reshape(fo, fi)
            b = th[k + fo * fi:k + fo * fi + fo]
            k += fo * (fi + 1)
            a = W @ a + b
            if li < 2:
                a = np.logaddexp(0.0, a)
        return np.logaddexp(0.0, a[0]) - y[n] * a[0]

    h = 1e-6
    eye = np.eye(theta.size)
    fd = np.array([[(loss(theta + h * e, n) - loss(theta - h * e, n)) / (2 * h) for e in eye] for n in range(6)])
    np.testing.assert_allclose(ps, fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(batched[0], fd.mean(axis=0), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("hidden, act, lik", [((5, 3), "tanh", "gaussian"), ((4,), "relu", "bernoulli"),
                                              ((2, 4, 3), "softplus", "poisson"), ((), "tanh", "gaussian")])
def test_mlp_batched_grads_are_the_per_chain_means_of_per_sample_grads(hidden, act, lik):
    # batched_grads (all chains in one pass, the general path's route) = per_sample_grads(...).mean(0) per chain
    r = np.random.default_rng(8)
    model = MLP(hidden, act, lik, noise_variance=0.8)
    d = model.n_params(4)
    for C, B in ((3, 7), (1, 1), (5, 32)):
        X = r.standard_normal((C, B, 4))
        y = r.poisson(1.0, (C, B)).astype(float) if lik != "bernoulli" else (r.random((C, B)) < 0.5).astype(float)
        thetas = np.stack([model.initial_params(4, np.random.default_rng(k)) + 0.3 * r.standard_normal(d)
                           for k in range(C)])
        g = model.batched_grads(thetas, X, y)
        assert g.shape == (C, d)
        for c in range(C):
            np.testing.assert_allclose(g[c], model.per_sample_grads(thetas[c], X[c], y[c]).mean(axis=0),
                                       rtol=1e-13, atol=1e-13)
    with pytest.raises(ShapeError, match=r"batched_grads needs thetas \(C, D\)"):
        model.batched_grads(thetas[:, :-1], X, y)


def test_mlp_default_start_is_the_fitted_map():
    # initial=None: run_chains starts from fit_map(model, data, Γ, seed=seed).theta_hat, for a network too
    r = np.random.default_rng(9)
    X = r.standard_normal((40, 2))
    y = np.tanh(X[:, 0]) - 0.5 * X[:, 1] + 0.1 * r.standard_normal(40)
    model = MLP((2,), "tanh", "gaussian", noise_variance=0.5)
    kw = dict(batch_size=5, n_steps=20, n_chains=2, inv_temperature=1e3, prior_precision=1.0, seed=3)
    theta_hat = fit_map(model, make_dataset(X, y), 1.0, seed=3).theta_hat
    a = run_chains(model, (X, y), **chain_kw(0.01, **kw))
    b = run_chains(model, (X, y), **chain_kw(0.01, initial=theta_hat, **kw))
    _assert_same(a, b, rtol=0.0, atol=0.0)


class _Bad:
    name = "MyNet"

    def __init__(self, out):
        self.out = out

    def n_params(self, p):
        return 5

    def per_sample_grads(self, theta, X, y):
        return self.out(X.shape[0])


@pytest.mark.parametrize("out, error, match", [
    (lambda n: np.zeros((n, 4)), ShapeError, r"model MyNet.per_sample_grads returned shape \(4, 4\), expected \(4, 5\)"),
    (lambda n: np.full((n, 5), np.nan), SgtuneError, "MyNet.per_sample_grads returned non-finite"),
])
def test_user_model_output_is_validated_on_the_first_call(out, error, match):
    X, y = _problem("linear")
    with pytest.raises(error, match=match) as info:
        run_chains(_Bad(out), (X, y), Dynamics(0.1, 4), RunSpec(10, n_chains=2), initial=np.zeros(5))
    assert "\n" not in str(info.value)


def test_user_model_errors():
    X, y = _problem("linear")
    kw = dict(batch_size=4, n_steps=10, n_chains=1)
    with pytest.raises(SgtuneError, match="neither numba_spec\\(\\) nor per_sample_grads"):
        run_chains(object(), (X, y), **chain_kw(0.1, initial=np.zeros(3), **kw))
    with pytest.raises(SgtuneError, match="initial is required for model MyNet"):
        run_chains(_Bad(lambda n: np.zeros((n, 5))), (X, y), **chain_kw(0.1, **kw))

    class FixedInputs(MLP):  # a spec whose input width ignores the data's p
        def numba_spec(self, n_features=None):
            return super().numba_spec(4)

    with pytest.raises(SgtuneError, match=r"n_in = 4 inputs but the data have p = 3"):
        run_chains(FixedInputs((16,)), (X, y), **chain_kw(0.1, initial=np.zeros(MLP((16,)).n_params(3)), **kw))
    with pytest.raises(SgtuneError, match="pure-Python reference supports GLMs, quadratic oracles, the reshuffle "
                                          "model problem and the SMILE targets, not 'mlp'"):
        run_chains(MLP((16,)), (X, y), **chain_kw(0.1, initial=np.zeros(MLP((16,)).n_params(3)), backend="python", **kw))


def test_spec_kind_python_and_dimension_mismatch():
    X, y = _problem("linear")
    kw = dict(batch_size=4, n_steps=30, n_chains=2, initial=np.zeros(3), inv_temperature=30.0, seed=2)

    class Explicit(StrippedGLM):
        def numba_spec(self, n_features):
            return "python", [], []

    a = run_chains(Explicit("linear"), (X, y), **chain_kw(0.1, **kw))
    b = run_chains("linear", (X, y), **chain_kw(0.1, **kw))
    assert a.settings["oracle"] == "python"
    _assert_same(a, b)

    class Liar(MLP):
        def n_params(self, p):
            return 7

    with pytest.raises(SgtuneError, match=r"n_params\(3\) = 7 disagrees with its numba spec \('mlp': D = 21\)"):
        run_chains(Liar((4,)), (X, y), **chain_kw(0.1, **{**kw, "initial": np.zeros(7)}))
