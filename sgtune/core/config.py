"""The configuration of a chain, shared by the theory and the sampler: :class:`Dynamics` and :class:`RunSpec`.

:class:`Dynamics` is *which* chain runs — the step-size matrix Λ, the batch size B, the inverse
temperature β, the momentum κ, the batching scheme and the step-size decay. It is what the theory
predicts for (``predict_stationary_cov(expansion, dynamics)``) and what the sampler runs
(``run_chains(model, data, dynamics, run)``), validated once, here.

:class:`RunSpec` is *how long and how many*: steps (burn-in included), burn-in, chains, thinning, the
batches behind the Monte Carlo standard errors, and the seed. It never changes what the chain is, only
how much of it is observed.

One batching vocabulary, :data:`BATCHINGS`:

- ``"replacement"`` — every step draws B indices uniformly with replacement (the default);
- ``"without-replacement"`` — every step draws B distinct indices (noise × (N−B)/(N−1));
- ``"reshuffle"`` — a fresh random permutation per epoch, then its consecutive blocks of B. Its
  per-step noise is that of a batch without replacement, so the stationary theory treats it so
  (:attr:`Dynamics.without_replacement`); its epoch structure is the subject of Shaw & Whalley (2024).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._validation import as_float_array, check_int, check_positive, is_symmetric
from .errors import NotPositiveDefiniteError, SgtuneError, ShapeError

__all__ = ["BATCHINGS", "MAX_STEPS", "Dynamics", "RunSpec", "step_matrix_of"]

#: every minibatch scheme, in the order the CLI lists them
BATCHINGS: tuple[str, ...] = ("replacement", "without-replacement", "reshuffle")
#: the longest chain a RunSpec describes: 10¹² steps (about a day per chain even at 10⁷ steps a second, and
#: far below where the kernels' 64-bit step counters and C·T products would overflow)
MAX_STEPS = 10 ** 12


def _as_batching(value: Any) -> str:
    if isinstance(value, bool):  # the theory's old flag: without_replacement=True/False
        return "without-replacement" if value else "replacement"
    if value not in BATCHINGS:
        raise SgtuneError(f"batching must be one of {', '.join(BATCHINGS)}, got {value!r}")
    return str(value)


def _as_step(step: Any) -> np.ndarray:
    arr = as_float_array(step, "step_matrix")
    if arr.ndim > 2:
        raise ShapeError(f"step_matrix must be a scalar, a (D,) diagonal or a (D, D) matrix, "
                         f"but has shape {arr.shape}")
    if arr.ndim == 0 and not float(arr) > 0:
        raise SgtuneError(f"step_matrix must be > 0, got {float(arr)}")
    if arr.ndim == 1 and not np.all(arr > 0):
        raise SgtuneError(f"step_matrix (diagonal) must be positive, smallest entry is {arr.min():g}")
    if arr.ndim == 2 and arr.shape[0] != arr.shape[1]:
        raise ShapeError(f"step_matrix must be square (D, D) but has shape {arr.shape}")
    arr = arr.copy()
    arr.setflags(write=False)
    return arr


def step_matrix_of(step: Any, dim: int, *, name: str = "step_matrix") -> np.ndarray:
    """Λ as a (D, D) array from a scalar λ (Λ = λI), a (D,) diagonal or a (D, D) matrix.

    A symmetric matrix must be positive definite; a non-symmetric Λ is allowed (for SGD; its
    stability is checked by the solver).

    Parameters
    ----------
    step : float or array_like
        The step: a scalar λ, a (D,) diagonal or a (D, D) matrix.
    dim : int
        D.
    name : str, optional
        The argument's name in error messages.

    Returns
    -------
    (D, D) ndarray
        Λ (a fresh copy).

    Raises
    ------
    SgtuneError
        A non-positive scalar or diagonal entry.
    ShapeError
        A diagonal or matrix of the wrong size.
    NotPositiveDefiniteError
        A symmetric matrix that is not positive definite.

    Examples
    --------
    >>> from sgtune.core.config import step_matrix_of
    >>> step_matrix_of(0.5, 2)
    array([[0.5, 0. ],
           [0. , 0.5]])
    """
    arr = as_float_array(step, name)
    if arr.ndim == 0:
        lam = float(arr)
        if not lam > 0:
            raise SgtuneError(f"{name} must be > 0, got {lam}")
        return lam * np.eye(dim)
    if arr.ndim == 1:
        if arr.shape[0] != dim:
            raise ShapeError(f"{name} (diagonal) must have length D = {dim} but has length {arr.shape[0]}")
        if not np.all(arr > 0):
            raise SgtuneError(f"{name} (diagonal) must be positive, smallest entry is {arr.min():g}")
        return np.diag(arr)
    if arr.shape != (dim, dim):
        raise ShapeError(f"{name} must be (D, D) = ({dim}, {dim}) but has shape {arr.shape}")
    sym = is_symmetric(arr) or np.linalg.norm(arr - arr.T) <= 1e-12 * np.linalg.norm(arr)
    if sym:
        lam_min = float(np.linalg.eigvalsh(0.5 * (arr + arr.T))[0])
        if not lam_min > 0:
            raise NotPositiveDefiniteError(
                f"{name} Λ must be symmetric positive definite, but its smallest eigenvalue is {lam_min:.4g}; "
                "pass a positive-definite step-size matrix (e.g. the output of sgtune lambda)")
    return arr.copy()


@dataclass(frozen=True, eq=False)
class Dynamics:
    """Which chain runs: θ ← θ − Λ m_t + sqrt(2Λ/β) ξ with m_t = κ m_{t−1} + G_t(θ) (Wang, Ding & Huggins 2026).

    G_t is the minibatch gradient of the mean loss over a batch of ``batch_size`` indices drawn by
    ``batching``; Λ_t = Λ (1 + t)^(−decay).

    Parameters
    ----------
    step : float, ndarray or None
        Λ: a scalar λ (Λ = λI), a (D,) diagonal or a (D, D) matrix (read-only copy); ``None`` for the
        settings of a chain whose Λ is still to be tuned (``tune(expansion, dynamics)``).
    batch_size : int
        The batch size B ≥ 1 (≤ N, checked against the data by :meth:`check_data`).
    inv_temperature : float, optional
        The inverse temperature β > 0; ``inf`` (the default) is SGD, N the posterior.
    momentum : float, optional
        The heavy-ball momentum κ ∈ [0, 1).
    batching : str, optional
        One of :data:`BATCHINGS` (a bool is read as the old ``without_replacement`` flag).
    decay : float, optional
        The exponent γ ≥ 0 of the schedule Λ_t = Λ (1 + t)^(−γ) (0: constant step).

    Raises
    ------
    SgtuneError
        A value out of its range (the message names it).
    ShapeError
        A step that is not a scalar, (D,) or square (D, D).

    See Also
    --------
    RunSpec : How long and how many chains run.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> sgld = Dynamics(0.1, batch_size=32, inv_temperature=2000, batching="reshuffle")
    >>> sgld.injects_noise, sgld.without_replacement
    (True, True)
    >>> sgld.replace(momentum=0.9).momentum
    0.9
    >>> Dynamics(None, batch_size=32).step is None  # settings of a chain whose Λ is to be tuned
    True
    """

    step: Any
    batch_size: int
    inv_temperature: float = math.inf
    momentum: float = 0.0
    batching: str = "replacement"
    decay: float = 0.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.step is not None:
            set_(self, "step", _as_step(self.step))
        set_(self, "batch_size", check_int(self.batch_size, "batch_size", low=1))
        beta = float(self.inv_temperature)
        if not beta > 0:
            raise SgtuneError(f"inv_temperature must be > 0 (inf for SGD), got {self.inv_temperature}")
        set_(self, "inv_temperature", beta)
        kappa = float(self.momentum)
        if not 0.0 <= kappa < 1.0:
            raise SgtuneError(f"momentum must lie in [0, 1), got {self.momentum}")
        set_(self, "momentum", kappa)
        set_(self, "batching", _as_batching(self.batching))
        set_(self, "decay", check_positive(self.decay, "decay", strict=False))

    @property
    def without_replacement(self) -> bool:
        """Whether one step's batch is drawn without replacement (noise × (N−B)/(N−1)); reshuffling is."""
        return self.batching != "replacement"

    @property
    def injects_noise(self) -> bool:
        """β < ∞: the chain adds sqrt(2Λ/β) ξ (SGLD); β = ∞ is SGD."""
        return math.isfinite(self.inv_temperature)

    def step_matrix(self, dim: int) -> np.ndarray:
        """Λ as a dense (D, D) array (validated: positive, SPD when symmetric)."""
        if self.step is None:
            raise SgtuneError("these dynamics have no step_matrix yet (step=None): tune one or pass Λ")
        return step_matrix_of(self.step, dim)

    def check_data(self, n_data: int) -> None:
        """Raise unless 1 ≤ B ≤ N."""
        check_int(self.batch_size, "batch_size", low=1, high=int(n_data))

    def replace(self, **changes: Any) -> "Dynamics":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready settings (Λ as a nested list; β = ∞ as the string ``"inf"``)."""
        beta: Any = self.inv_temperature if math.isfinite(self.inv_temperature) else "inf"
        lam = None if self.step is None else self.step.tolist()
        return {"step_matrix": lam, "batch_size": self.batch_size, "inv_temperature": beta,
                "momentum": self.momentum, "batching": self.batching, "decay": self.decay}

    def __repr__(self) -> str:
        s = self.step
        lam = "None" if s is None else f"{float(s):g}" if s.ndim == 0 else f"<{'x'.join(map(str, s.shape))} array>"
        return (f"Dynamics(step={lam}, batch_size={self.batch_size}, inv_temperature={self.inv_temperature:g}, "
                f"momentum={self.momentum:g}, batching={self.batching!r}, decay={self.decay:g})")


@dataclass(frozen=True)
class RunSpec:
    """How long and how many: the observation of a chain, not the chain.

    Parameters
    ----------
    n_steps : int
        Steps per chain T, burn-in included.
    n_chains : int, optional
        The number C of independent chains.
    burn_in : int or None, optional
        Steps discarded before the moments are accumulated; ``None`` means T // 10.
    thin : int, optional
        Keep every ``thin``-th draw after burn-in as a trace (0: no trace).
    batches_per_chain : int or None, optional
        Segments per chain behind the batch-means standard errors; ``None`` means ⌈32/C⌉ rounded
        up to an even number (each chain splits into halves for the stationarity check).
    seed : int, optional
        Chain c uses the stream ``SeedSequence(seed).spawn(C)[c]``.

    Raises
    ------
    SgtuneError
        A count out of its range (e.g. a burn-in of T steps or more).

    See Also
    --------
    Dynamics : Which chain runs.

    Examples
    --------
    >>> from sgtune.core.config import RunSpec
    >>> run = RunSpec(1000, n_chains=4)
    >>> run.burn_in_steps, run.kept_steps, run.segments
    (100, 900, 8)
    """

    n_steps: int
    n_chains: int = 4
    burn_in: int | None = None
    thin: int = 0
    batches_per_chain: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        T = check_int(self.n_steps, "n_steps", low=1, high=MAX_STEPS)
        set_(self, "n_steps", T)
        set_(self, "n_chains", check_int(self.n_chains, "n_chains", low=1))
        if self.burn_in is not None:
            set_(self, "burn_in", check_int(self.burn_in, "burn_in", low=0, high=T - 1))
        set_(self, "thin", check_int(self.thin, "thin", low=0))
        if self.batches_per_chain is not None:
            set_(self, "batches_per_chain", check_int(self.batches_per_chain, "batches_per_chain", low=1))
        set_(self, "seed", check_int(self.seed, "seed", low=0))
        self._check_batches()

    def _check_batches(self) -> None:
        """Batch means the standard errors can use: at most one per kept step (a larger count was once cut down
        silently), and at least 2 in all (one batch mean has no spread: the standard errors would be NaN)."""
        kept = self.kept_steps
        if self.batches_per_chain is not None and self.batches_per_chain > kept:
            raise SgtuneError(f"batches_per_chain must be at most the steps each chain keeps after burn-in ({kept}), "
                              f"got {self.batches_per_chain}; give fewer batches or a longer run")
        if self.n_chains * self.segments < 2:
            if self.batches_per_chain is not None:
                raise SgtuneError(f"batches_per_chain must be at least 2 with n_chains = 1, got "
                                  f"{self.batches_per_chain}: the Monte Carlo standard errors need 2 batch means or "
                                  "more in all (chains × batches per chain)")
            raise SgtuneError(f"n_steps must leave at least 2 steps after burn-in with n_chains = 1, got {kept}: the "
                              "Monte Carlo standard errors need 2 batch means or more in all")

    @property
    def burn_in_steps(self) -> int:
        """The burn-in in steps (T // 10 when not given)."""
        return self.n_steps // 10 if self.burn_in is None else int(self.burn_in)

    @property
    def kept_steps(self) -> int:
        """Steps per chain after burn-in."""
        return self.n_steps - self.burn_in_steps

    @property
    def segments(self) -> int:
        """Batch-means segments per chain (the default: never more than the kept steps)."""
        if self.batches_per_chain is None:
            s = max(1, math.ceil(32 / self.n_chains))
            s += s % 2
        else:
            s = int(self.batches_per_chain)
        return min(s, self.kept_steps)

    def replace(self, **changes: Any) -> "RunSpec":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready settings (burn-in resolved)."""
        return {"n_steps": self.n_steps, "n_chains": self.n_chains, "burn_in": self.burn_in_steps,
                "thin": self.thin, "batches_per_chain": self.segments, "seed": self.seed}
