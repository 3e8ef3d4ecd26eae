"""``sgtune run``: run numba SG(L)D / SGLRW / clipped-SGLD / SGHMC / SMILE chains from the MAP and summarise them."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Callable

import click
import numpy as np

from ..io._json import dumps
from ..core._refs import references_of
from ..core.errors import SgtuneError
from ..core.config import MAX_STEPS, Dynamics, RunSpec
from ..sampler import BATCHINGS, SAMPLERS, ChainResult, run_chains
from ..sampler.registry import SAMPLERS as SAMPLER_SPECS
from ..sampler.registry import TUNERS, SmileOptions, options_for
from ..io.trace_io import DEFAULT_DRAWS_PER_CHAIN, default_thin, require_arviz, write_netcdf
from ._against import against_option, resolve_against
from ._health import health_report
from ._io import check_writable, command_line, emit, handle_errors, info, slow_stage
from ._timings import compile_estimate, record_compile
from ._options import (expansion_keys, LoadedProblem, check_batch_size, load_npy, load_problem, output_options,
                       parse_inv_temperature, temperature_json)
from ._shared_options import batch_options, compose, data_options
from ._readable import health_row, next_line
from ._render import coordinate_table, key_values, matrix_summary

step_options = compose(
    click.option("--step-size", type=float, default=None, help="Scalar step λ (Λ = λI)."),
    click.option("--lambda", "lambda_path", type=click.Path(dir_okay=False), default=None,
                 help="Step-size matrix Λ from a .npy file: (D, D) dense or (D,) diagonal (e.g. `sgtune lambda -o`)."),
)

def check_steps(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """--steps in [1, MAX_STEPS]: an absurd length is a one-line usage error, not a run that never ends
    (or overflows the kernels' counters)."""
    if value is not None and not 1 <= value <= MAX_STEPS:
        raise click.BadParameter(f"{value} is not a number of steps in [1, 10^12]; give a run length such as "
                                 "20000 (sgtune plan --tolerance E proposes one)", ctx=ctx, param=param)
    return value


steps_option = click.option("--steps", type=int, default=None, callback=check_steps,
                            help="Steps per chain T, burn-in included (at most 10^12).")

chain_options = compose(
    steps_option,
    click.option("--burn-in", type=int, default=None, help="Steps discarded before the moments (default T/10)."),
    click.option("--chains", type=int, default=16, show_default=True, help="Independent chains C (run in parallel)."),
    click.option("--batches-per-chain", type=click.IntRange(min=1), default=None,
                 help="Segments per chain for batch-means standard errors (default ceil(32/C), rounded up to even: the halves of the non-stationarity check; at most the kept steps, and 2 or more in all). Each must be many autocorrelation times long: shorter ones make the standard errors too small (health: batch_length, a warning)."),
)


#: what a first run says while numba compiles the sampler; the time is what this machine measured for the model's
#: kind (:mod:`sgtune.cli._timings`), not a constant (22 s of CPU for a logistic model, 258 s for a network on a
#: loaded VM); later runs load the compiled code from the cache in about a second
COMPILE_NOTICE = "compiling the sampler for this model, once (later runs reuse it): {estimate}"
#: preparing the sampler longer than this (seconds) means it is being compiled, not loaded from the cache
COMPILE_NOTICE_AFTER = 1.0


class _SamplerBar:
    """A click progress bar on stderr whose first update (the sampler reports 0 steps once it is compiled)
    ends the first-compile notice; the notice appears when preparing takes over
    :data:`COMPILE_NOTICE_AFTER` seconds."""

    def __init__(self, label: str, length: int, kind: str = "sampler") -> None:
        self.notice = slow_stage(COMPILE_NOTICE.format(estimate=compile_estimate(kind)), after=COMPILE_NOTICE_AFTER)
        self.bar = click.progressbar(length=length, label=label, file=sys.stderr)
        self.clock = _CompileClock(kind)

    def __enter__(self) -> "_SamplerBar":
        self.clock.start()
        self.notice.__enter__()
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.notice.timer.cancel()
        self.bar.__exit__(*exc)

    @property
    def length(self) -> int:
        return int(self.bar.length)

    @length.setter
    def length(self, value: int) -> None:
        self.bar.length = value

    def update(self, n: int) -> None:
        self.clock.first_update()
        self.notice.cancel()
        self.bar.update(n)


class _CompileClock:
    """Time from the start of a run to the sampler's first progress report (it reports 0 steps once it is ready);
    longer than COMPILE_NOTICE_AFTER means numba compiled it: recorded for the model's kind (:mod:`._timings`)."""

    def __init__(self, kind: str) -> None:
        self.kind, self.tic = kind, None

    def start(self) -> None:
        import time

        self.tic = time.perf_counter()

    def first_update(self) -> None:
        import time

        if self.tic is None:
            return
        seconds, self.tic = time.perf_counter() - self.tic, None
        if seconds > COMPILE_NOTICE_AFTER:
            record_compile(self.kind, seconds)


def progress_bar(quiet: bool, label: str, length: int, kind: str = "sampler") -> Any:
    """A click progress bar on stderr, with the first-compile notice quoting this machine's measured compile time
    for ``kind`` (the model's name), and the compile timed for the record (a no-op context when quiet)."""
    if quiet:
        class _Null:
            def __enter__(self) -> "_Null":
                return self

            def __exit__(self, *a: object) -> None:
                return None

            def update(self, n: int) -> None:
                return None
        return _Null()
    return _SamplerBar(label, length, kind)


def step_arguments(kw: dict[str, Any]) -> tuple[str, ...]:
    """The step-size options as typed, for a next command (none given: a tuned Λ, saved as lambda.npy)."""
    if kw.get("step_size") is not None:
        return ("--step-size", str(kw["step_size"]))
    if kw.get("lambda_path") is not None:
        return ("--lambda", str(kw["lambda_path"]))
    return ("--lambda", "lambda.npy")


def resolve_step(kw: dict[str, Any], dim: int) -> Any:
    """Λ from --step-size or --lambda (exactly one)."""
    if (kw.get("step_size") is None) == (kw.get("lambda_path") is None):
        raise click.UsageError("give exactly one of --step-size L or --lambda FILE.npy")
    if kw.get("step_size") is not None:
        lam = float(kw["step_size"])
        if not lam > 0 or math.isinf(lam):
            raise SgtuneError(f"--step-size must be a finite number > 0, got {kw['step_size']}")
        return lam
    arr = load_npy(str(kw["lambda_path"]), "--lambda")
    if arr.shape not in ((dim,), (dim, dim)):
        raise SgtuneError(f"--lambda must hold a (D, D) = ({dim}, {dim}) or (D,) array but has shape {arr.shape}")
    return arr


SAMPLER_HELP = ("sgld: SG(L)D/SGD (any Λ); sglrw: Mensch et al. (2025) eq. 12; clipped-sgld: Mensch et al. (2025) eq. 18 (diagonal Λ, β < ∞); "
                "sghmc: vanilla SGHMC (time step h = --step-size, --friction γ); smile-naive, psmile-naive: "
                "MCLMC with minibatch gradients, no injected noise (ε = --step-size, the distance moved per step; "
                "psmile: diagonal preconditioner from gradient EMAs); smile, psmile: the same with the "
                "energy-variance step-size tuner (--step-size is the initial ε). sghmc and the SMILE samplers "
                "need a scalar --step-size, no --momentum, and sample exp(−β(L + θᵀΓθ/(2N))) with β = N unless "
                "--inverse-temperature is given.")

sampler_options = compose(
    click.option("--sampler", type=click.Choice(SAMPLERS), default="sgld", show_default=True, help=SAMPLER_HELP),
    click.option("--friction", type=float, default=1.0, show_default=True, help="SGHMC's friction γ > 0."),
    click.option("--tuner", type=click.Choice(TUNERS), default="anchored", show_default=True,
                 help="The step-size rule of smile/psmile: anchored (ε moves toward the energy-error variance "
                      "per dimension Var[ΔE]/d = 5e-5, a stable fixed point) or paper (the SMILE paper's eq. (7) "
                      "as printed; its log ε drifts down by ≈ 7e-4 per step). Ignored by the other samplers."),
    click.option("--guardrail-floor", "guardrail_floor", default="0", show_default=True, metavar="K",
                 help="smile/psmile with --tuner anchored: the guardrail (eq. (6): reject a step whose energy error "
                      "abs(ΔE) exceeds the 0.98 quantile of the Gamma fitted to the chain's own abs(ΔE)) rejects "
                      "only if abs(ΔE) also "
                      "exceeds k·sqrt(D·5e-5), k = this number ≥ 0; 0 is eq. (6) as printed, inf switches the "
                      "guardrail off (a non-finite ΔE is still rejected). Ignored by the other samplers."),
    click.option("--refresh-length", "refresh_length", default=None, metavar="auto|off|L",
                 help="The SMILE samplers' partial velocity refresh (MCLMC's noise η dW): after each step "
                      "u ← (c·u + sqrt(1 − c²)·z/sqrt(D))/norm, c = exp(−ε/L). auto: L = sqrt(Σ Var θ'ᵢ) of the "
                      "chain's own path (default of smile/psmile); off: none, the SMILE paper's samplers (default "
                      "of smile-naive/psmile-naive), whose chains stay off the posterior on most GLMs; or a "
                      "length L > 0. Ignored by the other samplers."),
    click.option("--noise-weight", "noise_weight", default="0", show_default=True, metavar="W",
                 help="smile/psmile with --tuner anchored: also hold the anisotropic minibatch noise's work per step "
                      "and dimension, estimated from successive gradients at one point, at 5e-5/W (0: off). The "
                      "energy error cannot see the bias that noise causes; W > 0 lowers ε where it is large. "
                      "Ignored by the other samplers."),
    click.option("--noise-bias", "noise_bias", default=None, metavar="TAU|off",
                 help="The SMILE samplers with the velocity refresh: hold the bias the anisotropic minibatch noise "
                      "causes in the chain's covariance at TAU (a fraction, e.g. 0.05; default off). The noise, "
                      "estimated from successive gradients at one point, heats the velocity in some directions more "
                      "than the refresh does in all; TAU shortens the refresh until that excess is at most TAU (down "
                      "to a complete refresh every step), at a cost in mixing. The JSON reports the predicted bias "
                      "either way (noise_bias_predicted). Ignored by the other samplers and without the refresh."),
)


def sampler_settings(kw: dict[str, Any], sampler: str) -> Any:
    """The options object of ``sampler`` from --friction, --tuner, --guardrail-floor, --refresh-length,
    --noise-weight and --noise-bias. The SMILE settings are checked by :class:`~sgtune.sampler.SmileOptions`, whose
    messages name the options (``PARAM_OPTIONS``), whatever the sampler: the others ignore them, but a bad value is
    still refused."""
    smile = {"guardrail_floor": kw.get("guardrail_floor") or "0", "refresh_length": kw.get("refresh_length"),
             "noise_weight": kw.get("noise_weight") or "0", "noise_bias": kw.get("noise_bias")}
    SmileOptions(**smile)
    return options_for(sampler, friction=float(kw.get("friction") or 1.0), tuner=str(kw.get("tuner") or "anchored"),
                       **smile)


def sampler_temperature(kw: dict[str, Any], sampler: str, n_data: int) -> float:
    """β from --inverse-temperature; left at its default, N for sghmc and the SMILE samplers (they need β < ∞)."""
    ctx = click.get_current_context(silent=True)
    default = ctx is not None and ctx.get_parameter_source("inverse_temperature") in (
        click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)
    if SAMPLER_SPECS[sampler].default_beta == "n_data" and default:
        return float(n_data)
    beta = parse_inv_temperature(kw["inverse_temperature"], n_data)
    if SAMPLER_SPECS[sampler].default_beta == "n_data" and math.isinf(beta):  # given explicitly: refused
        raise SgtuneError(f"sampler {sampler!r} samples exp(−β(L + θᵀΓθ/(2N))) and needs a finite inverse "
                          "temperature (--inverse-temperature), got inf; pass N (the posterior, the default) or a number")
    return beta


def smile_json(res: ChainResult) -> dict[str, Any]:
    """The keys SMILE runs add (per chain): step_size_final, rejection_fraction, energy_error_mean, …"""
    if res.step_size_final is None:
        return {}
    out: dict[str, Any] = {"step_size_final": res.step_size_final, "rejection_fraction": res.rejection_fraction,
                           "energy_error_mean": res.energy_error_mean,
                           "energy_error_abs_mean": res.energy_error_abs_mean,
                           "energy_error_var_per_dim": res.energy_error_var_per_dim}
    if res.preconditioner is not None:
        out["preconditioner"] = res.preconditioner
    if res.settings.get("sampler") in ("smile", "psmile"):
        out["tuner"] = res.settings.get("tuner", "anchored")
        floor = float(res.settings.get("guardrail_floor", 0.0))
        out["guardrail_floor"] = "inf" if math.isinf(floor) else floor
    if str(res.settings.get("sampler", "")).endswith(("smile", "smile-naive")):
        out["refresh_length"] = res.settings.get("refresh_length")
        out["noise_bias"] = float(res.settings.get("noise_bias", 0.0))
        for key in ("refresh_length_final", "refresh_capped", "noise_bias_predicted"):
            if getattr(res, key, None) is not None:
                out[key] = getattr(res, key)
    if res.settings.get("sampler") in ("smile", "psmile"):
        out["noise_weight"] = float(res.settings.get("noise_weight", 0.0))
    return out


def execute_chains(prob: LoadedProblem, step: Any, kw: dict[str, Any], *, sampler: str, batching: str,
                   steps: int, burn_in: int | None, inv_temperature: float, decay: float = 0.0,
                   thin: int = 0) -> ChainResult:
    """Run the chains described by the shared options, with a progress bar on stderr."""
    n = prob.dataset.n_data
    B = check_batch_size(int(kw["batch_size"]), n)
    quiet = bool(kw.get("quiet"))
    state = {"last": 0}
    with progress_bar(quiet, f"{kw['chains']} chains × {steps} steps", steps, kind=str(prob.model.name)) as bar:

        def progress(done: int, total: int) -> None:
            bar.update(done - state["last"])
            state["last"] = done

        return run_chains(prob.model, prob.dataset,
                          Dynamics(step, B, inv_temperature=inv_temperature, momentum=float(kw["momentum"]),
                                   batching=batching, decay=decay),
                          RunSpec(steps, n_chains=int(kw["chains"]), burn_in=burn_in, thin=thin,
                                  batches_per_chain=kw.get("batches_per_chain"), seed=int(kw["seed"])),
                          sampler_settings(kw, sampler),
                          prior_precision=prob.prior_precision, initial=prob.expansion.theta_hat,
                          progress=None if quiet else progress)


def resolve_trace_format(kw: dict[str, Any]) -> bool:
    """True when -o is to be an ArviZ netCDF file (--format netcdf, or -o *.nc); checks --thin and arviz first."""
    out = str(kw.get("output") or "")
    fmt = kw.get("out_format") or ("netcdf" if out.lower().endswith(".nc") else "npz")
    claims = ".nc" if out.lower().endswith(".nc") else ".npz" if out.lower().endswith(".npz") else None
    if out and kw.get("out_format") and claims is not None and (claims == ".nc") != (fmt == "netcdf"):
        raise click.UsageError(f"--format {fmt} writes {'a netCDF file' if fmt == 'netcdf' else 'an .npz archive'}"
                               f" but --output {out} ends in {Path(out).suffix}; give --output a name ending in "
                               f"{'.nc' if fmt == 'netcdf' else '.npz'}, or leave --format out")
    if fmt != "netcdf":
        return False
    if not out:
        raise click.UsageError("--format netcdf needs -o FILE.nc")
    require_arviz()  # without --thin, the command picks one once D is known (trace_io.default_thin)
    return True


def check_thin(kw: dict[str, Any]) -> None:
    """--thin larger than the steps after burn-in keeps no draw at all: a usage error naming both."""
    thin, steps, burn_in = kw.get("thin") or 0, kw.get("steps"), kw.get("burn_in")
    if thin <= 0 or steps is None or steps < 1:
        return
    post = steps - (steps // 10 if burn_in is None else burn_in)
    if 0 < post < thin:
        raise click.BadParameter(f"{thin} keeps no draw of the {post} steps after burn-in (--steps {steps}, burn-in "
                                 f"{steps - post}); give --thin at most {post}, or more --steps",
                                 param_hint="'--thin'")


def resolve_batching(kw: dict[str, Any]) -> str:
    batching = kw.get("batching")
    if batching is None:
        return "without-replacement" if kw.get("without_replacement") else "replacement"
    if kw.get("without_replacement") and batching != "without-replacement":
        raise click.UsageError(f"--without-replacement contradicts --batching {batching}")
    return str(batching)


def chain_json(res: ChainResult) -> dict[str, Any]:
    """The JSON keys every chain-running command reports."""
    return {
        "mean": res.mean, "cov": res.cov, "cov_standard_error": res.cov_standard_error,
        "mean_standard_error": res.mean_standard_error, "ess": res.ess, "n_batches": res.n_batches,
        "seconds": res.seconds, "compile_seconds": res.compile_seconds,
        "iterations_per_second": res.iterations_per_second, "steps": res.n_steps, "burn_in": res.burn_in,
        "chains": res.n_chains, "diverged_chains": [int(c) for c in np.flatnonzero(res.diverged_at >= 0)],
        "clip_fraction": res.clip_fraction,
    }


@click.command("run")
@data_options
@batch_options
@step_options
@sampler_options
@click.option("--batching", type=click.Choice(BATCHINGS), default=None,
              help="Minibatches: replacement (default), without-replacement (per step) or reshuffle (per epoch).")
@chain_options
@click.option("--thin", type=int, default=0, show_default=True,
              help="Keep every k-th draw after burn-in in the -o file (0: no draws; with -o *.nc a default keeps at "
                   "most 1000 draws per chain, echoed).")
@click.option("--decay", type=float, default=0.0, show_default=True,
              help="Schedule exponent γ: Λ_t = Λ·(1+t)^−γ (t = 0, 1, …).")
@against_option
@click.option("--format", "out_format", type=click.Choice(["npz", "netcdf"]), default=None,
              help="Format of -o: npz (default) or netcdf, an ArviZ InferenceData of the --thin draws "
                   "(default when -o ends in .nc; needs pip install 'sgtune[arviz]').")
@output_options
@handle_errors
def cli(**kw: Any) -> None:
    """Run C chains of SG(L)D from the MAP θ̂ with the numba kernels; report pooled moments.

    \b
    Update: θ ← θ − Λ G_t(θ) + sqrt(2Λ/β) ξ,  G_t = (1/B)Σ_{n∈batch} ∇l_n(θ) + Γθ/N;
    momentum κ: m ← κm + G_t, θ ← θ − Λm + sqrt(2Λ/β) ξ.
    Standard errors are batch means over chain segments (K batches, reported).
    sghmc: v ← v + h(−βG_t − γv) + sqrt(2γh) ξ, θ ← θ + h v (h = --step-size).
    smile-naive/psmile-naive/smile/psmile: MCLMC (the SMILE paper (2025)), minimal-norm integrator on one
    minibatch per step (3 gradients), ε = --step-size (initial ε for smile/psmile; --tuner anchored
    moves it toward Var[ΔE]/d = 5e-5, --tuner paper is the SMILE paper's eq. (7), which drifts down).
    JSON keys: parameter_names (the name of each coordinate of θ, in θ order),
    mean, cov, cov_standard_error, ess, seconds, iterations_per_second, health, ...
    health: healthy, reasons, diverged, frozen (a collapsed tuned step size, or ESS below 1 %
    of the draws and below 100), nonstationary (each chain's second half against its first),
    prediction_check (sgld: the linearised chain's Σ(Λ); smile/psmile: (βH)⁻¹; within 5 %
    and Monte Carlo error; D ≤ 200, smile/psmile D ≤ 2000; --against target|FILE.npy compares with that instead, and
    --lambda LAM.npy with a JSON sidecar LAM.json from `sgtune lambda --refine` with its target
    by default; keys against, against_source, against_tolerance), batch_length (batches too short for the chains'
    autocorrelation time: standard errors too small); every reason is a warning, and --strict exits 4.
    SMILE runs add tuner, guardrail_floor, noise_weight (smile/psmile), refresh_length, noise_bias (every SMILE
    sampler) and (one entry per chain) step_size_final,
    rejection_fraction, energy_error_mean, energy_error_abs_mean, energy_error_var_per_dim (ΔE²/D),
    refresh_length_final (the refresh length at the end), noise_bias_predicted (the covariance's predicted bias
    along the minibatch noise's noisiest direction, a warning when large), refresh_capped (with --noise-bias: the
    cap shortened the refresh), and for
    psmile preconditioner (C, D); -o adds step_size_trace (C, T') with --thin.
    -o FILE.npz stores mean, cov, cov_standard_error, chain_means, chain_covs, diverged_at
    (and draws (C, T', D) with --thin). -o trace.nc (or --format netcdf) writes an ArviZ
    InferenceData instead: posterior theta (chain, draw, theta_dim) of the --thin draws,
    constant_data theta_hat and step_matrix, the sampler settings as attributes
    (arviz.from_netcdf, az.rhat, az.ess and ArviZ's plots work on it).
    Example:  sgtune run --example hetero-linear --batch-size 64 --step-size 0.01 --steps 20000
    """
    if str(kw.get("lambda_path") or "").lower().endswith(".npz"):  # kronecker family: torch chains, probes
        from ._kronecker_verify import run_kronecker
        return run_kronecker(kw)
    check_writable(kw["output"], bool(kw["overwrite"]), "--output")
    check_writable(kw["json_path"], bool(kw["overwrite"]), "--json")
    if kw["steps"] is None:
        raise click.UsageError("--steps T is required")
    check_thin(kw)
    netcdf = resolve_trace_format(kw)
    prob = load_problem(kw)
    n, d = prob.dataset.n_data, prob.dim
    step = resolve_step(kw, d)
    if netcdf and not kw["thin"]:  # the file holds draws: a thinning that keeps it a sensible size, echoed
        kw["thin"] = default_thin(int(kw["steps"]), kw["burn_in"], int(kw["chains"]), d)
        info(f"-o {kw['output']}: keeping every {kw['thin']}-th draw after burn-in (--thin {kw['thin']}: at most "
             f"{DEFAULT_DRAWS_PER_CHAIN} draws per chain; pass --thin to choose)", bool(kw["quiet"]))
    beta = sampler_temperature(kw, str(kw["sampler"]), n)
    batching = resolve_batching(kw)
    ag = resolve_against(kw["against"], dim=d, lambda_path=kw["lambda_path"], lam=step, quiet=bool(kw["quiet"]))
    res = execute_chains(prob, step, kw, sampler=str(kw["sampler"]), batching=batching, steps=int(kw["steps"]),
                         burn_in=kw["burn_in"], inv_temperature=beta, decay=float(kw["decay"]),
                         thin=int(kw["thin"]))
    doc = {**expansion_keys(prob.expansion), **chain_json(res), "theta_hat": prob.expansion.theta_hat, "sampler": kw["sampler"],
           "batching": batching, "batch_size": int(kw["batch_size"]), "n_data": n, "dim": d,
           "inverse_temperature": temperature_json(beta), "momentum": float(kw["momentum"]),
           "decay": float(kw["decay"]), "thin": int(kw["thin"]), **ag.to_dict(), "model": prob.model.name, "seed": int(kw["seed"]),
           "data": prob.dataset.source, "command": command_line(), "references": references_of(run_chains),
           **smile_json(res)}
    if "friction" in res.settings:  # the samplers with a friction (SGHMC)
        doc["friction"] = float(res.settings["friction"])
    doc["health"] = health_report(res, initial_step_size=step if SAMPLER_SPECS[kw["sampler"]].mclmc else None,
                                  predict=dict(expansion=prob.expansion, step_matrix=step, sampler=str(kw["sampler"]),
                                               batch_size=int(kw["batch_size"]), inv_temperature=beta, n_data=n,
                                               batching=batching, momentum=float(kw["momentum"]),
                                               decay=float(kw["decay"])), against=ag)
    arrays = {"mean": res.mean, "cov": res.cov, "cov_standard_error": res.cov_standard_error,
              "chain_means": res.chain_means, "chain_covs": res.chain_covs, "diverged_at": res.diverged_at,
              "seed": np.array(int(kw["seed"]))}
    if res.trace is not None:
        arrays["draws"] = res.trace
    if res.step_size_trace is not None:
        arrays["step_size_trace"] = res.step_size_trace
    if netcdf:
        dumps(doc)  # a document that cannot be written fails before the trace file exists
        write_netcdf(res.to_inference_data(theta_hat=prob.expansion.theta_hat, step_matrix=step,
                                           attrs={"command": command_line(), "data": prob.dataset.source,
                                                  "model": prob.model.name}), kw["output"])
    emit(doc, kw["json_path"], arrays={None if netcdf else kw["output"]: arrays})
    info(coordinate_table(res.summary()) + "\n" + matrix_summary("empirical cov", res.cov, names=res.parameter_names)
         + "\n" + key_values([
        ("chains × steps", f"{res.n_chains} × {res.n_steps} (burn-in {res.burn_in})"),
        ("min ESS", float(np.min(res.ess))), ("seconds", res.seconds),
        ("iterations/s", res.iterations_per_second), ("diverged chains", res.n_diverged),
        health_row(doc["health"])]) + "\n" + next_line("verify", *step_arguments(kw)), bool(kw["quiet"]))
