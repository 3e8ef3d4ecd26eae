"""Input traps users fall into: CSV quirks of pandas, R and Excel, outputs that share a path or are
written by two processes at once, output names that do not match what is written, signals, a
read-only numba cache, and user model files that print, exit or parse sys.argv. Each trap ends in
one ``Error: …`` line naming the file or option and the fix, or is handled as the user meant."""
from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _timeouts import HANG_GUARD_S
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.io.data import load_dataset

LAMBDA = ["lambda", "--example", "logistic", "--batch-size", "32", "-q"]


def invoke(args, **kw):
    return CliRunner().invoke(main, args, **kw)


def one_error_line(r, code):
    """The command failed with ``code`` and stderr is exactly one ``Error: …`` line; returns it."""
    assert r.exit_code == code, (r.exit_code, r.stderr)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    assert "Traceback" not in r.stderr + r.stdout and "internal error" not in r.stderr
    return lines[0]


# ------------------------------------------------------------------- CSV quirks
def _frame(n=60):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 2))
    return X, X @ [1.0, -1.0] + rng.normal(size=n)


def _rows(X, y, index=False, quote=False):
    q = (lambda s: f'"{s}"') if quote else str
    return "".join((f"{q(i + 1)}," if index else "") + f"{float(a)!r},{float(b)!r},{float(t)!r}\n" for i, ((a, b), t) in enumerate(zip(X, y)))


@pytest.mark.parametrize("name,header,index", [
    ("pandas.csv", ",a,b,y\n", True),              # DataFrame.to_csv() without index=False
    ("r.csv", '"","a","b","y"\n', True),           # write.csv() without row.names=FALSE
])
def test_an_unnamed_index_column_is_refused_naming_the_file_and_the_fix(tmp_path, name, header, index):
    X, y = _frame()
    f = tmp_path / name
    f.write_text(header + _rows(X, y, index=index, quote=name == "r.csv"))
    line = one_error_line(invoke(["lambda", str(f), "--model", "linear", "--batch-size", "8", "-q"]), 1)
    assert str(f) in line and "column 1 of the header has no name" in line
    assert "index=False" in line and "row.names=FALSE" in line


def test_quoted_r_headers_parse_and_a_bom_is_read(tmp_path):
    """R's write.csv(row.names=FALSE) quotes every name; Excel's "CSV UTF-8" starts with a byte-order mark."""
    X, y = _frame()
    r = tmp_path / "r.csv"
    r.write_text('"y","a","b"\n' + "".join(f"{float(t)!r},{float(a)!r},{float(b)!r}\n" for (a, b), t in zip(X, y)))
    bom = tmp_path / "excel.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + r.read_bytes().replace(b'"', b""))
    for f in (r, bom):
        ds = load_dataset(f)
        assert ds.names == ("a", "b") and ds.dim == 2
        np.testing.assert_allclose(ds.y, y)
        np.testing.assert_allclose(ds.X, X)


def test_a_repeated_column_name_is_refused(tmp_path):
    X, y = _frame()
    f = tmp_path / "dup.csv"
    f.write_text("y,a,y\n" + "".join(f"{float(t)!r},{float(a)!r},{float(b)!r}\n" for (a, b), t in zip(X, y)))
    line = one_error_line(invoke(["lambda", str(f), "--model", "linear", "--batch-size", "8", "-q"]), 1)
    assert str(f) in line and "columns 1 and 3 of the header are both named 'y'" in line


