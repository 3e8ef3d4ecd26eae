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

The preconditioner of the probe solves (``preconditioner_rank`` r): the randomised Nyström
preconditioner (Frangella, Tropp & Udell 2023, "Randomized Nyström preconditioning", SIAM J. Matrix
Anal. Appl. 44(2)): the top-r part of Γ^{-1/2}UᵀWUΓ^{-1/2}·N/M from one pass over U with r
columns, so CG needs few iterations when the curvature's spectrum decays (a Gauss–Newton
design); 0 keeps the Jacobi preconditioner. The preconditioner changes only the speed of
the solves, not what they solve (same tolerance ``cg_tol``).

What :func:`posterior_covariance_error` solves. The stationary covariance Σ(Λ) of SG(L)D (Wang,
Ding & Huggins 2026, Eqs. (11)–(12), κ = 0) is Σ* + Δ, where the correction Δ solves the linear
equation (F = I − ΛH, HΣ* = I/N exactly)

    𝓛(Δ) := Δ − FΔFᵀ − Λ𝒩(Δ)Λ = R₀ = Λ(C̄(Σ*) + H/N)Λ − 2(1/N − 1/β)Λ,

𝒩(X) = (f/B)(mean_n J_nXJ_n − JXJ), C̄(Σ*) = (f/B)(𝓘 − ḡḡᵀ + 𝒩(Σ*)·B/f) (eq. 12), with
J_n = w_n u_nu_nᵀ, 𝓘 = Uᵀdiag(c²)U/M, H = J + Γ/N. Nothing D×D is formed (memory
O(M·D + M·r + D·(r + k)); each operator application is a few passes over U).

What :func:`posterior_covariance_error` approximates.

