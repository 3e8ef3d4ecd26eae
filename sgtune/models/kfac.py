r"""Kronecker factors of a network at θ̂ (KFAC), and ``tune_kronecker``: the ``kronecker`` family end to end.

For every fully connected layer l (input a, pre-activation z = W a + b, output f, per-sample loss
l_n = ρ(f_n, y_n)) the factors of :class:`sgtune.theory.kronecker.LayerFactors` are the KFAC ones
(Martens & Grosse 2015, §3), in sgtune's mean-loss scaling:

- A = mean_n ã_n ã_nᵀ, ã = [a; 1] (the bias as a last input column, the standard KFAC convention);
- G = mean_n J_nᵀ ∇²_fρ_n J_n with J_n = ∂f/∂z (the Gauss–Newton output factor);
- E = mean_n e_n e_nᵀ with e_n = ∂l_n/∂z (the empirical-Fisher output factor of 𝓘 = mean g_n g_nᵀ);
- Ḡ = mean_n e_n ã_nᵀ, the layer's mean gradient as a d_out × d_in matrix (for 𝓘 − ḡḡᵀ).

Two routes compute them:

- :func:`mlp_factors`, for sgtune's NumPy :class:`~sgtune.models.mlp.MLP`, from its own forward and
  backward passes (one output: J_n = u_n = ∂f/∂z, ∇²ρ = ρ''(f_n), e_n = ρ'(f_n) u_n);
- :func:`torch_factors`, for a PyTorch network of ``nn.Linear`` layers and elementwise activations, with
  curvlinops-for-pytorch's ``KFACLinearOperator`` (extra ``[kfac]``): ``fisher_type="type-2"`` (the exact
  Gauss–Newton factor) for G, ``"empirical"`` for E, rescaled from curvlinops' summed loss to sgtune's
  per-observation loss (σ² of the Gaussian likelihood included); Ḡ from one backward pass.

Both give the same numbers for the same network and data (tested). :func:`tune_kronecker` tunes every
layer (:func:`sgtune.theory.kronecker.tune_factors`).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..core._refs import cites
from ..core.config import Dynamics
from ..core.errors import MissingExtraError, SgtuneError
from ..theory.kronecker import KroneckerFactors, KroneckerTuning, LayerFactors, tune_factors
from .mlp import MLP

__all__ = ["mlp_factors", "torch_factors", "tune_kronecker", "KFAC_LIKELIHOODS"]

#: likelihoods the torch route supports (curvlinops' losses)
KFAC_LIKELIHOODS = ("gaussian", "bernoulli", "categorical")


def _xy(data: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(data, tuple) and len(data) == 2:
        X, y = data
    else:
        X, y = getattr(data, "X", None), getattr(data, "y", None)
        if X is None:
            raise SgtuneError("data must be an sgtune Dataset or a tuple (X, y)")
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


@cites("martens2015", "§3: A = E[ããᵀ], G = E[J_fᵀ∇²ρ J_f] per layer; E from per-sample gradients (empirical Fisher)")
def mlp_factors(model: MLP, theta: Any, X: Any, y: Any, *, prior_precision: float = 0.0,
                chunk_rows: int = 4096) -> KroneckerFactors:
    """The KFAC factors of every layer of an :class:`~sgtune.models.mlp.MLP` at θ (module docstring).

    Parameters
    ----------
    model : MLP
        The network (one output).
    theta : (D,) array_like
        θ̂.
    X : (N, p) array_like
        Covariates.
    y : (N,) array_like
        Responses.
    prior_precision : float, optional
        δ of the prior N(0, δ⁻¹I) (recorded; absorbed when tuning).
    chunk_rows : int, optional
        Rows per pass (bounds the memory to O(chunk · width)).

    Returns
    -------
    KroneckerFactors
        One :class:`~sgtune.theory.kronecker.LayerFactors` per layer, named ``hidden1`` … ``output``.

    Examples
    --------
    >>> from sgtune.models import MLP
    >>> from sgtune.models.kfac import mlp_factors
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(50, 2)), rng.normal(size=50)
    >>> net = MLP((3,))
    >>> fac = mlp_factors(net, net.initial_params(2, rng), X, y)
    >>> [(lf.name, lf.d_out, lf.d_in) for lf in fac.layers]
    [('hidden1', 3, 3), ('output', 1, 4)]
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    theta = np.asarray(theta, dtype=np.float64)
    n, p = X.shape
    widths = model.widths(p)
    nl = len(widths) - 1
    sums: list[list[np.ndarray]] = [[np.zeros((widths[i] + 1, widths[i] + 1)), np.zeros((widths[i + 1],) * 2),
                                     np.zeros((widths[i + 1],) * 2), np.zeros((widths[i + 1], widths[i] + 1))]
                                    for i in range(nl)]
    for start in range(0, n, chunk_rows):
        Xc, yc = X[start:start + chunk_rows], y[start:start + chunk_rows]
        layers, acts, d1s, _, f = model._forward(theta, Xc)
        _, r1, r2 = model.glm.derivatives(f, yc)
        us = model._deltas(layers, d1s, np.ones(Xc.shape[0]))
        for i, (a, u) in enumerate(zip(acts, us)):
            at = np.hstack([a, np.ones((a.shape[0], 1))])
            e = r1[:, None] * u
            sums[i][0] += at.T @ at
            sums[i][1] += (r2[:, None] * u).T @ u
            sums[i][2] += e.T @ e
            sums[i][3] += e.T @ at
    out = []
    for i, ((a0, a1), (A, G, E, Gbar)) in enumerate(zip(model.layer_slices(p), sums)):
        name = "output" if i == nl - 1 else f"hidden{i + 1}"
        nw = widths[i + 1] * widths[i]
        out.append(LayerFactors(name, A / n, G / n, E / n, (a0, a0 + nw), (a0 + nw, a1), mean_gradient=Gbar / n))
    return KroneckerFactors(tuple(out), n_data=n, dim=model.n_params(p), prior_precision=float(prior_precision),
                            source="mlp")


