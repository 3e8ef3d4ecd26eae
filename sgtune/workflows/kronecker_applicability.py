r"""Is a Kronecker-factored Λ applicable to the real network? Matrix-free checks (no D×D object).

The factored prediction (:mod:`sgtune.theory.kronecker`) is exact for the factored chain only: block-diagonal
over layers, KFAC curvature G̃ ⊗ Ã, KFAC noise E ⊗ Ã. The real network's chain, linearised at θ̂, has the
true curvature H = ∇²(mean_n l_n) + (δ/N) I (cross-layer blocks, no Kronecker structure) and the true
constant gradient-noise covariance C = cov_n(∇l_n). Two checks measure the distance between the two
chains using only Hessian-vector products (torch autograd, forward-over-reverse) and per-sample
directional derivatives (one forward-mode pass over the rows):

(a) **Stability of the real chain.** With Λ = LLᵀ (per layer L = chol(M) ⊗ chol(Ã⁻¹)), ΛH is similar to the
    symmetric K = LᵀHL, whose extreme eigenvalues λ_min, λ_max Lanczos finds from products
    v ↦ Lᵀ H L v. The mean dynamics of the heavy-ball chain (m' = κm + Hd, d' = d − Λm') has, per
    eigenvalue λ of ΛH, the characteristic polynomial z² − (1 − λ + κ) z + κ; it is stable iff
    0 < λ < 2(1 + κ) (κ < 1) for every λ, and its spectral radius is the largest root modulus, attained at
    λ_min or λ_max. ``spectral_radius`` is its square (the second-moment map's, as in
    :func:`sgtune.theory.kronecker.layer_stationary`); ≥ 1 means the real chain diverges from θ̂.

(b) **The real linearised chain along probes.** For a probe v the stationary variance of the linear chain
    with the true H and the true constant noise C is the series (Wang, Ding & Huggins 2026, Eq. (11) with
    constant noise; Prop. B.1 with momentum, written as Σ = Σ_k Fᵏ Q Fᵏᵀ)

        vᵀΣ_lin v = Σ_{k≥0} w_kᵀ Q w_k,   w_0 = (v, 0),   w_{k+1} = Fᵀ w_k,

    with Fᵀ(w_d, w_m) = (w_d − H u, −κ u), u = Λw_d − w_m, and
    w_kᵀ Q w_k = s·var_n(∇l_nᵀ u) + (2/β) w_dᵀΛw_d (s = f/B). Each term costs one Hessian-vector product
    and one forward-mode pass for all probes at once; the series is summed until its terms fall below
    ``tol`` of the sum (geometric at the rate ``spectral_radius``). The ratio vᵀΣ_lin v / vᵀΣ_pred v is the
    KFAC + cross-layer error of the prediction along v; it omits only the Σ-dependent part of the
    minibatch noise and the network's nonlinearity beyond θ̂ (what
    :func:`sgtune.workflows.kronecker_probes.probe_check` measures with the real chain).

(c) **Stability with minibatch curvature** (:func:`minibatch_growth`): the linearised chain with the Hessian
    of a fresh minibatch each step, simulated on a few vectors (one minibatch Hessian-vector product per
    step). The minibatch Hessians' fluctuation (the Σ-dependent noise of Eq. (12), the residual-weighted
    ∇²f terms of a network) is what makes the real chains of small tanh/relu networks diverge while (a)
    says stable (measured: ``benchmarks/kronecker_applicability.py``).

Applicable: (a) and (c) stable and (b) every probe ratio within ``RATIO_TOLERANCE`` of 1.
"""
from __future__ import annotations

import contextlib
import copy
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core.errors import SgtuneError
from ..theory.kronecker import KroneckerTuning
from ..theory.linear_chain import finite_population_factor

__all__ = ["KroneckerApplicability", "NetworkOperators", "kronecker_applicability", "minibatch_growth",
           "RATIO_TOLERANCE", "GROWTH_LIMIT", "CHECK_MAX_DIM", "DIAGNOSTIC_TERMS", "DENSE_MAX_ENTRIES"]

