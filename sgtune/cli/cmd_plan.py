"""``sgtune plan``: the cheapest SG(L)D configuration and run length that meet a tolerance, before running."""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import click

from ..core._refs import references_of
from ..core.config import Dynamics
from ..core.errors import SgtuneError
from ..theory.mcerror import mc_error
from ..theory.stationary import predict_stationary_cov
from ..theory.tuning import FAMILIES, tune
from ..workflows.plan import (BATCHINGS, DEFAULT_BATCH_SIZES, OBJECTIVES, SECONDS_TIE, Plan, PlanGrid, TimingOptions,
                              plan_run)
from ._applicability import applicability_report, skipped_report
from ._io import atomic_write, check_writable, command_line, emit, handle_errors, info, untrusted
from ._options import data_argv, expansion_keys, json_output_options, load_float_npy, load_problem, \
    parse_inv_temperature, temperature_json
from ._shared_options import data_options
from ._plot import check_plot, render_plot, write_plot

#: above this D the applicability report is skipped unless --applicability asks for it
APPLICABILITY_MAX_DIM = 200
#: CSV columns (then the notes' extra columns, when any candidate has them)
CSV_COLUMNS = ("index", "recommended", "pareto", "batch_size", "family", "momentum", "batching",
               "inverse_temperature", "chains", "feasible", "covariance_error", "cov_mc_error_constant",
               "burn_in_steps", "steps", "gradient_evaluations", "predicted_seconds", "predicted_rms_error",
               "spectral_radius", "tau_worst", "seconds_per_step", "bounds", "approximate", "reason")


def _list(value: str, name: str) -> list[str]:
    out = [v.strip() for v in str(value).split(",") if v.strip()]
    if not out:
        raise click.UsageError(f"{name} needs at least one value (comma-separated)")
    return out


def _floats(value: str, name: str) -> list[float]:
    try:
        return [float(v) for v in _list(value, name)]
    except ValueError:
        raise click.UsageError(f"{name} must be comma-separated numbers, got {value!r}") from None


def _ints(value: str, name: str) -> list[int]:
    try:
        return [int(v) for v in _list(value, name)]
    except ValueError:
        raise click.UsageError(f"{name} must be comma-separated integers, got {value!r}") from None


@click.command("plan")
@data_options
@click.option("--target", default="sandwich", show_default=True,
              help="Target covariance Σ* of θ: 'sandwich' (J⁻¹𝓘J⁻¹/N), 'posterior' (H⁻¹/N) or a (D, D) .npy file.")
@click.option("--tolerance", type=float, required=True, metavar="E",
              help="Required RMS relative error of the run's covariance estimate, ‖Ŝ − Σ*‖_F/‖Σ*‖_F (e.g. 0.1).")
@click.option("--batch-sizes", default=None, metavar="B1,B2,…",
              help="Batch sizes to consider (default " + ",".join(map(str, DEFAULT_BATCH_SIZES)) + ", up to N).")
@click.option("--families", default="dense,diagonal,scalar", show_default=True,
              help="Step-size families: " + ", ".join(FAMILIES) + " (block needs a model with parameter blocks).")
@click.option("--momentum", "momenta", default="0", show_default=True, metavar="K1,K2,…",
              help="Heavy-ball momenta κ in [0, 1) to consider.")
@click.option("--batching", "batchings", default="replacement", show_default=True,
              help="Batching schemes: " + ", ".join(BATCHINGS) + " (reshuffle: Shaw & Whalley's (2025) Gaussian-case correction "
                   "of the without-replacement prediction; marked approximate).")
@click.option("--inverse-temperature", "inverse_temperatures", default="inf", show_default=True,
              help="β values: 'inf' (SGD), 'N', 'cN' or numbers, comma-separated.")
@click.option("--chains", type=click.IntRange(min=1), default=4, show_default=True,
              help="C independent chains (run in parallel); the error falls like 1/√(T·C).")
