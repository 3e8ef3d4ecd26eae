"""Multinomial logistic regression: against statsmodels, a dense brute force, logistic regression (K = 2),
finite differences, the compiled oracle's NumPy twin, and through the command line (in memory and out of core)."""
from __future__ import annotations

import json
import shlex
import tracemalloc

import numpy as np
import pytest
from click.testing import CliRunner

import sgtune.models.expansion as exp_mod
from _tolerances import SOLVER_RTOL
from sgtune.cli import main
from sgtune.core.config import Dynamics
from sgtune.core.errors import DataFormatError, NotPositiveDefiniteError, SgtuneError
from sgtune.io.data import encode_labels, load_dataset, make_dataset
from sgtune.models import Expansion, expand, get_model
from sgtune.models.base import BlockCurvature, block_dense, block_matrix
from sgtune.models.multinomial import Multinomial
from sgtune.sampler.multinomial import softmax_value_gradient
from sgtune.sampler.specs import numba_spec_of
from sgtune.theory.linear_chain import variance_kernel
from sgtune.theory.tuning import tune

#: statsmodels and sgtune both fit by Newton to a gradient at rounding level; the brief's agreement target
STATSMODELS_RTOL = 1e-8
#: central finite differences with h = 1e-5 of an O(1) smooth loss: error O(h²·|l'''|) + O(eps/h) ≈ 1e-9
FD_ATOL = 1e-7
#: the compiled gradient and its NumPy twin sum the same terms in different orders: ~1e2·eps
ORACLE_ATOL = 1e-12


def wine(classes=(0, 1, 2), cols=(0, 1, 2)):
    """scikit-learn's packaged wine data (178 rows, 3 cultivars): standardised covariates ``cols``.

    The first three covariates (alcohol, malic acid, ash) overlap between the cultivars, so the
    multinomial MLE exists (all thirteen separate them perfectly)."""
    from sklearn.datasets import load_wine

    d = load_wine()
    keep = np.isin(d.target, classes)
    X = d.data[keep][:, list(cols)]
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, d.target[keep].astype(float), tuple(d.feature_names[c] for c in cols)


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))


# --- 1. statsmodels MNLogit -------------------------------------------------------------------------------

def test_baseline_mle_and_sandwich_equal_statsmodels_mnlogit_hc0():
    sm = pytest.importorskip("statsmodels.api")
    X, y, names = wine()
    ds = make_dataset(X, y, intercept=True, names=names)
    e = expand(Multinomial.from_response(y), ds)
    res = sm.MNLogit(y, ds.X).fit(method="newton", tol=1e-14, maxiter=100, disp=0, cov_type="HC0")
    # statsmodels: params (p, K−1), column k = class k+1 against class 0; its flat order (cov_params) is
    # column-major: entry k·p + i is covariate i of class k+1 — sgtune's class-major θ, mapped explicitly
    p, r = ds.X.shape[1], 2
    order = np.array([k * p + i for k in range(r) for i in range(p)])
    params = np.asarray(res.params)
    theta_sm = np.array([params[i, k] for k in range(r) for i in range(p)])
    cov_sm = np.asarray(res.cov_params())[np.ix_(order, order)]
    assert rel(e.theta_hat, theta_sm) < STATSMODELS_RTOL
    assert rel(e.sandwich_cov(), cov_sm) < STATSMODELS_RTOL
    t = tune(e, Dynamics(None, 32), target="sandwich")
    assert rel(t.target_cov, cov_sm) < STATSMODELS_RTOL
    assert e.parameter_names[:2] == ("class[1].intercept", "class[1].alcohol")


# --- 2. the expansion against a dense brute force ---------------------------------------------------------

def _problem(layout, seed=0, n=40, p=3, labels=(-3.0, 2.0, 5.0, 10.0)):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, p - 1))])
    y = np.array(labels)[np.arange(n) % len(labels)]
    rng.shuffle(y)
    m = Multinomial(labels, layout)
    theta = 0.5 * rng.standard_normal(m.n_params(p))
    return m, X, y, theta


