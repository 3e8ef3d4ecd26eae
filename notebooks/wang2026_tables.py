# %% [markdown]
# # The experiments of Wang, Ding & Huggins (2026), reproduced honestly: Tables 2–4, Figure 1, Table E.1, appendix E.3
#
# Wang, Ding & Huggins compare four ways of choosing SGD's step-size matrix Λ so that the
# stationary covariance of the iterates equals the sandwich covariance S* = J⁻¹𝓘J⁻¹/N:
# continuous time (**CT**), discrete quadratic with constant noise (**DQ+const**), the large-N
# well-specified linear theory (**LR+WS**) and their exact discrete-time noise (**DQ+exact**).
# For each Λ this notebook reports three things the paper's tables mix together:
#
# * the **exact** covariance error ‖S* − Σ(Λ)‖_F/‖S*‖_F, with Σ(Λ) the forward solve of eqs. (11)–(12)
#   (no Monte Carlo; exact for linear regression, the proxy chain for Poisson);
# * the **empirical** error of SGD chains with its Monte Carlo standard error, next to the **noise
#   floor** — the error an exact Λ shows from Monte Carlo noise alone at the run length used, and at
#   the paper's own run length (100 epochs, half discarded);
# * **calibration**: PIT values of θ* and their exact KS distance to Unif(0, 1), over repetitions
#   of the data, with 95 % intervals.
#
# The full-size tables come from `python benchmarks/wang2026_tables.py --reps 20 --steps 200000`
# (numbers in the README); this notebook runs the same library code. `SGTUNE_SMOKE=1` runs a tiny
# version (used by the test suite); figures go to `$SGTUNE_FIGURES` (default `notebooks/figures`).
#
# Real data: the paper's Boston housing and German credit data are not shippable; scikit-learn's
# **diabetes** (linear) and statsmodels' **randhie** (`mdvis` counts, Poisson) stand in for them.

# %%
import math
import os

import numpy as np

from sgtune.workflows.experiments import (batch_size_sweep, contaminated_linear, covariance_error_floor, diabetes,
                                forward_prediction_errors, poisson_regression_data, randhie, repeat_experiment,
                                summarize, true_parameter)
from sgtune.models import expand, get_model
from sgtune.theory.stationary import max_stable_step
from sgtune.theory.testloss import ridge_test_loss_path
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics

SMOKE = os.environ.get("SGTUNE_SMOKE") == "1"
FIG = os.environ.get("SGTUNE_FIGURES", "notebooks/figures")
D, N = (5, 400) if SMOKE else (50, 5000)
REPS = 2 if SMOKE else 20
STEPS = 1_000 if SMOKE else 100_000  # at B = 16; other B: equal epochs
CHAINS = 2 if SMOKE else 4
LABEL = {"posterior": "Posterior", "sandwich-gauss": "Sandwich Gauss", "ct": "CT", "dq-const": "DQ+const",
         "lr-ws": "LR+WS", "dq-exact": "DQ+exact"}


