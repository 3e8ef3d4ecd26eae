"""Property-based fuzzing of the whole command line (issue 19 item 6).

Every command that ``sgtune --help`` lists is run in-process (click's ``CliRunner``) from a small,
valid invocation on tiny data, with random options added or replaced: integers (negative, zero,
huge), floats (nan, ±inf, negative, subnormal, huge), strings, choices outside their set, and paths
to malformed files (empty, binary garbage, wrong shapes, text or NaN in a CSV, a folder, a missing
file). Whatever the input, the contract (``sgtune --help``, docs/cli.rst) must hold:

* the exit status is one of 0, 1, 2, 3, 4, and the command ended by ``SystemExit`` (no exception);
* no traceback, no "internal error" (the group's net for bugs), no bare "Aborted!";
* a failure (1, 2) ends with exactly one ``Error: …`` line on stderr;
* success prints one strict JSON document (or writes it to ``--json``) and every requested output;
* no partial output: a failed command creates no output file and leaves no temporary file;
* an existing output file is untouched (bytes and mtime) without ``--overwrite``, and by a failure.

Beyond the arguments (subprocesses where the operating system takes part): SIGINT, SIGTERM and SIGHUP at
random times (one line, exit 130/143/129, no output or temporary file left), two processes writing one
output (one wins, the other exits 1 naming the file), unusual environments (an unwritable numba cache or
temporary folder, one thread, the C locale) and user model files that print, exit, parse ``sys.argv``,
change the working directory, raise or import a module beside them.

The default run is small and derandomised (reproducible); ``-m slow`` runs the long search.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import click
import numpy as np
import pytest
from _timeouts import HANG_GUARD_S
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgtune.cli import main

ALLOWED_EXIT = {0, 1, 2, 3, 4}
SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
#: (default run, slow run) examples per command
FAST_EXAMPLES, SLOW_EXAMPLES = 5, 150

# ------------------------------------------------------------------------------------------ files


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Input files: well-formed ones for the base invocations, and malformed ones to draw from."""
    d = tmp_path_factory.mktemp("fuzz_inputs")
    rng = np.random.default_rng(0)
    out: dict[str, str] = {}

    def npy(name: str, arr: Any) -> None:
        np.save(d / name, arr)
        out[name] = str(d / name)

    def raw(name: str, data: bytes) -> None:
        (d / name).write_bytes(data)
        out[name] = str(d / name)

    # well-formed (D = 5 for --example logistic; d = 2 for fluctuation)
    npy("lam5.npy", 0.01 * np.eye(5))
    npy("theta5.npy", np.zeros(5))
    npy("samples5.npy", 0.1 * rng.normal(size=(30, 5)))
    npy("A2.npy", np.array([[2.0, 0.3], [0.3, 1.0]]))
    npy("l2.npy", np.array([1.0, 0.5]))
    npy("J2.npy", np.array([[0.0, 1.0], [-1.0, 0.0]]))
    npy("x20.npy", rng.normal(size=20))
    X = rng.normal(size=(60, 3))
    y = (X @ [1.0, -0.5, 0.2] + rng.normal(size=60) > 0).astype(float)
    (d / "data.csv").write_text("a,b,c,y\n" + "\n".join(",".join(f"{v:.6g}" for v in [*x, t]) for x, t in zip(X, y)))
    out["data.csv"] = str(d / "data.csv")
    np.savez(d / "data.npz", X=X, y=y)
    out["data.npz"] = str(d / "data.npz")
    (d / "blocks.json").write_text("[[0, 1], [2, 3, 4]]")
    out["blocks.json"] = str(d / "blocks.json")
    # malformed
    raw("empty.npy", b"")
    raw("empty.csv", b"")
    raw("garbage.npy", bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
    raw("garbage.csv", bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
    raw("text.csv", b"a,b,y\n1,x,0\n2,3,1\n")
    raw("nan.csv", b"a,b,y\n1,nan,0\n2,3,1\n")
    raw("header_only.csv", b"a,b,y\n")
    raw("bad.json", b"{not json")
    raw("bad_model.py", b"def broken(:\n")
    npy("wrong_shape.npy", np.ones(3))
    npy("cube.npy", np.ones((2, 2, 2)))
    npy("nan.npy", np.full((5, 5), np.nan))
    npy("inf5.npy", np.array([np.inf, 0, 0, 0, 0]))
    npy("strings.npy", np.array(["a", "b"]))
    npy("zeros5x5.npy", np.zeros((5, 5)))
    npy("negdef5.npy", -np.eye(5))
    npy("huge5.npy", 1e300 * np.eye(5))
    npy("scalar.npy", np.array(0.01))
    npy("empty_array.npy", np.zeros((0,)))
    np.savez(d / "arrays.npz", a=np.ones(3))
    out["arrays.npz"] = str(d / "arrays.npz")
    trunc = d / "truncated.npy"
    np.save(trunc, np.eye(5))
    trunc.write_bytes(trunc.read_bytes()[:140])
    out["truncated.npy"] = str(trunc)
    (d / "folder").mkdir()
    out["folder"] = str(d / "folder")
    out["missing.npy"] = str(d / "missing.npy")
    out["missing.csv"] = str(d / "missing.csv")
    return out


MALFORMED = ["empty.npy", "empty.csv", "garbage.npy", "garbage.csv", "text.csv", "nan.csv", "header_only.csv",
             "bad.json", "bad_model.py", "wrong_shape.npy", "cube.npy", "nan.npy", "inf5.npy", "strings.npy",
             "zeros5x5.npy", "negdef5.npy", "huge5.npy", "scalar.npy", "empty_array.npy", "arrays.npz",
             "truncated.npy", "folder", "missing.npy", "missing.csv"]
WELL_FORMED = ["lam5.npy", "theta5.npy", "samples5.npy", "A2.npy", "l2.npy", "J2.npy", "x20.npy", "data.csv",
               "data.npz", "blocks.json"]

#: small, valid, fast invocations (tiny data); the fuzzer adds and replaces options from here
BASE: dict[str, list[str]] = {
    "calibrate": ["--example", "logistic", "--batch-size", "32", "--subsample", "200", "--steps", "300",
                  "--chains", "2"],
    "covariance": ["--example", "logistic", "--batch-size", "32", "--step-size", "0.01"],
    "derive": ["nld"],
    "fluctuation": ["nld", "--hessian", "@A2.npy", "--observable", "@l2.npy", "--antisymmetric", "@J2.npy"],
    "ksd": ["--example", "logistic", "--samples", "@samples5.npy"],
    "lambda": ["--example", "logistic", "--batch-size", "32"],
    "minibatch-error": ["--example", "logistic", "--theta", "@theta5.npy", "--batch-size", "8"],
    "noise-anisotropy": ["--example", "logistic", "--theta", "@theta5.npy", "--batch-size", "8"],
    "plan": ["--example", "logistic", "--tolerance", "0.2", "--batch-sizes", "32", "--families", "scalar",
             "--no-timing", "--no-applicability"],
    "reshuffle": ["--data", "@x20.npy", "--batch-size", "4", "--step", "0.1"],
    "run": ["--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", "200", "--chains", "2"],
    "verify": ["--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", "300",
               "--chains", "2"],
}

# ------------------------------------------------------------------------------------------ values

INTS = st.one_of(st.sampled_from([0, 1, 2, 3, -1, -7, 10**12, -(10**12), 2**63, 10**30]), st.integers(-50, 300))
#: options whose size is the work asked for: bounded, so that a legitimate request stays quick (the huge
#: --chains is kept: the memory estimate must refuse it before allocating)
COSTLY_INTS = {
    "steps": st.one_of(st.sampled_from([0, -1, 1, 2, 10]), st.integers(-5, 400)),
    "burn_in": st.one_of(st.sampled_from([0, -1, 10**12]), st.integers(-5, 400)),
    "chains": st.one_of(st.sampled_from([0, -1, 1, 10**8, 10**12]), st.integers(-3, 4)),
    "thin": st.one_of(st.sampled_from([0, -1, 1, 10**12]), st.integers(-3, 50)),
    "repeat": st.integers(-2, 2),
    "refine_rounds": st.integers(-2, 1),
    "batches_per_chain": st.one_of(st.sampled_from([0, -1, 10**12]), st.integers(-3, 40)),
    "average_window": st.one_of(st.sampled_from([0, -1, 10**6]), st.integers(-3, 50)),
    "block": st.one_of(st.sampled_from([0, -1, 10**12]), st.integers(-3, 64)),
}
FLOATS = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, -0.0, 5e-324, 1e-300, 1e300, 0.5, 1.0, 2.0, 0.999999]),
    st.floats(allow_nan=True, allow_infinity=True))
