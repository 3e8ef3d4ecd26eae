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

Both give the same numbers for the same network and data (tested).
:func:`sgtune.theory.kronecker.tune_kronecker` tunes every layer from them. The convention (row-major
[W | b], ``np.kron(output_factor, input_factor)``) is stated in :mod:`sgtune.theory.kronecker`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core.errors import MissingExtraError, SgtuneError, ShapeError
from .mlp import MLP

__all__ = ["LayerFactors", "KroneckerFactors", "mlp_factors", "torch_factors", "theta_indices", "KFAC_LIKELIHOODS",
           "damp_factors"]


def _sym(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + a.T)


def theta_indices(weight_index: tuple[int, int], bias_index: tuple[int, int] | None, d_out: int,
                  d_in: int) -> np.ndarray:
    """The positions in θ of vec([W | b]) (row-major) for W at ``weight_index`` and b at ``bias_index``.

    Parameters
    ----------
    weight_index : tuple of int
        (start, stop) of W (d_out × (d_in − 1 if a bias, else d_in), row-major) in θ.
    bias_index : tuple of int or None
        (start, stop) of b in θ, or None.
    d_out, d_in : int
        The layer's widths (d_in counting the bias column).

    Returns
    -------
    (d_out·d_in,) ndarray
        Indices into θ; ``theta[idx].reshape(d_out, d_in)`` is [W | b].

    Examples
    --------
    >>> from sgtune.models.kfac import theta_indices
    >>> theta_indices((0, 4), (4, 6), 2, 3)   # W (2×2) then b (2): rows [w00 w01 b0], [w10 w11 b1]
    array([0, 1, 4, 2, 3, 5])
    """
    d_w = d_in - (bias_index is not None)
    w = np.arange(weight_index[0], weight_index[1]).reshape(d_out, d_w)
    if bias_index is None:
        return w.ravel()
    return np.hstack([w, np.arange(bias_index[0], bias_index[1])[:, None]]).ravel()