def _curvlinops() -> Any:
    try:
        import curvlinops
    except ImportError:
        raise MissingExtraError("the kronecker family for a torch network needs curvlinops-for-pytorch: "
                                "pip install 'sgtune[kfac]'") from None
    return curvlinops


def _linear_layers(net: Any, torch: Any) -> list[tuple[str, Any]]:
    """The ``nn.Linear`` submodules, refusing a network with parameters anywhere else."""
    linears = [(name, m) for name, m in net.named_modules() if isinstance(m, torch.nn.Linear)]
    owned = {id(p) for _, m in linears for p in m.parameters()}
    for pname, prm in net.named_parameters():
        if id(prm) not in owned:
            raise SgtuneError(f"the kronecker family supports networks of nn.Linear layers and elementwise "
                              f"activations; parameter {pname!r} belongs to another module (use --family dense "
                              "or the last layer)")
    return linears


def _loss(likelihood: str, torch: Any) -> tuple[Any, float, float]:
    """(curvlinops loss, scale of G, scale of E): sgtune's per-row ρ from curvlinops' summed loss."""
    if likelihood == "gaussian":
        return torch.nn.MSELoss(reduction="sum"), 0.5, 0.25  # (f−y)² = 2σ²ρ (σ² applied by the caller)
    if likelihood == "bernoulli":
        return torch.nn.BCEWithLogitsLoss(reduction="sum"), 1.0, 1.0
    if likelihood == "categorical":
        return torch.nn.CrossEntropyLoss(reduction="sum"), 1.0, 1.0
    raise SgtuneError(f"likelihood must be one of {', '.join(KFAC_LIKELIHOODS)} for the kronecker family of a "
                      f"torch network, got {likelihood!r}")


def _targets(y: np.ndarray, likelihood: str, torch: Any) -> Any:
    if likelihood == "categorical":
        return torch.as_tensor(y, dtype=torch.long)
    return torch.as_tensor(y, dtype=torch.float64).reshape(-1, 1)


