"""Golden outputs of the sampler, the theory and the CLI, to check a refactoring changes no number (issue 28).

A developer tool, not part of the pytest suite: the records are exact bits, and bits are only comparable on
the same machine with the same numpy / numba / scipy / BLAS (see ``benchmarks/results/golden/README.md``);
the script pins BLAS to one thread so that they do not depend on the number of cores.

Usage (from the repository root, with the package importable)::

    python benchmarks/golden.py record  [--out DIR] [--only GROUP[,GROUP]]   # default DIR benchmarks/results/golden
    python benchmarks/golden.py compare [--out DIR] [--only GROUP[,GROUP]] [--diff-only] [--against DIR2]
    python benchmarks/golden.py list                                         # groups and cases

``record`` runs every case and writes one JSON file per group, ``DIR/<group>.json``: for each case its fields
(dotted paths into the result: ``cov``, ``settings.batching``, ``json.applicability.reasons[0]`` …), every
float stored exactly as ``float.hex`` strings (arrays: flat, with their shape; arrays of more than ``HEX_MAX``
= 64 entries as base64 of their little-endian float64 bytes, 2.3× shorter) next to a readable ``repr``;
integers, strings and booleans as they are; the warnings the case emitted; an exception as its one-line
message (error paths are golden too). Left out: timing (``seconds``, ``compile_seconds``,
``iterations_per_second``, ``predicted_seconds``, any ``*_seconds`` key — wall clock is never reproducible)
and absolute paths (the scratch folder is written ``<TMP>``).

``compare`` re-runs the cases and prints, per case, a table of its fields: ``identical``, or the largest
absolute and relative difference and the largest distance in units in the last place (ulps); it ends with
the list of cases and fields that differ and exits 1 if any does (a field missing, new, of another shape or
type counts as a difference). ``--against DIR2`` compares the records of DIR with those in DIR2 instead of
re-running (e.g. two ``record`` runs, to show the records are deterministic).

Porting after an API change
---------------------------
Everything that touches the library is in the ADAPTER section just below (imports, data, models, one small
function per library entry point, and ``CASES`` built from them); the MACHINERY section after it (encoding,
files, comparison, command line) never calls the library. Cases describe a run in today's vocabulary
(``run_chains`` keyword names: ``batch_size``, ``n_steps``, ``momentum``, ``batching`` …); when the API
changes (e.g. ``run_chains(model, data, dynamics, run, options)`` with ``Dynamics``/``RunSpec`` from
``sgtune.core.config``), port only the adapter functions (``chains``, ``quadratic_chains``,
``chain_fields`` …) so that they translate that vocabulary into the new calls and the new result back into
the same fields; then ``compare`` against the records made before the change. Keep case names and field
names: a renamed field shows up as one missing and one new field.
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

# BLAS results depend on its thread count (measured: OPENBLAS_NUM_THREADS=1 instead of the default 2 changed 130 of
# 273 theory/CLI cases by up to ~1e-12 relative, e.g. the Kronecker solves of the stationary covariance); one BLAS
# thread makes the records independent of the machine's core count. (Numba's thread count does not matter: each
# chain runs on one thread with its own stream — NUMBA_NUM_THREADS=1 reproduces every record.)
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

threadpool_limits(limits=1, user_api="blas")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# ======================================================================================================
# ADAPTER — the only section that calls sgtune; port this section (only) after an API change
# ======================================================================================================
from click.testing import CliRunner  # noqa: E402

from sgtune.cli import main as cli_main  # noqa: E402
from sgtune.core.config import Dynamics  # noqa: E402
from sgtune.io.data import example, make_dataset  # noqa: E402
from sgtune.models import Expansion, expand, fit_map, get_model, make_mlp  # noqa: E402
from sgtune.models.user import load_model_file  # noqa: E402
from sgtune.core.config import BATCHINGS  # noqa: E402
from sgtune.sampler.driver import run_chains, run_quadratic_chains  # noqa: E402
from sgtune.sampler.gnld import GnldProblem, run_sg_gnld  # noqa: E402
from sgtune.sampler.registry import SAMPLER_NAMES as SAMPLERS  # noqa: E402
from sgtune.sampler.reshuffle import run_reshuffle_chains  # noqa: E402
from sgtune.sampler.smile import METHOD_IDS  # noqa: E402
from sgtune.sampler.smile_ensemble import grid_search_b2, run_smile_ensemble  # noqa: E402
from tests.reference import chain_kw, ensemble_kw  # noqa: E402  (the old keywords → Dynamics, RunSpec, options)
from sgtune.sampler.reference import ReferenceBackend  # noqa: E402
from sgtune.sampler.targets import NOISE_KINDS, TARGET_IDS, make_target  # noqa: E402
from sgtune.theory.adjoint import affine_discrepancy, criterion_gradient  # noqa: E402
from sgtune.theory.applicability import applicability  # noqa: E402
from sgtune.theory.largescale import (ProbeOptions, RankOneProblem, posterior_covariance_error,  # noqa: E402
                                      posterior_diagonal_step_sizes, stationary_cov_from_target,
                                      stationary_cov_from_target_momentum)
from sgtune.theory.mcerror import mc_error  # noqa: E402
from sgtune.theory.stationary import (autocorrelation_times, equilibration_steps, iterate_average_cov,  # noqa: E402
                                      max_stable_step, noise_covariance, predict_comparison_cov,
                                      predict_stationary_cov)
from sgtune.theory.tuning import tune  # noqa: E402

#: the scratch folder of generated files (user model, CSV/NPZ/folder data, matrices); set by the machinery
TMP = Path(tempfile.gettempdir())

# ------------------------------------------------------------------------------------ files and data
USER_LOGISTIC = '''
import numpy as np
from sgtune.models import RankOneCurvature

class MyLogistic:
    """Logistic regression written by hand: no numba spec, so the chains take the general NumPy path."""
    name = "my-logistic"
    fit_method = "newton"

    def per_sample_losses(self, theta, X, y):
        eta = X @ theta
        return np.logaddexp(0.0, eta) - y * eta

    def per_sample_grads(self, theta, X, y):
        p = 1.0 / (1.0 + np.exp(-(X @ theta)))
        return (p - y)[:, None] * X

    def curvature(self, theta, X, y):
        p = 1.0 / (1.0 + np.exp(-(X @ theta)))
        return RankOneCurvature(X, p * (1.0 - p))

MODEL = MyLogistic()
'''

USER_TANH = '''
import numpy as np

class TanhUnit:
    """l_n = (y_n − a·tanh(b·x_n))²/2: a non-convex two-parameter model (fitted by L-BFGS from initial_params)."""
    name = "tanh-unit"

    def n_params(self, p):
        return 2

    def initial_params(self, p, rng):
        return np.array([1.0, 1.0]) + 0.1 * rng.standard_normal(2)

    def per_sample_losses(self, theta, X, y):
        return 0.5 * (y - theta[0] * np.tanh(theta[1] * X[:, 0])) ** 2

    def per_sample_grads(self, theta, X, y):
        a, b = theta
        x = X[:, 0]
        t = np.tanh(b * x)
        r = a * t - y
        return np.column_stack([r * t, r * a * x * (1 - t * t)])

    def per_sample_hessians(self, theta, X, y):
        a, b = theta
        x = X[:, 0]
        t = np.tanh(b * x)
        s = 1 - t * t
        r = a * t - y
        fa, fb = t, a * x * s
        H = np.empty((x.shape[0], 2, 2))
        H[:, 0, 0] = fa * fa
        H[:, 1, 1] = fb * fb + r * (-2 * a * x * x * t * s)
        H[:, 0, 1] = H[:, 1, 0] = fa * fb + r * x * s
        return H

MODEL = TanhUnit()
'''


def write_files(tmp: Path) -> None:
    """The deterministic input files of the cases (user models, data in each format, matrices)."""
    (tmp / "mylogit.py").write_text(USER_LOGISTIC)
    (tmp / "tanh.py").write_text(USER_TANH)
    rng = np.random.default_rng(20260)
    X = rng.standard_normal((300, 3))
    y = X @ np.array([1.0, -0.5, 0.25]) + 0.5 + rng.standard_normal(300)
    with open(tmp / "lin.csv", "w") as f:
        f.write("a,b,c,y\n")
        for row, v in zip(X, y):
            f.write(",".join(repr(float(t)) for t in (*row, v)) + "\n")
    lg = example("logistic")
    np.savez(tmp / "logit.npz", X=lg.X, y=lg.y)
    (tmp / "folder").mkdir(exist_ok=True)
    np.save(tmp / "folder" / "X.npy", X)
    np.save(tmp / "folder" / "y.npy", y)
    xu = np.linspace(-2.0, 2.0, 200)
    np.savez(tmp / "tanh.npz", X=xu[:, None], y=1.5 * np.tanh(0.8 * xu) + 0.3 * rng.standard_normal(200))
    (tmp / "blocks5.json").write_text(json.dumps([[0, 1], [2, 3, 4]]))
    d20 = 20
    lam = 0.02 * (np.eye(d20) + 0.2 * np.ones((d20, d20)) / d20)
    np.save(tmp / "lambda20.npy", lam)
    theta_star = 2.0 * np.random.default_rng(0).standard_normal(5) / np.sqrt(5)  # example('logistic')'s θ*
    np.save(tmp / "theta5.npy", theta_star)
    np.save(tmp / "samples5.npy", theta_star + 0.05 * rng.standard_normal((60, 5)))
    np.save(tmp / "samples20.npy", 0.05 * rng.standard_normal((40, 20)))
    np.save(tmp / "x12.npy", rng.standard_normal(12))
    A = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 0.5]])
    np.save(tmp / "A.npy", A)
    np.save(tmp / "ell.npy", np.array([1.0, 0.5, -0.25]))
    np.save(tmp / "J.npy", np.array([[0.0, 1.0, 0.5], [-1.0, 0.0, 0.2], [-0.5, -0.2, 0.0]]))
    np.save(tmp / "D.npy", np.diag([1.0, 0.5, 2.0]))
    np.save(tmp / "C.npy", np.diag([1.0, 2.0, 1.5]))
    M = np.eye(4) + 0.1 * np.ones((4, 4))
    np.save(tmp / "M.npy", M)
    np.save(tmp / "Q.npy", np.array([[0.0, 1, 0, 0], [-1, 0, 0.5, 0], [0, -0.5, 0, 0.3], [0, 0, -0.3, 0]]))
    np.save(tmp / "D4.npy", np.diag([1.0, 1.0, 0.5, 0.5]))
    np.save(tmp / "ell4.npy", np.array([1.0, 0.0, 0.5, 0.0]))


@functools.lru_cache(maxsize=None)
def data(name: str) -> Any:
    """A bundled example (``hetero-linear``, ``logistic``, ``poisson``; N = 2000) or a generated one."""
    if name == "tanh":
        z = np.load(TMP / "tanh.npz")
        return make_dataset(z["X"], z["y"])
    if name == "linear5":  # the hetero-linear design at D = 5 (N = 2000), for the many linear chain cases
        rng = np.random.default_rng(31)
        X = rng.standard_normal((2000, 5))
        y = X @ rng.standard_normal(5) + np.sqrt(1.0 + 0.2 * np.sum(X**2, axis=1)) * rng.standard_normal(2000)
        return make_dataset(X, y)
    return example(name, seed=0)


@functools.lru_cache(maxsize=None)
def model(name: str) -> Any:
    """GLMs by name, ``mlp`` (one tanh layer of 2, Bernoulli: D = 15 on 5 features), ``mlp-gauss``, user files."""
    if name == "beta-linear":
        return get_model("beta-linear", beta_power=1.5)
    if name == "mlp":
        return make_mlp("2", activation="tanh", likelihood="bernoulli")
    if name == "mlp-gauss":
        return make_mlp("2", activation="tanh", likelihood="gaussian")
    if name == "user-logistic":
        return load_model_file(f"{TMP / 'mylogit.py'}:MODEL")
    if name == "user-tanh":
        return load_model_file(f"{TMP / 'tanh.py'}:MODEL")
    return get_model(name)


# ------------------------------------------------------------------------------------ library calls
def chains(model_name: str, data_name: str, step: Any, **opts: Any) -> Any:
    """One run of the chain engine on data: ``run_chains(model, data, Dynamics, RunSpec, options)``; the case's
    keywords (the vocabulary of 0.1) are translated by the tests' ``chain_kw`` (``backend="python"``: the
    pure-Python reference backend)."""
    return chain_fields(run_chains(model(model_name), data(data_name), **chain_kw(step, **opts)))


def quadratic_chains(hessian: Any, step: Any, **opts: Any) -> Any:
    """One run of the quadratic oracles (Gaussian or α-stable synthetic gradient noise)."""
    return chain_fields(run_quadratic_chains(hessian, **chain_kw(step, **opts)))


def chain_fields(res: Any) -> dict[str, Any]:
    """Every field of a ChainResult (timing is dropped by the machinery) and its derived ``n_diverged``."""
    out = {f.name: getattr(res, f.name) for f in dataclasses.fields(res)}
    out["n_diverged"] = res.n_diverged
    return out


def smile_ensemble(target: str, noise: str, sampler: str, step: float, b2: bool = False, **opts: Any) -> Any:
    """run_smile_ensemble on an analytic target (dim 10, rotations from seed 0), optionally with b²."""
    tgt = make_target(target, noise, dim=10, seed=0)
    res = run_smile_ensemble(tgt, **ensemble_kw(sampler, step, **opts))
    out = {f: getattr(res, f) for f in res.__dataclass_fields__}
    if b2:
        out["b2"] = res.b2(tgt, n_bootstrap=200)
    return out


def grid_search(target: str, noise: str, sampler: str, **opts: Any) -> Any:
    return grid_search_b2(make_target(target, noise, dim=10, seed=0), sampler, **opts)


def reshuffle_chains(scheme: str, h: float, python: bool = False, **opts: Any) -> Any:
    x = np.load(TMP / "x12.npy")
    r = run_reshuffle_chains(x, 3, h, scheme=scheme, backend=ReferenceBackend() if python else "numba", **opts)
    return {"first_moment": r.first_moment, "second_moment": r.second_moment, "mean": r.mean, "mean_se": r.mean_se,
            "var": r.var, "var_se": r.var_se, "average_var": r.average_var, "average_var_se": r.average_var_se,
            "n_epochs": r.n_epochs, "burn_in_epochs": r.burn_in_epochs, "seed": r.seed, "scheme": r.scheme}


def gnld(with_data: bool, python: bool = False, **opts: Any) -> Any:
    """run_sg_gnld: a 2-D quadratic (exact gradient) or Bayesian linear regression on minibatches."""
    if with_data:
        rng = np.random.default_rng(5)
        X = rng.standard_normal((64, 2))
        y = X @ np.array([1.0, -1.0]) + rng.standard_normal(64)
        problem = GnldProblem(np.eye(2), np.array([[0.0, 0.8], [-0.8, 0.0]]), [1.0, 0.5], design=X, response=y,
                              prior_precision=np.eye(2))
        r = run_sg_gnld(problem, 0.01, opts.pop("n_steps"), opts.pop("n_replicas"), batch_size=8,
                        backend=ReferenceBackend() if python else "numba", **opts)
    else:
        H = np.array([[2.0, 0.5], [0.5, 1.0]])
        problem = GnldProblem(np.diag([1.0, 0.5]), np.array([[0.0, 1.0], [-1.0, 0.0]]), [1.0, 0.0], hessian=H)
        r = run_sg_gnld(problem, 0.05, opts.pop("n_steps"), opts.pop("n_replicas"),
                        backend=ReferenceBackend() if python else "numba", **opts)
    return {"time_averages": r.time_averages, "step_size": r.step_size, "n_steps": r.n_steps, "seed": r.seed,
            "hessian": r.hessian}


# theory problems: (model, data, prior precision, scalar λ, batch size)
PROBLEMS = {
    "linear": ("linear", "hetero-linear", 0.0, 0.1, 32),
    "logistic": ("logistic", "logistic", 1.0, 0.5, 32),
    "poisson": ("poisson", "poisson", 0.0, 0.5, 32),
    "mlp": ("mlp", "logistic", 1.0, 0.2, 32),
}


@functools.lru_cache(maxsize=None)
def expansion(problem: str) -> Any:
    m, d, prior, _, _ = PROBLEMS[problem]
    return expand(model(m), data(d), prior)


def step_matrix(problem: str, kind: str) -> Any:
    """λ, a diagonal λ·(0.5..1.5) or a dense SPD λ(I + 0.2·11ᵀ/D) for a problem."""
    lam, d = PROBLEMS[problem][3], expansion(problem).dim
    if kind == "scalar":
        return lam
    if kind == "diagonal":
        return lam * np.linspace(0.5, 1.5, d)
    return lam * (np.eye(d) + 0.2 * np.ones((d, d)) / d)


def fit_fields(problem: str) -> Any:
    m, d, prior, _, _ = PROBLEMS[problem]
    fit = fit_map(model(m), data(d), prior, seed=0)
    e = expansion(problem)
    return {"fit": fit, "expansion": {k: getattr(e, k) for k in
                                      ("theta_hat", "hessian", "fisher", "curvature", "mean_grad", "gradient_norm",
                                       "gradient_z", "hessian_min_eigenvalue", "n_data", "dim")},
            "sandwich": e.sandwich_cov()}


#: the chain's settings among a case's options (today's vocabulary), gathered into one Dynamics
_CHAIN_KEYS = ("inv_temperature", "without_replacement", "momentum")
#: what the theory's results carry since the redesign beyond the recorded fields (their configuration)
_NEW_FIELDS = ("dynamics", "target", "blocks", "family_criterion")


def _dynamics(step: Any, B: int, opts: dict[str, Any]) -> tuple[Dynamics, dict[str, Any]]:
    """(Dynamics(step, B, …), the other options) from a case's keyword options."""
    chain = {k: opts.pop(k) for k in _CHAIN_KEYS if k in opts}
    return Dynamics(step, B, inv_temperature=chain.get("inv_temperature", math.inf),
                    momentum=chain.get("momentum", 0.0),
                    batching=bool(chain.get("without_replacement", False))), opts