@click.option("--objective", type=click.Choice(OBJECTIVES), default="gradients", show_default=True,
              help="What 'recommended' minimises among the feasible candidates: gradient evaluations or the "
                   "predicted wall seconds on this machine (timed now: candidates within 50 % of the fastest count as "
                   "tied, and the one with the fewest steps among them is recommended).")
@click.option("--applicability/--no-applicability", "applicability", default=None,
              help="Check the recommended candidate's applicability (the report of sgtune lambda). Default: on up "
                   f"to D = {APPLICABILITY_MAX_DIM}, off above (it costs about as much as the whole plan at "
                   "D = 1000).")
@click.option("--no-timing", is_flag=True,
              help="Skip the short sampler runs that time a step (predicted_seconds is then 'inf').")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, metavar="PLAN.csv",
              help="Write the candidate table as CSV.")
@click.option("--lambda-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Write each feasible candidate's Λ to DIR/plan-lambda-<index>.npy ((D, D) dense, (D,) diagonal) so "
                   "that its run_argv runs as given (scalar candidates' run_argv need no file).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, metavar="FILE.png",
              help="Draw gradient evaluations and seconds against the batch size per family, the Pareto front "
                   "circled and the recommendation starred. Needs matplotlib: pip install 'sgtune[plot]'.")
