"""The feed-forward network model: derivatives vs finite differences and JAX, Gauss–Newton vs its
definition, K = 0 vs the GLM, MAP fitting/expansion (synthetic and diabetes), layout and input errors."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from sgtune.io.data import make_dataset
from sgtune.core.errors import SgtuneError, ShapeError
from sgtune.models import GLM, DenseCurvature, RankOneCurvature, expand, fit_map, get_model
from sgtune.models.mlp import MLP, make_mlp

# central differences with step 1e-5 on O(1) functions: truncation ~1e-10, rounding ~1e-11
FD_RTOL = 1e-6
FD_STEP = 1e-5
#: NumPy vs JAX float64: the same sums in a different order, ~1e2·eps on O(1) values
JAX_RTOL = 1e-10
#: K = 0 vs the GLM on [X, 1]: identical arithmetic up to summation order
GLM_RTOL = 1e-12

ACTS = ("tanh", "relu", "softplus")
LIKS = ("gaussian", "bernoulli", "poisson")
HIDDEN = {0: (), 1: (3,), 2: (3, 2)}
#: smallest |pre-activation| kept for relu, far above the O(FD_STEP) change of z under the differences
RELU_MARGIN = 2e-2


# --- an independent reference of the layout (docs/cli.rst) ---------------------------------
def ref_layers(theta: np.ndarray, p: int, hidden: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
    """θ = [vec_row(W_1), b_1, vec_row(W_2), b_2, …] with W_l of shape (fan_out, fan_in)."""
    sizes = [p, *hidden, 1]
    out, k = [], 0
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        W = theta[k:k + fan_out * fan_in].reshape(fan_out, fan_in)
        k += fan_out * fan_in
        out.append((W, theta[k:k + fan_out]))
        k += fan_out
    assert k == theta.size
    return out


def ref_preactivations(theta, X, hidden, act):
    """Hidden pre-activations z_l (n, h_l), one loop per layer, activations written out."""
    phi = {"tanh": np.tanh, "relu": lambda z: np.maximum(z, 0.0), "softplus": lambda z: np.log1p(np.exp(z))}[act]
    a, zs = X, []
    for W, b in ref_layers(theta, X.shape[1], hidden)[:-1]:
        z = a @ W.T + b
        zs.append(z)
        a = phi(z)
    return zs


def make_case(rng, lik, hidden, act, n=30, p=3):
    """n rows and parameters at a smooth point (relu: rows with a pre-activation near 0 are redrawn)."""
    model = MLP(hidden, act, lik, noise_variance=1.3)
    d = model.n_params(p)
    theta = 0.6 * rng.standard_normal(d)
    X = rng.standard_normal((4 * n, p))
    if act == "relu" and hidden:
        zs = ref_preactivations(theta, X, hidden, act)
        X = X[np.min(np.abs(np.hstack(zs)), axis=1) > RELU_MARGIN]
    X = X[:n]
    assert X.shape == (n, p)
    if lik == "gaussian":
        y = rng.standard_normal(n)
    elif lik == "bernoulli":
        y = (rng.random(n) < 0.5).astype(float)
    else:
        y = rng.poisson(1.5, n).astype(float)
    return model, theta, X, y


def assert_close(actual, desired, rtol):
    """Entrywise |a − d| ≤ rtol·max|d| (a relative error on the array's scale)."""
    scale = max(float(np.abs(desired).max()), 1e-300)
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=rtol * scale)


def fd_columns(fun, theta, h=FD_STEP):
    """Central differences of fun(θ) along each coordinate, stacked on a new last axis."""
    cols = []
    for k in range(theta.size):
        e = np.zeros_like(theta)
        e[k] = h
        cols.append((fun(theta + e) - fun(theta - e)) / (2 * h))
    return np.stack(cols, axis=-1)


# --- derivatives ---------------------------------------------------------------------------------
@pytest.mark.parametrize("k", sorted(HIDDEN))
@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("act", ACTS)
def test_grads_hessians_hvps_by_finite_differences(rng, act, lik, k):
    model, theta, X, y = make_case(rng, lik, HIDDEN[k], act)
    g = model.per_sample_grads(theta, X, y)
    fd_g = fd_columns(lambda t: model.per_sample_losses(t, X, y), theta)
    assert_close(g, fd_g, FD_RTOL)
    cur = model.curvature(theta, X, y)
    assert isinstance(cur, DenseCurvature) and not model.rank_one
    np.testing.assert_array_equal(cur.hessians, np.swapaxes(cur.hessians, 1, 2))
    fd_h = fd_columns(lambda t: model.per_sample_grads(t, X, y), theta)
    assert_close(cur.hessians, fd_h, FD_RTOL)
    v = rng.standard_normal(theta.size)
    fd_hv = (model.per_sample_grads(theta + FD_STEP * v, X, y)
             - model.per_sample_grads(theta - FD_STEP * v, X, y)) / (2 * FD_STEP)
    assert_close(model.hessian_vector_products(theta, X, y, v), fd_hv, FD_RTOL)


