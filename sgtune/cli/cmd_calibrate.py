"""``sgtune calibrate``: Algorithm 1 of Wang, Ding & Huggins (2026) end to end (tune Λ, run the chains, report errors)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import click
import numpy as np

from ..core._refs import references_of
from ..core.config import Dynamics
from ..workflows.calibrate import calibrate
from ..workflows.run_length import RunOptions
from ..diagnostics.ksd import CHAIN_KSD_MAX_DRAWS, chain_ksd_summary, posterior_is_gaussian
from ..io.plots import figure_calibrate
from ..theory.tuning import FAMILIES, METHODS
from ..workflows.verify import TuneOptions, prediction_check
from ._applicability import applicability_report, skipped_report
from ._health import health_report
from ._io import check_writable, command_line, emit, handle_errors, info, slow_stage, untrusted
from ._options import (applicability_option, check_batch_size, expansion_keys, load_data_model, load_npy, load_prior,
                       output_options, parse_inv_temperature, temperature_json)
from ._shared_options import batch_options, data_options
from ._plot import check_plot, plot_option, render_plot, write_plot
from ._readable import applicability_rows, health_row, ks_row, ksd_row, next_line
from ._render import coordinate_table, key_values
from .cmd_run import check_steps, progress_bar


@click.command("calibrate")
@data_options
@batch_options
@click.option("--target", default="sandwich", show_default=True,
              help="'sandwich' (J⁻¹𝓘J⁻¹/N), 'posterior' (H⁻¹/N) or a (D, D) .npy file.")
@click.option("--method", type=click.Choice(METHODS), default="dq-exact", show_default=True)
@click.option("--family", type=click.Choice(FAMILIES), default="dense", show_default=True)
@click.option("--steps", type=int, default=None, callback=check_steps,
              help="Steps per chain, burn-in included (default max(20000, 1000·τ); at most 10^12).")
@click.option("--burn-in", type=int, default=None, help="Steps discarded (default the largest of T/10, 20·τ and the equilibration steps, at most T/2).")
@click.option("--chains", type=int, default=8, show_default=True, help="Independent chains.")
@click.option("--true-theta", type=click.Path(dir_okay=False), default=None,
              help="Data-generating θ* (.npy): adds the PIT values and their KS distance to Unif(0,1).")
@click.option("--repeat", type=int, default=1, show_default=True,
              help="Repetitions R of Algorithm 1; repetition i is exactly this command with --seed SEED+i. "
                   "With --scheduler they run as Dask tasks (same numbers as serially).")
@applicability_option
@output_options
@plot_option
@handle_errors
def cli(**kw: Any) -> None:
    """Algorithm 1: fit θ̂ (on --subsample M rows), tune Λ, run SG(L)D on all rows, report the errors.

    \b
    JSON keys: parameter_names (the name of each coordinate of θ, in θ order),
    lambda, target_cov, predicted_cov, empirical_cov, empirical_cov_standard_error,
    cov_error_predicted, cov_error_empirical, cov_error_noise_floor, theta_hat, standard_errors,
    calibration_ks and pit (with --true-theta), health (as in `sgtune run`; its
    prediction_check compares the chains with predicted_cov within 5 % and Monte Carlo error),
    applicability. -o writes Λ.
    Non-Gaussian posteriors (every model but linear) add ksd, ksd_n_samples and
    ksd_iid_reference: the kernel Stein discrepancy of the chains against p(θ|𝒟) (see `sgtune ksd`).
    --repeat R > 1 adds repetitions (one entry per seed SEED+i: seed, cov_error_predicted,
    cov_error_empirical, cov_error_noise_floor[, calibration_ks]) and repetition_summary (mean and
    standard deviation over the R of the empirical error[, and of the KS distance]); the other keys
    are repetition 0's. --scheduler ADDRESS|local maps the repetitions over a Dask cluster (the workers
    read DATA themselves: give a path they can see) and streams out-of-core DATA's reductions there.
    --plot FILE.png: target / predicted / empirical covariance ellipses, Λ, and the PIT histogram.
    """
    check_plot(kw)
    # calibrate fits and subsamples itself (Alg. 1 steps 1–5): load the data, model and prior only
    if kw.get("theta_hat"):
        raise click.BadParameter(f"calibrate fits θ̂ itself (Algorithm 1, on --subsample rows), so it cannot "
                                 f"expand at {kw['theta_hat']}; drop --theta-hat, or use `sgtune verify "
                                 f"--theta-hat` to check a Λ at given weights", param_hint="--theta-hat")
    check_writable(kw["output"], bool(kw["overwrite"]), "--output")
    check_writable(kw["json_path"], bool(kw["overwrite"]), "--json")
    prob, B, beta = _load(kw)
    target = kw["target"] if kw["target"] in ("sandwich", "posterior") else load_npy(kw["target"], "--target")
    theta_star = load_npy(kw["true_theta"], "--true-theta") if kw["true_theta"] else None
    if kw["chains"] < 1:
        raise click.BadParameter(f"must be >= 1, got {kw['chains']}", param_hint="--chains")
    if kw["repeat"] < 1:
        raise click.BadParameter(f"must be >= 1, got {kw['repeat']}", param_hint="--repeat")
    state = {"last": 0}
    with progress_bar(kw["quiet"], "calibrate", 1) as bar:
        def progress(done: int, total: int) -> None:
            bar.length = total
            bar.update(done - state["last"])
            state["last"] = done

        r = _calibrate(kw, prob, B, beta, target, theta_star, int(kw["seed"]), progress=progress,
                       keep_draws=0 if posterior_is_gaussian(prob.model) else CHAIN_KSD_MAX_DRAWS,
                       scheduler=None if kw["repeat"] > 1 else kw.get("scheduler"))
    doc = _document(kw, prob, r, B, beta, target, theta_star)
    t, c, n = r.tuning, r.chains, prob.dataset.n_data
    png = render_plot(kw, lambda: figure_calibrate(
        t.target_cov, t.predicted_cov, c.cov, t.step_matrix, pit=r.pit, ks=r.calibration_ks, names=r.parameter_names,
        title=f"sgtune calibrate: {prob.model.name}, N = {n}, B = {B}, target {kw['target']} — covariance error "
              f"{r.cov_error_predicted:.2g} predicted, {r.cov_error_empirical:.2g} empirical "
              f"(noise floor {r.cov_error_noise_floor:.2g})" + (f", KSD = {doc['ksd']:.3g}" if "ksd" in doc else "")))
    emit(doc, kw["json_path"], arrays={kw["output"]: t.step_matrix})
    write_plot(kw, png)
    floor = r.cov_error_noise_floor
    rows: list[tuple[str, object]] = [
        ("method", t.method),
        ("cov error (predicted)", f"{r.cov_error_predicted:.3g} (the tuned chain's covariance vs the target; "
                                  "0 is exact)"),
        ("cov error (empirical)", f"{r.cov_error_empirical:.3g} vs {floor:.2g}, what Monte Carlo noise alone gives "
                                  "(a perfect Λ scores about that)"),
        *ks_row(r.calibration_ks, 0 if r.pit is None else int(np.size(r.pit))),
        *ksd_row(doc),
        health_row(doc["health"]),
        *applicability_rows(doc["applicability"], t.tau_worst)]
    after = next_line("run", "--lambda", str(kw["output"] or "lambda.npy"), "-o", "trace.npz")
    info(coordinate_table(r.summary()) + "\n" + key_values(rows) + "\n"
         + (after if kw["output"] else f"{after} (with -o lambda.npy here to save Λ)"), kw["quiet"])


def _calibrate(kw: dict[str, Any], prob: Any, B: int, beta: float, target: Any, theta_star: Any, seed: int,
               **extra: Any) -> Any:
    """:func:`sgtune.workflows.calibrate.calibrate` with the command's options (repetition ``seed``)."""
    dynamics = Dynamics(None, B, inv_temperature=beta, momentum=float(kw["momentum"]),
                        batching="without-replacement" if kw["without_replacement"] else "replacement")
    run = RunOptions(n_steps=kw["steps"], burn_in=kw["burn_in"], n_chains=int(kw["chains"]), seed=seed)
    return calibrate(prob.model, prob.dataset, dynamics, run,
                     tuning=TuneOptions(target=target, method=kw["method"], family=kw["family"]),
                     prior_precision=prob.prior_precision, subsample=kw["subsample"], true_theta=theta_star, **extra)


