"""A protocol model from a PyTorch ``nn.Module`` and a likelihood (extra ``[torch]``).

>>> import torch
>>> from sgtune.models import from_torch
>>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
>>> model = from_torch(net, "bernoulli")
>>> model.n_params(3)
21

The network's output f(x; θ) goes through the loss of the likelihood, l_n(θ) = ρ(f(x_n; θ), y_n):

- ``"gaussian"``: ρ = (y − f)²/(2σ²), σ² = ``noise_variance`` (one output);
- ``"bernoulli"``: ρ = log(1 + e^f) − y f, f the logit, y ∈ {0, 1} (one output);
- ``"poisson"``: ρ = e^f − y f, f the log-mean, y a count (one output);
- ``"categorical"``: ρ = logsumexp(f) − f_y, f the K logits ("full softmax"), y ∈ {0, …, K−1}.

These are the losses of :class:`sgtune.models.mlp.MLP` (and of the GLMs behind it), so a torch
network with the same weights gives the same numbers. θ is the concatenation of the parameters in
``named_parameters()`` order, each flattened row-major (PyTorch's own order): its names are
``fc1.weight[i,j]``, ``fc1.bias[i]`` (:meth:`TorchModel.parameter_names`). The model works on a
float64 copy of the module in ``eval()`` mode (dropout off, batch-norm statistics frozen); the
module given is never changed. A trained network is what a user brings: by default
(``fit=False``) :func:`sgtune.models.expand` takes the module's current weights as θ̂
(:meth:`TorchModel.trained_weights`; no refit, the expansion reports ‖∇L(θ̂)‖ and warns when it is
larger than its sampling noise, as for a given ``theta_hat``); ``from_torch(..., fit=True)`` (the
command line's ``--fit``) fits the MAP by L-BFGS from those weights (:meth:`TorchModel.initial_params`).

Derivatives come from ``torch.func``: per-sample gradients by ``vmap(grad)`` of a
``functional_call``; per-sample curvature J_n = ∇²l_n by ``hessian`` (dense, ``hessian="exact"``,
small D), by the Gauss–Newton matrix J_fᵀ ∇²ρ J_f (``hessian="gauss-newton"``: rank one,
ρ''(f_n) ∇f_n ∇f_nᵀ, for one output; rank ≤ K for K logits, with ∇²ρ = diag(p) − ppᵀ, p the
softmax) or by Hessian–vector products only (``hessian="hvp"``, forward-over-reverse ``jvp(grad)``:
sgtune assembles dense J_n only where it needs them). Minibatch gradients of many parameter
vectors at once (:meth:`TorchModel.batched_grads`) are ``vmap`` over chains, which the sampler's
general path uses. PyTorch is imported only here, when a model is built.

The model offers its last layer (the protocol's optional part, :mod:`sgtune.models.base`) when the
output layer is identifiable — the module's last ``nn.Linear`` with nothing after it
(:func:`sgtune.models.lastlayer.torch_network_features`) and a body with parameters of its own:
:meth:`TorchModel.features` is that layer's input at θ, :meth:`TorchModel.output_layer` its weights
at θ (where the head starts, named as in the network), and :attr:`TorchModel.last_layer_likelihood`
gaussian, bernoulli or softmax (for categorical); None (no last layer) for poisson or an output layer
that cannot be identified, so no remedy is offered rather than a wrong one.
"""
from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core.errors import DataFormatError, MissingExtraError, SgtuneError, ShapeError
from . import expansion
from .base import DenseCurvature, RankOneCurvature
from .glm import get_model
from .lastlayer import split_torch_network, torch_network_features

__all__ = ["from_torch", "TorchModel", "TORCH_LIKELIHOODS", "TORCH_HESSIANS"]

#: likelihood → the GLM whose loss ρ(f, y) is applied to a scalar output (categorical: K logits)
TORCH_LIKELIHOODS = {"gaussian": "linear", "bernoulli": "logistic", "poisson": "poisson", "categorical": None}
#: likelihood → the likelihood of the output layer on frozen features (None: no last layer)
TORCH_HEADS = {"gaussian": "gaussian", "bernoulli": "bernoulli", "poisson": None, "categorical": "softmax"}
#: per-sample curvature the model declares
TORCH_HESSIANS = ("exact", "gauss-newton", "hvp")