def test_relu_derivative_at_the_kink_is_zero():
    """relu'(0) = 0: with zero first-layer weights and biases every hidden unit sits at z = 0, so
    the loss does not depend (to first order, by convention) on the first layer."""
    model = make_mlp("2", "relu")
    X = np.array([[1.0, -2.0], [0.5, 3.0]])
    theta = np.zeros(model.n_params(2))
    theta[6:9] = [0.7, -1.1, 0.3]  # W_2, b_2
    g = model.per_sample_grads(theta, X, np.array([1.0, -1.0]))
    np.testing.assert_array_equal(g[:, :6], 0.0)
    # b_2 still receives ρ'(f) = (f − y)/σ² with f = b_2 = 0.3
    np.testing.assert_allclose(g[:, 8], [0.3 - 1.0, 0.3 + 1.0], rtol=1e-15)


@pytest.fixture(scope="module")
def jax_reference():
    """vmap(loss), vmap(grad), vmap(hessian) and vmap(HVP) of a JAX network written from the layout spec
    (independent of sgtune's NumPy network), jitted once for every activation × likelihood."""
    import jax  # the [dev] extra installs it (no skip: the check must run)

    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    hidden = (3, 2)
    sizes = [3, *hidden, 1]
    phis = [jnp.tanh, jax.nn.relu, jax.nn.softplus]

    def loss(theta, x, y, act, lik, s2):
        a, k = x, 0
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            W = theta[k:k + fan_out * fan_in].reshape(fan_out, fan_in)
            k += fan_out * fan_in
            z = W @ a + theta[k:k + fan_out]
            k += fan_out
            a = jax.lax.switch(act, phis, z) if i < len(sizes) - 2 else z
        f = a[0]
        return jax.lax.switch(lik, [lambda f: 0.5 * (y - f) ** 2 / s2,
                                    lambda f: jnp.logaddexp(0.0, f) - y * f,
                                    lambda f: jnp.exp(f) - y * f], f)

    def hvp(theta, x, y, act, lik, s2, v):
        return jax.jvp(lambda t: jax.grad(loss)(t, x, y, act, lik, s2), (theta,), (v,))[1]

    axes = (None, 0, 0, None, None, None)
    fns = {"loss": jax.jit(jax.vmap(loss, in_axes=axes)),
           "grad": jax.jit(jax.vmap(jax.grad(loss), in_axes=axes)),
           "hessian": jax.jit(jax.vmap(jax.hessian(loss), in_axes=axes)),
           "hvp": jax.jit(jax.vmap(hvp, in_axes=(*axes, None)))}
    yield hidden, fns
    jax.config.update("jax_enable_x64", previous)


@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("act", ACTS)
def test_against_jax(rng, jax_reference, act, lik):
    hidden, jx = jax_reference
    model, theta, X, y = make_case(rng, lik, hidden, act, n=25)
    args = (theta, X, y, ACTS.index(act), LIKS.index(lik), model.noise_variance)
    v = rng.standard_normal(theta.size)
    assert_close(model.per_sample_losses(theta, X, y), np.asarray(jx["loss"](*args)), JAX_RTOL)
    assert_close(model.per_sample_grads(theta, X, y), np.asarray(jx["grad"](*args)), JAX_RTOL)
    assert_close(model.curvature(theta, X, y).hessians, np.asarray(jx["hessian"](*args)), JAX_RTOL)
    assert_close(model.hessian_vector_products(theta, X, y, v), np.asarray(jx["hvp"](*args, v)), JAX_RTOL)


# --- Gauss–Newton ----------------------------------------------------------------------------------
def rho2(lik, f, s2):
    """∂²ρ/∂f² written out: 1/σ², σ(f)(1 − σ(f)), e^f."""
    if lik == "gaussian":
        return np.full_like(f, 1.0 / s2)
    if lik == "bernoulli":
        s = 1.0 / (1.0 + np.exp(-f))
        return s * (1.0 - s)
    return np.exp(f)


