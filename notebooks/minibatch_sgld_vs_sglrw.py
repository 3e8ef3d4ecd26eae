# %% [markdown]
# # SGLD vs SGLRW vs clipped SGLD under minibatch noise (Mensch et al., 2025)
#
# Reproduces, with numpy vectorised over particles:
#
# 1. the Bayesian linear regression experiment of Mensch et al. (2025) §5.2 / Table 1
#    (N = 1000, d = 20, σ² = 1.5, τ = 0.01, steps δ(1+t)^−0.55, KL between the exact
#    posterior and a Gaussian fitted to the particles), for B ∈ {8, 32, 128} and
#    δ ∈ {1e-3, 1e-4}, with the Monte Carlo floor of the KL for that many particles;
# 2. the exact minibatch error terms E‖M‖²_F of Theorem 4.2 / Lemma 4.3 for that
#    problem (sgtune.theory.minibatch), their diagonal share vs 3/(D+2), and its
#    dimension dependence;
# 3. the heavy-tailed illustration (§4.2, Figure 2): α-stable (α = 1.5) gradient noise
#    on a 1-D bimodal target.
#
# The last cell states which of the paper's claims the numbers support.
# Run: `python notebooks/minibatch_sgld_vs_sglrw.py` (full size, ~15–30 min on 2 cores);
# `SGTUNE_SMOKE=1` runs a tiny version in seconds. Set `SGTUNE_NOTEBOOK_OUT=DIR` to
# save results (JSON) and figures (if matplotlib is installed).

# %%
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
from scipy.special import digamma

from sgtune.io.data import make_dataset
from sgtune.models import get_model
from sgtune.theory.minibatch import posterior_minibatch_error

SMOKE = os.environ.get("SGTUNE_SMOKE") == "1"
OUT = Path(os.environ["SGTUNE_NOTEBOOK_OUT"]) if os.environ.get("SGTUNE_NOTEBOOK_OUT") else None
RESULTS: dict = {"smoke": SMOKE}

N, DIM, SIGMA2, TAU = 1000, 20, 1.5, 1e-2
PARTICLES = 40 if SMOKE else 1000       # the paper uses 2000; the KL floor below is for this count
STEPS = 100 if SMOKE else 10_000
BATCHES = (8, 32, 128)
DELTAS = (1e-3, 1e-4)
SAMPLERS = ("sgld", "sglrw", "clipped-sgld")

# %% [markdown]
# ## 1. Data, exact posterior (eq. 20) and the KL floor
# X ~ N(0, I) (the paper does not say how X is drawn), θ* ~ N(0, I), y = Xθ* + ε.
# Σ⁻¹ = XᵀX/σ² + τI, μ = ΣXᵀy/σ².
#
# KL floor: even exact posterior draws give a positive KL because μ̂ and Σ̂ are estimated
# from n particles. For KL(N(μ̂, Σ̂) ‖ N(μ, Σ)) with the unbiased Σ̂ (Wishart with n−1
# degrees of freedom) the expectation is exact:
# E KL = ½[d/n − Σ_{k=1}^d ψ((n−k)/2) − d log(2/(n−1))].
# For the reverse direction KL(N(μ, Σ) ‖ N(μ̂, Σ̂)), E Σ̂⁻¹ = (n−1)/(n−d−2) Σ⁻¹ gives
# E KL = ½[(n−1)/(n−d−2)·d(1 + 1/n) − d + Σ_k ψ((n−k)/2) + d log(2/(n−1))].

# %%
rng = np.random.default_rng(2025)
X = rng.standard_normal((N, DIM))
theta_star = rng.standard_normal(DIM)
y = X @ theta_star + math.sqrt(SIGMA2) * rng.standard_normal(N)
post_prec = X.T @ X / SIGMA2 + TAU * np.eye(DIM)
post_cov = np.linalg.inv(post_prec)
post_mean = post_cov @ X.T @ y / SIGMA2
_, logdet_post = np.linalg.slogdet(post_cov)