#: a probe whose linearised real-chain variance is further than this (relative) from the factored prediction
#: makes the result not applicable (applicable means within 10 % on the probes)
RATIO_TOLERANCE = 0.10
#: a mean-square growth per step of the minibatch-linearised chain above this makes it diverge
GROWTH_LIMIT = 1.0
#: series terms summed for the diagnostic linearised variances of a result check (c) already failed (a partial
#: sum is a lower bound; each term is one full-data Hessian-vector product)
DIAGNOSTIC_TERMS = 200
#: above this many parameters the command line skips the checks (with a warning): they cost hundreds of
#: full-data Hessian-vector products, measured at 570 s for D = 9 473 and N = 2 000 on a loaded 2-core VM (1425 s
#: with a 1000-term diagnostic series after a failed check (c), now capped at DIAGNOSTIC_TERMS)
#: (``benchmarks/results/kronecker_applicability.txt``), and grow with D·N; call
#: :func:`kronecker_applicability` directly to run them at any size
CHECK_MAX_DIM = 20_000
#: :class:`NetworkOperators` holds the per-row gradients (N × D) and Hessians (N × D × D) as arrays when N·D² is at
#: most this (64 MB of float64): every product is then a NumPy product instead of a torch autograd pass (tens of
#: milliseconds each for a small network, and a check makes hundreds to thousands of them)
DENSE_MAX_ENTRIES = 8_000_000