def steps_for(B):
    return max(500 if SMOKE else 1000, STEPS * 16 // B)


def show(rows, calibration=True):
    head = f"{'B':>5} {'method':>14} | {'exact':>8} | {'empirical [95% CI]':>26} {'floor':>6} | "
    print(head + ("KS [95% CI]" if calibration else ""))
    for s in rows:
        m, lo, hi = s.empirical_error
        emp = "–" if math.isnan(m) else f"{m:.3f} [{lo:.3f}, {hi:.3f}]"
        line = f"{s.batch_size:5d} {LABEL[s.method]:>14} | {s.exact_error[0]:8.2g} | {emp:>26} {s.floor_gaussian:6.3f} | "
        if calibration:
            k, klo, khi = s.ks
            line += f"{k:.3f} [{klo:.3f}, {khi:.3f}] (perfectly calibrated: {s.ks_null:.3f})"
        print(line + (f"  ({s.n_inf} diverged)" if s.n_inf else ""))


# %% [markdown]
# ## Figure 1: exact covariance error of each tuning rule as the batch size grows
# Misspecified heteroskedastic linear regression with 1 % outliers (§6.1: p = 0.01, b = 5, s = 5).
# No Monte Carlo: each method's Λ is forward-solved exactly.

# %%
theta_lin = true_parameter(D, seed=0)
make_lin = lambda r: contaminated_linear(1 + r, theta_lin, n_data=N)  # noqa: E731
e0 = expand(get_model("linear"), make_lin(0))
Bgrid = [16, 32, 64, N // 10] if SMOKE else [16, 32, 64, 128, 256, 500, 1000, 2500]
sweep = batch_size_sweep(e0, Bgrid)
print(f"{'B':>6} " + " ".join(f"{LABEL[m]:>9}" for m in sweep))
for i, B in enumerate(Bgrid):
    print(f"{B:6d} " + " ".join(f"{sweep[m][i]:9.3g}" for m in sweep))

# %%
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(FIG, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for m, v in sweep.items():
        ax.plot(Bgrid, np.maximum(v, 1e-17), "o-", label=LABEL[m])
    ax.set_xscale("log"), ax.set_yscale("log"), ax.set_xlabel("batch size B")
    ax.set_ylabel("exact ‖S* − Σ(Λ)‖_F / ‖S*‖_F"), ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(FIG, "wang2026_figure1.png"), dpi=120)
except ImportError:
    print("matplotlib not installed: no figure (pip install sgtune[plot])")

# %% [markdown]
# **Reading Figure 1.** DQ+exact's Λ reproduces S* to machine precision at every B (linear regression:
# the proxy is exact). CT's error grows with B (it ignores the discretisation), LR+WS's is constant
# and large (it assumes a well-specified model), and DQ+const is off by a small constant (it drops
# the Σ-dependent noise).
#
# ## Table 2: simulated data, log loss and β-divergence loss (β = 1.5)
# For the β-loss the Gaussian working variance is σ² = 1 + D (the average clean noise variance);
# with σ² = 1 almost every residual would be an "outlier". LR+WS exists for the log loss only.

# %%
Bs = [16, N // 10]
for loss, model, methods in (
        ("log loss", get_model("linear"), ["posterior", "ct", "dq-const", "lr-ws", "dq-exact"]),
        ("β-loss", get_model("beta-linear", noise_variance=1.0 + D, beta_power=1.5),
         ["posterior", "sandwich-gauss", "ct", "dq-const", "dq-exact"])):
    runs = repeat_experiment(model, make_lin, methods=methods, batch_sizes=Bs, reps=REPS, n_steps=steps_for,
                             n_chains=CHAINS, theta_star=theta_lin)
    print(f"\n{loss}: {REPS} repetitions of the data, {CHAINS} chains, {STEPS} steps at B = 16")
    show(summarize(runs))

# %% [markdown]
# ### The noise floor at the paper's run length
# The paper runs 100 epochs and discards half: 15 625 draws at B = 16, 500 at B = ⌊0.1N⌋, one chain.
# The Gaussian-chain floor of an *exact* Λ at that length:

# %%
for B in Bs:
    t = tune(e0, Dynamics(None, B), method="dq-exact")
    draws = 100 * N // B // 2
    fl = covariance_error_floor(t.stationary.transition, t.predicted_cov, draws, reference=t.target_cov)
    print(f"B = {B:5d}: {draws:6d} draws, τ = {t.tau_worst:6.1f}: an exact Λ scores {fl:.3f} from Monte Carlo noise")

# %% [markdown]
# At the paper's size this is ≈ 0.70 at both batch sizes: its printed covariance errors of 0.64–0.75
# for CT, DQ+exact and β-loss tunings at B = 16 are the floor, and cannot rank the methods.
#
# ## Table 3: real data (diabetes in place of Boston housing)
# Fixed data, so repetitions vary only the chains; no θ*, so no calibration.

# %%
dia = diabetes()
if SMOKE:
    dia = type(dia)(dia.X[:200], dia.y[:200], dia.names, dia.source)
ols = np.linalg.lstsq(dia.X, dia.y, rcond=None)[0]
s2 = float(np.sum((dia.y - dia.X @ ols) ** 2) / (dia.n_data - dia.dim))
for loss, model, methods in (("log loss", get_model("linear"), ["posterior", "ct", "dq-const", "lr-ws", "dq-exact"]),
                             ("β-loss", get_model("beta-linear", noise_variance=s2, beta_power=1.5),
                              ["posterior", "ct", "dq-const", "dq-exact"])):
    runs = repeat_experiment(model, lambda r: dia, methods=methods, batch_sizes=[16, dia.n_data // 10], reps=REPS,
                             n_steps=steps_for, n_chains=CHAINS)
    print(f"\ndiabetes, {loss}")
    show(summarize(runs), calibration=False)

# %% [markdown]
# ## Table 4: Poisson regression (simulated; randhie in place of German credit)
# The paper's θ* ~ N(0, I_50) gives Poisson means up to e^{20} and beyond; we draw θ* ~ N(0, I/D).

# %%
theta_p = true_parameter(D, seed=2, scale=D ** -0.5)
make_p = lambda r: poisson_regression_data(100 + r, theta_p, n_data=N)  # noqa: E731
runs = repeat_experiment(get_model("poisson"), make_p, methods=["ct", "dq-const", "dq-exact"], batch_sizes=Bs,
                         reps=REPS, n_steps=steps_for, n_chains=CHAINS, theta_star=theta_p)
print("simulated Poisson")
show(summarize(runs))
rh = randhie()
if SMOKE:
    rh = type(rh)(rh.X[:1000], rh.y[:1000], rh.names, rh.source)
runs = repeat_experiment(get_model("poisson"), lambda r: rh, methods=["ct", "dq-const", "dq-exact"],
                         batch_sizes=[16, rh.n_data // 10], reps=REPS, n_steps=steps_for, n_chains=CHAINS)
print("\nrandhie")
show(summarize(runs), calibration=False)

# %% [markdown]
# ## Table E.1: forward prediction error vs the step size (Poisson, B = 32)
# Each theory predicts Σ for a *given* Λ = λI; the truth Σ_θ is the chains' covariance (its own
# Monte Carlo noise is printed). The paper's λ ∈ {0.1, 0.3, 0.5} are unstable on these data, so λ is
# the same fractions of the largest second-moment-stable step.

# %%
pm = get_model("poisson")
for name, ds in (("simulated", poisson_regression_data(9, true_parameter(min(D, 10), seed=4, scale=0.3), n_data=2000)),
                 ("randhie", rh)):
    e = expand(pm, ds)
    lmax = max_stable_step(e, Dynamics(1.0, 32))
    rows = forward_prediction_errors(pm, ds, e, [0.1 * lmax, 0.3 * lmax, 0.5 * lmax], batch_size=32,
                                     n_steps=max(20_000, STEPS) if not SMOKE else 2000, n_chains=CHAINS)
    print(f"\n{name}: λ_max = {lmax:.4g}")
    print(f"{'λ/λmax':>7} {'CT':>9} {'DQ+const':>9} {'DQ+exact':>9} {'MC noise':>9}  note")
    for c, r in zip((0.1, 0.3, 0.5), rows):
        print(f"{c:7.1f} " + " ".join(f"{r.errors[t]:9.3g}" for t in ("ct", "dq-const", "dq-exact"))
              + f" {r.noise:9.2g}  {r.note[:60]}")

# %% [markdown]
# ## Appendix E.3: test loss, optimal weight decay and batch size (ridge regression)
# L_test = mean (y − θ̂ᵀx)² + mean xᵀΣ_θx on a test set; Γ = γI in sgtune's scaling (γ/N per step).

# %%
theta_r = true_parameter(min(D, 20), seed=6)
n_r = 400 if SMOKE else 2000
train = contaminated_linear(11, theta_r, n_data=n_r, outlier_fraction=0.0)
test = contaminated_linear(12, theta_r, n_data=n_r, outlier_fraction=0.0)
path = ridge_test_loss_path(train, test.X, test.y, step=0.1, batch_size=32,
                            weight_decays=[0.0, 100.0, 300.0, 1000.0, 3000.0])
print(f"{'γ':>7} {'θ̂ only':>9} " + " ".join(f"{LABEL[t]:>9}" for t in path.losses))
for k, g in enumerate(path.grid):
    print(f"{g:7.0f} {path.bias[k]:9.4f} " + " ".join(f"{path.losses[t][k]:9.4f}" for t in path.losses))
print("optimal γ:", {LABEL[t]: path.argmin(t) for t in path.losses})
pb = ridge_test_loss_path(train, test.X, test.y, step=0.1, batch_sizes=[4, 8, 16, 32, 64])
print("optimal B:", {LABEL[t]: pb.argmin(t) for t in pb.losses})

# %% [markdown]
# **Reading E.3.** All three theories pick the same γ and B on these data: the stationary term
# mean xᵀΣx is a small addition to the test loss of θ̂, and CT underestimates it (as in Fig. E.3)
# without moving the argmin. The benchmark script checks the DQ+exact excess against SGD chains.

# %% [markdown]
# ## Closing note: the full-size run
#
# `python benchmarks/wang2026_tables.py --reps 20 --steps 200000` (20 repetitions of the data, 4 chains,
# 200 000 steps at B = 16, equal epochs at B = 500; all tables in `benchmarks/results/wang2026/`).
# Table 2, simulated data (D = 50, N = 5000, p = 0.01, b = 5, s = 5); MCSE after ±, 95 % interval over repetitions:
#
# | loss | B | method | exact err | empirical err ± MCSE [95 % CI] | floor (this run) | floor at paper's length | KS [95 % CI] |
# |---|---|---|---|---|---|---|---|
# | log | 16 | Posterior | 0.986 | – | – | – | 0.455 [0.427, 0.483] |
# | log | 16 | CT | 0.013 | 0.102 ± 0.002 [0.100, 0.104] | 0.100 | 0.682 | 0.125 [0.102, 0.149] |
# | log | 16 | DQ+const | 0.010 | 0.100 ± 0.002 [0.099, 0.102] | 0.100 | 0.682 | 0.126 [0.102, 0.151] |
# | log | 16 | LR+WS | 0.704 | 0.706 ± 0.002 [0.552, 0.860] | 0.103 | 0.682 | 0.124 [0.102, 0.147] |
# | log | 16 | DQ+exact | 0 (≤1e-14) | 0.099 ± 0.002 [0.098, 0.100] | 0.099 | 0.682 | 0.126 [0.102, 0.150] |
# | log | 500 | CT | 0.123 | 0.162 ± 0.003 [0.160, 0.164] | 0.106 | 0.685 | 0.122 [0.100, 0.144] |
# | log | 500 | DQ+const | 0.010 | 0.101 ± 0.002 [0.099, 0.102] | 0.100 | 0.685 | 0.127 [0.104, 0.151] |
# | log | 500 | LR+WS | 0.704 | 0.716 ± 0.002 [0.550, 0.881] | 0.104 | 0.685 | 0.124 [0.101, 0.147] |
# | log | 500 | DQ+exact | 0 (≤1e-14) | 0.100 ± 0.002 [0.099, 0.102] | 0.100 | 0.685 | 0.128 [0.105, 0.151] |
# | β | 16 | Posterior (gen.) | 5.240 | – | – | – | 0.256 [0.246, 0.266] |
# | β | 16 | Sandwich Gauss | 0 | – | – | – | 0.128 [0.110, 0.145] |
# | β | 16 | CT | 0.020 | 0.103 ± 0.002 [0.102, 0.105] | 0.104 | 0.698 | 0.128 [0.112, 0.144] |
# | β | 16 | DQ+const | 0.017 | 0.102 ± 0.002 [0.101, 0.104] | 0.104 | 0.698 | 0.128 [0.111, 0.145] |
# | β | 16 | DQ+exact | 0 | 0.102 ± 0.002 [0.100, 0.103] | 0.103 | 0.698 | 0.128 [0.113, 0.144] |
# | β | 500 | CT | 0.132 | 0.163 ± 0.003 [0.161, 0.164] | 0.110 | 0.701 | 0.128 [0.112, 0.144] |
# | β | 500 | DQ+const | 0.017 | 0.103 ± 0.002 [0.102, 0.105] | 0.104 | 0.701 | 0.129 [0.112, 0.147] |
# | β | 500 | DQ+exact | 0 | 0.105 ± 0.002 [0.104, 0.105] | 0.103 | 0.701 | 0.125 [0.107, 0.143] |
#
# A perfectly calibrated method's KS over D = 50 PIT values averages 0.120 (95 % range 0.065–0.205).
#
# **Which of the paper's claims hold.**
# - *DQ+exact reproduces S\* at every B* — **holds**: exact error ≤ 1e-14 for linear regression at every B
#   (Fig. 1, 16 ≤ B ≤ 2500), and the empirical error equals the noise floor (0.099 vs 0.099, 0.100 vs 0.100).
# - *CT degrades as B grows* — **holds**: exact 0.013 (B=16) → 0.123 (B=500) → 1.04 (B=2500); at B=500 the
#   chains confirm it (0.162 ± 0.003 vs floor 0.106). At B=16 CT is as good as DQ+exact (0.013, invisible
#   under a 0.10 floor).
# - *LR+WS fails on misspecified data* — **holds** for the covariance (exact 0.70, empirical 0.71) but
#   **not** for calibration here: KS 0.124 at both B, the same as DQ+exact and as perfect calibration.
# - *The printed covariance errors (0.64–0.75 for CT/DQ+exact/β-loss at B=16, 0.67–0.75 for DQ+exact at
#   ⌊0.1N⌋)* — **cannot be separated from Monte Carlo noise**: an exact Λ scores 0.68–0.70 at the paper's run
#   length. The paper's CT 0.975 at ⌊0.1N⌋ is **not reproduced**: with CT's exact error 0.12 and a 0.69
#   floor one expects ≈ 0.70.
# - *Calibration errors ≈ 0.17–0.20 rank the methods* — **cannot be separated from noise**: every tuned
#   method sits at the KS of perfect calibration (0.12 per repetition); only the posterior is miscalibrated
#   (0.455 log loss, 0.256 β-loss).
# - *Table 4: DQ+const is severely miscalibrated* — **does not hold** with DQ+const's noise taken as the
#   gradient covariance at θ̂ (exact 0.027, empirical 0.106 vs floor 0.104, KS 0.112); the paper's KS of
#   1.376 is impossible for a KS distance (≤ 1). CT degrades with B (exact 0.030 → 0.142; randhie 0.002 →
#   0.113) — **holds**.
# - *Table 3 (real data)*: on diabetes, log loss, **holds**: DQ+exact's empirical error 0.006 equals the floor
#   0.007; CT 0.10/0.18, LR+WS 0.08, DQ+const 0.06 (empirical = exact). The β-loss is where the proxy is not
#   exact: DQ+exact's chains show 0.055 (floor 0.007) and DQ+const's 0.029–0.035, so DQ+exact is **not** best
#   for the β-loss on diabetes. LR+WS does not diverge on diabetes (the paper's 9×10⁸ is Boston-specific).
# - *Table E.1: DQ+exact 3–10× more accurate* — **holds** on simulated Poisson at 0.3 and 0.5 λ_max (5.8e-5 vs
#   CT 7.8e-4; 2.3e-4 vs 3e-3; MC noise 5e-5 and 8e-5); at 0.1 λ_max all theories are within 3× the noise. On
#   randhie the true chain diverges from 0.3 λ_max although the proxy is stable: no theory applies there.
# - *App. E.3*: DQ+exact's excess test loss (mean xᵀΣx) matches SGD chains within 2 % in the benchmark run
#   (0.765 vs 0.763 at γ = 0; the largest gap, 0.491 vs 0.498 at γ = 3000, shrinks to 0.4906 vs 0.4898 ± 0.0002
#   and 0.4907 ± 0.0003 with 8 chains × 200 000 steps); CT is 8–31 % low and LR+WS ≈ 6 % low, but all three
#   pick the same optimal γ (100) and B (the largest on the grid), so the optimum is **not** sensitive to the
#   theory on these data.
