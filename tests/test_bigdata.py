"""Issue 13: data out of core (folders, Parquet), chunked reductions, Dask — same numbers everywhere.

Independent routes: in-memory arrays through the unchanged in-memory path (full-array BLAS),
dense per-sample Hessians summed by einsum, and plain ``np.sum`` over the whole array.
Chunks are made small (CHUNK = 97 rows, a prime that does not divide N) so every reduction
crosses many chunk and group boundaries.
"""
from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from click.testing import CliRunner

from tests.reference import chain_kw
from sgtune.core.config import Dynamics, RunSpec
import sgtune.io.data as data_mod
import sgtune.models.expansion as exp_mod
from sgtune.cli import main
from sgtune.io.data import example, load_dataset, make_dataset
from sgtune.core.errors import DataFormatError
from sgtune.models import expand, fit_map, get_model
from sgtune.io.reduce import (GROUP_CHUNKS, NpyFile, RowSource, SchedulerError, chunk_bounds, get_client,
                           reduce_rows)
from sgtune.sampler import run_chains
from sgtune.theory.stationary import predict_stationary_cov
from sgtune.theory.tuning import tune
from sgtune.core.config import Dynamics

#: backends agree to this relative accuracy (issue 13 target)
BACKEND_RTOL = 1e-10
CHUNK = 97


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(exp_mod, "CHUNK_ROWS", CHUNK)
    monkeypatch.setattr(data_mod, "CHUNK_ROWS", CHUNK)


def save_folder(path, X, y):
    path.mkdir(parents=True, exist_ok=True)
    np.save(path / "X.npy", np.ascontiguousarray(X, dtype=np.float64))
    np.save(path / "y.npy", y)
    return path


def save_parquet(path, X, y, names=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = names or [f"c{i}" for i in range(X.shape[1])]
    cols = {n: X[:, i] for i, n in enumerate(names)}
    cols["y"] = y
    pq.write_table(pa.table(cols), path, row_group_size=251)  # row groups unrelated to the chunks
    return path


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


# --- loading and chunked validation -----------------------------------------------------------

def test_folder_is_memory_mapped_and_equal_to_the_arrays(tmp_path):
    ds = example("logistic")
    f = load_dataset(save_folder(tmp_path / "d", ds.X, ds.y))
    assert isinstance(f.X, np.memmap) and f.out_of_core and not ds.out_of_core
    np.testing.assert_array_equal(f.X, ds.X)
    np.testing.assert_array_equal(f.y, ds.y)
    assert f.rows.read(10, 20)[0].tolist() == ds.X[10:20].tolist()
    sub = f.subsample(50, np.random.default_rng(3))
    ref = ds.subsample(50, np.random.default_rng(3))
    assert not sub.out_of_core and type(sub.X) is np.ndarray
    np.testing.assert_array_equal(sub.X, ref.X)
    np.testing.assert_array_equal(sub.y, ref.y)
    assert f.X.mode == "c"  # copy-on-write: the file is never modified
    f.X[0, 0] = 123.0
    assert np.load(tmp_path / "d" / "X.npy")[0, 0] == ds.X[0, 0]


def test_folder_intercept_and_integer_labels(tmp_path, small_chunks):
    ds = example("logistic")
    f = load_dataset(save_folder(tmp_path / "d", ds.X, ds.y.astype(np.int8)), intercept=True)
    ref = make_dataset(ds.X, ds.y, intercept=True)
    np.testing.assert_array_equal(f.X, ref.X)
    np.testing.assert_array_equal(f.y, ref.y)
    assert f.names[0] == "intercept" and f.out_of_core


@pytest.mark.parametrize("row,col", [(0, 0), (500, 3), (1999, 4)])
def test_nan_reported_with_its_row_in_any_chunk(tmp_path, small_chunks, row, col):
    ds = example("logistic")
    X = ds.X.copy()
    X[row, col] = np.nan
    with pytest.raises(DataFormatError, match=rf"X has a non-finite value \(NaN or inf\) at row {row}, column {col}"):
        load_dataset(save_folder(tmp_path / "d", X, ds.y))


@pytest.mark.parametrize("mutate,match", [
    (lambda X, y: (X.astype(np.float32), y), "must be a C-order float64 array"),
    (lambda X, y: (np.asfortranarray(X), y), "Fortran order"),
    (lambda X, y: (X, y[:-1]), "X has 2000 rows but y has 1999 entries"),
    (lambda X, y: (X[:, :, None], y), "must be a 2-D array"),
    (lambda X, y: (X, np.where(np.arange(2000) == 7, np.inf, y)), "y has a non-finite value .* at row 7"),
])
def test_folder_bad_inputs_are_one_line_errors(tmp_path, mutate, match):
    ds = example("logistic")
    X, y = mutate(ds.X, ds.y)
    p = tmp_path / "d"
    p.mkdir()
    np.save(p / "X.npy", X)
    np.save(p / "y.npy", y)
    with pytest.raises(DataFormatError, match=match):
        load_dataset(p)


def test_folder_missing_file(tmp_path):
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "X.npy", np.ones((3, 2)))
    with pytest.raises(DataFormatError, match="y.npy is missing"):
        load_dataset(tmp_path / "d")


