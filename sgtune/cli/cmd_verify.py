"""``sgtune verify``: predict the stationary covariance, run the chains, compare within Monte Carlo error."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import click
import numpy as np

from ..core._refs import references_of
from ..diagnostics.ksd import CHAIN_KSD_MAX_DRAWS, chain_ksd_summary, posterior_is_gaussian
from ..io.plots import figure_verify
from ..sampler.registry import SAMPLERS as SAMPLER_SPECS
from ..core.config import Dynamics
from ..workflows.run_length import RunOptions
from ..workflows.verify import CheckOptions, TuneOptions, verify_stationary_cov
from ..theory.tuning import FAMILIES, METHODS
from ._against import Against, against_option, resolve_against
from ._health import health_report
from ._io import EXIT_VERIFY_FAILED, check_writable, command_line, emit, handle_errors, info, slow_stage
from ._options import expansion_keys, check_batch_size, load_npy, load_problem, output_options, temperature_json
from ._shared_options import batch_options, data_options
from ._plot import check_plot, plot_option, render_plot, write_plot
from ._readable import health_row, ksd_row, next_line
from ._render import coordinate_table, key_values
from .cmd_run import (step_arguments, chain_json, chain_options, progress_bar, resolve_step, sampler_options, sampler_temperature,
                      sampler_settings, smile_json, step_options)


@click.command("verify")
@data_options
@batch_options
@click.option("--target", default=None,
              help="Tune Λ first (like `sgtune lambda`): 'sandwich', 'posterior' or a (D, D) .npy file.")
@click.option("--method", type=click.Choice(METHODS), default=None, help="Tuning method (default dq-exact).")
@click.option("--family", type=click.Choice(FAMILIES), default=None, help="Tuning family (default dense).")
@step_options
@sampler_options
@chain_options
@click.option("--alpha", type=float, default=1e-3, show_default=True,
              help="Family-wise level: reject when max|z| exceeds the Bonferroni t-quantile 1 − α/(2k).")
@click.option("--relative-tolerance", type=float, default=None,
              help="Allowed model error r, added in quadrature: se² + (r·sqrt(Σ_ii Σ_jj))² "
                   "(e.g. for the O(λ/B) proxy error of logistic/Poisson). Default 0, or the "
                   "expected_cov_tolerance of the Λ's JSON sidecar when comparing with its target.")
@against_option
@click.option("--inflate-prediction", type=float, default=1.0, show_default=True,
              help="Multiply the prediction by F (a deliberately wrong prediction must be rejected).")
@output_options
@plot_option
@handle_errors
def cli(**kw: Any) -> None:
    """Check a stationary-covariance prediction against the chains it is about; exit 3 if rejected.

    \b
    Modes: `lambda` options (--target/--method/--family, the default) tune Λ first and test
    the tuned chain's predicted covariance; `covariance` options (--step-size L | --lambda
    FILE.npy) test the forward prediction for that Λ. The chains start at θ̂.
    Test: z_ij = (Σ̂_ij − Σ_ij)/se_ij over i ≤ j (batch-means se, K batches); pass when
    max|z| ≤ t_{K−1}(1 − α/(2k)), k = D(D+1)/2 (Bonferroni). Each batch is at least 10
    predicted autocorrelation times long (shorter ones make se too small and reject correct
    chains): a larger --batches-per-chain is refused (exit 2) with the most the run allows. Default run length
    T = max(20000, 1000·τ_worst); burn-in (also with --steps) the largest of T/10, 20·τ_worst
    and the equilibration steps of the second-moment map, at most T/2.
    --against prediction|target|FILE.npy: what the chains are tested against (default: the
    prediction; with --lambda LAM.npy whose JSON sidecar LAM.json comes from
    `sgtune lambda --refine`, the target the refined chain measured within
    expected_cov_tolerance, which is then the default --relative-tolerance). JSON keys: parameter_names (the name of each
    coordinate of θ, in θ order), predicted (the linearised prediction), compared_with (what
    was tested), against, against_source, empirical, z_max, passed, threshold, lambda, health, ...
    health (as in `sgtune run`, its prediction_check is this test): diverged, frozen and
    non-stationary chains are reported even when the test passes.
    Non-Gaussian posteriors (every model but linear) add ksd: the kernel Stein discrepancy
    (IMQ, as `sgtune ksd`) of ≤ 2000 thinned draws (fewer when N > 10⁴) against
    p(θ|𝒟) ∝ exp(−N·L), with ksd_n_samples and ksd_iid_reference (≈ what independent
    posterior draws score); it sees non-Gaussian shape errors the covariance test cannot
    (it does not change `passed`).
    --sampler sghmc|smile-naive|psmile-naive|smile|psmile (with --step-size): mode
    `posterior`, the prediction is the posterior covariance (βH)⁻¹ at θ̂ (β = N by default;
    exact for linear regression, Laplace otherwise); SMILE runs add step_size_final,
    rejection_fraction, energy_error_mean, ...
    --plot FILE.png: predicted (and target) vs empirical covariance ellipses and Λ.
    Example:  sgtune verify --example hetero-linear --batch-size 64 --plot verify.png
    """
    if str(kw.get("lambda_path") or "").lower().endswith(".npz"):  # kronecker family: torch chains, probes
        from ._kronecker_verify import verify_kronecker
        return verify_kronecker(kw)
    check_plot(kw)
    check_writable(kw["output"], bool(kw["overwrite"]), "--output")
    check_writable(kw["json_path"], bool(kw["overwrite"]), "--json")
    covariance_mode = kw["step_size"] is not None or kw["lambda_path"] is not None
    if covariance_mode and any(kw[k] is not None for k in ("target", "method", "family")):
        raise click.UsageError("give either the lambda options (--target/--method/--family) or "
                               "the covariance options (--step-size | --lambda), not both")
    prob = load_problem(kw)
    setup = _setup(kw, prob, covariance_mode)
    rep = _verify(kw, prob, setup)
    t = rep.test
    doc = _document(kw, prob, setup, rep)
    png = render_plot(kw, lambda: figure_verify(
        rep.compared_with, rep.empirical, rep.step_matrix,
        target_cov=None if rep.tuning is None else rep.tuning.target_cov,
        names=rep.parameter_names,
        title=f"sgtune verify: {prob.model.name}, B = {setup.B}, {rep.chains.n_chains}×{rep.chains.n_steps} steps — "
              f"{'PASSED' if t.passed else 'REJECTED'} (max|z| = {t.z_max:.2f} vs {t.threshold:.2f})"
              + (f", KSD = {doc['ksd']:.3g}" if "ksd" in doc else "")))
    emit(doc, kw["json_path"], arrays={kw["output"]: rep.empirical})
    write_plot(kw, png)
    info(coordinate_table(rep.summary()) + "\n" + key_values(_rows(rep, setup.against, doc)) + "\n"
         + _next(kw, t.passed, covariance_mode), bool(kw["quiet"]))
    if not t.passed:
        raise click.exceptions.Exit(EXIT_VERIFY_FAILED)


def _setup(kw: dict[str, Any], prob: Any, covariance_mode: bool) -> SimpleNamespace:
    """The chain (Dynamics), the tuning (lambda mode), what is compared and the test, from the options."""
    n, d = prob.dataset.n_data, prob.dim
    B = check_batch_size(int(kw["batch_size"]), n)
    beta = sampler_temperature(kw, str(kw["sampler"]), n)
    step = resolve_step(kw, d) if covariance_mode else None
    tuning: TuneOptions | None = None
    if not covariance_mode:
        target = kw["target"] or "sandwich"
        if target not in ("sandwich", "posterior"):
            target = load_npy(str(target), "--target")
        tuning = TuneOptions(target=target, method=kw["method"] or "dq-exact", family=kw["family"] or "dense")
    if covariance_mode:
        ag = resolve_against(kw["against"], dim=d, lambda_path=kw["lambda_path"], lam=step, quiet=bool(kw["quiet"]))
        against: Any = "prediction" if ag.cov is None else ag.cov
    elif kw["against"] == "target":  # Λ is tuned here: the tuning's own target
        ag, against = Against("target", None, 0.0, "tuning"), "target"
    elif kw["against"] in (None, "prediction"):
        ag, against = Against("prediction"), "prediction"
    else:
        ag = resolve_against(kw["against"], dim=d)
        against = ag.cov
    rel_tol = ag.tolerance if kw["relative_tolerance"] is None else float(kw["relative_tolerance"])
    if not (rel_tol >= 0 and np.isfinite(rel_tol)):
        raise click.BadParameter(f"must be a finite number >= 0, got {rel_tol}", param_hint="'--relative-tolerance'")
    dynamics = Dynamics(step, B, inv_temperature=beta, momentum=float(kw["momentum"]),
                        batching="without-replacement" if kw["without_replacement"] else "replacement")
    check = CheckOptions(alpha=float(kw["alpha"]), relative_tolerance=rel_tol,
                         inflate_prediction=float(kw["inflate_prediction"]), against=against)
    run = RunOptions(n_steps=kw["steps"], burn_in=kw["burn_in"], n_chains=int(kw["chains"]),
                     batches_per_chain=kw["batches_per_chain"], seed=int(kw["seed"]))
    return SimpleNamespace(B=B, beta=beta, step=step, dynamics=dynamics, tuning=tuning, against=ag, check=check,
                           run=run)


def _verify(kw: dict[str, Any], prob: Any, setup: SimpleNamespace) -> Any:
    """The verification, with a progress bar on stderr (none with -q)."""
    quiet = bool(kw["quiet"])
    state = {"last": 0}
    with progress_bar(quiet, "verify: running chains", 1000, kind=str(prob.model.name)) as bar:
        def progress(done: int, total: int) -> None:
            frac = int(1000 * done / total)
            bar.update(frac - state["last"])
            state["last"] = frac

        return verify_stationary_cov(
            prob.model, prob.dataset, prob.expansion, setup.dynamics, setup.run, tuning=setup.tuning,
            check=setup.check, sampler=sampler_settings(kw, str(kw["sampler"])),
            prior_precision=prob.prior_precision, progress=None if quiet else progress,
            keep_draws=0 if posterior_is_gaussian(prob.model) else CHAIN_KSD_MAX_DRAWS)


def _document(kw: dict[str, Any], prob: Any, setup: SimpleNamespace, rep: Any) -> dict[str, Any]:
    """The JSON document (KSD and health included)."""
    t, ag = rep.test, setup.against
    n, d = prob.dataset.n_data, prob.dim
    doc = {**expansion_keys(prob.expansion),
        "predicted": rep.predicted, "empirical": rep.empirical, "z_max": t.z_max, "passed": t.passed,
        "threshold": t.threshold, "argmax": list(t.argmax), "n_tests": t.n_tests, "dof": t.dof, "alpha": t.alpha,
        "relative_tolerance": t.relative_tolerance, "relative_frobenius_error": t.relative_frobenius_error,
        "inflate_prediction": float(kw["inflate_prediction"]), "mode": rep.mode, "lambda": rep.step_matrix,
        **ag.to_dict(), "compared_with": rep.compared_with,
        **({} if rep.mode == "posterior" else {"spectral_radius": rep.stationary.spectral_radius,
                                               "tau_worst": rep.stationary.tau_worst}),
        "theta_hat": prob.expansion.theta_hat, **chain_json(rep.chains),
        "batch_size": setup.B, "n_data": n, "dim": d, "inverse_temperature": temperature_json(setup.beta),
        "momentum": float(kw["momentum"]), "without_replacement": bool(kw["without_replacement"]),
        "model": prob.model.name, "seed": int(kw["seed"]), "data": prob.dataset.source,
        "command": command_line(), "references": references_of(verify_stationary_cov),
        "sampler": kw["sampler"], **smile_json(rep.chains),
    }
    if rep.tuning is not None:
        doc.update({"target_cov": rep.tuning.target_cov, "method": rep.tuning.method, "family": rep.tuning.family,
                    "target": kw["target"] or "sandwich"})
    with slow_stage("KSD: scoring the draws against the posterior"):
        doc.update(chain_ksd_summary(prob.model, prob.dataset.X, prob.dataset.y, rep.chains, prob.prior_precision))
    doc["health"] = health_report(
        rep.chains, initial_step_size=setup.step if SAMPLER_SPECS[kw["sampler"]].mclmc else None,
        check={"mode": rep.mode if ag.label == "prediction" else ag.label, "passed": t.passed, "z_max": t.z_max,
               "threshold": t.threshold, "argmax": list(t.argmax), "alpha": t.alpha,
               "relative_tolerance": t.relative_tolerance, "relative_frobenius_error": t.relative_frobenius_error})
    return doc


def _rows(rep: Any, ag: Against, doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """The summary rows under the coordinate table."""
    c, t = rep.chains, rep.test
    return [
        ("mode", rep.mode),
        ("compared with", ag.label if ag.source in ("prediction", "tuning") else f"{ag.label} ({ag.source})"),
        ("chains × steps", f"{c.n_chains} × {c.n_steps} (burn-in {c.burn_in}; standard errors from K = "
                           f"{c.n_batches} batch means in all, {c.n_batches // max(c.n_chains, 1)} per chain)"),
        ("max |z|", f"{t.z_max:.3g} vs threshold {t.threshold:.3g} (the largest covariance entry's distance from "
                    f"what it is compared with, in standard errors; passes at or below the threshold)"),
        ("relative error", f"{t.relative_frobenius_error:.3g} (‖empirical − compared‖/‖compared‖, Frobenius; "
                           "includes Monte Carlo noise)"),
        *ksd_row(doc),
        health_row(doc["health"]),
        ("applicable", "tested directly: these are the real chains, not the linearised one"),
        ("verdict", "PASSED" if t.passed else "REJECTED: the chains do not have the expected covariance")]


def _next(kw: dict[str, Any], passed: bool, covariance_mode: bool) -> str:
    """Passed: run the chains (a Λ tuned here is saved by lambda first); rejected: correct Λ on chains."""
    same = [a for k, opt in (("target", "--target"), ("method", "--method"), ("family", "--family"))
            for a in ((opt, str(kw[k])) if kw.get(k) is not None else ())]
    if not passed:  # the options the result was computed with (a dropped --target tunes another target)
        return next_line("lambda", *([] if covariance_mode else same), "--refine", "2", "-o", "lambda.npy")
    if covariance_mode:
        return next_line("run", *step_arguments(kw), "-o", "trace.npz")
    return next_line("lambda", *same, "-o", "lambda.npy") + " (then sgtune run … --lambda lambda.npy)"