@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("act", ACTS)
def test_gauss_newton_against_its_definition(rng, act, lik):
    model, theta, X, y = make_case(rng, lik, (3, 2), act)
    gn = MLP(model.hidden_sizes, act, lik, model.noise_variance, hessian="gauss-newton")
    assert gn.rank_one
    fd_grad_f = fd_columns(lambda t: gn.output(t, X), theta)
    assert_close(gn.output_grads(theta, X), fd_grad_f, FD_RTOL)
    f = gn.output(theta, X)
    W2, b2 = ref_layers(theta, X.shape[1], (3, 2))[-1]
    zs = ref_preactivations(theta, X, (3, 2), act)
    a_last = {"tanh": np.tanh, "relu": lambda z: np.maximum(z, 0), "softplus": lambda z: np.log1p(np.exp(z))}[act](
        zs[-1])
    np.testing.assert_allclose(f, a_last @ W2[0] + b2[0], rtol=1e-13)
    want = rho2(lik, f, model.noise_variance)[:, None, None] * fd_grad_f[:, :, None] * fd_grad_f[:, None, :]
    cur = gn.curvature(theta, X, y)
    assert isinstance(cur, RankOneCurvature)
    dense = cur.weights[:, None, None] * cur.features[:, :, None] * cur.features[:, None, :]
    assert_close(dense, want, FD_RTOL)
    assert_close(gn.per_sample_hessians(theta, X, y), want, FD_RTOL)
    # the Hessian–vector products stay exact (a matrix-free route to the true curvature)
    v = rng.standard_normal(theta.size)
    np.testing.assert_array_equal(gn.hessian_vector_products(theta, X, y, v),
                                  model.hessian_vector_products(theta, X, y, v))


# --- K = 0 is the GLM on [X, 1] --------------------------------------------------------------------
GLM_OF = {"gaussian": "linear", "bernoulli": "logistic", "poisson": "poisson"}


@pytest.mark.parametrize("hessian", ["exact", "gauss-newton"])
@pytest.mark.parametrize("lik", LIKS)
def test_no_hidden_layer_equals_the_glm(rng, lik, hessian):
    model, theta, X, y = make_case(rng, lik, (), "tanh")
    model = MLP((), likelihood=lik, noise_variance=1.3, hessian=hessian)
    glm = get_model(GLM_OF[lik], noise_variance=1.3)
    X1 = np.hstack([X, np.ones((X.shape[0], 1))])  # θ = (W then b) = (w, intercept)
    assert model.n_params(X.shape[1]) == X1.shape[1]
    assert_close(model.per_sample_losses(theta, X, y), glm.per_sample_losses(theta, X1, y), GLM_RTOL)
    assert_close(model.per_sample_grads(theta, X, y), glm.per_sample_grads(theta, X1, y), GLM_RTOL)
    cur = model.curvature(theta, X, y)
    if hessian == "exact":
        assert_close(cur.hessians, glm.per_sample_hessians(theta, X1, y), GLM_RTOL)
    else:
        assert_close(cur.features, X1, GLM_RTOL)
        assert_close(cur.weights, glm.curvature_weights(theta, X1, y), GLM_RTOL)


# --- layout, initialisation, numba spec ------------------------------------------------------------
def test_layout_slices_and_unflatten():
    model = make_mlp("2,3")
    p = 4
    d = model.n_params(p)
    assert d == 2 * 4 + 2 + 3 * 2 + 3 + 1 * 3 + 1
    assert model.layer_slices(p) == [(0, 10), (10, 19), (19, 23)]
    theta = np.arange(d, dtype=float)
    layers = model.unflatten(theta, p)
    for (W, b), (Wr, br) in zip(layers, ref_layers(theta, p, (2, 3))):
        np.testing.assert_array_equal(W, Wr)
        np.testing.assert_array_equal(b, br)
    np.testing.assert_array_equal(layers[0][0], [[0, 1, 2, 3], [4, 5, 6, 7]])
    np.testing.assert_array_equal(layers[0][1], [8, 9])
    np.testing.assert_array_equal(layers[2][1], [22])
    with pytest.raises(ShapeError, match="theta must have shape"):
        model.unflatten(np.zeros(d + 1), p)


