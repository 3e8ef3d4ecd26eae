"""``sgtune ksd``: kernel Stein discrepancy of samples against the full-data posterior (IMQ kernel, V-statistic)."""
from __future__ import annotations

from typing import Any

import click
import numpy as np

from ..core._refs import references_of
from ..core.errors import ShapeError
from ..diagnostics.ksd import DEFAULT_BLOCK, posterior_ksd
from ..models.base import model_dim
from ._io import check_writable, command_line, emit, handle_errors, info
from ._options import json_output_options, load_data_model, load_float_npy, load_prior
from ._shared_options import data_options
from ._render import key_values
from .cmd_run import progress_bar


@click.command("ksd")
@data_options
@click.option("--samples", "samples_path", type=click.Path(dir_okay=False), required=True,
              help="Draws θ_i as rows of an (n, D) .npy file (a (C, T, D) trace is flattened over chains).")
@click.option("--block", type=int, default=DEFAULT_BLOCK, show_default=True,
              help="Rows per block of the O(n²D) double sum (memory ~ 5·block² floats; the value does not "
                   "change the result beyond rounding).")
@json_output_options
@handle_errors
def cli(**kw: Any) -> None:
    """Kernel Stein discrepancy of the rows of --samples against p(θ|𝒟) ∝ exp(−N·L(θ)).

    \b
    Mean-loss convention L(θ) = (1/N) Σ_n l_n(θ) + θᵀΓθ/(2N): the score is
    s(θ) = −Σ_n ∇l_n(θ) − Γθ. IMQ kernel k(a, b) = (1 + ‖a − b‖²)^(−1/2) (Gorham & Mackey
    2017), V-statistic KSD² = (1/n²) Σ_ij k₀(θ_i, θ_j); θ is in the data's units (no rescaling).
    Smaller is better; for n i.i.d. posterior draws KSD ≈ sqrt(E[‖s‖² + D]/n), reported as
    ksd_iid_reference so you can tell sampling noise from bias. Cost: n score evaluations
    (each O(N·D)) plus O(n²·D) for the double sum, with a progress bar.
    JSON keys: ksd (sqrt of the V-statistic), n_samples, ksd_squared, ksd_iid_reference, dim,
    n_data, model, kernel, block, ...
    Example:  sgtune ksd --example logistic --samples draws.npy --prior-precision 1
    """
    check_writable(kw["json_path"], bool(kw["overwrite"]), "--json")
    if kw["block"] < 1:
        raise click.BadParameter(f"must be an integer >= 1, got {kw['block']}", param_hint="--block")
    ds, model = load_data_model(kw)
    d = model_dim(model, ds.dim)  # parameters, not covariates (differs for mlp / user models)
    gam = load_prior(kw, d)
    samples = load_float_npy(str(kw["samples_path"]), "--samples")
    if samples.ndim == 3:
        samples = samples.reshape(-1, samples.shape[-1])
    if samples.ndim == 1 and d == 1:
        samples = samples[:, None]
    if samples.ndim != 2 or samples.shape[1] != d or samples.shape[0] < 1:
        raise ShapeError(f"--samples must be (n, D) = (n, {d}) but {kw['samples_path']} has shape "
                         f"{samples.shape}")
    if not np.all(np.isfinite(samples)):
        row = int(np.argmax(~np.all(np.isfinite(samples), axis=1)))
        raise ShapeError(f"--samples: row {row} of {kw['samples_path']} is not finite; drop diverged draws")
    quiet = bool(kw["quiet"])
    state = {"last": 0}
    with progress_bar(quiet, f"ksd: {samples.shape[0]} samples (scores, then pairs)", 1000) as bar:
        def progress(done: int, total: int) -> None:
            frac = int(1000 * done / total)
            bar.update(frac - state["last"])
            state["last"] = frac

        res = posterior_ksd(model, ds.X, ds.y, samples, gam, block=int(kw["block"]), progress=progress)
    ref = float(np.sqrt(res.diagonal_mean / res.n_samples))
    doc = {"ksd": res.ksd, "ksd_squared": res.ksd_squared, "n_samples": res.n_samples,
           "ksd_iid_reference": ref, "kernel": "imq(c=1,beta=-1/2)", "statistic": "V", "block": res.block,
           "dim": d, "n_data": ds.n_data, "model": model.name, "data": ds.source,
           "command": command_line(), "references": references_of(posterior_ksd)}
    emit(doc, kw["json_path"])
    info(key_values([("KSD", res.ksd), ("i.i.d. reference", ref), ("samples", res.n_samples)]), quiet)