def kl_gauss(m0, S0, m1, S1):
    """KL(N(m0, S0) ‖ N(m1, S1))."""
    d = len(m0)
    S1inv = np.linalg.inv(S1)
    diff = m1 - m0
    return 0.5 * (np.trace(S1inv @ S0) + diff @ S1inv @ diff - d
                  + np.linalg.slogdet(S1)[1] - np.linalg.slogdet(S0)[1])


def kl_of_particles(theta):
    """(KL(fit ‖ posterior), KL(posterior ‖ fit)); inf if any particle is non-finite."""
    if not np.all(np.isfinite(theta)):
        return math.inf, math.inf
    m, S = theta.mean(0), np.cov(theta.T)
    if np.linalg.eigvalsh(S)[0] <= 0:
        return math.inf, math.inf
    return float(kl_gauss(m, S, post_mean, post_cov)), float(kl_gauss(post_mean, post_cov, m, S))


def kl_floor_exact(n, d):
    psi = sum(digamma((n - k) / 2) for k in range(1, d + 1)) + d * math.log(2 / (n - 1))
    fwd = 0.5 * (d / n - psi)
    rev = 0.5 * ((n - 1) / (n - d - 2) * d * (1 + 1 / n) - d + psi)
    return fwd, rev


L_post = np.linalg.cholesky(post_cov)
reps = 5 if SMOKE else 200
sim = np.array([kl_of_particles(post_mean + rng.standard_normal((PARTICLES, DIM)) @ L_post.T)
                for _ in range(reps)])
floor_fwd, floor_rev = kl_floor_exact(PARTICLES, DIM)
floor_2000 = kl_floor_exact(2000, DIM)
print(f"KL floor for {PARTICLES} exact draws: KL(fit‖post) = {floor_fwd:.4f} exact, "
      f"{sim[:, 0].mean():.4f} ± {sim[:, 0].std(ddof=1) / math.sqrt(reps):.4f} simulated; "
      f"KL(post‖fit) = {floor_rev:.4f} exact, {sim[:, 1].mean():.4f} ± "
      f"{sim[:, 1].std(ddof=1) / math.sqrt(reps):.4f} simulated")
print(f"for the paper's 2000 particles: {floor_2000[0]:.4f} (fit‖post), {floor_2000[1]:.4f} (post‖fit); "
      "the paper's 'Monte Carlo reference KL' is 0.055201")
RESULTS["kl_floor"] = {"particles": PARTICLES, "fit_post_exact": floor_fwd, "post_fit_exact": floor_rev,
                       "fit_post_simulated": float(sim[:, 0].mean()), "post_fit_simulated": float(sim[:, 1].mean()),
                       "paper_particles_2000": list(floor_2000)}

# %% [markdown]
# ## 2. The three samplers, vectorised over particles
# Each particle draws its own minibatch (B indices with replacement) at every step.
# U(θ) = τ|θ|²/2 + Σ_i (y_i − x_iᵀθ)²/(2σ²), ∇̂U = τθ + (N/B) Σ_{i∈𝔅} x_i(x_iᵀθ − y_i)/σ².
# SGLD (eq. 7); SGLRW (eqs. 11–12) with move probabilities clipped to [0, 1] (the
# fraction of clipped coordinate moves is recorded); clipped SGLD (eq. 18), R = √(2δ_t).
# Particles start from N(0, I).


