"""The inverse temperature at which the Kronecker family passes its own check (a short geometric search).

The analogue, for ``--family kronecker``, of the dense route's inverse-temperature search
(:data:`sgtune.theory.applicability.BETA_SEARCH_SCALES`): when the family's matrix-free applicability report
(:func:`sgtune.workflows.kronecker_applicability.kronecker_applicability`) fails at the requested β, the step is
re-tuned (:func:`sgtune.theory.kronecker.tune_factors`, same factors, B, κ, batching and target) at each β of a
short geometric ladder above it, :data:`BETA_LADDER` times the requested one, and checked with a capped series
(:data:`SEARCH_MAX_TERMS` terms); the smallest β that passes is the answer. The search stops early when its
time budget (:data:`SEARCH_MAX_SECONDS`) would be
overrun by the next β, so that a remedy costs seconds, not minutes.

Measured (``benchmarks/kronecker_beta.py``, docs/guide/kronecker.md "β search"): for the posterior target a
larger β makes Λ larger (less injected noise, a larger gradient-noise share), so on tanh/relu networks whose
check fails at β = 2N through the minibatch-curvature growth, larger β fails the same way, more so; on those
networks no β of the ladder passes and the search says so in one line (:meth:`KroneckerSearch.message`).

The prior search (:func:`search_prior_precision`, :data:`PRIOR_LADDER`) runs the same ladder, budget and capped
check over the prior precision δ instead: the KFAC factors A, G do not depend on δ, only the damping
(:func:`sgtune.theory.kronecker.damped_factors`, γ = δ/N) does, so each δ is a re-tune from the same factors. A
larger δ shrinks the posterior's variance along the prior-held flat directions (steps ~ 1/γ), the directions the
network's nonlinearity and minibatch curvature do not tolerate. The command line's remedy runs this search, not
the β search (docs/guide/kronecker.md "β and prior search").
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core.errors import SgtuneError

__all__ = ["KroneckerSearch", "search_inverse_temperature", "search_prior_precision",
           "BETA_LADDER", "PRIOR_LADDER", "SEARCH_MAX_TERMS", "SEARCH_MAX_SECONDS"]

#: the search's inverse temperatures, as multiples of the requested one (smallest first; the first that passes is
#: the answer): at most len(...) checks
BETA_LADDER = (2.0, 4.0, 8.0)
#: the prior search's precisions, as multiples of the requested δ (smallest first)
PRIOR_LADDER = (4.0, 16.0, 64.0)
#: series budget of each check (the report's default is 1000 terms, one full-data Hessian-vector product each)
SEARCH_MAX_TERMS = 200
#: no new β is tried when, at the mean cost of those tried, it would end past this many seconds (the first is always
#: tried). Measured per β (tune + capped check, ``benchmarks/kronecker_beta.py``): 0.9–1.3 s at D = 9, 2.2–5.5 s at D = 81
#: (N = 500), 7.5–14.5 s at D = 321 (N = 2000) on the shared 2-core VM (load varies): all three βs up to D ≈ 100
SEARCH_MAX_SECONDS = 30.0


@dataclass(frozen=True)
class KroneckerSearch:
    """Result of :func:`search_inverse_temperature` and :func:`search_prior_precision`: one ladder of one quantity.

    Attributes
    ----------
    quantity : {"inverse temperature", "prior precision"}
        What the ladder varies (β, or the prior precision δ).
    requested : float
        The value the family's failed check used (the requested β, or the factors' δ).
    tried : tuple of float
        The values checked, in order.
    passed : tuple of bool
        Whether each one's applicability report passed.
    reasons : tuple of str
        The first reason each failed check gave ("" for a pass).
    value : float or None
        The smallest value tried whose report passed (None: none did).
    seconds : float
        Wall time of the search.
    ladder_end : float
        The largest value of the ladder (the range's end, tried or not).
    stopped_early : bool
        Whether the time budget ended the search before the ladder's end.

    Examples
    --------
    >>> from sgtune.workflows.kronecker_beta import KroneckerSearch
    >>> s = KroneckerSearch("inverse temperature", 100.0, (200.0,), (False,), ("diverges",), None, 1.0, 800.0, True)
    >>> s.found
    False
    """

    quantity: str
    requested: float
    tried: tuple[float, ...]
    passed: tuple[bool, ...]
    reasons: tuple[str, ...]
    value: float | None
    seconds: float
    ladder_end: float
    stopped_early: bool

    @property
    def found(self) -> bool:
        """Whether some value of the ladder passed."""
        return self.value is not None

    def message(self) -> str:
        """One line: the value found, or that none up to the range's end passes."""
        if self.value is not None:
            return (f"the Kronecker family passes its applicability check at {self.quantity} {self.value:.6g} "
                    f"({len(self.tried)} checked from {self.tried[0]:.6g}, {self.seconds:.0f} s)")
        upto = max(self.tried) if self.tried else self.requested
        why = f"; the time budget stopped it before {self.ladder_end:.6g}" if self.stopped_early else ""
        return (f"no {self.quantity} from {self.requested:.6g} to {upto:.6g} makes the Kronecker family's "
                f"applicability check pass ({len(self.tried)} checked in {self.seconds:.0f} s{why})")


def _ladder(values: list[float], check: Callable[[float], tuple[bool, str]],
            max_seconds: float) -> tuple[list[float], list[bool], list[str], float | None, bool, float]:
    """Check ``values`` in order until one passes or the budget would be overrun: (tried, passed, reasons, the
    first that passed or None, stopped early, seconds)."""
    tic = time.perf_counter()
    tried: list[float] = []
    passed: list[bool] = []
    reasons: list[str] = []
    for value in values:
        spent = time.perf_counter() - tic
        if tried and spent + spent / len(tried) > max_seconds:  # the next value would end past the budget
            break
        ok, why = check(value)
        tried.append(value)
        passed.append(ok)
        reasons.append(why)
        if ok:
            break
    found = next((v for v, ok in zip(tried, passed) if ok), None)
    early = found is None and len(tried) < len(values)
    return tried, passed, reasons, found, early, time.perf_counter() - tic


def _check(fac: Any, dynamics: Any, target: str, beta: float, net: Any, X: Any, y: Any, likelihood: str,
           noise_variance: float, max_terms: int, seed: int) -> tuple[bool, str]:
    """Tune at ``beta`` and run the capped check: (passed, first reason)."""
    from ..theory.kronecker import tune_factors
    from .kronecker_applicability import kronecker_applicability

    try:
        res = tune_factors(fac, dynamics.replace(step=None, inv_temperature=beta), target=target)
        app = kronecker_applicability(res, net, X, y, likelihood, noise_variance=noise_variance, seed=seed,
                                      max_terms=max_terms)
    except (SgtuneError, np.linalg.LinAlgError) as exc:
        return False, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return app.applicable, "" if app.applicable else app.reasons[0]


def search_inverse_temperature(factors: Any, dynamics: Any, module: Any, X: Any, y: Any,
                               likelihood: str = "gaussian", *, target: str = "posterior", noise_variance: float = 1.0,
                               ladder: tuple[float, ...] = BETA_LADDER, max_seconds: float = SEARCH_MAX_SECONDS,
                               seed: int = 0,
                               progress: Callable[[str], None] | None = None) -> KroneckerSearch:
    """Search the smallest β of a geometric ladder at which the Kronecker family passes its check.

    Each β = ``c`` × (the requested β) for ``c`` in ``ladder``, smallest first: the per-layer Λ is re-tuned from the
    same factors (:func:`sgtune.theory.kronecker.tune_factors`) and checked matrix-free
    (:func:`sgtune.workflows.kronecker_applicability.kronecker_applicability`, capped at
    :data:`SEARCH_MAX_TERMS` series terms); the first that passes ends the search. No β is started that would end
    past ``max_seconds``.

    Parameters
    ----------
    factors : KroneckerFactors
        The network's factors at θ̂ (:mod:`sgtune.models.kfac`), with the prior.
    dynamics : Dynamics
        The requested B, β, κ and batching (β finite: SGLD).
    module : torch.nn.Module
        The network at θ̂.
    X, y : array_like
        The data the factors were computed on.
    likelihood : {"gaussian", "bernoulli", "categorical"}, optional
        The loss.
    target : {"posterior", "sandwich"}, optional
        The tuning target.
    noise_variance : float, optional
        The variance σ² of the Gaussian likelihood.
    ladder : tuple of float, optional
        Multiples (> 1) of the requested β to try, smallest first.
    max_seconds : float, optional
        Time budget: no β is started that would, at the mean cost of those tried, end after it (the first always
        runs).
    seed : int, optional
        Seed of the checks' probes.
    progress : callable, optional
        Called once with a one-line description of the search before it starts.

    Returns
    -------
    KroneckerSearch
        The βs tried, their verdicts and the smallest that passed (or None).

    Raises
    ------
    SgtuneError
        β not finite (SGD has no inverse temperature to search), or a ladder multiple not above 1.

    Examples
    --------
    >>> import torch
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import torch_factors
    >>> from sgtune.workflows.kronecker_beta import search_inverse_temperature
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = X @ [1.0, -1.0] + rng.normal(size=200)
    >>> net = torch.nn.Linear(2, 1).double()
    >>> fac = torch_factors(net, X, y, "gaussian", prior_precision=1.0)
    >>> s = search_inverse_temperature(fac, Dynamics(None, 20, inv_temperature=400.0), net, X, y, ladder=(2.0,))
    >>> s.tried
    (800.0,)
    """
    beta0 = float(dynamics.inv_temperature)
    if not math.isfinite(beta0):
        raise SgtuneError("the inverse-temperature search needs SGLD (a finite inverse temperature); SGD has none")
    if not ladder or min(ladder) <= 1.0:
        raise SgtuneError(f"ladder must hold multiples above 1 of the requested inverse temperature, got {ladder}")
    betas = [float(f"{c * beta0:.6g}") for c in sorted(ladder)]
    if progress is not None:
        progress(f"searching the Kronecker family's inverse temperature: {len(betas)} checks from {betas[0]:.6g} to "
                 f"{betas[-1]:.6g} (at most {max_seconds:.0f} s)")
    tried, passed, reasons, found, early, seconds = _ladder(
        betas, lambda beta: _check(factors, dynamics, target, beta, module, X, y, likelihood, noise_variance,
                                   SEARCH_MAX_TERMS, seed), max_seconds)
    return KroneckerSearch("inverse temperature", beta0, tuple(tried), tuple(passed), tuple(reasons), found, seconds, betas[-1], early)


def search_prior_precision(factors: Any, dynamics: Any, module: Any, X: Any, y: Any,
                           likelihood: str = "gaussian", *, target: str = "posterior", noise_variance: float = 1.0,
                           ladder: tuple[float, ...] = PRIOR_LADDER, max_seconds: float = SEARCH_MAX_SECONDS,
                           seed: int = 0,
                           progress: Callable[[str], None] | None = None) -> KroneckerSearch:
    """Search the smallest prior precision δ of a geometric ladder at which the Kronecker family passes its check.

    Each δ = ``c`` × ``factors.prior_precision`` for ``c`` in ``ladder``, smallest first: the KFAC factors A, G do
    not depend on δ (only the damping γ = δ/N of :func:`sgtune.theory.kronecker.damped_factors` and the prior's
    eigenbasis do), so the per-layer Λ is re-tuned from the same factors with the new δ
    (:func:`sgtune.theory.kronecker.tune_factors`, same B, β, κ, batching and target) and checked matrix-free
    (:func:`sgtune.workflows.kronecker_applicability.kronecker_applicability`, capped at :data:`SEARCH_MAX_TERMS`
    series terms, its Hessian carrying the new δ) at the same θ̂; the first that passes ends the search. No δ is
    started that would end past ``max_seconds``.

    θ̂ is the point fitted with the original prior: the search refits nothing, so a δ it finds is checked at that
    θ̂, where the new prior's gradient (δ − δ₀)θ̂/N is not zero. A user who refits with the new δ (``--model mlp``
    does, from its initial weights) checks a slightly different point; a torch module's current weights are
    kept as they are.

    Parameters
    ----------
    factors : KroneckerFactors
        The network's factors at θ̂ (:mod:`sgtune.models.kfac`), with the requested prior δ₀ > 0.
    dynamics : Dynamics
        The requested B, β, κ and batching.
    module : torch.nn.Module
        The network at θ̂.
    X, y : array_like
        The data the factors were computed on.
    likelihood : {"gaussian", "bernoulli", "categorical"}, optional
        The loss.
    target : {"posterior", "sandwich"}, optional
        The tuning target.
    noise_variance : float, optional
        The variance σ² of the Gaussian likelihood.
    ladder : tuple of float, optional
        Multiples (> 1) of δ₀ to try, smallest first.
    max_seconds : float, optional
        Time budget: no δ is started that would, at the mean cost of those tried, end after it (the first always
        runs).
    seed : int, optional
        Seed of the checks' probes.
    progress : callable, optional
        Called once with a one-line description of the search before it starts.

    Returns
    -------
    KroneckerSearch
        The δs tried, their verdicts and the smallest that passed (or None).

    Raises
    ------
    SgtuneError
        No prior in the factors (δ₀ = 0: no multiple to take), or a ladder multiple not above 1.

    Examples
    --------
    >>> import torch
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import torch_factors
    >>> from sgtune.workflows.kronecker_beta import search_prior_precision
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = X @ [1.0, -1.0] + rng.normal(size=200)
    >>> net = torch.nn.Linear(2, 1).double()
    >>> fac = torch_factors(net, X, y, "gaussian", prior_precision=1.0)
    >>> s = search_prior_precision(fac, Dynamics(None, 20, inv_temperature=400.0), net, X, y, ladder=(4.0,))
    >>> s.tried
    (4.0,)
    """
    import dataclasses

    delta0 = float(factors.prior_precision)
    if not delta0 > 0:
        raise SgtuneError("the prior-precision search needs a prior (prior_precision > 0) to scale; the factors "
                          "carry none")
    if not ladder or min(ladder) <= 1.0:
        raise SgtuneError(f"ladder must hold multiples above 1 of the requested prior precision, got {ladder}")
    deltas = [float(f"{c * delta0:.6g}") for c in sorted(ladder)]
    if progress is not None:
        progress(f"searching the Kronecker family's prior precision: {len(deltas)} checks from {deltas[0]:.6g} to "
                 f"{deltas[-1]:.6g} at the current θ̂ (at most {max_seconds:.0f} s)")
    beta = float(dynamics.inv_temperature)

    def check(delta: float) -> tuple[bool, str]:
        fac = dataclasses.replace(factors, prior_precision=delta)
        return _check(fac, dynamics, target, beta, module, X, y, likelihood, noise_variance, SEARCH_MAX_TERMS, seed)

    tried, passed, reasons, found, early, seconds = _ladder(deltas, check, max_seconds)
    return KroneckerSearch("prior precision", delta0, tuple(tried), tuple(passed), tuple(reasons), found, seconds, deltas[-1], early)
