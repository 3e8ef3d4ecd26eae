"""The ``applicability`` JSON object and its warnings, shared by every command that predicts a chain."""
from __future__ import annotations

from typing import Any

from ..theory.applicability import applicability
from ._io import announced, untrusted, warn
from ._remedies import as_text, render

#: above this D the statistical linearisation takes fewer draws (each is a pass over the data)
LARGE_DIM = 200

EQUILIBRATION_NOTE = ("equilibration: steps from θ̂ until every second moment is within 1 % of stationary; τ (worst) "
                      "is how far apart draws must be to count as independent once there")


def applicability_report(prob: Any, stationary: Any, *, target_cov: Any = None, backward_error: float | None = None,
                         seed: int = 0, quiet_reasons: bool = False) -> dict[str, Any]:
    """Run :func:`sgtune.theory.applicability.applicability` for a loaded problem; warn (and mark the result
    untrusted, so ``--strict`` exits 4) for each reason; return the JSON object."""
    small = prob.dim <= LARGE_DIM
    data = prob.dataset
    if prob.expansion.n_samples != data.n_data:  # --subsample M: the rows the expansion used (same seeded draw)
        import numpy as np

        data = data.subsample(prob.expansion.n_samples, np.random.default_rng(seed))
    with announced("applicability report (the model over the predicted spread)", _quiet()):
        a = applicability(prob.model, data, prob.expansion, stationary, target_cov=target_cov,
                          backward_error=backward_error, n_pairs=16 if small else 6, seed=seed)
    doc = {"checked": True, **a.to_dict()}
    for detail, reason in zip(doc["reason_details"], a.reasons):  # remedies as the commands that apply them
        detail["remedies"] = render(reason.remedies)
    doc["remedies"] = render(r for reason in a.reasons for r in reason.remedies)
    for detail in () if quiet_reasons else doc["reason_details"]:
        untrusted(f"not applicable: {detail['message']}{as_text(detail['remedies'])}")
    for note in a.notes:
        warn(note.message)
    for note in (a.subsample or {}).get("uncertain", []):
        warn(f"applicability estimated on a random subsample of {a.subsample['rows']} of the "  # type: ignore[index]
             f"{a.subsample['of']} rows: {note}, so the verdict may differ on all rows; "  # type: ignore[index]
             "check the chain with sgtune verify")
    if a.linearised_cov is not None:
        doc["statistically_linearised_cov"] = a.linearised_cov
    return doc


def _quiet() -> bool:
    """``-q`` of the running command."""
    import click

    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.params.get("quiet"))


def skipped_report(why: str, remedy: str = "run the command without --no-applicability") -> dict[str, Any]:
    """The ``applicability`` object of a command that did not compute the report, and its warning."""
    warn(f"applicability not checked ({why}): the prediction is exact for the linearised chain, and whether the "
         f"chain on the loss itself follows it was not checked; {remedy}")
    return {"checked": False, "reason": why, "reasons": [], "reason_codes": [], "remedies": [],
            "note": f"not checked ({why}); {remedy}"}


def applicability_rows(doc: dict[str, Any], tau_worst: float) -> list[tuple[str, Any]]:
    """Rows for the human table: the verdict, equilibration next to τ, the predicted deviation."""
    if not doc.get("checked", True):
        return [("applicable", f"not checked ({doc['reason']})"), ("tau (worst)", tau_worst)]
    eq = doc["equilibration_steps"]
    rows: list[tuple[str, Any]] = [
        ("applicable", "yes" if doc["applicable"] else "NO (see the warnings)"),
        ("equilibration steps", eq if isinstance(eq, str) else f"{eq:.4g}"),
        ("tau (worst)", tau_worst),
        ("non-quadratic deviation", doc["predicted_deviation"]),
        ("mean shift (sd)", doc["mean_shift"]),
    ]
    return rows
