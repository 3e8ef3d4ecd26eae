"""The model protocol: what the expansion, the theory and the sampler consume of a model.

A *model* is a per-observation loss l_n(θ) = l(θ; x_n, y_n) (the negative log-likelihood of
observation n up to a constant). sgtune never branches on a model's name: it calls the
methods below, and chooses its fast paths from the *structure* a model declares
(after statsmodels' GLM families and blackjax's ``logdensity_fn``).

Required
--------
``name`` : str
    Shown in outputs.
``per_sample_losses(theta, X, y) -> (n,)``
    l_n(θ) for the rows given.
``per_sample_grads(theta, X, y) -> (n, D)``
    g_n = ∇_θ l_n(θ).

and one way to get the per-sample curvature J_n = ∇²_θ l_n(θ):

``curvature(theta, X, y) -> RankOneCurvature | BlockCurvature | DenseCurvature``
    the structure the model has (rank-one J_n = w_n u_n u_nᵀ, as for GLMs with u_n = x_n
    and for a Gauss–Newton network with u_n = ∇_θ f(x_n); block J_n = W_n ⊗ x_n x_nᵀ with a
    small r×r W_n, as for multinomial logistic regression); or
``per_sample_hessians(theta, X, y) -> (n, D, D)``
    dense J_n (small D); or
``hessian_vector_products(theta, X, y, v) -> (n, D)``
    J_n v for every n (dense J_n is then assembled column by column: D products).

Optional
--------
``n_params(n_features) -> int``
    D, the length of θ, for data with ``n_features`` columns (default: D = n_features).
``check_response(y, source)``
    Raise :class:`~sgtune.core.errors.DataFormatError` when y is outside the model's domain.
``check_identifiable(X, y, prior_precision, source)``
    Raise when the minimiser does not exist or is not unique (GLMs: separable logistic data,
    rank-deficient designs).
``initial_params(n_features, rng) -> (D,)``
    A seeded starting point for the optimiser (required for non-convex models fitted without
    ``theta_hat``).
``fit_method`` : {"lbfgs", "newton"}
    How the MAP is fitted: ``"newton"`` for a loss convex in θ (the MAP is unique: damped Newton
    from ``newton_start``); the default ``"lbfgs"`` fits a non-convex model by L-BFGS from
    ``initial_params``.
``newton_start(X, y, prior_precision) -> (D,)``
    Starting point of the Newton fit (``fit_method = "newton"``; default zeros).
``parameter_blocks(n_features) -> list[list[int]]``
    Groups of parameter indices (an MLP's layers): the default blocks of ``tune(family="block")``.
``parameter_names(feature_names) -> list[str]``
    A name for each coordinate of θ, in θ order (the rows of Λ); ``feature_names`` are the data's
    covariate names (possibly empty). Default (:func:`parameter_names`): the covariate names when
    D equals the number of covariates (a GLM), else ``theta[i]``.
``residual_variance(theta, X, y) -> float``
    Gaussian linear models only (the LR+WS comparison theory needs it).
``rank_one`` / ``block_curvature`` : bool
    Declared before any curvature is computed (a GLM: ``rank_one``; the multinomial model:
    ``block_curvature``): the expansion then never budgets for dense (N, D, D) Hessians.
``sandwich_refusal`` : str or None
    Why the sandwich target J⁻¹𝓘J⁻¹/N does not exist for this model (J singular along a symmetry
    of the loss, as the full softmax's shift); :meth:`~sgtune.models.expansion.Expansion.sandwich_cov`
    raises with it. Default None.
``describe() -> dict``
    JSON-ready keys describing the parameterisation (the multinomial model's ``classes`` and
    ``layout``); the command line adds them to every result.
``batched_grads(thetas (C, D), X (C, B, p), y (C, B)) -> (C, D)``
    The mean gradient of each chain's minibatch, vectorised over chains (the sampler's general
    NumPy path, :mod:`sgtune.sampler.general`).
``numba_spec(n_features) -> (kind, ints, floats)``
    Pure data the sampler maps to a compiled gradient (``"glm"``, ``"mlp"``); models without
    it run through the sampler's general NumPy path.

Optional: the last layer of a network
-------------------------------------
A network whose output is f(x; θ) = W φ(x; θ) + b can offer its output layer on frozen features
(:mod:`sgtune.models.lastlayer`, a GLM the theory is exact for; ``--model last-layer --features-from
FILE.py:NAME``, and the first remedy when tuning the whole network is not applicable):

``features(theta, X) -> (n, d)``
    φ(x_n; θ), the output layer's input (the last hidden layer's output) at parameters θ.
``last_layer_likelihood`` : {"gaussian", "bernoulli", "softmax"}
    The loss of the output: (y − f)²/(2σ²) with one output, log(1 + e^f) − y f with one logit, or
    the softmax cross-entropy of K logits (y a class index 0 … K−1).
``noise_variance`` : float
    σ² of the gaussian loss (default 1).
``output_layer(theta) -> (name, weight (K, d), bias (K,) or None)``
    Optional: the output layer's own parameters at θ and its name in the network; the head then
    starts there and its parameters are named as the network's (``name.weight[k,j]``).

Only φ(x; θ̂) (and ``output_layer``'s start) is taken from the network: the head (weights and bias)
is refitted on the features (:func:`sgtune.models.lastlayer.model_last_layer`), so θ's layout does
not matter. A PyTorch network (:func:`sgtune.models.from_torch`) offers all of these when its output
layer is identifiable (:func:`sgtune.models.lastlayer.torch_network_features`).

Every method takes float64 arrays; a model may assume validated inputs. :func:`checked_call`
wraps the calls sgtune makes into a model and turns a wrong shape, a non-finite value or an
exception into one :class:`ModelError` naming the model and the function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..core.errors import SgtuneError

__all__ = ["CURVATURE_METHODS", "PerSampleModel", "RankOneCurvature", "BlockCurvature", "DenseCurvature", "ModelError",
           "model_dim", "per_sample_curvature", "checked_call", "model_label", "parameter_names", "block_matrix",
           "block_dense", "call_checked", "named_parameters", "ModelRecord", "model_record"]


#: the ways a model can give its per-sample curvature, in the order sgtune prefers them
CURVATURE_METHODS = ("curvature", "per_sample_hessians", "hessian_vector_products")


class ModelError(SgtuneError, ValueError):
    """A model returned something unusable (wrong shape, NaN/inf) or raised inside one of its methods.

    See Also
    --------
    checked_call : Where sgtune raises it.
    """


@runtime_checkable
class PerSampleModel(Protocol):
    """Structural type of a per-observation model (see the module docstring for the optional parts).

    Any object with a ``name`` and the two methods below is a model (``isinstance`` checks them);
    it also needs one way to give its curvature (``curvature``, ``per_sample_hessians`` or
    ``hessian_vector_products``) for the expansion.

    Attributes
    ----------
    name : str
        Shown in outputs.

    See Also
    --------
    sgtune.models.get_model : The built-in generalised linear models.
    sgtune.models.user.check_protocol : Check a user's model and say what is missing.

    Examples
    --------
    >>> from sgtune.models import PerSampleModel
    >>> class Squares:  # l_n(θ) = (y_n − x_nᵀθ)²/2
    ...     name = "squares"
    ...     def per_sample_losses(self, theta, X, y):
    ...         return 0.5 * (y - X @ theta) ** 2
    ...     def per_sample_grads(self, theta, X, y):
    ...         return -(y - X @ theta)[:, None] * X
    ...     def per_sample_hessians(self, theta, X, y):
    ...         return X[:, :, None] * X[:, None, :]
    >>> isinstance(Squares(), PerSampleModel)
    True
    """

    name: str

    def per_sample_losses(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray: ...

    def per_sample_grads(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class RankOneCurvature:
    """Rank-one per-sample curvature J_n = w_n u_n u_nᵀ (GLMs: u_n = x_n, w_n = ρ''(x_nᵀθ)).

    Parameters
    ----------
    features : (n, D) ndarray
        The vectors u_n, one row per observation.
    weights : (n,) ndarray
        The weights w_n.

    See Also
    --------
    DenseCurvature : The general form.

    Examples
    --------
    >>> from sgtune.models import RankOneCurvature, get_model
    >>> X, y = np.array([[1.0, 0.0], [1.0, 2.0]]), np.array([0.0, 1.0])
    >>> cur = get_model("logistic").curvature(np.zeros(2), X, y)
    >>> isinstance(cur, RankOneCurvature), cur.weights  # ρ''(0) = 1/4
    (True, array([0.25, 0.25]))
    """

    features: np.ndarray
    weights: np.ndarray


@dataclass(frozen=True)
class BlockCurvature:
    """J_n = W_n ⊗ x_n x_nᵀ: ``features`` x (n, p), symmetric ``weights`` W (n, r, r); D = r·p.

    The layout is class-major: coordinate a·p + i of θ is covariate i of block a, so
    J_n[a·p + i, b·p + j] = W_n[a, b] x_n[i] x_n[j]. Multinomial logistic regression has this
    structure with W_n = diag(π_n) − π_nπ_nᵀ over its r free classes (rank ≤ r); every curvature
    sum then costs O(N·D²) through x_nᵀ Σ_{ab} x_n, never an (N, D, D) array.

    Parameters
    ----------
    features : (n, p) ndarray
        The covariates x_n.
    weights : (n, r, r) ndarray
        The symmetric weights W_n.

    See Also
    --------
    RankOneCurvature : The case r = 1.

    Examples
    --------
    >>> from sgtune.models.base import BlockCurvature, block_dense
    >>> cur = BlockCurvature(np.array([[1.0, 2.0]]), np.array([[[1.0, 0.5], [0.5, 2.0]]]))
    >>> block_dense(cur.features, cur.weights).shape  # D = r·p = 4
    (1, 4, 4)
    """

    features: np.ndarray
    weights: np.ndarray


def block_matrix(features: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Sum Σ_n M_n ⊗ x_n x_nᵀ (D×D, class-major; M_n symmetric r×r) by r(r+1)/2 products Xᵀ diag(M_{ab}) X.

    Parameters
    ----------
    features : (n, p) ndarray
        The covariates x_n.
    weights : (n, r, r) ndarray
        The symmetric matrices M_n.

    Returns
    -------
    (D, D) ndarray
        The sum, D = r·p.

    Examples
    --------
    >>> from sgtune.models.base import block_dense, block_matrix
    >>> X, W = np.array([[1.0, 2.0], [0.5, -1.0]]), np.array([[[1.0, 0.5], [0.5, 2.0]]] * 2)
    >>> bool(np.allclose(block_matrix(X, W), block_dense(X, W).sum(axis=0)))
    True
    """
    X, M = features, weights
    n, p = X.shape
    r = M.shape[1]
    out = np.empty((r, p, r, p))
    for a in range(r):
        for b in range(a, r):
            blk = (X.T * M[:, a, b]) @ X
            out[a, :, b, :] = blk
            if b != a:
                out[b, :, a, :] = blk.T
    return out.reshape(r * p, r * p)