def test_a_pandas_index_stored_in_parquet_is_refused(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    X, y = _frame()
    f = tmp_path / "named.parquet"
    pd.DataFrame({"id": np.arange(60) ** 2, "a": X[:, 0], "b": X[:, 1], "y": y}).set_index("id").to_parquet(f)
    line = one_error_line(invoke(["lambda", str(f), "--model", "linear", "--batch-size", "8", "-q"]), 1)
    assert "column 'id' holds the index of the pandas table" in line and "index=False" in line


def test_a_bom_in_a_numbers_file_is_read(tmp_path):
    f = tmp_path / "lam.csv"
    f.write_bytes(b"\xef\xbb\xbf" + "\n".join(",".join("0.01" if i == j else "0" for j in range(5))
                                              for i in range(5)).encode())
    r = invoke(["covariance", "--example", "logistic", "--batch-size", "32", "--lambda", str(f), "-q"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["cov"]


# ------------------------------------------------------------------- outputs
RUN = ["run", "--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", "200", "--chains", "2",
       "-q"]


@pytest.mark.parametrize("args,first,second", [
    ([*LAMBDA, "-o", "{d}/same.npy", "--json", "{d}/same.npy"], "-o", "--json"),
    ([*LAMBDA, "-o", "{d}/X", "--plot", "{d}/X"], "-o", "--plot"),
    ([*RUN, "-o", "{d}/t.nc", "--json", "{d}/./t.nc"], "-o", "--json"),
    ([*LAMBDA, "--output", "{d}/a.npy", "--json", "{d}/link.npy"], "--output", "--json"),  # a link to the same file
])
def test_outputs_that_share_a_file_are_a_usage_error_naming_both(tmp_path, args, first, second):
    (tmp_path / "a.npy").write_bytes(b"keep")
    (tmp_path / "link.npy").symlink_to(tmp_path / "a.npy")
    before = sorted(p.name for p in tmp_path.iterdir())
    line = one_error_line(invoke([a.format(d=tmp_path) for a in args] + ["--overwrite"]), 2)
    assert f"{first} and {second} both name" in line and "give each its own file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before and (tmp_path / "a.npy").read_bytes() == b"keep"


@pytest.mark.parametrize("args,says", [
    ([*LAMBDA, "-o", "{d}/lambda.csv"], "-o {d}/lambda.csv: this option writes a .npy array (numpy.save) or an "
                                        ".npz archive; give a file name ending in .npy or .npz"),
    ([*RUN, "-o", "{d}/t.txt"], "-o {d}/t.txt: this option writes an .npz archive or a netCDF file; give a file name "
                                "ending in .npz or .nc"),
    ([*LAMBDA, "--json", "{d}/doc.npy"], "--json {d}/doc.npy: this option writes a JSON document; give a file name "
                                         "ending in .json"),
    ([*LAMBDA, "--plot", "{d}/fig.pdf"], "--plot {d}/fig.pdf: this option writes a PNG image"),
    ([*RUN, "--format", "netcdf", "-o", "{d}/t.npz"], "--format netcdf writes a netCDF file but -o {d}/t.npz ends in "
                                                      ".npz"),
    ([*LAMBDA, "-o", "{d}/newdir/"], "-o {d}/newdir/ names a folder (it ends in '/'); give the name of a file in it "
                                     "(e.g. {d}/newdir/out.npy)"),
    ([*RUN, "--thin", "500"], "Invalid value for '--thin': 500 keeps no draw of the 180 steps after burn-in "
                              "(--steps 200, burn-in 20); give --thin at most 180"),
])
def test_output_names_and_thin_that_cannot_mean_what_they_say_are_usage_errors(tmp_path, args, says):
    line = one_error_line(invoke([a.format(d=tmp_path) for a in args]), 2)
    assert says.format(d=tmp_path) in line
    assert list(tmp_path.iterdir()) == []


def test_documented_output_names_are_accepted(tmp_path):
    r = invoke([*RUN, "--thin", "180", "-o", str(tmp_path / "T.NPZ"), "--json", str(tmp_path / "doc.json")])
    assert r.exit_code == 0, r.stderr
    assert np.load(tmp_path / "T.NPZ")["draws"].shape == (2, 1, 5)
    r = invoke([*RUN, "--format", "npz", "-o", str(tmp_path / "trace.dat")])  # --format names the format
    assert r.exit_code == 0 and np.load(tmp_path / "trace.dat")["mean"].shape == (5,), r.stderr
    r = invoke([*LAMBDA, "--json", str(tmp_path / "report.txt")])  # JSON is text: any name not claiming another format
    assert r.exit_code == 0 and json.loads((tmp_path / "report.txt").read_text())["dim"] == 5, r.stderr


def test_json_dash_is_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke([*LAMBDA, "--json", "-"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["dim"] == 5 and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------- two writers of one output
def test_a_claimed_output_that_appears_meanwhile_is_kept(tmp_path):
    """atomic_path after expect_new: os.link refuses to replace a file that appeared while writing."""
    from sgtune.io._files import OutputAppearedError, atomic_path, expect_new, new_outputs

    dest = tmp_path / "r.npz"
    with new_outputs():
        expect_new(dest, "-o")
        with pytest.raises(OutputAppearedError) as info:
            with atomic_path(dest) as tmp:
                Path(tmp).write_bytes(b"mine")
                dest.write_bytes(b"theirs")  # the other process finished first
    assert dest.read_bytes() == b"theirs" and sorted(p.name for p in tmp_path.iterdir()) == ["r.npz"]
    assert info.value.filename == f"-o {dest}"
    with atomic_path(dest) as tmp:  # not claimed (e.g. --overwrite): replaced
        Path(tmp).write_bytes(b"mine")
    assert dest.read_bytes() == b"mine"


def test_the_later_of_two_writers_exits_1_naming_the_file(tmp_path, monkeypatch):
    """The other writer's file appears while this command computes: it is kept, this one fails."""
    import sgtune.cli._options as options

    out = tmp_path / "lam.npy"
    real = options.load_problem

    def other_writer_finishes(kw):
        out.write_bytes(b"the other run")
        return real(kw)

    monkeypatch.setattr(options, "load_problem", other_writer_finishes)
    line = one_error_line(invoke([*LAMBDA, "-o", str(out), "--json", str(tmp_path / "doc.json")]), 1)
    assert line == (f"Error: -o {out} was created by another process while this one ran; that file was kept and this "
                    "result was not written; pass --overwrite to replace it, or choose another name")
    assert out.read_bytes() == b"the other run" and sorted(p.name for p in tmp_path.iterdir()) == ["lam.npy"]
    r = invoke([*LAMBDA, "-o", str(out), "--overwrite"])  # --overwrite: replaced, as asked
    assert r.exit_code == 0 and np.load(out).shape == (5, 5)


# ------------------------------------------------------------------- user model files
MODEL_FILE = '''
import argparse, os, sys
import numpy as np
from helper_beside_the_model import sigmoid          # a sibling module: the file's folder is importable
from sgtune.models import RankOneCurvature

print("printed while importing")
parser = argparse.ArgumentParser()                    # a script's argparse at import time
parser.add_argument("--lr", type=float, default=0.1)
ARGS = parser.parse_args()
MODE = os.environ.get("SGTUNE_TEST_MODEL_MODE", "")
if MODE == "exit-on-import":
    sys.exit(2)


class Logistic:
    name = "hand-written logistic"
    fit_method = "newton"

    def per_sample_losses(self, theta, X, y):
        eta = X @ theta
        return np.logaddexp(0.0, eta) - y * eta

    def per_sample_grads(self, theta, X, y):
        print("printed by per_sample_grads")
        if MODE == "chdir":
            os.chdir(os.path.dirname(os.path.abspath(__file__)))
        if MODE == "raise" and X.shape[0] < 100:      # only on a minibatch: during the run
            raise ValueError("bad minibatch")
        if MODE == "exit" and X.shape[0] < 100:
            sys.exit(3)
        return (sigmoid(X @ theta) - y)[:, None] * X

    def curvature(self, theta, X, y):
        p = sigmoid(X @ theta)
        return RankOneCurvature(X, p * (1.0 - p))


MODEL = Logistic()
'''


@pytest.fixture
def model_file(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "helper_beside_the_model.py").write_text("import numpy as np\n\ndef sigmoid(z):\n"
                                                      "    return 1.0 / (1.0 + np.exp(-z))\n")
    (folder / "mine.py").write_text(MODEL_FILE)
    return folder / "mine.py"


def _model_run(model_file, *extra):
    return invoke(["run", "--example", "logistic", "--model", f"{model_file}:MODEL", "--batch-size", "32",
                   "--step-size", "0.01", "--steps", "60", "--chains", "2", "-q", *extra])


def test_a_model_file_that_prints_and_parses_argv_keeps_stdout_one_json_document(model_file, monkeypatch):
    monkeypatch.setenv("SGTUNE_TEST_MODEL_MODE", "")
    r = _model_run(model_file)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["model"].startswith("hand-written logistic")  # stdout: the document only
    assert "printed while importing" in r.stderr and "printed by per_sample_grads" in r.stderr


def test_a_model_that_changes_the_working_directory_does_not_move_the_outputs(model_file, tmp_path, monkeypatch):
    monkeypatch.setenv("SGTUNE_TEST_MODEL_MODE", "chdir")
    monkeypatch.chdir(tmp_path)
    r = _model_run(model_file, "-o", "trace.npz", "--json", "doc.json")
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "trace.npz").exists() and (tmp_path / "doc.json").exists()
    assert not (model_file.parent / "trace.npz").exists() and Path.cwd() == tmp_path


@pytest.mark.parametrize("mode,says", [
    ("raise", "Error: model {f}:MODEL raised ValueError in per_sample_grads: bad minibatch"),
    ("exit", "Error: model {f}:MODEL called sys.exit(3) in per_sample_grads"),
    ("exit-on-import", "Error: --model {f}:MODEL: importing {f} called sys.exit(2)"),
])
def test_a_model_that_raises_or_exits_is_one_line_naming_the_file_and_the_method(model_file, monkeypatch, mode,
                                                                                  says):
    monkeypatch.setenv("SGTUNE_TEST_MODEL_MODE", mode)
    r = _model_run(model_file)
    assert r.exit_code == 1 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("printed ")]  # the model's own prints
    assert len(lines) == 1 and lines[0].startswith(says.format(f=model_file)), r.stderr


# ------------------------------------------------------------------- signals
ROOT = Path(__file__).resolve().parents[2]


def _env(**extra):
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.parametrize("signame,code,says", [("SIGTERM", 143, "terminated (SIGTERM)"),
                                               ("SIGHUP", 129, "hung up (SIGHUP)")])
def test_sigterm_and_sighup_stop_with_one_line_and_remove_outputs_and_the_data_cache(tmp_path, signame, code, says):
    """Out-of-core data loaded with --intercept are converted into a cache folder: it is removed, as after
    Ctrl-C, and no output (nor its hidden temporary file) is left."""
    sig = getattr(signal, signame)
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    X = rng.normal(size=(500, 3))
    np.save(data / "X.npy", X)
    np.save(data / "y.npy", (X @ [1.0, -1.0, 0.5] + rng.normal(size=500) > 0).astype(float))
    cache, out = tmp_path / "cache", tmp_path / "out"
    cache.mkdir()
    out.mkdir()
    p = subprocess.Popen([sys.executable, "-c", "from sgtune.cli import main; main()", "run", str(data), "--model",
                          "logistic", "--intercept", "--batch-size", "32", "--step-size", "0.01", "--steps",
                          "100000000", "--chains", "2", "-q", "-o", str(out / "r.npz"), "--json",
                          str(out / "r.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=_env(SGTUNE_CACHE_DIR=str(cache)))
    try:
        deadline = time.monotonic() + 120
        while not list(cache.iterdir()) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert list(cache.iterdir()), "the data cache was never created"
        time.sleep(2)
        p.send_signal(sig)
        _, err = p.communicate(timeout=HANG_GUARD_S)
    finally:
        p.kill()
    lines = err.decode().strip().splitlines()
    assert p.returncode == code, err.decode()
    assert lines == [f"Error: {says}; outputs not yet renamed into place were removed"], err.decode()
    assert list(out.iterdir()) == [] and list(cache.iterdir()) == []


def test_a_signal_while_an_output_is_written_leaves_no_temporary_file(tmp_path, monkeypatch):
    import sgtune.cli._io as io

    real = np.save

    def save_then_terminate(fh, arr):
        real(fh, arr)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the temporary file is still open
        time.sleep(1)

    monkeypatch.setattr(io.np, "save", save_then_terminate)
    r = invoke([*LAMBDA, "-o", str(tmp_path / "lam.npy")])
    assert r.exit_code == 143, r.stderr
    assert r.stderr.strip().splitlines() == ["Error: terminated (SIGTERM); outputs not yet renamed into place were "
                                             "removed"]
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored after the command


@pytest.mark.parametrize("then", ["raise", "return"])
def test_ctrl_c_swallowed_by_a_library_callback_is_still_one_line_and_exit_130(monkeypatch, then):
    """numba's compiler runs Python callbacks from C (llvmlite's object cache): a KeyboardInterrupt there is
    printed as "Exception ignored …" and the compile then fails with a RuntimeError, or goes on."""
    import ctypes

    @ctypes.CFUNCTYPE(None)
    def callback():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs (and raises) at a bytecode boundary in here
            pass

    def compile_interrupted(*a, **k):
        callback()
        if then == "raise":
            raise RuntimeError("no compiled object yet for <Library 'glm_grad'>")
        time.sleep(5)  # the interruption is raised again in here
        raise AssertionError("the interruption was ignored")

    monkeypatch.setattr("sgtune.cli._options.example", compile_interrupted)
    r = invoke(LAMBDA)
    assert r.exit_code == 130, r.stderr
    assert r.stderr.strip().splitlines() == ["Error: interrupted (Ctrl-C); outputs not yet renamed into place were "
                                             "removed"]


# ------------------------------------------------------------------- numba cache
CACHE_PROBE = '''
import os, sys
import numba.core.caching as caching

writable = os.environ["WRITABLE_PREFIX"]
real = caching._CacheLocator.ensure_cache_path

def read_only_but(self):  # a read-only install: only paths under WRITABLE_PREFIX can be written
    if not writable or not self.get_cache_path().startswith(writable):
        raise PermissionError(13, "Read-only file system", self.get_cache_path())
    return real(self)

caching._CacheLocator.ensure_cache_path = read_only_but
import numba
import sgtune.sampler                       # defines every kernel: numba needs a cache location here
from sgtune.sampler import _jit
print(_jit.NJIT_OPTIONS["cache"], numba.config.CACHE_DIR)
'''


@pytest.mark.parametrize("tmp_writable", [True, False])
def test_no_writable_numba_cache_falls_back_to_a_temporary_folder_or_no_cache(tmp_path, tmp_writable):
    """A read-only package folder, NUMBA_CACHE_DIR and home: numba refused to define the kernels ("cannot
    cache function …"); now the cache goes to a per-user folder in TMPDIR, or, with none writable, off."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = _env(NUMBA_CACHE_DIR=str(tmp_path / "read-only"), TMPDIR=str(tmpdir),
               WRITABLE_PREFIX=str(tmpdir) if tmp_writable else "")
    p = subprocess.run([sys.executable, "-c", CACHE_PROBE], capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    cache_on, folder = p.stdout.split()
    if tmp_writable:
        assert cache_on == "True" and folder == str(tmpdir / f"sgtune-numba-cache-{os.getuid()}")
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    else:
        assert cache_on == "False"


# ------------------------------------------------------------------- batches shorter than the chain's memory
def _ar1_summary(rng, *, chains, segments, seg_len, tau, dim=3):
    """What the sampler summarises (segment means → standard errors, ESS, chain halves) for AR(1) chains
    x_t = φ x_{t−1} + √(1−φ²) ε_t with integrated autocorrelation time τ = (1 + φ)/(1 − φ), unit variance."""
    from types import SimpleNamespace

    from scipy.signal import lfilter

    phi = (tau - 1.0) / (tau + 1.0)
    steps = segments * seg_len
    eps = rng.standard_normal((chains, steps, dim))
    x0 = rng.standard_normal((chains, 1, dim))  # a stationary start
    x = lfilter([math.sqrt(1 - phi**2)], [1.0, -phi], eps, axis=1, zi=phi * x0)[0]
    means = x.reshape(chains, segments, seg_len, dim).mean(axis=2)
    k = chains * segments
    se2 = means.reshape(k, dim).var(axis=0, ddof=1) / k
    cov = np.cov(x.reshape(-1, dim).T, bias=True)
    h = segments // 2
    halves = np.stack([means[:, :h].mean(axis=1), means[:, segments - h:].mean(axis=1)], axis=1)
    return SimpleNamespace(half_means=halves, cov=cov, ess=np.diag(cov) / se2, n_batches=k, n_steps=steps,
                           burn_in=0, settings={"batches_per_chain": segments}, n_chains=chains,
                           diverged_at=-np.ones(chains, dtype=int), step_size_final=None, half_variances=None)


def test_batch_length_test_false_alarm_rate_is_at_most_alpha():
    """Batches of 40 τ: the standard errors are right; the family-wise alarm rate over 300 replicates stays
    within α plus three binomial standard errors."""
    from sgtune.diagnostics.health import ALPHA, batch_length_test

    rng = np.random.default_rng(3)
    reps = 300
    alarms = sum(not batch_length_test(_ar1_summary(rng, chains=8, segments=16, seg_len=200, tau=5.0))["passed"]
                 for _ in range(reps))
    assert alarms / reps <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)


def test_batch_length_test_flags_batches_of_a_tenth_of_tau_and_estimates_tau():
    from sgtune.diagnostics.health import batch_length_test

    rng = np.random.default_rng(4)
    out = [batch_length_test(_ar1_summary(rng, chains=8, segments=400, seg_len=5, tau=50.0)) for _ in range(20)]
    assert all(not o["passed"] for o in out)
    # τ from the chain halves (1000 steps = 20 τ; 15 degrees of freedom): the median within a factor 1.5
    assert 50.0 / 1.5 < np.median([o["tau"] for o in out]) < 50.0 * 1.5
    # batch means of 5 steps see about L/τ of the variance: the standard errors are √(τ/L) ≈ 3× too small
    assert 2.0 < np.median([o["se_factor"] for o in out]) < 4.5
    # the advice: batches of ≥ 10 τ, i.e. at most 2000 / (10 · 50) = 4 per chain, up to the noise of τ̂
    assert all(1 <= o["batches_per_chain_max"] <= 8 for o in out)


def test_run_with_too_many_batches_per_chain_warns_and_strict_exits_4():
    """The logistic example at λ = 0.05 has τ ≈ 2/(λ·λ_min(H)) ≈ 240 steps: 2000 batches per chain are
    9-step batches, whose standard errors are ≈ 5× too small. The run says so (a warning, also with -q),
    and --strict exits 4; the default 8 batches per chain (2250 steps ≈ 9 τ) give no such warning."""
    base = ["run", "--example", "logistic", "--batch-size", "32", "--step-size", "0.05", "--steps", "20000",
            "--chains", "4", "-q"]
    r = invoke([*base, "--batches-per-chain", "2000"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    check = doc["health"]["batch_length"]
    assert not check["passed"] and check["batch_steps"] == 9.0 and check["se_factor"] > 3
    warning = next(w for w in doc["warnings"] if "autocorrelation time" in w)
    assert "--batches-per-chain" in warning and "batches_per_chain" not in warning
    assert f"warning: {warning}" in r.stderr
    assert invoke([*base, "--batches-per-chain", "2000", "--strict"]).exit_code == 4
    r = invoke(base)
    assert r.exit_code == 0 and "autocorrelation time" not in r.stderr, r.stderr
