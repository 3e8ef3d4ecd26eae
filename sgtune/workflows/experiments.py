"""Wang, Ding & Huggins's (2026) experiments (§6, appendix E) as reusable pieces: data, one repetition, summaries.

Composes :mod:`sgtune.theory` (exact forward solves) and :mod:`sgtune.sampler` (chains); no new
mathematics lives here except the Monte Carlo noise floor :func:`covariance_error_floor`.
``benchmarks/wang2026_tables.py`` and ``notebooks/wang2026_tables.py`` drive it.

Conventions (docs/conventions.md, §1.7): mean-loss scaling, SGD (β = ∞), the sandwich target
S* = J⁻¹𝓘J⁻¹/N, covariance error ‖S* − Ŝ‖_F/‖S*‖_F, calibration = exact KS distance of the PIT
values q_d = P̂(θ_d ≤ θ*_d) to Unif(0, 1).
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from scipy.stats import kstwo, norm, t as student_t

from ..core._refs import cites
from ..core._validation import check_int, check_positive
from ..core.config import Dynamics
from .calibrate import ks_uniform, pit_values
from ..io.data import Dataset, make_dataset
from ..core.errors import ConvergenceError, MissingExtraError, SgtuneError, UnstableStepSizeError
from ..models import GLM, Expansion, expand
from ..core.config import Dynamics, RunSpec
from ..sampler import run_chains
from ..theory.stationary import predict_comparison_cov, predict_stationary_cov
from ..theory.tuning import tune

__all__ = ["true_parameter", "contaminated_linear", "poisson_regression_data", "diabetes", "load_diabetes_arrays",
           "randhie", "covariance_error_floor", "MethodRun", "evaluate_method", "repeat_experiment", "SummaryRow",
           "summarize", "batch_size_sweep", "ForwardRow", "forward_prediction_errors", "REFERENCE_METHODS",
           "TUNED_METHODS"]

#: methods tuned with :func:`sgtune.theory.tuning.tune` (Algorithm 1, step 6)
TUNED_METHODS = ("ct", "dq-const", "lr-ws", "dq-exact")
#: exact Gaussian references, no chain: the Laplace posterior N(θ̂, H⁻¹/N) and N(θ̂, S*)
REFERENCE_METHODS = ("posterior", "sandwich-gauss")


# ----------------------------------------------------------------------------- data generators
def true_parameter(dim: int, seed: int, *, scale: float = 1.0) -> np.ndarray:
    """θ* ~ N(0, scale²·I_D), drawn once from ``seed`` and kept fixed over repetitions (Wang, Ding & Huggins (2026) §6.1)."""
    d = check_int(dim, "dim", low=1)
    return float(check_positive(scale, "scale")) * np.random.default_rng(seed).standard_normal(d)


@cites("wang2026", "§6.1: heteroskedastic misspecified linear regression with outliers (D=50, N=5000, p, b, s)")
def contaminated_linear(seed: int, theta_star: Any, *, n_data: int = 5000, outlier_fraction: float = 0.01,
                        outlier_shift: float = 5.0, outlier_scale: float = 5.0) -> Dataset:
    r"""y_n | x_n ~ N(x_nᵀθ*, 1 + ‖x_n‖²), x_n ~ N(0, I_D); a fraction p of rows replaced by outliers.

    The ⌊pN⌋ outlying rows (chosen uniformly without replacement) have
    y_n | x_n ~ N(x_nᵀθ* + b, s²(1 + ‖x_n‖²)) with shift b = ``outlier_shift`` and scale
    s = ``outlier_scale`` (Wang, Ding & Huggins (2026) §6.1; defaults p = 0.01, b = 5, s = 5). Because the outliers
    are chosen independently of x and x is symmetric about 0, θ* is still the pseudo-true value
    of the log loss and of the β-divergence loss, so PIT values against θ* measure calibration.
    """
    theta = np.asarray(theta_star, dtype=float).reshape(-1)
    n = check_int(n_data, "n_data", low=theta.shape[0] + 1)
    if not 0.0 <= outlier_fraction <= 1.0:
        raise SgtuneError(f"outlier_fraction must lie in [0, 1], got {outlier_fraction}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, theta.shape[0]))
    sd = np.sqrt(1.0 + np.sum(X * X, axis=1))
    y = X @ theta + sd * rng.standard_normal(n)
    k = int(math.floor(outlier_fraction * n))
    if k:
        idx = rng.choice(n, size=k, replace=False)
        y[idx] = X[idx] @ theta + outlier_shift + outlier_scale * sd[idx] * rng.standard_normal(k)
    return make_dataset(X, y, source=f"contaminated-linear(seed={seed}, N={n}, p={outlier_fraction})")


@cites("wang2026", "§6.2: simulated Poisson regression y ~ Poisson(exp(xᵀθ*)), x ~ N(0, I_D)")
def poisson_regression_data(seed: int, theta_star: Any, *, n_data: int = 5000) -> Dataset:
    r"""x_n ~ N(0, I_D), y_n ~ Poisson(exp(x_nᵀθ*)) (Wang, Ding & Huggins (2026) §6.2).

    The paper draws θ* ~ N(0, I_D) with D = 50, which makes Var(xᵀθ*) = 50 and exp(xᵀθ*)
    overflow-scale counts (e^{20} and more); pass θ* ~ N(0, I_D/D)
    (``true_parameter(D, seed, scale=D**-0.5)``) for counts of order one, as the tables do.
    """
    theta = np.asarray(theta_star, dtype=float).reshape(-1)
    n = check_int(n_data, "n_data", low=theta.shape[0] + 1)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, theta.shape[0]))
    eta = X @ theta
    if eta.max() > 20:
        raise SgtuneError(f"theta_star gives linear predictors up to {eta.max():.3g}, i.e. Poisson means e^{eta.max():.0f}; "
                          "scale θ* down (e.g. θ* ~ N(0, I/D))")
    y = rng.poisson(np.exp(eta)).astype(float)
    return make_dataset(X, y, source=f"poisson(seed={seed}, N={n})")


def _standardise(X: np.ndarray) -> np.ndarray:
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def diabetes(*, standardise_response: bool = True) -> Dataset:
    """scikit-learn's diabetes data (N = 442, 10 covariates + intercept), standardised.

    The offline stand-in for the Boston housing data of Wang, Ding & Huggins (2026) §6.1 (not shippable). Covariates
    and (by default) the response are centred and scaled to unit variance; an intercept is added.
    """
    X, y = load_diabetes_arrays()
    y = (y - y.mean()) / y.std() if standardise_response else y
    return make_dataset(_standardise(X), y, intercept=True, source="sklearn:diabetes")


def load_diabetes_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's diabetes data as raw float64 arrays (N = 442, p = 10; shipped with the package,
    no download)."""
    try:
        from sklearn.datasets import load_diabetes
    except ImportError:
        raise MissingExtraError("the diabetes data need scikit-learn: pip install 'sgtune[data]'") from None
    X, y = load_diabetes(return_X_y=True)
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def randhie() -> Dataset:
    """statsmodels' RAND health-insurance data: ``mdvis`` counts on 9 covariates + intercept (N = 20 190).

    The offline stand-in for the German credit data of Wang, Ding & Huggins (2026) §6.2 (count response for
    Poisson regression; overdispersed, so the Poisson model is misspecified). Covariates are
    standardised; an intercept is added.
    """
    try:
        from statsmodels.datasets import randhie as _r
    except ImportError:
        raise MissingExtraError("the randhie data need statsmodels: pip install 'sgtune[data]'") from None
    df = _r.load_pandas().data
    y = df["mdvis"].to_numpy(dtype=float)
    cols = [c for c in df.columns if c != "mdvis"]
    X = _standardise(df[cols].to_numpy(dtype=float))
    return make_dataset(X, y, intercept=True, names=tuple(cols), source="statsmodels:randhie")


