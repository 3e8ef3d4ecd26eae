# %% [markdown]
# # Non-reversible SG Langevin samplers: fluctuation constants vs simulation (the GNLD paper, anonymous, 2025, §6.2–6.3)
#
# For the SG Euler–Maruyama scheme of a GNLD sampler with step η and K ∝ η⁻² iterations,
# the time average of f satisfies η^{-1/2}(Π_η f − πf) ⇒ N(0, σ²) (Theorem 3.2). On a Bayesian
# linear regression posterior (Gaussian after shifting to the posterior mean) σ² is explicit
# (Prop. 5.2; `sgtune.theory.fluctuation`). This notebook reproduces the paper's RMSE-vs-step
# plots — η^{-1/2}·RMSE approaches sqrt(σ²) as η shrinks — and normal Q-Q plots, for NLD,
# HFHR and GAUL against their reversible baselines (same D, Q = 0). Chains start at the
# posterior mean. Optionally, at the end: Bayesian logistic regression on scikit-learn's
# breast-cancer data, with σ² and the non-reversible/baseline ratio estimated from chains
# by batch means.
#
# Run: `python notebooks/fluctuation_nonreversible.py` (`SGTUNE_SMOKE=1` for a tiny run).

# %%
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from scipy import stats

from sgtune.sampler.gnld import GnldProblem, run_sg_gnld
from sgtune.theory.fluctuation import (
    blr_gradient_noise_moments,
    estimate_fluctuation_from_chains,
    gaul_matrices,
    hfhr_matrices,
    predict_time_average_variance,
    solve_fluctuation_general,
)

SMOKE = os.environ.get("SGTUNE_SMOKE", "0") == "1"
OUT = Path(os.environ.get("SGTUNE_FIGURES", Path(__file__).resolve().parent / "figures"))
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    HAVE_MPL = True
except ImportError:  # plots are optional
    HAVE_MPL = False

# %% [markdown]
# ## Synthetic Bayesian linear regression (the paper's §6.2)
# y = xᵀθ + ε, ε ~ N(0, 1), prior N(0, I); minibatch gradients with replacement (Eq. 6.3).

# %%
rng = np.random.default_rng(2026)
N, P, B = 40, 2, 8
X = 0.4 * rng.standard_normal((N, P))
y = X @ np.array([1.0, -1.0]) + rng.standard_normal(N)
GAMMA = np.eye(P)
mom = blr_gradient_noise_moments(X, y, B, prior_precision=GAMMA)
A = mom["precision"]
ell = np.array([1.0, -0.5])
print("posterior precision eigenvalues:", np.linalg.eigvalsh(A))

d_h, q_h = hfhr_matrices(1.0, 1.0, P)
d_g, q_g = gaul_matrices(1.0, 2.0, np.diag([1.5, 0.8]))
SCHEMES = {
    "NLD": (np.eye(P), np.array([[0.0, 1.5], [-1.5, 0.0]]), ell),
    "HFHR": (d_h, q_h, np.r_[ell, 0.0, 0.0]),
    "GAUL": (d_g, q_g, np.r_[ell, 0.0, 0.0]),
}


def full_hessian(n: int) -> np.ndarray:
    m = np.eye(n)
    m[:P, :P] = A
    return m


theory = {}
for name, (d, q, l_) in SCHEMES.items():
    res = solve_fluctuation_general(full_hessian(len(l_)), d, q, l_)
    theory[name] = res
    print(f"{name:5s} sigma2 = {res.sigma2:.4f}  baseline = {res.sigma2_reversible:.4f}  ratio = {res.ratio:.3f}"
          f"  max step = {res.max_stable_step:.3f} (baseline {res.max_stable_step_reversible:.3f})")

# %% [markdown]
# ## RMSE vs step size, K = c/η² iterations, R replicas from the posterior mean

# %%
ETAS = [0.04, 0.02] if SMOKE else [0.04, 0.02, 0.01, 0.005]
C_ITER = 0.25 if SMOKE else 2.0
R = 20 if SMOKE else 400
rows = []
t0 = time.perf_counter()
for name, (d, q, l_) in SCHEMES.items():
    for label, qq in ((name, q), (name + " baseline", np.zeros_like(q))):
        for i, eta in enumerate(ETAS):
            k = int(C_ITER / eta ** 2)
            problem = GnldProblem(d, qq, l_, design=X, response=y, prior_precision=GAMMA)
            run = run_sg_gnld(problem, eta, k, R, batch_size=B, seed=1000 * len(rows) + i)
            pred = predict_time_average_variance(full_hessian(len(l_)), d, qq, l_, eta, k, design=X,
                                                 response=y, batch_size=B, prior_precision=GAMMA)
            err = run.time_averages  # target 0 after the shift
            rmse = float(np.sqrt(np.mean(err ** 2)))
            sig2 = theory[name].sigma2 if qq is q else theory[name].sigma2_reversible
            scaled = rmse * np.sqrt(k * eta)  # = η^{-1/2}·RMSE·sqrt(c): → sqrt(σ²) as η → 0
            se = float(np.std(err ** 2, ddof=1) / np.sqrt(R)) * k * eta  # SE of Kη·MSE
            rows.append(dict(scheme=label, eta=eta, K=k, scaled_rmse=scaled, sqrt_sigma2=np.sqrt(sig2),
                             sqrt_exact=np.sqrt(pred["scaled_variance"]),
                             z_exact=(k * eta * np.mean(err ** 2) - pred["scaled_variance"]) / se,
                             errors=err, sigma2=sig2))