class NetworkOperators:
    """Matrix-free operators of a torch network's mean loss at its current weights θ̂ (float64 copy).

    Parameters
    ----------
    module : torch.nn.Module
        The network (copied in float64; never changed).
    X, y : array_like
        The data. y is (N,), or (N, k) for a Gaussian network with k outputs.
    likelihood : {"gaussian", "bernoulli", "categorical"}
        The per-row loss ρ (sgtune's per-observation scaling: (f − y)²/(2σ²) for gaussian).
    noise_variance : float, optional
        The variance σ² of the Gaussian likelihood.
    prior_precision : float, optional
        The prior precision δ: the mean loss carries δ‖θ‖²/(2N).
    chunk_rows : int, optional
        Rows per pass.
    dense : bool, optional
        Hold the per-row gradients and Hessians at θ̂ (computed once, forward-over-reverse per row) and answer
        every product from them. Default: when N·D² ≤ ``DENSE_MAX_ENTRIES``. The matrix-free passes give the
        same products up to rounding.

    Examples
    --------
    >>> import torch
    >>> from sgtune.workflows.kronecker_applicability import NetworkOperators
    >>> net = torch.nn.Linear(2, 1).double()
    >>> X = np.eye(2); ops = NetworkOperators(net, X, np.zeros(2), "gaussian")
    >>> ops.hvp(np.eye(3)).shape
    (3, 3)
    """

    def __init__(self, module: Any, X: Any, y: Any, likelihood: str, *, noise_variance: float = 1.0,
                 prior_precision: float = 0.0, chunk_rows: int = 4096, dense: bool | None = None) -> None:
        import torch

        self._torch = torch
        self.net = copy.deepcopy(module).double().eval()
        self.names = [n for n, _ in self.net.named_parameters()]
        self.shapes = [p.shape for _, p in self.net.named_parameters()]
        self.theta = torch.nn.utils.parameters_to_vector(list(self.net.parameters())).detach().clone()
        self.dim = int(self.theta.numel())
        self.X = torch.as_tensor(np.asarray(X, dtype=np.float64))
        yy = np.asarray(y, dtype=np.float64)
        self.Y = torch.as_tensor(yy).long() if likelihood == "categorical" else torch.as_tensor(yy)
        self.n = int(self.X.shape[0])
        self.likelihood, self.sigma2, self.delta = likelihood, float(noise_variance), float(prior_precision)
        if likelihood not in ("gaussian", "bernoulli", "categorical"):
            raise SgtuneError(f"likelihood must be gaussian, bernoulli or categorical, got {likelihood!r}")
        self.chunks = [(self.X[i:i + chunk_rows], self.Y[i:i + chunk_rows]) for i in range(0, self.n, chunk_rows)]
        if dense is None:
            dense = self.n * self.dim ** 2 <= DENSE_MAX_ENTRIES
        self._grads, self._hessians = self._per_row_derivatives() if dense else (None, None)
        self._hessian = None if self._hessians is None else self._hessians.sum(axis=0) / self.n

    def _per_row_derivatives(self) -> tuple[np.ndarray, np.ndarray]:
        """∇ρ_n (N, D) and ∇²ρ_n (N, D, D) at θ̂, one row at a time under vmap (forward-over-reverse Hessians)."""
        torch = self._torch

        def row(th: Any, x: Any, y: Any) -> Any:
            return self.per_row_losses(th, x[None], y[None])[0]

        grads, hessians = [], []
        with _quiet_jit():
            for Xb, Yb in self.chunks:
                grads.append(torch.vmap(torch.func.grad(row), in_dims=(None, 0, 0))(self.theta, Xb, Yb))
                hessians.append(torch.vmap(torch.func.jacfwd(torch.func.jacrev(row)), in_dims=(None, 0, 0))(
                    self.theta, Xb, Yb))
        return torch.cat(grads).detach().numpy(), torch.cat(hessians).detach().numpy()

    def _params(self, theta: Any) -> dict[str, Any]:
        out, start = {}, 0
        for name, shape in zip(self.names, self.shapes):
            k = int(np.prod(shape)) if len(shape) else 1
            out[name] = theta[start:start + k].reshape(shape)
            start += k
        return out

    def per_row_losses(self, theta: Any, Xb: Any, Yb: Any) -> Any:
        """ρ(f(x_n; θ), y_n) for the rows of a chunk (a torch tensor of shape (b,))."""
        torch = self._torch
        f = torch.func.functional_call(self.net, self._params(theta), (Xb,))
        if self.likelihood == "gaussian":
            return (f - Yb.reshape(f.shape)).pow(2).reshape(f.shape[0], -1).sum(dim=1) * (0.5 / self.sigma2)
        if self.likelihood == "bernoulli":
            return torch.nn.functional.binary_cross_entropy_with_logits(f.reshape(-1), Yb, reduction="none")
        return torch.nn.functional.cross_entropy(f, Yb, reduction="none")

    def hvp_rows(self, V: Any, rows: Any) -> np.ndarray:
        """H_b V: the Hessian of the minibatch loss mean_{n∈b} ρ_n + δ‖θ‖²/(2N) at θ̂ (rows b), for V (k, D).

        Parameters
        ----------
        V : (k, D) array_like
            Directions.
        rows : (B,) array_like of int
            The minibatch's rows.

        Returns
        -------
        (k, D) ndarray
            H_b V.
        """
        if self._hessians is not None:
            V = np.atleast_2d(np.asarray(V, dtype=np.float64))
            rows = np.asarray(rows, dtype=np.int64)
            Hb = self._hessians[rows].sum(axis=0) / len(rows)
            return V @ Hb.T + self.delta / self.n * V
        torch = self._torch
        Vt = torch.as_tensor(np.atleast_2d(np.asarray(V, dtype=np.float64)))
        idx = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        out = self._data_hvp(Vt, self.X[idx], self.Y[idx], len(idx))
        return (out + self.delta / self.n * Vt).detach().numpy()

    def hvp(self, V: Any) -> np.ndarray:
        """H V for V (k, D) in θ order: H the Hessian of mean_n ρ_n + δ‖θ‖²/(2N) at θ̂ (forward-over-reverse).

        Parameters
        ----------
        V : (k, D) array_like
            Directions.

        Returns
        -------
        (k, D) ndarray
            H V.
        """
        if self._hessian is not None:
            V = np.atleast_2d(np.asarray(V, dtype=np.float64))
            return V @ self._hessian.T + self.delta / self.n * V
        torch = self._torch
        Vt = torch.as_tensor(np.atleast_2d(np.asarray(V, dtype=np.float64)))
        out = self.delta / self.n * Vt.clone()
        for Xb, Yb in self.chunks:
            out += self._data_hvp(Vt, Xb, Yb, self.n)
        return out.detach().numpy()

    def _data_hvp(self, Vt: Any, Xb: Any, Yb: Any, divisor: int) -> Any:
        """∇²(Σ_{rows} ρ_n / divisor) V at θ̂ for the rows (Xb, Yb), forward-over-reverse (a torch tensor)."""
        torch = self._torch

        def loss(th: Any) -> Any:
            return self.per_row_losses(th, Xb, Yb).sum() / divisor

        def one(v: Any) -> Any:
            return torch.func.jvp(torch.func.grad(loss), (self.theta,), (v,))[1]

        with _quiet_jit():
            return torch.vmap(one)(Vt)

    def directional(self, U: Any) -> np.ndarray:
        """∇ρ_nᵀ u for every row n and direction u of U (k, D): an (N, k) array (forward mode).

        Parameters
        ----------
        U : (k, D) array_like
            Directions.

        Returns
        -------
        (N, k) ndarray
            The per-row directional derivatives.
        """
        if self._grads is not None:
            return self._grads @ np.atleast_2d(np.asarray(U, dtype=np.float64)).T
        torch = self._torch
        Ut = torch.as_tensor(np.atleast_2d(np.asarray(U, dtype=np.float64)))
        parts = []
        for Xb, Yb in self.chunks:
            def one(u: Any, Xb: Any = Xb, Yb: Any = Yb) -> Any:
                return torch.func.jvp(lambda th: self.per_row_losses(th, Xb, Yb), (self.theta,), (u,))[1]

            with _quiet_jit():
                parts.append(torch.vmap(one)(Ut).T)
        return torch.cat(parts).detach().numpy()

    def noise_quadratic(self, U: Any) -> np.ndarray:
        """uᵀCu = var_n(∇ρ_nᵀu) for each row u of U (k, D): C the per-row gradient covariance at θ̂.

        Parameters
        ----------
        U : (k, D) array_like
            Directions.

        Returns
        -------
        (k,) ndarray
            The quadratic forms.
        """
        G = self.directional(U)
        return G.var(axis=0)