TEXT = st.one_of(st.sampled_from(["", " ", "abc", "nan", "inf", "-1", "0", "1e309", "é", "--", "N", "2N", "0N"]),
                 st.text(max_size=12))
#: string options with meaningful values to mix in
STRINGS = {
    "inverse_temperature": ["inf", "N", "2N", "0.5N", "0N", "-1N", "xN", "0", "-1", "nan", "1e-300", "1e300", "100"],
    "model": ["linear", "logistic", "poisson", "beta-linear", "mlp", "bogus", "nofile.py:M", "@bad_model.py:M",
              "@bad_model.py"],
    "hidden_sizes": ["", "2", "0", "-1", "a", "2,,3", "3,2", " "],
    "response": ["y", "a", "nope", ""],
    "target": ["sandwich", "posterior", "bogus", *[f"@{n}" for n in MALFORMED], "@lam5.npy"],
    "blocks": ["@blocks.json", "@bad.json", "@empty.csv", "@missing.csv", "[[0]]", "0,1"],
    "column": ["a", "y", "nope", ""],
}
#: never drawn: a scheduler address would start (or wait for) a Dask cluster
SKIP_PARAMS = {"scheduler"}
OUTPUT_PARAMS = {"output", "json_path", "plot_path"}
OUTPUT_SUFFIX = {"output": ".npy", "json_path": ".json", "plot_path": ".png"}


def _path_values(name: str) -> st.SearchStrategy[str]:
    return st.sampled_from([*MALFORMED, *WELL_FORMED]).map(lambda n: f"@{n}")


def value_strategy(param: click.Parameter) -> st.SearchStrategy[str]:
    """Command-line text for one parameter (files as '@name', resolved against the fixture)."""
    name = param.name or ""
    t = param.type
    if name in COSTLY_INTS:
        return COSTLY_INTS[name].map(str)
    if name in STRINGS:
        return st.one_of(st.sampled_from(STRINGS[name]), TEXT)
    if isinstance(t, click.Choice):
        return st.one_of(st.sampled_from(list(t.choices)), st.sampled_from(["bogus", ""]))
    if isinstance(t, click.Path):
        return _path_values(name)
    if isinstance(t, (click.types.IntParamType, click.IntRange)):
        return INTS.map(str)
    if isinstance(t, (click.types.FloatParamType, click.FloatRange)):
        return FLOATS.map(repr)
    return st.one_of(TEXT, _path_values(name))


def command(name: str) -> click.Command:
    cmd = main.get_command(click.Context(main), name)
    assert cmd is not None
    return cmd


def _flag(param: click.Parameter) -> str:
    return [o for o in param.opts if o.startswith("--")][0]


