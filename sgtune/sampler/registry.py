"""The sampler registry: every fact about a sampler in one :class:`SamplerSpec`, and its options dataclass.

A sampler of :func:`sgtune.sampler.run_chains` is chosen by its options object — :class:`SGLDOptions`,
:class:`SGLRWOptions`, :class:`ClippedSGLDOptions`, :class:`SGHMCOptions` or :class:`SmileOptions` —
so the sampler's name and its settings travel together (``options.sampler`` is the name). Each name
has one :class:`SamplerSpec` in :data:`SAMPLERS`:

- the step rule: the engine component per step kind (:mod:`sgtune.sampler.engine`; the step rules of the
  SG(L)D family and SGHMC are in :mod:`sgtune.sampler.kernels`, the MCLMC rule in
  :mod:`sgtune.sampler.smile_chain`), and the step it takes: a matrix Λ (scalar, diagonal or dense) or a
  scalar (SGHMC's time step h, MCLMC's distance ε);
- the inverse temperature: whether β must be finite and its default (∞, none, or N for the samplers of
  the posterior);
- whether momentum κ and the step-size decay γ apply, how many minibatch gradients one step costs,
  whether the minibatch loss is needed (the SMILE samplers' energy error);
- what it samples (``target``: the linearised SG(L)D chain, or the tempered posterior
  exp(−β(L + θᵀΓθ/(2N)))) and sgtune's exact prediction for it (``prediction``: ``"covariance"`` — the
  linearised stationary covariance of Wang, Ding & Huggins (2026), eqs. 11–12; ``"posterior"`` — the
  tempered posterior (βH)⁻¹ at θ̂; ``None`` — none, e.g. SGHMC's and SMILE-naive's minibatch bias).

Everything that used to branch on a sampler's name reads these fields (the driver's validation, the CLI's
default β and choices, the prediction of ``sgtune run``'s health check and of ``verify``, the gradient
budget of the BNN study).

The samplers besides SG(L)D (G_t the minibatch gradient of the mean loss with the prior Γθ/N, as in
:func:`sgtune.sampler.run_chains`):

- :class:`SGLRWOptions` / :class:`ClippedSGLDOptions`:
  Mensch et al. (2025), eqs. (12) / (18) (diagonal Λ, β < ∞); see :mod:`sgtune.sampler.kernels`.
- :class:`SGHMCOptions` (vanilla SGHMC, Chen et al. 2014, no noise
  estimate): velocity v, v ← v + h(−β G_t − γ v) + sqrt(2γh) ξ, θ ← θ + h v, with h = the scalar
  ``dynamics.step`` (× the decay schedule) and γ = ``friction``. Unit mass: v ~ N(0, I) at
  stationarity, so h ≲ 1/sqrt(β λ_max(H)).
- :class:`SmileOptions` (the SMILE paper, anonymous, 2025, eqs. 1–3,
  Algorithm 1, section 3.2): MCLMC with the minimal-norm integrator on one minibatch per step
  (three gradient evaluations) and no injected noise (:mod:`sgtune.sampler.smile_chain`).
  ``dynamics.step`` = ε, the distance θ moves per step (|u| = 1; in pSMILE's preconditioned
  coordinates); with ``tuned`` the initial ε, adapted by the energy-variance tuner. β enters only
  the target. The result adds ``step_size_final``, ``rejection_fraction``, ``energy_error_mean``, ….

SGHMC and the SMILE samplers sample the tempered posterior log p_β(θ) = −β (L(θ) + θᵀΓθ/(2N)) with
minibatch gradients ∇log p_β ≈ −β G_t; they take a scalar step, no momentum (and SMILE no decay),
and ``dynamics.inv_temperature = inf`` (the default) means β = N, the posterior.

Adding a sampler: write its step rule (a ``@component_inline`` with the engine's rule signature, documented in
:mod:`sgtune.sampler.engine`), a frozen options dataclass with a ``sampler`` name (and a
``tuner_params`` method if it needs fixed settings in the compiled loop), and one :class:`SamplerSpec`
entry in :data:`SAMPLERS` below. Nothing else changes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from scipy.special import ndtri

from ..core._refs import cites
from ..core._validation import check_positive
from ..core.errors import SgtuneError
from . import kernels, smile_chain
from .smile import check_tuner_settings
from .state import (LAM_DENSE, LAM_DIAG, REFRESH_AUTO, REFRESH_FIXED, REFRESH_OFF, TUNER_ANCHORED, TUNER_PAPER,
                    TunerParams)

#: the step-size rules of the tuned SMILE samplers (``SmileOptions.tuner``, ``--tuner``); the first is the default
TUNERS: tuple[str, ...] = ("anchored", "paper")
#: the anchored tuner's clip ξ_max of ΔE²/(d v*) (:func:`sgtune.sampler.smile.anchored_update`)
ANCHOR_CLIP = 10.0

__all__ = ["SamplerSpec", "SAMPLERS", "SAMPLER_NAMES", "SGLDOptions", "SGLRWOptions", "ClippedSGLDOptions",
           "SGHMCOptions", "SmileOptions", "sampler_spec", "options_for", "default_inv_temperature",
           "POSTERIOR_SAMPLERS", "TUNERS"]


def _number(value: Any) -> float:
    """A setting given as a number or as its text (the command line passes text) as a float; nan when it is
    neither, so that the setting's own check refuses it by name."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _refresh_length(value: Any, tuned: bool) -> str | float:
    """``SmileOptions.refresh_length`` validated: "auto", "off" or a positive finite float (None: the default)."""
    if value is None:
        return "auto" if tuned else "off"
    if isinstance(value, str) and value.strip().lower() in ("auto", "off"):
        return value.strip().lower()
    length = _number(value)
    if not (math.isfinite(length) and length > 0.0):
        raise SgtuneError(f"refresh_length must be 'auto', 'off' or a length > 0, got {value!r}; 'auto' (the "
                          "default of smile/psmile) takes it from the chain's own path")
    return length


