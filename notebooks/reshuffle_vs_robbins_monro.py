# %% [markdown]
# # Random reshuffling vs Robbins–Monro for SGLD (Shaw & Whalley, 2025)
#
# **Claim.** On the Gaussian model problem U(θ) = Σ_i (θ − x_i)²/(2σ²), the
# gradient-noise part of SGLD's variance error is O(h) with Robbins–Monro (RM)
# batching but O(h²) with random reshuffling (RR), averaged over the epoch; on
# logistic regression RR's posterior-mean error decays at a higher order too.
#
# What sgtune adds: the exact noise ratio is v = R − 1 (not R),
# the epoch average averages (1 − (1−h)^k)² over k, and for h > 1 RR can be
# *worse* than RM.  Part 1 is the exact toy, checked against the raw chains;
# part 2 the logistic-regression experiment with the sampler core's RR / RM
# batching and a MALA reference.
#
# Run: `python notebooks/reshuffle_vs_robbins_monro.py` (SGTUNE_SMOKE=1: tiny sizes).

# %%
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from sgtune.core.config import Dynamics, RunSpec
from sgtune.sampler.driver import run_chains
from sgtune.sampler.reshuffle import run_reshuffle_chains
from sgtune.theory.reshuffle import reshuffle_bias

SMOKE = os.environ.get("SGTUNE_SMOKE") == "1"
# figures go next to the notebook (smoke runs: a temporary folder, so tests leave no files behind)
OUT = (os.path.join(tempfile.gettempdir(), "sgtune_smoke_figures") if SMOKE
       else os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures"))
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # plots are optional
    plt = None

rng = np.random.default_rng(2024)

# %% [markdown]
# ## 1. The toy: ε(h) exact vs series, per epoch position and averaged
# N = 64 standard-normal data, B = 8 (R = 8), σ² = s² (the paper's setting).

# %%
N, B = 64, 8
x = rng.normal(size=N)
hs = np.geomspace(1e-3, 1.9, 12 if SMOKE else 60)
res = [reshuffle_bias(x, B, h) for h in hs]
R = res[0].n_batches
eps = {name: np.array([getattr(r, f"{name}_rel_err") for r in res])
       for name in ("ula", "rm", "rm_with_replacement", "rr_average")}
eps_k = np.array([r.rr_by_position_rel_err for r in res])
lead = res[0].leading_coefficients
series = {name: lead[name][0] * hs + lead[name][1] * hs ** 2
          for name in ("ula", "rm", "rm_with_replacement", "rr_average")}
# gradient-noise part: ε − ε_ULA
noise_rm = eps["rm"] - eps["ula"]
noise_rr = eps["rr_average"] - eps["ula"]
small = hs < 0.01
slope_rm = np.polyfit(np.log(hs[small]), np.log(noise_rm[small]), 1)[0]
slope_rr = np.polyfit(np.log(hs[small]), np.log(noise_rr[small]), 1)[0]
print(f"R = {R}: log-log slope of the gradient-noise error for h < 0.01: RM {slope_rm:.3f}, RR average {slope_rr:.3f}")
print(f"leading coefficients: RM {lead['rm']}, RR average {lead['rr_average']}  (ε = c1 h + c2 h²)")
cross = hs[np.argmax(eps["rr_average"] > eps["rm"])] if np.any(eps["rr_average"] > eps["rm"]) else None
print(f"RR average worse than RM from h ≈ {cross:.3g}" if cross else "RR average better than RM on the whole grid")

# published route (v = R, average inside the square), for comparison
a = 1 - hs
m1 = np.array([np.mean(ai ** np.arange(R)) for ai in a])
m2 = np.array([np.mean(ai ** (2 * np.arange(R))) for ai in a])
Y = a ** R
eps_pub = hs / (2 - hs) + (R / (R - 1)) * (hs * R / (2 - hs) - m2 * (1 - Y) / (1 + Y) - (1 - m1) ** 2)
print(f"at h = {hs[len(hs) // 3]:.3g}: exact RR average {eps['rr_average'][len(hs) // 3]:.4g}, "
      f"published {eps_pub[len(hs) // 3]:.4g}")

# %% [markdown]
# ### Monte Carlo of the raw chains (independent shuffle per chain and epoch)
# z = (estimate − formula)/standard error, the standard error from the
# across-chain spread of per-chain averages.

# %%
h_mc = [0.05, 0.3, 1.5] if SMOKE else [0.02, 0.05, 0.1, 0.3, 1.0, 1.5]
chains, epochs = (32, 50) if SMOKE else (400, 2000)
mc_rows = []
zs = []
for h in h_mc:
    th = reshuffle_bias(x, B, h)
    burn = int(np.ceil(40 / (h * R))) + 1
    rr = run_reshuffle_chains(x, B, h, scheme="rr", n_chains=chains, n_epochs=epochs, burn_in_epochs=burn, seed=1)
    rm = run_reshuffle_chains(x, B, h, scheme="rm", n_chains=chains, n_epochs=epochs, burn_in_epochs=burn, seed=2)
    c = th.target_var
    z_pos = (rr.var - th.rr_by_position_var) / rr.var_se
    z_avg = (rr.average_var - th.rr_average_var) / rr.average_var_se
    z_rm = (rm.var - th.rm_var) / rm.var_se
    zs += [*z_pos, z_avg, *z_rm]
    mc_rows.append((h, rr.average_var / c - 1, rr.average_var_se / c, rm.var.mean() / c - 1,
                    rm.var_se.mean() / c))
    print(f"h = {h:<5} RR avg ε: MC {rr.average_var / c - 1:.5f} ± {rr.average_var_se / c:.5f} "
          f"vs exact {th.rr_average_rel_err:.5f} (z = {z_avg:+.2f}); RM ε: MC {rm.var.mean() / c - 1:.5f} "
          f"vs exact {th.rm_rel_err:.5f}; max |z| over positions {np.max(np.abs(z_pos)):.2f}")
print(f"max |z| over {len(zs)} simulated quantities: {np.max(np.abs(zs)):.2f}")

# %%
if plt is not None:
    os.makedirs(OUT, exist_ok=True)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for name, col in [("ula", "k"), ("rm", "b"), ("rr_average", "r")]:
        ax[0].loglog(hs, eps[name], col + "-", label=f"{name} exact")
        ax[0].loglog(hs, series[name], col + ":", label=f"{name} O(h³) series")
    ax[0].loglog(hs, eps_pub, "m--", label="RR average, published route")
    mc = np.array(mc_rows)
    ax[0].errorbar(mc[:, 0], mc[:, 1], yerr=2 * mc[:, 2], fmt="ro", ms=4, label="RR MC ±2se")
    ax[0].errorbar(mc[:, 0], mc[:, 3], yerr=2 * mc[:, 4], fmt="bs", ms=4, label="RM MC ±2se")
    ax[0].set_xlabel("h")
    ax[0].set_ylabel("relative variance error ε")
    ax[0].legend(fontsize=7)
    for j in (0, len(hs) // 2, len(hs) - 5):
        ax[1].plot(np.arange(R), eps_k[j], "o-", label=f"h = {hs[j]:.3g}")
    ax[1].set_xlabel("epoch position k")
    ax[1].set_ylabel("ε_k")
    ax[1].set_yscale("log")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "reshuffle_toy.png"), dpi=120)
    plt.close(fig)

