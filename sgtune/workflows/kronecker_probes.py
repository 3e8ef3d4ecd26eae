"""The Kronecker family measured on the real network: the chain's variance along probe directions vs the prediction.

:func:`probe_check` runs the real (nonlinear) network's chain in PyTorch with the Kronecker optimizer
(:func:`sgtune.io.kronecker_torch.kronecker_torch_optimizer`: the per-layer Λ, momentum and β of the
result), minibatches of B rows drawn as the result's batching says, the prior as weight decay in the loss
(δθᵀθ/(2N) added to the batch-mean loss), from the module's weights θ̂. It records the projections vᵀθ_t
on probe directions and compares their variance with the factored prediction vᵀΣv (Σ_l = S_l ⊗ Ã_l⁻¹,
:meth:`sgtune.theory.kronecker.KroneckerTuning.probe_variance`) — no D×D covariance anywhere.

Probes: ``n_random`` random unit directions of θ, and per layer the directions of least and most predicted
variance (the Kronecker products of the extreme eigenvectors of S_l and Ã_l⁻¹; for the posterior target the
least-variance one is the layer's top curvature direction of G̃ ⊗ Ã). The Monte Carlo standard error of each
measured variance is the batch-means standard error of (vᵀθ_t − mean)², so z = (measured − predicted)/MCSE.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import SgtuneError
from ..diagnostics.mcse import batch_means_se
from ..io.kronecker_torch import kronecker_torch_optimizer
from ..theory.kronecker import KroneckerTuning

__all__ = ["ProbeCheck", "probe_directions", "probe_check"]


@dataclass(frozen=True)
class ProbeCheck:
    """Result of :func:`probe_check`: per probe, the predicted and measured variance of vᵀθ.

    Attributes
    ----------
    labels : tuple of str
        What each probe is (``random 0``, ``fc1 least``, ``fc1 most``, …).
    predicted, measured, mcse : (k,) ndarray
        vᵀΣv from the factors, the chain's variance of vᵀθ_t after burn-in, and its Monte Carlo
        standard error.
    z : (k,) ndarray
        (measured − predicted)/mcse.
    relative_error : (k,) ndarray
        measured/predicted − 1.
    steps, burn_in : int
        The chain's length and the discarded start.
    n_batches : int
        Batches of the batch-means standard error.

    Examples
    --------
    >>> from sgtune.workflows.kronecker_probes import ProbeCheck
    >>> pc = ProbeCheck(("a",), np.ones(1), np.ones(1), np.ones(1), np.zeros(1), np.zeros(1), 10, 2)
    >>> pc.to_dict()["probes"][0]["label"]
    'a'
    """

    labels: tuple[str, ...]
    predicted: np.ndarray
    measured: np.ndarray
    mcse: np.ndarray
    z: np.ndarray
    relative_error: np.ndarray
    steps: int
    burn_in: int
    n_batches: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The probes as plain values (the JSON's ``probes``)."""
        return {"steps": self.steps, "burn_in": self.burn_in,
                "probes": [{"label": lab, "predicted": float(p), "measured": float(m), "mcse": float(s),
                            "z": float(z), "relative_error": float(r)}
                           for lab, p, m, s, z, r in zip(self.labels, self.predicted, self.measured, self.mcse,
                                                         self.z, self.relative_error)]}


def probe_directions(result: KroneckerTuning, n_random: int = 4,
                     seed: int = 0) -> tuple[tuple[str, ...], np.ndarray]:
    """Unit probe directions (k, D) in θ order: random ones, and per layer its least and most variable direction.

    Parameters
    ----------
    result : KroneckerTuning
        The tuned step.
    n_random : int, optional
        The number of random directions.
    seed : int, optional
        Their seed.

    Returns
    -------
    labels : tuple of str
        What each direction is.
    directions : (k, D) ndarray
        The unit directions.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.models.kfac import KroneckerFactors, LayerFactors
    >>> from sgtune.theory.kronecker import tune_factors
    >>> from sgtune.workflows.kronecker_probes import probe_directions
    >>> lf = LayerFactors("fc", np.diag([1.0, 2.0]), np.eye(1), np.eye(1), (0, 2))
    >>> res = tune_factors(KroneckerFactors((lf,), n_data=50, dim=2), Dynamics(None, batch_size=5))
    >>> probe_directions(res, n_random=1)[0]
    ('random 0', 'fc least', 'fc most')
    """
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((n_random, result.dim))
    rows = list(R / np.linalg.norm(R, axis=1, keepdims=True))
    labels = [f"random {i}" for i in range(n_random)]
    for lay in result.layers:
        for tag, X in zip(("least", "most"), lay.extreme_directions()):
            v = np.zeros(result.dim)
            v[lay.theta_indices()] = X.ravel()
            rows.append(v)
            labels.append(f"{lay.name} {tag}")
    return tuple(labels), np.array(rows)


