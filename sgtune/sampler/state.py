"""The named state of the chain engine (:mod:`sgtune.sampler.engine`): what moves between its components.

Every group is a ``collections.namedtuple`` (numba compiles them as records: fields are read by name,
never by position) of float64/int64 arrays with one row per chain, or of scalars:

- :class:`ChainState` — θ, the auxiliary vector m (SG(L)D's momentum, SGHMC's velocity v, MCLMC's unit
  velocity u), the xoshiro256++ stream, the permutation and epoch position of the batch schedule, the
  divergence step and the clip count;
- :class:`Oracle` — what the gradient component reads (the component gets the whole record and reads the
  fields it needs): the data ``X`` (N, p) and ``y`` (N,) (empty for oracles without data), the model's
  integer and float parameters ``ints`` and ``floats``, ``hessian`` (the Hessian A of a quadratic oracle,
  the precision of an analytic target, GNLD's matrix M), ``mean`` (the quadratic's minimum μ, the data mean
  x̄ of Shaw & Whalley's model problem), ``noise_factor`` (the lower-triangular factor of the synthetic
  gradient noise), the prior Γ/N and its kind, and the gradient's work-buffer length;
- :class:`Schedule` — the batch size B, the step-size decay γ, and whether the batch schedule sums the batch's
  values of the data's first column (``row_sums``, for the Gaussian-mean oracle);
- :class:`StepParams` — the step of the SG(L)D family and SGHMC: Λ, the factor L of 2Λ/β, κ, whether
  noise is injected, β, SGHMC's friction γ and scalar step h;
- :class:`MclmcState` — the SMILE samplers' per-chain arrays: the step size ``step`` (C,), the tuner's state
  ``tune`` (C, 10) (Algorithm 1's [μ, s², n, ε] and the noise estimates), the pSMILE preconditioner ``ipre``
  = 1/p and its EMAs ``gbar``, ``gvar`` (C, D) and update count ``pcount``, the energy-error statistics
  ``stats`` (C, 4), columns :data:`STAT_REJECTIONS`, :data:`STAT_DE_SUM`, :data:`STAT_ABS_DE_SUM`,
  :data:`STAT_DE_SQ_SUM` (rejections, Σ ΔE, Σ |ΔE|, Σ ΔE²), θ at the step's start ``prev`` (C, D), the noise
  term's history ``noise_hist`` (C, 3D: the last gradient and the last two noise draws; (C, 0) without the term),
  the current step's kinetic-energy change ``step_dk`` and log density at its start ``step_logp`` (C,), the fixed
  settings ``params``, a :class:`TunerParams` record (built by keyword; every field has a default), and the
  path's statistics for the automatic velocity refresh ``path_n`` (C,), ``path_mean``, ``path_m2`` (C, D; (C, 0)
  without it);
- :class:`Recorder` — the streaming outputs (moments by segment, covariance blocks, trace, observables,
  epoch-position moments, step-size trace), ``pos_centre`` (empty for Welford moments by epoch
  position, or the centre c for sums of θ − c and (θ − c)² by position), ``energy_trace`` (the SMILE
  samplers' Σ ΔE so far, at the trace's draws; zero columns: not recorded) and ``theta_sum`` /
  ``theta_sq_sum`` (Σθ and Σθ² over the recorded draws, the SMILE ensembles' moments; zero columns: not
  recorded).

A run of the engine is a :class:`ChainPlan`: the components' names and functions and these records (the
backends of :mod:`sgtune.sampler.engine` advance it; the plan builders of the entry points build it).

Every record is built by keyword through its factory (:func:`chain_state`, :func:`oracle`,
:func:`step_params`, :func:`recorder`, :func:`mclmc_state`), whose defaults are empty arrays: a sampler that
does not use a field or a group gets zero-length arrays of the same dimension, so every sampler compiles
against the same record types. The one-value constants of the engine live here too:
:data:`DIVERGENCE_BOUND`, :data:`COV_BLOCK`, the prior kinds and the Λ kinds.
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["ChainPlan", "ChainState", "Oracle", "Schedule", "StepParams", "MclmcState", "TunerParams", "Recorder", "Work",
           "chain_state", "oracle", "step_params", "recorder", "DIVERGENCE_BOUND", "COV_BLOCK", "TUNER_PAPER", "TUNER_ANCHORED", "REFRESH_OFF", "REFRESH_FIXED", "REFRESH_AUTO", "LAM_DIAG", "LAM_DENSE", "mclmc_state",
           "STAT_REJECTIONS", "STAT_DE_SUM", "STAT_ABS_DE_SUM", "STAT_DE_SQ_SUM"]

#: a chain whose ‖θ‖₁ reaches this (or is not finite) has diverged and stops
DIVERGENCE_BOUND = 1e150
#: states per covariance block of the recorder; 32 × D doubles stay in L1 for D ≤ 100
COV_BLOCK = 32
#: Λ kinds: diagonal (one elementwise pass) or dense (a matrix–vector product and a triangular noise factor)
LAM_DIAG, LAM_DENSE = 1, 2

ChainState = namedtuple("ChainState", "theta mom rng perm epoch_pos diverged clip_count")
Oracle = namedtuple("Oracle", "X y ints floats hessian mean noise_factor prior_kind prior work_len")
#: ``row_sums``: the batch schedule also sums the batch's values of the data's first column into the work buffer's
#: first entry, in its drawing loop (Shaw & Whalley's Gaussian-mean oracle reads the sum; ``kernels.batch_by_kind``)
Schedule = namedtuple("Schedule", "batch_size decay row_sums", defaults=(False,))
StepParams = namedtuple("StepParams", "lam fac momentum inject inv_temp friction step")
#: the step-size rules of the tuned SMILE samplers (``TunerParams.mode``): Algorithm 1 as printed, or anchored
TUNER_PAPER, TUNER_ANCHORED = 0.0, 1.0
#: the fixed settings of the SMILE samplers (every field a float: one numba type for every sampler), built by
#: keyword with these defaults: the EMA rates α (preconditioner) and β (|ΔE|), the guardrail's and the adaptation's
#: normal quantiles zk, zlo, zhi and step change δ, the first tuned and preconditioned steps, β of the target,
#: whether the preconditioner and the tuner run (0/1), SGHMC's friction, the step-size rule ``mode``
#: (:data:`TUNER_PAPER` or :data:`TUNER_ANCHORED`), the anchored rule's target Var[ΔE]/d, rate γ and clip ξ_max,
#: the weight of the anisotropic noise's work (0: off), the guardrail's floor k (0: off), and the velocity's
#: partial refresh: ``refresh`` one of :data:`REFRESH_OFF`, :data:`REFRESH_FIXED` (decoherence length
#: ``refresh_length``) or :data:`REFRESH_AUTO` (the length from the chain's own path), and the bias τ the anisotropic
#: minibatch noise may cause under the refresh (0: no cap; else the refresh length is capped at L_τ) (:func:`sgtune.sampler.smile.anchored_update`, :func:`sgtune.sampler.smile.noise_update`,
#: :func:`sgtune.sampler.smile.partial_refresh`, :func:`sgtune.sampler.smile.noise_length`)
TunerParams = namedtuple("TunerParams", "alpha beta zk zlo zhi delta tune_start pre_start inv_temp precond tuned "
                                        "friction mode anchor gain clip noise_weight floor refresh refresh_length noise_bias",
                         defaults=(0.01, 0.01, 0.0, 0.0, 0.0, 0.02, 10.0, 100.0, 1.0, 0.0, 0.0, 1.0, TUNER_PAPER,
                                   5e-5, 0.02, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0))
#: ``TunerParams.refresh``: no partial refresh (the SMILE paper's samplers), a fixed decoherence length, or the
#: length √(Σᵢ Var θ'ᵢ) of the chain's own path so far in the sampler's metric (MCLMC's choice)
REFRESH_OFF, REFRESH_FIXED, REFRESH_AUTO = 0.0, 1.0, 2.0
#: the columns of ``MclmcState.stats`` (C, 4), the energy-error statistics of the SMILE samplers: rejections
#: (guardrail or divergence), Σ ΔE, Σ |ΔE|, Σ ΔE² over the steps so far (finite ΔE only)
STAT_REJECTIONS, STAT_DE_SUM, STAT_ABS_DE_SUM, STAT_DE_SQ_SUM = 0, 1, 2, 3
#: the SMILE samplers' per-chain state (module docstring) and their settings ``params`` (a :class:`TunerParams`)
#: ``path_n``, ``path_mean``, ``path_m2``: the count, mean and sum of squared deviations (Welford) of the chain's
#: positions after each step, from which the automatic refresh length comes ((C, 0) without it)
MclmcState = namedtuple("MclmcState", "step tune ipre gbar gvar pcount stats prev noise_hist step_dk step_logp params "
                                      "path_n path_mean path_m2")
Recorder = namedtuple("Recorder", "seg_len acc_n acc_mean acc_m2 blk blk_n flush thin trace pos_n pos_mean pos_m2 "
                                  "obs obs_sum step_trace pos_centre energy_trace theta_sum theta_sq_sum")
#: per-chain scratch of one call of the engine (allocated once per call, never in the step loop)
Work = namedtuple("Work", "idx wk grad xi buf ld fd")


def noise_estimated(params: TunerParams) -> bool:
    """Whether the SMILE samplers estimate their gradient noise online (for the noise term, or under the refresh: the
    noise bias's prediction and cap); the compiled rules test the same condition."""
    return params.noise_weight > 0.0 or params.refresh != REFRESH_OFF


def mclmc_state(n_chains: int, dim: int = 0, step: float = 0.0, params: TunerParams | None = None) -> MclmcState:
    """An :class:`MclmcState` of C chains starting at step size ``step`` with the settings ``params`` (default
    ``TunerParams()``; D = 0: the placeholder of the samplers without one)."""
    params = TunerParams() if params is None else params
    # tune: Algorithm 1's [μ, s², n, ε] + the noise estimates (sgtune.sampler.smile.noise_update); prev: θ saved at
    # the step's start; noise_hist (with the noise term): the last end gradient and the last two noise draws
    hist = 3 * dim if noise_estimated(params) else 0
    C = int(n_chains)
    walk = dim if params.refresh == REFRESH_AUTO else 0
    return MclmcState(step=np.full(C, float(step)), tune=np.zeros((C, 10)), ipre=np.ones((C, dim)),
                      gbar=np.zeros((C, dim)), gvar=np.zeros((C, dim)), pcount=np.zeros(C, dtype=np.int64),
                      stats=np.zeros((C, 4)), prev=np.zeros((C, dim)), noise_hist=np.zeros((C, hist)), step_dk=np.zeros(C), step_logp=np.zeros(C),
                      params=params, path_n=np.zeros(C), path_mean=np.zeros((C, walk)), path_m2=np.zeros((C, walk)))


def _matrix(a: np.ndarray | None) -> np.ndarray:
    return np.zeros((0, 0)) if a is None else np.ascontiguousarray(a, dtype=np.float64)


def _vector(a: np.ndarray | None) -> np.ndarray:
    return np.zeros(0) if a is None else np.ascontiguousarray(a, dtype=np.float64)


def chain_state(theta: np.ndarray, rng: np.ndarray, *, perm: np.ndarray | None = None) -> ChainState:
    """A :class:`ChainState` of C chains at ``theta`` (C, D) (copied) with the xoshiro256++ streams ``rng`` (C, 4):
    auxiliary vectors 0, epoch positions 0, no divergence, no clips; ``perm`` (C, n) the batch schedule's
    permutations (default: one column, for the schedules that use none)."""
    th = np.array(theta, dtype=np.float64, order="C", copy=True)
    C = th.shape[0]
    pm = np.zeros((C, 1), dtype=np.int64) if perm is None else np.ascontiguousarray(perm, dtype=np.int64)
    return ChainState(theta=th, mom=np.zeros_like(th), rng=rng, perm=pm, epoch_pos=np.zeros(C, dtype=np.int64),
                      diverged=-np.ones(C, dtype=np.int64), clip_count=np.zeros(C, dtype=np.int64))


def oracle(*, X: np.ndarray | None = None, y: np.ndarray | None = None, ints: np.ndarray | None = None,
           floats: np.ndarray | None = None, hessian: np.ndarray | None = None, mean: np.ndarray | None = None,
           noise_factor: np.ndarray | None = None, prior_kind: int = 0, prior: np.ndarray | None = None,
           work_len: int = 1) -> Oracle:
    """An :class:`Oracle` record by field (module docstring); every array not given is empty (prior: none)."""
    return Oracle(X=_matrix(X), y=_vector(y),
                  ints=np.zeros(0, dtype=np.int64) if ints is None else np.ascontiguousarray(ints, dtype=np.int64),
                  floats=_vector(floats), hessian=_matrix(hessian), mean=_vector(mean),
                  noise_factor=_matrix(noise_factor), prior_kind=int(prior_kind),
                  prior=np.zeros((1, 1)) if prior is None else _matrix(prior), work_len=int(work_len))


def step_params(*, lam: np.ndarray, fac: np.ndarray, momentum: float = 0.0, inject: bool = True,
                inv_temp: float = 1.0, friction: float = 1.0, step: float = 0.0) -> StepParams:
    """A :class:`StepParams` record: Λ and the factor L of 2Λ/β (D, D), κ, whether noise is injected, β,
    SGHMC's friction γ and the scalar step h."""
    return StepParams(lam=_matrix(lam), fac=_matrix(fac), momentum=float(momentum), inject=bool(inject),
                      inv_temp=float(inv_temp), friction=float(friction), step=float(step))


def recorder(n_chains: int, dim: int, *, segments: int = 0, seg_len: int = 1, thin: int = 0, n_trace: int = 0,
             positions: int = 0, pos_centre: np.ndarray | None = None, observables: np.ndarray | None = None,
             step_trace: bool = False, energy_trace: bool = False, theta_sums: bool = False) -> Recorder:
    """A :class:`Recorder` of C chains in D dimensions with zeroed outputs (``flush`` false: the run's last call
    uses ``rec._replace(flush=True)``, sharing the arrays).

    ``segments`` batch-means segments of ``seg_len`` draws (0: no moments), a trace of ``n_trace`` draws every
    ``thin`` steps (with the step size and Σ ΔE at the same draws when ``step_trace`` / ``energy_trace``),
    ``positions`` epoch positions (centred at ``pos_centre`` when given), the sums of the K linear
    ``observables`` (K, D), and Σθ, Σθ² when ``theta_sums``.
    """
    C, d, S, R = int(n_chains), int(dim), int(segments), int(positions)
    obs = np.zeros((0, d)) if observables is None else _matrix(observables)
    return Recorder(seg_len=int(seg_len), acc_n=np.zeros((C, S), dtype=np.int64), acc_mean=np.zeros((C, S, d)),
                    acc_m2=np.zeros((C, S, d, d)), blk=np.zeros((C, COV_BLOCK if S > 0 else 0, d)),
                    blk_n=np.zeros((C, 2), dtype=np.int64), flush=False, thin=int(thin),
                    trace=np.zeros((C, n_trace, d)), pos_n=np.zeros((C, R), dtype=np.int64),
                    pos_mean=np.zeros((C, R, d)), pos_m2=np.zeros((C, R, d)), obs=obs,
                    obs_sum=np.zeros((C, obs.shape[0])), step_trace=np.zeros((C, n_trace if step_trace else 0)),
                    pos_centre=_vector(pos_centre), energy_trace=np.zeros((C, n_trace if energy_trace else 0)),
                    theta_sum=np.zeros((C, d if theta_sums else 0)), theta_sq_sum=np.zeros((C, d if theta_sums else 0)))


@dataclass
class ChainPlan:
    """One run of the engine: the components (and their names, for backends that bring their own) and the
    named records they update.

    ``recorder(last)`` is the :class:`~sgtune.sampler.state.Recorder` of a call (``last``: the run's last
    call, which merges the pending covariance blocks); a backend asks for it through
    :meth:`recorder_at`, which gives ``burn_recorder`` to the calls before step ``split`` (a plan whose
    recorder changes at a step, e.g. the SMILE ensembles' end of burn-in: traced, not summed;
    :func:`~sgtune.sampler.engine.run_plan` never lets a call cross ``split``). ``init_fn``, when given, is the compiled draw of the
    chains' random initial state that the backend's ``prepare`` runs before the first step (the MCLMC
    velocities ``mom``, uniform on the sphere from each chain's stream:
    :func:`sgtune.sampler.smile_chain.init_velocity`); a backend with its own streams draws the same.
    """

    sampler: str
    lam_kind: int
    batching: str
    oracle_kind: str
    batch_fn: Any
    grad_fn: Any
    rule_fn: Any
    move_fn: Any
    state: ChainState
    oracle: Oracle
    sched: Schedule
    params: StepParams
    mclmc: MclmcState
    recorder: Callable[[bool], Recorder]
    burn_in: int
    n_steps: int
    py_model: Any = None
    is_mclmc: bool = False
    split: int = 0
    burn_recorder: Recorder | None = None
    init_fn: Any = None

    def recorder_at(self, t0: int, last: bool) -> Recorder:
        """The recorder of the call that advances the chains from step ``t0`` (``last``: the run's last call)."""
        if self.burn_recorder is not None and t0 < self.split:
            return self.burn_recorder
        return self.recorder(last)