def _noise_bias(value: Any) -> float:
    """``SmileOptions.noise_bias`` validated: None or "off" (0), or a finite number >= 0."""
    if value is None:
        return 0.0
    if isinstance(value, str) and value.strip().lower() == "off":
        return 0.0
    tau = _number(value)
    if not (math.isfinite(tau) and tau >= 0.0):
        raise SgtuneError(f"noise_bias must be 'off' or a number >= 0, got {value!r}; e.g. 0.05 holds the bias the "
                          "minibatch noise causes in the chain's covariance at about 5 %")
    return tau


def _tuner_params(**settings: Any) -> TunerParams:
    """The compiled loop's :class:`~sgtune.sampler.state.TunerParams` from the options' settings by field name,
    every value a float (booleans 0/1: one numba type for every sampler); the fields not given keep their
    defaults."""
    return TunerParams(**{k: float(v) for k, v in settings.items()})


@dataclass(frozen=True)
class SGLDOptions:
    """SG(L)D (and SGD at β = ∞): θ ← θ − Λ m_t + sqrt(2Λ/β) ξ, m_t = κ m_{t−1} + G_t. No settings.

    The chain of Wang, Ding & Huggins (2026), §2.1 and Eq. (B.1): Λ, B, β and κ come from the
    :class:`~sgtune.core.config.Dynamics` of the run.

    See Also
    --------
    sgtune.sampler.run_chains : Runs it (the default sampler).

    Examples
    --------
    >>> from sgtune.sampler import SGLDOptions
    >>> SGLDOptions().sampler, SGLDOptions().settings()
    ('sgld', {})
    """

    sampler: ClassVar[str] = "sgld"

    def settings(self) -> dict[str, Any]:
        return {}

    def tuner_params(self, inv_temperature: float) -> TunerParams:
        return _tuner_params(inv_temp=inv_temperature)


@dataclass(frozen=True)
class SGLRWOptions(SGLDOptions):
    """SGLRW (Mensch et al. 2025, Eq. (12)): coordinatewise ±sqrt(2Λ_ii/β) moves. No settings.

    Needs a diagonal Λ and a finite β.

    Examples
    --------
    >>> from sgtune.sampler import SGLRWOptions
    >>> SGLRWOptions().sampler
    'sglrw'
    """

    sampler: ClassVar[str] = "sglrw"


