"""SG Euler–Maruyama for generalised non-reversible Langevin dynamics on a BLR posterior, on the chain engine.

The GNLD paper (anonymous, 2025), Eq. (2.8): for an augmented state z ∈ R^n whose first p coordinates are
the shifted regression coefficients x = θ − θ̄ (θ̄ the posterior mean) and H(z) = ½zᵀMz,

    z_{k+1} = z_k − η (D + Q) ĝ_k + sqrt(η) L ξ_k,      L Lᵀ = 2D,

where ĝ_k = M z_k except on the first p coordinates, which carry the minibatch gradient of
the BLR posterior potential U(θ) = Σ_i (y_i − x_iᵀθ)²/(2s²) + ½θᵀΓθ at θ = θ̄ + x:
(N/B) Σ_{b≤B} x̃_{i_b}(x̃_{i_b}ᵀθ − ỹ_{i_b}) + Γθ (+ M_xv z_v), indices drawn uniformly with
replacement (Eq. (6.3); x̃ = x/s, ỹ = y/s). With ``batch_size = 0`` the exact gradient M z is used.

This is a chain of the engine (:mod:`sgtune.sampler.engine`): the batch schedule ``replacement`` (or
``none``), the gradient oracle :func:`gnld_grad`, the step rule of SG(L)D with the dense, non-symmetric
"step matrix" Λ = η(D + Q) and noise factor sqrt(η) L (κ = 0, s_t = 1), and the recorder's linear
observable: each replica's time average (1/K) Σ_{k=1}^{K} ℓᵀz_k. Every replica draws from its own
xoshiro256++ stream (:mod:`sgtune.sampler.rng`), so results do not depend on the number of threads.
(Until 0.1.0 this module had its own kernel on NumPy generators, averaging z_0..z_{K−1}; with a stationary
start both averages have the same law. The tests check the new streams against the exact finite-η
variance of the time average.)
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..core._refs import cites
from ..core._validation import as_float_array, as_spd, as_square, as_vector, check_int, check_positive
from ..core.errors import SgtuneError, ShapeError
from ._jit import component_inline, njit
from .engine import ChainPlan, backend_of, run_plan
from .kernels import BATCH_FNS, sgld_dense_rule
from .rng import chain_states
from .state import LAM_DENSE, Schedule, chain_state, mclmc_state, oracle, recorder, step_params

__all__ = ["GnldRun", "GnldProblem", "run_sg_gnld", "gnld_grad"]


@dataclass(frozen=True, slots=True)
class GnldRun:
    """Result of :func:`run_sg_gnld`.

    Attributes
    ----------
    time_averages : ndarray, (R,)
        (1/K) Σ_{k<K} ℓᵀz_k per replica (z the shifted state, so the target value is 0).
    step_size : float
        η.
    n_steps : int
        K.
    seed : int
        Root seed of the replicas' ``SeedSequence``.
    seconds : float
        Wall-clock time of the kernel call.
    hessian : ndarray
        M of the full state that was simulated.

    Examples
    --------
    >>> import numpy as np
    >>> problem = GnldProblem(np.eye(1), np.zeros((1, 1)), [1.0], hessian=np.eye(1))
    >>> run = run_sg_gnld(problem, 0.1, 100, 4, seed=1)
    >>> run.time_averages.shape, run.step_size, run.n_steps
    ((4,), 0.1, 100)
    """

    time_averages: np.ndarray
    step_size: float
    n_steps: int
    seed: int
    seconds: float
    hessian: np.ndarray = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict."""
        return asdict(self)


