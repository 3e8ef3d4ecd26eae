"""The project file sgtune.toml / --config: shared options, precedence, errors, the JSON's config."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.io.data import example


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.fixture
def project(tmp_path, monkeypatch):
    ds = example("logistic")
    header = ",".join([f"x{i}" for i in range(ds.dim)] + ["y"])
    rows = [",".join(f"{v:.17g}" for v in [*x, y]) for x, y in zip(ds.X[:400], ds.y[:400])]
    (tmp_path / "d.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
    (tmp_path / "sgtune.toml").write_text('data = "d.csv"\nmodel = "logistic"\nbatch-size = 32\n'
                                          'prior_precision = 1.0\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_project_file_supplies_the_shared_options(project):
    r = run(["lambda", "-q", "--no-applicability"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["batch_size"] == 32 and doc["model"] == "logistic" and doc["data"].endswith("d.csv")
    assert doc["config"] == {"path": "sgtune.toml", "values": {"data": "d.csv", "model": "logistic",
                                                              "batch-size": 32, "prior-precision": 1.0}}
    # the same problem typed in full gives the same Λ
    full = json.loads(run(["lambda", "d.csv", "--model", "logistic", "--batch-size", "32", "--prior-precision", "1",
                           "-q", "--no-applicability", "--config", "/dev/null"]).stdout)
    np.testing.assert_array_equal(np.array(full["lambda"]), np.array(doc["lambda"]))


def test_the_command_line_overrides_the_file(project):
    doc = json.loads(run(["lambda", "--batch-size", "64", "-q", "--no-applicability"]).stdout)
    assert doc["batch_size"] == 64
    assert "batch-size" not in doc["config"]["values"]  # only what the file supplied is echoed
    doc = json.loads(run(["lambda", "--example", "hetero-linear", "-q", "--no-applicability"]).stdout)
    # --example on the command line replaces the file's DATA and brings its own model (linear, not the file's)
    assert doc["n_data"] == 2000 and doc["model"] == "linear" and doc["batch_size"] == 32


def test_explicit_config_file_at_group_and_command_level(project):
    sub = project / "sub"
    sub.mkdir()
    (sub / "d.csv").write_text((project / "d.csv").read_text())
    (sub / "other.toml").write_text('data = "d.csv"\nmodel = "logistic"\nbatch-size = 16\n')
    for args in (["lambda", "--config", "sub/other.toml"], ["--config", "sub/other.toml", "lambda"]):
        r = run([*args, "-q", "--no-applicability"])
        assert r.exit_code == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["batch_size"] == 16  # the explicit file replaces ./sgtune.toml
        assert doc["config"]["path"] == "sub/other.toml" and doc["data"] == "sub/d.csv"  # relative to the file


def test_an_unknown_key_is_one_line_naming_the_key_and_the_file(project):
    (project / "sgtune.toml").write_text('data = "d.csv"\nmodle = "logistic"\n')
    r = run(["lambda", "-q"])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "sgtune.toml" in lines[0] and "'modle'" in lines[0]
    (project / "sgtune.toml").write_text('data = "d.csv\n')
    r = run(["lambda", "-q"])
    assert r.exit_code == 2 and "not valid TOML" in r.stderr
    r = run(["lambda", "--config", "missing.toml"])
    assert r.exit_code == 2 and "missing.toml" in r.stderr


def test_commands_without_shared_options_ignore_its_values(project):
    r = run(["derive", "stationary-1d"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["config"]["values"] == {}
    # reshuffle's --data and --batch-size belong to its one-dimensional problem: the file's are not used
    np.save(project / "x.npy", np.arange(12.0))
    r = run(["reshuffle", "--data", "x.npy", "--batch-size", "3", "--step", "0.1", "-q"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["config"]["values"] == {}
    r = run(["reshuffle", "--step", "0.1", "-q"])
    assert r.exit_code == 2  # no --data from the file


@pytest.mark.parametrize("line, needle", [
    ("batch-size = 32.7", "'batch-size' = 32.7"),
    ("batch-size = true", "'batch-size' = true"),
    ("batch-size = 32.0", "'batch-size' = 32.0"),
    ("batch-size = \"many\"", "'batch-size' = 'many'"),
    ("seed = 3.9", "'seed' = 3.9"),
    ("seed = -1", "'seed' = -1"),
    ("subsample = 1500.9", "'subsample' = 1500.9"),
    ("subsample = 0", "'subsample' = 0"),
    ("intercept = 0.5", "'intercept' = 0.5"),
    ("intercept = \"yes\"", "'intercept' = 'yes'"),
    ("prior-precision = true", "'prior-precision' = true"),
    ("activation = \"sigmoid\"", "'activation' = 'sigmoid'"),
])
def test_a_bad_value_in_the_file_is_refused_like_the_option(project, line, needle):
    """The file's values go through the options' own click types (no silent 32.7 -> 32, true -> 1, 3.9 -> 3):
    exit 2 and one line naming the key, the value and the file, as the command line would refuse them."""
    (project / "sgtune.toml").write_text(f'data = "d.csv"\nmodel = "logistic"\n{line}\n')
    r = run(["lambda", "--batch-size", "32", "-q", "--no-applicability"])
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "sgtune.toml" in lines[0] and needle in lines[0], lines


def test_the_file_and_the_command_line_take_the_same_values(project):
    """Every shared option: a value is refused in the file exactly when it is refused on the command line."""
    from sgtune.cli._config import shared_params

    base = '\ndata = "d.csv"\nmodel = "logistic"\n'
    for key, value in (("batch-size", "32.7"), ("seed", "3"), ("momentum", "0.5"), ("subsample", "100"),
                       ("inverse-temperature", '"N"'), ("noise-variance", "2")):
        assert key in shared_params()
        (project / "sgtune.toml").write_text(f"{key} = {value}{base}" + ("batch-size = 32\n" if key != "batch-size"
                                                                           else ""))
        by_file = run(["lambda", "-q", "--no-applicability"])
        by_line = run(["lambda", "d.csv", "--model", "logistic", *([] if key == "batch-size" else ["--batch-size", "32"]),
                       f"--{key}", value.strip('"'), "-q", "--no-applicability", "--config", "/dev/null"])
        assert (by_file.exit_code == 0) == (by_line.exit_code == 0), (key, by_file.stderr, by_line.stderr)


def test_an_unknown_key_names_the_nearest_known_one(project):
    (project / "sgtune.toml").write_text('data = "d.csv"\nbatch_sise = 32\n')
    r = run(["lambda", "-q"])
    assert r.exit_code == 2 and "did you mean 'batch-size'?" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_pyproject_tool_sgtune_table(project):
    """[tool.sgtune] in pyproject.toml is read when there is no sgtune.toml; --config pyproject.toml reads only that
    table (the project's other tables are not sgtune's keys)."""
    (project / "sgtune.toml").unlink()
    (project / "pyproject.toml").write_text('[project]\nname = "mine"\nversion = "1"\n\n[tool.ruff]\nline-length = 99\n'
                                            '\n[tool.sgtune]\ndata = "d.csv"\nmodel = "logistic"\nbatch-size = 16\n')
    for args in ([], ["--config", "pyproject.toml"]):
        r = run(["lambda", *args, "-q", "--no-applicability"])
        assert r.exit_code == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["batch_size"] == 16 and doc["config"]["path"] == "pyproject.toml"
    (project / "pyproject.toml").write_text('[tool.sgtune]\nbatch-size = 16.5\n')
    r = run(["lambda", "d.csv", "--model", "logistic", "-q"])
    assert r.exit_code == 2 and "pyproject.toml [tool.sgtune]: key 'batch-size' = 16.5" in r.stderr, r.stderr
    (project / "pyproject.toml").write_text('[project]\nname = "mine"\n')
    r = run(["lambda", "d.csv", "--model", "logistic", "--batch-size", "8", "-q", "--no-applicability"])
    assert r.exit_code == 0 and "config" not in json.loads(r.stdout)  # no table: not a configuration
    r = run(["lambda", "--config", "pyproject.toml", "-q"])
    assert r.exit_code == 2 and "has no [tool.sgtune] table" in r.stderr


def test_a_refused_value_reads_as_one_sentence_per_clause(tmp_path, monkeypatch):
    """click's "'32.7' is not a valid integer." is followed by our "; give a value …": no ".;" in between."""
    from click.testing import CliRunner

    from sgtune.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sgtune.toml").write_text("batch-size = 32.7\n")
    r = CliRunner().invoke(main, ["lambda", "--example", "logistic", "-q", "--no-applicability"])
    assert r.exit_code == 2 and "'32.7' is not a valid integer; give a value --batch-size" in r.stderr, r.stderr