# %%
def run_sampler(sampler, batch, delta0, particles, steps, seed):
    g = np.random.default_rng(seed)
    theta = g.standard_normal((particles, DIM))
    clipped = 0
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(steps):
            dt = delta0 * (1 + t) ** -0.55
            idx = g.integers(0, N, size=(particles, batch))
            Xb = X[idx]
            r = np.matmul(Xb, theta[:, :, None])[..., 0] - y[idx]
            grad = TAU * theta + (N / batch / SIGMA2) * np.matmul(r[:, None, :], Xb)[:, 0, :]
            if sampler == "sgld":
                theta = theta - dt * grad + math.sqrt(2 * dt) * g.standard_normal(theta.shape)
            elif sampler == "clipped-sgld":
                R = math.sqrt(2 * dt)
                theta = theta - np.clip(dt * grad, -R, R) + R * g.standard_normal(theta.shape)
            else:
                z = math.sqrt(dt / 2) * grad
                clipped += int(np.count_nonzero(np.abs(z) > 1))
                p_plus = np.clip(0.5 - 0.5 * z, 0.0, 1.0)
                theta = theta + math.sqrt(2 * dt) * np.where(g.random(theta.shape) < p_plus, 1.0, -1.0)
            if not np.all(np.isfinite(theta)):
                return theta, clipped / ((t + 1) * particles * DIM), t
    return theta, clipped / (steps * particles * DIM), None


table = []
t_start = time.perf_counter()
for bi, batch in enumerate(BATCHES):
    for di, delta0 in enumerate(DELTAS):
        row = {"B": batch, "delta": delta0}
        for si, sampler in enumerate(SAMPLERS):
            theta, clip_frac, diverged_at = run_sampler(sampler, batch, delta0, PARTICLES, STEPS,
                                                        seed=1000 * bi + 100 * di + si)
            kf, kr = kl_of_particles(theta)
            row[sampler] = {"kl_fit_post": kf, "kl_post_fit": kr, "diverged_at": diverged_at}
            if sampler == "sglrw":
                row[sampler]["clipped_fraction"] = clip_frac
        table.append(row)
        print(f"B={batch:4d} δ={delta0:.0e}  " + "  ".join(
            f"{s}: KL={row[s]['kl_fit_post']:.3f}" for s in SAMPLERS)
            + f"  (SGLRW clipped {row['sglrw']['clipped_fraction']:.1%} of moves)  "
              f"[{time.perf_counter() - t_start:.0f} s]", flush=True)
RESULTS["table"] = table

# %% [markdown]
# Paper's Table 1 for these rows (KL, SGLD / SGLRW / clipped SGLD, 2000 particles):
#
# | B | δ | SGLD | SGLRW | Clipped |
# |---|---|---|---|---|
# | 8 | 1e-3 | 19.889 | 6.060 | 18.184 |
# | 8 | 1e-4 | 0.483 | 0.202 | 0.777 |
# | 32 | 1e-3 | 2.441 | 0.729 | 3.540 |
# | 32 | 1e-4 | 0.087 | 0.064 | 0.091 |
# | 128 | 1e-3 | 0.315 | 0.074 | 0.351 |
# | 128 | 1e-4 | 0.054 | 0.054 | 0.061 |

# %%
PAPER = {(8, 1e-3): (19.889, 6.060, 18.184), (8, 1e-4): (0.483, 0.202, 0.777),
         (32, 1e-3): (2.441, 0.729, 3.540), (32, 1e-4): (0.087, 0.064, 0.091),
         (128, 1e-3): (0.315, 0.074, 0.351), (128, 1e-4): (0.054, 0.054, 0.061)}
print(f"{'B':>4} {'δ':>6} | {'SGLD':>8} {'SGLRW':>8} {'clipped':>8} | paper: SGLD SGLRW clipped | floor {floor_fwd:.3f}")
for row in table:
    p = PAPER[(row["B"], row["delta"])]
    print(f"{row['B']:>4} {row['delta']:>6.0e} | " + " ".join(f"{row[s]['kl_fit_post']:8.3f}" for s in SAMPLERS)
          + f" | {p[0]:6.3f} {p[1]:6.3f} {p[2]:6.3f}")

# %% [markdown]
# ## 3. Exact minibatch error terms for this problem
# E_cov of Theorem 4.2 averages E_𝔅‖M_n‖²_F over the chain; here over exact posterior
# draws (sgtune.theory.minibatch.posterior_minibatch_error). The diagonal share is what
# SGLRW removes (Lemma 4.3).

