"""Chains as an ArviZ ``InferenceData`` (optional ``[arviz]`` extra), so R-hat, ESS and ArviZ's plots work on them.

:func:`to_inference_data` turns a :class:`~sgtune.sampler.ChainResult` with a thinned trace into
an ``InferenceData`` with a ``posterior`` group (variable ``theta`` with dims
``(chain, draw, theta_dim)``; ``draw`` is the iteration index of each kept draw, ``chain`` the
original chain index — diverged chains are dropped and listed in the attributes) and a
``constant_data`` group (θ̂ and the step-size matrix Λ). The sampler settings are attributes
of every group (netCDF attributes are scalars or strings: ∞ is written as ``"inf"``, booleans
as 0/1). :func:`write_netcdf` writes it atomically.
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from ._files import atomic_path
from ..core.errors import MissingExtraError, SgtuneError

__all__ = ["require_arviz", "to_inference_data", "write_netcdf", "netcdf_attrs", "default_thin"]

#: a default-thinned trace keeps at most this many draws per chain …
DEFAULT_DRAWS_PER_CHAIN = 1000
#: … and at most this many bytes of draws (C × T' × D float64) in all
DEFAULT_TRACE_BYTES = 100_000_000


def default_thin(n_steps: int, burn_in: int | None, n_chains: int, dim: int) -> int:
    """The thinning k of a trace file when none is given.

    Every k-th draw after burn-in is kept, so that each chain keeps at most
    ``DEFAULT_DRAWS_PER_CHAIN`` draws and the trace at most ``DEFAULT_TRACE_BYTES`` (burn-in defaults
    to T/10, as in :func:`~sgtune.sampler.run_chains`).

    Parameters
    ----------
    n_steps : int
        T, burn-in included.
    burn_in : int or None
        The burn-in (None: T/10).
    n_chains : int
        C.
    dim : int
        D.

    Returns
    -------
    int
        The thinning k ≥ 1.

    Examples
    --------
    >>> from sgtune.io.trace_io import default_thin
    >>> default_thin(10_000, None, n_chains=4, dim=5)  # 9000 draws after burn-in, 1000 kept
    9
    """
    post = max(1, int(n_steps) - (int(n_steps) // 10 if burn_in is None else int(burn_in)))
    per_chain = max(1, min(DEFAULT_DRAWS_PER_CHAIN, DEFAULT_TRACE_BYTES // (8 * max(1, n_chains) * max(1, dim))))
    return max(1, math.ceil(post / per_chain))


def require_arviz() -> Any:
    """Import ArviZ (silencing its import-time refactor notice) or raise :class:`MissingExtraError`.

    Returns
    -------
    module
        ``arviz``.

    Raises
    ------
    MissingExtraError
        ArviZ is not installed (extra ``[arviz]``).

    Examples
    --------
    >>> from sgtune.io.trace_io import require_arviz
    >>> require_arviz().__name__
    'arviz'
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            import arviz
    except ImportError:
        raise MissingExtraError("netCDF/InferenceData output needs arviz, which is not installed; "
                                "pip install 'sgtune[arviz]'") from None
    return arviz