@json_output_options
@handle_errors
def cli(**kw: Any) -> None:
    """Plan the cheapest run that estimates the target covariance within a tolerance.

    \b
    For each batch size B, family, momentum κ, batching and β of the grid, Λ is tuned to Σ* and, for
    the linearised chain, the plan computes the bias b = ‖Σ(Λ) − Σ*‖_F/‖Σ*‖_F, the Monte Carlo constant
    c = lim T·E‖Ŝ_T − Σ(Λ)‖²_F/‖Σ*‖²_F (Gaussian fourth moments), the burn-in (steps until every second
    moment is within 1 % of stationary) and the steps T = ⌈c/(C(E² − b²))⌉ so that the predicted RMS
    relative error √(b² + c/(T·C)) is E; cost = C·B·(burn-in + T) gradient evaluations.
    JSON keys: parameter_names (the name of each coordinate of θ, in θ order),
    candidates (each: batch_size, family, momentum, batching, inverse_temperature, chains,
    covariance_error, cov_mc_error_constant, burn_in_steps, steps (T, after burn-in; also as
    steps_after_burn_in), run_steps (burn-in + T: what `run --steps` takes), gradient_evaluations,
    predicted_seconds (a cost model of sgtune's sampler, calibrated on short timed runs),
    memory_bytes, feasible, reason when not (also: more than 10^12 steps, more memory than this
    machine has), predicted_rms_error, bounds, approximate, notes, run_argv: the `sgtune run`
    command that executes it, burn-in included ([] when infeasible; with run_argv_ready false
    when its Λ file needs --lambda-dir DIR)),
    recommended (index), lambda (its Λ), pareto_front, applicability (of the recommendation; with
    checked = false and no verdict when skipped above D = 200), …
    Numbers that do not exist for an infeasible candidate are the string "inf".
    Example:  sgtune plan --example logistic --tolerance 0.1 --plot plan.png -o plan.csv
    """
    check_writable(kw["output"], bool(kw["overwrite"]), "--output")
    check_writable(kw["json_path"], bool(kw["overwrite"]), "--json")
    if kw["lambda_dir"] is not None:
        Path(kw["lambda_dir"]).mkdir(parents=True, exist_ok=True)
    check_plot(kw)
    tol = kw["tolerance"]
    if not (tol > 0 and math.isfinite(tol)):
        raise SgtuneError(f"--tolerance must be a number > 0 (a relative RMS error such as 0.1), got {tol}")
    prob = load_problem(kw)
    n = prob.dataset.n_data
    bs = _ints(kw["batch_sizes"], "--batch-sizes") if kw["batch_sizes"] else None
    families = _list(kw["families"], "--families")
    momenta = _floats(kw["momenta"], "--momentum")
    batchings = _list(kw["batchings"], "--batching")
    betas = [parse_inv_temperature(v, n) for v in _list(kw["inverse_temperatures"], "--inverse-temperature")]
    target: Any = kw["target"]
    if target not in ("sandwich", "posterior"):
        target = load_float_npy(str(target), "--target")
    grid = PlanGrid(batch_sizes=bs, families=families, momenta=momenta, batchings=batchings,
                    inverse_temperatures=betas, chains=int(kw["chains"]))
    p = plan_run(prob.model, prob.dataset, prob.expansion, target=target, tolerance=tol, grid=grid,
                 objective=str(kw["objective"]), prior_precision=prob.prior_precision,
                 timing=TimingOptions(enabled=not kw["no_timing"], seed=int(kw["seed"])))
    rows = [c.to_dict() for c in p.candidates]
    lambda_files = _add_run_argv(rows, p, kw)
    front = p.pareto_front()
    table = _table(p, rows, front)
    if p.recommended is None:
        info(table, bool(kw["quiet"]))
        raise SgtuneError(_none_feasible(p.candidates, tol, families))
    best = p.candidates[p.recommended]
    check = kw["applicability"] if kw["applicability"] is not None else prob.dim <= APPLICABILITY_MAX_DIM
    if check:
        st = best.stationary
        if st is None:  # the large-D dense path skipped the forward solve: its Σ(Λ) is Σ* by construction
            dynamics = Dynamics(best.step_matrix, best.batch_size, inv_temperature=best.inverse_temperature,
                                momentum=best.momentum, batching=best.batching)
            st = predict_stationary_cov(prob.expansion, dynamics, initial_guess=p.target_cov, radius_bound=True)
        app: dict[str, Any] = applicability_report(prob, st, target_cov=p.target_cov, seed=int(kw["seed"]))
    else:
        why = ("--no-applicability" if kw["applicability"] is False
               else f"D = {prob.dim} > {APPLICABILITY_MAX_DIM}: the report evaluates the model dozens of times over all "
                    "rows; with --applicability it times one evaluation first and says how long it will take")
        app = skipped_report(why, "pass --applicability, or run sgtune covariance with the recommended Λ")
    if rows[p.recommended]["approximate"]:
        untrusted("the recommended candidate's bias and Monte Carlo constant are approximations "
                  f"({', '.join(rows[p.recommended]['approximate'])}); check them with sgtune verify")
    doc = {**expansion_keys(prob.expansion),
           "candidates": rows, "recommended": p.recommended, "recommended_candidate": rows[p.recommended],
           "lambda": best.step_matrix, "pareto_front": front, "tolerance": tol, "objective": p.objective,
           "seconds_meaning": SECONDS_MEANING, "seconds_tie": SECONDS_TIE,
           "chains": p.chains, "target": kw["target"], "target_cov": p.target_cov,
           "theta_hat": prob.expansion.theta_hat, "applicability": app,
           "batch_sizes": sorted({c.batch_size for c in p.candidates}), "families": families,
           "momentum": momenta, "batching": batchings,
           "inverse_temperature": [temperature_json(b) for b in betas],
           "tuning_seconds": p.tuning_seconds, "timing_seconds": p.timing_seconds,
           "n_data": n, "model": prob.model.name, "data": prob.dataset.source, "seed": kw["seed"],
           "command": command_line(),
           "references": references_of(tune) + references_of(mc_error) + references_of(predict_stationary_cov)}
    csv_text = _csv(rows, p.recommended, front) if kw["output"] else None
    png = render_plot(kw, lambda: _figure(rows, p, front, prob, tol))
    emit(doc, kw["json_path"], arrays=lambda_files)
    if csv_text is not None:
        atomic_write(kw["output"], lambda fh: fh.write(csv_text), "w")
    write_plot(kw, png)
    info(table, bool(kw["quiet"]))