@st.composite
def invocations(draw: Any, name: str) -> dict[str, Any]:
    """A command line for ``name``: the base, with options replaced / added / dropped, and outputs."""
    cmd = command(name)
    base = list(BASE[name])
    params = [p for p in cmd.params if p.name not in SKIP_PARAMS | OUTPUT_PARAMS and isinstance(p, click.Option)]
    args = list(base)
    # drop a base option (and its value) now and then: a missing required option must be a usage error
    if draw(st.booleans()) and draw(st.integers(0, 4)) == 0:
        opts = [i for i, a in enumerate(args) if a.startswith("--")]
        if opts:
            i = draw(st.sampled_from(opts))
            del args[i:i + 2]
    chosen = draw(st.lists(st.sampled_from(params), max_size=4, unique_by=lambda p: p.name))
    for p in chosen:
        flag = _flag(p)
        if p.is_flag:
            args.append(flag)
            continue
        value = draw(value_strategy(p))
        if flag in args:  # replace the base value
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    # positional DATA now and then (with --example it is a usage error, alone it must be read or refused)
    if any(p.name == "data" and isinstance(p, click.Argument) for p in cmd.params) and draw(st.integers(0, 5)) == 0:
        if draw(st.booleans()) and "--example" in args:
            i = args.index("--example")
            del args[i:i + 2]
        args.insert(0, draw(st.sampled_from(["@data.csv", "@data.npz", *[f"@{n}" for n in MALFORMED]])))
    # outputs: none, a new file or an existing one, with or without --overwrite
    outputs = {}
    for p in cmd.params:
        if p.name in OUTPUT_PARAMS and draw(st.integers(0, 2)) > 0:
            outputs[p.name] = (_flag(p), draw(st.sampled_from(["new", "existing"])))
    if any(p.name == "overwrite" for p in cmd.params) and "--overwrite" not in args and draw(st.booleans()):
        args.append("--overwrite")
    if any(p.name == "quiet" for p in cmd.params) and "-q" not in args and draw(st.booleans()):
        args.append("-q")
    return {"args": args, "outputs": outputs}


# ------------------------------------------------------------------------------------------ checks


def _resolve(args: list[str], files: dict[str, str]) -> list[str]:
    out = []
    for a in args:
        if a.startswith("@"):
            stem, _, rest = a[1:].partition(":")
            a = files[stem] + (f":{rest}" if rest else "")
        out.append(a)
    return out


def check_invocation(name: str, inv: dict[str, Any], files: dict[str, str]) -> None:
    args = _resolve(inv["args"], files)
    outdir = Path(tempfile.mkdtemp(prefix="sgtune_fuzz_out_"))
    try:
        before: dict[str, tuple[bytes, int]] = {}
        paths: dict[str, Path] = {}
        for pname, (flag, kind) in inv["outputs"].items():
            path = outdir / f"out_{pname}{OUTPUT_SUFFIX[pname]}"
            if kind == "existing":
                path.write_bytes(b"existing " + pname.encode())
                os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
                st_ = path.stat()
                before[pname] = (path.read_bytes(), st_.st_mtime_ns)
            paths[pname] = path
            args += [flag, str(path)]
        overwrite = "--overwrite" in args
        with warnings.catch_warnings():
            # a user's interpreter shows other libraries' warnings (the CLI prints them as one line each);
            # the test suite's filterwarnings=error must not turn them into crashes that users never see
            warnings.simplefilter("default")
            r = CliRunner().invoke(main, [name, *args])
        where = f"sgtune {name} {' '.join(args)}\nexit {r.exit_code}\nstderr:\n{r.stderr}"
        assert r.exception is None or isinstance(r.exception, SystemExit), f"{where}\n{r.exc_info!r}"
        assert r.exit_code in ALLOWED_EXIT, where
        for bad in ("Traceback", "internal error", "Aborted!", "Exception ignored"):
            assert bad not in r.stderr and bad not in r.stdout, where
        if r.exit_code in (1, 2):
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            assert lines and lines[-1].startswith("Error: "), where
            assert sum(ln.startswith("Error:") for ln in lines) == 1, where
            assert r.stdout == "", where
        leftovers = [p.name for p in outdir.iterdir() if p.name.endswith(".tmp")]
        assert not leftovers, f"{where}\ntemporary files left: {leftovers}"
        for pname, path in paths.items():
            if pname in before and (not overwrite or r.exit_code in (1, 2)):
                data, mtime = before[pname]
                assert path.read_bytes() == data and path.stat().st_mtime_ns == mtime, \
                    f"{where}\n{pname} changed without --overwrite or by a failed command"
            elif pname not in before and r.exit_code in (1, 2):
                assert not path.exists(), f"{where}\n{pname} created by a failed command"
        if r.exit_code == 0:
            if "json_path" in paths:
                doc = json.loads(paths["json_path"].read_text(), parse_constant=_no_constant)
            else:
                doc = json.loads(r.stdout, parse_constant=_no_constant)
            assert isinstance(doc, dict), where
            for pname, path in paths.items():  # every requested output was written
                assert path.exists() and (pname not in before or path.read_bytes() != before[pname][0]), \
                    f"{where}\n{pname} not written after exit 0"
    finally:
        shutil.rmtree(outdir, ignore_errors=True)


def _no_constant(token: str) -> Any:
    raise AssertionError(f"non-strict JSON constant {token} in the output")


# ------------------------------------------------------------------------------------------ tests

COMMANDS = sorted(main.list_commands(click.Context(main)))


def test_every_listed_command_has_a_base_invocation():
    assert sorted(BASE) == COMMANDS


