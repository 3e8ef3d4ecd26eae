"""Multinomial logistic regression (softmax regression): K classes, per-sample curvature in blocks.

Observation n has covariates x_n (p numbers, the intercept column first with ``--intercept``)
and a class label y_n, one of K labels sorted c_0 < c_1 < … < c_{K−1} (numbers sort numerically,
strings read from a CSV lexicographically). θ stacks r coefficient vectors β_a, each of length
p, *class-major*: θ[a·p + i] is covariate i of block a. With the logits f_n the per-observation
loss is the negative log-likelihood of the softmax,

    l_n(θ) = log Σ_k exp(f_{n,k}) − f_{n,y_n}.

Two layouts of f (``layout``):

- ``"baseline"`` (the default): r = K − 1. The smallest label c_0 is the reference class with
  logit 0, and block a belongs to class c_{a+1}: f_n = (0, β_0·x_n, …, β_{K−2}·x_n). θ is
  identified without a prior when the classes overlap (no linear rule separates them). This is
  statsmodels' ``MNLogit`` parameterisation (its (p, K−1) ``params`` flattened column by column).
  With K = 2 it is logistic regression with y = 1 for the larger label.
- ``"full"``: r = K, block a belongs to class c_a, f_{n,a} = β_a·x_n — the output layer of a
  network with K outputs. With ``--intercept`` (an intercept column first in X) each block is
  (bias, weights): θ = [b_0, w_0, b_1, w_1, …, b_{K−1}, w_{K−1}], so θ.reshape(K, p) is the layer's
  [bias | weight matrix] with one row per class (a PyTorch ``nn.Linear(p−1, K)`` has
  θ.reshape(K, p)[:, 0] = ``bias`` and θ.reshape(K, p)[:, 1:] = ``weight``). Adding one vector to
  every β_a changes no probability, so the loss is flat along those p directions: θ is identified
  only through the prior (a prior precision > 0 is required) and the sandwich target J⁻¹𝓘J⁻¹/N
  does not exist (J is singular along them).

With π_n the softmax probabilities of the r classes that own a block and e_{y_n} the indicator of
y_n among them,

    g_n = (π_n − e_{y_n}) ⊗ x_n,      J_n = W_n ⊗ x_n x_nᵀ,  W_n = diag(π_n) − π_nπ_nᵀ

(Böhning 1992, *Multinomial logistic regression algorithm*, Ann. Inst. Statist. Math. 44), so
J_n has rank ≤ K − 1. The model declares it as a :class:`~sgtune.models.base.BlockCurvature`: every
curvature sum costs O(N·D²) with D = r·p, never an (N, D, D) array.

Labels. The response y holds numbers: the class values themselves (any integers, any sign), or —
for string labels read from a CSV — the codes 0 … K−1 of the sorted strings, with the strings kept
as ``class_names`` for the parameter names. Build the model from a response with
``Multinomial.from_response`` (the command line does) or :func:`make_multinomial`.

Parameter names: ``class[<label>].<covariate>`` in θ order, e.g. ``class[versicolor].intercept``,
``class[2].x1``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core.errors import DataFormatError, SgtuneError
from .base import BlockCurvature, RankOneCurvature, block_dense, separable

__all__ = ["Multinomial", "LAYOUTS", "make_multinomial", "SUGGESTED_PRIOR_PRECISION"]

#: the parameterisations of the softmax (module docstring)
LAYOUTS = ("baseline", "full")
#: prior precision the messages suggest: a N(0, 1) prior on every coefficient (on standardised covariates
#: weak against the data's N·J in the posterior precision N·H = N·J + Γ)
SUGGESTED_PRIOR_PRECISION = 1.0
#: largest N·(K−1)·p of the joint separation LP (:func:`_separated_pair`): measured with HiGHS on random
#: overlapping and separated problems (N = 1000–5000, p = 10–30, K = 4–6) ≤ 1.5 s at 2·10⁵, while the digits
#: data (N·(K−1)·p = 10⁶) took 170 s. Above it only the one-class-against-the-rest LPs run
SEPARATION_LP_BUDGET = 200_000
#: rows per slice of :meth:`Multinomial.check_response`
_CHECK_ROWS = 1 << 16


def _label_text(c: Any) -> str:
    """A numeric label as the user wrote it: 2 for 2.0."""
    c = float(c)
    return str(int(c)) if c.is_integer() else f"{c:g}"


@dataclass(frozen=True)
class Multinomial:
    """Softmax regression over the sorted class ``labels`` in the given ``layout`` (module docstring).

    Parameters
    ----------
    labels : sequence of numbers
        The K ≥ 2 distinct values the response takes, one per class (sorted here).
    layout : {"baseline", "full"}
        ``baseline``: D = (K−1)·p, the smallest label is the reference class; ``full``: D = K·p,
        one block per class, requires a prior precision > 0.
    class_names : sequence of str, optional
        A display name per class in the order of the sorted ``labels`` (string labels read from a
        CSV); default the labels as text.

    Examples
    --------
    >>> import numpy as np
    >>> from sgtune.models.multinomial import Multinomial
    >>> m = Multinomial.from_response(np.array([0, 2, 1, 2]), layout="full")
    >>> m.n_params(3), m.parameter_names(("intercept", "a", "b"))[:2]
    (9, ('class[0].intercept', 'class[0].a'))
    """

    labels: tuple[float, ...]
    layout: str = "baseline"
    class_names: tuple[str, ...] = ()

    name = "multinomial"
    #: convex in θ: damped Newton from zeros (the MAP is unique when it exists)
    fit_method = "newton"
    #: J_n = W_n ⊗ x_n x_nᵀ (declared before any curvature is computed)
    block_curvature = True

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise SgtuneError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        try:
            raw = np.asarray(self.labels, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise SgtuneError(f"labels must be numbers (the values of the response), got {self.labels!r:.100}; "
                              "encode string labels first (sgtune.io.data.encode_labels)") from None
        labs = np.unique(raw)
        if labs.size < 2:
            raise SgtuneError(f"a multinomial model needs at least 2 classes, got labels {labs.tolist()}")
        if not np.all(np.isfinite(labs)):
            raise SgtuneError(f"class labels must be finite numbers, got {labs.tolist()}")
        names = tuple(str(c) for c in self.class_names) or tuple(_label_text(c) for c in labs)
        if len(names) != labs.size or len(set(names)) != labs.size:
            raise SgtuneError(f"class_names must be {labs.size} distinct names (one per label), got {names!r}")
        object.__setattr__(self, "labels", tuple(float(c) for c in labs))
        object.__setattr__(self, "class_names", names)

    @classmethod
    def from_response(cls, y: Any, layout: str = "baseline", source: str = "y",
                      class_names: tuple[str, ...] = ()) -> "Multinomial":
        """The model whose classes are the distinct values of the response ``y`` (checked: finite, K ≥ 2)."""
        try:
            ya = np.asarray(y, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise DataFormatError(f"{source}: the response holds non-numbers; encode string labels first "
                                  "(sgtune.io.data.encode_labels)") from None
        bad = ~np.isfinite(ya)
        if bad.any():
            raise DataFormatError(f"{source}: y[{int(np.argmax(bad))}] is not finite; a class label must be a number")
        labs = np.unique(ya)
        if labs.size < 2:
            shown = (class_names[0] if class_names else _label_text(labs[0])) if labs.size else "nothing"
            raise DataFormatError(f"{source}: multinomial regression needs at least 2 classes, but every row has "
                                  f"y = {shown} (K = {labs.size})")
        if class_names and len(class_names) != labs.size:
            class_names = tuple(class_names[int(c)] for c in labs)  # codes of a subset of the classes
        return cls(tuple(labs), layout, tuple(class_names))

    # --- layout ------------------------------------------------------------------
    @property
    def n_classes(self) -> int:
        """K."""
        return len(self.labels)

    @property
    def n_blocks(self) -> int:
        """r: K − 1 coefficient vectors (baseline) or K (full)."""
        return self.n_classes - (1 if self.layout == "baseline" else 0)

    @property
    def block_names(self) -> tuple[str, ...]:
        """The class owning each block of θ, in θ order (baseline: every class but the first)."""
        return self.class_names[1:] if self.layout == "baseline" else self.class_names

    @property
    def rank_one(self) -> bool:
        """Two classes in the baseline layout: logistic regression, J_n = π(1 − π) x_n x_nᵀ."""
        return self.n_blocks == 1

    @property
    def sandwich_refusal(self) -> str | None:
        """Why the full layout has no sandwich target (None for the baseline layout)."""
        if self.layout == "baseline":
            return None
        return ("the full softmax layout (`layout='full'`) has no sandwich target: J = mean J_n is singular along the "
                "softmax's shift (adding one vector to every class's coefficients changes no probability), so "
                "J⁻¹𝓘J⁻¹/N does not exist; use `target='posterior'`, or `layout='baseline'`")

    def n_params(self, n_features: int) -> int:
        """D = r·p."""
        return self.n_blocks * int(n_features)

    def parameter_names(self, feature_names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
        """``class[<label>].<covariate>`` in θ order (class-major), e.g. ``class[versicolor].intercept``."""
        return tuple(f"class[{c}].{f}" for c in self.block_names for f in feature_names)

    def parameter_blocks(self, n_features: int) -> list[list[int]]:
        """One block of θ per class that owns coefficients (the default blocks of ``family="block"``)."""
        p = int(n_features)
        return [list(range(a * p, (a + 1) * p)) for a in range(self.n_blocks)]

    def describe(self) -> dict[str, Any]:
        """JSON keys: ``classes`` (the K class names, sorted), ``layout``, ``block_classes`` (the class of each
        block of θ) and, baseline, ``reference_class``."""
        out: dict[str, Any] = {"classes": list(self.class_names), "layout": self.layout,
                               "block_classes": list(self.block_names)}
        if self.layout == "baseline":
            out["reference_class"] = self.class_names[0]
        return out

    # --- checks --------------------------------------------------------------------
    def class_index(self, y: np.ndarray) -> np.ndarray:
        """The position of each y among the sorted labels (y assumed valid: :meth:`check_response`)."""
        return np.searchsorted(np.asarray(self.labels), np.asarray(y, dtype=float))

    def check_response(self, y: np.ndarray, source: str = "y") -> None:
        """Every y is one of the labels, and every class has at least one row (in slices of 2¹⁶ rows: O(1) memory
        beyond y, which out-of-core data keep in memory)."""
        ya = np.asarray(y, dtype=float).reshape(-1)
        labs = np.asarray(self.labels)
        counts = np.zeros(labs.size, dtype=np.int64)
        for start in range(0, ya.size, _CHECK_ROWS):
            part = ya[start:start + _CHECK_ROWS]
            idx = np.minimum(np.searchsorted(labs, part), labs.size - 1)
            bad = labs[idx] != part
            if bad.any():
                i = start + int(np.argmax(bad))
                raise DataFormatError(
                    f"{source}: y[{i}] = {ya[i]:g} is not one of the model's class labels "
                    f"{', '.join(_label_text(c) for c in self.labels)}; build the model from this response "
                    "(Multinomial.from_response)")
            counts += np.bincount(idx, minlength=labs.size)
        if np.any(counts == 0):
            c = self.class_names[int(np.argmin(counts))]
            raise DataFormatError(f"{source}: class {c} has no rows, so its coefficients are not identified by the "
                                  "data; build the model from this response (drop the class) or use data that "
                                  "contain it")

    def check_identifiable(self, X: np.ndarray, y: np.ndarray, prior_precision: np.ndarray, source: str) -> None:
        """Refuse a full layout without a prior on the shift; without a prior, a rank-deficient X or separable
        classes (the MLE does not exist: θ̂ → ∞), naming the classes a linear rule separates."""
        gam = np.asarray(prior_precision, dtype=float)
        p = X.shape[1]
        if self.layout == "full":
            shift = np.kron(np.ones((self.n_blocks, 1)), np.eye(p)) / np.sqrt(self.n_blocks)
            if np.linalg.eigvalsh(shift.T @ gam @ shift)[0] <= 0:
                raise DataFormatError(
                    "`layout='full'` needs a `prior_precision` > 0 (the softmax is identified only through the prior: "
                    "adding one vector to every class's coefficients changes no probability); pass e.g. "
                    f"`prior_precision={SUGGESTED_PRIOR_PRECISION:g}`, or use `layout='baseline'`")
            return
        if np.linalg.eigvalsh(gam)[0] > 0:
            return
        rank = np.linalg.matrix_rank(X)
        if rank < p:
            raise DataFormatError(
                f"{source or 'X'}: the design matrix has rank {rank} < p = {p} (collinear or constant columns), so "
                "θ̂ is not identified; drop columns or pass a `prior_precision` > 0")
        k = self.class_index(y)
        counts = np.bincount(k, minlength=self.n_classes)
        hint = (f"pass a prior precision, e.g. `prior_precision={SUGGESTED_PRIOR_PRECISION:g}` (a N(0, 1) prior on "
                "each coefficient), or merge classes")
        for c in range(self.n_classes):  # one class against the rest: one LP each, names the class
            if separable(X, (k == c).astype(float)):
                raise DataFormatError(
                    f"{source or 'data'}: class {self.class_names[c]} ({counts[c]} rows) is linearly separable from "
                    f"the other classes, so the maximum-likelihood estimate does not exist (θ̂ → ∞); {hint}")
        if X.shape[0] * (self.n_classes - 1) * p > SEPARATION_LP_BUDGET:
            return  # a separation no single class shows: the Newton fit reports it by not converging
        pair = _separated_pair(X, k, self.n_classes)
        if pair is not None:
            a, b = (self.class_names[i] for i in pair)
            raise DataFormatError(
                f"{source or 'data'}: the classes are separable (a linear rule tells class {a} from class {b} "
                f"without error and never ranks another class above a row's own), so the maximum-likelihood "
                f"estimate does not exist (θ̂ → ∞); {hint}")

    def newton_start(self, X: np.ndarray, y: np.ndarray, prior_precision: np.ndarray) -> np.ndarray:
        """Zeros (every class equally likely)."""
        return np.zeros(self.n_params(X.shape[1]))

    def numba_spec(self, n_features: int) -> tuple[str, np.ndarray, np.ndarray]:
        """("multinomial", [K, r, p], the K sorted labels) for the sampler's compiled softmax gradient."""
        return ("multinomial", np.array([self.n_classes, self.n_blocks, int(n_features)], dtype=np.int64),
                np.asarray(self.labels, dtype=np.float64))

    # --- per-sample quantities -------------------------------------------------------
    def logits(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """f (n, K): the logits of every class (baseline: the reference class's column is 0)."""
        p = X.shape[1]
        eta = X @ np.asarray(theta, dtype=float).reshape(self.n_blocks, p).T
        return np.column_stack([np.zeros(X.shape[0]), eta]) if self.layout == "baseline" else eta

    def probabilities(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """π (n, K): the softmax of the logits, stably (the largest logit subtracted)."""
        f = self.logits(theta, X)
        e = np.exp(f - f.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def per_sample_losses(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """l_n(θ) = logsumexp(f_n) − f_{n,y_n}, shape (n,)."""
        f = self.logits(theta, X)
        m = f.max(axis=1)
        lse = m + np.log(np.exp(f - m[:, None]).sum(axis=1))
        return lse - f[np.arange(X.shape[0]), self.class_index(y)]

    @cites("sgtune", "softmax score g_n = (π_n − e_{y_n}) ⊗ x_n")
    def per_sample_grads(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """g_n = (π_n − e_{y_n}) ⊗ x_n over the r blocks' classes, shape (n, D)."""
        res = self.probabilities(theta, X)
        res[np.arange(X.shape[0]), self.class_index(y)] -= 1.0
        res = res[:, self.n_classes - self.n_blocks:]
        return (res[:, :, None] * X[:, None, :]).reshape(X.shape[0], -1)

    @cites("sgtune", "softmax Hessian J_n = (diag π_n − π_nπ_nᵀ) ⊗ x_n x_nᵀ (Böhning 1992)")
    def curvature(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> BlockCurvature | RankOneCurvature:
        """J_n = W_n ⊗ x_n x_nᵀ, W_n = diag(π_n) − π_nπ_nᵀ (r × r); rank one for two classes (baseline)."""
        pi = self.probabilities(theta, X)[:, self.n_classes - self.n_blocks:]
        if self.n_blocks == 1:
            q = pi[:, 0]
            return RankOneCurvature(X, q * (1.0 - q))
        W = -pi[:, :, None] * pi[:, None, :]
        i = np.arange(self.n_blocks)
        W[:, i, i] += pi
        return BlockCurvature(X, W)

    def per_sample_hessians(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Dense J_n, shape (n, D, D): for tests and small n·D² only."""
        cur = self.curvature(theta, X, y)
        if isinstance(cur, RankOneCurvature):
            return cur.weights[:, None, None] * X[:, :, None] * X[:, None, :]
        return block_dense(cur.features, cur.weights)


def make_multinomial(y: Any, layout: str = "baseline", source: str = "y",
                     class_names: tuple[str, ...] = ()) -> Multinomial:
    """Build the multinomial model of the classes of the response ``y`` (``Multinomial.from_response``).

    Parameters
    ----------
    y : array_like
        The responses (class labels, numbers).
    layout : {"baseline", "full"}, optional
        The parameterisation.
    source : str, optional
        What to call the response in messages.
    class_names : tuple of str, optional
        The classes' names (e.g. ``Dataset.classes``).

    Returns
    -------
    Multinomial
        The model.

    Examples
    --------
    >>> from sgtune.models.multinomial import make_multinomial
    >>> model = make_multinomial(np.array([0.0, 1.0, 2.0, 1.0]))
    >>> model.class_names, model.n_params(3)  # baseline layout: (K − 1)·p
    (('0', '1', '2'), 6)
    """
    return Multinomial.from_response(y, layout, source, class_names)


def _separated_pair(X: np.ndarray, k: np.ndarray, n_classes: int) -> tuple[int, int] | None:
    """(a, b) when the classes are (quasi-completely) separated — a nonzero B with (Bx_n)_{y_n} ≥ (Bx_n)_c for
    every row n and class c — naming a pair with a strict margin; None when the MLE exists. One LP (HiGHS).

    Separation is the condition for the multinomial MLE not to exist (Albert & Anderson 1984,
    Biometrika 71(1)): along such a B the loss never increases. The LP maximises the margins
    m_{n,c} = (Bx_n)_{y_n} − (Bx_n)_c, each bounded to [0, 1], over B in the baseline
    parameterisation; a separated data set reaches ≥ 1 (scale B up), an overlapping one 0.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    n, p = X.shape
    r = n_classes - 1  # baseline: class 0's logit is 0, class c ≥ 1 has block c − 1
    rows, cols, vals, pairs = [], [], [], []
    for c in range(n_classes):
        sel = np.flatnonzero(k != c)
        for yy in range(n_classes):  # margin (Bx)_y − (Bx)_c: +x in the block of y, −x in the block of c
            nn = sel[k[sel] == yy]
            if nn.size == 0:
                continue
            base = len(pairs)
            pairs.extend((yy, c) for _ in nn)
            ridx = np.repeat(np.arange(base, base + nn.size), p)
            for blk, sign in ((yy, 1.0), (c, -1.0)):
                if blk == 0:
                    continue
                rows.append(ridx)
                cols.append(np.tile(np.arange((blk - 1) * p, blk * p), nn.size))
                vals.append(sign * X[nn].reshape(-1))
    A = csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(len(pairs), r * p))
    res = milp(-np.asarray(A.sum(axis=0)).reshape(-1), constraints=LinearConstraint(A, 0.0, 1.0),
               bounds=Bounds(-np.inf, np.inf))
    if res.status != 0 or res.x is None or -res.fun < 0.5:
        return None
    return pairs[int(np.argmax(A @ res.x))]