# ----------------------------------------------------------------------------- Monte Carlo floor
@cites("sgtune", "Isserlis: E‖Σ̂ − Σ‖²_F of a stationary Gaussian linear chain z_t = F z_{t−1} + noise")
def covariance_error_floor(transition: Any, cov: Any, n_draws: int, *, n_chains: int = 1,
                           reference: Any = None, tol: float = 1e-12) -> float:
    r"""RMS relative Frobenius error sqrt(E‖Σ̂ − Σ‖²_F)/‖S‖_F of a sample covariance from a linear chain.

    For a stationary Gaussian chain with lag-m autocovariance Γ_m = F^m Σ, Isserlis' theorem
    gives for the sample second moment Σ̂ = (1/T) Σ_t d_t d_tᵀ of T consecutive draws

    .. math:: E‖Σ̂ − Σ‖_F^2 = \frac{1}{T^2}\Big[T g_0 + 2\sum_{m=1}^{T-1}(T-m) g_m\Big],
              \quad g_m = (\operatorname{tr}Γ_m)^2 + \operatorname{tr}(Γ_m Γ_m),

    divided by C for C independent chains. This is the covariance error an *exact* Λ shows from
    Monte Carlo noise alone at a given run length (docs/conventions.md): the noise floor. The SGD iterates
    of a linear regression are not exactly Gaussian (the gradient noise is multiplicative), so
    the floor is the Gaussian approximation; the batch-means floor of a run is the empirical check.

    Parameters
    ----------
    transition : (D, D) F (e.g. I − ΛH, ``StationaryCov.transition``).
    cov : (D, D) stationary covariance Σ.
    n_draws : T, draws kept per chain (after burn-in, unthinned).
    n_chains : C.
    reference : (D, D) S for the denominator (default Σ).
    tol : the sum over lags stops once g_m < tol·g_0.
    """
    F = np.asarray(transition, dtype=float)
    S = np.asarray(cov, dtype=float)
    T = check_int(n_draws, "n_draws", low=1)
    C = check_int(n_chains, "n_chains", low=1)
    ref = S if reference is None else np.asarray(reference, dtype=float)
    G = S.copy()
    g0 = float(np.trace(G) ** 2 + np.sum(G * G.T))
    total = T * g0
    for m in range(1, T):
        G = F @ G
        gm = float(np.trace(G) ** 2 + np.sum(G * G.T))
        total += 2.0 * (T - m) * gm
        if abs(gm) < tol * g0:
            break
    return math.sqrt(total / (T * T * C)) / float(np.linalg.norm(ref))