#: what the plan's seconds are (the table's header line and the JSON's ``seconds_meaning``)
SECONDS_MEANING = (f"the predicted wall time of the whole run (all chains) with sgtune's own sampler on this machine "
                   f"(a cost per step and per run measured on short timed runs now, so it varies by 10–20 % "
                   f"with the machine's load); with --objective seconds, candidates within {SECONDS_TIE:.0%} of the "
                   f"fastest count as tied and the one with the fewest steps (the least per-step overhead) is recommended")


def _none_feasible(candidates: list[Any], tol: float, families: list[str]) -> str:
    """Why no candidate of the grid reaches ``--tolerance``: a bias at or above it (then a richer family helps,
    unless the dense family, whose bias is zero, is already in the grid), or, when some bias is below it,
    what stopped the best of those (a run over 10^12 steps, the memory, no stationary law)."""
    head = f"no candidate reaches --tolerance {tol:g}"
    biased = [c for c in candidates if math.isfinite(c.covariance_error)]
    if not biased:
        reasons = [c.reason for c in candidates if c.reason]
        return f"{head}: {reasons[0] if reasons else 'no candidate could be tuned'}"
    best = min(biased, key=lambda c: c.covariance_error)
    if best.covariance_error < tol:  # the bias fits: the run length, the memory or the chain itself does not
        below = [c for c in biased if c.covariance_error < tol and c.reason]
        pick = min(below, key=lambda c: c.run_steps if math.isfinite(c.run_steps) else math.inf, default=best)
        return (f"{head}: the smallest bias, {best.covariance_error:.3g} ({best.family} family), is below it, but "
                f"{pick.reason or 'the run is not feasible'}")
    fixes = ["loosen the tolerance"]
    if "dense" not in families:
        fixes.append("add dense to --families (its bias is zero)")
    fixes.append("or change the target")
    return (f"{head}: the smallest bias is {best.covariance_error:.3g} ({best.family} family, at any run length); "
            + ", ".join(fixes))


def _figure(rows: list[dict[str, Any]], p: Plan, front: list[int], prob: Any, tol: float) -> Any:
    from ..io.plan_plot import figure_plan

    return figure_plan(rows, recommended=p.recommended, front=front,
                       title=f"sgtune plan: {prob.model.name}, N = {prob.dataset.n_data}, D = {prob.dim}, "
                             f"tolerance {tol:g}, C = {p.chains} chains")


def _csv(rows: list[dict[str, Any]], recommended: int | None, front: list[int]) -> str:
    extras = sorted({k for r in rows for k in r if k not in CSV_COLUMNS and k not in ("notes", "run_argv")})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CSV_COLUMNS, *extras])
    for i, r in enumerate(rows):
        vals = {**r, "index": i, "recommended": int(i == recommended), "pareto": int(i in front),
                "bounds": ";".join(r["bounds"]), "approximate": ";".join(r["approximate"]),
                "reason": r.get("reason", "")}
        w.writerow([vals.get(k, "") for k in (*CSV_COLUMNS, *extras)])
    return buf.getvalue()