def test_parquet_equals_arrays_and_names_columns(tmp_path, small_chunks):
    ds = example("poisson")
    f = load_dataset(save_parquet(tmp_path / "d.parquet", ds.X, ds.y, names=list("abcde")), intercept=True)
    np.testing.assert_array_equal(f.X, make_dataset(ds.X, ds.y, intercept=True).X)
    np.testing.assert_array_equal(f.y, ds.y)
    assert f.names == ("intercept", *"abcde") and f.out_of_core


def test_parquet_null_and_text_columns(tmp_path, small_chunks):
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = [1.0, 2.0, None, 4.0] * 100
    pq.write_table(pa.table({"a": x, "y": [0.0, 1.0] * 200}), tmp_path / "n.parquet", row_group_size=50)
    with pytest.raises(DataFormatError, match="column 'a' is missing \\(null\\) at row 2"):
        load_dataset(tmp_path / "n.parquet")
    pq.write_table(pa.table({"a": ["u", "v"], "y": [0.0, 1.0]}), tmp_path / "s.parquet")
    with pytest.raises(DataFormatError, match="column 'a' has type string"):
        load_dataset(tmp_path / "s.parquet")
    pq.write_table(pa.table({"a": [1.0, 2.0], "t": [0.0, 1.0]}), tmp_path / "r.parquet")
    with pytest.raises(DataFormatError, match="no response column 'y'"):
        load_dataset(tmp_path / "r.parquet")


# --- the reduction engine ---------------------------------------------------------------------

def _sum_and_gram(X, y):
    return X.sum(axis=0), X.T @ X, np.array([y.sum()])


def test_reduce_rows_matches_whole_array_sums_and_is_thread_count_invariant(tmp_path, monkeypatch, rng):
    X = rng.standard_normal((5000, 7))
    y = rng.standard_normal(5000)
    p = save_folder(tmp_path / "d", X, y)
    src = RowSource(NpyFile.open(p / "X.npy", "X"), NpyFile.open(p / "y.npy", "y"))
    assert chunk_bounds(5000, CHUNK)[-1] == (5000 - 5000 % CHUNK, 5000)
    assert len(chunk_bounds(5000, CHUNK)) > 5 * GROUP_CHUNKS  # several groups
    results = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("SGTUNE_THREADS", threads)
        results.append(reduce_rows(_sum_and_gram, src, chunk_rows=CHUNK))
    results.append(reduce_rows(_sum_and_gram, src, chunk_rows=CHUNK, scheduler="serial"))
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            np.testing.assert_array_equal(a, b)  # same bits for any number of threads
    s, G, ys = results[0]
    np.testing.assert_allclose(s, X.sum(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(G, X.T @ X, rtol=1e-12)
    np.testing.assert_allclose(ys[0], y.sum(), rtol=1e-12)
    # an in-memory source gives the same bits as the file-backed one
    mem = reduce_rows(_sum_and_gram, RowSource(X, y), chunk_rows=CHUNK)
    for a, b in zip(mem, results[0]):
        np.testing.assert_array_equal(a, b)


def test_bounded_memory_of_the_streamed_expansion(tmp_path, monkeypatch, rng):
    """Peak traced allocations of a streamed fit + expansion stay O(chunk·D), far below N·D."""
    monkeypatch.setattr(exp_mod, "CHUNK_ROWS", 2048)
    monkeypatch.setenv("SGTUNE_THREADS", "1")
    n, d = 100_000, 8
    X = rng.standard_normal((n, d))
    theta = rng.standard_normal(d) / 3
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ theta))).astype(float)
    f = load_dataset(save_folder(tmp_path / "d", X, y))
    m = get_model("logistic")
    del X
    tracemalloc.start()
    e = expand(m, f, 1.0)  # prior > 0: no identifiability LP in the measurement
    e.mean_jsj(np.eye(d))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert e.grads is None and e.stream is not None
    assert peak < 40 * 2048 * d * 8, peak  # bound ≈ tens of chunk-sized temporaries
    assert peak < n * d * 8 / 2  # an (N, D) array is never formed