def _recorded(res: Any) -> Any:
    """A theory result (StationaryCov, TuningResult) as the recorded fields: the configuration fields left out."""
    if not (dataclasses.is_dataclass(res) and not isinstance(res, type)):
        return res
    return {f.name: _recorded(getattr(res, f.name)) for f in dataclasses.fields(res) if f.name not in _NEW_FIELDS}


def _stationary(problem: str, kind: str = "scalar", **opts: Any) -> Any:
    dyn, rest = _dynamics(step_matrix(problem, kind), PROBLEMS[problem][4], dict(opts))
    return predict_stationary_cov(expansion(problem), dyn, **rest)


def stationary(problem: str, kind: str = "scalar", **opts: Any) -> Any:
    return _recorded(_stationary(problem, kind, **opts))


def stationary_extras(problem: str, **opts: Any) -> Any:
    """The quantities derived from one prediction: τ, equilibration, iterate average, C̄(Σ), stability, MC error."""
    e, B = expansion(problem), PROBLEMS[problem][4]
    st = _stationary(problem, **opts)
    tau, worst = autocorrelation_times(st)
    mce = mc_error(st)
    return {"tau": tau, "tau_worst": worst, "equilibration_steps": equilibration_steps(st.spectral_radius),
            "iterate_average_cov_10": iterate_average_cov(st, 10),
            "noise_cov": noise_covariance(e, st.cov, Dynamics(None, B,
                                                              batching=opts.get("without_replacement", False))),
            "max_stable_step": max_stable_step(e, Dynamics(step_matrix(problem, "scalar"), B,
                                                           momentum=opts.get("momentum", 0.0))),
            "mc_error": mce, "predicted_rms_error_1e4_4": mce.predicted_rms_error(1e4, 4),
            "mc_error_vs_sandwich": mc_error(st, reference_cov=e.sandwich_cov())}


