"""Benchmark: the built-in network model ``mlp`` on the diabetes data (Wang, Ding & Huggins (2026) §6.3).

Prints two tables (run: ``python benchmarks/bench_mlp.py``):

1. exact per-sample Hessians J_n (N = 442, D = 35, the (2, 3) tanh network) by the model's
   R-operator (all D directions in one vectorised pass) vs the protocol's generic route (D
   Hessian–vector products, ``sgtune.models.base.per_sample_curvature``) vs JAX
   ``jit(vmap(hessian))`` (compiled before timing), with the largest difference to the R-operator;
2. ``expand`` (L-BFGS fit + Newton polish + expansion, prior precision 1) with OpenBLAS limited
   to one thread vs its default thread count — scipy's L-BFGS-B calls BLAS on D-sized vectors,
   where threads only add overhead.

Timings are the best of repeated wall-clock runs in one process; benchmarks, not tests.
"""
from __future__ import annotations

import math

import numpy as np
from sklearn.datasets import load_diabetes
from threadpoolctl import threadpool_limits

from _timing import timed

from sgtune.io.data import make_dataset
from sgtune.models import expand, make_mlp
from sgtune.models.base import per_sample_curvature




class HvpOnly:
    """The network seen through hessian_vector_products only (the protocol's generic curvature route)."""

    name = "mlp via HVPs"

    def __init__(self, net):
        self.net = net

    def n_params(self, p):
        return self.net.n_params(p)

    def per_sample_losses(self, *a):
        return self.net.per_sample_losses(*a)

    def per_sample_grads(self, *a):
        return self.net.per_sample_grads(*a)

    def hessian_vector_products(self, *a):
        return self.net.hessian_vector_products(*a)


def main() -> None:
    X, y = load_diabetes(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    y = (y - y.mean()) / y.std()
    data = make_dataset(X, y, source="diabetes")
    net = make_mlp("2,3", "tanh", noise_variance=0.5)
    with threadpool_limits(limits=1):
        e = expand(net, data, 1.0, seed=0)
        th = e.theta_hat
        t_rop, h_rop = timed(lambda: net.curvature(th, X, y).hessians, 10)
        t_hvp, h_hvp = timed(lambda: per_sample_curvature(HvpOnly(net), th, X, y).hessians, 10)
    rows = [("R-operator, D directions at once (sgtune)", t_rop, 0.0),
            ("D Hessian-vector products (protocol fallback)", t_hvp, float(np.abs(h_hvp - h_rop).max()))]
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        jnp = jax.numpy

        def loss(t, x, yy):
            a = jnp.tanh(t[:20].reshape(2, 10) @ x + t[20:22])
            a = jnp.tanh(t[22:28].reshape(3, 2) @ a + t[28:31])
            f = (t[31:34].reshape(1, 3) @ a + t[34:35])[0]
            return 0.5 * (yy - f) ** 2 / 0.5

        hj = jax.jit(jax.vmap(jax.hessian(loss), in_axes=(None, 0, 0)))
        hj(th, X, y).block_until_ready()
        t_jax, h_jax = timed(lambda: hj(th, X, y).block_until_ready(), 10)
        rows.append(("JAX jit(vmap(hessian)), compiled", t_jax, float(np.abs(np.asarray(h_jax) - h_rop).max())))
    except ImportError:
        rows.append(("JAX (not installed)", math.nan, math.nan))
    print(f"Exact per-sample Hessians, diabetes (2, 3) tanh network: N = {X.shape[0]}, D = {e.dim}")
    print(f"| {'method':<46} | {'ms':>8} | {'max |diff|':>10} |\n|---|---:|---:|")
    for name, t, diff in rows:
        print(f"| {name:<46} | {t * 1e3:8.2f} | {diff:10.1e} |")
    print()
    print("expand(mlp 2,3, prior precision 1): L-BFGS + Newton polish + expansion")
    print(f"| {'BLAS threads':<14} | {'s (best of 3)':>13} |\n|---|---:|")
    for limit in (1, None):
        with threadpool_limits(limits=limit):
            t, _ = timed(lambda: expand(net, data, 1.0, seed=0), 3)
        print(f"| {'1' if limit else 'default':<14} | {t:13.3f} |")
    print(f"\nλ_min(H): exact {e.hessian_min_eigenvalue:.4g}, Gauss–Newton "
          f"{expand(make_mlp('2,3', noise_variance=0.5, hessian='gauss-newton'), data, 1.0, theta_hat=th).hessian_min_eigenvalue:.4g}"
          f" (Γ/N = {1 / X.shape[0]:.4g})")


if __name__ == "__main__":
    main()
