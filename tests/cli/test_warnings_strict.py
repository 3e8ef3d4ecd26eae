"""The warning channel every command shares: stderr even with -q, the JSON's ``warnings``, --strict → exit 4."""
from __future__ import annotations

import json
import warnings

import click
import numpy as np
from click.testing import CliRunner

from sgtune.cli._io import EXIT_UNTRUSTED, emit, handle_errors, untrusted, warn
from sgtune.cli._options import json_output_options
from sgtune.core.errors import AccuracyWarning


@click.command()
@json_output_options
@click.option("--bad", is_flag=True)
@handle_errors
def probe(json_path, overwrite, quiet, strict, bad):
    warn("first thing")
    warnings.warn("from the library", AccuracyWarning)
    warn("first thing")  # repeated: shown and listed once
    if bad:
        untrusted("the prediction does not apply")
    emit({"answer": 1}, json_path)


def _run(*args):
    return CliRunner().invoke(probe, list(args))


def test_warnings_reach_stderr_under_quiet_and_the_json():
    r = _run("-q")
    assert r.exit_code == 0
    assert r.stderr.splitlines() == ["warning: first thing", "warning: from the library"]
    assert json.loads(r.stdout) == {"answer": 1, "warnings": ["first thing", "from the library"]}


def test_untrusted_result_is_written_and_exits_4_only_under_strict(tmp_path):
    r = _run("--bad")
    assert r.exit_code == 0 and "the prediction does not apply" in json.loads(r.stdout)["warnings"]
    out = tmp_path / "doc.json"
    r = _run("--bad", "--strict", "-q", "--json", str(out))
    assert r.exit_code == EXIT_UNTRUSTED == 4
    assert "--strict" in r.stderr and "the prediction does not apply" in r.stderr
    assert json.loads(out.read_text())["warnings"][-1] == "the prediction does not apply"
    assert _run("--strict").exit_code == 0  # strict alone changes nothing for a trusted result


def test_scipy_ill_conditioned_warning_is_reworded(monkeypatch):
    """scipy's raw "Ill-conditioned matrix (rcond=…)" becomes one sgtune warning line, also in the JSON."""
    import json
    import warnings

    import numpy as np
    from click.testing import CliRunner
    from scipy.linalg import LinAlgWarning

    from sgtune.cli import main
    import sgtune.cli._options as options

    real = options.example

    def noisy(*a, **k):
        warnings.warn("Ill-conditioned matrix (rcond=1.23e-19): result may not be accurate.", LinAlgWarning)
        return real(*a, **k)

    monkeypatch.setattr(options, "example", noisy)
    with warnings.catch_warnings():
        warnings.simplefilter("default", LinAlgWarning)  # as outside pytest (the suite turns warnings into errors)
        r = CliRunner().invoke(main, ["lambda", "--example", "logistic", "--batch-size", "32", "-q",
                                      "--no-applicability"])
    assert r.exit_code == 0, r.stderr
    line = "warning: a linear system in this computation is nearly singular (reciprocal condition number 1.2e-19)"
    assert any(ln.startswith(line) for ln in r.stderr.splitlines()), r.stderr
    assert "rcond" not in r.stderr and "Ill-conditioned" not in r.stderr
    assert any("nearly singular" in w for w in json.loads(r.stdout)["warnings"])
    assert np.isfinite(json.loads(r.stdout)["lambda"][0][0])


def _anisotropic_csv(tmp_path):
    """x2 30× the scale of x1: a scalar Λ misses the sandwich target by ≈ 1 (the family warning)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 2)) * np.array([1.0, 30.0])
    y = X @ np.array([1.0, 0.01]) + rng.standard_normal(400)
    path = tmp_path / "aniso.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header="a,b,y", comments="")
    return str(path)


def test_strict_error_names_options_as_typed(tmp_path):
    """The --strict line printed the library's words (`family='dense'`, `inv_temperature`) where the warning above
    it said --family dense (issue 37); plan's option is --families."""
    from click.testing import CliRunner

    from sgtune.cli import main

    data = _anisotropic_csv(tmp_path)
    r = CliRunner().invoke(main, ["lambda", data, "--model", "linear", "--batch-size", "16", "--family", "scalar",
                                  "--strict", "-q", "--no-applicability"])
    assert r.exit_code == 4
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("error: --strict"))
    assert "--family dense" in line and "--inverse-temperature" in line
    assert "family='dense'" not in line and "inv_temperature" not in line
    r = CliRunner().invoke(main, ["plan", data, "--model", "linear", "--families", "scalar", "--tolerance", "0.9",
                                  "-q", "--no-applicability", "--no-timing"])
    warning = next(ln for ln in r.stderr.splitlines() if "misses the target" in ln)
    assert "--families dense" in warning and "family='dense'" not in warning and "inv_temperature" not in warning
