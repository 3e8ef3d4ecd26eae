"""The general path: chains for user models that only provide NumPy gradients.

A model without a numba spec (:mod:`sgtune.sampler.specs`) provides

- ``per_sample_grads(theta (D,), X (n, p), y (n,)) -> (n, D)``: gradients of the per-observation
  loss ∇_θ ρ_n(θ), one row per observation; and optionally
- ``batched_grads(thetas (C, D), X (C, B, p), y (C, B)) -> (C, D)``: the *mean* gradient of each
  chain's minibatch, vectorised over chains (used instead of C calls of ``per_sample_grads``;
  :meth:`sgtune.models.MLP.batched_grads` is one).

Every step of all C chains (:class:`NumpyBackend`) is: the chains' next
minibatches (:func:`~sgtune.sampler.kernels.draw_batches`,
the same jitted batch components and xoshiro256++ streams as the compiled chains), the data term
G_n = mean of the model's gradients over the batch (NumPy, the model's code), then
:func:`~sgtune.sampler.kernels.advance` (prior Γθ/N, the same update components, divergence check
and streaming outputs). A GLM run here therefore gives the same chain as the compiled kernel up
to the rounding of the gradient (tested to 1e-12), and the result goes through the same
:class:`~sgtune.sampler.driver.ChainResult` summary.

The SMILE samplers (:mod:`~sgtune.sampler.smile_chain`) evaluate the gradient three times per step
on the step's minibatch, at the start (with the batch-mean loss from ``per_sample_losses``, which
they need for the energy error), at the half step and at the end (with the loss); after each
evaluation :func:`~sgtune.sampler.smile_chain.general_phase` runs the same jitted integrator phase as
the compiled chain.

The model's output is validated on the first call (shape and finiteness); a wrong one raises a
one-line :class:`~sgtune.core.errors.SgtuneError` naming the model and the function.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..core.errors import SgtuneError, ShapeError
from . import kernels, smile_chain
from ._jit import component_name, specialisation
from ..models.base import model_label

__all__ = ["GeneralPath", "NumpyBackend"]


class GeneralPath:
    """Runs the steps of a :class:`~sgtune.sampler.state.ChainPlan` for a NumPy-gradient model."""

    def __init__(self, plan: Any) -> None:
        model = plan.py_model
        self.plan = plan
        self.label = model_label(model)
        self.per_sample: Callable[..., Any] = model.per_sample_grads
        self.batched: Callable[..., Any] | None = getattr(model, "batched_grads", None)
        if self.batched is not None and not callable(self.batched):
            self.batched = None
        self.X, self.y, self.d = plan.oracle.X, plan.oracle.y, plan.state.theta.shape[1]
        self.state = plan.state
        self.batch_size = int(plan.sched.batch_size)
        n_chains = self.state.theta.shape[0]
        self.idx = np.zeros((n_chains, max(self.batch_size, 1)), dtype=np.int64)
        self.grads = np.zeros((n_chains, self.d))
        self.checked_batched = self.checked_single = self.checked_loss = False
        self.per_sample_losses: Callable[..., Any] | None = getattr(model, "per_sample_losses", None)
        self.values = np.zeros(n_chains)

    def run(self, t0: int, n_steps: int) -> None:
        """Advance all chains from step ``t0`` by ``n_steps``."""
        plan = self.plan
        mid, last = plan.recorder(False), plan.recorder(True)
        n_data = self.X.shape[0]
        diverged = self.state.diverged
        batch = component_name(plan.batch_fn)
        move = None if plan.move_fn is None else component_name(plan.move_fn)
        # the compiled specialisations, looked up once per call (the arguments' types do not change between steps)
        draw = specialisation(kernels.draw_batches, 1, batch, self.state, n_data, self.batch_size, self.idx)
        step = None
        for t in range(t0 + 1, t0 + n_steps + 1):
            nb = draw(batch, self.state, n_data, self.batch_size, self.idx)
            live = np.flatnonzero(diverged < 0)
            if live.size == 0:
                return
            rec = last if t == plan.n_steps else mid
            if plan.is_mclmc:
                for phase in range(3):
                    live = np.flatnonzero(diverged < 0)
                    self._gradients(live, nb)
                    if phase != 1:
                        self._losses(live, nb)
                    smile_chain.general_phase(phase, self.state, t, plan.burn_in, self.grads, self.values,
                                              plan.oracle, plan.mclmc, rec)
                continue
            self._gradients(live, nb)
            args = (move, self.state, t, plan.burn_in, self.grads, plan.oracle, plan.sched.decay, plan.params, rec,
                    plan.mclmc)
            if step is None:
                step = specialisation(kernels.advance, 1, *args)
            step(*args)

    def _losses(self, live: np.ndarray, nb: int) -> None:
        """Batch-mean loss of every live chain at its current θ into ``values``."""
        theta = self.state.theta
        idx = self.idx[live, :nb]
        assert self.per_sample_losses is not None  # checked by the driver
        for k, c in enumerate(live):
            rows = idx[k]
            v = np.asarray(self.per_sample_losses(theta[c], self.X[rows], self.y[rows]), dtype=float)
            if not self.checked_loss:
                if v.shape != (nb,):
                    raise ShapeError(f"model {self.label}.per_sample_losses returned shape {v.shape}, expected ({nb},)")
                if not np.all(np.isfinite(v)):
                    raise SgtuneError(f"model {self.label}.per_sample_losses returned non-finite values at the "
                                      "start; check the model's loss at the initial θ")
                self.checked_loss = True
            self.values[c] = v.mean()

    def _gradients(self, live: np.ndarray, nb: int) -> None:
        theta = self.state.theta
        idx = self.idx[live, :nb]
        if self.batched is not None:
            g = np.asarray(self.batched(theta[live], self.X[idx], self.y[idx]))
            if not self.checked_batched:
                self._check(g, (live.size, self.d), "batched_grads")
                self.checked_batched = True
            self.grads[live] = g
            return
        for k, c in enumerate(live):
            rows = idx[k]
            g = np.asarray(self.per_sample(theta[c], self.X[rows], self.y[rows]))
            if not self.checked_single:
                self._check(g, (nb, self.d), "per_sample_grads")
                self.checked_single = True
            self.grads[c] = g.mean(axis=0)

    def _check(self, g: np.ndarray, expected: tuple[int, ...], fn: str) -> None:
        if g.shape != expected:
            raise ShapeError(f"model {self.label}.{fn} returned shape {g.shape}, expected {expected}")
        if not np.all(np.isfinite(g)):
            raise SgtuneError(f"model {self.label}.{fn} returned non-finite values at the start; "
                              "check the model's gradient at the initial θ")


class NumpyBackend:
    """The general path: NumPy gradients from the model, the compiled batch schedules, moves and recorder."""

    name = "numpy"

    def prepare(self, plan: Any) -> None:
        if plan.init_fn is not None:
            plan.init_fn(plan.state)
        self.path = GeneralPath(plan)

    def advance(self, plan: Any, t0: int, n_steps: int, last: bool) -> None:
        self.path.run(t0, n_steps)
