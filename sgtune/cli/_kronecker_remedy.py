"""The Kronecker family as a checked remedy for a network (``--family kronecker``, docs/guide/kronecker.md).

:func:`kronecker_remedy` is passed to :func:`sgtune.theory.applicability.checked_remedies` (through
``applicability(..., network_remedies=...)``) by the command line: for sgtune's MLP (gaussian or bernoulli) or
a torch network from ``--model net.py:NET`` at its current weights, with a tuned Λ (posterior or sandwich
target), an isotropic prior and all rows in memory, it tunes the Kronecker family with the same B, β, momentum,
batching and target exactly as ``sgtune lambda --family kronecker`` would, and runs its matrix-free applicability
report (:func:`sgtune.workflows.kronecker_applicability.kronecker_applicability`). It is offered as what works
(``expect`` ``"applicable"``) when that report passes; when the report fails with the requested prior δ, the
smallest δ of a short ladder above it whose report passes
(:func:`sgtune.workflows.kronecker_beta.search_prior_precision`, ``--prior-precision`` set, at the same θ̂) and not
offered when none does (one line on stderr says so: a remedy that fails its own check is no way out). The β search
(:func:`sgtune.workflows.kronecker_beta.search_inverse_temperature`) is not run here: measured, a larger β only
makes the check fail worse (docs/guide/kronecker.md "β and prior search"); offered as a suggestion (``expect`` ``"runs"``, "not checked") when the check is not
run: D above :data:`~sgtune.workflows.kronecker_applicability.CHECK_MAX_DIM` (minutes of Hessian-vector
products) or PyTorch absent. The series of the check is capped at :data:`REMEDY_MAX_TERMS` terms (a chain that
needs more is too slow to offer).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import SgtuneError
from ..core.reasons import Remedy

__all__ = ["kronecker_remedy"]

#: series budget of the remedy's check (the report's default is 1000 terms, one full-data Hessian-vector product
#: each): a chain that needs more mixes too slowly to be offered, and the check stays a matter of seconds
REMEDY_MAX_TERMS = 200
#: options of the source command that ``--family kronecker`` refuses or ignores: the remedy drops them
DROPS = {"method": None, "blocks": None, "refine_rounds": None, "subsample": None}


def _network(model: Any, theta: np.ndarray, n_features: int) -> tuple[Any, str, float, bool] | None:
    """(torch module at θ̂ or None without torch, likelihood, σ², is sgtune's MLP), or None: not a network the
    family takes."""
    from ..models.mlp import MLP
    from ..models.user import is_model_file_spec

    if isinstance(model, MLP):
        if not model.hidden_sizes or model.likelihood not in ("gaussian", "bernoulli"):
            return None
        try:
            from ..io.kronecker_io import mlp_module

            net = mlp_module(model, theta, n_features)
        except ImportError:
            net = None
        return net, model.likelihood, float(model.noise_variance), True
    spec = getattr(model, "source", None)
    if not (isinstance(spec, str) and is_model_file_spec(spec)):
        return None
    inner = model.__dict__.get("model", model)  # a UserModel wraps the file's object (and guards its callables)
    module = getattr(inner, "module", None)
    if module is None or not hasattr(inner, "likelihood"):
        return None
    import torch

    if not isinstance(module, torch.nn.Module):
        return None
    current = torch.nn.utils.parameters_to_vector(module.parameters()).detach().double().numpy()
    if current.shape != theta.shape or not np.allclose(current, theta, rtol=0, atol=1e-12):
        return None  # the command line takes the module's own weights: θ̂ must be them
    return module, str(inner.likelihood), float(getattr(inner, "noise_variance", 1.0)), False


def _remedy(why_tail: str, dim: int, target: str, expect: str) -> Remedy:
    return Remedy(f"the Kronecker family: a per-layer Λ_l = M_l ⊗ Ã_l⁻¹ from the network's KFAC factors for all "
                  f"{dim} weights (no D×D matrix), same target, batch and β — {why_tail}",
                  {"family": "kronecker", "target": target, **DROPS}, command="lambda", expect=expect)


def _searched(fac: Any, dynamics: Any, net: Any, X: Any, y: Any, likelihood: str, sigma2: float, dim: int,
              name: str, is_mlp: bool) -> Remedy | None:
    """The family's check failed with the requested prior: the smallest δ of
    :data:`~sgtune.workflows.kronecker_beta.PRIOR_LADDER` whose check passes at the current θ̂, as what works
    (``--prior-precision`` set, every other option kept); none passes: one line on stderr, no remedy."""
    import click

    from ..workflows.kronecker_beta import search_prior_precision
    from ._io import info

    ctx = click.get_current_context(silent=True)
    quiet = bool(ctx is not None and ctx.params.get("quiet"))  # -q of the running command
    found = search_prior_precision(fac, dynamics, net, X, y, likelihood, target=name, noise_variance=sigma2,
                                   progress=lambda line: info(line + " …", quiet))
    info(found.message(), quiet)
    if found.value is None:
        return None
    where = ("checked at the current θ̂; the command refits the MLP with the new prior, which moves θ̂ a little"
             if is_mlp else "checked at the module's current weights, which the command keeps")
    return Remedy(f"the Kronecker family with prior precision {found.value:.6g}: a per-layer "
                  f"Λ_l = M_l ⊗ Ã_l⁻¹ from the network's KFAC factors for all {dim} weights (no D×D matrix), same "
                  f"target, batch and β — found by running its matrix-free applicability report at "
                  f"{len(found.tried)} prior precision(s) above the requested one ({where}): applicable",
                  {"family": "kronecker", "target": name, "prior_precision": found.value, **DROPS},
                  command="lambda", expect="applicable")


def kronecker_remedy(model: Any, data: Any, expansion: Any, stationary: Any, target_cov: Any) -> Remedy | None:
    """The Kronecker family for a network, checked by its own applicability report (module docstring).

    Parameters
    ----------
    model : PerSampleModel
        The model of the report.
    data : Dataset
        Its data.
    expansion : Expansion
        The expansion at θ̂.
    stationary : StationaryCov
        The prediction for the tuned Λ (its dynamics give B, β, momentum and batching).
    target_cov : (D, D) array_like or None
        The tuning target (None: Λ was given, no remedy).

    Returns
    -------
    Remedy or None
        ``{"family": "kronecker", "target": …}`` for ``sgtune lambda``, ``expect`` ``"applicable"`` when its
        report passes, ``"runs"`` when it was not checked; None when it does not apply or its check fails.
    """
    from ..models.kfac import mlp_factors, torch_factors
    from ..theory.applicability import target_name
    from ..theory.kronecker import tune_factors
    from ..workflows.kronecker_applicability import CHECK_MAX_DIM, kronecker_applicability

    if target_cov is None or data.rows is not None or expansion.n_samples != expansion.n_data:
        return None
    gam = np.asarray(expansion.prior_precision, dtype=float)
    g = float(gam[0, 0])
    if not np.array_equal(gam, g * np.eye(gam.shape[0])):
        return None
    name = target_name(expansion, np.asarray(target_cov, dtype=float))
    theta = np.asarray(expansion.theta_hat, dtype=float)
    found = None if name is None else _network(model, theta, int(np.asarray(data.X).shape[1]))
    if found is None:
        return None
    net, likelihood, sigma2, is_mlp = found
    X, y = np.asarray(data.X), np.asarray(data.y)
    dim = expansion.dim
    try:
        fac = (mlp_factors(model, theta, X, y, prior_precision=g) if is_mlp else
               torch_factors(net, X, y, likelihood, noise_variance=sigma2, prior_precision=g))
        res = tune_factors(fac, stationary.dynamics.replace(step=None), target=name)
    except (SgtuneError, np.linalg.LinAlgError):
        return None  # the family refuses this network (e.g. SGD with a switched-off unit): nothing to offer
    if net is None:
        return _remedy("not checked: its applicability report needs PyTorch (pip install 'sgtune[kfac]')", dim,
                       name, "runs")
    if dim > CHECK_MAX_DIM:
        return _remedy(f"not checked: D = {dim} > {CHECK_MAX_DIM}, where its matrix-free applicability report takes "
                       "many minutes", dim, name, "runs")
    try:
        app = kronecker_applicability(res, net, X, y, likelihood, noise_variance=sigma2, seed=0,
                                      max_terms=REMEDY_MAX_TERMS)
    except (SgtuneError, np.linalg.LinAlgError):
        return None
    if not app.applicable:
        if g <= 0:
            return None  # no prior to strengthen
        return _searched(fac, stationary.dynamics, net, X, y, likelihood, sigma2, dim, name, is_mlp)
    return _remedy("its own matrix-free applicability report (stability with full and minibatch curvature, the "
                   "real linearised chain along probes within 10 %) is applicable", dim, name, "applicable")