def comparison(problem: str, theory: str, **opts: Any) -> Any:
    dyn, rest = _dynamics(step_matrix(problem, "scalar"), PROBLEMS[problem][4], dict(opts))
    return predict_comparison_cov(expansion(problem), dyn, theory=theory, **rest)


def _tuned(problem: str, **opts: Any) -> Any:
    dyn, rest = _dynamics(None, PROBLEMS[problem][4], dict(opts))
    return tune(expansion(problem), dyn, **rest)


def tuned(problem: str, **opts: Any) -> Any:
    return _recorded(_tuned(problem, **opts))


def applicability_report(problem: str, **opts: Any) -> Any:
    m, d, _, _, _ = PROBLEMS[problem]
    e = expansion(problem)
    t = _tuned(problem, **opts)
    rep = applicability(model(m), data(d), e, t.stationary, target_cov=t.target_cov, backward_error=t.residual,
                        seed=0)
    return {"report": rep, "json": rep.to_dict(), "linearised_cov": rep.linearised_cov}


def adjoint_gradient(problem: str, kind: str, **opts: Any) -> Any:
    e = expansion(problem)
    dyn, rest = _dynamics(step_matrix(problem, kind), PROBLEMS[problem][4], dict(opts))
    return criterion_gradient(e, dyn, affine_discrepancy(e.sandwich_cov()), **rest)


def from_target(problem: str, family: str, momentum: float = 0.0, **opts: Any) -> Any:
    """The large-D covariance route (correction to the target) for a structured Λ tuned by its closed form."""
    e, B = expansion(problem), PROBLEMS[problem][4]
    t = _tuned(problem, family=family, family_criterion="moment", momentum=momentum, **opts)
    C = noise_covariance(e, t.target_cov, Dynamics(None, B, batching=opts.get("without_replacement", False)))
    dyn, rest = _dynamics(t.step_matrix, B, dict(opts, momentum=momentum))
    if momentum:
        return _recorded(stationary_cov_from_target_momentum(e, dyn, t.target_cov, C, **rest))
    return _recorded(stationary_cov_from_target(e, dyn, t.target_cov, C, **rest))


def matrix_free(error_estimate: bool = False, **opts: Any) -> Any:
    """posterior_diagonal_step_sizes / posterior_covariance_error on a rank-one (GLM-like) synthetic problem."""
    rng = np.random.default_rng(0)
    m, d = 200, 12
    U = rng.standard_normal((m, d)) * np.linspace(0.5, 1.5, d)
    w = rng.uniform(0.05, 0.25, m)
    c = rng.standard_normal(m) * 0.4
    gam = np.full(d, 2.0)
    dyn, rest = _dynamics(None, 8, dict(opts))
    problem = RankOneProblem(U, w, c, gam)
    diag = posterior_diagonal_step_sizes(problem, dyn, ProbeOptions(probes=32, seed=3, **rest),
                                         error_estimate=error_estimate)
    err = posterior_covariance_error(problem, dyn.replace(step=diag.diagonal), ProbeOptions(probes=32, seed=4, **rest))
    return {"diagonal": diag, "error": err}


def cli(*args: str) -> dict[str, Any]:
    """``sgtune ARGS`` in-process: exit code, the JSON document (stdout) and the ``Error:`` line, if any."""
    argv = [str(a) for a in args]
    saved = sys.argv
    sys.argv = ["sgtune", *argv]  # the JSON's "command" is built from sys.argv (not from the invoked args)
    try:
        res = CliRunner().invoke(cli_main, argv, catch_exceptions=True)
    finally:
        sys.argv = saved
    out: dict[str, Any] = {"exit_code": res.exit_code}
    try:
        out["json"] = json.loads(res.stdout) if res.stdout.strip() else None
    except json.JSONDecodeError:
        out["stdout"] = res.stdout
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("Error")]
    if err:
        out["error_line"] = err[0]
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        out["exception"] = f"{type(res.exception).__name__}: {res.exception}"
    return out


# ------------------------------------------------------------------------------------ the cases
N_EX = 2000.0  # N of the bundled examples: β = N is the posterior
RUN = dict(batch_size=32, n_steps=3000, n_chains=4, seed=1)
SHORT = dict(batch_size=32, n_steps=1000, n_chains=2, seed=2)   # the general NumPy path (Python per step)
TWIN = dict(batch_size=32, n_steps=150, n_chains=2, seed=3)     # the pure-Python twin
#: per sampler: step (λ for SG(L)D, h for SGHMC, ε for the MCLMC samplers) on the logistic example
STEP = {"sgld": 0.5, "sglrw": 0.5, "clipped-sgld": 0.5, "sghmc": 0.01, "smile-naive": 0.03, "psmile-naive": 0.03,
        "smile": 0.03, "psmile": 0.03}
MOMENTUM_SAMPLERS = ("sgld", "sglrw", "clipped-sgld")
#: other GLMs: model -> (example, λ for SG(L)D, h for SGHMC, ε for MCLMC)
GLMS = {"linear": ("linear5", 0.1, 0.002, 0.03), "poisson": ("poisson", 0.5, 0.002, 0.03),
        "beta-linear": ("linear5", 0.05, 0.002, 0.03)}

CASES: dict[str, dict[str, Callable[[], Any]]] = {}


