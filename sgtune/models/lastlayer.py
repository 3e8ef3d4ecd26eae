"""The last layer of a trained network: the output layer on frozen features, a GLM sgtune's theory is exact for.

Given a network the user trained, f(x) = W φ(x) + b with body φ and head (W, b), freeze the body
and keep only the head's parameters free. The per-observation loss is then a generalised linear
model in θ = (W, b) with covariates (φ(x_n), 1):

- ``"gaussian"`` (regression, one output): l_n = (y_n − f_n)²/(2σ²), the linear model on the features;
- ``"bernoulli"`` (binary, one output logit): l_n = log(1 + e^{f_n}) − y_n f_n, logistic regression;
- ``"softmax"`` (K classes, K logits): l_n = logsumexp(f_n) − f_{n,y_n}, multinomial logistic
  regression in the *full* softmax layout (one coefficient vector per class, identified only
  through the prior precision; :mod:`sgtune.models.multinomial`).

SGD or SGLD on the head alone, with the body frozen at its trained weights and the features
computed once, is exactly the chain sgtune's theory describes for that GLM: every sgtune function
takes the ``(model, data)`` pair :func:`last_layer` returns (``expand``, ``tune``,
``predict_stationary_cov``, ``run_chains``, ``verify_stationary_cov``, ``plan_run``,
``applicability``). A minibatch is a batch of rows of the feature matrix. The posterior target
H⁻¹/N = (Σ_n J_n + Γ)⁻¹ is the last-layer Laplace covariance with the full generalised Gauss–Newton
Hessian (Daxberger et al. 2021, laplace-torch's ``subset_of_weights="last_layer"``,
``hessian_structure="full"``, temperature 1, prior precision Γ = δI; for regression its
``sigma_noise`` is σ).

**θ's layout** (the rows of Λ). The head has K outputs (K = 1 for gaussian and bernoulli), d
features, and a bias unless the layer has none. θ is class-major with the bias last in each class's
block::

    θ[k·(d+1) + j] = weight[k, j],     θ[k·(d+1) + d] = bias[k]

(d+1 → d without a bias). For one output this is torch's own order (weight row, then bias); for
K classes torch's ``parameters_to_vector`` puts every bias after every weight:
:meth:`HeadLayout.torch_order` maps one to the other. The names are the head's own:
``output.weight[k,j]`` and ``output.bias[k]`` with ``output`` the head's name in the network (``2``
for the third layer of an ``nn.Sequential``), so :func:`sgtune.io.export.torch_optimizer` and
:func:`~sgtune.io.export.optax_transform` with ``subset=True`` apply Λ to the head of the whole
network and leave the body alone.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core._refs import cites
from ..core.errors import DataFormatError, SgtuneError, ShapeError
from ..io.data import Dataset, make_dataset
from .base import model_dim, model_label
from .glm import get_model
from .mlp import MLP

__all__ = ["last_layer", "mlp_last_layer", "model_last_layer", "declared_head", "LastLayerModel", "HeadLayout",
           "LAST_LAYER_LIKELIHOODS", "compute_features", "torch_network_features"]

#: likelihood → the model of the head (softmax: the full-layout multinomial model); "categorical" (the name
#: :func:`sgtune.models.pytorch.from_torch` uses) is accepted for "softmax"
LAST_LAYER_LIKELIHOODS = ("gaussian", "bernoulli", "softmax")
_GLM_OF = {"gaussian": "linear", "bernoulli": "logistic"}
#: rows of X per forward pass of the body (features are computed once, chunk by chunk)
FEATURE_CHUNK_ROWS = 4096


@dataclass(frozen=True)
class HeadLayout:
    """The output layer's shape and names: K outputs, d features, a bias or not (module docstring).

    Parameters
    ----------
    name : str
        The head's name, the prefix of the parameter names (``""``: none).
    n_outputs : int
        The number of outputs K.
    n_features : int
        The number of features d.
    bias : bool
        Whether the head has a bias.

    Examples
    --------
    >>> lay = HeadLayout("out", 2, 3, True)
    >>> lay.dim, lay.names()[3]
    (8, 'out.bias[0]')
    >>> lay.theta_of(np.ones((2, 3)), [0.5, -0.5])   # class-major, the bias last in each block
    array([ 1. ,  1. ,  1. ,  0.5,  1. ,  1. ,  1. , -0.5])
    """

    name: str
    n_outputs: int
    n_features: int
    bias: bool

    @property
    def width(self) -> int:
        """Covariates per row of the last-layer data: d, plus 1 for the bias column."""
        return self.n_features + int(self.bias)

    @property
    def dim(self) -> int:
        """D = K·(d + bias)."""
        return self.n_outputs * self.width

    def names(self) -> tuple[str, ...]:
        """``name.weight[k,j]`` and ``name.bias[k]`` in θ order."""
        pre = f"{self.name}." if self.name else ""
        out: list[str] = []
        for k in range(self.n_outputs):
            out += [f"{pre}weight[{k},{j}]" for j in range(self.n_features)]
            if self.bias:
                out.append(f"{pre}bias[{k}]")
        return tuple(out)

    def theta_of(self, weight: Any, bias: Any = None) -> np.ndarray:
        """θ (D,) from the head's weight (K, d) (or (d,) for one output) and bias (K,) (or a number)."""
        w = np.asarray(weight, dtype=float).reshape(self.n_outputs, self.n_features) \
            if np.size(weight) == self.n_outputs * self.n_features else None
        if w is None:
            raise ShapeError(f"the head's weight must have {self.n_outputs}×{self.n_features} entries, got shape "
                             f"{np.shape(weight)}")
        if not self.bias:
            if bias is not None:
                raise ShapeError("this head has no bias, but a bias was given")
            return w.reshape(-1).copy()
        b = np.zeros(self.n_outputs) if bias is None else np.asarray(bias, dtype=float).reshape(-1)
        if b.shape != (self.n_outputs,):
            raise ShapeError(f"the head's bias must have {self.n_outputs} entries, got shape {np.shape(bias)}")
        return np.column_stack([w, b]).reshape(-1)

    def head_of(self, theta: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """(weight (K, d), bias (K,) or None) from θ (D,) — the inverse of :meth:`theta_of`."""
        th = np.asarray(theta, dtype=float).reshape(-1)
        if th.shape != (self.dim,):
            raise ShapeError(f"theta must have D = {self.dim} entries (the head's), got shape {np.shape(theta)}")
        blocks = th.reshape(self.n_outputs, self.width)
        return blocks[:, :self.n_features].copy(), (blocks[:, -1].copy() if self.bias else None)

    def torch_order(self) -> np.ndarray:
        """Indices ``perm`` with ``theta[perm]`` = torch's ``parameters_to_vector(head.parameters())``
        (every weight row-major, then every bias)."""
        idx = np.arange(self.dim).reshape(self.n_outputs, self.width)
        parts = [idx[:, :self.n_features].reshape(-1)]
        if self.bias:
            parts.append(idx[:, -1])
        return np.concatenate(parts)


class LastLayerModel:
    """The head of a trained network as a protocol model (:mod:`sgtune.models.base`), built by :func:`last_layer`.

    Every protocol method is the inner GLM's (``linear`` / ``logistic``) or the full-layout
    multinomial model's, on the data :func:`last_layer` returns (features with the bias column
    last). Added: the head's parameter names, the trained head as the Newton fit's starting point
    (:meth:`newton_start`, :meth:`initial_params`), and the conversions of ``layout``
    (:meth:`HeadLayout.theta_of`, :meth:`HeadLayout.head_of`, :meth:`HeadLayout.torch_order`).

    Parameters
    ----------
    inner : model
        The inner GLM (``linear`` / ``logistic``) or full-layout multinomial model.
    layout : HeadLayout
        The head's shape.
    likelihood : str
        ``"gaussian"``, ``"bernoulli"`` or ``"softmax"``.
    trained : (D,) ndarray or None
        The trained head in θ's layout, if any.
    source : str
        Where the features came from (messages and JSON).

    Attributes
    ----------
    body_weights : (D_network,) ndarray or None
        The whole network's parameters θ at which the features φ(x; θ) were computed, when they came from a
        model (:func:`model_last_layer`); None for features from a file, a function or a torch network.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 3))
    >>> model, data = last_layer(np.tanh, X, X @ [1.0, -0.5, 0.2], noise_variance=0.01)
    >>> model
    LastLayerModel('gaussian', head='output', K=1, d=3, bias=True, D=4)
    >>> model.parameter_names()[-1]
    'output.bias[0]'
    """

    def __init__(self, inner: Any, layout: HeadLayout, likelihood: str, trained: np.ndarray | None,
                 source: str) -> None:
        self.inner = inner
        self.layout = layout
        self.likelihood = likelihood
        self.trained = None if trained is None else np.asarray(trained, dtype=float).copy()
        self.features_source = source
        self.name = f"last-layer ({likelihood})"
        self.body_weights: np.ndarray | None = None

    def __getattr__(self, attr: str) -> Any:
        inner = self.__dict__.get("inner")
        if inner is None or attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(inner, attr)

    def n_params(self, n_features: int = 0) -> int:
        """D = K·(d + bias), whatever the width passed (the data :func:`last_layer` returns have d + bias columns)."""
        return self.layout.dim

    def parameter_names(self, feature_names: Any = ()) -> tuple[str, ...]:
        """``output.weight[k,j]``, ``output.bias[k]`` in θ order (:meth:`HeadLayout.names`)."""
        return self.layout.names()

    def parameter_blocks(self, n_features: int = 0) -> list[list[int]]:
        """One block per output (a class's weights and bias): the default blocks of ``tune(family="block")``."""
        w = self.layout.width
        return [list(range(k * w, (k + 1) * w)) for k in range(self.layout.n_outputs)]

    def newton_start(self, X: np.ndarray, y: np.ndarray, prior_precision: np.ndarray) -> np.ndarray:
        """The trained head (θ layout) when there is one, else the inner model's start."""
        if self.trained is not None:
            return self.trained.copy()
        fn = getattr(self.inner, "newton_start", None)
        return fn(X, y, prior_precision) if callable(fn) else np.zeros(self.layout.dim)

    def initial_params(self, n_features: int = 0, rng: Any = None) -> np.ndarray:
        """The trained head, else zeros."""
        return self.trained.copy() if self.trained is not None else np.zeros(self.layout.dim)

    @property
    def sandwich_refusal(self) -> str | None:
        """Softmax: why the full layout has no sandwich target (J singular along the shift); None otherwise."""
        if self.likelihood != "softmax":
            return None
        return ("a softmax last layer has no sandwich target: J = mean J_n is singular along the softmax's shift "
                "(adding one vector to every class's weights and biases changes no probability), so J⁻¹𝓘J⁻¹/N does "
                "not exist; use the posterior target (`target='posterior'`)")

    def check_response(self, y: np.ndarray, source: str = "y") -> None:
        """Softmax: y holds class indices 0 … K−1 of the head's K logits (a class without rows is fine: the prior
        identifies its weights); otherwise the inner GLM's check (0/1 for bernoulli)."""
        if self.likelihood != "softmax":
            self.inner.check_response(y, source)
            return
        ya = np.asarray(y, dtype=float).reshape(-1)
        k = self.layout.n_outputs
        bad = ~np.isfinite(ya) | (ya != np.round(ya)) | (ya < 0) | (ya > k - 1)
        if bad.any():
            i = int(np.argmax(bad))
            raise DataFormatError(f"{source}: a softmax last layer with K = {k} logits needs class indices 0 … {k - 1}, "
                                  f"but y[{i}] = {ya[i]:g}; recode the labels as the network's class indices")

    def check_identifiable(self, X: np.ndarray, y: np.ndarray, prior_precision: np.ndarray, source: str) -> None:
        """Softmax: refuse a prior that leaves the shift direction free (the loss is flat along it); else the inner
        model's checks (rank-deficient features, separable classes without a prior)."""
        if self.likelihood == "softmax":
            k, w = self.layout.n_outputs, self.layout.width
            shift = np.kron(np.ones((k, 1)), np.eye(w)) / np.sqrt(k)
            if np.linalg.eigvalsh(shift.T @ np.asarray(prior_precision, dtype=float) @ shift)[0] <= 0:
                raise DataFormatError(
                    "a softmax last layer needs a `prior_precision` > 0: adding "
                    "one vector to every class's weights and biases changes no probability, so only the prior "
                    "identifies θ; laplace-torch's default is 1")
            return
        fn = getattr(self.inner, "check_identifiable", None)
        if callable(fn):
            fn(X, y, prior_precision, source)

    def describe(self) -> dict[str, Any]:
        """JSON keys: ``last_layer`` (likelihood, head name, K, d, bias, where the features came from) and the
        inner model's own description (the multinomial model's classes and layout)."""
        out: dict[str, Any] = {}
        fn = getattr(self.inner, "describe", None)
        if callable(fn):
            out.update(fn())
        out["last_layer"] = {"likelihood": self.likelihood, "head": self.layout.name,
                             "n_outputs": self.layout.n_outputs, "n_features": self.layout.n_features,
                             "bias": self.layout.bias, "features": self.features_source,
                             "trained_head": self.trained is not None}
        return out

    def __repr__(self) -> str:
        lay = self.layout
        return (f"LastLayerModel({self.likelihood!r}, head={lay.name!r}, K={lay.n_outputs}, d={lay.n_features}, "
                f"bias={lay.bias}, D={lay.dim})")


# ----------------------------------------------------------------------------- features
def _is_torch_module(obj: Any) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(obj, torch.nn.Module)


def split_torch_network(network: Any, head: Any = None) -> tuple[str, Any]:
    """(qualified name, module) of the output layer of a torch ``network``: ``head`` when given (a submodule), else
    the last ``nn.Linear`` among its modules, which an ``nn.Sequential`` on the way to it must end with (the
    forward hook of :func:`torch_network_features` checks the rest)."""
    import torch

    identity = (torch.nn.Identity, torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d,  # in eval() mode
                torch.nn.Dropout3d, torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout)

    mods = list(network.named_modules())
    linears = [(n, m) for n, m in mods if isinstance(m, torch.nn.Linear)]
    if isinstance(head, str):  # the output layer by its qualified name (--head NAME)
        found = dict(linears).get(head)
        if found is None:
            raise SgtuneError(f"`head={head!r}`: the network {type(network).__name__} has no nn.Linear of that name; "
                              f"its nn.Linear modules are {_listing(linears)}")
        return head, found
    if head is not None:
        for n, m in mods:
            if m is head:
                return n, m
        raise SgtuneError(f"head: the module {type(head).__name__} is not a submodule of the network; give the layer "
                          "of the network itself (e.g. head=net.output), or body= and head= without the network")
    if not linears:
        raise SgtuneError(f"the network {type(network).__name__} has no nn.Linear layer to take as its output layer; "
                          "give body= (the features) and head= (an nn.Linear, or (weight, bias) arrays)")
    name, layer = linears[-1]
    parent = network
    for part in name.split(".") if name else []:  # an nn.Sequential on the way must end with the layer
        names = [n for n, _ in parent.named_children()]
        after = [parent.get_submodule(n) for n in names[names.index(part) + 1:]]
        tail = [m for m in after if not isinstance(m, identity)] if isinstance(parent, torch.nn.Sequential) else []
        if tail:
            raise SgtuneError(f"the network's output is not the output of its last nn.Linear {name!r}: something "
                              f"follows it ({type(tail[0]).__name__}); the likelihood applies the link itself: end "
                              "the network with that layer (its output the logits or the mean) or, in Python, give "
                              "last_layer(body=..., head=...)")
        parent = parent.get_submodule(part)
    return name, layer


def _listing(linears: list[tuple[str, Any]]) -> str:
    """The names of a network's nn.Linear modules, for messages (``'0', '2'``)."""
    return ", ".join(repr(n) for n, _ in linears) or "none"


def _output_linear(network: Any, X: np.ndarray) -> str | None:
    """The qualified name of the one ``nn.Linear`` of ``network`` whose output is the network's output on the
    rows X (a forward hook on each), or None when no layer or more than one is (the output layer is then
    the last registered one, or the one named by ``head``)."""
    import torch

    net = copy.deepcopy(network).double().eval()
    outs: dict[str, Any] = {}
    handles = [m.register_forward_hook(lambda _m, _a, r, n=n: outs.__setitem__(n, r))
               for n, m in net.named_modules() if isinstance(m, torch.nn.Linear)]
    try:
        with torch.no_grad():
            f = net(torch.from_numpy(X))
    except Exception:  # the forward pass itself fails: the features pass says how
        return None
    finally:
        for h in handles:
            h.remove()
    same = [n for n, r in outs.items() if isinstance(f, torch.Tensor) and isinstance(r, torch.Tensor)
            and r.numel() == f.numel() and torch.equal(r.reshape(-1), f.reshape(-1))]
    return same[0] if len(same) == 1 else None


def torch_network_features(network: Any, X: Any, *,
                           chunk_rows: int = FEATURE_CHUNK_ROWS) -> tuple[str, Any, np.ndarray]:
    """The output layer of a torch network and its input on rows X: the one rule sgtune applies to find it.

    The output layer is the network's last ``nn.Linear``, and nothing may follow it: an
    ``nn.Sequential`` on the way to it must end with it (dropout and ``nn.Identity`` aside, the
    identity in ``eval()`` mode), and the network's output must be that layer's output (checked on
    every forward pass by a hook, so a custom ``forward`` applying a link after it is refused too).

    Parameters
    ----------
    network : torch.nn.Module
        The network (copied, float64, ``eval()`` mode; the one given is left as it is).
    X : array_like
        The rows (N, p).
    chunk_rows : int, optional
        Rows per forward pass.

    Returns
    -------
    (str, torch.nn.Linear, (N, d) ndarray)
        The layer's qualified name in the network (``"2"`` for the third layer of an
        ``nn.Sequential``), the layer (of ``network``), and its input φ(X) in float64.

    Raises
    ------
    SgtuneError
        If the network has no ``nn.Linear``, something follows it, or the network never calls it.

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    >>> name, layer, phi = torch_network_features(net, np.zeros((5, 2)))
    >>> name, phi.shape
    ('2', (5, 3))
    """
    name, layer = split_torch_network(network)
    Xa = np.ascontiguousarray(X, dtype=np.float64)
    return name, layer, _torch_features(network, layer, None, Xa[:, None] if Xa.ndim == 1 else Xa, chunk_rows)


def _torch_features(network: Any, head: Any, body: Any, X: np.ndarray, chunk: int) -> np.ndarray:
    """φ(X) (N, d) in float64: ``body(X)`` when given, else the input of ``head`` inside ``network`` (a forward hook),
    checking that the network's output is the head's output (nothing follows the head)."""
    import torch

    out = []
    with torch.no_grad():
        if body is not None:
            net = copy.deepcopy(body).double().eval()
            for a in range(0, X.shape[0], chunk):
                out.append(net(torch.from_numpy(X[a:a + chunk])).reshape(min(chunk, X.shape[0] - a), -1).numpy())
            return np.concatenate(out)
        net = copy.deepcopy(network).double().eval()
        name = dict((m, n) for n, m in network.named_modules())[head]
        inner_head = dict(net.named_modules())[name]
        seen: dict[str, Any] = {}

        def hook(_m: Any, args: Any, result: Any) -> None:
            seen["in"], seen["out"] = args[0], result

        handle = inner_head.register_forward_hook(hook)
        try:
            for a in range(0, X.shape[0], chunk):
                seen.clear()
                f = net(torch.from_numpy(X[a:a + chunk]))
                if "in" not in seen:
                    raise SgtuneError(f"the network never called its layer {name!r} (the output layer sgtune took); "
                                      "give head= (the output layer) or body= and head=")
                bad = ~torch.isfinite(seen["in"].reshape(seen["in"].shape[0] if seen["in"].ndim else 1, -1)).all(1)
                if bool(bad.any()):
                    row = a + int(torch.nonzero(bad)[0, 0])
                    raise SgtuneError(f"the network's features (the input of its output layer {name!r}) are not "
                                      f"finite on row {row} of the data ({int(bad.sum())} of these {len(bad)} rows): "
                                      "the body gives NaN or infinity there (a log or sqrt of a negative number, an "
                                      "overflow); fix the network or the rows")
                if not isinstance(f, torch.Tensor) or f.numel() != seen["out"].numel() or \
                        not torch.equal(f.reshape(-1), seen["out"].reshape(-1)):
                    raise SgtuneError(f"the network's output is not the output of its layer {name!r}: something "
                                      "follows it (an activation such as Softmax or Sigmoid, a scaling); the likelihood "
                                      "applies the link itself: end the network with that layer (its output the "
                                      "logits or the mean), or name the output layer with `head='NAME'` ("
                                      "the network's nn.Linear modules: "
                                      f"{_listing([(n, m) for n, m in net.named_modules() if isinstance(m, torch.nn.Linear)])})"
                                      ", or in Python give last_layer(body=..., head=...)")
                out.append(seen["in"].reshape(f.shape[0] if f.ndim else 1, -1).numpy())
        finally:
            handle.remove()
    return np.concatenate(out)


def compute_features(features: Callable[[np.ndarray], Any], X: Any, *, chunk_rows: int = FEATURE_CHUNK_ROWS,
                     source: str = "features") -> np.ndarray:
    """Compute the features φ(X) (N, d) in float64 from a NumPy or JAX function, ``chunk_rows`` rows at a time.

    The function gets float64 rows (a JAX function computes in its own precision, float32 unless
    ``jax_enable_x64``); its output is checked: (n, d) or (n,) finite numbers for n rows.

    Parameters
    ----------
    features : callable
        ``features(rows) -> (n, d) or (n,)``.
    X : array_like
        The rows (N, p).
    chunk_rows : int, optional
        Rows per call.
    source : str, optional
        The function's name in messages.

    Returns
    -------
    (N, d) ndarray
        The features φ(X).

    Raises
    ------
    SgtuneError
        If the function raises.
    ShapeError
        If its output is not (n, d) or (n,) for n rows.

    Examples
    --------
    >>> compute_features(np.tanh, [[0.0, 1.0]])
    array([[0.    , 0.7616]])
    """
    Xa = np.ascontiguousarray(X, dtype=np.float64)
    out = []
    for a in range(0, Xa.shape[0], chunk_rows):
        rows = Xa[a:a + chunk_rows]
        try:
            f = np.asarray(features(rows), dtype=np.float64)
        except SgtuneError:
            raise
        except Exception as exc:
            raise SgtuneError(f"{source}: computing the features of rows {a}–{a + len(rows) - 1} raised "
                              f"{type(exc).__name__}: {exc}") from None
        if f.ndim == 1:
            f = f[:, None]
        if f.ndim != 2 or f.shape[0] != rows.shape[0]:
            raise ShapeError(f"{source}: the features of {rows.shape[0]} rows must be an array ({rows.shape[0]}, d), "
                             f"got shape {f.shape}")
        out.append(f)
    return np.concatenate(out)


# ----------------------------------------------------------------------------- the model
def _likelihood(likelihood: str) -> str:
    lik = "softmax" if likelihood == "categorical" else likelihood
    if lik not in LAST_LAYER_LIKELIHOODS:
        raise SgtuneError(f"likelihood must be one of {', '.join(LAST_LAYER_LIKELIHOODS)}, got {likelihood!r}")
    return lik


def _inner_model(lik: str, n_outputs: int, noise_variance: float) -> Any:
    """The GLM of a one-output head, or the full-layout multinomial model of K classes."""
    if lik in _GLM_OF:
        if n_outputs != 1:
            hint = " (K logits: likelihood='softmax')" if lik == "bernoulli" else " (one output per row)"
            raise ShapeError(f"a {lik} last layer needs a head with one output, got {n_outputs}{hint}")
        return get_model(_GLM_OF[lik], noise_variance=noise_variance)
    if n_outputs < 2:
        raise ShapeError(f"a softmax last layer needs a head with K ≥ 2 outputs (one logit per class), got {n_outputs}"
                         "; for one logit use likelihood='bernoulli'")
    return get_model("multinomial", labels=n_outputs, layout="full")


def _numpy_head(head: Any, d: int, lik: str, y: np.ndarray, n_classes: int | None, bias: bool) -> tuple[int, bool]:
    """(K, whether the head has a bias) of a head given as arrays (weight, bias), or of none (fitted from the start)."""
    if head is None:
        if lik != "softmax":
            return 1, bool(bias)
        return (int(n_classes) if n_classes is not None else int(np.max(y)) + 1 if y.size else 0), bool(bias)
    if not (isinstance(head, (tuple, list)) and len(head) == 2):
        raise SgtuneError("head must be a torch nn.Linear or a pair (weight, bias) of arrays (bias may be None)")
    w = np.asarray(head[0], dtype=float)
    w = w.reshape(1, -1) if w.ndim == 1 else w
    if w.ndim != 2 or w.shape[1] != d:
        raise ShapeError(f"head: the weight must be (K, d) with d = {d} features, got shape {np.shape(head[0])}")
    return w.shape[0], head[1] is not None


@cites("sgtune", "output layer on frozen features = GLM; posterior H⁻¹/N = last-layer GGN Laplace (Daxberger et "
                 "al. 2021)")
def last_layer(network: Any = None, X: Any = None, y: Any = None, *, likelihood: str = "gaussian",
               noise_variance: float = 1.0, body: Any = None, head: Any = None, bias: bool = True,
               n_classes: int | None = None, head_name: str | None = None,
               chunk_rows: int = FEATURE_CHUNK_ROWS, source: str = "") -> tuple[LastLayerModel, Dataset]:
    """The output layer of a trained network as a (model, data) pair every sgtune function takes.

    Parameters
    ----------
    network : torch.nn.Module or callable, optional
        A trained PyTorch network (its output layer is the ``nn.Linear`` that gives its output, or ``head``; the
        features are that layer's input, captured by a forward hook, and nothing may follow it), or
        a NumPy / JAX function ``features(X) -> (n, d)`` (the body; give ``head`` as arrays to start
        from trained weights). Omit it when ``body`` is given.
    X, y : array_like
        The rows the network was trained on (N, p) and their responses (N,): reals (gaussian),
        0/1 (bernoulli), class indices 0 … K−1 (softmax).
    likelihood : {"gaussian", "bernoulli", "softmax"}
        The loss of the head's output (module docstring).
    noise_variance : float
        The noise variance σ² of the gaussian likelihood (laplace-torch's ``sigma_noise`` is σ).
    body : torch.nn.Module or callable, optional
        The features explicitly (everything before the head), with ``head``.
    head : torch.nn.Linear, str or (weight, bias), optional
        The output layer: a submodule of ``network`` or its qualified name (``"out"``, ``"2"``; an
        ``nn.Linear``), any ``nn.Linear`` with ``body``, or arrays weight (K, d) / (d,) and bias (K,)
        or None. Its weights start the Newton fit of θ̂. Default for a torch network: the ``nn.Linear``
        whose output is the network's output (on the first rows), else its last ``nn.Linear``.
    bias : bool
        Without a given head: whether the fitted head has a bias (a column of ones).
    n_classes : int, optional
        Softmax without a given head: K (default max(y) + 1).
    head_name : str, optional
        The prefix of the parameter names (default: the head's name in ``network``, else ``output``).
    chunk_rows : int
        Rows per forward pass when computing the features (once, in float64).
    source : str
        Where the network came from (messages and JSON).

    Returns
    -------
    (LastLayerModel, Dataset)
        The model of the head and the data (features with the bias column last, y); θ̂ is fitted by
        ``expand(model, data, prior_precision)`` from the trained head (softmax needs a prior precision).

    Raises
    ------
    SgtuneError
        If the data, the network or the head cannot be used (the message says how to fix it).
    DataFormatError
        If X and y have different numbers of rows.

    Examples
    --------
    >>> from sgtune.models import expand
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 3))
    >>> y = X @ [1.0, -0.5, 0.2] + 0.1 * rng.standard_normal(200)
    >>> model, data = last_layer(np.tanh, X, y, noise_variance=0.01)   # features tanh(X), a fitted head
    >>> data.X.shape, expand(model, data, 1.0).theta_hat.shape
    ((200, 4), (4,))
    """
    lik = _likelihood(likelihood)
    if X is None or y is None:
        raise SgtuneError("last_layer needs the data X and y the network was trained on")
    Xa = np.ascontiguousarray(X, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64).reshape(-1)
    if Xa.ndim == 1:
        Xa = Xa[:, None]
    if Xa.shape[0] != ya.shape[0]:
        raise DataFormatError(f"X has {Xa.shape[0]} rows but y has {ya.shape[0]}; they must match")
    src = source or (type(network).__name__ if network is not None else type(body).__name__)
    if (network is None) == (body is None):
        raise SgtuneError("give the trained network, or body= (the features) and head=, not both")
    torch_head = head is not None and _is_torch_module(head)
    if isinstance(head, str) and not _is_torch_module(network):
        raise SgtuneError(f"head {head!r} names a module of a torch network; without one give head= as arrays")
    if _is_torch_module(network) or _is_torch_module(body):
        if network is not None:
            if head is None and Xa.shape[0]:  # the layer whose output is the network's, wherever it is registered
                head = _output_linear(network, Xa[:min(chunk_rows, Xa.shape[0])])
            name, head_mod = split_torch_network(network, head)
            phi = _torch_features(network, head_mod, None, Xa, chunk_rows)
        else:
            if not torch_head:
                raise SgtuneError("with a torch body=, give head= (its nn.Linear output layer)")
            name, head_mod = "output", head
            phi = _torch_features(None, head_mod, body, Xa, chunk_rows)
        return _from_torch_head(phi, ya, head_mod, head_name or name or "output", lik, noise_variance, src)
    if network is not None and not callable(network):
        raise SgtuneError(f"network must be a torch.nn.Module or a function features(X), got {type(network).__name__}")
    if body is not None and not callable(body):
        raise SgtuneError(f"body must be a torch.nn.Module or a function features(X), got {type(body).__name__}")
    phi = compute_features(network if network is not None else body, Xa, chunk_rows=chunk_rows, source=src)
    if torch_head:
        return _from_torch_head(phi, ya, head, head_name or "output", lik, noise_variance, src)
    k, has_bias = _numpy_head(head, phi.shape[1], lik, ya, n_classes, bias)
    layout = HeadLayout(head_name if head_name is not None else "output", k, phi.shape[1], has_bias)
    trained = None if head is None else layout.theta_of(head[0], head[1])
    return _assemble(phi, ya, layout, lik, noise_variance, trained, src)


def _from_torch_head(phi: np.ndarray, y: np.ndarray, head: Any, name: str, lik: str, noise_variance: float,
                     src: str) -> tuple[LastLayerModel, Dataset]:
    import torch

    if not isinstance(head, torch.nn.Linear):
        raise SgtuneError(f"the output layer must be an nn.Linear, got {type(head).__name__}")
    w = head.weight.detach().double().cpu().numpy()
    if w.shape[1] != phi.shape[1]:
        raise ShapeError(f"the head {name!r} takes {w.shape[1]} features but the body gives {phi.shape[1]}")
    b = None if head.bias is None else head.bias.detach().double().cpu().numpy()
    layout = HeadLayout(name, w.shape[0], w.shape[1], b is not None)
    return _assemble(phi, y, layout, lik, noise_variance, layout.theta_of(w, b), src)


def _assemble(phi: np.ndarray, y: np.ndarray, layout: HeadLayout, lik: str, noise_variance: float,
              trained: np.ndarray | None, src: str) -> tuple[LastLayerModel, Dataset]:
    inner = _inner_model(lik, layout.n_outputs, noise_variance)
    cols = [phi, np.ones((phi.shape[0], 1))] if layout.bias else [phi]
    names = tuple(f"phi[{j}]" for j in range(layout.n_features)) + (("bias",) if layout.bias else ())
    data = make_dataset(np.column_stack(cols), y, names=names, source=f"features of {src}")
    model = LastLayerModel(inner, layout, lik, trained, src)
    model.check_response(data.y, "y")
    return model, data


def mlp_last_layer(mlp: Any, theta: Any, X: Any, y: Any) -> tuple[LastLayerModel, Dataset]:
    """The output layer of sgtune's own network (:class:`~sgtune.models.mlp.MLP`) at weights θ, body frozen.

    Parameters
    ----------
    mlp : MLP
        The network (likelihood gaussian or bernoulli: the head is then the linear or logistic model).
    theta : (D,) array_like
        The network's weights, e.g. its fitted θ̂ (``expand(mlp, data, Γ).theta_hat``).
    X, y : array_like
        The rows the network was fitted to (N, p) and their responses.

    Returns
    -------
    (LastLayerModel, Dataset)
        As :func:`last_layer`: features φ(X; θ) (:meth:`MLP.features <sgtune.models.mlp.MLP.features>`), the
        output layer's weights at θ as the trained head (named ``output.weight[0,j]``, ``output.bias[0]`` as in
        the network), σ² the network's. With the same prior precision and θ = the network's θ̂ the head's fit
        stays at θ̂'s output layer (θ̂ is stationary in every coordinate).

    Examples
    --------
    >>> import numpy as np
    >>> from sgtune.models import make_mlp
    >>> from sgtune.models.lastlayer import mlp_last_layer
    >>> net = make_mlp("3")
    >>> X, theta = np.linspace(-1, 1, 8)[:, None], np.linspace(-1, 1, 10)
    >>> head, data = mlp_last_layer(net, theta, X, np.sin(X[:, 0]))
    >>> head.layout.names()
    ('output.weight[0,0]', 'output.weight[0,1]', 'output.weight[0,2]', 'output.bias[0]')
    >>> bool(np.allclose(data.X @ head.trained, net.output(theta, X)))  # the head gives the network's output
    True
    """
    lik = getattr(mlp, "likelihood", None)
    if lik not in _GLM_OF:
        raise SgtuneError(f"the last layer of a network with likelihood {lik!r} is not a model sgtune has "
                          "(gaussian or bernoulli)")
    Xa = np.ascontiguousarray(X, dtype=np.float64)
    th = np.asarray(theta, dtype=np.float64).reshape(-1)
    w, b = mlp.unflatten(th, Xa.shape[1])[-1]
    return last_layer(lambda rows: mlp.features(th, rows), Xa, y, likelihood=lik,
                      noise_variance=mlp.noise_variance, head=(w.reshape(-1), b.reshape(-1)), head_name="output",
                      source=f"mlp ({','.join(map(str, mlp.hidden_sizes))} {mlp.activation})")


def declared_head(model: Any, likelihood: str | None = None, noise_variance: float | None = None, *,
                  required: bool = False) -> tuple[str | None, float | None]:
    """What a model declares about its output layer, with what the caller gives where it declares nothing.

    The optional last-layer part of the model protocol:
    a network model may offer ``features(theta, X) -> (n, d)`` (the output layer's input φ(x; θ), i.e. the
    last hidden layer's output at parameters θ) with ``last_layer_likelihood`` (the loss of its output:
    ``"gaussian"``, ``"bernoulli"`` or ``"softmax"``; ``"categorical"`` reads as ``"softmax"``) and, for
    ``"gaussian"``, ``noise_variance`` σ² (:mod:`sgtune.models.base`).

    Parameters
    ----------
    model : object
        Any model.
    likelihood : {"gaussian", "bernoulli", "softmax"}, optional
        The head's likelihood where the model declares none (a different one than declared is refused).
    noise_variance : float, optional
        The σ² of a gaussian head where the model declares none (a different one than declared is refused).
    required : bool, optional
        Raise when the model offers no ``features`` or no likelihood results (instead of returning None).

    Returns
    -------
    (str or None, float or None)
        The likelihood and σ² (σ² only for gaussian); None where neither the model nor the caller says (both
        None for a model without ``features``).

    Raises
    ------
    SgtuneError
        ``last_layer_likelihood`` is not one of those names, a given value contradicts the declared one, or
        (``required``) there are no features or no likelihood.

    Examples
    --------
    >>> from sgtune.models import get_model, make_mlp
    >>> declared_head(make_mlp("3", likelihood="bernoulli")), declared_head(get_model("logistic"))
    (('bernoulli', None), (None, None))
    """
    label = model_label(model)
    if not callable(getattr(model, "features", None)):
        if required:
            raise SgtuneError(f"model {label} has no features(theta, X) method (the output layer's input at θ, the "
                              "last hidden layer's output), so sgtune cannot take its last layer; add one with "
                              "last_layer_likelihood (sgtune.models.base)")
        return None, None
    lik = getattr(model, "last_layer_likelihood", None)
    if lik is not None and (not isinstance(lik, str) or lik not in (*LAST_LAYER_LIKELIHOODS, "categorical")):
        raise SgtuneError(f"model {label}: its last_layer_likelihood must be one of "
                          f"{', '.join(LAST_LAYER_LIKELIHOODS)} (the loss of the output layer), got {lik!r}")
    lik = _agreed(None if lik is None else _likelihood(lik), None if likelihood is None else _likelihood(likelihood),
                  "likelihood", label)
    if lik is None and required:
        raise SgtuneError(f"model {label} declares no last_layer_likelihood (gaussian, bernoulli or softmax: the "
                          "loss of its output layer); add the attribute, or give the likelihood")
    if lik != "gaussian":
        return lik, None
    nv = getattr(model, "noise_variance", None)
    if nv is not None and (isinstance(nv, bool) or not isinstance(nv, (int, float, np.floating, np.integer))):
        raise SgtuneError(f"model {label}: its noise_variance must be a number (σ² of the gaussian loss), got {nv!r}")
    return lik, _agreed(None if nv is None else float(nv), noise_variance, "noise_variance", label)


def _agreed(declared: Any, given: Any, what: str, label: str) -> Any:
    """The declared value, else the given one; both given and different: an error naming the parameter."""
    if declared is None or given is None:
        return declared if declared is not None else given
    same = declared == given if isinstance(declared, str) else math.isclose(declared, given, rel_tol=1e-12)
    if not same:
        words = {"likelihood": "the likelihood", "noise_variance": "the noise variance"}[what]
        raise SgtuneError(f"model {label} declares {words} {declared!r} for its output layer, but `{what}={given}` "
                          "was given; leave it out or make the two agree")
    return declared


@cites("sgtune", "the output layer of a network model at θ on frozen features φ(x; θ) is a GLM (module docstring)")
def model_last_layer(model: Any, theta: Any, X: Any, y: Any, *, likelihood: str | None = None,
                     noise_variance: float | None = None) -> tuple[LastLayerModel, Dataset]:
    """The output layer of a network *model* at parameters θ, with the body frozen: any model offering its features.

    The model offers ``features(theta, X)`` and declares its head (:func:`declared_head`). sgtune's own
    :class:`~sgtune.models.mlp.MLP` gives :func:`mlp_last_layer` (the head starts at θ's output layer). A
    model offering ``output_layer(theta) -> (name, weight (K, d), bias (K,) or None)`` (a PyTorch network,
    :meth:`TorchModel.output_layer <sgtune.models.pytorch.TorchModel.output_layer>`) has its head start at
    that layer, named as in the network (``name.weight[k,j]``, ``name.bias[k]``, K its outputs). Any other
    model: the head is fitted on φ(X; θ) from zero (a GLM: Newton, unique MAP), its parameters named
    ``output.weight[k,j]``, ``output.bias[k]`` (K = max(y) + 1 classes for softmax); only φ(x; θ) is taken
    from θ, so θ's own layout does not matter.

    Parameters
    ----------
    model : PerSampleModel
        The network, with ``features(theta, X)`` and ``last_layer_likelihood``.
    theta : (D,) array_like
        The network's parameters, e.g. its fitted θ̂ (``expand(model, data, Γ).theta_hat``).
    X, y : array_like
        The rows the network was fitted to (N, p) and their responses.
    likelihood : {"gaussian", "bernoulli", "softmax"}, optional
        The head's likelihood where the model declares none (a declared one wins; a different one is refused).
    noise_variance : float, optional
        The σ² of a gaussian head where the model declares none (default 1; a different one is refused).

    Returns
    -------
    (LastLayerModel, Dataset)
        As :func:`last_layer`; the head's ``body_weights`` is θ.

    Raises
    ------
    SgtuneError
        If the model offers no features, declares no (or an unknown) likelihood, or θ is not D numbers.

    Examples
    --------
    A two-unit tanh network written by hand (Gauss–Newton curvature), fitted, then its head:

    >>> from sgtune.models import RankOneCurvature, expand
    >>> class Net:
    ...     name, last_layer_likelihood, noise_variance = "net", "gaussian", 0.01
    ...     def n_params(self, p): return 2 * p + 5                 # W (2, p), b (2), w (2), c
    ...     def initial_params(self, p, rng): return 0.5 * rng.standard_normal(2 * p + 5)
    ...     def features(self, theta, X):                           # φ(x; θ) = tanh(W x + b)
    ...         p = X.shape[1]
    ...         return np.tanh(X @ theta[:2 * p].reshape(2, p).T + theta[2 * p:2 * p + 2])
    ...     def _f(self, theta, X):                                 # f(x) and ∇_θ f(x)
    ...         a, w = self.features(theta, X), theta[-3:-1]
    ...         da = (1 - a ** 2) * w
    ...         g = np.hstack([(da[:, :, None] * X[:, None, :]).reshape(len(X), -1), da, a, np.ones((len(X), 1))])
    ...         return a @ w + theta[-1], g
    ...     def per_sample_losses(self, theta, X, y): return 0.5 * (y - self._f(theta, X)[0]) ** 2 / 0.01
    ...     def per_sample_grads(self, theta, X, y):
    ...         f, g = self._f(theta, X)
    ...         return ((f - y) / 0.01)[:, None] * g
    ...     def curvature(self, theta, X, y): return RankOneCurvature(self._f(theta, X)[1], np.full(len(X), 100.0))
    >>> from sgtune.io.data import make_dataset
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(-3, 3, (40, 1))
    >>> data = make_dataset(x, np.sin(x[:, 0]) + 0.1 * rng.standard_normal(40))
    >>> e = expand(Net(), data, 1.0)
    >>> head, hdata = model_last_layer(Net(), e.theta_hat, data.X, data.y)
    >>> head.parameter_names(), hdata.X.shape
    (('output.weight[0,0]', 'output.weight[0,1]', 'output.bias[0]'), (40, 3))
    """
    label = model_label(model)
    lik, nv = declared_head(model, likelihood, noise_variance, required=True)
    Xa = np.ascontiguousarray(X, dtype=np.float64)
    Xa = Xa[:, None] if Xa.ndim == 1 else Xa
    th = np.asarray(theta, dtype=np.float64).reshape(-1)
    d = model_dim(model, Xa.shape[1])
    if th.shape[0] != d:
        raise ShapeError(f"model {label}: θ must hold D = {d} numbers (its parameters), got {th.shape[0]}")
    if isinstance(model, MLP):
        head, data = mlp_last_layer(model, th, Xa, y)
    else:
        own = getattr(model, "output_layer", None)  # (name, weight, bias) at θ: the head starts there
        name, w, b = own(th) if callable(own) else ("output", None, None)
        head, data = last_layer(lambda rows: model.features(th, rows), Xa, y, likelihood=lik,
                                noise_variance=1.0 if nv is None else nv, head=None if w is None else (w, b),
                                head_name=name, source=label)
    head.body_weights = th.copy()
    return head, data
