r"""Target-covariance tuning: the step-size matrix Λ that makes SG(L)D's stationary covariance Σ*.

Public functions first (``tune``, ``solve_step_matrix``, ``tuning_residual``,
``closed_form_step_matrix``), private helpers after.

With Σ fixed at the target, Eq. (11) of Wang, Ding & Huggins (2026) is the quadratic matrix equation

    ΛHΣ + ΣHΛ − ΛRΛ − (2/β)Λ = 0,     R = C̄(Σ) + HΣH,

whose invertible solution satisfies, with Y = Λ⁻¹, the continuous Lyapunov equation
(HΣ − I/β)Y + Y(ΣH − I/β) = R. With Σ = LLᵀ and Z = LᵀYL it becomes
(M − I/β)Z + Z(M − I/β) = LᵀRL with M = LᵀHL symmetric, solved by one symmetric
eigendecomposition and an elementwise division: Λ = L Z⁻¹ Lᵀ, exactly symmetric positive
definite whenever M − I/β ≻ 0 and R ≻ 0. Every comparison theory of Algorithm 1 is the
same equation with a different noise model R (:data:`sgtune.theory.noise_models.NOISE_MODELS`),
and so the same solve.

Families. ``dense`` is the exact solve. ``scalar`` (Λ = λI), ``diagonal`` and ``block``
(block-diagonal with SPD blocks over the index sets ``blocks``, a partition of 0..D−1, see
:func:`load_blocks`; default: the expansion's ``parameter_blocks`` if it has them, e.g. the layers
of an MLP) cannot reach every target. With ``family_criterion="discrepancy"`` :func:`tune` returns
the member minimising the affine-invariant discrepancy ‖Σ*^{-1/2} Σ(Λ) Σ*^{-1/2} − I‖_F with the
exact stationary covariance Σ(Λ) (dq-exact only), by L-BFGS with exact gradients from one adjoint
solve per step (:mod:`sgtune.theory.adjoint`), started from the closed form
:func:`structured_step_matrix` (the family's part of Eq. (11); with momentum, from the projection of
the exact dense Λ). The scalar family is a line: Brent's method on the root of the exact
derivative. This criterion is the default because it is scale free, zero only at the target, and
the documented one; ``family_criterion="moment"`` returns the closed form instead (no optimisation,
only blocks of HΣ* and R needed; within ~1 % of the optimum's criterion on logistic D = 20–50 with
B = 32, ≈ 50 % above it under strong minibatch noise — see tests). ``family_criterion="auto"`` (the
default) is ``"discrepancy"`` up to D = ``FIT_MAX_DIM`` (300) and ``"moment"`` above it, where each
exact evaluation costs several O(N·D²) passes over the data (D = 1000, N = 10⁴: ≈ 1 s each); the
result's ``criterion`` says which was used. Above D = ``FIT_MAX_DIM`` the covariance of the returned
Λ is solved for its correction to the target
(:func:`sgtune.theory.largescale.stationary_cov_from_target_momentum`, relative tolerance
``LARGE_COV_TOL`` = 1e-6 on the correction, so ``covariance_error`` has ≈ 6 correct digits — three
O(N·D²) passes instead of the four 1e-8 needs; D×D unknowns with or without momentum).

Momentum. With κ > 0 the dense Λ solves the exact reduced momentum equation
(:func:`solve_momentum_step_matrix`, Newton–Krylov, no augmented unknowns); the families'
``"discrepancy"`` fit uses the same adjoint gradient on the augmented chain, started from the
projection of that dense Λ, and their ``"moment"`` closed form is the family's part of the reduced
momentum equation (:func:`structured_momentum_step_matrix`; no dense momentum solve). With momentum,
a structured family's covariance above D = ``AUGMENTED_MAX_DIM`` (50) comes from the same D×D
correction solve at tolerance 1e-12 (the augmented solve needs an eigendecomposition of the 2D×2D
transition).

The structured momentum closed form (:func:`structured_momentum_step_matrix`). The reduced equation
(:func:`solve_momentum_step_matrix`; c = 1 − κ², M = C̄(Σ*), Q = 2Λ/β)

    (1−κ)(ΛHΣ + ΣHΛ) + [κ(ΛHΛHΣ + ΣHΛHΛ) − (1+κ²)ΛHΣHΛ]/c − (4κ/(β(1+κ)))ΛHΛ
        = ΛMΛ + (1−κ)²(2/β)Λ

cannot hold for a structured Λ in general; the family's part of it can (the momentum
analogue of :func:`structured_step_matrix`, to which it reduces at κ = 0).

Diagonal, Λ = diag(λ). Entry ii of each term: (ΛHΣ)_ii = λ_i(HΣ)_ii;
(ΛHΛHΣ)_ii = λ_i Σ_j H_ij λ_j (HΣ)_ji = λ_i (Kλ)_i with K_ij = H_ij(ΣH)_ij (and the same for
its transpose); (ΛHΣHΛ)_ii = λ_i²(HΣH)_ii; (ΛHΛ)_ii = λ_i²H_ii; (ΛMΛ)_ii = λ_i²M_ii. Every
term carries a factor λ_i, so dividing by λ_i > 0 leaves an equation LINEAR in λ:

    [diag(r) − (2κ/c)K] λ = 2(1−κ) diag(HΣ) − 2(1−κ)²/β,
    r_i = (1+κ²)(HΣH)_ii/c + 4κH_ii/(β(1+κ)) + M_ii,

one dense D×D solve (at κ = 0: λ_i = 2((HΣ)_ii − 1/β)/R_ii, R = M + HΣH).

Scalar, Λ = λI (trace part). With tr(HHΣ) = tr(HΣH) the κ terms combine,
(2κ − 1 − κ²)/c = −(1−κ)/(1+κ), and dividing by λ:

    λ = 2(1−κ)(tr HΣ − (1−κ)D/β) / [tr M + ((1−κ)/(1+κ)) tr(HΣH) + 4κ tr H/(β(1+κ))].

Block, Λ = blockdiag(Λ_b). Block bb of ΛHΛHΣ is Λ_b P_b with P_b = Σ_c H_bc Λ_c (HΣ)_cb, so the
block-diagonal part reads Φ_b(Λ) = Λ_b G_b + G_bᵀΛ_b − Λ_b R̃_b Λ_b = 0 with
G_b = (1−κ)(HΣ)_bb + (κ/c)P_b − ((1−κ)²/β)I and R̃_b = (1+κ²)(HΣH)_bb/c + 4κH_bb/(β(1+κ)) + M_bb:
coupled between blocks through P_b (for κ > 0). With P frozen, Y_b = Λ_b⁻¹ solves the Lyapunov
equation G_bY_b + Y_bG_bᵀ = R̃_b (two such sweeps from the diagonal solution start); then Newton's
method on Φ with exact Jacobian–vector products (dΦ_b = dΛ_bW_b + W_bᵀdΛ_b + (κ/c)(Λ_b dP_b +
dP_bᵀΛ_b), W_b = G_b − R̃_bΛ_b), GMRES preconditioned by the per-block Lyapunov solve with W_b,
to a relative residual of 1e-13. Singleton blocks give the diagonal solution.

Meaning: started at Σ*, the family's blocks of the lag-0 Yule–Walker balance of the
momentum chain hold (one-step moment matching of the heavy-ball chain). It needs H, Σ*,
M and the products HΣ*, HΣ*H only — no augmented (2D) unknowns, no dense momentum solve.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.optimize as sopt
from scipy.sparse.linalg import LinearOperator, gmres

from ..core._refs import cites
from ..core._validation import as_spd, check_positive, check_probability
from ..core.config import Dynamics
from ..core.results import ResultMixin, SummaryTable, estimate_columns, resolve_parameter_names, table_from_columns
from ..core.errors import (AccuracyWarning, ConvergenceError, InfeasibleTargetError, NotPositiveDefiniteError,
                           SgtuneError, UnstableStepSizeError)
from ..core.reasons import REACHABLE_MARGIN, Remedy
from ..models import Expansion
from ..io.blocks import load_blocks
from .adjoint import GradientEvaluator, affine_discrepancy
from .largescale import stationary_cov_from_target_momentum
from .linear_chain import LinearChain, noise_scale, require_dynamics
from .noise_models import NOISE_MODELS, NoiseModel, noise_model
from .stationary import StationaryCov, augmented_basis, predict_stationary_cov, stationary_result

__all__ = ["TuningResult", "tune", "reachable_inv_temperature", "REACHABLE_MARGIN", "solve_step_matrix", "tuning_residual", "closed_form_step_matrix",
           "target_covariance", "solve_momentum_step_matrix", "momentum_tuning_residual", "load_blocks",
           "structured_step_matrix", "structured_momentum_step_matrix",
           "spread_in_rounding_units", "ROUNDING_LEVEL_SPREAD", "METHODS", "FAMILIES", "FAMILY_CRITERIA",
           "MAX_FAMILY_ERROR", "STILL_FRACTION", "family_error_warning"]

#: the tuning methods: the noise models of :data:`sgtune.theory.noise_models.NOISE_MODELS`
METHODS = tuple(NOISE_MODELS)
#: above this D the structured families default to the closed form (``family_criterion="auto"``)
FIT_MAX_DIM = 300
FAMILIES = ("dense", "diagonal", "scalar", "block")
#: how a structured family is chosen: ``auto`` resolves to ``discrepancy`` (exact minimiser) or ``moment``
FAMILY_CRITERIA = ("auto", "discrepancy", "moment")
#: relative GMRES tolerance on the correction Σ(Λ) − Σ* above FIT_MAX_DIM (the covariance error to ≈ 6 digits;
#: each further digit pair costs one more O(N·D²) pass over the data)
LARGE_COV_TOL = 1e-6
#: with momentum, a structured family's Σ(Λ) above this D comes from the D×D correction solve
#: (:func:`sgtune.theory.largescale.stationary_cov_from_target_momentum`, tolerance 1e-12) instead of the
#: augmented (2D)² solve, whose Stein preconditioner is an eigendecomposition of the 2D×2D transition
AUGMENTED_MAX_DIM = 50
#: a dq-exact Λ whose chain has spectral radius ρ ≥ 1 − this is reported as "out of reach" (it would need
#: more than 1/EDGE_OF_STABILITY steps to mix, and at ρ ≈ 1 rounding alone decides the sign of 1 − ρ)
EDGE_OF_STABILITY = 1e-9
#: a structured family's covariance error ‖Σ(Λ) − Σ*‖_F/‖Σ*‖_F at or above this warns (AccuracyWarning): the
#: family cannot reach the target and the chain will not have the covariance asked for. Measured
#: (``benchmarks/family_error_table.py``, 226 fits, docs/benchmarks.md): the bundled examples give 0.04–0.13
#: for every scalar/diagonal fit (each marginal sd within 6 % of the target's); simulated GLMs with correlated
#: covariates 0.39–0.93, diabetes (linear, SGD) 1.0, the output layers of small tanh networks up to 1.0. Across
#: them an error of 0.5 is where the worst marginal sd falls to about 70 % of the target's (median smallest sd
#: ratio 0.71 for errors 0.4–0.5, 0.64 for 0.5–0.6, 0.98 below 0.2)
MAX_FAMILY_ERROR = 0.5
#: … and so does an error at least this fraction of the error of a chain that does not move (Λ → 0, see
#: :func:`family_error_warning`)
STILL_FRACTION = 0.95
#: a structured family's Λ whose smallest eigenvalue is below e^-25 ≈ 1.4e-11 of its largest is refused: the
#: fit drove a step to 0 (a chain that does not move there)
_LOG_STEP_RANGE = 25.0
#: the fit's log-step parameters stay within this distance of their start (L-BFGS-B bounds): a trial step beyond
#: it underflowed Λ to a singular matrix ("smallest eigenvalue 0", a traceback); inside it the fit is unchanged
_LOG_STEP_BOUND = 600.0


@dataclass(frozen=True, repr=False)
class TuningResult(ResultMixin):
    """Result of :func:`tune`: the tuned Λ, what it gives, and the configuration that tuned it.

    Attributes
    ----------
    step_matrix : (D, D) ndarray
        The tuned step-size matrix Λ.
    target_cov : (D, D) ndarray
        The target Σ*.
    predicted_cov : (D, D) ndarray
        The exact stationary covariance of the chain run with Λ (Wang, Ding & Huggins 2026,
        Eqs. (11)–(12), i.e. DQ+exact, whatever ``method`` chose Λ).
    residual : float
        The relative residual of the tuning equation the method solves (machine precision for
        every dense method; for the families, of Eq. (11) at the target).
    covariance_error : float
        ‖predicted − target‖_F / ‖target‖_F.
    method : str
        The noise model that chose Λ, as passed to :func:`tune`.
    family : str
        The family of Λ, as passed to :func:`tune`.
    criterion : str
        What the family minimises or solves (a sentence).
    stationary : StationaryCov
        The full prediction for the tuned chain (spectral radius, autocorrelation times).
    batch_size : int
        B of the chain.
    inv_temperature : float
        β of the chain (``inf`` for SGD).
    momentum : float
        κ of the chain.
    without_replacement : bool
        Whether the chain draws its batches without replacement.
    dynamics : Dynamics
        The :class:`~sgtune.core.config.Dynamics` tuned, with the tuned Λ as ``step``.
    target : str or ndarray
        The target as given (``"sandwich"``, ``"posterior"`` or the matrix).
    blocks : tuple of ndarray or None
        The partition of the ``block`` family (a tuple of index arrays), else None.
    family_criterion : str
        The criterion used, ``"discrepancy"`` or ``"moment"`` (``"auto"`` resolved).
    theta_hat : (D,) ndarray or None
        θ̂ of the expansion tuned at (None when not known).
    parameter_names : tuple of str
        The name of each coordinate of θ (the expansion's; ``theta[i]`` when none).
    prior_precision : ndarray or None
        Γ of the expansion tuned at (zeros: the fit had no prior; None when not known), so an export
        (:func:`sgtune.io.export.numpy_step`) knows the gradient's prior term Γθ/N without ``prior=``.
    n_data : int or None
        N of the expansion tuned at (None when not known).

    See Also
    --------
    tune : Computes it.
    sgtune.io.export.numpy_step : Λ back into a training loop.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.tuning import tune
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> result = tune(e, Dynamics(None, batch_size=32))
    >>> result.step_matrix.shape, result.family, result.family_criterion
    ((5, 5), 'dense', 'discrepancy')
    >>> result.dynamics.batch_size
    32
    """

    step_matrix: np.ndarray
    target_cov: np.ndarray
    predicted_cov: np.ndarray
    residual: float
    covariance_error: float
    method: str
    family: str
    criterion: str
    stationary: StationaryCov
    batch_size: int
    inv_temperature: float
    momentum: float
    without_replacement: bool
    dynamics: Any = None
    target: Any = "sandwich"
    blocks: tuple[np.ndarray, ...] | None = None
    family_criterion: str = "discrepancy"
    theta_hat: np.ndarray | None = None
    parameter_names: tuple[str, ...] | None = None
    prior_precision: np.ndarray | None = None
    n_data: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameter_names",
                           resolve_parameter_names(self.parameter_names, np.shape(self.step_matrix)[0]))

    @property
    def spectral_radius(self) -> float:
        return self.stationary.spectral_radius

    @property
    def tau(self) -> np.ndarray:
        return self.stationary.tau

    @property
    def tau_worst(self) -> float:
        return self.stationary.tau_worst

    def retune(self, expansion: Expansion, target: Any) -> "TuningResult":
        """Tune again for another target with exactly this configuration (dynamics, method, family, blocks,
        criterion): what :func:`sgtune.workflows.refine.refine` does each round."""
        return tune(expansion, self.dynamics, target=target, method=self.method, family=self.family,
                    blocks=self.blocks, family_criterion=self.family_criterion)

    def _repr_items(self) -> list[tuple[str, Any]]:
        return [("D", self.step_matrix.shape[0]), ("method", self.method), ("family", self.family),
                ("target", self.target if isinstance(self.target, str) else "matrix"),
                ("covariance_error", self.covariance_error), ("spectral_radius", self.spectral_radius),
                ("batch_size", self.batch_size), ("momentum", self.momentum),
                ("inv_temperature", self.inv_temperature)]

    def summary(self) -> SummaryTable:
        """Per coordinate: θ̂ with the target's standard deviation √Σ*_ii as its standard error (z, P>|z|,
        95 % interval), the tuned chain's predicted √Σ(Λ)_ii, Λ_ii and the autocorrelation time."""
        sd_target = np.sqrt(np.diag(self.target_cov))
        cols = (estimate_columns(self.theta_hat, sd_target) if self.theta_hat is not None
                else {"sd target": sd_target})
        cols.update({"sd predicted": np.sqrt(np.clip(np.diag(self.predicted_cov), 0.0, None)),
                     "Λ_ii": np.diag(self.step_matrix), "tau": self.tau})
        target = self.target if isinstance(self.target, str) else "a given matrix"
        return table_from_columns(
            f"Tuned step-size matrix Λ ({self.method}, {self.family}), D = {self.step_matrix.shape[0]}",
            self.parameter_names, cols,  # type: ignore[arg-type]
            info=(("target", target), ("batch size", self.batch_size),
                  ("inverse temperature", self.inv_temperature), ("momentum", self.momentum),
                  ("covariance error", self.covariance_error), ("spectral radius", self.spectral_radius),
                  ("worst autocorrelation time", self.tau_worst), ("residual", self.residual)),
            notes=((("std err: √ of the target's diagonal; z = coef / std err (normal P>|z| and interval). "
                     if self.theta_hat is not None else "")
                    + "sd predicted: the tuned chain's exact stationary standard deviation."),))

    def to_dict(self) -> dict[str, Any]:
        """Λ, the target and predicted covariances, θ̂, the settings and the names (arrays stay NumPy arrays)."""
        return {"parameter_names": list(self.parameter_names), "lambda": self.step_matrix,  # type: ignore[arg-type]
                "target_cov": self.target_cov, "predicted_cov": self.predicted_cov, "theta_hat": self.theta_hat,
                "residual": self.residual, "covariance_error": self.covariance_error, "method": self.method,
                "family": self.family, "criterion": self.criterion, "spectral_radius": self.spectral_radius,
                "tau_worst": self.tau_worst, "tau": self.tau, "batch_size": self.batch_size,
                "inverse_temperature": self.inv_temperature, "momentum": self.momentum,
                "without_replacement": self.without_replacement}