@contextlib.contextmanager
def _quiet_jit() -> Any:
    """torch's forward mode loads its decompositions with the deprecated torch.jit.script on first use."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=DeprecationWarning)
        yield


def _root_modulus(lam: float, kappa: float) -> float:
    """The largest |z| with z² − (1 − λ + κ) z + κ = 0 (the heavy-ball mode of eigenvalue λ of ΛH)."""
    return float(np.max(np.abs(np.roots([1.0, -(1.0 - lam + kappa), kappa]))))


@cites("wang2026", "stability of the linearised chain: ρ(I − ΛH) (Prop. B.1's heavy-ball map with momentum)")
def _extreme_eigenvalues(res: KroneckerTuning, ops: NetworkOperators, tol: float,
                         max_restarts: int = 25) -> tuple[float, float]:
    """(λ_min, λ_max) of ΛH = similar to LᵀHL, by Lanczos on the symmetric operator (≤ ~1000 products each; one
    that does not converge — a cluster of tiny eigenvalues — is NaN)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    def mv(x: np.ndarray) -> np.ndarray:
        y = ops.hvp(res.sqrt_apply(np.asarray(x).reshape(1, -1)))
        return res.sqrt_apply(y, transpose=True).ravel()

    if res.dim <= 3:
        K = np.array([mv(e) for e in np.eye(res.dim)])
        w = np.linalg.eigvalsh(0.5 * (K + K.T))
        return float(w[0]), float(w[-1])
    from scipy.sparse.linalg import ArpackNoConvergence

    op = LinearOperator((res.dim, res.dim), matvec=mv, dtype=np.float64)
    v0 = np.random.default_rng(0).standard_normal(res.dim)
    out = []
    for which in ("SA", "LA"):
        try:
            w = eigsh(op, k=1, which=which, tol=tol, return_eigenvectors=False, ncv=min(res.dim - 1, 40),
                      maxiter=max_restarts, v0=v0)
            out.append(float(w[0]))
        except ArpackNoConvergence:  # a cluster of tiny eigenvalues: λ_min undetermined (NaN)
            out.append(math.nan)
    return out[0], out[1]


