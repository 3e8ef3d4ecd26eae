"""Pure-Python reference of the GNLD chains (sgtune.sampler.gnld) as a backend of the engine's seam.

Written independently of the numba oracle and step rule: per replica, the stream of
:class:`~sgtune.sampler.rng.Xoshiro256PP` drawn in the engine's order (B indices, then n normals per step),
the gradient ĝ of the GNLD paper's eq. (6.3) in Python floats, z ← z − Λĝ + Lξ with Λ = η(D + Q) and
L = sqrt(η)·chol(2D), and the running sum of ℓᵀz after every step.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sgtune.sampler.rng import Xoshiro256PP

__all__ = ["GnldReference"]


def _gradient(z: list[float], plan: Any, idx: list[int]) -> list[float]:
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


class GnldReference:
    """``prepare``/``advance`` over a :func:`sgtune.sampler.gnld.gnld_plan` (the whole run in one call)."""

    name = "python"

    def prepare(self, plan: Any) -> None:
        return None

    def advance(self, plan: Any, t0: int, n_steps: int, last: bool) -> None:
        st = plan.state
        lam, fac = plan.params.lam, plan.params.fac
        ell = plan.recorder(last).obs[0]
        obs_sum = plan.recorder(last).obs_sum
        n_data = plan.oracle.X.shape[0]
        batch = plan.batching == "replacement"
        for c in range(st.theta.shape[0]):
            gen = Xoshiro256PP(st.rng[c])
            z = [float(v) for v in st.theta[c]]
            n = len(z)
            for _ in range(n_steps):
                idx = [gen.randbelow(n_data) for _ in range(plan.sched.batch_size)] if batch else []
                g = _gradient(z, plan, idx)
                xi = gen.normals(n)
                z = [z[a] - sum(float(lam[a, b]) * g[b] for b in range(n))
                     + sum(float(fac[a, b]) * float(xi[b]) for b in range(a + 1)) for a in range(n)]
                obs_sum[c, 0] += sum(float(ell[a]) * z[a] for a in range(n))
            st.theta[c] = np.array(z)
            st.rng[c] = gen.state()
