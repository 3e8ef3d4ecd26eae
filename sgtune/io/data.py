"""Data sets: loading CSV/NPZ files, folders and Parquet files with validation, and the bundled examples.

A :class:`Dataset` is a frozen pair (X, y) of float64 arrays, ``X`` of shape (N, D)
and ``y`` of shape (N,). Files follow ``docs/cli.rst``: a ``.csv`` with a header row (the
response column is ``response``, default ``"y"``; every other column is a covariate)
or a ``.npz`` with arrays ``X`` and ``y``. No intercept is added unless asked.

Data larger than memory: DATA may be a *folder* holding ``X.npy`` (N, D) and
``y.npy`` (N,), or a ``.parquet`` file (extra ``[parquet]``; the response column is
``response``, every other column a covariate). Then ``Dataset.X`` is a read-only memory map
(the sampler gathers its minibatch rows from it), ``Dataset.y`` is in memory (8N bytes), and
``Dataset.rows`` is the :class:`~sgtune.io.reduce.RowSource` every reduction streams over in
fixed chunks (O(chunk·D + D²) memory). Validation (non-finite values, shapes) runs chunk
by chunk and names the row. A Parquet file (read batch by batch within its row groups) and
a folder loaded with ``--intercept`` are first written, chunk by chunk, to float64 ``.npy``
files in a cache folder (``$SGTUNE_CACHE_DIR`` or a temporary folder, removed at exit).
"""
from __future__ import annotations

import atexit
import csv
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..core.errors import DataFormatError
from .reduce import CHUNK_ROWS, NpyFile, RowSource, chunk_bounds

__all__ = ["Dataset", "load_dataset", "make_dataset", "encode_labels", "example", "EXAMPLES"]


@dataclass(frozen=True)
class Dataset:
    """A data set: design matrix ``X`` (N, D), response ``y`` (N,) and covariate names.

    Build one with :func:`make_dataset` (which validates the arrays), :func:`load_dataset` (a file)
    or :func:`example` (a bundled synthetic set).

    Parameters
    ----------
    X : (N, D) ndarray
        The covariates, one row per observation (float64).
    y : (N,) ndarray
        The responses (float64).
    names : tuple of str, optional
        The covariates' names, one per column of ``X``.
    source : str, optional
        Where the data came from (a path or ``"arrays"``), used in messages.
    rows : RowSource or None, optional
        Set for data read out of core (a folder or a Parquet file): the file-backed
        :class:`~sgtune.io.reduce.RowSource` the reductions stream over (``X`` is then a read-only
        memory map of the same file). Datasets derived from it (``subsample``) are in memory.
    classes : tuple of str, optional
        Set when the response held text labels (read with ``categorical_response``,
        :func:`load_dataset`): the sorted labels, and ``y`` holds their codes 0 … K−1
        (:func:`encode_labels`).

    See Also
    --------
    make_dataset : Validate arrays into a Dataset.
    load_dataset : Read one from a file or folder.
    example : A bundled synthetic data set.

    Examples
    --------
    >>> from sgtune.io.data import make_dataset
    >>> data = make_dataset([[0.0, 1.0], [1.0, 0.5], [2.0, -1.0]], [0.1, 0.9, 2.2])
    >>> data.n_data, data.dim, data.names
    (3, 2, ('x0', 'x1'))
    >>> data.out_of_core
    False
    """

    X: np.ndarray
    y: np.ndarray
    names: tuple[str, ...] = ()
    source: str = ""
    rows: RowSource | None = None
    classes: tuple[str, ...] = ()

    @property
    def out_of_core(self) -> bool:
        """True when the rows live in files and reductions stream over ``rows``."""
        return self.rows is not None

    @property
    def n_data(self) -> int:
        return int(self.X.shape[0])

    @property
    def dim(self) -> int:
        return int(self.X.shape[1])

    def __repr__(self) -> str:
        """A short description (sizes, the first names, where the rows came from), never the arrays themselves."""
        names = ", ".join(self.names[:4]) + (", …" if len(self.names) > 4 else "")
        extra = f", classes={len(self.classes)}" if self.classes else ""
        where = ", out_of_core=True" if self.out_of_core else ""
        return f"Dataset(N={self.n_data}, D={self.dim}, names=({names}), source={self.source!r}{extra}{where})"

    def subsample(self, size: int, rng: np.random.Generator) -> "Dataset":
        """A uniformly random subset of ``size`` rows without replacement (Algorithm 1, step 1)."""
        if not 1 <= size <= self.n_data:
            raise DataFormatError(f"subsample size must be in [1, N={self.n_data}], got {size}")
        idx = np.sort(rng.choice(self.n_data, size=size, replace=False))
        X, y = (np.array(self.X[idx]), np.array(self.y[idx])) if self.rows is None else self.rows.read_index(idx)
        return Dataset(X, y, self.names, f"{self.source}[subsample {size}]", classes=self.classes)


