"""``sgtune noise-anisotropy``: covariance of the minibatch gradient noise and its whitening (the SMILE paper (2025), App. A)."""
from __future__ import annotations

import math
from typing import Any

import click

from ..core._refs import references_of
from ..models import fit_map, model_dim
from ..models.base import parameter_names
from ..theory.minibatch import noise_anisotropy
from ._io import check_writable, emit, handle_errors, info
from ._options import check_batch_size, load_data_model, load_prior, load_theta, output_options
from ._shared_options import data_options


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"


@click.command("noise-anisotropy")
@data_options
@click.option("--theta", "theta_path", type=click.Path(dir_okay=False), default=None,
              help="θ as a (D,) .npy file (default: the MAP θ̂).")
@click.option("--batch-size", type=int, required=True, help="Minibatch size B (1 ≤ B ≤ N).")
@click.option("--without-replacement", is_flag=True,
              help="Batches are uniform B-subsets (noise × (N−B)/(N−1)); default with replacement.")
@output_options
@handle_errors
def cli(theta_path: str | None, batch_size: int, without_replacement: bool, output: str | None,
        json_path: str | None, overwrite: bool, quiet: bool, **kw: Any) -> None:
    """Covariance V of the minibatch estimate of ∇log p(θ|D) and its anisotropy.

    \b
    V = (N²/B)·f·Cov_i ∇log p(y_i|x_i,θ) (population covariance; f = 1 with
    replacement, (N−B)/(N−1) without). SMILE's continuous-time invariant law is
    preserved only for isotropic noise (the SMILE paper (2025), appendix A); pSMILE rescales
    θ' = θ ⊙ p with the diagonal preconditioner p = √D σ/‖σ‖, σ_j = √V_jj.

    \b
    JSON keys: parameter_names (the name of each coordinate of θ, in θ order),
    noise_cov (D×D), condition_number, diagonal_preconditioner,
    residual_condition_number_diagonal (κ after the diagonal rescaling),
    residual_condition_number_cholesky (after exact whitening: 1), eigenvalues.
    Non-finite condition numbers are reported as the string "inf".
    DATA as a folder (X.npy, y.npy) or .parquet file is streamed in one pass over
    row chunks (memory O(chunk·D + D²); --scheduler runs the chunks on Dask).
    -o/--output writes noise_cov as .npy.
    """
    check_writable(output, overwrite, "--output")
    check_writable(json_path, overwrite, "--json")
    ds, model = load_data_model(kw)
    d = model_dim(model, ds.dim)
    if theta_path is None and kw.get("theta_hat"):  # the shared --theta-hat names the point too
        theta_path = kw["theta_hat"]
    b = check_batch_size(batch_size, ds.n_data)
    if theta_path is None:
        theta = fit_map(model, ds, load_prior(kw, d), seed=int(kw.get("seed", 0)),
                        scheduler=kw.get("scheduler")).theta_hat
        theta_source = "map"
    else:
        theta = load_theta(theta_path, d)
        theta_source = theta_path
    res = noise_anisotropy(model, ds, theta, b, replacement=not without_replacement,
                           scheduler=kw.get("scheduler"))
    doc = {
        "noise_cov": res.noise_cov,
        "condition_number": _num(res.condition_number),
        "diagonal_preconditioner": res.diagonal_preconditioner,
        "residual_condition_number_diagonal": _num(res.residual_condition_number_diagonal),
        "residual_condition_number_cholesky": _num(res.residual_condition_number_cholesky),
        "eigenvalues": res.eigenvalues,
        "theta": theta,
        "theta_source": theta_source,
        "n_data": ds.n_data,
        "dim": d,
        "parameter_names": list(parameter_names(model, ds.names, ds.dim)),
        "batch_size": b,
        "replacement": not without_replacement,
        "model": model.name,
        "seed": kw.get("seed", 0),
        "references": references_of(noise_anisotropy),
    }
    info(f"N = {ds.n_data}, D = {d}, B = {b}: κ(V) = {res.condition_number:.4g}; after the diagonal "
         f"(pSMILE) preconditioner κ = {res.residual_condition_number_diagonal:.4g}; after Cholesky whitening "
         f"κ = {res.residual_condition_number_cholesky:.4g}", quiet)
    emit(doc, json_path, arrays={output: res.noise_cov})