@cites("wang2026", "§2.2: sandwich J⁻¹𝓘J⁻¹/N, posterior H⁻¹/N")
def target_covariance(expansion: Expansion, target: Any) -> np.ndarray:
    """The target Σ* from ``"sandwich"`` (J⁻¹𝓘J⁻¹/N), ``"posterior"`` (H⁻¹/N) or a (D, D) SPD array.

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    target : {"sandwich", "posterior"} or (D, D) array_like
        The frequentist sampling covariance of θ̂, the Laplace posterior, or a given SPD matrix
        (Wang, Ding & Huggins 2026, §2.2).

    Returns
    -------
    (D, D) ndarray
        Σ*.

    Raises
    ------
    SgtuneError
        An unknown name, or a matrix that is not (D, D) symmetric positive definite.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.tuning import target_covariance
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> bool(np.allclose(target_covariance(e, "posterior"), np.linalg.inv(e.hessian) / e.n_data))
    True
    """
    if isinstance(target, str):
        if target == "sandwich":
            return expansion.sandwich_cov()
        if target == "posterior":
            return expansion.posterior_cov()
        raise SgtuneError(f"target must be 'sandwich', 'posterior' or a (D, D) matrix, got {target!r}")
    return as_spd(target, "target", expansion.dim, rtol=1e-10)


def _target_covariance(expansion: Expansion, target: Any) -> np.ndarray:
    """:func:`target_covariance`, with a warning when it is zero up to rounding (:func:`warn_if_rounding_level`)."""
    S = target_covariance(expansion, target)
    warn_if_rounding_level(expansion, S)
    return S


@cites("wang2026", "Eq. (11) solved for Λ via the Lyapunov reduction")
def solve_step_matrix(hessian: Any, target_cov: Any, noise_rhs: Any, *,
                      inv_temperature: float = math.inf) -> np.ndarray:
    r"""Λ = Y⁻¹ with (HΣ − I/β)Y + Y(ΣH − I/β) = R: the SPD root of ΛHΣ + ΣHΛ = ΛRΛ + 2Λ/β.

    Parameters
    ----------
    hessian : (D, D) array_like
        H.
    target_cov : (D, D) array_like
        The SPD target Σ.
    noise_rhs : (D, D) array_like
        The SPD right-hand side R (e.g. C̄(Σ) + HΣH for DQ+exact).
    inv_temperature : float, optional
        The inverse temperature β (``inf`` for SGD).

    Returns
    -------
    (D, D) ndarray
        The symmetric positive definite Λ solving Eq. (11) of Wang, Ding & Huggins (2026) at Σ.

    Raises
    ------
    InfeasibleTargetError
        When HΣ has an eigenvalue ≤ 1/β: the injected noise alone exceeds the target. The
        message names the smallest feasible inverse temperature 1/μ_min(HΣ).

    See Also
    --------
    tune : The same solve from an expansion and a target.

    Examples
    --------
    With H = I, Σ = I/2 and R = I the equation reads Λ = Λ², so Λ = I:

    >>> from sgtune.theory.tuning import solve_step_matrix
    >>> solve_step_matrix(np.eye(2), 0.5 * np.eye(2), np.eye(2))
    array([[1., 0.],
           [0., 1.]])
    """
    H = np.asarray(hessian, dtype=float)
    sigma = as_spd(target_cov, "target_cov", H.shape[0], rtol=1e-10)
    R = np.asarray(noise_rhs, dtype=float)
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    L = np.linalg.cholesky(sigma)
    M = L.T @ H @ L
    mu, U = np.linalg.eigh(0.5 * (M + M.T))
    shift = 0.0 if math.isinf(beta) else 1.0 / beta
    if not mu[0] > shift:
        bmin = 1.0 / mu[0] if mu[0] > 0 else math.inf
        raise InfeasibleTargetError(
            f"target covariance is unreachable at inverse temperature {beta:g}: the injected noise alone "
            f"gives more variance than the target; use an inverse temperature > {bmin:.6g} "
            f"(= 1/μ_min(HΣ)) or a larger target", min_inv_temperature=bmin)
    Rt = U.T @ (L.T @ R @ L) @ U
    Rt = 0.5 * (Rt + Rt.T)
    den = (mu[:, None] - shift) + (mu[None, :] - shift)
    Zt = Rt / den
    # Λ = L Z⁻¹ Lᵀ with Z = U Zt Uᵀ
    try:
        cz = np.linalg.cholesky(Zt)
    except np.linalg.LinAlgError:
        raise SgtuneError(
            "the noise model R = C̄ + HΣH is not positive definite at the target, so no SPD step-size "
            "matrix exists; check that H and the gradient covariance are nonsingular") from None
    W = np.linalg.solve(cz, U.T @ L.T)  # cz⁻¹ Uᵀ Lᵀ
    lam = W.T @ W
    return 0.5 * (lam + lam.T)


