# %% [markdown]
# # Wang, Ding & Huggins (2026) §6.3 / Figure 2: stationary covariance of SGD on a (2, 3) tanh network (diabetes data)
#
# Wang, Ding & Huggins fit a two-hidden-layer tanh network with widths (2, 3) to the diabetes data
# and compare the covariance each theory predicts for SGD's stationary iterates with the empirical
# covariance of SGD tail iterates, as the learning rate grows:
# error = ‖Σ_pred − Σ_emp‖_F / ‖Σ_emp‖_F, mean over 30 repetitions with 95 % intervals.
#
# Here, with sgtune:
#
# - data: scikit-learn's diabetes (bundled, no download; X and y standardised), N = 442, p = 10;
# - model: `make_mlp("2,3")` (tanh, Gaussian likelihood σ² = 1), D = 35 parameters; θ̂ by L-BFGS +
#   certified Newton with weight decay Γ = γI (the unpenalised loss has no minimiser at finite θ:
#   the weights drift to infinity, see the README), exact per-sample Hessians (R-operator);
# - theories: CT (eqs. 2–3), DQ+const (eq. 5), DQ+exact (eqs. 11–12) with the exact per-sample
#   Hessians, and DQ+exact with the Gauss–Newton curvature, each a forward prediction at Λ = λI; empirical: `run_chains` (the numba MLP kernel) started at θ̂, SGD (β = ∞), B = 32;
# - the Monte Carlo floor: the error a *perfect* prediction shows against a finite run,
#   √(Σ_ij se_ij²)/‖Σ_emp‖ from the batch-means standard errors — errors at the floor are noise.
#
# Run as a script; `SGTUNE_SMOKE=1` runs a tiny version (used by the test suite).

# %%
import math
import os
import time

import numpy as np
from sklearn.datasets import load_diabetes

from sgtune.core.config import Dynamics, RunSpec
from sgtune.io.data import make_dataset
from sgtune.models import expand
from sgtune.models.mlp import make_mlp
from sgtune.sampler import run_chains
from sgtune.theory.stationary import max_stable_step, predict_comparison_cov
from sgtune.core.config import Dynamics

SMOKE = os.environ.get("SGTUNE_SMOKE") == "1"
REPS = 2 if SMOKE else 30
STEPS = 4_000 if SMOKE else 400_000
B = 32
GAMMA = 10.0  # weight decay (prior precision); Γ/N = 0.023 keeps the flattest direction mixing

X, y = load_diabetes(return_X_y=True)
X = (X - X.mean(0)) / X.std(0)
y = (y - y.mean()) / y.std()
data = make_dataset(X, y, source="sklearn:diabetes (standardised)")
net = make_mlp("2,3", activation="tanh", likelihood="gaussian")
tic = time.perf_counter()
e = expand(net, data, GAMMA, seed=0)
print(f"fit + exact expansion: {time.perf_counter() - tic:.2f} s; D = {e.dim}, ‖∇L(θ̂)‖ = {e.gradient_norm:.2e}, "
      f"λ_min(H) = {e.hessian_min_eigenvalue:.3g}, λ_min(J) = {np.linalg.eigvalsh(e.curvature)[0]:.3g}")
# the same expansion point with the Gauss–Newton curvature ρ''(f)∇f∇fᵀ (positive semi-definite)
e_gn = expand(make_mlp("2,3", hessian="gauss-newton"), data, GAMMA, theta_hat=e.theta_hat)
lam_max = max_stable_step(e, Dynamics(1.0, B))
print(f"largest stable scalar step (exact second-moment map): λ_max = {lam_max:.4g}")

# %% [markdown]
# ## Error of each theory against the empirical covariance of SGD, 30 repetitions

