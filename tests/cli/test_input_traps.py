"""Input traps users fall into: CSV quirks of pandas, R and Excel, outputs that share a path or are
written by two processes at once, output names that do not match what is written, signals, a
read-only numba cache, and user model files that print, exit or parse sys.argv. Each trap ends in
one ``Error: …`` line naming the file or option and the fix, or is handled as the user meant."""
from __future__ import annotations

import json

import numpy as np
import pytest
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
