"""Issue 19 item 5: every bad input ends with one line naming the option and the fix (exit 1 or 2),
never a traceback, an OS kill or a bare "Aborted!"; outputs are regular files with the user's umask."""
from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np
import pytest
from _timeouts import HANG_GUARD_S
from click.testing import CliRunner

from sgtune.core.config import Dynamics, RunSpec
from sgtune.cli import main
from sgtune.cli._io import in_option_names
from sgtune.io.data import example
from sgtune.sampler import run_chains
from sgtune.sampler.driver import chain_memory

LAMBDA = ["lambda", "--example", "logistic", "--batch-size", "32", "-q"]
COVARIANCE = ["covariance", "--example", "logistic", "--batch-size", "32", "-q"]
RUN = ["run", "--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", "100", "-q"]


def invoke(args, **kw):
    return CliRunner().invoke(main, args, **kw)


def one_error_line(r, code):
    """The result failed with ``code`` and stderr is exactly one ``Error: …`` line; returns it."""
    assert r.exit_code == code, (r.exit_code, r.stderr)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    assert "Traceback" not in r.stderr + r.stdout and "Aborted!" not in r.stderr
    return lines[0]


# ------------------------------------------------------------------- option values
@pytest.mark.parametrize("extra,option,fix", [
    (["--seed", "-1", "--subsample", "50"], "'--seed'", "x>=0"),
    (["--subsample", "0"], "'--subsample'", "x>=1"),
    (["--subsample", "5000"], "'--subsample'", "give at most 2000"),
])
def test_out_of_range_seed_and_subsample_are_one_line_usage_errors(extra, option, fix):
    line = one_error_line(invoke([*LAMBDA, *extra]), 2)
    assert f"Invalid value for {option}" in line and fix in line and "--help" in line


def test_unknown_option_is_one_line_with_the_help_hint():
    line = one_error_line(invoke([*LAMBDA, "--bogus"]), 2)
    assert "--bogus" in line and "lambda --help" in line


@pytest.mark.parametrize("extra,start", [
    (["--chains", "0"], "Error: --chains must be >= 1, got 0"),
    (["--thin", "-1"], "Error: --thin must be >= 0"),
    (["--burn-in", "200"], "Error: --burn-in must be <= 99"),
    (["--momentum", "1"], "Error: --momentum must lie in [0, 1)"),
    (["--noise-variance", "-1"], "Error: --noise-variance must be > 0"),
    (["--sampler", "sghmc", "--friction", "-1"], "Error: --friction must be > 0"),
])
def test_library_messages_name_the_option_not_the_python_parameter(extra, start):
    # an out-of-range value of an option is a usage error: exit 2, as the help's exit-status table says
    assert one_error_line(invoke([*RUN, *extra]), 2).startswith(start)


def test_lambda_file_of_the_wrong_shape_names_lambda(tmp_path):
    bad = tmp_path / "lam.npy"
    np.save(bad, np.ones(3))
    line = one_error_line(invoke([*COVARIANCE, "--lambda", str(bad)]), 1)
    assert line.startswith("Error: --lambda") and "step_matrix" not in line


def test_in_option_names_rules():
    opts = {"step_matrix": "--lambda", "momentum": "--momentum", "thin": "--thin", "beta_power": "--beta-power"}
    assert in_option_names("step_matrix (--lambda) of shape (3,)", opts) == "--lambda of shape (3,)"
    assert in_option_names("reduce step_matrix by 2", opts) == "reduce --lambda by 2"
    assert in_option_names("momentum must lie in [0, 1)", opts) == "--momentum must lie in [0, 1)"
    assert in_option_names("momentum tuning stopped", opts) == "momentum tuning stopped"  # prose stays
    assert in_option_names("use a larger `thin`", opts) == "use a larger --thin"
    assert in_option_names("needs beta_power (--beta-power P) > 1", opts) == "needs --beta-power P > 1"
    assert in_option_names("x.step_matrix and 'step_matrix'", opts) == "x.step_matrix and 'step_matrix'"
    # `name='value'`: the option and the value as typed; a name the command has no option for stays
    opts |= {"layout": "--layout", "hessian=": "--hessian", "hessian": "--hessian-file"}
    assert in_option_names("`layout='full'` needs `thin` > 0", opts) == "--layout full needs --thin > 0"
    assert in_option_names("use `hessian='gauss-newton'`", opts) == "use --hessian gauss-newton"
    assert in_option_names("`blocks=b.json`: no file", opts) == "`blocks=b.json`: no file"
    assert in_option_names("use `hessian='gauss-newton'`", {"hessian": "--hessian"}) == "use `hessian='gauss-newton'`"