def _loss_fn(likelihood: str, noise_variance: float, torch: Any) -> Any:
    if likelihood == "gaussian":
        return lambda f, y: (0.5 / noise_variance) * (f - y.reshape(f.shape)).pow(2).sum(dim=-1).mean()
    if likelihood == "bernoulli":
        return lambda f, y: torch.nn.functional.binary_cross_entropy_with_logits(f.reshape(-1), y)
    if likelihood == "categorical":
        return lambda f, y: torch.nn.functional.cross_entropy(f, y.long())
    raise SgtuneError(f"likelihood must be gaussian, bernoulli or categorical, got {likelihood!r}")


def probe_check(result: KroneckerTuning, module: Any, X: Any, y: Any, likelihood: str = "gaussian", *,
                noise_variance: float = 1.0, steps: int = 20000, burn_in: int | None = None, n_random: int = 4,
                n_batches: int | None = None, seed: int = 0, probe_seed: int | None = None) -> ProbeCheck:
    """Run the real network's chain with the Kronecker step and compare its variance along probes with vᵀΣv.

    Parameters
    ----------
    result : KroneckerTuning
        The tuned step (its B, β, κ, batching and prior δ are used).
    module : torch.nn.Module
        The network at θ̂ (copied in float64; never changed).
    X, y : array_like
        The data the step was tuned on. y is (N,), or (N, k) for a Gaussian network with k outputs.
    likelihood : {"gaussian", "bernoulli", "categorical"}, optional
        The loss, as in :func:`sgtune.models.kfac.torch_factors`.
    noise_variance : float, optional
        The variance σ² of the Gaussian likelihood.
    steps : int, optional
        Chain length (including the burn-in).
    burn_in : int or None, optional
        Discarded start (default: steps // 5).
    n_random : int, optional
        The number of random probe directions (:func:`probe_directions`).
    n_batches : int or None, optional
        Batches of the batch-means standard error (default: batches of at least 10 predicted autocorrelation
        times τ_worst, between 5 and 40).
    seed : int, optional
        Seed of the minibatches (``seed``), the noise (``seed + 1``) and the random probes.
    probe_seed : int or None, optional
        Seed of the random probes instead (independent chains with seeds ``seed + 2c`` share their probes).

    Returns
    -------
    ProbeCheck
        Predicted and measured variances with their MCSE and z.

    Raises
    ------
    SgtuneError
        The chain diverged (a non-finite parameter), or the burn-in leaves too few draws.

    Examples
    --------
    >>> import torch
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.theory.kronecker import tune_kronecker
    >>> from sgtune.workflows.kronecker_probes import probe_check
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 2)); y = X @ [1.0, -1.0] + rng.normal(size=400)
    >>> net = torch.nn.Linear(2, 1).double()
    >>> res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=20, inv_temperature=800.0))
    >>> pc = probe_check(res, net, X, y, steps=2000, n_random=1)
    >>> len(pc.labels), bool(np.all(pc.mcse > 0))
    (3, True)
    """
    import copy

    import torch

    net = copy.deepcopy(module).double()
    labels, V = probe_directions(result, n_random, seed if probe_seed is None else probe_seed)
    burn = steps // 5 if burn_in is None else int(burn_in)
    if n_batches is None:
        tau = max(lay.tau_worst for lay in result.layers)
        n_batches = int(max(5, min(40, (steps - burn) // max(10.0 * tau, 1.0))))
    if not 0 <= burn < steps - 4 * n_batches:
        raise SgtuneError(f"burn_in must be in [0, steps − 4·n_batches), got {burn} with steps {steps}")
    Xt, Yt = torch.as_tensor(np.asarray(X, dtype=np.float64)), torch.as_tensor(np.asarray(y, dtype=np.float64))
    n, B = Xt.shape[0], result.dynamics.batch_size
    loss_fn = _loss_fn(likelihood, noise_variance, torch)
    gen = torch.Generator().manual_seed(int(seed))
    opt = kronecker_torch_optimizer(result, net, generator=torch.Generator().manual_seed(int(seed) + 1))
    params = list(net.parameters())
    decay = result.prior_precision / (2.0 * n)
    Vt = torch.as_tensor(V)
    proj = np.empty((steps - burn, V.shape[0]))
    wor = result.dynamics.without_replacement
    for t in range(steps):
        idx = torch.randperm(n, generator=gen)[:B] if wor else torch.randint(n, (B,), generator=gen)
        opt.zero_grad()
        loss = loss_fn(net(Xt[idx]), Yt[idx])
        if decay:
            loss = loss + decay * sum(p.pow(2).sum() for p in params)
        loss.backward()
        opt.step()
        with torch.no_grad():
            theta = torch.nn.utils.parameters_to_vector(params)
            if not bool(torch.isfinite(theta).all()):
                raise SgtuneError(f"the network's chain diverged at step {t + 1} (a non-finite parameter): the "
                                  "Kronecker step is not stable for the real network")
            if t >= burn:
                proj[t - burn] = (Vt @ theta).numpy()
    centred = proj - proj.mean(axis=0)
    measured = (centred ** 2).mean(axis=0)
    mcse = batch_means_se((centred ** 2)[None], n_batches)
    predicted = result.probe_variance(V)
    return ProbeCheck(labels, predicted, measured, mcse, (measured - predicted) / mcse, measured / predicted - 1.0,
                      int(steps), burn, int(n_batches))
