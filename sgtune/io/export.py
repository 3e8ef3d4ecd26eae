r"""The chain sgtune predicted, in your training loop: a NumPy step, an optax transformation, a PyTorch optimizer.

All three apply the update of Wang, Ding & Huggins (2026) (§2.1; heavy-ball momentum as in their
Prop. B.1):

.. math::  m_t = κ m_{t−1} + G_t(θ_{t−1}),\qquad θ_t = θ_{t−1} − Λ m_t + \sqrt{2/β}\,Λ^{1/2} ξ_t,

ξ_t ~ N(0, I), with Λ, κ, β **read from the tuning result** (κ = 0: plain SG(L)D; β = ∞: no
injected noise, i.e. SGD). Λ^{1/2} is any factor with Λ^{1/2}Λ^{1/2ᵀ} = Λ (a Cholesky factor for
blocks/dense), so the injected noise has covariance 2Λ/β exactly. Λ is kept in its structure —
scalar, diagonal (D,), blocks of index sets, or dense (D, D) — and applied without forming a dense
matrix for the structured kinds.

**What G must be.** G_t is the gradient of the *mean* loss over a minibatch of B rows plus the
prior term: G = (1/B) Σ_{n∈batch} ∇l_n(θ) + Γθ/N, exactly the G of :class:`sgtune.core.config.Dynamics`.
Where Γθ/N comes from is said once, with ``prior``:

- ``prior="in-loss"`` — the gradient you pass already contains Γθ/N (your mean loss includes
  ½θᵀΓθ/N, i.e. weight decay Γ/N), or the fit had no prior (Γ = 0);
- ``prior="add"`` — you pass the data term only and the update adds Γθ/N itself, from
  ``prior_precision=Γ`` and ``n_data=N`` (or the result's own, when it records them).

A bare Λ keeps the old meaning ("in-loss"). A tuning result whose prior is not recorded as zero
needs the choice: a guess either way would be silently wrong by Γθ/N.

**Where the settings come from.** ``numpy_step(result)``, ``optax_transform(result)`` and
``torch_optimizer(result, params)`` take Λ, κ, β and the batch size B from a ``TuningResult``
(its ``dynamics`` when it has one, else its ``step_matrix``, ``momentum``, ``inv_temperature``,
``batch_size``, ``without_replacement``) or from a :class:`~sgtune.core.config.Dynamics`. An explicit
argument that contradicts them is refused ("momentum=0.0 contradicts the result's momentum 0.5: omit
it"). The old call with a bare Λ (a :class:`StepMatrix`, an array) and explicit ``momentum`` /
``inv_temperature`` keeps working. Refused, because the update here would not be the chain the
result describes:

- a step-size schedule (``decay`` > 0): the update uses a constant Λ;
- a result of another sampler (a ``sampler`` other than SGLD/SGD, e.g. SMILE or SGHMC);
- a non-symmetric Λ with β < ∞ (the injected noise needs 2Λ/β symmetric positive definite; SGD
  with a non-symmetric Λ is exported as it is);
- dynamics whose Λ is still to be tuned (``step=None``).

Batching with or without replacement, or by reshuffled epochs, is fine: the caller chooses the
batches (draw them as the result's ``batching`` says; ``UpdateRule.batching``).

**The batch size** B the result was tuned for is checked where the update can see it: the NumPy
step and the optax update take an optional ``batch_size=`` per call; the PyTorch optimizer takes
``step(batch_size=…)`` and, given a module, records the rows of every forward pass run with gradients
enabled since the last step (a forward pre-hook) and refuses a step after a batch of another size.

**The layout.** Every export carries the name of each row of Λ (``StepMatrix.names``: the CSV
header and ``intercept`` of a GLM, ``hidden1.weight[i,j]`` of a network, from the result's
``parameter_names`` or ``parameter_names=``). optax parameters are any pytree: each leaf's key path
(``params["hidden1"]["weight"]``) is matched to the names ``hidden1.weight[i,j]``, so Λ's rows are
applied to the right entries whatever JAX's flattening order (sorted dict keys); PyTorch parameters
are matched by their ``named_parameters`` names. A layout that differs (a missing or extra leaf, a
transposed shape) is refused naming the first difference. ``subset=True`` (optax, PyTorch) and
``vector_names=`` (NumPy) apply a Λ that covers some parameters only — a network's last layer
(:func:`sgtune.models.lastlayer.last_layer`) — to those, by name, and leave the others frozen.

With these updates the chain's stationary covariance is the one sgtune predicts
(:func:`sgtune.theory.stationary.predict_stationary_cov`), which ``tests/test_export*.py`` check by
simulation for every kind, with momentum and with β < ∞, for NumPy, optax and PyTorch.
"""
from __future__ import annotations

import math
import re
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ..core._refs import cites
from ..core._validation import as_float_array, check_int, check_positive, check_probability, is_symmetric
from ..core.config import Dynamics
from ..core.results import default_parameter_names
from ..core.errors import MissingExtraError, NotPositiveDefiniteError, SgtuneError, ShapeError

__all__ = ["StepMatrix", "step_matrix", "UpdateRule", "update_rule", "numpy_step", "optax_transform",
           "torch_optimizer", "TorchOptions", "SGMCMCState", "pytree_parameter_names", "PRIOR_MODES"]

KINDS = ("scalar", "diagonal", "block", "dense")
#: where the prior term Γθ/N of G comes from (module docstring)
PRIOR_MODES = ("in-loss", "add")
#: samplers whose update is the one exported here
_SGLD_SAMPLERS = ("sgld", "sgd")


# --------------------------------------------------------------------------- Λ in its structure
@dataclass(frozen=True)
class StepMatrix:
    """A step-size matrix Λ in its structure, with the name of each row.

    Parameters
    ----------
    kind : {"scalar", "diagonal", "block", "dense"}
        The structure.
    dim : int
        D.
    scalar : float, optional
        The scalar λ (kind scalar).
    diagonal : (D,) ndarray or None, optional
        The diagonal (kind diagonal).
    blocks : tuple of ndarray, optional
        Index arrays (kind block).
    block_values : tuple of ndarray, optional
        The SPD blocks Λ_b (kind block).
    dense : (D, D) ndarray or None, optional
        Λ (kind dense; non-symmetric only for SGD, see :attr:`symmetric`).
    names : tuple of str or None, optional
        The parameter of each row (θ order), or None when unknown.

    See Also
    --------
    step_matrix : Builds one from a result, a Dynamics or an array.

    Examples
    --------
    >>> from sgtune.io.export import StepMatrix
    >>> StepMatrix("scalar", 2, scalar=0.1).to_dense()
    array([[0.1, 0. ],
           [0. , 0.1]])
    """

    kind: str
    dim: int
    scalar: float = float("nan")
    diagonal: np.ndarray | None = None
    blocks: tuple[np.ndarray, ...] = ()
    block_values: tuple[np.ndarray, ...] = ()
    dense: np.ndarray | None = None
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.names is not None:
            names = tuple(str(n) for n in self.names)
            if len(names) != self.dim:
                raise ShapeError(f"parameter_names has {len(names)} names but Λ is {self.dim}×{self.dim}")
            if len(set(names)) != len(names):
                dup = next(n for n in names if names.count(n) > 1)
                raise SgtuneError(f"parameter_names must be distinct, {dup!r} appears twice")
            object.__setattr__(self, "names", names)

    @property
    def symmetric(self) -> bool:
        """False only for a non-symmetric dense Λ (allowed for SGD, β = ∞)."""
        return self.kind != "dense" or bool(np.array_equal(self.dense, np.asarray(self.dense).T))

    def with_names(self, names: Sequence[str] | None) -> "StepMatrix":
        """The same Λ with row names (checked: D distinct strings)."""
        return replace(self, names=None if names is None else tuple(names))

    def to_dense(self) -> np.ndarray:
        """Λ as a (D, D) array (for checks; the step functions never form it for structured kinds)."""
        if self.kind == "scalar":
            return self.scalar * np.eye(self.dim)
        if self.kind == "diagonal":
            return np.diag(self.diagonal)  # type: ignore[arg-type]
        if self.kind == "block":
            out = np.zeros((self.dim, self.dim))
            for b, v in zip(self.blocks, self.block_values):
                out[np.ix_(b, b)] = v
            return out
        return np.array(self.dense)

    def factors(self) -> Any:
        """Λ^{1/2} in the same structure (sqrt for scalar/diagonal, Cholesky factors otherwise)."""
        if self.kind == "scalar":
            return math.sqrt(self.scalar)
        if self.kind == "diagonal":
            return np.sqrt(self.diagonal)  # type: ignore[arg-type]
        if self.kind == "block":
            return tuple(np.linalg.cholesky(v) for v in self.block_values)
        if not self.symmetric:
            raise NotPositiveDefiniteError("a non-symmetric Λ has no factor Λ^{1/2}: it can only run as SGD (β = ∞)")
        return np.linalg.cholesky(self.dense)  # type: ignore[arg-type]


