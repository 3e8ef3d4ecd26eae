"""``sgtune reshuffle`` (docs/cli.rst contract): keys, values from independent closed forms, error paths."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main

X = np.array([0.3, -1.2, 2.5, 0.7, 4.1, -0.4, 1.1, 0.0])
RTOL = 1e-12  # closed forms evaluated in float64


def _run(args: list[str]) -> tuple[int, dict | None, str]:
    res = CliRunner().invoke(main, ["reshuffle", *args])
    doc = json.loads(res.stdout) if res.exit_code == 0 and res.stdout.strip() else None
    return res.exit_code, doc, res.stderr


@pytest.fixture()
def npy(tmp_path: Path) -> str:
    p = tmp_path / "x.npy"
    np.save(p, X)
    return str(p)


def test_keys_and_values(npy: str) -> None:
    code, doc, err = _run(["--data", npy, "--batch-size", "2", "--step", "0.25"])
    assert code == 0, err
    assert doc is not None
    for name in ("ula", "rm", "rm_with_replacement", "rr_by_position", "rr_average"):
        for key in (f"{name}_var", f"{name}_rel_err", f"w2_{name}"):
            assert key in doc
    n, b, h, r = 8, 2, 0.25, 4
    s2 = float(np.var(X, ddof=1))
    c = s2 / n
    assert doc["target_var"] == pytest.approx(c, rel=RTOL)
    assert doc["ula_rel_err"] == pytest.approx(h / (2 - h), rel=RTOL)
    assert doc["rm_rel_err"] == pytest.approx(h * r / (2 - h), rel=RTOL)  # v = R − 1 with σ² = s²
    assert doc["rm_with_replacement_rel_err"] == pytest.approx(h * (1 + (n - 1) / b) / (2 - h), rel=RTOL)
    assert len(doc["rr_by_position_var"]) == r
    a = 1 - h
    eps_k = [h / (2 - h) + h * r / (2 - h) - a ** (2 * k) * (1 - a ** r) / (1 + a ** r) - (1 - a ** k) ** 2
             for k in range(r)]
    assert doc["rr_by_position_rel_err"] == pytest.approx(eps_k, rel=RTOL)
    assert doc["rr_average_rel_err"] == pytest.approx(np.mean(eps_k), rel=RTOL)
    assert doc["w2_rm"] == pytest.approx(abs(math.sqrt(c * (1 + doc["rm_rel_err"])) - math.sqrt(c)), rel=RTOL)
    assert doc["rr_average_better_than_rm"] is True
    assert "SGLD-RR" in err


def test_csv_with_header_and_sigma2(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("value,other\n" + "\n".join(f"{v},{2 * v}" for v in X) + "\n")
    code, doc, err = _run(["--data", str(p), "--column", "value", "--batch-size", "4", "--step", "0.5",
                           "--sigma2", "2.0"])
    assert code == 0, err
    assert doc is not None
    rho = float(np.var(X, ddof=1)) / 2.0
    assert doc["target_var"] == pytest.approx(2.0 / 8, rel=RTOL)
    assert doc["rm_rel_err"] == pytest.approx(0.5 * (1 + rho * (2 - 1)) / 1.5, rel=RTOL)


def test_large_step_reports_rr_not_better(npy: str) -> None:
    code, doc, err = _run(["--data", npy, "--batch-size", "2", "--step", "1.9"])
    assert code == 0
    assert doc is not None
    assert doc["rr_average_better_than_rm"] is (doc["rr_average_rel_err"] < doc["rm_rel_err"])
    assert doc["rr_average_better_than_rm"] is False
    assert "NOT below" in err


def test_json_file_and_overwrite(npy: str, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code, _, _ = _run(["--data", npy, "--batch-size", "2", "--step", "0.1", "--json", str(out)])
    assert code == 0 and json.loads(out.read_text())["n_batches"] == 4
    res = CliRunner().invoke(main, ["reshuffle", "--data", npy, "--batch-size", "2", "--step", "0.1",
                                    "--json", str(out)])
    assert res.exit_code == 1 and "--overwrite" in res.stderr


def test_batch_not_dividing(npy: str) -> None:
    res = CliRunner().invoke(main, ["reshuffle", "--data", npy, "--batch-size", "3", "--step", "0.1"])
    assert res.exit_code == 1
    assert "does not divide N = 8" in res.stderr


def test_unstable_step(npy: str) -> None:
    res = CliRunner().invoke(main, ["reshuffle", "--data", npy, "--batch-size", "2", "--step", "2.5"])
    assert res.exit_code == 1
    assert "0 < h < 2" in res.stderr


def test_missing_file(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["reshuffle", "--data", str(tmp_path / "no.npy"), "--batch-size", "2",
                                    "--step", "0.1"])
    assert res.exit_code == 1
    assert "does not exist" in res.stderr


def test_csv_needs_column(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n3,4\n")
    res = CliRunner().invoke(main, ["reshuffle", "--data", str(p), "--batch-size", "1", "--step", "0.1"])
    assert res.exit_code == 1
    assert "--column" in res.stderr


def test_missing_required_option(npy: str) -> None:
    res = CliRunner().invoke(main, ["reshuffle", "--data", npy, "--step", "0.1"])
    assert res.exit_code == 2
