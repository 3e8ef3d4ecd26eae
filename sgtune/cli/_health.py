"""The ``health`` key of the chain-running commands (run, verify, calibrate) and its warnings."""
from __future__ import annotations

from typing import Any

from ..diagnostics.health import chain_health
from ..sampler import ChainResult
from ..workflows.verify import CHECK_TOLERANCE, chain_prediction, prediction_check
from ._against import Against
from ._io import untrusted

#: above this D, ``run`` does not solve for its own prediction (a dense Lyapunov solve; seconds at D = 1000)
PREDICTION_MAX_DIM = 200
#: the posterior samplers' prediction is only (βH)⁻¹ (one inverse: 0.1 s at D = 2000), so ``run`` checks them up to
#: this D: without the check a tuned SMILE chain that is off its posterior would carry no warning at all
POSTERIOR_CHECK_MAX_DIM = 2000


def health_report(chains: ChainResult, *, initial_step_size: float | None = None,
                  check: dict[str, Any] | None = None, predict: dict[str, Any] | None = None,
                  against: Against | None = None) -> dict[str, Any]:
    """:func:`~sgtune.diagnostics.health.chain_health` as a JSON object; every reason is a warning (stderr
    even with ``-q``, JSON ``warnings``) and marks the result untrusted (``--strict`` exits 4).

    ``check`` is a prediction check the command already made (verify's test, calibrate's); else
    ``predict`` holds the keyword arguments of :func:`~sgtune.workflows.verify.chain_prediction` (with
    ``expansion`` and ``step_matrix``), solved here up to :data:`PREDICTION_MAX_DIM` (the posterior samplers, whose
    prediction is an inverse: up to :data:`POSTERIOR_CHECK_MAX_DIM`), unless ``against``
    (``--against``) names another covariance: the check then compares with it, with a model error of
    the larger of :data:`~sgtune.workflows.verify.CHECK_TOLERANCE` and what its source vouches for.
    """
    note = None
    if check is None and against is not None and against.cov is not None:
        check = prediction_check(chains, against.cov, mode=against.label,
                                 relative_tolerance=max(CHECK_TOLERANCE, against.tolerance))
    elif check is None and predict is not None:
        dim, limit = predict["expansion"].dim, _check_max_dim(predict.get("sampler"))
        if dim > limit:
            note = f"no prediction check above D = {limit} (run sgtune verify for one)"
        else:
            kw = dict(predict)
            cov, mode = chain_prediction(kw.pop("expansion"), kw.pop("step_matrix"), **kw)
            check = prediction_check(chains, cov, mode=mode)
            if check is None and cov is None:
                note = mode
    h = chain_health(chains, initial_step_size=initial_step_size, prediction_check=check)
    out = h.to_dict()
    if note is not None:
        out["prediction_note"] = note
    for reason in h.reasons:
        untrusted(f"unhealthy chains: {reason}")
    return out


def _check_max_dim(sampler: str | None) -> int:
    """The largest D at which ``run`` makes its own prediction check for this sampler."""
    if sampler is None:
        return PREDICTION_MAX_DIM
    from ..sampler.registry import sampler_spec

    return POSTERIOR_CHECK_MAX_DIM if sampler_spec(sampler).prediction == "posterior" else PREDICTION_MAX_DIM