# %%
model = get_model("linear", noise_variance=SIGMA2)
ds = make_dataset(X, y)
draws = post_mean + rng.standard_normal((5 if SMOKE else 200, DIM)) @ L_post.T
exact_terms = {}
for batch in BATCHES:
    pe = posterior_minibatch_error(model, ds, draws, batch, prior_precision=TAU, step_size=1e-4)
    exact_terms[batch] = {"frob2_sgld": pe.frob2_sgld, "frob2_sglrw": pe.frob2_sglrw,
                          "diagonal_share": pe.diagonal_share, "ratio": pe.ratio}
    print(f"B={batch:4d}: E‖M_SGLD‖² = {pe.frob2_sgld:.4g}, E‖M_SGLRW‖² = {pe.frob2_sglrw:.4g}, "
          f"diagonal share = {pe.diagonal_share:.4f} (3/(D+2) = {3 / (DIM + 2):.4f})")
RESULTS["exact_terms"] = exact_terms

# dimension dependence: same design, d varies, B = 32, at posterior draws
dims = (2, 5) if SMOKE else (1, 2, 5, 10, 20, 50, 100)
dim_share = []
for d in dims:
    g = np.random.default_rng(d)
    Xd = g.standard_normal((N, d))
    yd = Xd @ g.standard_normal(d) + math.sqrt(SIGMA2) * g.standard_normal(N)
    prec = Xd.T @ Xd / SIGMA2 + TAU * np.eye(d)
    cov = np.linalg.inv(prec)
    mean = cov @ Xd.T @ yd / SIGMA2
    th = mean + g.standard_normal((3 if SMOKE else 50, d)) @ np.linalg.cholesky(cov).T
    pe = posterior_minibatch_error(model, make_dataset(Xd, yd), th, 32, prior_precision=TAU)
    dim_share.append((d, pe.diagonal_share, 3 / (d + 2)))
    print(f"d={d:4d}: posterior-averaged diagonal share {pe.diagonal_share:.4f}  vs 3/(d+2) = {3 / (d + 2):.4f}")
RESULTS["dimension_share"] = dim_share

# %% [markdown]
# ## 4. Heavy-tailed gradient noise on a 1-D bimodal target (§4.2, Figure 2)
# Target p(θ) ∝ ½N(−2, 0.5²) + ½N(2, 0.5²); gradient ∇U(θ) + c·ε with ε symmetric
# α-stable (α = 1.5, Chambers–Mallows–Stuck), c ∈ {0, 1, 10, 100}; fixed δ = 1e-2,
# 4000 chains × 4000 steps from N(0, 1). Metric: 1-Wasserstein distance of the final
# states to the target (from quantiles), and the fraction of chains that left [−50, 50].


# %%
def stable_noise(g, alpha, size):
    """Symmetric α-stable draws (Chambers–Mallows–Stuck, β = 0, unit scale)."""
    v = g.uniform(-math.pi / 2, math.pi / 2, size)
    w = g.exponential(1.0, size)
    return (np.sin(alpha * v) / np.cos(v) ** (1 / alpha)) * (np.cos(v - alpha * v) / w) ** ((1 - alpha) / alpha)


def grad_bimodal(th):
    m, s2 = 2.0, 0.25
    a = np.exp(-(th - m) ** 2 / (2 * s2))
    b = np.exp(-(th + m) ** 2 / (2 * s2))
    return ((th - m) * a + (th + m) * b) / (s2 * (a + b) + 1e-300)


def target_quantiles(q):
    from scipy.optimize import brentq
    from scipy.stats import norm as _n
    cdf = lambda x: 0.5 * _n.cdf(x, -2, 0.5) + 0.5 * _n.cdf(x, 2, 0.5)  # noqa: E731
    return np.array([brentq(lambda x: cdf(x) - qi, -10, 10) for qi in q])


