"""``sgtune minibatch-error``: exact minibatch second-order error terms of SGLD vs SGLRW (Mensch et al. (2025))."""
from __future__ import annotations

from typing import Any

import click

from ..core._refs import references_of
from ..core.errors import SgtuneError
from ..models import fit_map, model_dim
from ..models.base import parameter_names
from ..theory.minibatch import minibatch_error
from ._io import check_writable, emit, handle_errors, info
from ._options import check_batch_size, load_data_model, load_prior, load_theta, output_options
from ._shared_options import data_options


@click.command("minibatch-error")
@data_options
@click.option("--theta", "theta_path", type=click.Path(dir_okay=False), default=None,
              help="θ as a (D,) .npy file (default: the MAP θ̂).")
@click.option("--batch-size", type=int, required=True, help="Minibatch size B (1 ≤ B ≤ N).")
@click.option("--without-replacement", is_flag=True,
              help="Batches are uniform B-subsets (default: B indices with replacement).")
@click.option("--step-size", type=float, default=None,
              help="δ: also report the per-step E_cov contributions δ²·E‖M‖²_F (eq. 15).")
@output_options
@handle_errors
def cli(theta_path: str | None, batch_size: int, without_replacement: bool, step_size: float | None,
        output: str | None, json_path: str | None, overwrite: bool, quiet: bool, **kw: Any) -> None:
    """Exact E‖M_SGLD‖²_F, E‖M_SGLRW‖²_F and E[M] over the minibatch draw at θ.

    \b
    Mensch et al.'s (2025) convention: U(θ) = −log p(θ) − Σ_i log p(y_i|x_i,θ) (a SUM over
    the data; prior N(0, Γ⁻¹) with Γ = G·I from --prior-precision), minibatch
    gradient ∇̂U = −∇log p(θ) − (N/B)Σ_{i∈batch}∇log p(y_i|x_i,θ), ζ = ∇̂U − ∇U,
    M_SGLD = ζζᵀ + ∇Uζᵀ + ζ∇Uᵀ (eq. 99), M_SGLRW = offdiag(M_SGLD) (Lemma 4.3).
    Units: squared units of ∇U, i.e. 1/θ².

    \b
    JSON keys: parameter_names (the name of each coordinate of θ, in θ order),
    frob2_sgld, frob2_sglrw, ratio (= frob2_sglrw/frob2_sgld),
    diagonal_share (= 1 − ratio), expected_m_sgld (D×D, = G = Cov ζ),
    expected_m_sglrw (= offdiag G), the Gaussian-noise approximations
    *_gaussian, and e_cov_* (= δ²·E‖M‖²) with --step-size.
    -o/--output writes expected_m_sgld as .npy.
    """
    check_writable(output, overwrite, "--output")
    check_writable(json_path, overwrite, "--json")
    ds, model = load_data_model(kw)
    d = model_dim(model, ds.dim)
    if theta_path is None and kw.get("theta_hat"):  # the shared --theta-hat names the point too
        theta_path = kw["theta_hat"]
    gam = load_prior(kw, d)
    b = check_batch_size(batch_size, ds.n_data)
    if theta_path is None:
        theta = fit_map(model, ds, gam, seed=int(kw.get("seed", 0)), scheduler=kw.get("scheduler")).theta_hat
        theta_source = "map"
    else:
        theta = load_theta(theta_path, d)
        theta_source = theta_path
    if step_size is not None and not step_size > 0:
        raise SgtuneError(f"--step-size must be > 0, got {step_size}")
    res = minibatch_error(model, ds, theta, b, prior_precision=gam, replacement=not without_replacement,
                          scheduler=kw.get("scheduler"))

    doc: dict[str, Any] = {
        "frob2_sgld": res.frob2_sgld,
        "frob2_sglrw": res.frob2_sglrw,
        "ratio": res.ratio,
        "diagonal_share": res.diagonal_share,
        "expected_m_sgld": res.expected_m_sgld,
        "expected_m_sglrw": res.expected_m_sglrw,
        "frob2_sgld_gaussian": res.frob2_sgld_gaussian,
        "frob2_sglrw_gaussian": res.frob2_sglrw_gaussian,
        "diagonal_share_gaussian": res.diagonal_share_gaussian,
        "isotropic_gaussian_share": 3.0 / (d + 2),
        "noise_cov_trace": res.noise_cov_trace,
        "grad_potential": res.grad_potential,
        "theta": theta,
        "theta_source": theta_source,
        "n_data": ds.n_data,
        "dim": d,
        "parameter_names": list(parameter_names(model, ds.names, ds.dim)),
        "batch_size": b,
        "replacement": not without_replacement,
        "model": model.name,
        "seed": kw.get("seed", 0),
        "references": references_of(minibatch_error),
    }
    if step_size is not None:
        doc["step_size"] = step_size
        doc["e_cov_sgld"] = step_size**2 * res.frob2_sgld
        doc["e_cov_sglrw"] = step_size**2 * res.frob2_sglrw
    info(f"N = {ds.n_data}, D = {d}, B = {b} ({'with' if not without_replacement else 'without'} "
         f"replacement), θ = {theta_source}", quiet)
    info(f"  E‖M_SGLD‖²_F  = {res.frob2_sgld:.6g}   (Gaussian approx. {res.frob2_sgld_gaussian:.6g})", quiet)
    info(f"  E‖M_SGLRW‖²_F = {res.frob2_sglrw:.6g}   (Gaussian approx. {res.frob2_sglrw_gaussian:.6g})", quiet)
    info(f"  diagonal share = {res.diagonal_share:.4f}  (isotropic Gaussian 3/(D+2) = {3 / (d + 2):.4f})",
         quiet)
    emit(doc, json_path, arrays={output: res.expected_m_sgld})  # type: ignore[dict-item]
