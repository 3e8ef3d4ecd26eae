"""The pure-Python reference implementation of the chain engine (slow; the oracle of the tests).

:func:`run_twin` takes a :class:`~sgtune.sampler.engine.ChainPlan` and mutates the same records as the
compiled engine (:mod:`sgtune.sampler.engine`), but is written independently:
NumPy vector operations per step, the GLM derivatives from :mod:`sgtune.models`
(the reference implementation), and the random stream of :class:`~sgtune.sampler.rng.Xoshiro256PP`
(Python integers). Kernel and twin must agree to rounding (≈1e-12) on the same seed.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from sgtune.core.errors import SgtuneError
from sgtune.models import get_model
from sgtune.sampler.rng import Xoshiro256PP

__all__ = ["run_twin", "batch_twin", "PythonBackend"]

_GLM_NAMES = {0: "linear", 1: "logistic", 2: "poisson", 3: "beta-linear"}


_BATCH_CODES = {"replacement": 0, "without-replacement": 1, "reshuffle": 2}


def batch_twin(gen: Xoshiro256PP, perm: np.ndarray, n_data: int, batch_size: int, batching: int | str,
               epoch_pos: int) -> tuple[np.ndarray, int]:
    """The next minibatch (indices) and the new epoch position (mirror of the batch components)."""
    if isinstance(batching, str):
        batching = _BATCH_CODES[batching]
    if batching == 0:
        return np.array([gen.randbelow(n_data) for _ in range(batch_size)], dtype=np.int64), epoch_pos
    if batching == 1:
        for k in range(batch_size):
            j = k + gen.randbelow(n_data - k)
            perm[k], perm[j] = perm[j], perm[k]
        return perm[:batch_size].copy(), epoch_pos
    n_batches = -(-n_data // batch_size)
    if epoch_pos == 0:
        for i in range(n_data - 1, 0, -1):
            j = gen.randbelow(i + 1)
            perm[i], perm[j] = perm[j], perm[i]
    start = epoch_pos * batch_size
    return perm[start:min(start + batch_size, n_data)].copy(), (epoch_pos + 1) % n_batches


def run_twin(plan: Any, t0: int, n_steps: int, out: Any) -> None:
    """Advance the chains of ``plan`` like the engine (SG(L)D, SGLRW, clipped SGLD; GLMs and quadratic oracles).

    The moments are accumulated by plain per-step Welford updates (the kernel's blocked merge
    is a different route to the same numbers), so ``blk``, ``blk_n`` and ``flush`` are unused.
    """
    sampler, lam_kind, batching, kind = plan.sampler, plan.lam_kind, plan.batching, plan.oracle_kind
    burn_in = plan.burn_in
    theta, mom, rng_state, perm, epoch_pos, diverged, clip_count = plan.state
    ora = plan.oracle
    X, y, ints, mpar, prior_kind, prior = ora.X, ora.y, ora.ints, ora.floats, ora.prior_kind, ora.prior
    A, mu, noise_chol = ora.hessian, ora.mean, ora.noise_factor  # the quadratic oracle
    batch_size, decay = plan.sched.batch_size, plan.sched.decay
    lam, noise_fac = plan.params.lam, plan.params.fac
    kappa, inject = float(plan.params.momentum), bool(plan.params.inject)
    seg_len, acc_n, acc_mean, acc_m2, thin, trace = out.seg_len, out.acc_n, out.acc_mean, out.acc_m2, out.thin, out.trace
    pos_n, pos_mean, pos_m2, obs, obs_sum = out.pos_n, out.pos_mean, out.pos_m2, out.obs, out.obs_sum
    model = int(ints[0]) if kind == "glm" else {"quadratic-gaussian": 4, "quadratic-stable": 5}[kind]
    glm: Any = None
    if model < 4:
        glm = get_model(_GLM_NAMES[model], noise_variance=float(mpar[0]),
                        beta_power=float(mpar[1]) if model == 3 else None)
    diag_lam = np.diag(lam).copy()
    diag_fac = np.diag(noise_fac).copy()
    n_seg, n_trace, n_pos = acc_n.shape[1], trace.shape[1], pos_n.shape[1]
    for c in range(theta.shape[0]):
        if diverged[c] >= 0:
            continue
        gen = Xoshiro256PP(rng_state[c])
        th, m, pos = theta[c].copy(), mom[c].copy(), int(epoch_pos[c])
        for t in range(t0 + 1, t0 + n_steps + 1):
            if model >= 4:
                g = A @ (th - mu)
                if model == 4:
                    g = g + noise_chol @ gen.normals(th.size)
                else:
                    g = g + mpar[4] * np.array([gen.stable_symmetric(float(mpar[3])) for _ in range(th.size)])
            else:
                idx, pos = batch_twin(gen, perm[c], X.shape[0], batch_size, batching, pos)
                d1 = glm.derivatives(X[idx] @ th, y[idx])[1]
                g = X[idx].T @ d1 / len(idx)
                if prior_kind == 1:
                    g = g + prior[0, 0] * th
                elif prior_kind == 2:
                    g = g + prior @ th
            m = kappa * m + g
            s = float(t) ** (-decay) if decay != 0.0 else 1.0
            rs = math.sqrt(s)
            if sampler == "sgld":
                th = th - s * (lam @ m if lam_kind == 2 else diag_lam * m)
                if inject:
                    xi = gen.normals(th.size)
                    th = th + rs * (np.tril(noise_fac) @ xi if lam_kind == 2 else diag_fac * xi)
            elif sampler == "sglrw":
                r = rs * diag_fac
                p = 0.5 - 0.5 * s * diag_lam * m / r
                clip_count[c] += int(np.sum((p < 0) | (p > 1)))
                p = np.clip(p, 0.0, 1.0)
                u = np.array([gen.uniform() for _ in range(th.size)])
                th = th + np.where(u < p, r, -r)
            else:
                xi = gen.normals(th.size)
                r = rs * diag_fac
                dr = s * diag_lam * m
                clip_count[c] += int(np.sum(np.abs(dr) > r))
                th = th - np.clip(dr, -r, r) + r * xi
            if not np.sum(np.abs(th)) < 1e150:
                diverged[c] = t
                break
            if t <= burn_in:
                continue
            u_ = t - burn_in
            seg = min((u_ - 1) // seg_len, n_seg - 1)
            acc_n[c, seg] += 1
            delta = th - acc_mean[c, seg]
            acc_mean[c, seg] += delta / acc_n[c, seg]
            acc_m2[c, seg] += np.triu(np.outer(delta, th - acc_mean[c, seg]))
            if thin > 0 and u_ % thin == 0 and u_ // thin - 1 < n_trace:
                trace[c, u_ // thin - 1] = th
            obs_sum[c] += obs @ th
            if n_pos > 0:
                pos_n[c, pos] += 1
                dp = th - pos_mean[c, pos]
                pos_mean[c, pos] += dp / pos_n[c, pos]
                pos_m2[c, pos] += dp * (th - pos_mean[c, pos])
        theta[c], mom[c], epoch_pos[c] = th, m, pos
        rng_state[c] = gen.state()


class PythonBackend:
    """The reference implementation as a backend of :func:`sgtune.sampler.run_chains` (the engine's seam)."""

    name = "python"

    def prepare(self, plan: Any) -> None:
        if plan.oracle_kind not in ("glm", "quadratic-gaussian", "quadratic-stable"):
            raise SgtuneError(f"the pure-Python reference supports GLMs and quadratic oracles, not {plan.oracle_kind!r} "
                              "models; use backend='numba'")
        if plan.sampler not in ("sgld", "sglrw", "clipped-sgld"):
            raise SgtuneError(f"the pure-Python reference runs sgld, sglrw and clipped-sgld, not {plan.sampler!r}; "
                              "use backend='numba' or 'numpy'")

    def advance(self, plan: Any, t0: int, n_steps: int, last: bool) -> None:
        run_twin(plan, t0, n_steps, plan.recorder(last))