@cites("wang2026", "Eq. (11) restricted to the family (its diagonal / block-diagonal / trace part) at the target")
def structured_step_matrix(hessian: Any, target_cov: Any, noise_rhs: Any, *, family: str,
                           blocks: Any = None, inv_temperature: float = math.inf) -> np.ndarray:
    r"""Closed form: the structured Λ that solves the family's part of Eq. (11) at Σ*.

    Parameters
    ----------
    hessian : (D, D) array_like
        H.
    target_cov : (D, D) array_like
        The target Σ*.
    noise_rhs : (D, D) array_like
        R = C̄(Σ*) + HΣ*H.
    family : {"scalar", "diagonal", "block"}
        The family of Λ.
    blocks : sequence of index arrays, optional
        The partition of the ``block`` family.
    inv_temperature : float, optional
        The inverse temperature β (``inf`` for SGD).

    Returns
    -------
    (D, D) ndarray
        The structured Λ.

    Raises
    ------
    InfeasibleTargetError
        A coordinate, block or the trace of the target is unreachable at this β.

    Notes
    -----
    Eq. (11) of Wang, Ding & Huggins (2026) at the target, ΛHΣ + ΣHΛ − ΛRΛ − 2Λ/β = 0, cannot hold
    for a structured Λ in
    general; its block-diagonal part can. For block-diagonal Λ, (ΛHΣ)_bb = Λ_b(HΣ)_bb and
    (ΛRΛ)_bb = Λ_b R_bb Λ_b, so with Y_b = Λ_b⁻¹ each block solves the Lyapunov equation

        (A_b − I/β) Y_b + Y_b (A_b − I/β)ᵀ = R_bb,    A_b = (HΣ)_bb,

    diagonal: λ_i = 2((HΣ)_ii − 1/β)/R_ii; scalar (trace part): λ = 2(tr HΣ − D/β)/tr R.
    Meaning: started at Σ*, one step of the chain keeps the family's blocks of the covariance
    (for scalar: its trace after whitening by nothing) unchanged — one-step moment matching.
    It needs only the blocks of HΣ* and R, so it is cheap at any D, and it is the start of the
    exact family fit in :func:`tune` (``family_criterion="moment"`` returns it directly).

    Examples
    --------
    >>> from sgtune.theory.tuning import structured_step_matrix
    >>> structured_step_matrix(np.diag([1.0, 2.0]), 0.5 * np.eye(2), np.eye(2), family="diagonal")
    array([[1., 0.],
           [0., 2.]])
    """
    H = np.asarray(hessian, dtype=float)
    S = np.asarray(target_cov, dtype=float)
    R = np.asarray(noise_rhs, dtype=float)
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    d = H.shape[0]
    shift = 0.0 if math.isinf(beta) else 1.0 / beta
    HS = H @ S
    if family == "scalar":
        lam = 2.0 * (np.trace(HS) - d * shift) / np.trace(R)
        if not lam > 0:
            raise InfeasibleTargetError(f"scalar family: the target is unreachable at inverse temperature {beta:g}",
                                        min_inv_temperature=d / np.trace(HS))
        return lam * np.eye(d)
    if family == "diagonal":
        lam = 2.0 * (np.diag(HS) - shift) / np.diag(R)
        if not np.all(lam > 0):
            i = int(np.argmin(lam))
            raise InfeasibleTargetError(f"diagonal family: coordinate {i} of the target is unreachable at inverse "
                                        f"temperature {beta:g}", min_inv_temperature=1.0 / HS[i, i])
        return np.diag(lam)
    if family != "block":
        raise SgtuneError(f"family must be 'scalar', 'diagonal' or 'block', got {family!r}")
    part = load_blocks(blocks, d)
    out = np.zeros((d, d))
    for b in part:
        A = HS[np.ix_(b, b)] - shift * np.eye(len(b))
        Y = sla.solve_continuous_lyapunov(A, R[np.ix_(b, b)])
        Y = 0.5 * (Y + Y.T)
        try:
            cy = np.linalg.cholesky(Y)
        except np.linalg.LinAlgError:
            raise InfeasibleTargetError(f"block family: block {b.tolist()[:8]} has no SPD solution of its part of "
                                        "eq. (11) at this target/temperature") from None
        ci = np.linalg.inv(cy)
        out[np.ix_(b, b)] = ci.T @ ci
    return 0.5 * (out + out.T)


@cites("wang2026", "Eq. (11), residual at the target")
def tuning_residual(step_matrix: np.ndarray, hessian: np.ndarray, target_cov: np.ndarray,
                    noise_rhs: np.ndarray, inv_temperature: float = math.inf) -> float:
    """Relative residual of Eq. (11) at the target, ‖ΛHΣ + ΣHΛ − ΛRΛ − 2Λ/β‖_F / ‖ΛHΣ + ΣHΛ‖_F.

    Parameters
    ----------
    step_matrix : (D, D) ndarray
        Λ.
    hessian : (D, D) ndarray
        H.
    target_cov : (D, D) ndarray
        Σ.
    noise_rhs : (D, D) ndarray
        R.
    inv_temperature : float, optional
        The inverse temperature β (``inf`` for SGD).

    Returns
    -------
    float
        The relative residual (0 for an exact solution).

    Examples
    --------
    >>> from sgtune.theory.tuning import tuning_residual
    >>> tuning_residual(np.eye(2), np.eye(2), 0.5 * np.eye(2), np.eye(2))
    0.0
    """
    lam, H, S, R = step_matrix, hessian, target_cov, noise_rhs
    dg = np.diag(lam)
    if np.array_equal(lam, np.diag(dg)):  # diagonal Λ: products by broadcasting (one D³ product, not four)
        T = dg[:, None] * (H @ S)
        rhs = dg[:, None] * R * dg[None, :]
    else:
        T = lam @ (H @ S)
        rhs = lam @ R @ lam.T
    lhs = T + T.T  # ΣHΛᵀ = (ΛHΣ)ᵀ for symmetric H and Σ
    if math.isfinite(inv_temperature):
        rhs = rhs + 2.0 * lam / inv_temperature
    return float(np.linalg.norm(lhs - rhs) / np.linalg.norm(lhs))


@cites("wang2026", "the authors' public code: Λ = (ΣJ + JΣ)(C̄ + JΣJ)⁻¹ (baseline only)")
def closed_form_step_matrix(expansion: Expansion, dynamics: Dynamics, target: Any = "sandwich") -> np.ndarray:
    r"""The approximate closed form Λ = (ΣJ + JΣ)(C̄(Σ) + JΣJ)⁻¹ of the authors' public code (a benchmark baseline).

    Exact only when Λ commutes with JΣ (e.g. a well-specified model with Σ ∝ J⁻¹);
    otherwise non-symmetric and off by 5–20 % in Eq. (11). Provided for comparison.

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂.
    dynamics : Dynamics
        B and the batching (its ``step`` is not used).
    target : {"sandwich", "posterior"} or (D, D) array_like, optional
        Σ*, as in :func:`tune`.

    Returns
    -------
    (D, D) ndarray
        The closed-form Λ (in general not symmetric).

    See Also
    --------
    tune : The exact solve.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.tuning import closed_form_step_matrix
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> closed_form_step_matrix(e, Dynamics(None, batch_size=32)).shape
    (5, 5)
    """
    dynamics = require_dynamics("closed_form_step_matrix", "closed_form_step_matrix(expansion, Dynamics(None, "
                                "batch_size, batching=…), target)", dynamics)
    dynamics.check_data(expansion.n_data)
    S = target_covariance(expansion, target)
    J = expansion.curvature
    C = NOISE_MODELS["dq-exact"].covariance(expansion, S, noise_scale(expansion.n_data, dynamics))
    return np.linalg.solve((C + J @ S @ J).T, (S @ J + J @ S).T).T


