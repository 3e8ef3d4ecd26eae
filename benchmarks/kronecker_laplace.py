"""sgtune's Kronecker posterior target against laplace-torch's ``KronLaplace`` on the same network and prior.

Run as ``python benchmarks/kronecker_laplace.py`` (results in ``benchmarks/results/kronecker_laplace.txt``).
Needs laplace-torch, which is not in sgtune's extras: it requires torchvision, and the torchvision wheel pip
resolves beside torch 2.13.0+cpu fails at import ("operator torchvision::nms does not exist"), which breaks
``import laplace`` through torchmetrics. Install each ``--no-deps``: ``laplace-torch==0.3 torchmetrics
lightning-utilities asdfghjkl==0.1a5`` (it provides the ``asdl`` module laplace-torch imports eagerly) and
``sgtune[kfac]`` (curvlinops-for-pytorch, backpack-for-pytorch, einops, unfoldNd, einconv, linear_operator).
If a broken torchvision is installed, this script hides it from torchmetrics (for this process only).

For each network (regression and 3-class classification, with and without biases, D ≈ 10³–10⁴), trained
in float64 with torch to θ̂ ≈ the MAP under the prior N(0, δ⁻¹I), both libraries take the same θ̂ and δ:

- laplace-torch: ``KronLaplace(net, lik, sigma_noise=σ, prior_precision=δ, temperature=1,
  backend=CurvlinopsGGN).fit(one batch of all N rows)``; the variance vᵀP⁻¹v along v from
  ``posterior_precision.inv_square_form`` (exact, from its eigendecomposed factors).
- sgtune: ``tune_kronecker(net, (X, y), Dynamics(None, B, β=2N), target="posterior", prior=...)``, the tuned
  chain's predicted variance ``probe_variance(V)`` (equal to the target's to rounding; ``covariance_error``),
  for ``prior="eigenbasis"`` (δ added in the joint eigenbasis, as laplace-torch) and ``"damped"`` (default).
- "factors": sgtune's own factors put in laplace-torch's convention (W and b as separate blocks, below) and
  inverted with :func:`sgtune.theory.kronecker.eigenbasis_posterior_variance`: checks that the two
  libraries' KFAC factors are the same numbers.

Directions: 20 random unit vectors in θ, and per layer the least and most variable direction of sgtune's
eigenbasis prediction and laplace-torch's most variable direction of each Kronecker block.

The conventions that differ (none of them is changed to make the numbers agree):

- bias: sgtune augments the input with a 1 (one Kronecker block G ⊗ Ã for [W | b]); laplace-torch's curvlinops
  backend uses ``separate_weight_and_bias=True``: G ⊗ A_W for W and G alone for b, no W–b coupling. Networks
  without biases have no difference here.
- prior: sgtune's default ``damped`` form absorbs δ by factored Tikhonov damping (Martens & Grosse §6.3,
  π-scaled); laplace-torch adds δ exactly in the eigenbasis (its ``damping=True`` option is a third form,
  (λ_G + √δ)(λ_A + √δ), not used here). One δ for all layers here; laplace-torch allows one per layer.
- scale: sgtune's factors are per-observation means (mean loss, curvature G ⊗ A + (δ/N)I), laplace-torch
  sums the loss (precision N·G ⊗ A + δI); sgtune's posterior target is (N·H)⁻¹, laplace-torch's posterior at
  temperature T = 1 (T scales its likelihood term by 1/T). σ² enters both as the Gaussian noise variance.
- batches: laplace-torch adds per-batch Kronecker factors factor-wise when fitted on several batches, which
  is not the KFAC of all the data; one batch of all N rows is used here (sgtune's factors are over all rows).
"""
from __future__ import annotations

import sys
import time
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import torch

from sgtune.core.config import Dynamics
from sgtune.theory.kronecker import eigenbasis_posterior_variance, tune_kronecker
from sgtune.workflows.kronecker_probes import probe_directions

N_DATA = 1000
N_RANDOM = 20
FACTOR_TOLERANCE = 1e-8  # "factors" against laplace-torch: the same KFAC numbers, rounding only


