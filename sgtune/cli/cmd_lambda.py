"""``sgtune lambda``: the step-size matrix Λ that makes SGD/SGLD's stationary covariance a target."""
from __future__ import annotations

import math
import shlex
from typing import Any

import click
import numpy as np

from ..core._refs import references_of
from ..core.config import Dynamics
from ..core.reasons import Reason, Remedy
from ..io.plots import figure_lambda
from ..theory.tuning import FAMILIES, MAX_FAMILY_ERROR, METHODS, family_error_warning, tune
from ._applicability import applicability_report, skipped_report
from ._io import command_line, emit, handle_errors, info, untrusted
from ._remedies import as_text, first_checked, render
from ._options import (applicability_option, expansion_keys, load_batch_problem, load_npy, output_options,
                       temperature_json)
from ._shared_options import batch_options, data_options
from ._plot import check_plot, plot_option, render_plot, write_plot
from ._readable import applicability_rows, next_line
from ._render import coordinate_table, key_values, matrix_summary


@click.command("lambda")
@data_options
@batch_options
@click.option("--target", default="sandwich", show_default=True,
              help="Target covariance of θ: 'sandwich' (J⁻¹𝓘J⁻¹/N), 'posterior' (H⁻¹/N) or a (D, D) .npy file.")
@click.option("--method", type=click.Choice(METHODS), default="dq-exact", show_default=True,
              help="dq-exact (Wang, Ding & Huggins (2026), exact), ct (continuous time), dq-const, lr-ws (comparison theories).")
@click.option("--family", type=click.Choice((*FAMILIES, "kronecker")), default="dense", show_default=True,
              help="Shape of Λ; kronecker: per layer M ⊗ A⁻¹ for a network (--model mlp or net.py:NET; -o FILE.npz, "
                   "JSON key layers; no D×D matrix); scalar/diagonal/block minimise ‖Σ*^{-1/2}Σ(Λ)Σ*^{-1/2} − I‖_F up to D = 300 and "
                   "above it return the closed form solving the family's part of eq. (11) (with --momentum: of the "
                   "reduced momentum equation); "
                   "the JSON's criterion says which (dq-exact only).")
@click.option("--kronecker-prior", type=click.Choice(("damped", "eigenbasis")), default="damped", show_default=True,
              help="--family kronecker: the prior as factored damping of A and G, or exactly in their joint eigenbasis "
                   "(laplace-torch's KronLaplace; Λ diagonal there). docs/guide/kronecker.md.")
@click.option("--blocks", "blocks", default=None, metavar="FILE.json",
              help="For --family block: JSON list of lists of 0-based parameter indices, e.g. [[0,1],[2,3,4]], "
                   "covering every parameter once.")
@click.option("--refine", "refine_rounds", type=click.IntRange(min=1), default=None, metavar="ROUNDS",
              help="Correct Λ on short chains (up to ROUNDS rounds) until the chain's covariance matches the target "
                   "within Monte Carlo error; JSON key refine (one entry per round). Not done when the spread is "
                   "not local.")