def _document(kw: dict[str, Any], prob: Any, r: Any, B: int, beta: float, target: Any,
              theta_star: Any) -> dict[str, Any]:
    """The JSON document: the result, health, repetitions, KSD and the applicability report."""
    t, c, n = r.tuning, r.chains, prob.dataset.n_data
    doc: dict[str, Any] = {
        **expansion_keys(r.expansion), "lambda": t.step_matrix, "target_cov": t.target_cov, "predicted_cov": t.predicted_cov,
        "empirical_cov": c.cov, "empirical_cov_standard_error": c.cov_standard_error,
        "cov_error_predicted": r.cov_error_predicted, "cov_error_empirical": r.cov_error_empirical,
        "cov_error_noise_floor": r.cov_error_noise_floor, "theta_hat": r.expansion.theta_hat,
        "standard_errors": r.standard_errors, "method": t.method, "family": t.family, "residual": t.residual,
        "spectral_radius": t.spectral_radius, "tau_worst": t.tau_worst, "steps": r.n_steps, "burn_in": r.burn_in,
        "chains": kw["chains"], "batch_size": B, "inverse_temperature": temperature_json(beta),
        "subsample": kw["subsample"] if kw["subsample"] is not None else n, "seed": kw["seed"],
        "model": prob.model.name, "data": prob.dataset.source, "command": command_line(),
        "references": references_of(calibrate),
    }
    doc["health"] = health_report(c, check=prediction_check(c, t.predicted_cov, mode="covariance"))
    if r.calibration_ks is not None:
        doc["calibration_ks"] = r.calibration_ks
        doc["pit"] = r.pit
    if kw["repeat"] > 1:
        from ..io.reduce import map_tasks

        task_kw = {k: v for k, v in kw.items() if k not in ("json_path", "output", "plot")}
        rest = map_tasks(_repetition, [(task_kw, kw["seed"] + i, target, theta_star)
                                       for i in range(1, kw["repeat"])], kw.get("scheduler"))
        reps = [_summary(r, kw["seed"]), *rest]
        doc["repetitions"] = reps
        doc["repetition_summary"] = _repetition_summary(reps)
    with slow_stage("KSD: scoring the draws against the posterior"):
        doc.update(chain_ksd_summary(prob.model, prob.dataset.X, prob.dataset.y, c, prob.prior_precision))
    doc["applicability"] = skipped_report("--no-applicability") if kw["no_applicability"] else applicability_report(
        SimpleNamespace(model=prob.model, dataset=prob.dataset, expansion=r.expansion, dim=r.expansion.dim),
        t.stationary, target_cov=t.target_cov, backward_error=t.residual, seed=int(kw["seed"]))
    _measured_verdict(doc["applicability"], doc["health"].get("prediction_check"), r.expansion.n_samples, n)
    return doc


