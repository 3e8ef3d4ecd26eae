"""The matrix-free applicability checks of the Kronecker family against dense routes on small networks.

Dense route: H = torch.autograd.functional.hessian of the mean loss (with the prior), C = the covariance of
the per-row gradients (torch.func.jacrev), Λ = KroneckerTuning.dense_step_matrix, and the stationary
covariance of the linear chain with that H, C and Λ from sgtune's LinearChain (dense Stein/Lyapunov solve);
the eigenvalues of ΛH from np.linalg.eigvals.
"""
import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.theory.kronecker import tune_kronecker
from sgtune.theory.linear_chain import LinearChain, finite_population_factor
from sgtune.workflows.kronecker_applicability import NetworkOperators, kronecker_applicability
from sgtune.workflows.kronecker_probes import probe_directions

torch = pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment
pytest.importorskip("curvlinops")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


DELTA = 3.0


def _problem(rng, likelihood, n=150, p=2, hidden=3):
    X = rng.normal(size=(n, p))
    y = np.tanh(X[:, 0] - X[:, 1]) + 0.3 * rng.normal(size=n)
    k = 1
    if likelihood == "bernoulli":
        y = (y > 0).astype(float)
    if likelihood == "categorical":
        y = rng.integers(0, 3, size=n).astype(float)
        k = 3
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(p, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, k)).double()
    ops = NetworkOperators(net, X, y, likelihood, prior_precision=DELTA)
    opt = torch.optim.LBFGS(net.parameters(), max_iter=300, tolerance_grad=1e-10, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        th = torch.nn.utils.parameters_to_vector(net.parameters())
        loss = ops.per_row_losses(th, ops.X, ops.Y).mean() + DELTA / (2 * n) * th.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return net, X, y


def _dense(ops: NetworkOperators):
    th = ops.theta.clone()

    def mean_loss(t):
        return ops.per_row_losses(t, ops.X, ops.Y).mean() + ops.delta / (2 * ops.n) * t.pow(2).sum()

    H = torch.autograd.functional.hessian(mean_loss, th).numpy()
    J = torch.func.jacrev(lambda t: ops.per_row_losses(t, ops.X, ops.Y))(th).numpy()
    return 0.5 * (H + H.T), np.cov(J.T, bias=True)


@pytest.mark.parametrize("likelihood,momentum,beta,wor", [("gaussian", 0.0, "2N", False),
                                                          ("bernoulli", 0.5, "2N", True),
                                                          ("categorical", 0.0, "2N", False)])
def test_series_and_eigenvalues_equal_the_dense_linear_chain(rng, likelihood, momentum, beta, wor):
    net, X, y = _problem(rng, likelihood)
    n = len(X)
    b = np.inf if beta == "inf" else 2.0 * n
    dyn = Dynamics(None, batch_size=15, inv_temperature=b, momentum=momentum,
                   batching="without-replacement" if wor else "replacement")
    res = tune_kronecker(net, (X, y), dyn, likelihood=likelihood, prior_precision=3.0, target="posterior")
    ops = NetworkOperators(net, X, y, likelihood, prior_precision=3.0)
    H, C = _dense(ops)
    Lam = res.dense_step_matrix()
    lam = np.linalg.eigvals(Lam @ H).real
    a = kronecker_applicability(res, net, X, y, likelihood, n_random=3, tol=1e-12, max_terms=200000,
                                minibatch=False)
    assert a.eigenvalue_min == pytest.approx(lam.min(), rel=1e-6, abs=1e-9)
    assert a.eigenvalue_max == pytest.approx(lam.max(), rel=1e-6)
    if not a.stable:
        pytest.fail(f"the test problem should be stable, got {a.spectral_radius}")
    f = finite_population_factor(n, 15, wor)
    chain = LinearChain.with_constant_noise(dyn.replace(step=Lam), H, C, noise_scale=f / 15)
    rho = float(np.max(np.abs(np.linalg.eigvals(chain.transition)))) ** 2
    assert a.spectral_radius == pytest.approx(rho, rel=1e-6)
    S = chain.solve_constant_noise()[:res.dim, :res.dim]
    _, V = probe_directions(res, 3, 0)
    ref = np.einsum("kd,de,ke->k", V, S, V)
    assert np.allclose(a.linearised, ref, rtol=1e-8)
    assert np.allclose(a.predicted, res.probe_variance(V), rtol=1e-14)


def _scaled(res, factor):
    """The same result with every M multiplied by ``factor`` (Λ → factor·Λ)."""
    return res.__class__(tuple(lay.__class__(lay.name, factor * lay.step_factor, *[getattr(lay, k) for k in (
        "input_inverse", "output_cov", "target_output_cov", "weight_index", "bias_index", "spectral_radius",
        "tau_worst", "covariance_error", "prior_error")]) for lay in res.layers), res.dim, res.n_data,
        res.dynamics, res.target, res.prior_precision)


def test_an_unstable_step_is_flagged_without_a_series(rng):
    net, X, y = _problem(rng, "gaussian")
    res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=15, inv_temperature=2.0 * len(X)),
                         prior_precision=3.0)
    big = _scaled(res, 200.0)
    a = kronecker_applicability(big, net, X, y, n_random=1, minibatch=False)
    assert not a.stable and not a.applicable and a.terms == 0
    assert "diverges" in a.reasons[0]
    assert np.all(np.isnan(a.linearised))
    assert a.to_dict()["probes"][0]["linearised"] is None


