"""sgtune's posterior target for a network's last layer against laplace-torch's last-layer Laplace.

Run as ``python benchmarks/lastlayer_laplace.py``. Needs laplace-torch, which is not in sgtune's
extras (it declares torchvision, which breaks beside a CPU-only torch):
``pip install --no-deps laplace-torch==0.3`` and, each ``--no-deps``, what it imports at run time:
torchmetrics, lightning-utilities, tqdm, asdfghjkl, backpack-for-pytorch, einops, unfoldNd,
curvlinops-for-pytorch, einconv, linear_operator (opt_einsum comes with sgtune's dependencies).

For each problem a small network is trained with torch (seeded, CPU, one thread), its head is
refitted to the MAP of the last-layer problem by sgtune (``expand``), the refitted head is loaded
back into the network, and then

- sgtune: ``expand(model, data, prior_precision=δ).posterior_cov()`` = H⁻¹/N = (Σ_n J_n + δI)⁻¹ on
  the features of :func:`sgtune.models.lastlayer.last_layer`, in sgtune's θ layout;
- laplace-torch: ``Laplace(net, likelihood, subset_of_weights="last_layer", hessian_structure="full",
  prior_precision=δ, sigma_noise=σ, temperature=1).fit(loader).posterior_covariance``, in torch's
  ``parameters_to_vector(head.parameters())`` order (every weight row-major, then every bias),
  mapped to sgtune's order by ``HeadLayout.torch_order()``.

laplace-torch's posterior precision is (1/(σ²T))·Σ_n J_fᵀ Λ_n J_f + δI with the sum over the data
(MSELoss/CrossEntropyLoss with reduction "sum"), σ = ``sigma_noise`` (1 for classification) and
temperature T: with T = 1 it is sgtune's N·H = Σ_n J_n + Γ, Γ = δI, noise variance σ² — no other
factor. The table prints the largest entrywise difference relative to the largest entry.
"""
from __future__ import annotations

import sys

import numpy as np
import torch

from sgtune.models import expand
from sgtune.models.lastlayer import last_layer

TOLERANCE = 1e-6


def _train(net: torch.nn.Module, X: np.ndarray, y: np.ndarray, loss: str, steps: int = 400) -> None:
    Xt = torch.tensor(X)
    yt = torch.tensor(y)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        out = net(Xt)
        val = (((out[:, 0] - yt) ** 2).mean() if loss == "mse"
               else torch.nn.functional.cross_entropy(out, yt.long()))
        val.backward()
        opt.step()


def problems() -> list[tuple[str, torch.nn.Module, np.ndarray, np.ndarray, str, float, float]]:
    """(label, trained float64 network, X, y, likelihood, prior precision δ, σ²)."""
    out = []
    r = np.random.default_rng(0)
    torch.manual_seed(0)
    X = r.standard_normal((300, 4))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.3 * r.standard_normal(300)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8), torch.nn.Tanh(),
                              torch.nn.Linear(8, 1)).double()
    _train(net, X, y, "mse")
    out.append(("regression (N=300, d=8, K=1)", net, X, y, "gaussian", 0.5, 0.3 ** 2))
    torch.manual_seed(1)
    X = r.standard_normal((400, 2))
    ang = np.arctan2(X[:, 1], X[:, 0])
    y = np.floor((ang + np.pi) / (2 * np.pi / 3)).clip(0, 2)
    flip = r.random(400) < 0.1
    y[flip] = r.integers(0, 3, flip.sum())
    net = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 6), torch.nn.Tanh(),
                              torch.nn.Linear(6, 3)).double()
    _train(net, X, y, "ce")
    out.append(("3-class classifier (N=400, d=6, K=3)", net, X, y, "softmax", 1.0, 1.0))
    return out


def compare(label: str, net: torch.nn.Module, X: np.ndarray, y: np.ndarray, lik: str, delta: float,
            s2: float) -> tuple[str, float]:
    from laplace import Laplace

    model, data = last_layer(net, X, y, likelihood=lik, noise_variance=s2)
    e = expand(model, data, prior_precision=delta)  # refits the head (MAP from the trained weights)
    cov_sg = e.posterior_cov()
    weight, bias = model.layout.head_of(e.theta_hat)
    head = net[-1]
    with torch.no_grad():
        head.weight.copy_(torch.tensor(weight))
        head.bias.copy_(torch.tensor(bias))
    yt = torch.tensor(y) if lik == "gaussian" else torch.tensor(y).long()
    if lik == "gaussian":
        yt = yt[:, None]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.tensor(X), yt), batch_size=64)
    la = Laplace(net, "regression" if lik == "gaussian" else "classification", subset_of_weights="last_layer",
                 hessian_structure="full", prior_precision=delta, sigma_noise=float(np.sqrt(s2)), temperature=1.0)
    la.fit(loader)
    cov_la = la.posterior_covariance.detach().numpy()
    perm = model.layout.torch_order()  # θ[perm] is torch's order
    cov_la_theta = np.empty_like(cov_la)
    cov_la_theta[np.ix_(perm, perm)] = cov_la
    rel = float(np.max(np.abs(cov_sg - cov_la_theta)) / np.max(np.abs(cov_la_theta)))
    return label, rel


def main() -> int:
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    rows = [compare(*p) for p in problems()]
    print(f"{'problem':40s} {'max rel. diff':>14s}")
    for label, rel in rows:
        print(f"{label:40s} {rel:14.2e}")
    print("sgtune: expand(model, data, δ).posterior_cov() = (Σ_n J_n + δI)⁻¹; laplace-torch: Laplace(..., "
          "subset_of_weights='last_layer', hessian_structure='full').posterior_covariance, permuted to θ order")
    bad = [r for r in rows if not r[1] <= TOLERANCE]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
