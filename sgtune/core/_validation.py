"""Boundary validation: convert once to contiguous float64 and check with named messages.

Modelled on scipy's ``_are_validate_args`` and python-control's ``_check_shape``:
every message names the argument (``name=``) as the caller knows it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import NotPositiveDefiniteError, ShapeError, SgtuneError

__all__ = [
    "as_float_array",
    "as_vector",
    "as_square",
    "as_symmetric",
    "as_spd",
    "check_positive",
    "check_int",
    "check_probability",
    "is_symmetric",
    "available_memory",
    "format_bytes",
]


def as_float_array(value: Any, name: str, *, ndim: int | None = None) -> np.ndarray:
    """Return ``value`` as a C-contiguous float64 array with only finite entries."""
    try:
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim:
            arr = np.ascontiguousarray(arr)
    except (TypeError, ValueError) as exc:
        raise SgtuneError(f"{name} must be numeric, got {type(value).__name__}: {exc}") from None
    if ndim is not None and arr.ndim != ndim:
        raise ShapeError(f"{name} must be a {ndim}-D array but has shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise SgtuneError(
            f"{name} contains a non-finite value (NaN or inf) at index {tuple(int(i) for i in bad)}; "
            "remove or impute it")
    return arr


def as_vector(value: Any, name: str, size: int | None = None) -> np.ndarray:
    """Finite float64 1-D array, optionally of a given length."""
    arr = as_float_array(value, name)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ShapeError(f"{name} must be a vector but has shape {arr.shape}")
    if size is not None and arr.shape[0] != size:
        raise ShapeError(f"{name} must have length D = {size} but has length {arr.shape[0]}")
    return arr


def as_square(value: Any, name: str, size: int | None = None) -> np.ndarray:
    """Finite float64 square matrix, optionally (size, size)."""
    arr = as_float_array(value, name)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        want = f"({size}, {size})" if size is not None else "square (D, D)"
        raise ShapeError(f"{name} must be {want} but has shape {arr.shape}")
    if size is not None and arr.shape[0] != size:
        raise ShapeError(f"{name} must be (D, D) = ({size}, {size}) but has shape {arr.shape}")
    return arr


def is_symmetric(a: np.ndarray) -> bool:
    """Relative symmetry test ``‖A−Aᵀ‖₁ ≤ 100·spacing(‖A‖₁)`` (scipy's rule)."""
    norm = np.linalg.norm(a, 1) if a.size else 0.0
    return bool(np.linalg.norm(a - a.T, 1) <= 100 * np.spacing(norm)) if a.size else True


def as_symmetric(value: Any, name: str, size: int | None = None, *, rtol: float | None = None) -> np.ndarray:
    """Square matrix that is symmetric to a relative tolerance; returned exactly symmetrised."""
    a = as_square(value, name, size)
    norm = np.linalg.norm(a, 1)
    err = np.linalg.norm(a - a.T, 1)
    tol = 100 * np.spacing(norm) if rtol is None else rtol * norm
    if err > tol:
        raise NotPositiveDefiniteError(
            f"{name} must be symmetric but ‖A−Aᵀ‖₁/‖A‖₁ = {err / max(norm, 1e-300):.3g}; "
            f"pass (A + A.T)/2 if the asymmetry is rounding")
    return 0.5 * (a + a.T)


def as_spd(value: Any, name: str, size: int | None = None, *, rtol: float | None = None) -> np.ndarray:
    """Symmetric positive-definite matrix (checked by Cholesky)."""
    a = as_symmetric(value, name, size, rtol=rtol)
    try:
        np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        lam = np.linalg.eigvalsh(a)
        raise NotPositiveDefiniteError(
            f"{name} must be symmetric positive definite but its smallest eigenvalue is "
            f"{lam[0]:.3g} (largest {lam[-1]:.3g})") from None
    return a


def check_positive(value: Any, name: str, *, allow_inf: bool = False, strict: bool = True) -> float:
    """A real number > 0 (or >= 0 with ``strict=False``); ``inf`` only if allowed."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SgtuneError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise SgtuneError(f"{name} must be finite, got {v}")
    if (strict and not v > 0) or (not strict and v < 0):
        bound = "> 0" if strict else ">= 0"
        raise SgtuneError(f"{name} must be {bound}, got {v}")
    return v


def check_int(value: Any, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """An integer in [low, high]."""
    if isinstance(value, bool) or not float(value).is_integer():
        raise SgtuneError(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if low is not None and v < low:
        raise SgtuneError(f"{name} must be >= {low}, got {v}")
    if high is not None and v > high:
        raise SgtuneError(f"{name} must be <= {high}, got {v}")
    return v


def check_probability(value: Any, name: str, *, closed_right: bool = False) -> float:
    """A number in [0, 1) (or [0, 1])."""
    v = float(value)
    ok = 0.0 <= v <= 1.0 if closed_right else 0.0 <= v < 1.0
    if not ok:
        rng = "[0, 1]" if closed_right else "[0, 1)"
        raise SgtuneError(f"{name} must lie in {rng}, got {v}")
    return v


def available_memory() -> int | None:
    """Bytes this process can still allocate without swapping: ``MemAvailable`` of /proc/meminfo (or
    ``os.sysconf`` available pages), capped by a cgroup v2 memory limit; ``None`` when unknown."""
    import os

    avail: int | None = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, ValueError, OSError):
            return None
    try:  # a container's limit (cgroup v2): what is left of it
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current") as fh:
                used = int(fh.read().strip())
            avail = min(avail, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return avail


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 kB'`` (decimal units)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"  # pragma: no cover