def _is_result(value: Any) -> bool:
    return (hasattr(value, "step_matrix") or hasattr(value, "dynamics")) and not isinstance(value, StepMatrix)


def _blocks_of_pattern(arr: np.ndarray) -> list[list[int]]:
    """The index sets of the connected components of Λ's non-zero pattern (a block result's blocks)."""
    from scipy.sparse.csgraph import connected_components

    _, label = connected_components(arr != 0, directed=False)
    return [np.flatnonzero(label == k).tolist() for k in range(int(label.max()) + 1)]


@cites("wang2026", "§2.1: Λ a D×D step-size matrix (scalar λ means Λ = λI)")
def step_matrix(value: Any, *, kind: str | None = None, blocks: Any = None,
                names: Sequence[str] | None = None) -> StepMatrix:
    """A :class:`StepMatrix` from a scalar, a (D,) diagonal, a (D, D) matrix, a ``Dynamics`` or a ``TuningResult``.

    ``kind`` picks the structure of a (D, D) input (default: the ``family`` of a ``TuningResult``,
    else ``dense``); ``kind="block"`` keeps only Λ's diagonal blocks over ``blocks`` (lists of indices
    partitioning 0..D−1; for a block result, default: the connected components of Λ's non-zero
    pattern, which represent it exactly), which must be symmetric positive definite. A symmetric Λ
    must be positive definite; a non-symmetric one is kept as it is (kind ``dense``, SGD only).
    ``names`` (default: the result's ``parameter_names``) names the rows. A scalar needs the
    dimension: give ``names`` (one per parameter).

    Parameters
    ----------
    value : float, array_like, Dynamics, TuningResult or StepMatrix
        Λ or what holds it.
    kind : {"scalar", "diagonal", "block", "dense"} or None, optional
        The structure of a (D, D) input.
    blocks : list of list of int or None, optional
        The index sets of ``kind="block"``.
    names : sequence of str or None, optional
        The name of each row.

    Returns
    -------
    StepMatrix
        Λ in its structure.

    Raises
    ------
    SgtuneError
        A scalar without ``names``, an unknown kind, or blocks that are not SPD.
    NotPositiveDefiniteError
        A symmetric Λ that is not positive definite.

    Examples
    --------
    >>> from sgtune.io.export import step_matrix
    >>> lam = step_matrix([0.1, 0.2], names=["age", "dose"])
    >>> lam.kind, lam.dim, lam.names
    ('diagonal', 2, ('age', 'dose'))
    """
    from .blocks import load_blocks

    if isinstance(value, StepMatrix):
        return value if names is None else value.with_names(names)
    recorded = _is_result(value) or isinstance(value, Dynamics)
    if recorded:
        dyn = value if isinstance(value, Dynamics) else getattr(value, "dynamics", None)
        if kind is None:
            kind = getattr(value, "family", None)
        if names is None:
            names = getattr(value, "parameter_names", None)
        value = dyn.step if dyn is not None else value.step_matrix
        if value is None:
            raise SgtuneError("step_matrix: these dynamics have no Λ yet (step=None): tune one first")
    arr = as_float_array(value, "step_matrix")
    if arr.ndim == 0:
        if names is None:
            raise SgtuneError("step_matrix: a scalar needs the dimension; pass names= (one per parameter), "
                              "step_matrix(lam * np.ones(D)) or StepMatrix('scalar', D, scalar=lam)")
        if not float(arr) > 0:
            raise NotPositiveDefiniteError(f"step_matrix: a scalar Λ = λI needs λ > 0, got {float(arr):g}")
        return StepMatrix("scalar", len(names), scalar=float(arr), names=tuple(names))
    if arr.ndim == 1:
        if kind not in (None, "diagonal", "scalar"):
            raise SgtuneError(f"step_matrix: a (D,) vector is a diagonal Λ, not kind {kind!r}")
        if not np.all(arr > 0):
            raise NotPositiveDefiniteError(f"step_matrix: the diagonal must be positive, smallest {arr.min():g}")
        if kind == "scalar":
            if not np.all(arr == arr[0]):
                raise SgtuneError("step_matrix: kind 'scalar' needs equal diagonal entries")
            return StepMatrix("scalar", arr.shape[0], scalar=float(arr[0]), names=_names(names))
        return StepMatrix("diagonal", arr.shape[0], diagonal=arr.copy(), names=_names(names))
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ShapeError(f"step_matrix must be (D,) or (D, D), got shape {arr.shape}")
    d = arr.shape[0]
    kind = kind or "dense"
    if kind not in KINDS:
        raise SgtuneError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    symmetric = is_symmetric(arr) or np.linalg.norm(arr - arr.T) <= 1e-12 * np.linalg.norm(arr)
    if not symmetric:
        if kind != "dense":
            raise SgtuneError(f"step_matrix: kind {kind!r} needs a symmetric Λ; this one is not (export it as dense)")
        return StepMatrix("dense", d, dense=arr.copy(), names=_names(names))
    if kind == "scalar":
        return StepMatrix("scalar", d, scalar=float(arr[0, 0]), names=_names(names))
    if kind == "diagonal":
        return step_matrix(np.diag(arr).copy(), names=names)
    if kind == "block":
        if blocks is None and not recorded:
            raise SgtuneError("step_matrix: kind 'block' needs blocks (lists of parameter indices)")
        part = load_blocks(_blocks_of_pattern(arr) if blocks is None else blocks, d)
        vals = tuple(0.5 * (arr[np.ix_(b, b)] + arr[np.ix_(b, b)].T) for b in part)
        for v in vals:
            _check_spd(v)
        return StepMatrix("block", d, blocks=part, block_values=vals, names=_names(names))
    sym = 0.5 * (arr + arr.T)
    _check_spd(sym)
    return StepMatrix("dense", d, dense=sym, names=_names(names))