@dataclass(frozen=True)
class LayerFactors:
    """The Kronecker factors of one fully connected layer at θ̂ (module docstring for the convention).

    Attributes
    ----------
    name : str
        The layer's name (``fc1``, ``hidden1``, …).
    input_factor : (d_in, d_in) ndarray
        A = mean_n ã_n ã_nᵀ, ã the layer's input with a trailing 1 when it has a bias.
    curvature_factor : (d_out, d_out) ndarray
        G = mean_n u_n Λ_n u_nᵀ, the Gauss–Newton output factor (u_n = ∂f/∂z, Λ_n = ∇²ρ of the loss).
    noise_factor : (d_out, d_out) ndarray
        E = mean_n e_n e_nᵀ, the output factor of 𝓘 = mean_n g_n g_nᵀ (empirical Fisher, e_n = ∂l_n/∂z).
    weight_index : tuple of int
        (start, stop) of W (row-major) in θ.
    bias_index : tuple of int or None
        (start, stop) of b in θ, or None for a layer without bias.
    mean_gradient : (d_out, d_in) ndarray or None
        Ḡ = mean_n e_n ã_nᵀ, the layer's mean gradient as a matrix (None: zero, e.g. at an exact MAP
        without prior); ḡḡᵀ is removed from 𝓘 in factored form
        (:func:`sgtune.theory.kronecker.noise_factor_for`).
    curvature_roots : (N, K, d_out) ndarray or None
        Per sample n the K vectors v_nk with G_n = Σ_k s_nk v_nk v_nkᵀ, the sample's output factor (its
        per-sample curvature block is G_n ⊗ ã_nã_nᵀ): the Gauss–Newton one (all s = 1, G = mean_n G_n), or
        the exact per-sample Hessian's (``sample_hessian="exact"`` of :func:`mlp_factors`). None: not collected;
        the Σ-dependent minibatch noise (``method="dq-exact"`` of :func:`sgtune.theory.kronecker.tune_layer`)
        needs it.
    curvature_signs : (N, K) ndarray or None
        The signs s_nk (None: all +1).
    input_fourth : (d_in, d_in) ndarray or None
        R = mean_n (â_n ∘ â_n)(â_n ∘ â_n)ᵀ with â_n = Q_Aᵀã_n, Q_A the eigenvectors of ``input_factor`` as
        ``np.linalg.eigh`` returns them: the inputs' fourth moments in A's eigenbasis (with
        ``curvature_roots``). m₂ = mean_n (ã_nᵀÃ⁻¹ã_n)² = wᵀRw, w_j = 1/(α_j + c), for any damping Ã = A + cI.

    Examples
    --------
    >>> from sgtune.models.kfac import LayerFactors
    >>> lf = LayerFactors("fc", np.eye(3), np.eye(2), np.eye(2), (0, 4), (4, 6))   # W (2×2), b (2)
    >>> lf.d_out, lf.d_in, lf.theta_indices()
    (2, 3, array([0, 1, 4, 2, 3, 5]))
    """

    name: str
    input_factor: np.ndarray
    curvature_factor: np.ndarray
    noise_factor: np.ndarray
    weight_index: tuple[int, int]
    bias_index: tuple[int, int] | None = None
    mean_gradient: np.ndarray | None = None
    curvature_roots: np.ndarray | None = None
    curvature_signs: np.ndarray | None = None
    input_fourth: np.ndarray | None = None

    def __post_init__(self) -> None:
        A, G, E = (np.asarray(x, dtype=np.float64) for x in (self.input_factor, self.curvature_factor,
                                                              self.noise_factor))
        if A.ndim != 2 or A.shape[0] != A.shape[1] or G.ndim != 2 or G.shape[0] != G.shape[1] or E.shape != G.shape:
            raise ShapeError(f"layer {self.name!r}: factors must be square, A (d_in, d_in) and G, E (d_out, d_out); "
                             f"got {A.shape}, {G.shape}, {E.shape}")
        nw = self.weight_index[1] - self.weight_index[0]
        d_w = A.shape[0] - (self.bias_index is not None)
        if nw != G.shape[0] * d_w:
            raise ShapeError(f"layer {self.name!r}: weight_index covers {nw} entries, expected d_out·d_in = "
                             f"{G.shape[0]}·{d_w}")
        R = self.curvature_roots
        if R is not None and (np.ndim(R) != 3 or np.shape(R)[2] != G.shape[0]
                              or np.shape(self.input_fourth) != A.shape):
            raise ShapeError(f"layer {self.name!r}: curvature_roots must be (N, K, d_out) with d_out = {G.shape[0]} "
                             f"and come with input_fourth (d_in, d_in); got shapes {np.shape(R)}, "
                             f"{np.shape(self.input_fourth)}")
        object.__setattr__(self, "input_factor", _sym(A))
        object.__setattr__(self, "curvature_factor", _sym(G))
        object.__setattr__(self, "noise_factor", _sym(E))

    @property
    def d_in(self) -> int:
        """Input width, counting the bias column."""
        return self.input_factor.shape[0]

    @property
    def d_out(self) -> int:
        """Output width."""
        return self.curvature_factor.shape[0]

    @property
    def n_params(self) -> int:
        """d_out·d_in."""
        return self.d_in * self.d_out

    def theta_indices(self) -> np.ndarray:
        """The positions in θ of vec([W | b]) (row-major), so ``theta[idx].reshape(d_out, d_in)`` is [W | b]."""
        return theta_indices(self.weight_index, self.bias_index, self.d_out, self.d_in)


@dataclass(frozen=True)
class KroneckerFactors:
    """The factors of every layer of a network at θ̂, and what they were computed from.

    Attributes
    ----------
    layers : tuple of LayerFactors
        One per fully connected layer, in θ order.
    n_data : int
        N.
    dim : int
        D, the length of θ.
    prior_precision : float
        δ of the Gaussian prior N(0, δ⁻¹I) (weight decay), 0 for none.
    source : str
        What computed the factors (``"mlp"``, ``"curvlinops"``, ``"given"``).

    Examples
    --------
    >>> from sgtune.models.kfac import KroneckerFactors, LayerFactors
    >>> lf = LayerFactors("fc", np.eye(3), np.eye(1), np.eye(1), (0, 2), (2, 3))
    >>> KroneckerFactors((lf,), n_data=10, dim=3).layers[0].name
    'fc'
    """

    layers: tuple[LayerFactors, ...]
    n_data: int
    dim: int
    prior_precision: float = 0.0
    source: str = "given"

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        covered = sum(lf.n_params for lf in self.layers)
        if covered != self.dim:
            raise ShapeError(f"the layers cover {covered} parameters but θ has {self.dim}; the kronecker family "
                             "needs every parameter in a fully connected layer")
        if not (self.prior_precision >= 0 and math.isfinite(self.prior_precision)):
            raise SgtuneError(f"prior_precision must be ≥ 0, got {self.prior_precision}")