@cites("wang2026", "Alg. 1 step 6 (DQ+exact: Eqs. 11–12; CT: Eqs. 2–3; DQ+const: Eq. 5; LR+WS: Eqs. 5–6)")
def tune(expansion: Expansion, dynamics: Dynamics, *, target: Any = "sandwich", method: str = "dq-exact",
         family: str = "dense", blocks: Any = None, family_criterion: str = "auto") -> TuningResult:
    r"""Step-size matrix Λ whose SG(L)D stationary covariance equals the target Σ*.

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂ (:func:`sgtune.models.expand`).
    dynamics : Dynamics
        B, β, κ and the batching of the chain to tune; its ``step`` (None or an old Λ) is replaced.
    target : {"sandwich", "posterior"} or (D, D) array_like, optional
        Σ*: the sandwich J⁻¹𝓘J⁻¹/N, the posterior H⁻¹/N or an SPD matrix (:func:`target_covariance`).
    method : str, optional
        The noise model, one of :data:`METHODS` (see Notes).
    family : str, optional
        The form of Λ, one of :data:`FAMILIES`: ``dense``, ``diagonal``, ``scalar`` or ``block``.
    blocks : list of list of int, str or None, optional
        The ``block`` family's partition (index lists, a JSON file; default an MLP's layers).
    family_criterion : str, optional
        One of :data:`FAMILY_CRITERIA`: how a structured family is fitted (see Notes).

    Returns
    -------
    TuningResult
        Λ, the exact predicted covariance of the tuned chain, its error to the target, and the
        configuration (``dynamics`` with the tuned Λ, ``target``, ``method``, ``family``, …).

    Raises
    ------
    InfeasibleTargetError
        No Λ of the family reaches the target (e.g. SGLD too hot; it gives the smallest feasible β).
    UnstableStepSizeError
        The solved Λ makes the chain unstable.
    ConvergenceError
        A family's fit or the momentum solve did not converge.
    SgtuneError
        Unknown or incompatible settings (e.g. a comparison method with a structured family).

    See Also
    --------
    sgtune.theory.stationary.predict_stationary_cov : The forward problem, Σ for a given Λ.
    sgtune.workflows.refine.refine : Repair a tuned Λ on short chains.

    Notes
    -----
    Algorithm 1, step 6 of Wang, Ding & Huggins (2026): Eq. (11) solved for Λ at Σ = Σ* with the noise model R of
    ``method``, one Lyapunov solve (:mod:`sgtune.theory.noise_models`): ``dq-exact`` R = C̄(Σ*) + HΣ*H (Eqs.
    (11)–(12)), exact; ``ct`` R = Ĉ = f(𝓘 − ḡḡᵀ)/B, the OU proxy of Eqs. (2)–(3) (for Γ = 0 and the sandwich target
    Λ = (2B/N)J⁻¹, as in the authors' public code; the printed Eq. (3) Λ = (ΣH+HΣ)Ĉ⁻¹ agrees only when the matrices
    commute and is not offered); ``dq-const`` R = Ĉ + HΣ*H, Eq. (5) with constant noise (Algorithm 1 prints C̄ = 𝓘,
    appendix E.2 Ĥ/B and the public code J without 1/B; the noise covariance at θ̂ with its 1/B is the B-sample
    gradient covariance the method assumes); ``lr-ws`` R = (f/B)(JΣJ + tr(JΣ)J + (σ̂²/σ²)J) + HΣ*H, Eqs. (5)–(6),
    linear models only. The comparison methods give dense Λ without momentum; the families, their criteria and the
    momentum equations are described in the module docstring.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> from sgtune.theory.tuning import tune
    >>> e = expand(get_model("linear"), example("hetero-linear"))
    >>> result = tune(e, Dynamics(None, batch_size=32), target="sandwich")
    >>> bool(result.covariance_error < 1e-10)  # dense Λ reaches the target exactly
    True
    >>> logistic = expand(get_model("logistic"), example("logistic"))
    >>> diagonal = tune(logistic, Dynamics(None, batch_size=32), family="diagonal")
    >>> round(diagonal.covariance_error, 2)  # a diagonal Λ only approaches the target
    0.11
    """
    dyn = require_dynamics("tune", "tune(expansion, Dynamics(None, batch_size, inv_temperature=…, momentum=…, "
                           "batching=…), target=…, method=…, family=…)", dynamics)
    dyn.check_data(expansion.n_data)
    model = noise_model(method)
    crit, large = _check_family(expansion, dyn, model, family, family_criterion)
    if family == "dense" and expansion.whitening() is not None:  # κ(H) too large to solve in θ's own units
        return _tune_whitened(expansion, dyn, expansion.whitening(), target, method)
    S = _target_covariance(expansion, target)
    part = _partition(expansion, family, blocks)
    lam, residual, criterion, guess, cbar = _step_matrix_of_family(expansion, dyn, S, model, family, part, crit)
    tuned = dyn.replace(step=lam)
    try:
        st = _tuned_stationary(expansion, tuned, S, cbar, guess, large=large, family=family, method=method)
    except (UnstableStepSizeError, ConvergenceError) as exc:
        if family == "dense":
            raise
        raise _family_refusal(family, dyn, exc) from None
    err = float(np.linalg.norm(st.cov - S) / np.linalg.norm(S))
    message = family_error_warning(family, err, _still_error(expansion, S, dyn.inv_temperature))
    if message is not None:
        warnings.warn(message, AccuracyWarning, stacklevel=2)
    return TuningResult(step_matrix=lam, target_cov=S, predicted_cov=st.cov, residual=residual, covariance_error=err,
                        method=method, family=family, criterion=criterion, stationary=st, batch_size=dyn.batch_size,
                        inv_temperature=dyn.inv_temperature, momentum=dyn.momentum,
                        without_replacement=dyn.without_replacement, dynamics=tuned, target=target, blocks=part,
                        family_criterion=crit, theta_hat=expansion.theta_hat, parameter_names=expansion.parameter_names,
                        prior_precision=expansion.prior_precision, n_data=expansion.n_data)


def _step_matrix_of_family(expansion: Expansion, dyn: Dynamics, S: np.ndarray, model: Any, family: str,
                           part: Any, crit: str) -> tuple[np.ndarray, float, float, np.ndarray, Any]:
    """Λ of :func:`tune` for its family (dense: one Lyapunov solve; else the family's fit), with the residual,
    the criterion, the starting covariance of the stationary solve and C̄; a family that cannot be fitted is
    refused in one line (:func:`_family_refusal`), an unreachable target names the inverse temperature."""
    try:
        if family == "dense":
            lam, residual, criterion, cbar = _dense_step_matrix(expansion, dyn, S, model)
            return lam, residual, criterion, S, cbar
        lam, residual, criterion, guess, cbar = _family_step_matrix(expansion, dyn, S, family, part, crit)
        _check_family_step(lam, family, expansion.parameter_names, dyn)
        return lam, residual, criterion, guess, cbar
    except InfeasibleTargetError as exc:
        raise _with_temperature_remedy(exc) from None
    except (NotPositiveDefiniteError, ConvergenceError) as exc:
        if family == "dense":
            raise
        raise _family_refusal(family, dyn, exc) from None


@cites("sgtune", "a target at rounding level: √tr(HΣ*) against ε√(θ̂ᵀHθ̂), both lengths in the metric H")
def spread_in_rounding_units(expansion: Expansion, target_cov: np.ndarray) -> float:
    """The target's spread in units of the rounding of θ̂: √tr(HΣ*) / (ε √(θ̂ᵀHθ̂)), ε machine epsilon.

    Parameters
    ----------
    expansion : Expansion
        The expansion at θ̂ (H and θ̂).
    target_cov : (D, D) ndarray
        The target covariance Σ*.

    Returns
    -------
    float
        The ratio (``inf`` when θ̂ = 0 and the spread is not, 0 when both are). Both square roots are
        lengths in the metric H, so it does not depend on the units of θ.

    Notes
    -----
    Noise-free data (y = Xθ exactly) give a sandwich target of rounding errors only: below 0.3 on linear
    regressions with N = 16 … 20000, D = 3 … 20, |θ| from 1e-6 to 1e6 and condition numbers up to 1e4; a
    relative noise of 1e-8 already gives more than 800, real data 1e14 and more. :func:`tune` warns below
    :data:`ROUNDING_LEVEL_SPREAD`.

    Examples
    --------
    >>> import numpy as np
    >>> from sgtune.io.data import make_dataset
    >>> from sgtune.models import expand, get_model
    >>> X = np.random.default_rng(0).standard_normal((50, 3))
    >>> e = expand(get_model("linear"), make_dataset(X, X @ np.array([1.0, 2.0, 3.0]) + 0.1 * X[:, 0] ** 2))
    >>> bool(spread_in_rounding_units(e, target_covariance(e, "sandwich")) > ROUNDING_LEVEL_SPREAD)
    True
    """
    H = expansion.hessian
    th = expansion.theta_hat
    size = float(th @ H @ th)
    spread = float(np.trace(H @ target_cov))
    eps = np.finfo(float).eps
    if size <= 0:
        return math.inf if spread > 0 else 0.0
    return math.sqrt(max(spread, 0.0) / size) / eps


#: a target spread below this many units of θ̂'s rounding (:func:`spread_in_rounding_units`) is no uncertainty
ROUNDING_LEVEL_SPREAD = 100.0


def warn_if_rounding_level(expansion: Expansion, target_cov: np.ndarray) -> None:
    """An :class:`AccuracyWarning` when the target covariance is zero up to rounding (noise-free data)."""
    units = spread_in_rounding_units(expansion, target_cov)
    if units < ROUNDING_LEVEL_SPREAD:
        warnings.warn(f"the target covariance is zero up to rounding (its spread is {units:.2g} × the rounding "
                      "error of θ̂, largest entry "
                      f"{np.abs(target_cov).max():.2g}): the data leave no uncertainty to tune for (noise-free "
                      "data, y = Xθ exactly?); Λ only reproduces rounding errors — use the posterior target, or "
                      "data with noise", AccuracyWarning, stacklevel=3)




@cites("wang2026", "Eq. (11): the target is reachable iff HΣ* − I/β has positive eigenvalues")
def reachable_inv_temperature(min_inv_temperature: float, *, margin: float = REACHABLE_MARGIN,
                              gradient_share: float | None = None) -> float:
    """Return the inverse temperature to suggest when a target is unreachable at the given β.

    ``margin``·β_min, or β_min/(1 − share) when the share of the target left to the gradient noise is
    given (``inf`` — SGD — when the share is 1 or β_min is not finite).

    Parameters
    ----------
    min_inv_temperature : float
        The least inverse temperature β_min at which the target is reachable.
    margin : float, optional
        The factor above β_min (default ``REACHABLE_MARGIN``).
    gradient_share : float, optional
        The share of the target left to the gradient noise.

    Returns
    -------
    float
        The inverse temperature β to suggest.

    Examples
    --------
    >>> reachable_inv_temperature(100.0), reachable_inv_temperature(100.0, gradient_share=0.5)
    (125.0, 200.0)
    """
    if not math.isfinite(min_inv_temperature) or min_inv_temperature <= 0:
        return math.inf
    if gradient_share is None:
        return margin * min_inv_temperature
    if gradient_share >= 1.0:
        return math.inf
    return min_inv_temperature / (1.0 - max(gradient_share, 0.0))


def _with_temperature_remedy(exc: InfeasibleTargetError) -> InfeasibleTargetError:
    """The error with its computed remedy: the inverse temperature that makes the target reachable."""
    beta = reachable_inv_temperature(exc.min_inv_temperature)
    if exc.remedies or not math.isfinite(beta):
        return exc
    why = (f"an inverse temperature {beta:.6g} ({REACHABLE_MARGIN:g}× the bound {exc.min_inv_temperature:.6g} "
           "below which the injected noise alone exceeds the target; the gradient noise supplies the rest)")
    return InfeasibleTargetError(str(exc), min_inv_temperature=exc.min_inv_temperature,
                                 remedies=(Remedy(why, {"inv_temperature": float(f"{beta:.6g}")}, expect="runs"),))


# --------------------------------------------------------------------------- internals
def _tune_whitened(e: Expansion, dyn: Dynamics, T: np.ndarray, target: Any, method: str) -> TuningResult:
    """:func:`tune` (dense family) solved in the coordinates θ − θ̂ = Tφ where H = I
    (:meth:`~sgtune.models.expansion.Expansion.whitening`), mapped back: Λ = TΛ_φTᵀ, Σ = TΣ_φTᵀ. The
    answer then does not depend on the units of θ (rescaling a covariate rescales Λ, nothing else)."""
    Ti = np.linalg.inv(T)
    given = None if isinstance(target, str) else target_covariance(e, target)
    inner_target = target if given is None else Ti @ given @ Ti.T
    inner = tune(e.in_coordinates(T), dyn, target=inner_target, method=method, family="dense")

    def back(a: np.ndarray) -> np.ndarray:
        out = T @ a @ T.T
        return 0.5 * (out + out.T)

    lam = back(inner.step_matrix)
    S = back(inner.target_cov) if given is None else given
    tuned = dyn.replace(step=lam)
    Ta = augmented_basis(T, dyn.momentum)
    aug = Ta @ inner.stationary.augmented_cov @ Ta.T
    st = stationary_result(LinearChain.of(e, tuned), 0.5 * (aug + aug.T),
                           inner.stationary.spectral_radius, inner.stationary.relative_residual,
                           inner.stationary.method, is_bound=inner.stationary.spectral_radius_is_bound,
                           solved=(LinearChain.of(e.in_coordinates(T), inner.dynamics),
                                   inner.stationary.augmented_cov, T))
    err = float(np.linalg.norm(back(inner.predicted_cov - inner.target_cov)) / np.linalg.norm(S))
    lam_h = np.linalg.eigvalsh(e.hessian)
    criterion = (f"{inner.criterion}; solved in coordinates where H = I (κ(H) = {lam_h[-1] / lam_h[0]:.2g} in the "
                 "units of θ) and mapped back")
    return TuningResult(step_matrix=lam, target_cov=S, predicted_cov=st.cov, residual=inner.residual,
                        covariance_error=err, method=method, family="dense", criterion=criterion, stationary=st,
                        batch_size=dyn.batch_size, inv_temperature=dyn.inv_temperature, momentum=dyn.momentum,
                        without_replacement=dyn.without_replacement, dynamics=tuned, target=target, blocks=None,
                        family_criterion=inner.family_criterion, prior_precision=e.prior_precision, n_data=e.n_data)