chains, hsteps, hdelta = (200, 200, 1e-2) if SMOKE else (4000, 4000, 1e-2)
qs = (np.arange(chains) + 0.5) / chains
tq = target_quantiles(qs)
heavy = []
for scale in (0.0, 1.0, 10.0, 100.0):
    row = {"scale": scale}
    for sampler in SAMPLERS:
        g = np.random.default_rng(7)
        th = g.standard_normal(chains)
        R = math.sqrt(2 * hdelta)
        with np.errstate(over="ignore", invalid="ignore"):
            for _ in range(hsteps):
                gh = grad_bimodal(th) + scale * stable_noise(g, 1.5, chains)
                if sampler == "sgld":
                    th = th - hdelta * gh + R * g.standard_normal(chains)
                elif sampler == "clipped-sgld":
                    th = th - np.clip(hdelta * gh, -R, R) + R * g.standard_normal(chains)
                else:
                    p = np.clip(0.5 - 0.5 * math.sqrt(hdelta / 2) * gh, 0, 1)
                    th = th + R * np.where(g.random(chains) < p, 1.0, -1.0)
                th = np.where(np.isfinite(th), th, np.sign(th) * 1e6)
        escaped = float(np.mean(np.abs(th) > 50))
        w1 = float(np.mean(np.abs(np.sort(np.clip(th, -1e6, 1e6)) - tq)))
        row[sampler] = {"w1": w1, "escaped": escaped}
    heavy.append(row)
    print(f"scale {scale:6.1f}: " + "  ".join(
        f"{s}: W1={row[s]['w1']:.3g} (escaped {row[s]['escaped']:.1%})" for s in SAMPLERS))
RESULTS["heavy_tailed"] = heavy

# %% [markdown]
# ## 5. Which of the paper's claims does this reproduction support?

# %%
def _kl(b, d, s):
    return next(r for r in table if r["B"] == b and r["delta"] == d)[s]["kl_fit_post"]


claims = []
# Monte Carlo noise of one KL value: the SD of the KL of exact draws (section 1); a difference
# counts only if it exceeds 2·√2·SD (two independent runs, ~2σ)
KL_SD = float(sim[:, 0].std(ddof=1))
MARGIN = 2 * math.sqrt(2) * KL_SD
print(f"KL Monte Carlo SD for {PARTICLES} particles ≈ {KL_SD:.4f}; differences below {MARGIN:.4f} are noise")
c1 = all(_kl(b, 1e-3, "sglrw") < _kl(b, 1e-3, "sgld") - MARGIN for b in BATCHES)
claims.append(("SGLRW has lower KL than SGLD at δ = 1e-3 for every B, beyond MC noise (Table 1, effect i)", c1,
               ", ".join(f"B={b}: {_kl(b, 1e-3, 'sglrw'):.3f} vs {_kl(b, 1e-3, 'sgld'):.3f}" for b in BATCHES)))
c2 = all(_kl(b, 1e-3, "sglrw") < _kl(b, 1e-3, "clipped-sgld") - MARGIN for b in BATCHES)
claims.append(("SGLRW beats clipped SGLD at δ = 1e-3 for every B, beyond MC noise", c2,
               ", ".join(f"B={b}: {_kl(b, 1e-3, 'sglrw'):.3f} vs {_kl(b, 1e-3, 'clipped-sgld'):.3f}"
                         for b in BATCHES)))
c_mag = all(abs(math.log(max(_kl(b, d, s), 1e-9) / PAPER[(b, d)][i])) < math.log(2)
            for (b, d) in PAPER for i, s in enumerate(SAMPLERS))
claims.append(("Table 1's KL magnitudes are reproduced within a factor 2 (floor differs: "
               f"{PARTICLES} vs 2000 particles)", c_mag,
               f"B=8, δ=1e-3: {_kl(8, 1e-3, 'sgld'):.3f}/{_kl(8, 1e-3, 'sglrw'):.3f}/{_kl(8, 1e-3, 'clipped-sgld'):.3f}"
               " vs paper 19.889/6.060/18.184"))
c3 = _kl(32, 1e-3, "sglrw") <= _kl(128, 1e-3, "sgld") * 1.5 if 32 in BATCHES else False
claims.append(("'SGLRW matches SGLD with about half the batch' (effect ii; here: SGLRW at B=32 vs SGLD at "
               "B=128, within 50 %)", c3,
               f"{_kl(32, 1e-3, 'sglrw'):.3f} vs {_kl(128, 1e-3, 'sgld'):.3f}"))