# ----------------------------------------------------------------------------- one method, one rep
@dataclass(frozen=True)
class MethodRun:
    """One method at one batch size on one repetition of the data.

    Attributes
    ----------
    exact_error : ‖S* − Σ(Λ)‖_F/‖S*‖_F with Σ(Λ) the exact forward solve (eqs. 11–12); for the
        references, of the reference covariance. ``inf`` when the method's Λ diverges.
    empirical_error : ‖S* − Σ̂‖_F/‖S*‖_F with Σ̂ the chains' sample covariance (nan without chains).
    empirical_mcse : delta-method Monte Carlo standard error of ``empirical_error`` (batch means).
    floor_batch_means : sqrt(Σ_ij MCSE_ij²)/‖S*‖_F from the run's batch means.
    floor_gaussian : :func:`covariance_error_floor` of the exact Λ-chain at the run length used.
    pit : (D,) PIT values against θ* (None without θ*).
    ks : exact KS distance of ``pit`` to Unif(0, 1).
    """

    method: str
    batch_size: int
    rep: int
    exact_error: float
    empirical_error: float = math.nan
    empirical_mcse: float = math.nan
    floor_batch_means: float = math.nan
    floor_gaussian: float = math.nan
    pit: np.ndarray | None = None
    ks: float = math.nan
    n_steps: int = 0
    burn_in: int = 0
    n_chains: int = 0
    tau: float = math.nan
    note: str = ""
    seconds: float = 0.0


def _gaussian_pit(center: np.ndarray, cov: np.ndarray, theta_star: np.ndarray) -> np.ndarray:
    """Exact PIT of N(center, cov) at θ*: Φ((θ*_d − center_d)/sd_d)."""
    return norm.cdf((theta_star - center) / np.sqrt(np.diag(cov)))