def _names(names: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if names is None else tuple(str(n) for n in names)


def _check_spd(a: np.ndarray) -> None:
    try:
        np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        raise NotPositiveDefiniteError(f"step_matrix must be symmetric positive definite; smallest eigenvalue "
                                       f"{np.linalg.eigvalsh(a)[0]:.3g}") from None


# --------------------------------------------------------------------------- the update, from a result
@dataclass(frozen=True)
class UpdateRule:
    """Everything an export applies: m ← κm + G, θ ← θ − Λm + sqrt(2/β)Λ^{1/2}ξ (module docstring).

    Attributes
    ----------
    step : StepMatrix
        Λ, with its row names.
    momentum : float
        The heavy-ball momentum κ.
    inv_temperature : float
        The inverse temperature β (``inf``: SGD).
    batch_size : int or None
        B the predicted covariance holds for (None: not known, not checked).
    batching : str or None
        The result's batching (None: not known); the caller draws the batches.
    prior : str
        ``"in-loss"`` (G passed in contains Γθ/N) or ``"add"`` (the update adds Γθ/N).
    prior_precision : ndarray or None
        Γ for ``prior="add"``: a scalar, a (D,) diagonal or a (D, D) matrix.
    n_data : int or None
        N for ``prior="add"``.

    See Also
    --------
    update_rule : Builds one, with the checks.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.export import update_rule
    >>> rule = update_rule(Dynamics([0.1, 0.1], batch_size=32, momentum=0.5), prior="in-loss")
    >>> rule.momentum, rule.batch_size, rule.step.kind
    (0.5, 32, 'diagonal')
    """

    step: StepMatrix
    momentum: float = 0.0
    inv_temperature: float = math.inf
    batch_size: int | None = None
    batching: str | None = None
    prior: str = "in-loss"
    prior_precision: np.ndarray | None = None
    n_data: int | None = None

    @property
    def names(self) -> tuple[str, ...] | None:
        """The parameter of each row of Λ (θ order), or None."""
        return self.step.names

    @property
    def noise_scale(self) -> float:
        """sqrt(2/β) (0 for SGD)."""
        return math.sqrt(2.0 / self.inv_temperature) if math.isfinite(self.inv_temperature) else 0.0

    def prior_term(self, theta: np.ndarray) -> np.ndarray:
        """Γθ/N for θ of shape (..., D) (zeros unless ``prior="add"``)."""
        if self.prior != "add" or self.prior_precision is None:
            return np.zeros_like(theta)
        g = self.prior_precision
        return (theta @ g.T if g.ndim == 2 else g * theta) / self.n_data  # type: ignore[operator]

    def check_batch_size(self, batch_size: Any, where: str) -> None:
        """Refuse a minibatch of another size than the B the result was tuned for (when both are known)."""
        if batch_size is None or self.batch_size is None:
            return
        try:
            b = int(batch_size)
        except Exception:  # a traced value (jax.jit): nothing to compare
            raise SgtuneError(f"{where}: batch_size must be a Python int (it is checked when the update is built "
                              f"or traced), got {type(batch_size).__name__}") from None
        if b != self.batch_size:
            raise SgtuneError(f"{where}: a batch of {b} rows, but the result was tuned for B = {self.batch_size}: "
                              f"its predicted covariance holds for batches of {self.batch_size} (tune again for {b})")

    def describe(self) -> str:
        """One line: the kind of Λ, κ, β, B and the prior term."""
        beta = "∞ (SGD)" if not math.isfinite(self.inv_temperature) else f"{self.inv_temperature:g}"
        b = "unchecked" if self.batch_size is None else str(self.batch_size)
        prior = "in the loss" if self.prior == "in-loss" else f"added (Γθ/N, N = {self.n_data})"
        return (f"Λ {self.step.kind} {self.step.dim}×{self.step.dim}, momentum κ = {self.momentum:g}, "
                f"β = {beta}, batch size B = {b}, prior term {prior}")


def _same(a: float, b: float) -> bool:
    return a == b or (math.isfinite(a) and math.isfinite(b) and math.isclose(a, b, rel_tol=1e-12))


def _agree(arg: str, given: Any, recorded: Any, label: str) -> Any:
    """``given`` unless it contradicts ``recorded`` (then one line: omit it)."""
    if given is None:
        return recorded
    try:
        number = float(given) if not isinstance(given, (str, bytes, bool)) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if math.isnan(number):
        raise SgtuneError(f"{arg} must be a number, got {given!r}")
    if recorded is not None and not _same(number, float(recorded)):
        rec = f"{float(recorded):g}" if arg != "batch_size" else str(int(recorded))
        raise SgtuneError(f"{arg}={given!r} contradicts {label} {arg} {rec}: omit it")
    return given


def _settings_of(source: Any) -> dict[str, Any]:
    """What a Dynamics or a result records: Λ (and its family), κ, β, B, batching, decay, names, Γ, N, sampler."""
    dyn = source if isinstance(source, Dynamics) else getattr(source, "dynamics", None)
    label = "the dynamics'" if isinstance(source, Dynamics) else "the result's"
    if dyn is not None:
        out = dict(step=dyn.step, momentum=dyn.momentum, inv_temperature=dyn.inv_temperature,
                   batch_size=dyn.batch_size, batching=dyn.batching, decay=dyn.decay)
    else:
        wor = getattr(source, "without_replacement", None)
        out = dict(step=source.step_matrix, momentum=getattr(source, "momentum", None),
                   inv_temperature=getattr(source, "inv_temperature", None),
                   batch_size=getattr(source, "batch_size", None),
                   batching=None if wor is None else ("without-replacement" if wor else "replacement"),
                   decay=getattr(source, "decay", 0.0) or 0.0)
    out.update(label=label, family=getattr(source, "family", None), sampler=getattr(source, "sampler", None),
               names=getattr(source, "parameter_names", None), prior_precision=getattr(source, "prior_precision", None),
               n_data=getattr(source, "n_data", None))
    return out


def _prior_matrix(value: Any, d: int) -> np.ndarray:
    """Γ as a 0-d scalar, a (D,) diagonal or a symmetric (D, D) matrix, all entries finite (diagonal ≥ 0)."""
    g = as_float_array(value, "prior_precision")
    if g.ndim == 2 and g.shape == (d, d) and np.count_nonzero(g - np.diag(np.diag(g))) == 0:
        g = np.diag(g).copy()
    if g.ndim == 0 or (g.ndim == 1 and g.shape[0] == d):
        if np.any(g < 0):
            raise SgtuneError(f"prior_precision must be >= 0, got {float(np.min(g)):g}")
        return g
    if g.shape != (d, d) or not is_symmetric(g):
        raise ShapeError(f"prior_precision must be a scalar, a ({d},) diagonal or a symmetric ({d}, {d}) matrix, "
                         f"got shape {g.shape}")
    return g


def _dense_prior(g: np.ndarray, d: int) -> np.ndarray:
    """Γ of :func:`_prior_matrix` as a (D, D) matrix."""
    return g if g.ndim == 2 else np.diag(np.broadcast_to(g, (d,)))


def _resolve_prior(prior: str | None, gamma: Any, n_data: Any, s: dict[str, Any], d: int,
                   where: str) -> tuple[str, np.ndarray | None, int | None]:
    """(mode, Γ, N): ``prior`` checked against what is given and what the source records."""
    if prior is not None and prior not in PRIOR_MODES:
        raise SgtuneError(f"{where}: prior must be one of {', '.join(repr(m) for m in PRIOR_MODES)}, got {prior!r}")
    rec_g = None if s.get("prior_precision") is None else _prior_matrix(s["prior_precision"], d)
    given_g = None if gamma is None else _prior_matrix(gamma, d)
    if rec_g is not None and given_g is not None and not np.allclose(
            _dense_prior(rec_g, d), _dense_prior(given_g, d), rtol=1e-12, atol=0):  # Γ = 1 is the identity
        raise SgtuneError(f"prior_precision contradicts {s['label']} prior precision: omit it")
    n = _agree("n_data", n_data, s.get("n_data"), s.get("label", "the source's"))
    gam = given_g if given_g is not None else rec_g
    if prior is None:
        if given_g is not None:
            prior = "add"
        elif not s.get("is_result") or (rec_g is not None and not np.any(rec_g)):
            prior = "in-loss"  # a bare Λ (the old meaning), or a result recorded without prior
        else:
            add = ("prior='add' (the update adds Γθ/N, Γ and N as the result records them)" if rec_g is not None
                   and s.get("n_data") is not None else "prior='add' with prior_precision=Γ and n_data=N (the update "
                   "adds Γθ/N)")
            had = "the fit had a prior: " if rec_g is not None else ""
            raise SgtuneError(
                f"{where}: {had}say where the prior term Γθ/N of the gradient comes from: prior='in-loss' (the "
                f"gradient you pass is that of your mean loss including ½θᵀΓθ/N) or {add}")
    if prior == "in-loss":
        if given_g is not None:
            raise SgtuneError(f"{where}: prior_precision is used only with prior='add' (with prior='in-loss' your "
                              "loss holds the prior term): omit one")
        return prior, None, None
    if gam is None:
        raise SgtuneError(f"{where}: prior='add' needs the prior precision: pass prior_precision=Γ and n_data=N")
    if not np.any(gam):
        return "in-loss", None, None
    if n is None:
        raise SgtuneError(f"{where}: prior='add' needs the number of observations: pass n_data=N (the prior term "
                          "is Γθ/N)")
    return prior, gam, check_int(n, "n_data", low=1)


def update_rule(source: Any, *, momentum: float | None = None, inv_temperature: float | None = None,
                batch_size: int | None = None, parameter_names: Sequence[str] | None = None, blocks: Any = None,
                prior: str | None = None, prior_precision: Any = None, n_data: int | None = None,
                where: str = "export") -> UpdateRule:
    """The :class:`UpdateRule` of a ``TuningResult``, a ``Dynamics`` or a bare Λ, with explicit settings checked.

    From a result or dynamics, Λ, κ, β, B (and the batching) are theirs; an explicit ``momentum``,
    ``inv_temperature`` or ``batch_size`` must agree (else one line: omit it), and a schedule, another
    sampler or a non-symmetric Λ with β < ∞ is refused (module docstring). A bare Λ (a
    :class:`StepMatrix` or an array) takes κ = 0, β = ∞ and no batch-size check unless given.
    ``prior``, ``prior_precision``, ``n_data``: where Γθ/N comes from (module docstring).

    Parameters
    ----------
    source : TuningResult, Dynamics, StepMatrix or array_like
        What the update applies.
    momentum, inv_temperature : float or None, optional
        The momentum κ and the inverse temperature β for a bare Λ (default 0 and ``inf``); for a
        result, they must agree with its own.
    batch_size : int or None, optional
        B the rule is checked against (a result's own B by default).
    parameter_names : sequence of str or None, optional
        The name of each row of Λ (default: the result's ``parameter_names``).
    blocks : list of list of int or None, optional
        The blocks of a ``block`` Λ (:func:`step_matrix`).
    prior : {"in-loss", "add"} or None, optional
        Where the gradient's prior term Γθ/N comes from (module docstring).
    prior_precision : float or array_like, optional
        Γ, for ``prior="add"``.
    n_data : int or None, optional
        N, for ``prior="add"``.
    where : str, optional
        The caller's name in messages.

    Returns
    -------
    UpdateRule
        Λ, κ, β, B, the batching and the prior's handling.

    Raises
    ------
    SgtuneError
        A setting that contradicts the source, a missing ``prior`` choice, a step-size schedule,
        another sampler, or a non-symmetric Λ with β < ∞ (module docstring).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.export import update_rule
    >>> update_rule(Dynamics(0.1, batch_size=32, momentum=0.9), parameter_names=["a", "b"],
    ...             prior="in-loss").momentum
    0.9
    """
    if isinstance(source, UpdateRule):  # already resolved: nothing may change it
        given = {k: v for k, v in dict(momentum=momentum, inv_temperature=inv_temperature, batch_size=batch_size,
                                       parameter_names=parameter_names, blocks=blocks, prior=prior,
                                       prior_precision=prior_precision, n_data=n_data).items() if v is not None}
        if given:
            raise SgtuneError(f"{where}: an UpdateRule is complete; {next(iter(given))}= cannot change it (build the "
                              "rule again from the result)")
        return source
    if _is_result(source) or isinstance(source, Dynamics):
        s = _settings_of(source)
        s["is_result"] = True
    else:
        s = dict(step=source, momentum=None, inv_temperature=None, batch_size=None, batching=None, decay=0.0,
                 label="the step matrix's", family=None, sampler=None,
                 names=getattr(source, "names", None), prior_precision=None, n_data=None, is_result=False)
    label = s["label"]
    if s["sampler"] is not None and str(s["sampler"]).lower() not in _SGLD_SAMPLERS:
        raise SgtuneError(f"{where}: {label} sampler is {s['sampler']!r}; only SGLD/SGD updates are exported "
                          "(m ← κm + G, θ ← θ − Λm + sqrt(2Λ/β)ξ)")
    if s["decay"]:
        raise SgtuneError(f"{where}: {label} step size decays (Λ_t = Λ(1 + t)^−{s['decay']:g}); the exported update "
                          "uses a constant Λ, whose stationary covariance is what sgtune predicts: tune with decay 0")
    if s["step"] is None:
        raise SgtuneError(f"{where}: {label} Λ is still to be tuned (step=None): tune it first")
    rec_names = None if s["names"] is None else tuple(str(n) for n in s["names"])
    if parameter_names is not None and _informative(rec_names) is not None and tuple(parameter_names) != rec_names:
        i = next((k for k, (a, b) in enumerate(zip(parameter_names, rec_names)) if a != b),
                 min(len(parameter_names), len(rec_names)))
        ga = parameter_names[i] if i < len(parameter_names) else "(none)"
        ra = rec_names[i] if i < len(rec_names) else "(none)"
        raise SgtuneError(f"parameter_names contradicts {label} parameter names at row {i} ({ga!r} vs {ra!r}): omit it")
    names = rec_names if parameter_names is None else tuple(str(n) for n in parameter_names)
    if s["family"] == "block" and blocks is None and s["is_result"]:  # a block result: its non-zero pattern
        blocks = _blocks_of_pattern(as_float_array(s["step"], "step_matrix"))
    lam = step_matrix(s["step"], kind=s["family"], blocks=blocks, names=names)
    kappa = check_probability(_agree("momentum", momentum, s["momentum"], label) or 0.0, "momentum")
    beta = _agree("inv_temperature", inv_temperature, s["inv_temperature"], label)
    beta = check_positive(math.inf if beta is None else beta, "inv_temperature", allow_inf=True)
    b = _agree("batch_size", batch_size, s["batch_size"], label)
    b = None if b is None else check_int(b, "batch_size", low=1)
    if math.isfinite(beta) and not lam.symmetric:
        raise SgtuneError(f"{where}: Λ is not symmetric, so the injected noise sqrt(2Λ/β)ξ is not defined at "
                          f"β = {beta:g}: a non-symmetric Λ runs only as SGD (β = ∞)")
    mode, gam, n = _resolve_prior(prior, prior_precision, n_data, s, lam.dim, where)
    return UpdateRule(lam, kappa, beta, b, s["batching"], mode, gam, n)


# --------------------------------------------------------------------------- the layout: names ↔ rows of Λ
_INDEXED = re.compile(r"^(.*)\[([^\[\]]*)\]$")


def _layout_groups(names: Sequence[str]) -> dict[str, tuple[tuple[int, ...], np.ndarray | None]]:
    """prefix → (shape, θ rows in that shape) from names ``prefix[i,j]`` (``prefix`` for a single entry).

    Along each axis, integer labels are positions; other labels (a first layer's covariate names,
    ``hidden1.weight[0,x2]``) take their order of first appearance. A group that is not a full
    rectangular array has rows None (no array leaf matches it).
    """
    entries: dict[str, list[tuple[tuple[str, ...], int]]] = {}
    for row, name in enumerate(names):
        m = _INDEXED.match(name)
        prefix, labels = (m.group(1), tuple(x.strip() for x in m.group(2).split(","))) if m else (name, ())
        entries.setdefault(prefix, []).append((labels, row))
    out: dict[str, tuple[tuple[int, ...], np.ndarray | None]] = {}
    for prefix, items in entries.items():
        ndim = len(items[0][0])
        if any(len(lab) != ndim for lab, _ in items):
            out[prefix] = ((len(items),), None)
            continue
        pos = []
        for ax in range(ndim):
            labs = [lab[ax] for lab, _ in items]
            if all(re.fullmatch(r"\d+", x) for x in labs):
                pos.append([int(x) for x in labs])
            else:
                order = {x: k for k, x in enumerate(dict.fromkeys(labs))}
                pos.append([order[x] for x in labs])
        shape = tuple(max(p) + 1 for p in pos)
        rows = np.full(shape, -1, dtype=np.int64)
        for k, (_, row) in enumerate(items):
            rows[tuple(p[k] for p in pos)] = row
        out[prefix] = (shape, rows if len(items) == rows.size and np.all(rows >= 0) else None)
    return out


def _informative(names: Sequence[str] | None) -> tuple[str, ...] | None:
    """``names`` as a tuple, or None when they are absent or only the default ``theta[0]`` … ``theta[D−1]``
    (which say nothing about a layout: the rows are then matched in θ order, as without names)."""
    if names is None:
        return None
    out = tuple(str(n) for n in names)
    return None if out == default_parameter_names(len(out)) else out


def _match_layout(leaves: list[tuple[str, str | None, tuple[int, ...]]], names: Sequence[str] | None, dim: int,
                  where: str) -> list[np.ndarray]:
    """The θ rows of every leaf (each an int array of the leaf's shape), or one line naming the first difference.

    ``leaves``: (label for messages, prefix — the dotted key path, None when unnamed —, shape). A single
    leaf of D entries takes θ in order; otherwise every leaf must be a group of ``names`` of the same
    shape, and every group a leaf (unnamed leaves: the groups in θ order, matched by shape).
    """
    sizes = [int(np.prod(s, dtype=np.int64)) for _, _, s in leaves]
    names = _informative(names)
    groups = None if names is None else _layout_groups(names)
    named = groups is not None and not (len(leaves) == 1 and leaves[0][1] not in groups)
    if not named and sum(sizes) != dim:
        raise ShapeError(f"{where}: the parameters have {sum(sizes)} entries but Λ is {dim}×{dim}")
    if len(leaves) == 1 and (groups is None or leaves[0][1] not in groups):
        return [np.arange(dim, dtype=np.int64).reshape(leaves[0][2])]
    if groups is None:
        if all(prefix is None for _, prefix, _ in leaves):  # a list of tensors: θ is their concatenation
            offs = np.concatenate([[0], np.cumsum(sizes)])
            return [np.arange(a, b, dtype=np.int64).reshape(s) for a, b, (_, _, s) in zip(offs[:-1], offs[1:], leaves)]
        raise SgtuneError(f"{where}: Λ carries no parameter names, so its rows cannot be matched to the "
                          f"{len(leaves)} parameter arrays (first {leaves[0][0]}): pass parameter_names= (θ order; "
                          "pytree_parameter_names(params) if Λ's rows are in JAX's flattening order)")
    first = f"{names[0]} … {names[-1]}"  # type: ignore[index]
    out = []
    if all(prefix is None for _, prefix, _ in leaves):
        items = list(groups.items())
        for k, (label, _, shape) in enumerate(leaves):
            if k >= len(items) or items[k][1][0] != shape or items[k][1][1] is None:
                want = f"{items[k][0]} {items[k][1][0]}" if k < len(items) else "nothing"
                raise SgtuneError(f"{where}: parameter {k} (shape {shape}) does not match the layout ({first}): "
                                  f"its array {k} is {want}; pass the module so the names are matched")
            out.append(items[k][1][1])
        if len(items) != len(leaves):
            raise SgtuneError(f"{where}: the layout's {items[len(leaves)][0]} has no parameter ({len(leaves)} given)")
        return out
    seen = set()
    for label, prefix, shape in leaves:
        if prefix not in groups:
            if any(p in groups for _, p, _ in leaves):  # some parameters are Λ's: a last layer, say
                subset = "options=TorchOptions(subset=True)" if where == "torch_optimizer" else "subset=True"
                raise SgtuneError(f"{where}: parameter {label} has no rows in the layout ({first}); pass {subset} "
                                  "to update only the parameters Λ's rows name (the others stay frozen)")
            raise SgtuneError(f"{where}: parameter {label} has no rows in the layout ({first}); rename it, or give "
                              "parameter_names= for these parameters")
        gshape, rows = groups[prefix]
        if rows is None or gshape != shape:
            raise SgtuneError(f"{where}: parameter {label} has shape {shape} but the layout's {prefix} is "
                              f"{gshape if rows is not None else 'not an array'}")
        seen.add(prefix)
        out.append(rows)
    missing = [p for p in groups if p not in seen]
    if missing:
        raise SgtuneError(f"{where}: the layout's {missing[0]} has no parameter among the {len(leaves)} given")
    return out


def _subset_leaves(leaves: list[tuple[str, str | None, tuple[int, ...]]], names: Sequence[str] | None,
                   where: str) -> list[int]:
    """Positions of the leaves whose prefix is a group of ``names`` (``subset=True``: the others stay frozen).

    Refuses Λ without names (nothing to select by) and a selection that is empty; :func:`_match_layout`
    then checks the selected leaves' shapes and that every group of the layout has its leaf.
    """
    if names is None:
        raise SgtuneError(f"{where}: subset=True selects the parameters Λ's rows name, but Λ carries no parameter "
                          "names; pass parameter_names= (e.g. the result's, output.weight[k,j])")
    groups = _layout_groups(names)
    keep = [k for k, (_, prefix, _) in enumerate(leaves) if prefix in groups]
    if not keep:
        raise SgtuneError(f"{where}: subset=True, but none of the {len(leaves)} parameters ({leaves[0][0]}, …) is "
                          f"named in Λ's layout ({names[0]} … {names[-1]}); give the module or pytree that holds them")
    return keep


def _key_name(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _pytree_leaves(tree: Any) -> list[tuple[str, str, tuple[int, ...]]]:
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path) or "(the array)", ".".join(_key_name(k) for k in path),
             tuple(np.shape(leaf))) for path, leaf in flat]