def add(group: str, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    cases = CASES.setdefault(group, {})
    if name in cases:
        raise ValueError(f"duplicate case {group}/{name}")
    cases[name] = functools.partial(fn, *args, **kwargs)


def _chains_glm() -> None:
    g = "chains_glm"
    for sampler in SAMPLERS:  # every sampler × batching (× momentum, × β for SGLD) on the logistic example
        for batching in BATCHINGS:
            for kappa in ((0.0, 0.5) if sampler in MOMENTUM_SAMPLERS else (0.0,)):
                betas = (math.inf, N_EX) if sampler == "sgld" else (N_EX,)
                for beta in betas:
                    name = f"logistic/{sampler}/{batching}/k{kappa}/beta{beta}"
                    add(g, name, chains, "logistic", "logistic", STEP[sampler], sampler=sampler, batching=batching,
                        momentum=kappa, inv_temperature=beta, **RUN)
    d = 5
    diag = np.linspace(0.25, 0.75, d)
    dense = 0.4 * (np.eye(d) + 0.3 * np.ones((d, d)) / d)
    obs = np.vstack([np.ones(d), np.arange(d, dtype=float)])
    gam = np.eye(d) + 0.1 * (np.ones((d, d)) - np.eye(d))
    opts = {
        "reshuffle-epoch-moments": dict(batching="reshuffle", epoch_moments=True),
        "reshuffle-epoch-moments-momentum": dict(batching="reshuffle", epoch_moments=True, momentum=0.5),
        "reshuffle-epoch-moments-B30": dict(batching="reshuffle", epoch_moments=True, batch_size=30),  # R·B ≠ N
        "decay": dict(decay=0.3),
        "decay-sglrw": dict(decay=0.3, sampler="sglrw"),
        "decay-sghmc": dict(decay=0.3, sampler="sghmc", step=STEP["sghmc"]),
        "diagonal": dict(step=diag),
        "diagonal-sglrw": dict(step=diag, sampler="sglrw"),
        "diagonal-clipped": dict(step=diag, sampler="clipped-sgld", momentum=0.5),
        "dense": dict(step=dense),
        "dense-sgd": dict(step=dense, inv_temperature=math.inf),
        "dense-momentum": dict(step=dense, momentum=0.5, batching="without-replacement"),
        "thin": dict(thin=10),
        "thin-smile": dict(thin=10, sampler="smile", step=STEP["smile"]),
        "thin-psmile": dict(thin=25, sampler="psmile", step=STEP["psmile"], batching="reshuffle"),
        "observables": dict(observables=obs),
        "observables-smile-naive": dict(observables=obs, sampler="smile-naive", step=STEP["smile-naive"]),
        "prior-scalar": dict(prior_precision=1.0),
        "prior-dense": dict(prior_precision=gam),
        "prior-scalar-psmile": dict(prior_precision=1.0, sampler="psmile", step=STEP["psmile"]),
        "batches-per-chain-5": dict(batches_per_chain=5),
        "burn-in-0": dict(burn_in=0),
        "initial-per-chain": dict(initial=0.1 * np.arange(4 * d, dtype=float).reshape(4, d) / d),
        "one-chain": dict(n_chains=1),
        "full-batch": dict(batch_size=2000, n_steps=500),
        "batch-1": dict(batch_size=1),
        "batch-1-wor": dict(batch_size=1, batching="without-replacement"),
        "sghmc-friction": dict(sampler="sghmc", step=STEP["sghmc"], friction=2.0),
        "smile-tuner": dict(sampler="smile", step=STEP["smile"], ema_rate=0.05, guardrail=0.99, adapt_a=0.2,
                            adapt_delta=0.05, tune_start=20),
        "psmile-precond": dict(sampler="psmile", step=STEP["psmile"], precond_rate=0.05, precond_start=50),
        "smile-beta": dict(sampler="smile", step=STEP["smile"], inv_temperature=500.0),
        "sgld-large-step": dict(step=50.0, inv_temperature=math.inf),  # bounded logistic gradients: no blow-up
        "seed-7": dict(seed=7),
    }
    for name, o in opts.items():
        o = {**RUN, "inv_temperature": N_EX, **o}
        sampler = o.pop("sampler", "sgld")
        step = o.pop("step", STEP[sampler])
        add(g, f"logistic/{name}", chains, "logistic", "logistic", step, sampler=sampler, **o)
    for glm, (ex, lam, h, eps) in GLMS.items():  # the other GLMs: each family of sampler
        add(g, f"{glm}/sgld/sgd", chains, glm, ex, lam, inv_temperature=math.inf, **RUN)
        add(g, f"{glm}/sgld/reshuffle-momentum", chains, glm, ex, lam, inv_temperature=N_EX, momentum=0.5,
            batching="reshuffle", **RUN)
        add(g, f"{glm}/sgld/wor-prior", chains, glm, ex, lam, inv_temperature=N_EX, prior_precision=2.0,
            batching="without-replacement", **RUN)
        add(g, f"{glm}/sglrw", chains, glm, ex, lam, sampler="sglrw", inv_temperature=N_EX, **RUN)
        add(g, f"{glm}/clipped-sgld", chains, glm, ex, lam, sampler="clipped-sgld", inv_temperature=N_EX, **RUN)
        add(g, f"{glm}/sghmc", chains, glm, ex, h, sampler="sghmc", **RUN)
        for s in ("smile-naive", "smile", "psmile"):
            add(g, f"{glm}/{s}", chains, glm, ex, eps, sampler=s, **RUN)
    add(g, "hetero-linear/sgld/D20", chains, "linear", "hetero-linear", 0.1, inv_temperature=N_EX, **RUN)
    add(g, "hetero-linear/smile/D20", chains, "linear", "hetero-linear", 0.03, sampler="smile", **RUN)
    add(g, "poisson/sghmc/unstable", chains, "poisson", "poisson", 0.01, sampler="sghmc", **RUN)  # all diverge
    # one chain started where exp(xᵀθ) overflows: it diverges, the others are summarised
    add(g, "poisson/sgld/one-diverges", chains, "poisson", "poisson", 0.5, inv_temperature=N_EX,
        initial=np.vstack([np.zeros((3, 5)), 300.0 * np.ones((1, 5))]), **RUN)


def _chains_mlp() -> None:
    g = "chains_mlp"
    base = {**RUN, "prior_precision": 1.0, "inv_temperature": N_EX}
    for batching in BATCHINGS:
        add(g, f"mlp/sgld/{batching}", chains, "mlp", "logistic", 0.2, batching=batching, **base)
    add(g, "mlp/sgld/reshuffle-epoch-moments-momentum", chains, "mlp", "logistic", 0.2, batching="reshuffle",
        epoch_moments=True, momentum=0.5, **base)
    add(g, "mlp/sgld/sgd-thin", chains, "mlp", "logistic", 0.2, **{**base, "inv_temperature": math.inf, "thin": 20})
    add(g, "mlp/sgld/dense", chains, "mlp", "logistic", 0.2 * (np.eye(15) + 0.1 * np.ones((15, 15)) / 15), **base)
    add(g, "mlp/sgld/decay-observables", chains, "mlp", "logistic", 0.2, decay=0.2, observables=np.ones((1, 15)),
        **base)
    add(g, "mlp/sglrw", chains, "mlp", "logistic", 0.2, sampler="sglrw", momentum=0.5, **base)
    add(g, "mlp/clipped-sgld", chains, "mlp", "logistic", 0.2, sampler="clipped-sgld", **base)
    add(g, "mlp/sghmc", chains, "mlp", "logistic", 0.005, sampler="sghmc", **base)
    for s in ("smile-naive", "psmile-naive", "smile", "psmile"):
        add(g, f"mlp/{s}", chains, "mlp", "logistic", 0.03, sampler=s, **base)
    add(g, "mlp-gauss/sgld", chains, "mlp-gauss", "linear5", 0.01,
        **{**base, "prior_precision": 1.0, "inv_temperature": math.inf})


def _chains_general() -> None:
    g = "chains_general"
    base = {**SHORT, "inv_temperature": N_EX}
    for batching in BATCHINGS:
        add(g, f"user-logistic/sgld/{batching}", chains, "user-logistic", "logistic", 0.5, batching=batching, **base)
    add(g, "user-logistic/sgld/momentum-epoch-moments", chains, "user-logistic", "logistic", 0.5, momentum=0.5,
        batching="reshuffle", epoch_moments=True, **base)
    add(g, "user-logistic/sgld/dense-thin-observables", chains, "user-logistic", "logistic",
        0.4 * (np.eye(5) + 0.3 * np.ones((5, 5)) / 5), thin=10, observables=np.ones((1, 5)), prior_precision=1.0,
        **base)
    add(g, "user-logistic/sgld/sgd-decay", chains, "user-logistic", "logistic", 0.5, decay=0.2,
        **{**base, "inv_temperature": math.inf})
    add(g, "user-logistic/sglrw", chains, "user-logistic", "logistic", 0.5, sampler="sglrw", **base)
    add(g, "user-logistic/clipped-sgld", chains, "user-logistic", "logistic", 0.5, sampler="clipped-sgld", **base)
    add(g, "user-logistic/sghmc", chains, "user-logistic", "logistic", 0.01, sampler="sghmc", **base)
    for s in ("smile-naive", "psmile-naive", "smile", "psmile"):
        add(g, f"user-logistic/{s}", chains, "user-logistic", "logistic", 0.03, sampler=s, **base)
    add(g, "user-tanh/sgld", chains, "user-tanh", "tanh", 0.2, **{**base, "inv_temperature": 200.0})
    add(g, "user-tanh/smile", chains, "user-tanh", "tanh", 0.05, sampler="smile", **{**base, "inv_temperature": 200.0})
    for s, step in (("sgld", 0.5), ("smile", 0.03), ("sglrw", 0.5)):  # a GLM forced onto the general path
        add(g, f"logistic-numpy/{s}", chains, "logistic", "logistic", step, sampler=s, backend="numpy", **base)
    add(g, "mlp-numpy/sgld", chains, "mlp", "logistic", 0.2, backend="numpy", prior_precision=1.0, **base)


def _chains_twin() -> None:
    g = "chains_twin"
    base = {**TWIN, "inv_temperature": N_EX}
    for batching in BATCHINGS:
        for s in MOMENTUM_SAMPLERS:
            add(g, f"logistic/{s}/{batching}", chains, "logistic", "logistic", STEP[s], sampler=s, batching=batching,
                backend="python", **base)
    add(g, "logistic/sgld/momentum-epoch-moments-thin", chains, "logistic", "logistic", 0.5, momentum=0.5,
        batching="reshuffle", epoch_moments=True, thin=5, backend="python", **base)
    add(g, "logistic/sgld/dense-sgd-decay", chains, "logistic", "logistic",
        0.4 * (np.eye(5) + 0.3 * np.ones((5, 5)) / 5), decay=0.2, backend="python",
        **{**base, "inv_temperature": math.inf})
    add(g, "linear/sgld/prior-dense", chains, "linear", "hetero-linear", 0.1, prior_precision=np.eye(20) * 2.0,
        backend="python", **base)
    add(g, "quadratic/sgld", quadratic_chains, np.diag([2.0, 1.0]), 0.2, noise_cov=np.eye(2), n_steps=300,
        inv_temperature=50.0, momentum=0.3, backend="python", seed=4)
    add(g, "quadratic/stable", quadratic_chains, np.diag([2.0, 1.0]), 0.2, noise_alpha=1.5, n_steps=300,
        sampler="clipped-sgld", inv_temperature=50.0, backend="python", seed=4)


def _quadratic() -> None:
    g = "chains_quadratic"
    A = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 0.5]])
    Cn = np.array([[1.0, 0.2, 0.1], [0.2, 0.5, 0.0], [0.1, 0.0, 0.3]])
    base = dict(n_steps=5000, n_chains=4, seed=5)
    for beta in (math.inf, 50.0):
        for kappa in (0.0, 0.5):
            add(g, f"gaussian/sgld/k{kappa}/beta{beta}", quadratic_chains, A, 0.3, noise_cov=Cn,
                inv_temperature=beta, momentum=kappa, **base)
    add(g, "gaussian/sgld/dense-decay-thin", quadratic_chains, A, 0.3 * (np.eye(3) + 0.2 * np.ones((3, 3))),
        noise_cov=Cn, inv_temperature=50.0, decay=0.1, thin=20, **base)
    add(g, "gaussian/sgld/diag-mean-observables", quadratic_chains, A, np.array([0.2, 0.4, 0.6]), noise_cov=Cn,
        mean=np.array([1.0, -1.0, 0.5]), observables=np.eye(3)[:2], inv_temperature=50.0, **base)
    add(g, "gaussian/sgld/singular-noise", quadratic_chains, A, 0.3, noise_cov=np.outer([1.0, 1.0, 0.0], [1, 1, 0]),
        inv_temperature=math.inf, **base)
    add(g, "gaussian/sgld/no-noise-initial", quadratic_chains, A, 0.3, initial=np.ones(3), burn_in=0,
        batches_per_chain=3, **base)
    for s in ("sglrw", "clipped-sgld"):
        add(g, f"gaussian/{s}", quadratic_chains, A, 0.3, noise_cov=Cn, sampler=s, inv_temperature=50.0, **base)
        add(g, f"gaussian/{s}/momentum", quadratic_chains, A, np.array([0.2, 0.3, 0.4]), noise_cov=Cn, sampler=s,
            inv_temperature=50.0, momentum=0.4, **base)
    for alpha in (1.0, 1.5, 2.0):
        add(g, f"stable/sgld/alpha{alpha}", quadratic_chains, A, 0.1, noise_alpha=alpha, noise_scale=0.5,
            inv_temperature=50.0, **base)
    add(g, "stable/clipped-sgld/alpha1.2", quadratic_chains, A, 0.1, noise_alpha=1.2, sampler="clipped-sgld",
        inv_temperature=50.0, thin=50, **base)
    add(g, "gaussian/unstable", quadratic_chains, A, 5.0, noise_cov=Cn, **base)