# %%
fracs = [0.1, 0.6] if SMOKE else [0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8]
THEORIES = ("ct", "dq-const", "dq-exact", "dq-exact-gn")
rows = []
for frac in fracs:
    lam = frac * lam_max
    preds = {th: predict_comparison_cov(e, Dynamics(lam, B), theory=th) for th in THEORIES[:3]}
    preds["dq-exact-gn"] = predict_comparison_cov(e_gn, Dynamics(lam, B), theory="dq-exact")
    errs = {th: [] for th in THEORIES}
    floors, diverged = [], 0
    for r in range(REPS):
        res = run_chains(net, data, Dynamics(lam, B),
                         RunSpec(STEPS, n_chains=1, burn_in=STEPS // 5, batches_per_chain=32, seed=1000 * r + 7),
                         prior_precision=GAMMA, initial=e.theta_hat)
        if res.n_diverged:
            diverged += 1
            continue
        norm = np.linalg.norm(res.cov)
        for th in THEORIES:
            errs[th].append(np.linalg.norm(preds[th] - res.cov) / norm)
        floors.append(math.sqrt(np.sum(res.cov_standard_error ** 2)) / norm)
    rows.append((frac, lam, {th: np.array(v) for th, v in errs.items()}, np.array(floors), diverged))


def ci(v):
    m = float(np.mean(v))
    h = 1.96 * float(np.std(v, ddof=1)) / math.sqrt(len(v)) if len(v) > 1 else float("nan")
    return m, h


print(f"\n{'λ/λmax':>7} {'λ':>8} | " + " | ".join(f"{th:>17}" for th in THEORIES) + f" | {'MC floor':>8} | div")
for frac, lam, errs, floors, div in rows:
    cells = []
    for th in THEORIES:
        m, h = ci(errs[th])
        cells.append(f"{m:8.3f} ± {h:6.3f}")
    print(f"{frac:7.2f} {lam:8.4f} | " + " | ".join(f"{c:>17}" for c in cells) + f" | {np.mean(floors):8.3f} | {div}")

# %% [markdown]
# ## Figure 2

# %%
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6, 4))
    lams = np.array([r[1] for r in rows])
    for th, label in zip(THEORIES, ("CT", "DQ+const", "DQ+exact", "DQ+exact (Gauss–Newton J_n)")):
        m = np.array([ci(r[2][th])[0] for r in rows])
        h = np.array([ci(r[2][th])[1] for r in rows])
        ax.plot(lams, m, marker="o", label=label)
        ax.fill_between(lams, m - h, m + h, alpha=0.25)
    ax.plot(lams, [np.mean(r[3]) for r in rows], "k--", label="Monte Carlo floor")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("learning rate λ (Λ = λI)")
    ax.set_ylabel("‖Σ_pred − Σ_emp‖_F / ‖Σ_emp‖_F")
    ax.set_title("(2, 3) tanh network, diabetes, B = 32")
    ax.legend()
    fig.tight_layout()
    out = os.environ.get("SGTUNE_FIGURE", "neural_network_covariance.png")
    if not SMOKE:
        fig.savefig(out, dpi=120)
        print(f"figure written to {out}")
except ImportError:  # matplotlib is in the [plot] extra
    pass

# %% [markdown]
# ## What holds
#
# The verdict is computed from the table above: DQ+exact is "at the floor" where its mean error is
# within 2 × the Monte Carlo floor; CT and DQ+const "fail" where their error exceeds 2 × the floor
# and DQ+exact's. The Taylor proxy behind every theory is local: at large λ the iterates leave the
# quadratic basin of this non-convex loss (or diverge), and no theory applies there.

# %%
for frac, lam, errs, floors, div in rows:
    fl = float(np.mean(floors))
    dq = float(np.mean(errs["dq-exact"]))
    ct = float(np.mean(errs["ct"]))
    verdict = "DQ+exact at the MC floor" if dq <= 2 * fl else f"DQ+exact {dq / fl:.1f}× the floor (proxy error)"
    if ct > 2 * fl and ct > dq:
        verdict += f"; CT off ({ct / fl:.1f}× the floor)"
    if div:
        verdict += f"; {div} of {REPS} runs diverged"
    print(f"λ = {lam:.4f} ({frac:.2f} λ_max): {verdict}")

# %% [markdown]
# ## Measured at full size (30 repetitions × 400 000 steps, B = 32, Γ = 10·I; 2026-11-23)
#
# | λ/λ_max | CT | DQ+const | DQ+exact | DQ+exact (Gauss–Newton) | MC floor |
# |---|---|---|---|---|---|
# | 0.02 | 0.154 ± 0.005 | 0.154 ± 0.005 | 0.155 ± 0.005 | 0.346 ± 0.010 | 0.147 |
# | 0.10 | 0.094 ± 0.004 | 0.084 ± 0.004 | 0.085 ± 0.003 | 0.341 ± 0.006 | 0.070 |
# | 0.20 | 0.130 ± 0.003 | 0.104 ± 0.004 | 0.105 ± 0.002 | 0.351 ± 0.005 | 0.051 |
# | 0.40 | 0.225 ± 0.002 | 0.170 ± 0.004 | 0.211 ± 0.002 | 0.378 ± 0.004 | 0.038 |
# | 0.60 | 0.317 ± 0.002 | 0.257 ± 0.003 | 0.415 ± 0.003 | 0.439 ± 0.004 | 0.033 |
# | 0.80 | 0.406 ± 0.002 | 0.504 ± 0.001 | 0.998 ± 0.005 | 0.743 ± 0.001 | 0.030 |
#
# - Up to 0.1 λ_max every theory is at the Monte Carlo floor: "all methods are comparable at small
#   learning rates" holds, and no theory can be told apart from noise there.
# - At 0.2–0.4 λ_max CT departs first (2.6× and 5.9× the floor) while the discrete-time predictions
#   stay closer (DQ+exact 2.1× and 5.5×): the paper's ordering holds, but DQ+exact is *not* at the
#   floor — the Taylor proxy's error is already visible, and DQ+const is slightly better than DQ+exact.
# - From 0.6 λ_max DQ+exact is the *worst* theory (error 0.42, then 1.0): its exact multiplicative
#   noise term is built from per-sample Hessians with negative curvature (λ_min(J) < 0 at θ̂, from
#   ρ'∇²f), which pushes the predicted chain towards instability; the network's iterates leave the
#   quadratic region. This is where the non-convexity breaks the DQ+exact theory; the paper's
#   statement that it "remains accurate" as λ grows does not hold at these step sizes.
# - The Gauss–Newton curvature is not a substitute for the proxy of the actual SGD chain: it changes
#   H itself (it drops ρ'∇²f), so its prediction is off by ≈ 0.35 even at tiny λ.
