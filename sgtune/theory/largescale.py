r"""Matrix-free diagonal step sizes for large D from the rank-one (GLM / Gauss–Newton) structure.

Never forms a D×D matrix: works on the design U (M, D) with J_n = w_n u_n u_nᵀ, the gradient
scales c_n with g_n = c_n u_n (for a GLM / Gauss–Newton model the per-sample gradient is
ρ'(f_n)∇f_n), and a diagonal prior Γ = diag(γ). Only the **posterior** target Σ* = H⁻¹/N,
H = J + Γ/N, is supported (the one with a cheap matrix-free solve).

What is computed. The closed form of :func:`sgtune.theory.tuning.structured_step_matrix`
for the diagonal family (the diagonal of eq. (11) at Σ*, one-step moment matching):

    λ_i = 2((HΣ*)_ii − 1/β)/R_ii,   R = C̄(Σ*) + HΣ*H,

with (HΣ*)_ii = 1/N and (HΣ*H)_ii = H_ii/N exactly, and (eq. 12)

    C̄_ii = (f/B)[mean_n c_n²u_ni² − ḡ_i² + mean_n w_n² q_n u_ni² − (JΣ*J)_ii],  q_n = u_nᵀΣ*u_n.

What is approximated. q_n and (JΣ*J)_ii are estimated from k random probes s_j ~ N(0, Σ*)
(s = H⁻¹v/√N with v ~ N(0, H) built from the factor of H, H⁻¹v by preconditioned conjugate
gradients with block right-hand sides): q̂_n = mean_j (u_nᵀs_j)², (JΣ*J)^_ii = mean_j (Js_j)_i²,
both unbiased; λ_i, a ratio, has a relative bias O(1/k). The exact covariance of the chain with
this Λ is *not* computed here (that needs the D×D forward solve); where both fit, compare with
:func:`sgtune.theory.tuning.tune` (``family="diagonal", family_criterion="moment"``), which is
this formula with exact q_n and JΣ*J.

Cost: O(k·M·D) per CG iteration and O(M·D) memory (the design itself plus (M, k) blocks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla

from .._refs import cites
from .._validation import as_float_array, check_int, check_positive
from ..errors import ConvergenceError, InfeasibleTargetError, SgtuneError, ShapeError, UnstableStepSizeError
from .stationary import StationaryCov, _build_system, _Stein, finite_population_factor

__all__ = ["MatrixFreeDiagonal", "posterior_diagonal_step_sizes", "stationary_cov_from_target",
           "stationary_cov_from_target_momentum"]


@dataclass(frozen=True)
class MatrixFreeDiagonal:
    """Result of :func:`posterior_diagonal_step_sizes`.

    Attributes
    ----------
    diagonal : (D,) λ.
    noise_diagonal : (D,) estimate of diag C̄(Σ*).
    probes : number of random probes k.
    cg_iterations : conjugate-gradient iterations of the block solve.
    cg_residual : largest relative residual ‖Hs − v‖/‖v‖ over the probes.
    preconditioner_rank : rank r of the randomised Nyström preconditioner (0: Jacobi only).
    """

    diagonal: np.ndarray
    noise_diagonal: np.ndarray
    probes: int
    cg_iterations: int
    cg_residual: float
    preconditioner_rank: int = 0


def _chunks(m: int, size: int = 2048) -> range:
    return range(0, m, size)


@cites("wang2026", "Eqs. (11)–(12), diagonal part at the posterior target (matrix-free, random probes)")
def posterior_diagonal_step_sizes(design: Any, weights: Any, grad_scales: Any, prior_diagonal: Any, *,
                                  batch_size: int, n_data: int | None = None,
                                  inv_temperature: float = math.inf, without_replacement: bool = False,
                                  probes: int = 32, seed: int = 0, cg_tol: float = 1e-8,
                                  max_iter: int = 2000, preconditioner_rank: int = 256) -> MatrixFreeDiagonal:
    r"""Diagonal Λ solving the diagonal of eq. (11) at Σ* = H⁻¹/N, from (U, w, c, γ) only.

    Parameters
    ----------
    design : (M, D) U, rows u_n (covariates of a GLM, ∇_θ f(x_n) for Gauss–Newton).
    weights : (M,) w_n ≥ 0 with J_n = w_n u_n u_nᵀ.
    grad_scales : (M,) c_n with per-sample gradients g_n = c_n u_n at θ̂.
    prior_diagonal : scalar or (D,) γ > 0 (Γ = diag γ).
    batch_size : B.
    n_data : N (default M).
    probes : k random probes.
    preconditioner_rank : r of the randomised Nyström preconditioner of the probe solves
        (Frangella, Tropp & Udell 2023, "Randomized Nyström preconditioning", SIAM J. Matrix
        Anal. Appl. 44(2)): the top-r part of Γ^{-1/2}UᵀWUΓ^{-1/2}·N/M from one pass over U with r
        columns, so CG needs few iterations when the curvature's spectrum decays (a Gauss–Newton
        design); 0 keeps the Jacobi preconditioner. The preconditioner changes only the speed of
        the solves, not what they solve (same tolerance ``cg_tol``).
    """
    U = np.asarray(design, dtype=float)
    if U.ndim != 2:
        raise ShapeError(f"design must be (M, D), got shape {U.shape}")
    m, d = U.shape
    w = as_float_array(weights, "weights").reshape(-1)
    c = as_float_array(grad_scales, "grad_scales").reshape(-1)
    if w.shape[0] != m or c.shape[0] != m:
        raise ShapeError(f"weights and grad_scales must have length M = {m}, got {w.shape[0]} and {c.shape[0]}")
    if np.any(w < 0):
        raise SgtuneError("weights must be >= 0 (Gauss–Newton / convex GLM curvature) for the matrix-free "
                          f"posterior route; smallest is {w.min():g}")
    gam = np.broadcast_to(as_float_array(prior_diagonal, "prior_diagonal"), (d,)).astype(float)
    if not np.all(gam > 0):
        raise SgtuneError("prior_diagonal must be > 0 (the posterior H⁻¹/N needs H ≻ 0); pass a prior precision")
    n = m if n_data is None else check_int(n_data, "n_data", low=m)
    B = check_int(batch_size, "batch_size", low=1, high=n)
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    k = check_int(probes, "probes", low=2)
    shift = 0.0 if math.isinf(beta) else 1.0 / beta
    if not 1.0 / n > shift:
        raise InfeasibleTargetError(f"the posterior target is unreachable at inverse temperature {beta:g}: "
                                    f"use an inverse temperature > N = {n}", min_inv_temperature=float(n))
    rng = np.random.default_rng(seed)

    def ut(a: np.ndarray) -> np.ndarray:  # Uᵀa, a (M, k)
        return U.T @ a

    rows = max(16, int(2**21 // max(d, 1)))  # row chunks of ≈ 16 MB: U is streamed from memory once per product

    def h_mul(V: np.ndarray) -> np.ndarray:  # H V = Uᵀ diag(w) U V / M + γ∘V / N, one pass over U
        out = gam[:, None] * V / n
        acc = np.zeros_like(V)
        for s in range(0, m, rows):
            blk = U[s:s + rows]
            acc += blk.T @ (w[s:s + rows, None] * (blk @ V))
        return out + acc / m

    # diag H and the moments that need one pass over the rows (chunked: no (M, D) temporaries)
    u2w = np.zeros(d)
    c2u2 = np.zeros(d)
    for s in _chunks(m):
        blk = U[s:s + 2048]
        sq = blk * blk
        u2w += sq.T @ w[s:s + 2048]
        c2u2 += sq.T @ (c[s:s + 2048] ** 2)
    h_diag = u2w / m + gam / n
    gbar = ut(c[:, None]).ravel() / m
    # probes v ~ N(0, H): v = Uᵀ(√w z₁)/√M + √γ z₂/√N
    Vrhs = ut(np.sqrt(w)[:, None] * rng.standard_normal((m, k))) / math.sqrt(m) \
        + np.sqrt(gam)[:, None] * rng.standard_normal((d, k)) / math.sqrt(n)
    r = min(check_int(preconditioner_rank, "preconditioner_rank", low=0), d)
    if r > 0:
        pre = _nystrom_preconditioner(lambda V: h_mul(V) - gam[:, None] * V / n, gam / n, r, rng)
    else:
        pre = lambda R_: R_ / h_diag[:, None]  # noqa: E731 (Jacobi)
    S, its, res = _block_pcg(h_mul, Vrhs, pre, cg_tol, max_iter)
    S /= math.sqrt(n)  # columns ~ N(0, H⁻¹/N) = N(0, Σ*)
    US = U @ S  # (M, k)
    q = np.mean(US * US, axis=1)  # q̂_n = u_nᵀΣ*u_n
    JS = ut(w[:, None] * US) / m  # J s_j
    jsj = np.mean(JS * JS, axis=1)  # (JΣ*J)_ii
    mjsj = np.zeros(d)
    for s in _chunks(m):
        blk = U[s:s + 2048]
        mjsj += (blk * blk).T @ (w[s:s + 2048] ** 2 * q[s:s + 2048])
    mjsj /= m
    f = finite_population_factor(n, B, without_replacement)
    cbar = (f / B) * (c2u2 / m - gbar**2 + mjsj - jsj)
    R = cbar + h_diag / n
    lam = 2.0 * (1.0 / n - shift) / R
    return MatrixFreeDiagonal(diagonal=lam, noise_diagonal=cbar, probes=k, cg_iterations=its, cg_residual=res,
                              preconditioner_rank=r)


def _nystrom_preconditioner(a_mul: Any, delta: np.ndarray, r: int, rng: np.random.Generator) -> Any:
    r"""P⁻¹ for H = A + diag(δ) (A ⪰ 0 applied by ``a_mul``): randomised Nyström of Ã = δ^{-1/2}Aδ^{-1/2}.

    Ã ≈ ÛΛ̂Ûᵀ (rank r, the numerically stable construction of Frangella, Tropp & Udell,
    Alg. 2.1: Y = ÃΩ with orthonormal Ω, shift ν = √D·eps·‖Y‖, C = chol(Ωᵀ(Y + νΩ)),
    B = (Y + νΩ)C⁻ᵀ = ÛΣVᵀ, Λ̂ = max(Σ² − ν, 0)); with H̃ = Ã + I the preconditioner is
    P̃⁻¹ = (λ̂_r + 1)Û(Λ̂ + I)⁻¹Ûᵀ + I − ÛÛᵀ, and P⁻¹ = δ^{-1/2}P̃⁻¹δ^{-1/2} (SPD).
    """
    d = delta.shape[0]
    sq = 1.0 / np.sqrt(delta)
    omega, _ = np.linalg.qr(rng.standard_normal((d, r)))
    Y = sq[:, None] * a_mul(sq[:, None] * omega)
    nu = math.sqrt(d) * np.finfo(float).eps * float(np.linalg.norm(Y))
    Y += nu * omega
    C = np.linalg.cholesky(0.5 * (omega.T @ Y + Y.T @ omega))
    Bm = sla.solve_triangular(C, Y.T, lower=True).T  # Y C⁻ᵀ
    Uh, sv, _ = np.linalg.svd(Bm, full_matrices=False)
    lam_h = np.maximum(sv * sv - nu, 0.0)
    scale = (lam_h[-1] + 1.0) / (lam_h + 1.0)

    def apply(R: np.ndarray) -> np.ndarray:
        Rt = sq[:, None] * R
        proj = Uh.T @ Rt
        return sq[:, None] * (Rt + Uh @ ((scale[:, None] - 1.0) * proj))

    return apply


def _block_pcg(mul: Any, Bm: np.ndarray, pinv: Any, tol: float, max_iter: int) -> tuple[np.ndarray, int, float]:
    """Preconditioned CG for H X = B (``pinv``: R ↦ P⁻¹R, SPD), one independent CG per column, run as a block."""
    X = np.zeros_like(Bm)
    R = Bm.copy()
    Z = pinv(R)
    P = Z.copy()
    rz = np.sum(R * Z, axis=0)
    nb = np.linalg.norm(Bm, axis=0)
    for it in range(1, max_iter + 1):
        HP = mul(P)
        alpha = rz / np.sum(P * HP, axis=0)
        X += alpha * P
        R -= alpha * HP
        rel = np.linalg.norm(R, axis=0) / nb
        if rel.max() <= tol:
            return X, it, float(rel.max())
        Z = pinv(R)
        rz_new = np.sum(R * Z, axis=0)
        P = Z + (rz_new / rz) * P
        rz = rz_new
    raise ConvergenceError(f"matrix-free posterior solve: conjugate gradients reached relative residual "
                           f"{rel.max():.2e} after {max_iter} iterations; use a larger prior precision",
                           residual=float(rel.max()), method="cg")


@cites("wang2026", "Eqs. (11)–(12) for Σ(Λ) − Σ*, Stein-preconditioned GMRES started at the target")
def stationary_cov_from_target(expansion: Any, step_matrix: Any, target_cov: np.ndarray,
                               noise_at_target: np.ndarray, *, batch_size: int,
                               inv_temperature: float = math.inf, without_replacement: bool = False,
                               tol: float = 1e-9, max_iter: int = 40) -> StationaryCov:
    r"""Exact stationary covariance Σ(Λ) of a tuned chain (κ = 0), solved for the correction Δ = Σ(Λ) − Σ*.

    The stationary equation S = FSFᵀ + Λ𝒩(S)Λ + Q₀ (F = I − ΛH, Q₀ = ΛC₀Λ + 2Λ/β, seed 003
    eqs. 11–12) is linear, so Δ solves

        Δ − FΔFᵀ − Λ𝒩(Δ)Λ = R₀,   R₀ = ΛC̄(Σ*)Λ + 2Λ/β + FΣ*Fᵀ − Σ*,

    whose right-hand side needs C̄(Σ*) = ``noise_at_target`` — already computed by the tuning
    (the one O(N·D²) pass over the data at the target) — and no further pass. Δ is found by
    GMRES on Y with Δ = 𝒮(Y), 𝒮 the exact Stein solve of X = FXFᵀ + Y (one symmetric
    eigendecomposition of Λ^{1/2}HΛ^{1/2}); each GMRES iteration is one application of
    Σ ↦ mean_n J_nΣJ_n (O(N·D²) through the rank-one J_n = w_n u_nu_nᵀ, never a D²×D² operator).
    Starting at the target instead of at zero, a tolerance ``tol`` relative to ‖R₀‖ makes Δ
    (hence the covariance error ‖Δ‖_F/‖Σ*‖_F) accurate to ≈ ``tol`` relative: the residual that
    remains is that of a chain whose covariance is within the target's error, not of Σ itself.

    What is reported: ``relative_residual`` is GMRES's true residual (right preconditioning)
    over ‖Σ‖_F; ``spectral_radius`` the certified bound 1 − λ_min(Σ^{-1/2}Q₀Σ^{-1/2})
    (``spectral_radius_is_bound``, valid for the positive map when the residual is small);
    ``tau_spectral`` from the eigenvalues of Λ^{1/2}HΛ^{1/2} (those of ΛH) of the Stein solve.
    """
    system = _build_system(expansion, step_matrix, batch_size, inv_temperature, without_replacement, 0.0)
    S0 = np.asarray(target_cov, dtype=float)
    Cbar = np.asarray(noise_at_target, dtype=float)
    lam, F = system.lam, system.F
    d = system.dim
    stein = _Stein(system)
    if not (getattr(stein, "real", False) and not getattr(stein, "fallback", False)):
        raise SgtuneError("stationary_cov_from_target needs a symmetric positive-definite step matrix")
    if not np.max(np.abs(stein.a)) < 1:
        c = 2.0 / float(np.max(1.0 - stein.a))
        raise UnstableStepSizeError(f"step_matrix is unstable: ΛH has an eigenvalue ≥ 2; scale it by less than "
                                    f"{c:.4g}", spectral_radius=float(np.max(np.abs(stein.a))) ** 2,
                                    max_stable_step=c)
    diag = np.diag(lam)
    is_diag = bool(np.array_equal(lam, np.diag(diag)))

    def sandwich(X: np.ndarray) -> np.ndarray:  # ΛXΛ (elementwise for a diagonal Λ)
        return diag[:, None] * X * diag[None, :] if is_diag else lam @ X @ lam

    R0 = sandwich(Cbar) + F @ S0 @ F.T - S0
    if math.isfinite(system.beta):
        R0 = R0 + (2.0 / system.beta) * lam
    R0 = 0.5 * (R0 + R0.T)

    def noise_term(X: np.ndarray) -> np.ndarray:  # Λ𝒩(X)Λ, one pass over the data
        return sandwich(system.noise(X))

    def op(yvec: np.ndarray) -> np.ndarray:
        Y = yvec.reshape(d, d)
        return (Y - noise_term(stein.solve(Y))).ravel()

    nr = float(np.linalg.norm(R0))
    if nr == 0:
        delta, rel = np.zeros((d, d)), 0.0
    else:
        y, rel, its = _gmres(lambda v: op(v), R0.ravel(), tol, max_iter)
        if not rel <= tol:
            raise ConvergenceError(f"stationary covariance from the target: GMRES reached relative residual "
                                   f"{rel:.2e} > {tol:g} in {its} iterations; the chain is probably close to "
                                   "unstable — reduce the step size", residual=rel, method="gmres")
        delta = stein.solve(y.reshape(d, d))
    res_abs = rel * nr
    cov = S0 + delta
    cov = 0.5 * (cov + cov.T)
    try:  # λ_min(Σ^{-1/2}Q₀Σ^{-1/2}) as the smallest eigenvalue of the pencil (Q₀, Σ); fails unless Σ ≻ 0
        qmin = float(sla.eigh(system.Q0, cov, eigvals_only=True, subset_by_index=[0, 0])[0])
    except (np.linalg.LinAlgError, ValueError):
        raise UnstableStepSizeError("step_matrix is unstable: the stationary equation has no positive-definite "
                                    "solution (the minibatch noise makes the second moment diverge); reduce the "
                                    "step size", spectral_radius=math.inf, max_stable_step=math.nan) from None
    rho = 1.0 - qmin
    if not rho < 1:
        raise UnstableStepSizeError(f"step_matrix is unstable (spectral-radius bound {rho:.4g} >= 1)",
                                    spectral_radius=rho, max_stable_step=math.nan)
    tau, tau_worst = _tau_top(system, cov)
    mu = 1.0 - stein.a
    return StationaryCov(cov=cov, spectral_radius=rho, relative_residual=float(res_abs / np.linalg.norm(cov)),
                         method="iterative", tau=tau, tau_worst=tau_worst, tau_spectral=float(2.0 / mu.min() - 1.0),
                         augmented_cov=cov, step_matrix=lam, momentum=0.0, inv_temperature=system.beta,
                         batch_size=system.B, without_replacement=without_replacement, transition=F,
                         spectral_radius_is_bound=True)


def _tau_top(system: Any, cov: np.ndarray) -> tuple[np.ndarray, float]:
    """τ_d and the worst τ over linear functionals, as :func:`sgtune.theory.stationary._tau_from_system`
    (W = (I − F)⁻¹Σ, τ_d = 2W_dd/Σ_dd − 1, τ_worst = 2μ_max(sym W, Σ) − 1) with only the top
    generalised eigenvalue computed."""
    d = system.dim
    W = np.linalg.solve(np.eye(d) - system.F, cov)
    tau = 2.0 * np.diag(W) / np.diag(cov) - 1.0
    try:
        top = float(sla.eigh(0.5 * (W + W.T), cov, eigvals_only=True, subset_by_index=[d - 1, d - 1])[0])
        worst = 2.0 * top - 1.0
    except (np.linalg.LinAlgError, ValueError):
        worst = float(np.max(tau))
    return tau, worst


def _gmres(matvec: Any, b: np.ndarray, tol: float, max_iter: int) -> tuple[np.ndarray, float, int]:
    """Unrestarted GMRES from x₀ = 0 (modified Gram–Schmidt Arnoldi): x, ‖b − Ax‖/‖b‖ (Arnoldi's), iterations.

    One matvec per iteration and none for an initial or a closing residual (scipy's gmres spends
    one on each; here a matvec is an O(N·D²) pass over the data).
    """
    nb = float(np.linalg.norm(b))
    V = [b / nb]
    Hm = np.zeros((max_iter + 1, max_iter))
    rel, k, y = 1.0, 0, np.zeros(0)
    for k in range(1, max_iter + 1):
        w = matvec(V[-1])
        for i, v in enumerate(V):
            Hm[i, k - 1] = float(v @ w)
            w = w - Hm[i, k - 1] * v
        Hm[k, k - 1] = float(np.linalg.norm(w))
        e1 = np.zeros(k + 1)
        e1[0] = nb
        y = np.linalg.lstsq(Hm[:k + 1, :k], e1, rcond=None)[0]
        rel = float(np.linalg.norm(e1 - Hm[:k + 1, :k] @ y)) / nb
        if rel <= tol or Hm[k, k - 1] == 0:
            break
        V.append(w / Hm[k, k - 1])
    x = np.zeros_like(b)
    for i in range(len(y)):
        x += y[i] * V[i]
    return x, rel, k


# --------------------------------------------------------------------------- momentum (issue 10, large D)
@cites("sgtune", "Prop. B.1 (momentum) with Λ fixed: Yule–Walker lag-0 equation, linear in Σ, solved for Σ(Λ) − Σ*")
def stationary_cov_from_target_momentum(expansion: Any, step_matrix: Any, target_cov: np.ndarray,
                                        noise_at_target: np.ndarray, *, batch_size: int, momentum: float,
                                        inv_temperature: float = math.inf, without_replacement: bool = False,
                                        tol: float = 1e-9, max_iter: int = 40) -> StationaryCov:
    r"""Exact stationary covariance Σ(Λ) of a heavy-ball chain (momentum κ), solved for Δ = Σ(Λ) − Σ* in D×D.

    Derivation. Eliminating the momentum (see :func:`sgtune.theory.tuning.solve_momentum_step_matrix`)
    gives the VARMA(2,1) recursion d_t = A₁d_{t−1} − κd_{t−2} + w_t, A₁ = (1+κ)I − ΛH, whose
    Yule–Walker equations at lag 1 give Γ₁ = E d_t d_{t−1}ᵀ explicitly,

        Γ₁ = [A₁Σ − κΣA₁ᵀ − κ(1−κ)Q]/c,   c = 1 − κ²,  Q = 2Λ/β,

    and at lag 0 the reduced equation 𝓛(Σ) = ΛC̄(Σ)Λ + (1−κ)²Q + (2κ/(1+κ))QHΛ with

        𝓛(Σ) = (1−κ)(ΛHΣ + ΣHΛ) + [κ(ΛHΛHΣ + ΣHΛHΛ) − (1+κ²)ΛHΣHΛ]/c.

    With Λ fixed this is LINEAR in Σ (C̄(Σ) = C₀ + 𝒩(Σ), eq. 12), i.e. the θ-block of the
    augmented (2D)² stationary equation of Prop. B.1 written in D×D unknowns only. 𝓛 is
    diagonal in the modal basis of ΛH: with Λ = LLᵀ, LᵀHL = U diag(μ) Uᵀ and V = LU (so
    ΛH = V diag(μ) V⁻¹, Λ = VVᵀ), Σ = VΣ̃Vᵀ gives 𝓛(Σ) = V(𝔡 ∘ Σ̃)Vᵀ with

        𝔡_ij = (1−κ)(μ_i + μ_j) + [κ(μ_i² + μ_j²) − (1+κ²)μ_iμ_j]/c

    (at κ = 0 the Stein denominator 1 − (1−μ_i)(1−μ_j); 𝔡_ii > 0 ⇔ 0 < μ_i < 2(1+κ), the
    heavy-ball stability condition). So, as for κ = 0 (:func:`stationary_cov_from_target`),
    Δ solves 𝓛(Δ) − Λ𝒩(Δ)Λ = R₀ with R₀ = (RHS − LHS of the reduced equation at Σ*), which
    needs C̄(Σ*) = ``noise_at_target`` and no pass over the data; GMRES on Y with Δ = 𝓛⁻¹(Y)
    (right preconditioning by the exact modal solve), one O(N·D²) noise pass per iteration,
    tolerance ``tol`` relative to ‖R₀‖_F.

    What else is returned. τ from G = Σ_{k≥0}Γ_k: Γ_k = A₁Γ_{k−1} − κΓ_{k−2} (k ≥ 2) sums to
    ΛH·G = Γ₁ − κΣ + ΛHΣ (τ_d = 2G_dd/Σ_dd − 1, τ_worst = 2μ_max(sym G, Σ) − 1). The augmented
    moment of (d, ν) from Λν_t = d_{t−1} − d_t + ξ_t: S_dν = (Γ₁ − Σ + Q)Λ⁻¹,
    S_νν = Λ⁻¹(2Σ − Γ₁ − Γ₁ᵀ − Q)Λ⁻¹. ``spectral_radius`` is the certified bound on ρ of the
    augmented second-moment map P from two steps of it: with S₂ = S + P(S) = 2S − Q₀ and
    Q₂ = Q₀ + P(Q₀) (P(S) = S − Q₀), P(S₂) = S₂ − Q₂, so ρ(P) ≤ 1 − λ_min(S₂^{-1/2}Q₂S₂^{-1/2}) —
    non-void without injected noise (Q₀ alone is singular then). It is computed in the modal
    coordinates d = Vx, ν = V⁻ᵀy, where F = [[I−ΛH, −κΛ], [H, κI]] is a 2×2 block per mode
    (elementwise products) and the pencil's eigenvalue is unchanged.
    """
    from .._validation import check_probability  # (local: keeps this addition apart from the module's imports)

    kappa = check_probability(momentum, "momentum")
    if kappa == 0.0:
        return stationary_cov_from_target(expansion, step_matrix, target_cov, noise_at_target,
                                          batch_size=batch_size, inv_temperature=inv_temperature,
                                          without_replacement=without_replacement, tol=tol, max_iter=max_iter)
    system = _build_system(expansion, step_matrix, batch_size, inv_temperature, without_replacement, 0.0)
    S0 = np.asarray(target_cov, dtype=float)
    Cbar = np.asarray(noise_at_target, dtype=float)
    lam, H = system.lam, system.H
    d = system.dim
    c = 1.0 - kappa * kappa
    inj = 0.0 if math.isinf(system.beta) else 2.0 / system.beta
    try:
        L = np.linalg.cholesky(0.5 * (lam + lam.T))
    except np.linalg.LinAlgError:
        raise SgtuneError("stationary_cov_from_target_momentum needs a symmetric positive-definite step "
                          "matrix") from None
    mu, U = np.linalg.eigh(L.T @ H @ L)
    V = L @ U
    Vi = U.T @ sla.solve_triangular(L, np.eye(d), lower=True)
    # heavy-ball modes z² − (1+κ−μ)z + κ = 0 are stable iff 0 < μ < 2(1+κ)
    z = np.abs(np.roots([1.0, -(1 + kappa - mu.max()), kappa])).max() if mu.max() > 0 else math.inf
    if not (mu.min() > 0 and mu.max() < 2 * (1 + kappa)):
        zmin = np.abs(np.roots([1.0, -(1 + kappa - mu.min()), kappa])).max()
        c_max = 2 * (1 + kappa) / mu.max() if mu.max() > 0 else 0.0
        raise UnstableStepSizeError(f"step_matrix is unstable with momentum {kappa:g}: ΛH has an eigenvalue "
                                    f"outside (0, {2 * (1 + kappa):g}); scale it by less than {c_max:.4g}",
                                    spectral_radius=float(max(z, zmin)) ** 2, max_stable_step=c_max)
    den = ((1 - kappa) * (mu[:, None] + mu[None, :])
           + (kappa * (mu[:, None] ** 2 + mu[None, :] ** 2) - (1 + kappa**2) * np.outer(mu, mu)) / c)
    diag = np.diag(lam)
    is_diag = bool(np.array_equal(lam, np.diag(diag)))

    def sandwich(X: np.ndarray) -> np.ndarray:  # ΛXΛ (elementwise for a diagonal Λ)
        return diag[:, None] * X * diag[None, :] if is_diag else lam @ X @ lam

    def modal(X: np.ndarray) -> np.ndarray:  # X̃ = V⁻¹XV⁻ᵀ
        return Vi @ X @ Vi.T

    def back(Xt: np.ndarray) -> np.ndarray:  # X = VX̃Vᵀ
        X = V @ Xt @ V.T
        return 0.5 * (X + X.T)

    def linv(Y: np.ndarray) -> np.ndarray:  # 𝓛⁻¹(Y)
        return back(modal(Y) / den)

    # R₀ = RHS − LHS of the reduced equation at Σ*: ΛC̄Λ + (1−κ)²Q + (2κ/(1+κ))ΛHΛ·(2/β) − 𝓛(Σ*)
    R0 = sandwich(Cbar) - back(den * modal(S0))
    if inj:
        R0 = R0 + (1 - kappa) ** 2 * inj * lam + (2 * kappa / (1 + kappa)) * inj * back(np.diag(mu))
    R0 = 0.5 * (R0 + R0.T)

    def op(yvec: np.ndarray) -> np.ndarray:
        Y = yvec.reshape(d, d)
        return (Y - sandwich(system.noise(linv(Y)))).ravel()

    nr = float(np.linalg.norm(R0))
    if nr == 0:
        delta, rel = np.zeros((d, d)), 0.0
    else:
        y, rel, its = _gmres(op, R0.ravel(), tol, max_iter)
        if not rel <= tol:
            raise ConvergenceError(f"stationary covariance from the target (momentum {kappa:g}): GMRES reached "
                                   f"relative residual {rel:.2e} > {tol:g} in {its} iterations; the chain is "
                                   "probably close to unstable — reduce the step size", residual=rel,
                                   method="gmres")
        delta = linv(y.reshape(d, d))
    cov = S0 + delta
    cov = 0.5 * (cov + cov.T)
    # modal coordinates (x, y), d = Vx, ν = V⁻ᵀy: Σ̃, Γ̃₁ (A₁ acts as the row scaling a = 1+κ−μ), Q̃ = (2/β)I
    St = modal(cov)
    St = 0.5 * (St + St.T)
    a = 1 + kappa - mu
    G1t = (a[:, None] * St - kappa * St * a[None, :]) / c
    if inj:
        G1t -= (kappa * (1 - kappa) * inj / c) * np.eye(d)
    Qt = inj * np.eye(d)
    Sxy = G1t - St + Qt
    Syy = 2 * St - G1t - G1t.T - Qt
    Saug_t = np.block([[St, Sxy], [Sxy.T, 0.5 * (Syy + Syy.T)]])
    # τ: G̃ = diag(1/μ)(Γ̃₁ − κΣ̃) + Σ̃, G = VG̃Vᵀ
    Gt = (G1t - kappa * St) / mu[:, None] + St
    Gm = V @ Gt @ V.T
    tau = 2.0 * np.diag(Gm) / np.diag(cov) - 1.0
    try:
        top = float(sla.eigh(0.5 * (Gt + Gt.T), St, eigvals_only=True, subset_by_index=[d - 1, d - 1])[0])
        tau_worst = 2.0 * top - 1.0
    except (np.linalg.LinAlgError, ValueError):
        raise UnstableStepSizeError("step_matrix is unstable: the stationary equation has no positive-definite "
                                    "solution (the minibatch noise makes the second moment diverge); reduce the "
                                    "step size", spectral_radius=math.inf, max_stable_step=math.nan) from None
    rho = _momentum_radius_bound(system, V, mu, kappa, inj, Saug_t)
    if not rho < 1:
        raise UnstableStepSizeError(f"step_matrix is unstable with momentum {kappa:g} (spectral-radius bound "
                                    f"{rho:.4g} >= 1)", spectral_radius=rho, max_stable_step=math.nan)
    # (d, ν) = T(x, y), T = blockdiag(V, V⁻ᵀ): the augmented moment block by block (T is block diagonal)
    Sdn = V @ Sxy @ Vi
    Snn = Vi.T @ Syy @ Vi
    Saug = np.block([[cov, Sdn], [Sdn.T, 0.5 * (Snn + Snn.T)]])
    I = np.eye(d)
    F = np.block([[I - lam @ H, -kappa * lam], [H, kappa * I]])
    return StationaryCov(cov=cov, spectral_radius=rho, relative_residual=float(rel * nr / np.linalg.norm(cov)),
                         method="iterative", tau=tau, tau_worst=tau_worst, tau_spectral=math.nan,
                         augmented_cov=Saug, step_matrix=lam, momentum=kappa, inv_temperature=system.beta,
                         batch_size=system.B, without_replacement=without_replacement, transition=F,
                         spectral_radius_is_bound=True)


def _momentum_radius_bound(system: Any, V: np.ndarray, mu: np.ndarray, kappa: float, inj: float,
                           S: np.ndarray) -> float:
    """1 − λ_min(Q₂, S₂) with S₂ = 2S − Q₀, Q₂ = Q₀ + P(Q₀), all in the modal coordinates of
    :func:`stationary_cov_from_target_momentum` (F̃ = [[I−μ, −κI], [μ, κI]], Ẽ = [−Vᵀ; Vᵀ])."""
    d = system.dim
    C0t = V.T @ (system.noise_scale * system.expansion.gradient_cov()) @ V
    C0t = 0.5 * (C0t + C0t.T)

    def e_sand(X: np.ndarray) -> np.ndarray:  # Ẽ X Ẽᵀ for X already in the modal basis (VᵀXV)
        return np.block([[X, -X], [-X, X]])

    Q0 = e_sand(C0t)
    Q0[:d, :d] += inj * np.eye(d)
    one_m = 1.0 - mu

    def f_sand(X: np.ndarray) -> np.ndarray:  # F̃XF̃ᵀ, F̃ = [[diag(1−μ), −κI], [diag(μ), κI]]
        rows = np.vstack([one_m[:, None] * X[:d] - kappa * X[d:], mu[:, None] * X[:d] + kappa * X[d:]])
        return np.hstack([rows[:, :d] * one_m[None, :] - kappa * rows[:, d:],
                          rows[:, :d] * mu[None, :] + kappa * rows[:, d:]])

    noise = V.T @ system.noise(V @ Q0[:d, :d] @ V.T) @ V  # x-block of Q̃₀ back in θ coordinates: V X̃ Vᵀ
    Q2 = Q0 + f_sand(Q0) + e_sand(0.5 * (noise + noise.T))
    S2 = 2.0 * S - Q0
    try:
        lo = float(sla.eigh(0.5 * (Q2 + Q2.T), 0.5 * (S2 + S2.T), eigvals_only=True, subset_by_index=[0, 0])[0])
    except (np.linalg.LinAlgError, ValueError):
        return math.inf
    return 1.0 - lo
