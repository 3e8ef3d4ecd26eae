"""The model protocol: user models (file and Python API), the JAX adapter, --theta-hat, model errors."""
from __future__ import annotations

import json
import re
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.io.data import example, make_dataset
from sgtune.core.errors import AccuracyWarning, NotPositiveDefiniteError
from sgtune.models import (DenseCurvature, ModelError, RankOneCurvature, checked_call, expand, fit_map, get_model,
                           per_sample_curvature)
from sgtune.models.user import load_model_file
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics

LINEAR_FILE = '''
import numpy as np
from sgtune.models import RankOneCurvature

class HandLinear:
    """Gaussian linear regression (σ² = 1) written by hand, with the built-in model's operations."""
    name = "hand-linear"
    fit_method = "newton"

    def per_sample_losses(self, theta, X, y):
        r = X @ theta - y
        return 0.5 * r * r

    def per_sample_grads(self, theta, X, y):
        return (X @ theta - y)[:, None] * X

    def curvature(self, theta, X, y):
        return RankOneCurvature(X, np.full(X.shape[0], 1.0))

    def newton_start(self, X, y, prior_precision):
        return np.linalg.lstsq(X, y, rcond=None)[0]

MODEL = HandLinear()
'''

LOGISTIC_FILE = '''
import numpy as np
from sgtune.models import RankOneCurvature

class MyLogistic:
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

# l_n = (y_n − a·tanh(b·x_n))²/2: a one-unit network, non-convex; at (0, 0) the mean Hessian is
# [[0, −c], [−c, 0]] with c = mean(x y), indefinite
PRODUCT_FILE = '''
import numpy as np

class TanhUnit:
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


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.fixture
def linear_npz(tmp_path):
    ds = example("hetero-linear")
    p = tmp_path / "lin.npz"
    np.savez(p, X=ds.X, y=ds.y)
    return p


@pytest.fixture
def logistic_npz(tmp_path):
    ds = example("logistic")
    p = tmp_path / "logit.npz"
    np.savez(p, X=ds.X, y=ds.y)
    return p


def test_user_linear_file_gives_the_builtin_numbers_bit_for_bit(tmp_path, linear_npz):
    f = write(tmp_path, "hand.py", LINEAR_FILE)
    outs = {}
    for spec in ("linear", f"{f}:MODEL"):
        out = tmp_path / f"lam_{len(outs)}.npy"
        r = run(["lambda", str(linear_npz), "--model", spec, "--batch-size", "32", "-o", str(out), "-q"])
        assert r.exit_code == 0, r.stderr
        outs[spec] = (np.load(out), json.loads(r.stdout))
    (a, da), (b, db) = outs.values()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.array(da["predicted_cov"]), np.array(db["predicted_cov"]))
    assert db["model"].startswith("hand-linear")


def test_user_logistic_file_matches_builtin_to_rounding(tmp_path, logistic_npz):
    # the hand-written sigmoid 1/(1+e^{−η}) rounds differently from the built-in two-branch one
    f = write(tmp_path, "mylogit.py", LOGISTIC_FILE)
    docs = []
    for spec in ("logistic", f"{f}:MODEL"):
        r = run(["lambda", str(logistic_npz), "--model", spec, "--batch-size", "32", "-q"])
        assert r.exit_code == 0, r.stderr
        docs.append(json.loads(r.stdout))
    for key in ("lambda", "predicted_cov", "theta_hat"):
        np.testing.assert_allclose(np.array(docs[1][key]), np.array(docs[0][key]), rtol=1e-9, atol=1e-13)


def test_user_model_python_api_and_loader(tmp_path):
    f = write(tmp_path, "mylogit.py", LOGISTIC_FILE)
    user = load_model_file(f"{f}:MODEL")
    glm = get_model("logistic")
    ds = example("logistic")
    e_user, e_glm = expand(user, ds), expand(glm, ds)
    assert e_user.rank_one and e_glm.rank_one
    np.testing.assert_allclose(e_user.hessian, e_glm.hessian, rtol=1e-10)
    t_user = tune(e_user, Dynamics(None, 32), target="sandwich")
    t_glm = tune(e_glm, Dynamics(None, 32), target="sandwich")
    np.testing.assert_allclose(t_user.step_matrix, t_glm.step_matrix, rtol=1e-9)
    assert "mylogit.py:MODEL" in e_user.model