@cites("wang2026", "Eq. (11) as Λ → 0: Σ → H⁻¹/β, the still chain a structured family's fit is compared with")
def family_error_warning(family: str, covariance_error: float, still_error: float = 1.0) -> str | None:
    """The warning for a structured family whose Λ misses the target, else None.

    A family's Λ misses the target when its covariance error is ``MAX_FAMILY_ERROR`` or more, or when it is
    no better than ``STILL_FRACTION`` × the error of a chain that does not move: as Λ = εΛ₀ → 0 the stationary
    covariance of Eq. (11) tends to H⁻¹/β whatever Λ₀ (ΛHΣ + ΣHΛ = 2Λ/β at first order in ε), 0 for SGD, so
    a fit that ends near that error has found "barely move" as its best answer (measured in
    ``benchmarks/family_error_table.py``: the output layers of small networks at β = 2N end at 0.486–0.499
    against 0.5 for the still chain).

    Parameters
    ----------
    family : str
        The family of Λ (:data:`FAMILIES`); the dense family reaches its target and never warns.
    covariance_error : float
        ‖Σ(Λ) − Σ*‖_F/‖Σ*‖_F with Σ(Λ) the exact stationary covariance of the family's Λ.
    still_error : float, optional
        ‖H⁻¹/β − Σ*‖_F/‖Σ*‖_F, the error of the limit Λ → 0 (1 for SGD).

    Returns
    -------
    str or None
        One line: the error, what it means for the chain and what to try.

    Examples
    --------
    >>> family_error_warning("diagonal", 0.2) is None
    True
    >>> family_error_warning("diagonal", 0.99).startswith("family 'diagonal' misses the target")
    True
    >>> family_error_warning("scalar", 0.49, still_error=0.5) is None  # no better than not moving
    False
    """
    if family == "dense" or not (covariance_error >= MAX_FAMILY_ERROR
                                 or covariance_error >= STILL_FRACTION * still_error):
        return None
    still = (f"; a chain that does not move (Λ → 0) would miss it by {still_error:.2g}"
             if covariance_error < MAX_FAMILY_ERROR else f", ≥ {MAX_FAMILY_ERROR:g}")
    return (f"family '{family}' misses the target covariance by {covariance_error:.2g} (relative Frobenius error "
            f"of the exact stationary covariance of this Λ{still}): a chain with it will not have the covariance "
            "asked for, whatever the applicability report says; use `family='dense'` (exact) or `family='block'`, "
            "or SGLD (a finite `inv_temperature`)")


def _still_error(e: Expansion, S: np.ndarray, beta: float) -> float:
    """‖H⁻¹/β − Σ*‖_F/‖Σ*‖_F: the covariance error of the limit Λ → 0 (:func:`family_error_warning`)."""
    if not math.isfinite(beta):
        return 1.0
    try:
        limit = np.linalg.inv(e.hessian) / beta
    except np.linalg.LinAlgError:
        return 1.0
    return float(np.linalg.norm(limit - S) / np.linalg.norm(S))


def _family_refusal(family: str, dyn: Dynamics, exc: SgtuneError) -> SgtuneError:
    """The one-line refusal of a structured family whose fit fails, whose Λ is singular or whose best Λ sits at
    the edge of stability: the same error class, naming the family and what to try."""
    why = re.sub(r" \((?:CONVERGENCE|ABNORMAL)[^)]*\)", "", str(exc).rstrip(".").split("; ")[0])  # L-BFGS-B's words
    if isinstance(exc, UnstableStepSizeError) and math.isfinite(exc.spectral_radius):
        why = (f"its best Λ sits at the edge of stability, spectral radius {exc.spectral_radius:.12g}: a chain that "
               "does not mix")
    sgld = "" if math.isfinite(dyn.inv_temperature) else ", or SGLD (a finite `inv_temperature`)"
    mom = ", or no momentum" if dyn.momentum > 0 else ""
    message = (f"family '{family}' cannot be fitted to this target ({why}); try `family='dense'` (exact: eq. (11) "
               f"solved for a full Λ){sgld}{mom}")
    if isinstance(exc, UnstableStepSizeError):
        return UnstableStepSizeError(message, spectral_radius=exc.spectral_radius,
                                     max_stable_step=exc.max_stable_step)
    if isinstance(exc, ConvergenceError):
        return ConvergenceError(message, residual=exc.residual, method=exc.method)
    return NotPositiveDefiniteError(message)


def _check_family_step(lam: np.ndarray, family: str, names: Any, dyn: Dynamics) -> None:
    """Refuse a structured Λ that is singular (a step the fit drove to 0) or not symmetric positive definite."""
    w = np.linalg.eigvalsh(0.5 * (lam + lam.T))
    if np.all(np.isfinite(w)) and w[0] > w[-1] * math.exp(-_LOG_STEP_RANGE):
        return
    d = np.diag(lam)
    k = int(np.argmin(d))
    label = names[k] if names is not None and k < len(names) else f"coordinate {k}"
    raise NotPositiveDefiniteError(  # tune() words it as the family's refusal
        f"its best Λ drives the step of {label} to {d[k]:.2g} against a largest step {max(d.max(), 0.0):.2g}: a "
        "chain that does not move there")


def _check_family(e: Expansion, dyn: Dynamics, model: NoiseModel, family: str,
                  family_criterion: str) -> tuple[str, bool]:
    """The resolved family criterion and whether the family is above ``FIT_MAX_DIM``; raises on bad settings."""
    if family not in FAMILIES:
        raise SgtuneError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if family_criterion not in FAMILY_CRITERIA:
        raise SgtuneError(f"family_criterion must be 'auto', 'discrepancy' (exact minimiser) or 'moment' (closed "
                          f"form), got {family_criterion!r}")
    large = family != "dense" and e.dim > FIT_MAX_DIM
    crit = ("moment" if large else "discrepancy") if family_criterion == "auto" else family_criterion
    if not model.exact:
        if family != "dense":
            raise SgtuneError(f"family {family!r} is defined through the exact stationary covariance; use "
                              "method 'dq-exact' (the comparison theories give dense Λ only)")
        if dyn.momentum > 0:
            raise SgtuneError(f"method {model.name!r} is a theory of SG(L)D without momentum; use method "
                              "'dq-exact' with momentum")
        model.check(e)
    return crit, large


def _partition(e: Expansion, family: str, blocks: Any) -> tuple[np.ndarray, ...] | None:
    """The block family's partition (the given blocks, else the model's ``parameter_blocks``), else None."""
    if family != "block":
        if blocks is not None:
            raise SgtuneError(f"blocks are only used with family 'block', not {family!r}; drop them or use "
                              "family 'block'")
        return None
    if blocks is None:  # models that know their layers (e.g. an MLP) may expose them
        blocks = getattr(e, "parameter_blocks", None)
    if blocks is None:
        raise SgtuneError("family 'block' needs `blocks`: a list of lists of parameter indices partitioning "
                          "0..D−1 (or a JSON file of one)")
    return load_blocks(blocks, e.dim)


_EXACT_MOMENTUM = "exact: reduced momentum equation (Yule–Walker elimination of the momentum, Newton–Krylov)"


def _dense_step_matrix(e: Expansion, dyn: Dynamics, S: np.ndarray,
                       model: NoiseModel) -> tuple[np.ndarray, float, str, np.ndarray | None]:
    """(Λ, residual, criterion, C̄(Σ*) or None): the method's Eq. (11), or the reduced momentum equation."""
    H, beta, kappa = e.hessian, dyn.inv_temperature, dyn.momentum
    scale = noise_scale(e.n_data, dyn)
    if kappa > 0:  # model.exact (checked): the momentum equation with C̄(Σ*)
        cbar = model.covariance(e, S, scale)
        lam = solve_momentum_step_matrix(H, S, cbar, momentum=kappa, inv_temperature=beta)
        return lam, momentum_tuning_residual(lam, H, S, cbar, kappa, beta), _EXACT_MOMENTUM, cbar
    R = model.tuning_rhs(e, S, scale)
    lam = solve_step_matrix(H, S, R, inv_temperature=beta)
    return lam, tuning_residual(lam, H, S, R, beta), "exact: eq. (11) with the method's noise model", None


def _family_step_matrix(e: Expansion, dyn: Dynamics, S: np.ndarray, family: str, part: Any,
                        crit: str) -> tuple[np.ndarray, float, str, np.ndarray, np.ndarray]:
    """(Λ, residual, criterion, Σ(Λ) or Σ*, C̄(Σ*)) of a structured family: its closed form or its exact fit."""
    H, beta, kappa = e.hessian, dyn.inv_temperature, dyn.momentum
    cbar = NOISE_MODELS["dq-exact"].covariance(e, S, noise_scale(e.n_data, dyn))  # one O(N·D²) pass
    guess = S
    if kappa > 0:
        if crit == "moment":  # the family's part of the reduced momentum equation
            lam = structured_momentum_step_matrix(H, S, cbar, family=family, momentum=kappa, blocks=part,
                                                  inv_temperature=beta)
            criterion = ("closed form: the family's part of the reduced momentum equation at the target "
                         "(Yule–Walker moment matching)")
        else:  # the fit starts from the projection of the exact dense Λ
            start = solve_momentum_step_matrix(H, S, cbar, momentum=kappa, inv_temperature=beta)
            lam, criterion, guess = _fit_family(e, S, start, family, dyn, part)
        return lam, momentum_tuning_residual(lam, H, S, cbar, kappa, beta), criterion, guess, cbar
    Rx = cbar + H @ S @ H
    Rx = 0.5 * (Rx + Rx.T)
    lam = structured_step_matrix(H, S, Rx, family=family, blocks=part, inv_temperature=beta)  # eq. (11)'s part
    criterion = "closed form: the family's part of eq. (11) at the target (one-step moment matching)"
    if crit != "moment":
        lam, criterion, guess = _fit_family(e, S, lam, family, dyn, part)
    return lam, tuning_residual(lam, H, S, Rx, beta), criterion, guess, cbar


