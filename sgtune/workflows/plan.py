r"""``sgtune plan``: the cheapest SG(L)D run that meets an accuracy, computed before running it.

For every configuration of a grid — batch size B, step-size family, momentum κ, batching scheme,
inverse temperature β — with C independent chains, the planner tunes Λ to the target Σ*
(:func:`sgtune.theory.tuning.tune`) and reads off, exactly for the linearised chain:

- the **bias** b = ‖Σ(Λ) − Σ*‖_F/‖Σ*‖_F (zero for the dense family; the structured families cannot
  reach every target);
- the **Monte Carlo constant** c = lim T·E‖Ŝ_T − Σ(Λ)‖²_F/‖Σ*‖²_F (:mod:`sgtune.theory.mcerror`,
  Gaussian fourth moments);
- the **burn-in** t₀ = :func:`~sgtune.theory.stationary.equilibration_steps` of the second-moment map's
  spectral radius (the steps from θ̂ until every second moment is within 1 % of stationary, as in the
  applicability report).

The predicted RMS relative error of the covariance pooled over C chains of T steps after burn-in is
sqrt(b² + c/(T·C)), so the tolerance E needs T = ⌈c/(C·(E² − b²))⌉ steps (never fewer than
``MIN_TAU_MULTIPLE`` integrated autocorrelation times, where the asymptotic formula starts to hold), and
the run costs C·B·(t₀ + T) gradient evaluations. A configuration with b ≥ E is infeasible at any length.
``predicted_seconds`` is a cost model of sgtune's own sampler on this machine, a + b·(t₀ + T): a fixed
cost per run and a wall time per step, calibrated once per process and configuration (batch size, Λ
kind, momentum, batching, chains) from the fastest of repeated short runs of the compiled kernel at two
lengths (compilation excluded; ``sampler_cost`` of this module). With an exactly tuned Λ the gradient evaluations
per unit of precision barely depend on B (c/B scales like the gradient noise), so the per-step overhead
decides the wall time. The recommendation minimises the objective with ties broken by the candidate's
place in the grid, never by a measured time (``--objective seconds`` counts predictions within
``SECONDS_TIE``, 50 %, of the fastest as tied: the timings' noise on a shared machine is 10–20 %). A candidate is infeasible when its run would need more than
:data:`~sgtune.core.config.MAX_STEPS` steps per chain or more memory than this machine has. ``steps``
(T) excludes the burn-in; ``run_steps`` = t₀ + T is what ``sgtune run --steps`` takes.

Large D: above ``FAST_DENSE_DIM`` the dense SGD family skips the forward solve (its Σ(Λ) is Σ* by
construction) and the burn-in comes from the certified bound on the spectral radius
(1 − λ_min(Σ*^{-1/2}Q₀Σ*^{-1/2})). The structured families take the closed form of
:func:`sgtune.theory.tuning.structured_step_matrix` (``family_criterion="moment"``) rather than the
discrepancy fit, which costs an adjoint solve per optimiser step; their bias is exact either way. Each candidate's ``bounds`` lists the numbers that are upper bounds rather than values.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.linalg as sla

from ..core._validation import available_memory, check_int, check_positive, format_bytes
from ..core.config import BATCHINGS, MAX_STEPS, Dynamics
from ..core.errors import ConvergenceError, InfeasibleTargetError, SgtuneError, UnstableStepSizeError
from ..core.results import ResultMixin, SummaryTable, resolve_parameter_names
from ..io.data import Dataset
from ..models import Expansion
from ..core.config import Dynamics, RunSpec
from ..sampler import run_chains
from ..sampler.driver import chain_memory
from ..theory.alternatives import modal_directions
from ..theory.mcerror import cov_error_constant, mc_error
from ..theory.linear_chain import LinearChain
from ..theory.stationary import ARPACK_MAX_DIM, finite_population_factor, noise_covariance
from ..theory.largescale import stationary_cov_from_target_momentum
from ..theory.tuning import (FAMILIES, structured_momentum_step_matrix,
                             structured_step_matrix, target_covariance, tune, tuning_residual)
from .run_length import minimum_burn_in, steps_for_error

__all__ = ["Candidate", "Plan", "plan_run", "PlanGrid", "TimingOptions", "recommend", "clear_cost_cache", "BATCHINGS",
           "OBJECTIVES", "DEFAULT_BATCH_SIZES", "DEFAULT_FAMILIES", "MIN_TAU_MULTIPLE", "PLAN_FIT_MAX_DIM",
           "FAST_DENSE_DIM", "TIMING_REPEATS", "SECONDS_TIE"]

OBJECTIVES = ("gradients", "seconds")
DEFAULT_BATCH_SIZES = (8, 16, 32, 64, 128, 256)
DEFAULT_FAMILIES = ("dense", "diagonal", "scalar")
#: the planned run is never shorter than this many τ_worst (finite-T corrections to c are O(τ/T))
MIN_TAU_MULTIPLE = 50
#: with ``family_criterion=None``, structured families above this D use the closed form instead of the fit
PLAN_FIT_MAX_DIM = 50
#: the dense SGD family above this D skips the forward solve and bounds the spectral radius
FAST_DENSE_DIM = ARPACK_MAX_DIM
#: relative GMRES tolerance of the structured families' Σ(Λ) − Σ* at large D (the bias to ≈ 4 digits; each
#: further digit costs about one O(N·D²) pass over the data per candidate)
PLAN_COV_TOL = 1e-4
#: wall-clock budget of the sampler timings' measured work (seconds, all configurations together; compilation
#: and the fixed cost of the short probing runs come on top)
TIME_BUDGET = 1.0
#: each configuration's cost model is the fastest of this many timings at each of its two lengths
TIMING_REPEATS = 5
#: the short timing length: ≥ the engine's 50 chunks, so both lengths pay the same per-call overhead
TIMING_SHORT = 64
#: with ``objective="seconds"``, predictions within this fraction of the fastest count as tied. The timings come
#: from short runs on a machine other work shares: the same candidate measured 1.10× and 1.19× the fastest on two
#: identical runs (2 cores, loaded), so a 10 % band recommended B = 64 once and B = 128 the next time. Only a wall
#: time 1.5× the fastest or more is a difference the timings vouch for; within it the fewest chain-steps (the least
#: per-step overhead, a count, not a timing) decides
SECONDS_TIE = 0.5

@dataclass
class Candidate:
    """One configuration of the grid and what the plan predicts for it (``to_dict``: the JSON entry).

    Attributes
    ----------
    batch_size, chains : int
        The configuration's B and C.
    family, batching : str
        Its step-size family and batching scheme.
    momentum, inverse_temperature : float
        Its κ and β.
    feasible : bool
        Whether a run of this configuration meets the tolerance.
    reason : str or None
        Why not, when infeasible.
    covariance_error, cov_mc_error_constant : float
        The bias b and the Monte Carlo constant c (module docstring).
    burn_in_steps, steps : float
        t₀ and T (after burn-in) per chain.
    memory_bytes : float
        The memory of the run's chains.
    gradient_evaluations : float
        C·B·(t₀ + T).
    predicted_seconds, seconds_per_step, seconds_per_run : float
        The cost model a + b·(t₀ + T) and its b and a.
    predicted_rms_error : float
        sqrt(b² + c/(T·C)).
    spectral_radius, tau_worst : float
        The second-moment map's spectral radius and the largest integrated autocorrelation time.
    bounds, approximate : list of str
        The numbers that are upper bounds, or approximations, rather than values.
    notes : list of dict
        The other papers' notes (:mod:`sgtune.workflows.plan_notes`).
    extra : dict
        The notes' headline numbers as extra columns.
    step_matrix : ndarray or None
        The tuned Λ.
    stationary : StationaryCov or None
        The prediction for Λ.
    modes : ModalDirections or None
        The modal directions of (H, Λ), when already computed.

    Examples
    --------
    >>> c = Candidate(32, "diagonal", 0.0, "replacement", float("inf"), 4)
    >>> c.feasible, c.lam_kind
    (False, 'diagonal')
    """

    batch_size: int
    family: str
    momentum: float
    batching: str
    inverse_temperature: float
    chains: int
    feasible: bool = False
    reason: str | None = None
    covariance_error: float = math.inf
    cov_mc_error_constant: float = math.inf
    burn_in_steps: float = math.inf
    steps: float = math.inf
    memory_bytes: float = math.nan
    gradient_evaluations: float = math.inf
    predicted_seconds: float = math.inf
    seconds_per_step: float = math.nan
    seconds_per_run: float = 0.0
    predicted_rms_error: float = math.inf
    spectral_radius: float = math.nan
    tau_worst: float = math.nan
    bounds: list[str] = field(default_factory=list)
    approximate: list[str] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)
    step_matrix: np.ndarray | None = field(default=None, repr=False)
    stationary: Any = field(default=None, repr=False)
    modes: Any = field(default=None, repr=False)  # ModalDirections of (H, Λ) when already computed

    @property
    def run_steps(self) -> float:
        """t₀ + T: the ``n_steps`` of the run that executes the candidate (burn-in included)."""
        return self.burn_in_steps + self.steps

    def run_spec(self, seed: int = 0) -> RunSpec:
        """The :class:`~sgtune.core.config.RunSpec` that executes the candidate (feasible ones only)."""
        if not self.feasible:
            raise SgtuneError(f"candidate is infeasible: {self.reason}")
        return RunSpec(int(self.run_steps), n_chains=self.chains, burn_in=int(self.burn_in_steps), seed=seed)

    @property
    def lam_kind(self) -> str:
        """How the sampler applies Λ (it decides the per-step cost): ``dense`` or ``diagonal``."""
        return "dense" if self.family in ("dense", "block") else "diagonal"

    def to_dict(self) -> dict[str, Any]:
        def num(x: float) -> Any:
            if isinstance(x, (int, np.integer)):
                return int(x)
            return float(x) if math.isfinite(x) else "inf"

        out: dict[str, Any] = {
            "batch_size": self.batch_size, "family": self.family, "momentum": self.momentum,
            "batching": self.batching,
            "inverse_temperature": "inf" if math.isinf(self.inverse_temperature) else self.inverse_temperature,
            "chains": self.chains, "covariance_error": num(self.covariance_error),
            "cov_mc_error_constant": num(self.cov_mc_error_constant),
            "burn_in_steps": _int_or_inf(self.burn_in_steps), "steps": _int_or_inf(self.steps),
            "steps_after_burn_in": _int_or_inf(self.steps), "run_steps": _int_or_inf(self.run_steps),
            "memory_bytes": _int_or_inf(self.memory_bytes) if math.isfinite(self.memory_bytes) else "inf",
            "gradient_evaluations": _int_or_inf(self.gradient_evaluations),
            "predicted_seconds": num(self.predicted_seconds), "feasible": self.feasible,
            "predicted_rms_error": num(self.predicted_rms_error),
            "spectral_radius": num(self.spectral_radius) if math.isfinite(self.spectral_radius) else "inf",
            "tau_worst": num(self.tau_worst) if math.isfinite(self.tau_worst) else "inf",
            "seconds_per_step": num(self.seconds_per_step) if math.isfinite(self.seconds_per_step) else "inf",
            "bounds": list(self.bounds), "approximate": list(self.approximate), "notes": list(self.notes),
        }
        out.update({k: num(v) for k, v in self.extra.items()})
        if not self.feasible:
            out["reason"] = self.reason or "infeasible"
        return out


def _int_or_inf(x: float) -> Any:
    return int(x) if math.isfinite(x) else "inf"


@dataclass(repr=False)
class Plan(ResultMixin):
    """Result of :func:`plan_run`.

    Attributes
    ----------
    candidates : list of Candidate
        Every configuration of the grid with its prediction.
    recommended : int or None
        The index of the recommended candidate (None: none is feasible).
    objective : str
        What the recommendation minimises, ``"gradients"`` or ``"seconds"``.
    tolerance : float
        The RMS relative error E the run must reach.
    chains : int
        C, the chains run in parallel.
    target_cov : (D, D) ndarray
        Σ*.
    timing_seconds, tuning_seconds : float
        Time spent timing the sampler and tuning the candidates.
    parameter_names : tuple of str
        The name of each coordinate of θ: the rows of ``target_cov`` and of each candidate's Λ.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.workflows.plan import PlanGrid, TimingOptions, plan_run
    >>> data, model = example("logistic"), get_model("logistic")
    >>> plan = plan_run(model, data, expand(model, data), tolerance=0.1,
    ...                 grid=PlanGrid(batch_sizes=[16, 64], families=("dense",)),
    ...                 timing=TimingOptions(enabled=False), notes=False)
    >>> len(plan.candidates), plan.best is plan.candidates[plan.recommended]
    (2, True)
    """

    candidates: list[Candidate]
    recommended: int | None
    objective: str
    tolerance: float
    chains: int
    target_cov: np.ndarray
    timing_seconds: float
    tuning_seconds: float
    parameter_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        self.parameter_names = resolve_parameter_names(self.parameter_names, np.shape(self.target_cov)[0])

    def _repr_items(self) -> list[tuple[str, Any]]:
        best = self.best
        items: list[tuple[str, Any]] = [("D", np.shape(self.target_cov)[0]), ("candidates", len(self.candidates)),
                                        ("feasible", sum(c.feasible for c in self.candidates)),
                                        ("tolerance", self.tolerance), ("objective", self.objective)]
        if best is not None:
            items += [("recommended", f"B={best.batch_size} {best.family} κ={best.momentum:g} {best.batching}")]
        return items

    def summary(self) -> SummaryTable:
        """One row per candidate: its configuration, covariance error, steps, cost and feasibility."""
        cols = ("batch_size", "family", "momentum", "batching", "covariance_error", "steps", "gradient_evaluations",
                "predicted_seconds", "feasible")
        rows = tuple((c.batch_size, c.family, c.momentum, c.batching, c.covariance_error, c.steps,
                      c.gradient_evaluations, c.predicted_seconds, c.feasible) for c in self.candidates)
        index = tuple(("* " if i == self.recommended else "") + str(i) for i in range(len(self.candidates)))
        return SummaryTable(
            title=f"Plan: {len(self.candidates)} candidates, tolerance {self.tolerance:g}, objective {self.objective}",
            index=index, columns=cols, rows=rows, index_name="candidate",
            info=(("recommended", "none feasible" if self.recommended is None else self.recommended),
                  ("chains", self.chains), ("D", np.shape(self.target_cov)[0])),
            notes=("* marks the recommended candidate; steps exclude burn-in.",))

    def to_dataframe(self) -> Any:
        """The candidates as a pandas ``DataFrame`` (every key of ``Candidate.to_dict``; needs pandas)."""
        from ..core.results import require_pandas

        pd = require_pandas()
        return pd.DataFrame([c.to_dict() for c in self.candidates]).rename_axis("candidate")

    def to_dict(self) -> dict[str, Any]:
        """The candidates (their JSON entries), the recommendation, the target and the names."""
        return {"parameter_names": list(self.parameter_names or ()), "candidates": [c.to_dict() for c in self.candidates],
                "recommended": self.recommended, "objective": self.objective, "tolerance": self.tolerance,
                "chains": self.chains, "target_cov": self.target_cov}

    @property
    def best(self) -> Candidate | None:
        return None if self.recommended is None else self.candidates[self.recommended]

    def pareto_front(self) -> list[int]:
        """Indices of the feasible candidates not beaten on both gradient evaluations and seconds."""
        feas = [i for i, c in enumerate(self.candidates) if c.feasible]
        front = []
        for i in feas:
            a = self.candidates[i]
            dominated = any(
                (b.gradient_evaluations <= a.gradient_evaluations and b.predicted_seconds <= a.predicted_seconds)
                and (b.gradient_evaluations < a.gradient_evaluations or b.predicted_seconds < a.predicted_seconds)
                for j in feas for b in [self.candidates[j]] if j != i)
            if not dominated:
                front.append(i)
        return front


# --------------------------------------------------------------------------- public API
@dataclass(frozen=True)
class PlanGrid:
    """The configurations a plan compares: every combination of the listed values, with C chains each.

    Parameters
    ----------
    batch_sizes : iterable of int or None, optional
        The batch sizes B (default ``DEFAULT_BATCH_SIZES`` up to N).
    families : iterable of str, optional
        The step-size families (:data:`~sgtune.theory.tuning.FAMILIES`).
    momenta : iterable of float, optional
        The heavy-ball momenta κ ∈ [0, 1).
    batchings : iterable of str, optional
        The batching schemes (:data:`~sgtune.core.config.BATCHINGS`).
    inverse_temperatures : iterable of float, optional
        The inverse temperatures β (``inf`` is SGD).
    chains : int, optional
        C, independent chains run in parallel.

    Examples
    --------
    >>> from sgtune.workflows.plan import PlanGrid
    >>> PlanGrid(batch_sizes=(16, 64)).families
    ('dense', 'diagonal', 'scalar')
    """

    batch_sizes: Any = None
    families: Any = DEFAULT_FAMILIES
    momenta: Any = (0.0,)
    batchings: Any = ("replacement",)
    inverse_temperatures: Any = (math.inf,)
    chains: int = 4


@dataclass(frozen=True)
class TimingOptions:
    """How a plan times sgtune's sampler for ``predicted_seconds`` (module docstring).

    Parameters
    ----------
    enabled : bool, optional
        Time the sampler; False leaves ``predicted_seconds`` infinite (tests, or no sampler).
    budget : float, optional
        Seconds of sampler timing in all (compilation not counted).
    seed : int, optional
        Seed of the timed runs.

    Examples
    --------
    >>> from sgtune.workflows.plan import TimingOptions
    >>> TimingOptions(enabled=False).budget
    1.0
    """

    enabled: bool = True
    budget: float = TIME_BUDGET
    seed: int = 0


def plan_run(model: Any, dataset: Dataset, expansion: Expansion, *, tolerance: float, target: Any = "sandwich",
             grid: PlanGrid | None = None, objective: str = "gradients", prior_precision: Any = 0.0,
             timing: TimingOptions | None = None, notes: bool = True, family_criterion: str | None = "moment",
             progress: Callable[[str], None] | None = None) -> Plan:
    r"""Evaluate the grid and recommend the cheapest feasible configuration (module docstring).

    Parameters
    ----------
    model : PerSampleModel
        The model.
    dataset : Dataset
        Its data.
    expansion : Expansion
        The expansion at θ̂.
    tolerance : float
        E, the RMS relative error ‖Ŝ − Σ*‖_F/‖Σ*‖_F the run must reach.
    target : "sandwich", "posterior" or (D, D) array
        Σ*.
    grid : PlanGrid, optional
        The configurations compared (default ``PlanGrid()``).
    objective : {"gradients", "seconds"}
        What ``recommended`` minimises among the feasible candidates.
    prior_precision : float or (D, D)
        Γ, for the timed sampler runs.
    timing : TimingOptions, optional
        The sampler timings behind ``predicted_seconds`` (default ``TimingOptions()``).
    notes : bool
        Add the other papers' theories where they apply (:mod:`sgtune.workflows.plan_notes`).
    family_criterion : {"moment", "auto", "discrepancy", None}
        How the structured families' Λ is chosen (:func:`~sgtune.theory.tuning.tune`): ``"moment"``
        (default) the closed form of eq. (11)'s family part — fast, and its bias (exact, whatever Λ) is
        often as small as the discrepancy fit's; None: ``"auto"`` up to D = ``PLAN_FIT_MAX_DIM``, else
        ``"moment"``.
    progress : callable(str), optional
        Called with a short message per candidate.

    Returns
    -------
    Plan
        The candidates with their predicted error, cost and feasibility, and the recommendation.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.workflows.plan import PlanGrid, TimingOptions, plan_run
    >>> data, model = example("logistic"), get_model("logistic")
    >>> plan = plan_run(model, data, expand(model, data), tolerance=0.1,
    ...                 grid=PlanGrid(batch_sizes=[16, 64], families=("dense",)),
    ...                 timing=TimingOptions(enabled=False), notes=False)
    >>> [candidate.batch_size for candidate in plan.candidates], plan.objective
    ([16, 64], 'gradients')
    """
    E = check_positive(tolerance, "tolerance")
    grid = PlanGrid() if grid is None else grid
    timing = TimingOptions() if timing is None else timing
    if objective not in OBJECTIVES:
        raise SgtuneError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    S_star = target_covariance(expansion, target)
    ctx = _Context(expansion, S_star)
    t0 = time.perf_counter()
    cands = [_candidate(ctx, model, dataset, cand, E, notes=notes, family_criterion=family_criterion,
                        progress=progress) for cand in _grid_candidates(grid, expansion.n_data)]
    tuning_seconds = time.perf_counter() - t0
    for c in cands:
        if c.feasible:
            _check_resources(c, expansion.dim, expansion.n_data)
    t1 = time.perf_counter()
    if timing.enabled:
        _time_candidates(model, dataset, expansion, cands, prior_precision, timing.budget, timing.seed)
    timing_seconds = time.perf_counter() - t1
    for c in cands:
        if c.feasible and math.isfinite(c.seconds_per_step):
            c.predicted_seconds = c.chains * c.run_steps * c.seconds_per_step + c.seconds_per_run
    return Plan(candidates=cands, recommended=recommend(cands, objective), objective=objective, tolerance=E,
                chains=int(grid.chains), target_cov=S_star, timing_seconds=timing_seconds,
                tuning_seconds=tuning_seconds, parameter_names=expansion.parameter_names)


def _grid_candidates(grid: PlanGrid, n: int) -> list[Candidate]:
    """The grid's configurations (validated), β outermost and B innermost, as empty candidates."""
    C = check_int(grid.chains, "chains", low=1)
    Bs = _batch_sizes(grid.batch_sizes, n)
    fams = _choices(grid.families, FAMILIES, "family")
    bats = _choices(grid.batchings, BATCHINGS, "batching")
    moms = [float(k) for k in grid.momenta]
    for k in moms:
        if not 0.0 <= k < 1.0:
            raise SgtuneError(f"momentum must lie in [0, 1), got {k}")
    betas = [check_positive(b, "inverse_temperature", allow_inf=True) for b in grid.inverse_temperatures]
    return [Candidate(batch_size=B, family=fam, momentum=kappa, batching=bat, inverse_temperature=beta, chains=C)
            for beta in betas for bat in bats for kappa in moms for fam in fams for B in Bs]