@applicability_option
@output_options
@plot_option
@handle_errors
def cli(**kw: object) -> None:
    """Tune Λ so the stationary covariance of SG(L)D equals the target (Algorithm 1 of Wang, Ding & Huggins (2026)).

    \b
    Update: θ ← θ − Λ[(1/B)Σ_{n∈batch} ∇l_n(θ) + Γθ/N] + sqrt(2Λ/β) ξ  (mean loss).
    JSON keys: parameter_names (the name of each coordinate of θ, in θ order),
    lambda, target_cov, predicted_cov, theta_hat, spectral_radius (an upper bound when
    spectral_radius_is_bound: state dimension > 150, a scalar/diagonal/block family above D = 20, or
    data read out of core),
    tau_worst, tau, tau_spectral (Prop. 4.4; without momentum), method, residual,
    covariance_error (‖predicted − target‖_F/‖target‖_F, every family; after --refine the
    chains' ‖Σ̂ − target‖_F/‖target‖_F, a Monte Carlo estimate: covariance_error_source says
    which, covariance_error_noise_floor its Monte Carlo floor), predicted_covariance_error
    (always the linearised prediction's), expects ('prediction', or 'target' after --refine)
    with expected_cov (the covariance the chain with this Λ is expected to have) and
    expected_cov_tolerance (entry-wise, relative to √(Σ_ii Σ_jj), what the chains measured),
    family, criterion (what the family minimises or solves), blocks (with --family block),
    applicability (applicable, reasons, reason_codes, remedies — each {why, argv}: the full command
    that applies it —, divergence_risk, ...), ...
    Save the JSON next to Λ (-o LAM.npy --json LAM.json): `run`/`verify --lambda LAM.npy`
    then compare their chains with expected_cov by default (--against).
    --plot FILE.png: target vs predicted covariance ellipses and Λ as a heat map.
    Example:  sgtune lambda --example hetero-linear --batch-size 64 --plot lambda.png
    """
    if kw["family"] == "kronecker":
        from ._kronecker import lambda_kronecker

        return lambda_kronecker(kw)
    if str(kw["output"] or "").endswith(".npz"):
        raise click.BadParameter("an .npz file holds the per-layer factors of --family kronecker; Λ of family "
                                 f"{kw['family']} is a .npy array: name it e.g. lambda.npy", param_hint="'-o/--output'")
    check_plot(kw)  # type: ignore[arg-type]
    if kw["no_applicability"] and kw["refine_rounds"] is not None:
        raise click.UsageError("--refine decides from the applicability report whether chains can correct Λ; "
                               "drop --no-applicability (or --refine)")
    prob, B, beta = load_batch_problem(kw)
    target = kw["target"]
    if target not in ("sandwich", "posterior"):
        target = load_npy(str(target), "--target")
    dynamics = Dynamics(None, B, inv_temperature=beta, momentum=float(kw["momentum"]),  # type: ignore[arg-type]
                        batching="without-replacement" if kw["without_replacement"] else "replacement")
    res = tune(prob.expansion, dynamics, target=target, method=str(kw["method"]), family=str(kw["family"]),
               blocks=kw["blocks"])
    misses = family_error_warning(res.family, res.covariance_error)
    if misses is not None:  # the library warned; the result is not what was asked for (--strict exits 4)
        untrusted(misses)
    doc = {**expansion_keys(prob.expansion),
        "lambda": res.step_matrix, "target_cov": res.target_cov, "predicted_cov": res.predicted_cov,
        "theta_hat": prob.expansion.theta_hat, "spectral_radius": res.spectral_radius,
        "spectral_radius_is_bound": res.stationary.spectral_radius_is_bound,
        "tau_worst": res.tau_worst, "tau": res.tau,         "method": res.method, "family": res.family, "criterion": res.criterion, "residual": res.residual,
        "covariance_error": res.covariance_error, "covariance_error_source": "prediction",
        "family_misses_target": misses is not None, "family_error_threshold": MAX_FAMILY_ERROR,
        "predicted_covariance_error": res.covariance_error, "expects": "prediction",
        "expected_cov": res.predicted_cov, "expected_cov_tolerance": 0.0, "batch_size": B, "n_data": prob.dataset.n_data, "dim": prob.dim,
        "inverse_temperature": temperature_json(beta), "momentum": res.momentum,
        "without_replacement": res.without_replacement, "model": prob.model.name,
        "target": kw["target"], "seed": kw["seed"], "data": prob.dataset.source,
        "command": command_line(), "references": references_of(tune),
    }
    if kw["refine_rounds"] is not None:
        res, doc = _refine(prob, res, doc, int(kw["refine_rounds"]), int(kw["seed"]))  # type: ignore[arg-type]
    elif kw["no_applicability"]:
        doc["applicability"] = skipped_report("--no-applicability")
    else:
        doc["applicability"] = applicability_report(prob, res.stationary, target_cov=res.target_cov,
                                                    backward_error=res.residual, seed=int(kw["seed"]))  # type: ignore[arg-type]
    if kw["blocks"] is not None:
        doc["blocks"] = str(kw["blocks"])
    elif kw["family"] == "block" and prob.expansion.parameter_blocks is not None:  # the model's own (layers)
        doc["blocks"] = [list(b) for b in prob.expansion.parameter_blocks]
    if math.isfinite(res.stationary.tau_spectral):  # Prop. 4.4 value; defined without momentum only
        doc["tau_spectral"] = res.stationary.tau_spectral
    png = render_plot(kw, lambda: figure_lambda(  # type: ignore[arg-type]
        res.target_cov, res.predicted_cov, res.step_matrix, names=res.parameter_names,
        title=f"sgtune lambda: {prob.model.name}, N = {prob.dataset.n_data}, B = {B}, target {kw['target']}, "
              f"{res.method}/{res.family} (covariance error {res.covariance_error:.2g})"))
    emit(doc, kw["json_path"], arrays={kw["output"] or None: res.step_matrix})  # type: ignore[arg-type, dict-item]
    write_plot(kw, png)  # type: ignore[arg-type]
    info(coordinate_table(res.summary()) + "\n" + matrix_summary("Λ", res.step_matrix, names=res.parameter_names)
         + "\n" + key_values([
        ("method", res.method), ("family", res.family),
        ("residual", f"{res.residual:.3g} (of the tuning equation; 0 is solved exactly)"),
        ("covariance error", f"{res.covariance_error:.3g} (the tuned chain's covariance vs the target; 0 is exact)"
         + (f" — the {res.family} family MISSES the target (≥ {MAX_FAMILY_ERROR:g}, see the warning)" if misses else "")),
        ("spectral radius", f"{res.spectral_radius:.4g} (stable below 1; closer to 0 mixes faster)"),
        *applicability_rows(doc["applicability"], res.tau_worst)]) + "\n" + _next(kw, doc), bool(kw["quiet"]))