def _brute(m, X, y, theta):
    """g_n and J_n from the definition: softmax over all K logits, explicit Kronecker products."""
    K, r, p = m.n_classes, m.n_blocks, X.shape[1]
    B = theta.reshape(r, p)
    gs, js = [], []
    for x, yy in zip(X, y):
        f = np.concatenate([[0.0], B @ x]) if m.layout == "baseline" else B @ x
        pi = np.exp(f - f.max())
        pi /= pi.sum()
        e = (np.array(m.labels) == yy).astype(float)
        pi, e = pi[K - r:], e[K - r:]
        gs.append(np.kron(pi - e, x))
        js.append(np.kron(np.diag(pi) - np.outer(pi, pi), np.outer(x, x)))
    return np.array(gs), np.array(js)


@pytest.mark.parametrize("layout", ["baseline", "full"])
def test_expansion_against_dense_kronecker_brute_force(layout):
    m, X, y, theta = _problem(layout)
    G, Js = _brute(m, X, y, theta)
    n = X.shape[0]
    gam = 0.7 * np.eye(theta.size)
    e = exp_mod.expansion_at(m, make_dataset(X[:, 1:], y, intercept=True), gam, theta)
    assert e.block is not None and e.structure == "block"
    np.testing.assert_allclose(e.grads, G, rtol=0, atol=1e-14)
    np.testing.assert_allclose(e.curvature, Js.mean(axis=0), rtol=0, atol=1e-14)
    np.testing.assert_allclose(e.hessian, Js.mean(axis=0) + gam / n, rtol=0, atol=1e-14)
    np.testing.assert_allclose(e.fisher, G.T @ G / n, rtol=0, atol=1e-14)
    S = np.random.default_rng(1).standard_normal((theta.size, theta.size))
    S = S @ S.T
    np.testing.assert_allclose(e.mean_jsj(S), np.einsum("nij,jk,nkl->il", Js, S, Js) / n, rtol=0, atol=1e-12)
    kron = sum(np.kron(J, J) for J in Js) / n - np.kron(Js.mean(axis=0), Js.mean(axis=0))
    np.testing.assert_allclose(variance_kernel(e), kron, rtol=0, atol=1e-13)
    # the dense per-sample Hessians agree with the block ones, and each has rank ≤ K − 1
    np.testing.assert_allclose(m.per_sample_hessians(theta, X, y), Js, rtol=0, atol=1e-15)
    assert max(np.linalg.matrix_rank(J, tol=1e-12) for J in Js) <= m.n_classes - 1


def test_block_helpers_against_einsum():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((7, 3))
    W = rng.standard_normal((7, 2, 2))
    W = W + np.swapaxes(W, 1, 2)
    dense = np.array([np.kron(w, np.outer(x, x)) for w, x in zip(W, X)])
    np.testing.assert_allclose(block_dense(X, W), dense, rtol=0, atol=1e-14)
    np.testing.assert_allclose(block_matrix(X, W), dense.sum(axis=0), rtol=0, atol=1e-13)


@pytest.mark.parametrize("layout", ["baseline", "full"])
def test_gradient_and_curvature_against_finite_differences(layout):
    m, X, y, theta = _problem(layout, seed=3, n=12)
    h = 1e-5
    d = theta.size
    G = m.per_sample_grads(theta, X, y)
    Js = m.per_sample_hessians(theta, X, y)
    for j in range(d):
        step = np.zeros(d)
        step[j] = h
        fd = (m.per_sample_losses(theta + step, X, y) - m.per_sample_losses(theta - step, X, y)) / (2 * h)
        np.testing.assert_allclose(G[:, j], fd, rtol=0, atol=FD_ATOL)
        fdg = (m.per_sample_grads(theta + step, X, y) - m.per_sample_grads(theta - step, X, y)) / (2 * h)
        np.testing.assert_allclose(Js[:, :, j], fdg, rtol=0, atol=FD_ATOL)


# --- K = 2: logistic regression ----------------------------------------------------------------------------

