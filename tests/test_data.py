"""Data loading: CSV/NPZ formats and every documented bad input."""
from __future__ import annotations

import numpy as np
import pytest

from sgtune.io.data import example, load_dataset, make_dataset
from sgtune.core.errors import DataFormatError


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_csv_roundtrip_and_response_column(tmp_path):
    p = write(tmp_path, "d.csv", "a,target,b\n1,0,2\n3,1,4\n5,1,6\n")
    ds = load_dataset(p, response="target", intercept=True)
    np.testing.assert_array_equal(ds.X, [[1, 1, 2], [1, 3, 4], [1, 5, 6]])
    np.testing.assert_array_equal(ds.y, [0, 1, 1])
    assert ds.names == ("intercept", "a", "b")


def test_npz(tmp_path):
    p = tmp_path / "d.npz"
    np.savez(p, X=np.ones((4, 2)), y=np.arange(4.0))
    ds = load_dataset(p)
    assert ds.X.shape == (4, 2) and ds.dim == 2 and ds.n_data == 4


@pytest.mark.parametrize("text,match", [
    ("a,y\n1,2\nfoo,3\n", r"line 3, column 'a': 'foo' is not a number"),
    ("a,y\n1,2\nnan,3\n", "non-finite"),
    ("a,y\n1,2\ninf,3\n", "non-finite"),
    ("a,b\n1,2\n3,4\n", "no response column 'y'"),
    ("a,y\n1,2,3\n4,5\n", "line 2 has 3 fields"),
    ("", "empty"),
    ("a,y\n1,2\n", "at least 2 rows"),
])
def test_bad_csv(tmp_path, text, match):
    with pytest.raises(DataFormatError, match=match):
        load_dataset(write(tmp_path, "bad.csv", text))


def test_bad_npz_and_paths(tmp_path):
    p = tmp_path / "m.npz"
    np.savez(p, X=np.ones((3, 2)))
    with pytest.raises(DataFormatError, match=r"missing array\(s\) \['y'\]"):
        load_dataset(p)
    np.savez(p, X=np.ones((3, 2)), y=np.ones(4))
    with pytest.raises(DataFormatError, match="X has 3 rows but y has 4"):
        load_dataset(p)
    np.savez(p, X=np.ones((3, 2, 2)), y=np.ones(3))
    with pytest.raises(DataFormatError, match="X must be a 2-D array"):
        load_dataset(p)
    np.savez(p, X=np.array([["a", "b"], ["c", "d"]]), y=np.ones(2))
    with pytest.raises(DataFormatError, match="must be numeric"):
        load_dataset(p)
    with pytest.raises(DataFormatError, match="does not exist"):
        load_dataset(tmp_path / "nope.csv")
    q = write(tmp_path, "d.txt", "1")
    with pytest.raises(DataFormatError, match=r"must end in \.csv or \.npz"):
        load_dataset(q)
    garbage = tmp_path / "g.npz"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(DataFormatError, match="cannot read"):
        load_dataset(garbage)


def test_examples_are_deterministic_and_documented_shapes():
    a, b = example("hetero-linear"), example("hetero-linear")
    np.testing.assert_array_equal(a.X, b.X)
    assert a.X.shape == (2000, 20)
    with pytest.raises(DataFormatError, match="unknown example"):
        example("mnist")
    with pytest.raises(DataFormatError, match="subsample size"):
        a.subsample(0, np.random.default_rng(0))
    assert make_dataset(np.ones(3), np.ones(3)).X.shape == (3, 1)


def _rows(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, (X @ [1.0, -1.0] + rng.normal(size=n) > 0).astype(float)


def test_a_semicolon_or_tab_separated_csv_reads_like_a_comma_separated_one(tmp_path):
    X, y = _rows()
    lines = [("a", "b", "y")] + [(repr(float(u)), repr(float(v)), repr(float(w))) for (u, v), w in zip(X, y)]
    sets = []
    for sep, name in ((",", "c.csv"), (";", "s.csv"), ("\t", "t.csv")):
        sets.append(load_dataset(write(tmp_path, name, "\n".join(sep.join(r) for r in lines) + "\n")))
    for ds in sets:
        assert ds.names == ("a", "b")
        np.testing.assert_array_equal(ds.X, X)
        np.testing.assert_array_equal(ds.y, y)
    p = write(tmp_path, "dec.csv", "a;b;y\n1,5;2;1\n2,5;1;0\n")  # a decimal comma: said so
    with pytest.raises(DataFormatError, match=r"'1,5' is not a number; write numbers with a decimal point"):
        load_dataset(p)


def test_a_pandas_index_column_named_unnamed_is_refused(tmp_path):
    p = write(tmp_path, "d.csv", "Unnamed: 0,a,y\n0,1.5,1\n1,2.5,0\n2,0.5,1\n")
    with pytest.raises(DataFormatError, match="column 'Unnamed: 0' is a row index .* index=False"):
        load_dataset(p)
    ok = write(tmp_path, "e.csv", "Unnamed,a,y\n0,1.5,1\n1,2.5,0\n2,0.5,1\n")  # a real column of that name
    assert load_dataset(ok).names == ("Unnamed", "a")


def test_complex_data_is_refused_not_cast(tmp_path):
    X, y = _rows()
    for args, label in (((X + 1j, y), "X"), ((X, y + 0j), "y")):
        with pytest.raises(DataFormatError, match=f"{label} holds complex numbers"):
            make_dataset(*args)


def test_folder_with_a_column_vector_y_reads_y_as_a_vector(tmp_path):
    """y.npy of shape (N, 1), float64: read out of core as (N,) (its rows used to come back as (n, 1))."""
    X, y = _rows(300)
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "X.npy", X)
    np.save(tmp_path / "d" / "y.npy", y[:, None])
    ds = load_dataset(tmp_path / "d")
    assert ds.y.shape == (300,) and ds.out_of_core
    xs, ys = ds.rows.read(10, 20)  # the minibatch reads of the streamed reductions and the sampler
    assert ys.shape == (10,) and xs.shape == (10, 2)
    np.testing.assert_array_equal(ys, y[10:20])


def test_a_cache_dir_that_cannot_be_created_is_named(tmp_path, monkeypatch):
    X, y = _rows(300)
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "X.npy", X)
    np.save(tmp_path / "d" / "y.npy", y)
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("SGTUNE_CACHE_DIR", str(tmp_path / "file" / "sub"))
    with pytest.raises(DataFormatError, match=r"SGTUNE_CACHE_DIR=.*file/sub \(Not a directory\); point SGTUNE_CACHE"):
        load_dataset(tmp_path / "d", intercept=True)


def test_dataset_repr_is_short_and_names_no_values():
    ds = example("hetero-linear")
    text = repr(ds)
    assert text.startswith("Dataset(N=2000, D=20, names=(x0, x1, x2, x3, …), source=")
    assert "array(" not in text and "\n" not in text and len(text) < 200