def _measured_verdict(app: dict[str, Any], check: dict[str, Any] | None, rows_fitted: int, n_data: int) -> None:
    """A verdict of "applicable" that the chains themselves contradict is withdrawn (in place).

    "Applicable" means the chain that runs has about the predicted covariance; the report checks the linearised
    chain on the rows the expansion was fitted on, and cannot see inputs that are off for the rows the chains run
    on. When the health report's prediction check of the real chains failed, the result is not applicable (reason
    code ``chains-disagree``), and the warning says so (stderr and JSON; ``--strict`` exits 4).
    """
    if not app.get("checked", True) or not app.get("applicable") or check is None or check.get("passed", True):
        return
    why = (f"the chains that ran disagree with the prediction (max |z| = {check['z_max']:.3g} > "
           f"{check['threshold']:.3g}, relative error {check['relative_frobenius_error']:.2g}; health "
           "prediction_check), although the checks of the linearised chain passed: the prediction's inputs are off")
    if rows_fitted < n_data:
        why += (f"; the expansion was fitted on --subsample {rows_fitted} of the {n_data} rows the chains run on: "
                "fit on more rows")
    app["applicable"] = False
    app["reasons"].append(why)
    app["reason_codes"].append("chains-disagree")
    app["reason_details"].append({"code": "chains-disagree", "message": why, "remedies": []})
    untrusted(f"not applicable: {why}")


def _summary(r: Any, seed: int) -> dict[str, Any]:
    out = {"seed": seed, "cov_error_predicted": r.cov_error_predicted, "cov_error_empirical": r.cov_error_empirical,
           "cov_error_noise_floor": r.cov_error_noise_floor}
    if r.calibration_ks is not None:
        out["calibration_ks"] = r.calibration_ks
    return out


def _load(kw: dict[str, Any]) -> tuple[Any, int, float]:
    """(problem: model, dataset, prior_precision; B; β) from the shared options, without fitting."""
    from ..models import model_dim

    ds, model = load_data_model(kw)
    gam = load_prior(kw, model_dim(model, ds.dim))
    B = check_batch_size(int(kw["batch_size"]), ds.n_data)
    beta = parse_inv_temperature(kw["inverse_temperature"], ds.n_data)
    return SimpleNamespace(model=model, dataset=ds, prior_precision=gam), B, beta


def _repetition(kw: dict[str, Any], seed: int, target: Any, theta_star: Any) -> dict[str, Any]:
    """One repetition of Algorithm 1 (a Dask task: loads DATA itself, returns only the summary numbers)."""
    prob, B, beta = _load(kw)
    return _summary(_calibrate(kw, prob, B, beta, target, theta_star, seed), seed)


def _repetition_summary(reps: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    out: dict[str, Any] = {"repetitions": len(reps)}
    for key in ("cov_error_empirical", "calibration_ks"):
        vals = np.array([r[key] for r in reps if key in r], dtype=float)
        if len(vals):
            out[f"{key}_mean"] = float(vals.mean())
            out[f"{key}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
    return out