def test_two_classes_baseline_is_logistic_regression():
    X, y, names = wine(classes=(0, 1))
    ds = make_dataset(X, y, intercept=True, names=names)
    em = expand(Multinomial.from_response(y + 3.0), make_dataset(X, y + 3.0, intercept=True, names=names))
    el = expand(get_model("logistic"), ds)
    assert em.rank_one  # the two-class softmax declares the GLM's rank-one structure
    for key in ("theta_hat", "curvature", "hessian", "fisher"):
        assert rel(getattr(em, key), getattr(el, key)) < SOLVER_RTOL, key
    lm = tune(em, Dynamics(None, 16), target="sandwich").step_matrix
    ll = tune(el, Dynamics(None, 16), target="sandwich").step_matrix
    assert rel(lm, ll) < SOLVER_RTOL
    assert em.parameter_names == tuple(f"class[4].{n}" for n in ("intercept", *names))


# --- the full layout -----------------------------------------------------------------------------------

def test_full_layout_posterior_with_a_prior_and_no_sandwich():
    X, y, names = wine()
    ds = make_dataset(X, y, intercept=True, names=names)
    m = Multinomial.from_response(y, layout="full")
    with pytest.raises(DataFormatError, match="`layout='full'` needs a `prior_precision` > 0") as info:
        expand(m, ds)
    assert "--" not in str(info.value)  # the Python parameters, not the command line's options
    e = expand(m, ds, 1.0)
    assert e.dim == 3 * 4 and e.hessian_min_eigenvalue > 0
    # J is singular along the shift (the same vector added to every class's coefficients)
    shift = np.kron(np.ones(3), np.array([1.0, 0.3, -0.2, 0.5]))
    assert np.linalg.norm(e.curvature @ shift) < 1e-12 * np.linalg.norm(e.curvature)
    with pytest.raises(NotPositiveDefiniteError, match="no sandwich target") as info:
        tune(e, Dynamics(None, 32), target="sandwich")
    assert "\n" not in str(info.value)
    t = tune(e, Dynamics(None, 32, inv_temperature=2 * ds.n_data), target="posterior")
    assert rel(t.predicted_cov, e.posterior_cov()) < 1e-8
    # θ.reshape(K, p) is the output layer [bias | weights], one row per class
    assert m.parameter_names(("intercept", *names))[4:6] == ("class[1].intercept", "class[1].alcohol")


# --- labels and errors ---------------------------------------------------------------------------------

def test_labels_errors_are_one_line():
    with pytest.raises(DataFormatError, match="at least 2 classes"):
        Multinomial.from_response(np.ones(5))
    m = get_model("multinomial", labels=3)
    assert m.labels == (0.0, 1.0, 2.0)
    X = np.random.default_rng(0).standard_normal((6, 2))
    with pytest.raises(DataFormatError, match="class 2 has no rows"):
        expand(m, make_dataset(X, [0, 1, 0, 1, 0, 1]), 1.0)
    with pytest.raises(DataFormatError, match="y\\[1\\] = 7 is not one of"):
        expand(m, make_dataset(X, [0, 7, 2, 1, 0, 1]), 1.0)
    with pytest.raises(SgtuneError, match="layout must be one of"):
        Multinomial((0, 1), "softmax")
    codes, names = encode_labels(["b", "a", "c", "a"])
    assert names == ("a", "b", "c") and codes.tolist() == [1.0, 0.0, 2.0, 0.0]
    assert encode_labels(["10", "9", "9"])[1] == ("9", "10")  # numbers sort numerically


def test_separable_classes_are_refused_with_the_remedy():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 2))
    y = (X[:, 0] > 0).astype(float) + (X[:, 1] > 1.5)  # class 2 is not separable alone, class 0 is
    with pytest.raises(DataFormatError, match="separable.*`prior_precision=1`"):
        expand(Multinomial.from_response(y), make_dataset(X, y, intercept=True))
    e = expand(Multinomial.from_response(y), make_dataset(X, y, intercept=True), 1.0)
    assert np.all(np.isfinite(e.theta_hat))


