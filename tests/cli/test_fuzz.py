"""Property-based fuzzing of the whole command line (issue 19 item 6).

Every command that ``sgtune --help`` lists is run in-process (click's ``CliRunner``) from a small,
valid invocation on tiny data, with random options added or replaced: integers (negative, zero,
huge), floats (nan, ±inf, negative, subnormal, huge), strings, choices outside their set, and paths
to malformed files (empty, binary garbage, wrong shapes, text or NaN in a CSV, a folder, a missing
file). Whatever the input, the contract (``sgtune --help``, CLI.md) must hold:

* the exit status is one of 0, 1, 2, 3, 4, and the command ended by ``SystemExit`` (no exception);
* no traceback, no "internal error" (the group's net for bugs), no bare "Aborted!";
* a failure (1, 2) ends with exactly one ``Error: …`` line on stderr;
* success prints one strict JSON document (or writes it to ``--json``) and every requested output;
* no partial output: a failed command creates no output file and leaves no temporary file;
* an existing output file is untouched (bytes and mtime) without ``--overwrite``, and by a failure.

The default run is small and derandomised (reproducible); ``-m slow`` runs the long search.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
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
