"""``sgtune fluctuation`` (CliRunner; JSON parsed from stdout). Oracles: closed forms of Cor. 5.5/5.7/5.10."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main
from tests._tolerances import SOLVER_RTOL


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    a = np.array([[2.0, 0.4], [0.4, 1.0]])
    out = {}
    for name, arr in {"A": a, "ell": np.array([1.0, -0.5]), "J": np.array([[0.0, 1.2], [-1.2, 0.0]]),
                      "D": np.diag([0.5, 2.0]), "C": np.diag([1.5, 0.8]),
                      "Jbad": np.array([[0.0, 1.0], [1.0, 0.0]])}.items():
        p = tmp_path / f"{name}.npy"
        np.save(p, arr)
        out[name] = str(p)
    return out


def _run(args: list[str]) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    res = CliRunner().invoke(main, ["fluctuation", *args])
    doc = json.loads(res.stdout) if res.exit_code == 0 else {}
    return res.exit_code, doc, res.stderr


def test_nld_with_diffusion(files: dict[str, str]) -> None:
    code, doc, _ = _run(["nld", "--hessian", files["A"], "--observable", files["ell"],
                         "--antisymmetric", files["J"], "--diffusion", files["D"]])
    assert code == 0
    a, ell, j, d = (np.load(files[k]) for k in ("A", "ell", "J", "D"))
    w = np.linalg.solve(a, ell)
    # d = 2, D diagonal: σ²/σ_R² = d1 d2/(d1 d2 + j²) (sympy derivation, Cor. 5.5 generalised)
    np.testing.assert_allclose(doc["ratio"], 1.0 / (1.0 + 1.2 ** 2), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(doc["sigma2_reversible"], 2 * w @ np.linalg.solve(d, w), rtol=SOLVER_RTOL)
    for key in ("sigma2", "sigma2_reversible", "ratio", "max_stable_step"):
        assert isinstance(doc[key], float)


def test_hfhr(files: dict[str, str]) -> None:
    code, doc, _ = _run(["hfhr", "--hessian", files["A"], "--observable", files["ell"], "--alpha", "0.5",
                         "--gamma", "3"])
    assert code == 0
    np.testing.assert_allclose(doc["ratio"], 1.5 / 2.5, rtol=SOLVER_RTOL)


def test_gaul(files: dict[str, str]) -> None:
    code, doc, _ = _run(["gaul", "--hessian", files["A"], "--observable", files["ell"], "--a", "1",
                         "--gamma", "2", "--preconditioner", files["C"]])
    assert code == 0
    a, ell, c = np.load(files["A"]), np.load(files["ell"]), np.load(files["C"])
    w = np.linalg.solve(a, ell)
    np.testing.assert_allclose(doc["sigma2"], 2 * 2 / 3 * w @ np.linalg.solve(c, w), rtol=SOLVER_RTOL)


def test_general_and_budget(files: dict[str, str], tmp_path: Path) -> None:
    m = tmp_path / "M.npy"
    np.save(m, np.load(files["A"]))
    code, doc, _ = _run(["general", "--hessian", str(m), "--observable", files["ell"], "--diffusion", files["D"],
                         "--antisymmetric", files["J"]])
    assert code == 0
    code2, doc2, _ = _run(["nld", "--hessian", files["A"], "--observable", files["ell"], "--antisymmetric",
                           files["J"], "--diffusion", files["D"], "--budget", "2"])
    assert code2 == 0
    np.testing.assert_allclose(doc["sigma2"], doc2["sigma2"], rtol=1e-14)
    np.testing.assert_allclose(doc2["optimal_ratio"], 1 / 5, rtol=SOLVER_RTOL)


def test_json_file_and_overwrite(files: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["hfhr", "--hessian", files["A"], "--observable", files["ell"], "--alpha", "1", "--gamma", "1",
            "--json", str(out)]
    res = CliRunner().invoke(main, ["fluctuation", *args])
    assert res.exit_code == 0 and res.stdout == ""
    assert json.loads(out.read_text())["ratio"] == pytest.approx(0.5, rel=1e-12)
    res2 = CliRunner().invoke(main, ["fluctuation", *args])
    assert res2.exit_code == 1 and "--overwrite" in res2.stderr


def test_error_not_antisymmetric(files: dict[str, str]) -> None:
    res = CliRunner().invoke(main, ["fluctuation", "nld", "--hessian", files["A"], "--observable", files["ell"],
                                    "--antisymmetric", files["Jbad"]])
    assert res.exit_code == 1
    assert "antisymmetric must be antisymmetric" in res.stderr


def test_error_gaul_not_pd(files: dict[str, str], tmp_path: Path) -> None:
    c = tmp_path / "Cbig.npy"
    np.save(c, np.diag([9.0, 1.0]))
    res = CliRunner().invoke(main, ["fluctuation", "gaul", "--hessian", files["A"], "--observable", files["ell"],
                                    "--a", "1", "--gamma", "1", "--preconditioner", str(c)])
    assert res.exit_code == 1
    assert "GAUL symmetric part" in res.stderr


def test_usage_missing_alpha(files: dict[str, str]) -> None:
    res = CliRunner().invoke(main, ["fluctuation", "hfhr", "--hessian", files["A"], "--observable", files["ell"],
                                    "--gamma", "1"])
    assert res.exit_code == 2
    assert "--alpha is required" in res.stderr