@pytest.mark.parametrize("name", COMMANDS)
def test_base_invocations_succeed(name, files):
    """The starting points are valid: the fuzzer's failures come from what it changed."""
    check_invocation(name, {"args": BASE[name] + (["-q"] if name != "derive" else []), "outputs": {}}, files)
    r = CliRunner().invoke(main, [name, *_resolve(BASE[name], files)])
    assert r.exit_code == 0 or (name == "verify" and r.exit_code == 3), r.stderr  # 300 steps may not pass


@pytest.mark.parametrize("name", COMMANDS)
def test_fuzz_fast(name, files):
    @settings(max_examples=FAST_EXAMPLES, **SETTINGS)
    @given(inv=invocations(name))
    def prop(inv):
        check_invocation(name, inv, files)

    prop()


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMANDS)
def test_fuzz_long(name, files):
    @settings(max_examples=SLOW_EXAMPLES, **{**SETTINGS, "derandomize": False})
    @given(inv=invocations(name))
    def prop(inv):
        check_invocation(name, inv, files)

    prop()


# ------------------------------------------------------------------------------------------ processes
# Signals, two writers of one output, the environment and user model files: the same contract, for what a
# command line meets outside its arguments (subprocesses where the operating system is part of the test).

ROOT = Path(__file__).resolve().parents[2]
#: (default run, slow run) examples of each process-level property
FAST_PROC, SLOW_PROC = 3, 40
RUN_LONG = ["run", "--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", "3000000",
            "--chains", "2", "-q"]
