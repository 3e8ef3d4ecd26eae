"""The CSV header's names reach the JSON of every command that prints θ̂, Λ, a target or a covariance,
and label the rows of the tables on stderr."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.models.mlp import MLP

HEADER = ("age", "dose_in_milligrams_per_kilogram")
EXPECTED = ["intercept", *HEADER]


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.fixture(scope="module")
def csv_file(tmp_path_factory):
    rng = np.random.default_rng(5)
    n = 300
    X = rng.standard_normal((n, 2))
    y = 1.0 + X @ [0.5, -1.0] + rng.standard_normal(n)
    p = tmp_path_factory.mktemp("names") / "d.csv"
    rows = [",".join(f"{v:.17g}" for v in r) for r in np.column_stack([X, y])]
    p.write_text(",".join([*HEADER, "y"]) + "\n" + "\n".join(rows) + "\n")
    return str(p)


BASE = ["--model", "linear", "--intercept"]
B = ["--batch-size", "32"]
COMMANDS = {
    "lambda": ["lambda", *B],
    "covariance": ["covariance", *B, "--step-size", "0.05"],
    "run": ["run", *B, "--step-size", "0.05", "--steps", "2000", "--chains", "2"],
    "verify": ["verify", *B, "--step-size", "0.05", "--steps", "4000", "--chains", "4"],
    "calibrate": ["calibrate", *B, "--steps", "2000", "--chains", "2"],
    # --no-timing: the names do not pass through the 14 short timing runs (seconds; tests/cli/test_cmd_plan.py
    # times candidates)
    "plan": ["plan", "--tolerance", "0.2", "--batch-sizes", "32", "--families", "dense", "--no-timing"],
    "minibatch-error": ["minibatch-error", *B],
    "noise-anisotropy": ["noise-anisotropy", *B],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_csv_header_names_reach_the_json(csv_file, command):
    args = COMMANDS[command]
    r = run([args[0], csv_file, *BASE, *args[1:]])
    assert r.exit_code in (0, 3), r.stderr  # verify exits 3 when its test rejects; its JSON is written either way
    doc = json.loads(r.stdout)
    assert doc["parameter_names"] == EXPECTED
    for key in ("lambda", "cov", "theta_hat", "predicted", "target_cov"):
        if key in doc:  # every array the names label has D = 3 rows
            assert len(doc[key]) == len(EXPECTED)


def test_stderr_tables_label_rows_with_the_names(csv_file):
    r = run(["lambda", csv_file, *BASE, *B])
    assert r.exit_code == 0, r.stderr
    lines = r.stderr.splitlines()
    assert any(line.startswith("intercept ") for line in lines)
    assert any(line.startswith("age ") for line in lines)
    # the long name is shortened around an ellipsis, keeping its start and end
    assert any(line.startswith("dose_in_milligra…ilogram") for line in lines)
    assert "coef" in r.stderr and "std err" in r.stderr


def test_network_names_reach_the_json(csv_file):
    r = run(["covariance", csv_file, "--model", "mlp", "--hidden-sizes", "2", "--batch-size", "32",
             "--step-size", "0.001", "--prior-precision", "1"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["parameter_names"] == list(MLP(hidden_sizes=(2,)).parameter_names(HEADER))
    assert len(doc["parameter_names"]) == doc["dim"] == len(doc["cov"])
