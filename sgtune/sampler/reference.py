"""The reference backend of the chain engine: every step in plain NumPy (slow; the template for a new backend).

:class:`ReferenceBackend` implements the engine's seam (:mod:`sgtune.sampler.engine`: ``prepare(plan)``,
``advance(plan, t0, n_steps, last)``) over the same :class:`~sgtune.sampler.state.ChainPlan` and records as
the compiled :class:`~sgtune.sampler.engine.NumbaBackend`, but is written independently of it: NumPy vector
operations per step, the GLM derivatives of :mod:`sgtune.models`, and the random stream of
:class:`~sgtune.sampler.rng.Xoshiro256PP` (Python integers). On the same seed the two agree to rounding
(≈ 1e-12): it is the oracle of the engine's tests.

It is written the way blackjax writes a sampler, one chain at a time:

- :func:`init_chain` reads chain c's :class:`ReferenceChain` (θ, the auxiliary vector m, the epoch position,
  the stream) from the plan's records, :func:`store_chain` writes it back;
- :func:`step` advances a :class:`ReferenceChain` by one step: the minibatch (:func:`batch_indices`), the
  gradient oracle (:func:`gradient`), the momentum m ← κ m + g, then the step rule of the sampler, one
  pure function per rule in :data:`STEP_RULES` (:func:`sgld_step`, :func:`sglrw_step`,
  :func:`clipped_sgld_step`);
- :func:`record` adds a kept draw to the recorder (plain per-step Welford updates: the compiled recorder's
  blocked merge is a different route to the same numbers, so ``blk``, ``blk_n`` and ``flush`` are unused).

It runs the SG(L)D family (``sgld``, ``sglrw``, ``clipped-sgld``, with momentum and a diagonal or dense Λ)
on the GLM oracles and the quadratic oracles (Gaussian or α-stable noise), Shaw & Whalley's reshuffling
model problem of :func:`sgtune.sampler.reshuffle.run_reshuffle_chains` (the Gaussian-mean oracle θ − x̄_b, every
batch schedule of :data:`sgtune.sampler.kernels.BATCH_FNS`, the recorder's sums of θ − x̄ by epoch position),
the GNLD replicas of :func:`sgtune.sampler.gnld.run_sg_gnld` (:func:`gnld_gradient`, in Python floats), and
the SMILE ensembles of :func:`sgtune.sampler.smile_ensemble.run_smile_ensemble` (the MCLMC integrator in the
cosh/sinh form of the SMILE paper's appendix F.2, the tuners through :mod:`sgtune.theory.smile`; in
``sgtune/sampler/_smile_reference.py``, the tests' twin until 0.2.0): all five of the engine's entry points
(``ReferenceBackend`` below lists them). A GPU backend is a new module of
the same shape: read the components' names from ``plan.sampler``, ``plan.lam_kind``, ``plan.batching`` and
``plan.oracle_kind``, move the records to the device in ``prepare``, run the steps of all chains at once
in ``advance``, and write the records back; the theory, the registry and the driver do not change.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core.errors import SgtuneError
from ._smile_reference import SmileReference
from .rng import Xoshiro256PP

__all__ = ["ReferenceBackend", "ReferenceChain", "init_chain", "store_chain", "step", "batch_indices", "next_position",
           "gradient", "sgld_step", "sglrw_step", "clipped_sgld_step", "record", "STEP_RULES", "gnld_gradient"]

_GLM_NAMES = {0: "linear", 1: "logistic", 2: "poisson", 3: "beta-linear"}
_BATCH_CODES = {"replacement": 0, "without-replacement": 1, "reshuffle": 2}


@dataclass
class ReferenceChain:
    """One chain between steps: θ, the auxiliary vector m (SG(L)D's momentum), the batch schedule's epoch
    position, the stream, the batch schedule's permutation (chain c's row of the records, shuffled in
    place) and the clip count of this call."""

    theta: np.ndarray
    mom: np.ndarray
    epoch_pos: int
    stream: Xoshiro256PP
    perm: np.ndarray
    clips: int = 0


#: the batch schedules by their old codes (0, 1, 2) in :func:`batch_indices`
_BATCH_NAMES = {code: name for name, code in _BATCH_CODES.items()}


def next_position(pos: int, n_data: int, batch_size: int) -> int:
    """The epoch position after ``pos``: (pos + 1) mod R, R = ceil(N/B) steps an epoch."""
    return 0 if (pos + 1) * batch_size >= n_data else pos + 1


def batch_indices(gen: Xoshiro256PP, perm: np.ndarray, n_data: int, batch_size: int, batching: int | str,
                  epoch_pos: int) -> tuple[np.ndarray, int]:
    """The next minibatch (indices) and the new epoch position, for the batch schedule ``batching`` (a name of
    :data:`sgtune.sampler.kernels.BATCH_FNS`, or the code 0, 1, 2 of the first three).

    ``replacement``: B uniform indices; ``without-replacement``: a uniform B-subset (a partial Fisher–Yates
    shuffle of ``perm``); ``reshuffle``: a full shuffle of ``perm`` at each epoch's start, then its
    consecutive blocks; ``none`` and ``full``: an empty batch and no draw (no data, or the oracle uses all of
    it). ``reshuffle``, ``full`` and the ``*-positions`` schedules (the same draws as the schedule without the
    suffix) count epoch positions (:func:`next_position`); the others leave ``epoch_pos`` as it is.
    """
    name = _BATCH_NAMES[batching] if isinstance(batching, int) else batching
    draw = name.removesuffix("-positions")
    counts = name != draw or name in ("reshuffle", "full")
    if draw == "replacement":
        idx = np.array([gen.randbelow(n_data) for _ in range(batch_size)], dtype=np.int64)
    elif draw == "without-replacement":
        for k in range(batch_size):
            j = k + gen.randbelow(n_data - k)
            perm[k], perm[j] = perm[j], perm[k]
        idx = perm[:batch_size].copy()
    elif draw == "reshuffle":
        if epoch_pos == 0:
            for i in range(n_data - 1, 0, -1):
                j = gen.randbelow(i + 1)
                perm[i], perm[j] = perm[j], perm[i]
        start = epoch_pos * batch_size
        idx = perm[start:min(start + batch_size, n_data)].copy()
    elif draw in ("none", "full"):
        idx = np.empty(0, dtype=np.int64)
    else:
        raise SgtuneError(f"the reference backend has no batch schedule {name!r}")
    return idx, (next_position(epoch_pos, n_data, batch_size) if counts else epoch_pos)


def _glm(plan: Any) -> Any:
    """The GLM of a plan's oracle (:mod:`sgtune.models`), or None for a quadratic oracle."""
    from ..models import get_model

    if plan.oracle_kind != "glm":
        return None
    ints, mpar = plan.oracle.ints, plan.oracle.floats
    model = int(ints[0])
    return get_model(_GLM_NAMES[model], noise_variance=float(mpar[0]),
                     beta_power=float(mpar[1]) if model == 3 else None)