# --- 3. the sampler's compiled oracle ----------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["baseline", "full"])
def test_compiled_oracle_equals_the_numpy_gradient(layout):
    m, X, y, theta = _problem(layout, seed=4, n=50)
    kind, ints, floats = numba_spec_of(m, X.shape[1])
    assert kind == "multinomial"
    idx = np.random.default_rng(5).integers(0, X.shape[0], 17).astype(np.int64)
    grad = np.empty(theta.size)
    val = softmax_value_gradient(theta, X, y, idx, idx.size, ints, floats, np.empty(m.n_classes), grad, True)
    np.testing.assert_allclose(grad, m.per_sample_grads(theta, X[idx], y[idx]).mean(axis=0), rtol=0,
                               atol=ORACLE_ATOL)
    assert abs(val - m.per_sample_losses(theta, X[idx], y[idx]).mean()) < ORACLE_ATOL
    # far logits: no overflow, the loss keeps its size
    big = 200.0 * theta
    softmax_value_gradient(big, X, y, idx, idx.size, ints, floats, np.empty(m.n_classes), grad, True)
    np.testing.assert_allclose(grad, m.per_sample_grads(big, X[idx], y[idx]).mean(axis=0), rtol=0, atol=1e-10)


# --- 4. the command line ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wine_csv(tmp_path_factory):
    X, y, names = wine()
    text = np.array(["barolo", "grignolino", "barbera"])[y.astype(int)]
    path = tmp_path_factory.mktemp("wine") / "wine.csv"
    with path.open("w") as fh:
        fh.write(",".join([*names, "cultivar"]) + "\n")
        for row, lab in zip(X.tolist(), text):
            fh.write(",".join([*(repr(v) for v in row), lab]) + "\n")
    return str(path)


def _json(args):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_cli_lambda_with_text_labels_names_the_parameters(wine_csv, tmp_path):
    base = [wine_csv, "--response", "cultivar", "--intercept", "--model", "multinomial"]
    doc = _json(["lambda", *base, "--batch-size", "32", "--target", "sandwich", "-o", str(tmp_path / "lam.npy"),
                 "-q"])
    # classes sort as text: barbera (the reference), barolo, grignolino
    assert doc["classes"] == ["barbera", "barolo", "grignolino"] and doc["reference_class"] == "barbera"
    assert doc["parameter_names"][:2] == ["class[barolo].intercept", "class[barolo].alcohol"]
    assert len(doc["parameter_names"]) == doc["dim"] == 8
    assert np.load(tmp_path / "lam.npy").shape == (8, 8)
    for cmd in (["covariance", *base, "--batch-size", "32", "--lambda", str(tmp_path / "lam.npy")],
                ["plan", *base, "--tolerance", "0.2", "--no-timing"],  # the names never reach its timing runs
                ["run", *base, "--batch-size", "32", "--lambda", str(tmp_path / "lam.npy"), "--steps", "400",
                 "--chains", "2"]):
        assert _json([*cmd, "-q"])["parameter_names"] == doc["parameter_names"]


def test_cli_full_layout_errors_are_one_line(wine_csv):
    base = ["lambda", wine_csv, "--response", "cultivar", "--intercept", "--model", "multinomial", "--layout",
            "full", "--batch-size", "32"]
    for args, match in ((base, "--layout full needs a --prior-precision > 0"),
                        ([*base, "--prior-precision", "1"], "no sandwich target")):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1 and match in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = CliRunner().invoke(main, ["lambda", wine_csv, "--response", "cultivar", "--model", "logistic", "--layout",
                                  "full", "--batch-size", "32"])
    assert r.exit_code != 0 and r.stderr.startswith("Error:")


def test_cli_out_of_core_folder_equals_in_memory(tmp_path):
    X, y, _ = wine()
    X = np.ascontiguousarray(X)
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "X.npy", X)
    np.save(tmp_path / "d" / "y.npy", y.astype(np.int64))
    np.savez(tmp_path / "w.npz", X=X, y=y)
    args = ["--model", "multinomial", "--batch-size", "32", "-q", "--no-applicability"]
    a = _json(["lambda", str(tmp_path / "d"), *args])
    b = _json(["lambda", str(tmp_path / "w.npz"), *args])
    assert rel(a["lambda"], b["lambda"]) < SOLVER_RTOL and a["parameter_names"] == b["parameter_names"]