def test_minibatch_growth_against_dense_random_products(rng):
    """Dense route: per-row Hessians by torch.autograd.functional.hessian, the same minibatch stream, the product
    of the dense (I − ΛH_b) on the same starts: equal growth. And the growth a single chain sees (its almost-sure
    rate) is at most the mean-square rate, the spectral radius of E[(I − ΛH_b) ⊗ (I − ΛH_b)] = F ⊗ F +
    (Λ⊗Λ)(E[H_n ⊗ H_n] − H ⊗ H)/B (with-replacement batches of B independent rows; Jensen)."""
    from sgtune.workflows.kronecker_applicability import minibatch_growth

    net, X, y = _problem(rng, "gaussian", n=60, hidden=2)
    n, B = len(X), 6
    res = _scaled(tune_kronecker(net, (X, y), Dynamics(None, batch_size=B, inv_temperature=2.0 * n),
                                 prior_precision=DELTA), 4.0)  # a growing mode
    ops = NetworkOperators(net, X, y, "gaussian", prior_precision=DELTA)
    th = ops.theta.clone()
    Hn = np.array([torch.autograd.functional.hessian(lambda t, i=i: ops.per_row_losses(t, ops.X[i:i + 1],
                                                                                        ops.Y[i:i + 1]).sum(),
                                                     th).numpy() for i in range(n)])
    Hn = 0.5 * (Hn + Hn.transpose(0, 2, 1)) + DELTA / n * np.eye(res.dim)
    Lam = res.dense_step_matrix()
    g = np.random.default_rng(3)
    V = g.standard_normal((8, res.dim))
    V /= np.sqrt(np.mean(np.sum(V * V, axis=1)))
    logs = 0.0
    for t in range(60):
        rows = g.integers(0, n, B)
        V = V - V @ Hn[rows].mean(axis=0) @ Lam
        sq = np.mean(np.sum(V * V, axis=1))
        logs += np.log(sq) if t >= 10 else 0.0
        V /= np.sqrt(sq)
    got = minibatch_growth(res, ops, steps=60, n_vectors=8, discard=10, seed=3)
    assert got == pytest.approx(np.exp(logs / 50), rel=1e-8)
    H = Hn.mean(axis=0)
    F = np.eye(res.dim) - Lam @ H
    EHH = np.einsum("nij,nkl->ikjl", Hn, Hn).reshape(res.dim ** 2, res.dim ** 2) / n
    T = np.kron(F, F) + np.kron(Lam, Lam) @ (EHH - np.kron(H, H)) / B
    assert 1.0 < got <= 1.05 * np.max(np.abs(np.linalg.eigvals(T)))
