"""SG Euler–Maruyama for generalised non-reversible Langevin dynamics on a BLR posterior (seed 004, Eq. (2.8)).

Scheme, for an augmented state z ∈ R^n whose first p coordinates are the shifted regression
coefficients x = θ − θ̄ (θ̄ the posterior mean) and H(z) = ½zᵀMz:

    z_{k+1} = z_k − η (D + Q) ĝ_k + sqrt(η) L ξ_k,      L Lᵀ = 2D,

where ĝ_k = M z_k except on the first p coordinates, which carry the minibatch gradient of
the BLR posterior potential U(θ) = Σ_i (y_i − x_iᵀθ)²/(2s²) + ½θᵀΓθ at θ = θ̄ + x:
(N/B) Σ_{b≤B} x̃_{i_b}(x̃_{i_b}ᵀθ − ỹ_{i_b}) + Γθ (+ M_xv z_v), indices drawn uniformly with
replacement (seed 004, Eq. (6.3); x̃ = x/s, ỹ = y/s). With ``batch_size = 0`` the exact gradient
M z is used. The kernel returns, per replica, the time average (1/K) Σ_{k=0}^{K−1} ℓᵀz_k; no
trace is stored.

Randomness: one ``np.random.Generator`` per replica (spawned from a ``SeedSequence``), drawn in
a fixed order per step (B integers, then n standard normals), so results do not depend on the
number of threads. :func:`sg_gnld_time_average_py` is the pure-Python twin used by the tests.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numba import njit, prange
from numba.typed import List

from ..core._refs import cites
from ..core._validation import as_float_array, as_spd, as_square, as_vector, check_int, check_positive
from ..core.errors import SgtuneError, ShapeError

__all__ = [
    "GnldRun",
    "run_sg_gnld",
    "sg_gnld_time_average",
    "sg_gnld_time_average_py",
]


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


@njit(cache=True)
def _one_replica(drift, noise_factor, hessian, xs, ys, prior, center, observable, step_size,
                 n_steps, batch_size, z, znew, grad, xi, theta, gen):  # pragma: no cover - numba
    n = z.shape[0]
    p = xs.shape[1]
    nrows = xs.shape[0]
    sq = np.sqrt(step_size)
    scale = nrows / batch_size if batch_size > 0 else 0.0
    acc = 0.0
    for _k in range(n_steps):
        obs = 0.0
        for a in range(n):
            obs += observable[a] * z[a]
        acc += obs
        for a in range(n):
            s = 0.0
            for b in range(n):
                s += hessian[a, b] * z[b]
            grad[a] = s
        if batch_size > 0:
            for a in range(p):
                s = 0.0
                for b in range(p):
                    s += hessian[a, b] * z[b]
                grad[a] -= s
                theta[a] = center[a] + z[a]
            for a in range(p):
                s = 0.0
                for b in range(p):
                    s += prior[a, b] * theta[b]
                grad[a] += s
            for _b in range(batch_size):
                i = gen.integers(0, nrows)
                r = -ys[i]
                for a in range(p):
                    r += xs[i, a] * theta[a]
                for a in range(p):
                    grad[a] += scale * r * xs[i, a]
        for a in range(n):
            xi[a] = gen.standard_normal()
        for a in range(n):
            s = 0.0
            t = 0.0
            for b in range(n):
                s += drift[a, b] * grad[b]
                t += noise_factor[a, b] * xi[b]
            znew[a] = z[a] - step_size * s + sq * t
        for a in range(n):
            z[a] = znew[a]
    return acc / n_steps


@njit(parallel=True, cache=True)
def sg_gnld_time_average(drift, noise_factor, hessian, xs, ys, prior, center, observable,
                         step_size, n_steps, batch_size, init, gens):  # pragma: no cover - numba
    """Numba kernel: per-replica time averages of ℓᵀz for the SG-EM GNLD chain (see module doc)."""
    n_rep = init.shape[0]
    n = init.shape[1]
    p = xs.shape[1]
    out = np.empty(n_rep)
    for r in prange(n_rep):
        ri = np.int64(r)
        z = init[ri].copy()
        znew = np.empty(n)
        grad = np.empty(n)
        xi = np.empty(n)
        theta = np.empty(p)
        out[ri] = _one_replica(drift, noise_factor, hessian, xs, ys, prior, center, observable,
                               step_size, n_steps, batch_size, z, znew, grad, xi, theta, gens[ri])
    return out


def sg_gnld_time_average_py(drift, noise_factor, hessian, xs, ys, prior, center, observable,
                            step_size, n_steps, batch_size, init, gens):  # type: ignore[no-untyped-def]
    """Pure-Python twin of :func:`sg_gnld_time_average` (same arithmetic order and draws)."""
    n_rep, n = init.shape
    p = xs.shape[1]
    nrows = xs.shape[0]
    out = np.empty(n_rep)
    sq = np.sqrt(step_size)
    scale = nrows / batch_size if batch_size > 0 else 0.0
    for r in range(n_rep):
        gen = gens[r]
        z = [float(v) for v in init[r]]
        acc = 0.0
        for _k in range(n_steps):
            obs = 0.0
            for a in range(n):
                obs += observable[a] * z[a]
            acc += obs
            grad = [0.0] * n
            for a in range(n):
                s = 0.0
                for b in range(n):
                    s += hessian[a, b] * z[b]
                grad[a] = s
            if batch_size > 0:
                theta = [0.0] * p
                for a in range(p):
                    s = 0.0
                    for b in range(p):
                        s += hessian[a, b] * z[b]
                    grad[a] -= s
                    theta[a] = center[a] + z[a]
                for a in range(p):
                    s = 0.0
                    for b in range(p):
                        s += prior[a, b] * theta[b]
                    grad[a] += s
                for _b in range(batch_size):
                    i = int(gen.integers(0, nrows))
                    rr = -ys[i]
                    for a in range(p):
                        rr += xs[i, a] * theta[a]
                    for a in range(p):
                        grad[a] += scale * rr * xs[i, a]
            xi = [float(gen.standard_normal()) for _ in range(n)]
            new = [0.0] * n
            for a in range(n):
                s = 0.0
                t = 0.0
                for b in range(n):
                    s += drift[a, b] * grad[b]
                    t += noise_factor[a, b] * xi[b]
                new[a] = z[a] - step_size * s + sq * t
            z = new
        out[r] = acc / n_steps
    return out


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


@cites("gnld2025", "SG Euler-Maruyama scheme (2.8); minibatch oracle (6.3)")
def run_sg_gnld(diffusion: Any, antisymmetric: Any, observable: Any, step_size: float,
                n_steps: int, n_replicas: int, *, hessian: Any | None = None,
                design: Any | None = None, response: Any | None = None,
                batch_size: int = 0, noise_variance: float = 1.0,
                prior_precision: Any | None = None, init: Any | None = None,
                seed: int = 0, python: bool = False) -> GnldRun:
    r"""Run R replicas of z_{k+1} = z_k − η(D+Q)ĝ_k + sqrt(2η)D^{1/2}ξ_k and return (1/K)Σℓᵀz_k (seed 004, Eq. (2.8)).

    Parameters
    ----------
    diffusion : array_like, (n, n)
        D, symmetric positive definite.
    antisymmetric : array_like, (n, n)
        Q, antisymmetric.
    observable : array_like, (n,)
        ℓ.
    step_size : float
        η > 0.
    n_steps : int
        K ≥ 1.
    n_replicas : int
        R ≥ 1.
    hessian : array_like, (n, n), optional
        M. Required without ``design``; with ``design`` it defaults to blockdiag(A, I) where
        A = X̃ᵀX̃ + Γ is the BLR posterior precision (n = p gives M = A), and if given its
        (p, p) block must equal A.
    design, response : array_like, optional
        BLR data X (N×p), y (N).
    batch_size : int, optional
        B (≥ 1 with ``design``); 0 means the exact gradient Mz.
    noise_variance : float, optional
        s² of the regression model.
    prior_precision : array_like, (p, p), optional
        Γ (default 0).
    init : array_like, (R, n) or (n,), optional
        Initial shifted states (default 0, i.e. the posterior mean and v = 0).
    seed : int, optional
        Root seed; replica r uses ``default_rng(SeedSequence(seed).spawn(R)[r])``.
    python : bool, optional
        Use the pure-Python twin (slow; for tests).

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
    >>> run = run_sg_gnld(np.eye(1), np.zeros((1, 1)), [1.0], 0.1, 100, 4, hessian=np.eye(1), seed=1)
    >>> run.time_averages.shape
    (4,)
    """
    from ..theory.fluctuation import blr_gradient_noise_moments

    dmat = as_spd(diffusion, "diffusion")
    n = dmat.shape[0]
    qmat = _antisymmetric(antisymmetric, "antisymmetric", n)
    ell = as_vector(observable, "observable", n)
    eta = check_positive(step_size, "step_size")
    kk = check_int(n_steps, "n_steps", low=1)
    reps = check_int(n_replicas, "n_replicas", low=1)
    bsz = check_int(batch_size, "batch_size", low=0)
    if design is None:
        if hessian is None:
            raise SgtuneError("hessian is required when no design (data) is given")
        m = as_spd(hessian, "hessian", n)
        xs = np.zeros((1, 1))
        ys = np.zeros(1)
        prior = np.zeros((1, 1))
        center = np.zeros(1)
        bsz = 0
    else:
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
        center = mom["posterior_mean"]
    if init is None:
        z0 = np.zeros((reps, n))
    else:
        z0 = as_float_array(init, "init")
        if z0.ndim == 1:
            z0 = np.broadcast_to(as_vector(z0, "init", n), (reps, n))
        if z0.shape != (reps, n):
            raise ShapeError(f"init must be (n_replicas, n) = ({reps}, {n}) but has shape {z0.shape}")
        z0 = np.ascontiguousarray(z0, dtype=np.float64)
    noise_factor = np.linalg.cholesky(2.0 * dmat)
    drift = np.ascontiguousarray(dmat + qmat)
    children = np.random.SeedSequence(seed).spawn(reps)
    gens_py = [np.random.default_rng(c) for c in children]
    args = (drift, noise_factor, np.ascontiguousarray(m), xs, ys, np.ascontiguousarray(prior),
            np.ascontiguousarray(center), ell, eta, kk, bsz, z0)
    t0 = time.perf_counter()
    if python:
        out = sg_gnld_time_average_py(*args, gens_py)
    else:
        out = sg_gnld_time_average(*args, List(gens_py))
    return GnldRun(time_averages=np.asarray(out), step_size=eta, n_steps=kk, seed=int(seed),
                   seconds=time.perf_counter() - t0, hessian=m)