LAMBDA_Q = ["lambda", "--example", "logistic", "--batch-size", "32", "-q"]
STOP_SIGNALS = {"SIGINT": ("interrupted (Ctrl-C)", 130), "SIGTERM": ("terminated (SIGTERM)", 143),
                "SIGHUP": ("hung up (SIGHUP)", 129)}


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _popen(args: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> Any:
    import signal
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", "from sgtune.cli import main; main()", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or _env(), cwd=cwd,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _handlers_installed(pid: int, signum: int, timeout: float = 120.0) -> bool:
    """Wait until the process catches ``signum`` (Linux: the SigCgt mask in /proc/PID/status), i.e. sgtune's
    main is running; before that the interpreter is still starting (and a signal kills it outright)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        mask = int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("SigCgt:")), 16)
        if mask >> (signum - 1) & 1:
            return True
        time.sleep(0.01)
    return False


def _outputs_left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def check_signal(signame: str, delay: float, command: str, outdir: Path) -> None:
    import signal
    import time

    signum = getattr(signal, signame)
    what, code = STOP_SIGNALS[signame]
    args = (RUN_LONG + ["-o", str(outdir / "r.npz")] if command == "run" else LAMBDA_Q + ["-o", str(outdir / "l.npy")])
    p = _popen([*args, "--json", str(outdir / "doc.json")])
    try:
        # SIGTERM's bit: Python catches SIGINT from its start, sgtune's main catches SIGTERM
        assert _handlers_installed(p.pid, signal.SIGTERM), "sgtune never started"
        time.sleep(delay)
        p.send_signal(signum)
        out, err = p.communicate(timeout=HANG_GUARD_S)
    finally:
        p.kill()
    err_text = err.decode()
    where = f"{signame} after {delay:.2f} s into sgtune {command}\nexit {p.returncode}\nstderr:\n{err_text}"
    assert "Traceback" not in err_text and "Exception ignored" not in err_text, where
    if p.returncode == 0:  # it finished before the signal arrived: every output complete
        assert json.loads((outdir / "doc.json").read_text())["dim"] == 5, where
        return
    lines = [ln for ln in err_text.splitlines() if ln.strip()]
    assert p.returncode == code, where
    assert lines[-1] == f"Error: {what}; outputs not yet renamed into place were removed", where
    assert sum(ln.startswith("Error") for ln in lines) == 1 and out == b"", where
    assert _outputs_left(outdir) == [], where


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc/PID/status (Linux)")
@settings(max_examples=FAST_PROC, **SETTINGS)
@given(signame=st.sampled_from(sorted(STOP_SIGNALS)), delay=st.floats(0.0, 4.0), command=st.sampled_from(["run", "lambda"]))
def test_fuzz_signals(signame, delay, command):
    with tempfile.TemporaryDirectory() as d:
        check_signal(signame, delay, command, Path(d))


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc/PID/status (Linux)")
@settings(max_examples=SLOW_PROC, **{**SETTINGS, "derandomize": False})
@given(signame=st.sampled_from(sorted(STOP_SIGNALS)), delay=st.floats(0.0, 20.0),
       command=st.sampled_from(["run", "lambda"]))
def test_fuzz_signals_long(signame, delay, command):
    with tempfile.TemporaryDirectory() as d:
        check_signal(signame, delay, command, Path(d))


def check_two_writers(offset: float, steps: int) -> None:
    """Two ``run -o same.npz`` at once (different seeds): one wins, the other exits 1 naming the file and
    leaves the winner's file as it is; nothing else is left."""
    import time

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "same.npz"
        base = ["run", "--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", str(steps),
                "--chains", "2", "-q", "-o", str(out)]
        first = _popen([*base, "--seed", "1"])
        time.sleep(offset)
        second = _popen([*base, "--seed", "2"])
        results = {}
        for seed, p in ((1, first), (2, second)):
            o, e = p.communicate(timeout=HANG_GUARD_S)
            results[seed] = (p.returncode, o.decode(), e.decode())
        where = "\n".join(f"seed {s}: exit {r[0]}\n{r[2]}" for s, r in results.items())
        winners = [s for s, r in results.items() if r[0] == 0]
        assert len(winners) == 1, where
        loser = 3 - winners[0]
        code, stdout, stderr = results[loser]
        lines = [ln for ln in stderr.splitlines() if ln.startswith("Error")]
        assert code == 1 and stdout == "" and len(lines) == 1 and str(out) in lines[0], where
        assert "already exists" in lines[0] or "was created by another process" in lines[0], where
        assert int(np.load(out)["seed"]) == winners[0], where
        assert _outputs_left(Path(d)) == ["same.npz"], where


@settings(max_examples=2, **SETTINGS)
@given(offset=st.floats(0.0, 1.0), steps=st.sampled_from([2000, 50000]))
def test_fuzz_two_writers_of_one_output(offset, steps):
    check_two_writers(offset, steps)


@pytest.mark.slow
@settings(max_examples=SLOW_PROC, **{**SETTINGS, "derandomize": False})
@given(offset=st.floats(0.0, 5.0), steps=st.sampled_from([2000, 200000, 2000000]))
def test_fuzz_two_writers_of_one_output_long(offset, steps):
    check_two_writers(offset, steps)


#: environments a command line meets: a numba cache folder it cannot write, one thread, the C locale, a
#: temporary folder it cannot write
ENVIRONMENTS = {"NUMBA_CACHE_DIR": "/proc/sgtune-no-cache", "NUMBA_NUM_THREADS": "1", "LC_ALL": "C",
                "TMPDIR": "/proc/sgtune-no-tmp"}


def check_environment(env_keys: list[str], command: str) -> None:
    env = _env(**{k: ENVIRONMENTS[k] for k in env_keys})
    with tempfile.TemporaryDirectory() as d:
        args = (["run", "--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", "300",
                 "--chains", "2", "-q", "-o", str(Path(d) / "r.npz")] if command == "run"
                else [*LAMBDA_Q, "-o", str(Path(d) / "l.npy")])
        p = _popen(args, env=env)
        out, err = p.communicate(timeout=HANG_GUARD_S)
        where = f"{env_keys} sgtune {command}\nexit {p.returncode}\nstderr:\n{err.decode(errors='replace')}"
        assert p.returncode == 0, where
        assert "Traceback" not in err.decode(errors="replace"), where
        json.loads(out.decode("utf-8"), parse_constant=_no_constant)
        err.decode("utf-8")  # the messages are UTF-8 whatever the locale
        assert _outputs_left(Path(d)) == (["r.npz"] if command == "run" else ["l.npy"]), where


@settings(max_examples=FAST_PROC, **SETTINGS)
@given(env_keys=st.lists(st.sampled_from(sorted(set(ENVIRONMENTS) - {"NUMBA_CACHE_DIR"})), min_size=1, unique=True),
       command=st.sampled_from(["run", "lambda"]))
def test_fuzz_environment(env_keys, command):
    """(An unwritable NUMBA_CACHE_DIR means compiling the kernels afresh, a minute: only in the long run; the
    fast test_input_traps.py checks where the cache goes.)"""
    check_environment(env_keys, command)


@pytest.mark.slow
@settings(max_examples=SLOW_PROC, **{**SETTINGS, "derandomize": False})
@given(env_keys=st.lists(st.sampled_from(sorted(ENVIRONMENTS)), min_size=1, unique=True),
       command=st.sampled_from(["run", "lambda"]))
def test_fuzz_environment_long(env_keys, command):
    check_environment(env_keys, command)


#: what a user's model file may do that is none of sgtune's business (where: at import, or in per_sample_grads)
MODEL_ACTS = {
    "print": "print('a line from the model')",
    "exit": "sys.exit(3)",
    "argparse": "argparse.ArgumentParser().parse_args()",  # reads sys.argv: sgtune's options, except at import
    "argparse-required": "p = argparse.ArgumentParser(); p.add_argument('--data', required=True); p.parse_args()",
    "chdir": "os.chdir(os.path.dirname(os.path.abspath(__file__)))",
    "raise": "raise ValueError('the model failed')",
    "sibling": "import sibling_of_the_model",
}


def _model_source(acts: dict[str, str]) -> str:
    at_import = acts.get("import", "pass")
    in_grads = acts.get("grads", "pass")
    return f"""
import argparse, os, sys
import numpy as np
from sgtune.models import RankOneCurvature

def _at_import():
    {MODEL_ACTS.get(at_import, 'pass')}

_at_import()


class Model:
    name = "fuzzed"
    fit_method = "newton"

    def per_sample_losses(self, theta, X, y):
        eta = X @ theta
        return np.logaddexp(0.0, eta) - y * eta

    def per_sample_grads(self, theta, X, y):
        if X.shape[0] < 100:  # on a minibatch: during the run
            {MODEL_ACTS.get(in_grads, 'pass')}
        p = 1.0 / (1.0 + np.exp(-(X @ theta)))
        return (p - y)[:, None] * X

    def curvature(self, theta, X, y):
        p = 1.0 / (1.0 + np.exp(-(X @ theta)))
        return RankOneCurvature(X, p * (1.0 - p))


MODEL = Model()
"""


def check_model_file(at_import: str, in_grads: str, folder: Path) -> None:
    models = folder / "models"
    models.mkdir()
    (models / "sibling_of_the_model.py").write_text("VALUE = 1\n")
    f = models / "fuzzed.py"
    f.write_text(_model_source({"import": at_import, "grads": in_grads}))
    out = folder / "out"
    out.mkdir()
    cwd = os.getcwd()
    args = ["run", "--example", "logistic", "--model", f"{f}:MODEL", "--batch-size", "32", "--step-size", "0.01",
            "--steps", "60", "--chains", "2", "-q", "-o", str(out / "r.npz")]
    # the model reads sys.argv as it would under `sgtune run ...`, not pytest's arguments (which vary by invocation)
    with mock.patch.object(sys, "argv", ["sgtune", *args]):
        r = CliRunner().invoke(main, args)
    where = f"model: {at_import} at import, {in_grads} in per_sample_grads\nexit {r.exit_code}\nstderr:\n{r.stderr}"
    assert os.getcwd() == cwd, where
    assert r.exception is None or isinstance(r.exception, SystemExit), f"{where}\n{r.exc_info!r}"
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, where
    fails = {"exit", "argparse-required", "raise"} & {at_import} or {"exit", "argparse", "argparse-required",
                                                                    "raise"} & {in_grads}
    if not fails:
        assert r.exit_code == 0, where
        assert json.loads(r.stdout, parse_constant=_no_constant)["model"].startswith("fuzzed"), where
        assert _outputs_left(out) == ["r.npz"], where
        return
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error")]
    assert r.exit_code == 1 and r.stdout == "" and len(errors) == 1, where
    assert r.stderr.strip().splitlines()[-1] == errors[0] and str(f) in errors[0], where
    assert _outputs_left(out) == [], where


@settings(max_examples=5, **SETTINGS)
@given(at_import=st.sampled_from(["pass", *MODEL_ACTS]), in_grads=st.sampled_from(["pass", *MODEL_ACTS]))
def test_fuzz_model_files(at_import, in_grads):
    with tempfile.TemporaryDirectory() as d:
        check_model_file(at_import, in_grads, Path(d))


@pytest.mark.slow
@settings(max_examples=SLOW_PROC, **{**SETTINGS, "derandomize": False})
@given(at_import=st.sampled_from(["pass", *MODEL_ACTS]), in_grads=st.sampled_from(["pass", *MODEL_ACTS]))
def test_fuzz_model_files_long(at_import, in_grads):
    with tempfile.TemporaryDirectory() as d:
        check_model_file(at_import, in_grads, Path(d))


# ------------------------------------------------------------------ multinomial labels, configuration, disk full

#: class labels a spreadsheet holds: text, numbers, and the ways a missing one is written
LABEL_POOL = ["cat", "dog", "emu", "0", "1", "2", "10", "2.5", "", "NA", "nan", "NaN", "null", "N/A", " cat "]
MISSING = {"", "na", "nan", "null", "n/a"}


def check_multinomial_labels(labels: list[str], folder: Path) -> None:
    """Whatever the labels: a missing one is refused in one line naming its CSV line; otherwise the classes are
    the distinct labels, sorted numerically when all are numbers, and none of them is a missing value."""
    rng = np.random.default_rng(len(labels))
    X = rng.normal(size=(len(labels), 2))
    f = folder / "labels.csv"
    f.write_text("a,b,label\n" + "\n".join(f"{x0:.6g},{x1:.6g},{lab}" for (x0, x1), lab in zip(X, labels)) + "\n")
    r = CliRunner().invoke(main, ["lambda", str(f), "--response", "label", "--model", "multinomial", "--batch-size",
                                  "4", "--prior-precision", "1", "-q", "--no-applicability"])
    where = f"labels {labels!r}\nexit {r.exit_code}\nstderr:\n{r.stderr}"
    assert r.exception is None or isinstance(r.exception, SystemExit), where
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, where
    missing = [i for i, lab in enumerate(labels) if lab.strip().lower() in MISSING]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error")]
    if missing:
        assert r.exit_code == 1 and len(errors) == 1 and "missing" in errors[0], where
        assert f"line{'s' if len(missing) > 1 else ''} {missing[0] + 2}" in errors[0], where
        return
    assert r.exit_code in (0, 1) and len(errors) == (r.exit_code == 1), where
    if r.exit_code == 0:
        texts = sorted({lab.strip() for lab in labels})
        try:
            want = [t for _, t in sorted((float(t), t) for t in texts)]
            want = [str(int(float(t))) if float(t).is_integer() else f"{float(t):g}" for t in want]
        except ValueError:
            want = texts
        assert json.loads(r.stdout)["classes"] == want, where


@settings(max_examples=FAST_EXAMPLES, **SETTINGS)
@given(labels=st.lists(st.sampled_from(LABEL_POOL), min_size=12, max_size=40))
def test_fuzz_multinomial_labels(labels):
    with tempfile.TemporaryDirectory() as d:
        check_multinomial_labels(labels, Path(d))


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **{**SETTINGS, "derandomize": False})
@given(labels=st.lists(st.sampled_from(LABEL_POOL), min_size=12, max_size=60))
def test_fuzz_multinomial_labels_long(labels):
    with tempfile.TemporaryDirectory() as d:
        check_multinomial_labels(labels, Path(d))


