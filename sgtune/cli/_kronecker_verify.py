"""``sgtune verify --lambda L.npz`` and ``sgtune run --lambda L.npz``: a Kronecker-factored Λ on the real network.

The ``.npz`` is what ``sgtune lambda --family kronecker -o L.npz`` writes (per-layer factors and the settings
B, β, κ, batching and prior δ they were tuned for; :func:`load_kronecker` reads it). The network is
``--model net.py:NET`` (a torch module at its current weights, or ``--theta-hat``) or ``--model mlp`` (sgtune's
network, built in torch at ``--theta-hat`` or its fitted θ̂). The chain runs in PyTorch with the per-layer,
matrix-free optimizer (:func:`sgtune.io.kronecker_torch.kronecker_torch_optimizer`) from θ̂, with the file's
settings, and its variance along probe directions (random, and per layer its least and most variable
direction) is compared with the factored prediction vᵀΣv (:func:`sgtune.workflows.kronecker_probes.probe_check`).
No D×D object.

``--chains C`` (default 1 here) runs C independent chains one after another, chain c with seed s + 2c for its
minibatches and s + 2c + 1 for its noise (s = ``--seed``; chain 0 is the single chain), all on the same probes;
the measured variance is the chains' mean and its MCSE √(Σ_c MCSE_c²)/C (batch means within each chain).

verify's test per probe: z = (measured − predicted)/√(MCSE² + (r·predicted)²), r the allowed model error
(``--relative-tolerance``, default 0.10: the family is not exact for the real network, and an applicable result
is within 10 % on the probes); rejected (exit 3) when max |z| exceeds the Bonferroni
t-quantile t_{C(K−1)}(1 − α/(2k)) over the k probes (K batches per chain), or when a chain diverges. The JSON carries the probes under
``probes`` and the matrix-free applicability checks (:mod:`sgtune.workflows.kronecker_applicability`) under
``applicability`` (skipped with ``--no-applicability``).
"""
from __future__ import annotations

import math
from typing import Any

import click
import numpy as np

from ..core.errors import SgtuneError
from ._io import EXIT_VERIFY_FAILED, check_writable, command_line, emit, info, untrusted
from ._options import temperature_json

__all__ = ["verify_kronecker", "run_kronecker", "load_kronecker", "DEFAULT_RELATIVE_TOLERANCE", "n_chains",
           "pool_chains"]

#: the default allowed model error r of a probe (relative): an applicable result is "within 10 % on the probes"
DEFAULT_RELATIVE_TOLERANCE = 0.10
#: steps of the torch chain when --steps is not given: at least this many, and 100 τ_worst up to MAX_DEFAULT_STEPS
DEFAULT_STEPS = 20000
MAX_DEFAULT_STEPS = 100000
#: most random probes
N_RANDOM = 4


def _settings(res: Any) -> dict[str, Any]:
    dyn = res.dynamics
    return {"batch_size": dyn.batch_size, "inverse_temperature": temperature_json(dyn.inv_temperature),
            "momentum": dyn.momentum, "without_replacement": dyn.without_replacement,
            "prior_precision": res.prior_precision, "target": res.target,
            "prior": res.layers[0].form if res.layers else "damped"}


def load_kronecker(path: Any) -> Any:
    """The :class:`~sgtune.theory.kronecker.KroneckerTuning` in ``--lambda FILE.npz``, or a one-line error."""
    import zipfile

    from ..theory.kronecker import KroneckerTuning

    try:
        return KroneckerTuning.load(path)
    except FileNotFoundError:
        raise SgtuneError(f"--lambda {path}: no such file; write one with `sgtune lambda --family kronecker -o "
                          f"{path}`") from None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise SgtuneError(f"--lambda {path}: not a kronecker step-size file written by sgtune ({exc}); write one "
                          "with `sgtune lambda --family kronecker -o FILE.npz`") from None