def _smile() -> None:
    g = "smile_ensembles"
    base = dict(n_steps=2000, n_chains=4, seed=6)
    eps = {"gaussian": 0.3, "rosenbrock": 0.1, "funnel": 0.1}
    for target in TARGET_IDS:
        for noise in NOISE_KINDS:
            for s in ("smile", "psmile"):
                add(g, f"{target}/{noise}/{s}", smile_ensemble, target, noise, s, eps[target], **base)
    for s in METHOD_IDS:
        step = {"sgld": 1e-3, "sghmc": 0.01}.get(s, 0.3)
        add(g, f"gaussian/isotropic/{s}/all-samplers", smile_ensemble, "gaussian", "isotropic", s, step, b2=True,
            **base)
        add(g, f"funnel/spatial/{s}/all-samplers", smile_ensemble, "funnel", "spatial", s, step / 3, **base)
    add(g, "gaussian/correlated/psmile/thin-settings", smile_ensemble, "gaussian", "correlated", "psmile", 0.3,
        thin=50, ema_rate=0.05, precond_rate=0.05, kappa=0.99, adapt_a=0.2, adapt_delta=0.05, tune_start=20,
        precond_start=50, burn_in=100, start=np.full(10, 0.5), **base)
    add(g, "rosenbrock/none/sghmc/friction", smile_ensemble, "rosenbrock", "none", "sghmc", 0.02, friction=3.0,
        thin=100, **base)
    add(g, "gaussian/isotropic/smile/python", smile_ensemble, "gaussian", "isotropic", "psmile", 0.3, n_steps=150,
        n_chains=2, seed=6, backend="python", thin=10)
    add(g, "gaussian/isotropic/smile/grid-search", grid_search, "gaussian", "isotropic", "smile", n_steps=300,
        n_chains=4, seed=1, exponents=(-3, -2, -1, 0), n_fine=3, n_bootstrap=200)


def _reshuffle_gnld() -> None:
    g = "chains_reshuffle_gnld"
    for scheme in ("ula", "rm", "rm_with_replacement", "rr"):
        for h in (0.5, 1.5):
            add(g, f"reshuffle/{scheme}/h{h}", reshuffle_chains, scheme, h, n_chains=16, n_epochs=300,
                burn_in_epochs=30, seed=8)
        add(g, f"reshuffle/{scheme}/python", reshuffle_chains, scheme, 0.5, python=True, n_chains=2, n_epochs=5,
            burn_in_epochs=1, seed=8, sigma2=2.0)
    add(g, "reshuffle/rr/sigma2", reshuffle_chains, "rr", 0.5, sigma2=2.0, n_chains=8, n_epochs=100,
        burn_in_epochs=0, seed=9)
    add(g, "gnld/quadratic", gnld, False, n_steps=5000, n_replicas=8, seed=10)
    add(g, "gnld/quadratic-init", gnld, False, n_steps=2000, n_replicas=3, seed=11, init=np.ones(2))
    add(g, "gnld/blr-minibatch", gnld, True, n_steps=5000, n_replicas=8, seed=12)
    add(g, "gnld/quadratic/python", gnld, False, python=True, n_steps=200, n_replicas=2, seed=10)
    add(g, "gnld/blr-minibatch/python", gnld, True, python=True, n_steps=200, n_replicas=2, seed=12)