# --- determinism across backends --------------------------------------------------------------

@pytest.fixture(scope="module")
def dask_client():
    """The per-process local cluster, closed when this module ends: left to the interpreter's exit, its two
    worker processes (and their heartbeats) stayed alive beside the rest of the run on the same cores.
    ``get_client`` starts a fresh one if anything later asks for it (a closed client is not reused)."""
    client = get_client("local")
    yield client
    cluster = client.cluster
    client.close()
    cluster.close()


def _logistic_data(n, d, seed):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    theta = 2 * r.standard_normal(d) / np.sqrt(d)
    return X, (r.random(n) < 1 / (1 + np.exp(-X @ theta))).astype(float)


@pytest.mark.parametrize("name", ["logistic", "linear", "poisson"])
def test_expansion_and_lambda_agree_in_memory_folder_parquet(tmp_path, small_chunks, name):
    ds = example({"linear": "hetero-linear"}.get(name, name))
    ds = make_dataset(ds.X[:, :6], ds.y)  # D ≤ 6 keeps the direct solve's eigenvalues cheap
    model = get_model(name)
    e_mem = expand(model, ds, 0.5)
    e_dir = expand(model, load_dataset(save_folder(tmp_path / "d", ds.X, ds.y)), 0.5)
    e_pq = expand(model, load_dataset(save_parquet(tmp_path / "d.parquet", ds.X, ds.y)), 0.5)
    assert e_dir.n_samples == ds.n_data and e_dir.rank_one
    for e in (e_dir, e_pq):
        for attr in ("theta_hat", "curvature", "fisher", "mean_grad", "hessian"):
            assert rel(getattr(e, attr), getattr(e_mem, attr)) < BACKEND_RTOL, attr
        if name == "linear":
            assert abs(e.residual_variance / e_mem.residual_variance - 1) < BACKEND_RTOL
        S = e_mem.sandwich_cov() * ds.n_data
        assert rel(e.mean_jsj(S), e_mem.mean_jsj(S)) < BACKEND_RTOL
    t_mem = tune(e_mem, Dynamics(None, 32))
    for e in (e_dir, e_pq):
        t = tune(e, Dynamics(None, 32))
        assert rel(t.step_matrix, t_mem.step_matrix) < BACKEND_RTOL
        assert rel(t.predicted_cov, t_mem.predicted_cov) < BACKEND_RTOL
        assert abs(t.spectral_radius - t_mem.spectral_radius) < 1e-8


def test_streamed_mean_jsj_against_dense_hessians(tmp_path, small_chunks, rng):
    """Independent route: mean_n J_nΣJ_n from explicit (N, D, D) Hessians; also the forced-dense stream."""
    X, y = _logistic_data(600, 4, 1)
    f = load_dataset(save_folder(tmp_path / "d", X, y))
    m = get_model("logistic")
    e = expand(m, f)
    Hs = m.per_sample_hessians(e.theta_hat, X, y)
    A = rng.standard_normal((4, 4))
    S = A @ A.T
    ref = np.einsum("nij,jk,nkl->il", Hs, S, Hs) / 600
    np.testing.assert_allclose(e.mean_jsj(S), ref, rtol=1e-12)
    np.testing.assert_allclose(e.curvature, Hs.mean(axis=0), rtol=1e-12)
    e_dense = expand(m, f, dense_hessians=True)
    assert not e_dense.rank_one
    np.testing.assert_allclose(e_dense.mean_jsj(S), ref, rtol=1e-12)