#: TOML values of every kind, as written in the file, and the text the same value has on the command line
CONFIG_VALUES = st.one_of(st.integers(-3, 3000), st.floats(-5, 5000, allow_nan=False), st.booleans(),
                          st.sampled_from(["N", "2N", "inf", "many", "logistic", "tanh", "16,16", ""]))


def _toml(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else json.dumps(value)


def check_config_value(key: str, value: Any, folder: Path, pyproject: bool = False) -> None:
    """A value in sgtune.toml is refused exactly when the same text is refused by the option on the command line
    (exit 2 naming the key, the value and the file); accepted, the command sees the value the option would."""
    from sgtune.cli._config import read_config, shared_params

    param = shared_params()[key]
    f = folder / ("pyproject.toml" if pyproject else "sgtune.toml")
    head = '[project]\nname = "mine"\nversion = "0.1"\n\n[tool.sgtune]\n' if pyproject else ""
    f.write_text(f"{head}{key} = {_toml(value)}\n")
    ctx = click.Context(click.Command("probe"))
    flag = getattr(param, "is_flag", False)
    try:
        if flag:
            typed = value if isinstance(value, bool) else click.BadParameter("not a flag value")
        else:
            typed = click.BadParameter("bool") if isinstance(value, bool) else param.type.convert(
                value if isinstance(value, str) else str(value), param, ctx)
    except click.BadParameter as exc:
        typed = exc
    where = f"{key} = {_toml(value)}"
    try:
        got = read_config(f, ctx)
    except click.UsageError as exc:
        assert isinstance(typed, click.BadParameter), f"{where}: refused in the file, taken by --{key}: {exc}"
        assert str(f) in exc.message and repr(key) in exc.message and "\n" not in exc.message, where
        return
    assert not isinstance(typed, click.BadParameter), f"{where}: taken from the file, refused by --{key}"
    if key not in ("data", "theta-hat", "prior-precision-matrix", "features"):
        assert got[param.name] == typed and type(got[param.name]) is type(typed), where


@settings(max_examples=4 * FAST_EXAMPLES, **SETTINGS)
@given(key=st.sampled_from(["batch-size", "seed", "subsample", "momentum", "prior-precision", "noise-variance",
                            "intercept", "without-replacement", "activation", "inverse-temperature", "model",
                            "hidden-sizes", "layout"]), value=CONFIG_VALUES)
def test_fuzz_configuration_file(key, value):
    with tempfile.TemporaryDirectory() as d:
        check_config_value(key, value, Path(d))


#: commands with two or more outputs (and what they write): the files must be a set under a full disk
MULTI_OUTPUT = {
    "lambda": (["lambda", "--example", "logistic", "--batch-size", "32", "--no-applicability"], ["-o", "L.npy"]),
    "covariance": (["covariance", "--example", "logistic", "--batch-size", "32", "--step-size", "0.01",
                    "--no-applicability"], ["-o", "C.npy"]),
    "run": (["run", "--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", "100",
             "--chains", "2"], ["-o", "trace.npz"]),
    "plan": (["plan", "--example", "logistic", "--tolerance", "0.2", "--batch-sizes", "32", "--families", "scalar",
              "--no-timing", "--no-applicability"], ["-o", "plan.csv"]),
}


def check_disk_full(command: str, k: int, folder: Path) -> None:
    """The k-th file the command writes hits a full disk: exit 1 with one line, the old files stay as they were
    (byte for byte), no new file and no temporary file."""
    import sgtune.cli._io as cli_io
    from _disk_full import atomic_write_failing_on

    base, out = MULTI_OUTPUT[command]
    args = [*base, "-q", *out[:1], str(folder / out[1]), "--json", str(folder / "doc.json"), "--overwrite"]
    for name in (out[1], "doc.json"):
        (folder / name).write_bytes(b"old " + name.encode())
    fake, seen = atomic_write_failing_on(k)
    with mock.patch.object(cli_io, "atomic_write", fake):
        r = CliRunner().invoke(main, args)
    where = f"{command}, disk full on file {k} of {seen}\nexit {r.exit_code}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, where
    if len(seen) < k:  # fewer files than k: nothing failed
        assert r.exit_code == 0, where
        return
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error")]
    assert r.exit_code == 1 and len(errors) == 1 and "No space left on device" in errors[0], where
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == {
        name: b"old " + name.encode() for name in (out[1], "doc.json")}, where


@settings(max_examples=FAST_EXAMPLES, **SETTINGS)
@given(command=st.sampled_from(sorted(MULTI_OUTPUT)), k=st.integers(1, 2))
def test_fuzz_disk_full_keeps_outputs_a_set(command, k):
    with tempfile.TemporaryDirectory() as d:
        check_disk_full(command, k, Path(d))


# ------------------------------------------------------------------ [tool.sgtune], last-layer inputs, exports (issue 37)
@settings(max_examples=2 * FAST_EXAMPLES, **SETTINGS)
@given(key=st.sampled_from(["batch-size", "seed", "subsample", "momentum", "prior-precision", "intercept",
                            "inverse-temperature", "model", "layout"]), value=CONFIG_VALUES)
def test_fuzz_pyproject_tool_table(key, value):
    """The same values in the ``[tool.sgtune]`` table of a pyproject.toml that also holds ``[project]``: refused
    exactly when the option refuses them, naming the file and its table."""
    with tempfile.TemporaryDirectory() as d:
        check_config_value(key, value, Path(d), pyproject=True)


#: features a user may hand ``--features``: good ones and every kind of bad one
FEATURE_KINDS = ["good", "nan", "inf", "one-column", "no-columns", "extra-row", "complex", "1-d", "3-d", "empty"]


def _features(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    phi = np.tanh(rng.normal(size=(n, 3)))
    if kind == "nan":
        phi[rng.integers(n), rng.integers(3)] = np.nan
    elif kind == "inf":
        phi[rng.integers(n), 0] = -np.inf
    return {"one-column": phi[:, :1], "no-columns": phi[:, :0], "extra-row": np.vstack([phi, phi[:1]]),
            "complex": phi + 1j, "1-d": phi[:, 0], "3-d": phi[:, :, None], "empty": phi[:0]}.get(kind, phi)


def check_last_layer_inputs(kind: str, head: str | None, folder: Path) -> None:
    """``--model last-layer`` on any features file, or a torch network file with any ``--head``: 0, or exit 1/2 with
    one ``Error:`` line; never a traceback; features that are not finite real numbers never give an answer."""
    rng = np.random.default_rng(FEATURE_KINDS.index(kind))
    n = 40
    X = rng.normal(size=(n, 2))
    np.savez(folder / "d.npz", X=X, y=X[:, 0] + 0.3 * rng.normal(size=n))
    np.save(folder / "phi.npy", _features(kind, n, rng))
    (folder / "net.py").write_text("import torch\ntorch.manual_seed(0)\nNET = torch.nn.Sequential(torch.nn.Linear(2, 3), "
                                   "torch.nn.Tanh(), torch.nn.Linear(3, 1))\n")
    source = ["--features", str(folder / "phi.npy")] if head is None else \
        ["--features-from", f"{folder / 'net.py'}:NET", *(["--head", head] if head else [])]
    r = CliRunner().invoke(main, ["lambda", str(folder / "d.npz"), "--model", "last-layer", *source, "--batch-size",
                                  "8", "--prior-precision", "1", "-q", "--no-applicability"])
    where = f"features {kind}, head {head!r}\nexit {r.exit_code}\nstderr:\n{r.stderr}"
    assert r.exception is None or isinstance(r.exception, SystemExit), where
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, where
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error")]
    assert r.exit_code in (0, 1, 2) and len(errors) == (r.exit_code != 0), where
    if head is None and kind in ("nan", "inf", "complex", "no-columns", "extra-row", "3-d", "empty"):
        assert r.exit_code != 0, where
    if head is not None:
        assert (r.exit_code == 0) == (head in ("", "2")), where  # the output layer is '2'; '0' feeds Tanh
    if r.exit_code == 0:
        assert np.all(np.isfinite(json.loads(r.stdout)["lambda"])), where


@settings(max_examples=2 * FAST_EXAMPLES, **SETTINGS)
@given(kind=st.sampled_from(FEATURE_KINDS), head=st.sampled_from([None, None, "", "2", "0", "1", "out", "2.weight"]))
def test_fuzz_last_layer_inputs(kind, head):
    pytest.importorskip("torch")
    with tempfile.TemporaryDirectory() as d:
        check_last_layer_inputs(kind, head, Path(d))


#: arguments the exports receive from a user's training loop, good and bad
EXPORT_VALUES = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 70),
                          st.sampled_from(["in-loss", "add", "weight-decay", "N"]))