def _theory() -> None:
    g = "theory_stationary"
    for p in PROBLEMS:
        add(g, f"{p}/fit-expansion", fit_fields, p)
        for kappa in (0.0, 0.5):
            for wor in (False, True):
                for beta in (math.inf, N_EX):
                    add(g, f"{p}/stationary/k{kappa}/wor{wor}/beta{beta}", stationary, p, momentum=kappa,
                        without_replacement=wor, inv_temperature=beta)
        for kind in ("diagonal", "dense"):
            add(g, f"{p}/stationary/{kind}", stationary, p, kind, inv_temperature=N_EX)
            add(g, f"{p}/stationary/{kind}/momentum", stationary, p, kind, momentum=0.3)
        add(g, f"{p}/stationary/iterative", stationary, p, method="iterative")
        add(g, f"{p}/stationary/iterative-momentum", stationary, p, method="iterative", momentum=0.5)
        add(g, f"{p}/stationary/radius-bound", stationary, p, radius_bound=True, inv_temperature=N_EX)
        add(g, f"{p}/extras", stationary_extras, p, inv_temperature=N_EX)
        add(g, f"{p}/extras-momentum-wor", stationary_extras, p, momentum=0.5, without_replacement=True)
        for theory in ("ct", "dq-const", "lr-ws", "dq-exact"):
            if theory == "lr-ws" and p != "linear":
                continue
            add(g, f"{p}/comparison/{theory}", comparison, p, theory)
            add(g, f"{p}/comparison/{theory}/beta-wor", comparison, p, theory, inv_temperature=N_EX,
                without_replacement=True)
        for kind in ("scalar", "diagonal", "dense"):
            add(g, f"{p}/adjoint/{kind}", adjoint_gradient, p, kind)
        add(g, f"{p}/adjoint/dense-momentum", adjoint_gradient, p, "dense", momentum=0.3)
    add(g, "matrix-free", matrix_free)
    add(g, "matrix-free/error-estimate-beta", matrix_free, error_estimate=True, inv_temperature=4000.0)
    add(g, "matrix-free/wor", matrix_free, without_replacement=True)

    g = "theory_tuning"
    for p in PROBLEMS:
        for method in ("dq-exact", "ct", "dq-const", "lr-ws"):
            if method == "lr-ws" and p != "linear":
                continue
            add(g, f"{p}/{method}/dense", tuned, p, method=method)
            add(g, f"{p}/{method}/dense/posterior-beta-wor", tuned, p, method=method, target="posterior",
                inv_temperature=4 * N_EX, without_replacement=True)
        for family in ("diagonal", "scalar", "block"):  # the MLP's default blocks are its layers
            blocks = None if p == "mlp" or family != "block" else [[0, 1], list(range(2, expansion(p).dim))]
            if p != "mlp":  # the MLP's fitted families take minutes (ill-conditioned H): closed forms only
                add(g, f"{p}/dq-exact/{family}", tuned, p, family=family, blocks=blocks)
                add(g, f"{p}/dq-exact/{family}/momentum", tuned, p, family=family, blocks=blocks, momentum=0.5)
            add(g, f"{p}/dq-exact/{family}/moment", tuned, p, family=family, blocks=blocks, family_criterion="moment")
            add(g, f"{p}/dq-exact/{family}/momentum-moment-posterior", tuned, p, family=family, blocks=blocks,
                momentum=0.5, family_criterion="moment", target="posterior")
        add(g, f"{p}/dq-exact/dense/momentum", tuned, p, momentum=0.5)
        add(g, f"{p}/dq-exact/dense/momentum-beta", tuned, p, momentum=0.5, inv_temperature=4 * N_EX)
        add(g, f"{p}/dq-exact/dense/target-matrix", tuned, p, target=expansion(p).sandwich_cov() * 1.5)
        add(g, f"{p}/applicability/dense", applicability_report, p)
        add(g, f"{p}/applicability/diagonal-momentum", applicability_report, p, family="diagonal", momentum=0.5,
            family_criterion="moment")
        add(g, f"{p}/from-target/diagonal", from_target, p, "diagonal")
        add(g, f"{p}/from-target/scalar-beta-wor", from_target, p, "scalar", inv_temperature=4 * N_EX,
            without_replacement=True)
        add(g, f"{p}/from-target/diagonal-momentum", from_target, p, "diagonal", momentum=0.5)


def _cli() -> None:
    t = TMP
    g = "cli_theory"
    hl = ("--example", "hetero-linear", "--batch-size", "64")
    lg = ("--example", "logistic", "--batch-size", "32", "--prior-precision", "1")
    mlp = ("--example", "logistic", "--model", "mlp", "--hidden-sizes", "2", "--likelihood", "bernoulli",
           "--prior-precision", "1", "--batch-size", "32")
    lam = {
        "hetero-linear": hl, "hetero-linear/lr-ws": (*hl, "--method", "lr-ws"),
        "hetero-linear/ct": (*hl, "--method", "ct"), "hetero-linear/dq-const": (*hl, "--method", "dq-const"),
        "logistic": lg, "logistic/diagonal": (*lg, "--family", "diagonal"),
        "logistic/scalar": (*lg, "--family", "scalar"),
        "logistic/block": (*lg, "--family", "block", "--blocks", t / "blocks5.json"),
        "logistic/momentum": (*lg, "--momentum", "0.5"),
        "logistic/diagonal-momentum": (*lg, "--momentum", "0.5", "--family", "diagonal"),
        "logistic/posterior-N": (*lg, "--target", "posterior", "--inverse-temperature", "N"),  # unreachable
        "logistic/posterior-8000": (*lg, "--target", "posterior", "--inverse-temperature", "8000"),
        "logistic/wor": (*lg, "--without-replacement"),
        "logistic/subsample": (*lg, "--subsample", "500", "--seed", "3"),
        "logistic/refine": (*lg, "--refine", "1", "--seed", "3"),
        "poisson": ("--example", "poisson", "--batch-size", "32"),
        "csv-intercept": (t / "lin.csv", "--model", "linear", "--batch-size", "16", "--intercept"),
        "csv-beta-linear": (t / "lin.csv", "--model", "beta-linear", "--beta-power", "1.5", "--batch-size", "16"),
        "folder": (t / "folder", "--model", "linear", "--batch-size", "16"),
        "user-model": (t / "logit.npz", "--model", f"{t / 'mylogit.py'}:MODEL", "--batch-size", "32"),
        "mlp": mlp,
        "mlp-gauss-newton": (*mlp, "--hessian", "gauss-newton"),
        "error-batch": ("--example", "logistic", "--batch-size", "0"),
    }
    for name, args in lam.items():
        add(g, f"lambda/{name}", cli, "lambda", *args)
    cov = {
        "hetero-linear": (*hl, "--step-size", "0.05"),
        "hetero-linear/momentum-window": (*hl, "--step-size", "0.05", "--momentum", "0.5", "--average-window", "10"),
        "hetero-linear/lambda-file": (*hl, "--lambda", t / "lambda20.npy"),
        "hetero-linear/N-wor": (*hl, "--step-size", "0.05", "--inverse-temperature", "N", "--without-replacement"),
        "logistic": (*lg, "--step-size", "0.5"),
        "mlp": (*mlp, "--step-size", "0.1"),
        "error-unstable": (*hl, "--step-size", "100"),
    }
    for name, args in cov.items():
        add(g, f"covariance/{name}", cli, "covariance", *args)
    add(g, "plan/logistic", cli, "plan", "--example", "logistic", "--tolerance", "0.12", "--no-timing")
    add(g, "plan/logistic-grid", cli, "plan", "--example", "logistic", "--tolerance", "0.1", "--no-timing",
        "--batch-sizes", "16,64", "--families", "dense,diagonal", "--momentum", "0,0.5", "--batching",
        "replacement,reshuffle", "--inverse-temperature", "inf,N", "--objective", "gradients", "--prior-precision", "1")
    fl = ("--hessian", t / "A.npy", "--observable", t / "ell.npy")
    add(g, "fluctuation/nld", cli, "fluctuation", "nld", *fl, "--antisymmetric", t / "J.npy", "--diffusion",
        t / "D.npy")
    add(g, "fluctuation/nld-budget", cli, "fluctuation", "nld", *fl, "--antisymmetric", t / "J.npy", "--budget", "1.0")
    add(g, "fluctuation/hfhr", cli, "fluctuation", "hfhr", *fl, "--alpha", "0.5", "--gamma", "1.5")
    add(g, "fluctuation/gaul", cli, "fluctuation", "gaul", *fl, "--a", "0.5", "--gamma", "1.5", "--preconditioner",
        t / "C.npy")
    add(g, "fluctuation/general", cli, "fluctuation", "general", "--hessian", t / "M.npy", "--observable",
        t / "ell4.npy", "--antisymmetric", t / "Q.npy", "--diffusion", t / "D4.npy")
    add(g, "minibatch-error/logistic", cli, "minibatch-error", "--example", "logistic", "--batch-size", "8",
        "--step-size", "0.1")
    add(g, "minibatch-error/logistic-wor-theta", cli, "minibatch-error", "--example", "logistic", "--batch-size", "8",
        "--without-replacement", "--theta", t / "theta5.npy", "--prior-precision", "1")
    add(g, "minibatch-error/hetero-linear", cli, "minibatch-error", *hl)
    add(g, "reshuffle/x12", cli, "reshuffle", "--data", t / "x12.npy", "--batch-size", "4", "--step", "0.1")
    add(g, "reshuffle/x12-sigma2", cli, "reshuffle", "--data", t / "x12.npy", "--batch-size", "3", "--step", "1.5",
        "--sigma2", "2.0")
    add(g, "reshuffle/csv", cli, "reshuffle", "--data", t / "lin.csv", "--column", "a", "--batch-size", "10",
        "--step", "0.5")
    for name in ("clip-factor", "gaul", "hfhr", "isotropic-diagonal-share", "minibatch-moments", "nld", "rr-rm",
                 "stationary-1d"):
        add(g, f"derive/{name}", cli, "derive", name)
    add(g, "ksd/logistic", cli, "ksd", "--example", "logistic", "--samples", t / "samples5.npy", "--prior-precision",
        "1")
    add(g, "ksd/hetero-linear-block", cli, "ksd", "--example", "hetero-linear", "--samples", t / "samples20.npy",
        "--block", "7")
    add(g, "noise-anisotropy/logistic", cli, "noise-anisotropy", "--example", "logistic", "--batch-size", "32")
    add(g, "noise-anisotropy/logistic-wor-theta", cli, "noise-anisotropy", "--example", "logistic", "--batch-size",
        "32", "--without-replacement", "--theta", t / "theta5.npy")
    add(g, "noise-anisotropy/folder", cli, "noise-anisotropy", t / "folder", "--model", "linear", "--batch-size", "8")

    g = "cli_chains"
    rn = ("--steps", "3000", "--chains", "4", "--seed", "11")
    lgn = (*lg, "--inverse-temperature", "N")
    for s in SAMPLERS:
        add(g, f"run/logistic/{s}", cli, "run", *lgn, "--sampler", s, "--step-size", STEP[s], *rn)
    runs = {
        "logistic/wor-momentum": (*lgn, "--step-size", "0.5", "--batching", "without-replacement", "--momentum",
                                  "0.5"),
        "logistic/reshuffle-decay-thin": (*lgn, "--step-size", "0.5", "--batching", "reshuffle", "--decay", "0.2",
                                          "--thin", "10", "--burn-in", "100", "--batches-per-chain", "6"),
        "logistic/sghmc-friction": (*lgn, "--sampler", "sghmc", "--step-size", "0.01", "--friction", "2"),
        "hetero-linear/lambda-file-sgd": (*hl, "--lambda", t / "lambda20.npy"),
        "poisson": ("--example", "poisson", "--batch-size", "32", "--step-size", "0.5", "--inverse-temperature", "N"),
        "mlp": (*mlp, "--step-size", "0.2", "--inverse-temperature", "N"),
        "user-model": (t / "logit.npz", "--model", f"{t / 'mylogit.py'}:MODEL", "--batch-size", "32", "--step-size",
                       "0.5", "--inverse-temperature", "N", "--steps", "600", "--chains", "2", "--seed", "11"),
        "error-diverged": (*hl, "--step-size", "100"),
    }
    for name, args in runs.items():
        extra = () if "--steps" in args else rn
        add(g, f"run/{name}", cli, "run", *args, *extra)
    vr = ("--steps", "4000", "--chains", "4", "--seed", "5")
    add(g, "verify/hetero-linear", cli, "verify", *hl, *vr)
    add(g, "verify/logistic-step", cli, "verify", *lgn, "--step-size", "0.5", *vr)
    add(g, "verify/logistic-diagonal-momentum", cli, "verify", *lg, "--family", "diagonal", "--momentum", "0.5", *vr)
    add(g, "verify/logistic-smile", cli, "verify", *lgn, "--sampler", "smile", "--step-size", "0.03", *vr)
    add(g, "verify/logistic-inflated", cli, "verify", *lgn, "--step-size", "0.5", "--inflate-prediction", "1.5", *vr)
    cb = ("--steps", "4000", "--chains", "4", "--seed", "2")
    add(g, "calibrate/hetero-linear", cli, "calibrate", *hl, *cb)
    add(g, "calibrate/logistic-true-theta-repeat", cli, "calibrate", *lg, "--true-theta", t / "theta5.npy",
        "--repeat", "2", *cb)
    add(g, "calibrate/logistic-diagonal-subsample", cli, "calibrate", *lg, "--family", "diagonal", "--subsample",
        "500", *cb)


