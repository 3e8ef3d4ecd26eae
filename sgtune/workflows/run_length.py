r"""How long to run chains, and how much of them to keep: the one run-length policy of the workflows.

Every workflow that runs chains it has not been told the length of (``verify``, ``calibrate``, ``lambda
--refine``, ``plan``) takes its numbers from here, so that they agree on what "long enough" means:

- **burn-in** (:func:`burn_in_steps`): the chain starts at θ̂, so its second moments start at zero and
  approach the stationary ones like ρ(𝒫)^t, ρ(𝒫) the spectral radius of the second-moment map (Wang, Ding &
  Huggins 2026, Eqs. (11)–(12); :func:`~sgtune.theory.linear_chain.equilibration_steps`, the steps until
  every second moment is within 1 % of stationary); a chain also forgets its start only after some
  integrated autocorrelation times τ. The burn-in of a check is the largest of ``BURN_IN_TAUS``·τ, the
  equilibration steps and a tenth of the kept steps, and at most half of the run when the run's total
  length is fixed; ``plan`` prices the equilibration steps alone (:func:`minimum_burn_in`), the least a
  run needs, and says so in its JSON.
- **length** from a target Monte Carlo error (:func:`steps_for_error`): an estimate whose relative Monte
  Carlo variance is c/T per chain (c the Monte Carlo constant — for one entry of a covariance
  c ≈ 2τ, Gaussian fourth moments; :func:`~sgtune.theory.mcerror.mc_error` gives its exact value for
  the Frobenius error) needs T = ⌈c/(C·v)⌉ steps per chain for a variance v pooled over C chains.
  :func:`default_steps` is the batch-means default of the checking commands: T = max(20 000, 1000·τ).
- **thinning** from a draw budget (:func:`thinning`): keep every k-th draw after burn-in so that at most
  (or at least) a given number of draws is kept.
- **batches** for the batch-means standard errors (:func:`check_batches_per_chain`): each batch at least
  ``BATCH_TAUS`` integrated autocorrelation times long (the chain-health rule,
  :func:`~sgtune.diagnostics.health.batch_length_test`). Shorter batches have correlated means, so the
  standard errors come out too small and a z-test rejects correct chains: a check refuses more batches than
  that, and its default never asks for them.

:func:`run_spec` assembles them into a :class:`~sgtune.core.config.RunSpec`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.config import RunSpec
from ..core.errors import SgtuneError
from ..diagnostics.health import BATCH_TAUS
from ..theory.linear_chain import equilibration_steps

__all__ = ["MIN_STEPS", "TAU_MULTIPLE", "BURN_IN_TAUS", "default_steps", "burn_in_steps", "minimum_burn_in",
           "steps_for_error",
           "thinning", "run_spec", "default_run_length", "check_batches_per_chain", "max_batches_per_chain",
           "BATCH_TAUS", "RunOptions", "resolve_run"]

#: the checking commands' default run is never shorter than this (batch means need many segments)
MIN_STEPS = 20_000
#: … nor shorter than this many integrated autocorrelation times
TAU_MULTIPLE = 1000
#: the burn-in is at least this many integrated autocorrelation times
BURN_IN_TAUS = 20


def _tau(tau_worst: float) -> float:
    """τ ≥ 1; an unknown (NaN or infinite) τ counts as 1 (the caller decides the length then)."""
    return max(1.0, float(tau_worst)) if math.isfinite(tau_worst) else 1.0


def default_steps(tau_worst: float) -> int:
    """Return the steps per chain (burn-in included) when none are given.

    T = max(``MIN_STEPS``, ⌈``TAU_MULTIPLE``·τ⌉).

    Parameters
    ----------
    tau_worst : float
        The largest integrated autocorrelation time τ of the estimates (NaN or infinite: unknown, counts as 1).

    Returns
    -------
    int
        The steps T.

    Examples
    --------
    >>> default_steps(5.0), default_steps(50.0)
    (20000, 50000)
    """
    return int(max(MIN_STEPS, math.ceil(TAU_MULTIPLE * _tau(tau_worst))))


def burn_in_steps(tau_worst: float, spectral_radius: float = math.nan, *, kept: int | None = None,
                  total: int | None = None) -> int:
    """Return the steps to discard from the start at θ̂ (module docstring).

    Give ``kept`` (the steps after burn-in, when the burn-in comes on top of them) or ``total`` (the run's
    length, burn-in included: the burn-in is then at most half of it). The result is the largest of
    ⌈``BURN_IN_TAUS``·τ⌉, the equilibration steps of ``spectral_radius`` (ignored when NaN, i.e. unknown)
    and a tenth of ``kept`` (or ``total``).

    Parameters
    ----------
    tau_worst : float
        The largest integrated autocorrelation time τ (NaN or infinite: unknown, counts as 1).
    spectral_radius : float, optional
        The spectral radius ρ(𝒫) of the second-moment map (NaN: unknown).
    kept, total : int, optional
        The steps kept after burn-in, or the run's length with burn-in; exactly one.

    Returns
    -------
    int
        The burn-in steps.

    Raises
    ------
    SgtuneError
        If neither or both of ``kept`` and ``total`` are given.

    Examples
    --------
    >>> burn_in_steps(5.0, kept=20000), burn_in_steps(5.0, 0.999, total=20000)
    (2000, 4603)
    """
    if (kept is None) == (total is None):
        raise SgtuneError("burn_in_steps needs exactly one of kept= or total=")
    n = int(kept if kept is not None else total)  # type: ignore[arg-type]
    burn = max(n // 10, math.ceil(BURN_IN_TAUS * _tau(tau_worst)))
    if math.isfinite(spectral_radius):
        eq = minimum_burn_in(spectral_radius)
        if math.isfinite(eq):
            burn = max(burn, int(eq))
    return int(burn if total is None else min(burn, n // 2))


def minimum_burn_in(spectral_radius: float) -> float:
    """Return the equilibration steps of the second-moment map alone, the burn-in ``plan`` prices.

    The least a run from θ̂ needs before its covariance is within 1 % of stationary
    (:func:`~sgtune.theory.linear_chain.equilibration_steps`).

    Parameters
    ----------
    spectral_radius : float
        The spectral radius ρ(𝒫) of the second-moment map.

    Returns
    -------
    float
        The steps (``inf`` when ρ ≥ 1).

    Examples
    --------
    >>> minimum_burn_in(0.99), minimum_burn_in(1.0)
    (459.0, inf)
    """
    return equilibration_steps(spectral_radius)


def steps_for_error(mc_constant: float, n_chains: int, variance: float) -> int:
    """Return the steps per chain T = ⌈c/(C·v)⌉ that reach a Monte Carlo variance v.

    An estimate with Monte Carlo constant c (lim T·Var per chain) pooled over C chains has variance v
    after T steps per chain.

    Parameters
    ----------
    mc_constant : float
        The Monte Carlo constant c ≥ 0 (finite).
    n_chains : int
        The number of chains C.
    variance : float
        The target variance v > 0.

    Returns
    -------
    int
        The steps T.

    Raises
    ------
    SgtuneError
        If c is infinite or v ≤ 0 (no finite run reaches it).

    Examples
    --------
    >>> steps_for_error(10.0, 4, 1e-3)
    2500
    """
    if not (variance > 0 and math.isfinite(mc_constant) and mc_constant >= 0):
        raise SgtuneError(f"no finite run length reaches a Monte Carlo variance {variance!r} with constant "
                          f"{mc_constant!r}")
    return int(math.ceil(mc_constant / (n_chains * variance)))


def thinning(kept: int, n_chains: int, *, max_draws: int | None = None, min_draws: int | None = None) -> int:
    """Return k: keep every k-th of the ``kept`` steps per chain.

    At most ``max_draws`` draws pooled over the chains (k = ⌈kept·C/max_draws⌉), or at least
    ``min_draws`` per chain (k = ⌊kept/min_draws⌋); k ≥ 1.

    Parameters
    ----------
    kept : int
        The steps per chain after burn-in.
    n_chains : int
        The number of chains C.
    max_draws, min_draws : int, optional
        The most draws pooled over the chains, or the fewest per chain.

    Returns
    -------
    int
        The thinning k; 0 (no draws kept) when neither bound is given (or both are 0).

    Examples
    --------
    >>> thinning(20000, 4, max_draws=1000), thinning(20000, 4, min_draws=500), thinning(20000, 4)
    (80, 40, 0)
    """
    if max_draws:
        return max(1, -(-kept * n_chains // int(max_draws)))
    if min_draws:
        return max(1, kept // int(min_draws))
    return 0


def max_batches_per_chain(kept: int, tau_worst: float) -> int:
    """Return the most batches per chain whose batches are each ``BATCH_TAUS``·τ steps or longer.

    Parameters
    ----------
    kept : int
        The steps per chain after burn-in.
    tau_worst : float
        The largest integrated autocorrelation time τ (NaN or infinite: unknown, counts as 1).

    Returns
    -------
    int
        ⌊kept/(``BATCH_TAUS``·τ)⌋ (0 when even one batch would be too short).

    Examples
    --------
    >>> max_batches_per_chain(28501, 31.7)
    89
    """
    return int(kept // math.ceil(BATCH_TAUS * _tau(tau_worst)))


def check_batches_per_chain(run: RunSpec, tau_worst: float, given: int | None = None) -> int | None:
    """Return the batches per chain of a check whose standard errors a z-test trusts (module docstring).

    Given: refused when its batches would be shorter than ``BATCH_TAUS``·τ. Not given: the
    :class:`~sgtune.core.config.RunSpec` default, lowered (to an even count ≥ 2) when its batches would be
    that short; ``None`` when the default is long enough.

    Parameters
    ----------
    run : RunSpec
        The run (its kept steps and chains).
    tau_worst : float
        The predicted largest integrated autocorrelation time τ (NaN: unknown, nothing is checked).
    given : int or None, optional
        The batches per chain asked for.

    Returns
    -------
    int or None
        The batches per chain (``None``: the run's default).

    Raises
    ------
    SgtuneError
        ``given`` batches would each be shorter than ``BATCH_TAUS``·τ steps.

    Examples
    --------
    >>> from sgtune.core.config import RunSpec
    >>> run = RunSpec(20000, n_chains=4, burn_in=2000)
    >>> check_batches_per_chain(run, 5.0), check_batches_per_chain(run, 500.0), check_batches_per_chain(run, 5.0, 100)
    (None, 2, 100)
    """
    if not math.isfinite(tau_worst):
        return given
    kept = run.kept_steps
    most = max_batches_per_chain(kept, tau_worst)
    if given is None:
        return None if run.segments <= most else max(2, most - most % 2)
    if given > most and given > 2:
        length = kept / given
        raise SgtuneError(
            f"batches_per_chain must be at most {max(most, 2)} for this run, got {given}: batches of {length:.3g} "
            f"steps are shorter than {BATCH_TAUS:g} autocorrelation times (τ = {tau_worst:.3g} steps, predicted), "
            f"so their means are correlated, the standard errors too small and correct chains rejected; give at "
            f"most {max(most, 2)}, or a longer run (more `n_steps`)")
    return given


def run_spec(tau_worst: float, spectral_radius: float = math.nan, *, n_chains: int, n_steps: int | None = None,
             burn_in: int | None = None, max_draws: int = 0, min_draws: int = 0,
             batches_per_chain: int | None = None, seed: int = 0) -> RunSpec:
    """Return the :class:`~sgtune.core.config.RunSpec` of a check.

    ``n_steps`` (default :func:`default_steps`), ``burn_in`` (default :func:`burn_in_steps` with
    ``total=n_steps``) and the thinning that keeps at most ``max_draws`` (pooled) or at least ``min_draws``
    (per chain) draws; given values are used as they are.

    Parameters
    ----------
    tau_worst : float
        The largest integrated autocorrelation time τ (NaN or infinite: unknown, counts as 1).
    spectral_radius : float, optional
        The spectral radius ρ(𝒫) of the second-moment map (NaN: unknown).
    n_chains : int
        The number of chains.
    n_steps, burn_in : int, optional
        The steps per chain (burn-in included) and the burn-in, when given.
    max_draws, min_draws : int, optional
        The bounds of :func:`thinning` (0: not given).
    batches_per_chain : int, optional
        Batch-means segments per chain (:class:`~sgtune.core.config.RunSpec`).
    seed : int, optional
        The seed of the chains.

    Returns
    -------
    RunSpec
        The run.

    Examples
    --------
    >>> run_spec(5.0, n_chains=4, max_draws=1000)
    RunSpec(n_steps=20000, n_chains=4, burn_in=2000, thin=72, batches_per_chain=None, seed=0)
    """
    steps = default_steps(tau_worst) if n_steps is None else int(n_steps)
    burn = burn_in_steps(tau_worst, spectral_radius, total=steps) if burn_in is None else int(burn_in)
    thin = thinning(steps - burn, n_chains, max_draws=max_draws, min_draws=min_draws)
    return RunSpec(steps, n_chains=n_chains, burn_in=burn, thin=thin, batches_per_chain=batches_per_chain, seed=seed)


def default_run_length(tau_worst: float, spectral_radius: float = math.nan) -> tuple[int, int]:
    """Return the (steps, burn-in) of :func:`run_spec` when neither is given.

    Parameters
    ----------
    tau_worst : float
        The largest integrated autocorrelation time τ (NaN or infinite: unknown, counts as 1).
    spectral_radius : float, optional
        The spectral radius ρ(𝒫) of the second-moment map (NaN: unknown).

    Returns
    -------
    steps : int
        The steps per chain, burn-in included (:func:`default_steps`).
    burn_in : int
        The burn-in (:func:`burn_in_steps` with ``total=steps``).

    Examples
    --------
    >>> default_run_length(5.0, 0.99)
    (20000, 2000)
    """
    steps = default_steps(tau_worst)
    return steps, burn_in_steps(tau_worst, spectral_radius, total=steps)


@dataclass(frozen=True)
class RunOptions:
    """A check's run whose open fields (``None``) the run-length policy fills from the predicted τ and ρ.

    The :class:`~sgtune.core.config.RunSpec` fields a caller may leave open.

    Parameters
    ----------
    n_steps : int or None, optional
        Steps per chain, burn-in included (default :func:`default_steps`).
    burn_in : int or None, optional
        Steps discarded (default :func:`burn_in_steps` with ``total=n_steps``).
    n_chains : int, optional
        The number of chains C.
    batches_per_chain : int or None, optional
        Batch-means segments per chain (default: :func:`check_batches_per_chain`'s).
    seed : int, optional
        The seed of the chains.

    Examples
    --------
    >>> from sgtune.workflows.run_length import RunOptions, resolve_run
    >>> resolve_run(RunOptions(n_chains=4), 5.0)
    RunSpec(n_steps=20000, n_chains=4, burn_in=2000, thin=0, batches_per_chain=None, seed=0)
    """

    n_steps: int | None = None
    burn_in: int | None = None
    n_chains: int = 16
    batches_per_chain: int | None = None
    seed: int = 0


def resolve_run(run: Any, tau_worst: float, spectral_radius: float = math.nan, *, max_draws: int = 0,
                min_draws: int = 0) -> RunSpec:
    """Return the :class:`~sgtune.core.config.RunSpec` a check runs, from a ``RunSpec`` or :class:`RunOptions`.

    What is open is filled by the policy (:func:`run_spec`; a ``RunSpec`` without ``burn_in`` gets the
    policy's burn-in, not T // 10, and one without ``thin`` the thinning of the draw bounds), and the batches
    are checked against τ (:func:`check_batches_per_chain`).

    Parameters
    ----------
    run : RunSpec or RunOptions
        The run as given.
    tau_worst : float
        The predicted largest integrated autocorrelation time τ (NaN: unknown).
    spectral_radius : float, optional
        The spectral radius ρ(𝒫) of the second-moment map (NaN: unknown).
    max_draws, min_draws : int, optional
        The bounds of :func:`thinning` (0: not given).

    Returns
    -------
    RunSpec
        The run.

    Raises
    ------
    SgtuneError
        Batches too short for τ, or counts out of range.

    Examples
    --------
    >>> from sgtune.core.config import RunSpec
    >>> resolve_run(RunSpec(1000, n_chains=4), 5.0).burn_in
    100
    """
    opts = run if isinstance(run, RunOptions) else RunOptions(
        n_steps=run.n_steps, burn_in=run.burn_in, n_chains=run.n_chains, batches_per_chain=run.batches_per_chain,
        seed=run.seed)
    spec = run_spec(tau_worst, spectral_radius, n_chains=opts.n_chains, n_steps=opts.n_steps, burn_in=opts.burn_in,
                    max_draws=max_draws, min_draws=min_draws, batches_per_chain=opts.batches_per_chain,
                    seed=opts.seed)
    if isinstance(run, RunSpec) and run.thin and not (max_draws or min_draws):
        spec = spec.replace(thin=run.thin)
    batches = check_batches_per_chain(spec, tau_worst, opts.batches_per_chain)
    return spec if batches == spec.batches_per_chain else spec.replace(batches_per_chain=batches)