def gradient(plan: Any, chain: ReferenceChain, glm: Any) -> np.ndarray:
    """The gradient oracle at ``chain.theta``: a quadratic's A(θ − μ) plus Gaussian (L ξ) or α-stable noise;
    a GLM's minibatch-mean gradient plus the prior Γ/N θ; or the model problem's θ − x̄_b, the mean of the
    batch's rows subtracted (the full mean x̄ on an empty batch: Shaw & Whalley 2025, §4). The data oracles draw
    their batch first (:func:`batch_indices`, updating ``chain.epoch_pos``)."""
    ora, th, gen = plan.oracle, chain.theta, chain.stream
    if plan.oracle_kind == "quadratic-gaussian":
        return ora.hessian @ (th - ora.mean) + ora.noise_factor @ gen.normals(th.size)
    if plan.oracle_kind == "quadratic-stable":
        g = ora.hessian @ (th - ora.mean)
        return g + ora.floats[4] * np.array([gen.stable_symmetric(float(ora.floats[3])) for _ in range(th.size)])
    X = ora.X
    idx, chain.epoch_pos = batch_indices(gen, chain.perm, X.shape[0], plan.sched.batch_size, plan.batching,
                                         chain.epoch_pos)
    if plan.oracle_kind == "gaussian-mean":
        return th - (X[idx].mean(axis=0) if idx.size else ora.mean)
    d1 = glm.derivatives(X[idx] @ th, ora.y[idx])[1]
    g = X[idx].T @ d1 / len(idx)
    if ora.prior_kind == 1:
        g = g + ora.prior[0, 0] * th
    elif ora.prior_kind == 2:
        g = g + ora.prior @ th
    return g


