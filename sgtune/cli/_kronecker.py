"""``sgtune lambda --family kronecker``: a per-layer Kronecker-factored Λ for a whole network, no D×D object.

Takes ``--model mlp`` (sgtune's NumPy network; θ̂ from ``--theta-hat`` or fitted) or ``--model net.py:NET``
(a torch ``nn.Module``, or a model ``from_torch`` built, taken at its current weights unless ``--theta-hat``),
computes the KFAC factors (:mod:`sgtune.models.kfac`), tunes every layer
(:func:`sgtune.theory.kronecker.tune_factors`) with one progress line per layer on stderr, writes the
per-layer factors to ``-o FILE.npz`` and per-layer summaries to the JSON (key ``layers``).
"""
from __future__ import annotations

import math
from typing import Any

import click
import numpy as np

from ..core._refs import references_of
from ..core.config import Dynamics
from ..core.errors import SgtuneError, ShapeError
from ._io import announced, check_writable, command_line, emit, info, untrusted
from ._options import check_batch_size, load_float_npy, parse_inv_temperature, temperature_json

__all__ = ["lambda_kronecker"]

#: a layer whose factored chain mixes slower than this many iterations gets a warning
SLOW_TAU = 1e5
#: a layer whose damped-prior posterior is further than this from the eigenbasis one gets a warning
PRIOR_ERROR_WARN = 0.5


def _refuse_options(kw: dict[str, Any]) -> None:
    for key, opt, default in (("method", "--method", "dq-exact"), ("blocks", "--blocks", None),
                              ("refine_rounds", "--refine", None), ("prior_precision_matrix",
                                                                    "--prior-precision-matrix", None),
                              ("subsample", "--subsample", None), ("plot", "--plot", None)):
        if kw.get(key) not in (default, None, False):
            raise click.UsageError(f"{opt} is not an option of --family kronecker (the family tunes every layer "
                                   "from its KFAC factors); drop it")
    if kw["target"] not in ("sandwich", "posterior"):
        raise click.BadParameter(f"--family kronecker takes --target posterior or sandwich, got {kw['target']!r}",
                                 param_hint="'--target'")
    out = kw.get("output")
    if out and not str(out).endswith(".npz"):
        raise click.BadParameter(f"--family kronecker writes its per-layer factors as an .npz file, got {out!r}; "
                                 "name it e.g. lambda.npz", param_hint="'-o/--output'")


def _torch_network(spec: str, kw: dict[str, Any]) -> tuple[Any, str, float]:
    """(nn.Module at the weights to use, likelihood, σ²) from ``--model FILE.py:NAME``."""
    import torch

    from ..models.user import load_file_object

    obj = load_file_object(spec, "`model`")
    likelihood = "categorical" if kw.get("likelihood") == "softmax" else (kw.get("likelihood") or "gaussian")
    sigma2 = float(kw.get("noise_variance") or 1.0)
    if hasattr(obj, "module") and hasattr(obj, "likelihood"):  # from_torch(...) in the file
        obj, likelihood, sigma2 = obj.module, obj.likelihood, obj.noise_variance
    elif isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        obj = obj()
    if not isinstance(obj, torch.nn.Module):
        raise SgtuneError(f"--model {spec}: --family kronecker needs a torch nn.Module (or from_torch(...)) there, "
                          f"got {type(obj).__name__}; use --family dense for other models")
    net = obj
    if kw.get("theta_hat"):
        import copy

        net = copy.deepcopy(obj).double()
        theta = load_float_npy(kw["theta_hat"], "--theta-hat").reshape(-1)
        d = sum(p.numel() for p in net.parameters())
        if theta.shape[0] != d:
            raise ShapeError(f"--theta-hat must hold D = {d} numbers (the network's parameters) but "
                             f"{kw['theta_hat']} has {theta.shape[0]}")
        torch.nn.utils.vector_to_parameters(torch.as_tensor(theta), net.parameters())
    return net, likelihood, sigma2