print(f"simulations: {time.perf_counter() - t0:.1f} s")
# sqrt(Kη)·RMSE (the paper's η^{-1/2}·RMSE for K = η⁻²) vs sqrt(σ²) (η → 0 limit) and vs the exact
# finite-η value sqrt(Kη·V_η) (stationary start; here chains start at the posterior mean, which
# changes the variance by O(1/(Kη)) = O(η/c)); z_exact is the z-score of Kη·MSE against Kη·V_η.
print(f"{'scheme':15s} {'eta':>7s} {'K':>7s} {'sqrt(Keta)RMSE':>14s} {'sqrt(s2)':>9s} {'sqrt(exact)':>11s} {'z_exact':>8s}")
for r in rows:
    print(f"{r['scheme']:15s} {r['eta']:7.4f} {r['K']:7d} {r['scaled_rmse']:14.4f} {r['sqrt_sigma2']:9.4f}"
          f" {r['sqrt_exact']:11.4f} {r['z_exact']:8.2f}")

# %% [markdown]
# ## Figures: RMSE vs η (log-log) with the theory line, and Q-Q plots at the smallest η
# Reference lines: sqrt(σ²/(Kη)) with K = c/η², i.e. RMSE = sqrt(σ²·η/c).

# %%
if HAVE_MPL:
    OUT.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for col, name in enumerate(SCHEMES):
        ax = axes[0, col]
        for label, colr in ((name, "C0"), (name + " baseline", "C1")):
            sel = [r for r in rows if r["scheme"] == label]
            etas = np.array([r["eta"] for r in sel])
            rmse = np.array([r["scaled_rmse"] * np.sqrt(r["eta"]) for r in sel])
            ax.loglog(etas, rmse, "o-", color=colr, label=label)
            ax.loglog(etas, np.sqrt(sel[0]["sigma2"] * etas / C_ITER), "--", color=colr, lw=1)
        ax.set_xlabel("step size η")
        ax.set_ylabel("RMSE of time average")
        ax.set_title(f"{name}: RMSE vs η (dashed: theory)")
        ax.legend(fontsize=8)
        ax = axes[1, col]
        for label, colr in ((name, "C0"), (name + " baseline", "C1")):
            r = [r for r in rows if r["scheme"] == label][-1]
            z = r["errors"] / np.sqrt(r["sigma2"] / (r["K"] * r["eta"]))
            (osm, osr), _ = stats.probplot(z, dist="norm")
            ax.plot(osm, osr, ".", color=colr, label=label, ms=3)
        ax.plot([-3, 3], [-3, 3], "k-", lw=1)
        ax.set_xlabel("normal quantiles")
        ax.set_ylabel("normalised error")
        ax.set_title(f"{name}: Q-Q at η = {ETAS[-1]}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "fluctuation_blr.png", dpi=110)
    plt.close(fig)
    print("saved", OUT / "fluctuation_blr.png")

# %% [markdown]
# ## Optional: Bayesian logistic regression on breast-cancer data (the paper's §6.3, with sklearn's data)
# Observable: posterior predictive probability of a test point, f(θ) = sigmoid(x*ᵀθ). No closed
# form: σ² and the ratio to the baseline are estimated by batch means from long chains
# (`estimate_fluctuation_from_chains`). NumPy SG-EM vectorised over chains (one sampler,
# one baseline per scheme); prior N(0, I), minibatch with replacement, prior gradient exact.

# %%
try:
    from sklearn.datasets import load_breast_cancer
except ImportError:
    load_breast_cancer = None
    print("scikit-learn not installed: skipping the logistic regression experiment (pip install sgtune[data])")

if load_breast_cancer is not None:
    from scipy.optimize import minimize

    from sgtune.theory.fluctuation import optimal_antisymmetric_nld, solve_fluctuation_nld

    data = load_breast_cancer()
    feats = data.data[:, :10]  # the ten 'mean' features
    lrng = np.random.default_rng(7)
    perm = lrng.permutation(len(feats))
    n_train = int(0.75 * len(feats))
    tr, te = perm[:n_train], perm[n_train:]
    mu, sd = feats[tr].mean(0), feats[tr].std(0)
    Xl = np.c_[(feats - mu) / sd, np.ones(len(feats))]
    yl = data.target.astype(float)
    Xtr, ytr = Xl[tr], yl[tr]
    nl, pl = Xtr.shape
    BL = 32

    def potential(t: np.ndarray) -> float:
        z_ = Xtr @ t
        return float(np.sum(np.logaddexp(0.0, z_) - ytr * z_) + 0.5 * t @ t)

    def full_grad(t: np.ndarray) -> np.ndarray:
        return Xtr.T @ (1.0 / (1.0 + np.exp(-Xtr @ t)) - ytr) + t

    theta_map = minimize(potential, np.zeros(pl), jac=full_grad, method="BFGS", options={"gtol": 1e-10}).x
    pr_map = 1.0 / (1.0 + np.exp(-Xtr @ theta_map))
    A_lap = (Xtr * (pr_map * (1 - pr_map))[:, None]).T @ Xtr + np.eye(pl)   # Laplace precision
    p_test = 1.0 / (1.0 + np.exp(-Xl[te] @ theta_map))
    xstar = Xl[te[int(np.argmin(np.abs(p_test - 0.5)))]]                     # most uncertain test point
    p_star = 1.0 / (1.0 + np.exp(-xstar @ theta_map))
    ell_lap = p_star * (1 - p_star) * xstar                                  # ∇f at the MAP

    def sg_grad(theta: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """(N/B)Σ_b x_b(σ(x_bᵀθ) − y_b) + θ for a (C, p) batch of chains; idx (C, B)."""
        xb = Xtr[idx]                                     # C, B, p
        pr = 1.0 / (1.0 + np.exp(-np.einsum("cbp,cp->cb", xb, theta)))
        return (nl / BL) * np.einsum("cbp,cb->cp", xb, pr - ytr[idx]) + theta

    def run_logistic(dmat: np.ndarray, qmat: np.ndarray, eta: float, steps: int, chains: int,
                     seed: int) -> np.ndarray:
        g = np.random.default_rng(seed)
        n = dmat.shape[0]
        kmat = dmat + qmat
        lfac = np.linalg.cholesky(2 * dmat)
        z = np.zeros((chains, n))
        z[:, :pl] = theta_map
        fvals = np.empty((chains, steps))
        for k in range(steps):
            fvals[:, k] = 1.0 / (1.0 + np.exp(-z[:, :pl] @ xstar))
            grad = z.copy()                               # kinetic part of H for augmented states
            grad[:, :pl] = sg_grad(z[:, :pl], g.integers(0, nl, size=(chains, BL)))
            z = z - eta * grad @ kmat.T + np.sqrt(eta) * g.standard_normal((chains, n)) @ lfac.T
        return fvals

    ETA_L = 2e-3
    STEPS_L = 100000 if not SMOKE else 600
    CHAINS_L = 16 if not SMOKE else 2
    BURN = STEPS_L // 20
    jl = np.zeros((pl, pl))
    for i in range(0, pl - 1, 2):                         # block-diagonal rotations (the paper's §6.3.2)
        jl[i, i + 1], jl[i + 1, i] = 1.0, -1.0
    j_opt = optimal_antisymmetric_nld(A_lap, ell_lap, 2.0).antisymmetric   # §2.4, Laplace approximation
    dhl, qhl = hfhr_matrices(1.0, 1.0, pl)
    dgl, qgl = gaul_matrices(1.0, 2.0, np.eye(pl))
    LSCHEMES = {"NLD": (np.eye(pl), jl), "NLD opt-J": (np.eye(pl), j_opt), "HFHR": (dhl, qhl),
                "GAUL": (dgl, qgl)}
    t0 = time.perf_counter()
    print(f"logistic regression: N = {nl}, p = {pl}, B = {BL}, eta = {ETA_L}, {STEPS_L} steps x {CHAINS_L}"
          f" chains; test point with MAP predictive probability {p_star:.3f}")
    baselines: dict[str, np.ndarray] = {}
    for s_i, (name, (dmat, qmat)) in enumerate(LSCHEMES.items()):
        mfull = np.eye(dmat.shape[0])
        mfull[:pl, :pl] = A_lap
        lap = solve_fluctuation_general(mfull, dmat, qmat, np.r_[ell_lap, np.zeros(dmat.shape[0] - pl)])
        key = name.split()[0]
        if key not in baselines:
            baselines[key] = run_logistic(dmat, np.zeros_like(qmat), ETA_L, STEPS_L, CHAINS_L, 100 + s_i)[:, BURN:]
        f_nr = run_logistic(dmat, qmat, ETA_L, STEPS_L, CHAINS_L, 10 * s_i)[:, BURN:]
        est = estimate_fluctuation_from_chains(f_nr, ETA_L, n_batches=10, baseline=baselines[key])
        lo, hi = est.ratio_interval
        print(f"  {name:10s} sigma2 = {est.sigma2:.3e} +- {est.sigma2_standard_error:.1e}  baseline = "
              f"{est.sigma2_baseline:.3e} +- {est.sigma2_baseline_standard_error:.1e}  ratio = {est.ratio:.3f}"
              f" +- {est.ratio_standard_error:.3f} (95% [{lo:.3f}, {hi:.3f}]);  Laplace prediction: "
              f"ratio {lap.ratio:.3f}, sigma2 {lap.sigma2:.3e} vs baseline {lap.sigma2_reversible:.3e}")
    print(f"logistic regression: {time.perf_counter() - t0:.1f} s")