def test_streamed_expansion_memory_is_independent_of_n(tmp_path, monkeypatch):
    """Peak traced allocations of a streamed multinomial fit + expansion + C̄(Σ) stay O(chunk·D)."""
    monkeypatch.setattr(exp_mod, "CHUNK_ROWS", 2048)
    monkeypatch.setattr(exp_mod, "IDENTIFIABILITY_SAMPLE", 2048)  # the Newton start's random sample: one chunk
    monkeypatch.setenv("SGTUNE_THREADS", "1")
    rng = np.random.default_rng(0)
    n, p = 60_000, 4
    X = rng.standard_normal((n, p))
    B = rng.standard_normal((3, p)) / 2
    f = np.column_stack([np.zeros(n), X @ B.T])
    y = (np.cumsum(np.exp(f) / np.exp(f).sum(axis=1, keepdims=True), axis=1) < rng.random((n, 1))).sum(axis=1)
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "X.npy", X)
    np.save(tmp_path / "d" / "y.npy", y.astype(float))
    data = load_dataset(tmp_path / "d")
    m = Multinomial.from_response(np.arange(4))
    del X, f
    tracemalloc.start()
    e = expand(m, data, 1.0)  # prior > 0: no separation LP in the measurement
    e.mean_jsj(np.eye(e.dim))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert e.grads is None and e.structure == "block"
    assert peak < 40 * 2048 * e.dim * 8, peak  # bound ≈ tens of chunk-sized temporaries
    assert peak < n * e.dim * 8 / 4, peak  # an (N, D) array is never formed


def test_cli_verify_short_run_passes_at_five_percent(wine_csv):
    doc = _json(["verify", wine_csv, "--response", "cultivar", "--intercept", "--model", "multinomial",
                 "--batch-size", "32", "--relative-tolerance", "0.05", "--steps", "6000", "--chains", "8", "-q"])
    assert doc["passed"] is True and doc["z_max"] <= doc["threshold"]


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["baseline", "full"])
def test_cli_verify_default_run_passes_at_five_percent(wine_csv, layout):
    """The tuned chains' covariance is within 5 % (model error, in quadrature with the Monte Carlo error) of
    the prediction at verify's default run length (T = max(20000, 1000·τ_worst), 16 chains)."""
    extra = ([] if layout == "baseline" else
             ["--layout", "full", "--prior-precision", "1", "--target", "posterior", "--inverse-temperature", "2N"])
    doc = _json(["verify", wine_csv, "--response", "cultivar", "--intercept", "--model", "multinomial",
                 "--batch-size", "32", "--relative-tolerance", "0.05", *extra, "-q"])
    assert doc["passed"] is True and doc["relative_frobenius_error"] < 0.05


def test_expansion_refuses_two_curvature_structures():
    m, X, y, theta = _problem("baseline", n=10)
    cur = m.curvature(theta, X, y)
    assert isinstance(cur, BlockCurvature)
    g = m.per_sample_grads(theta, X, y)
    with pytest.raises(SgtuneError, match="exactly one of"):
        Expansion(theta_hat=theta, grads=g, prior_precision=np.zeros((theta.size, theta.size)), block=cur,
                  per_sample_hessians=m.per_sample_hessians(theta, X, y))