@component_inline
def gnld_grad(z, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
    """The engine's gradient oracle of GNLD: ``gnld_gradient`` with M = ``ora.hessian``."""
    gnld_gradient(z, ora.X, ora.y, idx, nb, ora.ints, ora.floats, ora.hessian, st, work, grad)


@njit
def gnld_gradient(z, X, y, idx, nb, ints, floats, mat, st, work, grad):  # type: ignore[no-untyped-def]
    """ĝ = M z (``mat`` = M), with the first p = ``ints[0]`` coordinates replaced by the minibatch BLR gradient
    (N/nb) Σ_b x̃_b(x̃_bᵀθ − ỹ_b) + Γθ + M_xv z_v at θ = θ̄ + z_{:p} when the batch is not empty (``floats`` =
    [θ̄ (p), Γ row by row (p²)]); ``work`` holds θ."""
    n = z.shape[0]
    p = ints[0]
    for a in range(n):
        s = 0.0
        for b in range(n):
            s += mat[a, b] * z[b]
        grad[a] = s
    if nb == 0:
        return
    scale = X.shape[0] / nb
    for a in range(p):
        s = 0.0
        for b in range(p):
            s += mat[a, b] * z[b]
        grad[a] -= s
        work[a] = floats[a] + z[a]
    for a in range(p):
        s = 0.0
        for b in range(p):
            s += floats[p + a * p + b] * work[b]
        grad[a] += s
    for k in range(nb):
        i = idx[k]
        r = -y[i]
        for a in range(p):
            r += X[i, a] * work[a]
        for a in range(p):
            grad[a] += scale * r * X[i, a]


def _blr_oracle(design: Any, response: Any, bsz: int, noise_variance: float, prior_precision: Any, hessian: Any,
                n: int) -> tuple[np.ndarray, ...]:
    """The minibatch oracle of Bayesian linear regression (eq. (6.3)): M (its BLR block the posterior precision), the
    scaled design and response, the prior precision and the posterior mean (the centre of the coordinates)."""
    from ..theory.fluctuation import blr_gradient_noise_moments

    if bsz < 1:
        raise SgtuneError("batch_size must be >= 1 when design is given (0 = exact gradient "
                          "only without data)")
    mom = blr_gradient_noise_moments(design, response, bsz, noise_variance=noise_variance,
                                     prior_precision=prior_precision)
    a = mom["precision"]
    p = a.shape[0]
    if p > n:
        raise ShapeError(f"state dimension n = {n} is smaller than the number of coefficients p = {p}")
    if hessian is None:
        m = np.eye(n)
        m[:p, :p] = a
    else:
        m = as_spd(hessian, "hessian", n)
        if not np.allclose(m[:p, :p], a, rtol=1e-10, atol=1e-12 * float(np.abs(a).max())):
            raise ShapeError("hessian[:p, :p] must equal the BLR posterior precision "
                             "X^T X / s2 + prior_precision; omit hessian to build it")
    xs = np.ascontiguousarray(mom["scaled_design"])
    ys = np.ascontiguousarray(as_vector(response, "response") / np.sqrt(noise_variance))
    prior = np.zeros((p, p)) if prior_precision is None else as_square(prior_precision, "prior_precision", p)
    return m, xs, ys, prior, mom["posterior_mean"]


def _initial_states(init: Any, reps: int, n: int) -> np.ndarray:
    """The replicas' initial states (R, n): 0, one vector for all, or one row each."""
    if init is None:
        return np.zeros((reps, n))
    z0 = as_float_array(init, "init")
    if z0.ndim == 1:
        z0 = np.broadcast_to(as_vector(z0, "init", n), (reps, n))
    if z0.shape != (reps, n):
        raise ShapeError(f"init must be (n_replicas, n) = ({reps}, {n}) but has shape {z0.shape}")
    return np.ascontiguousarray(z0, dtype=np.float64)


def _antisymmetric(value: Any, name: str, size: int) -> np.ndarray:
    """Q as a (n, n) antisymmetric array (Qᵀ = −Q to rounding), else a NotAntisymmetricError naming ``name``."""
    from ..theory.fluctuation import NotAntisymmetricError

    q = as_square(value, name, size)
    norm = np.linalg.norm(q, 1)
    err = np.linalg.norm(q + q.T, 1)
    if err > 100 * np.spacing(max(norm, 1e-300)) and err > 0:
        raise NotAntisymmetricError(
            f"{name} must be antisymmetric (Q^T = -Q) but ||Q+Q^T||_1/||Q||_1 = "
            f"{err / max(norm, 1e-300):.3g}; pass (Q - Q.T)/2, and put any symmetric part into the diffusion")
    return 0.5 * (q - q.T)


@dataclass(frozen=True)
class GnldProblem:
    """The GNLD problem of :func:`run_sg_gnld`: the dynamics' D and Q, the observable ℓ and the potential.

    Parameters
    ----------
    diffusion : array_like, (n, n)
        D, symmetric positive definite.
    antisymmetric : array_like, (n, n)
        Q, antisymmetric.
    observable : array_like, (n,)
        The observable ℓ.
    hessian : array_like, (n, n), optional
        M. Required without ``design``; with ``design`` it defaults to blockdiag(A, I) where
        A = X̃ᵀX̃ + Γ is the BLR posterior precision (n = p gives M = A), and if given its
        (p, p) block must equal A.
    design, response : array_like, optional
        BLR data X (N×p), y (N).
    noise_variance : float, optional
        The noise variance s² of the regression model.
    prior_precision : array_like, (p, p), optional
        Γ (default 0).

    Examples
    --------
    >>> import numpy as np
    >>> GnldProblem(np.eye(1), np.zeros((1, 1)), [1.0], hessian=np.eye(1)).noise_variance
    1.0
    """

    diffusion: Any
    antisymmetric: Any
    observable: Any
    hessian: Any = None
    design: Any = None
    response: Any = None
    noise_variance: float = 1.0
    prior_precision: Any = None


class GnldSystem(NamedTuple):
    """The validated arrays of a :class:`GnldProblem`: the drift D + Q, the noise factor L (LLᵀ = 2D), M, the
    scaled design and response (one-row placeholders without data), the prior Γ, the centre θ̄ and ℓ."""

    drift: np.ndarray
    noise_factor: np.ndarray
    hessian: np.ndarray
    xs: np.ndarray
    ys: np.ndarray
    prior: np.ndarray
    center: np.ndarray
    observable: np.ndarray


def gnld_system(problem: GnldProblem, batch_size: int) -> tuple[GnldSystem, int]:
    """Validate ``problem`` into its :class:`GnldSystem` and the batch size used (0: the exact gradient)."""
    dmat = as_spd(problem.diffusion, "diffusion")
    n = dmat.shape[0]
    qmat = _antisymmetric(problem.antisymmetric, "antisymmetric", n)
    ell = as_vector(problem.observable, "observable", n)
    bsz = check_int(batch_size, "batch_size", low=0)
    if problem.design is None:
        if problem.hessian is None:
            raise SgtuneError("hessian is required when no design (data) is given")
        m = as_spd(problem.hessian, "hessian", n)
        xs, ys, prior, center, bsz = np.zeros((1, 1)), np.zeros(1), np.zeros((1, 1)), np.zeros(1), 0
    else:
        m, xs, ys, prior, center = _blr_oracle(problem.design, problem.response, bsz, problem.noise_variance,
                                               problem.prior_precision, problem.hessian, n)
    system = GnldSystem(drift=np.ascontiguousarray(dmat + qmat), noise_factor=np.linalg.cholesky(2.0 * dmat),
                        hessian=np.ascontiguousarray(m), xs=xs, ys=ys, prior=np.ascontiguousarray(prior),
                        center=np.ascontiguousarray(center), observable=ell)
    return system, bsz


def gnld_plan(system: GnldSystem, step_size: float, n_steps: int, batch_size: int, init: np.ndarray,
              seed: int) -> ChainPlan:
    """The engine's plan of R replicas (one per row of ``init``)."""
    reps, n = init.shape
    p = system.xs.shape[1]
    state = chain_state(init, chain_states(seed, reps))
    params = step_params(lam=step_size * system.drift, fac=np.sqrt(step_size) * system.noise_factor,
                         step=float(step_size))
    floats = np.concatenate([system.center, system.prior.reshape(-1)]).astype(np.float64)
    ora = oracle(X=system.xs, y=system.ys, ints=np.array([p if batch_size > 0 else 0], dtype=np.int64),
                 floats=floats, hessian=system.hessian, work_len=max(p, 1))
    rec = recorder(reps, n, segments=1, seg_len=int(n_steps), observables=system.observable[None, :])
    batching = "replacement" if batch_size > 0 else "none"
    return ChainPlan(sampler="gnld", lam_kind=LAM_DENSE, batching=batching, oracle_kind="gnld",
                     batch_fn=BATCH_FNS[batching], grad_fn=gnld_grad, rule_fn=sgld_dense_rule, move_fn=None,
                     state=state, oracle=ora, sched=Schedule(batch_size=int(max(batch_size, 1)), decay=0.0),
                     params=params, mclmc=mclmc_state(reps), recorder=lambda last: rec._replace(flush=bool(last)),
                     burn_in=0, n_steps=int(n_steps))


@cites("gnld2025", "SG Euler-Maruyama scheme (2.8); minibatch oracle (6.3)")
def run_sg_gnld(problem: GnldProblem, step_size: float, n_steps: int, n_replicas: int, *removed: Any,
                batch_size: int = 0, init: Any | None = None, seed: int = 0, backend: Any = "numba",
                **removed_keywords: Any) -> GnldRun:
    r"""R replicas of z_{k+1} = z_k − η(D+Q)ĝ_k + sqrt(η)Lξ_k (LLᵀ = 2D) and their (1/K)Σ_{k=1}^{K} ℓᵀz_k.

    The GNLD paper (anonymous, 2025), Eq. (2.8).

    Parameters
    ----------
    problem : GnldProblem
        D, Q, the observable ℓ and the potential (a quadratic M, or BLR data).
    step_size : float
        The step η > 0.
    n_steps : int
        The steps K ≥ 1.
    n_replicas : int
        The replicas R ≥ 1.
    *removed
        Not accepted: the form of 0.1, ``run_sg_gnld(diffusion, antisymmetric, observable, step_size,
        n_steps, n_replicas, hessian=…, …)``, raises a ``TypeError`` naming :class:`GnldProblem`.
    batch_size : int, optional
        B (≥ 1 with ``design``); 0 means the exact gradient Mz.
    init : array_like, (R, n) or (n,), optional
        Initial shifted states (default 0, i.e. the posterior mean and v = 0).
    seed : int, optional
        Root seed; replica r uses the stream ``SeedSequence(seed).spawn(R)[r]`` (:mod:`sgtune.sampler.rng`).
    backend : "numba" or a backend object, optional
        A backend of the engine's seam (:mod:`sgtune.sampler.engine`); the tests pass their pure-Python
        reference implementation.
    **removed_keywords
        Not accepted: the keywords of the form of 0.1 that are now fields of :class:`GnldProblem`
        (``hessian=…``, ``design=…``, …) raise the same ``TypeError``.

    Returns
    -------
    GnldRun
        Time averages per replica and provenance.

    Raises
    ------
    SgtuneError
        Invalid arguments (shapes, non-SPD D, non-antisymmetric Q, mismatching hessian).

    Examples
    --------
    >>> import numpy as np
    >>> problem = GnldProblem(np.eye(1), np.zeros((1, 1)), [1.0], hessian=np.eye(1))
    >>> run = run_sg_gnld(problem, 0.1, 100, 4, seed=1)
    >>> run.time_averages.shape
    (4,)
    """
    if removed or removed_keywords or not isinstance(problem, GnldProblem):
        raise TypeError("run_sg_gnld(diffusion, antisymmetric, observable, step_size, n_steps, n_replicas, hessian=…, "
                        "…) is the form of 0.1, removed in 0.2.0: use run_sg_gnld(GnldProblem(diffusion, antisymmetric, "
                        "observable, hessian=…, design=…, …), step_size, n_steps, n_replicas, batch_size=…, seed=…)")
    system, bsz = gnld_system(problem, batch_size)
    eta = check_positive(step_size, "step_size")
    kk = check_int(n_steps, "n_steps", low=1)
    reps = check_int(n_replicas, "n_replicas", low=1)
    z0 = _initial_states(init, reps, system.drift.shape[0])
    plan = gnld_plan(system, eta, kk, bsz, z0, int(seed))
    t0 = time.perf_counter()
    run_plan(plan, backend_of(backend, "GNLD"), None)
    out = plan.recorder(True).obs_sum[:, 0] / kk
    return GnldRun(time_averages=out, step_size=eta, n_steps=kk, seed=int(seed),
                   seconds=time.perf_counter() - t0, hessian=system.hessian)