def _load(kw: dict[str, Any]) -> tuple[Any, Any, Any, str, float, str]:
    """(result, module, dataset, likelihood, σ², label); the file's B, β, κ and prior are the chain's."""
    from ._kronecker import network_and_data

    res = load_kronecker(kw["lambda_path"])
    given = kw.get("prior_precision")
    if given not in (None, 0.0) and float(given) != res.prior_precision:
        raise click.BadParameter(f"{given} differs from the prior precision {res.prior_precision:g} the step in "
                                 f"{kw['lambda_path']} was tuned with; drop --prior-precision (the file's is used)",
                                 param_hint="'--prior-precision'")
    net, ds, likelihood, sigma2, label = network_and_data(kw, res.prior_precision)
    d = sum(p.numel() for p in net.parameters())
    if d != res.dim:
        raise SgtuneError(f"--lambda {kw['lambda_path']} holds a step for D = {res.dim} parameters but the network "
                          f"has {d}; tune it for this network (sgtune lambda --family kronecker)")
    if ds.n_data != res.n_data:
        raise SgtuneError(f"--lambda {kw['lambda_path']} was tuned on N = {res.n_data} rows but the data has "
                          f"{ds.n_data}; give the data it was tuned on")
    return res, net, ds, likelihood, sigma2, label


def _steps(kw: dict[str, Any], res: Any) -> tuple[int, int | None]:
    tau = max(lay.tau_worst for lay in res.layers)
    steps = int(kw["steps"]) if kw.get("steps") else int(max(DEFAULT_STEPS, min(100 * tau, MAX_DEFAULT_STEPS)))
    return steps, (None if kw.get("burn_in") is None else int(kw["burn_in"]))