def test_iterative_path_above_the_direct_dimension(tmp_path, small_chunks):
    """D = 24 > DIRECT_MAX_DIM: the GMRES/ARPACK operator applications stream C̄(Σ)."""
    X, y = _logistic_data(1500, 24, 2)
    m = get_model("logistic")
    e_mem = expand(m, make_dataset(X, y), 1.0)
    e_dir = expand(m, load_dataset(save_folder(tmp_path / "d", X, y)), 1.0)
    lam = 0.5 * np.linalg.inv(e_mem.hessian) / 24
    c_mem = predict_stationary_cov(e_mem, Dynamics(lam, 16))
    c_dir = predict_stationary_cov(e_dir, Dynamics(lam, 16))
    assert rel(c_dir.cov, c_mem.cov) < BACKEND_RTOL
    # streamed: the certified bound (no data pass) instead of ARPACK; it must bound the exact radius
    assert c_dir.spectral_radius_is_bound and not c_mem.spectral_radius_is_bound
    assert c_mem.spectral_radius <= c_dir.spectral_radius < 1
    assert c_dir.spectral_radius - c_mem.spectral_radius < 1e-3  # and be tight here


def test_dask_gives_the_same_bits_as_in_process(tmp_path, small_chunks, dask_client):
    X, y = _logistic_data(1200, 6, 3)
    f = load_dataset(save_folder(tmp_path / "d", X, y))
    m = get_model("logistic")
    e_loc = expand(m, f)
    e_dask = expand(m, f, scheduler="local")
    assert e_dask.stream.scheduler == "local"
    for attr in ("theta_hat", "curvature", "fisher", "mean_grad"):
        np.testing.assert_array_equal(getattr(e_dask, attr), getattr(e_loc, attr))
    t_loc, t_dask = tune(e_loc, Dynamics(None, 16)), tune(e_dask, Dynamics(None, 16))
    assert rel(t_dask.step_matrix, t_loc.step_matrix) < 1e-13
    assert rel(t_dask.predicted_cov, t_loc.predicted_cov) < 1e-13
    # and both agree with the in-memory path
    assert rel(t_dask.step_matrix, tune(expand(m, make_dataset(X, y)), Dynamics(None, 16)).step_matrix) < BACKEND_RTOL


def test_bad_scheduler_address_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv("SGTUNE_DASK_TIMEOUT", "1s")
    with pytest.raises(SchedulerError, match="cannot connect to the Dask scheduler"):
        get_client("tcp://127.0.0.1:9")


def test_streamed_fit_refuses_separable_data_on_the_sample(tmp_path, small_chunks):
    X = np.random.default_rng(4).standard_normal((300, 3))
    y = (X[:, 0] + X[:, 1] > 0).astype(float)
    f = load_dataset(save_folder(tmp_path / "d", X, y))
    with pytest.raises(DataFormatError, match="linearly separable"):
        fit_map(get_model("logistic"), f)


# --- sampler reads its minibatches from the memory map -----------------------------------------

def test_sampler_on_memory_mapped_rows_equals_in_memory(tmp_path, small_chunks):
    ds = example("logistic")
    f = load_dataset(save_folder(tmp_path / "d", ds.X, ds.y))
    kw = dict(batch_size=32, n_steps=400, n_chains=2, seed=5)
    e = expand(get_model("logistic"), ds)
    lam = 0.2 * np.linalg.inv(e.hessian) / ds.n_data ** 0.5
    r_mem = run_chains("logistic", ds, **chain_kw(lam, initial=e.theta_hat, **kw))
    r_map = run_chains("logistic", f, **chain_kw(lam, initial=e.theta_hat, **kw))
    np.testing.assert_array_equal(r_map.mean, r_mem.mean)
    np.testing.assert_array_equal(r_map.cov, r_mem.cov)


# --- command line -------------------------------------------------------------------------------

def test_cli_lambda_on_a_folder_with_and_without_dask(tmp_path, small_chunks, dask_client):
    ds = example("logistic")
    np.savez(tmp_path / "d.npz", X=ds.X, y=ds.y)
    folder = save_folder(tmp_path / "d", ds.X, ds.y)
    docs = []
    for args in ([str(tmp_path / "d.npz")], [str(folder)], [str(folder), "--scheduler", "local"]):
        r = CliRunner().invoke(main, ["lambda", *args, "--model", "logistic", "--batch-size", "32", "-q"])
        assert r.exit_code == 0, r.output
        docs.append(json.loads(r.stdout))
    for doc in docs[1:]:
        assert rel(doc["lambda"], docs[0]["lambda"]) < BACKEND_RTOL
        assert rel(doc["predicted_cov"], docs[0]["predicted_cov"]) < BACKEND_RTOL
        assert doc["n_data"] == 2000 and doc["data"] == str(folder)


