"""The ``applicability`` JSON object and its warnings, shared by every command that predicts a chain."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..theory.applicability import applicability
from ._io import announced, untrusted, warn
from ._kronecker_remedy import kronecker_remedy
from ._remedies import as_text, render

#: above this D the statistical linearisation takes fewer draws (each is a pass over the data)
LARGE_DIM = 200


def applicability_report(prob: Any, stationary: Any, *, target_cov: Any = None, backward_error: float | None = None,
                         seed: int = 0, quiet_reasons: bool = False) -> dict[str, Any]:
    """Run :func:`sgtune.theory.applicability.applicability` for a loaded problem; warn (and mark the result
    untrusted, so ``--strict`` exits 4) for each reason; return the JSON object."""
    small = prob.dim <= LARGE_DIM
    data = prob.dataset
    if prob.expansion.n_samples != data.n_data:  # --subsample M: the rows the expansion used (same seeded draw)
        data = data.subsample(prob.expansion.n_samples, np.random.default_rng(seed))
    label, long = _announcement(prob, data, 16 if small else 6, stationary.cov)
    try:
        with announced(label, _quiet(), at_once=long):
            a = applicability(prob.model, data, prob.expansion, stationary, target_cov=target_cov,
                              backward_error=backward_error, n_pairs=16 if small else 6, seed=seed,
                              network_remedies=(kronecker_remedy,))
    except np.linalg.LinAlgError:
        if prob.expansion.whitening() is None:
            raise
        # the prediction was solved in whitened coordinates; the check's solves run in θ's own units
        lam = np.linalg.eigvalsh(prob.expansion.hessian)
        return skipped_report(f"the Hessian's condition number {lam[-1] / lam[0]:.2g} in the units of θ is beyond "
                              "the check's solves", "standardise the covariates (subtract the mean, divide by the "
                              "standard deviation) to have it checked")
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


def typical_evaluations(n_pairs: int, iterations: int = 3) -> int:
    """Expansions the applicability report computes with ``n_pairs`` antithetic pairs: the ±2 sd axes (8), then
    ``iterations`` fixed-point iterations of 2·n_pairs points and a shifted centre (statistically_linearised_cov:
    typically 3, at most 6)."""
    return 8 + iterations * (2 * n_pairs + 1)


def _announcement(prob: Any, data: Any, n_pairs: int, cov: Any = None) -> tuple[str, bool]:
    """The report's progress label and whether it is long enough to say so at once: above LARGE_DIM one model
    evaluation over all rows (its expansion and mean_n J_nΣJ_n at ``cov``) is timed (a few percent of the
    report) and the label says roughly how long the
    report takes (``applicability report (… about 3 min: ~47 evaluations of the model over 5000 rows of
    about 4 s each)``)."""
    import time

    from ..models.expansion import expansion_at
    from ._io import QUIET_PROGRESS_AFTER, rough_seconds

    label = "applicability report (the model over the predicted spread"
    if prob.dim <= LARGE_DIM:
        return label + ")", False
    e = prob.expansion
    tic = time.perf_counter()
    ei = expansion_at(prob.model, data, e.prior_precision, e.theta_hat, population_size=e.population_size)
    if cov is not None:  # each point also needs its linearised gradient noise, mean_n J_nΣJ_n (dear for blocks)
        ei.mean_jsj(cov)
    each = time.perf_counter() - tic
    k, most = typical_evaluations(n_pairs), typical_evaluations(n_pairs, 6)
    total = k * each
    at_least = rough_seconds(total).replace("about", "at least")  # each point costs more than what is timed
    label += (f"; {at_least} at this speed: {k}–{most} evaluations of the model over {data.n_data} rows at "
              f"D = {prob.dim}, {rough_seconds(each)} each and more)")
    return label, total > 3 * QUIET_PROGRESS_AFTER


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
