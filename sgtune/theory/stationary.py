r"""Stationary covariance, mixing time and iterate averages of SG(L)D (Wang, Ding & Huggins 2026, DQ+exact).

The public functions take the expansion at θ̂ and the chain's settings, one
:class:`~sgtune.core.config.Dynamics` (Λ, B, β, κ, batching):
``predict_stationary_cov(expansion, dynamics)``, ``noise_covariance(expansion, Σ, dynamics)``,
``max_stable_step(expansion, dynamics)``, ``predict_comparison_cov(expansion, dynamics, theory=…)``,
``stationary_cov_evaluator(expansion, dynamics)``; and the functions of a result
(``iterate_average_cov``, ``autocorrelation_times``, ``equilibration_steps``).

The equation they solve — S = F S Fᵀ + E 𝒩(S_dd) Eᵀ + Q₀ for the second moment of the proxy
chain (Prop. 4.2, Eq. (11) with Thm. 4.3, Eq. (12); Prop. B.1 with momentum) — and its solvers
live in :class:`sgtune.theory.linear_chain.LinearChain`; the comparison theories' noise models in
:mod:`sgtune.theory.noise_models`.

The keyword forms of 0.1 (``predict_stationary_cov(expansion, step_matrix, batch_size=…,
inv_temperature=…, without_replacement=…, momentum=…)`` and the like) were removed in 0.2.0; a call
without a Dynamics is a ``TypeError`` naming the new form.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core._refs import cites
from ..core._validation import as_symmetric, check_int
from ..core.config import Dynamics, step_matrix_of
from ..core.errors import SgtuneError
from ..core.results import ResultMixin, SummaryTable, resolve_parameter_names, table_from_columns
from ..models import Expansion
from .linear_chain import (ARPACK_MAX_DIM, DENSE_RADIUS_MAX_DIM, DIRECT_MAX_DIM, FAIL_RESIDUAL, WARN_RESIDUAL,
                           LinearChain, equilibration_steps, finite_population_factor, noise_scale,
                           require_dynamics, variance_kernel)
from .noise_models import NOISE_MODELS, noise_model

__all__ = [
    "StationaryCov",
    "equilibration_steps",
    "noise_covariance",
    "predict_stationary_cov",
    "iterate_average_cov",
    "autocorrelation_times",
    "max_stable_step",
    "as_step_matrix",
    "finite_population_factor",
    "predict_comparison_cov",
    "stationary_cov_evaluator",
    "THEORIES",
    "DIRECT_MAX_DIM",
    "ARPACK_MAX_DIM",
    "DENSE_RADIUS_MAX_DIM",
    "WARN_RESIDUAL",
    "FAIL_RESIDUAL",
]

#: forward theories of Table 1 / Algorithm 1 of Wang, Ding & Huggins (2026), the keys of
#: :data:`sgtune.theory.noise_models.NOISE_MODELS`
THEORIES = tuple(NOISE_MODELS)


@dataclass(frozen=True, repr=False)
class StationaryCov(ResultMixin):
    """Result of :func:`predict_stationary_cov`: the stationary covariance and how the chain mixes.

    Attributes
    ----------
    cov : (D, D) ndarray
        The stationary covariance Σ of θ.
    spectral_radius : float
        Spectral radius of the second-moment map S ↦ FSFᵀ + E𝒩(S_dd)Eᵀ (< 1 ⇔ stable).
    relative_residual : float
        ‖S − FSFᵀ − E𝒩(S)Eᵀ − Q₀‖_F / ‖S‖_F of the returned solution.
    method : str
        The solver, ``"direct"`` or ``"iterative"``.
    tau : (D,) ndarray
        Integrated autocorrelation time of each coordinate θ_d (iterations).
    tau_worst : float
        The largest τ_int over linear functionals vᵀθ (exact, see :func:`autocorrelation_times`).
    tau_spectral : float
        2/μ_min(ΛH) − 1, Prop. 4.4 of Wang, Ding & Huggins (2026) (no momentum only; else NaN).
    augmented_cov : (D, D) or (2D, 2D) ndarray
        The full second moment of (d, ν) with momentum, else equal to ``cov``.
    step_matrix : (D, D) ndarray
        Λ as the dense, validated matrix.
    momentum, inv_temperature : float
        κ and β of the chain.
    batch_size : int
        B.
    without_replacement : bool
        Whether batches are drawn without replacement (noise × (N−B)/(N−1)).
    transition : ndarray
        The proxy's transition matrix F (I − ΛH, or the augmented one with momentum).
    spectral_radius_is_bound : bool
        True when ``spectral_radius`` is the certified upper bound 1 − λ_min(S^{-1/2}Q₀S^{-1/2})
        (valid for a positive map with S = P(S) + Q₀, S, Q₀ ≻ 0), used for state dimensions above
        ``ARPACK_MAX_DIM`` and for out-of-core (streamed) expansions.
    dynamics : Dynamics
        The :class:`~sgtune.core.config.Dynamics` predicted for (built from the fields above when
        not given).
    parameter_names : tuple of str
        The name of each coordinate of θ (the expansion's; ``theta[i]`` when none).

    See Also
    --------
    predict_stationary_cov : Computes it.
    iterate_average_cov : The covariance of an average of the chain's iterates.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.stationary import predict_stationary_cov
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> res = predict_stationary_cov(e, Dynamics(0.1, batch_size=32))
    >>> res.cov.shape, res.method
    ((5, 5), 'direct')
    >>> np.round(res.spectral_radius, 2)
    np.float64(0.97)
    """

    cov: np.ndarray
    spectral_radius: float
    relative_residual: float
    method: str
    tau: np.ndarray
    tau_worst: float
    tau_spectral: float
    augmented_cov: np.ndarray
    step_matrix: np.ndarray
    momentum: float
    inv_temperature: float
    batch_size: int
    without_replacement: bool
    transition: np.ndarray
    spectral_radius_is_bound: bool = False
    dynamics: Any = None
    parameter_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameter_names", resolve_parameter_names(self.parameter_names, self.cov.shape[0]))
        if self.dynamics is None:
            object.__setattr__(self, "dynamics", Dynamics(self.step_matrix, self.batch_size,
                                                          inv_temperature=self.inv_temperature,
                                                          momentum=self.momentum,
                                                          batching=bool(self.without_replacement)))

    def to_dict(self) -> dict[str, Any]:
        return {"cov": self.cov, "spectral_radius": self.spectral_radius,
                "relative_residual": self.relative_residual, "method": self.method, "tau": self.tau,
                "tau_worst": self.tau_worst, "parameter_names": list(self.parameter_names)}  # type: ignore[arg-type]

    def _repr_items(self) -> list[tuple[str, Any]]:
        return [("D", self.cov.shape[0]), ("spectral_radius", self.spectral_radius), ("tau_worst", self.tau_worst),
                ("batch_size", self.batch_size), ("momentum", self.momentum), ("method", self.method)]

    def summary(self) -> SummaryTable:
        """Per coordinate: the predicted stationary standard deviation √Σ_ii, Λ_ii and the autocorrelation time."""
        d = self.cov.shape[0]
        return table_from_columns(
            f"Stationary covariance of SG(L)D (Wang, Ding & Huggins 2026), D = {d}",
            self.parameter_names, {"sd": np.sqrt(np.clip(np.diag(self.cov), 0.0, None)),  # type: ignore[arg-type]
                                   "Λ_ii": np.diag(self.step_matrix), "tau": self.tau},
            info=(("batch size", self.batch_size), ("inverse temperature", self.inv_temperature),
                  ("momentum", self.momentum), ("spectral radius" + (" (bound)" if self.spectral_radius_is_bound
                                                                     else ""), self.spectral_radius),
                  ("worst autocorrelation time", self.tau_worst), ("relative residual", self.relative_residual)),
            notes=("sd: √ of the predicted stationary variance of θ_i; tau: its integrated autocorrelation time "
                   "(iterations).",))


# --------------------------------------------------------------------------- public API
@cites("wang2026", "Thm. 4.3, Eq. (12)")
def noise_covariance(expansion: Expansion, stationary_cov: Any, dynamics: Dynamics) -> np.ndarray:
    r"""C̄(Σ) = (f/B) [𝓘 − ḡḡᵀ + mean_n J_nΣJ_n − JΣJ]  (Wang, Ding & Huggins 2026, Eq. (12)).

    The expected covariance of the minibatch gradient of the proxy chain at stationarity.
    The printed statement of Thm. 4.3 subtracts the scalar ‖Γθ̂‖²/N²; its proof (and the
    mathematics) gives the outer product ḡḡᵀ with ḡ = mean_n g_n = −Γθ̂/N, which is
    what is implemented. f = (N−B)/(N−1) without replacement, else 1.

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    stationary_cov : (D, D) array_like
        The covariance Σ at which the noise is evaluated (symmetric).
    dynamics : Dynamics
        B and the batching (Λ, β and κ are not used; ``step`` may be None).

    Returns
    -------
    (D, D) ndarray
        The symmetric noise covariance C̄(Σ) of one minibatch gradient.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> from sgtune.theory.stationary import noise_covariance
    >>> C = noise_covariance(e, e.sandwich_cov(), Dynamics(None, batch_size=32))
    >>> C.shape, bool(np.allclose(C, C.T))
    ((5, 5), True)
    """
    dyn = require_dynamics("noise_covariance", "noise_covariance(expansion, sigma, Dynamics(None, batch_size))",
                           dynamics)
    n, d = expansion.n_data, expansion.dim
    dyn.check_data(n)
    sigma = as_symmetric(stationary_cov, "stationary_cov", d, rtol=1e-10)
    return NOISE_MODELS["dq-exact"].covariance(expansion, sigma, noise_scale(n, dyn))


@cites("wang2026", "§2.1: Λ a D×D step-size matrix (scalar λ means Λ = λI)")
def as_step_matrix(step: Any, dim: int, *, name: str = "step_matrix") -> np.ndarray:
    """Λ as a (D, D) array from a scalar λ (Λ = λI), a (D,) diagonal or a (D, D) matrix.

    Parameters
    ----------
    step : float or array_like
        A scalar λ, a (D,) diagonal or a (D, D) matrix (Wang, Ding & Huggins 2026, §2.1).
    dim : int
        D.
    name : str, optional
        The argument's name in error messages.

    Returns
    -------
    (D, D) ndarray
        The step-size matrix Λ.

    Raises
    ------
    ShapeError
        If ``step`` is neither a scalar nor of shape (D,) or (D, D).

    Examples
    --------
    >>> from sgtune.theory.stationary import as_step_matrix
    >>> as_step_matrix([0.1, 0.2], 2)
    array([[0.1, 0. ],
           [0. , 0.2]])
    """
    return step_matrix_of(step, dim, name=name)


@cites("wang2026", "Prop. 4.2, Eq. (11); Thm. 4.3, Eq. (12); Prop. B.1 (momentum, general Λ)")
def predict_stationary_cov(expansion: Expansion, dynamics: Dynamics, *, method: str | None = None,
                           tol: float = 1e-13, initial_guess: Any = None,
                           radius_bound: bool = False) -> StationaryCov:
    r"""Solve ΛHΣ + ΣHΛ = Λ(C̄(Σ) + HΣH)Λ + 2β⁻¹Λ for Σ (Wang, Ding & Huggins 2026, Eqs. (11)–(12); Prop. B.1).

    The exact stationary covariance of the proxy SG(L)D chain (exact for linear
    regression; O(λ/B) accurate in W₂ otherwise, Cor. 4.6) for any step-size matrix Λ
    (scalar, diagonal or dense; symmetric positive definite when β < ∞), with or without
    replacement, with heavy-ball momentum κ (the augmented (d, ν) chain is solved for any
    Λ; the paper's Eq. (B.3) is the Λ = λI special case and is used as a test).

    Parameters
    ----------
    expansion : Expansion
        Quantities at θ̂ (from :func:`sgtune.models.expand`).
    dynamics : Dynamics
        The chain: Λ (``step``: a scalar, (D,) diagonal or (D, D) matrix), B, β (``inf`` is SGD, N
        the canonical SGLD temperature), κ ∈ [0, 1) and the batching (``"without-replacement"`` and
        ``"reshuffle"``: noise × (N−B)/(N−1)).
    method : {"direct", "iterative", None}
        Dense Kronecker solve (state dimension ≤ 20 by default) or matrix-free GMRES
        preconditioned by a Stein solve.
    tol : float
        Relative tolerance of the iterative solve.
    initial_guess : (D, D) array, optional
        Warm start for the iterative solve (e.g. the target of a tuned Λ: if it already
        satisfies the equation to machine precision it is returned after one residual check).
    radius_bound : bool
        Iterative path: report the certified bound 1 − λ_min(S^{-1/2}Q₀S^{-1/2}) ≥ ρ at every state
        dimension instead of ARPACK's ρ below ``ARPACK_MAX_DIM`` (no eigen-iteration, O(D³);
        ``spectral_radius_is_bound`` says which; ARPACK is still used when the bound is void).

    Returns
    -------
    StationaryCov
        Σ, the spectral radius of the second-moment map, the solver's residual, the
        autocorrelation times and the chain's settings.

    Raises
    ------
    UnstableStepSizeError
        If the second-moment map has spectral radius ≥ 1; the message gives the largest
        stable multiple of Λ.
    ConvergenceError
        If the solution's relative residual exceeds 1e-6.

    See Also
    --------
    sgtune.theory.tuning.tune : The inverse problem, Λ for a target Σ.
    predict_comparison_cov : The predictions of the comparison theories.
    sgtune.workflows.verify.verify_stationary_cov : Check the prediction against chains.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import get_model, expand
    >>> from sgtune.theory.stationary import predict_stationary_cov
    >>> e = expand(get_model("linear"), example("hetero-linear"))
    >>> res = predict_stationary_cov(e, Dynamics(0.05, batch_size=32))
    >>> bool(res.relative_residual < 1e-10 and res.spectral_radius < 1)
    True
    """
    dyn = require_dynamics("predict_stationary_cov", "predict_stationary_cov(expansion, Dynamics(step_matrix, "
                           "batch_size, inv_temperature=…, momentum=…, batching=…))", dynamics)
    chain = LinearChain.of(expansion, dyn)
    T = expansion.whitening()
    if T is not None:  # κ(H) too large to solve in θ's own units: solve in φ, θ − θ̂ = Tφ, and map back
        Ti = np.linalg.inv(T)
        inner = LinearChain.of(expansion.in_coordinates(T), dyn.replace(step=Ti @ chain.step_matrix @ Ti.T))
        guess = None if initial_guess is None else Ti @ np.asarray(initial_guess, dtype=float) @ Ti.T
        sol = inner.solve(method=method, tol=tol, initial_guess=guess, radius_bound=radius_bound)
        Ta = augmented_basis(T, dyn.momentum)
        return stationary_result(chain, Ta @ sol.second_moment @ Ta.T, sol.spectral_radius, sol.relative_residual,
                                 sol.method, is_bound=sol.is_bound, solved=(inner, sol.second_moment, T))
    sol = chain.solve(method=method, tol=tol, initial_guess=initial_guess, radius_bound=radius_bound)
    return stationary_result(chain, sol.second_moment, sol.spectral_radius, sol.relative_residual, sol.method,
                             is_bound=sol.is_bound)


def augmented_basis(T: np.ndarray, momentum: float) -> np.ndarray:
    """The change of variables of the chain's state for θ − θ̂ = Tφ: T, or with momentum diag(T, T⁻ᵀ) (the
    momentum ν accumulates gradients, which change as Tᵀ∇)."""
    if momentum == 0.0:
        return T
    d = T.shape[0]
    out = np.zeros((2 * d, 2 * d))
    out[:d, :d] = T
    out[d:, d:] = np.linalg.inv(T).T
    return out


def stationary_result(chain: LinearChain, S: np.ndarray, spectral_radius: float, relative_residual: float,
                      method: str, *, is_bound: bool, solved: Any = None) -> StationaryCov:
    """The :class:`StationaryCov` of ``chain`` with stationary second moment S (τ from the chain's F).

    ``solved`` = (chain_φ, S_φ, T): S was solved in the coordinates θ − θ̂ = Tφ
    (:meth:`~sgtune.models.expansion.Expansion.whitening`); τ and Prop. 4.4's τ then come from there."""
    d = chain.dim
    cov = 0.5 * (S[:d, :d] + S[:d, :d].T)
    inner, S_inner, T = solved if solved is not None else (chain, S, None)
    tau, tau_worst = inner.autocorrelation_times(S_inner, basis=T)
    tau_spec = math.nan
    if chain.momentum == 0.0:
        mu = np.linalg.eigvals(inner.step_matrix @ inner.hessian).real
        tau_spec = 2.0 / mu.min() - 1.0
    return StationaryCov(cov=cov, spectral_radius=float(spectral_radius), relative_residual=float(relative_residual),
                         method=method, tau=tau, tau_worst=tau_worst, tau_spectral=float(tau_spec), augmented_cov=S,
                         step_matrix=chain.step_matrix, momentum=chain.momentum,
                         inv_temperature=chain.inv_temperature, batch_size=chain.batch_size,
                         without_replacement=chain.without_replacement, transition=chain.transition,
                         spectral_radius_is_bound=is_bound, dynamics=chain.dynamics,
                         parameter_names=getattr(chain.expansion, "parameter_names", None))


@cites("wang2026", "Eqs. (2)–(3) (CT), Eq. (5) (DQ+const), Eqs. (5)–(6) (LR+WS), Eqs. (11)–(12)")
def predict_comparison_cov(expansion: Expansion, dynamics: Dynamics, *, theory: str) -> np.ndarray:
    r"""Σ predicted by a comparison theory: ΛHΣ + ΣHΛᵀ = Λ(C_th(Σ) [+ HΣH])Λᵀ + 2Λ/β.

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    dynamics : Dynamics
        The chain: Λ, B, β and the batching (κ only with ``dq-exact``).
    theory : {"ct", "dq-const", "lr-ws", "dq-exact"}
        The theory (:data:`sgtune.theory.noise_models.NOISE_MODELS`).

    Returns
    -------
    (D, D) ndarray
        The stationary covariance the theory predicts.

    Raises
    ------
    SgtuneError
        An unknown theory, a comparison theory with momentum, or ``lr-ws`` for a model that is
        not linear.
    UnstableStepSizeError
        The chain is unstable under the theory.

    See Also
    --------
    predict_stationary_cov : The exact prediction (``dq-exact``).

    Notes
    -----
    - ``ct``: the OU proxy, ΛHΣ + ΣHΛᵀ = ΛĈΛᵀ + 2Λ/β (no HΣH term), Ĉ = f(𝓘 − ḡḡᵀ)/B;
    - ``dq-const``: Eq. (5) with the constant noise Ĉ, i.e. Σ = AΣAᵀ + ΛĈΛᵀ + 2Λ/β;
    - ``lr-ws``: Eqs. (5)–(6), C(Σ) = (f/B)(JΣJ + tr(JΣ)J + (σ̂²/σ²)J) (linear models only);
    - ``dq-exact``: :func:`predict_stationary_cov` (returned for convenience).

    These are the *predictions* each theory makes for a given Λ (Wang, Ding & Huggins 2026,
    Fig. 1, E.1, E.2), to compare with the exact one and with simulation. Dense solves in D²
    unknowns (``lr-ws``) or a Lyapunov/Stein solve (``ct``, ``dq-const``). The noise models are
    those of :data:`sgtune.theory.noise_models.NOISE_MODELS`, shared with the tuning. The
    comparison theories describe SG(L)D without momentum; ``dq-exact`` takes any κ.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> from sgtune.theory.stationary import predict_comparison_cov, predict_stationary_cov
    >>> ct = predict_comparison_cov(e, Dynamics(0.1, batch_size=32), theory="ct")
    >>> exact = predict_stationary_cov(e, Dynamics(0.1, batch_size=32)).cov
    >>> bool(np.trace(ct) < np.trace(exact))  # the OU proxy drops the discretisation term HΣH
    True
    """
    model = noise_model(theory, what="theory")
    dyn = require_dynamics("predict_comparison_cov", "predict_comparison_cov(expansion, Dynamics(step_matrix, "
                           "batch_size, …), theory=…)", dynamics)
    if not model.exact:
        if dyn.momentum != 0.0:
            raise SgtuneError(f"theory {model.name!r} describes SG(L)D without momentum; use theory 'dq-exact' "
                              "for a chain with momentum")
        model.check(expansion, what="theory")
    return model.predict(LinearChain.of(expansion, dyn))


@cites("wang2026", "Prop. B.2 (corrected: weighted, symmetrised lag sum)")
def iterate_average_cov(stationary: StationaryCov, window: int) -> np.ndarray:
    r"""Covariance of the mean of k stationary iterates, k⁻²[kΣ + Σ_{m=1}^{k−1}(k−m)(A^mΣ + ΣA^{mᵀ})].

    A is the proxy transition matrix (I − ΛH, or the augmented F with momentum; the
    result is the θ block). The sum is evaluated in closed form,
    Σ_{m=1}^{k−1}(k−m)A^m = [kA(I−A) − A(I−A^k)](I−A)⁻², so the cost does not grow with k.

    Prop. B.2 of Wang, Ding & Huggins (2026) prints k⁻²(kΣ + 2Σ_m A^mΣ): it drops the weights (k−m) and the
    transpose, which is wrong by a factor ≈ k for large k (a lag m appears k−m times in
    the double sum). The correct form is implemented and tested against simulation.

    Parameters
    ----------
    stationary : StationaryCov
        The prediction (:func:`predict_stationary_cov`).
    window : int
        The number k ≥ 1 of consecutive iterates averaged.

    Returns
    -------
    (D, D) ndarray
        The covariance of the average of k consecutive stationary iterates θ.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> from sgtune.theory.stationary import iterate_average_cov, predict_stationary_cov
    >>> st = predict_stationary_cov(e, Dynamics(0.1, batch_size=32))
    >>> bool(np.allclose(iterate_average_cov(st, 1), st.cov))
    True
    >>> bool(np.trace(iterate_average_cov(st, 100)) < np.trace(st.cov))
    True
    """
    k = check_int(window, "window", low=1)
    S = stationary.augmented_cov
    m = S.shape[0]
    F = stationary.transition
    I = np.eye(m)
    IF = I - F
    Fk = np.linalg.matrix_power(F, k)
    num = k * F @ IF - F @ (I - Fk)
    G = np.linalg.solve(IF.T, np.linalg.solve(IF.T, num.T)).T  # num (I−F)⁻²
    GS = G @ S
    out = (k * S + GS + GS.T) / k**2
    d = stationary.cov.shape[0]
    out = out[:d, :d]
    return 0.5 * (out + out.T)


@cites("wang2026", "Prop. 4.4 and its definition τ_int(f_v) = 1 + 2Σ_k ρ_k")
def autocorrelation_times(stationary: StationaryCov) -> tuple[np.ndarray, float]:
    r"""Integrated autocorrelation times: τ_d = 2[(I−A)⁻¹Σ]_dd / Σ_dd − 1 and τ = sup_v τ_int(vᵀθ).

    Parameters
    ----------
    stationary : StationaryCov
        The prediction (:func:`predict_stationary_cov`), which carries both.

    Returns
    -------
    tau : (D,) ndarray
        The time τ_int of each coordinate θ_d (iterations).
    tau_worst : float
        The supremum of τ_int over linear functionals vᵀθ.

    Notes
    -----
    Uses Cov(z_{t+k}, z_t) = A^k S for the proxy chain, so Σ_{k≥0} A^k S = (I−A)⁻¹S.
    With W = [(I−A)⁻¹S]_θθ, τ_int(vᵀθ) = 2 vᵀWv / vᵀΣv − 1, so the worst case over linear
    functionals is 2 μ_max − 1 with μ_max the largest generalised eigenvalue of
    (sym(W), Σ). Prop. 4.4 of Wang, Ding & Huggins (2026) states the value
    2/μ_min(ΛH) − 1; this equals the exact supremum when ΛH and Σ commute (e.g. scalar Λ
    with Σ ∝ H⁻¹) and can differ otherwise, so both are reported
    (``tau_worst`` exact, ``tau_spectral`` Prop. 4.4).

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> from sgtune.theory.stationary import autocorrelation_times, predict_stationary_cov
    >>> tau, tau_worst = autocorrelation_times(predict_stationary_cov(e, Dynamics(0.1, batch_size=32)))
    >>> tau.shape, bool(tau_worst >= tau.max())
    ((5,), True)
    """
    return stationary.tau, stationary.tau_worst


@cites("wang2026", "Prop. 4.4 (deterministic bound 2/μ_max(ΛH)) and Eqs. (11)–(12) (noise)")
def max_stable_step(expansion: Expansion, dynamics: Dynamics, *, rtol: float = 1e-3) -> float:
    r"""Largest c such that the chain with step matrix cΛ is second-moment stable.

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    dynamics : Dynamics
        The chain: Λ, B, κ and the batching (β does not affect stability).
    rtol : float, optional
        Relative accuracy of the bisection.

    Returns
    -------
    float
        The multiplier c (above 1 when Λ itself is stable).

    Notes
    -----
    Without noise the bound is c < 2/μ_max(ΛH) (Prop. 4.4); the multiplicative minibatch
    noise (f/B)(mean J_nΣJ_n − JΣJ) lowers it. Found by bisection on the spectral radius
    of the second-moment map (relative accuracy ``rtol``). β does not affect stability.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> from sgtune.theory.stationary import max_stable_step
    >>> c = max_stable_step(e, Dynamics(0.1, batch_size=32))
    >>> bool(c > 1)  # λ = 0.1 is stable, with room to spare
    True
    """
    dyn = require_dynamics("max_stable_step", "max_stable_step(expansion, Dynamics(step_matrix, batch_size, "
                           "momentum=…, batching=…))", dynamics)
    return LinearChain.of(expansion, dyn.replace(inv_temperature=math.inf)).max_stable_multiplier(rtol)


@cites("wang2026", "Prop. 4.2, Eq. (11); Thm. 4.3, Eq. (12): Σ(Λ) for many Λ of one chain's settings")
def stationary_cov_evaluator(expansion: Expansion, dynamics: Dynamics) -> Any:
    """A fast Λ ↦ Σ(Λ) for repeated solves (tuning families); returns None when unstable.

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    dynamics : Dynamics
        B, β, κ and the batching (its ``step`` is not used).

    Returns
    -------
    callable
        ``evaluate(step_matrix)``: the (D, D) stationary covariance (Wang, Ding & Huggins 2026,
        Eqs. (11)–(12)) of the chain with that Λ, or None when it is unstable.

    See Also
    --------
    predict_stationary_cov : One solve, with the spectral radius and the diagnostics.

    Notes
    -----
    Caches the D²×D²
    noise kernel for small systems. Stability is decided without an eigenvalue computation: when
    Q₀ ≻ 0, a positive-definite solution of S − P(S) = Q₀ exists iff the positive map P has
    spectral radius < 1, so a failed Cholesky of the solution (or ρ(F) ≥ 1) means unstable.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> from sgtune.theory.stationary import stationary_cov_evaluator
    >>> evaluate = stationary_cov_evaluator(e, Dynamics(None, batch_size=32))
    >>> evaluate(0.1).shape, evaluate(100.0) is None
    ((5, 5), True)
    """
    dyn = require_dynamics("stationary_cov_evaluator", "stationary_cov_evaluator(expansion, Dynamics(None, "
                           "batch_size, …))", dynamics)
    small = expansion.dim * (2 if dyn.momentum else 1) <= DIRECT_MAX_DIM
    kernel = variance_kernel(expansion) if small else None

    def evaluate(step_matrix: Any) -> np.ndarray | None:
        chain = LinearChain.of(expansion, dyn.replace(step=step_matrix))
        m = chain.state_dim
        if not chain.transition_radius() < 1:
            return None
        if kernel is not None:
            P = chain.operator(kernel)
            S = np.linalg.solve(np.eye(m * m) - P, chain.constant_noise.ravel()).reshape(m, m)
        else:
            S = chain.solve_iterative(1e-12)
        S = 0.5 * (S + S.T)
        try:
            np.linalg.cholesky(S)
        except np.linalg.LinAlgError:
            return None
        return S[:chain.dim, :chain.dim]

    return evaluate