def pytree_parameter_names(params: Any) -> list[str]:
    """Name every entry of a JAX pytree (``hidden1.weight[i,j]``), in JAX's flattening order (``ravel_pytree``).

    For a Λ whose rows are in that order (e.g. tuned on ``ravel_pytree(params)``): pass them as
    ``parameter_names=`` so :func:`optax_transform` can check the pytree it is given.

    Parameters
    ----------
    params : pytree
        The parameters (nested dicts, lists or tuples of arrays).

    Returns
    -------
    list of str
        One name per scalar entry.

    Examples
    --------
    >>> from sgtune.io.export import pytree_parameter_names
    >>> pytree_parameter_names({"w": np.zeros((2, 1)), "b": np.zeros(1)})
    ['b[0]', 'w[0,0]', 'w[1,0]']
    """
    out: list[str] = []
    for _, prefix, shape in _pytree_leaves(params):
        out += [f"{prefix}[{','.join(map(str, i))}]" if shape else prefix for i in np.ndindex(*shape)]
    return out


# --------------------------------------------------------------------------- NumPy
def _apply_numpy(lam: StepMatrix, v: np.ndarray, factor: Any = None) -> np.ndarray:
    """Λ v (or Λ^{1/2} v with ``factor``) for v of shape (..., D), without a dense matrix for structured Λ."""
    if lam.kind == "scalar":
        return (lam.scalar if factor is None else factor) * v
    if lam.kind == "diagonal":
        return (lam.diagonal if factor is None else factor) * v
    if lam.kind == "block":
        out = np.empty_like(v)
        mats = lam.block_values if factor is None else factor
        for b, m in zip(lam.blocks, mats):
            out[..., b] = v[..., b] @ m.T
        return out
    return v @ (lam.dense if factor is None else factor).T