def _tuned_stationary(e: Expansion, dyn: Dynamics, S: np.ndarray, cbar: np.ndarray | None, guess: np.ndarray, *,
                      large: bool, family: str, method: str) -> StationaryCov:
    """The exact stationary covariance of the tuned chain; a dq-exact Λ at the edge of stability raises."""
    try:
        if large or (dyn.momentum > 0 and family != "dense" and e.dim > AUGMENTED_MAX_DIM):
            # one O(N·D²) pass per GMRES iteration for the correction to the target, D×D unknowns, no ARPACK
            st = stationary_cov_from_target_momentum(e, dyn, S, cbar, tol=LARGE_COV_TOL if large else 1e-12)
        else:
            st = predict_stationary_cov(e, dyn, initial_guess=guess, radius_bound=family != "dense")
    except ConvergenceError as exc:  # the forward solve's own advice ("reduce the step size") means nothing here
        raise ConvergenceError(
            f"the stationary covariance of the tuned chain could not be solved accurately (relative residual "
            f"{exc.residual:.2g}): the problem is too ill-conditioned in these units — standardise the covariates "
            "(subtract the mean, divide by the standard deviation), or use the dense family, which is solved in "
            "whitened coordinates", residual=exc.residual, method=exc.method) from None
    except UnstableStepSizeError as exc:
        if method == "dq-exact":  # exact noise model: the target itself is beyond a stable chain
            raise _out_of_reach(str(exc), exc.spectral_radius, exc.max_stable_step, e, dyn) from None
        raise UnstableStepSizeError(
            f"method {method!r} gives a step-size matrix whose chain diverges ({exc}); the target is out of "
            "reach of this method's noise model — use method 'dq-exact'",
            spectral_radius=exc.spectral_radius, max_stable_step=exc.max_stable_step) from None
    if method == "dq-exact" and not st.spectral_radius < 1.0 - EDGE_OF_STABILITY:
        # at the edge itself rounding decides whether ρ prints as 1 − 1e-13 or 1 + 1e-13: one answer for both
        raise _out_of_reach(f"spectral radius {st.spectral_radius:.15g} is within {EDGE_OF_STABILITY:g} of 1, "
                            f"a chain that needs more than {1 / EDGE_OF_STABILITY:.0e} steps to mix",
                            st.spectral_radius, math.nan, e, dyn)
    return st


def _out_of_reach(why: str, rho: float, max_stable: float, e: Expansion, dyn: Dynamics) -> UnstableStepSizeError:
    """The error of a dq-exact Λ that sits at (or beyond) the edge of stability; for SGD, the remedy SGLD at
    REACHABLE_MARGIN·N (its injected noise spreads the chain along directions the gradient noise misses)."""
    beta = float(f"{REACHABLE_MARGIN * e.n_data:.6g}")
    remedies = () if math.isfinite(dyn.inv_temperature) else (Remedy(
        f"SGLD at inverse temperature {beta:.6g} ({REACHABLE_MARGIN:g}·N): its injected noise reaches the "
        "directions SGD's gradient noise does not", {"inv_temperature": beta}, expect="runs"),)
    return UnstableStepSizeError(
        f"the target covariance is out of reach of a stable chain: the step-size matrix that would give "
        f"it sits at the edge of stability ({why}); SGD's own gradient noise is too small in some "
        "direction — use SGLD (a finite `inv_temperature`), a smaller batch, or a smaller target",
        spectral_radius=rho, max_stable_step=max_stable, remedies=remedies)


def _scalar_line_optimum(fun: Any, t0: float) -> float:
    """t = log λ at the root of dφ/dt (exact, adjoint): bracket downhill, then Brent's method.

    One-dimensional, so a root of the exact derivative converges superlinearly with no line
    search. The bracket's first step is 0.25; later ones go 1.5 times the secant's distance to
    the root (at least 1/20 and at most 4 times the previous step), so a good start brackets the
    root tightly in one or two evaluations instead of stepping on by 0.25.
    """
    memo: dict[float, float] = {}

    def g(t: float) -> float:  # memoised: brentq re-evaluates the bracket ends
        if t not in memo:
            memo[t] = float(fun(np.array([t]))[1][0])
        return memo[t]

    ga = g(t0)
    step = -0.25 if ga > 0 else 0.25
    a, b = t0, t0 + step
    gb = g(b)
    for _ in range(60):
        if np.sign(gb) != np.sign(ga):
            break
        nxt = step
        if gb != ga:
            to_root = -gb * (b - a) / (gb - ga)  # secant's distance from b to the root
            if to_root * step > 0:
                nxt = math.copysign(min(max(1.5 * abs(to_root), abs(step) / 20), 4 * abs(step)), step)
        a, ga = b, gb
        step = nxt
        b = b + step
        gb = g(b)
    else:
        raise ConvergenceError("scalar tuning: no sign change of the derivative along the line", method="brentq")
    # t to 1e-8: φ is quadratic at its minimum, so φ is then within ~1e-16·φ'' of it
    return float(sopt.brentq(g, min(a, b), max(a, b), xtol=1e-8, rtol=1e-12))


class _Family:
    """A structured family Λ(x) with its chain rule x ↦ ∂φ/∂x from the symmetric gradient ∇_Λφ.

    scalar: Λ = e^x I; diagonal: Λ = diag(e^x); block: Λ = blockdiag(L_b L_bᵀ), L_b lower
    triangular with log-diagonal parameters (so every block stays SPD).
    """

    def __init__(self, family: str, d: int, blocks: tuple[np.ndarray, ...] | None) -> None:
        self.family, self.d = family, d
        self.blocks = blocks if blocks is not None else ()
        self.tril = [np.tril_indices(len(b)) for b in self.blocks]
        self.is_diag = [t[0] == t[1] for t in self.tril]

    def initial(self, lam_dense: np.ndarray) -> np.ndarray:
        if self.family == "scalar":  # geometric mean of the eigenvalues of the exact dense Λ
            return np.array([float(np.mean(np.log(np.linalg.eigvalsh(lam_dense))))])
        if self.family == "diagonal":
            return np.log(np.diag(lam_dense))
        parts = []
        for b, t, dg in zip(self.blocks, self.tril, self.is_diag):
            Lb = np.linalg.cholesky(lam_dense[np.ix_(b, b)])  # a principal block of an SPD matrix is SPD
            v = Lb[t].copy()
            v[dg] = np.log(v[dg])
            parts.append(v)
        return np.concatenate(parts)

    def _factors(self, x: np.ndarray) -> list[np.ndarray]:
        out, i = [], 0
        for b, t, dg in zip(self.blocks, self.tril, self.is_diag):
            v = x[i:i + len(t[0])].copy()
            i += len(t[0])
            v[dg] = np.exp(v[dg])
            Lb = np.zeros((len(b), len(b)))
            Lb[t] = v
            out.append(Lb)
        return out

    def matrix(self, x: np.ndarray) -> np.ndarray:
        if self.family == "scalar":
            return math.exp(float(x[0])) * np.eye(self.d)
        if self.family == "diagonal":
            return np.diag(np.exp(x))
        lam = np.zeros((self.d, self.d))
        for b, Lb in zip(self.blocks, self._factors(x)):
            lam[np.ix_(b, b)] = Lb @ Lb.T
        return lam

    def pullback(self, x: np.ndarray, grad: np.ndarray) -> np.ndarray:
        if self.family == "scalar":
            return np.array([math.exp(float(x[0])) * float(np.trace(grad))])
        if self.family == "diagonal":
            return np.exp(x) * np.diag(grad)
        parts = []
        for b, t, dg, Lb in zip(self.blocks, self.tril, self.is_diag, self._factors(x)):
            gL = (2.0 * grad[np.ix_(b, b)] @ Lb)[t]  # d⟨G, LLᵀ⟩ = 2⟨GL, dL⟩ for symmetric G
            gL[dg] *= Lb[t][dg]  # log-diagonal parameters
            parts.append(gL)
        return np.concatenate(parts)

    def unstable_gradient(self, x: np.ndarray) -> np.ndarray:
        """A gradient that points towards smaller steps (used with a large value off the stable set)."""
        if self.family in ("scalar", "diagonal"):
            return np.ones_like(x)
        return np.concatenate([dg.astype(float) for dg in self.is_diag])


def _fit_family(e: Expansion, S: np.ndarray, lam_dense: np.ndarray, family: str, dyn: Dynamics,
                blocks: tuple[np.ndarray, ...] | None) -> tuple[np.ndarray, str, np.ndarray]:
    """Minimise φ(Λ) = ‖Σ*^{-1/2}Σ(Λ)Σ*^{-1/2} − I‖²_F over the family with exact adjoint gradients (L-BFGS).

    Each evaluation is one forward and one adjoint solve (:mod:`sgtune.theory.adjoint`),
    whatever the number of parameters; the start is the projection of the exact dense Λ.
    The solves inside the optimisation stop at relative residual ``_FIT_SOLVE_TOL`` (φ then
    has ~10 correct digits, more than L-BFGS's stopping rule uses); the caller polishes the
    covariance of the returned Λ to machine precision. The first L-BFGS trial step is the
    Newton step of the separable model φ ≈ Σ_i (a_i e^{x_i} − 1)² at a ≈ 1 (Hessian 2I, as
    for SGD where Σ(Λ) is to first order linear in Λ): x₁ = x₀ − ∇φ/2, instead of L-BFGS-B's
    default unit-length first step, which overshoots from the closed-form start and cost one
    evaluation more.
    """
    fam = _Family(family, e.dim, blocks)
    ev = GradientEvaluator(e, affine_discrepancy(S), dyn, tol=_FIT_SOLVE_TOL)
    big = 1e8
    memo: dict[bytes, Any] = {}  # the last evaluation (L-BFGS's final point is its last evaluation)

    def evaluate(x: np.ndarray) -> Any:
        key = x.tobytes()
        if key not in memo:
            memo.clear()
            try:
                memo[key] = ev.evaluate(fam.matrix(x))
            except NotPositiveDefiniteError:  # a step underflowed to 0 (rounding): off the family's SPD set
                memo[key] = None
        return memo[key]

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        out = evaluate(x)
        if out is None:
            return big, big * fam.unstable_gradient(x)
        return out.value, fam.pullback(x, out.gradient)

    x0 = fam.initial(lam_dense)
    if family == "scalar":
        t = _scalar_line_optimum(fun, float(x0[0]))
        lam = math.exp(t)
        last = evaluate(np.array([t]))  # Brent's result is a point it evaluated
        if last is None:
            raise ConvergenceError("scalar tuning ended at an unstable step size", method="brentq")
        return lam * np.eye(e.dim), ("min ‖Σ*^{-1/2} Σ(Λ) Σ*^{-1/2} − I‖_F over Λ = λI (exact Σ(Λ); root of the "
                                     "exact derivative along the line, Brent)"), last.cov
    # variables y with x = x₀ + s·y, s = ‖∇φ(x₀)‖/2: L-BFGS-B's first trial step (unit length in y) is then
    # x₀ − ∇φ(x₀)/2; its gradient test |∂φ/∂y| ≤ s·gtol is |∂φ/∂x| ≤ gtol
    s = 0.5 * float(np.linalg.norm(fun(x0)[1]))
    if not (s > 0 and math.isfinite(s)):
        s = 1.0

    def fun_y(y: np.ndarray) -> tuple[float, np.ndarray]:
        v, g = fun(x0 + s * y)
        return v, s * g

    # the log-step parameters stay within _LOG_STEP_BOUND of the start (a step far below it is a step of 0,
    # refused by the caller); block factors' off-diagonal entries are free
    r = _LOG_STEP_BOUND / s
    logs = np.ones(len(x0), dtype=bool) if family == "diagonal" else np.concatenate(fam.is_diag)
    bounds = [(-r, r) if b else (None, None) for b in logs]
    res = sopt.minimize(fun_y, np.zeros_like(x0), jac=True, method="L-BFGS-B", bounds=bounds,
                        options={"maxiter": 1000, "ftol": _FIT_FTOL, "gtol": s * _FIT_GTOL, "maxcor": 30})
    x = x0 + s * res.x
    lam = fam.matrix(x)
    last = evaluate(x)
    if last is None:
        raise ConvergenceError(f"{family} tuning ended at an unstable step size ({res.message})", method="L-BFGS-B")
    return lam, ("min ‖Σ*^{-1/2} Σ(Λ) Σ*^{-1/2} − I‖_F over the family (exact Σ(Λ); adjoint gradient, "
                 "L-BFGS)"), last.cov