def _next(kw: dict[str, Any], doc: dict[str, Any] | None = None) -> str:
    """Verify the tuned Λ on real chains: with the saved Λ, else tuning again with the same options. Not under a
    result that does not apply (or whose family misses the target): then the first remedy sgtune checked, or
    a plain no."""
    app = (doc or {}).get("applicability") or {}
    if doc is not None and (app.get("applicable") is False or doc.get("family_misses_target")):
        argv = first_checked(app.get("remedies", []))
        if argv is not None:
            return "next: " + shlex.join(argv) + " (checked: its applicability report passes)"
        why = ("the prediction does not describe the chain on the loss" if app.get("applicable") is False
               else f"the {kw['family']} family misses the target")
        return (f"next: no command sgtune has checked — {why}; verifying these chains would only confirm it "
                "(see the warnings for what may help)")
    if kw["output"]:
        return next_line("verify", "--lambda", str(kw["output"]))
    same = [a for k, opt in (("target", "--target"), ("method", "--method"), ("family", "--family"))
            for a in ((opt, str(kw[k])) if kw[k] not in ("sandwich", "dq-exact", "dense") else ())]
    if kw.get("blocks"):  # verify tunes again but has no --blocks: save this Λ and verify that
        return (next_line("lambda", *same, "--blocks", str(kw["blocks"]), "-o", "lambda.npy")
                + " (then sgtune verify … --lambda lambda.npy)")
    return next_line("verify", *same)


def _refine(prob: Any, res: Any, doc: dict[str, Any], rounds: int, seed: int) -> tuple[Any, dict[str, Any]]:
    """``--refine``: chains correct Λ unless the spread is not local; the applicability follows the chains."""
    from ..workflows.refine import refine

    app = applicability_report(prob, res.stationary, target_cov=res.target_cov, backward_error=res.residual,
                               seed=seed, quiet_reasons=True)
    if any(code != "not-quadratic" for code in app["reason_codes"]):  # chains would not measure a fixed covariance
        doc["refine"] = []
        for detail in app["reason_details"]:
            untrusted("not applicable (--refine not run: the chain's covariance is no trustworthy measurement): "
                      f"{detail['message']}{as_text(detail['remedies'])}")
        doc["applicability"] = app
        return res, doc
    new, rounds_ = refine(prob.model, prob.dataset, prob.expansion, res, rounds=rounds,
                          prior_precision=prob.prior_precision, seed=seed)
    doc["refine"] = [r.to_dict() for r in rounds_]
    last = rounds_[-1]
    # the refined chain is meant to give the target, and the last round measured how close it comes: that is
    # what it expects and what covariance_error reports (a Monte Carlo estimate); the linearised prediction of
    # the refined Λ stays in predicted_cov / predicted_covariance_error (it is not what the chain gives)
    S = res.target_cov
    norm = float(np.linalg.norm(S))
    doc.update({"lambda": new.step_matrix, "predicted_cov": new.predicted_cov, "spectral_radius": new.spectral_radius,
                "tau_worst": new.tau_worst, "tau": new.tau, "residual": new.residual,
                "predicted_covariance_error": float(np.linalg.norm(new.predicted_cov - S) / norm),
                "covariance_error": float(np.linalg.norm(last.cov - S) / norm),
                "covariance_error_noise_floor": float(np.sqrt(np.sum(last.cov_standard_error ** 2)) / norm),
                "covariance_error_source": "chains", "empirical_cov": last.cov,
                "empirical_cov_standard_error": last.cov_standard_error,
                "expects": "target", "expected_cov": S, "expected_cov_tolerance": last.tolerance})
    app = applicability_report(prob, new.stationary, target_cov=res.target_cov, backward_error=new.residual,
                               seed=seed, quiet_reasons=True)
    if last.converged:
        app.update(applicable=True, reasons=[], reason_codes=[], reason_details=[], remedies=[],
                   verified_by_refine=True)
    else:
        why = Reason("not-quadratic", f"after {rounds} rounds of --refine the chain's covariance is still "
                     f"{last.error:.1%} (MCSE {last.mcse:.1%}) from the target",
                     (Remedy(f"{2 * rounds} rounds of refinement", {"refine_rounds": 2 * rounds}, expect="runs"),))
        detail = {**why.to_dict(), "remedies": render(why.remedies)}
        app.update(applicable=False, reasons=[why.message], reason_codes=[why.code], reason_details=[detail],
                   remedies=detail["remedies"], verified_by_refine=False)
        untrusted(f"not applicable: {why.message}{as_text(detail['remedies'])}")
    doc["applicability"] = app
    return new, doc
