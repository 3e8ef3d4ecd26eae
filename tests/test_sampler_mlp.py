"""The "mlp" gradient component: against finite differences of an independent NumPy loss, against jax.grad,
and its call-free tanh against math.tanh; spec validation."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.reference import chain_kw
from sgtune.core.errors import SgtuneError
from sgtune.sampler import mlp
from sgtune.sampler.grads import model_params
from sgtune.sampler.specs import numba_spec_of


def _unpack(theta, widths):
    """(W_l, b_l) per layer from the docs/cli.rst layout: W_l (fan_out × fan_in, row-major), then b_l."""
    out, k = [], 0
    for fi, fo in zip(widths[:-1], widths[1:]):
        W = theta[k:k + fo * fi].reshape(fo, fi)
        k += fo * fi
        out.append((W, theta[k:k + fo]))
        k += fo
    assert k == theta.size
    return out


def _act(z, name):
    if name == "tanh":
        return np.tanh(z)
    if name == "relu":
        return np.maximum(z, 0.0)
    return np.logaddexp(0.0, z)


def _mean_loss(theta, X, y, widths, act, lik, s2):
    """Mean per-observation loss (1/n) Σ ρ(f(x_n; θ), y_n), written independently of the kernel."""
    a = X
    layers = _unpack(theta, widths)
    for W, b in layers[:-1]:
        a = _act(a @ W.T + b, act)
    W, b = layers[-1]
    f = (a @ W.T + b)[:, 0]
    if lik == "gaussian":
        rho = (y - f) ** 2 / (2 * s2)
    elif lik == "bernoulli":
        rho = np.logaddexp(0.0, f) - y * f
    else:
        rho = np.exp(f) - y * f
    return rho.mean()


def _kernel_grad(theta, X, y, idx, widths, act, lik, s2, batch_capacity=None):
    ints = mlp.mlp_spec_ints(widths, act, lik)
    b = len(idx) if batch_capacity is None else batch_capacity
    work = np.full(mlp.work_size(ints, theta.size, b), np.nan)  # NaN: any read of an unwritten slot shows
    grad = np.full(theta.size, np.nan)
    idx_buf = np.zeros(b, dtype=np.int64)
    idx_buf[:len(idx)] = idx
    mlp.mlp_grad(theta, X, y, idx_buf, len(idx), ints, model_params(s2), np.zeros((1, 1)),
                 np.ones(4, dtype=np.uint64), work, grad)
    return grad


def _data(widths, lik, n=40, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, widths[0]))
    if lik == "gaussian":
        y = r.standard_normal(n)
    elif lik == "bernoulli":
        y = (r.random(n) < 0.5).astype(float)
    else:
        y = r.poisson(1.5, n).astype(float)
    theta = mlp.init_params(mlp.mlp_spec_ints(widths), seed=seed + 1) + 0.1 * r.standard_normal(
        mlp.n_params(mlp.mlp_spec_ints(widths)))
    return X, y, theta


CASES = [((3, 5, 1), "tanh", "gaussian"), ((4, 6, 3, 1), "relu", "bernoulli"), ((2, 4, 4, 3, 1), "softplus", "poisson"),
         ((5, 1), "tanh", "bernoulli"), ((3, 7, 1), "softplus", "gaussian")]


@pytest.mark.parametrize("widths, act, lik", CASES, ids=lambda c: str(c))
def test_mlp_gradient_matches_central_differences(widths, act, lik):
    X, y, theta = _data(widths, lik)
    idx = np.array([3, 17, 17, 0, 39, 22, 8])  # repeated index, 7 rows (capacity 9: ragged batch)
    s2 = 0.7
    g = _kernel_grad(theta, X, y, idx, widths, act, lik, s2, batch_capacity=9)
    h = 1e-5
    fd = np.empty_like(theta)
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        fd[j] = (_mean_loss(theta + e, X[idx], y[idx], widths, act, lik, s2)
                 - _mean_loss(theta - e, X[idx], y[idx], widths, act, lik, s2)) / (2 * h)
    # central differences: truncation O(h²·f''') ≈ 1e-10 and rounding ε·|f|/h ≈ 1e-11 per entry
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8 * np.abs(fd).max())


# every activation and likelihood; and layers wide enough for every block path of the kernel's passes
# (blocks of 8, 4 and single rows: fan-ins 10 = 8 + 1 + 1, 12 = 8 + 4, 9 = 8 + 1, 17 = 2·8 + 1; for Wᵀδ
# fan-outs 17, 9, 5 (⊙ φ' in its own pass), 8 and 16 (fused into the last block of 8) and 1) with a batch
# of 14 = 8 + 4 + 1 + 1 rows
WIDE = [((10, 12, 9, 17, 1), "tanh", "gaussian"), ((12, 8, 5, 1), "softplus", "bernoulli"),
        ((9, 16, 16, 1), "relu", "poisson")]


@pytest.mark.parametrize("widths, act, lik", CASES[:3] + WIDE, ids=lambda c: str(c))
def test_mlp_gradient_matches_jax(widths, act, lik):
    import jax  # in the [dev] extra: a missing jax fails here instead of skipping

    jnp = jax.numpy
    X, y, theta = _data(widths, lik, seed=3)
    idx = np.arange(0, 40, 3)
    s2 = 1.3
    acts = {"tanh": jnp.tanh, "relu": lambda z: jnp.maximum(z, 0.0), "softplus": lambda z: jnp.logaddexp(0.0, z)}

    def loss(th):
        a = jnp.asarray(X[idx])
        k = 0
        for li, (fi, fo) in enumerate(zip(widths[:-1], widths[1:])):
            W = th[k:k + fo * fi].reshape(fo, fi)
            k += fo * fi
            b = th[k:k + fo]
            k += fo
            a = a @ W.T + b
            if li < len(widths) - 2:
                a = acts[act](a)
        f = a[:, 0]
        yy = jnp.asarray(y[idx])
        rho = {"gaussian": (yy - f) ** 2 / (2 * s2), "bernoulli": jnp.logaddexp(0.0, f) - yy * f,
               "poisson": jnp.exp(f) - yy * f}[lik]
        return rho.mean()

    with jax.enable_x64(True):  # float64 inside this block only (no global switch for other tests)
        ref = np.asarray(jax.grad(loss)(jnp.asarray(theta)))
    g = _kernel_grad(theta, X, y, idx, widths, act, lik, s2)
    np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-13 * np.abs(ref).max())


def test_relu_derivative_at_zero_is_zero():
    # a zero pre-activation: W = 0, b = 0 in the hidden layer, so the first layer gets no gradient at all
    widths = (2, 3, 1)
    ints = mlp.mlp_spec_ints(widths, "relu", "gaussian")
    theta = np.zeros(mlp.n_params(ints))
    theta[-4:-1] = [1.0, -2.0, 0.5]  # output weights
    X = np.array([[1.0, 2.0], [-1.0, 0.5]])
    g = _kernel_grad(theta, X, np.array([1.0, -1.0]), np.array([0, 1]), widths, "relu", "gaussian", 1.0)
    np.testing.assert_array_equal(g[:9], 0.0)  # W_1 (6) and b_1 (3)


def test_tanh_tab_matches_math_tanh():
    # a dense grid, every table point and the points halfway between two (largest |s|), tiny and huge |x|
    j = np.arange(mlp.TANH_TABLE.size) / 16.0
    x = np.concatenate([np.linspace(-25, 25, 20001), np.geomspace(1e-300, 1.0, 3001), [0.0, -0.0, 19.5, 19.6],
                        -np.geomspace(1e-12, 30.0, 2001), j, -j, j + 1 / 32, np.nextafter(j + 1 / 32, 0.0),
                        [np.inf, -np.inf, 1e308]])
    ref = np.tanh(x)
    got = np.array([mlp.tanh_tab(v) for v in x])
    ulp = np.abs(got - ref) / np.spacing(np.maximum(np.abs(ref), np.finfo(float).tiny))
    assert ulp.max() <= 4, (x[np.argmax(ulp)], ulp.max())
    assert np.array_equal(np.signbit(got), np.signbit(ref))  # tanh(−0) = −0
    assert math.isnan(mlp.tanh_tab(math.nan))


def test_tanh_table_is_correctly_rounded():
    # the table against mpmath at 200 bits (an independent arbitrary-precision tanh)
    import mpmath

    with mpmath.workprec(200):
        ref = np.array([float(mpmath.tanh(mpmath.mpf(k) / 16)) for k in range(mlp.TANH_TABLE.size)])
    np.testing.assert_array_equal(mlp.TANH_TABLE, ref)
    assert mlp.TANH_TABLE.size == 313 and mlp.TANH_TABLE[-1] == 1.0  # up to the clamp 19.5 = 312/16


def test_mlp_layout_and_sizes():
    ints = mlp.mlp_spec_ints((10, 16, 16, 16, 1), "tanh", "gaussian")
    assert ints.tolist() == [10, 16, 16, 16, 1, 0, 0]
    assert mlp.layer_shapes(ints) == [(16, 10), (16, 16), (16, 16), (1, 16)]
    assert mlp.n_params(ints) == 16 * 11 + 16 * 17 * 2 + 17  # = 737


class _Spec:
    name = "toy"

    def __init__(self, kind, ints, floats):
        self.spec = (kind, ints, floats)

    def numba_spec(self, n_features=None):
        return self.spec


@pytest.mark.parametrize("spec, match", [
    (("mlp", [3, 4, 2, 0, 0], [1.0]), "output width 1"),
    (("mlp", [3, 4, 1, 7, 0], [1.0]), "activation code"),
    (("mlp", [3, 4, 1, 0, 5], [1.0]), "likelihood id"),
    (("mlp", [3, 1, 0], [1.0]), "needs ints"),
    (("mlp", [3, 4, 1, 0, 0], [0.0]), "σ² > 0"),
    (("mlp", [3.0, 4.0, 1.0, 0.0, 0.0], [1.0]), "must be integers"),
    (("glm", [9], [1.0, 1.5, 1.0]), "model id in 0..3"),
    (("cnn", [1], [1.0]), "kind must be one of"),
    ("mlp", "must return \\(kind, ints, floats\\)"),  # a 2-tuple is not a spec
])
def test_bad_specs_raise_one_line_errors(spec, match):
    model = _Spec(*spec) if isinstance(spec, tuple) else _Spec("", [], [])
    if not isinstance(spec, tuple):
        model.spec = ("mlp", [1])
    with pytest.raises(SgtuneError, match=match) as info:
        numba_spec_of(model, 3)
    assert "\n" not in str(info.value)


def test_kernel_codes_agree_with_the_model():
    # the kernel's activation / likelihood codes are the ones sgtune.models.mlp.MLP.numba_spec(p) emits
    from sgtune.models import GLM_IDS, get_model
    from sgtune.models.mlp import ACTIVATION_CODES, LIKELIHOODS, MLP

    assert mlp.ACTIVATIONS == ACTIVATION_CODES
    assert mlp.LIKELIHOODS == {k: GLM_IDS[v] for k, v in LIKELIHOODS.items()}
    for act in ACTIVATION_CODES:
        for lik in LIKELIHOODS:
            model = MLP((4, 2), act, lik, noise_variance=0.7)
            kind, ints, floats = numba_spec_of(model, 3)
            assert kind == "mlp"
            np.testing.assert_array_equal(ints, mlp.mlp_spec_ints((3, 4, 2, 1), act, lik))
            np.testing.assert_array_equal(floats, model_params(0.7))
            assert mlp.n_params(ints) == model.n_params(3)
    # a GLM's spec ignores p
    for name in ("linear", "logistic", "poisson"):
        kind, ints, floats = numba_spec_of(get_model(name, noise_variance=0.4), 5)
        assert kind == "glm" and ints.tolist() == [GLM_IDS[name]]
        np.testing.assert_array_equal(floats, model_params(0.4))


def test_mlp_chains_bitwise_deterministic_regardless_of_threads_and_chunks():
    # the kernel fuses multiply-adds (FMA contraction, no reassociation): still one fixed order of
    # operations per entry, so the same seed gives identical bits with 1 or 2 threads and in chunks
    from sgtune.models.mlp import MLP
    from sgtune.sampler import run_chains
    from sgtune.sampler._jit import get_num_threads, set_num_threads
    from tests._threads import many_threads

    r = np.random.default_rng(5)
    X = r.standard_normal((300, 10))
    y = np.tanh(X[:, 0]) + 0.1 * r.standard_normal(300)
    model = MLP((12, 9), "tanh", "gaussian", noise_variance=0.5)
    kw = dict(batch_size=14, n_steps=300, n_chains=3, inv_temperature=300.0, seed=4, thin=9,
              initial=model.initial_params(10, np.random.default_rng(0)))
    before = get_num_threads()
    try:
        set_num_threads(1)
        one = run_chains(model, (X, y), **chain_kw(1e-2, **kw))
        set_num_threads(many_threads(before))
        many = run_chains(model, (X, y), **chain_kw(1e-2, **kw))
    finally:
        set_num_threads(before)
    chunked = run_chains(model, (X, y), **chain_kw(1e-2, progress=lambda done, total: None, **kw))
    assert np.all(np.isfinite(one.final_state)) and not np.array_equal(one.final_state[0], one.final_state[1])
    for other in (many, chunked):
        np.testing.assert_array_equal(one.final_state, other.final_state)
        np.testing.assert_array_equal(one.trace, other.trace)