@pytest.mark.parametrize("args, says", [
    (["--model", "mlp", "--hidden-sizes", "2,,3"], "Error: --hidden-sizes must be positive integer widths"),
    (["--model", "logistic"], "pass a --prior-precision > 0"),
    (["--model", "linear", "--response", "nope"], "pass the response column's name (--response NAME)"),
    (["--model", "linear", "--family", "block", "--blocks", "absent.json"], "Error: --blocks absent.json: cannot read"),
])
def test_library_messages_show_the_option_typed(tmp_path, monkeypatch, args, says):
    """The library's messages name parameters (`hidden_sizes`); the command's one line names the option."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 2))
    np.savetxt("d.csv", np.column_stack([x, x[:, 0] > 0]), delimiter=",", header="a,b,y", comments="")
    # a value the option does not take ("2,,3") is a usage error (exit 2); the others are domain errors
    line = one_error_line(invoke(["lambda", "d.csv", "--batch-size", "8", "-q", *args]),
                          2 if "--hidden-sizes" in args else 1)
    assert says in line and "`" not in line, line


# ------------------------------------------------------------------- malformed input files
@pytest.mark.parametrize("name,content,says", [
    ("empty.csv", b"", "is empty"),
    ("empty.npy", b"", "is empty"),
    ("garbage.npy", bytes(range(256)) * 2, "is not a .npy file"),
    ("text.csv", b"a,b\n1,x\n", "'a' is not a number"),
    ("ragged.csv", b"1,0\n0,1,3\n", "different lengths"),
    ("nan.csv", b"1,0\n0,nan\n", "non-finite"),
    ("truncated.npy", None, "cannot read"),
    ("missing.npy", "absent", "does not exist"),
])
def test_malformed_lambda_file_is_one_line_naming_lambda(tmp_path, name, content, says):
    path = tmp_path / name
    if content is None:
        np.save(path, np.eye(5))
        path.write_bytes(path.read_bytes()[:140])
    elif content != "absent":
        path.write_bytes(content)
    line = one_error_line(invoke([*COVARIANCE, "--lambda", str(path)]), 1)
    assert line.startswith("Error: --lambda") and says in line, line


def test_a_csv_of_numbers_is_read_as_lambda(tmp_path):
    csv, npy = tmp_path / "lam.csv", tmp_path / "lam.npy"
    np.savetxt(csv, 0.01 * np.eye(5), delimiter=",")
    np.save(npy, 0.01 * np.eye(5))
    a, b = invoke([*COVARIANCE, "--lambda", str(csv)]), invoke([*COVARIANCE, "--lambda", str(npy)])
    assert a.exit_code == b.exit_code == 0, a.stderr
    assert json.loads(a.stdout)["cov"] == json.loads(b.stdout)["cov"]


# ------------------------------------------------------------------- outputs
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
@pytest.mark.parametrize("option", ["-o", "--output", "--json"])
def test_output_in_a_folder_that_takes_no_files(option):
    """The message names the option as the user typed it (-o, not --output, when -o was typed)."""
    name = "/proc/x.json" if option == "--json" else "/proc/x.npy"
    line = one_error_line(invoke([*LAMBDA, option, name]), 1)
    assert line.startswith(f"Error: {option} {name}: cannot create files in /proc")


def test_fifo_and_symlink_outputs_are_refused_even_with_overwrite(tmp_path):
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)
    target = tmp_path / "target.npy"
    target.write_bytes(b"precious")
    link = tmp_path / "link.npy"
    link.symlink_to(target)
    line = one_error_line(invoke([*LAMBDA, "-o", str(fifo), "--overwrite"]), 1)
    assert "is a FIFO (named pipe), not a regular file" in line
    line = one_error_line(invoke([*LAMBDA, "--json", str(link), "--overwrite"]), 1)
    assert "--json" in line and "is a symbolic link" in line
    assert target.read_bytes() == b"precious" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.npy", "link.npy", "target.npy"]


def test_directory_output_is_a_usage_error(tmp_path):
    line = one_error_line(invoke([*LAMBDA, "-o", str(tmp_path)]), 2)
    assert "'-o' / '--output'" in line and "is a directory" in line


def test_device_output_is_refused(monkeypatch):
    def never(*args):  # a regression must not replace the machine's /dev/null (as root it could)
        raise AssertionError(f"os.replace{args} on a device")

    monkeypatch.setattr(os, "replace", never)
    line = one_error_line(invoke([*LAMBDA, "--json", "/dev/null", "--overwrite"]), 1)
    assert "/dev/null is a character device" in line


def test_new_output_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        r = invoke([*LAMBDA, "-o", str(tmp_path / "lam.npy"), "--json", str(tmp_path / "doc.json")])
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.stderr
    for name in ("lam.npy", "doc.json"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o640


def test_derive_json_needs_overwrite(tmp_path):
    out = tmp_path / "d.json"
    out.write_text("keep")
    before = os.stat(out).st_mtime_ns
    line = one_error_line(invoke(["derive", "nld", "--json", str(out)]), 1)
    assert "already exists; pass --overwrite" in line
    assert out.read_text() == "keep" and os.stat(out).st_mtime_ns == before
    assert invoke(["derive", "nld", "--json", str(out), "--overwrite"]).exit_code == 0
    assert json.loads(out.read_text())["name"] == "nld"


def _subprocess(args, stdout):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-c", "from sgtune.cli import main; main()", *args],
                          stdout=stdout, stderr=subprocess.PIPE, env=env, timeout=HANG_GUARD_S)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_device_is_one_line():
    with open("/dev/full", "w") as full:
        p = _subprocess(["derive", "nld"], full)
    err = p.stderr.decode()  # derive shows the formula on stderr, then fails on stdout
    assert p.returncode == 1 and "Traceback" not in err and "Exception ignored" not in err
    assert err.splitlines()[-1] == "Error: cannot write the JSON to stdout: No space left on device"
    assert sum(line.startswith("Error") for line in err.splitlines()) == 1


def test_stdout_to_a_closed_pipe_exits_quietly():
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written (| head that already exited)
    try:
        p = _subprocess(["derive", "nld"], w)
    finally:
        os.close(w)
    err = p.stderr.decode()  # derive's formula on stderr, then nothing: no error, no traceback
    assert p.returncode == 1 and "Error" not in err and "Traceback" not in err and "Exception" not in err


def _wait_for_sgtune_main(pid: int) -> None:
    """Wait until sgtune's main catches SIGTERM (the SigCgt mask in /proc/PID/status; Python itself catches
    SIGINT from its start), i.e. the imports are done, however loaded the machine."""
    import signal

    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        text = Path(f"/proc/{pid}/status").read_text()
        mask = int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("SigCgt:")), 16)
        if mask >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.01)
    raise AssertionError("sgtune never started")


# ------------------------------------------------------------------- memory
def test_run_with_1e8_chains_is_refused_before_allocating():
    line = one_error_line(invoke([*RUN, "--chains", "100000000"]), 1)  # 1e8 × 100 × 5 doubles: never allocated
    assert "100000000 chains × 100 steps (D = 5) would need about" in line
    assert "is available" in line and "fewer --chains" in line


def test_memory_refusal_names_steps_and_thin_when_the_trace_dominates(monkeypatch):
    monkeypatch.setattr("sgtune.sampler.driver.available_memory", lambda: 10**6)
    line = one_error_line(invoke([*RUN, "--steps", "100000", "--thin", "1", "--chains", "4"]), 1)
    assert "would need about 14.4 MB" in line and "but 1 MB is available" in line
    assert "larger --thin (or fewer --steps), or use fewer --chains" in line


def test_memory_estimate_covers_the_arrays_of_a_run():
    ds = example("logistic")
    res = run_chains("logistic", ds, Dynamics(0.01, 32), RunSpec(400, n_chains=3, thin=2, seed=1))
    est = chain_memory(n_chains=3, dim=5, n_trace=(400 - 40) // 2, n_segments=11)
    assert res.trace.nbytes <= est["draws"] < 1.1 * res.trace.nbytes
    assert res.chain_covs.nbytes + res.chain_means.nbytes < est["moments"]


# ------------------------------------------------------------------- interrupts and bugs
def test_ctrl_c_is_one_line_and_exit_130(monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("sgtune.cli._options.example", interrupted)
    r = invoke(LAMBDA)
    assert r.exit_code == 130 and "Aborted!" not in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("Error: interrupted (Ctrl-C)")


def test_an_unexpected_exception_is_one_internal_error_line(monkeypatch):
    def bug(*a, **k):
        raise TypeError("boom\nsecond line")

    monkeypatch.setattr("sgtune.cli._options.example", bug)
    line = one_error_line(invoke(LAMBDA), 1)
    assert line.startswith("Error: internal error (TypeError: boom); this is a bug in sgtune")
    monkeypatch.setenv("SGTUNE_DEBUG", "1")
    assert isinstance(invoke(LAMBDA).exception, TypeError)


def test_exit_codes_are_documented_in_the_help():
    text = invoke(["--help"]).stdout
    for code, what in [("0", "success"), ("1", "domain"), ("2", "usage"), ("3", "verification failed"),
                       ("4", "--strict"), ("130", "interrupted")]:
        assert any(line.split()[:1] == [code] and what in line for line in text.splitlines()), (code, text)


# ------------------------------------------------------------------- found by the fuzzer (test_fuzz.py)
@pytest.mark.parametrize("args", [
    ["minibatch-error", "--example", "logistic", "--batch-size", "8", "--step-size", "inf"],  # inf reached the JSON
    ["run", "--example", "logistic", "--batch-size", "8", "--steps", "10", "--step-size", "nan"],
    ["lambda", "--example", "logistic", "--batch-size", "8", "--prior-precision", "-inf"],
])
def test_non_finite_float_options_are_usage_errors(args):
    line = one_error_line(invoke([*args, "-q"]), 2)
    assert f"Invalid value for '{args[-2]}': must be a finite number, got {float(args[-1])}" in line


@pytest.mark.parametrize("command,option", [
    (["fluctuation", "nld", "--observable", "{l}", "--antisymmetric", "{J}", "--hessian"], "--hessian"),
    (["reshuffle", "--batch-size", "4", "--step", "0.1", "--data"], "--data"),
])
@pytest.mark.parametrize("content", [b"", b"\x93NUMPY\x01\x00"])
def test_empty_or_truncated_npy_in_the_own_loaders_names_the_option(tmp_path, command, option, content):
    """np.load raised EOFError on these, which click turned into a bare 'Aborted!'."""
    np.save(tmp_path / "l.npy", np.array([1.0, 0.5]))
    np.save(tmp_path / "J.npy", np.array([[0.0, 1.0], [-1.0, 0.0]]))
    bad = tmp_path / "bad.npy"
    bad.write_bytes(content)
    args = [a.format(l=tmp_path / "l.npy", J=tmp_path / "J.npy") for a in command]
    line = one_error_line(invoke([*args, str(bad), "-q"]), 1)
    assert line.startswith(f"Error: {option}") and "bad.npy" in line


def test_fluctuation_matrix_messages_name_the_option_but_lambda_hessian_choice_is_not_a_matrix(tmp_path):
    np.save(tmp_path / "A.npy", np.ones(3))
    np.save(tmp_path / "l.npy", np.ones(3))
    np.save(tmp_path / "J.npy", np.zeros((3, 3)))
    line = one_error_line(invoke(["fluctuation", "nld", "--hessian", str(tmp_path / "A.npy"), "--observable",
                                  str(tmp_path / "l.npy"), "--antisymmetric", str(tmp_path / "J.npy")]), 1)
    assert line.startswith("Error: --hessian must be square")
    from sgtune.cli._io import _command_options

    with click.Context(command("lambda")) as ctx:
        assert "hessian" not in _command_options({"hessian": "exact"}) and ctx.command.name == "lambda"
    with click.Context(command("fluctuation")):
        assert _command_options({})["hessian"] == "--hessian"


def command(name):
    return main.get_command(click.Context(main), name)


def test_verify_tiny_alpha_is_a_finite_threshold_or_one_line():
    """1 − α/(2k) rounded to 1 for α < ~1e-14: an infinite threshold reached the JSON (found by the fuzzer)."""
    from sgtune.diagnostics.mcse import bonferroni_threshold

    assert bonferroni_threshold(1e-30, 15) == pytest.approx(11.7549, abs=1e-4)  # Φ⁻¹(1 − 1e-30/30)
    base = ["verify", "--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", "300",
            "--chains", "2", "-q"]
    r = invoke([*base, "--alpha", "1e-30"])
    assert r.exit_code in (0, 3), r.stderr
    assert math.isfinite(json.loads(r.stdout)["threshold"])
    line = one_error_line(invoke([*base, "--alpha", "5e-324"]), 2)  # an out-of-range option value: exit 2
    assert line.startswith("Error: --alpha must be at least")


def test_ctrl_c_stops_a_quiet_run_promptly_with_one_line(tmp_path):
    """SIGINT during a long -q run: exit 130 within seconds (the kernel runs in 50 calls, so Python gets to
    raise KeyboardInterrupt between them), one line, and no output file."""
    import signal

    out = tmp_path / "trace.npz"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    p = subprocess.Popen([sys.executable, "-c", "from sgtune.cli import main; main()", *RUN[:-3], "--steps",
                          "100000000", "--chains", "2", "-q", "-o", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for_sgtune_main(p.pid)  # before, Python is still importing (a SIGINT there is Python's, not sgtune's)
        time.sleep(2)
        p.send_signal(signal.SIGINT)
        # 10⁸ steps take hours: ending at all (before the hang guard) is ending at the interrupt
        _, err = p.communicate(timeout=HANG_GUARD_S)
    finally:
        p.kill()
    assert p.returncode == 130
    assert err.decode().strip().splitlines()[-1].startswith("Error: interrupted (Ctrl-C)")
    assert "Traceback" not in err.decode() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("make_args", [
    lambda f: ["lambda", f, "--model", "linear", "--batch-size", "8"],
    lambda f: ["reshuffle", "--data", f, "--batch-size", "4", "--step", "0.1", "--column", "a"],
])
def test_binary_csv_is_one_line_not_a_unicode_error(tmp_path, make_args):
    """A .csv that is not UTF-8 text raised UnicodeDecodeError (found by the fuzzer)."""
    bad = tmp_path / "garbage.csv"
    bad.write_bytes(b"\xff\xfe\x9b\xc4" + bytes(range(256)))
    line = one_error_line(invoke([*make_args(str(bad)), "-q"]), 1)
    assert "garbage.csv" in line and ("UTF-8" in line or "utf-8" in line)


def test_fluctuation_budget_beyond_double_precision_is_refused(tmp_path):
    """--budget 4.3e17 divided by a stable step that underflowed to 0 (found by the fuzzer)."""
    for name, arr in [("A", [[2.0, 0.3], [0.3, 1.0]]), ("l", [1.0, 0.5]), ("J", [[0.0, 1.0], [-1.0, 0.0]])]:
        np.save(tmp_path / f"{name}.npy", np.array(arr))
    args = ["fluctuation", "nld", "--hessian", str(tmp_path / "A.npy"), "--observable", str(tmp_path / "l.npy"),
            "--antisymmetric", str(tmp_path / "J.npy"), "-q", "--budget"]
    line = one_error_line(invoke([*args, "4.3121770100104896e+17"]), 2)  # an out-of-range option value: exit 2
    assert line.startswith("Error: --budget must be at most 1e7")
    assert invoke([*args, "1e7"]).exit_code == 0


@pytest.mark.parametrize("extra,start", [
    (["--chains", "1", "--batches-per-chain", "1"], "Error: --batches-per-chain must be at least 2 with --chains = 1"),
    (["--batches-per-chain", "30000"], "Error: --batches-per-chain must be at most the steps each chain keeps"),
    (["--batches-per-chain", "0"], "Error: Invalid value for '--batches-per-chain'"),
])
def test_batch_means_that_cannot_give_standard_errors_are_usage_errors(extra, start):
    """One chain with one batch mean has no standard error (it ended in an internal error about a NaN); more
    batches than kept steps was cut down silently."""
    assert one_error_line(invoke([*RUN, *extra]), 2).startswith(start)


def test_runspec_checks_the_batch_means():
    from sgtune.core.config import RunSpec
    from sgtune.core.errors import SgtuneError

    assert RunSpec(1000, n_chains=4, batches_per_chain=900).segments == 900
    with pytest.raises(SgtuneError, match=r"at most the steps each chain keeps after burn-in \(900\), got 901"):
        RunSpec(1000, n_chains=4, batches_per_chain=901)
    with pytest.raises(SgtuneError, match="at least 2 with n_chains = 1"):
        RunSpec(1000, n_chains=1, batches_per_chain=1)
    with pytest.raises(SgtuneError, match="n_steps must leave at least 2 steps"):
        RunSpec(1, n_chains=1)
    assert RunSpec(1000, n_chains=2, batches_per_chain=1).segments == 1  # 2 batch means in all