def _fmt(x: Any, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def _short_reason(reason: str) -> str:
    if reason.startswith("bias"):
        return "bias ≥ E"
    if reason.startswith("no stable chain"):
        return "not reachable"
    if reason.startswith("reshuffle"):
        return "no RR theory"
    return reason[:24]


_BATCH = {"replacement": "with-repl", "without-replacement": "w/o-repl", "reshuffle": "reshuffle"}


def _table(p: Plan, rows: list[dict[str, Any]], front: list[int]) -> str:
    head = (f"{'':2}{'#':>3} {'B':>5} {'family':<8} {'κ':>4} {'batching':<10} {'β':>7} {'bias':>8} {'c':>9} "
            f"{'burn-in':>8} {'steps T':>9} {'gradients':>11} {'seconds':>8}  note")
    lines = [f"plan: tolerance E = {p.tolerance:g} (RMS relative error of the covariance), C = {p.chains} chains, "
             f"objective {p.objective}", f"seconds: {SECONDS_MEANING}", head]
    for i, r in enumerate(rows):
        mark = "*" if i == p.recommended else ("+" if i in front else " ")
        beta = r["inverse_temperature"]
        note = "" if r["feasible"] else _short_reason(r.get("reason", ""))
        if r["bounds"]:
            note = (note + " ≤burn-in").strip()
        if r["approximate"]:
            note = (note + " ~approx").strip()
        lines.append(
            f"{mark:2}{i:>3} {r['batch_size']:>5} {r['family']:<8} {r['momentum']:>4g} {_BATCH[r['batching']]:<10} "
            f"{_fmt(beta, '7.3g'):>7} {_fmt(r['covariance_error'], '8.2g'):>8} "
            f"{_fmt(r['cov_mc_error_constant'], '9.4g'):>9} {_fmt(r['burn_in_steps'], 'd'):>8} "
            f"{_fmt(r['steps'], 'd'):>9} {_fmt(r['gradient_evaluations'], '11.4g'):>11} "
            f"{_fmt(r['predicted_seconds'], '8.3g'):>8}  {note}")
    if p.recommended is not None:
        r = rows[p.recommended]
        lines.append(f"* recommended: #{p.recommended}, B = {r['batch_size']}, {r['family']}, κ = {r['momentum']:g}, "
                     f"{r['batching']}, {_run_summary(r)}; + Pareto front (gradients vs seconds)")
        for note in p.candidates[p.recommended].notes:
            lines.append(f"  note ({note['source'].split(':')[0]}): {note['text']}")
    return "\n".join(lines)


def _run_summary(r: dict[str, Any]) -> str:
    return (f"{r['chains']} chains × ({r['burn_in_steps']} burn-in + {r['steps']} steps) = "
            f"{_fmt(r['gradient_evaluations'], '.4g')} gradient evaluations, predicted RMS error "
            f"{_fmt(r['predicted_rms_error'], '.3g')}")


def _add_run_argv(rows: list[dict[str, Any]], p: Plan, kw: dict[str, Any]) -> dict[str | None, Any]:
    """Each candidate's ``run_argv`` (and ``run_argv_ready``); returns the Λ files to write (--lambda-dir)."""
    files: dict[str | None, Any] = {}
    base = ["sgtune", "run", *data_argv(kw)]
    for i, (c, row) in enumerate(zip(p.candidates, rows)):
        if not c.feasible or c.step_matrix is None:
            row["run_argv"], row["run_argv_ready"] = [], False
            continue
        argv = [*base, "--batch-size", str(c.batch_size)]
        if math.isfinite(c.inverse_temperature):
            argv += ["--inverse-temperature", repr(float(c.inverse_temperature))]
        if c.momentum:
            argv += ["--momentum", repr(float(c.momentum))]
        if c.batching != "replacement":
            argv += ["--batching", c.batching]
        ready = True
        if c.family == "scalar":
            argv += ["--step-size", repr(float(c.step_matrix.reshape(-1)[0]))]
        else:
            path = str(Path(kw["lambda_dir"] or ".") / f"plan-lambda-{i}.npy")
            argv += ["--lambda", path]
            if kw["lambda_dir"] is not None:
                check_writable(path, bool(kw["overwrite"]), "--lambda-dir")
                files[path] = c.step_matrix.diagonal().copy() if c.lam_kind == "diagonal" else c.step_matrix
            else:
                ready = False
        spec = c.run_spec(seed=int(kw["seed"]))
        argv += ["--steps", str(spec.n_steps), "--burn-in", str(spec.burn_in), "--chains", str(spec.n_chains),
                 "--seed", str(spec.seed)]
        row["run_argv"], row["run_argv_ready"] = argv, ready
    return files
