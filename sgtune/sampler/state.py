"""The named state of the chain engine (:mod:`sgtune.sampler.engine`): what moves between its components.

Every group is a ``collections.namedtuple`` (numba compiles them as records: fields are read by name,
never by position) of float64/int64 arrays with one row per chain, or of scalars:

- :class:`ChainState` — θ, the auxiliary vector m (SG(L)D's momentum, SGHMC's velocity v, MCLMC's unit
  velocity u), the xoshiro256++ stream, the permutation and epoch position of the batch schedule, the
  divergence step and the clip count;
- :class:`Oracle` — what the gradient component reads: for a data model the design ``X`` and response
  ``y``; for an analytic oracle without data ``X`` is its matrix (the Hessian A of a quadratic) and ``y``
  its vector (the mean μ); then the model's integer and float parameters, a matrix ``mat`` (the noise
  factor of the quadratic oracle), the prior Γ/N and its kind, and the gradient's work-buffer length;
- :class:`Schedule` — the batch size B and the step-size decay γ;
- :class:`StepParams` — the step of the SG(L)D family and SGHMC: Λ, the factor L of 2Λ/β, κ, whether
  noise is injected, β, SGHMC's friction γ and scalar step h;
- :class:`MclmcState` and :class:`TunerParams` — the SMILE samplers' per-chain step size, tuner EMAs,
  pSMILE preconditioner and energy-error statistics, and the fixed settings of Algorithm 1;
- :class:`Recorder` — the streaming outputs (moments by segment, covariance blocks, trace, observables,
  epoch-position moments, step-size trace), ``pos_centre`` (empty for Welford moments by epoch
  position, or the centre c for sums of θ − c and (θ − c)² by position) and ``energy_trace`` (the SMILE
  samplers' Σ ΔE so far, at the trace's draws; zero columns: not recorded).

A sampler that does not use a group gets one with zero-length arrays (:func:`mclmc_state` with D = 0), so every
sampler compiles against the same record types. The one-value constants of the engine live here too:
:data:`DIVERGENCE_BOUND`, :data:`COV_BLOCK`, the prior kinds and the Λ kinds.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

__all__ = ["ChainState", "Oracle", "Schedule", "StepParams", "MclmcState", "TunerParams", "Recorder", "Work",
           "DIVERGENCE_BOUND", "COV_BLOCK", "TUNER_PAPER", "TUNER_ANCHORED", "LAM_DIAG", "LAM_DENSE", "mclmc_state", "tuner_params"]

#: a chain whose ‖θ‖₁ reaches this (or is not finite) has diverged and stops
DIVERGENCE_BOUND = 1e150
#: states per covariance block of the recorder; 32 × D doubles stay in L1 for D ≤ 100
COV_BLOCK = 32
#: Λ kinds: diagonal (one elementwise pass) or dense (a matrix–vector product and a triangular noise factor)
LAM_DIAG, LAM_DENSE = 1, 2

ChainState = namedtuple("ChainState", "theta mom rng perm epoch_pos diverged clip_count")
Oracle = namedtuple("Oracle", "X y ints floats mat prior_kind prior work_len")
Schedule = namedtuple("Schedule", "batch_size decay")
StepParams = namedtuple("StepParams", "lam fac momentum inject inv_temp friction step")
TunerParams = namedtuple("TunerParams", "alpha beta zk zlo zhi delta tune_start pre_start inv_temp precond tuned "
                                        "friction mode anchor gain clip")
#: the step-size rules of the tuned SMILE samplers (``TunerParams.mode``): Algorithm 1 as printed, or anchored
TUNER_PAPER, TUNER_ANCHORED = 0.0, 1.0
#: the per-chain arrays of the SMILE samplers followed by the fields of :class:`TunerParams` (flat: numba's
#: parallel loop cannot pass a record nested in a record)
MclmcState = namedtuple("MclmcState", ("step", "tune", "ipre", "gbar", "gvar", "pcount", "stats", "prev", "scal")
                        + TunerParams._fields)
Recorder = namedtuple("Recorder", "seg_len acc_n acc_mean acc_m2 blk blk_n flush thin trace pos_n pos_mean pos_m2 "
                                  "obs obs_sum step_trace pos_centre energy_trace")
#: per-chain scratch of one call of the engine (allocated once per call, never in the step loop)
Work = namedtuple("Work", "idx wk grad xi buf ld fd")


def tuner_params(*, alpha: float = 0.01, beta: float = 0.01, zk: float = 0.0, zlo: float = 0.0, zhi: float = 0.0,
                 delta: float = 0.02, tune_start: float = 10.0, pre_start: float = 100.0, inv_temp: float = 1.0,
                 precond: bool = False, tuned: bool = False, friction: float = 1.0, mode: float = TUNER_PAPER,
                 anchor: float = 5e-5, gain: float = 0.02, clip: float = 10.0) -> TunerParams:
    """A :class:`TunerParams` record with every field a float (one numba type for every sampler).

    ``mode`` is the step-size rule (:data:`TUNER_PAPER` or :data:`TUNER_ANCHORED`); ``anchor``, ``gain`` and
    ``clip`` are the anchored rule's target Var[ΔE]/d, rate γ and clip ξ_max
    (:func:`sgtune.sampler.smile.anchored_update`)."""
    return TunerParams(float(alpha), float(beta), float(zk), float(zlo), float(zhi), float(delta), float(tune_start),
                       float(pre_start), float(inv_temp), float(bool(precond)), float(bool(tuned)), float(friction),
                       float(mode), float(anchor), float(gain), float(clip))


def mclmc_state(n_chains: int, dim: int = 0, step: float = 0.0, params: TunerParams | None = None) -> MclmcState:
    """An :class:`MclmcState` of C chains starting at step size ``step`` (D = 0: the placeholder of the
    samplers without one)."""
    return MclmcState(np.full(n_chains, float(step)), np.zeros((n_chains, 4)), np.ones((n_chains, dim)),
                      np.zeros((n_chains, dim)), np.zeros((n_chains, dim)), np.zeros(n_chains, dtype=np.int64),
                      np.zeros((n_chains, 4)), np.zeros((n_chains, dim)), np.zeros((n_chains, 2)),
                      *(tuner_params() if params is None else params))