def sgld_step(th: np.ndarray, m: np.ndarray, s: float, p: Any, lam_kind: int, gen: Xoshiro256PP) -> tuple[np.ndarray, int]:
    """SG(L)D: θ ← θ − s Λ m (+ √s L ξ when noise is injected); (θ, clipped coordinates = 0)."""
    dense = lam_kind == 2
    th = th - s * (p.lam @ m if dense else np.diag(p.lam) * m)
    if bool(p.inject):
        xi = gen.normals(th.size)
        th = th + math.sqrt(s) * (np.tril(p.fac) @ xi if dense else np.diag(p.fac) * xi)
    return th, 0


def sglrw_step(th: np.ndarray, m: np.ndarray, s: float, p: Any, lam_kind: int, gen: Xoshiro256PP) -> tuple[np.ndarray, int]:
    """SGLRW: θᵢ ± rᵢ, rᵢ = √s Lᵢᵢ, up with probability ½ − ½ s Λᵢᵢ mᵢ / rᵢ clipped to [0, 1] (counted)."""
    r = math.sqrt(s) * np.diag(p.fac)
    prob = 0.5 - 0.5 * s * np.diag(p.lam) * m / r
    clips = int(np.sum((prob < 0) | (prob > 1)))
    prob = np.clip(prob, 0.0, 1.0)
    u = np.array([gen.uniform() for _ in range(th.size)])
    return th + np.where(u < prob, r, -r), clips


def clipped_sgld_step(th: np.ndarray, m: np.ndarray, s: float, p: Any, lam_kind: int,
                      gen: Xoshiro256PP) -> tuple[np.ndarray, int]:
    """Clipped SGLD: θ ← θ − clip(s Λ m, ±r) + r ξ, r = √s diag L (clipped coordinates counted)."""
    xi = gen.normals(th.size)
    r = math.sqrt(s) * np.diag(p.fac)
    dr = s * np.diag(p.lam) * m
    return th - np.clip(dr, -r, r) + r * xi, int(np.sum(np.abs(dr) > r))


#: the step rules of the reference backend, by sampler name
STEP_RULES: dict[str, Callable[..., tuple[np.ndarray, int]]] = {
    "sgld": sgld_step, "sglrw": sglrw_step, "clipped-sgld": clipped_sgld_step}


def init_chain(plan: Any, c: int) -> ReferenceChain:
    """Chain c's state as the plan's records hold it."""
    st = plan.state
    return ReferenceChain(theta=st.theta[c].copy(), mom=st.mom[c].copy(), epoch_pos=int(st.epoch_pos[c]),
                          stream=Xoshiro256PP(st.rng[c]), perm=st.perm[c])


def store_chain(plan: Any, c: int, chain: ReferenceChain) -> None:
    """Write chain c's state back into the plan's records."""
    st = plan.state
    st.theta[c], st.mom[c], st.epoch_pos[c] = chain.theta, chain.mom, chain.epoch_pos
    st.rng[c] = chain.stream.state()
    st.clip_count[c] += chain.clips


def step(plan: Any, chain: ReferenceChain, t: int, glm: Any) -> ReferenceChain:
    """Step t (counted from 1) of one chain: the gradient, m ← κ m + g, the sampler's rule at the schedule
    factor s = t^(−γ) (``glm``: the plan's model, :func:`gradient`)."""
    g = gradient(plan, chain, glm)
    p = plan.params
    m = float(p.momentum) * chain.mom + g
    decay = plan.sched.decay
    s = float(t) ** (-decay) if decay != 0.0 else 1.0
    th, clips = STEP_RULES[plan.sampler](chain.theta, m, s, p, plan.lam_kind, chain.stream)
    chain.theta, chain.mom, chain.clips = th, m, chain.clips + clips
    return chain