@cites("martens2015", "§6.3: factored Tikhonov damping (A + π√γ I) ⊗ (G + √γ/π I), π² = (tr A/d_in)/(tr G/d_out)")
def damp_factors(A: np.ndarray, G: np.ndarray, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """(Ã, G̃) = (A + π√γ I, G + (√γ/π) I), π = √((tr A/d_in)/(tr G/d_out)) (Martens & Grosse 2015, §6.3).

    Parameters
    ----------
    A, G : ndarray
        The input and output factors.
    gamma : float
        The damping γ = δ/N (0: the factors unchanged).

    Returns
    -------
    A_damped : ndarray
        Ã.
    G_damped : ndarray
        G̃.

    Examples
    --------
    >>> from sgtune.models.kfac import damp_factors
    >>> A, G = damp_factors(np.eye(2), 4 * np.eye(1), 4.0)   # π = √(1/4) = 1/2
    >>> float(A[0, 0]), float(G[0, 0])
    (2.0, 8.0)
    """
    if gamma == 0.0:
        return A, G
    ta, tg = np.trace(A) / A.shape[0], np.trace(G) / G.shape[0]
    pi = math.sqrt(ta / tg) if ta > 0 and tg > 0 else 1.0
    return A + pi * math.sqrt(gamma) * np.eye(A.shape[0]), G + math.sqrt(gamma) / pi * np.eye(G.shape[0])


def _fourth_moment(inputs: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Σ_n (â_n∘â_n)(â_n∘â_n)ᵀ, â_n = basisᵀã_n, over the rows ã_n of ``inputs`` (the bias column included)."""
    Z = inputs @ basis
    Z *= Z
    return Z.T @ Z


#: likelihoods the torch route supports (curvlinops' losses)
KFAC_LIKELIHOODS = ("gaussian", "bernoulli", "categorical")


@cites("martens2015", "§3: A = E[ããᵀ], G = E[J_fᵀ∇²ρ J_f] per layer; E from per-sample gradients (empirical Fisher)")
def mlp_factors(model: MLP, theta: Any, X: Any, y: Any, *, prior_precision: float = 0.0,
                chunk_rows: int = 4096, samples: bool = False, sample_hessian: str = "gauss-newton") -> KroneckerFactors:
    """The KFAC factors of every layer of an :class:`~sgtune.models.mlp.MLP` at θ (module docstring).

    Parameters
    ----------
    model : MLP
        The network (one output).
    theta : (D,) array_like
        The parameters θ̂.
    X : (N, p) array_like
        Covariates.
    y : (N,) array_like
        Responses.
    prior_precision : float, optional
        The precision δ of the prior N(0, δ⁻¹I) (recorded; absorbed when tuning).
    chunk_rows : int, optional
        Rows per pass (bounds the memory to O(chunk · width)).
    samples : bool, optional
        Also keep the per-sample curvature roots (N × d_out per layer) and the inputs' fourth moments (a second
        forward pass) for the Σ-dependent minibatch noise (``LayerFactors.curvature_roots``, ``input_fourth``;
        ``method="dq-exact"``).
    sample_hessian : {"gauss-newton", "exact"}, optional
        The per-sample curvature in the Σ-dependent noise: the Gauss–Newton blocks ρ''δδᵀ ⊗ ããᵀ, or the exact
        per-sample Hessian blocks (ρ''δδᵀ + ρ'T_n) ⊗ ããᵀ, T_n = ∂²f/∂z_l² by second-order back-propagation
        (1 + d_out signed roots per sample: O(N·d_out²) memory, for small layers). The curvature factor G
        stays Gauss–Newton either way.

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
    roots: list[list[np.ndarray]] = [[] for _ in range(nl)]
    signs: list[list[np.ndarray]] = [[] for _ in range(nl)]
    if sample_hessian not in ("gauss-newton", "exact"):
        raise SgtuneError(f"sample_hessian must be gauss-newton or exact, got {sample_hessian!r}")
    for start in range(0, n, chunk_rows):
        Xc, yc = X[start:start + chunk_rows], y[start:start + chunk_rows]
        layers, acts, d1s, d2s, f = model._forward(theta, Xc)
        _, r1, r2 = model.glm.derivatives(f, yc)
        us = model._deltas(layers, d1s, np.ones(Xc.shape[0]))
        for i, (a, u) in enumerate(zip(acts, us)):
            at = np.hstack([a, np.ones((a.shape[0], 1))])
            e = r1[:, None] * u
            sums[i][0] += at.T @ at
            sums[i][1] += (r2[:, None] * u).T @ u
            sums[i][2] += e.T @ e
            sums[i][3] += e.T @ at
            if samples:
                roots[i].append((np.sqrt(np.clip(r2, 0.0, None))[:, None] * u)[:, None, :])
        if samples and sample_hessian == "exact":
            for i, (v, sg) in enumerate(_residual_roots(model, layers, d1s, d2s, us, r1)):
                roots[i][-1] = np.concatenate([roots[i][-1], v], axis=1)
                signs[i].append(np.hstack([np.ones((len(sg), 1)), sg]))
    fourth = [np.zeros_like(sm[0]) for sm in sums]
    if samples:  # a second forward pass: the fourth moments need A's eigenbasis over the whole data
        bases = [np.linalg.eigh(_sym(sm[0] / n))[1] for sm in sums]
        for start in range(0, n, chunk_rows):
            _, acts, _, _, _ = model._forward(theta, X[start:start + chunk_rows])
            for i, a in enumerate(acts):
                fourth[i] += _fourth_moment(np.hstack([a, np.ones((a.shape[0], 1))]), bases[i])
    out = []
    for i, ((a0, a1), (A, G, E, Gbar)) in enumerate(zip(model.layer_slices(p), sums)):
        name = "output" if i == nl - 1 else f"hidden{i + 1}"
        nw = widths[i + 1] * widths[i]
        extra = dict(curvature_roots=np.concatenate(roots[i]), input_fourth=fourth[i] / n) if samples else {}
        if signs[i]:
            extra["curvature_signs"] = np.concatenate(signs[i])
        out.append(LayerFactors(name, A / n, G / n, E / n, (a0, a0 + nw), (a0 + nw, a1), mean_gradient=Gbar / n,
                                **extra))
    return KroneckerFactors(tuple(out), n_data=n, dim=model.n_params(p), prior_precision=float(prior_precision),
                            source="mlp")


def _curvlinops() -> Any:
    import warnings

    try:
        with warnings.catch_warnings():  # its dependency linear_operator uses the deprecated torch.jit.script
            warnings.simplefilter("ignore", DeprecationWarning)
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
                              f"activations; parameter {pname!r} belongs to another module (use the dense family "
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
    return torch.as_tensor(y, dtype=torch.float64).reshape(len(y), -1)  # (N,) → (N, 1); (N, k) kept


@cites("martens2015", "§3: KFAC factors, computed by curvlinops-for-pytorch's KFACLinearOperator")
def torch_factors(module: Any, X: Any, y: Any, likelihood: str = "gaussian", *, noise_variance: float = 1.0,
                  prior_precision: float = 0.0, chunk_rows: int = 2048, samples: bool = False) -> KroneckerFactors:
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
        The variance σ² of the Gaussian likelihood.
    prior_precision : float, optional
        The precision δ of the prior N(0, δ⁻¹I).
    chunk_rows : int, optional
        Rows per batch fed to curvlinops.
    samples : bool, optional
        Also collect the per-sample curvature roots and the inputs' fourth moments (one more pass with forward
        hooks and K backward passes per batch, K the number of outputs) for the Σ-dependent minibatch noise
        (curvlinops has no per-sample factors).

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

    Examples
    --------
    >>> import torch
    >>> from sgtune.models.kfac import torch_factors
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    >>> rng = np.random.default_rng(0)
    >>> fac = torch_factors(net, rng.normal(size=(40, 2)), rng.normal(size=40))
    >>> [(lf.name, lf.d_out, lf.d_in) for lf in fac.layers]
    [('0', 3, 3), ('2', 1, 4)]
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
    roots = {}
    if samples:
        bases = {name: np.linalg.eigh(_sym(factors["type-2"][0][name].numpy()))[1] for name, _ in linears}
        roots = _torch_samples(net, linears, batches, likelihood, noise_variance, bases, torch)
    out = []
    for name, m in linears:
        A = factors["type-2"][0][name].numpy() if name in factors["type-2"][0] else None
        G = factors["type-2"][1][name].numpy() * g_scale / n
        E = factors["empirical"][1][name].numpy() * e_scale / n
        gw = m.weight.grad.numpy()
        gbar = gw if m.bias is None else np.hstack([gw, m.bias.grad.numpy()[:, None]])
        prefix = f"{name}." if name else ""  # the module itself may be the nn.Linear (name "")
        bias_index = None if m.bias is None else offsets[f"{prefix}bias"]
        extra = {}
        if samples:
            extra = dict(curvature_roots=roots[name][0], input_fourth=roots[name][1])
        out.append(LayerFactors(name or "linear", A, G, E, offsets[f"{prefix}weight"], bias_index,
                                mean_gradient=gbar, **extra))
    return KroneckerFactors(tuple(out), n_data=n, dim=start, prior_precision=float(prior_precision),
                            source="curvlinops")


def _loss_roots(f: Any, likelihood: str, noise_variance: float, torch: Any) -> Any:
    """r (n, K, K): rows r_k with ∇²_fρ = Σ_k r_k r_kᵀ per row (Gaussian I/σ², Bernoulli p(1−p), softmax diag p − ppᵀ)."""
    n, k = f.shape
    if likelihood == "gaussian":
        return torch.eye(k, dtype=f.dtype).expand(n, k, k) / math.sqrt(noise_variance)
    if likelihood == "bernoulli":
        p = torch.sigmoid(f)
        return torch.sqrt(p * (1 - p))[:, :, None]
    p = torch.softmax(f, dim=1)  # diag p − ppᵀ = Σ_k p_k (e_k − p)(e_k − p)ᵀ
    return torch.sqrt(p)[:, :, None] * (torch.eye(k, dtype=f.dtype)[None] - p[:, None, :])


def _torch_samples(net: Any, linears: list, batches: list, likelihood: str, noise_variance: float,
                   bases: dict[str, np.ndarray], torch: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per layer: the roots v_nk = J_{z_n}ᵀ r_nk (N, K, d_out) of G_n and R = mean_n (â∘â)(â∘â)ᵀ, â = Q_Aᵀã_n.

    Forward hooks record each ``nn.Linear``'s input a and output z; ∂f_k/∂z by one backward pass per output k
    (rows are independent, so the gradient of Σ_n f_nk is per row).
    """
    store: dict[str, tuple[Any, Any]] = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, name=name: store.__setitem__(name, (inp[0], out)))
             for name, m in linears]
    acc: dict[str, list] = {name: [[], np.zeros((bases[name].shape[0],) * 2)] for name, _ in linears}
    n = sum(len(Xb) for Xb, _ in batches)
    try:
        for Xb, _ in batches:
            f = net(Xb)
            f = f.reshape(len(Xb), -1)
            zs = [store[name][1] for name, _ in linears]
            jac = [torch.autograd.grad(f[:, k].sum(), zs, retain_graph=True) for k in range(f.shape[1])]
            r = _loss_roots(f.detach(), likelihood, noise_variance, torch)  # (n, K, K): rows r_k over outputs j
            for li, (name, m) in enumerate(linears):
                u = torch.stack([jac[j][li] for j in range(f.shape[1])], dim=1)  # (n, K_out j, d_out)
                acc[name][0].append(torch.einsum("nkj,njd->nkd", r, u).detach().numpy())
                a = store[name][0].detach().numpy()
                at = a if m.bias is None else np.hstack([a, np.ones((a.shape[0], 1))])
                acc[name][1] += _fourth_moment(at, bases[name])
    finally:
        for h in hooks:
            h.remove()
    return {name: (np.concatenate(v[0]), v[1] / n) for name, v in acc.items()}


def _residual_roots(model: MLP, layers: list, d1s: list, d2s: list, us: list,
                    r1: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer the signed roots of ρ'(f_n)T_n, T_n = ∂²f_n/∂z_l² (the residual part of the exact per-sample Hessian).

    T for the output layer is 0 (f = z); below, z_{l+1} = W_{l+1}φ(z_l) + b gives
    T_l = diag(φ'_l) W_{l+1}ᵀ T_{l+1} W_{l+1} diag(φ'_l) + diag((W_{l+1}ᵀδ_{l+1}) ∘ φ''_l), δ = ∂f/∂z.
    Returns (v (n, d_out, d_out), s (n, d_out)) with ρ'T_n = Σ_k s_k v_k v_kᵀ (eigen-decomposition per row).
    """
    nl = len(us)
    n = us[-1].shape[0]
    T = np.zeros((n, 1, 1))
    out: list[tuple[np.ndarray, np.ndarray]] = [None] * nl  # type: ignore[list-item]
    for l in range(nl - 1, -1, -1):
        if l < nl - 1:
            W = layers[l + 1][0]
            back = us[l + 1] @ W  # W_{l+1}ᵀδ_{l+1}
            inner = np.einsum("ai,nab,bj->nij", W, T, W)
            T = d1s[l][:, :, None] * inner * d1s[l][:, None, :] + np.einsum("ni,ij->nij", back * d2s[l],
                                                                             np.eye(W.shape[1]))
        w, Q = np.linalg.eigh(r1[:, None, None] * T)
        out[l] = (np.sqrt(np.abs(w))[:, None, :] * Q).transpose(0, 2, 1), np.sign(w)
    return out