@cites("wang2026", "§6 metrics: covariance error ‖S* − Ŝ‖_F/‖S*‖_F and KS calibration of PIT values (Alg. 1)")
def evaluate_method(model: GLM, data: Dataset, expansion: Expansion, method: str, *, batch_size: int,
                    n_steps: int, n_chains: int = 4, burn_in: int | None = None, theta_star: Any = None,
                    rep: int = 0, seed: int = 0, max_trace: int = 4000) -> MethodRun:
    """Tune Λ with ``method`` for the sandwich target, forward-solve it exactly, run SGD chains, score.

    ``method`` is one of :data:`TUNED_METHODS` or :data:`REFERENCE_METHODS` (exact Gaussians, no
    chain: ``posterior`` = N(θ̂, H⁻¹/N), ``sandwich-gauss`` = N(θ̂, S*)). A tuned Λ whose chain is
    unstable (the paper's "∞") gives ``exact_error = inf`` and no chain. Burn-in defaults to
    max(T/10, 20τ) with τ the exact worst-case autocorrelation time; chains start at θ̂.
    """
    t0 = time.perf_counter()
    B = check_int(batch_size, "batch_size", low=1, high=data.n_data)
    S = expansion.sandwich_cov()
    nS = float(np.linalg.norm(S))
    th = None if theta_star is None else np.asarray(theta_star, dtype=float).reshape(-1)
    if method in REFERENCE_METHODS:
        cov = expansion.posterior_cov() if method == "posterior" else S
        pit = None if th is None else _gaussian_pit(expansion.theta_hat, cov, th)
        return MethodRun(method, B, rep, float(np.linalg.norm(cov - S) / nS), pit=pit,
                         ks=math.nan if pit is None else ks_uniform(pit), note="exact Gaussian, no chain",
                         seconds=time.perf_counter() - t0)
    if method not in TUNED_METHODS:
        raise SgtuneError(f"method must be one of {', '.join(TUNED_METHODS + REFERENCE_METHODS)}, got {method!r}")
    try:
        tr = tune(expansion, Dynamics(None, B), method=method)
    except (UnstableStepSizeError, ConvergenceError) as exc:
        return MethodRun(method, B, rep, math.inf, note=f"diverges: {exc}"[:200], seconds=time.perf_counter() - t0)
    steps = check_int(n_steps, "n_steps", low=2)
    burn = (min(max(steps // 10, math.ceil(20 * tr.tau_worst)), steps // 2) if burn_in is None
            else check_int(burn_in, "burn_in", low=0, high=steps - 1))
    thin = max(1, (steps - burn) * n_chains // max_trace) if th is not None else 0
    res = run_chains(model, data, Dynamics(tr.step_matrix, B),
                     RunSpec(steps, n_chains=n_chains, burn_in=burn, thin=thin, seed=seed),
                     prior_precision=expansion.prior_precision, initial=expansion.theta_hat)
    if res.n_diverged:
        return MethodRun(method, B, rep, tr.covariance_error, n_steps=steps, burn_in=burn, n_chains=n_chains,
                         tau=tr.tau_worst, note=f"{res.n_diverged} chain(s) diverged",
                         seconds=time.perf_counter() - t0)
    delta = res.cov - S
    emp = float(np.linalg.norm(delta) / nS)
    se = res.cov_standard_error
    dn = float(np.linalg.norm(delta))
    mcse = float(math.sqrt(np.sum((delta / dn) ** 2 * se**2)) / nS) if dn > 0 else math.nan
    floor_bm = float(math.sqrt(np.sum(se**2)) / nS)
    floor_g = covariance_error_floor(tr.stationary.transition, tr.predicted_cov, steps - burn,
                                     n_chains=n_chains, reference=S)
    pit = ks = None
    if th is not None and res.trace is not None:
        pit = pit_values(res.trace, th)
        ks = ks_uniform(pit)
    return MethodRun(method, B, rep, tr.covariance_error, emp, mcse, floor_bm, floor_g, pit,
                     math.nan if ks is None else ks, steps, burn, n_chains, tr.tau_worst,
                     seconds=time.perf_counter() - t0)


def repeat_experiment(model: GLM, make_data: Callable[[int], Dataset], *, methods: Sequence[str],
                      batch_sizes: Sequence[int], reps: int, n_steps: Callable[[int], int] | int,
                      n_chains: int = 4, theta_star: Any = None, prior_precision: Any = 0.0, seed: int = 0,
                      progress: Callable[[MethodRun], None] | None = None) -> list[MethodRun]:
    """Algorithm 1 over ``reps`` repetitions: data ``make_data(r)``, fit θ̂, every method × batch size.

    ``n_steps`` is a per-chain run length or a function of the batch size (e.g. equal epochs).
    Chain seeds differ across repetitions, methods and batch sizes. With fixed data (a real
    data set), ``make_data`` may ignore r: then repetitions vary only the chains.
    """
    r_total = check_int(reps, "reps", low=1)
    out: list[MethodRun] = []
    for r in range(r_total):
        data = make_data(r)
        e = expand(model, data, prior_precision)
        for i, B in enumerate(batch_sizes):
            steps = n_steps(B) if callable(n_steps) else n_steps
            for j, m in enumerate(methods):
                run = evaluate_method(model, data, e, m, batch_size=B, n_steps=steps, n_chains=n_chains,
                                      theta_star=theta_star, rep=r,
                                      seed=seed + 1_000_003 * r + 1009 * i + 17 * j)
                out.append(run)
                if progress is not None:
                    progress(run)
    return out


# ----------------------------------------------------------------------------- summaries
@dataclass(frozen=True)
class SummaryRow:
    """Mean and 95 % t-interval over repetitions of each metric of one (method, B).

    ``ks_pooled`` is the exact KS distance of all PIT values of all repetitions pooled (R·D values).
    ``ks_null`` / ``ks_pooled_null``: the mean KS distance of that many i.i.d. Unif(0, 1) values
    (scipy's exact ``kstwo``), i.e. the calibration error a perfectly calibrated method shows from
    sampling alone — compare ``ks`` / ``ks_pooled`` with them.
    ``n_inf`` counts repetitions whose Λ diverged (excluded from the means).
    """

    method: str
    batch_size: int
    reps: int
    exact_error: tuple[float, float, float]
    empirical_error: tuple[float, float, float]
    empirical_mcse: float
    floor_batch_means: float
    floor_gaussian: float
    ks: tuple[float, float, float]
    ks_pooled: float
    n_inf: int = 0
    ks_null: float = math.nan
    ks_pooled_null: float = math.nan
    extra: dict[str, Any] = field(default_factory=dict)


def _mean_ci(x: Iterable[float]) -> tuple[float, float, float]:
    a = np.asarray([v for v in x if math.isfinite(v)], dtype=float)
    if a.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(a.mean())
    if a.size == 1:
        return (m, math.nan, math.nan)
    h = float(student_t.ppf(0.975, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))
    return (m, m - h, m + h)


@functools.lru_cache(maxsize=None)
def _ks_null_mean(n: int) -> float:
    """E[D_n] of the KS distance of n i.i.d. Unif(0, 1) values (scipy's exact ``kstwo``; a numerical integral of
    about a second, so each n is integrated once: every row of a table shares the same few n)."""
    return float(kstwo(n).mean())


def summarize(runs: Sequence[MethodRun]) -> list[SummaryRow]:
    """One :class:`SummaryRow` per (method, batch size), in first-seen order."""
    keys: list[tuple[str, int]] = []
    for r in runs:
        if (r.method, r.batch_size) not in keys:
            keys.append((r.method, r.batch_size))
    rows = []
    for m, B in keys:
        rs = [r for r in runs if r.method == m and r.batch_size == B]
        pits = [r.pit for r in rs if r.pit is not None]
        pooled = ks_uniform(np.concatenate(pits)) if pits else math.nan
        rows.append(SummaryRow(
            method=m, batch_size=B, reps=len(rs), exact_error=_mean_ci(r.exact_error for r in rs),
            empirical_error=_mean_ci(r.empirical_error for r in rs),
            empirical_mcse=float(np.nanmean([r.empirical_mcse for r in rs])) if any(
                math.isfinite(r.empirical_mcse) for r in rs) else math.nan,
            floor_batch_means=float(np.nanmean([r.floor_batch_means for r in rs])) if any(
                math.isfinite(r.floor_batch_means) for r in rs) else math.nan,
            floor_gaussian=float(np.nanmean([r.floor_gaussian for r in rs])) if any(
                math.isfinite(r.floor_gaussian) for r in rs) else math.nan,
            ks=_mean_ci(r.ks for r in rs), ks_pooled=pooled,
            n_inf=sum(1 for r in rs if math.isinf(r.exact_error)),
            ks_null=_ks_null_mean(int(pits[0].size)) if pits else math.nan,
            ks_pooled_null=_ks_null_mean(int(sum(p.size for p in pits))) if pits else math.nan))
    return rows


# ----------------------------------------------------------------------------- Figure 1 and Table E.1
@cites("wang2026", "Fig. 1: covariance error of each tuning rule's Λ vs batch size (exact forward solve)")
def batch_size_sweep(expansion: Expansion, batch_sizes: Sequence[int], *,
                     methods: Sequence[str] = ("ct", "dq-const", "lr-ws", "dq-exact")) -> dict[str, np.ndarray]:
    """‖S* − Σ(Λ_m)‖_F/‖S*‖_F for each method m and batch size B: Λ_m tuned for S*, Σ by eqs. 11–12.

    No Monte Carlo: Σ(Λ) is the exact stationary covariance (exact for linear regression).
    ``inf`` marks a Λ whose chain diverges. Returns {method: (len(batch_sizes),) array}.
    """
    out: dict[str, np.ndarray] = {}
    for m in methods:
        vals = []
        for B in batch_sizes:
            try:
                vals.append(tune(expansion, Dynamics(None, int(B)), method=m).covariance_error)
            except (UnstableStepSizeError, ConvergenceError):
                vals.append(math.inf)
        out[m] = np.asarray(vals)
    return out


@dataclass(frozen=True)
class ForwardRow:
    """Table E.1 row: ‖Σ_ψ − Σ_θ‖_F of each theory's prediction Σ_ψ vs the chains' Σ_θ at step λ.

    ``noise`` is sqrt(Σ_ij MCSE_ij²) of Σ_θ: differences below ≈ 2·noise are not resolved.
    """

    step: float
    errors: dict[str, float]
    noise: float
    empirical_cov: np.ndarray
    note: str = ""


@cites("wang2026", "App. E.2, Table E.1: forward-prediction error ‖Σ_ψ − Σ_θ‖_F vs λ (CT, DQ+const, DQ+exact)")
def forward_prediction_errors(model: GLM, data: Dataset, expansion: Expansion, steps: Sequence[float], *,
                              batch_size: int, n_steps: int, n_chains: int = 4,
                              theories: Sequence[str] = ("ct", "dq-const", "dq-exact"),
                              seed: int = 0) -> list[ForwardRow]:
    """For each scalar step Λ = λI: each theory's predicted Σ (no tuning) vs long SGD chains.

    Note that sgtune's ``dq-const`` uses the gradient-noise covariance at θ̂, Ĉ = (𝓘 − ḡḡᵀ)/B, where
    the paper's E.2 uses H/B (equal for a well-specified model at the truth).
    """
    rows = []
    for i, lam in enumerate(steps):
        try:
            preds = {th: predict_comparison_cov(expansion, Dynamics(lam, batch_size), theory=th) for th in theories}
        except (UnstableStepSizeError, ConvergenceError) as exc:
            rows.append(ForwardRow(float(lam), {th: math.inf for th in theories}, math.nan,
                                   np.full((expansion.dim,) * 2, math.nan), note=f"unstable: {exc}"[:200]))
            continue
        try:
            res = run_chains(model, data, Dynamics(lam, batch_size),
                             RunSpec(n_steps, n_chains=n_chains, seed=seed + i),
                             prior_precision=expansion.prior_precision, initial=expansion.theta_hat)
        except UnstableStepSizeError as exc:  # the true (non-quadratic) chain diverged although the proxy is stable
            rows.append(ForwardRow(float(lam), {th: math.inf for th in theories}, math.nan,
                                   np.full((expansion.dim,) * 2, math.nan), note=f"SGD diverged: {exc}"[:200]))
            continue
        if res.n_diverged:
            rows.append(ForwardRow(float(lam), {th: math.inf for th in theories}, math.nan, res.cov,
                                   note=f"{res.n_diverged} chain(s) diverged"))
            continue
        errs = {th: float(np.linalg.norm(p - res.cov)) for th, p in preds.items()}
        rows.append(ForwardRow(float(lam), errs, float(math.sqrt(np.sum(res.cov_standard_error**2))), res.cov))
    return rows


def exact_covariance(expansion: Expansion, step: Any, batch_size: int) -> np.ndarray:
    """Convenience: the exact (DQ+exact) stationary covariance for Λ (eqs. 11–12)."""
    return predict_stationary_cov(expansion, Dynamics(step, batch_size)).cov