def _candidate(ctx: _Context, model: Any, dataset: Dataset, cand: Candidate, E: float, *, notes: bool,
               family_criterion: str | None, progress: Callable[[str], None] | None) -> Candidate:
    """One candidate evaluated (bias, c, burn-in, steps, cost), with the notes that apply to it."""
    if progress is not None:
        progress(f"B = {cand.batch_size}, {cand.family}, κ = {cand.momentum:g}, {cand.batching}, "
                 f"β = {cand.inverse_temperature:g}")
    _evaluate(ctx, cand, E, family_criterion)
    if notes and cand.feasible:
        from .plan_notes import add_notes

        add_notes(ctx, model, dataset, cand, E)
    return cand


def recommend(cands: list[Candidate], objective: str) -> int | None:
    """Return the index of the feasible candidate that minimises ``objective``.

    Ties go to the earlier candidate of the grid (a deterministic key), never to a measured time. With
    ``"seconds"``, predictions within ``SECONDS_TIE`` (50 %) of the fastest are tied, and the one with the fewest
    chain-steps among them wins (then the fewest gradient evaluations): differences in the timings smaller than
    that are within their noise, and the recommendation must not change between identical runs. Breaking the
    tie by the fewest gradient evaluations picked the smallest B in the band, the candidate at its edge, whose
    place in or out of the band is what the noise decides.

    Parameters
    ----------
    cands : list of Candidate
        The grid, in order.
    objective : {"gradients", "seconds"}
        What to minimise.

    Returns
    -------
    int or None
        The index, or None when no candidate is feasible.

    Examples
    --------
    >>> cands = [Candidate(b, "dense", 0.0, "replacement", float("inf"), 4, feasible=True,
    ...                    gradient_evaluations=g) for b, g in [(16, 2e5), (64, 1e5), (128, 1e5)]]
    >>> recommend(cands, "gradients")
    1
    """
    feasible = [i for i, c in enumerate(cands) if c.feasible]
    if not feasible:
        return None
    if objective == "seconds":
        fastest = min(cands[i].predicted_seconds for i in feasible)
        if math.isfinite(fastest):
            tied = [i for i in feasible if cands[i].predicted_seconds <= fastest * (1.0 + SECONDS_TIE)]
            # the fewest chain-steps: the least per-step overhead, and the fast side of the band, never its edge
            return min(tied, key=lambda i: (cands[i].chains * cands[i].run_steps, cands[i].gradient_evaluations, i))
    return min(feasible, key=lambda i: (cands[i].gradient_evaluations, i))