def record(rec: Any, c: int, u: int, th: np.ndarray, pos: int) -> None:
    """Kept draw u (counted from 1) of chain c into the recorder: Welford moments of its segment, the trace
    every ``thin`` draws, the observables' sums and the moments by epoch position (or, when the recorder has a
    ``pos_centre``, the sums of d = θ − centre and d² by epoch position)."""
    n_seg, n_trace, n_pos = rec.acc_n.shape[1], rec.trace.shape[1], rec.pos_n.shape[1]
    if n_seg > 0:
        seg = min((u - 1) // rec.seg_len, n_seg - 1)
        rec.acc_n[c, seg] += 1
        delta = th - rec.acc_mean[c, seg]
        rec.acc_mean[c, seg] += delta / rec.acc_n[c, seg]
        rec.acc_m2[c, seg] += np.triu(np.outer(delta, th - rec.acc_mean[c, seg]))
    thin = rec.thin
    if thin > 0 and u % thin == 0 and u // thin - 1 < n_trace:
        rec.trace[c, u // thin - 1] = th
    rec.obs_sum[c] += rec.obs @ th
    if n_pos > 0 and rec.pos_centre.shape[0] > 0:  # sums of d = θ − centre and d² (the model problem's)
        rec.pos_n[c, pos] += 1
        d = th - rec.pos_centre
        rec.pos_mean[c, pos] += d
        rec.pos_m2[c, pos] += d * d
    elif n_pos > 0:
        rec.pos_n[c, pos] += 1
        dp = th - rec.pos_mean[c, pos]
        rec.pos_mean[c, pos] += dp / rec.pos_n[c, pos]
        rec.pos_m2[c, pos] += dp * (th - rec.pos_mean[c, pos])


# --------------------------------------------------------------------------- GNLD (sgtune.sampler.gnld)
def gnld_gradient(z: list[float], plan: Any, idx: list[int]) -> list[float]:
    """GNLD's ĝ (the GNLD paper, eq. (6.3)) in Python floats: M z, with the first p coordinates replaced by
    the BLR minibatch gradient at θ = θ̄ + x when ``idx`` (the minibatch) is not empty."""
    ora = plan.oracle
    m, xs, ys, p = ora.hessian, ora.X, ora.y, int(ora.ints[0])
    n = len(z)
    grad = [sum(float(m[a, b]) * z[b] for b in range(n)) for a in range(n)]
    if not idx:
        return grad
    center = ora.floats[:p]
    prior = ora.floats[p:].reshape(p, p)
    theta = [float(center[a]) + z[a] for a in range(p)]
    for a in range(p):
        grad[a] -= sum(float(m[a, b]) * z[b] for b in range(p))
        grad[a] += sum(float(prior[a, b]) * theta[b] for b in range(p))
    scale = xs.shape[0] / len(idx)
    for i in idx:
        r = -float(ys[i]) + sum(float(xs[i, a]) * theta[a] for a in range(p))
        for a in range(p):
            grad[a] += scale * r * float(xs[i, a])
    return grad


def _advance_gnld(plan: Any, rec: Any, n_steps: int) -> None:
    """GNLD replicas by ``n_steps`` steps in Python floats: per step B indices, n normals, z ← z − Λĝ + Lξ
    (Λ = η(D + Q), L = sqrt(η) chol(2D) lower-triangular), then ℓᵀz into the observable's sum."""
    st = plan.state
    lam, fac = plan.params.lam, plan.params.fac
    ell, obs_sum = rec.obs[0], rec.obs_sum
    n_data = plan.oracle.X.shape[0]
    batch = plan.batching == "replacement"
    for c in range(st.theta.shape[0]):
        gen = Xoshiro256PP(st.rng[c])
        z = [float(v) for v in st.theta[c]]
        n = len(z)
        for _ in range(n_steps):
            idx = [gen.randbelow(n_data) for _ in range(plan.sched.batch_size)] if batch else []
            g = gnld_gradient(z, plan, idx)
            xi = gen.normals(n)
            z = [z[a] - sum(float(lam[a, b]) * g[b] for b in range(n))
                 + sum(float(fac[a, b]) * float(xi[b]) for b in range(a + 1)) for a in range(n)]
            obs_sum[c, 0] += sum(float(ell[a]) * z[a] for a in range(n))
        st.theta[c] = np.array(z)
        st.rng[c] = gen.state()


class ReferenceBackend:
    """The reference implementation as a backend of the engine's seam: ``backend=ReferenceBackend()``.

    The protocol is the engine's one (:func:`sgtune.sampler.engine.run_plan`): ``prepare(plan)`` once, then
    ``advance(plan, t0, n_steps, last)`` over the plan's records, chunk by chunk. The entry points it reaches,
    each agreeing with the compiled engine to rounding on the same seed:

    - :func:`sgtune.sampler.run_chains`: GLMs, samplers ``sgld``, ``sglrw``, ``clipped-sgld``;
    - :func:`sgtune.sampler.run_quadratic_chains`: the same samplers, Gaussian or α-stable noise;
    - :func:`sgtune.sampler.reshuffle.run_reshuffle_chains`: every scheme;
    - :func:`sgtune.sampler.gnld.run_sg_gnld`: with or without minibatches;
    - :func:`sgtune.sampler.smile_ensemble.run_smile_ensemble`: every sampler on the analytic targets.

    Not models without a GLM oracle in :func:`sgtune.sampler.run_chains` (MLPs, multinomial, user models:
    ``backend="numba"`` or ``"numpy"``), nor SGHMC or SMILE on data there.

    Examples
    --------
    >>> import numpy as np
    >>> from sgtune.sampler.reshuffle import run_reshuffle_chains
    >>> x = np.arange(6.0)
    >>> a = run_reshuffle_chains(x, 2, 0.5, n_chains=2, n_epochs=3, burn_in_epochs=1, seed=2)
    >>> b = run_reshuffle_chains(x, 2, 0.5, n_chains=2, n_epochs=3, burn_in_epochs=1, seed=2,
    ...                          backend=ReferenceBackend())
    >>> bool(np.allclose(a.second_moment, b.second_moment, rtol=1e-12))
    True
    """

    name = "python"

    def prepare(self, plan: Any) -> None:
        """Check that the plan's oracle and sampler are ones this backend runs (a SMILE ensemble's plan: draw
        the MCLMC velocities, as the engine's ``prepare`` does)."""
        if plan.oracle_kind == "gnld":
            return
        if plan.oracle_kind == "analytic-target":
            self._smile = SmileReference()
            self._smile.prepare(plan)
            return
        if plan.oracle_kind not in ("glm", "quadratic-gaussian", "quadratic-stable", "gaussian-mean"):
            raise SgtuneError(f"the pure-Python reference supports GLMs, quadratic oracles, the reshuffle model "
                              f"problem and the SMILE targets, not {plan.oracle_kind!r} models; use backend='numba'")
        if plan.sampler not in STEP_RULES:
            raise SgtuneError(f"the pure-Python reference runs sgld, sglrw and clipped-sgld, not {plan.sampler!r}; "
                              "use backend='numba' or 'numpy'")

    def advance(self, plan: Any, t0: int, n_steps: int, last: bool) -> None:
        """Every live chain from step t0 + 1 to t0 + n_steps; a chain whose ‖θ‖₁ reaches 1e150 (or is not
        finite) stops and keeps its divergence step."""
        if plan.oracle_kind == "analytic-target":
            self._smile.advance(plan, t0, n_steps, last)
            return
        rec = plan.recorder_at(t0, last)
        if plan.oracle_kind == "gnld":
            _advance_gnld(plan, rec, n_steps)
            return
        glm = _glm(plan)
        diverged = plan.state.diverged
        for c in range(plan.state.theta.shape[0]):
            if diverged[c] >= 0:
                continue
            chain = init_chain(plan, c)
            for t in range(t0 + 1, t0 + n_steps + 1):
                chain = step(plan, chain, t, glm)
                if not np.sum(np.abs(chain.theta)) < 1e150:
                    diverged[c] = t
                    break
                if t > plan.burn_in:
                    record(rec, c, t - plan.burn_in, chain.theta, chain.epoch_pos)
            store_chain(plan, c, chain)
