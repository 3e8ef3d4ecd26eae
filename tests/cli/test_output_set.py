"""One command's outputs are a set: every file new, or none replaced (disk full on the second file, an exception,
SIGTERM at any moment), and no temporary file is left behind."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _disk_full import atomic_write_failing_on
from _timeouts import HANG_GUARD_S
from click.testing import CliRunner

import sgtune.cli._io as cli_io
from sgtune.cli import main
from sgtune.io import _files

ROOT = Path(__file__).resolve().parents[2]
LAMBDA = ["lambda", "--example", "logistic", "-q", "--no-applicability"]


def invoke(args):
    return CliRunner().invoke(main, args)


def _old_pair(folder: Path) -> dict[str, bytes]:
    """A consistent pair from B = 8 (the 'old' outputs a later command may replace)."""
    r = invoke([*LAMBDA, "--batch-size", "8", "-o", str(folder / "L.npy"), "--json", str(folder / "L.json"),
                "--overwrite"])
    assert r.exit_code == 0, r.stderr
    return {name: (folder / name).read_bytes() for name in ("L.npy", "L.json")}


def _consistent(folder: Path) -> bool:
    """L.json describes L.npy (its 'lambda' is the array's)."""
    doc = json.loads((folder / "L.json").read_text())
    return np.array_equal(np.asarray(doc["lambda"]), np.load(folder / "L.npy"))


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _fail_on_file(monkeypatch, k: int) -> list[str]:
    """The k-th file the command writes (1-based) hits a full disk after a few bytes."""
    fake, seen = atomic_write_failing_on(k)
    monkeypatch.setattr(cli_io, "atomic_write", fake)
    return seen


@pytest.mark.parametrize("k", [1, 2])
def test_disk_full_on_either_file_replaces_neither(tmp_path, monkeypatch, k):
    old = _old_pair(tmp_path)
    seen = _fail_on_file(monkeypatch, k)
    r = invoke([*LAMBDA, "--batch-size", "64", "-o", str(tmp_path / "L.npy"), "--json", str(tmp_path / "L.json"),
                "--overwrite"])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error")]
    assert r.exit_code == 1 and len(errors) == 1 and "No space left on device" in errors[0], r.stderr
    assert len(seen) == k
    assert {name: (tmp_path / name).read_bytes() for name in old} == old  # the old pair, untouched
    assert _temporaries(tmp_path) == []


def test_disk_full_on_the_run_json_keeps_no_trace(tmp_path, monkeypatch):
    seen = _fail_on_file(monkeypatch, 2)
    r = invoke(["run", "--example", "logistic", "--batch-size", "32", "--step-size", "0.01", "--steps", "200",
                "--chains", "2", "-q", "-o", str(tmp_path / "trace.npz"), "--json", str(tmp_path / "run.json")])
    assert r.exit_code == 1 and "No space left on device" in r.stderr, r.stderr
    assert seen[-1].endswith("run.json") and list(tmp_path.iterdir()) == []


def test_an_exception_after_the_first_output_writes_nothing(tmp_path, monkeypatch):
    """lambda writes -o and --json, then its plot: a failure there leaves no new -o or --json either."""
    def boom(kw, png):
        raise OSError(errno.EIO, "Input/output error", str(tmp_path / "p.png"))

    monkeypatch.setattr("sgtune.cli.cmd_lambda.write_plot", boom)
    r = invoke([*LAMBDA, "--batch-size", "64", "-o", str(tmp_path / "L.npy"), "--json", str(tmp_path / "L.json")])
    assert r.exit_code == 1, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rename_puts_back_the_files_already_replaced(tmp_path, monkeypatch):
    """The renames themselves: when the second fails, the first file is restored from its hard link."""
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("old " + name)
    real = os.replace
    calls = []

    def replace(src, dst):
        calls.append(dst)
        if str(dst).endswith("b.txt") and len(calls) < 3:
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(_files.os, "replace", replace)
    with pytest.raises(OSError):
        with _files.output_set():
            for name in ("a.txt", "b.txt"):
                with _files.atomic_path(tmp_path / name) as tmp:
                    Path(tmp).write_text("new " + name)
    assert [(tmp_path / n).read_text() for n in ("a.txt", "b.txt")] == ["old a.txt", "old b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_outputs_appear_only_when_the_set_is_complete(tmp_path):
    with _files.output_set():
        with _files.atomic_path(tmp_path / "a.txt") as tmp:
            Path(tmp).write_text("a")
        assert not (tmp_path / "a.txt").exists()  # staged, not yet in place
        with _files.atomic_path(tmp_path / "b.txt") as tmp:
            Path(tmp).write_text("b")
    assert (tmp_path / "a.txt").read_text() == "a" and (tmp_path / "b.txt").read_text() == "b"
    assert _temporaries(tmp_path) == []


def test_a_long_output_name_gets_a_shorter_temporary_name(tmp_path):
    """A 250-byte file name is legal; its temporary (".NAME.xxxxxxxx.tmp") must not be longer than 255 bytes."""
    name = "L" * 246 + ".npy"
    r = invoke([*LAMBDA, "--batch-size", "32", "-o", str(tmp_path / name)])
    assert r.exit_code == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]
    assert len(os.fsencode(Path(_files.temporary_name(tmp_path / ("é" * 127 + ".npy"))).name)) <= _files.NAME_MAX


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _sigterm_trials(tmp_path: Path, n: int, seed: int) -> None:
    """``n`` runs of ``lambda -o L.npy --json L.json --overwrite`` over an old pair, each sent SIGTERM at a random
    moment (spread over the run, most near its end, where the files are written and renamed): afterwards the
    pair is the old one or the new one, consistent, and no temporary file is left."""
    _old_pair(tmp_path)
    args = [sys.executable, "-c", "from sgtune.cli import main; main()", *LAMBDA, "--batch-size", "64", "-o",
            str(tmp_path / "L.npy"), "--json", str(tmp_path / "L.json"), "--overwrite"]
    tic = time.monotonic()
    subprocess.run(args, env=_env(), check=True, capture_output=True, timeout=HANG_GUARD_S)
    full = time.monotonic() - tic  # the length of one run on this machine: only to spread the signals over it
    rng = np.random.default_rng(seed)
    outcomes = set()
    for _ in range(n):
        _old_pair(tmp_path)
        p = subprocess.Popen(args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(full * (rng.uniform(0.3, 1.1) if rng.random() < 0.8 else rng.uniform(0, 0.3)))
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=HANG_GUARD_S)
        assert p.returncode in (0, 143, -signal.SIGTERM), err.decode()
        assert _consistent(tmp_path), (p.returncode, err.decode())
        assert _temporaries(tmp_path) == [], (p.returncode, err.decode())
        outcomes.add(p.returncode)


def test_sigterm_at_random_moments_leaves_a_consistent_pair(tmp_path):
    _sigterm_trials(tmp_path, 4, seed=1)


@pytest.mark.slow
def test_sigterm_at_random_moments_leaves_a_consistent_pair_many_trials(tmp_path):
    _sigterm_trials(tmp_path, 50, seed=2)


def test_a_sidecar_next_to_another_lambda_is_refused_loudly(tmp_path):
    """The pair of B = 8, then L.npy replaced by the Λ of B = 64 (as a half-replaced pair would be): run --lambda
    says so even under -q, in the JSON's warnings too, and does not use the sidecar's target."""
    import hashlib

    _old_pair(tmp_path)
    side = json.loads((tmp_path / "L.json").read_text())
    lam8 = np.load(tmp_path / "L.npy")
    want = "sha256:" + hashlib.sha256(str(lam8.shape).encode() + lam8.astype("<f8").tobytes()).hexdigest()
    assert side["array_digests"] == {"L.npy": want}
    r = invoke([*LAMBDA, "--batch-size", "64", "-o", str(tmp_path / "other.npy")])
    assert r.exit_code == 0, r.stderr
    os.replace(tmp_path / "other.npy", tmp_path / "L.npy")
    r = invoke(["run", "--example", "logistic", "--batch-size", "64", "--lambda", str(tmp_path / "L.npy"), "--steps",
                "200", "--chains", "2", "-q"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["against"] == "prediction"
    assert any("is not the JSON of" in w and "L.json" in w for w in doc["warnings"]), doc["warnings"]
    assert "warning: " in r.stderr and "is not the JSON of" in r.stderr