@cites("wang2026", "the minibatch chain's multiplicative noise (the Σ-dependent part C̄(Σ) of Eq. (12)), simulated")
def minibatch_growth(res: KroneckerTuning, ops: NetworkOperators, *, steps: int = 300, n_vectors: int = 8,
                     discard: int = 50, seed: int = 0) -> float:
    """Mean-square growth per step of the linearised chain with minibatch Hessians (no additive noise).

    Iterates m ← κm + H_b d, d ← d − Λm with H_b the Hessian of a fresh minibatch's loss at θ̂ (the result's
    B and batching; the same minibatch for every vector, as one chain sees it) for ``n_vectors`` random starts,
    renormalising by the mean square each step; returns the geometric mean of the per-step factor after
    ``discard`` steps: exp(2γ), γ the top Lyapunov exponent of the random product, the rate at which one
    chain's deviations from θ̂ grow (the mean-square rate, the spectral radius of the second-moment map with
    the Σ-dependent noise, is at least this). Above 1 the real chain near θ̂ diverges: the minibatch
    curvature, which the constant-noise theory leaves out, drives it. Matrix-free: one minibatch
    Hessian-vector product per step.

    Parameters
    ----------
    res : KroneckerTuning
        The tuned step.
    ops : NetworkOperators
        The network at θ̂.
    steps, n_vectors, discard : int, optional
        Length, start vectors and discarded transient.
    seed : int, optional
        Seed of the minibatches and starts.

    Returns
    -------
    float
        The growth factor of the mean ‖d‖² per step.

    Examples
    --------
    >>> import torch
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.theory.kronecker import tune_kronecker
    >>> from sgtune.workflows.kronecker_applicability import NetworkOperators, minibatch_growth
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = X @ [1.0, -1.0] + rng.normal(size=300)
    >>> net = torch.nn.Linear(2, 1).double()
    >>> res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=20, inv_temperature=600.0), prior_precision=1.0)
    >>> bool(minibatch_growth(res, NetworkOperators(net, X, y, "gaussian", prior_precision=1.0), steps=60) < 1)
    True
    """
    rng = np.random.default_rng(seed)
    dyn = res.dynamics
    kappa = float(dyn.momentum)
    Vd = rng.standard_normal((n_vectors, res.dim))
    Vd /= np.sqrt(np.mean(np.sum(Vd * Vd, axis=1)))
    Vm = np.zeros_like(Vd)
    logs = 0.0
    for t in range(steps):
        rows = (rng.choice(ops.n, dyn.batch_size, replace=False) if dyn.without_replacement
                else rng.integers(0, ops.n, dyn.batch_size))
        Vm = kappa * Vm + ops.hvp_rows(Vd, rows)
        Vd = Vd - res.apply(Vm)
        sq = float(np.mean(np.sum(Vd * Vd, axis=1) + np.sum(Vm * Vm, axis=1) * (kappa > 0)))
        if not (math.isfinite(sq) and sq > 0):
            return math.inf
        if t >= discard:
            logs += math.log(sq)
        Vd, Vm = Vd / math.sqrt(sq), Vm / math.sqrt(sq)
    return math.exp(logs / max(steps - discard, 1))