@pytest.mark.parametrize("body, needle", [
    (None, "does not exist"),
    ("raise RuntimeError('boom')\n", "importing"),
    ("X = 1\n", "defines no name 'MODEL'"),
    ("class M:\n    name = 'm'\nMODEL = M()\n", "lacks per_sample_losses()"),
    (LINEAR_FILE.replace("return (X @ theta - y)[:, None] * X", "return X"), None),
])
def test_bad_model_files_are_one_line_errors_without_output(tmp_path, linear_npz, body, needle):
    f = tmp_path / "bad.py"
    if body is not None:
        f.write_text(body)
    out = tmp_path / "lam.npy"
    r = run(["lambda", str(linear_npz), "--model", f"{f}:MODEL", "--batch-size", "32", "-o", str(out)])
    assert r.exit_code == 1
    msg = r.stderr.strip()
    assert len(msg.splitlines()) == 1 and "Traceback" not in r.stderr
    assert "bad.py" in msg
    assert needle is None or needle in msg, msg
    assert not out.exists()


def test_bad_model_file_line_count_does_not_depend_on_speed(tmp_path, linear_npz, monkeypatch):
    """At threshold 0 every step announces itself (a machine where everything is slow): a failed fit still ends in
    exactly one Error line, says no "done", and the suite's default (conftest: never) prints only that line."""
    f = write(tmp_path, "bad.py", LINEAR_FILE.replace("return (X @ theta - y)[:, None] * X", "return X"))
    args = ["lambda", str(linear_npz), "--model", f"{f}:MODEL", "--batch-size", "32"]
    monkeypatch.setenv("SGTUNE_PROGRESS_AFTER", "0")
    slow = run(args)
    lines = slow.stderr.strip().splitlines()
    assert slow.exit_code == 1 and lines[0] == "fitting θ̂ and expanding (2000 rows) …", slow.stderr
    assert [ln for ln in lines if ln.startswith("Error")] == [lines[-1]] and "done in" not in slow.stderr
    monkeypatch.setenv("SGTUNE_PROGRESS_AFTER", "never")
    fast = run(args)
    assert fast.exit_code == 1 and fast.stderr.strip().splitlines() == [lines[-1]]


def test_progress_threshold_zero_announces_a_good_fit_and_its_end(tmp_path, linear_npz, monkeypatch):
    monkeypatch.setenv("SGTUNE_PROGRESS_AFTER", "0")
    r = run(["lambda", str(linear_npz), "--model", "linear", "--batch-size", "32", "--no-applicability"])
    assert r.exit_code == 0, r.stderr
    assert "fitting θ̂ and expanding (2000 rows) …" in r.stderr
    assert re.search(r"^fitting θ̂ and expanding \(2000 rows\): done in \d+ s$", r.stderr, re.M), r.stderr
    quiet = run(["lambda", str(linear_npz), "--model", "linear", "--batch-size", "32", "--no-applicability", "-q"])
    assert quiet.exit_code == 0 and "fitting θ̂ and expanding (2000 rows) …" in quiet.stderr  # even under -q


def test_progress_threshold_reads_the_environment(monkeypatch):
    from sgtune.cli._io import QUIET_PROGRESS_AFTER, progress_after

    for text, want in (("never", float("inf")), ("inf", float("inf")), ("0", 0.0), ("3.5", 3.5)):
        monkeypatch.setenv("SGTUNE_PROGRESS_AFTER", text)
        assert progress_after(2.0) == want and progress_after(2.0, quiet=True) == want
    for text in ("", "soon", "-1", "nan"):  # unset or unreadable: the defaults
        monkeypatch.setenv("SGTUNE_PROGRESS_AFTER", text)
        assert progress_after(2.0) == 2.0 and progress_after(2.0, quiet=True) == QUIET_PROGRESS_AFTER


def test_wrong_shape_and_nan_name_the_function(tmp_path, linear_npz):
    wrong = LINEAR_FILE.replace("return (X @ theta - y)[:, None] * X", "return (X @ theta - y)[:, None] * X[:, :3]")
    nan = LINEAR_FILE.replace("return 0.5 * r * r", "return 0.5 * r * r + np.nan")
    for text, needle in ((wrong, "per_sample_grads() returned shape"), (nan, "per_sample_losses() returned a non-finite")):
        f = write(tmp_path, "m.py", text)
        r = run(["lambda", str(linear_npz), "--model", f"{f}:MODEL", "--batch-size", "32"])
        assert r.exit_code == 1 and needle in r.stderr and "m.py:MODEL" in r.stderr, r.stderr


def test_checked_call_messages():
    class Bad:
        name = "bad"

        def per_sample_grads(self, theta, X, y):
            raise ZeroDivisionError("oops")

    with pytest.raises(ModelError, match=r"model bad: per_sample_grads\(\) raised ZeroDivisionError: oops"):
        checked_call(Bad(), "per_sample_grads", np.zeros(2), np.zeros((3, 2)), np.zeros(3), shape=(3, 2))
    with pytest.raises(ModelError, match="provides no curvature"):
        per_sample_curvature(Bad(), np.zeros(2), np.zeros((3, 2)), np.zeros(3))