def test_cli_folder_errors_exit_1_without_output(tmp_path, monkeypatch):
    monkeypatch.setenv("SGTUNE_DASK_TIMEOUT", "1s")
    ds = example("logistic")
    X = ds.X.copy()
    X[1234, 2] = np.inf
    folder = save_folder(tmp_path / "d", X, ds.y)
    out = tmp_path / "lam.npy"
    r = CliRunner().invoke(main, ["lambda", str(folder), "--model", "logistic", "--batch-size", "32",
                                  "-o", str(out)])
    assert r.exit_code == 1 and not out.exists()
    assert "at row 1234, column 2" in r.output and "Traceback" not in r.output
    good = save_folder(tmp_path / "g", ds.X, ds.y)
    r = CliRunner().invoke(main, ["lambda", str(good), "--model", "logistic", "--batch-size", "32",
                                  "--scheduler", "tcp://127.0.0.1:9"])
    assert r.exit_code == 1 and "cannot connect to the Dask scheduler" in r.output


# --- minibatch-error streams too ----------------------------------------------------------------

@pytest.mark.parametrize("replacement", [True, False])
def test_streamed_minibatch_error_equals_in_memory(tmp_path, small_chunks, replacement):
    from sgtune.theory.minibatch import minibatch_error

    ds = example("logistic")
    f = load_dataset(save_folder(tmp_path / "d", ds.X, ds.y))
    m = get_model("logistic")
    theta = fit_map(m, ds).theta_hat + 0.05
    r_mem = minibatch_error(m, ds, theta, 16, prior_precision=0.5, replacement=replacement)
    r_dir = minibatch_error(m, f, theta, 16, prior_precision=0.5, replacement=replacement)
    for attr in ("frob2_sgld", "frob2_sglrw", "frob2_sgld_gaussian", "frob2_sglrw_gaussian", "noise_cov_trace"):
        assert abs(getattr(r_dir, attr) / getattr(r_mem, attr) - 1) < BACKEND_RTOL, attr
    assert rel(r_dir.expected_m_sgld, r_mem.expected_m_sgld) < BACKEND_RTOL
    assert rel(r_dir.grad_potential, r_mem.grad_potential) < BACKEND_RTOL


def test_cli_minibatch_error_on_a_folder(tmp_path, small_chunks):
    ds = example("logistic")
    np.savez(tmp_path / "d.npz", X=ds.X, y=ds.y)
    folder = save_folder(tmp_path / "d", ds.X, ds.y)
    docs = []
    for data in (tmp_path / "d.npz", folder):
        r = CliRunner().invoke(main, ["minibatch-error", str(data), "--model", "logistic", "--batch-size", "8",
                                      "-q"])
        assert r.exit_code == 0, r.output
        docs.append(json.loads(r.stdout))
    for k in ("frob2_sgld", "frob2_sglrw", "ratio"):
        assert abs(docs[1][k] / docs[0][k] - 1) < BACKEND_RTOL


# --- sweeps over Dask ---------------------------------------------------------------------------

def _sweep_point(batch_size, method, seed):
    """A calibrate-like sweep task: tune Λ for (B, method), run seeded chains with it."""
    ds = example("logistic")
    e = expand(get_model("logistic"), ds)
    t = tune(e, Dynamics(None, batch_size), method=method)
    r = run_chains("logistic", ds, Dynamics(t.step_matrix, batch_size), RunSpec(300, n_chains=2, seed=seed),
                   initial=e.theta_hat)
    return t.step_matrix, r.cov


def test_map_grid_sweep_is_identical_serially_and_on_dask(dask_client):
    from sgtune.io.reduce import map_grid, task_seeds

    grid = [{"batch_size": b, "method": m} for b in (16, 64) for m in ("dq-exact", "ct")]
    serial = map_grid(_sweep_point, grid, seed=11)
    dask = map_grid(_sweep_point, grid, seed=11, scheduler="local")
    for (l1, c1), (l2, c2) in zip(serial, dask):
        np.testing.assert_array_equal(l1, l2)
        np.testing.assert_array_equal(c1, c2)
    seeds = task_seeds(11, 4)
    assert len(set(seeds)) == 4 and seeds == task_seeds(11, 4) and task_seeds(11, 5)[:4] == seeds
    # each task used its own seed: the chains differ between grid points with the same Λ family
    assert not np.array_equal(serial[0][1], serial[1][1])