def netcdf_attrs(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Convert settings to netCDF-safe attributes: str/int/float scalars; ∞ → "inf", bool → 0/1, None dropped.

    Parameters
    ----------
    settings : mapping
        Names to values (numbers, strings, booleans, None, 1-D numeric arrays, anything else).

    Returns
    -------
    dict
        The attributes (other values as their ``str``).

    Examples
    --------
    >>> from sgtune.io.trace_io import netcdf_attrs
    >>> netcdf_attrs({"beta": float("inf"), "decay": None, "tuned": True, "sampler": "sgld"})
    {'beta': 'inf', 'tuned': 1, 'sampler': 'sgld'}
    """
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if value is None:
            continue
        if isinstance(value, (bool, np.bool_)):
            out[key] = int(value)
        elif isinstance(value, (int, np.integer)):
            out[key] = int(value)
        elif isinstance(value, (float, np.floating)):
            v = float(value)
            out[key] = v if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")
        elif isinstance(value, str):
            out[key] = value
        else:
            arr = np.asarray(value)
            out[key] = arr.tolist() if arr.ndim == 1 and arr.dtype.kind in "if" else str(value)
    return out


def to_inference_data(result: Any, *, names: Sequence[str] | None = None, theta_hat: Any = None,
                      step_matrix: Any = None, attrs: Mapping[str, Any] | None = None) -> Any:
    """``InferenceData`` of a chain run: posterior ``theta`` (chain, draw, theta_dim) + settings as attributes.

    Parameters
    ----------
    result : ChainResult
        A run with a ``trace`` (``thin`` > 0).
    names : sequence of str, optional
        Coordinate names of θ (default ``theta0``, ``theta1``, …).
    theta_hat : (D,) array_like, optional
        Stored in ``constant_data`` when given.
    step_matrix : array_like, optional
        Λ, stored in ``constant_data`` as (D, D) when given (a scalar or diagonal is expanded).
    attrs : mapping, optional
        Extra attributes (e.g. the command line), merged over ``result.settings``.

    Returns
    -------
    arviz.InferenceData
        The non-diverged chains' draws, with the run's settings as attributes of every group.

    Raises
    ------
    SgtuneError
        The run kept no draws (``thin`` = 0) or every chain diverged.
    MissingExtraError
        ArviZ is not installed.

    See Also
    --------
    write_netcdf : Write it without leaving a partial file.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.sampler import run_chains
    >>> res = run_chains("logistic", example("logistic"), Dynamics(0.1, batch_size=32),
    ...                  RunSpec(1000, n_chains=2, thin=10))
    >>> from sgtune.io.trace_io import to_inference_data
    >>> idata = to_inference_data(res)
    >>> dict(idata.posterior["theta"].sizes)
    {'chain': 2, 'draw': 90, 'theta_dim': 5}
    """
    az = require_arviz()
    trace = getattr(result, "trace", None)
    if trace is None:
        raise SgtuneError("the run kept no draws: InferenceData needs a trace; run with `thin` > 0 (keep every k-th draw)")
    trace = np.asarray(trace, float)
    c, t, d = trace.shape
    ok = np.asarray(result.diverged_at) < 0
    if not ok.any():
        raise SgtuneError("every chain diverged; there are no draws to write")
    if names is None or len(names) != d:
        names = [f"theta{i}" for i in range(d)]
    thin = int(result.settings.get("thin", 1)) or 1
    draws = int(result.burn_in) + thin * (np.arange(t) + 1)  # the step after which each draw was kept
    posterior = {"theta": trace[ok]}
    constant: dict[str, np.ndarray] = {}
    if theta_hat is not None:
        constant["theta_hat"] = np.asarray(theta_hat, float)
    if step_matrix is not None:
        lam = np.asarray(step_matrix, float)
        constant["step_matrix"] = np.diag(lam) if lam.ndim == 1 else lam * np.eye(d) if lam.ndim == 0 else lam
    idata = az.from_dict(
        posterior=posterior, constant_data=constant or None,
        coords={"chain": np.flatnonzero(ok), "draw": draws, "theta_dim": list(names),
                "theta_dim_col": list(names)},
        dims={"theta": ["theta_dim"], "theta_hat": ["theta_dim"], "step_matrix": ["theta_dim", "theta_dim_col"]})
    from .. import __version__

    meta = netcdf_attrs({
        **result.settings, "n_steps": result.n_steps, "burn_in": result.burn_in, "n_chains": result.n_chains,
        "seed": result.seed, "diverged_chains": [int(i) for i in np.flatnonzero(~ok)] or "none",
        "inference_library": "sgtune", "inference_library_version": __version__, **(attrs or {})})
    for group in idata.groups():
        idata[group].attrs.update(meta)
    return idata


def write_netcdf(idata: Any, path: str | os.PathLike[str]) -> None:
    """Write ``idata.to_netcdf`` into a temporary file in the same folder, then rename (no partial file).

    Parameters
    ----------
    idata : arviz.InferenceData
        E.g. from :func:`to_inference_data`.
    path : str or path
        The netCDF file to write.

    Examples
    --------
    >>> from sgtune.core.config import Dynamics, RunSpec
    >>> from sgtune.io.data import example
    >>> from sgtune.sampler import run_chains
    >>> res = run_chains("logistic", example("logistic"), Dynamics(0.1, batch_size=32),
    ...                  RunSpec(1000, n_chains=2, thin=10))
    >>> import pathlib, tempfile
    >>> from sgtune.io.trace_io import to_inference_data, write_netcdf
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "trace.nc"
    >>> write_netcdf(to_inference_data(res), path)
    >>> path.exists()
    True
    """
    with atomic_path(path) as tmp:
        idata.to_netcdf(tmp)