def test_initial_params_glorot_uniform_seeded():
    model = make_mlp("40,30")
    t1 = model.initial_params(50, np.random.default_rng(3))
    t2 = model.initial_params(50, np.random.default_rng(3))
    np.testing.assert_array_equal(t1, t2)
    for (W, b), (fan_in, fan_out) in zip(model.unflatten(t1, 50), [(50, 40), (40, 30), (30, 1)]):
        np.testing.assert_array_equal(b, 0.0)
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        assert np.abs(W).max() <= bound
        if W.size >= 1000:  # U(−a, a): variance a²/3; its sample variance over n draws has relative sd √(0.8/n)
            var = W.var()
            assert abs(var / (bound**2 / 3) - 1) < 6 * math.sqrt(0.8 / W.size)


def test_numba_spec():
    kind, ints, floats = make_mlp("2,3", "softplus", "poisson").numba_spec(10)
    assert kind == "mlp" and ints.dtype == np.int64 and floats.dtype == np.float64
    np.testing.assert_array_equal(ints, [10, 2, 3, 1, 2, 2])
    np.testing.assert_array_equal(floats, GLM("poisson").numba_spec()[2])
    _, ints, floats = make_mlp("", "relu", "bernoulli").numba_spec()
    np.testing.assert_array_equal(ints, [-1, 1, 1, 1])
    _, ints, floats = make_mlp("5", "tanh", "gaussian", noise_variance=2.5).numba_spec(3)
    np.testing.assert_array_equal(ints, [3, 5, 1, 0, 0])
    assert floats[0] == 2.5
    np.testing.assert_array_equal(floats, [2.5, 1.5, (2 * math.pi * 2.5) ** -0.25, 2.0, 0.0])


# --- fitting and the expansion ---------------------------------------------------------------------
# scipy's L-BFGS-B calls OpenBLAS, whose threads on a loaded 2-core machine make each iteration of a
# D ≈ 10 fit ~100× slower (measured: 0.93 s vs 0.01 s for 44 evaluations); the fits run single-threaded.
def single_threaded():
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def synthetic_regression(seed=7, n=150):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, 2))
    y = np.tanh(1.5 * X[:, 0] - X[:, 1]) + 0.5 * X[:, 1] + 0.3 * r.standard_normal(n)
    return make_dataset(X, y)


def test_fit_map_converges_deterministically_and_expands():
    data = synthetic_regression()
    model = make_mlp("2", "tanh", noise_variance=0.09)
    with single_threaded():
        fit1 = fit_map(model, data, seed=1)
        fit2 = fit_map(model, data, seed=1)
    np.testing.assert_array_equal(fit1.theta_hat, fit2.theta_hat)
    # the gradient of the mean loss, recomputed here from the per-sample gradients
    grad = model.per_sample_grads(fit1.theta_hat, data.X, data.y).mean(axis=0)
    assert np.linalg.norm(grad) <= 1e-8
    assert fit1.grad_norm <= 1e-8
    e_exact = expand(model, data, theta_hat=fit1.theta_hat)
    assert not e_exact.rank_one and e_exact.hessian_min_eigenvalue > 0
    gn = make_mlp("2", "tanh", noise_variance=0.09, hessian="gauss-newton")
    e_gn = expand(gn, data, theta_hat=fit1.theta_hat)
    assert e_gn.rank_one and e_gn.hessian_min_eigenvalue > 0
    # at a minimum, exact − Gauss–Newton = mean_n ρ'(f_n)∇²f_n: small for a well-fitting network, not zero
    diff = np.linalg.norm(e_exact.hessian - e_gn.hessian) / np.linalg.norm(e_exact.hessian)
    assert 1e-6 < diff < 0.5
    np.testing.assert_array_equal(e_exact.grads, e_gn.grads)


def diabetes():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    y = (y - y.mean()) / y.std()
    return make_dataset(X, y, source="diabetes")


def test_diabetes_network_fit_and_expand_under_a_second():
    """Wang, Ding & Huggins (2026) §6.3: the (2, 3) tanh network on the diabetes data (y standardised; prior precision 1:
    without it the fitted network has Hessian eigenvalues ~1e-8 and L-BFGS does not converge)."""
    data = diabetes()
    model = make_mlp("2,3", "tanh", noise_variance=0.5)
    gn = make_mlp("2,3", "tanh", noise_variance=0.5, hessian="gauss-newton")
    best = math.inf
    with single_threaded():
        for _ in range(2):  # best of two, CPU time of this process: the shared VM's load leaves it alone
            t0 = time.process_time()
            e = expand(model, data, 1.0, seed=0)
            best = min(best, time.process_time() - t0)
    assert e.dim == 2 * 10 + 2 + 3 * 2 + 3 + 3 + 1
    assert e.gradient_norm <= 1e-8 and e.hessian_min_eigenvalue > 0
    assert best < 1.0, f"fit + expand took {best:.2f} s of CPU"
    e_gn = expand(gn, data, 1.0, theta_hat=e.theta_hat)
    assert e_gn.hessian_min_eigenvalue > 0


