"""Python driver of the chain engine: validate once, allocate the named records, run, summarise.

:func:`run_chains` runs chains of a model (a GLM, an MLP or any protocol model) on a data set,
:func:`run_quadratic_chains` chains on a quadratic potential with synthetic gradient noise (for
theory checks). Both take the chain's :class:`~sgtune.core.config.Dynamics`, the run's
:class:`~sgtune.core.config.RunSpec` and the sampler's options (:mod:`sgtune.sampler.registry`), build a
:class:`~sgtune.sampler.state.ChainPlan`, run it on a backend (:mod:`sgtune.sampler.engine`) and return
a frozen :class:`ChainResult` with pooled moments, batch-means standard errors and ESS.

The keyword forms of 0.1 (``run_chains(model, data, step_matrix, batch_size=…, n_steps=…, …)`` and
``run_quadratic_chains(hessian, step_matrix, n_steps=…, …)``) were removed in 0.2.0: they raise a one-line
``TypeError`` naming the new form.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import numpy as np

from ..core._refs import cites
from ..core._validation import (as_float_array, as_spd, as_square, as_vector, available_memory, check_int,
                                check_positive, format_bytes)
from ..core.config import BATCHINGS, Dynamics, RunSpec
from ..core.errors import (ConvergenceError, InsufficientMemoryError, NotPositiveDefiniteError, SgtuneError,
                           ShapeError, UnstableStepSizeError)
from ..core.results import ResultMixin, SummaryTable, Z_95, resolve_parameter_names, table_from_columns
from ..io.data import Dataset, make_dataset
from ..models import fit_map, get_model, prior_matrix
from ..models.base import ModelRecord, model_record, named_parameters
from . import grads
from .engine import ChainPlan, NumbaBackend, run_plan
from .general import NumpyBackend
from .kernels import BATCH_FNS
from .registry import SAMPLER_NAMES, SGLDOptions, SamplerSpec, default_inv_temperature, sampler_spec
from .rng import chain_states
from .smile_chain import init_velocity, refresh_report
from .specs import ORACLES, validated_spec
from .state import (COV_BLOCK, LAM_DENSE, LAM_DIAG, STAT_ABS_DE_SUM, STAT_DE_SQ_SUM, STAT_DE_SUM, STAT_REJECTIONS,
                    Recorder, Schedule, chain_state, mclmc_state, oracle, recorder, step_params)

__all__ = ["ChainResult", "run_chains", "run_quadratic_chains", "SAMPLERS", "BATCHINGS", "parameter_dim",
           "chain_memory", "check_chain_memory", "step_factors"]

ProgressCallback = Callable[[int, int], None]

#: every sampler of :func:`run_chains` (the registry's names)
SAMPLERS: tuple[str, ...] = SAMPLER_NAMES


@dataclass(frozen=True, repr=False)
class ChainResult(ResultMixin):
    """Summary of C chains after burn-in, as :func:`run_chains` returns it (D = dimension, C = chains).

    Attributes
    ----------
    mean, cov : (D,) and (D, D) ndarray
        Pooled over the non-diverged chains after burn-in (cov divides by the count).
    mean_standard_error, cov_standard_error : (D,) and (D, D) ndarray
        Batch-means Monte Carlo standard errors (K batches = segments of the chains).
    ess : (D,) ndarray
        Effective sample size per coordinate, Var(θ_i) / MCSE(mean_i)².
    n_batches : int
        K, the number of batches behind the standard errors (z-scores are t_{K−1}).
    chain_means, chain_covs : (C, D) and (C, D, D) ndarray
        Per-chain moments (NaN rows for diverged chains).
    batch_covs : (K, D, D) ndarray
        Per-batch second moments about the pooled mean (their average is ``cov``).
    trace : (C, T', D) ndarray or None
        Thinned draws after burn-in (``thin`` > 0).
    observable_means : (C, K_obs) ndarray or None
        Per-chain time averages of the linear observables ℓ_kᵀθ.
    epoch_position_mean, epoch_position_var : (R, D) ndarray or None
        Reshuffling only: moments of θ after k batches of an epoch, k = 0..R−1, pooled over chains.
    diverged_at : (C,) ndarray of int
        Step at which a chain diverged (non-finite state), −1 if it did not.
    clip_fraction : float
        SGLRW / clipped SGLD: fraction of coordinate updates whose probability/drift was clipped.
    final_state : (C, D) ndarray
        Each chain's last θ.
    n_steps, burn_in, n_chains, seed : int
        The run (:class:`~sgtune.core.config.RunSpec`, burn-in resolved).
    seconds, compile_seconds : float
        Wall time of the chains and of the JIT compilation before them.
    settings : dict
        The sampler's settings as run (for reports).
    step_size_final : (C,) ndarray or None
        MCLMC samplers: ε at the end of each chain (the tuned one for smile/psmile).
    rejection_fraction : (C,) ndarray or None
        MCLMC samplers: fraction of steps rejected by the energy-error guardrail (0 untuned).
    energy_error_mean, energy_error_abs_mean, energy_error_var_per_dim : (C,) ndarray or None
        MCLMC samplers: mean ΔE, mean |ΔE| and mean ΔE²/D per step (all steps, burn-in included).
    step_size_trace : (C, T') ndarray or None
        MCLMC samplers with ``thin``: ε at the draws kept in ``trace``.
    refresh_length_final : (C,) ndarray or None
        SMILE samplers with the velocity refresh: the decoherence length L in use at the end (the automatic or
        fixed length, shortened by the noise-bias cap; ``inf``: no refresh yet).
    refresh_capped : (C,) ndarray or None
        SMILE samplers with the noise-bias cap: whether the cap shortened the refresh length at the end
        (:func:`sgtune.sampler.smile.noise_length`).
    noise_bias_predicted : (C,) ndarray or None
        SMILE samplers with the velocity refresh: the covariance's predicted bias along the gradient noise's noisiest
        direction at the final ε and refresh length (:func:`sgtune.sampler.smile.noise_excess`, from the noise
        measured along the chain); with the noise-bias cap, above its τ where no refresh can hold it at that ε.
    preconditioner, gradient_sd : (C, D) ndarray or None
        pSMILE: the final diagonal preconditioner p = √D σ/|σ| and the EMA standard deviation σ of
        the minibatch ∇log p_β (its bias-corrected EMA variance; before ``precond_start`` steps p = 1).
    half_means, half_variances : (C, 2, D) ndarray or None
        Each chain's mean and marginal variances over the first and the second half of its kept steps
        (its first and last ⌊S/2⌋ segments; NaN for diverged chains; None with one segment per chain):
        the non-stationarity test of :func:`sgtune.diagnostics.health.chain_health`.
    parameter_names : tuple of str
        The name of each coordinate of θ (the model's for the data's covariates,
        :func:`sgtune.models.base.parameter_names`; ``theta[i]`` when none).

    See Also
    --------
    run_chains : Computes it.
    sgtune.diagnostics.mcse.compare_covariance : Test ``cov`` against a prediction.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.sampler import run_chains
    >>> res = run_chains("logistic", example("logistic"), Dynamics(0.1, batch_size=32),
    ...                  RunSpec(1000, n_chains=2))
    >>> res.mean.shape, res.cov.shape, res.n_diverged
    ((5,), (5, 5), 0)
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
    parameter_names: tuple[str, ...] | None = None
    refresh_length_final: np.ndarray | None = None
    refresh_capped: np.ndarray | None = None
    noise_bias_predicted: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameter_names",
                           resolve_parameter_names(self.parameter_names, np.shape(self.mean)[0]))

    @property
    def n_diverged(self) -> int:
        return int(np.sum(self.diverged_at >= 0))

    @property
    def iterations_per_second(self) -> float:
        """Chain-iterations per second (C·T / wall time, excluding JIT compilation)."""
        return self.n_chains * self.n_steps / max(self.seconds, 1e-12)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parameter_names"] = list(self.parameter_names)  # type: ignore[arg-type]
        d["n_diverged"] = self.n_diverged
        d["iterations_per_second"] = self.iterations_per_second
        return d

    def _repr_items(self) -> list[tuple[str, Any]]:
        return [("D", np.shape(self.mean)[0]), ("chains", self.n_chains), ("steps", self.n_steps),
                ("burn_in", self.burn_in), ("diverged", self.n_diverged),
                ("min_ess", float(np.min(self.ess)) if np.size(self.ess) else math.nan)]

    def summary(self, predicted: Any = None) -> SummaryTable:
        """Per coordinate: the chains' mean, standard deviation √diag(cov), the mean's Monte Carlo standard
        error, the ESS and the normal 95 % interval mean ± 1.96·sd; with ``predicted`` (a (D, D) covariance,
        or a result with ``predicted_cov`` / ``cov``) also the predicted standard deviation and sd/predicted."""
        sd = np.sqrt(np.clip(np.diag(self.cov), 0.0, None))
        cols: dict[str, Any] = {"mean": self.mean, "sd": sd, "mcse": self.mean_standard_error, "ess": self.ess,
                                "[0.025": self.mean - Z_95 * sd, "0.975]": self.mean + Z_95 * sd}
        notes = ["sd: the chains' standard deviation (pooled after burn-in); mcse: the Monte Carlo standard error "
                 "of the mean (batch means); the interval is mean ± 1.96·sd (normal)."]
        if predicted is not None:
            pc = np.asarray(getattr(predicted, "predicted_cov", getattr(predicted, "cov", predicted)), dtype=float)
            if pc.shape != self.cov.shape:
                raise SgtuneError(f"predicted covariance has shape {pc.shape}, the chains' is {self.cov.shape}")
            psd = np.sqrt(np.clip(np.diag(pc), 0.0, None))
            with np.errstate(divide="ignore", invalid="ignore"):
                cols.update({"sd predicted": psd, "sd/predicted": sd / psd})
        return table_from_columns(
            f"Chains: {self.n_chains} × {self.n_steps} steps (burn-in {self.burn_in}), D = {np.shape(self.mean)[0]}",
            self.parameter_names, cols,  # type: ignore[arg-type]
            info=(("sampler", self.settings.get("sampler", "sgld")), ("diverged chains", self.n_diverged),
                  ("batches (standard errors)", self.n_batches), ("seconds", self.seconds)),
            notes=tuple(notes))

    def to_inference_data(self, parameter_names: Any = None, *, theta_hat: Any = None, step_matrix: Any = None,
                          attrs: Any = None) -> Any:
        """The thinned trace as an ArviZ ``InferenceData`` (:func:`sgtune.io.trace_io.to_inference_data`):
        posterior ``theta`` with dims (chain, draw, theta_dim), ``theta_dim`` labelled by ``parameter_names``
        (default: the result's). Needs a run with ``thin`` > 0 and arviz."""
        from ..io.trace_io import to_inference_data

        names = self.parameter_names if parameter_names is None else resolve_parameter_names(
            parameter_names, np.shape(self.mean)[0])
        return to_inference_data(self, names=names, theta_hat=theta_hat, step_matrix=step_matrix, attrs=attrs)


# --------------------------------------------------------------------------- public API
@dataclass(frozen=True)
class _Problem:
    """What the oracle of a run reads, resolved from a model and data (or a quadratic): the engine's inputs."""

    kind: str
    X: np.ndarray
    y: np.ndarray
    ints: np.ndarray
    floats: np.ndarray
    quadratic: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # (A, μ, L) of the quadratic oracle
    prior_kind: int
    prior: np.ndarray
    dim: int
    initial: Any
    py_model: Any
    settings: dict[str, Any]
    names: tuple[str, ...] | None = None


@cites("wang2026", "§2.1 (SG(L)D, mean-loss scaling) and eq. (B.1) (momentum)")
@cites("smile2025", "eqs. (1)–(3), Algorithm 1, section 3.2 (pSMILE), appendix F.2 (integrator)")
def run_chains(model: Any, data: Dataset | tuple[Any, Any], dynamics: Dynamics, run: RunSpec | None = None,
               options: Any = None, *, initial: Any = None, prior_precision: Any = 0.0, observables: Any = None,
               epoch_moments: bool = False, progress: ProgressCallback | None = None, backend: Any = "numba",
               **removed: Any) -> ChainResult:
    r"""Run C chains of a sampler on a model: SG(L)D θ ← θ − Λ G_t(θ) + sqrt(2Λ/β) ξ by default.

    Parameters
    ----------
    model : GLM, {"linear", "logistic", "poisson", "beta-linear"} or a protocol model
        Per-observation loss. Any object with ``numba_spec(p) -> (kind, ints, floats)`` (e.g.
        :class:`sgtune.models.MLP`, :mod:`sgtune.sampler.specs`) runs in the compiled engine; an object
        with only ``per_sample_grads(theta, X, y) -> (n, D)`` (and optionally ``batched_grads``) runs on
        the general NumPy path (:mod:`sgtune.sampler.general`). D is ``n_params`` of the spec, else
        ``model.n_params(p)``, else p.
    data : Dataset or (X, y)
        The data.
    dynamics : Dynamics
        Λ (``step``: a scalar λ, a (D,) diagonal or a (D, D) matrix, SPD when β < ∞; SGHMC's h or SMILE's
        ε), the batch size B ≤ N, β, κ, the batching and the decay γ of Λ_t = Λ (1+k)^{−γ}.
    run : RunSpec
        Steps T (burn-in included), chains C, burn-in (default T // 10), ``thin`` (keep every thin-th
        draw after burn-in in ``trace``), segments per chain behind the standard errors, seed (chain c
        uses ``SeedSequence(seed).spawn(C)[c]``, :mod:`sgtune.sampler.rng`).
    options : sampler options, optional
        The sampler and its settings (default :class:`~sgtune.sampler.registry.SGLDOptions`).
    initial : (D,) or (C, D), optional
        Starting point(s); default θ̂, the MAP fitted here by :func:`sgtune.models.fit_map` (seeded with
        the run's seed); a model that cannot be fitted needs it.
    prior_precision : float or (D, D)
        Γ (scalar G means G·I).
    observables : (K, D), optional
        Rows ℓ_k of linear observables whose per-chain time averages are returned.
    epoch_moments : bool
        With reshuffling, moments of θ by position within the epoch.
    progress : callable(done, total), optional
        Called after each chunk of steps (e.g. a click progress bar).
    backend : "numba", "numpy" or a backend object
        ``numpy`` forces the general path even for a model with a numba spec; an object with
        ``prepare``/``advance`` runs the plan itself (:mod:`sgtune.sampler.engine`; the tests' pure-Python
        reference implementation is one).

    **removed
        Not accepted: the keyword form of 0.1 (``step_matrix`` as the third argument, ``batch_size=…``,
        ``n_steps=…``, …) raises a ``TypeError`` naming the new form.

    Returns
    -------
    ChainResult
        Pooled moments, their batch-means standard errors, ESS, per-chain moments and (with
        ``thin``) the trace.

    Raises
    ------
    UnstableStepSizeError
        Every chain diverged.
    NotPositiveDefiniteError
        Λ is not SPD although β < ∞.
    SgtuneError
        Settings the sampler does not take (e.g. momentum with SMILE) or out of range.
    TypeError
        ``run`` is not a :class:`~sgtune.core.config.RunSpec`.

    See Also
    --------
    sgtune.workflows.verify.verify_stationary_cov : Chains against the predicted covariance.
    run_quadratic_chains : Chains on a quadratic potential with synthetic gradient noise.

    Notes
    -----
    G_t(θ) = (1/B) Σ_{n∈S_t} ∇l_n(θ) + Γθ/N is the minibatch gradient of the mean loss;
    with momentum κ: m ← κm + G_t, θ ← θ − Λm + sqrt(2Λ/β) ξ (Wang, Ding & Huggins 2026, §2.1
    and Eq. (B.1)). The other samplers' update rules (SGLRW, clipped SGLD, SGHMC, the SMILE family) are
    described with their options in :mod:`sgtune.sampler.registry`.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.sampler import SGLDOptions, run_chains
    >>> data = example("logistic")
    >>> res = run_chains("logistic", data, Dynamics(0.1, batch_size=32, inv_temperature=data.n_data),
    ...                  RunSpec(1000, n_chains=2, seed=1), SGLDOptions())
    >>> res.cov.shape, res.n_chains, res.n_steps
    ((5, 5), 2, 1000)
    >>> bool(np.all(res.cov_standard_error > 0))
    True
    """
    _removed_form("run_chains", dynamics, removed, "run_chains(model, data, Dynamics(step_matrix, batch_size, …), "
                  "RunSpec(n_steps, …), options)")
    if not isinstance(run, RunSpec):
        raise TypeError(f"run_chains(model, data, dynamics, run, options): run must be a RunSpec, got {run!r}")
    options = SGLDOptions() if options is None else options
    spec = sampler_spec(options)
    prob = _data_problem(model, data, dynamics, prior_precision, initial, run.seed, backend, spec)
    res = _execute(prob, dynamics, run, options, spec, observables=observables, epoch_moments=epoch_moments,
                   progress=progress, backend=backend)
    return res if prob.names is None else replace(res, parameter_names=prob.names)


def _data_problem(model: Any, data: Any, dynamics: Dynamics, prior_precision: Any, initial: Any, seed: int,
                  backend: Any, spec: SamplerSpec) -> _Problem:
    """Resolve a model on data into the oracle's inputs, the prior Γ/N and the start (θ̂ by default)."""
    if isinstance(model, str):
        model = get_model(model)
    ds = data if isinstance(data, Dataset) else make_dataset(*data)
    n, p = ds.n_data, ds.dim
    dynamics.check_data(n)
    if n >= 2**32:
        raise SgtuneError(f"the sampler supports N < 2^32 data points, got N = {n}")
    # the model is asked for everything in one visit (models.base.model_record); from here on only its answers
    rec = model_record(model, ds)
    label, numba_spec = rec.label, validated_spec(rec.numba_spec, rec.label)
    if backend == "numpy" or numba_spec is None:
        if "per_sample_grads" not in rec.methods:
            raise SgtuneError(f"model {label} has neither numba_spec() nor per_sample_grads(theta, X, y); "
                              "give it one of them (see sgtune.sampler.specs)")
    d = parameter_dim(label, rec.n_params, numba_spec, p)
    gam = prior_matrix(prior_precision, d)
    if not np.any(gam):
        prior_kind, prior = grads.PRIOR_NONE, np.zeros((d, d))
    elif np.array_equal(gam, gam[0, 0] * np.eye(d)):
        prior_kind, prior = grads.PRIOR_SCALAR, gam / n
    else:
        prior_kind, prior = grads.PRIOR_DENSE, gam / n
    if initial is None:
        initial = _map_start(model, rec, ds, gam, d, seed)
    kind, ints, floats = numba_spec if numba_spec is not None else ("python", np.zeros(1, dtype=np.int64),
                                                                    np.zeros(1))
    if backend == "numpy":
        kind = "python"
    if spec.needs_loss:
        if kind == "python":
            if "per_sample_losses" not in rec.methods:
                raise SgtuneError(f"sampler {spec.name!r} needs the minibatch loss for its energy error: model "
                                  f"{label} has per_sample_grads but no per_sample_losses(theta, X, y); add it")
        elif ORACLES[kind].value_grad_fn is None:
            raise SgtuneError(f"sampler {spec.name!r} needs a loss for its energy error, which numba oracle {kind!r} "
                              "does not have; use backend='numpy' with a model that has per_sample_losses")
    # the model's own D is d when it has n_params (parameter_dim checked them), else p
    names = (named_parameters(rec.parameter_names, "parameter_names" in rec.methods, d, label, rec.feature_names)
             if rec.n_params is not None or p == d else None)  # else theta[i]
    return _Problem(kind, ds.X, ds.y, ints, floats, None, int(prior_kind), prior, d, initial, model,
                    {"model": label, "n_data": n, "batch_size": int(dynamics.batch_size), "oracle": kind,
                     "n_params": d}, names)


@cites("gnld2025", "eq. (2.8) with Q = 0: SG Euler–Maruyama on a quadratic potential")
def run_quadratic_chains(hessian: Any, dynamics: Dynamics, run: RunSpec | None = None, options: Any = None, *,
                         mean: Any = None, noise_cov: Any = None, noise_alpha: float | None = None,
                         noise_scale: float = 1.0, initial: Any = None, observables: Any = None,
                         progress: ProgressCallback | None = None, backend: Any = "numba",
                         **removed: Any) -> ChainResult:
    r"""Run chains with the synthetic gradient G(θ) = A(θ − μ) + ε on the potential ½(θ−μ)ᵀA(θ−μ).

    ε ~ N(0, C) with ``noise_cov`` C (default: no noise), or ε_i = ``noise_scale``·S_α i.i.d.
    symmetric α-stable with ``noise_alpha`` α ∈ (0, 2] (characteristic function e^{−|t|^α}).
    The update rules are those of :func:`run_chains` (SG(L)D, SGLRW, clipped SGLD; the batch size
    of ``dynamics`` is not used: there are no data). For SG(L)D with Gaussian noise the chain is
    linear and its stationary covariance solves Σ = (I−ΛA)Σ(I−ΛA)ᵀ + ΛCΛᵀ + 2Λ/β exactly
    (Wang, Ding & Huggins 2026, Eq. (11), with a constant C̄) — the exact oracle the tests use;
    the GNLD paper (anonymous, 2025), Eq. (2.8) with Q = 0, is the same recursion.

    Parameters
    ----------
    hessian : (D, D) array_like
        The symmetric matrix A of the potential.
    dynamics : Dynamics
        Λ, β, κ and the decay, as in :func:`run_chains` (B is not used).
    run : RunSpec
        Steps, chains, burn-in, thinning, segments and seed, as in :func:`run_chains`.
    options : SGLDOptions, SGLRWOptions or ClippedSGLDOptions, optional
        The sampler (default SG(L)D).
    mean : (D,) array_like, optional
        The minimum μ (default 0).
    noise_cov : (D, D) array_like, optional
        The Gaussian gradient-noise covariance C, positive semi-definite (default: no noise).
    noise_alpha : float or None, optional
        Use i.i.d. symmetric α-stable noise with this α ∈ (0, 2] instead of Gaussian.
    noise_scale : float, optional
        The scale of the α-stable noise.
    initial : (D,) or (C, D) array_like, optional
        Start (default μ).
    observables : (K, D) array_like, optional
        Rows ℓ_k of linear observables whose per-chain time averages are returned.
    progress : callable(done, total), optional
        Called after each chunk of steps.
    backend : "numba" or a backend object, optional
        The engine (as in :func:`run_chains`; the NumPy path does not run quadratic chains).
    **removed
        Not accepted: the keyword form of 0.1 raises a ``TypeError`` naming the new form.

    Returns
    -------
    ChainResult
        The chains' moments and their standard errors.

    Raises
    ------
    SgtuneError
        A sampler of the posterior (SGHMC, SMILE), the ``numpy`` backend, or α outside (0, 2].
    TypeError
        ``run`` is not a :class:`~sgtune.core.config.RunSpec`.

    See Also
    --------
    run_chains : Chains of a model on data.

    Examples
    --------
    The chain on ½θ² with unit gradient noise and λ = 0.5 has stationary variance
    λ²/(1 − (1 − λ)²) = 1/3:

    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.sampler import run_quadratic_chains
    >>> res = run_quadratic_chains(np.eye(1), Dynamics(0.5, batch_size=1), RunSpec(4000, n_chains=4),
    ...                            noise_cov=np.eye(1))
    >>> bool(abs(res.cov[0, 0] - 1 / 3) < 5 * res.cov_standard_error[0, 0])
    True
    """
    _removed_form("run_quadratic_chains", dynamics, removed, "run_quadratic_chains(hessian, Dynamics(step_matrix, "
                  "batch_size=1, …), RunSpec(n_steps, …), options)")
    if not isinstance(run, RunSpec):
        raise TypeError(f"run_quadratic_chains(hessian, dynamics, run, options): run must be a RunSpec, got {run!r}")
    options = SGLDOptions() if options is None else options
    spec = sampler_spec(options)
    if backend == "numpy":
        raise SgtuneError("backend must be 'numba' or a backend object for quadratic chains, got 'numpy'")
    if spec.target != "linearised":
        raise SgtuneError(f"quadratic chains run sgld, sglrw or clipped-sgld, got sampler {spec.name!r}; SMILE and "
                          "SGHMC on analytic targets run in sgtune.sampler.smile_ensemble.run_smile_ensemble")
    prob = _quadratic_problem(hessian, mean, noise_cov, noise_alpha, noise_scale, initial)
    return _execute(prob, dynamics.replace(batching="replacement"), run, options, spec, observables=observables,
                    epoch_moments=False, progress=progress, backend=backend, batching="none")


def _quadratic_problem(hessian: Any, mean: Any, noise_cov: Any, noise_alpha: float | None, noise_scale: float,
                       initial: Any) -> _Problem:
    """The quadratic oracle's inputs: no data, A, μ and the noise factor L in the oracle's own fields."""
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
            chol = _psd_factor(as_square(noise_cov, "noise_cov", d))
    return _Problem(kind, np.zeros((0, 0)), np.zeros(0), np.zeros(1, dtype=np.int64), mpar,
                    (np.ascontiguousarray(A), mu, np.ascontiguousarray(chol)), grads.PRIOR_NONE, np.zeros((1, 1)), d, mu if initial is None else initial, None, {"model": kind})


def _psd_factor(cov: np.ndarray) -> np.ndarray:
    """A lower-triangular L with LLᵀ = C for a positive semi-definite C (Cholesky, or QR when C is singular)."""
    lam, vec = np.linalg.eigh(0.5 * (cov + cov.T))
    if lam[0] < -1e-12 * max(1.0, lam[-1]):
        raise NotPositiveDefiniteError(f"noise_cov must be positive semi-definite but has eigenvalue {lam[0]:.3g}")
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:  # singular PSD: a lower-triangular factor via QR
        half = vec * np.sqrt(np.clip(lam, 0, None))
        chol = np.linalg.qr(half.T)[1].T
        return chol * np.sign(np.diag(chol) + (np.diag(chol) == 0))


# --------------------------------------------------------------------------- the keyword forms of 0.1
def _removed_form(name: str, dynamics: Any, removed: dict[str, Any], new: str) -> None:
    """A one-line ``TypeError`` naming the new form for a call in the keyword form of 0.1 (removed in 0.2.0)."""
    if not isinstance(dynamics, Dynamics):
        raise TypeError(f"{name}(…, step_matrix, n_steps=…, …) is the form of 0.1, removed in 0.2.0: use {new} "
                        "(Dynamics and RunSpec from sgtune.core.config, the options from sgtune.sampler.registry)")
    if removed:
        raise TypeError(f"{name}() got an unexpected keyword argument {next(iter(removed))!r}; its settings are "
                        f"fields of Dynamics, RunSpec or the sampler's options: {new}")


# --------------------------------------------------------------------------- plan, run, summary
def _execute(prob: _Problem, dynamics: Dynamics, run: RunSpec, options: Any, spec: SamplerSpec, *,
             observables: Any, epoch_moments: bool, progress: ProgressCallback | None, backend: Any,
             batching: str | None = None) -> ChainResult:
    """Validate the dynamics for the sampler, build the plan, run it on the backend and summarise."""
    beta = default_inv_temperature(spec, dynamics.inv_temperature, int(prob.settings.get("n_data", 0)))
    _check_dynamics(spec, dynamics, backend)
    bat = dynamics.batching if batching is None else batching
    plan = _plan(prob, dynamics, run, options, spec, beta, bat, observables, epoch_moments)
    runner = _backend(backend, prob, plan)
    seconds, compile_seconds = run_plan(plan, runner, progress)
    settings = {**prob.settings, "sampler": spec.name, "batching": bat, "inv_temperature": float(beta),
                "momentum": dynamics.momentum, "decay": dynamics.decay,
                "step_kind": "dense" if plan.lam_kind == LAM_DENSE else "diagonal",
                "batches_per_chain": plan.recorder(False).acc_n.shape[1], "thin": run.thin,
                "backend": getattr(runner, "name", str(backend)), **options.settings()}
    return _result(plan, run, spec, settings, seconds, compile_seconds)


def _check_dynamics(spec: SamplerSpec, dyn: Dynamics, backend: Any) -> None:
    """The registry's rules for the step, momentum and decay of this sampler."""
    if spec.step_kind == "scalar":
        arr = np.asarray(dyn.step, dtype=float)
        if arr.size != 1:
            raise SgtuneError(f"sampler {spec.name!r} takes a scalar step size {spec.step_name}, got `step_matrix` "
                              f"of shape {arr.shape}; pass a number — a diagonal or dense Λ "
                              "is for sampler 'sgld', and psmile estimates a diagonal preconditioner itself")
        h = float(arr.reshape(-1)[0])
        if not (h > 0 and math.isfinite(h)):
            raise SgtuneError(f"sampler {spec.name!r} needs a finite step size > 0, got {h}")
    if dyn.momentum != 0.0 and not spec.momentum:
        alt = "its friction γ (friction=...)" if hasattr(spec.options, "friction") else "its own unit velocity u"
        raise SgtuneError(f"`momentum` κ = {dyn.momentum} is an SG(L)D option; sampler {spec.name!r} has "
                          f"{alt} — drop it (or use sampler 'sgld')")
    if dyn.decay != 0.0 and not spec.decay:
        raise SgtuneError(f"`decay` = {dyn.decay} schedules SG(L)D's Λ; sampler {spec.name!r} has no schedule "
                          "(smile/psmile tune ε themselves) — drop it")
    if backend == "python":
        raise SgtuneError("backend 'python' is the pure-Python reference backend object "
                          "sgtune.sampler.reference.ReferenceBackend() now; "
                          "pass backend='numba' or 'numpy', or a backend object")
    if not isinstance(backend, str) and not callable(getattr(backend, "advance", None)):
        raise SgtuneError(f"backend must be 'numba', 'numpy' or an object with prepare() and advance(), got {backend!r}")
    if isinstance(backend, str) and backend not in ("numba", "numpy"):
        raise SgtuneError(f"backend must be 'numba' or 'numpy' (or a backend object), got {backend!r}")


def _backend(backend: Any, prob: _Problem, plan: ChainPlan) -> Any:
    if not isinstance(backend, str):
        return backend
    if prob.kind == "python":
        return NumpyBackend()
    return NumbaBackend()


def _plan(prob: _Problem, dyn: Dynamics, run: RunSpec, options: Any, spec: SamplerSpec, beta: float, batching: str,
          observables: Any, epoch_moments: bool) -> ChainPlan:
    """Allocate the named records of the run (after the memory check) and pick the components."""
    d, C, T = prob.dim, run.n_chains, run.n_steps
    T0 = run.burn_in_steps
    lam, lam_kind, fac, inject = step_factors(dyn.step, d, beta, spec)
    obs = np.zeros((0, d)) if observables is None else as_float_array(observables, "observables")
    if obs.ndim == 1:
        obs = obs[None, :]
    if obs.ndim != 2 or obs.shape[1] != d:
        raise ShapeError(f"observables must be (K, D) with D = {d} but has shape {obs.shape}")
    S = run.segments
    n_data = prob.X.shape[0]
    if epoch_moments and batching != "reshuffle":
        raise SgtuneError("epoch_moments needs batching='reshuffle' (positions within an epoch)")
    R = -(-n_data // dyn.batch_size) if epoch_moments else 0
    n_trace = run.kept_steps // run.thin if run.thin > 0 else 0
    n_perm = n_data if batching in ("without-replacement", "reshuffle") else 1
    check_chain_memory(n_chains=C, n_steps=T, dim=d, n_trace=n_trace, n_segments=S, n_perm=n_perm,
                       n_positions=R, n_observables=obs.shape[0], mclmc=spec.mclmc)
    init = as_float_array(prob.initial, "initial")
    if init.shape == (d,):
        init = np.tile(init, (C, 1))
    elif init.shape != (C, d):
        raise ShapeError(f"initial must be (D,) = ({d},) or (C, D) = ({C}, {d}) but has shape {init.shape}")
    # per-chain permutations only where the batching uses them (C·N int64 would be 512 MB for N = 10⁶, C = 64)
    state = chain_state(init, chain_states(run.seed, C), perm=np.tile(np.arange(n_perm, dtype=np.int64), (C, 1)))
    h = float(np.asarray(dyn.step, dtype=float).reshape(-1)[0])
    params = step_params(lam=lam, fac=fac, momentum=dyn.momentum, inject=inject, inv_temp=float(beta),
                         friction=float(getattr(options, "friction", 1.0)), step=h)
    mc = mclmc_state(C, d, h, options.tuner_params(float(beta))) if spec.mclmc else mclmc_state(C)
    rec = recorder(C, d, segments=S, seg_len=run.kept_steps // S, thin=run.thin, n_trace=n_trace, positions=R,
                   observables=obs, step_trace=spec.mclmc)

    entry = ORACLES.get(prob.kind)
    work = int(entry.work_size(prob.ints, d, int(dyn.batch_size))) if entry is not None else 0
    grad_fn = None if entry is None else (entry.value_grad_fn if spec.needs_loss else entry.grad_fn)
    A, mu, chol = prob.quadratic if prob.quadratic is not None else (None, None, None)
    ora = oracle(X=prob.X, y=prob.y, ints=prob.ints, floats=prob.floats, hessian=A, mean=mu, noise_factor=chol,
                 prior_kind=int(prob.prior_kind), prior=prob.prior, work_len=work)
    return ChainPlan(sampler=spec.name, lam_kind=lam_kind, batching=batching, oracle_kind=prob.kind,
                     batch_fn=BATCH_FNS[batching], grad_fn=grad_fn, rule_fn=spec.rules[lam_kind],
                     move_fn=spec.moves.get(lam_kind), state=state, oracle=ora,
                     sched=Schedule(batch_size=int(dyn.batch_size), decay=float(dyn.decay)), params=params, mclmc=mc,
                     recorder=lambda last: rec._replace(flush=bool(last)), burn_in=T0, n_steps=T,
                     py_model=prob.py_model, is_mclmc=spec.mclmc,
                     init_fn=init_velocity if spec.mclmc else None)


def _result(plan: ChainPlan, run: RunSpec, spec: SamplerSpec, settings: dict[str, Any], seconds: float,
            compile_seconds: float) -> ChainResult:
    """Summarise the records of a finished plan into a :class:`ChainResult`."""
    rec = plan.recorder(True)
    diverged = plan.state.diverged
    C, d = plan.state.theta.shape
    T, S = run.n_steps, rec.acc_n.shape[1]
    ok = diverged < 0
    if not ok.any():
        raise UnstableStepSizeError(
            f"all {C} chains diverged (first at step {int(diverged.min())}); the step size is too large — "
            "reduce step_matrix (e.g. by a factor 2) or check it with the forward prediction",
            spectral_radius=float("nan"))
    acc_n, acc_mean, acc_m2 = rec.acc_n, rec.acc_mean, rec.acc_m2
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
    obs_means = rec.obs_sum / np.maximum(n_post, 1)[:, None] if rec.obs.shape[0] else None
    pmean = pvar = None
    if rec.pos_n.shape[1]:
        pmean, pvar = _merge_positions(rec.pos_n[ok], rec.pos_mean[ok], rec.pos_m2[ok])
    extra = _mclmc_extras(plan, rec, T, d, run.thin) if spec.mclmc else {}
    return ChainResult(mean=summary[0], cov=summary[1], mean_standard_error=summary[2],
                       cov_standard_error=summary[3], ess=summary[4], n_batches=summary[5],
                       chain_means=chain_means, chain_covs=chain_covs, batch_covs=summary[6],
                       trace=rec.trace if run.thin > 0 else None, observable_means=obs_means,
                       epoch_position_mean=pmean, epoch_position_var=pvar, diverged_at=diverged,
                       clip_fraction=float(plan.state.clip_count.sum() / max(1, C * T * d)),
                       final_state=plan.state.theta, n_steps=T, burn_in=plan.burn_in, n_chains=C, seed=run.seed,
                       seconds=seconds, compile_seconds=compile_seconds, settings=settings, half_means=half_means,
                       half_variances=half_vars, **extra)


def _mclmc_extras(plan: ChainPlan, rec: Recorder, T: int, d: int, thin: int) -> dict[str, Any]:
    """The SMILE samplers' per-chain step size, rejection and energy-error statistics, pSMILE's preconditioner."""
    mc = plan.mclmc
    diverged = plan.state.diverged
    n_done = np.where(diverged >= 0, np.maximum(diverged, 1), T).astype(float)
    stats = mc.stats
    extra = {"step_size_final": mc.step.copy(), "rejection_fraction": stats[:, STAT_REJECTIONS] / n_done,
             "energy_error_mean": stats[:, STAT_DE_SUM] / n_done,
             "energy_error_abs_mean": stats[:, STAT_ABS_DE_SUM] / n_done,
             "energy_error_var_per_dim": stats[:, STAT_DE_SQ_SUM] / n_done / d,
             "step_size_trace": rec.step_trace if thin > 0 else None}
    if mc.params.precond:
        corr = 1.0 - (1.0 - float(mc.params.alpha)) ** np.maximum(mc.pcount, 1)
        extra["preconditioner"] = 1.0 / mc.ipre
        extra["gradient_sd"] = np.sqrt(mc.gvar / corr[:, None])
    extra.update(refresh_report(mc, d))
    return extra



def step_factors(step_matrix: Any, dim: int, inv_temperature: float,
                 spec: SamplerSpec | None = None) -> tuple[np.ndarray, int, np.ndarray, bool]:
    """The engine's step inputs (Λ as (D, D), kind, factor L of 2Λ/β, inject) from a scalar, diagonal or dense Λ.

    A sampler whose registry entry takes a diagonal step (SGLRW, clipped SGLD) refuses a dense Λ and β = ∞.

    Parameters
    ----------
    step_matrix : float or array_like
        Λ: a scalar, a (D,) diagonal or a (D, D) matrix.
    dim : int
        D.
    inv_temperature : float
        The inverse temperature β (``inf``: no injected noise).
    spec : SamplerSpec or None, optional
        The sampler whose step kind is checked.

    Returns
    -------
    lam : (D, D) ndarray
        Λ.
    kind : int
        ``LAM_DIAG`` or ``LAM_DENSE`` (:mod:`sgtune.sampler.state`).
    factor : (D, D) ndarray
        A factor L with LLᵀ = 2Λ/β (zeros without noise).
    inject : bool
        Whether noise is injected (β < ∞).

    Raises
    ------
    ShapeError
        Λ of the wrong shape.
    NotPositiveDefiniteError
        A non-positive diagonal, or a dense Λ that is not SPD while β < ∞.
    SgtuneError
        A dense Λ or β = ∞ for a diagonal-step sampler.

    Examples
    --------
    >>> from sgtune.sampler.driver import step_factors
    >>> lam, kind, factor, inject = step_factors(0.5, 2, 4.0)
    >>> lam, factor, inject
    (array([[0.5, 0. ],
           [0. , 0.5]]), array([[0.5, 0. ],
           [0. , 0.5]]), True)
    """
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
    if spec is not None and spec.step_kind == "diagonal":
        if kind == LAM_DENSE:
            raise SgtuneError(f"sampler {spec.name!r} needs a scalar or diagonal step_matrix (coordinatewise moves); "
                              "use sampler='sgld' for a dense Λ")
        if not inject:
            raise SgtuneError(f"sampler {spec.name!r} needs a finite inverse temperature (it moves by "
                              "±sqrt(2Λ_ii/β)); pass inv_temperature=N or a number")
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
    # fresh writable copies: a read-only Λ (Dynamics keeps one) would be another numba type, another compile
    return np.array(lam, order="C"), kind, np.array(fac, order="C"), inject


def _map_start(model: Any, rec: ModelRecord, ds: Dataset, gam: np.ndarray, d: int, seed: int) -> np.ndarray:
    """θ̂ = ``fit_map(model, ds, Γ, seed=seed)`` as the chains' start (the default ``initial``); ``rec`` is the
    model's :func:`~sgtune.models.base.model_record` (its methods and fit method)."""
    needs = ["per_sample_losses"] + (["initial_params"] if rec.fit_method != "newton" else [])
    missing = [m for m in needs if m not in rec.methods]
    if missing:
        raise SgtuneError(f"initial is required for model {rec.label}: the default start θ̂ is fitted by fit_map, which "
                          f"needs {' and '.join(f'{m}()' for m in missing)}; pass initial=<(D,) = ({d},) array>")
    try:
        return fit_map(model, ds, gam, seed=seed).theta_hat
    except ConvergenceError as exc:
        raise ConvergenceError(f"{exc} (run_chains fits θ̂ as the start when initial is not given; or pass "
                               f"initial=<(D,) = ({d},) array>)", residual=exc.residual, method=exc.method) from None


def parameter_dim(label: str, n_params: Any, spec: tuple[str, np.ndarray, np.ndarray] | None, n_features: int) -> int:
    """The number of parameters D of the model ``label`` on p = ``n_features`` features.

    Its ``n_params(p)`` if it has one (checked against the numba spec's count), else the spec's count,
    else p. The caller reads the model's answers from :func:`sgtune.models.base.model_record`, so that the
    model is visited once.

    Parameters
    ----------
    label : str
        The model's label, for messages.
    n_params : int or None
        The model's ``n_params(p)``, or None when it has no such method.
    spec : tuple or None
        Its numba spec ``(kind, ints, floats)``, if it has one.
    n_features : int
        The number of features p.

    Returns
    -------
    int
        D.

    Raises
    ------
    ShapeError
        The spec's input width differs from p.
    SgtuneError
        ``n_params`` disagrees with the spec.

    Examples
    --------
    >>> from sgtune.models import make_mlp
    >>> from sgtune.sampler.driver import parameter_dim
    >>> net = make_mlp([3])
    >>> parameter_dim("mlp", net.n_params(2), net.numba_spec(2), 2)
    13
    """
    own = None if n_params is None else check_int(n_params, f"{label}.n_params({n_features})", low=1)
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
    """Estimated peak bytes of :func:`run_chains`, by part.

    ``draws`` (the kept trace, C × T' × D float64, plus the step-size trace of the SMILE samplers),
    ``moments`` (the streaming Welford sums, C × S × D² and their merge's temporaries, about four
    more copies) and ``state`` (positions, momenta, RNG states, permutations, per-position epoch
    moments, covariance blocks).

    Parameters
    ----------
    n_chains : int
        C.
    dim : int
        D.
    n_trace : int
        Draws kept per chain T'.
    n_segments : int
        Segments per chain S.
    n_perm : int, optional
        Length of a reshuffling permutation.
    n_positions : int, optional
        Positions within an epoch with their own moments.
    n_observables : int, optional
        Linear observables.
    mclmc : bool, optional
        The SMILE samplers (their extra state and step-size trace).

    Returns
    -------
    dict of str to int
        Bytes for ``draws``, ``moments`` and ``state``.

    Examples
    --------
    >>> from sgtune.sampler.driver import chain_memory
    >>> parts = chain_memory(n_chains=4, dim=10, n_trace=1000, n_segments=8)
    >>> parts["draws"] == 8 * 4 * 1000 * 10
    True
    """
    C, d, S = int(n_chains), int(dim), int(n_segments)
    draws = 8 * C * int(n_trace) * (d + (1 if mclmc else 0))
    moments = 8 * C * S * (d * d + d + 1) * 5 + 8 * C * (d * d + d)
    state = 8 * C * (4 * d + 4 + 3 + int(n_perm) + int(n_positions) * (2 * d + 1) + COV_BLOCK * d + 2
                     + int(n_observables) + (6 * d + 12 if mclmc else 0))
    return {"draws": draws, "moments": moments, "state": state}


def check_chain_memory(*, n_chains: int, n_steps: int, dim: int, n_trace: int, n_segments: int,
                       n_perm: int = 1, n_positions: int = 0, n_observables: int = 0, mclmc: bool = False) -> None:
    """Refuse, before allocating anything, chains whose :func:`chain_memory` exceeds the memory available.

    Parameters
    ----------
    n_chains, n_steps, dim, n_trace, n_segments : int
        C, T, D, the draws kept per chain and the segments per chain.
    n_perm, n_positions, n_observables : int, optional
        As in :func:`chain_memory`.
    mclmc : bool, optional
        As in :func:`chain_memory`.

    Raises
    ------
    InsufficientMemoryError
        The estimate exceeds the available memory: the message gives both numbers and says which
        setting to lower, instead of a MemoryError or the kernel's OOM kill.

    Examples
    --------
    >>> from sgtune.sampler.driver import check_chain_memory
    >>> check_chain_memory(n_chains=4, n_steps=1000, dim=10, n_trace=0, n_segments=8) is None
    True
    """
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