def _check_resources(cand: Candidate, dim: int, n_data: int) -> None:
    """Mark infeasible a run longer than ``MAX_STEPS`` per chain or larger than this machine's memory."""
    if cand.run_steps > MAX_STEPS:
        cand.feasible = False
        cand.reason = (f"the run needs {cand.run_steps:.3g} steps per chain (> 10^12, about a day per chain at "
                       "10^7 steps a second): loosen the tolerance or use more chains")
        return
    segments = RunSpec(int(cand.run_steps), n_chains=cand.chains, burn_in=int(cand.burn_in_steps)).segments
    need = sum(chain_memory(n_chains=cand.chains, dim=dim, n_trace=0, n_segments=segments,
                            n_perm=1 if cand.batching == "replacement" else n_data).values())
    cand.memory_bytes = float(need)
    avail = available_memory()
    if avail is not None and need > avail:
        cand.feasible = False
        cand.reason = (f"the run needs about {format_bytes(need)} of memory but this machine has {format_bytes(avail)} "
                       "available: use fewer chains")


# --------------------------------------------------------------------------- internals
class _Context:
    """What every candidate shares: the expansion, Σ*, and the B-independent noise bracket at Σ*."""

    def __init__(self, expansion: Expansion, target_cov: np.ndarray) -> None:
        self.expansion = expansion
        self.target_cov = target_cov
        self.target_norm2 = float(np.sum(target_cov * target_cov))
        self._bracket: np.ndarray | None = None
        self._hsh: np.ndarray | None = None
        self._modes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def noise_at_target(self, B: int, without_replacement: bool) -> np.ndarray:
        """C̄(Σ*) = (f/B)·K, K = 𝓘 − ḡḡᵀ + mean J_nΣ*J_n − JΣ*J computed once (one pass over the data)."""
        e = self.expansion
        if self._bracket is None:
            self._bracket = noise_covariance(e, self.target_cov, Dynamics(None, 1))
        return self._bracket * (finite_population_factor(e.n_data, B, without_replacement) / B)

    def target_modes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(L, μ, U): Σ* = LLᵀ and LᵀHL = U diag(μ) Uᵀ, shared by every dense candidate (B-independent)."""
        if self._modes is None:
            L = np.linalg.cholesky(self.target_cov)
            M = L.T @ self.expansion.hessian @ L
            mu, U = np.linalg.eigh(0.5 * (M + M.T))
            self._modes = (L, mu, U)
        return self._modes

    def hsh(self) -> np.ndarray:
        if self._hsh is None:
            H = self.expansion.hessian
            self._hsh = H @ self.target_cov @ H
        return self._hsh


def _batch_sizes(batch_sizes: Any, n: int) -> list[int]:
    if batch_sizes is None:
        out = [b for b in DEFAULT_BATCH_SIZES if b <= n]
        return out or [n]
    out = sorted({check_int(b, "batch size", low=1) for b in batch_sizes})
    too_big = [b for b in out if b > n]
    if too_big:
        raise SgtuneError(f"batch sizes must be in [1, N = {n}], got {too_big}")
    return out


def _choices(values: Any, allowed: tuple[str, ...], name: str) -> list[str]:
    out = [str(v) for v in values]
    bad = [v for v in out if v not in allowed]
    if bad or not out:
        raise SgtuneError(f"{name} must be among {', '.join(allowed)}, got {', '.join(bad) or 'nothing'}")
    return list(dict.fromkeys(out))


def _evaluate(ctx: _Context, cand: Candidate, E: float, family_criterion: str | None = None) -> None:
    """Fill bias, c, burn-in, steps and gradient evaluations of one candidate (or its reason)."""
    e = ctx.expansion
    B, fam, kappa, beta = cand.batch_size, cand.family, cand.momentum, cand.inverse_temperature
    wor = cand.batching != "replacement"
    if cand.batching == "reshuffle" and kappa > 0:
        cand.reason = "reshuffle: Shaw & Whalley's (2025) theory of random reshuffling covers SG(L)D without momentum only"
        return
    if fam == "block" and getattr(e, "parameter_blocks", None) is None:
        cand.reason = "family 'block' needs parameter blocks, which this model does not define (tune with `blocks`)"
        return
    try:
        crit0 = family_criterion if family_criterion is not None else (
            "auto" if e.dim <= PLAN_FIT_MAX_DIM else "moment")
        if fam == "dense" and kappa == 0.0 and e.dim > FAST_DENSE_DIM:
            _dense_fast(ctx, cand, wor)
        elif fam in ("diagonal", "scalar") and crit0 == "moment" and e.dim > FAST_DENSE_DIM:
            _structured_fast(ctx, cand, wor, E)
        else:
            dynamics = Dynamics(None, B, inv_temperature=beta, momentum=kappa, batching=cand.batching)
            res = tune(e, dynamics, target=ctx.target_cov, family=fam, family_criterion=crit0)
            st = res.stationary
            mce = mc_error(st, reference_cov=ctx.target_cov)
            cand.step_matrix, cand.stationary = res.step_matrix, st
            cand.covariance_error = res.covariance_error
            cand.cov_mc_error_constant = mce.cov_mc_error_constant
            cand.spectral_radius, cand.tau_worst = st.spectral_radius, st.tau_worst
            if st.spectral_radius_is_bound:
                cand.bounds.append("burn_in_steps")
    except (UnstableStepSizeError, InfeasibleTargetError, ConvergenceError) as exc:
        cand.reason = f"no stable chain reaches the target with this configuration: {_first_line(exc)}"
        return
    cand.burn_in_steps = minimum_burn_in(cand.spectral_radius)
    if cand.batching == "reshuffle":
        from .plan_notes import reshuffle_adjust

        reshuffle_adjust(ctx, cand)
    finish_candidate(cand, E)


def finish_candidate(cand: Candidate, E: float) -> None:
    """Steps, gradient evaluations, feasibility from bias, c and burn-in (the formulas of the module)."""
    b, c, C = cand.covariance_error, cand.cov_mc_error_constant, cand.chains
    if not math.isfinite(cand.burn_in_steps):
        cand.reason = "the chain has no stationary law (spectral radius of the second-moment map ≥ 1)"
        cand.feasible = False
        return
    if not b < E:
        cand.reason = (f"bias {b:.3g} ≥ tolerance {E:g}: the {cand.family} family's stationary covariance is "
                       "that far from the target at any run length; use a richer family")
        cand.feasible = False
        return
    T = steps_for_error(c, C, E * E - b * b)
    floor = math.ceil(MIN_TAU_MULTIPLE * max(cand.tau_worst, 1.0)) if math.isfinite(cand.tau_worst) else 0
    cand.steps = float(max(T, floor, 1))
    cand.gradient_evaluations = float(C * cand.batch_size * (cand.burn_in_steps + cand.steps))
    cand.predicted_rms_error = math.sqrt(b * b + c / (cand.steps * C))
    cand.feasible = True
    cand.reason = None


def _dense_fast(ctx: _Context, cand: Candidate, wor: bool) -> None:
    """Dense SGD/SGLD without momentum at large D: Σ(Λ) = Σ* by construction, no forward solve.

    Λ solves eq. (11) at Σ* exactly (the Lyapunov reduction), so the chain's stationary covariance is
    the target up to the tuning residual; c comes from F = I − ΛH and S = Σ*; the spectral radius of
    the second-moment map is bounded by 1 − λ_min(Σ*^{-1/2}Q₀Σ*^{-1/2}) (P(Σ*) = Σ* − Q₀ for a positive
    map P), so the burn-in is an upper bound; τ_worst is Prop. 4.4's 2/μ_min(ΛH) − 1.
    """
    e, S = ctx.expansion, ctx.target_cov
    B, beta = cand.batch_size, cand.inverse_temperature
    H = e.hessian
    cbar = ctx.noise_at_target(B, wor)
    R = cbar + ctx.hsh()
    R = 0.5 * (R + R.T)
    lam = _lyapunov_step_matrix(ctx, R, beta)
    residual = tuning_residual(lam, H, S, R, beta)
    chain = LinearChain.of(e, Dynamics(lam, B, inv_temperature=beta, batching=cand.batching))
    value, _ = cov_error_constant(chain, S)
    Ls = ctx.target_modes()[0]
    W = sla.solve_triangular(Ls, sla.solve_triangular(Ls, chain.constant_noise, lower=True).T, lower=True)
    rho = float(1.0 - np.linalg.eigvalsh(0.5 * (W + W.T))[0])  # L⁻¹Q₀L⁻ᵀ
    cand.modes = modal_directions(H, lam)
    mu_min = float(cand.modes.h[0])
    cand.step_matrix = lam
    cand.covariance_error = residual  # Σ(Λ) = Σ* up to the residual of eq. (11)
    cand.cov_mc_error_constant = value / ctx.target_norm2
    cand.spectral_radius = rho
    cand.tau_worst = 2.0 / mu_min - 1.0
    cand.bounds += ["burn_in_steps", "spectral_radius"]


def _lyapunov_step_matrix(ctx: _Context, R: np.ndarray, beta: float) -> np.ndarray:
    """:func:`~sgtune.theory.tuning.solve_step_matrix` with the target's factorisation shared across candidates:
    Λ = L Z⁻¹ Lᵀ, Z = U [Uᵀ(LᵀRL)U / (μ_i + μ_j − 2/β)] Uᵀ (docs/conventions.md)."""
    L, mu, U = ctx.target_modes()
    shift = 0.0 if math.isinf(beta) else 1.0 / beta
    if not mu[0] > shift:
        bmin = 1.0 / mu[0] if mu[0] > 0 else math.inf
        raise InfeasibleTargetError(
            f"target covariance is unreachable at inverse temperature {beta:g}: the injected noise alone gives more "
            f"variance than the target; use an inverse temperature > {bmin:.6g} (= 1/μ_min(HΣ)) or a larger target",
            min_inv_temperature=bmin)
    LU = L @ U
    Rt = LU.T @ R @ LU
    Zt = 0.5 * (Rt + Rt.T) / ((mu[:, None] - shift) + (mu[None, :] - shift))
    try:
        cz = np.linalg.cholesky(Zt)
    except np.linalg.LinAlgError:
        raise SgtuneError("the noise model R = C̄ + HΣH is not positive definite at the target, so no SPD step-size "
                          "matrix exists") from None
    W = sla.solve_triangular(cz, LU.T, lower=True)  # cz⁻¹UᵀLᵀ
    lam = W.T @ W
    return 0.5 * (lam + lam.T)


def _structured_fast(ctx: _Context, cand: Candidate, wor: bool, E: float) -> None:
    """Scalar / diagonal family at large D: :func:`~sgtune.theory.tuning.tune`'s closed form and its forward
    solve for Σ(Λ) − Σ* (matrix-free GMRES, relative tolerance ``PLAN_COV_TOL``), with the noise at the
    target shared across batch sizes (one pass over the data for the whole grid instead of one per B). A
    candidate whose bias already exceeds the tolerance gets no Monte Carlo constant (it stays ``inf``)."""
    e, S = ctx.expansion, ctx.target_cov
    B, beta, kappa = cand.batch_size, cand.inverse_temperature, cand.momentum
    cbar = ctx.noise_at_target(B, wor)
    if kappa > 0:
        lam = structured_momentum_step_matrix(e.hessian, S, cbar, family=cand.family, momentum=kappa,
                                              inv_temperature=beta)
    else:
        R = cbar + ctx.hsh()
        lam = structured_step_matrix(e.hessian, S, 0.5 * (R + R.T), family=cand.family, inv_temperature=beta)
    dynamics = Dynamics(lam, B, inv_temperature=beta, momentum=kappa, batching=cand.batching)
    st = stationary_cov_from_target_momentum(e, dynamics, S, cbar, tol=PLAN_COV_TOL)
    if not st.spectral_radius < 1.0:
        raise UnstableStepSizeError(f"the {cand.family} closed form gives an unstable chain (spectral radius "
                                    f"{st.spectral_radius:.4g})", spectral_radius=st.spectral_radius)
    cand.step_matrix, cand.stationary = lam, st
    cand.covariance_error = float(np.linalg.norm(st.cov - S) / math.sqrt(ctx.target_norm2))
    if cand.covariance_error < E:
        cand.cov_mc_error_constant = mc_error(st, reference_cov=S).cov_mc_error_constant
    cand.spectral_radius, cand.tau_worst = st.spectral_radius, st.tau_worst
    if st.spectral_radius_is_bound:
        cand.bounds.append("burn_in_steps")


def _first_line(exc: BaseException) -> str:
    s = str(exc)
    return s.splitlines()[0] if s else type(exc).__name__


def _time_candidates(model: Any, dataset: Dataset, expansion: Expansion, cands: list[Candidate],
                     prior_precision: Any, budget: float, seed: int) -> None:
    """seconds_per_step and seconds_per_run of each feasible candidate from the per-step cost model: for each
    group of configurations that differ only in B (same Λ kind, momentum > 0, SGLD noise, batching, chains),
    :func:`sampler_cost` at the group's smallest and largest B, and linear in B between them (a step's work is
    a fixed part plus the B per-sample gradients)."""
    groups: dict[tuple[Any, ...], dict[int, Candidate]] = {}
    for c in cands:
        if c.feasible and c.step_matrix is not None:
            groups.setdefault(_timing_key(c)[1:], {}).setdefault(c.batch_size, c)
    if not groups:
        return
    points = [(g, b) for g, by_b in groups.items() for b in sorted({min(by_b), max(by_b)})]
    per = max(budget / len(points), 0.02)
    costs = {(g, b): sampler_cost(model, dataset, expansion, groups[g][b], prior_precision, per, seed)
             for g, b in points}
    for c in cands:
        if c.feasible and c.step_matrix is not None:
            g = _timing_key(c)[1:]
            lo, hi = min(groups[g]), max(groups[g])
            (s0, r0), (s1, r1) = costs[(g, lo)], costs[(g, hi)]
            w = 0.0 if hi == lo else (c.batch_size - lo) / (hi - lo)
            c.seconds_per_step, c.seconds_per_run = (1 - w) * s0 + w * s1, (1 - w) * r0 + w * r1


def _timing_key(c: Candidate) -> tuple[Any, ...]:
    return (c.batch_size, c.lam_kind, c.momentum > 0, math.isfinite(c.inverse_temperature), c.batching, c.chains)


#: the cost models measured in this process: (model, N, D, timing key) -> (seconds per chain-step, per run)
_COSTS: dict[tuple[Any, ...], tuple[float, float]] = {}


def clear_cost_cache() -> None:
    """Forget the cost models measured so far (the next plan measures again; benchmarks).

    Examples
    --------
    >>> from sgtune.workflows.plan import clear_cost_cache
    >>> clear_cost_cache()
    """
    _COSTS.clear()


def sampler_cost(model: Any, dataset: Dataset, expansion: Expansion, c: Candidate, prior_precision: Any,
                 per: float = TIME_BUDGET, seed: int = 0) -> tuple[float, float]:
    """(wall seconds per chain-step, fixed seconds per run) of sgtune's sampler for ``c``'s configuration.

    A run costs a + b·T: a fixed part (the engine advances in 50 chunks, each waking the thread pool) and
    b per step with C chains in parallel. Both lengths timed, TIMING_SHORT and a longer k whose extra work
    takes about ``per`` seconds, make the same 50 calls, so b = (t_k − t_short)/(k − TIMING_SHORT) and
    a = t_short − b·TIMING_SHORT, each t the fastest of ``TIMING_REPEATS`` runs (other jobs only ever slow a
    run down, so the minimum is the estimate that is stable across reruns; the median moved by up to 40 % on
    a loaded machine); k grows further while the difference does not stand out of the short runs' jitter,
    and when it never does, b = t_k/k and a = 0, an upper bound. A first run compiles (or loads) the kernel
    and is not timed. Measured once per
    process and configuration (:func:`clear_cost_cache` forgets).
    """
    cache_key = (getattr(model, "name", type(model).__name__), expansion.n_data, expansion.dim, _timing_key(c))
    if cache_key in _COSTS:
        return _COSTS[cache_key]
    lam = c.step_matrix
    if c.lam_kind == "diagonal":
        lam = np.diag(lam).copy()
    dynamics = Dynamics(lam, c.batch_size, inv_temperature=c.inverse_temperature, momentum=c.momentum,
                        batching=c.batching)

    def run(steps: int) -> float:  # the run's own sampler seconds: compilation and result assembly excluded
        res = run_chains(model, dataset, dynamics, RunSpec(steps, n_chains=c.chains, burn_in=0, seed=seed),
                         prior_precision=prior_precision, initial=expansion.theta_hat)
        return float(res.seconds)

    k0 = TIMING_SHORT
    run(k0)  # compiles (or loads from the cache)
    shorts = [run(k0) for _ in range(TIMING_REPEATS)]
    base = float(np.min(shorts))
    k, t = 8 * k0, run(8 * k0)
    while t - base < per and k < 2_000_000:  # too little work to resolve against the fixed cost
        rate = max(t - base, 1e-5) / (k - k0)
        k = int(min(2_000_000, max(2 * k, k0 + 1.5 * per / rate)))
        t = run(k)
    longs = [t, *(run(k) for _ in range(TIMING_REPEATS - 1))]
    t1 = float(np.min(longs))
    spread = float(np.median(shorts)) - base  # the fixed cost's jitter (other jobs)
    for _ in range(2):  # the extra work must stand out of that jitter, or b would be noise (even ≤ 0)
        if t1 - base > 3.0 * spread or t1 - base > 4.0 * per or k >= 2_000_000:
            break
        k = min(2_000_000, 2 * k)
        t1 = float(np.min([run(k) for _ in range(TIMING_REPEATS)]))
    if t1 - base > 3.0 * spread:
        per_step = (t1 - base) / (k - k0)
        out = (per_step / c.chains, max(base - k0 * per_step, 0.0))
    else:  # the steps' cost is lost in the jitter: charge the whole long run to its steps (an upper bound)
        out = (t1 / k / c.chains, 0.0)
    _COSTS[cache_key] = out
    return out