def test_theta_hat_reports_gradient_and_warns_away_from_the_map(tmp_path, logistic_npz):
    r = run(["lambda", str(logistic_npz), "--model", "logistic", "--batch-size", "32", "-q"])
    doc = json.loads(r.stdout)
    theta = np.array(doc["theta_hat"])
    assert doc["gradient_norm"] < 1e-8 and doc["hessian_min_eigenvalue"] > 0
    at_map = tmp_path / "t.npy"
    np.save(at_map, theta)
    r2 = run(["lambda", str(logistic_npz), "--model", "logistic", "--batch-size", "32", "--theta-hat", str(at_map)])
    assert r2.exit_code == 0 and "warning" not in r2.stderr
    np.testing.assert_allclose(json.loads(r2.stdout)["lambda"], doc["lambda"], rtol=1e-12)
    # 1 standard error of θ̂ moves ∇L by about one unit of its own noise; 20 is far outside it
    se = np.sqrt(np.diag(np.array(doc["target_cov"])))
    far = tmp_path / "far.npy"
    np.save(far, theta + 20 * se)
    r3 = run(["lambda", str(logistic_npz), "--model", "logistic", "--batch-size", "32", "--theta-hat", str(far)])
    assert r3.exit_code == 0
    warn = [ln for ln in r3.stderr.splitlines() if ln.startswith("warning:")]
    assert sum("not small" in w for w in warn) == 1 and "not small" in warn[0]
    doc3 = json.loads(r3.stdout)
    # the chain drifts from the given θ̂ towards the MAP, 20 se away: the applicability report says so too
    assert doc3["applicability"]["applicable"] is False
    assert all(w.startswith("warning: not applicable") for w in warn[1:]) and len(warn) >= 2
    assert doc3["gradient_noise_ratio"] > 1 and doc3["gradient_norm"] > 1e-3


def test_theta_hat_indefinite_hessian_is_refused_with_remedies(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=400)
    y = 1.5 * np.tanh(0.8 * x) + 0.3 * rng.normal(size=400)
    data = tmp_path / "p.npz"
    np.savez(data, X=x[:, None], y=y)
    f = write(tmp_path, "prod.py", PRODUCT_FILE)
    zero = tmp_path / "zero.npy"
    np.save(zero, np.zeros(2))
    out = tmp_path / "lam.npy"
    r = run(["lambda", str(data), "--model", f"{f}:MODEL", "--batch-size", "16", "--theta-hat", str(zero),
             "-o", str(out)])
    assert r.exit_code == 1 and not out.exists()
    for needle in ("not positive definite", "`sgtune lambda", "--prior-precision", "other weights"):
        assert needle in r.stderr
    # fitted from the seeded start instead: a strict local minimum, the same as scipy's least squares finds
    r2 = run(["lambda", str(data), "--model", f"{f}:MODEL", "--batch-size", "16", "-q"])
    assert r2.exit_code == 0, r2.stderr
    doc = json.loads(r2.stdout)
    from scipy.optimize import least_squares

    ref = least_squares(lambda t: t[0] * np.tanh(t[1] * x) - y, [2.0, 0.5], xtol=1e-15, ftol=1e-15, gtol=1e-15).x
    np.testing.assert_allclose(np.abs(doc["theta_hat"]), np.abs(ref), rtol=1e-7)
    assert doc["hessian_min_eigenvalue"] > 0 and doc["gradient_norm"] < 1e-9


def test_fit_map_nonconvex_is_deterministic_and_certified():
    ns: dict = {}
    exec(PRODUCT_FILE, ns)
    rng = np.random.default_rng(1)
    x = rng.normal(size=300)
    ds = make_dataset(x[:, None], 0.7 * np.tanh(x) + 0.3 * rng.normal(size=300))
    r1, r2 = fit_map(ns["MODEL"], ds, seed=3), fit_map(ns["MODEL"], ds, seed=3)
    np.testing.assert_array_equal(r1.theta_hat, r2.theta_hat)
    assert r1.grad_norm < 1e-9
    with pytest.raises(NotPositiveDefiniteError):
        expand(ns["MODEL"], ds, theta_hat=np.zeros(2))
    # 1 % off in a: ∇L is 0.27 of its sampling noise (no warning); 5 % off: 1.35 (warned)
    assert expand(ns["MODEL"], ds, theta_hat=r1.theta_hat * np.array([1.01, 1.0])).gradient_z < 1
    with pytest.warns(AccuracyWarning, match="not small"):
        e = expand(ns["MODEL"], ds, theta_hat=r1.theta_hat * np.array([1.05, 1.0]))
    assert e.gradient_z > 1 and e.hessian_min_eigenvalue > 0