1. *The representation* of Δ, found by Galerkin projection (the residual 𝓛(Δ̂) − R₀ is
   orthogonal to the representation's own matrices):

   - ``representation="target"`` (default): Δ̂ = diag(d) + αΣ*, D + 1 unknowns; the
     conditions are diag(𝓛(Δ̂) − R₀) = 0 and ⟨Σ*, 𝓛(Δ̂) − R₀⟩_F = 0. Motivation (measured
     with the dense solve at D ≈ 500, benchmarks/bench_tuning.py table 5): Δ is nearly
     diagonal in the eigenbasis of Λ^{1/2}HΛ^{1/2} (a function of it, like Σ* = H⁻¹/N) and is
     *not* low rank. Exact-moment Galerkin on this family gives ê within 0.01 % (Gauss–Newton-like
     design, rank-166 signal), 16 % low (misspecified logistic) and 14 % high (a real
     Gauss–Newton MLP) of the dense e. With probe-estimated moments the 2×2 Schur complement
     m₁₁ − κᵀA_d⁻¹δ is a difference of nearly equal numbers when Σ* is itself close to
     diagonal (the MLP), and α — hence ê — is then unreliable: the jackknife
     ``standard_error`` shows it (e.g. ê = 10 ± 4 where e = 0.71); trust ê only when its
     standard error is small. Above ``RELIABLE_ERROR_SE`` (0.2) of ê an ``AccuracyWarning``
     is issued. Measured: reliable on Gauss–Newton-like designs with a low-rank signal
     (D = 1000: ê = 1.048 ± 0.031 for e = 0.995); it warns on full-rank designs (misspecified
     logistic D = 1000: 0.27 ± 0.11 for e = 0.34) and on the GN MLP.
   - ``representation="low-rank"``: Δ̂ = diag(d) + VCVᵀ (V: D×r orthonormal, C symmetric);
     the diagonal and the V-compression of the residual vanish. With r = D (V = I) this is the
     exact Δ. ``basis="curvature"``: the top-r eigen-space of J (two passes of subspace
     iteration); ``"posterior"``: the top-r eigen-space of Σ* (one block solve H⁻¹Ω);
     ``"mixed"``: half of each. Measured: for r ≤ 256 ≪ D the correction is under-represented
     and ê is 2–10 times *below* e (accurate only when the design itself is low rank and
     r exceeds its rank, e.g. a rank-6 design with r = 24).
2. *Probe estimates*, each unbiased: with s_j ~ N(0, Σ*) (s = H⁻¹v/√N, v ~ N(0, H), block
   preconditioned CG), q_n = u_nᵀΣ*u_n ≈ mean_j (u_nᵀs_j)², diag Σ* ≈ mean_j s_j², the
   moments ⟨Σ*, ·⟩ of the target representation (see :func:`!_target_moments`; products
   of two estimates use independent halves of the probes), and for the low-rank one the
   compression of ΓΣ*Γ/N² ≈ mean_j (Γs_j)(Γs_j)ᵀ/N² (JΣ*J = (J − Γ/N)/N + ΓΣ*Γ/N² exactly);
   the one part of 𝓛 whose diagonal costs M²·D exactly, diag(J diag(d) J) = (J∘J)d, by
   k Rademacher probes ρ_j: mean_j (Jρ_j)∘(J(ρ_j∘d)) (its diagonal part J_ii²d_i is exact).
   The projected solution is a smooth function of these: consistent (error O(k^{-1/2})),
   not unbiased.
3. *The norm*: ‖Δ̂‖_F from the representation (‖d + α diag Σ*‖² + α²‖Σ* − diag Σ*‖²_F, or
   exactly for diag + VCVᵀ); ‖Σ*‖²_F and ‖Σ* − diag Σ*‖²_F without bias, for ``"target"`` as
   E(s_aᵀs_b)² and E[(s_aᵀs_b)² − Σ_i s_ai²s_bi²] over pairs of independent probes (no
   further solve), for ``"low-rank"`` as E‖Σ*z‖² (z ~ N(0, I),
   Σ*z = H⁻¹z/N, one more block of k solves). ``standard_error``: for ``"target"`` a delete-one-group jackknife
   over 4 groups of all the probes (s_j, ρ_j; the whole computation repeated); for
   ``"low-rank"`` the probe error of ‖Σ*‖_F only (delta method) — it does *not* include the
   noise of the probed operator and right-hand side, which dominates there (measured: ê
   spreads 0.83–1.51 over seeds at k = 64 where this error reads ±0.02).

What :func:`stationary_cov_from_target` solves. Without momentum the stationary equation
S = FSFᵀ + Λ𝒩(S)Λ + Q₀ (F = I − ΛH, Q₀ = ΛC₀Λ + 2Λ/β, Wang, Ding & Huggins 2026,
Eqs. (11)–(12)) is linear, so Δ solves

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

What :func:`stationary_cov_from_target_momentum` solves. Eliminating the momentum (see
:func:`sgtune.theory.tuning.solve_momentum_step_matrix`) gives the VARMA(2,1) recursion d_t = A₁d_{t−1} − κd_{t−2} + w_t, A₁ = (1+κ)I − ΛH, whose
Yule–Walker equations at lag 1 give Γ₁ = E d_t d_{t−1}ᵀ explicitly,

    Γ₁ = [A₁Σ − κΣA₁ᵀ − κ(1−κ)Q]/c,   c = 1 − κ²,  Q = 2Λ/β,

and at lag 0 the reduced equation 𝓛(Σ) = ΛC̄(Σ)Λ + (1−κ)²Q + (2κ/(1+κ))QHΛ with

    𝓛(Σ) = (1−κ)(ΛHΣ + ΣHΛ) + [κ(ΛHΛHΣ + ΣHΛHΛ) − (1+κ²)ΛHΣHΛ]/c.

With Λ fixed this is LINEAR in Σ (C̄(Σ) = C₀ + 𝒩(Σ), Eq. (12) of Wang, Ding & Huggins 2026),
i.e. the θ-block of the augmented (2D)² stationary equation of Prop. B.1 written in D×D
unknowns only. 𝓛 is diagonal in the modal basis of ΛH: with Λ = LLᵀ, LᵀHL = U diag(μ) Uᵀ and
V = LU (so ΛH = V diag(μ) V⁻¹, Λ = VVᵀ), Σ = VΣ̃Vᵀ gives 𝓛(Σ) = V(𝔡 ∘ Σ̃)Vᵀ with

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
from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.linalg as sla

from ..core._refs import cites
from ..core._validation import as_float_array, check_int
from ..core.errors import (AccuracyWarning, ConvergenceError, InfeasibleTargetError, SgtuneError, ShapeError,
                      UnstableStepSizeError)
from ..core.config import Dynamics
from .linear_chain import LinearChain, finite_population_factor, require_dynamics
from .stationary import StationaryCov

__all__ = ["CovarianceErrorEstimate", "ErrorOptions", "MatrixFreeDiagonal", "ProbeOptions", "RankOneProblem",
           "posterior_covariance_error", "posterior_diagonal_step_sizes", "stationary_cov_from_target",
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
    covariance_error : with ``error_estimate=True``, the estimate ê of ‖Σ(Λ) − Σ*‖_F/‖Σ*‖_F from
        :func:`posterior_covariance_error` (else nan).
    covariance_error_se : its probe standard error (jackknife; nan without the estimate).
    covariance_error_representation : representation of Σ(Λ) − Σ* behind it (``"target"``:
        diag(d) + αΣ*; ``""`` without the estimate).
    covariance_error_rank : rank of the representation's low-rank part (0 for ``"target"``).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> rng = np.random.default_rng(0)
    >>> U = rng.standard_normal((400, 2)) @ rng.standard_normal((2, 6)) + 0.05 * rng.standard_normal((400, 6))
    >>> w, c = np.full(400, 0.25), rng.standard_normal(400)
    >>> r = posterior_diagonal_step_sizes(RankOneProblem(U, w, c, 1.0), Dynamics(None, 10), ProbeOptions(probes=16),
    ...                                   error_estimate=True)
    >>> r.probes, r.covariance_error_representation, bool(r.cg_residual < 1e-8)
    (16, 'target', True)
    """

    diagonal: np.ndarray
    noise_diagonal: np.ndarray
    probes: int
    cg_iterations: int
    cg_residual: float
    preconditioner_rank: int = 0
    covariance_error: float = math.nan
    covariance_error_se: float = math.nan
    covariance_error_representation: str = ""
    covariance_error_rank: int = 0


def _rank_one_inputs(design: Any, weights: Any, grad_scales: Any,
                     prior_diagonal: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(U, w, c, γ) of the matrix-free posterior route, validated: U (M, D), w ≥ 0 and c of length M, γ > 0."""
    U = np.asarray(design, dtype=float)
    if U.ndim != 2:
        raise ShapeError(f"design must be (M, D), got shape {U.shape}")
    U = as_float_array(U, "design")
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
    return U, w, c, gam


@dataclass(frozen=True, eq=False)
class RankOneProblem:
    """The model at θ̂ in the rank-one form of the matrix-free posterior route: U, w, c, γ and N.

    Validated once, here, and stored as float64 arrays (γ as (D,), N as an int).

    Parameters
    ----------
    design : (M, D) array_like
        The design U, rows u_n (covariates of a GLM, ∇_θ f(x_n) for Gauss–Newton).
    weights : (M,) array_like
        The curvature weights w ≥ 0, J_n = w_n u_n u_nᵀ.
    grad_scales : (M,) array_like
        The gradient scales c, per-sample gradients g_n = c_n u_n at θ̂.
    prior_diagonal : float or (D,) array_like
        The prior precisions γ > 0 (Γ = diag γ).
    n_data : int or None, optional
        N (``None``: M, the rows of U).

    Raises
    ------
    SgtuneError
        :class:`~sgtune.core.errors.ShapeError` for inconsistent shapes; negative weights; γ not positive.

    Examples
    --------
    >>> U = np.random.default_rng(0).standard_normal((400, 6))
    >>> problem = RankOneProblem(U, np.full(400, 0.25), U[:, 0], 1.0)
    >>> problem.prior_diagonal.shape, problem.n_data
    ((6,), 400)
    """

    design: Any
    weights: Any
    grad_scales: Any
    prior_diagonal: Any
    n_data: int | None = None

    def __post_init__(self) -> None:
        U, w, c, gam = _rank_one_inputs(self.design, self.weights, self.grad_scales, self.prior_diagonal)
        n = U.shape[0] if self.n_data is None else check_int(self.n_data, "n_data", low=U.shape[0])
        for name, value in (("design", U), ("weights", w), ("grad_scales", c), ("prior_diagonal", gam),
                            ("n_data", n)):
            object.__setattr__(self, name, value)

    @property
    def dim(self) -> int:
        """D, the columns of U."""
        return int(self.design.shape[1])


@dataclass(frozen=True, kw_only=True)
class ProbeOptions:
    """How the random probes s_j ~ N(0, Σ*) of the matrix-free route are drawn and solved.

    Parameters
    ----------
    probes : int, optional
        The number k ≥ 2 of random probes (:func:`posterior_covariance_error` with
        ``representation="target"`` needs k ≥ 8).
    seed : int, optional
        The seed of the probes.
    cg_tol : float, optional
        The relative tolerance of the block conjugate-gradient solves H X = V.
    max_iter : int, optional
        Their iteration cap.
    preconditioner_rank : int, optional
        The rank r of the randomised Nyström preconditioner (module docstring; 0: Jacobi only).

    Examples
    --------
    >>> ProbeOptions(probes=16, seed=3)
    ProbeOptions(probes=16, seed=3, cg_tol=1e-08, max_iter=2000, preconditioner_rank=256)
    """

    probes: int = 32
    seed: int = 0
    cg_tol: float = 1e-8
    max_iter: int = 2000
    preconditioner_rank: int = 256

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "probes", check_int(self.probes, "probes", low=2))
        set_(self, "seed", check_int(self.seed, "seed", low=0))
        set_(self, "max_iter", check_int(self.max_iter, "max_iter", low=1))
        set_(self, "preconditioner_rank", check_int(self.preconditioner_rank, "preconditioner_rank", low=0))
        if not self.cg_tol > 0:
            raise SgtuneError(f"cg_tol must be > 0, got {self.cg_tol!r}")


@dataclass(frozen=True, kw_only=True)
class ErrorOptions:
    """How :func:`posterior_covariance_error` represents and solves the correction Δ = Σ(Λ) − Σ*.

    Parameters
    ----------
    representation : {"target", "low-rank"}, optional
        Δ̂ = diag(d) + αΣ* or Δ̂ = diag(d) + VCVᵀ (module docstring).
    rank : int, optional
        The rank r ≥ 1 of V for ``"low-rank"`` (r ≥ D: V = I, exact representation).
    basis : {"mixed", "curvature", "posterior"}, optional
        How V is built for ``"low-rank"``.
    solve_tol : float, optional
        The relative tolerance of the projected GMRES solve.
    solve_max_iter : int, optional
        Its iteration cap.

    Examples
    --------
    >>> ErrorOptions(representation="low-rank", rank=8).basis
    'mixed'
    """

    representation: str = "target"
    rank: int = 64
    basis: str = "mixed"
    solve_tol: float = 1e-8
    solve_max_iter: int = 500

    def __post_init__(self) -> None:
        if self.representation not in ERROR_REPRESENTATIONS:
            raise SgtuneError(f"representation must be one of {', '.join(ERROR_REPRESENTATIONS)}, "
                              f"got {self.representation!r}")
        if self.basis not in ERROR_BASES:
            raise SgtuneError(f"basis must be one of {', '.join(ERROR_BASES)}, got {self.basis!r}")
        object.__setattr__(self, "rank", check_int(self.rank, "rank", low=1))
        object.__setattr__(self, "solve_max_iter", check_int(self.solve_max_iter, "solve_max_iter", low=1))
        if not self.solve_tol > 0:
            raise SgtuneError(f"solve_tol must be > 0, got {self.solve_tol!r}")


@cites("wang2026", "Eqs. (11)–(12), diagonal part at the posterior target (matrix-free, random probes)")
def posterior_diagonal_step_sizes(problem: RankOneProblem, dynamics: Dynamics, probing: ProbeOptions | None = None,
                                  *, error_estimate: bool = False) -> MatrixFreeDiagonal:
    r"""Diagonal Λ solving the diagonal of eq. (11) at Σ* = H⁻¹/N, from (U, w, c, γ) only.

    Parameters
    ----------
    problem : RankOneProblem
        U, w, c, γ and N.
    dynamics : Dynamics
        B, β and the batching of the chain (``step`` is not used: the result is Λ; no momentum).
    probing : ProbeOptions, optional
        The number k of random probes, their seed and their solves (default ``ProbeOptions()``).
    error_estimate : bool, optional
        Also estimate the covariance error of the returned Λ (:func:`posterior_covariance_error`,
        representation ``"target"``, max(k, 8) fresh probes, seed + 1); Λ itself is unchanged.

    Returns
    -------
    MatrixFreeDiagonal
        The diagonal λ, the estimated diag C̄(Σ*) and the statistics of the solves.

    Raises
    ------
    SgtuneError
        :class:`~sgtune.core.errors.InfeasibleTargetError` if β ≤ N (the target is unreachable); momentum.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> U = np.random.default_rng(0).standard_normal((400, 6))
    >>> problem = RankOneProblem(U, np.full(400, 0.25), U[:, 0], 1.0)
    >>> r = posterior_diagonal_step_sizes(problem, Dynamics(None, 10))
    >>> r.diagonal.shape, bool(np.all(r.diagonal > 0))
    ((6,), True)
    """
    dynamics = require_dynamics("posterior_diagonal_step_sizes", "posterior_diagonal_step_sizes(RankOneProblem(U, w, "
                                "c, γ), Dynamics(None, batch_size, …), ProbeOptions(probes=…))", dynamics)
    probing = ProbeOptions() if probing is None else probing
    U, w, c, gam, n = problem.design, problem.weights, problem.grad_scales, problem.prior_diagonal, problem.n_data
    m, d = U.shape
    dynamics.check_data(n)
    if dynamics.momentum:
        raise SgtuneError("posterior_diagonal_step_sizes is for SG(L)D without momentum")
    B, beta, without_replacement = dynamics.batch_size, dynamics.inv_temperature, dynamics.without_replacement
    k = probing.probes
    shift = 0.0 if math.isinf(beta) else 1.0 / beta
    if not 1.0 / n > shift:
        raise InfeasibleTargetError(f"the posterior target is unreachable at inverse temperature {beta:g}: "
                                    f"use an inverse temperature > N = {n}", min_inv_temperature=float(n))
    rng = np.random.default_rng(probing.seed)
    op = _RankOneCurvature(U, w, gam / n)  # H = UᵀWU/M + Γ/N, row chunks: U is streamed once per product
    # diag H and the moments that need one pass over the rows (chunked: no (M, D) temporaries)
    h_diag = op.sq_tmul(w) / m + gam / n
    c2u2 = op.sq_tmul(c**2)
    gbar = U.T @ c / m
    # probes v ~ N(0, H): v = Uᵀ(√w z₁)/√M + √γ z₂/√N
    Vrhs = U.T @ (np.sqrt(w)[:, None] * rng.standard_normal((m, k))) / math.sqrt(m) \
        + np.sqrt(gam)[:, None] * rng.standard_normal((d, k)) / math.sqrt(n)
    r = min(probing.preconditioner_rank, d)
    if r > 0:
        pre = _nystrom_preconditioner(op.j_mul, gam / n, r, rng)
    else:
        pre = lambda R_: R_ / h_diag[:, None]  # noqa: E731 (Jacobi)
    S, its, res = _block_pcg(op.h_mul, Vrhs, pre, probing.cg_tol, probing.max_iter)
    S /= math.sqrt(n)  # columns ~ N(0, H⁻¹/N) = N(0, Σ*)
    US = op.rows_mul(S)  # (M, k)
    q = np.mean(US * US, axis=1)  # q̂_n = u_nᵀΣ*u_n
    JS = U.T @ (w[:, None] * US) / m  # J s_j
    jsj = np.mean(JS * JS, axis=1)  # (JΣ*J)_ii
    mjsj = op.sq_tmul(w * w * q) / m
    f = finite_population_factor(n, B, without_replacement)
    cbar = (f / B) * (c2u2 / m - gbar**2 + mjsj - jsj)
    R = cbar + h_diag / n
    lam = 2.0 * (1.0 / n - shift) / R
    out = MatrixFreeDiagonal(diagonal=lam, noise_diagonal=cbar, probes=k, cg_iterations=its, cg_residual=res,
                             preconditioner_rank=r)
    if error_estimate:
        est = posterior_covariance_error(problem, dynamics.replace(step=lam),
                                         dataclasses.replace(probing, probes=max(k, 8), seed=probing.seed + 1,
                                                             preconditioner_rank=r))
        out = replace(out, covariance_error=est.covariance_error, covariance_error_se=est.standard_error,
                      covariance_error_representation=est.representation, covariance_error_rank=est.rank)
    return out


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
def stationary_cov_from_target(expansion: Any, dynamics: Dynamics, target_cov: np.ndarray,
                               noise_at_target: np.ndarray, *, tol: float = 1e-9,
                               max_iter: int = 40) -> StationaryCov:
    r"""Exact Σ(Λ) of a tuned chain, solved for Δ = Σ(Λ) − Σ* (Wang, Ding & Huggins 2026, Eqs. (11)–(12)).

    Parameters
    ----------
    expansion, dynamics : Expansion, Dynamics
        The expansion at θ̂ and the chain: Λ symmetric positive definite, B, β, κ, batching (κ > 0:
        :func:`stationary_cov_from_target_momentum`). The method is in the module docstring.
    target_cov, noise_at_target : (D, D) ndarray
        Σ* and C̄(Σ*), already computed by the tuning (no further pass over the data).
    tol, max_iter : float, int
        GMRES's tolerance relative to ‖R₀‖ and its iteration cap.

    Returns
    -------
    StationaryCov
        Σ(Λ) (``method="iterative"``) with the certified spectral-radius bound.

    Raises
    ------
    SgtuneError
        :class:`~sgtune.core.errors.UnstableStepSizeError` if the chain is unstable,
        :class:`~sgtune.core.errors.ConvergenceError` if GMRES does not reach ``tol``.

    Examples
    --------
    >>> import sgtune
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.theory.stationary import noise_covariance
    >>> e = sgtune.expand(sgtune.get_model("logistic"), sgtune.example("logistic"))
    >>> S, dyn = e.sandwich_cov(), Dynamics(0.05 * np.eye(5), batch_size=32)
    >>> st = stationary_cov_from_target(e, dyn, S, noise_covariance(e, S, Dynamics(None, batch_size=32)))
    >>> bool(np.allclose(st.cov, sgtune.predict_stationary_cov(e, dyn).cov, rtol=1e-6))
    True
    """
    dyn = _target_settings("stationary_cov_from_target", dynamics)
    if dyn.momentum > 0:
        return stationary_cov_from_target_momentum(expansion, dyn, target_cov, noise_at_target, tol=tol,
                                                   max_iter=max_iter)
    chain = LinearChain.of(expansion, dyn)
    S0 = np.asarray(target_cov, dtype=float)
    Cbar = np.asarray(noise_at_target, dtype=float)
    lam, F = chain.step_matrix, chain.transition
    d = chain.dim
    stein = chain.stein()
    if not (stein.real and not stein.fallback):
        raise SgtuneError("stationary_cov_from_target needs a symmetric positive-definite step matrix")
    if not np.max(np.abs(stein.eigenvalues)) < 1:
        c = 2.0 / float(np.max(1.0 - stein.eigenvalues))
        raise UnstableStepSizeError(f"step_matrix is unstable: ΛH has an eigenvalue ≥ 2; scale it by less than "
                                    f"{c:.4g}", spectral_radius=float(np.max(np.abs(stein.eigenvalues))) ** 2,
                                    max_stable_step=c)
    sandwich = _sandwich_by(lam)
    R0 = sandwich(Cbar) + F @ S0 @ F.T - S0
    if math.isfinite(chain.inv_temperature):
        R0 = R0 + (2.0 / chain.inv_temperature) * lam
    R0 = 0.5 * (R0 + R0.T)

    def noise_term(X: np.ndarray) -> np.ndarray:  # Λ𝒩(X)Λ, one pass over the data
        return sandwich(chain.noise(X))

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
        qmin = float(sla.eigh(chain.constant_noise, cov, eigvals_only=True, subset_by_index=[0, 0])[0])
    except (np.linalg.LinAlgError, ValueError):
        raise UnstableStepSizeError("step_matrix is unstable: the stationary equation has no positive-definite "
                                    "solution (the minibatch noise makes the second moment diverge); reduce the "
                                    "step size", spectral_radius=math.inf, max_stable_step=math.nan) from None
    rho = 1.0 - qmin
    if not rho < 1:
        raise UnstableStepSizeError(f"step_matrix is unstable (spectral-radius bound {rho:.4g} >= 1)",
                                    spectral_radius=rho, max_stable_step=math.nan)
    tau, tau_worst = _tau_top(chain, cov)
    mu = 1.0 - stein.eigenvalues
    return StationaryCov(cov=cov, spectral_radius=rho, relative_residual=float(res_abs / np.linalg.norm(cov)),
                         method="iterative", tau=tau, tau_worst=tau_worst, tau_spectral=float(2.0 / mu.min() - 1.0),
                         augmented_cov=cov, step_matrix=lam, momentum=0.0, inv_temperature=chain.inv_temperature,
                         batch_size=chain.batch_size, without_replacement=chain.without_replacement, transition=F,
                         spectral_radius_is_bound=True, dynamics=dyn,
                         parameter_names=getattr(chain.expansion, "parameter_names", None))


def _target_settings(function: str, dynamics: Any) -> Dynamics:
    """``dynamics``, or a ``TypeError`` naming the form ``function(expansion, Dynamics(…), …)``."""
    return require_dynamics(function, f"{function}(expansion, Dynamics(step_matrix, batch_size, …), target_cov, "
                            "noise_at_target)", dynamics)


def _sandwich_by(lam: np.ndarray) -> Any:
    """X ↦ ΛXΛ for a symmetric Λ (elementwise when Λ is diagonal: no D³ products)."""
    diag = np.diag(lam)
    if np.array_equal(lam, np.diag(diag)):
        return lambda X: diag[:, None] * X * diag[None, :]
    return lambda X: lam @ X @ lam


def _tau_top(chain: LinearChain, cov: np.ndarray) -> tuple[np.ndarray, float]:
    """τ_d and the worst τ over linear functionals, as :meth:`LinearChain.autocorrelation_times`
    (W = (I − F)⁻¹Σ, τ_d = 2W_dd/Σ_dd − 1, τ_worst = 2μ_max(sym W, Σ) − 1) with only the top
    generalised eigenvalue computed."""
    d = chain.dim
    W = np.linalg.solve(np.eye(d) - chain.transition, cov)
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


# --------------------------------------------------------------------------- momentum (large D)
@cites("sgtune", "Prop. B.1 (momentum) with Λ fixed: Yule–Walker lag-0 equation, linear in Σ, solved for Σ(Λ) − Σ*")
def stationary_cov_from_target_momentum(expansion: Any, dynamics: Dynamics, target_cov: np.ndarray,
                                        noise_at_target: np.ndarray, *, tol: float = 1e-9,
                                        max_iter: int = 40) -> StationaryCov:
    r"""Exact stationary covariance Σ(Λ) of a heavy-ball chain (momentum κ), solved for Δ = Σ(Λ) − Σ* in D×D.

    The VARMA(2,1) form of the chain, reduced to D×D unknowns (module docstring; Wang, Ding & Huggins
    2026, Eq. (12) and Prop. B.1).

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂ (H and the per-observation J_n).
    dynamics : Dynamics
        The chain: Λ symmetric positive definite, B, β, κ, batching.
    target_cov, noise_at_target : (D, D) ndarray
        Σ* and C̄(Σ*), already computed by the tuning (no further pass over the data).
    tol, max_iter : float, int
        GMRES's tolerance relative to ‖R₀‖_F and its iteration cap.

    Returns
    -------
    StationaryCov
        Σ(Λ), the augmented moment of (d, ν), τ and the certified spectral-radius bound.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.stationary import noise_covariance, predict_stationary_cov
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> S, dyn = e.sandwich_cov(), Dynamics(0.05 * np.eye(5), batch_size=32, momentum=0.5)
    >>> st = stationary_cov_from_target_momentum(e, dyn, S, noise_covariance(e, S, Dynamics(None, 32)))
    >>> bool(np.allclose(st.cov, predict_stationary_cov(e, dyn).cov, rtol=1e-6))
    True
    """
    dyn = _target_settings("stationary_cov_from_target_momentum", dynamics)
    kappa = dyn.momentum
    if kappa == 0.0:
        return stationary_cov_from_target(expansion, dyn, target_cov, noise_at_target, tol=tol, max_iter=max_iter)
    chain = LinearChain.of(expansion, dyn)
    S0 = np.asarray(target_cov, dtype=float)
    Cbar = np.asarray(noise_at_target, dtype=float)
    lam = chain.step_matrix
    d = chain.dim
    c = 1.0 - kappa * kappa
    inj = 0.0 if math.isinf(chain.inv_temperature) else 2.0 / chain.inv_temperature
    V, Vi, mu = _heavy_ball_modes(chain)
    den = ((1 - kappa) * (mu[:, None] + mu[None, :])
           + (kappa * (mu[:, None] ** 2 + mu[None, :] ** 2) - (1 + kappa**2) * np.outer(mu, mu)) / c)
    sandwich = _sandwich_by(lam)

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
        return (Y - sandwich(chain.noise(linv(Y)))).ravel()

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
    return _momentum_result(chain, cov, modal(cov), V, Vi, mu, float(rel * nr / np.linalg.norm(cov)))


def _heavy_ball_modes(chain: LinearChain) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(V, V⁻¹, μ) with ΛH = V diag(μ) V⁻¹, Λ = VVᵀ; raises unless every heavy-ball mode is stable."""
    lam, H, d, kappa = chain.step_matrix, chain.hessian, chain.dim, chain.momentum
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
    return V, Vi, mu


def _momentum_result(chain: LinearChain, cov: np.ndarray, St: np.ndarray, V: np.ndarray, Vi: np.ndarray,
                     mu: np.ndarray, relative_residual: float) -> StationaryCov:
    """τ, the augmented moment of (d, ν) and the radius bound of Σ(Λ) = ``cov`` (Σ̃ = ``St`` in modal coordinates)."""
    lam, d, kappa = chain.step_matrix, chain.dim, chain.momentum
    c = 1.0 - kappa * kappa
    inj = 0.0 if math.isinf(chain.inv_temperature) else 2.0 / chain.inv_temperature
    # modal coordinates (x, y), d = Vx, ν = V⁻ᵀy: Σ̃, Γ̃₁ (A₁ acts as the row scaling a = 1+κ−μ), Q̃ = (2/β)I
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
    rho = _momentum_radius_bound(chain, V, mu, kappa, inj, Saug_t)
    if not rho < 1:
        raise UnstableStepSizeError(f"step_matrix is unstable with momentum {kappa:g} (spectral-radius bound "
                                    f"{rho:.4g} >= 1)", spectral_radius=rho, max_stable_step=math.nan)
    # (d, ν) = T(x, y), T = blockdiag(V, V⁻ᵀ): the augmented moment block by block (T is block diagonal)
    Sdn = V @ Sxy @ Vi
    Snn = Vi.T @ Syy @ Vi
    Saug = np.block([[cov, Sdn], [Sdn.T, 0.5 * (Snn + Snn.T)]])
    return StationaryCov(cov=cov, spectral_radius=rho, relative_residual=relative_residual,
                         method="iterative", tau=tau, tau_worst=tau_worst, tau_spectral=math.nan,
                         augmented_cov=Saug, step_matrix=lam, momentum=kappa, inv_temperature=chain.inv_temperature,
                         batch_size=chain.batch_size, without_replacement=chain.without_replacement,
                         transition=chain.transition, spectral_radius_is_bound=True, dynamics=chain.dynamics,
                         parameter_names=getattr(chain.expansion, "parameter_names", None))


def _momentum_radius_bound(chain: LinearChain, V: np.ndarray, mu: np.ndarray, kappa: float, inj: float,
                           S: np.ndarray) -> float:
    """1 − λ_min(Q₂, S₂) with S₂ = 2S − Q₀, Q₂ = Q₀ + P(Q₀), all in the modal coordinates of
    :func:`stationary_cov_from_target_momentum` (F̃ = [[I−μ, −κI], [μ, κI]], Ẽ = [−Vᵀ; Vᵀ])."""
    d = chain.dim
    C0t = V.T @ (chain.noise_scale * chain.expansion.gradient_cov()) @ V
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

    noise = V.T @ chain.noise(V @ Q0[:d, :d] @ V.T) @ V  # x-block of Q̃₀ back in θ coordinates: V X̃ Vᵀ
    Q2 = Q0 + f_sand(Q0) + e_sand(0.5 * (noise + noise.T))
    S2 = 2.0 * S - Q0
    try:
        lo = float(sla.eigh(0.5 * (Q2 + Q2.T), 0.5 * (S2 + S2.T), eigvals_only=True, subset_by_index=[0, 0])[0])
    except (np.linalg.LinAlgError, ValueError):
        return math.inf
    return 1.0 - lo


# --------------------------------------------------------------------------- covariance error at large D
#: bases of the low-rank part of the representation Δ̂ = diag(d) + VCVᵀ
ERROR_BASES = ("mixed", "curvature", "posterior")
#: representations of the correction Δ = Σ(Λ) − Σ*
ERROR_REPRESENTATIONS = ("target", "low-rank")
#: relative jackknife standard error above which the "target" estimate warns (AccuracyWarning)
RELIABLE_ERROR_SE = 0.2


@dataclass(frozen=True)
class CovarianceErrorEstimate:
    """Result of :func:`posterior_covariance_error`.

    Attributes
    ----------
    covariance_error : ê = ‖Δ̂‖_F / ‖Σ*‖_F, the relative Frobenius error of the represented
        stationary covariance Σ̂ = Σ* + Δ̂ (‖Σ*‖_F from random probes).
    standard_error : probe standard error of ê (``"target"``: jackknife over probe groups;
        ``"low-rank"``: the ‖Σ*‖_F probes only, delta method).
    correction_norm : ‖Δ̂‖_F (exact for the representation).
    target_norm : probe estimate of ‖Σ*‖_F.
    rank : r, columns of the basis V (0 for ``"target"``; r = D means V = I and no separate diagonal).
    basis : how V was built (``"mixed"``, ``"curvature"``, ``"posterior"``; ``"identity"`` for r = D,
        ``"none"`` for ``"target"``).
    probes : k.
    solve_residual : relative residual of the projected (Galerkin) system.
    solve_iterations : GMRES iterations of the projected system.
    cg_iterations, cg_residual : of the block conjugate-gradient solves with H.
    diagonal : (D,) d.
    basis_vectors : (D, r) V (orthonormal columns).
    core : (r, r) symmetric C.
    representation : ``"target"`` (Δ̂ = diag(d) + αΣ*) or ``"low-rank"`` (Δ̂ = diag(d) + VCVᵀ).
    target_coefficient : α (``"target"``; 0 otherwise).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> rng = np.random.default_rng(0)
    >>> U = rng.standard_normal((400, 2)) @ rng.standard_normal((2, 6)) + 0.05 * rng.standard_normal((400, 6))
    >>> w, c = np.full(400, 0.25), rng.standard_normal(400)
    >>> est = posterior_covariance_error(RankOneProblem(U, w, c, 1.0), Dynamics(np.full(6, 0.05), 10),
    ...                                  ProbeOptions(probes=16))
    >>> est.rank, est.basis, est.diagonal.shape
    (0, 'none', (6,))
    """

    covariance_error: float
    standard_error: float
    correction_norm: float
    target_norm: float
    rank: int
    basis: str
    probes: int
    solve_residual: float
    solve_iterations: int
    cg_iterations: int
    cg_residual: float
    diagonal: np.ndarray
    basis_vectors: np.ndarray
    core: np.ndarray
    representation: str = "low-rank"
    target_coefficient: float = 0.0


class _RankOneCurvature:
    """J = UᵀWU/M and H = J + diag(g) applied in row chunks of ≈ 16 MB (no D×D and no (M, D) temporary)."""

    def __init__(self, U: np.ndarray, w: np.ndarray, g: np.ndarray) -> None:
        self.U, self.w, self.g = U, w, g
        self.m = U.shape[0]
        self.rows = max(16, int(2**21 // max(U.shape[1], 1)))

    def j_mul(self, V: np.ndarray) -> np.ndarray:
        U, w, s = self.U, self.w, self.rows
        acc = np.zeros_like(V)
        for i in range(0, self.m, s):
            blk = U[i:i + s]
            acc += blk.T @ (w[i:i + s, None] * (blk @ V))
        return acc / self.m

    def h_mul(self, V: np.ndarray) -> np.ndarray:
        return self.j_mul(V) + self.g[:, None] * V

    def sq_mul(self, d: np.ndarray) -> np.ndarray:
        """(U∘U)d, i.e. u_nᵀ diag(d) u_n for every row."""
        U, s = self.U, self.rows
        return np.concatenate([(U[i:i + s] * U[i:i + s]) @ d for i in range(0, self.m, s)])

    def sq_tmul(self, a: np.ndarray) -> np.ndarray:
        """(U∘U)ᵀa = diag(Uᵀ diag(a) U)."""
        U, s = self.U, self.rows
        out = np.zeros(U.shape[1])
        for i in range(0, self.m, s):
            blk = U[i:i + s]
            out += (blk * blk).T @ a[i:i + s]
        return out

    def rows_mul(self, V: np.ndarray) -> np.ndarray:
        """UV, (M, r)."""
        U, s = self.U, self.rows
        return np.concatenate([U[i:i + s] @ V for i in range(0, self.m, s)])


@cites("wang2026", "Eqs. (11)–(12): Σ(Λ) − Σ* for diagonal Λ at the posterior target, projected on "
                   "diag + αΣ* or diag + low rank (matrix-free); relative Frobenius error by random probes")
@cites("sgtune", "Galerkin projection of the correction equation; Hutchinson-type probe estimates")
def posterior_covariance_error(problem: RankOneProblem, dynamics: Dynamics, probing: ProbeOptions | None = None,
                               options: ErrorOptions | None = None) -> CovarianceErrorEstimate:
    r"""Covariance error ‖Σ(Λ) − Σ*‖_F/‖Σ*‖_F of a diagonal Λ at Σ* = H⁻¹/N, matrix-free (rank-one J_n).

    The correction Δ = Σ(Λ) − Σ* of SG(L)D (Wang, Ding & Huggins 2026, Eqs. (11)–(12), κ = 0) solves a
    linear equation; which, and what is approximated — the representation of Δ, the probe estimates and
    the norm — is in the module docstring. Nothing D×D is formed. Not certified here: stability of the
    chain (use :func:`stationary_cov_from_target` where D×D fits); the result assumes the chain with
    this Λ is second-moment stable.

    Parameters
    ----------
    problem : RankOneProblem
        U, w, c, γ and N.
    dynamics : Dynamics
        The chain: ``step`` the (D,) diagonal λ of Λ (e.g. ``posterior_diagonal_step_sizes(...).diagonal``),
        B, β and the batching (no momentum).
    probing : ProbeOptions, optional
        The probes (default ``ProbeOptions()``; ``"target"`` needs k ≥ 8).
    options : ErrorOptions, optional
        The representation of Δ̂ and its projected solve (default ``ErrorOptions()``).

    Returns
    -------
    CovarianceErrorEstimate
        The estimate ê, its probe standard error and the representation Δ̂.

    Raises
    ------
    SgtuneError
        If λ is not positive, the chain has momentum, or an option is out of range.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> rng = np.random.default_rng(0)
    >>> U = rng.standard_normal((400, 2)) @ rng.standard_normal((2, 6)) + 0.05 * rng.standard_normal((400, 6))
    >>> w, c = np.full(400, 0.25), rng.standard_normal(400)
    >>> problem, probing = RankOneProblem(U, w, c, 1.0), ProbeOptions(probes=16)
    >>> lam = posterior_diagonal_step_sizes(problem, Dynamics(None, 10), probing).diagonal
    >>> est = posterior_covariance_error(problem, Dynamics(lam, 10), probing)
    >>> est.representation, est.probes, bool(est.standard_error < 0.2 * est.covariance_error)
    ('target', 16, True)
    """
    dyn = require_dynamics("posterior_covariance_error", "posterior_covariance_error(RankOneProblem(U, w, c, γ), "
                           "Dynamics(step_sizes, batch_size, …), ProbeOptions(…), ErrorOptions(…))", dynamics)
    probing = ProbeOptions() if probing is None else probing
    options = ErrorOptions() if options is None else options
    d, n, step_sizes = problem.dim, problem.n_data, dyn.step
    lam = as_float_array(step_sizes, "step_sizes").reshape(-1) if np.ndim(step_sizes) else None
    if lam is None or lam.shape[0] != d:
        raise ShapeError(f"step_sizes must be the (D,) = ({d},) diagonal of Λ, got shape {np.shape(step_sizes)}")
    if not np.all(lam > 0):
        i = int(np.argmin(lam))
        raise SgtuneError(f"step_sizes must be > 0; step_sizes[{i}] = {lam[i]:g} — pass the diagonal of an SPD Λ")
    dyn.check_data(n)
    if dyn.momentum:
        raise SgtuneError("posterior_covariance_error is for SG(L)D without momentum")
    k = probing.probes
    if options.representation == "target" and k < 8:
        raise SgtuneError(f"probes must be >= 8 for representation 'target' (two independent halves in each of "
                          f"4 jackknife groups), got {k}")
    pr = _ErrorProbes.draw(problem, lam, dyn, probing, low_rank=options.representation == "low-rank")
    if options.representation == "target":
        return _target_error(pr, seed=probing.seed, solve_tol=options.solve_tol,
                             solve_max_iter=options.solve_max_iter)
    return _low_rank_error(pr, min(options.rank, d), options.basis, cg_tol=probing.cg_tol,
                           max_iter=probing.max_iter, solve_tol=options.solve_tol,
                           solve_max_iter=options.solve_max_iter)


@dataclass
class _ErrorProbes:
    """The probes of :func:`posterior_covariance_error`: s_j ~ N(0, Σ*) (columns of S), Σ*z_j, Rademacher ρ_j."""

    op: _RankOneCurvature
    c: np.ndarray
    lam: np.ndarray
    lh: np.ndarray
    n: int
    fb: float
    shift: float
    S: np.ndarray
    sig_z: np.ndarray
    q_hat: np.ndarray
    dsig: np.ndarray
    rad: np.ndarray
    PJ: np.ndarray
    pre: Any
    rng: np.random.Generator
    its: int
    cg_res: float

    @classmethod
    def draw(cls, problem: RankOneProblem, lam: np.ndarray, dynamics: Dynamics, probing: ProbeOptions, *,
             low_rank: bool) -> "_ErrorProbes":
        """One block solve H X = [v_1..v_k, z_1..z_k] (s_j = x_j/√N ~ N(0, Σ*), Σ*z_j) and the Rademacher probes."""
        U, w, c, n, k = problem.design, problem.weights, problem.grad_scales, problem.n_data, probing.probes
        g = problem.prior_diagonal / n
        m, d = U.shape
        beta = dynamics.inv_temperature
        shift = 0.0 if math.isinf(beta) else 1.0 / beta
        fb = finite_population_factor(n, dynamics.batch_size, dynamics.without_replacement) / dynamics.batch_size
        op = _RankOneCurvature(U, w, g)
        h = op.sq_tmul(w) / m + g
        lh = lam * h
        if not np.all(lh < 2):
            i = int(np.argmax(lh))
            raise UnstableStepSizeError(f"step_sizes are unstable: λ_i H_ii = {lh[i]:.4g} ≥ 2 at i = {i} (a stable "
                                        f"chain needs the eigenvalues of ΛH below 2); scale them by less than "
                                        f"{2 / lh.max():.4g}", spectral_radius=math.nan, max_stable_step=2 / lh.max())
        rng = np.random.default_rng(probing.seed)
        vrhs = U.T @ (np.sqrt(w)[:, None] * rng.standard_normal((m, k))) / math.sqrt(m) \
            + np.sqrt(g)[:, None] * rng.standard_normal((d, k))
        zs = rng.standard_normal((d, k if low_rank else 0))
        pr = min(probing.preconditioner_rank, d)
        if pr > 0:
            pre = _nystrom_preconditioner(op.j_mul, g, pr, rng)
        else:
            pre = lambda R_: R_ / h[:, None]  # noqa: E731 (Jacobi)
        X, its, cg_res = _block_pcg(op.h_mul, np.hstack([vrhs, zs]), pre, probing.cg_tol, probing.max_iter)
        S = X[:, :k] / math.sqrt(n)
        US = op.rows_mul(S)
        rad = rng.choice([-1.0, 1.0], size=(d, k))  # Rademacher probes of (J∘J)d
        return cls(op=op, c=c, lam=lam, lh=lh, n=n, fb=fb, shift=shift, S=S, sig_z=X[:, k:] / n,
                   q_hat=np.mean(US * US, axis=1), dsig=np.mean(S * S, axis=1), rad=rad, PJ=op.j_mul(rad), pre=pre,
                   rng=rng, its=its, cg_res=cg_res)

    def jj(self, cols: Any = slice(None)) -> Any:
        """d ↦ mean_j (Jρ_j)∘(J(ρ_j∘d)) over the probe columns ``cols``: unbiased for (J∘J)d = diag(J diag(d) J)."""
        def jj_(dv: np.ndarray) -> np.ndarray:
            return np.mean(self.PJ[:, cols] * self.op.j_mul(self.rad[:, cols] * dv[:, None]), axis=1)
        return jj_


def _target_error(pr: _ErrorProbes, *, seed: int, solve_tol: float, solve_max_iter: int) -> CovarianceErrorEstimate:
    """The ``"target"`` representation Δ̂ = diag(d) + αΣ* and its jackknife standard error."""
    S, lam, lh = pr.S, pr.lam, pr.lh
    d, k = S.shape
    pd = 2.0 * lh - lh * lh

    def target_error(cols: np.ndarray) -> tuple[float, float, np.ndarray, float, float, int]:
        Sg = S[:, cols]
        mom = _target_moments(pr.op, pr.c, lam, Sg, n=pr.n, fb=pr.fb, shift=pr.shift)
        block = _diag_block(pr.op, lam, pr.fb, pr.jj(cols))
        dv_, alpha_, rel_, nit_ = _bordered_solve(block, pd, mom, solve_tol, solve_max_iter)
        tn2_ = _pair_norm2(Sg)
        # ‖diag(d) + αΣ*‖²_F = ‖d + α diag Σ*‖² + α²‖Σ* − diag Σ*‖²_F (the off-diagonal part by probe
        # pairs, so the large diagonal of Σ* is not subtracted from a noisy ‖Σ*‖²_F)
        c2 = float(np.sum((dv_ + alpha_ * np.mean(Sg * Sg, axis=1)) ** 2)
                   + alpha_**2 * max(_pair_norm2(Sg, off_diagonal=True), 0.0))
        return math.sqrt(max(c2, 0.0) / tn2_), math.sqrt(max(c2, 0.0)), dv_, alpha_, rel_, nit_

    err, corr, dv, alpha, rel, nit = target_error(np.arange(k))
    tn2 = _pair_norm2(S)
    # standard error: delete-one-group jackknife over 4 groups of the probes (s_j, ρ_j); the whole
    # chain — moments, bordered solve, norm — is recomputed without each group (k ≥ 8: ≥ 6 columns left)
    groups = np.array_split(np.random.default_rng(seed + 1).permutation(k), 4)
    jk = np.array([target_error(np.setdiff1d(np.arange(k), gr))[0] for gr in groups])
    se = float(math.sqrt(3.0 / 4.0 * np.sum((jk - jk.mean()) ** 2)))
    if not se <= RELIABLE_ERROR_SE * err:
        warnings.warn(f"posterior_covariance_error: the estimate {err:.3g} has jackknife standard error {se:.3g} "
                      f"(> {RELIABLE_ERROR_SE:g} of it): the probe moments do not determine the correction "
                      "(typically when Σ* is nearly diagonal or the design is full rank); use more probes, or the "
                      "dense stationary_cov_from_target where D×D fits", AccuracyWarning, stacklevel=3)
    return CovarianceErrorEstimate(covariance_error=err, standard_error=se,
                                   correction_norm=corr, target_norm=math.sqrt(tn2), rank=0, basis="none",
                                   probes=k, solve_residual=rel, solve_iterations=nit, cg_iterations=pr.its,
                                   cg_residual=pr.cg_res, diagonal=dv, basis_vectors=np.zeros((d, 0)),
                                   core=np.zeros((0, 0)), representation="target", target_coefficient=alpha)


def _low_rank_error(pr: _ErrorProbes, r: int, basis: str, *, cg_tol: float, max_iter: int, solve_tol: float,
                    solve_max_iter: int) -> CovarianceErrorEstimate:
    """The ``"low-rank"`` representation Δ̂ = diag(d) + VCVᵀ on a basis V of rank r."""
    op, S, rng, its, cg_res = pr.op, pr.S, pr.rng, pr.its, pr.cg_res
    d, k = S.shape
    g = op.g
    t = np.sum(pr.sig_z * pr.sig_z, axis=0)  # ‖Σ*z_j‖², unbiased for ‖Σ*‖²_F
    tn2, tse = float(np.mean(t)), float(np.std(t, ddof=1) / math.sqrt(k))
    if r == d:
        V = np.eye(d)
    else:
        rp = {"posterior": r, "curvature": 0, "mixed": r // 2}[basis]
        parts = []
        if r - rp > 0:  # top eigen-space of J: two passes of subspace iteration
            Q = np.linalg.qr(op.j_mul(rng.standard_normal((d, r - rp))))[0]
            Y = op.j_mul(Q)
            parts.append(Y / np.linalg.norm(Y, axis=0))
        if rp > 0:  # top eigen-space of Σ* = H⁻¹/N: one block solve
            Y, its2, res2 = _block_pcg(op.h_mul, rng.standard_normal((d, rp)), pr.pre, max(cg_tol, 1e-6), max_iter)
            its, cg_res = its + its2, max(cg_res, res2)
            parts.append(Y / np.linalg.norm(Y, axis=0))
        V = np.linalg.qr(np.hstack(parts) if len(parts) > 1 else parts[0])[0]

    def gsg(A: np.ndarray) -> np.ndarray:  # ≈ Aᵀ(ΓΣ*Γ/N²)A from s_j ~ N(0, Σ*), unbiased
        GS = A.T @ (g[:, None] * S)
        return GS @ GS.T / k

    dv, C, rel, nit = _projected_correction(op, pr.c, pr.lam, V, n=pr.n, fb=pr.fb, shift=pr.shift,
                                            q_target=pr.q_hat, diag_target=pr.dsig, gsg=gsg, jj=pr.jj(),
                                            solve_tol=solve_tol, solve_max_iter=solve_max_iter)
    # ‖diag(d) + VCVᵀ‖²_F with orthonormal V
    corr2 = float(dv @ dv + 2.0 * dv @ np.sum((V @ C) * V, axis=1) + np.sum(C * C))
    corr = math.sqrt(max(corr2, 0.0))
    err = corr / math.sqrt(tn2)
    return CovarianceErrorEstimate(covariance_error=err, standard_error=0.5 * err * tse / tn2, correction_norm=corr,
                                   target_norm=math.sqrt(tn2), rank=r, basis=basis if r < d else "identity",
                                   probes=k, solve_residual=rel, solve_iterations=nit, cg_iterations=its,
                                   cg_residual=cg_res, diagonal=dv, basis_vectors=V, core=C)


def _projected_correction(op: _RankOneCurvature, c: np.ndarray, lam: np.ndarray, V: np.ndarray, *, n: int,
                          fb: float, shift: float, q_target: np.ndarray, diag_target: np.ndarray, gsg: Any,
                          jj: Any, solve_tol: float, solve_max_iter: int
                          ) -> tuple[np.ndarray, np.ndarray, float, int]:
    r"""Galerkin solution Δ̂ = diag(d) + VCVᵀ of 𝓛(Δ) = R₀ (see :func:`posterior_covariance_error`).

    ``q_target`` (M,) u_nᵀΣ*u_n, ``diag_target`` (D,) diag Σ*, ``gsg(A)`` = Aᵀ(ΓΣ*Γ/N²)A and
    ``jj(d)`` = (J∘J)d are the target-dependent inputs (probe estimates in the public function,
    exact values in tests). V = I (r = D) drops the separate diagonal. Returns d, C, the
    relative residual of the projected system and the GMRES iterations.
    """
    import scipy.sparse.linalg as spla

    U, w, g, m = op.U, op.w, op.g, op.m
    d, r = V.shape
    with_diag = r < d
    jd = op.sq_tmul(w) / m
    h = jd + g
    lh = lam * h
    w2 = w * w
    HV = op.h_mul(V)
    JV = HV - g[:, None] * V
    LV = lam[:, None] * V
    HLV = op.h_mul(LV)
    JLV = HLV - g[:, None] * LV
    UV = op.rows_mul(V)
    ULV = op.rows_mul(LV)
    GV = HLV.T @ V  # VᵀΛHV
    JLVtV = JLV.T @ V
    Fr = np.eye(r) - GV

    def apply(dv: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(diag 𝓛(X), Vᵀ𝓛(X)V) for X = diag(dv) + VCVᵀ."""
        HVC, UVC, JVC = HV @ C, UV @ C, JV @ C
        q = np.sum(UVC * UV, axis=1)  # u_nᵀXu_n
        core = GV @ C + C @ GV.T - GV @ C @ GV.T  # Vᵀ(X − FXFᵀ)V for the VCVᵀ part: C − F_r C F_rᵀ
        if with_diag:
            jjd = jj(dv)
            q = q + op.sq_mul(dv)
            dg = 2.0 * lam * (h * dv + np.sum(HVC * V, axis=1)) - lam**2 * (
                jjd + (2.0 * g * jd + g * g) * dv + np.sum(HVC * HV, axis=1)
                + fb * (op.sq_tmul(w2 * q) / m - jjd - np.sum(JVC * JV, axis=1)))
            A = HLV.T @ (dv[:, None] * V)
            core = core + A + A.T - HLV.T @ (dv[:, None] * HLV) + fb * (JLV.T @ (dv[:, None] * JLV))
        else:
            dg = np.zeros(0)
        core = core - fb * (ULV.T @ ((w2 * q)[:, None] * ULV) / m - JLVtV @ C @ JLVtV.T)
        return dg, 0.5 * (core + core.T)

    # right-hand side: diag R₀ and VᵀR₀V, R₀ = Λ(C̄(Σ*) + H/N)Λ − 2(1/N − 1/β)Λ,
    # C̄(Σ*) = (f/B)[Uᵀdiag(c² + w²q*)U/M − ḡḡᵀ − (J − Γ/N)/N − ΓΣ*Γ/N²]
    gbar = U.T @ c / m
    a_n = c * c + w2 * q_target
    gLV = gbar @ LV
    core_rhs = fb * (ULV.T @ (a_n[:, None] * ULV) / m - np.outer(gLV, gLV) - LV.T @ (JLV - g[:, None] * LV) / n
                     - gsg(LV)) + LV.T @ HLV / n - 2.0 * (1.0 / n - shift) * (V.T @ LV)
    core_rhs = 0.5 * (core_rhs + core_rhs.T)
    if with_diag:
        diag_rhs = lam**2 * (fb * (op.sq_tmul(a_n) / m - gbar**2 - (jd - g) / n - g * g * diag_target) + h / n) \
            - 2.0 * (1.0 / n - shift) * lam
    else:
        diag_rhs = np.zeros(0)
    nd = diag_rhs.shape[0]
    pd = (2.0 * lh - lh * lh)[:nd]  # diagonal of Δ − FΔFᵀ for a diagonal Δ (> 0 when λ_i H_ii < 2)

    def matvec(x: np.ndarray) -> np.ndarray:
        C = x[nd:].reshape(r, r)
        dg, core = apply(x[:nd], 0.5 * (C + C.T))
        return np.concatenate([dg, core.ravel()])

    def precond(x: np.ndarray) -> np.ndarray:  # the diagonal and the projected Stein solve
        Y = x[nd:].reshape(r, r)
        Cs = sla.solve_discrete_lyapunov(Fr, 0.5 * (Y + Y.T), method="bilinear")
        return np.concatenate([x[:nd] / pd, Cs.ravel()])

    size = nd + r * r
    rhs = np.concatenate([diag_rhs, core_rhs.ravel()])
    nrhs = float(np.linalg.norm(rhs))
    count = [0]

    def counted(x: np.ndarray) -> np.ndarray:
        count[0] += 1
        return matvec(x)

    if nrhs == 0:
        return np.zeros(d), np.zeros((r, r)), 0.0, 0
    A_op = spla.LinearOperator((size, size), matvec=counted, dtype=float)
    M_op = spla.LinearOperator((size, size), matvec=precond, dtype=float)
    restart = min(size, 60)
    sol, _ = spla.gmres(A_op, rhs, M=M_op, rtol=solve_tol, atol=0.0, restart=restart,
                        maxiter=max(1, solve_max_iter // restart))
    rel = float(np.linalg.norm(matvec(sol) - rhs) / nrhs)
    if not rel <= max(10 * solve_tol, 1e-6):
        raise ConvergenceError(f"posterior_covariance_error: the projected stationary equation reached relative "
                               f"residual {rel:.2e} > {solve_tol:g} after {count[0]} GMRES iterations; the chain is "
                               "probably close to unstable — reduce the step sizes", residual=rel, method="gmres")
    dv = sol[:nd] if with_diag else np.zeros(d)
    C = sol[nd:].reshape(r, r)
    return dv, 0.5 * (C + C.T), rel, count[0]


def _diag_block(op: _RankOneCurvature, lam: np.ndarray, fb: float, jj: Any) -> Any:
    """d ↦ diag 𝓛(diag d) = 2λ∘h∘d − λ²∘[(H∘H)d + (f/B)((U∘U)ᵀ(w²∘(U∘U)d)/M − (J∘J)d)], (J∘J)d by ``jj``."""
    g, w2 = op.g, op.w * op.w
    jd = op.sq_tmul(op.w) / op.m
    h = jd + g

    def apply(dv: np.ndarray) -> np.ndarray:
        jjd = jj(dv)
        return 2.0 * lam * h * dv - lam**2 * (jjd + (2.0 * g * jd + g * g) * dv
                                               + fb * (op.sq_tmul(w2 * op.sq_mul(dv)) / op.m - jjd))

    return apply


def _target_moments(op: _RankOneCurvature, c: np.ndarray, lam: np.ndarray, S: np.ndarray, *, n: int, fb: float,
                    shift: float) -> dict[str, Any]:
    r"""Probe estimates of the moments of the bordered system for Δ̂ = diag(d) + αΣ* (all unbiased).

    With s_j ~ N(0, Σ*) (columns of ``S``, split in two independent halves a, b where a product
    of two estimates is needed), q_n = u_nᵀΣ*u_n, q'_n = u_nᵀΛΣ*Λu_n, 𝓛* the adjoint of 𝓛:

    - ``r_d``  = diag R₀ = λ²∘(diag C̄(Σ*) + h/N) − 2(1/N − 1/β)λ;
    - ``delta`` = diag 𝓛(Σ*) = 2λ/N − λ²∘h/N − λ²∘diag 𝒩(Σ*)  (HΣ* = I/N);
    - ``kappa`` = diag 𝓛*(Σ*) = 2 diag(HΛΣ*) − diag(HΛΣ*ΛH) − diag 𝒩(ΛΣ*Λ);
    - ``m11``  = ⟨Σ*, 𝓛(Σ*)⟩ = 2tr(ΛΣ*)/N − tr(Σ*ΛHΛ)/N − ⟨ΛΣ*Λ, 𝒩(Σ*)⟩;
    - ``rho``  = ⟨Σ*, R₀⟩ = ⟨ΛΣ*Λ, C̄(Σ*)⟩ + tr(Σ*ΛHΛ)/N − 2(1/N − 1/β)tr(ΛΣ*);

    𝒩(X) = (f/B)(Uᵀdiag(w²∘q_X)U/M − JXJ), ⟨ΛΣ*Λ, mean_n J_nΣ*J_n⟩ = mean_n w_n²q_nq'_n (halves a×b),
    tr(ΛΣ*ΛJΣ*J) = E(s_bᵀΛJs_a)² (pairs across halves), diag(JΣ*J) = diag(J − Γ/N)/N + g²∘diag Σ*.
    """
    U, w, g, m = op.U, op.w, op.g, op.m
    k = S.shape[1]
    half = k // 2
    w2 = w * w
    jd = op.sq_tmul(w) / m
    h = jd + g
    gbar = U.T @ c / m
    cb = 1.0 / n - shift
    LS = lam[:, None] * S
    US, ULS = op.rows_mul(S), op.rows_mul(LS)
    HLS = op.h_mul(LS)
    JLS = HLS - g[:, None] * LS
    JS = op.j_mul(S)
    q = np.mean(US * US, axis=1)
    qa, qb = np.mean(US[:, :half] ** 2, axis=1), np.mean(US[:, half:] ** 2, axis=1)
    qp = np.mean(ULS * ULS, axis=1)
    qpa, qpb = np.mean(ULS[:, :half] ** 2, axis=1), np.mean(ULS[:, half:] ** 2, axis=1)
    dsig = np.mean(S * S, axis=1)
    # diag 𝒩(Σ*) and diag C̄(Σ*)
    n_sig = fb * (op.sq_tmul(w2 * q) / m - (jd - g) / n - g * g * dsig)
    cbar_d = fb * (op.sq_tmul(c * c) / m - gbar**2) + n_sig
    r_d = lam**2 * (cbar_d + h / n) - 2.0 * cb * lam
    delta = 2.0 * lam / n - lam**2 * h / n - lam**2 * n_sig
    kappa = 2.0 * np.mean(HLS * S, axis=1) - np.mean(HLS * HLS, axis=1) \
        - fb * (op.sq_tmul(w2 * qp) / m - np.mean(JLS * JLS, axis=1))
    tr_ls = float(lam @ dsig)  # tr(ΛΣ*)
    tr_lhl = float(np.mean(np.sum(LS * HLS, axis=0)))  # tr(Σ*ΛHΛ)
    wqq = float(np.mean(w2 * 0.5 * (qa * qpb + qb * qpa)))  # mean_n w_n² q_n q'_n
    P = LS[:, half:].T @ JS[:, :half]  # s_bᵀΛJs_a
    tr_cross = float(np.mean(P * P))  # tr(ΛΣ*ΛJΣ*J)
    n_inner = fb * (wqq - tr_cross)  # ⟨ΛΣ*Λ, 𝒩(Σ*)⟩
    m11 = 2.0 * tr_ls / n - tr_lhl / n - n_inner
    gls = gbar @ LS
    cbar_inner = fb * (float(np.mean(c * c * qp)) - float(np.mean(gls * gls))) + n_inner
    rho = cbar_inner + tr_lhl / n - 2.0 * cb * tr_ls
    return {"r_d": r_d, "delta": delta, "kappa": kappa, "m11": m11, "rho": rho}


def _bordered_solve(diag_block: Any, pd: np.ndarray, mom: dict[str, Any], tol: float,
                    max_iter: int) -> tuple[np.ndarray, float, float, int]:
    """Galerkin system for Δ̂ = diag(d) + αΣ*: [A_d δ; κᵀ m11][d; α] = [r_d; ρ] by preconditioned GMRES."""
    import scipy.sparse.linalg as spla

    delta, kappa, m11 = mom["delta"], mom["kappa"], float(mom["m11"])
    d = delta.shape[0]
    rhs = np.concatenate([mom["r_d"], [mom["rho"]]])
    count = [0]

    def matvec(x: np.ndarray) -> np.ndarray:
        count[0] += 1
        return np.concatenate([diag_block(x[:d]) + x[d] * delta, [kappa @ x[:d] + m11 * x[d]]])

    def precond(x: np.ndarray) -> np.ndarray:
        return np.concatenate([x[:d] / pd, [x[d] / m11 if m11 != 0 else x[d]]])

    nrhs = float(np.linalg.norm(rhs))
    if nrhs == 0:
        return np.zeros(d), 0.0, 0.0, 0
    A = spla.LinearOperator((d + 1, d + 1), matvec=matvec, dtype=float)
    M = spla.LinearOperator((d + 1, d + 1), matvec=precond, dtype=float)
    restart = min(d + 1, 60)
    sol, _ = spla.gmres(A, rhs, M=M, rtol=tol, atol=0.0, restart=restart, maxiter=max(1, max_iter // restart))
    rel = float(np.linalg.norm(matvec(sol) - rhs) / nrhs)
    if not rel <= max(10 * tol, 1e-6):
        raise ConvergenceError(f"posterior_covariance_error: the projected stationary equation reached relative "
                               f"residual {rel:.2e} > {tol:g} after {count[0]} GMRES iterations; the chain is "
                               "probably close to unstable — reduce the step sizes", residual=rel, method="gmres")
    return sol[:d], float(sol[d]), rel, count[0]


def _pair_norm2(S: np.ndarray, off_diagonal: bool = False) -> float:
    """‖Σ*‖²_F = E(s_aᵀs_b)² for independent s_a, s_b ~ N(0, Σ*): the mean over the pairs across two halves;
    ``off_diagonal``: ‖Σ* − diag Σ*‖²_F = E[(s_aᵀs_b)² − Σ_i s_ai²s_bi²] (both unbiased)."""
    half = S.shape[1] // 2
    A, B = S[:, :half], S[:, half:]
    P = A.T @ B
    out = float(np.mean(P * P))
    if off_diagonal:
        out -= float(np.mean((A * A).T @ (B * B)))
    return out
