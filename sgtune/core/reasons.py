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

__all__ = ["Reason", "Remedy"]


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