@pytest.mark.filterwarnings("ignore::sgtune.core.errors.AccuracyWarning")  # structured families miss the wine sandwich (the warning is tested in test_tuning_families.py); here only success/refusal
def test_every_tuning_method_and_family_behaves_as_for_logistic_regression():
    """The multinomial expansion goes through tune() like a GLM's: each (method, family) succeeds for both
    models or is refused for both (the comparison theories give dense Λ only; lr-ws is Gaussian-only)."""
    from sgtune.theory.tuning import FAMILIES, METHODS

    X, y, names = wine()
    em = expand(Multinomial.from_response(y), make_dataset(X, y, intercept=True, names=names))
    el = expand(get_model("logistic"), make_dataset(X, (y > 0).astype(float), intercept=True, names=names))
    for method in METHODS:
        for family in FAMILIES:
            outcome = []
            for e, blocks in ((em, None), (el, [[0, 1], [2, 3]])):  # the multinomial's default blocks: its classes
                try:
                    t = tune(e, Dynamics(None, 32), target="sandwich", method=method, family=family,
                             blocks=blocks if family == "block" else None)
                    outcome.append(bool(np.all(np.isfinite(t.step_matrix)) and t.step_matrix.shape == (e.dim,) * 2))
                except SgtuneError as exc:
                    outcome.append(type(exc).__name__)
            assert outcome[0] == outcome[1], (method, family, outcome)


@pytest.mark.parametrize("dense", [False, True])
def test_streamed_variance_kernel_against_kronecker_brute_force(tmp_path, dense):
    """Out of core, the block stream and the forced-dense stream give mean_n J_n ⊗ J_n − J ⊗ J of the explicit
    Hessians (J_n of rank K − 1 > 1: vec(J_n)vec(J_n)ᵀ is not J_n ⊗ J_n, the rearrangement matters)."""
    m, X, y, _ = _problem("baseline", seed=6, n=80)
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "X.npy", np.ascontiguousarray(X))
    np.save(tmp_path / "d" / "y.npy", y)
    e = expand(m, load_dataset(tmp_path / "d"), 1.0, dense_hessians=dense)
    assert e.stream is not None and e.structure == ("dense" if dense else "block")
    _, Js = _brute(m, X, y, e.theta_hat)
    kern = sum(np.kron(J, J) for J in Js) / len(Js) - np.kron(Js.mean(axis=0), Js.mean(axis=0))
    np.testing.assert_allclose(variance_kernel(e), kern, rtol=0, atol=1e-12 * np.abs(kern).max())