def build_cases() -> dict[str, dict[str, Callable[[], Any]]]:
    CASES.clear()
    _chains_glm()
    _chains_mlp()
    _chains_general()
    _chains_twin()
    _quadratic()
    _smile()
    _reshuffle_gnld()
    _theory()
    _cli()
    return CASES


# ======================================================================================================
# MACHINERY — encoding, files, comparison, command line (no sgtune calls below this line)
# ======================================================================================================
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "golden"
#: keys never recorded: wall-clock timing is not reproducible
TIMING_KEYS = {"seconds", "compile_seconds", "iterations_per_second", "predicted_seconds", "seconds_per_step",
               "timing_seconds", "tuning_seconds", "wall", "wall_seconds", "elapsed"}


#: float arrays with more entries are stored as base64 of their float64 bytes instead of a list of float.hex
HEX_MAX = 64


def is_timing(key: str) -> bool:
    return key in TIMING_KEYS or key.endswith("_seconds") or key.startswith("seconds_")


def _clean_str(s: str) -> str:
    """A string without the scratch folder's absolute path."""
    for p in {str(TMP), str(TMP.resolve())}:
        s = s.replace(p, "<TMP>")
    return s


def _numeric_list(v: Any) -> np.ndarray | None:
    """A rectangular list of numbers (e.g. a JSON matrix) as an array, else None."""
    def ok(x: Any) -> bool:
        if isinstance(x, (list, tuple)):
            return all(ok(t) for t in x)
        return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))
    if not v or not ok(v):
        return None
    try:
        arr = np.asarray(v)
    except ValueError:
        return None
    if arr.dtype == object:
        return None
    return arr


def encode_leaf(v: Any) -> dict[str, Any]:
    if v is None:
        return {"t": "none"}
    if isinstance(v, (bool, np.bool_)):
        return {"t": "bool", "v": bool(v)}
    if isinstance(v, (int, np.integer)):
        return {"t": "int", "v": int(v)}
    if isinstance(v, (float, np.floating)):
        return {"t": "float", "hex": float(v).hex(), "repr": repr(float(v))}
    if isinstance(v, str):
        return {"t": "str", "v": _clean_str(v)}
    if isinstance(v, np.ndarray):
        if v.dtype.kind == "f":
            flat = np.ascontiguousarray(v, dtype=np.float64).ravel()
            with np.printoptions(precision=6, threshold=50, edgeitems=3, linewidth=1000):
                rep = np.array2string(flat.reshape(v.shape))
            if flat.size > HEX_MAX:  # exact and ~2.3× shorter than hex strings: little-endian float64 bytes
                return {"t": "farray", "shape": list(v.shape), "b64": base64.b64encode(flat.astype("<f8").tobytes())
                        .decode("ascii"), "repr": rep}
            return {"t": "farray", "shape": list(v.shape), "hex": [float(x).hex() for x in flat], "repr": rep}
        if v.dtype.kind in "iub":
            return {"t": f"{'b' if v.dtype.kind == 'b' else 'i'}array", "shape": list(v.shape),
                    "v": [int(x) for x in v.ravel()]}
        if v.dtype.kind == "c":
            return {"t": "carray", "shape": list(v.shape), "hex": [float(x).hex() for x in v.real.ravel()],
                    "hex_imag": [float(x).hex() for x in v.imag.ravel()]}
        if v.dtype.kind in "US":
            return {"t": "sarray", "shape": list(v.shape), "v": [_clean_str(str(x)) for x in v.ravel()]}
    return {"t": "str", "v": _clean_str(repr(v))}


def flatten(v: Any, prefix: str, out: dict[str, Any]) -> None:
    """Dotted fields of a nested result: dataclasses and dicts by key, lists by index (numeric ones as arrays)."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        v = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
    if isinstance(v, dict):
        if not v:
            out[prefix] = {"t": "dict", "len": 0}
        for k, x in v.items():
            if is_timing(str(k)):
                continue
            flatten(x, f"{prefix}.{k}" if prefix else str(k), out)
        return
    if isinstance(v, np.ndarray) and v.dtype == object:
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        arr = _numeric_list(v)
        if arr is not None:
            out[prefix] = encode_leaf(arr.astype(np.float64) if arr.dtype.kind == "f" else arr)
            return
        if not v:
            out[prefix] = {"t": "list", "len": 0}
        for i, x in enumerate(v):
            flatten(x, f"{prefix}[{i}]", out)
        return
    out[prefix] = encode_leaf(v)


def run_case(fn: Callable[[], Any]) -> dict[str, Any]:
    """The fields of one case: its result, the warnings it emitted, or its exception."""
    fields: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = fn()
        except Exception as exc:  # an error path is part of the behaviour
            fields["error"] = encode_leaf(f"{type(exc).__name__}: {exc}")
            fields["error_where"] = encode_leaf(traceback.extract_tb(exc.__traceback__)[-1].name)
        else:
            is_map = isinstance(value, dict) or (dataclasses.is_dataclass(value) and not isinstance(value, type))
            flatten(value, "" if is_map else "value", fields)
    msgs = [f"{w.category.__name__}: {w.message}" for w in caught if not issubclass(w.category, DeprecationWarning)]
    if msgs:
        fields["warnings"] = encode_leaf(np.array(msgs))
    return fields


def machine() -> dict[str, Any]:
    """Where the records were made (bits are comparable only where this agrees)."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba
    import scipy
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "sgtune"], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", False
    return {"commit": commit, "sgtune_dirty": dirty, "machine": platform.machine(), "cpu": cpu,
            "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "scipy": scipy.__version__, "numba_num_threads": os.environ.get("NUMBA_NUM_THREADS", "default"),
            "blas_threads": 1}


