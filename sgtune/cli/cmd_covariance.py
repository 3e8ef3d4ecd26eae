"""``sgtune covariance``: predict the stationary covariance of SG(L)D for a given Λ."""
from __future__ import annotations

import math
import shlex
from typing import Any

import click

from ..core._refs import references_of
from ..core.config import Dynamics
from ..core.errors import SgtuneError
from ..theory.mcerror import mc_error
from ..theory.stationary import iterate_average_cov, predict_stationary_cov
from ._applicability import applicability_report, skipped_report
from ._readable import applicability_rows, next_line
from ._remedies import first_checked
from ._io import command_line, emit, handle_errors, info
from ._options import (applicability_option, expansion_keys, load_batch_problem, load_npy, output_options,
                       temperature_json)
from ._shared_options import batch_options, data_options
from ._render import coordinate_table, key_values, matrix_summary


@click.command("covariance")
@data_options
@batch_options
@click.option("--step-size", type=float, default=None, help="Scalar step size λ (Λ = λI).")
@click.option("--lambda", "lambda_file", type=click.Path(dir_okay=False), default=None,
              help="Step-size matrix Λ from a .npy file: (D, D), or (D,) for a diagonal.")
@click.option("--average-window", type=int, default=None,
              help="Also report the covariance of the mean of k consecutive stationary iterates.")
@applicability_option
@output_options
@handle_errors
def cli(**kw: object) -> None:
    """Exact stationary covariance, spectral radius and mixing time of SG(L)D with Λ (Wang, Ding & Huggins (2026) eqs. 11–12).

    \b
    JSON keys: parameter_names (the name of each coordinate of θ, in θ order),
    cov, spectral_radius, spectral_radius_is_bound, tau_worst, tau,
    tau_spectral (Prop. 4.4's 2/μ_min(ΛH) − 1; without momentum), theta_hat,
    relative_residual, iterate_average_cov (with --average-window),
    mean_mc_variance (lim T·Cov(x̄_T), D×D), cov_mc_error_constant (lim T·E‖Ŝ_T − Σ‖²_F / ‖Σ‖²_F,
    Gaussian fourth moments): a run of T steps and C chains has RMS relative error √(c/(T·C)).
    """
    if (kw["step_size"] is None) == (kw["lambda_file"] is None):
        raise click.UsageError("give exactly one of --step-size L or --lambda FILE.npy")
    prob, B, beta = load_batch_problem(kw)
    step = kw["step_size"] if kw["step_size"] is not None else load_npy(str(kw["lambda_file"]), "--lambda")
    if kw["average_window"] is not None and int(kw["average_window"]) < 1:  # type: ignore[arg-type]
        raise SgtuneError(f"--average-window must be >= 1, got {kw['average_window']}")
    dynamics = Dynamics(step, B, inv_temperature=beta, momentum=float(kw["momentum"]),  # type: ignore[arg-type]
                        batching="without-replacement" if kw["without_replacement"] else "replacement")
    st = predict_stationary_cov(prob.expansion, dynamics)
    doc = {**expansion_keys(prob.expansion), "cov": st.cov, "spectral_radius": st.spectral_radius,
           "spectral_radius_is_bound": st.spectral_radius_is_bound, "tau_worst": st.tau_worst, "tau": st.tau,
           "theta_hat": prob.expansion.theta_hat,
           "relative_residual": st.relative_residual, "solver": st.method, "batch_size": B,
           "inverse_temperature": temperature_json(beta), "momentum": st.momentum, "model": prob.model.name,
           "data": prob.dataset.source, "seed": kw["seed"], "command": command_line(),
           "references": references_of(predict_stationary_cov)}
    doc["applicability"] = (skipped_report("--no-applicability") if kw["no_applicability"]
                            else applicability_report(prob, st, seed=int(kw["seed"])))  # type: ignore[arg-type]
    mce = mc_error(st)  # Monte Carlo error of a stationary run
    doc["mean_mc_variance"], doc["cov_mc_error_constant"] = mce.mean_mc_variance, mce.cov_mc_error_constant
    if kw["average_window"] is not None:
        doc["iterate_average_cov"] = iterate_average_cov(st, int(kw["average_window"]))  # type: ignore[arg-type]
        doc["average_window"] = kw["average_window"]
    if math.isfinite(st.tau_spectral):  # Prop. 4.4 value; defined without momentum only
        doc["tau_spectral"] = st.tau_spectral
    emit(doc, kw["json_path"], arrays={kw["output"] or None: st.cov})  # type: ignore[arg-type, dict-item]
    info(coordinate_table(st.summary()) + "\n" + matrix_summary("Σ", st.cov, names=st.parameter_names)
         + "\n" + key_values([
        ("spectral radius", f"{st.spectral_radius:.4g} (stable below 1; closer to 0 mixes faster)"),
        ("relative residual", f"{st.relative_residual:.3g} (of the solve; 0 is exact)"),
        *applicability_rows(doc["applicability"], st.tau_worst)]) + "\n" + _next(kw, doc["applicability"]),
        bool(kw["quiet"]))


def _next(kw: dict[str, Any], app: dict[str, Any]) -> str:
    """Verify the prediction on chains — unless it does not apply: then the first checked remedy, or a plain no."""
    if app.get("applicable") is False:
        argv = first_checked(app.get("remedies", []))
        if argv is not None:
            return "next: " + shlex.join(argv) + " (checked: its applicability report passes)"
        return ("next: no command sgtune has checked — the prediction does not describe the chain on the loss; "
                "verifying these chains would only confirm it (see the warnings for what may help)")
    return next_line("verify", *(("--step-size", str(kw["step_size"])) if kw["step_size"] is not None
                                 else ("--lambda", str(kw["lambda_file"]))))
