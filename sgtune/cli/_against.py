"""``--against``: what ``run``'s health check and ``verify`` compare the chains' covariance with.

A Λ file may have a *sidecar*: the JSON document of the ``sgtune lambda`` call that wrote it, saved under
the same name with ``.json`` (``sgtune lambda … -o LAM.npy --json LAM.json``, or ``> LAM.json``). Its
``expects`` says which covariance the chain run with that Λ is meant to have — the linearised prediction,
or (after ``--refine``) the target, which the refining chains measured — with ``expected_cov`` and
``expected_cov_tolerance``. ``--against`` picks:

- ``prediction``: the linearised chain's exact stationary covariance Σ(Λ) (Wang, Ding & Huggins 2026,
  Eqs. (11)–(12));
- ``target``: the tuning target Σ* (``verify``'s own with ``--target``; else the sidecar's ``target_cov``);
- ``FILE.npy``: a (D, D) covariance;
- default: the sidecar's ``expects`` when ``--lambda`` has a sidecar that describes it (its ``lambda`` equals
  the file's), else ``prediction``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from ..core._validation import as_spd
from ..core.errors import SgtuneError
from ._io import array_digest, info, warn
from ._options import load_npy

AGAINST_CHOICES = ("prediction", "target")

against_option = click.option(
    "--against", default=None, metavar="prediction|target|FILE.npy",
    help="Compare the chains' covariance with: 'prediction' (the linearised chain's Σ(Λ)), 'target' (the tuning "
         "target; with --lambda LAM.npy the target_cov of its JSON sidecar LAM.json, written by `sgtune lambda -o "
         "LAM.npy --json LAM.json`) or a (D, D) .npy covariance. Default: what the sidecar's 'expects' says (the "
         "target after `lambda --refine`), else the prediction.")


@dataclass(frozen=True)
class Against:
    """What to compare with: ``label`` ("prediction", "target" or "matrix"), the matrix (None: the prediction),
    the relative tolerance the source vouches for, and where it came from (for the JSON)."""

    label: str
    cov: np.ndarray | None = None
    tolerance: float = 0.0
    source: str = "prediction"

    def to_dict(self) -> dict[str, Any]:
        return {"against": self.label, "against_source": self.source, "against_tolerance": self.tolerance}


def sidecar_path(lambda_path: str) -> Path:
    """LAM.json for LAM.npy."""
    return Path(lambda_path).with_suffix(".json")


def read_sidecar(lambda_path: str | None, lam: Any, *, quiet: bool) -> dict[str, Any] | None:
    """The sidecar of ``--lambda`` when it exists and describes that Λ (its ``lambda`` equals the file's), else
    None (a sidecar that describes another Λ is named on stderr and ignored)."""
    if lambda_path is None:
        return None
    path = sidecar_path(lambda_path)
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        side_lam = np.asarray(doc["lambda"], dtype=float)
    except (OSError, ValueError, KeyError, TypeError):
        info(f"{path}: not the JSON of `sgtune lambda` (no readable 'lambda'); ignored", quiet)
        return None
    arr = np.asarray(lam, dtype=float)
    digest = (doc.get("array_digests") or {}).get(Path(lambda_path).name) if isinstance(doc, dict) else None
    if side_lam.shape != arr.shape or not np.array_equal(side_lam, arr) or (
            isinstance(digest, str) and digest != array_digest(arr)):
        warn(f"{path} is not the JSON of {lambda_path} (it describes another Λ: one of the pair was replaced or "
             f"written by another command); it is ignored: write both again with `sgtune lambda … -o {lambda_path} "
             f"--json {path}`")
        return None
    return doc


def resolve_against(value: str | None, *, dim: int, lambda_path: str | None = None, lam: Any = None,
                    tuned_target: np.ndarray | None = None, quiet: bool = False) -> Against:
    """The :class:`Against` of ``--against VALUE`` (module docstring); errors name the option and the fix."""
    side = read_sidecar(lambda_path, lam, quiet=quiet) if lambda_path is not None else None
    if value is None:
        if side is not None and side.get("expects") == "target":
            return Against("target", _matrix(side, "target_cov", dim), float(side.get("expected_cov_tolerance", 0.0)),
                           str(sidecar_path(str(lambda_path))))
        return Against("prediction")
    if value == "prediction":
        return Against("prediction")
    if value == "target":
        if tuned_target is not None:
            return Against("target", tuned_target, 0.0, "tuning")
        if side is None:
            raise SgtuneError(f"--against target needs the target: with --lambda {lambda_path or 'LAM.npy'}, its JSON "
                              f"sidecar {sidecar_path(str(lambda_path or 'LAM.npy'))} (written by `sgtune lambda … -o "
                              "LAM.npy --json LAM.json`), or give the target covariance as --against FILE.npy")
        tol = float(side.get("expected_cov_tolerance", 0.0)) if side.get("expects") == "target" else 0.0
        return Against("target", _matrix(side, "target_cov", dim), tol, str(sidecar_path(str(lambda_path))))
    arr = load_npy(value, "--against")
    try:
        cov = as_spd(arr, "--against", dim, rtol=1e-10)
    except SgtuneError as exc:
        raise SgtuneError(f"--against {value}: {str(exc).splitlines()[0]}; give a symmetric positive definite (D, D) "
                          f"= ({dim}, {dim}) covariance, 'prediction' or 'target'") from None
    return Against("matrix", cov, 0.0, value)


def _matrix(doc: dict[str, Any], key: str, dim: int) -> np.ndarray:
    try:
        return as_spd(np.asarray(doc[key], dtype=float), key, dim, rtol=1e-10)
    except (KeyError, ValueError, TypeError, SgtuneError):
        raise SgtuneError(f"the Λ's JSON sidecar has no usable {key!r} ((D, D) = ({dim}, {dim}) SPD); write it "
                          "again with `sgtune lambda … -o LAM.npy --json LAM.json`") from None