def selected(only: str | None) -> list[str]:
    groups = list(CASES)
    if not only:
        return groups
    want = [g.strip() for g in only.split(",") if g.strip()]
    bad = [g for g in want if g not in CASES]
    if bad:
        raise SystemExit(f"Error: unknown group(s) {', '.join(bad)}; groups: {', '.join(groups)}")
    return want


def run_group(group: str, log: bool = True) -> tuple[dict[str, Any], float]:
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    for name, fn in CASES[group].items():
        tc = time.perf_counter()
        out[name] = run_case(fn)
        if log:
            print(f"  {group}/{name}: {len(out[name])} fields, {time.perf_counter() - tc:.2f} s", file=sys.stderr)
    return out, time.perf_counter() - t0


def dump(path: Path, meta: dict[str, Any], cases: dict[str, Any]) -> None:
    """One JSON document, one line per field (readable diffs, modest size)."""
    lines = ["{", f' "_meta": {json.dumps(meta)},', ' "cases": {']
    for i, (name, fields) in enumerate(cases.items()):
        lines.append(f"  {json.dumps(name)}: {{")
        items = list(fields.items())
        for j, (k, v) in enumerate(items):
            lines.append(f"   {json.dumps(k)}: {json.dumps(v)}{',' if j < len(items) - 1 else ''}")
        lines.append("  }" + ("," if i < len(cases) - 1 else ""))
    lines += [" }", "}"]
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


# ---------------------------------------------------------------------------------------- comparison
def _ordered(bits: np.ndarray) -> list[int]:
    """float64 bit patterns as integers ordered like the floats (for ulp distances)."""
    out = []
    for b in bits.tolist():
        out.append(b if b >= 0 else -(b & 0x7FFFFFFFFFFFFFFF))
    return out


def decode_floats(leaf: dict[str, Any], key: str = "hex") -> np.ndarray:
    """The exact float64 values of a ``float`` / ``farray`` leaf (hex strings or base64 bytes)."""
    if key == "hex" and "b64" in leaf:
        return np.frombuffer(base64.b64decode(leaf["b64"]), dtype="<f8").astype(np.float64)
    vals = leaf[key] if isinstance(leaf[key], list) else [leaf[key]]
    return np.array([float.fromhex(x) for x in vals], dtype=np.float64)


def compare_floats(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    same = (a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))
    if same.all():
        return {"identical": True}
    idx = np.flatnonzero(~same)
    fa, fb = a[idx], b[idx]
    both = np.isfinite(fa) & np.isfinite(fb)
    with np.errstate(all="ignore"):
        absd = np.abs(fa[both] - fb[both])
        rel = absd / np.maximum(np.abs(fa[both]), np.abs(fb[both]))
    ua, ub = _ordered(fa.view(np.int64)), _ordered(fb.view(np.int64))
    ulps = max((abs(x - y) for x, y, f in zip(ua, ub, both) if f), default=None)
    return {"identical": False, "n_diff": int(idx.size), "n": int(a.size),
            "max_abs": float(absd.max()) if absd.size else math.nan,
            "max_rel": float(np.nanmax(rel)) if rel.size and not np.isnan(rel).all() else math.nan,
            "ulps": ulps, "nonfinite_mismatch": int((~both).sum())}


def compare_field(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    if old is None:
        return {"identical": False, "why": "new field"}
    if new is None:
        return {"identical": False, "why": "missing"}
    if old["t"] != new["t"]:
        return {"identical": False, "why": f"type {old['t']} -> {new['t']}"}
    if old.get("shape") != new.get("shape"):
        return {"identical": False, "why": f"shape {old.get('shape')} -> {new.get('shape')}"}
    if old["t"] in ("float", "farray", "carray"):
        r = compare_floats(decode_floats(old), decode_floats(new))
        if old["t"] == "carray" and r["identical"]:
            r = compare_floats(decode_floats(old, "hex_imag"), decode_floats(new, "hex_imag"))
        return r
    if old == new:
        return {"identical": True}
    if old["t"] == "iarray":
        d = np.abs(np.array(old["v"], dtype=np.float64) - np.array(new["v"], dtype=np.float64))
        return {"identical": False, "n_diff": int((d > 0).sum()), "n": int(d.size), "max_abs": float(d.max())}
    if old["t"] == "int":
        return {"identical": False, "max_abs": float(abs(old["v"] - new["v"]))}
    return {"identical": False, "why": f"{str(old.get('v'))[:60]!r} -> {str(new.get('v'))[:60]!r}"}


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def print_case(name: str, rows: list[tuple[str, dict[str, Any]]], diff_only: bool) -> None:
    bad = [(f, r) for f, r in rows if not r["identical"]]
    print(f"\n{name}: {len(rows) - len(bad)}/{len(rows)} fields identical")
    show = bad if diff_only else rows
    if not show:
        return
    w = max(len(f) for f, _ in show)
    print(f"  {'field':<{w}}  {'status':<10} {'max abs':>10} {'max rel':>10} {'ulps':>12}  detail")
    for f, r in show:
        if r["identical"]:
            print(f"  {f:<{w}}  identical")
            continue
        detail = r.get("why", "")
        if "n_diff" in r:
            detail = f"{r['n_diff']}/{r['n']} entries" + (f", {r['nonfinite_mismatch']} non-finite"
                                                          if r.get("nonfinite_mismatch") else "")
        print(f"  {f:<{w}}  {'DIFFERS':<10} {_fmt(r.get('max_abs')):>10} {_fmt(r.get('max_rel')):>10} "
              f"{_fmt(r.get('ulps')):>12}  {detail}")


# ------------------------------------------------------------------------------------------- commands
def cmd_record(out: Path, only: str | None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    meta = machine()
    total = 0.0
    n = 0
    for group in selected(only):
        cases, secs = run_group(group)
        dump(out / f"{group}.json", meta, cases)
        total += secs
        n += len(cases)
        print(f"{group}: {len(cases)} cases, {secs:.1f} s -> {out / (group + '.json')}", file=sys.stderr)
    print(f"recorded {n} cases in {total:.1f} s", file=sys.stderr)
    return 0


def cmd_compare(out: Path, only: str | None, diff_only: bool, against: Path | None = None) -> int:
    meta = machine()
    differing: list[tuple[str, list[str]]] = []
    n_cases = 0
    for group in selected(only):
        path = out / f"{group}.json"
        if not path.exists():
            print(f"Error: no record {path}; run `record` first", file=sys.stderr)
            return 2
        rec = json.loads(path.read_text())
        old_meta = rec["_meta"]
        for k in ("machine", "cpu", "numpy", "numba", "scipy", "python"):
            if old_meta.get(k) != meta[k]:
                print(f"note: {group} was recorded with {k} = {old_meta.get(k)!r}, now {meta[k]!r}: bits may differ",
                      file=sys.stderr)
        if against is None:
            new, secs = run_group(group, log=False)
        else:  # two records, nothing re-run
            other = against / f"{group}.json"
            if not other.exists():
                print(f"Error: no record {other}", file=sys.stderr)
                return 2
            new, secs = json.loads(other.read_text())["cases"], 0.0
        print(f"\n=== {group} ({len(new)} cases, {secs:.1f} s; recorded on {old_meta.get('commit', '?')[:10]})")
        for name in list(rec["cases"]) + [c for c in new if c not in rec["cases"]]:
            n_cases += 1
            old_f, new_f = rec["cases"].get(name), new.get(name)
            if old_f is None or new_f is None:
                print(f"\n{name}: {'new case' if old_f is None else 'case missing'}")
                differing.append((f"{group}/{name}", ["<case " + ("new" if old_f is None else "missing") + ">"]))
                continue
            rows = [(f, compare_field(old_f.get(f), new_f.get(f))) for f in list(old_f) +
                    [f for f in new_f if f not in old_f]]
            print_case(name, rows, diff_only)
            bad = [f for f, r in rows if not r["identical"]]
            if bad:
                differing.append((f"{group}/{name}", bad))
    print(f"\n{n_cases} cases compared; {n_cases - len(differing)} identical, {len(differing)} differ")
    for name, fields in differing:
        print(f"  DIFFERS {name}: {', '.join(fields)}")
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    global TMP
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("record", "compare", "list"))
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of the records (default %(default)s)")
    ap.add_argument("--only", help="comma-separated groups (default: all)")
    ap.add_argument("--diff-only", action="store_true", help="compare: print only the fields that differ")
    ap.add_argument("--against", type=Path, help="compare: the records in this folder instead of a re-run")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sgtune-golden-") as tmp:
        TMP = Path(tmp)
        write_files(TMP)
        build_cases()
        if args.command == "list":
            for g, cases in CASES.items():
                print(f"{g}: {len(cases)} cases")
                for name in cases:
                    print(f"  {name}")
            print(f"{sum(len(c) for c in CASES.values())} cases")
            return 0
        if args.command == "record":
            return cmd_record(args.out, args.only)
        return cmd_compare(args.out, args.only, args.diff_only, args.against)


if __name__ == "__main__":
    sys.exit(main())