#: relative residual of the forward/adjoint solves inside the family fit (the result is polished after)
_FIT_SOLVE_TOL = 1e-10
#: L-BFGS-B stopping rules of the family fit: relative decrease of φ, and max |∂φ/∂x| over the
#: (log-)parameters; at the optimum φ is then within ~gtol²/2 ≈ 1e-12 of its minimum
_FIT_FTOL = 1e-11
_FIT_GTOL = 1e-6


# --------------------------------------------------------------------------- momentum (exact reduction)
def _momentum_terms(lam: np.ndarray, H: np.ndarray, S: np.ndarray, M: np.ndarray, kappa: float,
                    beta: float) -> tuple[np.ndarray, np.ndarray]:
    """(LHS, RHS) of the reduced momentum equation (see :func:`solve_momentum_step_matrix`)."""
    c = 1.0 - kappa * kappa
    inj = 0.0 if math.isinf(beta) else 2.0 / beta
    T = lam @ H @ S
    LH = lam @ H
    lhs = (1 - kappa) * (T + T.T) + (kappa * (LH @ T + (LH @ T).T) - (1 + kappa**2) * T @ H @ lam) / c
    if inj:
        lhs = lhs - (2 * kappa / (1 + kappa)) * inj * LH @ lam
    rhs = lam @ M @ lam + (1 - kappa) ** 2 * inj * lam
    return lhs, rhs


@cites("sgtune", "Prop. B.1 (momentum) with Σ fixed: VARMA(2,1) Yule–Walker reduction to a D×D equation in Λ")
def momentum_tuning_residual(step_matrix: np.ndarray, hessian: np.ndarray, target_cov: np.ndarray,
                             noise_cov: np.ndarray, momentum: float,
                             inv_temperature: float = math.inf) -> float:
    """Relative residual ‖LHS − RHS‖_F/‖LHS‖_F of the reduced momentum equation at the target.

    Parameters
    ----------
    step_matrix : (D, D) ndarray
        Λ.
    hessian : (D, D) ndarray
        H.
    target_cov : (D, D) ndarray
        Σ.
    noise_cov : (D, D) ndarray
        M = C̄(Σ), the minibatch gradient's noise covariance.
    momentum : float
        The heavy-ball momentum κ ∈ [0, 1).
    inv_temperature : float, optional
        The inverse temperature β (``inf`` for SGD).

    Returns
    -------
    float
        The relative residual of the equation of :func:`solve_momentum_step_matrix`.

    Examples
    --------
    >>> from sgtune.theory.tuning import momentum_tuning_residual, solve_momentum_step_matrix
    >>> H, S, M = np.eye(2), 0.5 * np.eye(2), np.eye(2)
    >>> lam = solve_momentum_step_matrix(H, S, M, momentum=0.5)
    >>> bool(momentum_tuning_residual(lam, H, S, M, 0.5) < 1e-12)
    True
    """
    lhs, rhs = _momentum_terms(step_matrix, hessian, target_cov, noise_cov, momentum, inv_temperature)
    return float(np.linalg.norm(lhs - rhs) / np.linalg.norm(lhs))


@cites("sgtune", "Prop. B.1 (momentum) with Σ fixed: VARMA(2,1) Yule–Walker reduction to a D×D equation in Λ")
def solve_momentum_step_matrix(hessian: Any, target_cov: Any, noise_cov: Any, *, momentum: float,
                               inv_temperature: float = math.inf, max_iter: int = 60) -> np.ndarray:
    r"""SPD Λ whose heavy-ball SG(L)D chain (momentum κ) has stationary covariance Σ, without the augmented unknowns.

    Parameters
    ----------
    hessian : (D, D) array_like
        H.
    target_cov : (D, D) array_like
        The SPD target Σ.
    noise_cov : (D, D) array_like
        M = C̄(Σ), the minibatch gradient's noise covariance (Eq. (12)).
    momentum : float
        The heavy-ball momentum κ ∈ [0, 1).
    inv_temperature : float, optional
        The inverse temperature β (``inf`` for SGD).
    max_iter : int, optional
        Most Newton steps.

    Returns
    -------
    (D, D) ndarray
        The SPD Λ.

    Raises
    ------
    ConvergenceError
        Newton's method did not reach a relative residual of 1e-13.
    SgtuneError
        The solution is not positive definite (the target is unreachable with this momentum).

    Notes
    -----
    Derivation (Wang, Ding & Huggins 2026, Prop. B.1 with Σ fixed). With m_t = κm_{t−1} + G_t and
    θ_t = θ_{t−1} − Λm_t + ξ_t (ξ ~ N(0, Q), Q = 2Λ/β), eliminating m gives the VARMA(2,1) recursion
    of the proxy d_t = θ_t − θ̂:

        d_t = A₁d_{t−1} − κd_{t−2} + w_t,  A₁ = (1+κ)I − ΛH,  w_t = −Λη_t + ξ_t − κξ_{t−1},

    Cov η_t = M = C̄(Σ) (eq. 12; fixed once Σ = Σ* is fixed). Its Yule–Walker equations with
    Γ₁ = E d_t d_{t−1}ᵀ: Γ₁ + κΓ₁ᵀ = A₁Σ − κQ, which — because the lag-2 coefficient is the
    scalar −κ — has the explicit solution Γ₁ = [A₁Σ − κΣA₁ᵀ − κ(1−κ)Q]/(1−κ²). Substituting
    in the lag-0 equation leaves one D×D equation in Λ alone (c = 1−κ²):

        (1−κ)(ΛHΣ + ΣHΛ) + [κ(ΛHΛHΣ + ΣHΛHΛ) − (1+κ²)ΛHΣHΛ]/c − (4κ/(β(1+κ)))ΛHΛ
            = ΛMΛ + (1−κ)²(2/β)Λ,

    which is eq. (11) at κ = 0. It is not a Lyapunov equation for κ > 0 (the κ terms are cubic
    in Λ), but with Σ = LLᵀ, K = LᵀHL = U diag(k) Uᵀ, Λ = LU Z UᵀLᵀ and Y = Z⁻¹ it reads

        A(Y) Y + Y A(Y) = M̂ + (1+κ²)k²/c + (4κ/(β(1+κ)))k,
        A(Y) = diag((1−κ)k − (1−κ)²/β) + (κ/c) k Y⁻¹ k      (k = diag(k), M̂ = UᵀLᵀMLU),

    a symmetric Lyapunov equation whose coefficient depends weakly on Y: solved by Newton's
    method with GMRES, preconditioned by the exact Lyapunov solve with the current A(Y)
    (one symmetric eigendecomposition per Newton step; Jacobian–vector products are D×D
    products, no finite differences, no augmented 2D×2D solve).

    Examples
    --------
    For H = I, Σ = I/2, M = I and κ = 1/2 the equation gives
    Λ = 2(1−κ)·½ / (1 + (1−κ)·½/(1+κ)) I = (3/7) I:

    >>> from sgtune.theory.tuning import solve_momentum_step_matrix
    >>> lam = solve_momentum_step_matrix(np.eye(2), 0.5 * np.eye(2), np.eye(2), momentum=0.5)
    >>> bool(np.allclose(lam, 3 / 7 * np.eye(2)))
    True
    """
    H = np.asarray(hessian, dtype=float)
    S = as_spd(target_cov, "target_cov", H.shape[0], rtol=1e-10)
    Mn = np.asarray(noise_cov, dtype=float)
    kappa = check_probability(momentum, "momentum")
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    d = H.shape[0]
    c = 1.0 - kappa * kappa
    inj = 0.0 if math.isinf(beta) else 2.0 / beta
    L = np.linalg.cholesky(S)
    k, U = np.linalg.eigh(L.T @ H @ L)
    LU = L @ U
    Mh = LU.T @ Mn @ LU
    R = 0.5 * (Mh + Mh.T) + np.diag((1 + kappa**2) * k * k / c + (2 * kappa / (1 + kappa)) * inj * k)
    a0 = (1 - kappa) * k - 0.5 * (1 - kappa) ** 2 * inj
    if not a0.min() > 0:
        raise InfeasibleTargetError(
            f"target covariance is unreachable at inverse temperature {beta:g} with momentum {kappa:g}: "
            f"use an inverse temperature > {(1 - kappa) / k.min():.6g} or a larger target",
            min_inv_temperature=(1 - kappa) / k.min())
    Y, res = _reduced_momentum_newton(R / (a0[:, None] + a0[None, :]), a0, np.outer(k, k), R, kappa, max_iter)
    if not res <= 1e-13:
        raise ConvergenceError(f"momentum tuning (Newton–Krylov on the reduced equation) stopped at relative "
                               f"residual {res:.2e}; try a smaller momentum", residual=res, method="newton-krylov")
    try:
        cy = np.linalg.cholesky(Y)
    except np.linalg.LinAlgError:
        raise SgtuneError("momentum tuning: the solution is not positive definite, so no SPD step-size matrix "
                          "reaches the target with this momentum; use a smaller momentum") from None
    W = np.linalg.solve(cy, LU.T)  # Λ = LU Y⁻¹ UᵀLᵀ
    lam = W.T @ W
    return 0.5 * (lam + lam.T)