# %% [markdown]
# ## 2. Logistic regression: posterior-mean error vs step (sampler core, RR vs RM vs ULA)
# Simulated data (N = 1024, d = 4), Gaussian prior Γ = I. SGLD with the mean-loss
# convention of the sampler core: θ' = θ − λ G(θ) + sqrt(2λ/N) ξ (β = N), so the
# stationary law approximates the posterior ∝ exp(−N L(θ)).
# Reference posterior mean: MALA (numpy, many chains), whose only error is Monte Carlo.

# %%
n_lr, d_lr = (256, 3) if SMOKE else (1024, 4)
X = rng.normal(size=(n_lr, d_lr))
theta_true = np.linspace(1.0, -0.5, d_lr)
y = (rng.random(n_lr) < 1 / (1 + np.exp(-X @ theta_true))).astype(float)
prior = 1.0


def log_post_and_grad(th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log p(θ|data) and its gradient for a batch of chains th (C, d)."""
    eta = th @ X.T                                  # (C, N)
    logp = (y * eta - np.logaddexp(0, eta)).sum(1) - 0.5 * prior * (th * th).sum(1)
    grad = (y - 1 / (1 + np.exp(-eta))) @ X - prior * th
    return logp, grad


def mala(n_chains: int, n_steps: int, eps: float, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-chain posterior means after a 20% burn-in, their standard error, and the acceptance rate."""
    g = np.random.default_rng(seed)
    th = g.normal(scale=0.1, size=(n_chains, d_lr))
    lp, gr = log_post_and_grad(th)
    burn = n_steps // 5
    acc = 0
    sums = np.zeros((n_chains, d_lr))
    for t in range(n_steps):
        prop = th + eps * gr + np.sqrt(2 * eps) * g.normal(size=th.shape)
        lp2, gr2 = log_post_and_grad(prop)
        fwd = -((prop - th - eps * gr) ** 2).sum(1) / (4 * eps)
        bwd = -((th - prop - eps * gr2) ** 2).sum(1) / (4 * eps)
        ok = np.log(g.random(n_chains)) < lp2 - lp + bwd - fwd
        th[ok], lp[ok], gr[ok] = prop[ok], lp2[ok], gr2[ok]
        if t >= burn:
            sums += th
            acc += ok.sum()
    means = sums / (n_steps - burn)
    return means.mean(0), means.std(0, ddof=1) / np.sqrt(n_chains), acc / (n_chains * (n_steps - burn))


t0 = time.time()
# step ~ 1.5 / (N · λ_max of the per-datum Hessian) gives acceptance ≈ 0.6–0.8 here
lam_max = np.linalg.eigvalsh(0.25 * X.T @ X / n_lr)[-1]
eps_mala = 0.9 / (n_lr * lam_max)
ref_mean, ref_se, acc = mala(16 if SMOKE else 64, 400 if SMOKE else 20000, eps_mala, seed=7)
print(f"MALA reference: mean {np.round(ref_mean, 4)} ± {np.round(ref_se, 5)}, acceptance {acc:.2f}, "
      f"{time.time() - t0:.1f} s")

# %%
B_lr = 32
steps_h = [0.4, 0.2] if SMOKE else [0.8, 0.4, 0.2, 0.1, 0.05]   # h_eff = λ · λ_max(H)
lambdas = [h / lam_max for h in steps_h]
n_steps = 2000 if SMOKE else 300_000
n_chains = 4 if SMOKE else 16
rows = []
for name, batching, bsz in [("ULA", "replacement", n_lr), ("SGLD-RM", "without-replacement", B_lr),
                            ("SGLD-RR", "reshuffle", B_lr)]:
    for h, lam in zip(steps_h, lambdas):
        t0 = time.time()
        r = run_chains("logistic", (X, y), Dynamics(lam, bsz, inv_temperature=n_lr, batching=batching),
                       RunSpec(n_steps, n_chains=n_chains, burn_in=n_steps // 10, seed=11), prior_precision=prior)
        diff = r.chain_means.mean(0) - ref_mean
        se = np.sqrt(r.chain_means.std(0, ddof=1) ** 2 / n_chains + ref_se ** 2)
        err = float(np.linalg.norm(diff))
        err_se = float(np.sqrt(np.sum((diff / max(err, 1e-300)) ** 2 * se ** 2)))  # delta method
        rows.append((name, h, err, err_se))
        print(f"{name:8s} h_eff = {h:<5} |E[θ] − ref| = {err:.3e} ± {err_se:.1e}  ({time.time() - t0:.1f} s)")

# %%
slopes = {}
for name in ("ULA", "SGLD-RM", "SGLD-RR"):
    pts = np.array([(h, e, s) for (n_, h, e, s) in rows if n_ == name])
    good = pts[:, 1] > 3 * pts[:, 2]       # fit only errors resolved above Monte Carlo noise
    if good.sum() >= 2:
        slopes[name] = np.polyfit(np.log(pts[good, 0]), np.log(pts[good, 1]), 1)[0]
print("log-log slopes of the posterior-mean error vs h:", {k: round(v, 2) for k, v in slopes.items()})

if plt is not None:
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, fmt in [("ULA", "ko-"), ("SGLD-RM", "bs-"), ("SGLD-RR", "r^-")]:
        pts = np.array([(h, e, s) for (n_, h, e, s) in rows if n_ == name])
        ax.errorbar(pts[:, 0], pts[:, 1], yerr=2 * pts[:, 2], fmt=fmt, label=name, ms=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("h_eff = λ·λ_max(H)")
    ax.set_ylabel("‖posterior-mean error‖ (±2se)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "reshuffle_logistic.png"), dpi=120)
    plt.close(fig)
