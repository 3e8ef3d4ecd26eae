r"""The minibatch-noise models of the forward theories compared by Wang, Ding & Huggins (2026), in one registry.

Every theory of their Table 1 / Algorithm 1 describes the stationary covariance Σ of SG(L)D with
step-size matrix Λ by one equation,

.. math::  ΛHΣ + ΣHΛᵀ = Λ\,(C(Σ) + [HΣH])\,Λᵀ + 2Λ/β,

and differs only in its noise covariance C(Σ) (f/B included) and in whether the discrete-time term
HΣH is kept:

- ``dq-exact`` (Eq. (12)): C̄(Σ) = (f/B)(𝓘 − ḡḡᵀ + mean_n J_nΣJ_n − JΣJ), with HΣH;
- ``ct`` (continuous time, Eqs. (2)–(3)): Ĉ = (f/B)(𝓘 − ḡḡᵀ), without HΣH;
- ``dq-const`` (Eq. (5) with constant noise): Ĉ, with HΣH;
- ``lr-ws`` (Eqs. (5)–(6), linear models only): (f/B)(JΣJ + tr(JΣ)J + (σ̂²/σ²)J), with HΣH.

Tuning (:func:`sgtune.theory.tuning.tune`) solves the equation for Λ at Σ = Σ* with the right-hand
side R = C(Σ*) [+ HΣ*H] (:meth:`NoiseModel.tuning_rhs`); prediction
(:func:`sgtune.theory.stationary.predict_comparison_cov`) solves it for Σ at a given Λ
(:meth:`NoiseModel.predict`). ``dq-exact`` is the chain's own noise: its prediction is the exact
stationary solve of :class:`~sgtune.theory.linear_chain.LinearChain`.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.linalg as sla

from ..core._refs import cites
from ..core.errors import SgtuneError
from ..models import Expansion
from .linear_chain import LinearChain

__all__ = ["NoiseModel", "NOISE_MODELS", "noise_model"]


class NoiseModel:
    """One theory's noise covariance C(Σ), its guard and its prediction of Σ for a given Λ.

    Attributes
    ----------
    name : str
        The registry key (``--method`` of ``sgtune lambda``).
    title : str
        The theory and where the paper states it.
    discrete : bool
        Whether the equation keeps the discrete-time term HΣH (all but ``ct``).
    exact : bool
        Whether C(Σ) is the chain's own minibatch noise (only ``dq-exact``; the structured
        families and momentum are defined through it).

    Examples
    --------
    >>> from sgtune.theory.noise_models import NOISE_MODELS
    >>> [(name, model.discrete, model.exact) for name, model in NOISE_MODELS.items()]
    [('dq-exact', True, True), ('ct', False, False), ('dq-const', True, False), ('lr-ws', True, False)]
    """

    name = ""
    title = ""
    discrete = True
    exact = False

    def check(self, expansion: Expansion, *, what: str = "method") -> None:
        """Raise :class:`SgtuneError` when the theory does not apply to the model (default: it applies);
        ``what`` names the argument in the message (``method`` of the tuning, ``theory`` of a prediction)."""

    def covariance(self, expansion: Expansion, sigma: np.ndarray | None, scale: float) -> np.ndarray:
        """C(Σ), the theory's covariance of the B-sample minibatch gradient (``scale`` = f/B)."""
        raise NotImplementedError

    def tuning_rhs(self, expansion: Expansion, sigma: np.ndarray, scale: float) -> np.ndarray:
        """R = C(Σ) [+ HΣH], symmetrised: the right-hand side of the tuning equation ΛHΣ + ΣHΛ = ΛRΛ + 2Λ/β."""
        R = self.covariance(expansion, sigma, scale)
        if self.discrete:
            H = expansion.hessian
            R = R + H @ sigma @ H
        return 0.5 * (R + R.T)

    def predict(self, chain: LinearChain) -> np.ndarray:
        """Σ the theory predicts for the chain's Λ (no momentum)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"NoiseModel({self.name!r})"


class _DQExact(NoiseModel):
    name = "dq-exact"
    title = "DQ+exact (Wang, Ding & Huggins 2026, Eqs. (11)–(12))"
    exact = True

    @cites("wang2026", "Thm. 4.3, Eq. (12)")
    def covariance(self, expansion: Expansion, sigma: np.ndarray | None, scale: float) -> np.ndarray:
        e = expansion
        J = e.curvature
        c = (e.gradient_cov() + e.mean_jsj(sigma) - J @ sigma @ J) * scale
        return 0.5 * (c + c.T)

    def predict(self, chain: LinearChain) -> np.ndarray:
        return chain.solve().cov


class _CT(NoiseModel):
    name = "ct"
    title = "CT, the continuous-time OU proxy (Wang, Ding & Huggins 2026, Eqs. (2)–(3))"
    discrete = False

    @cites("wang2026", "Eqs. (2)–(3): Ĉ = f(𝓘 − ḡḡᵀ)/B at θ̂")
    def covariance(self, expansion: Expansion, sigma: np.ndarray | None, scale: float) -> np.ndarray:
        return expansion.gradient_cov() * scale

    def predict(self, chain: LinearChain) -> np.ndarray:
        lam, H = chain.step_matrix, chain.hessian
        C_hat = self.covariance(chain.expansion, None, chain.noise_scale)
        S = sla.solve_continuous_lyapunov(lam @ H, lam @ C_hat @ lam.T + _injected(chain))
        return 0.5 * (S + S.T)


class _DQConst(_CT):
    name = "dq-const"
    title = "DQ+const, the discrete proxy with constant noise (Wang, Ding & Huggins 2026, Eq. (5))"
    discrete = True

    def predict(self, chain: LinearChain) -> np.ndarray:
        lam = chain.step_matrix
        if not chain.transition_radius() < 1:
            chain.raise_unstable(np.inf)
        C_hat = self.covariance(chain.expansion, None, chain.noise_scale)
        S = sla.solve_discrete_lyapunov(chain.transition, lam @ C_hat @ lam.T + _injected(chain))
        return 0.5 * (S + S.T)


class _LRWS(NoiseModel):
    name = "lr-ws"
    title = "LR+WS, well-specified linear regression (Wang, Ding & Huggins 2026, Eqs. (5)–(6))"

    def check(self, expansion: Expansion, *, what: str = "method") -> None:
        if expansion.model != "linear" or math.isnan(expansion.residual_variance):
            raise SgtuneError(f"{what} 'lr-ws' assumes a well-specified linear regression (a Gaussian linear "
                              f"model with a residual variance); the model is {expansion.model!r} — use "
                              "'dq-exact'")

    @cites("wang2026", "Eqs. (5)–(6): C(Σ) = (f/B)(JΣJ + tr(JΣ)J + (σ̂²/σ²)J)")
    def covariance(self, expansion: Expansion, sigma: np.ndarray | None, scale: float) -> np.ndarray:
        J = expansion.curvature
        ratio = expansion.residual_variance / expansion.noise_variance
        return scale * (J @ sigma @ J + np.trace(J @ sigma) * J + ratio * J)

    def predict(self, chain: LinearChain) -> np.ndarray:
        e, lam, d = chain.expansion, chain.step_matrix, chain.dim
        J, F, fb = e.curvature, chain.transition, chain.noise_scale
        ratio = e.residual_variance / e.noise_variance
        # vec(ΛJΣJΛᵀ) = (ΛJ ⊗ ΛJ) vec Σ; vec(tr(JΣ) ΛJΛᵀ) = vec(ΛJΛᵀ) vec(J)ᵀ vec Σ
        LJ = lam @ J
        op = np.eye(d * d) - np.kron(F, F) - fb * (np.kron(LJ, LJ) + np.outer((lam @ J @ lam.T).ravel(), J.ravel()))
        rhs = fb * ratio * lam @ J @ lam.T + _injected(chain)
        S = np.linalg.solve(op, rhs.ravel()).reshape(d, d)
        return 0.5 * (S + S.T)


def _injected(chain: LinearChain) -> np.ndarray:
    """2Λ/β (zero for SGD)."""
    beta = chain.inv_temperature
    return 2.0 * chain.step_matrix / beta if math.isfinite(beta) else np.zeros((chain.dim, chain.dim))


#: every forward theory, by name (the order of the paper's Table 1)
NOISE_MODELS: dict[str, NoiseModel] = {m.name: m for m in (_DQExact(), _CT(), _DQConst(), _LRWS())}


@cites("wang2026", "Table 1 / Algorithm 1: the forward theories, by name")
def noise_model(name: Any, *, what: str = "method") -> NoiseModel:
    """The registered :class:`NoiseModel` called ``name`` (``what`` names the argument in the error).

    Parameters
    ----------
    name : str
        A key of :data:`NOISE_MODELS`.
    what : str, optional
        The argument's name in the error message.

    Returns
    -------
    NoiseModel
        The theory.

    Raises
    ------
    SgtuneError
        An unknown name.

    Examples
    --------
    >>> from sgtune.theory.noise_models import noise_model
    >>> noise_model("ct").title
    'CT, the continuous-time OU proxy (Wang, Ding & Huggins 2026, Eqs. (2)–(3))'
    """
    try:
        return NOISE_MODELS[name]
    except (KeyError, TypeError):
        raise SgtuneError(f"{what} must be one of {', '.join(NOISE_MODELS)}, got {name!r}") from None