@dataclass(frozen=True)
class ClippedSGLDOptions(SGLDOptions):
    """Clipped SGLD (Mensch et al. 2025, Eq. (18)): the drift clipped to ±sqrt(2Λ_ii/β). No settings.

    Needs a diagonal Λ and a finite β.

    Examples
    --------
    >>> from sgtune.sampler import ClippedSGLDOptions
    >>> ClippedSGLDOptions().sampler
    'clipped-sgld'
    """

    sampler: ClassVar[str] = "clipped-sgld"


@dataclass(frozen=True)
class SGHMCOptions:
    """Vanilla SGHMC (Chen et al. 2014, no noise estimate) with friction γ > 0 (unit mass).

    Parameters
    ----------
    friction : float, optional
        The friction γ > 0.

    Raises
    ------
    SgtuneError
        If ``friction`` is not a positive number.

    Examples
    --------
    >>> from sgtune.sampler import SGHMCOptions
    >>> SGHMCOptions(friction=2.0).settings()
    {'friction': 2.0}
    """

    friction: float = 1.0
    sampler: ClassVar[str] = "sghmc"

    def __post_init__(self) -> None:
        object.__setattr__(self, "friction", check_positive(self.friction, "friction"))

    def settings(self) -> dict[str, Any]:
        return {"friction": self.friction}

    def tuner_params(self, inv_temperature: float) -> TunerParams:
        return _tuner_params(inv_temp=inv_temperature, friction=self.friction)