def _reduced_momentum_newton(Y: np.ndarray, a0: np.ndarray, kk: np.ndarray, R: np.ndarray, kappa: float,
                             max_iter: int) -> tuple[np.ndarray, float]:
    """Newton–Krylov on A(Y)Y + YA(Y) = R (:func:`solve_momentum_step_matrix`), from Y; returns (Y, residual)."""
    c = 1.0 - kappa * kappa
    d = Y.shape[0]

    def lyap_factory(Y: np.ndarray) -> Any:
        Z = np.linalg.inv(Y)
        A = np.diag(a0) + (kappa / c) * kk * Z
        w, V = np.linalg.eigh(0.5 * (A + A.T))
        den = w[:, None] + w[None, :]
        return lambda Q: V @ ((V.T @ Q @ V) / den) @ V.T, Z

    def phi(Y: np.ndarray, Z: np.ndarray) -> np.ndarray:
        KZK = kk * Z
        out = a0[:, None] * Y + Y * a0[None, :] + (kappa / c) * (KZK @ Y + Y @ KZK) - R
        return 0.5 * (out + out.T)

    nR = np.linalg.norm(R)
    res = math.inf
    for _ in range(max_iter):
        solve_lyap, Z = lyap_factory(Y)
        F = phi(Y, Z)
        res = float(np.linalg.norm(F) / nR)
        if res <= 1e-14:
            break
        KZK = kk * Z

        def jvp(v: np.ndarray, Y: np.ndarray = Y, Z: np.ndarray = Z, KZK: np.ndarray = KZK) -> np.ndarray:
            dY = v.reshape(d, d)
            dZK = kk * (-Z @ dY @ Z)
            out = (a0[:, None] * dY + dY * a0[None, :]
                   + (kappa / c) * (dZK @ Y + KZK @ dY + dY @ KZK + Y @ dZK))
            return out.ravel()

        op = LinearOperator((d * d, d * d), matvec=lambda v: jvp(solve_lyap(v.reshape(d, d)).ravel()),
                            dtype=float)
        y, _info = gmres(op, -F.ravel(), rtol=1e-12, atol=0.0, restart=40, maxiter=20)
        step = solve_lyap(y.reshape(d, d))
        step = 0.5 * (step + step.T)
        t = 1.0
        while t > 1e-4:  # keep Y positive definite and decrease the residual
            cand = Y + t * step
            try:
                np.linalg.cholesky(cand)
                Zc = np.linalg.inv(cand)  # lyap_factory's Z, without its eigendecomposition (not needed here)
                if np.linalg.norm(phi(cand, Zc)) < np.linalg.norm(F):
                    break
            except np.linalg.LinAlgError:
                pass
            t *= 0.5
        Y = cand
    return Y, res


@cites("sgtune", "Prop. B.1 (momentum) reduced equation at Σ = Σ*: its diagonal / trace / block-diagonal part")
def structured_momentum_step_matrix(hessian: Any, target_cov: Any, noise_cov: Any, *, family: str, momentum: float,
                                    blocks: Any = None, inv_temperature: float = math.inf,
                                    max_iter: int = 50) -> np.ndarray:
    r"""Closed form: the structured Λ solving the family's part of the reduced momentum equation at Σ*.

    The momentum analogue of :func:`structured_step_matrix` (to which it reduces at κ = 0); the
    derivation per family is in the module docstring.

    Parameters
    ----------
    hessian, target_cov, noise_cov : (D, D) array_like
        H, the target Σ* and the noise covariance M = C̄(Σ*) at the target.
    family : {"scalar", "diagonal", "block"}
        The structure of Λ.
    momentum : float
        The momentum κ ∈ [0, 1).
    blocks : list of list of int, optional
        The index blocks of the ``block`` family.
    inv_temperature : float, optional
        The inverse temperature β (``inf``: SGD).
    max_iter : int, optional
        Newton iterations of the ``block`` family.

    Returns
    -------
    (D, D) ndarray
        Λ.

    Raises
    ------
    InfeasibleTargetError
        When the solution has a non-positive entry (diagonal, scalar) or a block that is not
        positive definite: no member of the family matches the target with this momentum.

    Examples
    --------
    >>> H = np.diag([1.0, 2.0])
    >>> lam = structured_momentum_step_matrix(H, 0.01 * np.linalg.inv(H), 0.1 * H, family="diagonal", momentum=0.5)
    >>> np.round(np.diag(lam), 4)
    array([0.0968, 0.0484])
    """
    H = np.asarray(hessian, dtype=float)
    S = np.asarray(target_cov, dtype=float)
    Mn = np.asarray(noise_cov, dtype=float)
    kappa = check_probability(momentum, "momentum")
    beta = check_positive(inv_temperature, "inv_temperature", allow_inf=True)
    d = H.shape[0]
    c = 1.0 - kappa * kappa
    shift = 0.0 if math.isinf(beta) else 1.0 / beta
    HS = H @ S
    hsh = np.einsum("ij,ij->i", HS, H)  # (HΣH)_ii (H symmetric)
    remedy = "use a smaller momentum, a larger inverse temperature or a larger target"
    if family == "scalar":
        den = (np.trace(Mn) + (1 - kappa) / (1 + kappa) * float(hsh.sum())
               + 4 * kappa * shift * np.trace(H) / (1 + kappa))
        lam = 2 * (1 - kappa) * (np.trace(HS) - (1 - kappa) * d * shift) / den
        if not lam > 0:
            raise InfeasibleTargetError(f"scalar family with momentum {kappa:g}: the target is unreachable at "
                                        f"inverse temperature {beta:g}; {remedy}",
                                        min_inv_temperature=(1 - kappa) * d / np.trace(HS))
        return lam * np.eye(d)
    r = (1 + kappa**2) * hsh / c + 4 * kappa * shift * np.diag(H) / (1 + kappa) + np.diag(Mn)
    rhs = 2 * (1 - kappa) * np.diag(HS) - 2 * (1 - kappa) ** 2 * shift
    A = np.diag(r) - (2 * kappa / c) * H * HS.T  # K_ij = H_ij (ΣH)_ij
    lam_d = np.linalg.solve(A, rhs)
    if not np.all(lam_d > 0):
        i = int(np.argmin(np.where(np.isfinite(lam_d), lam_d, -np.inf)))
        raise InfeasibleTargetError(f"{family} family with momentum {kappa:g}: coordinate {i} of the target is "
                                    f"unreachable (its step size solves to {lam_d[i]:.3g} ≤ 0) at inverse "
                                    f"temperature {beta:g}; {remedy}",
                                    min_inv_temperature=(1 - kappa) / HS[i, i])
    if family == "diagonal":
        return np.diag(lam_d)
    if family != "block":
        raise SgtuneError(f"family must be 'scalar', 'diagonal' or 'block', got {family!r}")
    part = load_blocks(blocks, d)
    return _momentum_blocks(H, HS, Mn, kappa, shift, part, np.diag(lam_d), max_iter)


def _momentum_blocks(H: np.ndarray, HS: np.ndarray, Mn: np.ndarray, kappa: float, shift: float,
                     part: tuple[np.ndarray, ...], lam0: np.ndarray, max_iter: int) -> np.ndarray:
    """Block family of :func:`structured_momentum_step_matrix`: Lyapunov sweeps, then Newton–Krylov."""
    c = 1.0 - kappa * kappa
    idx = [np.ix_(b, b) for b in part]
    HSH = HS @ H
    Rt = [(1 + kappa**2) * HSH[ix] / c + 4 * kappa * shift * H[ix] / (1 + kappa) + Mn[ix] for ix in idx]
    Rt = [0.5 * (x + x.T) for x in Rt]
    g0 = [(1 - kappa) * HS[ix] - (1 - kappa) ** 2 * shift * np.eye(len(b)) for ix, b in zip(idx, part)]
    sizes = [len(b) for b in part]
    offs = np.concatenate([[0], np.cumsum([n * n for n in sizes])])

    def p_blocks(lb: list[np.ndarray]) -> list[np.ndarray]:  # P_b = [H Λ HΣ]_bb for block-diagonal Λ
        HL = np.empty_like(H)
        for b, L in zip(part, lb):
            HL[:, b] = H[:, b] @ L
        return [HL[b] @ HS[:, b] for b in part]

    def g_blocks(lb: list[np.ndarray]) -> list[np.ndarray]:
        return [g + (kappa / c) * p for g, p in zip(g0, p_blocks(lb))]

    def phi(lb: list[np.ndarray]) -> list[np.ndarray]:
        return [L @ G + G.T @ L - L @ R @ L for L, G, R in zip(lb, g_blocks(lb), Rt)]

    def pack(xs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([x.ravel() for x in xs])

    def unpack(v: np.ndarray) -> list[np.ndarray]:
        return [v[offs[i]:offs[i + 1]].reshape(n, n) for i, n in enumerate(sizes)]

    def infeasible(b: np.ndarray) -> InfeasibleTargetError:
        return InfeasibleTargetError(f"block family with momentum {kappa:g}: block {b.tolist()[:8]} has no "
                                     "positive-definite solution of its part of the reduced momentum equation at "
                                     "this target/temperature; use a smaller momentum or a larger target")

    lb = [lam0[ix] for ix in idx]
    for _ in range(2):  # Lyapunov sweeps with P frozen: G_b Y_b + Y_b G_bᵀ = R̃_b, Λ_b = Y_b⁻¹
        new = []
        for b, G, R in zip(part, g_blocks(lb), Rt):
            Y = sla.solve_continuous_lyapunov(G, R)
            try:
                ci = np.linalg.inv(np.linalg.cholesky(0.5 * (Y + Y.T)))
            except np.linalg.LinAlgError:
                raise infeasible(b) from None
            new.append(ci.T @ ci)
        lb = new
    scale = math.sqrt(sum(float(np.sum((L @ G) ** 2)) for L, G in zip(lb, g_blocks(lb))))
    res = math.inf
    for _ in range(max_iter):
        F = phi(lb)
        res = math.sqrt(sum(float(np.sum(f * f)) for f in F)) / scale
        if res <= 1e-14:
            break
        Gs = g_blocks(lb)
        Ws = [G - R @ L for G, R, L in zip(Gs, Rt, lb)]
        eigs = []
        for W in Ws:  # Wᵀ = V diag(w) V⁻¹: X ↦ solution of WᵀX + XW = Q by elementwise division
            w, V = np.linalg.eig(W.T)
            eigs.append((w, V, np.linalg.inv(V)))

        def precond(v: np.ndarray, eigs: list = eigs) -> np.ndarray:
            out = []
            for Q, (w, V, Vi) in zip(unpack(v), eigs):
                X = V @ ((Vi @ Q @ Vi.T) / (w[:, None] + w[None, :])) @ V.T
                out.append(X.real)
            return pack(out)

        def jvp(v: np.ndarray, lb: list = lb, Ws: list = Ws) -> np.ndarray:
            dl = unpack(v)
            dp = p_blocks(dl)
            return pack([dL @ W + W.T @ dL + (kappa / c) * (L @ dP + dP.T @ L)
                         for dL, W, L, dP in zip(dl, Ws, lb, dp)])

        n_all = int(offs[-1])
        op = LinearOperator((n_all, n_all), matvec=lambda v: jvp(precond(v)), dtype=float)
        y, _info = gmres(op, -pack(F), rtol=1e-12, atol=0.0, restart=60, maxiter=20)
        step = unpack(precond(y))
        t = 1.0
        while True:  # damped: keep every block positive definite and decrease the residual
            cand = [L + t * 0.5 * (s + s.T) for L, s in zip(lb, step)]
            bad = [b for b, L in zip(part, cand) if np.linalg.eigvalsh(L)[0] <= 0]
            if not bad and (sum(float(np.sum(f * f)) for f in phi(cand)) < res**2 * scale**2 or t < 1e-4):
                break
            if bad and t < 1e-4:
                raise infeasible(bad[0])
            t *= 0.5
        lb = cand
    if not res <= 1e-13:
        raise ConvergenceError(f"block momentum tuning (Newton–Krylov on the block-diagonal part of the reduced "
                               f"equation) stopped at relative residual {res:.2e}; try a smaller momentum",
                               residual=res, method="newton-krylov")
    out = np.zeros_like(H)
    for ix, b, L in zip(idx, part, lb):
        try:
            np.linalg.cholesky(L)
        except np.linalg.LinAlgError:
            raise infeasible(b) from None
        out[ix] = 0.5 * (L + L.T)
    return out
