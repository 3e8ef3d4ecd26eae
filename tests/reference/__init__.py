"""Pure-Python reference implementations of the sampler's compiled engines: the oracles of the tests.

Written independently of the numba code (NumPy per step, the GLM derivatives of :mod:`sgtune.models`, the
random streams of :class:`sgtune.sampler.rng.Xoshiro256PP`); kernel and reference agree to rounding on
the same seed. Every entry point's reference is the public :mod:`sgtune.sampler.reference` (``ReferenceBackend``:
the data, quadratic and reshuffle chains, GNLD's replicas and the SMILE ensembles); here are the keywords the
parametrised tests share.
"""
from sgtune.sampler.reference import ReferenceBackend

__all__ = ["chain_kw", "ensemble_kw"]


def chain_kw(step, *, batch_size=1, inv_temperature=None, momentum=0.0, batching="replacement", decay=0.0,
             n_steps, n_chains=4, burn_in=None, thin=0, batches_per_chain=None, seed=0, sampler="sgld", **rest):
    """A flat dict of chain settings (parametrised tests share one) as the keywords of
    ``run_chains(model, data, dynamics=…, run=…, options=…, …)``: Dynamics, RunSpec and the sampler's
    options; the other keywords passed through."""
    import math

    from sgtune.core.config import Dynamics, RunSpec
    from sgtune.sampler.registry import options_for

    tuner = {k: rest.pop(k) for k in ("friction", "ema_rate", "precond_rate", "guardrail", "adapt_a", "adapt_delta",
                                      "tune_start", "precond_start", "tuner", "noise_weight") if k in rest}
    if rest.get("backend") == "python":
        rest["backend"] = ReferenceBackend()
    beta = math.inf if inv_temperature is None else inv_temperature
    return {"dynamics": Dynamics(step, batch_size, inv_temperature=beta, momentum=momentum, batching=batching,
                                 decay=decay),
            "run": RunSpec(n_steps, n_chains=n_chains, burn_in=burn_in, thin=thin, batches_per_chain=batches_per_chain,
                           seed=seed),
            "options": options_for(sampler, **tuner), **rest}


def ensemble_kw(sampler, step_size, *, n_steps, n_chains=10, burn_in=None, thin=0, seed=0, **rest):
    """The same for ``run_smile_ensemble(target, step_size=…, run=…, options=…)`` (``kappa`` is the guardrail)."""
    from sgtune.core.config import RunSpec
    from sgtune.sampler.smile_ensemble import ensemble_options

    tuner = {k: rest.pop(k) for k in ("friction", "ema_rate", "precond_rate", "kappa", "adapt_a", "adapt_delta",
                                      "tune_start", "precond_start", "tuner", "noise_weight", "guardrail_floor") if k in rest}
    if rest.get("backend") == "python":
        rest["backend"] = ReferenceBackend()
    return {"step_size": step_size, "run": RunSpec(n_steps, n_chains=n_chains, burn_in=burn_in, thin=thin, seed=seed),
            "options": ensemble_options(sampler, tuner), **rest}