def covariate_limit(n_rows: int, n_cols: int) -> float:
    """Largest |x| for which the fourth-moment sums of the exact noise, Σ_n w_n²(x_nᵀΣx_n) x_n x_nᵀ, stay finite.

    (N·D²·|x|⁴ < the largest float64, with room for the weights.)
    """
    return float((np.finfo(np.float64).max / (max(n_rows, 1) * max(n_cols, 1) ** 2)) ** 0.25 / 1e3)


def _check_scale(X: np.ndarray, source: str) -> None:
    """Covariates so large that the curvature sums overflow float64: one message naming the entry and the fix."""
    limit = covariate_limit(X.shape[0], X.shape[1])
    big = np.abs(X) > limit
    if big.any():
        i, j = (int(v) for v in np.argwhere(big)[0])
        raise DataFormatError(
            f"{source}: X[{i}, {j}] = {X[i, j]:.3g} overflows float64 in sgtune's curvature and noise sums "
            f"(fourth moments of the covariates; |x| must stay below {limit:.3g} here); standardise the "
            "covariates (subtract each column's mean, divide by its standard deviation)")


def make_dataset(X: object, y: object, *, intercept: bool = False, names: tuple[str, ...] = (),
                 source: str = "arrays") -> Dataset:
    """Validate arrays into a :class:`Dataset` (finite float64, shapes (N, D) and (N,)).

    Parameters
    ----------
    X : array_like, shape (N, D) or (N,)
        The covariates; a vector is one covariate.
    y : array_like, shape (N,) or (N, 1)
        The responses.
    intercept : bool, optional
        Prepend a column of ones (named ``intercept`` when ``names`` are given).
    names : tuple of str, optional
        The covariates' names (default ``x0``, ``x1``, … for every column, the intercept's included).
    source : str, optional
        What to call the data in error messages.

    Returns
    -------
    Dataset
        Contiguous float64 copies of ``X`` and ``y`` with their names.

    Raises
    ------
    DataFormatError
        If the arrays are not numeric, have the wrong shapes or lengths, hold fewer than two rows,
        contain NaN or inf, or are so large that the curvature sums would overflow float64.

    See Also
    --------
    load_dataset : The same checks on a file.

    Examples
    --------
    >>> from sgtune.io.data import make_dataset
    >>> data = make_dataset(np.arange(6.0).reshape(3, 2), [1.0, 0.0, 1.0], intercept=True,
    ...                     names=("age", "dose"))
    >>> data.X
    array([[1., 0., 1.],
           [1., 2., 3.],
           [1., 4., 5.]])
    >>> data.names
    ('intercept', 'age', 'dose')
    """
    for arr, label in ((X, "X"), (y, "y")):  # a cast to float64 would drop the imaginary part with a mere warning
        if np.iscomplexobj(arr):
            raise DataFormatError(f"{source}: {label} holds complex numbers; sgtune's models take real data: give the "
                                  "real and imaginary parts as separate columns, or the modulus")
    try:
        Xa = np.array(X, dtype=np.float64)
        ya = np.array(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataFormatError(f"{source}: X and y must be numeric ({exc})") from None
    if Xa.ndim == 1:
        Xa = Xa[:, None]
    if Xa.ndim != 2:
        raise DataFormatError(f"{source}: X must be a 2-D array (N, D) but has shape {Xa.shape}")
    ya = ya.reshape(-1) if ya.ndim == 2 and 1 in ya.shape else ya
    if ya.ndim != 1:
        raise DataFormatError(f"{source}: y must be a vector (N,) but has shape {ya.shape}")
    if Xa.shape[0] != ya.shape[0]:
        raise DataFormatError(
            f"{source}: X has {Xa.shape[0]} rows but y has {ya.shape[0]} entries; they must match")
    if Xa.shape[0] < 2 or Xa.shape[1] < 1:
        raise DataFormatError(f"{source}: need at least 2 rows and 1 covariate, got X of shape {Xa.shape}")
    for arr, label in ((Xa, "X"), (ya, "y")):
        bad = ~np.isfinite(arr)
        if bad.any():
            where = np.argwhere(bad)[0]
            raise DataFormatError(
                f"{source}: {label} has a non-finite value (NaN or inf) at row {int(where[0]) + (2 if source.endswith('.csv') else 0)}"
                "; remove or impute it")
    _check_scale(Xa, source)
    if intercept:
        Xa = np.column_stack([np.ones(Xa.shape[0]), Xa])
        names = ("intercept", *names) if names else ()
    if not names:
        names = tuple(f"x{i}" for i in range(Xa.shape[1]))
    return Dataset(np.ascontiguousarray(Xa), np.ascontiguousarray(ya), tuple(names), source)


def _check_header(path: Path, header: list[str]) -> None:
    """Every column named, no name twice: an unnamed column is almost always a row index (pandas
    ``to_csv()`` without ``index=False``, R ``write.csv()`` without ``row.names=FALSE``) that would
    otherwise become a covariate; a repeated name would make one of the columns a silent covariate."""
    unnamed = [k + 1 for k, h in enumerate(header) if not h]
    if unnamed:
        cols = ", ".join(str(k) for k in unnamed)
        raise DataFormatError(
            f"{path}: column{'s' if len(unnamed) > 1 else ''} {cols} of the header {'have' if len(unnamed) > 1 else 'has'}"
            " no name (a row index, as pandas to_csv() and R write.csv() write by default, would become a covariate); "
            "re-export with index=False (pandas) or row.names=FALSE (R), or drop the column")
    index = [h for h in header if re.fullmatch(r"Unnamed: \d+", h)]
    if index:
        raise DataFormatError(
            f"{path}: column {index[0]!r} is a row index (pandas names an unnamed column so when it reads a file "
            "written with its index, and to_csv() then writes it back as data); it would become a covariate: "
            "re-export with index=False, or drop the column")
    seen: dict[str, int] = {}
    for k, h in enumerate(header):
        if h in seen:
            raise DataFormatError(f"{path}: columns {seen[h] + 1} and {k + 1} of the header are both named {h!r}; "
                                  "give every column its own name (or drop the repeated column)")
        seen[h] = k


def encode_labels(labels: Any) -> tuple[np.ndarray, tuple[str, ...]]:
    """Encode class labels as numbers 0 … K−1.

    Labels that all read as numbers sort numerically (``"10"`` after ``"9"``), others as text.

    Parameters
    ----------
    labels : array_like
        One label per observation (text or numbers).

    Returns
    -------
    codes : (N,) ndarray
        The position of ``labels[n]`` among the sorted distinct labels (float64).
    names : tuple of str
        The sorted distinct labels as text.

    Examples
    --------
    >>> from sgtune.io.data import encode_labels
    >>> encode_labels(["b", "a", "b", "c"])
    (array([1., 0., 1., 2.]), ('a', 'b', 'c'))
    >>> encode_labels(["10", "9", "9"])[1]
    ('9', '10')
    """
    text = [str(v).strip() for v in np.asarray(labels, dtype=object).reshape(-1)]
    check_labels_present(text, "labels")
    if all(_is_number(t) for t in text):
        values = np.array([float(t) for t in text])
        uniq = np.unique(values)
        names = tuple(str(int(v)) if float(v).is_integer() else f"{v:g}" for v in uniq)
        return np.searchsorted(uniq, values).astype(np.float64), names
    names = tuple(sorted(set(text)))
    index = {t: k for k, t in enumerate(names)}
    return np.array([index[t] for t in text], dtype=np.float64), names


#: how a missing class label is written (compared case-insensitively, after stripping blanks): an empty cell,
#: R's and pandas' NA, NaN, null/None (a JSON or Python export), Excel's #N/A
MISSING_LABELS = frozenset({"", "na", "n/a", "nan", "null", "none", "<na>", "#n/a", "nat"})


def check_labels_present(labels: Any, source: str, first_row: int = 0, what: str = "row") -> None:
    """Refuse missing class labels (:data:`MISSING_LABELS`, ``None``, NaN): they would otherwise become a class of
    their own, sorted first, i.e. the reference class. The message names the first rows (numbered from
    ``first_row``; ``what`` is "row" or "line")."""
    bad = [i for i, v in enumerate(labels)
           if v is None or (isinstance(v, float) and v != v) or str(v).strip().lower() in MISSING_LABELS]
    if bad:
        rows = ", ".join(str(first_row + i) for i in bad[:5]) + (", …" if len(bad) > 5 else "")
        raise DataFormatError(
            f"{source}: {len(bad)} class label{'s are' if len(bad) > 1 else ' is'} missing (empty, NA, nan or null) "
            f"at {what}{'s' if len(bad) > 1 else ''} {rows}; remove those rows or give them their class "
            "(a missing label would become a class of its own)")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _delimiter(fh: Any) -> str:
    """The CSV's separator, from its header line: a comma, or a semicolon (spreadsheets in locales whose decimal
    mark is a comma) or a tab when the header has no comma but those (``fh`` is rewound)."""
    head = fh.readline()
    fh.seek(0)
    if "," not in head:
        for sep in (";", "\t"):
            if sep in head:
                return sep
    return ","


def _read_csv(path: Path, response: str, categorical: bool = False
              ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], tuple[str, ...]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:  # -sig: Excel's "CSV UTF-8" starts with a BOM
            reader = csv.reader(fh, delimiter=_delimiter(fh))
            try:
                header = [h.strip() for h in next(reader)]
            except StopIteration:
                raise DataFormatError(f"{path}: the file is empty; expected a header row") from None
            rows = [r for r in reader if r and any(c.strip() for c in r)]
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not a text CSV (byte {exc.object[exc.start]:#04x} at offset {exc.start} is "
                              "not UTF-8); give a UTF-8 .csv with a header row, or an .npz with X and y") from None
    except csv.Error as exc:
        raise DataFormatError(f"{path}: not a readable CSV ({exc}); give a .csv with a header row") from None
    _check_header(path, header)
    if response not in header:
        raise DataFormatError(
            f"{path}: no response column {response!r} in header {header}; pass the response column's name (`response=NAME`)")
    if len(header) < 2:
        raise DataFormatError(f"{path}: need a response and at least one covariate column")
    values = np.empty((len(rows), len(header)))
    j = header.index(response)
    classes: tuple[str, ...] = ()
    if categorical:
        check_labels_present([r[j] if len(r) == len(header) else "?" for r in rows], f"{path}: column {response!r}",
                             first_row=2, what="line")
    if categorical and rows and not all(len(r) != len(header) or _is_number(r[j]) for r in rows):
        bad = next((i for i, r in enumerate(rows) if len(r) != len(header)), None)
        if bad is not None:
            raise DataFormatError(
                f"{path}: line {bad + 2} has {len(rows[bad])} fields but the header has {len(header)}")
        codes, classes = encode_labels([r[j] for r in rows])
        for r, c in zip(rows, codes):
            r[j] = repr(float(c))
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise DataFormatError(
                f"{path}: line {i + 2} has {len(row)} fields but the header has {len(header)}")
        for j, cell in enumerate(row):
            try:
                values[i, j] = float(cell)
            except ValueError:
                hint = ("; write numbers with a decimal point (1.5, not 1,5)" if "," in cell and _is_number(
                    cell.replace(",", ".")) else "")
                raise DataFormatError(
                    f"{path}: line {i + 2}, column {header[j]!r}: {cell!r} is not a number{hint}") from None
    j = header.index(response)
    names = tuple(h for k, h in enumerate(header) if k != j)
    return np.delete(values, j, axis=1), values[:, j], names, classes


def load_dataset(path: str | Path, *, response: str = "y", intercept: bool = False,
                 categorical_response: bool = False) -> Dataset:
    """Load and validate a ``.csv`` or ``.npz`` file, a folder with X.npy/y.npy, or a ``.parquet`` file.

    Folders and Parquet files are read out of core (module docstring).

    Parameters
    ----------
    path : str or Path
        The file or folder.
    response : str, optional
        The column of a CSV or Parquet file that holds y; the other columns are the covariates.
    intercept : bool, optional
        Prepend a column of ones (named ``intercept``).
    categorical_response : bool, optional
        Class labels (e.g. for multinomial regression): a response with text labels (a CSV or
        Parquet column, a folder's y.npy of strings) is encoded by :func:`encode_labels`
        (``Dataset.classes`` holds the labels); numbers stay as they are.

    Returns
    -------
    Dataset
        The validated data (:func:`make_dataset`'s checks); out of core for a folder or a Parquet file.

    Raises
    ------
    DataFormatError
        If the file does not exist, has an unknown suffix, cannot be read, lacks the response
        column or the X/y arrays, or fails the checks of :func:`make_dataset`.

    See Also
    --------
    make_dataset : The same checks on arrays in memory.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from sgtune.io.data import load_dataset
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "data.csv"
    >>> _ = path.write_text("age,dose,y\\n1.0,0.5,2.0\\n2.0,0.1,1.5\\n3.0,0.7,3.1\\n")
    >>> data = load_dataset(path)
    >>> data.names, data.y
    (('age', 'dose'), array([2. , 1.5, 3.1]))
    """
    p = Path(path)
    if not p.exists():
        raise DataFormatError(f"data file {p} does not exist")
    if p.is_dir():
        return _load_folder(p, intercept, categorical_response)
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        return _load_parquet(p, response, intercept, categorical_response)
    if suffix == ".csv":
        X, y, names, classes = _read_csv(p, response, categorical_response)
        ds = make_dataset(X, y, intercept=intercept, names=names, source=str(p))
        return replace(ds, classes=classes) if classes else ds
    if suffix == ".npz":
        try:
            with np.load(p, allow_pickle=False) as z:
                missing = {"X", "y"} - set(z.files)
                if missing:
                    raise DataFormatError(
                        f"{p}: missing array(s) {sorted(missing)}; an .npz must hold X (N, D) and y (N,)")
                X, y = z["X"], z["y"]
        except (OSError, ValueError) as exc:
            raise DataFormatError(f"{p}: cannot read as .npz ({exc})") from None
        if X.dtype.kind not in "biuf" or y.dtype.kind not in "biuf":
            raise DataFormatError(f"{p}: X and y must be numeric arrays, got {X.dtype} and {y.dtype}")
        return make_dataset(X, y, intercept=intercept, source=str(p))
    raise DataFormatError(f"data file {p} must end in .csv or .npz (or .parquet, or be a folder with X.npy and "
                          f"y.npy), got {suffix or 'no suffix'!r}")


# --- out of core -------------------------------------------------------------------------------

_CACHE_DIRS: list[str] = []


def _cache_dir() -> str:
    """A fresh folder for converted data ($SGTUNE_CACHE_DIR or the system temp; removed at exit)."""
    base = os.environ.get("SGTUNE_CACHE_DIR") or None
    try:
        if base is not None:
            os.makedirs(base, exist_ok=True)
        d = tempfile.mkdtemp(prefix="sgtune-data-", dir=base)
    except OSError as exc:
        where = f"SGTUNE_CACHE_DIR={base}" if base is not None else f"the temporary folder {tempfile.gettempdir()}"
        raise DataFormatError(f"cannot create the folder for the converted data in {where} ({exc.strerror or exc}); "
                              "point SGTUNE_CACHE_DIR at a writable folder with room for the data") from None
    _CACHE_DIRS.append(d)
    return d


@atexit.register
def _remove_cache_dirs() -> None:  # pragma: no cover (interpreter exit)
    for d in _CACHE_DIRS:
        shutil.rmtree(d, ignore_errors=True)


def _check_finite_chunk(arr: np.ndarray, start: int, label: str, source: str) -> None:
    """Raise naming the first row (global, 0-based) with a NaN/inf."""
    bad = ~np.isfinite(arr)
    if bad.any():
        where = np.argwhere(bad)[0]
        col = f", column {int(where[1])}" if arr.ndim == 2 else ""
        raise DataFormatError(f"{source}: {label} has a non-finite value (NaN or inf) at row {start + int(where[0])}"
                              f"{col}; remove or impute it")


def _write_npy(path: str, shape: tuple[int, ...], chunks: Iterator[np.ndarray]) -> NpyFile:
    """Write float64 chunks (in row order) to a .npy file by plain writes (no memory map)."""
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": shape})
        rows = 0
        for c in chunks:
            fh.write(np.ascontiguousarray(c, dtype="<f8").tobytes())
            rows += c.shape[0]
    if rows != shape[0]:  # pragma: no cover (callers count rows)
        raise DataFormatError(f"{path}: wrote {rows} rows, expected {shape[0]}")
    return NpyFile.open(path, "cache")


def _out_of_core(xf: NpyFile, y: np.ndarray, yf: NpyFile | None, names: tuple[str, ...], source: str) -> Dataset:
    if yf is None:
        yf = _write_npy(os.path.join(_cache_dir(), "y.npy"), (y.shape[0],), iter([y]))
    names = names or tuple(f"x{i}" for i in range(xf.shape[1]))
    return Dataset(xf.memmap(), y, names, source, RowSource(xf, yf))


def _load_folder(p: Path, intercept: bool, categorical: bool = False) -> Dataset:
    """A folder with X.npy (N, D) float64 and y.npy (N,): X stays on disk, validated chunk by chunk."""
    for f in ("X.npy", "y.npy"):
        if not (p / f).exists():
            raise DataFormatError(f"{p}: a data folder must hold X.npy (N, D) and y.npy (N,); {f} is missing")
    xf = NpyFile.open(p / "X.npy", "X")
    src = str(p)
    if len(xf.shape) != 2:
        raise DataFormatError(f"{src}: X.npy must be a 2-D array (N, D) but has shape {xf.shape}")
    try:
        y_raw = np.load(p / "y.npy", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataFormatError(f"{p / 'y.npy'}: cannot read as .npy ({exc})") from None
    classes: tuple[str, ...] = ()
    if categorical and y_raw.dtype.kind in "US" and y_raw.ndim >= 1:  # class labels as text
        flat = y_raw.reshape(-1) if y_raw.ndim == 2 and 1 in y_raw.shape else y_raw
        check_labels_present(list(flat.reshape(-1)), f"{p / 'y.npy'}")
        codes, classes = encode_labels(flat)
        y_raw = codes.reshape(y_raw.shape) if y_raw.ndim == 1 else codes
    if y_raw.dtype.kind not in "biuf":
        raise DataFormatError(f"{p / 'y.npy'}: y must be numeric, got dtype {y_raw.dtype}")
    y_ndim = y_raw.ndim  # the file's own shape: (N, 1) or (1, N) is read as (N,) below
    if y_raw.ndim == 2 and 1 in y_raw.shape:
        y_raw = y_raw.reshape(-1)
    if y_raw.ndim != 1:
        raise DataFormatError(f"{src}: y must be a vector (N,) but has shape {y_raw.shape}")
    n, d = xf.shape
    if y_raw.shape[0] != n:
        raise DataFormatError(f"{src}: X has {n} rows but y has {y_raw.shape[0]} entries; they must match")
    if n < 2 or d < 1:
        raise DataFormatError(f"{src}: need at least 2 rows and 1 covariate, got X of shape {xf.shape}")
    y = np.ascontiguousarray(y_raw, dtype=np.float64)
    _check_finite_chunk(y, 0, "y", src)
    yf = None
    if classes:  # the codes live in memory (y.npy holds the text)
        pass
    elif y_raw.dtype == np.dtype("<f8") and y_ndim == 1:
        yf = NpyFile.open(p / "y.npy", "y")
    elif y_raw.dtype == np.dtype("<f8"):  # (N, 1) or (1, N): same bytes as (N,)
        yf0 = NpyFile.open(p / "y.npy", "y")
        yf = NpyFile(yf0.path, yf0.offset, (n,))

    def checked() -> Iterator[np.ndarray]:
        for a, b in chunk_bounds(n, CHUNK_ROWS):
            xc = xf.read_rows(a, b)
            _check_finite_chunk(xc, a, "X", src)
            yield np.column_stack([np.ones(b - a), xc]) if intercept else xc

    if intercept:
        xf = _write_npy(os.path.join(_cache_dir(), "X.npy"), (n, d + 1), checked())
        names = ("intercept", *(f"x{i}" for i in range(d)))
    else:
        for _ in checked():
            pass
        names = ()
    ds = _out_of_core(xf, y, yf, names, src)
    return replace(ds, classes=classes) if classes else ds


def _pandas_index_columns(schema: object) -> list[str]:
    """Columns a pandas ``to_parquet()`` stored for the frame's index (its schema metadata lists them)."""
    import json

    meta = getattr(schema, "metadata", None) or {}
    try:
        pandas_meta = json.loads(meta.get(b"pandas", b"{}"))
    except ValueError:
        return []
    return [c for c in pandas_meta.get("index_columns", []) if isinstance(c, str)]


def _load_parquet(p: Path, response: str, intercept: bool, categorical: bool = False) -> Dataset:
    """A Parquet file, read batch by batch (pyarrow), validated and written to a float64 .npy cache."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataFormatError(f"{p}: reading Parquet needs pyarrow; pip install 'sgtune[parquet]'") from None
    try:
        pf = pq.ParquetFile(p)
    except (OSError, pa.ArrowException) as exc:
        raise DataFormatError(f"{p}: cannot read as Parquet ({exc})") from None
    schema = pf.schema_arrow
    header = list(schema.names)
    _check_header(p, header)
    index = _pandas_index_columns(schema)
    if index:
        raise DataFormatError(f"{p}: column {index[0]!r} holds the index of the pandas table it was written "
                              "from, which would become a covariate; re-export with to_parquet(index=False) (or "
                              "reset_index() first to keep it as data), or drop the column")
    if response not in header:
        raise DataFormatError(f"{p}: no response column {response!r} in columns {header}; pass the response column's name (`response=NAME`)")
    classes: tuple[str, ...] = ()
    codes = None
    for field in schema:
        t = field.type
        if categorical and field.name == response and (pa.types.is_string(t) or pa.types.is_large_string(t)
                                                       or pa.types.is_dictionary(t)):
            col = pf.read(columns=[response]).column(response)  # class labels as text: one column in memory
            labels = col.to_pylist()
            check_labels_present(labels, f"{p}: column {response!r}")
            codes, classes = encode_labels(labels)
            continue
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
            raise DataFormatError(f"{p}: column {field.name!r} has type {t}; every column must be numeric")
    covs = [h for h in header if h != response]
    n, d = int(pf.metadata.num_rows), len(covs)
    if n < 2 or d < 1:
        raise DataFormatError(f"{p}: need at least 2 rows and 1 covariate, got {n} rows and {d} covariates")
    src = str(p)
    y = np.empty(n)

    def batches() -> Iterator[np.ndarray]:
        start = 0
        try:
            it = pf.iter_batches(batch_size=CHUNK_ROWS, columns=header)
            for batch in it:
                m = batch.num_rows
                cols = {}
                for name in header:
                    if codes is not None and name == response:
                        cols[name] = codes[start:start + m]
                        continue
                    col = batch.column(name)
                    if col.null_count:
                        i = int(np.argmax(np.asarray(col.is_null())))
                        raise DataFormatError(f"{src}: column {name!r} is missing (null) at row {start + i}; "
                                              "remove or impute it")
                    cols[name] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
                yc = cols[response]
                _check_finite_chunk(yc, start, "y", src)
                y[start:start + m] = yc
                xc = np.column_stack([cols[c] for c in covs])
                _check_finite_chunk(xc, start, "X", src)
                yield np.column_stack([np.ones(m), xc]) if intercept else xc
                start += m
        except pa.ArrowException as exc:
            raise DataFormatError(f"{src}: cannot read row {start} onwards ({exc})") from None

    cache = _cache_dir()
    xf = _write_npy(os.path.join(cache, "X.npy"), (n, d + int(intercept)), batches())
    names = ("intercept", *covs) if intercept else tuple(covs)
    ds = _out_of_core(xf, y, None, names, src)
    return replace(ds, classes=classes) if classes else ds


def _hetero_linear(seed: int = 0, n_data: int = 2000, dim: int = 20) -> Dataset:
    """Wang, Ding & Huggins (2026), eq. (E.2): y ~ N(xᵀθ*, 1 + ‖x‖²), x ~ N(0, I_D), θ* ~ N(0, I_D)."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(dim)
    X = rng.standard_normal((n_data, dim))
    y = X @ theta + np.sqrt(1.0 + np.sum(X**2, axis=1)) * rng.standard_normal(n_data)
    return make_dataset(X, y, source=f"example:hetero-linear(seed={seed})")


def _logistic(seed: int = 0, n_data: int = 2000, dim: int = 5) -> Dataset:
    """Well-specified logistic regression: x ~ N(0, I), θ* ~ N(0, I/D)·2, y ~ Bernoulli(σ(xᵀθ*))."""
    rng = np.random.default_rng(seed)
    theta = 2.0 * rng.standard_normal(dim) / np.sqrt(dim)
    X = rng.standard_normal((n_data, dim))
    y = (rng.random(n_data) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(float)
    return make_dataset(X, y, source=f"example:logistic(seed={seed})")


def _poisson(seed: int = 0, n_data: int = 2000, dim: int = 5) -> Dataset:
    """Poisson regression: x ~ N(0, I)/2, θ* ~ N(0, I/D), y ~ Poisson(exp(xᵀθ*))."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(dim) / np.sqrt(dim)
    X = 0.5 * rng.standard_normal((n_data, dim))
    y = rng.poisson(np.exp(X @ theta)).astype(float)
    return make_dataset(X, y, source=f"example:poisson(seed={seed})")


#: name -> (generator, default model)
EXAMPLES = {
    "hetero-linear": (_hetero_linear, "linear"),
    "logistic": (_logistic, "logistic"),
    "poisson": (_poisson, "poisson"),
}


def example(name: str, seed: int = 0) -> Dataset:
    """A bundled synthetic data set (generated deterministically from ``seed``).

    Parameters
    ----------
    name : str
        One of :data:`EXAMPLES`: ``hetero-linear`` is the heteroskedastic, misspecified linear
        regression of Wang, Ding & Huggins (2026), Eq. (E.2) (D = 20, N = 2000); ``logistic`` and
        ``poisson`` are well-specified GLM examples (D = 5, N = 2000).
    seed : int, optional
        Seed of the generator; the same seed gives the same data.

    Returns
    -------
    Dataset
        The data, in memory.

    Raises
    ------
    DataFormatError
        If ``name`` is not one of :data:`EXAMPLES`.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> data = example("hetero-linear")
    >>> data.X.shape, data.y.shape
    ((2000, 20), (2000,))
    """
    try:
        gen, _ = EXAMPLES[name]
    except KeyError:
        raise DataFormatError(f"unknown example {name!r}; choose one of {', '.join(EXAMPLES)}") from None
    return gen(seed)