# --- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(hidden_sizes="2,,3"), r"`hidden_sizes`.*'2,,3'.*empty entry"),
    (dict(hidden_sizes="0"), r"`hidden_sizes`.*'0'.*width 0 < 1"),
    (dict(hidden_sizes="2,-1"), r"`hidden_sizes`.*'2,-1'.*width -1 < 1"),
    (dict(hidden_sizes=(2, -3)), r"`hidden_sizes`.*width -3 < 1"),
    (dict(hidden_sizes="2,x"), r"`hidden_sizes`.*'x' is not an integer"),
    (dict(hidden_sizes="2.5"), r"`hidden_sizes`.*'2.5' is not an integer"),
    (dict(hidden_sizes="2", activation="sigmoid"), r"`activation` must be one of tanh, relu, "
                                                   r"softplus, got 'sigmoid'"),
    (dict(hidden_sizes="2", likelihood="gamma"), r"`likelihood` must be one of .*'gamma'"),
    (dict(hidden_sizes="2", hessian="fisher"), r"`hessian` must be one of exact, gauss-newton"),
    (dict(hidden_sizes="2", noise_variance=-1.0), r"noise_variance must be > 0, got -1"),
])
def test_bad_input_one_line_error(kwargs, match):
    with pytest.raises(SgtuneError, match=match) as info:
        make_mlp(**kwargs)
    assert "\n" not in str(info.value)
    with pytest.raises(SgtuneError, match=match):  # the dataclass validates on its own too
        MLP(**kwargs)


def test_hidden_sizes_forms():
    assert make_mlp("2, 3").hidden_sizes == (2, 3)
    assert make_mlp([4]).hidden_sizes == (4,)
    assert make_mlp(5).hidden_sizes == (5,)
    assert make_mlp("").hidden_sizes == ()
    assert MLP((2, 3)) == make_mlp("2,3")


def test_check_response_delegates_to_the_glm():
    from sgtune.core.errors import DataFormatError

    with pytest.raises(DataFormatError, match="logistic regression needs y in"):
        make_mlp("2", likelihood="bernoulli").check_response(np.array([0.0, 2.0]))
    with pytest.raises(DataFormatError, match="non-negative integer counts"):
        make_mlp("2", likelihood="poisson").check_response(np.array([1.5]))
    make_mlp("2").check_response(np.array([-3.2, 1.0]))


def test_no_hidden_layer_identifiability_is_the_glms():
    from sgtune.core.errors import DataFormatError

    r = np.random.default_rng(0)
    X = r.standard_normal((20, 2))
    with pytest.raises(DataFormatError, match="linearly separable"):
        fit_map(make_mlp("", likelihood="bernoulli"), make_dataset(X, (X[:, 0] > 0).astype(float)))
    with pytest.raises(DataFormatError, match="rank 2 < D = 3"):  # a constant column duplicates the bias
        fit_map(make_mlp(""), make_dataset(np.column_stack([X[:, 0], np.ones(20)]), X[:, 1]))
    # with a hidden layer there is no global identifiability to check (the fitted point is checked)
    make_mlp("2").check_identifiable(X, X[:, 0], np.zeros((9, 9)), "data")


def test_exact_hessians_beyond_the_dense_budget_refuse_with_the_remedy(monkeypatch):
    import sgtune.models.expansion as expansion

    model = make_mlp("3")
    X = np.zeros((10, 2))
    d = model.n_params(2)  # 13
    monkeypatch.setattr(expansion, "DENSE_HESSIAN_BUDGET", 10 * d * d - 1)
    with pytest.raises(SgtuneError, match=r"N·D² = 10·13² = 1.69e\+03 .*`hessian='gauss-newton'`"):
        model.curvature(np.zeros(d), X, np.zeros(10))
    monkeypatch.setattr(expansion, "DENSE_HESSIAN_BUDGET", 10 * d * d)
    assert model.curvature(np.zeros(d), X, np.zeros(10)).hessians.shape == (10, d, d)
