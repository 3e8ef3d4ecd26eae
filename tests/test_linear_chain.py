"""LinearChain and the noise-model registry against dense brute force built here from the per-sample terms.

The oracle of the stationary equation S = FSFᵀ + E𝒩(S_dd)Eᵀ + Q₀ (Wang, Ding & Huggins 2026, Eqs. (11)–(12),
Prop. B.1) is the Kronecker (vec) solve with every piece — F, E, Q₀ and the D²×D² matrix of
Σ ↦ (f/B)(mean_n J_nΣJ_n − JΣJ) — assembled in this file from the expansion's per-sample curvatures, not
from the library's operator. The comparison theories' predictions are checked against the fixed point of
their own maps, Σ ← FΣFᵀ + ΛC(Σ)Λᵀ + 2Λ/β (or the continuous Lyapunov equation, as a Kronecker sum).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.core.errors import SgtuneError, UnstableStepSizeError
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.theory.linear_chain import LinearChain, heavy_ball_transition, noise_scale
from sgtune.theory.noise_models import NOISE_MODELS, noise_model
from sgtune.theory.stationary import THEORIES, predict_comparison_cov
from sgtune.theory.tuning import METHODS, tune

from _tolerances import SOLVER_RTOL


def _problem(model: str, rng: np.random.Generator, n: int = 60, d: int = 3):
    X = rng.standard_normal((n, d))
    if model == "linear":
        y = X @ rng.standard_normal(d) + np.sqrt(1 + (X**2).sum(1)) * rng.standard_normal(n)
    else:
        y = (rng.random(n) < 1 / (1 + np.exp(-X @ rng.standard_normal(d)))).astype(float)
    return expand(get_model(model), make_dataset(X, y), 1.0, dense_hessians=True)


def _pieces(e, lam, B, beta, wor, kappa):
    """F, E, Q₀ and the dense noise operator N (D²×D², C-order vec), each from its definition."""
    n, d = e.n_data, e.dim
    f = (n - B) / (n - 1) if wor else 1.0
    H, J, Hs = e.hessian, e.curvature, e.per_sample_hessians
    C0 = (f / B) * (e.grads.T @ e.grads / n - np.outer(e.grads.mean(0), e.grads.mean(0)))
    N = (f / B) * (sum(np.kron(Jn, Jn) for Jn in Hs) / n - np.kron(J, J))  # vec(J_nΣJ_n) = (J_n ⊗ J_n) vec Σ
    I = np.eye(d)
    if kappa == 0:
        F, E = I - lam @ H, -lam
    else:
        F = np.vstack([np.hstack([I - lam @ H, -kappa * lam]), np.hstack([H, kappa * I])])
        E = np.vstack([-lam, I])
    Q0 = E @ C0 @ E.T
    if math.isfinite(beta):
        Q0[:d, :d] += 2 * lam / beta
    return F, E, Q0, N


def _brute_force(e, lam, B, beta, wor, kappa):
    """(S, ρ) from the m²×m² Kronecker system assembled from the pieces."""
    F, E, Q0, N = _pieces(e, lam, B, beta, wor, kappa)
    m, d = F.shape[0], e.dim
    sel = np.zeros((d * d, m * m))  # vec(S_dd) = sel · vec(S)
    for i in range(d):
        for j in range(d):
            sel[i * d + j, i * m + j] = 1.0
    P = np.kron(F, F) + np.kron(E, E) @ N @ sel
    S = np.linalg.solve(np.eye(m * m) - P, Q0.ravel()).reshape(m, m)
    return 0.5 * (S + S.T), float(np.max(np.abs(np.linalg.eigvals(P))))


def _spd(rng, d, scale):
    A = rng.standard_normal((d, d))
    return scale * (A @ A.T / d + np.eye(d))


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("beta, wor, kappa", [(math.inf, False, 0.0), (50.0, True, 0.0), (math.inf, False, 0.5),
                                              (40.0, True, 0.3)])
def test_the_chain_solves_the_dense_kronecker_system(rng, model, beta, wor, kappa):
    e = _problem(model, rng)
    lam = _spd(rng, e.dim, 0.05 if model == "linear" else 0.3)
    dyn = Dynamics(lam, 6, inv_temperature=beta, momentum=kappa,
                   batching="without-replacement" if wor else "replacement")
    S_bf, rho_bf = _brute_force(e, lam, 6, beta, wor, kappa)
    chain = LinearChain.of(e, dyn)
    F, E, Q0, _ = _pieces(e, lam, 6, beta, wor, kappa)
    np.testing.assert_allclose(chain.transition, F, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(chain.noise_map, E, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(chain.constant_noise, 0.5 * (Q0 + Q0.T), rtol=1e-12, atol=1e-15 * np.abs(Q0).max())
    for method in ("direct", "iterative"):
        sol = chain.solve(method=method)
        np.testing.assert_allclose(sol.second_moment, S_bf, rtol=SOLVER_RTOL, atol=SOLVER_RTOL * np.abs(S_bf).max())
        assert sol.spectral_radius == pytest.approx(rho_bf, rel=1e-7)  # ARPACK's tolerance 1e-8 on the iterative path
        assert sol.relative_residual < 1e-12
        np.testing.assert_allclose(sol.cov, S_bf[:e.dim, :e.dim], rtol=SOLVER_RTOL,
                                   atol=SOLVER_RTOL * np.abs(S_bf).max())
    assert chain.spectral_radius_bound(S_bf) >= rho_bf - 1e-12  # the certified bound is an upper bound


def test_max_stable_multiplier_brackets_the_dense_stability_boundary(rng):
    e = _problem("logistic", rng)
    lam = _spd(rng, e.dim, 0.3)
    for kappa in (0.0, 0.5):
        chain = LinearChain.of(e, Dynamics(lam, 4, momentum=kappa))
        c = chain.max_stable_multiplier(1e-6)
        assert _brute_force(e, (1 - 1e-4) * c * lam, 4, math.inf, False, kappa)[1] < 1
        assert _brute_force(e, (1 + 1e-4) * c * lam, 4, math.inf, False, kappa)[1] > 1
        with pytest.raises(UnstableStepSizeError, match="largest stable multiple") as info:
            LinearChain.of(e, Dynamics(1.01 * c * lam, 4, momentum=kappa)).solve()
        assert info.value.max_stable_step == pytest.approx(1 / 1.01, rel=1e-2)


def test_autocorrelation_times_are_the_lag_sums(rng):
    """τ_d = 1 + 2Σ_{k≥1} ρ_k(θ_d) from the explicit lags F^kS of the brute-force S."""
    e = _problem("linear", rng)
    lam = _spd(rng, e.dim, 0.05)
    for kappa in (0.0, 0.4):
        chain = LinearChain.of(e, Dynamics(lam, 6, momentum=kappa))
        S, _ = _brute_force(e, lam, 6, math.inf, False, kappa)
        d = e.dim
        acc, A = np.zeros((d, d)), S.copy()
        for _ in range(5000):
            A = chain.transition @ A
            acc += A[:d, :d]
        tau = 1 + 2 * np.diag(acc) / np.diag(S[:d, :d])
        np.testing.assert_allclose(chain.autocorrelation_times(S)[0], tau, rtol=1e-8)


def test_statistically_linearised_chain_is_the_constant_noise_stein_solve(rng):
    """With H_eff and C_eff given, Σ_SL solves S = FSFᵀ + (f/B)EC_effEᵀ + 2Λ/β (no Σ-dependent noise)."""
    e = _problem("logistic", rng)
    d = e.dim
    lam, H, C = _spd(rng, d, 0.2), _spd(rng, d, 1.0), _spd(rng, d, 0.5)
    for kappa in (0.0, 0.5):
        dyn = Dynamics(lam, 5, inv_temperature=80.0, momentum=kappa, batching="without-replacement")
        chain = LinearChain.statistically_linearised(e, dyn, H, C)
        f = (e.n_data - 5) / (e.n_data - 1) / 5
        F = heavy_ball_transition(lam, H, kappa)
        E = -lam if kappa == 0 else np.vstack([-lam, np.eye(d)])
        Q = f * E @ C @ E.T
        Q[:d, :d] += 2 * lam / 80.0
        m = F.shape[0]
        S = np.linalg.solve(np.eye(m * m) - np.kron(F, F), Q.ravel()).reshape(m, m)
        np.testing.assert_allclose(chain.solve_constant_noise(), S, rtol=1e-10, atol=1e-12 * np.abs(S).max())
        assert not chain.state_dependent and np.all(chain.noise(np.eye(d)) == 0)


# --------------------------------------------------------------------------- the registry
def _old_rhs(e, S, B, wor, method):
    """The tuning right-hand sides as tuning._noise_rhs wrote them before the registry."""
    H, J = e.hessian, e.curvature
    f = (e.n_data - B) / (e.n_data - 1) if wor else 1.0
    C_hat = e.gradient_cov() * (f / B)
    if method == "dq-exact":
        c = (e.gradient_cov() + e.mean_jsj(S) - J @ S @ J) * (f / B)
        R = 0.5 * (c + c.T) + H @ S @ H
    elif method == "ct":
        R = C_hat
    elif method == "dq-const":
        R = C_hat + H @ S @ H
    else:
        ratio = e.residual_variance / e.noise_variance
        R = (f / B) * (J @ S @ J + np.trace(J @ S) * J + ratio * J) + H @ S @ H
    return 0.5 * (R + R.T)


@pytest.mark.parametrize("method", list(NOISE_MODELS))
@pytest.mark.parametrize("wor", [False, True])
def test_registry_noise_models_are_the_old_formulas(rng, method, wor):
    e = _problem("linear", rng)
    S = e.sandwich_cov()
    scale = noise_scale(e.n_data, Dynamics(None, 7, batching=wor))
    np.testing.assert_array_equal(NOISE_MODELS[method].tuning_rhs(e, S, scale), _old_rhs(e, S, 7, wor, method))
    assert tuple(NOISE_MODELS) == THEORIES == METHODS


def _fixed_point(e, lam, B, beta, method, iters=200000):
    """Σ ← FΣFᵀ + ΛC(Σ)Λᵀ + 2Λ/β (discrete theories) iterated until it stops changing."""
    d, H, J = e.dim, e.hessian, e.curvature
    fb = 1.0 / B
    F = np.eye(d) - lam @ H
    inj = 2 * lam / beta if math.isfinite(beta) else 0.0
    S = np.zeros((d, d))
    for _ in range(iters):
        if method == "dq-const":
            C = fb * e.gradient_cov()
        elif method == "lr-ws":
            C = fb * (J @ S @ J + np.trace(J @ S) * J + e.residual_variance / e.noise_variance * J)
        else:
            C = fb * (e.gradient_cov() + e.mean_jsj(S) - J @ S @ J)
        new = F @ S @ F.T + lam @ C @ lam.T + inj
        if np.max(np.abs(new - S)) <= 1e-16 * np.max(np.abs(new)):
            return new
        S = new
    raise AssertionError("the fixed-point iteration did not converge")


@pytest.mark.parametrize("theory", THEORIES)
@pytest.mark.parametrize("beta", [math.inf, 200.0])
def test_comparison_predictions_solve_their_own_equations(rng, theory, beta):
    e = _problem("linear", rng)
    d = e.dim
    lam = _spd(rng, d, 0.05)
    got = predict_comparison_cov(e, Dynamics(lam, 8, inv_temperature=beta), theory=theory)
    if theory == "ct":  # ΛHΣ + ΣHΛᵀ = ΛĈΛᵀ + 2Λ/β as a Kronecker sum
        A = lam @ e.hessian
        rhs = lam @ (e.gradient_cov() / 8) @ lam.T + (2 * lam / beta if math.isfinite(beta) else 0)
        want = np.linalg.solve(np.kron(A, np.eye(d)) + np.kron(np.eye(d), A), rhs.ravel()).reshape(d, d)
    else:
        want = _fixed_point(e, lam, 8, beta, theory)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


def test_guards_are_the_same_for_tuning_and_prediction():
    e = expand(get_model("logistic"), example("logistic"), 1.0)
    with pytest.raises(SgtuneError, match="method 'lr-ws' assumes a well-specified linear regression"):
        tune(e, Dynamics(None, 8), method="lr-ws")
    with pytest.raises(SgtuneError, match="theory 'lr-ws' assumes a well-specified linear regression"):
        predict_comparison_cov(e, Dynamics(0.1, 8), theory="lr-ws")
    e = expand(get_model("linear"), example("hetero-linear"))
    for name in ("ct", "dq-const", "lr-ws"):
        with pytest.raises(SgtuneError, match="without momentum"):
            tune(e, Dynamics(None, 8, momentum=0.5), method=name)
        with pytest.raises(SgtuneError, match="without momentum"):
            predict_comparison_cov(e, Dynamics(0.01, 8, momentum=0.5), theory=name)
        with pytest.raises(SgtuneError, match="family 'diagonal' is defined through the exact"):
            tune(e, Dynamics(None, 8), method=name, family="diagonal")
    with pytest.raises(SgtuneError, match="theory must be one of dq-exact, ct, dq-const, lr-ws"):
        noise_model("nope", what="theory")