@dataclass(frozen=True)
class KroneckerApplicability:
    """Result of :func:`kronecker_applicability` (module docstring for the checks).

    Attributes
    ----------
    eigenvalue_min, eigenvalue_max : float
        The extreme eigenvalues of ΛH, H the real network's Hessian (with the prior) at θ̂.
    spectral_radius : float
        ρ² of the real linearised chain's mean map (≥ 1: it diverges from θ̂; NaN when Lanczos did not
        converge).
    labels : tuple of str
        The probes.
    predicted : (k,) ndarray
        The factored prediction vᵀΣv.
    linearised : (k,) ndarray
        vᵀΣ_lin v of the real linearised chain with constant noise (NaN when check (a) finds it divergent; also
        computed when check (c) fails; a lower bound — a partial sum of nonnegative terms — when ``converged``
        is False).
    ratio : (k,) ndarray
        linearised / predicted.
    terms : int
        Series terms summed (0 when unstable).
    converged : bool
        Whether the series reached its tolerance within the term budget.
    applicable : bool
        Stable and every ratio within ``tolerance`` of 1 (and the series converged).
    tolerance : float
        The allowed |ratio − 1|.
    reasons : tuple of str
        Why not applicable (empty when applicable).
    minibatch_growth : float
        :func:`minibatch_growth` (NaN when not run).

    Examples
    --------
    >>> from sgtune.workflows.kronecker_applicability import KroneckerApplicability
    >>> a = KroneckerApplicability(0.1, 1.0, 0.81, ("r",), np.ones(1), np.ones(1), np.ones(1), 5, True, True, 0.1, ())
    >>> a.to_dict()["applicable"]
    True
    """

    eigenvalue_min: float
    eigenvalue_max: float
    spectral_radius: float
    labels: tuple[str, ...]
    predicted: np.ndarray
    linearised: np.ndarray
    ratio: np.ndarray
    terms: int
    converged: bool
    applicable: bool
    tolerance: float
    reasons: tuple[str, ...]
    minibatch_growth: float = math.nan

    @property
    def stable(self) -> bool:
        """Whether neither check (a) nor (c) found the real linearised chain unstable (NaN counts as not found)."""
        return not (self.spectral_radius >= 1.0 or self.minibatch_growth > GROWTH_LIMIT)

    def to_dict(self) -> dict[str, Any]:
        """Plain values (the JSON's ``applicability``)."""
        def f(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {"applicable": self.applicable, "stable": self.stable,
                "real_chain_spectral_radius": f(self.spectral_radius),
                "eigenvalues_lambda_h": [f(self.eigenvalue_min), f(self.eigenvalue_max)],
                "minibatch_growth_per_step": f(self.minibatch_growth), "series_terms": self.terms, "series_converged": self.converged, "tolerance": self.tolerance,
                "reasons": list(self.reasons),
                "probes": [{"label": lab, "predicted": f(p), "linearised": f(q), "ratio": f(r)}
                           for lab, p, q, r in zip(self.labels, self.predicted, self.linearised, self.ratio)]}


def _series(res: KroneckerTuning, ops: NetworkOperators, V: np.ndarray, rho2: float, tol: float,
            max_terms: int) -> tuple[np.ndarray, int, bool]:
    """vᵀΣ_lin v by the series Σ_k w_kᵀQw_k (module docstring), for the rows of V."""
    dyn = res.dynamics
    s = finite_population_factor(res.n_data, dyn.batch_size, dyn.without_replacement) / dyn.batch_size
    kappa, beta = float(dyn.momentum), float(dyn.inv_temperature)
    need = max(20, int(math.ceil(math.log(tol) / math.log(rho2)))) if 0 < rho2 < 1 else 20
    Wd, Wm = V.copy(), np.zeros_like(V)
    total = np.zeros(V.shape[0])
    small = 0
    for t in range(max_terms):
        LW = res.apply(Wd)
        U = LW - Wm
        q = s * ops.noise_quadratic(U)
        if math.isfinite(beta):
            q = q + (2.0 / beta) * np.einsum("kd,kd->k", Wd, LW)
        total += q
        small = small + 1 if np.all(np.abs(q) <= tol * np.abs(total)) else 0
        if t + 1 >= need and small >= 10:  # past the spectral-radius estimate and 10 negligible terms in a row
            return total, t + 1, True
        Wd, Wm = Wd - ops.hvp(U), -kappa * U
    return total, max_terms, False


def kronecker_applicability(result: KroneckerTuning, module: Any, X: Any, y: Any, likelihood: str = "gaussian", *,
                            noise_variance: float = 1.0, n_random: int = 4, seed: int = 0, tol: float = 1e-3,
                            max_terms: int = 1000, tolerance: float = RATIO_TOLERANCE,
                            minibatch: bool = True) -> KroneckerApplicability:
    """Check a Kronecker-factored Λ against the real network, matrix-free (module docstring: (a) and (b)).

    Parameters
    ----------
    result : KroneckerTuning
        The tuned step (its B, β, κ, batching and prior δ are used).
    module : torch.nn.Module
        The network at θ̂.
    X, y : array_like
        The data the step was tuned on. y is (N,), or (N, k) for a Gaussian network with k outputs.
    likelihood : {"gaussian", "bernoulli", "categorical"}, optional
        The loss.
    noise_variance : float, optional
        The variance σ² of the Gaussian likelihood.
    n_random : int, optional
        Random probes (besides each layer's least and most variable direction).
    seed : int, optional
        Seed of the random probes.
    tol : float, optional
        Relative size of the last series term (sets the number of terms from the spectral radius).
    max_terms : int, optional
        Series budget (a slower chain is reported as not converged, hence not applicable).
    tolerance : float, optional
        The allowed |ratio − 1| on the probes.
    minibatch : bool, optional
        Run check (c) (:func:`minibatch_growth`); False checks the constant-noise linearised chain only.

    Returns
    -------
    KroneckerApplicability
        Stability, per-probe predicted and linearised variances, and the verdict.

    Examples
    --------
    >>> import torch
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.theory.kronecker import tune_kronecker
    >>> from sgtune.workflows.kronecker_applicability import kronecker_applicability
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = X @ [1.0, -1.0] + rng.normal(size=300)
    >>> net = torch.nn.Linear(2, 1).double()
    >>> res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=20, inv_temperature=600.0), prior_precision=1.0)
    >>> bool(kronecker_applicability(res, net, X, y, n_random=1).stable)
    True
    """
    from .kronecker_probes import probe_directions

    ops = NetworkOperators(module, X, y, likelihood, noise_variance=noise_variance,
                           prior_precision=result.prior_precision)
    if ops.dim != result.dim:
        raise SgtuneError(f"the module has {ops.dim} parameters but the kronecker step was tuned for D = {result.dim}")
    growth = minibatch_growth(result, ops, seed=seed) if minibatch else math.nan
    lo, hi = _extreme_eigenvalues(result, ops, tol)
    kappa = float(result.dynamics.momentum)
    rho2 = max(_root_modulus(x, kappa) for x in (lo, hi) if math.isfinite(x)) ** 2 if math.isfinite(hi) else math.nan
    labels, V = probe_directions(result, n_random, seed)
    predicted = result.probe_variance(V)
    reasons: list[str] = []
    if rho2 >= 1.0:
        reasons.append(f"the real network's chain diverges from θ̂: ΛH has eigenvalues in [{lo:.3g}, {hi:.3g}] "
                       f"(stable needs (0, {2 * (1 + kappa):g})), spectral radius {rho2:.4g} ≥ 1")
    if minibatch and not growth <= GROWTH_LIMIT:
        reasons.append(f"the real network's chain diverges from θ̂: with minibatch curvature its second moments grow "
                       f"×{growth:.3g} per step (the minibatch Hessians' fluctuation, which the factored theory "
                       "leaves out)")
    if rho2 >= 1.0:  # the constant-noise linearised chain diverges: no variance to sum
        nan = np.full(len(labels), np.nan)
        return KroneckerApplicability(lo, hi, rho2, labels, predicted, nan, nan, 0, False, False, tolerance,
                                      tuple(reasons), growth)
    # stable with constant noise: its variances are reported even when check (c) says the minibatch chain diverges
    # (they separate the factorisation error from the minibatch-curvature one), then with at most DIAGNOSTIC_TERMS
    # terms (the verdict is already "not applicable"); a partial sum is a lower bound
    budget = min(max_terms, DIAGNOSTIC_TERMS) if reasons else max_terms
    lin, terms, converged = _series(result, ops, V, rho2, tol, budget)
    ratio = lin / predicted
    if not converged:
        reasons.append(f"the real linearised chain mixes too slowly to check (spectral radius {rho2:.6g}; "
                       f"{max_terms} series terms)")
    bad = [f"{lab} ×{r:.3g}" for lab, r in zip(labels, ratio) if not abs(r - 1.0) <= tolerance]
    if bad:
        reasons.append(f"the real linearised chain's variance is off the factored prediction by more than "
                       f"{tolerance:.0%} along {len(bad)}/{len(labels)} probes ({', '.join(bad[:4])}"
                       f"{', …' if len(bad) > 4 else ''}): KFAC and the dropped cross-layer blocks")
    return KroneckerApplicability(lo, hi, rho2, labels, predicted, lin, ratio, terms, converged, not reasons,
                                  tolerance, tuple(reasons), growth)
