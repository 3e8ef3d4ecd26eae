"""The ``applicability`` JSON object and its warnings, shared by every command that predicts a chain."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..theory.applicability import COLUMN_SCALE_RATIO, applicability
from ._io import slow_stage, untrusted, warn

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
    try:
        with slow_stage("applicability: evaluating the loss over the predicted spread"):
            a = applicability(prob.model, data, prob.expansion, stationary, target_cov=target_cov,
                              backward_error=backward_error, n_pairs=16 if small else 6, seed=seed)
    except np.linalg.LinAlgError:
        if prob.expansion.whitening() is None:
            raise
        # the prediction was solved in whitened coordinates; the check's solves run in θ's own units
        lam = np.linalg.eigvalsh(prob.expansion.hessian)
        return skipped_report(f"the Hessian's condition number {lam[-1] / lam[0]:.2g} in the units of θ is beyond "
                              "the check's solves", "standardise the covariates (subtract the mean, divide by the "
                              "standard deviation) to have it checked")
    for reason in () if quiet_reasons else a.reasons:
        untrusted(f"not applicable: {reason}")
    csr = a.conditioning.get("column_scale_ratio")
    if csr is not None and csr > COLUMN_SCALE_RATIO:
        warn(f"the covariates' column scales (RMS) differ by a factor {csr:.3g} (> {COLUMN_SCALE_RATIO:.0e}): "
             "standardise them (subtract the mean, divide by the standard deviation) for a better-conditioned fit")
    for note in (a.subsample or {}).get("uncertain", []):
        warn(f"applicability estimated on a random subsample of {a.subsample['rows']} of the "  # type: ignore[index]
             f"{a.subsample['of']} rows: {note}, so the verdict may differ on all rows; "  # type: ignore[index]
             "check the chain with sgtune verify")
    doc = {"checked": True, **a.to_dict()}
    if a.linearised_cov is not None:
        doc["statistically_linearised_cov"] = a.linearised_cov
    return doc


def skipped_report(why: str, remedy: str = "run the command without --no-applicability") -> dict[str, Any]:
    """The ``applicability`` object of a command that did not compute the report, and its warning."""
    warn(f"applicability not checked ({why}): the prediction is exact for the linearised chain, and whether the "
         f"chain on the loss itself follows it was not checked; {remedy}")
    return {"checked": False, "reason": why, "reasons": [], "note": f"not checked ({why}); {remedy}"}