@dataclass(frozen=True)
class SmileOptions:
    """The SMILE samplers (the SMILE paper, anonymous, 2025): MCLMC on minibatch gradients.

    ``preconditioned`` adds pSMILE's diagonal preconditioner (EMA rate ``precond_rate``, active after
    ``precond_start`` steps); ``tuned`` adds the energy-variance step-size tuner (Algorithm 1's online
    Gamma model, EMA rate ``ema_rate`` of |ΔE|, and its guardrail quantile κ = ``guardrail``; active after
    ``tune_start`` steps). The four combinations are the samplers ``smile-naive``, ``psmile-naive``,
    ``smile`` and ``psmile``.

    The step-size rule is ``tuner``: ``"anchored"`` (default) moves log ε toward the absolute target
    Var[ΔE]/d = ``energy_var_target`` at a rate that starts at ``anchor_rate`` and diminishes
    (:func:`sgtune.sampler.smile.anchored_update`: a stable fixed point); ``"paper"`` is eq. (7) as
    printed (×(1 + δ) below the a/3 quantile, ×(1 − δ) above the 1 − 2a/3 quantile, a = ``adapt_a``,
    δ = ``adapt_delta``), whose log ε drifts by (a/3) log(1 + δ) + (2a/3) log(1 − δ) per step
    (:func:`sgtune.sampler.smile.tuner_update`).

    Parameters
    ----------
    preconditioned : bool, optional
        Use pSMILE's diagonal preconditioner.
    tuned : bool, optional
        Use Algorithm 1's energy-variance step-size tuner.
    ema_rate : float, optional
        EMA rate of |ΔE| (tuner).
    precond_rate : float, optional
        EMA rate of the gradient variance (preconditioner).
    guardrail : float, optional
        The guardrail quantile κ (steps with a larger energy error are rejected).
    adapt_a : float, optional
        The adaptation band a.
    adapt_delta : float, optional
        The adaptation factor δ.
    tune_start : int, optional
        Steps before the tuner starts.
    precond_start : int, optional
        Steps before the preconditioner starts.
    tuner : {"anchored", "paper"}, optional
        The step-size rule of the tuned samplers.
    energy_var_target : float, optional
        The anchored rule's target energy-error variance per dimension, Var[ΔE]/d (5e-5, a tenth of MCLMC's
        5e-4 for exact gradients: :func:`sgtune.sampler.smile.anchored_update`, "Choice of v*").
    anchor_rate : float, optional
        The anchored rule's rate γ in (0, 1): log ε moves by (γₙ/6)(1 − ξ) per step, γₙ = γ/√(1 + n/1000)
        after n tuned steps.
    noise_weight : float, optional
        The weight of the anisotropic gradient noise's work in the anchored rule (0: off; 1 counts it at the same
        target v* as the integrator's energy error): ε is also held where that work per step and dimension,
        estimated online from successive gradients at one point, reaches v*/``noise_weight``
        (:func:`sgtune.sampler.smile.noise_work_var`, :func:`sgtune.sampler.smile.anchored_update`).
    guardrail_floor : float, optional
        The anchored rule's floor k on the guardrail: a step is rejected only if |ΔE| exceeds both the κ quantile
        of the fitted Gamma (eq. 6) and k √(d v*), k times the energy error's scale at the rule's fixed point.
        0 (the default) is the guardrail as printed, ``math.inf`` switches it off (a non-finite ΔE is still
        rejected). Measured across the SMILE paper's Table 1: neither k = 3 nor off is no worse than the default on
        every cell; off is far better where the noise varies across the space (``benchmarks/smile_guardrail.py``).
    refresh_length : {"auto", "off"} or float, optional
        The velocity's partial refresh after each step (:func:`sgtune.sampler.smile.partial_refresh`, MCLMC's
        noise η dW): a decoherence length L > 0, ``"auto"`` (L = √(Σᵢ Var θ'ᵢ) of the chain's own path so far, in
        the sampler's metric, from its 100th step on: :func:`sgtune.sampler.smile.path_length`) or ``"off"`` (the
        SMILE paper's samplers, where only the minibatch noise randomises the velocity). Default: ``"auto"`` for
        the tuned samplers ``smile``/``psmile``, ``"off"`` for the ``-naive`` ones (the paper's eq. (3) as printed).
        Without it the chains of the tuned samplers stay off their posterior on most GLMs, whatever the step
        size (``benchmarks/smile_sweep.py``, docs/benchmarks.md "The velocity refresh").
    noise_bias : float or "off", optional
        With the refresh: hold the bias the anisotropic minibatch noise causes in the chain's covariance, along its
        noisiest direction, at this fraction τ (e.g. 0.05) by shortening the refresh length to L_τ
        (:func:`sgtune.sampler.smile.noise_length`, down to a complete refresh every step; the step size is left to
        the tuner). Default ``None``/``"off"``: no cap. Either way the run reports the predicted bias
        (``ChainResult.noise_bias_predicted``, :func:`sgtune.sampler.smile.noise_excess`; a warning above 0.2). The
        cap trades mixing for bias: on the SMILE paper's Table 1 (3·10⁴ steps) it makes 9 of 24 cells worse than the
        best fixed step instead of 1, as the chains diffuse; on GLMs it lowers the worst direction's measured bias in
        52 of 68 runs, at a fraction of the effective draws (docs/benchmarks.md "The noise bias"). Hence off by
        default.

    Raises
    ------
    SgtuneError
        A setting out of its range.

    Examples
    --------
    >>> from sgtune.sampler import SmileOptions
    >>> SmileOptions(preconditioned=True).sampler, SmileOptions(tuned=False).sampler
    ('psmile', 'smile-naive')
    >>> SmileOptions().tuner, SmileOptions(tuner="paper").tuner_params(1.0).mode
    ('anchored', 0.0)
    """

    preconditioned: bool = False
    tuned: bool = True
    ema_rate: float = 0.01
    precond_rate: float = 0.01
    guardrail: float = 0.98
    adapt_a: float = 0.1
    adapt_delta: float = 0.02
    tune_start: int = 10
    precond_start: int = 100
    tuner: str = "anchored"
    energy_var_target: float = 5e-5
    anchor_rate: float = 0.02
    noise_weight: float = 0.0
    guardrail_floor: float = 0.0
    refresh_length: Any = None
    noise_bias: Any = None

    def __post_init__(self) -> None:
        ts, ps = check_tuner_settings(self.ema_rate, self.precond_rate, self.guardrail, self.adapt_a,
                                      self.adapt_delta, self.tune_start, self.precond_start)
        object.__setattr__(self, "tune_start", ts)
        object.__setattr__(self, "precond_start", ps)
        if self.tuner not in TUNERS:
            raise SgtuneError(f"tuner must be one of {', '.join(TUNERS)}, got {self.tuner!r}; 'anchored' (the "
                              "default) holds its step size, 'paper' is the SMILE paper's eq. (7) as printed")
        v = check_positive(self.energy_var_target, "energy_var_target")
        r = check_positive(self.anchor_rate, "anchor_rate")
        if not r < 1.0:
            raise SgtuneError(f"anchor_rate must lie in (0, 1), got {r}; the default is 0.02")
        object.__setattr__(self, "energy_var_target", v)
        object.__setattr__(self, "anchor_rate", r)
        nr = _number(self.noise_weight)
        if not (math.isfinite(nr) and nr >= 0.0):
            raise SgtuneError(f"noise_weight must be a finite number >= 0, got {self.noise_weight!r}; 0 switches the "
                              "anchored rule's noise cap off")
        object.__setattr__(self, "noise_weight", nr)
        fl = _number(self.guardrail_floor)
        if not fl >= 0.0:
            raise SgtuneError(f"guardrail_floor must be a number >= 0 (inf: no guardrail), got {self.guardrail_floor!r}; "
                              "0 (the default) is the guardrail as printed")
        object.__setattr__(self, "guardrail_floor", fl)
        object.__setattr__(self, "refresh_length", _refresh_length(self.refresh_length, self.tuned))
        object.__setattr__(self, "noise_bias", _noise_bias(self.noise_bias))

    @property
    def sampler(self) -> str:  # type: ignore[override]
        return ("p" if self.preconditioned else "") + "smile" + ("" if self.tuned else "-naive")

    def settings(self) -> dict[str, Any]:
        out = asdict(self)
        del out["preconditioned"], out["tuned"]
        return out

    def tuner_params(self, inv_temperature: float) -> TunerParams:
        """The compiled loop's fixed settings: the Wilson–Hilferty z-values of Algorithm 1's quantiles."""
        a = self.adapt_a
        return _tuner_params(alpha=self.precond_rate, beta=self.ema_rate, zk=ndtri(self.guardrail), zlo=ndtri(a / 3.0),
                             zhi=ndtri(1.0 - 2.0 * a / 3.0), delta=self.adapt_delta, tune_start=self.tune_start,
                             pre_start=self.precond_start, inv_temp=inv_temperature, precond=self.preconditioned,
                             tuned=self.tuned, mode=TUNER_PAPER if self.tuner == "paper" else TUNER_ANCHORED,
                             anchor=self.energy_var_target, gain=self.anchor_rate, clip=ANCHOR_CLIP,
                             noise_weight=self.noise_weight, floor=self.guardrail_floor,
                             refresh={"auto": REFRESH_AUTO, "off": REFRESH_OFF}.get(str(self.refresh_length), REFRESH_FIXED),
                             refresh_length=self.refresh_length if isinstance(self.refresh_length, float) else 0.0,
                             noise_bias=self.noise_bias)