near_floor = all(_kl(128, 1e-4, s) < 3 * floor_fwd for s in SAMPLERS)
claims.append(("at B=128, δ=1e-4 all samplers are near the Monte Carlo floor", near_floor,
               ", ".join(f"{s}: {_kl(128, 1e-4, s):.3f}" for s in SAMPLERS) + f" (floor {floor_fwd:.3f})"))
shares = [s for _, s, _ in dim_share]
c5 = all(abs(s - t) / t < 0.25 for _, s, t in dim_share if _ >= 5)
claims.append(("diagonal share of E‖M_SGLD‖² ≈ 3/(D+2) (so Theorem 4.2's E_cov gain shrinks like 3/(D+2))", c5,
               ", ".join(f"d={d}: {s:.3f} vs {t:.3f}" for d, s, t in dim_share)))
ratio_cov = {b: exact_terms[b]["ratio"] for b in BATCHES}
claims.append(("E_cov^SGLRW ≤ E_cov^SGLD (Theorem 4.2)", all(r <= 1 for r in ratio_cov.values()),
               ", ".join(f"B={b}: E_cov ratio {r:.3f}" for b, r in ratio_cov.items())))
hv = heavy[-1]
c7 = hv["sgld"]["w1"] > 5 * max(hv["sglrw"]["w1"], hv["clipped-sgld"]["w1"])
claims.append(("under α-stable noise (scale 100) SGLD fails while SGLRW and clipped SGLD stay stable (Fig. 2)", c7,
               ", ".join(f"{s}: W1 {hv[s]['w1']:.3g}" for s in SAMPLERS)))
c8 = hv["sglrw"]["w1"] < hv["clipped-sgld"]["w1"]
claims.append(("SGLRW is closer to the target than clipped SGLD under heavy-tailed noise (A.1)", c8,
               f"{hv['sglrw']['w1']:.3g} vs {hv['clipped-sgld']['w1']:.3g}"))
print("\nClaim-by-claim verdict" + (" (SMOKE RUN: sizes too small for verdicts)" if SMOKE else ""))
for text, ok, numbers in claims:
    print(f"  [{'SUPPORTED' if ok else 'NOT SUPPORTED'}] {text}: {numbers}")
clip_rates = {(r["B"], r["delta"]): r["sglrw"]["clipped_fraction"] for r in table}
print("  Note: SGLRW's lattice probabilities clip in "
      + ", ".join(f"B={b},δ={d:.0e}: {c:.1%}" for (b, d), c in clip_rates.items())
      + " of coordinate moves; where they clip, SGLRW's drift IS clipped SGLD's drift "
        "and Lemma 4.3 / eq. (106) do not apply.")
RESULTS["claims"] = [{"claim": t, "supported": bool(o), "numbers": n} for t, o, n in claims]

# %%
if OUT is not None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "minibatch_sgld_vs_sglrw.json").write_text(json.dumps(RESULTS, indent=1, default=float))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    if plt is not None:
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        ds_, sh_, th_ = zip(*dim_share)
        ax[0].loglog(ds_, sh_, "o-", label="exact (posterior average, B=32)")
        ax[0].loglog(ds_, th_, "k--", label="3/(d+2)")
        ax[0].set_xlabel("dimension d")
        ax[0].set_ylabel("diagonal share of E‖M_SGLD‖²")
        ax[0].legend()
        for s in SAMPLERS:
            ax[1].semilogy([r["scale"] for r in heavy], [max(r[s]["w1"], 1e-3) for r in heavy], "o-", label=s)
        ax[1].set_xlabel("α-stable noise scale")
        ax[1].set_ylabel("W1 to target")
        ax[1].legend()
        fig.tight_layout()
        fig.savefig(OUT / "minibatch_sgld_vs_sglrw.png", dpi=100)
