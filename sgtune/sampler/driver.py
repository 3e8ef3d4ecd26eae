"""Python driver for the SG-MCMC kernels: validate once, run in chunks, summarise.

:func:`run_chains` runs chains of a model (a GLM, an MLP or any protocol model) on a data set,
:func:`run_quadratic_chains` chains on a quadratic potential with synthetic gradient noise (for
theory checks). Both return a frozen :class:`ChainResult` with pooled moments, batch-means
standard errors and ESS.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from ..core._refs import cites
from ..core._validation import (as_float_array, as_spd, as_square, as_vector, available_memory, check_int,
                                check_positive, format_bytes)
from ..io.data import Dataset, make_dataset
from ..core.errors import (ConvergenceError, InsufficientMemoryError, NotPositiveDefiniteError, SgtuneError, ShapeError,
                           UnstableStepSizeError)
from ..models import fit_map, get_model, prior_matrix
from ..models.base import model_label
from scipy.special import ndtri

from . import grads, kernels, smile_chain
from .kernels import BATCH_FNS, BATCHINGS, COV_BLOCK, LAM_DENSE, LAM_DIAG, step_fn_for
from .rng import chain_states
from .smile import check_tuner_settings
from .smile_chain import MCLMC_SAMPLERS
from .specs import ORACLES, numba_spec_of

__all__ = ["ChainResult", "run_chains", "run_quadratic_chains", "SAMPLERS", "BATCHINGS", "parameter_dim"]

ProgressCallback = Callable[[int, int], None]

#: every sampler of :func:`run_chains`: the SG(L)D family and SGHMC (:mod:`.kernels`), then the MCLMC
#: samplers (:mod:`.smile_chain`)
SAMPLERS: tuple[str, ...] = kernels.SAMPLERS + tuple(MCLMC_SAMPLERS)
#: samplers that sample exp(log p_β) with their own velocity and take a scalar step size
DYNAMICS_SAMPLERS: tuple[str, ...] = ("sghmc", *MCLMC_SAMPLERS)


@dataclass(frozen=True)
class ChainResult:
    """Summary of C chains after burn-in (shapes use D = dimension, C = chains).

    Attributes
    ----------
    mean, cov : (D,), (D, D)
        Pooled over the non-diverged chains after burn-in (cov divides by the count).
    mean_standard_error, cov_standard_error : (D,), (D, D)
        Batch-means Monte Carlo standard errors (K batches = segments of the chains).
    ess : (D,)
        Effective sample size per coordinate, Var(θ_i) / MCSE(mean_i)².
    n_batches : int
        K, the number of batches behind the standard errors (z-scores are t_{K−1}).
    chain_means, chain_covs : (C, D), (C, D, D)
        Per-chain moments (NaN rows for diverged chains).
    batch_covs : (K, D, D)
        Per-batch second moments about the pooled mean (their average is ``cov``).
    trace : (C, T', D) or None
        Thinned draws after burn-in (``thin`` > 0).
    observable_means : (C, K_obs) or None
        Per-chain time averages of the linear observables ℓ_kᵀθ.
    epoch_position_mean, epoch_position_var : (R, D) or None
        Reshuffling only: moments of θ after k batches of an epoch, k = 0..R−1, pooled over chains.
    diverged_at : (C,) int
        Step at which a chain diverged (non-finite state), −1 if it did not.
    clip_fraction : float
        SGLRW / clipped SGLD: fraction of coordinate updates whose probability/drift was clipped.
    step_size_final : (C,) or None
        MCLMC samplers: ε at the end of each chain (the tuned one for smile/psmile).
    rejection_fraction : (C,) or None
        MCLMC samplers: fraction of steps rejected by the energy-error guardrail (0 untuned).
    energy_error_mean, energy_error_abs_mean, energy_error_var_per_dim : (C,) or None
        MCLMC samplers: mean ΔE, mean |ΔE| and mean ΔE²/D per step (all steps, burn-in included).
    step_size_trace : (C, T') or None
        MCLMC samplers with ``thin``: ε at the draws kept in ``trace``.
    preconditioner, gradient_sd : (C, D) or None
        pSMILE: the final diagonal preconditioner p = √D σ/|σ| and the EMA standard deviation σ of
        the minibatch ∇log p_β (its bias-corrected EMA variance; before ``precond_start`` steps p = 1).
    half_means, half_variances : (C, 2, D) or None
        Each chain's mean and marginal variances over the first and the second half of its kept steps
        (its first and last ⌊S/2⌋ segments; NaN for diverged chains; None with one segment per chain):
        the non-stationarity test of :func:`sgtune.diagnostics.health.chain_health`.
    """

    mean: np.ndarray
    cov: np.ndarray
    mean_standard_error: np.ndarray
    cov_standard_error: np.ndarray
    ess: np.ndarray
    n_batches: int
    chain_means: np.ndarray
    chain_covs: np.ndarray
    batch_covs: np.ndarray
    trace: np.ndarray | None
    observable_means: np.ndarray | None
    epoch_position_mean: np.ndarray | None
    epoch_position_var: np.ndarray | None
    diverged_at: np.ndarray
    clip_fraction: float
    final_state: np.ndarray
    n_steps: int
    burn_in: int
    n_chains: int
    seed: int
    seconds: float
    compile_seconds: float
    settings: dict[str, Any] = field(default_factory=dict)
    step_size_final: np.ndarray | None = None
    rejection_fraction: np.ndarray | None = None
    energy_error_mean: np.ndarray | None = None
    energy_error_abs_mean: np.ndarray | None = None
    energy_error_var_per_dim: np.ndarray | None = None
    step_size_trace: np.ndarray | None = None
    preconditioner: np.ndarray | None = None
    gradient_sd: np.ndarray | None = None
    half_means: np.ndarray | None = None
    half_variances: np.ndarray | None = None

    @property
    def n_diverged(self) -> int:
        return int(np.sum(self.diverged_at >= 0))

    @property
    def iterations_per_second(self) -> float:
        """Chain-iterations per second (C·T / wall time, excluding JIT compilation)."""
        return self.n_chains * self.n_steps / max(self.seconds, 1e-12)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["n_diverged"] = self.n_diverged
        d["iterations_per_second"] = self.iterations_per_second
        return d


# --------------------------------------------------------------------------- public API
@cites("wang2026", "§2.1 (SG(L)D, mean-loss scaling) and eq. (B.1) (momentum)")
@cites("smile2025", "eqs. (1)–(3), Algorithm 1, section 3.2 (pSMILE), appendix F.2 (integrator)")
def run_chains(model: Any, data: Dataset | tuple[Any, Any], step_matrix: Any, *, batch_size: int,
               n_steps: int, n_chains: int = 4, burn_in: int | None = None, prior_precision: Any = 0.0,
               initial: Any = None, inv_temperature: float | None = None, momentum: float = 0.0,
               sampler: str = "sgld", batching: str = "replacement", decay: float = 0.0, thin: int = 0,
               observables: Any = None, epoch_moments: bool = False, batches_per_chain: int | None = None,
               seed: int = 0, progress: ProgressCallback | None = None, backend: str = "numba",
               noise_variance: float = 1.0, beta_power: float | None = None, friction: float = 1.0,
               ema_rate: float = 0.01, precond_rate: float = 0.01, guardrail: float = 0.98,
               adapt_a: float = 0.1, adapt_delta: float = 0.02, tune_start: int = 10,
               precond_start: int = 100) -> ChainResult:
    r"""Run C chains of θ ← θ − Λ G_t(θ) + sqrt(2Λ/β) ξ (SG(L)D, seed 003 §2.1) on a model.

    G_t(θ) = (1/B) Σ_{n∈S_t} ∇l_n(θ) + Γθ/N is the minibatch gradient of the mean loss;
    with momentum κ: m ← κm + G_t, θ ← θ − Λm + sqrt(2Λ/β) ξ (seed 003, eq. B.1).
    ``sampler="sglrw"`` / ``"clipped-sgld"`` run seed 000's eqs. (12) / (18) instead
    (diagonal Λ, β < ∞); see :mod:`sgtune.sampler.kernels` for the exact rules.

    The other samplers sample the tempered posterior log p_β(θ) = −β (L(θ) + θᵀΓθ/(2N)) (the
    posterior at β = N, their default) with minibatch gradients ∇log p_β ≈ −β G_t, and take a
    *scalar* ``step_matrix`` (a diagonal or dense Λ, momentum κ and decay are SG(L)D options and
    are rejected):

    - ``"sghmc"`` (vanilla SGHMC, Chen et al. 2014, no noise estimate): velocity v,
      v ← v + h(−β G_t − γ v) + sqrt(2γh) ξ, θ ← θ + h v, with h = ``step_matrix`` (× the decay
      schedule) and γ = ``friction``. Unit mass: v ~ N(0, I) at stationarity, so h is a time step
      in the units where θ's posterior standard deviation is ~1/sqrt(β H) (h ≲ 1/sqrt(β λ_max(H))).
    - ``"smile-naive"``, ``"psmile-naive"``, ``"smile"``, ``"psmile"`` (seed 001, eqs. 1–3,
      Algorithm 1, section 3.2): MCLMC with the minimal-norm integrator on one minibatch per step
      (three gradient evaluations) and no injected noise (:mod:`sgtune.sampler.smile_chain`).
      ``step_matrix`` = ε, the distance θ moves per step (|u| = 1; in pSMILE's preconditioned
      coordinates); for ``smile``/``psmile`` the initial ε, adapted by the energy-variance tuner.
      β enters only the target (ε does not scale with it). The ``p`` prefix adds the diagonal
      preconditioner from EMAs (rate ``precond_rate``) of the minibatch gradient. The result adds
      ``step_size_final``, ``rejection_fraction``, ``energy_error_mean`` (and the others below).

    Parameters
    ----------
    model : GLM, {"linear", "logistic", "poisson", "beta-linear"} or a protocol model
        Per-observation loss (a name is resolved with ``noise_variance``/``beta_power``). Any
        object with ``numba_spec(p) -> (kind, ints, floats)`` (e.g. :class:`sgtune.models.MLP`,
        kind ``"mlp"``, :mod:`sgtune.sampler.specs`) runs in the compiled kernel; an object with only
        ``per_sample_grads(theta, X, y) -> (n, D)`` (and optionally ``batched_grads``) runs on
        the general NumPy path (:mod:`sgtune.sampler.general`). The parameter dimension D is
        ``n_params`` of the spec, else ``model.n_params(p)``, else p.
    data : Dataset or (X, y)
        The data.
    step_matrix : float, (D,) or (D, D)
        Λ: a scalar λ (Λ = λI), a diagonal, or a dense matrix (SPD when β < ∞).
    batch_size : int
        B, 1 ≤ B ≤ N.
    n_steps : int
        Steps per chain T (including burn-in).
    n_chains : int
        C independent chains (parallel over threads).
    burn_in : int, optional
        Steps discarded before the moments are accumulated (default T // 10).
    prior_precision : float or (D, D)
        Γ (scalar G means G·I).
    initial : (D,) or (C, D), optional
        Starting point(s); default θ̂, the MAP fitted here by :func:`sgtune.models.fit_map` (with
        ``seed`` for a non-convex model's start); a model that cannot be fitted (no
        ``per_sample_losses``, or no ``initial_params`` for a non-convex one) needs it.
    inv_temperature : float, optional
        β; ``inf`` is SGD (no injected noise). Default: ``inf`` for sgld/sglrw/clipped-sgld, N
        (the posterior) for sghmc and the SMILE samplers (which need a finite β).
    momentum : float
        κ in [0, 1).
    sampler : {"sgld", "sglrw", "clipped-sgld", "sghmc", "smile-naive", "psmile-naive", "smile", "psmile"}
        Update rule (above).
    batching : {"replacement", "without-replacement", "reshuffle"}
        Minibatch scheme; reshuffling draws a fresh permutation per chain and epoch.
    decay : float
        γ ≥ 0 of the schedule Λ_t = Λ (1+k)^{−γ}, k the 0-based iteration.
    thin : int
        Keep every ``thin``-th draw after burn-in in ``trace`` (0: no trace).
    observables : (K, D), optional
        Rows ℓ_k of linear observables whose per-chain time averages are returned.
    epoch_moments : bool
        With ``batching="reshuffle"``, moments of θ by position within the epoch.
    batches_per_chain : int, optional
        Segments per chain for batch-means standard errors (default ⌈32/C⌉ rounded up to an even
        number, so that each chain splits into halves for the non-stationarity check).
    seed : int
        Seed; chain c uses ``SeedSequence(seed).spawn(C)[c]`` (:mod:`sgtune.sampler.rng`).
    progress : callable(done, total), optional
        Called after each chunk of steps (e.g. a click progress bar).
    backend : {"numba", "python", "numpy"}
        ``python`` runs the pure-Python twin (slow; tests; GLMs and quadratics); ``numpy`` forces
        the general path (NumPy gradients from ``model.per_sample_grads``) even for a model with a
        numba spec.
    noise_variance, beta_power : float
        Used when ``model`` is a name.
    friction : float
        SGHMC's friction γ > 0.
    ema_rate, guardrail, adapt_a, adapt_delta, tune_start : float, float, float, float, int
        smile/psmile tuner (Algorithm 1): EMA rate β of |ΔE| (0.01), guardrail quantile κ (0.98),
        adaptation band a (0.1) and factor δ (0.02), steps before it acts (10).
    precond_rate, precond_start : float, int
        pSMILE: EMA rate α (0.01) and the steps before the preconditioner leaves 1 (100).

    Returns
    -------
    ChainResult

    Raises
    ------
    UnstableStepSizeError
        Every chain diverged.
    NotPositiveDefiniteError
        Λ is not SPD although β < ∞.
    """
    if isinstance(model, str):
        model = get_model(model, noise_variance=noise_variance, beta_power=beta_power)
    ds = data if isinstance(data, Dataset) else make_dataset(*data)
    label = model_label(model)
    check = getattr(model, "check_response", None)
    if check is not None:
        check(ds.y, ds.source or "y")
    n, p = ds.n_data, ds.dim
    check_int(batch_size, "batch_size", low=1, high=n)
    if n >= 2**32:
        raise SgtuneError(f"the sampler supports N < 2^32 data points, got N = {n}")
    spec = numba_spec_of(model, p)
    if backend == "numpy" or spec is None:
        if not callable(getattr(model, "per_sample_grads", None)):
            raise SgtuneError(f"model {label} has neither numba_spec() nor per_sample_grads(theta, X, y); "
                              "give it one of them (see sgtune.sampler.specs)")
    d = parameter_dim(model, spec, p)
    gam = prior_matrix(prior_precision, d)
    if not np.any(gam):
        prior_kind, prior = grads.PRIOR_NONE, np.zeros((d, d))
    elif np.array_equal(gam, gam[0, 0] * np.eye(d)):
        prior_kind, prior = grads.PRIOR_SCALAR, gam / n
    else:
        prior_kind, prior = grads.PRIOR_DENSE, gam / n
    if initial is None:
        initial = _map_start(model, ds, gam, d, seed, label)
    kind, ints, floats = spec if spec is not None else ("python", np.zeros(1, dtype=np.int64), np.zeros(1))
    if backend == "numpy":
        kind = "python"
    if inv_temperature is None:
        inv_temperature = float(n) if sampler in DYNAMICS_SAMPLERS else math.inf
    dyn = _dynamics_options(sampler, step_matrix, inv_temperature, momentum, decay, backend, friction, ema_rate,
                            precond_rate, guardrail, adapt_a, adapt_delta, tune_start, precond_start)
    if sampler in MCLMC_SAMPLERS:
        if kind == "python":
            if not callable(getattr(model, "per_sample_losses", None)):
                raise SgtuneError(f"sampler {sampler!r} needs the minibatch loss for its energy error: model {label} "
                                  "has per_sample_grads but no per_sample_losses(theta, X, y); add it")
        elif ORACLES[kind].value_grad_fn is None:
            raise SgtuneError(f"sampler {sampler!r} needs a loss for its energy error, which numba oracle {kind!r} "
                              "does not have; use backend='numpy' with a model that has per_sample_losses")
    return _run(dyn=dyn, X=ds.X, y=ds.y, kind=kind, ints=ints, floats=floats, mat=prior, dim=d, py_model=model,
                prior_kind=prior_kind, prior=prior, step_matrix=step_matrix, initial=initial,
                batch_size=int(batch_size), n_steps=n_steps, n_chains=n_chains, burn_in=burn_in,
                inv_temperature=inv_temperature, momentum=momentum, sampler=sampler, batching=batching,
                decay=decay, thin=thin, observables=observables, epoch_moments=epoch_moments,
                batches_per_chain=batches_per_chain, seed=seed, progress=progress, backend=backend,
                settings={"model": label, "n_data": n, "batch_size": int(batch_size), "oracle": kind,
                          "n_params": d})


@cites("gnld2025", "eq. (2.8) with Q = 0: SG Euler–Maruyama on a quadratic potential")
def run_quadratic_chains(hessian: Any, step_matrix: Any, *, n_steps: int, n_chains: int = 4,
                         mean: Any = None, noise_cov: Any = None, noise_alpha: float | None = None,
                         noise_scale: float = 1.0, initial: Any = None, burn_in: int | None = None,
                         inv_temperature: float = math.inf, momentum: float = 0.0, sampler: str = "sgld",
                         decay: float = 0.0, thin: int = 0, observables: Any = None,
                         batches_per_chain: int | None = None, seed: int = 0,
                         progress: ProgressCallback | None = None, backend: str = "numba") -> ChainResult:
    r"""Chains with the synthetic gradient G(θ) = A(θ − μ) + ε on the quadratic potential ½(θ−μ)ᵀA(θ−μ).

    ε ~ N(0, C) with ``noise_cov`` C (default: no noise), or ε_i = ``noise_scale``·S_α i.i.d.
    symmetric α-stable with ``noise_alpha`` α ∈ (0, 2] (characteristic function e^{−|t|^α}).
    The update rules are those of :func:`run_chains`. For SG(L)D with Gaussian noise the chain
    is linear and its stationary covariance solves Σ = (I−ΛA)Σ(I−ΛA)ᵀ + ΛCΛᵀ + 2Λ/β exactly
    (seed 003, eq. 11, with a constant C̄) — the exact oracle the tests use.

    Parameters
    ----------
    hessian : (D, D)
        A (symmetric).
    step_matrix : float, (D,) or (D, D)
        Λ.
    n_steps, n_chains, burn_in, inv_temperature, momentum, sampler, decay, thin, observables,
    batches_per_chain, seed, progress, backend
        As in :func:`run_chains`.
    mean : (D,), optional
        μ (default 0).
    noise_cov : (D, D), optional
        C, positive semi-definite.
    noise_alpha, noise_scale : float
        α-stable noise instead of Gaussian.
    initial : (D,) or (C, D), optional
        Start (default μ).

    Returns
    -------
    ChainResult
    """
    A = as_square(hessian, "hessian")
    d = A.shape[0]
    mu = np.zeros(d) if mean is None else as_vector(mean, "mean", d)
    chol = np.zeros((d, d))
    if noise_alpha is not None:
        alpha = float(noise_alpha)
        if not 0 < alpha <= 2:
            raise SgtuneError(f"noise_alpha must lie in (0, 2], got {alpha}")
        kind, mpar = "quadratic-stable", grads.model_params(alpha=alpha,
                                                            scale=check_positive(noise_scale, "noise_scale"))
    else:
        kind, mpar = "quadratic-gaussian", grads.model_params()
        if noise_cov is not None:
            cov = as_square(noise_cov, "noise_cov", d)
            lam, vec = np.linalg.eigh(0.5 * (cov + cov.T))
            if lam[0] < -1e-12 * max(1.0, lam[-1]):
                raise NotPositiveDefiniteError(
                    f"noise_cov must be positive semi-definite but has eigenvalue {lam[0]:.3g}")
            try:
                chol = np.linalg.cholesky(cov)
            except np.linalg.LinAlgError:  # singular PSD: a lower-triangular factor via QR
                half = vec * np.sqrt(np.clip(lam, 0, None))
                chol = np.linalg.qr(half.T)[1].T
                chol = chol * np.sign(np.diag(chol) + (np.diag(chol) == 0))
    if backend == "numpy":
        raise SgtuneError("backend must be 'numba' or 'python' for quadratic chains, got 'numpy'")
    if sampler not in kernels.SAMPLERS or sampler == "sghmc":
        raise SgtuneError(f"quadratic chains run sgld, sglrw or clipped-sgld, got sampler {sampler!r}; SMILE and "
                          "SGHMC on analytic targets run in sgtune.sampler.smile.run_smile_ensemble")
    return _run(dyn={}, X=np.ascontiguousarray(A), y=mu, kind=kind, ints=np.zeros(1, dtype=np.int64), floats=mpar,
                mat=np.ascontiguousarray(chol), dim=d, py_model=None, prior_kind=grads.PRIOR_NONE,
                prior=np.zeros((1, 1)),
                step_matrix=step_matrix, initial=mu if initial is None else initial, batch_size=1,
                n_steps=n_steps, n_chains=n_chains, burn_in=burn_in, inv_temperature=inv_temperature,
                momentum=momentum, sampler=sampler, batching="none", decay=decay, thin=thin,
                observables=observables, epoch_moments=False, batches_per_chain=batches_per_chain,
                seed=seed, progress=progress, backend=backend,
                settings={"model": kind})


# --------------------------------------------------------------------------- helpers
def step_factors(step_matrix: Any, dim: int, inv_temperature: float,
                 sampler: str = "sgld") -> tuple[np.ndarray, int, np.ndarray, bool]:
    """(Λ as (D, D), kind, factor L of 2Λ/β, inject) from a scalar, diagonal or dense Λ."""
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    inject = not math.isinf(beta)
    arr = as_float_array(step_matrix, "step_matrix")
    if arr.ndim == 0 or (arr.ndim == 1 and arr.shape[0] == 1):
        arr = np.full(dim, float(arr.reshape(-1)[0]))
    if arr.ndim == 1:
        if arr.shape[0] != dim:
            raise ShapeError(f"step_matrix as a diagonal must have length D = {dim} but has length {arr.shape[0]}")
        lam = np.diag(arr)
    elif arr.ndim == 2:
        lam = as_square(arr, "step_matrix", dim)
    else:
        raise ShapeError(f"step_matrix must be a scalar, (D,) or (D, D) = ({dim}, {dim}) but has shape {arr.shape}")
    kind = LAM_DIAG if np.count_nonzero(lam - np.diag(np.diag(lam))) == 0 else LAM_DENSE
    if sampler != "sgld":
        if kind == LAM_DENSE:
            raise SgtuneError(f"sampler {sampler!r} needs a scalar or diagonal step_matrix (coordinatewise moves); "
                              "use sampler='sgld' for a dense Λ")
        if not inject:
            raise SgtuneError(f"sampler {sampler!r} needs a finite inverse temperature (it moves by ±sqrt(2Λ_ii/β)); "
                              "pass inv_temperature=N or a number")
    fac = np.zeros((dim, dim))
    if kind == LAM_DIAG:
        dg = np.diag(lam)
        if np.any(dg <= 0) and (inject or np.any(dg < 0)):
            i = int(np.argmin(dg))
            raise NotPositiveDefiniteError(f"step_matrix must have positive diagonal entries but entry {i} is {dg[i]:.3g}")
        if inject:
            fac = np.diag(np.sqrt(2.0 * dg / beta))
    elif inject:
        lam = as_spd(lam, "step_matrix (SGLD needs a symmetric positive-definite Λ)", dim)
        fac = np.linalg.cholesky(2.0 * lam / beta)
    return np.ascontiguousarray(lam), kind, np.ascontiguousarray(fac), inject


def _dynamics_options(sampler: str, step_matrix: Any, inv_temperature: float, momentum: float, decay: float,
                      backend: str, friction: float, ema_rate: float, precond_rate: float, guardrail: float,
                      adapt_a: float, adapt_delta: float, tune_start: int, precond_start: int) -> dict[str, Any]:
    """Validate the options of sghmc and the SMILE samplers (empty dict for the SG(L)D family)."""
    if sampler not in DYNAMICS_SAMPLERS:
        return {}
    what = "h (its time step)" if sampler == "sghmc" else "ε (the distance moved per step)"
    arr = np.asarray(step_matrix, dtype=float) if not isinstance(step_matrix, str) else np.array([np.nan, np.nan])
    if arr.size != 1:
        raise SgtuneError(f"sampler {sampler!r} takes a scalar step size {what}, got step_matrix (--lambda) of shape "
                          f"{arr.shape}; pass a number (--step-size) — a diagonal or dense Λ is for sampler 'sgld', "
                          "and psmile estimates a diagonal preconditioner itself")
    h = float(arr.reshape(-1)[0])
    if not (h > 0 and math.isfinite(h)):
        raise SgtuneError(f"sampler {sampler!r} needs a finite step size > 0, got {h}")
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    if math.isinf(beta):
        raise SgtuneError(f"sampler {sampler!r} samples exp(−β(L + θᵀΓθ/(2N))) and needs a finite inverse "
                          "temperature (--inverse-temperature), got inf; pass inv_temperature=N (the posterior, the "
                          "default) or a number")
    if momentum != 0.0:
        alt = "its friction γ (friction=...)" if sampler == "sghmc" else "its own unit velocity u"
        raise SgtuneError(f"momentum κ = {momentum} (--momentum) is an SG(L)D option; sampler {sampler!r} has {alt} — "
                          "drop it (or use sampler 'sgld')")
    if decay != 0.0 and sampler != "sghmc":
        raise SgtuneError(f"decay = {decay} (--decay) schedules SG(L)D's Λ; sampler {sampler!r} has no schedule "
                          "(smile/psmile tune ε themselves) — drop it")
    if backend == "python":
        raise SgtuneError(f"backend 'python' (the pure-Python twin) runs sgld, sglrw and clipped-sgld, not "
                          f"{sampler!r}; use backend='numba' or 'numpy'")
    if sampler == "sghmc":
        return {"friction": check_positive(friction, "friction")}
    ts, ps = check_tuner_settings(ema_rate, precond_rate, guardrail, adapt_a, adapt_delta, tune_start,
                                  precond_start)
    pre, tuned = MCLMC_SAMPLERS[sampler]
    params = np.zeros(smile_chain.N_PARAMS)
    params[smile_chain.Q_ALPHA] = precond_rate
    params[smile_chain.Q_BETA] = ema_rate
    params[smile_chain.Q_ZK] = ndtri(guardrail)
    params[smile_chain.Q_ZLO] = ndtri(adapt_a / 3.0)
    params[smile_chain.Q_ZHI] = ndtri(1.0 - 2.0 * adapt_a / 3.0)
    params[smile_chain.Q_DELTA] = adapt_delta
    params[smile_chain.Q_TUNE_START] = ts
    params[smile_chain.Q_PRE_START] = ps
    params[smile_chain.Q_INV_TEMP] = beta
    params[smile_chain.Q_PRECOND] = float(pre)
    params[smile_chain.Q_TUNED] = float(tuned)
    return {"params": params, "step_size": h,
            "settings": {"ema_rate": ema_rate, "precond_rate": precond_rate, "guardrail": guardrail,
                         "adapt_a": adapt_a, "adapt_delta": adapt_delta, "tune_start": ts, "precond_start": ps}}


def _map_start(model: Any, ds: Dataset, gam: np.ndarray, d: int, seed: int, label: str) -> np.ndarray:
    """θ̂ = ``fit_map(model, ds, Γ, seed=seed)`` as the chains' start (the default ``initial``)."""
    needs = ["per_sample_losses"]
    if getattr(model, "fit_method", "lbfgs") != "newton":
        needs.append("initial_params")
    missing = [m for m in needs if not callable(getattr(model, m, None))]
    if missing:
        raise SgtuneError(f"initial is required for model {label}: the default start θ̂ is fitted by fit_map, which "
                          f"needs {' and '.join(f'{m}()' for m in missing)}; pass initial=<(D,) = ({d},) array>")
    try:
        return fit_map(model, ds, gam, seed=seed).theta_hat
    except ConvergenceError as exc:
        raise ConvergenceError(f"{exc} (run_chains fits θ̂ as the start when initial is not given; or pass "
                               f"initial=<(D,) = ({d},) array>)", residual=exc.residual, method=exc.method) from None


def parameter_dim(model: Any, spec: tuple[str, np.ndarray, np.ndarray] | None, n_features: int) -> int:
    """D of ``model`` on p = ``n_features`` features: ``model.n_params(p)`` if it has one (checked against the
    numba spec's count), else the spec's count, else p."""
    label = model_label(model)
    fn = getattr(model, "n_params", None)
    own = check_int(fn(n_features), f"{label}.n_params({n_features})", low=1) if callable(fn) else None
    if spec is None:
        return n_features if own is None else own
    kind, ints, _ = spec
    if kind == "mlp" and int(ints[0]) != n_features:
        raise ShapeError(f"model {label}: its numba spec has n_in = {int(ints[0])} inputs but the data have "
                         f"p = {n_features} features")
    d = int(ORACLES[kind].n_params(ints, n_features))
    if own is not None and own != d:
        raise SgtuneError(f"model {label}.n_params({n_features}) = {own} disagrees with its numba spec "
                          f"({kind!r}: D = {d})")
    return d


def chain_memory(*, n_chains: int, dim: int, n_trace: int, n_segments: int, n_perm: int = 1,
                 n_positions: int = 0, n_observables: int = 0, mclmc: bool = False) -> dict[str, int]:
    """Estimated peak bytes of :func:`run_chains`, by part: ``draws`` (the kept trace, C × T' × D
    float64, plus the step-size trace of the SMILE samplers), ``moments`` (the streaming Welford sums,
    C × S × D² and their merge's temporaries, about four more copies) and ``state`` (positions,
    momenta, RNG states, permutations, per-position epoch moments, covariance blocks)."""
    C, d, S = int(n_chains), int(dim), int(n_segments)
    draws = 8 * C * int(n_trace) * (d + (1 if mclmc else 0))
    moments = 8 * C * S * (d * d + d + 1) * 5 + 8 * C * (d * d + d)
    state = 8 * C * (4 * d + 4 + 3 + int(n_perm) + int(n_positions) * (2 * d + 1) + COV_BLOCK * d + 2
                     + int(n_observables) + (6 * d + 12 if mclmc else 0))
    return {"draws": draws, "moments": moments, "state": state}


def check_chain_memory(*, n_chains: int, n_steps: int, dim: int, n_trace: int, n_segments: int,
                       n_perm: int = 1, n_positions: int = 0, n_observables: int = 0, mclmc: bool = False) -> None:
    """Refuse, before allocating anything, chains whose :func:`chain_memory` exceeds the memory available
    (:func:`~sgtune.core._validation.available_memory`): an :class:`InsufficientMemoryError` that
    gives both numbers and says which setting to lower, instead of a MemoryError or the kernel's OOM kill."""
    parts = chain_memory(n_chains=n_chains, dim=dim, n_trace=n_trace, n_segments=n_segments, n_perm=n_perm,
                         n_positions=n_positions, n_observables=n_observables, mclmc=mclmc)
    need = sum(parts.values())
    avail = available_memory()
    if avail is None or need <= avail:
        return
    detail = ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v)
    if parts["draws"] >= max(parts["moments"], parts["state"]):
        fix = "keep fewer draws with a larger `thin` (or fewer `n_steps`), or use fewer `n_chains`"
    else:
        fix = "use fewer `n_chains`"
    raise InsufficientMemoryError(
        f"{n_chains} chains × {n_steps} steps (D = {dim}) would need about {format_bytes(need)} of memory "
        f"({detail}) but {format_bytes(avail)} is available; {fix}", needed=need, available=avail)


def _run(*, dyn: dict[str, Any], X: np.ndarray, y: np.ndarray, kind: str, ints: np.ndarray, floats: np.ndarray, mat: np.ndarray,
         dim: int, py_model: Any, prior_kind: int, prior: np.ndarray, step_matrix: Any, initial: Any,
         batch_size: int, n_steps: int, n_chains: int, burn_in: int | None, inv_temperature: float,
         momentum: float, sampler: str, batching: str, decay: float, thin: int, observables: Any,
         epoch_moments: bool, batches_per_chain: int | None, seed: int, progress: ProgressCallback | None,
         backend: str, settings: dict[str, Any]) -> ChainResult:
    if sampler not in SAMPLERS:
        raise SgtuneError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    if batching not in BATCHINGS and batching != "none":
        raise SgtuneError(f"batching must be one of {', '.join(BATCHINGS)}, got {batching!r}")
    if backend not in ("numba", "python", "numpy"):
        raise SgtuneError(f"backend must be 'numba', 'python' or 'numpy', got {backend!r}")
    if backend == "python" and kind not in ("glm", "quadratic-gaussian", "quadratic-stable"):
        raise SgtuneError(f"backend 'python' (the pure-Python twin) supports GLMs and quadratic oracles, "
                          f"not {kind!r} models; use backend='numba'")
    d = dim
    n_data = X.shape[0]
    T = check_int(n_steps, "n_steps", low=1)
    C = check_int(n_chains, "n_chains", low=1)
    T0 = T // 10 if burn_in is None else check_int(burn_in, "burn_in", low=0, high=T - 1)
    kappa = float(momentum)
    if not 0.0 <= kappa < 1.0:
        raise SgtuneError(f"momentum must lie in [0, 1), got {momentum}")
    gamma = check_positive(decay, "decay", strict=False)
    thin = check_int(thin, "thin", low=0)
    seed = check_int(seed, "seed", low=0)
    mclmc = sampler in MCLMC_SAMPLERS
    lam, lam_kind, fac, inject = step_factors(step_matrix, d, inv_temperature,
                                              "sgld" if sampler in DYNAMICS_SAMPLERS else sampler)
    obs = np.zeros((0, d)) if observables is None else as_float_array(observables, "observables")
    if obs.ndim == 1:
        obs = obs[None, :]
    if obs.ndim != 2 or obs.shape[1] != d:
        raise ShapeError(f"observables must be (K, D) with D = {d} but has shape {obs.shape}")
    post = T - T0
    if batches_per_chain is None:  # an even number: each chain's first and second half (chain health)
        S = max(1, math.ceil(32 / C))
        S += S % 2
    else:
        S = check_int(batches_per_chain, "batches_per_chain", low=1)
    S = min(S, post)
    seg_len = post // S
    n_batches_epoch = -(-n_data // batch_size)
    R = n_batches_epoch if (epoch_moments and batching == "reshuffle") else 0
    if epoch_moments and batching != "reshuffle":
        raise SgtuneError("epoch_moments needs batching='reshuffle' (positions within an epoch)")
    n_trace = post // thin if thin > 0 else 0
    n_perm = n_data if batching in ("without-replacement", "reshuffle") else 1
    check_chain_memory(n_chains=C, n_steps=T, dim=d, n_trace=n_trace, n_segments=S, n_perm=n_perm,
                       n_positions=R, n_observables=obs.shape[0], mclmc=mclmc)
    init = as_float_array(initial, "initial")
    if init.shape == (d,):
        init = np.tile(init, (C, 1))
    elif init.shape != (C, d):
        raise ShapeError(f"initial must be (D,) = ({d},) or (C, D) = ({C}, {d}) but has shape {init.shape}")

    theta = np.ascontiguousarray(init.copy())
    mom = np.zeros((C, d))
    rng_state = chain_states(seed, C)
    # per-chain permutations only where the batching uses them (C·N int64 would be 512 MB for
    # N = 10⁶, C = 64); with replacement the kernel never reads them
    perm = np.tile(np.arange(n_perm, dtype=np.int64), (C, 1))
    epoch_pos = np.zeros(C, dtype=np.int64)
    diverged = -np.ones(C, dtype=np.int64)
    clip_count = np.zeros(C, dtype=np.int64)
    acc_n = np.zeros((C, S), dtype=np.int64)
    acc_mean = np.zeros((C, S, d))
    acc_m2 = np.zeros((C, S, d, d))
    blk = np.zeros((C, COV_BLOCK, d))
    blk_n = np.zeros((C, 2), dtype=np.int64)
    trace = np.zeros((C, n_trace, d))
    pos_n = np.zeros((C, R), dtype=np.int64)
    pos_mean = np.zeros((C, R, d))
    pos_m2 = np.zeros((C, R, d))
    obs_sum = np.zeros((C, obs.shape[0]))
    state = (theta, mom, rng_state, perm, epoch_pos, diverged, clip_count)
    hp = np.array([kappa, 1.0 if inject else 0.0])
    if sampler == "sghmc":
        hp = np.array([float(inv_temperature), float(dyn["friction"])])
    upd = (lam, fac, hp)
    sched = (int(batch_size), gamma)
    step_fn = None if mclmc else step_fn_for(sampler, lam_kind)
    batch_fn = BATCH_FNS[batching]
    sm: tuple[Any, ...] = ()
    if mclmc:
        sm = (np.full(C, float(dyn["step_size"])), np.zeros((C, 4)), np.ones((C, d)), np.zeros((C, d)),
              np.zeros((C, d)), np.zeros(C, dtype=np.int64), np.zeros((C, 4)), np.zeros((C, n_trace)),
              np.zeros((C, d)), np.zeros((C, 2)), dyn["params"])
        smile_chain.init_velocity(state)

    def outputs(last: bool) -> tuple[Any, ...]:
        return (int(seg_len), acc_n, acc_mean, acc_m2, blk, blk_n, bool(last), int(thin), trace, pos_n, pos_mean,
                pos_m2, obs, obs_sum)

    if kind == "python":
        from .general import GeneralPath

        path = GeneralPath(py_model, X, y, d, batch_fn, step_fn, state, prior_kind, prior, gamma, upd, int(batch_size),
                           sm=sm)

        def call(t0: int, steps: int) -> None:
            path.run(t0, steps, int(T0), outputs, T)
    elif mclmc:
        oracle = ORACLES[kind]
        ora = (X, y, ints, floats, mat, int(prior_kind), prior, int(oracle.work_size(ints, d, int(batch_size))))

        def call(t0: int, steps: int) -> None:
            smile_chain.smile_chains(batch_fn, oracle.value_grad_fn, state, int(t0), int(steps), int(T0), ora,
                                     int(batch_size), sm, outputs(t0 + steps == T))
    else:
        oracle = ORACLES[kind]
        ora = (X, y, ints, floats, mat, int(prior_kind), prior, int(oracle.work_size(ints, d, int(batch_size))))

        def call(t0: int, steps: int) -> None:
            last = t0 + steps == T  # the last call merges the pending covariance block
            if backend == "numba":
                kernels.chains(BATCH_FNS[batching], oracle.grad_fn, step_fn, state, int(t0), int(steps), int(T0),
                               ora, sched, upd, outputs(last))
            else:
                from .twins import run_twin
                run_twin(sampler, lam_kind, batching, kind, state, int(t0), int(steps), int(T0), ora, sched, upd,
                         outputs(last))

    tic = time.perf_counter()
    if backend == "numba" and kind != "python":
        call(0, 0)  # compiles (or loads the cache) without doing any work
    compile_seconds = time.perf_counter() - tic
    # 50 calls even without a progress bar: Python runs its signal handlers between them, so Ctrl-C stops a
    # long run within ~2 % of its time instead of after it (the chains are identical either way)
    chunk = max(1, -(-T // 50))
    tic = time.perf_counter()
    done = 0
    while done < T:
        steps = min(chunk, T - done)
        call(done, steps)
        done += steps
        if progress is not None:
            progress(done, T)
    seconds = time.perf_counter() - tic

    ok = diverged < 0
    if not ok.any():
        raise UnstableStepSizeError(
            f"all {C} chains diverged (first at step {int(diverged.min())}); the step size is too large — "
            "reduce step_matrix (e.g. by a factor 2) or check it with the forward prediction",
            spectral_radius=float("nan"))
    summary = _summarise(acc_n[ok], acc_mean[ok], acc_m2[ok])
    chain_means = np.full((C, d), np.nan)
    chain_covs = np.full((C, d, d), np.nan)
    chain_means[ok], chain_covs[ok] = _merge_chains(acc_n[ok], acc_mean[ok], _full(acc_m2[ok]))
    n_post = acc_n.sum(axis=1)
    half_means = half_vars = None
    if S >= 2:  # each chain's first and last ⌊S/2⌋ segments (the middle one of an odd S is left out)
        h = S // 2
        half_means = np.full((C, 2, d), np.nan)
        half_vars = np.full((C, 2, d), np.nan)
        for k, part in enumerate((slice(0, h), slice(S - h, S))):
            m, v = _merge_chains(acc_n[ok, part], acc_mean[ok, part], _full(acc_m2[ok, part]))
            half_means[ok, k] = m
            half_vars[ok, k] = np.diagonal(v, axis1=-2, axis2=-1)
    obs_means = obs_sum / np.maximum(n_post, 1)[:, None] if obs.shape[0] else None
    pmean = pvar = None
    if R:
        pmean, pvar = _merge_positions(pos_n[ok], pos_mean[ok], pos_m2[ok])
    coord_updates = max(1, C * T * d)
    settings = {**settings, "sampler": sampler, "batching": batching, "inv_temperature": float(inv_temperature),
                "momentum": kappa, "decay": gamma, "step_kind": "dense" if lam_kind == LAM_DENSE else "diagonal",
                "batches_per_chain": S, "thin": thin, "backend": backend if kind != "python" else "numpy"}
    extra: dict[str, Any] = {}
    if sampler == "sghmc":
        settings["friction"] = float(dyn["friction"])
    if mclmc:
        settings.update(dyn["settings"])
        step_, tune_, ipre_, gbar_, gvar_, pcount_, stats_, step_trace_ = sm[:8]
        pre = MCLMC_SAMPLERS[sampler][0]
        n_done = np.where(diverged >= 0, np.maximum(diverged, 1), T).astype(float)
        extra = {"step_size_final": step_.copy(), "rejection_fraction": stats_[:, 0] / n_done,
                 "energy_error_mean": stats_[:, 1] / n_done, "energy_error_abs_mean": stats_[:, 2] / n_done,
                 "energy_error_var_per_dim": stats_[:, 3] / n_done / d,
                 "step_size_trace": step_trace_ if thin > 0 else None}
        if pre:
            corr = 1.0 - (1.0 - float(dyn["params"][smile_chain.Q_ALPHA])) ** np.maximum(pcount_, 1)
            extra["preconditioner"] = 1.0 / ipre_
            extra["gradient_sd"] = np.sqrt(gvar_ / corr[:, None])
    return ChainResult(mean=summary[0], cov=summary[1], mean_standard_error=summary[2],
                       cov_standard_error=summary[3], ess=summary[4], n_batches=summary[5],
                       chain_means=chain_means, chain_covs=chain_covs, batch_covs=summary[6],
                       trace=trace if thin > 0 else None, observable_means=obs_means,
                       epoch_position_mean=pmean, epoch_position_var=pvar, diverged_at=diverged,
                       clip_fraction=float(clip_count.sum() / coord_updates), final_state=theta,
                       n_steps=T, burn_in=T0, n_chains=C, seed=seed, seconds=seconds,
                       compile_seconds=compile_seconds, settings=settings, half_means=half_means,
                       half_variances=half_vars, **extra)


def _full(m2_upper: np.ndarray) -> np.ndarray:
    """Symmetric matrix from the kernel's upper-triangle sums of squares (last two axes)."""
    lower = np.swapaxes(np.triu(m2_upper, 1), -1, -2)
    return np.triu(m2_upper) + lower


def _merge(n: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pooled mean and covariance (÷ count) of Welford segments (Chan et al. merge)."""
    tot = n.sum()
    mu = (n[:, None] * mean).sum(axis=0) / tot
    dev = mean - mu
    cov = (m2.sum(axis=0) + np.einsum("k,ki,kj->ij", n, dev, dev)) / tot
    return mu, 0.5 * (cov + cov.T)


def _merge_chains(n: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_merge` for every chain at once: (C, S), (C, S, D), (C, S, D, D) -> (C, D), (C, D, D)."""
    tot = n.sum(axis=1).astype(float)
    mu = np.einsum("cs,csi->ci", n, mean) / tot[:, None]
    dev = mean - mu[:, None, :]
    cov = (m2.sum(axis=1) + np.einsum("cs,csi,csj->cij", n, dev, dev)) / tot[:, None, None]
    return mu, 0.5 * (cov + np.swapaxes(cov, -1, -2))


def _summarise(acc_n: np.ndarray, acc_mean: np.ndarray, acc_m2: np.ndarray) -> tuple[Any, ...]:
    """Pooled moments and batch-means standard errors over all (chain, segment) batches."""
    d = acc_mean.shape[-1]
    n = acc_n.reshape(-1)
    means = acc_mean.reshape(-1, d)
    m2 = _full(acc_m2.reshape(-1, d, d))
    keep = n > 0
    n, means, m2 = n[keep], means[keep], m2[keep]
    mu, cov = _merge(n, means, m2)
    dev = means - mu
    batch_covs = m2 / n[:, None, None] + dev[:, :, None] * dev[:, None, :]
    K = n.shape[0]
    if K >= 2:
        w = n / n.sum()
        # weighted batch means: Var(Σ w_k b_k) ≈ Σ w_k² (b_k − b̄)² · K/(K−1)
        se_mean = np.sqrt(K / (K - 1) * np.einsum("k,ki->i", w**2, dev**2))
        se_cov = np.sqrt(K / (K - 1) * np.einsum("k,kij->ij", w**2, (batch_covs - cov) ** 2))
        with np.errstate(divide="ignore", invalid="ignore"):
            ess = np.where(se_mean > 0, np.diag(cov) / se_mean**2, float(n.sum()))
        ess = np.minimum(ess, float(n.sum()))
    else:
        se_mean = np.full(d, np.nan)
        se_cov = np.full((d, d), np.nan)
        ess = np.full(d, np.nan)
    return mu, cov, se_mean, se_cov, ess, K, batch_covs


def _merge_positions(pos_n: np.ndarray, pos_mean: np.ndarray, pos_m2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-epoch-position mean and variance pooled over chains."""
    tot = np.maximum(pos_n.sum(axis=0), 1)  # (R,)
    mu = (pos_n[:, :, None] * pos_mean).sum(axis=0) / tot[:, None]
    dev = pos_mean - mu[None]
    var = (pos_m2.sum(axis=0) + (pos_n[:, :, None] * dev**2).sum(axis=0)) / tot[:, None]
    return mu, var