def _mlp_theta(model: Any, ds: Any, kw: dict[str, Any], prior: float) -> np.ndarray:
    from ..models.expansion import fit_map

    d = model.n_params(ds.dim)
    if kw.get("theta_hat"):
        theta = load_float_npy(kw["theta_hat"], "--theta-hat").reshape(-1)
        if theta.shape[0] != d:
            raise ShapeError(f"--theta-hat must hold D = {d} numbers (the parameters of --model mlp) but "
                             f"{kw['theta_hat']} has {theta.shape[0]}")
        return theta
    with announced(f"fitting θ̂ of the mlp ({ds.n_data} rows, D = {d})", bool(kw.get("quiet"))):
        return fit_map(model, ds, prior, seed=int(kw.get("seed", 0))).theta_hat


def network_and_data(kw: dict[str, Any], prior: float) -> tuple[Any, Any, str, float, str]:
    """(torch module at θ̂, dataset, likelihood, σ², model label) from ``--model mlp`` or ``--model net.py:NET``."""
    from ._options import load_data_model

    spec = str(kw.get("model") or "")
    if spec.endswith(".py") or ".py:" in spec:
        ds, _ = load_data_model({**kw, "model": "linear"})  # the data only; the network is loaded below
        net, likelihood, sigma2 = _torch_network(spec, kw)
        return net, ds, likelihood, sigma2, spec
    ds, model = load_data_model(kw)
    from ..io.kronecker_io import mlp_module
    from ..models.mlp import MLP

    if not isinstance(model, MLP) or model.likelihood not in ("gaussian", "bernoulli"):
        raise click.BadParameter(f"--family kronecker is for networks: --model mlp (gaussian or bernoulli) or "
                                 f"--model net.py:NET, got {spec!r}", param_hint="'--model'")
    theta = _mlp_theta(model, ds, kw, prior)
    return mlp_module(model, theta, ds.dim), ds, model.likelihood, float(model.noise_variance), "mlp"


def _factors(kw: dict[str, Any], prior: float) -> tuple[Any, Any, str, Any]:
    """(KroneckerFactors, dataset, model label, (torch module, likelihood, σ²) or None without torch)."""
    from ..models.kfac import mlp_factors, torch_factors
    from ._options import load_data_model

    spec = str(kw.get("model") or "")
    if spec.endswith(".py") or ".py:" in spec:
        net, ds, likelihood, sigma2, _ = network_and_data(kw, prior)
        with announced(f"KFAC factors of {spec} ({ds.n_data} rows, curvlinops)", bool(kw.get("quiet"))):
            fac = torch_factors(net, np.asarray(ds.X), np.asarray(ds.y), likelihood, noise_variance=sigma2,
                                prior_precision=prior)
        return fac, ds, spec, (net, likelihood, sigma2)
    ds, model = load_data_model(kw)
    from ..models.mlp import MLP

    if not isinstance(model, MLP):
        raise click.BadParameter(f"--family kronecker is for networks: --model mlp or --model net.py:NET, got "
                                 f"{spec!r}", param_hint="'--model'")
    theta = _mlp_theta(model, ds, kw, prior)
    with announced(f"KFAC factors of the mlp ({ds.n_data} rows)", bool(kw.get("quiet"))):
        fac = mlp_factors(model, theta, np.asarray(ds.X), np.asarray(ds.y), prior_precision=prior)
    torch_net = None
    if model.likelihood in ("gaussian", "bernoulli"):
        try:
            from ..io.kronecker_io import mlp_module

            torch_net = (mlp_module(model, theta, ds.dim), model.likelihood, float(model.noise_variance))
        except ImportError:
            torch_net = None
    return fac, ds, "mlp", torch_net


