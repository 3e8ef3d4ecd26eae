"""Model "numba specs": pure data that the sampler maps to a jitted gradient component.

A model may expose ``numba_spec(n_features) -> (kind, ints, floats)`` (``kind`` a string,
``ints`` an int64 vector, ``floats`` a float64 vector; ``n_features`` = p of the data, which a
network needs for its input width and a GLM ignores); nothing else about the model reaches numba.
:data:`ORACLES` maps ``kind`` to its gradient component (:mod:`sgtune.sampler.grads`,
:mod:`sgtune.sampler.mlp`), the per-chain work-buffer length it needs and the parameter
dimension D it implies for p features:

- ``"glm"``: ints = [model id] (:data:`~sgtune.sampler.grads.MODEL_IDS`: linear 0,
  logistic 1, poisson 2, beta-linear 3), floats = ``model_params(σ², p)``; D = p.
- ``"mlp"``: ints = [n_in, h_1, …, h_K, 1, activation, likelihood] (activation tanh 0,
  relu 1, softplus 2; likelihood gaussian/linear 0, bernoulli/logistic 1, poisson 2),
  floats = ``model_params(σ²)``; D = Σ_l n_l (n_{l−1} + 1) (:mod:`sgtune.sampler.mlp`; the
  model is :class:`sgtune.models.mlp.MLP`).
- ``"multinomial"``: ints = [K, r, p] (r = K − 1 baseline, K full), floats = the K sorted class
  labels; D = r·p (:mod:`sgtune.sampler.multinomial`; the model is
  :class:`sgtune.models.multinomial.Multinomial`).
- ``"quadratic-gaussian"`` / ``"quadratic-stable"``: the synthetic-noise oracles of
  :func:`~sgtune.sampler.driver.run_quadratic_chains` (no data).

:func:`numba_spec_of` returns a model's validated spec (``model.numba_spec(p)``; GLMs and MLPs
have one) or ``None``: models without one run on the general NumPy path
(:mod:`sgtune.sampler.general`). Adding a compiled model = a gradient component
plus one :class:`Oracle` entry here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core.errors import SgtuneError
from ..models.base import checked_call, model_label
from . import grads, mlp, mlp_loss, multinomial

__all__ = ["Oracle", "ORACLES", "numba_spec_of", "validated_spec"]


@dataclass(frozen=True)
class Oracle:
    """A compiled gradient: component, work size (ints, D, B) -> W, and D from (ints, p).

    ``value_grad_fn`` (optional) is the gradient component with one more argument ``want`` that also
    returns the minibatch mean loss when ``want`` is true (the SMILE chains need the log-density
    difference for the energy error; :mod:`sgtune.sampler.smile_chain`); ``None`` when the oracle has
    no loss (the quadratic ones).
    """

    grad_fn: Any
    work_size: Callable[[np.ndarray, int, int], int]
    n_params: Callable[[np.ndarray, int], int]
    check: Callable[[np.ndarray, np.ndarray, str], None]
    value_grad_fn: Any = None


def _check_glm(ints: np.ndarray, floats: np.ndarray, label: str) -> None:
    if ints.shape != (1,) or not 0 <= int(ints[0]) <= grads.BETA_LINEAR:
        raise SgtuneError(f"model {label}: a 'glm' numba spec needs ints = [model id in 0..3], got {ints.tolist()}")
    if floats.shape[0] < 3:
        raise SgtuneError(f"model {label}: a 'glm' numba spec needs floats = model_params(σ², p) (length 5), "
                          f"got length {floats.shape[0]}")


def _check_none(ints: np.ndarray, floats: np.ndarray, label: str) -> None:
    return None


ORACLES: dict[str, Oracle] = {
    "glm": Oracle(grads.glm_grad, lambda ints, d, b: max(b, 1), lambda ints, p: p, _check_glm, grads.glm_value_grad),
    "mlp": Oracle(mlp.mlp_oracle_grad, lambda ints, d, b: max(mlp.work_size(ints, d, b), mlp_loss.work_size(ints, b)),
                  lambda ints, p: mlp.n_params(ints), mlp.check_spec, mlp_loss.mlp_oracle_value_grad),
    "multinomial": Oracle(multinomial.multinomial_grad, multinomial.work_size, multinomial.n_params,
                          multinomial.check_spec, multinomial.multinomial_value_grad),
    "quadratic-gaussian": Oracle(grads.quad_gauss_grad, lambda ints, d, b: d, lambda ints, p: p, _check_none),
    "quadratic-stable": Oracle(grads.quad_stable_grad, lambda ints, d, b: d, lambda ints, p: p, _check_none),
}


def numba_spec_of(model: Any, n_features: int) -> tuple[str, np.ndarray, np.ndarray] | None:
    """``(kind, ints, floats)`` of ``model`` on data with ``n_features`` columns (validated), or ``None``
    for the general NumPy path.

    Calls ``model.numba_spec(n_features)`` when the model has it (a result of ``None`` or kind
    ``"python"`` means "no spec"); an exception inside it becomes one :class:`~sgtune.models.ModelError`.
    """
    if getattr(model, "numba_spec", None) is None:
        return None
    return validated_spec(checked_call(model, "numba_spec", int(n_features)), model_label(model))


def validated_spec(spec: Any, label: str) -> tuple[str, np.ndarray, np.ndarray] | None:
    """A model's ``numba_spec(p)`` answer checked: ``(kind, ints, floats)`` as int64/float64 vectors the oracle
    ``kind`` accepts, or None (no spec, or kind ``"python"``: the general NumPy path).

    Parameters
    ----------
    spec : object
        What ``model.numba_spec(p)`` returned (None: the model has no spec).
    label : str
        The model's label, for messages.

    Returns
    -------
    tuple or None
        ``(kind, ints, floats)``, or None.

    Raises
    ------
    SgtuneError
        The answer is not a valid spec.

    Examples
    --------
    >>> from sgtune.sampler.specs import validated_spec
    >>> kind, ints, floats = validated_spec(("glm", [1], [1.0, 0, 0, 0, 0]), "logistic")
    >>> kind, ints.dtype.name
    ('glm', 'int64')
    """
    if spec is None:
        return None
    try:
        kind, ints, floats = spec
    except (TypeError, ValueError):
        raise SgtuneError(f"model {label}.numba_spec must return (kind, ints, floats), got {spec!r}") from None
    if kind == "python":  # an explicit "no compiled gradient"
        return None
    if kind not in ORACLES:
        raise SgtuneError(f"model {label}.numba_spec kind must be one of {', '.join(ORACLES)}, got {kind!r}")
    ints = np.ascontiguousarray(np.asarray(ints).reshape(-1))
    if ints.dtype.kind not in "iu":
        raise SgtuneError(f"model {label}.numba_spec ints must be integers, got dtype {ints.dtype}")
    ints = ints.astype(np.int64)
    floats = np.ascontiguousarray(np.asarray(floats, dtype=np.float64).reshape(-1))
    if not np.all(np.isfinite(floats)):
        raise SgtuneError(f"model {label}.numba_spec floats must be finite, got {floats.tolist()}")
    ORACLES[kind].check(ints, floats, label)
    return str(kind), ints, floats