@dataclass(frozen=True)
class SamplerSpec:
    """Everything sgtune knows about one sampler (module docstring).

    The entries of :data:`SAMPLERS`; not built by hand.

    Attributes
    ----------
    name : str
        The sampler's name (``--sampler``).
    options : type
        Its options class.
    rules, moves : dict
        Λ kind -> the compiled step rule, and the update of the general NumPy path.
    step_kind : str
        ``"matrix"`` (a scalar, diagonal or dense Λ), ``"diagonal"`` or ``"scalar"``.
    finite_beta : bool
        Whether β must be finite.
    default_beta : str or None
        ``"inf"``, ``"n_data"`` (the posterior) or None (must be given).
    momentum, decay : bool
        Whether momentum κ and the step-size decay γ are allowed.
    grads_per_step : int
        Minibatch gradients per step.
    needs_loss : bool
        Whether the minibatch loss (energy error) is needed.
    mclmc : bool
        The SMILE family (unit velocity; MCLMC statistics).
    target : str
        ``"linearised"`` (the SG(L)D chain) or ``"posterior"``.
    prediction : str or None
        sgtune's exact prediction: ``"covariance"``, ``"posterior"`` or None.
    summary : str
        One line for listings.

    Examples
    --------
    >>> from sgtune.sampler.registry import SAMPLERS
    >>> SAMPLERS["sgld"].step_kind, SAMPLERS["smile"].grads_per_step
    ('matrix', 3)
    """

    name: str
    options: type
    rules: dict[int, Any]          # Λ kind (state.LAM_DIAG / LAM_DENSE) -> step-rule component
    moves: dict[int, Any]          # the update after a given gradient (the general NumPy path); {} for MCLMC
    step_kind: str                 # "matrix" (a scalar, diagonal or dense Λ), "diagonal" or "scalar"
    finite_beta: bool              # β must be finite
    default_beta: str | None       # "inf", "n_data" (the posterior) or None (must be given)
    momentum: bool                 # momentum κ allowed
    decay: bool                    # the step-size decay γ allowed
    grads_per_step: int
    needs_loss: bool               # the minibatch loss (energy error) is needed
    mclmc: bool                    # the SMILE family (unit velocity u drawn at the start; MCLMC statistics)
    target: str                    # "linearised" (the SG(L)D chain) or "posterior" (exp(−β(L + θᵀΓθ/(2N))))
    prediction: str | None         # sgtune's exact prediction: "covariance", "posterior" or None
    summary: str

    @property
    def step_name(self) -> str:
        """What the step is called in messages: Λ, h or ε."""
        return {"sghmc": "h (its time step)"}.get(self.name, "ε (the distance moved per step)") \
            if self.step_kind == "scalar" else "Λ"


