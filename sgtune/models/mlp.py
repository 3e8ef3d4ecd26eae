"""Feed-forward networks: the built-in non-convex model of the protocol (:mod:`sgtune.models.base`).

f(x; θ) is a fully connected network with input width p, hidden widths h_1..h_K (K ≥ 0;
K = 0 is a linear model), a hidden activation φ ∈ {tanh, relu, softplus} and a linear scalar
output. The per-observation loss is a GLM loss applied to the output,

    l_n(θ) = ρ(f(x_n; θ), y_n),   ρ = the GLM loss of the likelihood
    (gaussian ↔ "linear" with σ², bernoulli ↔ "logistic", poisson ↔ "poisson"),

so by the chain rule (ρ', ρ'' from :meth:`GLM.derivatives <sgtune.models.glm.GLM.derivatives>`)

    g_n = ρ'(f_n) ∇f_n,      J_n = ρ''(f_n) ∇f_n ∇f_nᵀ + ρ'(f_n) ∇²f_n.

The first term alone is the Gauss–Newton curvature (rank one, the structure the fast paths use);
the exact J_n adds ρ'(f_n)∇²f_n, computed by Pearlmutter's R-operator (forward-over-reverse
differentiation of the back-propagation, *Fast exact multiplication by the Hessian*, Neural
Computation 6, 1994), vectorised over the rows and over a batch of directions: exact Hessians
are the R-operator applied to the D unit vectors (O(N·D²) memory, for small D), Hessian–vector
products to one direction (O(N·D)).

Parameter layout (docs/cli.rst): θ is the concatenation, layer by layer from the input,
of W_l (shape fan_out × fan_in, row-major) and then b_l, for layers l = 1..K+1 with widths
s_0 = p, s_l = h_l, s_{K+1} = 1. The network of Wang, Ding & Huggins (2026) §6.3 is ``make_mlp("2,3")`` (tanh,
gaussian) on the diabetes data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy.special import expit

from ..core._refs import cites
from ..core.errors import SgtuneError, ShapeError
from . import expansion
from .base import DenseCurvature, RankOneCurvature
from .glm import GLM, GLM_IDS, get_model

__all__ = ["MLP", "make_mlp", "ACTIVATIONS", "ACTIVATION_CODES", "LIKELIHOODS", "HESSIANS"]

#: hidden activations and their codes in the sampler's compiled network (``numba_spec``)
ACTIVATION_CODES = {"tanh": 0, "relu": 1, "softplus": 2}
ACTIVATIONS = tuple(ACTIVATION_CODES)
#: likelihood → the GLM whose loss ρ(f, y) is applied to the network output
LIKELIHOODS = {"gaussian": "linear", "bernoulli": "logistic", "poisson": "poisson"}
#: per-sample curvature J_n the model declares
HESSIANS = ("exact", "gauss-newton")


def _activation(name: str, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """φ(z), φ'(z), φ''(z) elementwise (relu: φ'(0) = 0, φ'' = 0; softplus computed without overflow)."""
    if name == "tanh":
        t = np.tanh(z)
        d1 = 1.0 - t * t
        return t, d1, -2.0 * t * d1
    if name == "relu":
        pos = z > 0
        return np.where(pos, z, 0.0), pos.astype(np.float64), np.zeros_like(z)
    # softplus: log(1 + e^z), φ' = sigmoid(z), φ'' = sigmoid(z)(1 − sigmoid(z))
    s = expit(z)
    return np.logaddexp(0.0, z), s, s * (1.0 - s)


def _parse_hidden_sizes(hidden_sizes: Any) -> tuple[int, ...]:
    """Widths from the CLI string "2,3" (empty string: no hidden layer) or a sequence of ints."""
    hint = "`hidden_sizes` must be positive integer widths separated by commas, e.g. 2,3"
    if isinstance(hidden_sizes, str):
        text = hidden_sizes.strip()
        if not text:
            return ()
        items: Sequence[Any] = [s.strip() for s in text.split(",")]
        for s in items:
            if not s:
                raise SgtuneError(f"{hint}; got {hidden_sizes!r} (an empty entry)")
    elif isinstance(hidden_sizes, (int, np.integer)) and not isinstance(hidden_sizes, bool):
        items = [hidden_sizes]
    else:
        try:
            items = list(hidden_sizes)
        except TypeError:
            raise SgtuneError(f"{hint}; got {hidden_sizes!r}") from None
    out = []
    for s in items:
        if isinstance(s, bool):
            raise SgtuneError(f"{hint}; got {hidden_sizes!r}")
        try:
            v = float(s)
        except (TypeError, ValueError):
            raise SgtuneError(f"{hint}; got {hidden_sizes!r} ({s!r} is not an integer)") from None
        if not (math.isfinite(v) and v.is_integer()):
            raise SgtuneError(f"{hint}; got {hidden_sizes!r} ({s!r} is not an integer)")
        if v < 1:
            raise SgtuneError(f"{hint}; got {hidden_sizes!r} (width {int(v)} < 1)")
        out.append(int(v))
    return tuple(out)


@cites("wang2026", "§6.3: tanh network with hidden widths (2, 3) on the Diabetes data")
@dataclass(frozen=True)
class MLP:
    """A feed-forward network model: l_n(θ) = ρ(f(x_n; θ), y_n) (module docstring).

    Parameters
    ----------
    hidden_sizes : tuple of int
        Hidden widths h_1..h_K (``()``: no hidden layer, a GLM with intercept).
    activation : {"tanh", "relu", "softplus"}
        Hidden activation (relu'(0) = 0, relu'' = 0).
    likelihood : {"gaussian", "bernoulli", "poisson"}
        The loss −log p(y | f): the GLM loss ``linear`` (with σ² = ``noise_variance``), ``logistic``
        (f is the logit) or ``poisson`` (f is the log-mean).
    noise_variance : float
        The variance σ² of the Gaussian likelihood.
    hessian : {"exact", "gauss-newton"}
        The per-sample curvature J_n the model declares: exact (dense, O(N·D²)) or the
        Gauss–Newton J_n ≈ ρ''(f_n)∇f_n∇f_nᵀ (rank one, always positive semi-definite for
        these likelihoods).
    name : str
        Shown in outputs.

    Raises
    ------
    SgtuneError
        An unknown activation, likelihood or curvature, or a width that is not a positive integer.

    See Also
    --------
    make_mlp : Build one from CLI strings.

    Examples
    --------
    >>> from sgtune.models import MLP
    >>> net = MLP((3,), activation="tanh", likelihood="bernoulli")
    >>> net.n_params(2)  # (2·3 + 3) + (3·1 + 1)
    13
    """

    hidden_sizes: tuple[int, ...]
    activation: str = "tanh"
    likelihood: str = "gaussian"
    noise_variance: float = 1.0
    hessian: str = "exact"
    name: str = "mlp"

    #: non-convex: L-BFGS from :meth:`initial_params`, then the certified Newton polish of ``fit_map``
    fit_method = "lbfgs"

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", _parse_hidden_sizes(self.hidden_sizes))
        if self.activation not in ACTIVATION_CODES:
            raise SgtuneError(f"`activation` must be one of {', '.join(ACTIVATIONS)}, "
                              f"got {self.activation!r}")
        if self.likelihood not in LIKELIHOODS:
            raise SgtuneError(f"`likelihood` must be one of {', '.join(LIKELIHOODS)}, "
                              f"got {self.likelihood!r}")
        if self.hessian not in HESSIANS:
            raise SgtuneError(f"`hessian` must be one of {', '.join(HESSIANS)}, got {self.hessian!r}")
        # validates σ² (a clear message naming noise_variance)
        object.__setattr__(self, "noise_variance", get_model(LIKELIHOODS[self.likelihood],
                                                             noise_variance=self.noise_variance).noise_variance)

    # --- structure -------------------------------------------------------------
    @property
    def glm(self) -> GLM:
        """The GLM whose loss ρ(η, y) is applied to the output f (η = f)."""
        return GLM(LIKELIHOODS[self.likelihood], self.noise_variance)

    @property
    def rank_one(self) -> bool:
        """True for the Gauss–Newton curvature (J_n = ρ''(f_n)∇f_n∇f_nᵀ), False for exact Hessians."""
        return self.hessian == "gauss-newton"

    def widths(self, n_features: int) -> tuple[int, ...]:
        """(s_0, …, s_{K+1}) = (p, h_1, …, h_K, 1)."""
        return (int(n_features), *self.hidden_sizes, 1)

    def n_params(self, n_features: int) -> int:
        """D = Σ_l s_l (s_{l−1} + 1)."""
        s = self.widths(n_features)
        return int(sum(s[i + 1] * (s[i] + 1) for i in range(len(s) - 1)))

    def layer_slices(self, n_features: int) -> list[tuple[int, int]]:
        """[(start, stop)] of each layer's parameters (W_l then b_l) in θ: the default blocks of Λ."""
        s = self.widths(n_features)
        out, start = [], 0
        for i in range(len(s) - 1):
            stop = start + s[i + 1] * (s[i] + 1)
            out.append((start, stop))
            start = stop
        return out

    def parameter_blocks(self, n_features: int) -> list[list[int]]:
        """The indices of each layer's parameters (W_l then b_l): the default blocks of a block-diagonal Λ."""
        return [list(range(a, b)) for a, b in self.layer_slices(n_features)]

    def parameter_names(self, feature_names: tuple[str, ...]) -> list[str]:
        """``hidden1.weight[i,j]`` … ``output.bias[0]``, in θ order (layer by layer: W_l row-major, then b_l).

        The input width is the number of ``feature_names``; weight columns of the first layer are named
        by the covariate (``hidden1.weight[0,x2]``) when the names are known.
        """
        if len(feature_names) == 0:
            raise ShapeError("MLP.parameter_names needs the covariate names (one per input column)")
        s = self.widths(len(feature_names))
        out: list[str] = []
        for layer in range(len(s) - 1):
            tag = "output" if layer == len(s) - 2 else f"hidden{layer + 1}"
            cols = list(feature_names) if layer == 0 else [str(j) for j in range(s[layer])]
            out += [f"{tag}.weight[{i},{c}]" for i in range(s[layer + 1]) for c in cols]
            out += [f"{tag}.bias[{i}]" for i in range(s[layer + 1])]
        return out

    def unflatten(self, theta: np.ndarray, n_features: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """[(W_l (s_l, s_{l−1}), b_l (s_l,))] for l = 1..K+1 (views into θ)."""
        theta = np.asarray(theta, dtype=np.float64)
        d = self.n_params(n_features)
        if theta.shape != (d,):
            raise ShapeError(f"theta must have shape ({d},) (the parameters of an mlp with widths "
                             f"{self.widths(n_features)}), got {theta.shape}")
        return self._layers(theta, n_features)

    def _layers(self, theta: np.ndarray, n_features: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`unflatten` without the check, for θ of shape (..., D): W_l (..., s_l, s_{l−1}), b_l (..., s_l)."""
        s = self.widths(n_features)
        lead = theta.shape[:-1]
        out = []
        for i, (start, _) in enumerate(self.layer_slices(n_features)):
            nw = s[i + 1] * s[i]
            out.append((theta[..., start:start + nw].reshape(*lead, s[i + 1], s[i]),
                        theta[..., start + nw:start + nw + s[i + 1]]))
        return out

    def initial_params(self, n_features: int, rng: np.random.Generator) -> np.ndarray:
        """Glorot-uniform weights W_l ~ U(±√(6/(fan_in + fan_out))), drawn layer by layer; zero biases."""
        s = self.widths(n_features)
        parts = []
        for i in range(len(s) - 1):
            a = math.sqrt(6.0 / (s[i] + s[i + 1]))
            parts.append(rng.uniform(-a, a, size=s[i + 1] * s[i]))
            parts.append(np.zeros(s[i + 1]))
        return np.concatenate(parts)

    def check_response(self, y: np.ndarray, source: str = "y") -> None:
        """Raise :class:`~sgtune.core.errors.DataFormatError` when y is outside the likelihood's domain."""
        self.glm.check_response(y, source)

    def check_identifiable(self, X: np.ndarray, y: np.ndarray, prior_precision: np.ndarray, source: str) -> None:
        """K = 0: the GLM's check on [X, 1] (rank-deficient design, separable logistic data, no prior).

        Networks with hidden layers are never globally identified (permuting or sign-flipping
        hidden units leaves f unchanged); the expansion checks the fitted point (λ_min(H) > 0).
        """
        if not self.hidden_sizes:
            X1 = np.hstack([X, np.ones((X.shape[0], 1))])
            self.glm.check_identifiable(X1, y, prior_precision, source)

    def numba_spec(self, n_features: int | None = None) -> tuple[str, np.ndarray, np.ndarray]:
        """("mlp", [p, h_1, …, h_K, 1, activation code, likelihood id], the GLM's floats [σ², 1.5, c, 2, 0]).

        Activation codes: tanh 0, relu 1, softplus 2; likelihood ids are ``GLM_IDS`` of the GLM
        (gaussian 0, bernoulli 1, poisson 2). The model does not know p: pass ``n_features``
        (without it ints[0] is −1 and the caller, which knows X, must set it).
        """
        p = -1 if n_features is None else int(n_features)
        ints = np.array([p, *self.hidden_sizes, 1, ACTIVATION_CODES[self.activation],
                         GLM_IDS[LIKELIHOODS[self.likelihood]]], dtype=np.int64)
        return ("mlp", ints, self.glm.numba_spec()[2])

    # --- the network -------------------------------------------------------------
    def _forward(self, theta: np.ndarray, X: np.ndarray) -> tuple[list, list, list, list, np.ndarray]:
        """Weights, activations a_0..a_K, φ'(z_l), φ''(z_l) (hidden layers) and the output f (n,).

        Also for a stack of C networks: θ (C, D) and X (C, n, p) give every array a leading chain
        axis (f is (C, n)); the rows of one θ never meet another's (:meth:`batched_grads`).
        """
        if theta.ndim == 1:
            layers = self.unflatten(theta, X.shape[-1])
        else:
            layers = self._layers(theta, X.shape[-1])
        acts, d1s, d2s = [X], [], []
        a = X
        for W, b in layers[:-1]:
            a, d1, d2 = _activation(self.activation, a @ np.swapaxes(W, -1, -2) + b[..., None, :])
            acts.append(a)
            d1s.append(d1)
            d2s.append(d2)
        W, b = layers[-1]
        if theta.ndim == 1:
            return layers, acts, d1s, d2s, a @ W[0] + b[0]
        return layers, acts, d1s, d2s, (a @ np.swapaxes(W, -1, -2))[..., 0] + b[..., 0, None]

    def _deltas(self, layers: list, d1s: list, top: np.ndarray) -> list[np.ndarray]:
        """δ_l = ∂(·)/∂z_l (n, s_l), l = 1..K+1, by back-propagation from δ_{K+1} = ``top`` (n,)
        (ones: derivatives of f; ρ'(f): derivatives of the loss); with a leading chain axis
        (C, n, s_l) for stacked networks (:meth:`_forward`)."""
        deltas = [top[..., None]]
        for l in range(len(layers) - 1, 0, -1):
            deltas.append((deltas[-1] @ layers[l][0]) * d1s[l - 1])
        return deltas[::-1]

    def _grad_f(self, acts: list, deltas: list, n: int, d: int) -> np.ndarray:
        """∇_θ f (n, D): ∂f/∂W_l = δ_l a_{l−1}ᵀ, ∂f/∂b_l = δ_l, in the parameter layout."""
        out = np.empty((n, d))
        start = 0
        for a, delta in zip(acts, deltas):
            nw = delta.shape[1] * a.shape[1]
            out[:, start:start + nw] = (delta[:, :, None] * a[:, None, :]).reshape(n, nw)
            out[:, start + nw:start + nw + delta.shape[1]] = delta
            start += nw + delta.shape[1]
        return out

    def _r_op(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, V: np.ndarray) -> np.ndarray:
        """Pearlmutter's R-operator for m directions V (D, m) (columns), vectorised over rows and directions.

        Returns J_n V = ∇²l_n V, shape (n, D, m): back-propagation of the loss (δ_{K+1} = ρ'(f)),
        differentiated along each direction (R(δ_{K+1}) = ρ''(f) R(f), R(f) = ∇fᵀv). Forward tangents
        R(z_l) = W_l R(a_{l−1}) + V_l a_{l−1} + c_l, R(a_l) = φ'(z_l)R(z_l); backward
        R(δ_{l−1}) = (W_lᵀR(δ_l) + V_lᵀδ_l)∘φ'(z_{l−1}) + (W_lᵀδ_l)∘φ''(z_{l−1})∘R(z_{l−1}),
        R(∂f/∂W_l) = R(δ_l)a_{l−1}ᵀ + δ_l R(a_{l−1})ᵀ, R(∂f/∂b_l) = R(δ_l). The direction axis is
        the last (contiguous) one, so the elementwise work runs in long inner loops.
        """
        n, p = X.shape
        d = self.n_params(p)
        m = V.shape[1]
        layers, acts, d1s, d2s, f = self._forward(theta, X)
        _, r1, r2 = self.glm.derivatives(f, y)
        deltas = self._deltas(layers, d1s, r1)
        s = self.widths(p)
        n_layers = len(layers)
        offsets = self.layer_slices(p)
        # the directions in the layer layout: VW_l (s_l, s_{l−1}, m), Vb_l (s_l, m)
        dirs = []
        for i, (start, _) in enumerate(offsets):
            nw = s[i + 1] * s[i]
            dirs.append((V[start:start + nw].reshape(s[i + 1], s[i], m), V[start + nw:start + nw + s[i + 1]]))
        # forward tangents R(z_l), R(a_l) (n, s_l, m); R(a_0) = 0
        rzs, ras = [], [None]
        for i in range(n_layers):
            W, _ = layers[i]
            VW, Vb = dirs[i]
            rz = (acts[i] @ VW.transpose(1, 0, 2).reshape(s[i], s[i + 1] * m)).reshape(n, s[i + 1], m)
            rz += Vb
            if ras[i] is not None:
                rz += W @ ras[i]
            rzs.append(rz)
            if i < n_layers - 1:
                ras.append(d1s[i][:, :, None] * rz)
        # backward from R(δ_{K+1}) = 0, writing R(∇f) = ∇²f V layer by layer
        hv = np.empty((n, d, m))
        rdelta = (r2[:, None] * rzs[-1][:, 0, :])[:, None, :]
        for i in range(n_layers - 1, -1, -1):
            start = offsets[i][0]
            nw = s[i + 1] * s[i]
            block = hv[:, start:start + nw].reshape(n, s[i + 1], s[i], m)
            np.multiply(rdelta[:, :, None, :], acts[i][:, None, :, None], out=block)
            if ras[i] is not None:
                block += deltas[i][:, :, None, None] * ras[i][:, None, :, :]
            hv[:, start + nw:start + nw + s[i + 1]] = rdelta
            if i > 0:
                W, _ = layers[i]
                VW, _ = dirs[i]
                back = deltas[i] @ W  # (n, s_{l−1})
                rback = W.T @ rdelta
                rback += (deltas[i] @ VW.reshape(s[i + 1], s[i] * m)).reshape(n, s[i], m)
                rback *= d1s[i - 1][:, :, None]
                rback += (back * d2s[i - 1])[:, :, None] * rzs[i - 1]
                rdelta = rback
        return hv

    @property
    def last_layer_likelihood(self) -> str | None:
        """The output layer's likelihood when it is a model sgtune has (gaussian: linear, bernoulli: logistic),
        else None (poisson): the model protocol's last-layer declaration (:func:`sgtune.models.lastlayer.declared_head`)."""
        return self.likelihood if self.likelihood in ("gaussian", "bernoulli") else None

    def features(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """φ(x_n; θ), the input of the output layer (the last hidden layer's activations; X itself without a
        hidden layer), shape (n, h_K): the frozen features of the network's last layer
        (:func:`sgtune.models.lastlayer.mlp_last_layer`)."""
        return self._forward(np.asarray(theta, dtype=np.float64), np.asarray(X, dtype=np.float64))[1][-1]

    # --- protocol ----------------------------------------------------------------
    def output(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """f(x_n; θ), shape (n,)."""
        return self._forward(theta, X)[-1]

    def output_grads(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """∇_θ f(x_n; θ) by back-propagation, shape (n, D)."""
        layers, acts, d1s, _, _ = self._forward(theta, X)
        n = X.shape[0]
        return self._grad_f(acts, self._deltas(layers, d1s, np.ones(n)), n, self.n_params(X.shape[1]))

    def per_sample_losses(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """l_n(θ) = ρ(f_n, y_n), shape (n,)."""
        return self.glm.derivatives(self.output(theta, X), y)[0]

    def per_sample_grads(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """g_n = ρ'(f_n) ∇f_n: back-propagation from δ_{K+1} = ρ'(f_n), shape (n, D)."""
        layers, acts, d1s, _, f = self._forward(theta, X)
        top = self.glm.derivatives(f, y)[1]
        return self._grad_f(acts, self._deltas(layers, d1s, top), X.shape[0], self.n_params(X.shape[1]))

    def batched_grads(self, thetas: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Minibatch mean gradients (1/B) Σ_b g_b of C networks at once, shape (C, D) (no prior term).

        thetas (C, D), X (C, B, p), y (C, B): chain c's parameters and minibatch. The same forward
        and backward passes as :meth:`per_sample_grads` with a leading chain axis, the sums over the
        batch done as matrix products (∂/∂W_l = δ_lᵀ a_{l−1}/B, ∂/∂b_l = mean of δ_l): the general
        sampler path (:mod:`sgtune.sampler.general`) calls it once per step for all chains.
        """
        thetas = np.asarray(thetas, dtype=np.float64)
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        c, m, p = X.shape
        d = self.n_params(p)
        if thetas.shape != (c, d) or y.shape != (c, m):
            raise ShapeError(f"batched_grads needs thetas (C, D) = ({c}, {d}), X (C, B, p) and y (C, B) = ({c}, {m}); "
                             f"got thetas {thetas.shape}, X {X.shape}, y {y.shape}")
        layers, acts, d1s, _, f = self._forward(thetas, X)
        deltas = self._deltas(layers, d1s, self.glm.derivatives(f, y)[1])
        out = np.empty((c, d))
        start = 0
        for a, delta in zip(acts, deltas):
            nw = delta.shape[-1] * a.shape[-1]
            out[:, start:start + nw] = (np.swapaxes(delta, -1, -2) @ a).reshape(c, nw) / m
            out[:, start + nw:start + nw + delta.shape[-1]] = delta.mean(axis=-2)
            start += nw + delta.shape[-1]
        return out

    @cites("sgtune", "J_n = ρ''(f)∇f∇fᵀ + ρ'(f)∇²f (chain rule); exact J_n by Pearlmutter's R-operator")
    def curvature(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> RankOneCurvature | DenseCurvature:
        """J_n: Gauss–Newton → RankOneCurvature(∇f_n, ρ''(f_n)); exact → DenseCurvature (n, D, D)."""
        if self.hessian == "gauss-newton":
            layers, acts, d1s, _, f = self._forward(theta, X)
            n = X.shape[0]
            grad_f = self._grad_f(acts, self._deltas(layers, d1s, np.ones(n)), n, self.n_params(X.shape[1]))
            return RankOneCurvature(grad_f, self.glm.derivatives(f, y)[2])
        n, d = X.shape[0], self.n_params(X.shape[1])
        budget = expansion.DENSE_HESSIAN_BUDGET
        if n * d * d > budget:
            raise SgtuneError(f"exact per-sample Hessians of the mlp need N·D² = {n}·{d}² = {n * d * d:.3g} numbers "
                              f"(more than {budget:.0e}); use the rank-one curvature (`hessian='gauss-newton'`)")
        hs = self._r_op(theta, X, y, np.eye(d))
        hs += np.swapaxes(hs, 1, 2)  # symmetric to rounding; make it exactly so (numpy buffers the overlap)
        hs *= 0.5
        return DenseCurvature(hs)

    def per_sample_hessians(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The declared J_n as dense (n, D, D) arrays (exact, or ρ''∇f∇fᵀ for Gauss–Newton)."""
        cur = self.curvature(theta, X, y)
        if isinstance(cur, DenseCurvature):
            return cur.hessians
        u, w = cur.features, cur.weights
        return w[:, None, None] * u[:, :, None] * u[:, None, :]

    @cites("sgtune", "J_n v = ∇²l_n v by Pearlmutter's R-operator (forward-over-reverse)")
    def hessian_vector_products(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, v: np.ndarray
                                ) -> np.ndarray:
        """The exact J_n v = ∇²l_n(θ) v for every row by one R-operator pass, shape (n, D), O(n·D) memory.

        Exact whatever ``hessian`` says (a matrix-free route to the true curvature, e.g. to polish
        a fit); the Gauss–Newton products are ρ''(f_n)(∇f_n·v)∇f_n from :meth:`curvature`.
        """
        return self._r_op(theta, X, y, np.asarray(v, dtype=np.float64).reshape(-1, 1))[:, :, 0]


def make_mlp(hidden_sizes: Any, activation: str = "tanh", likelihood: str = "gaussian",
             noise_variance: float = 1.0, hessian: str = "exact") -> MLP:
    """A validated :class:`MLP`; ``hidden_sizes`` may be the CLI string ``"2,3"`` (``""``: no hidden layer).

    Parameters
    ----------
    hidden_sizes : str or sequence of int
        Hidden widths, as a sequence or a comma-separated string.
    activation : {"tanh", "relu", "softplus"}, optional
        Hidden activation.
    likelihood : {"gaussian", "bernoulli", "poisson"}, optional
        The loss −log p(y | f).
    noise_variance : float, optional
        The variance σ² of the Gaussian likelihood.
    hessian : {"exact", "gauss-newton"}, optional
        The per-sample curvature the model declares.

    Returns
    -------
    MLP
        The model.

    Raises
    ------
    SgtuneError
        Any setting out of its domain (the message names the CLI option).

    Examples
    --------
    >>> from sgtune.models import make_mlp
    >>> make_mlp("4,2", activation="relu").hidden_sizes
    (4, 2)
    """
    return MLP(_parse_hidden_sizes(hidden_sizes), activation=activation, likelihood=likelihood,
               noise_variance=noise_variance, hessian=hessian)
