"""A ``torch.optim.Optimizer`` applying a Kronecker-factored Λ per layer (the ``kronecker`` family), matrix-free.

For each layer l of a :class:`sgtune.theory.kronecker.KroneckerTuning` (found in the module's parameters by
its place in θ: the weight at ``weight_index``, the bias at ``bias_index``) the step is, with the layer's
gradient Γ = [∇W | ∇b] of the batch-MEAN loss (plus the prior term, ``prior="in-loss"``) and its
momentum buffer m,

    m ← κ m + Γ,    [W | b] ← [W | b] − M m Ã⁻¹ + √(2/β) L_M Z L_Aᵀ,   Z ~ N(0, I),

L_M = chol(M), L_A = chol(Ã⁻¹): two small matrix products per layer for the drift and two for the noise
(N(0, 2Λ/β) since (L_M ⊗ L_A)(L_M ⊗ L_A)ᵀ = M ⊗ Ã⁻¹ = Λ_l). With the prior in the eigenbasis
(``prior="eigenbasis"``, Λ_l = (Q_G ⊗ Q_A) diag(λ) (Q_G ⊗ Q_A)ᵀ) the drift is Q_G((Q_Gᵀ m Q_A) ∘ λ)Q_Aᵀ and the
noise Q_G(√λ ∘ Z)Q_Aᵀ: four small products. The arithmetic is float64; the parameters keep
their dtype. No D×D object. This is the update the factored theory describes
(:mod:`sgtune.theory.kronecker`), applied to the real network.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import MissingExtraError, SgtuneError

__all__ = ["kronecker_torch_optimizer"]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingExtraError("the kronecker optimizer needs PyTorch: pip install 'sgtune[torch]'") from None
    return torch


def _layer_params(result: Any, module: Any) -> list[tuple[Any, Any, Any]]:
    """(layer, weight tensor, bias tensor or None) matched by the offsets of ``named_parameters`` in θ."""
    offsets, start = {}, 0
    for name, p in module.named_parameters():
        offsets[(start, start + p.numel())] = (name, p)
        start += p.numel()
    if start != result.dim:
        raise SgtuneError(f"the module has {start} parameters but the kronecker step was tuned for D = {result.dim}")
    out = []
    for lay in result.layers:
        w = offsets.get(tuple(lay.weight_index))
        b = None if lay.bias_index is None else offsets.get(tuple(lay.bias_index))
        if w is None or (lay.bias_index is not None and b is None):
            raise SgtuneError(f"layer {lay.name!r}: no parameter of the module sits at its place in θ "
                              f"(weight {lay.weight_index}); the module's parameters are not the tuned network's")
        if tuple(w[1].shape) != (lay.d_out, lay.d_in - (b is not None)):
            raise SgtuneError(f"layer {lay.name!r}: parameter {w[0]!r} has shape {tuple(w[1].shape)}, expected "
                              f"{(lay.d_out, lay.d_in - (b is not None))}")
        out.append((lay, w[1], None if b is None else b[1]))
    return out


def _layer_maps(lay: Any, torch: Any) -> tuple[Any, Any]:
    """(X ↦ Λ_l X, Z ↦ L Z) on torch (d_out, d_in) matrices, for the damped or the eigenbasis form."""
    def t(a: Any) -> Any:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float64)

    if lay.eigenbasis is None:
        M, Ainv = t(lay.step_factor), t(lay.input_inverse)
        LM, LA = t(np.linalg.cholesky(lay.step_factor)), t(np.linalg.cholesky(lay.input_inverse))
        return (lambda X: M @ X @ Ainv), (lambda Z: LM @ Z @ LA.T)
    Qg, Qa, lam = t(lay.eigenbasis[0]), t(lay.eigenbasis[1]), t(lay.eigenbasis[2])
    root = lam.sqrt()
    return (lambda X: Qg @ ((Qg.T @ X @ Qa) * lam) @ Qa.T), (lambda Z: Qg @ (root * Z) @ Qa.T)


def kronecker_torch_optimizer(result: Any, module: Any, *, generator: Any = None, seed: int = 0) -> Any:
    """The optimizer of a Kronecker-factored Λ for ``module`` (module docstring).

    Parameters
    ----------
    result : KroneckerTuning
        The tuned step (:func:`sgtune.theory.kronecker.tune_kronecker`, or ``KroneckerTuning.load``); its
        momentum κ and inverse temperature β are used.
    module : torch.nn.Module
        The network, with parameters in the tuned θ order.
    generator : torch.Generator, optional
        The noise stream (default ``torch.Generator().manual_seed(seed)``).
    seed : int, optional
        Seed of the default generator.

    Returns
    -------
    torch.optim.Optimizer
        ``step()`` applies the update to every layer (parameters without a gradient are skipped).

    Raises
    ------
    SgtuneError
        The module's parameters are not laid out as the tuned network's.

    Examples
    --------
    >>> import torch
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.kronecker_torch import kronecker_torch_optimizer
    >>> from sgtune.theory.kronecker import tune_kronecker
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1)).double()
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(100, 2)), rng.normal(size=100)
    >>> res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=10), prior_precision=1.0)
    >>> opt = kronecker_torch_optimizer(res, net)
    >>> net(torch.as_tensor(X[:10])).pow(2).mean().backward()
    >>> opt.step()
    """
    torch = _torch()
    layers = _layer_params(result, module)
    dyn = result.dynamics
    kappa, beta = float(dyn.momentum), float(dyn.inv_temperature)
    noise_scale = 0.0 if math.isinf(beta) else math.sqrt(2.0 / beta)
    f64 = dict(dtype=torch.float64)

    class KroneckerSGMCMC(torch.optim.Optimizer):
        """m ← κm + Γ, [W | b] ← [W | b] − Λ_l m + √(2/β) L_l Z per layer (Λ_l = L_l L_lᵀ, Kronecker-factored)."""

        def __init__(self) -> None:
            params = [t for _, w, b in layers for t in ((w,) if b is None else (w, b))]
            super().__init__(params, dict(momentum=kappa, inv_temperature=beta))
            self._layers = [(lay, w, b, _layer_maps(lay, torch)) for lay, w, b in layers]
            self.generator = generator if generator is not None else torch.Generator().manual_seed(int(seed))

        @torch.no_grad()
        def step(self, closure: Any = None) -> Any:  # noqa: D102 (documented on the class)
            loss = None if closure is None else closure()
            for lay, w, b, (step, sqrt) in self._layers:
                if w.grad is None:
                    continue
                grad = w.grad.to(torch.float64)
                if b is not None:
                    gb = torch.zeros(lay.d_out, **f64) if b.grad is None else b.grad.to(torch.float64)
                    grad = torch.cat([grad, gb[:, None]], dim=1)
                state = self.state[w]
                if kappa > 0:
                    buf = state.get("momentum_buffer")
                    buf = grad.clone() if buf is None else buf.mul_(kappa).add_(grad)
                    state["momentum_buffer"] = buf
                    grad = buf
                delta = -step(grad)
                if noise_scale:
                    Z = torch.randn(lay.d_out, lay.d_in, generator=self.generator, **f64)
                    delta += noise_scale * sqrt(Z)
                d_w = w.shape[1]
                w.add_(delta[:, :d_w].to(w.dtype))
                if b is not None:
                    b.add_(delta[:, d_w].to(b.dtype))
            return loss

    return KroneckerSGMCMC()
