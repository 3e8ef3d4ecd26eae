"""Draw the README's figure, ``docs/_static/overview.png`` (needs matplotlib).

Run: ``python docs/make_figure.py`` (about half a minute on 2 cores). B = 32 throughout.

* left, **predict**: on the heteroskedastic, misspecified linear regression (bundled:
  ``example("hetero-linear")``, D = 20, N = 2000), the stationary variance of θ₁ of SGD against the
  scalar step size — long chains
  (± 2 MCSE) against sgtune's exact prediction and the continuous-time and well-specified theories;
* right, **tune**: on a logistic regression with correlated covariates of unequal scales, 95 % ellipses
  of two coordinates of θ − θ̂ — the sandwich target, chains run with the Λ sgtune tunes for it, and
  chains with the scalar step whose covariance has the target's trace.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from sgtune.core.config import Dynamics, RunSpec
from sgtune.io.data import example, make_dataset
from sgtune.models import expand, get_model
from sgtune.sampler import run_chains
from sgtune.theory.stationary import predict_comparison_cov, predict_stationary_cov
from sgtune.theory.tuning import target_covariance, tune
from sgtune.core.config import Dynamics

OUT = Path(__file__).resolve().parent / "_static" / "overview.png"
B, STEPS, CHAINS = 32, 100_000, 8


def ellipse(cov: np.ndarray, n: int = 200) -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, n)
    return np.sqrt(5.991) * np.linalg.cholesky(cov) @ np.vstack([np.cos(t), np.sin(t)])


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data, model = example("hetero-linear"), get_model("linear")
    e = expand(model, data)

    # predict: Var θ₁ against λ
    lams = np.array([0.01, 0.03, 0.1, 0.2, 0.3])
    sim = [run_chains(model, data, Dynamics(lam, B), RunSpec(STEPS, n_chains=CHAINS, burn_in=STEPS // 10, seed=1),
                      initial=e.theta_hat) for lam in lams]
    grid = np.geomspace(lams.min(), lams.max(), 40)
    theories = {"sgtune (exact, DQ+exact)": ("dq-exact", "-"), "continuous time (CT)": ("ct", "--"),
                "well-specified (LR+WS)": ("lr-ws", ":")}

    # tune: logistic regression with correlated covariates of unequal scales (the target is far from
    # isotropic); sandwich target, tuned Λ vs the scalar step whose covariance has the target's trace
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 3)) @ np.array([[1.0, 0.0, 0.0], [0.85, 0.5, 0.0], [0.0, 0.3, 2.0]]).T
    y = (rng.random(2000) < 1 / (1 + np.exp(-X @ np.array([0.8, -0.5, 0.3])))).astype(float)
    logit, ldata = get_model("logistic"), make_dataset(X, y)
    le = expand(logit, ldata)
    target = target_covariance(le, "sandwich")
    res = tune(le, Dynamics(None, B), target="sandwich")
    lam_scalar = 0.1
    for _ in range(30):
        st = predict_stationary_cov(le, Dynamics(lam_scalar, B))
        lam_scalar *= np.trace(target) / np.trace(st.cov)
    tuned = run_chains(logit, ldata, Dynamics(res.step_matrix, B),
                       RunSpec(STEPS, n_chains=CHAINS, burn_in=STEPS // 10, seed=2), initial=le.theta_hat)
    scalar = run_chains(logit, ldata, Dynamics(lam_scalar, B),
                        RunSpec(STEPS, n_chains=CHAINS, burn_in=STEPS // 10, seed=3), initial=le.theta_hat)
    corr = target / np.sqrt(np.outer(np.diag(target), np.diag(target)))
    np.fill_diagonal(corr, 0)
    i, j = np.unravel_index(np.argmax(np.abs(corr)), corr.shape)
    idx = np.ix_([i, j], [i, j])

    fig, ax = plt.subplots(1, 2, figsize=(11.5, 4.2))
    ax[0].errorbar(lams, [r.cov[0, 0] for r in sim], yerr=[2 * r.cov_standard_error[0, 0] for r in sim],
                   fmt="ko", ms=4, label="SGD chains (± 2 MCSE)", zorder=3)
    for label, (theory, style) in theories.items():
        ax[0].plot(grid, [predict_comparison_cov(e, Dynamics(g, B), theory=theory)[0, 0] for g in grid],
                   style, label=label)
    ax[0].set(xscale="log", yscale="log", xlabel="step size λ (Λ = λI)", ylabel="stationary Var θ₁",
              title="predict: the covariance SGD will have\n(the hetero-linear example, D = 20)")
    ax[0].legend(frameon=False, fontsize=8)
    for cov, style, label in ((target[idx], "k-", "target: sandwich covariance J⁻¹IJ⁻¹/N"),
                              (tuned.cov[idx], "C0--", "chains with sgtune's Λ"),
                              (scalar.cov[idx], "C3:", "chains with a scalar λ (same trace)")):
        xy = ellipse(cov)
        ax[1].plot(xy[0], xy[1], style, lw=2, label=label)
    ax[1].set(xlabel=f"θ{i + 1} − θ̂{i + 1}", ylabel=f"θ{j + 1} − θ̂{j + 1}", aspect="equal",
              title="tune: Λ so the chain has the target covariance\n(logistic, correlated covariates, D = 3)")
    ax[1].legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