def n_chains(kw: dict[str, Any]) -> int:
    """C: ``--chains`` when given on the command line, else 1 (each chain is a full-length PyTorch run; the shared
    default of ``run``/``verify``, 16, is for the compiled sampler)."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    source = None if ctx is None else ctx.get_parameter_source("chains")
    if source in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP) or kw.get("chains") is None:
        return 1
    c = int(kw["chains"])
    if c < 1:
        raise click.BadParameter(f"must be >= 1, got {c}", param_hint="'--chains'")
    return c


def pool_chains(checks: list[Any]) -> Any:
    """One ProbeCheck from C independent chains' (same probes): the mean of their variances, MCSE √(Σ MCSE_c²)/C
    (independent chains: the variance of a mean of C independent estimates), ``n_batches`` per chain."""
    from ..workflows.kronecker_probes import ProbeCheck

    c = len(checks)
    first = checks[0]
    measured = np.mean([pc.measured for pc in checks], axis=0)
    mcse = np.sqrt(np.sum([pc.mcse ** 2 for pc in checks], axis=0)) / c
    return ProbeCheck(first.labels, first.predicted, measured, mcse, (measured - first.predicted) / mcse,
                      measured / first.predicted - 1.0, first.steps, first.burn_in, first.n_batches)


def _chain(res: Any, net: Any, ds: Any, likelihood: str, sigma2: float, kw: dict[str, Any]) -> tuple[Any, str | None]:
    """(ProbeCheck pooled over the chains, or None, why a chain failed). Chain c runs with seed s + 2c (minibatches;
    its noise s + 2c + 1), s = ``--seed``, all on the probes of seed s: chain 0 is the single chain of seed s."""
    from ..workflows.kronecker_probes import probe_check

    steps, burn = _steps(kw, res)
    c, seed = n_chains(kw), int(kw.get("seed") or 0)
    info(f"kronecker: running the network's chain in PyTorch ({steps} steps, D = {res.dim}"
         + (f", {c} independent chains one after another)" if c > 1 else ")"), bool(kw.get("quiet")))
    checks = []
    for i in range(c):
        try:
            checks.append(probe_check(res, net, np.asarray(ds.X), np.asarray(ds.y), likelihood, noise_variance=sigma2,
                                      steps=steps, burn_in=burn, n_random=N_RANDOM,
                                      n_batches=kw.get("batches_per_chain"), seed=seed + 2 * i, probe_seed=seed))
        except SgtuneError as exc:
            if "diverged" not in str(exc):
                raise
            return None, (f"chain {i + 1} of {c}: {exc}" if c > 1 else str(exc))
    return pool_chains(checks), None


def _applicability(res: Any, net: Any, ds: Any, likelihood: str, sigma2: float, kw: dict[str, Any]) -> Any:
    if kw.get("no_applicability"):
        return None
    from ..workflows.kronecker_applicability import CHECK_MAX_DIM, kronecker_applicability

    if res.dim > CHECK_MAX_DIM:
        untrusted(f"kronecker: the matrix-free applicability checks were skipped (D = {res.dim} > {CHECK_MAX_DIM}: "
                  "they take many minutes); the probes below are the measurement")
        return None
    info("kronecker: applicability (matrix-free: the real linearised chain's stability and probe variances)",
         bool(kw.get("quiet")))
    return kronecker_applicability(res, net, np.asarray(ds.X), np.asarray(ds.y), likelihood, noise_variance=sigma2,
                                   n_random=N_RANDOM, seed=int(kw.get("seed") or 0))


def verify_kronecker(kw: dict[str, Any]) -> None:
    """The ``--lambda FILE.npz`` branch of ``sgtune verify`` (module docstring)."""
    from scipy.stats import t as student_t

    check_writable(kw.get("json_path"), bool(kw.get("overwrite")), "--json")
    if kw.get("output"):
        raise click.UsageError("-o/--output is not written by verify --lambda FILE.npz (the probes are in the JSON); "
                               "drop it")
    n_chains(kw)  # a bad --chains is refused before anything runs
    res, net, ds, likelihood, sigma2, label = _load(kw)
    quiet = bool(kw.get("quiet"))
    app = _applicability(res, net, ds, likelihood, sigma2, kw)
    pc, failure = _chain(res, net, ds, likelihood, sigma2, kw)
    r = DEFAULT_RELATIVE_TOLERANCE if kw.get("relative_tolerance") is None else float(kw["relative_tolerance"])
    if not (r >= 0 and math.isfinite(r)):
        raise click.BadParameter(f"must be a finite number >= 0, got {r}", param_hint="'--relative-tolerance'")
    alpha = float(kw.get("alpha") or 1e-3)
    doc: dict[str, Any] = {"family": "kronecker", "mode": "probes", "lambda_file": str(kw["lambda_path"]),
                           "model": label, "dim": res.dim, "n_data": res.n_data, **_settings(res),
                           "relative_tolerance": r, "alpha": alpha, "seed": int(kw.get("seed") or 0),
                           "data": ds.source, "command": command_line()}
    if pc is None:
        doc.update(passed=False, diverged=True, reason=failure, probes=[])
        untrusted(f"kronecker verify: {failure}")
    else:
        k, K, c = len(pc.labels), int(pc.n_batches), n_chains(kw)
        z = (pc.measured - pc.predicted) / np.sqrt(pc.mcse ** 2 + (r * pc.predicted) ** 2)
        threshold = float(student_t.ppf(1.0 - alpha / (2 * k), c * (K - 1)))
        passed = bool(np.all(np.abs(z) <= threshold))
        probes = pc.to_dict()
        for p, zz in zip(probes["probes"], z):
            p["z_with_tolerance"] = float(zz)
        doc.update(passed=passed, diverged=False, z_max=float(np.max(np.abs(z))), threshold=threshold, n_batches=K,
                   n_chains=c, **probes)
        for p in probes["probes"]:
            info(f"  {p['label']:>14}: predicted {p['predicted']:.4g}  measured {p['measured']:.4g} ± {p['mcse']:.2g}"
                 f"  ({p['relative_error']:+.1%})", quiet)
    if app is not None:
        doc["applicability"] = app.to_dict()
        if not app.applicable:
            untrusted("kronecker: not applicable to this network: " + "; ".join(app.reasons))
    emit(doc, kw.get("json_path"))
    info(f"kronecker verify: {'passed' if doc['passed'] else 'REJECTED'}"
         + ("" if pc is None else f" (max |z| {doc['z_max']:.3g}, threshold {doc['threshold']:.3g}, allowed model "
                                  f"error {r:.0%})"), quiet)
    if not doc["passed"]:
        raise click.exceptions.Exit(EXIT_VERIFY_FAILED)


def run_kronecker(kw: dict[str, Any]) -> None:
    """The ``--lambda FILE.npz`` branch of ``sgtune run``: the torch chain's probe variances (module docstring)."""
    check_writable(kw.get("json_path"), bool(kw.get("overwrite")), "--json")
    if kw.get("output"):
        raise click.UsageError("-o/--output is not written by run --lambda FILE.npz (the probes are in the JSON); "
                               "drop it")
    n_chains(kw)
    res, net, ds, likelihood, sigma2, label = _load(kw)
    pc, failure = _chain(res, net, ds, likelihood, sigma2, kw)
    doc: dict[str, Any] = {"family": "kronecker", "lambda_file": str(kw["lambda_path"]), "model": label,
                           "dim": res.dim, "n_data": res.n_data, **_settings(res), "seed": int(kw.get("seed") or 0),
                           "data": ds.source, "command": command_line()}
    if pc is None:
        doc.update(diverged=True, reason=failure, probes=[])
        untrusted(f"kronecker run: {failure}")
    else:
        doc.update(diverged=False, n_chains=n_chains(kw), **pc.to_dict())
    emit(doc, kw.get("json_path"))