@cites("wang2026", "§2.1 update θ ← θ − ΛG + sqrt(2Λ/β)ξ; momentum as in Prop. B.1")
def numpy_step(source: Any, *, momentum: float | None = None, inv_temperature: float | None = None,
               batch_size: int | None = None, parameter_names: Sequence[str] | None = None, blocks: Any = None,
               prior: str | None = None, prior_precision: Any = None, n_data: int | None = None,
               rng: np.random.Generator | None = None,
               vector_names: Sequence[str] | None = None) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    r"""A NumPy step ``(θ, m, G[, batch_size=b]) ↦ (θ', m')``: m' = κm + G, θ' = θ − Λm' + sqrt(2/β)Λ^{1/2}ξ.

    ``source``: a ``TuningResult`` or ``Dynamics`` (Λ, κ, β, B are theirs) or a bare Λ (module
    docstring; the other arguments as in :func:`update_rule`). θ, m and G may carry leading batch
    axes (e.g. (chains, D)), in θ order (``step.rule.names``); G is the mean-loss minibatch gradient
    at θ (with Γθ/N unless ``prior="add"``). Start with m = 0. Pass ``batch_size=`` (the rows of the
    batch behind G) to have it checked against the B the result was tuned for. The rule applied is
    ``step.rule`` (:class:`UpdateRule`).

    Parameters
    ----------
    source : TuningResult, Dynamics, StepMatrix or array_like
        What the update applies.
    momentum, inv_temperature : float or None, optional
        The momentum κ and the inverse temperature β for a bare Λ (default 0 and ``inf``); for a
        result, they must agree with its own.
    batch_size : int or None, optional
        B the rule is checked against (a result's own B by default).
    parameter_names : sequence of str or None, optional
        The name of each row of Λ (default: the result's ``parameter_names``).
    blocks : list of list of int or None, optional
        The blocks of a ``block`` Λ (:func:`step_matrix`).
    prior : {"in-loss", "add"} or None, optional
        Where the gradient's prior term Γθ/N comes from (module docstring).
    prior_precision : float or array_like, optional
        Γ, for ``prior="add"``.
    n_data : int or None, optional
        N, for ``prior="add"``.
    rng : numpy.random.Generator or None, optional
        The noise stream (default ``numpy.random.default_rng()``).
    vector_names : sequence of str or None, optional
        Λ covers part of a longer vector (e.g. a network's last layer,
        :func:`sgtune.models.lastlayer.last_layer`, inside the whole network's parameters): the
        names of that vector's entries, in its order. The step then takes and returns the whole
        vector (θ, m and G of its length), applies the update to the entries Λ's names name (each
        must occur once) and leaves every other entry unchanged (frozen; its m stays 0).

    Returns
    -------
    callable
        ``step(theta, m, grad, *, batch_size=None) -> (theta, m)``, with the rule as ``step.rule``.

    Raises
    ------
    SgtuneError
        A setting that contradicts the source, a missing ``prior`` choice, a step-size schedule,
        another sampler, or a non-symmetric Λ with β < ∞ (module docstring).

    See Also
    --------
    optax_transform, torch_optimizer : The same update for JAX and PyTorch.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.export import numpy_step
    >>> step = numpy_step(Dynamics([0.1, 0.2], batch_size=32), prior="in-loss")  # SGD: β = ∞
    >>> step(np.ones(2), np.zeros(2), np.array([1.0, 1.0]), batch_size=32)
    (array([0.9, 0.8]), array([1., 1.]))
    """
    rule = update_rule(source, momentum=momentum, inv_temperature=inv_temperature, batch_size=batch_size,
                       parameter_names=parameter_names, blocks=blocks, prior=prior, prior_precision=prior_precision,
                       n_data=n_data, where="numpy_step")
    L, kappa, scale = rule.step, rule.momentum, rule.noise_scale
    fac = L.factors() if scale > 0 else None
    gen = rng if rng is not None else np.random.default_rng()
    if vector_names is not None:
        return _subset_numpy_step(numpy_step(rule.step, momentum=kappa, inv_temperature=rule.inv_temperature,
                                             batch_size=rule.batch_size, prior=rule.prior,
                                             prior_precision=rule.prior_precision, n_data=rule.n_data, rng=gen),
                                  rule, vector_names)

    def step(theta: np.ndarray, m: np.ndarray, grad: np.ndarray, *,
             batch_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        theta, m, grad = _step_arrays(theta, m, grad, L.dim)
        rule.check_batch_size(batch_size, "numpy_step")
        m_new = kappa * m + grad
        if rule.prior == "add":
            m_new = m_new + rule.prior_term(theta)
        out = theta - _apply_numpy(L, m_new)
        if fac is not None:
            out = out + scale * _apply_numpy(L, gen.standard_normal(np.shape(out)), fac)
        return out, m_new

    step.rule = rule  # type: ignore[attr-defined]
    return step


def _step_arrays(theta: Any, m: Any, grad: Any, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """θ, m and G of a NumPy step as float arrays: lists are taken; θ and G need the last axis D, m may also be the
    scalar 0; m and G must broadcast to θ's shape. Anything else is one message naming the argument (not numpy's
    broadcasting error)."""
    out = []
    for value, name in ((theta, "theta"), (m, "m"), (grad, "gradient")):
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ShapeError(f"numpy_step: {name} must be an array of numbers of shape (..., D = {dim}), got "
                             f"{type(value).__name__}") from None
        if not (name == "m" and arr.ndim == 0) and (arr.ndim == 0 or arr.shape[-1] != dim):
            raise ShapeError(f"numpy_step: {name} must have last axis D = {dim}, got shape {arr.shape}")
        out.append(arr)
    try:
        fits = np.broadcast_shapes(*(a.shape for a in out)) == out[0].shape
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"numpy_step: m and gradient must have theta's shape {out[0].shape}, got {out[1].shape} and "
                         f"{out[2].shape} (start with m = np.zeros_like(theta))")
    return out[0], out[1], out[2]


def _subset_numpy_step(inner: Callable[..., tuple[np.ndarray, np.ndarray]], rule: UpdateRule,
                       vector_names: Sequence[str]) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """``inner`` (the step on Λ's rows) applied inside a longer vector whose entries are ``vector_names``."""
    if rule.names is None:
        raise SgtuneError("numpy_step: vector_names= places Λ's rows by name, but Λ carries no parameter names; pass "
                          "parameter_names= (e.g. the result's, output.weight[k,j])")
    where = {str(n): k for k, n in enumerate(vector_names)}
    if len(where) != len(vector_names):
        raise SgtuneError("numpy_step: vector_names must be distinct")
    missing = [n for n in rule.names if n not in where]
    if missing:
        raise SgtuneError(f"numpy_step: Λ's row {missing[0]!r} is not among vector_names ({vector_names[0]} … "
                          f"{vector_names[-1]}); give the names of the whole vector, in its order")
    idx = np.array([where[n] for n in rule.names], dtype=np.int64)
    size = len(vector_names)

    def step(theta: np.ndarray, m: np.ndarray, grad: np.ndarray, *,
             batch_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        if np.shape(grad)[-1] != size:
            raise ShapeError(f"gradient must have last axis {size} (the entries of vector_names), got shape "
                             f"{np.shape(grad)}")
        sub, m_sub = inner(theta[..., idx], m[..., idx], grad[..., idx], batch_size=batch_size)
        out, m_out = np.array(theta, dtype=float), np.array(m, dtype=float)
        out[..., idx], m_out[..., idx] = sub, m_sub
        return out, m_out

    step.rule = rule  # type: ignore[attr-defined]
    return step


# --------------------------------------------------------------------------- optax
class SGMCMCState(NamedTuple):
    """The optax state of :func:`optax_transform`: the momentum buffer and the PRNG key of the noise.

    Parameters
    ----------
    momentum : jax.Array
        The momentum buffer (flat, (D,), θ order).
    key : jax.Array
        The PRNG key of the injected noise.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.export import SGMCMCState, optax_transform
    >>> tx = optax_transform(Dynamics([0.1, 0.2], batch_size=32), prior="in-loss")
    >>> state = tx.init(np.zeros(2))
    >>> isinstance(state, SGMCMCState), state.momentum.shape
    (True, (2,))
    """

    momentum: Any
    key: Any


@cites("wang2026", "§2.1 update θ ← θ − ΛG + sqrt(2Λ/β)ξ; momentum as in Prop. B.1")
def optax_transform(source: Any, *, momentum: float | None = None, inv_temperature: float | None = None,
                    batch_size: int | None = None, parameter_names: Sequence[str] | None = None, blocks: Any = None,
                    prior: str | None = None, prior_precision: Any = None, n_data: int | None = None,
                    seed: int = 0, subset: bool = False) -> Any:
    r"""An optax transformation whose update is −Λm' + sqrt(2/β)Λ^{1/2}ξ, m' = κm + g (+ Γθ/N with ``prior="add"``).

    ``source`` and the settings as in :func:`numpy_step`. Feed it the mean-loss minibatch gradient
    and apply with ``optax.apply_updates``; ``tx.update(grads, state, params, batch_size=b)`` checks
    the batch size (a Python int) and ``prior="add"`` needs ``params``. Parameters may be any pytree:
    with parameter names (the result's, or ``parameter_names=``) each leaf's key path is matched to
    them (``params["hidden1"]["weight"][i, j]`` ↔ ``hidden1.weight[i,j]``), so Λ's rows reach the
    right entries whatever JAX's flattening order; a single array is θ itself; several leaves
    without names are refused. Needs the ``jax`` extra (``pip install 'sgtune[jax]'``).

    Parameters
    ----------
    source : TuningResult, Dynamics, StepMatrix or array_like
        What the update applies.
    momentum, inv_temperature, batch_size, parameter_names, blocks, prior, prior_precision, n_data : optional
        The rule's settings, as for :func:`numpy_step` (a result's own by default; given, they must agree).
    seed : int, optional
        Seed of the noise's PRNG key.
    subset : bool, optional
        Λ covers some leaves only (e.g. a network's last layer,
        :func:`sgtune.models.lastlayer.last_layer`): the leaves whose key paths Λ's names name are
        updated, every other leaf gets a zero update (frozen); the named ones are still checked
        leaf by leaf.

    Returns
    -------
    optax.GradientTransformation
        ``init(params)`` and ``update(grads, state, params=None, *, batch_size=None)``.

    Raises
    ------
    MissingExtraError
        JAX or optax is not installed.
    SgtuneError
        A setting that contradicts the source, a missing ``prior`` choice, a step-size schedule,
        another sampler, or a non-symmetric Λ with β < ∞ (module docstring).

    Examples
    --------
    >>> import optax
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.export import optax_transform
    >>> tx = optax_transform(Dynamics([0.1, 0.2], batch_size=32), prior="in-loss")
    >>> params = np.ones(2)
    >>> updates, state = tx.update(np.ones(2), tx.init(params), params)
    >>> np.asarray(optax.apply_updates(params, updates), dtype=float)
    array([0.9, 0.8])
    """
    try:
        import jax
        import jax.numpy as jnp
        import optax
        import jax.flatten_util  # noqa: F401  (what _PytreeLayout uses: the extra is checked here, once)
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise MissingExtraError("sgtune.io.export.optax_transform needs jax and optax: pip install 'sgtune[jax]'") \
            from None
    rule = update_rule(source, momentum=momentum, inv_temperature=inv_temperature, batch_size=batch_size,
                       parameter_names=parameter_names, blocks=blocks, prior=prior, prior_precision=prior_precision,
                       n_data=n_data, where="optax_transform")
    L, kappa, scale = rule.step, rule.momentum, rule.noise_scale
    noisy = scale > 0
    mat, fac, apply = _jax_operator(L, noisy)
    gam = None if rule.prior_precision is None else np.asarray(rule.prior_precision) / rule.n_data
    pytree = _PytreeLayout(L, subset)
    to_theta, to_tree = pytree.to_theta, pytree.to_tree

    def init_fn(params: Any) -> SGMCMCState:
        flat, _, _ = to_theta(params)
        return SGMCMCState(momentum=jnp.zeros_like(flat), key=jax.random.PRNGKey(seed))

    def update_fn(updates: Any, state: SGMCMCState, params: Any = None, *, batch_size: Any = None,
                  **extra: Any) -> tuple[Any, SGMCMCState]:
        rule.check_batch_size(batch_size, "optax_transform")
        g, unravel, rows = to_theta(updates)
        if gam is not None:
            if params is None:
                raise SgtuneError("optax_transform: prior='add' needs the parameters: tx.update(grads, state, params)")
            th = to_theta(params)[0]
            gm = jnp.asarray(gam, th.dtype)
            g = g + (gm @ th if gam.ndim == 2 else gm * th)
        m = kappa * state.momentum + g
        step = -apply(mat, m)
        key = state.key
        if noisy:
            key, sub = jax.random.split(key)
            step = step + scale * apply(fac, jax.random.normal(sub, g.shape, g.dtype))
        return to_tree(step, unravel, rows), SGMCMCState(momentum=m, key=key)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


class _PytreeLayout:
    """Between a pytree of parameters and θ in Λ's row order, for :func:`optax_transform` (one layout per tree
    structure and shapes, computed once): ``to_theta(tree)`` → (θ-ordered flat vector, unravel, where);
    ``to_tree(step, unravel, where)`` → the update as a tree (with ``subset``: zeros on the frozen leaves)."""

    def __init__(self, L: StepMatrix, subset: bool) -> None:
        self.L, self.subset, self.layouts = L, subset, {}

    def layout(self, tree: Any) -> tuple[Any, Any]:
        """(None, None) for θ's own order; else (the θ row of each ravel entry, or with ``subset`` the ravel
        length, and the ravel entry of each θ row)."""
        import jax
        import jax.numpy as jnp

        L, leaves = self.L, _pytree_leaves(tree)
        key = (jax.tree_util.tree_structure(tree), tuple(s for _, _, s in leaves))
        if key not in self.layouts:
            if self.subset:
                keep = _subset_leaves(leaves, L.names, "optax_transform")
                rows = _match_layout([leaves[k] for k in keep], L.names, L.dim, "optax_transform")
                offs = np.concatenate([[0], np.cumsum([int(np.prod(s, dtype=np.int64)) for _, _, s in leaves])])
                pos = np.empty(L.dim, dtype=np.int64)  # ravel entry of each θ row
                for k, r in zip(keep, rows):
                    pos[r.ravel()] = offs[k] + np.arange(r.size)
                self.layouts[key] = (int(offs[-1]), jnp.asarray(pos))
            else:
                rows = np.concatenate([r.ravel() for r in _match_layout(leaves, L.names, L.dim, "optax_transform")])
                ident = np.array_equal(rows, np.arange(L.dim))
                self.layouts[key] = (None, None) if ident else (jnp.asarray(rows), jnp.asarray(np.argsort(rows)))
        return self.layouts[key]

    def to_theta(self, tree: Any) -> tuple[Any, Any, Any]:
        from jax.flatten_util import ravel_pytree

        flat, unravel = ravel_pytree(tree)
        rows, inv = self.layout(tree)
        return (flat if inv is None else flat[inv]), unravel, (rows, inv)

    def to_tree(self, step: Any, unravel: Any, where: tuple[Any, Any]) -> Any:
        import jax.numpy as jnp

        rows, inv = where
        if rows is None:
            return unravel(step)
        if self.subset:  # frozen leaves: zero update
            return unravel(jnp.zeros(rows, step.dtype).at[inv].set(step))
        return unravel(step[rows])


def _jax_operator(L: StepMatrix, noisy: bool) -> tuple[Any, Any, Callable[[Any, Any], Any]]:
    """(Λ, Λ^{1/2} or None, apply(a, v) = a v) in Λ's structure; ``apply`` computes in v's dtype (the gradients')."""
    import jax.numpy as jnp

    if L.kind in ("scalar", "diagonal"):
        val = np.asarray(L.scalar if L.kind == "scalar" else L.diagonal)
        return val, np.sqrt(val) if noisy else None, lambda a, v: jnp.asarray(a, v.dtype) * v
    if L.kind == "block":
        idx = [jnp.asarray(b) for b in L.blocks]

        def apply(a: Any, v: Any) -> Any:
            out = jnp.zeros_like(v)
            for b, m in zip(idx, a):
                out = out.at[b].set(jnp.asarray(m, v.dtype) @ v[b])
            return out

        return L.block_values, L.factors() if noisy else None, apply
    return L.dense, L.factors() if noisy else None, lambda a, v: jnp.asarray(a, v.dtype) @ v


# --------------------------------------------------------------------------- PyTorch
_TORCH_CLASS: dict[str, Any] = {}


@cites("wang2026", "§2.1 update θ ← θ − ΛG + sqrt(2Λ/β)ξ; momentum as in Prop. B.1")
@dataclass(frozen=True)
class TorchOptions:
    """How :func:`torch_optimizer` runs (the rule itself — Λ, κ, β, B, the prior — is set by its other keywords).

    Attributes
    ----------
    subset : bool
        Λ covers some of the module's parameters only (e.g. its last layer,
        :func:`sgtune.models.lastlayer.last_layer`: names ``output.weight[k,j]``, ``output.bias[k]``):
        the optimizer holds and updates the parameters Λ's names name (checked by shape, and every
        name must be a parameter of the module); the others are not touched (frozen). Needs a module.
    seed : int
        Seed of the default noise generator.
    generator : torch.Generator or None
        The noise stream (default ``torch.Generator().manual_seed(seed)`` on the parameters' device).
    n_chains : int or None
        Every parameter carries a leading axis of C independent chains (e.g. from
        ``torch.func.stack_module_state``); the loss is then the sum over chains of each chain's
        batch-mean loss, so each chain's slice of the gradient is its own G.
    check_batch_size : bool
        With a module (and no ``n_chains``), record the rows of every forward pass run with gradients
        enabled since the last step and refuse a step after a batch of another size than B.

    Examples
    --------
    >>> TorchOptions(subset=True).seed
    0
    """

    subset: bool = False
    seed: int = 0
    generator: Any = None
    n_chains: int | None = None
    check_batch_size: bool = True


def _torch_options(options: TorchOptions | None, removed: dict[str, Any]) -> TorchOptions:
    """``options``, or a one-line ``TypeError`` naming :class:`TorchOptions` for a keyword of the 0.1 form."""
    if removed:
        name = next(iter(removed))  # the first as typed
        if name in TorchOptions.__dataclass_fields__:
            raise TypeError(f"torch_optimizer({name}=…) is the form of 0.1: give options=TorchOptions({name}=…)")
        raise TypeError(f"torch_optimizer() got an unexpected keyword argument {name!r}")
    return TorchOptions() if options is None else options


def torch_optimizer(source: Any, params: Any, *, momentum: float | None = None,
                    inv_temperature: float | None = None, batch_size: int | None = None,
                    parameter_names: Sequence[str] | None = None, blocks: Any = None, prior: str | None = None,
                    prior_precision: Any = None, n_data: int | None = None, options: TorchOptions | None = None,
                    **removed: Any) -> Any:
    r"""A ``torch.optim.Optimizer`` whose ``step()`` is sgtune's update: m ← κm + G, θ ← θ − Λm + sqrt(2/β)Λ^{1/2}ξ.

    Parameters
    ----------
    source : TuningResult, Dynamics, Λ or KroneckerTuning
        Λ, κ, β and B as in :func:`numpy_step` (the other settings likewise, checked against it); a
        Kronecker-factored step (:func:`sgtune.theory.kronecker.tune_kronecker`) gives the per-layer,
        matrix-free optimizer of :func:`sgtune.io.kronecker_torch.kronecker_torch_optimizer`.
    params : torch.nn.Module or list of tensors
        A module: its ``named_parameters`` are matched by name to the rows of Λ (``fc1.weight[i,j]``:
        the layout of :func:`sgtune.models.pytorch.from_torch`), in any order; a list: the tensors in θ
        order (checked by shape against the names when Λ has them).
    momentum, inv_temperature, batch_size, parameter_names, blocks, prior, prior_precision, n_data : optional
        The rule's settings, as for :func:`numpy_step` (a result's own by default; given, they must agree).
    options : TorchOptions, optional
        ``subset``, ``seed``, ``generator``, ``n_chains``, ``check_batch_size`` (:class:`TorchOptions`).
    **removed
        Not accepted: the five options by name (``subset=True``, the form of 0.1) raise a ``TypeError`` that
        names :class:`TorchOptions`.

    Returns
    -------
    torch.optim.Optimizer
        The optimizer (``step(closure=None, *, batch_size=None)``, ``state_dict`` round-trips).

    Raises
    ------
    MissingExtraError
        PyTorch is not installed.
    SgtuneError
        A layout that does not match Λ's names, or a setting refused as by :func:`update_rule`.

    See Also
    --------
    numpy_step, optax_transform : The same update for NumPy and JAX.

    Notes
    -----
    The gradients ``loss.backward()`` leaves in ``p.grad`` must be those of the batch-MEAN loss
    (``reduction="mean"``), plus the prior term unless ``prior="add"``. ``step(closure=None, *,
    batch_size=None)`` also checks an explicit ``batch_size``. The momentum buffer is kept per
    parameter; the arithmetic is float64, the parameters keep their dtype. Needs ``sgtune[torch]``.

    Examples
    --------
    >>> import torch
    >>> from sgtune.io.export import step_matrix, torch_optimizer
    >>> net = torch.nn.Linear(2, 1)  # θ = (weight[0,0], weight[0,1], bias[0])
    >>> opt = torch_optimizer(step_matrix([0.1, 0.1, 0.1]), net, options=TorchOptions(seed=1))
    >>> net(torch.ones(4, 2)).pow(2).mean().backward()
    >>> before = net.bias.detach().clone()
    >>> opt.step()
    >>> bool(net.bias.detach() != before)
    True
    """
    opts = _torch_options(options, removed)
    if hasattr(source, "layers") and callable(getattr(source, "to_arrays", None)):  # a kronecker step (duck-typed)
        from .kronecker_torch import kronecker_torch_optimizer

        return kronecker_torch_optimizer(source, params, generator=opts.generator, seed=opts.seed)
    try:
        import torch
    except ImportError:
        raise MissingExtraError("sgtune.io.export.torch_optimizer needs PyTorch: pip install 'sgtune[torch]'") \
            from None
    rule = update_rule(source, momentum=momentum, inv_temperature=inv_temperature, batch_size=batch_size,
                       parameter_names=parameter_names, blocks=blocks, prior=prior, prior_precision=prior_precision,
                       n_data=n_data, where="torch_optimizer")
    lead = () if opts.n_chains is None else (check_int(opts.n_chains, "n_chains", low=1),)
    module = params if isinstance(params, torch.nn.Module) else None
    named, leaves = _torch_leaves(torch, params, module, rule, lead, opts.subset)
    rows = _match_layout(leaves, rule.names, rule.step.dim, "torch_optimizer")
    cls = _torch_optimizer_class(torch)
    return cls([p for _, p in named], [lab for lab, _, _ in leaves], rows, rule, lead, opts.generator, opts.seed,
               module if opts.check_batch_size and not lead else None)


def _torch_leaves(torch: Any, params: Any, module: Any, rule: UpdateRule, lead: tuple[int, ...],
                  subset: bool) -> tuple[list[tuple[str | None, Any]], list[tuple[str, str | None, tuple[int, ...]]]]:
    """The (name, tensor) pairs the optimizer holds (``subset``: those Λ's names name) and their leaves for
    :func:`_match_layout`; a list of tensors, a missing chain axis or a subset without a module refused."""
    if module is not None:
        named = list(module.named_parameters())
    else:
        try:
            named = [(None, p) for p in params]
        except TypeError:
            raise SgtuneError(f"torch_optimizer: params must be a torch.nn.Module or a list of tensors, got "
                              f"{type(params).__name__}") from None
        if not named or not all(isinstance(p, torch.Tensor) for _, p in named):
            raise SgtuneError("torch_optimizer: params must be a torch.nn.Module or a non-empty list of tensors")
    if subset:
        if module is None:
            raise SgtuneError("torch_optimizer: TorchOptions(subset=True) selects parameters by name: pass the module, not a list "
                              "of tensors")
        keep = _subset_leaves([(n, n, tuple(p.shape[len(lead):])) for n, p in named], rule.names, "torch_optimizer")
        named = [named[k] for k in keep]
    leaves = []
    for k, (n, p) in enumerate(named):
        if tuple(p.shape[:len(lead)]) != lead:
            raise ShapeError(f"torch_optimizer: with n_chains={lead[0]} every parameter needs a leading axis of "
                             f"{lead[0]}; {n or f'parameter {k}'} has shape {tuple(p.shape)}")
        # without names in Λ, a module's θ is its named_parameters order (the layout of from_torch)
        leaves.append((n or f"parameter {k}", n if rule.names is not None else None, tuple(p.shape[len(lead):])))
    return named, leaves


def _torch_optimizer_class(torch: Any) -> Any:
    """The ``torch.optim.Optimizer`` subclass (defined once, when torch is first needed)."""
    if "cls" in _TORCH_CLASS:
        return _TORCH_CLASS["cls"]

    class SGMCMCOptimizer(torch.optim.Optimizer):
        """sgtune's update m ← κm + G, θ ← θ − Λm + sqrt(2/β)Λ^{1/2}ξ (see :func:`torch_optimizer`)."""

        def __init__(self, tensors: list, labels: list[str], rows: list[np.ndarray], rule: UpdateRule,
                     lead: tuple[int, ...], generator: Any, seed: int, module: Any) -> None:
            super().__init__(tensors, dict(momentum=rule.momentum, inv_temperature=rule.inv_temperature))
            self.rule, self.labels, self.lead = rule, labels, lead
            dev = tensors[0].device
            self._rows = [torch.as_tensor(r.ravel(), device=dev) for r in rows]
            f64 = dict(dtype=torch.float64, device=dev)
            L = rule.step
            conv = lambda a: torch.as_tensor(np.asarray(a), **f64)  # noqa: E731
            if L.kind in ("scalar", "diagonal"):
                val = L.scalar if L.kind == "scalar" else L.diagonal
                self._mat, self._fac = conv(val), conv(np.sqrt(val)) if rule.noise_scale else None
            elif L.kind == "block":
                self._mat = [conv(v) for v in L.block_values]
                self._fac = [conv(f) for f in L.factors()] if rule.noise_scale else None
                self._blocks = [torch.as_tensor(b, device=dev) for b in L.blocks]
            else:
                self._mat = conv(L.dense)
                self._fac = conv(L.factors()) if rule.noise_scale else None
            self._gam = None if rule.prior_precision is None else conv(rule.prior_precision) / rule.n_data
            if generator is None:
                generator = torch.Generator(device=dev).manual_seed(int(seed))
            self.generator = generator
            self._seen: list[int] = []
            self.batch_hook = None
            if module is not None and rule.batch_size is not None:
                ref = weakref.ref(self)

                def hook(_mod: Any, args: Any) -> None:
                    opt = ref()
                    if opt is not None and torch.is_grad_enabled() and args and isinstance(args[0], torch.Tensor) \
                            and args[0].ndim >= 1:
                        opt._seen.append(int(args[0].shape[0]))

                self.batch_hook = module.register_forward_pre_hook(hook)

        def _apply(self, a: Any, v: Any) -> Any:
            kind = self.rule.step.kind
            if kind in ("scalar", "diagonal"):
                return a * v
            if kind == "block":
                out = torch.empty_like(v)
                for b, m in zip(self._blocks, a):
                    out[..., b] = v[..., b] @ m.T
                return out
            return v @ a.T

        def _gather(self, tensors: list) -> Any:
            out = torch.empty(self.lead + (self.rule.step.dim,), dtype=torch.float64, device=tensors[0].device)
            for t, r in zip(tensors, self._rows):
                out[..., r] = t.detach().reshape(self.lead + (-1,)).to(torch.float64)
            return out

        def step(self, closure: Any = None, *, batch_size: int | None = None) -> Any:  # type: ignore[override]
            """One update from the gradients in ``p.grad`` (``closure`` re-evaluates the loss first)."""
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            self.rule.check_batch_size(batch_size, "torch_optimizer")
            seen, self._seen = self._seen, []
            bad = [s for s in seen if s != self.rule.batch_size]
            if bad:
                raise SgtuneError(
                    f"torch_optimizer: the module ran on a batch of {bad[0]} rows since the last step, but the result "
                    f"was tuned for B = {self.rule.batch_size} (evaluate under torch.no_grad(), or pass "
                    "options=TorchOptions(check_batch_size=False) if these rows are not the minibatch)")
            params = self.param_groups[0]["params"]
            for p, lab in zip(params, self.labels):
                if p.grad is None:
                    raise SgtuneError(f"torch_optimizer: parameter {lab} has no gradient: call loss.backward() "
                                      "before step() (every parameter in Λ's layout must take part in the loss)")
            with torch.no_grad():
                g = self._gather([p.grad for p in params])
                if self._gam is not None:
                    th = self._gather(params)
                    g = g + (th @ self._gam.T if self._gam.ndim == 2 else self._gam * th)
                m = self._gather([self.state[p].get("momentum_buffer", torch.zeros_like(p, dtype=torch.float64))
                                  for p in params])
                m = self.rule.momentum * m + g
                delta = -self._apply(self._mat, m)
                if self._fac is not None:
                    xi = torch.randn(m.shape, generator=self.generator, dtype=torch.float64, device=m.device)
                    delta = delta + self.rule.noise_scale * self._apply(self._fac, xi)
                for p, r in zip(params, self._rows):
                    shape = p.shape
                    self.state[p]["momentum_buffer"] = m[..., r].reshape(shape).clone()
                    p.add_(delta[..., r].reshape(shape).to(p.dtype))
            return loss

    _TORCH_CLASS["cls"] = SGMCMCOptimizer
    return SGMCMCOptimizer
