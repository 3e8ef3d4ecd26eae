"""Raw chains of the 1-D Gaussian model problem of Shaw & Whalley (2025) (RR vs RM batching), on the engine.

One step on batch b (Shaw & Whalley 2025, §4; rescaled step h = ηN/σ²):

    θ' = θ − h(θ − x̄_b) + sqrt(2hσ²/N) ξ,    ξ ~ N(0, 1).

Schemes (:data:`SCHEME_CODES`), each a batch schedule of the chain engine (:data:`SCHEME_BATCHING`,
:mod:`sgtune.sampler.engine`, :data:`sgtune.sampler.kernels.BATCH_FNS`):

- ``ula``: full gradient, x̄_b = x̄ (schedule ``full``: no draw);
- ``rm``: a fresh batch of B distinct indices every step (partial Fisher–Yates);
- ``rm_with_replacement``: B indices drawn independently and uniformly;
- ``rr``: at the start of every epoch a fresh uniformly random permutation
  (full Fisher–Yates), then the R = N/B consecutive blocks in order.

The step is the engine's SG(L)D rule with Λ = h and noise factor sqrt(2hσ²/N) on the gradient oracle
``gaussian_mean_grad`` (θ − x̄_b); ``reshuffle_plan`` composes the run. Every chain owns an
independent stream of the package's one generator, :mod:`sgtune.sampler.rng` (xoshiro256++ seeded from
``numpy.random.SeedSequence(seed).spawn(n_chains)``; 53-bit uniforms, ziggurat normals, exactly uniform
indices by Lemire's method), so results do not depend on the number of threads. The reference backend
(``backend=ReferenceBackend()``, :mod:`sgtune.sampler.reference`) runs the same plan in NumPy and replays the
same streams with :class:`~sgtune.sampler.rng.Xoshiro256PP`.

The chains store no traces: after ``burn_in_epochs`` the recorder accumulates, per chain and per epoch
position k = 0..R−1 (k steps of the epoch already taken), the sums of d = θ − x̄ and d², divided by the
number of kept epochs into time averages. Because chains are independent, the across-chain spread of
these per-chain averages gives an honest Monte Carlo standard error whatever the autocorrelation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._validation import as_vector, check_int, check_positive
from ..core.errors import SgtuneError, UnstableStepSizeError
from ._jit import component_inline
from .engine import ChainPlan, backend_of, run_plan
from .kernels import BATCH_FNS, sgld_diag_rule
from .rng import chain_states
from .state import LAM_DIAG, Schedule, chain_state, mclmc_state, oracle, recorder, step_params

__all__ = ["SCHEME_CODES", "SCHEME_BATCHING", "ReshuffleChains", "run_reshuffle_chains"]

SCHEME_CODES: dict[str, int] = {"ula": 0, "rm": 1, "rm_with_replacement": 2, "rr": 3}
#: scheme -> the engine's batch schedule (:data:`sgtune.sampler.kernels.BATCH_FNS`), each counting epoch positions
SCHEME_BATCHING: dict[str, str] = {"ula": "full", "rm": "without-replacement-positions",
                                   "rm_with_replacement": "replacement-positions", "rr": "reshuffle"}


# ----------------------------------------------------------------------------- the engine's components
@component_inline
def gaussian_mean_grad(theta, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
    """θ − x̄_b, the gradient of the batch-mean loss ½‖θ − x_n‖² on the rows ``idx[:nb]`` of X = ``ora.X`` (N, D).

    With a work buffer (``ora.work_len`` = 1: D = 1 and a schedule without replacement or reshuffling), the
    batch's sum Σ_b x_n is ``work[0]``: the plan's batch schedule summed it while drawing the batch
    (``Schedule.row_sums``, :func:`sgtune.sampler.kernels.batch_by_kind`), in the batch's order as the loop here
    does otherwise. An empty batch (``nb`` = 0, the ``full`` schedule) is the full data: θ − x̄
    with the stored mean ``ora.mean`` = x̄ (D,) itself, as ULA uses it.
    """
    X = ora.X
    y = ora.mean
    d = theta.shape[0]
    if nb == 0:
        for j in range(d):
            grad[j] = theta[j] - y[j]
        return
    if ora.work_len > 0:
        grad[0] = theta[0] - work[0] / nb
        return
    for j in range(d):
        acc = 0.0
        for k in range(nb):
            acc += X[np.uint64(idx[k]), j]  # unsigned: the batch's indices are ≥ 0, no negative-index wraparound
        grad[j] = theta[j] - acc / nb


def reshuffle_plan(x: np.ndarray, batch_size: int, h: float, noise_sd: float, scheme: str, n_chains: int,
                   n_epochs: int, burn_in_epochs: int, seed: int) -> ChainPlan:
    """The engine's plan of the model problem: C chains from x̄, SG(L)D with Λ = h, L = ``noise_sd``.

    Shaw & Whalley record the state *before* step k of each kept epoch at position k; the engine records
    after step t at the position of the next step, t mod R: the same states. So the plan runs
    (burn_in_epochs + n_epochs)·R − 1 steps and records after step t > burn_in_epochs·R − 1, by position,
    the sums of d = θ − x̄ and d² (the recorder's ``pos_centre`` x̄). With no burn-in the state before the
    first step, θ = x̄, is not recorded: its d is exactly 0, so the sums are the same bits.
    """
    n = x.shape[0]
    R = n // batch_size
    C = n_chains
    xbar = float(x.mean())
    state = chain_state(np.full((C, 1), xbar), chain_states(int(seed), C),
                        perm=np.tile(np.arange(n, dtype=np.int64), (C, 1)))
    # the schedules without replacement and reshuffling sum the batch in their drawing loop (Schedule.row_sums) into
    # the oracle's work[0]; the oracle sums the others' batches itself
    row_sums = scheme in ("rm", "rr")
    ora = oracle(X=x.reshape(n, 1), mean=np.array([xbar]), work_len=int(row_sums))
    params = step_params(lam=np.array([[h]]), fac=np.array([[noise_sd]]), step=float(h))
    rec = recorder(C, 1, positions=R, pos_centre=np.array([xbar]))
    batching = SCHEME_BATCHING[scheme]
    return ChainPlan(sampler="sgld", lam_kind=LAM_DIAG, batching=batching, oracle_kind="gaussian-mean",
                     batch_fn=BATCH_FNS[batching], grad_fn=gaussian_mean_grad, rule_fn=sgld_diag_rule, move_fn=None,
                     state=state, oracle=ora, sched=Schedule(batch_size=int(batch_size), decay=0.0, row_sums=row_sums), params=params,
                     mclmc=mclmc_state(C), recorder=lambda last: rec._replace(flush=bool(last)),
                     burn_in=max(burn_in_epochs * R - 1, 0), n_steps=(burn_in_epochs + n_epochs) * R - 1)


# ----------------------------------------------------------------------------- public API
@dataclass(frozen=True)
class ReshuffleChains:
    """Per-chain, per-epoch-position time averages of d = θ − x̄ and d² (shape (chains, R)).

    ``var`` / ``var_se`` and ``mean`` / ``mean_se`` pool the chains (standard
    errors from the across-chain spread); ``average_var`` / ``average_var_se``
    pool the positions too.

    Attributes
    ----------
    scheme : str
        The batching scheme.
    seed : int
        The root seed.
    n_epochs, burn_in_epochs : int
        The kept and the discarded epochs.
    first_moment, second_moment : (C, R) ndarray
        Each chain's time averages of d and d² per epoch position.

    Examples
    --------
    >>> r = run_reshuffle_chains(np.arange(8.0), 2, 0.1, n_chains=4, n_epochs=50, burn_in_epochs=5, seed=1)
    >>> r.first_moment.shape, r.var.shape
    ((4, 4), (4,))
    """

    scheme: str
    seed: int
    n_epochs: int
    burn_in_epochs: int
    first_moment: np.ndarray
    second_moment: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        return self.first_moment.mean(axis=0)

    @property
    def mean_se(self) -> np.ndarray:
        c = self.first_moment.shape[0]
        return self.first_moment.std(axis=0, ddof=1) / math.sqrt(c)

    @property
    def var(self) -> np.ndarray:
        """E[(θ − x̄)²] per position (the exact mean is x̄, so this is the variance)."""
        return self.second_moment.mean(axis=0)

    @property
    def var_se(self) -> np.ndarray:
        c = self.second_moment.shape[0]
        return self.second_moment.std(axis=0, ddof=1) / math.sqrt(c)

    @property
    def average_var(self) -> float:
        return float(self.second_moment.mean())

    @property
    def average_var_se(self) -> float:
        per_chain = self.second_moment.mean(axis=1)
        return float(per_chain.std(ddof=1) / math.sqrt(per_chain.shape[0]))


def seed_states(seed: int, n_chains: int) -> np.ndarray:
    """(n_chains, 4) uint64 generator states: :func:`sgtune.sampler.rng.chain_states`."""
    return chain_states(int(seed), n_chains)


def _validate(data: Any, batch_size: Any, step: Any, sigma2: Any, scheme: str, n_chains: Any,
              n_epochs: Any, burn_in_epochs: Any) -> tuple[np.ndarray, int, float, float, int, int, int, int]:
    x = as_vector(data, "data")
    n = x.shape[0]
    if n < 2:
        raise SgtuneError(f"data must hold at least N = 2 observations, got N = {n}")
    if n >= 2**32:
        raise SgtuneError(f"the chains support N < 2^32 observations, got N = {n}; subsample the data")
    b = check_int(batch_size, "batch_size", low=1, high=n)
    if n % b:
        raise SgtuneError(f"batch_size = {b} does not divide N = {n}; use a divisor of N")
    h = check_positive(step, "step")
    if not h < 2.0:
        raise UnstableStepSizeError(f"step = {h} is unstable: the chains need 0 < h < 2; use h < 2",
                                    spectral_radius=abs(1 - h), max_stable_step=2.0)
    sig2 = float(np.var(x, ddof=1)) if sigma2 is None else check_positive(sigma2, "sigma2")
    if not sig2 > 0:
        raise SgtuneError("data are all equal so the default sigma2 is 0; pass sigma2 > 0")
    if scheme not in SCHEME_CODES:
        raise SgtuneError(f"scheme = {scheme!r} is unknown; choose one of {', '.join(SCHEME_CODES)}")
    c = check_int(n_chains, "n_chains", low=2)
    e = check_int(n_epochs, "n_epochs", low=1)
    bi = check_int(burn_in_epochs, "burn_in_epochs", low=0)
    return x, b, h, sig2, SCHEME_CODES[scheme], c, e, bi


def run_reshuffle_chains(data: Any, batch_size: Any, step: Any, *, scheme: str = "rr",
                         sigma2: Any | None = None, n_chains: int = 256, n_epochs: int = 1000,
                         burn_in_epochs: int = 100, seed: int = 0, backend: Any = "numba") -> ReshuffleChains:
    """Run independent model-problem chains θ' = θ − h(θ − x̄_b) + sqrt(2hσ²/N)ξ (Shaw & Whalley 2025, §4, eq. 8).

    Parameters
    ----------
    data : array_like, shape (N,)
        The data x_1..x_N.
    batch_size : int
        The batch size B, dividing N.
    step : float
        Rescaled step h, 0 < h < 2.
    scheme : {"ula", "rm", "rm_with_replacement", "rr"}
        Batching policy.
    sigma2 : float, optional
        The model's variance σ² (default the unbiased sample variance).
    n_chains, n_epochs, burn_in_epochs : int
        Chains (started at x̄), kept epochs, discarded epochs (R steps each).
    seed : int
        Root seed; chain c uses ``SeedSequence(seed).spawn(n_chains)[c]``.
    backend : "numba" or object
        The engine's backend (``sgtune.sampler.engine.run_plan``): ``"numba"``, or an object with
        ``prepare(plan)`` and ``advance(plan, t0, n_steps, last)``.

    Returns
    -------
    ReshuffleChains
        Per-chain moments per epoch position.

    Raises
    ------
    SgtuneError
        If B does not divide N, the scheme is unknown, or a count is out of range.
    UnstableStepSizeError
        If h ∉ (0, 2).

    Examples
    --------
    >>> from sgtune.theory.reshuffle import reshuffle_bias
    >>> r = run_reshuffle_chains(np.arange(8.0), 2, 0.5, n_chains=64, n_epochs=200, seed=1)
    >>> exact = reshuffle_bias(np.arange(8.0), 2, 0.5).rr_average_var
    >>> bool(abs(r.average_var - exact) < 4 * r.average_var_se)
    True
    """
    x, b, h, sig2, _, c, e, bi = _validate(data, batch_size, step, sigma2, scheme, n_chains,
                                              n_epochs, burn_in_epochs)
    plan = reshuffle_plan(x, b, h, math.sqrt(2.0 * h * sig2 / x.shape[0]), scheme, c, e, bi, int(seed))
    run_plan(plan, backend_of(backend, "reshuffle chains"), None)
    rec = plan.recorder(True)
    return ReshuffleChains(scheme=scheme, seed=int(seed), n_epochs=e, burn_in_epochs=bi,
                           first_moment=rec.pos_mean[:, :, 0] / e, second_moment=rec.pos_m2[:, :, 0] / e)