def block_dense(features: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The dense J_n = W_n ⊗ x_n x_nᵀ, shape (n, D, D) (small n·D² only: tests and the direct solve).

    Parameters
    ----------
    features : (n, p) ndarray
        The covariates x_n.
    weights : (n, r, r) ndarray
        The symmetric weights W_n.

    Returns
    -------
    (n, D, D) ndarray
        J_n, D = r·p, class-major.

    Examples
    --------
    >>> from sgtune.models.base import block_dense
    >>> block_dense(np.array([[1.0, 2.0]]), np.array([[[2.0]]]))[0]  # r = 1: 2·x xᵀ
    array([[2., 4.],
           [4., 8.]])
    """
    n, p = features.shape
    r = weights.shape[1]
    return np.einsum("nab,ni,nj->naibj", weights, features, features).reshape(n, r * p, r * p)


@dataclass(frozen=True)
class DenseCurvature:
    """Dense per-sample Hessians J_n.

    Parameters
    ----------
    hessians : (n, D, D) ndarray
        J_n = ∇²_θ l_n(θ), one symmetric matrix per observation.

    See Also
    --------
    RankOneCurvature : The structured form of GLMs and Gauss–Newton networks.

    Examples
    --------
    >>> from sgtune.models import DenseCurvature
    >>> DenseCurvature(np.stack([np.eye(2), 2 * np.eye(2)])).hessians.shape
    (2, 2, 2)
    """

    hessians: np.ndarray


def model_label(model: Any) -> str:
    """A short name for messages: the model's ``name`` (else its class name), with its ``source`` file if known.

    Parameters
    ----------
    model : object
        Any model.

    Returns
    -------
    str
        The label, e.g. ``"logistic"`` or ``"net (model.py)"``.

    Examples
    --------
    >>> from sgtune.models import get_model, model_label
    >>> model_label(get_model("poisson"))
    'poisson'
    """
    name = getattr(model, "name", None)
    label = str(name) if isinstance(name, str) and name else type(model).__name__
    source = getattr(model, "source", None)
    return f"{label} ({source})" if isinstance(source, str) and source else label


def model_dim(model: Any, n_features: int) -> int:
    """The number of parameters D = ``model.n_params(n_features)`` (default: D = n_features).

    Parameters
    ----------
    model : object
        Any model.
    n_features : int
        The number of columns of the data.

    Returns
    -------
    int
        D ≥ 1.

    Raises
    ------
    ModelError
        ``n_params`` raised or did not return a positive integer.

    Examples
    --------
    >>> from sgtune.models import get_model, make_mlp, model_dim
    >>> model_dim(get_model("linear"), 3), model_dim(make_mlp([4], likelihood="gaussian"), 3)
    (3, 21)
    """
    fn = getattr(model, "n_params", None)
    if fn is None:
        return int(n_features)
    d = checked_call(model, "n_params", int(n_features))
    try:
        d_int = int(d)
    except (TypeError, ValueError):
        raise ModelError(f"model {model_label(model)}: n_params({n_features}) returned {d!r}, expected a "
                         "positive integer") from None
    if d_int < 1 or d_int != d:
        raise ModelError(f"model {model_label(model)}: n_params({n_features}) returned {d!r}, expected a "
                         "positive integer")
    return d_int


def parameter_names(model: Any, feature_names: tuple[str, ...] | list[str], n_features: int) -> tuple[str, ...]:
    """The name of each coordinate of θ, in θ order (the rows and columns of Λ and of every covariance).

    The model's own ``parameter_names(feature_names)`` when it has one (checked: D distinct strings);
    otherwise the covariate names when D equals the number of covariates p (a GLM: ``intercept`` first
    with an added intercept), else ``theta[0]`` … ``theta[D−1]``. Covariates without names are called
    ``x0`` … ``x{p−1}``, as :func:`sgtune.io.data.make_dataset` calls them.

    Parameters
    ----------
    model : object
        Any model.
    feature_names : sequence of str
        The data's covariate names (possibly empty).
    n_features : int
        The number of covariates p.

    Returns
    -------
    tuple of str
        D distinct names.

    Raises
    ------
    ModelError
        The model's own ``parameter_names`` did not return D distinct strings.

    Examples
    --------
    >>> from sgtune.models import get_model, make_mlp
    >>> from sgtune.models.base import parameter_names
    >>> parameter_names(get_model("logistic"), ("age", "dose"), 2)
    ('age', 'dose')
    >>> parameter_names(make_mlp([2], likelihood="gaussian"), (), 1)[:3]
    ('hidden1.weight[0,x0]', 'hidden1.weight[1,x0]', 'hidden1.bias[0]')
    """
    d = model_dim(model, n_features)
    names = tuple(str(f) for f in feature_names) or tuple(f"x{i}" for i in range(int(n_features)))
    own = callable(getattr(model, "parameter_names", None))
    got = checked_call(model, "parameter_names", names) if own else None
    return named_parameters(got, own, d, model_label(model), names)


def named_parameters(got: Any, own: bool, d: int, label: str, feature_names: tuple[str, ...]) -> tuple[str, ...]:
    """:func:`parameter_names` from the model's answer, without asking the model again.

    ``got`` (when the model has the method, ``own``) checked, else the covariate names when there are D of
    them, else ``theta[0]`` … ``theta[D−1]``.

    Parameters
    ----------
    got : object
        What the model's ``parameter_names(feature_names)`` returned (ignored unless ``own``).
    own : bool
        Whether the model has ``parameter_names``.
    d : int
        The number of parameters D.
    label : str
        :func:`model_label` of the model, for messages.
    feature_names : tuple of str
        The covariate names (``x0`` … when the data have none).

    Returns
    -------
    tuple of str
        D distinct names.

    Raises
    ------
    ModelError
        ``got`` is not D distinct strings.

    Examples
    --------
    >>> from sgtune.models.base import named_parameters
    >>> named_parameters(None, False, 2, "linear", ("age", "dose")), named_parameters(None, False, 1, "m", ("a", "b"))
    (('age', 'dose'), ('theta[0]',))
    """
    if own:
        try:
            out = tuple(got)
        except TypeError:
            out = ()
        if len(out) != d or not all(isinstance(n, str) for n in out) or len(set(out)) != d:
            raise ModelError(f"model {label}: parameter_names returned {got!r:.200}, expected {d} "
                             "distinct strings (one per coordinate of θ)")
        return out
    if len(feature_names) == d and len(set(feature_names)) == d:
        return feature_names
    return tuple(f"theta[{i}]" for i in range(d))


def checked_call(model: Any, method: str, *args: Any, shape: tuple[int, ...] | None = None) -> Any:
    """Call ``getattr(model, method)(*args)``; with ``shape``, return a finite float64 array of that shape.

    Parameters
    ----------
    model : object
        Any model.
    method : str
        The name of the method to call.
    *args
        Its arguments.
    shape : tuple of int or None, optional
        The shape the result must have (None: return it unchecked).

    Returns
    -------
    object or ndarray
        What the method returned, as a float64 array when ``shape`` is given.

    Raises
    ------
    ModelError
        Any exception raised by the model, a missing method, a wrong shape or a non-finite entry,
        as one error naming the model and the method.

    Examples
    --------
    >>> from sgtune.models import ModelError, checked_call, get_model
    >>> X, y = np.ones((3, 2)), np.zeros(3)
    >>> checked_call(get_model("linear"), "per_sample_grads", np.zeros(2), X, y, shape=(3, 2)).shape
    (3, 2)
    >>> try:
    ...     checked_call(get_model("linear"), "per_sample_grads", np.zeros(2), X, y, shape=(3, 5))
    ... except ModelError as exc:
    ...     print(exc)
    model linear: per_sample_grads() returned shape (3, 2), expected (3, 5)
    """
    label = model_label(model)
    fn = getattr(model, method, None)
    if fn is None or not callable(fn):
        raise ModelError(f"model {label} has no method {method}() (see sgtune.models.base for the protocol)")
    return call_checked(fn, label, method, *args, shape=shape)


def call_checked(fn: Any, label: str, method: str, *args: Any, shape: tuple[int, ...] | None = None) -> Any:
    """:func:`checked_call` of a method already looked up: ``fn(*args)`` for the model ``label``.

    Parameters
    ----------
    fn : callable
        The model's method ``method``.
    label : str
        :func:`model_label` of the model, for messages.
    method : str
        The method's name, for messages.
    *args
        Its arguments.
    shape : tuple of int or None, optional
        The shape the result must have (None: return it unchecked).

    Returns
    -------
    object or ndarray
        What the method returned, as a float64 array when ``shape`` is given.

    Raises
    ------
    ModelError
        As :func:`checked_call`.

    Examples
    --------
    >>> from sgtune.models import get_model
    >>> from sgtune.models.base import call_checked
    >>> call_checked(get_model("linear").n_params, "linear", "n_params", 3)
    3
    """
    try:
        out = fn(*args)
    except SgtuneError:
        raise
    except Exception as exc:  # the user's code failed: one line naming it
        raise ModelError(f"model {label}: {method}() raised {type(exc).__name__}: {exc}") from None
    if shape is None:
        return out
    try:
        arr = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        raise ModelError(f"model {label}: {method}() returned {type(out).__name__}, expected a float array of "
                         f"shape {shape}") from None
    if arr.shape != shape:
        raise ModelError(f"model {label}: {method}() returned shape {arr.shape}, expected {shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ModelError(f"model {label}: {method}() returned a non-finite value at index {tuple(int(i) for i in bad)}"
                         " (overflow? standardise the covariates, or check the model at these parameters)")
    return arr


#: the methods whose presence the sampler needs to know (:attr:`ModelRecord.methods`)
SAMPLER_METHODS = ("per_sample_grads", "per_sample_losses", "initial_params", "parameter_names")


@dataclass(frozen=True)
class ModelRecord:
    """What the sampler asks of a model on a data set, read in one visit (:func:`model_record`).

    The model's answers are kept as it gave them: the sampler checks the numba spec and ``n_params``
    against each other and :func:`named_parameters` checks the names, without asking the model again.

    Attributes
    ----------
    label : str
        :func:`model_label` of the model.
    numba_spec : object or None
        ``model.numba_spec(p)`` as returned, or None when the model has no such method.
    n_params : object or None
        ``model.n_params(p)`` as returned, or None when the model has no such method.
    parameter_names : object or None
        ``model.parameter_names(feature names)`` as returned, or None when the model has no such method.
    feature_names : tuple of str
        The data's covariate names (``x0`` … ``x{p−1}`` when the data have none).
    methods : frozenset of str
        Which of ``SAMPLER_METHODS`` (the optional methods the sampler uses) the model has.
    fit_method : str
        The model's ``fit_method`` (``"lbfgs"`` by default): how :func:`sgtune.models.fit_map` fits θ̂.

    Examples
    --------
    >>> from sgtune.io.data import make_dataset
    >>> from sgtune.models import make_mlp
    >>> from sgtune.models.base import model_record
    >>> rec = model_record(make_mlp([2], likelihood="gaussian"), make_dataset(np.ones((3, 1)), np.zeros(3)))
    >>> rec.n_params, len(rec.parameter_names), "initial_params" in rec.methods
    (7, 7, True)
    """

    label: str
    numba_spec: Any
    n_params: Any
    parameter_names: Any
    feature_names: tuple[str, ...]
    methods: frozenset[str]
    fit_method: str


def model_record(model: Any, data: Any) -> ModelRecord:
    """Ask ``model`` everything the sampler needs on ``data``, in one visit, and check the response.

    Calls the model's ``numba_spec(p)``, ``check_response(y, source)``, ``n_params(p)`` and
    ``parameter_names(names)`` when it has them, in this order, and nothing else of it: the walk of a model
    from the sampler's driver to the kernel (``benchmarks/model_walk.py``) then never returns to a file it
    has left.

    Parameters
    ----------
    model : object
        The model.
    data : Dataset
        The data (:class:`sgtune.io.data.Dataset`).

    Returns
    -------
    ModelRecord
        The model's answers, as it gave them.

    Raises
    ------
    DataFormatError
        The model's ``check_response`` refused ``y``.
    ModelError
        ``numba_spec`` or ``parameter_names`` raised.

    Examples
    --------
    >>> from sgtune.io.data import make_dataset
    >>> from sgtune.models import get_model
    >>> from sgtune.models.base import model_record
    >>> rec = model_record(get_model("logistic"), make_dataset(np.ones((4, 2)), np.array([0., 1, 0, 1])))
    >>> rec.label, rec.numba_spec[0], rec.n_params, rec.feature_names
    ('logistic', 'glm', 2, ('x0', 'x1'))
    """
    label = model_label(model)
    p = int(data.dim)
    names = tuple(str(f) for f in data.names) or tuple(f"x{i}" for i in range(p))
    methods = frozenset(m for m in SAMPLER_METHODS if callable(getattr(model, m, None)))
    spec_fn, check, own = (getattr(model, m, None) for m in ("numba_spec", "check_response", "n_params"))
    spec = None if spec_fn is None else call_checked(spec_fn, label, "numba_spec", p)
    if check is not None:
        check(data.y, data.source or "y")
    n_params = own(p) if callable(own) else None
    got = (call_checked(model.parameter_names, label, "parameter_names", names)
           if "parameter_names" in methods else None)
    return ModelRecord(label, spec, n_params, got, names, methods, str(getattr(model, "fit_method", "lbfgs")))


def per_sample_curvature(model: Any, theta: np.ndarray, X: np.ndarray, y: np.ndarray
                         ) -> RankOneCurvature | BlockCurvature | DenseCurvature:
    """The per-sample curvature J_n at θ in the structure the model offers (module docstring).

    Preference: the model's own ``curvature`` (it knows its structure), then dense
    ``per_sample_hessians``, then D ``hessian_vector_products`` with the unit vectors.

    Parameters
    ----------
    model : object
        Any model.
    theta : (D,) ndarray
        The parameters θ.
    X : (n, p) ndarray
        The covariates.
    y : (n,) ndarray
        The responses.

    Returns
    -------
    RankOneCurvature or DenseCurvature
        J_n for every row, checked finite and of the right shapes.

    Raises
    ------
    ModelError
        The model offers no curvature, or it returned a wrong shape or a non-finite value.

    Examples
    --------
    >>> from sgtune.models import get_model, per_sample_curvature
    >>> X, y = np.array([[1.0, 0.0], [0.5, 2.0]]), np.array([0.3, -0.1])
    >>> type(per_sample_curvature(get_model("linear"), np.zeros(2), X, y)).__name__
    'RankOneCurvature'
    """
    n, d = X.shape[0], theta.shape[0]
    label = model_label(model)
    if callable(getattr(model, "curvature", None)):
        cur = checked_call(model, "curvature", theta, X, y)
        if isinstance(cur, RankOneCurvature):
            u = _finite(cur.features, (n, d), label, "curvature().features")
            w = _finite(cur.weights, (n,), label, "curvature().weights")
            return RankOneCurvature(u, w)
        if isinstance(cur, BlockCurvature):
            x = np.asarray(cur.features)
            p = x.shape[1] if x.ndim == 2 else 0
            r = d // p if p and d % p == 0 else 0
            if not r:
                raise ModelError(f"model {label}: curvature().features has shape {x.shape}, expected (n, p) with p "
                                 f"dividing D = {d}")
            x = _finite(x, (n, p), label, "curvature().features")
            w = _finite(cur.weights, (n, r, r), label, "curvature().weights")
            return BlockCurvature(x, w)
        if isinstance(cur, DenseCurvature):
            return DenseCurvature(_finite(cur.hessians, (n, d, d), label, "curvature().hessians"))
        raise ModelError(f"model {label}: curvature() must return RankOneCurvature, BlockCurvature or "
                         f"DenseCurvature, got {type(cur).__name__}")
    if callable(getattr(model, "per_sample_hessians", None)):
        return DenseCurvature(checked_call(model, "per_sample_hessians", theta, X, y, shape=(n, d, d)))
    if callable(getattr(model, "hessian_vector_products", None)):
        hs = np.empty((n, d, d))
        for j in range(d):
            e = np.zeros(d)
            e[j] = 1.0
            hs[:, :, j] = checked_call(model, "hessian_vector_products", theta, X, y, e, shape=(n, d))
        return DenseCurvature(0.5 * (hs + np.swapaxes(hs, 1, 2)))
    raise ModelError(f"model {label} provides no curvature: implement "
                     f"{' or '.join(m + '()' for m in CURVATURE_METHODS)} (see sgtune.models.base)")


def _finite(a: Any, shape: tuple[int, ...], label: str, what: str) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.shape != shape:
        raise ModelError(f"model {label}: {what} has shape {arr.shape}, expected {shape}")
    if not np.all(np.isfinite(arr)):
        raise ModelError(f"model {label}: {what} contains a non-finite value (overflow? standardise the covariates)")
    return arr


def separable(X: np.ndarray, y: np.ndarray) -> bool:
    """Is there θ with (2y−1)·x_nᵀθ ≥ 1 for all n (complete separation)? One LP (HiGHS)."""
    from scipy.optimize import linprog

    s = 2 * y - 1
    res = linprog(np.zeros(X.shape[1]), A_ub=-(s[:, None] * X), b_ub=-np.ones(X.shape[0]),
                  bounds=[(None, None)] * X.shape[1], method="highs")
    return bool(res.status == 0)