@cites("martens2015", "§3: KFAC factors, computed by curvlinops-for-pytorch's KFACLinearOperator")
def torch_factors(module: Any, X: Any, y: Any, likelihood: str = "gaussian", *, noise_variance: float = 1.0,
                  prior_precision: float = 0.0, chunk_rows: int = 2048) -> KroneckerFactors:
    """The KFAC factors of every ``nn.Linear`` layer of a PyTorch network at its current weights (curvlinops).

    Parameters
    ----------
    module : torch.nn.Module
        The network (``nn.Linear`` layers and parameter-free elementwise modules), or a
        :class:`~sgtune.models.pytorch.TorchModel`. Copied in float64; never changed.
    X : (N, p) array_like
        Covariates.
    y : (N,) array_like
        Responses (class labels 0..K−1 for ``categorical``).
    likelihood : {"gaussian", "bernoulli", "categorical"}, optional
        The loss ρ(f, y) (as in :func:`sgtune.models.from_torch`).
    noise_variance : float, optional
        σ² of the Gaussian likelihood.
    prior_precision : float, optional
        δ of the prior N(0, δ⁻¹I).
    chunk_rows : int, optional
        Rows per batch fed to curvlinops.

    Returns
    -------
    KroneckerFactors
        One layer per ``nn.Linear``, named as in the network, θ in ``named_parameters`` order.

    Raises
    ------
    MissingExtraError
        curvlinops-for-pytorch is not installed (extra ``[kfac]``).
    SgtuneError
        A parameter outside an ``nn.Linear``, or a likelihood curvlinops does not support.
    """
    import copy

    import torch
    cl = _curvlinops()
    if hasattr(module, "module") and hasattr(module, "likelihood"):  # a TorchModel
        likelihood, noise_variance, module = module.likelihood, module.noise_variance, module.module
    net = copy.deepcopy(module).double().eval()
    for prm in net.parameters():
        prm.requires_grad_(True)
    linears = _linear_layers(net, torch)
    loss_func, g_scale, e_scale = _loss(likelihood, torch)
    if likelihood == "gaussian":
        g_scale, e_scale = g_scale / noise_variance, e_scale / noise_variance**2
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float64))
    Yt = _targets(np.asarray(y), likelihood, torch)
    n = Xt.shape[0]
    batches = [(Xt[i:i + chunk_rows], Yt[i:i + chunk_rows]) for i in range(0, n, chunk_rows)]
    params = list(net.parameters())
    factors = {}
    for ft in ("type-2", "empirical"):
        K = cl.KFACLinearOperator(net, loss_func, params, batches, fisher_type=ft, separate_weight_and_bias=False,
                                  check_deterministic=False, num_data=n)
        K.compute_kronecker_factors()
        factors[ft] = (K._input_covariances, K._gradient_covariances)
    net.zero_grad()
    for Xb, Yb in batches:
        (loss_func(net(Xb), Yb) * (g_scale / n)).backward()  # ∇ of mean_n ρ_n
    offsets, start = {}, 0
    for pname, prm in net.named_parameters():
        offsets[pname] = (start, start + prm.numel())
        start += prm.numel()
    out = []
    for name, m in linears:
        A = factors["type-2"][0][name].numpy() if name in factors["type-2"][0] else None
        G = factors["type-2"][1][name].numpy() * g_scale / n
        E = factors["empirical"][1][name].numpy() * e_scale / n
        gw = m.weight.grad.numpy()
        gbar = gw if m.bias is None else np.hstack([gw, m.bias.grad.numpy()[:, None]])
        bias_index = None if m.bias is None else offsets[f"{name}.bias"]
        out.append(LayerFactors(name, A, G, E, offsets[f"{name}.weight"], bias_index, mean_gradient=gbar))
    return KroneckerFactors(tuple(out), n_data=n, dim=start, prior_precision=float(prior_precision),
                            source="curvlinops")


@cites("wang2026", "Eq. (11) / Prop. B.1 per layer in Kronecker-factored form (sgtune.theory.kronecker)")
def tune_kronecker(model_or_net: Any, data: Any, dynamics: Dynamics, *, target: str = "posterior",
                   prior_precision: float = 0.0, theta: Any = None, likelihood: str = "gaussian",
                   noise_variance: float = 1.0, progress: Callable[[str], None] | None = None) -> KroneckerTuning:
    """Λ = blockdiag_l(M_l ⊗ Ã_l⁻¹) for a whole network: KFAC factors, then one d_out-sized solve per layer.

    Parameters
    ----------
    model_or_net : MLP, torch.nn.Module, TorchModel or KroneckerFactors
        The network (an sgtune MLP needs ``theta``; a torch network is taken at its current weights).
    data : Dataset or tuple (X, y)
        The data the factors average over (ignored for ``KroneckerFactors``).
    dynamics : Dynamics
        B, β, κ and the batching (``step`` is ignored).
    target : {"posterior", "sandwich"}, optional
        The target (:mod:`sgtune.theory.kronecker`).
    prior_precision : float, optional
        δ of the prior N(0, δ⁻¹I) (weight decay δ/N on the mean loss).
    theta : (D,) array_like, optional
        θ̂ of an MLP.
    likelihood : str, optional
        The torch network's loss (``gaussian``, ``bernoulli``, ``categorical``).
    noise_variance : float, optional
        σ² of the Gaussian likelihood (torch networks).
    progress : callable, optional
        Called with one line per layer.

    Returns
    -------
    KroneckerTuning
        The per-layer factors, the predicted covariances and summaries.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models import MLP
    >>> from sgtune.models.kfac import tune_kronecker
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(200, 2)), rng.normal(size=200)
    >>> net = MLP((3,))
    >>> res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=20), theta=net.initial_params(2, rng),
    ...                      prior_precision=1.0)
    >>> res.names, bool(res.covariance_error < 1e-10)
    (('hidden1', 'output'), True)
    """
    if isinstance(model_or_net, KroneckerFactors):
        factors = model_or_net
    elif isinstance(model_or_net, MLP):
        if theta is None:
            raise SgtuneError("tune_kronecker: an MLP needs theta (its fitted parameters θ̂)")
        X, y = _xy(data)
        factors = mlp_factors(model_or_net, theta, X, y, prior_precision=prior_precision)
    else:
        X, y = _xy(data)
        factors = torch_factors(model_or_net, X, y, likelihood, noise_variance=noise_variance,
                                prior_precision=prior_precision)
    return tune_factors(factors, dynamics, target=target, progress=progress)