@pytest.mark.slow
def test_peak_rss_of_sgtune_lambda_below_the_size_of_x(tmp_path):
    """Slow version of test_bounded_memory_…: a real process, X = 549 MiB on disk, peak RSS < 350 MiB."""
    import os
    import subprocess
    import sys

    n, d = 3_000_000, 24  # D > 20: the matrix-free forward solve (C̄(Σ) streamed at each application)
    folder = tmp_path / "big"
    folder.mkdir()
    r = np.random.default_rng(0)
    theta = r.standard_normal(d) / np.sqrt(d)
    y = np.empty(n)
    with open(folder / "X.npy", "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (n, d)})
        for a in range(0, n, 1 << 18):
            xb = r.standard_normal((min(n, a + (1 << 18)) - a, d))
            fh.write(xb.tobytes())
            y[a:a + len(xb)] = (r.random(len(xb)) < 1 / (1 + np.exp(-xb @ theta))).astype(float)
    np.save(folder / "y.npy", y)
    code = ("import resource, sys; from sgtune.cli import main\n"
            f"main(['lambda', {str(folder)!r}, '--model', 'logistic', '--batch-size', '500', '-q', '--json', "
            f"{str(tmp_path / 'o.json')!r}], standalone_mode=False)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd())
    assert p.returncode == 0, p.stderr[-2000:]
    peak_mib = int(p.stdout.strip().splitlines()[-1]) / 1024
    assert peak_mib < 350, peak_mib  # X alone is 549 MiB
    doc = json.loads((tmp_path / "o.json").read_text())
    assert doc["n_data"] == n and doc["residual"] < 1e-10


# --- noise-anisotropy streams; lambda's pass count -----------------------------------------------

@pytest.fixture
def tiny_reduce_chunks(monkeypatch):
    """Chunks of 97 rows for the reductions that take sgtune.io.reduce.CHUNK_ROWS at call time."""
    import sgtune.io.reduce as reduce_mod

    monkeypatch.setattr(reduce_mod, "CHUNK_ROWS", CHUNK)


@pytest.mark.parametrize("replacement", [True, False])
def test_streamed_noise_anisotropy_equals_in_memory_and_np_cov(tmp_path, tiny_reduce_chunks, replacement):
    from sgtune.io.reduce import pass_counts, reset_pass_counts
    from sgtune.theory.minibatch import noise_anisotropy

    X, y = _logistic_data(1500, 6, 4)
    X[:, 2] += 3.0  # a large mean gradient in one coordinate: the shifted sums must still cancel exactly
    m = get_model("logistic")
    f = load_dataset(save_folder(tmp_path / "d", X, y))
    theta = fit_map(m, make_dataset(X, y)).theta_hat + 0.3  # away from the MAP: ū ≠ 0
    reset_pass_counts()
    r_dir = noise_anisotropy(m, f, theta, 16, replacement=replacement)
    assert pass_counts() == {"_chunk_shifted_moments": 1}  # one pass, never the (N, D) gradients
    r_mem = noise_anisotropy(m, make_dataset(X, y), theta, 16, replacement=replacement)
    assert rel(r_dir.noise_cov, r_mem.noise_cov) < BACKEND_RTOL
    # independent route: numpy's population covariance of the per-sample gradients
    u = m.per_sample_grads(theta, X, y)
    assert np.abs(u.mean(axis=0)).max() > 0.1
    f_wor = 1.0 if replacement else (1500 - 16) / (1500 - 1)
    ref = 1500**2 / 16 * f_wor * np.cov(u.T, bias=True)
    assert rel(r_dir.noise_cov, ref) < BACKEND_RTOL
    np.testing.assert_allclose(r_dir.diagonal_preconditioner, r_mem.diagonal_preconditioner, rtol=1e-10)


def test_bounded_memory_of_the_streamed_noise_anisotropy(tmp_path, monkeypatch, rng):
    """Peak traced allocations O(chunk·D + D²): far below one (N, D) array of gradients."""
    import sgtune.io.reduce as reduce_mod
    from sgtune.theory.minibatch import noise_anisotropy

    monkeypatch.setattr(reduce_mod, "CHUNK_ROWS", 2048)
    monkeypatch.setenv("SGTUNE_THREADS", "1")
    n, d = 100_000, 8
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 0.5).astype(float)
    f = load_dataset(save_folder(tmp_path / "d", X, y))
    del X
    tracemalloc.start()
    noise_anisotropy(get_model("logistic"), f, np.zeros(d), 64)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 40 * 2048 * d * 8, peak
    assert peak < n * d * 8 / 2


def test_cli_noise_anisotropy_on_a_folder_with_and_without_dask(tmp_path, tiny_reduce_chunks, dask_client):
    X, y = _logistic_data(800, 5, 5)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    folder = save_folder(tmp_path / "d", X, y)
    docs = []
    for data, extra in ((tmp_path / "d.npz", []), (folder, []), (folder, ["--scheduler", "local"])):
        r = CliRunner().invoke(main, ["noise-anisotropy", str(data), "--model", "logistic", "--batch-size", "8",
                                      "--prior-precision", "1", "-q", *extra])
        assert r.exit_code == 0, r.output
        docs.append(json.loads(r.stdout))
    assert rel(docs[1]["noise_cov"], docs[0]["noise_cov"]) < BACKEND_RTOL
    assert docs[2]["noise_cov"] == docs[1]["noise_cov"]  # Dask: the same bits
    assert docs[1]["condition_number"] == pytest.approx(docs[0]["condition_number"], rel=1e-9)


def test_lambda_on_a_folder_makes_few_passes_and_no_arpack(tmp_path, small_chunks):
    """Passes over the rows of `lambda` (D = 24 > the direct solve's 20): fit ≤ 5, expansion 1, C̄(Σ*) 1.

    (It made ≈ 39 before: a Newton line search pass per iteration and ≈ 21 ARPACK operator
    applications for the spectral radius.) The reported radius is then the certified bound.
    """
    from sgtune.io.reduce import pass_counts, reset_pass_counts

    X, y = _logistic_data(3000, 24, 6)
    m = get_model("logistic")
    reset_pass_counts()
    e = expand(m, load_dataset(save_folder(tmp_path / "d", X, y)), 1.0)
    t = tune(e, Dynamics(None, 32))
    counts = pass_counts()
    assert counts["_chunk_fit_terms"] <= 5 and counts["_chunk_expansion_terms"] == 1, counts
    assert counts["_chunk_jsj"] == 1, counts
    assert t.stationary.spectral_radius_is_bound and t.spectral_radius < 1
    t_mem = tune(expand(m, make_dataset(X, y), 1.0), Dynamics(None, 32))
    assert rel(t.step_matrix, t_mem.step_matrix) < BACKEND_RTOL
    assert t_mem.spectral_radius <= t.spectral_radius  # the bound bounds ARPACK's value


# --- calibrate repetitions over Dask ---------------------------------------------------------------

def test_cli_calibrate_repeat_is_identical_serially_on_dask_and_seed_by_seed(tmp_path, dask_client):
    """--repeat R: repetition i is the plain run with --seed SEED+i; --scheduler local gives the same numbers."""
    X, y = _logistic_data(400, 3, 7)
    theta = np.full(3, 0.1)
    np.save(tmp_path / "th.npy", theta)
    folder = save_folder(tmp_path / "d", X, y)
    base = ["calibrate", str(folder), "--model", "logistic", "--batch-size", "16", "--chains", "2", "--steps", "400",
            "--prior-precision", "1", "--true-theta", str(tmp_path / "th.npy"), "-q", "--seed", "5"]

    def run(*extra):
        r = CliRunner().invoke(main, [*base, *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    serial = run("--repeat", "3")
    dask = run("--repeat", "3", "--scheduler", "local")
    assert serial["repetitions"] == dask["repetitions"]
    assert serial["repetition_summary"] == dask["repetition_summary"]
    assert [r["seed"] for r in serial["repetitions"]] == [5, 6, 7]
    alone = run("--seed", "7")  # the last repetition is exactly the run with that seed
    rep = serial["repetitions"][2]
    for key in ("cov_error_predicted", "cov_error_empirical", "cov_error_noise_floor", "calibration_ks"):
        assert rep[key] == alone[key], key
    assert serial["cov_error_empirical"] == serial["repetitions"][0]["cov_error_empirical"]
    errs = [r["cov_error_empirical"] for r in serial["repetitions"]]
    assert len(set(errs)) == 3  # different seeds, different chains
    assert serial["repetition_summary"]["cov_error_empirical_mean"] == pytest.approx(np.mean(errs), rel=1e-12)
    r = CliRunner().invoke(main, [*base, "--repeat", "0"])
    assert r.exit_code != 0 and "--repeat" in r.output


def test_table1_smile_script_on_dask_equals_serial(dask_client, capsys, monkeypatch):
    """benchmarks/table1_smile.py --scheduler local: every cell's numbers identical to the serial run."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "table1_smile.py"
    spec = importlib.util.spec_from_file_location("table1_smile_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, spec.name, mod)  # as `import table1_smile` would
    spec.loader.exec_module(mod)
    argv = ["--smoke", "--targets", "gaussian", "--noises", "diagonal"]
    serial = mod.main(argv)
    dask = mod.main([*argv, "--scheduler", "local"])
    capsys.readouterr()
    assert len(serial["cells"]) == len(mod.SAMPLERS) and dask["scheduler"] == "local"
    for a, b in zip(serial["cells"], dask["cells"]):
        a, b = dict(a), dict(b)
        a.pop("seconds"), b.pop("seconds")
        assert a == b


@pytest.mark.parametrize("n", [3, 256, 1037, 20_000])
def test_column_sums_are_accurate_against_fsum(rng, n):
    """The fit's gradient sum (two-level blocked) against exact math.fsum; far below the plain running sum's error."""
    import math

    from sgtune.models.expansion import _column_sums

    g = rng.standard_normal((n, 4)) + 1e3  # large common offset: the running sum loses digits
    ref = np.array([math.fsum(c) for c in g.T])
    err = np.max(np.abs(_column_sums(g) - ref)) / np.max(np.abs(ref))
    assert err < 64 * np.finfo(float).eps * (1 + n / 256 + 256 / max(n, 1)) ** 0.5, err


class _Server:
    """A server on 127.0.0.1 (a free port) that is not a Dask scheduler: ``greeting`` bytes sent at once on each
    connection (None: an HTTP server, which waits for a request and answers only that)."""

    def __init__(self, greeting):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.greeting, self.open = greeting, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.open.append(conn)
            if self.greeting is not None:
                conn.sendall(self.greeting)

    def close(self):
        for c in self.open:
            c.close()
        self.sock.close()


@pytest.mark.parametrize("greeting, needle", [
    (None, "did not answer as a Dask scheduler within 1 s"),                 # an HTTP server: waits for a request
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "an HTTP server"),  # a proxy replying at once
    (b"\xff" * 16, "not Dask"),                                                # a length no handshake has
    (b"abc", "it sent b'abc' and closed"),
])
def test_a_scheduler_address_where_something_else_answers_is_a_clear_error(monkeypatch, greeting, needle):
    monkeypatch.setenv("SGTUNE_DASK_TIMEOUT", "1s")
    server = _Server(greeting)
    try:
        if greeting == b"abc":  # closes after its three bytes
            server.greeting = None
            import threading

            def close_after():
                import time
                while not server.open:
                    time.sleep(0.01)
                server.open[0].sendall(b"abc")
                server.open[0].close()
            threading.Thread(target=close_after, daemon=True).start()
        with pytest.raises(SchedulerError, match=needle) as info:
            get_client(f"tcp://127.0.0.1:{server.port}")
        assert "8786" in str(info.value) and "\n" not in str(info.value)
    finally:
        server.close()


def test_cli_scheduler_on_an_http_port_exits_1_with_one_line(tmp_path, monkeypatch):
    import http.server
    import threading

    monkeypatch.setenv("SGTUNE_DASK_TIMEOUT", "1s")
    httpd = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        ds = example("logistic")
        folder = save_folder(tmp_path / "d", ds.X, ds.y)
        out = tmp_path / "lam.npy"
        r = CliRunner().invoke(main, ["lambda", str(folder), "--model", "logistic", "--batch-size", "32", "-q",
                                      "-o", str(out), "--scheduler", f"tcp://127.0.0.1:{httpd.server_port}"])
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and not out.exists(), r.stderr
    assert "did not answer as a Dask scheduler" in r.stderr and "--scheduler" in r.stderr, r.stderr


def test_a_real_scheduler_passes_the_probe(dask_client):
    from sgtune.io.reduce import map_tasks, probe_scheduler

    address = dask_client.scheduler.address
    assert address.startswith("tcp://127.0.0.1:")
    probe_scheduler(address, 10.0)  # a Dask scheduler greets at once with a short handshake
    try:
        assert map_tasks(abs, [(-2,), (3,)], address) == [2, 3]
    finally:  # the client of the address, before the fixture closes the cluster under it
        from sgtune.io import reduce

        client = reduce._CLIENTS.pop(address, None)
        if client is not None:
            client.close()
