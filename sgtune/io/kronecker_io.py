"""The network a Kronecker-factored Λ is for, as a PyTorch module.

:func:`mlp_module` builds the PyTorch network equal to sgtune's NumPy :class:`~sgtune.models.mlp.MLP` at θ (the same layout:
each layer's weight row-major, then its bias), so ``run``/``verify`` drive both kinds of network through the
matrix-free torch optimizer (:mod:`sgtune.io.kronecker_torch`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["mlp_module"]


def mlp_module(model: Any, theta: Any, n_features: int) -> Any:
    """The float64 ``torch.nn.Sequential`` equal to an :class:`~sgtune.models.mlp.MLP` at θ.

    Parameters
    ----------
    model : MLP
        The network (tanh, relu or softplus hidden layers, one output).
    theta : (D,) array_like
        Its parameters.
    n_features : int
        The number of inputs p.

    Returns
    -------
    torch.nn.Sequential
        Linear layers and activations; its ``named_parameters`` order is θ's.

    Examples
    --------
    >>> import torch
    >>> from sgtune.models import MLP
    >>> from sgtune.io.kronecker_io import mlp_module
    >>> net = MLP((3,))
    >>> theta = net.initial_params(2, np.random.default_rng(0))
    >>> X = np.ones((1, 2))
    >>> bool(np.isclose(mlp_module(net, theta, 2)(torch.as_tensor(X)).detach().numpy()[0, 0], net.output(theta, X)[0]))
    True
    """
    import torch

    acts = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "softplus": torch.nn.Softplus}
    widths = model.widths(n_features)
    mods: list[Any] = []
    for i, (W, b) in enumerate(model.unflatten(np.asarray(theta, dtype=np.float64), n_features)):
        lin = torch.nn.Linear(widths[i], widths[i + 1]).double()
        with torch.no_grad():
            lin.weight.copy_(torch.as_tensor(W))
            lin.bias.copy_(torch.as_tensor(b))
        mods.append(lin)
        if i < len(widths) - 2:
            mods.append(acts[model.activation]())
    return torch.nn.Sequential(*mods)