def check_export(settings_: dict[str, Any], shape: tuple[int, ...], as_list: bool) -> None:
    """numpy_step from a tuned result with any settings, stepped on θ of any shape: an SgtuneError (one line) or a
    finite step of θ's shape; never a raw NumPy or Python error."""
    from sgtune.core.errors import SgtuneError
    from sgtune.io.export import numpy_step

    res = _tuned_logistic()
    kw = {k: v for k, v in settings_.items() if v is not None}
    try:
        step = numpy_step(res, **kw)
        theta = np.zeros(shape)
        out = step(theta.tolist() if as_list else theta, 0.0, np.ones(shape))
    except SgtuneError as exc:
        assert "\n" not in str(exc) and str(exc), repr(exc)
        return
    assert out[0].shape == shape and np.all(np.isfinite(out[0])), (kw, shape)


_TUNED: list[Any] = []


def _tuned_logistic() -> Any:
    if not _TUNED:
        from sgtune.core.config import Dynamics
        from sgtune.io.data import example
        from sgtune.models import expand, get_model
        from sgtune.theory.tuning import tune

        _TUNED.append(tune(expand(get_model("logistic"), example("logistic")), Dynamics(None, batch_size=32)))
    return _TUNED[0]


@settings(max_examples=6 * FAST_EXAMPLES, **SETTINGS)
@given(settings_=st.fixed_dictionaries({k: EXPORT_VALUES for k in ("momentum", "inv_temperature", "batch_size",
                                                                  "prior", "prior_precision", "n_data")}),
       shape=st.sampled_from([(5,), (3, 5), (4,), (5, 1), (0,), ()]), as_list=st.booleans())