def _applicability(res: Any, ds: Any, torch_net: Any, kw: dict[str, Any]) -> dict[str, Any]:
    """The matrix-free applicability report of the family (:mod:`sgtune.workflows.kronecker_applicability`)."""
    if kw.get("no_applicability"):
        untrusted("kronecker family: the applicability report was skipped (--no-applicability): the network's own "
                  "chain is not checked")
        return {"checked": False, "reason": "--no-applicability"}
    if torch_net is None:
        untrusted("kronecker family: the applicability report needs PyTorch (pip install 'sgtune[kfac]'); the "
                  "network's own chain is not checked")
        return {"checked": False, "reason": "PyTorch is not installed or the likelihood is not supported"}
    from ..workflows.kronecker_applicability import CHECK_MAX_DIM, kronecker_applicability

    if res.dim > CHECK_MAX_DIM:
        why = (f"D = {res.dim} > {CHECK_MAX_DIM}, where the matrix-free checks take many minutes (hundreds of "
               "full-data Hessian-vector products)")
        untrusted(f"kronecker family: the applicability report was skipped ({why}): the network's own chain is not "
                  "checked; `sgtune verify --lambda L.npz` measures it along probes")
        return {"checked": False, "reason": why}
    net, likelihood, sigma2 = torch_net
    with announced("kronecker applicability (matrix-free checks of the network's own chain)", bool(kw.get("quiet"))):
        app = kronecker_applicability(res, net, np.asarray(ds.X), np.asarray(ds.y), likelihood,
                                      noise_variance=sigma2, seed=int(kw.get("seed") or 0))
    if not app.applicable:
        untrusted("kronecker family: not applicable to this network: " + "; ".join(app.reasons))
    return {"checked": True, **app.to_dict()}


def lambda_kronecker(kw: dict[str, Any]) -> None:
    """The ``--family kronecker`` branch of ``sgtune lambda`` (module docstring)."""
    from ..theory.kronecker import tune_factors, tune_kronecker

    _refuse_options(kw)
    check_writable(kw["output"], bool(kw["overwrite"]), "--output")
    check_writable(kw["json_path"], bool(kw["overwrite"]), "--json")
    prior = float(kw.get("prior_precision") or 0.0)
    fac, ds, label, torch_net = _factors(kw, prior)
    n = ds.n_data
    B = check_batch_size(int(kw["batch_size"]), n)
    beta = parse_inv_temperature(kw["inverse_temperature"], n)
    dyn = Dynamics(None, B, inv_temperature=beta, momentum=float(kw["momentum"]),
                   batching="without-replacement" if kw["without_replacement"] else "replacement")
    quiet = bool(kw.get("quiet"))
    res = tune_factors(fac, dyn, target=str(kw["target"]), progress=lambda line: info(line, quiet),
                       prior=str(kw.get("kronecker_prior") or "damped"))
    applicability = _applicability(res, ds, torch_net, kw)
    for lay in res.layers:
        if lay.prior_error > PRIOR_ERROR_WARN:
            untrusted(f"layer {lay.name!r}: the damped prior's posterior is {lay.prior_error:.2g} (relative) from the "
                      "exact KFAC-Laplace (eigenbasis) posterior; the prior dominates some directions of this layer")
        if lay.tau_worst > SLOW_TAU:
            untrusted(f"layer {lay.name!r} mixes slowly (tau {lay.tau_worst:.3g} iterations): chains need many "
                      "times that many steps")
    doc = {**res.to_dict(), "method": "dq-const (kronecker-factored: constant noise at θ̂, KFAC factors)",
           "applicability": applicability,
           "family": "kronecker", "tau_worst": max(lay.tau_worst for lay in res.layers),
           "inverse_temperature": temperature_json(beta), "without_replacement": dyn.without_replacement,
           "lambda_file": str(kw["output"]) if kw.get("output") else None, "model": label,
           "factors_from": fac.source, "data": ds.source, "seed": kw["seed"], "command": command_line(),
           "references": references_of(tune_factors) + references_of(tune_kronecker),
           "exact_for": "the block-diagonal chain with H_l = G̃⊗Ã, C_l = E⊗Ã, Λ_l = M⊗Ã⁻¹ (row-major)"}
    if doc["lambda_file"] is None:
        del doc["lambda_file"]
    arrays = {str(kw["output"]): res.to_arrays()} if kw.get("output") else {}
    emit(doc, kw["json_path"], arrays=arrays)  # type: ignore[arg-type]
    info(f"kronecker: {len(res.layers)} layers, D = {res.dim}, covariance error {res.covariance_error:.2g} "
         f"(of the factored chain), spectral radius {res.spectral_radius:.4g}"
         + ("" if math.isfinite(beta) else ", SGD"), quiet)
