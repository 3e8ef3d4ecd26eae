"""Structured diagnoses: a :class:`Reason` (why an answer cannot be vouched for) with its :class:`Remedy` list.

The library says *what is wrong* and *what would change it* in its own vocabulary — parameter names
of the Python API (``inv_temperature``, ``batch_size``, ``prior_precision``, …) and computed values —
never as prose for one front end. The command line renders a remedy as the exact command that applies
it (JSON ``remedies``: ``{"why": …, "argv": ["sgtune", …]}``), through its one table from parameters to
options; nothing downstream matches the text of a message.

A remedy is either a change of settings (``changes``: parameter → new value, ``None`` to drop it) for
the same computation, or a different command (``command``, e.g. run the chains and check them with
``verify``) with its changes. ``expect`` says what applying it should give (``"applicable"``: the same
report comes out applicable; ``"runs"``: the command succeeds), so a test can run every remedy as
printed and check it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Reason", "Remedy", "REACHABLE_MARGIN", "CODES"]

#: the inverse temperature sgtune suggests for an unreachable target, as a multiple of the bound β_min below
#: which the injected noise alone exceeds the target (β_min = 1/μ_min(HΣ*) for dense Λ, Eq. (11) of Wang,
#: Ding & Huggins 2026: its Lyapunov form needs HΣ* − I/β to have eigenvalues > 0; β_min = N for the
#: posterior target). Any β > β_min is reachable, but Λ shrinks to 0 as β ↓ β_min, because the gradient
#: noise may then supply only a share 1 − β_min/β of the target; at 1.25·β_min it supplies a fifth
REACHABLE_MARGIN = 1.25


@dataclass(frozen=True)
class Remedy:
    """One way out, in the library's vocabulary.

    Attributes
    ----------
    why : str
        Plain words: what the change does and why it helps (shown to the user).
    changes : dict
        Parameter name (Python API) → new value; ``None`` removes the parameter. Values are
        computed (e.g. the inverse temperature that makes the target reachable), never a fixed recipe.
    command : str or None
        Another command to run instead (``"verify"``, ``"run"``, …); ``None`` means the same one.
    expect : str
        ``"applicable"`` (the same check passes after the change) or ``"runs"`` (it succeeds).

    Examples
    --------
    >>> from sgtune.core.reasons import Remedy
    >>> Remedy("a colder chain reaches the target", {"inv_temperature": 4000.0}).to_dict()["changes"]
    {'inv_temperature': 4000.0}
    """

    why: str
    changes: dict[str, Any] = field(default_factory=dict)
    command: str | None = None
    expect: str = "applicable"

    def to_dict(self) -> dict[str, Any]:
        """The library-level JSON form (the CLI adds ``argv``)."""
        return {"why": self.why, "changes": dict(self.changes), "command": self.command, "expect": self.expect}


@dataclass(frozen=True)
class Reason:
    """Why a result cannot be vouched for.

    Attributes
    ----------
    code : str
        A stable identifier (``"not-local"``, ``"not-quadratic"``, ``"slow-equilibration"``, …): code
        branches on it, never on ``message``.
    message : str
        Plain words, with the measured numbers.
    remedies : tuple of Remedy
        What would help, most promising first (may be empty when nothing sgtune knows would).

    See Also
    --------
    sgtune.theory.applicability.applicability : Reports its reasons this way.

    Examples
    --------
    >>> from sgtune.core.reasons import Reason, Remedy
    >>> why = Reason("slow-equilibration", "the chain needs 10⁶ steps to forget its start",
    ...              (Remedy("check the prediction on chains", command="verify", expect="runs"),))
    >>> str(why), why.remedies[0].command
    ('the chain needs 10⁶ steps to forget its start', 'verify')
    """

    code: str
    message: str
    remedies: tuple[Remedy, ...] = ()

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """The library-level JSON form."""
        return {"code": self.code, "message": self.message, "remedies": [r.to_dict() for r in self.remedies]}


#: Every code sgtune reports — applicability reasons (JSON ``applicability.reason_codes``) and the errors
#: that carry remedies — with what it means and the remedies sgtune computes for it (the documentation's
#: table is generated from this: docs/make_remedies.py).
CODES: dict[str, tuple[str, str]] = {
    "not-local": (
        "the predicted spread is not local: the statistical linearisation runs away, the model cannot be evaluated "
        "over the spread, or its curvature changes by more than 200 % between θ̂ and points 2 sd away",
        "for a tuned Λ, the inverse temperature searched with the check itself: Λ tuned where it is 1/2, 1/4, 1/8 "
        "and 1/16 as large, the first whose own report is applicable (`expect: applicable`), or none, and the "
        "reason then says that none in the range passes; with the posterior target of a convex model, then a prior "
        "precision refitted and checked the same way (the computed one, 4× and 16×); for a given scalar step, a step that keeps the local step stable. `--refine` "
        "is refused. For every code of the report, a tuned `--model mlp` (gaussian or bernoulli) first gets its "
        "last layer: `--model last-layer --features-from mlp`, the output layer at the fitted weights with the "
        "body frozen, whose own report sgtune computes (`expect: applicable` when it is, and then no temperature "
        "or prior is offered); a network model from a file that offers `features(theta, X)` and "
        "`last_layer_likelihood` likewise gets `--model last-layer --features-from net.py:MODEL --likelihood L`"),
    "not-quadratic": (
        "the spread is local but the loss bends over it: the linearised covariance is off by more than 5 %",
        "`--refine 3` (chains correct Λ until their covariance matches the target), then the inverse temperature "
        "of `not-local`"),
    "slow-equilibration": (
        "the second moments need many times τ_worst steps to settle: the state-dependent minibatch noise is "
        "close to critical, the chain's covariance heavy-tailed and slow to estimate",
        "a batch four times larger (at most N), then the inverse temperature of `not-local`"),
    "divergence-risk": (
        "the predicted spread reaches states where the minibatch step is unstable and the curvature keeps "
        "growing (a runaway), often enough that chains of the recommended length diverge",
        "the inverse temperature searched as for `not-local` (the first whose own report, divergence estimate "
        "included, passes); for a given scalar step, the step that scales Λ so the step stays stable out to the "
        "distance where the risk index is a quarter of its threshold"),
    "scale": (
        "the covariates' column scales differ by a factor above 1000 (advisory: the verdict is unchanged)",
        "standardise the covariates (subtract the mean, divide by the standard deviation)"),
    "unreachable-target": (
        "error: the injected noise alone exceeds the target at this inverse temperature (for the posterior target "
        "at β = N for every Λ > 0: any gradient noise adds to it)",
        f"the inverse temperature {REACHABLE_MARGIN:g}·β_min, β_min = 1/μ_min(HΣ*) (= N for the posterior): the "
        "gradient noise then supplies a fifth of the target"),
    "singular-curvature": (
        "error: the fit reached a stationary point whose curvature is singular (a network's symmetries, more "
        "parameters than the data fix), or the sandwich's J is not positive definite",
        "a prior precision that makes H = J + Γ/N positive definite at θ̂ with its smallest eigenvalue 1 % of its "
        f"largest, with the posterior target at β = {REACHABLE_MARGIN:g}·N where the command has a target (no prior "
        "makes J itself positive definite); for the sandwich, the posterior target at that β"),
    "indefinite-curvature": (
        "error: the curvature at the fitted θ̂ has a negative eigenvalue (a saddle point, not a minimum)",
        "as for `singular-curvature`: the computed prior precision, with the posterior target"),
    "chains-disagree": (
        "`calibrate`: the chains it ran disagree with the prediction (the health report's prediction check failed) "
        "although the checks of the linearised chain passed, so the prediction's inputs are off, e.g. an expansion "
        "fitted on a small `subsample` of the rows the chains run on",
        "none computed: fit on more rows (a larger `subsample`, or all of them), then check with `sgtune verify`"),
}