def test_jax_adapter_matches_the_glm():
    jnp = pytest.importorskip("jax.numpy")  # [dev] installs JAX; this never skips in CI
    from sgtune.models.autodiff import from_jax

    def loglik(theta, x, y):
        eta = x @ theta
        return y * eta - jnp.logaddexp(0.0, eta)

    ds = example("logistic")
    glm = get_model("logistic")
    theta = fit_map(glm, ds).theta_hat
    for kind in ("exact", "hvp"):
        m = from_jax(loglik, name="logistic-jax", hessian=kind, fit_method="newton")
        np.testing.assert_allclose(m.per_sample_grads(theta, ds.X, ds.y), glm.per_sample_grads(theta, ds.X, ds.y),
                                   rtol=1e-12, atol=1e-14)
        cur = per_sample_curvature(m, theta, ds.X[:50], ds.y[:50])
        assert isinstance(cur, DenseCurvature)
        np.testing.assert_allclose(cur.hessians, glm.per_sample_hessians(theta, ds.X[:50], ds.y[:50]),
                                   rtol=1e-11, atol=1e-14)
    e = expand(from_jax(loglik, fit_method="newton"), ds)
    e_glm = expand(glm, ds)
    np.testing.assert_allclose(e.theta_hat, e_glm.theta_hat, rtol=1e-10)
    np.testing.assert_allclose(e.sandwich_cov(), e_glm.sandwich_cov(), rtol=1e-9)


def test_rank_one_curvature_of_a_glm_is_declared():
    ds = example("logistic")
    cur = per_sample_curvature(get_model("logistic"), np.zeros(ds.dim), ds.X, ds.y)
    assert isinstance(cur, RankOneCurvature)
    np.testing.assert_allclose(cur.weights, 0.25)


def test_glm_ids_match_the_sampler():
    from sgtune.models import GLM_IDS
    from sgtune.sampler.grads import MODEL_IDS

    assert all(MODEL_IDS[k] == v for k, v in GLM_IDS.items())


def test_nonspd_lambda_message_names_the_smallest_eigenvalue(tmp_path):
    lam = tmp_path / "bad.npy"
    np.save(lam, np.diag([0.1, -0.2] + [0.1] * 18))
    out = tmp_path / "cov.npy"
    r = run(["covariance", "--example", "hetero-linear", "--batch-size", "64", "--lambda", str(lam), "-o", str(out)])
    assert r.exit_code == 1 and not out.exists()
    assert "must be symmetric positive definite" in r.stderr and "smallest eigenvalue is -0.2" in r.stderr


def test_overflowing_covariates_name_the_entry_and_standardisation(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    X[5, 1] = 1e300
    data = tmp_path / "huge.npz"
    np.savez(data, X=X, y=rng.normal(size=200))
    r = run(["lambda", str(data), "--model", "linear", "--batch-size", "10"])
    assert r.exit_code == 1
    assert "X[5, 1] = 1e+300 overflows float64" in r.stderr and "standardise the covariates" in r.stderr


def test_dense_mean_jsj_operator_matches_the_loop():
    """The cached D⁴ operator (N > D) and the einsum route (N ≤ D) against Σ_n J_nΣJ_n / N by a loop."""
    rng = np.random.default_rng(5)
    for n, d in ((50, 6), (4, 6)):
        A = rng.normal(size=(n, d, d))
        Hs = A + np.swapaxes(A, 1, 2)
        from sgtune.models import Expansion

        e = Expansion(theta_hat=np.zeros(d), grads=rng.normal(size=(n, d)), prior_precision=np.eye(d),
                      per_sample_hessians=Hs)
        S = rng.normal(size=(d, d))
        S = S @ S.T
        ref = np.mean([J @ S @ J for J in Hs], axis=0)
        for _ in range(2):  # the second call uses the cached operator
            np.testing.assert_allclose(e.mean_jsj(S), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_network_without_weight_decay_fails_with_the_remedies():
    """The (2, 3) diabetes network has no minimiser at finite θ without a prior: L-BFGS runs out and says so."""
    from sklearn.datasets import load_diabetes

    from sgtune.core.errors import ConvergenceError
    from sgtune.models.mlp import make_mlp

    X, y = load_diabetes(return_X_y=True)
    data = make_dataset((X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std())
    with pytest.raises(ConvergenceError, match=r"did not converge.*`prior_precision` > 0.*`theta_hat`"):
        fit_map(make_mlp("2,3"), data, max_iter=20)


def test_unreachable_target_names_the_remedies():
    """SGD on the diabetes network cannot reach the posterior H⁻¹/N (flat directions, little gradient noise)."""
    from sklearn.datasets import load_diabetes

    from sgtune.core.errors import UnstableStepSizeError
    from sgtune.models.mlp import make_mlp

    X, y = load_diabetes(return_X_y=True)
    data = make_dataset((X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std())
    e = expand(make_mlp("2,3"), data, 1.0, seed=0)
    with pytest.raises(UnstableStepSizeError, match=r"out of reach of a stable chain.*SGLD"):
        tune(e, Dynamics(None, 32), target="posterior")