def _torch() -> Any:
    try:
        import torch
        import torch.func  # noqa: F401  (torch ≥ 2.0)
    except ImportError:
        raise MissingExtraError("the PyTorch model adapter needs PyTorch: pip install 'sgtune[torch]'") from None
    with warnings.catch_warnings():  # torch's first forward-mode call scripts its decompositions with the
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)  # deprecated jit
        torch.func.jvp(torch.sin, (torch.zeros(1, dtype=torch.float64),), (torch.ones(1, dtype=torch.float64),))
    return torch


def _element_names(name: str, shape: tuple[int, ...]) -> list[str]:
    """``name[i,j]`` for every element of a parameter of ``shape``, row-major (``name`` for a 0-d one)."""
    if not shape:
        return [name]
    return [f"{name}[{','.join(map(str, idx))}]" for idx in np.ndindex(*shape)]


class TorchModel:
    """Protocol model built by :func:`from_torch` (see the module docstring).

    Parameters
    ----------
    module : torch.nn.Module
        The network (copied, float64, ``eval()`` mode, gradients off).
    likelihood : {"gaussian", "bernoulli", "poisson", "categorical"}
        The loss of the output.
    noise_variance : float
        The variance σ² of the Gaussian likelihood.
    hessian : {"exact", "gauss-newton", "hvp"}
        The per-sample curvature the model declares.
    name : str
        Shown in outputs.
    fit : bool, optional
        False: θ̂ is the module's current weights (:meth:`trained_weights`); True: the MAP is fitted from them.

    Raises
    ------
    MissingExtraError
        PyTorch is not installed (extra ``[torch]``).
    SgtuneError
        The module has no parameters.

    See Also
    --------
    from_torch : The validated constructor.

    Examples
    --------
    >>> import torch
    >>> from sgtune.models import TorchModel, from_torch
    >>> model = from_torch(torch.nn.Linear(2, 1), "gaussian")
    >>> isinstance(model, TorchModel), model.n_params(2)
    (True, 3)
    """

    #: non-convex in general: L-BFGS from the module's weights, then the certified Newton polish of ``fit_map``
    fit_method = "lbfgs"
    convex = False

    def __init__(self, module: Any, likelihood: str, noise_variance: float, hessian: str, name: str,
                 fit: bool = False) -> None:
        torch = _torch()
        self._torch = torch
        self.fit = bool(fit)
        self.likelihood = likelihood
        self.hessian = hessian
        self.name = name
        self.noise_variance = (get_model("linear", noise_variance=noise_variance).noise_variance
                               if likelihood == "gaussian" else 1.0)
        net = copy.deepcopy(module).double().eval()
        for p in net.parameters():
            p.requires_grad_(False)
        self.module = net
        named = list(net.named_parameters())
        if not named:
            raise SgtuneError(f"from_torch: the module {type(module).__name__} has no parameters")
        self.param_names = tuple(n for n, _ in named)
        self.shapes = tuple(tuple(p.shape) for _, p in named)
        self.sizes = tuple(int(np.prod(s, dtype=np.int64)) for s in self.shapes)
        self.offsets = tuple(int(o) for o in np.concatenate([[0], np.cumsum(self.sizes)]))
        self.dim = self.offsets[-1]
        self._theta0 = torch.cat([p.detach().reshape(-1) for _, p in named]).numpy().copy()
        self._buffers = {n: b for n, b in net.named_buffers()}
        self._glm = None if likelihood == "categorical" else get_model(TORCH_LIKELIHOODS[likelihood],
                                                                        noise_variance=self.noise_variance)
        self._build()

    # --- layout ----------------------------------------------------------------
    def n_params(self, n_features: int = 0) -> int:
        """D: the number of entries of the module's parameters (whatever the data's width)."""
        return self.dim

    def parameter_names(self, feature_names: Any = ()) -> list[str]:
        """``fc1.weight[i,j]``, ``fc1.bias[i]``, … in θ order (``named_parameters`` order, each row-major)."""
        out: list[str] = []
        for n, s in zip(self.param_names, self.shapes):
            out += _element_names(n, s)
        return out

    def parameter_blocks(self, n_features: int = 0) -> list[list[int]]:
        """The indices of each submodule's parameters (``fc1.weight`` and ``fc1.bias`` together): default blocks."""
        groups: dict[str, list[int]] = {}
        for n, a, b in zip(self.param_names, self.offsets[:-1], self.offsets[1:]):
            groups.setdefault(n.rpartition(".")[0], []).extend(range(a, b))
        return list(groups.values())

    def flatten(self, module: Any = None) -> np.ndarray:
        """θ (D,) from a module's parameters (default: the weights the model was built from), float64."""
        if module is None:
            return self._theta0.copy()
        named = list(module.named_parameters())
        got = tuple((n, tuple(p.shape)) for n, p in named)
        if got != tuple(zip(self.param_names, self.shapes)):
            raise ShapeError(f"flatten: the module's parameters {[f'{n}{list(s)}' for n, s in got][:4]}… differ from "
                             f"the model's {[f'{n}{list(s)}' for n, s in zip(self.param_names, self.shapes)][:4]}…")
        return np.concatenate([p.detach().double().reshape(-1).cpu().numpy() for _, p in named])

    def unflatten(self, theta: Any) -> dict[str, Any]:
        """``{name: tensor}`` (float64, the parameters' shapes) from θ (D,): e.g. for ``module.load_state_dict(…,
        strict=False)``."""
        th = self._theta(theta)
        return {n: th[a:b].reshape(s).clone() for n, s, a, b in
                zip(self.param_names, self.shapes, self.offsets[:-1], self.offsets[1:])}

    def initial_params(self, n_features: int = 0, rng: Any = None) -> np.ndarray:
        """The module's weights (the fit starts there; ``rng`` is not used)."""
        return self._theta0.copy()

    # --- the last layer ----------------------------------------------------------
    def trained_weights(self) -> np.ndarray | None:
        """θ̂ for :func:`~sgtune.models.expand` without a ``theta_hat``: the module's current weights, or None
        when the model was built with ``fit=True`` (then the MAP is fitted from them)."""
        return None if self.fit else self._theta0.copy()

    def describe(self) -> dict[str, Any]:
        """JSON keys about θ̂: ``theta_hat_source`` says whether it is the module's weights or a fit."""
        return {"theta_hat_source": "fitted: the MAP by L-BFGS from the module's weights (fit=True)" if self.fit
                else "the module's current weights (no fit; fit=True fits the MAP from them)"}

    @property
    def last_layer_likelihood(self) -> str | None:
        """The head's likelihood when the output layer is identifiable (:meth:`features`): gaussian, bernoulli, or
        softmax for categorical; None for poisson or a module whose output is not its last ``nn.Linear``'s."""
        return None if self._output_refusal() else TORCH_HEADS[self.likelihood]

    def _output_refusal(self) -> str:
        """Why the module offers no last layer ("" when it does): the rule of
        :func:`~sgtune.models.lastlayer.split_torch_network`, a body with parameters, a likelihood with a head."""
        if TORCH_HEADS[self.likelihood] is None:
            return (f"a {self.likelihood} network offers no last layer: sgtune's output-layer models are gaussian, "
                    "bernoulli and categorical (softmax)")
        try:
            name, layer = split_torch_network(self.module)
        except SgtuneError as exc:
            return str(exc)
        if sum(p.numel() for p in layer.parameters()) == self.dim:
            return (f"the output layer {name or type(layer).__name__!r} holds every parameter of the module: its "
                    "last layer is the whole model")
        return ""

    def _network_at(self, theta: Any) -> Any:
        """A float64 copy of the module with θ's parameters loaded (θ's layout: :meth:`unflatten`)."""
        net = copy.deepcopy(self.module)
        net.load_state_dict(self.unflatten(np.asarray(theta, dtype=np.float64).reshape(-1)), strict=False)
        return net

    @cites("sgtune", "the output layer's input φ(x; θ) of a torch network (sgtune.models.lastlayer)")
    def features(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """φ(x_n; θ): the input of the module's output layer at parameters θ, shape (n, d).

        The output layer is the module's last ``nn.Linear``, and nothing may follow it
        (:func:`~sgtune.models.lastlayer.torch_network_features`: the one rule sgtune applies).

        Parameters
        ----------
        theta : (D,) array_like
            The module's parameters (θ's layout: :meth:`parameter_names`).
        X : (n, p) array_like
            The rows.

        Returns
        -------
        (n, d) ndarray
            The output layer's input, float64.

        Raises
        ------
        SgtuneError
            If the module offers no last layer (:attr:`last_layer_likelihood` is None): the message says why.
        """
        why = self._output_refusal()
        if not why:
            try:  # the forward pass shows what the modules do not (a custom forward linking the output)
                return torch_network_features(self._network_at(theta), X)[2]
            except SgtuneError as exc:
                why = str(exc)
        raise SgtuneError(f"{self.name}: no last layer: {why}")

    def output_layer(self, theta: np.ndarray) -> tuple[str, np.ndarray, np.ndarray | None]:
        """(name, weight (K, d), bias (K,) or None) of the module's output layer at θ: where the head starts.

        Parameters
        ----------
        theta : (D,) array_like
            The module's parameters.

        Returns
        -------
        (str, (K, d) ndarray, (K,) ndarray or None)
            The layer's name in the module (``"2"`` for the third layer of an ``nn.Sequential``: the head's
            parameters are then named ``2.weight[k,j]``, ``2.bias[k]`` as in :meth:`parameter_names`), its
            weight and bias at θ.

        Raises
        ------
        SgtuneError
            If the module offers no last layer.
        """
        why = self._output_refusal()
        if why:
            raise SgtuneError(f"{self.name}: no last layer: {why}")
        net = self._network_at(theta)
        name, layer = split_torch_network(net)
        bias = None if layer.bias is None else layer.bias.detach().numpy().copy()
        return name or "output", layer.weight.detach().numpy().copy(), bias

    def with_hessian(self, kind: str) -> "TorchModel":
        """The same network and likelihood with another per-sample curvature (``--hessian`` on the CLI)."""
        if kind not in TORCH_HESSIANS:
            raise SgtuneError(f"hessian must be one of {', '.join(TORCH_HESSIANS)}, got {kind!r}")
        return TorchModel(self.module, self.likelihood, self.noise_variance, kind, self.name, self.fit)

    @property
    def rank_one(self) -> bool:
        """True for the Gauss–Newton curvature of a one-output likelihood (J_n = ρ''(f_n)∇f_n∇f_nᵀ)."""
        return self.hessian == "gauss-newton" and self.likelihood != "categorical"

    # --- the functions -----------------------------------------------------------
    def _build(self) -> None:
        torch = self._torch
        tf = torch.func
        names, shapes, offs = self.param_names, self.shapes, self.offsets
        module, buffers = self.module, self._buffers
        categorical = self.likelihood == "categorical"
        lik, s2 = self.likelihood, self.noise_variance

        def params(th: Any) -> dict[str, Any]:
            return {n: th[a:b].reshape(s) for n, s, a, b in zip(names, shapes, offs[:-1], offs[1:])}

        def out(th: Any, X: Any) -> Any:  # f for a batch X (n, p): (n,) or (n, K)
            f = tf.functional_call(module, (params(th), buffers), (X,))
            if categorical:
                if f.ndim != 2 or f.shape[1] < 2:
                    raise ShapeError(f"a categorical likelihood needs K ≥ 2 logits per row: the module maps "
                                     f"{tuple(X.shape)} to {tuple(f.shape)}")
                return f
            if f.ndim == 2 and f.shape[1] == 1:
                f = f[:, 0]
            if f.ndim != 1:
                raise ShapeError(f"a {lik} likelihood needs one output per row: the module maps {tuple(X.shape)} "
                                 f"to {tuple(f.shape)} (end the network with a width-1 layer)")
            return f

        def rho(f: Any, y: Any) -> Any:  # elementwise loss of the outputs (n,) or (n, K)
            if lik == "gaussian":
                return 0.5 * (f - y) ** 2 / s2
            if lik == "bernoulli":
                return torch.logaddexp(f, torch.zeros_like(f)) - y * f
            if lik == "poisson":
                return torch.exp(f) - y * f
            return torch.logsumexp(f, -1) - torch.gather(f, -1, y.long().unsqueeze(-1))[..., 0]

        def loss1(th: Any, x: Any, y: Any) -> Any:  # one row
            return rho(out(th, x.unsqueeze(0)), y.unsqueeze(0))[0]

        def f1(th: Any, x: Any) -> Any:
            return out(th, x.unsqueeze(0))[0]

        def mean_loss(th: Any, X: Any, y: Any) -> Any:
            return rho(out(th, X), y).mean()

        def hvp1(th: Any, x: Any, y: Any, v: Any) -> Any:
            return tf.jvp(lambda t: tf.grad(loss1)(t, x, y), (th,), (v,))[1]

        self._out, self._rho = out, rho
        self._grads = tf.vmap(tf.grad(loss1), in_dims=(None, 0, 0))
        self._hess = tf.vmap(tf.hessian(loss1), in_dims=(None, 0, 0))
        self._hvp = tf.vmap(hvp1, in_dims=(None, 0, 0, None))
        self._jac = tf.vmap(tf.jacrev(f1), in_dims=(None, 0))
        self._batched = tf.vmap(tf.grad(mean_loss), in_dims=(0, 0, 0))

    def _theta(self, theta: Any) -> Any:
        arr = np.ascontiguousarray(theta, dtype=np.float64)
        if arr.shape[-1:] != (self.dim,):
            raise ShapeError(f"theta must have last axis D = {self.dim} (the parameters of {self.name}), "
                             f"got shape {arr.shape}")
        return self._torch.from_numpy(arr)

    def _data(self, X: Any, y: Any) -> tuple[Any, Any]:
        torch = self._torch
        y_arr = np.ascontiguousarray(y, dtype=np.float64)
        if self.likelihood == "categorical":
            self._check_labels(y_arr)
        return torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64)), torch.from_numpy(y_arr)

    def _check_labels(self, y: np.ndarray, source: str = "y") -> None:
        bad = (y < 0) | (y != np.round(y))
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), y.shape)
            raise DataFormatError(f"{source}: a categorical likelihood needs integer class labels 0..K−1 but "
                                  f"y[{', '.join(map(str, i))}] = {y[i]:g}")

    # --- protocol ----------------------------------------------------------------
    def check_response(self, y: np.ndarray, source: str = "y") -> None:
        """Raise :class:`~sgtune.core.errors.DataFormatError` when y is outside the likelihood's domain."""
        if self._glm is not None:
            self._glm.check_response(np.asarray(y, dtype=float), source)
        else:
            self._check_labels(np.asarray(y, dtype=float), source)

    def output(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """f(x_n; θ): (n,) for one output, (n, K) for logits."""
        return self._out(self._theta(theta), self._data(X, np.zeros(len(X)))[0]).numpy()

    def per_sample_losses(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """l_n(θ) = ρ(f(x_n; θ), y_n), shape (n,)."""
        Xt, yt = self._data(X, y)
        return self._rho(self._out(self._theta(theta), Xt), yt).numpy()

    def per_sample_grads(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """g_n = ∇_θ l_n(θ) by ``vmap(grad)``, shape (n, D)."""
        Xt, yt = self._data(X, y)
        return self._grads(self._theta(theta), Xt, yt).numpy()

    def batched_grads(self, thetas: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Minibatch mean gradients (1/B) Σ_b g_b of C parameter vectors at once, shape (C, D) (no prior term).

        thetas (C, D), X (C, B, p), y (C, B): chain c's parameters and minibatch (``vmap`` over chains).
        """
        th = self._theta(thetas)
        Xt, yt = self._data(X, y)
        if th.ndim != 2 or Xt.ndim != 3 or tuple(yt.shape) != tuple(Xt.shape[:2]) or th.shape[0] != Xt.shape[0]:
            raise ShapeError(f"batched_grads needs thetas (C, D), X (C, B, p) and y (C, B); got thetas "
                             f"{tuple(th.shape)}, X {tuple(Xt.shape)}, y {tuple(yt.shape)}")
        return self._batched(th, Xt, yt).numpy()

    @cites("sgtune", "J_n = ∇²ρ(f_n) by torch.func.hessian; Gauss–Newton J_fᵀ∇²ρ J_f (chain rule without ρ'∇²f)")
    def curvature(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> RankOneCurvature | DenseCurvature:
        """The Gauss–Newton J_n: RankOneCurvature(∇f_n, ρ''(f_n)) for one output, dense J_fᵀ(diag p − ppᵀ)J_f for
        logits (only with ``hessian="gauss-newton"``: the other modes give dense Hessians or products)."""
        th = self._theta(theta)
        Xt, yt = self._data(X, y)
        jac = self._jac(th, Xt).numpy()  # (n, D) or (n, K, D)
        if self._glm is not None:
            f = self._out(th, Xt).numpy()
            return RankOneCurvature(jac, self._glm.derivatives(f, np.asarray(y, dtype=float))[2])
        self._budget(len(Xt), "Gauss–Newton (K logits)")
        p = self._torch.softmax(self._out(th, Xt), -1).numpy()
        u = np.einsum("nk,nkd->nd", p, jac)
        hs = np.einsum("nkd,nk,nke->nde", jac, p, jac, optimize=True) - u[:, :, None] * u[:, None, :]
        return DenseCurvature(0.5 * (hs + np.swapaxes(hs, 1, 2)))

    def per_sample_hessians(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The declared J_n as dense (n, D, D) arrays: exact (``torch.func.hessian``), or the Gauss–Newton ones."""
        if self.hessian == "gauss-newton":
            cur = self.curvature(theta, X, y)
            if isinstance(cur, DenseCurvature):
                return cur.hessians
            u, w = cur.features, cur.weights
            return w[:, None, None] * u[:, :, None] * u[:, None, :]
        self._budget(len(X), "exact")
        Xt, yt = self._data(X, y)
        hs = self._hess(self._theta(theta), Xt, yt).numpy()
        return 0.5 * (hs + np.swapaxes(hs, 1, 2))

    def hessian_vector_products(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The exact J_n v = ∇²l_n(θ) v for every row by forward-over-reverse ``jvp(grad)``, shape (n, D)."""
        Xt, yt = self._data(X, y)
        return self._hvp(self._theta(theta), Xt, yt, self._theta(v)).numpy()

    def _budget(self, n: int, what: str) -> None:
        d, budget = self.dim, expansion.DENSE_HESSIAN_BUDGET
        if n * d * d > budget:
            raise SgtuneError(f"{what} per-sample Hessians of {self.name} need N·D² = {n}·{d}² = {n * d * d:.3g} "
                              f"numbers (more than {budget:.0e}); use from_torch(..., hessian='gauss-newton') "
                              "(rank one for one output) or hessian='hvp'")

    def __getattribute__(self, attr: str) -> Any:
        # curvature() is the Gauss–Newton structure only; with hessian="hvp" the dense Hessians are hidden too,
        # so sgtune uses the Hessian–vector products
        mode = object.__getattribute__(self, "__dict__").get("hessian")
        if (attr == "curvature" and mode != "gauss-newton") or (attr == "per_sample_hessians" and mode == "hvp"):
            raise AttributeError(attr)
        return object.__getattribute__(self, attr)

    def __repr__(self) -> str:
        return (f"TorchModel({self.name!r}, likelihood={self.likelihood!r}, hessian={self.hessian!r}, "
                f"D={self.dim})")


def from_torch(module: Any, likelihood: str = "gaussian", *, noise_variance: float = 1.0, hessian: str = "exact",
               name: str = "torch-model", fit: bool = False) -> TorchModel:
    """A protocol model from a PyTorch ``nn.Module`` and a likelihood for its output.

    Parameters
    ----------
    module : torch.nn.Module
        Maps a batch X (n, p) to f (n,) or (n, 1) (one output), or (n, K) (categorical logits).
        Copied and converted to float64 in ``eval()`` mode; the module given is left as it is.
    likelihood : {"gaussian", "bernoulli", "poisson", "categorical"}
        The loss ρ(f, y) of the output (module docstring).
    noise_variance : float
        The variance σ² of the Gaussian likelihood.
    hessian : {"exact", "gauss-newton", "hvp"}
        Per-sample curvature: dense exact Hessians (small D), the Gauss–Newton matrices (rank one
        for one output), or exact Hessian–vector products only.
    name : str
        Shown in outputs.
    fit : bool, optional
        False (default): θ̂ is the module's current weights (a trained network; :func:`~sgtune.models.expand`
        expands there and reports ‖∇L(θ̂)‖). True: fit the MAP by L-BFGS from them (the whole network, which
        can take minutes and need not converge without a prior).

    Returns
    -------
    TorchModel
        The model; θ is the concatenation of the module's parameters (module docstring).

    Raises
    ------
    MissingExtraError
        PyTorch is not installed (extra ``[torch]``).
    SgtuneError
        An unknown likelihood or curvature, a non-positive σ², or a module without parameters.

    Examples
    --------
    >>> import torch
    >>> from sgtune.models import from_torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    >>> model = from_torch(net, "bernoulli", hessian="gauss-newton")
    >>> model.per_sample_grads(np.zeros(13), np.ones((4, 2)), np.array([0.0, 1.0, 1.0, 0.0])).shape
    (4, 13)
    """
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise SgtuneError(f"from_torch needs a torch.nn.Module, got {type(module).__name__}")
    if likelihood not in TORCH_LIKELIHOODS:
        raise SgtuneError(f"likelihood must be one of {', '.join(TORCH_LIKELIHOODS)}, got {likelihood!r}")
    if hessian not in TORCH_HESSIANS:
        raise SgtuneError(f"hessian must be one of {', '.join(TORCH_HESSIANS)}, got {hessian!r}")
    if not isinstance(name, str) or not name:
        raise SgtuneError(f"name must be a non-empty string, got {name!r}")
    if not isinstance(fit, bool):
        raise SgtuneError(f"fit must be True (fit the MAP) or False (the module's weights are θ̂), got {fit!r}")
    return TorchModel(module, likelihood, noise_variance, hessian, name, fit)