def test_text_labels_from_csv_folder_and_parquet_agree(wine_csv, tmp_path):
    """Text labels are encoded the same way in memory (CSV) and out of core (a folder's y.npy of strings,
    a Parquet string column): the same classes, θ̂ and J."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    X, y, names = wine()
    text = np.array(["barolo", "grignolino", "barbera"])[y.astype(int)]
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "X.npy", np.ascontiguousarray(X))
    np.save(tmp_path / "d" / "y.npy", text)
    pq.write_table(pa.table({**{n: X[:, j] for j, n in enumerate(names)}, "cultivar": text}), tmp_path / "w.parquet")
    sets = [load_dataset(wine_csv, response="cultivar", categorical_response=True),
            load_dataset(tmp_path / "d", categorical_response=True),
            load_dataset(tmp_path / "w.parquet", response="cultivar", categorical_response=True)]
    assert [ds.classes for ds in sets] == [("barbera", "barolo", "grignolino")] * 3
    assert [ds.out_of_core for ds in sets] == [False, True, True]
    es = [expand(Multinomial.from_response(ds.y, class_names=ds.classes), ds) for ds in sets]
    for e in es[1:]:
        assert rel(e.theta_hat, es[0].theta_hat) < SOLVER_RTOL and rel(e.curvature, es[0].curvature) < SOLVER_RTOL
    with pytest.raises(DataFormatError, match="not a number"):
        load_dataset(wine_csv, response="cultivar")  # other models: a text response stays an error


def _labelled_csv(path, labels, X):
    with path.open("w") as fh:
        fh.write("a,b,c,label\n")
        for row, lab in zip(X.tolist(), labels):
            fh.write(",".join([*(repr(v) for v in row), lab]) + "\n")
    return str(path)


@pytest.mark.parametrize("missing", ["", "NA", "nan", "NaN", "null", "N/A", " na "])
@pytest.mark.parametrize("kind", ["text", "numbers"])
def test_missing_class_labels_are_refused_with_their_lines(tmp_path, missing, kind):
    """A missing label never becomes a class (sorted first, it would be the reference class): one line naming
    the CSV lines (header = line 1), for text labels and for numeric labels alike."""
    X, y, _ = wine()
    labels = list((np.array(["barolo", "grignolino", "barbera"]) if kind == "text" else np.array(["0", "1", "2"]))
                  [y.astype(int)])
    labels[4] = labels[9] = missing
    csv = _labelled_csv(tmp_path / "w.csv", labels, X)
    r = CliRunner().invoke(main, ["lambda", csv, "--response", "label", "--model", "multinomial", "--batch-size",
                                  "32", "-q"])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "2 class labels are missing" in r.stderr and "lines 6, 11" in r.stderr and "'label'" in r.stderr, r.stderr


def test_numeric_labels_stay_numeric(tmp_path):
    X, y, _ = wine()
    labels = [str(int(v) * 5) for v in y]  # 0, 5, 10: numeric order, not text order ("10" < "5")
    doc = _json(["lambda", _labelled_csv(tmp_path / "w.csv", labels, X), "--response", "label", "--model",
                 "multinomial", "--batch-size", "32", "-q", "--no-applicability"])
    assert doc["classes"] == ["0", "5", "10"] and doc["reference_class"] == "0"


def test_missing_labels_in_parquet_and_folders_are_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    X, y, names = wine()
    text = np.array(["barolo", "grignolino", "barbera"])[y.astype(int)].astype(object)
    for k, missing in enumerate((None, "NA", "")):
        lab = text.copy()
        lab[7] = missing
        f = tmp_path / f"w{k}.parquet"
        pq.write_table(pa.table({**{n: X[:, j] for j, n in enumerate(names)}, "cultivar": pa.array(list(lab))}), f)
        with pytest.raises(DataFormatError, match=r"1 class label is missing .* at row 7;"):
            load_dataset(f, response="cultivar", categorical_response=True)
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "X.npy", np.ascontiguousarray(X))
    lab = text.astype(str)
    lab[3] = "nan"
    np.save(tmp_path / "d" / "y.npy", lab)
    with pytest.raises(DataFormatError, match=r"y.npy: 1 class label is missing .* at row 3;"):
        load_dataset(tmp_path / "d", categorical_response=True)
    with pytest.raises(DataFormatError, match="at rows 0, 2"):
        encode_labels(["", "a", None, "b"])


def test_last_layer_softmax_takes_text_labels_like_multinomial(tmp_path):
    """--model last-layer --likelihood softmax reads text labels as --model multinomial does (sorted label order =
    class index), so the same file gives the same answer as its integer-coded twin."""
    X, y, _ = wine()
    feats = tmp_path / "phi.npy"
    np.save(feats, X)
    text = _labelled_csv(tmp_path / "t.csv", list(np.array(["barbera", "barolo", "grignolino"])[y.astype(int)]), X)
    codes = _labelled_csv(tmp_path / "c.csv", [str(int(v)) for v in y], X)
    args = ["--response", "label", "--model", "last-layer", "--likelihood", "softmax", "--features", str(feats),
            "--prior-precision", "1", "--target", "posterior", "--inverse-temperature", "2N", "--batch-size", "32", "-q",
            "--no-applicability"]
    a, b = _json(["lambda", text, *args]), _json(["lambda", codes, *args])
    assert a["lambda"] == b["lambda"]


def test_cli_full_layout_unreachable_posterior_prints_the_command_that_runs(wine_csv):
    """SGD cannot spread the full layout's chain along the softmax's shift (no gradient noise there): the error
    prints the SGLD command (README: errors with a computed way out print it), and that command runs."""
    base = ["lambda", wine_csv, "--response", "cultivar", "--intercept", "--model", "multinomial", "--layout",
            "full", "--batch-size", "32", "--prior-precision", "1", "--target", "posterior", "-q"]
    r = CliRunner().invoke(main, base)
    assert r.exit_code == 1 and "out of reach" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    command = r.stderr.rsplit("`", 2)[-2]
    assert command.startswith("sgtune lambda ") and "--inverse-temperature" in command, r.stderr
    _json(shlex.split(command)[1:])
