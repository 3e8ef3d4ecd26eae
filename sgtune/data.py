"""Data sets: loading CSV/NPZ files with validation, and the bundled examples.

A :class:`Dataset` is a frozen pair (X, y) of float64 arrays, ``X`` of shape (N, D)
and ``y`` of shape (N,). Files follow ``CLI.md``: a ``.csv`` with a header row (the
response column is ``response``, default ``"y"``; every other column is a covariate)
or a ``.npz`` with arrays ``X`` and ``y``. No intercept is added unless asked.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataFormatError

__all__ = ["Dataset", "load_dataset", "make_dataset", "example", "EXAMPLES"]


@dataclass(frozen=True)
class Dataset:
    """Design matrix ``X`` (N, D), response ``y`` (N,), and covariate names."""

    X: np.ndarray
    y: np.ndarray
    names: tuple[str, ...] = ()
    source: str = ""

    @property
    def n_data(self) -> int:
        return int(self.X.shape[0])

    @property
    def dim(self) -> int:
        return int(self.X.shape[1])

    def subsample(self, size: int, rng: np.random.Generator) -> "Dataset":
        """A uniformly random subset of ``size`` rows without replacement (Algorithm 1, step 1)."""
        if not 1 <= size <= self.n_data:
            raise DataFormatError(f"subsample size must be in [1, N={self.n_data}], got {size}")
        idx = np.sort(rng.choice(self.n_data, size=size, replace=False))
        return Dataset(self.X[idx], self.y[idx], self.names, f"{self.source}[subsample {size}]")


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
    """Validate arrays into a :class:`Dataset` (finite float64, shapes (N, D) and (N,))."""
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


def _read_csv(path: Path, response: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise DataFormatError(f"{path}: the file is empty; expected a header row") from None
        rows = [r for r in reader if r and any(c.strip() for c in r)]
    if response not in header:
        raise DataFormatError(
            f"{path}: no response column {response!r} in header {header}; pass --response NAME")
    if len(header) < 2:
        raise DataFormatError(f"{path}: need a response and at least one covariate column")
    values = np.empty((len(rows), len(header)))
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise DataFormatError(
                f"{path}: line {i + 2} has {len(row)} fields but the header has {len(header)}")
        for j, cell in enumerate(row):
            try:
                values[i, j] = float(cell)
            except ValueError:
                raise DataFormatError(
                    f"{path}: line {i + 2}, column {header[j]!r}: {cell!r} is not a number") from None
    j = header.index(response)
    names = tuple(h for k, h in enumerate(header) if k != j)
    return np.delete(values, j, axis=1), values[:, j], names


def load_dataset(path: str | Path, *, response: str = "y", intercept: bool = False) -> Dataset:
    """Load and validate a ``.csv`` or ``.npz`` data file (see module docstring)."""
    p = Path(path)
    if not p.exists():
        raise DataFormatError(f"data file {p} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        X, y, names = _read_csv(p, response)
        return make_dataset(X, y, intercept=intercept, names=names, source=str(p))
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
    raise DataFormatError(f"data file {p} must end in .csv or .npz, got {suffix or 'no suffix'!r}")


def _hetero_linear(seed: int = 0, n_data: int = 2000, dim: int = 20) -> Dataset:
    """Seed 003, eq. (E.2): y ~ N(xᵀθ*, 1 + ‖x‖²), x ~ N(0, I_D), θ* ~ N(0, I_D)."""
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

    ``hetero-linear`` is the heteroskedastic, misspecified linear regression of
    seed 003, eq. (E.2) (D = 20, N = 2000); ``logistic`` and ``poisson`` are
    well-specified GLM examples (D = 5, N = 2000).
    """
    try:
        gen, _ = EXAMPLES[name]
    except KeyError:
        raise DataFormatError(f"unknown example {name!r}; choose one of {', '.join(EXAMPLES)}") from None
    return gen(seed)