def _sgld_like(name: str, options: type, rules: dict[int, Any], moves: dict[int, Any], summary: str, *,
               dense: bool, finite_beta: bool, prediction: str | None) -> SamplerSpec:
    return SamplerSpec(name, options, rules, moves, "matrix" if dense else "diagonal", finite_beta,
                       None if finite_beta else "inf", True, True, 1, False, False, "linearised", prediction, summary)


def _mclmc(name: str, prediction: str | None, summary: str) -> SamplerSpec:
    return SamplerSpec(name, SmileOptions, {LAM_DIAG: smile_chain.mclmc_rule}, {}, "scalar", True, "n_data", False,
                       False, 3, True, True, "posterior", prediction, summary)


#: every sampler of the engine, in the order the CLI lists them
SAMPLERS: dict[str, SamplerSpec] = {s.name: s for s in (
    _sgld_like("sgld", SGLDOptions, {LAM_DIAG: kernels.sgld_diag_rule, LAM_DENSE: kernels.sgld_dense_rule},
               {LAM_DIAG: kernels.sgld_diag_step, LAM_DENSE: kernels.sgld_dense_step},
               "SG(L)D/SGD, any Λ (Wang, Ding & Huggins 2026)", dense=True, finite_beta=False,
               prediction="covariance"),
    _sgld_like("sglrw", SGLRWOptions, {LAM_DIAG: kernels.sglrw_rule}, {LAM_DIAG: kernels.sglrw_step},
               "SGLRW (Mensch et al. 2025, eq. 12)", dense=False, finite_beta=True, prediction=None),
    _sgld_like("clipped-sgld", ClippedSGLDOptions, {LAM_DIAG: kernels.clipped_sgld_rule},
               {LAM_DIAG: kernels.clipped_sgld_step}, "clipped SGLD (Mensch et al. 2025, eq. 18)", dense=False,
               finite_beta=True, prediction=None),
    SamplerSpec("sghmc", SGHMCOptions, {LAM_DIAG: kernels.sghmc_rule}, {LAM_DIAG: kernels.sghmc_data_step}, "scalar",
                True, "n_data", False, True, 1, False, False, "posterior", None,
                "vanilla SGHMC (Chen et al. 2014), time step h, friction γ"),
    _mclmc("smile-naive", None, "MCLMC on minibatch gradients (the SMILE paper, anonymous, 2025)"),
    _mclmc("psmile-naive", None, "SMILE-naive with pSMILE's diagonal preconditioner"),
    _mclmc("smile", "posterior", "MCLMC with the energy-variance step-size tuner (Algorithm 1)"),
    _mclmc("psmile", "posterior", "SMILE with pSMILE's diagonal preconditioner"),
)}
SAMPLER_NAMES: tuple[str, ...] = tuple(SAMPLERS)
#: the samplers of the tempered posterior (scalar step, their own velocity, β = N by default)
POSTERIOR_SAMPLERS: tuple[str, ...] = tuple(n for n, s in SAMPLERS.items() if s.target == "posterior")


