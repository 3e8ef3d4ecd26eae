"""A user's network written by hand (NumPy, no sgtune internals) for the last-layer tests: a model file's source.

``TANH_NET`` defines ``TanhNet(width, likelihood, noise_variance)``: f(x) = w·tanh(W x + b) + c with
θ = (W (h, p) row-major, b (h), w (h), c), Gaussian loss (y − f)²/(2σ²) or Bernoulli loss
log(1 + e^f) − y f, Gauss–Newton curvature ρ''(f) ∇f ∇fᵀ, and the protocol's last-layer part:
``features(theta, X) = tanh(W x + b)`` and ``last_layer_likelihood``.

``TORCH_NET`` is the PyTorch user's model file: ``MODEL = from_torch(<module>, <likelihood>, ..., fit=True)`` with the
module built in the file (``torch.manual_seed(0)`` first, so its initial weights are the same in every run);
``Scaled`` is a network whose ``forward`` scales its last ``nn.Linear``'s output (nothing identifies its
output layer from its modules alone).
"""
from __future__ import annotations

from pathlib import Path

TANH_NET = '''
import numpy as np
from sgtune.models import RankOneCurvature


class TanhNet:
    name = "tanh-net"

    def __init__(self, width, likelihood="gaussian", noise_variance=1.0):
        self.width, self.last_layer_likelihood, self.noise_variance = width, likelihood, noise_variance

    def n_params(self, p):
        return self.width * (p + 2) + 1

    def initial_params(self, p, rng):
        return 0.5 * rng.standard_normal(self.n_params(p))

    def _split(self, theta, p):
        h = self.width
        return theta[:h * p].reshape(h, p), theta[h * p:h * (p + 1)], theta[h * (p + 1):h * (p + 2)], theta[-1]

    def features(self, theta, X):
        W, b, _, _ = self._split(theta, X.shape[1])
        return np.tanh(X @ W.T + b)

    def _f(self, theta, X):
        W, b, w, c = self._split(theta, X.shape[1])
        a = np.tanh(X @ W.T + b)
        da = (1.0 - a ** 2) * w
        grads = np.hstack([(da[:, :, None] * X[:, None, :]).reshape(len(X), -1), da, a, np.ones((len(X), 1))])
        return a @ w + c, grads

    def _rho(self, f, y):  # the loss's first and second derivative in f
        if self.last_layer_likelihood == "gaussian":
            return (f - y) / self.noise_variance, np.full(len(f), 1.0 / self.noise_variance)
        p = 1.0 / (1.0 + np.exp(-f))
        return p - y, p * (1.0 - p)

    def per_sample_losses(self, theta, X, y):
        f, _ = self._f(theta, X)
        if self.last_layer_likelihood == "gaussian":
            return 0.5 * (y - f) ** 2 / self.noise_variance
        return np.logaddexp(0.0, f) - y * f

    def per_sample_grads(self, theta, X, y):
        f, g = self._f(theta, X)
        return self._rho(f, y)[0][:, None] * g

    def curvature(self, theta, X, y):
        f, g = self._f(theta, X)
        return RankOneCurvature(g, self._rho(f, y)[1])
'''


def write_net(folder: Path, model: str, name: str = "net.py", extra: str = "") -> str:
    """Write the network file (``extra`` source after ``TanhNet``) with ``MODEL = <model>`` (e.g.
    ``"TanhNet(2, 'gaussian', 0.01)"``); its spec ``path:MODEL``."""
    path = Path(folder) / name
    path.write_text(TANH_NET + extra + f"\nMODEL = {model}\n")
    return f"{path}:MODEL"


TORCH_NET = '''
import torch
from torch import nn
from sgtune.models import from_torch


class Scaled(nn.Module):
    def __init__(self, p, h):
        super().__init__()
        self.hidden, self.output = nn.Linear(p, h), nn.Linear(h, 1)

    def forward(self, x):
        return 2.0 * self.output(torch.tanh(self.hidden(x)))


torch.manual_seed(0)
'''


def write_torch_net(folder: Path, module: str, likelihood: str, extra: str = "", name: str = "tnet.py") -> str:
    """Write the torch model file with ``MODEL = from_torch(<module>, "<likelihood>"<extra>, fit=True)`` (an
    untrained module: its MAP is fitted from its initial weights, not taken as θ̂; e.g. module
    ``"nn.Sequential(nn.Linear(1, 2), nn.Tanh(), nn.Linear(2, 1))"``, extra ``", noise_variance=0.01"``); its spec
    ``path:MODEL``."""
    path = Path(folder) / name
    path.write_text(TORCH_NET + f"MODEL = from_torch({module}, {likelihood!r}{extra}, fit=True)\n")
    return f"{path}:MODEL"