def _hide_broken_torchvision() -> None:
    """Make torchmetrics treat torchvision as absent when importing it fails (this process only)."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - a torchvision built for another torch raises RuntimeError
        for key in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[key]
        sys.modules["torchvision"] = None  # type: ignore[assignment]
        import lightning_utilities.core.imports as lui
        original = lui._version

        def _version(name: str) -> str:
            if name == "torchvision":
                raise PackageNotFoundError(name)
            return original(name)

        lui._version = _version


def _train(net: torch.nn.Module, X: torch.Tensor, y: torch.Tensor, lik: str, delta: float, s2: float,
           steps: int = 600) -> None:
    """Adam on the mean negative log posterior: mean ρ + δ/(2N)‖θ‖² (θ̂ ≈ the MAP)."""
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    n = X.shape[0]
    for _ in range(steps):
        opt.zero_grad()
        out = net(X)
        rho = (((out[:, 0] - y) ** 2).mean() / (2 * s2) if lik == "gaussian"
               else torch.nn.functional.cross_entropy(out, y.long()))
        reg = sum((p * p).sum() for p in net.parameters()) * delta / (2 * n)
        (rho + reg).backward()
        opt.step()


def _mlp(widths: list[int], act: type, bias: bool) -> torch.nn.Module:
    mods: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        mods.append(torch.nn.Linear(a, b, bias=bias))
        if i < len(widths) - 2:
            mods.append(act())
    return torch.nn.Sequential(*mods).double()


def problems() -> list[tuple[str, torch.nn.Module, np.ndarray, np.ndarray, str, float, float]]:
    """(label, trained float64 network, X, y, likelihood, prior precision δ, σ²)."""
    out = []
    r = np.random.default_rng(0)
    X = r.standard_normal((N_DATA, 5))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.3 * r.standard_normal(N_DATA) + 0.5
    Xc = r.standard_normal((N_DATA, 4)) + 0.3
    ang = np.arctan2(Xc[:, 1], Xc[:, 0])
    yc = np.floor((ang + np.pi) / (2 * np.pi / 3)).clip(0, 2)
    flip = r.random(N_DATA) < 0.1
    yc[flip] = r.integers(0, 3, flip.sum())
    for bias in (True, False):
        tag = "" if bias else ", no bias"
        torch.manual_seed(0)
        net = _mlp([5, 32, 32, 1], torch.nn.Tanh, bias)
        _train(net, torch.tensor(X), torch.tensor(y), "gaussian", 1.0, 0.3 ** 2)
        out.append((f"regression tanh(32,32){tag}", net, X, y, "gaussian", 1.0, 0.3 ** 2))
        torch.manual_seed(1)
        net = _mlp([4, 64, 64, 3], torch.nn.ReLU, bias)
        _train(net, torch.tensor(Xc), torch.tensor(yc), "categorical", 5.0, 1.0)
        out.append((f"3 classes relu(64,64){tag}", net, Xc, yc, "categorical", 5.0, 1.0))
    return out


def _laplace(net: torch.nn.Module, X: np.ndarray, y: np.ndarray, lik: str, delta: float, s2: float):
    from laplace import KronLaplace
    from laplace.curvature import CurvlinopsGGN

    yt = torch.tensor(y)[:, None] if lik == "gaussian" else torch.tensor(y).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.tensor(X), yt), batch_size=len(X))
    la = KronLaplace(net, "regression" if lik == "gaussian" else "classification", sigma_noise=float(np.sqrt(s2)),
                     prior_precision=delta, temperature=1.0, backend=CurvlinopsGGN)
    la.fit(loader)
    return la


def _laplace_variances(la, V: np.ndarray) -> np.ndarray:
    W = torch.tensor(V)[:, None, :]
    return la.posterior_precision.inv_square_form(W)[:, 0, 0].detach().numpy()


def _laplace_top_directions(la, dim: int) -> tuple[list[str], list[np.ndarray]]:
    """Per Kronecker block of laplace-torch, its most variable direction (smallest precision eigenpair)."""
    P = la.posterior_precision
    labels, rows, start = [], [], 0
    for i, (ls, Qs, d) in enumerate(zip(P.eigenvalues, P.eigenvectors, P.deltas)):
        v = np.zeros(dim)
        if len(ls) == 1:
            q = Qs[0][:, int(torch.argmin(ls[0]))].numpy()
            v[start:start + q.size] = q
        else:
            prec = torch.outer(ls[0], ls[1]) + d
            a, b = np.unravel_index(int(torch.argmin(prec)), tuple(prec.shape))
            block = np.outer(Qs[0][:, a].numpy(), Qs[1][:, b].numpy())
            v[start:start + block.size] = block.ravel()
        start += len(ls[0]) * (len(ls[1]) if len(ls) == 2 else 1)
        rows.append(v)
        labels.append(f"laplace block {i} most")
    return labels, rows


def _factor_variances(result_factors, V: np.ndarray, delta: float) -> np.ndarray:
    """vᵀ(N·G ⊗ A + δI)⁻¹v from sgtune's factors in laplace-torch's convention (W and b separate blocks)."""
    from sgtune.models.kfac import LayerFactors

    n = result_factors.n_data
    total = np.zeros(len(V))
    for lf in result_factors.layers:
        Xl = V[:, lf.theta_indices()].reshape(len(V), lf.d_out, lf.d_in)
        if lf.bias_index is None:
            total += eigenbasis_posterior_variance(lf, Xl, delta, n)
            continue
        A = lf.input_factor
        w = LayerFactors(lf.name, A[:-1, :-1], lf.curvature_factor, lf.noise_factor, lf.weight_index)
        b = LayerFactors(lf.name, A[-1:, -1:], lf.curvature_factor, lf.noise_factor, (0, lf.d_out))
        total += eigenbasis_posterior_variance(w, Xl[:, :, :-1], delta, n)
        total += eigenbasis_posterior_variance(b, Xl[:, :, -1:], delta, n)
    return total


def _rel(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    r = np.abs(a - b) / np.abs(b)
    return float(np.median(r)), float(np.max(r))


def compare(label: str, net, X, y, lik: str, delta: float, s2: float) -> dict:
    from sgtune.models.kfac import torch_factors

    dyn = Dynamics(None, batch_size=50, inv_temperature=2.0 * len(X))
    kw = dict(likelihood=lik, prior_precision=delta, target="posterior", noise_variance=s2)
    t0 = time.perf_counter()
    eig = tune_kronecker(net, (X, y), dyn, prior="eigenbasis", **kw)
    damped = tune_kronecker(net, (X, y), dyn, prior="damped", **kw)
    t_sg = time.perf_counter() - t0
    t0 = time.perf_counter()
    la = _laplace(net, X, y, lik, delta, s2)
    t_la = time.perf_counter() - t0
    labels, V = probe_directions(eig, n_random=N_RANDOM, seed=0)
    la_labels, la_rows = _laplace_top_directions(la, eig.dim)
    V = np.vstack([V, np.array(la_rows)])
    labels = labels + tuple(la_labels)
    v_la = _laplace_variances(la, V)
    fac = torch_factors(net, X, y, lik, noise_variance=s2, prior_precision=delta)
    rand = np.array([lab.startswith("random") for lab in labels])
    row = {"label": label, "D": eig.dim, "delta": delta, "t_sg": t_sg, "t_la": t_la,
           "cov_err": max(eig.covariance_error, damped.covariance_error)}
    for key, v in (("factors", _factor_variances(fac, V, delta)), ("eig", eig.probe_variance(V)),
                   ("damped", damped.probe_variance(V))):
        row[key + "_rand"] = _rel(v[rand], v_la[rand])
        row[key + "_top"] = _rel(v[~rand], v_la[~rand])
        row[key + "_ratio"] = (float(np.min(v / v_la)), float(np.max(v / v_la)))
    return row


def main() -> int:
    _hide_broken_torchvision()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    rows = [compare(*p) for p in problems()]
    print("relative difference |v_sgtune − v_laplace| / v_laplace of the posterior variance vᵀΣv; "
          f"median / max over {N_RANDOM} random directions ('rand') and over the per-layer top directions ('top')")
    hdr = f"{'network':34s} {'D':>5s} {'δ':>4s} | {'sgtune form':22s} {'rand med':>9s} {'rand max':>9s} " \
          f"{'top med':>9s} {'top max':>9s} {'ratio range':>17s}"
    print(hdr)
    print("-" * len(hdr))
    forms = (("factors", "factors, laplace conv."), ("eig", "eigenbasis (tuned)"), ("damped", "damped (tuned)"))
    for r in rows:
        for i, (key, name) in enumerate(forms):
            head = f"{r['label']:34s} {r['D']:5d} {r['delta']:4g}" if i == 0 else " " * 45
            lo, hi = r[key + "_ratio"]
            print(f"{head} | {name:22s} {r[key + '_rand'][0]:9.2e} {r[key + '_rand'][1]:9.2e} "
                  f"{r[key + '_top'][0]:9.2e} {r[key + '_top'][1]:9.2e} {lo:8.3f}–{hi:8.3f}")
    print()
    for r in rows:
        print(f"{r['label']:34s} sgtune tune (both forms) {r['t_sg']:.1f} s, laplace-torch fit {r['t_la']:.1f} s, "
              f"tuned chain vs its target {r['cov_err']:.1e}")
    vers = []
    for pkg in ("laplace-torch", "torch", "curvlinops-for-pytorch", "asdfghjkl"):
        try:
            vers.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            vers.append(f"{pkg} absent")
    print(" | ".join(vers))
    bad = [r["label"] for r in rows if max(r["factors_rand"][1], r["factors_top"][1]) > FACTOR_TOLERANCE]
    if bad:
        print(f"factors disagree beyond {FACTOR_TOLERANCE:g}: {', '.join(bad)}")
    print(f"exit {1 if bad else 0}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