def sampler_spec(options: Any) -> SamplerSpec:
    """The :class:`SamplerSpec` of an options object (or of a sampler name).

    Parameters
    ----------
    options : options object or str
        E.g. ``SGLDOptions()`` or ``"sgld"``.

    Returns
    -------
    SamplerSpec
        The sampler's entry of :data:`SAMPLERS`.

    Raises
    ------
    SgtuneError
        An unknown sampler.

    Examples
    --------
    >>> from sgtune.sampler.registry import SmileOptions, sampler_spec
    >>> sampler_spec(SmileOptions()).name, sampler_spec("sglrw").finite_beta
    ('smile', True)
    """
    name = options if isinstance(options, str) else getattr(options, "sampler", None)
    if name not in SAMPLERS:
        raise SgtuneError(f"sampler must be one of {', '.join(SAMPLERS)}, got {name!r}")
    return SAMPLERS[name]


def options_for(name: str, **settings: Any) -> Any:
    """The options object of sampler ``name`` from keyword settings (those that do not apply are ignored).

    Parameters
    ----------
    name : str
        A sampler of :data:`SAMPLERS`.
    **settings
        Settings of any sampler (e.g. ``friction=…`` from the command line); the ones the options
        class has are used.

    Returns
    -------
    options object
        E.g. :class:`SGHMCOptions`.

    Raises
    ------
    SgtuneError
        An unknown sampler or a setting out of its range.

    Examples
    --------
    >>> from sgtune.sampler import options_for
    >>> options_for("sghmc", friction=2.0), options_for("sgld", friction=2.0)
    (SGHMCOptions(friction=2.0), SGLDOptions())
    """
    spec = sampler_spec(name)
    if spec.options is SmileOptions:
        settings = {**settings, "preconditioned": name.startswith("p"), "tuned": not name.endswith("naive")}
    own = {f.name for f in fields(spec.options)}
    return spec.options(**{k: v for k, v in settings.items() if k in own})


@cites("wang2026", "§2.1 (β = ∞ is SGD); the SMILE paper's and SGHMC's target is the posterior at β = N")
def default_inv_temperature(spec: SamplerSpec, inv_temperature: float, n_data: int) -> float:
    """The inverse temperature β for a run of ``spec``.

    A finite β as given; β = ∞ is SGD for the samplers that allow it, and N (the posterior) for the
    posterior samplers; the others (SGLRW, clipped SGLD) need a finite β.

    Parameters
    ----------
    spec : SamplerSpec
        The sampler.
    inv_temperature : float
        The β asked for (``inf`` allowed).
    n_data : int
        N.

    Returns
    -------
    float
        The inverse temperature β of the run.

    Raises
    ------
    SgtuneError
        β = ∞ for a sampler that needs a finite one, or β not positive.

    Examples
    --------
    >>> from sgtune.sampler.registry import SAMPLERS, default_inv_temperature
    >>> default_inv_temperature(SAMPLERS["sgld"], float("inf"), 1000)
    inf
    >>> default_inv_temperature(SAMPLERS["smile"], float("inf"), 1000)
    1000.0
    """
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    if math.isfinite(beta) or not spec.finite_beta:
        return beta
    if spec.default_beta == "n_data":
        return float(n_data)
    raise SgtuneError(f"sampler {spec.name!r} needs a finite inverse temperature (it moves by ±sqrt(2Λ_ii/β)); "
                      "pass inv_temperature=N or a number")
