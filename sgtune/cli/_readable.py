"""Rows of the human tables (stderr) that say what a number means: what a good value is, a health and an
applicability line, and the natural next command. The JSON carries the numbers; this is only wording."""
from __future__ import annotations

import math
import shlex
from typing import Any

import click

from ..theory.applicability import MAX_DEVIATION, MAX_EQUILIBRATION_RATIO
from ._names import ARGV

#: independent posterior draws score up to this multiple of ``ksd_iid_reference`` (measured: Laplace draws on
#: the bundled logistic and Poisson examples, n = 300 and 1000 draws, 20 seeds each: 0.82–1.72×)
KSD_IID_SPREAD = 2.0
#: fewer PIT values than this: their KS statistic is not shown (the 5 % critical value is above 0.29, so
#: it cannot tell calibrated from not)
MIN_KS_VALUES = 20


def ksd_row(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """The KSD against the posterior next to what independent posterior draws score."""
    if "ksd" not in doc:
        return []
    ksd, ref = float(doc["ksd"]), float(doc["ksd_iid_reference"])
    if doc.get("target") == "sandwich" or doc.get("inverse_temperature") == "inf":
        aim = "SGD (β = inf)" if doc.get("inverse_temperature") == "inf" else "Λ tuned to the sandwich"
        return [("KSD (vs the posterior)", f"{ksd:.4g} vs {ref:.2g} for independent posterior draws; this chain does "
                                           f"not target the posterior ({aim}), so a larger value is expected and "
                                           "says nothing against the run (the covariance check above is its test)")]
    ratio = ksd / ref if ref > 0 else math.inf
    verdict = (f"as close as independent draws (they score up to {KSD_IID_SPREAD:g}× that)"
               if ratio <= KSD_IID_SPREAD else
               f"{ratio:.2g}× that: further from the posterior than independent draws (correlated draws, or "
               "a distribution other than the posterior: SGD targets the sandwich)")
    return [("KSD to the posterior", f"{ksd:.4g} vs {ref:.2g} for independent posterior draws (lower is closer); "
                                     f"{verdict}")]


def ks_row(ks: float | None, n_values: int) -> list[tuple[str, Any]]:
    """The calibration KS statistic, or why it is not shown."""
    if ks is None:
        return []
    if n_values < MIN_KS_VALUES:
        return [("calibration KS", f"not shown: {n_values} PIT values (one per coordinate) are too few for a KS "
                                   f"statistic to tell calibrated from not (needs ≥ {MIN_KS_VALUES})")]
    crit = 1.36 / math.sqrt(n_values)
    verdict = "consistent with calibrated" if ks <= crit else "NOT calibrated"
    return [("calibration KS", f"{ks:.3g} vs {crit:.2g} (5 % critical value, {n_values} PIT values): {verdict}")]


def health_row(health: dict[str, Any]) -> tuple[str, Any]:
    """One line: healthy, or the first reason (the rest are warnings)."""
    if health.get("healthy", True):
        return ("health", "ok (no diverged, frozen or non-stationary chain)")
    reasons = health.get("reasons") or []
    more = f" (+{len(reasons) - 1} more, see the warnings)" if len(reasons) > 1 else ""
    return ("health", f"UNHEALTHY: {reasons[0] if reasons else 'see the warnings'}{more}")


def applicability_rows(doc: dict[str, Any], tau_worst: float) -> list[tuple[str, Any]]:
    """The verdict, equilibration next to τ, and the predicted deviation (rows not computed are left out)."""
    if not doc.get("checked", True):
        return [("applicable", f"not checked ({doc['reason']})"), ("tau (worst)", _tau(tau_worst))]
    rows: list[tuple[str, Any]] = [
        ("applicable", "yes: the chain on the loss behaves like the linearised chain the prediction is exact for"
         if doc["applicable"] else "NO (see the warnings)")]
    eq = doc["equilibration_steps"]
    if not isinstance(eq, str):
        rows.append(("equilibration steps", f"{eq:.4g} (from θ̂ to within 1 % of stationary; fine up to "
                                            f"{MAX_EQUILIBRATION_RATIO:g} τ)"))
    rows.append(("tau (worst)", _tau(tau_worst)))
    dev = doc.get("predicted_deviation")
    if isinstance(dev, (int, float)) and math.isfinite(dev):
        rows.append(("non-quadratic deviation", f"{dev:.3g} (how much the loss beyond its quadratic changes the "
                                                f"prediction; fine below {MAX_DEVIATION:g})"))
        shift = doc.get("mean_shift")
        if isinstance(shift, (int, float)) and math.isfinite(shift):
            rows.append(("mean shift", f"{shift:.3g} sd (the chain's mean away from θ̂; 0 is none)"))
    return rows


def _tau(tau: float) -> str:
    return f"{tau:.4g} steps between effectively independent draws (1 is independent)"


#: click parameter names of the options that describe the problem (repeated in a next command)
_PROBLEM = ("data", "example", "response", "intercept", "model", "hidden_sizes", "activation", "likelihood", "hessian",
            "theta_hat", "noise_variance", "beta_power", "prior_precision", "prior_precision_matrix", "subsample",
            "seed", "scheduler", "batch_size", "without_replacement", "inverse_temperature", "momentum", "config_path",
            "features", "features_from", "head", "layout", "fit")


def problem_arguments() -> list[str]:
    """The arguments of the running command that describe the problem (DATA, --model, --batch-size, …, as
    typed; those from the project file are not repeated: the next command reads the file too)."""
    ctx = click.get_current_context(silent=True)
    argv = list(ARGV.get())
    if ctx is None or not argv:
        return []
    by_opt: dict[str, click.Parameter] = {o: p for p in ctx.command.params for o in (*p.opts, *p.secondary_opts)}
    out: list[str] = []
    i = 1 if argv and argv[0] == ctx.info_name else 0
    if i == 0 and ctx.info_name in argv:  # group options first (sgtune --config F lambda …)
        j = argv.index(ctx.info_name)
        out += argv[:j]
        i = j + 1
    while i < len(argv):
        a = argv[i]
        name, _, inline = a.partition("=")
        p = by_opt.get(name) if a.startswith("-") else None
        if a.startswith("-") and p is None:
            i += 1
            continue
        if p is None:  # a positional: DATA
            if any(isinstance(q, click.Argument) and q.name == "data" for q in ctx.command.params):
                out.append(a)
            i += 1
            continue
        takes_value = not (isinstance(p, click.Option) and (p.is_flag or p.count))
        if p.name in _PROBLEM:
            out.append(a)
            if takes_value and not inline and i + 1 < len(argv):
                out.append(argv[i + 1])
        i += 2 if takes_value and not inline else 1
    return out


def next_line(command: str, *extra: str) -> str:
    """``next: sgtune COMMAND <the problem's arguments> EXTRA`` (shell-quoted)."""
    return "next: " + shlex.join(["sgtune", command, *problem_arguments(), *extra])