def test_fuzz_exports(settings_, shape, as_list):
    check_export(settings_, shape, as_list)


#: the other commands with an output pair, interrupted like run and lambda above
PAIR_COMMANDS = {"covariance": (MULTI_OUTPUT["covariance"][0] + ["-q"], "C.npy"),
                 "plan": (MULTI_OUTPUT["plan"][0] + ["-q"], "plan.csv")}


def check_signal_pair(signame: str, delay: float, command: str, outdir: Path) -> None:
    """SIGINT/SIGTERM/SIGHUP at any time into a command writing -o and --json: either both complete (exit 0) or
    one line, the signal's exit code and no file at all."""
    import signal
    import time

    what, code = STOP_SIGNALS[signame]
    args, out = PAIR_COMMANDS[command]
    p = _popen([*args, "-o", str(outdir / out), "--json", str(outdir / "doc.json")])
    try:
        assert _handlers_installed(p.pid, signal.SIGTERM), "sgtune never started"
        time.sleep(delay)
        p.send_signal(getattr(signal, signame))
        _, err = p.communicate(timeout=HANG_GUARD_S)
    finally:
        p.kill()
    err_text = err.decode()
    where = f"{signame} after {delay:.2f} s into sgtune {command}\nexit {p.returncode}\nstderr:\n{err_text}"
    assert "Traceback" not in err_text and "Exception ignored" not in err_text, where
    if p.returncode == 0:
        assert _outputs_left(outdir) == sorted([out, "doc.json"]), where
        json.loads((outdir / "doc.json").read_text())
        return
    lines = [ln for ln in err_text.splitlines() if ln.strip()]
    assert p.returncode == code and lines[-1] == f"Error: {what}; outputs not yet renamed into place were removed", where
    assert _outputs_left(outdir) == [], where


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc/PID/status (Linux)")
@settings(max_examples=FAST_PROC, **SETTINGS)
@given(signame=st.sampled_from(sorted(STOP_SIGNALS)), delay=st.floats(0.0, 3.0),
       command=st.sampled_from(sorted(PAIR_COMMANDS)))
def test_fuzz_signals_on_every_output_pair(signame, delay, command):
    with tempfile.TemporaryDirectory() as d:
        check_signal_pair(signame, delay, command, Path(d))
