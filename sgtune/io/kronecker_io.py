"""Reading a Kronecker-factored Λ (``sgtune lambda --family kronecker -o L.npz``) and the network it is for.

:func:`load_kronecker` reads the ``.npz`` with a one-line error naming the option; :func:`mlp_module` builds
the PyTorch network equal to sgtune's NumPy :class:`~sgtune.models.mlp.MLP` at θ (the same layout:
each layer's weight row-major, then its bias), so ``run``/``verify`` drive both kinds of network through the
matrix-free torch optimizer (:mod:`sgtune.io.kronecker_torch`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import SgtuneError

__all__ = ["load_kronecker", "is_kronecker_file", "mlp_module"]


def is_kronecker_file(path: Any) -> bool:
    """Whether ``path`` names an ``.npz`` file (the Kronecker family's per-layer factors).

    Parameters
    ----------
    path : str or path-like or None
        The file name as given.

    Returns
    -------
    bool
        True for a name ending in ``.npz``.

    Examples
    --------
    >>> from sgtune.io.kronecker_io import is_kronecker_file
    >>> is_kronecker_file("lam.npz"), is_kronecker_file("lam.npy")
    (True, False)
    """
    return path is not None and str(path).lower().endswith(".npz")


def load_kronecker(path: Any, option: str = "--lambda", dim: int | None = None) -> Any:
    """Read a :class:`~sgtune.theory.kronecker.KroneckerTuning` saved as ``.npz``, or fail in one line.

    Parameters
    ----------
    path : str or path-like
        The file.
    option : str, optional
        The option as the user typed it (for the message).
    dim : int, optional
        The number of parameters the network has (checked when given).

    Returns
    -------
    KroneckerTuning
        The per-layer factors and settings.

    Raises
    ------
    SgtuneError
        Missing or unreadable file, not a Kronecker step, or the wrong D.

    Examples
    --------
    >>> from sgtune.io.kronecker_io import load_kronecker
    >>> load_kronecker("missing.npz")
    Traceback (most recent call last):
    ...
    sgtune.core.errors.SgtuneError: --lambda missing.npz: no such file; write one with `sgtune lambda --family kronecker -o missing.npz`
    """
    import zipfile

    from ..theory.kronecker import KroneckerTuning

    try:
        res = KroneckerTuning.load(path)
    except FileNotFoundError:
        raise SgtuneError(f"{option} {path}: no such file; write one with `sgtune lambda --family kronecker -o "
                          f"{path}`") from None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise SgtuneError(f"{option} {path}: not a kronecker step-size file written by sgtune ({exc}); write one "
                          "with `sgtune lambda --family kronecker -o FILE.npz`") from None
    if dim is not None and res.dim != dim:
        raise SgtuneError(f"{option} {path} holds a step for D = {res.dim} parameters but the network has {dim}; "
                          "tune it for this network")
    return res


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
